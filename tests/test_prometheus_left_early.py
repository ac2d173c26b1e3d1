"""Prometheus counts a rank that left the job early as left_early, as the TUI and the report say
it (it read finished, beside the failure it caused)."""

from test_left_early_status import _finished, _left

from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.prometheus import RANK_STATES, HubCollector


def _states(msgs) -> tuple[dict, dict]:
    core = HubCore(run_id="left", world_size=2)
    for m in msgs:
        core.ingest(m, 1.0)
    fams = {f.name: f for f in HubCollector(core, per_rank=True).collect()}
    counts = {s.labels["state"]: s.value for s in fams["pardash_ranks"].samples if s.value}
    per_rank = {s.labels["rank"]: s.labels["state"] for s in fams["pardash_rank_state"].samples if s.value}
    return counts, per_rank


def test_the_rank_that_left_is_left_early_and_its_peer_exited():
    assert "left_early" in RANK_STATES  # (its series from the start)
    assert _states(_left()) == ({"exited": 1, "left_early": 1}, {"0": "exited", "1": "left_early"})


def test_ranks_that_finished_together_are_finished():
    assert _states(_finished()) == ({"finished": 2}, {"0": "finished", "1": "finished"})
