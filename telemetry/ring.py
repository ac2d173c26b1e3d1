"""A fixed-size ring of float32 rows: the bounded history behind every chart.

A week-long run must not grow the hub or the TUI, so every history is a ring of a fixed
capacity. A rank's history is one :class:`Ring` whose rows are its steps and whose columns are
:data:`HISTORY_COLUMNS`: committing a step writes one row (one ``struct.pack_into`` into a flat
float32 buffer), where a ring per column took a dozen appends. float32 keeps 1024 ranks x 13
columns x 240 points near 13 MB.

Reading goes by column, oldest first: ``ring["loss"].values()``, ``ring["loss"].last()``,
``len(ring["loss"])``; ``ring.tail(n)`` gives the last ``n`` rows whole. The snapshot carries a
rank's history as one float32 byte string per column (``ring["loss"].to_bytes()``, loaded back
with :meth:`Ring.load_columns`), as it did when each column was a ring of its own.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from math import isfinite, nan

HISTORY_COLUMNS = (
    "step",
    "t",
    "loss",
    "step_s",
    "self_s",
    "data_s",
    "forward_s",
    "backward_s",
    "optimizer_s",
    "comm_s",
    "mem_held_bytes",
    "mem_device_bytes",
    "samples",
)
"""Columns of a rank's history; ``t`` is seconds since the run started (float32-safe);
``samples`` is what the rank processed since its point before (its steps in between included,
NaN where not known: see RankState.samples_mark)."""

WIDE_COLUMNS = ("step", "t")
"""Columns a ring also keeps as float64: float32 holds whole steps exactly only to 16,777,216
(two days at 100 steps/s; a rate over ten steps then read 20% off) and a run's seconds to 8 ms
after a day (a rate over a second of points jittered 3% after three days, 6% after a week).
The snapshot still carries them as float32, as every column."""

_FIRST_TWO = (0, 1)

_FLOAT32_MAX = 3.4028234663852886e38
_NATIVE = sys.byteorder == "little"


def _float32(value: float | None) -> float:
    """A value as float32 stores it: None is NaN, beyond float32's range is +-inf."""
    if value is None:
        return nan
    x = float(value)
    if isfinite(x) and abs(x) > _FLOAT32_MAX:
        return float("inf") if x > 0 else float("-inf")
    return x


class Column:
    """One column of a :class:`Ring`, read oldest first (a view: it follows the ring)."""

    __slots__ = ("_ring", "_j")

    def __init__(self, ring: Ring, j: int) -> None:
        self._ring = ring
        self._j = j

    def __len__(self) -> int:
        return self._ring._count

    def values(self) -> list[float]:
        """Oldest first; NaN where a step lacked the value."""
        return self._ring._column(self._j).tolist()

    def last(self) -> float | None:
        """The newest value (NaN when that step lacked it); None when the ring is empty."""
        return self._ring._at(self._j, 0)

    def to_bytes(self) -> bytes:
        """Oldest first, float32 little-endian (the snapshot's history format)."""
        data = self._ring._column(self._j, narrow=True)
        if _NATIVE:
            return data.tobytes()
        return struct.pack(f"<{len(data)}f", *data.tolist())


