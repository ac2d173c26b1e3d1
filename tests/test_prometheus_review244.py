"""Review 244, as a Grafana user: a run stopped on purpose read as a crash in
``pardash_ranks``, and nothing counted what a run did for ``rate()`` or kept a straggler once
the run was over. Real hub state (HubCore applying the schema's messages), served over HTTP
and read with prometheus-client's parser."""

from __future__ import annotations

import pytest

from pardash.telemetry import schema
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.prometheus import TextfileWriter, serve_metrics
from test_prometheus import STOPPED_LAUNCH_GROUP, check_conventions, families, scrape, shared_stopped_launch, value


def _running(world: int = 2, samples: int = 8, steps: int = 3) -> HubCore:
    """A hub whose ``world`` ranks each said hello and took ``steps`` steps of ``samples``."""
    core = HubCore(run_id="r", world_size=world)
    for r in range(world):
        core.ingest(schema.Hello(rank=r, world_size=world, t=1.0, seq=0, pid=100 + r, strategy="ddp"), 0.0)
        for step in range(1, steps + 1):
            core.ingest(schema.Step(rank=r, step=step, samples=samples, samples_total=samples * step, step_s=0.1, t=2.0, seq=step), 0.0)
    return core


def _launcher_note(core: HubCore, rank: int, code: int, message: str) -> None:
    """The launcher's note of a rank's exit (seq -1), as trainer/supervisor.py sends it."""
    core.ingest(schema.Event(run="r", rank=rank, seq=-1, t=3.0, name="exit", code=code, message=message), 0.0)


def _states(fams: dict) -> dict[str, float]:
    return {s.labels["state"]: s.value for s in fams["pardash_ranks"].samples}


@pytest.mark.parametrize(
    ("code", "message"),
    [(-15, "stopped by you"), (-15, "stopped by a viewer (pardash attach, pid 7)"), (-15, "stopped by SIGTERM")],
    ids=["tui-stop", "viewer-stop", "sigterm"],
)
def test_a_run_stopped_by_the_launcher_reads_stopped_not_exited(code, message):
    # `q`, `s` in the TUI and Ctrl-C headless both ended with pardash_ranks{state="exited"} 2
    # and finished 0, as a crash does: the README's alert on exited > 0 fired on every stop.
    core = _running()
    server = serve_metrics(core, 0, per_rank=True)
    try:
        for r in (0, 1):
            _launcher_note(core, r, code, message)
        text = scrape(server.url)
        check_conventions(text)
        fams = families(text)
        assert _states(fams) == {"starting": 0, "running": 0, "straggler": 0, "stalled": 0, "silent": 0, "exited": 0,
                                 "stopped": 2, "finished": 0, "left_early": 0}  # fmt: skip
        for r in ("0", "1"):
            assert value(fams, "pardash_rank_state", rank=r, state="stopped") == 1
            assert value(fams, "pardash_rank_state", rank=r, state="exited") == 0
        doc = fams["pardash_ranks"].documentation
        assert "exited (failed:" in doc and "stopped (ended by a stop, not failing:" in doc and "exited > 0: a rank failed." in doc
    finally:
        server.close()


@pytest.mark.parametrize("code", [-2, 130, -15, 143], ids=["sigint", "keyboard-interrupt", "sigterm", "shell-sigterm"])
def test_a_rank_that_says_it_was_stopped_reads_stopped(code):
    # Under torchrun alone (no launcher to note it) a rank says its own stop: exit -2 "stopped
    # by SIGINT", 130 (Python's exit on Ctrl-C), -15 "stopped by SIGTERM" (a scheduler's).
    core = _running(world=1)
    server = serve_metrics(core, 0)
    try:
        core.ingest(schema.Event(run="r", rank=0, seq=10, t=3.0, name="exit", code=code, message="stopped by SIGINT"), 0.0)
        fams = families(scrape(server.url))
        assert value(fams, "pardash_ranks", state="stopped") == 1 and value(fams, "pardash_ranks", state="exited") == 0
    finally:
        server.close()


@pytest.mark.parametrize(("code", "error"), [(1, "RuntimeError: CUDA error: out of memory"), (-9, None)], ids=["error", "sigkill"])
def test_a_crash_still_reads_exited_and_the_ranks_torchrun_stopped_read_stopped(code, error):
    # torchrun stops the surviving ranks with SIGTERM after one fails: the failed rank is the
    # alert's (exited), the others were stopped, as `pardash report` says.
    core = _running(world=3)
    server = serve_metrics(core, 0, per_rank=True)
    try:
        if error:
            core.ingest(schema.Event(run="r", rank=1, seq=10, t=3.0, name="error", message=error), 0.0)
            core.ingest(schema.Event(run="r", rank=1, seq=11, t=3.0, name="exit", code=code), 0.0)
        else:
            _launcher_note(core, 1, code, "rank 1 was killed (SIGKILL)")
        for r in (0, 2):
            _launcher_note(core, r, -15, "stopped by torchrun")
        fams = families(scrape(server.url))
        assert value(fams, "pardash_ranks", state="exited") == 1 and value(fams, "pardash_ranks", state="stopped") == 2
        assert value(fams, "pardash_rank_state", rank="1", state="exited") == 1
        assert value(fams, "pardash_rank_state", rank="0", state="stopped") == 1
        from pardash.telemetry.failures import root_cause

        assert root_cause(core.state)[0].rank == 1  # the report's root cause is the one exited
    finally:
        server.close()


