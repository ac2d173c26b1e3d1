"""A stop as it begins: the launcher says, for each rank of its node, that it is stopping it
(an event "stopping", seq -1, dated when the stop began), and the hub judges no stall or silence
of those ranks from then on. A framework's ranks may take seconds to end (Lightning's ~10 s):
a Stop of a healthy job printed "[stalled] rank 1 stalled in forward" and raised the TUI's
alert while it ended (review 275). Driven through a real HubCore with encoded messages."""

from __future__ import annotations

import msgspec
from test_node_exits import RUN, T, _hub_of_two_nodes

from pardash.telemetry import schema
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.printer import event_line, group_alike
from pardash.tui.widgets.event_log import describe


def _two_ranks_at_step_30() -> tuple[HubCore, callable]:
    """A hub of a 2-rank DDP job at step 30 (test_node_exits's), looked at once."""
    core, send = _hub_of_two_nodes()
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


def _stopped_healthy_job() -> list[schema.Message]:
    """A Stop of a healthy 2-rank job: the launcher's stopping notes, then rank 1's own failure
    (its all-reduce broken as torchrun stopped rank 0 first: gloo's "Connection closed by
    peer"), and rank 0's stop noted by the launcher."""
    recs: list[schema.Message] = [schema.Hello(run=RUN, rank=r, seq=0, world_size=2, strategy="ddp", t=T) for r in (0, 1)]
    for s in range(1, 51):
        recs += [schema.Step(run=RUN, rank=r, seq=s, step=s, step_s=0.02, samples=8, t=T + s * 0.02) for r in (0, 1)]
    recs += [schema.Event(run=RUN, rank=r, seq=-1, name="stopping", message="by you", t=T + 1.1) for r in (0, 1)]
    recs.append(schema.Event(run=RUN, rank=1, seq=51, name="error", step=50, t=T + 1.5,
                             message="RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:1234"))  # fmt: skip
    recs.append(schema.Event(run=RUN, rank=1, seq=52, name="exit", code=1, step=51, t=T + 1.5))
    recs.append(schema.Event(run=RUN, rank=0, seq=-1, name="exit", code=-15, message="stopped by you", t=T + 1.1))
    return [msgspec.structs.replace(m, hseq=i + 1) for i, m in enumerate(recs)]


def test_a_rank_that_failed_as_the_launcher_stopped_it_was_stopped_not_the_jobs_failure(tmp_path):
    # Review 275: kill -TERM of a healthy job: "rank 0 was stopped by you first; rank 1 exited with
    # code 1 at step 51 after it: RuntimeError: ... Connection closed by peer" and rank 1
    # "exited" in the rank table, where every rank was being stopped.
    from pardash.telemetry.failures import failure_summary
    from pardash.telemetry.prometheus import rank_state
    from pardash.telemetry.report import build_report, render_text
    from pardash.telemetry.state import STOPPED_CODES, RunState
    from pardash.tui.alerts import run_alerts

    records = _stopped_healthy_job()
    log = tmp_path / "run.jsonl"
    log.write_bytes(b"".join(schema.encode_json(m) + b"\n" for m in records))
    rep = build_report(str(log))
    assert rep["failure"] is None
    assert [(r["rank"], r["status"]) for r in rep["ranks"]] == [(0, "stopped"), (1, "stopped")]
    text = render_text(rep)
    exits = [" ".join(line.split()) for line in text.split("exits:")[1].split("\n\n")[0].strip().splitlines()]
    assert exits == ["rank 0 stopped by you (SIGTERM)", "rank 1 exited with code 1 at step 51 as it was being stopped by you"], exits
    assert "root cause" not in text
    st = RunState()
    for m in records:
        st.apply(m, m.t)
    assert failure_summary(st) is None
    assert [rank_state(r, STOPPED_CODES) for r in st.ranks.values()] == ["stopped", "stopped"]
    said = [a.text for a in run_alerts(st)]
    assert "rank 1 was stopped by you at step 51 (exit code 1)" in said, said
    # Without the notes (a log of an older launch): as before, rank 0's stop broke rank 1's collective.
    st = RunState()
    for m in records:
        if not (isinstance(m, schema.Event) and m.name == "stopping"):
            st.apply(m, m.t)
    assert failure_summary(st)["stopped_first"] == [{"rank": 0, "how": "stopped by you"}]


def test_ranks_being_stopped_read_stopping_in_the_progress_line():
    # A slow stop's seconds read "2 running" until the ranks ended (the "[stopping]" line above it).
    from pardash.telemetry.printer import states_text
    from pardash.telemetry.state import RunState

    st = RunState()
    for m in _stopped_healthy_job():
        if isinstance(m, schema.Event) and m.name in ("error", "exit"):
            break
        st.apply(m, m.t)
    assert states_text(st) == "2 stopping"


def test_a_rank_that_failed_of_its_own_around_a_stop_still_failed():
    # Review 280: a full disk in a rank's SIGTERM handler's emergency save (after the stop began),
    # and an error raised long before a stop of the job stuck in its teardown, read as stops:
    # no root cause. Only a failure of the stop's making (a peer's going) is the stop's.
    from pardash.telemetry.failures import failure_summary
    from pardash.telemetry.state import RunState

    for message, t in (("OSError: [Errno 28] No space left on device", T + 1.3), ("ValueError: corrupt record 765", T + 0.5)):
        st = RunState()
        for m in _stopped_healthy_job():
            if isinstance(m, schema.Event) and m.name == "error":
                m = msgspec.structs.replace(m, message=message, t=t)
            st.apply(m, m.t)
        f = failure_summary(st)
        assert f is not None and f["rank"] == 1 and f["error"] == message, (message, f)
        assert not st.ranks[1].ended_in_stop
