"""``pardash report LOG``: the answers a recorded log holds, as text, markdown or JSON.

:func:`build_report` reads the log once and returns one JSON-able dict; the renderers only
format it. The JSON keys that existed first (``ranks`` with rank/steps/median_step_s/
last_loss/params_bytes/params_full_bytes, ``stragglers`` with rank/kind, ``exits`` with
rank/code, ``lost_messages``, ``strategy``, ``world_size``) are a contract: later additions
extend them, never rename them.

Medians of a rank's step and phase times are exact up to ``figures.EXACT`` (4,096) steps a
rank and within 0.05 % past them, so the report's memory does not grow with the run's length
times its ranks (telemetry/figures.py).

What the report answers, beyond the per-rank table:

- the script's own phases (``pt.phase("augment")``, ``Step.phases``): ``custom_phases``, the
  median over the ranks that timed each (seconds a step), as ``phases`` has the known ones, and
  each rank's median in its row's ``custom_phases``;
- throughput: samples/s over the training time (the steps' span less the time any rank was
  evaluating or saving a checkpoint, and torchrun's restarts), and the steady rate: the same of the steps after a warm-up
  (:data:`WARMUP_STEPS`);
- the run over time (``timeline``): about ten parts of its steps, each with its wall time,
  samples/s, step time (median and p90), loss and the stragglers' cost in it; a restart's steps
  run again in parts of their own (telemetry/timeline.py);
- stragglers over time: each verdict with the step it was found and cleared, its streak's
  first and last step, and its cost measured from the log: at every step the straggler
  arrived last at the collective, the others waited the gap between its self time and the
  second-slowest rank's; and where data-loading verdicts moved between ranks whose loaders
  all took alike time, that the job is data-bound;
- stalls (with the phase a rank was stuck in) and exits, with the root cause of a failure;
- memory held against what the strategy should hold (the run's state unsharded, / N when sharded) and against the unsharded model;
- checkpoints saved (how many, at which steps, the slowest save, their time in all: see
  :func:`_saving`) and resumes (from where, and what differed), and the warnings ranks sent
  (each text once, with the ranks that sent it) and the hub's that bear on the log
  (:func:`hub_warning_kept`: two jobs under one run id among them, ``jobs_sharing_run_id``);
- lost messages (per-rank seq gaps) and log lines skipped as malformed or truncated
  (``skipped_lines``, ``skipped_by_reason``); of a compressed log whose gzip stream broke off
  (a copy cut short, damaged bytes), ``gzip_damage``: ``{"how": "cut short" or "damaged",
  "after_line": N}``, the lines read whole before the break (None: the log is whole, or plain
  text). Its break is counted in ``skipped_by_reason`` too (as truncated or corrupt), and the
  log's end is lost with it: ``log_ends_early`` of such a log is no hub's doing.
"""

from __future__ import annotations

import bisect
import math
import os
import re
import statistics
from collections import Counter, defaultdict, deque
from typing import Any

from . import schema
from .analysis import BETWEEN_STEPS_WORDS
from .clocks import RankClocks, is_hub_side
from .figures import EXACT as FIGURES_KEPT
from .figures import Figures
from .logreader import LogReadStats, Progress, read_log
from .memgrowth import MemGrowthConfig
from .timeline import Timeline
from .failures import STOPPED_CODES, failure_summary, left_early, recovered_failures, signal_name
from .report_render import LOSS_SPIKES_GROUPED, PHASES, SHARED_RUN_ID, md_table, render_markdown, render_text
from .hubcore import parse_rejects
from .recorder import CONTINUED_AT
from .holds import HOLD_FACTOR, HOLD_MIN_S
from .stragglers import StepWaits
from .state import (EXITED, FINISHED, LEFT_EARLY, LOSS_FINITE_AGAIN, LOSS_NOT_FINITE, SILENT, STALLED, RankState, RunState,
                    mem_full_bytes, mem_held_bytes, mem_state_bytes, run_again, run_over, status_of)
from .summary import (
    BYTES_PER_PARAM, NOT_SHARDING_FACTOR, expected_state_bytes, is_pipeline, is_sharded, named_by_step, not_sharding_hint, shards_of, total_steps,
)  # fmt: skip



def _median(values: list[float | None]) -> float | None:
    """The median of the figures given (None: unknown, left out)."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


class _RecentSteps:
    """A rank's most recent step numbers (bounded): tells a step arriving late, out of order,
    from one taken again."""

    KEEP = 4096

    def __init__(self) -> None:
        self._order: deque[int] = deque()
        self._seen: set[int] = set()
        self._lows: deque[int] = deque()
        """The kept steps' running minimum (rising; its first is the lowest kept): a step from
        further back took min() over the 4096 kept, each time (a resume from an old checkpoint
        made the report four times slower)."""

    def add(self, step: int) -> None:
        if step in self._seen:
            return
        self._seen.add(step)
        self._order.append(step)
        lows = self._lows
        while lows and lows[-1] > step:
            lows.pop()
        lows.append(step)
        if len(self._order) > self.KEEP:
            gone = self._order.popleft()
            self._seen.discard(gone)
            if lows[0] == gone:  # (kept steps are distinct)
                lows.popleft()

    def first_time(self, step: int) -> bool:
        """A step below the rank's highest that it has not taken before (one further back than
        the steps kept reach counts as taken again: a resume from far back)."""
        if step in self._seen:
            return False
        return len(self._order) < self.KEEP or step > self._lows[0]


def _attempt_gaps(attempt_spans: dict[tuple[int, Any], list[float]], off) -> list[tuple[float, float, Any]]:
    """From each attempt's last step to the next attempt's first, all ranks (but those whose
    clocks are off) together, with the attempt that began then: the job's restarts, and the
    jobs run again under the run's id."""
    ends: dict[Any, list[float]] = {}
    for (rank, attempt), (t0, t1) in attempt_spans.items():
        if rank in off:
            continue
        span = ends.setdefault(attempt, [t0, t1])
        span[0], span[1] = min(span[0], t0), max(span[1], t1)
    order = sorted(ends)
    return [(ends[a][1], ends[b][0], b) for a, b in zip(order, order[1:]) if ends[b][0] > ends[a][1]]


def _restart_intervals(attempt_spans: dict[tuple[int, Any], list[float]], off) -> list[tuple[float, float]]:
    """The gaps between attempts (see _attempt_gaps): no training."""
    return [(a, b) for a, b, _ in _attempt_gaps(attempt_spans, off)]


def _restart_gaps(attempt_spans: dict[tuple[int, Any], list[float]], off, jobs_again: set) -> tuple[float, float]:
    """Seconds the job spent restarting (torchrun's restarts), and seconds between its jobs
    run again under the run's id (``jobs_again``: the attempts they began): a job started by
    hand after the first had ended is no restart (a second torchrun 11 s after the first read
    "restarting 10.9 s")."""
    restarting = between = 0.0
    for a, b, attempt in _attempt_gaps(attempt_spans, off):
        if attempt in jobs_again:
            between += b - a
        else:
            restarting += b - a
    return restarting, between


WARMUP_STEPS = 20
"""Steps at the start of a log that the steady rate leaves out (a fifth of a run of fewer than
five times as many): the first steps build caches, allocate, tune kernels."""


