"""Review 300, one job watched by several people at once: `pardash attach` by the hub's address on
the job's machine offers Stop as an attach by id does; it takes a live run's log or folder, as
report, replay and export do; `--wait` lets a viewer start before its job; two viewers' Stops
at once are told apart; and `pardash ps` at 80 columns never shows two different jobs alike."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import signal
import socket
import subprocess
import sys
import time

import pytest
from helpers import TerminalOutput, free_ports, hub_alone, pardash_env, terminate, wait_for

from pardash import cli
from pardash.telemetry import registry
from pardash.telemetry.spawn import spawn_hub

pytestmark = pytest.mark.timeout(180)


def _stand_in_supervisor(run: str) -> subprocess.Popen:
    """A process whose command line reads as run ``run``'s launch supervisor's (what
    jobprocs.supervisor_alive looks for) and which ends on SIGINT, as a supervisor's stop does."""
    code = "import signal, sys, time\nsignal.signal(signal.SIGINT, lambda *_: sys.exit(130))\ntime.sleep(600)\n"
    return subprocess.Popen([sys.executable, "-c", code, "pardash.trainer.supervisor", "--run-id", run], env=pardash_env())


@contextlib.contextmanager
def _launched_hub(tmp_path, run: str):
    """A hub as a launch starts it (its registry entry names its supervisor and run folder),
    with a stand-in supervisor; (its info, the supervisor)."""
    sup = _stand_in_supervisor(run)
    run_dir = tmp_path / run
    run_dir.mkdir()
    meta = {"supervisor_pid": sup.pid, "run_dir": str(run_dir), "strategy": "ddp", "world_size": 2}
    hub, info = spawn_hub(["--run-id", run, "--log", str(run_dir / "telemetry.jsonl"), "--meta", json.dumps(meta)],
                          env=pardash_env(PARDASH_CURVE_DIR=None), stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        yield info, sup
    finally:
        terminate(hub)
        terminate(sup)


# -- 1. attached by the hub's address on the job's own machine: Stop is offered -----------------


def test_a_tui_attached_by_the_hubs_address_on_the_jobs_machine_offers_stop(tmp_path):
    # `q` printed "stopped watching; the run goes on" with no Leave dialog, where an attach by
    # the run's id offered Stop and Detach: the supervisor was read only from an entry found by id.
    with _launched_hub(tmp_path, "addr-run") as (info, sup):
        main, tty = pty.openpty()
        p = subprocess.Popen([sys.executable, "-m", "pardash", "attach", info["ingest"]], stdin=tty, stdout=tty, stderr=tty,
                             env=pardash_env(PARDASH_CURVE_DIR=None, TERM="xterm-256color", COLUMNS="120", LINES="40"))  # fmt: skip
        os.close(tty)
        screen = TerminalOutput(main)
        try:
            wait_for(lambda: b"addr-run" in screen.data, timeout_s=60)  # (the dashboard, its title naming the run)
            os.write(main, b"q")
            wait_for(lambda: b"Stop the job" in screen.data or p.poll() is not None, timeout_s=60)
            offered = b"Stop the job" in screen.data and b"Detach" in screen.data
            if p.poll() is None:
                os.write(main, b"d")  # Detach: the job goes on
            code = p.wait(60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        out = screen.done().decode(errors="replace")
        assert offered, out[-3000:]
        assert code == 0 and sup.poll() is None, out[-3000:]  # (detached: the job was not stopped)


def test_a_hub_of_the_same_run_id_elsewhere_is_not_the_jobs():
    # The entry is taken only for this machine's hub of that run, at that port: a stop from a
    # viewer of another machine's hub must not reach a job here.
    entry = {"run_id": "same-id", "pid": os.getpid(), "started": time.time(), "ingest": "tcp://127.0.0.1:50870",
             "updates": "tcp://127.0.0.1:50871", "snapshot": "tcp://127.0.0.1:50872", "supervisor_pid": os.getpid()}  # fmt: skip
    registry.register(entry)
    assert registry.serving_here("same-id", "tcp://127.0.0.1:50870")["supervisor_pid"] == os.getpid()
    assert registry.serving_here("same-id", f"tcp://{socket.gethostname()}:50870") is not None
    assert registry.serving_here("same-id", "tcp://127.0.0.1:50873") is None  # another port: another hub
    assert registry.serving_here("other-id", "tcp://127.0.0.1:50870") is None
    assert registry.serving_here("same-id", "tcp://192.0.2.1:50870") is None  # (TEST-NET-1: no address of this machine)


# -- 2. a live run's log or folder -------------------------------------------------------------


def _attach_headless(*args: str, cwd=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pardash", "attach", "--headless", "--every", "60", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env(), cwd=cwd)  # fmt: skip


def _watched(att: subprocess.Popen) -> tuple[str, str]:
    """The first line an attach printed, and its stderr once Ctrl-C has ended it."""
    try:
        said = att.stdout.readline()
    finally:
        att.send_signal(signal.SIGINT)
        _, err = att.communicate(timeout=30)
    return said, err


@pytest.mark.parametrize("given", ["log", "folder", "relative"])
def test_attach_takes_a_live_runs_log_or_folder(tmp_path, given):
    # "no live run '/path/job1.jsonl'; pardash ps lists the live ones", of the log ps listed as running.
    (tmp_path / "job1").mkdir()
    log = tmp_path / "job1" / "telemetry.jsonl"
    proc, _ = hub_alone(log, "job1-run")
    try:
        target = {"log": str(log), "folder": str(tmp_path / "job1"), "relative": "job1/telemetry.jsonl"}[given]
        said, err = _watched(_attach_headless(target, cwd=tmp_path))
    finally:
        proc.terminate()
        proc.wait(30)
    assert said == "pardash: watching run job1-run\n", (said, err)
    assert "(`pardash attach job1-run` watches it again)" in err, err


def test_attach_of_a_folder_holding_two_live_runs_logs_names_both(tmp_path):
    # Review 305: two runs given --log in one folder: the folder attached to the newest, with no
    # word of the other.
    (tmp_path / "two").mkdir()
    hubs = [hub_alone(tmp_path / "two" / f"{name}.jsonl", f"{name}-run")[0] for name in ("a", "b")]
    try:
        proc = subprocess.run([sys.executable, "-m", "pardash", "attach", "--headless", str(tmp_path / "two")], capture_output=True,
                              text=True, timeout=60, env=pardash_env())  # fmt: skip
    finally:
        for hub in hubs:
            terminate(hub)
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr == (f"pardash: error: {tmp_path / 'two'} holds the logs of 2 live runs (a-run, b-run): attach one by its "
                           "id or its log\n")  # fmt: skip


def test_attach_of_a_log_no_live_run_records_says_where_it_is_read_instead(tmp_path):
    log = tmp_path / "old run.jsonl"
    log.write_text('{"kind": "event"}\n')
    proc = subprocess.run([sys.executable, "-m", "pardash", "attach", "--headless", str(log)], capture_output=True, text=True,
                          timeout=60, env=pardash_env())  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr == (f"pardash: error: {log}: no live run of yours records this log (its run is over, or its hub runs on "
                           f"another machine): `pardash replay '{log}'` shows it, `pardash report '{log}'` sums it up\n")  # fmt: skip


# -- 3. --wait: a viewer started before its job ------------------------------------------------


@pytest.mark.parametrize("how", ["prefix", "newest", "address", "log"])
def test_attach_wait_waits_for_a_run_started_after_it(tmp_path, how):
    # With nothing running it exited 2 at once, and with no hub at the address it gave up after 5 s.
    before, _ = hub_alone(tmp_path / "before.jsonl", "live-before")  # (a run live already: not the one waited for)
    port = free_ports()[0]
    # (log: review 305, --wait with a log not yet written failed at once, "no such log or run folder")
    target = {"prefix": ["late-"], "newest": [], "address": [f"tcp://127.0.0.1:{port}"], "log": [str(tmp_path / "late.jsonl")]}[how]
    att = _attach_headless("--wait", *target)
    hub = None
    try:
        first = att.stderr.readline()
        cmd = [sys.executable, "-m", "pardash", "hub", "--run-id", "late-run", "--log", str(tmp_path / "late.jsonl")]
        hub = subprocess.Popen(cmd + (["--port", str(port)] if how == "address" else []), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=pardash_env())  # fmt: skip
        said, err = _watched(att)
    finally:
        for proc in (hub, before, att):
            if proc is not None:
                terminate(proc)
    waited = {"prefix": "run late- to appear...", "address": f"the hub at tcp://127.0.0.1:{port} to answer...",
              "log": f"a live run to record {tmp_path / 'late.jsonl'}...",
              "newest": "a new run to appear (1 live already: `pardash attach` without --wait watches the newest)..."}[how]  # fmt: skip
    assert first == f"pardash attach: waiting for {waited}\n", first
    assert said.startswith("pardash: watching run late-run"), (said, err)
    assert att.returncode == 130 and "stopped watching; the run goes on" in err, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_attach_wait_stopped_before_the_run_appears_says_so(tmp_path, sig):
    att = _attach_headless("--wait", "never-run")
    assert att.stderr.readline() == "pardash attach: waiting for run never-run to appear...\n"
    att.send_signal(sig)
    out, err = att.communicate(timeout=30)
    assert (att.returncode, out, err) == (128 + sig, "", "pardash attach: stopped before the run appeared\n")


def test_attach_wait_says_at_once_what_waiting_cannot_mend(tmp_path):
    # A run that is over (its folder under --runs-dir) is never coming: where its record is, at once.
    (tmp_path / "runs" / "over-run").mkdir(parents=True)
    (tmp_path / "runs" / "over-run" / "telemetry.jsonl").write_text('{"kind": "event"}\n')
    proc = subprocess.run([sys.executable, "-m", "pardash", "attach", "--headless", "--wait", "over-run"], capture_output=True,
                          text=True, timeout=60, env=pardash_env(), cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.startswith("pardash: error: run over-run is over (no hub serves it now)"), proc


# -- 4. ps at 80 columns -----------------------------------------------------------------------


def _ps_at(columns: int) -> list[str]:
    """`pardash ps` in a terminal ``columns`` wide."""
    import fcntl
    import struct
    import termios

    main, tty = pty.openpty()
    fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "pardash", "ps"], stdin=tty, stdout=tty, stderr=tty, env=pardash_env(COLUMNS=None))
    os.close(tty)
    out = TerminalOutput(main)
    assert proc.wait(60) == 0
    return out.done().decode().replace("\r\n", "\n").splitlines()


ENDS = {"ingest": "tcp://127.0.0.1:50880", "updates": "tcp://127.0.0.1:50881", "snapshot": "tcp://127.0.0.1:50882"}
TRAINER = ["python", "-m", "pardash.trainer.train"]


def test_ps_at_80_columns_never_shows_two_different_jobs_alike():
    # Two jobs started the same second both read `python -m pardash.trainer…`, STRATEGY left out
    # and COMMAND cut before the flags that differ.
    progress = {"step": 120, "steps": 200, "samples_per_s": 1234.0, "ranks": {"running": 2}, "t": time.time()}
    script = ["python", "train.py", "--data", "/datasets/imagenet/train", "--epochs", "90", "--lr"]
    commands = {
        "20261207-081500-1a2b": [*TRAINER, "--steps", "200", "--strategy", "ddp", "--model", "mlp"],
        "20261207-081500-3c4d": [*TRAINER, "--steps", "200", "--strategy", "fsdp", "--model", "mlp"],
        "20261207-081500-5e6f": [*script, "0.1"],
        "20261207-081500-7a8b": [*script, "0.01"],
    }
    for run, command in commands.items():
        registry.register({"run_id": run, "pid": os.getpid(), **ENDS, "curve": False, "strategy": "ddp", "world_size": 2,
                           "log": f"/work/runs/{run}/telemetry.jsonl", "command": command, "progress": progress})  # fmt: skip
    lines = _ps_at(80)
    head, *rest = lines
    at = head.index("COMMAND")
    shown = {r.split()[0]: r[at:] for r in rest if r.startswith("2026")}
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    assert len(set(shown.values())) == 4, "\n".join(lines)
    # The bundled trainer's: what it trains first, not `python -m pardash.trainer.train`
    assert shown["20261207-081500-1a2b"].startswith("trainer --strategy ddp --"), "\n".join(lines)
    assert shown["20261207-081500-3c4d"].startswith("trainer --strategy fsdp --"), "\n".join(lines)
    # Two runs of one script that part at their end: shown from where they part.
    assert shown["20261207-081500-5e6f"] == "python train.py …--lr 0.1", "\n".join(lines)
    assert shown["20261207-081500-7a8b"] == "python train.py …--lr 0.01", "\n".join(lines)


def test_ps_command_cells_pinned_at_25_characters():
    # What each rank runs, in the room the reviewer's 80 columns left COMMAND.
    one = [*TRAINER, "--strategy", "ddp"]
    cells = cli._ps_command_cells([one, [*TRAINER, "--model", "gpt", "--strategy=fsdp"], ["python", "a.py"], None, one], 25)
    assert cells == ["trainer --strategy ddp", "trainer --strategy=fsdp …", "python a.py", "-", "trainer --strategy ddp"]
    long = ["python", "train.py", "--config", "configs/" + "x" * 40 + "_a.yaml"]
    other = long[:-1] + ["configs/" + "x" * 40 + "_b.yaml"]
    a, b = cli._ps_command_cells([long, other], 25)
    assert a != b and len(a) == len(b) == 25 and a.endswith("_a.yaml") and b.endswith("_b.yaml"), (a, b)
    # No terminal: whole, as before (`ps | cat` has every word for grep).
    assert cli._ps_command_cells([one], None) == [" ".join(one)]


# -- 5. two viewers' Stops at once ---------------------------------------------------------------


VIEWER = """
import json, os, sys, time
from pardash import cli
go, run, run_dir, sup = sys.argv[1:]
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.005)
sys.exit(cli._stop_supervised(run, {"run_dir": run_dir, "log": "L"}, int(sup)))
"""


def test_two_viewers_stopping_a_job_at_once_say_whose_stop_it_was(tmp_path):
    # Both printed "pardash: stopped run X" (the second's request replaced the first's), while
    # the launch credited one of them.
    sup = _stand_in_supervisor("both-run")
    run_dir = tmp_path / "both-run"
    run_dir.mkdir()
    go = tmp_path / "go"
    viewers = [subprocess.Popen([sys.executable, "-c", VIEWER, str(go), "both-run", str(run_dir), str(sup.pid)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env()) for _ in range(2)]  # fmt: skip
    try:
        for v in viewers:
            assert v.stdout.readline() == "ready\n"
        go.touch()  # both press Stop
        said = {v.pid: v.communicate(timeout=90)[0] for v in viewers}
    finally:
        terminate(sup)
        for v in viewers:
            terminate(v)
    assert all(v.returncode == 0 for v in viewers), said
    asked = json.loads((run_dir / "stop-request.json").read_text())["by"]
    first = int(asked.rpartition(" ")[2])
    (second,) = set(said) - {first}
    assert said[first] == "pardash: stopping run both-run...\npardash: stopped run both-run; log L\n", said
    assert said[second] == (f"pardash: run both-run is being stopped already, by another viewer (pardash attach, pid {first}); "
                            "waiting for it to end...\n"
                            f"pardash: run both-run stopped, by another viewer (pardash attach, pid {first}); log L\n"), said  # fmt: skip


def test_a_stop_request_left_by_a_job_before_is_not_another_viewers(tmp_path):
    # A request older than the job's supervisor (a job before, in the same folder) is replaced.
    (tmp_path / "stop-request.json").write_text(json.dumps({"by": "pardash attach, pid 7", "t": 1000.0}))
    assert cli._ask_to_stop(str(tmp_path), since=time.time() - 5) == ""
    assert json.loads((tmp_path / "stop-request.json").read_text())["by"] == f"pardash attach, pid {os.getpid()}"
    assert cli._ask_to_stop(str(tmp_path), since=time.time() - 5) == f"pardash attach, pid {os.getpid()}"
    assert sorted(os.listdir(tmp_path)) == ["stop-request.json"]  # (no temporary file left behind)
