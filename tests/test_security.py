"""Strangers get nothing: CURVE keys on real sockets, loopback by default, files for the owner.

On a hub with keys, a viewer without an authorised key gets no snapshot and no frame, and a rank
without one never reaches the log; the same viewer and rank with the keys work. The refusals are
seen, not inferred from silence: each stranger's socket reports its failed handshake.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading

import pytest
import zmq
import zmq.auth
from zmq.utils.monitor import recv_monitor_message

from helpers import file_mode, identity, keyed_hub, pardash_env, serving, wait_for, wait_logged
from pardash.telemetry import registry, schema, security
from pardash.telemetry.client import HubClient
from pardash.telemetry.hub import Hub
from pardash.telemetry.logreader import load_log
from pardash.telemetry.reporter import Reporter

RUN = "secure-run"
HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)


@pytest.fixture
def curve_hub(tmp_path, keys):
    with serving(Hub(run_id=RUN, log_path=str(tmp_path / "telemetry.jsonl"), curve=keys, world_size=4)) as h:
        yield h


@pytest.fixture
def stranger_keys(tmp_path, keys):
    """A key pair the hub never admitted, holding the hub's real public key."""
    public, secret = zmq.curve_keypair()
    return security.ClientKeys(public=public, secret=secret, server_public=security.load_client_keys(keys).server_public)


def _refused(sock: zmq.Socket, endpoint: str) -> None:
    """Connect ``sock`` to ``endpoint`` afresh and wait until it reports a failed handshake
    (a monitor attached after the first attempt may have missed it)."""
    mon = security.monitor_socket(sock)
    sock.disconnect(endpoint)
    sock.connect(endpoint)
    try:
        wait_for(lambda: mon.poll(10) and recv_monitor_message(mon)["event"] & HANDSHAKE_FAILED)
    finally:
        sock.disable_monitor()
        mon.close(0)


# -- keys and files ------------------------------------------------------------------------------


def test_keys_are_for_their_owner_only(tmp_path):
    d = tmp_path / "k"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "keys", "--dir", "k"], capture_output=True, text=True, env=pardash_env(), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    # Each file by its whole path, as the folder is named above them (they were relative to the cwd).
    assert f"  hub:              {d}/server.key_secret\n" in proc.stdout, proc.stdout
    assert f"  ranks, viewers:   {d}/client.key_secret and {d}/server.key\n" in proc.stdout
    assert file_mode(d) == 0o700 and file_mode(d / security.AUTHORIZED) == 0o700
    files = sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())
    assert files == ["authorized_clients/client.key", "client.key", "client.key_secret", "server.key", "server.key_secret"]
    for f in files:
        assert file_mode(d / f) == 0o600, f
    # The admitted key is the client's, and the hub's and the client's pairs load.
    assert zmq.auth.load_certificate(d / "authorized_clients/client.key")[0] == security.load_client_keys(d).public
    assert security.load_server_keys(d).public == security.load_client_keys(d).server_public

    again = subprocess.run(
        [sys.executable, "-m", "pardash", "keys", "--dir", str(d)], capture_output=True, text=True, env=pardash_env()
    )
    assert again.returncode == 2
    assert len(again.stderr.strip().splitlines()) == 1 and "--force" in again.stderr

    # --force makes new pairs and revokes every admitted key, one added by hand too, and says so.
    old_client = security.load_client_keys(d).public
    shutil.copy(d / "authorized_clients/client.key", d / "authorized_clients/alice.key")
    forced = subprocess.run(
        [sys.executable, "-m", "pardash", "keys", "--dir", str(d), "--force"], capture_output=True, text=True,
        env=pardash_env(),
    )
    assert forced.returncode == 0, forced.stderr
    assert "revoked:          alice.key" in forced.stdout
    assert "running hubs:     keep the old server key until restarted" in forced.stdout  # it cannot change under them
    assert sorted(p.name for p in (d / security.AUTHORIZED).iterdir()) == ["client.key"]
    assert security.load_client_keys(d).public != old_client
    assert zmq.auth.load_certificate(d / "authorized_clients/client.key")[0] == security.load_client_keys(d).public


def test_keys_never_shut_a_shared_folder_to_its_users(tmp_path):
    # `pardash keys --dir /tmp` (or a group's project folder) made it 0700: refused now, the
    # folder untouched. An empty folder of one's own, made first, takes the keys.
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("the group's")
    os.chmod(shared, 0o1777)
    proc = subprocess.run([sys.executable, "-m", "pardash", "keys", "--dir", str(shared)], capture_output=True, text=True, env=pardash_env())
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "is a shared folder (mode drwxrwxrwt) that holds other files" in proc.stderr
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777 and sorted(p.name for p in shared.iterdir()) == ["notes.txt"]
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    os.chmod(mine, 0o755)
    proc = subprocess.run([sys.executable, "-m", "pardash", "keys", "--dir", str(mine)], capture_output=True, text=True, env=pardash_env())
    assert proc.returncode == 0, proc.stderr
    assert file_mode(mine) == 0o700
    # A keys folder copied with `cp -r` (0755) holds only keys: --force renews them there.
    os.chmod(mine, 0o755)
    proc = subprocess.run([sys.executable, "-m", "pardash", "keys", "--dir", str(mine), "--force"], capture_output=True, text=True, env=pardash_env())
    assert proc.returncode == 0, proc.stderr
    assert file_mode(mine) == 0o700


def test_a_secret_key_others_can_read_is_refused_and_never_breaks_a_rank(keys, capsys):
    os.chmod(keys / "client.key_secret", 0o644)
    with pytest.raises(security.CurveKeyError, match="chmod 600"):
        security.load_client_keys(keys)
    rep = Reporter("tcp://127.0.0.1:1", run=RUN, identity=identity(0), heartbeat_s=0, curve=keys)
    assert not rep.enabled and rep.step(step=1, loss=1.0) is False
    assert "telemetry is off" in capsys.readouterr().err


def test_registry_entries_are_for_their_owner_only(tmp_path, monkeypatch):
    d = tmp_path / "fresh" / "registry"
    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(d))
    old = os.umask(0o022)
    try:
        path = registry.register({"run_id": "r1", "pid": os.getpid()})
        registry.update("r1", strategy="ddp")
    finally:
        os.umask(old)
    assert file_mode(d) == 0o700
    assert file_mode(path) == 0o600
    assert [p.name for p in d.iterdir()] == ["r1.json"]  # no temporary left behind


