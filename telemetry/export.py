"""``pardash export LOG --tensorboard DIR``: a recorded log as TensorBoard scalars and text.

One TensorBoard run per rank (``DIR/rank0``, ``DIR/rank1``, ...), so TensorBoard's run
selector overlays the ranks. Every step record becomes one point per scalar, at the step's
number and wall clock:

- ``loss``, ``lr``, ``epoch``, ``throughput/samples_per_s`` (the rank's samples / its step time);
  ``loss`` is NaN or an infinity at the steps it was not finite (its reporter sends none then,
  JSON having no NaN: its warning says what it turned to, and at which step it is finite again);
- ``time/step_s`` and the phases ``time/data_s`` ... ``time/self_s`` (seconds; ``time/loader_s`` the
  part of the data time in a DataLoader, where the zero-code hooks timed one), and the
  script's own phases (``pt.phase("augment")``: ``Step.phases``) beside them as
  ``time/<name>_s`` (``time/augment_s``; one named as a phase above, ``step`` or ``self``, as
  ``time/phase/<name>_s``);
- ``memory/<field>`` for every figure of the step's ``mem`` (bytes: params_bytes,
  held_bytes, cuda_peak_bytes, rss_bytes, ...);
- ``custom/<name>`` for metrics a script logged with ``pardash.telemetry.log``.

The rank's system samples (about one a second) become ``system/<field>``: cpu_pct,
host_cpu_pct, rss_bytes, children, children_cpu_pct, children_uss_bytes, gpu_util_pct, gpu_mem_used_bytes, gpu_temp_c, gpu_power_w,
gpu_sm_clock_mhz (those the rank measured; not the device's total memory, no line over time).
A sample is put at the last step the rank had finished when it was taken, by the wall clock
``t`` of the sample and of the steps (a system sample has no ``mono``): a rank sends its steps
in bursts and its samples from another thread, so the hub logs a sample before steps finished
before it, or after ones finished after it. A sample waits for the rank's first step finished
after it to be logged (the rank's last one, at its restart or the log's end); samples before
the rank's first step (or its first after a restart) go at the step before that one. The
samples at one step are averaged into its point, as TensorBoard keeps one point a step of a
series. (Steps logged out of their order, one sent from the heartbeat thread after a later one,
can put a sample a step early: it is placed when the first step finished after it comes.)

Its events: the durations of ``eval/duration_s`` (an evaluation), ``checkpoint/save_s``,
``checkpoint/load_s`` (a resume), ``events/<name>_s`` (another event with a duration), at the
event's step; and every event as text (TensorBoard's Text dashboard) under ``events/<name>``
(events/checkpoint, events/error with its traceback, events/exit with its code, ...), the hub's
verdicts on the rank (straggler, stalled, ...) under ``verdicts``, at their step (an event
without one, at the rank's last step); the texts of a series at one step are one text.

Steps a rank runs again (after a torchrun restart or a resume) start a new session in its
event file at that step, so TensorBoard keeps the later run of them, not both; the first run's
steps the re-run never reached (it failed again earlier, or ran fewer steps) are written again
after it, as TensorBoard drops every point from the session's step on. The texts are
written after the points, each series in step order, so TensorBoard keeps them all: the error
that caused a restart too.

The records are TensorBoard's own scalar and text ``Summary`` protos, framed byte for byte as
``tensorboard.summary.writer`` (the writer ``torch.utils.tensorboard`` writes through) frames
them, their checksums by google-crc32c (see eventfile.RecordFraming): no torch, no TensorFlow.
TensorBoard stores scalars as float32, so values come back to about 7 significant digits.
tensorboard and google-crc32c are imported when an export runs (the ``export``
extra), never when this module loads. The hub's own records (rank -1: its start, its
restarts) are no rank's, and left out.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import itertools
import math
import os
import re
import struct
import sys
from array import array
from bisect import bisect_right
from types import SimpleNamespace
from typing import Collection

from . import registry, schema
from .eventfile import EventFile, EventFileError, RecordFraming
from .failures import is_stop, signal_name, stop_text
from .logreader import LogReadStats, Progress, no_records, read_log
from .state import RunState, mem_held_bytes

TIMES = ("step_s", "data_s", "loader_s", "forward_s", "backward_s", "optimizer_s", "comm_s", "self_s")
"""A step's times the export writes (``time/<name>``): ``loader_s`` is the part of ``data_s`` in a
DataLoader (the zero-code hooks'), where one gave the step its batch."""
MEM_FIELDS = (
    "params_bytes", "grads_bytes", "optim_bytes", "buckets_bytes",
    "params_full_bytes", "grads_full_bytes", "optim_full_bytes",
    "cuda_allocated_bytes", "cuda_reserved_bytes", "cuda_peak_bytes", "nvml_used_bytes", "rss_bytes",
)  # fmt: skip
SYSTEM_FIELDS = tuple(
    name for name in schema.System.__struct_fields__ if name not in schema.Base.__struct_fields__ and name != "gpu_mem_total_bytes"
)
"""A system sample's figures the export writes (``system/<name>``): every one the schema has but
the device's total memory, which does not change."""
DURATION_TAGS = {"eval": "eval/duration_s", "checkpoint": "checkpoint/save_s", "resume": "checkpoint/load_s"}
"""The scalar of an event's ``duration_s``; another event's is ``events/<name>_s``."""
INSTALL_HINT = "pardash export --tensorboard needs the tensorboard package: pip install 'pardash[export]'"
WRITER = "pardash export"
"""The writer each event file of an export names in its first record (TensorBoard's
``source_metadata``, as its own writer names itself there): ``--force`` replaces the files that
say it, and only those (their names are TensorBoard's own, as a training script's writer names
its files)."""


class ExportError(Exception):
    """An export that cannot run; the message is one line that says what to do."""


def step_scalars(s: schema.Step) -> dict[str, float]:
    """The scalars one step record gives (tag -> value), the ones the export writes."""
    out: dict[str, float] = {}
    if s.loss is not None:
        out["loss"] = s.loss
    if s.lr is not None:
        out["lr"] = s.lr
    out["epoch"] = s.epoch
    if s.step_s > 0 and s.samples:
        out["throughput/samples_per_s"] = s.samples / s.step_s
    for name in TIMES:
        v = getattr(s, name)
        if v is not None:
            out[f"time/{name}"] = v
    for name, v in s.phases.items():
        out[f"time/phase/{name}_s" if f"{name}_s" in TIMES else f"time/{name}_s"] = v
    if s.mem is not None:
        for name in MEM_FIELDS:
            v = getattr(s.mem, name)
            if v is not None and (v or name != "buckets_bytes"):  # buckets: DDP's only (no line of zeros)
                out[f"memory/{name}"] = v
        out["memory/held_bytes"] = mem_held_bytes(s.mem)
    for name, v in s.custom.items():
        out[f"custom/{name}"] = v
    return out


def event_text(ev: schema.Event) -> str:
    """What TensorBoard's Text dashboard shows of an event (Markdown): its message (an exit
    without one: its code; else its name), its exit code and duration in brackets, and its
    traceback as a block of code: 'ck/step-00000050 (0.129 s)'; a rank's stop as
    failures.stop_text says it: 'stopped by torchrun (SIGTERM)'."""
    notes = []
    message = schema.plain_text(ev.message, lines=True).strip()
    coded = ev.code is not None and ev.name == "exit"  # (a restart's code is its count)
    if is_stop(ev):
        # In the words every other place says a stop in ("stopped by you (SIGTERM)"): said as a
        # failure's exit code, it read unlike the rank's status, "stopped".
        message, coded = stop_text(ev.rank, ev.code, message), False
    elif coded:
        sig = signal_name(ev.code)
        # (not again for a message that says it: "killed by signal 9 (SIGKILL)")
        if not message or not (re.search(rf"exit code {ev.code}\b", message) or (sig and re.search(rf"\b{sig}\b", message))):
            notes.append(f"exit code {ev.code}" + (f", {sig}" if sig else ""))
        else:
            coded = False
    if ev.duration_s is not None:
        notes.append(f"{ev.duration_s:.3g} s" if abs(ev.duration_s) < 1000 else f"{ev.duration_s:.0f} s")
    text = message or (notes.pop(0) if coded else ev.name)
    if notes:
        text += f" ({'; '.join(notes)})"
    if ev.traceback:
        text += "\n\n```\n" + schema.plain_text(ev.traceback, lines=True).strip("\n") + "\n```"
    return text


def verdict_text(v: schema.Verdict) -> str:
    """What the Text dashboard shows of a verdict of the hub: its sentence ("rank 2 is a
    straggler (data loading): the others wait 30 ms a step for it")."""
    return schema.plain_text(v.message).strip() or (f"{v.verdict} ({v.cause})" if v.cause else v.verdict)


def _tensorboard() -> SimpleNamespace:
    """What an export writes with: tensorboard's protos, and the record framing."""
    try:
        import google_crc32c
        from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog, SourceMetadata
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.text.metadata import create_summary_metadata
    except ImportError:
        raise ExportError(INSTALL_HINT) from None
    return SimpleNamespace(
        framing=RecordFraming(google_crc32c.value), Event=Event, Summary=Summary, SessionLog=SessionLog,
        SourceMetadata=SourceMetadata,
        TensorProto=tensor_pb2.TensorProto, TensorShape=tensor_shape_pb2.TensorShapeProto, DT_STRING=types_pb2.DT_STRING,
        text_metadata=create_summary_metadata(display_name="", description=""),
    )  # fmt: skip


class _Samples:
    """A rank's system samples at one step (``None``: the step is not known yet), written as
    one point a figure, their mean."""

    __slots__ = ("step", "t", "sums", "counts")

    def __init__(self, step: int | None) -> None:
        self.step = step
        self.t = 0.0
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, sample: schema.System) -> None:
        self.t = sample.t
        for name in SYSTEM_FIELDS:
            v = getattr(sample, name)
            if v is not None:
                self.sums[name] = self.sums.get(name, 0.0) + v
                self.counts[name] = self.counts.get(name, 0) + 1

    def means(self) -> dict[str, float]:
        return {f"system/{name}": total / self.counts[name] for name, total in self.sums.items()}


