"""How a viewer (TUI, headless printer) follows a run: a live hub or a recorded log.

Both sources keep a :class:`RunState` built only from the hub's frames and snapshots, so a
viewer that attaches late and one that was there from the start show the same thing, and
replay runs through the very same code as a live run.
"""

from __future__ import annotations

import math
import os
import re
import stat
import time
from collections import deque
from typing import Protocol

import msgspec
import zmq

from . import frames, registry, schema, security
from .cliargs import StartStep
from .clocks import CLOCK_OFF_S, RankClocks, is_hub_side
from .hubcore import HubCore
from .keyframes import Keyframes
from .logreader import PROGRESS_EVERY, LogCursor, LogReadStats, LogTail, Progress, no_records, read_log
from .recorder import is_gzip
from .state import RunState, run_over, smooth_of


class AttachError(Exception):
    """The hub could not be reached or found; the message says what to do."""


class Source(Protocol):
    """What the TUI and the headless printer read from."""

    state: RunState
    stats: frames.HubStats
    live: bool
    """True for a hub, False for a replay."""
    fseq: int

    def poll(self) -> bool:
        """Apply whatever arrived; True if the state changed. Never blocks."""

    def sockets(self) -> list[zmq.Socket]:
        """Sockets whose readiness means poll() has something (empty: poll on a timer)."""

    def close(self) -> None: ...


class FrameApplier:
    """Builds a viewer's RunState from a snapshot and the frames after it."""

    live = False
    """Frames from a running hub, stamped with its clock (a replay's are made now, by this
    process: a log recorded on a clock ahead of this machine's is no clock error of a rank's)."""

    def __init__(self) -> None:
        self.state = RunState(track_seq=False)
        self.stats = frames.HubStats()
        self.fseq = 0
        self.hub_id = ""
        self.frames_applied = 0
        self.last_frame_t = 0.0
        """Wall clock at which the last frame was made (hub side)."""

    def sockets(self) -> list[zmq.Socket]:
        """None: a replay (or any source without sockets) is polled on a timer."""
        return []

    def load_snapshot(self, snap: frames.Snapshot) -> None:
        st = RunState(run_id=snap.run_id, track_seq=False, t0=snap.t0, t_ceiling=snap.t + CLOCK_OFF_S if self.live else math.inf)
        now = time.monotonic()
        for rank in sorted({m.rank for m in snap.messages if isinstance(m, schema.Hello)}):
            st.rank(rank)  # ranks in their order, whatever message of theirs comes first
        for msg in snap.messages:
            st.apply(msg, now)
        for rank, columns in snap.history.items():
            st.rank(rank).history.load_columns(columns)
        for r in st.ranks.values():
            if r.step is not None:
                r.samples_mark = r.step.samples_total  # what its last history point counted to
                r.t_mark = r.history.ago("t", 0)
        st.trend.load(snap.trend)
        # Each rank's newest step, which a restart's steps run again go back from (as the hub's
        # state knows it): a viewer that attached while torchrun restarted the job kept the failed
        # attempt's steps in its charts beside the new ones (review 254).
        for rank, r in st.ranks.items():
            last = r.history.last("step")
            if last is not None and last == last:
                r.history_step = int(last)
                st.trend.rank_stepped(rank, int(last))
        ranks = st.ranks
        for rank, smooth in snap.smooth.items():
            r = ranks.get(rank)
            if r is not None and r.step is not None:
                r.smooth = smooth
        st.t0 = snap.t0 or st.t0
        if snap.first_hello_t and (not st.first_hello_t or snap.first_hello_t < st.first_hello_t):
            st.first_hello_t = snap.first_hello_t
        st.command = snap.command or st.command
        st.lost_reported = snap.stats.lost
        self.state = st
        self.stats = snap.stats
        self.fseq = snap.fseq
        self.hub_id = snap.hub_id
        self.last_frame_t = snap.t

    def apply_frame(self, frame: frames.Frame) -> None:
        now = time.monotonic()
        st = self.state
        if self.live:
            st.t_ceiling = frame.t + CLOCK_OFF_S  # a rank's time past the hub's clock by more is its clock's error
        st.apply_frame(frame.messages, now)
        if frame.smooth:
            ranks = st.ranks
            for rank, smooth in frame.smooth.items():
                r = ranks.get(rank)
                if r is not None:
                    r.smooth = smooth
        st.lost_reported = frame.stats.lost
        self.stats = frame.stats
        self.fseq = frame.fseq
        self.frames_applied += 1
        self.last_frame_t = frame.t


_HOST_PORT = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}")
"""A hub's address without its tcp:// (``127.0.0.1:29690``, ``node0:29690``, ``[::1]:29690``):
no run id has a colon."""


def hub_address(target: str | None) -> str | None:
    """``target`` as a hub's ``tcp://HOST:PORT`` when it names one (with or without its
    ``tcp://``); None for a run id (or none)."""
    if not target:
        return None
    if target.startswith("tcp://"):
        return target
    return f"tcp://{target}" if _HOST_PORT.fullmatch(target) else None


def resolve(target: str | None) -> dict:
    """Endpoints of a run: a registry entry by run id (newest live when None) or
    ``tcp://HOST:PORT`` of a hub's ingest (updates and snapshot are PORT+1 and PORT+2)."""
    if target and target.startswith("tcp://"):
        host, _, port = target[len("tcp://") :].rpartition(":")
        try:
            p = int(port)
        except ValueError:
            raise AttachError(f"bad endpoint {target!r}: expected tcp://HOST:PORT") from None
        if not host or not 0 < p <= 65533:
            raise AttachError(f"bad endpoint {target!r}: expected tcp://HOST:PORT, PORT the hub's ingest port (1-65533)")
        return {
            "run_id": "",
            "ingest": target,
            "updates": f"tcp://{host}:{p + 1}",
            "snapshot": f"tcp://{host}:{p + 2}",
        }
    entry = registry.find(target)
    if entry is None and target and _HOST_PORT.fullmatch(target):
        return resolve(hub_address(target))  # (it said "no live run '127.0.0.1:29690'" of a hub's address)
    if entry is None:
        if target:
            several = sorted(str(e.get("run_id")) for e in registry.live_runs() if str(e.get("run_id", "")).startswith(target))
            if len(several) > 1:
                named = ", ".join(several[:4]) + (f" and {len(several) - 4} more" if len(several) > 4 else "")
                raise AttachError(f"{target!r} begins {len(several)} live runs' ids ({named}); give more of the one to attach to")
            # (an entry a cache cleaner deleted comes back within 5 s; a registry that cannot be
            # written, or one on another machine, leaves the hub's own address)
            why = registry.why_none_listed(target)
            if why:
                raise AttachError(f"no live run {target!r} of yours: {why}")
            raise AttachError(f"no live run {target!r}; `pardash ps` lists the live ones, or name its hub as tcp://HOST:PORT, "
                              "the ingest address it printed")
        raise AttachError("no live run found; start one with `pardash launch` or name a hub as tcp://HOST:PORT")
    return entry


