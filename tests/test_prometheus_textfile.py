"""``--prometheus-textfile PATH``: the hub's metrics in a .prom file for node_exporter's textfile
collector, kept after the hub (and its /metrics) stopped with the job. Real hubs and a real
launch write it; prometheus-client's own parser reads it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import identity, pardash_env, wait_for
from pardash.telemetry.reporter import Reporter
from test_autorun_logged import LOGGED_RUN_GROUP, shared_logged_run
from test_prometheus import check_conventions, families, scrape, value


def _read(path) -> dict:
    """The file's families (an empty dict while it is not there yet)."""
    try:
        return families(path.read_text())
    except FileNotFoundError:
        return {}


def _hub(tmp_path, *flags: str) -> tuple[subprocess.Popen, dict]:
    """A real `pardash hub` alone (its stderr in tmp_path/hub.err) and its ready line."""
    err = open(tmp_path / "hub.err", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash", "hub", "--no-registry", "--run-id", "textfile-run", "--log", str(tmp_path / "t.jsonl"), *flags],
        stdout=subprocess.PIPE, stderr=err, text=True, env=pardash_env(),
    )  # fmt: skip
    err.close()
    return proc, json.loads(proc.stdout.readline())


def _stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_a_hub_alone_writes_what_it_serves_and_keeps_its_end(tmp_path):
    prom = tmp_path / "pardash.prom"
    proc, info = _hub(tmp_path, "--prometheus", "0", "--prometheus-per-rank", "--prometheus-textfile", str(prom))
    reps = [Reporter(info["ingest"], run="textfile-run", identity=identity(r, 2), heartbeat_s=0) for r in range(2)]
    try:
        for r in reps:
            r.hello(strategy="ddp", world_size=2)
            for step in range(1, 4):
                r.step(step=step, loss=1.0, step_s=0.1, samples=8)
            r.flush()
        # written every few seconds while the hub runs: the file catches up with the ranks
        wait_for(lambda: value(_read(prom), "pardash_rank_step", rank="1") == 3, timeout_s=60, poll_s=0.2)
        served = {name for name in families(scrape(info["metrics"])) if name.startswith("pardash_")}
        text = prom.read_text()
        written = {f.name for f in text_string_to_metric_families(text)}
        assert written == served  # the same families, per-rank ones included
        assert not any(name.startswith("process_") for name in written)  # node_exporter serves its own
        check_conventions(text)
        reps[0].event("exit", code=0)
        reps[1].event("exit", code=1)
        for r in reps:
            r.flush()
        # (taken by the hub before its stop: a flush hands them to the kernel, not to it, and on
        # a loaded machine they came after the stop's bounded last drain)
        wait_for(lambda: value(families(scrape(info["metrics"])), "pardash_ranks", state="exited") == 1, timeout_s=60, poll_s=0.2)
        assert _stop(proc) == 0
    finally:
        for r in reps:
            r.close()
        if proc.poll() is None:
            _stop(proc)
    # Written once more as the hub stopped: its end, there for good.
    fams = _read(prom)
    assert value(fams, "pardash_ranks", state="finished") == 1 and value(fams, "pardash_ranks", state="exited") == 1
    assert value(fams, "pardash_ranks", state="running") == 0
    assert value(fams, "pardash_messages_received_total") >= 10  # 2 x (hello, 3 steps, exit)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("pardash.prom")] == ["pardash.prom"]  # no temp file left


@pytest.fixture
def logged_run(tmp_path_factory):
    return shared_logged_run(tmp_path_factory)


@pytest.mark.slow
@LOGGED_RUN_GROUP
def test_the_file_says_the_ranks_finished_after_a_launch_ended(logged_run):
    # The reviewer's case: /metrics went with the job's hub 0.3 s after its end, so a scrape
    # every 15-60 s last saw "running". The file keeps the end; here without --prometheus.
    # (The launch, of a script's 4 steps on 1 rank, is test_autorun_logged.py's, shared: a job
    # as short as the bundled trainer's 5 steps. Without the hub's last write its file said
    # running in 3 runs of 3; the launch of test_export.py's 40 steps said finished in 2 of 3,
    # a periodic write landing after the rank's end.)
    assert logged_run.proc.returncode == 0, logged_run.proc.stdout + logged_run.proc.stderr
    prom = logged_run.textfile
    fams = _read(prom)
    assert value(fams, "pardash_ranks", state="finished") == 1
    assert value(fams, "pardash_ranks", state="running") == 0 and value(fams, "pardash_ranks", state="exited") == 0
    assert value(fams, "pardash_step") == 4 and value(fams, "pardash_rank_step", rank="0") == 4
    assert value(fams, "pardash_rank_state", rank="0", state="finished") == 1


