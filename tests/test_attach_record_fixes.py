"""`pardash attach`, `record` and `ps` from a reviewer's list: the hints they print work as
printed, what waiting cannot mend is said at once and in one line, and a hub's refusal is said
as a refusal, not as a run gone."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import pty
import shlex
import signal
import subprocess
import sys
import time

import pytest
import zmq
from helpers import TerminalOutput, hub_alone, pardash_env, serving, terminate, wait_for

from pardash.telemetry import logfeed, registry, security
from pardash.telemetry.client import HubClient
from pardash.telemetry.hub import Hub
from pardash.telemetry.spawn import spawn_hub

pytestmark = pytest.mark.timeout(180)

NOTHING = "tcp://127.0.0.1:1"
"""An address where nothing listens."""


def _pardash(*args: str, patch: str = "", cwd=None, timeout: float = 60, **env: str | None) -> subprocess.CompletedProcess:
    """``pardash ARGS`` in a process of its own, with ``patch`` (Python) run first: a wait made
    short, or made long enough that a command that waits could not pass the test's bound."""
    code = f"import sys\nfrom pardash import cli, record\n{patch}\nsys.exit(cli.main({list(args)!r}))\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env=pardash_env(PARDASH_CURVE_DIR=None, **env), cwd=cwd, stdin=subprocess.DEVNULL)  # fmt: skip


def _one_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@contextlib.contextmanager
def _listed_hub(tmp_path, run: str, keys=None):
    """A hub alone, listed in the test's registry (with the keys folder ``keys``); its info."""
    args = ["--run-id", run, "--log", str(tmp_path / f"{run}.jsonl")] + (["--curve-dir", str(keys)] if keys else [])
    proc, info = spawn_hub(args, env=pardash_env(PARDASH_CURVE_DIR=None), stderr=subprocess.DEVNULL)
    try:
        yield info
    finally:
        terminate(proc)


# -- 1. attach's "watches it again" keeps --curve-dir -------------------------------------------


def test_attachs_watch_it_again_hint_keeps_its_keys_and_works_as_printed(tmp_path, monkeypatch, capsys):
    # It printed `pardash attach RUN`, which a hub with keys refused ("takes only viewers with
    # an authorised key"), as record's carry-on hint once did.
    from pardash import cli
    from pardash.telemetry import printer

    keys = tmp_path / "my keys"  # (a space: the hint quotes it)
    security.make_keys(keys)
    monkeypatch.delenv(security.CURVE_DIR_VAR, raising=False)

    def ctrl_c(*_a, **_k):  # Ctrl-C once the viewer follows the run: it has had its snapshot
        raise KeyboardInterrupt

    monkeypatch.setattr(printer, "follow_attached", ctrl_c)
    with _listed_hub(tmp_path, "again-run", keys):
        assert cli.main(["attach", "--headless", "again-run", "--curve-dir", str(keys)]) == 130
        err = capsys.readouterr().err
        said = err.split("`")[1]
        assert said == f"pardash attach again-run --curve-dir '{keys}'", err
        assert cli.main(shlex.split(said)[1:] + ["--headless"]) == 130  # run as said, the hub takes it
        assert "stopped watching; the run goes on" in capsys.readouterr().err


# -- 2. no chmod advice for a shared folder ------------------------------------------------------


def test_a_shared_sticky_key_folder_is_never_advised_a_chmod(tmp_path):
    # `--curve-dir /tmp` said "`chmod 700 /tmp`": advice that breaks every other user of /tmp.
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # as /tmp is
    with pytest.raises(security.CurveKeyError) as err:
        security.load_client_keys(shared)
    said = str(err.value)
    assert said.startswith(f"{shared} can be written by other users") and "chmod 700" not in said, said
    assert "keep the keys in a private folder of your own instead" in said, said
    # A key folder of one's own, left group-writable, is still told its chmod: that one mends it.
    own = tmp_path / "own"
    security.make_keys(own)
    os.chmod(own, 0o770)
    with pytest.raises(security.CurveKeyError, match=f"`chmod 700 {own}`"):
        security.load_client_keys(own)


# -- 3. a TUI attach with no hub to show -------------------------------------------------------


