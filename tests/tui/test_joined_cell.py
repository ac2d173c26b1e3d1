"""A rank out of inputs under DDP's Join (review 335's open item): the header said "◌ 1 joined"
while the grid's cell and `pardash ps`'s JOB column called it running, its step standing still
for the rest of the job. The records are shaped as the zero-code hooks send them (a ``join``
event, then heartbeats of phase ``join`` at the step it ran out at, see pardash.trainer.joins)."""

from __future__ import annotations

import msgspec
from tui_helpers import grid_text, widget_text

from pardash.telemetry import schema
from pardash.telemetry import state as st
from pardash.tui.model import RowBuilder

T = 1.7e9
JOINED_AT = 50
"""Rank 0 runs out of inputs after its step 50; rank 1 steps on to 100."""


def _joined_run() -> list[schema.Message]:
    msgs: list[schema.Message] = [
        schema.Hello(run="j", rank=r, world_size=2, strategy="ddp", seq=0, t=T, config={"steps": 100}) for r in range(2)
    ]
    seq = 1
    for s in range(1, 101):
        for r in range(2):
            if r == 0 and s > JOINED_AT:
                continue
            msgs.append(schema.Step(run="j", rank=r, step=s, seq=seq, loss=1.0, samples=8, step_s=0.05, self_s=0.03,
                                    comm_s=0.01, t=T + s * 0.05))  # fmt: skip
        seq += 1
        if s == JOINED_AT:
            msgs.append(schema.Event(run="j", rank=0, seq=seq, name="join", step=JOINED_AT, t=T + s * 0.05,
                                     message=f"ran out of inputs at step {JOINED_AT} and joined: it shadows the others' collectives until they finish"))  # fmt: skip
        if s > JOINED_AT and s % 10 == 0:
            msgs.append(schema.Heartbeat(run="j", rank=0, seq=seq, step=JOINED_AT, phase=schema.JOIN_PHASE, t=T + s * 0.05))
    return [msgspec.structs.replace(m, hseq=i + 1) for i, m in enumerate(msgs)]


def _state_at(msgs: list[schema.Message], t: float) -> st.RunState:
    state = st.RunState()
    for m in msgs:
        if m.t > t:
            break
        state.apply(m, m.t)
    return state


def test_the_rows_say_which_rank_joined_and_only_while_it_has():
    msgs = _joined_run()
    before = RowBuilder().update(_state_at(msgs, T + 2.0))  # (step 40: none joined)
    assert [row.joined for row in before.rows()] == [False, False]
    during = RowBuilder().update(_state_at(msgs, T + 4.0))
    assert [(row.status, row.joined) for row in during.rows()] == [(st.RUNNING, True), (st.RUNNING, False)]
    # Ended, it is no longer joined (finished, as its peer)
    done = _state_at(msgs, T + 10)
    for r in range(2):
        done.apply(schema.Event(run="j", rank=r, seq=999, name="exit", code=0, t=T + 6), T + 6)
    assert [row.joined for row in RowBuilder().update(done).rows()] == [False, False]


def test_ps_says_the_ranks_joined_beside_running():
    from pardash.cli import _ps_progress
    from pardash.telemetry.hub import _progress

    progress = _progress(_state_at(_joined_run(), T + 4.0))
    assert progress["joined"] == 1
    assert _ps_progress(progress, launched=True)[2] == "running, 1 joined"
    assert _ps_progress({**progress, "joined": 0}, launched=True)[2] == ""  # (plain "running")
    # A graver state says itself (a hang of the rank still stepping)
    assert _ps_progress({**progress, "ranks": {"running": 1, "stalled": 1}}, launched=True)[2] == "1 stalled"


async def test_the_grid_cell_says_joined_as_the_header_does(tmp_path):
    from pardash.telemetry.client import ReplaySource
    from pardash.tui.app import make_app
    from pardash.tui.widgets.run_header import RunHeader

    log = tmp_path / "joined.jsonl"
    log.write_bytes(schema.encode_json_lines(_joined_run()))
    src = ReplaySource(str(log))
    src.seek(4.0)  # (step 80: rank 0 joined at 50)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        header = widget_text(app.screen.query_one(RunHeader))
        assert "◌ 1 joined" in header, header
        cells = [line.split()[:3] for line in grid_text(app).splitlines() if line.strip()[:1].isdigit()]
        assert cells == [["0", "joined", str(JOINED_AT)], ["1", "running", "80"]], cells