@pytest.mark.parametrize("folder", [".", security.AUTHORIZED])
@pytest.mark.parametrize("mode", [0o770, 0o707], ids=["group", "others"])
def test_a_key_folder_others_can_write_is_refused(tmp_path, keys, folder, mode, capsys):
    # Whoever can write there could admit their own key or swap the hub's public key.
    os.chmod(keys / folder, mode)
    intruder, _ = zmq.auth.create_certificates(tmp_path, "intruder")
    os.replace(intruder, keys / security.AUTHORIZED / "intruder.key")
    path = (keys / folder) if folder != "." else keys
    with pytest.raises(security.CurveKeyError, match=f"can be written by other users.*chmod 700 {path}") as err:
        Hub(run_id=RUN, log_path=None, curve=keys)
    assert "\n" not in str(err.value)
    if folder == ".":  # ranks and viewers read only the folder itself, never authorized_clients/
        rep = Reporter("tcp://127.0.0.1:1", run=RUN, identity=identity(0), heartbeat_s=0, curve=keys)
        assert not rep.enabled and "telemetry is off" in capsys.readouterr().err
    else:
        assert security.load_client_keys(keys).public
    os.chmod(keys / folder, 0o700)
    assert security.load_server_keys(keys).authorized == keys / security.AUTHORIZED



@pytest.mark.parametrize(
    "text",
    ["Dc4bKVf-h[Wr4z5b>p!{D:e!XbJKK6dCJnS3k!wn\n", 'metadata\ncurve\n    public-key = "Dc4bKVf-h[Wr4z5"\n'],
    ids=["the key alone", "a key cut short"],
)
def test_a_bad_key_among_the_admitted_stops_the_hub_naming_it(tmp_path, keys, text):
    # pyzmq's authenticator, given one .key file it cannot read, admitted nobody at all and
    # said only "Failed to load CURVE certs": the hub ran, and every rank and viewer was refused.
    (keys / security.AUTHORIZED / "alice.key").write_text(text)
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "hub", "--no-registry", "--curve-dir", str(keys), "--log", str(run / "t.jsonl")],
        capture_output=True, text=True, timeout=30, env=pardash_env(),
    )  # fmt: skip
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert f"{keys / security.AUTHORIZED / 'alice.key'} is not a client's public key" in line, line
    assert proc.stdout == "" and not run.exists()  # nothing bound, nothing written


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
@pytest.mark.parametrize("folder", [".", security.AUTHORIZED])
def test_a_key_folder_another_user_owns_is_refused(keys, folder):
    os.chown(keys / folder, 65534, -1)
    with pytest.raises(security.CurveKeyError, match="belongs to uid 65534"):
        security.load_server_keys(keys)
    if folder == ".":
        with pytest.raises(security.CurveKeyError, match="belongs to uid 65534"):
            security.load_client_keys(keys)


def test_keys_under_umask_0_leave_no_folder_others_can_write(tmp_path):
    # `pardash keys` with no --dir makes $XDG_CONFIG_HOME/pardash/curve and any parent missing.
    config = tmp_path / "config"
    old = os.umask(0)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pardash", "keys"], capture_output=True, text=True,
            env=pardash_env(XDG_CONFIG_HOME=str(config), PARDASH_CURVE_DIR=""),
        )  # fmt: skip
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stderr
    d = config / "pardash" / "curve"
    for folder in (config, config / "pardash", d, d / security.AUTHORIZED):
        assert file_mode(folder) == 0o700, folder
    assert security.load_server_keys(d).public == security.load_client_keys(d).server_public


def test_registry_under_umask_0_leaves_no_folder_others_can_write(tmp_path, monkeypatch):
    d = tmp_path / "cache" / "pardash" / "runs"
    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(d))
    old = os.umask(0)
    try:
        path = registry.register({"run_id": "r1", "pid": os.getpid()})
    finally:
        os.umask(old)
    for folder in (tmp_path / "cache", tmp_path / "cache" / "pardash", d):
        assert file_mode(folder) == 0o700, folder
    assert file_mode(path) == 0o600


def test_a_log_is_never_writable_by_others_whatever_the_umask(tmp_path):
    # Under umask 000 the log was 0666: anyone could add lines that report and replay trust.
    from pardash.telemetry.recorder import Recorder

    from pardash.trainer.launcher import check_writable

    old = os.umask(0)
    try:
        rec = Recorder(tmp_path / "run.jsonl")
        check_writable(str(tmp_path / "launched.jsonl"))  # `pardash launch` makes the file first
    finally:
        os.umask(old)
    rec.close()
    assert file_mode(tmp_path / "run.jsonl") == 0o640 and file_mode(tmp_path / "launched.jsonl") == 0o640


# -- where a hub may bind ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True), ("::1", True), ("[::1]", True), ("lo", True),
     ("0.0.0.0", False), ("*", False), ("10.0.0.1", False), ("eth0", False), ("myhost", False), ("::", False)],
)  # fmt: skip
def test_only_loopback_binds_without_keys(host, loopback):
    assert security.is_loopback(host) is loopback
    assert (security.bind_refusal(host, curve=False, insecure=False) is None) is loopback
    assert security.bind_refusal(host, curve=True, insecure=False) is None
    assert security.bind_refusal(host, curve=False, insecure=True) is None


@pytest.mark.parametrize(
    ("host", "said"),
    [("not-a-host", "not an address, network interface or host name of this machine"),
     ("", "not an address, network interface or host name of this machine"),
     ("127.0.0.1:5000", "give the address alone, without its port")],
)  # fmt: skip
def test_an_address_no_hub_could_bind_is_said_so_before_keys_are_asked_for(tmp_path, host, said):
    # `--bind not-a-host` was refused "without authentication", which sent the user after keys.
    assert security.bind_address_refusal(host) == security.bind_refusal(host, curve=False, insecure=False)
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "hub", "--bind", host, "--no-registry", "--log", str(tmp_path / "t.jsonl")],
        capture_output=True, text=True, timeout=60, env=pardash_env(),
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"pardash hub: cannot bind {host!r}: {said}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "authentication" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("host", ["0.0.0.0", "*", "::", "127.0.0.1", "localhost", "lo"])
def test_addresses_a_hub_can_bind_are_no_bad_address(host):
    assert security.bind_address_refusal(host) is None


