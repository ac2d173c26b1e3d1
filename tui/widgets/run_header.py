"""The run header: what runs, how far it is, and whether the telemetry can be trusted."""

from __future__ import annotations

import os
import re
import shlex
import time
from dataclasses import dataclass
from typing import ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from pardash.telemetry import state as st
from pardash.telemetry.client import Source
from pardash.telemetry.printer import BEHIND_SAID_S
from pardash.telemetry.analysis import JOINED
from pardash.telemetry.summary import ended_stuck, first_few, samples_per_s_recent, time_left_s, total_steps

from ..format import fmt_bytes, fmt_count, fmt_duration, fmt_rate
from ..model import SAVING, STOPPED, STOPPING, WAITING, RunTotals, is_stopping, rank_rate, run_totals
from ..run_clock import run_origin
from ..styles import CachedStyles, component_fg, text_strip
from .fit import refresh_fitted

STATUS_MARKS = (
    (st.RUNNING, "●"),
    (SAVING, "◎"),  # (running, saving a checkpoint: as the grid says it)
    (st.STRAGGLER, "▲"),
    (st.STALLED, "◆"),
    (WAITING, "◇"),  # (stalled, waiting for a hang's cause: as the grid draws and counts it)
    (JOINED, "◌"),  # (out of inputs under DDP's Join, waiting for the others by design: as the headless lines say it, review 335)
    (st.SILENT, "○"),
    (st.EXITED, "×"),
    (st.LEFT_EARLY, "◁"),  # (exit 0 as its peers trained on, the root cause: as the grid draws and counts it)
    (STOPPING, "◐"),  # (a stop began, not ended yet: as the grid draws and counts it)
    (STOPPED, "▬"),  # (exited by a stop, not failing: as the grid draws and counts it)
    (st.FINISHED, "□"),
    (st.STARTING, "·"),
)
_GLYPHS = dict(STATUS_MARKS)
Run = tuple[str, "Style | None"]
"""A stretch of text in one style (None: the widget's own)."""
_Line = tuple[list[Run], int, int]
"""A laid-out line: its runs, its length in cells, the cells it is laid out in."""


@dataclass(frozen=True, slots=True)
class Figure:
    """A header piece holding a running figure (samples/s, elapsed, the hub's rate): laid out
    as if ``cells`` wide, its widest, so that the header's lines, and its height, stay as they
    are while the figure moves (at 80 columns "samples/s 1171" pushed "elapsed" onto a line of
    its own, and back at 999: the dashboard jumped a row every few seconds)."""

    runs: list[Run]
    cells: int
    """The cells it is laid out in (at least its own)."""


@dataclass(frozen=True, slots=True)
class Choice:
    """A header piece with shorter forms (longest first) for a narrow terminal."""

    forms: tuple[list[Run] | Figure, ...]
    optional: bool = False
    """Left out where no form fits on the line it would go on."""


Piece = "list[Run] | Figure | Choice"

RATE_CELLS = 5
"""The widest :func:`~..format.fmt_rate` ("12.3k", "1.20M")."""
DURATION_CELLS = 6
"""The widest :func:`~..format.fmt_duration` ("59m59s")."""
STEP_DIGITS = 5
"""Digits a step is laid out in, at least (a step's number grows a digit at 10, 100, 1000...)."""


def _cells(runs: list[Run]) -> int:
    return sum(cell_len(text) for text, _style in runs)


def _fit_cells(piece: list[Run] | Figure) -> int:
    """The cells a piece is laid out in."""
    return max(piece.cells, _cells(piece.runs)) if isinstance(piece, Figure) else _cells(piece)


def _figure(runs: list[Run], value: str, cells: int) -> Figure:
    """``runs`` holding ``value``, laid out as if the value took ``cells``."""
    return Figure(runs, _cells(runs) + max(0, cells - cell_len(value)))


def short_log_path(path: str, run_id: str, cwd: str | None = None) -> list[str]:
    """``path`` and shorter forms of it, longest first: relative to ``cwd`` when under it (in
    place of the whole path: the folder a person runs in, said again, only took room; and with
    both, the header switched from "runs/…" to "/home/…/runs/…" as its line emptied at the
    run's end), then with the run id (the header's first word) as '…'."""
    forms = [path]
    if cwd is None:
        try:
            cwd = os.getcwd()
        except OSError:  # the folder it ran in was deleted: the path as it is
            cwd = ""
    if cwd and path.startswith(cwd.rstrip("/") + "/"):
        forms = [path[len(cwd.rstrip("/")) + 1 :]]
    if run_id and f"/{run_id}/" in f"/{forms[-1]}":
        forms.append(("/" + forms[-1]).replace(f"/{run_id}/", "/…/", 1)[1:])
    return forms


