"""Per-rank stacked bars of model state held, against expected and unsharded (Line API)."""

from __future__ import annotations

from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ..format import fmt_bytes, fmt_ratio
from ..memory import MemorySavings, RankMemory
from ..styles import CachedStyles, component_fg

PARTS = (
    ("params_bytes", "memory-bars--params", "params"),
    ("grads_bytes", "memory-bars--grads", "grads"),
    ("optim_bytes", "memory-bars--optim", "optimizer"),
    ("buckets_bytes", "memory-bars--buckets", "DDP buckets"),
)
"""Stacked parts, left to right: (RankMemory field, component class, legend label)."""
TAIL_WIDTH = 35
"""Columns after the bar: held / unsharded, the saving and a warning mark."""
BUCKETS_WIDTH = len(" + 1023 KiB buckets")
"""Columns more after the bar of a rank with DDP buckets: they come on top of its full copy."""
SHORT_BUCKETS = " + buckets"
"""The same where the figure would leave the bar under ``MIN_BAR`` cells."""
MIN_BAR = 16


class MemoryBars(CachedStyles, ScrollView, can_focus=True):
    """One line per rank: parameters, gradients, optimizer state and DDP buckets as a stacked
    bar, the rest of what an unsharded rank would hold shaded after it, and a marker where the
    strategy's expectation (ZeRO arithmetic) sits. Draws only the lines on screen."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "memory-bars--params",
        "memory-bars--grads",
        "memory-bars--optim",
        "memory-bars--buckets",
        "memory-bars--unsharded",
        "memory-bars--expected",
        "memory-bars--rank",
        "memory-bars--text",
        "memory-bars--good",
        "memory-bars--bad",
    }

    DEFAULT_CSS = """
    MemoryBars {
        height: 1fr;
        overflow-x: hidden;
        scrollbar-size-vertical: 1;
        background: $surface;
    }
    MemoryBars > .memory-bars--params { color: $primary; }
    MemoryBars > .memory-bars--grads { color: $secondary; }
    MemoryBars > .memory-bars--optim { color: $accent; }
    MemoryBars > .memory-bars--buckets { color: $foreground 45%; }
    MemoryBars > .memory-bars--unsharded { color: $foreground 25%; }
    MemoryBars > .memory-bars--expected { color: $text-success; text-style: bold; }
    MemoryBars > .memory-bars--rank { text-style: bold; }
    MemoryBars > .memory-bars--text { color: $text-muted; }
    MemoryBars > .memory-bars--good { color: $text-success; }
    MemoryBars > .memory-bars--bad { color: $text-warning; text-style: bold; }
    """

    savings: reactive[MemorySavings | None] = reactive(None)
    """The run's per-rank memory (None until a rank has reported it)."""

    def watch_savings(self, savings: MemorySavings | None) -> None:
        n = len(savings.ranks) if savings is not None else 1
        self.virtual_size = Size(self.scrollable_content_region.width, n)
        self.refresh()

    def _s(self, name: str) -> Style:
        return self._base + component_fg(self, f"memory-bars--{name}")

    @property
    def _base(self) -> Style:
        return self.rich_style

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width or self.size.width
        base = self.rich_style
        s = self.savings
        index = self.scroll_offset.y + y
        if s is None:
            if y == 0:
                return (
                    Strip([Segment(" no memory figures yet", self._s("text"))])
                    .apply_style(base)
                    .crop_extend(0, width, base)
                )
            return Strip.blank(width, base)
        if index >= len(s.ranks):
            return Strip.blank(width, base)
        return Strip(self._bar(s, s.ranks[index], width)).apply_style(base).crop_extend(0, width, base)

    @staticmethod
    def scale_bytes(s: MemorySavings, bar_w: int) -> int:
        """Bytes a full bar stands for: the unsharded size, unless that would leave the held
        part under a few cells (hundreds of ranks sharding): then the held and expected bytes
        set the scale and the unsharded rest runs off it (drawn ``░…»``)."""
        held = max(m.total_bytes for m in s.ranks)
        full = max(m.full_bytes for m in s.ranks)
        expected = s.expected_per_rank_bytes or 0
        linear = max(held, full, expected, 1)
        if held * bar_w / linear >= 4 or not held:
            return linear
        return int(max(held, expected) * 1.5)

    def _bar_width(self, s: MemorySavings, width: int) -> int:
        return max(10, width - max(3, len(str(s.ranks[-1].rank))) - 2 - self._tail_width(s, width))

    @staticmethod
    def _tail_width(s: MemorySavings, width: int) -> int:
        if not s.buckets_bytes:
            return TAIL_WIDTH
        rank_w = max(3, len(str(s.ranks[-1].rank)))
        if width - rank_w - 2 - TAIL_WIDTH - BUCKETS_WIDTH >= MIN_BAR:
            return TAIL_WIDTH + BUCKETS_WIDTH
        return TAIL_WIDTH + len(SHORT_BUCKETS)

    def off_scale(self, s: MemorySavings) -> bool:
        """Does the unsharded size run off the bars (see :meth:`scale_bytes`)?"""
        width = self.scrollable_content_region.width or self.size.width or 80
        return self.scale_bytes(s, self._bar_width(s, width)) < max(m.full_bytes for m in s.ranks)

    def _bar(self, s: MemorySavings, r: RankMemory, width: int) -> list[Segment]:
        rank_w = max(3, len(str(s.ranks[-1].rank)))
        bar_w = self._bar_width(s, width)
        expected = s.expected_per_rank_bytes or 0
        scale = self.scale_bytes(s, bar_w)
        cells = bar_w / scale
        bounds = []
        acc = 0
        for field, cls, _ in PARTS:
            acc += getattr(r, field)
            bounds.append((int(round(acc * cells)), self._s(cls.split("--")[1])))
        full_end = int(round(r.full_bytes * cells))
        off_scale = full_end > bar_w
        marker = min(bar_w - 1, int(round(expected * cells))) if expected else -1
        unsharded = self._s("unsharded")
        expected_style = self._s("expected")
        segments = [Segment(f"{r.rank:>{rank_w}} ", self._s("rank"))]
        for x in range(bar_w):
            if x == marker:
                segments.append(Segment("┃", expected_style))
                continue
            style = next((st for end, st in bounds if x < end), None)
            if style is not None:
                segments.append(Segment("█", style))
            elif off_scale and x == bar_w - 1:
                segments.append(Segment("»", unsharded))
            else:
                segments.append(Segment("░" if x < full_end else " ", unsharded))
        over = r.rank in s.over_expectation
        ratio = r.full_bytes / r.held_bytes if r.held_bytes else None
        shards = bool(ratio and ratio > 1.05)
        saving = f"{fmt_ratio(ratio)} less" if shards else "its stage" if s.pipeline else "full copy"
        saving_style = self._s("bad") if over else self._s("good") if shards else self._s("text")
        wide = s.buckets_bytes and self._tail_width(s, width) > TAIL_WIDTH + len(SHORT_BUCKETS)
        # In the units of the rest of the screen ("1.62 MiB"; "1.62M" beside "1.62 MiB" in the
        # summary read as another kind of figure). Too narrow to say the buckets' size, the figure
        # is what the rank holds with them, as the grid's held: "1.62 MiB of 1.62 MiB  full copy
        # + buckets" read as 1.62 MiB with the buckets, beside a held 2.03 MiB.
        held = r.total_bytes if s.buckets_bytes and not wide else r.held_bytes
        tail = f" {fmt_bytes(held):>8} of {fmt_bytes(r.full_bytes):>8}  "
        segments.append(Segment(tail, self._s("text")))
        if s.buckets_bytes:
            # DDP's gradient buckets come on top of the full copy: the grid's "held" (and the bar)
            # count them, and "1.62M of 1.62M full copy" beside a held 2.03M left 415K unsaid.
            buckets = f" + {fmt_bytes(r.buckets_bytes)} buckets" if wide else SHORT_BUCKETS
            pad = BUCKETS_WIDTH if wide else len(SHORT_BUCKETS)
            segments.append(Segment(saving, saving_style))
            segments.append(Segment(f"{buckets:<{pad + 10 - len(saving)}}", self._s("text")))
        else:
            segments.append(Segment(f"{saving:<10}", saving_style))
        if over:
            segments.append(Segment(" ⚠", self._s("bad")))
        return list(Segment.simplify(segments))
