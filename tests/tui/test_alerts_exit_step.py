"""The step the alerts say a killed rank died in is the one the report and the launcher's last
line say: a review `kill -9`'d rank 1 of the DDP tutorial under `pardash launch`; the alert read
"rank 1, the root cause, exited with code -9 at step 1825" (the step after its last logged
one), the launcher and the report "at step 1839" (its last steps, held to be sent, died with
it; its peer, in lockstep with it, reached 1839)."""

from __future__ import annotations

import pytest
from tui_helpers import replay_app

from pardash.telemetry import schema
from pardash.telemetry.failures import failure_summary
from pardash.telemetry.report import build_report
from pardash.telemetry.state import RunState
from pardash.tui.alerts import run_alerts
from pardash.tui.widgets.alert_list import AlertList

T = 1.7e9


def _killed_log(peer: str) -> list[schema.Message]:
    """2 DDP ranks; rank 1 SIGKILLed (the launcher's note: no word of its own) with its log at
    step 1824 and rank 0's at 1839. ``peer``: what became of rank 0 after (failed on the closed
    connection, stopped by torchrun, or still running)."""
    msgs: list[schema.Message] = [
        schema.Hello(run="k", rank=r, world_size=2, pid=10 + r, strategy="ddp", seq=0, t=T) for r in range(2)
    ]
    msgs += [
        schema.Step(run="k", rank=0, step=s, seq=s - 1800, loss=1.0, samples=8, step_s=0.01, t=T + s * 0.01)
        for s in range(1801, 1840)
    ]  # fmt: skip
    msgs += [
        schema.Step(run="k", rank=1, step=s, seq=s - 1800, loss=1.0, samples=8, step_s=0.01, t=T + s * 0.01)
        for s in range(1801, 1825)
    ]  # fmt: skip
    death = T + 18.5
    msgs.append(schema.Event(run="k", rank=1, seq=-1, name="exit", code=-9, t=death, hseq=100,
                             message="torchrun: rank 1 killed by signal 9 (SIGKILL)"))  # fmt: skip
    if peer == "failed":
        msgs += [
            schema.Event(run="k", rank=0, seq=100, name="error", step=1839, t=death + 0.1, hseq=101,
                         message="RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1234"),
            schema.Event(run="k", rank=0, seq=101, name="exit", code=1, step=1840, t=death + 0.1, hseq=102),
        ]  # fmt: skip
    elif peer == "stopped":
        msgs.append(schema.Event(run="k", rank=0, seq=-1, name="exit", code=-15, t=death + 0.2, hseq=101,
                                 message="stopped by torchrun"))  # fmt: skip
    return msgs


def _said_step(text: str) -> int:
    return int(text.split(" at step ")[1].split()[0].rstrip(",:;"))


@pytest.mark.parametrize("peer", ["failed", "stopped", "running"])
def test_a_killed_ranks_alert_says_the_step_the_report_and_the_launcher_say(tmp_path, peer):
    msgs = _killed_log(peer)
    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json_lines(msgs))
    state = RunState(run_id="k")
    for m in msgs:
        state.apply(m, 0.0)
    f = failure_summary(state)  # (what the launcher's last line says)
    assert f["rank"] == 1 and f["step"] == 1839 and f["line"].startswith("rank 1 exited with code -9 (SIGKILL) at step 1839")
    assert build_report(str(log))["failure"]["step"] == 1839
    [alert] = [a for a in run_alerts(state) if a.rank == 1]
    assert alert.kind == "exited" and _said_step(alert.text) == 1839, alert.text
    assert alert.first == (peer != "running"), alert  # (the root cause, once another rank exited)


async def test_the_dashboards_alert_of_a_killed_rank_says_the_reports_step(tmp_path):
    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json_lines(_killed_log("failed")))
    app = replay_app(str(log))
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        texts = {a.rank: a.text for a in app.screen.query_one(AlertList).alerts}
    assert texts[1].startswith("rank 1, the root cause, exited with code -9 at step 1839"), texts
    assert build_report(str(log))["failure"]["step"] == 1839