@dataclass(frozen=True, slots=True)
class ReplayPosition:
    """Where a replay is."""

    position_s: float
    duration_s: float
    speed: float
    paused: bool
    done: bool
    path: str
    following: bool = False
    """The log is still being written: the replay waits at its end for more."""
    reached: float | None = None
    """The speed the replay has played at of late, when well under ``speed`` (see
    REACHED_SHORT); None otherwise."""
    seeking_at: float | None = None
    """While a seek is on its way: how far into the run it has got (``position_s`` is where it
    goes); None otherwise."""


REACHED_SHORT = 0.8
"""A replay whose speed reached is under this share of the speed asked says both: a large log
at 64x played at 5x (its frames take that long to make), under a header that said 64x."""


def replay_position(source: Source) -> ReplayPosition:
    """Where a replay ``source`` is, as the header says it."""
    speed = getattr(source, "speed", 1.0)
    reached = getattr(source, "speed_reached", None)
    seeking = getattr(source, "seeking", False)
    return ReplayPosition(
        position_s=getattr(source, "position_s", 0.0),
        duration_s=getattr(source, "duration_s", 0.0),
        speed=speed,
        paused=getattr(source, "paused", False),
        done=getattr(source, "done", False),
        path=str(getattr(source, "path", "")),
        following=getattr(source, "following", False),
        reached=reached if reached is not None and reached < REACHED_SHORT * speed else None,
        seeking_at=getattr(source, "played_s", 0.0) if seeking else None,
    )


@dataclass(frozen=True, slots=True)
class RunSummary:
    """Everything the header shows, read from a source in one go (equal summaries do not
    redraw)."""

    run_id: str = ""
    strategy: str = ""
    world_size: int = 0
    nodes: int = 0
    device: str = ""
    step: int = 0
    total_steps: int | None = None
    """The steps the run is to take (the trainer's --steps, or what its epochs come to), when known."""
    time_left_s: float | None = None
    """Until ``total_steps``, at the slowest running rank's recent pace (None: not known, or done)."""
    restarts: int = 0
    """Times torchrun restarted the job (--max-restarts), the most any rank says."""
    samples_per_s: float | None = None
    samples_per_s_when: str = ""
    """'at the end': ``samples_per_s`` is what the run ran at over each rank's last steps
    (every rank done); 'at the end (stalled)': 0, the run was stopped or killed while stuck."""
    elapsed_s: float = 0.0
    """Run time from the run's own timestamps (first to last message), never the viewer's clock."""
    status_counts: tuple[tuple[str, int], ...] = ()
    lost: int = 0
    rejected: int = 0
    no_key: int = 0
    """Connections the hub refused for want of a key it admits (a node's reconnection attempts,
    about 40 a second): apart from ``rejected``, the records it refused ("rejected 825" read as
    an attack)."""
    skipped_lines: int = 0
    """A replayed log's lines the reader skipped (malformed, truncated): not the hub's rejects."""
    dropped: int = 0
    log_path: str = ""
    log_error: str = ""
    log_size: str = ""
    """How big the log is now (``103 MiB``; '' not known): a long run's disk fills with it."""
    log_full_in_s: float = 0.0
    """Seconds until the log's disk fills, while the hub says the log will not fit (0: it fits)."""
    ingest_hz: float = 0.0
    hub_behind_s: float = 0.0
    """How far behind the ranks the hub is (HubStats.behind_s): said from BEHIND_SAID_S."""
    note: str = ""
    live: bool = True
    synced: bool = True
    """False while a live viewer waits for the hub's snapshot."""
    refused: str = ""
    """Why the live hub refuses this viewer (its handshake failed: CURVE keys), if it does."""
    hub_quiet_s: float | None = None
    """Seconds without a frame from a live hub (None while frames arrive)."""
    hub_lost: str = ""
    """On a node > 0, node 0's hub quiet so long that it may be lost (printer.hub_lost_words):
    said instead of "hub quiet", the ranks' statuses as when last heard."""
    waiting_s: float | None = None
    """Live, before any rank has said anything: seconds since the hub started (torchrun and
    the ranks' imports can take a while; the header says so rather than look hung)."""
    replay: ReplayPosition | None = None
    log_ends_early: str = ""
    """Where the statuses were last known, when the run's end is not: "at the log's end" (a
    replay at the end of a log that stops short: its hub killed, its disk full), "when the hub
    stopped" (a live hub's last frame, ranks not ended): their last word, not how they ended."""

    command: str = ""
    """What each rank runs, less the ``python`` before it (``train.py --lr 3``): the launched
    hub's note of it (``RunState.command``); '' where none was said."""

    job_ended: bool = False
    """The launch this viewer runs in saw its job end (torchrun exited: ``RunState.job_ended``),
    whatever its ranks said (one silent, killed with its node, or never heard from)."""

    @property
    def ranks_ended(self) -> bool:
        """Every rank finished, exited or was stopped."""
        return bool(self.status_counts) and all(s in _ENDS for s, _ in self.status_counts)

    @property
    def ended(self) -> bool:
        """The job is over: every rank finished, exited or was stopped, or the launch saw its
        torchrun end (``job_ended``)."""
        return self.job_ended or self.ranks_ended

    def ended_how(self) -> str:
        """How the job ended, as the header says it after "job ended: " ("every rank
        finished", "2 ranks stopped", "1 rank exited, 1 stopped"; of a job whose torchrun ended
        with ranks whose end no word said, "torchrun exited; how 1 rank ended is not known")."""
        counts = dict(self.status_counts)
        if not self.ranks_ended:
            done = sum(counts.get(s, 0) for s in _ENDS)
            # (the ranks never heard from too: the world size's, where the hub heard fewer)
            unknown = max(self.world_size, sum(counts.values())) - done
            return f"torchrun exited; how {unknown} rank{'s' if unknown != 1 else ''} ended is not known" if unknown else "torchrun exited"
        # (a rank that left the job early, the root cause, first: it read "1 rank exited" of a
        # job whose one other rank had left it)
        ends = [(n, how) for n, how in ((counts.get(st.LEFT_EARLY, 0), "left early"), (counts.get(st.EXITED, 0), "exited"),
                                        (counts.get(STOPPED, 0), "stopped")) if n]  # fmt: skip
        if not ends:
            return "every rank finished"
        (n, how), *rest = ends
        return f"{n} rank{'s' if n != 1 else ''} {how}" + "".join(f", {k} {what}" for k, what in rest)


