"""TensorBoard event files, written from one thread: named and begun as TensorBoard's
EventFileWriter names and begins them, their records framed byte for byte as its record
writer frames them (TFRecord), their checksums by google-crc32c's C code. Nothing of
tensorboard is imported here: the caller hands its Event class in."""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from typing import Callable


class EventFileError(Exception):
    """An event file that cannot be written; the message names it and says why."""


class RecordFraming:
    """TensorBoard's record framing (TFRecord): the record's length as a little-endian u64, its
    masked CRC-32C as a u32, the record, the record's masked CRC-32C.

    tensorboard's own writer, without TensorFlow, computes each CRC a byte at a time in Python:
    more than half of an export's time went there (256 ranks x 900 steps). ``crc32c`` is a
    CRC-32C (Castagnoli) in C: google-crc32c's ``value``, the one Google's storage clients
    check their downloads with. The bytes are exactly what tensorboard's writer writes."""

    def __init__(self, crc32c: Callable[[bytes], int]) -> None:
        self.crc32c = crc32c
        self.headers: dict[int, bytes] = {}
        """The framed length (with its CRC) of every length seen: step records repeat a few."""

    def masked_crc(self, data: bytes) -> int:
        """TFRecord's mask of the CRC (rotated right by 15 bits, plus a constant): a CRC of
        data that holds CRCs of its own stays a good check."""
        crc = self.crc32c(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    def frame(self, records: list[bytes]) -> bytes:
        """The records framed, one after another."""
        masked, headers, pack = self.masked_crc, self.headers, struct.pack
        out = []
        for record in records:
            n = len(record)
            header = headers.get(n)
            if header is None:
                length = pack("<Q", n)
                header = headers[n] = length + pack("<I", masked(length))
            out += (header, record, pack("<I", masked(record)))
        return b"".join(out)


class EventFile:
    """One rank's event file, written in the exporting thread, as TensorBoard's EventFileWriter
    names and begins it. EventFileWriter gives each file a thread of its own fed through a
    queue: with one a rank, an export of 256 ranks x 900 steps spent its minute mostly handing
    the interpreter lock between 257 threads (62 s; 21 s written here). The records wait in
    memory and are framed and appended CHUNK_BYTES at a time, so no file stays open between
    chunks (an export of thousands of ranks stays within the open-file limit)."""

    CHUNK_BYTES = 64 << 10
    _numbers = itertools.count()

    def __init__(self, folder: str, framing: RecordFraming, event_cls) -> None:
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(self._numbers)}"
        self.path = os.path.join(folder, name)
        self._framing = framing
        self._records: list[bytes] = []
        self._pending_bytes = 0
        self._append(b"", mode="wb")
        self.add(event_cls(wall_time=time.time(), file_version="brain.Event:2"))

    def add(self, event) -> None:
        record = event.SerializeToString()
        self._records.append(record)
        self._pending_bytes += len(record)
        if self._pending_bytes >= self.CHUNK_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._records:
            self._append(self._framing.frame(self._records))
            self._records = []
            self._pending_bytes = 0

    def close(self) -> None:
        self.flush()

    def _append(self, data: bytes, mode: str = "ab") -> None:
        try:
            with open(self.path, mode) as fh:
                fh.write(data)
        except OSError as exc:
            raise EventFileError(f"cannot write {self.path}: {exc.strerror or exc}") from None


__all__ = ["EventFile", "EventFileError", "RecordFraming"]
