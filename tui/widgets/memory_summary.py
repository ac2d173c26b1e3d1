"""The sharding-savings panel: memory held across ranks against the unsharded alternative."""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ..format import fmt_bytes, fmt_ratio
from ..memory import MemorySavings
from ..styles import CachedStyles, component_fg
from .fit import FittedWidth, Phrase, fit_phrases, refresh_fitted


class MemorySummary(FittedWidth, CachedStyles, Widget):
    """Model state (parameters, gradients, optimizer state) held across all ranks against what
    the same ranks would hold unsharded, the saving in bytes and as a ratio, the bytes per rank
    and what a rank should hold under the run's strategy (its state unsharded, over N when fully
    sharded). ``m`` opens the per-rank view."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "memory-summary--label",
        "memory-summary--value",
        "memory-summary--good",
        "memory-summary--bad",
        "memory-summary--dim",
    }

    DEFAULT_CSS = """
    MemorySummary {
        height: auto;
        padding: 0 1;
    }
    MemorySummary > .memory-summary--label { color: $text-muted; }
    MemorySummary > .memory-summary--value { text-style: bold; }
    MemorySummary > .memory-summary--good { color: $text-success; text-style: bold; }
    MemorySummary > .memory-summary--bad { color: $text-warning; text-style: bold; }
    MemorySummary > .memory-summary--dim { color: $text-muted; }
    """

    savings: reactive[MemorySavings | None] = reactive(None)
    """The run's savings (None until a rank has reported its memory)."""

    LABEL_WIDTH = 10
    """Columns of a row's label; a row's phrases that do not fit its line go under its value."""

    def watch_savings(self) -> None:
        refresh_fitted(self)

    def _s(self, name: str) -> Style:
        return component_fg(self, f"memory-summary--{name}")

    def _row(self, label: str, value: str, *rest: str, style: str = "value") -> list[Phrase]:
        """A row: its label and value, then phrases that each stay whole on a line."""
        dim = self._s("dim")
        return [((f"{label:<{self.LABEL_WIDTH}}", self._s("label")), (value, self._s(style))), *(((r, dim),) for r in rest if r)]

    def render(self) -> Text:
        width = self._fitted_width = self._measuring or self.content_region.width or 40
        s = self.savings
        if s is None:
            return Text("no memory figures yet", style=self._s("dim"))
        n = len(s.ranks)
        lo, med, hi = s.held_per_rank
        # "state": parameters, gradients, optimizer state; the grid's "held" adds DDP's buckets
        rows = [self._row("state", fmt_bytes(s.held_bytes), f"across {n} rank{'s' if n != 1 else ''}")]
        if s.buckets_bytes:
            rows.append(self._row("buckets", fmt_bytes(s.buckets_bytes), "DDP buckets, extra"))
        # A total, like "state": what the same ranks would hold with a full copy each.
        # (a pipeline's ranks each hold a stage of the model: "2 full copies" and "saving none:
        # full copies" said the opposite)
        copies = f"{n} stage{'s' if n != 1 else ''}, unsharded" if s.pipeline else f"{n} full cop{'ies' if n != 1 else 'y'}"
        rows.append(self._row("unsharded", fmt_bytes(s.full_bytes), copies))
        ratio = s.ratio
        if s.saving_bytes > 0 and (ratio or 0) > 1.05:
            # (of model state, as every row here: an FSDP run on CPU saving 129 MiB of it used more
            # process RSS than DDP, and "saving 129 MiB" read as the process's, review 340)
            rows.append(self._row("saving", fmt_bytes(s.saving_bytes), "model state", f"· {fmt_ratio(ratio)} less", style="good"))
        else:
            rows.append(self._row("saving", "none:", "each its own stage" if s.pipeline else "full copies", style="dim"))
        spread = f"(min {fmt_bytes(lo)} · max {fmt_bytes(hi)})" if hi > lo * 1.01 else ""
        if s.buckets_bytes:
            # The grid's "held" counts a DDP rank's buckets too: say the same sum here.
            buckets = sorted(r.buckets_bytes for r in s.ranks)[len(s.ranks) // 2]
            rows.append(self._row("per rank", fmt_bytes(med), f"+ {fmt_bytes(buckets)} buckets", f"= {fmt_bytes(med + buckets)}", spread))
        else:
            rows.append(self._row("per rank", fmt_bytes(med), spread))
        expected = s.expected_per_rank_bytes
        if expected:
            rows.append(self._row("expected", fmt_bytes(expected), f"({s.expected_label})"))
            if not s.sharded and s.world_size > 1 and s.sharded_expected_bytes:
                rows.append(self._row("FSDP", fmt_bytes(s.sharded_expected_bytes), f"if sharded ÷ {s.world_size}"))
        # Each row's phrases whole: at 120 columns "expected 830 KiB (its state unsharded ÷"
        # left "2)" alone on the next line, and "… buckets =" its "2.03 MiB".
        dim = self._s("dim")
        lines = [Text.assemble(*line) for row in rows for line in fit_phrases(row, width, indent=self.LABEL_WIDTH, space_style=dim)]
        over = s.over_expectation
        if over:
            ranks = ", ".join(str(r) for r in over[:6]) + (", …" if len(over) > 6 else "")
            lines.append(
                Text(f"⚠ not sharding as expected: rank{'s' if len(over) > 1 else ''} {ranks}", style=self._s("bad"))
            )
        return Text("\n").join(lines)