def _warmup_steps(steps: int) -> int:
    """The steps the steady rate leaves out of a run of ``steps`` (the rank with the most)."""
    return min(WARMUP_STEPS, steps // 5)


def _paused_s(spans: dict[int, list[float]], pauses: dict[int, list[tuple[float, float]]], t0: float, t1: float,
              restarts: list[tuple[float, float]] = ()) -> float:  # fmt: skip
    """Seconds within [t0, t1] that are no training time: while any rank of ``spans`` (rank ->
    its first step's start and last step's end) was paused (``pauses``: rank -> (end, seconds)
    of each evaluation or checkpoint save), the job restarted (``restarts``: (from, to)), or no
    rank was within its steps' span (done, or not started yet). Any rank's pause, not only
    every rank's at once: the others wait for it, in their next step's collective or at a
    barrier (rank 0 alone validating every 25 steps for 0.1 s, which rank 1's next step held,
    read 10,396 samples/s of a run whose steps ran at 24,000). Each second once: a save right
    before a crash is a pause and inside the restart's gap too."""
    out = [(max(t0, t - d), min(t1, t)) for rank in spans for t, d in pauses.get(rank, ())]
    out += [(max(t0, a), min(t1, b)) for a, b in restarts]
    covered = t0  # the gaps between the ranks' steps' spans: no rank trained there
    for r0, r1 in sorted(spans.values()):
        out.append((covered, min(t1, r0)))
        covered = max(covered, r1)
    out.append((covered, t1))
    out.sort()
    paused, end = 0.0, t0
    for a, b in out:
        a = max(a, end)
        if b > a:
            paused += b - a
            end = b
    return paused


def _steady(first_steps: dict[int, list[tuple[float, int, int]]], samples: dict[int, int], spans: dict[int, list[float]],
            pauses: dict[int, list[tuple[float, float]]], attempt_spans: dict[tuple[int, Any], list[float]], off,
            t1: float | None, warmup: int, last: int | None) -> tuple[float, dict] | None:
    """The steady rate: the samples of every rank's steps after its first ``warmup`` over the
    time from the earliest end of a warm-up (of the ranks of ``spans``, whose clocks agree; no
    warm-up: the first step's start) to the last step's end, less the evaluations, saves and
    restarts in it, as the training time; and the steps it is of ({first, last, warmup}: ``last``
    the furthest rank's)."""
    starts = [steps[warmup - 1][0] if warmup else spans[rank][0]
              for rank, steps in first_steps.items() if rank in spans and len(steps) >= max(warmup, 1)]
    if not starts or t1 is None:
        return None
    t0 = min(starts)
    took = t1 - t0 - _paused_s(spans, pauses, t0, t1, _restart_intervals(attempt_spans, off))
    if took <= 0:
        return None
    after = sum(samples.values()) - sum(n for steps in first_steps.values() for _, n, _ in steps[:warmup])
    first = min((steps[warmup][2] for steps in first_steps.values() if len(steps) > warmup), default=None)
    return after / took, {"first": first, "last": last, "warmup": warmup}


def _state_bytes(mem: schema.Mem | None) -> int | None:
    """Parameters + gradients + optimizer state: what ZeRO's arithmetic counts."""
    return None if mem is None else mem_state_bytes(mem)


def build_report(path: str, progress: Progress | None = None) -> dict:
    """Read the log at ``path`` and summarise it (the ``--format json`` object); ``progress``
    is told how far the reading is (a log of gigabytes takes minutes)."""
    stats = LogReadStats()
    state = RunState(track_seq=True)
    state.events = deque()  # the report needs every event and verdict, not the last 500
    state.lifecycle_limit = None
    # Every step's time and phases, for their medians: exact up to figures.EXACT steps a rank,
    # within 0.05 % past them, in bounded memory (a log of a day holds millions of steps: kept
    # one by one, as C doubles, 256 ranks' took 10 GB).
    step_s: dict[int, Figures] = defaultdict(Figures)
    phases: dict[int, dict[str, Figures]] = defaultdict(lambda: defaultdict(Figures))
    # Steps without comm_s, by rank: under the zero-code hooks none is "no collective between
    # the steps", no wait; counted as 0 where the rank waited on other steps (its median over
    # only the steps with a barrier read 30 ms of comm beside a 13 ms step).
    no_comm: Counter[int] = Counter()
    loader_s: Counter[int] = Counter()
    """Each rank's seconds in its DataLoader (Step.loader_s), over the steps that said it."""
    loader_steps: Counter[int] = Counter()
    loader_at_starts: Counter[int] = Counter()
    """Each rank's DataLoader seconds on its epochs' first steps (see ``epoch_of``)."""
    starts_timed: Counter[int] = Counter()
    """...and how many epoch starts of the rank timed its DataLoader."""
    epoch_of: dict[int, int] = {}
    """rank -> the latest epoch its process's steps said; a rank's step of a later epoch, or its
    process's first step, begins an epoch: where a DataLoader without persistent_workers starts
    its workers anew (a script's first epoch's steps may carry no epoch, 0, the next 1, 2, ...)."""
    process_first: dict[tuple, tuple[int, float]] = {}
    """(rank, torchrun's restarts, its process) -> the process's first step and its seconds: its
    warm-up (torch.compile, the DataLoader workers' first batch), no hold (see _holds)."""
    own_phases: dict[int, dict[str, Figures]] = defaultdict(dict)
    """rank -> every step's seconds of each phase of the script's own (``Step.phases``), by name
    in the order the rank first timed them."""
    samples: dict[int, int] = defaultdict(int)
    first_steps: dict[int, list[tuple[float, int, int]]] = defaultdict(list)
    """rank -> (end, samples, step) of its earliest steps, one more than WARMUP_STEPS: where the
    steady rate's steps begin, and the samples before them."""
    evals: dict[int, list[float]] = defaultdict(list)
    """Each rank's evaluations (``eval`` events): how long each took."""
    eval_at: dict[int, float] = {}
    """step -> the longest evaluation after it (for the others' wait at the next step)."""
    joins: dict[int, int] = {}
    """rank -> the step at which it ran out of inputs under DDP's Join (its ``join`` event)."""
    pauses: dict[int, list[tuple[float, float]]] = defaultdict(list)
    """rank -> (end, seconds) of each evaluation and checkpoint save: outside its steps' times,
    and no training time for any rank (the others wait for it)."""
    top_step: dict[int, int] = {}
    low_step: dict[int, int] = {}
    epochs: list[int] = []
    """The first and the last epoch a step said it was in (none: no step said one)."""
    epoch_starts: dict[int, int] = {}
    """epoch -> the first step a rank said was in it."""
    recent: dict[int, _RecentSteps] = defaultdict(_RecentSteps)
    rerun: dict[int, int] = defaultdict(int)
    """Steps a rank took again (a restart or resume back to a checkpoint): seen already (or
    further back than a rank's recent steps reach). A step arriving after a later one (the
    reporter's two sockets take turns) is no rerun."""
    first_loss: dict[int, float] = {}
    loss_bad: dict[int, dict] = {}
    """rank -> the value and step its loss stopped being finite at, while it is not (a step
    with a loss again, or a restarted process, ends it)."""
    loss_turns: list[dict] = []
    """Each time a rank's loss stopped being finite (:func:`_loss_turn`), in the log's order:
    the report's ``loss_not_finite``."""
    loss_open: dict[int, dict] = {}
    """rank -> its entry of ``loss_turns`` while its loss is not finite."""
    loss_turns_more = 0
    """Those past MAX_LOSS_TURNS, counted."""
    custom_first: dict[str, dict[int, float]] = defaultdict(dict)
    custom_last: dict[str, dict[int, float]] = defaultdict(dict)
    """Metrics a script logged itself (``pt.log(grad_norm=...)``): each rank's first and last."""
    peak: dict[int, int] = {}
    peak_kind = ""
    rss_peak: dict[int, int] = {}
    """rank -> its process's RSS high-water mark (System.rss_peak_bytes)."""
    arrivals = StepWaits()
    long_steps: dict[tuple[int, int], tuple[float | None, float | None, bool]] = {}
    """(rank, step) -> its data and DataLoader seconds, and whether it began an epoch, of steps whose own work took HOLD_MIN_S or
    more (at most HOLD_KEPT): the steps one rank may have held the others (see _holds)."""
    busy_at: dict[tuple[int, int], float] = {}
    """(rank, step) -> the seconds of its own saves and evaluations after that step: in no step's
    time, but in the others' wait for it at their next collective (see _holds)."""
    timeline = Timeline()
    """The run in about ten parts of its steps, for ``timeline`` (telemetry/timeline.py)."""
    stragglers: list[dict] = []
    open_stragglers: dict[int, dict] = {}
    stalls: list[dict] = []
    open_stalls: dict[int, dict] = {}
    stall_from: dict[int, float] = {}
    """Each rank's newest step's time: where a stall it is then found in began."""
    not_sharding: dict[int, str] = {}
    growing: list[dict] = []
    """Each time a rank's memory was said to grow (memory_growing), till it was steady again."""
    open_growing: dict[int, dict] = {}
    mem_track: dict[int, list] = {}
    """rank -> [first step, its RSS, its CUDA allocated; last step, RSS, allocated] of its
    process's steps past the detector's warm-up (memgrowth: what a growing rank's line says)."""
    exits: dict[int, dict] = {}
    noted: set[int] = set()
    """Ranks whose exit the launcher noted (torchrun saw the process end): a failed exit the
    rank says itself afterwards is the same one, with torchrun's code (as RunState keeps it)."""
    saves: dict[int, dict] = {}
    resumes: dict[tuple[int, int], dict] = {}
    warnings: dict[str, dict] = {}
    said_turns: dict[str, dict] = {}
    """Ranks' warnings that their loss stopped being finite or is finite again, by text, apart
    from ``warnings``: a script that skips each inf loss's update sends two each time, which
    filled the report's MAX_WARNINGS and pushed the run's other warnings out
    (:func:`_fold_loss_turns` folds them)."""
    jobs_mixed = False
    """The hub warned that two jobs sent under the run's id (:data:`SHARED_RUN_ID`)."""
    first_t = hub_last_t = None
    """The hub's first time: the run's start where no rank's clock gives one; and its last."""
    clocks = RankClocks()
    """The ranks' own first and last times, and whose clock is off (left out of the spans)."""
    step_spans: dict[int, list[float]] = {}
    """rank -> [start of its first step, end of its last] on its own clock."""
    attempt_spans: dict[tuple[int, tuple[int, int]], list[float]] = {}
    """(rank, attempt) -> the same, within one attempt of the job: (torchrun's restarts, the
    rank's processes started since its first, see ``started``)."""
    started: dict[int, tuple[int, int]] = {}
    """rank -> (its process's pid, how many processes of it said hello before): a process of a
    rank started again with torchrun's count unchanged (a job run again under the run's id, or
    elastic workers started again for new nodes) is an attempt too, and the time between is no
    training (a second job 15 s after the first read as 16 s of training and 639 samples/s of
    12,000)."""
    jobs_again: set[tuple[int, int]] = set()
    """The attempts a job run again under the run's id began (the hub's note says so before
    its first rank's hello: see state.run_again)."""
    job_again_next = False
    run_ids: set[str] = set()
    hub_restarts: list[float] = []
    refused = _Refused()
    closed = False  # the hub's "hub stopped" came after the ranks' last record
    closed_t = 0.0  # ...at this time (the hub's clock)
    children: dict[int, tuple[int, int]] = {}
    """rank -> (the most memory its child processes held of their own, how many they were then)."""
    disk_full_end: dict | None = None
    """What the log's last record says became of the lines its disk never took (see
    :func:`_disk_full_end`), when it is the note of a hub that stopped with its disk full."""
    for msg in read_log(path, stats, progress):
        state.apply(msg, msg.t)
        if isinstance(msg, schema.Event) and msg.name == "hub_restart":
            hub_restarts.append(msg.t)
        if msg.rank >= 0:
            closed = False
            disk_full_end = None
        elif isinstance(msg, schema.Event):
            refused.take(msg)
            if msg.name == "hub" and msg.message.startswith("hub stopped"):
                closed, closed_t = True, max(closed_t, msg.t)
            disk_full_end = _disk_full_end(msg)
        else:
            disk_full_end = None
        if msg.run:
            run_ids.add(msg.run)
        if isinstance(msg, schema.Hello):
            was = started.get(msg.rank)
            if not msg.pid or was is None or was[0] != msg.pid:
                # (a hello its process sends again, its framework's planned steps learnt once
                # training began, is no restart)
                noted.discard(msg.rank)  # a (re)started rank: its next exit is a new one
                loss_bad.pop(msg.rank, None)
                if (turn := loss_open.pop(msg.rank, None)) is not None:
                    turn["until"] = "restart"
            if msg.pid and msg.seq >= 0 and (was is None or was[0] != msg.pid):
                started[msg.rank] = (msg.pid, 0 if was is None else was[1] + 1)
                epoch_of.pop(msg.rank, None)  # (a new process's first step starts its DataLoader's workers)
                if job_again_next:
                    jobs_again.add((state.ranks[msg.rank].restarts, started[msg.rank][1]))
                    job_again_next = False
        elif run_again(msg):
            job_again_next = True
        if msg.t:
            clocks.take(msg)
            if is_hub_side(msg):
                first_t = msg.t if first_t is None else min(first_t, msg.t)
                hub_last_t = msg.t if hub_last_t is None else max(hub_last_t, msg.t)
        if isinstance(msg, schema.Step):
            ep = open_stalls.get(msg.rank)
            if ep is not None and (ep["step"] is None or msg.step > ep["step"]):
                if msg.t and msg.t < ep["verdict_t"]:
                    # Done before the hub's verdict, taken after it: a rank sends its steps in
                    # batches, and one stopped (kill -STOP) with steps 72 and 73 still in its
                    # reporter sends them as it goes on. Its stall began after them; ending it
                    # here read "silent after step 71 for 0.022 s; resumed at step 72" of a
                    # rank frozen 12 s after step 73. (Ranks' clocks agree with the hub's to
                    # well within a stall; one behind it by more leaves the end to the hub's
                    # "resumed".)
                    ep["step"] = msg.step
                    ep["since_t"] = max(ep["since_t"], msg.t)
                else:
                    # A step after the stall is its end, whether or not the hub said so: a rank
                    # that stepped on and finished before the hub's next look read "stalled ...
                    # until it finished; likely the cause of the hang".
                    del open_stalls[msg.rank]
                    ep["until"] = f"resumed at step {msg.step}"
                    if msg.t:
                        ep["end_t"] = msg.t
            if msg.t:  # 0: a step without its time (a hand-made or foreign line) spans nothing
                stall_from[msg.rank] = msg.t
                attempt = (state.ranks[msg.rank].restarts, started.get(msg.rank, (0, 0))[1])
                for spans, key in ((step_spans, msg.rank), (attempt_spans, (msg.rank, attempt))):
                    stepped = spans.get(key)
                    if stepped is None:
                        spans[key] = [msg.t - msg.step_s, msg.t]
                    else:
                        stepped[0] = min(stepped[0], msg.t - msg.step_s)
                        stepped[1] = max(stepped[1], msg.t)
            fig = step_s[msg.rank]
            kept = fig.values
            kept.append(msg.step_s)  # (Figures.append, as it costs where it is hot)
            if len(kept) >= FIGURES_KEPT:
                fig.fold()
            if msg.step <= top_step.get(msg.rank, -1) and not recent[msg.rank].first_time(msg.step):
                rerun[msg.rank] += 1
            else:
                top_step[msg.rank] = max(msg.step, top_step.get(msg.rank, -1))
                recent[msg.rank].add(msg.step)
            if msg.step < low_step.get(msg.rank, msg.step + 1):
                low_step[msg.rank] = msg.step
            if msg.epoch is not None:
                if epochs:
                    epochs[0], epochs[1] = min(epochs[0], msg.epoch), max(epochs[1], msg.epoch)
                else:
                    epochs[:] = [msg.epoch, msg.epoch]
                if msg.step < epoch_starts.get(msg.epoch, msg.step + 1):
                    epoch_starts[msg.epoch] = msg.step
            samples[msg.rank] += msg.samples
            turn = loss_open.get(msg.rank)
            # (a step without a loss while the rank's is not finite: the part's loss is so, not "-")
            bad = turn["value"] if turn is not None and msg.loss is None and msg.step >= turn["step"] else None
            timeline.step(msg.rank, msg.step, msg.t, msg.step_s, msg.samples, msg.loss, state.ranks[msg.rank].restarts, bad, msg.data_s)
            if msg.t:
                earliest = first_steps[msg.rank]
                if len(earliest) <= WARMUP_STEPS or msg.t < earliest[-1][0]:
                    bisect.insort(earliest, (msg.t, msg.samples, msg.step))
                    del earliest[WARMUP_STEPS + 1:]
            if msg.loss is not None:
                first_loss.setdefault(msg.rank, msg.loss)
                loss_bad.pop(msg.rank, None)
                if turn is not None and msg.step > turn["step"]:
                    del loss_open[msg.rank]
                    turn["until"], turn["finite_again_step"] = "finite", msg.step
            for name, x in msg.custom.items():
                custom_first[name].setdefault(msg.rank, x)
                custom_last[name][msg.rank] = x
            starts_epoch = msg.epoch > epoch_of.get(msg.rank, -math.inf)
            if starts_epoch:
                epoch_of[msg.rank] = msg.epoch
            if msg.loader_s is not None:
                loader_s[msg.rank] += msg.loader_s
                loader_steps[msg.rank] += 1
                if starts_epoch:
                    loader_at_starts[msg.rank] += msg.loader_s
                    starts_timed[msg.rank] += 1
            process = (msg.rank, state.ranks[msg.rank].restarts, started.get(msg.rank))
            if msg.step < process_first.get(process, (msg.step + 1,))[0]:
                process_first[process] = (msg.step, msg.step_s)
            rank_phases = phases[msg.rank]
            for p in PHASES:
                v = getattr(msg, p)
                if v is not None:
                    fig = rank_phases[p]
                    kept = fig.values
                    kept.append(v)
                    if len(kept) >= FIGURES_KEPT:
                        fig.fold()
                elif p == "comm_s":
                    no_comm[msg.rank] += 1
            if msg.phases:
                own = own_phases[msg.rank]
                for name, x in msg.phases.items():
                    times = own.get(name)
                    if times is None:
                        times = own[name] = Figures()
                    times.append(x)
            # (what the others waited for a straggler each step: its self-time lead, or where it
            # is larger their comm wait beyond its own, as the verdict's cost; see StepWaits)
            arrivals.see(msg.step, msg.rank, msg.self_s, msg.comm_s)
            if msg.self_s is not None and msg.self_s >= HOLD_MIN_S and len(long_steps) < HOLD_KEPT:
                long_steps[(msg.rank, msg.step)] = (msg.data_s, msg.loader_s, starts_epoch)
            mem = msg.mem
            if mem is not None:
                if msg.step > MEM_WARMUP_STEPS:
                    track = mem_track.get(msg.rank)
                    if track is None or msg.step < track[3]:  # (a new process: its memory counts anew)
                        mem_track[msg.rank] = [msg.step, mem.rss_bytes, mem.cuda_allocated_bytes, msg.step, mem.rss_bytes, mem.cuda_allocated_bytes]
                    else:
                        track[3], track[4], track[5] = msg.step, mem.rss_bytes, mem.cuda_allocated_bytes
                if mem.cuda_peak_bytes is not None:
                    peak_kind = "cuda"
                    peak[msg.rank] = max(peak.get(msg.rank, 0), mem.cuda_peak_bytes)
                elif mem.rss_bytes is not None and peak_kind != "cuda":
                    peak_kind = "rss"
                    peak[msg.rank] = max(peak.get(msg.rank, 0), mem.rss_bytes)
        elif isinstance(msg, schema.System):
            if msg.children_uss_bytes is not None:
                # (a rank's DataLoader workers: their own memory, not in its RSS, review 277)
                held = children.get(msg.rank)
                if held is None or msg.children_uss_bytes > held[0]:
                    children[msg.rank] = (msg.children_uss_bytes, msg.children or 0)
            if msg.rss_peak_bytes is not None:
                # (its high-water mark: the RSS read after each step missed the peak within the
                # steps, 1.0 GiB of an FSDP rank whose kernel said 1.12, review 299)
                rss_peak[msg.rank] = max(rss_peak.get(msg.rank, 0), msg.rss_peak_bytes)
        elif isinstance(msg, schema.Verdict):
            ended = open_stalls.get(msg.rank)
            _fold_verdict(msg, stragglers, open_stragglers, stalls, open_stalls, not_sharding, exits)
            if msg.verdict in ("memory_growing", "memory_steady"):
                _fold_growth(msg, growing, open_growing, mem_track)
            if msg.verdict == "straggler":
                stragglers[-1]["_run"] = timeline.run_of(msg.rank)  # (its steps: the run of steps it was found in)
            if msg.verdict in ("stalled", "silent"):
                ep = open_stalls[msg.rank]
                ep["since_t"] = stall_from.get(msg.rank, msg.t)
                ep["verdict_t"] = msg.t
                r = state.ranks.get(msg.rank)
                ep["attempt"] = r.restarts if r is not None else 0
            if ended is not None and ended["until"] is not None:
                ended["end_t"], ended["end_on_hub"] = msg.t, True
        elif isinstance(msg, schema.Event) and msg.name == "exit" and msg.rank >= 0:
            if msg.code:
                if msg.seq >= 0 and msg.rank in noted and msg.rank in exits:
                    if exits[msg.rank]["step"] is None:
                        exits[msg.rank]["step"] = msg.step
                else:
                    exits[msg.rank] = {"rank": msg.rank, "code": msg.code, "step": msg.step, "message": msg.message}
                    if msg.seq < 0:
                        noted.add(msg.rank)
                ep = open_stalls.pop(msg.rank, None)
                if ep is not None and msg.seq < 0 and msg.code in STOPPED_CODES and msg.t and msg.t < ep["verdict_t"]:
                    # The launcher's note of a stop is dated when the stop began. A rank the hub
                    # called stalled only after that was stepping as the stop came: its quiet was
                    # the stop's (a framework that takes seconds to end its ranks, Lightning's),
                    # no hang. It read "ranks 0-1 stalled in sync after step 765 for 0.016 s
                    # until it exited" of a Stop chosen in the TUI (review 267).
                    stalls.remove(ep)
                elif ep is not None:
                    ep["until"], ep["end_t"] = "exit", msg.t
            elif msg.seq >= 0:
                # The rank's own word that it finished wins over a launcher's note about it
                # taken first (the hub takes from each sender in turn).
                exits.pop(msg.rank, None)
                ep = open_stalls.pop(msg.rank, None)
                if ep is not None:
                    ep["until"], ep["end_t"] = "finished", msg.t
        elif isinstance(msg, schema.Event) and msg.name == "join" and msg.rank >= 0 and msg.step is not None:
            joins[msg.rank] = msg.step
        elif isinstance(msg, schema.Event) and msg.name == "eval" and msg.rank >= 0:
            evals[msg.rank].append(msg.duration_s or 0.0)
            if msg.step is not None and len(eval_at) < HOLD_KEPT:
                eval_at[msg.step] = max(eval_at.get(msg.step, 0.0), msg.duration_s or 0.0)
            _busy(busy_at, msg)
            pauses[msg.rank].append((msg.t, msg.duration_s or 0.0))
        elif isinstance(msg, schema.Event) and msg.name == "warning" and msg.rank < 0:
            if hub_warning_kept(msg):
                _fold_event(msg, state, saves, resumes, warnings)
                jobs_mixed = jobs_mixed or SHARED_RUN_ID in msg.message
        elif isinstance(msg, schema.Event) and msg.name in ("checkpoint", "resume", "warning") and msg.seq >= 0:
            if msg.name != "warning":
                _busy(busy_at, msg)
            outside = msg.duration_s
            if msg.name == "checkpoint" and msg.duration_s and msg.t:
                # A save follows the rank's step (the trainer sends the step first, on the same
                # socket): one said to have begun before that step ended ran beside the steps
                # (an asynchronous save), which it held no rank out of.
                stepped = step_spans.get(msg.rank)
                began = msg.t - msg.duration_s if stepped is None else max(msg.t - msg.duration_s, stepped[1])
                outside = max(0.0, msg.t - began)
                pauses[msg.rank].append((msg.t, outside))
            _fold_event(msg, state, saves, resumes, said_turns if _loss_turn_said(msg) else warnings, outside,
                        cap=2 * MAX_LOSS_TURNS if _loss_turn_said(msg) else MAX_WARNINGS)
            if msg.name == "warning" and (bad := LOSS_NOT_FINITE.match(msg.message)) is not None:
                loss_bad[msg.rank] = {"value": bad["value"], "step": int(bad["step"])}
                if msg.rank not in loss_open:
                    turn = loss_open[msg.rank] = {"rank": msg.rank, "value": bad["value"], "step": int(bad["step"]),
                                                  "until": "end", "finite_again_step": None}
                    if len(loss_turns) < MAX_LOSS_TURNS:
                        loss_turns.append(turn)
                    else:
                        loss_turns_more += 1
        elif isinstance(msg, schema.Hello) and msg.restart and msg.rank in open_stalls:
            # torchrun stopped the rank to restart the job (it sends no word for the ranks it
            # stops then): the episode ends with the restart.
            ep = open_stalls.pop(msg.rank)
            ep["until"], ep["end_t"] = f"restarted by torchrun (restart {msg.restart})", msg.t

    # The run's span (RankClocks.span): of the ranks whose clocks agree with the hub's (one set
    # to 1970 read as 57 years).
    off = clocks.off()
    hub_off = clocks.hub_off_s()
    span = clocks.span()
    hub_first_t = first_t
    first_t, last_t = span if span is not None else (first_t, first_t)
    if closed and open_stalls and last_t is not None and hub_off is None:
        # Its hub closed the log on ranks it had found stalled or silent and never heard of
        # again: the hang went on until the hub stopped, which watched it (every rank gone
        # quiet sends nothing more). Its span ended at the hub's verdicts: "duration 3.1 s" of
        # a hub that watched a hang 26 s, "silent ... for 3.1 s" of its ranks. (Ranks merely
        # not heard to end, no verdict on them, end at their last word: the hub may have
        # stayed on for a viewer kept open.)
        last_t = max(last_t, closed_t)
    last_attempt = max((r.restarts for r in state.ranks.values()), default=0)
    for ep in stalls:
        # How long it lasted: from the rank's last step to its end (the log's end: never ended).
        ep.pop("verdict_t", None)
        since, end = ep.pop("since_t", None), ep.pop("end_t", None) or last_t
        if ep.pop("end_on_hub", False) and hub_off is not None or ep["rank"] in off:
            since = None  # its last step's time is on its own clock, the end (a verdict) on the hub's
        ep["seconds"] = round(max(0.0, end - since), 3) if since is not None and end is not None else None
        # The run ended in it: never over but by the rank's exit (or the log's end), in the
        # job's last attempt (an attempt torchrun restarted the job from went on).
        ep["ended_run"] = ep.pop("attempt", 0) == last_attempt and not (ep["until"] or "").startswith(("resumed", "finished", "restarted"))
    if rss_peak and peak_kind != "cuda":
        # (its own kind: an older log's largest RSS after a step is another figure, which
        # `report --compare` would have judged against it, review 305)
        peak_kind = "rss_hwm"
        for rank, nbytes in rss_peak.items():
            peak[rank] = max(peak.get(rank, 0), nbytes)
    last_steps = {rank: r.step.step for rank, r in state.ranks.items() if r.step is not None}
    cleared: dict[int, int] = {}  # a rank's last episode's clearing: the next one's streak begins after it
    # Each episode's steps, from its finding to its clearing (or its rank's last step)
    spans = {id(ep): (ep["step"], ep["cleared_step"] or last_steps.get(ep["rank"], ep["step"])) for ep in stragglers}
    for ep in sorted(stragglers, key=lambda e: e["step"] if e["step"] is not None else -1):
        # (the ranks found straggling over some of the same steps: the others waited for the
        # slowest of them, not for its lead over the next; one cleared as another was found is not)
        at, to = spans[id(ep)]
        peers = {o["rank"] for o in stragglers if o["rank"] != ep["rank"] and o["step"] is not None and at is not None
                 and spans[id(o)][0] < to and spans[id(o)][1] > at}  # fmt: skip
        _charge(ep, arrivals, last_steps.get(ep["rank"], ep["step"] or 0), after=cleared.get(ep["rank"], 0), peers=peers)
        ep["straggling_with"] = sorted(peers)
        if ep["cleared_step"] is not None:
            cleared[ep["rank"]] = ep["cleared_step"]
    train_s = restarting = between_jobs = 0.0
    good_spans = {rank: span for rank, span in step_spans.items() if rank not in off}
    step_t0 = min((span[0] for span in good_spans.values()), default=None)
    step_t1 = max((span[1] for span in good_spans.values()), default=None)
    if step_t0 is not None and step_t1 is not None:
        # From the first step to the last, less the evaluations and checkpoint saves between
        # them (the steps' times leave them out too): a 12 s validation in a 0.5 s run read as
        # 13 samples/s for 180, and 40 steps saved after each read 667 samples/s (1.9 s) where
        # the steps had 0.54 s. One rank's too, which the others waited for in their steps
        # (see _paused_s).
        paused = _paused_s(good_spans, pauses, step_t0, step_t1, _restart_intervals(attempt_spans, off))
        restarting, between_jobs = _restart_gaps(attempt_spans, off, jobs_again)
        train_s = max(0.0, step_t1 - step_t0 - paused)
        if first_t is not None and last_t is not None:
            # A first step timed from before its rank's first word (a step's time is taken back
            # from its end: a simulated rank's first, a clock read before the hello) is no
            # training outside the run: "duration 14.9 s (training 15.0 s)".
            train_s = min(train_s, max(0.0, last_t - first_t))
    for ep in stragglers:
        ep["share_of_train"] = ep["cost_total_s"] / train_s if train_s > 0 else None
    good_pauses = [p for rank, ps in pauses.items() if rank not in off for p in ps]
    restart_spans = _restart_intervals(attempt_spans, off)
    charges = []
    for ep in stragglers:
        run = ep.pop("_run", 0)
        charges += [(run, step, gap) for step, gap in ep.pop("_charged", ())]
    parts = timeline.parts(charges, lambda t0, t1: _paused_s({-1: [t0, t1]}, {-1: good_pauses}, t0, t1, restart_spans), first_t)
    if not state.lost:
        for part in parts:  # (steps a script numbers sparsely, nothing lost: none missing, as the ranks' rows say)
            part["steps_missing"] = 0
    steady = _steady(first_steps, samples, good_spans, pauses, attempt_spans, off, step_t1,
                     _warmup_steps(max((len(v) for v in step_s.values()), default=0)), max(top_step.values(), default=None))

    hello = state.hello
    strategy = hello.strategy if hello else ""
    world = state.world_size
    params_count = hello.params_count if hello else 0
    fulls = [f for f in (mem_full_bytes(r.step.mem) for r in state.ranks.values() if r.step is not None and r.step.mem is not None) if f]
    # (a pipeline's stages hold parts of the model, unequal where one has the embedding or the
    # head: each is expected to hold its own, so the largest one's is what the largest may hold)
    full_state = (max(fulls) if is_pipeline(strategy) else int(statistics.median(fulls))) if fulls else None
    expected, expected_basis = expected_state_bytes(full_state, params_count if hello else 0, world, strategy, shards_of(state))

    failure = failure_summary(state)
    left = left_early(state, failure)
    ranks = []
    for rank in sorted(state.ranks):
        r = state.ranks[rank]
        mem = r.step.mem if r.step is not None else None
        state_b = _state_bytes(mem)
        row: dict[str, Any] = {
            "rank": rank,
            "host": r.host,
            "device": r.hello.device if r.hello else "",
            "status": _status(r, closed, left),
            "steps": len(step_s.get(rank, ())) - rerun.get(rank, 0),
            "steps_rerun": rerun.get(rank, 0),
            # Steps between its first and last that the log lacks: when messages were lost (a
            # hub restarted: what the ranks sent while it was down), "steps 1475 (last step 1500)"
            # of a run whose ranks trained all 1500 read as 25 steps not trained.
            "steps_missing": max(0, top_step[rank] - low_step[rank] + 1 - (len(step_s[rank]) - rerun.get(rank, 0)))
            if r.seq.lost and rank in top_step else 0,
            "last_step": r.last_step,
            "last_loss": r.step.loss if r.step else None,
            "first_loss": first_loss.get(rank),
            "median_step_s": step_s[rank].median() if rank in step_s else None,
            "samples": samples.get(rank, 0),
            "params_bytes": mem.params_bytes if mem else None,
            "params_full_bytes": mem.params_full_bytes if mem else None,
            "grads_bytes": mem.grads_bytes if mem else None,
            "optim_bytes": mem.optim_bytes if mem else None,
            "buckets_bytes": mem.buckets_bytes if mem else None,
            "state_bytes": state_b,
            "held_bytes": mem_held_bytes(mem),
            "full_bytes": mem_full_bytes(mem),
            "expected_bytes": expected,
            "vs_expected": state_b / expected if state_b is not None and expected else None,
            "peak_bytes": peak.get(rank),
            "lost_messages": r.seq.lost,
            "restarts": r.restarts,
        }
        if no_comm[rank] and "comm_s" in phases[rank]:
            comm = phases[rank]["comm_s"]
            for _ in range(no_comm[rank]):
                comm.append(0.0)
        for p in PHASES:
            row[f"median_{p}"] = phases[rank][p].median() if p in phases[rank] else None
        # The script's own phases (pt.phase("augment")), by name: in a dict of their own, as
        # a name is the script's (one named "step" is no median_step_s).
        row["custom_phases"] = {name: times.median() for name, times in own_phases[rank].items()} if rank in own_phases else {}
        if rank in loss_bad and row["last_loss"] is None:
            # Diverged: its last loss is NaN, not unknown ("-" read as a loss never measured,
            # and --compare set a diverged run beside a good one without a word).
            row["loss_not_finite"] = loss_bad[rank]
        ranks.append(row)

    duration = (last_t - first_t) if first_t is not None and last_t is not None else 0.0
    if not any(step_s.values()) and hub_first_t is not None and hub_off is None:
        # A run that took no step (stopped as it started: torch's import, the rendezvous) lasted
        # from its hub's start, which waited with it: its ranks' first and last word, two hellos,
        # read "duration 2e-05 s". To their last word still (a viewer kept open after the job
        # keeps the hub writing), or without a rank's word, to the hub's last record.
        end = last_t if span is not None else hub_last_t
        duration = max(duration, end - hub_first_t) if end is not None else duration
    total_samples = sum(samples.values())
    # Ranks of the world size the log never heard from (another node's, whose keys the hub
    # refused): "world size 2" over a table of rank 0 alone, its samples/s one rank's, read as
    # the job's, and only "refused by the hub 66 connection attempt(s)" hinted why.
    unheard = sorted(set(range(world)) - set(state.ranks)) if ranks else []
    median_step = _median([r["median_step_s"] for r in ranks])
    holds = _holds(arrivals, long_steps, median_step, train_s, stragglers, {(p[0], step) for p, (step, _) in process_first.items()},
                   busy_at)  # fmt: skip
    for e in exits.values():
        e["signal"] = signal_name(e["code"])
        e["role"] = _role(e["rank"], failure) or ("stopped" if e["code"] in STOPPED_CODES else None)
        r = state.ranks.get(e["rank"])
        if e["role"] is None and r is not None and r.stopping is not None and r.ended_in_stop:
            # (failed after the launcher began stopping it: the stop's doing, see RankState.ended_in_stop)
            e["role"], e["stopping"] = "in_stop", r.stopping.message
        if e["role"] in ("cause", "peer_left", "waited") and e["step"] is None and failure is not None:
            e["step"] = failure.get("step")  # killed without a word: the step it died in, as the failure line says
    _after_saves(saves, stalls, holds, {r for r in step_s if loader_steps[r]})
    _name_folders(list(saves.values()))
    data_and_step = {r: (phases[r]["data_s"].total() if "data_s" in phases[r] else 0.0, v.total()) for r, v in step_s.items()}
    _at_epoch_starts(stalls, epoch_starts)
    return {
        "log": path,
        "run_id": state.run_id,
        # A log that holds more than one run (appended to by hand): the figures mix them.
        **({"runs": sorted(run_ids)} if len(run_ids) > 1 else {}),
        "strategy": strategy,
        # What each rank ran (the launched hub's note: a hub alone's log, or an older one, has none)
        **({"command": state.command} if state.command else {}),
        "world_size": world,
        # (only where some are: ranks of the world size the log has not a word of)
        **({"ranks_unheard": unheard} if unheard else {}),
        "backend": hello.backend if hello else "",
        "device": hello.device if hello else "",
        "device_name": hello.device_name if hello else "",
        "devices": _devices(state),
        "torch_version": hello.torch_version if hello else "",
        # (the pardash that recorded it: "" of a log older than the field; report --compare
        # judges two runs' self and comm only where they name the same)
        "pardash_version": hello.pardash_version if hello else "",
        "note": hello.note if hello else "",
        # (what made the log: "trainer", "auto" (the zero-code hooks), "api", "simulate": what its
        # comm time is, the bundled trainer's all-reduce or a script's wait between steps)
        "source": hello.source if hello else "",
        "config": dict(hello.config) if hello else {},
        "params_count": params_count,
        "expected_bytes_per_rank": expected,
        "expected_basis": expected_basis,
        "duration_s": duration,
        # Ranks whose clocks disagree with the hub's by more than CLOCK_OFF_S (seconds ahead,
        # or behind when below 0): their times are left out of the spans above.
        **({"clocks_off": [{"rank": r, "off_s": round(s, 3)} for r, s in sorted(off.items())]} if off else {}),
        # Every rank's clock disagrees with the hub's by this (its ranks' times are used), and
        # whether ranks on several hosts agree it is the hub's that is off (one host: either).
        **({"hub_clock_off_s": round(hub_off, 3), "hub_clock_blamed": clocks.hub_blamed()} if hub_off is not None else {}),
        "train_s": train_s,
        # Between a failed attempt's last step and the restarted job's first (torchrun's
        # --max-restarts): not training, and left out of train_s.
        "restart_s": restarting,
        # Jobs run again under the run's id after every rank had ended (a torchrun started by
        # hand, a PARDASH_RUN_ID left exported), and the time between them: no restart, and
        # not training either (where there are any).
        **({"jobs_run_again": len(jobs_again), "between_jobs_s": between_jobs} if jobs_again else {}),
        # Evaluations between steps (the zero-code hooks'): the rank with the most, and the
        # longest total (they are outside the step times; None: none).
        # "ranks": the ranks that evaluated; "others_waited_s": where only some did, what the
        # others waited at their next collective after each evaluation, up to its time (a script
        # that says its evaluations on rank 0 alone, every rank evaluating, read "the others
        # waited 4.0 s for it" of a wait of none, review 334).
        "evaluations": {"count": max(len(v) for v in evals.values()), "seconds": max(sum(v) for v in evals.values()),
                        "ranks": sorted(evals),
                        **({"others_waited_s": _waited_after(eval_at, arrivals)} if len(evals) < world else {})}  # fmt: skip
        if evals else None,
        "steps": max((r["steps"] for r in ranks), default=0),
        "steps_rerun": max((r["steps_rerun"] for r in ranks), default=0),
        # (of the rank with the most steps: the run's count above, and what its log lacks)
        "steps_missing": max(ranks, key=lambda r: (r["steps"], -r["steps_missing"]))["steps_missing"] if ranks else 0,
        # The epochs its steps said they were in (the log had them on every step and as
        # epoch_end events, and the report said nothing of them); None: no step said one.
        "epochs": {"first": epochs[0], "last": epochs[1]} if epochs else None,
        "custom": {
            name: {"first": _median(list(custom_first[name].values())), "last": _median(list(last.values())), "ranks": len(last)}
            for name, last in sorted(custom_last.items())
        },
        "last_step": state.step,
        # The ranks that ran out of inputs under DDP's Join and the step they did (their last: by
        # design, not ranks behind), where some did: [{rank, step}].
        **({"joined": [{"rank": r, "step": at} for r, at in sorted(joins.items())]} if joins else {}),
        # The steps the run was to take (the trainer's --steps, what its --epochs came to, or a
        # script's config "steps"), when its hello says: a run stopped at step 83,840 of 300,000
        # read "steps 83840", as if that were all it was for. None: not known.
        "total_steps": total_steps(state.hello),
        "samples": total_samples,
        "samples_per_s": total_samples / train_s if train_s > 0 else None,
        # The steps after the warm-up (steady_steps: from first to last, the warm-up's count
        # left out), over the time they took as samples_per_s: samples a step over the median
        # step time read 18,630 of a run that sustained 14,513 (the median leaves out recurring
        # slow steps, not the warm-up alone). None: no time to divide by.
        "steady_samples_per_s": steady[0] if steady else None,
        "steady_steps": steady[1] if steady else None,
        # The samples and rates are of the ranks heard from alone, some of the world never heard
        # (``ranks_unheard``): not the job's. (Only so.)
        **({"samples_partial": True} if unheard else {}),
        "median_step_s": median_step,
        # The slowest first step of a process, where it took as long as a hold would (_holds):
        # its warm-up, no hold (torch.compile's 2 s read "rank 1 held the others once, at step 1",
        # review 320). {step_s, processes (how many processes' first steps: more than ranks,
        # restarts or resumes), ranks}; only where so.
        **_warmup_step(process_first, median_step),
        "phases": {p: _median([r[f"median_{p}"] for r in ranks]) for p in PHASES},
        # The script's own phases as "phases" has the known ones: the median over the ranks
        # that timed each of their medians, seconds a step (a log from before Step.phases has
        # them as "<name>_s" in "custom").
        "custom_phases": _own_phases(ranks),
        # The run in about ten parts of its steps, in the log's order (steps run again after a
        # restart are parts of their own): each part's first_step, last_step, restart (torchrun's
        # count), steps_again, steps, steps_missing, start_s (from the run's start), wall_s,
        # train_s, samples, samples_per_s, step_s_median and step_s_p90 (of the ranks' mean step
        # time a step), loss_median (of the ranks' mean loss a step), straggler_s and
        # straggler_share (what the stragglers cost in it: see ``stragglers``), longest_gap_s and
        # gap_after_step (only where no step came for a while). See telemetry/timeline.py.
        "timeline": parts,
        "ranks": ranks,
        "stragglers": stragglers,
        # A rank that now and then held the others far past a step (rank 0 saving and uploading
        # every 50 steps): no straggler step after step, named nowhere (review 314).
        "holds": holds,
        # Data-loading verdicts that moved from one rank to another, where every rank's loader
        # took alike time: the job is data-bound, no rank's loader slower (None: not so).
        "data_bound": _data_bound(stragglers, data_and_step, epoch_starts),
        # Each rank's share of its step time spent loading data (its data phase's total, epoch
        # starts' worker start-ups in: the medians hide them): {share (every rank's together),
        # share_min, share_max, input_bound, loader_share, between_steps, and epoch_starts where
        # most DataLoader time was its workers starting anew each epoch}; None where no rank
        # measured its data loading.
        "data_loading": _data_loading(data_and_step, {r: loader_s[r] for r in step_s if loader_steps[r]} if all(loader_steps[r] for r in step_s) else None,
                                      {r: (loader_at_starts[r], starts_timed[r]) for r in starts_timed},
                                      # (a script's, by a pardash that times DataLoaders, none of whose steps came from one)
                                      no_dataloader=bool(hello and hello.source == "auto" and hello.pardash_version and not any(loader_steps.values()))),
        # Stall and silence episodes; a stall a rank came out of right after its own save (in
        # its own code: an upload) has "after_checkpoint" {step, after_save_s}, and one that is a
        # hold of "holds" (whose "after_checkpoints" says the saves it followed) "held_step"
        # (see _after_saves); the checkpoints' "after_save_s" and "after_saves_s" hold that time.
        "stalls": stalls,
        "exits": sorted(exits.values(), key=lambda e: e["rank"]),
        # (only where some did: a rank whose script ended well as its peers trained on, the
        # rank table's "left early", failures.left_early)
        **({"left_early": [{"rank": rank, "step": at} for rank, at in sorted(left.items())]} if left else {}),
        "failure": failure,
        # Each time a rank's loss stopped being finite, by step then rank: {rank, value ("nan",
        # "inf", "-inf": the first value), step (its first step so), until ("end": so to the
        # rank's end; "finite": finite again at finite_again_step; "restart": until torchrun
        # restarted the rank), finite_again_step}; [] where every loss was finite. Past
        # MAX_LOSS_TURNS the rest are counted in loss_not_finite_more (only where some are).
        "loss_not_finite": sorted(loss_turns, key=lambda t: (t["step"], t["rank"])),
        **({"loss_not_finite_more": loss_turns_more} if loss_turns_more else {}),
        # When the launcher restarted a hub that died (seconds into the run): the messages
        # the ranks sent while none listened are the lost ones.
        "hub_restarts": [round(t - first_t, 1) if first_t is not None and t else None for t in hub_restarts],
        "job_restarts": max((r["restarts"] for r in ranks), default=0),
        "recovered": recovered_failures(state),
        "checkpoints": {"saved": [_public(saves[k]) for k in sorted(saves)],
                        "resumed": [_public(r) for r in resumes.values()],
                        **_saving(list(saves.values()))},
        # Each text once, with the ranks that sent it; the hub's own (those a report keeps, see
        # hub_warning_kept) with "hub": true and no rank.
        # By step (the first to say it), the first to turn first: in the hub's order, "ranks 0-5,
        # 7 at step 31: loss is nan" read before rank 6's at step 30 that began it (review 306).
        # Those without a step (the hub's) keep their places, the count of the rest last.
        # A set of ranks' loss that stopped being finite and came back alike LOSS_SPIKES_GROUPED
        # times or more is one entry, the first's, with "loss_turns": {"value", "turns": [[step,
        # finite-again step], ...]} (:func:`_fold_loss_turns`).
        "warnings": _by_step([w | {"ranks": sorted(w["ranks"])}
                              for w in [*warnings.values(), *_fold_loss_turns(list(said_turns.values()))]]),
        # Two jobs sent under the run's id at once (the hub's warning says which pids): every
        # figure mixes them, the steps one job ran after the other's counted as run again.
        # (Only where so.)
        **({"jobs_sharing_run_id": True} if jobs_mixed else {}),
        "memory": _memory(ranks, expected, expected_basis, params_count, strategy, world, peak_kind, not_sharding, children)
        | {"growing": [_growth_figures(ep, mem_track) for ep in growing]},
        # (the rows' statuses counted: the ranks' own read "stalled 4" beside four "no exit")
        "statuses": dict(Counter(r["status"] for r in ranks)),
        "messages": dict(sorted(state.counts.items())),
        "lost_messages": state.lost,
        "skipped_lines": stats.skipped_total,
        "skipped_by_reason": dict(sorted(stats.skipped.items())),
        # What the hub refused at its ports (None: the log does not say).
        "rejected_by_reason": refused.counts(),
        # A log that ends with ranks still running and no closing line from its hub: the run
        # goes on, or its hub stopped recording (killed for good, out of disk) before it ended
        # (``live_run`` says which); its disk was full when its hub stopped, the rest of the log
        # in a complete copy (``continued_at``) or lost (``lines_lost``, ``steps_lost``).
        "log_ends_early": None if closed or run_over(state) else _ends_early(path, state, run_ids, disk_full_end, bool(stats.gzip_damage)),
        # A log its hub closed with ranks whose end it never heard ("no exit": a simulate or a
        # hub alone stopped under running ranks, another node's hub gone first): the step then
        # and those ranks, as a live viewer says it ("the hub stopped at step N, 2 ranks not
        # ended"); a summary line said nothing of them. Only in such a log.
        **({"hub_stopped_first": first} if (first := hub_stopped_first(state, closed)) else {}),
        # (the cut .gz read "log ends early ... its hub stopped recording (killed, out of disk)")
        "gzip_damage": {"how": stats.gzip_damage, "after_line": stats.lines} if stats.gzip_damage else None,
    }


NO_EXIT = "no exit"
"""A rank's status in a log its hub closed with the rank still going: its end was never heard,
as when another node's hub stopped first ("running" read as if it still were)."""


STOPPED = "stopped"
"""A rank's status once it ended by a stop, not failing (an exit code of
failures.STOPPED_CODES: Ctrl-C, a viewer's Stop, SIGTERM from a scheduler or from torchrun
after another rank failed), as the TUI's alerts and Prometheus's ``state`` say it: "exited" is
a failure's (a stopped rank read "exited" beside its exits line's "stopped by you")."""


def _status(r: RankState, closed: bool, left: dict[int, int | None] | None = None) -> str:
    """A rank's status at the log's end (``closed``: by its hub's stop line). A rank stalled or
    silent then stays so: that is what became of it, which "no exit" hid, and its episode says
    it never resumed. One of ``left`` (failures.left_early) "left early": it read "finished"
    under the failure line that named it the root cause."""
    status = status_of(r, left or {})
    if status == EXITED and r.ended_in_stop:
        return STOPPED
    if closed and status not in (FINISHED, LEFT_EARLY, EXITED, STALLED, SILENT):
        return NO_EXIT
    return status


def hub_stopped_first(state: RunState, closed: bool) -> dict | None:
    # (by rank: in the order they said hello, "ranks": [1, 0] where rank 1 spoke first)
    not_ended = sorted(r.rank for r in state.ranks.values() if _status(r, closed) == NO_EXIT)
    return {"step": state.step, "ranks": not_ended} if closed and not_ended else None


def _own_phases(ranks: list[dict]) -> dict[str, float | None]:
    """Each phase of the script's own, in the order the ranks first timed them: the median of
    the medians of the ranks that timed it (seconds a step)."""
    names = dict.fromkeys(name for r in ranks for name in r["custom_phases"])
    return {name: _median([r["custom_phases"].get(name) for r in ranks]) for name in names}


def _ends_early(path: str, state: RunState, run_ids: set[str], disk_full_end: dict | None = None, cut: bool = False) -> dict:
    """Where a log without its end stops, and why: ``live_run`` is the run id of the live run
    still recording it (the run registry's: its hub is alive on this machine), else None (its
    hub stopped recording before the run ended). The report said "the run is still going, or
    its hub stopped recording" where the registry knew which. ``continued_at``, ``lines_lost``
    and ``steps_lost`` (None unless so): its disk was still full when its hub stopped, which
    wrote the whole log to the file ``continued_at``, or lost that many lines of those steps
    (see :func:`_disk_full_end`); the report blamed the hub ("killed, out of disk") of a log
    whose run goes on whole in the copy. ``cut``: the log is a gzip stream broken off, its
    end lost there (no live hub records a .gz)."""
    from . import registry

    going = None if disk_full_end or cut else registry.recording(path, run_ids)
    running = [r for r in state.ranks.values() if not (r.finished or r.exit_code is not None)]
    end = disk_full_end or {}
    return {
        "step": state.step,
        "running": len(running),
        # (as its row says it: a silent rank's count read "stalled" beside its row's "silent")
        "stalled": sum(1 for r in running if r.status == STALLED),
        "silent": sum(1 for r in running if r.status == SILENT),
        "live_run": going["run_id"] if going else None,
        "continued_at": end.get("continued_at"),
        "lines_lost": end.get("lines_lost"),
        "steps_lost": end.get("steps_lost"),
    }


_CONTINUED_WHY = " (the hub stopped with "
"""What follows the copy's path in the note of a log continued elsewhere."""

_LOST_AT_END = re.compile(r"the hub stopped with ([\d,]+) lines(?: of steps? (\d+)(?:-(\d+))?)? that this disk could not take "
                          r"and no other place could: lost")  # fmt: skip
"""The note of a log whose hub stopped with lines no place took (recorder.Recorder._keep_elsewhere)."""


def _disk_full_end(ev: schema.Event) -> dict | None:
    """What a hub's note says of a log whose disk was still full as it stopped (the recorder
    ends the log with it, where the disk has room for it): {"continued_at": the complete copy}
    or {"lines_lost": N, "steps_lost": [first, last] or None}; None for any other event."""
    if ev.name != "warning":
        return None
    text = ev.message
    if text.startswith(CONTINUED_AT):
        copy = text[len(CONTINUED_AT):]
        cut = copy.rfind(_CONTINUED_WHY)
        return {"continued_at": copy[:cut] if cut > 0 else copy}
    lost = _LOST_AT_END.fullmatch(text)
    if lost is None:
        return None
    first = lost[2]
    return {"lines_lost": int(lost[1].replace(",", "")),
            "steps_lost": [int(first), int(lost[3] or first)] if first is not None else None}  # fmt: skip


class _Refused:
    """What the hubs that recorded a log refused, by reason, from their notes in it: each hub
    counts from 0 (a restarted one too), notes its count as it grows ("refused so far: ...")
    and at its stop ("hub stopped: ..."); a hub killed outright leaves its last note."""

    def __init__(self) -> None:
        self.earlier: dict[str, int] = {}
        self.current: dict[str, int] = {}
        self.known = False

    def take(self, ev: schema.Event) -> None:
        if ev.name == "hub_restart":
            self._close()
        elif ev.name == "hub" and ev.message.startswith(("hub stopped", "refused so far")):
            counts = parse_rejects(ev.message)
            if counts is not None:
                self.known = True
                self.current = counts
                if ev.message.startswith("hub stopped"):
                    self._close()

    def _close(self) -> None:
        for why, n in self.current.items():
            self.earlier[why] = self.earlier.get(why, 0) + n
        self.current = {}

    def counts(self) -> dict[str, int] | None:
        """By reason, most first; None when the log holds no hub's count."""
        if not self.known:
            return None
        total = dict(self.earlier)
        for why, n in self.current.items():
            total[why] = total.get(why, 0) + n
        return dict(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))


