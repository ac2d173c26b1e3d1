"""The header holds what it held while the run went on once the run ends (a review in tmux: at
the end the log's path turned absolute and the CPU's name went)."""

from __future__ import annotations

import pytest
from tui_helpers import replay_app

from pardash.tui.app import make_app
from pardash.tui.widgets.run_header import RunHeader, RunSummary

RUN_ID = "20261205-004751-1ab1"
CPU = "Intel(R) Xeon(R) Processor"


def _running(log_path: str) -> RunSummary:
    return RunSummary(
        run_id=RUN_ID, strategy="ddp", world_size=2, device=CPU, step=1594, samples_per_s=1370.0, elapsed_s=29,
        status_counts=(("running", 2),), ingest_hz=94.0, log_path=log_path,
    )  # fmt: skip


def _ended(log_path: str, when: str) -> RunSummary:
    # (the hub's rate no longer said; the rate is what the ranks ran at over their last steps)
    return RunSummary(
        run_id=RUN_ID, strategy="ddp", world_size=2, device=CPU, step=4000, samples_per_s=2283.0, samples_per_s_when=when,
        elapsed_s=75, status_counts=(("finished", 2),), log_path=log_path,
    )  # fmt: skip


@pytest.mark.parametrize("width", [98, 118, 160])
@pytest.mark.parametrize("when", ["at the end", "at the end (stalled)"])
async def test_the_header_keeps_the_device_and_the_log_path_it_had_when_the_run_ends(tmp_path, monkeypatch, width, when):
    # At 120 columns: "... elapsed 29s   Intel(R) Xeon(R) Processor" and "log runs/<id>/telemetry.jsonl"
    # while it ran; at its end "samples/s 2283 at the end   elapsed 4s" (no CPU) and
    # "log /tmp/.../runs/<id>/telemetry.jsonl" (the hub's rate gone, the whole path fitted).
    monkeypatch.chdir(tmp_path)
    log = f"{tmp_path}/runs/{RUN_ID}/telemetry.jsonl"
    app = make_app(replay_app("run4.jsonl").source)
    async with app.run_test(size=(width + 2, 40)) as pilot:
        header = app.screen.query_one(RunHeader)
        seen = []
        for summary in (_running(log), _ended(log, when)):
            header.summary = summary
            await pilot.pause()
            seen.append(header._text(width).plain.splitlines())
        during, after = seen
        assert len(after) == len(during), seen
        assert (CPU in during[0]) == (CPU in after[0]), seen
        if width >= 118:
            assert CPU in after[0], seen
        said = [[p for p in "\n".join(lines).split("   ") if p.startswith("log ")] for lines in seen]
        # (relative to the folder it runs in, before and after; where the hub's rate made room
        # at the end, "runs/…/" may say the run id it stood for: never the folder)
        assert [len(x) for x in said] == [1, 1] and all(x[0].startswith("log runs/") for x in said), said
        if width >= 118:
            assert said[0] == said[1] == [f"log runs/{RUN_ID}/telemetry.jsonl"], said
        if width == 160:  # (room for it: said)
            assert f"samples/s 2283 {when}" in after[0], after