@pytest.mark.parametrize("command", [["launch", "--headless", "--strategy", "single"], ["hub", "--no-registry"], ["simulate", "--headless", "--ranks", "2"]])
@pytest.mark.parametrize(
    ("where", "why"),
    [("x.txt", "does not end in .prom"), ("missing/x.prom", "does not exist"), ("afile/x.prom", "is not a folder"),
     ("unwritable/x.prom", "cannot write in"), ("afolder.prom", "is a folder")],
)  # fmt: skip
def test_a_textfile_that_cannot_be_written_is_refused_before_anything_starts(tmp_path, command, where, why):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "afile").write_text("")
    (tmp_path / "afolder.prom").mkdir()
    if where.startswith("unwritable"):
        if os.geteuid() == 0:  # root writes in any folder of its own: /proc takes no file, even root's
            where = "/proc/x.prom"
        else:
            (tmp_path / "unwritable").mkdir(mode=0o500)
    path = where if where.startswith("/") else str(tmp_path / where)
    p = subprocess.run(
        [sys.executable, "-m", "pardash", *command, "--prometheus-textfile", path],
        capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=work,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert why in line and (f"--prometheus-textfile {path}" in line or f"--prometheus-textfile: {path!r}" in line), line
    assert list(work.iterdir()) == []  # nothing started, nothing written
    assert not os.path.isfile(path)


def test_a_write_that_fails_is_said_once_and_the_hub_goes_on(tmp_path):
    prom = tmp_path / "pardash.prom"
    proc, info = _hub(tmp_path, "--prometheus-textfile", str(prom))
    rep = Reporter(info["ingest"], run="textfile-run", identity=identity(0, 1), heartbeat_s=0)
    log = tmp_path / "t.jsonl"
    try:
        wait_for(prom.exists, timeout_s=60)
        # The path taken by a folder (a trick that stops root too): every write from now on fails.
        prom.unlink()
        prom.mkdir()
        (prom / "keep").write_text("")
        err = tmp_path / "hub.err"
        wait_for(lambda: "cannot write --prometheus-textfile" in err.read_text(), timeout_s=60, poll_s=0.2)
        # ... and the hub goes on: a rank's records still reach it and its log
        rep.hello(strategy="single", world_size=1)
        rep.step(step=1, loss=1.0, step_s=0.1, samples=8)
        rep.flush()
        wait_for(lambda: '"kind":"step"' in log.read_text().replace(" ", ""), timeout_s=60, poll_s=0.2)
        assert proc.poll() is None
        assert _stop(proc) == 0  # its last write fails too: no crash, no second word
    finally:
        rep.close()
        if proc.poll() is None:
            _stop(proc)
    said = [line for line in (tmp_path / "hub.err").read_text().splitlines() if "--prometheus-textfile" in line]
    assert len(said) == 1 and str(prom) in said[0] and "goes on" in said[0], said
    events = [json.loads(line) for line in log.read_text().splitlines()]
    warned = [e for e in events if e.get("name") == "warning" and "--prometheus-textfile" in e.get("message", "")]
    assert len(warned) == 1, warned
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("pardash.prom.")] == []  # no temp file left


def test_two_jobs_textfiles_on_one_node_hold_no_same_series(tmp_path):
    # node_exporter serves every .prom file of its folder as one target: two jobs' files (each
    # its own, as it wants) held pardash_world_size, pardash_ranks{state="running"}, ... alike,
    # and it refused them ("was collected before with the same name and label values").
    from pardash.telemetry import schema
    from pardash.telemetry.hubcore import HubCore
    from pardash.telemetry.prometheus import TextfileWriter, serve_metrics

    series: dict[str, set] = {}
    for run in ("job-a", "job-b"):
        core = HubCore(run_id=run, world_size=1)
        core.ingest(schema.Hello(rank=0, world_size=1, t=1.0, seq=0, strategy="ddp"), 0.0)
        core.ingest(schema.Step(rank=0, step=1, loss=1.0, samples=8, step_s=0.1, t=2.0, seq=1), 0.0)
        prom = tmp_path / f"{run}.prom"
        assert TextfileWriter(core, str(prom), per_rank=True).write()
        text = prom.read_text()
        check_conventions(text)
        samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
        assert samples and all(s.labels.get("run") == run for s in samples)  # every series says its run
        assert value(families(text), "pardash_rank_step", run=run, rank="0") == 1
        series[run] = {(s.name, frozenset(s.labels.items())) for s in samples}
    assert not series["job-a"] & series["job-b"]
    # /metrics is a target of its own (Prometheus' instance label): its series are as they were.
    server = serve_metrics(core, 0, per_rank=True)
    try:
        served = text_string_to_metric_families(scrape(server.url))
        assert not any("run" in s.labels for f in served for s in f.samples)
    finally:
        server.close()


