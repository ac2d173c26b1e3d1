"""A hub restarted on its log (``Hub.recover``) carries on where the dead one stopped: the
verdicts in force stay in force, charts keep their history, and every rank is judged, even one
whose hello the log lost. Driven with a fake clock: HubCore for the first hub, Hub.recover and
HubCore.tick for the restarted one."""

import functools

import pytest

from pardash.telemetry import schema
from pardash.telemetry.hub import Hub
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.logreader import load_log
from pardash.telemetry.recorder import Recorder
from pardash.telemetry.state import HISTORY_POINTS

RUN = "r"
T0 = 1.0e9
"""Wall clock of the ranks (log ``t``)."""


class Ranks:
    """Ranks that talk to a HubCore with their own seq counters, on a fake hub clock."""

    def __init__(self, core: HubCore, now: float) -> None:
        self.core, self.now = core, now
        self.seq: dict[int, int] = {}

    def send(self, msg: schema.Message) -> None:
        msg.run = RUN
        msg.seq = self.seq.get(msg.rank, 0)
        self.seq[msg.rank] = msg.seq + 1
        assert self.core.ingest_bytes(schema.encode(msg), self.now), self.core.rejected

    def hello(self, rank: int, world: int = 2) -> None:
        self.send(schema.Hello(rank=rank, world_size=world, pid=100 + rank, strategy="ddp", t=T0))

    def step(self, rank: int, step: int, t: float) -> None:
        self.send(schema.Step(rank=rank, step=step, step_s=0.1, self_s=0.05, loss=1.0 / step, t=t, mono=t - T0))

    def beat(self, rank: int, step: int) -> None:
        self.send(schema.Heartbeat(rank=rank, step=step, phase="backward", t=T0 + self.now, mono=self.now))

    def start(self, steps: int) -> None:
        """Ranks 0 and 1 say hello and take ``steps`` steps, a tenth of a second each."""
        for r in (0, 1):
            self.hello(r)
        for step in range(1, steps + 1):
            for r in (0, 1):
                self.step(r, step, T0 + step * 0.1)
            self.tick(0.1)

    def tick(self, dt: float) -> None:
        self.now += dt
        self.core.tick(self.now)


def _two_ranks(path) -> tuple[HubCore, Ranks]:
    """A hub recording to ``path``, and ranks 0 and 1 that said hello to it."""
    core = HubCore(run_id=RUN, recorder=Recorder(path))
    ranks = Ranks(core, now=100.0)
    for r in (0, 1):
        ranks.hello(r)
    return core, ranks


def _verdicts(core: HubCore) -> list[tuple[int, str, str]]:
    return [(v.rank, v.verdict, v.message) for v in core.state.events if isinstance(v, schema.Verdict)]


def _restart(path, now: float) -> Hub:
    hub = Hub(run_id=RUN, log_path=str(path))
    assert hub.recover(now=now) > 0
    return hub


def test_a_restart_keeps_stalled_and_silent_ranks_so_until_a_new_message_says_otherwise(tmp_path):
    path = tmp_path / "run.jsonl"
    core = HubCore(run_id=RUN, recorder=Recorder(path))
    ranks = Ranks(core, now=100.0)
    ranks.start(steps=5)
    # Rank 0 hangs in backward (heartbeats, no steps); rank 1 goes quiet altogether.
    for _ in range(30):
        ranks.beat(0, 5)
        ranks.tick(0.5)
    before = [(r, v) for r, v, _ in _verdicts(core)]
    assert before == [(1, "silent"), (0, "stalled")]
    core.recorder.close()

    # The hub dies; a new one recovers the log. Nothing the ranks did says they recovered.
    hub = _restart(path, now=5000.0)
    try:
        new = hub.core
        assert [(r, v) for r, v, _ in _verdicts(new)] == before
        assert {r.rank: r.status for r in new.state.ranks.values()} == {0: "stalled", 1: "silent"}
        ranks = Ranks(new, now=5000.0)
        ranks.seq = {0: 100, 1: 100}  # their counters went on (the gap is counted as lost)
        for _ in range(40):  # 20 s: rank 0 still hangs, rank 1 is still quiet
            ranks.beat(0, 5)
            ranks.tick(0.5)
        assert [(r, v) for r, v, _ in _verdicts(new)] == before  # no false "resumed", no second episode
        assert {r.rank: r.status for r in new.state.ranks.values()} == {0: "stalled", 1: "silent"}

        # What is received after the restart and shows progress (or life) is said.
        ranks.step(0, 6, T0 + 60)
        ranks.step(1, 6, T0 + 60)
        ranks.tick(0.5)
        after = _verdicts(new)[len(before) :]
        assert sorted((r, v, m) for r, v, m in after) == [
            (0, "resumed", "rank 0 resumed at step 6"),
            (1, "resumed", "rank 1 heard from again"),
        ]
    finally:
        hub.close()
    logged = [(m.rank, m.verdict) for m in load_log(path)[0] if isinstance(m, schema.Verdict)]
    assert logged == [(1, "silent"), (0, "stalled"), *((r, v) for r, v, _ in after)]


