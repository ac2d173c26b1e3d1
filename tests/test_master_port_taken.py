"""Review 268, finding 2: two launches given one --master-port. The launch checks the port is
free and torchrun binds it seconds later: the one that lost printed 38 lines of torchrun's
traceback ending in ``DistNetworkError: The server socket has failed to listen on any local
network address. port: 47811, ... EADDRINUSE``, then "the job failed with exit code 1". Now it
ends in one line, as the check before the start says it."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from helpers import pardash_env

# One worker runs them all: one test lets its port go for the launch to find free, and another's
# holding the first free port (on 127.0.0.2 too) in that moment made the launch refuse it.
pytestmark = [pytest.mark.timeout(180), pytest.mark.xdist_group("master_port_taken")]

PORTS = range(24100, 24150)
"""Ports these tests hold (each finds one free): below the kernel's ephemeral range (32768-60999
by default), where no connecting socket of another test takes one as its own for a while (48100,
let go for the launch to find free, was busy again by its check in a CI run)."""


def _held(addr: str = "127.0.0.1") -> socket.socket:
    """A socket listening on a free port of PORTS at ``addr``, as another program's would."""
    for port in PORTS:
        s = socket.socket()
        try:
            s.bind((addr, port))
        except OSError:
            s.close()
            continue
        s.listen()
        return s
    pytest.skip(f"no free port in {PORTS}")


def _script(tmp_path) -> str:
    path = tmp_path / "train.py"
    path.write_text("print('trained')\n")
    return str(path)


def test_torchrun_that_cannot_listen_on_its_master_port_says_no_traceback_and_keeps_the_port(tmp_path):
    # torchrun as the launch runs it, on a port another program listens on.
    logs = tmp_path / "torchrun"
    logs.mkdir()
    with _held() as s:
        port = s.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "pardash.trainer.torchrun", "--nproc-per-node", "1", "--nnodes", "1", "--node-rank", "0",
             "--master-addr", "127.0.0.1", "--master-port", str(port), "--log-dir", str(logs), "--", _script(tmp_path)],
            capture_output=True, text=True, timeout=120, env=pardash_env(),
        )  # fmt: skip
    assert proc.returncode == 1, proc
    assert "Traceback" not in proc.stderr and "trained" not in proc.stdout, proc.stderr
    assert (logs / "master_port_busy").read_text().strip() == str(port)
    kept = (logs / "failures.log").read_text()
    assert kept.startswith("Traceback") and "EADDRINUSE" in kept, kept


def test_a_master_port_taken_after_the_launchs_check_is_said_in_one_line(tmp_path):
    # The launch checks its --master-port, makes the run's log, then prints its first line to
    # stdout before it starts anything: that stdout is a pipe filled up here, so the launch
    # waits there, its check passed, until the port is taken and the pipe read.
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETFL, fcntl.fcntl(w, fcntl.F_GETFL) | os.O_NONBLOCK)
    for size in (4096, 1):  # (a write up to 4096 bytes is all or nothing: the last bytes one by one)
        try:
            while True:
                os.write(w, b"." * size)
        except BlockingIOError:
            pass
    fcntl.fcntl(w, fcntl.F_SETFL, fcntl.fcntl(w, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    with _held() as probe:
        port = probe.getsockname()[1]  # (a free port of PORTS, let go for the launch to find free)
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--nproc", "1", "--master-port", str(port),
         "--runs-dir", str(runs), "--", _script(tmp_path)],
        stdout=w, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=pardash_env(),
    )  # fmt: skip
    os.close(w)
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.extend(iter(lambda: os.read(r, 65536), b"")), daemon=True)
    try:
        deadline = time.monotonic() + 120
        while not list(runs.glob("*/telemetry.jsonl")):  # its check passed: the log is made after it
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the launch made no log"
            time.sleep(0.02)
        with socket.socket() as taker:  # another launch's torchrun, say
            taker.bind(("127.0.0.1", port))
            taker.listen()
            reader.start()  # the launch goes on, and its torchrun finds the port taken
            _, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if reader.ident is not None:
            reader.join(10)
        os.close(r)
    stdout = b"".join(out).decode(errors="replace")
    assert proc.returncode == 1, (stdout, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1] == (f"pardash: --master-port {port} is busy (another program took it after this launch found it free, and "
                         "torchrun could not listen on it); pick a free port or leave it out; the job's exit code 1"), err  # fmt: skip
    assert "Traceback" not in stdout + err and "DistNetworkError" not in stdout + err, (stdout, err)
    [run_dir] = runs.iterdir()
    assert json.loads((run_dir / "result.json").read_text())["master_port_busy"] == port


def test_a_master_port_held_on_another_address_of_this_machine_is_refused_before_the_start(tmp_path):
    # torchrun's store listens on every address: a port held on 127.0.0.2 alone passed a check
    # of 127.0.0.1, and torchrun failed on it.
    try:
        s = _held("127.0.0.2")
    except OSError:
        pytest.skip("127.0.0.2 is not an address of this machine")
    with s:
        port = s.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "pardash", "launch", "--headless", "--nproc", "1", "--master-port", str(port),
             "--runs-dir", str(tmp_path / "runs"), "--", _script(tmp_path)],
            capture_output=True, text=True, timeout=120, env=pardash_env(), cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 2, proc
    assert proc.stderr.strip() == f"pardash: error: --master-port {port} is busy; pick a free port or leave it out", proc.stderr
    assert not (tmp_path / "runs").exists()
