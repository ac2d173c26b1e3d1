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
    quiet = quiet_ports()
    for _ in range(20):
        port = sup._early_port()
        assert port in quiet and port + 2 in quiet, port
