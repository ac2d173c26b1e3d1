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

import errno
import fcntl
import os
import stat
import time
from dataclasses import dataclass
from typing import Callable

import msgspec
import zmq

from . import registry, security
from .recorder import Recorder

LOG_REQUEST = b"log"
CHUNK_BYTES = 4 << 20
"""At most this much of the log an answer (a client gets at most one answer a frame: 40 MB/s)."""
LINGER_S = 2.0
"""How long a stopping hub goes on answering the clients still copying its log."""
CLIENT_S = 3.0
"""A client that asked this recently is still copying (a caught-up client asks every 0.25 s)."""
MAX_ASKS = 256
"""Clients answered a frame (more wait for the next; a client asks again after ASK_AGAIN_S)."""
QUEUED_BYTES = 64 << 20
"""Answers queued for clients and not yet taken by the kernel past which asks wait."""
FRAME_BYTES = 2 * CHUNK_BYTES
"""Bytes of the log answered at most a frame (the rest wait for the next): reading and sending
them takes the hub's loop a few milliseconds, where 16 answers of 4 MiB held a frame 1.4 s."""
MAX_OFFSET = 1 << 60
"""The largest offset asked for that is taken (a larger one, 2**64, raised in the hub's loop as
its answer was encoded, and stopped the hub)."""
IDLE_ASK_S = 0.25
"""A client that is caught up asks again after this long."""
ASK_AGAIN_S = 10.0
"""A client with no answer this long asks again (it asks at once on a new connection to the
hub, a hub restarted on its port, which never had the ask). An answer that comes late all the
same is dropped by its offset. The hub answers at its next frame, 0.1 s on; a 4 MiB answer
takes 10 s on a link of 3 Mbit/s."""
RESUME_CHECK_BYTES = 64 << 10
"""A copy carried on must end as the hub's log does over this many bytes before its end."""


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
    fatal: bool = False
    """The error is for good (no log, not a file, a copy of another log), not for now (a log
    that cannot be read a moment: asked again)."""


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
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b"", 0, f"the hub's log {path} is not a file (a pipe, or /dev/null): there is nothing to copy"
        return read_lines_at(fd, offset, limit, path)
    finally:
        os.close(fd)


def read_lines_at(fd: int, offset: int, limit: int, name: str) -> tuple[bytes, int, str]:
    """:func:`read_whole_lines` of an open file (``name``: its path, for the reason)."""
    try:
        size = os.fstat(fd).st_size
        if offset > size:
            return b"", size, (
                f"the copy asks from byte {offset:,}, but the hub's log {name} holds {size:,}: "
                "the copy is of another log (or the hub's was replaced)"
            )
        data = os.pread(fd, min(limit, size - offset), offset)
    except OSError as exc:
        return b"", 0, f"cannot read the hub's log {name}: {exc.strerror or exc}"
    return data[: data.rfind(b"\n") + 1], size, ""


@dataclass
class _Client:
    offset: int
    seen: float
    done: bool = False