def _own_address() -> str | None:
    """This machine's own non-loopback IPv4 address, if it has one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
            addr = s.getsockname()[0]
    except OSError:
        return None
    return None if security.is_loopback(addr) else addr


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_a_hub_on_ipv6_loopback_serves_ranks_and_viewers(tmp_path):
    # `--bind ::1` counted as loopback, then failed: "No such device ... check --bind".
    with serving(Hub(run_id="v6", log_path=str(tmp_path / "run.jsonl"), host="::1")) as hub:
        assert hub.ingest_endpoint.startswith("tcp://[::1]:")
        rep = Reporter(hub.ingest_endpoint, run="v6", identity=identity(0, 1), heartbeat_s=0)
        rep.hello(strategy="single", world_size=1)
        rep.step(step=1, loss=1.0, step_s=0.01)
        viewer = HubClient(hub.updates_endpoint, hub.snapshot_endpoint)
        assert viewer.wait_synced(10)
        wait_for(lambda: 0 in viewer.state.ranks and viewer.state.ranks[0].step is not None, poll=viewer.poll)
        viewer.close()
        rep.close()


def test_a_hub_beyond_loopback_needs_keys_or_insecure(tmp_path, keys):
    addr = _own_address() or "0.0.0.0"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "hub", "--bind", addr, "--no-registry", "--log", str(tmp_path / "t.jsonl")],
        capture_output=True, text=True, timeout=60, env=pardash_env(),
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--curve-dir" in lines[0] and "--insecure" in lines[0], proc.stderr
    assert proc.stdout == ""  # no endpoints announced: nothing was bound
    with pytest.raises(security.InsecureBindError):
        Hub(run_id=RUN, log_path=None, host=addr)
    if _own_address() is None:
        return
    # With keys the same address binds (and only the admitted get in, as tested below).
    hub = Hub(run_id=RUN, log_path=None, host=addr, curve=keys)
    try:
        assert hub.ingest_endpoint.startswith(f"tcp://{addr}:")
    finally:
        hub.close()


def test_launch_beyond_loopback_without_keys_stops_before_starting(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--strategy", "single", "--steps", "1",
         "--telemetry-addr", "0.0.0.0", "--runs-dir", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=120, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "refusing to bind 0.0.0.0" in proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_node_that_reaches_node_0s_hub_over_the_network_needs_keys_or_insecure_too(tmp_path):
    # Node 1 without keys started anyway: node 0's hub (with keys) refused its ranks, node 1
    # said "no answer from the hub yet", and its last line read "done, 0 rank(s)".
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--strategy", "ddp", "--nproc", "1", "--steps", "1",
         "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.1.2.3", "--runs-dir", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=120, env=pardash_env(PARDASH_CURVE_DIR=None), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("pardash: error: node 0's hub at 10.1.2.3 is reached over the network: pass the --curve-dir "
                                   "that node 0 has (the same keys), or --insecure as node 0 did")  # fmt: skip
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


# -- a hub with keys, on real sockets --------------------------------------------------------------


def test_an_authorised_rank_and_viewer_work(curve_hub, keys):
    rep = Reporter(curve_hub.ingest_endpoint, run=RUN, identity=identity(0, 4), heartbeat_s=0, curve=keys)
    viewer = HubClient(curve_hub.updates_endpoint, curve_hub.snapshot_endpoint, curve=keys)
    try:
        assert viewer.wait_synced(20.0)
        rep.hello(strategy="ddp", world_size=4)
        for i in range(10):
            rep.step(step=i, loss=1.0, step_s=0.01)
        wait_for(lambda: 0 in viewer.state.ranks and viewer.state.ranks[0].step is not None and viewer.state.ranks[0].step.step == 9, poll=viewer.poll)
        assert curve_hub.core.received == 11
    finally:
        rep.close()
        viewer.close()


def test_strangers_get_nothing_and_reach_nothing(curve_hub, keys, stranger_keys):
    hub = curve_hub
    told: list[str] = []
    hub.say = told.append  # (a hub alone's terminal)
    ctx = zmq.Context.instance()
    # Ranks: one with no keys at all (a plain ZeroMQ client), one with a key the hub never admitted.
    plain = ctx.socket(zmq.PUSH)
    plain.setsockopt(zmq.LINGER, 0)
    mon_plain = security.monitor_socket(plain)
    plain.connect(hub.ingest_endpoint)
    forged = ctx.socket(zmq.PUSH)
    forged.setsockopt(zmq.LINGER, 0)
    stranger_keys.apply(forged)
    mon_forged = security.monitor_socket(forged)
    forged.connect(hub.ingest_endpoint)
    for sock, rank in ((plain, 1), (forged, 2)):
        frames_ = [schema.encode(schema.Step(run=RUN, rank=rank, seq=seq, step=seq, loss=1.0, step_s=0.01)) for seq in range(20)]
        for frame in [*frames_, b"\xc1 garbage that would be counted, if it arrived"]:
            try:
                sock.send(frame, zmq.NOBLOCK)
            except zmq.Again:
                break  # refused already: a socket whose handshake failed has no peer to queue for
    for mon in (mon_plain, mon_forged):
        wait_for(lambda mon=mon: mon.poll(10) and recv_monitor_message(mon)["event"] & HANDSHAKE_FAILED)

    # Viewers: the same two kinds, through the real client.
    lost_viewers = [
        HubClient(hub.updates_endpoint, hub.snapshot_endpoint, curve=False),
        HubClient(hub.updates_endpoint, hub.snapshot_endpoint, curve=stranger_keys),
    ]
    for v in lost_viewers:
        _refused(v.sub, hub.updates_endpoint)
        _refused(v.dealer, hub.snapshot_endpoint)

    # Meanwhile the admitted rank and viewer go on as if the strangers were not there.
    rep = Reporter(hub.ingest_endpoint, run=RUN, identity=identity(0, 4), heartbeat_s=0, curve=keys)
    friend = HubClient(hub.updates_endpoint, hub.snapshot_endpoint, curve=keys)
    try:
        assert friend.wait_synced(20.0)
        rep.hello(strategy="ddp", world_size=4)
        for i in range(5):
            rep.step(step=i, loss=1.0, step_s=0.01)
        wait_for(lambda: 0 in friend.state.ranks and friend.state.ranks[0].step is not None and friend.state.ranks[0].step.step == 4, poll=friend.poll)
        start = friend.fseq
        wait_for(lambda: friend.fseq >= start + 5, poll=friend.poll)  # half a second more of frames

        for v in lost_viewers:
            v.poll()
            assert not v.synced and v.snapshots == 0 and v.frames_applied == 0 and not v.state.ranks
        assert hub.core.received == 6  # the hello and five steps of rank 0
        # Not even their garbage reached the hub; the refused handshakes are counted and said
        # (a rank without keys got nothing and said nothing, on either side).
        wait_for(lambda: hub.core.rejected["no_key"] >= 1)
        assert set(hub.core.rejected) == {"no_key"}
        said = [e.message for e in hub.core.state.events if isinstance(e, schema.Event) and e.name == "hub"]
        assert sum("no key authorised there" in m and "PARDASH_CURVE_DIR" in m for m in said) == 1  # once a minute
        # ... and to the operator of a hub alone (it was said in the log only: node 1 refused
        # for its keys, and the terminal of `pardash hub` said nothing).
        assert sum("no key authorised there" in m for m in told) == 1, told
        assert set(hub.core.state.ranks) == {0}
        # the friend's (one, or another it asked for on a loaded machine, whose answer it drops
        # once synced); the refused viewers got none, each asserted above
        assert hub.core.snapshots_served >= 1
        wait_logged(hub)
        msgs, _ = load_log(hub.recorder.path)
        assert {m.rank for m in msgs if m.rank >= 0} == {0}
    finally:
        rep.close()
        friend.close()
        for v in lost_viewers:
            v.close()
        # Each monitor stopped before its receiving end closes: a socket closed after its
        # monitor's reader, still monitored, blocks the context's reaper on the event it
        # cannot deliver; every socket closed after it in this worker stayed open, and the
        # shared context's next hubs never answered (two tests later in one `make test`).
        for sock, mon in ((plain, mon_plain), (forged, mon_forged)):
            sock.disable_monitor()
            mon.close(0)
            sock.close(0)



def test_a_running_hub_admits_the_keys_its_folder_holds_now(tmp_path, keys):
    # A hub read authorized_clients/ once, at its start: a key added as `pardash keys` says
    # ("add another client's .key here") was refused until a restart, and one removed or revoked
    # by `pardash keys --force` was still let in.
    alice_public, alice_secret = zmq.auth.create_certificates(tmp_path, "alice")
    public, secret = zmq.auth.load_certificate(alice_secret)
    alice = security.ClientKeys(public=public, secret=secret, server_public=security.load_client_keys(keys).server_public)
    admitted = keys / security.AUTHORIZED
    with keyed_hub(tmp_path, keys, RUN) as hub:
        info, friend = hub.info, hub.friend
        before = hub.viewer(alice)
        _refused(before.sub, info["updates"])

        shutil.copy(alice_public, admitted / "alice.key")
        wait_for(lambda: hub.said("added alice.key (2 admitted now)"), poll=friend.poll)
        viewer = hub.viewer(alice)
        assert viewer.wait_synced(20.0)
        rep = Reporter(info["ingest"], run=RUN, identity=identity(0, 1), heartbeat_s=0, curve=alice)
        rep.hello(strategy="ddp", world_size=1)
        wait_for(lambda: 0 in friend.state.ranks, poll=friend.poll)
        rep.close()

        (admitted / "alice.key").unlink()
        wait_for(lambda: hub.said("removed alice.key (1 admitted now)"), poll=friend.poll)
        after = hub.viewer(alice)
        _refused(after.sub, info["updates"])
        _refused(after.dealer, info["snapshot"])

        # A bad key added later neither stops the hub nor locks anyone out: it keeps its keys.
        (admitted / "bob.key").write_text("not a key\n")
        wait_for(lambda: hub.said("bob.key is not a client's public key"), poll=friend.poll)
        again = hub.viewer(keys)
        assert again.wait_synced(20.0) and hub.proc.poll() is None
    assert hub.returncode == 0, hub.err
    # Said where a hub run alone is watched too.
    assert "pardash hub: admitted client keys changed" in hub.err and "removed alice.key" in hub.err and "bob.key" in hub.err


@pytest.mark.parametrize(
    "who, said",
    [
        ("no key", "it has CURVE keys and rank 0 has none (PARDASH_CURVE_DIR: a copy of the hub's keys folder)"),
        # (a viewer's key reads the same to a rank: the hub's answer says no more than "not admitted")
        ("a stranger's key", "it does not admit rank 0's client key for publishing (a rank needs a key in the hub folder's "
                             "authorized_clients/, as its client.key is; a viewer's key from `pardash keys --viewer` only watches)"),
        # (it said "its key is not one the hub admits" of a rank with another hub's server.key, whose own key was admitted)
        ("another hub's keys", "rank 0's server.key is not this hub's (copy server.key from the hub's keys folder)"),
    ],
)
def test_a_rank_the_hub_refuses_says_so_once_and_why(curve_hub, keys, stranger_keys, tmp_path, capfd, who, said):
    # A rank with no key, or one the hub does not admit, trained on and said nothing: its
    # telemetry went nowhere. It says so once (and training goes on).
    if who == "another hub's keys":
        security.make_keys(tmp_path / "other")
        own = security.load_client_keys(keys)  # its client key admitted, the other hub's server key
        curve = security.ClientKeys(own.public, own.secret, security.load_client_keys(tmp_path / "other").server_public)
    else:
        curve = False if who == "no key" else stranger_keys
    rep = Reporter(curve_hub.ingest_endpoint, run=RUN, identity=identity(0, 4), heartbeat_s=0.05, curve=curve)
    rep.hello(strategy="ddp", world_size=4)
    wait_for(lambda: rep._thread is not None and rep._handshakes is None, timeout_s=20)
    rep.close(linger_ms=0)
    err = capfd.readouterr().err
    assert err.count("refuses rank 0's telemetry") == 1, err
    assert said in err, err


def test_a_refused_rank_whose_job_ends_before_its_first_heartbeat_says_so(curve_hub, capfd):
    # The refusal was read at a heartbeat only: a job shorter than one (a second) ended
    # without a word, its telemetry gone nowhere.
    rep = Reporter(curve_hub.ingest_endpoint, run=RUN, identity=identity(0, 4), heartbeat_s=3600, curve=False)
    rep.hello(strategy="ddp", world_size=4)
    wait_for(lambda: rep._handshakes is not None, timeout_s=20)
    # (the heartbeat thread waits an hour for its first beat: it does not touch the monitor)
    assert rep._handshakes.poll(20_000)  # the hub's refusal has come
    rep.close(linger_ms=0)
    assert capfd.readouterr().err.count("refuses rank 0's telemetry") == 1


@pytest.fixture
def not_a_hub():
    """A TCP port whose program takes each connection and closes it (a port given by mistake:
    another service's, or a hub's that a web proxy holds)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    listener.close()