_ENDS = (st.FINISHED, st.LEFT_EARLY, st.EXITED, STOPPED)
"""Statuses of a rank that has ended."""


def _joined_apart(state: st.RunState, out: set[int], counts: dict[str, int], step: int,
                  sps: float | None) -> tuple[dict[str, int], int, float | None]:
    """(counts, step, samples/s) of the header with the ranks of ``out`` (``RunState.ran_out``:
    out of inputs under DDP's Join) apart: those joined now counted "joined", not running, and
    their last steps' rate left out; the step the slowest rank's still stepping, where one is.
    One being stopped stays "stopping", as the grid says it (run_totals counted it so: taken
    from "running", absent, the header raised KeyError and a viewer of a Join job being
    stopped died, review 339)."""
    stepping = [r.last_step for r in state.ranks.values() if r.rank not in out and r.last_step is not None]
    if stepping:
        step = min(stepping)
    now = [r for r in state.ranks.values() if r.joined and r.status in (st.RUNNING, st.STRAGGLER)]
    if now:
        counts = dict(counts)
        for r in now:
            if sps is not None:
                sps = max(0.0, sps - (rank_rate(r) or 0.0))
            if is_stopping(r, r.status) or not counts.get(r.status):
                continue
            counts[r.status] -= 1
            if not counts[r.status]:
                del counts[r.status]
            counts[JOINED] = counts.get(JOINED, 0) + 1
    return counts, step, sps


