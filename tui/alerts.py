"""The conditions that want a person's attention now, most severe first.

Alerts are read from the ranks' current verdicts (the hub's conclusions), not from the event
log: a straggler that was cleared, or a stalled rank that resumed, is no longer an alert. The
exits and errors are read for one thing only: which rank is the cause when a job dies and
the others failed after it or were stopped by torchrun (the root cause, as the report and the
launcher's last line name it), and the order in which the rest exited.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from pardash.telemetry import schema
from pardash.telemetry import state as st
from pardash.telemetry.analysis import BETWEEN_STEPS_WORDS, JOINED, collectives_words, different_collectives, whole_hang, hang_causes, stuck_ranks
from pardash.telemetry.causes import cause_of, waited_for
from pardash.telemetry.failures import short_error
from pardash.telemetry.failures import PEER_FAILURE, failure_summary, stop_text
from pardash.telemetry.printer import between_steps_of, job_between_steps
from pardash.telemetry.report_render import SHARED_RUN_ID
from pardash.telemetry.summary import is_sharded, ranks_named, ranks_text, straggler_cause

from .format import fmt_clock, fmt_step_time

SEVERITY = {"jobs_mixed": -1, "exited": 0, "silent": 1, "stalled": 2, "loss": 3, "memory": 3.5, "straggler": 4, "held_up": 4,
            "not_sharding": 5, "stopped": 6, "input_bound": 7}
"""Lower is more severe. ``jobs_mixed`` (two jobs under the run's id, :func:`jobs_mixed_alert`)
reads before all: every figure and alert after it mixes the two jobs."""


@dataclass(frozen=True, slots=True)
class Alert:
    """One rank's condition."""

    kind: str
    """exited | silent | stopped | stalled | loss (not finite) | memory (growing: a leak) | straggler |
    held_up | not_sharding; jobs_mixed and input_bound, of the run (rank -1), and memory of every
    rank alike (rank -1)"""
    rank: int
    text: str
    code: int | None = None
    """Exit code (exited)."""
    first: bool = False
    """The root cause, when several ranks exited and one is (or, stalled, the likely cause)."""
    waiting_for: str = ""
    """Who a stalled rank waits for, a hang's victim ("rank 3", as said in its text); empty
    otherwise. The grid draws it waiting (◇)."""
    step: int | None = None
    """The step a loss alert's ranks' loss stopped being finite at (the first to turn reads
    first); None otherwise."""
    ranks: tuple[int, ...] = ()
    """Every rank an alert says, where it says several alike (``rank`` the first of them: ranks
    whose loss turned alike, one line as the events panel says them); empty: ``rank`` alone."""

    @property
    def severity(self) -> float:
        return SEVERITY[self.kind]


INPUT_BOUND_POINTS = 30
"""A rank's last history points its share of each step between steps is the median of."""
INPUT_BOUND_RANKS = 16
"""Ranks looked at, spread over the job (every rank alike is the case: one slow rank is a
straggler, which its own alert says)."""


def input_bound_alert(state: st.RunState) -> Alert | None:
    """Of a job whose ranks spend half of each step or more between steps (loading data, or the
    script's own work), a few milliseconds a step or more, alike: every rank's data slowed at
    once (shared storage) read nowhere live but in the numbers, the straggler detector rightly
    naming no one (review 328). The rule of the launch's last line (``job_between_steps``),
    over each rank's last INPUT_BOUND_POINTS steps; None while any rank is not running."""
    ranks = list(state.ranks.values())
    if not ranks:
        return None
    found: list[tuple[float, float, int]] = []
    for r in ranks[:: max(1, len(ranks) // INPUT_BOUND_RANKS)]:
        if r.status != st.RUNNING:
            return None
        of = between_steps_of(r, INPUT_BOUND_POINTS)
        if of is None or of[2] < INPUT_BOUND_POINTS // 3:
            return None  # (its first steps: not yet)
        found.append(of)
    if (share := job_between_steps(found)) is None:
        return None
    return Alert("input_bound", -1, f"every rank spends {share * 100:.0f}% of each step between steps (loading data or the script's "
                 "own work, alike: the job is input-bound; `pardash report` tells them apart)")  # fmt: skip


HELD_UP_ALERT_S = 150.0
"""A rank's latest ``held_up`` verdict stands as its alert this long (the ranks' clock): past
the gathered lines' minute apart, so one that goes on holding the others up stays."""


def held_up_alerts(state: st.RunState) -> list[Alert]:
    """The ranks that hold the others up now and then (their ``held_up`` verdicts of the last
    HELD_UP_ALERT_S, the latest's words), still running: pauses that cost a job 70-80% of its
    time left the panel at "no alerts: every rank is healthy", said only in the events (review
    333)."""
    now = state.t_last_rank
    return [Alert("held_up", rank, v.message or f"rank {rank} held the others up") for rank, (v, _) in sorted(state.held_up_last.items())
            if now - state.held_up_at(rank) <= HELD_UP_ALERT_S and (r := state.ranks.get(rank)) is not None and r.status == st.RUNNING]  # fmt: skip


def memory_alerts(state: st.RunState) -> list[Alert]:
    """The ranks whose memory grows step after step (the hub's ``memory_growing`` verdicts not
    cleared since, ``RunState.memory_growing``, see telemetry/memgrowth.py), or every rank alike (one alert, rank -1), in the
    hub's words; of a rank that has ended since, said in the past ("grew ... to its end": a rank
    killed by the OOM killer reads as exited, and its growth is why). A leak of 1.6 MiB a step on
    one rank read "no alerts: every rank is healthy" (review 340)."""
    out = []
    for rank, v in sorted(state.memory_growing.items()):
        r = state.ranks.get(rank)
        text = v.message or f"rank {rank}'s memory grows"
        if r is not None and r.status in (st.EXITED, st.FINISHED):
            text = text.replace(" grows ", " grew ", 1).replace(" (", " to its end (", 1)
        out.append(Alert("memory", rank, text))
    return out


def jobs_mixed_alert(state: st.RunState) -> Alert | None:
    """The hub's warning that a second process sends as a rank while the first still does (two
    jobs started with one hub's run id, or two nodes with the same ranks), as an alert of the run
    (rank -1), while it stands: until a job is run again under the run's id after every rank
    had ended (the hub's note of it, :func:`~pardash.telemetry.state.run_again`), whose figures
    are its own. In the hub's words from "two jobs share run id" on (the pids are in the event
    log). None otherwise. Said once, as an event that scrolled away, the panel read "every rank
    is healthy" over a grid of both jobs' figures (review 245)."""
    events = state.events
    if not events:
        return None
    seen = _mixed_seen
    last = events[-1]
    if seen[0] is events and seen[1] == len(events) and seen[2] is last:
        return seen[3]  # (every frame asks: the ring is read again only when it changed)
    found = None
    for m in reversed(events):
        if st.run_again(m):
            break
        if isinstance(m, schema.Event) and m.rank < 0 and m.name == "warning" and SHARED_RUN_ID in m.message:
            found = Alert("jobs_mixed", -1, m.message[m.message.index(SHARED_RUN_ID):])
            break
    seen[:] = [events, len(events), last, found]
    return found


_mixed_seen: list = [None, 0, None, None]
"""The event ring :func:`jobs_mixed_alert` read last, its length and newest event then, and
what it found (held, not their ids: a ring freed and another made could take its id)."""


CAUSE_MAX = 160
"""Characters of a rank's error an alert shows (the event log and its detail keep it whole)."""


@dataclass(frozen=True, slots=True)
class ExitInfo:
    """When (in order) and why a rank exited, from the event log."""

    order: int
    cause: str
    step: int | None = None
    """The step it died in, when its own exit said, or the failure's step of the root cause
    (the report's and the launcher's step)."""


def exit_info(state: st.RunState, failure: dict | None = None) -> dict[int, ExitInfo]:
    """Rank -> the order of its exit among the ranks that exited, and the first line of its
    last error (its own error event, its exit message or the launcher's verdict). ``failure``:
    the run's :func:`~pardash.telemetry.failures.failure_summary`, whose step its root cause
    takes, so the alert says the step the report and the launcher's last line say."""
    order: dict[int, int] = {}
    causes: dict[int, str] = {}
    steps: dict[int, int | None] = {}
    for m in state.lifecycle:  # every exit and error, however many ranks failed
        rank = m.rank
        if rank < 0:
            continue
        if isinstance(m, schema.Event):
            if m.name in ("error", "exit") and m.message.strip():
                causes[rank] = short_error(m.message, CAUSE_MAX, m.traceback) or ""
            if m.name == "exit" and m.seq >= 0:  # its own (the launcher's note knows no step)
                steps[rank] = m.step
            elif st.torchrun_restart(m):  # torchrun started it again: an earlier attempt's step is no more
                steps.pop(rank, None)
            if m.name == "exit" and (m.code or 0) != 0:
                order.setdefault(rank, len(order))
        elif isinstance(m, schema.Verdict) and m.verdict == "exited":
            if m.cause.strip():
                causes[rank] = short_error(m.cause, CAUSE_MAX) or ""
            order.setdefault(rank, len(order))
    if failure is not None and failure["step"] is not None and failure["rank"] in order:
        # A rank killed outright (SIGKILL) lost its last steps, held to be sent, with it: its
        # peers, in lockstep with it, went on to where it died. The alert said the step after
        # its last logged one ("at step 1825") where the report and the launcher said 1839.
        steps[failure["rank"]] = failure["step"]
    return {rank: ExitInfo(order=i, cause=causes.get(rank, ""), step=steps.get(rank)) for rank, i in order.items()}


WAITED_FOR_PIECES = 3
"""Pieces of a list of ranks a waiting rank names ("ranks 3, 5-6"); more are counted."""


def waited_for_text(ranks: Iterable[int]) -> str:
    """'rank 3', 'ranks 3, 5-6', '12 ranks': who a hang's victims wait for, short."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    text = ranks_text(ranks)
    return f"ranks {text}" if text.count(", ") < WAITED_FOR_PIECES else f"{len(ranks)} ranks"


_COST = re.compile(r"the others wait \S+ ?[mµ]?s a step")
_NO_COST = re.compile(_COST.pattern + "( for it)?")
"""The straggler verdict's figure, said once when it was found (its message is the hub's)."""


def rank_alerts(
    r: st.RankState,
    exit: ExitInfo | None = None,
    *,
    first: bool = False,
    t0: float | None = None,
    why: str = "",
    cost_s: float | None = None,
    waiting_for: str = "",
    peer_stopped: bool = False,
    peer_left: bool = False,
) -> list[Alert]:
    """The alerts of one rank (a rank may be both a straggler and not sharding); ``t0``: the
    run's start, to say since when on the run's clock (the event log's); ``why``: what a rank
    stopped as it hung was (", likely the cause: ..."), said of the hang, before its exit;
    ``cost_s``: what a straggler costs the others a step now (the verdict's figure is the one
    it was found with, and stayed so for the whole run while the gap grew); ``waiting_for``:
    who a stalled rank waits for, a hang's victim ("rank 3"); ``peer_stopped``: the failure
    began with ranks stopped (another node's launch, by you or a scheduler): a rank whose
    connection closed under it failed after a peer was stopped, not after one failed;
    ``peer_left``: a peer had left the job (its script ended, exit 0) as the others trained on."""
    out: list[Alert] = []
    status = r.status
    if status == st.EXITED and r.ended_in_stop and not first and r.stalled is None and r.silent is None:
        # Stopped (by the user, a scheduler, torchrun after another rank failed): no failure
        # of its own, said calmly (it read "exited with code -15" in the failure's red).
        text = f"rank {r.rank} was {_stopped_text(r, exit)}"
        out.append(Alert("stopped", r.rank, text + _straggled(r), code=r.exit_code))
    elif status == st.EXITED and r.ended_in_stop:
        # Stopped as it hung (Ctrl-C, a Stop on a hang; torchrun ending the rest): the hang
        # first, then the stop in its own words, as the header, the grid, the report's rank
        # table and Prometheus say "stopped" (it read "; then exited with code -15"). The rank
        # the hang most likely started from keeps its hang's alert (◆, named the cause): the
        # hang is what went wrong, not the stop.
        text = f"rank {r.rank}{', the root cause,' if first else ''}"
        kind = "stopped"
        if r.stalled is not None or r.silent is not None:
            text += f" {_stuck_text(r)}{why}; then"
            if first or why:
                kind = "stalled" if r.stalled is not None else "silent"
        text += f" {_stopped_text(r, exit)}"
        out.append(Alert(kind, r.rank, text + _straggled(r), code=r.exit_code, first=first))
    elif status == st.EXITED:
        text = f"rank {r.rank}{', the root cause,' if first else ''}"
        if r.stalled is not None or r.silent is not None:  # stopped or killed as it hung: that first
            text += f" {_stuck_text(r)}{why}; then"
        text += f" exited with code {r.exit_code}"
        step = _exit_step(r, exit)
        if step is not None:
            text += f" at step {step}"
        if exit is not None and exit.cause:
            if not first and PEER_FAILURE.search(exit.cause):
                # Its connection to a rank that failed first closed under it: said so, not in
                # gloo's words (a path and a "This is typically caused by..." cut mid-sentence).
                peer = "was stopped" if peer_stopped else "had left the job" if peer_left else "failed"
                text += f", after a peer {peer} (its connection closed)"
            else:
                cause = exit.cause
                text += f": {cause if len(cause) <= CAUSE_MAX else cause[: CAUSE_MAX - 1].rstrip() + '…'}"
        out.append(Alert("exited", r.rank, text + _straggled(r), code=r.exit_code, first=first))
    elif status == st.SILENT and r.silent is not None:
        # Not the verdict's "silent for 3 s": said once, it would stay 3 s for as long as
        # the rank is silent. When it fell silent does not go stale: its last word, not the
        # verdict's time (the hub says it seconds later: "silent since 00:11" of a rank last
        # heard at 00:08).
        since_t = last_word(r) or r.silent.t
        since = f" since {fmt_clock(since_t - t0)}" if since_t and t0 else ""
        out.append(Alert("silent", r.rank, f"rank {r.rank} silent{since} (no heartbeat)"))
    elif status == st.STALLED and r.stalled is not None:
        out.append(Alert("stalled", r.rank, f"rank {r.rank} {_stuck_text(r, waiting_for)}", waiting_for=waiting_for))
    elif status == st.STRAGGLER and r.straggler is not None:
        v = r.straggler
        cost = cost_s if cost_s is not None else v.cost_s
        if v.message:
            text = v.message
            if cost_s is not None and round(cost_s * 1e3) > 0:  # (not the verdict's first figure: stale)
                text = _COST.sub(f"the others wait {cost_s * 1e3:.0f} ms a step", text, count=1)  # (the hub's words)
            elif cost_s is not None:
                # Behind no more, its verdict not yet cleared (that takes calm windows): "the
                # others wait 0 ms a step for it" read as a contradiction beside the grid.
                text = _NO_COST.sub("the others no longer wait for it (cleared after a few calm steps)", text, count=1)
        else:
            text = f"rank {r.rank} is a straggler"
            if cost:
                text += f": the others wait {fmt_step_time(cost)} a step"
        out.append(Alert("straggler", r.rank, text))
    if r.not_sharding is not None and status not in (st.EXITED, st.FINISHED):
        out.append(
            Alert(
                "not_sharding", r.rank, r.not_sharding.message or f"rank {r.rank} holds the full model (not sharding)"
            )
        )
    bad = r.loss_not_finite
    if bad is not None:  # (last: an exit's alert stays the rank's first)
        out.append(Alert("loss", r.rank, loss_text(r.rank, *bad, done=status in (st.EXITED, st.FINISHED)), step=bad[1]))
    return out


def _losses_alike(alerts: list[Alert], state: st.RunState) -> list[Alert]:
    """The loss alerts of ranks whose loss turned alike (the same value at the same step, the
    same end) as one ("ranks 0-5, 7' loss is nan since step 31"), where the first of them
    was: eight ranks gone NaN read as eight lines at 80x24, the rank that turned first cut off
    below them (review 306)."""
    alike: dict[tuple, list[int]] = {}
    for a in alerts:
        if a.kind == "loss":
            r = state.ranks[a.rank]
            bad = r.loss_not_finite
            alike.setdefault((*bad, r.status in (st.EXITED, st.FINISHED)) if bad else (a.rank,), []).append(a.rank)
    if all(len(ranks) == 1 for ranks in alike.values()):
        return alerts
    out = []
    for a in alerts:
        if a.kind != "loss":
            out.append(a)
            continue
        r = state.ranks[a.rank]
        bad = r.loss_not_finite
        ranks = alike.get((*bad, r.status in (st.EXITED, st.FINISHED))) if bad else None
        if ranks is None or len(ranks) == 1:
            out.append(a)
        elif ranks[0] == a.rank:
            done = r.status in (st.EXITED, st.FINISHED)
            out.append(replace(a, text=loss_text(a.rank, *bad, done=done, ranks=ranks), ranks=tuple(sorted(ranks)), rank=min(ranks)))
    return out


def loss_text(rank: int, value: str, step: int, *, done: bool = False, ranks: Iterable[int] = ()) -> str:
    """"rank 1's loss is nan since step 100 (diverged, or a spike)"; ``done``: of a rank that
    ended so, "rank 1's loss was nan from step 100 to the end"; ``ranks``: of several alike,
    "ranks 0-5, 7' loss is nan since step 31 ...". Its steps go on without a loss while it is
    not finite, which read as a loss never reported."""
    ranks = sorted(ranks)
    who = f"ranks {ranks_text(ranks)}'" if len(ranks) > 1 else f"rank {rank}'s"
    if done:
        return f"{who} loss was {value} from step {step} to the end"
    return f"{who} loss is {value} since step {step} (diverged, or a spike)"


def left_early_text(rank: int, step: int | None) -> str:
    """Of a rank that left the job (exit 0) as the others trained on, in the report's words."""
    at = f" at step {step}" if step is not None else ""
    return (f"rank {rank}, the root cause, left the job{at} (exit code 0) while the others trained on: "
            "a rank that leaves the loop early breaks the others' collectives")  # fmt: skip


def last_word(r: st.RankState) -> float | None:
    """When (wall clock, the rank's own) the rank last said anything the state keeps: its
    latest step, system sample, heartbeat or hello; None: nothing."""
    times = [m.t for m in (r.hello, r.step, r.system, r.heartbeat) if m is not None and m.t]
    return max(times) if times else None


def _exit_step(r: st.RankState, exit: ExitInfo | None) -> int | None:
    """The step a rank died in, as the report and the launcher say it: its exit's (of the root
    cause, the failure's step: :func:`exit_info`), else the one its last word tells
    (:func:`~pardash.telemetry.state.died_in_step`: the step it saved after, of a rank killed
    in its save; the one after its last step otherwise)."""
    if exit is not None and exit.step is not None:
        return exit.step
    return st.died_in_step(r)


def _straggled(r: st.RankState) -> str:
    """'; it was a straggler (data)' of a gone rank that was one as it ended: its straggler
    alert went with its exit, and the grid no longer says it. Not for a verdict cleared before
    (a rank stopped 1,700 steps after its one slow spell was said to be a straggler then)."""
    v = r.straggler
    return f"; it was a straggler ({straggler_cause(v.cause, v.message)})" if v is not None else ""


def _stopped_text(r: st.RankState, exit: ExitInfo | None) -> str:
    """'stopped by you at step 5 (SIGTERM)' of a rank ended by a stop, in the words every
    output says a stop in (failures.stop_text): who or what stopped it, from the launcher's
    note of it, and where it was."""
    how = exit.cause if exit is not None else ""
    if r.stopping is not None and r.exit_code not in st.STOPPED_CODES:
        how = f"stopped {r.stopping.message}"  # (its own failure in the stop: who stopped it, the launcher's word)
    return stop_text(r.rank, r.exit_code, how, _exit_step(r, exit))


def _stuck_text(r: st.RankState, waiting_for: str = "") -> str:
    if waiting_for and r.stalled is not None:
        # A hang's victim: its own phase, then whom it waits for. "rank 0 waiting for rank 1
        # (stalled in backward after step 199)" read as rank 1's phase, which was data.
        return f"{_stuck_text(r)}, waiting for {waiting_for}"
    if r.stalled is None:
        return "went silent (no heartbeat)"
    if r.stalled.cause == "data" and BETWEEN_STEPS_WORDS in (r.stalled.message or ""):
        text = f"stalled {BETWEEN_STEPS_WORDS}"  # (as the hub's verdict says it: its own code, not its DataLoader)
    else:
        text = f"stalled in {r.stalled.cause or 'unknown phase'}"
    if r.stalled.waits_in:
        text += f" ({r.stalled.waits_in})"  # (the collective it waits in, as its heartbeat said)
    if r.stalled.step is not None:
        text += f" after step {r.stalled.step}"  # the last one done, as the event log says
    return text


def _stall_causes(state: st.RunState, alerts: list[Alert], exits: dict[int, ExitInfo] | None) -> list[Alert]:
    """Mark the stalled or silent ranks a hang most likely waits for (analysis.hang_causes:
    the ranks behind the others, else those stuck outside any collective, else the frozen
    ones) as the likely cause. ``exits``: given when no rank's own failure ended the run, so
    when every rank was stopped or killed as it hung (analysis.whole_hang), the exit of the
    rank the hang waited for is marked so, as the report names it."""
    hang, kinds, now = stuck_ranks(state), ("stalled", "silent"), True
    if not hang and exits is not None:
        hang, kinds, now = whole_hang(state), ("exited", "stopped"), False
    causes = hang_causes(hang, sharded=is_sharded(state.strategy))
    if not causes:
        apart = different_collectives(state, hang) if now else []
        if apart:
            # Ranks waiting in collectives that do not match (rank 0 in a final barrier, rank 1
            # in its next step's all-reduce): no rank is the cause, the mismatch is; said on the
            # first of them, first (it read as two hangs of their own, review 335).
            ranks = {r for r, _ in apart}
            lead = min(ranks)
            said = f"; {ranks_named(sorted(ranks))} wait {collectives_words(apart)}"
            return [Alert(a.kind, a.rank, a.text + said, first=True) if a.kind == "stalled" and a.rank == lead else a for a in alerts]
        return alerts
    waiting = sum(1 for a in alerts if a.kind in kinds and a.rank not in causes)
    # (and the ranks out of inputs under DDP's Join, waiting by design, no alert of their own:
    # rank 1 hung in its data beside rank 0 joined was named no cause)
    waiting += sum(1 for _, kind, _, _ in hang if kind == JOINED)
    if not waiting:
        return alerts
    verb = ("wait" if waiting > 1 else "waits") if now else "waited"
    why = f", likely the cause: {waiting} other{'s' if waiting > 1 else ''} {verb} for it"
    if not now:
        return [
            replace(rank_alerts(state.ranks[a.rank], exits.get(a.rank), why=why)[0], first=True)
            if a.kind in kinds and a.rank in causes
            else a
            for a in alerts
        ]
    return [
        Alert(a.kind, a.rank, a.text + why, first=True) if a.kind in kinds and a.rank in causes else a
        for a in alerts
    ]


NEVER_HEARD_ALERTS = 64
"""Ranks never heard from get an alert each up to this many; past it, one alert says them all."""

ENDED_UNSAID = "; the job has ended (torchrun exited), how it ended is not known"
"""Said of a rank with no end of its own once the launch saw the job end (``job_ended``)."""


def never_heard(state: st.RunState) -> list[int]:
    """The ranks of the job's world size (its hello's) that the hub never heard from, by rank."""
    ranks = state.ranks
    world = state.world_size
    if len(ranks) >= world:
        return []
    seen = _never_seen
    if seen[0] is ranks and seen[1] == world and seen[2] == len(ranks):
        return seen[3]
    missing = sorted(set(range(world)) - ranks.keys())
    seen[:] = [ranks, world, len(ranks), missing]
    return missing


_never_seen: list = [None, 0, 0, []]
"""The ranks (a state's, held: not its id, which another could take), world size and count
:func:`never_heard` last answered for, and its answer: asked each frame, a world of 32,768
ranks is not walked each time."""


def _ends_unsaid(state: st.RunState, alerts: list[Alert]) -> list[Alert]:
    """Ends nothing said: once the job is over (the launch saw its torchrun end,
    ``RunState.job_ended``, or every rank heard from is done), each rank of its world size never
    heard from (silent from the start: "✓ every rank finished" was said of a job of 2 ranks
    with one row, the other node's ranks refused by the hub's keys); and once the job has
    ended, each rank that said no end of its own says so (a rank killed with its node read
    "silent" for as long as the viewer stayed, nothing saying the job was over)."""
    ranks = state.ranks
    ended = state.job_ended
    if not ranks or not (ended or all(r.finished or r.exit_code is not None for r in ranks.values())):
        return alerts
    out = list(alerts)
    if ended:
        told: set[int] = set()
        for i, a in enumerate(out):
            if a.rank >= 0 and a.rank not in told and a.rank in ranks and ranks[a.rank].status not in (st.EXITED, st.FINISHED):
                told.add(a.rank)
                out[i] = replace(a, text=a.text + ENDED_UNSAID)
        for r in ranks.values():
            if r.rank not in told and r.status not in (st.EXITED, st.FINISHED):
                out.append(Alert("silent", r.rank, f"rank {r.rank} said no end of its own{ENDED_UNSAID}"))
    missing = never_heard(state)
    if missing:
        of = f" ({len(missing)} of the job's {state.world_size} ranks)"
        if len(missing) > NEVER_HEARD_ALERTS:
            out.append(Alert("silent", missing[0], f"ranks {ranks_text(missing)} never heard from: no word of them reached this hub{of}"))
        else:
            out.extend(Alert("silent", q, f"rank {q} never heard from: no word of it reached this hub{of}") for q in missing)
    return out


def run_alerts(
    state: st.RunState,
    ranks: Iterable[st.RankState] | None = None,
    *,
    t0: float | None = None,
    costs: Mapping[int, float] | None = None,
    waits_for: frozenset[int] | None = None,
) -> list[Alert]:
    """Every current alert of the run, most severe first; exited ranks in the order they
    exited (the first flagged as such when several did), the rest by rank. ``ranks``: the
    ranks that may have one (those with a verdict or an exit), when known; default all.
    ``t0``: the run's 00:00 (:func:`~.run_clock.run_origin`), as the event log counts; default
    the state's first record. ``costs``: rank -> what each straggler costs the others a step
    now (``RowBuilder.straggler_costs``), said instead of the verdict's first figure.
    ``waits_for``: the ranks the other stalled ranks wait for (``RowBuilder.waits_for``, as
    the grid draws them); default worked out from ``state`` (:func:`waited_for`)."""
    out: list[Alert] = []
    exits: dict[int, ExitInfo] | None = None
    failure: dict | None = None
    exited = 0
    if waits_for is None:
        waits_for = waited_for(state)
    # The stalled ranks of a hang say whom they wait for ("rank 5 stalled in comm after step 3,
    # waiting for rank 3"): they read "stalled in comm" as if each were a fault of its own,
    # while the grid drew them waiting (◇) for the rank marked the cause.
    who = waited_for_text(waits_for) if waits_for else ""
    for r in state.ranks.values() if ranks is None else ranks:
        status = r.status  # (worked out from its verdicts at each read: once a rank here)
        if status in (st.RUNNING, st.STARTING, st.FINISHED) and r.not_sharding is None and r.loss_bad is None:
            continue
        info = None
        if status == st.EXITED:
            if exits is None:
                failure = failure_summary(state)  # (once: the root cause and its step)
                exits = exit_info(state, failure)
            info = exits.get(r.rank)
            exited += 1
        cost = costs.get(r.rank) if costs is not None and status == st.STRAGGLER else None
        waiting = who if who and status == st.STALLED and r.rank not in waits_for else ""
        stops = bool(failure and failure.get("stopped_first"))
        left = bool(failure and failure.get("left_early"))
        out.extend(rank_alerts(r, info, t0=t0 or state.t0, cost_s=cost, waiting_for=waiting, peer_stopped=stops, peer_left=left))
    if failure is not None and failure.get("left_early"):
        # A rank that left the loop early (exit 0) as the others waited in its collective: the
        # root cause, as the report and the launcher's last line name it. It read "1 finished"
        # on the grid, and the only alert was its peer's "after a peer failed", no peer failed
        # (review 308).
        out.extend(Alert("exited", x["rank"], left_early_text(x["rank"], x["step"]), code=0, first=True) for x in failure["left_early"])
    if failure is not None and failure.get("collectives"):
        # Its ranks hung in different collectives, then a wait's timeout ended the job: the
        # mismatch is the cause, as the launch's last line and the report say (the first rank
        # to exit read "the root cause"). Said on the first of them, first.
        apart = [(x["rank"], x["waits_in"]) for x in failure["collectives"]]
        lead = min(r for r, _ in apart)
        said = f"; {ranks_named(sorted(r for r, _ in apart))} hung {collectives_words(apart)}"
        out = [replace(a, text=a.text + said, first=True) if a.rank == lead and a.kind in ("exited", "stalled", "stopped") else a for a in out]
    first = cause_of(failure) if exited > 1 and exits else None
    if first is None and exited > 1 and failure is not None and failure.get("stopped_first"):
        # Ranks stopped first (another node's launch stopped, by you or a scheduler) broke the
        # others' collectives: they read first, as the report's and the launcher's root cause
        # ("ranks 0-1 were stopped by SIGTERM first; rank 3 exited ... after it"). The panel
        # listed the ranks that failed of it above them, as exits are graver than stops.
        stopped = {x["rank"] for x in failure["stopped_first"]}
        failed = sum(1 for a in out if a.kind == "exited")
        after = f", first: {failed} other{'s' if failed != 1 else ''} failed after it" if failed else ", first"
        out = [replace(a, text=a.text + after, first=True) if a.kind == "stopped" and a.rank in stopped else a for a in out]
    if first is not None and first in exits:
        out = [
            rank_alerts(state.ranks[a.rank], exits.get(a.rank), first=True)[0]
            if a.kind in ("exited", "stopped") and a.rank == first
            else a
            for a in out
        ]
    elif first is not None:
        # The rank the failed ones timed out waiting for, still stuck (torchrun has not
        # stopped it yet): the grid and the launcher's last line named it, the alerts not.
        failed = sum(1 for a in out if a.kind == "exited")
        why = f", likely the cause: {failed} other{'s' if failed > 1 else ''} failed waiting for it"
        out = [Alert(a.kind, a.rank, a.text + why, first=True) if a.kind in ("stalled", "silent") and a.rank == first else a for a in out]
    out = _stall_causes(state, out, exits if first is None else None)
    out = _losses_alike(out, state)
    out = _ends_unsaid(state, out)
    mixed = jobs_mixed_alert(state)
    if mixed is not None:
        out.append(mixed)
    out.extend(held_up_alerts(state))
    out.extend(memory_alerts(state))
    if not out and (bound := input_bound_alert(state)) is not None:  # (only of a job otherwise well)
        out.append(bound)
    big = len(state.ranks) + 1

    def key(a: Alert) -> tuple[float, int, int]:
        if a.kind == "jobs_mixed":
            return (-2, -1, -1)  # (the root cause's figures are of two jobs too)
        order = exits[a.rank].order if a.kind == "exited" and exits and a.rank in exits else big
        if a.first:
            # The root cause, or the rank a hang likely waits (or waited) for, before all: the
            # ranks that failed waiting for it (exited, graver) took the panel's rows, and its
            # own alert was cut at "likely the cause: 2 others failed waitin…".
            return (-1, -1, a.rank)
        if a.kind == "loss" and a.step is not None:
            # (the first to turn first: by rank, rank 3's NaN at step 60 read below ranks 0-2's
            # at 61, which its all-reduce had passed it to, review 306)
            order = a.step
        return (a.severity, order, a.rank)

    out.sort(key=key)
    return out
