"""A rank whose loss goes NaN (or infinite) is known as such until it is finite again: its steps
go on without a loss (JSON has no NaN), which read as a loss never reported, and the one word
of it, its reporter's warning, soon left the event log. The hub, a viewer that watched and one
that attached later (through the hub's snapshot) know it; the headless lines and the
launcher's last line say it."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

from pardash.telemetry import frames, schema
from pardash.telemetry.client import FrameApplier
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.printer import follow_attached, outcome_line, progress_line, progress_stats
from pardash.telemetry.reporter import Reporter
from pardash.telemetry.state import EVENTS_KEPT, RunState

RUN = "nan"
T = 1.7e9


def reporter_says(loss: float, step: int, bad_since: int | None = None) -> tuple[str, int | None]:
    """What the rank's reporter says as its loss turns (Reporter._loss_turns), in its words."""
    said: list[str] = []
    fake = SimpleNamespace(_loss_bad=bad_since, event=lambda name, message, **kw: said.append(message))
    Reporter._loss_turns(fake, {"loss": loss}, loss, step)  # type: ignore[arg-type]
    assert len(said) == 1, said
    return said[0], fake._loss_bad


NAN_AT_100, _ = reporter_says(math.nan, 100)
FINITE_AT_140, _ = reporter_says(0.5, 140, bad_since=100)


def warning(rank: int, message: str, seq: int, step: int, *, hseq: int = 0) -> schema.Event:
    return schema.Event(run=RUN, rank=rank, seq=seq, name="warning", message=message, step=step, t=T + step, hseq=hseq)


def two_ranks(steps: int = 120, nan_from: int | None = 100) -> RunState:
    """2 ranks to ``steps``; rank 1's loss NaN from ``nan_from`` (its warning, its steps without one)."""
    st = RunState(run_id=RUN)
    for r in (0, 1):
        st.apply(schema.Hello(run=RUN, rank=r, world_size=2, pid=10 + r, seq=0, t=T, config={"steps": 300}), 0.0)
    seq = {0: 1, 1: 1}
    for s in range(1, steps + 1):
        for r in (0, 1):
            bad = r == 1 and nan_from is not None and s >= nan_from
            if bad and s == nan_from:
                st.apply(warning(1, NAN_AT_100.replace("100", str(nan_from)), seq[1], s), 0.0)
                seq[1] += 1
            st.apply(schema.Step(run=RUN, rank=r, step=s, seq=seq[r], loss=None if bad else 1.0, step_s=0.02, t=T + s), 0.0)
            seq[r] += 1
    return st


def test_the_reporters_words_are_what_the_state_reads():
    assert NAN_AT_100.startswith("loss is nan at step 100: diverged")
    assert FINITE_AT_140 == "loss is finite again at step 140 (not finite from step 100)"
    st = RunState(run_id=RUN)
    for value, said in (("inf", reporter_says(math.inf, 7)[0]), ("-inf", reporter_says(-math.inf, 7)[0])):
        st.apply(warning(3, said, 1, 7), 0.0)
        assert st.ranks[3].loss_not_finite == (value, 7)
        st.apply(warning(3, reporter_says(1.0, 9, bad_since=7)[0], 2, 9), 0.0)
        assert st.ranks[3].loss_not_finite is None


def test_a_rank_whose_loss_goes_nan_is_kept_so_until_it_is_finite_again():
    st = two_ranks()
    r1 = st.ranks[1]
    assert r1.loss_not_finite == ("nan", 100) and r1.loss_bad is not None
    assert r1.step.loss is None and r1.status == "running"  # (what read as "no loss reported")
    assert st.ranks[0].loss_not_finite is None
    # Said once a turn: "since" stays the first step.
    st.apply(warning(1, NAN_AT_100.replace("100", "110"), 500, 110), 0.0)
    assert r1.loss_not_finite == ("nan", 100)
    # Finished, it stays so (its loss was NaN to its end).
    st.apply(schema.Event(run=RUN, rank=1, seq=501, name="exit", code=0, t=T + 200), 0.0)
    assert r1.finished and r1.loss_not_finite == ("nan", 100)
    st = two_ranks()
    st.apply(warning(1, FINITE_AT_140, 500, 140), 0.0)
    assert st.ranks[1].loss_not_finite is None