def unanswered(target: str | None, run_id: str, snapshot: str, viewer) -> str:
    """Why a hub gave ``viewer`` nothing (no snapshot, no log), in one line: it refuses the
    viewer's handshake, nothing took the connection, or it took it and never answered.
    ``viewer``: a :class:`HubClient` or a log copy's follower (its ``refused``, ``reached`` and
    ``keys``), so `attach` and `record` say it alike. ``target``: as given (an address, a run
    id, or None); ``run_id``: the run's, when known."""
    given = hub_address(target)
    where = f"{given} (asked on its snapshot port, {snapshot})" if given else snapshot
    hub = f"the hub of run {run_id} (its snapshot port, {snapshot})" if run_id and not given else f"the hub at {where}"
    entry = registry.entry(run_id) if run_id and not given else None
    if entry is None and run_id and not given:
        # (its entry pruned as a dead hub's by another viewer or `pardash ps` meanwhile: the one
        # this viewer found the run by, a fresh-clone CI run's "refuses this viewer" again)
        known = getattr(viewer, "info", None)
        entry = known if isinstance(known, dict) and known.get("run_id") == run_id and known.get("pid") else None
    if entry is not None and not _hub_gone_soon(entry, viewer):
        entry = None
    if entry is not None:
        # (killed as this viewer waited: its dropped connection read as a hub refusing the
        # viewer's keys, review 332)
        log = entry.get("log")
        return (f"the hub of run {run_id} is gone: its process (pid {entry.get('pid')}) ended before it answered this viewer"
                + (f"; its log {log} holds the run so far (`pardash report` or `pardash replay` reads it)" if log else ""))  # fmt: skip
    if viewer.refused:
        return f"{hub} refuses this viewer: {viewer.refused}"
    live = "is the run still live? (`pardash ps`)"
    if not viewer.reached:  # (no keys to blame: nothing took the connection)
        return f"nothing answers at {where}; {live}"
    if viewer.keys is None:
        hint = f"; a hub with CURVE keys answers only viewers with an authorised key ({security.VIEWER_HINT})"
    else:
        hint = "; or it does not admit this viewer's key (its authorized folder must hold it)"
    return f"no answer from {hub}; {live}{hint}"


GONE_WAIT_S = 2.0
"""How long a viewer whose hub dropped its connection looks whether the hub's process is gone
before saying it refuses the viewer: a hub killed drops its connections as its process ends,
a moment before it is gone (on a loaded machine the viewer asked within that moment, and a
fresh-clone CI run read "refuses this viewer: it has CURVE keys ..." of a hub killed)."""


def _hub_gone_soon(entry: dict, viewer) -> bool:
    """Whether the hub of ``entry`` is gone, or goes within GONE_WAIT_S where it dropped
    ``viewer``'s connection (``viewer.refused``)."""
    end = time.monotonic() + (GONE_WAIT_S if viewer.refused else 0.0)
    while registry.hub_alive(entry):
        if time.monotonic() >= end:
            return False
        time.sleep(0.1)
    return True


def viewer_keys(info: dict, curve=None):
    """The keys a viewer of the run ``info`` (from :func:`resolve`) connects with: ``curve``
    when given; False (none) for a hub the registry says has none, keys given or not: keys in
    PARDASH_CURVE_DIR (another run's) would make it ignore them, and a --curve-dir given out of
    habit failed on a folder that did not exist ("no key ...: make keys ... and start the hub
    with them") or was refused ("server.key is not this hub's"), where no key was needed;
    AttachError for a hub with keys and none given."""
    if info.get("curve") and curve is None and security.curve_dir_from_env() is None:
        raise AttachError(
            f"run {info.get('run_id')} takes only viewers with an authorised key: pass --curve-dir DIR (or set "
            "PARDASH_CURVE_DIR) with its key folder (`pardash keys`)"
        )
    if "curve" in info and not info["curve"]:
        return False
    return curve


def is_hub_stop(m: schema.Message) -> bool:
    """The note a hub writes, and frames, as it stops ("hub stopped: N messages, ...")."""
    return isinstance(m, schema.Event) and m.rank == -1 and m.name == "hub" and m.message.startswith("hub stopped")


