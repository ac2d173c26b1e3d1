"""A restarted hub scores the windows the dead hub left in its log against the bar the dead hub
had then, not the bar of the log's last steps (review 246, finding 2).

The absolute bar a straggler's excess must pass scales with the wall step time (a fifth of it,
at most 5 ms). Recovery once scored every window after the log's last verdict in one pass at
its end, against the bar of the log's last steps: a job whose step fell from 24 ms to 7 ms had
its 24 ms steps judged against a 1.4 ms bar (the live hub's was 4.8 ms), and the restart named
a straggler the live hub never had; a job whose step rose had a straggler's streak forgotten,
and the verdict the live hub would have given never came.

Driven as tests/test_recovery.py drives it: HubCore with a fake clock for the live hub, ticked
once each frame of the ranks' clock (as the live hub ticks each frame of its own), then
Hub.recover on what it had written, and HubCore.tick for the restarted one."""

from pardash.telemetry import schema
from pardash.telemetry.hub import Hub
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.recorder import Recorder

RUN = "r"
T0 = 1.0e9
"""Wall clock of the ranks (log ``t``) at their first step."""
FRAME_S = 0.1
"""The hub's frame (its default 10 Hz): it judges once a frame."""


class Job:
    """Two ranks stepping together, each step ``step_s`` long on the ranks' clock, talking to a
    hub that ticks once a frame of that clock (its own clock, ``now``, moves with it)."""

    def __init__(self, core: HubCore, *, now: float = 100.0, t: float = T0) -> None:
        self.core, self.now, self.t = core, now, t
        self.seq: dict[int, int] = {}
        self.next_frame = t + FRAME_S

    def send(self, msg: schema.Message) -> None:
        msg.run = RUN
        msg.seq = self.seq.get(msg.rank, 0)
        self.seq[msg.rank] = msg.seq + 1
        assert self.core.ingest_bytes(schema.encode(msg), self.now), self.core.rejected

    def hello(self) -> None:
        for r in (0, 1):
            self.send(schema.Hello(rank=r, world_size=2, pid=100 + r, strategy="ddp", t=self.t))

    def steps(self, first: int, last: int, *, step_s: float, self_s: tuple[float, float]) -> None:
        """Steps ``first`` to ``last`` of both ranks: a wall step of ``step_s``, rank 0's self
        time ``self_s[0]``, rank 1's ``self_s[1]``."""
        for step in range(first, last + 1):
            self.t += step_s
            self.now += step_s
            for r in (0, 1):
                self.send(schema.Step(rank=r, step=step, step_s=step_s, self_s=self_s[r], data_s=0.0, loss=1.0, t=self.t, mono=self.t - T0))
            if self.t >= self.next_frame:
                self.core.tick(self.now)
                self.next_frame = self.t + FRAME_S


def _stragglers(core: HubCore) -> list[tuple[int, str, int]]:
    return [(v.rank, v.verdict, v.step) for v in core.state.events if isinstance(v, schema.Verdict) and v.verdict.startswith("straggler")]


def _live(path) -> Job:
    return Job(HubCore(run_id=RUN, recorder=Recorder(path)))


def _restart(path, job: Job) -> tuple[Hub, Job]:
    """A hub restarted on ``path`` at the job's time, and the job carrying on with it."""
    job.core.recorder.close()  # (the dead hub's log, all of it written)
    hub = Hub(run_id=RUN, log_path=str(path))
    assert hub.recover(now=job.now) > 0
    carried = Job(hub.core, now=job.now, t=job.t)
    carried.seq = dict(job.seq)
    return hub, carried


def test_a_restart_does_not_name_a_straggler_the_live_hub_did_not_when_the_step_fell_late(tmp_path):
    # The reviewer's run: 24 ms steps early on, 7 ms at the end. Rank 1's self time is 3 ms
    # over rank 0's: under the 4.8 ms bar of a 24 ms step (a fifth of it), and over the 1.4 ms
    # of a 7 ms step. The live hub judged the early windows at 24 ms and said nothing.
    path = tmp_path / "telemetry.jsonl"
    job = _live(path)
    job.hello()
    job.steps(1, 100, step_s=0.024, self_s=(0.005, 0.008))
    job.steps(101, 400, step_s=0.007, self_s=(0.005, 0.005))
    assert _stragglers(job.core) == []
    hub, _ = _restart(path, job)
    try:
        hub.core.tick(job.now)
        # Before: "rank 1 is a straggler (compute)" found at step 29, cleared at step 119, each
        # stamped with the restart's time, in the log, the launch's last line and the report.
        assert _stragglers(hub.core) == []
        assert all(r.straggler is None for r in hub.core.state.ranks.values())
        assert '"verdict"' not in path.read_text()
    finally:
        hub.close()


def test_a_restart_gives_the_straggler_verdict_the_live_hub_would_have_given(tmp_path):
    # Rank 1 is 3 ms slower than rank 0 from step 30, in 10 ms steps: over the 2 ms bar. Its
    # first window over the bar (steps 30-39) is a streak of one; the second names it. From
    # step 40 the steps take 30 ms, but the bar follows the step time's median over the last
    # scoring passes, so one slow window does not lift it: a hub that never stopped names
    # rank 1 at step 49. One killed at step 48 is restarted on its log and must say the same.
    def run(job: Job, *, kill_at: int | None, path) -> list[tuple[int, str, int]]:
        job.hello()
        job.steps(1, 29, step_s=0.010, self_s=(0.005, 0.005))
        job.steps(30, 39, step_s=0.010, self_s=(0.005, 0.008))
        hub = None
        if kill_at is None:
            job.steps(40, 60, step_s=0.030, self_s=(0.005, 0.008))
        else:
            job.steps(40, kill_at, step_s=0.030, self_s=(0.005, 0.008))
            hub, job = _restart(path, job)
            job.steps(kill_at + 1, 60, step_s=0.030, self_s=(0.005, 0.008))
        try:
            job.core.tick(job.now)
            return _stragglers(job.core)
        finally:
            if hub is not None:
                hub.close()

    never_stopped = run(_live(tmp_path / "a.jsonl"), kill_at=None, path=None)
    assert never_stopped == [(1, "straggler", 49)]
    # Before: the restart scored steps 30-39 against the bar of the log's last steps (30 ms:
    # 5 ms), found rank 1 under it, lost its streak, and never named it.
    restarted = run(_live(tmp_path / "b.jsonl"), kill_at=48, path=tmp_path / "b.jsonl")
    assert restarted == never_stopped
