"""The job's output as a terminal leaves it, where a display is drawn in place over several lines.

A progress bar redrawn with carriage returns (tqdm's) is one line, its last drawing. rich's live
display (PyTorch Lightning's progress bar, with its validation bar under it; a bar wrapped onto
two lines) is drawn again by moving the cursor up over the lines it drew, and a line the script
prints meanwhile goes above it: line by line, as the headless launch and the TUI's output view
show the output, each redraw was a line of its own, ten a second. :class:`Redraws` holds back
the lines such a display may still draw over, and lets them go once they are the script's own or
the display has been still for :data:`HOLD_S`. Output with no cursor moves goes through as it
comes (nothing held).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

HOLD_S = 2.0
"""Seconds after a display last moved the cursor up that lines are still held for it."""

_MOVES = re.compile(rb"(?:\x1b\[[0-2]?K|\x1b\[\d*A)+")
"""What a redraw begins with, after its line's last carriage return (rich's: erase the line,
then up one and erase, once for each line above)."""
_UP = re.compile(rb"\x1b\[(\d*)A")
_ERASED = re.compile(rb"\x1b\[[0-2]?K")


def lines_up(line: bytes) -> int:
    """How many lines up the drawings of ``line`` begin by moving, in all (0: none): each drawing
    after a carriage return may move up first (a display of two lines redrawn as one, its second
    bar gone, then drawn again in place: "train 50%" of its last two-line drawing stayed)."""
    up = 0
    for drawing in line.rstrip(b"\r").split(b"\r"):
        moves = _MOVES.match(drawing)
        if moves is not None:
            up += sum(int(n or 1) for n in _UP.findall(moves.group()))
    return up


def last_drawing(line: bytes) -> bytes:
    """What a line redrawn with carriage returns shows last (the part after its last CR)."""
    return line.rstrip(b"\r").rpartition(b"\r")[2]


class Redraws:
    """Ended lines of the job's output, less those a display drew over (see the module)."""

    __slots__ = ("held", "depth", "live_until", "clock")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.held: list[bytes] = []
        """Ended lines a live display may still draw over, oldest first."""
        self.depth = 0
        """The most lines a redraw has moved up over: the lines held."""
        self.live_until = float("-inf")
        self.clock = clock

    def take(self, lines: list[bytes]) -> list[bytes]:
        """The lines of ``lines`` (ended lines, in order) to show now."""
        out: list[bytes] = []
        now = self.clock()
        held = self.held
        for line in lines:
            n = lines_up(line)
            if n:
                self.depth = max(self.depth, n)
                self.live_until = now + HOLD_S
                del held[max(0, len(held) - n) :]  # (drawn over: gone from the screen)
                held.append(line)
            elif _ERASED.match(last_drawing(line)):
                # A drawing that begins by erasing its line, with no move up: a display's first
                # drawing (its next one moves up over it; rich's first "train 0%" went out as a
                # line of its own, review 332), or a line printed during a one-line display's.
                self.depth = max(self.depth, 1)
                self.live_until = now + HOLD_S
                held.append(line)
            elif now < self.live_until:
                held.append(line)
            else:
                out.extend(held)
                held.clear()
                out.append(line)
                continue
            while len(held) > self.depth:  # (above the display: no redraw reaches it)
                out.append(held.pop(0))
        return out

    def flush(self, *, final: bool = False) -> list[bytes]:
        """The held lines, once the display has been still for HOLD_S (``final``: now)."""
        if not self.held or (not final and self.clock() < self.live_until):
            return []
        out, self.held = self.held, []
        return out
