"""The JSONL recorder: every message and verdict the hub accepts, one JSON object a line.

Writes are buffered and flushed at every frame (10 Hz), so the log is at most 100 ms behind and
a crash of the hub loses at most that. A write error (disk full, path gone) never stops the hub:
the error is kept for viewers to show, and writing is retried at the next flush.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import schema


class Recorder:
    """Appends messages to a JSON Lines file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lines = 0
        """Lines written (or buffered) so far."""
        self.error = ""
        """Last write error, '' when writing works."""
        self._buf: list[bytes] = []
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
        self._buf.append(schema.encode_json(msg))
        self.lines += 1

    def flush(self) -> None:
        """Write what is buffered; on failure keep it (bounded) and remember why."""
        if not self._buf:
            return
        if self._fh is None:
            self._open()
            if self._fh is None:
                self._trim()
                return
        try:
            self._fh.write(b"\n".join(self._buf) + b"\n")
            self._fh.flush()
            self._buf.clear()
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
        if len(self._buf) > keep:
            del self._buf[: len(self._buf) - keep]

    def close(self) -> None:
        self.flush()
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass
            self._fh = None
