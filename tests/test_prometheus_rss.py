"""Review 340: a rank's memory between steps (an evaluation holding 300 MiB more, a leak) never
reached /metrics: its device memory on CPU is its RSS as of its latest step, which stood still
through the evaluation, and a rank the OOM killer took there left its textfile's RSS below its
peer's. pardash_rank_rss_bytes and pardash_rss_max_bytes say the RSS now, from the ranks' system
samples (about every second)."""

from __future__ import annotations

from test_prometheus import check_conventions, families, scrape, value

from pardash.telemetry import schema
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.prometheus import serve_metrics

MiB = 1 << 20


def test_the_rss_now_is_the_system_samples_not_the_last_steps():
    core = HubCore(run_id="r", world_size=2)
    for r in (0, 1):
        core.ingest(schema.Hello(rank=r, world_size=2, t=1.0, seq=0, pid=10 + r, strategy="ddp"), 0.0)
        mem = schema.Mem(params_bytes=1000, grads_bytes=1000, optim_bytes=2000, rss_bytes=(400 + r) * MiB)
        core.ingest(schema.Step(rank=r, step=60, loss=1.0, samples=8, step_s=0.1, t=2.0, seq=1, mem=mem), 0.0)
    server = serve_metrics(core, 0, per_rank=True)
    try:
        fams = families(scrape(server.url))
        # No system sample yet: the steps' figure
        assert value(fams, "pardash_rank_rss_bytes", rank="0") == 400 * MiB
        assert value(fams, "pardash_rss_max_bytes") == 401 * MiB
        # Rank 0 evaluates after step 60: its samples say 700 MiB; its steps' figure stands still
        core.ingest(schema.System(rank=0, t=3.0, seq=2, rss_bytes=700 * MiB, rss_peak_bytes=700 * MiB), 0.0)
        text = scrape(server.url)
        check_conventions(text)
        fams = families(text)
        assert value(fams, "pardash_rank_rss_bytes", rank="0") == 700 * MiB
        assert value(fams, "pardash_rank_rss_bytes", rank="1") == 401 * MiB
        assert value(fams, "pardash_rss_max_bytes") == 700 * MiB
        assert value(fams, "pardash_rank_device_memory_bytes", rank="0") == 400 * MiB  # (as of its step, as its help says)
        # Killed there: a rank ended counts no more in the largest now
        core.ingest(schema.Event(rank=0, t=4.0, seq=3, name="exit", code=-9, message="killed by signal 9 (SIGKILL)"), 0.0)
        fams = families(scrape(server.url))
        assert value(fams, "pardash_rss_max_bytes") == 401 * MiB
        assert value(fams, "pardash_rank_rss_bytes", rank="0") == 700 * MiB  # (its last word: what it held as it died)
    finally:
        server.close()


def test_ranks_said_growing_in_memory_are_counted():
    # An on-call engineer pages on a leak before the OOM killer acts (review 340's leak read
    # nowhere but the rank detail's RSS).
    core = HubCore(run_id="r", world_size=2)
    for r in (0, 1):
        core.ingest(schema.Hello(rank=r, world_size=2, t=1.0, seq=0, pid=10 + r, strategy="ddp"), 0.0)
        core.ingest(schema.Step(rank=r, step=300, loss=1.0, samples=8, step_s=0.1, t=2.0, seq=1), 0.0)
    server = serve_metrics(core, 0)
    try:
        assert value(families(scrape(server.url)), "pardash_ranks_memory_growing") == 0
        core.state.apply(schema.Verdict(rank=1, verdict="memory_growing", step=268, message="rank 1's memory grows 1.6 MiB a step"), 3.0)
        assert value(families(scrape(server.url)), "pardash_ranks_memory_growing") == 1
        core.state.apply(schema.Verdict(rank=-1, verdict="memory_growing", step=300, message="every rank's memory grows"), 3.0)
        assert value(families(scrape(server.url)), "pardash_ranks_memory_growing") == 2  # (every rank alike)
        for rank in (1, -1):
            core.state.apply(schema.Verdict(rank=rank, verdict="memory_steady", step=400), 4.0)
        assert value(families(scrape(server.url)), "pardash_ranks_memory_growing") == 0
    finally:
        server.close()