@pytest.mark.parametrize("told, said", [("fsdp", "fsdp"), ("script", "")])
def test_a_launched_hub_says_the_launchers_strategy_before_any_hello(tmp_path, told, said):
    # The hub a launch starts is told the job's strategy and world size (--meta): /metrics and
    # the textfile said strategy="" until a rank's hello. A script's "strategy" is no strategy:
    # its hellos say what it runs.
    prom = tmp_path / "pardash.prom"
    meta = json.dumps({"strategy": told, "world_size": 2})
    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash.telemetry.hub", "--no-registry", "--run-id", "told-run", "--log", str(tmp_path / "t.jsonl"),
         "--meta", meta, "--prometheus", "0", "--prometheus-textfile", str(prom)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=pardash_env(),
    )  # fmt: skip
    try:
        info = json.loads(proc.stdout.readline())
        fams = families(scrape(info["metrics"]))
        assert fams["pardash_run_info"].samples[0].labels["strategy"] == said
        assert value(fams, "pardash_world_size") == 2 and value(fams, "pardash_ranks", state="starting") == 2
    finally:
        assert _stop(proc) == 0
    fams = _read(prom)
    assert fams["pardash_run_info"].samples[0].labels["strategy"] == said


@pytest.mark.parametrize("command", [["hub", "--run-id", "second-job", "--log", "second.jsonl"], ["launch", "--headless", "--strategy", "single"]])
def test_a_textfile_another_running_job_writes_is_refused(tmp_path, monkeypatch, command):
    # Two jobs given one --prometheus-textfile overwrote each other's file every 15 s without a
    # word: the file said one job or the other by turns, and the alert on either's end was lost.
    prom = tmp_path / "pardash.prom"
    registry = tmp_path / "registry"
    env = pardash_env(PARDASH_REGISTRY_DIR=str(registry))
    err = open(tmp_path / "hub.err", "w")
    first = subprocess.Popen(
        [sys.executable, "-m", "pardash", "hub", "--run-id", "first-job", "--log", str(tmp_path / "t.jsonl"), "--prometheus-textfile", str(prom)],
        stdout=subprocess.PIPE, stderr=err, text=True, env=env,
    )  # fmt: skip
    err.close()
    try:
        json.loads(first.stdout.readline())
        wait_for(lambda: 'run="first-job"' in (prom.read_text() if prom.exists() else ""), timeout_s=60)
        work = tmp_path / "work"
        work.mkdir()
        p = subprocess.run([sys.executable, "-m", "pardash", *command, "--prometheus-textfile", str(prom)],
                           capture_output=True, text=True, timeout=120, env=env, cwd=work)  # fmt: skip
        assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
        (line,) = p.stderr.strip().splitlines()
        assert f"--prometheus-textfile {prom}: run first-job (still running) writes that file" in line, line
        assert f"--prometheus-textfile {tmp_path / 'pardash-2.prom'}" in line, line
        assert list(work.iterdir()) == []  # nothing started, nothing written
        assert 'run="first-job"' in prom.read_text()
    finally:
        assert _stop(first) == 0
    # Its job over, the file is anyone's: the next job's hub may write it.
    from pardash.telemetry.prometheus import textfile_refusal

    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(registry))
    assert textfile_refusal(str(prom)) is None


def test_the_hubs_restarts_are_counted(tmp_path):
    # A hub that died and was started again on its log showed only as hub_id changing; an
    # on-call engineer had no series that said it (the ranks' messages meanwhile are lost).
    prom = tmp_path / "pardash.prom"
    for restarts in range(3):
        resume = ["--resume"] if restarts else []
        proc, _info = _hub(tmp_path, "--prometheus-textfile", str(prom), *resume)
        try:
            wait_for(lambda: "pardash_hub_restarts_total" in (prom.read_text() if prom.exists() else ""), timeout_s=60)
        finally:
            assert _stop(proc) == 0, (tmp_path / "hub.err").read_text()
        assert value(families(prom.read_text()), "pardash_hub_restarts_total", run="textfile-run") == restarts


def test_a_textfile_path_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    # Review 332: the check for another job's file opened the path to read it; a FIFO there
    # waited for a writer, and the hub hung before its first line, saying nothing.
    fifo = tmp_path / "pardash.prom"
    os.mkfifo(fifo)
    p = subprocess.run([sys.executable, "-m", "pardash", "hub", "--run-id", "fifo-run", "--log", str(tmp_path / "t.jsonl"),
                        "--prometheus-textfile", str(fifo)],
                       capture_output=True, text=True, timeout=60, env=pardash_env(PARDASH_REGISTRY_DIR=str(tmp_path / "registry")))  # fmt: skip
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert p.stderr.strip().endswith(f"--prometheus-textfile {fifo} is not a regular file (a FIFO, a device or a socket); give a .prom "
                                     "file node_exporter reads"), p.stderr
