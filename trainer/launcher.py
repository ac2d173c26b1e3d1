"""Start a job: a hub, torchrun with the ranks, and a supervisor that outlives the viewer.

``pardash launch`` (the foreground: TUI or headless printer) starts one *supervisor* process in
its own session. The supervisor starts the hub process, waits for its endpoints, starts
``python -m torch.distributed.run`` with PARDASH_ENDPOINT/PARDASH_RUN_ID in the ranks'
environment, waits for it, and exits with its exit code. So the viewer can quit, detach or
crash without stopping the job or losing the log; SIGTERM to the supervisor stops the job
(torchrun first, then the hub after a final flush). The supervisor is
:mod:`pardash.trainer.supervisor`; here is the foreground's side: the launch spec made and its
log checked, the supervisor started, and the job as the foreground sees it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from pardash.telemetry import registry
from pardash.telemetry.logreader import is_log
from pardash.telemetry.recorder import LOG_MODE, gz_name_refusal, holds_records
from pardash.telemetry.spawn import exit_code, read_line
from pardash.trainer.supervisor import (
    HUB_READY_TIMEOUT_S, TRAINER_COMMAND, LaunchError, LaunchSpec, Supervisor, exit_status, result_fields_of_node, stopper_text,
)  # fmt: skip


@dataclass
class Job:
    """A launched job as the foreground sees it."""

    spec: LaunchSpec
    supervisor: subprocess.Popen
    endpoints: dict
    result_fd: int = -1
    """The read end of the supervisor's pipe: after its endpoints, its result comes down it too."""
    _said: bytes = b""
    _result: dict | None = None

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    def poll(self) -> int | None:
        return self.supervisor.poll()

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Stop the job: ``signum`` to its supervisor, which says who stopped it by it (SIGINT:
        you, at the launch's Ctrl-C or a Stop chosen in its TUI; SIGTERM: `kill`, a scheduler)."""
        if self.supervisor.poll() is None:
            self.supervisor.send_signal(signum)

    def wait(self, timeout: float | None = None) -> int:
        return self.supervisor.wait(timeout)

    def result(self) -> dict:
        """The supervisor's result (exit code, stopped, hub restarts) once the job has ended:
        result.json, or the line it sent down its pipe (a full disk has no file); {} before."""
        try:
            return json.loads(Path(self.spec.run_dir, "result.json").read_text())
        except (OSError, ValueError):
            pass
        while self._result is None and self.result_fd >= 0 and select.select([self.result_fd], [], [], 0)[0]:
            chunk = os.read(self.result_fd, 65536)
            self._said += chunk
            if b"\n" in self._said:
                with contextlib.suppress(ValueError):
                    found = json.loads(self._said.split(b"\n", 1)[0])
                    self._result = found if isinstance(found, dict) else {}
            if not chunk or self._result is not None:
                os.close(self.result_fd)
                self.result_fd = -1
        return self._result or {}

    def wait_result(self, timeout: float) -> int:
        """The job's exit code once it has one: its supervisor has written its result (it
        then keeps the hub up until the viewer that started it is gone, so that one must not
        wait for it to exit), or has exited. Raises ``subprocess.TimeoutExpired``."""
        end = time.monotonic() + timeout
        while True:
            code = self.supervisor.poll()
            if code is not None:
                return code
            done = self.result()
            if "code" in done:
                return int(done["code"])
            if time.monotonic() >= end:
                raise subprocess.TimeoutExpired(self.supervisor.args, timeout)
            time.sleep(0.05)


def lost_supervisor_result(run_id: str, code: int, log: str | None, *, gone: str, stopped_by: int = 0, hub_restarts: int = 0,
                           remote_hub: str = "", node_rank: int = 0, curve_dir: str = "", command: object = None,
                           cwd: object = None) -> dict:  # fmt: skip
    """A job's result as its supervisor would have written it (its fields), from the viewer that
    saw the job to its end after the supervisor was killed outright: ``code`` is that viewer's
    word for the end (0 every rank finished, 1 one failed, 128 + signal stopped), torchrun's own
    code being unknown to it; ``gone``: what became of the supervisor ("killed by SIGKILL");
    ``stopped_by``: the signal that stopped the job from there (0: it ended by itself);
    ``remote_hub``: on a node > 0, node 0's hub, which keeps the log (``log`` is then null);
    ``command`` and ``cwd``: what each rank ran and where (supervisor.user_command), as the
    supervisor's result says them (left out where not known)."""
    result = {"run_id": run_id, "code": code, "stopped": bool(stopped_by), "log": log, "hub_restarts": hub_restarts,
              "supervisor_gone": gone, "written_by": f"pid {os.getpid()}, which followed the job to its end without its supervisor"}  # fmt: skip
    if registry.command_words(command):
        result["command"] = command
    if isinstance(cwd, str) and cwd:
        result["cwd"] = cwd
    if remote_hub:
        result.update(result_fields_of_node(remote_hub, node_rank, curve_dir))
    if stopped_by:
        result["stop_t"] = time.time()
        result["stopper"] = stopper_text(stopped_by)
    return result


def write_result(run_dir: str, result: dict) -> bool:
    """Write a job's ``result.json`` for a supervisor that could not (killed outright before
    the job ended): whole or not at all, and never over one already there (the supervisor's,
    written as it ended). True once written, False when one was there; raises OSError when it
    cannot be written (a full disk)."""
    folder = Path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / "result.json"
    tmp = folder / f"result.json.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(result))
        try:
            os.link(tmp, final)  # fails where a result is there already, which stays as it is
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: created only if absent, all the same
            try:
                fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            try:
                os.write(fd, tmp.read_bytes())
            except OSError:
                os.close(fd)
                final.unlink(missing_ok=True)
                raise
            os.close(fd)
    finally:
        tmp.unlink(missing_ok=True)
    return True


RUN_DIR_MODE = 0o750
"""A run folder's permissions (less the umask), as its log's (recorder.LOG_MODE): the ranks'
output (their loss lines), result.json and torchrun's files in it were readable by every user
of a shared node."""


def start(spec: LaunchSpec, *, output=None) -> Job:
    """Start the supervisor (which starts hub and torchrun); returns once the hub is up. One
    that did not start takes back its run folder (a fresh id's) when nothing was written there."""
    Path(spec.run_dir).mkdir(RUN_DIR_MODE, parents=True, exist_ok=True)
    r, w = os.pipe()
    argv = [sys.executable, "-m", "pardash.trainer.supervisor", "--ready-fd", str(w), json.dumps(asdict(spec))]
    sup = None
    try:
        with _signals_deferred():
            sup = subprocess.Popen(
                argv, pass_fds=(w,), stdin=subprocess.DEVNULL, stdout=output, stderr=output, start_new_session=True
            )
        os.close(w)
        w = -1
        line = read_line(r, HUB_READY_TIMEOUT_S + 5)
    except KeyboardInterrupt:
        # Ctrl-C before the job is up (say, a node > 0 waiting for node 0's hub): stop the
        # supervisor too, rather than leave a job running that nobody watches.
        if sup is not None:
            sup.terminate()
        for fd in (r, w):
            if fd >= 0:
                os.close(fd)
        raise
    info = json.loads(line) if line else {"error": f"the supervisor exited with code {exit_code(sup)}"}
    if "error" in info:
        os.close(r)
        if sup.poll() is None:
            sup.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            sup.wait(10)  # (what it had open is closed)
        _remove_empty(spec.run_dir)
        raise LaunchError(info["error"])
    _take_run_folder(spec, info.pop("run_id", spec.run_id), info.pop("run_dir", spec.run_dir))
    return Job(spec=spec, supervisor=sup, endpoints=info, result_fd=r)


def _take_run_folder(spec: LaunchSpec, run_id: str, run_dir: str) -> None:
    """The run's id and folder as the supervisor says them once the job is up: on a node > 0,
    node 0's hub's id and the folder renamed after it (RUN_ID-nodeN), with the ranks' output in it."""
    if run_dir != spec.run_dir and spec.output.startswith(spec.run_dir + os.sep):
        spec.output = run_dir + spec.output[len(spec.run_dir) :]
    spec.run_id, spec.run_dir = run_id, run_dir


def _remove_empty(folder: str) -> None:
    """Remove ``folder`` where it holds only empty files and folders (a run that never started:
    its output file, torchrun's log folder); anything written there stays, and the folder with it."""
    for parent, dirs, files in os.walk(folder, topdown=False):
        for name in files:
            path = os.path.join(parent, name)
            with contextlib.suppress(OSError):
                if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) == 0:
                    os.remove(path)
        with contextlib.suppress(OSError):
            os.rmdir(parent)  # only if empty


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold a Ctrl-C or SIGTERM that comes while the supervisor is being started, then let it
    through: one that landed inside Popen (a loaded machine takes its time to fork and exec)
    raised before the launch had the supervisor's handle to stop it with, and the job it
    started trained on with nobody to watch or stop it. (Main thread only: where Python runs
    signal handlers.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    sigs = (signal.SIGINT, signal.SIGTERM)
    before = {sig: signal.signal(sig, lambda n, _f: held.append(n)) for sig in sigs}
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, sigs)  # (one that comes meanwhile waits for its own handler)
        try:
            for sig, handler in before.items():
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
        for sig in held:
            signal.raise_signal(sig)  # its own handler, as if it came now


