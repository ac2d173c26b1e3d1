"""DDP's uneven inputs (``torch.distributed.algorithms.join.Join``) as the zero-code instrument
reads them (part of :class:`pardash.trainer.instrument.Instrument`).

``with Join([model]): for batch in my_shard: ...`` lets ranks with fewer batches leave their
loop early: the rank that runs out enters ``Join.__exit__``, where it shadows the others'
collectives (DDP's gradient all-reduces, with zeros) until every rank has run out. It takes no
step there, by design, and may for a long while (a shard half the others'). Unsaid, the hub
read it as a rank "stalled in data" (or "in sync") after its last step, the job's progress
stuck at it, and when a rank still stepping then hung, the joined rank was named the hang's
likely cause (review 335). Here, as a rank enters that shadowing, a ``join`` event says so
("ran out of inputs at step 400 and joined: ...") and its heartbeat's phase is
:data:`~pardash.telemetry.schema.JOIN_PHASE` until the context ends; the hub's liveness rule
reads such a rank as waiting by design (:func:`pardash.telemetry.analysis.joined`). The
collectives it shadows are no waits of its own steps (they are left untimed)."""

from __future__ import annotations

from typing import Any, Callable

from pardash.telemetry.schema import JOIN_PHASE
from pardash.trainer.hooking import _get_ident, _guarded

JOIN_WORDS = "ran out of inputs at step {step} and joined: it shadows the others' collectives until they finish"
"""The ``join`` event's message (the progress line reads "[join] rank 0 ran out of ...")."""


class Joins:
    """Wraps ``Join.__exit__``: see the module's docstring. Part of :class:`Instrument` (its
    state set here, lazily: ``_joined`` is read by the collectives' wrappers)."""

    _joined: bool = False
    """True while this rank shadows the others' collectives in ``Join.__exit__``."""

    def _watch_joins(self) -> None:
        try:
            from torch.distributed.algorithms.join import Join
        except ImportError:  # (a build without torch.distributed)
            return
        self._patch(Join, "__exit__", self._wrap_join_exit)

    def _wrap_join_exit(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def __exit__(join: Any, exc_type: Any, *rest: Any) -> Any:
            # An exception leaving the loop, or a Join made with enable=False: no shadowing.
            if exc_type is not None or not getattr(join, "_enable", True) or _get_ident() != self._tid or self.dead:
                return original(join, exc_type, *rest)
            self._join_begins(join)
            # (not on an error, a collective's timeout as a peer hung: its heartbeat still says
            # it waited joined, and the hub names the hung peer, not it)
            out = original(join, exc_type, *rest)
            self._join_ends()
            return out

        return __exit__

    @_guarded
    def _join_begins(self, join: Any) -> None:
        self._joined = True
        self.reporter.set_phase(JOIN_PHASE)
        count = getattr(join, "_get_num_nonjoined_procs", None)
        if count is None:  # (another torch: said at once)
            self._joined_said()
            return

        # The last rank to run out enters the same way, and leaves at its first count of the
        # ranks not joined (none): said only once a count finds some, so it shadows them.
        def counted() -> Any:
            n = count()
            if n:
                del join._get_num_nonjoined_procs  # (once: the instance's own again)
                self._joined_said()
            return n

        join._get_num_nonjoined_procs = counted

    @_guarded
    def _joined_said(self) -> None:
        rep = self.reporter
        step = rep.last_step
        rep.event("join", JOIN_WORDS.format(step=step), step=step)
        rep.heartbeat()  # (now, not up to a second later: the hub reads the rank as joined at once)

    @_guarded
    def _join_ends(self) -> None:
        self._joined = False
        # Every rank has run out (or the context raised): what follows is the script's own,
        # between steps, until a next step begins.
        self.reporter.set_phase("data")
