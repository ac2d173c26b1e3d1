"""A rank whose telemetry reaches no hub says so: a PUSH socket is never answered, so a wrong
PARDASH_ENDPOINT, a hub not started or already gone, or no PARDASH_ENDPOINT at all, let a whole
run train unrecorded without a word. Real torchrun ranks, sockets and hubs."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import zmq

from helpers import identity, pardash_env, trainer_forks, wait_for
from pardash.telemetry.reporter import Reporter

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
NO_HUB = "tcp://127.0.0.1:9"
"""Where no hub listens (the discard port, closed here)."""
NEVER = f"pardash: rank 0 never reached a hub at {NO_HUB} (is `pardash hub` running there?): nothing of this rank was recorded"
UNWATCHED = "pardash: PARDASH_ENDPOINT is not set: this run is unwatched (start `pardash hub` and export what it prints, or "


def _torchrun(*cmd: str, env: dict, cwd=ROOT, nproc: int = 2) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *cmd],
        capture_output=True, text=True, timeout=240, env=env, cwd=cwd,
    )  # fmt: skip


def _said(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("pardash")]


def test_a_rank_that_never_reaches_its_hub_says_so_once_at_its_end_and_trains_as_before():
    # The reviewer's run: 300 steps of DDP, exit 0, and not a word that nothing was recorded.
    env = pardash_env(PARDASH_ENDPOINT=NO_HUB, PARDASH_RUN_ID="x", PARDASH_HUB_WAIT_S="3600")
    proc = _torchrun("-m", "pardash.trainer.train", "--strategy", "ddp", "--steps", "12", "--log-every", "4", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done: 12 steps" in proc.stdout
    assert _said(proc.stderr) == [NEVER], proc.stderr[-3000:]  # rank 0 alone, once


class _Stderr:
    """What the test's process has written to stderr so far, read as it comes."""

    def __init__(self, capfd) -> None:
        self.capfd = capfd
        self.text = ""

    def lines(self) -> list[str]:
        self.text += self.capfd.readouterr().err
        return _said(self.text)


def test_a_rank_that_reaches_its_hub_says_nothing_and_one_that_does_not_says_it_once(hub, capfd, monkeypatch):
    monkeypatch.setenv("PARDASH_HUB_WAIT_S", "3600")  # (the line while it waits: the next test)
    # A short job (closed right after its hello: the handshake may still be on its way).
    for endpoint in (hub.ingest_endpoint, NO_HUB):
        rep = Reporter(endpoint, run="test-run", identity=identity(0), heartbeat_s=0.05)
        rep.hello(strategy="ddp")
        for i in range(1, 4):
            rep.step(step=i, loss=1.0, step_s=0.01)
        rep.close(linger_ms=0)
        said = _said(capfd.readouterr().err)
        assert said == ([] if endpoint != NO_HUB else [NEVER]), said


def test_a_rank_kept_waiting_says_so_once_and_again_when_its_hub_comes(capfd, monkeypatch):
    # A run of hours should not learn at its end that it went unrecorded; a hub started late
    # takes what waited for it, and the rank says so.
    monkeypatch.setenv("PARDASH_HUB_WAIT_S", "0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"tcp://127.0.0.1:{port}"
    out = _Stderr(capfd)
    rep = Reporter(endpoint, run="r", identity=identity(0), heartbeat_s=0.05)
    rep.hello(strategy="ddp")
    rep.step(step=1, loss=1.0, step_s=0.01)
    wait_for(lambda: out.lines())
    (waiting,) = out.lines()
    assert re.fullmatch(
        rf"pardash: rank 0 has not reached a hub at {endpoint} after \d+ s \(is `pardash hub` running there\?\); training "
        r"goes on, its telemetry waits for one \(up to 10,000 messages, then dropped\)", waiting
    ), waiting
    pull = zmq.Context.instance().socket(zmq.PULL)
    try:
        pull.bind(endpoint)
        wait_for(lambda: len(out.lines()) == 2)
        assert out.lines()[1].startswith(f"pardash: rank 0 reached the hub at {endpoint} after ")
        assert pull.poll(30_000)  # what waited arrives
        rep.close(linger_ms=0)
    finally:
        pull.close(0)
    assert len(out.lines()) == 2  # no "never reached" at its end


def test_autorun_without_an_endpoint_says_so_on_rank_0_and_nothing_when_telemetry_is_off(tmp_path):
    script = str(ROOT / "tests" / "scripts" / "argv_probe.py")
    proc = _torchrun("-m", "pardash.trainer.autorun", script, env=pardash_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _said(proc.stderr) == [f"{UNWATCHED}use `pardash launch -- {script}`)"], proc.stderr[-3000:]
    assert proc.stdout.count('"name": "__main__"') == 2  # both ranks ran it
    # PARDASH_TELEMETRY=0: off on purpose, nothing to say. (One rank: rank 0 is the one that
    # would say it, as the run above shows.)
    off = _torchrun("-m", "pardash.trainer.autorun", script, env=pardash_env(PARDASH_TELEMETRY="0"), cwd=tmp_path, nproc=1)
    assert off.returncode == 0, off.stderr[-3000:]
    assert _said(off.stderr) == [], off.stderr[-3000:]
    assert off.stdout.count('"name": "__main__"') == 1  # (it ran)


def test_the_bundled_trainer_without_an_endpoint_says_so(tmp_path):
    # (One process, forked from one that imported the trainer: that rank 0 alone says it is
    # the autorun test's above, on two ranks under torchrun; the words are the trainer's own.)
    proc = trainer_forks.run(["--strategy", "single", "--steps", "2"], env=pardash_env(), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _said(proc.stderr) == [f"{UNWATCHED}use `pardash launch` with these flags)"], proc.stderr[-3000:]
