"""Leaving a launched run: stop the job, or detach and leave it running."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Label

from pardash.telemetry.state import RunState
from pardash.telemetry.summary import ranks_text

from ..alerts import never_heard
from ..messages import RunUpdated

STOP = "stop"
DETACH = "detach"
OVER = "over"
"""Leaving once the job has ended (every rank ended, or the launch saw its torchrun exit):
nothing to stop (the dialog is not shown, or says so when the job ended while it was open)."""
CHECK_S = 0.5
"""How often an open dialog asks whether the job has ended."""
NOTHING_LEFT = "there is nothing to stop or leave running."
TINY_WIDTH = 50
"""Under this many columns the dialog's buttons are "Stop", "Detach", "Cancel", closer set."""


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks_text(ranks)}"


def ended_text(state: RunState | None) -> str:
    """What the dialog says of a job that ended while it was open: every rank ended, and
    torchrun with them; or, where the launch saw its torchrun exit with ranks whose end no word
    said (silent, killed with their node) or never heard from, which ones (it said "every rank
    has finished or exited" of a job with a rank silent for good)."""
    if state is None:
        return f"The job has ended (torchrun exited): {NOTHING_LEFT}"
    unsaid = sorted(q for q, r in state.ranks.items() if not r.finished and r.exit_code is None)
    missing = never_heard(state)
    if not unsaid and not missing:
        return f"Every rank has ended, and torchrun with them: {NOTHING_LEFT}"
    parts = []
    if unsaid:
        parts.append(f"{_ranks(unsaid)} said no end of {'its' if len(unsaid) == 1 else 'their'} own")
    if missing:
        parts.append(f"{_ranks(missing)} {'was' if len(missing) == 1 else 'were'} never heard from")
    they = "it" if len(unsaid) + len(missing) == 1 else "they"
    return f"torchrun has exited, though {' and '.join(parts)} (how {they} ended is not known): {NOTHING_LEFT}"


