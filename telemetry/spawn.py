"""Start a hub in a process of its own and wait for its endpoints."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

READY_TIMEOUT_S = 30.0


class SpawnError(Exception):
    """The hub process did not come up; the message says what happened."""


def read_line(fd: int, timeout_s: float) -> str:
    """One line from ``fd`` within ``timeout_s`` ('' on timeout or EOF)."""
    buf = b""
    end = time.monotonic() + timeout_s
    while not buf.endswith(b"\n"):
        left = end - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace").strip()


def spawn_hub(args: list[str], *, timeout_s: float = READY_TIMEOUT_S, **popen) -> tuple[subprocess.Popen, dict]:
    """``python -m pardash.telemetry.hub ARGS`` in its own process; returns it and the JSON it
    announced (run_id, log, pid, ingest, updates, snapshot, ...)."""
    r, w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash.telemetry.hub", *args, "--ready-fd", str(w)],
        pass_fds=(w,),
        stdin=subprocess.DEVNULL,
        **popen,
    )
    os.close(w)
    line = read_line(r, timeout_s)
    os.close(r)
    if not line:
        code = exit_code(proc)
        if code is None:
            proc.terminate()
            raise SpawnError(f"the hub did not say it was ready within {timeout_s:.0f} s")
        raise SpawnError(f"the hub did not start (exit code {code})")
    return proc, json.loads(line)


def exit_code(proc: subprocess.Popen, grace_s: float = 2.0) -> int | None:
    """The exit code of a process that closed its ready pipe without a word: it is on its way
    out, but poll() may say None for a moment after the pipe's end (it said "exit code None").
    None: still running after ``grace_s``."""
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        return None
