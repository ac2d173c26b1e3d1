"""A rank's detail in a small terminal: its figures' panels fit the rows they have. At 80x24 a
rank with DDP's buckets, or with an alert in its title, had a system panel of one row and no
bottom border, and the figures' column's scrollbar drawn outside every panel."""

from __future__ import annotations

import pytest
from tui_helpers import replay_app, settled

import make_fixtures as fx

SIZES = [(80, 24), (100, 30), (120, 40), (200, 60)]


def _rows(panel) -> int:
    """The lines a figures' panel has to show (never wrapped)."""
    return len(panel.render().plain.splitlines())


async def _open_detail(app, pilot) -> None:
    from pardash.tui.screens.rank_detail import RankDetailScreen

    await pilot.press("enter")
    await settled(pilot)
    assert isinstance(app.screen, RankDetailScreen)


def _check_inside(app) -> None:
    """Every panel on the screen, the figures' column's below the charts' bottom; the column
    itself never scrolls (its scrollbar drawn beside the panels' borders)."""
    screen = app.screen
    figures = screen.query_one("#figures")
    assert figures.max_scroll_y == 0 and not figures.show_vertical_scrollbar
    for panel in screen.query(".panel"):
        if panel.display:
            assert screen.region.contains_region(panel.region), (panel.id, panel.region)
    for panel in figures.children:
        if panel.display:
            assert panel.region.bottom <= figures.region.bottom, (panel.id, panel.region, figures.region)


@pytest.mark.parametrize("name", ["straggler8.jsonl", "exited4.jsonl"])
@pytest.mark.parametrize("size", SIZES)
async def test_every_figures_panel_shows_all_its_rows_and_its_border(name, size):
    # straggler8: DDP's buckets, a memory panel of three rows; exited4: a rank stalled waiting
    # for another, a title of three lines. Both had the system panel cut at 80x24.
    from pardash.tui.widgets.event_log import EventLog

    app = replay_app(name)
    async with app.run_test(size=size) as pilot:
        await _open_detail(app, pilot)
        _check_inside(app)
        for panel in app.screen.query_one("#figures").children:
            if panel.display:
                assert panel.region.height == _rows(panel) + 2, (panel.id, panel.region)  # whole, borders and all
        # (the events gave what the figures needed, keeping their newest line)
        assert app.screen.query_one(EventLog).region.height >= 3


async def test_figures_that_do_not_fit_say_how_many_more_there_are(tmp_path, monkeypatch):
    # A script's twelve metrics at 80x24: more than the column holds, the events' rows given
    # and all. Their panel shows what fits and says how many more, its border drawn; the
    # system panel below it keeps its rows.
    from pardash.telemetry import schema

    log = fx.Log("logged-small-2")
    for r in (0, 1):
        log.add(fx.hello(r, 2, 0, 2, "vm", "ddp", 1_000_000), 0.1)
    custom = {f"metric_{i:02d}": float(i) for i in range(12)}
    for step in range(1, 21):
        for r in (0, 1):
            log.add(schema.Step(rank=r, step=step, loss=1.0 / step, samples=32, step_s=0.1, mono=1000 + step * 0.1, custom=custom), 0.2 + step * 0.1)
            log.add(schema.System(rank=r, cpu_pct=99.0, rss_bytes=3 << 30), 0.25 + step * 0.1)
    log.write(tmp_path / "logged.jsonl")
    monkeypatch.setattr("tui_helpers.DATA", tmp_path)
    app = replay_app("logged.jsonl")
    async with app.run_test(size=(80, 24)) as pilot:
        await _open_detail(app, pilot)
        _check_inside(app)
        screen = app.screen
        for panel in screen.query_one("#figures").children:
            if panel.display:
                assert panel.region.height == _rows(panel) + 2, (panel.id, panel.region)
        lines = screen.query_one("#logged").render().plain.splitlines()
        assert 2 <= len(lines) < 12 and lines[0].startswith("metric_00"), lines
        more = 12 - (len(lines) - 1)
        assert lines[-1].strip() == f"+{more} more in a taller terminal", lines
        assert "more" not in screen.query_one("#system").render().plain  # (uncut)
        # Taller, every metric again.
        await pilot.resize_terminal(120, 50)
        await settled(pilot)
        lines = screen.query_one("#logged").render().plain.splitlines()
        assert len(lines) == 12 and lines[-1].startswith("metric_11"), lines
