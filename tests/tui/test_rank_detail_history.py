"""The rank detail's charts say which steps they cover when that is not the whole run."""

from __future__ import annotations

import math
import random

from textual.content import Content
from tui_helpers import replay_app

import make_fixtures as fx


def plain(markup: str) -> str:
    return Content.from_markup(markup).plain


def long_run(path) -> None:
    """2 ranks, 2000 steps at 20 ms: more frames (a history point each) than a rank keeps."""
    rng = random.Random(2)
    log = fx.Log("ddp-long-2")
    for r in (0, 1):
        log.add(fx.hello(r, 2, 0, 2, "vm", "ddp", 1_000_000), 0.1 + r * 0.01)
    mems = {r: fx.sharded_mem(1_000_000, 2, rng, sharded=False) for r in (0, 1)}
    fx.synchronous_steps(
        log, ranks=[0, 1], steps=range(1, 2001), step_dt=0.02, t_start=0.5, rng=rng, mem_of=mems.get,
        loss_of=lambda s, r: 0.7 + math.exp(-s / 100), mem_every=50,
    )  # fmt: skip
    log.write(path)


async def test_a_long_runs_charts_say_they_hold_its_last_steps_only(tmp_path, monkeypatch):
    # "step 58 … 2000" under the charts after a run of 2000 steps (the dashboard's loss chart
    # from step 1), and nothing said they held only the rank's last 240 points.
    from pardash.telemetry.state import HISTORY_POINTS
    from pardash.tui.widgets.history_chart import HistoryChart

    path = tmp_path / "long.jsonl"
    long_run(path)
    monkeypatch.setattr("tui_helpers.DATA", tmp_path)
    app = replay_app("long.jsonl")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        charts = app.screen.query(HistoryChart)
        assert len(charts) == 3
        for chart in charts:
            series = chart.series
            assert series is not None and series.first_step > 1 and series.last_step == 2000
            title = plain(chart.border_title)
            assert f"steps {series.first_step}-2000 only" in title, title
            # history points, one a frame; not "samples" (what a rank trains on, samples/s)
            assert f"the last {HISTORY_POINTS} points" in title and "sample" not in title, title
            assert len(f"╭─ {title} ─╮") <= chart.size.width  # drawn whole
    app = replay_app("long.jsonl")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        charts = app.screen.query(HistoryChart)
        assert len(charts) == 3
        for chart in charts:  # shorter, whole
            title = plain(chart.border_title)
            assert title.endswith("-2000 only") and len(f"╭─ {title} ─╮") <= chart.size.width, title


async def test_a_short_runs_charts_have_their_plain_titles():
    from pardash.tui.widgets.history_chart import HistoryChart

    app = replay_app("straggler8.jsonl")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        titles = [plain(chart.border_title) for chart in app.screen.query(HistoryChart)]
        assert titles == ["loss", "step time", "self time"]


async def test_the_scripts_own_metrics_come_before_pardashs_and_the_process_figures(tmp_path, monkeypatch):
    # At 120x36 the panel of the script's metrics came last and had one row: it showed
    # micro_batches (counted by pardash, not the script's) under "logged by the script", and
    # the script's own tokens were cut.
    from pardash.telemetry import schema
    from pardash.tui.widgets.fact_list import FactList

    log = fx.Log("logged-2")
    for r in (0, 1):
        log.add(fx.hello(r, 2, 0, 2, "vm", "ddp", 1_000_000), 0.1)
    for step in range(1, 21):
        for r in (0, 1):
            log.add(schema.Step(rank=r, step=step, loss=1.0 / step, samples=32, step_s=0.1, mono=1000 + step * 0.1,
                                custom={"micro_batches": 4.0, "tokens": 512.0, "zloss": 0.25}), 0.2 + step * 0.1)  # fmt: skip
    log.write(tmp_path / "logged.jsonl")
    monkeypatch.setattr("tui_helpers.DATA", tmp_path)
    app = replay_app("logged.jsonl")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        figures = [w.id for w in app.screen.query_one("#figures").children]
        assert figures.index("logged") < figures.index("system"), figures
        logged = app.screen.query_one("#logged", FactList)
        assert [row[0] for row in logged.facts] == ["tokens", "zloss", "micro_batches"]
        assert [row[2] for row in logged.facts] == ["", "", "counted by pardash"]
        region = logged.region
        assert region.height >= 5 and region.bottom <= app.screen.query_one("#figures").region.bottom  # each row drawn


async def test_a_rank_without_self_times_says_they_are_not_measured(tmp_path, monkeypatch):
    # A script using the explicit API alone (plain torchrun) sends no self time: its chart said
    # "no history yet" to the end, as if it would come.
    from pardash.telemetry import schema
    from pardash.tui.widgets.history_chart import HistoryChart

    log = fx.Log("explicit-2")
    for r in (0, 1):
        log.add(fx.hello(r, 2, 0, 2, "vm", "ddp", 1_000_000), 0.1)
    for step in range(1, 21):
        for r in (0, 1):
            log.add(schema.Step(rank=r, step=step, loss=1.0 / step, samples=32, step_s=0.1, mono=1000 + step * 0.1), 0.2 + step * 0.1)
    log.write(tmp_path / "explicit.jsonl")
    monkeypatch.setattr("tui_helpers.DATA", tmp_path)
    app = replay_app("explicit.jsonl")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        charts = {c.id: c for c in app.screen.query(HistoryChart)}
        assert charts["chart-self_s"].series is None
        assert charts["chart-self_s"].empty.startswith("not measured")
        assert charts["chart-loss"].series is not None and charts["chart-step_s"].series is not None
