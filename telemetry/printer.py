"""The headless view, read from a hub through the same client as the TUI: every event and
verdict as it comes, and the run's progress: a live progress bar when stdout is a terminal,
a plain line every few seconds otherwise (logs, CI, pipes: the format tests parse)."""

from __future__ import annotations

import math
import statistics
import os
import re
import signal
import sys
import time
from collections.abc import Iterable
from typing import TextIO

import msgspec

from . import schema
from .analysis import JOINED, collectives_words, different_collectives, hang_causes, stuck_ranks, whole_hang
from .causes import waiting_count
from .client import HUB_QUIET_S, Source
from .failures import (PEER_FAILURE, STOPPED_CODES, attempts, failure_line, failure_summary, is_stop, left_early, root_cause,
                       short_error, signal_name, stop_text)
from .loss_turns import LossTurnsHeld, held_text
from .recorder import CONTINUED_AT
from .redraws import Redraws, last_drawing
from .state import EXITED, RUNNING, SMOOTH_FIGURES, STALLED, STARTING, STRAGGLER, launcher_stopping, run_over, status_of, torchrun_restart
from .summary import (
    held_spread,
    named_by_step,
    human_bytes,
    is_sharded,
    joined_words,
    ms,
    ranks_named,
    ran_out_apart,
    samples_per_s,
    samples_per_s_recent,
    held_up_were,
    span_text,
    stragglers_were,
    spread,
    took_text,
    time_left_s,
    total_steps,
    unheard_why,
)


def is_terminal(out: TextIO) -> bool:
    """True when ``out`` is an interactive terminal that can redraw a bar."""
    try:
        return out.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


_LINES_LOST = re.compile(r"; [\d,]+ lines(?: of steps? [\d-]+)? lost: ")
LOG_NEWS_EVERY_S = 60.0
"""The least time between two lines on the log's state (a disk full, then writable again)."""
LOG_SAME_EVERY_S = 600.0
"""...and between two of the same trouble (a disk still full, its dropped lines counted anew)."""
_COUNTS = re.compile(r"\d[\d,.]*")


def _log_kind(log_error: str) -> str:
    """A log error without its figures (the lines dropped so far, held in memory): the same trouble."""
    return _COUNTS.sub("#", log_error)
"""In a hub's log error: the lines it held as it stopped, which no place took (its last word;
recorder.Recorder._keep_elsewhere), not a disk full while the run goes on."""

TAIL_CHUNK = 1 << 20
"""Bytes of the job's output read at a time."""
DRAWING_MAX = 1000
"""Bytes of the line the job is drawing (:meth:`ProgressPrinter._show_drawing`) looked at: its end."""
_CONTROLS = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]")


def strip_controls(text: str) -> str:
    """``text`` without terminal escapes and control characters (a bar's colours, cursor moves):
    drawn inside the printer's own live display, they would move it."""
    return _CONTROLS.sub("", text)


