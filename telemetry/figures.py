"""A series of figures (a rank's step times, one of its phases) for its median and its total, in
bounded memory however long the run: the report keeps one per rank and phase.

The first :data:`EXACT` figures of a series are kept one by one (8 bytes each), and a series no
longer than that has its exact median. Past them they are counted in logarithmic bins, as
DDSketch counts them: bin ``k`` holds the figures in ``(GAMMA**(k-1), GAMMA**k]`` and stands for
``2 * GAMMA**k / (GAMMA + 1)``, within ``(GAMMA - 1) / (GAMMA + 1)`` (0.05 %) of any figure in it,
so the median read from the bins is within 0.05 % of the exact one (of figures between
:data:`LEAST` and :data:`LARGEST`, a nanosecond and months). The bins are counted in an
array from the least figure's to the largest's, 4 bytes each: times within a factor of 2 of each
other take 694 bins, 2.7 KB, whatever the series' length (kept one by one, a day of 256 ranks at
10 steps a second took about 10 GB).
"""

from __future__ import annotations

import bisect
import math
import statistics
from array import array
from collections import Counter

EXACT = 4096
"""Figures of a series kept one by one; past them, binned (and folded in this many at a time)."""
GAMMA = 1.001
"""The bins' ratio: a binned median is within (GAMMA - 1) / (GAMMA + 1) of the exact one."""
_LOG_GAMMA = math.log(GAMMA)
LEAST, LARGEST = 1e-9, 1e7
"""Positive figures below a nanosecond or above 115 days share the bin at that end (a hand-made
log's 1e-300 beside real times stretched the array over 690,000 bins, 2.7 MB a series)."""
_LEAST_BIN, _LARGEST_BIN = math.ceil(math.log(LEAST) / _LOG_GAMMA), math.ceil(math.log(LARGEST) / _LOG_GAMMA)


class Figures:
    """One series: :meth:`append` (where it is hot, ``values.append`` and :meth:`fold` once
    ``values`` holds EXACT), ``len()`` (every figure appended), :meth:`total` and :meth:`median`."""

    __slots__ = ("values", "_counts", "_first", "_below", "_zeros", "_binned", "_binned_total")

    def __init__(self) -> None:
        self.values = array("d")
        """The figures not binned (all of them, up to EXACT)."""
        self._counts: array | None = None
        """Binned positive figures: how many in each bin from ``_first`` on (4 bytes a bin, one
        for each bin between the least and the largest figure's); None until the first fold."""
        self._first = 0
        self._below: Counter[int] = Counter()
        """Binned negative figures by the bin of their magnitude (a hand-made log's)."""
        self._zeros = 0
        self._binned = 0
        """Figures binned, counted (NaN too, which no bin holds)."""
        self._binned_total = 0.0

    def append(self, x: float) -> None:
        values = self.values
        values.append(x)
        if len(values) >= EXACT:
            self.fold()

    def fold(self) -> None:
        """Count the figures kept one by one in the bins, and keep none."""
        values = self.values
        self._binned_total += sum(values)
        self._binned += len(values)
        self._counts, self._first, self._zeros = _binned(values, self._counts, self._first, self._below, self._zeros)
        del values[:]

    def __len__(self) -> int:
        return self._binned + len(self.values)

    def total(self) -> float:
        return self._binned_total + sum(self.values)

    def median(self) -> float | None:
        """The median (None: no figures): exact while nothing was binned, else within 0.05 %."""
        if self._counts is None:
            return statistics.median(self.values) if self.values else None
        below = Counter(self._below)
        counts, first, zeros = _binned(self.values, array("I", self._counts), self._first, below, self._zeros)
        # In order: the negative figures from the largest magnitude, the zeros, the positive.
        ordered = [(-_bin_value(k), n) for k, n in sorted(below.items(), reverse=True)]
        ordered += [(0.0, zeros)] if zeros else []
        ordered += [(_bin_value(first + i), n) for i, n in enumerate(counts) if n]
        n = sum(c for _, c in ordered)
        if not n:
            return None
        lo, hi = _nth(ordered, (n - 1) // 2), _nth(ordered, n // 2)
        return lo if lo == hi else (lo + hi) / 2


def _binned(values: array, counts: array | None, first: int, below: Counter[int], zeros: int) -> tuple[array, int, int]:
    """``values`` added to the bins (``counts`` from bin ``first`` on, grown to hold them,
    ``below`` updated in place): (counts, first, zeros)."""
    # (NaN, which a hand-made log may hold, in no bin: it would leave the order undefined)
    ordered = sorted(values if not math.isnan(sum(values)) else [x for x in values if x == x])
    # The positive figures, bin by bin: one logarithm and one bisection a bin, not a logarithm a
    # figure (4,096 of them: 3x as long, a fifth more for the whole report).
    i, end = bisect.bisect_right(ordered, 0.0), bisect.bisect_left(ordered, math.inf)
    zeros += i - bisect.bisect_left(ordered, 0.0)
    keys: list[tuple[int, int]] = []
    log, ceil, lg, right = math.log, math.ceil, _LOG_GAMMA, bisect.bisect_right
    while i < end:
        k = ceil(log(ordered[i]) / lg)
        if k <= _LEAST_BIN:  # (every figure up to the least bin's top: in it)
            k, j = _LEAST_BIN, right(ordered, GAMMA**_LEAST_BIN, i, end)
        elif k >= _LARGEST_BIN:
            k, j = _LARGEST_BIN, end
        else:
            j = right(ordered, GAMMA**k, i, end)
        j = max(j, i + 1)  # (a figure a rounding puts past its bin's top: in it)
        keys.append((k, j - i))
        i = j
    below.update(ceil(log(-x) / lg) for x in ordered[bisect.bisect_right(ordered, -math.inf) : bisect.bisect_left(ordered, 0.0)])
    if counts is None:
        counts, first = array("I"), keys[0][0] if keys else 0
    if keys:
        lo, hi = keys[0][0], keys[-1][0]
        if lo < first:
            counts[:0] = array("I", bytes(4 * (first - lo)))
            first = lo
        if hi >= first + len(counts):
            counts.extend(array("I", bytes(4 * (hi - first - len(counts) + 1))))
        for k, n in keys:
            counts[k - first] += n
    return counts, first, zeros


def _bin_value(k: int) -> float:
    return 2.0 * GAMMA**k / (GAMMA + 1.0)


def _nth(ordered: list[tuple[float, int]], i: int) -> float:
    """The ``i``-th figure (from 0) of bins in order."""
    for value, n in ordered:
        if i < n:
            return value
        i -= n
    raise IndexError(i)
