"""A job under DDP's Join after its shadowing ended, on a long job, across nodes' clocks, and as a
viewer that attached late reads it (review 339): the run's step stays the ranks' that stepped
on, the last line says which rank ran out of inputs however many events came after, the rate
at the end counts every rank stepping then whatever its clock, and a late viewer sees a
held-up alert as one attached all along does."""

from __future__ import annotations

import pytest

from pardash.telemetry import schema
from pardash.telemetry.client import HubClient
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.printer import _progress_text, progress_step
from pardash.telemetry.state import EVENTS_KEPT, RunState
from pardash.telemetry.summary import samples_per_s_recent
from pardash.tui.alerts import held_up_alerts

T = 1.765e9


def _joined_job(later_events: int = 0) -> RunState:
    """Rank 0 ran out of inputs at step 400 under Join, rank 1 stepped on to 800; then
    ``later_events`` evaluations of rank 1."""
    st = RunState()
    for r in range(2):
        st.apply(schema.Hello(rank=r, world_size=2, strategy="ddp", t=T), T)
    for k in range(1, 801):
        st.apply_frame([schema.Step(run="r", rank=r, step=k, samples=8, step_s=0.01, t=T + k * 0.01)
                        for r in range(2) if not (r == 0 and k > 400)], T + k * 0.01)  # fmt: skip
        if k == 400:
            st.apply(schema.Event(rank=0, name="join", step=400, message="ran out of inputs at step 400 and joined: ...", t=T + 4), T + 4)
            st.apply(schema.Heartbeat(rank=0, step=400, phase=schema.JOIN_PHASE, t=T + 4), T + 4)
    for i in range(later_events):
        st.apply(schema.Event(rank=1, name="eval", step=400 + i % 400, duration_s=0.1, t=T + 5 + i * 0.001), T + 5)
    return st


def test_the_runs_step_stays_the_ranks_that_stepped_on_once_join_ends():
    # (pardash ps, Prometheus' pardash_step and report.json's last_step read 800 then 400)
    st = _joined_job()
    assert st.step == 800
    st.apply(schema.Heartbeat(rank=0, step=400, phase="data", t=T + 8.1), T + 8.1)  # Join's shadowing over
    assert st.step == 800
    for r in range(2):
        st.apply(schema.Event(rank=r, name="exit", code=0, t=T + 9), T + 9)
    assert st.step == 800
    assert progress_step(st) == 800


def test_a_rank_at_its_join_step_after_a_restart_is_behind_again():
    # (a new process's inputs are its own: its old join says nothing of it)
    st = _joined_job()
    st.apply(schema.Hello(rank=0, world_size=2, strategy="ddp", pid=2, restart=1, t=T + 9), T + 9)
    st.apply_frame([schema.Step(run="r", rank=0, seq=1, step=400, samples=8, step_s=0.01, t=T + 9.1)], T + 9.1)
    assert st.ranks[0].joined_at is None
    assert st.step == 400


@pytest.mark.parametrize("later_events", [10, EVENTS_KEPT + 100])
def test_the_last_line_says_the_rank_ran_out_however_many_events_came_after(later_events):
    st = _joined_job(later_events)
    for r in range(2):
        st.apply(schema.Event(rank=r, name="exit", code=0, t=T + 9), T + 9)
    assert not any(isinstance(e, schema.Event) and e.name == "join" for e in st.events) or later_events == 10
    assert _progress_text(st) == "step 800 (rank 0 ran out of inputs at step 400 and joined)"
    assert st.ran_out() == {0}


