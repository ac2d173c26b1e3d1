"""Read a JSONL telemetry log: every well-formed record, and a count of what was not.

A log being written (or cut short by a crash) may end in a partial line; malformed lines are
skipped and counted, never raised, so report, replay and export always get an answer.
"""

from __future__ import annotations

import gzip
import os
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from math import inf
from typing import BinaryIO, Callable, Iterator

import msgspec

from . import schema

MAX_LINE_BYTES = 8 << 20
"""Longer lines are skipped unread (the hub writes none above ~2 MiB); a log without newlines
never has to fit in memory."""


@dataclass
class LogReadStats:
    """What reading a log skipped."""

    lines: int = 0
    records: int = 0
    skipped: Counter = field(default_factory=Counter)
    """Skipped lines by reason: truncated (last line without newline, or a gzip stream cut
    short), malformed, invalid, too_deep (nesting past Python's recursion limit), too_long (over
    MAX_LINE_BYTES), trailing_garbage (bytes after a gzip log's last member), corrupt (a gzip
    log's damaged bytes: what follows them is lost), newer_version (written by a newer pardash:
    its fields may mean other things), out_of_range (a time or a rank no record can have)."""
    gzip_damage: str = ""
    """How a gzip log's compressed stream broke off, if it did: "cut short" or "damaged" (its
    count is in ``skipped``, as truncated or corrupt); ``lines`` were read whole before it."""
    world: int = 0
    """The largest world size a hello has said so far: a record of a rank at or above it is
    no rank of the job (the live hub refuses it the same way: a line edited or made up)."""

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())


GZIP_MAGIC = b"\x1f\x8b"


def _open(path: str | os.PathLike[str]) -> BinaryIO:
    """The log's bytes: a log compressed with gzip for keeping (``run.jsonl.gz``) reads as the
    log itself."""
    fh = open(path, "rb")
    if fh.read(2) == GZIP_MAGIC:
        fh.close()
        return gzip.open(path, "rb")
    fh.seek(0)
    return fh


def no_records(path: str | os.PathLike[str], stats: LogReadStats) -> str:
    """Why a log gave nothing to read, in one line."""
    if not stats.lines and not stats.skipped:
        return f"{path}: empty, no telemetry records"
    why = ", ".join(f"{n} {reason}" for reason, n in sorted(stats.skipped.items()))
    lines = max(stats.lines, sum(stats.skipped.values()))  # (a gzip stream cut inside its first line has read none)
    if stats.skipped["newer_version"] * 2 >= lines:
        newer = stats.skipped["newer_version"]
        return (f"{path}: written by a newer pardash ({newer} of {lines} line(s) in a schema past version "
                f"{schema.SCHEMA_VERSION}); read it with that version")  # fmt: skip
    if stats.gzip_damage:
        # A damaged .gz read "no telemetry records in 1 line(s) (1 truncated)": the line counted
        # was the compressed stream's break, not a line of the log.
        if not stats.lines:
            return f"{path}: not a valid gzip file: its compressed data is {stats.gzip_damage} before the end of its first line"
        broke = Counter(stats.skipped)
        broke["truncated" if stats.gzip_damage == "cut short" else "corrupt"] -= 1
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(broke.items()) if n > 0)
        return (f"{path}: the compressed log is {stats.gzip_damage} after line {stats.lines}, and its {stats.lines} line(s) "
                f"before that hold no telemetry record ({why or 'all blank'}); is it a pardash log?")  # fmt: skip
    if str(path).endswith(".gz") and not _starts_gzip(path):
        # (read as plain text, as a log renamed .gz is: random bytes read "2 line(s) (1 malformed, 1 truncated)")
        return f"{path}: not a valid gzip file (no gzip header), and read as plain text no telemetry records in {lines} line(s) ({why or 'all blank'})"
    return f"{path}: no telemetry records in {lines} line(s) ({why or 'all blank'}); is it a pardash log?"