class _Finished:
    """When a process's steps finished (their ``t``), in time order, to find the step a system
    sample goes at. Only steps a sample may still need are kept: from the one before the
    latest sample placed (the samples of a rank come in time order), at most ``KEEP`` to
    ``2 * KEEP`` of them (a rank without samples)."""

    KEEP = 1024
    __slots__ = ("ts", "steps", "whole")

    def __init__(self) -> None:
        self.ts = array("d")
        self.steps = array("q")
        self.whole = True
        """Its first step is still held: a sample before every step held precedes them all."""

    def add(self, t: float, step: int) -> None:
        if not self.ts or t >= self.ts[-1]:
            self.ts.append(t)
            self.steps.append(step)
        else:  # a step sent late (the heartbeat thread's): in its place by time
            i = bisect_right(self.ts, t)
            self.ts.insert(i, t)
            self.steps.insert(i, step)
        if len(self.ts) > 2 * self.KEEP:
            self._drop(len(self.ts) - self.KEEP)

    def latest_t(self) -> float | None:
        return self.ts[-1] if self.ts else None

    def at(self, t: float) -> int | None:
        """The last step finished by ``t`` (before the first step: the one before it; None: no
        step yet). The steps before that one are let go."""
        if not self.ts:
            return None
        i = bisect_right(self.ts, t)
        if i == 0:
            return max(self.steps[0] - 1, 0) if self.whole else self.steps[0]
        self._drop(i - 1)
        return self.steps[0]

    def _drop(self, n: int) -> None:
        if n > 0:
            del self.ts[:n]
            del self.steps[:n]
            self.whole = False


