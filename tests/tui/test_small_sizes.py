"""What a review in small terminals found: a one-row alerts panel that named no rank, a one-row
event log that showed the tail of an event, a selected-rank line that dropped the status, a
rank detail's band cut into another meaning, and a header that dropped "at the end"."""

from __future__ import annotations

import pytest
from tui_helpers import replay_app, settled, strip_text, until, widget_text

STACKED = (60, 20)


def _shown(widget) -> list[str]:
    """A widget's visible content lines, as drawn."""
    return [strip_text(widget.render_line(y)).rstrip() for y in range(widget.content_region.height)]


async def test_a_one_row_alerts_panel_names_the_cause():
    # At 60x20 the alerts had one row and said "+4 more ranks: 1 exited, 3 waiting": no rank,
    # where 71x24 said "× rank 1 exited with code 1 …".
    from pardash.tui.widgets.alert_list import AlertList

    app = replay_app("exited4.jsonl")
    async with app.run_test(size=STACKED) as pilot:
        await pilot.pause()
        alerts = app.screen.query_one(AlertList)
        lines = widget_text(alerts).splitlines()
        assert alerts.max_rows == 1 and len(lines) == 1, lines
        assert lines[0].startswith("× rank 1 exited with code 1"), lines
        assert len(lines[0]) <= alerts.content_region.width and lines[0].endswith("+3 more"), lines


async def test_one_row_of_alerts_cuts_the_cause_rather_than_leave_it_out():
    from pardash.tui.widgets.alert_list import AlertList

    app = replay_app("exited4.jsonl")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        alerts = app.screen.query_one(AlertList)
        for width in (12, 30, 56, 200):
            (line,) = alerts.fitted(width, 1)
            assert line.cell_len <= width and line.plain.startswith("× rank 1"), (width, line.plain)


async def test_a_one_row_event_log_shows_the_start_of_the_newest_event():
    # Stacked below 72 columns the log had one row and showed the newest event's last wrapped
    # line: "s without progress)", no time, no rank.
    from pardash.tui.widgets.event_log import EventLog

    app = replay_app("exited4.jsonl")
    async with app.run_test(size=STACKED) as pilot:
        await settled(pilot)
        events = app.screen.query_one(EventLog)
        assert events.scrollable_content_region.height == 1
        (line,) = _shown(events)
        assert line.startswith("00:22 hub: hub stopped: 322 messages"), line  # (the log's closing line, its newest)
        assert line.endswith("…") and len(line) <= events.scrollable_content_region.width, line
        # Taller again, the events wrap whole as before.
        await pilot.resize_terminal(100, 40)
        await pilot.pause()
        await pilot.pause()
        shown = _shown(events)
        assert events.scrollable_content_region.height > 2
        assert not any(line.endswith("…") for line in shown), shown
        assert any(line.endswith("without progress)") for line in shown), shown


async def test_the_selected_rank_line_shortens_a_hung_ranks_status_rather_than_drop_it():
    # At 80x24 the line under the grid read "rank 0        ⏎ detail" for a rank stalled in
    # backward, waiting for rank 1: the status did not fit whole and went.
    from pardash.tui.widgets.selected_rank import SelectedRank

    app = replay_app("exited4.jsonl")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        selected = app.screen.query_one(SelectedRank)
        assert selected.row is not None and selected.row.rank == 0
        (line,) = _shown(selected)
        assert line.startswith("rank 0 · stalled, waiting for rank 1"), line
        for width in (14, 20, 30):
            runs, used = selected._runs(width)
            text = "".join(t for t, _ in runs)
            assert used <= width and text.startswith("rank 0 · st") and text.endswith("…"), (width, text)
        runs, _ = selected._runs(200)  # (room for it: whole, its phase with it)
        assert "stalled in backward, waiting for rank 1" in "".join(t for t, _ in runs)


@pytest.mark.parametrize(("size", "said"), [((100, 30), "others' range"), ((130, 40), "range of 128 sampled others"), ((200, 50), "range of the 1023 others (128 sampled)")])
async def test_a_ranks_charts_say_whose_range_their_band_is_in_the_width_they_have(size, said):
    # At 100x30 a rank of 1024's charts read "░ range of 128…" of "range of 128 of the 1023
    # others": cut, it read as a band over 128 ranks.
    from pardash.tui.model import SORT_KEYS
    from pardash.tui.widgets.history_chart import HistoryChart

    app = replay_app("run1024.jsonl")
    async with app.run_test(size=size) as pilot:
        await pilot.press(*["s"] * SORT_KEYS.index("status"), "home", "enter")  # (sorted by status: the cause first)
        await pilot.pause()
        await until(pilot, lambda: all(c.border_subtitle for c in app.screen.query(HistoryChart)))
        charts = list(app.screen.query(HistoryChart))
        assert len(charts) == 3
        for chart in charts:
            subtitle = chart.border_subtitle
            assert subtitle.endswith(said) and "rank 900" in subtitle, subtitle
            assert len(subtitle) <= chart.size.width - 4, subtitle  # (drawn whole, not cut with "…")


async def test_the_header_at_80_columns_says_the_rate_is_the_ends():
    # At 80 columns an ended run's header read "samples/s 5611", as if the live rate: "at the
    # end" did not fit without moving "elapsed" and was left out.
    from pardash.tui.widgets.run_header import RunHeader

    app = replay_app("dp1.jsonl")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        header = app.screen.query_one(RunHeader)
        assert header.summary.samples_per_s_when == "at the end"
        lines = widget_text(header).splitlines()
        assert "samples/s 5611 at end   elapsed 4s" in lines[0], lines
        assert len(lines) == 4 and all(len(line) <= header.content_region.width for line in lines[:3]), lines


async def test_a_chart_of_a_range_below_its_labels_resolution_labels_its_axis_once():
    # A step time of 1.05 s all along read "1.05s" at the top, the middle and the bottom.
    from test_layout_fixes import ChartApp, chart_lines, series

    from pardash.tui.widgets.history_chart import HistoryChart

    app = ChartApp()
    async with app.run_test(size=(60, 12)) as pilot:
        app.screen.query_one(HistoryChart).series = series([1.05, 1.0500001, 1.05, 1.0500002] * 10, 0, 39)
        await pilot.pause()
        labels = [line.split("┤")[0].strip() for line in chart_lines(app) if "┤" in line]
        assert len(labels) == len(set(labels)) >= 1, labels
        app.screen.query_one(HistoryChart).series = series([0.5, 0.9, 0.7] * 10, 0, 29)
        await pilot.pause()
        labels = [line.split("┤")[0].strip() for line in chart_lines(app) if "┤" in line]
        assert len(labels) == 3 == len(set(labels)), labels  # (a range it resolves: three, as before)
