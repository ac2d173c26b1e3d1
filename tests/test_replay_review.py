"""A replay of a log still being written or cut short, and a viewer refused after it was taken
(review 175)."""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import time

from helpers import free_ports, identity, pardash_env, wait_for

from pardash.telemetry import client, schema, security
from pardash.telemetry.client import HubClient, ReplaySource
from pardash.telemetry.reporter import Reporter
from pardash.telemetry.spawn import spawn_hub

T0 = 1.7e9


def _steps(first: int, last: int, ranks: int = 2) -> list:
    return [schema.Step(rank=r, step=s, loss=1.0, t=T0 + s, seq=s, run="x") for s in range(first, last + 1) for r in range(ranks)]


def _aged(path) -> None:
    """Written a minute ago, nothing since (past FOLLOW_QUIET_S)."""
    old = time.time() - 60
    os.utime(path, (old, old))


def test_the_log_of_a_live_hub_waiting_for_its_ranks_is_followed(tmp_path):
    # A hub quiet for 17 s (its ranks importing torch, in a queue): its replay said "0 ranks
    # ... ended" and "no rank ever reported to its hub" while 300 steps went into the log.
    log = tmp_path / "hubw.jsonl"
    proc, info = spawn_hub(["--run-id", "waits", "--log", str(log)], stderr=subprocess.DEVNULL, env=pardash_env())
    rep = None
    try:
        wait_for(lambda: log.exists() and log.read_bytes().endswith(b"\n"))
        _aged(log)
        src = ReplaySource(str(log), speed=64)
        assert src.following and not src.done and not src.no_rank_reported
        rep = Reporter(info["ingest"], run="waits", identity=identity(0, 1), heartbeat_s=0)
        rep.hello(strategy="single", world_size=1)
        for i in range(1, 4):
            rep.step(step=i, loss=1.0, step_s=0.01)
        # (the hub's log quiet all that while: no word of it for a minute when the replay began)
        wait_for(lambda: 0 in src.state.ranks and getattr(src.state.ranks[0].step, "step", 0) == 3, poll=src.poll)
        assert src.following
        rep.close()
        rep = None
        proc.send_signal(signal.SIGTERM)  # its "hub stopped" ends the following
        assert proc.wait(30) == 0
        wait_for(lambda: src.done, poll=src.poll)
        assert not src.following
    finally:
        if rep is not None:
            rep.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _clocked(monkeypatch) -> list[float]:
    clock = [1000.0]
    monkeypatch.setattr(client.time, "monotonic", lambda: clock[0])
    return clock


def _play(src: ReplaySource, clock: list[float], polls: int = 10) -> bool:
    changed = False
    for _ in range(polls):
        clock[0] += 0.2
        changed = src.poll() or changed
    return changed


def test_a_log_that_grows_again_after_its_following_ended_is_followed_again(tmp_path, monkeypatch):
    # Following stopped after 15 s of quiet for good: what its writer added later never played.
    log = tmp_path / "telemetry.jsonl"
    log.write_bytes(schema.encode_json_lines([schema.Hello(rank=r, world_size=2, t=T0, run="x") for r in range(2)] + _steps(1, 3)))
    _aged(log)
    clock = _clocked(monkeypatch)
    src = ReplaySource(str(log), speed=64)
    assert not src.following
    src.seek(src.duration_s)
    assert src.done
    with open(log, "ab") as fh:
        fh.write(schema.encode_json_lines(_steps(4, 6)))
    assert _play(src, clock)
    assert src.following and src.duration_s == 6.0
    _play(src, clock, 40)
    assert [src.state.ranks[r].step.step for r in (0, 1)] == [6, 6]


def test_a_paused_replay_follows_its_log_as_it_grows(tmp_path, monkeypatch):
    # Paused, the total stood where it was until the replay played on.
    log = tmp_path / "telemetry.jsonl"
    log.write_bytes(schema.encode_json_lines(_steps(1, 3)))
    clock = _clocked(monkeypatch)
    src = ReplaySource(str(log))
    assert src.following and src.duration_s == 2.0
    src.paused = True
    with open(log, "ab") as fh:
        fh.write(schema.encode_json_lines(_steps(4, 9)))
    assert _play(src, clock, 2)
    assert src.duration_s == 8.0 and src.position_s == 0.0 and src.paused


def _said_early(src: ReplaySource) -> list[str]:
    return [e.message for e in src.state.events if isinstance(e, schema.Event) and e.message.startswith("log ends early")]


