"""The footer offers "⏎ Detail" only while a rank is selected."""

from __future__ import annotations

from tui_helpers import replay_app


def footer_keys(app) -> list[str]:
    from textual.widgets._footer import FooterKey

    from pardash.tui.widgets.fitted_footer import FittedFooter

    return [key.description for key in app.screen.query_one(FittedFooter).query(FooterKey)]


async def test_no_detail_key_while_no_rank_is_selected():
    # f with nothing flagged: the grid said "no rank selected" over a footer that kept
    # "⏎ Detail", and enter did nothing.
    from pardash.tui.screens.dashboard import DashboardScreen
    from pardash.tui.widgets.rank_grid import RankGrid

    app = replay_app("run4.jsonl")  # a healthy run: no rank flagged
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        assert "Detail" in footer_keys(app)
        await pilot.press("f")
        await pilot.pause()
        grid = app.screen.query_one(RankGrid)
        assert grid.flagged_only and not grid.shown_ranks
        assert "Detail" not in footer_keys(app), footer_keys(app)
        assert "Memory" in footer_keys(app)  # (the others stay)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DashboardScreen)
        await pilot.press("f")
        await pilot.pause()
        assert "Detail" in footer_keys(app)
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, DashboardScreen)  # the first rank's detail


async def test_a_flagged_rank_keeps_the_detail_key_under_f():
    from pardash.tui.widgets.rank_grid import RankGrid

    app = replay_app("straggler8.jsonl")
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("f")
        await pilot.pause()
        assert app.screen.query_one(RankGrid).shown_ranks == [5]
        assert "Detail" in footer_keys(app)
