"""A viewer's key watches and never publishes: `pardash keys --viewer NAME` on real sockets.

The key it makes gets the hub's frames, a snapshot and a copy of the log, through the same
clients as today given its folder as PARDASH_CURVE_DIR; pushed into the ranks' ingest, nothing
of it is read, while a rank with the hub's client key is recorded beside it. A viewer key
removed keeps out the next connection made with it, added it lets one in, on a running hub.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from helpers import file_mode, identity, keyed_hub, pardash_env, serving, wait_for, wait_logged
from pardash.telemetry import schema, security
from pardash.telemetry.client import HubClient
from pardash.telemetry.hub import Hub
from pardash.telemetry.logreader import load_log
from pardash.telemetry.reporter import Reporter

RUN = "watched-run"


def _keys(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pardash", "keys", *args], capture_output=True, text=True, timeout=60,
                          env=pardash_env(PARDASH_CURVE_DIR=None))  # fmt: skip


@pytest.fixture
def alice(keys):
    """Viewer alice's folder, made by the command as a user would."""
    proc = _keys("--dir", str(keys), "--viewer", "alice")
    assert proc.returncode == 0, proc.stderr
    return keys / "viewers" / "alice"


def _refused(sock: zmq.Socket, endpoint: str) -> None:
    """Connect ``sock`` to ``endpoint`` afresh and wait until it reports a failed handshake."""
    mon = security.monitor_socket(sock)
    sock.disconnect(endpoint)
    sock.connect(endpoint)
    try:
        wait_for(lambda: mon.poll(10) and recv_monitor_message(mon)["event"] & security.HANDSHAKE_FAILED)
    finally:
        sock.disable_monitor()
        mon.close(0)


# -- the command ----------------------------------------------------------------------------------


def test_a_viewers_folder_holds_what_a_viewer_loads_and_its_key_is_admitted_to_watch(keys, tmp_path):
    proc = _keys("--dir", str(keys), "--viewer", "alice")
    assert proc.returncode == 0, proc.stderr
    folder = keys / "viewers" / "alice"
    assert sorted(p.name for p in folder.iterdir()) == ["client.key", "client.key_secret", "server.key"]
    for path in (keys / "viewers", folder, keys / "authorized_viewers"):
        assert file_mode(path) == 0o700, path
    for path in (*folder.iterdir(), keys / "authorized_viewers" / "alice.key"):
        assert file_mode(path) == 0o600, path
    # Loaded as ranks and viewers load a folder today: the hub's server key, alice's own pair,
    # admitted to watch only (not among the clients that publish).
    loaded = security.load_client_keys(folder)
    assert loaded.server_public == security.load_server_keys(keys).public
    assert loaded.public != security.load_client_keys(keys).public
    assert security.load_server_keys(keys).watching == {"alice.key": loaded.public}
    assert loaded.public not in security.load_server_keys(keys).admitted.values()
    # It says what to copy where, and the attach command.
    out = proc.stdout
    assert f"viewer's folder:   {folder}/ (server.key, client.key, client.key_secret): copy it to alice" in out, out
    assert f"admitted to watch: {keys / 'authorized_viewers' / 'alice.key'}" in out, out
    assert f"use: pardash attach RUN_ID --curve-dir {folder}" in out, out

    # --out puts the folder elsewhere, a new one made 0700 whatever its parents.
    elsewhere = tmp_path / "for" / "bob"
    proc = _keys("--dir", str(keys), "--viewer", "bob", "--out", str(elsewhere))
    assert proc.returncode == 0, proc.stderr
    assert file_mode(elsewhere) == 0o700 and file_mode(elsewhere.parent) == 0o700
    assert security.load_client_keys(elsewhere).public == security.load_server_keys(keys).watching["bob.key"]
    assert not (keys / "viewers" / "bob").exists()


