"""Review 245, finding 3: a hub alone that no rank reached. `pardash ps` said JOB "running" of
it (ranks pointed at its second port, or refused for their keys), where the viewer said
"waiting for the ranks to start"."""

from __future__ import annotations

import os
import time

import pytest
from helpers import hub_alone, live_ranks, wait_for

from pardash import cli
from pardash.telemetry import registry

pytestmark = pytest.mark.timeout(120)

ENDS = {"ingest": "tcp://127.0.0.1:1", "updates": "tcp://127.0.0.1:2", "snapshot": "tcp://127.0.0.1:3"}
WAITING_NOTE = "JOB waiting: no rank has reached the hub yet"


def _rows(capsys) -> tuple[str, dict[str, str], list[str]]:
    """`pardash ps`'s head, its rows by run id, and its notes below them."""
    assert cli.main(["ps"]) == 0
    head, *lines = capsys.readouterr().out.splitlines()
    rows = {r.split()[0]: r for r in lines if r.split()[0].endswith("-run")}
    return head, rows, [r for r in lines if not r.split()[0].endswith("-run")]


def _column(head: str, row: str, name: str, after: str) -> str:
    return row[head.index(name) : head.index(after)].strip()


def test_ps_says_waiting_of_a_hub_no_rank_has_reached_and_running_once_one_has(tmp_path, capsys):
    log = tmp_path / "run.jsonl"
    proc, info = hub_alone(log, "alone-run")
    try:
        # Its hub has said where the run is (no rank yet): what a rank at the wrong port leaves.
        wait_for(lambda: "progress" in (registry.entry("alone-run") or {}), 4 * registry.PROGRESS_EVERY_S)
        head, rows, notes = _rows(capsys)
        row = rows["alone-run"]
        assert _column(head, row, "JOB", "INGEST") == "waiting", row
        assert _column(head, row, "AGE", "SAMPLES/S").split()[-1] == "-", row  # (its STEP read 0)
        assert any(n.startswith(WAITING_NOTE) and "PARDASH_ENDPOINT" in n for n in notes), notes
        # Ranks reach it: the hub says so at its next word, and `ps` no longer says "waiting".
        live_ranks(info, "alone-run", log, steps=3)

        def reached() -> bool:
            return sum(((registry.entry("alone-run") or {}).get("progress") or {}).get("ranks", {}).values()) == 2

        wait_for(reached, 4 * registry.PROGRESS_EVERY_S)
        head, rows, notes = _rows(capsys)
        # (its ranks send no heartbeat: the hub soon holds them silent)
        assert _column(head, rows["alone-run"], "JOB", "INGEST") in ("running", "1 silent", "2 silent"), rows
        assert not any(n.startswith(WAITING_NOTE) for n in notes), notes
    finally:
        proc.kill()
        proc.wait(30)


def test_ps_says_waiting_only_of_the_runs_no_rank_has_reached(capsys):
    now = time.time()
    nobody = {"step": 0, "steps": None, "samples_per_s": 0.0, "ranks": {}, "stopped": 0, "t": now}
    registry.register({"run_id": "empty-run", "pid": os.getpid(), **ENDS, "curve": True, "progress": nobody})
    some = {"step": 5, "samples_per_s": 10.0, "ranks": {"running": 2}, "t": now}
    registry.register({"run_id": "busy-run", "pid": os.getpid(), **ENDS, "curve": False, "progress": some})
    # A hub quiet for a while says so whether ranks reached it or not.
    quiet = {**nobody, "t": now - 125}
    registry.register({"run_id": "still-run", "pid": os.getpid(), **ENDS, "curve": False, "progress": quiet})
    head, rows, notes = _rows(capsys)
    assert _column(head, rows["empty-run"], "JOB", "INGEST") == "waiting", rows
    assert _column(head, rows["busy-run"], "JOB", "INGEST") == "running", rows
    assert _column(head, rows["still-run"], "JOB", "INGEST") == "quiet 2m05s", rows
    assert [n.split(":")[0] for n in notes] == ["JOB waiting", "KEYS curve"], notes

