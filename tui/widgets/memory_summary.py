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
from .fit import refresh_fitted


class MemorySummary(CachedStyles, Widget):
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

    def watch_savings(self) -> None:
        refresh_fitted(self)

    def _s(self, name: str) -> Style:
        return component_fg(self, f"memory-summary--{name}")

    def _row(self, label: str, value: str, rest: str = "", style: str = "value") -> Text:
        return Text.assemble(
            (f"{label:<10}", self._s("label")), (value, self._s(style)), (f" {rest}" if rest else "", self._s("dim"))
        )

    def render(self) -> Text:
        s = self.savings
        if s is None:
            return Text("no memory figures yet", style=self._s("dim"))
        n = len(s.ranks)
        lo, med, hi = s.held_per_rank
        # "state": parameters, gradients, optimizer state; the grid's "held" adds DDP's buckets
        lines = [self._row("state", fmt_bytes(s.held_bytes), f"across {n} rank{'s' if n != 1 else ''}")]
        if s.buckets_bytes:
            lines.append(self._row("buckets", fmt_bytes(s.buckets_bytes), "DDP buckets, extra"))
        # A total, like "state": what the same ranks would hold with a full copy each.
        lines.append(self._row("unsharded", fmt_bytes(s.full_bytes), f"{n} full cop{'ies' if n != 1 else 'y'}"))
        ratio = s.ratio
        if s.saving_bytes > 0 and (ratio or 0) > 1.05:
            lines.append(self._row("saving", fmt_bytes(s.saving_bytes), f"· {fmt_ratio(ratio)} less", "good"))
        else:
            lines.append(self._row("saving", "none:", "full copies", "dim"))
        per_rank = fmt_bytes(med)
        spread = f"(min {fmt_bytes(lo)} · max {fmt_bytes(hi)})" if hi > lo * 1.01 else ""
        if s.buckets_bytes:
            # The grid's "held" counts a DDP rank's buckets too: say the same sum here.
            buckets = sorted(r.buckets_bytes for r in s.ranks)[len(s.ranks) // 2]
            spread = f"+ {fmt_bytes(buckets)} buckets = {fmt_bytes(med + buckets)} {spread}".rstrip()
        lines.append(self._row("per rank", per_rank, spread))
        expected = s.expected_per_rank_bytes
        if expected:
            lines.append(self._row("expected", fmt_bytes(expected), f"({s.expected_label})"))
            if not s.sharded and s.world_size > 1 and s.sharded_expected_bytes:
                lines.append(self._row("FSDP", fmt_bytes(s.sharded_expected_bytes), f"if sharded ÷ {s.world_size}"))
        over = s.over_expectation
        if over:
            ranks = ", ".join(str(r) for r in over[:6]) + (", …" if len(over) > 6 else "")
            lines.append(
                Text(f"⚠ not sharding as expected: rank{'s' if len(over) > 1 else ''} {ranks}", style=self._s("bad"))
            )
        return Text("\n").join(lines)