class HubClient(FrameApplier):
    """A live hub: SUB to frames first, then a snapshot over DEALER, then frames after it."""

    live = True
    ended_early: dict | None = None
    """The hub stopped (its last frame said so) while ranks had not ended: their step then and
    how many (as a replay of a log that ends early has it): a viewer showed the rank of a node
    that died with its supervisor "running" for ever. None otherwise."""
    waiting_for = ""
    """What the job waits for before its first rank speaks, said by the viewer meanwhile (a
    multi-node launch's: every node's torchrun in the rendezvous)."""

    def __init__(
        self,
        updates: str,
        snapshot: str,
        *,
        context: zmq.Context | None = None,
        run_id: str = "",
        curve: security.ClientKeys | str | os.PathLike[str] | bool | None = None,
    ) -> None:
        """``curve``: client keys or their folder for a hub with CURVE keys (default: the
        folder in PARDASH_CURVE_DIR, when set; False: none); unreadable keys raise
        AttachError."""
        super().__init__()
        try:
            self.keys = security.client_keys(curve)
        except security.CurveKeyError as exc:
            raise AttachError(str(exc)) from None
        self.bad_frames = 0
        """Frames or snapshots from the hub that did not decode (skipped)."""
        self.ctx = context or zmq.Context.instance()
        self.updates_endpoint = updates
        self.snapshot_endpoint = snapshot
        self.run_id = run_id
        self.info: dict = {}
        """The run's registry entry when attached through it (pids of its hub and supervisor)."""
        self.opened_t = time.time()
        """When this viewer opened (the wait for a run's first rank counts from the hub's start
        when known, else from this)."""
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, frames.FRAME_TOPIC)
        self.sub.setsockopt(zmq.RCVHWM, 1000)
        self.sub.setsockopt(zmq.MAXMSGSIZE, 256 << 20)
        self.sub.setsockopt(zmq.LINGER, 0)
        if self.keys is not None:
            self.keys.apply(self.sub)
        security.allow_ipv6(self.sub, updates)
        self.sub.connect(updates)
        self.dealer: zmq.Socket | None = None
        self._handshakes: security.Handshakes | None = None
        """The snapshot socket's handshakes, watched for the viewer's life (a hub restarted
        may refuse the reconnection of a viewer it took before)."""
        self.refused = ""
        """Why the hub refuses this viewer, once a handshake with it has failed (a hub with
        CURVE keys and a viewer with none, or keys it does not take, or no longer takes); ""
        otherwise, and again once one succeeds."""
        self.reached = False
        """Whether a connection to the hub's snapshot port was ever made (nothing listening
        there: never)."""
        self.synced = False
        self.snapshots = 0
        self.hub_restarts = 0
        self._retried = time.monotonic()
        """When a refused viewer last connected afresh (see :meth:`_request_snapshot`)."""
        self._retry_s = REFUSED_RETRY_S
        """The wait before a refused viewer's next try (twice as long each try, see REFUSED_RETRY_S)."""
        self._request_snapshot()

    @classmethod
    def attach(cls, target: str | None = None, **kw) -> "HubClient":
        info = resolve(target)
        kw["curve"] = viewer_keys(info, kw.get("curve"))
        client = cls(info["updates"], info["snapshot"], run_id=info.get("run_id", ""), **kw)
        client.info = info
        return client

    def _request_snapshot(self) -> None:
        # One DEALER for the client's life: a slow answer to an earlier request is still
        # taken (a busy hub at 1024 ranks may need a while), never thrown away.
        if self.dealer is None:
            self.dealer = self.ctx.socket(zmq.DEALER)
            self.dealer.setsockopt(zmq.LINGER, 0)
            self.dealer.setsockopt(zmq.MAXMSGSIZE, 1 << 30)
            if self.keys is not None:
                self.keys.apply(self.dealer)
            security.allow_ipv6(self.dealer, self.snapshot_endpoint)
            # (watched before it connects, so the first handshake is not missed)
            self._handshakes = security.Handshakes(self.dealer, self.keys)
            self.dealer.connect(self.snapshot_endpoint)
        elif self.refused and time.monotonic() - self._retried >= self._retry_s:
            # ZeroMQ does not try a refused handshake again: both sockets connect afresh, and a
            # hub that takes this viewer's key again (admitted anew, or restarted with it) takes
            # the viewer back, which said it was refused for ever.
            self._retried = time.monotonic()
            self._retry_s = min(2 * self._retry_s, REFUSED_RETRY_MAX_S)
            for sock, endpoint in ((self.dealer, self.snapshot_endpoint), (self.sub, self.updates_endpoint)):
                try:
                    sock.disconnect(endpoint)
                except zmq.ZMQError:
                    pass
                sock.connect(endpoint)
        try:
            self.dealer.send(frames.SNAPSHOT_REQUEST, zmq.NOBLOCK)
        except zmq.Again:
            pass  # requests already queued for a hub not there (yet): one of them will do
        self.synced = False
        self._asked = time.monotonic()

    def _read_handshakes(self) -> bool:
        """Take the snapshot socket's handshake events: a failed one says the hub refuses this
        viewer (it would wait for a snapshot forever, none coming). Watched after the first
        success too: a hub restarted (a launch's, killed) with this viewer's key revoked
        meanwhile refuses its reconnection, and the viewer read "hub quiet for 41 s" for ever
        while a fresh attach was told the hub refuses it. Refused, a synced viewer is synced
        no more (its figures are of before; the header says why), and tries again after
        REFUSED_RETRY_S, then twice as long each time, synced anew once the hub takes its key. True when :attr:`refused`
        changed."""
        was = self.refused
        watch = self._handshakes
        watch.read()
        self.reached, self.refused = watch.reached, watch.refused
        if watch.monitor is None:  # (its monitor taken over: nothing more to read)
            watch.close()
            self._handshakes = None
        if self.refused and self.synced:
            self.synced = False
            self._asked = self._retried = time.monotonic()
        elif was and not self.refused and not self.synced:
            self._retry_s = REFUSED_RETRY_S
            self._request_snapshot()  # taken again (its key admitted): now, not at the next 5 s
        return self.refused != was

    def load_snapshot(self, snap: frames.Snapshot) -> None:
        super().load_snapshot(snap)
        self.ended_early = None  # (a hub again: a restarted one's)

    def apply_frame(self, frame: frames.Frame) -> None:
        super().apply_frame(frame)
        if self.ended_early is None and any(is_hub_stop(m) for m in frame.messages) and not run_over(self.state):
            # The ranks not ended as `pardash report` and a replay of the log count them: a
            # stalled or silent rank stays so, what became of it (this said "1023 ranks not
            # ended" where they said 1021). Ranks never heard from are said so apart ("0 ranks
            # not ended" read oddly).
            from .report import hub_stopped_first

            first = hub_stopped_first(self.state, True)
            if first is not None:
                self.ended_early = {"step": first["step"], "running": len(first["ranks"]), "ranks": first["ranks"], "hub_stopped": True}

    def poll(self) -> bool:
        changed = self._read_handshakes() if self._handshakes is not None else False
        while True:
            try:
                raw = self.dealer.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            if self.synced:
                continue  # an answer to a repeated request: already synced
            try:
                snap = frames.decode_snapshot(raw)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                self.bad_frames += 1
                continue
            self.load_snapshot(snap)
            self.synced = True
            self.snapshots += 1
            changed = True
        if not self.synced and time.monotonic() - self._asked > 5.0:
            self._request_snapshot()  # ask again: the hub may have restarted meanwhile
        while True:
            try:
                _topic, raw = self.sub.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            except ValueError:
                continue
            if not self.synced:
                continue  # frames before the snapshot are in it
            try:
                frame = frames.decode_frame(raw)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                self.bad_frames += 1
                continue
            if frame.hub_id != self.hub_id:
                self.hub_restarts += 1
                self._request_snapshot()  # a new hub process: its counters start again
                break
            if frame.fseq <= self.fseq:
                continue
            if frame.fseq != self.fseq + 1:
                self._request_snapshot()  # missed a frame (slow viewer or hub restart)
                break
            self.apply_frame(frame)
            changed = True
        return changed

    def sockets(self) -> list[zmq.Socket]:
        """The frame subscription and the snapshot socket (while open): a viewer's event loop
        watches their descriptors (``getsockopt(zmq.FD)``, then ``zmq.EVENTS``) and polls as
        soon as either has something, rather than on its next timer tick."""
        return [s for s in (self.sub, self.dealer) if s is not None and not s.closed]

    def wait_synced(self, timeout_s: float = 5.0) -> bool:
        """Poll until the snapshot has arrived (for tests and the headless printer); False at
        once when the hub refuses this viewer (its handshake says so: no snapshot will come)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            self.poll()
            if self.synced:
                return True
            if self.refused:
                return False
            time.sleep(0.01)
        return False

    def close(self) -> None:
        self.sub.close(0)
        if self._handshakes is not None:
            self._handshakes.close()
            self._handshakes = None
        if self.dealer is not None:
            self.dealer.close(0)


class NullDetector:
    """Replay draws no new conclusions: the recorded verdicts are replayed as they were."""

    class _NoStragglers:
        def observe(self, step: schema.Step) -> None:
            pass

        def observe_many(self, steps: object) -> None:  # (HubCore.ingest_batch's fast path)
            pass

        def note_event(self, event: schema.Event) -> None:
            pass

    stragglers = _NoStragglers()

    def update(self, state: RunState, now: float) -> list:
        return []

    def hub_was_away(self, now: float) -> None:
        pass


MAX_POLL_GAP_S = 0.5
"""The most replay time one poll moves by (times the speed): a viewer's pause is not skipped."""
POLL_BUDGET_S = 0.05
"""Wall time a replay's poll may spend making frames (a fast replay of a large run makes many)."""
SEEK_BUDGET_S = 0.2
"""Wall time a replay's poll may spend on a seek the viewer asked for, a poll at a time: a seek
plays the log from the nearest keyframe before it, or from its start (a whole 565 MB log took
7 s), which froze the screen and its keys (`q` too) until done."""
SEEK_PROGRESS_FRAMES = 256
"""Frames between two calls of a start seek's progress (``--start``)."""
REFUSED_RETRY_S = 30.0
"""How long a viewer its hub refuses waits before it connects again (each try is one more
refusal in the hub's counts and log: not at the 5 s of a snapshot asked again), twice as long
after each try, up to REFUSED_RETRY_MAX_S: a viewer left open overnight, refused, added lines
to the run's log all night."""
REFUSED_RETRY_MAX_S = 600.0
HUB_QUIET_S = 3.0
"""A live hub that sent no frame for this long is quiet (it frames at 10 Hz, messages or not):
the TUI's header and the headless lines say so, their figures as of its last frame."""
FOLLOW_QUIET_S = 15.0
"""A log that has not grown for this long is taken as ended (its ranks send a heartbeat a
second, so a live run's log grows at least that often), unless a live hub records it: one
waiting for its ranks (torch's import, a rendezvous, a queue) writes nothing for minutes."""
HUB_LOOK_S = 5.0
"""How often a followed log gone quiet asks the run registry whether a live hub records it."""
LOOK_AGAIN_S = 1.0
"""How often a replay at the end of a log it no longer follows looks whether the log grew."""
REACHED_WINDOW_S = 3.0
"""The wall time over which a replay measures the speed it reaches (its log's clock against the
wall clock): POLL_BUDGET_S keeps the screen live, so a large log plays slower than asked (64x
asked played at 5x on 256 ranks, under a header that said 64x)."""
REACHED_LEAST_S = 1.0
"""Wall time of play measured before the speed reached is said (its first polls say little)."""


