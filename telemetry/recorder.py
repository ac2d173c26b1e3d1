"""The JSONL recorder: every message and verdict the hub accepts, one JSON object a line.

Writes are buffered and flushed at every frame (10 Hz), so the log is at most 100 ms behind and
a crash of the hub loses at most that. A write error (disk full, path gone) never stops the hub:
the error is kept for viewers to show, and writing is retried at the next flush. A log deleted
(or moved away) while the hub writes it is written again at its path from the hub's open copy
(the deleted file lives on while the hub holds it open), and a :attr:`Recorder.notices` line
says so: ``rm -rf`` of a run's folder mid-run costs nothing.

A hub's recorder (``background=True``) writes from a thread of its own: the hub's loop encodes
the lines (that needs the interpreter) and hands them over at each frame, and the copy into the
file, which does not hold the interpreter, runs on another core while the loop takes the next
messages. A slow disk (a network mount) then delays the log, not the ingest; when the lines
waiting for it pass :data:`MAX_UNWRITTEN_BYTES` the loop writes itself, as without the thread.

A disk that is still full when the recorder closes leaves the lines it held nowhere: they go,
with what the log holds already, into a complete copy of the log in the spare folder (else the
temp folder), which :attr:`Recorder.last_word` names; the log itself ends with a line saying
where it went on (:data:`CONTINUED_AT`), when its disk has room for that line.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

from . import schema


_encode = schema.encode_json
_encode_lines = schema.encode_json_lines


def _encode_or_skip(msg: schema.Message) -> bytes:
    try:
        return _encode(msg) + b"\n"
    except Exception:
        return b""


CHECK_PATH_S = 0.25
"""How often the writing side checks that the log is still at its path (two stat calls)."""
MAX_UNWRITTEN_BYTES = 512 << 20
"""Encoded lines kept in memory while the log cannot be written (about 80 s of 1024 ranks at 10
steps a second); past that the oldest go."""


CONTINUED_AT = "log continued in full at "
"""How the note a log whose disk filled ends with begins, the complete copy's path after it
(``report`` of that log can point there)."""


BLANK_LOOK_BYTES = 4096
"""A file this short or shorter is read to tell whether it holds only blank lines."""


def holds_records(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a regular file with something in it: a run's log already. A
    second run appended to it would read as one run mixing both (a FIFO or /dev/null holds
    nothing, nor does a file of blank lines: ``touch`` or an editor's save of an empty one)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
        return False
    if st.st_size > BLANK_LOOK_BYTES:
        return True
    try:
        with open(path, "rb") as fh:
            return bool(fh.read(BLANK_LOOK_BYTES).strip())
    except OSError:
        return True  # unreadable: what then opens it says why


def gz_name_refusal(path: str) -> str | None:
    """Why a log may not be named ``*.gz`` (None: it may): the hub writes plain JSON lines."""
    if not path.endswith(".gz"):
        return None
    return (
        f"--log {path}: the hub writes plain JSON lines (a .gz name would hide that); "
        "compress the log after the run, which report, replay and export read as it is"
    )


def is_gzip(path: str | os.PathLike[str]) -> bool:
    """A log kept compressed: readers take it as it is, but lines appended to it are lost. Only
    a regular file can be one (opening a FIFO to look blocked the hub until a writer came)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as fh:
            return fh.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def _end_torn_line(path: Path) -> None:
    """End a log that stops in the middle of a line (its hub died mid-write) with a newline, so
    the next line appended is a line of its own and not glued to the fragment, unreadable with
    it. The fragment stays, as a line readers skip and count (nothing of a file is cut away);
    the message it held is counted lost by the gap it leaves in its rank's seq."""
    if not holds_records(path):  # nothing to end (a FIFO, /dev/null, a new log)
        return
    try:
        with open(path, "r+b") as fh:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
    except OSError:
        pass  # unreadable or unwritable: opening it for appending says why