class _Points:
    """Where a rank's scalar records lie in its event file (their steps, and their offsets in
    the file), to write again the first run's steps that a restart's re-run never reaches.

    TensorBoard drops every point of a file from the step a restart's mark (a SessionLog
    START) names: the way to have it keep the later run of the steps run again. The first
    run's steps after the re-run's last went with them (a job run again for 200 steps of a
    first run's 300 showed steps 1-200 where the export said 300). The records the mark takes
    are held here as its tail; a step the rank goes on to replaces the tail's records at it, and
    the tail's records before a step it jumps to (a resume further on), or left when the rank
    restarts again or the log ends, are written again after the re-run, so TensorBoard keeps
    them."""

    FRAMING_BYTES = 16
    """A record's framing around it: its length (8 bytes), the length's CRC and the record's (4 each)."""
    __slots__ = ("end", "steps", "offsets", "tail_steps", "tail_offsets", "tail_next")

    def __init__(self, end: int) -> None:
        self.end = end
        """The file's length with the records written so far."""
        self.steps = array("q")
        self.offsets = array("q")
        """The records TensorBoard keeps, in the file's order."""
        self.tail_steps = array("q")
        self.tail_offsets = array("q")
        self.tail_next = 0
        """The records the latest restart's mark took, by step (from ``tail_next`` on: the ones
        still to be replaced or written again)."""

    def add(self, step: int, size: int) -> None:
        self.steps.append(step)
        self.offsets.append(self.end)
        self.end += size + self.FRAMING_BYTES

    def skip(self, size: int) -> None:
        """A record that is no point (a restart's mark): the offsets after it count it. (Left
        out, every offset after a second restart was off by it, and reading one back took a
        length out of the middle of a record: a MemoryError.)"""
        self.end += size + self.FRAMING_BYTES

    def restart(self, step: int) -> None:
        """A restart's mark at ``step``: the records from it on join the tail (with the tail
        left of the restart before: those are after the steps it reached)."""
        i = self.tail_next
        taken = [(s, o) for s, o in zip(self.steps, self.offsets) if s >= step]
        taken += zip(self.tail_steps[i:], self.tail_offsets[i:])
        taken.sort(key=lambda e: e[0])  # stable: the records at a step in the file's order
        kept = [(s, o) for s, o in zip(self.steps, self.offsets) if s < step]
        self.steps, self.offsets = array("q", (s for s, _ in kept)), array("q", (o for _, o in kept))
        self.tail_steps, self.tail_offsets = array("q", (s for s, _ in taken)), array("q", (o for _, o in taken))
        self.tail_next = 0

    def passed(self, last: int, step: int) -> list[int]:
        """The rank goes on from step ``last`` to ``step``: the tail's records up to ``step`` are
        done with (those at it, replaced); the offsets of those between (steps it jumped over:
        a resume further on, steps the log lacks), to write again."""
        steps, i, again = self.tail_steps, self.tail_next, []
        while i < len(steps) and steps[i] <= step:
            if last < steps[i] < step:
                again.append(self.tail_offsets[i])
            i += 1
        self.tail_next = i
        return again

    def rest(self) -> list[int]:
        """The tail's records no step replaced (the re-run ended before them), done with."""
        again = list(self.tail_offsets[self.tail_next :])
        self.tail_next = len(self.tail_steps)
        return again


def _tag_part(name: str) -> str:
    """An event's name as part of a tag, without what a terminal would act on (a tag is shown
    in TensorBoard and named in a shell)."""
    return schema.plain_text(name) or "event"


