"""A rank that torchrun restarted runs its steps again: the new run of them replaces the first in
its charts and in the run's trend, as an export's do (review 246: after a restart without a
checkpoint, the loss chart ran to step 599 with the failed attempt's curve to the right of the new
attempt's step 454, and the detail view read "steps 1-535")."""

from __future__ import annotations

from pardash.telemetry import schema
from pardash.telemetry.ring import Ring
from pardash.telemetry.state import HISTORY_POINTS, RunState
from pardash.telemetry.trend import Trend


def _step(rank: int, step: int, loss: float = 1.0) -> schema.Step:
    return schema.Step(rank=rank, seq=step, step=step, loss=loss, step_s=0.1, t=1.0e9 + step)


def _run(st: RunState, steps: range, ranks: tuple[int, ...] = (0, 1), loss: float = 1.0) -> None:
    for i in steps:
        st.commit_history([_step(r, i, loss) for r in ranks])


def test_a_restart_from_the_start_replaces_the_failed_attempts_steps():
    st = RunState()
    _run(st, range(1, 600), loss=2.0)
    assert st.ranks[0].history["step"].values()[-1] == 599
    _run(st, range(1, 455), loss=1.0)  # torchrun started it again, from step 1
    for r in (0, 1):
        steps = st.ranks[r].history["step"].values()
        assert steps == [float(s) for s in range(455 - HISTORY_POINTS, 455)], steps[-3:]
        assert set(st.ranks[r].history["loss"].values()) == {1.0}  # none of the first attempt's
    trend_steps, medians, _, _ = st.trend.points()
    assert max(trend_steps) == 454 and trend_steps[-1] == 454
    assert trend_steps == sorted(trend_steps) and set(medians) == {1.0}


def test_a_resume_from_a_checkpoint_keeps_the_steps_before_it():
    st = RunState()
    _run(st, range(1, 121), loss=2.0)
    _run(st, range(101, 131), loss=1.0)  # crashed at 120, resumed from the checkpoint of step 100
    steps = st.ranks[0].history["step"].values()
    assert steps == [float(s) for s in range(1, 131)]
    losses = st.ranks[0].history["loss"].values()
    assert losses[:100] == [2.0] * 100 and losses[100:] == [1.0] * 30
    trend_steps, medians, _, _ = st.trend.points()
    assert trend_steps == [float(s) for s in range(1, 131)]
    assert medians[99] == 2.0 and medians[100:] == [1.0] * 30


def test_ranks_a_step_apart_in_a_frame_are_no_restart():
    # (DDP's ranks step together, but a frame may hold the faster one's step and the next only
    # the slower one's: the run's point at step 100 stays)
    t = Trend()
    t.add_frame([_step(0, 100), _step(1, 98)])
    t.add_frame([_step(1, 99)])
    t.add_frame([_step(0, 101), _step(1, 101)])
    assert t.points()[0] == [100, 99, 101]


def test_the_ring_drops_only_its_newest_rows_at_or_past_the_step():
    ring = Ring(4, ("step", "t"))
    for s in range(1, 7):  # holds 3..6, wrapped
        ring.append_row(s, s * 10.0)
    assert ring.drop_newest_from("step", 5) == 2
    assert ring["step"].values() == [3.0, 4.0] and ring.last("t") == 40.0
    ring.append_row(5, 55.0)
    assert ring["step"].values() == [3.0, 4.0, 5.0] and ring["t"].values() == [30.0, 40.0, 55.0]
    assert ring.drop_newest_from("step", 0) == 3 and len(ring) == 0


def test_a_viewer_that_attached_while_torchrun_restarted_the_job_drops_the_failed_attempts_steps():
    # Its snapshot came in the restart's gap (the new processes' hellos, no step yet): it knew
    # no rank's newest step, and kept steps 41-60 of the failed attempt beside the new 41-50,
    # where the hub and a viewer attached before dropped them (review 254).
    from pardash.telemetry.client import FrameApplier
    from pardash.telemetry.hubcore import HubCore

    core = HubCore(run_id="r", world_size=2)
    seq: dict[int, int] = {}
    clock = {"now": 100.0, "t": 1.0e9}

    def send(m):
        m.run, m.seq = "r", seq.get(m.rank, 0)
        seq[m.rank] = m.seq + 1
        assert core.ingest_bytes(schema.encode(m), clock["now"]), core.rejected

    def steps(first: int, last: int, viewers) -> None:
        for step in range(first, last + 1):
            clock["t"] += 0.05
            clock["now"] += 0.05
            for r in (0, 1):
                send(schema.Step(rank=r, step=step, step_s=0.05, loss=10.0 / step, t=clock["t"]))
            frame = core.tick(clock["now"])
            for v in viewers:
                v.apply_frame(frame)

    for r in (0, 1):
        send(schema.Hello(rank=r, world_size=2, pid=100 + r, strategy="ddp", t=clock["t"]))
    early = FrameApplier()
    core.tick(clock["now"])
    early.load_snapshot(core.snapshot())
    steps(1, 60, [early])
    seq.clear()  # torchrun starts both again; they resume from the checkpoint of step 40
    for r in (0, 1):
        send(schema.Hello(rank=r, world_size=2, pid=200 + r, strategy="ddp", restart=1, t=clock["t"]))
    early.apply_frame(core.tick(clock["now"]))
    late = FrameApplier()
    late.load_snapshot(core.snapshot())
    steps(41, 50, [early, late])
    want = [float(s) for s in range(1, 51)]
    for name, st in (("hub", core.state), ("early", early.state), ("late", late.state)):
        assert st.ranks[0].history["step"].values() == want, name
        assert st.trend.points()[0][-11:] == [40.0, *range(41, 51)], (name, st.trend.points()[0][-12:])
