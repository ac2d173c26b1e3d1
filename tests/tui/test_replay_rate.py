"""A replay opened at its end (``--start end``) says the samples/s one played to its end says
(helper 235): the header's rate was the median of the viewer's last 9 updates, one a redraw,
and a replay opened at its end had made one (2,103 samples/s where one played there at 4x said
1,415, at 8x 1,543)."""

from __future__ import annotations

import pytest
from tui_helpers import DATA

from pardash.telemetry.client import ReplaySource
from pardash.tui.model import RowBuilder, run_totals


@pytest.mark.parametrize("name", ["straggler8.jsonl", "run4.jsonl", "killed2.jsonl"])
@pytest.mark.parametrize("redraw_s", [0.1, 0.35, 1.6])
def test_a_replay_opened_at_its_end_says_the_rate_one_played_there_says(name, redraw_s):
    played = ReplaySource(str(DATA / name))
    seen = RowBuilder()
    at = 0.0
    while at < played.duration_s:  # played on, the screen redrawn every redraw_s of the run
        at = min(at + redraw_s, played.duration_s)
        played.seek(at)
        seen.update(played.state)
    jumped = ReplaySource(str(DATA / name), start_s=float("inf"))
    once = RowBuilder().update(jumped.state)
    assert once.totals.samples_per_s is not None
    assert seen.totals.samples_per_s == pytest.approx(once.totals.samples_per_s, rel=1e-9)
    assert once.totals == run_totals(jumped.state)  # (the header's when it has no builder at hand)


def test_at_more_ranks_than_the_spread_starts_each_ranks_rate_is_worked_out_within_its_turns():
    # 1024 ranks' rates at every frame took the model's update from 0.6 ms to 4.5 ms: above
    # RATE_SPREAD_FROM ranks a share of them is worked out at each update, each rank's within
    # RATE_SPREAD updates, so the header's rate catches up with the ranks' within those.
    from pardash.telemetry import schema
    from pardash.telemetry.state import RunState
    from pardash.tui.model import RATE_SPREAD, RATE_SPREAD_FROM

    ranks = RATE_SPREAD_FROM + 44
    state = RunState(run_id="r")
    for rank in range(ranks):
        state.apply(schema.Hello(run="r", rank=rank, world_size=ranks, t=1.0), 1.0)
    kept = RowBuilder()
    t = 2.0
    for k in range(1, 41):
        pace = 0.1 if k <= 20 else 0.2  # (the run slows down to half its rate)
        t += pace
        frame = [schema.Step(run="r", rank=rank, step=k, seq=k, samples=4, samples_total=4 * k, step_s=pace, t=t)
                 for rank in range(ranks)]  # fmt: skip
        for s in frame:
            state.apply(s, t)
        state.commit_history(frame)
        kept.update(state)
    fresh = run_totals(state).samples_per_s
    assert fresh == pytest.approx(ranks * 4 / 0.2)
    for _ in range(RATE_SPREAD):  # (no new frame: the ranks left out catch up, a share an update)
        kept.update(state)
    assert kept.totals.samples_per_s == pytest.approx(fresh, rel=1e-12)