class _Export:
    """One export under way: the ranks' event files, and what it holds of each rank while the
    log is read (its last step, its system samples at that step, its texts)."""

    def __init__(self, out_dir: str, tb: SimpleNamespace, ranks: Collection[int] | None, stats: LogReadStats) -> None:
        self.out_dir = out_dir
        self.tb = tb
        self.ranks = ranks
        self.stats = stats
        self.writers: dict[int, EventFile] = {}
        self.made = [] if os.path.isdir(out_dir) else [out_dir]
        """Folders this export made (a failed one takes them back)."""
        self.steps: dict[int, int] = {}
        """Steps written, by rank: its step records less those it ran again."""
        self.top: dict[int, int] = {}
        """A rank's highest step so far."""
        self.rerun: dict[int, int] = {}
        """Steps a rank ran again (a torchrun restart, a resume from a checkpoint: the ones
        between the step it went on from and its highest before), by rank."""
        self.last: dict[int, int] = {}
        """A rank's latest step (a late one aside): one at or below it again is a restart."""
        self.sent: dict[int, int] = {}
        """A rank's highest seq since its hello (seq counts up in a process; a restart's begins again)."""
        self.at: dict[int, int] = {}
        """The step a rank's events without one go to: its latest, none from its hello to its next step."""
        self.finished: dict[int, _Finished] = {}
        """When the steps of a rank's process finished (since its hello), for its samples."""
        self.waiting: dict[int, list[schema.System]] = {}
        """A rank's system samples that no step finished after them has followed in the log yet."""
        self.process: dict[int, tuple[int, int]] = {}
        """A rank's process (pid, restart count) by its latest hello: another hello of the same
        process is no restart."""
        self.samples: dict[int, _Samples] = {}
        """A rank's samples placed at one step, written as one point once the next step's come."""
        self.unplaced: dict[int, list[schema.Event]] = {}
        """A rank's events without a step since its hello, before its next step: they go at the
        step before that one, as its samples do (at the last step of the process before, a
        restart's mark after them had TensorBoard drop their durations)."""
        self.noted: dict[int, schema.Event] = {}
        """A launcher's note of a rank's exit (torchrun saw its process end: no step), held: the
        rank's own exit after it is the same exit, with its step, and the note goes; with none
        (killed outright), the note goes at the rank's last step once its process is done with.
        Placed as it came, it went at the last step logged then, before the rank's last steps,
        its error and its own exit came (an exit at step 27 above an error at 29)."""
        self.texts: dict[int, list[tuple[str, int, float, str]]] = {}
        """A rank's texts (tag, step, wall time, text), written at the end (see finish)."""
        self.points = 0
        self.texts_written = 0
        self.others: set[int] = set()
        """Ranks with steps that ``ranks`` leaves out."""
        self.in_log: set[int] = set()
        """Every rank the log has a record of (its own, or the hub's about it)."""
        self.runs: set[str] = set()
        self.points_at: dict[int, _Points] = {}
        """Where a rank's scalar records lie in its file, to write again the steps a re-run never reached."""
        self.seqs = RunState(track_seq=True)
        """The ranks' message counts (seq), as the report keeps them: the messages lost (a hub
        killed and restarted, a reporter's full queue) leave gaps in the curves, said at the end."""
        self.closed = False
        """The hub's "hub stopped" came after the ranks' last record (as the report reads it): the
        log has its end."""
        self.end_note: schema.Event | None = None
        """The hub's last note after the ranks' last record (its disk full as it stopped?)."""

    def add(self, msg: schema.Message) -> None:
        rank = msg.rank
        if _log_end(self, msg):
            return  # the hub's own records: no rank's run
        self.seqs.apply(msg, 0.0)
        self.in_log.add(rank)
        if self.ranks is not None and rank not in self.ranks:
            if isinstance(msg, schema.Step):
                self.others.add(rank)
            return
        if isinstance(msg, schema.Step):
            self._step(msg)
        elif isinstance(msg, schema.System):
            self._system(msg)
        elif isinstance(msg, schema.Event):
            self._event(msg)
        elif isinstance(msg, schema.Verdict):
            self._verdict(msg)
        elif isinstance(msg, schema.Hello):
            process = (msg.pid, msg.restart)
            if self.process.get(rank) == process:
                return  # the same process again (autorun says hello at its process group, then with its model)
            self.process[rank] = process
            self._place_noted(rank)  # (the process before's)
            self.sent.pop(rank, None)
            self._end_samples(rank)  # the samples of the process before: at the step they were taken
            self.at.pop(rank, None)
            self.finished.pop(rank, None)

    def _writer(self, rank: int) -> EventFile:
        w = self.writers.get(rank)
        if w is None:
            path = os.path.join(self.out_dir, f"rank{rank}")
            try:
                if not os.path.isdir(path):
                    os.makedirs(path)
                    self.made.append(path)
            except OSError as exc:
                why = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror or exc
                raise ExportError(f"cannot write {path}: {why}; choose a writable --tensorboard DIR") from None
            w = self.writers[rank] = EventFile(path, self.tb.framing, self._first_event)
            w.flush()  # (its first record, the file's version: where the rank's records begin)
            self.points_at[rank] = _Points(os.path.getsize(w.path))
        return w

    def _first_event(self, **fields):
        """An event file's first record, naming the export as its writer (see WRITER)."""
        return self.tb.Event(source_metadata=self.tb.SourceMetadata(writer=WRITER), **fields)

    def _add_point(self, rank: int, event) -> None:
        """Write a scalar record of ``rank``, kept in mind where it lies in the file."""
        w = self._writer(rank)
        self.points_at[rank].add(event.step, event.ByteSize())
        w.add(event)

    def _write_again(self, rank: int, offsets: list[int]) -> None:
        """Write the records at ``offsets`` of the rank's file again, at its end."""
        if not offsets:
            return
        w = self.writers[rank]
        w.flush()
        try:
            with open(w.path, "rb") as fh:
                length = os.fstat(fh.fileno()).st_size
                for offset in offsets:
                    fh.seek(offset)
                    (size,) = struct.unpack("<Q", fh.read(8))
                    if offset + size + _Points.FRAMING_BYTES > length:
                        raise ValueError(f"no record of {size:,} bytes at offset {offset:,}")
                    fh.seek(offset + 12)  # (past the length's CRC)
                    self._add_point(rank, self.tb.Event.FromString(fh.read(size)))
        except Exception as exc:  # (a file changed under it, or a record misplaced: said, not a traceback)
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise EventFileError(f"cannot read back {w.path}: {why}") from None

    def discard(self) -> None:
        """Take back what a failed export wrote: its event files and the folders it made (a half
        export blocked the next try: "already holds TensorBoard event files")."""
        for w in self.writers.values():
            try:
                os.remove(w.path)
            except OSError:
                pass
        for folder in reversed(self.made):
            try:
                os.rmdir(folder)  # only if empty
            except OSError:
                pass

    def _in_range(self, step: int, t: float) -> bool:
        if 0 <= step < 1 << 63 and math.isfinite(t):
            return True
        self.stats.skipped["out_of_range"] += 1  # TensorBoard's steps are int64 (a hostile or broken line)
        return False

    def _step(self, msg: schema.Step) -> None:
        if not self._in_range(msg.step, msg.t):
            return
        rank, tb = msg.rank, self.tb
        w = self._writer(rank)
        # A step sent before the one logged just before it (steps a rank's heartbeat thread
        # sends for a loop that paused go on a socket of their own, and the hub may take the
        # loop's next ones first) is late, not run again: a restart's mark there would have
        # TensorBoard drop the steps after it.
        again = msg.seq >= self.sent.get(rank, -1) and msg.step <= self.top.get(rank, -1)
        finished = self.finished.get(rank)
        if finished is None:
            finished = self.finished[rank] = _Finished()
        finished.add(msg.t, msg.step)
        held = self.samples.get(rank)
        if held is not None and held.step is None:  # samples from before the process's first step
            held.step = finished.at(held.t)
        self._place_waiting(rank, msg.t)
        if msg.seq >= self.sent.get(rank, -1):
            for event in self.unplaced.pop(rank, ()):
                self._place_event(event, max(msg.step - 1, 0))
            last = self.last.get(rank, -1)
            if msg.step <= last:
                # The rank runs these steps again (a torchrun restart, a resume): TensorBoard
                # drops its points from this step on, and draws the curve as it went on,
                # rather than jumping back. The samples of the run before go before the mark,
                # with its steps; the points it drops beyond the steps run again are written
                # again once the re-run is past them (see _Points).
                self._write_samples(rank)
                self.points_at[rank].restart(msg.step)
                mark = tb.Event(wall_time=msg.t, step=msg.step, session_log=tb.SessionLog(status=tb.SessionLog.START))
                self.points_at[rank].skip(mark.ByteSize())
                w.add(mark)
            self._write_again(rank, self.points_at[rank].passed(last, msg.step))
            self.last[rank] = self.at[rank] = msg.step
            self.sent[rank] = msg.seq
        scalars = step_scalars(msg)
        bad = self.seqs.ranks[rank].loss_not_finite if msg.loss is None else None
        if bad is not None and msg.step >= bad[1]:
            # Not finite: TensorBoard keeps NaN and infinite points (the curve just stopped at
            # the step before, as if the rank had stopped logging, review 306).
            scalars = {"loss": float(bad[0]), **scalars}
        values = [tb.Summary.Value(tag=tag, simple_value=v) for tag, v in scalars.items()]
        self._add_point(rank, tb.Event(wall_time=msg.t, step=msg.step, summary=tb.Summary(value=values)))
        if again:
            self.rerun[rank] = self.rerun.get(rank, 0) + 1
        else:
            self.steps[rank] = self.steps.get(rank, 0) + 1
            self.top[rank] = max(msg.step, self.top.get(rank, -1))
        self.points += len(values)
        self.runs.add(msg.run)

    WAITING_MAX = 64
    """System samples of a rank held for a step finished after them (about a minute of them: a
    rank's steps reach the hub within a fraction of a second); one more places the oldest at the
    rank's latest step, as a step finished after it would (one never comes from a stalled rank)."""

    def _system(self, msg: schema.System) -> None:
        if not math.isfinite(msg.t):
            self.stats.skipped["out_of_range"] += 1
            return
        rank = msg.rank
        finished = self.finished.get(rank)
        latest_t = finished.latest_t() if finished is not None else None
        if latest_t is not None and msg.t < latest_t:  # a step finished after it came first
            self._place_sample(msg, finished.at(msg.t))
            return
        waiting = self.waiting.setdefault(rank, [])
        waiting.append(msg)
        if len(waiting) > self.WAITING_MAX:
            oldest = waiting.pop(0)
            self._place_sample(oldest, finished.at(oldest.t) if finished is not None else None)

    def _place_waiting(self, rank: int, t: float) -> None:
        """Place the rank's waiting samples taken before ``t``, when its step finished then came."""
        waiting = self.waiting.get(rank)
        if not waiting or all(s.t >= t for s in waiting):
            return
        finished = self.finished[rank]
        still = [s for s in waiting if s.t >= t]
        if still:
            self.waiting[rank] = still
        else:
            del self.waiting[rank]
        for sample in waiting:
            if sample.t < t:
                self._place_sample(sample, finished.at(sample.t))

    def _place_sample(self, msg: schema.System, step: int | None) -> None:
        """Add a sample to the rank's point at ``step`` (None: before its process's first step,
        which decides it), writing the point of the step before."""
        rank = msg.rank
        samples = self.samples.get(rank)
        if samples is not None and samples.step != step:
            self._write_samples(rank)
            samples = None
        if samples is None:
            samples = self.samples[rank] = _Samples(step)
        samples.add(msg)

    def _end_samples(self, rank: int) -> None:
        """The rank's process is done (a restart's hello, the log's end): its waiting samples go
        at its last step, and its samples' points are written."""
        finished = self.finished.get(rank)
        for sample in self.waiting.pop(rank, ()):
            self._place_sample(sample, finished.at(sample.t) if finished is not None else None)
        self._write_samples(rank)

    def _write_samples(self, rank: int) -> None:
        """The rank's samples at one step as a point a figure (at its last step where their
        process had none)."""
        samples = self.samples.pop(rank, None)
        if samples is None:
            return
        step = samples.step if samples.step is not None else self.last.get(rank, 0)
        means = samples.means()
        if means:
            tb = self.tb
            values = [tb.Summary.Value(tag=tag, simple_value=v) for tag, v in means.items()]
            self._add_point(rank, tb.Event(wall_time=samples.t, step=step, summary=tb.Summary(value=values)))
            self.points += len(values)

    def _event(self, msg: schema.Event) -> None:
        if msg.name == "exit":
            if msg.seq < 0 and msg.step is None:
                self._place_noted(msg.rank)  # (an earlier one's: another process)
                self.noted[msg.rank] = msg
                return
            self.noted.pop(msg.rank, None)  # the rank's own word of the same exit
        if msg.step is None and self.at.get(msg.rank) is None:
            self.unplaced.setdefault(msg.rank, []).append(msg)  # placed at its next step
            return
        self._place_event(msg, msg.step if msg.step is not None else self.at[msg.rank])

    def _place_noted(self, rank: int) -> None:
        """The launcher's held note of ``rank``'s exit, at its last step (its process is done)."""
        noted = self.noted.pop(rank, None)
        if noted is not None:
            self._place_event(noted, self.last.get(rank, 0))

    def _place_event(self, msg: schema.Event, step: int) -> None:
        if not self._in_range(step, msg.t):
            return
        name = _tag_part(msg.name)
        if msg.duration_s is not None and math.isfinite(msg.duration_s):
            tb = self.tb
            value = tb.Summary.Value(tag=DURATION_TAGS.get(name, f"events/{name}_s"), simple_value=msg.duration_s)
            self._add_point(msg.rank, tb.Event(wall_time=msg.t, step=step, summary=tb.Summary(value=[value])))
            self.points += 1
        self._text(msg.rank, f"events/{name}", step, msg.t, event_text(msg))

    def _verdict(self, msg: schema.Verdict) -> None:
        step = msg.step if msg.step is not None else self.last.get(msg.rank, 0)
        if self._in_range(step, msg.t):
            self._text(msg.rank, "verdicts", step, msg.t, verdict_text(msg))

    def _text(self, rank: int, tag: str, step: int, t: float, text: str) -> None:
        self._writer(rank)
        self.texts.setdefault(rank, []).append((tag, step, t, text))

    def finish(self) -> None:
        """The samples still held, then every rank's texts, each series in step order and
        its texts at one step as one. TensorBoard's data server keeps one record a step of a
        series and drops its records from a step written again (a warning after a restart
        took the first run's later ones with it), and its reader without the server drops
        every record from a step a restart marks (the crash's error and exit): written
        last, in order, the texts all stay."""
        for rank in sorted(set(self.samples) | set(self.waiting)):
            self._end_samples(rank)
        for rank in list(self.noted):
            self._place_noted(rank)
        for rank, events in self.unplaced.items():  # no step came after them
            for event in events:
                self._place_event(event, self.last.get(rank, 0))
        self.unplaced = {}
        for rank, points in self.points_at.items():  # the first run's steps no re-run reached
            self._write_again(rank, points.rest())
        tb = self.tb
        for rank, entries in self.texts.items():
            w = self.writers[rank]
            entries.sort(key=lambda e: (e[0], e[1]))  # stable: the texts at a step in the log's order
            for (tag, step), same in itertools.groupby(entries, key=lambda e: (e[0], e[1])):
                same = list(same)
                text = "\n\n".join(e[3] for e in same).encode()
                tensor = tb.TensorProto(dtype=tb.DT_STRING, string_val=[text], tensor_shape=tb.TensorShape())
                value = tb.Summary.Value(tag=tag, metadata=tb.text_metadata, tensor=tensor)
                w.add(tb.Event(wall_time=same[0][2], step=step, summary=tb.Summary(value=[value])))
                self.texts_written += 1

    def close(self) -> None:
        for w in self.writers.values():
            w.close()


