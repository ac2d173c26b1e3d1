"""The rank grid: one cell per rank, grouped by node, drawn with the Line API."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar
from collections.abc import Iterable

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from pardash.telemetry import state as st

from ..format import DASH, fmt_bytes, fmt_deviation, fmt_loss, fmt_step_time
from ..messages import RankChosen, RankHighlighted
from ..model import SORT_KEYS, RankRow, sort_rows

FORMS = ("auto", "cells", "heat")
"""auto: cells when every rank fits, else the heat map."""

HEAT_GLYPHS = {
    st.STARTING: "·",
    st.RUNNING: "■",
    st.STRAGGLER: "▲",
    st.STALLED: "◆",
    st.SILENT: "○",
    st.EXITED: "×",
    st.FINISHED: "□",
}
"""One character per rank in the heat map: the shape says the status, the colour the rest."""

COLUMNS = ("rank", "status", "loss", "step", "held", "dev")
"""Fields of a cell."""
WIDE_COLUMNS = (
    ("rank", "status", "loss", "step", "self", "dev", "data", "comm", "held", "gpu", "gpu_mem"),
    ("rank", "status", "loss", "step", "self", "dev", "data", "comm", "held"),
)
"""Richer cells, widest first, used when every rank fits on a line of its own."""
COMPACT_COLUMNS = ("rank", "glyph", "dev")
"""Fields of a compact cell, when full cells do not fit but a heat map would waste the room."""
COLUMN_SPEC = {
    "glyph": ("", 1, "status"),
    # key: (title, width, sort key it shows)
    "status": ("status", 9, "status"),
    "loss": ("loss", 7, ""),
    "step": ("step", 6, "step_time"),
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
class _Line:
    """One line of the laid-out grid."""

    kind: str
    """node | cells | heat | note"""
    cells: list[tuple[int, int]] = field(default_factory=list)
    """(x, index into the ordered rows) of each rank on the line."""
    labels: list[tuple[int, str, str]] = field(default_factory=list)
    """(x, text, component class) drawn between the cells."""
    items: list[tuple[int, int, object, str]] = field(default_factory=list)
    """Heat labels and cells in x order: (x, 0 label / 1 cell, text or row index, class)."""


class RankGrid(ScrollView, can_focus=True):
    """Every rank at a glance: status, loss, step time, memory held and how far its self time
    sits from the others' median, grouped by node.

    The grid draws only the lines on screen (``render_line``), so a refresh costs the visible
    ranks, never the message rate. When the ranks do not fit as cells it switches to a heat
    map, one coloured character per rank. Feed it with :meth:`update_rows`.
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "rank-grid--title",
        "rank-grid--title-sorted",
        "rank-grid--node",
        "rank-grid--rank",
        "rank-grid--dim",
        "rank-grid--cursor",
        "rank-grid--cursor-blurred",
        "rank-grid--starting",
        "rank-grid--running",
        "rank-grid--straggler",
        "rank-grid--stalled",
        "rank-grid--silent",
        "rank-grid--exited",
        "rank-grid--exited-after",
        "rank-grid--finished",
        "rank-grid--dev-warn",
        "rank-grid--dev-bad",
    }

    DEFAULT_CSS = """
    RankGrid {
        height: 1fr;
        overflow-x: hidden;
        overflow-y: auto;
        scrollbar-gutter: stable;
        scrollbar-size-vertical: 1;
        background: $surface;
    }
    RankGrid > .rank-grid--title { color: $text-muted; text-style: bold; }
    RankGrid > .rank-grid--title-sorted { color: $text-accent; text-style: bold underline; }
    RankGrid > .rank-grid--node { color: $text-secondary; }
    RankGrid > .rank-grid--rank { text-style: bold; }
    RankGrid > .rank-grid--dim { color: $text-muted; }
    RankGrid > .rank-grid--cursor { background: $block-cursor-background; }
    RankGrid > .rank-grid--cursor-blurred { background: $block-cursor-blurred-background; }
    RankGrid > .rank-grid--starting { color: $text-muted; }
    RankGrid > .rank-grid--running { color: $text-success; }
    RankGrid > .rank-grid--straggler { color: $text-warning; text-style: bold; }
    RankGrid > .rank-grid--stalled { color: $text-warning; text-style: bold; }
    RankGrid > .rank-grid--silent { color: $text-error; }
    RankGrid > .rank-grid--exited { color: $text-error; text-style: bold reverse; }
    RankGrid > .rank-grid--exited-after { color: $text-error 70%; }
    RankGrid > .rank-grid--finished { color: $text-primary; }
    RankGrid > .rank-grid--dev-warn { color: $text-warning; }
    RankGrid > .rank-grid--dev-bad { color: $text-error; text-style: bold; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor('up')", "Up", show=False),
        Binding("down", "cursor('down')", "Down", show=False),
        Binding("left", "cursor('left')", "Left", show=False),
        Binding("right", "cursor('right')", "Right", show=False),
        Binding("home", "cursor('home')", "First", show=False),
        Binding("end", "cursor('end')", "Last", show=False),
        Binding("pageup", "cursor('pageup')", "Page up", show=False),
        Binding("pagedown", "cursor('pagedown')", "Page down", show=False),
        Binding("enter", "choose", "Detail", tooltip="Open the selected rank's detail"),
    ]

    form: reactive[str] = reactive("auto")
    """How ranks are drawn: auto, cells or heat (one character per rank)."""
    sort_key: reactive[str] = reactive("rank")
    """Order of the ranks within and across node groups (see model.SORT_KEYS)."""
    flagged_only: reactive[bool] = reactive(False)
    """Show only ranks with a verdict (straggler, stalled, silent, exited, not sharding)."""
    cursor_rank: reactive[int | None] = reactive(None)
    """The selected rank (None until there are ranks)."""

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._rows: list[RankRow] = []
        """Every rank, by rank."""
        self._by_rank: dict[int, RankRow] = {}
        self._ordered: list[RankRow] = []
        """The ranks drawn, in drawing order."""
        self._lines: list[_Line] = []
        self._where: dict[int, tuple[int, int]] = {}
        """rank -> (line, position on the line)."""
        self._layout_key: tuple = ()
        self._heat = False
        """The form actually drawn (auto decides from the size)."""
        self._rank_width = 3
        self._columns: tuple[str, ...] = COLUMNS
        self._max_cols = 1
        """Most cells on one line (how many title blocks to draw)."""
        self._looks: dict[int, list[Segment]] = {}
        self._look_keys: dict[int, object] = {}
        """What each cached drawing was made from (see _look_key)."""
        self._styles: dict[str, Style] = {}
        """Component styles over the base style ("" is the base), cleared on style changes."""
        self._width = 80
        """Columns the layout was made for."""
        self._strips: dict[int, Strip] = {}
        """Drawn lines by line number, cleared when anything on them may have changed."""
        """Drawing of each ordered rank, cleared when rows, layout or styles change."""
        """The fields cells show now (COLUMNS, or WIDE_COLUMNS when there is room)."""

    # -- feeding ----------------------------------------------------------------------------

    @property
    def rows(self) -> list[RankRow]:
        """Every rank's row, by rank."""
        return self._rows

    @property
    def shown_ranks(self) -> list[int]:
        """Ranks drawn, in drawing order (after filter and sort)."""
        return [row.rank for row in self._ordered]

    @property
    def heat(self) -> bool:
        """True when the grid is drawn as a heat map."""
        return self._heat

    def row_of(self, rank: int | None) -> RankRow | None:
        """The row of ``rank`` (drawn or filtered out), if the rank is known."""
        return self._by_rank.get(rank) if rank is not None else None

    def update_rows(self, rows: list[RankRow]) -> None:
        """Take the latest rows (by rank) and redraw what changed.

        The layout changes only when the order or the set of drawn ranks does; otherwise
        cells update in place, and only the visible lines holding a cell that looks
        different are redrawn (a heat map of steady ranks redraws nothing).
        """
        self._rows = rows
        self._by_rank = {row.rank: row for row in rows}
        layout = self._layout_key
        self._relayout()
        if self._layout_key != layout:
            self.refresh()
            return
        # Same layout: keep the drawings whose look did not change, redraw the lines that did.
        keys = self._look_keys
        ordered = self._ordered
        heat = self._heat
        top = self.scroll_offset.y
        visible = range(top, min(len(self._lines), top + self.size.height))
        for index in list(self._looks):
            if index >= len(ordered) or keys.get(index) != self._look_key(ordered[index], heat):
                del self._looks[index]
        for y in list(self._strips):
            if y not in visible:
                del self._strips[y]
        for y in visible:
            line = self._lines[y]
            if any(idx not in self._looks for _x, idx in line.cells):
                self._strips.pop(y, None)
                self.refresh_lines(y + 1)  # line 0 on screen is the title

    @staticmethod
    def _look_key(row: RankRow, heat: bool) -> object:
        """What a rank's drawing depends on: status and deviation in a heat map, everything
        in a cell."""
        if heat:
            return (row.status, row.deviation_level, row.exit_first)
        return row

    def _relayout(self, force: bool = False) -> None:
        rows = self._rows
        if self.flagged_only:
            rows = [row for row in rows if row.flagged]
        ordered = self._order(rows)
        width = self.scrollable_content_region.width or self.size.width or 80
        height = self.scrollable_content_region.height or self.size.height or 24
        key = (
            tuple(row.rank for row in ordered),
            tuple(row.node for row in ordered),
            width,
            height,
            self.form,
            self.sort_key,
        )
        self._ordered = ordered
        self._width = width
        if key == self._layout_key and not force:
            return
        self._layout_key = key
        self._rank_width = max(4, len(str(max((row.rank for row in self._rows), default=0))))
        lines = []
        for columns in WIDE_COLUMNS:
            self._columns = columns
            if self.cell_width <= width - 1:
                lines = self._layout_cells(ordered, width, single=True)
                break
        room = max(1, height - 1)
        if not lines or len(lines) > room:
            self._columns = COLUMNS
            lines = self._layout_cells(ordered, width)
        if len(lines) > room and self.form == "auto":
            # Tens to hundreds of ranks: rank, status mark and self-time deviation only.
            self._columns = COMPACT_COLUMNS
            lines = self._layout_cells(ordered, width)
        heat = self.form == "heat" or (self.form == "auto" and len(lines) > room)
        if heat:
            lines = self._layout_heat(ordered, width)
        if not ordered:
            text = "no flagged ranks (f shows all)" if self._rows else "waiting for ranks to say hello…"
            lines = [_Line("note", labels=[(1, text, "rank-grid--dim")])]
        self._heat = heat
        self._lines = lines
        for line in lines:
            items = [(x, 0, text, cls) for x, text, cls in line.labels if line.kind == "heat"]
            items += [(x, 1, idx, "") for x, idx in line.cells]
            line.items = sorted(items, key=lambda item: item[0])
        self._looks.clear()
        self._strips.clear()
        self._max_cols = max((len(line.cells) for line in lines if line.kind == "cells"), default=1) or 1
        self._where = {}
        for y, line in enumerate(lines):
            for pos, (_x, idx) in enumerate(line.cells):
                self._where[ordered[idx].rank] = (y, pos)
        self.virtual_size = Size(width, len(lines) + 1)
        if ordered and (self.cursor_rank is None or self.cursor_rank not in self._where):
            self.cursor_rank = ordered[0].rank
        elif self.cursor_rank is not None:
            self._scroll_to_cursor()

    def _order(self, rows: list[RankRow]) -> list[RankRow]:
        """Sorted by the key, grouped by node; groups ordered by their first member."""
        ranked = sort_rows(rows, self.sort_key)
        groups: dict[int, list[RankRow]] = {}
        for row in ranked:
            groups.setdefault(row.node, []).append(row)
        if self.sort_key == "rank":
            keys = sorted(groups)
        else:
            keys = list(groups)  # insertion order: the group holding the first-sorted rank leads
        return [row for k in keys for row in groups[k]]

    # -- layout -------------------------------------------------------------------------------

    def _column_width(self, key: str) -> int:
        return self._rank_width if key == "rank" else COLUMN_SPEC[key][1]

    @property
    def cell_width(self) -> int:
        """Columns a cell takes (its fields with a space between them)."""
        return sum(self._column_width(k) for k in self._columns) + len(self._columns) - 1

    def _node_label(self, rows: list[RankRow]) -> str:
        first = rows[0]
        flagged = sum(1 for row in rows if row.flagged)
        label = f"node {first.node}"
        if first.host:
            label += f" · {first.host}"
        label += f" · {len(rows)} rank{'s' if len(rows) != 1 else ''}"
        if flagged:
            label += f" · {flagged} flagged"
        return label

    @staticmethod
    def _groups(ordered: list[RankRow]) -> list[tuple[int, int]]:
        """(start, end) index spans of consecutive rows on one node."""
        spans: list[tuple[int, int]] = []
        start = 0
        for i in range(1, len(ordered) + 1):
            if i == len(ordered) or ordered[i].node != ordered[start].node:
                spans.append((start, i))
                start = i
        return spans

    def _layout_cells(self, ordered: list[RankRow], width: int, *, single: bool = False) -> list[_Line]:
        cw = self.cell_width
        cols = 1 if single else max(1, (width - 1 + CELL_GAP) // (cw + CELL_GAP))
        lines: list[_Line] = []
        for start, end in self._groups(ordered):
            lines.append(_Line("node", labels=[(0, self._node_label(ordered[start:end]), "rank-grid--node")]))
            # Balance the lines of a node: 8 ranks in 5 columns go 4 + 4, not 5 + 3.
            count = end - start
            per_line = -(-count // -(-count // cols))
            for row_start in range(start, end, per_line):
                cells = [(1 + k * (cw + CELL_GAP), i) for k, i in enumerate(range(row_start, min(end, row_start + per_line)))]
                lines.append(_Line("cells", cells=cells))
        return lines

    def _layout_heat(self, ordered: list[RankRow], width: int) -> list[_Line]:
        groups = self._groups(ordered)
        lines: list[_Line] = []
        widest = max((end - start for start, end in groups), default=0)
        node_w = max((len(f"n{ordered[s].node}") for s, _ in groups), default=2)
        packed_w = node_w + 1 + widest + 2
        if len(groups) > 1 and widest <= HEAT_BLOCK * 4 and packed_w <= width - 1:
            # Many small nodes: pack "n12 ■■■■■■■■" segments side by side.
            per_line = max(1, (width - 1) // packed_w)
            for g in range(0, len(groups), per_line):
                line = _Line("heat")
                for k, (start, end) in enumerate(groups[g : g + per_line]):
                    x = 1 + k * packed_w
                    line.labels.append((x, f"n{ordered[start].node}".rjust(node_w), "rank-grid--node"))
                    for j, i in enumerate(range(start, end)):
                        line.cells.append((x + node_w + 1 + j, i))
                lines.append(line)
            return lines
        # Few big nodes: a header per node, then rows of blocks, labelled by first rank.
        label_w = self._rank_width + 1
        room = max(HEAT_BLOCK, width - 1 - label_w)
        blocks = max(1, (room + 1) // (HEAT_BLOCK + 1))
        per_row = blocks * HEAT_BLOCK
        by_rank = self.sort_key == "rank"
        for start, end in groups:
            lines.append(_Line("node", labels=[(0, self._node_label(ordered[start:end]), "rank-grid--node")]))
            for row_start in range(start, end, per_row):
                line = _Line("heat")
                if by_rank:
                    line.labels.append((1, str(ordered[row_start].rank).rjust(self._rank_width), "rank-grid--dim"))
                for j, i in enumerate(range(row_start, min(end, row_start + per_row))):
                    line.cells.append((1 + label_w + j + j // HEAT_BLOCK, i))
                lines.append(line)
        return lines

    # -- drawing ------------------------------------------------------------------------------

    def _style(self, name: str) -> Style:
        """A component's style over the widget's own (cached until the styles change)."""
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = self._base() + self.get_component_rich_style(name, partial=True)
        return style

    def _base(self) -> Style:
        style = self._styles.get("")
        if style is None:
            style = self._styles[""] = self.rich_style
        return style

    def _status_style(self, row: RankRow) -> Style:
        if row.exit_first is False:
            return self._style("rank-grid--exited-after")
        return self._style(f"rank-grid--{row.status}")

    def _heat_style(self, row: RankRow) -> Style:
        if row.status == st.RUNNING:
            level = row.deviation_level
            if level == 2:
                return self._style("rank-grid--dev-bad")
            if level == 1:
                return self._style("rank-grid--dev-warn")
        return self._status_style(row)

    def render_line(self, y: int) -> Strip:
        width = self._width
        base = self._base()
        if y == 0:
            segments = list(self._title_segments(width))
        else:
            index = self.scroll_offset.y + y - 1
            if index >= len(self._lines):
                return Strip.blank(width, base)
            strip = self._strips.get(index)
            if strip is None:
                segments = self._line_segments(self._lines[index], width)
                strip = self._strips[index] = Strip(Segment.simplify(segments)).crop_extend(0, width, base)
            return strip
        return Strip(Segment.simplify(segments)).crop_extend(0, width, base)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._looks.clear()
        self._styles.clear()
        self._strips.clear()

    def _title_segments(self, width: int) -> Iterable[Segment]:
        if self._heat:
            yield from self._legend_segments(width)
            return
        title = self._style("rank-grid--title")
        sorted_style = self._style("rank-grid--title-sorted")
        yield Segment(" ", self._base())
        for k in range(self._max_cols):
            if k:
                yield Segment(" " * CELL_GAP, self._base())
            for j, key in enumerate(self._columns):
                if j:
                    yield Segment(" ", self._base())
                if key == "rank":
                    text, sort = f"{'rank':>{self._rank_width}}", "rank"
                else:
                    name, w, sort = COLUMN_SPEC[key]
                    text = f"{name:<{w}}" if key == "status" else f"{name:>{w}}"
                yield Segment(text, sorted_style if sort == self.sort_key else title)

    def _legend_segments(self, width: int) -> Iterable[Segment]:
        dim = self._style("rank-grid--dim")
        yield Segment(" ", self._base())
        items = [
            (HEAT_GLYPHS[st.RUNNING], "rank-grid--running", "ok"),
            (HEAT_GLYPHS[st.RUNNING], "rank-grid--dev-warn", "self +10%"),
            (HEAT_GLYPHS[st.RUNNING], "rank-grid--dev-bad", "+25%"),
            (HEAT_GLYPHS[st.STRAGGLER], "rank-grid--straggler", "straggler"),
            (HEAT_GLYPHS[st.STALLED], "rank-grid--stalled", "stalled"),
            (HEAT_GLYPHS[st.SILENT], "rank-grid--silent", "silent"),
            (HEAT_GLYPHS[st.EXITED], "rank-grid--exited", "exited"),
            (HEAT_GLYPHS[st.FINISHED], "rank-grid--finished", "done"),
        ]
        used = 1
        for glyph, cls, text in items:
            piece = len(text) + 3
            if used + piece > width:
                break
            yield Segment(glyph, self._style(cls))
            yield Segment(f" {text}  ", dim)
            used += piece

    def _look(self, index: int) -> list[Segment]:
        """The segments of the rank at ``index`` (a glyph or a cell), cached until the rows,
        the layout or the styles change, so redrawing a line costs no formatting."""
        look = self._looks.get(index)
        if look is None:
            row = self._ordered[index]
            if self._heat:
                look = [Segment(HEAT_GLYPHS.get(row.status, "?"), self._heat_style(row))]
            else:
                look = self._cell_segments(row)
            self._looks[index] = look
            self._look_keys[index] = self._look_key(row, self._heat)
        return look

    def _line_segments(self, line: _Line, width: int) -> list[Segment]:
        out: list[Segment] = []
        x_at = 0
        cursor_rank = self.cursor_rank
        ordered = self._ordered
        for x, text, cls in line.labels if line.kind != "heat" else ():
            if line.kind == "node":
                text = f"─ {text} "
                text = text + "─" * max(0, width - len(text) - 1)
            out.append(Segment(" " * (x - x_at), self._base()))
            out.append(Segment(text, self._style(cls)))
            x_at = x + len(text)
        for x, kind, payload, cls in line.items:
            if x > x_at:
                out.append(Segment(" " * (x - x_at), self._base()))
                x_at = x
            if kind == 0:
                out.append(Segment(payload, self._style(cls)))  # type: ignore[arg-type]
                x_at += len(payload)  # type: ignore[arg-type]
                continue
            look = self._look(payload)  # type: ignore[arg-type]
            if ordered[payload].rank == cursor_rank:  # type: ignore[index]
                if self._heat:
                    look = [Segment(look[0].text, look[0].style + Style(reverse=True, bold=True))]
                else:
                    cursor = self._cursor_style()
                    look = [Segment(seg.text, (seg.style or Style()) + cursor) for seg in look]
            out.extend(look)
            x_at += 1 if self._heat else self.cell_width
        return out

    def _cursor_style(self) -> Style:
        return self._style("rank-grid--cursor" if self.has_focus else "rank-grid--cursor-blurred")

    def _cell_segments(self, row: RankRow) -> list[Segment]:
        dim = self._style("rank-grid--dim")
        status = row.status
        if status == st.EXITED and row.exit_code is not None:
            status_text, status_style = f"exit {row.exit_code}", self._status_style(row)
        elif row.not_sharding and status == st.RUNNING:
            status_text, status_style = "unsharded", self._style("rank-grid--stalled")
        else:
            status_text, status_style = status, self._status_style(row)
        level = row.deviation_level
        dev_style = self._style("rank-grid--dev-bad") if level == 2 else self._style("rank-grid--dev-warn") if level == 1 else dim
        gone = status in (st.EXITED, st.FINISHED, st.SILENT)
        value = dim if gone else self._base()
        out: list[Segment] = []
        for j, key in enumerate(self._columns):
            if j:
                out.append(Segment(" ", self._base()))
            if key == "rank":
                out.append(Segment(f"{row.rank:>{self._rank_width}}", self._style("rank-grid--rank")))
                continue
            w = COLUMN_SPEC[key][1]
            style = value
            if key == "status":
                out.append(Segment(f"{status_text[:w]:<{w}}", status_style))
                continue
            if key == "glyph":
                out.append(Segment(HEAT_GLYPHS.get(status, "?"), self._heat_style(row)))
                continue
            if key == "loss":
                text = fmt_loss(row.loss)
            elif key == "step":
                text = fmt_step_time(row.step_s)
            elif key == "self":
                text = fmt_step_time(row.self_s)
            elif key == "dev":
                text, style = (DASH if gone else fmt_deviation(row.self_dev)), dev_style
            elif key == "data":
                text = fmt_step_time(row.data_s)
            elif key == "comm":
                text = fmt_step_time(row.comm_s)
            elif key == "held":
                text = fmt_bytes(row.held_bytes, short=True)
            elif key == "gpu":
                text = DASH if row.gpu_util_pct is None else f"{row.gpu_util_pct:.0f}%"
            else:  # gpu_mem
                text = fmt_bytes(row.gpu_mem_bytes, short=True)
            out.append(Segment(f"{text:>{w}}", style))
        return out

    # -- cursor -------------------------------------------------------------------------------

    def watch_cursor_rank(self, old: int | None, new: int | None) -> None:
        for rank in (old, new):
            where = self._where.get(rank) if rank is not None else None
            if where is not None:
                self._strips.pop(where[0], None)
        self._scroll_to_cursor()
        self.refresh()
        self.post_message(RankHighlighted(new))

    def watch_form(self) -> None:
        self._relayout(force=True)
        self.refresh()

    def watch_sort_key(self) -> None:
        self._relayout(force=True)
        self.refresh()

    def watch_flagged_only(self) -> None:
        self._relayout(force=True)
        self.refresh()

    def validate_sort_key(self, key: str) -> str:
        return key if key in SORT_KEYS else "rank"

    def validate_form(self, form: str) -> str:
        return form if form in FORMS else "auto"

    def on_resize(self, event: events.Resize) -> None:
        self._relayout(force=True)

    def on_focus(self) -> None:
        self._strips.clear()
        self.refresh()

    def on_blur(self) -> None:
        self._strips.clear()
        self.refresh()

    def _scroll_to_cursor(self) -> None:
        where = self._where.get(self.cursor_rank) if self.cursor_rank is not None else None
        if where is None:
            return
        line = where[0]
        visible = max(1, (self.scrollable_content_region.height or self.size.height) - 1)
        top = self.scroll_offset.y
        # Keep the node header in view when the cursor is on a group's first line.
        want_top = line - 1 if line > 0 and self._lines[line - 1].kind == "node" else line
        if want_top < top:
            self.scroll_to(y=want_top, animate=False)
        elif line >= top + visible:
            self.scroll_to(y=line - visible + 1, animate=False)

    def action_cursor(self, how: str) -> None:
        if not self._where:
            return
        if self.cursor_rank not in self._where:
            self.cursor_rank = self._ordered[0].rank
            return
        line, pos = self._where[self.cursor_rank]  # type: ignore[index]
        lines = self._lines
        index = lines[line].cells[pos][1]
        if how == "left":
            index = max(0, index - 1)
        elif how == "right":
            index = min(len(self._ordered) - 1, index + 1)
        elif how == "home":
            index = 0
        elif how == "end":
            index = len(self._ordered) - 1
        elif how in ("up", "down", "pageup", "pagedown"):
            step = -1 if how in ("up", "pageup") else 1
            count = 1 if how in ("up", "down") else max(1, (self.scrollable_content_region.height or 2) - 2)
            x = lines[line].cells[pos][0]
            target = line
            moved = 0
            probe = line
            while moved < count:
                probe += step
                if not 0 <= probe < len(lines):
                    break
                if lines[probe].cells:
                    target = probe
                    moved += 1
            if target != line:
                cells = lines[target].cells
                index = min(cells, key=lambda c: abs(c[0] - x))[1]
            elif how == "pageup":
                index = 0
            elif how == "pagedown":
                index = len(self._ordered) - 1
        self.cursor_rank = self._ordered[index].rank

    def action_choose(self) -> None:
        if self.cursor_rank is not None and self.cursor_rank in self._where:
            self.post_message(RankChosen(self.cursor_rank))

    def rank_at(self, x: int, y: int) -> int | None:
        """The rank drawn at content offset (x, y), if any."""
        if y < 1:
            return None
        index = self.scroll_offset.y + y - 1
        if not 0 <= index < len(self._lines):
            return None
        line = self._lines[index]
        w = 1 if line.kind == "heat" else self.cell_width
        for cx, idx in line.cells:
            if cx <= x < cx + w:
                return self._ordered[idx].rank
        return None

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        rank = self.rank_at(offset.x, offset.y)
        if rank is None:
            return
        self.cursor_rank = rank
        if event.chain >= 2:
            self.post_message(RankChosen(rank))