def test_a_viewer_that_attached_after_the_join_left_the_event_log_says_it_too():
    core = HubCore(run_id="r")
    for r in range(2):
        core.ingest(schema.Hello(run="r", rank=r, world_size=2, strategy="ddp", t=T, seq=0), T)
    seq = {0: 0, 1: 0}

    def send(msg, now):
        seq[msg.rank] += 1
        core.ingest(msg, now)

    for k in range(1, 41):
        for r in range(2):
            if r == 0 and k > 20:
                continue
            send(schema.Step(run="r", rank=r, seq=seq[r] + 1, step=k, samples=8, step_s=0.01, t=T + k * 0.01), T + k * 0.01)
        if k == 20:
            send(schema.Event(run="r", rank=0, seq=seq[0] + 1, name="join", step=20, message="ran out of inputs at step 20 and joined: ...",
                              t=T + 0.2), T + 0.2)  # fmt: skip
        core.tick(T + k * 0.01)
    for i in range(2 * EVENTS_KEPT):  # rank 1's evaluations push the join out of the hub's event log
        send(schema.Event(run="r", rank=1, seq=seq[1] + 1, name="eval", step=40, duration_s=0.01, t=T + 1 + i * 0.2), T + 1 + i * 0.2)
    for r in range(2):
        send(schema.Event(run="r", rank=r, seq=seq[r] + 1, name="exit", code=0, t=T + 300), T + 300)
    core.tick(T + 300)
    assert not any(isinstance(e, schema.Event) and e.name == "join" for e in core.state.events)
    viewer = HubClient.__new__(HubClient)
    viewer.live = False
    HubClient.load_snapshot(viewer, core.snapshot())
    assert _progress_text(viewer.state) == "step 40 (rank 0 ran out of inputs at step 20 and joined)"
    assert viewer.state.step == 40


@pytest.mark.parametrize("behind_s", [0.0, 2.0, 30.0])
def test_the_rate_at_the_end_counts_a_rank_whose_clock_is_behind(behind_s):
    # rank 1's node's clock 2 s behind: it read 2,000 samples/s where both ranks did 4,000
    st = RunState()
    for r in range(2):
        st.apply(schema.Hello(rank=r, world_size=2, strategy="ddp", t=T), T)
    for k in range(1, 201):
        now = T + k * 0.05
        st.apply_frame([schema.Step(run="r", rank=r, step=k, samples=100, samples_total=100 * k, step_s=0.05,
                                    t=now - (behind_s if r == 1 else 0.0)) for r in range(2)], now)  # fmt: skip
    for r in range(2):
        st.apply(schema.Event(rank=r, name="exit", code=0, t=T + 10), T + 10)
    assert samples_per_s_recent(st) == pytest.approx(4000, rel=0.02)


def test_the_rate_at_the_end_leaves_out_the_rank_that_ran_out_whatever_the_clocks():
    # (its heartbeats to the end: the receiver heard its last step with the others' at a snapshot)
    st = _joined_job()
    for r in range(2):
        st.apply(schema.Event(rank=r, name="exit", code=0, t=T + 9), T + 9)
    assert samples_per_s_recent(st) == pytest.approx(8 / 0.01, rel=0.02)


def _hub_with_a_hold(steps_after: int) -> tuple[HubCore, float]:
    core = HubCore(run_id="r")
    for r in range(2):
        core.ingest(schema.Hello(run="r", rank=r, world_size=2, strategy="ddp", t=T, seq=0), T)
    k = 0
    for k in range(1, 301 + steps_after):  # a step a second
        for r in range(2):
            core.ingest(schema.Step(run="r", rank=r, seq=k, step=k, samples=8, step_s=0.05, t=T + k), T + k)
        core.tick(T + k)
        if k == 300:
            core.verdict(schema.Verdict(rank=1, verdict="held_up", step=299, cost_s=2.0, t=T + 300,
                                        message="rank 1 held the others up 2.0 s at step 299 (in its DataLoader)"))  # fmt: skip
    core.tick(T + k + 0.1)
    return core, T + k


@pytest.mark.parametrize("steps_after", [0, 60])
def test_a_viewer_that_attached_late_sees_the_held_up_alert(steps_after):
    core, _ = _hub_with_a_hold(steps_after)
    said = ["rank 1 held the others up 2.0 s at step 299 (in its DataLoader)"]
    assert [a.text for a in held_up_alerts(core.state)] == said
    viewer = HubClient.__new__(HubClient)
    viewer.live = False
    HubClient.load_snapshot(viewer, core.snapshot())
    assert [a.text for a in held_up_alerts(viewer.state)] == said


def test_the_held_up_alert_goes_for_a_late_viewer_as_for_the_hub():
    core, _ = _hub_with_a_hold(200)  # 200 s of steps after it: past the alert's 150 s
    assert held_up_alerts(core.state) == []
    viewer = HubClient.__new__(HubClient)
    viewer.live = False
    HubClient.load_snapshot(viewer, core.snapshot())
    assert held_up_alerts(viewer.state) == []
