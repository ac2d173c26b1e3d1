"""A line chart of one rank's history over the other ranks' median and spread (Line API)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from ..charts import ChartSeries
from ..format import fmt_step_no
from ..styles import CachedStyles, component_bg, component_fg

AXIS_WIDTH = 9
"""Columns for the y axis: a label of up to 7 characters (fmt_loss's widest: ``1.2e+04``,
``-2.3141``), a space and the axis."""

_HALVES = {1: "▀", 2: "▄", 3: "█"}


OUTLIER_SHARE = 0.05
"""The share of a chart's points, at either end, its y axis may leave out (as TensorBoard's
"ignore outliers in chart scaling", on by default there): a warm-up's first steps (a loss of
4.2 falling to 0.6, a first step of 166 ms among 25 ms ones) set the scale, and the run's
steady part was one flat row. The line's points beyond it are drawn at the chart's edge as
``▲`` (above) or ``▼`` (below), so the clipping is seen."""
MIN_POINTS = 20
"""Fewer points than this are all in the scale."""


def y_scale(s: ChartSeries, plot_w: int) -> tuple[float, float, float] | None:
    """The y axis of a chart of ``s`` ``plot_w`` columns wide: :func:`y_range` of what it draws,
    padded 5% each way, and that pad (None: nothing finite to draw)."""
    finite = [v for seq in (s.values, s.low, s.high) for v in seq[:plot_w] if math.isfinite(v)]
    if not finite:
        return None
    lo, hi = y_range(finite, s.latest)
    pad = (abs(hi) * 0.05 or 1.0) if hi - lo < 1e-12 else (hi - lo) * 0.05
    return lo - pad, hi + pad, pad


def off_scale(s: ChartSeries, plot_w: int) -> bool:
    """Whether a chart of ``s`` draws a point of its line at its edge, as ``▲`` or ``▼`` (an
    outlier left out of its scale)."""
    scale = y_scale(s, plot_w)
    return scale is not None and any(not scale[0] <= v <= scale[1] for v in s.values[:plot_w] if math.isfinite(v))


def y_range(values: list[float], latest: float | None = None) -> tuple[float, float]:
    """The lowest and highest value a chart's y axis shows: its points' but the outermost
    OUTLIER_SHARE at either end (MIN_POINTS or more), and always the newest value."""
    ordered = sorted(values)
    n = len(ordered)
    if n < MIN_POINTS:
        lo, hi = ordered[0], ordered[-1]
    else:
        k = int(n * OUTLIER_SHARE)
        lo, hi = ordered[k], ordered[n - 1 - k]
    if latest is not None and math.isfinite(latest):
        lo, hi = min(lo, latest), max(hi, latest)
    return lo, hi


def x_axis(first_step: int, last_step: int, plot_w: int) -> str:
    """The x axis's line: ``step <first>`` under the plot's first column and ``<last>`` ending
    under its last, each number whole. Where both do not fit the plot's width the newest step
    alone says where the plot ends, ``step <last>``, reaching left under the y axis if it must
    (a chart is at least AXIS_WIDTH + 1 columns: a step number, at most six characters, fits).
    Cut to the chart's width, "step 1199 1910" read "step 1199 191", a wrong step."""
    end = AXIS_WIDTH + plot_w
    left, right = f"step {fmt_step_no(first_step)}", fmt_step_no(last_step)
    if first_step != last_step and len(left) + 1 + len(right) <= plot_w:
        return " " * AXIS_WIDTH + left + " " * (plot_w - len(left) - len(right)) + right
    for newest in (f"step {right}", right):
        if len(newest) <= end:
            return f"{newest:>{end}}"
    return right