def test_a_rank_still_running_at_the_restart_is_judged_from_the_restart_on(tmp_path):
    # The restarted hub has not heard the rank yet: its quiet and its stuck time count from
    # the restart, so it is called silent (or stalled) when it really is, not before.
    path = tmp_path / "run.jsonl"
    core = HubCore(run_id=RUN, recorder=Recorder(path))
    ranks = Ranks(core, now=100.0)
    ranks.hello(0, world=1)
    for step in range(1, 4):
        ranks.step(0, step, T0 + step * 0.1)
        ranks.tick(0.1)
    core.recorder.close()
    hub = _restart(path, now=5000.0)
    try:
        ranks = Ranks(hub.core, now=5000.0)
        ranks.seq = {0: 10}
        for _ in range(4):
            ranks.tick(0.5)
        assert _verdicts(hub.core) == []
        for _ in range(4):  # 4 s without a word
            ranks.tick(0.5)
        assert [(r, v) for r, v, _ in _verdicts(hub.core)] == [(0, "silent")]
    finally:
        hub.close()


def _history(state, rank: int) -> list[float]:
    return state.ranks[rank].history["step"].values()


def test_a_restart_keeps_every_ranks_chart_history(tmp_path):
    # Steps slower than frames: the live hub keeps one point a step, the last HISTORY_POINTS.
    path = tmp_path / "run.jsonl"
    core, ranks = _two_ranks(path)
    n = HISTORY_POINTS + 60
    for step in range(1, n + 1):
        for r in (0, 1):
            ranks.step(r, step, T0 + step * 0.25)
            if step % 50 == 0:
                ranks.beat(r, step)
        ranks.tick(0.25)
    core.recorder.close()
    live = {r: _history(core.state, r) for r in (0, 1)}
    assert live[0] == [float(s) for s in range(n - HISTORY_POINTS + 1, n + 1)]
    trend = core.state.trend.points()
    assert trend[0][0] == 1.0 and trend[0][-1] == float(n)  # the run's loss from its first step

    hub = _restart(path, now=5000.0)
    try:
        assert hub.core.state.trend.points() == trend  # read back frame by frame from the log
        for r in (0, 1):
            assert _history(hub.core.state, r) == live[r]
            assert hub.core.state.ranks[r].history["loss"].values() == core.state.ranks[r].history["loss"].values()
        # The next step is the next point, once.
        ranks = Ranks(hub.core, now=5000.0)
        ranks.seq = {0: 10_000, 1: 10_000}
        ranks.step(0, n + 1, T0 + (n + 1) * 0.25)
        ranks.tick(0.1)
        assert _history(hub.core.state, 0)[-2:] == [float(n), float(n + 1)]
        assert _history(hub.core.state, 1)[-1] == float(n)
        # A viewer that joins the restarted hub gets the history too.
        snap = hub.core.snapshot()
        assert set(snap.history) == {0, 1}
    finally:
        hub.close()


def test_a_restart_keeps_one_history_point_per_frame_for_ranks_faster_than_frames(tmp_path):
    # Five steps in each 0.1 s frame: the live hub kept each frame's newest; so does recovery,
    # framing by the rank's own clock (the hub's frame times are not in the log).
    path = tmp_path / "run.jsonl"
    rec = Recorder(path)
    core = HubCore(run_id=RUN, recorder=rec)
    ranks = Ranks(core, now=100.0)
    ranks.hello(0, world=1)
    step = 0
    for frame in range(50):
        for i in range(5):
            step += 1
            ranks.step(0, step, T0 + frame * 0.1 + 0.005 + i * 0.01)
        ranks.tick(0.1)
    rec.close()
    live = _history(core.state, 0)
    assert live == [1.0] + [float(s) for s in range(10, 251, 5)]  # the first step's frame carries it alone
    hub = _restart(path, now=5000.0)
    try:
        assert _history(hub.core.state, 0) == live
    finally:
        hub.close()


