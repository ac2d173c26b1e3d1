"""Per-rank stacked bars of model state held, against expected and unsharded (Line API)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from pardash.telemetry.report_render import GROUP_LISTED, RANKS_FOLDED_PAST
from pardash.telemetry.summary import ranks_text

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
PART_GLYPHS = {
    "memory-bars--params": "█",
    "memory-bars--grads": "▆",
    "memory-bars--optim": "▄",
    "memory-bars--buckets": "▂",
}
"""Each part's fill (by component class), lower the further right: the parts are told apart by
their shape too, not by colour alone (all were █: under NO_COLOR the gradients were 1.3:1
against the panel, and in 16 colours the same grey as the unsharded ░)."""
TAIL_WIDTH = 35
"""Columns after the bar: held / unsharded, the saving and a warning mark."""
BUCKETS_WIDTH = len(" + 1023 KiB buckets")
"""Columns more after the bar of a rank with DDP buckets: they come on top of its full copy."""
SHORT_BUCKETS = " + buckets"
"""The same where the figure would leave the bar under ``MIN_BAR`` cells."""
MIN_BAR = 16
ZOOMED_CELLS = 8
"""Cells the middle rank's held part takes where the unsharded size would leave it fewer (see
:meth:`MemoryBars.scale_bytes`): its parts told apart, and a rank a fifth over the rest
seen so. A job sharded more ways is never
drawn fuller than one sharded fewer: zoomed from under 4 cells to 12, 10 ranks at 80 columns were
drawn across 12 cells beside 8 ranks' 5 to scale (review 305); across two thirds of the bar
before, 64 ranks' "64.0× less" beside 8 ranks' "8.0× less" across an eighth (review 298)."""


@dataclass(frozen=True, slots=True)
class BarLine:
    """A line of the view: a rank's bar, or for ranks folded into a row (``ranks``, more than
    one), the line naming them (``names``) or their bar, drawn from ``memory``: the figures
    most of them have."""

    memory: RankMemory
    ranks: tuple[int, ...]
    names: str = ""
    """On the line naming a fold's ranks: them, as ``ranks_text`` says them ("0-511, 513-1023")."""


def bar_lines(s: MemorySavings, over: frozenset[int] | None = None) -> list[BarLine]:
    """The view's lines. Up to RANKS_FOLDED_PAST ranks (as the report's rank table), a bar a
    rank, by rank. Past them, ranks whose figures read alike (each part held, the buckets, the
    unsharded size, the flag) fold into a row, named on a line over its bar, when more than
    GROUP_LISTED of them are (fewer are a row each); the ranks that differ come first: those
    flagged not sharding, then the rest, larger holders first, the largest fold (most ranks) last.
    At 1,024 ranks a list of 1,024 alike rows buried the one that held a full copy. ``over``:
    ``s.over_expectation``, where worked out already."""
    if len(s.ranks) <= RANKS_FOLDED_PAST:
        return [BarLine(m, (m.rank,)) for m in s.ranks]
    over = frozenset(s.over_expectation) if over is None else over
    # By bytes first (a few keys however many ranks), then by the figures as shown; a fold's
    # bar is drawn from its most common bytes.
    by_bytes: dict[tuple, list[RankMemory]] = {}
    for m in s.ranks:
        key = (m.params_bytes, m.grads_bytes, m.optim_bytes, m.buckets_bytes, m.full_bytes, m.rank in over)
        by_bytes.setdefault(key, []).append(m)
    alike: dict[tuple, list[list[RankMemory]]] = {}
    for (*figures, flagged), ms in by_bytes.items():
        alike.setdefault((*(fmt_bytes(b) for b in figures), flagged), []).append(ms)
    groups = [(max(parts, key=len)[0], sorted(m.rank for ms in parts for m in ms)) for parts in alike.values()]
    most = max(len(ranks) for _, ranks in groups)
    groups.sort(key=lambda g: (g[0].rank not in over, len(g[1]) == most > GROUP_LISTED, -g[0].total_bytes, g[1][0]))
    lines: list[BarLine] = []
    by_rank = {m.rank: m for m in s.ranks}
    for m, ranks in groups:
        if len(ranks) > GROUP_LISTED:
            folded = tuple(ranks)
            lines += [BarLine(m, folded, names=_ranks_text(folded)), BarLine(m, folded)]
        else:
            lines += [BarLine(by_rank[r], (r,)) for r in ranks]
    return lines


@lru_cache(maxsize=16)
def _ranks_text(ranks: tuple[int, ...]) -> str:
    # (the same folds again at each redraw of a live run, whose RSS moves: at 32,768 ranks
    # saying them took 20 ms)
    return ranks_text(list(ranks))


def names_text(line: BarLine, width: int) -> tuple[str, str]:
    """A folded row's ranks and their count, ``("ranks 0-511, 513-1023", " (1,023 ranks,
    alike)")``, the ranks cut at a comma to fit ``width`` (``"ranks 0-2, 4-76, …"``)."""
    text, count = line.names, f" ({len(line.ranks):,} ranks, alike)"
    room = width - len(count) - len("ranks ")
    if len(text) > room:
        cut = text.rfind(", ", 0, max(0, room - len(", …")))
        text = (text[:cut] if cut > 0 else text.split(", ")[0]) + ", …"
    return f"ranks {text}", count


