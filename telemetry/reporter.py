"""The rank side: publish telemetry to the hub without ever slowing or stopping training.

A :class:`Reporter` owns a ZeroMQ PUSH socket connected to the hub's ingest. ``send`` encodes
with msgspec and sends with ``NOBLOCK``: when the queue (``hwm`` messages) is full, or the hub is
gone, the message is dropped and counted, never waited for. A daemon thread with its own socket
sends a heartbeat (last step, current phase, drop count) and a system sample about once a
second, so a loop stuck in a collective still shows as alive-but-stalled.

On a hub with CURVE keys (``pardash keys``), the reporter's sockets authenticate with the client
keys from ``PARDASH_CURVE_DIR`` (or ``curve=``); that happens once per connection, so ``send``
costs the same. Keys that cannot be read switch publishing off with one warning: telemetry
never stops training.
"""

from __future__ import annotations

import atexit
import itertools
import os
import sys
import threading
import time
from typing import Any

import zmq

from . import schema, security
from .env import ENDPOINT_VAR, RUN_ID_VAR, RankIdentity, rank_identity, telemetry_enabled
from .system import SystemSampler

DEFAULT_HWM = 10_000
"""Messages queued per socket before new ones are dropped (about 15 minutes of 10 Hz steps)."""
LINGER_MS = 1500
"""How long close() waits to flush queued messages to a hub that is there."""


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
        self._phase = ""
        self._phase_t0 = time.monotonic()
        self._seq = itertools.count()
        self._hwm = hwm
        self._heartbeat_s = heartbeat_s
        self._gpu_index = gpu_index
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
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
            self._ctx = context or zmq.Context()
            self._sock = self._connect()
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

    def _connect(self) -> zmq.Socket:
        sock = self._ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, self._hwm)
        sock.setsockopt(zmq.LINGER, LINGER_MS)
        # Reconnect quickly when the hub restarts; ranks never need to know.
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
        if self.keys is not None:
            self.keys.apply(sock)
        sock.connect(self.endpoint)
        return sock

    # -- the hot path ---------------------------------------------------------------------

    def send(self, msg: schema.Message, _sock: zmq.Socket | None = None) -> bool:
        """Stamp and publish one message; False if it was dropped. Never blocks."""
        sock = _sock or self._sock
        if sock is None:
            return False
        msg.run = self.run
        msg.rank = self.rank
        msg.seq = next(self._seq)
        msg.t = time.time()
        try:
            sock.send(schema.encode(msg), zmq.NOBLOCK)
        except (zmq.Again, zmq.ZMQError, TypeError, ValueError, OverflowError):
            # Queue full, hub gone, or a value that cannot be encoded: count it, never raise
            # into the training loop.
            self.dropped += 1
            return False
        self.sent += 1
        return True

    def step(self, **fields: Any) -> bool:
        """Publish one optimizer step (fields of :class:`schema.Step`)."""
        if self._sock is None:
            return False
        self.last_step = fields.get("step", self.last_step)
        return self.send(schema.Step(mono=time.monotonic(), **fields))

    def set_phase(self, phase: str) -> None:
        """Note the phase the loop enters (data, forward, backward, optimizer, ...)."""
        self._phase = phase
        self._phase_t0 = time.monotonic()

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
        )
        base.update(fields)
        ok = self.send(schema.Hello(**base))
        self._start_heartbeat()
        return ok

    def event(self, name: str, message: str = "", **fields: Any) -> bool:
        """Publish an event (checkpoint, epoch_end, warning, error, exit, ...)."""
        return self.send(schema.Event(name=name, message=message, **fields))

    def heartbeat(self, _sock: zmq.Socket | None = None) -> bool:
        now = time.monotonic()
        return self.send(
            schema.Heartbeat(
                step=self.last_step,
                phase=self._phase,
                phase_s=now - self._phase_t0,
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
        sock = self._connect()  # a socket of its own: ZeroMQ sockets are not thread-safe
        try:
            while not self._stop.wait(self._heartbeat_s):
                self.heartbeat(sock)
                if self.sampler is not None:
                    self.send(self.sampler.sample(), sock)
        finally:
            sock.close()

    def close(self, linger_ms: int = LINGER_MS) -> None:
        """Stop the heartbeat and flush what is queued (waiting at most ``linger_ms``)."""
        if self._closed or self._sock is None:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self._sock.setsockopt(zmq.LINGER, linger_ms)
        self._sock.close()
        self._sock = None
        if self._own_ctx:
            # Returns once what was queued is sent, or after linger_ms with no hub to take it:
            # a process may exit at once afterwards (the trainer skips its teardown).
            self._ctx.destroy(linger=linger_ms)