class ProgressPrinter:
    """Prints what a :class:`Source` shows: events as lines, progress as a bar or lines."""

    def __init__(
        self, source: Source, *, out: TextIO | None = None, every_s: float = 5.0, bar: bool | None = None, tail: str | None = None,
        waiting: str = "no rank has said hello yet", joined: bool = False, remote_hub: str = "",
    ) -> None:
        self.source = source
        self.remote_hub = remote_hub
        """On a node > 0, node 0's hub (its ingest address, as the user gave it): quiet past
        HUB_LOST_S while this node's ranks live, it is said unreachable, not its last figures."""
        self.joined = joined
        """A viewer of a run already going on (attach): the events it finds are the run's past,
        printed under a line that says so."""
        self.waiting = waiting
        """A progress line's text while no rank has said hello (a multi-node job waits for its
        other nodes in torchrun's rendezvous: nothing was printed for as long)."""
        self.out = out or sys.stdout
        self.every_s = every_s
        self.bar = is_terminal(self.out) if bar is None else bar
        """A rich progress bar (terminals) instead of a progress line every ``every_s``."""
        self.tail = tail
        """A file the job's processes write to (their stdout and stderr): its lines are printed
        as they come, above the bar, which otherwise they would tear apart."""
        self._tail_pos = 0
        self._tail_rest = b""
        self._redraws = Redraws()
        self._last_line = 0.0
        self._last_said = ""
        self._printed_hseq = 0
        """The events up to this hseq are printed."""
        self._printed_ahead: set[int] = set()
        """Events past ``_printed_hseq`` printed already, on the line of alike ones before them."""
        self._first_seen: dict[int, float] = {}
        """When the events not printed yet were first seen (hseq -> monotonic): each waits for
        its ranks' alike ones from then (see :meth:`_group_wait`)."""
        self._noted = False
        self.log_error = ""
        """The hub's last word on its log: '' while it writes, else why it cannot."""
        self.log_path = ""
        """Where the hub's log is, as it last said."""
        self._log_said = ""
        self._log_said_t = -math.inf
        """What was last said of the log (:func:`_log_kind` of its error, '' writable) and when
        (monotonic); ``_log_pending``: a change not said yet (see :meth:`_log_due`)."""
        self._log_pending = False
        self._log_said_text = ""
        self._log_state = ""
        self._log_state_t = -math.inf
        """The log's state now (:func:`_log_kind`) and since when (monotonic): writable again is
        said once it has stayed so a while (see :meth:`_log_due`)."""
        self.t_start = time.monotonic()
        """When the printer started (monotonic): its clock until the run's is known."""
        self._run_origin: float | None = None
        self._run_t: float | None = None
        """Where the run's 00:00 is on the monotonic clock, once known (see :meth:`_run_clock`)."""
        self._frame_t: float | None = None
        self._frame_at = self.t_start
        self._quiet_said = False
        self._lost_said = False
        self._refused_said = False
        self._progress = None
        self._stopped_bar = None
        """The bar :meth:`close` stopped, which a later update goes on with."""
        self._task = None
        self._said_events = False
        self._loss_turns = LossTurnsHeld()
        """Which of the ranks' loss turns are printed (a loss inf every 7 steps: 2 lines each)."""
        self._earlier_upto: int | None = None
        """The events the hub had before this printer first heard from it (a late attach: its
        snapshot's), by hseq: printed under a line that says they are the run's past, not news."""

    def _print(self, line: str) -> None:
        if self._progress is not None:
            # Printed above the live bar, which redraws below it; a line of the job's with
            # escapes, as text whose colours are kept and whose cursor moves are not: rich's own
            # live display, drawn in the ranks (TTY_COMPATIBLE), starts its lines by moving the
            # cursor up and erasing, which wiped the line above pardash's bar (review 332).
            if "\x1b" in line or "\x9b" in line:
                from rich.text import Text  # (rich is loaded: the bar is its)

                # (8-bit CSI as its 7-bit form: rich reads only "ESC [", review 334)
                self._progress.console.print(Text.from_ansi(line.replace("\x9b", "\x1b[")), markup=False, highlight=False)
            else:
                self._progress.console.print(line, markup=False, highlight=False)
        else:
            # One write, the line with its end: a Ctrl-C between print's two (the line, then its
            # newline) left it open, and the launch's last word went on the end of it
            # ("... likely waiting for rank 2pardash: stopped by you as it hung ...").
            self.out.write(line + "\n")
            self.out.flush()

    def say(self, line: str) -> None:
        """Print ``line`` among the events (above the bar in a terminal)."""
        self._print(line)

    def hold_display(self) -> None:
        """Stop the live bar where it is (its cursor shown again), until :meth:`go_on_display`:
        the terminal is the shell's meanwhile (this process suspended)."""
        if self._progress is not None:
            self._progress.stop()

    def go_on_display(self) -> None:
        """The live bar again, after :meth:`hold_display`."""
        if self._progress is not None:
            self._progress.start()

    def _start_bar(self) -> None:
        if self._stopped_bar is not None:
            # The bar goes on after a stop (headless Ctrl-C: "stopping the job..."), its clock
            # the run's: a new one read 0:00:00 of a job an hour old.
            self._progress, self._stopped_bar = self._stopped_bar, None
            self._progress.start()
            return
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        from rich.table import Column
        from rich.text import Text

        class _FittedBar(BarColumn):
            """A bar of ``bar_width`` cells, or none at 0 (rich draws one cell at least)."""

            def render(self, task):
                return super().render(task) if self.bar_width else Text("")

        console = Console(file=self.out, force_terminal=True)
        # The step and the elapsed time never give way (rich squeezed them to "…" at 80
        # columns, the stats beside them whole): the bar and the stats are fitted to the rest
        # at each update (see _fit_bar).
        self._step_column = TextColumn("{task.fields[step]}", table_column=Column(no_wrap=True))
        self._bar_column = _FittedBar(bar_width=BAR_WIDTH)
        self._stats_column = TextColumn("{task.fields[stats]}", table_column=Column(no_wrap=True, overflow="ellipsis"))
        self._elapsed_column = TimeElapsedColumn(table_column=Column(no_wrap=True))
        class _WithDrawing(Progress):
            """The bar, under the job's line being drawn (:meth:`ProgressPrinter._drawing`)."""

            drawing = ""

            def get_renderables(self):
                if self.drawing:
                    yield Text(self.drawing, no_wrap=True, overflow="ellipsis", style="dim")
                yield from super().get_renderables()

        self._progress = _WithDrawing(
            self._step_column,
            self._bar_column,
            self._stats_column,
            self._elapsed_column,
            console=console,
            refresh_per_second=4,
        )
        self._task = self._progress.add_task("train", total=None, stats="waiting for ranks", step="step")
        if self._run_t is not None:
            self._progress.tasks[0].start_time = self._run_t
        self._progress.start()

    def _run_clock(self, st) -> None:
        """Count from the run's 00:00, as the TUI's elapsed time, its event log, a replay and
        ``pardash report`` do: the ranks' first word (their earliest hello, as the hub keeps
        it), once it is known; before, from the printer's start. The printer counted from its
        own start: under a launch 6 s ahead of the TUI ("0:00:15" beside "elapsed 9s", torchrun
        and torch's import between), and attached to a run an hour old, "0:00:00"."""
        origin = st.first_hello_t or None
        if origin is None or origin == self._run_origin:
            return
        self._run_origin = origin
        # (the run's own timestamps, as the TUI's header reads them, then this machine's clock)
        elapsed = max(0.0, (st.t_last_rank or st.t_last) - origin)
        self._run_t = time.monotonic() - elapsed
        if self._progress is not None and self._progress.tasks:
            self._progress.tasks[0].start_time = self._run_t

    def _follow_tail(self, *, final: bool = False) -> None:
        """Print the lines the job's processes wrote since the last call: a megabyte at a time
        while it runs (the progress goes on between), everything left at the ``final`` call (a
        job that printed 12 MB in its last seconds lost its last lines)."""
        if self.tail is None:
            return
        while True:
            try:
                with open(self.tail, "rb") as fh:
                    fh.seek(self._tail_pos)
                    chunk = fh.read(TAIL_CHUNK)
            except OSError:  # not created yet
                return
            self._tail_pos += len(chunk)
            more = len(chunk) == TAIL_CHUNK
            data = self._tail_rest + chunk
            lines = data.split(b"\n")
            self._tail_rest = lines.pop()
            if len(self._tail_rest) > TAIL_CHUNK:  # no newline for a megabyte (a bar redrawn with \r)
                lines.append(self._tail_rest)
                self._tail_rest = b""
            if final and self._tail_rest and not more:
                lines.append(self._tail_rest)
                self._tail_rest = b""
            # (the line being drawn shown first: each line printed redraws the bar as last
            # rendered, which showed the drawing that line ended above it again)
            if self._show_drawing():
                self._progress.refresh()
            # (a display drawn over several lines, rich's, shows as it ends: see telemetry/redraws.py)
            for line in self._redraws.take(lines) + self._redraws.flush(final=final and not more):
                # A line redrawn with carriage returns (a tqdm bar) shows as a terminal would
                # leave it: its last drawing.
                self._print(last_drawing(line).decode(errors="replace"))
            if not (final and more):
                return

    def _show_drawing(self) -> bool:
        """Show above the bar the job's line not ended yet, as its last drawing: a tqdm bar,
        redrawn with carriage returns and ended by a newline only when its loop is done. Under
        plain torchrun it animates; here nothing showed until an epoch's end (review 315).
        Whether what the bar shows changed."""
        if self._progress is None:
            return False
        drawing = self._tail_rest.rstrip(b"\r").rpartition(b"\r")[2][-DRAWING_MAX:].decode(errors="replace")
        drawing = strip_controls(drawing).strip()
        if drawing == self._progress.drawing:
            return False
        self._progress.drawing = drawing
        return True

    def update(self, *, force: bool = False) -> None:
        """Poll the source; print new events now, and progress (the bar, or a line when due)."""
        self.source.poll()
        st = self.source.state
        self._run_clock(st)
        if self.bar and self._progress is None:
            self._start_bar()
        self._follow_tail(final=force)
        hello = st.hello
        if hello is not None and hello.note and not self._noted:
            self._noted = True
            self._print(f"note: {hello.note}")
        stats = getattr(self.source, "stats", None)
        log_error = stats.log_error if stats is not None else ""
        log_path = (stats.log_path if stats is not None else "") or self.log_path
        now = time.monotonic()
        if log_error != self.log_error or self._log_pending:
            self._log_pending = True
            if self._log_due(log_error, log_path, now, force):
                line = self._log_line(st, log_error, log_path)
                if line:
                    self._print(line)
                self._log_pending = False
                self._log_said, self._log_said_t, self._log_said_text = _log_kind(log_error), now, log_error
            elif not log_error and self._log_said == "":
                self._log_pending = False  # (writable again, as last said: nothing to say)
            self.log_error = log_error
        self.log_path = log_path
        # A live hub that refuses this viewer after taking it (its key revoked, the hub
        # restarted since): said once, as the TUI's header says it; "the hub has sent nothing"
        # alone blamed its liveness. Said again should it take the viewer back.
        refused = getattr(self.source, "refused", "") if getattr(self.source, "live", False) else ""
        if refused and not self._refused_said:
            before = "the figures below are from before, and " if st.ranks else ""
            self._print(f"warning: the hub refuses this viewer now: {refused}; {before}training does not wait for it")
            self._refused_said = True
        elif not refused and self._refused_said and getattr(self.source, "synced", True):
            self._print("hub: takes this viewer again")
            self._refused_said = False
        quiet = self._hub_quiet_s(now) if not self._refused_said else None  # (refused: said why it is quiet)
        if quiet is not None and not self._quiet_said:
            # ("the figures below" only where some are: a hub quiet before any rank spoke has none)
            before = "the figures below are from before, and " if st.ranks else ""
            self._print(f"warning: the hub has sent nothing for {quiet:.0f} s (stopped, overloaded or out of reach); "
                        f"{before}training does not wait for it")
            self._quiet_said = True
        elif quiet is None and self._quiet_said and self._frame_at == now:
            self._print("hub: sending again")
            self._quiet_said = False
            self._lost_said = False
        lost = self.hub_lost_text(quiet)
        if lost and not self._lost_said:
            # (node 1 said "2 running | hub quiet for 106 s" for minutes of a node 0 powered off,
            # its rank held in an all-reduce with it: nothing said node 0 was gone)
            self._print(f"warning: {lost}{HUB_LOST_WARNING}")
            self._lost_said = True
        ahead = self._printed_ahead
        fresh = sorted((ev for ev in list(st.events) if ev.hseq > self._printed_hseq and ev.hseq not in ahead), key=lambda ev: ev.hseq)
        upto = fresh[-1].hseq if fresh else self._printed_hseq
        if not force:
            fresh, upto = self._group_wait(fresh, now, st)
        self._printed_hseq = max(self._printed_hseq, upto)
        ahead.update(ev.hseq for ev in fresh if ev.hseq > self._printed_hseq)
        for h in [h for h in ahead if h <= self._printed_hseq]:
            ahead.remove(h)
        seen = self._first_seen
        for h in [h for h in seen if h <= self._printed_hseq or h in ahead]:
            del seen[h]
        if self._earlier_upto is None and self.joined and getattr(self.source, "synced", True):
            self._earlier_upto = max((ev.hseq for ev in st.events), default=0)
        for ev, ranks, took in group_alike(fresh):
            held = self._loss_turns.take(ev, ranks)
            line = event_line(ev, ranks, took) if held is None else "" if held == 0 else (
                f"[warning] {ranks_named(ranks or [ev.rank])}: {held_text(ev, held)}")  # type: ignore[arg-type]
            if line:
                if not self._said_events and self._earlier_upto and ev.hseq <= self._earlier_upto:
                    # (a viewer that joined a run going on: "[straggler] rank 2 ..." read as news)
                    self._print("pardash: earlier in the run (before this viewer started):")
                self._said_events = True
                self._print(line)
                self._last_said = ""  # (the closing line again below it: see below)
        stats = getattr(self.source, "stats", None)
        rejected = stats.rejected if stats is not None else {}
        if self._progress is not None:
            if st.ranks:
                total = total_steps(hello)
                step = progress_step(st)
                step_text = f"step {step}/{total}" if step is not None and total else f"step {step}" if step is not None else ""
                if step_text and (left := time_left_s(st, total)) is not None:
                    step_text += f" ({span_text(left)} left)"
                forms = progress_stats_forms(st, rejected, hub_quiet_s=quiet, hub_lost=self.hub_lost_text(quiet, short=True))
                stats_text = self._fit_bar(step_text, forms, bar=bool(total))
                self._progress.update(self._task, completed=step or 0, total=total or None, stats=stats_text, step=step_text)
            if force:
                self._progress.refresh()
            return
        if force or now - self._last_line >= self.every_s:
            self._last_line = now
            if st.ranks:
                line = progress_line(st, now - (self._run_t if self._run_t is not None else self.t_start), rejected, hub_quiet_s=quiet,
                                     hub_lost=self.hub_lost_text(quiet, short=True),
                                     hub_behind_s=stats.behind_s if stats is not None else 0.0)  # fmt: skip
                said = line.partition("] ")[2]  # the line but its time
                # The last line said again: not as the closing line, nor every few seconds once
                # the run is over (a job's teardown can take that long after its last step);
                # but below events printed after it ("2 finished", then the step-10 checkpoint
                # and the step-20 evaluation, held for their other ranks, read as after the end).
                if not ((force or run_over(st)) and said == self._last_said):
                    self._print(line)
                    self._last_said = said
            elif not force and self.waiting and now - self.t_start >= self.every_s:
                # Before the run's 00:00 (its ranks' first word) no run time: "[   8.1s] no rank
                # has said hello yet" then "[   0.9s] step 4/100" read as a clock gone backwards.
                waited = f"{now - self.t_start:.0f} s"
                if self._frame_t is None and self._refused_said:
                    # Refused (said above, with why): "no answer from the hub yet (stopped,
                    # overloaded or out of reach)" went on every line after it, of a hub that
                    # answered: with a refusal, on a node whose keys are not its hub's.
                    self._print(f"[waiting {waited}] the hub refuses this viewer (see above): nothing of the run shows here; "
                                "training goes on")  # fmt: skip
                elif self._frame_t is None and getattr(self.source, "live", False) and not getattr(self.source, "synced", True):
                    # Not a word from the hub yet: whether any rank said hello is not known.
                    self._print(f"[waiting {waited}] no answer from the hub yet (stopped, overloaded or out of reach)")
                else:
                    refused = stats.rejected.get("no_key", 0) if stats is not None else 0
                    # (ranks whose keys the hub refuses say so on their own stderr: a node's first)
                    why = f"; the hub refused {refused} connection attempt(s) with no key authorised for the port" if refused else ""
                    foreign = stats.rejected.get("foreign_run", 0) if stats is not None else 0
                    if foreign:  # (a job under a stale PARDASH_RUN_ID: the hub's warning above names it)
                        why += f"; the hub refused {foreign} record(s) of another run's id (see its warning above)"
                    self._print(f"[waiting {waited}] {self.waiting}{why}")

    def _fit_bar(self, step_text: str, forms: list[str], bar: bool = True) -> str:
        """The stats to show beside ``step_text`` on the bar's line, the longest of ``forms``
        (longest first) that fits the terminal's width with a bar of BAR_MIN_WIDTH or more,
        and the bar as wide as what is left allows, up to BAR_WIDTH; where even the shortest
        form leaves no room for a bar, no bar, and that form cut to fit. The step and the
        elapsed time stay whole down to some 25 columns (below that even they are cut).

        ``bar`` False (no total known: a script's run), never a bar: rich's bar of an unknown
        total is a pulse that a still look (a capture, a pause of the terminal) sees full, a
        script's run of 40 steps read as done at step 3."""
        from rich.cells import cell_len

        progress = self._progress
        task = progress.tasks[0]
        elapsed = self._elapsed_column.render(task).plain
        # (the columns' separators: a space each; one column spare, where the elapsed time
        # grows a digit before the next fit, or a terminal wraps a full line)
        room = progress.console.width - cell_len(step_text) - cell_len(elapsed) - 4
        for form in forms:
            left = room - cell_len(form)
            if not bar and left >= 0:
                self._bar_column.bar_width = 0
                return form
            if bar and left >= BAR_MIN_WIDTH:
                self._bar_column.bar_width = min(BAR_WIDTH, left)
                return form
        self._bar_column.bar_width = 0
        form = forms[-1]
        if cell_len(form) > room:
            form = form[: max(0, room - 1)] + "…" if room > 0 else ""
        return form

    def _log_due(self, log_error: str, log_path: str, now: float, force: bool) -> bool:
        """Whether the log's state, changed to ``log_error`` at ``log_path``, is said now. Lines
        lost and a log continued elsewhere at once (each said once, at the end); the state at
        the end (``force``) whatever; a trouble other than the last said once a LOG_NEWS_EVERY_S
        from the last line, the same trouble (its count of dropped lines grown) once a
        LOG_SAME_EVERY_S, and writable again once it has stayed so LOG_NEWS_EVERY_S: a disk left
        full printed 224 warnings in 80 s, burying the progress lines, with "writable again"
        between them whenever a line fitted in a block freed (review 316)."""
        if (log_error and _LINES_LOST.search(log_error)) or (not log_error and self.log_path and log_path != self.log_path):
            return True
        if force:
            return log_error != self._log_said_text
        kind = _log_kind(log_error)
        if kind != self._log_state:
            self._log_state, self._log_state_t = kind, now
        if not log_error:
            return self._log_said != "" and now - self._log_state_t >= LOG_NEWS_EVERY_S
        return now - self._log_said_t >= (LOG_SAME_EVERY_S if kind == self._log_said else LOG_NEWS_EVERY_S)

    def _log_line(self, st, log_error: str, log_path: str) -> str:
        """What became of the hub's log, now that its error is ``log_error`` ('' none) and it is
        at ``log_path``. A log whose disk is still full as its hub stops goes on in full in a
        copy (the error cleared, the path the copy's), or the lines its hub held are lost (the
        error says how many): neither is written to the log later, and the hub's last word, a
        warning among the events printed next, says which; '' then, not said twice."""
        old = self.log_path
        if log_error and _LINES_LOST.search(log_error):
            said = self._hub_said(st, lambda text: text.startswith(f"log {log_path}: ") and " lost: " in text)
            return "" if said else f"warning: {log_error}"
        if log_error:
            return f"warning: {log_error}; training goes on, the hub keeps the newest lines in memory until it can write"
        if old and log_path != old:
            said = self._hub_said(st, lambda text: f"{CONTINUED_AT}{log_path}" in text)
            return "" if said else f"log {old}: continued in full at {log_path} (all it holds, then the lines kept in memory)"
        return "log: writable again, the lines kept in memory are written"

    def _hub_said(self, st, says) -> bool:
        """Whether one of the hub's warnings not yet printed ``says`` it (its text)."""
        return any(isinstance(ev, schema.Event) and ev.rank < 0 and ev.name == "warning" and ev.hseq > self._printed_hseq
                   and says(ev.message) for ev in reversed(st.events))  # fmt: skip

    def _group_wait(self, fresh: list[schema.Message], now: float, st) -> tuple[list[schema.Message], int]:
        """The events of ``fresh`` to print now, and the hseq all before which are printed with
        them: up to the first that other ranks may still say alike (an eval, a save) within
        GROUP_WAIT_S of its coming, so the ranks' alike events are one line ("[eval] ranks 0-1
        after step 5"), not one each as they straggle in from frame to frame. What follows it
        waits too, in order, each event's wait counted from its own coming: a wait that began
        only once the event ahead was printed put a second between rank 0's evaluations, each
        step's, and the lag grew without end (a straggler verdict came out after the job
        ended). The alike events of a line printed now come with it (its line stands where its
        first was) though they came after the one still waiting: they read as a line each."""
        world = st.world_size or len(st.ranks)
        ranks: dict[tuple, set[int]] = {}
        seen = self._first_seen
        for ev in fresh:
            seen.setdefault(ev.hseq, now)
            key = alike_key(ev)
            if key is not None:
                ranks.setdefault(key, set()).add(ev.rank)
        for i, ev in enumerate(fresh):
            key = alike_key(ev)
            if key is None or len(ranks[key]) >= world:
                continue
            if now - seen[ev.hseq] < GROUP_WAIT_S:
                upto = fresh[i - 1].hseq if i else self._printed_hseq
                keys = {k for k in map(alike_key, fresh[:i]) if k is not None}
                return fresh[:i] + [m for m in fresh[i + 1:] if alike_key(m) in keys], upto
        return fresh, fresh[-1].hseq if fresh else self._printed_hseq

    def _hub_quiet_s(self, now: float) -> float | None:
        """Seconds since a live hub's last frame, when longer than HUB_QUIET_S (a hub stopped
        with SIGSTOP, swapped out or cut off showed its last figures as if they were current).
        Not before its first frame, nor once the run is over (its hub then stops)."""
        source = self.source
        if not getattr(source, "live", False):
            return None
        t = getattr(source, "last_frame_t", None)
        if t is None or (self._frame_t is None and not getattr(source, "synced", True)):
            return None
        if t != self._frame_t:
            self._frame_t, self._frame_at = t, now
        quiet = now - self._frame_at
        return quiet if quiet > HUB_QUIET_S and not run_over(source.state) else None

    def hub_lost_text(self, quiet_s: float | None, *, short: bool = False) -> str:
        """On a node > 0, node 0's hub quiet for ``quiet_s`` (:meth:`_hub_quiet_s`) past
        HUB_LOST_S: "node 0's hub (tcp://...) unreachable for 45 s: node 0 may be down or cut
        off from this node" (the warning's), or (``short``, a progress line's) "...: node 0 may
        be lost, the ranks here then wait for it"; '' otherwise."""
        return hub_lost_words(self.remote_hub, quiet_s, short=short)

    def close(self) -> None:
        """Stop the bar (it stays on screen as the last state); lines need nothing."""
        if self._progress is not None:
            self._progress.stop()
            self._stopped_bar, self._progress = self._progress, None

    def follow(self, done, poll_s: float = 0.1) -> None:
        """Print until ``done()`` is true, then a last progress line (or the bar's last state)."""
        try:
            while not done():
                self.update()
                time.sleep(poll_s)
            self.update(force=True)
        finally:
            self.close()


