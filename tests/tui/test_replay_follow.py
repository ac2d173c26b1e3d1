"""A replay of a log being written: the header says when following it ends."""

from __future__ import annotations

from tui_helpers import until, widget_text

from pardash.telemetry import client, schema
from pardash.telemetry.client import ReplaySource
from pardash.tui.app import make_app
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
