"""A stopped rank's status in the report (review 258): "stopped", as the TUI's alerts and
Prometheus's ``state`` say it, not "exited", which the README keeps for failures (a rank stopped
in the TUI read "exited" beside its exits line's "stopped by you")."""

from __future__ import annotations

import subprocess
import sys

import msgspec

from helpers import pardash_env
from pardash.telemetry import schema
from pardash.telemetry.report import build_report


def test_a_stopped_ranks_status_in_the_report_is_stopped(tmp_path):
    # A single-node launch stopped with Ctrl-C, as its log has it: ranks 0-1's ends the
    # supervisor's notes. Their status read "exited" beside "stopped by you"; the README keeps
    # "exited" for failures (rank 2's, of its own).
    t = 1.0e9
    records = [
        *(schema.Hello(run="r", rank=r, seq=0, world_size=3, pid=10 + r, strategy="ddp", t=t) for r in (0, 1, 2)),
        *(schema.Step(run="r", rank=r, seq=1, step=5, step_s=0.1, t=t + 1) for r in (0, 1, 2)),
        schema.Event(run="r", rank=2, seq=2, name="exit", code=1, t=t + 8),  # (a failure stays "exited")
        *(schema.Event(run="r", rank=r, seq=-1, name="exit", code=-15, t=t + 9, message="stopped by you") for r in (0, 1)),
        schema.Event(run="r", rank=-1, seq=-1, name="hub", t=t + 10, message="hub stopped: 9 messages, 0 lost, 0 rejected"),
    ]
    log = tmp_path / "run.jsonl"
    log.write_bytes(b"".join(msgspec.json.encode(m) + b"\n" for m in records))
    rep = build_report(str(log))
    assert [(r["rank"], r["status"]) for r in rep["ranks"]] == [(0, "stopped"), (1, "stopped"), (2, "exited")]
    assert rep["statuses"] == {"stopped": 2, "exited": 1}
    out = subprocess.run([sys.executable, "-m", "pardash", "report", str(log), "--format", "markdown"], capture_output=True, text=True,
                         timeout=60, env=pardash_env())  # fmt: skip
    assert out.returncode in (0, 1), out.stderr
    rows = [line.split("|") for line in out.stdout.splitlines() if line.startswith(("| 0 ", "| 1 ", "| 2 "))]
    assert [(row[1].strip(), row[3].strip()) for row in rows] == [("0", "stopped"), ("1", "stopped"), ("2", "exited")], out.stdout
    text = subprocess.run([sys.executable, "-m", "pardash", "report", str(log)], capture_output=True, text=True, timeout=60,
                          env=pardash_env()).stdout  # fmt: skip
    table = text[text.index("\nranks ") :].splitlines()[3:6]
    assert [line.split()[:3] for line in table] == [["0", "-", "stopped"], ["1", "-", "stopped"], ["2", "-", "exited"]], text