class LogServer:
    """The hub's side: takes clients' asks as they arrive and answers them at its frames."""

    def __init__(self, recorder: Recorder | None, run_id: str, hub_id: str) -> None:
        self.recorder = recorder
        """What writes the log (None: the hub keeps none)."""
        self.run_id = run_id
        self.hub_id = hub_id
        self.asks: dict[bytes, int] = {}
        self.clients: dict[bytes, _Client] = {}
        self.served_bytes = 0
        self._reader: tuple[object, int] | None = None
        self._out: list[tuple[int, zmq.MessageTracker]] = []
        """Answers sent and not yet taken by the kernel: (bytes, tracker)."""

    def ask(self, ident: bytes, offset: bytes, now: float) -> None:
        """A client's ask (its ROUTER identity, the offset as it came)."""
        try:
            at = int(offset)
        except ValueError:
            return  # not this protocol's: dropped, as the snapshot port drops what it does not know
        if not 0 <= at <= MAX_OFFSET or (ident not in self.asks and len(self.asks) >= MAX_ASKS):
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

    def _read(self, offset: int) -> tuple[bytes, int, str, bool]:
        """The log's whole lines from ``offset``: (bytes, its size, why not, whether that is for good)."""
        rec = self.recorder
        if rec is None:
            return b"", 0, "this hub keeps no log (it was started without one): there is nothing to copy", True
        path = str(rec.path)
        self._reader = rec.reader(self._reader)
        if self._reader is None:  # not writing its log now (a disk full, a path gone): what the path holds
            data, size, why = read_whole_lines(path, offset)
            return data, size, why, bool(why) and offset > size > 0
        fd = self._reader[1]
        if fd < 0:
            return b"", 0, f"the hub's log {path} is not a file (a pipe, or /dev/null): there is nothing to copy", True
        data, size, why = read_lines_at(fd, offset, CHUNK_BYTES, path)
        return data, size, why, offset > size

    def answer(self, sock: zmq.Socket, now: float, *, ended: bool = False) -> None:
        """Answer the waiting asks (the hub's loop calls this at a frame), while the answers
        still queued for clients that do not read them stay under QUEUED_BYTES: past that the
        asks wait (a few hundred clients asking and never reading took the hub's frames from
        10 a second to 1 and its memory to 300 MB)."""
        if not self.asks:
            return
        out = self._out = [(n, t) for n, t in self._out if not t.done]
        queued = sum(n for n, _ in out)
        answered = []
        sent = 0
        for ident, offset in self.asks.items():
            if queued > QUEUED_BYTES or sent >= FRAME_BYTES:
                break  # the rest wait for the next frame
            answered.append(ident)
            data, size, error, fatal = self._read(offset)
            try:
                head = _encode_chunk(LogChunk(offset=offset, size=size, path=str(self.recorder.path) if self.recorder else "",
                                              run=self.run_id, hub_id=self.hub_id, ended=ended, error=error, fatal=fatal))  # fmt: skip
                tracker = sock.send_multipart([ident, LOG_REQUEST, head, data], zmq.NOBLOCK, copy=False, track=True)
            except (zmq.ZMQError, ValueError, OverflowError):
                continue  # that client's queue is full, or it is gone: it asks again
            out.append((len(data), tracker))
            queued += len(data)
            sent += len(data)
            self.served_bytes += len(data)
            c = self.clients.get(ident)
            if c is not None:
                c.done = ended and (bool(error) or offset + len(data) >= size)
        for ident in answered:
            del self.asks[ident]

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
        # The last answers must leave before the socket closes: it closes lingering (see
        # Hub.close), and the hub process ends its ZeroMQ context (bounded) before it exits. A
        # last answer sent a moment before a close without linger was dropped, and its copy
        # waited for it, then gave up (1 run in 5 on a loaded machine).
        sock.setsockopt(zmq.LINGER, int(LINGER_S * 1000))

    def close(self) -> None:
        if self._reader is not None and self._reader[1] >= 0:
            os.close(self._reader[1])
        self._reader = None


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
        # Connections the hub took (a hub restarted on its port): an ask then goes again at once.
        # Asked again on a timer instead, a slow link had the hub send each answer twice. A
        # handshake the hub refuses is why no answer comes (as a viewer learns it).
        self.handshakes = security.Handshakes(self.sock, self.keys)
        self.sock.connect(snapshot)
        self.asked_at = 0.0
        self.connected = 0
        """Connections the hub took since the last ask, past the first (a hub restarted on its port)."""
        self.bad = 0
        """Answers that did not decode (skipped)."""

    def ask(self, offset: int) -> None:
        try:
            self.sock.send_multipart([LOG_REQUEST, str(offset).encode()], zmq.NOBLOCK)
        except zmq.Again:
            pass  # asks already queued for a hub not there: one of them will do
        self.asked_at = time.monotonic()
        self.connected = 0

    @property
    def refused(self) -> str:
        """Why the hub refuses this copy's connection ("" when it has not)."""
        return self.handshakes.refused

    @property
    def reached(self) -> bool:
        """Whether anything took a connection at the hub's address."""
        return self.handshakes.reached

    def _connections(self) -> None:
        # Not the first: the asks made before it wait in the socket and go out on it. Asked
        # again, the hub answered both, and a stopping hub took the stale one's answer (the
        # log's end from an offset behind the copy) as the copy's last and stopped answering.
        before = max(0, self.handshakes.took - 1)
        self.handshakes.read()
        self.connected += max(0, self.handshakes.took - 1) - before

    def answer(self, offset: int, timeout_ms: int) -> tuple[LogChunk, bytes] | None:
        """The answer for ``offset`` within ``timeout_ms`` (answers to earlier asks, for another
        offset, are dropped), or None; None at once when a connection was made since the ask (a
        hub restarted: ask again)."""
        end = time.monotonic() + timeout_ms / 1000
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        if self.handshakes.monitor is not None:
            poller.register(self.handshakes.monitor, zmq.POLLIN)
        while True:
            self._connections()
            if self.connected and self.asked_at:
                return None
            left = end - time.monotonic()
            if left <= 0:
                return None
            if self.sock not in dict(poller.poll(max(1, int(left * 1000)))):
                continue
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
        self.handshakes.close()
        self.sock.close(0)


