"""What a reviewer found in real terminals: the loss chart's axes and the dashboard's split
between the grid and the side panels (alerts, memory, events)."""

from __future__ import annotations

import re

import pytest
from textual.app import App, ComposeResult

from tui_helpers import replay_app, replay_running_app, settled, strip_text

NAN = float("nan")


class ChartApp(App):
    """One HistoryChart filling the screen."""

    def compose(self) -> ComposeResult:
        from pardash.tui.format import fmt_loss
        from pardash.tui.widgets.history_chart import HistoryChart

        yield HistoryChart(fmt_loss)


def series(values: list[float], first_step: int, last_step: int):
    from pardash.tui.charts import ChartSeries

    n = len(values)
    return ChartSeries(
        values=tuple(values),
        median=(NAN,) * n,
        low=tuple(values),
        high=tuple(values),
        first_step=first_step,
        last_step=last_step,
        latest=values[-1],
        others=1,
    )


def chart_lines(app) -> list[str]:
    from pardash.tui.widgets.history_chart import HistoryChart

    chart = app.screen.query_one(HistoryChart)
    return [strip_text(chart.render_line(y)) for y in range(chart.size.height)]


def steady(n: int) -> list[float]:
    """A loss wandering between 0.6 and 0.9, as after a warm-up."""
    return [0.75 + 0.15 * ((k * 7919) % 13 - 6) / 6 for k in range(n)]


async def test_the_x_axis_never_cuts_a_step_number():
    """At 60x15 a rank's detail drew "step 1199 191" under a chart whose last step was 1910:
    the right-hand number lost its last digit. At any width each number on the axis is whole,
    and the newest step is always there."""
    app = ChartApp()
    async with app.run_test(size=(60, 6)) as pilot:
        from pardash.tui.widgets.history_chart import HistoryChart

        chart = app.screen.query_one(HistoryChart)
        for width in range(10, 61):
            await pilot.resize_terminal(width, 6)
            await pilot.pause()
            chart.series = series(steady(chart.plot_width), 1199, 1910)
            await pilot.pause()
            axis = chart_lines(app)[-1]
            numbers = re.findall(r"\d+", axis)
            assert numbers and numbers[-1] == "1910", (width, axis)
            assert set(numbers) <= {"1199", "1910"}, (width, axis)
            assert len(axis) == width, (width, axis)
            if width >= 30:  # room for both: "step 1199" under the first column, as before
                assert axis.lstrip().startswith("step 1199"), (width, axis)
            else:
                assert "step" in axis or width < 18, (width, axis)


async def test_points_left_out_of_the_y_scale_are_marked_at_its_edge():
    """The y scale leaves out its outermost points (OUTLIER_SHARE): a run whose first loss was
    4.18 had an axis topping at about 0.9 with nothing saying its start was above it. Its
    clipped points are drawn as ▲ on the top row (▼ on the bottom one below the scale)."""
    app = ChartApp()
    async with app.run_test(size=(50, 12)) as pilot:
        from pardash.tui.widgets.history_chart import AXIS_WIDTH, HistoryChart

        chart = app.screen.query_one(HistoryChart)
        await pilot.pause()
        n = chart.plot_width
        values = [4.18, 2.9, *steady(n - 4), 0.01, 0.75]  # (the newest is always in the scale)
        chart.series = series(values, 1, 2000)
        await pilot.pause()
        lines = chart_lines(app)
        top = float(lines[0][: AXIS_WIDTH - 2])
        assert top < 1.0, lines  # the clipping is kept
        plot = [line[AXIS_WIDTH : AXIS_WIDTH + n] for line in lines[:-1]]
        assert plot[0][:2] == "▲▲", "\n".join(lines)
        assert plot[-1][n - 2] == "▼", "\n".join(lines)
        assert "▲" not in "".join(plot[1:]) and "▼" not in "".join(plot[:-1]), "\n".join(lines)

        # A run with nothing left out has no mark.
        chart.series = series(steady(n), 1, 2000)
        await pilot.pause()
        drawn = "".join(chart_lines(app))
        assert "▲" not in drawn and "▼" not in drawn, drawn


@pytest.mark.parametrize("size", [(100, 30), (120, 28)])
async def test_a_failed_runs_events_keep_useful_lines_on_a_short_terminal(size):
    """At 100x30, once a DDP job died, its alerts and the memory panel (ten lines of sharding
    arithmetic) left the event log one line, and the traceback and the exits could only be
    read by resizing. The memory panel gives way (as it does below 100 columns); the alerts
    keep every line they have."""
    from pardash.tui.screens.dashboard import DashboardScreen
    from pardash.tui.widgets.alert_list import MAX_ROWS, AlertList
    from pardash.tui.widgets.event_log import EventLog

    app = replay_app("exited4.jsonl")
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        screen = app.screen
        alerts, events = screen.query_one(AlertList), screen.query_one(EventLog)
        assert not screen.query_one("#memory").display
        assert events.region.height >= DashboardScreen.EVENTS_USEFUL, events.region
        assert events.region.bottom <= screen.query_one("#side").region.bottom
        # every line the alerts have (they fill the panel here: its "+N more" last)
        shown = alerts.region.height - 2
        assert shown == min(MAX_ROWS, len(alerts.fitted(alerts.content_region.width, MAX_ROWS))), alerts.region


async def test_the_memory_panel_stays_where_the_events_have_their_lines():
    """A healthy run at 100x30 keeps its memory panel: it gives way only to the events'
    useful least."""
    from pardash.tui.screens.dashboard import DashboardScreen
    from pardash.tui.widgets.event_log import EventLog

    app = replay_running_app("straggler8.jsonl")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert screen.query_one("#memory").display
        assert screen.query_one(EventLog).region.height >= DashboardScreen.EVENTS_USEFUL


async def test_at_200x50_the_grid_and_its_loss_chart_get_the_larger_share():
    """At 200x50 the side panels took 110 columns and the grid's panel, with the loss chart
    under it, 90."""
    from pardash.tui.widgets.history_chart import HistoryChart

    app = replay_app("straggler8.jsonl")
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        main, side = screen.query_one("#main"), screen.query_one("#side")
        assert main.size.width > side.size.width, (main.size, side.size)
        chart = screen.query_one("#trend", HistoryChart)
        assert chart.display and chart.plot_width >= 95, chart.size  # (79 before)
