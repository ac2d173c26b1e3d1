"""Review 246, finding 4: a live run's registry entry that goes (the folder emptied by a cleaner
or another session while the run trained) is written again by its hub, private as before; a
hub that removed its own entry at its end never brings it back."""

from __future__ import annotations

import json
import os
import shutil
import signal

import pytest
from helpers import file_mode, hub_alone, wait_for

from pardash import cli
from pardash.telemetry import registry
from pardash.telemetry.client import resolve

pytestmark = pytest.mark.timeout(120)

ENDS = {"ingest": "tcp://127.0.0.1:1", "updates": "tcp://127.0.0.1:2", "snapshot": "tcp://127.0.0.1:3"}
BACK_S = 4 * registry.PROGRESS_EVERY_S
"""Long enough for a hub's periodic update to come round, on a busy machine."""


def _listed(capsys) -> list[str]:
    assert cli.main(["ps", "--json"]) == 0
    return [e["run_id"] for e in json.loads(capsys.readouterr().out)]


def test_a_live_runs_entry_removed_is_written_again_by_its_hub(tmp_path, capsys):
    proc, info = hub_alone(tmp_path / "run.jsonl", "lost-entry")
    d = registry.registry_dir()
    path = d / "lost-entry.json"
    try:
        wait_for(lambda: "progress" in (registry.entry("lost-entry") or {}), BACK_S)  # (its first update made)
        before = registry.entry("lost-entry")
        assert _listed(capsys) == ["lost-entry"]
        # The entry alone goes (what review 246 did by hand): `ps` said "no live runs" from then
        # on, and `attach lost-entry` "no live run", while the hub served.
        path.unlink()
        wait_for(path.exists, BACK_S)
        again = registry.entry("lost-entry")
        assert {k: again[k] for k in ("run_id", "pid", "started", "ingest", "updates", "snapshot", "log")} == {
            k: before[k] for k in ("run_id", "pid", "started", "ingest", "updates", "snapshot", "log")
        }
        assert file_mode(path) == 0o600
        assert _listed(capsys) == ["lost-entry"]
        assert resolve("lost-entry")["ingest"] == info["ingest"]  # `pardash attach lost-entry` finds it
        # The whole folder goes (a cache cleaner): made again, 0700, the entry 0600 in it.
        shutil.rmtree(d)
        wait_for(path.exists, BACK_S)
        assert (file_mode(d), file_mode(path)) == (0o700, 0o600)
        assert _listed(capsys) == ["lost-entry"]
        # Its hub stopped: the entry goes with it, and stays gone.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not path.exists()
    finally:
        proc.kill()
        proc.wait(30)


def test_an_entry_removed_at_its_hubs_end_is_not_written_again():
    # The hub's periodic update after its own unregister (another thread's, or a late frame)
    # must not bring back the entry of a run that has ended.
    path = registry.register({"run_id": "ended-run", "pid": os.getpid(), **ENDS})
    registry.update("ended-run", progress={"step": 1})
    assert registry.entry("ended-run")["progress"] == {"step": 1}
    registry.unregister(path)
    registry.update("ended-run", progress={"step": 2})
    assert not path.exists()


def test_an_entry_of_another_process_is_not_written_again(tmp_path):
    # Only a hub brings back its own entry: one registered for another pid, gone, stays gone.
    path = registry.register({"run_id": "others-run", "pid": os.getppid(), **ENDS})
    path.unlink()
    registry.update("others-run", progress={"step": 1})
    assert not path.exists()


def test_an_own_entry_is_not_written_into_a_registry_named_since(tmp_path, monkeypatch):
    # The registry's folder named otherwise since the entry was written (PARDASH_REGISTRY_DIR
    # changed): the old entry is not planted in the new folder.
    path = registry.register({"run_id": "moved-run", "pid": os.getpid(), **ENDS})
    path.unlink()
    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(tmp_path / "elsewhere"))
    registry.update("moved-run", progress={"step": 1})
    assert not (tmp_path / "elsewhere").exists() and not path.exists()