class HistoryChart(CachedStyles, Widget):
    """The selected rank's values as a line (half-block resolution), the others' median as a
    dotted rule and their min-to-max spread as a shaded band, against the step number.

    The series arrives already downsampled to :attr:`plot_width` columns (see
    :func:`pardash.tui.charts.chart_series`); drawing caches one strip per line until the
    series or the size changes.
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "history-chart--rank",
        "history-chart--median",
        "history-chart--band",
        "history-chart--axis",
        "history-chart--empty",
    }

    DEFAULT_CSS = """
    HistoryChart {
        height: 1fr;
        min-height: 4;
    }
    HistoryChart > .history-chart--rank { color: $text-accent; }
    HistoryChart > .history-chart--median { color: $text-muted; }
    HistoryChart > .history-chart--band { background: $primary 22%; }
    HistoryChart > .history-chart--axis { color: $text-muted; }
    HistoryChart > .history-chart--empty { color: $text-muted; }
    """

    series: reactive[ChartSeries | None] = reactive(None)
    """What to draw (None: no history yet)."""

    def __init__(
        self,
        fmt: Callable[[float | None], str],
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.fmt = fmt
        """Formats axis values (a loss, a time)."""
        self.empty = "no history yet"
        """Said where there is no series to draw."""
        self._lines: list[Strip] | None = None

    @property
    def plot_width(self) -> int:
        """Columns of the plot area (the widget less its y axis)."""
        return max(2, self.content_region.width - AXIS_WIDTH)

    def watch_series(self) -> None:
        self._lines = None
        self.refresh()

    class WidthChanged(Message):
        """The plot is no longer as wide as its series (a resize): its screen cuts the series
        to the new width. (Cut at each frame only, an ended or paused replay's chart kept the
        old width's: its left part alone after the terminal shrank, its end step gone; squeezed
        into the left columns after it grew.)"""

        def __init__(self, chart: HistoryChart) -> None:
            super().__init__()
            self.chart = chart

    def on_resize(self, event: events.Resize) -> None:
        self._lines = None
        s = self.series
        if s is not None and len(s.values) != self.plot_width:
            self.post_message(self.WidthChanged(self))

    def render_line(self, y: int) -> Strip:
        if self._lines is None:
            self._lines = self._draw()
        if 0 <= y < len(self._lines):
            return self._lines[y]
        return Strip.blank(self.content_region.width, self.rich_style)

    def _s(self, name: str) -> Style:
        return component_fg(self, f"history-chart--{name}")

    def _draw(self) -> list[Strip]:
        width = self.content_region.width
        height = self.content_region.height
        base = self.rich_style
        s = self.series
        if s is None or height < 2 or width <= AXIS_WIDTH:
            lines = [Strip.blank(width, base) for _ in range(max(0, height))]
            if lines:
                lines[0] = (
                    Strip([Segment(f" {self.empty}", self._s("empty"))]).apply_style(base).crop_extend(0, width, base)
                )
            return lines
        plot_h = height - 1
        plot_w = min(width - AXIS_WIDTH, len(s.values))
        scale = y_scale(s, plot_w)
        if scale is None:
            return [Strip.blank(width, base) for _ in range(height)]
        lo, hi, pad = scale
        span = hi - lo
        if not math.isfinite(span):  # figures near the float's limits (a hostile or broken rank's)
            return [Strip.blank(width, base) for _ in range(height)]

        # (A point outside the scale, an outlier left out of it, is drawn at its edge.)
        def half_row(v: float) -> int:
            return min(2 * plot_h - 1, max(0, int(round((hi - min(hi, max(lo, v))) / span * (2 * plot_h - 1)))))

        def row(v: float) -> int:
            return min(plot_h - 1, max(0, int(round((hi - min(hi, max(lo, v))) / span * (plot_h - 1)))))

        # mask[r][c]: 1 upper half, 2 lower half of the rank's line; median row; band rows.
        mask = [[0] * plot_w for _ in range(plot_h)]
        # The line's points beyond the scale (the outliers it leaves out) are marked at its
        # edge: drawn there unmarked, a warm-up's loss of 4.18 read as the top label's 0.9646.
        beyond = {(0, c): "▲" for c in range(plot_w) if s.values[c] > hi}
        beyond.update({(plot_h - 1, c): "▼" for c in range(plot_w) if s.values[c] < lo})
        median_row = [-1] * plot_w
        band = [(-1, -1)] * plot_w
        prev = None
        for c in range(plot_w):
            v = s.values[c]
            if math.isfinite(s.median[c]):
                median_row[c] = row(s.median[c])
            if math.isfinite(s.low[c]) and math.isfinite(s.high[c]):
                band[c] = (row(s.high[c]), row(s.low[c]))
            if not math.isfinite(v):
                prev = None
                continue
            h = half_row(v)
            a, b = (h, h) if prev is None else (min(prev, h), max(prev, h))
            if prev is not None and b - a > 1:
                # Join a jump with a vertical run in this column (skip the previous point).
                a, b = (a + 1, b) if prev < h else (a, b - 1)
            for k in range(a, b + 1):
                mask[k // 2][c] |= 1 if k % 2 == 0 else 2
            prev = h

        rank_style = self._s("rank")
        median_style = self._s("median")
        # The band's colour has alpha: take it blended over the background (a full style).
        band_style = component_bg(self, "history-chart--band")
        axis = self._s("axis")
        labels = {0: self.fmt(hi - pad), plot_h - 1: self.fmt(lo + pad)}
        if plot_h >= 5:
            labels[(plot_h - 1) // 2] = self.fmt((hi + lo) / 2)
        if len(set(labels.values())) < len(labels):
            # A range below the labels' resolution ("1.05s" at top, middle and bottom): said
            # once, in the middle, not as if the axis had no height.
            labels = {(plot_h - 1) // 2: self.fmt((hi + lo) / 2)}
        lines: list[Strip] = []
        for r in range(plot_h):
            segments = [
                Segment(
                    f"{labels.get(r, ''):>{AXIS_WIDTH - 2}} ┤" if r in labels else " " * (AXIS_WIDTH - 1) + "│", axis
                )
            ]
            for c in range(plot_w):
                top, bottom = band[c]
                in_band = top >= 0 and top <= r <= bottom
                style = band_style if in_band else Style()
                m = mask[r][c]
                mark = beyond.get((r, c)) if beyond else None
                if mark:
                    segments.append(Segment(mark, style + rank_style))
                elif m:
                    segments.append(Segment(_HALVES[m], style + rank_style))
                elif median_row[c] == r:
                    segments.append(Segment("─", style + median_style))
                else:
                    segments.append(Segment(" ", style))
            lines.append(Strip(segments).apply_style(base).crop_extend(0, width, base))
        lines.append(Strip([Segment(x_axis(s.first_step, s.last_step, plot_w), axis)]).apply_style(base).crop_extend(0, width, base))
        return lines
