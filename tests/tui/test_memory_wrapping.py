"""The memory figures wrap between phrases, never inside one ("÷" on a line, "2)" alone on the
next), in the dashboard's panel and on the memory screen."""

from __future__ import annotations

import pytest
from textual.geometry import Region

from tui_helpers import replay_app, replay_running_app, strip_text

from pardash.tui.widgets.memory_bars import PART_GLYPHS, PARTS


def shown_lines(widget) -> list[str]:
    """The widget's lines as drawn (after any wrapping of its own), its border and padding
    left out."""
    strips = widget.render_lines(Region(0, 0, widget.region.width, widget.region.height))
    lines = [strip_text(strip) for strip in strips]
    if widget.styles.border_top[0]:
        lines = [line[1:-1] for line in lines[1:-1]]
    return [line.strip() for line in lines]


@pytest.mark.parametrize(
    ("fixture", "phrases"),
    [
        ("run4.jsonl", ["(its state unsharded ÷ 4)"]),  # FSDP's expectation
        ("straggler8.jsonl", ["+ 97.5 MiB buckets", "= 487 MiB", "(its state unsharded)", "if sharded ÷ 8"]),  # DDP's
    ],
)
@pytest.mark.parametrize("size", [(120, 36), (100, 30), (220, 50)])
async def test_the_dashboards_memory_panel_keeps_each_phrase_on_one_line(fixture, phrases, size):
    # At 120 columns: "expected 830 KiB (its state unsharded ÷" and "2)" alone under it; "per
    # rank 1.62 MiB + 415 KiB buckets =" and "2.03 MiB" under it.
    from pardash.tui.widgets.memory_summary import MemorySummary

    # (while the run goes on: at their end the header's third line, the hub stopped, takes the
    # memory panel's last line at 100x30)
    app = replay_running_app(fixture)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        panel = app.screen.query_one(MemorySummary)
        lines = shown_lines(panel)
        for phrase in phrases:
            assert any(phrase in line for line in lines), (phrase, lines)
        # a row's phrases that go on under its value, not under its label
        rows = [line for line in lines if line]
        assert all(not line[0].isdigit() and not line.endswith("=") for line in rows), rows


@pytest.mark.parametrize("width", [120, 100, 80, 60])
async def test_the_memory_screens_legend_and_title_keep_their_phrases_whole(width):
    # At 120 columns the legend ended its line with "expected for the", "strategy" beginning the
    # next.
    app = replay_app("straggler8.jsonl")
    async with app.run_test(size=(width, 30)) as pilot:
        await pilot.press("m")
        await pilot.pause()
        legend = shown_lines(app.screen.query_one("#legend"))
        parts = [f"{PART_GLYPHS[cls]} {label}" for _field, cls, label in PARTS]
        for key in (*parts, "░ unsharded (a full copy of its state)", "┃ expected for the strategy"):
            assert any(key in line for line in legend), (key, legend)
        title = shown_lines(app.screen.query_one("#title"))
        assert any("expected per rank 390 MiB" in line for line in title), title
        assert any("(its state unsharded, a full copy)" in line for line in title), title
