"""The event log: events and verdicts as they happen, newest at the bottom."""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from typing import ClassVar

import msgspec
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.widgets import RichLog

from pardash.telemetry import schema
from pardash.telemetry.event_ring import is_routine
from pardash.telemetry.failures import error_line, is_stop, short_error, stop_text
from pardash.telemetry.loss_turns import LossTurnsHeld, held_text
from pardash.telemetry.printer import group_alike, verdict_text
from pardash.telemetry.summary import ranks_named, ranks_text
from pardash.telemetry.state import RunState, launcher_stopping, torchrun_restart

from ..format import fmt_clock, fmt_step_time, tame
from ..model import frame_failure
from ..run_clock import zero_known
from ..styles import CachedStyles, component_fg

VERDICT_STYLES = {
    "straggler": "warn",
    "held_up": "warn",
    "stalled": "warn",
    "not_sharding": "warn",
    "memory_growing": "warn",
    "silent": "bad",
    "exited": "bad",
    "straggler_cleared": "good",
    "resumed": "good",
    "sharding_ok": "good",
    "memory_steady": "good",
    "finished": "good",
}
EVENT_STYLES = {"error": "bad", "warning": "warn", "refused": "warn", "exit": "bad", "checkpoint": "info", "epoch_end": "info", "eval": "dim"}


def describe(m: schema.Message, ranks: list[int] | None = None, duration_s: float | None = None,
             left: dict[int, int | None] | None = None) -> tuple[str, str]:
    """(text, style name) of one event or verdict, in the user's words; ``ranks`` (two or
    more) and ``duration_s`` (the slowest of theirs) when it stands for the same event of
    several ranks; ``left``: the ranks that left the job early (failures.left_early), whose
    exit 0 is no finish."""
    if isinstance(m, schema.Verdict):
        return verdict_text(m, ranks), VERDICT_STYLES.get(m.verdict, "info")
    if isinstance(m, schema.Event):
        several = ranks is not None and len(ranks) > 1
        who = "hub" if m.rank < 0 else ranks_named(ranks if several else [m.rank])
        name = m.name.replace("_", " ")
        if is_stop(m):  # (as the header and the grid say it, "▬ 2 stopped": it read "exited with code -15")
            return f"{who} {stop_text(m.rank, m.code, m.message)}", "dim"
        if m.name == "exit":
            code = m.code if m.code is not None else 0
            gone = [r for r in (ranks if several else [m.rank]) if r in left] if left and not code else []
            if gone:
                # (it read "rank 1 finished (exit code 0)" in green beside the alert that named it
                # the root cause, its peers failing in the collective it never joined)
                rest = [r for r in (ranks if several else [m.rank]) if r not in left]
                text = f"{ranks_named(gone)} left the job early (exit code 0) while the others trained on"
                return text + (f"; {ranks_named(rest)} finished (exit code 0)" if rest else ""), "bad"
            text = f"{who} exited with code {code}" if code else f"{who} finished (exit code 0)"
            said = short_error(m.message)
            if said:
                text += f": {said}"
            return text, "bad" if code else "good"
        if torchrun_restart(m):  # (its message names one rank and its pid: not of a group)
            return f"{who} restarted by torchrun" + (f" (restart {m.code})" if m.code else ""), EVENT_STYLES.get(m.name, "info")
        if launcher_stopping(m):
            return f"{who} being stopped {m.message}".rstrip(), "dim"
        if m.name == "join" and m.rank >= 0 and m.message:  # ("rank 0 ran out of inputs at step 400 and joined: ...")
            return f"{who} {' '.join(m.message.split())}", "info"
        text = f"{who} {name}"
        if m.step is not None:
            # An error's or a warning's step is the last one done (the crash of step 300 says
            # 299); a checkpoint's, an epoch end's, the one it came at.
            if m.name == "eval":  # (as the headless line says it: one before any step read "at step 0")
                text += f" after step {m.step}" if m.step > 0 else " before the first step"
            elif m.name not in ("error", "warning"):
                text += f" at step {m.step}"
            else:  # (0: none done yet, as the rank says it: "error after step 0" read as a step of its)
                text += f" after step {m.step}" if m.step > 0 else " before its first step"
        took = duration_s if several else m.duration_s
        if took:
            text += f" ({'slowest ' if several else ''}{fmt_step_time(took)})"
        said = short_error(m.message, traceback=m.traceback) if m.name in ("error", "warning") else (error_line(m.message) if m.message else None)
        if said:
            text += f": {said}"
        if m.rank < 0:
            text = m.message or text
            return f"hub: {text}", "dim"
        return text, EVENT_STYLES.get(m.name, "info")
    return type(m).__name__.lower(), "dim"


