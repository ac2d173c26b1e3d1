"""A hub that picks its own ports picks them above the kernel's ephemeral range, where no
connecting socket (a viewer or rank reconnecting to a hub that went) can draw one as its source
port and connect to itself, holding the port a restarted hub needs."""

import pytest
import zmq

from pardash.telemetry import hub as hub_mod
from pardash.telemetry.hub import Hub
from pardash.telemetry.spawn import EPHEMERAL_RANGE, quiet_ports


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def _range_file(tmp_path, lo: int, hi: int) -> str:
    p = tmp_path / "ip_local_port_range"
    p.write_text(f"{lo}\t{hi}\n")
    return str(p)


def test_quiet_ports_lie_above_the_ephemeral_range(tmp_path):
    quiet = quiet_ports(_range_file(tmp_path, 32768, 60999))
    assert quiet is not None and quiet[0] == 61000 and quiet[-1] + 2 == 65535
    # An ephemeral range to the top (or near it) leaves none worth choosing: any free port.
    assert quiet_ports(_range_file(tmp_path, 1024, 65535)) is None
    assert quiet_ports(_range_file(tmp_path, 1024, 65400)) is None
    assert quiet_ports(str(tmp_path / "absent")) is None
    (tmp_path / "garbled").write_text("what\n")
    assert quiet_ports(str(tmp_path / "garbled")) is None


@pytest.mark.skipif(quiet_ports() is None, reason="this kernel's ephemeral range leaves no room above it")
def test_a_hub_binds_its_three_ports_above_the_ephemeral_range(tmp_path):
    quiet = quiet_ports()
    with open(EPHEMERAL_RANGE) as f:
        top = int(f.read().split()[1])
    hubs = [Hub(run_id=f"r{i}", log_path=str(tmp_path / f"t{i}.jsonl")) for i in range(3)]
    try:
        ports = [[_port(e) for e in (h.ingest_endpoint, h.updates_endpoint, h.snapshot_endpoint)] for h in hubs]
        for ingest, updates, snapshot in ports:
            assert ingest in quiet and ingest > top
            assert (updates, snapshot) == (ingest + 1, ingest + 2)
        assert len({p for three in ports for p in three}) == 9  # (no two hubs share one)
    finally:
        for h in hubs:
            h.close()


def test_no_free_quiet_port_leaves_any_free_ones(tmp_path, monkeypatch):
    """Every quiet port taken: the hub binds free ports as before, and does not fail."""
    blocker = zmq.Context.instance().socket(zmq.PULL)
    try:
        taken = _port(_bind_free(blocker))
        # The "quiet" range is the one port another socket holds and the two after it.
        monkeypatch.setattr(hub_mod, "quiet_ports", lambda: range(taken, taken + 1))
        h = Hub(run_id="r", log_path=str(tmp_path / "t.jsonl"))
        try:
            assert _port(h.ingest_endpoint) != taken
            assert _port(h.updates_endpoint) == _port(h.ingest_endpoint) + 1
        finally:
            h.close()
    finally:
        blocker.close(linger=0)


def _bind_free(sock: zmq.Socket) -> str:
    sock.bind("tcp://127.0.0.1:*")
    return sock.getsockopt(zmq.LAST_ENDPOINT).decode()


@pytest.mark.skipif(quiet_ports() is None, reason="this kernel's ephemeral range leaves no room above it")
def test_a_launchs_hub_ports_picked_before_it_starts_lie_above_the_ephemeral_range_too():
    # The supervisor picks the hub's three ports before the hub binds them (the ranks start
    # meanwhile, told the ingest port); picked by the kernel (bind to port 0), from its
    # ephemeral range, a connecting socket of another process took one of them in between, and
    # the launch ended "cannot bind 127.0.0.1:35807 (Address already in use)" (a fresh-clone CI run).
    from types import SimpleNamespace

    from pardash.trainer.supervisor import Supervisor

    sup = Supervisor.__new__(Supervisor)
    sup.spec = SimpleNamespace(remote_hub="", telemetry_port=0, telemetry_bind="127.0.0.1")
    sup._early_socks = []
    quiet = quiet_ports()
    for _ in range(20):
        port = sup._early_port()
        sup._let_early_go()
        assert port in quiet and port + 2 in quiet, port


def test_a_launchs_early_ports_are_held_until_its_hub_takes_them(tmp_path):
    # Picked free, let go, then bound by the hub a second later: another process's bind took one
    # in between ("cannot bind 127.0.0.1:64716 (Address already in use)": a CI run's launch
    # ended, its ranks already told the port). Held, listening, the hub takes them as they are.
    import json
    import os
    import socket
    import subprocess
    import sys
    from types import SimpleNamespace

    from helpers import pardash_env

    from pardash.telemetry.reporter import Reporter
    from pardash.telemetry.spawn import read_line
    from pardash.trainer.supervisor import Supervisor

    sup = Supervisor.__new__(Supervisor)
    sup.spec = SimpleNamespace(remote_hub="", telemetry_port=0, telemetry_bind="127.0.0.1")
    sup._early_socks = []
    port = sup._early_port()
    try:
        for p in (port, port + 1, port + 2):  # another process's bind fails meanwhile (as ZeroMQ's, SO_REUSEADDR, too)
            for reuse in (0, 1):
                other = socket.socket()
                other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, reuse)
                with pytest.raises(OSError):
                    other.bind(("127.0.0.1", p))
                other.close()
        fds = [s.fileno() for s in sup._early_socks]
        r, w = os.pipe()
        hub = subprocess.Popen(
            [sys.executable, "-m", "pardash.telemetry.hub", "--run-id", "held", "--log", str(tmp_path / "held.jsonl"),
             "--port", str(port), "--no-registry", "--ready-fd", str(w), "--listen-fds", ",".join(map(str, fds))],
            pass_fds=(w, *fds), stdin=subprocess.DEVNULL, env=pardash_env(),
        )  # fmt: skip
        os.close(w)
    finally:
        sup._let_early_go()
    try:
        info = json.loads(read_line(r, 60) or "{}")
        os.close(r)
        assert [info.get(k) for k in ("ingest", "updates", "snapshot")] == [f"tcp://127.0.0.1:{p}" for p in (port, port + 1, port + 2)], info
        from helpers import identity, wait_for

        rep = Reporter(info["ingest"], run="held", identity=identity(0, 1), heartbeat_s=0)
        try:
            rep.hello(strategy="ddp", world_size=1)
            rep.step(step=1, loss=1.0, step_s=0.1, samples=8)
        finally:
            rep.close(linger_ms=2000)
        wait_for(lambda: '"kind":"step"' in (tmp_path / "held.jsonl").read_text(), timeout_s=60)
    finally:
        hub.terminate()
        hub.wait(30)
