"""``pardash export LOG --tensorboard DIR``: a recorded log as TensorBoard scalars.

One TensorBoard run per rank (``DIR/rank0``, ``DIR/rank1``, ...), so TensorBoard's run
selector overlays the ranks. Every step record becomes one point per scalar, at the step's
number and wall clock:

- ``loss``, ``lr``, ``throughput/samples_per_s`` (the rank's samples / its step time);
- ``time/step_s`` and the phases ``time/data_s`` ... ``time/self_s`` (seconds);
- ``memory/<field>`` for every figure of the step's ``mem`` (bytes: params_bytes,
  held_bytes, cuda_peak_bytes, rss_bytes, ...);
- ``custom/<name>`` for metrics a script logged with ``pardash.telemetry.log``.

Steps a rank runs again (after a torchrun restart or a resume) start a new session in its
event file at that step, so TensorBoard keeps the later run of them, not both.

The records are TensorBoard's own (``tensorboard.summary.writer``'s record framing, the one
``torch.utils.tensorboard`` writes through) with scalar ``Summary`` protos: no torch, no
TensorFlow. TensorBoard stores scalars as float32, so values come back to about 7 significant
digits. It is imported when an export runs (the ``export`` extra), never when this module loads.
"""

from __future__ import annotations

import glob
import itertools
import math
import os
import socket
import time
from typing import Collection

from . import schema
from .logreader import LogReadStats, Progress, no_records, read_log
from .state import mem_held_bytes

TIMES = ("step_s", "data_s", "forward_s", "backward_s", "optimizer_s", "comm_s", "self_s")
MEM_FIELDS = (
    "params_bytes", "grads_bytes", "optim_bytes", "buckets_bytes",
    "params_full_bytes", "grads_full_bytes", "optim_full_bytes",
    "cuda_allocated_bytes", "cuda_reserved_bytes", "cuda_peak_bytes", "nvml_used_bytes", "rss_bytes",
)  # fmt: skip
INSTALL_HINT = "pardash export --tensorboard needs the tensorboard package: pip install 'pardash[export]'"


class ExportError(Exception):
    """An export that cannot run; the message is one line that says what to do."""


def step_scalars(s: schema.Step) -> dict[str, float]:
    """The scalars one step record gives (tag -> value), the ones the export writes."""
    out: dict[str, float] = {}
    if s.loss is not None:
        out["loss"] = s.loss
    if s.lr is not None:
        out["lr"] = s.lr
    if s.step_s > 0 and s.samples:
        out["throughput/samples_per_s"] = s.samples / s.step_s
    for name in TIMES:
        v = getattr(s, name)
        if v is not None:
            out[f"time/{name}"] = v
    if s.mem is not None:
        for name in MEM_FIELDS:
            v = getattr(s.mem, name)
            if v is not None and (v or name != "buckets_bytes"):  # buckets: DDP's only (no line of zeros)
                out[f"memory/{name}"] = v
        out["memory/held_bytes"] = mem_held_bytes(s.mem)
    for name, v in s.custom.items():
        out[f"custom/{name}"] = v
    return out


def _writer_classes():
    try:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.record_writer import RecordWriter
    except ImportError:
        raise ExportError(INSTALL_HINT) from None
    return RecordWriter, Event, Summary, SessionLog


class _EventFile:
    """One rank's event file, written in the exporting thread, as TensorBoard's EventFileWriter
    names and begins it. EventFileWriter gives each file a thread of its own fed through a
    queue: with one a rank, an export of 256 ranks x 900 steps spent its minute mostly handing
    the interpreter lock between 257 threads (62 s; 21 s written here). The framed records wait
    in memory and are appended CHUNK_BYTES at a time, so no file stays open between chunks: an
    export of thousands of ranks stays within the open-file limit."""

    CHUNK_BYTES = 64 << 10
    _numbers = itertools.count()

    def __init__(self, folder: str, record_writer, event_cls) -> None:
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(self._numbers)}"
        self.path = os.path.join(folder, name)
        self._pending = bytearray()
        self._records = record_writer(self)  # frames each record (length, CRCs) into write()
        self._append(b"", mode="wb")
        self.add(event_cls(wall_time=time.time(), file_version="brain.Event:2"))

    def add(self, event) -> None:
        self._records.write(event.SerializeToString())

    def write(self, framed: bytes) -> None:  # the RecordWriter's file
        self._pending += framed
        if len(self._pending) >= self.CHUNK_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self._append(self._pending)
            self._pending.clear()

    def close(self) -> None:
        self.flush()

    def _append(self, data: bytes | bytearray, mode: str = "ab") -> None:
        try:
            with open(self.path, mode) as fh:
                fh.write(data)
        except OSError as exc:
            raise ExportError(f"cannot write {self.path}: {exc.strerror or exc}; choose a writable --tensorboard DIR") from None


