"""A job stopped while a rank had joined under DDP's Join (review 339): the header took the
joined rank from its "running" count, which the launcher's "stopping" note had moved to
"stopping", and raised KeyError: an attached viewer or a replay of the job died at the stop."""

from __future__ import annotations

from tui_helpers import grid_text, widget_text

from pardash.telemetry import schema

T = 1.7e9


def _stopped_while_joined() -> list[schema.Message]:
    msgs: list[schema.Message] = [schema.Hello(rank=r, world_size=2, strategy="ddp", t=T, run="x") for r in range(2)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0, samples=8, step_s=0.1, t=T + 0.1 * s, seq=s, run="x")
             for s in range(1, 41) for r in range(2) if not (r == 0 and s > 20)]  # fmt: skip
    msgs.append(schema.Event(rank=0, name="join", step=20, message="ran out of inputs at step 20 and joined: ...", t=T + 2.0, seq=100, run="x"))
    msgs += [schema.Heartbeat(rank=0, step=20, phase=schema.JOIN_PHASE, t=T + 2.0 + k, seq=101 + k, run="x") for k in range(3)]
    msgs += [schema.Event(rank=r, name="stopping", message="by Ctrl-C at the launch", t=T + 4.2, seq=-1, run="x") for r in range(2)]
    msgs.sort(key=lambda m: m.t)
    return msgs


async def test_a_replay_of_a_job_stopped_while_a_rank_had_joined_shows_the_stop(tmp_path):
    from pardash.telemetry.client import ReplaySource
    from pardash.tui.app import make_app
    from pardash.tui.widgets.run_header import RunHeader

    log = tmp_path / "join_stop.jsonl"
    log.write_bytes(schema.encode_json_lines(_stopped_while_joined()))
    src = ReplaySource(str(log))
    src.seek(4.3)  # (past the launcher's notes: both ranks being stopped)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        assert app.is_running
        header = widget_text(app.screen.query_one(RunHeader))
        assert "◐ 2 stopping" in header, header
        cells = [line.split()[:2] for line in grid_text(app).splitlines() if line.strip()[:1].isdigit()]
        assert cells == [["0", "stopping"], ["1", "stopping"]], cells


def test_the_header_counts_a_joined_rank_being_stopped_as_stopping_beside_one_running():
    from types import SimpleNamespace

    from pardash.telemetry.frames import HubStats
    from pardash.telemetry.state import RunState
    from pardash.tui.widgets.run_header import summarize

    st = RunState()
    for m in _stopped_while_joined():
        if not (isinstance(m, schema.Event) and m.name == "stopping" and m.rank == 1):  # (rank 1 runs on)
            st.apply(m, m.t)
    head = summarize(SimpleNamespace(state=st, stats=HubStats(), live=True), origin=T)
    assert dict(head.status_counts) == {"stopping": 1, "running": 1}
    assert head.step == 40