@pytest.mark.parametrize("name", ["../alice", "a/b", ".alice", "-alice", "al ice", "alice\nbob", "x" * 65, ""])
def test_a_bad_viewer_name_is_one_line_and_makes_nothing(keys, name):
    proc = _keys("--dir", str(keys), f"--viewer={name}")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "a viewer's name is 1 to 64 letters, digits, '.', '_' or '-'" in line, line
    assert sorted(p.name for p in keys.iterdir()) == ["authorized_clients", "client.key", "client.key_secret", "server.key", "server.key_secret"]


def test_a_viewer_made_before_is_made_again_only_with_force(keys, alice):
    before = security.load_client_keys(alice).public
    proc = _keys("--dir", str(keys), "--viewer", "alice")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "viewer alice already has keys" in line and f"`pardash keys --dir {keys} --viewer alice --force`" in line, line
    assert security.load_client_keys(alice).public == before
    proc = _keys("--dir", str(keys), "--viewer", "alice", "--force")
    assert proc.returncode == 0, proc.stderr
    assert "replaced:" in proc.stdout
    now = security.load_client_keys(alice).public
    assert now != before and security.load_server_keys(keys).watching == {"alice.key": now}
    assert not [p for p in (keys / "authorized_viewers").iterdir() if p.name != "alice.key"]  # nothing left aside


def test_new_hub_keys_revoke_the_viewers_keys_too(keys, alice):
    # Their folders hold the old server key; a hub not restarted would go on admitting them.
    proc = _keys("--dir", str(keys), "--force")
    assert proc.returncode == 0, proc.stderr
    assert list((keys / "authorized_viewers").iterdir()) == []
    assert "revoked viewers:  alice (make their keys again" in proc.stdout, proc.stdout
    # The command it gives works (without --force it said alice "already has keys").
    again = proc.stdout.split("make their keys again: ", 1)[1].split(")", 1)[0].split()
    assert again[:2] == ["pardash", "keys"]
    made = _keys(*[a.replace("NAME", "alice") for a in again[2:]])
    assert made.returncode == 0, made.stderr
    assert security.load_client_keys(alice).public in security.load_server_keys(keys).watching.values()


def test_a_viewers_folder_given_as_the_hubs_is_not_told_to_make_hub_keys_in_it(tmp_path):
    # `keys --dir keys/viewers/alice --viewer carol` said "make one first with `pardash keys
    # --dir keys/viewers/alice`", which refuses (keys are there) and with --force turns alice's
    # folder into a hub's.
    security.make_keys(tmp_path / "k")
    assert _keys("--dir", str(tmp_path / "k"), "--viewer", "alice").returncode == 0
    alice = tmp_path / "k" / "viewers" / "alice"
    before = sorted(p.name for p in alice.iterdir())
    proc = _keys("--dir", str(alice), "--viewer", "carol")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert f"{alice} holds a rank's or viewer's keys, not the hub's key pair: give --dir the hub's key folder" in line, line
    assert "pardash keys --dir" not in line, line
    assert sorted(p.name for p in alice.iterdir()) == before


def test_a_viewer_needs_the_hubs_key_folder(tmp_path):
    proc = _keys("--dir", str(tmp_path / "nothing"), "--viewer", "alice")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "holds no hub keys" in line and "pardash keys --dir" in line, line
    assert not (tmp_path / "nothing").exists()
    security.make_keys(tmp_path / "k")
    proc = _keys("--dir", str(tmp_path / "k"), "--viewer", "alice", "--out", str(tmp_path / "k"))
    assert proc.returncode == 2 and "is a hub's key folder" in proc.stderr
    # Its authorized_clients/: the viewer's client.key there would admit it to publish, as a rank.
    proc = _keys("--dir", str(tmp_path / "k"), "--viewer", "alice", "--out", str(tmp_path / "k" / "authorized_clients"))
    assert proc.returncode == 2 and "is a hub's key folder" in proc.stderr
    assert not (tmp_path / "k" / "authorized_clients" / "client.key_secret").exists()
    assert len(security.load_server_keys(tmp_path / "k").admitted) == 1  # the hub folder's own client key alone
    assert security.load_client_keys(tmp_path / "k").public in security.load_server_keys(tmp_path / "k").admitted.values()


