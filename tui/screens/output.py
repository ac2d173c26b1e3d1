"""The ranks' own output (what the script prints, its warnings and tracebacks), as ``tail -f``
shows it: under the TUI it goes to the run's ``output.log`` alone, where nothing on the screen
said it was."""

from __future__ import annotations

import os
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from rich.text import Text
from textual.widgets import RichLog, Static

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
    the line (a progress bar redrawn in place is its latest state, not every state joined)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset: int | None = None
        self.skipped = 0
        """Bytes before the part first read, not shown."""
        self._ino = 0
        self._partial = b""
        self._drop = False
        """The first line read is the end of one begun before the part read: not shown."""

    def read(self) -> list[str] | None:
        """The new complete lines ([] when none), or None when the file cannot be read."""
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if self.offset is None or st.st_ino != self._ino or st.st_size < self.offset:
                    first = self.offset is None
                    self._ino, self._partial = st.st_ino, b""
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
        return [_shown(line) for line in whole]

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
    return plain_text(text[:LINE_MAX])


class OutputScreen(Screen):
    """The ranks' output file, followed as it grows while the view is at its end (scroll up to
    read back, ``end`` to follow again). Escape or ``o`` goes back."""

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
    """

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,o", "back", "Back")]

    def __init__(self, path: str, missing: str = "") -> None:
        """``path``: the file; ``missing``: what to say when there is none (why, where it is)."""
        super().__init__()
        self.path = path
        self.missing = missing
        self.tail = OutputTail(path) if path else None
        self._lines = 0

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        # Wrapped: a long line (torchrun's warnings) is read whole, with no sideways scrolling.
        yield RichLog(max_lines=MAX_LINES, wrap=True, markup=False, highlight=False, auto_scroll=False)
        yield Static(id="partial", markup=False)
        yield FittedFooter()

    def on_mount(self) -> None:
        log = self.query_one(RichLog)
        log.border_title = "the ranks' output"
        log.focus()
        self._more()
        self.set_interval(FOLLOW_S, self._more)

    def _more(self) -> None:
        lines = self.tail.read() if self.tail is not None else None
        if lines:
            self._lines += len(lines)
            log = self.query_one(RichLog)
            # Followed while the view is at the end; left where it is while scrolled up to read.
            log.write(Text("\n".join(lines)), scroll_end=log.is_vertical_scroll_end or not log.lines)
        self._title(lines is not None)
        partial = self.tail.partial if self.tail is not None and lines is not None else ""
        shown = self.query_one("#partial", Static)
        shown.display = bool(partial)
        if partial:
            shown.update(f"▸ {partial}")

    def _title(self, readable: bool) -> None:
        title = self.query_one("#title", Static)
        if self.tail is None or not readable:
            why = self.missing if self.tail is None else f"{self.path}: cannot read it (not written yet, or gone)"
            title.update(f"[b $text-accent]output[/]  {why}")
            return
        before = f", after {self.tail.skipped / (1 << 20):,.1f} MiB not shown" if self.tail.skipped else ""
        title.update(f"[b $text-accent]output[/]  {self.path} · {self._lines:,} lines{before}")

    def action_back(self) -> None:
        self.app.pop_screen()


def output_file(source, given: str = "") -> tuple[str, str]:
    """The file of ``source``'s ranks' output, and what to say when there is none: ``given``
    (the launch's own), else the one in the run's folder (the registry's entry of an attached
    run; a replayed log's own folder)."""
    if given:
        return given, ""
    info = getattr(source, "info", None) or {}
    run_dir = info.get("run_dir") if isinstance(info, dict) else None
    if isinstance(run_dir, str) and run_dir:
        path = os.path.join(run_dir, "output.log")
        if os.path.exists(path):
            return path, ""
        return "", f"no output file in the run's folder {run_dir}: a headless launch prints its ranks' output on its own terminal"
    replayed = getattr(source, "path", "")
    if replayed:
        path = os.path.join(os.path.dirname(os.path.abspath(replayed)), "output.log")
        if os.path.exists(path):
            return path, ""
        return "", f"no output.log beside {replayed} (a launch under the TUI keeps one in its run's folder)"
    if getattr(source, "live", False):
        return "", "this run's output file is not known here: its launch is on another machine, or it was not started by pardash launch"
    return "", "this run has no output file"
