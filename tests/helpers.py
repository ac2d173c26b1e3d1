"""Plain helpers for tests (import as `from helpers import ...`; conftest modules are not
importable by name once a sub-folder has its own conftest)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile


def free_ports(n: int = 3) -> list[int]:
    """``n`` consecutive ports free on 127.0.0.1 (a hub takes PORT..PORT+2), drawn above the
    kernel's ephemeral range where the system leaves room (quiet_ports): a port there is not
    taken meanwhile as another test's connecting socket's own before the test binds it (one let
    go in the ephemeral range was busy again by a launch's check in a CI run of 6 workers)."""
    import random
    import socket

    from pardash.telemetry.spawn import quiet_ports

    quiet = quiet_ports()
    for i in range(100):
        if quiet is not None and i < 50:
            base = random.choice(quiet[: len(quiet) - n])
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                base = s.getsockname()[1]
            if base + n > 65536:
                continue
        socks = []
        try:
            for port in range(base, base + n):
                socks.append(socket.socket())
                socks[-1].bind(("127.0.0.1", port))
            return list(range(base, base + n))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} free ports in a row")


def file_mode(path) -> int:
    """The permission bits of ``path`` (0o600, 0o700)."""
    import stat

    return stat.S_IMODE(os.stat(path).st_mode)


def identity(rank: int, world: int = 2, node: int = 0):
    from pardash.telemetry.env import RankIdentity

    return RankIdentity(rank=rank, local_rank=rank, world_size=world, node=node, host=f"node{node}", restart=0)


def wait_for(pred, timeout_s: float = 30.0, poll_s: float = 0.02, poll=None):
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


