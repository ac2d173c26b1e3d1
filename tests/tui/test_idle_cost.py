"""What the TUI costs when nothing changes: a live hub frames at 10 Hz, messages or not (all
along once a job has ended), and each frame redrew the whole dashboard, its loss chart's title
set again at every redraw (the same text, but setting one repaints its panel); a replay paused
or at its end was polled at 10 Hz with nothing to come.

A hub core is fed directly (no sockets) and framed on demand, as in test_redraw. What is
counted is work done (redraws, widgets refreshed, the poll timer's interval), never time.
"""

from __future__ import annotations

import pytest
from textual.widget import Widget
from tui_helpers import Fed, counting_redraws, replay_app

from pardash.telemetry import schema
from pardash.telemetry.client import NullDetector
from pardash.telemetry.hubcore import HubCore
from pardash.tui import app as tui_app
from pardash.tui.app import make_app
from pardash.tui.screens.dashboard import DashboardScreen
from pardash.tui.widgets.event_log import EventLog
from pardash.tui.widgets.history_chart import HistoryChart

RUN = "idle"




class Job:
    def __init__(self, ranks: int) -> None:
        self.core = HubCore(run_id=RUN, detector=NullDetector())  # type: ignore[arg-type]
        self.viewer = Fed()
        self.t = 1000.0
        self.ranks = ranks
        for r in range(ranks):
            self.send(schema.Hello(rank=r, world_size=ranks, node=0, host="h0", strategy="ddp", params_count=1000, run=RUN, t=self.t))
        self.frame()

    def send(self, msg: schema.Message) -> None:
        self.core.replay(msg, self.t)

    def steps(self, n: int) -> None:
        for i in range(1, n + 1):
            for r in range(self.ranks):
                self.send(schema.Step(rank=r, step=i, loss=3.0 - 0.01 * i - 0.001 * r, samples=8, step_s=0.1, self_s=0.05, t=self.t, run=RUN))
            self.frame()

    def finish(self) -> None:
        for r in range(self.ranks):
            self.send(schema.Event(rank=r, name="exit", code=0, seq=99, run=RUN, t=self.t))
        self.frame()

    def frame(self) -> None:
        self.t += 0.1
        self.viewer.apply_frame(self.core.tick(self.t))
        self.viewer.pending = True


class Refreshes:
    """Counts refresh() calls on the widgets of the app's screens (a repaint each)."""

    def __init__(self, monkeypatch) -> None:
        self.by: dict[str, int] = {}
        original = Widget.refresh

        def counting(widget, *args, **kw):
            name = type(widget).__name__ + (f"#{widget.id}" if widget.id else "")
            self.by[name] = self.by.get(name, 0) + 1
            return original(widget, *args, **kw)

        monkeypatch.setattr(Widget, "refresh", counting)

    def total(self) -> int:
        return sum(self.by.values())

    def clear(self) -> None:
        self.by.clear()


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def monotonic(self) -> float:
        return self.t


async def settle(pilot) -> None:
    for _ in range(3):
        await pilot.pause()


async def test_frames_that_bring_nothing_redraw_nothing_once_the_job_has_ended(monkeypatch):
    monkeypatch.setattr(tui_app, "HUB_QUIET_S", 1e9)  # (a loaded machine's slow start: not a quiet hub)
    job = Job(4)
    job.steps(20)
    job.finish()
    app = make_app(job.viewer)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        app._poll()
        await settle(pilot)
        redraws = counting_redraws(screen)
        refreshes = Refreshes(monkeypatch)
        version = app.version
        for _ in range(30):  # three seconds of the hub's frames after the end: no message in any
            job.frame()
            app._poll()
            await pilot.pause()
        await settle(pilot)
        assert app.version == version
        assert redraws == [0]
        assert refreshes.total() == 0, refreshes.by

        # A late note still shows, with the frame that brings it.
        job.core.note("hub stopping: a late word")
        job.frame()
        app._poll()
        await settle(pilot)
        assert app.version == version + 1 and redraws == [1]
        lines = [line.text for line in screen.query_one(EventLog).lines]
        assert any("a late word" in line for line in lines), lines


