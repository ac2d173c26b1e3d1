"""The headless lines say the time left where the run says its total, as the TUI's header does
(they said `step 1,037/3,000` alone: someone reading a CI log or a nohup file asked first when
the run ends)."""

from __future__ import annotations

import re

from pardash.telemetry import schema
from pardash.telemetry.printer import progress_line
from pardash.telemetry.state import RunState

T = 1_800_000_000.0


def _state(total: int | None) -> RunState:
    st = RunState(run_id="eta")
    for r in (0, 1):
        st.apply(schema.Hello(run="eta", rank=r, world_size=2, seq=0, t=T, config={"steps": total} if total else {}), T)
    for s in range(1, 101):  # (100 steps in 20 s: 0.2 s a step)
        steps = [schema.Step(run="eta", rank=r, step=s, seq=s, step_s=0.2, samples=8, t=T + 0.2 * s) for r in (0, 1)]
        for m in steps:
            st.apply(m, T + 0.2 * s)
        st.commit_history(steps)
    return st


def test_a_headless_line_says_the_time_left_where_the_run_says_its_total():
    line = progress_line(_state(400), 20.0)
    assert re.search(r"\] step 100/400 \((59s|1m00s) left\) \|", line), line  # (300 steps at 0.2 s)
    assert "left" not in progress_line(_state(None), 20.0)  # (no total: the step alone)


def test_ps_says_the_time_left_its_hub_wrote():
    from pardash.cli import _ps_progress
    from pardash.telemetry.hub import _progress

    progress = _progress(_state(400))
    assert 59 <= progress["left_s"] <= 60 and progress["steps"] == 400
    step, _, _ = _ps_progress(progress, launched=True)
    assert re.fullmatch(r"100/400 \((59s|1m00s) left\)", step), step
    assert _ps_progress(_progress(_state(None)), launched=True)[0] == "100"  # (no total: the step alone)