def _write_all(fd: int, data: bytes, at: int | None = None) -> None:
    """Write all of ``data`` (at offset ``at``, else at the end): a write the disk filled in
    the middle of returns short, and the next one says why."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view) if at is None else os.pwrite(fd, view, at)
        view = view[n:]
        if at is not None:
            at += n


_DROPPED_SO_FAR = re.compile(r" \([\d,]+ lines dropped so far: [^()]*\)$")
"""What :meth:`Recorder._trim` adds to the error."""

_STEP_LINE = b'{"kind":"step","step":'


def _steps_text(chunks: list[bytes]) -> str:
    """' of steps A-B': the steps of the first and the last step line among ``chunks`` (lines in
    the hub's order: several ranks' steps interleave), '' when there is none."""
    first = last = None
    for chunk in chunks:
        i = chunk.find(_STEP_LINE)
        if i >= 0:
            first = _step_at(chunk, i)
            break
    for chunk in reversed(chunks):
        i = chunk.rfind(_STEP_LINE)
        if i >= 0:
            last = _step_at(chunk, i)
            break
    if first is None or last is None:
        return ""
    return f" of step {first}" if first == last else f" of steps {min(first, last)}-{max(first, last)}"


def _step_at(chunk: bytes, i: int) -> int | None:
    digits = chunk[i + len(_STEP_LINE) : i + len(_STEP_LINE) + 20].split(b",", 1)[0]
    return int(digits) if digits.isdigit() else None


LOG_MODE = 0o640
"""A new log's permissions (less the umask): the user's and their group's to read; never
writable by others, whose lines report and replay would trust, whatever the umask."""


def _open_log(path: Path):
    """The log for appending, readable too (a log deleted under the hub is copied back from
    this descriptor)."""
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        regular = True
    if not regular:  # a FIFO (the log piped into another tool): write-only, never read back
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
        return os.fdopen(fd, "ab", buffering=1 << 16)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), LOG_MODE)
    return os.fdopen(fd, "a+b", buffering=1 << 16)


class Recorder:
    """Appends messages to a JSON Lines file."""

    def __init__(self, path: str | os.PathLike[str], *, background: bool = False, spare_dir: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path)
        self.spare_dir = Path(spare_dir).absolute() if spare_dir else Path(tempfile.gettempdir())
        self.closed = False
        """Closed: what is handed to it later (a closing hub's last frame) is not written
        (it reopened the log, or its copy, and wrote the hub's last word there twice)."""
        """Where the log goes on when its path can hold it no more (its folder replaced by a
        file, or made read-only): the launcher's run folder, else the temp folder."""
        self.dropped = 0
        """Lines dropped while the log could not be written (past MAX_UNWRITTEN_BYTES)."""
        self._dropped_said = 0
        self._astray = ""
        """Why the log is written to a file no path leads to (deleted, and no place found to
        write it again): said as the error until it is written again somewhere."""
        self.last_word = ""
        """What :meth:`close` did with lines its disk never took ('' when there were none):
        where the whole log went, or how many lines were lost. No frame carries the notice any
        more; the hub says it to its viewers and on its stderr as it stops."""
        self.background = background
        """Write from a thread of its own at :meth:`flush_soon` (a hub's recorder)."""
        self.lines = 0
        """Lines written (or buffered) so far."""
        self.error = ""
        """Last write error, '' when writing works."""
        self.pending: list[schema.Message] = []
        """Messages not yet encoded. The hub's loop appends to it directly (and adds to
        ``lines``): ``write`` is the same, a call per message slower."""
        self._encoded: list[bytes] = []
        """Encoded lines, a chunk per ``encode``, not yet handed to the writing (the caller's
        thread only)."""
        self._handed_bytes = 0
        """Bytes handed to the writer thread so far (written by the caller's thread only)."""
        self._done_bytes = 0
        """Of those, bytes the writing side has taken over (changed under the lock only)."""
        self._handoff: deque[list[bytes]] = deque()
        self._wake = threading.Event()
        self._stopping = False
        self._writer: threading.Thread | None = None
        self._lock = threading.Lock()
        """Held while writing: the writer thread's writes and a flush's never interleave."""
        self._unwritten: list[bytes] = []
        """Encoded lines taken for writing and not yet written (a failed write keeps them)."""
        self._unwritten_bytes = 0
        self._good: tuple[int, int] | None = None
        """(inode, size) of the log before a write that failed: part of it may have reached the
        file, and the whole is written again once writing works."""
        self.notices: deque[str] = deque()
        """What the hub should tell viewers about its log (a log deleted and written again):
        appended by the writing side, taken by the hub's loop."""
        self._checked = time.monotonic()
        self._fh = None
        self._open()

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self._good is not None:
                # A failed write may have left part of its lines (a torn last line): cut the
                # file back to where it was good, so the lines kept are written once, whole.
                ino, size = self._good
                st = os.stat(self.path) if self.path.exists() else None
                if st is not None and st.st_ino == ino and st.st_size > size:
                    os.truncate(self.path, size)
                self._good = None
            _end_torn_line(self.path)
            self._fh = _open_log(self.path)
            self.error = self._astray = ""
        except OSError as exc:
            self._fh = None
            self.error = f"cannot write {self.path}: {exc.strerror or exc}"

    def size(self) -> int:
        """The log's size on disk now, in bytes (0 while it has no file open: not written yet, or
        its disk refusing it). Asked from the hub's loop as the writer writes: the file's own
        size, as the kernel keeps it."""
        fh = self._fh
        try:
            return os.fstat(fh.fileno()).st_size if fh is not None else 0
        except (OSError, ValueError):
            return 0

    def write(self, msg: schema.Message) -> None:
        """Keep ``msg`` for the next ``encode`` (or flush). The hub never changes a message
        once taken, so encoding it later writes the same line."""
        self.pending.append(msg)
        self.lines += 1

    def encode(self) -> None:
        """Encode the pending messages into lines now, in one pass. The hub calls this after
        each batch it takes, while those messages are fresh in the CPU's caches (encoding a
        whole frame's worth at the flush reads them back from memory); they are then freed."""
        pending = self.pending
        if not pending:
            return
        try:
            data = _encode_lines(pending)
        except Exception:
            # Not expected (every message came from the schema's own decoder), but one bad
            # message must cost its own line, never the log or the hub.
            data = b"".join(_encode_or_skip(m) for m in pending)
        pending.clear()
        self._encoded.append(data)

    def _take_encoded(self) -> list[bytes]:
        self.encode()
        chunks, self._encoded = self._encoded, []
        return chunks

    def flush_soon(self) -> None:
        """Hand what is buffered to the writer thread and return (a recorder made with
        ``background=True``); otherwise, or when the thread is too far behind, :meth:`flush`."""
        chunks = self._take_encoded()
        if self.closed:
            return
        size = sum(map(len, chunks))
        if not self.background or self._handed_bytes - self._done_bytes + size > MAX_UNWRITTEN_BYTES:
            self._write(chunks)
            return
        if not chunks:
            return
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_forever, name="pardash-log-writer", daemon=True)
            self._writer.start()
        self._handed_bytes += size
        self._handoff.append(chunks)
        self._wake.set()

    def reader(self, held: tuple[object, int] | None) -> tuple[object, int] | None:
        """A descriptor of its own that reads the file the log is written to now, for copies of
        the log (``pardash record``): ``held`` (the file it was made for, the descriptor) while
        that is still the file written, else a new one (``held``'s closed); -1 for a file that
        cannot be read back (a FIFO); None while no file is written. It reads the file, not
        its path: a log deleted or moved under the hub reads whole until the recorder writes it
        again, where a read of the path found nothing, or a file half written back."""
        fh = self._fh
        if held is not None:
            if held[0] is fh:
                return held
            if held[1] >= 0:
                os.close(held[1])
        with self._lock:  # (the writing side replaces or closes the file under it)
            fh = self._fh
            if fh is None:
                return None
            try:
                fd = fh.fileno()
                return (fh, os.dup(fd) if stat.S_ISREG(os.fstat(fd).st_mode) else -1)
            except (OSError, ValueError):
                return None

    def _write_forever(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()  # before taking: a hand-over from now on wakes the loop again
            self._write([])
            if self._stopping:
                return

    def flush(self) -> None:
        """Write what is buffered, and what the writer thread has not written yet, now; on
        failure keep it (bounded) and remember why."""
        self._write(self._take_encoded())

    def _write(self, chunks: list[bytes]) -> None:
        with self._lock:
            # Lines handed to the thread go first, taken only under the lock: the log keeps
            # the hub's order whichever side writes them.
            handed = self._handoff
            taken = 0
            while handed:
                earlier = handed.popleft()
                size = sum(map(len, earlier))
                self._unwritten.extend(earlier)
                self._unwritten_bytes += size
                taken += size
            self._unwritten.extend(chunks)
            self._unwritten_bytes += sum(map(len, chunks))
            self._write_unwritten()
            self._done_bytes += taken

    def _write_unwritten(self) -> None:
        if not self._unwritten:
            return
        if self._fh is None:
            self._open()
            if self._fh is None:
                self._trim()
                return
        now = time.monotonic()
        if now - self._checked >= CHECK_PATH_S:
            self._checked = now
            self._still_there()
        try:
            before = self._fh.tell()
        except (OSError, ValueError):
            before = None
        try:
            for chunk in self._unwritten:  # a chunk a pass of the hub: each write frees the interpreter
                self._fh.write(chunk)
            self._fh.flush()
            self._unwritten.clear()
            self._unwritten_bytes = 0
            self.error = self._astray
            if self.dropped > self._dropped_said:
                # Where the gap is: the report counts the lines as lost messages, with no cause.
                self.notices.append(f"log {self.path}: {self.dropped - self._dropped_said:,} lines were dropped while it "
                                    "could not be written (the hub kept its newest lines, which are written now)")  # fmt: skip
                self._dropped_said = self.dropped
        except OSError as exc:
            self.error = f"cannot write {self.path}: {exc.strerror or exc}"
            if before is not None and self._good is None:
                try:
                    self._good = (os.fstat(self._fh.fileno()).st_ino, before)
                except (OSError, ValueError):
                    pass
            try:
                self._fh.close()
            except OSError:
                pass
            self._fh = None
            self._trim()

    def _still_there(self) -> None:
        """If the log is no longer at its path (deleted, its folder removed, moved away), write
        what it holds again at the path (or, when another file took the path, beside it) from
        the open descriptor, and go on there; a notice says so. Writing side, under the lock."""
        fh = self._fh
        try:
            ours = os.fstat(fh.fileno())
        except (OSError, ValueError):
            return
        if not stat.S_ISREG(ours.st_mode):
            return  # a FIFO or a device: nothing to write again
        restored = f"{self.path.stem}.restored-{os.getpid()}{self.path.suffix}"
        spares = self._spares(restored)
        try:
            there = os.stat(self.path)
            if (there.st_dev, there.st_ino) == (ours.st_dev, ours.st_ino):
                return
            targets, why = [self.path.with_name(restored), *spares], "another file took its path"
        except FileNotFoundError:
            targets, why = [self.path, *spares], "its path cannot be written"
        except OSError as exc:  # its folder is no folder any more, or cannot be entered
            targets, why = spares, f"its path cannot be reached ({exc.strerror or exc})"
        fh.flush()
        new, target, at, failed = self._copy_first(targets, fh.fileno(), ours.st_size)
        if new is None:
            self._astray = self.error = f"cannot write {self.path} again (it was deleted or moved; {'; '.join(failed)})"
            return
        self._astray = ""
        fh.close()
        self._fh = new
        gone = "moved away" if ours.st_nlink else "deleted"
        if target == self.path:
            self.notices.append(f"log {self.path} was {gone} while the hub wrote it: written again at its path ({at:,} bytes kept)")
        else:
            self.notices.append(f"log {self.path} was {gone} and {why}: the hub writes it on at {target} ({at:,} bytes kept)")
            self.path = target

    def _spares(self, name: str) -> list[Path]:
        """Where a log that cannot go on at its path goes, as ``name``: the spare folder, then
        the temp folder (a launch's log is in its run folder, which is the spare one, and may be
        what became unwritable)."""
        return [self.spare_dir / name, Path(tempfile.gettempdir()) / name]

    def _copy_first(self, targets: list[Path], fd_in: int, size: int, tail: list[bytes] | None = None):
        """A copy (see :meth:`_copy_to`) at the first of ``targets`` that takes it whole: (file,
        target, bytes copied, why the ones before failed); file and target None when none did."""
        failed: list[str] = []
        for target in dict.fromkeys(targets):  # (each once: the spare folder may be the log's)
            try:
                new, at = self._copy_to(target, fd_in, size, tail)
                return new, target, at, failed
            except OSError as exc:
                failed.append(f"{target}: {exc.strerror or exc}")
        return None, None, 0, failed

    @staticmethod
    def _copy_to(target: Path, fd_in: int, size: int, tail: list[bytes] | None = None):
        """A new log at ``target`` holding the first ``size`` bytes of ``fd_in`` (none for -1),
        then the lines ``tail``; (file, bytes copied from ``fd_in``). One that fails leaves no
        part of a copy behind."""
        target.parent.mkdir(parents=True, exist_ok=True)
        made = not target.exists()
        new = _open_log(target)
        try:
            new.flush()
            fd_out, at = new.fileno(), 0
            while fd_in >= 0 and at < size:
                chunk = os.pread(fd_in, min(1 << 20, size - at), at)
                if not chunk:
                    break
                _write_all(fd_out, chunk)
                at += len(chunk)
            for chunk in tail or ():
                _write_all(fd_out, chunk)
        except OSError:
            new.close()
            if made:
                with contextlib.suppress(OSError):
                    target.unlink()
            raise
        return new, at

    def _keep_elsewhere(self) -> None:
        """At close, the lines the log's disk never took (still full, or its path unwritable):
        the whole log (what it holds and those lines) written to a complete copy in the spare
        or the temp folder, where the recorder then ends; the log, where its disk has room for
        a line, says where it went on. When no place takes them (or the log cannot be read back
        to copy it whole: a FIFO, a path that cannot be reached), the error and
        :attr:`last_word` say how many lines, of which steps, are lost. Under the lock."""
        held = sum(chunk.count(b"\n") for chunk in self._unwritten)
        steps = _steps_text(self._unwritten)
        old = self.path
        why = _DROPPED_SO_FAR.sub("", self.error) or f"cannot write {old}"
        reason = why.removeprefix(f"cannot write {old}: ")
        dropped = f"; {self.dropped:,} older lines were dropped before (past {MAX_UNWRITTEN_BYTES >> 20} MiB held)" if self.dropped else ""
        fd, size = self._written_part()
        if fd < 0:
            self.error = f"{why}; {held:,} lines{steps} lost: it cannot be read back to be copied whole elsewhere"
            self.last_word = f"log {old}: {held:,} lines{steps} lost: it could not take them ({reason}), nor be read back to be copied whole elsewhere{dropped}"
            return
        try:
            tail = self._unwritten
            if size and os.pread(fd, 1, size - 1) != b"\n":
                tail = [b"\n", *tail]  # (a fragment its hub left, dying mid-line: a line of its own)
            name = f"{old.stem}.complete-{os.getpid()}{old.suffix}"
            taken = [t for t in self._spares(name) if os.path.lexists(t)]  # (another hub's of this pid: never appended to)
            new, target, at, failed = self._copy_first([t for t in self._spares(name) if t not in taken], fd, size, tail)
            failed += [f"{t}: there already" for t in taken]
        finally:
            os.close(fd)
        if new is None:
            self.error = f"{why}; {held:,} lines{steps} lost: no place could take them ({'; '.join(failed)})"
            self.last_word = f"log {old}: {held:,} lines{steps} lost: its disk could not take them ({reason}), nor could a spare place ({'; '.join(failed)}){dropped}"
            self._note_in_log(f"the hub stopped with {held:,} lines{steps} that this disk could not take and no other place could: lost")
            return
        self._note_in_log(f"{CONTINUED_AT}{target} (the hub stopped with {held:,} lines{steps} that this disk could not take; "
                          "that file holds all of this one and them)")  # fmt: skip
        self._unwritten.clear()
        self._unwritten_bytes = 0
        self._fh, self.path, self._good = new, target, None
        self.error = self._astray = ""
        self._dropped_said = self.dropped
        self.last_word = f"log {old} could not take its last {held:,} lines{steps} ({reason}): {CONTINUED_AT}{target} (its {at:,} bytes and those lines){dropped}"
        self.notices.append(self.last_word)  # (the copy's last line)

    def _written_part(self) -> tuple[int, int]:
        """A descriptor reading the log at its path and how much of it is whole lines: up to
        where a failed write began (it may have left part of its lines); (-1, 0) for none."""
        try:
            # (O_NONBLOCK: opening a FIFO to read waits for a writer, which this process is)
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return -1, 0
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            return -1, 0
        if not stat.S_ISREG(st.st_mode):  # a FIFO: nothing to read back
            os.close(fd)
            return -1, 0
        if self._good is not None and self._good[0] == st.st_ino:
            return fd, min(self._good[1], st.st_size)
        return fd, st.st_size

    def _note_in_log(self, text: str) -> None:
        """The log's last line, where its disk has room for it: cut back to its last whole line
        (a failed write may have left part of its lines), then ``text`` as a warning. Where it
        has no room the log ends on its last whole line."""
        try:
            st = os.stat(self.path)
        except OSError:
            return
        if not stat.S_ISREG(st.st_mode):
            return
        size = min(self._good[1], st.st_size) if self._good is not None and self._good[0] == st.st_ino else st.st_size
        line = _encode_lines([schema.Event(rank=-1, seq=-1, name="warning", message=text, t=time.time())])
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return
        try:
            os.ftruncate(fd, size)
            _write_all(fd, line, at=size)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)  # no torn note
        finally:
            os.close(fd)

    def _trim(self) -> None:
        # Keep the newest lines in memory while the disk is unwritable, bounded; count the rest.
        while self._unwritten_bytes > MAX_UNWRITTEN_BYTES and len(self._unwritten) > 1:
            chunk = self._unwritten.pop(0)
            self._unwritten_bytes -= len(chunk)
            self.dropped += chunk.count(b"\n")
        if self.dropped:
            self.error += f" ({self.dropped:,} lines dropped so far: the newest {MAX_UNWRITTEN_BYTES >> 20} MiB are kept)"

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._writer is not None:
            self._stopping = True
            self._wake.set()
            self._writer.join()
            self._writer = None
        self.flush()
        if self._unwritten:  # the disk never took them: kept elsewhere, with the whole log
            with self._lock:
                self._keep_elsewhere()
        if self._fh is not None:
            # The last lines went to the file as it is now: a log deleted since the last check
            # (at most CHECK_PATH_S ago) is written again here, and its notice, which no frame
            # will carry any more, goes in as the log's last line.
            with self._lock:
                self._still_there()
                if self.notices:
                    notes = [schema.Event(rank=-1, seq=-1, name="warning", message=n, t=time.time()) for n in self.notices]
                    self.notices.clear()
                    data = _encode_lines(notes)
                    self._unwritten.append(data)
                    self._unwritten_bytes += len(data)
                    self._write_unwritten()
        if self._fh is not None:  # (a failed last write closed it already)
            try:
                self._fh.close()
            except OSError:
                pass
            self._fh = None
