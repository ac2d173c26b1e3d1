"""What the alerts and the line under the grid say of a hang and of a silent rank, in words a
person reads one way only (a review in tmux: "rank 0 waiting for rank 1 (stalled in backward)"
read as rank 1 stalled in backward; "silent since" gave when the hub noticed)."""

from __future__ import annotations

import pytest
from tui_helpers import replay_app, widget_text

from pardash.telemetry import schema
from pardash.tui.widgets.alert_list import AlertList
from pardash.tui.widgets.rank_grid import RankGrid
from pardash.tui.widgets.selected_rank import SelectedRank

SIZE = (140, 40)
T = 1.7e9


def _hang_log(path, *, silent: bool) -> None:
    """2 DDP ranks, as `--inject-stall 1@200` records them: rank 1 stops in its data loader
    after step 199 (``silent``: frozen, SIGSTOPped: no heartbeat either), rank 0 in backward's
    all-reduce waiting for it."""
    msgs: list = [schema.Hello(run="h", rank=r, world_size=2, strategy="ddp", seq=0, t=T) for r in range(2)]
    msgs += [
        schema.Step(run="h", rank=r, step=s, seq=s, loss=1.0, samples=8, step_s=0.02, self_s=0.002, comm_s=0.01, t=T + s * 0.02)
        for s in range(1, 200)
        for r in range(2)
    ]  # fmt: skip
    msgs.append(schema.Verdict(run="h", rank=0, seq=-1, verdict="stalled", cause="backward", step=199,
                               message="rank 0 stalled in backward after step 199 (5 s without progress)", t=T + 9))
    if silent:
        msgs.append(schema.Verdict(run="h", rank=1, seq=-1, verdict="silent", step=199,
                                   message="rank 1 silent for 3 s (no heartbeat)", t=T + 7))
    else:
        msgs.append(schema.Verdict(run="h", rank=1, seq=-1, verdict="stalled", cause="data", step=199,
                                   message="rank 1 stalled in data after step 199 (5 s without progress)", t=T + 9))
    msgs.sort(key=lambda m: m.t)
    path.write_bytes(schema.encode_json_lines(msgs))


@pytest.mark.parametrize("silent", [False, True])
async def test_a_rank_waiting_in_a_hang_says_its_own_phase_apart_from_whom_it_waits_for(tmp_path, silent):
    # "◇ rank 0 waiting for rank 1 (stalled in backward after step 199)" beside "◆ rank 1
    # stalled in data": a person read rank 1 as stalled in backward.
    log = tmp_path / "hang.jsonl"
    _hang_log(log, silent=silent)
    app = replay_app(str(log))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        texts = {a.rank: a.text for a in app.screen.query_one(AlertList).alerts}
        assert texts[0] == "rank 0 stalled in backward after step 199, waiting for rank 1", texts
        assert "(stalled" not in texts[0]
        if not silent:
            assert texts[1] == "rank 1 stalled in data after step 199, likely the cause: 1 other waits for it", texts
        app.screen.query_one(RankGrid).select(0)
        await pilot.pause()
        line = widget_text(app.screen.query_one(SelectedRank))
        assert line.startswith("rank 0 · stalled in backward, waiting for rank 1 · self "), line


async def test_a_silent_rank_is_said_silent_since_its_last_word_not_since_the_hub_noticed(tmp_path):
    # A SIGSTOPped rank: its last heartbeat at 00:08, the hub's verdict ("silent for 3 s") at
    # 00:11; the alert read "rank 1 silent since 00:11 (no heartbeat)".
    msgs: list = [schema.Hello(run="s", rank=r, world_size=2, strategy="ddp", seq=0, t=T) for r in range(2)]
    msgs += [
        schema.Step(run="s", rank=r, step=s, seq=s, loss=1.0, samples=8, step_s=0.5, self_s=0.1, t=T + s * 0.5)
        for s in range(1, 13)
        for r in range(2)
    ]  # fmt: skip
    msgs.append(schema.Heartbeat(run="s", rank=1, seq=13, step=12, phase="forward", t=T + 8.4))
    msgs += [schema.Heartbeat(run="s", rank=0, seq=13 + i, step=12, phase="backward", t=T + 8 + i) for i in range(5)]
    msgs.append(schema.Verdict(run="s", rank=1, seq=-1, verdict="silent", step=12, message="rank 1 silent for 3 s (no heartbeat)",
                               t=T + 11.5))
    msgs.sort(key=lambda m: m.t)
    log = tmp_path / "silent.jsonl"
    log.write_bytes(schema.encode_json_lines(msgs))
    app = replay_app(str(log))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        texts = [a.text for a in app.screen.query_one(AlertList).alerts if a.rank == 1]
        assert texts == ["rank 1 silent since 00:08 (no heartbeat)"], texts


@pytest.mark.parametrize("cost_s, said", [
    (0.0312, "rank 1 is a straggler (compute): the others wait 31 ms a step for it"),
    (0.0002, "rank 1 is a straggler (compute): the others no longer wait for it (cleared after a few calm steps)"),
])  # fmt: skip
def test_a_straggler_no_longer_behind_is_not_said_to_cost_0_ms(cost_s, said):
    # "the others wait 0 ms a step for it" stood beside a grid where the flagged rank was the
    # fastest: behind no more, its verdict not cleared yet.
    from pardash.telemetry.state import RunState
    from pardash.tui.alerts import rank_alerts

    st = RunState()
    st.apply(schema.Hello(rank=1, world_size=2, t=1.0), 0.0)
    st.apply(schema.Step(rank=1, step=30, seq=1, step_s=0.05, t=2.0), 0.0)
    st.apply(schema.Verdict(rank=1, verdict="straggler", cause="compute", cost_s=0.045, step=29,
                            message="rank 1 is a straggler (compute): the others wait 45 ms a step for it"), 0.0)  # fmt: skip
    (alert,) = rank_alerts(st.ranks[1], cost_s=cost_s)
    assert alert.text == said