class MemoryBars(CachedStyles, ScrollView, can_focus=True):
    """One line per rank: parameters, gradients, optimizer state and DDP buckets as a stacked
    bar (each part a fill of its own, :data:`PART_GLYPHS`), the rest of what an unsharded rank would hold shaded after it, and a marker where the
    strategy's expectation (ZeRO arithmetic) sits. Past 32 ranks, ranks alike share a row and
    the ranks that differ come first (:func:`bar_lines`). Draws only the lines on screen."""

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

    lines: tuple[BarLine, ...] = ()
    """The lines drawn, from :func:`bar_lines` (fewer than the ranks where alike ones fold)."""
    _over: frozenset[int] = frozenset()
    """The ranks flagged not sharding as expected (``MemorySavings.over_expectation``)."""
    _figures_of: MemorySavings | None = None
    _figures_now: tuple[int, int, int, int] = (0, 0, 0, 0)

    def watch_savings(self, savings: MemorySavings | None) -> None:
        self._over = frozenset(savings.over_expectation) if savings is not None else frozenset()
        self.lines = tuple(bar_lines(savings, self._over)) if savings is not None else ()
        self.virtual_size = Size(self.scrollable_content_region.width, max(1, len(self.lines)))
        self.refresh()

    @property
    def folded(self) -> bool:
        """Are ranks alike folded into rows?"""
        return any(len(line.ranks) > 1 for line in self.lines)

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
        if index >= len(self.lines):
            return Strip.blank(width, base)
        line = self.lines[index]
        if line.names:  # (a fold's first line)
            names, count = names_text(line, width - 1)
            segments = [Segment(" "), Segment(names, self._s("rank")), Segment(count, self._s("text"))]
        else:
            segments = self._bar(s, line.memory, width, folded=len(line.ranks) > 1)
        return Strip(segments).apply_style(base).crop_extend(0, width, base)

    def _figures(self, s: MemorySavings) -> tuple[int, int, int, int]:
        """(most held by a rank, held by the middle rank (past RANKS_FOLDED_PAST ranks; the
        most below), largest unsharded, expected), in bytes:
        worked out once for each ``s``, not for each line (at 1,024 ranks each line's medians
        and maxima came to milliseconds)."""
        if self._figures_of is not s:
            totals = sorted(m.total_bytes for m in s.ranks)
            # (a small job's bars as before: scaled to its largest holder, every rank a row)
            middle = totals[(len(totals) - 1) // 2] if len(totals) > RANKS_FOLDED_PAST else totals[-1]
            full = max(m.full_bytes for m in s.ranks)
            self._figures_of, self._figures_now = s, (totals[-1], middle, full, s.expected_per_rank_bytes or 0)
        return self._figures_now

    def scale_bytes(self, s: MemorySavings, bar_w: int) -> int:
        """Bytes a full bar stands for: the unsharded size, unless that would leave the middle
        rank's held part under ZOOMED_CELLS (many ranks sharding, or a narrow terminal): then its held and the
        expected bytes set the scale and the unsharded rest runs off it (drawn ``░…»``), as does
        the bar of a rank holding far more (``█…»``: at 1,024 ranks one holding a full copy set
        the scale, and the others' bars, 1/1024 of it, were no cell at all). Up to
        RANKS_FOLDED_PAST ranks the middle rank is the largest holder, as before."""
        held, middle, full, expected = self._figures(s)
        linear = max(held, full, expected, 1)
        if middle * bar_w / linear >= ZOOMED_CELLS or not middle:
            return linear  # (to scale)
        # (to ZOOMED_CELLS, no more: its held part across two thirds of the bar, "64.0× less" at
        # 64 ranks looked fuller than 8 ranks' "8.0× less" across an eighth, review 298)
        return max(1, int(max(middle, expected) * bar_w / ZOOMED_CELLS))

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
        return self.scale_bytes(s, self._bar_width(s, width)) < self._figures(s)[2]

    def _bar(self, s: MemorySavings, r: RankMemory, width: int, folded: bool = False) -> list[Segment]:
        rank_w = max(3, len(str(s.ranks[-1].rank)))
        bar_w = self._bar_width(s, width)
        expected = self._figures(s)[3]
        scale = self.scale_bytes(s, bar_w)
        cells = bar_w / scale
        bounds = []
        acc = 0
        for field, cls, _ in PARTS:
            acc += getattr(r, field)
            bounds.append((int(round(acc * cells)), PART_GLYPHS[cls], self._s(cls.split("--")[1])))
        full_end = int(round(r.full_bytes * cells))
        off_scale = full_end > bar_w
        held_off = bounds[-1][0] > bar_w  # (a rank holding far more than most: see scale_bytes)
        marker = min(bar_w - 1, int(round(expected * cells))) if expected else -1
        unsharded = self._s("unsharded")
        expected_style = self._s("expected")
        # (a fold's bar under the line naming its ranks: no rank's number of its own)
        segments = [Segment(" " * (rank_w + 1) if folded else f"{r.rank:>{rank_w}} ", self._s("rank"))]
        for x in range(bar_w):
            if x == marker:
                segments.append(Segment("┃", expected_style))
                continue
            part = next(((glyph, st) for end, glyph, st in bounds if x < end), None)
            if part is not None:
                segments.append(Segment("»" if held_off and x == bar_w - 1 else part[0], part[1]))
            elif off_scale and x == bar_w - 1:
                segments.append(Segment("»", unsharded))
            else:
                segments.append(Segment("░" if x < full_end else " ", unsharded))
        over = r.rank in self._over
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
