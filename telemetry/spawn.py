"""Start a hub in a process of its own and wait for its endpoints."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

READY_TIMEOUT_S = 30.0

EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
"""The ports Linux gives a connecting socket as its own (its source port)."""
QUIET_PORTS_LEAST = 256
"""The fewest ports above the ephemeral range worth choosing from (fewer: any free port)."""


def quiet_ports(path: str = EPHEMERAL_RANGE) -> range | None:
    """Ingest ports for a hub that chooses its own (PORT, PORT+1, PORT+2 all in it): those above
    the kernel's ephemeral range, where no connecting socket takes its source port. A hub's
    free port in that range could become a viewer's or a rank's own: one left reconnecting every
    0.1 s to a hub that went walks the range's source ports in about 25 minutes, and a DEALER
    or PUSH that draws the hub's port connects to itself (TCP's simultaneous open) and holds
    it, so the hub restarted there cannot bind. None where the range leaves too few above it
    (or is not Linux's to read)."""
    try:
        with open(path) as f:
            top = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    quiet = range(top + 1, 65535 - 2 + 1)
    return quiet if len(quiet) >= QUIET_PORTS_LEAST else None


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