@pytest.mark.parametrize("keyed", [False, True])
def test_a_rank_at_a_port_no_hub_holds_is_not_told_of_curve_keys(not_a_hub, keys, capfd, keyed):
    # A rank with no keys at a port another program held read "the hub at ... refuses rank 0's
    # telemetry: it has CURVE keys and rank 0 has none", and nothing else: no hub was there.
    rep = Reporter(not_a_hub, run=RUN, identity=identity(0, 4), heartbeat_s=0.05, curve=keys if keyed else False)
    rep.hello(strategy="ddp", world_size=4)
    wait_for(lambda: rep._thread is not None and rep._handshakes is None, timeout_s=20)
    rep.close(linger_ms=0)
    err = capfd.readouterr().err
    # (a CURVE hub drops a keyless client alike at times, and one holding another hub's
    # server.key always: each is said)
    whose = ("rank 0's server.key is not this hub's (copy server.key from the hub's keys folder), or the hub has no "
             "CURVE keys (rank 0 then goes without: no PARDASH_CURVE_DIR)") if keyed else (
        "it has CURVE keys and rank 0 has none (PARDASH_CURVE_DIR: a copy of the hub's keys folder)")
    assert f"refuses rank 0's telemetry: {whose}, or what listens there is not a pardash hub (it dropped" in err, err


