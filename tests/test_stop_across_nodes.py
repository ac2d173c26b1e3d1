"""Who stopped a job of two nodes, as every node tells it (review 258): a Ctrl-C at node 1's
launch read "rank 1 was stopped by you first" on node 0, whose person had done nothing. The
stop's note says where it was done; "by you" stays the launch's own last line where it was."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from helpers import free_ports, pardash_env, wait_for
from pardash.telemetry.report import build_report
from pardash.trainer.supervisor import STOP_REQUEST, LaunchSpec, Supervisor


def _logged(log: Path) -> list:
    """The messages of the log so far (a last line half written left out)."""
    out = []
    try:
        lines = log.read_bytes().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            out.append(msgspec.json.decode(line))
        except msgspec.DecodeError:
            pass
    return out


@pytest.mark.slow
def test_a_ctrl_c_on_node_1_is_told_as_node_1s_on_node_0_and_in_the_report(tmp_path):
    base = free_ports(4)[0]  # torchrun's master port, then the hub's three
    log = tmp_path / "job.jsonl"
    common = ["--headless", "--every", "2", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(base),
              "--telemetry-port", str(base + 1), "--nproc", "1", "--model", "mlp", "--steps", "1000000", "--log-every", "0"]  # fmt: skip
    env = pardash_env(OMP_NUM_THREADS="1")
    procs: list[subprocess.Popen] = []
    files = [(tmp_path / f"node{n}.out", tmp_path / f"node{n}.err") for n in (0, 1)]
    try:
        for node, (out, err) in enumerate(files):
            cmd = [sys.executable, "-m", "pardash", "launch", *common, "--node-rank", str(node), "--runs-dir", str(tmp_path / f"runs{node}"),
                   *(["--log", str(log)] if node == 0 else [])]  # fmt: skip
            with open(out, "w") as o, open(err, "w") as e:
                procs.append(subprocess.Popen(cmd, stdout=o, stderr=e, env=env, cwd=tmp_path))

        def both_stepping() -> bool:
            assert all(p.poll() is None for p in procs), [f.read_text()[-2000:] for pair in files for f in pair]
            return {m["rank"] for m in _logged(log) if m.get("kind") == "step"} == {0, 1}

        wait_for(both_stepping, timeout_s=180, poll_s=0.2)
        procs[1].send_signal(signal.SIGINT)  # Ctrl-C at node 1's launch
        codes = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    (out0, err0), (out1, err1) = ((o.read_text(), e.read_text()) for o, e in files)
    assert codes[1] == 130, out1[-2000:] + err1[-3000:]
    here = f"by Ctrl-C on node 1 ({socket.gethostname()})"
    # The log (node 0's hub's) says where rank 1 was stopped...
    exits = [m for m in _logged(log) if m.get("kind") == "event" and m.get("name") == "exit" and m["rank"] == 1]
    assert [(m["code"], m.get("message")) for m in exits] == [(-15, f"stopped {here}")], exits
    # ...node 0's last line names it so (it read "rank 1 was stopped by you first"), and node
    # 1's, where the Ctrl-C was, says "by you".
    last0 = (out0 + err0).strip().splitlines()[-1]
    assert f"rank 1 was stopped {here} first" in last0 and "by you" not in last0, last0
    last1 = (out1 + err1).strip().splitlines()[-1]
    assert last1.startswith("pardash: stopped by you (exit code 130)"), last1
    # The report: rank 1 "stopped" (it read "exited" beside "stopped by you"), both in the rank
    # table and the exits.
    rep = build_report(str(log))
    assert next(r["status"] for r in rep["ranks"] if r["rank"] == 1) == "stopped", rep["ranks"]
    r = subprocess.run([sys.executable, "-m", "pardash", "report", str(log)], capture_output=True, text=True, timeout=60,
                       env=env, cwd=tmp_path)  # fmt: skip
    assert f"rank 1 stopped {here} (SIGTERM) first, the others failed after it" in r.stdout, r.stdout
    assert "by you" not in r.stdout, r.stdout


def _supervisor(tmp_path: Path, **spec: object) -> Supervisor:
    sup = Supervisor(LaunchSpec(run_id="r", log_path=str(tmp_path / "run.jsonl"), run_dir=str(tmp_path), **spec))
    sup._stopping, sup._stop_t = True, time.time()
    return sup


@pytest.mark.parametrize(
    "spec, signum, asked, said",
    [
        # one node: at the launch (not "by you" to the people attached, review 300)
        ({}, signal.SIGINT, False, "by Ctrl-C at the launch"),
        ({"viewer_pid": 1, "output": "output.log"}, signal.SIGINT, False, "by the launch's viewer"),
        ({}, signal.SIGTERM, False, "by SIGTERM"),
        ({}, signal.SIGINT, True, "by a viewer (pardash attach, pid 7)"),
        # several: where, and by what
        ({"nnodes": 2, "node_rank": 1}, signal.SIGINT, False, "by Ctrl-C on node 1 (HOST)"),
        ({"nnodes": 2, "node_rank": 0, "viewer_pid": 1, "output": "output.log"}, signal.SIGINT, False, "by the viewer on node 0 (HOST)"),
        ({"nnodes": 2, "node_rank": 1}, signal.SIGTERM, False, "by SIGTERM on node 1 (HOST)"),
        ({"nnodes": 2, "node_rank": 0}, signal.SIGINT, True, "by a viewer (pardash attach, pid 7) on node 0 (HOST)"),
    ],
)
def test_the_stops_note_says_where_on_a_job_of_several_nodes(tmp_path, spec, signum, asked, said):
    sup = _supervisor(tmp_path, **spec)
    sup._stopped_by = signum
    if asked:
        (tmp_path / STOP_REQUEST).write_text(json.dumps({"by": "pardash attach, pid 7", "t": sup._stop_t}))
    assert sup._stop_note() == said.replace("HOST", socket.gethostname())
    # The launch's own last line (result.json's stopper) is read where the stop was made.
    assert sup._stopper() == ("by you" if signum == signal.SIGINT and not asked else said.split(" on node ")[0]), sup._stopper()
