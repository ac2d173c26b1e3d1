"""What the TUI tells by colour it tells by shape too (review 302: under NO_COLOR and to a
colour-blind eye the heat map's levels and the memory bars' parts were one glyph each), and the
heat map's legend lists what its ranks draw (a hung job's at 80x24 gave way)."""

from __future__ import annotations

import pytest
from fed_job import Job, drawn_at
from tui_helpers import grid_text, replay_app

from pardash.tui.app import make_app
from pardash.tui.grid_layout import LEVEL_GLYPHS, WAITING_GLYPH, heat_legend
from pardash.tui.screens.help import HelpScreen
from pardash.tui.widgets.memory_bars import PART_GLYPHS, MemoryBars
from pardash.tui.widgets.rank_grid import RankGrid


def test_the_levels_of_a_running_rank_have_glyphs_of_their_own():
    # Under NO_COLOR the three levels were one ■ in three greys alike (250, 251, 245).
    assert len(set(LEVEL_GLYPHS)) == 3
    (line,), _gap = heat_legend(200, {"running", "dev-warn", "dev-bad"})
    glyphs = {text: glyph for glyph, _cls, text in line}
    assert [glyphs["ok"], glyphs["self +10%"], glyphs["+25%"]] == list(LEVEL_GLYPHS)


async def test_the_help_draws_the_levels_as_the_heat_map_does():
    app = replay_app("run4.jsonl")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = str(app.screen.query_one("#glossary").render())
        for glyph, what in zip(LEVEL_GLYPHS, ("ok", "self +10%", "+25%"), strict=True):
            assert f"{glyph} {what}" in text, (glyph, what)


async def test_the_cursor_on_a_full_block_shows():
    # Reversed, a █ is a cell of the background: the cursor on the slowest rank was nowhere.
    job = Job(16)
    for _ in range(8):
        job.step({2: 0.065})
        job.frame()
    app = make_app(job.viewer)
    async with app.run_test(size=(120, 40)) as pilot:
        grid = app.screen.query_one(RankGrid)
        grid.form = "heat"
        await pilot.pause()
        grid.select(2)
        await pilot.pause()
        glyph, style = drawn_at(grid, 2)
        assert glyph == LEVEL_GLYPHS[2]
        assert not style.reverse and style.color != grid._style("rank-grid--dev-bad").color
        assert style.bgcolor is not None and style.bgcolor != grid._base().bgcolor


def test_a_hung_jobs_legend_fits_a_line_without_the_levels_no_rank_draws():
    # 512 ranks hung at 80x24 (a grid of 42 columns): the three ■ entries no rank drew made
    # the legend two lines, and the grid gave both up for its ranks.
    lines, _gap = heat_legend(42, {"stalled", "waiting"})
    assert [[text for _g, _c, text in line] for line in lines] == [["stalled", "waiting"]]


async def test_a_hung_job_of_512_ranks_at_80x24_keeps_its_legend():
    job = Job(512)
    for _ in range(4):
        job.step({300: 0.08})  # (+60%)
        job.frame()
    app = make_app(job.viewer)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        grid = app.screen.query_one(RankGrid)
        assert grid.heat
        legend = grid_text(app).splitlines()[0]
        assert f"{LEVEL_GLYPHS[0]} ok" in legend and f"{LEVEL_GLYPHS[2]} +25%" in legend, legend
        assert "+10%" not in legend, legend  # (no rank draws it)
        job.hang(cause=400)
        job.frame()
        app._poll()
        await pilot.pause()
        assert grid.head_lines == 1, grid_text(app)
        legend = grid_text(app).splitlines()[0]
        assert "◆ stalled" in legend and f"{WAITING_GLYPH} waiting" in legend, legend
        assert not set(LEVEL_GLYPHS) & set(legend), legend  # (no rank runs)


@pytest.mark.parametrize("log", ["run4.jsonl", "dp1.jsonl"])
async def test_the_memory_bars_parts_have_fills_of_their_own_and_the_legend_says_them(log):
    # params, grads, optimizer and DDP buckets were all █, told apart by colour alone.
    app = replay_app(log)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("m")
        await pilot.pause()
        bars = app.screen.query_one(MemoryBars)
        drawn = "".join(seg.text for seg in bars.render_line(0))
        legend = str(app.screen.query_one("#legend").render())
        assert len(set(PART_GLYPHS.values())) == 4
        parts = [("memory-bars--params", "params"), ("memory-bars--grads", "grads"), ("memory-bars--optim", "optimizer")]
        if bars.savings is not None and bars.savings.buckets_bytes:
            parts.append(("memory-bars--buckets", "DDP buckets"))
        for cls, label in parts:
            assert PART_GLYPHS[cls] in drawn, (cls, drawn)
            assert f"{PART_GLYPHS[cls]} {label}" in legend, (label, legend)
        assert "░" not in PART_GLYPHS.values() and "┃" not in PART_GLYPHS.values()
