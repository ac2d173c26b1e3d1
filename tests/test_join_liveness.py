"""DDP's Join as the hub reads it (review 335): a rank that ran out of inputs under
``torch.distributed.algorithms.join.Join`` (its heartbeat's phase "join", see
pardash.trainer.joins) waits for the others by design. It is never called stalled nor named a
hang's cause; the job's step, time left and rate follow the ranks still stepping."""

from __future__ import annotations

import pytest

from pardash.telemetry import schema
from pardash.telemetry.analysis import Detector, hang_causes, stuck_ranks, whole_hang
from pardash.telemetry.printer import as_it_hung, event_line, hang_text, progress_step, states_text, _progress_text
from pardash.telemetry.state import RunState
from pardash.telemetry.summary import samples_per_s, samples_per_s_recent, straggled_text, time_left_s


def _two_ranks(step_s: float = 0.01) -> RunState:
    st = RunState()
    for r in range(2):
        st.apply(schema.Hello(rank=r, world_size=2, strategy="ddp", config={"steps": 1600}), 0.0)
    return st


def _steps(st: RunState, rank: int, steps: range, t0: float, step_s: float = 0.01) -> None:
    for k, step in enumerate(steps):
        t = t0 + k * step_s
        st.apply_frame([schema.Step(run="r", rank=rank, step=step, samples=128, samples_total=128 * step, step_s=step_s, t=t)], t)


def _judged(st: RunState, det: Detector, now: float) -> list[schema.Verdict]:
    out = det.update(st, now)
    for v in out:
        st.apply(v, now)
    return out


def _joined_at(st: RunState, rank: int, step: int, t: float) -> None:
    st.apply(schema.Event(rank=rank, name="join", step=step, message=f"ran out of inputs at step {step} and joined: ..."), t)
    st.apply(schema.Heartbeat(rank=rank, step=step, phase=schema.JOIN_PHASE), t)


def test_a_joined_rank_is_not_stalled_while_the_others_step_on():
    st, det = _two_ranks(), Detector()
    _steps(st, 0, range(1, 401), 0.0)
    _steps(st, 1, range(1, 401), 0.0)
    _joined_at(st, 0, 400, 4.0)
    said = det.update(st, 4.0)
    for k in range(1, 41):  # rank 1 steps on for 20 s; rank 0 beats, joined
        now = 4.0 + 0.5 * k
        st.apply_frame([schema.Step(run="r", rank=1, step=400 + 25 * k, samples=128, step_s=0.02, t=now),
                        schema.Heartbeat(rank=0, step=400, phase=schema.JOIN_PHASE)], now)
        said += _judged(st, det, now)
    assert [v for v in said if v.verdict == "stalled"] == []
    assert st.ranks[0].stalled is None
    assert states_text(st) == "1 joined, 1 running"
    # The job's progress is the rank still stepping's, not the joined rank's last step
    assert progress_step(st) == 1400
    left = time_left_s(st, 1600)
    # (rank 1's 200 steps left at its pace, not rank 0's 1,200 at its own: 12 s)
    assert left is not None and 2.0 < left < 6.0
    assert samples_per_s(st) == pytest.approx(128 / 0.02, rel=0.05)  # (rank 1's alone)
    assert stuck_ranks(st) == []


def test_a_rank_hung_after_the_other_joined_is_the_cause_not_the_joined_rank():
    # rank 0 ran out at step 400 and joined; rank 1 hangs in its data at step 600: it read
    # "rank 0 stalled in sync after step 400, likely the cause: 1 other waits for it"
    st, det = _two_ranks(), Detector()
    _steps(st, 0, range(1, 401), 0.0)
    _steps(st, 1, range(1, 601), 0.0)
    _joined_at(st, 0, 400, 4.0)
    st.apply(schema.Heartbeat(rank=1, step=600, phase="data"), 6.0)
    said = det.update(st, 6.0)
    for k in range(1, 21):
        now = 6.0 + 0.5 * k
        st.apply(schema.Heartbeat(rank=0, step=400, phase=schema.JOIN_PHASE), now)
        st.apply(schema.Heartbeat(rank=1, step=600, phase="data"), now)
        said += _judged(st, det, now)
    stalls = [(v.rank, v.cause, v.step) for v in said if v.verdict == "stalled"]
    assert stalls == [(1, "data", 600)]
    assert hang_causes(stuck_ranks(st)) == {1}
    assert hang_text(st) == "likely waiting for rank 1"
    assert states_text(st) == "1 joined, 1 stalled"
    # Stopped as it hung: the hang after rank 1's step, waiting for it
    for r in range(2):
        st.apply(schema.Event(rank=r, name="exit", code=-15, seq=-1), 20.0)
    assert hang_causes(whole_hang(st)) == {1}
    assert as_it_hung(st) == " as it hung after step 600, likely waiting for rank 1"


