"""The hub's socket-free heart: validate, stamp, apply, record, judge and frame messages.

:class:`HubCore` has no sockets and no threads: :class:`~.hub.Hub` drives it from the hub
process's loop, and the replay source, the tests and the benchmarks drive it directly. Nothing
received is ever executed or unpickled: bytes are decoded by msgspec against the schema, and
anything that does not fit is counted by reason and dropped (``HubCore.rejected``; viewers show
the total). Each part of a multipart message is judged as a frame of its own.
"""

from __future__ import annotations

import os
import re
import shlex
import time
import statistics
from collections import Counter, deque
from collections.abc import Callable, Iterable
from math import isfinite
from typing import Annotated, Any, Union

import msgspec

from . import frames, limits, schema
from .analysis import Detector
from .clocks import CLOCK_OFF_S, human_span
from .logspace import LogSpace
from .recorder import Recorder
from .summary import total_steps
from .state import RankState, RunState, keep_custom, smooth_of

MAX_RANK = 1 << 20
"""Ranks above this are refused (no job has a million ranks; a hostile frame might)."""

_FINITE = 1.7976931348623157e308  # the largest float: NaN and the infinities fall outside
MAX_SEQ_JUMP = 10_000_000
"""A rank's message numbered this far past its newest (ten days of a rank's messages dropped
while cut off from the hub) is refused: its seq would count as that many lost messages."""
HUB_AWAY_S = 1.0
"""A frame this long after the one before (they come ten times a second) means the hub did not
run in between (stopped with SIGSTOP, swapped out, its machine paused): what the ranks sent
meanwhile waits in its queues, so that time is not counted against them (``Detector.hub_was_away``)."""
MAX_STEP_S = 1e7
"""A step time above this (116 days) is refused: no step takes that long, and a hostile 1e300
would be shown, summed and charted by every viewer."""
_Seconds = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_STEP_S)]
_Finite = Annotated[float, msgspec.Meta(ge=-_FINITE, le=_FINITE)]


class IngestStep(schema.Step, tag="step"):
    """A step as the hub's ingest decodes it first: the schema's Step (same fields, same order,
    same log line), with the bounds of a step the hub takes on its short path checked by
    msgspec while decoding. A step outside them (NaN, a negative time, a newer version, custom
    metrics, phases of the script's own) fails this decode and is decoded again as a plain
    Step, which the general way judges and, when refused, counts under its reason."""

    # Only the bounded fields are declared again (and ``run``, which keeps the order of the
    # schema's keyword fields: a field declared again moves behind those that are not).
    v: Annotated[int, msgspec.Meta(ge=1, le=schema.SCHEMA_VERSION)] = schema.SCHEMA_VERSION
    run: str = ""
    rank: Annotated[int, msgspec.Meta(ge=0, lt=MAX_RANK)] = -1
    seq: Annotated[int, msgspec.Meta(ge=0, le=limits.MAX_COUNT)] = 0
    t: Annotated[float, msgspec.Meta(ge=0.0, le=_FINITE)] = 0.0
    step: Annotated[int, msgspec.Meta(ge=0, le=limits.MAX_COUNT)] = 0
    loss: _Finite | None = None
    step_s: _Seconds = 0.0
    data_s: _Seconds | None = None
    forward_s: _Seconds | None = None
    backward_s: _Seconds | None = None
    optimizer_s: _Seconds | None = None
    comm_s: _Seconds | None = None
    self_s: _Seconds | None = None
    lr: _Finite | None = None
    mono: Annotated[float, msgspec.Meta(ge=-_FINITE, le=_FINITE)] = 0.0
    custom: Annotated[dict[str, float], msgspec.Meta(max_length=0)] = {}
    samples_total: Annotated[int, msgspec.Meta(ge=0, le=limits.MAX_COUNT)] | None = None
    phases: Annotated[dict[str, float], msgspec.Meta(max_length=0)] = {}


EVENTS_PER_S = 20.0
"""A rank's own events the hub takes a second, on average (checkpoints, epochs, warnings,
errors: a few a minute)..."""
EVENTS_BURST = 200.0
"""...and at once. Past them, an event is refused (too_many_events): 2,200 events of a megabyte
a second from one rank filled the log at 36 MB/s and the ingest queue to 2.5 GB."""

LIFECYCLE_EVENTS = ("error", "exit")
"""Events outside the budget: a rank that logged a warning every step and then crashed had its
error and traceback refused, the one thing the run's report needed."""

REJECTS_NOTE_S = 60.0
"""How often, at most, the hub notes in its log what it has refused so far (when that grew)."""
_REJECTS = re.compile(r"(\d+) rejected(?: \(([^)]*)\))?")
REFUSED_SAID_S = 2.0
"""A rank whose messages the hub refuses is said (a ``refused`` event, with how many) at most
this often: those messages reached the hub, so they count as rejected, not as lost."""
MAX_FOREIGN_SAID = 4
"""Other runs whose refused records the hub names, one warning each (a fuzzer's are many)."""
REJECT_REASONS = (
    "invalid", "undecodable", "too_deep", "too_large", "not_finite", "out_of_range", "rank_out_of_range",
    "foreign_run", "world_size_mismatch", "too_many_ranks", "too_many_events", "newer_version", "unknown_version",
    "verdict_from_rank", "no_key", "internal_error",
)
"""Every reason the hub refuses a message for (the keys of ``HubCore.rejected``): /metrics has a
series for each from the start, so ``increase()`` sees a run's first refusal."""
SEQ_KEPT_REASONS = frozenset(
    ("invalid", "not_finite", "out_of_range", "too_large", "too_many_events", "newer_version", "unknown_version")
)
"""Refusals of a message whose rank, run and seq are still its sender's own (its figures or its
size were wrong): its seq counts as received, so one message is not both rejected and lost."""


SHARED_RANK_S = 2.0
"""A hello from another process for a rank whose process spoke less than this ago (its
heartbeat comes each second), torchrun's restart count the same: two processes send as that
rank (see HubCore._two_say)."""

BEHIND_SAMPLES = 16
"""Passes of the ingest whose newest step tells how far behind the ranks the hub is (their
median: one rank's clock stepping is not the hub falling behind)."""
BEHIND_FRESH_S = 2.0
"""A hub that took no step for this long is behind nobody (nothing is waiting)."""

