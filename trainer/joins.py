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
THROW_WORDS = "ran out of inputs at step {step}: Join(throw_on_early_termination=True) ends every rank's loop with an error"
"""The same, of a ``Join`` made to raise on every rank once one runs out (no shadowing)."""
THROWN = "exhausted all inputs"
"""In the error ``Join._notify_procs_to_terminate`` raises on purpose ("Rank 0 exhausted all
inputs."), not in a collective's (gloo's timeout is a RuntimeError too)."""


class Joins:
    """Watches ``Join``'s shadowing: see the module's docstring. Part of :class:`Instrument` (its
    state set here, lazily: ``_joined`` is read by the collectives' wrappers)."""

    _joined: bool = False
    """True while this rank shadows the others' collectives in ``Join.__exit__``."""

    def _watch_joins(self) -> None:
        try:
            from torch.distributed.algorithms.join import Join
        except ImportError:  # (a build without torch.distributed)
            return
        # Its __enter__, not its __exit__: the shadowing's warning of a skew over 1,000 steps
        # names the frame that called __exit__ (the script's ``with`` line), not a wrapper's.
        self._patch(Join, "__enter__", self._wrap_join_enter)

    def _wrap_join_enter(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def __enter__(join: Any) -> Any:
            out = original(join)
            if _get_ident() == self._tid and not self.dead:
                self._join_entered(join)
            return out

        return __enter__

    @_guarded
    def _join_entered(self, join: Any) -> None:
        """Watch the context's count of the ranks not joined yet: its first call is the rank
        running out of inputs (``Join.__exit__`` without an exception, enabled), and it is
        called again at each collective shadowed, until it finds none (every rank ran out).
        The last rank to run out finds none at its first count: it shadowed nobody, said not."""
        count = getattr(join, "_get_num_nonjoined_procs", None)
        if count is None or not callable(count):  # (another torch: not watched)
            return
        said = [False]

        def counted() -> Any:
            if not said[0]:
                self._join_begins()
            n = count()  # (a timeout here, a peer hung: its heartbeat still says "join", see below)
            if n and not said[0]:
                said[0] = True
                self._joined_said(bool(getattr(join, "_throw_on_early_termination", False)))
            elif not n:
                self._join_ends()
            return n

        join._get_num_nonjoined_procs = counted
        notify = getattr(join, "_notify_procs_to_terminate", None)
        if notify is not None and callable(notify):

            def notified() -> Any:
                # Join(throw_on_early_termination=True): the rank that ran out tells the others
                # and raises, by design, where no count ends its shadowing: without this it read
                # joined for good, its later collectives untimed, the next epoch's too (review
                # 339). Not on a collective's timeout here (a peer hung: see _join_ends).
                try:
                    return notify()
                except RuntimeError as e:
                    if THROWN in str(e):
                        self._join_ends()
                    raise

            join._notify_procs_to_terminate = notified

    @_guarded
    def _join_begins(self) -> None:
        self._joined = True
        self.reporter.set_phase(JOIN_PHASE)

    @_guarded
    def _joined_said(self, throws: bool = False) -> None:
        rep = self.reporter
        step = rep.last_step
        rep.event("join", (THROW_WORDS if throws else JOIN_WORDS).format(step=step), step=step)
        rep.heartbeat()  # (now, not up to a second later: the hub reads the rank as joined at once)

    @_guarded
    def _join_ends(self) -> None:
        self._joined = False
        # Every rank has run out: what follows is the script's own, between steps, until a
        # next step begins. (Not on an error, a collective's timeout as a peer hung: its
        # heartbeat still says it waited joined, and the hub names the hung peer, not it.)
        self.reporter.set_phase("data")