class Ring:
    """A ring of ``capacity`` float32 rows of ``len(columns)`` values; missing values are NaN."""

    __slots__ = ("capacity", "columns", "_index", "_width", "_buf", "_flat", "_pack", "_head", "_count", "_views",
                 "_wide", "_wide_of", "_wbuf", "_wflat", "_wpack")  # fmt: skip

    def __init__(self, capacity: int, columns: Sequence[str] = HISTORY_COLUMNS) -> None:
        if capacity < 1:
            raise ValueError(f"ring capacity {capacity}: must be at least 1")
        self.capacity = capacity
        self.columns = tuple(columns)
        self._index = {name: j for j, name in enumerate(self.columns)}
        self._width = len(self.columns)
        self._buf = bytearray(4 * capacity * self._width)
        self._flat = memoryview(self._buf).cast("f")
        """The rows one after another, in slot order (not oldest first)."""
        self._pack = struct.Struct(f"={self._width}f").pack_into
        self._wide = tuple(j for j, name in enumerate(self.columns) if name in WIDE_COLUMNS)
        """The columns also kept as float64 (see WIDE_COLUMNS), their values in ``_wbuf``."""
        self._wide_of = {j: k for k, j in enumerate(self._wide)}
        self._wbuf = bytearray(8 * capacity * len(self._wide))
        self._wflat = memoryview(self._wbuf).cast("d")
        self._wpack = struct.Struct(f"={len(self._wide)}d").pack_into
        self._head = 0  # next slot to write
        self._count = 0
        self._views: dict[str, Column] = {}

    def __len__(self) -> int:
        """Rows held."""
        return self._count

    # -- writing ----------------------------------------------------------------------------

    def append_row(self, *values: float) -> None:
        """Append one row, a float for each column (NaN for a missing one): the hot path."""
        try:
            self._pack(self._buf, 4 * self._head * self._width, *values)
        except (OverflowError, struct.error, TypeError):
            # A value float32 cannot hold (1e300 as a loss), or None: stored as float32 would.
            self._pack(self._buf, 4 * self._head * self._width, *map(_float32, values))
        wide = self._wide
        if wide:
            try:
                if wide == _FIRST_TWO:  # (a rank's history: step and t lead its columns)
                    self._wpack(self._wbuf, 16 * self._head, values[0], values[1])
                else:
                    self._wpack(self._wbuf, 8 * self._head * len(wide), *[values[j] for j in wide])
            except (struct.error, TypeError):  # (None: NaN)
                self._wpack(self._wbuf, 8 * self._head * len(wide), *[nan if values[j] is None else float(values[j]) for j in wide])
        self._head = (self._head + 1) % self.capacity
        if self._count < self.capacity:
            self._count += 1

    def drop_newest_from(self, name: str, value: float) -> int:
        """Drop the newest rows while column ``name``'s value is ``value`` or more (a rank's
        steps run again after torchrun restarted it: they replace the first run of them);
        the rows dropped."""
        j = self._index[name]
        dropped = 0
        while self._count:
            v = self._at(j, 0)
            if v is None or not v >= value:
                break
            self._head = (self._head - 1) % self.capacity
            self._count -= 1
            dropped += 1
        if dropped and (self._head - self._count) % self.capacity:
            # (a ring not full is read from its first slot: what is left of a wrapped one is
            # moved there; rare, as restarts are)
            rows = self.tail()
            self._head = self._count = 0
            for row in rows:
                self.append_row(*row)
        return dropped

    def append(self, row: Sequence[float | None]) -> None:
        """Append one row given as a sequence; None is NaN."""
        if len(row) != self._width:
            raise ValueError(f"a row of {len(row)} values for a ring of {self._width} columns")
        self.append_row(*row)  # type: ignore[arg-type]

    def extend(self, rows: Iterable[Sequence[float | None]]) -> None:
        for row in rows:
            self.append(row)

    def load_columns(self, columns: Mapping[str, bytes]) -> None:
        """Replace the contents with columns as ``Column.to_bytes()`` gives them (oldest
        first). Unknown names are ignored; columns of unequal length are aligned on their
        newest values, the older rows of a short one being NaN."""
        arrays: dict[int, memoryview] = {}
        for name, data in columns.items():
            j = self._index.get(name)
            if j is None:
                continue
            n = len(data) // 4
            if _NATIVE:
                values = memoryview(data)[: 4 * n].cast("f")
            else:
                values = memoryview(array("f", struct.unpack(f"<{n}f", data[: 4 * n])))
            arrays[j] = values[max(0, n - self.capacity) :]
        n = max((len(v) for v in arrays.values()), default=0)
        w = self._width
        flat = self._flat
        for j in range(w):
            values = arrays.get(j)
            start = n - (len(values) if values is not None else 0)
            if start:
                # Older rows than a short (or missing) column holds: NaN.
                flat[j : start * w : w] = memoryview(array("f", [nan]) * start)
            if values is not None and len(values):
                flat[start * w + j : n * w : w] = values
        ww = len(self._wide)
        for k, j in enumerate(self._wide):  # (as the snapshot has them: float32)
            self._wflat[k : n * ww : ww] = memoryview(array("d", flat[j : n * w : w].tolist()))
        self._count = n
        self._head = n % self.capacity

    # -- reading ----------------------------------------------------------------------------

    def _column(self, j: int, narrow: bool = False) -> memoryview:
        """Column ``j`` oldest first (a float32 memoryview, float64 for a wide column unless
        ``narrow``; a copy when the ring wrapped)."""
        k = None if narrow else self._wide_of.get(j)
        if k is None:
            w, flat, fmt = self._width, self._flat, "f"
        else:
            j, w, flat, fmt = k, len(self._wide), self._wflat, "d"
        if self._count < self.capacity:
            return flat[j : self._count * w : w]
        h = self._head
        if h == 0:
            return flat[j::w]
        older, newer = flat[h * w + j :: w], flat[j : h * w : w]
        return memoryview(older.tobytes() + newer.tobytes()).cast(fmt)

    def _at(self, j: int, k: int) -> float | None:
        """Column ``j``'s value ``k`` rows before the newest; None when there is no such row."""
        if k >= self._count:
            return None
        slot = (self._head - 1 - k) % self.capacity
        if j in self._wide_of:
            return self._wflat[slot * len(self._wide) + self._wide_of[j]]
        return self._flat[slot * self._width + j]

    def last(self, name: str) -> float | None:
        """The newest value of column ``name`` (NaN when that step lacked it); None when the
        ring is empty. The same as ``ring[name].last()``, in one call (hot loops use it)."""
        return self._at(self._index[name], 0)

    def ago(self, name: str, k: int) -> float | None:
        """The value of column ``name`` ``k`` rows before the newest (0: the newest); None when
        the ring holds no more than ``k`` rows."""
        return self._at(self._index[name], k)

    def columns_bytes(self) -> dict[str, bytes]:
        """Every column as ``Column.to_bytes()`` gives it (the snapshot's history of a rank),
        cut from one oldest-first copy of the rows."""
        w = self._width
        flat = self._flat
        if self._count < self.capacity or self._head == 0:
            rows = flat[: self._count * w]
        else:
            h = self._head * w
            rows = memoryview(flat[h:].tobytes() + flat[:h].tobytes()).cast("f")
        if not _NATIVE:
            return {name: self[name].to_bytes() for name in self.columns}
        return {name: rows[j::w].tobytes() for j, name in enumerate(self.columns)}

    def tail(self, n: int | None = None) -> list[list[float]]:
        """The last ``n`` rows (all when None), oldest first, each a list in column order."""
        count = self._count if n is None else max(0, min(n, self._count))
        w = self._width
        h = self._head
        first = (h - count) % self.capacity
        if first + count <= self.capacity:
            flat = self._flat[first * w : (first + count) * w].tolist()
        else:
            flat = self._flat[first * w :].tolist() + self._flat[: h * w].tolist()
        rows = [flat[i : i + w] for i in range(0, count * w, w)]
        wide = self._wide
        if wide and rows:
            ww = len(wide)
            if first + count <= self.capacity:
                exact = self._wflat[first * ww : (first + count) * ww].tolist()
            else:
                exact = self._wflat[first * ww :].tolist() + self._wflat[: h * ww].tolist()
            for i, row in enumerate(rows):
                for k, j in enumerate(wide):
                    row[j] = exact[i * ww + k]
        return rows

    def __getitem__(self, name: str) -> Column:
        view = self._views.get(name)
        if view is None:
            view = self._views[name] = Column(self, self._index[name])
        return view

    def get(self, name: str, default: Column | None = None) -> Column | None:
        return self[name] if name in self._index else default

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def keys(self) -> tuple[str, ...]:
        return self.columns

    def items(self) -> list[tuple[str, Column]]:
        """(column name, column) pairs, in column order."""
        return [(name, self[name]) for name in self.columns]


def _ring_again(capacity: int, columns: tuple[str, ...], rows: bytes, head: int, count: int, wide: bytes = b"") -> Ring:
    """A :class:`Ring` made again from its rows' bytes (its ``_buf``, and ``_wbuf``: its wide
    columns' float64 values), where the next row goes and how many it holds: how a replay's
    keyframes copy one (its memoryviews cannot be pickled)."""
    ring = Ring(capacity, columns)
    ring._buf[:] = rows
    if wide:
        ring._wbuf[:] = wide
    ring._head, ring._count = head, count
    return ring
