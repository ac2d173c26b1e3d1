"""Small user-facing errors and notes of the ``pardash`` command: each says what is wrong in one
line (exit code 2 for bad input), as the others in tests/test_launch.py do."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import pardash_env, wait_for


def _pardash(*args: str, cwd, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pardash", *args], capture_output=True, text=True, timeout=timeout,
                          env=pardash_env(), cwd=cwd, stdin=subprocess.DEVNULL)  # fmt: skip


def _one_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


# -- launch -- FOLDER ---------------------------------------------------------------------------


def test_a_folder_after_the_double_dash_is_said_a_folder_and_one_python_runs_is_taken(tmp_path):
    # "adir: no such script" of a folder that is there.
    (tmp_path / "adir").mkdir()
    proc = _pardash("launch", "--headless", "--runs-dir", "runs", "--", "adir", cwd=tmp_path)
    assert proc.returncode == 2
    assert _one_line(proc) == ("pardash: error: adir is a folder with no __main__.py, which python needs to run a folder; "
                               "name the script in it: -- adir/SCRIPT.py")  # fmt: skip
    assert not (tmp_path / "runs").exists()
    # A folder with a __main__.py is a script to python (`python DIR`), and to the ranks' autorun.
    from pardash.launch import prepare_launch
    from pardash.parser import build_parser

    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text("print('hello')\n")
    ns = build_parser().parse_args(["launch", "--headless", "--runs-dir", str(tmp_path / "runs")])
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        spec = prepare_launch(ns, ["app"])
    finally:
        os.chdir(here)
    assert spec.command[-1] == "app"


# -- a log's path that is a folder ------------------------------------------------------------


def test_a_log_path_that_is_a_folder_is_said_a_folder_with_the_file_meant(tmp_path):
    # "cannot write adir: Is a directory; choose a writable --log" (hub), "cannot write adir: Is
    # a directory" (record, once a live run's hub had answered), as launch's --log says it.
    (tmp_path / "adir").mkdir()
    for args, said in (
        (("hub", "--log", "adir"), "pardash hub: --log adir is a folder; give a file: --log adir/telemetry.jsonl"),
        (("record", "nosuchrun", "-o", "adir"), "pardash: error: -o adir is a folder; give a file: -o adir/telemetry.jsonl"),
        (("simulate", "--headless", "--steps", "1", "--log", "adir"),
         "pardash: error: --log adir is a folder; give a file: --log adir/telemetry.jsonl"),
    ):  # fmt: skip
        proc = _pardash(*args, cwd=tmp_path)
        assert proc.returncode == 2 and _one_line(proc) == said, (args, proc.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"] and not any((tmp_path / "adir").iterdir())


# -- flags that contradict each other -----------------------------------------------------------


def test_flags_that_contradict_each_other_are_refused_in_one_line(tmp_path):
    # Both taken without a word: --log won over --keep-log (its folder under --runs-dir never
    # made), and --insecure did nothing beside keys.
    from pardash.telemetry import security

    security.make_keys(str(tmp_path / "keys"))
    for args, said in (
        (("simulate", "--ranks", "8", "--log", "sim.jsonl", "--keep-log", "--headless", "--steps", "5"),
         "--log sim.jsonl and --keep-log: --log records the log at that path, --keep-log under --runs-dir "
         "(runs/<run id>/telemetry.jsonl); give one of the two"),
        (("launch", "--headless", "--steps", "5", "--curve-dir", "keys", "--insecure"),
         "--curve-dir keys with --insecure: with keys the hub admits only the ranks and viewers holding them, "
         "so --insecure (a hub beyond loopback without keys, open to anyone) would do nothing; drop one of the two"),
        (("hub", "--curve-dir", "keys", "--insecure", "--no-registry"), "--curve-dir keys with --insecure: "),
    ):  # fmt: skip
        proc = _pardash(*args, cwd=tmp_path)
        assert proc.returncode == 2 and _one_line(proc).startswith(f"pardash: error: {said}"), (args, proc.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys"]


@pytest.mark.parametrize("verb", ["hub", "launch"])
def test_insecure_beside_keys_from_the_environment_is_refused_too(tmp_path, monkeypatch, verb):
    # With PARDASH_CURVE_DIR exported, as `pardash keys` says to, `hub --bind 0.0.0.0
    # --insecure` came up keyed without a word, where --curve-dir DIR is refused.
    from pardash.parser import build_parser
    from pardash.preflight import check_insecure_with_keys

    monkeypatch.setenv("PARDASH_CURVE_DIR", str(tmp_path / "keys"))
    ns = build_parser().parse_args([verb, "--insecure"])
    with pytest.raises(SystemExit) as exc:
        check_insecure_with_keys(ns)
    assert exc.value.code == 2
    monkeypatch.delenv("PARDASH_CURVE_DIR")
    check_insecure_with_keys(ns)  # (no keys anywhere: --insecure stands)


def test_insecure_beside_keys_from_the_environment_is_one_line(tmp_path):
    from pardash.telemetry import security

    security.make_keys(str(tmp_path / "keys"))
    proc = subprocess.run([sys.executable, "-m", "pardash", "hub", "--bind", "0.0.0.0", "--insecure", "--no-registry"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, stdin=subprocess.DEVNULL,
                          env=pardash_env(PARDASH_CURVE_DIR=str(tmp_path / "keys")))  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert _one_line(proc) == (f"pardash: error: PARDASH_CURVE_DIR={tmp_path / 'keys'} (in the environment) with --insecure: with "
                               "keys the hub admits only the ranks and viewers holding them, so --insecure (a hub beyond loopback "
                               "without keys, open to anyone) would do nothing; unset PARDASH_CURVE_DIR or drop --insecure")


def test_insecure_beside_keys_is_taken_where_it_opens_metrics_beyond_loopback():
    # /metrics is plain HTTP, which takes no keys: --insecure is what lets it bind beyond
    # loopback, keys or not.
    from pardash.parser import build_parser
    from pardash.preflight import check_insecure_with_keys

    ns = build_parser().parse_args(["launch", "--curve-dir", "keys", "--insecure", "--prometheus", "0", "--prometheus-addr", "0.0.0.0"])
    check_insecure_with_keys(ns)  # (no SystemExit)


# -- a bare `pardash` ---------------------------------------------------------------------------


def test_pardash_alone_prints_its_help_and_exits_2(tmp_path):
    # It said only "the following arguments are required: COMMAND (see pardash --help)".
    proc = _pardash(cwd=tmp_path)
    helped = _pardash("--help", cwd=tmp_path)
    assert helped.returncode == 0 and "launch" in helped.stdout
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr == helped.stdout


# -- a hub with keys says how to reach it with them ---------------------------------------------


def _hub_hint(tmp_path, *args: str) -> str:
    """The line a hub started with ``args`` says how to watch it in."""
    import select

    proc = subprocess.Popen([sys.executable, "-m", "pardash", "hub", "--no-registry", "--log", str(tmp_path / "t.jsonl"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env(PARDASH_CURVE_DIR=None), cwd=tmp_path)  # fmt: skip
    try:
        said: list[str] = []
        while not any("watch with" in line for line in said):
            ready, _, _ = select.select([proc.stderr], [], [], 60)
            line = proc.stderr.readline() if ready else ""
            assert line, f"the hub said no more: {''.join(said)}"
            said.append(line)
        return said[-1].strip()
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_hub_with_keys_says_to_attach_and_report_to_it_with_them(tmp_path):
    # "watch with `pardash attach tcp://...`", which, run as printed, found no answer: a hub
    # with keys answers only their holders.
    from pardash.telemetry import security

    security.make_keys(str(tmp_path / "my keys"))
    line = _hub_hint(tmp_path, "--curve-dir", "my keys")
    keys = f"'{tmp_path / 'my keys'}'"
    assert f" PARDASH_CURVE_DIR={keys} (torchrun" in line and line.endswith(f" --curve-dir {keys}`"), line
    (tmp_path / "t.jsonl").unlink()
    plain = _hub_hint(tmp_path)  # no keys: nothing more to say
    assert "CURVE" not in plain and "--curve-dir" not in plain and "train.py); watch with `pardash attach tcp://" in plain, plain


# -- replay --start past the run's end ----------------------------------------------------------


def test_a_replay_asked_to_start_past_the_runs_end_says_how_long_the_run_is(tmp_path, monkeypatch, capsys):
    # `--start 99:00:00` of a run of seconds opened at its end without a word.
    from pathlib import Path

    from pardash import cli
    from pardash.telemetry.client import ReplaySource
    from pardash.tui.format import fmt_clock

    log = str(Path(__file__).parent / "data" / "fsdp4_crash.jsonl")
    src = ReplaySource(log)
    long = fmt_clock(src.duration_s)
    src.close()
    started: list[float] = []
    monkeypatch.setattr(cli.sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(cli.sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(cli.sys.stderr, "isatty", lambda: True)  # (the TUI draws there)
    monkeypatch.setenv("TERM", "xterm-256color")
    notices: list[str] = []
    dirs: list[str] = []
    monkeypatch.setattr(cli, "_run_tui", lambda source, title, notice="", runs_dir="runs": (started.append(source.position_s), notices.append(notice), dirs.append(runs_dir), 0)[3])
    assert cli.main(["replay", log, "--start", "99:00:00"]) == 0
    said = capsys.readouterr().err
    assert said == f"pardash: --start 99:00:00 is past the run's end: it is only {long} long; the replay starts at its end\n"
    assert started == [src.duration_s]
    # and on the dashboard, which covers the terminal (the line above showed only after it)
    assert notices == [said[len("pardash: "):].strip()]
    for start in ("end", "0:01", "0"):  # its end asked for, or a time in the run: nothing to say
        assert cli.main(["replay", log, "--start", start]) == 0
        assert capsys.readouterr().err == "", start
        assert notices[-1] == "", start
    assert cli.main(["replay", log, "--runs-dir", str(tmp_path)]) == 0
    assert dirs[-1] == str(tmp_path)  # (where `o` looks for the run's folder)


# -- a damaged .gz log --------------------------------------------------------------------------


def test_a_damaged_or_false_gz_log_is_said_so_not_counted_as_truncated_lines(tmp_path):
    # Each read "no telemetry records in 1 line(s) (1 truncated); is it a pardash log?" or gzip's
    # own "Unknown compression method": the compressed stream's break counted as a line of the log.
    import gzip
    import random

    packed = gzip.compress(b"garbage\n" * 3)
    (tmp_path / "cut0.jsonl.gz").write_bytes(packed[:12])  # (cut inside its first line)
    (tmp_path / "cut1.jsonl.gz").write_bytes(packed[:-8])  # (every line there, its check bytes not)
    (tmp_path / "method.jsonl.gz").write_bytes(packed[:2] + b"\x63" + packed[3:])
    (tmp_path / "random.jsonl.gz").write_bytes(bytes(random.Random(1).randrange(256) for _ in range(200)).replace(b"\x1f", b"\x20"))
    for name, said in (
        ("cut0.jsonl.gz", "cut0.jsonl.gz: not a valid gzip file: its compressed data is cut short before the end of its first line"),
        ("cut1.jsonl.gz", "cut1.jsonl.gz: the compressed log is cut short after line 3, and its 3 line(s) before that hold no "
                          "telemetry record (3 malformed); is it a pardash log?"),
        ("method.jsonl.gz", "method.jsonl.gz: cannot read it: not a valid gzip file (unknown compression method)"),
        ("random.jsonl.gz", "random.jsonl.gz: not a valid gzip file (no gzip header), and read as plain text no telemetry records in "),
    ):  # fmt: skip
        for command in ("report", "replay"):
            proc = _pardash(command, name, cwd=tmp_path)
            assert proc.returncode == 2 and _one_line(proc).startswith(f"pardash: error: {said}"), (command, proc.stderr)


# -- simulate beyond loopback -------------------------------------------------------------------


@pytest.mark.parametrize("keys_set", [False, True], ids=["no keys", "PARDASH_CURVE_DIR set"])
def test_simulate_beyond_loopback_asks_for_insecure_in_one_line(tmp_path, keys_set):
    # It relayed the hub's "pass --curve-dir DIR (or set PARDASH_CURVE_DIR), or pass --insecure"
    # on two lines: simulate has no --curve-dir, and its ranks hold no keys.
    env = pardash_env(PARDASH_CURVE_DIR=str(tmp_path / "keys") if keys_set else None)
    proc = subprocess.run([sys.executable, "-m", "pardash", "simulate", "--bind", "0.0.0.0", "--headless", "--steps", "1"],
                          capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert _one_line(proc) == ("pardash: error: --bind 0.0.0.0: simulate's ranks hold no keys, so a hub beyond loopback goes "
                               "without them: pass --insecure on a network you trust (anyone who reaches it can read the run "
                               "and send it records)")  # fmt: skip
    for host, said in (("not-a-host", "not an address"), ("127.0.0.1:5000", "without its port")):
        proc = _pardash("simulate", "--bind", host, "--headless", "--steps", "1", "--insecure", cwd=tmp_path)
        assert proc.returncode == 2 and _one_line(proc).startswith(f"pardash: error: cannot bind {host!r}: ") and said in proc.stderr


# -- an empty run id ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["attach", "record"])
def test_an_empty_run_id_is_bad_input_while_runs_are_live(tmp_path, monkeypatch, capsys, command):
    # `pardash attach ''` said "no live run found" with runs live (and with one live, took that).
    from pardash import cli
    from pardash.telemetry import registry

    ends = {"pid": os.getpid(), "ingest": "tcp://127.0.0.1:1", "updates": "tcp://127.0.0.1:2", "snapshot": "tcp://127.0.0.1:3"}
    for run in ("live-run-1", "live-run-2"):
        registry.register({"run_id": run, **ends})
    monkeypatch.chdir(tmp_path)
    assert cli.main([command, "", "--headless"] if command == "attach" else [command, ""]) == 2
    assert capsys.readouterr().err == (
        "pardash: error: '' is no run id: name a run (`pardash ps` lists the live ones) or a hub as tcp://HOST:PORT, "
        "or leave it out for the newest live run\n"
    )


def test_a_headless_simulate_whose_hub_is_killed_stops_and_says_so(tmp_path):
    # It printed "hub quiet for N s" for as long as it was let run, its hub never reaped (a
    # zombie that `pardash ps` called running), the simulator sending to nothing.
    import psutil

    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash", "simulate", "--headless", "--every", "1", "--ranks", "2", "--rate", "5",
         "--steps", "100000"],
        cwd=tmp_path, env=pardash_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        first = proc.stdout.readline()
        assert "simulating 2 ranks" in first, first
        children = {p: " ".join(p.cmdline()) for p in psutil.Process(proc.pid).children()}
        hubs = [p for p, line in children.items() if "pardash.telemetry.hub" in line]
        sims = [p for p, line in children.items() if "pardash.telemetry.simulate" in line]
        assert len(hubs) == 1 and len(sims) == 1, children
        hubs[0].kill()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out
    assert "its hub ended (killed by SIGKILL) at step " in out and out.rstrip().endswith("the simulation stopped"), out
    assert not sims[0].is_running()  # the simulated ranks stopped with it


def test_attach_with_no_run_named_says_when_it_picked_the_newest_of_several(tmp_path, monkeypatch):
    # With two runs live, `pardash attach` said "watching run X" and nothing of the other. A
    # third hub up whose job had ended (its launch's TUI left open keeps its hub, and its
    # entry, up: `pardash ps` says "ended") is no live run: it said "the newest of 3 live runs".
    import json

    from pardash.telemetry import registry

    env = {**pardash_env(), "PARDASH_REGISTRY_DIR": str(tmp_path / "registry")}
    monkeypatch.setenv("PARDASH_REGISTRY_DIR", env["PARDASH_REGISTRY_DIR"])
    over = tmp_path / "over"
    over.mkdir()
    (over / "result.json").write_text(json.dumps({"code": 1, "stopped": False}))
    registry.register({"run_id": "20260101-000000-bbbb", "run_dir": str(over), "pid": os.getpid(),  # (this process: a hub up)
                       "ingest": "tcp://127.0.0.1:1", "updates": "tcp://127.0.0.1:2", "snapshot": "tcp://127.0.0.1:3"})  # fmt: skip
    sims = []
    try:
        for _ in range(2):
            sim = subprocess.Popen(
                [sys.executable, "-m", "pardash", "simulate", "--headless", "--every", "60", "--ranks", "2", "--rate", "2",
                 "--steps", "100000"],
                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            sims.append(sim)
            first = sim.stdout.readline()  # (printed once its hub is up and registered)
            assert "simulating 2 ranks" in first, first
        newest = first.split(", run ")[1].split(",")[0]
        attach = subprocess.Popen([sys.executable, "-m", "pardash", "attach", "--headless", "--every", "60"], cwd=tmp_path, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        try:
            said = attach.stdout.readline().strip()
        finally:
            attach.kill()
            attach.wait()
    finally:
        for sim in sims:
            sim.terminate()
        for sim in sims:
            sim.wait(60)
    assert said == (f"pardash: watching run {newest}, the newest of 2 live runs (`pardash ps` lists them; "
                    "`pardash attach RUN_ID` picks one)"), said  # fmt: skip


def test_a_job_stopped_from_attach_without_its_supervisor_gets_its_result_file(tmp_path):
    # Stop chosen in `pardash attach` of a job whose supervisor was killed outright stopped the
    # job, and no result.json ever said how it ended (nothing else was left to write it).
    import json

    import psutil

    from pardash import cli
    from pardash.trainer.jobprocs import SUPERVISOR_VAR

    import zmq

    from pardash.telemetry import schema

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a supervisor pid that runs no more
    run_id = "20261205-000000-cafe"
    env = {**os.environ, SUPERVISOR_VAR: str(gone.pid), "PARDASH_RUN_ID": run_id, "RANK": "0"}
    job = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)  # one of the job's processes (rank 0)
    hub = zmq.Context.instance().socket(zmq.PULL)  # (its hub's ingest, for the rank's exit note)
    port = hub.bind_to_random_port("tcp://127.0.0.1")
    try:
        # (until it runs sleep, the forked child has this test's environment, not the job's: the
        # stop found no process of the job, once in a CI run)
        from pardash.trainer.jobprocs import job_processes

        wait_for(lambda: [p.pid for p in job_processes(gone.pid, run_id)] == [job.pid])
        entry = {"run_id": run_id, "log": str(tmp_path / "telemetry.jsonl"), "run_dir": str(tmp_path / "run"),
                 "ingest": f"tcp://127.0.0.1:{port}"}  # fmt: skip
        assert cli.stop_unsupervised_job(entry, gone.pid, run_id, None) == 1
        job.wait(30)  # (stop_unsupervised waited for it: its code is psutil's, not Popen's)
        assert not psutil.pid_exists(job.pid)
        # The rank's exit, as every viewer, the log and the report read it: the viewer's stop,
        # not "stopped by you" (review 300), which they had not made.
        assert hub.poll(30_000)
        note = schema.decode(hub.recv())
        assert (note.rank, note.code, note.message) == (0, -15, f"stopped by a viewer (pardash attach, pid {os.getpid()}) (its supervisor was gone)")
    finally:
        hub.close(0)
        if job.poll() is None:
            job.kill()
            job.wait()
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert (result["run_id"], result["code"], result["stopped"], result["stopper"]) == (run_id, 130, True, "by you")
    assert "pardash attach" in result["written_by"]
