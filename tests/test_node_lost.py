"""A launch's exit code after a stop of a job that had already ended (review 258)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import TerminalOutput, pardash_env, wait_for

pytestmark = pytest.mark.slow


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_a_job_that_failed_before_the_tuis_stop_exits_with_its_own_code(tmp_path):
    # Under the TUI, a job whose rank failed (torchrun exited 1) and then a stop (here a
    # SIGTERM to the launch; Stop chosen in the TUI takes the same path): the launch exited 143
    # (130 for Stop) and its last line said "the job's exit code 143", while result.json said
    # code 1, not stopped. The job had ended before the stop: its own code stands.
    import pty

    script = Path(__file__).resolve().parent / "scripts" / "crash.py"
    master, slave = pty.openpty()
    p = subprocess.Popen(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "2", "--log", str(tmp_path / "run.jsonl"),
         "--runs-dir", str(tmp_path / "runs"), "--", str(script)],
        stdin=slave, stdout=slave, stderr=slave, cwd=tmp_path, env=pardash_env(TERM="xterm-256color", COLUMNS="120", LINES="40"),
    )  # fmt: skip
    os.close(slave)
    screen = TerminalOutput(master)
    try:
        wait_for(lambda: list((tmp_path / "runs").glob("*/result.json")), timeout_s=120, poll_s=0.2)  # the job is over
        (result_file,) = (tmp_path / "runs").glob("*/result.json")
        result = json.loads(result_file.read_text())
        assert (result["code"], result["stopped"]) == (1, False), result
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 1
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    out = screen.done().decode(errors="replace").replace("\r\n", "\n")
    last = _last_line(out[out.rindex("\x1b[?1049l"):])
    assert last.startswith("pardash: rank 1 exited with code 1 at step 3: ValueError: boom in backward; "), last
    assert "; the job's exit code 1; " in last and "stopping the job" not in out[out.rindex("\x1b[?1049l"):], last
    assert json.loads(result_file.read_text())["code"] == 1
