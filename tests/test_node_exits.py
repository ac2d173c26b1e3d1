"""How a node's ranks ended, as a job on two nodes tells it (review 181): node 1's launcher says
its ranks' ends to node 0's hub after its torchrun has ended, and those notes come late, after
what they caused on node 0. The supervisor's notes go down the socket torchrun's word on its
dead workers went down, after it; a stop's note carries the stop's time; a rank killed with
its torchrun is not "stopped by torchrun". The failure analysis orders by when things happened,
and names a silent rank, not the one whose error says a peer went, as the likely cause. Driven
through a real HubCore with encoded frames in the orders seen, and a real PUSH/PULL pair."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from types import SimpleNamespace

import zmq

from pardash.telemetry import schema
from pardash.telemetry.failures import failure_summary
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.printer import outcome_line
from pardash.trainer.supervisor import Supervisor, exit_status

RUN = "r"
T = 1.0e9
GLOO = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
        "[127.0.0.1]:29382: Connection reset by peer")  # fmt: skip


# -- node 1's supervisor -----------------------------------------------------------------------


def _node1_supervisor(tmp_path, port: int, sockets: list) -> Supervisor:
    """Node 1's supervisor (one rank, rank 1) as it is once its torchrun has ended, each socket
    it makes to the hub kept in ``sockets``."""
    sup = Supervisor.__new__(Supervisor)
    sup.spec = SimpleNamespace(curve_dir="", nnodes=2, node_rank=1, nproc=1, run_id=RUN, max_restarts=0, run_dir=str(tmp_path),
                               viewer_pid=0, output="output.log")  # fmt: skip
    sup._global, sup.ranks_started = {}, True
    sup._stopping, sup._stop_t, sup._stopped_by, sup._torchrun_killed = False, 0.0, signal.SIGTERM, 0
    sup.endpoints = {"ingest": f"tcp://127.0.0.1:{port}"}
    make = sup._push
    sup._push = lambda: sockets.append(make()) or sockets[-1]
    return sup


def _notes(pull, n: int) -> list[schema.Event]:
    out = []
    for _ in range(n):
        assert pull.poll(10_000)
        out.append(schema.decode(pull.recv()))
    assert not pull.poll(300)  # (nothing more)
    return out


def test_a_killed_ranks_death_and_the_inference_that_follows_go_down_one_socket_in_order(tmp_path):
    # kill -9 of node 1's rank: torchrun says "failed (exitcode: -9)", read by the thread that
    # follows its stderr and told the hub; after torchrun ended, the supervisor said every rank
    # without word "stopped by torchrun" (-15), on a socket of its own. The two raced to node
    # 0's hub, which takes a rank's first note: one time in four the log held only the -15,
    # and the report blamed "rank 1 was stopped by torchrun first" and rank 0.
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    sockets: list = []
    try:
        sup = _node1_supervisor(tmp_path, port, sockets)
        path = tmp_path / "stderr.log"
        path.write_bytes(b"E1205 api.py:1002] failed (exitcode: -9) local_rank: 0 (pid: 13958) of binary: python\n")
        sup.job = SimpleNamespace(poll=lambda: 1)  # torchrun has ended with 1
        sup._stderr_thread = threading.Thread(target=sup._follow_stderr, args=(str(path), 0, None), daemon=True)
        sup._stderr_thread.start()
        sup._say_ends(1, 1)
        died, inferred = _notes(pull, 2)
        assert (died.rank, died.code, inferred.rank, inferred.code) == (1, -9, 1, -15)
        assert inferred.message == "stopped by torchrun"
        assert len(sockets) == 1  # one socket: ZeroMQ keeps one socket's messages in order
    finally:
        pull.close(0)


def test_ranks_gone_with_their_killed_torchrun_were_not_stopped_by_it(tmp_path):
    # A lost machine (kill -9 of node 1's torchrun and its rank): nothing sent a SIGTERM, and
    # torchrun, dead, stopped nobody, but the rank's end read "stopped by torchrun", -15, and the
    # line "rank 1 was stopped by torchrun first".
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    torchrun = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(torchrun.pid, signal.SIGKILL)
        raw = torchrun.wait()
        sup = _node1_supervisor(tmp_path, port, [])
        sup._say_ends(raw, exit_status(raw))
        (note,) = _notes(pull, 1)
        assert (note.rank, note.code) == (1, -9)
        assert "stopped" not in note.message and "killed (SIGKILL)" in note.message
    finally:
        pull.close(0)
        if torchrun.poll() is None:
            torchrun.kill()
            torchrun.wait()


def test_a_stopped_nodes_ranks_are_noted_at_the_stops_time(tmp_path):
    # kill -TERM of node 1's launch: its ranks' "stopped by SIGTERM" went out after its torchrun
    # had ended, stamped then, after node 0's rank had failed of the stop.
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    try:
        sup = _node1_supervisor(tmp_path, port, [])
        sup._stopping, sup._stop_t = True, T + 1.654
        sup._say_ends(-15, 143)
        (note,) = _notes(pull, 1)
        # (where: node 0's people did not send it, see test_stop_across_nodes.py)
        assert (note.rank, note.code, note.message, note.t) == (1, -15, f"stopped by SIGTERM on node 1 ({socket.gethostname()})", T + 1.654)
    finally:
        pull.close(0)


# -- node 0's hub --------------------------------------------------------------------------------


def _hub_of_two_nodes() -> tuple[HubCore, callable]:
    """Node 0's hub of a DDP job of two ranks, one a node, both at step 30; and a send(msg, t)
    that gives it a frame as it came (each rank's own seq; the launchers' notes seq -1)."""
    core = HubCore(run_id=RUN, world_size=2)
    seq = {0: 0, 1: 0}

    def send(msg: schema.Message, t: float) -> None:
        msg.run, msg.t = RUN, t
        if msg.seq != -1:
            msg.seq, seq[msg.rank] = seq[msg.rank], seq[msg.rank] + 1
        assert core.ingest_bytes(schema.encode(msg), t - T), core.rejected

    for r in (0, 1):
        send(schema.Hello(rank=r, world_size=2, node=r, pid=100 + r, strategy="ddp"), T)
    for s in range(1, 31):
        for r in (0, 1):
            send(schema.Step(rank=r, step=s, step_s=0.01, samples=8, loss=1.0), T + s / 100)
    return core, send


def test_a_rank_that_failed_after_a_peer_node_was_stopped_failed_of_the_stop():
    # Node 1's launch stopped at .654; rank 0's collective broke (gloo's "Connection reset by
    # peer") and it exited at .73; node 1's note of rank 1's stop came last (.81, after its
    # torchrun's end). Node 0 read "rank 0 exited with code 1 - the root cause".
    core, send = _hub_of_two_nodes()
    send(schema.Event(rank=0, name="error", step=30, message=GLOO), T + 1.72)
    send(schema.Event(rank=0, name="exit", code=1, step=31), T + 1.73)
    send(schema.Event(rank=1, seq=-1, name="exit", code=-15, message="stopped by SIGTERM"), T + 1.654)  # (came at .81)
    f = failure_summary(core.state)
    assert f["rank"] == 0 and f["stopped_first"] == [{"rank": 1, "how": "stopped by SIGTERM"}]
    assert f["line"].startswith("rank 1 was stopped by SIGTERM first; rank 0 exited with code 1 at step 31 after it: "), f["line"]
    # Node 0's last line says so: it was not stopped itself, its torchrun ended with 1.
    line = outcome_line(core.state, 1, {"code": 1, "stopped": False}, "job.jsonl")
    assert line.startswith("pardash: rank 1 was stopped by SIGTERM first; rank 0 exited with code 1"), line
    # A stop that came after the failure is not its cause (torchrun stopping the rest after it).
    core, send = _hub_of_two_nodes()
    send(schema.Event(rank=0, name="error", step=30, message=GLOO), T + 1.72)
    send(schema.Event(rank=0, name="exit", code=1, step=31), T + 1.73)
    send(schema.Event(rank=1, seq=-1, name="exit", code=-15, message="stopped by torchrun"), T + 1.8)
    f = failure_summary(core.state)
    assert f["rank"] == 0 and f["stopped_first"] == [] and f["stopped"] == [1]


def test_a_silent_peer_not_the_rank_that_said_a_peer_went_is_the_likely_cause():
    # Every process of node 1 killed (its launch too: no note of rank 1's end): node 0's line
    # read "rank 0 exited with code 1 at step 31: ...Connection reset by peer; that is a peer's
    # failure, and the rank that failed first left no exit record (no word from rank 1:
    # killed?)": rank 0 named first, the cause, by the line that says it is not.
    core, send = _hub_of_two_nodes()
    send(schema.Event(rank=0, name="error", step=30, message=GLOO), T + 1.72)
    send(schema.Event(rank=0, name="exit", code=1, step=31), T + 1.73)
    f = failure_summary(core.state)
    assert f["rank"] == 0 and f["unrecorded"] == [1]
    assert f["line"].startswith(
        "the rank that failed first left no exit record (no word from rank 1: killed?), the likely cause; "
        "rank 0 exited with code 1 at step 31 after it: "
    ), f["line"]
    assert f["line"].count("rank 1") == 1  # (said once)


def test_the_report_and_the_grid_name_the_silent_or_stopped_peer_not_the_rank_that_said_it_went():
    # The failure line named rank 1 (silent) the likely cause, or rank 1's stop first, while the
    # report's exits said "rank 0 exited with code 1 - the root cause" and the TUI marked rank 0.
    from pardash.telemetry.report import _role
    from pardash.telemetry.causes import cause_rank

    core, send = _hub_of_two_nodes()
    send(schema.Event(rank=0, name="error", step=30, message=GLOO), T + 1.72)
    send(schema.Event(rank=0, name="exit", code=1, step=31), T + 1.73)
    f = failure_summary(core.state)
    assert _role(0, f) == "victim" and cause_rank(core.state) == 1
    core, send = _hub_of_two_nodes()
    send(schema.Event(rank=0, name="error", step=30, message=GLOO), T + 1.72)
    send(schema.Event(rank=0, name="exit", code=1, step=31), T + 1.73)
    send(schema.Event(rank=1, seq=-1, name="exit", code=-15, message="stopped by SIGTERM"), T + 1.654)
    f = failure_summary(core.state)
    assert _role(0, f) == "victim" and _role(1, f) == "stopped_first" and cause_rank(core.state) is None
