"""The JSONL recorder: every message and verdict the hub accepts, one JSON object a line.

Writes are buffered and flushed at every frame (10 Hz), so the log is at most 100 ms behind and
a crash of the hub loses at most that. A write error (disk full, path gone) never stops the hub:
the error is kept for viewers to show, and writing is retried at the next flush.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import schema


_encode = schema.encode_json
_encode_lines = schema.encode_json_lines


def _encode_or_skip(msg: schema.Message) -> bytes:
    try:
        return _encode(msg) + b"\n"
    except Exception:
        return b""


class Recorder:
    """Appends messages to a JSON Lines file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lines = 0
        """Lines written (or buffered) so far."""
        self.error = ""
        """Last write error, '' when writing works."""
        self.pending: list[schema.Message] = []
        """Messages for the next flush. The hub's loop appends to it directly (and adds to
        ``lines``): ``write`` is the same, a call per message slower."""
        self._fh = None
        self._open()

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "ab", buffering=1 << 16)
            self.error = ""
        except OSError as exc:
            self._fh = None
            self.error = f"cannot write {self.path}: {exc.strerror or exc}"

    def write(self, msg: schema.Message) -> None:
        """Keep ``msg`` for the next flush, which encodes what is kept in one pass. The hub
        never changes a message once taken, so encoding it later writes the same line."""
        self.pending.append(msg)
        self.lines += 1

    def flush(self) -> None:
        """Write what is buffered; on failure keep it (bounded) and remember why."""
        if not self.pending:
            return
        if self._fh is None:
            self._open()
            if self._fh is None:
                self._trim()
                return
        try:
            data = _encode_lines(self.pending)
        except Exception:
            # Not expected (every message came from the schema's own decoder), but one bad
            # message must cost its own line, never the log or the hub.
            data = b"".join(_encode_or_skip(m) for m in self.pending)
        try:
            self._fh.write(data)
            self._fh.flush()
            self.pending.clear()
            self.error = ""
        except OSError as exc:
            self.error = f"cannot write {self.path}: {exc.strerror or exc}"
            try:
                self._fh.close()
            except OSError:
                pass
            self._fh = None
            self._trim()

    def _trim(self, keep: int = 1_000_000) -> None:
        # Keep the newest lines in memory while the disk is unwritable, bounded.
        if len(self.pending) > keep:
            del self.pending[: len(self.pending) - keep]

    def close(self) -> None:
        self.flush()
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass
            self._fh = None
