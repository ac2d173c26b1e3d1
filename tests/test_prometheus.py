"""``--prometheus PORT``: /metrics from the hub's process, scraped over HTTP while real runs
feed it, parsed with prometheus-client's own parser and, where installed, ``promtool``."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import identity, pardash_env, wait_for
from pardash.telemetry.client import HubClient
from pardash.telemetry.prometheus import MetricsError, serve_metrics
from pardash.telemetry.reporter import Reporter
from pardash.telemetry.spawn import spawn_hub

AGGREGATES = {
    "pardash_run_info", "pardash_world_size", "pardash_step", "pardash_samples_per_second", "pardash_ranks",
    "pardash_step_median_seconds", "pardash_step_max_seconds", "pardash_self_median_seconds", "pardash_self_max_seconds",
    "pardash_stragglers", "pardash_straggler_cost_seconds", "pardash_held_min_bytes", "pardash_held_max_bytes",
    "pardash_state_min_bytes", "pardash_state_max_bytes",
    "pardash_unsharded_bytes", "pardash_expected_bytes", "pardash_device_memory_min_bytes", "pardash_device_memory_max_bytes",
    "pardash_messages_received", "pardash_messages_lost", "pardash_messages_dropped", "pardash_ingest_messages_per_second",
    "pardash_hub_behind_seconds",
    "pardash_job_restarts", "pardash_hub_restarts", "pardash_loss_mean",
}  # fmt: skip


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams: dict, name: str, **labels) -> float | None:
    fam = fams.get(name.removesuffix("_total"))
    for s in fam.samples if fam else []:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def check_conventions(text: str) -> None:
    """Prometheus' naming rules, and promtool's linter where it is installed."""
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith("pardash_"):
            continue
        assert re.fullmatch(r"pardash_[a-z0-9_]+", fam.name), fam.name
        assert fam.documentation, f"{fam.name} has no HELP"
        assert not re.search(r"(milli|micro|kilo|mega|giga)", fam.name), fam.name
        for s in fam.samples:
            if fam.type == "counter":
                assert s.name.endswith("_total") or s.name.endswith("_created"), s.name
            else:
                assert not s.name.endswith("_total"), s.name
    promtool = shutil.which("promtool")
    if promtool:
        p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stdout + p.stderr


def test_a_hub_fed_by_real_reporters_serves_what_they_sent(hub):
    from pardash.telemetry.analysis import Detector, LivenessConfig

    # These ranks send no heartbeats: 3 s after a rank's last step (a loaded machine can take
    # that long to the scrape) the hub would call it silent, and "running" is checked here.
    hub.core.detector = Detector(LivenessConfig(silent_s=600.0, stall_min_s=600.0))
    server = serve_metrics(hub.core, 0, per_rank=True)
    reps = [Reporter(hub.ingest_endpoint, run="test-run", identity=identity(r, 2), heartbeat_s=0) for r in range(2)]
    try:
        for r in reps:
            r.hello(strategy="fsdp", world_size=2, params_count=1000)
        for step in range(1, 6):
            for r in reps:
                mem = {"params_bytes": 2000 + 8 * r.rank, "grads_bytes": 2000, "optim_bytes": 4000, "params_full_bytes": 4000,
                       "grads_full_bytes": 4000, "optim_full_bytes": 8000, "rss_bytes": 10_000_000 + r.rank}  # fmt: skip
                r.step(step=step, loss=1.0 / step + r.rank, step_s=0.1 + 0.01 * r.rank, self_s=0.02, data_s=0.005, samples=8, mem=mem)
        wait_for(lambda: all(x.step is not None and x.step.step == 5 for x in hub.core.state.ranks.values()) and len(hub.core.state.ranks) == 2)
        text = scrape(server.url)
        fams = families(text)
        assert AGGREGATES - {"pardash_straggler_cost_seconds"} <= set(fams)  # no straggler, no series
        assert value(fams, "pardash_world_size") == 2 and value(fams, "pardash_step") == 5
        assert value(fams, "pardash_ranks", state="running") == 2 and value(fams, "pardash_ranks", state="exited") == 0
        assert value(fams, "pardash_step_max_seconds") == pytest.approx(0.11)
        assert value(fams, "pardash_step_median_seconds") == pytest.approx(0.105)
        assert value(fams, "pardash_held_min_bytes") == 8000 and value(fams, "pardash_held_max_bytes") == 8008
        assert value(fams, "pardash_state_min_bytes") == 8000 and value(fams, "pardash_state_max_bytes") == 8008
        assert value(fams, "pardash_expected_bytes") == 1000 * 16 / 2 and value(fams, "pardash_unsharded_bytes") == 16000
        assert value(fams, "pardash_device_memory_max_bytes") == 10_000_001
        assert value(fams, "pardash_messages_received_total") >= 12 and value(fams, "pardash_messages_lost_total") == 0
        assert value(fams, "pardash_rank_step", rank="1") == 5
        assert value(fams, "pardash_rank_loss", rank="1") == pytest.approx(1.2)
        assert value(fams, "pardash_rank_phase_seconds", rank="0", phase="data") == pytest.approx(0.005)
        assert value(fams, "pardash_rank_state", rank="0", state="running") == 1
        # every state has its series (0 but the rank's), as pardash_ranks: none vanishes when left
        assert value(fams, "pardash_rank_state", rank="0", state="exited") == 0
        # the loss without per-rank series: the ranks' mean (1/5 and 1/5 + 1, 8 samples each)
        assert value(fams, "pardash_loss_mean") == pytest.approx(0.7)
        assert "process_cpu_seconds_total" in text  # the hub process's own figures
        check_conventions(text)
    finally:
        for r in reps:
            r.close()
        server.close()


def test_per_rank_series_only_when_asked(hub):
    server = serve_metrics(hub.core, 0)
    rep = Reporter(hub.ingest_endpoint, run="test-run", identity=identity(0, 1), heartbeat_s=0)
    try:
        rep.hello(strategy="ddp", world_size=1)
        rep.step(step=1, loss=1.0, step_s=0.1, samples=8)
        wait_for(lambda: 0 in hub.core.state.ranks and hub.core.state.ranks[0].step is not None)
        assert "pardash_rank_" not in scrape(server.url)
    finally:
        rep.close()
        server.close()


def test_a_ranks_held_bytes_say_they_count_ddps_buckets(hub):
    # Its help said "Model state the rank holds." of a figure with DDP's gradient buckets in it
    # (as pardash_held_max_bytes says): 8000 B of state read as 10000.
    server = serve_metrics(hub.core, 0, per_rank=True)
    rep = Reporter(hub.ingest_endpoint, run="test-run", identity=identity(0, 1), heartbeat_s=0)
    try:
        rep.hello(strategy="ddp", world_size=1)
        mem = {"params_bytes": 2000, "grads_bytes": 2000, "optim_bytes": 4000, "buckets_bytes": 2000}
        rep.step(step=1, loss=1.0, step_s=0.1, samples=8, mem=mem)
        wait_for(lambda: 0 in hub.core.state.ranks and hub.core.state.ranks[0].step is not None)
        fams = families(scrape(server.url))
        assert value(fams, "pardash_rank_held_bytes", rank="0") == 10_000
        assert fams["pardash_rank_held_bytes"].documentation == (
            "Memory the rank holds for training: its model state plus DDP's gradient buckets.")
    finally:
        rep.close()
        server.close()


def test_the_mean_loss_is_the_global_batchs_whatever_each_ranks_batch_size():
    # A DDP job whose rank 0 trains on 16 samples a step and rank 1 on 48 read 2.327389, the
    # plain mean of its ranks' losses (2.325160 and 2.329617), under a help text that said "the
    # global batch's loss": that is 2.328503, each rank's loss weighted by its samples.
    from pardash.telemetry import schema
    from pardash.telemetry.hubcore import HubCore

    core = HubCore(run_id="r")
    for r, (loss, samples) in enumerate(((2.325160, 16), (2.329617, 48))):
        core.ingest(schema.Hello(rank=r, world_size=2, t=1.0, seq=0), 0.0)
        core.ingest(schema.Step(rank=r, step=1, loss=loss, samples=samples, step_s=0.1, t=2.0, seq=1), 0.0)
    server = serve_metrics(core, 0)
    try:
        fams = families(scrape(server.url))
        assert value(fams, "pardash_loss_mean") == pytest.approx(2.328503, abs=1e-6)
        assert "weighted by its step's samples" in fams["pardash_loss_mean"].documentation
        # A rank that says no samples (a script's own step() without them): no weights to go
        # by, the plain mean, as the help says.
        core.ingest(schema.Step(rank=1, step=2, loss=2.329617, samples=0, step_s=0.1, t=3.0, seq=2), 0.0)
        fams = families(scrape(server.url))
        assert value(fams, "pardash_loss_mean") == pytest.approx(2.327389, abs=1e-6)
        assert "The plain mean over the ranks where a rank with a loss said no samples." in fams["pardash_loss_mean"].documentation
    finally:
        server.close()


def test_a_straggler_that_finished_is_no_straggler_any_more():
    # Once every rank had finished, /metrics still said a straggler cost the others 30 ms a
    # step: an alert on it kept firing on a job that was over.
    from pardash.telemetry import schema
    from pardash.telemetry.hubcore import HubCore

    core = HubCore(run_id="r")
    for r in (0, 1):
        core.ingest(schema.Hello(rank=r, world_size=2, t=1.0, seq=0), 0.0)
        core.ingest(schema.Step(rank=r, step=1, step_s=0.1, t=2.0, seq=1), 0.0)
    core.verdict(schema.Verdict(rank=1, verdict="straggler", cause="data", cost_s=0.03))
    server = serve_metrics(core, 0)
    try:
        fams = families(scrape(server.url))
        assert value(fams, "pardash_stragglers") == 1 and value(fams, "pardash_straggler_cost_seconds", rank="1") == 0.03
        # Stalled, it is that first (pardash_ranks says so): an alert on stragglers fired on a
        # job that hung.
        core.verdict(schema.Verdict(rank=1, verdict="stalled", cause="data", step=1))
        fams = families(scrape(server.url))
        assert value(fams, "pardash_ranks", state="stalled") == 1 and value(fams, "pardash_ranks", state="straggler") == 0
        assert value(fams, "pardash_stragglers") == 0 and value(fams, "pardash_straggler_cost_seconds", rank="1") is None
        core.verdict(schema.Verdict(rank=1, verdict="resumed"))
        assert value(families(scrape(server.url)), "pardash_stragglers") == 1
        for r in (0, 1):
            core.verdict(schema.Verdict(rank=r, verdict="finished"))
        fams = families(scrape(server.url))
        assert value(fams, "pardash_stragglers") == 0 and value(fams, "pardash_straggler_cost_seconds", rank="1") is None
        assert value(fams, "pardash_ranks", state="finished") == 2
        assert value(fams, "pardash_job_restarts_total") == 0
        core.ingest(schema.Hello(rank=1, world_size=2, t=3.0, seq=0, restart=1, pid=7), 0.0)  # torchrun started it again
        assert value(families(scrape(server.url)), "pardash_job_restarts_total") == 1
    finally:
        server.close()


def test_step_figures_keep_their_last_values_while_torchrun_restarts_the_job():
    # Under --max-restarts, pardash_step and every step figure (the loss, the step times,
    # memory, the per-rank series) left /metrics from the launcher's restart note until the new
    # processes' first step: an absent(pardash_step) alert fired on every restart.
    from pardash.telemetry import schema
    from pardash.telemetry.hubcore import HubCore

    core = HubCore(run_id="r", world_size=2)
    for r in (0, 1):
        core.ingest(schema.Hello(rank=r, world_size=2, t=1.0, seq=0, pid=10 + r, strategy="ddp"), 0.0)
        for step in (1, 2):
            mem = schema.Mem(params_bytes=1000, grads_bytes=1000, optim_bytes=2000, params_full_bytes=2000, rss_bytes=5000 + r)
            core.ingest(schema.Step(rank=r, step=step, loss=1.0 + r, samples=8, step_s=0.1 + 0.1 * r, self_s=0.05, t=2.0, seq=step, mem=mem), 0.0)
    server = serve_metrics(core, 0, per_rank=True)
    figures = ("pardash_step", "pardash_loss_mean", "pardash_step_max_seconds", "pardash_self_max_seconds", "pardash_held_max_bytes",
               "pardash_device_memory_max_bytes", "pardash_unsharded_bytes", "pardash_samples_per_second")  # fmt: skip
    per_rank = ("pardash_rank_step", "pardash_rank_loss", "pardash_rank_step_seconds", "pardash_rank_held_bytes")
    try:
        before = families(scrape(server.url))
        assert value(before, "pardash_step") == 2 and value(before, "pardash_loss_mean") == pytest.approx(1.5)
        # Rank 1 steps once more, no scrape seeing it, then torchrun restarts the job: the
        # launcher's note first, then each new process's hello, no step yet. The figures are
        # the ones last served; the steps, exact.
        core.ingest(schema.Step(rank=1, step=3, loss=1.5, samples=8, step_s=0.2, t=3.0, seq=3), 0.0)
        for r in (0, 1):
            core.note("torchrun restarted the workers", name="restart", rank=r, code=1)
        stages = [families(scrape(server.url))]
        for r in (0, 1):
            core.ingest(schema.Hello(rank=r, world_size=2, t=4.0, seq=0, pid=20 + r, restart=1, strategy="ddp"), 0.0)
        text = scrape(server.url)
        check_conventions(text)
        stages.append(families(text))
        assert all(r.step is None for r in core.state.ranks.values())  # (what the hub forgets)
        for fams in stages:
            assert value(fams, "pardash_ranks", state="starting") == 2
            for name in figures:
                assert value(fams, name) is not None, name
            assert value(fams, "pardash_step") == 2  # the slowest rank's last step, as before
            assert value(fams, "pardash_samples_per_second") == 0  # none is training now
            for name in figures[1:-1]:
                assert value(fams, name) == value(before, name), name
            for name in per_rank:
                assert value(fams, name, rank="0") == value(before, name, rank="0"), name
            assert value(fams, "pardash_rank_step", rank="1") == 3  # its very last step
        # The new processes' steps are their own figures again.
        for r in (0, 1):
            core.ingest(schema.Step(rank=r, step=3, loss=0.5, samples=8, step_s=0.3, t=5.0, seq=1), 0.0)
        fams = families(scrape(server.url))
        assert value(fams, "pardash_loss_mean") == 0.5 and value(fams, "pardash_step_max_seconds") == 0.3
        assert value(fams, "pardash_held_max_bytes") is None  # these steps said no memory
        assert value(fams, "pardash_ranks", state="running") == 2
    finally:
        server.close()


def test_before_any_hello_the_launchers_world_size_and_strategy_are_said():
    # Under `pardash launch`, /metrics said pardash_world_size 0, strategy="" and no rank in
    # any state until the first rank's hello, though the launcher had told its hub both.
    from pardash.telemetry import schema
    from pardash.telemetry.hubcore import HubCore

    core = HubCore(run_id="r", world_size=2)  # as the hub takes the launcher's --meta
    server = serve_metrics(core, 0, strategy="fsdp")
    try:
        fams = families(scrape(server.url))
        assert value(fams, "pardash_world_size") == 2
        assert fams["pardash_run_info"].samples[0].labels["strategy"] == "fsdp"
        assert value(fams, "pardash_ranks", state="starting") == 2
        assert sum(s.value for s in fams["pardash_ranks"].samples) == 2
        core.ingest(schema.Hello(rank=0, world_size=2, t=1.0, seq=0, strategy="fsdp"), 0.0)
        core.ingest(schema.Step(rank=0, step=1, step_s=0.1, t=2.0, seq=1), 0.0)
        fams = families(scrape(server.url))
        assert value(fams, "pardash_ranks", state="running") == 1 and value(fams, "pardash_ranks", state="starting") == 1
        assert sum(s.value for s in fams["pardash_ranks"].samples) == 2
        check_conventions(scrape(server.url))
    finally:
        server.close()
    # A hub alone, told nothing: the ranks' hellos say it, as before.
    core = HubCore(run_id="r")
    server = serve_metrics(core, 0)
    try:
        fams = families(scrape(server.url))
        assert value(fams, "pardash_world_size") == 0 and sum(s.value for s in fams["pardash_ranks"].samples) == 0
        core.ingest(schema.Hello(rank=0, world_size=2, t=1.0, seq=0, strategy="ddp"), 0.0)
        fams = families(scrape(server.url))
        assert value(fams, "pardash_world_size") == 2 and fams["pardash_run_info"].samples[0].labels["strategy"] == "ddp"
        assert value(fams, "pardash_ranks", state="starting") == 2
    finally:
        server.close()


def test_every_reason_for_refusing_a_message_has_its_series_from_the_start():
    # pardash_messages_rejected_total had no sample until the hub's first refusal, so
    # increase() over a window with the first one read nothing (review 300).
    from pardash.telemetry import schema
    from pardash.telemetry.hubcore import REJECT_REASONS, HubCore

    core = HubCore(run_id="r", world_size=2)
    server = serve_metrics(core, 0)
    try:
        fams = families(scrape(server.url))
        got = {s.labels["reason"]: s.value for s in fams["pardash_messages_rejected"].samples if s.name.endswith("_total")}
        assert got == dict.fromkeys(REJECT_REASONS, 0.0)
        core.ingest(schema.Step(rank=7, step=1, step_s=0.1, t=2.0, seq=1), 0.0)  # a rank this job has not
        fams = families(scrape(server.url))
        assert value(fams, "pardash_messages_rejected_total", reason="rank_out_of_range") == 1
        assert value(fams, "pardash_messages_rejected_total", reason="invalid") == 0
        check_conventions(scrape(server.url))
    finally:
        server.close()


def test_a_busy_port_is_one_clear_line(hub):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(MetricsError, match=f"cannot serve /metrics on 127.0.0.1:{port}.*choose another --prometheus PORT"):
            serve_metrics(hub.core, port)
        p = subprocess.run(
            [sys.executable, "-m", "pardash", "hub", "--no-registry", "--prometheus", str(port)],
            capture_output=True, text=True, timeout=60, env=pardash_env(),
        )  # fmt: skip
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "choose another --prometheus PORT" in p.stderr



# -- requests begun and never finished (slow loris) -------------------------------------------
# Each held a thread and a file descriptor of the hub's for good: about a thousand of them took
# every descriptor a hub has under `ulimit -n 1024`, and its ranks and viewers could not connect.


def _half_sent(port: int, timeout_s: float = 10) -> socket.socket:
    """A connection that begins a request and never ends it."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    return s


