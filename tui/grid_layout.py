"""Where each rank goes in the rank grid (no Textual here: the widget only draws the result).

Ranks are grouped by node, each group under a header line. The form is the richest that fits:

- wide cells, one rank a line, with phase times and GPU figures (a few ranks);
- cells of rank, status, loss, step time, memory held and self-time deviation, several a line;
- compact cells of rank, status mark and self-time deviation (tens to hundreds of ranks);
- a heat map, one character per rank (hundreds to thousands), small nodes packed side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pardash.telemetry import state as st

from .model import LOSS_BAD, SORT_LABELS, STOPPED, STOPPING, RankRow, sort_rows

FORMS = ("auto", "cells", "heat")
"""auto: the richest form that fits; cells: never a heat map (full cells scroll when even
compact ones do not fit); heat: always one."""

LEVEL_GLYPHS = ("▪", "■", "█")
"""A running rank's glyph by how far its self time is over the other ranks' median: ok, "self
+10%", "+25%", heavier the slower (the level has a shape of its own: under NO_COLOR the three
were one ■ in three greys alike, and a rank 30% slow looked as the rest)."""
LEVEL_KEYS = ("running", "dev-warn", "dev-bad")
"""What :func:`heat_legend` is told for a running rank of each level drawn (its style names)."""
HEAT_GLYPHS = {
    st.STARTING: "·",
    st.RUNNING: LEVEL_GLYPHS[0],
    st.STRAGGLER: "▲",
    st.STALLED: "◆",
    st.SILENT: "○",
    st.EXITED: "×",
    st.LEFT_EARLY: "◁",  # (exit 0 as its peers trained on: failures.left_early; □ read as a rank done with the others)
    STOPPING: "◐",  # (a stop began, not ended yet: model.STOPPING; ● running on its way out)
    STOPPED: "▬",  # (exited by a stop, not failing: model.STOPPED)
    st.FINISHED: "□",
    LOSS_BAD: "⊘",  # (a running or finished rank whose loss is not finite: model.LOSS_BAD; as the alerts mark it)
}
"""One character per rank: the shape says the status (the colour says the rest)."""
WAITING_GLYPH = "◇"
"""A stalled rank waiting for the one a hang likely started from (drawn ◆, reversed)."""

LegendItem = tuple[str, str, str]
"""A heat-map legend entry: glyph, style name (``rank-grid--…``), text."""

_LEGEND: tuple[tuple[str | None, LegendItem], ...] = (
    # (what ranks draw it: their status, or their level (LEVEL_KEYS); the entry)
    (LEVEL_KEYS[0], (LEVEL_GLYPHS[0], "running", "ok")),
    (LEVEL_KEYS[1], (LEVEL_GLYPHS[1], "dev-warn", "self +10%")),
    (LEVEL_KEYS[2], (LEVEL_GLYPHS[2], "dev-bad", "+25%")),
    (st.STARTING, (HEAT_GLYPHS[st.STARTING], "starting", "starting")),
    (st.STRAGGLER, (HEAT_GLYPHS[st.STRAGGLER], "straggler", "straggler")),
    (st.STALLED, (HEAT_GLYPHS[st.STALLED], "stalled", "stalled")),
    ("waiting", (WAITING_GLYPH, "waiting", "waiting")),
    (st.SILENT, (HEAT_GLYPHS[st.SILENT], "silent", "silent")),
    (st.EXITED, (HEAT_GLYPHS[st.EXITED], "exited", "exited")),
    (st.LEFT_EARLY, (HEAT_GLYPHS[st.LEFT_EARLY], "left", "left early")),
    (STOPPING, (HEAT_GLYPHS[STOPPING], "stopping", "stopping")),
    (STOPPED, (HEAT_GLYPHS[STOPPED], "stopped", "stopped")),
    (st.FINISHED, (HEAT_GLYPHS[st.FINISHED], "finished", "done")),
    (LOSS_BAD, (HEAT_GLYPHS[LOSS_BAD], "loss-bad", "loss nan")),
)
"""The heat map's key. "self +10%" and "+25%": a running rank's self time that far above the
other ranks' median (amber, red, and a heavier glyph each)."""
_LEGEND_IF_SEEN = (st.STARTING, "waiting", st.LEFT_EARLY, STOPPING, STOPPED, LOSS_BAD)
"""Entries listed only while some rank draws them ("waiting": a hang's victims)."""


