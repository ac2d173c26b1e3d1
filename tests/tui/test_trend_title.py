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
        assert f"· {said}[" in title, title
