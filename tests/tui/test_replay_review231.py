"""Replays of long logs: the speed reached, a seek under way, a log its hub closed with ranks
running, and the figures a replay ends on however it got there."""

from __future__ import annotations

import os
import time
import types

from tui_helpers import grid_text, widget_text

from pardash.telemetry import schema
from pardash.telemetry.client import ReplaySource
from pardash.tui.app import make_app
from pardash.tui.widgets.run_header import RunHeader

SIZE = (120, 40)
T0 = 1.7e9


def header(app) -> str:
    return widget_text(app.screen.query_one(RunHeader))


def _log(tmp_path, steps: int, *, ranks: int = 2, hub_stopped: bool = True, every_s: float = 0.1):
    """A finished log of ``ranks`` ranks taking ``steps`` steps ``every_s`` apart, none of them
    ended; ``hub_stopped``: its hub wrote its closing line after them (a simulate stopped with
    Ctrl-C, a hub alone whose ranks were killed)."""
    log = tmp_path / "telemetry.jsonl"
    msgs: list = [schema.Hello(rank=r, world_size=ranks, t=T0, run="x", seq=0) for r in range(ranks)]
    msgs += [
        schema.Step(rank=r, step=s, loss=1.0 / s, step_s=every_s, samples=8, samples_total=8 * s, t=T0 + s * every_s + r * 1e-3, seq=s, run="x")
        for s in range(1, steps + 1)
        for r in range(ranks)
    ]
    if hub_stopped:
        msgs.append(schema.Event(rank=-1, name="hub", message="hub stopped: 0 lost, 0 rejected", t=T0 + steps * every_s + 0.5, run="x"))
    log.write_bytes(schema.encode_json_lines(msgs))
    os.utime(log, (1.6e9, 1.6e9))  # a finished log, not one being written
    return log


def _frozen(src: ReplaySource) -> ReplaySource:
    """``src`` as the test left it: the app's own polls play nothing more."""
    src.poll = lambda: False  # type: ignore[method-assign]
    return src


async def test_a_replay_slower_than_asked_says_the_speed_it_reached(tmp_path, monkeypatch):
    # POLL_BUDGET_S keeps the screen live, so a 256-rank log at 64x played at about 5x, under a
    # header that said "64×" all along.
    from pardash.telemetry import client

    clock = [1000.0]
    monkeypatch.setattr(client, "time", types.SimpleNamespace(monotonic=lambda: clock[0], perf_counter=time.perf_counter, time=time.time))
    monkeypatch.setattr(client, "POLL_BUDGET_S", 0.0)  # one frame (0.1 s of the log) a poll, 1/8 s apart

    def play(src: ReplaySource, polls: int) -> None:
        for _ in range(polls):
            clock[0] += 0.125
            src.poll()

    src = ReplaySource(str(_log(tmp_path, 600)), speed=64.0)
    play(src, 5)
    assert src.speed_reached is None  # (half a second says little)
    play(src, 25)
    assert src.speed_reached is not None and abs(src.speed_reached - 0.8) < 0.05  # a frame a poll of 1/8 s
    src.paused = True  # (a pause kept "(≈0.8×)" beside "paused" for as long as it lasted)
    assert src.speed_reached is None
    src.paused = False
    app = make_app(_frozen(src))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "64× (≈0.8×) · playing" in header(app), header(app)
    # At a speed it keeps up with, the header says the speed alone, as before.
    monkeypatch.setattr(client, "POLL_BUDGET_S", 10.0)
    src = ReplaySource(str(_log(tmp_path, 600)), speed=1.0)
    play(src, 30)
    assert src.speed_reached is not None and abs(src.speed_reached - 1.0) < 0.1
    app = make_app(_frozen(src))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert " · 1× · playing" in header(app), header(app)
    # A new speed, a pause or a seek measures again.
    src.speed = 64.0
    assert src.speed_reached is None


async def test_a_seek_back_says_it_is_seeking_and_shows_the_targets_figures_once_there(tmp_path, monkeypatch):
    # After `[` near the end of a long log the header said the target at once while the grid and
    # charts replayed the run from its start under it, for 18 s.
    from pardash.telemetry import client

    monkeypatch.setattr(client, "SEEK_BUDGET_S", 0.0)  # one frame a poll
    log = _log(tmp_path, 300)
    want = ReplaySource(str(log), start_s=20.0)
    want.paused = True
    app = make_app(want)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        target_grid, target_header = grid_text(app), header(app)
    src = ReplaySource(str(log), start_s=float("inf"))
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        before = grid_text(app)
        assert before != target_grid
        await pilot.press("left_square_bracket")
        for _ in range(20):  # (the polls the app's timer makes, driven here)
            app._poll()
        await pilot.pause()
        assert src.seeking and src.played_s > 1.0
        text = header(app)
        assert "20s / 30s" in text and "seeking, at " in text, text  # where it goes, how far it got
        assert grid_text(app) == before  # not the run replayed from its start
        while src.seeking:
            app._poll()
        await pilot.pause()
        assert grid_text(app) == target_grid
        text = header(app)
        assert "seeking" not in text and "20s / 30s · 1× · paused" in text
        assert text == target_header
