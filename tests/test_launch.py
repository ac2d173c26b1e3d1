"""`pardash launch --headless` end to end: real torchrun, real gloo ranks, real hub, real log."""

import json
import os
import re
import subprocess
import sys

import pytest

from helpers import pardash_env
from pardash.telemetry import schema
from pardash.telemetry.logreader import load_log
from pardash.preflight import gpu_count as _gpu_count

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("shared_run")]  # one worker makes the shared launches


def _steps(msgs, rank):
    """``rank``'s steps in the order it sent them: the log's is the hub's, and steps the loop
    left held go out from the heartbeat thread on a socket of their own, so the loop's next
    ones can reach the hub first."""
    return sorted((m for m in msgs if isinstance(m, schema.Step) and m.rank == rank), key=lambda m: m.seq)


def test_fsdp_two_ranks_shard_parameters_and_report(shared_run):
    # (The session's shared launch, with the parallel tests: its 12 steps end before the
    # straggler detector's first window, steps 10 to 19, is complete, so load beside it cannot
    # make a straggler of a rank; test_detection's clean run is the timing test, run alone.)
    run = shared_run("fsdp")
    proc, msgs, n = run.proc, run.messages, run.steps
    assert "done" in proc.stdout
    for rank in (0, 1):
        steps = _steps(msgs, rank)
        assert [s.step for s in steps] == list(range(1, n + 1))
        for s in steps:
            assert s.loss is not None and s.step_s > 0
            assert None not in (s.data_s, s.forward_s, s.backward_s, s.optimizer_s)
            assert s.mem is not None and s.mem.params_full_bytes > 0
            assert abs(s.mem.params_bytes - s.mem.params_full_bytes / 2) <= 0.05 * s.mem.params_full_bytes
    exits = [m for m in msgs if isinstance(m, schema.Event) and m.name == "exit"]
    assert sorted((e.rank, e.code) for e in exits if e.seq >= 0) == [(0, 0), (1, 0)]
    # The launcher's note that they finished (torchrun ended with 0) is dropped when the rank's
    # own word came first; when it overtakes it (another connection), it says the same.
    assert all(e.code == 0 for e in exits if e.seq < 0)

    rep = subprocess.run(
        [sys.executable, "-m", "pardash", "report", str(run.log), "--format", "json"],
        capture_output=True, text=True, check=True, env=pardash_env(),
    )  # fmt: skip
    out = json.loads(rep.stdout)
    assert out["strategy"] == "fsdp" and out["world_size"] == 2 and out["lost_messages"] == 0
    assert out["stragglers"] == [] and out["exits"] == []
    assert [r["rank"] for r in out["ranks"]] == [0, 1]
    for r in out["ranks"]:
        assert r["steps"] == n and r["median_step_s"] > 0 and r["last_loss"] is not None
        assert r["params_bytes"] * 2 == pytest.approx(r["params_full_bytes"], rel=0.05)
    text = subprocess.run(
        [sys.executable, "-m", "pardash", "report", str(run.log)], capture_output=True, text=True, check=True
    ).stdout
    assert "lost messages      0" in text and "fsdp" in text