@pytest.mark.parametrize("hub", ["nothing", "keys"])
def test_a_tui_attach_with_no_hub_to_show_fails_in_one_line_before_the_tui(tmp_path, hub):
    # It opened the dashboard on "waiting for the hub's snapshot…" for ever, and `q` printed
    # "stopped watching; the run goes on" and exited 0 for a run there never was.
    keys = tmp_path / "keys"
    security.make_keys(keys)
    with contextlib.ExitStack() as stack:
        target = NOTHING if hub == "nothing" else stack.enter_context(_listed_hub(tmp_path, "tui-keys", keys))["ingest"]
        master, slave = pty.openpty()
        # Nothing there: said after the wait (made short). A refusal: said at once, so a wait
        # longer than the test's bound could not pass (it waited its 5 s all the same).
        wait_s = 1.0 if hub == "nothing" else 3600.0
        code = f"import sys\nfrom pardash import cli\ncli.ATTACH_WAIT_S = {wait_s}\nsys.exit(cli.main(['attach', {target!r}]))\n"
        p = subprocess.Popen([sys.executable, "-c", code], stdin=slave, stdout=slave, stderr=slave, cwd=tmp_path,
                             env=pardash_env(PARDASH_CURVE_DIR=None, TERM="xterm-256color", COLUMNS="100", LINES="30"))  # fmt: skip
        os.close(slave)
        screen = TerminalOutput(master)
        try:
            code = p.wait(timeout=60)
        finally:
            if p.poll() is None:  # (the TUI that waits for ever)
                p.kill()
                p.wait()
        out = screen.done().decode(errors="replace").replace("\r\n", "\n")
    assert code == 2, out[-2000:]
    assert "\x1b[?1049h" not in out and "goes on" not in out, out[-2000:]  # the TUI never opened
    said = [line for line in out.splitlines() if line.startswith("pardash: error:")]
    if hub == "nothing":
        assert said == [f"pardash: error: nothing answers at {NOTHING} (asked on its snapshot port, tcp://127.0.0.1:3); "
                        "is the run still live? (`pardash ps`)"], out  # fmt: skip
    else:  # (the hub's address names no run: its keys are not known until it refuses them)
        assert len(said) == 1 and "refuses this viewer: it has CURVE keys and this viewer has none" in said[0], out


# -- 4. record says at once what waiting cannot mend ----------------------------------------


LONG_FIND = "record.FIND_S = 3600.0"
"""A record that waited for a run to appear would outlast the test's bound."""


def test_record_fails_at_once_on_an_unknown_an_ended_and_a_keyed_run(tmp_path):
    # Each waited 10 s in silence (FIND_S), then said what it could have said at once.
    proc = _pardash("record", "nosuch", patch=LONG_FIND, cwd=tmp_path)
    assert (proc.returncode, _one_line(proc)) == (2, "pardash: error: no live run 'nosuch'; `pardash ps` lists the live ones, or name its hub as tcp://HOST:PORT, the ingest address it printed")
    # A run that has ended: where its record is, as `attach` says it
    run = "20261201-101010-abcd"
    (tmp_path / "runs" / run).mkdir(parents=True)
    (tmp_path / "runs" / run / "telemetry.jsonl").write_text('{"kind":"event","rank":-1,"seq":-1,"t":1.0,"run":"%s","name":"hub","message":"hub started"}\n' % run)
    proc = _pardash("record", run[:15], patch=LONG_FIND, cwd=tmp_path)
    assert proc.returncode == 2
    assert _one_line(proc).startswith(f"pardash: error: run {run} is over (no hub serves it now): `pardash report {run}` sums it up"), proc.stderr
    # The one live run's hub takes only viewers with keys, and none were given
    keys = tmp_path / "keys"
    security.make_keys(keys)
    with _listed_hub(tmp_path, "keyed-run", keys):
        proc = _pardash("record", patch=LONG_FIND, cwd=tmp_path)
    assert proc.returncode == 2
    assert _one_line(proc).startswith("pardash: error: run keyed-run takes only viewers with an authorised key: pass --curve-dir DIR"), proc.stderr