def test_other_warnings_are_not_the_rank_losing_its_loss():
    st = two_ranks(nan_from=None)
    # A custom metric's, and the same words from the hub or launcher (seq -1), not the rank's own.
    st.apply(warning(1, "grad_norm is nan at step 5 (steps go on without it while it is not finite)", 900, 5), 0.0)
    st.apply(warning(1, "lossy is nan at step 5", 901, 5), 0.0)
    st.apply(warning(1, NAN_AT_100, -1, 100), 0.0)
    assert st.ranks[1].loss_not_finite is None


def test_torchrun_restarting_the_rank_clears_it():
    st = two_ranks()
    st.apply(schema.Event(run=RUN, rank=1, seq=-1, name="restart", code=1, message="rank 1 restarted by torchrun", t=T + 130), 0.0)
    assert st.ranks[1].loss_not_finite is None
    # A new process's hello (a hub that heard no restart event) too.
    st = two_ranks()
    st.apply(schema.Hello(run=RUN, rank=1, world_size=2, pid=99, restart=1, seq=0, t=T + 130), 0.0)
    assert st.ranks[1].loss_not_finite is None
    # Its new process's own NaN is its own.
    st.apply(warning(1, NAN_AT_100.replace("100", "150"), 1, 150), 0.0)
    assert st.ranks[1].loss_not_finite == ("nan", 150)


def _hub_run() -> tuple[HubCore, FrameApplier, callable]:
    core = HubCore(run_id=RUN, world_size=2)
    seq = {0: 0, 1: 0}
    now = [100.0]

    def send(msg: schema.Message) -> None:
        msg.run, msg.seq, msg.t = RUN, seq[msg.rank], T + now[0]
        seq[msg.rank] += 1
        assert core.ingest_bytes(schema.encode(msg), now[0]), core.rejected

    early = FrameApplier()

    def tick(after_s: float = 0.1) -> None:
        now[0] += after_s
        early.apply_frame(frames.decode_frame(frames.encode(core.tick(now[0]))))

    for r in (0, 1):
        send(schema.Hello(rank=r, world_size=2, pid=10 + r, strategy="ddp"))
    early.load_snapshot(frames.decode_snapshot(frames.encode(core.snapshot())))
    for s in range(1, 101):
        if s == 100:
            send(schema.Event(rank=1, name="warning", step=100, message=NAN_AT_100))
        for r in (0, 1):
            send(schema.Step(rank=r, step=s, step_s=0.02, loss=None if r == 1 and s >= 100 else 1.0, mono=now[0]))
        tick()
    return core, early, (send, tick)


def late_viewer(core: HubCore) -> RunState:
    late = FrameApplier()
    late.load_snapshot(frames.decode_snapshot(frames.encode(core.snapshot())))
    return late.state


def test_a_viewer_attaching_after_the_warning_left_the_event_log_knows_it():
    core, early, (send, tick) = _hub_run()
    # Enough events after it to push the warning out of the event log (warnings: routine events,
    # saves and epoch ends, are kept apart from them and push out none).
    for i in range(EVENTS_KEPT):
        send(schema.Event(rank=i % 2, name="warning", step=100, message=f"slow disk {i}"))
        if i % 100 == 99:
            tick(10.0)  # (within what the hub takes of a rank's events a second)
    assert not any(isinstance(e, schema.Event) and e.message == NAN_AT_100 for e in core.state.events)
    late = late_viewer(core)
    for name, st in (("hub", core.state), ("early viewer", early.state), ("late viewer", late)):
        assert st.ranks[1].loss_not_finite == ("nan", 100), name
        assert st.ranks[0].loss_not_finite is None, name
    # Sent in its place in the hub's order: the late viewer's event log is the hub's still.
    assert [e.hseq for e in late.events] == [e.hseq for e in core.state.events]
    # Finite again: nobody says it any more, a viewer attaching then neither.
    send(schema.Event(rank=1, name="warning", step=140, message=FINITE_AT_140))
    tick()
    for name, st in (("hub", core.state), ("early viewer", early.state), ("late viewer", late_viewer(core))):
        assert st.ranks[1].loss_not_finite is None, name