def test_a_rank_with_keys_at_a_hub_without_is_told_the_hub_has_none(capfd, keys):
    with serving(Hub(run_id=RUN, log_path=None, world_size=4)) as hub:
        rep = Reporter(hub.ingest_endpoint, run=RUN, identity=identity(0, 4), heartbeat_s=0.05, curve=keys)
        rep.hello(strategy="ddp", world_size=4)
        wait_for(lambda: rep._thread is not None and rep._handshakes is None, timeout_s=20)
        rep.close(linger_ms=0)
    err = capfd.readouterr().err
    # (said alone when the hub's answer came; a hub may drop the connection before it does)
    assert "refuses rank 0's telemetry: " in err and "the hub has no CURVE keys (rank 0 then goes without: no PARDASH_CURVE_DIR)" in err, err


def test_ctrl_c_in_a_publishing_script_exits_as_killed_by_sigint(tmp_path):
    # A script publishing with the API that ended in a KeyboardInterrupt exited 1, not as killed
    # by SIGINT (130 in a shell), while its log's exit event said 130: the rank's heartbeat
    # thread imported zmq.utils.monitor (so asyncio, whose import execs strings) at the end,
    # which makes CPython forget the interrupt. torchrun and schedulers read 1 as a failure.
    script = tmp_path / "interrupted.py"
    script.write_text("import pardash.telemetry.api as pt\npt.init()\nwith pt.step():\n    pt.log(loss=1.0, samples=1)\nraise KeyboardInterrupt\n")
    with serving(Hub(run_id=RUN, log_path=None)) as hub:
        env = {**pardash_env(), "PARDASH_ENDPOINT": hub.ingest_endpoint, "PARDASH_RUN_ID": RUN}
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGINT, (done.returncode, done.stderr)
    assert "KeyboardInterrupt" in done.stderr


def test_an_admitted_rank_says_nothing(curve_hub, keys, capfd):
    rep = Reporter(curve_hub.ingest_endpoint, run=RUN, identity=identity(0, 4), heartbeat_s=0.05, curve=keys)
    rep.hello(strategy="ddp", world_size=4)
    wait_for(lambda: rep._thread is not None and rep._handshakes is None, timeout_s=20)
    rep.close()
    assert "refuses" not in capfd.readouterr().err


def test_ranks_and_viewers_take_keys_from_the_environment(curve_hub, keys, monkeypatch):
    monkeypatch.setenv(security.CURVE_DIR_VAR, str(keys))
    monkeypatch.setenv("PARDASH_ENDPOINT", curve_hub.ingest_endpoint)
    monkeypatch.setenv("PARDASH_RUN_ID", RUN)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    rep = Reporter.from_env(heartbeat_s=0)
    viewer = HubClient(curve_hub.updates_endpoint, curve_hub.snapshot_endpoint)
    try:
        assert rep.keys is not None and viewer.keys is not None
        assert viewer.wait_synced(20.0)
        rep.hello(world_size=4)
        wait_for(lambda: 3 in viewer.state.ranks and viewer.state.ranks[3].hello is not None, poll=viewer.poll)
    finally:
        rep.close()
        viewer.close()


@pytest.mark.slow
def test_a_launched_job_with_keys_records_every_step(tmp_path, keys):
    log = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--strategy", "single", "--steps", "5",
         "--curve-dir", str(keys), "--log", str(log), "--runs-dir", str(tmp_path / "runs"), "--every", "1"],
        capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    msgs, stats = load_log(log)
    # in the order the rank sent them (the log's is the hub's: steps its heartbeat thread sent
    # for the loop, on a socket of their own, can be taken after the loop's next ones)
    assert [m.step for m in sorted((m for m in msgs if isinstance(m, schema.Step)), key=lambda m: m.seq)] == [1, 2, 3, 4, 5]
    assert stats.skipped_total == 0