def new_spec(*, log_path: str | None, runs_dir: str = "runs", **kw) -> LaunchSpec:
    """A LaunchSpec with a fresh run id and its folder; checks the log path is writable."""
    run_id = registry.new_run_id()
    run_dir = os.path.abspath(os.path.join(runs_dir, run_id))
    if log_path and (log_path.endswith(("/", os.sep)) or os.path.isdir(log_path)):
        # (a folder's name made a plain file of that name, next to the folder the user meant)
        raise LaunchError(f"--log {log_path} is a folder; give a file: --log {os.path.join(log_path, 'telemetry.jsonl')}")
    if log_path and (refusal := gz_name_refusal(log_path)):
        raise LaunchError(refusal)
    log = os.path.abspath(log_path) if log_path else os.path.join(run_dir, "telemetry.jsonl")
    if log_path:
        check_run_dir(run_dir)  # (the log's own check makes it otherwise)
    if not kw.get("node_rank"):  # nodes > 0 start no hub: node 0's records the run
        # (the flag to mend is the one that placed the log: it said "pass a writable --log
        # PATH" of a --runs-dir /proc/x)
        check_writable(log, fix="--log PATH" if log_path else "--runs-dir DIR (or a --log PATH)")
    return LaunchSpec(run_id=run_id, log_path=log, run_dir=run_dir, **kw)