def summarize(
    source: Source, *, hub_quiet_s: float | None = None, totals: RunTotals | None = None, origin: float | None = None,
    hub_lost: str = "",
) -> RunSummary:
    """Read a :class:`RunSummary` from ``source`` (``totals``: :func:`run_totals` of its state,
    ``origin``: :func:`~..run_clock.run_origin` of it, when already at hand)."""
    state = source.state
    stats = source.stats
    hello = state.hello
    if totals is None:
        totals = run_totals(state)
    counts = totals.status_counts
    step, sps = totals.step, totals.samples_per_s
    out = state.ran_out()
    if out:
        # Ranks out of inputs under DDP's Join: the job's step is the ranks' still stepping,
        # and the joined ranks wait, by design (see _joined_apart)
        counts, step, sps = _joined_apart(state, out, counts, step, sps)
    notes = totals.notes
    if state.hub_note and state.hub_note not in notes:
        notes = [*notes, state.hub_note]
    early = getattr(source, "ended_early", None)
    if early is not None:
        # (it read "● 2 running ... ended" and no word, as if its ranks ran on, where `report`
        # of the log says it ends early; the event log says why in report's words. One line at
        # 80 columns: the statuses say "at the log's end" too)
        n = early["running"]
        not_ended = f"{n} rank{'s' if n != 1 else ''} not ended"
        if early.get("hub_stopped"):  # (a live hub's last frame: what became of them, nothing says)
            notes = [*notes, f"the hub stopped at step {early['step']}, {not_ended} (no word of their end)"]
        else:
            notes = [*notes, f"the log ends early at step {early['step']}, {not_ended} (the event log says why)"]
    waiting_for = getattr(source, "waiting_for", "")
    if waiting_for and source.live and not state.ranks:
        # (what a multi-node launch waits for, as its headless lines say it: the header said
        # only "waiting for the ranks to start" while node 0 waited for the other nodes)
        notes = [*notes, waiting_for]
    runs = getattr(source, "runs", [])
    if not source.live and len(runs) > 1:  # (as report and export warn of such a log)
        notes = [*notes, f"this log holds {len(runs)} runs ({first_few(runs)}): they play as one"]
    replay = None
    if origin is None:
        origin = run_origin(source)
    if not source.live:
        replay = replay_position(source)
    device = ""
    if hello is not None:
        device = hello.device_name or hello.device
    when = ""
    if sps is None and counts and not any(counts.get(s) for s in (st.RUNNING, SAVING, STOPPING, st.STARTING)):
        if counts.get(st.STALLED) or counts.get(WAITING) or counts.get(st.SILENT):
            sps = 0.0  # stuck: nothing moves (the rate of their last steps would say otherwise)
        elif ended_stuck(state):  # stopped or killed while stuck, as the launcher's last line says
            sps, when = 0.0, "at the end (stalled)"
        else:
            recent = samples_per_s_recent(state)  # every rank is done: what it ran at
            if recent > 0:
                sps, when = recent, "at the end"
    elif sps is not None and counts.get(STOPPING) and not any(counts.get(s) for s in (st.RUNNING, SAVING, st.STARTING)):
        when = "before the stop"  # (no rank steps while it is stopped: not a rate of now)
    return RunSummary(
        run_id=state.run_id or getattr(source, "run_id", ""),
        strategy=state.strategy,
        world_size=state.world_size,
        nodes=totals.nodes,
        device=device,
        step=step,
        total_steps=(total := total_steps(hello)),
        time_left_s=time_left_s(state, total) if counts.get(st.RUNNING) else None,
        restarts=max((r.restarts for r in state.ranks.values()), default=0),
        samples_per_s=sps,
        samples_per_s_when=when,
        # From the ranks' first word, live as in a replay (its position and `report` count from
        # there): not the hub's seconds of waiting for them.
        elapsed_s=max(0.0, (state.t_last_rank or state.t_last) - origin) if state.t0 else 0.0,
        status_counts=tuple((s, counts[s]) for s, _ in STATUS_MARKS if counts.get(s)),
        lost=stats.lost,
        rejected=sum(n for why, n in stats.rejected.items() if not why.startswith("log_") and why != "no_key"),
        no_key=stats.rejected.get("no_key", 0),
        skipped_lines=sum(n for why, n in stats.rejected.items() if why.startswith("log_")),
        dropped=stats.dropped,
        log_path=stats.log_path,
        log_error=stats.log_error,
        log_size=fmt_bytes(stats.log_bytes) if stats.log_bytes and source.live else "",
        log_full_in_s=stats.log_full_in_s if source.live else 0.0,
        ingest_hz=stats.ingest_hz,
        hub_behind_s=stats.behind_s if source.live else 0.0,
        note=" · ".join(notes),
        live=source.live,
        synced=getattr(source, "synced", True),
        refused=getattr(source, "refused", ""),
        hub_quiet_s=hub_quiet_s,
        hub_lost=hub_lost if hub_quiet_s is not None else "",
        waiting_s=max(0.0, time.time() - (state.t0 or getattr(source, "opened_t", time.time())))
        if source.live and not state.ranks
        else None,
        replay=replay,
        log_ends_early="" if early is None else "when the hub stopped" if early.get("hub_stopped") else "at the log's end",
        job_ended=source.live and state.job_ended,
        command=shlex.join(state.command[1:] if state.command[0] == "python" else state.command) if state.command else "",
    )


