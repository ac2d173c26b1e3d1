"""Output streams that never end a process: the terminal a job was started from may close (an
ssh connection drops: EIO) and the reader of a pipe may exit (``| head``: EPIPE), while the
job must go on."""

from __future__ import annotations

import errno
import os
from typing import Any, TextIO


FULL = (errno.ENOSPC, errno.EDQUOT)
"""A disk full (or over quota) may have room again later: what is written then still goes."""


class Unbreakable:
    """Wraps a text stream: a write or flush that fails is ignored; unless the disk is full, the
    stream's file descriptor is then sent to /dev/null (so nothing else, the interpreter's last
    flush included, fails on it again)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except OSError as exc:
                if exc.errno not in FULL:
                    self._break()
            except ValueError:
                self._break()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except OSError as exc:
                if exc.errno not in FULL:
                    self._break()
            except ValueError:
                self._break()

    def _break(self) -> None:
        self.broken = True
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def unbreakable_stdio() -> None:
    """Make this process's stdout and stderr :class:`Unbreakable` (once)."""
    import sys

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, Unbreakable):
            setattr(sys, name, Unbreakable(stream))