EVENT_TEXT_MAX = 400
"""Characters of an event's message a progress line shows (the log keeps it whole)."""


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
            if is_stop(ev):  # (as the ranks' status says it: "2 stopped", not a failure's words)
                return f"[exit] {who} {stop_text(ev.rank, ev.code, ev.message)}"
            return "" if not ev.code else f"[exit] {who} exited with code {ev.code}"
        if ev.name == "error":  # (the original error of one a DataLoader worker raised, as the root cause says it)
            return f"[error] {who}: {short_error(ev.message, EVENT_TEXT_MAX, ev.traceback) or 'error'}"
        if ev.name in ("hub", "epoch_end"):
            return ""
        if ev.name == "join":  # ("[join] rank 0 ran out of inputs at step 400 and joined: ...")
            return f"[join] {who} {' '.join((ev.message or 'joined').split())[:EVENT_TEXT_MAX]}"
        if torchrun_restart(ev):
            return f"[restart] {who} restarted by torchrun" + (f" (restart {ev.code})" if ev.code else "")
        if launcher_stopping(ev):
            return f"[stopping] {who} being stopped {ev.message}".rstrip()
        took = took if several else ev.duration_s
        text = " ".join((ev.message or "").split())  # one line, whatever a rank sent
        if len(text) > EVENT_TEXT_MAX:
            text = text[: EVENT_TEXT_MAX - 1] + "…"
        line = f"[{ev.name or 'event'}] {who}: {text}".rstrip(": ")
        if ev.name == "checkpoint":
            # (its step: a script's "/ckpt/snapshot.pt" of every save said none; a save to a
            # file object with no name says no path: "[checkpoint] rank 0 (3 ms)")
            at = f" at step {ev.step}" if ev.step is not None else ""
            line = f"[checkpoint] {who}{at}: {text}" if text else f"[checkpoint] {who} saved{at}"
        if ev.name == "eval":  # (one before any step read "after step 0")
            line = f"[eval] {who} after step {ev.step}" if ev.step else f"[eval] {who} before the first step"
        if took is not None and ev.name in ("checkpoint", "resume", "eval"):
            # (in ms under 0.1 s: a fast evaluation read "0.00 s")
            line += f" ({'slowest ' if several else ''}{took_text(took)})"
        if ev.name == "eval" and text:  # ("cut short": one a stop ended read as done)
            line += f": {text}"
        return line
    return ""