def _closed_by_server(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:  # closed with our request unread
        return True


def _answers(url: str) -> bool:
    try:
        return "pardash_world_size" in scrape(url)
    except OSError:
        return False


def test_a_request_never_finished_is_closed_after_the_read_timeout(hub):
    server = serve_metrics(hub.core, 0, read_timeout_s=0.3)
    held = [_half_sent(server.port) for _ in range(8)]
    try:
        assert _answers(server.url)  # a scrape beside them answers
        wait_for(lambda: all(map(_closed_by_server, held)))
        assert _answers(server.url)
    finally:
        for s in held:
            s.close()
        server.close()


def test_connections_past_the_cap_are_closed_at_once(hub):
    server = serve_metrics(hub.core, 0, max_connections=4, read_timeout_s=600)  # no timeout within the test
    held = [_half_sent(server.port) for _ in range(3)]
    flood: list[socket.socket] = []
    try:
        assert _answers(server.url)  # the fourth place
        flood = [_half_sent(server.port) for _ in range(40)]
        # All but the one that may take the place the scrape left.
        wait_for(lambda: sum(map(_closed_by_server, flood)) >= len(flood) - 1)
        assert not any(map(_closed_by_server, held))
        for s in held:
            s.close()
        wait_for(lambda: _answers(server.url))  # their places are free again
    finally:
        for s in held + flood:
            s.close()
        server.close()


def test_a_flood_of_unfinished_requests_leaves_the_hub_to_its_ranks_and_viewers(tmp_path):
    import resource

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    proc, info = spawn_hub(
        ["--no-registry", "--log", str(tmp_path / "t.jsonl"), "--prometheus", "0"], preexec_fn=few_descriptors, env=pardash_env()
    )
    port = int(info["metrics"].rsplit(":", 1)[1].split("/")[0])
    flood = []
    for _ in range(300):  # more than the hub has descriptors
        try:
            flood.append(_half_sent(port, timeout_s=5))
        except OSError:  # the hub takes no more connections: out of descriptors
            break
    rep = Reporter(info["ingest"], run=info["run_id"], identity=identity(0, 1), heartbeat_s=0)
    viewer = HubClient(info["updates"], info["snapshot"], curve=False)
    try:
        assert viewer.wait_synced(20.0)
        rep.hello(strategy="ddp", world_size=1)
        rep.step(step=1, loss=1.0, step_s=0.01)
        wait_for(lambda: 0 in viewer.state.ranks and viewer.state.ranks[0].step is not None, poll=viewer.poll)
    finally:
        rep.close()
        viewer.close()
        for s in flood:
            s.close()
        proc.terminate()
        proc.wait(30)


def _read_until(proc: subprocess.Popen, pattern: str, timeout_s: float = 120) -> re.Match:
    end = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        m = re.search(pattern, line)
        if m:
            return m
    raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(seen)}")