MEM_WARMUP_STEPS = MemGrowthConfig().warmup_steps
"""Steps of a process the memory-growth detector leaves out, as the report does."""


def _fold_growth(v: schema.Verdict, growing: list[dict], open_growing: dict[int, dict], mem_track: dict[int, list]) -> None:
    """A rank's memory said growing (an episode opens) or steady again (it closes, its figures
    as of then: the rank's memory then, its process's first past the warm-up)."""
    if v.verdict == "memory_growing":
        ep = {"rank": v.rank, "series": v.cause or "rss", "step": v.step, "steady_step": None, "message": v.message}
        growing.append(ep)
        open_growing[v.rank] = ep
        return
    ep = open_growing.pop(v.rank, None)
    if ep is not None:
        ep["steady_step"] = v.step
        ep["_to"] = _growth_figures(ep, mem_track)


def _growth_figures(ep: dict, mem_track: dict[int, list]) -> dict:
    """An episode of memory growth (see _fold_growth) with its figures: ``from_step``,
    ``from_bytes`` (its process's first step past the warm-up), ``to_step``, ``to_bytes`` (where
    it was said steady, else the rank's last step), ``per_step_bytes``; of every rank alike
    (rank -1), the median rank's. None where not measured."""
    if "_to" in ep:
        return {k: v for k, v in ep["_to"].items() if not k.startswith("_")}
    col = 2 if ep["series"] == "cuda_allocated" else 1
    tracks = [mem_track[ep["rank"]]] if ep["rank"] in mem_track else [] if ep["rank"] >= 0 else list(mem_track.values())
    tracks = [t for t in tracks if t[col] is not None and t[col + 3] is not None]
    out = {k: v for k, v in ep.items() if not k.startswith("_")}
    if not tracks:
        return out | {"from_step": None, "from_bytes": None, "to_step": None, "to_bytes": None, "per_step_bytes": None}
    t = sorted(tracks, key=lambda t: t[col + 3] - t[col])[len(tracks) // 2]
    steps = t[3] - t[0]
    return out | {"from_step": t[0], "from_bytes": t[col], "to_step": t[3], "to_bytes": t[col + 3],
                  "per_step_bytes": (t[col + 3] - t[col]) / steps if steps > 0 else None}  # fmt: skip


def _fold_verdict(v: schema.Verdict, stragglers, open_stragglers, stalls, open_stalls, not_sharding, exits) -> None:
    if v.verdict == "straggler":
        ep = {
            "rank": v.rank,
            "kind": v.cause,
            "cost_s": v.cost_s,
            "step": v.step,
            "since_step": v.step,
            "cleared_step": None,
            "message": v.message,
        }
        stragglers.append(ep)
        open_stragglers[v.rank] = ep
    elif v.verdict == "straggler_cleared":
        ep = open_stragglers.pop(v.rank, None)
        if ep is not None:
            ep["cleared_step"] = v.step
    elif v.verdict in ("stalled", "silent"):
        ep = {"rank": v.rank, "kind": v.verdict, "phase": v.cause or None, "step": v.step, "until": None, "message": v.message}
        if v.waits_in:  # (the collective it waited in, where its heartbeat said: analysis.different_collectives)
            ep["waits_in"] = v.waits_in
        stalls.append(ep)
        open_stalls[v.rank] = ep
    elif v.verdict == "resumed":
        ep = open_stalls.pop(v.rank, None)
        if ep is not None:
            at = v.step
            if at is not None and ep["step"] is not None and at <= ep["step"]:
                # "heard from again" names the rank's newest step, which the episode may hold
                # already (its steps sent before the verdict, taken after it): it was stuck in
                # the one after, as the hub says of a stalled rank's resumption.
                at = ep["step"] + 1
            ep["until"] = "resumed" if at is None else f"resumed at step {at}"
    elif v.verdict == "not_sharding":
        not_sharding[v.rank] = v.message
    elif v.verdict == "sharding_ok":
        not_sharding.pop(v.rank, None)
    elif v.verdict == "exited" and v.rank not in exits:
        exits[v.rank] = {"rank": v.rank, "code": v.code, "step": v.step, "message": v.message}


MAX_LOSS_TURNS = 256
"""Times a rank's loss stopped being finite that a report lists; past them, counted (a loss that
spikes to inf and back every few steps for a week)."""


def _by_step(warnings: list[dict]) -> list[dict]:
    """``warnings`` with those that say a step in its order (stable), in the places those held;
    the entry that counts the rest (no message) last."""
    # (by torchrun's attempt, then step: after a restart from a checkpoint, attempt 1's warning at
    # step 118 read before attempt 0's at step 120, review 312; the attempt not kept in the report)
    warnings = [{k: v for k, v in w.items() if k != "attempt"} | {"_at": w.get("attempt") or 0} for w in warnings]
    rest = [w for w in warnings if not w["message"]]
    kept = [w for w in warnings if w["message"]]
    stepped = iter(sorted((w for w in kept if w.get("step") is not None), key=lambda w: (w["_at"], w["step"])))
    out = [next(stepped) if w.get("step") is not None else w for w in kept] + rest
    for w in out:
        del w["_at"]
    return out


def _loss_turn_said(msg: schema.Event) -> bool:
    """Whether ``msg`` is a rank's warning that its loss stopped being finite or is finite again."""
    return msg.name == "warning" and msg.rank >= 0 and (LOSS_NOT_FINITE.match(msg.message) is not None
                                                         or LOSS_FINITE_AGAIN.match(msg.message) is not None)


_NOT_FINITE_FROM = re.compile(r"\(not finite from step (\d+)\)")
"""In a rank's warning that its loss is finite again: the step it stopped being finite."""


def _fold_loss_turns(said: list[dict]) -> list[dict]:
    """The warning entries of ranks' loss turns (``said``, by text as :func:`_fold_event` keeps
    them), a set of ranks' loss that stopped being finite and was finite again, alike (one value),
    LOSS_SPIKES_GROUPED times or more folded into the first's entry with ``loss_turns``: a script
    that skips each inf loss's update listed 40 warnings, two each time, where the report's loss
    line says them in one piece. A single divergence, a spike or two, and a turn without its
    other half (ranks finite again at different steps) stay as they are."""
    turned: dict[tuple, tuple[dict, str]] = {}
    again: dict[tuple, tuple[dict, int]] = {}
    for w in said:
        ranks = tuple(sorted(w["ranks"]))
        if (bad := LOSS_NOT_FINITE.match(w["message"])) is not None:
            turned[(ranks, int(bad["step"]))] = (w, bad["value"])
        elif (ok := LOSS_FINITE_AGAIN.match(w["message"])) and (since := _NOT_FINITE_FROM.search(w["message"])):
            again[(ranks, int(since[1]))] = (w, int(ok["step"]))
    spikes: dict[tuple, list[tuple[dict, dict, int]]] = {}
    for (ranks, step), (w, value) in turned.items():
        if (ranks, step) in again:
            w_again, at = again[(ranks, step)]
            spikes.setdefault((ranks, value), []).append((w, w_again, at))
    folded: set[int] = set()
    out = []
    for (ranks, value), turns in spikes.items():
        if len(turns) < LOSS_SPIKES_GROUPED:
            continue
        turns.sort(key=lambda t: (t[0]["attempt"], t[0]["step"] or 0))
        out.append(turns[0][0] | {"loss_turns": {"value": value, "turns": [[t[0]["step"], t[2]] for t in turns]}})
        folded.update(id(w) for t in turns for w in t[:2])
    return out + [w for w in said if id(w) not in folded]


def _fold_event(msg: schema.Event, state: RunState, saves: dict, resumes: dict, warnings: dict,
                outside_s: float | None = None, cap: int | None = None) -> None:  # fmt: skip
    """Checkpoint saves by step, resumes by (torchrun attempt, step) and warnings by text, each
    with the ranks that said it, ``cap`` texts at most (MAX_WARNINGS; the rest counted under
    one); a save or resume takes as long as its slowest rank (a save's files, see
    :func:`_fold_save`; ``outside_s``: of a save's time, what was outside the rank's steps)."""
    r = state.ranks.get(msg.rank)
    if msg.name == "warning":
        hub = msg.rank < 0
        key = ("hub: " if hub else "") + msg.message  # (a rank's text and the hub's apart)
        if key not in warnings and len(warnings) >= (MAX_WARNINGS if cap is None else cap):
            key = ""  # the rest are counted under one entry
        entry = warnings.get(key)
        if entry is None:
            entry = warnings[key] = {"message": msg.message if key else "", "step": msg.step, "ranks": set(),
                                     "attempt": r.restarts if r is not None else 0}  # (see _by_step)
            if hub and key:
                entry["hub"] = True
        if not hub:
            entry["ranks"].add(msg.rank)
        return
    if msg.name == "checkpoint":
        if msg.step is None:
            return
        # (no path: a save to a file object with no name)
        entry = saves.setdefault(msg.step, {"step": msg.step, "path": msg.message or None, "ranks": 0, "duration_s": None,
                                            "_ranks": set(), "_paths": set(), "_files": {}, "_sums": {}, "_outside_s": 0.0})
    else:
        attempt = r.restarts if r is not None else 0
        entry = resumes.setdefault((attempt, msg.step or 0), {
            "step": msg.step, "message": msg.message, "restart": attempt, "ranks": 0, "duration_s": None,
            "_ranks": set()})
    entry["_ranks"].add(msg.rank)  # a step saved again after a resume: the same ranks
    entry["ranks"] = len(entry["_ranks"])
    if msg.name == "checkpoint":
        _fold_save(entry, msg, outside_s)
    elif msg.duration_s is not None:
        entry["duration_s"] = max(entry["duration_s"] or 0.0, msg.duration_s)


def _fold_save(entry: dict, msg: schema.Event, outside_s: float | None) -> None:
    """One file of the checkpoint ``entry``, as its rank said it (``msg``; ``outside_s``: of its
    time, what was outside the rank's steps). A rank's files at one step are one save, written
    back to back (``torch.save`` of the model's state dict, then of the optimizer's: PyTorch's
    FSDP2 example), so the rank's save took their sum: the longer file's time alone, beside the
    other's path, read as the save's. The same file again is the step saved again (a resume
    from before it), which took the longer of the two, not both; so is a save without a path
    (to a file object: nothing tells its files apart). The checkpoint took as long as its
    slowest rank's save; ``files`` counts its paths, of every rank, where there are several."""
    path = msg.message or ""
    if path:
        entry["_paths"].add(path)
        folder = os.path.dirname(path)
        if len(entry["_paths"]) == 1:
            entry["_folder"] = folder
        else:
            entry["files"] = len(entry["_paths"])
            if folder != entry["_folder"]:
                entry["_folder"] = ""
    if msg.duration_s is None:
        return
    files = entry["_files"].setdefault(msg.rank, {})
    took, outside = files.get(path, (0.0, 0.0))
    now = files[path] = (max(took, msg.duration_s), max(outside, msg.duration_s if outside_s is None else outside_s))
    # The rank's sums kept up as each file comes (summed again from its files at each event, a
    # checkpoint of 1,024 ranks' shards would take a million additions).
    sums = entry["_sums"].setdefault(msg.rank, [0.0, 0.0])
    sums[0] += now[0] - took
    sums[1] += now[1] - outside
    entry["duration_s"] = max(entry["duration_s"] or 0.0, sums[0])
    entry["_outside_s"] = max(entry["_outside_s"], sums[1])


def _name_folders(saves: list[dict]) -> None:
    """A checkpoint of several files in a folder of its own is named by the folder, ``path``
    ending in a separator: a Hugging Face save read "the last in .../checkpoint-30/rng_state_1.pth
    and 2 more files", rank 1's file heard first. Its own: named by its step (``checkpoint-30``),
    or the one folder of several saves that none of the others wrote into (PyTorch's FSDP2
    example's, named by the time). Files in a folder every save writes into
    (``/ckpt/step-6-rank0.pt``) keep the first file's name, which tells the checkpoint."""
    folders = Counter(c.get("_folder") for c in saves if c.get("_folder"))
    for c in saves:
        folder = c.get("_folder")
        if not (c.get("files") and folder):
            continue
        if named_by_step(folder, c["step"]) or (len(saves) > 1 and folders[folder] == 1):
            c["path"] = folder + os.sep


def _saving(saves: list[dict]) -> dict:
    """The run's time in checkpoint saves (``saving_s``) and of it outside the steps
    (``saving_outside_steps_s``; less where a save ran beside them, asynchronous), None where
    no save said its time: the wall time the run spent, each checkpoint once, at its slowest
    rank's save. Not every rank's summed: rank 0 saving alone costs the others its time too,
    waiting for it in their next collective, and ranks each writing their shard at once (DCP)
    cost the run their slowest's time, not theirs added up (two ranks' 0.46 s: 0.46 s, not 0.92). A
    step saved again after a resume counts once, as the checkpoints listed have it."""
    timed = [c for c in saves if c["duration_s"] is not None]
    if not timed:
        return {"saving_s": None, "saving_outside_steps_s": None}
    after = [c["_after_s"] for c in saves if c.get("_after_s")]
    return {"saving_s": sum(c["duration_s"] for c in timed), "saving_outside_steps_s": sum(c["_outside_s"] for c in timed),
            # (the time a rank paused right after its save, in its own code: an upload; see _after_saves)
            **({"after_saves_s": sum(after), "after_saves": len(after)} if after else {})}  # fmt: skip


def _public(entry: dict) -> dict:
    """``entry`` without its working keys (those starting with ``_``)."""
    return {k: v for k, v in entry.items() if not k.startswith("_")}


STREAK_GAP_STEPS = 2
"""Steps in a row that do not hold a straggler's streak up (another rank arrived last, or it by
a hair) that end it, walking back from the verdict (:func:`_charge`)."""

MAX_WARNINGS = 50
"""Distinct warning texts a report lists; any more are counted under one entry with text ''."""

_CLOCK_WARNING = re.compile(r"rank \d+'s clock .*the hub's: one of the two is wrong")
_SAID_ELSEWHERE = ("cannot write --prometheus-textfile", "the launcher's supervisor (pid ", "cannot write the run registry")
_KEYS_WARNING = ("key(s) it admitted before", "a viewer's key watches and never publishes")


def hub_warning_kept(ev: schema.Event) -> bool:
    """Whether a report lists a warning the hub made (rank -1, seq -1). The hub warns of:

    - two jobs sending under the run's id (:data:`SHARED_RUN_ID`), ranks of another world size
      than its ``--world-size`` (their hellos refused: hosts and strategy unknown), records of
      other runs refused (another job's, or this job's under a mistyped run id), the log
      dropping lines while its disk was full, or deleted or moved and written again, and why
      an unsupervised hub stopped recording: each bears on what the log holds, and the report
      says it (it dropped every one of them: two jobs' figures added up, with no word why);
    - a rank's clock off the hub's: not listed, the report judges the clocks from the log
      itself (its ``clocks`` line);
    - the end of a log whose disk was full as the hub stopped: not listed, its ``log ends
      early`` line says it (:func:`_disk_full_end`);
    - the hub's Prometheus textfile it could not write, the run registry it could not write, its
      admitted keys' folders, and the launcher's supervisor gone: not listed, the hub's own running, nothing of the run's
      figures (the hub's terminal and the viewers had them)."""
    text = ev.message
    if _CLOCK_WARNING.match(text) or _disk_full_end(ev) is not None:
        return False
    return not text.startswith(_SAID_ELSEWHERE) and not any(k in text for k in _KEYS_WARNING)


def _charge(ep: dict, arrivals: StepWaits, last_step: int, after: int = 0, peers: frozenset[int] | set[int] = frozenset()) -> None:
    """Measure what a straggler cost: from the first step of the streak in which it arrived
    last (before the verdict, which needs whole windows) to the streak's last step before its
    clearing (``until_step``) or to the end, charging each step it arrived last at with the
    others' wait.

    The streak is walked back from the verdict's step. A step holds it up where the rank
    arrived last by at least half the verdict's own wait a step (``cost_s``; any lead where
    the verdict has none); one step that does not (another rank last, or this one by a hair:
    noise) is passed over, two in a row end it. The streak begins at the earliest step that
    held it up. (A single noisy step ended it: a rank last at every step from 1 but 19 read
    "straggling from step 20", its cost 1.11 s of 1.51.) It begins after ``after``, the
    rank's previous episode's clearing: passing over a noisy step, the walk went on into that
    episode, whose steps were charged twice (108 of 80 steps). ``peers``: the ranks found
    straggling with it, not among the others it is measured against (StepWaits)."""
    rank, found = ep["rank"], ep["step"]
    if found is None:
        ep.update(cost_total_s=0.0, steps_charged=0, until_step=None)
        return
    least = ep["cost_s"] / 2 if ep["cost_s"] else 0.0
    since = step = found
    missed = 0
    while missed < STREAK_GAP_STEPS and step - 1 > after:
        step -= 1
        # (a step charged to one of its peers held the others up as much: two stragglers alike
        # slow, each the slowest at every other step, began "from step 38" of 20)
        if any((g := arrivals.gap(step, q, peers - {q} | {rank})) is not None and g >= least for q in (rank, *peers)):
            since, missed = step, 0
        else:
            missed += 1
    ep["since_step"] = since
    until, ep["until_step"] = last_step, None
    if ep["cleared_step"] is not None:
        # Its streak's last step: the hub clears a verdict only once whole windows have gone
        # by without it, and the steps between had the rank last by a hair or not at all. An
        # episode of rank 1 that ended at step 63 read "cleared at step 89" beside rank 0's,
        # "straggling from step 64" (every rank's loader alike slow: the data-bound note).
        until = ep["until_step"] = next(
            (s for s in range(ep["cleared_step"], since, -1) if (g := arrivals.gap(s, rank, peers)) is not None and g >= least), since)
    # Each step it held them up is charged by one measure of the wait, the one whose total over
    # those steps is the larger (its self-time lead, or the others' comm beyond its own: see
    # stragglers.straggler_cost_s), where that step has it. The larger of the two each step
    # charged each step's noise upward: a rank sleeping 30 ms a step in its data loading, each
    # measure 30.6-31.4 ms a step over the run, read "the others waited 35.1 ms a step".
    held: list[tuple[int, float, float | None, float | None]] = []  # (step, its gap, by self time, by comm)
    for s in range(since, until + 1):
        g = arrivals.gap(s, rank, peers)
        if g is not None:
            held.append((s, g, *arrivals.measures(s, rank, peers)))
    by_comm = sum(c for _, _, _, c in held if c is not None) > sum(m for _, _, m, _ in held if m is not None)
    charged = ep["_charged"] = []  # (each step's wait, for the timeline's parts)
    for s, g, mine, comm in held:
        picked = comm if by_comm else mine
        charged.append((s, picked if picked is not None else g))
    ep["cost_total_s"] = sum(g for _, g in charged)
    ep["steps_charged"] = len(charged)


DATA_BOUND_SHARE = 0.25
"""The share of its steps every rank must have spent loading data for data-loading verdicts that
moved between ranks to read as a data-bound job."""

DATA_BOUND_ALIKE = 2 / 3
"""...and the least data time of a rank against the most: a rank whose loader is slower than the
others' spends more (a genuine data straggler's peers read 0.01-0.2 of it, a data-bound job's
0.8-0.9)."""


def _at_epoch_starts(stalls: list[dict], epoch_starts: dict[int, int]) -> None:
    """Mark (``epoch_start``) the stalls in data loading that ended as an epoch's first step came,
    after the first epoch: a DataLoader's workers started again for each epoch (not persistent),
    slow to start (a worker_init_fn's set-up, a dataset opened anew), read as hangs among the
    real ones (review 277: "ranks 0-1 stalled in data after step 100 for 7.1 s" at each epoch)."""
    later = set(epoch_starts.values()) - {min(epoch_starts.values(), default=0)}
    for s in stalls:
        if s["kind"] == "stalled" and s["phase"] == "data" and s["step"] is not None and s["step"] + 1 in later:
            if (s["until"] or "").startswith("resumed"):
                s["epoch_start"] = True


INPUT_BOUND_SHARE = DATA_BOUND_SHARE
"""The share of its step time every rank spends loading data for the job to read as
input-bound (the report's ``data loading`` line)."""


HOLD_KEPT = 10_000
"""Steps of long own work the report keeps the phases of (a straggler of 1 s steps: each)."""


def _waited_after(eval_at: dict[int, float], arrivals: StepWaits) -> float:
    """Seconds the ranks waited at their first collective after the evaluations (``eval_at``:
    step -> the longest evaluation after it), each at most the evaluation's own: the most comm
    time of the step after it beyond the median of the steps after none (a rank that evaluated
    alone held the others that long; a job whose collectives take 0.2 s every step, every rank
    evaluating together, read "the others waited 0.6 s" of that usual time, review 339); where
    no rank timed its collectives there, the evaluation's (the others' wait is in their step)."""
    after = {step + 1 for step in eval_at}
    usual = [e[1] for step, e in arrivals.ends.items() if step not in after and e[1] != -math.inf]
    usual_s = statistics.median(usual) if usual else 0.0
    waited = 0.0
    for step, took in eval_at.items():
        ends = arrivals.ends.get(step + 1)
        if ends is not None:  # (none after the job's last step)
            waited += took if ends[1] == -math.inf else min(took, max(0.0, ends[1] - usual_s))
    return waited


def _lead_less_busy(arrivals: StepWaits, step: int, rank: int, busy: dict[int, float] | None) -> float | None:
    """The others' wait for ``rank`` at ``step`` (StepWaits.gap), less its own save's or
    evaluation's time right before (``busy``: rank -> seconds, of that step and the one before)
    beyond the longest of the others': that time is in the others' wait in their collectives
    (their comm), not in its steps, and its own lines say it (a rank evaluating alone is no hold
    of its own code, nor are all ranks evaluating together, review 334). Its lead in its own
    step's work stays whole: a save then 1.2 s of its own code read "held the others 14.23 s"
    of an evaluation's 11.7 s and a save's 1.8 s (review 340), where the live verdict said 0.74 s."""
    lead = arrivals.gap(step, rank)
    if lead is None or not busy:
        return lead
    own = max(0.0, busy.get(rank, 0.0) - max((x for q, x in busy.items() if q != rank), default=0.0))
    if not own:
        return lead
    by_self, by_comm = arrivals.measures(step, rank)
    parts = [x for x in (by_self, None if by_comm is None else by_comm - own) if x is not None]
    return max(parts) if parts else lead - own


def _busy(busy_at: dict[tuple[int, int], float], ev: schema.Event) -> None:
    """Add a rank's own save's or evaluation's seconds to ``busy_at`` (see build_report)."""
    if ev.rank >= 0 and ev.step is not None and len(busy_at) < HOLD_KEPT:
        busy_at[(ev.rank, ev.step)] = busy_at.get((ev.rank, ev.step), 0.0) + (ev.duration_s or 0.0)


def _holds(arrivals: StepWaits, long_steps: dict, median_step: float | None, train_s: float, stragglers: list[dict],
           warmup: set[tuple[int, int]] = frozenset(), busy_at: dict[tuple[int, int], float] | None = None) -> list[dict]:
    """Ranks that now and then held the others far past a step: at a step, a lead over the
    others of HOLD_MIN_S and HOLD_FACTOR median steps or more (StepWaits.gap, as a straggler's
    cost), outside that rank's straggler episodes and its processes' first steps (``warmup``:
    (rank, step); one rank's torch.compile, or its DataLoader workers' first batch, slower than
    the other's read "rank 1 held the others once, at step 1, 2.07 s ... (17.3% of training)",
    review 320). By rank: {rank, count, steps (the first 20),
    every (steps between them, where alike), each_s (their median lead), total_s, share_of_train,
    where (its data phase's: "own work" out of its DataLoader, "dataloader", "data" where no
    DataLoader was timed; else "step", the step's own work; "after": past its step's first
    collective, every one found by the others' wait there), epoch_starts (how many of the steps
    began an epoch of the rank: its DataLoader's workers started anew; only where some did)}."""
    bar = max(HOLD_MIN_S, HOLD_FACTOR * (median_step or 0.0))
    seen: set[int] = set()
    """Steps a hold by self time was found at: one rank a step."""
    episodes: dict[int, list[tuple[int, float]]] = {}
    for ep in stragglers:
        episodes.setdefault(ep["rank"], []).append((ep["since_step"], ep["cleared_step"] if ep["cleared_step"] is not None else math.inf))
    by_rank: dict[int, list[tuple[int, float, float | None, float | None]]] = {}
    at_starts: Counter[int] = Counter()
    busy_by_step: dict[int, dict[int, float]] = {}
    for (rank, step), took in (busy_at or {}).items():
        for at in (step, step + 1):
            ranks = busy_by_step.setdefault(at, {})
            ranks[rank] = ranks.get(rank, 0.0) + took
    for (rank, step), (data_s, loader_s, starts_epoch) in sorted(long_steps.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if (rank, step) in warmup or any(lo <= step <= hi for lo, hi in episodes.get(rank, ())):
            continue
        lead = _lead_less_busy(arrivals, step, rank, busy_by_step.get(step))
        if lead is not None and lead >= bar:
            by_rank.setdefault(rank, []).append((step, lead, data_s, loader_s))
            at_starts[rank] += starts_epoch
            seen.add(step)
    # A rank that held the others past its step's first collective (between its backward and its
    # optimizer step) has no lead in self time: the others' wait in their comm is it (the steps
    # some rank waited HOLD_MIN_S or more there, of every step the arrivals know: a set capped
    # at HOLD_KEPT steps found none past step 10,000 of a job whose collectives take that long,
    # review 334; review 333, said nowhere).
    past: set[tuple[int, int]] = set()
    for step in sorted(s for s, (_, most_comm) in arrivals.ends.items() if most_comm >= HOLD_MIN_S and s not in seen):
        rank = arrivals.least_comm(step)
        if rank is None or (rank, step) in warmup or any(lo <= step <= hi for lo, hi in episodes.get(rank, ())):
            continue
        lead = _lead_less_busy(arrivals, step, rank, busy_by_step.get(step))
        if lead is not None and lead >= bar:
            by_rank.setdefault(rank, []).append((step, lead, None, None))
            past.add((rank, step))
    out = []
    for rank, held in sorted(by_rank.items()):
        held.sort(key=lambda h: h[0])
        steps = [s for s, *_ in held]
        gaps = {b - a for a, b in zip(steps, steps[1:])}
        leads = sorted(g for _, g, _, _ in held)
        data = [(d or 0.0, ld) for _, g, d, ld in held]
        in_data = sum(d for d, _ in data) >= sum(leads) / 2
        if all((rank, st) in past for st in steps):
            where = "after"
        elif not in_data:
            where = "step"
        elif all(ld is None for _, ld in data):
            where = "data"
        else:
            where = "dataloader" if sum(ld or 0.0 for _, ld in data) >= sum(d for d, _ in data) / 2 else "own work"
        total = sum(leads)
        out.append({"rank": rank, "count": len(held), "steps": steps[:20], "every": gaps.pop() if len(gaps) == 1 else None,
                    "each_s": leads[len(leads) // 2], "total_s": total, "share_of_train": total / train_s if train_s > 0 else None,
                    "where": where, **({"epoch_starts": at_starts[rank]} if at_starts[rank] else {}),
                    "_held": held})  # fmt: skip
    return out


def _after_saves(saves: dict[int, dict], stalls: list[dict], holds: list[dict], loader_timed: set[int] = frozenset()) -> None:
    """Pauses a rank made right after its own checkpoint save: a stall it came out of (or
    finished in) after the step it saved at, or a hold at the step after it. Their time went to
    the checkpoint, in the script's own code after the save's file was written (an upload to
    object storage, a copy, a wait for a slow filesystem's sync), which the save's own time
    leaves out: "checkpoints 4 saved, 0.03 s in all" of a run whose rank 0 spent 6 s after each
    save, beside three "held up" and six stall lines that named no save (review 327). Only a
    pause in the rank's own code between steps: not one in its DataLoader (an epoch's first
    batch after an epoch end's save, its workers starting anew), nor in its step's work
    (``loader_timed``: the ranks whose steps timed their DataLoader, whose stall "in data" is
    in it; see analysis.stall_phase).
    Marks each stall with ``after_checkpoint`` ({step, after_save_s}) and ``held_step`` (the
    step of a hold of its rank it is: said once, by the hold); each hold with
    ``after_checkpoints`` ({count, steps (the first 20), after_save_s}) where some of its steps
    follow a save of its rank; each checkpoint with ``_after_s``: the longest such pause of a
    rank after it (the others waited for it: the checkpoint's time, as its slowest rank's save)."""

    def saved(rank: int, step: int | None) -> float | None:
        """The rank's save's seconds at ``step`` (None: it saved nothing there)."""
        c = saves.get(step) if step is not None else None
        if c is None or rank not in c["_ranks"]:
            return None
        sums = c["_sums"].get(rank)
        return sums[0] if sums else 0.0

    held: dict[tuple[int, int], float] = {}
    own: set[tuple[int, int]] = set()  # (the holds whose lead was in the rank's own code between steps)
    for h in holds:
        for s, lead, data_s, loader_s in h.pop("_held", ()):
            held[(h["rank"], s)] = lead
            if (data_s or 0.0) - (loader_s or 0.0) >= lead / 2:
                own.add((h["rank"], s))
    for h in holds:
        after = [(s, lead) for (rank, s), lead in sorted(held.items())
                 if rank == h["rank"] and (rank, s) in own and saved(rank, s - 1) is not None]  # fmt: skip
        for s, lead in after:
            c = saves[s - 1]
            c["_after_s"] = max(c.get("_after_s", 0.0), lead)
        if after:
            h["after_checkpoints"] = {"count": len(after), "steps": [s - 1 for s, _ in after][:20],
                                      "after_save_s": sum(lead for _, lead in after)}  # fmt: skip
    for ep in stalls:
        until = ep["until"] or ""
        if ep["step"] is None or not until.startswith(("resumed", "finished")):
            continue
        if until == f"resumed at step {ep['step'] + 1}":
            # (the hold at the step it resumed at; of a pause past that step's first collective,
            # "stalled in optimizer after step 100", the others' wait at step 102's)
            at = next((ep["step"] + k for k in (1, 2) if (ep["rank"], ep["step"] + k) in held), None)
            if at is not None:
                ep["held_step"] = at
        took = saved(ep["rank"], ep["step"])
        in_own_code = ep["phase"] == "data" and (BETWEEN_STEPS_WORDS in (ep["message"] or "") or ep["rank"] not in loader_timed)
        if took is None or ep["kind"] != "stalled" or not in_own_code or ep.get("seconds") is None:
            continue
        after = max(0.0, ep["seconds"] - took)
        ep["after_checkpoint"] = {"step": ep["step"], "after_save_s": round(after, 3)}
        c = saves[ep["step"]]
        c["_after_s"] = max(c.get("_after_s", 0.0), after)
    for c in saves.values():
        if c.get("_after_s"):
            c["after_save_s"] = round(c["_after_s"], 3)


EPOCH_STARTS_SAID = 0.5
"""The share of the ranks' DataLoader time on their epochs' first steps from which the report
says it is mostly the workers starting anew each epoch (persistent_workers=True keeps them)."""


def _warmup_step(process_first: dict[tuple, tuple[int, float]], median_step: float | None) -> dict:
    """``{"warmup_step": {step_s, processes, ranks}}`` where a process's first step (``process_first``,
    see build_report) took HOLD_MIN_S and HOLD_FACTOR median steps or more; else {}."""
    slowest = max((step_s for _, step_s in process_first.values()), default=0.0)
    if slowest < max(HOLD_MIN_S, HOLD_FACTOR * (median_step or 0.0)):
        return {}
    ranks = {p[0] for p in process_first}
    return {"warmup_step": {"step_s": slowest, "processes": len(process_first), "ranks": len(ranks)}}


def _data_loading(data: dict[int, tuple[float, float]], loader: dict[int, float] | None = None,
                  at_starts: dict[int, tuple[float, int]] | None = None, *, no_dataloader: bool = False) -> dict | None:
    """Each rank's share of its step time spent loading data (``data``: rank -> its data and
    step seconds): {share (every rank's together), share_min, share_max, input_bound (every rank
    at least INPUT_BOUND_SHARE: the ranks wait for their data, not one slower loader, which is a
    straggler), loader_share (of it, in the ranks' DataLoaders: ``loader``, rank -> seconds, where
    every rank's zero-code hooks timed it; else None), between_steps (the data time is mostly the
    script's own work between steps, not its DataLoader)}; None where no rank measured its data
    loading. A job whose steps were two thirds data loading said so nowhere (review 277):
    PyTorch's profiler says it past 5%. The zero-code hooks' data time is the whole gap between
    steps: a script that slept 10 ms after its optimizer's step over a loader of microseconds
    read "input-bound ... more DataLoader workers would speed it up" (review 308).

    ``at_starts`` (rank -> its DataLoader seconds on its epochs' first steps, and how many):
    where every rank timed 2 or more epoch starts and EPOCH_STARTS_SAID or more of the ranks'
    DataLoader time fell on them, ``epoch_starts``: {share (of the step time, as loader_share),
    of_loader, epochs (the fewest a rank started)}: its workers started anew each epoch (no
    persistent_workers), which more workers make longer; 4 epochs of one worker, 0.2-0.7 s to
    start against 1 ms a batch, read "35% in the DataLoader (more DataLoader workers, num_workers,
    would speed that up)"."""
    measured = [(r, d, s) for r, (d, s) in data.items() if s > 0]
    if not any(d > 0 for _, d, _ in measured):
        return None
    shares = [d / s for _, d, s in measured]
    total = sum(s for _, _, s in measured)
    share = sum(d for _, d, _ in measured) / total
    out = {"share": share, "share_min": min(shares), "share_max": max(shares), "input_bound": min(shares) >= INPUT_BOUND_SHARE,
           "loader_share": None, "between_steps": False}  # fmt: skip
    if loader is not None and all(r in loader for r, _, _ in measured):
        in_loader = [min(loader[r], d) / s for r, d, s in measured]
        out["loader_share"] = sum(min(loader[r], d) for r, d, _ in measured) / total
        if out["input_bound"] and min(in_loader) < INPUT_BOUND_SHARE:
            # (a rank whose loader waits less than the bar: its data time is its own work)
            out["input_bound"] = False
        # Mostly not in the DataLoader, whatever the ranks' shares: one rank's augmentation on
        # its main thread read "data loading 33% ..., 1% in the DataLoader" (review 314).
        out["between_steps"] = out["loader_share"] < share / 2
        starts = at_starts or {}
        timed = sum(loader[r] for r, _, _ in measured)
        if timed > 0 and all(starts.get(r, (0.0, 0))[1] >= 2 for r, _, _ in measured):
            of_loader = min(1.0, sum(starts[r][0] for r, _, _ in measured) / timed)
            if of_loader >= EPOCH_STARTS_SAID:
                out["epoch_starts"] = {"share": out["loader_share"] * of_loader, "of_loader": of_loader,
                                       "epochs": min(starts[r][1] for r, _, _ in measured)}
    elif no_dataloader:
        # No torch DataLoader gave a step its batch (the zero-code hooks time one where there is):
        # the time is the script's own between steps, its batches made there among it; it read
        # "input-bound ... more DataLoader workers would speed it up" of a script with none and a
        # sleep after its optimizer's step (review 313).
        out["input_bound"], out["between_steps"], out["no_dataloader"] = False, True, True
    return out


def _data_bound(stragglers: list[dict], data: dict[int, tuple[float, float]], epoch_starts: dict[int, int]) -> dict | None:
    """Where the data-loading verdict moved from one rank to another (one cleared, the next's
    streak begun by then or within STREAK_GAP_STEPS of its end) and every rank (``data``: rank
    -> its data and step seconds) spent alike time, a good share of its steps, loading: the
    ranks' loaders are likely equally slow and whichever lags names itself the straggler (two
    DataLoader workers a rank, their phase drawn anew each epoch: rank 1 named for steps 3-63,
    rank 0 from step 64, as epoch 1 began). {moves: [{from_rank, to_rank, step, epoch (the
    epoch begun there, or None)}], data_share_min, data_share_max}; None where it is not so."""
    episodes = sorted((ep for ep in stragglers if ep["kind"] == "data" and ep["step"] is not None), key=lambda ep: ep["step"])
    moves = []
    for a, b in zip(episodes, episodes[1:]):
        if a["rank"] == b["rank"] or a["cleared_step"] is None or a["until_step"] is None:
            continue
        if b["since_step"] > a["until_step"] + STREAK_GAP_STEPS:
            continue  # a while with neither: two slow spells, not one that moved
        lo, hi = min(a["until_step"], b["since_step"]) - STREAK_GAP_STEPS, max(a["until_step"], b["since_step"]) + STREAK_GAP_STEPS
        began = [e for e, s in epoch_starts.items() if lo <= s <= hi and s > min(epoch_starts.values())]
        moves.append({"from_rank": a["rank"], "to_rank": b["rank"], "step": b["since_step"], "epoch": min(began) if began else None})
    # The rank named changing from one spell to the next, a while between them or not: two
    # workers a rank on a busy host named the ranks by turns for 12 spells, with quiet between
    # most, and the line said the verdict "moved 2 times".
    named = [ep["rank"] for ep in episodes]
    turns = sum(1 for a, b in zip(named, named[1:]) if a != b)
    shares = [d / s for d, s in data.values() if s > 0]
    if (not moves and turns < 2) or len(shares) < len(data) or len(data) < 2:
        return None
    least, most = min(d for d, _ in data.values()), max(d for d, _ in data.values())
    if min(shares) < DATA_BOUND_SHARE or least < DATA_BOUND_ALIKE * most:
        return None
    out = {"moves": moves, "data_share_min": min(shares), "data_share_max": max(shares)}
    if turns > len(moves):  # (only where so: {turns, spells, ranks})
        out.update(turns=turns, spells=len(episodes), ranks=sorted(set(named)))
    return out


def _role(rank: int, failure: dict | None) -> str | None:
    if failure is None:
        return None
    if any(w["rank"] == rank for w in failure.get("waited_for") or ()):
        return "hung"  # the rank the one that failed waited for
    if any(x["rank"] == rank for x in failure.get("stopped_first") or ()):
        return "stopped_first"  # the stop that broke the others' collectives
    if rank == failure["rank"]:
        # (a stop before it broke its collectives; or its error says only that a peer went and
        # ranks left no word: the likely cause is among them, the failure line says: "rank 0
        # exited with code 1 - the root cause" beside it read as the opposite)
        if failure.get("stopped_first") or (failure.get("unrecorded") and not failure.get("left_early")):
            return "victim"
        if failure.get("collectives"):
            return "mismatched"  # (the first to time out in a hang of different collectives: no cause of its own)
        return "peer_left" if failure.get("left_early") else "waited" if failure.get("waited_for") else "cause"
    if rank in (failure.get("alike") or ()):
        # Ranks that all failed alike (the same error at the same step), which the failure
        # line names together ("ranks 0-1 exited with code 1: ..."): each is the cause, as the
        # first of them is (the others read "exited with code 1" with no role beside it).
        return "cause"
    if rank in failure["victims"]:
        return "victim"
    if rank in failure["stopped"]:
        return "stopped"
    return None


def _devices(state: RunState) -> list[dict]:
    """Ranks grouped by host and device kind: [{host, device, device_name, ranks}]."""
    groups: dict[tuple[str, str, str], int] = {}
    for rank in sorted(state.ranks):
        h = state.ranks[rank].hello
        if h is None:
            continue
        key = (h.host, h.device.split(":")[0], h.device_name)
        groups[key] = groups.get(key, 0) + 1
    return [{"host": k[0], "device": k[1], "device_name": k[2], "ranks": n} for k, n in groups.items()]


MODEL_STATE_WORDS = ", counting model state only (parameters, gradients, optimizer state; not the processes' memory)"
"""What the memory verdict's ratio counts: an FSDP run on CPU whose model state was halved used
more process RSS than DDP's, and "ranks hold 1.00x what ddp x2 should" read of a rank whose RSS
had tripled in a leak (review 340)."""


def _memory(ranks: list[dict], expected, basis: str, params_count: int, strategy: str, world: int, peak_kind: str, not_sharding: dict,
            children: dict[int, tuple[int, int]] | None = None) -> dict:  # fmt: skip
    def span(key: str) -> tuple[int | None, int | None]:
        vals = [r[key] for r in ranks if r[key] is not None]
        return (min(vals), max(vals)) if vals else (None, None)

    state_min, state_max = span("state_bytes")
    held_min, held_max = span("held_bytes")
    _, full = span("full_bytes")
    _, buckets = span("buckets_bytes")
    _, peak = span("peak_bytes")
    unsharded = params_count * BYTES_PER_PARAM if params_count else None
    vs = state_max / expected if state_max is not None and expected else None
    if vs is None:
        verdict = "no memory figures in this log"
    elif vs > NOT_SHARDING_FACTOR and is_sharded(strategy):
        verdict = f"ranks hold {vs:.1f}x what {strategy} x{world} should ({basis}){MODEL_STATE_WORDS}: {not_sharding_hint(strategy)}"
    else:
        verdict = f"ranks hold {vs:.2f}x what {strategy} x{world} should ({basis}){MODEL_STATE_WORDS}"
    return {
        "bytes_per_param": BYTES_PER_PARAM,
        "expected_bytes_per_rank": expected,
        "expected_basis": basis,
        "unsharded_bytes_per_rank": unsharded,
        "measured_full_bytes": full,
        "state_bytes_min": state_min,
        "state_bytes_max": state_max,
        "held_bytes_min": held_min,
        "held_bytes_max": held_max,
        "buckets_bytes_max": buckets,
        "vs_expected": vs,
        "saving_vs_unsharded": 1 - state_max / full if state_max is not None and full else None,
        "peak_bytes_max": peak,
        "peak_kind": peak_kind or None,
        "not_sharding": sorted(not_sharding),
        "verdict": verdict,
        # The most memory a rank's child processes (its DataLoader workers) held of their own (USS),
        # and how many they were: not in its RSS (only where a rank had any).
        **({"children_bytes_max": max(children.values())[0], "children_max": max(children.values())[1]} if children else {}),
    }


__all__ = ["PHASES", "build_report", "md_table", "render_markdown", "render_text"]
