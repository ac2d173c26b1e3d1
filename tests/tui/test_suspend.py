"""Ctrl-Z suspends the TUI as less and vim do, and the shell's `fg` brings the whole screen back:
Ctrl-Z did nothing, and after a SIGTSTP and `fg` only the cells that changed were drawn (no
borders, headers or footer for as long as they stayed alike; review 317)."""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import TerminalOutput, pardash_env, wait_for

LOG = Path(__file__).resolve().parents[1] / "data" / "ddp4_straggler.jsonl"
_ESCAPES = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)")


def _text(data: bytes) -> str:
    """What the terminal was sent, without its escape sequences (colours, cursor moves)."""
    return _ESCAPES.sub(b"", data).decode(errors="replace")

pytestmark = pytest.mark.timeout(120)


def test_ctrl_z_suspends_the_tui_and_fg_draws_its_whole_screen_again(tmp_path):
    master, slave = pty.openpty()
    # (its own session, the pty its controlling terminal: a shell's job, which Ctrl-Z stops)
    p = subprocess.Popen([sys.executable, "-m", "pardash", "replay", str(LOG), "--start", "end"], stdin=slave, stdout=slave,
                         stderr=slave, cwd=tmp_path, start_new_session=True,
                         env=pardash_env(TERM="xterm-256color", COLUMNS="120", LINES="40"))  # fmt: skip
    os.close(slave)
    screen = TerminalOutput(master)
    try:
        wait_for(lambda: "─ ranks" in _text(bytes(screen.data)), timeout_s=60, poll_s=0.2)
        time.sleep(0.5)  # (its first frames drawn: nothing left to change on a replay at its end)
        os.write(master, b"\x1a")  # Ctrl-Z
        proc = psutil.Process(p.pid)
        wait_for(lambda: proc.status() == psutil.STATUS_STOPPED, timeout_s=30, poll_s=0.1)
        before = len(screen.data)
        os.kill(p.pid, signal.SIGCONT)  # the shell's `fg`
        wait_for(lambda: "─ ranks" in _text(bytes(screen.data[before:])), timeout_s=30, poll_s=0.1)
        time.sleep(0.5)
        after = _text(bytes(screen.data[before:]))
        assert "─ alerts" in after and "rank status" in after  # the whole screen, not the cells that changed
        os.write(master, b"q")
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        screen.done(5)