def _stop(proc: subprocess.Popen) -> None:
    """Ctrl-C, as a user stops it: the command stops its job, hub and simulator itself."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def test_simulate_serves_aggregates_and_names_the_straggler(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash", "simulate", "--headless", "--ranks", "8", "--steps", "200", "--rate", "20",
         "--straggler", "3", "--prometheus", "0", "--runs-dir", str(tmp_path), "--every", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    try:
        url = _read_until(proc, r"Prometheus metrics on (http://127\.0\.0\.1:\d+/metrics)").group(1)
        found = {}

        def straggler_named():
            fams = families(scrape(url))
            found.update(fams)
            return value(fams, "pardash_straggler_cost_seconds", rank="3") is not None

        wait_for(straggler_named, timeout_s=60, poll_s=0.2)
        text = scrape(url)
        fams = families(text)
        assert AGGREGATES <= set(fams)
        assert value(fams, "pardash_world_size") == 8 and value(fams, "pardash_stragglers") == 1
        assert value(fams, "pardash_ranks", state="straggler") == 1 and value(fams, "pardash_ranks", state="running") == 7
        assert value(fams, "pardash_straggler_cost_seconds", rank="3", cause="data") > 0
        assert value(fams, "pardash_self_max_seconds") > value(fams, "pardash_self_median_seconds")
        assert value(fams, "pardash_held_min_bytes") == value(fams, "pardash_held_max_bytes") > 0
        assert not any(name.startswith("pardash_rank_") for name in fams)
        check_conventions(text)
    finally:
        _stop(proc)


class StoppedLaunch:
    """``pardash launch --headless`` of the bundled trainer, FSDP on 2 ranks, with /metrics
    (``--prometheus 0 --prometheus-per-rank``) and a textfile (``--prometheus-textfile``):
    ``metrics`` its /metrics once both ranks run at step 2 or later, then stopped with Ctrl-C
    once the log holds 10 steps: ``returncode``, ``err`` (its stderr), ``textfile`` the file's
    text after it ended."""

    def __init__(self, base) -> None:
        from pardash.telemetry.logreader import load_log
        from pardash.telemetry.schema import Step

        log, prom = base / "run.jsonl", base / "run.prom"
        proc = subprocess.Popen(
            [sys.executable, "-m", "pardash", "launch", "--headless", "--strategy", "fsdp", "--nproc", "2", "--steps", "100000",
             "--every", "60", "--log-every", "0", "--log", str(log), "--runs-dir", str(base / "runs"),
             "--prometheus", "0", "--prometheus-per-rank", "--prometheus-textfile", str(prom)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env(PARDASH_REGISTRY_DIR=str(base / "registry")), cwd=base,
        )  # fmt: skip
        try:
            url = _read_until(proc, r"Prometheus metrics on (http://127\.0\.0\.1:\d+/metrics)").group(1)

            def training():
                try:
                    fams = families(scrape(url))
                except OSError:
                    return False
                return (value(fams, "pardash_step") or 0) >= 2 and value(fams, "pardash_ranks", state="running") == 2

            wait_for(training, timeout_s=240, poll_s=0.3)
            self.metrics = scrape(url)
            stepped = lambda: log.exists() and sum(isinstance(m, Step) for m in load_log(log)[0]) >= 10  # noqa: E731
            wait_for(stepped, timeout_s=120, poll_s=0.3)
            proc.send_signal(signal.SIGINT)
            _, self.err = proc.communicate(timeout=120)
            self.returncode = proc.returncode
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        self.textfile = prom.read_text()


# One launch serves this file's test of /metrics while a job trains and review 244's of the
# textfile a Ctrl-C leaves (test_prometheus_review244.py): a launch of 2 ranks costs 7 s of a
# core here. Its tests share a worker, which makes it once.
STOPPED_LAUNCH_GROUP = pytest.mark.xdist_group("h289_prometheus_stopped_launch")
_stopped_launches: list = []


def shared_stopped_launch(tmp_path_factory) -> StoppedLaunch:
    """The worker's :class:`StoppedLaunch`, made by the first test that asks for it (a
    module's fixture would make one for each of the two files)."""
    if not _stopped_launches:
        try:
            _stopped_launches.append(StoppedLaunch(tmp_path_factory.mktemp("stopped-launch")))
        except BaseException as e:  # (every test that shares it fails, with its cause)
            _stopped_launches.append(e)
    made = _stopped_launches[0]
    if isinstance(made, BaseException):
        raise made
    return made


