"""A live run's log, copied from its hub as it is written: what ``pardash record`` does.

A job on another machine (a Kubernetes pod, a cluster node) keeps its JSONL log on that
machine's disk, and a pod's disk goes with the pod. ``pardash record`` keeps a copy beside the
viewer, byte for byte the hub's log (report, replay and export read it as they read the hub's),
from the run's first line to its last, without a shared filesystem or a second port.

The protocol rides the hub's snapshot port (ROUTER), under its keys when it has them. A client
(DEALER) asks for the log from a byte offset:

    LOG_REQUEST, b"<offset in decimal>"

and the hub answers, at its next frame, with what its log holds from there (at most
``CHUNK_BYTES``, cut after the last whole line):

    LOG_REQUEST, LogChunk (msgpack), the bytes

The client asks again from where that ended, so it is never sent more than it has taken, and a
slow disk or link slows only its copy. At its end the hub writes its last lines, then answers
the clients still copying for up to ``LINGER_S`` with ``ended`` set: a copy that receives an
empty chunk with ``ended`` holds the whole log. A hub restarted under the same job (the
launcher's supervisor restarts a killed one) appends to the same file, so a copy goes on from
its offset with the new hub as with the old.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from typing import Callable

import msgspec
import zmq

from . import registry, security

LOG_REQUEST = b"log"
CHUNK_BYTES = 4 << 20
"""At most this much of the log an answer (a client gets at most one answer a frame: 40 MB/s)."""
LINGER_S = 2.0
"""How long a stopping hub goes on answering the clients still copying its log."""
CLIENT_S = 3.0
"""A client that asked this recently is still copying (a caught-up client asks every 0.25 s)."""
MAX_ASKS = 256
"""Clients answered a frame (more wait for the next; a client asks again after ASK_AGAIN_S)."""
IDLE_ASK_S = 0.25
"""A client that is caught up asks again after this long."""
ASK_AGAIN_S = 1.0
"""A client with no answer this long asks again: a hub restarted meanwhile never had the ask
(an answer that comes late all the same is dropped by its offset). The hub answers at its next
frame, 0.1 s on."""


class LogChunk(msgspec.Struct, omit_defaults=True):
    """The head of an answer: where its bytes begin in the hub's log, and what the hub knows."""

    offset: int
    size: int = 0
    """The log's size when it was read (a line being written may end past the bytes sent)."""
    path: str = ""
    """The log's path on the hub's machine."""
    run: str = ""
    hub_id: str = ""
    ended: bool = False
    """The hub has stopped and written its last line: nothing follows what it holds."""
    error: str = ""
    """Why there is nothing to copy (no bytes follow)."""


_encode_chunk = msgspec.msgpack.Encoder().encode
_decode_chunk = msgspec.msgpack.Decoder(LogChunk).decode


