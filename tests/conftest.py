"""Shared fixtures: a private run registry, a hub in a thread, rank identities."""

from __future__ import annotations

import os
import signal
import sys
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable

# One intra-op thread for every process the tests start (and their own torch): torch's default
# is a thread per core, so a single-process run kept both cores of a 2-core machine spinning, a
# third more CPU than one thread for the same steps, taken from the tests beside it. (The
# launch sets it itself for several local ranks of the bundled trainer; a test of that unsets it.)
os.environ.setdefault("OMP_NUM_THREADS", "1")

# A run registry for what runs outside any test's own (a module's or the session's shared
# launch, made before the test's fixture sets one): never the user's ~/.cache/pardash/runs.
if "PARDASH_REGISTRY_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["PARDASH_REGISTRY_DIR"] = _REGISTRY = tempfile.mkdtemp(prefix="pardash-test-registry-")
    atexit.register(shutil.rmtree, _REGISTRY, ignore_errors=True)

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # Started in the background by a shell without job control, which ignores SIGINT for the
    # job, and every process started from here would inherit that: a launch stopped "with
    # Ctrl-C" by a test would go on. A handler of our own is undone by exec in each child.
    # (Before the rank server starts: it inherited SIGINT ignored, and so did each rank forked
    # from it, a script's own Ctrl-C "never stopped" it.)
    signal.signal(signal.SIGINT, signal.default_int_handler)


# The ranks torchrun starts are forked from a process that imported torch once (3 s of a core
# a rank less; tests/scripts/rank_zygote.py says how). PARDASH_TEST_FORK_RANKS=0: each its own.
import rank_forks  # noqa: E402

rank_forks.start()

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Each worker's in-process tests import torch and its compiler (the hooks' tests compile
    # models): once here, as a rank does, with the collector off and then frozen (the
    # trainer's startup module says why), so the collections while the tests run leave them be.
    import importlib

    from pardash.trainer import startup

    with startup.imports():
        importlib.import_module("torch._dynamo")

# Property tests draw the same examples every run (derandomize), so the suite passes or fails
# the same way on every clone; no example database is written into the checkout. To search
# wider, as a person hunting a bug does: HYPOTHESIS_PROFILE=explore draws new examples each run
# (run it in a loop; a failure prints the example's blob for @reproduce_failure).
settings.register_profile("suite", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))

def pytest_collection_modifyitems(config, items):
    # pytest-xdist hands tests out in this order. The real-process tests (marked slow) are spread
    # over the first 70% of it, each followed by its share of the short ones: run together
    # (all of them first), four launches at once on 2 cores cost 4% more CPU than they do
    # apart; last, one long test kept one worker busy while the others idled.
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    rest = [item for item in items if item.get_closest_marker("slow") is None]
    share = int(len(rest) * 0.7 / len(slow)) if slow else 0
    items[:] = [mine for k, first in enumerate(slow) for mine in (first, *rest[k * share:(k + 1) * share])]
    items.extend(rest[len(slow) * share:])


@pytest.fixture(autouse=True)
def _no_compile_left_over():
    # What a test compiled stays counted in the process (torch._dynamo.reset() keeps Dynamo's
    # counters), and a process that compiled keeps the global module hooks (see
    # trainer.watching._compiled): a later test in the same worker would read that.
    yield
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is not None:
        utils.counters.clear()


@pytest.fixture(autouse=True)
def _private_registry(tmp_path_factory, monkeypatch):
    # Every test (and every process it starts) sees its own run registry; whatever of those
    # processes outlives the test (a test failed before stopping its job, and the job's
    # supervisor is detached from the launch on purpose) is killed, so it cannot slow the
    # tests after it.
    registry = str(tmp_path_factory.mktemp("registry"))
    monkeypatch.setenv("PARDASH_REGISTRY_DIR", registry)
    started = time.time()
    yield
    left = _kill_processes_of(registry, started)
    if left:
        warnings.warn(f"killed {len(left)} process(es) the test left running: {'; '.join(left)[:300]}")


SUPERVISOR_TAIL_S = 20.0
"""How long a job's supervisor is given to end by itself once its launch has gone."""


def _alive(p) -> bool:
    import psutil

    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _launch_alive(supervisor) -> bool:
    """Whether the process that started ``supervisor`` (its launch; a hub's supervisor) is still there."""
    import psutil

    try:
        parent = supervisor.parent()
        return parent is not None and parent.pid != 1 and "pardash" in " ".join(parent.cmdline())
    except psutil.Error:
        return False


