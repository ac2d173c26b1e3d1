"""A replay's keyframes: what it needs to go on from points of its log, kept as it plays.

The state a replay's frame shows is built from every record before it, so a seek back played
the log again from its start: 18 s near the end of a 450 MB log (256 ranks, 4 minutes), an hour
and more in a day's. A :class:`Keyframes` keeps copies of that state (the replay's hub core,
its viewer's state, where its log cursor is) every so often as the replay plays forward, and a
seek goes on from the nearest one at or before its target.

Memory stays bounded by the state's size, whatever the log's length: past ``max_count`` copies,
or ``budget_bytes`` of them (KEPT_AT_LEAST of them whatever their size), one goes, the one whose
going leaves the least gap for its age (the log read between its neighbours, over the log read
since it): the copies kept lie close behind the newest and further apart back from it, each gap
about a fixed share of its distance from the newest. A seek back plays a share of how far back it goes, whatever the log's length.
(Every other one went before, the spacing doubling for the whole log: after 24 hours of 256
ranks the newest was 71 minutes behind the end, and `[` there played 7 GiB of log.)

A copy is the state pickled into bytes in this process, and only ever unpickled by it: nothing
read from a socket or a file is unpickled. Pickling is several times faster than
``copy.deepcopy`` of the same objects. A rank's history (its :class:`~.ring.Ring`, most of a
copy's bytes) is the same in the hub core's state and the viewer's: its rows are kept once.
"""

from __future__ import annotations

import io
import math
import operator
import os
import pickle
import time
from dataclasses import dataclass

import msgspec

from .ring import Ring, _ring_again

EVERY_S = 10.0
"""Seconds of the log's own time between two keyframes at least."""
LEAST_BYTES = 4 << 20
"""Bytes of log read between two keyframes at least: a log this small plays again from its
start in a moment, and its keyframes would be memory for nothing."""
LOG_BYTES_PER_BYTE = 1
"""Bytes of log read between two keyframes at least, for each byte of the last one. At 10 (a
keyframe taken to cost as much as playing its bytes of log), a 4096-rank replay, its state 73
MiB, kept one every 750 MiB of log, 30 s of it and more, and a seek back played as much: a
4096-rank state takes a quarter as long to make as its bytes of log take to play (0.7 s against
2.8 s), a 256-rank one (4.6 MiB) about as long. PLAY_PER_KEEP says how far apart they are."""
PLAY_PER_KEEP = 9.0
"""Wall time a replay spends playing between two keyframes at least, for each second the last
one took to make: keyframes take a tenth of a replay's time at most, however fast it plays its
log for their size (which the log's bytes alone could not say, see LOG_BYTES_PER_BYTE)."""
MAX_COUNT = 32
"""Keyframes kept at most."""
NEWEST_KEPT = 4
"""The newest keyframes that stay when one goes (see :meth:`Keyframes._thin`): a seek back a
little way from where the replay is plays a little."""
BUDGET_BYTES = 64 << 20
"""Bytes the keyframes may take, all together (a 256-rank replay's state is about 3.7 MiB), or
KEPT_AT_LEAST of them whatever that takes."""
KEPT_AT_LEAST = 6
"""Keyframes kept whatever their size (the newest NEWEST_KEPT, the oldest and one between), up
to MEMORY_SHARE of the machine's memory: a 4096-rank state is 73 MiB, over BUDGET_BYTES alone,
and was kept in none, so every seek back played the log from its start (`[` near the end of a
2.5-minute log, 2 minutes). Their memory is the state's times this at most, bounded as the state
is (by its ranks: 440 MiB at 4096)."""
MEMORY_SHARE = 1 / 8
"""The share of the machine's memory the keyframes take at most: a state larger alone is kept
in none (its seeks play the log from its start, as before keyframes)."""


@dataclass(slots=True)
class Keyframe:
    """A replay's state at one point of its log."""

    at: float
    """The replay's clock (the log's time) the state is at."""
    offset: int
    """Bytes of the log read up to it."""
    blob: bytes
    """The state, pickled."""

    @property
    def nbytes(self) -> int:
        return len(self.blob)


class _Pickler(pickle.Pickler):
    """Pickles a ring as its rows' bytes, one bytes object for rings of the same rows (pickled
    once), and a message with its defaults left out: msgspec leaves a field out of what it
    encodes when it holds the default object itself, not an equal one (a copied Hello encoded
    ``"device":"cpu"`` where the original had nothing)."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._rows: dict[bytes, bytes] = {}

    def reducer_override(self, obj: object):
        if isinstance(obj, msgspec.Struct):
            cls = type(obj)
            defaults = _DEFAULTS.get(cls)
            if defaults is None:
                defaults = _DEFAULTS[cls] = _defaults(cls)
            values = _astuple(obj)
            # (which fields hold their default object: worked out in C, a field at a time in
            # Python took 2 of the 3 s a 4096-rank state's keyframe took)
            default = tuple(map(_is, values, defaults))
            return (_struct_again, (cls, values, default if True in default else None))
        if type(obj) is Ring:
            rows = bytes(obj._buf)
            rows = self._rows.setdefault(rows, rows)
            wide = bytes(obj._wbuf)
            wide = self._rows.setdefault(wide, wide)
            return (_ring_again, (obj.capacity, obj.columns, rows, obj._head, obj._count, wide))
        return NotImplemented


_NO_DEFAULT = object()
_DEFAULTS: dict[type, tuple[object, ...]] = {}
_astuple = msgspec.structs.astuple
_is = operator.is_


def _defaults(cls: type) -> tuple[object, ...]:
    """The default object of each field of a msgspec Struct, in order (``_NO_DEFAULT``: none,
    or made fresh for each: always pickled)."""
    names = cls.__struct_fields__
    defaults = cls.__struct_defaults__
    pad = (_NO_DEFAULT,) * (len(names) - len(defaults))
    return tuple(_NO_DEFAULT if _is_factory(d) else d for d in pad + defaults)


def _is_factory(default: object) -> bool:
    return type(default).__name__ == "Factory"  # (msgspec's, for a default such as {}: not public)


def _struct_again(cls: type, values: tuple, default: tuple[bool, ...] | None) -> object:
    """A message (a msgspec Struct) as :class:`_Pickler` keeps it: its fields' values, those
    ``default`` marks taking the class's default objects themselves."""
    names = cls.__struct_fields__
    if default is not None:
        defaults = _DEFAULTS.get(cls) or _defaults(cls)
        values = [d if was else v for v, d, was in zip(values, defaults, default)]
    return cls(**dict(zip(names, values)))