LOSS_GROUPS_SAID = 3
"""Ranks whose loss is not finite are said in groups of one value and step, this many at most
(the rest counted): under DDP a NaN reaches every rank through the gradients' all-reduce."""


def hub_lost_words(remote_hub: str, quiet_s: float | None, *, short: bool = False) -> str:
    """On a node > 0 (``remote_hub``: node 0's hub, as the user gave it), that hub quiet for
    ``quiet_s`` past HUB_LOST_S: "node 0's hub (tcp://...) unreachable for 45 s: node 0 may be
    down or cut off from this node" (the warning's), or (``short``: a progress line's, the TUI
    header's) "...: node 0 may be lost, the ranks here then wait for it"; '' otherwise."""
    if not remote_hub or quiet_s is None or quiet_s < HUB_LOST_S:
        return ""
    said = f"node 0's hub ({remote_hub}) unreachable for {quiet_s:.0f} s"
    return f"{said}: node 0 may be lost, the ranks here then wait for it" if short else f"{said}: node 0 may be down or cut off from this node"


HUB_LOST_WARNING = ("; if so, the ranks here wait for it in their next collective (up to the backend's timeout, 30 min for gloo "
                    "by default), and what they do from now on is in no log")  # fmt: skip
"""What the warning that node 0's hub is unreachable says after :func:`hub_lost_words`."""


BETWEEN_STEPS_SAID = 0.5
"""The ranks' median share of their step time between steps (data_s) from which a launch's last
line says it..."""
BETWEEN_STEPS_MIN_S = 0.005
"""...where that is this long a step or more."""