class CopyError(Exception):
    """A copy that cannot begin or go on: one line why."""


class CopyRefused(CopyError):
    """A copy refused for what it was given (`pardash record` exits 2, as for bad input): an
    ``-o PATH`` that cannot be the copy (a folder, no regular file, the hub's own log, another
    log, a file another copy writes), or a hub that never answered (a wrong address; as `attach` says of it)."""


BAD_PATH_ERRNOS = frozenset({
    errno.EISDIR, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ENOENT, errno.EEXIST, errno.EROFS,
    errno.ENAMETOOLONG, errno.ELOOP, errno.EINVAL,
})  # fmt: skip
"""Why a copy's file cannot be opened that is the path's doing, not the machine's (a full disk)."""


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
    hub_size: int = 0
    """The hub's log's size at its last answer (what a copy catching up has still to take)."""
    hub_restarts: int = 0
    hub_id: str = ""
    hub_error: str = ""
    """Why the hub could not read its log when it last said so ('' since it could again)."""


def not_a_file(path: str, st: os.stat_result | None = None) -> str | None:
    """Why ``path`` (``st``: its status, when open) cannot take a copy, being there and no
    regular file (a folder aside: said with the file meant, by the CLI): /dev/null took a copy
    and said it held the log; a pipe or a device holds nothing report or replay could read."""
    if st is None:
        try:
            st = os.stat(path)
        except OSError:
            return None  # (not there: made; or not to be made, as opening it says)
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return None
    return f"{path} is not a regular file (a device, a pipe or a socket): the copy needs a file of its own; give another -o PATH"


def _wait_answer(follower: LogFollower, offset: int, wait_s: float, stop: Callable[[], bool]) -> tuple[LogChunk, bytes] | None:
    """The answer for ``offset`` within ``wait_s`` (asked again on a new connection), or None
    (none came, or ``stop()``)."""
    end = time.monotonic() + wait_s
    while not stop() and time.monotonic() < end:
        got = follower.answer(offset, 250)
        if got is not None:
            return got
        if follower.connected:
            follower.ask(offset)
    return None


