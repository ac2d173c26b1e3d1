"""The rank side: publish telemetry to the hub without ever slowing or stopping training.

A :class:`Reporter` owns a ZeroMQ PUSH socket connected to the hub's ingest. ``send`` encodes
with msgspec and sends with ``NOBLOCK``: when the queue (``hwm`` messages) is full, or the hub is
gone, the message is dropped and counted, never waited for. A daemon thread sends a heartbeat
(last step, current phase, drop count) and a system sample about once a second, so a loop stuck
in a collective still shows as alive-but-stalled.

Every message of a rank goes on that one socket, the heartbeat thread's too (a lock makes its
sends one at a time with the loop's): the hub takes one connection's messages in order, and
takes turns between connections. Sent on a socket of the thread's own, the steps a held-up loop
left held went out beside the newer ones the loop sent on its own when it came back, and the
hub read a rank's steps out of order (107, 114, 108, 115, ...), a heartbeat ahead of older
steps as lost messages until they came. The thread's own socket carries nothing: it connects
only so that its handshake monitor tells whether the hub took the rank (see below).

On a hub with CURVE keys (``pardash keys``), the reporter's sockets authenticate with the client
keys from ``PARDASH_CURVE_DIR`` (or ``curve=``); that happens once per connection, so ``send``
costs the same. Keys that cannot be read switch publishing off with one warning: telemetry
never stops training.

PUSH has no reply, so the heartbeat thread's socket's handshake monitor (read at beats, never
by ``send``) is how a rank learns whether a hub took it: the first rank of each node says when none
has after HUB_WAIT_S, and at its close that none ever did (nothing of it was recorded).
"""

from __future__ import annotations

import atexit
import itertools
import math
import os
import sys
import threading
import time
from typing import Any

import zmq

from .. import __version__
from . import limits, schema, security
from .env import ENDPOINT_VAR, RUN_ID_VAR, RankIdentity, rank_identity, telemetry_enabled, telemetry_switched_off
from .system import SystemSampler

_encode = schema.encode

DEFAULT_HWM = 10_000
"""Messages queued per socket before new ones are dropped (about 15 minutes of 10 Hz steps)."""
LINGER_MS = 1500
"""How long close() waits to flush queued messages to a hub that is there."""
BATCH_S = 0.05
"""Steps leave in bursts at most this often (or every BATCH_MAX of them). Each send wakes
ZeroMQ's I/O thread, and each arrival the hub: on a machine whose cores the ranks keep busy,
every wake-up takes a core from a rank and, through the next collective, from all of them. A
burst per 50 ms wakes each once for many steps; frames reach viewers every 100 ms anyway.
Events, hellos and a step after a slow one go at once. A heartbeat takes what the loop holds
with it, ahead of it; steps held RESCUE_S (the loop stopped sending: stuck, done, or in a long
evaluation) go from the heartbeat thread between beats. Without a heartbeat thread nothing is
held."""
BATCH_MAX = 64
RESCUE_S = 0.25
"""Steps the loop has held this long without sending (stuck, done, in an evaluation) go from
the heartbeat thread between beats: at the beat only, a rank stuck in a collective and
stopped by torchrun within the second lost its last steps (never counted as lost: nothing
came after them)."""
MAX_METRICS_FOLLOWED = 32
"""Custom metrics whose turns to and from not finite a rank says, at most (a warning each way,
per name): a script that logs thousands of differently named metrics gone NaN says the first
this many, then once that it says no more, rather than flooding the hub with warnings."""
HUB_WAIT_VAR = "PARDASH_HUB_WAIT_S"
HUB_WAIT_S = 10.0
"""How long a rank goes without reaching its hub before it says so (PARDASH_HUB_WAIT_S overrides
it): a PUSH socket is never answered, so a wrong port, or a hub not started or already gone, let
a whole run train unrecorded without a word. A hub a little late (started after the ranks) is
no reason to speak."""
HUB_GRACE_S = 1.0
"""How long after its connection a closing rank still waits for the hub's handshake before it
says it never reached one: a job shorter than that, with its hub there, is not told otherwise."""
WATCHED_EVENTS = security.HANDSHAKE_EVENTS | zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED
"""What the heartbeat socket's monitor reports: handshakes (the hub took the rank, or refused
it), and connections made and dropped. A hub's updates or snapshot port (a PUB, a ROUTER; the
hub's first line lists all three, so PORT+1 is an easy slip) accepts the connection and drops
it in the handshake for its socket type, most times with no handshake event (see
DROPS_SAID_AFTER): the rank was asked "is `pardash hub` running there?" of a hub that was."""
DROPS_SAID_AFTER = 6
"""Connections dropped in the handshake after which a rank without keys says its hub refuses
it (at its end, after any). A ZeroMQ socket of another kind drops about one in four so, the rest
with the word that tells it (the reconnections come every RECONNECT_IVL, 100 ms: 0.6 s); a
program that is no ZeroMQ socket, or a hub with keys, drops every one."""
MORE_GRACE_S = 2.0
"""How much longer than HUB_GRACE_S a closing rank waits where something answered it and has not
had its word yet: a connection whose handshake is under way, or fewer than DROPS_SAID_AFTER
dropped in the handshake. A rank of a loaded host (a CI run, 4 workers on 2 cores) made 2-3
connections in the grace, each dropped so by a hub's updates port, and said its hub "refuses"
it; another's first connection came 0.9 s in, and it said it "never reached a hub"."""


