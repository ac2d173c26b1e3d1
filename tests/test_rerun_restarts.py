"""A job run again under a run's id, after a job torchrun restarted, has restarts of its own
(review 254, finding 2b): its torchrun counts them from 0, where the hub carried the first job's
count over and noted none of the second job's. Its attempts were never split, so a second job
that crashed, was restarted by torchrun and finished read as failed: the hub alone's end line
("the job has ended: rank 1 exited with code 1 at step 50 ...; ranks 0-1 finished") and
`pardash report` ("root cause: rank 1 exited ..." beside "exits: none with an error in the last
attempt").

Restarts over several jobs in one log are counted for the run, the jobs' added up: a rank's
``restarts`` (the report's column and "torchrun restarted the job 2x", the TUI's count, and
Prometheus' pardash_job_restarts_total, which may never go down) is every torchrun restart of
it the hub saw under the run's id."""

import json
import re
import signal
import subprocess
import sys

import pytest

from pardash.telemetry import schema
from pardash.telemetry.failures import failure_summary, recovered_failures
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.recorder import Recorder
from pardash.telemetry.report import build_report

from helpers import pardash_env, wait_for

CRASH = "injected crash on rank 0 at step 50 (--inject-crash)"


@pytest.mark.slow
def test_a_job_run_again_under_the_run_id_has_its_own_torchrun_restarts(tmp_path):
    # The reviewer's commands: a hub run alone, and twice the same torchrun --max-restarts 1 of
    # the bundled trainer, its rank crashing at step 50 in each job's first attempt. (Each job
    # saves to a folder of its own: one resuming from the other's last save took no step.) One
    # rank a job: the restarts and the end are the job's, said alike of one rank or of two
    # (the reviewer's ran 2; 8 rank starts of torch were half of them).
    err, log = tmp_path / "hub.err", tmp_path / "t.jsonl"
    with open(err, "w") as fh:
        hub = subprocess.Popen(
            [sys.executable, "-m", "pardash", "hub", "--run-id", "ha1", "--log", str(log), "--no-registry", "--prometheus", "0"],
            stdout=subprocess.PIPE, stderr=fh, text=True, env=pardash_env(),
        )  # fmt: skip
    try:
        info = json.loads(hub.stdout.readline())
        env = pardash_env(PARDASH_ENDPOINT=info["ingest"], PARDASH_RUN_ID="ha1")
        for job in (1, 2):
            done = subprocess.run(
                [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", "--max-restarts", "1",
                 "-m", "pardash.trainer.train", "--strategy", "ddp", "--model", "mlp", "--steps", "80",
                 "--checkpoint-dir", str(tmp_path / f"ck{job}"), "--checkpoint-every", "20", "--inject-crash", "0@50"],
                env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr[-2000:]
            wait_for(lambda: err.read_text().count("the job has ended") == job)
    finally:
        hub.send_signal(signal.SIGINT)
        try:
            code = hub.wait(30)
        finally:
            if hub.poll() is None:  # (never left behind)
                hub.kill()
                hub.wait()
    assert code == 0
    ended = f"the job has ended at step 80: rank 0 finished; log {log}; the hub serves on"
    failed = ("an attempt failed, and torchrun starts the job again (1 restart left): rank 0 exited with code 1 at step 50: "
              f"InjectedCrash: {CRASH}")  # fmt: skip
    # (torchrun's own count, each job's from 1, as its log says it)
    said = {ended: "ended, every rank finished", failed: "attempt failed", "torchrun restarted the job (restart 1)": "restarted"}
    told = []
    for line in err.read_text().splitlines():
        line = line.removeprefix("pardash hub: ")
        told += [what for start, what in said.items() if line.startswith(start)]
        told += ["run again"] if re.match(r"rank \d started again \(pid \d+", line) else []
    # Each job as the first: its failed attempt, its restart, its end with every rank finished.
    # (The job run again read "the job has ended: rank 0 exited with code 1 at step 50 ...; rank 0
    # finished", and no restart was said.)
    each = ["attempt failed", "restarted", "ended, every rank finished"]
    assert told == [*each, "run again", *each]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    notes = [(e["rank"], e["code"]) for e in records if e["kind"] == "event" and e["name"] == "restart"]
    assert sorted(notes) == [(0, 1), (0, 1)]  # torchrun's own count, each job's from 0

    rep = build_report(str(log))
    assert rep["failure"] is None and rep["exits"] == []
    assert [(f["rank"], f["step"], f["then"]) for f in rep["recovered"]] == [(0, 50, "restarted by torchrun")] * 2
    assert rep["job_restarts"] == 2 and [r["restarts"] for r in rep["ranks"]] == [2]  # the run's, both jobs'
    from pardash.telemetry.report_render import render_text

    assert "torchrun restarted the jobs 2x (--max-restarts, over the 2 jobs of the log)" in render_text(rep)  # (not "the job 2x")


def _hello(rank: int, pid: int, restart: int, t: float) -> schema.Hello:
    return schema.Hello(run="r", rank=rank, seq=0, world_size=2, pid=pid, strategy="ddp", restart=restart, max_restarts=1, t=t)


def _attempt(core: HubCore, pids: tuple[int, int], restart: int, t: float, stalled: int | None) -> float:
    """One attempt of a job of 2 ranks (torchrun's ``restart``), fed to ``core`` as the ranks and
    the hub say it: 30 steps; then, with ``stalled`` a rank, that rank stalls in its data, the
    other's collective times out and torchrun stops it; else both finish. Its last time."""
    for rank in (0, 1):
        core.ingest(_hello(rank, pids[rank], restart, t), t)
    for s in range(1, 31):
        for rank in (0, 1):
            core.ingest(schema.Step(run="r", rank=rank, seq=s, step=s, step_s=0.1, samples=4, t=t + s / 10), t + s / 10)
    t += 5
    if stalled is None:
        for rank in (0, 1):
            core.ingest(schema.Event(run="r", rank=rank, seq=31, name="exit", code=0, step=30, t=t), t)
        return t
    waiter = 1 - stalled
    core.verdict(schema.Verdict(rank=stalled, verdict="stalled", cause="data", step=30, t=t,
                                message=f"rank {stalled} stalled in data after step 30 (5 s without progress)"))  # fmt: skip
    core.verdict(schema.Verdict(rank=waiter, verdict="stalled", cause="backward", step=30, t=t,
                                message=f"rank {waiter} stalled in backward after step 30 (5 s without progress)"))  # fmt: skip
    timeout = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 12000ms for recv"
    t += 10
    core.ingest(schema.Event(run="r", rank=waiter, seq=31, name="error", message=timeout, step=31, t=t), t)
    core.ingest(schema.Event(run="r", rank=waiter, seq=32, name="exit", code=1, step=31, t=t), t)
    core.ingest(schema.Event(run="r", rank=stalled, seq=-1, name="exit", code=-15, t=t + 0.2,
                             message=f"torchrun: rank {stalled} killed by signal 15 (SIGTERM)"), t + 0.2)  # fmt: skip
    return t + 1


def test_each_jobs_restart_is_judged_with_the_hang_its_own_attempt_ended_in(tmp_path):
    # Two jobs under one run id, each hung in its first attempt (job 1: rank 1 stalled in its data,
    # rank 0's collective timed out; job 2 the other way round), restarted by torchrun, finished.
    # Each failure torchrun recovered from names the rank its own hang waited for: the hang of a
    # restart is kept by the run's count (job 2's restart 1 is the run's second), not torchrun's.
    log = tmp_path / "run.jsonl"
    core = HubCore(run_id="r", recorder=Recorder(log))
    t = _attempt(core, (10, 11), 0, 1.0e9, stalled=1)
    t = _attempt(core, (20, 21), 1, t, stalled=None)
    t = _attempt(core, (30, 31), 0, t + 5, stalled=0)  # run again: a new torchrun, counting from 0
    _attempt(core, (40, 41), 1, t, stalled=None)
    core.recorder.close()
    assert [r.restarts for r in core.state.ranks.values()] == [2, 2]
    assert failure_summary(core.state) is None
    for rep in (recovered_failures(core.state), build_report(str(log))["recovered"]):
        assert [(f["then"], [w["rank"] for w in f.get("waited_for") or []]) for f in rep] == [
            ("restarted by torchrun", [1]), ("restarted by torchrun", [0])
        ]
        assert rep[1]["line"].startswith("rank 0 stalled in data after step 30 (the likely cause of the hang); rank 1 exited with code 1")
