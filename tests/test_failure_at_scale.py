"""A failure of many ranks is some two thousand events (each rank's error and exit), and more
may follow it out of the event log (its newest 500, or four a rank): the root cause, the first
to exit and the victims are still named right, by the hub, by a viewer that watched it happen and by one that attached after
(through the hub's snapshot). Driven through a real HubCore with encoded frames, no sockets."""

from __future__ import annotations

from pardash.telemetry import schema
from pardash.telemetry.client import FrameApplier
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.failures import failure_summary
from pardash.telemetry.recorder import Recorder
from pardash.telemetry.report import build_report, render_text
from pardash.telemetry.state import EVENTS_PER_RANK
from pardash.tui.alerts import exit_info

RUN = "big"
WORLD = 1024
CAUSE = 5


def test_the_first_error_of_1024_failing_ranks_is_the_root_cause_everywhere(tmp_path):
    core = HubCore(run_id=RUN, world_size=WORLD, recorder=Recorder(tmp_path / "run.jsonl"))
    seq = dict.fromkeys(range(WORLD), 0)
    now = 100.0

    def send(msg: schema.Message) -> None:
        msg.run, msg.seq, msg.t = RUN, seq[msg.rank], 1.0e9 + now
        seq[msg.rank] += 1
        assert core.ingest_bytes(schema.encode(msg), now), core.rejected

    for r in range(WORLD):
        send(schema.Hello(rank=r, world_size=WORLD, pid=1000 + r, strategy="fsdp"))
    for r in range(WORLD):
        send(schema.Step(rank=r, step=24, step_s=0.1, loss=1.0, mono=now))
    early = FrameApplier()
    early.load_snapshot(core.snapshot())
    early.apply_frame(core.tick(now))

    send(schema.Event(rank=CAUSE, name="error", step=24, message="RuntimeError: CUDA error: an illegal memory access was encountered",
                      traceback="Traceback (most recent call last):\n" + "  frame\n" * 5000 + "RuntimeError: CUDA error"))
    send(schema.Event(rank=CAUSE, name="exit", code=1, step=25))
    early.apply_frame(core.tick(now + 0.1))
    for r in range(WORLD):
        if r != CAUSE:
            send(schema.Event(rank=r, name="error", step=24, message="RuntimeError: Connection reset by peer"))
            send(schema.Event(rank=r, name="exit", code=1, step=25))
    early.apply_frame(core.tick(now + 0.2))
    # Every rank's round of warnings as the job went down pushes the failure out of the event
    # log, however large it grew for 1024 ranks.
    for _ in range(8):
        for r in range(WORLD):
            send(schema.Event(rank=r, name="warning", message="NCCL watchdog: collective timed out"))
        early.apply_frame(core.tick(now + 0.3))
    late = FrameApplier()
    late.load_snapshot(core.snapshot())

    for name, st in (("hub", core.state), ("early viewer", early.state), ("late viewer", late.state)):
        assert len(st.events) == st.events.maxlen >= EVENTS_PER_RANK * WORLD, name
        assert not any(isinstance(e, schema.Event) and e.name in ("error", "exit") for e in st.events), name
        f = failure_summary(st)
        assert f is not None and f["rank"] == CAUSE, (name, f and f["line"])
        assert f["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered", name
        assert f["victims"] == [r for r in range(WORLD) if r != CAUSE], name
        assert f["line"].startswith(f"rank {CAUSE} exited with code 1 at step 25: RuntimeError: CUDA error"), name
        assert min(exit_info(st).items(), key=lambda kv: kv[1].order)[0] == CAUSE, name
    # The report says it in a few lines, not one a rank.
    core.recorder.close()
    text = render_text(build_report(str(tmp_path / "run.jsonl")))
    assert f"exits:\n  rank {CAUSE} exited with code 1 at step 25 - the root cause\n  ranks 0-4, 6-1023 exited with code 1 at step 25 - failed because of it\nroot cause: rank {CAUSE}" in text  # the cause first
    # What is kept of an error for this is its end, not a 5,000-line traceback.
    kept = next(e for e in core.state.lifecycle if e.name == "error" and e.rank == CAUSE)
    assert kept.traceback.endswith("RuntimeError: CUDA error") and len(kept.traceback) <= 2048


def test_what_is_kept_is_bounded():
    from pardash.telemetry.state import LIFECYCLE_KEPT, RunState

    st = RunState(run_id=RUN)
    for i in range(3 * LIFECYCLE_KEPT):
        st.apply(schema.Event(rank=-1, seq=-1, name="restart", message=f"restart {i}", hseq=i + 1, run=RUN), 0.0)
    assert len(st.lifecycle) == LIFECYCLE_KEPT
    assert st.lifecycle[-1].message == f"restart {3 * LIFECYCLE_KEPT - 1}"


def test_one_frame_of_every_ranks_checkpoint_is_one_line():
    from pardash.telemetry.printer import event_line, group_alike

    core = HubCore(run_id=RUN, world_size=WORLD)
    for r in range(WORLD):
        core.ingest_bytes(schema.encode(schema.Hello(rank=r, world_size=WORLD, run=RUN, seq=0, t=1.0e9)), 1.0)
    viewer = FrameApplier()
    viewer.load_snapshot(core.snapshot())
    for r in range(WORLD):
        save = schema.Event(rank=r, name="checkpoint", step=100, message="/ckpt/step-00000100", duration_s=2.0,
                            run=RUN, seq=1, t=1.0e9 + 1)
        assert core.ingest_bytes(schema.encode(save), 2.0)
    viewer.apply_frame(core.tick(2.0))
    saves = [e for e in viewer.state.events if e.name == "checkpoint"]
    assert [event_line(*entry) for entry in group_alike(saves)] == [
        "[checkpoint] ranks 0-1023 at step 100: /ckpt/step-00000100 (slowest 2.00 s)"
    ]


def test_every_ranks_watchdog_timeout_is_one_line_not_one_a_rank():
    # Review 294: 1023 ranks' NCCL watchdog timeouts, each naming its rank, its collective's
    # sequence number and its wait, were 1023 entries of the TUI's event log (four rows each)
    # and of the headless lines: errors were said once for every rank. Alike but for their
    # numbers, they are one line naming the ranks (the first's words and traceback); an error
    # of other words stays a line of its own.
    from pardash.telemetry.printer import event_line, group_alike
    from pardash.tui.widgets.event_log import describe

    def timeout(r: int) -> schema.Event:
        msg = (f"RuntimeError: [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={4242 + r % 3}, "
               f"OpType=ALLREDUCE, NumelIn=1048576) ran for {600000 + r * 7} milliseconds before timing out.")
        return schema.Event(rank=r, name="error", step=299, message=msg, traceback=f"Traceback (most recent call last):\n  ...\n{msg}",
                            run=RUN, seq=2, t=1.0e9 + 2)  # fmt: skip

    errors = [timeout(r) for r in range(WORLD) if r != 700]
    errors.insert(3, schema.Event(rank=700, name="error", step=299, message="ValueError: bad batch", run=RUN, seq=2, t=1.0e9 + 2))
    entries = group_alike(errors)
    assert [(m.rank, ranks) for m, ranks, _ in entries] == [(0, [r for r in range(WORLD) if r != 700]), (700, [700])]
    first = event_line(*entries[0])
    assert first.startswith("[error] ranks 0-699, 701-1023: RuntimeError: [Rank 0] Watchdog caught collective operation timeout"), first
    assert event_line(*entries[1]) == "[error] rank 700: ValueError: bad batch"
    folded = describe(entries[0][0], entries[0][1])[0]
    assert folded.startswith("ranks 0-699, 701-1023 error after step 299: RuntimeError: [Rank 0]"), folded
    # Whose words they are, the others' not the same (review 298: two ranks failing each on its
    # own shard read "ranks 0-1: ... shard_0001_of_0002.bin", rank 1's path as rank 0's too).
    assert first.endswith("… (rank 0's; the others' differ in their numbers)") and folded.endswith(" (rank 0's; the others' differ in their numbers)")
    shards = [schema.Event(rank=r, name="error", step=5, message=f"FileNotFoundError: [Errno 2] No such file or directory: '/data/shard_{r:04d}.bin'")
              for r in (1, 0)]  # fmt: skip
    assert [event_line(*e) for e in group_alike(shards)] == [
        "[error] ranks 0-1: FileNotFoundError: [Errno 2] No such file or directory: '/data/shard_0001.bin' (rank 1's; the others' differ in their numbers)"
    ]
    # Ranks whose words are the same say them as they are.
    same = [schema.Event(rank=r, name="error", step=5, message="RuntimeError: boom") for r in (5, 6)]
    assert [event_line(*e) for e in group_alike(same)] == ["[error] ranks 5-6: RuntimeError: boom"]


def test_the_tui_names_the_cause_not_the_first_exit_heard():
    from pardash.telemetry.state import RunState
    from pardash.tui.alerts import run_alerts

    def run(cause: bool) -> RunState:
        st = RunState(run_id=RUN)
        for r in range(8):
            st.apply(schema.Hello(rank=r, world_size=8, run=RUN, seq=0, hseq=r + 1), 0.0)
        h = 100
        order = [6, 7, 5, 0, 1, 2, 3, 4]  # torchrun's SIGTERMs of ranks 6, 7 heard first
        for r in order:
            h += 1
            if r == 5 and cause:
                st.apply(schema.Event(rank=5, name="error", step=29, message="RuntimeError: boom", run=RUN, seq=1, hseq=h), 0.0)
                st.apply(schema.Event(rank=5, name="exit", code=1, step=30, run=RUN, seq=2, hseq=h + 1000), 0.0)
            else:
                st.apply(schema.Event(rank=r, name="exit", code=-15, step=29, run=RUN, seq=1, hseq=h), 0.0)
        return st

    alerts = run_alerts(run(cause=True))
    assert alerts[0].rank == 5 and alerts[0].first
    assert alerts[0].text == "rank 5, the root cause, exited with code 1 at step 30: RuntimeError: boom"
    assert sum(a.first for a in alerts) == 1
    # Every rank only stopped (by the user, or a scheduler's SIGTERM): none is named the cause.
    assert not any(a.first for a in run_alerts(run(cause=False)))
    # Ctrl-C to a job torchrun started outside pardash: each rank's Python exits 130 on its
    # KeyboardInterrupt, torchrun stops the rest; the first 130 heard was "the root cause".
    st = run(cause=False)
    st.apply(schema.Event(rank=3, name="error", step=29, message="interrupted", run=RUN, seq=2, hseq=90), 0.0)
    st.apply(schema.Event(rank=3, name="exit", code=130, step=29, run=RUN, seq=3, hseq=91), 0.0)
    assert not any(a.first for a in run_alerts(st))
    assert failure_summary(st) is None


def test_a_viewer_attached_after_torchrun_restarted_the_ranks_sees_them_running():
    # The snapshot keeps every exit now (lifecycle): each must come before the rank's new hello.
    core = HubCore(run_id=RUN)
    seq = {0: 0, 1: 0}
    clock = [1.0]

    def send(msg: schema.Message) -> None:
        msg.run, msg.seq, msg.t = RUN, seq[msg.rank], 1.0e9
        seq[msg.rank] += 1
        clock[0] += 0.05  # (a rank's events come at most 20 a second: hubcore.EVENTS_PER_S)
        assert core.ingest(msg, clock[0]), core.rejected

    for r in (0, 1):
        send(schema.Hello(rank=r, world_size=2, pid=100 + r, restart=0))
    send(schema.Event(rank=1, name="error", message="RuntimeError: boom"))
    send(schema.Event(rank=1, name="exit", code=1))
    send(schema.Event(rank=0, name="exit", code=-15))
    seq = {0: 0, 1: 0}
    for r in (0, 1):
        send(schema.Hello(rank=r, world_size=2, pid=200 + r, restart=1))
        send(schema.Step(rank=r, step=1, step_s=0.1))
    for i in range(600):  # the exits leave the event log, not the snapshot
        send(schema.Event(rank=i % 2, name="warning", message=f"w{i}"))
    core.tick(clock[0])
    late = FrameApplier()
    late.load_snapshot(core.snapshot())
    assert {r: s.status for r, s in core.state.ranks.items()} == {0: "running", 1: "running"}
    assert list(late.state.ranks) == [0, 1]
    assert {r: s.status for r, s in late.state.ranks.items()} == {0: "running", 1: "running"}
    assert [r.restarts for r in late.state.ranks.values()] == [1, 1]
