"""Per-rank memory: what each rank holds against what it should and what DDP would hold."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Static

from pardash.telemetry.client import Source
from pardash.telemetry.summary import TENSOR_PARALLEL

from ..format import fmt_bytes, fmt_params
from ..memory import memory_savings
from ..messages import RunUpdated
from ..widgets.fit import Phrase, fit_phrases, joined
from ..widgets.fitted_footer import FittedFooter
from ..widgets.memory_bars import PART_GLYPHS, PARTS, MemoryBars
from ..widgets.memory_summary import MemorySummary

REFRESH_S = 0.5
"""Memory changes slowly: redraw at most twice a second."""


class MemoryScreen(Screen):
    """The sharding savings in full: a summary over the run, then one stacked bar per rank
    (parameters, gradients, optimizer state, DDP buckets) against the strategy's expectation
    and the unsharded alternative. Escape goes back."""

    DEFAULT_CSS = """
    MemoryScreen {
        layout: vertical;
    }
    MemoryScreen #title {
        height: auto;
        padding: 0 1;
        background: $panel;
    }
    MemoryScreen .panel {
        border: round $panel-lighten-2;
        border-title-color: $text-accent;
        border-title-style: bold;
        background: $surface;
    }
    MemoryScreen #legend {
        height: auto;  /* wraps in a narrow terminal rather than lose the expected marker's key */
        padding: 0 1;
        background: $surface;
    }
    MemoryScreen MemoryBars {
        border: round $panel-lighten-2;
        border-title-color: $text-accent;
        border-title-style: bold;
    }
    MemoryScreen MemoryBars:focus {
        border: round $border;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,m", "back", "Back")]

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._version = -1

    @property
    def source(self) -> Source:
        return self.app.source  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield MemorySummary(id="summary", classes="panel")
        yield Static(id="legend")
        yield MemoryBars(id="bars")
        yield FittedFooter()

    def on_mount(self) -> None:
        self.query_one("#summary").border_title = "sharding savings"
        self.query_one("#bars").border_title = "per rank"
        self.query_one(MemoryBars).focus()
        self.set_interval(REFRESH_S, self._refresh)
        self._refresh(force=True)

    @on(RunUpdated)
    def _run_updated(self, _message: RunUpdated) -> None:
        pass  # redrawn by the timer, at most twice a second

    def on_screen_resume(self) -> None:
        self._refresh(force=True)

    def _refresh(self, force: bool = False) -> None:
        version = self.app.version  # type: ignore[attr-defined]
        if version == self._version and not force:
            return
        self._version = version
        state = self.source.state
        savings = memory_savings(state, reuse=self.query_one(MemorySummary).savings)
        self.query_one(MemorySummary).savings = savings
        self.query_one(MemoryBars).savings = savings
        strategy = state.strategy or "?"
        title: list[str | tuple[str, str]] = [
            ("memory", "bold $text-accent"),
            f"  {strategy} · {state.world_size} rank{'s' if state.world_size != 1 else ''}",  # (as the header)
        ]
        hello = state.hello
        # The expectation on a line of its own: at 80 columns the title wrapped "830" from its
        # "KiB". Bytes in full units ("415 KiB"): "415K" beside "106.2k parameters" read as a count.
        if hello is not None and hello.params_count:
            title.append(f" · {fmt_params(hello.params_count)} parameters, {fmt_bytes(hello.params_bytes)}")
        width = max(20, self.size.width - 2)  # (the title's and the legend's padding)
        if savings is not None and savings.expected_per_rank_bytes:
            how = savings.expected_label
            if savings.shards in (0, savings.world_size):  # (HSDP's, replicate()'s say what they are sharded over)
                if not savings.sharded and not savings.pipeline:  # (a pipeline's label says "its stage's")
                    how += ", a full copy"
                else:
                    how += ", its layers split" if savings.strategy == TENSOR_PARALLEL else ", fully sharded"
            muted = "$text-muted"
            phrases = [((f"expected per rank {fmt_bytes(savings.expected_per_rank_bytes)}", muted),), ((f"({how})", muted),)]
            said: list[tuple[str, str]] = []
            for line in fit_phrases(phrases, width, space_style=muted):
                said += [("\n", muted), *line]
            title += joined(said)
        self.query_one("#title", Static).update(Content.assemble(*title))
        legend: list[Phrase] = []
        styles = {"params": "$primary", "grads": "$secondary", "optimizer": "$accent", "DDP buckets": "$foreground 45%"}
        for _field, cls, label in PARTS:
            if label == "DDP buckets" and not (savings and savings.buckets_bytes):
                continue
            legend.append(((f"{PART_GLYPHS[cls]} ", styles[label]), (label, "$text-muted")))
        bars = self.query_one(MemoryBars)
        # Past 32 ranks alike ones fold into a row: say so where the rows begin.
        bars.border_title = "per rank"
        if bars.folded:
            differ = len(bars.lines) > 2  # (more than one fold's two lines)
            bars.border_title += " · ranks alike in one row" + (", those that differ first" if differ else "")
        off = savings is not None and bars.off_scale(savings)
        whole = "its stage's state" if savings is not None and savings.pipeline else "a full copy of its state"
        unsharded = f"unsharded ({whole})" + (", runs off the scale »" if off else "")
        legend.append((("░ ", "$foreground 40%"), (unsharded, "$text-muted")))
        legend.append((("┃ ", "bold $text-success"), ("expected for the strategy", "$text-muted")))
        # Each key whole (at 120 columns "expected for the" ended the line, "strategy" began
        # the next): on one line, closer if need be, else on two, a key never cut.
        for gap in (3, 2):
            lines = fit_phrases(legend, width, gap=gap, space_style="$text-muted")
            if len(lines) == 1:
                break
        else:
            lines = fit_phrases(legend, width, gap=3, space_style="$text-muted")
        pieces: list[tuple[str, str]] = []
        for k, line in enumerate(lines):
            pieces += ([("\n", "$text-muted")] if k else []) + line
        self.query_one("#legend", Static).update(Content.assemble(*joined(pieces)))

    def on_resize(self) -> None:
        self._refresh(force=True)  # (the legend's and the title's lines fit the width)

    def action_back(self) -> None:
        self.app.pop_screen()