class QuitScreen(ModalScreen[str | None]):
    """Asks what leaving means for a job this viewer launched. Dismisses with ``"stop"``,
    ``"detach"`` or None (cancel)."""

    DEFAULT_CSS = """
    QuitScreen {
        align: center middle;
    }
    QuitScreen > Vertical {
        width: 64;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        padding: 1 2;
        border: thick $primary 60%;
        background: $surface;
    }
    QuitScreen #question {
        width: 100%;
        text-style: bold;
        margin-bottom: 1;
    }
    QuitScreen .explain {
        width: 100%;
        color: $text-muted;
        margin-bottom: 1;
    }
    QuitScreen Horizontal {
        height: auto;
        align-horizontal: right;
    }
    QuitScreen Button {
        margin-left: 1;
    }
    QuitScreen.-narrow Button {
        min-width: 10;
    }
    QuitScreen.-tiny > Vertical {
        padding: 1 1;
    }
    QuitScreen.-tiny Button {
        min-width: 8;
    }
    QuitScreen.-short > Vertical {
        padding: 0 1;
    }
    QuitScreen.-short .explain {
        display: none;
    }
    QuitScreen #keys {
        width: 100%;
        margin-top: 1;
        color: $text-muted;
        text-align: right;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("s", "choose('stop')", "Stop the job"),
        # Ctrl+C again, on the question a first Ctrl+C asked: in the launch's own viewer, stop,
        # as a second Ctrl+C stops a torchrun job (and `pardash launch --headless`'s "Ctrl-C
        # again stops it"); in a viewer attached to the job, detach (see action_ctrl_c).
        Binding("ctrl+c", "ctrl_c", "Stop the job", show=False),
        Binding("d", "choose('detach')", "Detach"),
        Binding("c", "cancel", "Cancel", show=False),
        Binding("q", "leave_if_over", show=False),
        Binding("left", "app.focus_previous", show=False),
        Binding("right", "app.focus_next", show=False),
    ]

    def __init__(self, run_id: str = "", over: Callable[[], bool] | None = None, come_back: str = "", attached: bool = False) -> None:
        super().__init__()
        self.run_id = run_id
        self.attached = attached
        """This viewer attached to a job it did not launch (``pardash attach``): Ctrl+C twice
        leaves it, as it leaves nvitop or ``tail -f``. It stopped the job: hours of training
        lost to someone looking in on it (the headless attach's Ctrl-C only stops watching)."""
        self.come_back = come_back
        """The command that watches the run again (default ``pardash attach RUN_ID``): on a
        node > 0, whose registry knows no such run, it attaches to node 0's hub, and a run with
        keys needs them (the default said to come back there failed)."""
        self.over = over
        """Whether the job has ended (every rank done, no restart to come): asked as the run
        updates, so a job that ends while the dialog is open is said, and any choice leaves."""
        self.ended = False

    def compose(self) -> ComposeResult:
        run = f" {self.run_id}" if self.run_id else ""
        with Vertical():
            yield Label(f"Leave run{run}?", id="question")
            # The run named: with several live runs, a bare `pardash attach` takes the newest.
            again = self.come_back or f"pardash attach {self.run_id}".rstrip()
            self._explained = (
                "Stop: every rank is ended (torchrun gets SIGTERM); the hub writes the log to the end.",
                f"Detach: the job, the hub and the log go on; come back with `{again}`.",
            )
            for text in self._explained:
                yield Label(Content(text), classes="explain")
            with Horizontal():
                yield Button("Stop the job", variant="error", id="stop")
                yield Button("Detach", variant="primary", id="detach")
                yield Button("Cancel", id="cancel")
            keys = "s stop · d or ctrl+c detach" if self.attached else "s or ctrl+c stop · d detach"
            yield Label(f"{keys} · esc cancel", id="keys")

    def on_resize(self) -> None:
        # Under the dialog's width the buttons' least width (16 each) pushed Cancel off the screen
        width, height = self.size
        self.set_class(width < 66, "-narrow")
        # At 40 columns "Stop the job" left Cancel cut to "Cance" (review 302).
        self.set_class(width < TINY_WIDTH, "-tiny")
        if not self.ended:
            self.query_one("#stop", Button).label = "Stop" if width < TINY_WIDTH else "Stop the job"
        # The explanations wrap to several lines each on a narrow screen: on a short one they
        # pushed the buttons below its edge (at 40x12 the dialog had none). They go first; the
        # keys line stays, and says what each key does.
        inner = min(64, width) - 2 - (2 if width < TINY_WIDTH else 4)
        keys = str(self.query_one("#keys", Label).render())
        lines = (2 + 2) + 2 + 3 + 1 + len(textwrap.wrap(keys, max(inner, 1)))  # border, padding, question, buttons, keys
        lines += sum(len(textwrap.wrap(text, max(inner, 1))) + 1 for text in self._explained)
        self.set_class(lines > height, "-short")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()
        if self.over is not None:
            # The launcher learns the job's end apart from the run's frames (torchrun exits
            # after the ranks' last word): ask now and then as well as on each update.
            self.set_interval(CHECK_S, self._check_over)

    def on_run_updated(self, _message: RunUpdated) -> None:
        self._check_over()

    def _check_over(self) -> None:
        if self.ended or self.over is None or not self.over():
            return
        # The job ended while the question was open: there is nothing left to stop or leave
        # running (a dialog that still offered both, and ignored q, read as a hung viewer).
        self.ended = True
        run = f" {self.run_id}" if self.run_id else ""
        self.query_one("#question", Label).update(f"Run{run} has ended.")
        explain = list(self.query(".explain").results(Label))
        explain[0].update(ended_text(getattr(self.app, "source", None) and self.app.source.state))  # type: ignore[attr-defined]
        for label in explain[1:]:
            label.display = False
        self.query_one("#stop", Button).display = False
        detach = self.query_one("#detach", Button)
        detach.label = "Leave"
        detach.focus()
        self.query_one("#keys", Label).update("q leave · esc stay")

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "cancel":
            self.dismiss(None)
        else:
            self.action_choose(event.button.id or DETACH)

    def action_choose(self, choice: str) -> None:
        self.dismiss(OVER if self.ended else choice)

    def action_ctrl_c(self) -> None:
        self.action_choose("detach" if self.attached else "stop")

    def action_leave_if_over(self) -> None:
        """q on the dialog: leaves once the job has ended (before, it waits for s, d or esc)."""
        if self.ended:
            self.dismiss(OVER)

    def action_cancel(self) -> None:
        self.dismiss(None)