def check_run_dir(run_dir: str) -> None:
    """Raise LaunchError unless the run's folder (the ranks' output, torchrun's files, the result)
    could be made, making nothing: a --log elsewhere, from a read-only folder, ended in a
    traceback of its mkdir and an empty log left behind (review 279)."""
    path = Path(run_dir).absolute()
    try:
        there = next(p for p in (path, *path.parents) if p.exists())  # (the root, at worst)
    except OSError as exc:  # (a folder on the way this user may not enter: exists() raises)
        raise LaunchError(f"cannot make the run's folder {run_dir}: {exc.strerror or exc}; pass a writable --runs-dir DIR") from None
    if not there.is_dir():
        raise LaunchError(f"cannot make the run's folder {run_dir}: {there} is a file; pass a writable --runs-dir DIR")
    if there != path and not os.access(there, os.W_OK | os.X_OK):
        raise LaunchError(f"cannot make the run's folder {run_dir}: {there} is not writable; pass a writable --runs-dir DIR "
                          "(the ranks' output and the run's result go there)")  # fmt: skip


def check_writable(path: str, fix: str = "--log PATH") -> None:
    """Raise LaunchError unless ``path`` can be created or appended to, and holds no run yet
    (:func:`recorder.holds_records`); ``fix``: the flag that gives another place."""
    if holds_records(path):
        if not is_log(path):
            raise LaunchError(f"{path} is not a pardash log (no record in its first lines); pass a new --log PATH")
        raise LaunchError(f"the log {path} already holds a run; pass a new --log PATH (or remove that file)")
    p = Path(path)
    try:
        p.parent.mkdir(RUN_DIR_MODE, parents=True, exist_ok=True)  # (the run's folder, for a log of its own)
        # Created here with the log's own mode (the hub appends to it): never writable by others.
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, LOG_MODE))
    except (FileExistsError, NotADirectoryError):  # mkdir: a file stands where a folder of the path must be
        file = next((str(a) for a in reversed(p.parents) if a.exists() and not a.is_dir()), str(p.parent))
        raise LaunchError(f"cannot write the log {path}: {file} is a file, not a folder; pass a writable {fix}") from None
    except OSError as exc:
        raise LaunchError(f"cannot write the log {path}: {exc.strerror or exc}; pass a writable {fix}") from None


__all__ = ["Job", "LaunchError", "LaunchSpec", "Supervisor", "TRAINER_COMMAND", "check_run_dir", "check_writable", "exit_status", "lost_supervisor_result",
           "new_spec", "start", "write_result"]