def test_ddp_holds_everything_and_learns(shared_run):
    run = shared_run("ddp")
    proc, msgs = run.proc, run.messages
    for rank in (0, 1):
        steps = _steps(msgs, rank)
        assert len(steps) == run.steps
        assert all(s.mem.params_bytes == s.mem.params_full_bytes for s in steps)
        first = sum(s.loss for s in steps[:5]) / 5
        last = sum(s.loss for s in steps[-5:]) / 5
        assert last < first
    assert any("step" in line and "samples/s" in line for line in proc.stdout.splitlines())
    # The trainer's own lines come through: rank 0 says what it runs and logs every 5th step.
    assert "ddp on 2 rank(s), gloo, cpu" in proc.stdout
    logged = [int(m) for m in re.findall(r"^step\s+(\d+)/40 ", proc.stdout, re.M)]
    assert logged == [1, *range(5, 41, 5)]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--strategy", "zero3"], "invalid choice"),
        (["--model", "resnet"], "invalid choice"),
        (["--nproc", "0"], "--nproc 0"),
        pytest.param(["--device", "cuda"], "no NVIDIA GPU", marks=pytest.mark.skipif(bool(_gpu_count()), reason="a GPU is visible")),
        (["--log", "/proc/nope/run.jsonl"], "cannot write the log"),
        (["--log", "logs/"], "--log logs/ is a folder; give a file: --log logs/telemetry.jsonl"),
        (["--log", "/etc/hostname/x/run.jsonl"], "/etc/hostname is a file, not a folder"),  # (it said "File exists")
        (["--log", "run.jsonl.gz"], "the hub writes plain JSON lines"),
        (["--prometheus-per-rank"], "--prometheus-per-rank goes with --prometheus PORT"),
        (["--master-port", "70000"], "argument --master-port: 70000 is not a port (0-65535)"),
        (["--telemetry-port", "65535"], "a hub takes PORT..PORT+2, so at most 65533"),
        (["--prometheus", "-1"], "argument --prometheus: -1 is not a port"),
        (["--every", "0"], "argument --every: 0 must be above 0"),
        (["--runs-dir", "/etc/hostname"], "--runs-dir /etc/hostname is a file; give a folder"),
        (["--nnodes", "0"], "--nnodes 0: need at least 1 node"),  # (it said "node rank must be in 0..nnodes-1")
        (["--nnodes", "2", "--node-rank", "2"], "--nnodes 2 --node-rank 2: node rank must be in 0..nnodes-1"),
        (["--nproc-per-node=2", "train.py"], "a script goes after `--`: pardash launch [OPTIONS] -- train.py"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--runs-dir", str(tmp_path / "runs"), *args],
        capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_attach_to_a_run_that_has_ended_says_where_its_record_is(tmp_path):
    # "no live run '<id>'; `pardash ps` lists the live ones" of yesterday's run, whose log is
    # right there under ./runs: report and replay read it.
    run = "20260101-120000-abcd"
    (tmp_path / "runs" / run).mkdir(parents=True)
    (tmp_path / "runs" / run / "telemetry.jsonl").write_text('{"kind":"hub","message":"hub started"}\n')

    def attach(*args):
        return subprocess.run([sys.executable, "-m", "pardash", "attach", "--headless", *args],
                              capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path)  # fmt: skip

    proc = attach(run[:15])
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"pardash: error: run {run} is over (no hub serves it now): `pardash report {run}` sums it up, "
                                   f"`pardash replay runs/{run}/telemetry.jsonl` shows it")  # fmt: skip
    proc = attach("20250101")  # no such run, live or not
    assert proc.returncode == 2 and "no live run '20250101'" in proc.stderr
    # Runs kept elsewhere (`launch --runs-dir`): attach looks where it is told.
    (tmp_path / "runs").rename(tmp_path / "kept")
    assert "no live run" in attach(run).stderr
    proc = attach(run, "--runs-dir", "kept")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"pardash: error: run {run} is over (no hub serves it now): `pardash report {run} --runs-dir kept` "
                                   f"sums it up, `pardash replay kept/{run}/telemetry.jsonl` shows it")  # fmt: skip


def test_a_log_that_holds_a_run_is_not_appended_to(tmp_path):
    # A second run appended to the first one's log would read as one run mixing both.
    log = tmp_path / "run.jsonl"
    log.write_bytes(b'{"kind":"event","name":"hub","message":"old run","run":"old","seq":-1,"t":1.0,"hseq":1}\n')
    before = log.read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--log", str(log), "--runs-dir", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "already holds a run" in lines[0], proc.stderr
    assert log.read_bytes() == before


def test_busy_master_port_is_refused(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "pardash", "launch", "--headless", "--master-port", str(port)],
            capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 2
    assert f"--master-port {port} is busy" in proc.stderr


def test_a_simulated_jobs_busy_port_is_refused_before_its_log_is_made(tmp_path):
    # It said "the hub did not start (exit code None)" and left an empty log in a run folder.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "pardash", "simulate", "--headless", "--keep-log", "--port", str(port),
             "--runs-dir", str(tmp_path / "runs")],
            capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"--port {port}: port {port} is busy" in lines[0], proc.stderr
    assert not (tmp_path / "runs").exists()