def test_a_rank_whose_hello_never_arrived_is_still_judged_silent():
    # The hub died within the unflushed window after the hellos, or the hello was lost: the
    # rank's steps and heartbeats are known, so its silence is too.
    core = HubCore(run_id=RUN, world_size=2)
    ranks = Ranks(core, now=100.0)
    ranks.hello(0)
    ranks.seq[1] = 1  # rank 1's hello (seq 0) never arrived
    for step in range(1, 6):
        for r in (0, 1):
            ranks.step(r, step, T0 + step * 0.1)
        ranks.tick(0.1)
    for _ in range(40):  # 20 s of rank 0's heartbeats only; rank 0 is stuck too
        ranks.beat(0, 5)
        ranks.tick(0.5)
    assert [(r, v) for r, v, _ in _verdicts(core)] == [(1, "silent"), (0, "stalled")]
    assert core.state.ranks[1].status == "silent"


def test_a_rank_whose_hello_the_log_lost_is_judged_after_a_restart(tmp_path):
    path = tmp_path / "run.jsonl"
    core = HubCore(run_id=RUN, recorder=Recorder(path))
    ranks = Ranks(core, now=100.0)
    ranks.seq = {0: 1, 1: 1}  # neither hello reached the log
    for step in range(1, 4):
        for r in (0, 1):
            ranks.step(r, step, T0 + step * 0.1)
        ranks.tick(0.1)
    core.recorder.close()
    hub = _restart(path, now=5000.0)
    try:
        ranks = Ranks(hub.core, now=5000.0)
        ranks.seq = {0: 10, 1: 10}
        for _ in range(24):  # 12 s: rank 0 beats at step 3 (stuck), rank 1 says nothing
            ranks.beat(0, 3)
            ranks.tick(0.5)
        assert [(r, v) for r, v, _ in _verdicts(hub.core)] == [(1, "silent"), (0, "stalled")]
    finally:
        hub.close()


def test_a_restart_does_not_judge_a_cleared_straggler_again(tmp_path):
    # The restarted hub holds the logged steps of windows the dead hub already scored: it must
    # not score them again (and call rank 1 a straggler anew, long after it was cleared).
    path = tmp_path / "run.jsonl"
    core, ranks = _two_ranks(path)
    for step in range(1, 101):
        for r in (0, 1):
            slow = r == 1 and 20 <= step < 50
            ranks.send(schema.Step(rank=r, step=step, step_s=0.1, self_s=0.09 if slow else 0.02, t=T0 + step))
        ranks.tick(0.1)
    core.recorder.close()
    before = [(r, v) for r, v, _ in _verdicts(core)]
    assert before == [(1, "straggler"), (1, "straggler_cleared")]
    hub = _restart(path, now=5000.0)
    try:
        ranks = Ranks(hub.core, now=5000.0)
        ranks.seq = {0: 1000, 1: 1000}
        for step in range(101, 131):  # and it goes on judging new windows as before
            for r in (0, 1):
                ranks.send(schema.Step(rank=r, step=step, step_s=0.1, self_s=0.09 if r == 0 else 0.02, t=T0 + step))
            ranks.tick(0.1)
        assert [(r, v) for r, v, _ in _verdicts(hub.core)] == [*before, (0, "straggler")]
    finally:
        hub.close()


def _beats(ranks, seconds: float, phases: dict[int, str]) -> None:
    """Heartbeats after step 5, every 0.5 s for ``seconds``, each rank in its phase."""
    for _ in range(int(seconds / 0.5)):
        for r, phase in phases.items():
            ranks.send(schema.Heartbeat(rank=r, step=5, phase=phase, t=T0 + ranks.now, mono=ranks.now))
        ranks.tick(0.5)


def test_a_rank_evaluating_or_saving_is_given_longer_before_it_counts_as_stalled():
    from pardash.telemetry.analysis import LivenessConfig

    core = HubCore(run_id=RUN)
    ranks = Ranks(core, now=100.0)
    ranks.start(steps=5)

    beats = functools.partial(_beats, ranks)

    # 30 s: rank 0 evaluates, rank 1 waits for it (in a barrier, after its step: "data").
    beats(30, {0: "eval", 1: "data"})
    assert _verdicts(core) == []
    # An evaluation that never ends is a hang too, only later.
    beats(LivenessConfig().busy_stall_s, {0: "eval", 1: "data"})
    assert sorted((r, v) for r, v, _ in _verdicts(core)) == [(0, "stalled"), (1, "stalled")]