EPOCH_ENDED = re.compile(r"epoch (\d+) ended")
"""The bundled trainer's and the instrumentation's words of an epoch's end ("epoch 3 ended")."""


def is_epoch_end(m: schema.Message) -> bool:
    """A rank's own epoch end (not a hub's or a launcher's note of that name)."""
    return isinstance(m, schema.Event) and m.name == "epoch_end" and is_routine(m)


def is_save(m: schema.Message) -> bool:
    """A rank's own checkpoint saved (as the bundled trainer and the instrumentation say it)."""
    return isinstance(m, schema.Event) and m.name == "checkpoint" and is_routine(m)


class RoutineRun:
    """Epoch ends and checkpoints the event log wrote one after another, said as one line that
    the next one updates ("ranks 0-7 ended epochs 3-41 (the last at step 2050) and saved 39
    checkpoints, steps 100-2050 (slowest 1.20s): /ckpt/step-00002050"). A job whose epochs end
    every 50 steps wrote a line each, a screenful a minute that pushed its verdicts, warnings
    and errors out of sight; one that saved at each epoch's end wrote three rows an epoch (its
    checkpoint's path wrapped), the two kinds taking turns. The log and the report keep each
    one."""

    __slots__ = ("first", "last", "ranks", "epochs", "numbered", "last_end", "first_end",
                 "savers", "saves", "first_save", "last_save", "slowest", "row", "written")  # fmt: skip

    def __init__(self, first: schema.Event) -> None:
        self.first = first
        """The first of them (the line's place in the log: its hseq)."""
        self.last = first
        """The newest of them (the line's time)."""
        self.ranks: dict[int, None] = {}
        """The ranks that said the epoch ends, in order of first appearance."""
        self.epochs: set[object] = set()
        """Each epoch once: its number where its words say it, else its step."""
        self.numbered = True
        """Whether every epoch end said its epoch's number."""
        self.first_end: schema.Event | None = None
        self.last_end: schema.Event | None = None
        self.savers: dict[int, None] = {}
        """The ranks that said the checkpoints."""
        self.saves: dict[object, None] = {}
        """Each checkpoint once: its step (its path where it has none)."""
        self.first_save: schema.Event | None = None
        self.last_save: schema.Event | None = None
        self.slowest: float | None = None
        """The slowest rank's time of the slowest checkpoint."""
        self.row: int | None = None
        """The log's row its lines begin at (None: written before the log had a size, their
        renders deferred by the RichLog)."""
        self.written = 0
        """How many lines it was last written as."""

    def add(self, m: schema.Event, ranks: list[int] | None, took: float | None = None) -> None:
        """Fold in ``m``, said by ``ranks`` (None: its own), ``took`` its slowest rank's time."""
        self.last = m
        if is_save(m):
            for rank in ranks or (m.rank,):
                self.savers[rank] = None
            self.saves[m.step if m.step is not None else m.message] = None
            self.first_save = self.first_save or m
            self.last_save = m
            took = took if ranks and len(ranks) > 1 else m.duration_s
            if took is not None and (self.slowest is None or took > self.slowest):
                self.slowest = took
            return
        for rank in ranks or (m.rank,):
            self.ranks[rank] = None
        number = EPOCH_ENDED.fullmatch(m.message.strip())
        if number is None:
            self.numbered = False
        self.epochs.add(int(number[1]) if number is not None else ("step", m.step))
        self.first_end = self.first_end or m
        self.last_end = m

    def lines(self) -> list[tuple[schema.Event, str, str, float]]:
        """(the first event it says, its text, its style name, its time) of each line: one
        epoch end or one checkpoint, or one of each, are said as they were (their ranks' taken
        a frame apart, one line); more, one line."""
        ranks, savers = sorted(self.ranks), sorted(self.savers)
        if len(self.epochs) < 2 and len(self.saves) < 2:
            out = []
            if self.first_end is not None:
                out.append((self.first_end, *describe(self.first_end, ranks if len(ranks) > 1 else None), self.last_end.t))
            if self.first_save is not None:
                out.append((self.first_save, *describe(self.first_save, savers if len(savers) > 1 else None, self.slowest), self.last_save.t))
            return sorted(out, key=lambda line: line[0].hseq)
        return [(self.first, *self.describe(), self.last.t)]

    def describe(self) -> tuple[str, str]:
        """(text, style name) of the line that says them all."""
        ranks, savers = sorted(self.ranks), sorted(self.savers)
        parts = []
        if self.epochs:
            parts.append(self._ends(ranks))
        if self.saves:
            said = self._saved()
            parts.append(said if ranks == savers else f"{ranks_named(savers)} {said}")
        return (" and " if ranks == savers else "; ").join(parts), EVENT_STYLES["epoch_end"]

    def _ends(self, ranks: list[int]) -> str:
        first, last = self.first_end, self.last_end
        assert first is not None and last is not None
        n = len(self.epochs)
        if self.numbered:
            text = f"{ranks_named(ranks)} ended epoch{'s' if n > 1 else ''} {ranks_text(sorted(self.epochs))}"  # type: ignore[arg-type]
            if last.step is not None:
                text += f" ({'the last at' if n > 1 else 'at'} step {last.step})"
        else:
            # (counted from the first the log holds, not the run's first: from its step)
            text = f"{ranks_named(ranks)} ended {n} epoch{'s' if n > 1 else ''}"
            if n > 1 and first.step is not None and last.step is not None:
                text += f" (steps {first.step} to {last.step})"
            elif last.step is not None:
                text += f" (at step {last.step})"
        said = error_line(last.message) if last.message and EPOCH_ENDED.fullmatch(last.message.strip()) is None else None
        if said:  # (a script's own words of its epoch: its newest)
            text += f": {said}"
        return text

    def _saved(self) -> str:
        first, last = self.first_save, self.last_save
        assert first is not None and last is not None
        n = len(self.saves)
        text = f"saved {n} checkpoints" if n > 1 else "saved a checkpoint"
        if n > 1 and first.step is not None and last.step is not None:
            text += f", steps {first.step}-{last.step}"
        elif last.step is not None:
            text += f" at step {last.step}"
        if self.slowest:
            text += f" ({'slowest ' if n > 1 or len(self.savers) > 1 else ''}{fmt_step_time(self.slowest)})"
        said = error_line(last.message) if last.message else None
        if said:  # (the newest one's path)
            text += f": {said}"
        return text


