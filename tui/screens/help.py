"""The keys, in one place."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from ..grid_layout import LEVEL_GLYPHS

KEYS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "Dashboard",
        (
            ("↑ ↓ ← →", "move between ranks"),
            ("home end pgup pgdn", "first, last, a page up or down"),
            ("enter / double click", "rank detail: charts, phases, memory, system, events"),
            ("c", "cells or heat map (one character per rank)"),
            ("s", "sort: rank, step time, self time, memory, loss (not finite first), status (cells in their node, a heat map across nodes)"),
            ("f", "flagged ranks only, or all"),
            ("/", "go to a rank: type its number, enter"),
            ("m", "memory: per-rank shards against unsharded"),
            ("o", "output: what the ranks print (their output file), followed as it grows"),
            ("tab", "focus the event log (scroll it with ↑ ↓; tab, shift+tab or escape: back)"),
        ),
    ),
    (
        "Rank detail",
        (
            ("n  p", "the next or the previous rank, in the grid's order (as sorted and filtered)"),
            ("escape", "back to the grid, on the rank last shown"),
        ),
    ),
    (
        "Output (o)",
        (
            ("↑ ↓ pgup pgdn home", "read back: the view holds still, the lines that come meanwhile are counted"),
            ("end", "to the end, following what comes"),
            ("/  n  N", "find a line holding a text, newest first; n an older one, N a newer"),
            ("e", "the ranks' stderr, where a headless launch keeps it apart"),
            ("escape, o", "back to the dashboard"),
        ),
    ),
    (
        "Replay",
        (
            ("space", "pause or resume"),
            ("+  -", "faster, slower"),
            ("[  ]", "back, forward 10 s"),
            ("{  }", "back, forward 60 s (a tenth of runs over 10 min)"),
            ("<  >", "to the run's start, to its end"),
        ),
    ),
    (
        "Anywhere",
        (
            ("escape", "back to the dashboard"),
            ("?", "this help"),
            ("ctrl+p", "command palette (actions, themes)"),
            ("q, ctrl+c", "quit (a job pardash launched asks: stop or detach)"),
            ("ctrl+z", "suspend the viewer (the shell's fg brings it back; the job trains on)"),
        ),
    ),
)


def keys_table() -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for i, (group, rows) in enumerate(KEYS):
        if i:
            table.add_row("", "")
        table.add_row(Text(group, style="bold underline"), "")
        for key, what in rows:
            table.add_row(key, what)
    return table


GLOSSARY = (
    f"heat map (c): a character a rank; [$text-success]{LEVEL_GLYPHS[0]}[/] ok, [$text-warning]{LEVEL_GLYPHS[1]}[/] self +10%, "
    f"[$text-error]{LEVEL_GLYPHS[2]}[/] +25% (a running rank's self time that far over the other ranks' median), "
    "[$text-warning]▲[/] straggler, [$text-error]◆[/] stalled ([$text-error reverse]◆[/]: the rank a hang "
    "likely waits for, [$text-warning]◇[/] waiting for it), [$text-error]○[/] silent (no heartbeat), "
    "[$text-error]×[/] exited ([$text-error reverse]×[/]: the first to exit), [$text-secondary]◐[/] stopping "
    "(a stop began and the rank has not ended yet: its SIGTERM handler still running), [$text-secondary]▬[/] stopped "
    "(Ctrl-C, a Stop, SIGTERM: not a failure), [$text-primary]□[/] done, [$text-error]◁[/] left early (its script "
    "ended well while its peers trained on: the likely cause of their failure), "
    "· starting; a row is labelled by its first rank, or by its node (n3).\n"
    "columns: step: the rank's last step done (the header's: the slowest rank's, the one every rank has done); loss; wall; self; Δself; data: data loading "
    "(waiting for the next batch); comm; held (state + DDP buckets, below); gpu: utilisation; gpu mem: the device's "
    "memory in use. Bytes in binary units: Ki, Mi, Gi are KiB, MiB, GiB (1024 B, 1024 KiB, 1024 MiB). "
    "wall: a rank's step time, from one step's end to the next's (the grid: the median of its "
    "last five steps, and so are self, data and comm beside it; a rank's detail: its last step; "
    "the log and report hold every step). "
    "self time: a rank's work before the step's first collective (no waiting; FSDP: its data "
    "and forward less its all-gathers); Δself: how far above the other ranks' median it is (+31%; from twice it, the ratio: 3.2×); "
    "med (a rank's phases): the other ranks' median of that phase. In DDP and FSDP "
    "every rank's step time is about the same, because all wait for the slowest; the straggler is "
    "the rank whose self time exceeds the others' median.\n"
    "state: parameters + gradients + optimizer state on the rank; held: state + DDP buckets; unsharded: "
    "what the ranks would hold with a full copy each (DDP): the memory panel's total, and a "
    "rank's own in its detail.\n"
    "comm: time with a collective in flight (DDP's bucket all-reduces, FSDP's all-gathers and "
    "reduce-scatters). loss (under the grid, when it has room): the ranks' median and spread; a "
    "chart's ▲ or ▼ at its top or bottom edge is a point beyond its scale (its outliers, a warm-up's "
    "first losses, are left out of the scale, as TensorBoard's \"ignore outliers\" does).\n"
    "lost: the ranks' messages that never reached the hub (gaps in their numbering: a hub that "
    "restarted); dropped: messages a rank's reporter threw away rather than wait for a hub out of "
    "reach (its queue full); rejected: what the hub refused (malformed, another run's), by reason "
    "in the log."
)


class HelpScreen(ModalScreen[None]):
    """Every key of pardash, and what the grid's figures mean."""

    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > VerticalScroll {
        width: 80;
        max-width: 95%;
        height: auto;
        max-height: 90%;
        padding: 1 2;
        border: thick $primary 60%;
        border-title-color: $text-accent;
        background: $surface;
    }
    HelpScreen #glossary {
        margin-top: 1;
        color: $text-muted;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close", show=False),
        Binding("q", "dismiss", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = "keys of the dashboard"
            yield Static(keys_table())
            yield Static(GLOSSARY, id="glossary")
        yield Footer()  # its own keys: the dashboard's footer below listed keys that do nothing here