def export_tensorboard(log_path: str, out_dir: str, progress: Progress | None = None, ranks: Collection[int] | None = None) -> dict:
    """Write ``log_path``'s per-rank scalars under ``out_dir`` (``progress`` is told how far
    the log's reading is), of ``ranks`` only if given; returns what was written:
    ``{"ranks": {rank: steps}, "dirs": {rank: path}, "points": n, "skipped_lines": n,
    "left_out": ranks with steps that ``ranks`` left out}``, and
    ``"runs"`` (their ids) when the steps are of more than one run (a log appended to by hand)."""
    if not os.path.isfile(log_path):
        raise ExportError(f"{log_path}: no such log file")
    existing = glob.glob(os.path.join(out_dir, "rank*", "events.out.tfevents.*"))
    if existing:
        raise ExportError(f"{out_dir} already holds TensorBoard event files ({existing[0]}); choose an empty --tensorboard DIR")
    RecordWriter, Event, Summary, SessionLog = _writer_classes()
    writers: dict[int, _EventFile] = {}
    steps: dict[int, int] = {}
    last: dict[int, int] = {}
    sent: dict[int, int] = {}
    """A rank's highest seq since its hello (seq counts up in a process; a restart's begins again)."""
    points = 0
    others: set[int] = set()
    """Ranks with steps that ``ranks`` leaves out."""
    runs: set[str] = set()
    stats = LogReadStats()
    try:
        for msg in read_log(log_path, stats, progress):
            if isinstance(msg, schema.Hello):
                sent.pop(msg.rank, None)
            if not isinstance(msg, schema.Step) or msg.rank < 0:
                continue
            if ranks is not None and msg.rank not in ranks:
                others.add(msg.rank)
                continue
            if not 0 <= msg.step < 1 << 63 or not math.isfinite(msg.t):
                stats.skipped["out_of_range"] += 1  # TensorBoard's steps are int64 (a hostile or broken line)
                continue
            w = writers.get(msg.rank)
            if w is None:
                path = os.path.join(out_dir, f"rank{msg.rank}")
                try:
                    os.makedirs(path, exist_ok=True)
                except OSError as exc:
                    raise ExportError(f"cannot write {path}: {exc.strerror or exc}; choose a writable --tensorboard DIR") from None
                w = writers[msg.rank] = _EventFile(path, RecordWriter, Event)
            # A step sent before the one logged just before it (steps a rank's heartbeat thread
            # sends for a loop that paused go on a socket of their own, and the hub may take the
            # loop's next ones first) is late, not run again: a restart's mark there would have
            # TensorBoard drop the steps after it.
            if msg.seq >= sent.get(msg.rank, -1):
                if msg.step <= last.get(msg.rank, -1):
                    # The rank runs these steps again (a torchrun restart, a resume): TensorBoard
                    # drops its points from this step on, and draws the curve as it went on,
                    # rather than jumping back.
                    w.add(Event(wall_time=msg.t, step=msg.step, session_log=SessionLog(status=SessionLog.START)))
                last[msg.rank] = msg.step
                sent[msg.rank] = msg.seq
            values = [Summary.Value(tag=tag, simple_value=v) for tag, v in step_scalars(msg).items()]
            w.add(Event(wall_time=msg.t, step=msg.step, summary=Summary(value=values)))
            steps[msg.rank] = steps.get(msg.rank, 0) + 1
            points += len(values)
            runs.add(msg.run)
    except OSError as exc:
        raise ExportError(f"{log_path}: cannot read it: {exc.strerror or exc}") from None
    finally:
        for w in writers.values():
            w.close()
    if not stats.records:
        raise ExportError(no_records(log_path, stats))
    return {
        "ranks": dict(sorted(steps.items())),
        "dirs": {r: os.path.join(out_dir, f"rank{r}") for r in sorted(writers)},
        "points": points,
        "skipped_lines": stats.skipped_total,
        "left_out": len(others),
        **({"runs": sorted(runs)} if len(runs) > 1 else {}),
    }


__all__ = ["ExportError", "export_tensorboard", "step_scalars"]
