"""A reader of pardash's output that goes away (`| head -1`, a pager quit early): every command
ends quietly, as a Unix tool does (exit 141, no BrokenPipeError traceback), after its own
clean-up; `launch` sees its job to the end instead and says so on stderr. Real processes on a
real pipe whose read end is closed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import pardash_env

DATA = Path(__file__).resolve().parent / "data"
SCRIPTS = Path(__file__).resolve().parent / "scripts"
READER_GONE = 141  # 128 + SIGPIPE, as the shell reports `seq 1000000 | head -1`'s seq


def _unread_pipe() -> int:
    """The write end of a pipe whose reader has already gone: the first write to it fails."""
    r, w = os.pipe()
    os.close(r)
    return w


def _pardash_unread(*args: str, cwd: Path, timeout_s: float = 60) -> tuple[int, str]:
    """Run ``pardash ARGS`` with stdout on a pipe nobody reads; (exit code, stderr). Its stderr
    goes to a file, not a pipe: a process it left behind (a hub) cannot hold the test up."""
    w = _unread_pipe()
    err = cwd / "stderr.txt"
    try:
        with open(err, "w") as fh:
            code = subprocess.run([sys.executable, "-m", "pardash", *args], stdout=w, stderr=fh,
                                  env=pardash_env(), cwd=cwd, timeout=timeout_s).returncode  # fmt: skip
    finally:
        os.close(w)
    return code, err.read_text()


LOG = str(DATA / "real_ddp2.jsonl")


@pytest.mark.parametrize(
    "args",
    [
        ["report", LOG],
        ["report", "--format", "json", LOG],
        ["report", "--format", "markdown", LOG],
        ["report", "--compare", LOG, str(DATA / "real_fsdp2.jsonl")],
        ["export", LOG, "--tensorboard", "tb"],
        ["ps"],
        ["ps", "--json"],
        ["keys", "--dir", "keys"],
        ["--version"],
    ],
    ids=lambda a: " ".join(x if "/" not in x else Path(x).name for x in a),
)
def test_a_command_whose_reader_went_away_ends_quietly(tmp_path, args):
    code, err = _pardash_unread(*args, cwd=tmp_path)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert code == READER_GONE, err


def test_an_attached_viewer_whose_reader_went_away_ends_quietly_and_leaves_the_run(tmp_path, hub):
    code, err = _pardash_unread("attach", "--headless", "--every", "0.2", hub.ingest_endpoint, cwd=tmp_path)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert code == READER_GONE
    assert not hub._stop  # only the viewer went


def test_a_simulation_whose_reader_went_away_before_its_first_line_stops_its_hub_and_ranks(tmp_path):
    # The start line, printed before the clean-up was in reach, failed: the hub served for
    # ever (the simulator with it, until its steps ran out), and held the shell's pipeline.
    from pardash.telemetry import registry

    code, err = _pardash_unread("simulate", "--headless", "--ranks", "2", "--steps", "100000", "--every", "0.2", cwd=tmp_path)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert code == READER_GONE
    assert registry.live_runs() == []  # its hub stopped (and took its entry with it)


def test_a_simulation_piped_into_head_ends_with_it(tmp_path):
    # `pardash simulate --headless | head -1`: head takes the start line and exits; the next
    # progress line ended in a BrokenPipeError's traceback.
    from pardash.telemetry import registry

    with open(tmp_path / "stderr.txt", "w") as err:
        sim = subprocess.Popen([sys.executable, "-m", "pardash", "simulate", "--headless", "--ranks", "2", "--steps", "100000",
                                "--every", "0.2"], stdout=subprocess.PIPE, stderr=err, env=pardash_env(), cwd=tmp_path)  # fmt: skip
    head = subprocess.Popen(["head", "-n", "1"], stdin=sim.stdout, stdout=subprocess.PIPE, text=True)
    assert sim.stdout is not None
    sim.stdout.close()  # head is its only reader
    first, _ = head.communicate(timeout=60)
    assert first.startswith("pardash: simulating 2 ranks")
    code = sim.wait(timeout=60)
    err = (tmp_path / "stderr.txt").read_text()
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert code == READER_GONE
    assert registry.live_runs() == []


@pytest.mark.slow
def test_a_launch_whose_reader_went_away_sees_its_job_to_the_end_and_says_so_on_stderr(tmp_path):
    # `pardash launch --headless ... | head -3`: the job must not die with the reader, nor the
    # launch (it supervises the job, and its exit code is the job's). It held the shell for
    # the rest of the job without a word, and its last line went nowhere.
    code, err = _pardash_unread("launch", "--headless", "--nproc", "1", "--runs-dir", "runs", "--every", "1",
                                "--", str(SCRIPTS / "chatty.py"), "20", cwd=tmp_path, timeout_s=240)  # fmt: skip
    assert "Traceback" not in err and "BrokenPipe" not in err, err[-3000:]
    assert code == 0, err[-3000:]
    (run,) = (tmp_path / "runs").iterdir()
    assert f"pardash: nothing reads this launch's output any more; the job goes on and this launch sees it to its end (Ctrl-C stops it): the ranks' output goes on in {run / 'output.log'}" in err
    assert re.search(r"pardash: done, 1 rank\(s\), step 20(; each step \d+% between steps \([^)]*\))?, log ", err), err  # (chatty.py sleeps between its steps)
    assert "rank 0 step 20" in (run / "output.log").read_text()


def test_a_broken_pipe_of_something_else_is_a_fault_told_as_one():
    # Quiet only for our own output's reader: a BrokenPipeError from anything else (a pipe or
    # socket of the command's own) is a fault, with its traceback, as before.
    code = (
        "import sys\n"
        "from pardash import cli\n"
        "def broken(ns):\n"
        "    raise BrokenPipeError(32, 'Broken pipe')\n"
        "cli.cmd_ps = broken\n"
        "sys.exit(cli.main(['ps']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=pardash_env())
    assert proc.returncode == 1 and "BrokenPipeError: [Errno 32] Broken pipe" in proc.stderr


def _pardash_stdout_closed(*args: str, cwd: Path, timeout_s: float = 60) -> tuple[int, str]:
    """Run ``pardash ARGS`` started with its stdout closed (``>&-``); (exit code, stderr)."""
    proc = subprocess.run(["sh", "-c", 'exec "$0" "$@" >&-', sys.executable, "-m", "pardash", *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=pardash_env(), cwd=cwd, timeout=timeout_s)  # fmt: skip
    return proc.returncode, proc.stderr


def test_a_command_started_with_its_stdout_closed_runs_as_with_it(tmp_path):
    # `pardash report LOG >&-`: Python leaves sys.stdout None, and the flush added for readers
    # that go away raised AttributeError ('NoneType' object has no attribute 'flush').
    code, err = _pardash_stdout_closed("report", LOG, cwd=tmp_path)
    assert (code, err) == (0, "")


@pytest.mark.slow
def test_a_launch_started_with_its_stdout_closed_runs_its_job(tmp_path):
    # `pardash launch --headless ... >&-` (a job started from a daemon or a cron line): the
    # launch failed before starting the job ('NoneType' object has no attribute 'on_break').
    code, err = _pardash_stdout_closed("launch", "--headless", "--nproc", "1", "--runs-dir", "runs",
                                       "--", str(SCRIPTS / "chatty.py"), "5", cwd=tmp_path, timeout_s=240)  # fmt: skip
    assert "Traceback" not in err and code == 0, err[-3000:]
    (run,) = (tmp_path / "runs").iterdir()
    assert "rank 0 step 5" in (run / "output.log").read_text()
    assert '"kind":"step"' in (run / "telemetry.jsonl").read_text()
