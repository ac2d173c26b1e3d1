"""A job fed to a viewer frame by frame, for TUI tests that set each rank's figures: a hub core
fed with steps and verdicts, and a viewer applying its frames."""

from __future__ import annotations

from tui_helpers import Fed

from pardash.telemetry import schema
from pardash.telemetry.client import NullDetector
from pardash.telemetry.hubcore import HubCore
from pardash.tui.widgets.rank_grid import RankGrid

RUN = "fed"


class Job:
    """A hub core fed with steps and verdicts, and a viewer applying its frames."""

    def __init__(self, ranks: int) -> None:
        self.core = HubCore(run_id=RUN, detector=NullDetector())  # type: ignore[arg-type]
        self.viewer = Fed()
        self.t = 1000.0
        self.ranks = ranks
        self.steps = 0
        for r in range(ranks):
            self.core.replay(schema.Hello(rank=r, world_size=ranks, node=r // 8, host=f"h{r // 8}", strategy="fsdp", run=RUN, t=self.t), self.t)
        self.frame()

    def step(self, self_s: dict[int, float] | None = None) -> None:
        """A step of every rank, each 50 ms of self time unless ``self_s`` says otherwise."""
        self.steps += 1
        for r in range(self.ranks):
            s = (self_s or {}).get(r, 0.05)
            msg = schema.Step(rank=r, step=self.steps, loss=2.0, samples=8, step_s=0.1, self_s=s, t=self.t, run=RUN)
            self.core.replay(msg, self.t)

    def hang(self, cause: int) -> None:
        """``cause`` stalls in its data loader, every other rank in a collective waiting for it."""
        for r in range(self.ranks):
            self.core.verdict(schema.Verdict(rank=r, verdict="stalled", cause="data" if r == cause else "comm", step=self.steps))

    def frame(self) -> None:
        self.t += 0.1
        self.viewer.apply_frame(self.core.tick(self.t))
        self.viewer.pending = True


def drawn_at(grid: RankGrid, rank: int) -> tuple[str, object]:
    """(glyph, style) of ``rank``'s cell in a heat map, as the grid draws it."""
    y, k = grid.layout.where[rank]
    x = grid.layout.lines[y].cells[k][0]
    strip = grid.render_line(y + grid.head_lines - grid.scroll_offset.y)
    return [(ch, seg.style) for seg in strip for ch in seg.text][x]
