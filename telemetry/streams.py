"""Output streams that never end a process: the terminal a job was started from may close (an
ssh connection drops: EIO) and the reader of a pipe may exit (``| head``: EPIPE), while the
job must go on."""

from __future__ import annotations

import errno
import os
from typing import Any, Callable, TextIO


FULL = (errno.ENOSPC, errno.EDQUOT)
"""A disk full (or over quota) may have room again later: what is written then still goes."""


def reader_gone(stream: TextIO | None) -> bool:
    """Whether ``stream`` is a pipe (or socket) whose reader has gone: a write to it fails with
    EPIPE. Asked of the descriptor (the kernel flags such a pipe as an error), so a
    BrokenPipeError can be told apart from one raised by something else (a socket of its own)."""
    import select

    try:
        fd = stream.fileno() if stream is not None else -1
    except (AttributeError, OSError, ValueError):
        return False
    if fd < 0:
        return False
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR is always reported
    return any(ev & select.POLLERR for _, ev in poller.poll(0))


def to_devnull(stream: TextIO | None) -> None:
    """Point ``stream``'s file descriptor at /dev/null: what is still buffered in it, and every
    later write (the interpreter's last flush among them), goes nowhere without an error."""
    try:
        fd = stream.fileno() if stream is not None else -1
        if fd < 0:
            return
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (AttributeError, OSError, ValueError):
        pass


class Unbreakable:
    """Wraps a text stream: a write or flush that fails is ignored; unless the disk is full, the
    stream's file descriptor is then sent to /dev/null (so nothing else, the interpreter's last
    flush included, fails on it again)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.broken = False
        self.on_break: Callable[[], None] | None = None
        """Called once when the stream breaks (its reader gone, its terminal closed): a process
        that goes on without its output can say so elsewhere."""
        self.on_full: Callable[[OSError], None] | None = None
        """Called once when a write finds the disk full: its lines are lost until there is
        room, which nothing else would tell (the file just stops mid-line)."""

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._failed(exc)
            except ValueError:
                self._break()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except OSError as exc:
                self._failed(exc)
            except ValueError:
                self._break()

    def _failed(self, exc: OSError) -> None:
        if exc.errno not in FULL:
            self._break()
        elif self.on_full is not None:
            said, self.on_full = self.on_full, None
            said(exc)

    def _break(self) -> None:
        self.broken = True
        to_devnull(self._stream)
        if self.on_break is not None:
            said, self.on_break = self.on_break, None
            said()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def unbreakable_stdio() -> None:
    """Make this process's stdout and stderr :class:`Unbreakable` (once)."""
    import sys

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, Unbreakable):
            setattr(sys, name, Unbreakable(stream))


def off_the_terminal(path: str) -> bool:
    """From now on, this process's stdout and stderr (its file descriptors: what a child started
    later inherits too) go to the file ``path``, appended: a launch's TUI owns the terminal, and
    what a job's supervisor or hub says while it does (a hub restarted, node 0's answer, the
    log's fate as the hub stops) goes beside the ranks' lines, the TUI saying it as an event.
    Written to the terminal, "pardash: the hub exited (code -9); restarting it" covered the TUI's
    header until its next redraw, and after a detach such a line landed in the user's shell.
    False (the terminal, as before) where the file cannot be opened."""
    import sys

    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    except OSError:
        return False
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return True
