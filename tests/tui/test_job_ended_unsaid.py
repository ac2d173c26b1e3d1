"""The launch's viewer learns that its own job has ended (torchrun exited: the launch's
``job_over``) where the ranks' messages never say so, and says it (review 258).

Node 0's TUI, node 1's processes all killed: torchrun on node 0 exited 1, rank 0 "exited 1",
rank 1 silent for good (killed with its node, no launcher left there to note its end). The TUI
showed "○ 1 silent × 1 exited" for as long as it stayed, nothing said the job was over, and q
offered Stop and Detach as for a live job. And node 0 with CURVE keys, node 1 --insecure (its
ranks refused by the hub): "✓ every rank finished" was said of one row of a job of 2 ranks.

A real hub in a thread, real reporters and the real app, as tests/tui/test_live.py has them.
"""

from __future__ import annotations

import pytest
from helpers import identity, serving
from tui_helpers import until

from pardash.telemetry.analysis import Detector, LivenessConfig
from pardash.telemetry.client import HubClient
from pardash.telemetry.hub import Hub
from pardash.telemetry.reporter import Reporter
from pardash.telemetry import schema
from pardash.telemetry.state import EXITED, FINISHED, SILENT, RunState
from pardash.tui.alerts import run_alerts
from pardash.tui.app import make_app
from pardash.tui.screens.quit import QuitScreen
from pardash.tui.widgets.alert_list import AlertList

RUN = "tui-ended"
SIZE = (120, 40)


@pytest.fixture
def live_hub(tmp_path):
    """A hub serving in a thread; a rank is silent 1 s after its last word (this test's rank 1
    says nothing more once killed), never stalled (no test here is about stalls)."""
    hub = Hub(run_id=RUN, log_path=str(tmp_path / "telemetry.jsonl"))
    hub.core.detector = Detector(LivenessConfig(stall_min_s=600.0, silent_s=1.0))
    with serving(hub):
        yield hub


def _reporter(hub: Hub, rank: int, world: int = 2) -> Reporter:
    rep = Reporter(hub.ingest_endpoint, run=RUN, identity=identity(rank, world, node=rank), heartbeat_s=0.2)
    rep.hello(strategy="ddp", backend="gloo", device="cpu", params_count=1000, params_bytes=4000)
    return rep


def _steps(rep: Reporter, steps: range) -> None:
    for step in steps:
        rep.step(step=step, loss=1.0, samples=8, step_s=0.05, self_s=0.02)
    rep.flush()


def _statuses(app) -> dict[int, str]:
    return {q: r.status for q, r in app.source.state.ranks.items()}


def _alerts(app) -> dict[int, str]:
    return {a.rank: a.text for a in app.screen.query_one(AlertList).alerts}


async def test_a_job_whose_torchrun_ended_with_a_rank_silent_is_said_over_and_q_leaves(live_hub):
    ended = [False]
    chosen: list[str] = []
    r0, r1 = _reporter(live_hub, 0), _reporter(live_hub, 1)
    try:
        _steps(r0, range(1, 6))
        _steps(r1, range(1, 6))
        r1.close(linger_ms=1000)  # node 1 killed: not a word more from rank 1, its end unsaid
        r0.event("error", "RuntimeError: Connection reset by peer", step=5)
        r0.event("exit", code=1, step=6)
        app = make_app(HubClient(live_hub.updates_endpoint, live_hub.snapshot_endpoint), launched=True,
                       job_over=lambda: ended[0], on_exit_choice=chosen.append)  # fmt: skip
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: _statuses(app) == {0: EXITED, 1: SILENT})
            # torchrun may still restart them (--max-restarts): the launch has not said it ended
            await pilot.press("q")
            await until(pilot, lambda: isinstance(app.screen, QuitScreen))
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, QuitScreen))
            assert "ended" not in _alerts(app)[1]
            ended[0] = True  # torchrun exited on this node; the hub's frames go on as before
            await until(pilot, lambda: "the job has ended" in _alerts(app).get(1, ""))
            assert _alerts(app)[1].startswith("rank 1 silent since ")
            assert _alerts(app)[1].endswith("(no heartbeat); the job has ended (torchrun exited), how it ended is not known")
            assert "ended" not in _alerts(app)[0]  # (rank 0 said its end)
            await pilot.press("q")  # nothing left to stop or leave running: q just leaves
            await pilot.pause()
        assert app.return_value == "over" and chosen == ["over"]
    finally:
        r0.close(linger_ms=0)
        r1.close(linger_ms=0)


async def test_a_rank_never_heard_from_is_said_and_every_rank_finished_is_not(live_hub):
    # Node 1's ranks were refused (no key): rank 0 alone said hello, of a job of 2 ranks.
    ended = [False]
    r0 = _reporter(live_hub, 0)
    try:
        _steps(r0, range(1, 6))
        r0.event("exit", code=0, step=5)
        app = make_app(HubClient(live_hub.updates_endpoint, live_hub.snapshot_endpoint), launched=True, job_over=lambda: ended[0])
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: _statuses(app) == {0: FINISHED} and bool(_alerts(app)))
            panel = app.screen.query_one(AlertList)
            assert [(a.kind, a.rank, a.text) for a in panel.alerts] == [
                ("silent", 1, "rank 1 never heard from: no word of it reached this hub (1 of the job's 2 ranks)")
            ]
            assert "every rank finished" not in str(panel.render())
            ended[0] = True  # node 0's torchrun ended (with 0): q leaves, no Stop or Detach
            await until(pilot, lambda: app.source.state.job_ended)
            await pilot.press("q")
            await pilot.pause()
        assert app.return_value == "over"
    finally:
        r0.close(linger_ms=0)


def _state(world: int, heard: range) -> RunState:
    st = RunState(run_id=RUN)
    for q in heard:
        st.apply(schema.Hello(rank=q, world_size=world, pid=100 + q, seq=0, t=1.0), 0.0)
        st.apply(schema.Step(rank=q, seq=1, step=1, step_s=0.1, t=2.0), 0.0)
    return st


def test_a_rank_heard_running_to_the_jobs_end_says_it_never_said_its_end():
    st = _state(2, range(2))
    st.apply(schema.Event(rank=0, seq=-1, name="exit", code=1, message="torchrun: rank 0 exit code 1", t=3.0), 0.0)
    assert [a.text for a in run_alerts(st) if a.rank == 1] == []  # (running, as far as the hub knows)
    st.job_ended = True
    assert [(a.kind, a.text) for a in run_alerts(st) if a.rank == 1] == [
        ("silent", "rank 1 said no end of its own; the job has ended (torchrun exited), how it ended is not known")
    ]


def test_many_ranks_never_heard_from_are_one_alert():
    st = _state(1024, range(4))
    for q in range(4):
        st.apply(schema.Event(rank=q, seq=2, name="exit", code=0, step=1, t=3.0), 0.0)
    (alert,) = run_alerts(st)
    assert alert.text == "ranks 4-1023 never heard from: no word of them reached this hub (1020 of the job's 1024 ranks)"
    st = _state(4, range(3))
    assert run_alerts(st) == []  # rank 3 may yet come: the others still run