def test_attach_takes_its_keys_by_curve_dir(tmp_path, keys):
    # hub and launch took --curve-dir; a viewer only PARDASH_CURVE_DIR.
    with serving(Hub(run_id=RUN, log_path=str(tmp_path / "run.jsonl"), curve=keys, world_size=1)) as hub:
        rep = Reporter(hub.ingest_endpoint, run=RUN, identity=identity(0, 1), heartbeat_s=0, curve=keys)
        try:
            rep.hello(strategy="single", world_size=1)
            for i in range(1, 4):
                rep.step(step=i, loss=1.0, step_s=0.01)
            rep.event("exit", code=0)
            wait_for(lambda: hub.core.state.ranks.get(0) is not None and hub.core.state.ranks[0].finished)
            proc = subprocess.run(
                [sys.executable, "-m", "pardash", "attach", "--headless", "--every", "1", "--curve-dir", str(keys), hub.ingest_endpoint],
                capture_output=True, text=True, timeout=60, env=pardash_env(PARDASH_CURVE_DIR=""),
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            assert "pardash: the run is over: 1 finished" in proc.stdout, proc.stdout
        finally:
            rep.close()


def test_a_keyed_hubs_log_is_copied_only_with_an_authorised_key(tmp_path, keys, stranger_keys):
    # `pardash record` rides the snapshot port: under the hub's keys, as viewers do.
    from pardash.telemetry import logfeed

    log, copy = tmp_path / "run.jsonl", tmp_path / "copy.jsonl"
    with serving(Hub(run_id=RUN, log_path=str(log), curve=keys, world_size=1)) as hub:
        rep = Reporter(hub.ingest_endpoint, run=RUN, identity=identity(0, 1), heartbeat_s=0, curve=keys)
        strangers = [logfeed.LogFollower(hub.snapshot_endpoint, curve=False), logfeed.LogFollower(hub.snapshot_endpoint, curve=stranger_keys)]
        try:
            rep.hello(strategy="single", world_size=1)
            for i in range(1, 4):
                rep.step(step=i, loss=1.0, step_s=0.01)
            wait_logged(hub)
            for f in strangers:
                with pytest.raises(logfeed.CopyError, match="no answer"):
                    logfeed.follow(f, str(tmp_path / "stolen.jsonl"), default_out=str, wait_s=1.0, first_wait_s=1.0)
            assert not (tmp_path / "stolen.jsonl").exists()
            wait_for(lambda: hub.core.rejected["no_key"] >= 1)  # their handshakes refused, and counted
            proc = subprocess.Popen(
                [sys.executable, "-m", "pardash", "record", "--curve-dir", str(keys), hub.ingest_endpoint, "-o", str(copy)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env(PARDASH_CURVE_DIR=""),
            )  # fmt: skip
            wait_for(lambda: copy.exists() and copy.read_bytes() == log.read_bytes())
        finally:
            rep.close()
            for f in strangers:
                f.close()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert copy.read_bytes() == log.read_bytes()


@pytest.mark.parametrize(
    "command",
    [["attach", "--headless", "tcp://127.0.0.1:5555"], ["hub", "--no-registry"], ["launch", "--headless"], ["record", "tcp://127.0.0.1:5555"]],
)
def test_a_key_folder_without_keys_is_one_line_for_every_command(tmp_path, command):
    empty = tmp_path / "keys"
    empty.mkdir(mode=0o700)
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", *command, "--curve-dir", str(empty)],
        capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert f"no key {empty}/" in line and f"make keys with `pardash keys --dir {empty}`" in line, line


def _advised(message: str) -> list[str]:
    """The `pardash keys ...` command a key error advises, as arguments (none if it advises none)."""
    import re
    import shlex

    found = re.findall(r"`pardash (keys [^`]*)`", message)
    return shlex.split(found[0]) if found else []


def _damage(path) -> None:
    path.write_text("junk\n")
    os.chmod(path, 0o600)


@pytest.mark.parametrize(
    ("case", "load"),
    [("damaged client secret", "client"), ("damaged hub secret", "server"), ("no client key in the hub's folder", "client")],
)
def test_making_keys_again_is_advised_with_the_folder_and_what_it_replaces(tmp_path, keys, case, load):
    # "make new keys with `pardash keys --force`": no --dir, so it replaced the default folder's
    # keys (another set, maybe in use) and revoked every client there, and left these broken.
    default = tmp_path / "default"
    security.make_keys(default)
    before = {p.name: p.read_bytes() for p in default.iterdir() if p.is_file()}
    if case == "damaged client secret":
        _damage(keys / "client.key_secret")
    elif case == "damaged hub secret":
        _damage(keys / "server.key_secret")
    else:
        (keys / "client.key_secret").unlink()
    with pytest.raises(security.CurveKeyError) as err:
        (security.load_client_keys if load == "client" else security.load_server_keys)(keys)
    said = str(err.value)
    assert "replaces the keys every rank and viewer holds" in said and "\n" not in said, said
    advice = _advised(said)
    assert advice == ["keys", "--dir", str(keys), "--force"], said
    # Followed where the default folder is another: that one is untouched, these mended.
    proc = subprocess.run([sys.executable, "-m", "pardash", *advice], capture_output=True, text=True,
                          env=pardash_env(PARDASH_CURVE_DIR=str(default)))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert {p.name: p.read_bytes() for p in default.iterdir() if p.is_file()} == before
    assert security.load_server_keys(keys).public == security.load_client_keys(keys).server_public


def test_a_viewers_key_folder_missing_the_hubs_key_is_told_to_copy_it_not_to_make_keys(tmp_path, keys):
    # A folder holding only client keys: "make keys with `pardash keys --dir DIR`", which
    # refused ("already holds keys... --force"); and new keys could never match the running hub.
    viewer = tmp_path / "viewer"
    viewer.mkdir(mode=0o700)
    for name in ("client.key", "client.key_secret"):
        shutil.copy2(keys / name, viewer / name)
    with pytest.raises(security.CurveKeyError) as err:
        security.load_client_keys(viewer)
    said = str(err.value)
    assert said == (f"no key {viewer}/server.key; ranks and viewers need the hub's public key: copy server.key from the "
                    f"hub's key folder into {viewer}")  # fmt: skip
    shutil.copy2(keys / "server.key", viewer / "server.key")  # as said
    assert security.load_client_keys(viewer).server_public == security.load_server_keys(keys).public
    _damage(viewer / "server.key")
    with pytest.raises(security.CurveKeyError, match=f"copy server.key again from the hub's key folder into {viewer}$"):
        security.load_client_keys(viewer)
    # The same folder given to a hub: not "make keys here" either (`pardash keys` refuses it).
    with pytest.raises(security.CurveKeyError) as err:
        security.load_server_keys(viewer)
    assert "holds a rank's or viewer's keys, not the hub's key pair" in str(err.value)
    assert _advised(str(err.value)) == ["keys", "--dir", "NEW_DIR"]


def test_a_hub_admitting_no_key_is_told_to_copy_its_client_key_there(keys):
    # "no authorised client keys in DIR/authorized_clients; make keys with `pardash keys --dir
    # DIR`", which refused: the folder holds keys.
    (keys / security.AUTHORIZED / "client.key").unlink()
    with pytest.raises(security.CurveKeyError) as err:
        security.load_server_keys(keys)
    said = str(err.value)
    assert said.endswith(f"copy {keys}/client.key there") and not _advised(said), said
    shutil.copy2(keys / "client.key", keys / security.AUTHORIZED / "client.key")  # as said
    assert security.load_server_keys(keys).admitted


def test_keys_in_the_environment_do_not_lock_a_viewer_out_of_a_run_without_them(tmp_path, keys, monkeypatch):
    # `pardash keys` says to export PARDASH_CURVE_DIR; a viewer then used those keys on every
    # hub, and one without keys never answered it ("no answer from the hub ... is it live?").
    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(tmp_path / "registry"))
    monkeypatch.setenv(security.CURVE_DIR_VAR, str(keys))
    with serving(Hub(run_id="plain", log_path=str(tmp_path / "plain.jsonl"), world_size=1)) as plain:
        registry.register({
            "run_id": "plain", "pid": os.getpid(), "ingest": plain.ingest_endpoint,
            "updates": plain.updates_endpoint, "snapshot": plain.snapshot_endpoint, "curve": False,
        })  # fmt: skip
        viewer = HubClient.attach("plain")
        try:
            assert viewer.keys is None
            assert viewer.wait_synced(20.0)
        finally:
            viewer.close()


@pytest.mark.parametrize("given", ["missing", "keys"])
def test_a_curve_dir_given_for_a_run_without_keys_is_not_needed(tmp_path, keys, monkeypatch, given):
    # `attach RUN --curve-dir DIR` of a run whose hub has no keys (the registry says so) failed
    # on a folder that did not exist ("no key DIR/client.key_secret ... start the hub with them")
    # or was refused ("server.key is not this hub's"): no key was needed.
    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(tmp_path / "registry"))
    with serving(Hub(run_id="plain", log_path=str(tmp_path / "plain.jsonl"), world_size=1)) as plain:
        registry.register({
            "run_id": "plain", "pid": os.getpid(), "ingest": plain.ingest_endpoint,
            "updates": plain.updates_endpoint, "snapshot": plain.snapshot_endpoint, "curve": False,
        })  # fmt: skip
        viewer = HubClient.attach("plain", curve=str(tmp_path / "nowhere") if given == "missing" else str(keys))
        try:
            assert viewer.keys is None
            assert viewer.wait_synced(20.0)
        finally:
            viewer.close()


