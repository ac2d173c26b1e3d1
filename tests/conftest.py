"""Shared fixtures: a private run registry, a hub in a thread, rank identities."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


@pytest.fixture(autouse=True)
def _private_registry(tmp_path_factory, monkeypatch):
    # Every test (and every process it starts) sees its own run registry.
    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(tmp_path_factory.mktemp("registry")))


@pytest.fixture
def hub(tmp_path):
    """A real hub (real sockets) serving in a thread; stopped and closed after the test."""
    from pardash.telemetry.hub import Hub

    h = Hub(run_id="test-run", log_path=str(tmp_path / "telemetry.jsonl"))
    t = threading.Thread(target=h.serve, daemon=True)
    t.start()
    yield h
    h.stop()
    t.join(10)
    h.close()
