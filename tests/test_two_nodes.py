"""Two nodes for real (issue 7): `pardash launch --nnodes 2` once per node, a real two-node
torchrun rendezvous, the hub beside node 0 and node 1's ranks sending to it over TCP.

With root, the nodes are two network namespaces on this machine joined by a veth pair
(10.200.0.1 and 10.200.0.2, nothing else: no traffic leaves the pair), each with its own host
name (a UTS namespace), so the log must name both hosts. Without root, or where namespaces
cannot be made, the test runs both launches on 127.0.0.1 instead, with node ranks 0 and 1
(node 1 starts no hub of its own: it could not bind the port anyway), and warns that it did.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from helpers import free_ports, pardash_env
from pardash.telemetry import schema
from pardash.telemetry.logreader import load_log

pytestmark = pytest.mark.slow

NODE_ADDRS = ("10.200.0.1", "10.200.0.2")
HOSTS = ("pardash-node0", "pardash-node1")
STEPS = 20
TRAIN = ["--strategy", "ddp", "--nproc", "1", "--steps", str(STEPS), "--log-every", "0",
         "--dataset-size", "256", "--batch-size", "8", "--n-embd", "32", "--seq-len", "16"]  # fmt: skip


def _sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30)


def _security_flags() -> list[str]:
    """``--insecure`` where `pardash launch` has it (a hub bound beyond loopback needs keys or
    that flag once CURVE lands); nothing before."""
    out = subprocess.run([sys.executable, "-m", "pardash", "launch", "--help"],
                         capture_output=True, text=True, timeout=60).stdout
    return ["--insecure"] if "--insecure" in out else []


def _launch_cmd(node: int, master: str, log: Path, runs: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pardash", "launch", "--headless", "--every", "2",
            "--nnodes", "2", "--node-rank", str(node), "--master-addr", master,
            "--log", str(log), "--runs-dir", str(runs), *TRAIN, *extra]  # fmt: skip


def _run_pair(cmds: list[list[str]], envs: list[dict[str, str]], cwd: Path) -> list[tuple[int, str, str]]:
    """Start node 0 then node 1 and wait for both; (code, stdout, stderr) of each.

    A node that fails leaves the other waiting in torchrun's rendezvous: it is then stopped
    as a user would stop it (Ctrl-C: the launch stops its job), and killed if that fails.
    Output goes to files: a job's processes outlive a killed launch and would hold a pipe open.
    """
    procs: list[subprocess.Popen] = []
    files = [(cwd / f"node{i}.out", cwd / f"node{i}.err") for i in range(len(cmds))]
    try:
        for cmd, env, (out, err) in zip(cmds, envs, files):
            with open(out, "w") as o, open(err, "w") as e:
                procs.append(subprocess.Popen(cmd, stdout=o, stderr=e, env=env, cwd=cwd))
        deadline = time.monotonic() + 240
        while any(p.poll() is None for p in procs) and not any(p.poll() for p in procs):
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        for p in procs:  # one failed or time is up: stop the rest
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [(p.returncode, out.read_text(), err.read_text()) for p, (out, err) in zip(procs, files)]


def _check_log(log: Path, hosts: tuple[str, str] | None) -> list[schema.Hello]:
    msgs, _ = load_log(log)
    hellos = sorted((m for m in msgs if isinstance(m, schema.Hello)), key=lambda m: m.rank)
    assert [(h.rank, h.node, h.world_size) for h in hellos] == [(0, 0, 2), (1, 1, 2)]
    if hosts is not None:
        assert [h.host for h in hellos] == list(hosts)
    for rank in (0, 1):
        # in the order the rank sent them (the log's is the hub's: steps its heartbeat thread
        # sent for the loop, on a socket of their own, can be taken after the loop's next ones)
        mine = sorted((m for m in msgs if isinstance(m, schema.Step) and m.rank == rank), key=lambda m: m.seq)
        assert [m.step for m in mine] == list(range(1, STEPS + 1)), rank
    # Node 1's ranks took node 0's run id (the hub drops another run's messages).
    assert len({m.run for m in msgs if m.rank >= 0}) == 1 and hellos[0].run
    exits = {m.rank: m.code for m in msgs if isinstance(m, schema.Event) and m.name == "exit" and m.seq >= 0}
    assert exits == {0: 0, 1: 0}
    return hellos


def _node1_metrics(node: int, tmp_path: Path) -> list[str]:
    """The same command line on every node, as people write it: node 1 given a metrics file too
    (the metrics are node 0's hub's; node 1 has no hub to write it)."""
    return ["--prometheus-textfile", str(tmp_path / "node1.prom")] if node == 1 else []


def _check_node1_metrics(err1: str, tmp_path: Path) -> None:
    # Node 1 says its metrics flag does nothing there (it was taken without a word).
    assert "--prometheus-textfile does nothing on node 1: the metrics are node 0's hub's" in err1, err1[-2000:]
    assert not (tmp_path / "node1.prom").exists()


def _check_node1_run(tmp_path: Path, log: Path, hub: str, err1: str, run_id: str) -> None:
    """Node 1's run folder and result.json, as `pardash launch` left them (node 1 given a --log
    too, the same command line on every node: node 1 writes no log)."""
    assert "--log does nothing on node 1: node 0's hub keeps the run's log" in err1, err1[-2000:]
    # Its folder is named by the run's id (it was named by an id of node 1's own, which nothing
    # knew), and its result.json says that node 0's hub keeps the log: it named node1.jsonl,
    # never written.
    runs1 = tmp_path / "runs1"
    assert [p.name for p in runs1.iterdir()] == [f"{run_id}-node1"]
    folder = runs1 / f"{run_id}-node1"
    result = json.loads((folder / "result.json").read_text())
    assert {k: result.get(k, "absent") for k in ("run_id", "code", "log", "hub", "node_rank")} == {
        "run_id": run_id, "code": 0, "log": None, "hub": hub, "node_rank": 1}  # fmt: skip
    # (named so before torchrun started: its logs and the ranks' output are in it, none elsewhere)
    assert (folder / "output.log").is_file() and (folder / "torchrun").is_dir()
    # Node 0's result.json keeps its meaning: its log, where report finds it.
    result0 = json.loads((tmp_path / "runs0" / run_id / "result.json").read_text())
    assert (result0["run_id"], result0["log"], "hub" in result0) == (run_id, str(log), False)
    # `pardash report` of node 1's folder, or of the run's id there: bad input, one line (it
    # said "the run's log .../node1.jsonl ... is not there; moved?", and "no such run id").
    for what in (str(folder), run_id):
        r = subprocess.run([sys.executable, "-m", "pardash", "report", what, "--runs-dir", str(runs1)],
                           capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path)  # fmt: skip
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (what, r.stderr)
        assert "moved?" not in r.stderr and "node1.jsonl" not in r.stderr and "no such" not in r.stderr, (what, r.stderr)
        assert f"node 1's telemetry is in node 0's log, kept by node 0's hub at {hub}" in r.stderr, (what, r.stderr)


def _empty_or_missing(path: Path) -> bool:
    return not path.exists() or path.stat().st_size == 0


# -- two network namespaces --------------------------------------------------------------------


def _wire(names: tuple[str, str], links: tuple[str, str], made: list[str]) -> str:
    """Make the namespaces ``names`` (each added to ``made``) joined by the veth pair ``links``;
    "" once done, else why they cannot be made here."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "they need `ip` (iproute2) and `unshare` (util-linux)"
    for ns in names:
        r = _sh("ip", "netns", "add", ns)
        if r.returncode:
            return f"`ip netns add` fails here: {r.stderr.strip()}"
        made.append(ns)
    steps = [
        ("ip", "link", "add", links[0], "type", "veth", "peer", "name", links[1]),
        *[("ip", "link", "set", links[i], "netns", names[i]) for i in (0, 1)],
        *[("ip", "-n", names[i], "addr", "add", f"{NODE_ADDRS[i]}/24", "dev", links[i]) for i in (0, 1)],
        *[("ip", "-n", names[i], "link", "set", dev, "up") for i in (0, 1) for dev in (links[i], "lo")],
    ]  # fmt: skip
    for step in steps:
        r = _sh(*step)
        if r.returncode:
            return f"cannot wire the namespaces ({' '.join(step)}): {r.stderr.strip()}"
    return ""


