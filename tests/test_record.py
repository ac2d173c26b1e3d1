"""`pardash record`: a copy of a live run's log, from its hub, as it is written (telemetry/logfeed.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest
import zmq
from helpers import hub_alone, identity, live_ranks, pardash_env, serving, wait_for

from pardash.telemetry import logfeed
from pardash.telemetry.hub import Hub
from pardash.telemetry.reporter import Reporter

pytestmark = pytest.mark.timeout(120)


def _record(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pardash", "record", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=pardash_env())  # fmt: skip


def _stop_hub(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)


def _same_so_far(copy, log) -> bool:
    return copy.exists() and copy.read_bytes() == log.read_bytes()


def test_record_copies_a_live_runs_log_from_its_first_line_to_its_last(tmp_path):
    log, copy = tmp_path / "hub" / "telemetry.jsonl", tmp_path / "copy.jsonl"
    proc, info = hub_alone(log, "rec-run")
    rec = None
    try:
        live_ranks(info, "rec-run", log, steps=3)
        rec = _record("rec-run", "-o", str(copy))
        wait_for(lambda: _same_so_far(copy, log))  # caught up with what the log held
        # It says so once the hub answers with nothing new: read before more steps come, which
        # a slow copy could take in the same answer, the hub then stopped before another.
        first = rec.stderr.readline()
        assert "following it live" in first, first
        live_ranks(info, "rec-run", log, steps=5)  # (more steps, now it follows live)
        wait_for(lambda: copy.read_bytes().count(b'"kind":"step"') >= 10 + 6)
    finally:
        _stop_hub(proc)
    out, err = rec.communicate(timeout=30)
    assert rec.returncode == 0, err
    assert f"run rec-run ended; {copy} holds its whole log" in out
    assert copy.read_bytes() == log.read_bytes()  # byte for byte, the hub's closing line too
    last = json.loads(copy.read_bytes().splitlines()[-1])
    assert last["kind"] == "event" and last["message"].startswith("hub stopped")


def test_a_stopped_copy_is_carried_on_from_its_last_whole_line(tmp_path):
    log, copy = tmp_path / "hub.jsonl", tmp_path / "runs" / "rec-on" / "telemetry.jsonl"
    proc, info = hub_alone(log, "rec-on")
    try:
        live_ranks(info, "rec-on", log, steps=4)
        rec = _record("rec-on", "--runs-dir", str(tmp_path / "runs"))  # the default copy: RUNS_DIR/<run id>/telemetry.jsonl
        wait_for(lambda: _same_so_far(copy, log))
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=30)
        assert rec.returncode == 130
        assert f"stopped; {copy} holds run rec-on's log up to byte {copy.stat().st_size:,}" in err
        assert f"`pardash record rec-on --runs-dir {tmp_path / 'runs'}` carries it on" in err  # (it left --runs-dir out)
        with open(copy, "r+b") as fh:  # a copy cut mid-line (stopped while writing)
            fh.truncate(copy.stat().st_size - 7)
        live_ranks(info, "rec-on", log, steps=2)  # what the hub took while no copy was made
        rec = _record("rec-on", "--runs-dir", str(tmp_path / "runs"))
        wait_for(lambda: _same_so_far(copy, log))
    finally:
        _stop_hub(proc)
    out, err = rec.communicate(timeout=30)
    assert rec.returncode == 0, err
    assert copy.read_bytes() == log.read_bytes()
    assert "of which" in out  # (it says what this copy added to the one carried on)


def test_the_command_that_carries_a_copy_on_keeps_its_keys(tmp_path):
    # "`pardash record URL -o FILE` carries it on" left out --curve-dir: run as said, it got no
    # answer from a hub with keys.
    import shlex

    from pardash.telemetry import security

    keys, log, copy = tmp_path / "my keys", tmp_path / "hub.jsonl", tmp_path / "copy.jsonl"
    security.make_keys(keys)
    env = pardash_env(PARDASH_CURVE_DIR=None)
    hub = subprocess.Popen([sys.executable, "-m", "pardash", "hub", "--run-id", "rec-keys", "--log", str(log), "--curve-dir", str(keys)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)  # fmt: skip
    try:
        ingest = json.loads(hub.stdout.readline())["ingest"]
        rec = subprocess.Popen([sys.executable, "-m", "pardash", "record", ingest, "-o", str(copy), "--curve-dir", str(keys)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
        wait_for(lambda: _same_so_far(copy, log))
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=30)
        assert rec.returncode == 130, err
        said = err.split("`")[1]
        assert said == f"pardash record {ingest} -o {copy} --curve-dir '{keys}'", err
        again = subprocess.Popen([sys.executable, "-m", *shlex.split(said)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=env)  # fmt: skip
        first = again.stderr.readline()  # run as said, the hub answers it
        assert "holds its log so far" in first and "following it live" in first, first
    finally:
        _stop_hub(hub)
    out, err = again.communicate(timeout=30)
    assert again.returncode == 0, err
    assert f"run rec-keys ended; {copy} holds its whole log" in out and copy.read_bytes() == log.read_bytes()


def test_record_refuses_the_hubs_own_log_another_log_and_a_hub_without_one(tmp_path):
    log = tmp_path / "hub.jsonl"
    other = tmp_path / "other.jsonl"
    other.write_text('{"kind":"hello","rank":0,"seq":0,"t":1.0,"run":"another"}\n')
    proc, info = hub_alone(log, "rec-no")
    try:
        live_ranks(info, "rec-no", log, steps=1)
        rec = _record("rec-no", "-o", str(log))
        _, err = rec.communicate(timeout=30)
        assert rec.returncode == 2  # bad input, as the README has it (it was 1)
        assert f"{log} is the log the hub writes itself (run rec-no): it needs no copy; give another -o PATH" in err
        rec = _record("rec-no", "-o", str(other))
        _, err = rec.communicate(timeout=30)
        assert rec.returncode == 2
        assert f"{other} holds another log than this run's (or an edited copy of it)" in err
        assert other.read_text().count("\n") == 1  # untouched
        rec = _record("rec-no", "-o", str(tmp_path))  # a folder
        _, err = rec.communicate(timeout=30)
        assert (rec.returncode, err) == (2, f"pardash: error: -o {tmp_path} is a folder; give a file: -o {tmp_path}/telemetry.jsonl\n")
    finally:
        _stop_hub(proc)
    # A hub that keeps no log: said, nothing written.
    hub = subprocess.Popen([sys.executable, "-m", "pardash", "hub", "--run-id", "nolog", "--log", os.devnull, "--no-registry"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=pardash_env())  # fmt: skip
    try:
        ingest = json.loads(hub.stdout.readline())["ingest"]
        rec = _record(ingest, "-o", str(tmp_path / "none.jsonl"))
        _, err = rec.communicate(timeout=30)
        assert rec.returncode == 1
        assert "is not a file (a pipe, or /dev/null): there is nothing to copy" in err
        assert not (tmp_path / "none.jsonl").exists()
    finally:
        _stop_hub(hub)


def test_a_hub_that_never_answers_is_bad_input_as_attach_says_it(tmp_path):
    # `record tcp://127.0.0.1:1` exited 1, `attach --headless tcp://127.0.0.1:1` 2, both saying
    # "no answer from the hub".
    rec = _record("tcp://127.0.0.1:1", "-o", str(tmp_path / "copy.jsonl"))
    _, err = rec.communicate(timeout=60)
    attach = subprocess.run([sys.executable, "-m", "pardash", "attach", "--headless", "tcp://127.0.0.1:1"],
                            capture_output=True, text=True, env=pardash_env(), timeout=60)  # fmt: skip
    # (nothing listens there: both say so alike, without blaming keys as they did)
    assert "nothing answers at tcp://127.0.0.1:1" in attach.stderr and "CURVE" not in attach.stderr, attach.stderr
    assert err == attach.stderr
    assert (rec.returncode, attach.returncode) == (2, 2)
    assert not (tmp_path / "copy.jsonl").exists()


def test_a_copy_goes_on_across_a_hub_killed_and_restarted_on_its_log(tmp_path):
    # The launcher's supervisor restarts a killed hub on the same ports and log (--resume): a
    # copy made meanwhile goes on from its offset, and ends with the new hub's last line.
    log, copy = tmp_path / "hub.jsonl", tmp_path / "copy.jsonl"

    def hub(*extra: str) -> tuple[subprocess.Popen, dict]:
        p = subprocess.Popen([sys.executable, "-m", "pardash", "hub", "--run-id", "rec-k", "--log", str(log),
                              "--no-registry", *extra], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=pardash_env())  # fmt: skip
        return p, json.loads(p.stdout.readline())

    # The first hub binds ports of its own choosing (three in a row); the second takes them
    # again as the supervisor's restart does: --port with the ingest port the ranks know.
    # (Ports picked free beforehand and bound later could be taken meanwhile by another test.)
    first, info = hub()
    port = info["ingest"].rsplit(":", 1)[1]
    rec = _record(info["ingest"], "-o", str(copy), "--every", "1000")
    second = None
    try:
        live_ranks(info, "rec-k", log, steps=2)
        wait_for(lambda: _same_so_far(copy, log))
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        second, info = hub("--port", port, "--resume")
        assert info["ingest"].endswith(f":{port}")
        live_ranks(info, "rec-k", log, steps=3)
        wait_for(lambda: b"hub restarted" in log.read_bytes() and _same_so_far(copy, log))  # (the new hub has it asking)
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                _stop_hub(p)
    out, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    assert "its hub restarted; the copy goes on" in err
    assert copy.read_bytes() == log.read_bytes()


@contextlib.contextmanager
def _copied(tmp_path, run: str, steps: int):
    """A hub alone, two ranks' ``steps`` steps in its log and a `pardash record` that has
    copied them; on leaving, the hub stopped and the copy ended as its log (exit 0)."""
    log, copy = tmp_path / "hub.jsonl", tmp_path / "copy.jsonl"
    proc, info = hub_alone(log, run)
    try:
        live_ranks(info, run, log, steps=steps)
        rec = _record(run, "-o", str(copy))
        wait_for(lambda: _same_so_far(copy, log))
        yield log, copy, info
    finally:
        _stop_hub(proc)
    _, err = rec.communicate(timeout=30)
    assert rec.returncode == 0, err
    assert copy.read_bytes() == log.read_bytes()


def test_a_copy_follows_a_log_deleted_under_its_hub(tmp_path):
    # The hub reads its log through its own descriptor, not its path: a log deleted while a
    # copy ran read "cannot read the hub's log: No such file or directory", or a file half
    # written back, and the copy stopped (exit 1). The recorder writes it again at its path.
    with _copied(tmp_path, "rec-rm", steps=3) as (log, copy, info):
        os.unlink(log)
        live_ranks(info, "rec-rm", log, steps=3, wait=False)  # (the log is gone: its steps are not there to wait for)
        wait_for(lambda: log.exists() and b"was deleted while the hub wrote it" in log.read_bytes(), timeout_s=60)
        wait_for(lambda: _same_so_far(copy, log))
    assert copy.read_bytes().count(b'"kind":"step"') == 12


def test_two_copies_into_one_file_are_refused(tmp_path):
    # Both appended to it: a file twice the log, each saying it held the whole log.
    with _copied(tmp_path, "rec-two", steps=2) as (_, copy, _):
        second = _record("rec-two", "-o", str(copy))
        _, err = second.communicate(timeout=30)
        assert second.returncode == 2
        assert f"another `pardash record` writes {copy} now; give this one another -o PATH" in err


def test_a_log_larger_than_an_answer_is_copied_in_whole_lines(tmp_path):
    # A day's log is copied in answers of CHUNK_BYTES, each cut after its last whole line: the
    # copy never holds half a line, and the whole is the log.
    log, copy = tmp_path / "big.jsonl", tmp_path / "copy.jsonl"
    line = json.dumps({"kind": "event", "rank": 0, "seq": 1, "t": 1.0, "run": "big", "name": "warning", "message": "x" * 300})
    with open(log, "w") as fh:
        for _ in range(3 * logfeed.CHUNK_BYTES // len(line) + 17):
            fh.write(line + "\n")
    chunks: list[int] = []
    sizes: list[int] = []

    def progress(cp: logfeed.Copy, news: str) -> None:
        chunks.append(cp.offset)
        sizes.append(cp.hub_size)  # (how far behind it is: record's progress said a growing number alone)
        with open(copy, "rb") as fh:
            assert fh.read().endswith(b"\n")  # whole lines at every step

    with serving(Hub(run_id="big", log_path=str(log), context=zmq.Context())) as hub:
        follower = logfeed.LogFollower(hub.snapshot_endpoint, curve=False, context=hub.ctx)
        try:
            rep = Reporter(hub.ingest_endpoint, run="big", identity=identity(0, 1), heartbeat_s=0)
            rep.hello(strategy="single")
            rep.step(step=1, loss=0.5, step_s=0.01)
            rep.close()
            cp = logfeed.follow(follower, str(copy), default_out=str, wait_s=30, progress=progress,
                                stop=lambda: _same_so_far(copy, log) and b'"kind":"step"' in copy.read_bytes())  # fmt: skip
        finally:
            follower.close()  # (on the hub's context: before the hub closes it)
    assert copy.read_bytes() == log.read_bytes()[: cp.offset]
    assert len([c for c in chunks if c]) >= 4  # more than one answer
    assert sizes[0] >= 3 * logfeed.CHUNK_BYTES and all(c < z for c, z in zip(chunks[:3], sizes[:3]))  # catching up: less than the whole
    assert not cp.ended  # stopped by the caller, before the hub ended
    # A copy edited past its first answer is no copy to carry on (a line deleted there had it
    # go on from the wrong place; its first 4 MiB alone were compared).
    data = bytearray(copy.read_bytes())
    at = logfeed.CHUNK_BYTES + len(data) // 3 - 200
    del data[at : data.index(b"\n", at) + 1]
    copy.write_bytes(bytes(data))
    with serving(Hub(run_id="big", log_path=str(log), context=zmq.Context())) as hub:
        follower = logfeed.LogFollower(hub.snapshot_endpoint, curve=False, context=hub.ctx)
        try:
            with pytest.raises(logfeed.CopyError, match="is not a copy of this run's log up to its end"):
                logfeed.follow(follower, str(copy), default_out=str, wait_s=30)
        finally:
            follower.close()


def test_read_whole_lines_cuts_after_the_last_newline_and_says_why_it_cannot(tmp_path):
    log = tmp_path / "l.jsonl"
    log.write_bytes(b'{"a":1}\n{"b":2}\n{"c":')
    assert logfeed.read_whole_lines(str(log), 0) == (b'{"a":1}\n{"b":2}\n', 21, "")
    assert logfeed.read_whole_lines(str(log), 8, limit=10) == (b'{"b":2}\n', 21, "")
    assert logfeed.read_whole_lines(str(log), 16) == (b"", 21, "")
    data, size, why = logfeed.read_whole_lines(str(log), 99)
    assert (data, size) == (b"", 21) and "holds 21" in why
    assert "cannot read" in logfeed.read_whole_lines(str(tmp_path / "none"), 0)[2]


def test_the_hub_drops_log_asks_it_cannot_read_and_bounds_the_asks_it_keeps():
    srv = logfeed.LogServer(None, "r", "h")
    for bad in (b"", b"abc", b"-5", b"1e3", b"\xff" * 10, b"18446744073709551616"):  # (2**64 stopped the hub as its answer was encoded)
        srv.ask(b"id", bad, 0.0)
    assert not srv.asks
    for k in range(logfeed.MAX_ASKS + 50):
        srv.ask(b"c%d" % k, b"0", 0.0)
    assert len(srv.asks) == logfeed.MAX_ASKS
    # Answered with why (no log kept), to a real DEALER
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    try:
        port = router.bind_to_random_port("tcp://127.0.0.1")
        dealer.connect(f"tcp://127.0.0.1:{port}")
        dealer.send_multipart([logfeed.LOG_REQUEST, b"0"])
        ident, tag, off = router.recv_multipart()
        srv.asks.clear()
        srv.ask(ident, off, 0.0)
        srv.answer(router, 0.0)
        tag, head, data = dealer.recv_multipart()
        chunk = logfeed._decode_chunk(head)
        assert (tag, data, chunk.run, chunk.offset) == (logfeed.LOG_REQUEST, b"", "r", 0)
        assert chunk.error.startswith("this hub keeps no log")
    finally:
        router.close(0)
        dealer.close(0)
        ctx.term()


def test_a_hubs_address_without_tcp_is_taken_as_one():
    # `pardash attach 127.0.0.1:29690` said "no live run '127.0.0.1:29690'": no run id has a
    # colon, and an address is what a user copies from a hub's first line.
    from pardash.telemetry.client import AttachError, resolve

    for given, host in (("127.0.0.1:29690", "127.0.0.1"), ("node0.cluster:29690", "node0.cluster"), ("[::1]:29690", "[::1]")):
        assert resolve(given) == {"run_id": "", "ingest": f"tcp://{host}:29690", "updates": f"tcp://{host}:29691",
                                  "snapshot": f"tcp://{host}:29692"}  # fmt: skip
    with pytest.raises(AttachError, match="no live run 'nope'"):
        resolve("nope")
    attach = subprocess.run([sys.executable, "-m", "pardash", "attach", "--headless", "127.0.0.1:1"],
                            capture_output=True, text=True, env=pardash_env(), timeout=60)  # fmt: skip
    assert attach.returncode == 2 and "nothing answers at tcp://127.0.0.1:1 (asked on its snapshot port" in attach.stderr, attach.stderr


@pytest.mark.parametrize("given", ["log", "folder"])
def test_record_takes_a_live_runs_log_or_folder_as_attach_does(tmp_path, given):
    # `pardash record runs/<id>/telemetry.jsonl` (the LOG `ps` lists) said "no live run
    # '.../telemetry.jsonl'; `pardash ps` lists the live ones", of the run ps listed.
    log, copy = tmp_path / "job" / "telemetry.jsonl", tmp_path / "copy.jsonl"
    proc, info = hub_alone(log, "path-run")
    rec = None
    try:
        live_ranks(info, "path-run", log, steps=3)
        rec = _record(str(log if given == "log" else log.parent), "-o", str(copy))
        wait_for(lambda: _same_so_far(copy, log))
    finally:
        _stop_hub(proc)
        if rec is not None:
            out, err = rec.communicate(timeout=30)
    assert rec.returncode == 0, err
    assert f"run path-run ended; {copy} holds its whole log" in out
    assert copy.read_bytes() == log.read_bytes()


def test_record_of_a_log_no_live_run_records_says_where_it_is_read_instead(tmp_path):
    log = tmp_path / "old.jsonl"
    log.write_text('{"kind": "event"}\n')
    for target, said in ((log, f"{log}: no live run of yours records this log (its run is over, or its hub runs on another machine): "
                               f"`pardash replay {log}` shows it, `pardash report {log}` sums it up"),
                         (tmp_path / "gone.jsonl", f"{tmp_path / 'gone.jsonl'}: no such log or run folder (record takes a live run's id, "
                                                   "log or folder, or a hub's tcp://HOST:PORT; `pardash ps` lists the live runs)")):  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "pardash", "record", str(target)], capture_output=True, text=True, timeout=60,
                              env=pardash_env())  # fmt: skip
        assert proc.returncode == 2 and proc.stdout == "", proc
        assert proc.stderr == f"pardash: error: {said}\n"
