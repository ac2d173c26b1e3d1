"""Shared fixtures: a private run registry, a hub in a thread, rank identities."""

from __future__ import annotations

import os
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


def identity(rank: int, world: int = 2, node: int = 0):
    from pardash.telemetry.env import RankIdentity

    return RankIdentity(rank=rank, local_rank=rank, world_size=world, node=node, host=f"node{node}", restart=0)


def wait_for(pred, timeout_s: float = 20.0, poll_s: float = 0.02, poll=None):
    """Poll until ``pred()`` is true; fails the test after a generous bound (not a timing claim)."""
    import time

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if poll is not None:
            poll()
        if pred():
            return True
        time.sleep(poll_s)
    raise AssertionError(f"condition not met within {timeout_s} s")


def pardash_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PARDASH_ENDPOINT", None)
    env.update(extra)
    return env
