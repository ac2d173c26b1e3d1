"""A replay of a log being written: the header says when following it ends."""

from __future__ import annotations

import os

from tui_helpers import until, widget_text

from pardash.telemetry import client, schema
from pardash.telemetry.client import ReplaySource
from pardash.tui.app import make_app
from pardash.tui.widgets.alert_list import STALE_MARK, AlertList
from pardash.tui.widgets.run_header import RunHeader

SIZE = (120, 40)
def header(app) -> str:
    return widget_text(app.screen.query_one(RunHeader))


async def test_the_header_says_ended_once_a_followed_log_stops_growing(tmp_path, monkeypatch):
    # A log whose hub was killed: the replay stopped following it after FOLLOW_QUIET_S, but the
    # header said "following the log" for ever (no frame came to redraw it).
    monkeypatch.setattr(client, "FOLLOW_QUIET_S", 1e9)  # following until the test says it is quiet
    log = tmp_path / "telemetry.jsonl"
    t0 = 1.7e9
    msgs = [schema.Hello(rank=r, world_size=2, t=t0, run="x") for r in range(2)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0, t=t0 + 0.1 * s, seq=s, run="x") for s in range(1, 4) for r in range(2)]
    log.write_bytes(schema.encode_json_lines(msgs))  # no "hub stopped": its hub was killed
    src = ReplaySource(str(log), speed=64)
    assert src.following
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: src.state.step == 3)
        await until(pilot, lambda: "following the log" in header(app))  # (the whole log played, its writer still given time)
        monkeypatch.setattr(client, "FOLLOW_QUIET_S", 0.0)  # now it has been quiet long enough
        await until(pilot, lambda: not src.following, timeout_s=30)
        await until(pilot, lambda: "ended" in header(app), timeout_s=30)
        assert "following" not in header(app)


def test_a_torn_last_line_is_counted_by_a_replay_that_followed_the_log_to_its_end(tmp_path, monkeypatch):
    # A fresh replay of the log said "skipped lines 1"; one that had followed it to its end,
    # "rejected 0" and no skipped line: the torn line was counted after the header's count was made.
    from pardash.tui.widgets.run_header import summarize

    clock = [1000.0]
    monkeypatch.setattr(client.time, "monotonic", lambda: clock[0])
    log = tmp_path / "telemetry.jsonl"
    t0 = 1.7e9
    msgs = [schema.Step(rank=0, step=s, loss=1.0, t=t0 + s, seq=s, run="x") for s in range(1, 4)]
    log.write_bytes(schema.encode_json_lines(msgs) + b'{"kind":"step","ra')  # its writer killed mid-line
    src = ReplaySource(str(log), speed=64)
    assert src.following
    src.seek(src.duration_s)
    clock[0] += 60.0  # quiet since (past FOLLOW_QUIET_S), and no live hub records it
    src.poll()
    assert not src.following and src.read_stats.skipped["truncated"] == 1
    s = summarize(src)
    assert (s.rejected, s.skipped_lines) == (0, 1)


async def test_the_replay_of_a_log_cut_short_says_so_in_its_header_and_alerts(tmp_path):
    # Its hub killed: the replay ended on "● 2 running ... ended" and "✓ no alerts: every rank
    # is healthy", no word of the log's early end (which `pardash report` of it said).
    log = tmp_path / "telemetry.jsonl"
    t0 = 1.7e9
    msgs = [schema.Hello(rank=r, world_size=2, t=t0, run="x") for r in range(2)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0, t=t0 + 0.1 * s, seq=s, run="x") for s in range(1, 4) for r in range(2)]
    log.write_bytes(schema.encode_json_lines(msgs))
    os.utime(log, (1.6e9, 1.6e9))  # nothing written for years
    src = ReplaySource(str(log), speed=64)
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: src.done)
        await until(pilot, lambda: "the log ends early at step 3, 2 ranks not ended (the event log says why)" in header(app))
        assert "● 2 running at the log's end" in header(app)
        calm = app.screen.query_one(AlertList).calm
        assert calm.startswith(STALE_MARK) and "where the log ends early" in calm and "healthy" not in calm
        # Paused and sought back: the log's end is not yet there, nor its notice.
        src.paused = True
        src.seek(0.1)
        app.screen.refresh_run()
        await pilot.pause()
        assert "ends early" not in header(app) and "at the log's end" not in header(app)
        assert app.screen.query_one(AlertList).calm == "✓ no alerts: every rank is healthy"


async def test_the_replay_of_a_log_its_hub_closed_under_running_ranks_says_so_as_the_live_viewer(tmp_path):
    # Its hub stopped (a hub alone, SIGTERM) while its ranks ran: the replay ended on "● 2
    # running" and "✓ no alerts: every rank is healthy", where the viewer attached as it stopped
    # said "the hub stopped at step 3, 2 ranks not ended" and `pardash report` "ranks 0-1 at step
    # 3: the hub stopped before their end was heard (no exit)".
    log = tmp_path / "telemetry.jsonl"
    t0 = 1.7e9
    msgs = [schema.Hello(rank=r, world_size=2, t=t0, run="x") for r in range(2)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0, t=t0 + 0.1 * s, seq=s, run="x") for s in range(1, 4) for r in range(2)]
    msgs += [schema.Event(rank=-1, seq=-1, name="hub", message="hub stopped: 8 messages, 0 lost, 0 rejected", t=t0 + 0.8, run="x")]
    log.write_bytes(schema.encode_json_lines(msgs))
    src = ReplaySource(str(log), speed=64)
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: src.done)
        await until(pilot, lambda: "the hub stopped at step 3, 2 ranks not ended (no word of their end)" in header(app))
        assert "● 2 running when the hub stopped" in header(app)
        calm = app.screen.query_one(AlertList).calm
        assert calm == f"{STALE_MARK} no alerts up to step 3, where the hub stopped", calm
        # Sought back: the hub has not stopped yet there.
        src.paused = True
        src.seek(0.1)
        app.screen.refresh_run()
        await pilot.pause()
        assert "hub stopped" not in header(app)
        assert app.screen.query_one(AlertList).calm == "✓ no alerts: every rank is healthy"
