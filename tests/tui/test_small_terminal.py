"""At 80x24 the screens keep what they are for: the detail's comparison with the other ranks,
its memory figures whole, its events; the header's lines for what runs, not the device's name."""

from __future__ import annotations

import pytest

from tui_helpers import replay_app, replay_running_app, settled, strip_text, widget_text

from pardash.tui.app import make_app
from pardash.tui.widgets.run_header import RunHeader, RunSummary

SMALL = (80, 24)


async def test_a_ranks_detail_at_80x24_keeps_the_others_median_its_memory_and_its_events():
    from pardash.tui.widgets.event_log import EventLog
    from pardash.tui.widgets.fact_list import FactList
    from pardash.tui.widgets.phase_bars import PhaseBars

    app = replay_app("exited4.jsonl")
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("down", "enter")
        await pilot.pause()
        screen = app.screen
        phases = widget_text(screen.query_one(PhaseBars)).splitlines()
        assert len(phases) >= 6
        assert all(" med " in line for line in phases), phases  # the straggler's comparison
        memory = screen.query_one("#memory", FactList)
        lines = widget_text(memory).splitlines()
        assert any(line.startswith("held") for line in lines)
        width = memory.content_region.width
        assert all(len(line) <= width for line in lines), lines  # whole, not cut with "…"
        events = screen.query_one(EventLog)
        assert events.display and events.region.height >= 4  # three lines: an exit's reason
        shown = [strip_text(line) for line in events.lines[events.scroll_offset.y :][: events.scrollable_content_region.height]]
        assert any("exited with code 1" in line for line in shown), shown
        title = screen.query_one("#title")
        assert title.region.height <= 2, widget_text(title)
        assert title.region.y == 0 and events.region.bottom <= SMALL[1] - 1  # above the footer


async def test_a_ranks_detail_at_80x24_shows_its_hosts_cpu_and_gpu_without_scrolling():
    # The system panel got two of its nine rows at 80x24 (cpu and rss; the GPU's figures only
    # by scrolling the figures' column), under the phases and memory that keep theirs.
    from pardash.tui.widgets.fact_list import FactList

    app = replay_app("exited4.jsonl")
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("down", "enter")
        await pilot.pause()
        screen = app.screen
        figures, system = screen.query_one("#figures"), screen.query_one("#system", FactList)
        lines = widget_text(system).splitlines()
        assert system.content_region.height >= len(lines), lines  # every line of it drawn
        assert system.region.bottom <= figures.region.bottom and figures.scroll_offset.y == 0
        text = "\n".join(lines)
        assert "102%" in text and "3.22 GiB" in text, text  # the process's cpu and rss
        assert "95%" in text and "9.47 GiB of 79.6 GiB" in text, text  # the GPU's use and memory
        width = system.content_region.width
        assert all(len(line) <= width for line in lines), lines  # whole, not cut with "…"
    # A straggler's title takes a third line and DDP's memory a third: the GPU's line first.
    app = replay_app("straggler8.jsonl")
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press(*["down"] * 5, "enter")
        await pilot.pause()
        figures, system = app.screen.query_one("#figures"), app.screen.query_one("#system", FactList)
        assert widget_text(system).startswith("gpu ") and system.content_region.y < figures.region.bottom


async def test_the_header_at_80_columns_leaves_out_the_device_and_shortens_the_log_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_id = "20261204-182026-7ab6"
    app = make_app(replay_app("run4.jsonl").source)
    async with app.run_test(size=(120, 40)) as pilot:
        header = app.screen.query_one(RunHeader)
        header.summary = RunSummary(
            run_id=run_id, strategy="ddp", world_size=2, device="Intel(R) Xeon(R) Processor", step=6,
            samples_per_s=844.0, elapsed_s=0, status_counts=(("running", 2),),
            log_path=f"{tmp_path}/runs/{run_id}/telemetry.jsonl",
        )  # fmt: skip
        await pilot.pause()
        narrow = header._text(78).plain.splitlines()
        assert len(narrow) == 3, narrow  # (elapsed, laid out at its widest, leads the second)
        assert "Xeon" not in "\n".join(narrow)
        # (relative to the folder it runs in; on a line of its own now, its run id fits)
        assert narrow[-1].endswith(f"log runs/{run_id}/telemetry.jsonl") and str(tmp_path) not in narrow[-1]
        wide = header._text(160).plain.splitlines()
        assert "Intel(R) Xeon(R) Processor" in wide[0]
        assert wide[1].endswith(f"runs/{run_id}/telemetry.jsonl")  # whole where it fits


async def test_a_ranks_memory_figures_are_in_one_unit_style_and_say_what_they_are_against():
    # "208 KiB of 415K": the value in KiB, what it was against in a bare K, unsaid of what.
    from pardash.tui.widgets.fact_list import FactList

    app = replay_app("run4.jsonl")
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        lines = widget_text(app.screen.query_one("#memory", FactList)).splitlines()
        held = next(line for line in lines if line.startswith("held"))
        against = held.split(" of ")[1].split(" (")[0]
        assert held.split()[2] == "MiB" and against.split()[1] in ("KiB", "MiB", "GiB"), held


