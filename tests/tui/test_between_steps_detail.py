"""A rank's detail says where between steps it is now, as a stall there would be said: in its
DataLoader (the heartbeat's "loader"), or, where the DataLoader is timed, in its own code between
steps; it said "now in loader" and "now in data" (review 308, helper 311)."""

from __future__ import annotations

from textual.widgets import Static
from tui_helpers import until

from pardash.telemetry import schema
from pardash.telemetry.client import ReplaySource
from pardash.tui.app import make_app
from pardash.tui.widgets.rank_grid import RankGrid

T0 = 1.7e9


async def test_a_ranks_detail_says_whether_it_is_in_its_dataloader_or_its_own_code(tmp_path):
    log = tmp_path / "telemetry.jsonl"
    msgs: list = [schema.Hello(rank=r, world_size=2, t=T0, run="x") for r in range(2)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0, samples=8, step_s=0.1, data_s=0.05, loader_s=0.001, t=T0 + 0.1 * s, seq=s, run="x")
             for s in range(1, 6) for r in range(2)]  # fmt: skip
    msgs += [schema.Heartbeat(rank=0, step=5, phase=schema.LOADER_PHASE, phase_s=s, t=T0 + 1 + s, seq=10 + s, run="x") for s in range(3)]
    msgs += [schema.Heartbeat(rank=1, step=5, phase="data", phase_s=s, t=T0 + 1 + s, seq=10 + s, run="x") for s in range(3)]
    msgs.append(schema.Step(rank=0, step=6, loss=1.0, samples=8, step_s=3.1, t=T0 + 9, seq=20, run="x"))
    log.write_bytes(schema.encode_json_lines(msgs))
    src = ReplaySource(str(log))
    src.seek(3.0)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        for rank, said in ((0, "now in its DataLoader"), (1, "now between steps, in its own code")):
            app.screen.query_one(RankGrid).select(rank)
            await pilot.press("enter")
            await until(pilot, lambda: "#title" in [f"#{w.id}" for w in app.screen.query(Static)])
            title = " ".join(str(app.screen.query_one("#title", Static).render()).split())
            assert said in title, title
            await pilot.press("escape")
            await pilot.pause()
