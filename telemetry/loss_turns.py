"""Which of the ranks' warnings that their loss turned not finite, or finite again, a person is
shown as they come (the headless lines, the TUI's event log): the log keeps every one."""

from __future__ import annotations

from . import schema
from .state import LOSS_FINITE_AGAIN, LOSS_NOT_FINITE


LOSS_TURNS_PRINTED = 3
"""Times a set of ranks' loss turning not finite is said as it comes (its reporter's warning, and
that it is finite again); the next says that later ones are not (:class:`LossTurnsHeld`)."""

LOSS_TURNS_QUIET_S = 600.0
"""Seconds (the ranks' clock) without a turn of a set of ranks' loss after which the next is
said again, as a first."""


class LossTurnsHeld:
    """Which of the ranks' warnings that their loss is not finite, or finite again, are said as
    they come: a script that skips the update of each inf loss (a GradScaler's, or its own)
    sent two every 7 steps, 40 ``[warning]`` lines of a headless launch and 40 entries of the
    TUI's event log that pushed everything else out. A rank's first LOSS_TURNS_PRINTED turns
    are said; the next one, a line that says later ones are not (:func:`held_text`); then
    none, until a turn to another value, or one LOSS_TURNS_QUIET_S after its last. Alike
    ranks, as :func:`~pardash.telemetry.printer.group_alike` puts them, go by the one of them turned the fewest times
    (the TUI takes a rank's warning in one frame and the other's in the next). The log keeps
    each (the hub's state turns a rank's loss not finite and back by them) and the report
    sums them up."""

    __slots__ = ("_ranks",)

    def __init__(self) -> None:
        self._ranks: dict[int, list] = {}
        """Rank -> [its turns counted, the last one's time (the ranks' clock), its value]."""

    def take(self, ev: schema.Message, ranks: list[int] | None) -> int | None:
        """None: ``ev`` is said as ever (not a loss's turn, or one of the first); 0: not said;
        else the count of the turn it is, to be said by :func:`held_text` instead."""
        if not isinstance(ev, schema.Event) or ev.name != "warning" or ev.rank < 0:
            return None
        bad = LOSS_NOT_FINITE.match(ev.message or "")
        if bad is None and LOSS_FINITE_AGAIN.match(ev.message or "") is None:
            return None
        t = ev.t or 0.0
        counts = []
        for rank in ranks or [ev.rank]:
            seen = self._ranks.get(rank)
            if seen is None or t - seen[1] >= LOSS_TURNS_QUIET_S or (bad is not None and bad["value"] != seen[2]):
                seen = self._ranks[rank] = [0, t, bad["value"] if bad is not None else None]
            seen[1] = t
            seen[0] += bad is not None
            counts.append(seen[0])
        turns = min(counts)
        if turns <= LOSS_TURNS_PRINTED:
            return None
        return turns if bad is not None and turns == LOSS_TURNS_PRINTED + 1 else 0


def held_text(ev: schema.Event, turns: int, what: str = "printed") -> str:
    """``loss inf again at step 28, the 4th time: later turns are not printed each (pardash report
    sums them up)``: of the turn :meth:`LossTurnsHeld.take` holds from (``what`` the TUI's word)."""
    bad = LOSS_NOT_FINITE.match(ev.message or "")
    value = bad["value"] if bad is not None else "not finite"
    nth = f"{turns}{'th' if 10 <= turns % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(turns % 10, 'th')}"
    return (f"loss {value} again at step {ev.step}, the {nth} time: later turns are not {what} each "
            "(pardash report sums them up)")
