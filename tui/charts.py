"""Chart series for a rank's history against the other ranks, downsampled to a chart's width.

The x axis is the step number, so ranks line up step for step. Each of the chart's columns holds
the mean of the rank's points that fall in it (as nvitop averages samples per display
interval); the others' median and spread (min to max) are taken over the other ranks' column
means. Empty columns between two points take the line between them (as TensorBoard draws it:
a run's chart has a point a frame, and fast steps left columns between them that drew flats
and drops the loss never made); after the last point they carry it.
"""

from __future__ import annotations

import math
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
    """Mean of the values per column (a point goes to the column nearest its step), empty
    columns filled by :func:`_carry`. The reference implementation, for any history."""
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
    return _carry([sums[c] / counts[c] if counts[c] else NAN for c in range(width)])


def _carry(means: list[float]) -> list[float]:
    """Empty (NaN) columns between two filled ones take the straight line between them; those
    after the last filled one carry it (none before the first)."""
    out = means
    last, at = NAN, -1
    for c, v in enumerate(means):
        if v == v:
            if at >= 0 and c - at > 1:
                rise = (v - last) / (c - at)
                for e in range(at + 1, c):
                    out[e] = last + rise * (e - at)
            last, at = v, c
    if at >= 0:
        for e in range(at + 1, len(out)):
            out[e] = last
    return out


Runs = list[tuple[int, int, int]]
"""(column, first point, end point): the points of a history that fall in each column."""


def _runs(steps: list[float], s0: float, span: float, width: int) -> Runs | None:
    """Where each column's points lie, when the steps rise (always, unless a rank restarted)
    and are all known; None otherwise."""
    if steps != sorted(steps) or sum(steps) != sum(steps):  # not rising, or a NaN among them
        return None
    scale = (width - 1) / span if span > 0 else 0.0
    cols = [int(round((step - s0) * scale)) for step in steps]
    runs: Runs = []
    start = 0
    for i in range(1, len(cols) + 1):
        if i == len(cols) or cols[i] != cols[start]:
            if 0 <= cols[start] < width:
                runs.append((cols[start], start, i))
            start = i
    return runs


class _Columns:
    """Downsamples histories to a chart's columns. Ranks of one job share their steps, so the
    points-to-columns map is worked out once per distinct step sequence, and each column's mean
    is a sum over a slice (no Python loop per point): a band over 128 ranks costs milliseconds."""

    def __init__(self, s0: float, span: float, width: int) -> None:
        self.s0, self.span, self.width = s0, span, width
        self._runs: dict[tuple[float, ...], Runs | None] = {}

    def runs(self, steps: list[float]) -> Runs | None:
        key = tuple(steps)
        runs = self._runs.get(key, ())
        if runs == ():
            runs = self._runs[key] = _runs(steps, self.s0, self.span, self.width)
        return runs

    def means(self, steps: list[float], values: list[float]) -> list[float]:
        runs = self.runs(steps)
        if runs is None:
            return _bucketize(steps, values, self.s0, self.span, self.width)
        means = [NAN] * self.width
        for c, a, b in runs:
            total = sum(values[a:b])
            if total != total:  # a step without this figure: leave it out, as _bucketize does
                known = [v for v in values[a:b] if v == v]
                means[c] = sum(known) / len(known) if known else NAN
            else:
                means[c] = total / (b - a)
        return _carry(means)


def _band_columns(steps: list[list[float]], values: list[list[float]], columns: _Columns) -> list[list[float]]:
    """The other ranks' known column means, column by column.

    Ranks that share their steps (a synchronous job: one or two groups, as a frame may catch
    some ranks a step ahead) and whose values are all known are done a column at a time, each
    column's points being one tuple across the group's ranks; the others rank by rank."""
    width = columns.width
    out: list[list[float]] = [[] for _ in range(width)]
    groups: dict[tuple[float, ...], list[int]] = {}
    for i, s in enumerate(steps):
        groups.setdefault(tuple(s), []).append(i)
    for members in groups.values():
        runs = columns.runs(steps[members[0]])
        # A rank with a missing value (NaN), or steps that fall back, goes alone.
        alone = set(members) if runs is None else {i for i in members if sum(values[i]) != sum(values[i])}
        for i in sorted(alone):
            for c, v in enumerate(columns.means(steps[i], values[i])):
                if v == v:
                    out[c].append(v)
        group_values = [values[i] for i in members if i not in alone]
        if not group_values or runs is None:
            continue
        points = list(zip(*group_values))
        col: tuple[float, ...] = ()
        at = -1
        for c, a, b in runs:
            new = points[a] if b - a == 1 else tuple(sum(t) / (b - a) for t in zip(*points[a:b]))
            if at >= 0:  # empty columns between two filled ones: the line between them
                for empty in range(at + 1, c):
                    f = (empty - at) / (c - at)
                    out[empty].extend(p + (q - p) * f for p, q in zip(col, new, strict=True))
            col = new
            out[c].extend(col)
            at = c
        for empty in range(at + 1, width):  # after the last: carried
            out[empty].extend(col)
    return out