@pytest.fixture
def stopped_launch(tmp_path_factory) -> StoppedLaunch:
    return shared_stopped_launch(tmp_path_factory)


@pytest.mark.slow
@STOPPED_LAUNCH_GROUP
def test_launch_serves_metrics_from_its_hub_while_it_trains(stopped_launch):
    fams = families(stopped_launch.metrics)
    assert AGGREGATES - {"pardash_straggler_cost_seconds"} <= set(fams)
    assert value(fams, "pardash_world_size") == 2
    run = [s for s in fams["pardash_run_info"].samples][0]
    assert run.labels["strategy"] == "fsdp"
    # FSDP on 2 ranks: each holds half the model state the ZeRO arithmetic expects unsharded
    assert value(fams, "pardash_held_max_bytes") == pytest.approx(value(fams, "pardash_unsharded_bytes") / 2, rel=0.01)
    assert value(fams, "pardash_rank_step", rank="0") >= 2 and value(fams, "pardash_rank_step", rank="1") >= 2
    check_conventions(stopped_launch.metrics)


def test_hub_announces_its_metrics_url(tmp_path):
    r, w = __import__("os").pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash.telemetry.hub", "--no-registry", "--log", str(tmp_path / "t.jsonl"), "--prometheus", "0", "--ready-fd", str(w)],
        pass_fds=(w,), env=pardash_env(),
    )  # fmt: skip
    __import__("os").close(w)
    try:
        with open(r) as fh:
            info = json.loads(fh.readline())
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", info["metrics"])
        assert "pardash_world_size" in scrape(info["metrics"])
    finally:
        proc.terminate()
        proc.wait(30)