def _starts_gzip(path: str | os.PathLike[str]) -> bool:
    """Whether the file begins as gzip's do (True when it cannot be read: nothing to say of it)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == GZIP_MAGIC
    except OSError:
        return True


def no_rank_reported(live_run: str | None = None) -> str:
    """What report, export and replay say of a log that holds no rank's record, only its hub's
    (a hub started and stopped with no rank ever connecting), in the same words; ``live_run``:
    the run id of the live run whose hub still records it and waits for its ranks. (The report
    read "log ends early at step 0, with 0 rank(s) not ended", export "its ranks published no
    step", the replay "waiting for ranks…" at its end.)"""
    if live_run:
        return f"no rank has reported yet: its hub is still waiting for them (`pardash attach {live_run}` watches it)"
    return "no rank ever reported to its hub: the log holds only the hub's own records (did the ranks start?)"


Progress = Callable[[int, int], None]
"""Told (bytes of the log's file read, its size) as a log is read: a gzip log's compressed bytes."""
PROGRESS_EVERY = 1 << 13
"""Records between two calls of a :data:`Progress`."""


def read_log(path: str | os.PathLike[str], stats: LogReadStats | None = None, progress: Progress | None = None) -> Iterator[schema.Message]:
    """Yield the log's records in order; fill ``stats`` with what was skipped; tell
    ``progress`` how far it is every PROGRESS_EVERY records, and at the end. A gzip-compressed
    log is read as it is. OSError when it cannot be read (an OSError subclass too for a
    corrupt gzip stream)."""
    stats = stats if stats is not None else LogReadStats()
    with _open(path) as fh:
        if progress is None:
            yield from _records(fh, stats)
            return
        raw = getattr(fh, "fileobj", fh)  # a gzip stream's file: where it is in the compressed bytes
        size = os.fstat(raw.fileno()).st_size
        for n, msg in enumerate(_records(fh, stats), 1):
            if n % PROGRESS_EVERY == 0:
                progress(min(raw.tell(), size), size)
            yield msg
        progress(size, size)


def log_run_id(path: str | os.PathLike[str], records: int = 1000) -> str:
    """The run id of the first of the log's first ``records`` records that names one ("" when
    none does, or the log cannot be read): the run a hub resuming the log carries on."""
    try:
        for n, msg in enumerate(read_log(path)):
            if msg.run or n >= records:
                return msg.run
    except OSError:
        pass
    return ""


def is_log(path: str | os.PathLike[str], lines: int = 100) -> bool:
    """Whether one of the first ``lines`` lines of ``path`` (plain text) is a pardash record:
    a hub appends only to its own kind of file. True when it cannot tell (the file cannot be
    read: what then fails says why)."""
    try:
        with open(path, "rb") as fh:
            for _ in range(lines):
                line = fh.readline(1 << 20)
                if not line:
                    return False
                try:
                    schema.decode_json(line)
                    return True
                except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                    continue
    except OSError:
        return True
    return False


def _records(fh: BinaryIO, stats: LogReadStats, tail: LogTail | None = None, upto: int | None = None) -> Iterator[schema.Message]:
    """The records of ``fh`` from where it is. With ``tail``: a last line without its newline
    is one being written, left for the tail's next read (``tail.offset`` follows the lines read).
    With ``upto``: no byte of ``fh`` at or past that offset is read (a line it cuts reads as
    cut there)."""
    decode = schema.decode_json
    readline = fh.readline
    at = fh.tell() if upto is not None else 0
    size = MAX_LINE_BYTES
    while True:
        if upto is not None:
            size = min(MAX_LINE_BYTES, upto - at)
            if size <= 0:
                break
        try:
            raw = readline(size)
        except EOFError:  # a gzip stream cut short: its end is lost
            stats.skipped["truncated"] += 1
            stats.gzip_damage = "cut short"
            break
        except zlib.error:  # damaged compressed bytes: the rest is lost
            stats.skipped["corrupt"] += 1
            stats.gzip_damage = "damaged"
            break
        except gzip.BadGzipFile as exc:
            if not stats.lines:
                # Not a gzip stream at all: the caller says it cannot be read (it said only
                # gzip's "Unknown compression method").
                why = str(exc)
                raise gzip.BadGzipFile(f"not a valid gzip file ({why[:1].lower() + why[1:]})") from None
            # Bytes after the last gzip member (the records are whole), or a member whose CRC or
            # length check failed: its bytes were damaged, and what was read of them with it
            # (gzip says which only in its message).
            trailing = str(exc).startswith("Not a gzipped file")
            stats.skipped["trailing_garbage" if trailing else "corrupt"] += 1
            stats.gzip_damage = "" if trailing else "damaged"
            break
        if not raw:
            break
        at += len(raw)
        complete = raw.endswith(b"\n")
        if tail is not None:
            if not complete and len(raw) < MAX_LINE_BYTES:
                break  # not written to its end yet
            tail.offset += len(raw)
        stats.lines += 1
        if not complete and len(raw) >= MAX_LINE_BYTES:
            while raw and not raw.endswith(b"\n"):  # skip the rest, a chunk at a time
                size = MAX_LINE_BYTES if upto is None else min(MAX_LINE_BYTES, upto - at)
                raw = readline(size) if size > 0 else b""
                at += len(raw)
                if tail is not None:
                    tail.offset += len(raw)
            stats.skipped["too_long"] += 1
            continue
        line = raw.strip()
        if not line:
            continue
        try:
            msg = decode(line)
        except msgspec.ValidationError:
            stats.skipped["invalid"] += 1
            continue
        except msgspec.DecodeError:
            stats.skipped["truncated" if not complete else "malformed"] += 1
            continue
        except RecursionError:
            stats.skipped["too_deep"] += 1
            continue
        if msg.v > schema.SCHEMA_VERSION:
            stats.skipped["newer_version"] += 1
            continue
        if msg.rank < 0 and not isinstance(msg, (schema.Event, schema.Verdict)):
            stats.skipped["invalid"] += 1  # only the hub's notes (events) are no rank's
            continue
        if not 0.0 <= msg.t < inf:  # as the live hub refuses it (a line edited by hand)
            stats.skipped["out_of_range"] += 1
            continue
        if isinstance(msg, schema.Hello):
            if msg.rank >= msg.world_size:
                stats.skipped["out_of_range"] += 1
                continue
            stats.world = max(stats.world, msg.world_size)
        elif stats.world and msg.rank >= stats.world and msg.seq >= 0:
            # (a rank's own record; the launcher's notes, seq -1, were the word of one that
            # knew the job's size, which may have grown since the hellos read so far)
            stats.skipped["out_of_range"] += 1
            continue
        stats.records += 1
        yield msg


class LogTail:
    """A plain (not compressed) log read as it grows: each :meth:`read` gives the records of
    the lines completed since the last one; a line still being written waits for its newline
    (:meth:`finish` takes it as it is, once the log is known to be done). Both yield the records
    one at a time: the first read of a log of gigabytes is not a list of millions of them."""

    def __init__(self, path: str | os.PathLike[str], stats: LogReadStats) -> None:
        self.path = path
        self.stats = stats
        self.offset = 0
        """Bytes of the log read so far (whole lines)."""

    def read(self) -> Iterator[schema.Message]:
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            yield from _records(fh, self.stats, self)

    def finish(self) -> Iterator[schema.Message]:
        """The rest, a torn last line included (counted as truncated, as ``read_log`` counts it)."""
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            yield from _records(fh, self.stats)
            self.offset = fh.tell()


class LogCursor:
    """A log's records read forward from its start one at a time, as a replay plays them: it
    holds the record next in line and nothing before or after it, so a replay of a log of
    gigabytes takes the memory of one of kilobytes. The file stays open: :meth:`rewind` (a
    replay seeking back) reads it again from its start even after the log was deleted, or
    replaced by its gzip-compressed copy.

    It reads no further than ``upto`` bytes (the whole lines a :class:`LogTail` has read of a
    log still being written; None: to the end), and skips the lines ``read_log`` skips, counted
    in its own ``stats`` (the reader that went through the log first counted them for the user).
    """

    CATCH_UP_BYTES = 4 << 20
    """Bytes of a gzip log (uncompressed) :meth:`catch_up` reads between two looks at the
    time (a few milliseconds)."""

    def __init__(self, path: str | os.PathLike[str], upto: int | None = None) -> None:
        self._fh = _open(path)
        self._upto = upto
        self._offset = 0
        self.stats = LogReadStats()
        self._next: schema.Message | None = None
        self._lines: Iterator[schema.Message] | None = None
        self._ended = False
        """Nothing more will come: a gzip log's (or an unreadable log's) end, or closed."""
        self._goal: int | None = None
        """Where a gzip log's file is on its way to, a :meth:`catch_up` at a time (see
        :meth:`go_back`); None: it is at :attr:`offset`."""

    @property
    def upto(self) -> int | None:
        """Bytes of the log (uncompressed) it may read; a replay following a log raises it as
        the log grows."""
        return self._upto

    @upto.setter
    def upto(self, upto: int | None) -> None:
        self._upto = upto
        self._lines = None  # (read on from where the file is, to the new limit)

    @property
    def offset(self) -> int:
        """Bytes of the log (uncompressed) read so far: where its file is (the records are read
        straight from it, a line a record, none ahead of the one next in line)."""
        if self._goal is None and not self._fh.closed:
            try:
                self._offset = self._fh.tell()
            except (OSError, EOFError, zlib.error):  # (the disk under it failed: as far as it got)
                pass
        return self._offset

    @offset.setter
    def offset(self, offset: int) -> None:
        self._offset = offset

    def peek(self) -> schema.Message | None:
        """The next record, left in place (None: none now; more may come when ``upto`` rises)."""
        if self._next is None and not self._ended:
            self.catch_up()
            if self._lines is None:
                if self.upto is not None and self.offset >= self.upto:
                    return None
                self._lines = _records(self._fh, self.stats, upto=self._upto)
            try:
                self._next = next(self._lines, None)
            except OSError:  # (the disk under it failed): the replay ends where it got to
                self._next, self._ended = None, True
            if self._next is None:
                self._lines = None  # read again from here once ``upto`` rises
                self._ended = self._ended or self.upto is None
        return self._next

    def take(self) -> schema.Message | None:
        """The next record, moving past it."""
        msg = self.peek()
        self._next = None
        return msg

    def mark(self) -> tuple:
        """Where the cursor is, for :meth:`go_back` (a replay's keyframe holds it): the record
        next in line is in it, as it is (a replay sets the time of some records it takes)."""
        return (self.offset, self.stats, self._next, self._ended)

    def go_back(self, mark: tuple) -> None:
        """Back (or on) to where :meth:`mark` said the cursor was. A gzip log is read again from
        its start up to there (gzip seeks so: 0.4 s into a 266 MiB log, 15 s into 10 GiB), not
        now: :meth:`catch_up` reads it, as long as its caller allows at a time (a replay's seek
        a poll at a time, the screen and its keys live meanwhile), or the next :meth:`peek`
        that needs a line."""
        if self._fh.closed:
            return
        self._offset, self.stats, self._next, self._ended = mark
        self._lines = None
        if isinstance(self._fh, gzip.GzipFile):
            self._goal = self._offset
            if self._offset < self._fh.tell():
                self._fh.seek(0)  # (back to the start: a gzip file reads on from there)
        else:
            self._fh.seek(self._offset)

    def catch_up(self, budget_s: float | None = None) -> bool:
        """Read a gzip log on to where :meth:`go_back` sent the cursor, for at most ``budget_s``
        of wall time (None: all the way); True when there."""
        goal = self._goal
        if goal is None:
            return True
        fh = self._fh
        t0 = time.perf_counter()
        try:
            while (at := fh.tell()) < goal:
                fh.seek(min(goal, at + self.CATCH_UP_BYTES))
                if budget_s is not None and time.perf_counter() - t0 > budget_s:
                    return False
        except (OSError, EOFError, zlib.error):  # (read to there before: the disk under it failed)
            self._next, self._ended = None, True
        self._goal = None
        return True

    def rewind(self) -> None:
        """Back to the log's first record."""
        if self._fh.closed:
            return
        self._fh.seek(0)
        self._goal = None
        self.offset = 0
        self.stats = LogReadStats()
        self._next = self._lines = None
        self._ended = False

    def close(self) -> None:
        self._offset = self.offset
        self._fh.close()
        self._next = self._lines = None
        self._goal = None
        self._ended = True


def load_log(path: str | os.PathLike[str]) -> tuple[list[schema.Message], LogReadStats]:
    stats = LogReadStats()
    return list(read_log(path, stats)), stats