def read_whole_lines(path: str, offset: int, limit: int = CHUNK_BYTES) -> tuple[bytes, int, str]:
    """``path``'s bytes from ``offset``, at most ``limit``, up to the end of their last whole line;
    with the file's size, and why there is nothing to read ('' when there is)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return b"", 0, f"cannot read the hub's log {path}: {exc.strerror or exc}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b"", 0, f"the hub's log {path} is not a file (a pipe, or /dev/null): there is nothing to copy"
        if offset > st.st_size:
            return b"", st.st_size, (
                f"the copy asks from byte {offset:,}, but the hub's log {path} holds {st.st_size:,}: "
                "the copy is of another log (or the hub's was replaced)"
            )
        data = os.pread(fd, min(limit, st.st_size - offset), offset)
    except OSError as exc:
        return b"", 0, f"cannot read the hub's log {path}: {exc.strerror or exc}"
    finally:
        os.close(fd)
    end = data.rfind(b"\n") + 1
    return data[:end], st.st_size, ""


@dataclass
class _Client:
    offset: int
    seen: float
    done: bool = False


class LogServer:
    """The hub's side: takes clients' asks as they arrive and answers them at its frames."""

    def __init__(self, path: Callable[[], str | None], run_id: str, hub_id: str) -> None:
        self.path = path
        """The log's path now (a recorder moves its log when its path can hold it no more);
        None: the hub keeps no log."""
        self.run_id = run_id
        self.hub_id = hub_id
        self.asks: dict[bytes, int] = {}
        self.clients: dict[bytes, _Client] = {}
        self.served_bytes = 0

    def ask(self, ident: bytes, offset: bytes, now: float) -> None:
        """A client's ask (its ROUTER identity, the offset as it came)."""
        try:
            at = int(offset)
        except ValueError:
            return  # not this protocol's: dropped, as the snapshot port drops what it does not know
        if at < 0 or (ident not in self.asks and len(self.asks) >= MAX_ASKS):
            return
        self.asks[ident] = at
        c = self.clients.get(ident)
        if c is None:
            if len(self.clients) >= 4 * MAX_ASKS:
                for gone in [i for i, k in self.clients.items() if now - k.seen >= CLIENT_S]:
                    del self.clients[gone]
            self.clients[ident] = _Client(at, now)
        else:
            c.offset, c.seen = at, now

    def answer(self, sock: zmq.Socket, now: float, *, ended: bool = False) -> None:
        """Answer every waiting ask (the hub's loop calls this at a frame)."""
        if not self.asks:
            return
        path = self.path()
        for ident, offset in self.asks.items():
            if path is None:
                data, size, error = b"", 0, "this hub keeps no log (it was started without one): there is nothing to copy"
            else:
                data, size, error = read_whole_lines(path, offset)
            head = LogChunk(offset=offset, size=size, path=path or "", run=self.run_id, hub_id=self.hub_id, ended=ended, error=error)
            try:
                sock.send_multipart([ident, LOG_REQUEST, _encode_chunk(head), data], zmq.NOBLOCK)
            except zmq.ZMQError:
                continue  # that client's queue is full, or it is gone: it asks again
            self.served_bytes += len(data)
            c = self.clients.get(ident)
            if c is not None:
                c.done = ended and (not data or bool(error))
        self.asks.clear()

    def copying(self, now: float) -> list[bytes]:
        """Clients that asked lately and have not been told the log ended."""
        return [i for i, c in self.clients.items() if not c.done and now - c.seen < CLIENT_S]

    def linger(self, sock: zmq.Socket, timeout_s: float = LINGER_S) -> None:
        """At the hub's end, once its last line is written: answer the clients still copying
        until each has the whole log (or ``timeout_s``). Other requests are not answered."""
        clock = time.monotonic
        end = clock() + timeout_s
        while self.copying(clock()) and clock() < end:
            if sock.poll(50):
                while True:
                    try:
                        parts = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if len(parts) == 3 and parts[1] == LOG_REQUEST:
                        self.ask(parts[0], parts[2], clock())
            self.answer(sock, clock(), ended=True)


# -- the client ---------------------------------------------------------------------------------


class LogFollower:
    """A client's socket to a hub's snapshot port, asking for its log from an offset."""

    def __init__(self, snapshot: str, *, curve=None, context: zmq.Context | None = None) -> None:
        self.keys = security.client_keys(curve)
        self.ctx = context or zmq.Context.instance()
        self.endpoint = snapshot
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, CHUNK_BYTES + (1 << 20))
        if self.keys is not None:
            self.keys.apply(self.sock)
        security.allow_ipv6(self.sock, snapshot)
        self.sock.connect(snapshot)
        self.asked_at = 0.0
        self.bad = 0
        """Answers that did not decode (skipped)."""

    def ask(self, offset: int) -> None:
        try:
            self.sock.send_multipart([LOG_REQUEST, str(offset).encode()], zmq.NOBLOCK)
        except zmq.Again:
            pass  # asks already queued for a hub not there: one of them will do
        self.asked_at = time.monotonic()

    def answer(self, offset: int, timeout_ms: int) -> tuple[LogChunk, bytes] | None:
        """The answer for ``offset`` within ``timeout_ms`` (answers to earlier asks, for another
        offset, are dropped), or None."""
        end = time.monotonic() + timeout_ms / 1000
        while True:
            left = end - time.monotonic()
            if left <= 0 or not self.sock.poll(max(1, int(left * 1000))):
                return None
            try:
                parts = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                continue
            if len(parts) != 3 or parts[0] != LOG_REQUEST:
                self.bad += 1
                continue
            try:
                head = _decode_chunk(parts[1])
            except (msgspec.DecodeError, msgspec.ValidationError):
                self.bad += 1
                continue
            if head.offset == offset:
                return head, parts[2]

    def close(self) -> None:
        self.sock.close(0)


class CopyError(Exception):
    """A copy that cannot begin or go on: one line why."""


@dataclass
class Copy:
    """Where a copy stands."""

    path: str
    run: str = ""
    offset: int = 0
    """Bytes the copy holds."""
    lines: int = 0
    """Lines this copy added (a copy carried on holds more)."""
    carried_from: int = 0
    """Bytes the file held when this copy began (a copy carried on)."""
    ended: bool = False
    """The hub said its log ended, and the copy holds all of it."""
    gone: bool = False
    """The copy stopped because its hub went quiet and its run left the registry."""
    caught_up: bool = False
    """The copy has once held all the hub's log had (it follows it live from then)."""
    hub_path: str = ""
    hub_restarts: int = 0
    hub_id: str = ""


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_start(out: str, first: bytes) -> int:
    """The offset a copy into ``out`` goes on from: 0 for a new or empty file, its size (to its
    last whole line) when it holds the start of this log (``first``: the log's first bytes);
    CopyError when it holds something else."""
    try:
        with open(out, "rb") as fh:
            head = fh.read(len(first))
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise CopyError(f"cannot read {out}: {exc.strerror or exc}") from None
    if size == 0:
        return 0
    n = min(len(head), len(first))
    if not n or head[:n] != first[:n]:
        raise CopyError(f"{out} holds another log (not this run's); give another -o PATH, or remove it")
    return size  # (a copy longer than the first answer: its start matched, the size is checked next)


