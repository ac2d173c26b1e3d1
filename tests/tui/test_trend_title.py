"""The dashboard's loss chart says what its line and band are, for one rank as for many."""

from __future__ import annotations

import pytest
from tui_helpers import replay_app, until

from pardash.tui.widgets.history_chart import HistoryChart


@pytest.mark.parametrize(("log", "said"), [("dp1.jsonl", "▀ 1 rank, ░ its range"), ("run4.jsonl", "▀ median, ░ range of 4 ranks")])
async def test_the_loss_charts_title_says_what_its_line_and_band_are(log, said):
    # A run of one rank (single, dp) read "▀ median, ░ range of 1 rank": no median of one.
    app = replay_app(log)
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: "now" in str(app.screen.query_one("#trend", HistoryChart).border_title))
        title = str(app.screen.query_one("#trend", HistoryChart).border_title)
        # (both runs' first losses, their warm-up, are beyond the scale: drawn ▲ at its top)
        assert f"· {said} · ▲▼ off the scale[" in title, title


def test_a_chart_says_when_points_are_off_its_scale():
    # Its ▲ and ▼ (points beyond the scale, drawn at its edge) are the grid's straggler glyph
    # too: the title says what they are where the chart draws them, and only there.
    from pardash.tui.charts import ChartSeries
    from pardash.tui.widgets.history_chart import off_scale

    def series(values):
        nan = (float("nan"),) * len(values)
        return ChartSeries(values=tuple(values), median=nan, low=nan, high=nan, first_step=1, last_step=len(values),
                           latest=values[-1], others=1)  # fmt: skip

    steady = [1.0, 0.9] * 20  # (a loss going up and down between two values: all in the scale)
    assert not off_scale(series(steady), 40)
    assert off_scale(series([4.2, *steady]), 41)  # a first loss of 4.2 above a run near 1: ▲
    assert not off_scale(series([4.2, *steady[:10]]), 11)  # (fewer than MIN_POINTS: all in the scale)


@pytest.mark.parametrize(("start", "end"), [((160, 50), (100, 40)), ((100, 40), (200, 50))])
async def test_an_ended_replays_loss_chart_is_drawn_again_at_a_new_width(start, end):
    # The chart's series is cut to its width at each frame; an ended replay sends none, and
    # after a resize the chart kept the old width's: its left part alone (its end step gone)
    # after the terminal shrank, squeezed into the left columns after it grew.
    app = replay_app("run4.jsonl")
    async with app.run_test(size=start) as pilot:
        trend = app.screen.query_one("#trend", HistoryChart)
        await until(pilot, lambda: trend.series is not None and "now" in str(trend.border_title))
        assert len(trend.series.values) == trend.plot_width
        before = trend.plot_width
        await pilot.resize_terminal(*end)
        await until(pilot, lambda: trend.plot_width != before)
        await until(pilot, lambda: len(trend.series.values) == trend.plot_width)
        assert trend.series.last_step > trend.series.first_step