def heat_legend(width: int, present: set[str]) -> tuple[list[list[LegendItem]], int]:
    """The heat map's legend in ``width`` columns: its lines (one, else two) and the spaces
    between entries. ``present``: the statuses some rank has ("waiting" while ranks wait for a
    hang's cause), with the running ranks by the level they draw (:data:`LEVEL_KEYS`: "running"
    for the ones ok). Every entry when they fit; else the ones no rank draws now give way, the
    running levels too (at 80x24 a hung job of 512 ranks, every one ◆ or ◇, had its legend need
    two lines for the three unused ■ and lose it for the ranks' room); a glyph on screen is
    never left out (two lines before that; a line is cut only past two)."""
    every = [item for status, item in _LEGEND if status not in _LEGEND_IF_SEEN or status in present]
    used = [item for status, item in _LEGEND if status in present]

    def length(items: list[LegendItem], gap: int) -> int:
        return 1 + sum(len(text) + 2 for _g, _c, text in items) + gap * (len(items) - 1)

    def wrap(items: list[LegendItem], gap: int) -> list[list[LegendItem]]:
        lines: list[list[LegendItem]] = [[]]
        for item in items:
            if lines[-1] and length(lines[-1] + [item], gap) > width:
                lines.append([])
            lines[-1].append(item)
        return lines

    for items, gap in ((every, 2), (every, 1), (used, 1)):
        if length(items, gap) <= width:
            return [items], gap
    for items in (every, used):
        lines = wrap(items, 1)
        if len(lines) <= 2:
            return lines, 1
    return wrap(used, 1)[:2], 1


COLUMNS = ("rank", "status", "loss", "dev", "data", "comm")
"""Fields of a cell where several go on a line (tens of ranks): the narrowest of
:data:`WIDE_COLUMNS`, what finds a straggler and tells its kind (it drew loss, wall, held and
Δself: a data straggler looked as a compute one)."""
WIDE_COLUMNS = (
    ("rank", "status", "step_no", "loss", "step", "self", "dev", "data", "comm", "held", "gpu", "gpu_mem"),
    ("rank", "status", "step_no", "loss", "step", "self", "dev", "data", "comm", "held"),
    ("rank", "status", "step_no", "loss", "step", "self", "dev", "data", "comm"),
    ("rank", "status", "step_no", "loss", "self", "dev", "data", "comm"),
    ("rank", "status", "loss", "self", "dev", "data", "comm"),
    ("rank", "status", "loss", "dev", "data", "comm"),
)
"""Richer cells, widest first (83, 70, 63, 56, 49 and 42 columns), used when every rank fits on
a line of its own (with the step each rank is at: the first thing to read when one is behind;
several cells a line have no room for it). Narrower, the figures that tell which rank the
others wait for, and why, stay longest: Δself names the straggler, self its own work, data
(its commonest cause) tells a data straggler from a compute one (Δself up, data as the
others'), and comm the others' wait for it (the straggler's the shortest). What goes first is
alike on every rank of a synchronous run or said elsewhere: the GPU figures, memory held (the
memory panel, m, and the line under the grid), the wall step time (the same on every rank that
waits at the collectives; the header's samples/s, the line under the grid), the step (the
header's; a rank behind is stalled, and says so), then the self time in milliseconds (Δself
says how far above the others' it is, and the line under the grid says it). The loss stays: a
rank's loss gone "nan" shows there, and at 80x24 the loss chart gives way to a taller header. At 80x24 (a grid of 44 columns) the
grid drew rank, status, loss, wall, held and Δself: no data or comm, so a data straggler and a
compute one looked alike (review 277); a 70-column terminal (67, the side panels under the
grid) drew 42 columns of :data:`COLUMNS` and left 25 empty, without the step or the self time."""
COMPACT_COLUMNS = ("rank", "glyph", "dev")
"""Fields of a compact cell, when full cells do not fit but a heat map would waste the room."""
COLUMN_SPEC = {
    # key: (title, width, the sort key it shows)
    "glyph": ("", 1, "status"),
    "status": ("status", 9, "status"),
    "step_no": ("step", 6, ""),  # the rank's last step done
    "loss": ("loss", 7, ""),
    "step": ("wall", 6, "step_time"),  # the step's wall time ("step" read as its number)
    "self": ("self", 6, ""),
    "dev": ("Δself", 5, "self_time"),
    "data": ("data", 6, ""),
    "comm": ("comm", 6, ""),
    "held": ("held", 6, "memory"),
    "gpu": ("gpu", 4, ""),
    "gpu_mem": ("gpu mem", 7, ""),
}

HEAT_BLOCK = 8
"""Ranks per block in a heat-map row (a space between blocks makes counting easy)."""
CELL_GAP = 3
"""Columns between two cells on a line."""