def _written_by_export(path: str, tb: SimpleNamespace) -> bool:
    """Whether the event file ``path`` is one an export wrote: its first record (the file's
    version) names WRITER. A file it cannot read as such is not."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
            if len(head) < 12:
                return False
            (size,) = struct.unpack("<Q", head[:8])
            if size > 1 << 16:  # (the version record is tens of bytes)
                return False
            first = tb.Event.FromString(fh.read(size))
    except Exception:  # (unreadable, or not an event: not the export's)
        return False
    return first.source_metadata.writer == WRITER


def _earlier_export(out_dir: str, tb: SimpleNamespace, force: bool) -> list[str]:
    """The event files already in ``out_dir``'s rank folders, which ``force`` lets the export
    replace; ExportError where there are some and no ``force``, or ``force`` and one is no
    export's (a training script's own writer, say: never removed)."""
    existing = sorted(glob.glob(os.path.join(out_dir, "rank*", "events.out.tfevents.*")))
    if existing and not force:
        raise ExportError(
            f"{out_dir} already holds TensorBoard event files ({existing[0]}); choose an empty --tensorboard DIR, "
            "or pass --force to replace an earlier export's"
        )
    for path in existing:
        if not _written_by_export(path, tb):
            raise ExportError(
                f"--force replaces only the event files pardash export wrote, and {path} is not one (another writer's, or "
                "an export's of a pardash before it marked them): move it away, or choose another --tensorboard DIR"
            )
    return existing


def _remove_earlier(out_dir: str, paths: list[str], kept: set[str]) -> None:
    """Remove an earlier export's event files (a successful ``--force`` export's last act, so a
    failed one leaves them), then their rank folders left empty (the ranks this one did not write)."""
    for path in paths:
        if path not in kept:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise ExportError(f"cannot remove the earlier export's {path}: {exc.strerror or exc}") from None
    for folder in sorted({os.path.dirname(p) for p in paths}):
        try:
            os.rmdir(folder)  # only if empty
        except OSError:
            pass


def export_tensorboard(log_path: str, out_dir: str, progress: Progress | None = None, ranks: Collection[int] | None = None,
                       force: bool = False) -> dict:
    """Write ``log_path``'s per-rank scalars and texts under ``out_dir`` (``progress`` is told
    how far the log's reading is), of ``ranks`` only if given; returns what was written:
    ``{"ranks": {rank: steps}, "rerun": {rank: steps run again (not in ``ranks``)}, "dirs": {rank: path}, "points": scalars, "texts": n,
    "skipped_lines": n, "skipped_by_reason": {reason: n}, "left_out": ranks with steps that ``ranks`` left out, "in_log": every
    rank the log has a record of, "live_run": the id of the live run still recording the log (its
    export holds the steps so far) or None, "lost": {rank: messages it sent that the log lacks (its
    curves have gaps there), where any}``, and
    ``"runs"`` (their ids) when the steps are of more than one run (a log appended to by hand),
    ``"gzip_damage"``: as the report's (:func:`skipped_text` says these as the report does),
    ``"log_ends_early"``: as the report's, where the log has no end (its run goes on, or its hub
    stopped recording before the run ended; :func:`end_warning` says so), and ``"replaced"``:
    the earlier export's event files removed (``force``).

    ``force``: ``out_dir``'s rank folders may hold an earlier export's event files (refused
    without it); they are removed once this export is written, and no other file is."""
    if not os.path.isfile(log_path):
        raise ExportError(f"{log_path}: no such log file")
    tb = _tensorboard()
    earlier = _earlier_export(out_dir, tb, force)
    stats = LogReadStats()
    export = _Export(out_dir, tb, ranks, stats)
    try:
        try:
            for msg in read_log(log_path, stats, progress):
                export.add(msg)
            export.finish()
        finally:
            export.close()
        if not stats.records:
            raise ExportError(no_records(log_path, stats))
    except BaseException as exc:  # a failure or a Ctrl-C: nothing half written is left
        export.discard()
        if isinstance(exc, EventFileError):
            raise ExportError(f"{exc}; choose a writable --tensorboard DIR") from None
        if isinstance(exc, OSError):
            raise ExportError(f"{log_path}: cannot read it: {exc.strerror or exc}") from None
        raise
    _remove_earlier(out_dir, earlier, {w.path for w in export.writers.values()})
    going = registry.recording(log_path, export.runs)
    return {
        "ranks": dict(sorted(export.steps.items())),
        "dirs": {r: os.path.join(out_dir, f"rank{r}") for r in sorted(export.writers)},
        "rerun": dict(sorted(export.rerun.items())),
        "points": export.points,
        "texts": export.texts_written,
        "skipped_lines": stats.skipped_total,
        "skipped_by_reason": dict(sorted(stats.skipped.items())),
        # As the report has it: a compressed log whose stream broke off (the break counted in
        # the skipped lines, as a truncated or corrupt one), the rest of the run not in the export.
        "gzip_damage": {"how": stats.gzip_damage, "after_line": stats.lines} if stats.gzip_damage else None,
        "left_out": len(export.others),
        "in_log": sorted(export.in_log),
        "live_run": going["run_id"] if going else None,
        "lost": {r.rank: r.seq.lost for r in sorted(export.seqs.ranks.values(), key=lambda r: r.rank)
                 if r.seq.lost and (ranks is None or r.rank in ranks)},  # fmt: skip
        **({"runs": sorted(export.runs)} if len(export.runs) > 1 else {}),
        "log_ends_early": _ends_early(log_path, export, stats),
        "replaced": len(earlier),
    }


CSV_BASE = ("run", "rank", "restart", "step", "t")
"""The columns of ``export --csv`` before the step's figures: its run id, rank, torchrun's restart
count of the rank when it took the step (a step run again after a restart is a row again: this
tells the two apart), step number and wall clock (Unix seconds)."""
_CSV_GROUPS = ("loss", "lr", "epoch", "throughput/", "time/", "memory/", "custom/")
CSV_KNOWN = ("loss", "lr", "epoch", "samples", "samples_total", "throughput/samples_per_s", *(f"time/{n}" for n in TIMES),
             *(f"memory/{n}" for n in MEM_FIELDS), "memory/held_bytes")  # fmt: skip
"""The columns of ``export --csv`` after CSV_BASE, in this order in every export, whether or not
the log has them (an empty column where it has none): two runs' tables line up column for column
(an FSDP run's had no memory/buckets_bytes, a script's time/loader_s came in the middle, review
341). ``samples`` is the rank's samples in the step, ``samples_total`` its running sum (a run of
partial batches, or of other batch sizes, compared at equal samples seen). A step's other
figures (the script's own phases, its ``custom/`` metrics) come after them, by group, each
group's in the order they first came."""


def _csv_order(name: str) -> int:
    return next((i for i, group in enumerate(_CSV_GROUPS) if name == group or (group.endswith("/") and name.startswith(group))), len(_CSV_GROUPS))


def export_csv(log_path: str, out: str, progress: Progress | None = None, ranks: Collection[int] | None = None,
               write_progress: Progress | None = None) -> dict:  # fmt: skip
    """Write ``log_path``'s step records as one CSV table, a row a rank's step (``ranks`` only
    if given): CSV_BASE, then CSV_KNOWN (every export's same columns: the step's samples and the
    figures the TensorBoard export writes of a step, by the same names: ``loss``, ``time/step_s``,
    ``memory/held_bytes``), then the step's others (``custom/<name>``); an empty cell: the
    step had none; ``nan``/``inf`` where the rank's loss was not finite. ``out`` "-": stdout.
    For pandas, R or a spreadsheet: ``pd.read_csv(FILE)``; a step a rank runs again (a restart,
    a resume) is a row again, as in the log. The log is read twice (the first time for the
    columns: a custom metric can first come at any step); the file is written under a temporary
    name and renamed once whole. Returns {"rows", "ranks": {rank: rows}, "columns", "in_log",
    "skipped_lines", "skipped_by_reason", "gzip_damage", "left_out", "runs", "live_run",
    "log_ends_early"} as export_tensorboard's where they mean the same."""
    if not os.path.isfile(log_path):
        raise ExportError(f"{log_path}: no such log file")
    stats = LogReadStats()
    columns: dict[str, None] = {}
    in_log: set[int] = set()
    others: set[int] = set()
    seqs = RunState(track_seq=True)
    seen = SimpleNamespace(in_log=in_log, closed=False, end_note=None, seqs=seqs, runs=set())
    """What _ends_early asks of an export (a log without its end is said, as the report says it)."""
    try:
        for msg in read_log(log_path, stats, progress):
            if _log_end(seen, msg):
                continue
            seqs.apply(msg, 0.0)
            if msg.run:
                seen.runs.add(msg.run)
            in_log.add(msg.rank)
            if type(msg) is schema.Step:
                if ranks is not None and msg.rank not in ranks:
                    others.add(msg.rank)
                    continue
                for name in step_scalars(msg):
                    columns.setdefault(name)
                if msg.loss is None and seqs.ranks[msg.rank].loss_not_finite is not None:
                    columns.setdefault("loss")
    except OSError as exc:
        raise ExportError(f"{log_path}: cannot read it: {exc.strerror or exc}") from None
    if not stats.records:
        raise ExportError(no_records(log_path, stats))
    names = [*CSV_KNOWN, *sorted((c for c in columns if c not in CSV_KNOWN), key=_csv_order)]  # (stable: first seen within a group)
    rows: dict[int, int] = {}
    runs: set[str] = set()
    tmp = None
    try:
        if out == "-":
            fh = sys.stdout
        else:
            tmp = f"{out}.tmp-{os.getpid()}"
            fh = open(tmp, "w", newline="", encoding="utf-8")
        try:
            writer = csv.writer(fh)
            writer.writerow([*CSV_BASE, *names])
            state = RunState(track_seq=True)
            for msg in read_log(log_path, LogReadStats(), write_progress):
                state.apply(msg, 0.0)
                if type(msg) is not schema.Step or msg.rank < 0 or (ranks is not None and msg.rank not in ranks):
                    continue
                figures = {**step_scalars(msg), "samples": msg.samples}
                if msg.samples_total is not None:
                    figures["samples_total"] = msg.samples_total
                bad = state.ranks[msg.rank].loss_not_finite if msg.loss is None else None
                if bad is not None and msg.step >= bad[1]:
                    figures["loss"] = float(bad[0])  # (as TensorBoard's: NaN or inf, not a gap)
                writer.writerow([msg.run, msg.rank, state.ranks[msg.rank].restarts, msg.step, msg.t, *(figures.get(name, "") for name in names)])
                rows[msg.rank] = rows.get(msg.rank, 0) + 1
                runs.add(msg.run)
        finally:
            if fh is not sys.stdout:
                fh.close()
            else:
                fh.flush()
        if tmp is not None:
            os.replace(tmp, out)
            tmp = None
    except BrokenPipeError:
        raise  # (stdout's reader went away, `| head`: the command ends as a Unix tool does, 141)
    except OSError as exc:
        raise ExportError(f"{out}: cannot write it: {exc.strerror or exc}; choose a writable --csv FILE") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)  # (a failure or a Ctrl-C: nothing half written is left)
    going = registry.recording(log_path, runs)
    return {
        "rows": sum(rows.values()),
        "ranks": dict(sorted(rows.items())),
        "columns": [*CSV_BASE, *names],
        "in_log": sorted(in_log),
        "left_out": len(others),
        "skipped_lines": stats.skipped_total,
        "skipped_by_reason": dict(sorted(stats.skipped.items())),
        "gzip_damage": {"how": stats.gzip_damage, "after_line": stats.lines} if stats.gzip_damage else None,
        **({"runs": sorted(runs)} if len(runs) > 1 else {}),
        "live_run": going["run_id"] if going else None,
        # (a log whose hub was killed: the export is of the steps it holds, as the TensorBoard one says)
        "log_ends_early": _ends_early(log_path, seen, stats),  # type: ignore[arg-type]
    }


