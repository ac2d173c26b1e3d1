"""One line under the grid: the selected rank's figures in words (the heat map has no room)."""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from pardash.telemetry import state as st
from pardash.telemetry.failures import signal_name

from ..format import fmt_bytes, fmt_deviation, fmt_loss, fmt_step_time
from ..model import RankRow
from ..styles import CachedStyles, component_fg


class SelectedRank(CachedStyles, Widget):
    """The rank under the grid's cursor: node, host, status, step, loss, step time, self time
    against the others and memory held, with the key that opens its detail."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "selected-rank--label",
        "selected-rank--value",
        "selected-rank--flag",
        "selected-rank--hint",
    }

    DEFAULT_CSS = """
    SelectedRank {
        text-wrap: nowrap;
        text-overflow: ellipsis;
        height: 1;
        padding: 0 1;
        background: $panel;
    }
    SelectedRank > .selected-rank--label { color: $text-muted; }
    SelectedRank > .selected-rank--value { text-style: bold; }
    SelectedRank > .selected-rank--flag { color: $text-warning; text-style: bold; }
    SelectedRank > .selected-rank--hint { color: $text-muted; }
    """

    row: reactive[RankRow | None] = reactive(None)
    """The selected rank's row (None: nothing selected)."""

    _line: Strip | None = None
    """The drawn line, until the row, the size or the styles change."""

    def watch_row(self) -> None:
        self._line = None

    def on_resize(self) -> None:
        self._line = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._line = None

    def render_line(self, y: int) -> Strip:
        width = self.content_region.width
        if y:
            return Strip.blank(width, self.rich_style)
        if self._line is None or self._line.cell_length != width:
            # Straight from runs to segments: the line changes with every step of the rank.
            base = self.rich_style
            runs, used = self._runs(width)
            segments = [Segment(text, base + style) for text, style in runs]
            if used < width:
                segments.append(Segment(" " * (width - used), base))
            self._line = Strip(segments, max(width, used)).crop(0, width) if used > width else Strip(segments, width)
        return self._line

    def _s(self, name: str) -> Style:
        return component_fg(self, f"selected-rank--{name}")

    def _pair(self, label: str, value: str) -> list[tuple[str, Style]]:
        return [(label + " ", self._s("label")), (value, self._s("value"))]

    def render(self) -> Text:
        out = Text(no_wrap=True, overflow="ellipsis")
        for text, style in self._runs(self.content_region.width or 80)[0]:
            out.append(text, style=style)
        return out

    def _runs(self, width: int) -> tuple[list[tuple[str, Style]], int]:
        """The line as runs of styled text, and its length in cells: the most telling figures
        first; what does not fit is left out, never wrapped."""
        row = self.row
        if row is None:
            text = "no rank selected"
            return [(text, self._s("label"))], cell_len(text)
        if row.stopping:  # (the grid's "stopping": a stop began, the rank not ended yet)
            status = "stopping"
        elif row.exit_code is None:
            status = row.status
        elif row.stopped:  # (ended by a stop, not failing: the grid's "stopped")
            status = f"stopped ({signal_name(row.exit_code) or f'code {row.exit_code}'})"
        else:
            status = f"exited {row.exit_code}"
        short = status  # (what is left of it where the whole does not fit: see below)
        if row.stalled_in and row.status == st.STALLED:
            status += f" in {row.stalled_in}"  # what it is stuck in: the grid's cell has no room
        if row.waits_for:  # a hang's victim (drawn ◇): its own phase, then whom it waits for
            status += f", waiting for {row.waits_for}"  # ("waiting for rank 1 (stalled in backward)" read as rank 1's)
            short += f", waiting for {row.waits_for}"
        if row.cause:  # (a sort by status puts it first)
            said = ", the root cause" if row.status == st.EXITED else ", likely the cause"
            status += said
            short += said
        self_text = fmt_step_time(row.self_s)
        if row.self_dev is not None and row.status not in (st.EXITED, st.FINISHED, st.LEFT_EARLY):
            self_text += f" ({fmt_deviation(row.self_dev)})"
        pieces = [
            [(f"rank {row.rank}", self._s("value"))],
            [(status, self._s("flag") if row.flagged else self._s("value"))],
            self._pair("self", self_text),
            # (a loss gone NaN: its steps carry none, and "loss –" read as one never reported)
            self._pair("loss", fmt_loss(row.loss) if row.loss is not None or row.loss_not_finite is None
                       else f"{row.loss_not_finite[0]} since step {row.loss_not_finite[1]}"),  # fmt: skip
            self._pair("wall", fmt_step_time(row.step_s)),  # the grid's column: the median of its last steps
            self._pair("held", fmt_bytes(row.held_bytes)),
            self._pair("step", str(row.step) if row.step is not None else "–"),
            [(f"{row.host or 'node'} (node {row.node})", self._s("label"))],
        ]
        sep = " · "
        out: list[tuple[str, Style]] = []
        used = 0
        for k, piece in enumerate(pieces):
            n = sum(cell_len(text) for text, _style in piece)
            need = (len(sep) if used else 0) + n
            if used + need > width and k == 1:
                # The status, the line's second fact, is shortened, never left out ("rank 0
                # ⏎ detail" of a hung rank at 80 columns): its phase goes first, then its end.
                room = width - used - len(sep)
                if room < 2:
                    break
                text = short if cell_len(short) <= room else set_cell_size(short, room - 1).rstrip(" ,") + "…"
                piece = [(text, piece[0][1])]
                n = cell_len(text)
                need = len(sep) + n
            if used + need > width:
                break
            if used:
                out.append((sep, self._s("label")))
            out.extend(piece)
            used += need
        hint = "⏎ detail"
        n = cell_len(hint)
        if used + 2 + n <= width:
            out.append((" " * (width - used - n), None))  # type: ignore[arg-type]
            out.append((hint, self._s("hint")))
            used = width
        return out, used
