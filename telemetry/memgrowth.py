"""Find a rank whose memory grows step after step: a leak.

A rank that keeps every loss with its autograd graph, or appends each batch's activations to a
list, grows by about as much every step until the host or the GPU runs out. Each step says the
rank's process RSS (``Step.mem.rss_bytes``) and, on a GPU, the caching allocator's allocated
bytes (``cuda_allocated_bytes``); nothing else in the hub looked at how they move.

Method. The detector samples each rank's latest step into small rings at three time scales
(every 0.5 s, 4 s and 32 s of the hub's clock, SAMPLES each: windows of about 32 s, 4 min and
34 min), a step at most once per ring. Sampling is a walk over the ranks at the finest interval,
the same walk liveness makes, so the hub's per-step path does nothing more, and a ring's work is
O(1) a sample. A full ring is judged every JUDGE_EVERY samples: its window is cut into SEGMENTS
equal parts, and each part's median taken (robust to a step's spike, an evaluation that comes
back down). Growth is

- steady: every part's median above the one before by at least STEADY_SHARE of the mean rise
  a part (caches that fill then stay flat fail it: their last parts add nothing);
- large: the rise from the first part to the last is at least ``min_rise_bytes`` (64 MiB) and
  ``min_rise_frac`` (10%) of where it started: the allocator's and Python's own churn on a
  process of hundreds of MiB stays under that;
- lasting: at the rate the parts' medians give, it would add ``hour_frac`` (half) of the memory
  held now in an hour: a slow creep of a large process that takes a day to matter is not said;
- long enough: the window spans ``min_steps`` (100) steps and ``min_span_s`` (30 s) or more, past
  the first ``warmup_steps`` (20) of each process (compile, the allocator's first caches);
- persistent: found at ``persist`` (2) judgements in a row of one ring.

A rank found so is said once (``memory_growing``), with its rate a step, the window's first and
last memory and steps, and how the other ranks' memory moved over the same window; ranks that
all grow alike (rates within ALIKE_RATIO of each other: a leak in code every rank runs) are said
once for the job (rank -1). It is cleared (``memory_steady``) once the newest part of the ring
that named it grows at under CLEAR_SHARE of the rate it was named with, ``clear_after`` (2)
judgements in a row, or the rank's process is new (torchrun restarted it).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from .schema import Verdict
from .state import RankState, RunState
from .summary import human_bytes

MIB = 1 << 20

SAMPLES = 64
"""Samples a ring keeps (its window)."""

SEGMENTS = 4
"""Parts a window is cut into; each part's median is its level."""

JUDGE_EVERY = 8
"""A full ring is judged once every this many new samples."""

STEADY_SHARE = 0.35
"""Each part must rise by this share of the window's mean rise a part, or more: a linear leak's
parts each rise by the mean (1.0); a warm-up that fills caches then stays flat has its last
parts near 0."""

CLEAR_SHARE = 0.25
"""A rank said growing is steady again once its newest part grows at under this share of the
rate it was said with."""

ALIKE_RATIO = 2.0
"""Ranks whose growth rates are within this factor of each other grow alike."""

HINT = "tensors kept across steps? (a loss or output kept with its graph, a growing cache)"
"""What a growing rank most often does, said after its figures."""

GPU_HINT = "tensors kept across steps on the GPU? (a loss or output kept with its graph, a growing cache)"

SERIES = ("rss", "cuda_allocated")
"""What is measured, as a verdict's ``cause`` names it: the process's resident set, the CUDA
caching allocator's allocated bytes."""

SERIES_WORDS = {"rss": "memory", "cuda_allocated": "GPU memory (allocated)"}


@dataclass(kw_only=True, slots=True)
class MemGrowthConfig:
    """Thresholds of the memory-growth detector (see the module's docstring for why each)."""

    sample_s: float = 0.5
    """The finest ring's sampling interval (hub clock, seconds); each coarser ring's is
    ``level_factor`` times the one before."""
    levels: int = 3
    """Rings a rank keeps, finest first."""
    level_factor: int = 8
    """Each ring samples this many times less often than the one before."""
    warmup_steps: int = 20
    """Steps of each process not sampled."""
    min_steps: int = 100
    """A window must span this many steps or more."""
    min_span_s: float = 30.0
    """...and this many seconds (the rank's clock) or more."""
    min_rise_bytes: int = 64 * MIB
    """Rise over the window (first part's median to last part's) at least."""
    min_rise_frac: float = 0.10
    """...and at least this fraction of the first part's median."""
    hour_frac: float = 0.5
    """...and at its rate it would add this fraction of the memory held now in an hour."""
    persist: int = 2
    """Judgements in a row a ring must find growth at before it is said."""
    clear_after: int = 2
    """Judgements in a row of calm before a rank said growing is said steady."""


