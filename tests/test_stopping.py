"""A stop as it begins: the launcher says, for each rank of its node, that it is stopping it
(an event "stopping", seq -1, dated when the stop began), and the hub judges no stall or silence
of those ranks from then on. A framework's ranks may take seconds to end (Lightning's ~10 s):
a Stop of a healthy job printed "[stalled] rank 1 stalled in forward" and raised the TUI's
alert while it ended (review 275). Driven through a real HubCore with encoded messages."""

from __future__ import annotations

from pardash.telemetry import schema
from pardash.telemetry.analysis import LivenessConfig
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.printer import event_line, group_alike
from pardash.tui.widgets.event_log import describe

RUN = "r"
T = 1.0e9


def _two_ranks_at_step_30() -> tuple[HubCore, callable]:
    core = HubCore(run_id=RUN, world_size=2)
    core.detector.cfg = LivenessConfig()
    seq = {0: 0, 1: 0}

    def send(msg: schema.Message, t: float) -> None:
        msg.run, msg.t = RUN, t
        if msg.seq != -1:
            msg.seq, seq[msg.rank] = seq[msg.rank], seq[msg.rank] + 1
        assert core.ingest_bytes(schema.encode(msg), t - T), core.rejected

    for r in (0, 1):
        send(schema.Hello(rank=r, world_size=2, node=r, pid=100 + r, strategy="ddp"), T)
    for s in range(1, 31):
        for r in (0, 1):
            send(schema.Step(rank=r, step=s, step_s=0.01, samples=8, loss=1.0), T + s / 100)
    core.tick(0.3)
    return core, send


def _verdicts(core: HubCore, until: float, send) -> list[tuple[int, str]]:
    """Ten seconds of heartbeats (both ranks alive, no step) looked at as the hub does."""
    out = []
    t = 0.5
    while t <= until:
        for r in (0, 1):
            send(schema.Heartbeat(rank=r, step=30, phase="forward" if r else "sync"), T + t)
        frame = core.tick(t)
        out += [(m.rank, m.verdict) for m in frame.messages if isinstance(m, schema.Verdict)]
        t += 0.25
    return out


def test_ranks_the_launcher_is_stopping_are_not_called_stalled_while_they_end():
    # Without a stop: both stalled 5 s on (the hang the detector is for).
    core, send = _two_ranks_at_step_30()
    assert sorted(_verdicts(core, 10.0, send)) == [(0, "stalled"), (1, "stalled")]
    # Node 1's stop began at 0.4 s (a Ctrl-C there): its rank is not judged; node 0's is.
    core, send = _two_ranks_at_step_30()
    send(schema.Event(rank=1, seq=-1, name="stopping", message="by Ctrl-C on node 1 (h1)"), T + 0.4)
    assert _verdicts(core, 10.0, send) == [(0, "stalled")]
    assert core.state.ranks[1].stopping is not None and core.state.ranks[1].status == "running"


def test_a_stall_found_after_the_stop_began_and_before_its_note_came_is_cleared():
    # The note is sent as the launcher's loop sees the stop (up to 0.1 s on), dated when the stop
    # began: a verdict the hub made in between was the stop's.
    core, send = _two_ranks_at_step_30()
    assert sorted(_verdicts(core, 6.0, send)) == [(0, "stalled"), (1, "stalled")]
    for r in (0, 1):
        send(schema.Event(rank=r, seq=-1, name="stopping", message="by you"), T + 5.0)
    core.tick(6.25)
    assert [r.stalled for r in core.state.ranks.values()] == [None, None]
    # One found before the stop (a hang the user stopped) stays.
    core, send = _two_ranks_at_step_30()
    _verdicts(core, 6.0, send)
    stalled_at = core.state.ranks[1].stalled.t
    send(schema.Event(rank=1, seq=-1, name="stopping", message="by you"), stalled_at + 0.5)
    assert core.state.ranks[1].stalled is not None


def test_the_stop_is_said_once_for_the_ranks_and_a_scripts_own_event_of_that_name_is_its_own():
    notes = [schema.Event(run=RUN, rank=r, seq=-1, t=T, name="stopping", message="by a viewer (pardash attach, pid 7)") for r in (0, 1)]
    ((first, ranks, took),) = group_alike(notes)
    assert event_line(first, ranks, took) == "[stopping] ranks 0-1 being stopped by a viewer (pardash attach, pid 7)"
    assert describe(first, ranks, took) == ("ranks 0-1 being stopped by a viewer (pardash attach, pid 7)", "dim")
    own = schema.Event(run=RUN, rank=0, seq=5, t=T, name="stopping", message="early stopping at epoch 3")
    assert event_line(own) == "[stopping] rank 0: early stopping at epoch 3"
    core, send = _two_ranks_at_step_30()
    send(schema.Event(rank=0, name="stopping", message="early stopping at epoch 3"), T + 0.4)
    assert core.state.ranks[0].stopping is None