async def test_the_header_writes_a_step_as_the_grid_does():
    # "step 2,000" in the header over "2001" in the grid: one run's steps in two formats.
    from pardash.tui.format import fmt_step_no

    app = make_app(replay_app("run4.jsonl").source)
    async with app.run_test(size=(120, 40)) as pilot:
        header = app.screen.query_one(RunHeader)
        header.summary = RunSummary(run_id="r", strategy="ddp", world_size=2, step=2000, status_counts=(("running", 2),))
        await pilot.pause()
        assert f"step {fmt_step_no(2000)} " in header._text(118).plain


@pytest.mark.parametrize("live", [True, False])
@pytest.mark.parametrize("width", [78, 98, 118])
async def test_the_headers_lines_stay_put_as_its_figures_move(live, width):
    # At 80 columns "samples/s 1171" pushed "elapsed" onto a new line, and "999" took it back:
    # the dashboard under the header jumped a row every few seconds of a replay at 2x.
    from pardash.tui.widgets.run_header import ReplayPosition

    app = make_app(replay_app("run4.jsonl").source)
    async with app.run_test(size=(120, 40)) as pilot:
        header = app.screen.query_one(RunHeader)
        layouts = set()
        for sps, elapsed, step, hub, paused in (
            (369, 9, 305, 27.3, False), (999, 59, 999, 812, True), (1171, 65, 2000, 12345, False),
            (12345, 3599, 99999, 1.2e6, False), (0, 600, 10000, 9.5, True),
        ):  # fmt: skip
            header.summary = RunSummary(
                run_id="20261204-204152-219b", strategy="fsdp", world_size=2, device="Intel(R) Xeon(R) Processor",
                step=step, samples_per_s=sps, elapsed_s=elapsed, status_counts=(("running", 2),), ingest_hz=hub,
                live=live, log_path="/runs/20261204-204152-219b/telemetry.jsonl",
                replay=None if live else ReplayPosition(elapsed, 3600, 2.0, paused, False, "/runs/telemetry.jsonl"),
            )  # fmt: skip
            await pilot.pause()
            lines = header._text(width).plain.splitlines()
            # which line each label is on
            layouts.add(tuple(next(i for i, line in enumerate(lines) if label in line) for label in ("step", "samples/s", "elapsed", "running", "lost")) + (len(lines),))
        assert len(layouts) == 1, layouts


def ranks_on_screen(app) -> set[int]:
    """The ranks a person sees in the grid: those drawn where the screen shows the grid (not
    under its panel's edge, nor scrolled away)."""
    from textual.errors import NoWidget

    from pardash.tui.widgets.rank_grid import RankGrid

    grid = app.screen.query_one(RankGrid)
    area = grid.content_region
    seen = set()
    for y in range(app.size.height):
        for x in range(app.size.width):
            try:
                widget, _region = app.screen.get_widget_at(x, y)
            except NoWidget:
                continue
            if widget is grid and (rank := grid.rank_at(x - area.x, y - area.y)) is not None:
                seen.add(rank)
    return seen


@pytest.mark.parametrize(
    ("fixture", "size"),
    [
        ("exited4.jsonl", (60, 14)),  # one node: the legend and the node's header, no rank
        ("dp1.jsonl", (60, 15)),  # a header of six lines: the legend alone
        ("run4.jsonl", (60, 15)),
        ("straggler8.jsonl", (60, 12)),  # the grid's share of the height was none
        ("straggler8.jsonl", (80, 10)),
    ],
)
async def test_a_tiny_terminal_shows_every_rank(fixture, size):
    # A live 2-rank run resized to 60x15 showed the heat map's legend and its node's header,
    # and the row of ranks under a scrollbar.
    from pardash.tui.widgets.rank_grid import RankGrid

    # (run4 as it ran, live: at its end its header says on a line more that the hub stopped)
    app = replay_running_app(fixture) if fixture == "run4.jsonl" else replay_app(fixture)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        grid = app.screen.query_one(RankGrid)
        assert ranks_on_screen(app) == set(grid.shown_ranks) and grid.shown_ranks
        # with the legend where it fits over them
        if size == (60, 15) and fixture == "run4.jsonl":
            assert grid.head_lines == 1
        # and the selected rank's line under them
        selected = app.screen.query_one("#selected")
        assert selected.region.height == 1 and selected.region.bottom <= size[1] - 1


@pytest.mark.parametrize(
    ("fixture", "size"),
    [("exited4.jsonl", (60, 15)), ("dp1.jsonl", (60, 12)), ("straggler8.jsonl", (120, 15)), ("straggler8.jsonl", (120, 18))],
)
async def test_a_short_side_area_draws_no_panel_as_a_bare_border(fixture, size):
    # At 60x15 the event log was its border and title under the alerts; at 120x15 the memory
    # panel pushed the alerts out of the side area (the alerts come first, the events next).
    from pardash.tui.widgets.alert_list import AlertList

    app = replay_app(fixture)
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        screen = app.screen
        side = screen.query_one("#side")
        for panel in ("#alerts", "#memory", "#events"):
            widget = screen.query_one(panel)
            if widget.display:
                region = widget.region.intersection(side.region)
                assert region.height >= 3, (panel, widget.region, side.region)  # a line inside its border
        if side.region.height >= 3:
            assert screen.query_one(AlertList).display
