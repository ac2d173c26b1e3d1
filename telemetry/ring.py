"""Fixed-size rings of float32 columns: the bounded history behind every chart.

A week-long run must not grow the hub or the TUI, so every history is a ring of a fixed
capacity; float32 keeps 1024 ranks x 12 columns x 240 points near 12 MB.
"""

from __future__ import annotations

from array import array
from math import nan
from typing import Iterable

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
)
"""Columns of a rank's history; ``t`` is seconds since the run started (float32-safe)."""


class Ring:
    """A float32 ring buffer; missing values are NaN."""

    __slots__ = ("_buf", "_head", "_count", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._buf = array("f", bytes(4 * capacity))
        self._head = 0  # next slot to write
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, value: float | None) -> None:
        self._buf[self._head] = nan if value is None else value
        self._head = (self._head + 1) % self.capacity
        if self._count < self.capacity:
            self._count += 1

    def extend(self, values: Iterable[float]) -> None:
        for v in values:
            self.append(v)

    def values(self) -> list[float]:
        """Oldest first."""
        if self._count < self.capacity:
            return self._buf[: self._count].tolist()
        return (self._buf[self._head :] + self._buf[: self._head]).tolist()

    def last(self) -> float | None:
        if not self._count:
            return None
        return self._buf[(self._head - 1) % self.capacity]

    def to_bytes(self) -> bytes:
        """Oldest first, float32 little-endian as the machine stores them."""
        if self._count < self.capacity:
            return self._buf[: self._count].tobytes()
        return (self._buf[self._head :] + self._buf[: self._head]).tobytes()

    def load_bytes(self, data: bytes) -> None:
        """Replace the contents with ``to_bytes()`` output (oldest first), in one copy."""
        values = array("f")
        values.frombytes(data[: len(data) - len(data) % 4])
        values = values[-self.capacity :]
        n = len(values)
        self._buf[:n] = values
        self._count = n
        self._head = n % self.capacity