def say_unwatched(launch: str) -> None:
    """Rank 0 says, once, that PARDASH_ENDPOINT is unset and the run is not watched: running
    pardash's trainer, or a script through autorun, without a hub is almost always a mistake.
    ``launch``: how to run it watched ("use `pardash launch -- train.py`"). With
    PARDASH_TELEMETRY=0 (off on purpose): nothing."""
    if os.environ.get(ENDPOINT_VAR) or telemetry_switched_off() or rank_identity().rank != 0:
        return
    print(f"pardash: {ENDPOINT_VAR} is not set: this run is unwatched (start `pardash hub` and export what it prints, "
          f"or {launch})", file=sys.stderr, flush=True)  # fmt: skip


def _hub_wait_s() -> float:
    """HUB_WAIT_S, or PARDASH_HUB_WAIT_S when that is a number of seconds."""
    try:
        wait_s = float(os.environ.get(HUB_WAIT_VAR, HUB_WAIT_S))
    except ValueError:
        return HUB_WAIT_S
    return wait_s if math.isfinite(wait_s) and wait_s >= 0 else HUB_WAIT_S


def _threads() -> set[int]:
    """This process's thread ids (Linux; empty elsewhere)."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def _yield_to_training(tids: set[int]) -> None:
    """Put ZeroMQ's background threads among ``tids`` (its I/O thread and reaper, started by
    the reporter's own context) under SCHED_IDLE: they then never take a core from a busy
    training loop when they wake for a send, and run when the core would idle anyway (a rank
    waiting in a collective, between steps). Woken for a burst on a machine whose cores the
    ranks keep busy, a normal I/O thread preempted the loop for a fraction of a millisecond,
    and through the next collective held up every rank. Best effort: Linux only; nothing
    else is touched."""
    policy = getattr(os, "SCHED_IDLE", None)
    if policy is None:
        return
    # A thread names itself once started: give ZeroMQ's a moment to (a millisecond or two).
    deadline = time.monotonic() + 0.2
    left = set(tids)
    while left:
        for tid in sorted(left):
            try:
                with open(f"/proc/self/task/{tid}/comm") as fh:
                    if not fh.read().startswith("ZMQbg"):
                        continue
                os.sched_setscheduler(tid, policy, os.sched_param(0))
            except OSError:
                pass  # gone, or not allowed: leave it
            left.discard(tid)
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.001)


class Reporter:
    """Publishes one rank's messages. With ``endpoint=None`` every method is a cheap no-op."""

    def __init__(
        self,
        endpoint: str | None,
        *,
        run: str = "",
        identity: RankIdentity | None = None,
        hwm: int = DEFAULT_HWM,
        heartbeat_s: float = 1.0,
        gpu_index: int | None = None,
        context: zmq.Context | None = None,
        curve: security.ClientKeys | str | os.PathLike[str] | bool | None = None,
    ) -> None:
        """``curve``: client keys or their folder for a hub with CURVE keys (default: the
        folder in PARDASH_CURVE_DIR, when set; False: none)."""
        self.identity = identity or rank_identity()
        self.rank = self.identity.rank
        self.run = run
        self.endpoint = endpoint
        self.dropped = 0
        """Messages not sent because the queue was full or the hub was gone."""
        self.sent = 0
        self.last_step = 0
        """Last completed step; the heartbeat reports it."""
        self.samples_total = 0
        """Samples of every step published so far (each step carries the sum: see
        schema.Step.samples_total)."""
        self._phase = ""
        self._waits_in = ""
        self._phase_t0 = time.monotonic()
        self._seq = itertools.count()
        self._held: list[bytes] = []
        """Encoded steps waiting for the next burst (see BATCH_S)."""
        # Re-entrant: a rank stopped by SIGTERM flushes from its handler (telemetry.sigterm),
        # which runs on the loop's thread, maybe inside one of these blocks of a send. Held
        # through every send on the socket (``_sock``), which the heartbeat thread sends on too:
        # a ZeroMQ socket is used from two threads only one at a time, and a batch taken first
        # is sent first. (The heartbeat thread never waits for ``_count_lock`` holding it: the
        # loop's thread, in a signal handler, may want this one while it holds that one.)
        self._held_lock = threading.RLock()
        self._count_lock = threading.RLock()
        self._flushed = time.monotonic()
        self._hwm = hwm
        self._heartbeat_s = heartbeat_s
        self._gpu_index = gpu_index
        self._closed = False
        self._loss_bad: int | None = None
        """The step the loss stopped being finite at (None: it is finite)."""
        self._custom_cut = False
        self._metrics_bad: dict[str, int] = {}
        """Custom metrics not finite now, by name: the step each stopped being finite at."""
        self._metrics_followed: set[str] = set()
        """Names of custom metrics said not finite (at most MAX_METRICS_FOLLOWED)."""
        self._metrics_unfollowed = False
        """Whether a metric past MAX_METRICS_FOLLOWED went unsaid (said once)."""
        self._stop = threading.Event()
        self._linger_ms = LINGER_MS
        """How long the heartbeat socket's unsent messages hold its close: close()'s linger_ms."""
        self._thread: threading.Thread | None = None
        self._handshakes: zmq.Socket | None = None
        """The heartbeat socket's handshake monitor, until one succeeds or fails."""
        self._watched_since: float | None = None
        """When the handshake monitor was attached (the heartbeat socket's connection)."""
        self._hub_verdict: bool | None = None
        """Whether the hub took this rank's handshake (None: no answer yet; False: refused)."""
        self._connected = False
        """Whether a connection was made that no word of its handshake has followed yet."""
        self._drops = 0
        """Connections dropped in the handshake (a rank without keys; see _read_handshakes)."""
        self._last_drop = 0
        """The errno of the last of them."""
        self._hub_wait_s = _hub_wait_s()
        self._said_waiting = False
        """Whether the rank said it had not reached the hub yet."""
        self._sock: zmq.Socket | None = None
        self.sampler: SystemSampler | None = None
        self.keys: security.ClientKeys | None = None
        if endpoint:
            try:
                self.keys = security.client_keys(curve)
            except security.CurveKeyError as exc:
                print(f"pardash: {exc}; telemetry is off for rank {self.rank}", file=sys.stderr, flush=True)
                endpoint = self.endpoint = None
        if endpoint:
            # A context of its own, so that close() can wait for the queue to drain (term); the
            # process-wide instance may hold the user's sockets, which close() must not wait on.
            self._own_ctx = context is None
            before = _threads()
            self._ctx = context or zmq.Context()
            try:
                self._sock = self._connect()
            except zmq.ZMQError as exc:
                # PARDASH_ENDPOINT=localhost:29600 (no tcp://) failed the script before it
                # began: telemetry never stops training, a typo in its address included.
                print(
                    f"pardash: PARDASH_ENDPOINT={endpoint!r} is no hub address ({exc.strerror.split(' (addr=')[0]}; "
                    f"expected tcp://HOST:PORT); telemetry is off for rank {self.rank}",
                    file=sys.stderr,
                    flush=True,
                )
                self.endpoint = None
                if self._own_ctx:
                    self._ctx.term()
                return
            if self._own_ctx:
                _yield_to_training(_threads() - before)
            self.sampler = SystemSampler(gpu_index)
            atexit.register(self.close)

    @classmethod
    def from_env(cls, **kwargs: Any) -> "Reporter":
        """A reporter for the hub named by PARDASH_ENDPOINT (a no-op one when it is unset or
        PARDASH_TELEMETRY=0)."""
        endpoint = os.environ.get(ENDPOINT_VAR) if telemetry_enabled() else None
        return cls(endpoint, run=os.environ.get(RUN_ID_VAR, ""), **kwargs)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def _connect(self, watch: bool = False) -> zmq.Socket:
        """A PUSH socket to the hub; ``watch``: with a monitor of its handshakes
        (``self._handshakes``), attached before it connects so the first is not missed."""
        sock = self._ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, self._hwm)
        sock.setsockopt(zmq.LINGER, LINGER_MS)
        # Reconnect quickly when the hub restarts; ranks never need to know.
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
        if self.keys is not None:
            self.keys.apply(sock)
        security.allow_ipv6(sock, self.endpoint)
        if watch:
            # (connections made and dropped too: what tells a ZeroMQ socket of another kind)
            self._handshakes = security.monitor_socket(sock, WATCHED_EVENTS)
            self._watched_since = time.monotonic()
        try:
            sock.connect(self.endpoint)
        except zmq.ZMQError:
            sock.close(0)  # a caller's context must not wait on it at its term()
            raise
        return sock

    # -- the hot path ---------------------------------------------------------------------

    def send(self, msg: schema.Message, _sock: zmq.Socket | None = None) -> bool:
        """Stamp and publish one message; False if it was dropped. Never blocks. A step may be
        held for the next burst (see BATCH_S); it then counts as sent or dropped when it goes."""
        sock = _sock or self._sock
        if sock is None:
            return False
        msg.run = self.run
        msg.rank = self.rank
        msg.seq = next(self._seq)
        msg.t = time.time()
        try:
            data = schema.encode(msg)
        except (TypeError, ValueError, OverflowError):
            with self._count_lock:
                self.dropped += 1  # a value that cannot be encoded: counted, never raised
            return False
        if _sock is not None:  # a socket of the caller's (the simulator's)
            return self._count(self._send_all(sock, [data]), 1) == 1
        now = time.monotonic()
        with self._held_lock:
            self._held.append(data)
            hold = (
                type(msg) is schema.Step
                and self._thread is not None  # someone to send what the loop leaves held
                and now - self._flushed < BATCH_S
                and len(self._held) < BATCH_MAX
            )
        if hold:
            return True
        return self.flush(now) > 0

    def flush(self, now: float | None = None) -> int:
        """Send the held steps now (from either thread); returns how many went."""
        with self._held_lock:
            sock = self._sock
            if sock is None:
                return 0
            batch, self._held = self._held, []
            self._flushed = time.monotonic() if now is None else now
            sent = self._send_all(sock, batch) if batch else 0
        return self._count(sent, len(batch))

    def _send_all(self, sock: zmq.Socket, batch: list[bytes]) -> int:
        """Send ``batch`` on ``sock`` until its queue is full; returns how many went (the caller
        counts them: see ``_count``)."""
        sent = 0
        for data in batch:
            try:
                sock.send(data, zmq.NOBLOCK)
            except (zmq.Again, zmq.ZMQError):
                break  # queue full or hub gone: what is left is counted, never raised into the loop
            sent += 1
        return sent

    def _count(self, sent: int, of: int) -> int:
        """Count ``sent`` messages of ``of`` as sent, the rest as dropped; returns ``sent``."""
        if of:
            # The loop's thread and the heartbeat thread both send: ``+=`` on an attribute is
            # no single step, and a count lost between them would hide a dropped message.
            with self._count_lock:
                self.sent += sent
                self.dropped += of - sent
        return sent

    def _rescue_held(self) -> bool:
        """Heartbeat thread, between beats: send the steps the loop has held RESCUE_S (it
        stopped sending: stuck in a collective, killed soon by torchrun); returns whether any
        went. On the loop's socket, as all: in order with whatever the loop sends next."""
        return self.flush() > 0

    def step(self, **fields: Any) -> bool:
        """Publish one optimizer step (fields of :class:`schema.Step`). A loss that is not
        finite goes as none (JSON has no NaN) with a warning event when it turns so; a custom
        metric that is not finite is left out, with a warning when it turns so and when it is
        finite again; custom metrics past the hub's limit are cut, with a warning once (the hub
        refused the whole step, loss and all)."""
        if self._sock is None:
            return False
        step = self.last_step = fields.get("step", self.last_step)
        loss = fields.get("loss")
        if loss is not None and (self._loss_bad is not None or not math.isfinite(loss)):
            self._loss_turns(fields, loss, step)
        custom = fields.get("custom")
        if custom:
            try:
                # NaN or an infinity makes the sum so (a sum that overflows only costs the check);
                # a metric said not finite that this step logs may be finite again (one the
                # script no longer logs keeps no step from this short way)
                bad = self._metrics_bad
                finite = math.isfinite(sum(custom.values())) and (not bad or bad.keys().isdisjoint(custom))
            except (TypeError, OverflowError):  # not all floats: each is looked at
                finite = False
            if not finite:
                custom = fields["custom"] = self._metric_turns(custom, step)
            if len(custom) > limits.MAX_CUSTOM:
                fields["custom"] = dict(itertools.islice(custom.items(), limits.MAX_CUSTOM))
                if not self._custom_cut:
                    self._custom_cut = True
                    self.event("warning", f"{len(custom)} custom metrics in a step; the first {limits.MAX_CUSTOM} are kept", step=step)
        samples = fields.get("samples")
        if samples:
            self.samples_total += samples
        fields["samples_total"] = self.samples_total
        # The step's own path of send(): one clock read serves its mono and the burst timing
        # (a few microseconds a step, most of them cache misses, in a loop that runs it each step).
        # A step sent later than it ended brings its own ``t`` and ``mono`` (the automatic
        # instrumentation's, held for what the script logs after it): stamped when sent, the
        # work after a script's last step read as that step's time.
        now = time.monotonic()
        ended = fields.pop("t", None)
        msg = schema.Step(mono=fields.pop("mono", None) or now, **fields)
        msg.run = self.run
        msg.rank = self.rank
        msg.seq = next(self._seq)
        msg.t = ended if ended is not None else time.time()
        try:
            data = _encode(msg)
        except (TypeError, ValueError, OverflowError):
            with self._count_lock:
                self.dropped += 1
            return False
        with self._held_lock:
            held = self._held
            held.append(data)
            hold = self._thread is not None and now - self._flushed < BATCH_S and len(held) < BATCH_MAX
        if hold:
            return True
        return self.flush(now) > 0

    def _loss_turns(self, fields: dict[str, Any], loss: float, step: int) -> None:
        """The loss stops (or starts again) being finite."""
        if not math.isfinite(loss):
            fields["loss"] = None
            if self._loss_bad is None:
                self.event("warning", f"loss is {loss} at step {step}: diverged, or a spike (steps go on without a loss while it is not finite)", step=step)
                self._loss_bad = step
        elif self._loss_bad is not None:
            # A spike the run came back from (a GradScaler skips such a step): "diverged" alone
            # would stand in the report of a run that trained on.
            self.event("warning", f"loss is finite again at step {step} (not finite from step {self._loss_bad})", step=step)
            self._loss_bad = None

    def _metric_turns(self, custom: dict[str, Any], step: int) -> dict[str, Any]:
        """``custom`` without the metrics that are not finite (the hub drops them, JSON having
        no NaN), each said once as it turns so and once as it is finite again, as the loss is;
        past MAX_METRICS_FOLLOWED names, the rest are left out without a word each."""
        kept: dict[str, Any] = {}
        bad = self._metrics_bad
        for name, value in custom.items():
            try:
                finite = math.isfinite(value)
            except (TypeError, OverflowError):
                finite = True  # not a float: what the encoder makes of it (a huge int: dropped, counted)
            if finite:
                kept[name] = value
                since = bad.pop(name, None)
                if since is not None:
                    self.event("warning", f"{name} is finite again at step {step} (not finite from step {since})", step=step)
                continue
            if name in bad:
                continue
            if name not in self._metrics_followed:
                if len(self._metrics_followed) >= MAX_METRICS_FOLLOWED:
                    if not self._metrics_unfollowed:
                        self._metrics_unfollowed = True
                        self.event("warning", f"{name} is {value} at step {step} (steps go on without it); {MAX_METRICS_FOLLOWED} "
                                   "other metrics were said not finite before it: the next ones are left out without a word", step=step)  # fmt: skip
                    continue
                self._metrics_followed.add(name)
            bad[name] = step
            self.event("warning", f"{name} is {value} at step {step} (steps go on without it while it is not finite)", step=step)
        return kept

    def set_phase(self, phase: str, waits_in: str = "") -> None:
        """Note the phase the loop enters (data, forward, backward, optimizer, ...); in "sync",
        ``waits_in`` names the collective it waits in where known (``Heartbeat.waits_in``)."""
        self._phase = phase
        self._waits_in = waits_in
        self._phase_t0 = time.monotonic()

    @property
    def phase(self) -> str:
        """The phase last noted (what the heartbeat says)."""
        return self._phase

    # -- rare messages --------------------------------------------------------------------

    def hello(self, **fields: Any) -> bool:
        """Introduce this rank; starts the heartbeat thread."""
        if self._sock is None:
            return False
        ident = self.identity
        base = dict(
            local_rank=ident.local_rank,
            world_size=ident.world_size,
            node=ident.node,
            host=ident.host,
            pid=os.getpid(),
            restart=ident.restart,
            max_restarts=ident.max_restarts,
            pardash_version=__version__,
        )
        base.update(fields)
        ok = self.send(schema.Hello(**base))
        self._start_heartbeat()
        return ok

    def event(self, name: str, message: str = "", **fields: Any) -> bool:
        """Publish an event (checkpoint, epoch_end, warning, error, exit, ...). Never raises
        (the automatic instrumentation's hooks call it): a field the schema lacks is counted
        as dropped. (``pardash.telemetry.event`` refuses a script's bad fields first.)"""
        if self._sock is None:
            return False
        try:
            msg = schema.Event(name=name, message=message, **fields)
        except TypeError:
            with self._count_lock:
                self.dropped += 1
            return False
        return self.send(msg)

    def heartbeat(self, _sock: zmq.Socket | None = None) -> bool:
        now = time.monotonic()
        return self.send(
            schema.Heartbeat(
                step=self.last_step,
                phase=self._phase,
                phase_s=now - self._phase_t0,
                waits_in=self._waits_in,
                dropped=self.dropped,
                mono=now,
            ),
            _sock,
        )

    def _start_heartbeat(self) -> None:
        if self._thread is not None or self._heartbeat_s <= 0:
            return
        self._thread = threading.Thread(target=self._beat, name="pardash-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        # A socket of its own, that sends nothing: its handshake monitor tells whether the hub
        # took the rank (the beats go on the loop's socket: see the module's docstring).
        sock = self._connect(watch=True)
        if self.sampler is not None:
            self.sampler.prime()  # this thread samples: the first sample a second on has figures
        try:
            next_beat = time.monotonic() + self._heartbeat_s
            while not self._stop.wait(max(0.0, min(RESCUE_S, next_beat - time.monotonic()))):
                now = time.monotonic()
                if now < next_beat:
                    # Between beats: steps the loop has held for RESCUE_S (it stopped sending:
                    # stuck in a collective, killed soon by torchrun) go now, not at the beat
                    if self._held and now - self._flushed >= RESCUE_S:
                        self._rescue_held()
                    continue
                next_beat = now + self._heartbeat_s
                self.heartbeat()  # (the steps held go with it, ahead of it)
                if self.sampler is not None:
                    self.send(self.sampler.sample())
                if self._handshakes is not None:
                    self._read_handshakes(sock)
                    self._say_still_waiting(now)
        finally:
            if self._handshakes is not None:
                # A refusal before a first beat: a short job says it too. A job shorter than
                # HUB_GRACE_S gives its hub that long to answer before it is said not there.
                # (the connection's own event may come first: read until the handshake's; and
                # where something answered, a little longer: see MORE_GRACE_S)
                end = (self._watched_since or 0.0) + HUB_GRACE_S
                while self._handshakes is not None:
                    answered = self._connected or 0 < self._drops < DROPS_SAID_AFTER
                    grace_s = end + (MORE_GRACE_S if answered else 0.0) - time.monotonic()
                    if grace_s <= 0 or not self._handshakes.poll(int(grace_s * 1000) + 1):
                        break
                    self._read_handshakes(sock)
                if self._handshakes is not None:
                    self._read_handshakes(sock, final=True)
            if self._handshakes is not None:
                sock.disable_monitor()
                self._handshakes.close(0)
                self._handshakes = None
            sock.close(linger=self._linger_ms)  # (a rank with no hub, closed with 0: not 1.5 s later)

    def _read_handshakes(self, sock: zmq.Socket, *, final: bool = False) -> None:
        """A hub with CURVE keys that refuses this rank's (none, or one it does not admit) takes
        nothing from it, and says so only in its own log: the rank says it once (the first
        rank of each node), and stops watching once a handshake succeeds. A ZeroMQ socket of
        another kind (a hub's updates or snapshot port) is said as such (see WATCHED_EVENTS).
        ``final``: the rank's end, what is known is said."""
        mon = self._handshakes
        while mon is not None:
            try:
                event = security.monitor_event(mon.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break
            if event is None:
                continue
            event, value = event
            if event == zmq.EVENT_CONNECTED:
                self._connected = True
                continue
            if event == zmq.EVENT_DISCONNECTED:
                if self._connected:
                    # A connection dropped with no word of its handshake: the peer speaks
                    # ZeroMQ without keys, and its socket is of a kind a PUSH cannot talk to.
                    # libzmq connects no more: the rank is unwatched.
                    self._conclude(sock, False)
                    if self.identity.local_rank == 0:
                        print(f"pardash: something answers rank {self.rank} at {self.endpoint}, but it is not a hub's ingest "
                              "port (a ZeroMQ socket of another kind, such as a hub's updates or snapshot port): "
                              "PARDASH_ENDPOINT takes the first port the hub prints; training goes on, unwatched",
                              file=sys.stderr, flush=True)  # fmt: skip
                    return
                continue
            self._connected = False  # (this connection's handshake has had its word)
            if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and self.keys is None:
                # A connection dropped in the handshake, the rank without keys: a ZeroMQ socket
                # of another kind drops some of them so too (when it closes before this side
                # reads its reason), and libzmq connects again; a few such drops in a row are
                # what tells it from another program or a hub with keys.
                self._drops += 1
                self._last_drop = value
                if self._drops < DROPS_SAID_AFTER:
                    continue
            self._say_verdict(sock, event, value)
            return
        if final and self._handshakes is not None and self._drops:
            self._say_verdict(sock, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, self._last_drop)

    def _conclude(self, sock: zmq.Socket, took: bool) -> None:
        """The hub's word on this rank is in: the monitor is closed."""
        self._hub_verdict = took
        if self._handshakes is not None:
            sock.disable_monitor()
            self._handshakes.close(0)
            self._handshakes = None

    def _say_verdict(self, sock: zmq.Socket, event: int, value: int) -> None:
        """The handshake's ``event``: taken (said where the rank had said it waited), or
        refused (said by the first rank of the node, with why)."""
        self._conclude(sock, event == zmq.EVENT_HANDSHAKE_SUCCEEDED)
        if self._hub_verdict and self._said_waiting:
            late_s = time.monotonic() - (self._watched_since or 0.0)
            lost = f"; {self.dropped:,} of its messages were dropped while it waited" if self.dropped else ""
            print(f"pardash: rank {self.rank} reached the hub at {self.endpoint} after {late_s:.0f} s{lost}",
                  file=sys.stderr, flush=True)  # fmt: skip
        if not self._hub_verdict and self.identity.local_rank == 0:
            why = security.refusal(event, self.keys, f"rank {self.rank}", "PARDASH_CURVE_DIR", value)
            print(f"pardash: the hub at {self.endpoint} refuses rank {self.rank}'s telemetry: {why}; training goes on, "
                  "unwatched", file=sys.stderr, flush=True)  # fmt: skip

    def _say_still_waiting(self, now: float) -> None:
        """Heartbeat thread, at a beat: the first rank of a node that has not reached its hub
        for PARDASH_HUB_WAIT_S says so, once (a run that trains for hours should not learn it
        at the end)."""
        if self._said_waiting or self._handshakes is None or self.identity.local_rank != 0:
            return
        waited_s = now - (self._watched_since or now)
        if waited_s < self._hub_wait_s:
            return
        self._said_waiting = True
        print(f"pardash: rank {self.rank} has not reached a hub at {self.endpoint} after {waited_s:.0f} s (is `pardash hub` "
              f"running there?); training goes on, its telemetry waits for one (up to {self._hwm:,} messages, then "
              "dropped)", file=sys.stderr, flush=True)  # fmt: skip

    def close(self, linger_ms: int = LINGER_MS) -> None:
        """Stop the heartbeat and flush what is queued (waiting at most ``linger_ms``)."""
        if self._closed or self._sock is None:
            return
        self._closed = True
        self._linger_ms = linger_ms
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=HUB_GRACE_S + MORE_GRACE_S + 1.0)
            if (self._watched_since is not None and self._hub_verdict is None and self.identity.local_rank == 0
                    and not self._thread.is_alive()):  # fmt: skip
                # (a refused rank said so already; a heartbeat thread still going may not have read
                # its hub's answer yet: nothing said then)
                print(f"pardash: rank {self.rank} never reached a hub at {self.endpoint} (is `pardash hub` running "
                      "there?): nothing of this rank was recorded", file=sys.stderr, flush=True)  # fmt: skip
        self.flush()
        with self._held_lock:  # (a heartbeat thread still going may be sending on it)
            sock, self._sock = self._sock, None
        sock.setsockopt(zmq.LINGER, linger_ms)
        sock.close()
        if self._own_ctx:
            # Returns once what was queued is sent, or after linger_ms with no hub to take it:
            # a process may exit at once afterwards (the trainer skips its teardown).
            self._ctx.destroy(linger=linger_ms)