def _sample(ranks: list[RankState], limit: int) -> list[RankState]:
    if len(ranks) <= limit:
        return ranks
    stride = len(ranks) / limit
    return [ranks[int(i * stride)] for i in range(limit)]


def _band(others: list[RankState], column: str, columns: _Columns) -> tuple[list[float], list[float], list[float]]:
    """Per column: the median, minimum and maximum of ``others``' ``column`` (NaN where none)."""
    width = columns.width
    others_steps = [q.history["step"].values() for q in others]
    others_values = [q.history[column].values() for q in others]
    median, low, high = [NAN] * width, [NAN] * width, [NAN] * width
    for c, col in enumerate(_band_columns(others_steps, others_values, columns)):
        if col:
            col.sort()
            n = len(col)
            median[c] = col[n // 2] if n % 2 else (col[n // 2 - 1] + col[n // 2]) / 2
            low[c] = col[0]
            high[c] = col[-1]
    return median, low, high


def chart_series(state: RunState, rank: int, column: str, width: int) -> ChartSeries | None:
    """The rank's ``column`` history and the others' band, ``width`` columns wide."""
    r = state.ranks.get(rank)
    if r is None or width < 2:
        return None
    steps = r.history["step"].values()
    values = r.history[column].values()
    finite = [s for s, v in zip(steps, values, strict=False) if math.isfinite(v) and math.isfinite(s)]
    if not finite:
        return None
    s0, s1 = min(finite), max(finite)
    span = s1 - s0
    columns = _Columns(s0, span, width)
    mine = columns.means(steps, values)
    others = [q for q in state.ranks.values() if q.rank != rank and len(q.history[column])]
    others = _sample(sorted(others, key=lambda q: q.rank), MAX_BAND_RANKS)
    median, low, high = _band(others, column, columns)
    last = r.history[column].last()
    return ChartSeries(
        values=tuple(mine),
        median=tuple(median),
        low=tuple(low),
        high=tuple(high),
        first_step=int(s0),
        last_step=int(s1),
        latest=None if last is None or not math.isfinite(last) else float(last),
        others=len(others),
    )


def _extremes(steps: list[float], values: list[float], s0: float, span: float, width: int, pick) -> list[float]:
    """``pick`` (min or max) of the values per column, empty columns filled by :func:`_carry`."""
    out = [NAN] * width
    scale = (width - 1) / span if span > 0 else 0.0
    for step, v in zip(steps, values, strict=False):
        c = int(round((step - s0) * scale))
        if 0 <= c < width:
            out[c] = v if out[c] != out[c] else pick(out[c], v)
    return _carry(out)


def run_series(state: RunState, width: int) -> ChartSeries | None:
    """The run's loss from its first step (its trend, see telemetry/trend.py): the ranks'
    median as the line (no rank of its own, no median rule) over their spread, ``width``
    columns wide; ``others`` is the ranks with a loss and ``latest`` their newest losses'
    median."""
    steps, medians, lows, highs = state.trend.points()
    if width < 2 or not steps:
        return None
    s0, s1 = min(steps), max(steps)
    span = s1 - s0
    latest, n = newest_loss(state)
    return ChartSeries(
        values=tuple(_bucketize(steps, medians, s0, span, width)),
        median=(NAN,) * width,
        low=tuple(_extremes(steps, lows, s0, span, width, min)),
        high=tuple(_extremes(steps, highs, s0, span, width, max)),
        first_step=int(s0),
        last_step=int(s1),
        latest=latest,
        others=n,
    )


def newest_loss(state: RunState) -> tuple[float | None, int]:
    """The median of the ranks' newest losses (the losses the grid shows), and how many ranks
    have one."""
    newest = sorted(v for q in state.ranks.values() if q.step is not None and (v := q.step.loss) is not None and v == v)
    n = len(newest)
    return ((newest[n // 2] if n % 2 else (newest[n // 2 - 1] + newest[n // 2]) / 2) if n else None), n