def _check_copy(fd: int, path: str, follower: LogFollower, first: bytes, stop: Callable[[], bool]) -> int:
    """The offset a copy in ``path`` (open as ``fd``) goes on from: its size cut back to its last
    whole line, once its start (``first``: the log's first answer) and the bytes before that
    offset are the hub's log's; CopyError when they are not (an edited copy, or another log's)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return 0
    end = _last_newline(path, size)
    tail_at = max(0, end - RESUME_CHECK_BYTES)
    with open(path, "rb") as fh:
        head = fh.read(min(len(first), size))
        fh.seek(tail_at)
        tail = fh.read(end - tail_at)
    if not head or head[: len(first)] != first[: len(head)]:
        raise CopyRefused(f"{path} holds another log than this run's (or an edited copy of it); give another -o PATH, or remove it")
    if end > len(first):
        # Where it goes on from, the hub's bytes must be the copy's: a copy edited past the
        # first answer (a line deleted) went on from the wrong place.
        follower.ask(tail_at)
        got = _wait_answer(follower, tail_at, ASK_AGAIN_S * 5, stop)
        if got is None:
            raise CopyError("no answer")
        chk, data = got
        if chk.error or not data.startswith(tail):
            raise CopyRefused(f"{path} is not a copy of this run's log up to its end (edited, or of another run); give another -o PATH, or remove it")
    if end < size:
        os.truncate(path, end)  # stopped mid-write: its last line is sent again
    return end


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
    CopyError when it cannot begin (a hub with no log; CopyRefused: no answer within
    ``first_wait_s``, an ``out`` that is the hub's own log, another copy's, or holds another
    log). ``progress`` is called with the copy after each chunk written (''), when it first
    catches up ('caught_up'), when the hub answering is another process ('hub_restarted') and
    when the hub cannot read its log for now ('hub_error', the reason in ``hub_error``)."""
    follower.ask(0)
    # (a hub that refuses this viewer's key says so in its handshake: no answer will come)
    got = _wait_answer(follower, 0, first_wait_s, lambda: stop() or bool(follower.refused))
    if got is None:
        if stop():
            raise CopyError("stopped")
        raise CopyRefused("no answer")
    head, data = got
    if head.error:
        raise CopyError(head.error)
    path = out or default_out(head.run)
    if registry.same_file(head.path, path):
        raise CopyRefused(f"{path} is the log the hub writes itself (run {head.run}): it needs no copy; give another -o PATH")
    parent = os.path.dirname(path)
    try:
        if parent:
            os.makedirs(parent, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o640)
    except OSError as exc:
        refused = CopyRefused if exc.errno in BAD_PATH_ERRNOS else CopyError
        raise refused(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        if refusal := not_a_file(path, os.fstat(fd)):
            raise CopyRefused(refusal)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            # (two copies appending to one file made a file twice the log, each saying it was whole)
            raise CopyRefused(f"another `pardash record` writes {path} now; give this one another -o PATH") from None
        start = _check_copy(fd, path, follower, data, stop)
        cp = Copy(path=path, run=head.run, offset=start, carried_from=start, hub_path=head.path, hub_id=head.hub_id)
        got = (head, data) if start == 0 else None
        if got is None:
            follower.ask(start)
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
                if follower.connected or now - follower.asked_at >= ASK_AGAIN_S:
                    follower.ask(cp.offset)  # (a restarted hub has not seen the ask)
                continue
            head, data = got
            got = None
            last_answer = time.monotonic()
            if head.hub_id and head.hub_id != cp.hub_id:
                cp.hub_restarts += 1
                cp.hub_id = head.hub_id
                if progress is not None:
                    progress(cp, "hub_restarted")
            if head.error:
                if head.fatal:
                    raise CopyError(head.error)
                if head.error != cp.hub_error and progress is not None:
                    cp.hub_error = head.error
                    progress(cp, "hub_error")
                cp.hub_error = head.error
                _pause(stop, IDLE_ASK_S * 4)  # (the hub writes its log again elsewhere, or its disk has room again)
                follower.ask(cp.offset)
                continue
            cp.hub_error = ""
            cp.hub_size = head.size
            if data:
                _write_all(fd, data)
                cp.offset += len(data)
                cp.lines += data.count(b"\n")
                if progress is not None:
                    progress(cp, "")
            if head.ended and cp.offset >= head.size:
                cp.ended = True  # (the hub has stopped, and its log holds no more)
                return cp
            if data:
                follower.ask(cp.offset)
            else:
                if not cp.caught_up:
                    cp.caught_up = True
                    if progress is not None:
                        progress(cp, "caught_up")
                _pause(stop, IDLE_ASK_S)  # caught up: ask again a little later (the hub answers at its frames anyway)
                follower.ask(cp.offset)
        return cp
    finally:
        os.close(fd)


def _pause(stop: Callable[[], bool], seconds: float) -> None:
    end = time.monotonic() + seconds
    while not stop() and time.monotonic() < end:
        time.sleep(0.05)


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
