"""Find the rank the others wait for.

In synchronous DDP and FSDP every rank's wall step time is the same (all wait at the
collectives), so wall step times say nothing. Each rank instead reports ``self_s``: the time
from the end of its previous step to its arrival at this step's first collective, which holds
its own work and no waiting (under FSDP, whose all-gathers are spread over the forward: its
data and forward less the time in them). The straggler is the rank whose self time exceeds the others'.

Method (see DESIGN.md): steps are grouped into windows of ``window`` steps, aligned by step
number across ranks; a window is scored once every live rank has passed it. Each rank's window
score is the median of its self times (robust to one-off hiccups), compared with the median of
the *other* ranks' scores (leave-one-out, so two ranks work). The excess must beat a relative
bar, an absolute bar and a noise floor learnt from the spread of this run's clearly calm ranks
(those under half the bar); it must persist
for ``persist`` windows before a verdict, and stay under half the bar for ``clear_after``
windows before the verdict is cleared. Ranks are never ranked top-k: a clean run says nothing.

The absolute bar scales with the step: ``abs_s`` (5 ms), or where that is less
``abs_step_frac`` (a fifth) of the live ranks' median wall step time, never under ``abs_min_s``
(1 ms). What a straggler costs is its excess as a share of the step: 4.4 ms in a 6.5 ms step
is two thirds of every step lost, and a fixed 5 ms bar let any job of steps under ~15 ms hide a
straggler costing a third of its throughput. The wall step holds the straggler's excess (the
others wait it out), so a fifth of it is a quarter of the step the job would take without the
straggler: one that slows the job by a quarter or more is over the bar. (The wall step is read
when a window is scored, from the ranks' last few steps the state keeps, and its median over
the last scoring passes taken: the hub's per-step path stays as it was.)

What a straggler costs (the verdict's ``cost_s``, :func:`straggler_cost_s`) is the others' wait
for it a step, the larger of two measures of it, never their sum (where its slowness is all
before its step's first collective both are the same wait): its self time less the slowest
other rank's, and the least of the other ranks' comm time (their waits in collectives) less
its own. Self time ends at the first collective, so a straggler's work after it is missing
from the first: the recompute of activation checkpointing in the backward, before DDP's
first bucket all-reduce (a 10 ms sleep in a checkpointed forward ran twice a step: the others
waited 21 ms, and the verdict said 10). The second holds all of it: in synchronous training
every rank's step is as long and its phases and comm sum to it, so the others' extra comm is
the straggler's extra work wherever in the step it falls. (:class:`StepWaits` is the same a
step, for a log read step by step.)

A rank slow only after its first collective (in its backward, past DDP's first bucket
all-reduce, which fires early in it; in a comm hook; in its optimizer step) arrives at the
first collective with the others: its self time says nothing. It is found by that second
measure, its comm deficit (the others' median comm less its own: in synchronous training the
last to arrive waits least), scored in the same windows against the same bars (the self time's
relative bar, the absolute bar) and a noise floor of its own, with the same persistence (each
measure persisting on its own) and clearing (by the measure that named it, CLEAR_LOOKBACK).
Its cause is the phase its excess is in, by its phases
against the others' (each rank's last steps, read only of a flagged rank: nothing more a step),
over its flagged windows: "backward", "forward", "optimizer", "data", or "compute" where no
phase holds half the wait, or its phases hold its collectives (the bundled trainer's forward and
backward do: the others' waits are in theirs). The comm waits move with the host's scheduling
more than self time does: one found by its comm deficit alone, on a saturated host (or before
its host's load is known), or with no one phase to name ("compute"), is named only after
HOST_PERSIST times the windows and HOST_PERSIST_S. Every verdict's cause, the self time's data or compute
too, is read over its flagged windows, not its last one alone (review 328).
"""

from __future__ import annotations

import math
import statistics
from array import array
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat

from .holds import HOLD_MIN_S, HoldWatch
from .schema import Event, Step, Verdict
from .state import RunState, median_small
from .summary import is_pipeline


HOST_PERSIST = 3
"""A straggler found slowed by its busy host, or one of ranks that share a saturated host alike
(see :func:`_takes_turns`), is named after this many times ``persist`` windows..."""

HOST_PERSIST_S = 10.0
"""...and no sooner than this many seconds of its flagged windows' steps (at the ranks' wall
step time): at 10-15 ms a step, six windows were under a second, and ranks sharing a saturated
host with other jobs took turns that lasted longer (review 300: 8 verdicts in 6 clean runs of 2
ranks on 2 cores beside two test suites, most of them "compute")."""

CLEAR_LOOKBACK = 5
"""A straggler is cleared once its last ``clear_after`` windows are calm and the median of its
excess over its last this many windows (each as a share of its bar) is under half the bar: a
steady straggler near the bar, its lead hidden for two windows by the other rank's slow
moments, was named, cleared, named, cleared and named again (rank 1 a constant 4.8 ms slower
in its data: three episodes in the report, review 328). One long over the bar that stops
straggling is cleared a window later than its two calm windows."""

MAX_PENDING = 1000
"""Steps kept per rank waiting for the slowest rank to finish their window."""


@dataclass(kw_only=True, slots=True)
class StragglerConfig:
    """Thresholds of the straggler detector."""

    window: int = 10
    """Steps per scoring window."""
    warmup_steps: int = 10
    """Steps skipped at the start (and after a restart): compile, caches, allocator."""
    rel: float = 0.25
    """Excess over the others' median self time, as a fraction of it."""
    abs_s: float = 0.005
    """Excess in seconds a straggler must also have, at most: where ``abs_step_frac`` of the
    wall step time is less, that is the bar (long steps' timer and scheduler noise sit below)."""
    abs_step_frac: float = 0.2
    """The absolute bar as a fraction of the live ranks' median wall step time, where it is
    under ``abs_s``: a straggler whose excess costs the job this share of its step or more
    (the others wait that long every step) is named however short the step."""
    abs_min_s: float = 0.001
    """The absolute bar never goes under this, whatever the step time: a rank losing a
    scheduler time slice or two, a timer's resolution, sit below."""
    noise_k: float = 4.0
    """Excess must also exceed this many times the run's learnt noise floor."""
    spread_k: float = 2.0
    """...and this many standard errors of the difference of the window's medians, read from
    the spread of the ranks' own steps in it (their median absolute deviations): a rank's
    median over ten steps of honest variable-length batches is no straggler's (each rank of
    two drawing sequence lengths from one range was named by turns, seven times in 600 steps,
    review 335); steady steps have no spread, and their bar is as before."""
    paired_k: float = 2.5
    """...unless its lead over the steps' medians, step by step, is this many standard errors
    of its mean (a paired t statistic): a rank slow every other step (one of its two DataLoader
    workers on slow storage) has a median as unsure as honest variable work's, and was never
    named (review 339). Over 60 synthetic runs of honest variable work, 2.5 let 30 verdicts
    through where the medians alone let 26 (none at all: 264); 2.0 let 42."""
    persist: int = 2
    """Consecutive flagged windows before a verdict."""
    clear_after: int = 2
    """Consecutive calm windows before a verdict is cleared."""