def _kill_processes_of(registry: str, since: float) -> list[str]:
    """Kill the processes started since ``since`` with ``registry`` as their run registry (the
    environment every process a test starts inherits); returns their command lines."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "create_time"]):
        if p.pid == os.getpid() or (p.info["create_time"] or 0) < since - 1:
            continue
        try:
            if p.environ().get("PARDASH_REGISTRY_DIR") == registry:
                cmd = " ".join(p.cmdline()[1:4])
                if "multiprocessing" not in cmd:  # this process's own helpers (resource tracker)
                    found.append((p, cmd))
                    found += [(c, " ".join(c.cmdline()[1:4])) for c in p.children(recursive=True)]
        except (psutil.Error, OSError):
            continue
    found = list({p.pid: (p, cmd) for p, cmd in found}.values())  # a child may be matched twice
    # A job's supervisor whose launch has gone (a TUI launch the test has seen out) stops the
    # hub and ends by itself, a second or two later: its end is waited for, bounded, not
    # killed (under the TUI it no longer holds the terminal, whose end the tests wait for).
    # (so does a launched hub whose supervisor was killed: it stops once its ranks are done)
    tails = [p for p, cmd in found if ("pardash.trainer.supervisor" in cmd or "pardash.telemetry.hub" in cmd) and not _launch_alive(p)]
    if tails:
        psutil.wait_procs(tails, timeout=SUPERVISOR_TAIL_S)
        found = [(p, cmd) for p, cmd in found if _alive(p)]
    for p, _ in found:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs([p for p, _ in found], timeout=5)
    return [cmd for _, cmd in found]


@pytest.fixture
def hub(tmp_path):
    """A real hub (real sockets) serving in a thread; stopped and closed after the test."""
    from helpers import serving
    from pardash.telemetry.hub import Hub

    with serving(Hub(run_id="test-run", log_path=str(tmp_path / "telemetry.jsonl"))) as h:
        yield h


@pytest.fixture
def fresh_api():
    """The explicit API's module with no state of an earlier test's (reporter, hooks, marks),
    and none left for the next."""
    from pardash.telemetry import api

    api._reset_for_tests()
    yield api
    api._reset_for_tests()


@pytest.fixture
def keys(tmp_path):
    """A CURVE key folder as `pardash keys` makes it (the hub's and a client's pairs)."""
    from pardash.telemetry import security

    d = tmp_path / "curve"
    security.make_keys(d)
    return d


# -- shared launches -------------------------------------------------------------------------
# Launching torchrun ranks costs seconds of a 2-core machine before the first step, so the
# tests that only read a finished run's log and output (launch, wire format, memory accounting,
# the trainer learning) share one launch per strategy instead of starting their own.
SHARED_DATA = ["--dataset-size", "256"]
SHARED_RUNS = {
    # 256 samples / 2 ranks / 16 a batch = 8 steps an epoch; 40 steps is 5 epochs.
    "ddp": ["--strategy", "ddp", "--steps", "40"],
    # Gradient accumulation: 2 micro-batches a step, 4 steps an epoch. Under 19 steps: no
    # straggler window completes, so test_launch's "no straggler" holds under any load.
    "fsdp": ["--strategy", "fsdp", "--steps", "12", "--grad-accum", "2"],
}


class SharedRun:
    """One finished ``pardash launch --headless`` on 2 gloo ranks: its process, log and messages."""

    def __init__(self, strategy: str, base: Path) -> None:
        import subprocess

        from helpers import pardash_env
        from pardash.telemetry.logreader import load_log

        self.strategy = strategy
        self.args = SHARED_RUNS[strategy]
        self.dir = base
        self.log = base / "run.jsonl"
        cmd = [PY, "-m", "pardash", "launch", "--headless", "--log", str(self.log), "--nproc", "2",
               "--runs-dir", str(base / "runs"), "--every", "1", "--log-every", "5", *self.train_args]  # fmt: skip
        # (the DDP run's ranks each their own interpreter, as a user's are: the tests' other
        # ranks are forked from one that imported torch already, tests/scripts/rank_zygote.py)
        real = {"PYTHON_EXEC": None} if strategy == "ddp" else {}
        env = pardash_env(PARDASH_REGISTRY_DIR=str(base / "registry"), **real)
        self.proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=base)
        self.messages, self.stats = load_log(self.log) if self.log.exists() else ([], None)

    @property
    def train_args(self) -> list[str]:
        """The trainer's flags that decide its losses: another launch given them (and the same
        --nproc) trains on the same curve."""
        return [*SHARED_DATA, *self.args]

    @property
    def steps(self) -> int:
        return int(self.args[self.args.index("--steps") + 1])


@pytest.fixture(scope="session")
def shared_run(tmp_path_factory):
    """``shared_run("ddp")`` or ``("fsdp")``: the session's launch of that strategy, made once."""
    made: dict[str, SharedRun] = {}

    def get(strategy: str) -> SharedRun:
        if strategy not in made:
            made[strategy] = SharedRun(strategy, tmp_path_factory.mktemp(f"shared-{strategy}"))
        run = made[strategy]
        assert run.proc.returncode == 0, run.proc.stdout[-2000:] + run.proc.stderr[-3000:]
        return run

    return get
