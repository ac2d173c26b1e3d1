"""`pardash ps` counts a hang's ranks as the TUI draws them: the likely cause stalled, the ranks
that wait for it waiting (it said "2 stalled" of a hang the TUI showed as 1 stalled, 1 waiting)."""

from pardash.cli import _ps_progress
from pardash.telemetry import schema
from pardash.telemetry.hub import _progress
from pardash.telemetry.printer import states_text
from pardash.telemetry.state import RunState


def _messages(world: int, phases: dict[int, str]) -> list[schema.Message]:
    """A DDP job of ``world`` ranks, each stalled after step 20 in its phase of ``phases``."""
    msgs: list[schema.Message] = []
    for r in range(world):
        msgs.append(schema.Hello(run="x", rank=r, seq=0, world_size=world, strategy="ddp", t=1.0))
        msgs.append(schema.Step(run="x", rank=r, seq=1, step=20, step_s=0.1, samples=4, t=2.0))
    for r, phase in phases.items():
        msgs.append(schema.Verdict(run="x", rank=r, seq=-1, verdict="stalled", cause=phase, step=20, message=f"rank {r} stalled", t=8.0))
    return msgs


def _hung(world: int, phases: dict[int, str]) -> RunState:
    st = RunState()
    for m in _messages(world, phases):
        st.apply(m, m.t)
    return st


def test_a_hang_is_its_cause_stalled_and_the_others_waiting():
    # Rank 1 stalled in its data loading, ranks 0, 2, 3 in the all-reduce that waits for it.
    progress = _progress(_hung(4, {0: "comm", 1: "data", 2: "comm", 3: "comm"}))
    assert progress["ranks"] == {"stalled": 4} and progress["waiting"] == 3
    assert _ps_progress(progress, launched=True)[2] == "1 stalled, 3 waiting"
    # The headless progress lines say it so too (they said "4 stalled | likely waiting for rank 1").
    assert states_text(_hung(4, {0: "comm", 1: "data", 2: "comm", 3: "comm"})) == "1 stalled, 3 waiting"


def test_no_cause_told_apart_or_no_hang_is_stalled_as_before():
    # Every rank stalled in the same collective: nothing tells a cause, none is "waiting".
    progress = _progress(_hung(2, {0: "comm", 1: "comm"}))
    assert progress["waiting"] == 0 and _ps_progress(progress, launched=True)[2] == "2 stalled"
    assert states_text(_hung(2, {0: "comm", 1: "comm"})) == "2 stalled"
    # A rank stalled while another trains on: no hang, nobody waits.
    progress = _progress(_hung(2, {1: "data"}))
    assert progress["waiting"] == 0 and _ps_progress(progress, launched=True)[2] == "1 stalled"
    # A hub of an older pardash says no "waiting"; one that says more than it counts is held to its count.
    assert _ps_progress({"step": 3, "ranks": {"stalled": 2}}, launched=True)[2] == "2 stalled"
    assert _ps_progress({"step": 3, "ranks": {"stalled": 2}, "waiting": 5}, launched=True)[2] == "2 waiting"
    assert _ps_progress({"step": 3, "ranks": {"stalled": 1, "silent": 1}, "waiting": 1}, launched=True)[2] == "1 silent, 1 waiting"


def test_prometheus_names_the_rank_a_hang_waits_for_and_when_a_rank_was_last_heard():
    # "pardash_ranks{state="stalled"} 1024" named no rank to look at, and a job killed outright
    # left its textfile saying "running" with nothing to tell it old (review 325).
    from pardash.telemetry.hubcore import HubCore
    from pardash.telemetry.prometheus import HubCollector

    core = HubCore(run_id="x", world_size=4)
    for m in _messages(4, {0: "comm", 1: "data", 2: "comm", 3: "comm"}):
        core.verdict(m) if isinstance(m, schema.Verdict) else core.ingest(m, 1.0)  # (the hub's own verdicts)
    fams = {f.name: f for f in HubCollector(core).collect()}
    assert [(s.labels["rank"], s.value) for s in fams["pardash_hang_cause"].samples] == [("1", 1.0)]
    assert fams["pardash_last_heard_timestamp_seconds"].samples[0].value == 2.0  # (the ranks' last word, their clock: the verdicts are the hub's)
    running = HubCore(run_id="x", world_size=2)
    for m in _messages(2, {}):
        running.ingest(m, 1.0)
    fams = {f.name: f for f in HubCollector(running).collect()}
    assert fams["pardash_hang_cause"].samples == []