def test_a_stalled_rank_resumes_at_the_step_it_was_stuck_in():
    # Rank 1 stuck 15 s in step 6's data, then fast steps: by the hub's next look it had done
    # 6..14, and the verdict said "resumed at step 14" (rank 0 waited in step 6 too).
    core = HubCore(run_id=RUN)
    ranks = Ranks(core, now=100.0)
    ranks.start(steps=5)
    for _ in range(150):
        for r in (0, 1):
            ranks.beat(r, 5)
        ranks.tick(0.1)
    assert sorted(v for _, v, _ in _verdicts(core)) == ["stalled", "stalled"]
    for step in range(6, 15):
        for r in (0, 1):
            ranks.step(r, step, T0 + 20 + step * 0.01)
    for _ in range(3):
        ranks.tick(0.1)
    resumed = sorted((r, m) for r, v, m in _verdicts(core) if v == "resumed")
    assert resumed == [(0, "rank 0 resumed at step 6"), (1, "rank 1 resumed at step 6")]


@pytest.mark.parametrize("code", [0, 1])
def test_a_stalled_rank_that_steps_and_exits_between_two_looks_resumed_first(code):
    # A hang that ended just before the job did (its last steps and its exit between two of
    # the hub's looks): the hub said "stalled" and never "resumed" (an attach printed no
    # [resumed] line), and one that crashed right after read as a run that ended hung.
    from pardash.telemetry import analysis

    core = HubCore(run_id=RUN)
    ranks = Ranks(core, now=100.0)
    ranks.start(steps=3)
    for _ in range(150):
        for r in (0, 1):
            ranks.beat(r, 3)
        ranks.tick(0.1)
    assert sorted(v for _, v, _ in _verdicts(core)) == ["stalled", "stalled"]
    for step in (4, 5, 6):
        for r in (0, 1):
            ranks.step(r, step, T0 + 20 + step * 0.01)
    for r in (0, 1):
        ranks.send(schema.Event(rank=r, name="exit", code=code, step=6, t=T0 + 21))
    for _ in range(3):
        ranks.tick(0.1)
    resumed = sorted((r, m) for r, v, m in _verdicts(core) if v == "resumed")
    assert resumed == [(0, "rank 0 resumed at step 4"), (1, "rank 1 resumed at step 4")]
    assert all(r.stalled is None for r in core.state.ranks.values())
    assert analysis.whole_hang(core.state) == []


def test_a_restart_keeps_the_runs_trend_whatever_the_ranks_clocks_and_step_rate():
    # The run's loss trend read back from the log was cut by each record's own clock: ranks on
    # hosts whose clocks differ (rank 1's 0.25 s ahead here) alternated frames, a point of one
    # rank each, 2.5x the points the live hub made (and its stride grew that much sooner).
    import tempfile
    from pathlib import Path

    for skew, per_frame in ((0.0, 1), (0.25, 1), (0.25, 5), (-0.4, 3)):
        path = Path(tempfile.mkdtemp()) / "run.jsonl"
        core = HubCore(run_id=RUN, recorder=Recorder(path))
        ranks = Ranks(core, now=100.0)
        for r in (0, 1):
            ranks.hello(r)
        step = 0
        for _ in range(150):  # frames of 0.1 s, each with `per_frame` steps of both ranks
            for _ in range(per_frame):
                step += 1
                for r in (0, 1):
                    ranks.step(r, step, T0 + step * 0.1 / per_frame + (skew if r else 0.0))
            ranks.tick(0.1)
        core.recorder.close()
        live = core.state.trend.points()
        hub = _restart(path, now=5000.0)
        try:
            again = hub.core.state.trend.points()
            assert abs(len(again[0]) - len(live[0])) <= 2, (skew, per_frame, len(again[0]), len(live[0]))
            assert again[0][-1] == live[0][-1] == float(step)
            assert again[1][-1] == live[1][-1]  # the newest point: both ranks' last step
        finally:
            hub.close()


