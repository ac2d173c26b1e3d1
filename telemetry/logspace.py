"""Whether the log's disk will hold the run: the hub's forecast, said before the disk fills.

The log keeps every step of every rank (about 650 bytes a rank-step): a long run of many ranks
needs gigabytes, and a disk that fills under it stops the log where it filled (the recorder then
holds what it can, the run goes on unrecorded) and whatever else writes there (checkpoints). A
person learned of it when it happened. The hub measures how fast its log grows, once it has
grown for :data:`LEAST_S`, against the free space of the log's file system, and warns once:

- where the run says its steps (the bundled trainer's ``--steps``, a hello's ``total_steps``),
  when the rest of them will not fit: at about which step the disk fills, and when;
- else, when the disk fills within :data:`HORIZON_S` at this rate;

and once more when it fills within :data:`LAST_S`. Checked every :data:`CHECK_S` seconds; while
the log will not fit, viewers' headers say when the disk fills (``HubStats.log_full_in_s``). Once
it fits again (space freed), a later shortage is said again.
"""

from __future__ import annotations

import os
from typing import Callable

from .clocks import human_span
from .summary import human_bytes

CHECK_S = 30.0
"""Seconds between two looks at the log's size and its disk's free space."""
LEAST_S = 120.0
"""Seconds of growth measured before a forecast (a run's first steps, its compile and warm-up,
write at another pace than the rest)."""
HORIZON_S = 12 * 3600.0
"""A run that says no number of steps is warned of a disk that its log fills within this."""
LAST_S = 3600.0
"""A second word when the disk fills within this."""


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes an unprivileged writer may still write on ``path``'s file system (None: unknown)."""
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)) or ".")
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class LogSpace:
    """The hub's forecast of its log's disk (see the module's docstring)."""

    __slots__ = ("free", "full_at", "_base", "_said", "_said_last", "_checked")

    def __init__(self, free: Callable[[str | os.PathLike[str]], int | None] = free_bytes) -> None:
        self.free = free
        """How the free space of the log's file system is read."""
        self.full_at: float | None = None
        """When (the monotonic clock) the log's disk fills at its rate, while the log will not
        fit there (the viewers' header counts down to it); None otherwise."""
        self._base: tuple[float, int, int] | None = None
        """(time, log size, step) when the growth began to be measured."""
        self._said = False
        self._said_last = False
        self._checked: float | None = None

    def due(self, now: float) -> bool:
        """Whether :meth:`check` has something to do at ``now`` (a monotonic clock): every
        CHECK_S seconds."""
        return self._checked is None or now - self._checked >= CHECK_S

    def check(self, now: float, path: str | os.PathLike[str], size: int, step: int, total: int | None) -> str | None:
        """The warning to give now, if any (call when :meth:`due`): ``now`` a monotonic clock,
        ``size`` the log's bytes, ``step`` the run's (its slowest rank's), ``total`` the steps
        it says it takes (None: not said). Sets :attr:`full_at` while the log will not fit."""
        self._checked = now
        if size <= 0:
            # (no log, or none any more: a recorder whose disk filled closed it, and says so;
            # the header counted down to "full in 1s" for the rest of the hub's life)
            self.full_at = None
            return None
        if step <= 0:
            return None
        base = self._base
        if base is None or size < base[1] or step < base[2]:  # (a log cut back, a run started again)
            self._base = (now, size, step)
            return None
        t0, size0, step0 = base
        took = now - t0
        grew = size - size0
        if took < LEAST_S or grew <= 0:
            return None
        free = self.free(path)
        if free is None:
            return None
        per_s = grew / took
        fills_in = free / per_s
        need = per_step = None
        if total is not None:
            if step < total and step > step0:
                per_step = grew / (step - step0)
                need = per_step * (total - step)
            # (need against free alone: both fall alike as the log grows, so the verdict holds;
            # against a share of free, a run needing 95-100% of it was said not to fit, to fill
            # "at about step 103,092 of 100,000", then was no longer short, without a word)
            short = need is not None and need > free
        else:
            short = fills_in < HORIZON_S
        if not short:
            # (space freed, or the rate fell: a shortage later is said again)
            self.full_at = None
            self._said = self._said_last = False
            return None
        self.full_at = now + fills_in
        per_h = f"{human_bytes(per_s * 3600)} an hour"
        where = f"its disk ({os.path.dirname(os.path.abspath(path))}) has {human_bytes(free)} free"
        then = "free space there, or the log stops where it fills (the run goes on)"
        if self._said:
            if self._said_last or fills_in >= LAST_S:
                return None
            self._said_last = True
            return f"the log's disk fills in about {human_span(fills_in)} at this rate ({per_h}; {human_bytes(free)} free): {then}"
        self._said = True
        self._said_last = fills_in < LAST_S  # (said now: not again 30 s later)
        if need is not None and per_step is not None:
            at = step + int(free / per_step)
            return (f"the log will not fit on its disk: it grows {per_h} ({human_bytes(per_step)} a step) and the "
                    f"{total - step:,} steps left need about {human_bytes(need)}; {where}, which fills at about "
                    f"step {at:,} of {total:,}, in about {human_span(fills_in)}: {then}")  # fmt: skip
        return f"the log grows {per_h}; {where}, which it fills in about {human_span(fills_in)}: {then}"
