"""The run registry lists a run while its hub runs: not after the hub ended unreaped (a zombie),
not when its pid is another program's now, and never from another user's entry."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from helpers import hub_alone, live_ranks, wait_for

from pardash import cli
from pardash.telemetry import registry

pytestmark = pytest.mark.timeout(120)

ENDS = {"ingest": "tcp://127.0.0.1:1", "updates": "tcp://127.0.0.1:2", "snapshot": "tcp://127.0.0.1:3"}


def _listed(capsys) -> list[str]:
    """The run ids `pardash ps` lists."""
    assert cli.main(["ps", "--json"]) == 0
    return [e["run_id"] for e in json.loads(capsys.readouterr().out)]


def test_a_hub_that_ended_unreaped_is_not_live(tmp_path, capsys):
    # A simulate's hub killed with -9 stayed <defunct> (simulate never reaps it): signalling
    # a zombie succeeds, so `ps` said "running" and attach then found no hub.
    proc, info = hub_alone(tmp_path / "run.jsonl", "zombie-run")
    try:
        assert _listed(capsys) == ["zombie-run"]
        proc.kill()
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # ended, and left unreaped: a zombie
        assert not registry.pid_alive(proc.pid)
        assert _listed(capsys) == [] and registry.find("zombie-run") is None
        assert registry.entry("zombie-run") is None  # stale: tidied away, as a dead hub's entry is
    finally:
        proc.kill()
        proc.wait(30)


def test_an_entry_whose_pid_another_program_holds_is_not_live(tmp_path, capsys):
    # An entry's pid given since to another program (planted here: a `sleep`) listed as running.
    proc, info = hub_alone(tmp_path / "run.jsonl", "real-run")
    sleeper = subprocess.Popen(["sleep", "300"])
    d = registry.registry_dir()
    try:
        (d / "planted.json").write_text(json.dumps({"run_id": "planted", "pid": sleeper.pid, "started": time.time(), **ENDS}))
        hub_entry = registry.entry("real-run")
        # a hub that started an hour ago, its pid another program's now
        reused = {**hub_entry, "run_id": "reused", "pid": sleeper.pid, "pid_created": time.time() - 3600}
        (d / "reused.json").write_text(json.dumps(reused))
        assert _listed(capsys) == ["real-run"]
        assert not (d / "planted.json").exists() and not (d / "reused.json").exists()  # stale: tidied away
        # An entry that does not say when its hub started (written by hand, or by an older
        # pardash) is taken by its command line: a hub of that run, and only of that run.
        unstamped = {k: v for k, v in hub_entry.items() if k != "pid_created"}
        assert registry.hub_alive(unstamped)
        assert not registry.hub_alive({**unstamped, "run_id": "another-run"})
        assert not registry.hub_alive({**unstamped, "pid": sleeper.pid})
    finally:
        sleeper.kill()
        sleeper.wait(30)
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_entry_is_passed_over_and_left_alone(tmp_path, capsys):
    # In a registry folder others may write (mode 1777), another user's entry was listed as it
    # was, and attach went where it pointed.
    d = registry.registry_dir()
    os.chmod(d, 0o1777)
    registry.register({"run_id": "mine", "pid": os.getpid(), **ENDS})
    theirs = registry.register({"run_id": "theirs", "pid": os.getpid(), **ENDS})
    os.chown(theirs, 65534, 65534)
    assert _listed(capsys) == ["mine"]
    assert registry.find("theirs") is None and registry.entry("theirs") is None
    assert theirs.exists()  # passed over, not removed: it is not ours to remove
    # a link planted under an entry's name is passed over too, whoever owns what it points at
    (d / "linked.json").symlink_to(d / "mine.json")
    assert _listed(capsys) == ["mine"]


def test_a_hub_whose_start_time_reads_otherwise_after_a_clock_step_is_still_live():
    # Its start time is worked out from the wall clock at boot: stepped since (NTP, a VM's
    # resync), it read as another process, and the live hub's entry was pruned as dead.
    import sys

    hub_like = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m", "pardash.telemetry.hub",
                                 "--run-id", "20261205-000000-beef"])  # fmt: skip
    try:
        entry = {"run_id": "20261205-000000-beef", "pid": hub_like.pid, "pid_created": registry._created(hub_like.pid) - 100.0}
        # (its command line read as it starts: once in a full suite on a loaded machine, not yet)
        wait_for(lambda: registry.hub_alive(entry), timeout_s=30)
        assert not registry.hub_alive({**entry, "run_id": "20261205-000000-dead"})  # (another run's pid: no)
    finally:
        hub_like.kill()
        hub_like.wait()


def test_ps_says_how_far_a_live_run_is_from_its_hubs_word(tmp_path, capsys):
    # `ps` listed a run's age and address, not how far it had got nor how fast it went.
    proc, info = hub_alone(tmp_path / "run.jsonl", "far-run")
    try:
        live_ranks(info, "far-run", tmp_path / "run.jsonl", steps=7)
        # (the hub says it every registry.PROGRESS_EVERY_S)
        # (both ranks: a write between the two ranks' first words held one, at its step 7)
        def said() -> dict:
            return (registry.entry("far-run") or {}).get("progress") or {}

        wait_for(lambda: said().get("step") == 7 and sum((said().get("ranks") or {}).values()) == 2, timeout_s=60)
        assert cli.main(["ps"]) == 0
        head, *rows = capsys.readouterr().out.splitlines()
        assert head.split()[4:6] == ["STEP", "SAMPLES/S"]
        row = next(r for r in rows if r.startswith("far-run "))
        # (its ranks send no heartbeat: 3 s after their last step the hub holds them silent, one
        # and then the other)
        job = row[head.index("JOB"):head.index("INGEST")].strip()
        assert row.split()[4] == "7" and job in ("running", "1 silent", "2 silent"), row
        ranks = registry.entry("far-run")["progress"]["ranks"]
        assert set(ranks) <= {"running", "silent"} and sum(ranks.values()) == 2, ranks
    finally:
        proc.kill()
        proc.wait()


def test_ps_says_a_runs_step_of_its_steps_its_rate_and_ranks_stuck_or_ended(capsys):
    # A hung run read "running" in `ps`, as one that trains on, and so did a hub alone's whose
    # ranks had all ended.
    now = time.time()
    progress = {"step": 59, "steps": 300, "samples_per_s": 1093.2, "ranks": {"stalled": 2, "exited": 1}, "t": now}
    registry.register({"run_id": "hung-run", "pid": os.getpid(), **ENDS, "curve": False, "progress": progress})
    registry.register({"run_id": "new-run", "pid": os.getpid(), **ENDS, "curve": False})
    # A hub alone, no launcher to write a result.json: its ranks' ends are all it knows.
    done = {**progress, "ranks": {"finished": 2}}
    registry.register({"run_id": "done-run", "pid": os.getpid(), **ENDS, "curve": False, "progress": done})
    failed = {**progress, "ranks": {"finished": 1, "exited": 1}}
    registry.register({"run_id": "failed-run", "pid": os.getpid(), **ENDS, "curve": False, "progress": failed})
    # ...and one whose ranks a scheduler stopped (exit -15): "failed" it read
    stopped = {**progress, "ranks": {"exited": 2}, "stopped": 2}
    registry.register({"run_id": "stop-run", "pid": os.getpid(), **ENDS, "curve": False, "progress": stopped})
    assert cli.main(["ps"]) == 0
    head, *rows = capsys.readouterr().out.splitlines()
    row = {r.split()[0]: r for r in rows}
    step_end, job_at = head.index("STEP") + len("STEP"), head.index("JOB")
    assert row["hung-run"][:step_end].split()[-1] == "59/300" and row["hung-run"].split()[5] == "1,093", rows
    assert row["hung-run"][job_at:].startswith("2 stalled "), rows
    assert row["new-run"].split()[4:6] == ["-", "-"] and row["new-run"][job_at:].startswith("running "), rows
    assert row["done-run"][job_at:].startswith("finished ") and row["failed-run"][job_at:].startswith("failed "), rows
    assert row["stop-run"][job_at:].startswith("stopped "), rows
    ingest_at = head.index("INGEST")
    for r in rows:  # (the job's words fit its column: the addresses line up)
        assert r[ingest_at - 1] == " " and r[ingest_at:].startswith("tcp://"), (head, r)


def test_ps_says_stuck_ranks_in_its_column_and_leaves_a_launchs_end_to_its_result(capsys, monkeypatch):
    # "1 silent, 3 stalled" ran past the JOB column; a launch's ranks all "exited" for the moment
    # torchrun restarts them read "failed"; a simulate's log read "/dev/null"; a hub quiet for
    # minutes read as if its figures were now's.
    monkeypatch.delenv("COLUMNS", raising=False)  # (no terminal: every column, LOG too, whole)
    now = time.time()
    both = {"step": 9, "ranks": {"stalled": 3, "silent": 1}, "t": now}
    registry.register({"run_id": "both-run", "pid": os.getpid(), **ENDS, "curve": False, "progress": both})
    restarting = {"step": 9, "ranks": {"exited": 2}, "t": now}
    registry.register({"run_id": "restart-run", "pid": os.getpid(), **ENDS, "curve": False, "progress": restarting,
                       "supervisor_pid": os.getpid()})  # fmt: skip
    registry.register({"run_id": "sim-run", "pid": os.getpid(), **ENDS, "curve": False, "log": os.devnull})
    # A hub that lives and has said nothing for a while (stopped, swapping): its figures are old.
    old = {"step": 40, "steps": 300, "samples_per_s": 900.0, "ranks": {"running": 2}, "t": now - 125}
    registry.register({"run_id": "quiet-run", "pid": os.getpid(), **ENDS, "curve": False, "progress": old})
    assert cli.main(["ps"]) == 0
    head, *rows = capsys.readouterr().out.splitlines()
    row = {r.split()[0]: r for r in rows}
    job_at, ingest_at = head.index("JOB"), head.index("INGEST")
    assert row["both-run"][job_at:ingest_at].rstrip() == "4 stuck", rows
    assert row["restart-run"][job_at:ingest_at].rstrip() == "running", rows
    log_at, command_at = head.index("LOG"), head.index("COMMAND")
    assert row["sim-run"][log_at:command_at].rstrip() == "- (none kept)" and os.devnull not in row["sim-run"], rows
    assert row["quiet-run"][job_at:ingest_at].rstrip() == "quiet 2m05s", rows


def test_a_hubs_progress_counts_its_stopped_ranks():
    # What `ps` tells a stopped job from a failed one by, where no launcher writes a result.
    from pardash.telemetry import schema
    from pardash.telemetry.hub import _progress
    from pardash.telemetry.state import RunState

    st = RunState(run_id="r")
    for rank, code in ((0, -15), (1, -15), (2, 1)):
        st.apply(schema.Hello(rank=rank, world_size=3, strategy="ddp", run="r", seq=0, t=1.0), 1.0)
        st.apply(schema.Event(rank=rank, name="exit", code=code, run="r", seq=1, t=2.0), 2.0)
    progress = _progress(st)
    assert progress["ranks"] == {"exited": 3} and progress["stopped"] == 2


def test_the_registry_folder_follows_the_xdg_variables(monkeypatch, tmp_path):
    # $XDG_CACHE_HOME was not read: a user whose cache lives off a small or read-only HOME (as
    # every other tool on the machine takes it) had pardash's registry under ~/.cache still.
    for var in ("PARDASH_REGISTRY_DIR", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert registry.registry_dir() == tmp_path / "home" / ".cache" / "pardash" / "runs"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # (not absolute: ignored, as the spec asks)
    assert registry.registry_dir() == tmp_path / "home" / ".cache" / "pardash" / "runs"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert registry.registry_dir() == tmp_path / "cache" / "pardash" / "runs"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    assert registry.registry_dir() == tmp_path / "run" / "pardash"
    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(tmp_path / "mine"))
    assert registry.registry_dir() == tmp_path / "mine"