def test_damaged_registry_entries_are_passed_over_by_ps_and_attach(tmp_path, monkeypatch, capsys):
    # One damaged file in the folder made `pardash ps` and `pardash attach` end in a traceback
    # (AttributeError on a list, TypeError sorting a text start time, KeyError 'updates').
    from pardash import cli

    d = tmp_path / "registry"
    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(d))
    good = {
        "run_id": "good-run", "pid": os.getpid(), "ingest": "tcp://127.0.0.1:1", "updates": "tcp://127.0.0.1:2",
        "snapshot": "tcp://127.0.0.1:3",
    }  # fmt: skip
    registry.register(good)
    for name, text in {
        "list": "[1, 2]",
        "text-start": json.dumps({**good, "run_id": "text-start", "started": "abc"}),
        "no-updates": json.dumps({k: v for k, v in {**good, "run_id": "no-updates", "started": 1.0}.items() if k != "updates"}),
        "no-pid": json.dumps({**good, "run_id": "no-pid", "pid": "12", "started": 1.0}),
        "half": '{"run_id": "ha',
    }.items():
        (d / f"{name}.json").write_text(text)
    assert [e["run_id"] for e in registry.live_runs()] == ["good-run"]
    assert cli.main(["ps"]) == 0
    out = capsys.readouterr().out
    assert "good-run" in out and "text-start" not in out and "no-updates" not in out
    assert registry.find("no-updates") is None and registry.find("good")["run_id"] == "good-run"


def test_a_hub_whose_registry_cannot_be_written_serves_and_says_how_to_attach(tmp_path):
    # A read-only home or runtime folder (common on clusters) ended the hub in a traceback, and
    # a launch or simulation with it ("the hub did not start").
    from pardash.telemetry.spawn import spawn_hub

    (tmp_path / "a_file").write_text("")
    env = pardash_env(PARDASH_REGISTRY_DIR=str(tmp_path / "a_file" / "registry"))  # no folder can be made there, root or not
    proc, info = spawn_hub(["--log", str(tmp_path / "run.jsonl"), "--world-size", "1"], env=env, stderr=subprocess.PIPE)
    viewer = HubClient(info["updates"], info["snapshot"])
    try:
        assert viewer.wait_synced(20.0)
        # ... and to its viewers (a launch's TUI took the screen after the line went by, review 279)
        told = [e.message for e in viewer.state.events if e.name == "warning" and e.rank < 0]
    finally:
        viewer.close()
        proc.terminate()
        err = proc.communicate(timeout=30)[1].decode()
    assert proc.returncode == 0, err
    (said,) = [line for line in err.splitlines() if "registry" in line and "hub stopped" not in line]
    assert f"cannot write the run registry {tmp_path / 'a_file' / 'registry'}" in said
    assert f"pardash attach {info['ingest']}" in said and "Traceback" not in err
    assert told == [said.removeprefix("pardash hub: ")], told
    from pardash.telemetry.report import build_report

    assert [e.message for e in load_log(tmp_path / "run.jsonl")[0] if isinstance(e, schema.Event) and e.name == "warning"] == told
    assert build_report(str(tmp_path / "run.jsonl"))["warnings"] == []  # (the listing, not the run's figures)


def test_a_run_registered_again_by_a_restarted_hub_keeps_its_age(tmp_path, monkeypatch):
    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(tmp_path / "registry"))
    first = json.loads(registry.register({"run_id": "r1", "pid": 1, "ingest": "a"}).read_text())
    again = json.loads(registry.register({"run_id": "r1", "pid": 2, "ingest": "b"}).read_text())
    assert again["started"] == first["started"] and (again["pid"], again["ingest"]) == (2, "b")


