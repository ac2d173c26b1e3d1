"""The report's timeline: the run cut into about :data:`PARTS` parts of its steps, each with its
wall time, samples/s, step time (median and p90), loss and what stragglers cost in it: "did it
slow down in hour 12?".

The log is read once and its length is known only at its end, so the steps are gathered in
bins of ``width`` steps (1, then 2, 10, 20, 100, ... as the run grows past :data:`MAX_BINS` of
them) and the parts are made of whole bins at the end: a part spans a round number of steps that
is a multiple of the bins' width (:func:`part_steps`), so its edges fall on round steps and the
parts of a run of steps are the same size. Memory does not grow with the run: the bins are at
most MAX_BINS, and a bin keeps its steps' times and losses one by one up to ``Sketch.EXACT`` of
each, counted in logarithmic bins past them (:class:`Sketch`: a part's median and p90 are then
within 0.1 %).

A step is the ranks' records of it taken together (their mean step time and loss, the median of
their clocks for when it ended: a rank whose clock is off moves it nothing). A rank that goes
back in its steps (torchrun's restart, a job run again from a checkpoint: a step of a new attempt
not past its highest, or one more than BACK_STEPS below it) begins a new *run of steps*; parts
never straddle two, so a part's steps are in order and the steps run again are parts of their
own, said so. A run of steps's own time holds no restart: the time from one run
of steps to the next is in neither.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Iterable

PARTS = 10
"""The parts a timeline has at most, of one run of steps (fewer for a short run: see
MIN_PART_STEPS; a restart's steps run again begin parts of their own)."""
MIN_PART_STEPS = 5
"""The fewest steps a part holds: a run of 12 steps has 2 parts, not 10 of a step or two."""
MAX_BINS = 150
"""Bins kept; past them the bins are made 2x or 5x wider (so at least 30 of them, 3 a part)."""
LAG_STEPS = 64
"""A step is taken as complete (every rank's record of it in) once a rank is this many steps past
it; a record later than that counts its samples only."""
BACK_STEPS = 2
"""A rank's step more than this below its highest is no record sent out of order but a run of
steps begun again. (A rank's reporter sends its messages in order, on one socket; logs recorded
before it did so, when its heartbeats and rescued steps went on a second, had steps come late by
more than this at times, and read them as steps run again.) Within it, a step of a new attempt
(torchrun's restart count, where the caller says it) that is not past the rank's highest of the
attempt before begins one too: a crash at step 2 runs steps 1-2 again."""
_NEVER = -(1 << 62)
GAP_FLOOR_S = 1.0
GAP_STEPS = 10
"""A part's longest gap between two steps is said where it is past GAP_FLOOR_S and GAP_STEPS
times the part's median time from a step's end to the next's (a step, or the steps between two
a script logs)."""


def not_finite(a: str | None, b: str | None) -> str | None:
    """What losses not finite add up to: "nan" where one is, or where "inf" meets "-inf"; else
    the infinity they are (None: none)."""
    if a is None or a == b:
        return b
    if b is None:
        return a
    return "nan"


def part_steps(total: int, width: int = 1) -> int:
    """The steps a part spans, of a run of ``total`` steps (its runs of steps' spans added up),
    gathered in bins of ``width`` steps: a round number (1, 1.5, 2, 3, 4, 5, 6 or 8 times a power
    of ten) that cuts it into PARTS or fewer, its parts' edges on its multiples (steps 1-300,
    301-600, ...), and a multiple of ``width`` (whole bins a part: 1,500 steps in bins of 20 are
    parts of 200, not of 150, which cut them into 160 and 140); a short run's in parts of
    MIN_PART_STEPS or more (12 steps: 1-6, 7-12)."""
    if total < PARTS * MIN_PART_STEPS and width == 1:
        return -(-total // max(1, total // MIN_PART_STEPS))
    want, scale = max(total, PARTS * MIN_PART_STEPS) / PARTS, 1
    while True:
        for nice in (10, 15, 20, 30, 40, 50, 60, 80, 100):
            size = nice * scale // 10
            if nice * scale >= 10 * want and size % width == 0:
                return size
        scale *= 10


class Sketch:
    """Figures for their quantiles: exact up to EXACT, then counted in logarithmic bins of ratio
    GAMMA (a quantile within 0.1 % of the exact one). Mergeable, so bins join into parts."""

    EXACT = 64
    GAMMA = 1.002
    _LOG = math.log(GAMMA)
    __slots__ = ("values", "pos", "neg", "zeros")

    def __init__(self) -> None:
        self.values: list[float] | None = []
        self.pos: Counter[int] = Counter()
        self.neg: Counter[int] = Counter()
        self.zeros = 0

    def add(self, x: float) -> None:
        if x != x:  # NaN: no order
            return
        if self.values is not None:
            self.values.append(x)
            if len(self.values) > self.EXACT:
                self._fold()
        else:
            self._count(x)

    def _count(self, x: float) -> None:
        if x > 0:
            self.pos[math.ceil(math.log(min(x, 1e300)) / self._LOG)] += 1
        elif x < 0:
            self.neg[math.ceil(math.log(min(-x, 1e300)) / self._LOG)] += 1
        else:
            self.zeros += 1

    def _fold(self) -> None:
        values, self.values = self.values or [], None
        for x in values:
            self._count(x)

    def merge(self, other: Sketch) -> None:
        if self.values is not None and other.values is not None and len(self.values) + len(other.values) <= self.EXACT:
            self.values.extend(other.values)
            return
        if self.values is not None:
            self._fold()
        if other.values is not None:
            for x in other.values:
                self._count(x)
        else:
            self.pos.update(other.pos)
            self.neg.update(other.neg)
            self.zeros += other.zeros

    def __len__(self) -> int:
        if self.values is not None:
            return len(self.values)
        return sum(self.pos.values()) + sum(self.neg.values()) + self.zeros

    def _ordered(self) -> list[tuple[float, int]]:
        bin_value = lambda k: 2.0 * self.GAMMA**k / (self.GAMMA + 1.0)  # noqa: E731
        out = [(-bin_value(k), n) for k, n in sorted(self.neg.items(), reverse=True)]
        out += [(0.0, self.zeros)] if self.zeros else []
        return out + [(bin_value(k), n) for k, n in sorted(self.pos.items())]

    def _nth(self, i: int, ordered: list[tuple[float, int]]) -> float:
        for value, n in ordered:
            if i < n:
                return value
            i -= n
        raise IndexError(i)

    def median(self) -> float | None:
        n = len(self)
        if not n:
            return None
        if self.values is not None:
            v = sorted(self.values)
            return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
        ordered = self._ordered()
        lo, hi = self._nth((n - 1) // 2, ordered), self._nth(n // 2, ordered)
        return lo if lo == hi else (lo + hi) / 2

    def p90(self) -> float | None:
        """At least 9 in 10 of the figures are at most this (the nearest rank: the ceil(0.9 n)-th
        smallest, as the bench's p90)."""
        n = len(self)
        if not n:
            return None
        i = -(-9 * n // 10) - 1
        if self.values is not None:
            return sorted(self.values)[i]
        return self._nth(i, self._ordered())


class _Bin:
    """The steps of one run of steps from ``lo`` to ``hi`` within one bin."""

    __slots__ = ("lo", "hi", "steps", "samples", "t0", "t1", "step_s", "loss", "every_s", "gap_s", "gap_after",
                 "bad_steps", "bad_from", "bad_value", "bad_ranks", "loss_max", "loss_max_step", "data_s", "timed_s")

    def __init__(self) -> None:
        self.lo = self.hi = None
        self.steps = 0
        """Steps complete (each once, its ranks' records together)."""
        self.samples = 0
        self.t0 = self.t1 = None
        """The first step's start and the last step's end (the median of the ranks' clocks)."""
        self.step_s = Sketch()
        self.loss = Sketch()
        self.every_s = Sketch()
        """From one step's end to the next one's: a step's time, or more where a script logs one
        step in several (a gap is judged against it)."""
        self.gap_s = 0.0
        """The longest time from one step's end to the next one's start, the latter's in this bin."""
        self.gap_after: int | None = None
        self.bad_steps = 0
        """Steps whose loss was not finite on some rank (their mean loss is not: no figure in ``loss``)."""
        self.bad_from: int | None = None
        """The first of them."""
        self.bad_value: str | None = None
        """What their loss was: "nan", "inf" or "-inf" (:func:`not_finite`)."""
        self.bad_ranks = 0
        """The most ranks whose loss was not finite at one of them."""
        self.loss_max: float | None = None
        self.loss_max_step: int | None = None
        """Its highest step loss (the ranks' mean) and that step: a spike the median hides."""
        self.data_s = 0.0
        self.timed_s = 0.0
        """The ranks' seconds loading data, and the step seconds of the records that said so:
        the share of its steps the part spent loading data."""

    def merge(self, o: _Bin) -> None:
        self.lo = o.lo if self.lo is None else min(self.lo, o.lo) if o.lo is not None else self.lo
        self.hi = o.hi if self.hi is None else max(self.hi, o.hi) if o.hi is not None else self.hi
        self.steps += o.steps
        self.samples += o.samples
        self.t0 = o.t0 if self.t0 is None else min(self.t0, o.t0) if o.t0 is not None else self.t0
        self.t1 = o.t1 if self.t1 is None else max(self.t1, o.t1) if o.t1 is not None else self.t1
        self.step_s.merge(o.step_s)
        self.loss.merge(o.loss)
        self.every_s.merge(o.every_s)
        self.data_s += o.data_s
        self.timed_s += o.timed_s
        if o.gap_s > self.gap_s:
            self.gap_s, self.gap_after = o.gap_s, o.gap_after
        if o.loss_max is not None and (self.loss_max is None or o.loss_max > self.loss_max):
            self.loss_max, self.loss_max_step = o.loss_max, o.loss_max_step
        if o.bad_steps:
            self.bad_steps += o.bad_steps
            self.bad_from = o.bad_from if self.bad_from is None else min(self.bad_from, o.bad_from)
            self.bad_value = not_finite(self.bad_value, o.bad_value)
            self.bad_ranks = max(self.bad_ranks, o.bad_ranks)


class Timeline:
    """Fed every step record (:meth:`step`), in the log's order; :meth:`parts` at the end."""

    def __init__(self) -> None:
        self.width = 1
        self.bins: dict[tuple[int, int], _Bin] = {}
        self._ranks: dict[int, list] = {}
        """rank -> [its highest step in its run of steps, that run of steps (0 first; +1 each
        time it went back), the attempt of its records, its highest step before that attempt's
        first record (_NEVER: none before it in this run of steps)]."""
        self.open: dict[int, dict[int, list]] = {}
        """run of steps -> step -> [records, step seconds summed, samples, loss summed, losses, ends,
        ranks whose loss was not finite, what it was (:func:`not_finite`), data seconds summed,
        step seconds of the records that timed their data]."""
        self.highest: dict[int, int] = {}
        """run of steps -> the highest step a rank took in it."""
        self.closed_to: dict[int, int] = {}
        self.last_end: dict[int, tuple[float, int]] = {}
        """run of steps -> the end of its latest complete step, and that step."""
        self.attempt: dict[int, Any] = {}
        """run of steps -> the attempt (torchrun's restart count) its first record was of."""

    def step(self, rank: int, step: int, t: float, step_s: float, samples: int, loss: float | None, attempt: Any = 0,
             loss_bad: str | None = None, data_s: float | None = None) -> None:
        """A rank's record of a step; ``loss_bad``: its loss was not finite there ("nan", "inf",
        "-inf": its reporter sends none then, and said what it turned to); ``data_s``: its time
        loading data (None: not timed)."""
        # (once a record of every rank: kept lean)
        mine = self._ranks.get(rank)
        if mine is None:
            mine = self._ranks[rank] = [step, 0, attempt, _NEVER]
        elif attempt == mine[2]:
            if step > mine[0]:
                mine[0] = step
            elif step < mine[0] - BACK_STEPS or step <= mine[3]:
                mine[:] = [step, mine[1] + 1, attempt, _NEVER]
        elif step > mine[0]:
            # A new attempt whose first record is past the rank's highest: its steps go on
            # (resumed from a later checkpoint; or the old process's last word, come after
            # torchrun's restart and said to be the new attempt's). A step of it back at or below
            # that highest is the attempt's run of steps begun again.
            mine[:] = [step, mine[1], attempt, mine[0]]
        else:
            # A new attempt's step at or below the rank's highest: steps run again (a crash at
            # step 2 runs steps 1-2 again, not out of order by BACK_STEPS)
            mine[:] = [step, mine[1] + 1, attempt, _NEVER]
        run = mine[1]
        steps = self.open.get(run)
        if steps is None:
            steps = self.open[run] = {}
            self.attempt.setdefault(run, attempt)
        acc = steps.get(step)
        if acc is None:
            if step <= self.closed_to.get(run, _NEVER):
                # (complete already: a rank far behind the others, its records late)
                self._bin(run, step).samples += samples
                return
            acc = steps[step] = [0, 0.0, 0, 0.0, 0, [], 0, None, 0.0, 0.0]
            if step > self.highest.get(run, _NEVER):
                self.highest[run] = step
                self._close(run, step - LAG_STEPS)
        acc[0] += 1
        acc[1] += step_s
        acc[2] += samples
        if loss is not None:
            acc[3] += loss
            acc[4] += 1
        if t:
            acc[5].append(t)
        if loss_bad is not None:
            acc[6] += 1
            acc[7] = not_finite(acc[7], loss_bad)
        if data_s is not None:
            acc[8] += data_s
            acc[9] += step_s

    def run_of(self, rank: int) -> int:
        """The run of steps ``rank``'s records are in now (0 the first)."""
        mine = self._ranks.get(rank)
        return 0 if mine is None else mine[1]

    def _bin(self, run: int, step: int) -> _Bin:
        key = (run, (step - 1) // self.width)
        b = self.bins.get(key)
        if b is None:
            b = self.bins[key] = _Bin()
            if len(self.bins) > MAX_BINS:
                self._widen()
                b = self._bin(run, step)
        return b

    def _widen(self) -> None:
        by = 2 if str(self.width)[0] == "1" else 5  # (1, 2, 10, 20, 100, ...: round edges)
        self.width *= by
        bins: dict[tuple[int, int], _Bin] = {}
        for (run, k), b in sorted(self.bins.items()):
            into = bins.get((run, k // by))
            if into is None:
                bins[(run, k // by)] = b
            else:
                into.merge(b)
        self.bins = bins

    def _close(self, run: int, upto: float) -> None:
        steps = self.open.get(run) or {}
        done = sorted(s for s in steps if s <= upto)
        for s in done:
            n, step_sum, samples, loss_sum, losses, ends, bad, bad_value, data_sum, timed = steps.pop(s)
            b = self._bin(run, s)
            b.data_s += data_sum
            b.timed_s += timed
            b.lo = s if b.lo is None else min(b.lo, s)
            b.hi = s if b.hi is None else max(b.hi, s)
            b.steps += 1
            b.samples += samples
            mean_s = step_sum / n
            b.step_s.add(mean_s)
            if bad:
                # (the ranks' mean loss is not finite: the finite ones' alone read as the step's)
                b.bad_steps += 1
                b.bad_from = s if b.bad_from is None else min(b.bad_from, s)
                b.bad_value = not_finite(b.bad_value, bad_value)
                b.bad_ranks = max(b.bad_ranks, bad)
            elif losses:
                mean = loss_sum / losses
                b.loss.add(mean)
                if b.loss_max is None or mean > b.loss_max:
                    b.loss_max, b.loss_max_step = mean, s
            if ends:
                ends.sort()
                m = len(ends)
                end = ends[m // 2] if m % 2 else (ends[m // 2 - 1] + ends[m // 2]) / 2
                start = end - mean_s
                last = self.last_end.get(run)
                # (from the step before's end: a gap before a step is in its part's time, not
                # between two parts, in neither)
                since = start if last is None else min(start, last[0])
                b.t0 = since if b.t0 is None else min(b.t0, since)
                b.t1 = end if b.t1 is None else max(b.t1, end)
                if last is not None:
                    b.every_s.add(end - last[0])
                if last is not None and start - last[0] > b.gap_s:
                    b.gap_s, b.gap_after = start - last[0], last[1]
                if last is None or end > last[0]:
                    self.last_end[run] = (end, s)
        if done:
            self.closed_to[run] = max(self.closed_to.get(run, done[-1]), done[-1])

    def finish(self) -> None:
        for run in list(self.open):
            self._close(run, math.inf)

    def parts(self, charges: Iterable[tuple[int, int, float]] = (), paused_s=None, run_t0: float | None = None) -> list[dict]:
        """The parts, in the log's order: ``charges`` are (run of steps, step, seconds the others
        waited for a straggler there), each put in its part (the nearest of its run of steps);
        ``paused_s(t0, t1)`` the seconds of [t0, t1] that were no training (evaluations, saves,
        restarts); ``run_t0`` the run's start, which ``start_s`` is from."""
        self.finish()
        runs: dict[int, list[_Bin]] = {}
        for (run, _), b in sorted(self.bins.items()):
            if b.steps:
                runs.setdefault(run, []).append(b)
        if not runs:
            return []
        # (the steps' span, not their count: a script that logs one step in 50 is cut as its run)
        size = part_steps(sum(bins[-1].hi - bins[0].lo + 1 for bins in runs.values()), self.width)
        groups: dict[tuple[int, int], list[_Bin]] = {}
        for run, bins in runs.items():
            for b in bins:
                groups.setdefault((run, (b.lo - 1) // size), []).append(b)
        parts = []
        for (run, _), bins in groups.items():
            p = _Bin()
            for b in bins:
                p.merge(b)
            parts.append((run, p))
        cost = [0.0] * len(parts)
        for run, step, seconds in charges:
            mine = [i for i, (r, _) in enumerate(parts) if r == run] or list(range(len(parts)))
            i = min(mine, key=lambda i: 0 if parts[i][1].lo <= step <= parts[i][1].hi else min(abs(step - parts[i][1].lo), abs(step - parts[i][1].hi)))
            cost[i] += seconds
        seen_top: dict[int, int] = {}
        out = []
        for i, (run, p) in enumerate(parts):
            before = max((top for r, top in seen_top.items() if r < run), default=None)
            wall = p.t1 - p.t0 if p.t0 is not None and p.t1 is not None else None
            train = wall - (paused_s(p.t0, p.t1) if paused_s is not None else 0.0) if wall is not None else None
            train = max(0.0, train) if train is not None else None
            median = p.step_s.median()
            every = p.every_s.median()
            gap = p.gap_s if p.gap_s > GAP_FLOOR_S and (every is None or p.gap_s > GAP_STEPS * every) else None
            out.append({
                "first_step": p.lo,
                "last_step": p.hi,
                # (the attempt its run of steps is of: torchrun's restart count, 0 the first)
                "restart": self.attempt.get(run, 0),
                # steps of it taken before, by an earlier run of steps (torchrun's restart, a resume)
                "steps_again": max(0, min(p.hi, before) - p.lo + 1) if before is not None else 0,
                "steps": p.steps,
                "steps_missing": (p.hi - p.lo + 1) - p.steps,
                "start_s": p.t0 - run_t0 if p.t0 is not None and run_t0 is not None else None,
                "wall_s": wall,
                "train_s": train,
                "samples": p.samples,
                "samples_per_s": p.samples / train if train else None,
                "step_s_median": median,
                "step_s_p90": p.step_s.p90(),
                # The share of its ranks' step time spent loading data (None: none timed it)
                "data_share": min(1.0, p.data_s / p.timed_s) if p.timed_s > 0 else None,
                "loss_median": p.loss.median(),
                # Its highest step loss and its step (a spike of a few steps the median hides)
                "loss_max": p.loss_max,
                "loss_max_step": p.loss_max_step,
                # Its steps whose loss was not finite on some rank (None: none): {value ("nan",
                # "inf", "-inf"), steps, from_step (the first), ranks (the most at one step)}.
                "loss_not_finite": {"value": p.bad_value, "steps": p.bad_steps, "from_step": p.bad_from, "ranks": p.bad_ranks}
                if p.bad_steps else None,
                "straggler_s": cost[i],
                "straggler_share": cost[i] / train if train else None,
                # (only past GAP_FLOOR_S and GAP_STEPS steps: a stall, the hub down, the job paused)
                "longest_gap_s": gap,
                "gap_after_step": p.gap_after if gap is not None else None,
            })
            seen_top[run] = max(seen_top.get(run, p.hi), p.hi)
        return out
