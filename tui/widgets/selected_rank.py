"""One line under the grid: the selected rank's figures in words (the heat map has no room)."""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from pardash.telemetry import state as st

from ..format import fmt_bytes, fmt_deviation, fmt_loss, fmt_step_time
from ..model import RankRow


class SelectedRank(Widget):
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
    sort_label: reactive[str] = reactive("")
    """How the grid is ordered and filtered, shown at the right."""

    def _s(self, name: str) -> Style:
        return self.get_component_rich_style(f"selected-rank--{name}", partial=True)

    def render(self) -> Text:
        row = self.row
        out = Text(no_wrap=True, overflow="ellipsis")
        if row is None:
            out.append("no rank selected", style=self._s("label"))
        else:
            label, value = self._s("label"), self._s("value")
            out.append(f"rank {row.rank}", style=value)
            where = f" · node {row.node}" + (f" {row.host}" if row.host else "")
            out.append(where, style=label)
            status = row.status if row.exit_code is None else f"exited {row.exit_code}"
            out.append(f" · {status}", style=self._s("flag") if row.flagged else value)
            pairs = [
                ("step", str(row.step) if row.step is not None else "–"),
                ("loss", fmt_loss(row.loss)),
                ("step", fmt_step_time(row.step_s)),
                ("self", fmt_step_time(row.self_s)),
            ]
            for name, text in pairs:
                out.append(f" · {name} ", style=label)
                out.append(text, style=value)
            if row.self_dev is not None and row.status not in (st.EXITED, st.FINISHED):
                out.append(f" ({fmt_deviation(row.self_dev)} vs others)", style=label)
            out.append(" · held ", style=label)
            out.append(fmt_bytes(row.held_bytes), style=value)
        hint = f"  {self.sort_label}  ⏎ detail" if row is not None else f"  {self.sort_label}"
        width = self.content_region.width or 80
        if out.cell_len + len(hint) <= width:
            out.append(" " * (width - out.cell_len - len(hint)))
            out.append(hint, style=self._s("hint"))
        return out
