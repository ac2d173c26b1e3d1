"""A rank said growing in memory (the hub's ``memory_growing``, a leak) stays said: its alert was
read from the event log's ring, which lets a verdict go after 500 later events on a long run,
and a viewer that attached later never had it; the grid's "flagged only" left the rank out."""

from __future__ import annotations

from pardash.telemetry import schema
from pardash.telemetry.printer import memory_growing_were
from pardash.telemetry.state import RunState
from pardash.tui.alerts import run_alerts
from pardash.tui.model import RowBuilder

T = 1_800_000_000.0
SAID = "rank 1's memory grows 1.6 MiB a step (480.0 MiB -> 742.7 MiB over steps 52-268; the others' stays flat): tensors kept across steps?"


def _leaking(later_events: int) -> RunState:
    st = RunState()
    for r in (0, 1):
        st.apply(schema.Hello(run="r", rank=r, world_size=2, strategy="ddp", seq=0, t=T), T)
        st.apply(schema.Step(run="r", rank=r, step=268, seq=1, step_s=0.05, t=T + 10), T + 10)
    st.apply(schema.Verdict(run="r", rank=1, seq=-1, hseq=10, verdict="memory_growing", step=268, message=SAID, t=T + 10), T + 10)
    for k in range(later_events):  # (a long run's later verdicts and warnings: a flapping straggler, a script's warnings)
        st.apply(schema.Event(run="r", rank=0, seq=2 + k, hseq=11 + k, name="warning", message="a warning of the script's", step=268 + k, t=T + 11 + k), T + 11 + k)
    return st


def test_a_leak_said_long_ago_keeps_its_alert_its_flag_and_its_last_line():
    st = _leaking(600)
    assert not any(isinstance(m, schema.Verdict) for m in st.events)  # (the ring let it go)
    assert [(a.kind, a.rank, a.text) for a in run_alerts(st)] == [("memory", 1, SAID)]
    rows = RowBuilder().update(st).rows()
    assert [row.flagged for row in rows] == [False, True]
    assert memory_growing_were(st).startswith("rank 1's memory grew 1.6 MiB a step to the end")
    # A viewer that attaches now: the snapshot carries it
    late = RunState()
    for m in st.events_for_snapshot():
        late.apply(m, m.t)
    assert list(late.memory_growing) == [1]
    # Steady again: said no more
    st.apply(schema.Verdict(run="r", rank=1, seq=-1, hseq=5000, verdict="memory_steady", step=900, t=T + 700), T + 700)
    assert [a for a in run_alerts(st) if a.kind == "memory"] == [] and st.memory_growing == {}
    assert [row.flagged for row in RowBuilder().update(st).rows()] == [False, False]
