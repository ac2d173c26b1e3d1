"""A straggler spell the run came through stays said while it goes on: someone looking in after
hours read "✓ no alerts: every rank is healthy", the spell at 00:46 gone from the event log's
500 lines (review 238: a run's epoch ends alone filled them in 25 minutes)."""

from __future__ import annotations

from tui_helpers import until

from pardash.telemetry import schema
from pardash.telemetry.client import ReplaySource
from pardash.tui.app import make_app
from pardash.tui.widgets.alert_list import AlertList

T0 = 1_700_000_000.0


def _log(path) -> None:
    msgs: list[schema.Message] = []
    for rank in (0, 1):
        msgs.append(schema.Hello(run="r", rank=rank, world_size=2, strategy="ddp", t=T0))
    for k in range(1, 201):
        for rank in (0, 1):
            msgs.append(schema.Step(run="r", rank=rank, seq=k, step=k, step_s=0.1, samples=4, self_s=0.05, t=T0 + k * 0.1))
        if k == 29:
            msgs.append(schema.Verdict(run="r", rank=1, verdict="straggler", cause="data", cost_s=0.02, step=29, t=T0 + 2.9))
        if k == 60:
            msgs.append(schema.Verdict(run="r", rank=1, verdict="straggler_cleared", step=60, t=T0 + 6.0))
    for hseq, m in enumerate(msgs, 1):
        m.hseq = hseq
    path.write_bytes(b"\n".join(schema.encode_json(m) for m in msgs) + b"\n")


async def test_a_running_runs_calm_line_says_who_was_a_straggler(tmp_path):
    _log(tmp_path / "run.jsonl")
    src = ReplaySource(str(tmp_path / "run.jsonl"))
    src.seek(15.0)  # (long after the spell, before the log's end: the ranks running)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=(160, 40)) as pilot:
        alerts = app.screen.query_one(AlertList)
        await until(pilot, lambda: bool(alerts.calm))
        assert alerts.calm == "✓ no alerts: every rank is healthy · rank 1 was a straggler (data), found at step 29, no longer at step 60"
