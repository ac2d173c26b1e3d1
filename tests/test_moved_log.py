"""A log its hub went on writing in another file (its folder vanished: NAME.restored-PID.jsonl;
its disk could still not take the last lines as the hub stopped: NAME.complete-PID.jsonl, the
whole log): the run's result.json names that file, as the launch's last line does, and
`report RUN_ID` / `report FOLDER` read it, not the log cut short (or gone) at the path asked for."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import pardash_env, wait_for
from pardash.recorded import find_log, run_folder_log
from pardash.telemetry import registry, schema
from pardash.telemetry.logreader import load_log
from pardash.telemetry.recorder import CONTINUED_AT
from pardash.trainer.supervisor import Supervisor

CHATTY = os.path.join(os.path.dirname(__file__), "scripts", "chatty.py")


def _steps(log) -> list[int]:
    if not Path(log).exists():
        return []
    return sorted(m.step for m in load_log(log)[0] if isinstance(m, schema.Step))


def _log_lines(path: Path, first: int, last: int) -> None:
    path.write_bytes(schema.encode_json_lines([schema.Step(run="r", rank=0, seq=s, step=s, t=1000.0 + s) for s in range(first, last + 1)]))


# --- report: a run folder (or run id) reads the log its hub went on in ---------------------------------


def test_a_run_folder_reads_the_complete_copy_over_its_log_cut_short(tmp_path, capsys):
    run = tmp_path / "runs" / "20260101-000000-abcd"
    run.mkdir(parents=True)
    _log_lines(run / "telemetry.jsonl", 1, 207)  # (its disk took no more: no line says where the rest went)
    copy = run / "telemetry.complete-7974.jsonl"
    _log_lines(copy, 1, 800)
    # No result.json (its supervisor killed outright), then one naming a log that is gone: the copy.
    assert run_folder_log(str(run)) == str(copy)
    (run / "result.json").write_text(json.dumps({"run_id": run.name, "code": 0, "log": str(tmp_path / "gone" / "l.jsonl")}))
    assert run_folder_log(str(run)) == str(copy)
    assert find_log(run.name, str(tmp_path / "runs")) == str(copy)
    assert _steps(find_log(str(run))) == list(range(1, 801))
    # The log result.json names, where it is there, is the one read (the file the launch named last).
    (run / "result.json").write_text(json.dumps({"run_id": run.name, "code": 0, "log": str(run / "telemetry.jsonl")}))
    assert run_folder_log(str(run)) == str(run / "telemetry.jsonl")
    capsys.readouterr()
    # The truncated log given by its path is read as given, with a word of the complete copy beside it.
    assert find_log(str(run / "telemetry.jsonl")) == str(run / "telemetry.jsonl")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{copy} beside it is a complete copy of {run / 'telemetry.jsonl'}" in err, err
    # ... and none of a file of that name that is no copy of it (another run's).
    _log_lines(copy, 3, 9)
    assert find_log(str(run / "telemetry.jsonl")) == str(run / "telemetry.jsonl")
    assert capsys.readouterr().err == ""


def test_a_run_folder_whose_log_went_on_beside_its_vanished_folder_reads_the_restored_log(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    restored = run / "l3.restored-10683.jsonl"
    _log_lines(restored, 1, 800)
    (run / "result.json").write_text(json.dumps({"run_id": "r", "code": 0, "log": str(tmp_path / "ldir3" / "l3.jsonl")}))
    assert run_folder_log(str(run)) == str(restored)  # (it said "the run's log .../l3.jsonl ... is not there; moved?")


# --- the supervisor: result.json names where the log was written at the end ---------------------------

HUB_WRITING_A_COPY = r"""
import json, os, signal, sys, time
run_dir, stem = sys.argv[1], sys.argv[2]
def stop(*_):
    # As a hub whose log's disk is still full as it stops: the whole log to a complete copy in
    # the run's folder, ending with the line that says where the log went on (recorder.py).
    copy = os.path.join(os.path.abspath(run_dir), f"{stem}.complete-{os.getpid()}.jsonl")
    with open(copy, "w") as fh:
        fh.write(json.dumps({"kind": "step", "rank": 0, "step": 1}) + "\n")
        fh.write(json.dumps({"kind": "event", "rank": -1, "name": "warning", "message":
            f"log {stem}.jsonl could not take its last 9 lines (No space left on device): %s{copy} (its 99 bytes and those lines)"}) + "\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
while True:
    time.sleep(0.05)
""".replace("%s", CONTINUED_AT)


def _supervisor(run_dir: Path, log: Path, hub) -> Supervisor:
    sup = Supervisor.__new__(Supervisor)
    sup.spec = SimpleNamespace(run_id="r-moved", run_dir=str(run_dir), log_path=str(log), viewer_pid=0, remote_hub="")
    sup._stopping = sup._gave_up = False
    sup._torchrun_killed = 0
    sup.hub_restarts = 0
    sup.hub = hub
    return sup


def test_the_result_names_the_complete_copy_the_hub_wrote_as_it_stopped(tmp_path):
    run_dir = tmp_path / "runs" / "r-moved"
    run_dir.mkdir(parents=True)
    hub = subprocess.Popen([sys.executable, "-c", HUB_WRITING_A_COPY, str(run_dir), "telemetry"], stdout=subprocess.PIPE, text=True)
    try:
        assert hub.stdout.readline() == "ready\n"
        _supervisor(run_dir, run_dir / "telemetry.jsonl", hub)._finish(0)
        assert hub.wait(10) == 0
    finally:
        hub.kill()
        hub.wait()
        hub.stdout.close()
    copy = run_dir / f"telemetry.complete-{hub.pid}.jsonl"
    assert copy.exists()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["log"] == str(copy) and result["code"] == 0
    assert not (run_dir / "result.json.tmp").exists()


def test_a_file_of_the_copys_name_that_says_nothing_of_the_log_is_not_named(tmp_path):
    # A hub killed outright writes no copy; a file of that name (another hub of that pid, long
    # ago) that does not say the log went on in it stays unnamed.
    run_dir = tmp_path / "r-moved"
    run_dir.mkdir()
    hub = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (run_dir / f"telemetry.complete-{hub.pid}.jsonl").write_text('{"kind": "step", "rank": 0, "step": 1}\n')
        _supervisor(run_dir, run_dir / "telemetry.jsonl", hub)._finish(0)
    finally:
        hub.kill()
        hub.wait()
    assert json.loads((run_dir / "result.json").read_text())["log"] == str(run_dir / "telemetry.jsonl")


def test_the_result_names_the_file_the_registry_says_the_log_went_on_in(tmp_path):
    run_dir = tmp_path / "r-moved"
    run_dir.mkdir()
    restored = run_dir / "l3.restored-10683.jsonl"
    hub = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    entry = registry.register({"run_id": "r-moved", "log": str(restored), "pid": hub.pid})
    try:
        _supervisor(run_dir, tmp_path / "ldir3" / "l3.jsonl", hub)._finish(0)
        assert hub.wait(10) == -signal.SIGTERM
    finally:
        hub.kill()
        hub.wait()
        registry.unregister(entry)
    assert json.loads((run_dir / "result.json").read_text())["log"] == str(restored)


# --- the reviewer's run (2b): the log's folder removed mid-run --------------------------------------


@pytest.mark.slow
def test_a_launch_whose_log_folder_vanished_names_the_restored_log_that_report_reads(tmp_path):
    # `rm -rf ldir3; touch ldir3` mid-run: the last line named runs/ID/l3.restored-PID.jsonl,
    # result.json still ldir3/l3.jsonl, and `report runs/ID` failed ("not there; moved?").
    ldir = tmp_path / "ldir3"
    ldir.mkdir()
    log, go = ldir / "l3.jsonl", tmp_path / "go"
    cmd = [sys.executable, "-m", "pardash", "launch", "--headless", "--log", str(log), "--runs-dir", "runs", "--every", "1",
           "--nproc", "1", "--", CHATTY, "40", str(go), "5"]  # fmt: skip
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env(), cwd=tmp_path)
    try:
        wait_for(lambda: len(_steps(log)) >= 5, timeout_s=120, poll_s=0.2)
        shutil.rmtree(ldir)
        ldir.touch()  # (a file where the folder was: the log's path cannot be reached)
        wait_for(lambda: list((tmp_path / "runs").glob("*/l3.restored-*.jsonl")), timeout_s=60, poll_s=0.2)
        (restored,) = (tmp_path / "runs").glob("*/l3.restored-*.jsonl")
        # (the hub's registry entry follows it, as the supervisor reads it at the end)
        wait_for(lambda: any(e.get("log") == str(restored) for e in registry.live_runs(prune=False)), timeout_s=30, poll_s=0.2)
        go.touch()
        out, err = p.communicate(timeout=240)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, err[-2000:]
    assert out.strip().splitlines()[-1].endswith(str(restored)), out[-1000:]
    run = restored.parent
    assert json.loads((run / "result.json").read_text())["log"] == str(restored)
    for what in ([str(run)], ["--runs-dir", "runs", run.name]):
        r = subprocess.run([sys.executable, "-m", "pardash", "report", "--format", "json", *what], capture_output=True, text=True,
                           env=pardash_env(), cwd=tmp_path, timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr
        rep = json.loads(r.stdout)
        assert os.path.samefile(rep["log"], restored) and [k["steps"] for k in rep["ranks"]] == [40], r.stdout[-1000:]