def test_a_launch_whose_hub_cannot_serve_where_asked_leaves_no_run_folder(tmp_path):
    # The hub's bind failed (an address not of this machine) and the launch said so, but left
    # runs/<id>/ with an empty log, output file and torchrun folder; the hint was "choose
    # another --prometheus PORT" for what the address was wrong.
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--steps", "3", "--insecure", "--prometheus", "0",
         "--prometheus-addr", "192.0.2.1", "--runs-dir", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=120, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "cannot serve /metrics on 192.0.2.1:0" in proc.stderr and "check --prometheus-addr" in proc.stderr
    assert "the hub did not start" in proc.stderr and "Traceback" not in proc.stderr
    assert list((tmp_path / "runs").iterdir()) == []


def test_a_hub_that_closes_its_ready_pipe_as_it_exits_is_told_with_its_exit_code():
    # The pipe's end comes a moment before poll() knows the process is gone: spawn_hub and the
    # launcher said "the hub did not start (exit code None)" (a hub that could not bind).
    from pardash.telemetry.spawn import exit_code, read_line

    # The child closes its ready pipe, then waits on a second pipe (its stdin) that this test
    # holds: it is provably alive after the ready pipe's end until the test lets it go (a
    # half-second sleep before its exit could pass on a loaded machine before poll() was asked).
    r, w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import os, sys; os.close({w}); sys.stdin.read(); raise SystemExit(2)"],
        pass_fds=(w,), stdin=subprocess.PIPE,
    )  # fmt: skip
    try:
        os.close(w)
        assert read_line(r, 30) == ""
        os.close(r)
        assert proc.poll() is None  # the pipe ended, the process still there
        assert exit_code(proc, grace_s=0.1) is None  # a process that lives on past the grace
        proc.stdin.close()  # now it exits: exit_code waits for it rather than saying None
        assert exit_code(proc, grace_s=60) == 2
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_fifo_log_is_taken_and_node_1_leaves_the_log_to_node_0(tmp_path):
    # A FIFO (a log piped into another tool) holds no run; node 1 of a job never writes the log
    # (node 0's hub does), so a --log shared by both nodes is not "already holding a run".
    from pardash.trainer.launcher import check_writable, new_spec

    from pardash.telemetry.recorder import Recorder

    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    opened = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so a writer may open it
    try:
        check_writable(str(fifo))
        rec = Recorder(fifo)
        assert rec.error == ""
        rec.close()
    finally:
        os.close(opened)
    shared = tmp_path / "shared.jsonl"
    shared.write_text('{"kind":"event","name":"hub","message":"node 0","run":"r","seq":-1,"t":1.0,"hseq":1}\n')
    spec = new_spec(log_path=str(shared), runs_dir=str(tmp_path / "runs"), node_rank=1, nnodes=2)
    assert spec.log_path == str(shared)
    with pytest.raises(Exception, match="already holds a run"):
        new_spec(log_path=str(shared), runs_dir=str(tmp_path / "runs"), node_rank=0, nnodes=2)