def test_a_viewer_attaching_after_torchrun_restarted_the_rank_does_not_say_it():
    core, _early, (send, tick) = _hub_run()
    send(schema.Hello(rank=1, world_size=2, pid=99, restart=1, strategy="ddp"))
    tick()
    assert core.state.ranks[1].loss_not_finite is None
    assert late_viewer(core).ranks[1].loss_not_finite is None


def test_the_progress_lines_and_the_last_line_say_it():
    st = two_ranks()
    line = progress_line(st, 12.0)
    assert line.endswith("2 running | rank 1's loss is nan since step 100"), line
    # (rank 0's loss alone is finite: still the median of the job's ranks, said so, review 305)
    assert re.search(r"\| loss med [\d.]+ \|", line), line
    assert "rank 1's loss is nan since step 100" in progress_stats(st)
    for r in (0, 1):
        st.apply(schema.Event(run=RUN, rank=r, seq=9000, name="exit", code=0, t=T + 300), 0.0)
    assert "| 2 finished | rank 1's loss was nan from step 100 to the end" in progress_line(st, 13.0)
    assert outcome_line(st, 0, {}, "run.jsonl") == (
        "pardash: done, 2 rank(s), step 120; rank 1's loss was nan from step 100 to the end, log run.jsonl"
    )
    # A healthy run's lines say its loss (the ranks' median), nothing not finite.
    ok = two_ranks(nan_from=None)
    assert "loss is" not in progress_line(ok, 12.0) and re.search(r"\| loss (?:med )?[\d.]+ \|", progress_line(ok, 12.0))
    for r in (0, 1):
        ok.apply(schema.Event(run=RUN, rank=r, seq=9000, name="exit", code=0, t=T + 300), 0.0)
    assert outcome_line(ok, 0, {}, "run.jsonl") == "pardash: done, 2 rank(s), step 120, log run.jsonl"


def test_many_ranks_gone_nan_together_are_said_together():
    st = RunState(run_id=RUN)
    for r in range(8):
        st.apply(schema.Hello(run=RUN, rank=r, world_size=8, pid=10 + r, seq=0, t=T), 0.0)
        st.apply(schema.Step(run=RUN, rank=r, step=100, seq=1, loss=None, step_s=0.02, t=T + 1), 0.0)
    # DDP: the NaN reaches every rank through the all-reduce, a step after the first.
    st.apply(warning(5, NAN_AT_100, 2, 100), 0.0)
    for r in (0, 1, 2, 3, 4, 6):
        st.apply(warning(r, NAN_AT_100.replace("100", "101"), 2, 101), 0.0)
    line = progress_line(st, 1.0)
    assert line.endswith("rank 5's loss is nan since step 100, ranks 0-4, 6' loss is nan since step 101"), line


def test_the_attachs_last_line_says_it():
    st = two_ranks()
    for r in (0, 1):
        st.apply(schema.Event(run=RUN, rank=r, seq=9000, name="exit", code=0, t=T + 300), 0.0)

    class Printer:
        def follow(self, done) -> None:
            assert done()

    source = SimpleNamespace(state=st, last_frame_t=1.0, info={})
    assert follow_attached(Printer(), source) == "pardash: the run is over: 2 finished; rank 1's loss was nan from step 100 to the end"