MAX_CLOCK_NOTES = 64
"""Hosts whose clock the hub says is off, at most: beyond it, hellos naming ever new hosts (a
fuzzer's) would fill the log with the same line."""


def rejects_text(rejected: dict[str, int]) -> str:
    """``37 rejected (invalid 30, too_large 7)``: how the hub's notes in the log count them."""
    total = sum(rejected.values())
    reasons = ", ".join(f"{why} {n}" for why, n in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])) if n)
    return f"{total} rejected" + (f" ({reasons})" if reasons else "")


def parse_rejects(message: str) -> dict[str, int] | None:
    """The counts a hub note of :func:`rejects_text` holds (None: it holds none)."""
    m = _REJECTS.search(message)
    if m is None:
        return None
    counts: dict[str, int] = {}
    for part in (m.group(2) or "").split(", "):
        why, _, n = part.rpartition(" ")
        if why and n.isdigit():
            counts[why] = int(n)
    return counts or ({"unknown": int(m.group(1))} if int(m.group(1)) else {})


def _defaults(cls: type) -> tuple:
    return tuple(getattr(d, "factory", d) for d in cls.__struct_defaults__)  # a {} default is a factory


assert (IngestStep.__struct_fields__, _defaults(IngestStep)) == (schema.Step.__struct_fields__, _defaults(schema.Step)), (
    "IngestStep must mirror schema.Step: its fields, their order and defaults"
)
_ingest_decode = msgspec.msgpack.Decoder(
    Union[schema.Hello, IngestStep, schema.System, schema.Event, schema.Heartbeat, schema.Verdict]
).decode
MAX_FIELD = 1024
"""A rank's short strings (a hello's host, note, device; a heartbeat's phase; a metric's name)
are cut to this many characters: a flood of hellos with megabyte hosts held gigabytes."""
_HELLO_TEXT = tuple(
    name for name, kind in zip(schema.Hello.__struct_fields__, msgspec.structs.fields(schema.Hello)) if kind.type is str
)


def _plain_hello(msg: schema.Hello) -> None:
    """Cut a hello's strings to MAX_FIELD and take out what a terminal would act on (every
    viewer shows them); its config's strings too, keys and values."""
    for name in _HELLO_TEXT:
        text = getattr(msg, name)
        if len(text) > MAX_FIELD or not text.isprintable():
            setattr(msg, name, schema.plain_text(text[:MAX_FIELD]))
    if msg.config:
        msg.config = _plain_config(msg.config)