def test_steps_and_samples_are_counters_that_survive_the_end_and_a_restart():
    # Throughput was pardash_samples_per_second alone, a one-second figure that reads 0 in the
    # final textfile: nothing to rate() over, nothing that said what the run did.
    core = _running(world=2, samples=8, steps=3)
    server = serve_metrics(core, 0)
    try:
        fams = families(scrape(server.url))
        check_conventions(scrape(server.url))
        assert fams["pardash_steps"].type == "counter" and fams["pardash_samples"].type == "counter"
        assert value(fams, "pardash_steps_total") == 6  # 3 steps of 2 ranks
        assert value(fams, "pardash_samples_total") == 48
        # Rank 1 steps twice more, then torchrun restarts it: its new process counts its
        # samples (and its messages) from 0 again. The counter goes on from what it had.
        for step in (4, 5):
            core.ingest(schema.Step(rank=1, step=step, samples=8, samples_total=8 * step, step_s=0.1, t=2.5, seq=step), 0.0)
        assert value(families(scrape(server.url)), "pardash_samples_total") == 64
        core.note("torchrun restarted the workers", name="restart", rank=1, code=1)
        core.ingest(schema.Hello(rank=1, world_size=2, t=4.0, seq=0, pid=201, restart=1, strategy="ddp"), 0.0)
        assert value(families(scrape(server.url)), "pardash_samples_total") == 64  # (no step yet: none lost)
        core.ingest(schema.Step(rank=1, step=6, samples=8, samples_total=8, step_s=0.1, t=5.0, seq=1), 0.0)
        fams = families(scrape(server.url))
        assert value(fams, "pardash_samples_total") == 72 and value(fams, "pardash_steps_total") == 9
        # A new process's step before its hello (the hello came late): the hub holds the old
        # process's newest step until the hello says it is a new process.
        core.ingest(schema.Step(rank=0, step=4, samples=8, samples_total=8, step_s=0.1, t=6.0, seq=1), 0.0)
        assert value(families(scrape(server.url)), "pardash_samples_total") == 72
        core.ingest(schema.Hello(rank=0, world_size=2, t=6.0, seq=0, pid=300, restart=1, strategy="ddp"), 0.0)
        core.ingest(schema.Step(rank=0, step=5, samples=8, samples_total=16, step_s=0.1, t=6.5, seq=2), 0.0)
        assert value(families(scrape(server.url)), "pardash_samples_total") == 88  # counted once
        for r in (0, 1):
            core.ingest(schema.Event(run="r", rank=r, seq=20, t=7.0, name="exit", code=0), 0.0)
        fams = families(scrape(server.url))
        assert value(fams, "pardash_samples_per_second") == 0  # the gauge of now: nothing at the end
        assert value(fams, "pardash_samples_total") == 88 and value(fams, "pardash_steps_total") == 11  # the counters: the run
    finally:
        server.close()


