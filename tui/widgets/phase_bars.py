"""Where a rank's step goes: data, forward, backward, optimizer, communication wait, self time."""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ..format import fmt_step_time
from ..rank_facts import Phase
from ..styles import CachedStyles, component_fg
from .fit import refresh_fitted

BAR_CHARS = " ▏▎▍▌▋▊▉█"


def bar(fraction: float, width: int) -> str:
    """A horizontal bar ``fraction`` of ``width`` long, with eighth-cell ends."""
    fraction = min(1.0, max(0.0, fraction))
    eighths = int(round(fraction * width * 8))
    full, part = divmod(eighths, 8)
    text = "█" * full + (BAR_CHARS[part] if part else "")
    return text.ljust(width)


class PhaseBars(CachedStyles, Widget):
    """The rank's last step split into phases, each as a bar against the step time, with the
    other ranks' median beside it: a straggler's long phase (or a victim's long communication
    wait) stands out."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "phase-bars--label",
        "phase-bars--bar",
        "phase-bars--value",
        "phase-bars--others",
        "phase-bars--worse",
    }

    DEFAULT_CSS = """
    PhaseBars {
        text-wrap: nowrap;
        text-overflow: ellipsis;
        height: auto;
        padding: 0 1;
    }
    PhaseBars > .phase-bars--label { color: $text-muted; }
    PhaseBars > .phase-bars--bar { color: $text-primary; }
    PhaseBars > .phase-bars--value { text-style: bold; }
    PhaseBars > .phase-bars--others { color: $text-muted; }
    PhaseBars > .phase-bars--worse { color: $text-warning; text-style: bold; }
    """

    phases: reactive[tuple[Phase, ...]] = reactive(())
    """Phases of the last step; the first is the whole step (the bars' scale)."""

    whole_step: reactive[bool] = reactive(True)
    """Whether the whole step has a row of its own (the bars' scale either way): a short
    terminal leaves it out, its time being in the title above."""

    def watch_phases(self) -> None:
        refresh_fitted(self)

    def watch_whole_step(self) -> None:
        refresh_fitted(self)

    def _s(self, name: str) -> Style:
        return component_fg(self, f"phase-bars--{name}")

    def render(self) -> Text:
        phases = self.phases
        if not phases:
            return Text("no step yet", style=self._s("label"))
        width = self.content_region.width or 40
        scale = max((p.seconds or 0.0) for p in phases) or 1.0
        if not self.whole_step and len(phases) > 1:
            phases = phases[1:]
        label_w = max(len(p.name) for p in phases)
        # The others' median is the comparison that names a straggler: it keeps its column
        # and the bar takes what is left (none under 3 cells), down to 80 columns.
        show_others = any(p.others_median_s is not None for p in phases) and width - label_w - 8 - 11 >= 0
        bar_w = width - label_w - 1 - 8 - (11 if show_others else 0)
        if bar_w < 3:
            bar_w = 3 if not show_others else 0
        lines = []
        for p in phases:
            worse = (
                p.seconds is not None
                and p.others_median_s is not None
                and p.seconds > 1.25 * p.others_median_s
                and p.seconds - p.others_median_s > 0.002
            )
            others = f"med {fmt_step_time(p.others_median_s)}" if p.others_median_s is not None and show_others else ""
            lines.append(
                Text.assemble(
                    (f"{p.name:<{label_w}}" + (" " if bar_w else ""), self._s("label")),
                    (bar((p.seconds or 0.0) / scale, bar_w) if bar_w else "", self._s("worse") if worse else self._s("bar")),
                    (f" {fmt_step_time(p.seconds):>7}", self._s("worse") if worse else self._s("value")),
                    (f" {others:>10}" if show_others else "", self._s("others")),
                    no_wrap=True,
                )
            )
        out = Text("\n").join(lines)
        out.no_wrap = True
        return out
