"""The hub's conclusions about ranks: stalled, silent, exited, finished, stragglers, and ranks
of a sharded run that hold far more than their share (not sharding).

The detector runs in the hub at every frame. It reads a :class:`RunState` and returns
:class:`Verdict` records; the hub applies and records them, so every viewer, the log and the
report see the same verdicts. Clock: ``now`` is the hub's monotonic clock and ``last_seen`` is
when the hub last heard from a rank, so clock skew between nodes never matters.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from .memgrowth import MemGrowthDetector
from .schema import JOIN_PHASE, LOADER_PHASE, Step, Verdict
from .state import RankState, RunState, mem_full_bytes
from .stragglers import StragglerDetector
from .summary import NOT_SHARDING_FACTOR, human_bytes, is_pipeline, is_sharded, not_sharding_hint, ranks_named

SHARDING_OK_FACTOR = 1.25
"""A rank flagged not sharding is cleared once it holds at most this many times its share (a
margin under NOT_SHARDING_FACTOR: figures near the bar do not flap)."""


STALL_CAUSE_PHASES = ("data", "checkpoint", "eval")
"""Phases no collective waits in: when, at one step, some ranks are stalled in one of them and
the others in another phase, the others are waiting for them (a hung data loader holds every
rank at the next collective; rank 0 saving or evaluating alone, past even the longer allowance
those phases get, holds the others at their barrier). The alerts and the report name those
first, as the likely cause. (A save or an evaluation with collectives of its own, DCP's or an
all-reduce of metrics, has every rank in it: nothing tells them apart, as before.)"""

WAIT_PHASES = ("sync",)
"""Phases of a rank waiting for the others in a collective, as the automatic instrumentation
and the bundled trainer say it: a collective of the script's own between steps, and DDP's
gradient all-reduces once the rank's own backward is done. (Not "comm", a phase the simulator
and a script's ``pt.phase("comm")`` may name: nothing says the same run's "backward" holds no
wait of its own.)"""

OWN_WORK_PHASES = ("forward", "backward", "optimizer", *STALL_CAUSE_PHASES)
"""Phases of a rank's own work. When, at one step, some ranks wait in a collective
(WAIT_PHASES) and the others are stuck in one of these, the others have not come to it: they
hold the rest (a forward hung on rank 1 while rank 0 waits in DDP's all-reduce read "rank 0
stalled in sync, rank 1 stalled in forward", neither named, and at the end rank 0, whose
timeout ended the wait, was the root cause). Without a rank waiting in a collective the
forward, backward and optimizer name no cause: FSDP's forward and backward hold its
all-gathers and reduce-scatters, so a rank stalled in its forward beside others in theirs may be
waiting as they do."""


SHARDED_OWN_WORK_PHASES = ("optimizer", *STALL_CAUSE_PHASES)
"""OWN_WORK_PHASES of a sharded run (FSDP, tensor parallel), whose forward and backward hold
collectives: a rank blocked in one there waits as the rank in "sync" does."""


def hang_causes(stuck: Iterable[tuple[int, str, int | None, str | None]], *, sharded: bool = False) -> set[int]:
    """The ranks a hang most likely waits for, from the ranks stuck in it: (rank, "stalled" or
    "silent", its last step, the phase it is stuck in). Empty when nothing tells them apart
    (every rank waits alike) or only one rank is stuck.

    In order: the ranks behind the others (the others finished a step they have not: in
    synchronous training the others wait at that step's collective); else, at one step, the
    ranks stuck outside any collective (STALL_CAUSE_PHASES) while the others are in one; else, at
    one step, the ranks stuck in their own work (OWN_WORK_PHASES) while others wait in a
    collective (WAIT_PHASES); else the silent ranks (frozen: no heartbeat at all) while the
    others still beat. ``sharded`` (FSDP, tensor parallel: summary.is_sharded): their forward
    and backward hold collectives of their own, so only the optimizer step is a rank's own work
    beside others waiting (review 274: rank 0 in an all-reduce of its own, rank 1 blocked in
    FSDP's all-gather of its next forward, and rank 1 was named the hang's root cause)."""
    ranks = list(stuck)
    joiners = [q for q in ranks if q[1] == JOINED]
    if joiners:
        # Ranks that ran out of inputs under DDP's Join wait by design (their last step behind
        # the others', their phase a collective's): never the cause. The ranks still stepping
        # are judged among themselves, and one stuck alone holds every joined rank (rank 0
        # joined at step 400, rank 1 hung in its data at 600: rank 0 was named, review 335).
        ranks = [q for q in ranks if q[1] != JOINED]
        if len(ranks) == 1:
            return {ranks[0][0]}
    if len(ranks) < 2:
        return set()
    steps = [s for _, _, s, _ in ranks if s is not None]
    if steps and min(steps) < max(steps):
        low = min(steps)
        return {r for r, _, s, _ in ranks if s == low}
    outside = {r for r, kind, _, phase in ranks if kind == "stalled" and phase in STALL_CAUSE_PHASES}
    if outside and len(outside) < len(ranks):
        return outside
    waiting = any(kind == "stalled" and phase in WAIT_PHASES for _, kind, _, phase in ranks)
    own = SHARDED_OWN_WORK_PHASES if sharded else OWN_WORK_PHASES
    working = {r for r, kind, _, phase in ranks if kind == "stalled" and phase in own}
    if waiting and working:
        return working
    silent = {r for r, kind, _, _ in ranks if kind == "silent"}
    if silent and len(silent) < len(ranks):
        return silent
    return set()


def different_collectives(state: RunState, hang: Iterable[tuple[int, str, int | None, str | None]]) -> list[tuple[int, str]]:
    """(rank, the collective it waits in) of each rank of ``hang`` (as :func:`stuck_ranks` or
    :func:`whole_hang` give it) where they wait in different collectives: every rank of it not
    joined stalled waiting in one (WAIT_PHASES), each saying which (its stall's ``waits_in``,
    from its heartbeat), and not all the same. Such ranks wait for a collective some ranks never
    call (rank 0 out of its loop in a final barrier, rank 1 in its next step's gradient
    all-reduce: a hang of mismatched collectives that named no cause, review 335): none of
    them holds the others by being slow, and none returns until the process group's timeout.
    Empty otherwise (a pipeline's stages wait in sends and receives of their own by design)."""
    out: list[tuple[int, str]] = []
    for rank, kind, _, phase in hang:
        if kind == JOINED:
            continue
        r = state.ranks.get(rank)
        said = r.stalled.waits_in if r is not None and r.stalled is not None else ""
        if kind != "stalled" or phase not in WAIT_PHASES or not said:
            return []
        out.append((rank, said))
    if len({w for _, w in out}) < 2 or is_pipeline(state.strategy):
        return []
    return out


def collectives_words(waits: list[tuple[int, str]]) -> str:
    """``in different collectives (rank 0 in barrier, rank 1 in DDP's gradient all-reduce): a
    collective some ranks never call`` of :func:`different_collectives`' pairs; '' of none."""
    if not waits:
        return ""
    by: dict[str, list[int]] = {}
    for rank, said in waits:
        by.setdefault(said, []).append(rank)
    each = ", ".join(f"{ranks_named(sorted(ranks))} in {said}" for said, ranks in sorted(by.items(), key=lambda kv: min(kv[1])))
    return f"in different collectives ({each}): a collective some ranks never call"


JOINED = "joined"
"""A rank that ran out of inputs under DDP's Join (``RankState.joined``), waiting for the others
by design: the kind (beside "stalled" and "silent") :func:`stuck_ranks` and :func:`whole_hang`
give it (part of their hang, never its cause), and what every view says it is doing ("1
running, 1 joined", the header's "◌ 1 joined")."""


def stuck_ranks(state: RunState) -> list[tuple[int, str, int | None, str | None]]:
    """The ranks of a hang, as :func:`hang_causes` takes them: every rank still alive in
    ``state`` stalled or silent, or joined (:data:`JOINED`: out of inputs under DDP's Join,
    waiting for the others by design). Empty while some rank still makes progress (two ranks
    stuck apart from a job that goes on are not one waiting for the other), and while no rank
    is stalled or silent (every rank alive joined: the job's end)."""
    out = []
    for r in state.ranks.values():
        if r.exit_code is not None or r.finished:
            continue
        if r.joined:
            out.append(_joined_entry(r))
            continue
        if r.silent is None and r.stalled is None:
            return []
        out.append(_stuck(r))
    return out if any(kind != JOINED for _, kind, _, _ in out) else []


def whole_hang(state: RunState) -> list[tuple[int, str, int | None, str | None]]:
    """The hang a run is in or ended in, as :func:`hang_causes` takes it: every rank stalled or
    silent, or joined (see :func:`stuck_ranks`), alive or exited since (a job stopped or killed
    as it hung: the report's episodes that never ended); empty otherwise."""
    out = []
    for r in state.ranks.values():
        if r.said_joined and r.stalled is None:  # (whether it has ended since or not)
            out.append(_joined_entry(r))
            continue
        if r.finished or (r.silent is None and r.stalled is None):
            return []
        out.append(_stuck(r))
    return out if any(kind != JOINED for _, kind, _, _ in out) else []


def _joined_entry(r: RankState) -> tuple[int, str, int | None, str | None]:
    return (r.rank, JOINED, r.step.step if r.step is not None else None, JOIN_PHASE)


def _stuck(r: RankState) -> tuple[int, str, int | None, str | None]:
    v = r.silent or r.stalled
    # The step the verdict names ("stalled after step N"), else the rank's last.
    step = v.step if v.step is not None else r.step.step if r.step is not None else None
    if r.silent is not None:
        return (r.rank, "silent", step, stall_phase(r.heartbeat.phase, r.step)[0] if r.heartbeat is not None else None)
    return (r.rank, "stalled", step, v.cause or None)




BETWEEN_STEPS_WORDS = "between steps, in its own code (not in its DataLoader)"
"""Where a rank stalled in its data phase is when it is not in its DataLoader (see stall_phase):
the live verdict, the failure's line and the report's stall lines say it alike."""


def stall_phase(said: str, step: Step | None) -> tuple[str, str]:
    """(the phase a rank stuck where its heartbeat ``said`` is in, as its verdict's cause names it;
    the words that say where, "in data") of a rank whose latest step is ``step``. A rank whose
    steps' batches come from a DataLoader (``step.loader_s`` known) and whose heartbeat says
    "data", not LOADER_PHASE, is in its own code between steps, not in its loader: the cause is
    its data phase still (the whole gap between steps, as ``data_s``), and the words say so. A
    script's rank 0 writing a checkpoint or logs of its own while the others waited, or one hung
    in its own code after its batch came, read "stalled in data" (review 308)."""
    if said == LOADER_PHASE:
        return "data", "in data"
    if said == "data" and step is not None and step.loader_s is not None:
        return "data", BETWEEN_STEPS_WORDS
    phase = said or "unknown"
    return phase, f"in {phase}"


BUSY_PHASES = ("eval", "checkpoint", "resume")
"""Phases a rank spends between steps on purpose (an evaluation, a save, loading a
checkpoint): no step comes for a while, and that is no hang (see LivenessConfig.busy_stall_s)."""


@dataclass(kw_only=True, slots=True)
class LivenessConfig:
    """When a rank counts as silent or stalled."""

    silent_s: float = 3.0
    """No message at all for this long (heartbeats come every second): silent."""
    stall_min_s: float = 5.0
    """Never call a rank stalled sooner than this."""
    stall_factor: float = 8.0
    """...nor sooner than this many median step times without a new step."""
    busy_stall_s: float = 600.0
    """While a rank's heartbeat says it is evaluating or saving a checkpoint (BUSY_PHASES), no
    step comes for as long as that takes, on it or on the ranks waiting for it: a rank counts as
    stalled only after this long then."""
    check_every_s: float = 0.25
    """Liveness is judged at most this often (a walk over every rank; frames come at 10 Hz,
    and a second-scale verdict gains nothing from being judged at each of them)."""


class Detector:
    """Turns a RunState into verdicts; keeps only what it needs to not repeat itself."""

    def __init__(self, liveness: LivenessConfig | None = None, stragglers: StragglerDetector | None = None,
                 memgrowth: MemGrowthDetector | None = None) -> None:  # fmt: skip
        self.cfg = liveness or LivenessConfig()
        self.stragglers = stragglers or StragglerDetector()
        self.memgrowth = memgrowth or MemGrowthDetector()
        """Ranks whose memory grows step after step (a leak): memgrowth.py."""
        self._progress: dict[int, tuple[int, float]] = {}
        """rank -> (last step seen, hub time it was first seen)."""
        self._checked = -float("inf")
        """Hub time liveness was last judged."""
        self._unheard: dict[int, float] = {}
        """rank -> its ``last_seen`` when the run was recovered from a log (see ``carry_over``),
        while the rank was silent then and nothing has come from it since."""
        self._back = -float("inf")
        """Hub time it last came back from a pause of its own (see ``hub_was_away``)."""
        self._busy = False
        """Some rank said it evaluated or saved (BUSY_PHASES) at the last look."""
        self._busy_over = -float("inf")
        """Hub time the ranks were last seen done evaluating or saving: no rank's lack of
        progress counts from before it. A rank that validated for 8 s, then saved for 2 s while
        the others sat in a barrier, read "stalled in data after step 10 (9 s without
        progress)": the evaluation's 8 s counted once it was over. (While it goes on, the
        longer busy_stall_s counts from the last step: an evaluation that never ends is a hang.)"""

    def hub_was_away(self, now: float) -> None:
        """The hub did not run until ``now`` (stopped, swapped out): a rank's silence and lack
        of progress count from ``now`` at the earliest, not from before the pause, when its
        messages since wait in the hub's queues. A rank silent already stays so until heard."""
        self._back = now

    def carry_over(self, state: RunState, now: float) -> None:
        """Take over a run rebuilt from its log at hub time ``now`` (a restarted hub): what
        the dead hub concluded stays in force. Each rank's progress counts from ``now`` at
        its recovered step, so a stalled rank is "resumed" only by a new step; a silent rank
        stays silent until a message received after ``now`` comes from it (recovery stamps
        every rank as seen at ``now``, which would otherwise read as "heard from again")."""
        for r in state.ranks.values():
            self._progress[r.rank] = (r.step.step if r.step is not None else -1, now)
            if r.silent is not None:
                self._unheard[r.rank] = r.last_seen

    def update(self, state: RunState, now: float) -> list[Verdict]:
        out: list[Verdict] = []
        if abs(now - self._checked) >= self.cfg.check_every_s:
            self._checked = now
            median = state.median_step_s() or 0.0
            stall_after = max(self.cfg.stall_min_s, self.cfg.stall_factor * median)
            busy = any(
                r.heartbeat is not None and r.heartbeat.phase in BUSY_PHASES and r.exit_code is None and not r.finished
                for r in state.ranks.values()
            )
            if busy:
                # A rank evaluates or saves: the others may wait for it (rank 0 alone
                # validating while the rest sit in a barrier), no hang either.
                stall_after = max(stall_after, self.cfg.busy_stall_s)
            elif self._busy:
                self._busy_over = now
            self._busy = busy
            lively: list[Verdict] = []
            for r in state.ranks.values():
                if r.finished or r.exit_code is not None:
                    if r.stalled is not None:
                        lively.extend(self._resumed_at_its_end(r, now))
                    continue
                # A rank counts once it has said anything, hello or not (a hello can be lost:
                # a hub killed before writing it, a reporter's full queue). One known only
                # from what others said of it (a verdict) is not judged.
                if r.hello is None and r.step is None and r.heartbeat is None and r.system is None:
                    continue
                if r.awaited:  # restarted by torchrun, its new process not heard yet: starting
                    continue
                if r.stopping is not None:
                    # Being stopped (the launcher said so as the stop began): a framework's ranks
                    # may take seconds to end, quiet, which read as a hang ("[stalled] rank 1
                    # stalled in forward" as a Lightning job was stopped, review 275).
                    continue
                lively.extend(self._liveness(r, now, stall_after))
            out.extend(_causes_first(lively, sharded=is_sharded(state.strategy)))
            for v in lively:
                if v.verdict == "stalled":  # (a pause said so is no hold to say again, once it resumed)
                    self.stragglers.holds.note_stall(v.rank, v.step)
            if state.world_size > 1 and is_sharded(state.strategy):
                out.extend(self._sharding(state))
        out.extend(self.stragglers.update(state))
        out.extend(self.memgrowth.update(state, now))
        return out

    @staticmethod
    def _sharding(state: RunState) -> list[Verdict]:
        """Ranks of a sharded run holding far more parameters, gradients and optimizer state
        than 1/N of that state unsharded (as they measure it): a block left out of the
        wrapping (FSDP2's fully_shard on the root alone, or on a few blocks) is held whole."""
        out: list[Verdict] = []
        world = state.world_size
        for r in state.ranks.values():
            mem = r.step.mem if r.step is not None else None
            if mem is None or r.exit_code is not None:
                continue
            full = mem_full_bytes(mem)
            if not full:
                continue
            ways = mem.shards or world  # (HSDP: its shard group, the replicas hold the same)
            share = full / ways
            held = mem.params_bytes + mem.grads_bytes + mem.optim_bytes
            if r.not_sharding is None and held > NOT_SHARDING_FACTOR * share:
                out.append(
                    Verdict(
                        rank=r.rank,
                        verdict="not_sharding",
                        step=r.step.step,
                        message=(
                            f"rank {r.rank} holds {human_bytes(held)} of parameters, gradients and optimizer state, "
                            f"{held / share:.1f}x its 1/{ways} share of {human_bytes(full)}: {not_sharding_hint(state.strategy)}"
                        ),
                    )
                )
            elif r.not_sharding is not None and held <= SHARDING_OK_FACTOR * share:
                out.append(
                    Verdict(
                        rank=r.rank,
                        verdict="sharding_ok",
                        step=r.step.step,
                        message=f"rank {r.rank} holds its share again ({human_bytes(held)} of {human_bytes(full)} unsharded)",
                    )
                )
        return out

    def _resumed_at_its_end(self, r: RankState, now: float) -> list[Verdict]:
        """A stalled rank whose next steps and exit all came between two looks (a hang that
        ended just before the job did) resumed before it ended: said so. Without it the run
        read as stalled to its end (no "resumed"), and one that crashed right after as a run
        that ended hung (:func:`whole_hang`)."""
        last = self._progress.get(r.rank)
        step = r.step.step if r.step is not None else -1
        if last is None or step <= last[0]:
            return []  # (it ended where it stalled: the hang was its end)
        self._progress[r.rank] = (step, now)
        at = last[0] + 1 if last[0] >= 0 else step
        return [Verdict(rank=r.rank, verdict="resumed", step=at, message=f"rank {r.rank} resumed at step {at}")]

    def _liveness(self, r: RankState, now: float, stall_after: float) -> list[Verdict]:
        out: list[Verdict] = []
        step = r.step.step if r.step is not None else -1
        beat = r.heartbeat
        if beat is not None and beat.step > step and r.step is not None:
            # Its heartbeat says it has done steps whose messages are not here yet (held up in
            # a backlog: a hub paused or behind takes from each socket in turn): progress.
            step = beat.step
        last = self._progress.get(r.rank)
        if last is None or last[0] != step:
            self._progress[r.rank] = (step, now)
            if r.stalled is not None:
                # The step it was stuck in is the one after its last: a fast loop has done
                # several more by the time this looks (it said "resumed at step 19" for 10).
                at = last[0] + 1 if last is not None and 0 <= last[0] < step else step
                out.append(Verdict(rank=r.rank, verdict="resumed", step=at, message=f"rank {r.rank} resumed at step {at}"))
            last = self._progress[r.rank]
        unheard = self._unheard.get(r.rank) if self._unheard else None
        if unheard is not None:
            if r.last_seen <= unheard:
                return out  # silent before the restart, and not heard from since
            del self._unheard[r.rank]
        quiet = now - r.last_seen
        if r.silent is None:
            quiet = min(quiet, now - self._back)
        if quiet > self.cfg.silent_s:
            if r.silent is None:
                out.append(
                    Verdict(
                        rank=r.rank,
                        verdict="silent",
                        step=step if step >= 0 else None,
                        message=f"rank {r.rank} silent for {quiet:.0f} s (no heartbeat)",
                    )
                )
            return out
        if r.silent is not None:
            out.append(Verdict(rank=r.rank, verdict="resumed", step=step, message=f"rank {r.rank} heard from again"))
        if r.joined:
            # Out of inputs under DDP's Join: no step comes, by design, until the others run out
            # too (they are judged). Its wait counts from when it ends, as a new look's.
            self._progress[r.rank] = (step, now)
            return out
        stuck_s = now - max(last[1], self._back, self._busy_over)
        if step >= 0 and stuck_s > stall_after and r.stalled is None:
            phase, where = stall_phase(r.heartbeat.phase if r.heartbeat is not None else "", r.step)
            # (in a collective: which one, where its heartbeat says: see different_collectives)
            waits = r.heartbeat.waits_in if r.heartbeat is not None and phase in WAIT_PHASES else ""
            out.append(
                Verdict(
                    rank=r.rank,
                    verdict="stalled",
                    cause=phase,
                    step=step,
                    message=f"rank {r.rank} stalled {where}{f' ({waits})' if waits else ''} after step {step} ({stuck_s:.0f} s without progress)",
                    waits_in=waits,
                )
            )
        return out


def _causes_first(verdicts: list[Verdict], *, sharded: bool = False) -> list[Verdict]:
    """Ranks found stalled together, the ones the others likely wait for first (see
    :func:`hang_causes`): in rank order, 63 ranks "stalled in comm" were said ahead of the one
    "stalled in data" they waited for, in the log, the event log and the progress lines."""
    stalled = [(v.rank, "stalled", v.step, v.cause or None) for v in verdicts if v.verdict == "stalled"]
    causes = hang_causes(stalled, sharded=sharded) if len(stalled) > 1 else set()
    if not causes:
        return verdicts
    return sorted(verdicts, key=lambda v: not (v.verdict == "stalled" and v.rank in causes))


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