@dataclass(slots=True)
class GridLine:
    """One line of the grid."""

    kind: str
    """node (a group header) | cells | heat | note"""
    cells: list[tuple[int, int]] = field(default_factory=list)
    """(x, index into the ordered rows) of each rank on the line."""
    labels: list[tuple[int, str, str]] = field(default_factory=list)
    """(x, text, style name: node | dim) drawn between the cells."""
    items: list[tuple[int, int, object, str]] = field(default_factory=list)
    """Heat-map labels and cells in x order: (x, 0 label / 1 cell, text or row index, style)."""


@dataclass(slots=True)
class GridLayout:
    """The grid laid out for one width and height."""

    ordered: list[RankRow]
    """The ranks drawn, in drawing order."""
    lines: list[GridLine]
    columns: tuple[str, ...]
    """The fields of a cell (unused in a heat map)."""
    heat: bool
    rank_width: int
    max_cols: int = 1
    """Most cells on one line (title blocks to draw)."""
    where: dict[int, tuple[int, int]] = field(default_factory=dict)
    """rank -> (line, position on the line)."""

    @property
    def cell_width(self) -> int:
        return cell_width(self.columns, self.rank_width)


def column_width(key: str, rank_width: int) -> int:
    return rank_width if key == "rank" else COLUMN_SPEC[key][1]


def cell_width(columns: tuple[str, ...], rank_width: int) -> int:
    """Columns a cell takes: its fields with a space between them."""
    return sum(column_width(k, rank_width) for k in columns) + len(columns) - 1


def order_rows(rows: list[RankRow], sort_key: str) -> list[RankRow]:
    """Sorted by ``sort_key`` and grouped by node; groups ordered by their first member."""
    return group_by_node(sort_rows(rows, sort_key), sort_key)


def group_by_node(flat: list[RankRow], sort_key: str) -> list[RankRow]:
    """``flat`` (in ``sort_key`` order) grouped by node, each group in that order; groups
    ordered by their first member (by node when by rank)."""
    groups: dict[int, list[RankRow]] = {}
    for row in flat:
        groups.setdefault(row.node, []).append(row)
    # By rank: nodes in order. Otherwise the group holding the first-sorted rank leads.
    keys = sorted(groups) if sort_key == "rank" else list(groups)
    return [row for k in keys for row in groups[k]]


def node_label(rows: list[RankRow], totals: dict[int, int] | None = None) -> str:
    """``totals``: node -> its ranks, where ``rows`` are those of them shown (under f: a node's
    flagged ranks read "1 rank · 1 flagged" of a node of 8)."""
    first = rows[0]
    flagged = sum(1 for row in rows if row.filtered_in)
    label = f"node {first.node}"
    if first.host:
        label += f" · {first.host}"
    n = (totals or {}).get(first.node, len(rows))
    label += f" · {n} rank{'s' if n != 1 else ''}"
    if flagged:
        label += f" · {flagged} flagged"
    return label


def node_spans(ordered: list[RankRow]) -> list[tuple[int, int]]:
    """(start, end) index spans of consecutive rows on one node."""
    spans: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i].node != ordered[start].node:
            spans.append((start, i))
            start = i
    return spans