@pytest.mark.parametrize("folder", [".", "authorized_viewers"])
def test_a_key_folder_others_can_write_takes_no_viewer(keys, alice, folder):
    # Whoever can write there could admit their own key to watch.
    os.chmod(keys / folder, 0o770)
    proc = _keys("--dir", str(keys), "--viewer", "bob")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "can be written by other users" in line, line
    assert not (keys / "authorized_viewers" / "bob.key").exists()
    # ... nor does the hub start on it.
    with pytest.raises(security.CurveKeyError, match="can be written by other users"):
        Hub(run_id=RUN, log_path=None, curve=keys)


def test_a_viewers_folder_is_never_a_shared_one_nor_another_users(keys, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("the group's")
    os.chmod(shared, 0o1777)
    proc = _keys("--dir", str(keys), "--viewer", "alice", "--out", str(shared))
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "is a shared folder (mode drwxrwxrwt) that holds other files" in line and "--out" in line, line
    assert file_mode(shared) == 0o1777 and sorted(p.name for p in shared.iterdir()) == ["notes.txt"]
    assert not (keys / "authorized_viewers" / "alice.key").exists()
    if os.geteuid() == 0:  # (giving a folder to another user needs root)
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, -1)
        proc = _keys("--dir", str(keys), "--viewer", "alice", "--out", str(theirs))
        assert proc.returncode == 2 and "belongs to uid 65534" in proc.stderr, proc.stderr
        assert list(theirs.iterdir()) == []


# -- on a hub ---------------------------------------------------------------------------------------


