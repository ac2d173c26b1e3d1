"""Review 245, findings 3 and 4: a hub alone that no rank reached. `pardash ps` said JOB
"running" of it (ranks pointed at its second port, or refused for their keys), where the viewer
said "waiting for the ranks to start"; a rank pointed at the hub's updates or snapshot port
was asked "is `pardash hub` running there?" of a hub that was."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time

import pytest
from helpers import identity, hub_alone, live_ranks, wait_for

from pardash import cli
from pardash.telemetry import registry, reporter
from pardash.telemetry.reporter import Reporter

pytestmark = pytest.mark.timeout(120)

ENDS = {"ingest": "tcp://127.0.0.1:1", "updates": "tcp://127.0.0.1:2", "snapshot": "tcp://127.0.0.1:3"}
WAITING_NOTE = "JOB waiting: no rank has reached the hub yet"


def _rows(capsys) -> tuple[str, dict[str, str], list[str]]:
    """`pardash ps`'s head, its rows by run id, and its notes below them."""
    assert cli.main(["ps"]) == 0
    head, *lines = capsys.readouterr().out.splitlines()
    rows = {r.split()[0]: r for r in lines if r.split()[0].endswith("-run")}
    return head, rows, [r for r in lines if not r.split()[0].endswith("-run")]


def _column(head: str, row: str, name: str, after: str) -> str:
    return row[head.index(name) : head.index(after)].strip()


def test_ps_says_waiting_of_a_hub_no_rank_has_reached_and_running_once_one_has(tmp_path, capsys):
    log = tmp_path / "run.jsonl"
    proc, info = hub_alone(log, "alone-run")
    try:
        # Its hub has said where the run is (no rank yet): what a rank at the wrong port leaves.
        wait_for(lambda: "progress" in (registry.entry("alone-run") or {}), 4 * registry.PROGRESS_EVERY_S)
        head, rows, notes = _rows(capsys)
        row = rows["alone-run"]
        assert _column(head, row, "JOB", "INGEST") == "waiting", row
        assert _column(head, row, "AGE", "SAMPLES/S").split()[-1] == "-", row  # (its STEP read 0)
        assert any(n.startswith(WAITING_NOTE) and "PARDASH_ENDPOINT" in n for n in notes), notes
        # Ranks reach it: the hub says so at its next word, and `ps` no longer says "waiting".
        live_ranks(info, "alone-run", log, steps=3)

        def reached() -> bool:
            return sum(((registry.entry("alone-run") or {}).get("progress") or {}).get("ranks", {}).values()) == 2

        wait_for(reached, 4 * registry.PROGRESS_EVERY_S)
        head, rows, notes = _rows(capsys)
        # (its ranks send no heartbeat: the hub soon holds them silent)
        assert _column(head, rows["alone-run"], "JOB", "INGEST") in ("running", "1 silent", "2 silent"), rows
        assert not any(n.startswith(WAITING_NOTE) for n in notes), notes
    finally:
        proc.kill()
        proc.wait(30)


def test_ps_says_waiting_only_of_the_runs_no_rank_has_reached(capsys):
    now = time.time()
    nobody = {"step": 0, "steps": None, "samples_per_s": 0.0, "ranks": {}, "stopped": 0, "t": now}
    registry.register({"run_id": "empty-run", "pid": os.getpid(), **ENDS, "curve": True, "progress": nobody})
    some = {"step": 5, "samples_per_s": 10.0, "ranks": {"running": 2}, "t": now}
    registry.register({"run_id": "busy-run", "pid": os.getpid(), **ENDS, "curve": False, "progress": some})
    # A hub quiet for a while says so whether ranks reached it or not.
    quiet = {**nobody, "t": now - 125}
    registry.register({"run_id": "still-run", "pid": os.getpid(), **ENDS, "curve": False, "progress": quiet})
    head, rows, notes = _rows(capsys)
    assert _column(head, rows["empty-run"], "JOB", "INGEST") == "waiting", rows
    assert _column(head, rows["busy-run"], "JOB", "INGEST") == "running", rows
    # (2m05s, or more where the host took seconds between the entry and `ps`: a loaded CI run
    # read 2m06s)
    assert re.fullmatch(r"quiet 2m(0[5-9]|1\d)s", _column(head, rows["still-run"], "JOB", "INGEST")), rows
    assert [n.split(":")[0] for n in notes] == ["JOB waiting", "KEYS curve"], notes


def _not_ingest(endpoint: str, rank: int = 0) -> str:
    return (f"pardash: something answers rank {rank} at {endpoint}, but it is not a hub's ingest port (a ZeroMQ socket "
            "of another kind, such as a hub's updates or snapshot port): PARDASH_ENDPOINT takes the first port the hub "
            "prints; training goes on, unwatched")  # fmt: skip


def _pardash_lines(capfd) -> list[str]:
    return [line for line in capfd.readouterr().err.splitlines() if line.startswith("pardash")]


