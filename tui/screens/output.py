"""The ranks' own output (what the script prints, its warnings and tracebacks), as ``tail -f``
shows it: under the TUI it goes to the run's ``output.log`` alone, where nothing on the screen
said it was."""

from __future__ import annotations

import os
from collections import deque
from typing import ClassVar, NamedTuple

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.events import Resize
from textual.screen import Screen
from textual.strip import Strip
from textual.widgets import Input, RichLog, Static

from pardash.telemetry.redraws import Redraws
from pardash.telemetry.schema import plain_text

from ..widgets.fitted_footer import FittedFooter

TAIL_BYTES = 1 << 20
"""How much of the file's end is read as the screen opens: its last lines, not a day of them."""
MAX_LINES = 5000
"""Lines the screen keeps (the oldest go first): the file has them all."""
READ_BYTES = 1 << 20
"""The most read at a time: a script printing fast is shown in steps, the screen never held up."""
LINE_MAX = 4096
"""A line's characters shown (a progress bar redrawn with CR for an hour is one line)."""
FOLLOW_S = 0.25
"""How often the file is looked at for more."""


class OutputTail:
    """The complete lines added to a text file since the last read, from its last TAIL_BYTES
    at the first; a file made anew (truncated, or another at its path) is read from its start.
    A carriage return ends a line's drawing as a terminal's does: what follows the last one is
    the line (a progress bar redrawn in place is its latest state, not every state joined); a
    display drawn in place over several lines (rich's: a Lightning bar with its validation bar)
    shows as it ends, not a line each time it is drawn again."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset: int | None = None
        self.skipped = 0
        """Bytes before the part first read, not shown."""
        self._ino = 0
        self._partial = b""
        self._drop = False
        """The first line read is the end of one begun before the part read: not shown."""
        self._redraws = Redraws()

    def read(self) -> list[str] | None:
        """The new complete lines ([] when none), or None when the file cannot be read."""
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if self.offset is None or st.st_ino != self._ino or st.st_size < self.offset:
                    first = self.offset is None
                    self._ino, self._partial = st.st_ino, b""
                    self._redraws = Redraws()
                    self.offset = max(0, st.st_size - TAIL_BYTES) if first else 0
                    self.skipped = self.offset
                    self._drop = False
                    if self.offset:
                        f.seek(self.offset - 1)
                        self._drop = f.read(1) != b"\n"
                f.seek(self.offset)
                data = f.read(READ_BYTES)
        except OSError:
            return None
        self.offset += len(data)
        data = self._partial + data
        *whole, self._partial = data.split(b"\n")
        if self._drop and whole:
            whole, self._drop = whole[1:], False
        if len(self._partial) > LINE_MAX * 4:  # (no newline for a long while: keep its latest drawing)
            self._partial = self._partial[self._partial.rfind(b"\r", 0, len(self._partial) - 1) + 1 :][-LINE_MAX:]
        return [_shown(line) for line in self._redraws.take(whole) + self._redraws.flush()]

    @property
    def partial(self) -> str:
        """The line being written, as a terminal shows it now ('' when none): a progress bar
        redrawn with CR has no newline until it is done, and showed nothing for all that time
        (``tail -f`` shows its latest drawing)."""
        if not self._partial or self._drop:
            return ""
        return _shown(self._partial.rstrip(b"\r"))


def _shown(line: bytes) -> str:
    text = line.decode("utf-8", errors="replace").rstrip("\r")
    if "\r" in text:
        text = text.rsplit("\r", 1)[1]
    if "\t" in text:  # (a table aligned with tabs stays aligned: plain_text makes a tab one space)
        text = text.expandtabs(8)
    if len(text) > LINE_MAX:
        text = text[:LINE_MAX] + f" … ({len(text) - LINE_MAX:,} more characters)"
    return plain_text(text)


class OutputLog(RichLog):
    """The file's lines, with a find's matches marked as ``less`` marks them: the text matched
    on every line shown, and the line the find is at across its whole width (which a view held
    at the file's end shows anywhere in it, not at the top)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"output-log--match", "output-log--at"}
    DEFAULT_CSS = """
    OutputLog > .output-log--match {
        background: $accent;
        color: $text;
        text-style: bold;
    }
    OutputLog > .output-log--at {
        background: $accent-muted;
    }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.needle = ""
        """What the find matched, lower case ('' when none is shown)."""
        self.at: int | None = None
        """The line the find is at, counted from the first the log ever held (lines dropped
        past MAX_LINES move the others' indexes, not this), or None."""
        self.held_at = False
        """The view is where the find put it (see :meth:`show_at`), even at the file's end,
        until a key of the reader's moves it: held still there, and kept on the line as the
        view's height changes (a resize, the title a line longer)."""

    @property
    def first(self) -> int:
        """The count of lines dropped from the log's start (the first one's number)."""
        return self._start_line

    def mark(self, needle: str, at: int | None) -> None:
        self.needle, self.at = needle.lower(), at
        self.refresh()

    def show_at(self) -> None:
        """The view on the line the find is at: at its top, or, in the file's last screenful
        (the newest lines, where a find starts), wherever it is there."""
        if self.at is None:
            return
        y = max(0, self.at - self._start_line)  # (0: gone from the start, past MAX_LINES)
        self.scroll_to(y=min(y, self.max_scroll_y), animate=False, immediate=True)
        self.held_at = True

    def on_resize(self, event: Resize) -> None:
        super().on_resize(event)
        if self.held_at:
            self.call_after_refresh(self.show_at)  # (once the new height is the scroll's)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        if not self.needle or index >= len(self.lines) or self.needle not in self.lines[index].text.lower():
            return super().render_line(y)
        strip = _marked(self.lines[index], self.needle, self.get_component_rich_style("output-log--match", partial=True))
        pad = self.rich_style
        if index + self._start_line == self.at:  # (under the matched text's own style, to the view's edge)
            at = self.get_component_rich_style("output-log--at", partial=True)
            strip, pad = strip.apply_style(at), pad + at
        strip = strip.crop_extend(scroll_x, scroll_x + self.scrollable_content_region.width, pad)
        return strip.apply_style(self.rich_style)


def _marked(strip: Strip, needle: str, style: Style) -> Strip:
    """``strip`` with each stretch of it that reads ``needle`` (lower case) in ``style``."""
    text = strip.text
    low = text.lower()
    cuts: list[int] = []
    start = low.find(needle)
    while start >= 0:
        end = start + len(needle)
        cuts += [cell_len(text[:start]), cell_len(text[:end])]
        start = low.find(needle, end)
    if not cuts:
        return strip
    parts = strip.divide([*cuts, strip.cell_length])  # (its last cut is the end: the rest is no piece of its own)
    # (divide's pieces: before the first match, the match, between, the next match, ...)
    return Strip.join(part.apply_style(style) if n % 2 else part for n, part in enumerate(parts))


class OutputScreen(Screen):
    """The ranks' output file, followed as it grows (``end``); scrolled up to read back, the
    view holds still and counts the lines that came meanwhile, which ``end`` brings in (as
    ``less +F``). ``/`` finds a line, newest first, as ``less`` does: the view goes to it (at
    the top, or where it is in the last screenful) and holds still there, its matches marked
    until the next find or escape. Escape (once the marks are gone) or ``o`` goes back; ``e``
    shows the ranks' stderr file of a launch that keeps it apart (a headless one)."""

    DEFAULT_CSS = """
    OutputScreen {
        layout: vertical;
    }
    OutputScreen #title {
        height: auto;
        padding: 0 1;
        background: $panel;
    }
    OutputScreen RichLog {
        border: round $panel-lighten-2;
        border-title-color: $text-accent;
        border-title-style: bold;
        background: $surface;
    }
    OutputScreen RichLog:focus {
        border: round $border;
    }
    OutputScreen #partial {
        height: auto;
        max-height: 3;
        padding: 0 1;
        color: $text-muted;
    }
    OutputScreen #find {
        display: none;
    }
    OutputScreen #find.-open {
        display: block;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", key_display="esc/o"),
        Binding("o", "back(True)", show=False),
        # (before the log's own end, which scrolls with an animation: a line written meanwhile
        # left the view short of the end, and it never followed again)
        Binding("end", "follow", "Follow", priority=True),
        # The reader going back: the view holds still from here (told by its keys, not only by
        # where the view is: a scroll to the end still to come read as one up)
        Binding("up", "back_by('up')", show=False, priority=True),
        Binding("pageup", "back_by('page_up')", show=False, priority=True),
        Binding("home", "back_by('home')", show=False, priority=True),
        Binding("e", "other", "Stderr", tooltip="The ranks' stderr file, kept apart by a headless launch"),
        Binding("slash", "find", "Find", key_display="/", tooltip="Find a line (newest first; n older, N newer)"),
        Binding("n", "find_next(-1)", show=False),
        Binding("N", "find_next(1)", show=False),
    ]

    def __init__(self, path: str, missing: str = "", stderr: str = "", note: str = "") -> None:
        """``path``: the file; ``missing``: what to say when there is none (why, where it is);
        ``stderr``: the ranks' stderr file where it is kept apart ('' where it is in ``path``);
        ``note``: said after the file's name (a replay's: the whole file, not its moment)."""
        super().__init__()
        self.files = [f for f in (path, stderr) if f]
        self.missing = missing
        self.note = note
        self._open(path)

    def _open(self, path: str) -> None:
        self.path = path
        self.tail = OutputTail(path) if path else None
        self._lines = 0
        self._follow = True
        self._seen_y = 0.0
        self._held: deque[str] = deque(maxlen=MAX_LINES)
        """Lines that came while the view was scrolled up (the newest MAX_LINES)."""
        self._held_n = 0
        self._find = ""
        self._found: list[int] = []
        """The log's lines (strips) the last find matched, oldest first, counted from the first
        the log ever held (see OutputLog.at), and which is shown."""
        self._found_at = -1

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if self._finding() and action in ("back_by", "follow", "other", "find", "find_next"):
            return False  # (keys typed into the find box are its own)
        if action == "other":
            return len(self.files) > 1
        if action == "find_next":
            return bool(self._found)
        return True

    def _finding(self) -> bool:
        return self.query_one("#find", Input).has_class("-open")

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        # Wrapped: a long line (torchrun's warnings) is read whole, with no sideways scrolling.
        yield OutputLog(max_lines=MAX_LINES, wrap=True, markup=False, highlight=False, auto_scroll=False)
        yield Static(id="partial", markup=False)
        yield Input(placeholder="find: a line holding this (enter; esc: never mind)", id="find")
        yield FittedFooter()

    def on_mount(self) -> None:
        log = self.query_one(OutputLog)
        log.border_title = "the ranks' output"
        log.focus()
        # (once the log has its size: a line written before it is laid out later, and scrolled
        # with it after the refresh, see _more)
        self.call_after_refresh(self._more)
        self.set_interval(FOLLOW_S, self._more)

    def _more(self) -> None:
        log = self.query_one(OutputLog)
        y = log.scroll_y
        if self._follow and y < self._seen_y - 0.5 and not log.is_vertical_scroll_end:
            # The view moved up since the last look, short of the end (a mouse wheel, the scroll
            # bar; the keys say it themselves, see action_back_by): the reader's, as no scroll of
            # this screen's goes up. (At the end it is the log grown taller, the title or the line
            # being written under it a line shorter: its end came up to meet the view.) The view
            # holds still from here (see _held).
            self._follow = False
        elif not self._follow and not self._held_n and not log.held_at and log.is_vertical_scroll_end:
            self._follow = True  # scrolled back down to the end, nothing held: followed again
        lines = self.tail.read() if self.tail is not None else None
        if lines:
            self._lines += len(lines)
            if self._follow:
                log.write(Text("\n".join(lines)), scroll_end=False)
                # Now, not after the next refresh (the log's own scroll_end=True): a scroll to
                # an end taken then landed after a later one, a line short of the end, and read
                # as the reader's scroll up; and the position kept below is the end's.
                log.scroll_end(animate=False, immediate=True, x_axis=False)
            else:
                self._held.extend(lines)
                self._held_n += len(lines)
        self._seen_y = log.scroll_y
        self._title(lines is not None)
        partial = self.tail.partial if self.tail is not None and lines is not None and self._follow else ""
        shown = self.query_one("#partial", Static)
        shown.display = bool(partial)
        if partial:
            shown.update(f"▸ {partial}")

    def _title(self, readable: bool) -> None:
        title = self.query_one("#title", Static)
        if self.tail is None or not readable:
            why = self.missing if self.tail is None else f"{self.path}: cannot read it (not written yet, or gone)"
            title.update(Content.from_markup("[b $text-accent]output[/]  $why", why=why))
            return
        read = f"{self._lines:,} lines" if self._lines <= MAX_LINES else f"{self._lines:,} lines read, the last {MAX_LINES:,} kept"
        before = f", after {self.tail.skipped / (1 << 20):,.1f} MiB not shown" if self.tail.skipped else ""
        held = f" · paused: {self._held_n:,} new lines (end follows)" if self._held_n else ""
        if self._find:
            log = self.query_one(OutputLog)
            gone = log.at is not None and log.at < log.first
            held += (f" · {self._find!r}: {len(self._found) - self._found_at} of {len(self._found)}"
                     f"{f' (gone: the view keeps the last {MAX_LINES:,} lines)' if gone else ''}, newest first (n older, N newer)"
                     if self._found
                     else f" · no line holds {self._find!r}")  # fmt: skip
        other = " · e: its stderr" if len(self.files) > 1 and self.path == self.files[0] else " · e: its stdout" if len(self.files) > 1 else ""
        note = f" · {self.note}" if self.note else ""
        text = f"{self.path} · {read}{before}{note}{held}{other}"
        title.update(Content.from_markup("[b $text-accent]output[/]  $text", text=text))

    def action_follow(self) -> None:
        log = self.query_one(OutputLog)
        log.held_at = False
        if self._held:
            log.write(Text("\n".join(self._held)), scroll_end=False)
        self._held.clear()
        self._held_n = 0
        self._follow = True
        log.scroll_end(animate=False, immediate=True)
        self._seen_y = log.scroll_y  # (only the reader scrolls up: see _more)
        self._title(True)

    def action_back_by(self, how: str) -> None:
        log = self.query_one(OutputLog)
        self._follow = False
        log.held_at = False
        getattr(log, f"scroll_{how}")(animate=False)
        self._title(True)

    def action_other(self) -> None:
        if len(self.files) < 2:
            return
        self._open(self.files[1] if self.path == self.files[0] else self.files[0])
        log = self.query_one(OutputLog)
        log.border_title = "the ranks' stderr" if self.path != self.files[0] else "the ranks' output"
        log.clear()
        log.mark("", None)
        log.held_at = False
        self._more()

    def action_find(self) -> None:
        box = self.query_one("#find", Input)
        box.add_class("-open")
        box.value = self._find
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._close_find()
        self._find = event.value.strip()
        log = self.query_one(OutputLog)
        needle = self._find.lower()
        first = log.first
        self._found = [first + i for i, strip in enumerate(log.lines) if needle in strip.text.lower()] if needle else []
        log.mark(needle if self._found else "", None)
        if not self._found:
            self._title(True)
            return
        self._found_at = len(self._found)  # (the newest first: the next older one is the last)
        self.action_find_next(-1)

    def action_find_next(self, direction: int) -> None:
        """Go to the next older (-1) or newer (+1) line the find matched and mark it; the view
        holds still there (lines that come are counted, as scrolled up)."""
        if not self._found:
            self._title(True)
            return
        self._found_at = max(0, min(len(self._found) - 1, self._found_at + direction))
        log = self.query_one(OutputLog)
        self._follow = False
        log.mark(self._find, self._found[self._found_at])
        self._title(True)
        log.show_at()
        self._seen_y = log.scroll_y

    def _close_find(self) -> None:
        self.query_one("#find", Input).remove_class("-open")
        self.query_one(OutputLog).focus()

    def action_back(self, leave: bool = False) -> None:
        """Escape: close the find box, else take a find's marks away, else go back; ``o`` goes
        back."""
        log = self.query_one(OutputLog)
        if self._finding():  # (escape in the find box: never mind)
            self._close_find()
        elif log.needle and not leave:
            log.mark("", None)
            self._find, self._found = "", []
            self._title(True)
        else:
            self.app.pop_screen()


class OutputFiles(NamedTuple):
    """Where a run's ranks' output is, as :class:`OutputScreen` takes it."""

    path: str
    missing: str = ""
    """Why there is no ``path`` (and where the output may be)."""
    stderr: str = ""
    """The ranks' stderr, where a launch keeps it apart (headless: ``torchrun/stderr.log``)."""
    note: str = ""


def output_file(source, given: str = "", runs_dir: str = "runs") -> OutputFiles:
    """The file of ``source``'s ranks' output, and what to say when there is none: ``given``
    (the launch's own), else the one in the run's folder (the registry's entry of an attached
    run; a replayed log's own folder, else RUNS/<run id> beside the log or under ``runs_dir``:
    a log recorded at a --log path), with its stderr file where a headless launch kept that
    apart (tracebacks, warnings, progress bars: nowhere in output.log)."""
    if given:
        return OutputFiles(given, stderr=_stderr_beside(given))
    info = getattr(source, "info", None) or {}
    run_dir = info.get("run_dir") if isinstance(info, dict) else None
    if isinstance(run_dir, str) and run_dir:
        path = os.path.join(run_dir, "output.log")
        if os.path.exists(path):
            return OutputFiles(path, stderr=_stderr_beside(path))
        return OutputFiles("", f"no output.log in the run's folder {run_dir} (a launch on another node keeps its own)")
    replayed = getattr(source, "path", "")
    if replayed:
        note = "the whole file, to the run's end (not the replay's moment)"
        path = os.path.join(os.path.dirname(os.path.abspath(replayed)), "output.log")
        if os.path.exists(path):
            return OutputFiles(path, stderr=_stderr_beside(path), note=note)
        # A launch with --log PATH records the log there, the output in its run's folder: the
        # launch's --runs-dir (./runs), which is beside the log when PATH was a bare name.
        folders: dict[str, str] = {}
        for run in getattr(source, "runs", ()):
            if not run or run.startswith(".") or os.sep in run:  # (a log's word, not a path to follow)
                continue
            for runs in (os.path.join(os.path.dirname(replayed), "runs"), runs_dir):
                folders.setdefault(os.path.abspath(os.path.join(runs, run)), os.path.join(runs, run))
        for folder in folders.values():
            path = os.path.join(folder, "output.log")
            if os.path.exists(path):
                return OutputFiles(path, stderr=_stderr_beside(path), note=note)
        looked = f", nor in {' or '.join(folders.values())}" if folders else ""
        return OutputFiles("", f"no output.log beside {replayed}{looked} (a launch keeps one in its run's folder, under its --runs-dir)")
    if getattr(source, "live", False):
        return OutputFiles("", "this run's output file is not known here: its launch is on another machine, or it was not started by pardash launch")
    return OutputFiles("", "this run has no output file")


def _stderr_beside(output: str) -> str:
    """The run folder's ``torchrun/stderr.log`` beside ``output`` when it holds anything (a
    headless launch keeps the ranks' stderr apart there), else ''."""
    path = os.path.join(os.path.dirname(output), "torchrun", "stderr.log")
    try:
        return path if os.path.getsize(path) > 0 else ""
    except OSError:
        return ""