class RunHeader(CachedStyles, Widget):
    """Run id, strategy, world size, device, step, throughput and elapsed run time on the
    first line; rank statuses and the hub's counters (or the replay position) on the second;
    the run's note (e.g. why DP runs one replica) on a third line whenever there is one."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "run-header--title",
        "run-header--label",
        "run-header--value",
        "run-header--good",
        "run-header--warn",
        "run-header--bad",
        "run-header--note",
        "run-header--running",
        "run-header--saving",
        "run-header--straggler",
        "run-header--stalled",
        "run-header--waiting",
        "run-header--joined",
        "run-header--silent",
        "run-header--exited",
        "run-header--left",
        "run-header--stopping",
        "run-header--stopped",
        "run-header--finished",
        "run-header--starting",
    }

    DEFAULT_CSS = """
    RunHeader {
        height: auto;
        padding: 0 1;
        background: $panel;
        color: $foreground;
    }
    RunHeader > .run-header--title { color: $text-accent; text-style: bold; }
    RunHeader > .run-header--label { color: $text-muted; }
    RunHeader > .run-header--value { text-style: bold; }
    RunHeader > .run-header--good { color: $text-success; }
    RunHeader > .run-header--warn { color: $text-warning; text-style: bold; }
    RunHeader > .run-header--bad { color: $text-error; text-style: bold; }
    RunHeader > .run-header--note { color: $text-warning; }
    RunHeader > .run-header--running { color: $text-success; }
    RunHeader > .run-header--saving { color: $text-primary; }
    RunHeader > .run-header--straggler { color: $text-warning; text-style: bold; }
    RunHeader > .run-header--stalled { color: $text-error; text-style: bold; }
    RunHeader > .run-header--waiting { color: $text-warning; }
    RunHeader > .run-header--joined { color: $text-secondary; }
    RunHeader > .run-header--silent { color: $text-error; }
    RunHeader > .run-header--exited { color: $text-error; text-style: bold; }
    RunHeader > .run-header--left { color: $text-error; text-style: bold; }
    RunHeader > .run-header--stopping { color: $text-secondary; }
    RunHeader > .run-header--stopped { color: $text-secondary; }
    RunHeader > .run-header--finished { color: $text-primary; }
    RunHeader > .run-header--starting { color: $text-muted; }
    """

    summary: reactive[RunSummary] = reactive(RunSummary)
    """What the header shows; set it from :func:`summarize`."""

    _lines: tuple[int, list[Strip]] | None = None
    """(width, drawn lines), until the summary, the size or the styles change."""

    def watch_summary(self) -> None:
        self._lines = None
        refresh_fitted(self)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._lines = None

    def _strips(self, width: int) -> list[Strip]:
        # Drawn as segments (the Line API): the header changes every frame. A line that fits
        # goes straight from its runs to a strip, its length the sum of theirs (measuring whole
        # lines of changing text, with their "·", cost most of a frame's header).
        if self._lines is None or self._lines[0] != width:
            console = self.app.console
            base = self.rich_style
            strips = []
            lines, extra = self._runs(width)
            for runs, length in lines:
                if length <= width:
                    segments = [Segment(text, base + style if style else base) for text, style in runs]
                    if length < width:
                        segments.append(Segment(" " * (width - length), base))
                    strips.append(Strip(segments, width))
                    continue
                # Wider than the widget (one long piece): it wraps, as the text does.
                for part in Text("\n").join([_line_text(runs)]).wrap(console, width):
                    strips.append(text_strip(self, part, width))
            if extra is not None:
                # Its style as a span: rendering a text alone drops a style of its own.
                extra = Text("\n").join([extra])
                for part in extra.wrap(console, width) if extra.cell_len > width else (extra,):
                    strips.append(text_strip(self, part, width))
            self._lines = (width, strips)
        return self._lines[1]

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self._strips(width)) if width else 0

    def render_line(self, y: int) -> Strip:
        width = self.content_region.width
        strips = self._strips(width)
        return strips[y] if 0 <= y < len(strips) else Strip.blank(width, self.rich_style)

    def _s(self, name: str) -> Style:
        return component_fg(self, f"run-header--{name}")

    def _flow(
        self, pieces: list[Piece], width: int, sep: str = "   ", *, after: _Line | None = None
    ) -> list[_Line]:
        """Lay pieces out left to right, starting a new line when the next does not fit:
        each line's runs, its length in cells, and the cells it is laid out in (a
        :class:`Figure` counts at its widest). A :class:`Choice` takes its first form that
        fits where the line is; none fitting there, a new line (an optional one is left out
        instead, as it is from any line but the first: at 80 columns the device's name took a
        line of its own). ``after``: a line laid out before that these pieces go on with."""
        lines: list[_Line] = []
        line: list[Run] = list(after[0]) if after is not None else []
        used, drawn = (after[2], after[1]) if after is not None else (0, 0)
        for piece in pieces:
            if isinstance(piece, Choice):
                forms = [(f, _fit_cells(f)) for f in piece.forms]
                room = width - used - (len(sep) if used else 0)
                fitting = [(f, n) for f, n in forms if n <= room]
                if piece.optional and (lines or after is not None):
                    continue  # (on the first line or not at all: the header is no taller for it)
                if fitting:
                    piece, n = fitting[0]
                elif piece.optional:
                    continue
                else:
                    piece, n = next(((f, n) for f, n in forms if n <= width), forms[-1])
            else:
                n = _fit_cells(piece)
            runs = piece.runs if isinstance(piece, Figure) else piece
            if used and used + len(sep) + n > width:
                lines.append((line, drawn, used))
                line, used, drawn = [], 0, 0
            if used:
                line.append((sep, None))
                used += len(sep)
                drawn += len(sep)
            line.extend(runs)
            used += n
            drawn += _cells(runs)
        if used:
            lines.append((line, drawn, used))
        return lines

    def _pair(self, label: str, value: str, style: str = "value") -> list[Run]:
        return [(label + " ", self._s("label")), (value, self._s(style))]

    def render(self) -> Text:
        return self._text(self.content_region.width or 80)

    def _text(self, width: int) -> Text:
        """The header's lines for a content ``width``, separated by newlines."""
        lines, extra = self._runs(width)
        texts = [_line_text(runs) for runs, _length in lines]
        if extra is not None:
            texts.append(extra)
        return Text("\n").join(texts)

    def _runs(self, width: int) -> tuple[list[tuple[list[Run], int]], Text | None]:
        """The header's lines for a content ``width`` as runs of styled text (with each line's
        length), and a text that wraps on its own below them (the run's note), if any."""
        s = self.summary
        width = max(20, width)
        if s.live and not s.synced and s.refused:
            return [], Text(f"the hub refuses this viewer: {s.refused}", style=self._s("bad"))
        if s.live and not s.synced:
            return [], Text(
                "waiting for the hub's snapshot… (is the hub running? one with CURVE keys answers authorised viewers only)",
                style=self._s("warn"),
            )
        second = self._second_line(s)
        when = s.samples_per_s_when
        lines = self._flow(self._first_line(s, when), width)
        if when:
            # "at the end" after samples/s once every rank is done: not at the cost of what the
            # line held while the run went on (the device's name went, "elapsed" moved down a
            # line). Said where it fits as well; else "at end", which may move what follows
            # the rate onto the next line (the header a line taller, or its counters gone)
            # where the device's name stays as it was; else nothing. Left out where only a line
            # was at stake, at 80 columns the rate at the end read as the live one ("step 49
            # samples/s 0" of a job a stall ended).
            bare = self._flow(self._first_line(s, ""), width)
            short = when.replace("at the end", "at end")
            said = None
            for form in dict.fromkeys((when, short)):
                lines = self._flow(self._first_line(s, form), width)
                if len(bare) == len(lines) and bare[0][2] + 1 + cell_len(form) == lines[0][2]:
                    said = lines
                    break
            if said is None:
                lines = self._flow(self._first_line(s, short), width)
                if not s.device or _holds(lines, s.device) == _holds(bare, s.device):
                    said = lines
            lines = said if said is not None else bare
        note = None
        if s.note:
            note = Text("⚠ " + s.note, style=self._s("note"))
            note.overflow = "fold"  # the note is never hidden: it wraps instead
        first = lines
        lines = self._with_second(first, second, width)
        if s.command and not _holds(lines, s.command):
            # The command, the line's last piece, went where the log's whole path took its room
            # (make run's, at 160 columns): kept whole with the log's shorter path (the run id,
            # the title, stands for the folder it leaves out), else as its script alone, where
            # the header is no taller for it.
            forms = command_forms(s.command)
            for short_log, form in ((True, 0), (False, 1), (True, 1)):
                other = self._with_second(first, self._second_line(s, short_log=short_log, command_form=form), width)
                if len(other) == len(lines) and _holds(other, forms[min(form, len(forms) - 1)]):
                    lines = other
                    break
        return [(runs, length) for runs, length, _cells in lines], note

    def _with_second(self, lines: list[_Line], second: list[Piece], width: int) -> list[_Line]:
        """The first line's ``lines`` and the second's pieces laid out after them."""
        if len(lines) > 1:
            # What the first line could not hold (elapsed, at 80 columns) leads the second,
            # not a line of its own.
            return lines[:-1] + self._flow(second, width, after=lines[-1])
        return lines + self._flow(second, width)

    def _height(self, lines: list[_Line], second: list[Piece], width: int) -> int:
        """The lines the first line's ``lines`` and the second's pieces take, as laid out below."""
        if len(lines) > 1:
            return len(lines) - 1 + len(self._flow(second, width, after=lines[-1]))
        return len(lines) + len(self._flow(second, width))

    def _first_line(self, s: RunSummary, when: str) -> list[Piece]:
        """The header's first line's pieces: the run, its step, rate and time, the device;
        ``when``: what the rate is ("at the end"), said after it."""
        first: list[Piece] = [[(s.run_id or "pardash", self._s("title"))]]
        if s.waiting_s is not None and s.job_ended:
            # (its counter climbed on under "job ended: torchrun exited" of a torchrun that failed
            # before any rank started: a --master-port another launch took, review 275)
            what = ["no rank started"]
        elif s.waiting_s is not None:
            what = [f"waiting for the ranks to start · {s.waiting_s:.0f} s"]
        else:
            what = [s.strategy or "?", f"{s.world_size} rank{'s' if s.world_size != 1 else ''}"]
        if s.nodes > 1:
            what[-1] += f" on {s.nodes} nodes"
        first.append([(" · ".join(what), self._s("value"))])
        # Written as the grid, the event log and the progress lines write a step ("2000", not
        # "2,000"); the slowest rank's, the one every rank has done (a rank may be one ahead).
        step = str(s.step)
        if s.total_steps:  # (of how many, as `pardash ps` and the progress lines say it)
            step += f"/{s.total_steps}"
        first.append(_figure(self._pair("step", step), step, STEP_DIGITS + (len(str(s.total_steps)) + 1 if s.total_steps else 0)))
        if s.restarts:
            first.append(self._pair("restarts", fmt_count(s.restarts), "warn"))
        rate = fmt_rate(s.samples_per_s)
        first.append(_figure(self._pair("samples/s", " ".join(filter(None, (rate, when)))), rate, RATE_CELLS))
        elapsed = fmt_duration(s.elapsed_s)
        first.append(_figure(self._pair("elapsed", elapsed), elapsed, DURATION_CELLS))
        if s.time_left_s is not None:  # (someone looking in on a run of hours asks first when it ends)
            left = fmt_duration(s.time_left_s)
            first.append(_figure(self._pair("left", left), left, DURATION_CELLS))
        if s.device:  # the least of the first line's: the first to go
            first.append(Choice(([(s.device, self._s("label"))],), optional=True))
        return first

    def _second_line(self, s: RunSummary, *, short_log: bool = False, command_form: int | None = None) -> list[Piece]:
        """The header's second line's pieces: the ranks' statuses, the replay or the hub, the
        log (``short_log``: its shorter forms only), the command (``command_form``: that form
        of it alone, see :func:`command_forms`; None: the first that fits)."""
        second: list[Piece] = []
        marks: list[Run] = []
        for status, n in s.status_counts:
            glyph = _GLYPHS[status]
            if marks:
                marks.append(("  ", None))
            marks.append((f"{glyph} {n} {status}", self._s("left" if status == st.LEFT_EARLY else status)))
        if marks and s.log_ends_early:
            marks.append((f" {s.log_ends_early}", self._s("label")))  # (what they were then, not how they ended)
        elif marks and s.live and s.hub_lost and not s.ended:
            marks.append((" when last heard", self._s("label")))
        if marks:
            second.append(marks)
        if s.replay is not None:
            runs = self._replay_runs(s.replay)
            # Laid out at its widest position and state ("playing"; "paused" and "ended" are
            # shorter): the line does not move as it plays, or at a pause.
            r = s.replay
            state = self._replay_state(r)
            slack = max(0, DURATION_CELLS - len(fmt_duration(r.position_s))) + max(0, len("playing") - len(state))
            short = [("replay ", runs[0][1]), *runs[1:]]
            # The log's name is the first to go: the run id says which run it is.
            second.append(Choice((Figure(runs, _cells(runs) + slack), Figure(short, _cells(short) + slack))))
        if s.live and (s.job_ended or (s.hub_quiet_s is not None and s.ended)):
            # The launcher stops the hub when the job ends: its quiet is no fault then, and
            # "hub quiet for 6 s" read as one after a clean finish. How it ended, instead; and
            # once the launch says its torchrun exited, whether the hub is quiet or not (a rank
            # killed with its node says nothing of its end: "○ 1 silent" and nothing more read
            # as a job going on).
            second.append([(f"job ended: {s.ended_how()}", self._s("label"))])
        elif s.live and s.hub_quiet_s is not None:
            if s.log_ends_early:  # (it said it stopped: the note says so)
                second.append([("hub stopped", self._s("bad"))])
            elif s.hub_lost:
                # (its address the first to go, then what it means: the state of it stays)
                said = s.hub_lost.partition(": ")[0]
                bare = re.sub(r" \(\S+\)", "", said, count=1)
                second.append(Choice(tuple([(form, self._s("bad"))] for form in (s.hub_lost, f"{bare}: node 0 may be lost", bare))))
            else:
                second.append([(f"hub quiet for {s.hub_quiet_s:.0f} s", self._s("bad"))])
        second.append(
            [
                ("lost ", self._s("label")),
                (fmt_count(s.lost), self._s("bad" if s.lost else "value")),
                (" · rejected ", self._s("label")),
                (fmt_count(s.rejected), self._s("warn" if s.rejected else "value")),
                (" · dropped ", self._s("label")),
                (fmt_count(s.dropped), self._s("warn" if s.dropped else "value")),
            ]
            # A replayed log's unreadable lines (a truncated last line): the reader's, not
            # hostile input the hub refused, which "rejected" counts.
            + ([(" · skipped lines ", self._s("label")), (fmt_count(s.skipped_lines), self._s("warn"))] if s.skipped_lines else [])
            + ([(" · no key ", self._s("label")), (fmt_count(s.no_key), self._s("warn"))] if s.no_key else [])
        )
        if s.live and s.ingest_hz and s.hub_quiet_s is None:  # a quiet hub's last rate is stale
            rate = fmt_rate(s.ingest_hz)
            second.append(_figure(self._pair("hub", f"{rate} msg/s", "label"), rate, RATE_CELLS))
        if s.live and s.hub_behind_s >= BEHIND_SAID_S and s.hub_quiet_s is None:
            # (what the screen shows is that old: a hub on 2 busy cores fell a minute behind
            # 4096 ranks, its "running" ranks stalled long since, and nothing said it)
            second.append([(f"hub {fmt_duration(s.hub_behind_s)} behind the ranks", self._s("warn"))])
        if s.log_error:
            second.append([(f"log: {s.log_error}", self._s("bad"))])
        elif s.log_path:
            forms = short_log_path(s.log_path, s.run_id)
            if short_log and len(forms) > 1:
                forms = forms[1:]
            size = f" ({s.log_size})" if s.log_size else ""
            second.append(Choice(tuple(self._pair("log", p + size, "label") for p in forms)))
            if s.log_full_in_s:
                # (the hub's warning scrolls out of the events; the run will not fit on the disk)
                second.append([(f"log's disk full in {fmt_duration(s.log_full_in_s)}", self._s("warn"))])
        if s.command:  # (two runs of one script folder told apart by more than their ids; the first to go)
            forms = command_forms(s.command)
            if command_form is not None:
                forms = forms[min(command_form, len(forms) - 1) :][:1]
            second.append(Choice(tuple(self._pair("command", c, "label") for c in forms), optional=True))
        return second

    @staticmethod
    def _replay_state(r: ReplayPosition) -> str:
        if r.seeking_at is not None:
            # (a seek plays the log from a keyframe or its start: the position said is where it
            # goes, and this how far it has got; the screen's figures are the target's once there)
            return f"seeking, at {fmt_duration(r.seeking_at)}"
        return "ended" if r.done else "paused" if r.paused else "following the log" if r.following else "playing"

    def _replay_runs(self, r: ReplayPosition) -> list[Run]:
        state = self._replay_state(r)
        style = "warn" if r.paused or r.seeking_at is not None else "good"
        name = r.path.replace("\\", "/").rsplit("/", 1)[-1]
        # The speed reached, where well under the one asked: frames take time to make, and a
        # header that said 64x over a log played at 5x hid why it went so slowly.
        speed = f"{r.speed:g}×" if r.reached is None else f"{r.speed:g}× (≈{r.reached:.2g}×)" if r.reached < 10 else f"{r.speed:g}× (≈{r.reached:.0f}×)"
        return [
            (f"replay {name} " if name else "replay ", self._s("label")),
            (f"{fmt_duration(r.position_s)} / {fmt_duration(r.duration_s)}", self._s("value")),
            (f" · {speed} · ", self._s("label")),
            (state, self._s(style)),
        ]


def command_forms(command: str) -> list[str]:
    """``command`` (as the header says it: ``train.py --lr 3``) and a shorter form: the script
    (or ``-m module``) with its arguments as "…"."""
    words = command.split(" ")
    head = " ".join(words[:2] if words[0] == "-m" else words[:1])
    return [command, f"{head} …"] if len(head) + 2 < len(command) else [command]


def _holds(lines: list[_Line], text: str) -> bool:
    """Whether laid-out ``lines`` say ``text`` (in one run)."""
    return any(t == text for runs, _length, _cells in lines for t, _style in runs)


def _line_text(runs: list[Run]) -> Text:
    line = Text(no_wrap=True, overflow="ellipsis")
    for text, style in runs:
        line.append(text, style=style)
    return line
