"""TensorBoard event files, written from one thread: named and begun as TensorBoard's
EventFileWriter names and begins them, their records framed byte for byte as its record
writer frames them (TFRecord), their checksums computed a chunk at a time. Nothing of
tensorboard or numpy is imported here: the caller hands them in when it writes."""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time


class EventFileError(Exception):
    """An event file that cannot be written; the message names it and says why."""


class RecordFraming:
    """TensorBoard's record framing (TFRecord: the length as a little-endian u64, its masked
    CRC-32C as a u32, the record, its masked CRC-32C), of many records at once.

    tensorboard's own writer, without TensorFlow, computes each CRC a byte at a time in Python:
    more than half of an export's time went there (256 ranks x 900 steps). A CRC is linear in
    its message's bits, so a message's CRC is the XOR of what each of its bytes gives at its
    distance from the message's end (a table row a distance: ``rows[k][b]`` is the CRC register
    after byte ``b`` and ``k`` zero bytes), with what the register's initial 0xFFFFFFFF gives
    (0xFF in each of the first four bytes): one table look-up a byte, all the records of a
    chunk in a few numpy calls. Records longer than MAX_ROWS bytes (a long traceback), and
    any under 4 (none is), are summed by ``slow_masked_crc`` (tensorboard's). The bytes are
    exactly what its writer writes.
    """

    MAX_ROWS = 8192
    """Longest record summed with the table (its rows take 1 KiB each)."""
    POLY = 0x82F63B78
    """CRC-32C's polynomial (Castagnoli), bit-reversed."""

    def __init__(self, numpy, slow_masked_crc) -> None:
        self.np = numpy
        self.slow = slow_masked_crc
        byte = numpy.arange(256, dtype=numpy.uint32)
        for _ in range(8):
            byte = (byte >> 1) ^ numpy.where(byte & 1, numpy.uint32(self.POLY), numpy.uint32(0))
        self.rows = byte.reshape(1, 256)
        self.headers: dict[int, bytes] = {}
        """The framed length (with its CRC) of every length seen: step records repeat a few."""

    def _rows_for(self, longest: int):
        np = self.np
        if len(self.rows) < longest:
            rows = np.empty((longest, 256), dtype=np.uint32)
            rows[: len(self.rows)] = self.rows
            first = self.rows[0]
            for k in range(len(self.rows), longest):
                rows[k] = first[rows[k - 1] & 0xFF] ^ (rows[k - 1] >> 8)
            self.rows = rows
        return self.rows

    def masked_crcs(self, records: list[bytes]) -> list[int]:
        """The masked CRC-32C of each record (of 4 to MAX_ROWS bytes)."""
        np = self.np
        lengths = np.fromiter(map(len, records), dtype=np.int64, count=len(records))
        ends = np.cumsum(lengths)
        starts = ends - lengths
        rows = self._rows_for(int(lengths.max()))
        flat = rows.reshape(-1)
        data = np.frombuffer(b"".join(records), dtype=np.uint8)
        distance = np.repeat(ends - 1, lengths) - np.arange(int(ends[-1]))  # to its record's end
        crcs = np.bitwise_xor.reduceat(flat[distance * 256 + data], starts)
        for j in range(4):  # the initial register, as 0xFF in the first four bytes
            crcs ^= rows[lengths - 1 - j, 0xFF]
        crcs ^= np.uint32(0xFFFFFFFF)
        masked = ((crcs >> 15) | (crcs << 17)) + np.uint32(0xA282EAD8)  # wraps at 2**32, as the mask does
        return masked.tolist()

    def frame(self, records: list[bytes]) -> bytes:
        """The records framed, one after another."""
        short = [r for r in records if 4 <= len(r) <= self.MAX_ROWS]
        crcs = iter(self.masked_crcs(short) if short else ())
        out = []
        for record in records:
            n = len(record)
            header = self.headers.get(n)
            if header is None:
                length = struct.pack("<Q", n)
                header = self.headers[n] = length + struct.pack("<I", self.slow(length))
            crc = next(crcs) if 4 <= n <= self.MAX_ROWS else self.slow(record)
            out += (header, record, struct.pack("<I", crc))
        return b"".join(out)


class EventFile:
    """One rank's event file, written in the exporting thread, as TensorBoard's EventFileWriter
    names and begins it. EventFileWriter gives each file a thread of its own fed through a
    queue: with one a rank, an export of 256 ranks x 900 steps spent its minute mostly handing
    the interpreter lock between 257 threads (62 s; 21 s written here). The records wait in
    memory and are framed and appended CHUNK_BYTES at a time, so no file stays open between
    chunks (an export of thousands of ranks stays within the open-file limit) and their
    checksums are computed a chunk at a time (see RecordFraming)."""

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
