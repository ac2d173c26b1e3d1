"""One line under the grid: the selected rank's figures in words (the heat map has no room)."""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from pardash.telemetry import state as st

from ..format import fmt_bytes, fmt_deviation, fmt_loss, fmt_step_time
from ..model import RankRow
from ..styles import CachedStyles, component_fg, text_strip


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
            self._line = text_strip(self, self.render(), width)
        return self._line

    def _s(self, name: str) -> Style:
        return component_fg(self, f"selected-rank--{name}")

    def _pair(self, label: str, value: str) -> Text:
        return Text.assemble((label + " ", self._s("label")), (value, self._s("value")))

    def render(self) -> Text:
        row = self.row
        width = self.content_region.width or 80
        out = Text(no_wrap=True, overflow="ellipsis")
        if row is None:
            out.append("no rank selected", style=self._s("label"))
            return out
        status = row.status if row.exit_code is None else f"exited {row.exit_code}"
        self_text = fmt_step_time(row.self_s)
        if row.self_dev is not None and row.status not in (st.EXITED, st.FINISHED):
            self_text += f" ({fmt_deviation(row.self_dev)})"
        # Most telling first; what does not fit is left out, never wrapped.
        pieces = [
            Text(f"rank {row.rank}", style=self._s("value")),
            Text(status, style=self._s("flag") if row.flagged else self._s("value")),
            self._pair("self", self_text),
            self._pair("loss", fmt_loss(row.loss)),
            self._pair("step time", fmt_step_time(row.step_s)),
            self._pair("held", fmt_bytes(row.held_bytes)),
            self._pair("step", str(row.step) if row.step is not None else "–"),
            Text(f"{row.host or 'node'} (node {row.node})", style=self._s("label")),
        ]
        sep = " · "
        for piece in pieces:
            need = (len(sep) if out.cell_len else 0) + piece.cell_len
            if out.cell_len + need > width:
                break
            if out.cell_len:
                out.append(sep, style=self._s("label"))
            out.append_text(piece)
        hint = Text("⏎ detail", style=self._s("hint"))
        if out.cell_len + 2 + hint.cell_len <= width:
            out.append(" " * (width - out.cell_len - hint.cell_len))
            out.append_text(hint)
        return out