async def test_redrawing_the_same_run_repaints_nothing(monkeypatch):
    """The loss chart's title is Textual markup; read back, it is not the text set, and the
    dashboard set it again (repainting the chart's panel) at every redraw."""
    # (no frame comes in this test: on a loaded machine 3 s went by, and the header rightly
    # counted the quiet hub's seconds, a repaint each)
    monkeypatch.setattr(tui_app, "HUB_QUIET_S", 1e9)
    job = Job(4)
    job.steps(30)
    job.finish()
    app = make_app(job.viewer)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        screen = app.screen
        trend = screen.query_one("#trend", HistoryChart)
        assert screen.has_class("-trend") and "now" in str(trend.border_title)
        screen.refresh_run()  # (the grid's first in-place update after its layout notes the cells' looks)
        await settle(pilot)
        refreshes = Refreshes(monkeypatch)
        for _ in range(5):
            screen.refresh_run()
            await pilot.pause()
        await settle(pilot)
        assert refreshes.total() == 0, refreshes.by


async def test_a_quiet_hub_after_the_end_is_told_at_its_start_and_not_every_second_after(monkeypatch):
    """Once every rank is done, the header says how the job ended when the hub goes quiet (the
    launcher stops it), not for how long: it is drawn once then, not every second."""
    clock = Clock()
    monkeypatch.setattr(tui_app, "time", clock)  # (the app's clock alone)
    job = Job(4)
    job.steps(5)
    job.finish()
    app = make_app(job.viewer)
    async with app.run_test(size=(160, 45)) as pilot:
        app._poll()
        await settle(pilot)
        screen = app.screen
        redraws = counting_redraws(screen)
        for _ in range(100):  # ten seconds of polls, no frame: quiet from 3 s on
            clock.t += 0.1
            app._poll()
            await pilot.pause()
        await settle(pilot)
        assert redraws == [1]
        assert "job ended: every rank finished" in screen.query_one("#header").render().plain


async def test_a_replay_at_rest_is_polled_once_a_second_and_a_key_plays_it_at_once():
    app = replay_app("run4.jsonl")  # at its end, paused
    async with app.run_test(size=(120, 36)) as pilot:
        app._poll()
        await pilot.pause()
        assert app._poll_timer._interval == tui_app.IDLE_POLL_S
        await pilot.press("space")  # playing (at its end: done)
        await pilot.pause()
        assert not app.source.paused
        app._poll()
        assert app._poll_timer._interval == tui_app.IDLE_POLL_S
        await pilot.press("left_square_bracket")  # 10 s back: it plays again, polled at 10 Hz
        await pilot.pause()
        assert app._poll_timer._interval == tui_app.POLL_S
        app._poll()
        assert not app.source.done and app._poll_timer._interval == tui_app.POLL_S


@pytest.mark.parametrize("over", [False, True])
async def test_a_live_run_is_polled_at_10_hz_until_it_is_over_and_its_hub_quiet(monkeypatch, over):
    clock = Clock()
    monkeypatch.setattr(tui_app, "time", clock)  # (the app's clock alone)
    job = Job(2)
    job.steps(3)
    if over:
        job.finish()
    app = make_app(job.viewer)
    async with app.run_test(size=(120, 36)) as pilot:
        app._watched = [(-1, None)]  # (a hub client's sockets wake the app: Fed has none)
        try:
            app._poll()
            await pilot.pause()
            assert app._poll_timer._interval == tui_app.POLL_S
            clock.t += 5.0  # the hub quiet
            app._poll()
            assert app._poll_timer._interval == (tui_app.IDLE_POLL_S if over else tui_app.POLL_S)
            job.frame()  # a frame again: 10 Hz again
            app._poll()
            assert app._poll_timer._interval == tui_app.POLL_S
        finally:
            app._watched = []


async def test_a_live_runs_frames_wait_for_the_pacer_where_drawing_them_costs_too_much(monkeypatch):
    # Review 303: the TUI drew every 10 Hz frame, 7-12% of a core taken from two CPU-bound ranks
    # on 2 cores (20% of their steps). Past its budget the pacer spaces the draws; a frame that
    # came meanwhile is drawn when it says so, none lost.
    import time

    from pardash.tui.pacing import DrawPacer

    monkeypatch.setattr(tui_app, "HUB_QUIET_S", 1e9)
    job = Job(4)
    job.steps(5)
    app = make_app(job.viewer)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot)
        screen = app.screen
        app.paced = True  # (as on a terminal)
        app._pacer = pacer = DrawPacer(tui_app.POLL_S, cpu=lambda: 0.0)
        pacer.every = 1e9  # (as after seconds over its budget)
        pacer.drawn(time.monotonic())
        redraws = counting_redraws(screen)
        version = app.version
        job.steps(1)
        app._poll()
        await settle(pilot)
        assert app.version == version + 1 and redraws == [0]  # (taken, not drawn yet)
        pacer.every = 0.0
        app._poll()  # (no new frame: the one waiting is drawn)
        await settle(pilot)
        assert redraws == [1]

