"""How far a run has to go: the header says the step of how many, and the time left at the
run's recent pace (review 238: a run of hours read "step 75125   samples/s 1279   elapsed
22m00s", while `pardash ps` and the progress lines knew it was of 300,000 steps)."""

from __future__ import annotations

import pytest
from tui_helpers import replay_app

from pardash.telemetry import schema
from pardash.telemetry.state import RunState
from pardash.telemetry.summary import time_left_s, total_steps
from pardash.tui.app import make_app
from pardash.tui.widgets.run_header import RunHeader, RunSummary

T0 = 1_700_000_000.0


def _run(paces: dict[int, float], steps: int, total: int | None = 1000) -> RunState:
    """Ranks stepping at ``paces`` (seconds a step) for ``steps`` steps, a history point a step."""
    st = RunState(run_id="r")
    config = {"steps": total} if total else {}
    for rank in paces:
        st.apply(schema.Hello(run="r", rank=rank, world_size=len(paces), strategy="ddp", config=config, t=T0), T0)
    for k in range(1, steps + 1):
        frame = []
        for rank, pace in paces.items():
            s = schema.Step(run="r", rank=rank, step=k, step_s=pace, samples=4, t=T0 + k * pace)
            st.apply(s, s.t)
            frame.append(s)
        st.commit_history(frame)
    return st


def test_the_time_left_is_the_slowest_ranks_steps_to_go_at_its_recent_pace():
    st = _run({0: 0.1, 1: 0.2}, steps=100)
    assert total_steps(st.hello) == 1000
    # Rank 1: 900 steps to go at 0.2 s a step (its history: steps 1-100 over 19.8 s).
    assert time_left_s(st, 1000) == pytest.approx(180.0)
    # Not known: no total, under ETA_LEAST_S of history, the total reached, every rank done.
    assert time_left_s(st, None) is None
    assert time_left_s(_run({0: 0.1}, steps=20), 1000) is None  # (1.9 s of history)
    assert time_left_s(st, 100) is None
    for r in st.ranks.values():
        r.finished = True
    assert time_left_s(st, 1000) is None


def test_a_pace_that_changed_shows_in_the_time_left_soon():
    # A slow start (150 steps of 0.12 s, a loaded host), then 0.04 s a step: the time left over
    # the whole history said 35 s of the 20 s left at step 300 (review 337: 45 s of 29.5 s).
    st = RunState(run_id="r")
    st.apply(schema.Hello(run="r", rank=0, world_size=1, strategy="ddp", config={"steps": 800}, t=T0), T0)
    t = T0
    for k in range(1, 301):
        t += 0.12 if k <= 150 else 0.04
        s = schema.Step(run="r", rank=0, step=k, step_s=0.1, samples=4, t=t)
        st.apply(s, t)
        st.commit_history([s])
    assert time_left_s(st, 800) <= 1.25 * (800 - 300) * 0.04


async def test_the_header_says_the_step_of_how_many_and_the_time_left():
    app = make_app(replay_app("run4.jsonl").source)
    running = RunSummary(run_id="r", strategy="ddp", world_size=2, step=75125, total_steps=300000, time_left_s=3725.0,
                         samples_per_s=1279.0, elapsed_s=1320, status_counts=(("running", 2),))  # fmt: skip
    async with app.run_test(size=(162, 40)) as pilot:
        header = app.screen.query_one(RunHeader)
        header.summary = running
        await pilot.pause()
        first = header._text(160).plain.splitlines()[0]
        assert "step 75125/300000   samples/s 1279   elapsed 22m00s   left 1h02m" in first, first
        # At 80 columns "left" goes on with elapsed to the next line, not out of the header.
        assert "left 1h02m" in header._text(80).plain, header._text(80).plain
