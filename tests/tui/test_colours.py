"""The TUI on terminals of 16 colours (review 302): what is bad stays red where the terminal has
few colours (TERM=xterm, screen, linux), and terminals of more keep the theme's colours."""

from __future__ import annotations

import pytest
from fed_job import Job, drawn_at
from rich.color import Color
from rich.console import ColorSystem
from textual import constants
from tui_helpers import replay_app

from pardash.tui.app import make_app
from pardash.tui.grid_layout import LEVEL_GLYPHS, WAITING_GLYPH
from pardash.tui.widgets.rank_grid import RankGrid
from pardash.tui.widgets.run_header import RunHeader

RED, YELLOW = (1, 9), (3, 11)


def ansi(style) -> int:
    """The colour a terminal of 16 colours is sent for ``style``'s foreground."""
    return style.color.downgrade(ColorSystem.STANDARD).number


async def test_a_hang_and_a_slow_rank_are_red_on_a_terminal_of_16_colours(monkeypatch):
    # TERM=xterm, screen, linux: the theme's $text-error (#d17e92) came out grey (ANSI 7): the
    # rank a hang waits for was a grey ◆ among 15 bright yellow ◇, a rank 30% slow grey too.
    monkeypatch.setattr(constants, "COLOR_SYSTEM", "standard")
    job = Job(16)
    slow = {2: 0.065, 4: 0.056}  # +30%, +12%
    for _ in range(8):
        job.step(slow)
        job.frame()
    app = make_app(job.viewer)
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.console.color_system == "standard"
        grid = app.screen.query_one(RankGrid)
        grid.form = "heat"
        await pilot.pause()
        grid.select(15)  # (the cursor off the ranks looked at)
        await pilot.pause()
        glyph, style = drawn_at(grid, 2)
        assert glyph == LEVEL_GLYPHS[2] and ansi(style) in RED, (glyph, style)
        glyph, style = drawn_at(grid, 4)
        assert glyph == LEVEL_GLYPHS[1] and ansi(style) in YELLOW, (glyph, style)
        job.hang(cause=3)
        job.frame()
        app._poll()
        await pilot.pause()
        glyph, style = drawn_at(grid, 3)
        assert glyph == "◆" and ansi(style) in RED, (glyph, style)
        glyph, style = drawn_at(grid, 5)
        assert glyph == WAITING_GLYPH and ansi(style) in YELLOW, (glyph, style)
        for name in ("stalled", "silent", "exited", "exited-after", "dev-bad"):
            assert ansi(grid._style(f"rank-grid--{name}")) in RED, name
        # The header's count of it, in the same red.
        header = app.screen.query_one(RunHeader)
        assert ansi(header.get_component_rich_style("run-header--stalled")) in RED


@pytest.mark.parametrize("system", ["truecolor", "256"])
async def test_terminals_of_more_colours_keep_the_themes(system, monkeypatch):
    monkeypatch.setattr(constants, "COLOR_SYSTEM", system)
    app = replay_app("exited4.jsonl")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        theme = app.current_theme.to_color_system().generate()
        grid = app.screen.query_one(RankGrid)
        assert grid._style("rank-grid--stalled").color.triplet == Color.parse(theme["text-error"]).triplet


async def test_under_no_color_on_a_terminal_of_16_colours_the_bad_states_keep_their_grey(monkeypatch):
    # NO_COLOR draws each colour as a grey of its lightness: a red pure enough to stay red in
    # 16 colours is the header's own dark grey there, and "◆ 1 stalled" vanished from it.
    from textual.filter import monochrome_style

    monkeypatch.setattr(constants, "COLOR_SYSTEM", "standard")
    monkeypatch.setenv("NO_COLOR", "1")
    job = Job(16)
    job.step()
    job.frame()
    job.hang(cause=3)
    job.frame()
    app = make_app(job.viewer)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.no_color
        header = app.screen.query_one(RunHeader)
        for name in ("stalled", "silent", "exited", "bad"):
            grey = monochrome_style(header.get_component_rich_style(f"run-header--{name}"))
            assert ansi(grey) != grey.bgcolor.downgrade(ColorSystem.STANDARD).number, name