def test_stray_bytes_are_no_client_without_a_key(curve_hub):
    # An HTTP request to the ingest port counted as "no_key" and put a hint to set
    # PARDASH_CURVE_DIR in the event log. (A bare TCP probe cannot be told from a keyless
    # ZeroMQ client that hung up first: it counts, and the hint says so.)
    import socket as pysocket

    hub = curve_hub
    host, port = hub.ingest_endpoint.rsplit("/", 1)[1].rsplit(":", 1)
    with pysocket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            while s.recv(64):  # the hub's greeting, until it drops the connection
                pass
        except ConnectionResetError:
            pass
    start = hub.core.fseq
    wait_for(lambda: hub.core.fseq >= start + 5)  # half a second of the hub's loop
    assert hub.core.rejected["no_key"] == 0
    # A ZeroMQ client without keys is one.
    plain = zmq.Context.instance().socket(zmq.PUSH)
    plain.setsockopt(zmq.LINGER, 0)
    plain.connect(hub.ingest_endpoint)
    try:
        wait_for(lambda: hub.core.rejected["no_key"] >= 1)
    finally:
        plain.close(0)


def test_a_client_holding_another_server_key_is_counted_as_refused(curve_hub, keys):
    # The hub's keys were made again (`pardash keys --force`) and a rank still holds the old
    # server key: its handshakes failed on a cryptographic error, counted nowhere, said nowhere.
    admitted = security.load_client_keys(keys)
    old_server, _ = zmq.curve_keypair()
    stale = security.ClientKeys(public=admitted.public, secret=admitted.secret, server_public=old_server)
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)
    stale.apply(sock)
    sock.connect(curve_hub.ingest_endpoint)
    try:
        _refused(sock, curve_hub.ingest_endpoint)
        wait_for(lambda: curve_hub.core.rejected["no_key"] >= 1)
    finally:
        sock.close(0)


def test_a_monitor_is_had_on_a_socket_whose_descriptor_an_earlier_monitored_one_held():
    # pyzmq names a monitor's inproc address after its socket's file descriptor: a socket that
    # reused the descriptor of one whose monitor's other end was still open could have no
    # monitor ("Address already in use"), which failed a test now and then under load.
    ctx = zmq.Context()
    try:
        held = []
        for _ in range(50):
            a = ctx.socket(zmq.DEALER)
            held.append(security.monitor_socket(a))  # its user end left open
            a.disable_monitor()
            a.close(0)
            b = ctx.socket(zmq.DEALER)
            held.append(security.monitor_socket(b, zmq.EVENT_CONNECTED))
            b.disable_monitor()
            b.close(0)
        assert len(held) == 100
        for m in held:
            m.close(0)
    finally:
        ctx.term()


def test_attach_names_what_keeps_it_out_of_a_live_run(tmp_path, monkeypatch, capsys):
    # A live CURVE run attached by id without keys said "run ... is over (no hub serves it
    # now)" (its run folder is there as it runs); a prefix of two live runs' ids said "no live
    # run".
    from pardash import cli

    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(tmp_path / "registry"))
    monkeypatch.delenv("PARDASH_CURVE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    ends = {"pid": os.getpid(), "ingest": "tcp://127.0.0.1:1", "updates": "tcp://127.0.0.1:2", "snapshot": "tcp://127.0.0.1:3"}
    for run, curve in (("sim-a1", True), ("sim-b2", False)):
        registry.register({"run_id": run, "curve": curve, **ends})
        (tmp_path / "runs" / run).mkdir(parents=True)
        (tmp_path / "runs" / run / "telemetry.jsonl").write_text('{"kind":"hub","message":"hub started"}\n')

    def attach(target: str) -> str:
        try:
            code = cli.main(["attach", "--headless", target])
        except SystemExit as ended:
            code = ended.code
        assert code == 2
        return capsys.readouterr().err.strip()

    assert attach("sim-a1") == (
        "pardash: error: run sim-a1 takes only viewers with an authorised key: pass --curve-dir DIR (or set "
        "PARDASH_CURVE_DIR) with its key folder (`pardash keys`)"
    )
    assert attach("sim") == "pardash: error: 'sim' begins 2 live runs' ids (sim-a1, sim-b2); give more of the one to attach to"


def test_a_headless_attach_the_hub_refuses_says_why(curve_hub, keys, tmp_path, capsys):
    # It said "no answer from the hub at ...; is the run still live? ... or it does not admit
    # this viewer's key": the hub had answered, refusing the viewer's key.
    from pardash import cli

    mine = tmp_path / "mine"
    security.make_keys(mine)  # a client key of its own, never admitted, with the hub's server.key
    shutil.copy(keys / "server.key", mine / "server.key")
    try:
        code = cli.main(["attach", "--headless", "--curve-dir", str(mine), curve_hub.ingest_endpoint])
    except SystemExit as ended:
        code = ended.code
    assert code == 2
    err = capsys.readouterr().err
    assert "refuses this viewer: it does not admit this viewer's client key" in err, err


def test_a_launch_beyond_loopback_says_where_to_attach_and_that_it_takes_no_keys(tmp_path):
    # Review 300: a hub at 192.0.2.2 under --insecure said neither that anyone who reaches it
    # may read the run, nor where a teammate attaches (its port was found with `pardash ps`).
    addr = _own_address()
    if addr is None:
        pytest.skip("this machine has no address beyond loopback")
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--strategy", "single", "--steps", "1",
         "--telemetry-addr", addr, "--insecure", "--runs-dir", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=120, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = [line for line in proc.stderr.splitlines() if "without keys" in line]
    assert len(said) == 1 and f"the hub listens on tcp://{addr}:" in said[0], proc.stderr[-2000:]
    port = said[0].split(f"tcp://{addr}:")[1].split()[0]
    assert f"`pardash attach tcp://{addr}:{port}`" in said[0] and "anyone who reaches it can read the run" in said[0]


def test_where_to_attach_is_said_to_the_tui_too_and_an_ipv6_host_in_brackets(capsys):
    # Review 305: a TUI launch printed it before its screen, which hid it for the whole run (it
    # goes to the app as its notice); an IPv6 bind read "tcp://2001:db8::5:PORT".
    from types import SimpleNamespace

    from pardash.launch import _say_where_to_attach

    spec = SimpleNamespace(telemetry_bind="2001:db8::5", remote_hub="", curve_dir="")
    said = _say_where_to_attach(spec, "tcp://[2001:db8::5]:40000")
    assert "the hub listens on tcp://[2001:db8::5]:40000 without keys" in said and "`pardash attach tcp://[2001:db8::5]:40000`" in said
    assert said in capsys.readouterr().err
    assert _say_where_to_attach(SimpleNamespace(telemetry_bind="127.0.0.1", remote_hub="", curve_dir=""), "tcp://127.0.0.1:1") == ""
