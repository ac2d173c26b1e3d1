"""Read a JSONL telemetry log: every well-formed record, and a count of what was not.

A log being written (or cut short by a crash) may end in a partial line; malformed lines are
skipped and counted, never raised, so report, replay and export always get an answer.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

import msgspec

from . import schema


@dataclass
class LogReadStats:
    """What reading a log skipped."""

    lines: int = 0
    records: int = 0
    skipped: Counter = field(default_factory=Counter)
    """Skipped lines by reason: truncated (last line without newline), malformed, invalid."""

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())


def read_log(path: str | os.PathLike[str], stats: LogReadStats | None = None) -> Iterator[schema.Message]:
    """Yield the log's records in order; fill ``stats`` with what was skipped."""
    stats = stats if stats is not None else LogReadStats()
    decode = schema.decode_json
    with open(path, "rb") as fh:
        for raw in fh:
            stats.lines += 1
            complete = raw.endswith(b"\n")
            line = raw.strip()
            if not line:
                continue
            try:
                msg = decode(line)
            except msgspec.ValidationError:
                stats.skipped["invalid"] += 1
                continue
            except msgspec.DecodeError:
                stats.skipped["truncated" if not complete else "malformed"] += 1
                continue
            stats.records += 1
            yield msg


def load_log(path: str | os.PathLike[str]) -> tuple[list[schema.Message], LogReadStats]:
    stats = LogReadStats()
    return list(read_log(path, stats)), stats