@contextlib.contextmanager
def serving(hub):
    """``hub`` (a :class:`~pardash.telemetry.hub.Hub`) serving in a thread of its own while the
    block runs; then stopped, its thread joined and the hub closed, whatever the block raised.
    (Sockets on the hub's context must be closed inside the block: closing the hub ends it.)"""
    import threading

    thread = threading.Thread(target=hub.serve, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        hub.stop()
        thread.join(30)
        hub.close()


def wait_logged(hub) -> None:
    """Wait until a hub serving in another thread has flushed to its log every record it has
    taken (its frames flush the log; a flush from the test's thread would race the hub's)."""
    import json

    def flushed() -> bool:
        data = hub.recorder.path.read_bytes() if hub.recorder.path.exists() else b""
        if not data.endswith(b"\n"):
            return False  # nothing yet, or read in the middle of the writer's write: a line cut
        last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        return bool(last) and json.loads(last).get("hseq", 0) >= hub.core.hseq

    wait_for(flushed)


def hub_alone(log, run: str) -> tuple[subprocess.Popen, dict]:
    """A real ``pardash hub`` recording ``log`` as run ``run``, listed in the test's run
    registry (its entry is written before its first line), and its info; the caller kills it."""
    proc = subprocess.Popen([sys.executable, "-m", "pardash", "hub", "--run-id", run, "--log", str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=pardash_env())  # fmt: skip
    return proc, json.loads(proc.stdout.readline())


class KeyedHub:
    """A hub process with the CURVE keys of ``keys`` (a folder), as :func:`keyed_hub` runs it:
    ``info`` its endpoints, ``friend`` a viewer holding those keys, which hears the hub's notes;
    once it has stopped, ``returncode`` and ``err`` (its stderr)."""

    def __init__(self, proc: subprocess.Popen, info: dict, friend) -> None:
        self.proc, self.info, self.friend = proc, info, friend
        self.viewers = [friend] if friend is not None else []
        self.returncode: int | None = None
        self.err = ""

    def viewer(self, curve):
        """A viewer of the hub with the keys ``curve``, closed with the hub."""
        from pardash.telemetry.client import HubClient

        v = HubClient(self.info["updates"], self.info["snapshot"], curve=curve)
        self.viewers.append(v)
        return v

    def said(self, words: str) -> bool:
        """Whether a note the friend has heard holds ``words``."""
        from pardash.telemetry import schema

        return any(words in e.message for e in self.friend.state.events if isinstance(e, schema.Event))


@contextlib.contextmanager
def keyed_hub(tmp_path, keys, run: str):
    """A hub run alone (``pardash.telemetry.hub``) with the keys folder ``keys``, its friend
    synced; on leaving, every viewer closed and the hub stopped (SIGTERM), its stderr kept."""
    from pardash.telemetry.client import HubClient
    from pardash.telemetry.spawn import spawn_hub

    proc, info = spawn_hub(
        ["--run-id", run, "--no-registry", "--curve-dir", str(keys), "--log", str(tmp_path / "run.jsonl")],
        stderr=subprocess.PIPE, text=True, env=pardash_env(),
    )  # fmt: skip
    hub = KeyedHub(proc, info, None)
    try:
        hub.friend = HubClient(info["updates"], info["snapshot"], curve=keys)
        hub.viewers.append(hub.friend)
        assert hub.friend.wait_synced(20.0)
        yield hub
    finally:
        for v in hub.viewers:
            v.close()
        proc.terminate()
        try:
            _, hub.err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # (never left behind)
            proc.kill()
            _, hub.err = proc.communicate()
        hub.returncode = proc.returncode


def live_ranks(info: dict, run: str, log, steps: int = 3, *, wait: bool = True) -> None:
    """Two ranks saying hello and taking ``steps`` steps through the hub ``info`` names, and
    not ending: a run still going, its records in the hub's ``log`` (once it holds them, with
    any it held before; ``wait=False``: not waited for)."""
    from pathlib import Path

    from pardash.telemetry.reporter import Reporter

    log = Path(log)
    before = log.read_bytes().count(b'"kind":"step"') if log.exists() else 0
    reps = [Reporter(info["ingest"], run=run, identity=identity(r, 2), heartbeat_s=0) for r in (0, 1)]
    for r in reps:
        r.hello(strategy="ddp")
    for step in range(1, steps + 1):
        for r in reps:
            r.step(step=step, loss=1.0 / step, step_s=0.01, samples=4)
    for r in reps:
        r.close()
    if wait:
        wait_for(lambda: log.exists() and log.read_bytes().count(b'"kind":"step"') == before + 2 * steps)


def terminate(proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """SIGTERM to ``proc`` if it runs, and wait for it; SIGKILL where it outlives ``timeout_s``."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def pardash_env(**extra: str | None) -> dict[str, str]:
    """This process's environment less its hub endpoint, with ``extra`` (None: the variable unset)."""
    env = dict(os.environ)
    env.pop("PARDASH_ENDPOINT", None)
    for name, value in extra.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def launched_report(tmp_path, *script: str, nproc: int = 2) -> dict:
    """The report of ``pardash launch --headless --nproc NPROC -- SCRIPT...`` run in ``tmp_path``
    (which must end with 0)."""
    from pardash.telemetry.report import build_report

    log = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--nproc", str(nproc), "--headless", "--log", str(log),
         "--runs-dir", str(tmp_path / "runs"), "--", *script],
        capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return build_report(str(log))


class TerminalOutput:
    """Reads everything a process writes to the terminal ``master`` (a pty's master end) on a
    thread of its own, so a TUI never blocks on a full terminal; :meth:`text` once it is done."""

    def __init__(self, master: int) -> None:
        import threading

        self.master = master
        self.data = bytearray()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the terminal's other end closed
                return
            if not chunk:
                return
            self.data.extend(chunk)

    def done(self, timeout_s: float = 60.0) -> bytes:
        """All of it, once the other end has closed (bounded; closes ``master``)."""
        self._thread.join(timeout_s)
        os.close(self.master)
        return bytes(self.data)


class TrainerForks:
    """``python -m pardash.trainer.train ARGV`` (the trainer's flags) as a process forked from
    one that has imported the trainer already (tests/scripts/trainer_forks.py): the same run,
    its own process, less the 5 s of CPU its imports take. One server per test worker, started
    at its first run. (Import-order faults a fresh interpreter would show are for the tests
    that launch the trainer under torchrun to find.)"""

    def __init__(self) -> None:
        self._server: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        if self._server is None or self._server.poll() is not None:
            # Not the test's registry in its environment: the fixture that ends what a test
            # left running would take it for one of the test's processes.
            env = pardash_env(PARDASH_REGISTRY_DIR=None, OMP_NUM_THREADS="1")
            script = os.path.join(os.path.dirname(__file__), "scripts", "trainer_forks.py")
            self._server = subprocess.Popen([sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            text=True, env=env, start_new_session=True)  # fmt: skip
            atexit.register(self._stop, self._server)
        return self._server

    @staticmethod
    def _stop(server: subprocess.Popen) -> None:
        if server.stdin is not None:
            server.stdin.close()  # its loop ends at the end of its input
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    def _reply(self, server: subprocess.Popen, timeout_s: float) -> dict:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], timeout_s)
        line = server.stdout.readline() if ready else ""
        if not line:
            raise TimeoutError if ready == [] else RuntimeError(f"the trainer's fork server ended ({server.poll()})")
        return json.loads(line)

    def run(self, argv: list[str], env: dict[str, str], timeout: float = 240, cwd: str | None = None) -> subprocess.CompletedProcess:
        server = self._start()
        assert server.stdin is not None
        with tempfile.TemporaryDirectory() as tmp:
            out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
            request = {"argv": argv, "env": env, "cwd": cwd or os.getcwd(), "stdout": out, "stderr": err}
            server.stdin.write(json.dumps(request) + "\n")
            server.stdin.flush()
            pid = self._reply(server, 60)["pid"]
            try:
                code = self._reply(server, timeout)["code"]
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                self._reply(server, 60)
                raise subprocess.TimeoutExpired(argv, timeout) from None
            with open(out, errors="replace") as o, open(err, errors="replace") as e:
                return subprocess.CompletedProcess([sys.executable, "-m", "pardash.trainer.train", *argv], code, o.read(), e.read())


trainer_forks = TrainerForks()