def follow(
    follower: LogFollower,
    out: str | None,
    *,
    default_out: Callable[[str], str],
    wait_s: float,
    first_wait_s: float = 5.0,
    progress: Callable[[Copy, str], None] | None = None,
    stop: Callable[[], bool] = lambda: False,
    run_gone: Callable[[], bool] = lambda: False,
) -> Copy:
    """Copy the hub's log into ``out`` (None: ``default_out(run id)``, known from the first
    answer) until the hub says it ended, ``stop()`` is true, or no answer came for ``wait_s``
    (or ``run_gone()`` says its run is no longer live); returns where the copy stands. Raises
    CopyError when it cannot begin (no answer within ``first_wait_s``, a hub with no log, an
    ``out`` that is the hub's own log or holds another). ``progress`` is called with the copy
    after each chunk written (''), when it first catches up ('caught_up') and when the hub
    answering is another process ('hub_restarted')."""
    follower.ask(0)
    got = follower.answer(0, int(first_wait_s * 1000))
    if got is None:
        raise CopyError("no answer")
    head, data = got
    if head.error:
        raise CopyError(head.error)
    path = out or default_out(head.run)
    if _same_file(path, head.path):
        raise CopyError(f"{path} is the log the hub writes itself (run {head.run}): it needs no copy; give another -o PATH")
    start = _check_start(path, data)
    if start > head.size:
        raise CopyError(f"{path} holds more than the hub's log ({start:,} bytes against {head.size:,}): not a copy of it; give another -o PATH")
    parent = os.path.dirname(path)
    try:
        if parent:
            os.makedirs(parent, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o640)
    except OSError as exc:
        raise CopyError(f"cannot write {path}: {exc.strerror or exc}") from None
    cp = Copy(path=path, run=head.run, offset=start, carried_from=start, hub_path=head.path, hub_id=head.hub_id)
    try:
        if start:
            # A copy carried on: from its own end (its last line whole: a copy stopped mid-write
            # is cut back to its last newline, which the hub sends again).
            with open(path, "rb") as fh:
                fh.seek(max(0, start - 1))
                if fh.read(1) != b"\n":
                    tail = _last_newline(path, start)
                    os.truncate(path, tail)
                    cp.offset = cp.carried_from = tail
            follower.ask(cp.offset)
            got = None
        else:
            got = (head, data)
        last_answer = time.monotonic()
        while not stop():
            if got is None:
                got = follower.answer(cp.offset, 250)
            if got is None:
                now = time.monotonic()
                if now - last_answer >= wait_s:
                    return cp
                if now - last_answer >= first_wait_s and run_gone():
                    cp.gone = True
                    return cp
                if now - follower.asked_at >= ASK_AGAIN_S:
                    follower.ask(cp.offset)  # (a restarted hub has not seen the ask)
                continue
            head, data = got
            got = None
            last_answer = time.monotonic()
            if head.error:
                raise CopyError(head.error)
            if head.hub_id and head.hub_id != cp.hub_id:
                cp.hub_restarts += 1
                cp.hub_id = head.hub_id
                if progress is not None:
                    progress(cp, "hub_restarted")
            if data:
                _write_all(fd, data)
                cp.offset += len(data)
                cp.lines += data.count(b"\n")
                if progress is not None:
                    progress(cp, "")
                follower.ask(cp.offset)
            elif head.ended:
                cp.ended = True
                return cp
            else:
                if not cp.caught_up:
                    cp.caught_up = True
                    if progress is not None:
                        progress(cp, "caught_up")
                # Caught up: ask again a little later (the hub answers at its frames anyway).
                end = time.monotonic() + IDLE_ASK_S
                while not stop() and time.monotonic() < end:
                    time.sleep(0.05)
                follower.ask(cp.offset)
        return cp
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _last_newline(path: str, size: int) -> int:
    """The offset just past the last newline in ``path``'s first ``size`` bytes (0: none)."""
    with open(path, "rb") as fh:
        pos = size
        while pos > 0:
            step = min(pos, 1 << 16)
            fh.seek(pos - step)
            block = fh.read(step)
            k = block.rfind(b"\n")
            if k >= 0:
                return pos - step + k + 1
            pos -= step
    return 0


def run_live(run_id: str) -> bool:
    """Whether this machine's registry still lists ``run_id`` as live."""
    return registry.find(run_id) is not None