def test_a_torchrun_killed_by_a_signal_exits_as_the_shell_says():
    # Ctrl-C before torchrun's own handler is up kills it with SIGINT or SIGTERM: the launch
    # exits 128 + N, as a shell reports it, not the low byte of -N (241 for SIGTERM).
    from pardash.trainer.launcher import exit_status

    assert [exit_status(c) for c in (-15, -9, -2, 0, 1, 3)] == [143, 137, 130, 0, 1, 3]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["hub", "--frame-hz", "0"], "argument --frame-hz: 0 must be above 0"),
        (["hub", "--port", "70000"], "argument --port: 70000 is not a port (0-65535)"),
        (["hub", "--bind", "999.1.1.1", "--insecure", "--no-registry"], "check --bind"),
        (["simulate", "--port", "65534"], "a hub takes PORT..PORT+2"),
        (["simulate", "--rate", "nan"], "'nan' is not a finite number"),
        (["attach", "--headless", "tcp://127.0.0.1:70000"], "the hub's ingest port (1-65533)"),
        (["launch", "--headless", "--max-restarts", "-1"], "argument --max-restarts: -1 must be at least 0"),  # was torchrun's traceback
        # An empty path (an unset shell variable) meant the current folder, or every run id:
        (["report", ""], "argument log: empty; give a path"),
        (["launch", "--headless", "--runs-dir", ""], "argument --runs-dir: empty"),
        (["keys", "--dir", ""], "argument --dir: empty"),  # wrote the keys to the default folder
        (["hub", "--run-id", "../../etc"], "argument --run-id: '../../etc': a run id is"),
        # `srun python train.py`'s habit read "python: no such script"; a module's argument read
        # as a script to run after `--`, the -m dropped.
        (["launch", "--headless", "--", "python", "train.py"], "leave `python` out: pardash launch [OPTIONS] -- train.py [ITS ARGS]"),
        (["launch", "--headless", "--", "python3", "-m", "pkg.train"], "a module goes before `--`: pardash launch -m pkg.train -- ARGS"),
        (["launch", "--headless", "--", "python", "-u", "train.py"], "leave `python` out: pardash launch [OPTIONS] -- train.py [ITS ARGS]"),
        (["launch", "--headless", "train.py", "--", "-m", "x"], "a script goes after `--`: pardash launch [OPTIONS] -- train.py"),
        (["launch", "--headless", "-m", "pkg.train", "data.py"], "pardash launch [OPTIONS] -m pkg.train -- data.py [ITS ARGS]"),
        # each died on every rank, or trained on to a nan loss
        (["launch", "--headless", "--grad-clip", "nan"], "--grad-clip must be 0 or more, got nan"),
        (["launch", "--headless", "--seed", str(2**64 - 1)], "--seed must be from 0 to"),
        (["launch", "--headless", "--pg-timeout-s", "inf"], "--pg-timeout-s must be positive and at most"),
    ],
)
def test_bad_numbers_and_addresses_are_one_line_and_exit_2(tmp_path, args, needle):
    # Before, a port past 65535 reached bind() (a traceback) or wrapped round, a frame rate of
    # 0 divided by zero, and an address not of this machine was blamed on the port.
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", *args, *(["--log", str(tmp_path / "x.jsonl")] if args[0] == "hub" else [])],
        capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_without_a_terminal_launch_prints_progress_lines_and_ends(tmp_path):
    # In CI, under nohup or into a pipe nobody can see the TUI or press its `q`: the launch
    # used to write the TUI's escape codes into the file and wait for a key for ever.
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--strategy", "single", "--steps", "3", "--runs-dir", str(tmp_path / "runs")],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "no terminal here, so progress lines instead of the TUI" in proc.stderr
    assert "pardash: done, 1 rank(s), step 3" in proc.stdout and "\x1b[" not in proc.stdout
    (log,) = (tmp_path / "runs").glob("*/telemetry.jsonl")
    steps = [m for m in load_log(log)[0] if isinstance(m, schema.Step)]
    # (one process has no communication: none measured, where it said "comm 0" of it)
    assert len(steps) == 3 and all(m.comm_s is None for m in steps)
    replay = subprocess.run(
        [sys.executable, "-m", "pardash", "replay", *map(str, (tmp_path / "runs").glob("*/telemetry.jsonl"))],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert replay.returncode == 2 and "needs a terminal" in replay.stderr and "pardash report" in replay.stderr


def test_a_launch_with_telemetry_switched_off_says_so(tmp_path):
    # PARDASH_TELEMETRY=0 left in the environment: the launch showed and logged nothing, and
    # ended "no step taken", with no word of why.
    # (A script that prints its argv: the warning is the launch's, whatever it runs, and this
    # rank never imports torch.)
    env = dict(pardash_env(), PARDASH_TELEMETRY="0")
    script = os.path.join(os.path.dirname(__file__), "scripts", "argv_probe.py")
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--nproc", "1", "--runs-dir", str(tmp_path / "runs"), "--", script],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warning: PARDASH_TELEMETRY=0 in the environment: the ranks publish nothing" in proc.stderr
    assert '"argv": [' in proc.stdout  # the job ran


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--", "nope.py"], "nope.py: no such script"),
        (["--nproc", "2", "--"], "`--` with no script after it"),  # it ran the bundled trainer
        (["--", "-m", "pkg.train", "--lr", "1"], "a module goes before `--`: pardash launch -m pkg.train -- ARGS"),
        (["-m", "nope_mod", "--"], "-m nope_mod: no module 'nope_mod' here"),
        (["-m", "nope_mod", "--", "--lr", "3e-4"], "-m nope_mod: no module 'nope_mod' here"),  # not "--lr: no such script"
        (["-m", "a_pkg"], "-m a_pkg is a package with no __main__.py"),  # every rank failed: "cannot be directly executed"
        (["--strategy", "fsdp", "--steps", "5", "--", "train.py"], "--strategy, --steps: the bundled trainer's flags"),
        (["--inject-crash", "0@3", "--inject-crash", "1@4"], "--inject-crash given twice (0@3 and 1@4)"),  # 0@3 was dropped
        (["--", "shell.py"], "shell.py: python cannot run it (SyntaxError, line 2: invalid syntax)"),  # it started every rank
        (["--runs-dir", "/proc/x"], "; pass a writable --runs-dir DIR (or a --log PATH)"),  # it named --log, not given
        (["--nproc", "10000"], "--nproc 10000: that many processes, each a Python with torch"),  # (its dataset was too small)
        (["--nproc", "10000", "--", "train.py"], "--nproc 10000: that many processes"),  # (nothing stopped it)
        pytest.param(["--precision", "bf16"], "--precision bf16 needs a GPU and none is visible here",
                     marks=pytest.mark.skipif(bool(_gpu_count()), reason="a GPU is visible")),
    ],
)  # fmt: skip
def test_what_cannot_run_is_refused_before_the_job_starts(tmp_path, args, needle):
    # These used to start the hub, torchrun and every rank, to end in 40 lines of tracebacks.
    (tmp_path / "shell.py").write_text("#!/bin/sh\necho hi\n")
    (tmp_path / "a_pkg").mkdir()
    (tmp_path / "a_pkg" / "__init__.py").write_text("")
    cmd = [sys.executable, "-m", "pardash", "launch", "--headless", "--runs-dir", str(tmp_path / "runs"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_viewer_is_not_kept_alive_by_a_thread_spinning_on_a_dead_terminal():
    # A terminal closed under the TUI could leave Textual's input thread looping on it; Python
    # then waited for that thread at exit for ever, the viewer burning CPU with no terminal.
    code = (
        "import sys, threading, time, textual\n"
        "from pardash.cli import _no_thread_left_behind\n"
        "threading.Thread(target=lambda: time.sleep(3600)).start()\n"
        "sys.exit(_no_thread_left_behind(3))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], timeout=60, env=pardash_env())
    assert proc.returncode == 3
    # Nor when the command ended on an error (a write to the closed terminal, say): a viewer
    # left that way sat in Python's shutdown for half an hour.
    code = (
        "import sys, threading, time, textual\n"
        "from pardash import cli\n"
        "def broken(ns):\n"
        "    raise OSError(5, 'Input/output error')\n"
        "cli.cmd_ps = broken\n"
        "threading.Thread(target=lambda: time.sleep(3600)).start()\n"
        "sys.exit(cli.main(['ps']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], timeout=60, env=pardash_env(), capture_output=True, text=True)
    assert proc.returncode == 1 and "OSError: [Errno 5] Input/output error" in proc.stderr


def test_a_command_line_torchrun_refuses_starts_no_rank_and_stops_none(tmp_path):
    # torchrun's parser exits 2 before starting any rank (here a PET_ variable it takes as a
    # flag's default; a script's own `--log` did it before the rank command followed `--`):
    # pardash used to log every rank as stopped (-15).
    script = os.path.join(os.path.dirname(__file__), "scripts", "argv_probe.py")
    cmd = [sys.executable, "-m", "pardash", "launch", "--headless", "--nproc", "2",
           "--runs-dir", str(tmp_path / "runs"), "--", script, "--log", "foo.txt"]  # fmt: skip
    env = pardash_env(PET_NODE_RANK="x")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert "--node-rank/--node_rank: invalid int value: 'x'" in proc.stderr
    assert "exited with code" not in proc.stdout + proc.stderr
    [log] = (tmp_path / "runs").glob("*/telemetry.jsonl")
    exits = [line for line in log.read_text().splitlines() if '"name":"exit"' in line]
    assert exits == []


def test_version_names_pardash_and_torch():
    from importlib.metadata import version

    proc = subprocess.run([sys.executable, "-m", "pardash", "--version"], capture_output=True, text=True, timeout=60, env=pardash_env())
    assert proc.returncode == 0 and proc.stdout.strip() == f"pardash {version('pardash')} (torch {version('torch')})", proc


@pytest.mark.parametrize(
    ("rank_command", "named"),
    [(["pardash.trainer.autorun", "train.py", "--lr", "1"], "train.py"), (["pardash.trainer.autorun", "-m", "pkg.train"], "pkg.train")],
)
def test_torchruns_failure_summary_names_the_script_not_pardashs_wrapper(rank_command, named):
    # "pardash.trainer.autorun FAILED" where plain torchrun says "train.py FAILED".
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from pardash.trainer.torchrun import _name_the_script

    exc = ChildFailedError(name="pardash.trainer.autorun", failures={1: ProcessFailure(local_rank=1, pid=42, exitcode=1, error_file="")})
    _name_the_script(exc, ["x/torchrun.py", "--nproc-per-node", "2", "-m", "--", *rank_command])
    assert f"\n{named} FAILED\n" in str(exc) and "autorun" not in str(exc)
    bundled = ChildFailedError(name="pardash.trainer.train", failures=exc.failures)
    _name_the_script(bundled, ["x/torchrun.py", "-m", "--", "pardash.trainer.train", "--steps", "5"])
    assert "\npardash.trainer.train FAILED\n" in str(bundled)  # the bundled trainer keeps its name


def test_a_node_after_the_first_names_node_0s_hub_to_watch_and_for_the_log():
    # Node 1's supervisor killed: its launch said "log .../runs1/<id>/telemetry.jsonl" (never
    # written: node 0's hub keeps the log) and "`pardash attach <node 1's own id>`", which no
    # hub serves.
    from types import SimpleNamespace

    from pardash.launch import _log_of, _watch

    node1 = SimpleNamespace(remote_hub="tcp://10.0.0.1:29600", run_id="20261204-1", log_path="/runs1/20261204-1/telemetry.jsonl")
    assert (_watch(node1), _log_of(node1)) == ("tcp://10.0.0.1:29600", "kept by node 0's hub (tcp://10.0.0.1:29600)")
    node0 = SimpleNamespace(remote_hub="", run_id="20261204-0", log_path="/runs0/20261204-0/telemetry.jsonl")
    assert (_watch(node0), _log_of(node0)) == ("20261204-0", "/runs0/20261204-0/telemetry.jsonl")
    # With the job's keys: a hub with keys refused `pardash attach ID` as the launch printed it.
    keyed = SimpleNamespace(remote_hub="", run_id="20261204-2", curve_dir="/home/me/my keys")
    assert _watch(keyed) == "20261204-2 --curve-dir '/home/me/my keys'"


def test_a_zipapp_after_the_dashes_is_left_to_python(tmp_path):
    # Checked as source, a zipapp (python runs it, shebang or no extension) read as a binary.
    import zipapp

    from pardash.launch import _not_python

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "__main__.py").write_text("print('hi')\n")
    zipapp.create_archive(tmp_path / "src", tmp_path / "myapp", interpreter="/usr/bin/env python3")
    assert _not_python(str(tmp_path / "myapp")) == ""
    (tmp_path / "bad.py").write_bytes(b"\x00\x01binary")
    assert _not_python(str(tmp_path / "bad.py")).startswith(f"{tmp_path / 'bad.py'}: python cannot run it (")


def test_the_gpus_a_rank_can_have_are_those_cuda_lets_it_see(monkeypatch):
    # (a launch of more ranks than GPUs failed in every rank, "local rank 2 has no GPU of its
    # own", after the hub and torchrun had started; the count is checked first now)
    from pardash import launch

    monkeypatch.setattr(launch, "gpu_count", lambda: 8)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert launch.visible_gpus() == 8
    for seen, n in (("0,1", 2), ("", 0), ("-1", 0), ("GPU-5c1d,GPU-77aa,GPU-0f3e", 3), ("0,1,2,3,4,5,6,7,8,9", 8)):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", seen)
        assert launch.visible_gpus() == n, seen