def test_launch_refuses_a_busy_metrics_port_before_starting_anything(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = subprocess.run(
            [sys.executable, "-m", "pardash", "launch", "--headless", "--prometheus", str(port), "--runs-dir", str(tmp_path / "runs")],
            capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path,
        )  # fmt: skip
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 2 and len(lines) == 1 and f"--prometheus {port}: port {port} is busy" in lines[0], p.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("command, flag", [("launch", "--telemetry-port"), ("simulate", "--port")])
def test_a_metrics_port_among_the_hubs_own_is_refused_before_starting_anything(tmp_path, command, flag):
    # The hub took PORT..PORT+2 first, then /metrics "cannot serve ... (Address already in use)"
    # with nothing else on the port (review 323).
    p = subprocess.run([sys.executable, "-m", "pardash", command, "--headless", flag, "53150", "--prometheus", "53152",
                        "--runs-dir", str(tmp_path / "runs")], capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path)  # fmt: skip
    assert p.returncode == 2 and p.stderr == (f"pardash: error: --prometheus 53152: the hub takes {flag} 53150 and the two after it "
                                              "(53150-53152); choose another --prometheus PORT\n"), p.stderr  # fmt: skip
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_metrics_port_among_a_multi_node_hubs_default_ports_is_refused(tmp_path):
    # Several nodes: node 0's hub takes 29600-29602 unless told; the check knew only a port given.
    p = subprocess.run([sys.executable, "-m", "pardash", "launch", "--headless", "--nnodes", "2", "--node-rank", "0", "--prometheus", "29601",
                        "--runs-dir", str(tmp_path / "runs")], capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path)  # fmt: skip
    assert p.returncode == 2 and "--prometheus 29601: the hub takes --telemetry-port 29600 and the two after it (29600-29602)" in p.stderr, p.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["launch", "--headless", "--strategy", "ddp", "--nproc", "2"],
        ["hub", "--no-registry"],
        ["simulate", "--headless", "--ranks", "2"],
    ],
)
def test_metrics_beyond_loopback_need_insecure(tmp_path, command):
    # /metrics is plain HTTP: no CURVE keys can guard it, so leaving loopback is the user's call.
    p = subprocess.run(
        [sys.executable, "-m", "pardash", *command, "--prometheus", "0", "--prometheus-addr", "0.0.0.0"],
        capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert "--prometheus-addr 0.0.0.0: /metrics has no authentication" in line and "--insecure" in line
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def test_the_hub_module_alone_keeps_metrics_on_loopback_without_insecure(tmp_path, hub):
    # `python -m pardash.telemetry.hub` is a documented entry point of its own: it must not skip
    # the rule that `pardash hub` checks. Its first stdout line is the ready line of a hub that
    # started; a refused one prints nothing there and exits.
    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash.telemetry.hub", "--no-registry", "--log", str(tmp_path / "t.jsonl"),
         "--prometheus", "0", "--prometheus-addr", "0.0.0.0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env(),
    )  # fmt: skip
    try:
        ready = proc.stdout.readline()
        assert ready == "", f"the hub started: {ready}"
        assert proc.wait(60) == 2
        (line,) = proc.stderr.read().strip().splitlines()
        assert "--prometheus-addr 0.0.0.0: /metrics has no authentication" in line and "--insecure" in line
        assert not (tmp_path / "t.jsonl").exists()  # refused before anything started
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.communicate(timeout=30)
    # The server itself refuses too, for any other caller; --insecure is the user's say-so.
    with pytest.raises(MetricsError, match="--prometheus-addr 0.0.0.0: /metrics has no authentication"):
        serve_metrics(hub.core, 0, addr="0.0.0.0")
    server = serve_metrics(hub.core, 0, addr="0.0.0.0", insecure=True)
    try:
        assert "pardash_world_size" in scrape(f"http://127.0.0.1:{server.port}/metrics")
    finally:
        server.close()


