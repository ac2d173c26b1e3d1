"""The headless view, read from a hub through the same client as the TUI: every event and
verdict as it comes, and the run's progress: a live progress bar when stdout is a terminal,
a plain line every few seconds otherwise (logs, CI, pipes: the format tests parse)."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Iterable
from typing import TextIO

from . import schema
from .client import Source
from .summary import held_spread, human_bytes, ms, samples_per_s, samples_per_s_recent, self_s_spread, step_s_spread


def is_terminal(out: TextIO) -> bool:
    """True when ``out`` is an interactive terminal that can redraw a bar."""
    try:
        return out.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


class ProgressPrinter:
    """Prints what a :class:`Source` shows: events as lines, progress as a bar or lines."""

    def __init__(
        self, source: Source, *, out: TextIO | None = None, every_s: float = 5.0, bar: bool | None = None, tail: str | None = None
    ) -> None:
        self.source = source
        self.out = out or sys.stdout
        self.every_s = every_s
        self.bar = is_terminal(self.out) if bar is None else bar
        """A rich progress bar (terminals) instead of a progress line every ``every_s``."""
        self.tail = tail
        """A file the job's processes write to (their stdout and stderr): its lines are printed
        as they come, above the bar, which otherwise they would tear apart."""
        self._tail_pos = 0
        self._tail_rest = b""
        self._last_line = 0.0
        self._last_said = ""
        self._printed_hseq = 0
        self._noted = False
        self.log_error = ""
        """The hub's last word on its log: '' while it writes, else why it cannot."""
        self.t_start = time.monotonic()
        self._progress = None
        self._task = None

    def _print(self, line: str) -> None:
        if self._progress is not None:
            # Printed above the live bar, which redraws below it.
            self._progress.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=self.out, flush=True)

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(file=self.out, force_terminal=True)
        self._progress = Progress(
            TextColumn("step"),
            MofNCompleteColumn(),
            BarColumn(bar_width=30),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            console=console,
            refresh_per_second=4,
        )
        self._task = self._progress.add_task("train", total=None, stats="waiting for ranks")
        self._progress.start()

    def _follow_tail(self, *, final: bool = False) -> None:
        if self.tail is None:
            return
        try:
            with open(self.tail, "rb") as fh:
                fh.seek(self._tail_pos)
                data = fh.read(1 << 20)
        except OSError:  # not created yet
            return
        self._tail_pos += len(data)
        data = self._tail_rest + data
        lines = data.split(b"\n")
        self._tail_rest = lines.pop()
        if final and self._tail_rest:
            lines.append(self._tail_rest)
            self._tail_rest = b""
        for line in lines:
            # A line redrawn with carriage returns (a tqdm bar) shows as a terminal would
            # leave it: its last drawing.
            self._print(line.rstrip(b"\r").rpartition(b"\r")[2].decode(errors="replace"))

    def update(self, *, force: bool = False) -> None:
        """Poll the source; print new events now, and progress (the bar, or a line when due)."""
        self.source.poll()
        st = self.source.state
        if self.bar and self._progress is None:
            self._start_bar()
        self._follow_tail(final=force)
        hello = st.hello
        if hello is not None and hello.note and not self._noted:
            self._noted = True
            self._print(f"note: {hello.note}")
        stats = getattr(self.source, "stats", None)
        log_error = stats.log_error if stats is not None else ""
        if log_error != self.log_error:
            if log_error:
                self._print(f"warning: {log_error}; training goes on, the hub keeps the newest lines in memory until it can write")
            else:
                self._print("log: writable again, the lines kept in memory are written")
            self.log_error = log_error
        fresh = [ev for ev in list(st.events) if ev.hseq > self._printed_hseq]
        if fresh:
            self._printed_hseq = max(ev.hseq for ev in fresh)
        for ev, ranks, took in group_alike(fresh):
            line = event_line(ev, ranks, took)
            if line:
                self._print(line)
        now = time.monotonic()
        if self._progress is not None:
            if st.ranks:
                total = (hello.config or {}).get("steps") if hello else None
                self._progress.update(self._task, completed=st.step, total=total or None, stats=progress_stats(st))
            if force:
                self._progress.refresh()
            return
        if force or now - self._last_line >= self.every_s:
            self._last_line = now
            if st.ranks:
                line = progress_line(st, now - self.t_start)
                said = line.partition("] ")[2]  # the line but its time
                if not (force and said == self._last_said):  # the last line, said again
                    self._print(line)
                    self._last_said = said

    def close(self) -> None:
        """Stop the bar (it stays on screen as the last state); lines need nothing."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def follow(self, done, poll_s: float = 0.1) -> None:
        """Print until ``done()`` is true, then a last progress line (or the bar's last state)."""
        try:
            while not done():
                self.update()
                time.sleep(poll_s)
            self.update(force=True)
        finally:
            self.close()


def event_line(ev: schema.Message, ranks: list[int] | None = None, took: float | None = None) -> str:
    """One event or verdict as a progress line ('' for those not worth one); ``ranks`` and
    ``took``: the ranks that sent the same event and the slowest one's duration (see
    :func:`group_alike`)."""
    if isinstance(ev, schema.Verdict):
        return f"[{ev.verdict}] {verdict_text(ev, ranks)}"
    if isinstance(ev, schema.Event):
        several = ranks is not None and len(ranks) > 1
        who = "hub" if ev.rank < 0 else ranks_named(ranks if several else [ev.rank])
        if ev.name == "exit":
            return "" if not ev.code else f"[exit] {who} exited with code {ev.code}"
        if ev.name == "error":
            first = (ev.message or "").strip().splitlines()[:1]
            return f"[error] {who}: {first[0] if first else 'error'}"
        if ev.name in ("hub", "epoch_end"):
            return ""
        took = took if several else ev.duration_s
        line = f"[{ev.name}] {who}: {ev.message}".rstrip(": ")
        if ev.name == "eval":
            line = f"[eval] {who} after step {ev.step}"
        if took is not None and ev.name in ("checkpoint", "resume", "eval"):
            line += f" ({'slowest ' if several else ''}{took:.2f} s)"
        return line
    return ""


def progress_stats(st) -> str:
    """What the bar shows beside step/total: samples/s, step time spread, rank states."""
    parts = [rate_text(st)]
    sp = step_s_spread(st)
    if sp:
        parts.append("step ms " + "/".join(ms(x) for x in sp) + " min/med/max")
    counts = st.status_counts()
    parts.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    if st.lost:
        parts.append(f"{st.lost} lost")
    return " | ".join(p for p in parts if p)


def rate_text(st) -> str:
    """Samples a second now; once every rank is done, what they ran at over their last steps
    ("at the end": not the run's average, which `pardash report` gives); '' before a first step."""
    sps = samples_per_s(st)
    if sps > 0:
        return f"{sps:,.0f} samples/s"
    if any((r.stalled is not None or r.silent is not None) and r.exit_code is None and not r.finished for r in st.ranks.values()):
        return "0 samples/s"  # stuck
    recent = samples_per_s_recent(st)
    return f"{recent:,.0f} samples/s at the end" if recent > 0 else ""


def progress_line(st, elapsed_s: float) -> str:
    hello = st.hello
    total = (hello.config or {}).get("steps") if hello else None
    step = f"step {st.step}" + (f"/{total}" if total else "")
    parts = [f"[{elapsed_s:6.1f}s] {step}", rate_text(st)]
    sp = step_s_spread(st)
    if sp:
        parts.append("step ms min/med/max " + "/".join(ms(x) for x in sp))
    ss = self_s_spread(st)
    if ss:
        parts.append("self ms " + "/".join(ms(x) for x in ss))
    hs = held_spread(st)
    if hs:
        lo, _, hi = hs
        held = human_bytes(lo) if lo == hi else f"{human_bytes(lo)}..{human_bytes(hi)}"
        parts.append(f"mem/rank {held}")
    counts = st.status_counts()
    parts.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    if st.lost:
        parts.append(f"{st.lost} lost")
    return " | ".join(p for p in parts if p)


def ranks_text(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out: list[str] = []
    for r in sorted(ranks):
        if out and "-" not in out[-1].split(", ")[-1] and int(out[-1]) == r - 1:
            out[-1] = f"{out[-1]}-{r}"
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == r - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ", ".join(out)


_ranks_text = ranks_text  # the old private name


def ranks_named(ranks: list[int]) -> str:
    """[3] -> 'rank 3'; [0, 1, 2, 5] -> 'ranks 0-2, 5'."""
    return f"rank{'s' if len(ranks) > 1 else ''} {ranks_text(ranks)}"


GROUPED = frozenset({"checkpoint", "resume", "warning", "epoch_end", "exit", "eval"})
"""Events every rank sends alike (a save, a resume, an epoch's end, a clean exit): the same
event from several ranks taken in one refresh is one line naming the ranks, in the progress
lines and the TUI's event log. Errors are not: each carries its own traceback."""


GROUPED_VERDICTS = frozenset({"stalled", "silent", "resumed"})
"""Verdicts the hub draws of many ranks at once (a hang stalls them all): the same verdict
(kind, cause, step, text but for the rank and a count of seconds) of several ranks taken in
one refresh is one line naming the ranks. A hang of 1024 ranks is two lines, not 1024."""

_SECONDS = re.compile(r"\b\d+ s\b")


def verdict_tail(v: schema.Verdict) -> str | None:
    """A verdict's message without its leading 'rank N ' (None if it does not start so)."""
    head = f"rank {v.rank} "
    return v.message[len(head):] if v.message.startswith(head) else None


def verdict_text(v: schema.Verdict, ranks: list[int] | None = None) -> str:
    """A verdict's message; for several ranks (see :func:`group_alike`), naming them all."""
    tail = verdict_tail(v) if ranks is not None and len(ranks) > 1 else None
    if tail is None:
        return v.message or f"rank {v.rank}: {v.verdict.replace('_', ' ')}"
    return f"{ranks_named(ranks)} {tail}"


def group_alike(msgs: Iterable[schema.Message]) -> list[tuple[schema.Message, list[int] | None, float | None]]:
    """``msgs`` in order as (first message, its ranks, the slowest duration): the same
    :data:`GROUPED` event (name, step, text, code) or :data:`GROUPED_VERDICTS` verdict from
    several ranks is one entry, where the first of them was; anything else is an entry of its
    own (ranks None)."""
    out: list[list] = []
    alike: dict[tuple, list] = {}
    for m in msgs:
        key: tuple | None = None
        if isinstance(m, schema.Event) and m.rank >= 0 and m.name in GROUPED:
            key = (m.name, m.step, m.message, m.code)
        elif isinstance(m, schema.Verdict) and m.rank >= 0 and m.verdict in GROUPED_VERDICTS:
            tail = verdict_tail(m)
            if tail is not None:
                key = ("verdict", m.verdict, m.cause, m.step, _SECONDS.sub("N s", tail))
        if key is not None:
            entry = alike.get(key)
            if entry is None:
                entry = alike[key] = [m, {}, None]  # ranks as a dict: ordered, and 1024 of them are cheap to look up
                out.append(entry)
            entry[1][m.rank] = None  # a rank that said it twice is named once
            took = m.duration_s if isinstance(m, schema.Event) else None
            if took is not None and (entry[2] is None or took > entry[2]):
                entry[2] = took
        else:
            out.append([m, None, None])
    return [(m, list(ranks) if ranks is not None else None, took) for m, ranks, took in out]


# Errors a rank raises because another rank died (its peer's socket closed under it).
PEER_FAILURE = re.compile(
    r"Connection reset by peer|Connection closed by peer|Broken pipe|remote worker|"
    r"NCCL communicator was aborted|ProcessGroupNCCL.*(?:Watchdog|timeout)|Socket Timeout|"
    r"DistNetworkError|DistBackendError|Connection refused",
    re.IGNORECASE,
)


def attempts(st) -> list[list[schema.Event]]:
    """The run's events, split where torchrun restarted the job (``--max-restarts``): the hub
    notes each rank's hello of a new attempt (``restart``), and the first such note after an
    exit starts the next attempt. A failure that a restart recovered from is not the cause of
    how the run ended."""
    out: list[list[schema.Event]] = [[]]
    exited = False
    for e in st.lifecycle:
        if not isinstance(e, schema.Event):
            continue
        if e.name == "restart" and exited:
            out.append([])
            exited = False
        exited = exited or (e.name == "exit" and e.rank >= 0)
        out[-1].append(e)
    return out


def root_cause(st, events: list[schema.Event] | None = None) -> tuple[schema.Event, list[int], list[int]] | None:
    """(the exit that caused a failure, ranks that failed because of it, ranks stopped), among
    ``events`` (default: the last attempt's, see :func:`attempts`).

    A rank killed by a signal (SIGKILL from the OOM killer or a user, SIGSEGV...) is always a
    cause; next a rank that failed on its own error; ranks whose error is a peer failure
    (the collective's socket closed under them) are victims, SIGTERM (-15) is how torchrun
    stops the rest. A job in which every rank was only stopped (by the user, or a scheduler
    that sent SIGTERM) has no cause among its ranks: None.
    """
    if events is None:
        events = attempts(st)[-1]
    # A rank that said it finished (exit 0) makes a launcher's note that it was stopped, taken
    # before its own word, wrong (as RunState.apply has it); judged within the attempt.
    finished = {e.rank for e in events if e.name == "exit" and e.seq >= 0 and e.code == 0}
    exits = [
        e for e in events
        if e.name == "exit" and e.rank >= 0 and e.code and not (e.seq < 0 and e.rank in finished)
    ]  # fmt: skip
    if not exits:
        return None
    errors: dict[int, str] = {}
    for e in events:
        if e.name == "error" and e.rank >= 0:
            errors.setdefault(e.rank, (e.message or "") + "\n" + (e.traceback or ""))

    def grade(e: schema.Event) -> int:
        if e.code < 0 and e.code != -15:
            return 0
        if e.code > 0 and not PEER_FAILURE.search(errors.get(e.rank, "")):
            return 1
        if e.code > 0:
            return 2
        return 3

    first = min(exits, key=lambda e: (grade(e), e.hseq))
    if grade(first) == 3:
        return None
    victims = sorted({e.rank for e in exits if e.rank != first.rank and grade(e) == 2})
    stopped = sorted({e.rank for e in exits if e.rank != first.rank and e.code == -15} - set(victims))
    return first, victims, stopped


def failure_summary(st, events: list[schema.Event] | None = None) -> dict | None:
    """The root cause among ``events`` (default: the last attempt's; or an earlier one's list
    from :func:`attempts`) as the report and the launcher's last line tell it: rank, code,
    signal, the step it died in, its error's first line, victims, stopped, and ``line``, one
    sentence of all that."""
    last = events is None
    if events is None:
        events = attempts(st)[-1]
    found = root_cause(st, events)
    if found is None:
        return None
    first, victims, stopped = found
    error, step, where = None, first.step, None  # the step it died in, when it said (exit events carry it)
    for e in events:
        if e.name == "error" and e.rank == first.rank:
            lines = (e.message or "").strip().splitlines()
            error = lines[0] if lines else None
            where = raised_at(e.traceback)
            if step is None and e.step is not None:
                step = e.step + 1  # an error event carries the last step completed
            break
    r = st.ranks.get(first.rank)
    if step is None and last and r is not None and r.step is not None:
        step = r.step.step + 1  # the one after its last step (known for the last attempt only)
    unrecorded = None
    if first.code > 0 and error is not None and PEER_FAILURE.search(error):
        # Even the first failure is a peer's failure: the rank that failed first left no exit
        # (torchrun, restarting, names only the first worker it saw fail). Ranks with no word
        # in this attempt are where to look.
        said = {e.rank for e in events if e.name == "exit"}
        unrecorded = sorted(q for q in st.ranks if q not in said)
    f = {"rank": first.rank, "code": first.code, "signal": signal_name(first.code), "step": step, "error": error,
         "where": where, "victims": victims, "stopped": stopped, "unrecorded": unrecorded}  # fmt: skip
    f["line"] = failure_line(f)
    return f


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$', re.MULTILINE)


def raised_at(tb: str | None) -> str | None:
    """Where a traceback's exception was raised: its innermost frame as ``file:line in func``."""
    frames = list(_FRAME.finditer(tb or ""))
    if not frames:
        return None
    m = frames[-1]
    return f"{m['file']}:{m['line']} in {m['func'].strip()}"


def failure_line(f: dict, *, error: bool = True) -> str:
    """One sentence of a :func:`failure_summary` (``error``: with the error's first line)."""
    line = f"rank {f['rank']} exited with code {f['code']}" + (f" ({f['signal']})" if f["signal"] else "")
    line += f" at step {f['step']}" if f["step"] is not None else ""
    line += f": {f['error']}" if error and f["error"] else ""
    victims, stopped = f["victims"], f["stopped"]
    if victims:
        line += f"; {ranks_named(victims)} failed after it"
    if stopped:
        line += f"; {ranks_named(stopped)} {'were' if len(stopped) > 1 else 'was'} stopped"
    unrecorded = f.get("unrecorded")
    if unrecorded is not None:
        line += "; that is a peer's failure, and the rank that failed first left no exit record"
        if unrecorded:
            line += f" (no word from {ranks_named(unrecorded)}: killed?)"
    return line


def recovered_failures(st) -> list[dict]:
    """The failures torchrun restarted the job after (:func:`failure_summary` of each attempt
    but the last), oldest first."""
    out = []
    for events in attempts(st)[:-1]:
        f = failure_summary(st, events)
        if f is not None:
            out.append(f)
    return out


def signal_name(code: int | None) -> str | None:
    """SIGKILL for -9; None for a code that is no signal."""
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return None


HUB_GONE_S = 5.0
"""A live hub sends a frame ten times a second, messages or not: this long without one, and it
has stopped (or cannot be reached)."""


def run_over(st) -> bool:
    """Every rank of the job has finished or exited."""
    ranks = st.ranks.values()
    return bool(st.ranks) and len(st.ranks) >= (st.world_size or 1) and all(r.finished or r.exit_code is not None for r in ranks)


def follow_attached(printer: ProgressPrinter, source, gone_s: float = HUB_GONE_S) -> str:
    """Print a live run until it is over or its hub is gone (a viewer attached to a run that
    ended must not print its last state for ever); returns the closing line.

    Over: every rank has finished or exited, and the job's supervisor (when the registry names
    it) has ended too: with ``--max-restarts`` torchrun may start the ranks again. Gone: no frame
    for ``gone_s`` while neither the hub nor the supervisor lives (a hub restarted on a long log
    sends none while it reads it back)."""
    from .registry import pid_alive

    info = getattr(source, "info", None) or {}
    supervisor, hub = info.get("supervisor_pid"), info.get("pid")
    seen = {"t": source.last_frame_t, "at": time.monotonic()}

    def job_alive() -> bool:
        return bool(supervisor) and pid_alive(supervisor)

    def done() -> bool:
        if source.last_frame_t != seen["t"]:
            seen["t"], seen["at"] = source.last_frame_t, time.monotonic()
        if run_over(source.state) and not job_alive():
            return True
        quiet = time.monotonic() - seen["at"] > gone_s
        return quiet and not job_alive() and not (bool(hub) and pid_alive(hub))

    printer.follow(done)
    st = source.state
    counts = ", ".join(f"{n} {s}" for s, n in sorted(st.status_counts().items()))
    if run_over(st):
        f = failure_summary(st)
        return f"pardash: the run is over: {counts}" + (f"; {f['line']}" if f else "")
    return f"pardash: the hub has sent nothing for {gone_s:.0f} s (stopped, or out of reach); last seen: {counts or 'no ranks'}"


def outcome_line(st, code: int, result: dict, log_path: str, log_error: str = "") -> str:
    """The launcher's last line: success, or the one-line cause of a failure (``log_error``:
    the hub's last word on the log, when it could not write it)."""
    log = f"log {log_path}" + (f" (incomplete: {log_error})" if log_error else "")
    said = "".join(f"; {n}" for n in restart_notes(st, result))
    if code == 0:
        return f"pardash: done, {len(st.ranks)} rank(s), step {st.step}{said}, {log}"
    if result.get("stopped"):
        return f"pardash: stopped by you (exit code {code}){said}; {log}"
    f = failure_summary(st)
    if f is None:
        return f"pardash: the job failed with exit code {code}{said}; {log}"
    # The error's text is in the ranks' output just above: the line names who and where.
    # The launch's own exit code is torchrun's, not the rank's (which the line names): say whose.
    return f"pardash: {failure_line(f, error=False)}{said}; the job's exit code {code}; {log}"


def restart_notes(st, result: dict) -> list[str]:
    """What a run that ended went through: torchrun's restarts of the job (--max-restarts)
    and the launcher's of the hub (with the messages lost while none listened)."""
    notes = []
    restarts = max((r.restarts for r in st.ranks.values()), default=0)
    if restarts:
        notes.append(f"torchrun restarted the job {restarts}x")
    hub = int(result.get("hub_restarts") or 0)
    if hub:
        lost = f", {st.lost} messages lost while it was down" if st.lost else ""
        notes.append(f"the hub restarted {hub}x{lost}")
    return notes