def test_a_viewer_key_gets_frames_a_snapshot_and_the_log(tmp_path, keys, alice):
    log, copy = tmp_path / "run.jsonl", tmp_path / "copy.jsonl"
    record = None
    with serving(Hub(run_id=RUN, log_path=str(log), curve=keys, world_size=1)) as hub:
        rep = Reporter(hub.ingest_endpoint, run=RUN, identity=identity(0, 1), heartbeat_s=0, curve=keys)
        viewer = HubClient(hub.updates_endpoint, hub.snapshot_endpoint, curve=alice)
        try:
            assert viewer.wait_synced(20.0) and viewer.snapshots >= 1
            rep.hello(strategy="single", world_size=1)
            for i in range(1, 4):
                rep.step(step=i, loss=1.0, step_s=0.01)
            wait_for(lambda: 0 in viewer.state.ranks and getattr(viewer.state.ranks[0].step, "step", 0) == 3, poll=viewer.poll)
            rep.event("exit", code=0)
            wait_for(lambda: viewer.state.ranks[0].finished, poll=viewer.poll)
            assert viewer.frames_applied > 0 and viewer.snapshots >= 1
            # The headless attach and the log's copy, given alice's folder as their key folder.
            proc = subprocess.run(
                [sys.executable, "-m", "pardash", "attach", "--headless", "--every", "1", hub.ingest_endpoint],
                capture_output=True, text=True, timeout=60, env=pardash_env(PARDASH_CURVE_DIR=str(alice)),
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            assert "pardash: the run is over: 1 finished" in proc.stdout, proc.stdout
            wait_logged(hub)
            record = subprocess.Popen(
                [sys.executable, "-m", "pardash", "record", hub.ingest_endpoint, "-o", str(copy)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env(PARDASH_CURVE_DIR=str(alice)),
            )  # fmt: skip
            wait_for(lambda: copy.exists() and copy.read_bytes() == log.read_bytes())
        finally:
            rep.close()
            viewer.close()
    assert record is not None
    _, err = record.communicate(timeout=60)
    assert record.returncode == 0, err


def test_a_viewer_key_pushes_nothing_into_the_ingest(tmp_path, keys, alice, capfd):
    log = tmp_path / "run.jsonl"
    with serving(Hub(run_id=RUN, log_path=str(log), curve=keys, world_size=4)) as hub:
        # The same key that watches...
        viewer = HubClient(hub.updates_endpoint, hub.snapshot_endpoint, curve=alice)
        # ...pushes steps as rank 2 through the rank's own publisher, and as rank 3 on a bare socket.
        # (local rank 0: the first rank of a node says a refusal)
        faker = Reporter(hub.ingest_endpoint, run=RUN, identity=replace(identity(2, 4), local_rank=0), heartbeat_s=0.05, curve=alice)
        push = zmq.Context.instance().socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        security.load_client_keys(alice).apply(push)
        mon = security.monitor_socket(push)
        push.connect(hub.ingest_endpoint)
        rank = Reporter(hub.ingest_endpoint, run=RUN, identity=identity(0, 4), heartbeat_s=0, curve=keys)
        try:
            assert viewer.wait_synced(20.0)
            faker.hello(strategy="ddp", world_size=4)
            for i in range(1, 6):
                faker.step(step=1000 + i, loss=0.0, step_s=0.01)
                try:
                    push.send(schema.encode(schema.Step(run=RUN, rank=3, seq=i, step=1000 + i, loss=0.0, step_s=0.01)), zmq.NOBLOCK)
                except zmq.Again:
                    pass  # refused already: no peer to queue for
            wait_for(lambda: mon.poll(10) and recv_monitor_message(mon)["event"] & security.HANDSHAKE_FAILED)
            wait_for(lambda: faker._thread is not None and faker._handshakes is None)  # its refusal read
            rank.hello(strategy="ddp", world_size=4)
            for i in range(1, 6):
                rank.step(step=i, loss=1.0, step_s=0.01)
            wait_for(lambda: 0 in viewer.state.ranks and viewer.state.ranks[0].step is not None and viewer.state.ranks[0].step.step == 5, poll=viewer.poll)
            wait_for(lambda: hub.core.rejected["no_key"] >= 2)
            # The hub says whose viewer key tried to publish (once), beside its count of refusals.
            wait_for(lambda: any("refused alice.key" in e.message for e in hub.core.state.events if isinstance(e, schema.Event)))
            assert set(hub.core.state.ranks) == {0} and hub.core.received == 6  # rank 0's hello and 5 steps
            wait_logged(hub)
        finally:
            faker.close(linger_ms=0)
            rank.close()
            viewer.close()
            push.disable_monitor()
            mon.close(0)
            push.close(0)
    msgs, _ = load_log(log)
    assert [m.step for m in msgs if isinstance(m, schema.Step)] == [1, 2, 3, 4, 5]
    assert {m.rank for m in msgs if m.rank >= 0} == {0}
    # The rank holding it is told its key is not one admitted to publish.
    err = capfd.readouterr().err
    assert err.count("refuses rank 2's telemetry") == 1, err
    assert "it does not admit rank 2's client key for publishing" in err and "`pardash keys --viewer` only watches" in err, err


def test_a_running_hub_takes_viewer_keys_added_and_removed(tmp_path, keys, alice):
    with keyed_hub(tmp_path, keys, RUN) as hub:
        first = hub.viewer(alice)
        assert first.wait_synced(20.0)

        (keys / "authorized_viewers" / "alice.key").unlink()
        wait_for(lambda: hub.said("removed alice.key (0 admitted now)"), poll=hub.friend.poll)
        after = hub.viewer(alice)
        _refused(after.sub, hub.info["updates"])
        wait_for(lambda: after.refused != "", poll=after.poll)  # its snapshot socket's handshake, as attach reads it
        assert "it does not admit this viewer's client key" in after.refused and "--viewer NAME" in after.refused and "authorized_viewers/" in after.refused
        assert not after.synced and after.snapshots == 0

        made = _keys("--dir", str(keys), "--viewer", "bob")  # on the running hub
        assert made.returncode == 0, made.stderr
        wait_for(lambda: hub.said("added bob.key (1 admitted now)"), poll=hub.friend.poll)
        bob = hub.viewer(keys / "viewers" / "bob")
        assert bob.wait_synced(20.0)
    assert hub.returncode == 0, hub.err
    assert "pardash hub: admitted viewer keys (to watch only) changed" in hub.err and "removed alice.key" in hub.err, hub.err