def layout_cells(ordered: list[RankRow], width: int, cw: int, *, single: bool = False, totals: dict[int, int] | None = None) -> list[GridLine]:
    cols = 1 if single else max(1, (width - 1 + CELL_GAP) // (cw + CELL_GAP))
    lines: list[GridLine] = []
    for start, end in node_spans(ordered):
        lines.append(GridLine("node", labels=[(0, node_label(ordered[start:end], totals), "node")]))
        # Balance the lines of a node: 8 ranks in 5 columns go 4 + 4, not 5 + 3.
        count = end - start
        per_line = -(-count // -(-count // cols))
        for row_start in range(start, end, per_line):
            stop = min(end, row_start + per_line)
            lines.append(
                GridLine("cells", cells=[(1 + k * (cw + CELL_GAP), i) for k, i in enumerate(range(row_start, stop))])
            )
    return lines


def layout_heat(
    ordered: list[RankRow], width: int, rank_width: int, *, label_rows: bool, short: bool = False, totals: dict[int, int] | None = None
) -> list[GridLine]:
    """``short``: the grid has no line to spare for a node's header (a tiny terminal): one
    node's ranks too go on a line after its label ("n0 ■■"), and where they do not fit so,
    the rows of blocks go without their node's header."""
    spans = node_spans(ordered)
    lines: list[GridLine] = []
    widest = max((end - start for start, end in spans), default=0)
    node_w = max((len(f"n{ordered[s].node}") for s, _ in spans), default=2)
    packed_w = node_w + 1 + widest + 2
    if (len(spans) > 1 or short) and widest <= HEAT_BLOCK * 4 and packed_w <= width - 1:
        # Many small nodes: "n12 ■■■■■■■■" segments side by side.
        per_line = max(1, (width - 1) // packed_w)
        for g in range(0, len(spans), per_line):
            line = GridLine("heat")
            for k, (start, end) in enumerate(spans[g : g + per_line]):
                x = 1 + k * packed_w
                line.labels.append((x, f"n{ordered[start].node}".rjust(node_w), "node"))
                line.cells.extend((x + node_w + 1 + j, i) for j, i in enumerate(range(start, end)))
            lines.append(line)
        return lines
    # Few big nodes: a header per node, then rows of blocks labelled by their first rank.
    label_w = rank_width + 1
    room = max(HEAT_BLOCK, width - 1 - label_w)
    per_row = max(1, (room + 1) // (HEAT_BLOCK + 1)) * HEAT_BLOCK
    for start, end in spans:
        if not short:
            lines.append(GridLine("node", labels=[(0, node_label(ordered[start:end], totals), "node")]))
        for row_start in range(start, end, per_row):
            line = GridLine("heat")
            if label_rows:
                line.labels.append((1, str(ordered[row_start].rank).rjust(rank_width), "dim"))
            stop = min(end, row_start + per_row)
            line.cells.extend((1 + label_w + j + j // HEAT_BLOCK, i) for j, i in enumerate(range(row_start, stop)))
            lines.append(line)
    return lines


def shown_rows(
    rows: list[RankRow], *, sort_key: str = "rank", flagged_only: bool = False, grouped: bool = True
) -> list[RankRow]:
    """The rows the grid draws, in drawing order (``grouped``: by node, as cells are; else in
    ``sort_key`` order across nodes, as a sorted heat map is)."""
    flat = sort_rows([row for row in rows if row.filtered_in] if flagged_only else rows, sort_key)
    return group_by_node(flat, sort_key) if grouped else flat


def layout_heat_flat(ordered: list[RankRow], width: int, rank_width: int) -> list[GridLine]:
    """Every rank in rank order across nodes, rows of blocks labelled by their first rank, no
    node headers: the densest map, for many small nodes whose packed segments ("n12 ■■■■■■■■")
    would not fit the grid's height (1024 ranks of 8 a node: 32 lines at 120x36, 64 at 80x24,
    every one scrolled to). A block of 8 is a node's where nodes have 8 ranks."""
    label_w = rank_width + 1
    room = max(HEAT_BLOCK, width - 1 - label_w)
    per_row = max(1, (room + 1) // (HEAT_BLOCK + 1)) * HEAT_BLOCK
    lines = []
    for row_start in range(0, len(ordered), per_row):
        line = GridLine("heat")
        line.labels.append((1, str(ordered[row_start].rank).rjust(rank_width), "dim"))
        stop = min(len(ordered), row_start + per_row)
        line.cells.extend((1 + label_w + j + j // HEAT_BLOCK, i) for j, i in enumerate(range(row_start, stop)))
        lines.append(line)
    return lines


def layout_heat_sorted(ordered: list[RankRow], width: int, sort_key: str, *, short: bool = False) -> list[GridLine]:
    """A heat map sorted by something else than rank: every rank in that order across nodes
    (the worst first, top left), under one header line that says so. Node by node, the order
    held only within each node: the second worst rank sat among its own node's ranks, after
    every rank of the node holding the worst. ``short``: without the header line (see
    :func:`layout_heat`)."""
    room = max(HEAT_BLOCK, width - 1)
    per_row = max(1, (room + 1) // (HEAT_BLOCK + 1)) * HEAT_BLOCK
    first = "most urgent" if sort_key == "status" else "worst"
    what = SORT_LABELS[sort_key].rstrip(" ↓")
    # The longest that fits the grid's width (at 80x24 it is 43 columns: the whole line was cut
    # at "across node" with no sign).
    for text in (f"by {what}, {first} first, across nodes", f"by {what}, across nodes", f"by {what}"):
        if len(text) <= width - 4:  # (drawn as "─ TEXT ─…" within the width less one)
            break
    lines = [] if short else [GridLine("node", labels=[(0, text, "node")])]
    for row_start in range(0, len(ordered), per_row):
        stop = min(len(ordered), row_start + per_row)
        line = GridLine("heat")
        line.cells.extend((1 + j + j // HEAT_BLOCK, i) for j, i in enumerate(range(row_start, stop)))
        lines.append(line)
    return lines


def lay_out(
    rows: list[RankRow],
    *,
    width: int,
    height: int,
    form: str = "auto",
    sort_key: str = "rank",
    flagged_only: bool = False,
    ordered: list[RankRow] | None = None,
    gpu: bool = True,
) -> GridLayout:
    """Lay ``rows`` (every rank) out in ``width`` x ``height`` cells, the first line of
    which is the grid's title (``ordered``: :func:`shown_rows` not grouped, when already at
    hand)."""
    if ordered is None:
        ordered = shown_rows(rows, sort_key=sort_key, flagged_only=flagged_only, grouped=False)
    flat = ordered
    ordered = group_by_node(flat, sort_key)
    rank_width = max(4, len(str(max((row.rank for row in rows), default=0))))
    room = max(1, height - 1)
    lines: list[GridLine] = []
    if not ordered and flagged_only and rows:
        # "no flagged ranks": the title stays the one over every rank (the column names, or the
        # heat map's legend); a grid of no ranks has the room for the widest columns, and the
        # title switched to them at each f.
        every = lay_out(rows, width=width, height=height, form=form, sort_key=sort_key, gpu=gpu)
        note = GridLine("note", labels=[(1, "no flagged ranks (f shows all)", "dim")])
        return GridLayout(ordered=[], lines=[note], columns=every.columns, heat=every.heat, rank_width=rank_width, max_cols=every.max_cols)
    totals: dict[int, int] | None = None
    if flagged_only:  # (a node's header counts its ranks, not those of them shown)
        totals = {}
        for row in rows:
            totals[row.node] = totals.get(row.node, 0) + 1
    columns = COLUMNS
    one_a_line = False
    for wide in WIDE_COLUMNS if gpu else WIDE_COLUMNS[1:]:  # no GPU: no columns of dashes
        if cell_width(wide, rank_width) <= width - 1:
            columns, one_a_line = wide, True
            lines = layout_cells(ordered, width, cell_width(wide, rank_width), single=True, totals=totals)
            break
    if not one_a_line or len(lines) > room:
        several = layout_cells(ordered, width, cell_width(COLUMNS, rank_width), totals=totals)
        # (where full cells too go one a line, the richer ones scroll no further)
        if not one_a_line or len(several) < len(lines):
            columns, lines = COLUMNS, several
    if len(lines) > room and form != "heat":
        compact = layout_cells(ordered, width, cell_width(COMPACT_COLUMNS, rank_width), totals=totals)
        if len(compact) <= room or form == "auto":
            columns, lines = COMPACT_COLUMNS, compact
    heat = form == "heat" or (form == "auto" and len(lines) > room)
    if heat and sort_key != "rank":
        ordered = flat
        lines = layout_heat_sorted(ordered, width, sort_key)
        if len(lines) > room and len(lines) - 1 <= room:
            lines = layout_heat_sorted(ordered, width, sort_key, short=True)
    elif heat:
        lines = layout_heat(ordered, width, rank_width, label_rows=True, totals=totals)
        if len(lines) > room:
            # A grid of a line or two (a tiny terminal): its ranks, not their nodes' headers
            # over them under a scrollbar (60x15: the legend and "─ node 0 · vm · 2 ranks",
            # and no rank).
            # Only where they all fit so: a map that scrolls anyway keeps its headers.
            short = layout_heat(ordered, width, rank_width, label_rows=True, short=True, totals=totals)
            if len(short) <= room:
                lines = short
            else:
                # Still taller than the grid: every rank in rank order, no node headers, where
                # that puts every rank on screen or halves the scrolling at least (80x24: 64
                # lines of two nodes each, 32 so); else the map keeps its headers.
                flat = layout_heat_flat(ordered, width, rank_width)
                if len(flat) <= room or 2 * len(flat) <= len(short):
                    lines = flat
    if not ordered:
        text = "no flagged ranks (f shows all)" if rows else "waiting for ranks to say hello…"
        lines = [GridLine("note", labels=[(1, text, "dim")])]
    layout = GridLayout(ordered=ordered, lines=lines, columns=columns, heat=heat, rank_width=rank_width)
    for y, line in enumerate(lines):
        items: list[tuple[int, int, object, str]] = [
            (x, 0, text, s) for x, text, s in line.labels if line.kind == "heat"
        ]
        items += [(x, 1, idx, "") for x, idx in line.cells]
        line.items = sorted(items, key=lambda item: item[0])
        for pos, (_x, idx) in enumerate(line.cells):
            layout.where[ordered[idx].rank] = (y, pos)
    layout.max_cols = max((len(line.cells) for line in lines if line.kind == "cells"), default=1) or 1
    return layout
