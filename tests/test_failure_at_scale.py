"""A failure of many ranks is some two thousand events (each rank's error and exit), far more
than the event log keeps (its newest 500): the root cause, the first to exit and the victims are
still named right, by the hub, by a viewer that watched it happen and by one that attached after
(through the hub's snapshot). Driven through a real HubCore with encoded frames, no sockets."""

from __future__ import annotations

from pardash.telemetry import schema
from pardash.telemetry.client import FrameApplier
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.printer import failure_summary
from pardash.telemetry.state import EVENTS_KEPT
from pardash.tui.alerts import exit_info

RUN = "big"
WORLD = 1024
CAUSE = 5


def test_the_first_error_of_1024_failing_ranks_is_the_root_cause_everywhere():
    core = HubCore(run_id=RUN, world_size=WORLD)
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
    late = FrameApplier()
    late.load_snapshot(core.snapshot())

    for name, st in (("hub", core.state), ("early viewer", early.state), ("late viewer", late.state)):
        assert len(st.events) == EVENTS_KEPT, name  # the cause's own events are long gone from it
        assert all(e.rank != CAUSE for e in st.events), name
        f = failure_summary(st)
        assert f is not None and f["rank"] == CAUSE, (name, f and f["line"])
        assert f["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered", name
        assert f["victims"] == [r for r in range(WORLD) if r != CAUSE], name
        assert f["line"].startswith(f"rank {CAUSE} exited with code 1 at step 25: RuntimeError: CUDA error"), name
        assert min(exit_info(st).items(), key=lambda kv: kv[1].order)[0] == CAUSE, name
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
