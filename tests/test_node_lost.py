"""Node 0 lost under a node > 0's launch (review 258), and a launch's exit code after a stop
of a job that had already ended.

Two launches on 127.0.0.1 (node ranks 0 and 1): node 0's whole process tree is stopped
(SIGSTOP: its host powered off or cut off, no connection reset: node 1's rank waits in its
all-reduce) or killed (its processes gone, the network up: node 1's rank fails).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from helpers import TerminalOutput, free_ports, pardash_env, wait_for

pytestmark = pytest.mark.slow

TRAIN = ["--model", "mlp", "--nproc", "1", "--steps", "100000", "--log-every", "0"]


def _node(tmp_path: Path, node: int, master_port: int, hub_port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pardash", "launch", "--headless", "--every", "1", "--nnodes", "2",
           "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", str(master_port),
           "--telemetry-port", str(hub_port), "--runs-dir", str(tmp_path / f"runs{node}"), *TRAIN]  # fmt: skip
    # Output to files: a job's processes outlive a killed launch and would hold a pipe open.
    with open(tmp_path / f"node{node}.out", "w") as out, open(tmp_path / f"node{node}.err", "w") as err:
        return subprocess.Popen(cmd, stdout=out, stderr=err, env=pardash_env(OMP_NUM_THREADS="1"), cwd=tmp_path)


@pytest.fixture
def two_nodes(tmp_path):
    """Node 0 and node 1 launched, node 1 printing steps: (node 0's process tree, node 1's
    launch). Whatever is left of either is killed afterwards (only the processes started here)."""
    master_port, hub_port = free_ports(4)[:2]
    launches = [_node(tmp_path, node, master_port, hub_port) for node in (0, 1)]
    trees: list[list[psutil.Process]] = [[], []]
    try:
        # (a step taken: "step 0/100000 | 2 starting" came first, and a loaded run's node 0 was
        # stopped before any step, its last line saying no step last heard)
        taken = re.compile(r"\] step [1-9]")
        wait_for(lambda: taken.search((tmp_path / "node1.out").read_text()) or launches[1].poll() is not None, timeout_s=180, poll_s=0.2)
        assert launches[1].poll() is None, (tmp_path / "node1.err").read_text()[-3000:]
        for i, p in enumerate(launches):
            trees[i] = [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
        yield trees[0], launches[1]
    finally:
        for i, p in enumerate(launches):
            try:
                trees[i] += psutil.Process(p.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
            for proc in trees[i]:
                try:
                    proc.kill()  # (a stopped process too)
                except psutil.NoSuchProcess:
                    pass
            p.wait(timeout=60)


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_node_0_cut_off_is_said_unreachable_and_the_last_line_says_its_hub_was_gone(tmp_path, two_nodes):
    # Node 0 powered off (or its network down): node 1 said "2 running | hub quiet for 106 s"
    # for minutes, its rank held in an all-reduce, and its last line on SIGTERM named the dead
    # hub as the keeper of its log, nothing saying its last steps were in no log.
    node0, node1 = two_nodes
    for proc in node0:
        proc.send_signal(signal.SIGSTOP)  # (no connection reset: node 1's rank waits for it)
    out = tmp_path / "node1.out"
    wait_for(lambda: "then wait for it\n" in out.read_text() or node1.poll() is not None, timeout_s=120, poll_s=0.2)
    lines = out.read_text().splitlines()
    (warned,) = [x for x in lines if x.startswith("warning: node 0's hub (tcp://127.0.0.1:")]
    assert "unreachable for" in warned and "the ranks here wait for it in their next collective" in warned, warned
    said = [x for x in lines if x.startswith("[") and "unreachable for" in x]
    assert said and all("when last heard | node 0's hub (tcp://127.0.0.1:" in x for x in said), said
    # the ranks' states and rates as they were are not shown as if current
    assert not any("running" in x or "samples/s" in x or "hub quiet for" in x for x in said), said
    node1.send_signal(signal.SIGTERM)
    assert node1.wait(timeout=120) == 143
    last = _last_line((tmp_path / "node1.err").read_text())
    assert last.startswith("pardash: stopped by SIGTERM (exit code 143); log kept by node 0's hub (tcp://127.0.0.1:"), last
    assert ", which no longer answers (last heard at step " in last, last
    assert last.endswith("node 0 may be lost, and this node's steps after that are in no log"), last


def test_node_0_killed_the_failed_node_1_says_its_hub_no_longer_answers(tmp_path, two_nodes):
    # Node 0's processes killed, the network up: node 1's rank fails at once (its peer's
    # socket reset), and its last line read "the job failed with exit code 1; log kept by node
    # 0's hub (tcp://...)", nothing saying that hub was gone with node 0.
    node0, node1 = two_nodes
    for proc in node0:
        proc.kill()
    assert node1.wait(timeout=180) == 1
    last = _last_line((tmp_path / "node1.err").read_text())
    assert "; log kept by node 0's hub (tcp://127.0.0.1:" in last, last
    assert ", which no longer answers (last heard at step " in last, last
    assert last.endswith("node 0 may be lost, and this node's steps after that are in no log"), last


def test_a_job_that_failed_before_the_tuis_stop_exits_with_its_own_code(tmp_path):
    # Under the TUI, a job whose rank failed (torchrun exited 1) and then a stop (here a
    # SIGTERM to the launch; Stop chosen in the TUI takes the same path): the launch exited 143
    # (130 for Stop) and its last line said "the job's exit code 143", while result.json said
    # code 1, not stopped. The job had ended before the stop: its own code stands. (One rank:
    # its failure is the job's, as rank 1's was of two.)
    import pty

    script = Path(__file__).resolve().parent / "scripts" / "crash.py"
    master, slave = pty.openpty()
    p = subprocess.Popen(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "1", "--log", str(tmp_path / "run.jsonl"),
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
    assert last.startswith("pardash: rank 0 exited with code 1 at step 3: ValueError: boom in backward; "), last
    assert "; the job's exit code 1; " in last and "stopping the job" not in out[out.rindex("\x1b[?1049l"):], last
    assert json.loads(result_file.read_text())["code"] == 1