@pytest.fixture
def namespaces():
    """Two network namespaces joined by a veth pair, or None where they cannot be made here;
    removed afterwards, whatever happened (with any process still in them)."""
    tag = f"{os.getpid() % 100000}"
    names = (f"pd{tag}n0", f"pd{tag}n1")
    links = (f"pd{tag}v0", f"pd{tag}v1")
    made: list[str] = []
    try:
        why = _wire(names, links, made)
        if why:
            warnings.warn(f"two nodes on loopback, not in network namespaces: {why}")
        yield None if why else (names, links)
    finally:
        for ns in made:
            pids = _sh("ip", "netns", "pids", ns).stdout.split()
            for pid in pids:  # only what this test started in its own namespaces
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            _sh("ip", "netns", "del", ns)  # also removes the veth pair
        if made:
            _sh("ip", "link", "del", links[0])  # in case it never moved into a namespace


def test_two_nodes_share_node0s_hub(tmp_path, namespaces):
    # One launch a node: in two network namespaces where they can be made, else on loopback
    # (the two were a test each, and the one on loopback ran beside the other where both could:
    # a two-node job's 14 s of CPU for nothing it did not show).
    if namespaces is None:
        _on_loopback(tmp_path)
        return
    names, links = namespaces
    log = tmp_path / "job.jsonl"
    cmds, envs = [], []
    for node in (0, 1):
        launch = _launch_cmd(node, NODE_ADDRS[0], log if node == 0 else tmp_path / "node1.jsonl",
                             tmp_path / f"runs{node}", *_security_flags(), *_node1_metrics(node, tmp_path))
        # Own host name per node (UTS namespace), then the launch inside the node's network.
        cmds.append(["ip", "netns", "exec", names[node], "unshare", "--uts", "sh", "-c",
                     f'hostname {HOSTS[node]} && exec "$@"', "sh", *launch])  # fmt: skip
        # gloo finds its address from the host name, which resolves nowhere here: name the
        # node's interface instead, as on a machine with several networks.
        envs.append(pardash_env(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=links[node]))
    (code0, out0, err0), (code1, out1, err1) = _run_pair(cmds, envs, tmp_path)
    assert code0 == 0, out0[-2000:] + err0[-3000:]
    assert code1 == 0, out1[-2000:] + err1[-3000:]
    hellos = _check_log(log, HOSTS)
    assert "2 rank(s)" in out0
    assert f"node 1 of 2, 1 rank(s) here (2 in all), telemetry to node 0's hub at tcp://{NODE_ADDRS[0]}:29600" in out1
    # Node 1 recorded nothing itself: its ranks' messages are all in node 0's log, and its
    # last line names where that is: node 0's hub, not a file node 1 never wrote.
    assert _empty_or_missing(tmp_path / "node1.jsonl")
    assert "node1.jsonl" not in out1 + err1 and f"kept by node 0's hub (tcp://{NODE_ADDRS[0]}:" in out1
    _check_node1_metrics(err1, tmp_path)
    _check_node1_run(tmp_path, log, f"tcp://{NODE_ADDRS[0]}:29600", err1, hellos[0].run)