def test_a_log_whose_hub_died_says_it_ends_early_as_report_does(tmp_path):
    # Its replay settled on "● 2 running ... ended" with no word that the log stops short.
    from pardash.telemetry.report import build_report

    log = tmp_path / "telemetry.jsonl"
    msgs = [schema.Hello(rank=r, world_size=2, t=T0, run="x") for r in range(2)] + _steps(1, 5)
    log.write_bytes(schema.encode_json_lines(msgs) + b'{"kind":"step","rank":0,"st')  # its writer killed mid-line
    _aged(log)
    src = ReplaySource(str(log))
    assert _said_early(src) == []  # (at its start: not yet)
    src.seek(src.duration_s)
    said = _said_early(src)
    rep = build_report(str(log))
    assert rep["log_ends_early"]["step"] == 5 and rep["log_ends_early"]["running"] == 2
    assert said == ["log ends early at step 5, with 2 rank(s) not ended and no closing line from the hub, and no live run on this "
                    "machine records it: its hub stopped recording (killed, out of disk) before the run ended, or runs elsewhere "
                    "(`pardash ps`)"]  # fmt: skip
    assert src.ended_early == rep["log_ends_early"]  # (what the header and the alerts say it from)
    # A seek back plays it again: said again at its end, once.
    src.seek(1.0)
    assert _said_early(src) == [] and src.ended_early is None
    src.seek(src.duration_s)
    assert len(_said_early(src)) == 1


def test_a_whole_log_says_nothing_of_an_early_end(tmp_path):
    log = tmp_path / "telemetry.jsonl"
    closing = schema.Event(rank=-1, name="hub", message="hub stopped: 10 messages, 0 lost, 0 rejected", t=T0 + 7, run="x")
    exits = [schema.Event(rank=r, name="exit", code=0, t=T0 + 6, seq=6, run="x") for r in range(2)]
    log.write_bytes(schema.encode_json_lines([schema.Hello(rank=r, world_size=2, t=T0, run="x") for r in range(2)] + _steps(1, 5) + exits + [closing]))
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    assert src.done and _said_early(src) == [] and src.ended_early is None
    # Every rank ended, its hub killed after: the run's end is in it.
    ended = tmp_path / "ended.jsonl"
    exits = [schema.Event(rank=r, name="exit", code=0, t=T0 + 6, seq=6, run="x") for r in range(2)]
    ended.write_bytes(schema.encode_json_lines([schema.Hello(rank=r, world_size=2, t=T0, run="x") for r in range(2)] + _steps(1, 5) + exits))
    _aged(ended)
    src = ReplaySource(str(ended))
    src.seek(src.duration_s)
    assert src.done and _said_early(src) == [] and src.ended_early is None


def test_a_viewer_its_restarted_hub_refuses_says_so_not_hub_quiet(tmp_path, keys, monkeypatch):
    # Alice's key revoked, then the hub restarted (a launch's, killed): her viewer read "hub
    # quiet for 41 s" for ever, where a fresh attach was told the hub refuses her key.
    security.make_viewer_keys(keys, "alice")
    alice = keys / "viewers" / "alice"
    args = ["--run-id", "kept", "--no-registry", "--curve-dir", str(keys), "--port", str(free_ports()[0])]
    first, info = spawn_hub([*args, "--log", str(tmp_path / "run.jsonl")], stderr=subprocess.DEVNULL, env=pardash_env())
    second = None
    viewer = HubClient(info["updates"], info["snapshot"], curve=alice)
    try:
        assert viewer.wait_synced(20.0) and not viewer.refused
        admitted = keys / "authorized_viewers" / "alice.key"
        key = admitted.read_bytes()
        admitted.unlink()
        first.kill()
        first.wait()
        # (on the same ports, as a launch restarts its hub)
        second, _ = spawn_hub([*args, "--log", str(tmp_path / "again.jsonl")], stderr=subprocess.DEVNULL, env=pardash_env())
        wait_for(lambda: viewer.refused != "", poll=viewer.poll)
        assert "it does not admit this viewer's client key" in viewer.refused
        assert not viewer.synced  # (the header then says the hub refuses this viewer, not "hub quiet")
        # Admitted again (the running hub takes the key within a second): synced again, at its
        # next try.
        monkeypatch.setattr(client, "REFUSED_RETRY_S", 0.5)
        viewer._retry_s = 0.5
        admitted.write_bytes(key)
        wait_for(lambda: viewer.synced, poll=viewer.poll)
        assert viewer.refused == "" and viewer._retry_s == 0.5  # (the wait back to its first)
        seen = viewer.frames_applied
        wait_for(lambda: viewer.frames_applied > seen, poll=viewer.poll)  # its frames too
    finally:
        viewer.close()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_refused_viewer_tries_again_less_and_less_often(tmp_path):
    # A viewer left open, refused, connected again every 30 s all night: each try two more
    # refusals in the hub's counts, and a line or two a minute in the run's log.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    viewer = client.HubClient(f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port}", curve=False)
    try:
        def refused() -> bool:
            try:
                listener.settimeout(0.05)
                listener.accept()[0].close()  # (what listens there drops the handshake)
            except OSError:
                pass
            viewer.poll()
            return viewer.refused != ""

        wait_for(refused)
        waits = []
        for _ in range(6):
            viewer._retried = -math.inf  # (as if its wait were over)
            viewer._request_snapshot()
            waits.append(viewer._retry_s)
        assert waits == [60.0, 120.0, 240.0, 480.0, 600.0, 600.0]
    finally:
        viewer.close()
        listener.close()
