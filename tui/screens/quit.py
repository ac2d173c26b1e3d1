"""Leaving a launched run: stop the job, or detach and leave it running."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label

STOP = "stop"
DETACH = "detach"
OVER = "over"
"""Leaving once every rank has finished or exited: nothing to stop (the dialog is not shown)."""


class QuitScreen(ModalScreen[str | None]):
    """Asks what leaving means for a job this viewer launched. Dismisses with ``"stop"``,
    ``"detach"`` or None (cancel)."""

    DEFAULT_CSS = """
    QuitScreen {
        align: center middle;
    }
    QuitScreen > Vertical {
        width: 64;
        height: auto;
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
        Binding("d", "choose('detach')", "Detach"),
        Binding("c", "cancel", "Cancel", show=False),
        Binding("left", "app.focus_previous", show=False),
        Binding("right", "app.focus_next", show=False),
    ]

    def __init__(self, run_id: str = "") -> None:
        super().__init__()
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        run = f" {self.run_id}" if self.run_id else ""
        with Vertical():
            yield Label(f"Leave run{run}?", id="question")
            yield Label(
                "Stop the job ends every rank (torchrun gets SIGTERM); the hub writes the log to the end.",
                classes="explain",
            )
            yield Label(
                "Detach: the job, the hub and the log go on; come back with `pardash attach`.",
                classes="explain",
            )
            with Horizontal():
                yield Button("Stop the job", variant="error", id="stop")
                yield Button("Detach", variant="primary", id="detach")
                yield Button("Cancel", id="cancel")
            yield Label("s stop · d detach · esc cancel", id="keys")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "cancel":
            self.dismiss(None)
        else:
            self.dismiss(event.button.id)

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)

    def action_cancel(self) -> None:
        self.dismiss(None)
