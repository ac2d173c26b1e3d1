"""Prometheus says a straggler slow in its own work between steps as such (cause="own_work"),
as the TUI, the launch's last line and the report do, and serves each rank's DataLoader time."""

from pardash.telemetry import schema
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.prometheus import STRAGGLER_CAUSES, HubCollector
from pardash.telemetry.stragglers import OWN_WORK, data_words


def _core() -> HubCore:
    core = HubCore(run_id="r", world_size=2)
    for r in (0, 1):
        core.ingest(schema.Hello(run="r", rank=r, world_size=2, t=1.0e9), 1.0)
        core.ingest(schema.Step(run="r", rank=r, seq=1, step=1, t=1.0e9 + 1, step_s=0.05, data_s=0.03 if r else 0.001,
                                loader_s=0.0004 if r else None), 1.0)  # fmt: skip
    return core


def _fams(core: HubCore) -> dict:
    return {f.name: f for f in HubCollector(core, per_rank=True).collect()}


def _costs(fams: dict) -> dict:
    return {(s.labels["rank"], s.labels["cause"]): s.value for s in fams["pardash_straggler_cost_seconds"].samples}


def test_a_straggler_in_its_own_work_between_steps_is_labelled_own_work():
    core = _core()
    assert "own_work" in STRAGGLER_CAUSES  # (its series from the start, as every cause's)
    # The hub's verdict as stragglers.py words it: a data straggler whose DataLoader was not it.
    words = data_words(0.029, 0.0003)
    assert words == OWN_WORK
    core.verdict(schema.Verdict(rank=1, verdict="straggler", cause="data", cost_s=0.029, message=f"rank 1 is slow in {words} (+29 ms a step)"))
    fams = _fams(core)
    assert _costs(fams) == {("1", "own_work"): 0.029}
    verdicts = {s.labels["cause"]: s.value for s in fams["pardash_straggler_verdicts"].samples if s.name.endswith("_total")}
    assert verdicts["own_work"] == 1 and verdicts["data"] == 0
    # Its DataLoader's time, the part of data_s in it: the rest is the script's own work.
    fams = _fams(core)
    assert {s.labels["rank"]: s.value for s in fams["pardash_rank_loader_seconds"].samples} == {"1": 0.0004}
    assert {s.labels["rank"]: s.value for s in fams["pardash_rank_phase_seconds"].samples if s.labels["phase"] == "data"} == {"0": 0.001, "1": 0.03}


def test_a_data_loading_straggler_stays_data():
    core = _core()
    words = data_words(0.029, 0.028)
    assert words != OWN_WORK
    core.verdict(schema.Verdict(rank=1, verdict="straggler", cause="data", cost_s=0.029, message=f"rank 1 is slow in {words} (+29 ms a step)"))
    core.verdict(schema.Verdict(rank=0, verdict="straggler", cause="compute", cost_s=0.01, message="rank 0 is slow in compute"))
    fams = _fams(core)
    assert _costs(fams) == {("1", "data"): 0.029, ("0", "compute"): 0.01}
    verdicts = {s.labels["cause"]: s.value for s in fams["pardash_straggler_verdicts"].samples if s.name.endswith("_total")}
    assert verdicts == {"data": 1, "own_work": 0, "compute": 1, "forward": 0, "backward": 0, "optimizer": 0, "gpu": 0, "host": 0}