@pytest.mark.parametrize("fast", [False, True])
def test_the_runs_charts_start_at_its_first_step_however_many_steps_a_frame_holds(tmp_path, fast):
    # A run of 100 steps a second had steps 1-8 in its first frame, which carried each rank's
    # newest: the loss chart began at step 8 live, and at step 3 in a replay (which frames
    # from the log's first record), though the log held step 1.
    from pardash.telemetry.client import ReplaySource

    path = tmp_path / "run.jsonl"
    core, ranks = _two_ranks(path)
    for step in range(1, 9):
        msgs = [schema.Step(rank=r, step=step, step_s=0.01, loss=1.0 / step, t=T0 + step * 0.01, seq=step, run=RUN) for r in (0, 1)]
        if fast:  # the hub's batch path for steps
            assert core.ingest_batch([schema.encode(m) for m in msgs], ranks.now) == 2
        else:
            for m in msgs:
                ranks.send(m)
        ranks.seq = {0: step + 1, 1: step + 1}
    first = core.tick(ranks.now + 0.1)
    assert sorted((m.rank, m.step) for m in first.messages if isinstance(m, schema.Step)) == [(0, 1), (1, 1)]
    again = core.tick(ranks.now + 0.2)  # nothing new: the newest steps the first frame held back
    assert sorted((m.rank, m.step) for m in again.messages if isinstance(m, schema.Step)) == [(0, 8), (1, 8)]
    assert core.state.trend.points()[0] == [1.0, 8.0]
    assert [r.history["step"].values() for r in core.state.ranks.values()] == [[1.0, 8.0]] * 2
    ranks.step(0, 9, T0 + 0.09)  # from then on each frame carries the newest
    ranks.step(0, 10, T0 + 0.10)
    assert [m.step for m in core.tick(ranks.now + 0.3).messages if isinstance(m, schema.Step)] == [10]
    core.recorder.close()

    hub = _restart(path, now=5000.0)
    try:
        assert hub.core.state.trend.points()[0][0] == 1.0  # read back from the log
        # ... and no rank's newest step is held for a frame (each restart added its last point again)
        assert not [m for m in hub.core.tick(5000.1).messages if isinstance(m, schema.Step)]
        assert hub.core.state.ranks[0].history["step"].values().count(10.0) == 1
    finally:
        hub.close()
    replay = ReplaySource(str(path))
    replay.seek(replay.t_end - replay.t_start)
    assert replay.state.trend.points()[0][0] == 1.0


def test_a_job_relaunched_on_a_restarted_hub_is_not_taken_for_a_second_job(tmp_path):
    # The restarted hub reads its log back at `now`: every rank's last word dates from then,
    # and a relaunched job's rank 0 (a new pid, restart 0) within seconds of it read as "two
    # jobs share run id r". A rank heard from since, whose process still sends, does.
    path = tmp_path / "run.jsonl"
    core, ranks = _two_ranks(path)
    ranks.start(3)
    core.recorder.close()
    hub = _restart(path, now=500.0)
    try:
        relaunched = schema.Hello(run=RUN, rank=0, seq=0, world_size=2, pid=900, strategy="ddp", t=T0 + 600)
        assert hub.core.ingest_bytes(schema.encode(relaunched), 500.5)
        beat = schema.Heartbeat(run=RUN, rank=1, seq=10, step=3, phase="forward", t=T0 + 601, mono=501.0)
        assert hub.core.ingest_bytes(schema.encode(beat), 501.0)  # rank 1's process, still sending
        def shared():
            return [e.message for e in hub.core.state.events if e.name == "warning" and "still sends as it" in e.message]

        assert shared() == []
        second = schema.Hello(run=RUN, rank=1, seq=0, world_size=2, pid=901, strategy="ddp", t=T0 + 602)
        assert hub.core.ingest_bytes(schema.encode(second), 501.5)
        (warning,) = shared()
        assert warning.startswith("rank 1: pid 901 says it is rank 1 while pid 101 still sends as it")
    finally:
        hub.close()


def test_the_time_after_an_evaluation_counts_from_its_end_not_from_the_last_step():
    # After step 5 rank 0 validates for 8 s, then saves for 2 s more (not a busy phase its
    # heartbeat names) while rank 1 sits in a barrier: "ranks 0-1 stalled in data after step
    # 5 (9 s without progress)", the evaluation's 8 s counted once it was over.
    core = HubCore(run_id=RUN)
    ranks = Ranks(core, now=100.0)
    ranks.start(steps=5)

    beats = functools.partial(_beats, ranks)

    beats(8, {0: "eval", 1: "data"})
    beats(4, {0: "data", 1: "data"})
    assert _verdicts(core) == []
    # ... and a hang after it is still found, as long after the evaluation as after a step.
    beats(4, {0: "data", 1: "data"})
    assert sorted((r, v) for r, v, _ in _verdicts(core)) == [(0, "stalled"), (1, "stalled")]
