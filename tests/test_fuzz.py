"""Hostile frames against a live hub process (bench/fuzz.py, smaller): the hub stays up, every
frame is taken or counted under a reason, and a valid rank alongside is recorded completely.
``python -m bench.fuzz`` runs the full 100,000-frame version and reports the hub's memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/ is not an installed package

from bench.fuzz import fuzz  # noqa: E402
from helpers import wait_for  # noqa: E402
from pardash.telemetry import frames  # noqa: E402
from pardash.telemetry.client import HubClient  # noqa: E402
from pardash.telemetry.hub import MAX_SNAPSHOT_WAITERS  # noqa: E402
from pardash.telemetry.hubcore import REJECT_REASONS  # noqa: E402


def test_a_live_hub_survives_hostile_frames_and_records_the_valid_rank(tmp_path):
    r = fuzz(5_000, seed=7, oversized=3, workdir=str(tmp_path))
    assert r.hub_alive and r.hub_exit == 0
    assert r.frames >= 5_000 and r.sent_by_category["multipart"] > 0 and r.oversized == 3
    # Every frame is accounted for: taken, or rejected under a reason; nothing hit the safety net.
    assert r.accounted, (r.received, r.rejected, r.valid_sent, r.frames)
    assert r.rejected.get("internal_error", 0) == 0
    assert set(r.rejected) <= set(REJECT_REASONS), set(r.rejected) - set(REJECT_REASONS)  # each has its series on /metrics
    for reason in ("undecodable", "invalid", "too_deep", "too_large", "not_finite", "out_of_range",
                   "rank_out_of_range", "foreign_run", "newer_version", "unknown_version", "verdict_from_rank"):  # fmt: skip
        assert r.rejected.get(reason, 0) > 0, reason
    # The valid rank: every seq in the log, once; its reporter dropped nothing.
    assert r.valid_dropped == 0
    assert r.valid_missing == [] and r.valid_logged == r.valid_sent
    # What the hub took from hostile ranks is in the log too, and every log line reads back.
    assert r.hostile_logged == r.received - r.valid_sent
    assert r.log_skipped == 0
    # A sanity bound only (the bench measures flatness over 100,000 frames).
    assert r.rss_end < r.rss_start + (128 << 20)
    assert r.viewer_frames > 0


def test_a_flood_of_snapshot_requests_gets_bounded_answers(hub):
    ctx = zmq.Context.instance()
    fseq0 = hub.core.fseq
    flood = []
    for _ in range(MAX_SNAPSHOT_WAITERS + 50):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(hub.snapshot_endpoint)
        for _ in range(20):
            s.send(frames.SNAPSHOT_REQUEST, zmq.NOBLOCK)
        flood.append(s)
    viewer = HubClient(hub.updates_endpoint, hub.snapshot_endpoint)
    answered = 0
    try:
        # A viewer still gets its snapshot (asking again if the flood took every place).
        assert viewer.wait_synced(30.0)

        def some_answered() -> bool:
            nonlocal answered
            for s in flood:
                while s.poll(0):
                    s.recv()
                    answered += 1
            return answered > 0

        wait_for(some_answered)
        some_answered()
        # At most MAX_SNAPSHOT_WAITERS answers a frame, however many requests came.
        assert answered <= MAX_SNAPSHOT_WAITERS * (hub.core.fseq - fseq0 + 1)
        assert answered < 20 * len(flood)
    finally:
        viewer.close()
        for s in flood:
            s.close(0)


HUGE_STEPS = """
from pardash.telemetry import schema
from pardash.telemetry.hub import HubCore
core = HubCore(run_id="r")
for rank in (1, 2):
    core.ingest(schema.Hello(run="r", rank=rank, world_size=4), 0.0)
    core.ingest(schema.Step(run="r", rank=rank, seq=1, step=10**9, self_s=0.1, step_s=0.1), 0.0)
core.tick(1.0)
"""


def test_huge_step_numbers_do_not_hold_the_hub_loop():
    subprocess.run([sys.executable, "-c", HUGE_STEPS], check=True, timeout=60)
