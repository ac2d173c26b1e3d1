"""RunState: what is known about a run, built by applying messages in order.

One class, one code path: the hub applies what ranks send, a viewer applies the hub's frames
(and its snapshot), replay and ``pardash report`` apply the lines of a log. Verdicts are
messages too, so a rank's status is the same wherever it is computed.
"""

from __future__ import annotations

import re
import shlex
import statistics
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from math import inf, nan
from operator import attrgetter

import msgspec

from . import schema
from .event_ring import EventRing
from .ring import Ring
from .trend import Trend

HISTORY_POINTS = 240
"""Points per rank kept for charts (a chart is downsampled to its width)."""
EVENTS_KEPT = 500
"""Events and verdicts kept for the event log, at the least: ``EVENTS_PER_RANK`` a rank when
there are more ranks."""
EVENTS_PER_RANK = 4
"""Events kept for the event log a rank, past EVENTS_KEPT (a save or an exit of every rank)."""
LIFECYCLE_KEPT = 8192
"""Error, exit and restart events (and exited verdicts) kept to judge how a run ended, at the
least; a run of many ranks keeps four a rank (see ``RunState.lifecycle``)."""
TRACEBACK_KEPT = 2048
"""Characters of an error's traceback (its end, where the error is) that ``lifecycle`` and the
event log keep (the JSONL log keeps all of it)."""
MESSAGE_KEPT = 1024
"""Characters of an event's message the event log keeps in memory (the JSONL log keeps all): its
start and its end (an error torch carried over from a DataLoader worker says the original one
last, under its traceback: cut at its start, the root cause read "^^^^^…", review 277)."""
SMOOTH_STEPS = 5
"""Steps over which the hub takes each rank's median step, self, data and comm time (the
grid's wall, self, data and comm: one slow step does not flash a cell). ``smooth_of`` takes
five the short way (another number, the long one)."""
SMOOTH_FIGURES = ("step_s", "self_s", "data_s", "comm_s")
"""The figures of ``RankState.smooth``, in its order."""
_figures = attrgetter(*SMOOTH_FIGURES)


LOSS_NOT_FINITE = re.compile(r"^loss is (?P<value>nan|-?inf) at step (?P<step>\d+)\b")
"""The warning a rank's reporter sends when its loss stops being finite (Reporter._loss_turns:
its steps go on without a loss, JSON having no NaN): the value it turned to and the step."""
LOSS_FINITE_AGAIN = re.compile(r"^loss is finite again at step (?P<step>\d+)\b")
"""The warning it sends when its loss is finite again (a spike the run came back from)."""
REFUSED_UP_TO = re.compile(r"up to its message (\d+)\b")
"""In a hub's ``refused`` note of a rank: the highest seq of the messages it refused."""


def loss_not_finite(msg: schema.Message) -> tuple[str, int] | None:
    """(value, step) of a rank's own warning that its loss stopped being finite ("nan", "inf"
    or "-inf", and the step it did at); None for any other message."""
    if not isinstance(msg, schema.Event) or msg.name != "warning" or msg.seq < 0 or msg.rank < 0:
        return None
    m = LOSS_NOT_FINITE.match(msg.message)
    return (m["value"], int(m["step"])) if m is not None else None


STOPPED_CODES = frozenset({-15, -2, 130, 143})
"""How a rank ends when it is stopped, not failing: SIGTERM (torchrun stopping the rest, a
scheduler), SIGINT, 130, Python's exit on Ctrl-C (KeyboardInterrupt), and 143, the shell's
code for SIGTERM (a rank that handles it and exits as the shell would, or a shell script run as
a rank). Never a root cause. (failures.STOPPED_CODES: the same.)"""

KILLED_NOT_STEPPING = frozenset({-15, -2})
"""Signals a launcher's exit note is given no step for: a stop (SIGTERM, SIGINT), not a death
in a step (see STOPPED_CODES)."""


