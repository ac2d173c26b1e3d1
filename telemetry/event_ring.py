"""The events a run's state keeps for its event log, bounded so that routine ones do not push
out the rest.

A long run's ranks each say an epoch end, an evaluation or a checkpoint again and again: kept
in one bounded deque, after an hour they had pushed out every verdict of the run's first
minutes ("rank 1 is a straggler" at 00:46 was gone from the event log at 25:00, review 238).
Here routine events and the rest are each kept to the bound, and read together in the order
they came.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from heapq import merge

from . import schema

NOT_ROUTINE = frozenset({"warning", "error", "exit", "refused", "restart", "resume"})
"""Event names a rank says that are never routine, however often they come."""


def is_routine(msg: schema.Message) -> bool:
    """A rank's own event of its training going as planned (an epoch end, an evaluation, a
    checkpoint, a script's event of its own), not a verdict, warning, error, exit, restart or
    a note of the hub's or the launcher's (seq -1)."""
    return isinstance(msg, schema.Event) and msg.rank >= 0 and msg.seq >= 0 and msg.name not in NOT_ROUTINE


class EventRing:
    """Events and verdicts, oldest first: the newest ``maxlen`` routine events
    (:func:`is_routine`) and, apart from them, the newest ``maxlen`` of the rest. Read as a
    deque is (iteration, ``reversed``, ``len``, ``[0]``, ``[-1]``), in the order appended."""

    __slots__ = ("_n", "_other", "_routine", "maxlen")

    def __init__(self, iterable: Iterable[schema.Message] = (), maxlen: int | None = None) -> None:
        self.maxlen = maxlen
        self._routine: deque[tuple[int, schema.Message]] = deque(maxlen=maxlen)
        self._other: deque[tuple[int, schema.Message]] = deque(maxlen=maxlen)
        self._n = 0
        for m in iterable:
            self.append(m)

    def append(self, msg: schema.Message) -> None:
        self._n += 1
        (self._routine if is_routine(msg) else self._other).append((self._n, msg))

    def __len__(self) -> int:
        return len(self._routine) + len(self._other)

    def __bool__(self) -> bool:
        return bool(self._routine) or bool(self._other)

    def __iter__(self) -> Iterator[schema.Message]:
        # (each entry's number is its own: tuples never compare their messages)
        return (m for _, m in merge(self._routine, self._other))

    def __reversed__(self) -> Iterator[schema.Message]:
        return (m for _, m in merge(reversed(self._routine), reversed(self._other), reverse=True))

    def __getitem__(self, i: int) -> schema.Message:
        if i in (0, -1):
            ends = [d[i] for d in (self._routine, self._other) if d]
            if ends:
                return (max if i == -1 else min)(ends)[1]
        return list(self)[i]

    def __repr__(self) -> str:
        return f"EventRing({list(self)!r}, maxlen={self.maxlen})"
