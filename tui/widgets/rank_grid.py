"""The rank grid: one cell per rank, grouped by node, drawn with the Line API."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from pardash.telemetry import state as st

from ..format import DASH, fmt_bytes, fmt_deviation, fmt_loss, fmt_step_no, fmt_step_time
from ..grid_layout import (
    CELL_GAP,
    COLUMN_SPEC,
    COMPACT_COLUMNS,
    FORMS,
    HEAT_BLOCK,
    HEAT_GLYPHS,
    LEVEL_GLYPHS,
    LEVEL_KEYS,
    WIDE_COLUMNS,
    GridLayout,
    GridLine,
    WAITING_GLYPH,
    LegendItem,
    cell_width,
    group_by_node,
    heat_legend,
    lay_out,
    shown_rows,
)
from ..messages import RankChosen, RankHighlighted
from ..model import LOSS_BAD, LOSS_BAD_STATUSES, SORT_KEYS, STOPPED, STOPPING, RankRow, RowBuilder, shown_status
from ..styles import component_fg


_GONE = (st.EXITED, STOPPED, st.FINISHED, st.LEFT_EARLY, st.SILENT)
_CURSOR_HEAT = Style(reverse=True, bold=True)
_CURSOR_ON_REVERSED = Style(reverse=False, bold=True, underline=True)
"""The heat map's cursor over a glyph's style, and over one drawn reversed (an exited rank)."""
FULL_GLYPH = LEVEL_GLYPHS[2]
"""A glyph that fills its cell (no reverse shows the cursor on it)."""
Look = tuple[tuple[str, Style], ...]
"""How a rank is drawn: runs of text, a style each (a heat-map glyph, or a cell's fields)."""


def _glyph(status: str, hang: bool | None, level: int = 0) -> str:
    if status == st.RUNNING:
        return LEVEL_GLYPHS[level]
    return WAITING_GLYPH if hang is False else HEAT_GLYPHS.get(status, "?")


def fewest_lines(ranks: int, width: int, form: str, rank_width: int) -> int:
    """The fewest lines ``ranks`` ranks can take at ``width`` in any layout of ``form`` (at
    most a rank a column in a heat map, compact cells where there is none), whatever the room:
    a grid that takes more scrolls in every layout. (Not its lines at a shorter height: more
    room can take fewer lines, a rank a line giving way to cells or a map to its short form.)"""
    if form == "cells":
        per_line = max(1, (width - 1 + CELL_GAP) // (cell_width(COMPACT_COLUMNS, rank_width) + CELL_GAP))
    else:
        per_line = max(width, HEAT_BLOCK + 1)  # (a map's row is whole blocks of HEAT_BLOCK)
    return -(-ranks // per_line)


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
        "rank-grid--saving",
        "rank-grid--joined",
        "rank-grid--straggler",
        "rank-grid--stalled",
        "rank-grid--stall-cause",
        "rank-grid--waiting",
        "rank-grid--silent",
        "rank-grid--exited",
        "rank-grid--exited-after",
        "rank-grid--left",
        "rank-grid--stopping",
        "rank-grid--stopped",
        "rank-grid--finished",
        "rank-grid--dev-warn",
        "rank-grid--dev-bad",
        "rank-grid--loss-bad",
        "rank-grid--unsharded",
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
    RankGrid > .rank-grid--cursor {
        color: $block-cursor-foreground;
        background: $block-cursor-background;
        text-style: $block-cursor-text-style;
    }
    RankGrid > .rank-grid--cursor-blurred {
        color: $block-cursor-blurred-foreground;
        background: $block-cursor-blurred-background;
        text-style: $block-cursor-blurred-text-style;
    }
    RankGrid > .rank-grid--starting { color: $text-muted; }
    RankGrid > .rank-grid--running { color: $text-success; }
    RankGrid > .rank-grid--saving { color: $text-primary; }
    RankGrid > .rank-grid--joined { color: $text-secondary; }
    RankGrid > .rank-grid--straggler { color: $text-warning; text-style: bold; }
    RankGrid > .rank-grid--stalled { color: $text-error; text-style: bold; }
    RankGrid > .rank-grid--stall-cause { color: $text-error; text-style: bold reverse; }
    RankGrid > .rank-grid--waiting { color: $text-warning; }
    RankGrid > .rank-grid--unsharded { color: $text-warning; text-style: bold; }
    RankGrid > .rank-grid--silent { color: $text-error; }
    RankGrid > .rank-grid--exited { color: $text-error; text-style: bold reverse; }
    RankGrid > .rank-grid--exited-after { color: $text-error 70%; }
    RankGrid > .rank-grid--left { color: $text-error; text-style: bold reverse; }
    RankGrid > .rank-grid--stopping { color: $text-secondary; }
    RankGrid > .rank-grid--stopped { color: $text-secondary; }
    RankGrid > .rank-grid--finished { color: $text-primary; }
    RankGrid > .rank-grid--dev-warn { color: $text-warning; }
    RankGrid > .rank-grid--dev-bad { color: $text-error; text-style: bold; }
    RankGrid > .rank-grid--loss-bad { color: $text-error; text-style: bold; }
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
        self._table = RowBuilder()
        """Every rank (see update_rows)."""
        self._table_gen = -1
        """The table's update last drawn from."""
        self._layout = GridLayout(ordered=[], lines=[], columns=(), heat=False, rank_width=4)
        self._layout_key: tuple = ()
        """What the layout was made from (order, nodes, size, form, sort)."""
        self._looks: dict[int, Look] = {}
        """Drawing of each ordered rank (a cell or a glyph), kept while it looks the same."""
        self._look_keys: dict[int, object] = {}
        """What each kept drawing was made from: a heat key (status, deviation level, exit
        order) or a cell's row."""
        self._strips: dict[int, Strip] = {}
        """Drawn lines by line number, dropped when anything on them changes."""
        self._line_of: dict[int, int] = {}
        """Line of each ordered rank."""
        self._glyphs: dict[object, Look] = {}
        """A heat-map glyph for each look (status, deviation level, exit order)."""
        self._plan: tuple[GridLayout | None, list[tuple[str, int]]] = (None, [])
        """The layout a cell plan was made for, and the plan (see _cell_plan)."""
        self._styles: dict[str, Style] = {}
        """Component styles over the base style ("" is the base), cleared on style changes."""
        self._width = 80
        """Columns the layout was made for."""
        self._legend_key: frozenset[str] | None = None
        """What the heat map's legend was made for (see _legend_present)."""
        self._legend: tuple[list[list[LegendItem]], int] = ([], 1)
        """The heat map's legend: its lines and the spaces between entries (see heat_legend)."""
        self._levels: dict[int, int] = {}
        """The self-time level of each rank drawn as running (▪ ■ █), for the legend to list
        the levels drawn only (see _track_levels)."""
        self._level_counts = [0, 0, 0]
        self._loss_bad: set[int] = set()
        """Ranks drawn ⊘, their loss not finite (model.LOSS_BAD): the legend lists it while any is."""
        """Ranks drawn as running at each level."""
        self._head = 1
        """Lines of the title (the column names) or the heat map's legend, above the ranks."""
        self._cursor_moved = False
        """Whether a person moved the cursor (until then it stays on the first rank drawn)."""
        self._can_choose: bool | None = None
        """Whether a rank is selected (the footer shows "⏎ Detail"), as last told the footer."""

    # -- feeding ----------------------------------------------------------------------------

    @property
    def rows(self) -> list[RankRow]:
        """Every rank's row, by rank."""
        return self._table.rows()

    @property
    def table(self) -> RowBuilder:
        """Every rank as of the last update (see :meth:`update_rows`)."""
        return self._table

    @property
    def shown_ranks(self) -> list[int]:
        """Ranks drawn, in drawing order (after filter and sort)."""
        return [row.rank for row in self._layout.ordered]

    @property
    def heat(self) -> bool:
        """True when the grid is drawn as a heat map."""
        return self._layout.heat

    @property
    def layout(self) -> GridLayout:
        """The current layout (lines, cell fields, where each rank is)."""
        return self._layout

    def row_of(self, rank: int | None) -> RankRow | None:
        """The row of ``rank`` (drawn or filtered out), if the rank is known."""
        return self._table.row(rank)

    def shows(self, rank: int | None) -> bool:
        """Whether ``rank`` is drawn (not filtered out)."""
        return rank is not None and rank in self._layout.where

    @property
    def one_column_width(self) -> int | None:
        """The width the grid needs to draw every shown rank a line each with every column, if
        they fit its height so (else None: it is using whatever width it has). The dashboard
        gives the rest of a wide terminal to the panels beside it."""
        layout = self._layout
        room = (self.scrollable_content_region.height or self.size.height) - 1
        if layout.heat or layout.max_cols != 1 or not 0 < len(layout.lines) <= room:
            return None
        return cell_width(WIDE_COLUMNS[0] if self._table.gpu else WIDE_COLUMNS[1], layout.rank_width) + 1

    def update_rows(self, table: RowBuilder) -> None:
        """Take the ranks as of ``table``'s last update and redraw what changed.

        The layout changes only when the order or the set of drawn ranks does; otherwise
        cells update in place, and only the visible lines holding a cell that looks
        different are redrawn (a heat map of steady ranks redraws nothing). A heat map looks
        only at the ranks the update says changed; cells compare the rows of the visible
        lines, so the rows of ranks off screen are never made.
        """
        since = self._table_gen
        if table is not self._table:
            self._table = table
            since = -1
        self._table_gen = table.gen
        self._track_levels(table.changed if since == table.gen - 1 else None)
        layout = self._layout_key
        self._relayout()
        if self._layout_key != layout:
            self.refresh()
            return
        # Same layout: keep the drawings whose look did not change, redraw the lines that did.
        looks, keys = self._looks, self._look_keys
        lines = self._layout.lines
        top = self.scroll_offset.y
        visible = range(top, min(len(lines), top + self.size.height))
        for y in list(self._strips):
            if y not in visible:
                del self._strips[y]
        dirty: set[int] = set()
        if self._layout.heat:
            if self._legend_present() != self._legend_key:
                # The legend lists what ranks draw: a status come or gone redraws it, and lays
                # the grid out again if the legend takes another number of lines.
                head = self._head
                self._make_legend()
                if len(self._legend[0]) != head or not head:
                    self._relayout(force=True)
                    self.refresh()
                    return
                self.refresh_lines(0, head)
            changed = table.changed if since == table.gen - 1 else None
            if changed is None:
                suspects = list(looks)
            else:
                suspects = []
                where, cells = self._layout.where, [line.cells for line in lines]
                for rank in changed:
                    at = where.get(rank)
                    if at is not None:
                        suspects.append(cells[at[0]][at[1]][1])
            ordered = self._layout.ordered
            for index in suspects:
                if index in looks and keys.get(index) != table.heat_key(ordered[index].rank):
                    del looks[index]
                    dirty.add(self._line_of[index])
        else:
            # Cells: the visible ones' rows are made and drawn now (their look is their key:
            # a rank whose figures moved without changing what the cell says is not redrawn).
            kept: dict[int, Look] = {}
            ordered = self._layout.ordered
            row_of, cell_look = table.row, self._cell_look
            for y in visible:
                for _x, index in lines[y].cells:
                    look = cell_look(row_of(ordered[index].rank))  # type: ignore[arg-type]
                    if looks.get(index) != look:
                        dirty.add(y)
                    kept[index] = look
            self._looks = kept
        start = count = 0
        for y in sorted(dirty):
            self._strips.pop(y, None)
            if count and y == start + count:
                count += 1
                continue
            if count:
                self.refresh_lines(start + self._head, count)  # the title's lines come first
            start, count = y, 1
        if count:
            self.refresh_lines(start + self._head, count)

    def _relayout(self, force: bool = False) -> None:
        width = self.scrollable_content_region.width or self.size.width or 80
        height = self.scrollable_content_region.height or self.size.height or 24
        table = self._table
        self._width = width
        if self.sort_key == "rank":
            # Rank order: the places change only with the ranks, their nodes or their flags.
            ordered = None
            key: tuple = (id(table), table.layout_gen, table.flagged_gen, width, height, self.form, self.flagged_only)
        else:
            ordered = shown_rows(table.rows(), sort_key=self.sort_key, flagged_only=self.flagged_only, grouped=False)
            # What is drawn: a sorted heat map's order across nodes, else node by node (two ranks
            # of two nodes trading places change no cell: re-laid out for it, 21 frames in 45).
            drawn = ordered if self._layout.heat else group_by_node(ordered, self.sort_key)
            key = (
                tuple(row.rank for row in drawn),
                tuple(row.node for row in drawn),
                # (the ranks shown may stay none while ranks come: "no flagged ranks" then)
                table.layout_gen,
                self.flagged_only,
                table.flagged_gen,
                table.gpu,
                width,
                height,
                self.form,
                self.sort_key,
            )
        if key == self._layout_key and not force:
            return
        rows = table.rows()
        settings = {"width": width, "form": self.form, "sort_key": self.sort_key, "flagged_only": self.flagged_only, "gpu": table.gpu}
        layout = lay_out(rows, height=height, ordered=ordered, **settings)
        self._head = 1
        if layout.heat:
            self._make_legend()
            if len(self._legend[0]) > 1:  # the legend's second line is the ranks' first
                self._head = len(self._legend[0])
                layout = lay_out(rows, height=height - self._head + 1, ordered=ordered, **settings)
        if (
            layout.ordered
            and len(layout.lines) + self._head > height
            and fewest_lines(len(layout.ordered), width, self.form, layout.rank_width) <= height
        ):
            # Too short for the ranks under their title (a tiny terminal): the ranks keep the
            # lines, the column names or the legend give way. At 60x15 the grid had two lines,
            # the legend and a node's header, and its ranks under a scrollbar. (Only where they
            # can fit: a grid that scrolls anyway laid itself out twice a frame, 4.2 ms each at
            # 1024 ranks in cells.)
            bare = lay_out(rows, height=height + 1, ordered=ordered, **settings)
            if len(bare.lines) <= height:
                layout, self._head = bare, 0
        self._layout_key = key
        self._layout = layout
        self._line_of = {idx: y for y, line in enumerate(layout.lines) for _x, idx in line.cells}
        self._looks.clear()
        self._strips.clear()
        self.virtual_size = Size(width, len(layout.lines) + self._head)
        if layout.ordered and (
            self.cursor_rank is None or self.cursor_rank not in layout.where or not self._cursor_moved
        ):
            # Until a rank is chosen, the cursor is on the first (ranks say hello in any order).
            self.cursor_rank = layout.ordered[0].rank
        elif self.cursor_rank is not None:
            self._scroll_to_cursor()
        self._choosable_changed()

    # -- drawing ------------------------------------------------------------------------------

    def _style(self, name: str) -> Style:
        """A component's style over the widget's own (cached until the styles change)."""
        style = self._styles.get(name)
        if style is None:
            # The cursor brings its own colours and background (like a DataTable's).
            part = (
                self.get_component_rich_style(name)
                if name.startswith("rank-grid--cursor")
                else component_fg(self, name)
            )
            style = self._styles[name] = self._base() + part
        return style

    def _base(self) -> Style:
        style = self._styles.get("")
        if style is None:
            style = self._styles[""] = self.rich_style
        return style

    def _status_style(self, status: str, exit_first: bool | None, hang: bool | None = None) -> Style:
        """``hang``: True for the rank a hang likely waits for, False for one waiting for it
        (see RowBuilder.heat_key): the cause stands out from its victims."""
        if status == STOPPED:  # (stopped after a failure: no failure of its own, not its colour)
            return self._style("rank-grid--stopped")
        if status == st.LEFT_EARLY:  # (the root cause of its peers' failure, as an exit that caused theirs)
            return self._style("rank-grid--left")
        if exit_first is False:
            return self._style("rank-grid--exited-after")
        if hang is True:
            return self._style("rank-grid--stall-cause")
        if hang is False:
            return self._style("rank-grid--waiting")
        return self._style(f"rank-grid--{status}")

    def _heat_style(self, status: str, level: int, exit_first: bool | None, hang: bool | None = None) -> Style:
        if status == LOSS_BAD:
            return self._style("rank-grid--loss-bad")
        if status == st.RUNNING:
            if level == 2:
                return self._style("rank-grid--dev-bad")
            if level == 1:
                return self._style("rank-grid--dev-warn")
        return self._status_style(status, exit_first, hang)

    def render_line(self, y: int) -> Strip:
        width = self._width
        base = self._base()
        if y < self._head:
            segments = list(self._title_segments(width, y))
        else:
            index = self.scroll_offset.y + y - self._head
            if index >= len(self._layout.lines):
                return Strip.blank(width, base)
            strip = self._strips.get(index)
            if strip is None:
                strip = self._strips[index] = self._line_strip(self._layout.lines[index], width)
            return strip
        return Strip(Segment.simplify(segments)).crop_extend(0, width, base)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._looks.clear()
        self._glyphs.clear()
        self._styles.clear()
        self._strips.clear()

    def _title_segments(self, width: int, line: int = 0) -> Iterable[Segment]:
        if self._layout.heat:
            yield from self._legend_segments(width, line)
            return
        title = self._style("rank-grid--title")
        sorted_style = self._style("rank-grid--title-sorted")
        yield Segment(" ", self._base())
        for k in range(self._layout.max_cols):
            if k:
                yield Segment(" " * CELL_GAP, self._base())
            for j, key in enumerate(self._layout.columns):
                if j:
                    yield Segment(" ", self._base())
                if key == "rank":
                    text, sort = f"{'rank':>{self._layout.rank_width}}", "rank"
                else:
                    name, w, sort = COLUMN_SPEC[key]
                    text = f"{name:<{w}}" if key == "status" else f"{name:>{w}}"
                yield Segment(text, sorted_style if sort == self.sort_key else title)

    def _legend_segments(self, width: int, line: int = 0) -> Iterable[Segment]:
        lines, gap = self._legend
        dim = self._style("rank-grid--dim")
        yield Segment(" ", self._base())
        used = 1
        for glyph, cls, text in lines[line] if line < len(lines) else ():
            piece = len(text) + 2
            if used + piece > width:
                break
            yield Segment(glyph, self._style(f"rank-grid--{cls}"))
            yield Segment(f" {text}" + " " * gap, dim)
            used += piece + gap

    def _make_legend(self) -> None:
        self._legend_key = present = self._legend_present()
        self._legend = heat_legend(self._width, set(present))

    @property
    def head_lines(self) -> int:
        """Lines above the ranks: the column names, or the heat map's legend (one or two;
        none where the grid is too short for them and its ranks)."""
        return self._head

    def _track_levels(self, changed: Iterable[int] | None) -> None:
        """Keep the level of each rank drawn as running, looking at the ranks in ``changed``
        (None: every rank): what the legend lists of the three."""
        table, levels, counts = self._table, self._levels, self._level_counts
        if changed is None:
            levels.clear()
            counts[:] = [0, 0, 0]
            self._loss_bad.clear()
            changed = table.ranks
        for rank in changed:
            key = table.heat_key(rank)
            level = key[1] if key is not None and key[0] == st.RUNNING else None
            if key is not None and key[0] == LOSS_BAD:
                self._loss_bad.add(rank)
            else:
                self._loss_bad.discard(rank)
            old = levels.pop(rank, None)
            if old is not None:
                counts[old] -= 1
            if level is not None:
                levels[rank] = level
                counts[level] += 1

    def _legend_present(self) -> frozenset[str]:
        """What the legend must list: the statuses some rank has, "waiting" while stalled
        ranks wait for a hang's cause, and the levels running ranks draw (see heat_legend)."""
        present = {status for status, n in self._table.totals.status_counts.items() if n and status != st.RUNNING}
        present.update(key for key, n in zip(LEVEL_KEYS, self._level_counts) if n)
        if self._loss_bad:
            present.add(LOSS_BAD)
        if self._table.waiting:
            present.add("waiting")
        return frozenset(present)

    def _look(self, index: int) -> Look:
        """The runs of the rank at ``index`` (a glyph or a cell), cached until it looks
        different, the layout or the styles change, so redrawing a line costs no formatting."""
        look = self._looks.get(index)
        if look is None:
            rank = self._layout.ordered[index].rank
            if self._layout.heat:
                key = self._table.heat_key(rank)
                look = self._glyphs.get(key)
                if look is None:
                    status, level, exit_first, hang = key  # type: ignore[misc]
                    look = ((_glyph(status, hang, level), self._heat_style(status, level, exit_first, hang)),)
                    self._glyphs[key] = look
                self._look_keys[index] = key
            else:
                look = self._cell_look(self._table.row(rank))  # type: ignore[arg-type]
            self._looks[index] = look
        return look

    def _line_strip(self, line: GridLine, width: int) -> Strip:
        """One grid line as a strip of exactly ``width`` cells. Runs of one style are joined as
        they come (styles are shared objects, so ``is`` finds them), sparing Rich's simplify
        and Textual's measuring and padding of the strip."""
        base = self._base()
        segments: list[Segment] = []
        texts: list[str] = []
        current: Style | None = base
        length = 0
        """Cells drawn so far."""

        def run(text: str, style: Style, cells: int) -> None:
            nonlocal current, length
            if style is not current and style != current:
                if texts:
                    segments.append(Segment("".join(texts), current))
                    texts.clear()
                current = style
            texts.append(text)
            length += cells

        x_at = 0
        """Where the layout puts the next piece (a cell that overflows its width pushes the
        rest of the line right, as text does)."""
        heat = self._layout.heat
        if line.kind != "heat":
            for x, text, cls in line.labels:
                if line.kind == "node":
                    text = f"─ {text} "
                    text = text + "─" * max(0, width - cell_len(text) - 1)
                run(" " * max(0, x - x_at), base, max(0, x - x_at))
                n = cell_len(text)
                run(text, self._style(f"rank-grid--{cls}"), n)
                x_at = x + n
        cursor_rank = self.cursor_rank
        ordered = self._layout.ordered
        step = 1 if heat else self._layout.cell_width
        for x, kind, payload, cls in line.items:
            if x > x_at:
                run(" " * (x - x_at), base, x - x_at)
                x_at = x
            if kind == 0:
                n = cell_len(payload)  # type: ignore[arg-type]
                run(payload, self._style(f"rank-grid--{cls}"), n)  # type: ignore[arg-type]
                x_at += n
                continue
            look = self._look(payload)  # type: ignore[arg-type]
            if ordered[payload].rank == cursor_rank:  # type: ignore[index]
                if heat:
                    # A glyph drawn reversed already (an exited rank's) is drawn plain and
                    # underlined: reversing it again showed it as every other exited rank. A
                    # full block (+25%) reversed is a cell of the background, and underlined no
                    # different: it takes the cursor's colours, as a cell does.
                    look = tuple(
                        (text, style + (self._cursor_style() if text == FULL_GLYPH else _CURSOR_ON_REVERSED if style.reverse else _CURSOR_HEAT))
                        for text, style in look
                    )
                else:
                    extra = self._cursor_style()
                    look = tuple((text, style + extra) for text, style in look)
            for text, style in look:
                run(text, style, len(text))
            x_at += step
        if texts:
            segments.append(Segment("".join(texts), current))
        if length < width:
            segments.append(Segment(" " * (width - length), base))
        elif length > width:
            return Strip(segments, length).crop(0, width)
        return Strip(segments, width)

    def _cursor_style(self) -> Style:
        return self._style("rank-grid--cursor" if self.has_focus else "rank-grid--cursor-blurred")

    def _cell_look(self, row: RankRow) -> Look:
        """A cell's runs of text, a style each (the figures of a cell are single-width);
        neighbouring fields of one style make one run."""
        base = self._base()
        dim = self._style("rank-grid--dim")
        status = shown_status(row)
        exit_first = row.exit_first
        hang = True if row.cause and status in (st.STALLED, st.SILENT) else False if row.waiting else None
        if status == STOPPED:  # (by Ctrl-C, a Stop, SIGTERM: "exit -15" read as a failure)
            status_text, status_style = STOPPED, self._status_style(status, exit_first)
        elif status == st.EXITED and row.exit_code is not None:
            status_text, status_style = f"exit {row.exit_code}", self._status_style(status, exit_first)
        elif status == st.LEFT_EARLY:  # (its step is in the cell's step column; the legend says "left early")
            status_text, status_style = "left", self._status_style(status, exit_first)
        elif status == STOPPING:  # (a stop began: "running" read as if it went on)
            status_text, status_style = STOPPING, self._style("rank-grid--stopping")
        elif row.not_sharding and status == st.RUNNING:
            status_text, status_style = "unsharded", self._style("rank-grid--unsharded")
        elif row.saving:  # (its step stands still meanwhile: said, not a plain "running")
            status_text, status_style = "saving", self._style("rank-grid--saving")
        elif row.joined:  # (out of inputs under DDP's Join: its step stands still, by design)
            status_text, status_style = "joined", self._style("rank-grid--joined")
        elif hang is False:
            status_text, status_style = "waiting", self._status_style(status, exit_first, hang)
        else:
            status_text, status_style = status, self._status_style(status, exit_first, hang)
        level = row.deviation_level
        gone = status in _GONE
        value = dim if gone else base
        runs: list[tuple[str, Style]] = []
        texts: list[str] = []
        current = None
        for key, w in self._cell_plan():
            if key == " ":
                text, style = " ", base
            elif key == "rank":
                text, style = f"{row.rank:>{w}}", self._style("rank-grid--rank")
            elif key == "status":
                text, style = f"{status_text[:w]:<{w}}", status_style
            elif key == "glyph":
                if row.loss_not_finite is not None and status in LOSS_BAD_STATUSES:
                    text, style = HEAT_GLYPHS[LOSS_BAD], self._style("rank-grid--loss-bad")  # (see model.LOSS_BAD)
                else:
                    text, style = _glyph(status, hang, level), self._heat_style(status, level, exit_first, hang)
            elif key == "dev":
                text = f"{DASH if gone else fmt_deviation(row.self_dev):>{w}}"
                style = (
                    self._style("rank-grid--dev-bad")
                    if level == 2
                    else self._style("rank-grid--dev-warn")
                    if level == 1
                    else dim
                )
            elif key == "loss" and row.loss_not_finite is not None and row.loss is None:
                # Its steps carry no loss while it is not finite: "nan" (in the alarm's colour),
                # not the "–" of a loss never reported.
                text, style = f"{row.loss_not_finite[0]:>{w}}", self._style("rank-grid--loss-bad")
            else:
                if key == "loss":
                    figure = fmt_loss(row.loss)
                elif key == "step_no":
                    figure = fmt_step_no(row.step)
                elif key == "step":
                    figure = fmt_step_time(row.step_s)
                elif key == "held":
                    figure = fmt_bytes(row.held_bytes, short=True)
                elif key == "self":
                    figure = fmt_step_time(row.self_s)
                elif key == "data":
                    figure = fmt_step_time(row.data_s)
                elif key == "comm":
                    figure = fmt_step_time(row.comm_s)
                elif key == "gpu":
                    figure = DASH if row.gpu_util_pct is None else f"{row.gpu_util_pct:.0f}%"
                else:  # gpu_mem
                    figure = fmt_bytes(row.gpu_mem_bytes, short=True)
                text, style = f"{figure:>{w}}", value
            if style is not current:
                if texts:
                    runs.append(("".join(texts), current))  # type: ignore[arg-type]
                    texts.clear()
                current = style
            texts.append(text)
        if texts:
            runs.append(("".join(texts), current))  # type: ignore[arg-type]
        return tuple(runs)

    def _cell_plan(self) -> list[tuple[str, int]]:
        """A cell's fields and their widths, a " " between two (for the current layout)."""
        layout = self._layout
        if self._plan[0] is not layout:
            plan: list[tuple[str, int]] = []
            for j, key in enumerate(layout.columns):
                if j:
                    plan.append((" ", 1))
                plan.append((key, layout.rank_width if key == "rank" else COLUMN_SPEC[key][1]))
            self._plan = (layout, plan)
        return self._plan[1]

    # -- cursor -------------------------------------------------------------------------------

    def watch_cursor_rank(self, old: int | None, new: int | None) -> None:
        for rank in (old, new):
            where = self._layout.where.get(rank) if rank is not None else None
            if where is not None:
                self._strips.pop(where[0], None)
        self._scroll_to_cursor()
        self.refresh()
        self.post_message(RankHighlighted(new))
        self._choosable_changed()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "choose":
            # No rank selected (none yet, or none flagged under f): no "⏎ Detail" in the footer,
            # where it stood over "no rank selected" and enter did nothing.
            return self.shows(self.cursor_rank)
        return True

    def _choosable_changed(self) -> None:
        """Tell the footer when a rank comes to be selected, or none is (see check_action)."""
        can = self.shows(self.cursor_rank)
        if can != self._can_choose:
            self._can_choose = can
            self.refresh_bindings()

    def watch_form(self) -> None:
        self._relayout(force=True)
        self.refresh()

    def watch_sort_key(self) -> None:
        # A new order is read from its top: the cursor kept its rank, which could leave the
        # first-sorted ranks off-screen.
        self._cursor_moved = False
        self._relayout(force=True)
        self.scroll_home(animate=False)
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
        where = self._layout.where.get(self.cursor_rank) if self.cursor_rank is not None else None
        if where is None:
            return
        line = where[0]
        visible = max(1, (self.scrollable_content_region.height or self.size.height) - self._head)
        top = self.scroll_offset.y
        # Keep the node header in view when the cursor is on a group's first line.
        want_top = line - 1 if line > 0 and self._layout.lines[line - 1].kind == "node" else line
        if want_top < top:
            self.scroll_to(y=want_top, animate=False)
        elif line >= top + visible:
            self.scroll_to(y=line - visible + 1, animate=False)

    def select(self, rank: int) -> None:
        """Put the cursor on ``rank`` (if drawn), as a person moving it there would."""
        if rank in self._layout.where:
            self._cursor_moved = True
            self.cursor_rank = rank

    def action_cursor(self, how: str) -> None:
        if not self._layout.where:
            return
        self._cursor_moved = True
        if self.cursor_rank not in self._layout.where:
            self.cursor_rank = self._layout.ordered[0].rank
            return
        line, pos = self._layout.where[self.cursor_rank]  # type: ignore[index]
        lines = self._layout.lines
        index = lines[line].cells[pos][1]
        if how == "left":
            index = max(0, index - 1)
        elif how == "right":
            index = min(len(self._layout.ordered) - 1, index + 1)
        elif how == "home":
            index = 0
        elif how == "end":
            index = len(self._layout.ordered) - 1
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
                index = len(self._layout.ordered) - 1
        self.cursor_rank = self._layout.ordered[index].rank

    def action_choose(self) -> None:
        if self.cursor_rank is not None and self.cursor_rank in self._layout.where:
            self.post_message(RankChosen(self.cursor_rank))

    def rank_at(self, x: int, y: int) -> int | None:
        """The rank drawn at content offset (x, y), if any."""
        if y < self._head:
            return None
        index = self.scroll_offset.y + y - self._head
        if not 0 <= index < len(self._layout.lines):
            return None
        line = self._layout.lines[index]
        w = 1 if line.kind == "heat" else self._layout.cell_width
        for cx, idx in line.cells:
            if cx <= x < cx + w:
                return self._layout.ordered[idx].rank
        return None

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        rank = self.rank_at(offset.x, offset.y)
        if rank is None:
            return
        self._cursor_moved = True
        self.cursor_rank = rank
        if event.chain >= 2:
            self.post_message(RankChosen(rank))