def test_straggler_verdicts_are_counted_by_cause_and_kept_after_the_run(tmp_path):
    # Once the run ended, the final textfile said pardash_stragglers 0.0: a rank that held the
    # job back for an hour left no trace.
    core = _running(world=3)
    prom = tmp_path / "run.prom"
    writer = TextfileWriter(core, str(prom), every_s=3600)
    server = serve_metrics(core, 0)
    try:
        fams = families(scrape(server.url))
        # every cause's series from the start, so increase() sees the first verdict
        assert {s.labels["cause"]: s.value for s in fams["pardash_straggler_verdicts"].samples if s.name.endswith("_total")} == {
            "data": 0, "own_work": 0, "compute": 0, "forward": 0, "backward": 0, "optimizer": 0, "gpu": 0, "host": 0}  # fmt: skip
        core.verdict(schema.Verdict(rank=1, verdict="straggler", cause="data", cost_s=0.03))
        assert value(families(scrape(server.url)), "pardash_straggler_verdicts_total", cause="data") == 1
        # A spell found and cleared between two scrapes, and one found again: each counts once.
        core.verdict(schema.Verdict(rank=1, verdict="straggler_cleared"))
        core.verdict(schema.Verdict(rank=2, verdict="straggler", cause="gpu", cost_s=0.02))
        core.verdict(schema.Verdict(rank=2, verdict="straggler_cleared"))
        core.verdict(schema.Verdict(rank=1, verdict="straggler", cause="data", cost_s=0.03))
        fams = families(scrape(server.url))
        assert value(fams, "pardash_straggler_verdicts_total", cause="data") == 2
        assert value(fams, "pardash_straggler_verdicts_total", cause="gpu") == 1
        assert value(fams, "pardash_straggler_verdicts_total", cause="compute") == 0
        assert value(families(scrape(server.url)), "pardash_straggler_verdicts_total", cause="data") == 2  # not again
        for r in range(3):
            core.ingest(schema.Event(run="r", rank=r, seq=20, t=7.0, name="exit", code=0), 0.0)
        assert writer.close() is None  # the hub's stop: the file's last write
        fams = families(prom.read_text())
        assert value(fams, "pardash_stragglers") == 0  # none now
        assert value(fams, "pardash_straggler_verdicts_total", cause="data", run="r") == 2
        assert value(fams, "pardash_straggler_verdicts_total", cause="gpu", run="r") == 1
    finally:
        server.close()


@pytest.fixture
def stopped_launch(tmp_path_factory):
    return shared_stopped_launch(tmp_path_factory)


@pytest.mark.slow
@STOPPED_LAUNCH_GROUP
def test_a_headless_launch_stopped_with_ctrl_c_leaves_a_textfile_of_stopped_ranks(stopped_launch):
    # The reviewer's run: Ctrl-C on a headless launch with --prometheus-textfile; its file said
    # pardash_ranks{state="exited"} 2.0 and finished 0, as a crash's does. (The launch of 2
    # ranks, stopped once its log holds 10 steps, is test_prometheus.py's, shared.)
    assert stopped_launch.returncode == 130, stopped_launch.err[-2000:]
    fams = families(stopped_launch.textfile)
    assert value(fams, "pardash_ranks", state="stopped") == 2 and value(fams, "pardash_ranks", state="exited") == 0
    assert value(fams, "pardash_ranks", state="finished") == 0
    assert value(fams, "pardash_steps_total") >= 10 and value(fams, "pardash_samples_total") > 0


def test_the_counters_are_the_runs_whatever_was_scraped_and_a_hub_that_read_its_log_back_says_the_same():
    # Review 254: a process's samples after the last scrape before torchrun restarted it were
    # lost (1,280 of a job's 2,848 with no scrape before its end), and a restarted hub counted
    # from 0 (samples 1,920 -> 320, straggler verdicts 300 -> 250: the event log keeps 500
    # events), which Prometheus reads as counter resets.
    msgs = []
    for r in (0, 1):
        msgs.append(schema.Hello(rank=r, world_size=2, t=1.0, seq=0, pid=100 + r, strategy="ddp"))
        msgs += [schema.Step(rank=r, step=s, samples=8, samples_total=8 * s, step_s=0.1, t=2.0, seq=s) for s in range(1, 41)]
    msgs.append(schema.Event(rank=1, seq=-1, t=3.0, name="restart", code=1, message="torchrun restarted the workers"))
    msgs.append(schema.Hello(rank=1, world_size=2, t=4.0, seq=0, pid=201, restart=1, strategy="ddp"))
    msgs += [schema.Step(rank=1, step=s, samples=8, samples_total=8 * (s - 20), step_s=0.1, t=5.0, seq=s - 20) for s in range(21, 31)]
    for i in range(300):
        msgs.append(schema.Verdict(rank=1, verdict="straggler", cause="data", cost_s=0.03, t=6.0))
        msgs.append(schema.Verdict(rank=1, verdict="straggler_cleared", t=6.0))
    want = 8 * 40 + 8 * 40 + 8 * 10  # rank 0, rank 1's first process, its second

    def fed(scrape_each: bool) -> dict:
        core = HubCore(run_id="r", world_size=2)
        server = serve_metrics(core, 0)
        try:
            for m in msgs:
                if isinstance(m, schema.Verdict):
                    core.verdict(m)
                elif m.seq < 0:
                    core.note(m.message, name=m.name, rank=m.rank, code=m.code)
                else:
                    core.ingest(m, 0.0)
                if scrape_each:
                    scrape(server.url)
            fams = families(scrape(server.url))
        finally:
            server.close()
        return {"samples": value(fams, "pardash_samples_total"), "steps": value(fams, "pardash_steps_total"),
                "data": value(fams, "pardash_straggler_verdicts_total", cause="data")}  # fmt: skip

    scraped, unscraped = fed(True), fed(False)
    assert scraped == unscraped == {"samples": want, "steps": 90, "data": 300}