class LogSpan:
    """What a replay needs to know of its whole log before playing it, gathered in one pass
    over it (the records themselves are not kept: a log of days is gigabytes): when it starts
    and ends, the runs it holds, whether its hub said it stopped, and which ranks' clocks are
    off (a rank's clock at 1970 made a replay of two minutes one of 57 years)."""

    def __init__(self) -> None:
        self.clocks = RankClocks()
        """The ranks' first and last word, and whose clock disagrees with the hub's."""
        self.any_first = self.any_last = 0.0
        """The first and last record's time, the hub's own notes included."""
        self.runs: set[str] = set()
        self.records = 0
        self.rank_records = 0
        """Records of the ranks (the rest are the hub's own notes)."""
        self.last: schema.Message | None = None
        self.closed = False
        """The hub said it stopped ("hub stopped") after the ranks' last record: the log is
        whole, as `pardash report` decides it."""
        self.end_note: schema.Event | None = None
        """The log's last record when it is a note of its hub's after the ranks' last (what
        became of a full disk's lines, see report's ``_disk_full_end``)."""
        self.step_wanted: int | None = None
        """``replay --start step:N``'s N: when the run first reached it is kept (:attr:`step_t`)."""
        self.step_ts: dict[int, float] = {}
        """When each rank first reached :attr:`step_wanted` (its step record of it, or of a later
        one where the log lacks it): see :attr:`step_t`."""
        self.top_step = 0
        """The highest step a rank's record names."""

    def take(self, msg: schema.Message) -> None:
        self.records += 1
        self.last = msg
        if type(msg) is schema.Step:
            # (one figure, not each step's time: a replay of days keeps the memory of minutes)
            if msg.step > self.top_step:
                self.top_step = msg.step
            if self.step_wanted is not None and msg.t and msg.step >= self.step_wanted and msg.rank not in self.step_ts:
                self.step_ts[msg.rank] = msg.t
        if msg.rank >= 0:
            self.rank_records += 1
            self.closed = False
            self.end_note = None
        elif isinstance(msg, schema.Event):
            self.closed = self.closed or is_hub_stop(msg)
            self.end_note = msg
        else:
            self.end_note = None
        if msg.run:
            self.runs.add(msg.run)
        t = msg.t
        if not t:
            return
        self.clocks.take(msg)
        self.any_first = min(self.any_first, t) if self.any_first else t
        self.any_last = max(self.any_last, t)

    @property
    def step_t(self) -> float | None:
        """When the ranks had all reached :attr:`step_wanted`, those that did (the last of them
        to: a rank whose loss went NaN at step 120 says so before its step's record, and opened at
        step 119 under the alert of it, review 313); None where none did."""
        return max(self.step_ts.values()) if self.step_ts else None

    @property
    def hub_stopped(self) -> bool:
        """The last record read is the hub's last, written as it stops: the log is complete."""
        return self.last is not None and is_hub_stop(self.last)

    @property
    def start(self) -> float:
        """When the ranks first said anything: the replay's start. A hub waits for its job's
        ranks (torch's import, a rendezvous, a queue); its notes before them are played with the
        first frame, not after seconds or minutes of nothing (as report counts a run from its
        ranks' first word). The ranks' whose clocks agree with the hub's."""
        span = self.clocks.span()
        return span[0] if span else self.any_first

    @property
    def end(self) -> float:
        """When the ranks last said anything: the replay's end. The hub's own notes after it
        (its "hub stopped", written when a TUI left open for minutes after the job closed) are
        played with the last frame, not after minutes of nothing."""
        span = self.clocks.span()
        return span[1] if span else self.any_last