def test_record_waits_for_a_run_being_started_and_says_so(tmp_path):
    # What the wait was for: a record started with its run (a launch prints its run's id
    # before its hub is up and listed). A `pardash hub` that starts its hub once told to.
    go = tmp_path / "go"
    slow = tmp_path / "pardash"
    slow.write_text(
        "import os, sys, time\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.05)\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'pardash', *sys.argv[1:]])\n"
    )
    log, copy = tmp_path / "hub.jsonl", tmp_path / "copy.jsonl"
    starting = subprocess.Popen([sys.executable, str(slow), "hub", "--run-id", "late-run", "--log", str(log)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=pardash_env())  # fmt: skip
    code = "import sys\nfrom pardash import cli, record\nrecord.FIND_S = 120.0\nsys.exit(cli.main(sys.argv[1:]))\n"
    rec = subprocess.Popen([sys.executable, "-c", code, "record", "late-run", "-o", str(copy)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=pardash_env())  # fmt: skip
    try:
        first = rec.stderr.readline()
        assert first == "pardash record: waiting for run late-run to appear (`pardash hub` is starting one)...\n", first
        go.touch()
        said = rec.stderr.readline()
        assert "run late-run: " in said and "holds its log so far" in said, said
    finally:
        starting.terminate()
        starting.wait(30)
    out, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    assert "run late-run ended" in out and copy.read_bytes() == log.read_bytes()


# -- 5. a refused viewer key is said as a refusal ----------------------------------------------


def test_record_with_a_viewer_key_the_hub_no_longer_admits_says_it_is_refused(tmp_path):
    # It said "no answer from the hub of run RUN ...; is the run still live?" (exit 2), where
    # `attach` says the hub refuses this viewer's key.
    keys = tmp_path / "keys"
    security.make_keys(keys)
    alice = security.make_viewer_keys(keys, "alice")["folder"]
    with _listed_hub(tmp_path, "revoked-run", keys) as info:
        os.unlink(keys / security.VIEWERS / "alice.key")  # revoked
        viewer = HubClient(info["updates"], info["snapshot"], curve=alice)
        try:  # (the hub reads its folder again within a second: refused from then on)
            wait_for(lambda: viewer.poll() or viewer.refused, timeout_s=30)
        finally:
            viewer.close()
        proc = _pardash("record", "revoked-run", "-o", str(tmp_path / "x.jsonl"), "--curve-dir", str(alice),
                        patch="record.FIRST_ANSWER_S = 3600.0", cwd=tmp_path)  # fmt: skip  (said at once)
    assert proc.returncode == 2
    assert _one_line(proc) == (
        f"pardash: error: the hub of run revoked-run (its snapshot port, {info['snapshot']}) refuses this viewer: it does not "
        "admit this viewer's client key (`pardash keys --dir HUB_KEYS --viewer NAME` admits a viewer to watch: its key in the "
        "hub folder's authorized_viewers/; a key in authorized_clients/ may publish too)"
    )
    assert not (tmp_path / "x.jsonl").exists()


def test_a_log_copy_learns_the_hub_refuses_it_as_a_viewer_does(tmp_path):
    keys = tmp_path / "keys"
    security.make_keys(keys)
    with serving(Hub(run_id="refusing", log_path=str(tmp_path / "run.jsonl"), curve=str(keys), context=zmq.Context())) as hub:
        follower = logfeed.LogFollower(hub.snapshot_endpoint, curve=False, context=hub.ctx)
        try:
            with pytest.raises(logfeed.CopyRefused, match="no answer"):
                # (at once: a wait for an answer the refusal says will not come ran its length)
                logfeed.follow(follower, str(tmp_path / "copy.jsonl"), default_out=str, wait_s=30, first_wait_s=3600.0)
            assert follower.reached
            assert follower.refused.startswith("it has CURVE keys and this viewer has none"), follower.refused
        finally:
            follower.close()


# -- 6. a hub's address without tcp:// ---------------------------------------------------------


def test_record_of_an_address_without_tcp_names_the_address_as_attach_does(tmp_path):
    # `record 127.0.0.1:PORT` said "no answer from the hub of run  (its snapshot port ...)".
    rec = _pardash("record", "127.0.0.1:1", "-o", str(tmp_path / "copy.jsonl"), patch="record.FIRST_ANSWER_S = 1.0", cwd=tmp_path)
    attach = _pardash("attach", "--headless", "127.0.0.1:1", patch="cli.ATTACH_WAIT_S = 1.0", cwd=tmp_path)
    assert (rec.returncode, attach.returncode) == (2, 2)
    assert _one_line(rec) == _one_line(attach) == (
        f"pardash: error: nothing answers at {NOTHING} (asked on its snapshot port, tcp://127.0.0.1:3); is the run still live? (`pardash ps`)"
    )
    assert not (tmp_path / "copy.jsonl").exists()


# -- 7. ps: its age as a person reads it, and which hubs take keys ------------------------------


def test_ps_says_age_in_days_hours_and_minutes_and_which_hubs_need_keys(tmp_path, monkeypatch, capsys):
    # AGE read "172800s" for two days, and nothing said a hub would refuse viewers without keys.
    from pardash import cli

    ends = {"pid": os.getpid(), "ingest": "tcp://127.0.0.1:1", "updates": "tcp://127.0.0.1:2", "snapshot": "tcp://127.0.0.1:3"}
    registry.register({"run_id": "old-keyed", **ends, "curve": True, "strategy": "ddp", "world_size": 4})
    path = registry.registry_dir() / "old-keyed.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "started": time.time() - 2 * 86400 - 3 * 3600 - 60}))
    registry.register({"run_id": "new-plain", **ends, "curve": False})
    # A launched script's entry says "script"; its hub has heard the ranks say "ddp" (the TUI's).
    from pardash.telemetry import schema
    from pardash.telemetry.hub import _progress
    from pardash.telemetry.state import RunState

    heard = RunState()
    heard.apply(schema.Hello(run="script-run", rank=0, t=1.0, strategy="ddp", world_size=2), 1.0)
    registry.register({"run_id": "script-run", **ends, "curve": False, "strategy": "script", "progress": _progress(heard)})
    # A hub bound to every address: its INGEST as other machines reach it (tcp://0.0.0.0:PORT is
    # no address to give a rank elsewhere), as the hub itself says it.
    registry.register({"run_id": "everywhere", **ends, "ingest": "tcp://0.0.0.0:29740", "curve": True})
    assert cli.main(["ps"]) == 0
    head, *rows, note = capsys.readouterr().out.splitlines()
    row = {r.split()[0]: r for r in rows}
    assert row["everywhere"][head.index("INGEST"):].split()[0] == f"tcp://{socket.gethostname()}:29740", rows
    assert row["old-keyed"].split()[3] == "2d03h" and row["old-keyed"].split()[6] == "curve", rows
    assert row["new-plain"].split()[3] in ("0s", "1s") and row["new-plain"].split()[6] == "-", rows
    assert row["script-run"].split()[1] == "ddp" and row["old-keyed"].split()[1] == "ddp", rows
    age_end, keys_at, job_at = head.index("AGE") + 3, head.index("KEYS"), head.index("JOB")
    for r in rows:  # the columns line up under their heads
        assert r[age_end - 1] != " " and r[age_end] == " ", (head, r)  # (AGE right-aligned, as its head)
        assert r[keys_at - 1] == " " and r[keys_at:].split()[0] in ("curve", "-"), (head, r)
        assert r[job_at - 1] == " " and r[job_at:].startswith("running "), (head, r)
    assert note.startswith("KEYS curve:") and "--curve-dir DIR" in note
    # --json: the entries as they were, fields neither renamed nor dropped
    assert cli.main(["ps", "--json"]) == 0
    listed = {e["run_id"]: e for e in json.loads(capsys.readouterr().out)}
    assert listed["old-keyed"]["curve"] is True and listed["new-plain"]["curve"] is False and "started" in listed["old-keyed"]
    assert listed["everywhere"]["ingest"] == "tcp://0.0.0.0:29740"


# -- 8. small ones -----------------------------------------------------------------------------


def test_record_refuses_a_copy_path_that_is_no_regular_file(tmp_path):
    # `-o /dev/null` was taken, and said "/dev/null holds its log so far (1.0 MB)".
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (os.devnull, str(fifo)):
        proc = _pardash("record", NOTHING, "-o", path, cwd=tmp_path)
        assert proc.returncode == 2
        assert _one_line(proc) == (f"pardash: error: {path} is not a regular file (a device, a pipe or a socket): the copy "
                                   "needs a file of its own; give another -o PATH")  # fmt: skip
    # ... and where no -o names it, as the copy's file is opened (once the hub has named the run)
    with serving(Hub(run_id="devnull", log_path=str(tmp_path / "run.jsonl"), context=zmq.Context())) as hub:
        follower = logfeed.LogFollower(hub.snapshot_endpoint, curve=False, context=hub.ctx)
        try:
            with pytest.raises(logfeed.CopyRefused, match="is not a regular file"):
                logfeed.follow(follower, None, default_out=lambda run: os.devnull, wait_s=30)
        finally:
            follower.close()


def test_record_with_no_run_named_says_it_took_the_newest_of_several(tmp_path):
    # It took the newest silently, where `attach` says so.
    procs = []
    try:
        for run in ("first-run", "second-run"):
            procs.append(hub_alone(tmp_path / f"{run}.jsonl", run)[0])
        rec = subprocess.Popen([sys.executable, "-m", "pardash", "record", "-o", str(tmp_path / "copy.jsonl")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env())  # fmt: skip
        first = rec.stderr.readline()
        second = rec.stderr.readline()
        rec.send_signal(signal.SIGINT)
        rec.communicate(timeout=30)
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
    assert first == ("pardash record: recording the newest of 2 live runs: second-run (`pardash ps` lists them; "
                     "`pardash record RUN_ID` picks one)\n"), first  # fmt: skip
    assert "run second-run: " in second and "holds its log so far" in second, second


def test_a_headless_attach_by_address_names_the_run_it_watches(tmp_path):
    # Attached by id prefix it said "watching run X"; by the hub's address, never a word of which run.
    proc, info = hub_alone(tmp_path / "run.jsonl", "named-run")
    try:
        att = subprocess.Popen([sys.executable, "-m", "pardash", "attach", "--headless", "--every", "60", info["ingest"]],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env())  # fmt: skip
        try:
            said = att.stdout.readline()
        finally:
            att.send_signal(signal.SIGINT)
            _, err = att.communicate(timeout=30)
    finally:
        proc.terminate()
        proc.wait(30)
    assert said == "pardash: watching run named-run\n", said
    assert f"(`pardash attach {info['ingest']}` watches it again)" in err, err  # (another machine's hub: its address)


def _never_starting(tmp_path, *args: str) -> subprocess.Popen:
    """A process whose command line reads `pardash ARGS` and which starts nothing: what record
    takes for a run on its way, or not."""
    fake = tmp_path / "pardash"
    fake.write_text("import time\ntime.sleep(600)\n")
    return subprocess.Popen([sys.executable, str(fake), *args], env=pardash_env())


def test_record_stopped_while_it_waits_for_a_run_says_so_not_no_such_run(tmp_path):
    # Ctrl-C on "waiting for run myrun to appear..." said "error: no live run 'myrun'", exit 2.
    starting = _never_starting(tmp_path, "hub", "--run-id", "myrun")
    code = "import sys\nfrom pardash import cli, record\nrecord.FIND_S = 3600.0\nsys.exit(cli.main(sys.argv[1:]))\n"
    rec = subprocess.Popen([sys.executable, "-c", code, "record", "myrun"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=pardash_env(), cwd=tmp_path)  # fmt: skip
    try:
        first = rec.stderr.readline()
        assert first.startswith("pardash record: waiting for run myrun to appear"), first
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
    finally:
        starting.kill()
        starting.wait()
    assert rec.returncode == 130, err
    assert err.strip() == "pardash record: stopped before the run appeared; nothing was copied", err


def test_a_launch_of_a_node_after_the_first_is_no_run_record_waits_for(tmp_path):
    # Node 1's launch starts no hub (node 0's records the run): record waited its 10 s for it.
    node1 = _never_starting(tmp_path, "launch", "--nnodes", "2", "--node-rank", "1", "--", "train.py")
    try:
        proc = _pardash("record", "myrun", patch=LONG_FIND, cwd=tmp_path)
    finally:
        node1.kill()
        node1.wait()
    assert (proc.returncode, _one_line(proc)) == (2, "pardash: error: no live run 'myrun'; `pardash ps` lists the live ones, or name its hub as tcp://HOST:PORT, the ingest address it printed")
