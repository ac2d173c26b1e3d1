"""A replay of a log its hub closed while ranks were still running ends as the live viewer and
`pardash report` end it: the hub stopped at step N, its ranks not ended (helper 235)."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import identity, pardash_env, wait_for

from pardash.telemetry.client import HubClient, ReplaySource
from pardash.telemetry.report import build_report
from pardash.telemetry.report_render import summary_rows
from pardash.telemetry.reporter import Reporter
from pardash.tui.widgets.run_header import summarize


def test_a_log_its_hub_closed_under_running_ranks_replays_to_the_live_viewers_end(tmp_path):
    # Its replay ended on "● 2 running" and "every rank is healthy", where the viewer attached
    # to the hub as it stopped said "the hub stopped at step 3, 2 ranks not ended" and the
    # report "ranks 0-1 at step 3: the hub stopped before their end was heard (no exit)".
    log = tmp_path / "telemetry.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash", "hub", "--run-id", "hs235", "--log", str(log), "--no-registry"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=pardash_env(),
    )  # fmt: skip
    reps: list[Reporter] = []
    try:
        info = json.loads(proc.stdout.readline())
        viewer = HubClient(info["updates"], info["snapshot"])
        assert viewer.wait_synced(20)
        reps = [Reporter(info["ingest"], run="hs235", identity=identity(r, 2), heartbeat_s=0) for r in range(2)]
        for rep in reps:
            rep.hello(strategy="ddp", world_size=2)
        for step in (1, 2, 3):
            for rep in reps:
                rep.step(step=step, loss=1.0, step_s=0.01, samples=8)
        wait_for(lambda: len(viewer.state.ranks) == 2 and all(r.step and r.step.step == 3 for r in viewer.state.ranks.values()), poll=viewer.poll)
        proc.terminate()  # the hub stops under its ranks, which never say they ended
        assert proc.wait(30) == 0
        wait_for(lambda: viewer.ended_early is not None, poll=viewer.poll)
    finally:
        for rep in reps:
            rep.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    viewer.close()
    live = summarize(viewer)
    assert viewer.ended_early == {"step": 3, "running": 2, "ranks": [0, 1], "hub_stopped": True}
    rep = build_report(str(log))
    assert rep["hub_stopped_first"] == {"step": 3, "ranks": [0, 1]}
    assert ("not ended", "ranks 0-1 at step 3: the hub stopped before their end was heard (no exit)") in summary_rows(rep)

    played = ReplaySource(str(log), speed=1e6)
    wait_for(lambda: played.done and played.ended_early is not None, poll=played.poll)
    jumped = ReplaySource(str(log), start_s=float("inf"))  # --start end
    for src in (played, jumped):
        assert src.ended_early == {"step": 3, "running": 2, "ranks": [0, 1], "hub_stopped": True}
        said = summarize(src)
        # the header's note and marks, word for word the live viewer's
        assert said.note == live.note == "the hub stopped at step 3, 2 ranks not ended (no word of their end)"
        assert said.log_ends_early == live.log_ends_early == "when the hub stopped"
    # A seek back plays it again: no early end said before its end.
    jumped.seek(0.0)
    assert jumped.ended_early is None


def test_the_live_viewer_counts_the_ranks_not_ended_as_the_report_does():
    # A rank stalled when the hub stopped stays stalled, what became of it, in the report and a
    # replay; the live viewer counted it among the ranks "not ended" (1023 where they said 1021).
    from pardash.telemetry import schema
    from pardash.telemetry.client import FrameApplier, NullDetector
    from pardash.telemetry.hubcore import HubCore

    class Viewer(HubClient):  # (the frames a hub sends, applied as HubClient applies them)
        def __init__(self) -> None:
            FrameApplier.__init__(self)

    core = HubCore(detector=NullDetector())
    viewer = Viewer()
    for rank in range(3):
        core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=rank, world_size=3, strategy="ddp")), 1.0)
        core.ingest_bytes(schema.encode(schema.Step(run="r", rank=rank, seq=1, step=3, step_s=0.1)), 1.0)
    core.verdict(schema.Verdict(rank=2, verdict="stalled", cause="backward", step=3))
    viewer.load_snapshot(core.snapshot())
    core.note("hub stopped: 6 messages, 0 lost, 0 rejected")
    viewer.apply_frame(core.tick(2.0))
    assert viewer.ended_early == {"step": 3, "running": 2, "ranks": [0, 1], "hub_stopped": True}
