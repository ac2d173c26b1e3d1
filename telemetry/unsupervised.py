"""A launched hub whose supervisor is gone (killed outright: SIGKILL, the OOM killer).

``pardash launch``'s supervisor restarts its hub when it dies and stops it when the job ends.
When the supervisor itself is killed, torchrun and the ranks train on without it: the hub then
records them on its own and stops when they are done, saying why (a warning in the log and to
viewers), so no hub is left serving a run that ended, listed by ``pardash ps`` for ever.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import psutil

from .state import run_over

if TYPE_CHECKING:
    from .hub import Hub

ORPHAN_QUIET_S = 120.0
"""A hub whose supervisor is gone stops when no message has come for this long (a live rank
sends a heartbeat every second)."""
ORPHAN_OVER_S = 30.0
"""... or when every rank has been done this long (torchrun, which outlives the supervisor,
may still start the ranks again under --max-restarts)."""


class SupervisorWatch:
    """A launched hub's supervisor restarts it if it dies and stops it when the job ends. When
    the supervisor itself is killed, torchrun and the ranks train on without it: the hub then
    says so (a warning in the log and to viewers) and records on, unsupervised, until every
    rank is done or none has been heard for ORPHAN_QUIET_S, and stops: no hub is left serving a
    run that ended, listed by `pardash ps` for ever. Called at every frame; looks once a second."""

    def __init__(self, hub: Hub, pid: int) -> None:
        self.hub, self.pid = hub, pid
        self.gone = False
        now = time.monotonic()
        self._next = now
        self._heard = (hub.core.received, now)
        self._over_since: float | None = None

    def __call__(self) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + 1.0
        core = self.hub.core
        if core.received != self._heard[0]:
            self._heard = (core.received, now)
        if not self.gone:
            if _alive(self.pid):
                return
            self.gone = True
            core.note(
                f"the launcher's supervisor (pid {self.pid}) is gone: the ranks train on without it, and this hub "
                "records them (with no restart if it dies) until every rank is done",
                name="warning",
            )
        st = core.state
        if run_over(st):
            self._over_since = self._over_since or now
            # Every rank finished: nothing restarts them. One failed: torchrun may, shortly.
            if all(r.finished for r in st.ranks.values()):
                self._stop("every rank finished")
        else:
            self._over_since = None
        if self._over_since is not None and now - self._over_since >= ORPHAN_OVER_S:
            self._stop(f"every rank is done and none started again within {ORPHAN_OVER_S:.0f} s")
        elif now - self._heard[1] >= ORPHAN_QUIET_S:
            self._stop(f"no rank has been heard for {ORPHAN_QUIET_S:.0f} s (stopped, or cut off: what they send from now on is not recorded)")

    def _stop(self, why: str) -> None:
        self.hub.core.note(f"unsupervised hub stops: {why}", name="warning")
        self.hub.stop()


def _alive(pid: int) -> bool:
    """The process runs (a zombie, killed and not yet reaped by its parent, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