def test_what_the_script_logs_and_times_itself_is_served_by_name():
    # pt.log's own names (tokens/s, a grad norm) and pt.phase's were in the TUI, the log and
    # TensorBoard, and nowhere in the metrics.
    from pardash.telemetry import schema
    from pardash.telemetry.hubcore import HubCore
    from pardash.telemetry.prometheus import HubCollector

    core = HubCore(run_id="r", world_size=1)
    core.ingest(schema.Hello(run="r", rank=0, world_size=1, t=1.0e9), 1.0)
    core.ingest(schema.Step(run="r", rank=0, seq=1, step=1, t=1.0e9 + 1, step_s=0.1, custom={"tokens_per_s": 5000.0, "grad_norm": 0.5},
                            phases={"augment": 0.02}), 1.0)  # fmt: skip
    fams = {f.name: f for f in HubCollector(core, per_rank=True).collect()}
    assert [(s.labels["rank"], s.labels["phase"], s.value) for s in fams["pardash_rank_own_phase_seconds"].samples] == [("0", "augment", 0.02)]
    # (a step that logs nothing, or pardash's own count: the script's last values stay, its alone;
    # they were there one scrape in ten of a metric logged every 10 steps)
    core.ingest(schema.Step(run="r", rank=0, seq=2, step=2, t=1.0e9 + 2, step_s=0.1, custom={"micro_batches": 4.0}), 1.0)
    fams = {f.name: f for f in HubCollector(core, per_rank=True).collect()}
    assert {(s.labels["name"], s.value) for s in fams["pardash_rank_metric"].samples} == {("tokens_per_s", 5000.0), ("grad_norm", 0.5)}
    assert fams["pardash_rank_own_phase_seconds"].samples == []  # (the latest step's: it timed none)