def test_joined_ranks_are_never_a_hangs_cause():
    joined = (0, "joined", 400, schema.JOIN_PHASE)
    assert hang_causes([joined, (1, "stalled", 600, "data")]) == {1}
    assert hang_causes([joined, (1, "silent", 600, "forward")]) == {1}
    # Among the ranks still stepping, the rules as before: the rank behind the others
    assert hang_causes([joined, (1, "stalled", 600, "sync"), (2, "stalled", 599, "data")]) == {2}
    assert hang_causes([joined, (1, "stalled", 600, "sync"), (2, "stalled", 600, "sync")]) == set()


def test_the_rate_at_the_end_counts_the_ranks_stepping_at_the_end():
    # rank 0 stopped stepping (joined) 30 s before the end: its rate was added to rank 1's
    # (28,694 samples/s where the report said 15,556)
    st = _two_ranks()
    _steps(st, 0, range(1, 151), 1000.0, step_s=0.01)
    _steps(st, 1, range(1, 3001), 1000.0, step_s=0.01)
    for r in range(2):
        st.apply(schema.Event(rank=r, name="exit", code=0), 1031.0)
    assert samples_per_s_recent(st) == pytest.approx(128 / 0.01, rel=0.02)


def test_the_last_line_says_the_joined_rank_ran_out_of_inputs():
    st = _two_ranks()
    _steps(st, 0, range(1, 401), 0.0)
    _steps(st, 1, range(1, 801), 0.0)
    _joined_at(st, 0, 400, 4.0)
    for r in range(2):
        st.apply(schema.Event(rank=r, name="exit", code=0), 9.0)
    assert _progress_text(st) == "step 800 (rank 0 ran out of inputs at step 400 and joined)"
    assert progress_step(st) == 800
    ev = schema.Event(rank=0, name="join", step=400, message="ran out of inputs at step 400 and joined: it shadows ...")
    assert event_line(ev) == "[join] rank 0 ran out of inputs at step 400 and joined: it shadows ..."


def test_a_later_straggler_spell_to_the_end_is_said_too():
    st = _two_ranks()
    found = schema.Verdict(rank=1, verdict="straggler", cause="compute", step=29, message="m")
    st.apply(found, 1.0)
    st.apply(schema.Verdict(rank=1, verdict="straggler_cleared", step=149, message="m"), 2.0)
    st.apply(schema.Verdict(rank=1, verdict="straggler", cause="compute", step=170, message="m"), 3.0)
    assert straggled_text(st.ranks[1]) == (
        "rank 1 was a straggler (compute), found at step 29, no longer at step 149, and again from step 170 to the end"
    )


def _hung_after_a_join() -> RunState:
    st, det = _two_ranks(), Detector()
    _steps(st, 0, range(1, 401), 0.0)
    _steps(st, 1, range(1, 601), 0.0)
    _joined_at(st, 0, 400, 4.0)
    _judged(st, det, 6.0)
    for k in range(1, 21):
        now = 6.0 + 0.5 * k
        st.apply(schema.Heartbeat(rank=0, step=400, phase=schema.JOIN_PHASE), now)
        st.apply(schema.Heartbeat(rank=1, step=600, phase="data"), now)
        _judged(st, det, now)
    return st


def test_the_tuis_alert_names_the_hung_rank_the_cause_and_the_header_says_the_joined_rank():
    from pardash.tui.alerts import run_alerts
    from pardash.tui.widgets.run_header import summarize

    st = _hung_after_a_join()
    alerts = [a.text for a in run_alerts(st)]
    assert alerts == ["rank 1 stalled in data after step 600, likely the cause: 1 other waits for it"], alerts

    from pardash.telemetry.frames import HubStats

    class Source:  # (what summarize reads of a live hub's source)
        state, live, stats = st, True, HubStats()

    head = summarize(Source(), origin=0.0)
    assert dict(head.status_counts) == {"stalled": 1, "joined": 1}
    assert head.step == 600


def test_the_runs_step_is_the_ranks_still_stepping_as_ps_and_prometheus_say_it():
    # `pardash ps` and Prometheus' pardash_step stood at the joined rank's step 800 while rank 1
    # stepped on (RunState.step: the slowest rank's); once it has ended too, still the ranks'
    # that stepped on (its step 800 read at the end, review 339).
    st = _two_ranks()
    _steps(st, 0, range(1, 801), 0.0)
    _steps(st, 1, range(1, 801), 0.0)
    _joined_at(st, 0, 800, 8.0)
    _steps(st, 1, range(801, 1201), 8.0)
    assert st.step == 1200 and st.ranks[0].joined and not st.ranks[1].joined
    st.apply(schema.Verdict(rank=0, verdict="finished", t=13.0), 13.0)
    assert st.step == 1200 and not st.ranks[0].joined
