"""The hub: ingest every rank's messages, record them, judge them, and serve viewers.

:class:`~.hubcore.HubCore` is the socket-free heart (tests, replay and the benchmarks drive it
directly); ``Hub`` wraps it with three ZeroMQ sockets:

- ingest, PULL (bind): ranks PUSH MessagePack records here;
- updates, PUB (bind): a :class:`Frame` at most ``frame_hz`` times a second;
- snapshot, ROUTER (bind): a :class:`Snapshot` to each viewer that asks (Clone pattern).

Nothing received is ever executed or unpickled: bytes are decoded by msgspec against the
schema, and anything that does not fit is counted by reason and dropped (``HubCore.rejected``;
viewers show the total). Each part of a multipart message is judged as a frame of its own:
asking ZeroMQ whether more parts follow would cost more than the rest of ingest. Frames above
the socket's size limit never reach Python: libzmq drops them and disconnects the sender.
Security (keys, where a hub may bind, what one record may hold) lives in :mod:`.security`.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import shlex
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable

import zmq

from . import cliargs, frames, registry, schema, security
from .registry import reachable
from .hubcore import MAX_RANK, HubCore, rejects_text
from .state import COMMAND_NOTE
from .logfeed import LINGER_S, LOG_REQUEST, LogServer
from .logreader import is_log
from .recorder import LOG_MODE, Recorder, gz_name_refusal, holds_records, is_gzip
from .spawn import quiet_ports
from .state import run_over
from .unsupervised import SupervisorWatch

__all__ = ["Hub", "HubCore", "MAX_RANK", "MAX_SNAPSHOT_WAITERS", "add_hub_arguments", "run_hub", "main"]

MAX_SNAPSHOT_WAITERS = 256
"""Snapshot requests served per frame; more wait for the next frames (a request flood)."""
SNAPSHOT_SNDHWM = 4
"""Snapshots queued for one viewer before its socket drops the next."""
SNAPSHOT_EVERY_S = 1.0
"""At most one snapshot a second for a viewer (a viewer asks once, and again only after a gap)."""
SNAPSHOT_QUEUED_BYTES = 256 << 20
"""Snapshots sent and not yet taken, in bytes, past which no viewer is answered for now."""


def _bind(sock: zmq.Socket, host: str, port: int) -> str:
    if port:
        try:
            sock.bind(f"tcp://{host}:{port}")
        except zmq.ZMQError as exc:
            exc.port = port  # (which of the hub's three: its message names it)
            raise
    else:
        sock.bind(f"tcp://{host}:*")
    return sock.getsockopt(zmq.LAST_ENDPOINT).decode()


class Hub:
    """The hub process's sockets and loop around a :class:`HubCore`."""

    def __init__(
        self,
        *,
        run_id: str,
        log_path: str | None,
        host: str = "127.0.0.1",
        ports: tuple[int, int, int] = (0, 0, 0),
        frame_hz: float = 10.0,
        context: zmq.Context | None = None,
        curve: security.ServerKeys | str | os.PathLike[str] | None = None,
        insecure: bool = False,
        world_size: int = 0,
        spare_dir: str | None = None,
        fds: tuple[int, int, int] | None = None,
    ) -> None:
        """``fds``: listening sockets already bound to ``ports`` (a launch's, which picked the
        ports and told its ranks the first before this process started: ZeroMQ takes them as
        they are, ZMQ_USE_FD, so no other process can take a port in between; the launch's
        "cannot bind 127.0.0.1:64716 (Address already in use)" of a port free when it looked).
        ``spare_dir``: where the log goes on when its path can hold it no more (the
        launcher's run folder; default the temp folder). ``curve``: the hub's keys or their folder (``pardash keys``): only authorised
        clients connect. Binding beyond loopback needs ``curve`` or ``insecure``
        (:class:`security.InsecureBindError` otherwise); bad keys raise
        :class:`security.CurveKeyError`. ``world_size``: refuse ranks at or above it."""
        refusal = security.bind_refusal(host, curve=curve is not None, insecure=insecure)
        if refusal:
            raise security.InsecureBindError(refusal)
        self.keys = security.server_keys(curve) if curve is not None else None
        self.auth = None
        self._own_ctx: zmq.Context | None = None
        if self.keys is not None and context is None:
            # The authenticator serves a whole context: a private one keeps this hub's key list
            # from deciding for other sockets of the process (and a second hub's from clashing).
            self._own_ctx = context = zmq.Context()
        self.ctx = context or zmq.Context.instance()
        self.recorder = Recorder(log_path, background=True, spare_dir=spare_dir) if log_path else None
        self.core = HubCore(run_id=run_id, recorder=self.recorder, world_size=world_size, wall_clock=time.time)
        self.frame_s = 1.0 / frame_hz
        self.on_frame: Callable[[], None] | None = None
        """Called after each frame is sent (the hub process keeps its registry entry by it)."""
        self.say: Callable[[str], None] | None = None
        """Where the hub says, besides its event log, that its admitted keys changed (a hub run
        alone: its stderr)."""
        self._stop = False
        self.ingest = self.ctx.socket(zmq.PULL)
        self.ingest.setsockopt(zmq.MAXMSGSIZE, schema.MAX_MESSAGE_BYTES)
        self.ingest.setsockopt(zmq.RCVHWM, 100_000)
        self.updates = self.ctx.socket(zmq.PUB)
        self.updates.setsockopt(zmq.SNDHWM, 100)
        # It receives only subscriptions (and, with keys, CURVE handshakes of a few hundred bytes).
        self.updates.setsockopt(zmq.MAXMSGSIZE, 4096)
        self.snap = self.ctx.socket(zmq.ROUTER)
        self.snap.setsockopt(zmq.MAXMSGSIZE, 4096)
        # A viewer reads its snapshot at once; one that asks and never reads must not queue
        # snapshots (megabytes each at 1024 ranks) without bound: past this a ROUTER drops.
        self.snap.setsockopt(zmq.SNDHWM, SNAPSHOT_SNDHWM)
        self._snapshots_out: list[tuple[int, list[zmq.MessageTracker]]] = []
        """Snapshots sent and not yet taken by the kernel: (bytes, one tracker per viewer)."""
        self._served_at: dict[bytes, float] = {}
        self.logs = LogServer(self.recorder, run_id, self.core.hub_id)
        """Clients copying the log (``pardash record``), answered at frames on the snapshot port."""
        # With keys, each socket's ZAP domain says who may use it: the ingest takes the ranks'
        # keys only, the viewers' sockets viewers' keys too (authorized_viewers/).
        for s, domain in ((self.ingest, security.INGEST_DOMAIN), (self.updates, security.VIEW_DOMAIN), (self.snap, security.VIEW_DOMAIN)):
            s.setsockopt(zmq.LINGER, 0)
            security.allow_ipv6(s, host)
            if self.keys is not None:
                self.keys.apply(s, domain=domain)
        if self.keys is not None:
            self.auth = self.keys.start_authenticator(self.ctx)
        self._monitors: dict[zmq.Socket, str] = {}
        """With keys: each port's handshake failures (a client without an authorised key got
        nothing and said nothing; the hub counts and says it)."""
        if self.keys is not None:
            failed = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
            for s, which in ((self.ingest, "ingest (ranks)"), (self.updates, "updates (viewers)"), (self.snap, "snapshot (viewers)")):
                self._monitors[security.monitor_socket(s, failed)] = which
        self._refused_said = 0.0
        try:
            if ports[0] and fds:
                for sock, fd in zip((self.ingest, self.updates, self.snap), fds):
                    sock.setsockopt(zmq.USE_FD, fd)
            if ports[0]:
                self.ingest_endpoint = _bind(self.ingest, host, ports[0])
                self.updates_endpoint = _bind(self.updates, host, ports[1])
                self.snapshot_endpoint = _bind(self.snap, host, ports[2])
            else:
                self._bind_consecutive(host)
        except zmq.ZMQError:
            self.close()
            raise

    def recover(self, *, now: float | None = None) -> int:
        """Rebuild state from the log this hub appends to (after a hub restart), so seq gaps,
        verdicts and histories carry on; returns the number of records read. ``now``: the
        hub's monotonic clock when the log has been read (tests pass a fake one), the first
        moment this hub can hear the ranks: their silence and stuck time count from it.

        Charts get the points the live hub kept: a frame's newest step of each rank. The frames'
        times are not in the log, so frames are cut from the rank's own clock (``t``), one each
        ``frame_s``; only the last points a history holds are kept while reading. The grid's
        medians of each rank's last steps are of its last steps in the log, as the dead hub's
        were of the last it took (so a viewer's wall, self, data and comm carry on). The detector
        takes over what the dead hub concluded (``Detector.carry_over``): a rank stalled or
        silent stays so until a message this hub receives says otherwise. The straggler
        detector scores the windows the dead hub scored as it did: at its frames (one each
        ``frame_s`` of the records' clocks, the newest seen), at each recorded verdict and
        every few thousand records (its verdicts, already in the log, are dropped), so its
        streaks carry on, no window is judged twice, and each window is judged against the bar
        of its time. (Scored in one pass at the log's end, every window took the bar of the
        log's last steps: a job whose step fell from 24 ms to 7 ms had the steps of its 24 ms
        time judged against a 1.5 ms bar, where the live hub's was 5 ms, and a restart named a
        straggler the live hub never had.)"""
        if self.recorder is None or not self.recorder.path.exists():
            return 0
        from collections import deque

        from .logreader import read_log
        from .state import HISTORY_POINTS, smooth_of

        core = self.core
        ranks = core.state.ranks
        Step, Verdict = schema.Step, schema.Verdict
        stragglers = core.detector.stragglers
        frame_s = self.frame_s
        points: dict[int, deque[tuple[float, schema.Step]]] = {}
        """rank -> (frame, step) of its newest history points, oldest first."""
        trend = core.state.trend
        in_frame: dict[int, schema.Step] = {}
        """The frame being read: each rank's newest step in it (the run's trend takes them as
        a point when the next frame begins)."""
        firsts: set[int] = set()
        """Ranks whose first step ever is in the frame being read: it stays the frame's, as
        the live hub framed it (HubCore._steps)."""
        first_frame: dict[int, float] = {}
        """rank -> the frame of its first step."""
        frame_at = newest = 0.0
        judge_at = 0.0
        """The records' clock (the newest seen) at which the dead hub's next frame judged."""
        n = 0
        rec, core.recorder = core.recorder, None  # do not write the old records again
        start = now if now is not None else time.monotonic()
        core.recovered_at = start
        try:
            for msg in read_log(self.recorder.path):
                hseq = msg.hseq
                t = msg.t
                if type(msg) is Verdict or not n % 4096 or t >= judge_at:
                    stragglers.update(core.state)  # what the dead hub saw when it judged
                    if t >= judge_at:
                        judge_at = t + frame_s
                core.replay(msg, start)  # which also feeds the straggler detector
                if hseq > core.hseq:
                    core.hseq = hseq
                n += 1
                if type(msg) is Step:
                    r = ranks.get(msg.rank)
                    if r is None or r.step is not msg:
                        continue  # older than the rank's newest (RunState.apply): no point
                    frame = msg.t // frame_s
                    # The trend's frames as the live hub cut them, by arrival: a frame ends once
                    # a rank already in it steps again, a frame's time after it began (by the
                    # newest clock seen). Cut by each record's own clock instead, ranks on
                    # hosts whose clocks differ alternated frames, a point of one rank each.
                    newest = max(newest, msg.t)
                    if msg.rank in in_frame and newest - frame_at >= 0.9 * frame_s:  # (a hair under: float clocks)
                        trend.add_frame(in_frame.values())
                        in_frame.clear()
                        firsts.clear()
                    if not in_frame:
                        frame_at = newest
                    q = points.get(msg.rank)
                    if q is None:
                        q = points[msg.rank] = deque(maxlen=HISTORY_POINTS)
                        firsts.add(msg.rank)
                        first_frame[msg.rank] = frame
                        in_frame[msg.rank] = msg
                    else:
                        if msg.rank not in firsts:
                            in_frame[msg.rank] = msg
                        if frame == first_frame[msg.rank]:
                            frame += 1  # (the first step's frame carried it alone: its newer steps, the next)
                    if q and q[-1][0] == frame:
                        q[-1] = (frame, msg)
                    else:
                        q.append((frame, msg))
        finally:
            core.recorder = rec
        if now is None:
            now = time.monotonic()  # a long log takes a while: ranks were not heard meanwhile
        for r in ranks.values():
            if r.last_seen == start:
                r.last_seen = now
        if in_frame:
            trend.add_frame(in_frame.values())
        core.state.commit_history((s for q in points.values() for _, s in q), trend=False)
        core.framed(q[-1][1] for q in points.values() if q)
        for r in ranks.values():
            if r.recent:  # its last steps, read back (HubCore.replay): the snapshot's medians
                r.smooth = smooth_of(r.recent)
        core._steps.clear()  # each rank's newest step is its last point already
        core._held.clear()
        core.detector.carry_over(core.state, now)
        core.tick(now)
        return n

    def _bind_consecutive(self, host: str, tries: int = 50) -> None:
        # Three consecutive ports, so `attach tcp://HOST:PORT` (the ingest port that ranks
        # know) finds updates at PORT+1 and snapshots at PORT+2; above the kernel's ephemeral
        # range where it leaves room (quiet_ports), else any free ones.
        quiet = quiet_ports()
        for i in range(tries):
            if quiet is not None and i < tries // 2:
                try:
                    self.ingest_endpoint = _bind(self.ingest, host, random.choice(quiet))
                except zmq.ZMQError:
                    continue
            else:
                self.ingest_endpoint = _bind(self.ingest, host, 0)
            port = int(self.ingest_endpoint.rsplit(":", 1)[1])
            try:
                self.updates_endpoint = _bind(self.updates, host, port + 1)
            except zmq.ZMQError:
                self.ingest.unbind(self.ingest_endpoint)
                continue
            try:
                self.snapshot_endpoint = _bind(self.snap, host, port + 2)
            except zmq.ZMQError:
                self.ingest.unbind(self.ingest_endpoint)
                self.updates.unbind(self.updates_endpoint)
                continue
            return
        raise zmq.ZMQError(zmq.EADDRINUSE, "no three consecutive free ports")

    @property
    def endpoints(self) -> dict[str, str]:
        return {
            "ingest": self.ingest_endpoint,
            "updates": self.updates_endpoint,
            "snapshot": self.snapshot_endpoint,
        }

    def stop(self, *_: object) -> None:
        self._stop = True

    def serve(self, *, until: float | None = None) -> None:
        """Run the loop until ``stop()`` (or a SIGTERM handler calling it)."""
        # Messages are taken at the frame when the last pass emptied the queue: the loop then
        # waits only for the frame clock and for snapshot requests. Each wake-up of the hub
        # takes a core from a rank on a machine the ranks keep busy (and, through the next
        # collective, from every rank), and a frame carries the same messages either way.
        # A pass that could not empty the queue (a flood) keeps the loop taking as they come.
        poller = zmq.Poller()
        poller.register(self.ingest, zmq.POLLIN)
        poller.register(self.snap, zmq.POLLIN)
        for monitor in self._monitors:
            poller.register(monitor, zmq.POLLIN)
        watching = True
        core = self.core
        next_frame = time.monotonic() + self.frame_s
        waiting: list[bytes] = []
        while not self._stop:
            now = time.monotonic()
            if until is not None and now >= until:
                break
            timeout_ms = max(0.0, (next_frame - now) * 1000)
            events = dict(poller.poll(timeout_ms))
            now = time.monotonic()
            if self.ingest in events or now >= next_frame:
                # At the frame, what gathered since the last pass goes into it: up to half a
                # frame's time for it (then the frame goes out, and the rest follows).
                emptied = self._drain(now, until=next_frame if now < next_frame else now + self.frame_s / 2)
                if emptied == watching:
                    if emptied:
                        poller.unregister(self.ingest)
                    else:
                        poller.register(self.ingest, zmq.POLLIN)
                    watching = not emptied
            for monitor in self._monitors:
                if monitor in events:
                    self._refused(monitor)
            if self.snap in events:
                while True:
                    try:
                        parts = self.snap.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if len(parts) == 3 and parts[1] == LOG_REQUEST:
                        self.logs.ask(parts[0], parts[2], now)
                        continue
                    # One answer per viewer and a bounded number per frame: past that a
                    # request is dropped (a viewer asks again), never queued without bound.
                    if len(parts) >= 2 and parts[-1] == frames.SNAPSHOT_REQUEST and parts[0] not in waiting:
                        if len(waiting) < MAX_SNAPSHOT_WAITERS:
                            waiting.append(parts[0])
            now = time.monotonic()
            if now >= next_frame:
                if self.auth is not None:
                    self._reload_keys(now)
                self._publish(core.tick(now))
                if self.on_frame is not None:
                    self.on_frame()
                # Snapshots are cut at frame boundaries: the viewer then applies frames with
                # fseq > snapshot.fseq and never sees a message twice.
                if waiting:
                    self._answer(waiting, now)
                if self.logs.asks:
                    self.logs.answer(self.snap, now)
                next_frame = max(next_frame + self.frame_s, now + self.frame_s / 2)
        # Final drain so the last messages before a stop reach the log and the viewers: what
        # ranks sent as they exited may still be on its way (their sockets flush to the kernel,
        # not to us), so take until the ingest has been quiet a while (bounded: ranks may still
        # be sending).
        deadline = time.monotonic() + 1.0
        while True:
            self._drain(time.monotonic(), until=deadline)
            if time.monotonic() >= deadline or not self.ingest.poll(FINAL_QUIET_MS):
                break
        self._publish(core.tick(time.monotonic()))

    def _drain(self, now: float, until: float | None = None, batch: int = 256) -> bool:
        """Take what the ranks sent, until the queue is empty or the clock reaches ``until``
        (checked every ``batch`` messages): under a flood the loop comes back in time to send
        the next frame, rather than after tens of thousands of messages (a late, huge frame).
        What is left waits in the socket for the next pass. True when the queue was emptied."""
        recv = self.ingest.recv
        ingest = self.core.ingest_batch
        clock = time.monotonic
        NB, Again = zmq.NOBLOCK, zmq.Again
        while True:
            got: list[bytes] = []
            keep = got.append
            try:
                for _ in range(batch):
                    keep(recv(NB, copy=True))
            except Again:
                ingest(got, now)
                return True
            ingest(got, now)
            now = clock()
            if until is not None and now >= until:
                return False

    def _answer(self, waiting: list[bytes], now: float) -> None:
        """Send the viewers waiting a snapshot of this frame. A viewer answered less than
        SNAPSHOT_EVERY_S ago waits (one asking at every frame would have the hub encode the
        whole state ten times a second), and while the snapshots still queued for viewers that
        do not read them pass SNAPSHOT_QUEUED_BYTES, nobody is answered: they ask again."""
        out = self._snapshots_out = [(n, ts) for n, ts in self._snapshots_out if not all(t.done for t in ts)]
        if sum(n for n, _ in out) > SNAPSHOT_QUEUED_BYTES:
            return
        served = self._served_at
        if len(served) > 4 * MAX_SNAPSHOT_WAITERS:
            for ident in [i for i, t in served.items() if now - t >= SNAPSHOT_EVERY_S]:
                del served[ident]
        ready = [i for i in waiting if now - served.get(i, -SNAPSHOT_EVERY_S) >= SNAPSHOT_EVERY_S]
        if not ready:
            return
        payload = frames.encode(self.core.snapshot())
        trackers = []
        for ident in ready:
            waiting.remove(ident)
            served[ident] = now
            try:
                # copy=False: every queued answer shares the one encoded snapshot
                trackers.append(self.snap.send_multipart([ident, payload], zmq.NOBLOCK, copy=False, track=True))
            except zmq.Again:
                pass  # that viewer's queue is full; it asks again
        if trackers:
            out.append((len(payload), trackers))

    def _publish(self, frame: frames.Frame) -> None:
        try:
            self.updates.send_multipart([frames.FRAME_TOPIC, frames.encode(frame)], zmq.NOBLOCK)
        except zmq.Again:
            pass

    def _reload_keys(self, now: float) -> None:
        """Admit the client keys ``authorized_clients/`` holds now (looked at once a second)."""
        said = self.auth.reload(now)
        if said is None:
            return
        name, text = said
        self.core.note(text, name=name)
        if self.say is not None:
            self.say(text)

    def _refused(self, monitor: zmq.Socket) -> None:
        """Count the handshakes a port refused (no key, or one not authorised); say it in the
        event log at most once a minute."""
        n = 0
        while True:
            try:
                event = security.monitor_event(monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break
            if event is None:
                continue
            kind, value = event
            # A key the hub does not admit (ZAP said no), or a ZeroMQ client with no keys at all:
            # the hub sees the mechanism mismatch, or (when the client saw it first and hung
            # up) a handshake cut short, as a bare TCP probe's is. Stray bytes (an HTTP request
            # to the port) are neither: not counted.
            # A client holding another server key (one rotated since) fails to speak CURVE to
            # it: a cryptographic error, counted too.
            if kind in (zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL) or (
                kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                and value in (zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH, zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
            ):
                n += 1
        if not n:
            return
        core = self.core
        core.rejected["no_key"] += n
        now = time.monotonic()
        if now - self._refused_said >= REFUSED_SAID_EVERY_S:
            self._refused_said = now
            text = (f"refused a connection to its {self._monitors[monitor]} port that brought no key authorised there "
                    f"({core.rejected['no_key']} so far): a rank or viewer needs PARDASH_CURVE_DIR set to this hub's "
                    "keys (`pardash keys`); a TCP health probe counts here too")  # fmt: skip
            core.note(text)
            if self.say is not None:  # (a hub alone: its operator watches its terminal, not the log)
                self.say(text)

    def close(self) -> None:
        last_frame = False
        if self.recorder is not None:
            self.recorder.close()
            if self.recorder.last_word and not self.updates.closed:
                # What became of the lines its disk never took is known only now: the viewers
                # still attached get it in a last frame (a launch's last line names where the
                # whole log went, or how many lines were lost), sent before the socket closes.
                self.core.note(self.recorder.last_word, name="warning")
            if not self.snap.closed and self.logs.copying(time.monotonic()):
                self.logs.linger(self.snap)  # the log's last lines to the copies (pardash record)
        if not self.updates.closed and (self.core.steps_waiting or self.core.has_pending):
            # The viewers still attached get what came since the last frame, its "hub stopped"
            # note with it: without it a viewer of a job whose other node died showed that
            # node's rank "running" for ever, and "hub quiet for 63 s".
            self._publish(self.core.tick(time.monotonic()))
            last_frame = True
        self.logs.close()
        for s in (self.ingest, self.updates, self.snap):
            if self._monitors:
                s.disable_monitor()
        for m in self._monitors:
            m.close(0)
        self.ingest.close(0)
        self.updates.close(int(LAST_FRAME_LINGER_S * 1000) if last_frame else 0)
        self.snap.close()  # (its own linger: 0, or what the log copies' last answers need)
        if self.auth is not None:
            self.auth.stop()
            self.auth = None
        if self._own_ctx is not None:
            self._own_ctx.term()
            self._own_ctx = None


REFUSED_SAID_EVERY_S = 60.0
"""A hub with keys says it refused a client at most this often (a client retries every second)."""

LAST_FRAME_LINGER_S = 1.0
"""How long a closing hub waits for its last frame (its log's fate) to leave for its viewers."""

FINAL_QUIET_MS = 100
"""A stopping hub takes messages until its ingest has been quiet this long (or for 1 s)."""

GC_YOUNG_THRESHOLD = 20_000
"""Container allocations between young collections in a hub process (Python's default: 700)."""


def _tune_gc() -> None:
    """Garbage-collector settings for a hub process, once its setup is done.

    The messages the hub holds are structs outside the collector's reach (``gc=False``) and
    free themselves by reference count, but at 100k messages a second the loop's lists and
    the detector's windows would still start a young collection every few hundred messages,
    and now and then a full one over everything the process has loaded. What is loaded by now
    stays for the process's life: it is frozen out of every collection, and a young
    collection waits for more allocations. Cycles are still collected."""
    import gc

    gc.collect()  # what is garbage now would be frozen for good
    gc.freeze()
    _, mid, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, mid, old)


def main(argv: list[str] | None = None) -> int:
    """``python -m pardash.telemetry.hub``: run a hub until SIGTERM/SIGINT."""
    p = argparse.ArgumentParser(prog="pardash hub", description="Run a pardash hub alone.")
    add_hub_arguments(p)
    p.add_argument("--ready-fd", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--meta", default="{}", help=argparse.SUPPRESS)
    p.add_argument("--listen-fds", type=_listen_fds, default=None, help=argparse.SUPPRESS)
    ns = p.parse_args(argv)
    return run_hub(ns, ready_fd=ns.ready_fd, meta=json.loads(ns.meta))


def _listen_fds(text: str) -> tuple[int, int, int]:
    """``--listen-fds A,B,C``: the three listening sockets a launcher bound for this hub's
    --port (see Hub's ``fds``)."""
    fds = tuple(int(x) for x in text.split(","))
    if len(fds) != 3 or min(fds) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: three file descriptors, A,B,C")
    return fds  # type: ignore[return-value]


add_hub_arguments = cliargs.hub_arguments
"""The hub's flags (made in cliargs, which every command's parser loads)."""


def _missing(path: str) -> list[str]:
    """``path`` and its folders that do not exist yet, outermost first."""
    out: list[str] = []
    path = os.path.abspath(path)
    while not os.path.exists(path):
        out.insert(0, path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return out


def _claim(log: str) -> int | bool:
    """Hold the log for this hub alone, for as long as it lives (an advisory lock the kernel lets
    go of when the process ends, however it ends): two runs started at once with the same --log
    both found it empty and both appended to it. Its descriptor; False when another hub holds
    it; True when there is nothing to hold (a FIFO, /dev/null) or locks are not to be had."""
    try:
        if not stat.S_ISREG(os.stat(log).st_mode):
            return True
    except FileNotFoundError:
        pass
    except OSError:
        return True  # the recorder says what is wrong with it
    try:
        os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, LOG_MODE)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    except OSError:  # a file system without locks
        os.close(fd)
        return True
    return fd


def _unmake(made: list[str]) -> None:
    """Remove the empty log (and run folder) a hub that did not start made: nothing to keep."""
    for path in reversed(made):
        try:
            if os.path.isdir(path):
                os.rmdir(path)  # only if empty
            elif os.path.getsize(path) == 0:
                os.remove(path)
        except OSError:
            pass


class JobEnd:
    """Says, for a hub run alone, when every rank of the job it serves has ended: how (each
    rank finished, or the root cause as the report and a launch say it), at which step; and
    again for each job run again under the run's id, or started again by torchrun, and ended
    again. Called at each frame."""

    def __init__(self, hub: Hub, say: Callable[[str], None]) -> None:
        self.hub, self.say = hub, say
        st = hub.core.state
        self.said = self._processes() if run_over(st) else None
        """Each rank's process whose end was said (or recovered from the log as ended: not said
        again); None: the job's end is not said yet."""
        self.restarts = self._restarts()

    def _processes(self) -> dict[int, tuple]:
        """Each rank's process, as its hello says it: a new one is a new job's (or torchrun's restart's)."""
        return {r.rank: (r.hello.pid, r.hello.restart) if r.hello is not None else () for r in self.hub.core.state.ranks.values()}

    def _restarts(self) -> int:
        return max((r.restarts for r in self.hub.core.state.ranks.values()), default=0)

    def __call__(self) -> None:
        st = self.hub.core.state
        if self.said is not None:
            said = self.said
            if any(said.get(rank) == p for rank, p in self._processes().items()):
                # Not every rank is of a new job yet: a rank of a job run again that failed at
                # once, before the others' hellos came, ended beside the last job's ranks (the
                # end of no job).
                return
            # Every rank started again since (a job run again, or torchrun's restart): the
            # next end is that job's.
            self.said = None
            if (restarts := self._restarts()) > self.restarts:
                # (a job run again by hand, the hub's own warning says: HubCore._say_run_again)
                self.restarts = restarts
                # (torchrun's own count, as its log says it: RankState.restarts counts the
                # restarts of earlier jobs under the run's id too)
                self.say(f"torchrun restarted the job (restart {restarts - self.hub.core.state.restarts_before}): it goes on")
        if self.said is not None or not run_over(st):
            return
        self.said = self._processes()
        self.restarts = self._restarts()
        text = job_end_text(st)
        left = restarts_left(st)
        if left and text.startswith(FAILED):
            # (torchrun's --max-restarts not spent: the job is not over, its next attempt comes;
            # said "the job has ended" at each failed attempt, review 254)
            self.say(f"an attempt failed, and torchrun starts the job again ({left} restart{'s' if left > 1 else ''} left): "
                     f"{text.removeprefix(FAILED)}")
            return
        rec = self.hub.recorder
        log = f"; log {rec.path}" if rec is not None and str(rec.path) != os.devnull else ""
        self.say(f"{text}{log}; the hub serves on (a job run again under run id {st.run_id} goes on in its log; "
                 "Ctrl-C stops the hub)")


FAILED = "the job has ended: "
"""How :func:`job_end_text` begins a failure's line."""


def restarts_left(st) -> int:
    """Restarts torchrun may still make of the job (its --max-restarts, as the ranks' hellos say
    it, less the attempt's count): a failure before it is spent is an attempt's."""
    return max((max(0, r.hello.max_restarts - r.hello.restart) for r in st.ranks.values() if r.hello is not None), default=0)


def job_end_text(st) -> str:
    """How a job whose every rank has ended ended, in one line: "the job has ended at step 500:
    ranks 0-3 finished", or with the root cause as the report and a launch's last line give
    it ("rank 1 exited with code 1 at step 10: RuntimeError: boom; rank 0 was stopped")."""
    from .failures import failure_summary, signal_name
    from .printer import loss_text
    from .summary import ranks_named, stragglers_were

    ranks = sorted(st.ranks.values(), key=lambda r: r.rank)
    finished = [r.rank for r in ranks if r.finished]
    steps = [s for s in (r.last_step for r in ranks) if s is not None]
    said: list[str] = []
    f = failure_summary(st)
    if f is not None:
        said.append(f["line"])  # (its step, the failure's)
    else:
        said.append(f"at step {max(steps)}" if steps else "with no step taken")
    if finished:
        said.append(f"{ranks_named(finished)} finished")
    if f is None:
        # Stopped (a scheduler's SIGTERM, Ctrl-C), or an end no rank's failure explains: each
        # way said with its ranks.
        hows: dict[str, list[int]] = {}
        for r in ranks:
            if not r.finished and r.exit_code is not None:
                how = "stopped" if r.ended_in_stop else "exited"
                how += f" ({signal_name(r.exit_code) or f'exit code {r.exit_code}'})"
                hows.setdefault(how, []).append(r.rank)
        said.extend(f"{ranks_named(who)} {how}" for how, who in hows.items())
    if slow := stragglers_were(st):
        said.append(slow)
    if loss := loss_text(st, over=True):
        said.append(loss)
    if f is None:  # "the job has ended at step 500: ranks 0-3 finished"
        return f"the job has ended {said[0]}: " + "; ".join(said[1:])
    return FAILED + "; ".join(said)


def _progress(st) -> dict:
    """Where a run is, for `pardash ps`: the slowest running rank's step, of how many (where the
    trainer said), the time left to them (as the TUI's header says it), samples a second now, the ranks by state, when this was so, and the strategy
    the ranks said (a launched script's entry says "script": the TUI said "ddp")."""
    from .causes import waiting_count
    from .summary import samples_per_s, time_left_s, total_steps

    total = total_steps(st.hello)
    left = time_left_s(st, total)
    # (of the exited, those stopped: a hub alone's job stopped by a scheduler read "failed")
    stopped = sum(1 for r in st.ranks.values() if r.ended_in_stop)
    # (ranks whose loss is not finite, by what it is: a run gone NaN read "running", review 306)
    bad: dict[str, int] = {}
    for r in st.ranks.values():
        if r.loss_not_finite is not None:
            bad[r.loss_not_finite[0]] = bad.get(r.loss_not_finite[0], 0) + 1
    counts = st.status_counts()
    # (ranks out of inputs under DDP's Join: "running" of a job whose rank 0 had joined, review 335)
    joined = sum(1 for r in st.ranks.values() if r.joined)
    return {"step": st.step, "steps": total, "left_s": None if left is None else round(left, 1),
            "samples_per_s": round(samples_per_s(st), 1), "ranks": counts, "waiting": waiting_count(st, counts), "stopped": stopped, "loss_not_finite": bad,
            "joined": joined,
            "t": round(time.time(), 1), "strategy": (st.hello.strategy or None) if st.hello else None}  # fmt: skip


def _told_command(meta: dict) -> list[str] | None:
    """The ``command`` a launch told its hub (``--meta``): a list of words, else None."""
    return registry.command_words(meta.get("command"))


def run_hub(ns: argparse.Namespace, *, ready_fd: int | None = None, meta: dict | None = None) -> int:
    if ns.log and (ns.log.endswith(("/", os.sep)) or os.path.isdir(ns.log)):
        # As a launch says it (it read "cannot write adir: Is a directory; choose a writable --log").
        print(f"pardash hub: --log {ns.log} is a folder; give a file: --log {os.path.join(ns.log, 'telemetry.jsonl')}", file=sys.stderr)
        return 2
    resumed = ""
    if getattr(ns, "resume", False) and ns.log:
        # --resume carries on the log's run: a new id, made up or asked for, made it a log of
        # two runs ("the figures below mix them"), and the hub told ranks to report under it.
        from .logreader import log_run_id

        held = log_run_id(ns.log)
        if not ns.run_id:
            if held and not cliargs.valid_run_id(held):
                print(f"pardash hub: --resume: the log {ns.log} names its run {held!r}, not a run id pardash makes; pass --run-id ID", file=sys.stderr)
                return 2
            resumed = held
        elif held and held != ns.run_id and cliargs.valid_run_id(held):
            print(f"pardash hub: --resume: the log {ns.log} is run {held}'s, not {ns.run_id}'s; drop --run-id to carry it on, "
                  "or pass a new --log PATH", file=sys.stderr)  # fmt: skip
            return 2
    run_id = ns.run_id or resumed or registry.new_run_id()
    log = ns.log or os.path.join("runs", run_id, "telemetry.jsonl")
    if getattr(ns, "resume", False) and meta is None and not holds_records(log):
        print(f"pardash hub: --resume: {log} holds no run yet; starting it", file=sys.stderr)
    if is_gzip(log):
        print(f"pardash hub: the log {log} is gzip-compressed: lines appended to it would be lost; decompress it, or pass a new --log PATH", file=sys.stderr)
        return 2
    if ns.log and (refusal := gz_name_refusal(ns.log)):
        print(f"pardash hub: {refusal}", file=sys.stderr)
        return 2
    if holds_records(log) and not is_log(log):
        print(f"pardash hub: {log} is not a pardash log (no record in its first lines); pass a new --log PATH", file=sys.stderr)
        return 2
    made = _missing(log)
    claim = _claim(log)
    if claim is False:
        print(f"pardash hub: the log {log} is being written by another hub (another run); pass a new --log PATH", file=sys.stderr)
        return 2
    try:
        return _run_claimed(ns, run_id, log, made, ready_fd=ready_fd, meta=meta)
    finally:
        if claim is not True:
            os.close(claim)  # (the process ends here but for a caller in-process: a test)


def _run_claimed(ns: argparse.Namespace, run_id: str, log: str, made: list[str], *, ready_fd: int | None, meta: dict | None) -> int:
    """:func:`run_hub` once its log is this hub's alone."""
    ports = (ns.port, ns.port + 1, ns.port + 2) if ns.port else (0, 0, 0)
    curve_dir = getattr(ns, "curve_dir", None) or security.curve_dir_from_env()
    world_size = getattr(ns, "world_size", 0) or int((meta or {}).get("world_size") or 0)
    insecure = getattr(ns, "insecure", False)
    if not getattr(ns, "resume", False) and holds_records(log):
        print(f"pardash hub: the log {log} already holds a run; pass --resume to carry it on, or a new --log PATH", file=sys.stderr)
        return 2
    wants_metrics = getattr(ns, "prometheus", None) is not None
    textfile_path = getattr(ns, "prometheus_textfile", None)
    # Before anything binds or writes: `python -m pardash.telemetry.hub` has no CLI in front.
    refusal = security.metrics_refusal(ns.prometheus_addr, insecure=insecure) if wants_metrics else None
    if textfile_path and not refusal:
        from .prometheus import textfile_refusal

        refusal = textfile_refusal(textfile_path, run_id)
    if refusal:
        print(f"pardash hub: {refusal}", file=sys.stderr)
        _unmake(made)
        return 2
    try:
        hub = Hub(
            run_id=run_id, log_path=log, host=ns.bind, ports=ports, frame_hz=ns.frame_hz,
            curve=curve_dir, insecure=insecure, world_size=world_size, spare_dir=(meta or {}).get("run_dir") or None,
            fds=getattr(ns, "listen_fds", None) if ns.port else None,
        )  # fmt: skip
    except (security.InsecureBindError, security.CurveKeyError) as exc:
        print(f"pardash hub: {exc}", file=sys.stderr)
        _unmake(made)
        return 2
    except zmq.ZMQError as exc:
        busy = getattr(exc, "port", ns.port)
        why = str(exc.strerror).split(" (addr=")[0]
        if exc.errno == zmq.EADDRINUSE and ns.port:
            names = {ns.port: "ingest", ns.port + 1: "updates", ns.port + 2: "snapshots"}
            fix = (f"the hub's {names.get(busy, 'ingest')} port: it takes --port {ns.port} and the two after it; "
                   "choose another --port")  # fmt: skip
        elif exc.errno == zmq.EADDRINUSE:
            fix = "choose a --port"
        else:
            fix = "check --bind (an address of this machine)"
        print(f"pardash hub: cannot bind {ns.bind}:{busy or '*'} ({why}): {fix}", file=sys.stderr)
        _unmake(made)
        return 2
    if hub.recorder is not None and hub.recorder.error:
        if not getattr(ns, "resume", False):
            print(f"pardash hub: {hub.recorder.error}; choose a writable --log", file=sys.stderr)
            hub.close()
            _unmake(made)
            return 2
        # A hub restarted under a running job serves all the same: the ranks' telemetry goes on
        # to viewers, and the recorder keeps the newest lines and retries at every frame.
        print(f"pardash hub: {hub.recorder.error}; serving without it until it can write", file=sys.stderr)
    meta = dict(meta or {})
    output = meta.pop("output", None)  # (the launcher's, not the run's: kept out of the registry)
    info = {"run_id": run_id, "log": os.path.abspath(log), "pid": os.getpid(), "curve": hub.keys is not None, **hub.endpoints, **meta}
    # -- Prometheus /metrics, read from this hub's state at scrape time --
    # (the launcher's strategy, said until a rank's hello says it: strategy="" before; a
    # script's is whatever its hellos find, "script" being no strategy)
    told_strategy = str((meta or {}).get("strategy") or "")
    if told_strategy == "script":
        told_strategy = ""
    metrics = None
    if wants_metrics:
        from .prometheus import MetricsError, serve_metrics

        try:
            metrics = serve_metrics(
                hub.core, ns.prometheus, addr=ns.prometheus_addr, per_rank=ns.prometheus_per_rank, insecure=insecure,
                strategy=told_strategy,
            )
        except MetricsError as exc:
            print(f"pardash hub: {exc}", file=sys.stderr)
            hub.close()
            _unmake(made)
            return 2
        info["metrics"] = metrics.url
    # -- --prometheus-textfile: the same metrics in a file node_exporter keeps after the job --
    textfile = None
    if textfile_path:
        from .prometheus import MetricsError, TextfileWriter

        try:
            textfile = TextfileWriter(hub.core, textfile_path, per_rank=ns.prometheus_per_rank, strategy=told_strategy)
        except MetricsError as exc:
            print(f"pardash hub: {exc}", file=sys.stderr)
            if metrics is not None:
                metrics.close()
            hub.close()
            _unmake(made)
            return 2
    entry = None
    if not getattr(ns, "no_registry", False):
        try:
            entry = registry.register(info)
        except OSError as exc:
            # A read-only home or runtime folder (a cluster's) costs the listing, not the run. Said
            # in the log and to viewers too: under a launch's TUI the line went by before it took
            # the screen, and its events panel never said it (review 279).
            said = (f"cannot write the run registry {registry.registry_dir()} ({exc.strerror or exc}): "
                    f"`pardash ps` will not list this run; attach with `pardash attach {info['ingest']}`, "
                    "or set PARDASH_REGISTRY_DIR to a writable folder")  # fmt: skip
            print(f"pardash hub: {said}", file=sys.stderr, flush=True)
            hub.core.note(said, name="warning")
    each_frame: list[Callable[[], None]] = []
    if entry is not None and not (info.get("strategy") and info.get("world_size")):
        # A hub alone (no launcher said what runs): `pardash ps` learns the strategy and the
        # ranks from the first hello.
        def learn() -> None:
            st = hub.core.state
            if st.strategy and st.world_size:
                registry.update(run_id, strategy=st.strategy, world_size=st.world_size)
                each_frame.remove(learn)

        each_frame.append(learn)
    if entry is not None and hub.recorder is not None:
        # The log may go on beside its path (another file took it): the registry says where,
        # for viewers and for a supervisor that restarts this hub.
        logged = [info["log"]]

        def follow_log() -> None:
            now = os.path.abspath(hub.recorder.path)
            if now != logged[0]:
                logged[0] = now
                registry.update(run_id, log=now)

        each_frame.append(follow_log)
    if entry is not None:
        # `pardash ps` shows where each run is from its entry (no hub asked, keys or not).
        told = [0.0]

        def tell_ps() -> None:
            now = time.monotonic()
            if now - told[0] >= registry.PROGRESS_EVERY_S:
                told[0] = now
                try:
                    registry.update(run_id, progress=_progress(hub.core.state))
                except Exception:  # (the listing is a convenience, never a reason for a hub to stop)
                    pass

        each_frame.append(tell_ps)
    if textfile is not None:
        # The writer's thread keeps its failure for the loop to say: the hub's notes are the
        # loop's to make (event log and viewers; its stderr too for a hub alone).
        def say_textfile_failure() -> None:
            if text := textfile.take_warning():
                hub.core.warn(text)

        each_frame.append(say_textfile_failure)
    supervisor = int((meta or {}).get("supervisor_pid") or 0)
    if supervisor:
        each_frame.append(SupervisorWatch(hub, supervisor))
    else:  # a launched hub's stderr is the terminal its TUI draws on: its viewers show the events
        hub.say = hub.core.say = lambda text: print(f"pardash hub: {text}", file=sys.stderr, flush=True)
    if each_frame:
        hub.on_frame = lambda: [f() for f in list(each_frame)]
    signal.signal(signal.SIGTERM, hub.stop)
    signal.signal(signal.SIGINT, hub.stop)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:  # (not under nohup)
        # Its terminal closed: the hub stops as at a SIGTERM, its log closed with "hub stopped"
        # and its registry entry gone (it died where it stood, both left behind).
        signal.signal(signal.SIGHUP, hub.stop)
    # A hub outlives whoever reads its output (`pardash hub 2>&1 | tee hub.txt`, a terminal
    # closed, a tee killed): a line it cannot write is dropped, never an error in its loop (a
    # warning said to a reader gone was counted as an internal_error reject of the message).
    from .streams import off_the_terminal, unbreakable_stdio

    unbreakable_stdio()
    # Ready before the log is read back: the ports are bound, so what the ranks send waits in
    # ZeroMQ's queues meanwhile, and a supervisor never takes a long recovery (minutes, for a
    # day's log) for a hub that did not start.
    try:
        if ready_fd is not None:
            with os.fdopen(ready_fd, "w") as fh:
                fh.write(json.dumps(info) + "\n")
            if isinstance(output, str) and output:
                # A launch's TUI is to own the terminal: what this hub says from now on (its
                # log's fate as it stops, a traceback) goes to the ranks' output file.
                off_the_terminal(output)
        else:
            print(json.dumps(info), flush=True)  # (stdout: for scripts)
            ingest = reachable(info["ingest"])
            # A hub with keys answers only their holders: the commands said here carry them (run
            # as printed, `pardash attach RUN` found no answer without its --curve-dir).
            keys = shlex.quote(os.path.abspath(curve_dir)) if hub.keys is not None and curve_dir else ""
            print(
                f"pardash hub: ranks report here with PARDASH_ENDPOINT={ingest} PARDASH_RUN_ID={info['run_id']}"
                f"{f' PARDASH_CURVE_DIR={keys}' if keys else ''} "
                f"(torchrun ... -m pardash.trainer.autorun train.py); watch with "
                f"`pardash attach {ingest if entry is None else info['run_id']}{f' --curve-dir {keys}' if keys else ''}`",
                file=sys.stderr, flush=True,
            )  # fmt: skip
    except OSError:
        pass  # nobody waits for the line any more: serve all the same
    try:
        recovered = hub.recover() if getattr(ns, "resume", False) else 0
    except OSError as exc:  # the log cannot be read back: serve what comes from now on
        print(f"pardash hub: cannot read the log back ({exc.strerror or exc}); carrying on without its past", file=sys.stderr)
        recovered = 0
    if recovered:
        hub.core.note(
            f"hub restarted (pid {os.getpid()}): {recovered} records recovered from the log; "
            "messages the ranks sent while no hub listened are counted as lost",
            name="hub_restart",
        )
    else:
        hub.core.note(f"hub started (pid {os.getpid()}), ingest {hub.ingest_endpoint}")
        if command := _told_command(meta):
            hub.core.note(COMMAND_NOTE + shlex.join(command))  # (`report` and a replay read it: see command_of)
    if hub.say is not None and ready_fd is None:
        # A hub alone: its terminal (often a batch job's log) says how each job it serves ends.
        # (A job the log already held as ended is not said again.)
        each_frame.append(JobEnd(hub, hub.say))
        if hub.on_frame is None:
            hub.on_frame = lambda: [f() for f in list(each_frame)]
    _tune_gc()
    if textfile is not None:
        textfile.start()  # after the log is read back: a restarted hub's first file is not empty
    try:
        hub.serve()
    finally:
        hub.core.say_refused(time.monotonic(), all_of_them=True)  # (its log then counts them received, not lost)
        st = hub.core.stats()
        stopped = f"hub stopped: {st.received} messages, {st.lost} lost, {rejects_text(st.rejected)}"
        hub.core.note(stopped)
        if hub.say is not None and ready_fd is None:  # a hub alone: its terminal had its start, and now its end
            hub.say(stopped + (f"; log {hub.recorder.path}" if hub.recorder is not None else ""))
        if textfile is not None and (unsaid := textfile.close()):  # the run's end, kept after this process
            hub.core.note(unsaid, name="warning")
            print(f"pardash hub: {unsaid}", file=sys.stderr, flush=True)  # (no viewer may be left to show it)
        hub.close()
        if hub.recorder is not None and hub.recorder.last_word:
            # (said here whoever started the hub: no viewer may be left to show it)
            print(f"pardash hub: {hub.recorder.last_word}", file=sys.stderr, flush=True)
        if metrics is not None:
            metrics.close()
        if entry is not None:
            registry.unregister(entry)
        # What is still queued (the log copies' last answers, sent lingering) leaves before the
        # process does: its context ends once every socket is gone, within a bound.
        if not hub.ctx.closed:
            ender = threading.Thread(target=hub.ctx.term, daemon=True)
            ender.start()
            ender.join(LINGER_S + 0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