@pytest.mark.parametrize("port", ["updates", "snapshot"])
def test_a_rank_at_a_hubs_other_port_is_told_it_is_not_the_ingest(hub, capfd, monkeypatch, port):
    # The rank said, 10 s in, "has not reached a hub at ... (is `pardash hub` running there?)",
    # and at its end "never reached a hub": a hub ran there, at PORT+1 of its ingest.
    monkeypatch.setenv("PARDASH_HUB_WAIT_S", "3600")  # (said at once, not after the wait for a late hub)
    # What the rank says is tested here, not when a busy host lets it say it. Its ZeroMQ I/O
    # thread runs under SCHED_IDLE (reporter._yield_to_training: it never takes a core from
    # training), and with both cores of a CI run busy (load ~15) each step of its handshake
    # waited seconds for idle time: nothing was said in the 30 s below (reproduced under load,
    # 1 run in 15). At normal priority it takes its share of the host like any thread.
    monkeypatch.setattr(reporter, "_yield_to_training", lambda tids: None)
    # A socket of another kind also drops some connections in the handshake with no word of
    # why (libzmq connects again after those): a third to a half of them with 6 busy processes
    # on 2 cores. DROPS_SAID_AFTER such drops before the first connection that tells turn the
    # rank's word into "refuses" (how many make a refusal is the reporter's heuristic, not this
    # test's point): here the rank waits for the connection that tells.
    monkeypatch.setattr(reporter, "DROPS_SAID_AFTER", 10**6)
    endpoint = hub.endpoints[port]
    told = []
    rep = Reporter(endpoint, run="test-run", identity=identity(0), heartbeat_s=0.05)
    try:
        rep.hello(strategy="ddp")
        for step in range(1, 4):
            rep.step(step=step, loss=1.0, step_s=0.01)
        wait_for(lambda: told.extend(_pardash_lines(capfd)) or told)
    finally:
        rep.close(linger_ms=0)
    told += _pardash_lines(capfd)
    assert told == [_not_ingest(endpoint)], told  # once, and no "never reached a hub" at its end
    assert hub.core.stats().received == 0


# (alone, after the rest: a job this short has its 3 s of grace for its hub's word, and a loaded
# host (4 workers on 2 cores, load ~15) once dropped each of its connections in the handshake
# with no word of why that whole time; it said the hedged "refuses ... or not a pardash hub")
@pytest.mark.serial
def test_a_short_job_at_a_hubs_other_port_is_told_so_at_its_end_and_other_ranks_of_the_node_say_nothing(hub, capfd):
    endpoint = hub.endpoints["updates"]
    for local in (1, 0):  # (rank 1, the node's second: the first of the node says it)
        rep = Reporter(endpoint, run="test-run", identity=identity(local), heartbeat_s=0.05)
        rep.hello(strategy="ddp")
        rep.close(linger_ms=0)
        assert _pardash_lines(capfd) == ([_not_ingest(endpoint)] if local == 0 else []), local


def test_a_short_job_whose_first_connections_were_dropped_in_the_handshake_still_says_what_answers_it(hub, capfd, monkeypatch):
    # A CI run (4 workers on 2 cores) saw a short job's connections to a hub's updates port
    # dropped in the handshake (as a socket of another kind drops some) until its grace ended,
    # and said the hub "refuses" it (CURVE keys?). Here a relay in front of that port drops the
    # connections of the rank's first 0.3 s so (its two sockets'), and passes later ones on; the
    # grace ends in between (libzmq connects again >= 100 ms after a drop).
    from pardash.telemetry import reporter

    monkeypatch.setattr(reporter, "HUB_GRACE_S", 0.15)
    target = hub.endpoints["updates"].rsplit(":", 1)
    server = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def relay() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                accepted.append(time.monotonic())
                if accepted[-1] - accepted[0] < 0.3:
                    conn.close()
                    continue
                up = socket.create_connection((target[0].removeprefix("tcp://"), int(target[1])))
                threading.Thread(target=pipe, args=(conn, up), daemon=True).start()
                threading.Thread(target=pipe, args=(up, conn), daemon=True).start()

    threading.Thread(target=relay, daemon=True).start()
    endpoint = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    try:
        rep = Reporter(endpoint, run="test-run", identity=identity(0), heartbeat_s=0.05)
        rep.hello(strategy="ddp")
        # (the job ends once a connection was passed on: on a loaded machine its first tries came
        # only after its grace, and it ended before any, "never reached a hub", a CI run's)
        wait_for(lambda: any(a - accepted[0] >= 0.3 for a in accepted), timeout_s=60)
        rep.close(linger_ms=0)
    finally:
        server.close()
    assert _pardash_lines(capfd) == [_not_ingest(endpoint)]
    assert len(accepted) >= 3, accepted  # (two dropped at least, one passed on)


def test_a_rank_at_its_hubs_ingest_or_at_no_zeromq_socket_is_not_told_so(hub, capfd, monkeypatch):
    monkeypatch.setenv("PARDASH_HUB_WAIT_S", "3600")
    # The hub's ingest: nothing said, a short job included.
    rep = Reporter(hub.ingest_endpoint, run="test-run", identity=identity(0), heartbeat_s=0.05)
    rep.hello(strategy="ddp")
    rep.close(linger_ms=0)
    assert _pardash_lines(capfd) == []
    # A program that is no ZeroMQ socket (it takes the connection and closes it) is not called
    # a hub's other port: the handshake's failure is said, as before.
    server = socket.create_server(("127.0.0.1", 0))
    endpoint = f"tcp://127.0.0.1:{server.getsockname()[1]}"

    def take_and_close() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=take_and_close, daemon=True).start()
    told = []
    rep = Reporter(endpoint, run="test-run", identity=identity(0), heartbeat_s=0.05)
    try:
        rep.hello(strategy="ddp")
        wait_for(lambda: told.extend(_pardash_lines(capfd)) or told)
    finally:
        rep.close(linger_ms=0)
        server.close()
    told += _pardash_lines(capfd)
    assert len(told) == 1 and "what listens there is not a pardash hub" in told[0], told
    assert "ingest port" not in told[0], told