class _Ring:
    """A rank's samples at one time scale: step, time (the rank's clock), RSS and CUDA
    allocated bytes (NaN where not measured), in fixed arrays: 24 bytes a sample, 4.5 KiB a rank
    (the bytes as 32-bit floats: 512 bytes apart at 8 GiB, where a rise of 64 MiB matters)."""

    __slots__ = ("step", "t", "rss", "cuda", "n", "head", "top", "new", "found", "calm", "last")

    def __init__(self) -> None:
        zeros = [0.0] * SAMPLES
        self.step = array("d", zeros)
        self.t = array("d", zeros)
        self.rss = array("f", zeros)
        self.cuda = array("f", zeros)
        self.n = 0
        """Samples held (up to SAMPLES)."""
        self.head = 0
        """Where the next sample goes."""
        self.top = -1
        """The newest sample's step (-1: none)."""
        self.new = 0
        """Samples since the last judgement."""
        self.found: dict[str, int] = {}
        """series -> judgements in a row that found it growing."""
        self.calm = 0
        """Judgements in a row that found the rank's said series calm."""
        self.last: _Growth | None = None
        """Its latest judgement's figures (the growing series', else RSS), None: not judged."""

    def ordered(self, arr: array) -> list[float]:
        h = self.head
        return arr[h:].tolist() + arr[:h].tolist() if self.n == SAMPLES else arr[: self.n].tolist()


@dataclass(slots=True)
class _Growth:
    """One series' growth over a ring's window."""

    series: str
    rate_s: float
    """Bytes a second (the rank's clock)."""
    rate_step: float
    """Bytes a step."""
    first: float
    last: float
    """The first and last parts' medians, bytes."""
    first_step: int
    last_step: int
    grows: bool = False
    """It passes every test but persistence."""
    newest_rate_s: float = 0.0
    """Bytes a second over the newest part (from the part before's median)."""


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    m = n // 2
    return xs[m] if n % 2 else (xs[m - 1] + xs[m]) / 2


def measure(steps: list[float], ts: list[float], values: list[float], series: str, cfg: MemGrowthConfig) -> _Growth | None:
    """The growth of one window (samples oldest first), judged by every test but persistence;
    None where a value is missing (not measured) or the window is too short."""
    n = len(values)
    total = sum(values)
    if n < SEGMENTS * 2 or total != total:  # (NaN: not measured, a CPU rank's CUDA bytes)
        return None
    if steps[-1] - steps[0] < cfg.min_steps or ts[-1] - ts[0] < cfg.min_span_s:
        return None
    if max(values) - min(values) < cfg.min_rise_bytes:
        # No rise as large anywhere in the window (most ranks, most of the time): flat as far as
        # this detector cares, for the price of two passes in C.
        mid = total / n
        return _Growth(series, 0.0, 0.0, mid, mid, int(steps[0]), int(steps[-1]))
    part = n // SEGMENTS
    levels, times, at = [], [], []
    for i in range(SEGMENTS):
        lo = i * part
        hi = n if i == SEGMENTS - 1 else lo + part
        levels.append(_median(values[lo:hi]))
        mid = (lo + hi) // 2
        times.append(ts[mid])
        at.append(steps[mid])
    rise = levels[-1] - levels[0]
    dt = times[-1] - times[0]
    ds = at[-1] - at[0]
    if dt <= 0 or ds <= 0:
        return None
    g = _Growth(series, rise / dt, rise / ds, levels[0], levels[-1], int(steps[0]), int(steps[-1]))
    newest_dt = times[-1] - times[-2]
    g.newest_rate_s = (levels[-1] - levels[-2]) / newest_dt if newest_dt > 0 else 0.0
    if rise < cfg.min_rise_bytes or rise < cfg.min_rise_frac * levels[0]:
        return g
    if g.rate_s * 3600.0 < cfg.hour_frac * levels[-1]:
        return g
    each = rise / (SEGMENTS - 1)
    if any(b - a < STEADY_SHARE * each for a, b in zip(levels, levels[1:])):
        return g
    g.grows = True
    return g


@dataclass(slots=True)
class _Rank:
    rings: list[_Ring]
    ident: tuple = ()
    """(restarts, pid) of its process: a new one starts its rings again."""
    seen: object = None
    """The step it was last sampled at (the state's object: the same one, nothing new)."""
    said: _Growth | None = None
    said_level: int = -1