class ReplaySource(FrameApplier):
    """A recorded log served through a HubCore at ``speed`` times real time, with pause and
    seek: frames made as a hub makes them, cut every ``frame_s`` of the log's own time. The live
    hub cut its frames on its own timer as the steps arrived, so the steps that became history
    points (the charts) and the run's trend points can differ from those its viewers had; each
    rank's latest figures and the grid's medians of its last steps (the hub's, of every step:
    ``frames.Smooth``) do not.

    The log is read twice, never held: a first pass finds its start, end and runs (and counts
    its unreadable lines), then the replay reads the records as it plays them, one ahead of its
    clock (a :class:`LogCursor`). The state a frame shows is built from every record before
    it: a seek back goes on from the nearest of the keyframes the replay kept as it played
    (:mod:`.keyframes`), or plays the log again from its start before the first. Its memory is
    that state's (and a bounded number of copies of it), whatever the log's length: a day of a
    big job is gigabytes of log."""

    live = False

    def __init__(self, path: str, *, speed: float = 1.0, frame_s: float = 0.1, start_s: float = 0.0, progress: Progress | None = None,
                 start_progress: Progress | None = None) -> None:  # fmt: skip
        """``start_s``: begin that far into the run (past its end: at its end), not at its start,
        or, a :class:`~.cliargs.StartStep`, where the run first reached that step;
        the viewer's keys move 10 s, a minute (a tenth of a long run), or to the start or end.
        ``progress``: told how far the first pass over the log is (a log of gigabytes takes a
        minute); ``start_progress``: how far the play up to ``start_s`` is, in milliseconds of
        the run (it plays every frame before it: as long again as the first pass, and more)."""
        super().__init__()
        self.path = path
        self._reached: deque[tuple[float, float]] = deque()
        """(wall clock, replay clock) at each poll that played over the last REACHED_WINDOW_S,
        while nothing but the speed held the play back (see :attr:`speed_reached`)."""
        self.speed = speed
        self.paused = False
        self.frame_s = frame_s
        self.read_stats = LogReadStats()
        self._tail: LogTail | None = None
        self._span = LogSpan()
        if isinstance(start_s, StartStep):
            self._span.step_wanted = int(start_s)
        self._seek_to: float | None = None
        """Where a seek asked for goes (see :meth:`seek_soon`)."""
        self._seeking_to: float | None = None
        """Where a seek the viewer asked for is going, a poll at a time (see :meth:`seek_now`)."""
        self.runs: list[str] = []
        """The run ids the log holds: more than one in a log appended to by hand."""
        self.following = False
        """The log is still being written (its hub has not said it stopped, and it grew in
        the last FOLLOW_QUIET_S or a live hub records it): at its end the replay waits for
        more, as ``tail -f``."""
        self._hub_live = False
        self._hub_asked = -math.inf
        """What the run registry said of the log's hub (see :meth:`_hub_records`), and when."""
        self._looked = -math.inf
        """When the replay at the end of a log it no longer follows last looked at its size."""
        self._end_said = False
        """The replay's end was looked at for a log that ends early (see :meth:`_say_early_end`)."""
        self.ended_early: dict | None = None
        """Where the log stops short and what is known of why, as `pardash report`'s
        ``log_ends_early`` has it, once the replay is at that end (None before it, and of a log
        whose run ended): the ranks' statuses there are the log's last word, not how the run
        ended. Of a log its hub closed under ranks not ended, the live viewer's (``hub_stopped``,
        see :meth:`_say_hub_stopped_first`)."""
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise AttachError(f"{path}: not a regular file; a replay reads its log more than once (give the log's file)")
            self._ino = st.st_ino
            if is_gzip(path):
                self._scan(read_log(path, self.read_stats, progress))
            else:
                self._tail = LogTail(path, self.read_stats)
                self._scan(self._tail.read(), progress)
                now = time.monotonic()
                self._grew = now - max(0.0, time.time() - os.stat(path).st_mtime)
                self.following = not self._span.hub_stopped and (self._grew > now - FOLLOW_QUIET_S or self._hub_records(now))
                if not self.following:
                    self._scan(self._tail.finish())
            self._cursor = LogCursor(path, upto=self._tail.offset if self._tail else None)
        except OSError as exc:
            raise AttachError(f"{path}: cannot read it: {exc.strerror or exc}") from None
        if not self._span.records:
            self._cursor.close()
            raise AttachError(no_records(path, self.read_stats))
        self.t_start = self._span.start
        self.t_end = self._span.end or self.t_start
        self._start_known = self._span.clocks.span() is not None
        """``t_start`` is the ranks' first word, not the hub's first record for want of it (a
        followed log opened while its hub waits for its ranks: see :meth:`_ranks_spoke`)."""
        self.clocks_off = self._span.clocks.off()
        """Ranks whose clocks disagree with the hub's: their records play where the hub took them."""
        self.keyframes = Keyframes()
        """Copies of the replay's state kept as it plays, which a seek goes on from."""
        self._restart()
        self.start_step_past: int | None = None
        """``start_s`` was a step (``--start step:N``) past the run's last one, this its last:
        the replay begins at the end."""
        if isinstance(start_s, StartStep):
            at = self._span.step_t
            if at is None:
                self.start_step_past = self._span.top_step
            # (a frame later: the replay shows what its frames hold, cut every frame_s, and the
            # frame before it ends short of the step, five steps short at 50 a second)
            start_s = math.inf if at is None else max(0.0, at - self.t_start) + frame_s
        if start_s > 0:
            self.seek(start_s, progress=start_progress)

    def _scan(self, records, progress: Progress | None = None) -> None:
        """Take the log's records into its span (``progress``: told every PROGRESS_EVERY records
        how far a plain log's LogTail is in it)."""
        take = self._span.take
        if progress is None:
            for msg in records:
                take(msg)
        else:
            size = max(1, os.stat(self.path).st_size)
            for n, msg in enumerate(records, 1):
                take(msg)
                if n % PROGRESS_EVERY == 0:
                    progress(min(self._tail.offset, size), size)
            progress(size, size)
        self.runs = sorted(self._span.runs)

    def _hub_records(self, now: float) -> bool:
        """Whether a live hub on this machine records the log (the run registry's word, as
        `pardash ps` and `report` have it), asked at most every HUB_LOOK_S: a hub waiting for
        its ranks writes nothing meanwhile, and its log was taken as ended after FOLLOW_QUIET_S,
        its ranks never played."""
        if now - self._hub_asked >= HUB_LOOK_S:
            self._hub_asked = now
            try:
                self._hub_live = registry.recording(self.path, self._span.runs) is not None
            except OSError:
                self._hub_live = False
        return self._hub_live

    def _follow(self) -> bool:
        """Take what the log's writer added since; stop following once its hub said it
        stopped, or it has not grown for FOLLOW_QUIET_S and no live hub records it. True when
        records came."""
        if not self.following or self._tail is None:
            return False
        before = self._span.records
        try:
            self._scan(self._tail.read())
        except OSError:
            pass
        came = self._span.records > before
        now = time.monotonic()
        if came:
            self._grew = now
        if self._span.hub_stopped or (now - self._grew > FOLLOW_QUIET_S and not self._hub_records(now)):
            self.following = False
            try:
                self._scan(self._tail.finish())
            except OSError:
                pass
        self._count_skipped()  # (a torn last line is counted only now, by finish)
        if came and not self._start_known:
            self._ranks_spoke()
        self.t_end = max(self.t_end, self._span.end)
        off = self._span.clocks.off()
        if off.keys() != self.clocks_off.keys():  # (records the keyframes played at their own time now play elsewhere)
            self.keyframes.clear()
        self.clocks_off = off
        self._cursor.upto = self._tail.offset  # the replay plays the lines read, to their end
        return came

    def _ranks_spoke(self) -> None:
        """A followed log opened before its ranks said anything started the replay at the hub's
        first record: once they speak, it starts at their first word, as a replay of the whole
        log does (its position, the header's elapsed, the event log's clock). Counted from the
        hub's start, one read "elapsed 1m20s" at its end where the same log replayed after read
        1m00s, and its events "00:00 hub: hub started"."""
        span = self._span.clocks.span()
        if span is None:
            return
        self._start_known = True
        # Only the hub's notes, from before the ranks' first word, have been played: they go with
        # the first frame, as in a replay of the whole log; the frames count from the new start.
        self.t_start = span[0]
        self.keyframes.clear()  # (counted their frames from the hub's first record)
        self._frames = 0
        self._clock = self.t_start
        self._play = max(self._play, self.t_start)

    def _grew_again(self, now: float) -> bool:
        """Follow again a log no longer followed that has grown since (looked at every
        LOOK_AGAIN_S): its writer was quiet for a while, or no live hub of it was known (a hub
        on another registry, one restarted by hand on the log). True when following again."""
        if self.following or self._tail is None or now - self._looked < LOOK_AGAIN_S:
            return False
        self._looked = now
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        if st.st_ino != self._ino or st.st_size <= self._tail.offset:  # (another file at its path: not this log's growth)
            return False
        self.following = True
        self._grew = now
        if self._end_said:  # the early end it said is no longer the log's end
            self._end_said = False
            self.ended_early = None
        return True

    def _count_skipped(self) -> None:
        """The log's lines the reader skipped, shown where a live hub shows its rejects (the
        header): those of a followed log as they are counted, its torn last line once following
        it ended (a fresh replay of the log counted it, one that followed it said 0)."""
        skipped = {f"log_{why}": n for why, n in self.read_stats.skipped.items()}
        if all(self.core.rejected.get(k) == n for k, n in skipped.items()):
            return
        for why, n in skipped.items():
            self.core.rejected[why] = n
        self.stats.rejected = {**self.stats.rejected, **skipped}  # (the header now, not at the next frame)

    @property
    def speed(self) -> float:
        """Times real time the replay is asked to play at."""
        return self._speed

    @speed.setter
    def speed(self, speed: float) -> None:
        self._speed = speed
        self._reached.clear()  # (what was reached at the speed before says nothing of this one)

    @property
    def speed_reached(self) -> float | None:
        """The speed the replay has played at over its last REACHED_WINDOW_S of wall time (its
        log's clock moved over the wall clock's): under :attr:`speed` where making the frames
        takes longer than playing them (POLL_BUDGET_S), or the viewer is slow to poll. None when
        not known: less than REACHED_LEAST_S played since a pause, a seek, a new speed, or the
        log's end (a followed log that plays as fast as it grows is no slow replay)."""
        window = self._reached
        if len(window) < 2 or self.paused or self.seeking or self.done:
            return None  # (a pause kept "(≈2×)" on screen for as long as it lasted: no play, no speed)
        (wall0, clock0), (wall1, clock1) = window[0], window[-1]
        if wall1 - wall0 < REACHED_LEAST_S:
            return None
        return (clock1 - clock0) / (wall1 - wall0)

    @property
    def seeking(self) -> bool:
        """A seek the viewer asked for is on its way (:attr:`position_s` says where to,
        :attr:`played_s` how far it has got): a seek plays a long log from a keyframe (or its
        start), up to seconds of frames the screen does not show."""
        return self._seek_to is not None or self._seeking_to is not None

    @property
    def played_s(self) -> float:
        """Seconds into the run the frames have been made up to (during a seek, how far it has
        got; else :attr:`position_s`)."""
        return self._clock - self.t_start

    def _note_reached(self, now: float) -> None:
        """Take the replay clock at a poll that played into :attr:`speed_reached`'s window; one
        held back by the log's end starts the window again."""
        window = self._reached
        if self._play >= self.t_end:
            window.clear()
            return
        window.append((now, self._clock))
        while len(window) > 2 and window[1][0] <= now - REACHED_WINDOW_S:
            window.popleft()

    @property
    def duration_s(self) -> float:
        return self.t_end - self.t_start

    @property
    def position_s(self) -> float:
        """Seconds into the run: where the replay is, or is about to be (a seek asked for, or
        on its way)."""
        to = self._seek_to if self._seek_to is not None else self._seeking_to
        if to is not None:
            return max(0.0, min(to, self.duration_s))
        return self._clock - self.t_start

    @property
    def done(self) -> bool:
        return self._cursor.peek() is None and not self.following

    @property
    def no_rank_reported(self) -> bool:
        """The whole log holds no rank's record, only its hub's notes (a hub started and stopped
        with no rank ever connecting); never while the log is followed (its ranks may come yet)."""
        return not self._span.rank_records and not self.following

    def _restart(self) -> None:
        """Back to the log's start, nothing played."""
        FrameApplier.__init__(self)
        self.core = HubCore(detector=NullDetector())  # type: ignore[arg-type]
        self._stats_owed = False
        """The last frame was lean: the hub's counts it carried are an earlier frame's."""
        self._count_skipped()
        self._end_said = False
        self.ended_early = None
        self._off_grid = False
        """The state holds what a replay played from the start does not: a frame cut at the
        log's end as it was then (off the frame grid: a followed log's writer caught up with), or
        the warning that the log ends early, after which the log grew. Keyframes taken after it
        would carry it into every seek back to them: none is, until a seek rebuilds the state
        from a keyframe before it or from the log's start."""
        self._reached.clear()
        self._cursor.rewind()
        self._clock = self.t_start
        self._frames = 0
        """Frames made since the log's start (frame k ends at t_start + k * frame_s)."""
        self._play = self.t_start
        """Where the wall clock has played the log to (frames are made up to it)."""
        self._wall = time.monotonic()
        self._fed_t = self.t_start
        """The time of the newest record played (on the hub's clock)."""
        for line in self._span.clocks.warnings():
            self.core.replay(schema.Event(rank=-1, seq=-1, name="warning", message=line, t=self.t_start), self._wall)

    def _keep_keyframe(self) -> None:
        """At a frame's end, keep a keyframe when one is due (see :mod:`.keyframes`): the state a
        seek goes on from, the frames after it the same as those of a replay from the start."""
        cursor = self._cursor
        if self._off_grid or self.ended_early is not None or not self.keyframes.due(self._clock, cursor.offset, self.t_start):
            return
        self._settle()  # (what a seek's lean frames left to work out: kept as a replay from the start has it)
        self.keyframes.keep(self._clock, cursor.offset, (
            self.core, self.state, self.stats, self.fseq, self.hub_id, self.frames_applied, self.last_frame_t,
            self._clock, self._frames, self._fed_t, cursor.mark(),
        ))  # fmt: skip

    def _jump(self, target: float) -> None:
        """Before playing up to ``target`` (the log's clock): back to the nearest keyframe at or
        before it (or the log's start, where none is) when it is behind the replay, on to one
        when that is ahead of the replay; else stay, and play on from here."""
        kf = self.keyframes.before(target)
        if target < self._clock and kf is None:
            self._restart()
            return
        if kf is None or (target >= self._clock and kf.at <= self._clock):
            return
        (
            self.core, self.state, self.stats, self.fseq, self.hub_id, self.frames_applied, self.last_frame_t,
            self._clock, self._frames, self._fed_t, mark,
        ) = self.keyframes.load(kf)  # fmt: skip
        self._cursor.go_back(mark)
        self._count_skipped()  # (a followed log's skipped lines, as counted now)
        self._end_said = False
        self.ended_early = None
        self._off_grid = False  # (a keyframe is on the grid: taken before any end was cut or said)
        self._stats_owed = False  # (settled before it was kept)
        self._reached.clear()
        self._play = self._clock
        self._wall = time.monotonic()

    def _frame(self, *, lean: bool = False) -> None:
        """Make the next frame of the log played so far and apply it. ``lean``: a frame of a
        seek on its way, which the screen does not show (see ``HubCore.tick``): the medians and
        counts it leaves out are worked out once, where the seek stops (:meth:`_settle`), not
        for each of its frames; those of a rank a frame's event or hello may start anew (a new
        process) are worked out before it, as the frames before would have had them."""
        core = self.core
        if core.smooth_owed:
            if not lean:
                self._pay_smooth(None)
            elif core.has_pending:
                ranks = core.pending_ranks()
                self._pay_smooth(None if min(ranks) < 0 else ranks)
        self.apply_frame(core.tick(time.monotonic(), lean=lean))
        self._stats_owed = lean

    def _pay_smooth(self, ranks: set[int] | None) -> None:
        """The medians of the last steps the lean frames left out (``ranks``' only, or all), as
        the viewer's state had them from the frames that carried them."""
        owed = self.core.smooth_owed
        viewer = self.state.ranks
        for rank in list(owed) if ranks is None else [r for r in ranks if r in owed]:
            recent = owed.pop(rank)
            r = viewer.get(rank)
            if r is not None:
                r.smooth = smooth_of(recent)

    def _settle(self) -> None:
        """Work out what the lean frames of a seek left out (see :meth:`_frame`): the state is
        then the one a replay that made every frame in full has."""
        if self.core.smooth_owed:
            self._pay_smooth(None)
        if self._stats_owed:
            self._stats_owed = False
            self.stats = self.core.stats()
            self.state.lost_reported = self.stats.lost

    def _due(self, msg: schema.Message) -> float:
        """When a record plays: at its time, or (a rank's whose clock is off) right after the
        record before it in the log, where the hub took it."""
        if msg.rank in self.clocks_off and not is_hub_side(msg):
            return self._fed_t
        return msg.t

    def _feed_until(self, t: float) -> None:
        cursor = self._cursor
        replay = self.core.replay_routine
        now = time.monotonic()
        while (msg := cursor.peek()) is not None and ((due := self._due(msg)) or t) <= t:
            cursor.take()
            if due != msg.t:
                msg.t = due  # its steps, events and the run's time as the hub's clock had them
            elif due > self._fed_t:
                self._fed_t = due
            replay(msg, now)

    def seek_soon(self, position_s: float) -> None:
        """Ask to jump to ``position_s`` (``position_s`` says it at once); :meth:`seek_now` or
        the next poll jumps. A seek plays the log from a keyframe or its start, up to seconds in a
        long log: a burst of ``[`` presses is one jump to where they add up to, not one a press."""
        self._seek_to = position_s

    def seek_now(self) -> bool:
        """Make the jump :meth:`seek_soon` asked for, or go on with one under way, for at most
        SEEK_BUDGET_S of wall time (the viewer's keys and screen go on meanwhile; the polls
        after go on with it); True when frames were made or a jump began."""
        if self._seek_to is not None:
            position, self._seek_to = self._seek_to, None
            self._jump(self.t_start + max(0.0, min(position, self.duration_s)))
            self._seeking_to = position
            self._reached.clear()
        elif self._seeking_to is None:
            return False
        t0 = time.perf_counter()
        if not self._cursor.catch_up(SEEK_BUDGET_S):  # (a gzip log read again up to a keyframe)
            return True
        target = self.t_start + max(0.0, min(self._seeking_to, self.duration_s))
        self._play = target
        self._advance(target, budget_s=max(0.0, SEEK_BUDGET_S - (time.perf_counter() - t0)), lean=True)
        if self._play >= target:  # there (out of time, _advance holds the play clock where it got to)
            self._seeking_to = None
            self._wall = time.monotonic()
            self._say_early_end()
        return True

    def seek(self, position_s: float, *, progress: Progress | None = None) -> None:
        """Jump to ``position_s`` seconds into the run (from the nearest keyframe before it, or
        the log's start, when it is behind), now;
        ``progress``: told the milliseconds of the run played so far and those to play, every
        SEEK_PROGRESS_FRAMES frames."""
        self._seek_to = self._seeking_to = None
        self._reached.clear()
        target = self.t_start + max(0.0, min(position_s, self.duration_s))
        self._jump(target)
        self._play = target
        self._advance(target, progress=progress, lean=True)
        self._wall = time.monotonic()
        self._say_early_end()

    def _advance(self, target: float, budget_s: float | None = None, progress: Progress | None = None, lean: bool = False) -> bool:
        """Play the log up to ``target`` (its clock) in frames of ``frame_s`` of the log's own
        time, not of the wall clock: what a frame holds (each rank's newest step, its history
        point) is then the same at any speed, and a replay at 64x ends on the figures one at 1x
        ends on. (Not where the live hub cut its frames, which its timer did as the steps
        arrived: see the class.) The log's end is a frame of its own. Frames no record falls in are
        skipped (a record with a wild clock must not mean billions of empty frames). With
        ``budget_s``: stop after that much wall time, the play clock held where it got to (a
        replay at a speed the machine cannot keep slows down rather than freezing the screen).
        ``lean``: a seek's, whose frames the screen does not show (see :meth:`_frame`). True
        when a frame was made."""
        try:
            return self._play_to(target, budget_s, progress, lean)
        finally:
            self._settle()

    def _play_to(self, target: float, budget_s: float | None, progress: Progress | None, lean: bool) -> bool:
        made = False
        cursor = self._cursor
        t0 = time.perf_counter()
        while True:
            nxt = self.t_start + (self._frames + 1) * self.frame_s
            ahead = cursor.peek()
            due = self._due(ahead) if ahead is not None else 0.0
            if due and due > nxt + self.frame_s:  # nothing until a later frame: go to the one before it
                self._frames = max(self._frames, int((min(due, target) - self.t_start) / self.frame_s) - 1)
                nxt = self.t_start + (self._frames + 1) * self.frame_s
            if nxt > target + 1e-9:  # (t_start + 100 * 0.1 lies a hair past t_start + 10)
                if target < self.t_end or ahead is None:
                    if ahead is None and self.core.steps_waiting:  # the newest steps a first step held back
                        self._frame()
                        made = True
                    elif not self._frames and due and due <= target:
                        # Before the first frame's end (a seek back to the start): what the log
                        # holds up to the target. Nothing played, it showed no run at all (no id,
                        # none of its hub's first notes), paused so until played on.
                        self._feed_until(target)
                        self._frame()
                        self._off_grid = True  # (a frame cut at the target, not at the first frame's end)
                        made = True
                    return made
                nxt = target  # the log's last records
                self._feed_until(float("inf"))  # the hub's own last words, written after (see LogSpan.end)
                self._off_grid = True  # (the log may grow past it: see _restart)
            self._feed_until(nxt)
            self._frame(lean=lean)
            self._frames += 1
            self._clock = nxt
            made = True
            if nxt != target or target < self.t_end:  # (not the log's last records: see above)
                self._keep_keyframe()
            if progress is not None and self._frames % SEEK_PROGRESS_FRAMES == 0:
                progress(round((self._clock - self.t_start) * 1e3), round((target - self.t_start) * 1e3))
            if budget_s is not None and time.perf_counter() - t0 > budget_s:
                self._play = min(self._play, self._clock)
                return made

    def _say_early_end(self) -> bool:
        """At the replay's end, once a play: a log that ends with ranks not ended and no
        closing line from its hub (killed, out of disk) says so in `pardash report`'s words, a
        warning among the events, and sets :attr:`ended_early` (the header's note and marks, the
        alerts' calm line). It ended on "● 2 running" and "every rank is healthy", as if its ranks
        ran on. So does a log its hub closed while ranks had not ended (see
        :meth:`_say_hub_stopped_first`). Looked at once a play: a poll before the end costs a
        peek. True when said."""
        if self._end_said or not self.done:
            return False
        self._end_said = True
        span = self._span
        if not span.rank_records or run_over(self.state):
            return False
        if span.closed:
            return self._say_hub_stopped_first()
        # (report's own reasoning, so both say the same of a log: its registry look, a full
        # disk's copy or lost lines, a compressed log cut short)
        from .report import _disk_full_end, _ends_early
        from .report_render import _ends_early_text

        stats = self.read_stats
        cut = {"how": stats.gzip_damage, "after_line": stats.lines} if stats.gzip_damage else None
        disk_full = _disk_full_end(span.end_note) if span.end_note is not None else None
        end = _ends_early(self.path, self.state, set(span.runs), disk_full, cut is not None)
        why = _ends_early_text(end, dict(stats.skipped), cut)
        now = time.monotonic()
        self.core.replay(schema.Event(rank=-1, seq=-1, name="warning", message=f"log ends early {why}", t=self.t_end), now)
        self._frame()
        self._off_grid = True  # (the log may grow again: see _grew_again)
        self.ended_early = end
        return True

    def _say_hub_stopped_first(self) -> bool:
        """A log its hub closed ("hub stopped") while ranks had not said they ended (a hub
        alone stopped under its job, another node's hub gone first): its replay ended on "● 2
        running" and "every rank is healthy", where the live viewer said "the hub stopped at step
        N, 2 ranks not ended" and `pardash report` "ranks 0-1 at step N: the hub stopped before
        their end was heard". Sets :attr:`ended_early` as the live viewer's
        (:attr:`HubClient.ended_early`, ``hub_stopped``: the header's note and marks, the alerts'
        calm line), of the ranks the report counts (a rank stalled or silent then stays so, its
        own alert says it); the event log has the hub's closing line already, as the live
        viewer's does."""
        from .report import hub_stopped_first

        first = hub_stopped_first(self.state, True)
        if first is None:
            return False
        self.ended_early = {"step": first["step"], "running": len(first["ranks"]), "ranks": first["ranks"], "hub_stopped": True}
        return True

    def _look_at_log(self, now: float) -> bool:
        """While the replay is paused or at its end: take what a followed log's writer added
        (a paused replay's total stood still), or follow again a log that grew after its
        following ended. True when the header has something new to show."""
        again = not self.following
        if again and not self._grew_again(now):
            return False
        end = self.t_end
        self._follow()
        return again or self.t_end != end or not self.following

    def poll(self) -> bool:
        if self.seek_now():
            return True
        now = time.monotonic()
        elapsed = now - self._wall
        if self.paused or self.done:
            self._wall = now
            self._reached.clear()
            return self._look_at_log(now)
        if elapsed < self.frame_s:
            return False
        self._wall = now
        followed = self.following
        if followed:  # the log's length as it grows, wherever the replay is in it
            self._follow()
        # A viewer busy for a while (starting up, a slow redraw) slows the replay rather than
        # skipping what it missed; the clock stops at the log's end.
        self._play = min(self._play + min(elapsed, MAX_POLL_GAP_S) * self.speed, self.t_end)
        made = self._advance(self._play, budget_s=POLL_BUDGET_S)
        self._note_reached(now)
        said = self._say_early_end()
        # Following ended (its hub said it stopped, or the log stopped growing: a hub killed) is
        # a change the header shows, with no frame of its own: it said "following the log" for ever.
        return made or said or (followed and not self.following)

    def close(self) -> None:
        self._cursor.close()