def _machine_bytes() -> int:
    """The machine's memory (16 GiB where the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return 16 << 30


class Keyframes:
    """Copies of a replay's state at points of its log, oldest first (see the module)."""

    def __init__(self, *, every_s: float | None = None, least_bytes: int | None = None, max_count: int | None = None,
                 budget_bytes: int | None = None) -> None:  # fmt: skip
        """Each limit defaults to the module's constant of its name (read now: a test or a
        benchmark may set them)."""
        self.every_s = EVERY_S if every_s is None else every_s
        """Seconds of the log's time between two keyframes at least."""
        self.least_bytes = LEAST_BYTES if least_bytes is None else least_bytes
        """Bytes of log read between two keyframes at least (and LOG_BYTES_PER_BYTE times the
        last one's bytes)."""
        self.max_count = MAX_COUNT if max_count is None else max_count
        self.play_per_keep = PLAY_PER_KEEP
        self._made_s = 0.0
        self._made_at = -math.inf
        """How long the last keyframe took to make, and when it was made (``time.perf_counter``)."""
        self.budget_bytes = BUDGET_BYTES if budget_bytes is None else budget_bytes
        self.kept_at_least = KEPT_AT_LEAST
        self.most_bytes = MEMORY_SHARE * _machine_bytes()
        """Bytes they take at most, whatever KEPT_AT_LEAST asks."""
        self._kept: list[Keyframe] = []
        self.bytes = 0
        """Bytes the keyframes kept take."""

    def __len__(self) -> int:
        return len(self._kept)

    def __iter__(self):
        return iter(self._kept)

    def due(self, at: float, offset: int, since: float) -> bool:
        """Whether a replay at ``at`` of its log, ``offset`` bytes into it, keeps a keyframe now;
        ``since``: where the first is counted from (the log's start)."""
        last = self._kept[-1] if self._kept else None
        if last is None:
            return at - since >= self.every_s and offset >= self.least_bytes
        return (
            at - last.at >= self.every_s
            and offset - last.offset >= max(self.least_bytes, LOG_BYTES_PER_BYTE * last.nbytes)
            and time.perf_counter() - self._made_at >= self.play_per_keep * self._made_s
        )

    def keep(self, at: float, offset: int, state: object) -> Keyframe | None:
        """Keep a copy of ``state`` as the replay's at ``at``, then thin the keyframes out to
        their limits; None (and none kept from now on) when the copy alone is over them."""
        t0 = time.perf_counter()
        buf = io.BytesIO()
        _Pickler(buf).dump(state)
        kf = Keyframe(at=at, offset=offset, blob=buf.getvalue())
        self._made_at = time.perf_counter()
        self._made_s = self._made_at - t0
        if kf.nbytes > self._limit(kf.nbytes):
            self.every_s = math.inf
            return None
        self._kept.append(kf)
        self.bytes += kf.nbytes
        self._thin()
        return kf

    def _limit(self, nbytes: int) -> float:
        """Bytes the keyframes may take, all together, when one takes ``nbytes``."""
        return max(self.budget_bytes, min(self.kept_at_least * nbytes, self.most_bytes))

    def _thin(self) -> None:
        """Down to the limits, one keyframe going at a time: of those older than the newest
        NEWEST_KEPT (the oldest too: it stays), the one whose going leaves the least gap of log
        for its distance from the newest, so the gaps grow with the distance; where none is,
        the oldest (the newest stays)."""
        kept = self._kept
        limit = self._limit(kept[-1].nbytes) if kept else 0
        while len(kept) > 1 and (len(kept) > self.max_count or self.bytes > limit):
            newest = kept[-1].offset
            last = len(kept) - 1 - NEWEST_KEPT
            if last >= 1:
                i = min(range(1, last + 1), key=lambda i: (kept[i + 1].offset - kept[i - 1].offset) / max(1, newest - kept[i].offset))
            else:
                i = 0
            self.bytes -= kept.pop(i).nbytes

    def before(self, at: float) -> Keyframe | None:
        """The newest keyframe at or before ``at`` (None: none is)."""
        found = None
        for kf in self._kept:
            if kf.at > at + 1e-9:
                break
            found = kf
        return found

    @staticmethod
    def load(kf: Keyframe) -> object:
        """A fresh copy of the state ``kf`` holds (the keyframe stays as it is, for later seeks)."""
        return pickle.loads(kf.blob)

    def clear(self) -> None:
        """Forget them all (what they hold no longer fits the replay: its start moved)."""
        self._kept = []
        self.bytes = 0