@dataclass
class MemGrowthDetector:
    """Per rank rings of memory samples, judged at each time scale; verdicts
    ``memory_growing`` and ``memory_steady`` (see the module's docstring)."""

    cfg: MemGrowthConfig = field(default_factory=MemGrowthConfig)
    _ranks: dict[int, _Rank] = field(default_factory=dict)
    _due: list[float] = field(default_factory=list)
    """Hub time each ring level is next sampled."""
    _job: _Growth | None = None
    """The growth said of every rank alike (rank -1), while it stands."""
    _job_level: int = -1
    _job_calm: int = 0

    def update(self, state: RunState, now: float) -> list[Verdict]:
        cfg = self.cfg
        if not self._due:
            self._due = [now] * cfg.levels
        due = [lv for lv in range(cfg.levels) if now >= self._due[lv] or now < self._due[lv] - cfg.sample_s * cfg.level_factor**lv]
        if not due:
            return []
        for lv in due:
            self._due[lv] = now + cfg.sample_s * cfg.level_factor**lv
        out: list[Verdict] = []
        judge: dict[int, list[tuple[int, _Rank]]] = {}
        warm = cfg.warmup_steps
        ranks = self._ranks
        nan = float("nan")
        for r in state.ranks.values():
            s = r.step
            if s is None:
                continue
            me = ranks.get(r.rank)
            if me is not None and me.seen is s:
                continue  # (no new step since the last look: a stalled rank's memory is its last step's)
            mem = s.mem
            if mem is None or r.exit_code is not None or r.finished:
                continue
            hello = r.hello
            at = s.step
            if me is None:
                me = ranks[r.rank] = _Rank([_Ring() for _ in range(cfg.levels)], (r.restarts, hello.pid if hello is not None else 0))
            elif me.ident[0] != r.restarts or at < me.rings[0].top or (hello is not None and me.ident[1] not in (0, hello.pid)):
                out.extend(self._new_process(r, me, (r.restarts, hello.pid if hello is not None else 0)))
            elif hello is not None and not me.ident[1]:
                me.ident = (r.restarts, hello.pid)  # (its hello came after its first steps)
            me.seen = s
            if at <= warm:
                continue
            rss = mem.rss_bytes
            cuda = mem.cuda_allocated_bytes
            rss = nan if rss is None else float(rss)
            cuda = nan if cuda is None else float(cuda)
            rings = me.rings
            for lv in due:
                ring = rings[lv]
                if ring.top >= at:
                    continue
                # (Ring.add, inline: this is the walk's one per-rank cost)
                h = ring.head
                ring.step[h] = at
                ring.t[h] = s.t
                ring.rss[h] = rss
                ring.cuda[h] = cuda
                ring.top = at
                ring.head = h + 1 if h + 1 < SAMPLES else 0
                ring.new += 1
                if ring.n < SAMPLES:
                    ring.n += 1
                elif ring.new >= JUDGE_EVERY:
                    ring.new = 0
                    judge.setdefault(lv, []).append((r.rank, me))
        for lv, judged in sorted(judge.items()):
            out.extend(self._judge(state, lv, judged))
        return out

    def _new_process(self, r: RankState, me: _Rank, ident: tuple) -> list[Verdict]:
        """A new process of the rank (torchrun restarted it): its memory counts anew."""
        me.ident = ident
        me.rings = [_Ring() for _ in range(self.cfg.levels)]
        if me.said is None:
            return []
        me.said, me.said_level = None, -1
        at = r.step.step if r.step is not None else None
        return [Verdict(rank=r.rank, verdict="memory_steady", step=at, message=f"rank {r.rank}'s memory is measured anew (a new process)")]

    def _judge(self, state: RunState, lv: int, judged: list[tuple[int, _Rank]]) -> list[Verdict]:
        cfg = self.cfg
        found: dict[int, _Growth] = {}
        out: list[Verdict] = []
        for rank, me in judged:
            ring = me.rings[lv]
            steps, ts = ring.ordered(ring.step), ring.ordered(ring.t)
            best: _Growth | None = None
            ring.last = None
            for series, arr in (("rss", ring.rss), ("cuda_allocated", ring.cuda)):
                g = measure(steps, ts, ring.ordered(arr), series, cfg)
                if g is None:
                    ring.found.pop(series, None)
                    continue
                if ring.last is None:
                    ring.last = g  # (the figure said of it beside another rank: its RSS where measured)
                if g.grows:
                    ring.found[series] = ring.found.get(series, 0) + 1
                    if ring.found[series] >= cfg.persist and (best is None or g.rate_s / max(g.last, 1.0) > best.rate_s / max(best.last, 1.0)):
                        best = g
                else:
                    ring.found.pop(series, None)
                if me.said is not None and me.said_level == lv and series == me.said.series:
                    ring.calm = ring.calm + 1 if g.newest_rate_s < CLEAR_SHARE * me.said.rate_s else 0
            if best is not None:
                ring.last = best
                found[rank] = best
            if me.said is not None and me.said_level == lv and ring.calm >= cfg.clear_after:
                # Steady again: the ring that named it sees its newest part calm.
                out.append(self._steady(rank, me.said, ring.last, state))
                me.said, me.said_level, ring.calm = None, -1, 0
        if self._job is not None and self._job_level == lv:
            # Calm by its rate, as a rank's: the tests that found it (a rise of a tenth of the
            # memory over the window) fail of a process grown large while it grows as before.
            bar = CLEAR_SHARE * self._job.rate_s
            calm = all(me.rings[lv].last is None or me.rings[lv].last.newest_rate_s < bar for _, me in judged)
            self._job_calm = self._job_calm + 1 if calm else 0
            if self._job_calm >= cfg.clear_after:
                out.append(self._steady(-1, self._job, None, state))
                self._job, self._job_level, self._job_calm = None, -1, 0
        if not found or self._job is not None:
            return out  # (said of the job: not again of each rank)
        # The other ranks' latest figures at this scale (judged at about the same time).
        latest = {q: me.rings[lv] for q, me in self._ranks.items() if me.rings[lv].last is not None}
        live = [r.rank for r in state.ranks.values() if r.exit_code is None and not r.finished and r.step is not None]
        growing = {q: ring.last for q, ring in latest.items() if ring.last is not None and ring.found.get(ring.last.series, 0) >= cfg.persist}
        rates = [g.rate_step for g in growing.values()]
        alike = (
            len(growing) >= 2
            and len(growing) >= len(live)
            and len({g.series for g in growing.values()}) == 1
            and max(rates) <= ALIKE_RATIO * min(rates)
        )
        if alike:
            if all(self._ranks[q].said is None for q in growing):
                ordered = sorted(growing.values(), key=lambda g: g.rate_step)
                g = ordered[len(ordered) // 2]
                self._job, self._job_level, self._job_calm = g, lv, 0
                out.append(self._growing(-1, g, {}, len(growing), state))
            return out
        for rank in sorted(found):
            me = self._ranks[rank]
            if me.said is None:
                g = found[rank]
                me.said, me.said_level = g, lv
                me.rings[lv].calm = 0
                others = {q: ring.last for q, ring in latest.items() if q != rank and ring.last is not None}
                out.append(self._growing(rank, g, others, len(growing), state))
        return out

    def _growing(self, rank: int, g: _Growth, others: dict[int, _Growth], growing: int, state: RunState) -> Verdict:
        what = SERIES_WORDS[g.series]
        hint = GPU_HINT if g.series == "cuda_allocated" else HINT
        span = f"{human_bytes(g.first)} -> {human_bytes(g.last)} over steps {g.first_step}-{g.last_step}"
        r = state.ranks.get(rank)
        step = r.step.step if r is not None and r.step is not None else g.last_step
        if rank < 0:
            message = (f"every rank's {what} grows alike, about {human_bytes(g.rate_step)} a step ({span}, the median rank's; "
                       f"{growing} ranks): a leak in code every rank runs, {hint}")  # fmt: skip
            return Verdict(rank=-1, verdict="memory_growing", cause=g.series, step=step, message=message)
        beside = ""
        if others:
            rises = sorted(m.last - m.first for m in others.values())
            mid = rises[len(rises) // 2]
            if mid < self.cfg.min_rise_bytes / 4:
                beside = "; the others' stays flat"
            else:
                rate = sorted(m.rate_step for m in others.values())[len(others) // 2]
                beside = f"; the others' grows {human_bytes(rate)} a step"
        message = f"rank {rank}'s {what} grows {human_bytes(g.rate_step)} a step ({span}{beside}): {hint}"
        return Verdict(rank=rank, verdict="memory_growing", cause=g.series, step=step, message=message)

    @staticmethod
    def _steady(rank: int, said: _Growth, now: _Growth | None, state: RunState) -> Verdict:
        what = SERIES_WORDS[said.series]
        who = f"rank {rank}'s" if rank >= 0 else "every rank's"
        step = state.ranks[rank].step.step if rank >= 0 and state.ranks[rank].step is not None else (now.last_step if now else None)
        at = f" at {human_bytes(now.last)}" if now is not None else ""
        return Verdict(rank=rank, verdict="memory_steady", cause=said.series, step=step,
                       message=f"{who} {what} no longer grows (steady{at})")  # fmt: skip
