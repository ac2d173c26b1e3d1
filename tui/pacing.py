"""How often a viewer draws a live run: as often as its frames come while that is cheap, less
often where the viewer's process would take more than its share of a core.

A viewer on the job's own machine takes its CPU from the ranks: two CPU-bound DDP ranks on 2
cores run in lock-step, and the TUI drawing every 10 Hz frame (7-12% of a core, the launch
process's) cost the job about 20% of its steps (review 303). nvitop draws every 2 s, htop
every 1.5 s; figures that change ten times a second are not read at that rate anyway.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

DRAW_BUDGET = 0.04
"""The share of one core the viewer's process may take drawing a live run (its frames' decoding
included); past it, frames are drawn less often."""
DRAW_MAX_S = 1.0
"""Frames are drawn at least this often, however busy: a rank's stall or exit shows within it."""
PACE_WINDOW_S = 1.0
"""How long the viewer's CPU is measured over before the pace is set again."""
HOST_BUSY_PCT = 90.0
"""The viewer backs off only on a host this busy (all its cores): where there are cores to spare
(a viewer on a laptop, a node whose GPUs do the work) its CPU is taken from nobody, and it draws
every frame (review 305: paced on its own CPU alone, it stayed at one frame a second)."""


def _host_busy() -> float:
    import psutil

    return psutil.cpu_percent(None)


class DrawPacer:
    """Whether a live run's new frame is drawn now (:meth:`due`), from the viewer's own CPU
    time and its host's: every frame while under DRAW_BUDGET of a core or on a host with cores
    to spare; past it on a busy host, each second, twice as far apart (up to DRAW_MAX_S); well
    under it, or once the host has cores to spare, twice as close again."""

    def __init__(self, min_s: float, *, cpu: Callable[[], float] = time.process_time, clock: Callable[[], float] = time.monotonic,
                 host_busy: Callable[[], float] = _host_busy) -> None:  # fmt: skip
        self.min_s = min_s
        """The least time apart that counts as drawing every frame (the app's poll)."""
        self.every = 0.0
        """Seconds between draws now (0: every frame)."""
        self._cpu, self._clock, self._host_busy = cpu, clock, host_busy
        self._cpu0, self._t0 = cpu(), clock()
        host_busy()  # (psutil's figure is since the last call)
        self._drawn = -math.inf

    def due(self, now: float) -> bool:
        """Whether a frame that came now is drawn now (else it waits for :meth:`due` to say so)."""
        return now - self._drawn >= self.every

    def drawn(self, now: float) -> None:
        self._drawn = now

    def tick(self, now: float) -> None:
        """Set the pace again once PACE_WINDOW_S have gone by, from the CPU taken over them."""
        if now - self._t0 < PACE_WINDOW_S:
            return
        cpu = self._cpu()
        share = (cpu - self._cpu0) / (now - self._t0)
        self._cpu0, self._t0 = cpu, now
        busy = self._host_busy() >= HOST_BUSY_PCT
        if share > DRAW_BUDGET and busy:
            self.every = min(DRAW_MAX_S, max(self.min_s, self.every * 2))
        elif (share < DRAW_BUDGET / 3 or not busy) and self.every:
            self.every = 0.0 if self.every / 2 < self.min_s else self.every / 2
