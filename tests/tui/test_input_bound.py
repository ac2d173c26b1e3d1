"""The alerts say a job is input-bound: every rank spending half of each step or more between
steps (loading data, or the script's own work), alike. Every rank's data slowing at once (shared
storage) read nowhere live but in the numbers, the straggler detector rightly naming no one
(review 328); one rank slow in its data is a straggler, not this."""

from __future__ import annotations

from pardash.telemetry import schema
from pardash.telemetry import state as st
from pardash.tui.alerts import INPUT_BOUND_POINTS, run_alerts

T = 1.7e9


def _state(data_s: dict[int, float], step_s: float = 0.05, steps: int = INPUT_BOUND_POINTS) -> st.RunState:
    state = st.RunState(run_id="r")
    ranks = sorted(data_s)
    for r in ranks:
        state.apply(schema.Hello(run="r", rank=r, world_size=len(ranks), pid=10 + r, seq=0, t=T), T)
    for n in range(1, steps + 1):
        msgs = [schema.Step(run="r", rank=r, step=n, seq=n, loss=1.0, samples=8, step_s=step_s, data_s=data_s[r],
                            self_s=data_s[r] + 0.005, t=T + n * step_s) for r in ranks]  # fmt: skip
        for m in msgs:
            state.apply(m, m.t)
        state.commit_history(msgs)
    return state


def test_a_job_every_rank_of_which_waits_for_its_data_is_said_input_bound():
    alerts = run_alerts(_state({0: 0.035, 1: 0.033, 2: 0.036, 3: 0.034}))
    assert [(a.kind, a.rank) for a in alerts] == [("input_bound", -1)]
    assert alerts[0].text.startswith("every rank spends 66% of each step between steps (loading data or the script's own work"), alerts


def test_not_a_straggler_nor_a_job_whose_steps_are_its_own_work():
    assert run_alerts(_state({0: 0.002, 1: 0.035})) == []  # (one rank slow in its data: the others wait in comm)
    # Two of three slow in their data, the third waiting for them: not "every rank" (review 332)
    assert run_alerts(_state({0: 0.002, 1: 0.035, 2: 0.035})) == []
    assert run_alerts(_state({0: 0.010, 1: 0.012})) == []  # (a fifth of each step)
    assert run_alerts(_state({0: 0.0009, 1: 0.0009}, step_s=0.0012)) == []  # (a millisecond's step: the loop's own Python)
    assert run_alerts(_state({0: 0.035, 1: 0.035}, steps=5)) == []  # (its first steps: not yet)


def test_a_rank_that_holds_the_others_up_now_and_then_is_an_alert_while_it_does():
    # Review 333: pauses that cost the job 70-80% of its time left the panel at "no alerts:
    # every rank is healthy", said only in the events.
    from pardash.tui.alerts import HELD_UP_ALERT_S

    state = _state({0: 0.002, 1: 0.002})
    said = "rank 1 held the others up 4 more times since step 61, at steps 121, 181, 241, 301 (every 60 steps), 1.50 s each, 6.00 s in all"
    state.apply(schema.Verdict(run="r", rank=1, verdict="held_up", step=301, cost_s=6.0, message=said, t=state.t_last - 5), state.t_last)
    assert [(a.kind, a.rank, a.text) for a in run_alerts(state)] == [("held_up", 1, said)]
    later = state.t_last + HELD_UP_ALERT_S + 1  # (its holds stopped: gone from the panel, kept in the events)
    state.apply(schema.Step(run="r", rank=0, step=31, seq=31, step_s=0.05, t=later), later)
    state.apply(schema.Step(run="r", rank=1, step=31, seq=31, step_s=0.05, t=later), later)
    assert run_alerts(state) == []
