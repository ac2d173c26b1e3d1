"""Memory figures read in one unit style on every screen: binary, said so ("487Mi" in the grid's
six columns, "487 MiB" elsewhere), and a DDP rank's buckets said to come on top of its copy."""

from __future__ import annotations

import re

import pytest
from tui_helpers import grid_text, replay_app, strip_text, widget_text


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_grid_and_memory_view_say_bytes_as_the_rest_and_ddp_buckets_on_top(size):
    # The grid said "487M" and the memory view's bars "390M of 390M  full copy" beside the
    # summary's "390 MiB + 97.5 MiB buckets = 487 MiB": a bare M (decimal? bytes?) and the
    # 97.5 MiB between the bar's figure and the grid's held unsaid.
    from pardash.tui.widgets.memory_bars import MemoryBars
    from pardash.tui.widgets.memory_summary import MemorySummary

    app = replay_app("straggler8.jsonl")  # DDP over 8 ranks
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        grid = grid_text(app)
        await pilot.press("m")
        await pilot.pause()
        summary = widget_text(app.screen.query_one(MemorySummary))
        per_rank = re.search(r"per rank\s+(\S+ \S+) \+ (\S+ \S+) buckets = (\S+ \S+)", summary)
        assert per_rank, summary
        state, buckets, held = per_rank.groups()
        assert held.endswith("MiB"), summary
        # The grid's held is the memory view's per-rank total, in the same binary units (where
        # the grid has the room for it: at 80x24 the data and comm columns come first).
        assert grid.split().count(held.replace(" ", "")[:-1]) == (0 if size[0] < 100 else 8), grid  # "487Mi" for each rank
        assert not re.search(r"\d[KMGT]\b", grid), grid
        bars = app.screen.query_one(MemoryBars)
        lines = [" ".join(strip_text(bars.render_line(y)).split()) for y in range(8)]
        for line in lines:
            assert line.endswith(f"{state} of {state} full copy + {buckets} buckets"), line


async def test_the_memory_view_of_one_rank_says_rank_not_ranks():
    # A one-process run's memory view read "dp · 1 ranks" under a header saying "1 rank".
    from textual.widgets import Static

    app = replay_app("dp1.jsonl")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("m")
        await pilot.pause()
        title = widget_text(app.screen.query_one("#title", Static))
        assert "dp · 1 rank " in title + " " and "1 ranks" not in title, title
