"""A headless launch whose supervisor and then hub were killed outright (review 246, finding 3):
the launch gave up 5 s after the hub ("the hub has sent nothing for 5 s", exit 1), leaving
torchrun and the ranks training with nothing to stop them and no result.json. It stands for the
job's processes now: it says they train on unwatched, waits for them, and stops them on Ctrl-C
or SIGTERM."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from helpers import pardash_env, wait_for
from pardash.telemetry import registry, schema
from pardash.telemetry.logreader import load_log
from pardash.trainer import jobprocs

pytestmark = pytest.mark.slow

CHATTY = os.path.join(os.path.dirname(__file__), "scripts", "chatty.py")
UNWATCHED = "the ranks train on unwatched (torchrun pid "


def _start(tmp_path, *args, err):
    trainer = [] if "--" in args else ["--log-every", "0"]
    cmd = [sys.executable, "-m", "pardash", "launch", "--headless", "--log", str(tmp_path / "run.jsonl"),
           "--runs-dir", str(tmp_path / "runs"), "--every", "1", *trainer, *args]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=pardash_env(), cwd=tmp_path)


def _ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _steps(log) -> int:
    return sum(isinstance(m, schema.Step) for m in load_log(log)[0]) if log.exists() else 0


def _kill_supervisor_then_hub(p, tmp_path, said: Path) -> tuple[dict, list[psutil.Process]]:
    """Once the job has taken steps: SIGKILL to its supervisor, and once the launch has said it
    follows the ranks without it, SIGKILL to its hub; returns the run's registry entry and the
    job's processes, once the launch has said what became of the hub (or has ended)."""
    wait_for(lambda: _steps(tmp_path / "run.jsonl") >= 4, timeout_s=120, poll_s=0.1)
    (entry,) = registry.live_runs()
    os.kill(entry["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: _ended(entry["supervisor_pid"]), timeout_s=30)
    wait_for(lambda: "train on without it" in said.read_text(), timeout_s=60, poll_s=0.1)
    job = jobprocs.job_processes(entry["supervisor_pid"], entry["run_id"])
    assert len(job) >= 3  # torchrun and its two ranks
    os.kill(entry["pid"], signal.SIGKILL)
    wait_for(lambda: UNWATCHED in said.read_text() or p.poll() is not None, timeout_s=60, poll_s=0.1)
    return entry, job


@pytest.mark.parametrize("crash", [False, True], ids=["ranks-finish", "ranks-fail"])
def test_a_launch_whose_supervisor_and_hub_were_killed_waits_for_the_ranks_and_says_what_is_known(tmp_path, crash):
    # The ranks wait after their step 5 until the test says: the kills happen while they wait.
    steps, go = 12, tmp_path / "go"
    said = tmp_path / "launch.err"
    with open(said, "w") as err:
        p = _start(tmp_path, "--nproc", "2", "--", CHATTY, str(steps), str(go), "5", *(["8"] if crash else []), err=err)
    try:
        entry, job = _kill_supervisor_then_hub(p, tmp_path, said)
        # The launch has not given up on the job: it says once that the hub is gone too and the
        # ranks train on unwatched, naming torchrun's pid, and waits while they run.
        assert p.poll() is None, said.read_text()[-2000:]
        (torchrun,) = [q for q in job if "pardash.trainer.torchrun" in q.cmdline()]
        text = said.read_text()
        assert f"its hub (pid {entry['pid']}) is gone too" in text and f"{UNWATCHED}{torchrun.pid})" in text, text[-2000:]
        assert all(jobprocs.still_running(q) for q in job)
        go.touch()
        out, _ = p.communicate(timeout=120)
    finally:
        go.touch()
        if p.poll() is None:
            p.kill()
            p.communicate()
    err = said.read_text()
    # It returned once the job's processes had ended, not before.
    assert all(_ended(q.pid) for q in job)
    assert not jobprocs.job_processes(entry["supervisor_pid"], entry["run_id"])
    assert text.count(UNWATCHED) == err.count(UNWATCHED) == 1  # (said once)
    # The ranks' output after the hub went was printed as it came, and their stderr (apart from
    # it here: the launch's stdout is no terminal) passed on, a crash's traceback and all.
    end = 8 if crash else steps
    assert f"rank 1 step {end}" in out and f"rank 1 step {end}" in err, out[-2000:]
    if crash:
        assert "Traceback" in err.rpartition("train on unwatched")[2], err[-2000:]
    # Its end: torchrun's code (it went to another parent: torchrun wrote it in its log folder
    # as it ended), a last line that says what is known and where the rest is, and the run's
    # result.json.
    code = 1 if crash else 0
    assert p.returncode == code, err[-2000:]
    last = err.strip().splitlines()[-1]
    run_dir = Path(entry["run_dir"])
    assert last.startswith("pardash: the job's processes ended unwatched, its supervisor and hub gone: "), last
    assert "the log ends where the hub stopped (step " in last and f"their output to the end is in {run_dir / 'output.log'}" in last
    failure = "rank 0 failed: RuntimeError: crashed after step 8, as told; rank 1 failed: RuntimeError: crashed after step 8, as told"
    assert (failure if crash else "torchrun exited 0: every rank finished") in last and f"; exit code {code}; " in last, last
    result = json.loads((run_dir / "result.json").read_text())
    assert {k: result[k] for k in ("code", "stopped", "supervisor_gone", "ended_unwatched", "failure")} == {
        "code": code, "stopped": False, "supervisor_gone": "killed by SIGKILL", "ended_unwatched": True,
        "failure": failure if crash else None}  # fmt: skip


def test_a_sigterm_to_that_launch_still_stops_the_ranks(tmp_path):
    # The bundled trainer, far from its end: after the supervisor and the hub are killed, a
    # SIGTERM to the launch (`timeout`, a cancelled CI job) stops torchrun and the ranks.
    said = tmp_path / "launch.err"
    with open(said, "w") as err:
        p = _start(tmp_path, "--strategy", "ddp", "--nproc", "2", "--steps", "100000", err=err)
    try:
        entry, job = _kill_supervisor_then_hub(p, tmp_path, said)
        assert p.poll() is None, said.read_text()[-2000:]
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    err = said.read_text()
    assert p.returncode == 143, err[-2000:]
    assert "stopped (exit code 143)" in err, err[-2000:]
    assert all(_ended(q.pid) for q in job)
    result = json.loads((Path(entry["run_dir"]) / "result.json").read_text())
    assert (result["code"], result["stopped"], result["supervisor_gone"]) == (143, True, "killed by SIGKILL")


def test_torchruns_code_is_read_from_its_log_folder_and_unknown_without_it(tmp_path):
    # (torchrun killed outright writes nothing: the launch then says the outcome is not known, 1)
    from types import SimpleNamespace

    from pardash.launch import _torchrun_exit_code

    spec = SimpleNamespace(run_dir=str(tmp_path))
    assert _torchrun_exit_code(spec) is None
    (tmp_path / "torchrun").mkdir()
    for text, code in (("0\n", 0), ("143\n", 143), ("", None), ("garbage", None)):
        (tmp_path / "torchrun" / "exit_code").write_text(text)
        assert _torchrun_exit_code(spec) == code