class EventLog(CachedStyles, RichLog):
    """Checkpoints, epoch ends, warnings, errors, exits and the hub's verdicts (straggler found
    or cleared, stalled, silent, exited, not sharding), stamped with the run's own clock.
    Feed it with :meth:`sync`; it writes only what it has not written yet."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "event-log--time",
        "event-log--info",
        "event-log--good",
        "event-log--warn",
        "event-log--bad",
        "event-log--dim",
    }

    DEFAULT_CSS = """
    EventLog {
        height: 1fr;
        padding: 0 1;
        background: $surface;
        overflow-y: auto;
        scrollbar-size-vertical: 1;
        scrollbar-background: $surface;
        /* The scrollbar's column is kept from the start: a line wrapped before the log
           needed it would lose its last character under it. */
        scrollbar-gutter: stable;
    }
    EventLog > .event-log--time { color: $text-muted; }
    EventLog > .event-log--info { color: $foreground; }
    EventLog > .event-log--good { color: $text-success; }
    EventLog > .event-log--warn { color: $text-warning; }
    EventLog > .event-log--bad { color: $text-error; }
    EventLog > .event-log--dim { color: $text-muted; }
    """

    def __init__(
        self, *, rank: int | None = None, name: str | None = None, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(
            max_lines=None, wrap=True, markup=False, min_width=20, name=name, id=id, classes=classes
        )
        self.rank = rank
        """Only this rank's events (None: every rank and the hub)."""
        self._state_id = 0
        self._last_hseq = -1
        self._state: RunState | None = None
        self._wrapped_at = 0
        self._cut_at = 0
        """The width lines are cut at, one an event (see CUT_ROWS), or 0: wrapped."""
        self._zero_known = False
        """Whether the lines written carry the run's clock (see :meth:`sync`)."""
        self._taken = 0
        """Events taken from the state since every line was last written from it: past its
        bound, the lines are written again from what the state keeps (see :meth:`sync`)."""
        self._starts: list[tuple[int, int]] = []
        """(hseq of the line's first event, index of its first row) of each line written."""
        self._routine: RoutineRun | None = None
        """The epoch ends and checkpoints said by the last line written, while it is theirs
        (see RoutineRun)."""
        self._left: dict[int, int | None] = {}
        """The ranks that left the job early when the lines were written (their exit 0 said so)."""
        self._loss_turns = LossTurnsHeld()
        """Which of the ranks' loss turns are listed: a loss inf every 7 steps (a script that
        skips each such update) listed two warnings each time, 40 of them."""

    def on_mount(self) -> None:
        # Written lines keep the colours of the theme they were written in: rewrite on change.
        self.app.theme_changed_signal.subscribe(self, self._rewrite)
        # Kept at its newest line as the panel's height settles, not only when a line is
        # written: a replay started at its end wrote every line into a taller panel than the
        # one line the alerts left it below 72 columns, and showed its oldest. Scrolling up
        # lets go of the anchor; the next line written takes it again, as before.
        self.anchor()

    CUT_ROWS = 2
    """Rows up to which each event takes one line, cut with "…": kept at its last line, a
    wrapped event showed its tail ("rejected", "(5 s without progress)"), no time, no rank."""

    def _cut_width(self) -> int:
        region = self.scrollable_content_region
        return region.width if self._size_known and 0 < region.height <= self.CUT_ROWS else 0

    def on_resize(self) -> None:
        # Lines are wrapped to the width they were written at: rewrap them at the new one (lines
        # written while the log was hidden were wrapped at min_width); cut, or wrapped again,
        # as the height comes to or leaves CUT_ROWS.
        width = self.scrollable_content_region.width
        cut = self._cut_width()
        if width != self._wrapped_at or cut != self._cut_at:
            self._wrapped_at = width
            if self.lines or self._state is not None:
                self._rewrite(None)

    def _rewrite(self, _theme: object) -> None:
        if self._state is not None:
            self._state_id = 0
            self.sync(self._state)

    def _s(self, name: str) -> Style:
        return component_fg(self, f"event-log--{name}")

    def _reading(self) -> bool:
        """Whether the reader scrolled up from the newest line: new lines then come without
        moving them (each one took them back to the end), until they scroll to it again.
        (Textual's anchor: released by the reader's scroll, taken again at the end.)"""
        return bool(getattr(self, "_anchor_released", False)) and self._size_known

    def _top_line(self) -> tuple[int, int] | None:
        """(hseq of the event the reader's top row shows, rows of it above that row)."""
        if not self._starts:
            return None
        top = int(self.scroll_y)
        at = bisect_right(self._starts, top, key=lambda start: start[1]) - 1
        hseq, row = self._starts[max(at, 0)]
        return hseq, max(top - row, 0)

    def _back_to(self, place: tuple[int, int]) -> None:
        """Scroll to the event the reader was at before the lines were written again (or the
        first one after it, where it is no longer kept)."""
        hseq, rows = place
        at = bisect_left(self._starts, hseq, key=lambda start: start[0])
        if at >= len(self._starts):
            y = len(self.lines)
        else:
            found, row = self._starts[at]
            y = row + (rows if found == hseq else 0)
        self.scroll_to(y=y, animate=False, immediate=True)

    def _new(self, state: RunState) -> Iterable[schema.Message]:
        whole = id(state) != self._state_id
        if whole:
            self._state_id = id(state)
            self._last_hseq = -1
            self._starts.clear()
            self._routine = None
            self._loss_turns = LossTurnsHeld()
            self.clear()
        last = self._last_hseq
        fresh = []
        for m in reversed(state.events):
            if m.hseq <= last:
                break
            fresh.append(m)
        fresh.reverse()
        if fresh:
            self._last_hseq = max(m.hseq for m in fresh)
        self._taken = 0 if whole else self._taken + len(fresh)
        return fresh

    _origin: float | None = None

    @property
    def origin(self) -> float | None:
        """Where the clock's 00:00 is (:func:`~..run_clock.run_origin`: the ranks' first word, as
        the header's elapsed and a replay's position count; an event at 00:39 of a replay at
        33 s / 33 s read as in its future); None: the state's first record. The hub's records
        before it read before 00:00 ("-0:07 hub: hub started"), not at it. While the ranks are
        awaited the lines have no clock ("--:--"): once they say hello the lines are written
        again on theirs."""
        return self._origin

    @origin.setter
    def origin(self, origin: float | None) -> None:
        if origin != self._origin:
            self._origin = origin
            self._state_id = 0  # (the next sync writes every line again)

    def sync(self, state: RunState) -> None:
        """Write the events that arrived since the last call (all of them after a new state)."""
        self._state = state
        zero = self.origin or state.t0
        # No clock until the run's 00:00 is known: read from the hub's first record while the
        # ranks were awaited, "00:00 hub: hub started" turned into "-0:02 hub: hub started"
        # when they spoke (the zero moved to their first word). "--:--" turns into a time once,
        # and a time, once said, stays.
        known = zero_known(state, zero)
        if known != self._zero_known:
            self._zero_known = known
            self._state_id = 0  # (written again, on the run's clock)
        cut = self._cut_width()
        if cut != self._cut_at:
            self._cut_at = cut
            self._state_id = 0  # (written again, cut or wrapped)
        kept = getattr(state.events, "maxlen", None)
        if kept and self._taken >= kept:
            # The state keeps its routine events (epoch ends, checkpoints) and the rest
            # (verdicts, warnings, errors) to a bound each; lines written as they came were
            # bound by their count alone, and a long run's routine lines pushed out its
            # verdicts. Written again from the state, the log holds what the state holds (and
            # at most its bound's worth of lines more).
            self._state_id = 0
        left = frame_failure(state)[1]
        if left != self._left:
            # A rank's exit 0 is known for a departure only once its peers are held or fail
            # after it: its line, written as "finished", is written again.
            self._left = left
            self._state_id = 0
        reading = self._reading()
        place = self._top_line() if reading and id(state) != self._state_id else None  # (written again)
        mine = [m for m in self._new(state) if self.rank is None or m.rank == self.rank]
        for m, ranks, took in group_alike(mine):
            held = self._loss_turns.take(m, ranks)
            if held == 0:
                continue  # (not a line: the epoch ends' line before it goes on)
            if held:  # (its own words less "the loss is inf at step N: diverged, ..." again)
                m = msgspec.structs.replace(m, message=held_text(m, held, "listed"))  # type: ignore[arg-type]
            if is_epoch_end(m) or is_save(m):
                run = self._routine
                if run is None or not self._unwrite(run):
                    run = self._routine = RoutineRun(m)  # type: ignore[arg-type]
                run.add(m, ranks, took)  # type: ignore[arg-type]
                run.row = len(self.lines) if self._size_known else None
                lines = run.lines()
                run.written = len(lines)
                for first, text, style, t in lines:
                    self._write_line(first, text, style, t, zero, known, cut, reading)
                continue
            self._routine = None
            self._write_line(m, *describe(m, ranks, took, left), m.t, zero, known, cut, reading)
        if place is not None:
            self._back_to(place)

    def _write_line(self, m: schema.Message, text: str, style: str, t: float, zero: float | None, known: bool, cut: int, reading: bool) -> None:
        """Write one line: ``m`` the first event it says (its place), ``t`` its time."""
        if self._size_known:
            self._starts.append((m.hseq, len(self.lines)))
        text = tame(text)
        at = t - zero if known and t and zero else None
        line = Text.assemble((fmt_clock(at) + " ", self._s("time")), (text, self._s(style)))
        if cut:
            line.truncate(cut, overflow="ellipsis")
            self.write(line, width=cut, scroll_end=not reading)
        else:
            self.write(line, scroll_end=not reading)

    def _unwrite(self, run: RoutineRun) -> bool:
        """Take back the lines of ``run``, the last ones written, to write it again; False where
        it cannot be found (written before the log had a size, rendered since: it is written
        again with every line at the next sync). RichLog keeps no public way to take a line
        back: its own fields are used, and a Textual without them (pyproject allows >= 0.80)
        writes the whole log again instead, where the ends fold as well."""
        deferred = getattr(self, "_deferred_renders", None)
        cache = getattr(self, "_line_cache", None)
        widest = getattr(self, "_widest_line_width", None)
        if deferred is None or cache is None or widest is None:
            self._state_id = 0
            return False
        if run.row is None:
            if self._size_known or len(deferred) < run.written:
                self._state_id = 0
                return False
            for _ in range(run.written):
                deferred.pop()  # (their renders, deferred until the log has a size)
            return True
        row = run.row
        del self.lines[row:]
        while self._starts and self._starts[-1][1] >= row:
            self._starts.pop()
        cache.clear()
        self.virtual_size = Size(widest, len(self.lines))
        self.refresh()
        return True