# -- the same on loopback ----------------------------------------------------------------------


def _on_loopback(tmp_path: Path) -> None:
    master_port, *hub_ports = free_ports(4)
    log = tmp_path / "job.jsonl"
    cmds = [
        _launch_cmd(node, "127.0.0.1", log if node == 0 else tmp_path / "node1.jsonl",
                    tmp_path / f"runs{node}", "--master-port", str(master_port),
                    "--telemetry-port", str(hub_ports[0]), *_node1_metrics(node, tmp_path))
        for node in (0, 1)
    ]
    env = pardash_env(OMP_NUM_THREADS="1")
    (code0, out0, err0), (code1, out1, err1) = _run_pair(cmds, [env, env], tmp_path)
    assert code0 == 0, out0[-2000:] + err0[-3000:]
    assert code1 == 0, out1[-2000:] + err1[-3000:]
    hellos = _check_log(log, None)
    assert _empty_or_missing(tmp_path / "node1.jsonl")
    # Node 1's last line names where the log is: node 0's hub, not a file node 1 never wrote.
    assert "node1.jsonl" not in out1 + err1 and "kept by node 0's hub (tcp://" in out1
    _check_node1_metrics(err1, tmp_path)
    _check_node1_run(tmp_path, log, f"tcp://127.0.0.1:{hub_ports[0]}", err1, hellos[0].run)