def _plain_config(obj: Any) -> Any:
    """(config_fits has bounded its depth and size.)"""
    if isinstance(obj, str):
        return schema.plain_text(obj, lines=True)
    if isinstance(obj, dict):
        return {_plain_config(k): _plain_config(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain_config(v) for v in obj]
    return obj


def _finite(x: float | None) -> bool:
    return x is None or isfinite(x)


_STEP, _SYSTEM, _BEAT = schema.Step, schema.System, schema.Heartbeat
"""The kinds of :meth:`HubCore.replay_routine`'s short path (exactly these: not the ingest's subclass)."""


class HubCore:
    """Validates, stamps, applies, records and frames messages. No sockets, no threads."""

    def __init__(
        self, run_id: str = "", recorder: Recorder | None = None, detector: Detector | None = None, *, world_size: int = 0,
        wall_clock: Callable[[], float] | None = None,
    ) -> None:
        self.state = RunState(run_id=run_id, track_seq=True, keep_recent=True)
        self.world_size = world_size
        """The job's world size when the launcher (or ``--world-size``) said it: ranks at or
        above it are refused, hellos included. 0: learnt from the ranks' hellos."""
        self.recorder = recorder
        self.detector = detector if detector is not None else Detector()
        self.hseq = 0
        self.fseq = 0
        self.received = 0
        self.rejected: Counter[str] = Counter()
        self.redundant = 0
        """Launcher notes the rank had already sent itself (not rejects: expected)."""
        self.say: Callable[[str], None] | None = None
        """Where the hub also says a warning its operator must act on (a hub run alone: its
        stderr); viewers and the log have it as an event."""
        self._world_said = False
        self._shared_said = False
        self.recovered_at: float | None = None
        """When this hub read its log back (``Hub.recover``): the ranks' ``last_seen`` up to then
        is the reading's, not a word from them."""
        self.snapshots_served = 0
        self.hub_id = os.urandom(4).hex()
        self._pending: list[schema.Message] = []
        self._steps: dict[int, schema.Step] = {}
        """Each rank's step the next frame carries: its newest, but a rank's first step ever
        (no history yet) stays its frame's, so the run's charts start at its first loss (a run
        of 100 steps a second had its first 8 in its first frame, and its charts began at
        step 8 live, at step 3 in a replay that framed from another instant)."""
        self._held: set[int] = set()
        """Ranks whose newer steps a first step kept out of this frame: the next carries them."""
        self._framed: set[int] = set()
        """Ranks a frame has carried a step of (their newest steps go in frames at once)."""
        self._systems: dict[int, schema.System] = {}
        self._beats: dict[int, schema.Heartbeat] = {}
        self._rate_t = time.monotonic()
        self._rate_n = 0
        self._rate_hz = 0.0
        self._hello_world = 0
        """The largest world size a hello taken has said (a hub alone bounds ranks by it)."""
        self._rejects_noted = 0
        self._rejects_noted_at = -REJECTS_NOTE_S
        self._refused: dict[int, Counter[str]] = {}
        """rank -> the reasons of its messages refused since it was last said (REFUSED_SAID_S)."""
        self._refused_n = 0
        """How many messages ``_refused`` holds: received, so not lost, though no event says so yet."""
        self._refused_top: dict[int, int] = {}
        """rank -> the highest seq of its messages ``_refused`` holds."""
        self._refused_said_at: dict[int, float] = {}
        self._foreign_said: set[str] = set()
        """The other runs whose records were refused and said so (``_say_foreign``)."""
        self._event_budget: dict[int, tuple[float, float]] = {}
        """rank -> (events it may still send at once, when that was reckoned)."""
        self._ticked: float | None = None
        """Hub time of the last frame."""
        self.log_space = LogSpace()
        """Whether the log's disk will hold the run (a warning before it fills)."""
        self.wall_clock = wall_clock
        """The hub's wall clock, which each rank's hello is held against: a node whose clock is
        far off (never set: 1970; a wrong year or zone) is said live, once, where otherwise only
        the run's elapsed time, decades long, would show it. None: not held (a core fed recorded
        or made-up times)."""
        self._clocks_said: set[str] = set()
        """The hosts (a rank's number where a hello names none) whose clock was said to be off."""
        self.smooth_owed: dict[int, tuple[schema.Step, ...]] = {}
        """rank -> its last steps as a lean frame (see :meth:`tick`) left them: the medians that
        frame did not work out, owed to its viewer."""
        self._stats_sent: frames.HubStats | None = None
        """The counts of the last frame that worked them out (a lean frame carries them again)."""
        self._sent_base: dict[int, float] = {}
        """rank -> the least of (the hub's wall clock as it took a message of the rank's) less
        (the message's time): the two clocks' offset and the transit, against which a message
        taken later than that was waiting for the hub (see :meth:`behind_s`)."""
        self._behind: deque[float] = deque(maxlen=BEHIND_SAMPLES)
        self._behind_at: float | None = None
        """Hub time of the last sample in ``_behind``."""

    # -- ingest ---------------------------------------------------------------------------

    def ingest_bytes(self, raw: bytes, now: float) -> bool:
        """Decode and take one frame from a rank; False (and counted) if refused. Never
        raises: whatever arrives is taken or counted under a reason."""
        return self.ingest_batch((raw,), now) == 1

    def ingest_batch(self, raws: Iterable[bytes], now: float) -> int:
        """Take frames in order, each as :meth:`ingest_bytes` would; returns how many were
        taken. Never raises.

        The hub's loop hands over what one pass received. Nearly every frame at scale is a step
        of a known rank with every figure plainly valid (which msgspec checks as it decodes it,
        see :class:`IngestStep`): those are taken here, with the effects
        :meth:`ingest` would have (a property test holds the two paths to the same state, counts
        and log) but without its general dispatch, one Python call per frame instead of six.
        Anything else (another kind, an odd figure, custom metrics or phases, a frame that does
        not decode) goes the general way."""
        decode, decode_plain = _ingest_decode, schema.decode
        st = self.state
        ranks = st.ranks
        run_id = st.run_id
        rec_buf = self.recorder.pending if self.recorder is not None else None
        track_seq = st.track_seq
        latest, framed = self._steps, self._framed
        fresh: list[schema.Step] = []
        keep = fresh.append
        max_bytes = limits.MAX_RECORD_BYTES
        world = self._world()  # a rank recovered from an older log may lie above it
        taken = fast = 0
        h = self.hseq
        t_last = st.t_last
        why = ""
        frames_left = iter(raws)
        while True:
            try:
                for raw in frames_left:
                    try:
                        m = decode(raw)
                    except msgspec.ValidationError:
                        # Outside a short-path step's bounds, or not of the schema at all: the
                        # plain decode tells (and the general way names the reason).
                        try:
                            m = decode_plain(raw)
                        except msgspec.ValidationError:
                            m, why = None, "invalid"
                        except msgspec.DecodeError:
                            m, why = None, "undecodable"
                        except RecursionError:
                            m, why = None, "too_deep"
                    except msgspec.DecodeError:
                        m, why = None, "undecodable"
                    except RecursionError:  # msgspec's answer to nesting deeper than Python's stack
                        m, why = None, "too_deep"
                    if type(m) is IngestStep:
                        # Every figure is known finite and in range (the decode checked them).
                        r = ranks.get(m.rank)
                        if (
                            r is not None
                            and not r.awaited  # (its first word after a restart goes the general way)
                            and st.t0
                            and m.rank < world
                            and (not m.run or m.run == run_id)
                            and (m.seq <= r.seq.max_seq + MAX_SEQ_JUMP or not r.seq.received)
                            and len(raw) <= max_bytes
                        ):
                            # What ingest -> replay -> RunState.apply do with such a step.
                            t = m.t
                            h += 1
                            m.hseq = h
                            if t > t_last:
                                t_last = t
                            r.last_seen = now
                            if track_seq:
                                sq = r.seq
                                sq.received += 1
                                if m.seq > sq.max_seq:
                                    sq.max_seq = m.seq
                            r.steps_seen += 1
                            newest = r.step
                            if newest is None or m.seq >= newest.seq:  # the rank's own order (RunState.apply)
                                r.step = m
                                r.recent.append(m)  # (its last few: the grid's medians, worked out once a frame)
                                if m.rank in framed or m.rank not in latest:
                                    latest[m.rank] = m
                                else:
                                    self._held.add(m.rank)
                            if rec_buf is not None:
                                rec_buf.append(m)
                            keep(m)
                            fast += 1
                            continue
                        m = decode_plain(raw)  # the general way takes the schema's own Step
                    # The general way. What the fast path holds is booked first: order is kept.
                    if fast:
                        self._settle(fast, fresh, h, t_last)
                        taken += fast
                        fresh, fast = [], 0
                        keep = fresh.append
                    if m is None:
                        self.rejected[why] += 1
                        if why == "invalid":
                            self._refused_raw(raw, why)
                    elif self._ingest_decoded(m, len(raw), now):
                        taken += 1
                    h, t_last = self.hseq, st.t_last
                break
            except Exception:
                # A last guard: the checks are meant to make this unreachable (the fuzz tests
                # assert it stays 0), but a bug must cost one record, never the hub.
                self.rejected["internal_error"] += 1
                if fast:
                    self._settle(fast, fresh, h, t_last)
                    taken += fast
                    fresh, fast = [], 0
                    keep = fresh.append
                h, t_last = self.hseq, st.t_last
        if fast:
            self._settle(fast, fresh, h, t_last)
            taken += fast
        if self.recorder is not None:
            self.recorder.encode()
        return taken

    def _world(self) -> int:
        """Ranks at or above this are refused: the size the launcher told, else (a hub alone)
        the largest size a hello has said (a job may grow: an elastic scale-up, a requeue on
        more nodes), so a flood of made-up ranks without a hello cannot take the room of the
        job's own (MAX_RANKS_TRACKED); before any hello, MAX_RANK."""
        return self.world_size or self._hello_world or MAX_RANK

    def _settle(self, n: int, steps: list[schema.Step], h: int, t_last: float) -> None:
        """Book ``n`` steps taken by the fast path: counters, clocks, the detector."""
        st = self.state
        self.hseq = st.hseq = h
        st.t_last = t_last
        self.received += n
        self._rate_n += n
        counts = st.counts
        counts["step"] = counts.get("step", 0) + n
        if self.recorder is not None:
            self.recorder.lines += n
        self.detector.stragglers.observe_many(steps)
        if self.wall_clock is not None and steps:
            self._sample_behind(steps[-1], self.state.ranks[steps[-1].rank].last_seen)

    def _sample_behind(self, m: schema.Message, now: float) -> None:
        """How long ``m`` (the newest step of an ingest pass) waited to be taken, beyond its
        rank's least wait so far (its clock's offset from the hub's and the transit)."""
        assert self.wall_clock is not None
        waited = self.wall_clock() - m.t
        base = self._sent_base.get(m.rank)
        if base is None or waited < base:
            self._sent_base[m.rank] = base = waited
        self._behind.append(waited - base)
        self._behind_at = now

    def behind_s(self, now: float) -> float:
        """Seconds the steps the hub takes now were sent before it took them, beyond their
        ranks' least (see ``_sent_base``): how far behind the ranks the hub, and what its viewers
        and log show, is (a hub on 2 busy cores, 4096 ranks at 10 steps a second, a minute
        behind them, and nothing said it). 0: keeping up, or nothing to tell (a core fed recorded
        messages, no step taken for BEHIND_FRESH_S)."""
        if self._behind_at is None or now - self._behind_at > BEHIND_FRESH_S:
            return 0.0
        return max(0.0, statistics.median(list(self._behind)))  # (a copy: /metrics reads it from its own thread)

    def _ingest_decoded(self, msg: schema.Message, size: int, now: float) -> bool:
        """The general way for one decoded frame of ``size`` bytes."""
        if size > limits.MAX_RECORD_BYTES and not isinstance(msg, schema.Event):
            if not isinstance(msg, schema.Hello) or size > limits.MAX_HELLO_BYTES:
                self.rejected["too_large"] += 1
                return False
        try:
            return self.ingest(msg, now)
        except Exception:
            # A last guard: the checks in _refuse are meant to make this unreachable (the fuzz
            # tests assert it stays 0), but a bug must cost one record, never the hub.
            self.rejected["internal_error"] += 1
            return False

    def _refuse(self, msg: schema.Message) -> str | None:
        if msg.v > schema.SCHEMA_VERSION:
            return "newer_version"
        if msg.v < 1:
            return "unknown_version"
        if isinstance(msg, schema.Verdict):
            return "verdict_from_rank"
        if not 0 <= msg.rank < MAX_RANK or (not isinstance(msg, schema.Hello) and msg.rank >= self._world()) or (
            self.world_size and msg.rank >= self.world_size
        ):
            return "rank_out_of_range"
        if self.state.run_id and msg.run and msg.run != self.state.run_id:
            return "foreign_run"
        if not _finite(msg.t):
            return "not_finite"
        if msg.t < 0 or msg.seq > limits.MAX_COUNT:
            return "out_of_range"
        r = self.state.ranks.get(msg.rank)
        if r is not None and r.seq.received and msg.seq > r.seq.max_seq + MAX_SEQ_JUMP and not isinstance(msg, schema.Hello):
            return "out_of_range"  # one such message would count 10^14 lost for good
        if isinstance(msg, schema.Step):
            for x in (msg.step_s, msg.data_s, msg.forward_s, msg.backward_s, msg.optimizer_s, msg.comm_s, msg.self_s):
                if x is not None and not (isfinite(x) and x >= 0):
                    return "not_finite"
                if x is not None and x > MAX_STEP_S:
                    return "out_of_range"
            if not 0 <= msg.step <= limits.MAX_COUNT:
                return "out_of_range"
            if msg.samples_total is not None and not 0 <= msg.samples_total <= limits.MAX_COUNT:
                return "out_of_range"
            # A loss or learning rate gone NaN or infinite is the rank's news, not a bad message:
            # the step is kept without it (JSON has no NaN; viewers must not chart it), as the
            # reporter does on its side.
            if msg.loss is not None and not isfinite(msg.loss):
                msg.loss = None
            if msg.lr is not None and not isfinite(msg.lr):
                msg.lr = None
            if not isfinite(msg.mono):
                return "not_finite"
            if msg.custom:
                if len(msg.custom) > limits.MAX_CUSTOM:
                    return "too_large"
                # JSON has no inf or NaN: such a metric would make the whole log line unreadable.
                for x in msg.custom.values():
                    if not isfinite(x):
                        msg.custom = {k: x for k, x in msg.custom.items() if isfinite(x)}
                        break
                if not all(k.isprintable() and len(k) <= MAX_FIELD for k in msg.custom):
                    msg.custom = {schema.plain_text(k[:MAX_FIELD]): x for k, x in msg.custom.items()}
            if msg.phases and (why := self._refuse_phases(msg)) is not None:
                return why
        elif isinstance(msg, schema.Heartbeat):
            if not 0 <= msg.dropped <= limits.MAX_COUNT:
                return "out_of_range"
            msg.phase = schema.plain_text(msg.phase[:MAX_FIELD])
            if msg.waits_in:
                msg.waits_in = schema.plain_text(msg.waits_in[:MAX_FIELD])
            if not (isfinite(msg.phase_s) and isfinite(msg.mono)):
                return "not_finite"
        elif isinstance(msg, schema.Hello):
            if not 1 <= msg.world_size <= MAX_RANK or msg.rank >= msg.world_size:
                return "rank_out_of_range"
            if self.world_size and msg.world_size != self.world_size:
                # The launcher said the job's size: a hello saying otherwise would set the run's
                # world size (the ZeRO expectation, /metrics) to its word.
                return "world_size_mismatch"

            if not limits.config_fits(msg.config):
                return "too_large"
            _plain_hello(msg)
        elif isinstance(msg, schema.Event):
            if len(msg.name) > 64:
                return "invalid"
            # An error report is worth keeping even when huge: cut it rather than refuse it.
            if len(msg.message) > limits.MAX_TEXT:
                msg.message = limits.cut_text(msg.message, limits.MAX_TEXT)
            if msg.traceback is not None and len(msg.traceback) > limits.MAX_TRACEBACK:
                msg.traceback = limits.cut_text(msg.traceback, limits.MAX_TRACEBACK, keep_tail=True)
            msg.name = schema.plain_text(msg.name)
            msg.message = schema.plain_text(msg.message, lines=True)
            if msg.traceback is not None:
                msg.traceback = schema.plain_text(msg.traceback, lines=True)
        if msg.rank not in self.state.ranks and len(self.state.ranks) >= limits.MAX_RANKS_TRACKED:
            return "too_many_ranks"
        hello = self.state.hello
        if msg.seq < 0:
            # Said by the launcher on a rank's behalf (a worker torchrun saw die); redundant
            # when the rank said it itself. The launcher only ever says events, with seq -1.
            if not isinstance(msg, schema.Event) or msg.seq != -1:
                return "out_of_range"
            r = self.state.ranks.get(msg.rank)
            if msg.name == "restart":
                # torchrun's restart of the rank (code: its count), which its hello may have
                # said first
                if msg.code is None or not 0 < msg.code <= limits.MAX_COUNT:
                    return "out_of_range"
                if r is not None and r.restarts >= self.state.restarts_before + msg.code:
                    return "redundant"
            elif r is not None and (r.exit_code is not None or r.finished):
                return "redundant"
        if hello is not None and hello.world_size and msg.rank >= max(hello.world_size, 1) and not isinstance(msg, schema.Hello):
            if msg.rank not in self.state.ranks:
                return "rank_out_of_range"
        return None

    def _say_foreign(self, msg: schema.Message) -> None:
        """Records of another run (a job started with a stale or mistyped PARDASH_RUN_ID) are
        refused whole: said at once, for each such run (the first few), where otherwise the run
        went unrecorded with nothing said but a count in the log a minute later."""
        run = schema.plain_text(msg.run[:64])
        if run in self._foreign_said or len(self._foreign_said) > MAX_FOREIGN_SAID:
            return
        self._foreign_said.add(run)
        if len(self._foreign_said) > MAX_FOREIGN_SAID:
            self.warn("records of yet more other runs are refused too (not said one by one)")
            return
        ours = self.state.run_id
        self.warn(
            f"refusing every record of run {run!r} (rank {msg.rank} is the first): this hub records run {ours!r}; "
            f"start the job with PARDASH_RUN_ID={ours}, or this hub with --run-id {shlex.quote(run)}"
        )

    def _refused_seq(self, rank: int, seq: int, run: str, reason: str) -> None:
        """A message of a known rank refused for ``reason``, its seq its own: held to be said
        (:meth:`say_refused`), and meanwhile not counted as lost (:meth:`stats`)."""
        st = self.state
        r = st.ranks.get(rank)
        if (
            r is None
            or not st.track_seq
            or type(seq) is not int
            or not 0 <= seq <= limits.MAX_COUNT
            or (run and st.run_id and run != st.run_id)
            or (r.seq.received and seq > r.seq.max_seq + MAX_SEQ_JUMP)
        ):
            return
        held = self._refused.get(rank)
        if held is None:
            if len(self._refused) >= limits.MAX_RANKS_TRACKED:
                return
            held = self._refused[rank] = Counter()
        held[reason] += 1
        self._refused_n += 1
        self._refused_top[rank] = max(seq, self._refused_top.get(rank, -1))
        if seq > r.seq.max_seq:
            # (its highest seq: a real gap before it is lost, and this one counts in stats as
            # received, ``_refused_n``, until said)
            r.seq.max_seq = seq

    def _refused_raw(self, raw: bytes, reason: str) -> None:
        """A frame that is MessagePack but not of the schema (a figure of the wrong type): its
        rank, run and seq as it says them, when it says them plainly."""
        try:
            d = msgspec.msgpack.decode(raw)
        except Exception:  # (nested past the stack, and so on: nothing to tell)
            return
        if isinstance(d, dict) and type(d.get("rank")) is int and type(d.get("seq", 0)) is int:
            run = d.get("run", "")
            self._refused_seq(d["rank"], d.get("seq", 0), run if isinstance(run, str) else "?", reason)

    def say_refused(self, now: float, *, all_of_them: bool = False) -> None:
        """Say each rank's refused messages (a ``refused`` event, seq -1, ``code`` their number),
        at most once every REFUSED_SAID_S a rank (``all_of_them``: now, as the hub stops): its
        log then counts them as received (RunState.apply), the seq gaps they left not lost."""
        for rank in list(self._refused):
            if not all_of_them and now - self._refused_said_at.get(rank, -REFUSED_SAID_S) < REFUSED_SAID_S:
                continue
            self._say_refused_of(rank, now)

    def _say_refused_of(self, rank: int, now: float) -> None:
        reasons = self._refused.pop(rank)
        n = sum(reasons.values())
        self._refused_n -= n
        self._refused_said_at[rank] = now
        top = self._refused_top.pop(rank)
        why = ", ".join(f"{what} {k:,}" for what, k in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        self.note(f"rank {rank}: {n:,} message(s) refused ({why}), up to its message {top}; they reached the hub, so they are "
                  "not counted as lost", name="refused", rank=rank, code=n)  # fmt: skip

    def _over_budget(self, rank: int, now: float) -> bool:
        """Take one of ``rank``'s events from its budget (a token bucket); True when it has none."""
        left, at = self._event_budget.get(rank, (EVENTS_BURST, now))
        left = min(EVENTS_BURST, left + (now - at) * EVENTS_PER_S)
        if left < 1.0:
            self._event_budget[rank] = (left, now)
            return True
        self._event_budget[rank] = (left - 1.0, now)
        return False

    @staticmethod
    def _refuse_phases(msg: schema.Step) -> str | None:
        """The script's own phases judged as its custom metrics are (too many: the step is
        refused; one not finite: left out, JSON having none), and as the step's times are: a
        negative one, or one past MAX_STEP_S, refuses the step. Names are shown: cut, plain."""
        phases = msg.phases
        if len(phases) > limits.MAX_CUSTOM:
            return "too_large"
        for x in phases.values():
            if not isfinite(x):
                phases = msg.phases = {k: x for k, x in phases.items() if isfinite(x)}
                break
        for x in phases.values():
            if not 0.0 <= x <= MAX_STEP_S:
                return "out_of_range"
        if not all(k.isprintable() and len(k) <= MAX_FIELD for k in phases):
            msg.phases = {schema.plain_text(k[:MAX_FIELD]): x for k, x in phases.items()}
        return None

    def ingest(self, msg: schema.Message, now: float) -> bool:
        reason = self._refuse(msg)
        if (
            reason is None
            and isinstance(msg, schema.Event)
            and msg.seq >= 0
            and msg.name not in LIFECYCLE_EVENTS  # a rank's error and exit are never too many
            and self._over_budget(msg.rank, now)
        ):
            reason = "too_many_events"
        if reason is not None:
            if reason == "foreign_run":
                self._say_foreign(msg)
            if reason == "world_size_mismatch" and not self._world_said:
                self._world_said = True
                self.warn(
                    f"rank {msg.rank} says its job has {msg.world_size} ranks (its hello), but this hub was told "  # type: ignore[union-attr]
                    f"{self.world_size} (--world-size): its hellos are refused, so hosts, strategy and model facts "
                    "stay unknown; start the hub with the job's --world-size, or without it"
                )
            if reason != "redundant":
                self.rejected[reason] += 1
                if reason in SEQ_KEPT_REASONS:
                    self._refused_seq(msg.rank, msg.seq, msg.run, reason)
            else:
                self.redundant += 1
            return False
        self._rate_n += 1
        if msg.rank in self._refused and (isinstance(msg, schema.Hello) or (isinstance(msg, schema.Event) and msg.name == "restart")):
            # Before a new process's count starts (RunState.apply): the old one's refusals are
            # its own (said later, they hid the new process's real losses).
            self._say_refused_of(msg.rank, now)
        if isinstance(msg, schema.Hello):
            prev = self.state.ranks.get(msg.rank)
            if prev is not None and not self._shared_said:
                self._two_say(prev, msg, now)
            if prev is not None and prev.hello is not None and msg.pid and msg.pid != prev.hello.pid and msg.restart <= prev.hello.restart:
                # (a count lower than the last job's: a new job after one torchrun restarted)
                self._say_run_again(msg)
            if prev is not None and prev.hello is not None and msg.restart > prev.hello.restart:
                if not any(r.hello is not None and r.hello.restart >= msg.restart for r in self.state.ranks.values()):
                    self.detector.stragglers.restart()  # the first rank of the new attempt
            if prev is not None and self.state.restarts_before + msg.restart > prev.restarts:  # (unless the launcher said it first)
                # (torchrun's count is its job's; the rank's, the run's: a job run again after
                # one torchrun restarted counts from 0, RunState.restarts_before)
                self.note(
                    f"rank {msg.rank} restarted by torchrun (restart {msg.restart}, pid {msg.pid})",
                    name="restart",
                    rank=msg.rank,
                    code=msg.restart,
                )
            if self.wall_clock is not None:
                self._hold_clock(msg)
        self.replay(msg, now)
        return True

    @property
    def steps_waiting(self) -> bool:
        """Whether a step waits for the next frame (after the last record of a log: a newest
        step that its rank's first step held back): a replay at its log's end makes that frame
        too."""
        return bool(self._steps)

    def pending_ranks(self) -> set[int]:
        """The ranks the messages waiting for the next frame (notes, events, verdicts) are of
        (-1: the hub's own)."""
        return {m.rank for m in self._pending}

    @property
    def has_pending(self) -> bool:
        """Whether a message (a note, an event, a verdict) waits for the next frame."""
        return bool(self._pending)

    def framed(self, steps: Iterable[schema.Step]) -> None:
        """Note that the ranks of ``steps`` have had a step in a frame (their history has it)."""
        self._framed.update(s.rank for s in steps)

    def _two_say(self, prev: RankState, hello: schema.Hello, now: float) -> None:
        """Warn once when ``hello`` comes from another process than the rank's own, which still
        sends (heard from within SHARED_RANK_S, neither ended nor restarted by torchrun), in a
        job of the same size: two jobs given the same run id by a hub run alone (its
        PARDASH_RUN_ID exported in two shells), or two nodes started with the same node rank.
        Their messages mix in one rank (its steps, its lost count), which the hub cannot tell
        apart; said, the user can. (torchrun counts its restarts, not its workers started again
        when nodes join an elastic job: the job's size tells those.)"""
        was = prev.hello
        if (
            was is None
            or hello.seq < 0
            or not hello.pid
            or hello.pid == was.pid
            or hello.restart != was.restart
            or hello.world_size != was.world_size  # torchrun's workers started again for new nodes
            or prev.finished
            or prev.exit_code is not None
            or now - prev.last_seen >= SHARED_RANK_S
            or (self.recovered_at is not None and prev.last_seen <= self.recovered_at)
        ):
            return
        self._shared_said = True

        def on(h: schema.Hello) -> str:
            return f"pid {h.pid}" + (f" on {h.host}" if h.host else "")

        self.warn(
            f"rank {hello.rank}: {on(hello)} says it is rank {hello.rank} while {on(was)} still sends as it: "
            f"two jobs share run id {self.state.run_id} (or two nodes the same ranks), and their figures mix; "
            "give each job its own hub or PARDASH_RUN_ID"
        )

    def _say_run_again(self, hello: schema.Hello) -> None:
        """Say when a rank's new process says hello after every rank had ended, torchrun's
        count unchanged: a job run again under the run's id (a hub run alone keeps serving it),
        whether a resume by hand or a PARDASH_RUN_ID left exported. Its records go on in the
        same log, where the report takes it as another attempt; nothing said, a second job read
        as the first's, 15 s idle between them taken for training. Once a rerun: its first
        hello makes its rank live again."""
        ranks = self.state.ranks.values()
        if not all(r.finished or r.exit_code is not None for r in ranks):
            return
        on = f" on {hello.host}" if hello.host else ""
        # (its start is the contract state.run_again reads: the next attempt of the run begins here)
        message = (f"rank {hello.rank} started again (pid {hello.pid}{on}) after every rank of run {self.state.run_id} "
                   "had ended: a new job under this run's id, whose records go on in its log (give each job its own "
                   "PARDASH_RUN_ID to keep them apart)")  # fmt: skip
        self.note(message)
        self._shared_said = False  # (a new job: another started beside it is a clash of its own, said again)
        if self.say is not None:
            self.say(message)

    def _hold_clock(self, hello: schema.Hello) -> None:
        """Say once per host when a hello's time is further from the hub's than CLOCK_OFF_S
        (sent seconds before it is taken: a hello goes at once, and is held only until the hub
        binds). The report and replay judge the same from the log after the run."""
        assert self.wall_clock is not None
        off = hello.t - self.wall_clock()
        where = hello.host or f"rank {hello.rank}"
        if abs(off) <= CLOCK_OFF_S or where in self._clocks_said or len(self._clocks_said) >= MAX_CLOCK_NOTES:
            return  # (hellos naming ever new hosts, a fuzzer's, say no more than that many)
        self._clocks_said.add(where)
        on = f" (host {hello.host})" if hello.host else ""
        how = f"{human_span(off)} {'ahead of' if off > 0 else 'behind'}"
        self.warn(f"rank {hello.rank}'s clock{on} is {how} the hub's: one of the two is wrong (or the hello waited "
                   "that long for the hub); set the wrong clock (NTP)")

    def replay(self, msg: schema.Message, now: float) -> None:
        """Take a message without judging it (recorded logs, whose verdicts are recorded)."""
        self.received += 1
        self._take(msg, now)
        if isinstance(msg, schema.Step):
            r = self.state.ranks.get(msg.rank)
            if r is not None and r.step is msg:  # the rank's newest step (see RunState.apply)
                r.recent.append(msg)  # type: ignore[union-attr]  (the hub's state keeps them)
                if msg.rank in self._framed or msg.rank not in self._steps:
                    self._steps[msg.rank] = msg
                else:
                    self._held.add(msg.rank)
            self.detector.stragglers.observe(msg)
        elif isinstance(msg, schema.Heartbeat):
            self._beats[msg.rank] = msg
        elif isinstance(msg, schema.Hello):
            if msg.world_size > self._hello_world:
                self._hello_world = msg.world_size
            self._pending.append(msg)
        elif isinstance(msg, schema.System):
            self._systems[msg.rank] = msg
        else:
            self._pending.append(msg)

    def replay_routine(self, msg: schema.Message, now: float) -> None:
        """:meth:`replay`, with a short path for what nearly all of a log is (a step, system
        sample or heartbeat of a rank known and in its plain state, the state's first record
        and run id taken): the effects ``replay`` -> ``RunState.apply`` have on such a record,
        in one call instead of six (a replay's seek plays millions of them). The rest goes
        the general way: so does a record that may be a restarted rank's previous process's
        late word (numbered past that process's last, older than the new one's hello: see
        ``RunState.apply``), but not the new process's own records after it, the rest of a
        log (a days-long log restarted early took none of them the short way)."""
        cls = type(msg)
        st = self.state
        r = st.ranks.get(msg.rank) if cls is _STEP or cls is _SYSTEM or cls is _BEAT else None
        t = msg.t
        if (
            r is None
            or r.awaited
            or (r.before_top is not None and msg.seq > r.before_top and r.hello is not None and t < r.hello.t)
            or self.recorder is not None
            or not t
            or not st.t0
            or (msg.run and not st.run_id)
            or msg.seq < 0
            or not st.track_seq
        ):
            self.replay(msg, now)
            return
        self.received += 1
        h = self.hseq = self.hseq + 1
        msg.hseq = h
        kind = msg.__struct_config__.tag
        counts = st.counts
        counts[kind] = counts.get(kind, 0) + 1
        if h > st.hseq:
            st.hseq = h
        ceiling = st.t_ceiling
        if st.t_last < t < ceiling:
            st.t_last = t
        if st.t_last_rank < t < ceiling:
            st.t_last_rank = t
        r.last_seen = now
        sq = r.seq
        sq.received += 1
        if msg.seq > sq.max_seq:
            sq.max_seq = msg.seq
        rank = msg.rank
        if cls is _STEP:
            newest = r.step
            if newest is None or msg.seq >= newest.seq:
                r.step = msg
            r.steps_seen += 1
            if msg.custom:
                keep_custom(r, msg.custom)
            if r.step is msg:
                r.recent.append(msg)  # type: ignore[union-attr]
                if rank in self._framed or rank not in self._steps:
                    self._steps[rank] = msg
                else:
                    self._held.add(rank)
            self.detector.stragglers.observe(msg)
        elif cls is _BEAT:
            r.heartbeat = msg
            self._beats[rank] = msg
        else:
            r.system = msg
            self._systems[rank] = msg

    def _take(self, msg: schema.Message, now: float) -> None:
        self.hseq += 1
        msg.hseq = self.hseq
        self.state.apply(msg, now)
        if msg.__class__ is schema.Event and msg.rank >= 0:
            self.detector.stragglers.note_event(msg)  # (a rank's own save or evaluation: see holds.py)
        if self.recorder is not None:
            self.recorder.write(msg)

    def note(self, message: str, name: str = "hub", rank: int = -1, code: int | None = None) -> None:
        """Record an event the hub concluded (rank -1: about the hub itself) in the log and
        the event stream; seq -1 keeps it out of the rank's own message count."""
        # (plain text: a note may carry a path or the command, whose bytes need not be UTF-8)
        ev = schema.Event(rank=rank, seq=-1, name=name, message=schema.plain_text(message, lines=True), t=time.time(), run=self.state.run_id,
                          code=code)  # fmt: skip
        self._take(ev, time.monotonic())
        self._pending.append(ev)

    def warn(self, message: str) -> None:
        """A warning in the log and to viewers, and on the stderr of a hub run alone (``say``)."""
        self.note(message, name="warning")
        if self.say is not None:
            self.say(message)

    def verdict(self, v: schema.Verdict) -> None:
        """Record a verdict (from the detector or the launcher) and send it to viewers; seq -1,
        as the hub's own notes: a verdict is said about a rank, not by it."""
        v.run = self.state.run_id
        v.seq = -1
        v.t = v.t or time.time()
        self._take(v, time.monotonic())
        self._pending.append(v)

    # -- frames ---------------------------------------------------------------------------

    def stats(self, now: float | None = None) -> frames.HubStats:
        """The counts viewers show; ``now``: the hub's monotonic clock (None: read it)."""
        dropped = sum(r.heartbeat.dropped for r in self.state.ranks.values() if r.heartbeat is not None)
        rec = self.recorder
        big = (1 << 63) - 1  # hostile counts summed over many ranks must still encode
        return frames.HubStats(
            received=self.received,
            rejected=dict(self.rejected),
            lost=min(max(0, self.state.lost - self._refused_n), big),
            dropped=min(dropped, big),
            ingest_hz=self._rate_hz,
            # (a simulate's hub records to /dev/null: no log, which its viewers' headers said it was)
            log_path=str(rec.path) if rec and str(rec.path) != os.devnull else "",
            log_error=rec.error if rec else "",
            log_bytes=rec.size() if rec and str(rec.path) != os.devnull else 0,
            log_full_in_s=self._log_full_in(now),
            viewers=self.snapshots_served,
            behind_s=round(self.behind_s(time.monotonic() if now is None else now), 1),
        )

    def _log_full_in(self, now: float | None) -> float:
        """HubStats.log_full_in_s: seconds until the log's disk fills, while it will."""
        full_at = self.log_space.full_at
        if full_at is None:
            return 0.0
        return float(max(1, round(full_at - (time.monotonic() if now is None else now))))

    def tick(self, now: float, *, lean: bool = False) -> frames.Frame:
        """Judge, then fold everything since the last frame into a new one. ``lean``: a frame no
        one sees (a replay's seek on its way, played for what the frames after it build on): it
        works out neither its ranks' medians, left in :attr:`smooth_owed`, nor the hub's counts,
        the last frame's carried again; its viewer takes both once the seek is there. (Its own
        ranks' ``smooth`` stay the last full frame's: only a snapshot reads them, and a replay's
        core serves none.)"""
        if self._ticked is not None and now - self._ticked > HUB_AWAY_S:
            # Back from a pause of its own: the ranks' backlog is still coming in (taken from
            # each socket in turn), and a rank whose turn has not come read as silent.
            self.detector.hub_was_away(now)
        self._ticked = now
        if now - self._rate_t >= 1.0:
            self._rate_hz = self._rate_n / (now - self._rate_t)
            self._rate_t, self._rate_n = now, 0
        for v in self.detector.update(self.state, now):
            self.verdict(v)
        rec = self.recorder
        while rec is not None and rec.notices:
            self.note(rec.notices.popleft(), name="warning")
        if rec is not None and not lean and self.log_space.due(now):
            said = self.log_space.check(now, rec.path, rec.size(), self.state.step, total_steps(self.state.hello))
            if said:
                self.warn(said)
        rejected = sum(self.rejected.values())
        if rec is not None and rejected != self._rejects_noted and now - self._rejects_noted_at >= REJECTS_NOTE_S:
            # In the log as it goes, so a hub killed outright still leaves its count there.
            self._rejects_noted, self._rejects_noted_at = rejected, now
            self.note(f"refused so far: {rejects_text(self.rejected)}")
        if self._refused:
            self.say_refused(now)
        steps = list(self._steps.values())
        messages: list[schema.Message] = self._pending
        messages.extend(self._systems.values())
        messages.extend(self._beats.values())
        messages.extend(steps)
        self._pending = []
        self._steps.clear()
        self._systems.clear()
        self._beats.clear()
        self.state.commit_history(steps)
        self.framed(steps)
        # The medians of each stepping rank's last steps, of every step it took: the frame's
        # steps are some of them (one a rank a frame), cut where the frame fell.
        smooth = {}
        ranks = self.state.ranks
        if lean:
            owed = self.smooth_owed
            for s in steps:
                r = ranks[s.rank]  # (commit_history made it)
                if r.recent:
                    owed[s.rank] = tuple(r.recent)  # (as they are now: a new process empties them)
        else:
            for s in steps:
                r = ranks[s.rank]  # (commit_history made it)
                if r.recent:  # (none: a new process's hello came after the step)
                    smooth[s.rank] = r.smooth = smooth_of(r.recent)
        if self._held:
            for rank in self._held:
                r = self.state.ranks.get(rank)
                if r is not None and r.step is not None:
                    self._steps[rank] = r.step
            self._held.clear()
        self.fseq += 1
        if self.recorder is not None:
            self.recorder.flush_soon()
        stats = self._stats_sent
        if not lean or stats is None:
            stats = self._stats_sent = self.stats(now)
        # The steps travel once, in ``messages``: each is also its rank's history point.
        return frames.Frame(
            fseq=self.fseq, hseq=self.hseq, t=time.time(), hub_id=self.hub_id, messages=messages, stats=stats, smooth=smooth
        )

    def snapshot(self) -> frames.Snapshot:
        """State as of the last frame (call right after ``tick``)."""
        self.snapshots_served += 1
        st = self.state
        events = st.events_for_snapshot()
        # A rank's loss gone NaN is said once, as it turns so: its warning, pushed out of the
        # event log by later events, is sent still (in its place in the hub's order, after its
        # process's hello), or a viewer attaching later read the rank as healthy.
        told = {m.hseq or id(m) for m in events}
        loss_bad = [m for r in st.ranks.values() if (m := r.loss_bad) is not None and (m.hseq or id(m)) not in told]
        # In the hub's order: a rank's exit before torchrun restarted it, then its new hello
        # (applied the other way round, the restarted rank would read as exited).
        msgs: list[schema.Message] = sorted(
            [r.hello for r in st.ranks.values() if r.hello is not None] + events + loss_bad, key=lambda m: m.hseq
        )
        sent = {id(m) for m in events}
        for r in st.ranks.values():
            for m in (r.system, r.heartbeat, r.step):
                if m is not None:
                    msgs.append(m)
            for v in (r.straggler, r.stalled, r.silent, r.not_sharding):
                if v is not None and id(v) not in sent:
                    msgs.append(v)
        history = {r.rank: r.history.columns_bytes() for r in st.ranks.values()}
        return frames.Snapshot(
            fseq=self.fseq,
            hseq=self.hseq,
            t=time.time(),
            hub_id=self.hub_id,
            run_id=st.run_id,
            t0=st.t0,
            first_hello_t=st.first_hello_t,
            command=st.command or [],
            messages=msgs,
            history=history,
            stats=self.stats(),
            trend=st.trend.to_data(),
            smooth={r.rank: r.smooth for r in st.ranks.values() if r.smooth is not None},
        )