def _kept(msg: "schema.Event") -> "schema.Event":
    """``msg`` as memory keeps it: a long message or traceback cut (a copy: the recorder may
    not have written the message yet). 32768 ranks' 64 KiB error events, kept whole, are GBs."""
    tb, text = msg.traceback, msg.message
    if (tb is None or len(tb) <= TRACEBACK_KEPT) and len(text) <= MESSAGE_KEPT:
        return msg
    if tb is not None and len(tb) > TRACEBACK_KEPT:
        from .failures import own_frame_lines

        # (its end, and the job's own innermost frame where the cut took it: see own_frame_lines)
        own = own_frame_lines(tb, len(tb) - TRACEBACK_KEPT)
        tail = tb[-TRACEBACK_KEPT:]
        tb = f"Traceback (most recent call last):\n{own}  …\n{tail[tail.find(chr(10)) + 1:]}" if own else tail
    return msgspec.structs.replace(
        msg,
        message=text if len(text) <= MESSAGE_KEPT else text[: MESSAGE_KEPT // 2 - 1] + "…" + text[-(MESSAGE_KEPT // 2) :],
        traceback=tb,
    )


def median_small(values: Iterable[float]) -> float | None:
    """The median of a handful of numbers (cheaper than statistics.median for five; None: no
    number)."""
    v = sorted(values)
    n = len(v)
    if not n:
        return None
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def _median_known(values: tuple[float | None, ...]) -> float | None:
    """The median of ``values`` that are not None (None: none is)."""
    return median_small([x for x in values if x is not None])


def _median5(a: float, b: float, c: float, d: float, e: float) -> float:
    """The median of five numbers in six comparisons (under half of ``sorted``'s work); every
    one is compared, so a None among them raises TypeError."""
    if b < a:
        a, b = b, a
    if d < c:
        c, d = d, c
    if c < a:  # a is now below b, c and d: not the median, and dropped
        a, b, c, d = c, d, a, b
    if e < b:
        b, e = e, b
    # The median is the second lowest of the pairs b <= e and c <= d.
    if b < c:
        return e if e < c else c
    return b if b < d else d


def smooth_of(steps: deque[schema.Step]) -> tuple[float | None, float | None, float | None, float | None]:
    """The median of each of SMOOTH_FIGURES over ``steps`` (a rank's last SMOOTH_STEPS or
    fewer), over the steps that measured it (None: none did).

    The hub works it out once a frame for each rank that stepped (a thousand ranks: about half
    a millisecond), so five steps take the short way: their figures read one by one, each
    five's median by comparisons; a figure some step did not measure (None) goes the long way."""
    if len(steps) != 5:  # (a rank's first steps; SMOOTH_STEPS, unrolled below)
        cols = tuple(zip(*map(_figures, steps))) or ((),) * 4
        return (_median_known(cols[0]), _median_known(cols[1]), _median_known(cols[2]), _median_known(cols[3]))
    a, b, c, d, e = steps
    step_s = _median5(a.step_s, b.step_s, c.step_s, d.step_s, e.step_s)  # (always measured)
    try:
        self_s = _median5(a.self_s, b.self_s, c.self_s, d.self_s, e.self_s)  # type: ignore[arg-type]
    except TypeError:
        self_s = _median_known((a.self_s, b.self_s, c.self_s, d.self_s, e.self_s))
    try:
        data_s = _median5(a.data_s, b.data_s, c.data_s, d.data_s, e.data_s)  # type: ignore[arg-type]
    except TypeError:
        data_s = _median_known((a.data_s, b.data_s, c.data_s, d.data_s, e.data_s))
    try:
        comm_s = _median5(a.comm_s, b.comm_s, c.comm_s, d.comm_s, e.comm_s)  # type: ignore[arg-type]
    except TypeError:
        comm_s = _median_known((a.comm_s, b.comm_s, c.comm_s, d.comm_s, e.comm_s))
    return (step_s, self_s, data_s, comm_s)


_RUN_AGAIN = re.compile(r"rank \d+ started again \(pid ")


def run_again(msg: schema.Message) -> bool:
    """The hub's note that a rank's new process said hello after every rank had ended, with
    torchrun's count unchanged (hubcore's ``_say_run_again``): a job run again under the run's
    id, a resume by hand; the next attempt of the run, as a torchrun restart begins one."""
    return (
        isinstance(msg, schema.Event) and msg.name == "hub" and msg.seq < 0 and msg.rank < 0
        and _RUN_AGAIN.match(msg.message or "") is not None
    )  # fmt: skip


def is_lifecycle(msg: schema.Message) -> bool:
    """An error, exit or torchrun restart event, the hub's note of a job run again, or an
    exited verdict: what judges how a run ended and why (the root cause, its victims, the ranks
    stopped, who exited first)."""
    if isinstance(msg, schema.Event):
        return msg.name in ("error", "exit") or torchrun_restart(msg) or run_again(msg)
    return isinstance(msg, schema.Verdict) and msg.verdict == "exited"


COMMAND_NOTE = "command: "
"""How a launched hub's log says what each rank runs, near its head: the hub's note (an event,
``name`` "hub", rank -1) ``command: python ../train_b.py --lr 3``, the launch's ``command``
(trainer/supervisor.py ``user_command``) as a shell would quote it. :func:`command_of` reads it
back; a log without it (written before, or by a hub alone) names no command."""


def command_of(msg: schema.Message) -> list[str] | None:
    """The command a log's :data:`COMMAND_NOTE` names (``["python", "../train_b.py", "--lr",
    "3"]``); None for any other record."""
    if not (isinstance(msg, schema.Event) and msg.name == "hub" and msg.rank < 0 and msg.message.startswith(COMMAND_NOTE)):
        return None
    try:
        return shlex.split(msg.message[len(COMMAND_NOTE) :])
    except ValueError:
        return None


def torchrun_restart(msg: schema.Message) -> bool:
    """torchrun's restart of a rank, as the hub (from the rank's hello) or the launcher (from
    torchrun's attempts) says it, seq -1 (``code``: the restart's count); not a script's own
    event of that name (``pardash.event("restart", ...)``)."""
    return isinstance(msg, schema.Event) and msg.name == "restart" and msg.seq < 0


def launcher_stopping(msg: schema.Message) -> bool:
    """The launcher's note, as a stop begins (a person's, a viewer's, a signal to the launch),
    that it is stopping the rank (seq -1, dated when the stop began, ``message`` who stops it:
    "by you"); not a script's own event of that name."""
    return isinstance(msg, schema.Event) and msg.name == "stopping" and msg.seq < 0


def _stuck_since(r: "RankState", t: float) -> None:
    """The rank's stall or silence found after ``t``, when its stop began, was the stop's (a
    framework that takes seconds to end its ranks, Lightning's): cleared. One found before (a
    hang the user stopped) stays."""
    stuck = r.stalled or r.silent
    if t and stuck is not None and stuck.t > t:
        r.stalled = r.silent = None


BETWEEN_STEPS = {"checkpoint": "saving a checkpoint", "eval": "evaluating", "resume": "loading a checkpoint to resume"}
"""What a rank does between steps, by the phase its heartbeat names (analysis.BUSY_PHASES)."""


def between_steps(r: RankState) -> tuple[int | None, str] | None:
    """(its last step, the phase) of a rank whose last word was a heartbeat from a save, an
    evaluation or a resume (:data:`BETWEEN_STEPS`): nothing it sent after (a step, the save's
    or the evaluation's own event) says it came out of it; its error and exit may follow. The
    step is None where it had taken none (a resume at the start). None otherwise."""
    hb = r.heartbeat
    if hb is None or hb.phase not in BETWEEN_STEPS:
        return None
    if r.step is not None and (r.step.seq > hb.seq or r.step.step > hb.step):
        return None
    said = r.said
    if said is not None and said.seq > hb.seq and said.t >= hb.t:
        return None
    return (hb.step if hb.step or r.step is not None else None), hb.phase


def died_in_step(r: RankState) -> int | None:
    """The step a rank that said nothing of where it died (killed outright: the launcher's note
    of its exit) died in: where its last word was that it was saving, evaluating or resuming
    after its last step (:func:`between_steps`), that step, as the failure line says it (a
    step after it read "at step 41" of a rank killed in the save after step 40, a step that
    never began); else the one after its last. None where it took none."""
    if r.step is None:
        return None
    busy = between_steps(r)
    return busy[0] if busy is not None and busy[0] is not None else r.step.step + 1


# Status of a rank, most severe last wins in display ordering.
STARTING, RUNNING, STRAGGLER, STALLED, SILENT, EXITED, FINISHED = (
    "starting",
    "running",
    "straggler",
    "stalled",
    "silent",
    "exited",
    "finished",
)
STATUSES = (STARTING, RUNNING, STRAGGLER, STALLED, SILENT, EXITED, FINISHED)

LEFT_EARLY = "left early"
"""What the TUI, the headless progress and the report call a rank whose script ended well (exit 0)
while its peers trained on and then broke in the collective it never joined
(:func:`pardash.telemetry.failures.left_early` decides which): the root cause, which read
"finished" (□) on the grid, the header and the report's rank table beside the alerts' and the
failure line's "rank 1 ... left the job at step 20". Not one of :data:`STATUSES`: its
``RankState.status`` stays ``finished`` (the rank alone cannot tell; its peers do)."""


def status_of(r: "RankState", left: Mapping[int, int | None]) -> str:
    """``r``'s status as every view says it: :data:`LEFT_EARLY` for a rank of ``left`` (what
    ``failures.left_early`` found), else its own ``status``."""
    return LEFT_EARLY if left and r.rank in left else r.status


@dataclass(slots=True)
class SeqTracker:
    """Counts a rank's lost messages from its per-rank ``seq`` (robust to reordering)."""

    received: int = 0
    max_seq: int = -1
    lost_before: int = 0
    """Lost in the rank's processes before its previous one (torchrun restarted it)."""
    before_received: int = 0
    """Received of its previous process, whose last messages may come after its restart."""
    before_max: int = -1
    """The highest seq of its previous process."""

    def see(self, seq: int) -> None:
        self.received += 1
        if seq > self.max_seq:
            self.max_seq = seq

    def see_before(self, seq: int) -> None:
        """A message of the rank's previous process, come after its restart (:meth:`restart`):
        its seq continues that process's count, not a gap in the new one's."""
        self.before_received += 1
        if seq > self.before_max:
            self.before_max = seq

    def restart(self) -> None:
        self.lost_before += max(0, self.before_max + 1 - self.before_received)
        self.before_received, self.before_max = self.received, self.max_seq
        self.received = 0
        self.max_seq = -1

    @property
    def lost(self) -> int:
        return self.lost_before + max(0, self.before_max + 1 - self.before_received) + max(0, self.max_seq + 1 - self.received)


CUSTOM_NAMES = 256
"""Names of a rank's own metrics kept for their last value (limits.MAX_CUSTOM a step)."""


def keep_custom(r: "RankState", custom: dict[str, float]) -> None:
    """The rank's last value of each metric ``custom`` carries (see RankState.custom_last)."""
    last = r.custom_last
    if len(last) + len(custom) <= CUSTOM_NAMES:
        last.update(custom)
    else:
        for name, x in custom.items():
            if name in last or len(last) < CUSTOM_NAMES:
                last[name] = x


class RankState:
    """Everything known about one rank."""

    __slots__ = (
        "rank",
        "hello",
        "step",
        "step_before",
        "system",
        "heartbeat",
        "last_seen",
        "steps_seen",
        "exit_code",
        "finished",
        "stalled",
        "silent",
        "straggler",
        "straggled",
        "straggled_to",
        "not_sharding",
        "restarts",
        "history",
        "seq",
        "exit_noted",
        "awaited",
        "stopping",
        "own_error",
        "samples_mark",
        "t_mark",
        "samples_rate",
        "recent",
        "smooth",
        "loss_bad",
        "said",
        "custom_last",
        "history_step",
        "samples_before",
        "before_top",
        "before_noted",
        "before_samples",
        "join",
        "step_seen",
    )

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.hello: schema.Hello | None = None
        self.step: schema.Step | None = None
        self.custom_last: dict[str, float] = {}
        """The last value of each metric the script logs itself (``Step.custom``), whichever
        step carried it: one logged every 10 steps was in the metrics 1 scrape in 10. At most
        CUSTOM_NAMES names (a script logging a new name each step grows nothing past them)."""
        self.samples_before = 0
        """Samples of its earlier processes (torchrun restarted it): each one's last
        ``samples_total`` as it was heard (a reporter's sum starts at 0 in a new process)."""
        self.history_step: int | None = None
        """The step of its newest history row as ``commit_history`` wrote it (None: none yet,
        or the history came whole from a snapshot)."""
        self.step_before: int | None = None
        """The last step of the rank's previous process (torchrun restarted it), while its new
        one has taken none: ``step`` starts anew with the new process's message order."""
        self.system: schema.System | None = None
        self.heartbeat: schema.Heartbeat | None = None
        self.last_seen = 0.0
        """Receiver's clock (hub: monotonic) when anything last came from this rank."""
        self.step_seen = 0.0
        """The ranks' newest time (``RunState.t_last_rank``) as of the frame that brought its
        latest step (``RunState.commit_history``): one clock for every rank, whichever rank's is
        ahead, where nodes' own clocks disagree by seconds or more. 0.0: none since the state
        began (a snapshot's steps come with their history)."""
        self.steps_seen = 0
        self.exit_code: int | None = None
        self.finished = False
        self.stalled: schema.Verdict | None = None
        self.silent: schema.Verdict | None = None
        self.straggler: schema.Verdict | None = None
        self.straggled: schema.Verdict | None = None
        """Its first straggler verdict, kept once cleared (a finished run still says it)."""
        self.straggled_to: int | None = None
        """The step at which that first spell was cleared (None: not cleared, or not known)."""
        self.not_sharding: schema.Verdict | None = None
        self.restarts = 0
        self.history = Ring(HISTORY_POINTS)
        """One row per step, columns ring.HISTORY_COLUMNS (``history["loss"].values()``)."""
        self.seq = SeqTracker()
        self.exit_noted: int | None = None
        """The exit code the launcher noted for this process (torchrun saw it die), if it did."""
        self.awaited = False
        """torchrun restarted it and its new process has not spoken yet: starting, not judged
        (no silence, no straggling of its previous process's figures)."""
        self.stopping: schema.Event | None = None
        """The launcher's note that it began stopping the rank (:func:`launcher_stopping`):
        ending, not judged (no stall or silence: a framework's ranks may take seconds to end)."""
        self.own_error = False
        """This process raised an error of its own (not a peer's going: failures.PEER_FAILURE):
        its exit after a stop began is still a failure (a full disk in its SIGTERM handler's
        save, an error long before the stop: review 280)."""
        self.samples_mark: int | None = None
        """``samples_total`` of the step at its latest history point (None: not known, as
        after a restart), from which the next point's ``samples`` column counts."""
        self.t_mark: float | None = None
        """``t`` of its latest history point."""
        self.samples_rate: float | None = None
        """Samples a second between its last two history points (a frame apart): what it did
        over the time it took, whatever size each step was (None: not known). The latest
        step's own samples over its time read a fifth of it where a reporter's bursts ended
        with an epoch's partial last batch, and every frame brought that step."""
        self.recent: deque[schema.Step] | None = None
        """(The hub's state: ``RunState.keep_recent``) the rank's newest SMOOTH_STEPS steps by
        its own order, of every step it took, newest last; None elsewhere."""
        self.smooth: tuple[float | None, float | None, float | None, float | None] | None = None
        """The medians of SMOOTH_FIGURES over its last SMOOTH_STEPS steps (:func:`smooth_of`),
        as of the last frame that brought a step of it: the hub works them out from every step
        (``recent``), a viewer takes them from the hub's frames. None: not known (a hub before
        these, or a new process that has taken no step yet)."""
        self.loss_bad: schema.Event | None = None
        """Its own warning that its loss stopped being finite ("loss is nan at step 100: ..."),
        while it is not finite: its steps go on without a loss (JSON has no NaN), which read as
        a loss never reported. Cleared by its "finite again" warning and by a new process
        (torchrun restarted it); kept once it is done (its loss was so to its end)."""
        self.said: schema.Event | None = None
        """Its own latest event but an error or its exit (a save's, an evaluation's, a
        warning), of this process: once after its last heartbeat, it came out of what that
        heartbeat said it was in (:func:`between_steps`)."""
        self.before_top: int | None = None
        """The highest seq heard from its previous process (torchrun restarted it; None: no
        earlier process, or none heard from). That process's last messages may come after the
        launcher's note of the restart (they were on their way as it died): a seq past this one
        before the new process speaks (or older than its hello) continues the old count
        (:meth:`RunState.apply`), not a gap in the new one's, and its exit is not the new one's."""
        self.before_noted: int | None = None
        """The exit code the launcher noted for its previous process (None: none noted)."""
        self.before_samples = 0
        """``samples_total`` of its previous process as ``samples_before`` counts it."""
        self.join: schema.Event | None = None
        """Its process's ``join`` event (it ran out of inputs under DDP's Join, at the step it
        says: ``joined_at``), kept on the rank: the event log's ring lets it go on a long job,
        and with it the last line's "rank 0 ran out of inputs at step 400 and joined"."""

    @property
    def loss_not_finite(self) -> tuple[str, int] | None:
        """(value, step) of ``loss_bad``: "nan", "inf" or "-inf", and the step it turned so at;
        None while its loss is finite (or not reported)."""
        return loss_not_finite(self.loss_bad) if self.loss_bad is not None else None

    @property
    def joined(self) -> bool:
        """Whether it ran out of inputs under DDP's ``Join`` and shadows the others' collectives
        until they finish (its heartbeat says :data:`~.schema.JOIN_PHASE`; the zero-code hooks say
        so, pardash.trainer.joins): it takes no step, by design, and is neither stalled nor a
        hang's cause; the job's progress, its time left and its rate are the ranks' still
        stepping. Not once it has ended, nor while silent."""
        return self.said_joined and self.exit_code is None

    @property
    def said_joined(self) -> bool:
        """Its last word said it shadowed the others' collectives under DDP's ``Join``
        (:attr:`joined`), whether it has exited since or not (a job stopped or killed as it hung:
        the hang it was part of); not once finished, nor while silent."""
        hb = self.heartbeat
        return hb is not None and hb.phase == schema.JOIN_PHASE and not self.finished and self.silent is None

    @property
    def joined_at(self) -> int | None:
        """The step at which its process ran out of inputs under DDP's ``Join`` (its ``join``
        event's), whether it shadows the others still or not; None: it did not."""
        return self.join.step if self.join is not None else None

    @property
    def status(self) -> str:
        if self.finished:
            return FINISHED
        if self.exit_code is not None:
            return EXITED
        if self.silent is not None:
            return SILENT
        if self.stalled is not None:
            return STALLED
        if self.straggler is not None:
            return STRAGGLER
        if self.step is not None:
            return RUNNING
        return STARTING

    def new_process(self) -> None:
        """A new process for the rank (torchrun restarted it): its message order starts anew,
        its previous one's last step kept in ``step_before``."""
        tops = [m.seq for m in (self.step, self.heartbeat, self.said, self.system, self.hello) if m is not None]
        if self.seq.received:
            tops.append(self.seq.max_seq)
        top = max(tops, default=-1)
        self.before_top = top if top >= 0 else None
        self.before_noted = self.exit_noted
        self.before_samples = 0
        if self.step is not None:
            self.step_before = self.step.step
            self.samples_before += self.step.samples_total or 0
            self.before_samples = self.step.samples_total or 0
        self.step = None
        self.samples_mark = self.t_mark = self.samples_rate = None
        self.smooth = None
        self.loss_bad = None  # (a new process's loss is its own)
        self.said = None
        self.join = None  # (a new process's inputs are its own)
        # (the old process's last word: a job run again under the run's id, resumed from step
        # 20, read its old heartbeat's step 24 as done already, its steps 21-24 as no progress,
        # and "stalled in data after step 24 (7 s without progress)" at full speed)
        self.heartbeat = None
        if self.recent is not None:
            self.recent.clear()

    def alive_again(self) -> None:
        """A (re)started rank: no exit, no stall or silence of before."""
        self.exit_code = self.exit_noted = None
        self.finished = False
        self.silent = self.stalled = None
        self.stopping = None
        self.own_error = False

    @property
    def ended_in_stop(self) -> bool:
        """It exited by a stop, not failing: with a stop's code (STOPPED_CODES), or any other
        after the launcher began stopping it (``stopping``: its collective broken as torchrun
        stopped a peer first, gloo's "Connection closed by peer"; a Stop of a healthy job read
        "rank 1 exited" and "rank 0 was stopped by you first; rank 1 exited with code 1 after
        it", review 275)."""
        code = self.exit_code
        return code is not None and (code in STOPPED_CODES or (self.stopping is not None and code > 0 and not self.own_error))

    def t_at_step(self, step: int) -> float | None:
        """When (history ``t``: since the run's ``t0``, its own clock) it reached ``step``, by
        its history (a point a frame): the first point at or past it, or, of a step before the
        oldest point kept, that point less the steps between at the history's pace. None: not
        reached in its history (or none kept)."""
        steps = self.history["step"].values()
        if not steps or not steps[-1] >= step:
            return None
        t = self.history["t"].values()
        i = bisect_left(steps, step)
        if i < len(steps) and (i or steps[0] == step):
            return t[i]
        span = steps[-1] - steps[0]
        return t[0] - (steps[0] - step) * (t[-1] - t[0]) / span if span > 0 else t[0]

    @property
    def last_step(self) -> int | None:
        """Its last step: its process's, or while a process restarted by torchrun has taken
        none, the previous one's."""
        return self.step.step if self.step is not None else self.step_before

    @property
    def host(self) -> str:
        return self.hello.host if self.hello else ""

    @property
    def node(self) -> int:
        return self.hello.node if self.hello else 0


def mem_held_bytes(mem: schema.Mem | None) -> int | None:
    """Parameters + gradients + optimizer state + DDP buckets held by the rank."""
    if mem is None:
        return None
    return mem.params_bytes + mem.grads_bytes + mem.optim_bytes + mem.buckets_bytes


def mem_state_bytes(mem: schema.Mem) -> int:
    """Parameters + gradients + optimizer state held by the rank: its model state, which the
    strategy's expectation (summary.expected_state_bytes) is of (DDP's buckets aside)."""
    return mem.params_bytes + mem.grads_bytes + mem.optim_bytes


def mem_full_bytes(mem: schema.Mem | None) -> int | None:
    """What the same rank would hold unsharded (as DDP does, buckets aside)."""
    if mem is None:
        return None
    return mem.params_full_bytes + mem.grads_full_bytes + mem.optim_full_bytes


def mem_device_bytes(mem: schema.Mem | None) -> int | None:
    """The device's view of the rank's memory: CUDA allocated on GPU, RSS on CPU."""
    if mem is None:
        return None
    if mem.cuda_allocated_bytes is not None:
        return mem.cuda_allocated_bytes
    return mem.rss_bytes


def run_over(st: "RunState") -> bool:
    """Every rank of the job has finished or exited."""
    ranks = st.ranks.values()
    return bool(st.ranks) and len(st.ranks) >= (st.world_size or 1) and all(r.finished or r.exit_code is not None for r in ranks)


def run_finished(st: "RunState") -> bool:
    """Every rank of the job has finished (exit 0: in its own words, or the launcher's once
    torchrun ended with 0); none failed, none was stopped."""
    ranks = st.ranks.values()
    return bool(st.ranks) and len(st.ranks) >= (st.world_size or 1) and all(r.finished and r.exit_code is None for r in ranks)


@dataclass
class RunState:
    """A run as seen by whoever applies its messages."""

    run_id: str = ""
    track_seq: bool = True
    """Count lost messages from seq (hub, report); viewers take the hub's count instead."""
    ranks: dict[int, RankState] = field(default_factory=dict)
    events: EventRing | deque = field(default_factory=lambda: EventRing(maxlen=EVENTS_KEPT))
    """Events and verdicts, oldest first, for the event log: the newest EVENTS_KEPT (or
    EVENTS_PER_RANK a rank) routine events (epoch ends, evaluations, checkpoints) and, apart,
    as many of the rest (:class:`EventRing`); a deque of every one for ``pardash report``."""
    lifecycle: deque = field(default_factory=deque)
    """Every error, exit and restart event and exited verdict (:func:`is_lifecycle`), oldest
    first, errors with the end of their traceback: a failure of 1024 ranks is some 2,000 events,
    which push its first error out of ``events``, and the root cause with it. Bounded by
    ``lifecycle_limit`` (at least; four a rank when there are more), oldest out first."""
    lifecycle_limit: int | None = LIFECYCLE_KEPT
    """None: keep every one (``pardash report`` reads a whole log)."""
    hangs_restarted: dict[int, list] = field(default_factory=dict)
    """torchrun's restart count (the run's: ``restarts_before`` added) -> the hang the attempt
    before it ended in (analysis.whole_hang as the restart came: its ranks stalled or silent, or
    [] when it ended some other way). The ranks' stalls are forgotten as they start again; a
    failure the restart recovered from is judged with it (a rank's collective timing out,
    waiting for a rank stalled in its data)."""
    restarts_before: int = 0
    """torchrun's restarts of the jobs run before this one under the run's id (the hub's note
    of a job run again, :func:`run_again`): a new torchrun counts its restarts from 0 again, and
    a rank's ``restarts`` counts the run's, this job's added to these. (Carried over, a job run
    again after one torchrun restarted said none of its own restarts, and its end read as its
    first attempt's failure: review 254.)"""
    hseq: int = 0
    t0: float = 0.0
    """Wall clock of the first message (history ``t`` is relative to it)."""
    t_last: float = 0.0
    t_last_rank: float = 0.0
    """Wall clock of the newest message a rank sent (the hub's own notes and verdicts go on
    after the ranks are done: a run's duration ends here)."""
    first_hello_t: float = 0.0
    """Wall clock of the ranks' first hello (of their first processes), kept when torchrun
    restarts them (a restart's hello replaces its rank's): the run's 00:00 for viewers, as a
    replay counts from its ranks' first word. A hello far before the first record (a clock
    behind: CLOCK_OFF_S) is not it. 0.0: none yet."""
    t_ceiling: float = inf
    """A rank's time beyond this is its clock's error, not the run's (``t_last``/``t_last_rank``
    keep below it): a viewer sets it from the hub's frame clock plus CLOCK_OFF_S, where a node
    whose clock is ahead by years read as a run decades long. inf: no hub clock to hold to."""
    counts: dict[str, int] = field(default_factory=dict)
    """Messages applied, by kind."""
    run_hello: schema.Hello | None = None
    """Rank 0's hello when there, else the first one seen (see ``hello``)."""
    lost_reported: int = 0
    """Lost messages as reported by the hub (viewers)."""
    hub_note: str = ""
    hub_restarts: int = 0
    """Times the run's hub was started again on its log (its ``hub_restart`` notes, every one
    applied): Prometheus' counter, which a hub reading its log back counts again."""
    straggler_verdicts: dict[str, int] = field(default_factory=dict)
    """Straggler verdicts so far, by cause as Prometheus labels it (own_work: a data straggler
    slow in its own work between steps), every one applied, however many the event log keeps:
    Prometheus' counter, which a hub reading its log back counts again as it was."""
    held_up_s: dict[int, float] = field(default_factory=dict)
    """rank -> the seconds it held the others up now and then (its ``held_up`` verdicts' cost,
    every one applied): the launch's last line and Prometheus' counter."""
    held_up_last: dict[int, tuple[schema.Verdict, float]] = field(default_factory=dict)
    """rank -> its latest ``held_up`` verdict and the ranks' clock as it came (``t_last_rank``:
    the verdict's own ``t`` is the hub's, which ranks' clocks off by minutes made old at once,
    review 334): the TUI's alert of it, for a while. Read it with :meth:`held_up_at`."""
    memory_growing: dict[int, schema.Verdict] = field(default_factory=dict)
    """rank (-1: every rank alike) -> its standing ``memory_growing`` verdict (a leak, see
    memgrowth.py), till a ``memory_steady`` of it: kept here, not read from the event log's ring,
    which lets it go on a long run (the alert went with it), and sent in a snapshot to a viewer
    that attaches later (:meth:`events_for_snapshot`)."""
    trend: Trend = field(default_factory=Trend)
    """The run's loss from its first step, a point a frame (``commit_history``), bounded."""
    attempt_note: schema.Event | None = None
    """The note that began the job's current attempt: torchrun's first restart note of it, or
    the hub's note of the job run again (None: the first attempt). A previous process's error
    and exit that come after it belong before it (``_apply_before``)."""
    attempt_count: int = 0
    """The run's restart count of that attempt (torchrun's, ``restarts_before`` added)."""
    command: list[str] | None = None
    """What each rank runs (``["python", "train.py", "--lr", "3"]``), as the launched hub's note
    says it (:func:`command_of`), kept when the event log has let the note go; None: not said
    (a hub alone, an older log)."""
    job_ended: bool = False
    """The launch that runs the job saw its torchrun end (set by the launch's viewer, from the
    launch's own word: its ranks' messages may never say it, of a rank silent, killed with its
    node, or one never heard from). Applying messages never sets it."""
    keep_recent: bool = False
    """Give each rank a ``recent`` window of its newest steps, which its taker fills (the hub:
    the medians it sends viewers are of every step, not of the steps its frames carry)."""

    # -- apply ----------------------------------------------------------------------------

    def rank(self, rank: int) -> RankState:
        r = self.ranks.get(rank)
        if r is None:
            r = self.ranks[rank] = RankState(rank)
            if self.keep_recent:
                r.recent = deque((), SMOOTH_STEPS)
            kept = self.events.maxlen
            if kept is not None and EVENTS_PER_RANK * len(self.ranks) > kept:
                # Every rank saving a checkpoint, or exiting, is an event each within a frame or
                # two: the log keeps room for a few such rounds, whatever the world size.
                self.events = EventRing(self.events, maxlen=2 * kept)
        return r

    def apply(self, msg: schema.Message, now: float) -> None:
        """Fold one message in. ``now`` is the receiver's clock, used for liveness."""
        kind = msg.__struct_config__.tag  # "step" for any Step (the hub's ingest decodes a subclass)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if msg.hseq > self.hseq:
            self.hseq = msg.hseq
        if msg.t:
            if not self.t0:
                self.t0 = msg.t
            if self.t_last < msg.t < self.t_ceiling:
                self.t_last = msg.t
        if not self.run_id and msg.run:
            self.run_id = msg.run
        if isinstance(msg, schema.Verdict):
            self._apply_verdict(msg)
            return
        if msg.rank >= 0 and self.t_last_rank < msg.t < self.t_ceiling:
            self.t_last_rank = msg.t
        if msg.rank < 0:
            if isinstance(msg, schema.Event):
                if msg.name == "hub_restart":
                    self.hub_restarts += 1
                self.events.append(_kept(msg))
                if is_lifecycle(msg):
                    self._keep_lifecycle(msg)
                if run_again(msg):
                    self.restarts_before = max(self.restarts_before, max((r.restarts for r in self.ranks.values()), default=0))
                    self.attempt_note = msg
                elif msg.name == "hub" and msg.message.startswith(COMMAND_NOTE):
                    self.command = command_of(msg) or self.command
            return
        r = self.rank(msg.rank)
        was_awaited = r.awaited
        if (
            msg.seq >= 0
            and r.before_top is not None
            and msg.seq > r.before_top
            and (was_awaited or (r.hello is not None and msg.t < r.hello.t))
            and not isinstance(msg, schema.Hello)
        ):
            # Its previous process's last words, on their way as it died, come after the
            # launcher's note that torchrun restarted it (its new process not heard yet), or
            # after its new process's hello and older: its seq continues the old count. Taken
            # as the new process's, they read as 1,918 lost messages (its count starts anew)
            # and its exit made the new process, waiting for its peers, "exited" (review 258).
            self._apply_before(r, msg)
            return
        r.last_seen = now
        if msg.seq >= 0 and was_awaited:
            r.awaited = False  # its new process speaks
        if self.track_seq and msg.seq >= 0:
            if isinstance(msg, schema.Hello) and msg.seq == 0 and r.seq.received:
                r.seq.restart()
            r.seq.see(msg.seq)
        if isinstance(msg, schema.Step):
            # The newest step by the rank's own order: steps may arrive out of it (a rank's
            # heartbeat thread sends the steps its loop left held on a socket of its own).
            if r.step is None or msg.seq >= r.step.seq:
                r.step = msg
            r.steps_seen += 1
            if msg.custom:
                keep_custom(r, msg.custom)
        elif isinstance(msg, schema.Heartbeat):
            r.heartbeat = msg
        elif isinstance(msg, schema.System):
            r.system = msg
        elif isinstance(msg, schema.Hello):
            if msg.seq >= 0 and not msg.restart and (not self.first_hello_t or msg.t < self.first_hello_t):
                from .clocks import CLOCK_OFF_S  # (clocks imports this module)

                if msg.t > self.t0 - CLOCK_OFF_S:
                    self.first_hello_t = msg.t
            restarts = self.restarts_before + msg.restart  # (torchrun's count is its job's)
            if restarts > r.restarts:  # torchrun's count so far: a viewer that attached late knows it too
                self._restarting(restarts)
                r.restarts = restarts
            # Its process's hello sent again (a framework's planned steps learnt at its train
            # start): no restart, its stall stands (cleared, it was said twice, review 334).
            again = r.hello is not None and msg.pid == r.hello.pid and msg.restart == r.hello.restart
            if r.hello is not None and not again and not was_awaited:
                r.new_process()  # (awaited: the restart's note began it, with what its old one left)
            # The run's config is rank 0's (every rank's is the same): another rank's copy is
            # not kept in memory (up to 256 KiB a rank; the JSONL log keeps every hello whole).
            r.hello = msg if msg.rank == 0 or not msg.config else msgspec.structs.replace(msg, config={})
            if self.run_hello is None or msg.rank == 0 or self.run_hello.rank == msg.rank:
                self.run_hello = msg
            if not again:
                r.alive_again()
        elif isinstance(msg, schema.Event):
            code = msg.code if msg.code is not None else 0
            if msg.name == "error" and msg.seq >= 0:
                from .failures import PEER_FAILURE  # (failures imports this module)

                r.own_error = r.own_error or not PEER_FAILURE.search(f"{msg.message}\n{msg.traceback or ''}")
            if msg.name == "exit" and msg.seq < 0 and msg.step is None and code < 0 and code not in KILLED_NOT_STEPPING and r.step is not None:
                # The launcher's note of a rank killed outright (SIGKILL, SIGSEGV: no word of its
                # own) says nothing of where: the step it died in (:func:`died_in_step`). Kept
                # here, where its process's last step is known: after torchrun restarted the
                # job, that attempt's steps are gone from memory ("restarted by torchrun after:
                # rank 1 exited with code -9 (SIGKILL)", with no step, where the job's last
                # failure said one).
                msg = msgspec.structs.replace(msg, step=died_in_step(r))
            elif msg.name not in ("error", "exit") and msg.seq >= 0:
                r.said = msg
                if msg.name == "join" and msg.step is not None:
                    r.join = _kept(msg)
            # A rank's own failed exit after the launcher's note of it (its messages held up as
            # it died) is the same exit: the event log says it once, with the code the launcher
            # saw the process end with (a rank torchrun stopped with SIGTERM says "1" itself).
            same_exit = msg.name == "exit" and msg.seq >= 0 and r.exit_noted is not None and (code == r.exit_noted or (code and r.exit_noted))
            if not same_exit:
                self.events.append(_kept(msg))
            if is_lifecycle(msg):
                self._keep_lifecycle(msg)
            if msg.code is not None and self.restarts_before + msg.code > r.restarts and torchrun_restart(msg):
                # torchrun started the rank again (the launcher saw it, or the hub from its
                # hello): starting again, its previous process's figures (its step's rate, a
                # straggler verdict) no more its own, and its new process counts its messages
                # from 0
                restarts = self.restarts_before + msg.code
                self._restarting(restarts)
                if restarts > self.attempt_count:
                    self.attempt_count, self.attempt_note = restarts, msg  # the attempt's first note
                r.restarts = restarts
                r.new_process()  # (first: it keeps the launcher's note of its old process's exit)
                r.alive_again()
                r.straggler = r.heartbeat = None
                r.awaited = True
                if r.seq.received:
                    r.seq.restart()
            if msg.name == "warning" and msg.seq >= 0:
                self._loss_turn(r, msg)
            if msg.name == "refused" and msg.seq < 0 and self.track_seq and msg.code:
                # The hub refused that many of its messages (HubCore.say_refused): they reached
                # it, so the seq gaps they left are not lost messages; the newest of them counts
                # as its highest seq (refused last, they hid real gaps before them).
                r.seq.received += max(0, min(msg.code, 1 << 48))
                top = REFUSED_UP_TO.search(msg.message)
                if top is not None:
                    r.seq.max_seq = max(r.seq.max_seq, min(int(top[1]), 1 << 48))
            if msg.name == "exit":
                if msg.seq < 0:
                    r.exit_noted = code
                    if code in STOPPED_CODES:
                        # The launcher's note of a stop is dated when the stop began. A Stop of a
                        # healthy job read "stopped by you as it hung after step 211, likely
                        # waiting for rank 1" and "◆ rank 1 stalled in forward" (review 275), as
                        # the report no longer says (report.py). (A launch that said the stop as
                        # it began, "stopping", had no such verdict made: a log of one before.)
                        _stuck_since(r, msg.t)
                if code == 0:
                    r.finished = True
                    if msg.seq >= 0:
                        # The rank's own word wins over a launcher's note about it (seq -1)
                        # that happened to be taken first.
                        r.exit_code = None
                elif not same_exit:
                    r.exit_code = code
            elif launcher_stopping(msg):
                r.stopping = msg
                _stuck_since(r, msg.t)  # (one the hub found between the stop and this note)

    @staticmethod
    def _loss_turn(r: RankState, msg: schema.Event) -> None:
        """A rank's own warning that its loss stopped being finite, or is finite again."""
        text = msg.message
        if not text.startswith("loss is "):
            return
        if LOSS_NOT_FINITE.match(text) is not None:
            if r.loss_bad is None:  # (said once a turn: "since" its first)
                r.loss_bad = _kept(msg)
        elif r.loss_bad is not None and LOSS_FINITE_AGAIN.match(text) is not None:
            r.loss_bad = None

    def _restarting(self, restart: int) -> None:
        """torchrun starts the job again (``restart``): the hang its last attempt ended in, kept
        before the first of its ranks to start again forgets its stall."""
        if restart not in self.hangs_restarted:
            from .analysis import whole_hang  # (analysis imports this module)

            self.hangs_restarted[restart] = whole_hang(self)

    def _apply_before(self, r: RankState, msg: schema.Message) -> None:
        """A message of ``r``'s previous process that came after torchrun's restart of it (see
        ``apply``): counted in that process's seq, its last step kept as that process's, its
        error and exit put in the lifecycle before the attempt's first restart note (the attempt
        they ended, which the report and the alerts judge); its exit is not the new process's,
        and said once where the launcher noted it. Heartbeats and samples are of no process now."""
        if self.track_seq:
            r.seq.see_before(msg.seq)
        if isinstance(msg, schema.Step):
            r.steps_seen += 1
            if r.step_before is None or msg.step > r.step_before:
                r.step_before = msg.step
            total = msg.samples_total
            if total is not None and total > r.before_samples:
                r.samples_before += total - r.before_samples
                r.before_samples = total
        elif isinstance(msg, schema.Event):
            noted = r.before_noted
            code = msg.code or 0
            if not (msg.name == "exit" and noted is not None and (code == noted or (code and noted))):
                self.events.append(_kept(msg))
            if is_lifecycle(msg):
                self._keep_lifecycle(msg, before=self.attempt_note)

    def _keep_lifecycle(self, msg: schema.Message, before: schema.Message | None = None) -> None:
        """Keep ``msg`` in ``lifecycle``, last, or just before ``before`` (the note that began
        the attempt it belongs before) where that is still kept."""
        if isinstance(msg, schema.Event):
            msg = _kept(msg)
        kept = self.lifecycle
        if before is not None:
            for i in range(len(kept) - 1, -1, -1):
                m = kept[i]
                if m is before or (before.hseq and m.hseq == before.hseq):
                    kept.insert(i, msg)
                    break
            else:
                kept.append(msg)
        else:
            kept.append(msg)
        if self.lifecycle_limit is not None:
            limit = max(self.lifecycle_limit, 4 * len(self.ranks))
            while len(kept) > limit:
                kept.popleft()

    def events_for_snapshot(self) -> list[schema.Message]:
        """``events`` and ``lifecycle`` merged in the hub's order (each message once, the
        event log's copy first): applied in order, they give a viewer both; and each rank's
        ``join`` event where the event log has let it go (a viewer that attached late read the
        rank that ran out of inputs under DDP's Join as a rank behind), and the standing
        ``memory_growing`` verdicts (:attr:`memory_growing`)."""
        seen: dict[int, schema.Message] = {}
        for m in self.events:
            seen.setdefault(m.hseq or id(m), m)
        for m in self.lifecycle:
            seen.setdefault(m.hseq or id(m), m)
        for r in self.ranks.values():
            if (m := r.join) is not None:
                seen.setdefault(m.hseq or id(m), m)
        for m in self.memory_growing.values():  # (a leak said long ago stands: its alert too)
            seen.setdefault(m.hseq or id(m), m)
        return sorted(seen.values(), key=lambda m: m.hseq)

    def _apply_verdict(self, v: schema.Verdict) -> None:
        self.events.append(v)
        if is_lifecycle(v):
            self._keep_lifecycle(v)
        if v.verdict == "memory_growing":
            self.memory_growing[v.rank] = v
        elif v.verdict == "memory_steady":
            self.memory_growing.pop(v.rank, None)
        if v.rank < 0:
            return
        r = self.rank(v.rank)
        name = v.verdict
        if name == "straggler":
            r.straggler = v
            if r.straggled is None:
                r.straggled = v
            from .summary import cause_label  # (summary imports this module)

            cause = cause_label(v.cause, v.message)
            self.straggler_verdicts[cause] = self.straggler_verdicts.get(cause, 0) + 1
        elif name == "held_up":
            self.held_up_s[v.rank] = self.held_up_s.get(v.rank, 0.0) + max(0.0, min(v.cost_s or 0.0, 1e9))
            self.held_up_last[v.rank] = (v, self.t_last_rank or v.t)
        elif name == "straggler_cleared":
            if r.straggler is not None and r.straggler is r.straggled:
                r.straggled_to = v.step  # (the first spell's end: "no longer at step 110")
            r.straggler = None
        elif name == "stalled":
            r.stalled = v
        elif name == "silent":
            r.silent = v
        elif name == "resumed":
            r.stalled = r.silent = None
        elif name == "exited":
            r.exit_code = v.code if v.code is not None else -1
        elif name == "finished":
            r.finished = True
        elif name == "not_sharding":
            r.not_sharding = v
        elif name == "sharding_ok":
            r.not_sharding = None

    def apply_frame(self, messages: Iterable[schema.Message], now: float) -> None:
        """Apply a hub frame's messages in order, then append each of its steps to its rank's
        history (a frame's steps are its history points, see frames.py): the same as ``apply``
        on each message then ``commit_history``, with a short path for the steps, system
        samples and heartbeats of known ranks that make up nearly all of a frame at scale."""
        steps: list[schema.Step] = []
        Step, System, Heartbeat = schema.Step, schema.System, schema.Heartbeat
        apply = self.apply
        if self.track_seq or not self.t0 or not self.run_id:
            for msg in messages:
                apply(msg, now)
                if isinstance(msg, Step) and self.ranks[msg.rank].step is msg:
                    steps.append(msg)
            self.commit_history(steps)
            return
        ranks = self.ranks
        hseq, t_last, t_rank = self.hseq, self.t_last, self.t_last_rank
        ceiling = self.t_ceiling
        n_step = n_system = n_beat = 0
        for msg in messages:
            cls = type(msg)
            if cls is Step or cls is System or cls is Heartbeat:
                r = ranks.get(msg.rank)
                if r is not None and not r.awaited and (
                    r.before_top is None or msg.seq <= r.before_top or r.hello is None or msg.t >= r.hello.t
                ):
                    # What apply() does for these kinds once t0 and run_id are known (not for
                    # its previous process's late words: see apply()).
                    if msg.hseq > hseq:
                        hseq = msg.hseq
                    if t_rank < msg.t < ceiling:
                        t_rank = msg.t
                        if msg.t > t_last:
                            t_last = msg.t
                    r.last_seen = now
                    if cls is Step:
                        r.steps_seen += 1
                        n_step += 1
                        if msg.custom:
                            keep_custom(r, msg.custom)
                        if r.step is None or msg.seq >= r.step.seq:  # see apply()
                            r.step = msg
                            steps.append(msg)
                    elif cls is System:
                        r.system = msg
                        n_system += 1
                    else:
                        r.heartbeat = msg
                        n_beat += 1
                    continue
            self.hseq, self.t_last, self.t_last_rank = hseq, t_last, t_rank
            apply(msg, now)
            hseq, t_last, t_rank = self.hseq, self.t_last, self.t_last_rank
            if isinstance(msg, Step) and self.ranks[msg.rank].step is msg:
                steps.append(msg)
        self.hseq, self.t_last, self.t_last_rank = hseq, t_last, t_rank
        counts = self.counts
        for kind, n in (("step", n_step), ("system", n_system), ("heartbeat", n_beat)):
            if n:
                counts[kind] = counts.get(kind, 0) + n
        self.commit_history(steps)

    def commit_history(self, steps: Iterable[schema.Step], *, trend: bool = True) -> None:
        """Append one history row per step (called once per frame, with each rank's latest
        step since the previous frame): one row write per step, the hot path of a frame.
        ``trend``: the steps are one frame's, a point of the run's trend too (a hub reading
        its log back feeds the trend frame by frame itself)."""
        if trend:
            steps = list(steps)
            self.trend.add_frame(steps)
        t0 = self.t0
        ranks = self.ranks
        seen = self.t_last_rank
        for s in steps:
            r = ranks.get(s.rank)
            if r is None:
                r = self.rank(s.rank)
            r.step_seen = seen
            mem = s.mem
            if mem is None:
                held = device = nan
            else:
                held = mem.params_bytes + mem.grads_bytes + mem.optim_bytes + mem.buckets_bytes
                device = mem.cuda_allocated_bytes
                if device is None:
                    device = mem.rss_bytes
                    if device is None:
                        device = nan
            t = s.t - t0 if t0 else 0.0
            total = s.samples_total
            if total is None:
                done = nan
            else:
                mark = r.samples_mark
                # (less than at the point before: a new process the hello of which came late)
                done = total - mark if mark is not None and total >= mark else nan
                r.samples_mark = total
                before = r.t_mark
                r.samples_rate = done / (t - before) if done == done and before is not None and t > before else None
            r.t_mark = t
            was = r.history_step
            if was is not None and s.step < was:
                # Its steps run again (torchrun restarted it, from its start or a checkpoint):
                # they replace the first run of them, as an export's do; the charts showed the
                # failed attempt's steps 455-599 beside the new attempt's 1-454 (review 246).
                r.history.drop_newest_from("step", s.step)
            r.history_step = s.step
            # In HISTORY_COLUMNS order; None (a figure the rank did not measure) is NaN.
            r.history.append_row(
                s.step,
                t,
                nan if s.loss is None else s.loss,
                s.step_s,
                nan if s.self_s is None else s.self_s,
                nan if s.data_s is None else s.data_s,
                nan if s.forward_s is None else s.forward_s,
                nan if s.backward_s is None else s.backward_s,
                nan if s.optimizer_s is None else s.optimizer_s,
                nan if s.comm_s is None else s.comm_s,
                held,
                device,
                done,
            )

    # -- derived --------------------------------------------------------------------------

    @property
    def hello(self) -> schema.Hello | None:
        """Rank 0's hello when there, else the first one seen: run-wide facts."""
        return self.run_hello

    @property
    def world_size(self) -> int:
        h = self.hello
        return max(h.world_size if h else 0, len(self.ranks))

    @property
    def strategy(self) -> str:
        h = self.hello
        return h.strategy if h else ""

    @property
    def lost(self) -> int:
        if not self.track_seq:
            return self.lost_reported
        return sum(r.seq.lost for r in self.ranks.values())

    @property
    def step(self) -> int:
        """The slowest running rank's last step (the run's progress); of a rank restarted by
        torchrun that has taken no step yet, its previous process's last. A rank that ran out of
        inputs under DDP's Join (:meth:`ran_out`) is not how far the job went, while others step
        on nor once they are done (``pardash ps`` and Prometheus' ``pardash_step`` stood at its
        step, review 335, and went back to it as Join's shadowing ended, review 339)."""
        out = self.ran_out()
        steps = [s for r in self.ranks.values() if (s := r.last_step) is not None and r.rank not in out]
        if not steps:
            steps = [s for s in (r.last_step for r in self.ranks.values()) if s is not None]
        return min(steps) if steps else 0

    def ran_out(self) -> set[int]:
        """The ranks that ran out of inputs under DDP's Join and took no step since: joined now
        (``RankState.joined``), or ended since, or done shadowing, at the step their ``join``
        event said (``RankState.joined_at``). Their last step is not how far the job went (the
        others stepped on)."""
        out = set()
        low = high = None
        for r in self.ranks.values():
            if r.joined:
                out.add(r.rank)
            s = r.last_step
            if s is not None:
                low = s if low is None or s < low else low
                high = s if high is None or s > high else high
        if low == high:
            return out  # (every rank at one step: none ended behind)
        for r in self.ranks.values():
            at = r.joined_at
            if at is not None and r.last_step == at:
                out.add(r.rank)
        return out

    def held_up_at(self, rank: int) -> float:
        """The ranks' clock as ``rank``'s latest ``held_up`` verdict came (``held_up_last``),
        at the least when its rank reached the verdict's step (:meth:`RankState.t_at_step`): a
        viewer that attached late applies the hub's snapshot, its verdicts before the ranks'
        latest steps, and ``t_last_rank`` then was their hellos', which read a verdict of just
        now as minutes old (its alert never shown, review 339)."""
        v, at = self.held_up_last[rank]
        r = self.ranks.get(rank)
        if r is not None and v.step is not None:
            reached = r.t_at_step(v.step)
            if reached is not None and self.t0:
                at = max(at, self.t0 + reached)
        return at

    def median_step_s(self) -> float | None:
        values = [r.step.step_s for r in self.ranks.values() if r.step is not None]
        return statistics.median(values) if values else None

    def status_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.ranks.values():
            out[r.status] = out.get(r.status, 0) + 1
        return out
