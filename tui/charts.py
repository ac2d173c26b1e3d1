"""Chart series for a rank's history against the other ranks, downsampled to a chart's width.

The x axis is the step number, so ranks line up step for step. Each of the chart's columns holds
the mean of the rank's points that fall in it (as nvitop averages samples per display
interval); the others' median and spread (min to max) are taken over the other ranks' column
means. Empty columns carry the previous value, so a short history still draws a line.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from pardash.telemetry.state import RankState, RunState

MAX_BAND_RANKS = 128
"""Other ranks read for the median and spread (evenly spaced when there are more), so a chart
at 1024 ranks costs what it costs at 128."""

NAN = float("nan")


@dataclass(frozen=True, slots=True)
class ChartSeries:
    """What a chart draws: one value per column (NaN: nothing there)."""

    values: tuple[float, ...]
    """The rank's values."""
    median: tuple[float, ...]
    """The other ranks' median."""
    low: tuple[float, ...]
    """The other ranks' minimum."""
    high: tuple[float, ...]
    """The other ranks' maximum."""
    first_step: int
    last_step: int
    latest: float | None
    """The rank's last value (not downsampled)."""
    others: int
    """Other ranks in the band."""


def _bucketize(steps: list[float], values: list[float], s0: float, span: float, width: int) -> list[float]:
    sums = [0.0] * width
    counts = [0] * width
    scale = (width - 1) / span if span > 0 else 0.0
    for step, v in zip(steps, values, strict=False):
        if v != v or step != step:  # NaN
            continue
        c = int(round((step - s0) * scale))
        if 0 <= c < width:
            sums[c] += v
            counts[c] += 1
    out = [NAN] * width
    last = NAN
    started = False
    for c in range(width):
        if counts[c]:
            last = sums[c] / counts[c]
            started = True
        if started:
            out[c] = last
    return out


def _sample(ranks: list[RankState], limit: int) -> list[RankState]:
    if len(ranks) <= limit:
        return ranks
    stride = len(ranks) / limit
    return [ranks[int(i * stride)] for i in range(limit)]


def chart_series(state: RunState, rank: int, column: str, width: int) -> ChartSeries | None:
    """The rank's ``column`` history and the others' band, ``width`` columns wide."""
    r = state.ranks.get(rank)
    if r is None or width < 2:
        return None
    steps = r.history["step"].values()
    values = r.history[column].values()
    finite = [s for s, v in zip(steps, values, strict=False) if not math.isnan(v)]
    if not finite:
        return None
    s0, s1 = min(finite), max(finite)
    span = s1 - s0
    mine = _bucketize(steps, values, s0, span, width)
    others = [q for q in state.ranks.values() if q.rank != rank and len(q.history[column])]
    others = _sample(sorted(others, key=lambda q: q.rank), MAX_BAND_RANKS)
    per_rank = [_bucketize(q.history["step"].values(), q.history[column].values(), s0, span, width) for q in others]
    median, low, high = [NAN] * width, [NAN] * width, [NAN] * width
    for c in range(width):
        col = [series[c] for series in per_rank if not math.isnan(series[c])]
        if col:
            median[c] = statistics.median(col)
            low[c] = min(col)
            high[c] = max(col)
    last = r.history[column].last()
    return ChartSeries(
        values=tuple(mine),
        median=tuple(median),
        low=tuple(low),
        high=tuple(high),
        first_step=int(s0),
        last_step=int(s1),
        latest=None if last is None or math.isnan(last) else float(last),
        others=len(per_rank),
    )