def _log_end(seen, msg: schema.Message) -> bool:
    """Keep ``seen.closed`` and ``seen.end_note`` (what :func:`_ends_early` asks) as ``msg`` is
    read: a hub's note after the ranks' last record, its "hub stopped" the log's end; a rank's
    record after it, no end yet. True where ``msg`` is the hub's own (no rank's)."""
    if msg.rank < 0:
        seen.end_note = msg if isinstance(msg, schema.Event) else None
        if seen.end_note is not None and msg.name == "hub" and msg.message.startswith("hub stopped"):
            seen.closed = True
        return True
    seen.closed, seen.end_note = False, None
    return False


def _ends_early(log_path: str, export: _Export, stats: LogReadStats) -> dict | None:
    """Where a log without its end stops, and why, as the report and a replay reckon it (its
    ranks not all ended and no "hub stopped" after their last record); None where it has its end."""
    from .report import _disk_full_end, _ends_early as ends_early
    from .state import run_over

    if not export.in_log or export.closed or run_over(export.seqs):
        return None
    disk_full = _disk_full_end(export.end_note) if export.end_note is not None else None
    return ends_early(log_path, export.seqs, export.runs, disk_full, bool(stats.gzip_damage))


def end_warning(res: dict, log_path: str) -> str | None:
    """One line for stderr where the export is of part of a run (after ``pardash: warning: ``):
    its run still going, or its log without an end (what the report says of it); None where the
    log has its end."""
    from .report_render import _ends_early_text

    if res.get("live_run"):
        return (f"run {res['live_run']} is still going, its hub recording {log_path}: exported its steps so far; once it ends, "
                "export again with --force to replace them")
    end = res.get("log_ends_early")
    if not end:
        return None
    why = _ends_early_text(end, res.get("skipped_by_reason") or {}, res.get("gzip_damage"))
    return f"{log_path} ends early {why}: exported the steps it holds"


def skipped_text(res: dict) -> str | None:
    """What the reading of the log skipped, as ``pardash report``'s summary says it, for the
    export's last lines: ``skipped 2 log line(s) (2 malformed)``, ``the compressed log is cut
    short after line 90, the rest of it lost``; None where it skipped nothing. (It said "skipped
    1 log line(s) (1 truncated)" of a cut .gz, and nothing of the cut, where the report said
    "skipped log lines 0; the compressed log is cut short after line 90".)"""
    from .report_render import gzip_damage_text, lines_skipped

    cut = res.get("gzip_damage")
    skipped, by_reason = lines_skipped(res["skipped_lines"], res["skipped_by_reason"], cut)
    parts = []
    if skipped:
        parts.append(f"skipped {skipped} log line(s) (" + ", ".join(f"{n} {why}" for why, n in by_reason.items()) + ")")
    if cut:
        parts.append(gzip_damage_text(cut))
    return "; ".join(parts) or None


__all__ = ["ExportError", "end_warning", "event_text", "export_csv", "export_tensorboard", "skipped_text", "step_scalars", "verdict_text"]
