"""A TUI launch whose job ended by itself says its last line from a fresh client synced with the
hub (launch._caught_up). The frames it watched noted that the log's disk filled and the hub went
on writing in full elsewhere (the client's ``log_trouble``); the fresh client started without it,
and the last line's "LOG (...: log continued in full at NEW)" was never said (review 339)."""

from __future__ import annotations

from types import SimpleNamespace

from pardash import launch
from pardash.telemetry.client import HubClient
from pardash.telemetry.recorder import CONTINUED_AT

from helpers import hub_alone, terminate


def test_the_last_line_still_says_where_the_log_went_on_after_the_client_is_caught_up(tmp_path):
    log = tmp_path / "run.jsonl"
    hub, info = hub_alone(log, "caught-up")
    try:
        ends = {"updates": info["updates"], "snapshot": info["snapshot"]}
        Client = launch._launch_client(HubClient)
        seen = Client(ends["updates"], ends["snapshot"], run_id="caught-up")
        assert seen.wait_synced(30.0)
        # What the frames said as the run went: the log's disk filled, the hub went on in full
        # where it writes now
        seen.log_trouble = ("/data/run.jsonl", "cannot write /data/run.jsonl: No space left on device")
        seen.close()  # (the app closes its client as it ends)
        job = SimpleNamespace(spec=SimpleNamespace(remote_hub=False, run_id="caught-up", curve_dir=None), endpoints=ends)
        fresh = launch._caught_up(job, seen)
        try:
            assert fresh is not seen
            said = launch._hear_the_logs_end(job, fresh)
        finally:
            fresh.close()
    finally:
        terminate(hub)
    assert said == f"/data/run.jsonl (No space left on device: {CONTINUED_AT}{log})", said