PHASES = ("data", "forward", "backward", "optimizer")
"""The phases a straggler past its first collective may be slow in, as its cause names them."""

S_SELF, S_DATA, S_DEFICIT, S_PHASE, S_INSIDE, S_SEEN = 0, 1, 2, 3, 3 + len(PHASES), 4 + len(PHASES)
STREAK_FIELDS = 5 + len(PHASES)
"""A flagged rank's streak sums (``_RankWindow.streak``), at these indexes: its self-time
excess, its data time's excess, its comm deficit (the others' comm less its own), each phase's
excess (of its last steps' medians over the others', PHASES in order), how many of those
windows its phases held its comm (the bundled trainer's: its collectives are inside its forward
and backward), and how many windows the phases were read in."""


@dataclass(slots=True)
class _RankWindow:
    self_s: dict[int, float] = field(default_factory=dict)
    """Step -> self time, of the steps not yet scored. (Floats only: dicts of them are outside
    the garbage collector's reach, which at 100k steps a second matters.)"""
    data_s: dict[int, float] = field(default_factory=dict)
    """Step -> data time, of the same steps."""
    comm_s: dict[int, float] = field(default_factory=dict)
    """Step -> comm time, of the same steps that measured one: what the verdict's cost is read
    from besides the self time (see :func:`straggler_cost_s`)."""
    loader_s: dict[int, float] = field(default_factory=dict)
    """Step -> time in its DataLoader (``Step.loader_s``), of the same steps that measured one:
    whether a data straggler's lead is its loader's or its own work between steps."""
    flagged: int = 0
    """Consecutive windows its self time has been over the bar."""
    flagged_c: int = 0
    """Consecutive windows its comm deficit has been over the bar: each measure must persist
    on its own (either over in turns, two noisy measures, named clean ranks of 4 on 2 cores)."""
    run: int = 0
    """Consecutive windows either has been: its streak's (``streak``)."""
    calm: int = 0
    streak: list[float] = field(default_factory=lambda: [0.0] * STREAK_FIELDS)
    """Sums over the windows of its current run of flagged ones (``flagged``; zeroed with it):
    see STREAK_FIELDS. A verdict's cause is read from them, not from its last window alone: a
    healthy rank on a loaded host whose data time jumped in one window (12 ms, against 0.5 the
    rest of the run) read "(data loading)" though its excess was in its forward (review 328)."""
    levels: list[float] = field(default_factory=list)
    """Of its run of flagged windows and while it is a straggler, its last CLEAR_LOOKBACK
    windows' excess as a share of its bar (the larger of its self time's and its comm
    deficit's, where that named it), newest last."""
    by_comm: bool = False
    """Its verdict was for the others' wait past its step's first collective (its comm
    deficit), not its self time: the clearing says it by that measure."""


WALL_SAMPLE = 64
"""Ranks whose wall step times are read at a scoring pass, at most: in synchronous training
every rank's is the same, so a thousand ranks need not all be read."""