def between_steps_of(r, last: int | None = None) -> tuple[float, float, int] | None:
    """A rank's median share of its step time between steps (data_s) and its median seconds
    there, over its history points (``last``: its last that many), and how many points had both;
    None where none did. Each step's share, their median: a first step that held a script's work
    before its training, 30 passes of gradient statistics, is one step, not most of the run's time."""
    h = r.history
    data, step = h["data_s"].values(), h["step_s"].values()
    if last is not None:
        data, step = data[-last:], step[-last:]
    pairs = sorted((d / s, d) for d, s in zip(data, step) if math.isfinite(d) and math.isfinite(s) and s > 0)
    if not pairs:
        return None
    return pairs[len(pairs) // 2][0], statistics.median(d for _, d in pairs), len(pairs)


def job_between_steps(found: list[tuple[float, float, int]]) -> float | None:
    """Of the ranks' :func:`between_steps_of`, the job's share of each step between steps where
    it is worth saying (BETWEEN_STEPS_SAID or more, BETWEEN_STEPS_MIN_S a step or more); None
    otherwise. The least of the ranks': every rank's, as the alert says it. One rank slow in its
    data, the others waiting for it in comm, is a straggler, not a job spending its steps
    between them (the launch's last line said "each step 80% between steps" of such a job, the
    slow rank's share; the alert "every rank spends 70%" of 3 ranks, one of them at 4%, waiting
    for the two others, review 332)."""
    if not found:
        return None
    share = min(f[0] for f in found)
    if share < BETWEEN_STEPS_SAID or min(f[1] for f in found) < BETWEEN_STEPS_MIN_S:
        # (a small model's steps of a millisecond spend half of it in the loop's own Python:
        # nothing to act on, and every such run said it)
        return None
    return share


def between_steps_said(st) -> str:
    """"each step 76% between steps (...)" where the ranks spent half their steps or more between
    them over their last history points (:func:`job_between_steps`); '' otherwise. A job
    input-bound, or whose logging took three quarters of each step, ended on "pardash: done, 2
    rank(s), step 200", only the report saying it (review 314)."""
    share = job_between_steps([found for r in st.ranks.values() if (found := between_steps_of(r)) is not None])
    if share is None:
        return ""
    return f"each step {share * 100:.0f}% between steps (loading data or the script's own work: `pardash report` tells them apart)"


def loss_figure(st) -> str:
    """"loss med 0.4123": the median over the ranks of each one's newest step's loss, the figure
    the loss chart draws ('' while no rank has given a finite one; "loss 0.4123" of one rank).
    A headless run showed no loss at all (only one that turned nan): a nohup or CI user read it
    from the report. (Said a median: beside a trainer's own lines, rank 0's loss, the two
    differed and nothing said why, review 292.)"""
    losses = sorted(s.loss for r in st.ranks.values() if (s := r.step) is not None and s.loss is not None and math.isfinite(s.loss))
    if not losses:
        return ""
    n = len(losses)
    median = losses[n // 2] if n % 2 else (losses[n // 2 - 1] + losses[n // 2]) / 2
    # (a median of the job's ranks however many give a finite one: "loss 2.9" of 4 ranks, 3 of
    # them at nan, read as the job's loss, review 305; which ranks are not finite is said apart)
    if n > 1 and losses[-1] - losses[0] > LOSS_APART * abs(median):
        # Ranks far apart (one rank's data gone bad: 0.197 and 19.04) have a median that is
        # neither's: "loss med 9.619" said nothing of it (review 306). Their spread is said, as
        # the step times' is.
        return f"loss min/med/max {losses[0]:.4g}/{median:.4g}/{losses[-1]:.4g}"
    return f"loss {'med ' if len(st.ranks) > 1 else ''}{median:.4g}"


LOSS_APART = 0.5
"""Ranks' losses whose largest and smallest are further apart than this share of their median
are said as min/med/max on a progress line, not as the median alone."""


def loss_text(st, *, over: bool = False) -> str:
    """"rank 1's loss is nan since step 100" while ranks' losses are not finite (their steps go
    on without one: nothing else says so), '' while none is; ``over``: the run is over, "rank
    1's loss was nan from step 100 to the end"."""
    groups: dict[tuple[str, int], list[int]] = {}
    for r in st.ranks.values():
        bad = r.loss_not_finite
        if bad is not None:
            groups.setdefault(bad, []).append(r.rank)
    if not groups:
        return ""
    ordered = sorted(groups.items(), key=lambda g: (g[0][1], g[1][0]))  # (from the first to turn so)
    said = []
    for (value, step), ranks in ordered[:LOSS_GROUPS_SAID]:
        who = ranks_named(ranks) + ("'s" if len(ranks) == 1 else "'")  # "rank 1's", "ranks 0-3'"
        said.append(f"{who} loss was {value} from step {step} to the end" if over else f"{who} loss is {value} since step {step}")
    more = sum(len(ranks) for _, ranks in ordered[LOSS_GROUPS_SAID:])
    if more:
        said.append(f"{more} more rank{'s' if more != 1 else ''}' loss {'was' if over else 'is'} not finite")
    return ", ".join(said)


def hang_text(st) -> str:
    """'likely waiting for rank 3' while the job hangs on ranks it can name (analysis.hang_causes),
    'in different collectives (rank 0 in barrier, rank 1 in all_reduce): ...' where its ranks wait
    in collectives that do not match (analysis.different_collectives), else ''."""
    hang = stuck_ranks(st)
    causes = hang_causes(hang, sharded=is_sharded(st.strategy))
    if causes:
        return f"likely waiting for {ranks_named(sorted(causes))}"
    return collectives_words(different_collectives(st, hang))


def recent_spread(st, figure: str) -> tuple[float, float, float] | None:
    """Min, median and max over the ranks of each rank's ``figure`` ("step_s" or "self_s") as
    the grid shows it: its median over its last SMOOTH_STEPS steps, which the hub works out from
    every step (its last step's own where that is not known: a hub before these, a process
    restarted). Each rank's last step alone read "step ms min/med/max 15.4/15.7/16.1" at the end
    of a run whose ranks' last five steps took 16-18 ms (the report: median 17.7)."""
    at = SMOOTH_FIGURES.index(figure)
    values = []
    out = ran_out_apart(st)  # (out of inputs under DDP's Join: their last steps are not the job's now)
    for r in st.ranks.values():
        if r.step is None or r.rank in out:
            continue
        x = r.smooth[at] if r.smooth is not None and r.smooth[at] is not None else getattr(r.step, figure)
        if x is not None:
            values.append(x)
    return spread(values)


def refused_texts(rejected: dict[str, int] | None) -> list[str]:
    """What the hub refused (its counts by reason), for a progress line: the records, and apart
    from them the connections that brought no key it admits. Those are a node's reconnection
    attempts, about 40 a second: "825 refused by the hub" read as records refused, an attack."""
    if not rejected:
        return []
    no_key = rejected.get("no_key", 0)
    records = sum(rejected.values()) - no_key
    out = [f"{records:,} refused by the hub"] if records else []
    if no_key:
        out.append(f"{no_key:,} connection{'s' if no_key != 1 else ''} refused (no key)")
    return out


def progress_stats(st, rejected: dict[str, int] | None = None, *, hub_quiet_s: float | None = None) -> str:
    """What the bar shows beside step/total: samples/s, step time spread, rank states (and,
    ``hub_quiet_s``, how long the hub has sent nothing)."""
    return progress_stats_forms(st, rejected, hub_quiet_s=hub_quiet_s)[0]


def progress_stats_forms(st, rejected: dict[str, int] | None = None, *, hub_quiet_s: float | None = None,
                         hub_lost: str = "") -> list[str]:  # fmt: skip
    """:func:`progress_stats` whole, then shorter, for a narrower terminal: without the step
    time spread, then without the rate. The ranks' states and what is wrong (a hang, a loss not
    finite, messages lost, a quiet hub) stay in each. ``hub_lost``: node 0's hub is unreachable
    (see :meth:`ProgressPrinter.hub_lost_text`): said instead of the figures, which are stale."""
    if hub_lost:
        return [hub_lost]
    rate = rate_text(st)
    sp = recent_spread(st, "step_s")
    spread_text = "step ms " + "/".join(ms(x) for x in sp) + " min/med/max" if sp else ""
    tail = [states_text(st), hang_text(st), loss_text(st, over=run_over(st))]
    if st.lost:
        tail.append(f"{st.lost} lost")
    tail.extend(refused_texts(rejected))
    if hub_quiet_s is not None:
        tail.append(f"hub quiet for {hub_quiet_s:.0f} s")
    forms = []
    loss = loss_figure(st)
    for parts in ([loss, rate, spread_text, *tail], [loss, rate, *tail], [loss, *tail], tail):
        form = " | ".join(p for p in parts if p)
        if form not in forms:
            forms.append(form)
    return forms


BAR_WIDTH = 30
"""Cells of the progress bar where the terminal is wide enough for it and the stats whole."""

BAR_MIN_WIDTH = 10
"""Cells below which the bar gives way to a shorter form of the stats, then to none."""

BUSY_STATES = {"checkpoint": "saving", "eval": "evaluating", "resume": "resuming"}
"""What a working rank whose heartbeat says it is in one of these phases (analysis.BUSY_PHASES)
is said to be doing: a save of 6 s read "2 running" beside a step that stood still."""


def _stopped_or(r, left: dict[int, int | None]) -> str:
    """The rank's status, but "stopped" for one that exited by a stop (failures.STOPPED_CODES),
    as the report and Prometheus say it: a Ctrl-C's end read "2 exited", a failure's word; and
    "left early" for one of ``left`` (failures.left_early: "1 exited, 1 finished" of a run whose
    failure line named the rank that had left the job the root cause)."""
    status = status_of(r, left)
    return "stopped" if status == EXITED and r.ended_in_stop else status


def states_text(st) -> str:
    """How many ranks are in each state ("1 running, 1 saving"): a working rank whose heartbeat
    says it saves, evaluates or loads a checkpoint is said so (see BUSY_STATES)."""
    counts: dict[str, int] = {}
    left = left_early(st)
    for r in st.ranks.values():
        status = _stopped_or(r, left)
        hb = r.heartbeat
        if status in (RUNNING, STARTING) and hb is not None:
            busy = BUSY_STATES.get(hb.phase)
            # (a heartbeat from before the rank's latest step is of a phase it has left)
            if busy and (r.step is None or hb.step >= r.step.step):
                status = busy
        if status in (RUNNING, STARTING) and r.stopping is not None:
            status = "stopping"  # (a slow stop's seconds read "2 running" until the ranks ended)
        elif status in (RUNNING, STRAGGLER) and r.joined:
            status = JOINED  # (out of inputs under DDP's Join: it read "1 stalled")
        counts[status] = counts.get(status, 0) + 1
    if counts.get(STALLED):
        # (as the TUI and `ps` say a hang: its likely cause stalled, the others waiting for it)
        waiting = min(waiting_count(st), counts[STALLED])
        if waiting:
            counts[STALLED] -= waiting
            counts["waiting"] = waiting
            if not counts[STALLED]:
                del counts[STALLED]
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def progress_step(st) -> int | None:
    """The run's step as its progress says it: the slowest rank's, a rank whose process has
    taken no step yet counted at the step it resumed from (its "resume" event); None while no
    rank's is known. A rank that may resume (torchrun restarted it, or the run's config resumes
    from a checkpoint) and has not said where is not counted: its previous process's last step
    ("step 29/60 | 2 starting" of a job that went on from step 20), or 0 before a --resume's
    load, read as where the run stood."""
    steps = []
    unsure = set()
    config = (st.hello.config or {}) if st.hello is not None else {}
    may_resume = bool(config.get("checkpoint_dir") and config.get("resume"))
    out = ran_out_apart(st)
    for r in st.ranks.values():
        hb = r.heartbeat
        if r.rank in out:
            continue  # (out of inputs under DDP's Join: the ranks still stepping say how far the job is)
        if r.step is not None:
            steps.append(r.step.step)
        elif r.restarts or r.step_before is not None or may_resume or (hb is not None and hb.phase == "resume"):
            unsure.add(r.rank)
    if unsure:
        steps.extend(_resumed_steps(st, unsure).values())
    if steps:
        return min(steps)
    return None if unsure else 0


def _resumed_steps(st, ranks: set[int]) -> dict[int, int]:
    """Rank -> the step its current process resumed from, of ``ranks``, where its "resume"
    event is among the events kept (not one before torchrun's restart of it)."""
    found: dict[int, int] = {}
    left = set(ranks)
    for ev in reversed(st.events):
        if not left:
            break
        if not isinstance(ev, schema.Event) or ev.rank not in left:
            continue
        if torchrun_restart(ev):
            left.discard(ev.rank)  # (its resumes before are of its earlier processes)
        elif ev.name == "resume" and ev.seq >= 0 and ev.step is not None:
            found[ev.rank] = ev.step
            left.discard(ev.rank)
    return found


def rate_measured(st) -> bool:
    """Whether every working rank's rate (the ranks :func:`samples_per_s` sums) is measured
    over two steps or more: its history holds two of its steps, its latest not its first. A
    rank's first step alone is no rate (its time starts where the reporter first looked:
    "4,002 samples/s" of a job at 1,180 after its first step of 54 ms)."""
    for r in st.ranks.values():
        s = r.step
        if s is None or s.step_s <= 0 or r.exit_code is not None or r.finished or r.stalled is not None or r.silent is not None:
            continue
        before = r.history.ago("step", 1)
        if before is None or not before < s.step or r.history.ago("step", 0) != s.step:
            return False
    return True


def rate_text(st) -> str:
    """Samples a second now; once every rank is done, what they ran at over their last steps
    ("at the end": not the run's average, which `pardash report` gives), by the wall clock,
    evaluations between the steps in (the report's leaves them out: two figures for one run
    read as if one were wrong); '' before a first step."""
    sps = samples_per_s(st)
    if sps > 0:
        return f"{sps:,.0f} samples/s" if rate_measured(st) else ""
    stuck = [r for r in st.ranks.values() if (r.stalled is not None or r.silent is not None) and not r.finished]
    if any(r.exit_code is None for r in stuck):
        return "0 samples/s"  # stuck
    if stuck:  # ended stuck (stopped, killed): its last steps' rate is not how it ended
        return "0 samples/s at the end (stalled)"
    recent = samples_per_s_recent(st)
    if recent <= 0:
        return ""
    # (its last stretch of steady steps: of a job held up now and then, since its last pause:
    # "10,332 samples/s" of a job at 2,500, review 333)
    return f"{recent:,.0f} wall-clock samples/s at the end" + (", since the last held-up pause (`pardash report` counts them)" if st.held_up_s else "")


def progress_line(st, elapsed_s: float, rejected: dict[str, int] | None = None, *, hub_quiet_s: float | None = None,
                  hub_lost: str = "", hub_behind_s: float = 0.0) -> str:  # fmt: skip
    """A headless progress line (step and self ms: the ranks' spread of their recent medians,
    :func:`recent_spread`; no step while none is known, see :func:`progress_step`);
    ``hub_quiet_s``: seconds the hub has sent nothing (its figures are as of then), when it is
    quiet. ``hub_lost``: node 0's hub unreachable (:meth:`ProgressPrinter.hub_lost_text`): the
    line is the step last heard and that, not the rates and the ranks' states as they were
    ("2 running" of a rank held in an all-reduce with a node powered off, for minutes).
    ``hub_behind_s``: how far behind the ranks the hub is (HubStats.behind_s), said from
    BEHIND_SAID_S."""
    hello = st.hello
    total = total_steps(hello)
    at = progress_step(st)
    step = "" if at is None else f"step {at}" + (f"/{total}" if total else "")
    if step and (left := time_left_s(st, total)) is not None:
        step += f" ({span_text(left)} left)"  # (the TUI's header said it, the headless lines not)
    if hub_lost:
        return f"[{elapsed_s:6.1f}s] " + " | ".join(p for p in (step and f"{step} when last heard", hub_lost) if p)
    parts = [step, loss_figure(st), rate_text(st)]
    sp = recent_spread(st, "step_s")
    if sp:
        parts.append("step ms min/med/max " + "/".join(ms(x) for x in sp))
    ss = recent_spread(st, "self_s")
    if ss:
        parts.append("self ms " + "/".join(ms(x) for x in ss))
    hs = held_spread(st)
    if hs:
        lo, _, hi = hs
        low, high = human_bytes(lo), human_bytes(hi)
        held = high if low == high else f"{low}..{high}"  # (FSDP's padded shards: "1.0 MiB..1.0 MiB")
        parts.append(f"held/rank {held}")
    parts.append(states_text(st))
    parts.append(hang_text(st))
    parts.append(loss_text(st, over=run_over(st)))
    if st.lost:
        parts.append(f"{st.lost} lost")
    parts.extend(refused_texts(rejected))
    if hub_quiet_s is not None:
        parts.append(f"hub quiet for {hub_quiet_s:.0f} s")
    elif hub_behind_s >= BEHIND_SAID_S:
        parts.append(f"hub {hub_behind_s:.0f} s behind the ranks")
    return f"[{elapsed_s:6.1f}s] " + " | ".join(p for p in parts if p)


BEHIND_SAID_S = 3.0
"""A hub this far behind the ranks (HubStats.behind_s) is said: past a heartbeat or two (a
frame's wait, a busy moment), what the lines say is old (a hub on 2 busy cores fell a minute
behind 4096 ranks, its lines "4096 running" of ranks stalled long since)."""


UNGROUPED: frozenset[str] = frozenset()
"""Events said once for each rank, whatever the others say (none now). Any event every rank
sends alike (a save, a resume, an epoch's end, a clean exit, a script's own
``pardash.event("my_eval", ...)``), the same name, step and text from several ranks taken in one
refresh, is one line naming the ranks, in the progress lines and the TUI's event log. Errors are
alike where their last lines are but for their numbers (see :data:`_NUMBERS`)."""

_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")
"""What sets apart the same error of several ranks: each names its rank, its collective's
sequence number, how long it waited ("[Rank 1021] Watchdog caught collective operation timeout:
WorkNCCL(SeqNum=4243, ...) ran for 607147 milliseconds"). Said once for every rank, 1023 ranks'
watchdog timeouts were 1023 entries of the TUI's event log, four rows each, the hang's verdicts
thousands of rows up; one of them is said, its traceback the first rank's."""


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
    event (name, step, text, code; not in :data:`UNGROUPED`) or :data:`GROUPED_VERDICTS` verdict from
    several ranks is one entry, where the first of them was; anything else is an entry of its
    own (ranks None)."""
    out: list[list] = []
    alike: dict[tuple, list] = {}
    files: dict[int, dict[int, dict[str, float]]] = {}
    """id(entry) -> rank -> path -> its time: a checkpoint's files (see :func:`_saved_files`)."""
    differ: set[int] = set()
    """id(entry) of the errors whose ranks' words differ (in their numbers: see alike_key)."""
    for m in msgs:
        key = alike_key(m)
        if key is not None:
            entry = alike.get(key)
            if entry is None:
                entry = alike[key] = [m, {}, None]  # ranks as a dict: ordered, and 1024 of them are cheap to look up
                out.append(entry)
            elif key[-1] == "error" and (m.message, m.traceback) != (entry[0].message, entry[0].traceback):
                differ.add(id(entry))
            entry[1][m.rank] = None  # a rank that said it twice is named once
            took = m.duration_s if isinstance(m, schema.Event) else None
            if key[-1] == "files":
                mine = files.setdefault(id(entry), {}).setdefault(m.rank, {})
                before = mine.get(m.message)
                mine[m.message] = took if before is None else before if took is None else max(before, took)
            if took is not None and (entry[2] is None or took > entry[2]):
                entry[2] = took
        else:
            out.append([m, None, None])
    for entry in out:
        by_rank = files.get(id(entry))
        if by_rank is not None:
            _saved_files(entry, by_rank)
        elif id(entry) in differ:
            # One rank's words for all of them, said to be its: ranks that failed each on its own
            # shard read "ranks 0-1: FileNotFoundError: ... shard_0001_of_0002.bin", rank 0's
            # path as rank 1's (each rank's own is in its detail, the alerts and the report).
            m = entry[0]
            note = f" (rank {m.rank}'s; the others' differ in their numbers)"
            said = short_error(m.message, 160 - len(note), m.traceback) or "error"  # (the event log's cut: the note kept)
            entry[0] = msgspec.structs.replace(m, message=said + note, traceback=None)
    # An error taken right after exits it caused (the ranks torchrun stopped, heard from first:
    # the hub takes from each rank in turn) goes ahead of them: the cause, then its
    # consequence. Only over the failed exits just before it, of the moments before it (the
    # whole history goes through here when the event log is written again).
    # So does a rank's failed exit taken after the exits of the ranks stopped because of it.
    ordered: list[list] = []
    for entry in out:
        m = entry[0]
        at = len(ordered)
        over = _failed_exit if _is_event(m, "error") else _stopped_exit if _failed_exit(m) and not _stopped_exit(m) else None
        if over is not None:
            while at and over(ordered[at - 1][0]) and abs(m.t - ordered[at - 1][0].t) <= ERROR_AHEAD_S:
                at -= 1
        ordered.insert(at, entry)
    return [(m, list(ranks) if ranks is not None else None, took) for m, ranks, took in ordered]


def _saved_files(entry: list, by_rank: dict[int, dict[str, float]]) -> None:
    """A checkpoint's ``entry`` of :func:`group_alike` whose ranks wrote several files
    (``by_rank``: rank -> path -> its time) said as one save: their folder and how many, each
    rank's time its files' summed (written back to back), the slowest rank's. A Hugging Face
    Trainer's save read as a line each for ``optimizer.pt`` and every rank's ``rng_state_N.pth``
    (9 lines a save of 8 ranks), the folder that is the checkpoint named by none of them. A
    folder named by the step (``checkpoint-10``) is the checkpoint's own; in another (every
    save's, ``ckpt/``), the first file is named."""
    paths = {path for mine in by_rank.values() for path in mine}
    if len(paths) < 2:
        return
    m = entry[0]
    # (a file that said no time adds none; none that said one: no time, "(slowest 0 ms)" it read)
    sums = [sum(t for t in mine.values() if t is not None) for mine in by_rank.values()]
    took = max(sums) if any(t is not None for mine in by_rank.values() for t in mine.values()) else None
    folder = os.path.dirname(m.message)
    if named_by_step(folder, m.step):
        said = f"{folder}{os.sep}, {len(paths)} files"
    else:  # (a folder every save writes into, Lightning's: the first file tells the checkpoint, as the report says it)
        more = len(paths) - 1
        said = f"{m.message} and {more} more file{'s' if more > 1 else ''}"
    entry[0] = msgspec.structs.replace(m, message=said, duration_s=took)
    entry[2] = took


def alike_key(m: schema.Message) -> tuple | None:
    """What makes ``m`` alike the same event or verdict of other ranks (see :func:`group_alike`);
    None for a message said once for itself."""
    if isinstance(m, schema.Event) and m.rank >= 0 and m.name not in UNGROUPED:
        # (a script's own events too: "my_eval" of 256 ranks was 256 lines)
        # (torchrun's restart, said by the hub or the launcher: its text names its rank and
        # pid, alike by its count; a script's own event of that name is any event)
        if m.name == "error":
            said = short_error(m.message, 1000, m.traceback) or ""
            return (m.name, m.step, _NUMBERS.sub("N", said), m.code, "error")
        if m.name == "checkpoint" and m.message and os.sep in m.message:
            # (a save's files in one folder, of every rank, at one step: one save, see
            # _saved_files; a message of the script's own, "best model (acc 0.91)", no file)
            return (m.name, m.step, os.path.dirname(m.message), m.code, "files")
        return (m.name, m.step, "" if torchrun_restart(m) else m.message, m.code)
    if isinstance(m, schema.Verdict) and m.rank >= 0 and m.verdict in GROUPED_VERDICTS:
        tail = verdict_tail(m)
        if tail is not None:
            return ("verdict", m.verdict, m.cause, m.step, _SECONDS.sub("N s", tail))
    return None


GROUP_WAIT_S = 1.0
"""How long the progress lines hold an event other ranks may still say alike (see
ProgressPrinter._group_wait)."""

ERROR_AHEAD_S = 5.0
"""How far apart (seconds) an error and the exits it goes ahead of may be (see group_alike)."""


def _is_event(m: schema.Message, name: str) -> bool:
    return isinstance(m, schema.Event) and m.name == name


def _failed_exit(m: schema.Message) -> bool:
    return _is_event(m, "exit") and bool(m.code)


def _stopped_exit(m: schema.Message) -> bool:
    return _is_event(m, "exit") and m.code in STOPPED_CODES


HUB_LOST_S = 15.0
"""A node > 0's launch whose ranks live says node 0's hub unreachable once it has sent nothing
for this long (it frames at 10 Hz: 150 frames; a busy host delays a few seconds at most):
node 0 may be down or cut off, and the ranks here then wait for it."""

HUB_GONE_S = 5.0
"""A live hub sends a frame ten times a second, messages or not: this long without one, and it
has stopped (or cannot be reached)."""


def follow_attached(printer: ProgressPrinter, source, gone_s: float = HUB_GONE_S) -> str:
    """Print a live run until it is over or its hub is gone (a viewer attached to a run that
    ended must not print its last state for ever); returns the closing line.

    Over: every rank has finished or exited, and the job's supervisor (when the registry names
    it) has ended too: with ``--max-restarts`` torchrun may start the ranks again. Gone: no frame
    for ``gone_s`` while neither the hub nor the supervisor lives (a hub restarted on a long log
    sends none while it reads it back)."""
    from .registry import job_result, pid_alive

    info = getattr(source, "info", None) or {}
    supervisor, hub = info.get("supervisor_pid"), info.get("pid")
    seen = {"t": source.last_frame_t, "at": time.monotonic()}

    def job_alive() -> bool:
        # (a supervisor lives on after its job while the launch's TUI is open: its result says
        # the job ended)
        return bool(supervisor) and pid_alive(supervisor) and job_result(info) is None

    def done() -> bool:
        if source.last_frame_t != seen["t"]:
            seen["t"], seen["at"] = source.last_frame_t, time.monotonic()
        if run_over(source.state) and not job_alive():
            return True
        if getattr(source, "ended_early", None) is not None and not job_alive():
            # (the hub said it stopped, ranks not ended, and no supervisor will restart it: a
            # launched job's hub stopped by a SIGTERM is restarted, and its job trains on)
            return True
        quiet = time.monotonic() - seen["at"] > gone_s
        return quiet and not job_alive() and not (bool(hub) and pid_alive(hub))

    printer.follow(done)
    st = source.state
    counts = states_text(st)
    refused = getattr(source, "refused", "")
    if refused and not run_over(st):
        # (its warning said the hub refuses this viewer, and the line after it blamed the
        # hub's liveness: "the hub has sent nothing for 5 s (stopped, or out of reach)")
        return f"pardash: stopped watching: the hub refuses this viewer now: {refused}; last seen: {counts or 'no ranks'}"
    if run_over(st):
        f = failure_summary(st)
        loss = loss_text(st, over=True)
        return f"pardash: the run is over: {counts}" + (f"; {f['line']}" if f else "") + (f"; {loss}" if loss else "")
    loss = loss_text(st)
    early = getattr(source, "ended_early", None)
    if early is not None and not job_alive():
        n = early["running"]
        return (f"pardash: the hub stopped at step {early['step']} with {n} rank{'s' if n != 1 else ''} not ended (no word of "
                f"their end); last seen: {counts}" + (f"; {loss}" if loss else ""))  # fmt: skip
    return f"pardash: the hub has sent nothing for {gone_s:.0f} s (stopped, or out of reach); last seen: {counts or 'no ranks'}" + (f"; {loss}" if loss else "")


def _progress_text(st) -> str:
    """How far a finished job went: its step, or that it took none ("step 0" read as a run that
    trained nothing by mistake, where a resume from a checkpoint already at --steps had nothing
    left to train, as its own warning says)."""
    last = [s for s in (r.last_step for r in st.ranks.values()) if s is not None]
    if any(r.step is not None for r in st.ranks.values()):
        top, low = max(last), min(last)
        if top > low:
            out = st.ran_out()
            if out and all(r.last_step == top or r.rank in out for r in st.ranks.values() if r.last_step is not None):
                # Ranks that ran out of inputs under DDP's Join, as they said it: by design, not
                # a rank behind ("step 800 (last step 400 on the slowest rank)", review 335)
                said = joined_words({q: st.ranks[q].joined_at for q in out}, top)
                return f"step {top}" + (f" ({said})" if said else "")
            # Ranks that ended at different steps (a rank done early): both, as report says
            return f"step {top} (last step {low} on the slowest rank)"
        return f"step {st.step}"
    resumed = [m.step for m in st.events if isinstance(m, schema.Event) and m.name == "resume" and m.step is not None]
    return "no step taken" + (f" (resumed at step {max(resumed)}, nothing left to train)" if resumed else "")


def memory_growing_were(st) -> str:
    """"rank 1's memory grew 1.6 MiB a step to the end (a leak? `pardash report` says more)" of a
    job that ended with ranks said growing (the hub's memory_growing verdicts not cleared); ''
    otherwise. A rank killed by the OOM killer reads "exited with code -9": this says why."""
    said = []
    for v in st.memory_growing.values():
        head, _, _ = (v.message or "").partition(" (")
        if head:
            said.append(head.replace(" grows ", " grew ", 1))
    return f"{'; '.join(said)} to the end (a leak? `pardash report` says more)" if said else ""


def outcome_line(st, code: int, result: dict, log_path: str, log_error: str = "", output: str = "", refused: str = "",
                 no_key: int = 0) -> str:
    """The launcher's last line: success, or the one-line cause of a failure (``log_error``:
    the hub's last word on the log, when it could not write it). ``output``: the file of the
    ranks' output when it was not on the screen (the TUI stood there): a failure's line then
    says its error and where the rest is, which is otherwise just above it. ``refused``: why
    the hub refuses the launch's viewer at the end ('' when it takes it)."""
    out = f"output {output}; " if output else ""
    # (a success's too: under the TUI the script's own prints went to the file alone, and its
    # last line named only the log, so where they went was in the README)
    kept = f"; output {output}" if output else ""
    if refused and not st.ranks:
        # The hub refused the launch's viewer and showed it no rank: a node > 0 whose keys are
        # not node 0's hub's, its ranks carrying the same keys. "done, 0 rank(s), no step taken,
        # log kept by node 0's hub" was false in every part of a node whose ranks trained to the
        # end, none of it kept. What this node knows is its exit code.
        how = "stopped " + (result.get("stopper") or "by you") if result.get("stopped") else "this node's ranks ended" if code == 0 else "the job failed"
        why = refused.replace("this viewer", "this node")
        seen = f"their output ({output}) says" if output else "their output above says"
        return (f"pardash: {how} (exit code {code}), but the hub refused this node's telemetry: {why}; nothing of this "
                f"node's ranks is in the log {log_path}: {seen} how far they went")  # fmt: skip
    log = f"log {log_path}" + (f" (incomplete: {log_error})" if log_error else "")
    said = "".join(f"; {n}" for n in restart_notes(st, result))
    loss = loss_text(st, over=True)
    if loss:  # (nothing else of the run says it: its steps went on without a loss)
        said += f"; {loss}"
    if grew := memory_growing_were(st):
        said += f"; {grew}"
    f = failure_summary(st)
    if code == 0:
        if f is not None:
            # This node's ranks all finished (torchrun ended with 0), another node's failed.
            return f"pardash: this node's ranks finished, but the job failed: {failure_line(f)}{said}; {out}{log}"
        # (a hub given up saw the run to that step only: its end is the job's exit code's word)
        seen = " when telemetry stopped" if result.get("hub_given_up") else ""
        unheard = sorted(set(range(st.world_size)) - set(st.ranks))
        if st.ranks and unheard:
            # (node 0 of a job whose other node's keys its hub refused read "done, 1 rank(s),
            # step 250" of a world of 2, as if that were the job)
            them = "them" if len(unheard) > 1 else "it"
            # (and why, where the hub knows it: `report` said it, the launch's last line did not)
            said += f"; {ranks_named(unheard)} of {st.world_size} never heard from: {unheard_why(no_key) or f'nothing of {them} in the log'}"
        if slow := stragglers_were(st):
            # (the TUI said it as the run ended; a headless launch's last line, what a CI job's
            # log is read by, said only "done")
            said += f"; {slow}"
        if held := held_up_were(st):
            said += f"; {held}"
        if between := between_steps_said(st):
            said += f"; {between}"
        return f"pardash: done, {len(st.ranks)} rank(s), {_progress_text(st)}{seen}{said}, {log}{kept}"
    if result.get("stopped"):
        # A rank that failed of itself (its own error, or a signal not the stop's) before the
        # stop: said, or the stop during torchrun's teardown hid the failure.
        failed = _failed_of_itself(f, st, result.get("stop_t"))
        how = f" after the job failed: {_last_line_failure(f)}" if failed else as_it_hung(st)
        return f"pardash: stopped {result.get('stopper') or 'by you'}{how} (exit code {code}){said}; {out}{log}"
    killed = int(result.get("torchrun_killed") or 0)
    if killed and (f is None or f["code"] == -signal.SIGTERM):
        # No rank failed of itself: torchrun died (the OOM killer?) and its ranks were stopped.
        how = signal_name(-killed) or f"signal {killed}"
        return f"pardash: torchrun itself was killed ({how}) and its ranks were stopped at step {st.step}{said}; the job's exit code {code}; {out}{log}"
    if f is None:
        return f"pardash: the job failed with exit code {code}{said}; {out}{log}"
    # The launch's own exit code is torchrun's, not the rank's (which the line names): say whose.
    return f"pardash: {_last_line_failure(f)}{said}; the job's exit code {code}; {out}{log}"


def _last_line_failure(f: dict) -> str:
    """A failure as the launcher's last line says it: with its error's line, shortened as a
    screen's line is. Headless, the error is in the ranks' output above too, but torchrun's
    summary of the failed workers (30 lines and more) stood between them, and a CI job's log is
    read from its end: the last line said who failed, not why."""
    return failure_line({**f, "error": short_error(f["error"])})


def failure_traceback(st, result: dict) -> tuple[int, str] | None:
    """The rank and traceback of the job's root cause, as the rank reported it, for a launch
    whose ranks' output was not on the screen to print before its last line; None when there
    is none to show (a success, a rank killed by a signal, a stop of a job that had not failed,
    a failure a stop on another node caused)."""
    f = failure_summary(st)
    if f is None or (result.get("stopped") and not _failed_of_itself(f, st, result.get("stop_t"))):
        return None
    if f.get("stopped_first"):  # (a rank stopped first, on another node: its peers' errors are the stop's)
        return None
    # The error that failure_summary took its first line from: the rank's in the last attempt.
    tb = next((e.traceback for e in attempts(st)[-1] if e.name == "error" and e.rank == f["rank"]), None)
    return (f["rank"], tb.rstrip("\n")) if tb else None


_STOP_ERROR = re.compile(r"SIGTERM|SignalException|KeyboardInterrupt", re.IGNORECASE)
"""A rank's error that is the stop's SIGTERM as its script took it (a handler that raises a
SigtermException of its own, a common pattern)."""


def _failed_of_itself(f: dict | None, st=None, stop_t: float | None = None) -> bool:
    """Whether the root cause ``f`` (:func:`failure_summary` of ``st``) is a rank's own failure,
    not the stop's doing: a peer failure (its collective's socket closed as the stop ended the
    other), an error raised of the SIGTERM, SIGKILL (a rank the stop's grace ran out on), and
    an exit the rank itself said after the stop began (``stop_t``, the supervisor's clock: a
    script whose SIGTERM handler exits 1) may be."""
    if f is None or f["code"] in (0, -signal.SIGKILL):
        return False
    if stop_t and st is not None:
        found = root_cause(st)
        if found is not None and found[0].seq >= 0 and found[0].t >= stop_t:
            return False
    return f["code"] < 0 or not (f["error"] and (PEER_FAILURE.search(f["error"]) or _STOP_ERROR.search(f["error"])))


def as_it_hung(st) -> str:
    """' as it hung after step 39, likely waiting for rank 0' for a job stopped in a hang."""
    hang = whole_hang(st)
    if not hang:
        return ""
    steps = [s for _, kind, s, _ in hang if s is not None and kind != JOINED]  # (one joined under DDP's Join waits by design)
    causes = hang_causes(hang, sharded=is_sharded(st.strategy))
    apart = "" if causes else collectives_words(different_collectives(st, hang))
    return (" as it hung" + (f" after step {min(steps)}" if steps else "")
            + (f", likely waiting for {ranks_named(sorted(causes))}" if causes else f", {apart}" if apart else ""))


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
    if result.get("hub_given_up"):
        notes.append("then it kept dying and was given up: training went on without telemetry, and the log ends there")
    return notes