def wall_step_s(state: RunState, live: list[int]) -> float | None:
    """The live ranks' median wall step time (of up to WALL_SAMPLE of them, spread over the
    ranks), each rank's the median of its last few steps (``RankState.recent``, where the state
    keeps them: the hub's; a viewer's, the hub's medians in its frames, ``RankState.smooth``;
    else its newest step's); None: no rank has one. (In synchronous training it is the same on
    every rank, the straggler's wait included.)"""
    per_rank = []
    for r in live[:: max(1, -(-len(live) // WALL_SAMPLE))]:
        rs = state.ranks[r]
        if rs.recent:
            m = median_small(s.step_s for s in rs.recent)
        elif rs.smooth is not None and rs.smooth[0] is not None:
            m = rs.smooth[0]
        else:
            m = rs.step.step_s if rs.step is not None else None
        if m is not None and m > 0:
            per_rank.append(m)
    return statistics.median(per_rank) if per_rank else None


def absolute_bar_s(cfg: StragglerConfig, step_s: float | None) -> float:
    """The excess in seconds a straggler must have, for a wall step of ``step_s`` (None: not
    known, the fixed ``abs_s``)."""
    if step_s is None:
        return cfg.abs_s
    return min(cfg.abs_s, max(cfg.abs_min_s, cfg.abs_step_frac * step_s))


class StragglerDetector:
    """Fed every step by the hub (``observe``), scores complete windows in ``update``."""

    def __init__(self, config: StragglerConfig | None = None) -> None:
        self.cfg = config or StragglerConfig()
        self._ranks: dict[int, _RankWindow] = {}
        self._next_window = 0
        self._noise: deque[float] = deque(maxlen=50)
        """Per-window spread of the calm ranks' scores (excess under half the bar, as for the
        clearing; windows with two or more of them): the noise floor is their median."""
        self._comm_noise: deque[float] = deque(maxlen=50)
        """The same of the calm ranks' comm times (comm deficit under half its bar): the comm
        deficit's noise floor, its own (a rank's waits at the collectives move more from window
        to window than its self time does)."""
        self._wall: deque[float] = deque(maxlen=50)
        """The ranks' wall step time at the last scoring passes: the absolute bar scales with
        their median (a slow moment, a burst of load, does not lift it for a window)."""
        self.windows_scored = 0
        self.holds = HoldWatch()
        """Ranks that now and then hold the others far past a step (read from the same windows)."""
        self._waited: set[int] = set()
        """Steps not scored yet at which some rank waited HOLD_MIN_S or more in its collectives."""
        self._rewarm = False
        """The job restarted (torchrun): the next step seen starts a new warm-up."""
        self._fresh = True
        """No step seen yet: a job resumed from its checkpoint at step 5,000 warms up from its
        first step too (its processes' first steps: a compile, its DataLoader's workers
        starting; they read as a hold of 1.6 s at step 5,001, review 334)."""

    def restart(self) -> None:
        """A new attempt of the job (torchrun restarted it): its ranks start again from step 1
        or from a checkpoint, fresh processes warming up. Windows count from its first step
        plus the warm-up; what the last attempt left pending, and its streaks, are dropped
        (its noise floor and wall step times are kept: the same job on the same machines)."""
        self._ranks.clear()
        self.holds.restart()
        self._waited.clear()
        self._next_window = 0
        self._rewarm = True

    def observe(self, step: Step) -> None:
        self.observe_many((step,))

    def note_event(self, event: Event) -> None:
        """A rank's own event as the hub takes it: its saves and evaluations, for the holds
        right after them (HoldWatch.note_busy)."""
        self.holds.note_busy(event.rank, event)

    def observe_many(self, steps: Iterable[Step]) -> None:
        """Keep each step's self and data time for the scoring of its window (the hub's loop
        hands over the steps it took in one pass)."""
        # Steps of windows already scored (or in warm-up) are of no use any more.
        floor = max(self.cfg.warmup_steps, self._next_window)
        ranks = self._ranks
        waited, hold_min = self._waited, HOLD_MIN_S
        for step in steps:
            x = step.self_s
            s = step.step
            if self._fresh:
                self._fresh = False
                self._rewarm = s > self.cfg.warmup_steps
            if self._rewarm:
                # The first step of a restarted job (every rank resumes from the same one).
                self._rewarm = False
                self._next_window = floor = s + self.cfg.warmup_steps
            if x is None or s < floor:
                continue
            w = ranks.get(step.rank)
            if w is None:
                w = ranks[step.rank] = _RankWindow()
            pending = w.self_s
            pending[s] = x
            w.data_s[s] = step.data_s or 0.0
            if step.comm_s is not None:
                w.comm_s[s] = c = step.comm_s
                if c >= hold_min:
                    waited.add(s)  # (a rank held the others here, maybe past its first collective)
            if step.loader_s is not None:
                w.loader_s[s] = step.loader_s
            if len(pending) > MAX_PENDING:
                # A rank far ahead of a stuck one must not grow without bound: drop its oldest.
                oldest = next(iter(pending))
                del pending[oldest]
                w.data_s.pop(oldest, None)
                w.comm_s.pop(oldest, None)
                w.loader_s.pop(oldest, None)

    @property
    def noise_s(self) -> float:
        return statistics.median(self._noise) if self._noise else 0.0

    @property
    def comm_noise_s(self) -> float:
        return statistics.median(self._comm_noise) if self._comm_noise else 0.0

    def update(self, state: RunState) -> list[Verdict]:
        out: list[Verdict] = []
        live = [
            r.rank
            for r in state.ranks.values()
            if r.exit_code is None and not r.finished and r.step is not None and r.rank in self._ranks
        ]
        if len(live) < 2:
            return self._last_holds(state) + self.holds.flush(state.t_last)
        cfg = self.cfg
        first = max(self._next_window, cfg.warmup_steps)
        reached = min(state.ranks[r].step.step for r in live)
        said: dict[int, bool] = {}
        """rank -> straggler or not, as verdicts of this pass said (the state learns them only
        once the hub applies them: a pass that scores several windows must not say it twice)."""
        abs_s: float | None = None
        """The absolute bar: worked out once, by a pass that scores a window."""
        wall_s: float | None = None
        while first + cfg.window - 1 <= reached:
            # Jump over windows nobody has data for (a rank that says it is at step 10**9
            # must not make the hub walk a hundred million empty windows).
            oldest = min((next(iter(self._ranks[r].self_s)) for r in live if self._ranks[r].self_s), default=None)
            if oldest is None or oldest > reached:
                first += (reached - first + 1) // cfg.window * cfg.window
                break
            if oldest >= first + cfg.window:
                first += (oldest - first) // cfg.window * cfg.window
                continue
            steps = range(first, first + cfg.window)
            if abs_s is None:
                wall = wall_step_s(state, live)
                if wall is not None:
                    self._wall.append(wall)
                wall_s = statistics.median(self._wall) if self._wall else None
                abs_s = absolute_bar_s(cfg, wall_s)
            out.extend(self._score(state, live, steps, said, abs_s, wall_s))
            first += cfg.window
        self._next_window = first
        return out

    def _last_holds(self, state: RunState) -> list[Verdict]:
        """The holds in the steps of ranks that finished before their last windows were scored
        (a job's last steps and its ranks' exits came within one pass of the hub: a pause at
        step 61 of 80 went unsaid): their steps are read for holds alone, then forgotten."""
        ended = [r.rank for r in state.ranks.values()
                 if r.finished and r.exit_code is None and r.step is not None and r.rank in self._ranks and self._ranks[r.rank].self_s]  # fmt: skip
        if len(ended) < 2:
            return []
        reached = min(state.ranks[r].step.step for r in ended)
        steps = sorted({s for r in ended for s in self._ranks[r].self_s if s <= reached})
        at_self = {r: list(map(self._ranks[r].self_s.pop, steps, repeat(None))) for r in ended}
        at_data = {r: list(map(self._ranks[r].data_s.pop, steps, repeat(None))) for r in ended}
        at_loader = {r: list(map(self._ranks[r].loader_s.pop, steps, repeat(None))) for r in ended if self._ranks[r].loader_s}
        at_comm = {r: list(map(self._ranks[r].comm_s.pop, steps, repeat(None))) for r in ended if self._ranks[r].comm_s}
        wall_s = statistics.median(self._wall) if self._wall else None
        named = {r for r in ended if state.ranks[r].straggler is not None}
        return self.holds.window(steps, ended, at_self, at_data, at_loader, wall_s, named, state.t_last, at_comm)

    def _score(self, state: RunState, live: list[int], steps: range, said: dict[int, bool], abs_s: float,
               wall_s: float | None = None) -> list[Verdict]:  # fmt: skip
        """Score the window of ``steps`` for the live ranks against the absolute bar ``abs_s``
        (``wall_s``: the ranks' wall step time, where known), and forget its steps."""
        cfg = self.cfg
        score: dict[int, float] = {}
        data: dict[int, float] = {}
        comm: dict[int, float] = {}
        loader: dict[int, float] = {}
        enough = max(1, len(steps) // 2)
        median = statistics.median
        at_self: dict[int, list] = {}
        at_data: dict[int, list] = {}
        at_loader: dict[int, list] = {}
        """Each rank's times in step order (None: not measured), for the holds (HoldWatch)."""
        held: list[int] = []
        """The ranks with a step of HOLD_MIN_S or more in the window: the holds' candidates."""
        at_comm: dict[int, list] = {}
        comms: dict[int, list[float]] = {}
        """Each rank's comm times in the window (those scored: the spread of the deficit's)."""
        waited = bool(self._waited) and any(s in self._waited for s in steps)
        """Some rank waited HOLD_MIN_S or more in its collectives at a step of the window."""
        if waited:
            self._waited.difference_update(steps)
        if len(self._waited) > MAX_PENDING:  # (steps of ranks no longer scored, a restart)
            self._waited = {s for s in self._waited if s > steps[-1]}
        for r in live:
            w = self._ranks[r]
            at_self[r] = xs = list(map(w.self_s.pop, steps, repeat(None)))
            at_data[r] = ds = list(map(w.data_s.pop, steps, repeat(None)))
            self_s = [x for x in xs if x is not None]
            if not w.comm_s:
                comm_s = ()
            elif waited:
                at_comm[r] = cs = list(map(w.comm_s.pop, steps, repeat(None)))
                comm_s = [x for x in cs if x is not None]
            else:
                comm_s = [x for x in map(w.comm_s.pop, steps, repeat(None)) if x is not None]
            if w.loader_s:
                at_loader[r] = ls = list(map(w.loader_s.pop, steps, repeat(None)))
            if self_s and max(self_s) >= HOLD_MIN_S:
                held.append(r)
            if len(self_s) < enough:
                continue
            score[r] = median(self_s)
            data[r] = median([x for x in ds if x is not None])
            if len(comm_s) >= enough:
                comm[r] = median(comm_s)
                comms[r] = comm_s
            if r in at_loader:
                loader_s = [x for x in ls if x is not None]
                if len(loader_s) >= enough:
                    loader[r] = median(loader_s)
        if len(score) < 2:
            return []
        self.windows_scored += 1
        noise = self.noise_s
        out: list[Verdict] = []
        calm_scores = []
        loo = LeaveOneOut(score)
        rel, floor = cfg.rel, max(abs_s, cfg.noise_k * noise)
        bars = {r: (base, max(rel * base, floor)) for r, base in loo.medians_without().items()}
        # The others' wait past its first collective: their comm less its own (its comm
        # deficit), against the same bars, with a noise floor of its own. (Not of a pipeline's
        # stages, whose self time is already their step less their comm.)
        deficit: dict[int, tuple[float, float, float]] = {}
        """rank -> (its comm deficit, the others' median comm, the bar it must beat), of the
        ranks whose deficit is half that bar or more: the others' comm deficit is calm."""
        calm_comm = []
        comm_spreads: dict[int, float] | None = None
        if len(comm) >= 2 and not is_pipeline(state.strategy):
            floor_c = max(abs_s, cfg.noise_k * self.comm_noise_s)
            for r, base_c in LeaveOneOut(comm).medians_without().items():
                c = comm[r]
                bar_c = max(rel * bars[r][0], floor_c)
                if base_c - c > bar_c:
                    if comm_spreads is None:
                        comm_spreads = _spreads(comms, comm)
                    bar_c = max(bar_c, cfg.spread_k * _median_se(r, comm_spreads, comms))
                if base_c - c < bar_c / 2:
                    calm_comm.append(c)
                else:
                    deficit[r] = (base_c - c, base_c, bar_c)
        spreads: dict[int, float] | None = None
        """Each rank's median absolute deviation of its self times in the window, worked out
        once a window where some rank's excess passes its bar."""
        step_meds: list[float | None] | None = None
        """The median self time over the scored ranks at each step of the window, worked out
        once a window where some rank's spread gate would hold it back."""
        for r, (base, bar) in bars.items():
            if score[r] - base > bar:
                if spreads is None:
                    spreads = _spreads(at_self, score)
                gate = cfg.spread_k * _median_se(r, spreads, at_self)
                if gate > bar:
                    # Its lead step by step over the others, where the medians alone cannot
                    # tell (a rank slow every other step, one of its two DataLoader workers on
                    # slow storage: its window median as unsure as honest variable work's, and
                    # it was never named, review 339): a lead at the same steps, steady enough,
                    # is no chance.
                    if step_meds is None:
                        step_meds = _step_medians(at_self, score)
                    if _paired_t(at_self[r], step_meds) <= cfg.paired_k:
                        bars[r] = (base, gate)
        over = {r for r, (base, bar) in bars.items() if score[r] - base > bar}
        over.update(r for r, (d, _, bar) in deficit.items() if d > bar)
        peers: dict[str, float] | None = None
        """The phases of the ranks that are not flagged, worked out once a window where needed."""
        data_loo: LeaveOneOut | None = None
        for r, m in score.items():
            base, bar = bars[r]
            excess = m - base
            d, base_c, bar_c = deficit.get(r, (None, None, None))
            w = self._ranks[r]
            current = said.get(r, state.ranks[r].straggler is not None)
            # A straggler is judged, and cleared, by the measure that named it: one named by its
            # self time is not held by the comm's noise after it caught up (a rank slow in its
            # forward for 100 steps, then for 50 steps, on a saturated host, 20 ms "behind" in
            # its backward by the comm only).
            if current and not w.by_comm:
                d = None
            over_c = d is not None and d > bar_c
            flag = excess > bar or over_c
            if current or flag:
                # (its excess as a share of its bar, over its flagged windows and while it is a
                # straggler, for the clearing: CLEAR_LOOKBACK)
                w.levels.append(excess / bar if d is None else max(excess / bar, d / bar_c))
                del w.levels[:-CLEAR_LOOKBACK]
            elif w.levels:
                w.levels = []
            if flag:
                if w.run == 0:
                    w.streak = [0.0] * STREAK_FIELDS
                w.run += 1
                w.flagged = w.flagged + 1 if excess > bar else 0
                w.flagged_c = w.flagged_c + 1 if over_c else 0
                w.calm = 0
                k = w.streak
                k[S_SELF] += excess
                if data_loo is None:
                    data_loo = LeaveOneOut(data)
                k[S_DATA] += data.get(r, 0.0) - data_loo.median_without(r)
                if d is not None:
                    k[S_DEFICIT] += d
                    if d > bar_c or k[S_DEFICIT] > k[S_SELF]:
                        # (where its excess is past its first collective: its phases' against the
                        # others', from each rank's last steps, read only of a flagged rank)
                        if peers is None:
                            peers = _phase_medians(state, [q for q in live if q not in over and q in score])
                        _note_phases(k, state, r, peers)
                if not current and (w.flagged >= cfg.persist or w.flagged_c >= cfg.persist):
                    # (what it costs against the slowest of the ranks that are no stragglers: two
                    # stragglers alike slow, each against the other, read "the others wait 0 ms")
                    calm = [score[q] for q in score if q not in over]
                    others_max = max(calm) if calm else loo.max_without(r)
                    calm_c = {q: c for q, c in comm.items() if q == r or q not in over}
                    v = self._verdict(state, r, m, base, others_max, data, calm_c if len(calm_c) > 1 else comm, steps, loader,
                                      w.streak, w.run)  # fmt: skip
                    # (a busy host's, or ranks' sharing a saturated host alike: their turns at
                    # the CPU change by the second; one that stays behind for HOST_PERSIST
                    # times as long, and HOST_PERSIST_S, is named)
                    # So is one found by its comm deficit alone on a saturated host (or one not
                    # known yet), or with no one phase to name ("compute": none holds half the
                    # wait, or its phases hold its collectives): a rank's waits in collectives
                    # move with the host's scheduling more than its self time does (clean runs
                    # of 5 ms steps beside a busy loop: one rank's backward 3 ms longer than the
                    # other's for half a second, then the other's, named in turns, whatever share
                    # of a core each burnt; 4 ranks of the bundled trainer on 2 cores).
                    by_comm = _said_by_comm(w.streak)
                    wary = w.flagged < cfg.persist and (_host_busy(state, r) or v.cause == "compute")
                    n = max(w.flagged, w.flagged_c)
                    patient = n >= cfg.persist * HOST_PERSIST and (wall_s is None or n * cfg.window * wall_s >= HOST_PERSIST_S)
                    if patient or (v.cause != "host" and not _takes_turns(state, r, v.cause) and not wary):
                        out.append(v)
                        said[r] = True
                        w.by_comm = by_comm
            else:
                w.flagged = w.flagged_c = w.run = 0
                if excess < bar / 2:
                    # Only clearly calm ranks teach the noise floor: a straggler just under the
                    # bar, counted in, taught a 2-rank job half its excess, and noise_k of that
                    # put the bar at twice its excess (hidden until its excess doubled).
                    calm_scores.append(m)
                if excess < bar / 2 and d is None:
                    w.calm += 1
                    if current and w.calm >= cfg.clear_after and (median_small(w.levels) or 0.0) < 0.5:
                        said[r] = False
                        w.levels = []
                        if w.by_comm and r in comm and len(comm) > 1:
                            base_c = LeaveOneOut(comm).median_without(r)
                            d, bar_c = base_c - comm[r], max(rel * base, abs_s, cfg.noise_k * self.comm_noise_s)
                            # (it may still be a little slower: said how far, against what names one)
                            why = (f"the others' comm {base_c * 1e3:.1f} ms a step, its own {comm[r] * 1e3:.1f} ms: they wait "
                                   f"{d * 1e3:+.1f} ms for it, under the {bar_c * 1e3:.1f} ms that names one")  # fmt: skip
                        else:
                            why = (f"self time {m * 1e3:.1f} ms, others {base * 1e3:.1f} ms: "
                                   f"{excess * 1e3:+.1f} ms, under the {bar * 1e3:.1f} ms that names one")  # fmt: skip
                        out.append(Verdict(rank=r, verdict="straggler_cleared", step=steps[-1],
                                           message=f"rank {r} no longer a straggler ({why})"))  # fmt: skip
        # (a rank named a straggler: its episode is its verdict's; one flagged in this window, not
        # named, may hold the others besides, as the report counts it)
        stragglers = {r for r in score if said.get(r, state.ranks[r].straggler is not None)}
        out.extend(self.holds.window(steps, held, at_self, at_data, at_loader, wall_s, stragglers, state.t_last,
                                     at_comm if waited else None))  # fmt: skip
        if len(calm_scores) >= 2:
            med = statistics.median(calm_scores)
            self._noise.append(statistics.median([abs(v - med) for v in calm_scores]))
        if len(calm_comm) >= 2:
            med = statistics.median(calm_comm)
            self._comm_noise.append(statistics.median([abs(v - med) for v in calm_comm]))
        return out

    def _verdict(
        self,
        state: RunState,
        r: int,
        m: float,
        base: float,
        others_max: float,
        data: dict[int, float],
        comm: dict[int, float],
        steps: range,
        loader: dict[int, float] | None = None,
        streak: list[float] | None = None,
        windows: int = 1,
    ) -> Verdict:
        """Rank ``r``'s verdict, its cause read from its ``streak`` sums over its ``windows``
        flagged windows (None: from this window's ``data`` alone)."""
        # (the window's medians: its comm and the least of the others' that measured one)
        others_comm = min((c for q, c in comm.items() if q != r), default=None)
        cost = straggler_cost_s(m, others_max, comm.get(r), others_comm)
        n = max(1, windows)
        if streak is None:
            streak = [0.0] * STREAK_FIELDS
            streak[S_SELF] = m - base
            streak[S_DATA] = data.get(r, 0.0) - LeaveOneOut(data).median_without(r)
        after = ""
        """Where, past its first collective, the others wait for it ('' : in its self time)."""
        lead: float | None = None
        """Its lead over the others in the phase named, past its first collective."""
        if _said_by_comm(streak):
            cause, lead = _phase_cause(streak, n)
            data_excess = lead or 0.0
            after = ", past its first collective" if cause != "data" else ""
        else:
            data_excess = streak[S_DATA] / n
            cause = "data" if data_excess > streak[S_SELF] / n / 2 else "compute"
        what = cause + after
        if cause == "data":
            what = _data_words(state, r, data_excess, loader or {})
        elif cause in COMPUTE_CAUSES:
            hint = _device_hint(state, r)
            if hint:
                what = hint[1] + (f", in its {cause}" if cause != "compute" else "") + after
                cause = hint[0]
        tail = ""
        if lead is not None and cause in COMPUTE_CAUSES:
            where = "forward and backward, which hold its collectives," if cause == "compute" else cause
            tail = f" (its {where} {lead * 1e3:.0f} ms a step longer than theirs)"
        if cause in COMPUTE_CAUSES:
            tail += _accumulation_words(state, r)
        return Verdict(
            rank=r,
            verdict="straggler",
            cause=cause,
            cost_s=cost,
            step=steps[-1],
            message=f"rank {r} is a straggler ({what}): the others wait {cost * 1e3:.0f} ms a step for it{tail}",
        )


COMPUTE_CAUSES = ("compute", "forward", "backward", "optimizer")
"""A straggler's causes that are its own computation: the device and host hints, and the
rules for ranks taking turns at a saturated host, apply to each."""


def _spreads(times: dict[int, list], medians: dict[int, float]) -> dict[int, float]:
    """Each scored rank's median absolute deviation of its times in the window (self or comm
    times, None where not measured) about its median."""
    median = statistics.median
    return {r: median([abs(x - m) for x in times[r] if x is not None]) for r, m in medians.items()}


def _step_medians(times: dict[int, list], scored: dict[int, float]) -> list[float | None]:
    """The median over the ``scored`` ranks of their times at each step of the window (in step
    order, as ``times`` holds them; None where none was measured)."""
    median = statistics.median
    cols = zip(*(times[r] for r in scored))
    return [median(known) if (known := [x for x in col if x is not None]) else None for col in cols]


def _paired_t(xs: list, meds: list[float | None]) -> float:
    """How steadily a rank's times ``xs`` lead the steps' medians ``meds`` (its mean lead over
    that mean's standard error: a paired t statistic); 0 with fewer than three steps known."""
    d = [x - m for x, m in zip(xs, meds) if x is not None and m is not None]
    if len(d) < 3:
        return 0.0
    mean = statistics.fmean(d)
    sd = statistics.stdev(d)
    if sd == 0:
        return math.inf if mean > 0 else 0.0
    return mean / (sd / math.sqrt(len(d)))


MAD_SIGMA = 1.4826
"""A normal spread's standard deviation over its median absolute deviation."""
MEDIAN_SE = 1.2533
"""A median's standard error over the mean's (sqrt(pi / 2)), of normal samples."""


def _median_se(r: int, spreads: dict[int, float], times: dict[int, list]) -> float:
    """The standard error of rank ``r``'s window median less the others' (their median spread
    for theirs), from the spreads of their times in the window (``times``, as ``_spreads``)."""
    n = max(1, sum(x is not None for x in times[r]))
    others = [v for q, v in spreads.items() if q != r]
    theirs = statistics.median(others) if others else 0.0
    return MEDIAN_SE * MAD_SIGMA * math.hypot(spreads[r], theirs) / math.sqrt(n)


def _said_by_comm(streak: list[float]) -> bool:
    """Whether a flagged rank's excess is past its step's first collective: its comm deficit
    (the others' extra wait in collectives) over its streak more than twice its self-time
    excess, which then holds under half of what the others wait for it."""
    return streak[S_DEFICIT] > 2 * max(0.0, streak[S_SELF])


def _phase_medians(state: RunState, ranks: list[int]) -> dict[str, float]:
    """The median over ``ranks`` (up to WALL_SAMPLE of them, spread) of each one's median time
    in each phase over its last few steps (``RankState.recent``, else its latest step)."""
    per: dict[str, list[float]] = {p: [] for p in PHASES}
    for q in ranks[:: max(1, -(-len(ranks) // WALL_SAMPLE))]:
        for p, x in _own_phases(state, q)[0].items():
            per[p].append(x)
    return {p: statistics.median(v) for p, v in per.items() if v}


def _own_phases(state: RunState, r: int) -> tuple[dict[str, float], bool]:
    """(rank ``r``'s median time in each phase over its last few steps; whether its phases hold
    its comm time: the bundled trainer's collectives are inside its forward and backward, a
    script's zero-code hooks' waits in no phase; nothing known: not)."""
    rs = state.ranks.get(r)
    if rs is None:
        return {}, False
    steps = list(rs.recent) if rs.recent else [rs.step] if rs.step is not None else []
    out = {}
    for p in PHASES:
        xs = [x for s in steps if (x := getattr(s, p + "_s")) is not None]
        if xs:
            out[p] = median_small(xs)
    # Phases that sum to the step hold the comm; phases and comm that sum to it, not.
    gaps = [(abs(t - s.step_s), abs(t + s.comm_s - s.step_s)) for s in steps if s.comm_s
            for t in (sum(getattr(s, p + "_s") or 0.0 for p in PHASES),)]  # fmt: skip
    inside = sum(a < b for a, b in gaps) > len(gaps) / 2 if gaps else False
    return out, inside


def _note_phases(streak: list[float], state: RunState, r: int, peers: dict[str, float]) -> None:
    """Add flagged rank ``r``'s phases' excess over ``peers`` (:func:`_phase_medians` of the
    ranks not flagged) to its ``streak``."""
    mine, inside = _own_phases(state, r)
    if not mine or not peers:
        return
    for i, p in enumerate(PHASES):
        if p in mine and p in peers:
            streak[S_PHASE + i] += mine[p] - peers[p]
    streak[S_INSIDE] += inside
    streak[S_SEEN] += 1


def _phase_cause(streak: list[float], windows: int) -> tuple[str, float | None]:
    """(the phase a straggler past its first collective is slow in, by its ``streak`` over
    ``windows`` windows: the one holding the most of the others' wait and at least half of it,
    else "compute"; that phase's lead over the others' a step, None where no phase holds it).

    Where its phases hold its comm (the bundled trainer's forward and backward hold its
    collectives), the others' waits are inside their forward and backward too, which hides its
    excess there: the two are one then, "compute", with its comm deficit added back, beside its
    data and optimizer step."""
    seen = streak[S_SEEN]
    if not seen:
        return "compute", None
    wait = streak[S_DEFICIT] / windows
    lead = {p: streak[S_PHASE + i] / seen for i, p in enumerate(PHASES)}
    if streak[S_INSIDE] > seen / 2:
        passes = lead.pop("forward") + lead.pop("backward") + wait
        best = max(lead, key=lead.__getitem__)
        if passes >= lead[best]:
            return "compute", passes
    best = max(lead, key=lead.__getitem__)
    if lead[best] < wait / 2:
        return "compute", None
    return best, lead[best]


OWN_WORK = "its own work between steps, not its DataLoader"
"""What a data straggler is slow at whose lead is not in its DataLoader (``Step.loader_s``)."""


def data_words(data_lead_s: float, loader_lead_s: float | None, auto: bool = False) -> str:
    """What a data straggler is slow at, its data time ``data_lead_s`` seconds a step over the
    others' and its time in its DataLoader ``loader_lead_s`` over theirs (None: not known: no
    DataLoader, the bundled trainer, an older rank). Its loader's lead under half its data lead:
    its own work between steps (a script's rank 1 doing 20 matmuls before its forward, rank 0
    writing logs, read "a straggler (data)", review 307); at least half: "data loading". Not
    known: "data loading", or under the zero-code hooks (``auto``), whose data time is all a
    rank does outside its passes and its optimizer step, either."""
    if loader_lead_s is not None:
        return "data loading" if loader_lead_s >= data_lead_s / 2 else OWN_WORK
    return "data loading or its own work between steps" if auto else "data loading"


def _data_words(state: RunState, r: int, data_excess: float, loader: dict[int, float]) -> str:
    """:func:`data_words` of rank ``r``, by the window's median time in the DataLoader of each
    rank that measured one (``loader``), against the others' median."""
    mine = loader.get(r)
    lead = None
    if mine is not None:
        others = [x for q, x in loader.items() if q != r]
        lead = mine - statistics.median(others) if others else mine
    hello = state.ranks[r].hello if r in state.ranks else None
    return data_words(data_excess, lead, hello is not None and hello.source == "auto")


def straggler_cost_s(
    self_s: float, others_self_s: float, comm_s: float | None = None, others_comm_s: float | None = None
) -> float:
    """Seconds a step the others wait for a straggler (see the module's docstring): the larger
    of its self time ``self_s`` less the slowest other rank's (``others_self_s``), and the
    least of the other ranks' comm time (``others_comm_s``) less its own (``comm_s``); the
    first alone where either comm time is not known (None). Never under 0."""
    cost = self_s - others_self_s
    if comm_s is not None and others_comm_s is not None:
        cost = max(cost, others_comm_s - comm_s)
    return max(0.0, cost)


STEP_WAITS_KEPT = 9
"""Ranks kept a step by :class:`StepWaits` at each end: the slowest self times and the least
comm times. Up to ``STEP_WAITS_KEPT - 1`` stragglers at once (a node of 8 slow GPUs) are then
each measured against a rank that is not one."""


class StepWaits:
    """Per step, the rank the others waited for and how long (:func:`straggler_cost_s` of each
    step): the last to arrive at its first collective, charged its lead over the next, or the
    rank whose comm time was the least, charged the next least less its own, where that is
    more (its slowness after its first collective, which the others waited for at a later
    one). One rank a step, whichever of the two the others waited longer for: a step is never
    charged to two ranks.

    Where several ranks straggle over the same steps (``peers``), "the next" is the next rank
    that is not one of them: the others waited for the slowest of them, as long as it took,
    which its lead over the next straggler misses (two stragglers 30 ms slow read "0.7 ms a
    step" each, review 298). The step is charged to whichever of them was slowest.

    O(steps) memory whatever the world size: the STEP_WAITS_KEPT slowest self times and least
    comm times of each step, each a flat array of (value, rank) pairs."""

    def __init__(self) -> None:
        self.slow: dict[int, array] = {}
        """step -> its slowest self times and their ranks, slowest first: (self_s, rank, ...)."""
        self.quick: dict[int, array] = {}
        """step -> its least comm times and their ranks, least first: (comm_s, rank, ...)."""
        self.ends: dict[int, list[float]] = {}
        """step -> [its least self time, its most comm time]: the others' where more ranks
        straggle at once than the pairs keep (the nearest to them known, review 305: ten
        stragglers of 32 were charged nothing)."""

    def see(self, step: int, rank: int, self_s: float | None, comm_s: float | None = None) -> None:
        """Note ``rank``'s self and comm time at ``step`` (None: not measured)."""
        if self_s is None and comm_s is None:
            return
        ends = self.ends.get(step)
        if ends is None:
            ends = self.ends[step] = [math.inf, -math.inf]
        if self_s is not None:
            _keep(self.slow, step, -self_s, rank)
            ends[0] = min(ends[0], self_s)
        if comm_s is not None:
            _keep(self.quick, step, comm_s, rank)
            ends[1] = max(ends[1], comm_s)

    def _measures(self, step: int, peers: Iterable[int]) -> tuple[int | None, float | None, int | None, float | None]:
        """(the rank slowest by self time at ``step``, its lead over the slowest rank that is
        not one of ``peers``, the rank least by comm time, the least comm time of a rank not of
        ``peers`` less its own): each lead None where no such other rank is known, and of the
        whole step (its rank one of ``peers`` or not)."""
        group = set(peers)
        ends = self.ends.get(step, (math.inf, -math.inf))
        # (self times are kept negated, slowest first: a lead is the same difference)
        top, by_self = _lead(self.slow.get(step), group, -ends[0])
        low, by_comm = _lead(self.quick.get(step), group, ends[1])
        return top, by_self, low, by_comm

    def measures(self, step: int, rank: int, peers: Iterable[int] = ()) -> tuple[float | None, float | None]:
        """The two measures of the others' wait for ``rank`` at ``step``, each where it names
        ``rank`` (None otherwise, or not known of two ranks): its self-time lead over the
        slowest other rank, and the least other comm time less its own; other: not ``rank``
        nor one of ``peers`` (the ranks straggling with it)."""
        top, by_self, low, by_comm = self._measures(step, {rank, *peers})
        return (by_self if top == rank else None), (by_comm if low == rank else None)

    def least_comm(self, step: int) -> int | None:
        """The rank whose comm time at ``step`` was the least (the one the others waited for in
        their collectives, where they did); None where no comm time is known of it."""
        return self._measures(step, ())[2]

    def gap(self, step: int, rank: int, peers: Iterable[int] = ()) -> float | None:
        """Seconds the others waited for ``rank`` at ``step`` (None: they waited for another
        rank, or the step is not known of two ranks); ``peers``: the ranks straggling with it,
        not among the others."""
        top, by_self, low, by_comm = self._measures(step, {rank, *peers})
        if by_comm is None or (by_self is not None and top != low and by_self >= by_comm):
            return by_self if by_self is not None and top == rank else None
        if by_self is None or top != low:
            return by_comm if low == rank else None
        return max(by_self, by_comm) if top == rank else None


def _keep(kept: dict[int, array], step: int, key: float, rank: int) -> None:
    """Put (``key``, ``rank``) in ``step``'s pairs, least ``key`` first, keeping
    STEP_WAITS_KEPT."""
    pairs = kept.get(step)
    if pairs is None:
        kept[step] = array("d", (key, rank))
        return
    n = len(pairs)
    if n >= 2 * STEP_WAITS_KEPT and key >= pairs[-2]:
        return
    i = 0
    while i < n and pairs[i] <= key:
        i += 2
    pairs[i:i] = array("d", (key, rank))
    if n >= 2 * STEP_WAITS_KEPT:
        del pairs[-2:]


def _lead(pairs: array | None, group: set[int], last: float = math.inf) -> tuple[int | None, float | None]:
    """(the rank of the first pair, its lead: the next key less its own, where its rank is of
    ``group`` the first key of a rank not of the group): (None, None) where there are no
    pairs, and the lead None where no other rank is kept."""
    if pairs is None:
        return None, None
    first = int(pairs[1])
    if first not in group:
        return first, (pairs[2] - pairs[0] if len(pairs) > 2 else None)
    for i in range(2, len(pairs), 2):
        if int(pairs[i + 1]) not in group:
            return first, pairs[i] - pairs[0]
    # Every rank kept is of the group: the farthest key of the step (``last``), where it is
    # another rank's, stands for the others' (nearer than any the pairs let go).
    return first, (last - pairs[0] if len(pairs) >= 2 * STEP_WAITS_KEPT and math.isfinite(last) else None)


class LeaveOneOut:
    """Median and max of all values but one, for every one, in O(n log n) overall (a
    1024-rank window must not cost a million operations)."""

    def __init__(self, values: dict[int, float]) -> None:
        # Index of each key's value in the sorted list (ties: each key gets its own slot).
        order = sorted(values, key=values.__getitem__)
        self._sorted = [values[k] for k in order]
        self._index = {k: i for i, k in enumerate(order)}

    def medians_without(self) -> dict[int, float]:
        """:meth:`median_without` of every key at once: one of three values, by where the key
        sits against the middle (a window of 1024 ranks scores each, twice)."""
        s = self._sorted
        m = len(s) - 1
        if m <= 0:
            return dict.fromkeys(self._index, s[0])
        lo, hi = (m - 1) // 2, m // 2
        above, below, middle = (s[lo] + s[hi]) / 2, (s[lo + 1] + s[hi + 1]) / 2, (s[lo] + s[hi + 1]) / 2
        return {k: above if i > hi else below if i <= lo else middle for k, i in self._index.items()}

    def _at(self, j: int, skip: int) -> float:
        return self._sorted[j if j < skip else j + 1]

    def median_without(self, key: int) -> float:
        i = self._index[key]
        m = len(self._sorted) - 1
        if m <= 0:
            return self._sorted[0]
        lo, hi = (m - 1) // 2, m // 2
        return (self._at(lo, i) + self._at(hi, i)) / 2

    def max_without(self, key: int) -> float:
        i = self._index[key]
        n = len(self._sorted)
        return self._sorted[-1] if i != n - 1 or n == 1 else self._sorted[-2]


def _accumulation_words(state: RunState, r: int) -> str:
    """``: it runs 4 micro-batches a step (gradient accumulation), the others 2``: a compute
    straggler whose steps hold more forward and backward passes than the others' (each rank
    its own accumulation count: the verdict said "compute", its cause in the rank's detail
    alone, review 335); '' otherwise. pardash's own count (``micro_batches``, its steps' custom
    figures), of each rank's latest step."""

    def micro(q: int) -> float | None:
        step = state.ranks[q].step
        custom = step.custom if step is not None else None
        return custom.get("micro_batches") if custom else None

    me = micro(r)
    others = [m for q in state.ranks if q != r and (m := micro(q)) is not None]
    if me is None or not others or me <= max(others):
        return ""
    lo, hi = min(others), max(others)
    theirs = f"{lo:.0f}" if lo == hi else f"{lo:.0f} to {hi:.0f}"
    return f": it runs {me:.0f} micro-batches a step (gradient accumulation), the others {theirs}"


def _device_hint(state: RunState, r: int) -> tuple[str, str] | None:
    """Where the system figures explain slow compute: a GPU clocked lower than the others'
    (throttling), or a host whose CPU is busier than the others' (a noisy neighbour)."""
    me = state.ranks[r].system
    others = [x.system for q, x in state.ranks.items() if q != r and x.system is not None]
    if me is None or not others:
        return None
    clocks = [o.gpu_sm_clock_mhz for o in others if o.gpu_sm_clock_mhz]
    if me.gpu_sm_clock_mhz and clocks:
        ref = statistics.median(clocks)
        if me.gpu_sm_clock_mhz < 0.9 * ref:
            return "gpu", f"GPU slowness: SM clock {me.gpu_sm_clock_mhz:.0f} MHz against {ref:.0f} MHz"
    utils = [o.gpu_util_pct for o in others if o.gpu_util_pct is not None]
    if me.gpu_util_pct is None and not utils:
        return _host_hint(state, r)
    return None


def _host_hint(state: RunState, r: int) -> tuple[str, str] | None:
    """A CPU-bound rank slowed by its host rather than by its own work: its host is busier than
    the other hosts while its own process burns no more CPU than the others' do. A rank that
    simply computes more is busier itself, and stays "compute"; ranks sharing one host can't
    tell a neighbour from each other, so the hint needs ranks on other hosts to compare with."""
    me_state = state.ranks[r]
    me = me_state.system
    host = me_state.host
    away = [x.system for q, x in state.ranks.items() if q != r and x.system is not None and x.host != host]
    near = [x.system for q, x in state.ranks.items() if q != r and x.system is not None]
    if me is None or me.host_cpu_pct is None or me.cpu_pct is None:
        return None
    own = [o.cpu_pct for o in near if o.cpu_pct is not None]
    if not away:
        return _starved_hint(r, me, own)
    host_loads = [o.host_cpu_pct for o in away if o.host_cpu_pct is not None]
    if not host_loads or not own:
        return None
    ref_host, ref_own = statistics.median(host_loads), statistics.median(own)
    if me.host_cpu_pct > ref_host + 30 and me.cpu_pct <= ref_own * 1.1:
        return "host", f"busy host: CPU {me.host_cpu_pct:.0f}% of the host against {ref_host:.0f}% elsewhere"
    return None


SATURATED_PCT = 95.0
"""A host this busy (all its cores) has no CPU to spare for a rank that wants more."""
STARVED_PCT = 80.0
"""A rank's process under this much of a core, on a saturated host, is held back by it."""
STARVED_SLACK_PCT = 5.0
"""Points of a core by which a starved rank may burn more than the others and still be one of
them: at a tenth of a core each, 10% more was one point, sampling noise (ranks at 10-13% of a
core taking turns were named "compute", thrice in a clean run beside a test suite)."""


def _starved_hint(r: int, me, own: list[float]) -> tuple[str, str] | None:
    """A rank held back by the saturated host it shares with the others: under STARVED_PCT of
    a core, and getting clearly less of it than they do. A rank that gets the share the others
    get is not singled out by its host (a rank idle in a sleep or in I/O gets that share too: a
    synchronous rank burns the CPU of its step's work whatever it waits for): its phase decides,
    as without load. (It read "busy host: ..., this rank getting 15% of a core as the others do
    (14%)" of a rank sleeping in its forward.)"""
    if not own or me.host_cpu_pct < SATURATED_PCT or me.cpu_pct >= STARVED_PCT:
        return None
    ref_own = statistics.median(own)
    if me.cpu_pct >= ref_own * 0.9 - STARVED_SLACK_PCT:
        return None
    return "host", (f"busy host: CPU {me.host_cpu_pct:.0f}% of the host, this rank getting {me.cpu_pct:.0f}% of a core "
                    f"against the others' {ref_own:.0f}%")  # fmt: skip


def _host_busy(state: RunState, r: int) -> bool:
    """Whether rank ``r``'s host is saturated (SATURATED_PCT), or not known yet (no system
    sample from it: the first comes a second into the run)."""
    rs = state.ranks.get(r)
    me = rs.system if rs is not None else None
    return me is None or me.host_cpu_pct is None or me.host_cpu_pct >= SATURATED_PCT


def _takes_turns(state: RunState, r: int, cause: str) -> bool:
    """Whether rank ``r``, a straggler in its compute, shares one saturated host with the other
    ranks, each getting a fraction of a core and it no more than they: which rank the others wait
    for may then be the scheduler's pick of the moment, not any rank's work (a 2-rank job beside
    another on 2 cores named rank 0, then rank 1, then rank 0 again, a second or two each, as
    "compute", at 30% of a core each). Such a straggler is named after HOST_PERSIST times the
    windows and HOST_PERSIST_S, for its phase (the CPU figures can't tell its turn from a rank slowed by its own
    sleep or I/O, which gets the same share). A rank that burns more CPU than the others
    computes more, and is named as soon as any."""
    if cause not in COMPUTE_CAUSES:
        return False
    rs = state.ranks.get(r)
    me = rs.system if rs is not None else None
    if me is None or me.host_cpu_pct is None or me.cpu_pct is None or me.gpu_util_pct is not None:
        return False
    if me.host_cpu_pct < SATURATED_PCT or me.cpu_pct >= STARVED_PCT:
        return False
    others = [x for q, x in state.ranks.items() if q != r and x.system is not None]
    if not others or any(x.host != rs.host for x in others):
        return False  # (ranks on other hosts to compare with: _host_hint's)
    own = [x.system.cpu_pct for x in others if x.system.cpu_pct is not None]
    return bool(own) and me.cpu_pct <= statistics.median(own) * 1.1 + STARVED_SLACK_PCT
