"""The run registry: one small JSON file per live hub, so `pardash ps` and `pardash attach`
find running jobs.

Files live in ``$PARDASH_REGISTRY_DIR``, else ``$XDG_RUNTIME_DIR/pardash``, else
``~/.cache/pardash/runs``; they are readable by their owner only. An entry whose hub pid is gone
is stale and is ignored (and removed) by :func:`live_runs`.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Iterable


def registry_dir() -> Path:
    env = os.environ.get("PARDASH_REGISTRY_DIR")
    if env:
        return Path(env)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "pardash"
    return Path.home() / ".cache" / "pardash" / "runs"


def new_run_id() -> str:
    """Sortable and unique: UTC time plus 4 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


def register(info: dict) -> Path:
    """Write ``info`` (run_id, endpoints, pid, ...) as a 0600 JSON file; returns its path."""
    from .security import make_private_dir  # loads zmq: not on every `pardash` start

    d = make_private_dir(registry_dir())
    path = d / f"{info['run_id']}.json"
    started = time.time()
    try:  # a hub restarted for a live run: the run is as old as it was
        with open(path) as fh:
            started = float(json.load(fh).get("started", started))
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    entry = {"started": started, **info}
    # A fresh temporary name, never an existing file or a link someone planted there: the
    # entry is 0600 whatever the folder's mode or umask.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(entry, fh)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def entry(run_id: str) -> dict | None:
    """A run's entry as its hub last wrote it, whether that hub lives or not (a supervisor
    restarting it reads where the log went)."""
    try:
        found = json.loads((registry_dir() / f"{run_id}.json").read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def update(run_id: str, **fields: object) -> None:
    """Merge fields into a run's entry (no-op if it is gone, damaged or cannot be written: the
    listing is a convenience, never a reason for a hub to stop)."""
    path = registry_dir() / f"{run_id}.json"
    try:
        entry = json.loads(path.read_text())
        if isinstance(entry, dict):
            entry.update(fields)
            register(entry)
    except (OSError, ValueError):
        pass


def unregister(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists (ours or, without permission to signal it, someone's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def job_result(entry: dict) -> dict | None:
    """The launcher's result of the entry's job (its exit code, whether it was stopped), once
    the job has ended; None while it runs, or for a hub no launcher started. A launch whose TUI
    is still open keeps its hub, and so its entry, up after the job ended."""
    run_dir = entry.get("run_dir")
    if not isinstance(run_dir, str) or not run_dir:
        return None
    try:
        found = json.loads((Path(run_dir) / "result.json").read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


_ENDPOINTS = ("ingest", "updates", "snapshot")


def _usable(entry: object) -> bool:
    """An entry a viewer can use: a hub's, with its run id, pid, start time and endpoints
    (a damaged or foreign file in the folder is passed over, never a crash of ``ps``)."""
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("run_id"), str)
        and isinstance(entry.get("pid"), int)
        and isinstance(entry.get("started"), (int, float))
        and all(isinstance(entry.get(k), str) for k in _ENDPOINTS)
    )


def live_runs(*, prune: bool = True) -> list[dict]:
    """Entries whose hub is alive, newest first. With ``prune``, a dead hub's entry is removed
    as it is passed over, unless the launcher's supervisor that started that hub lives: it
    reads where the dead hub's log went to restart it (and `pardash ps` or an attach between
    the death and the restart took that away). A reader that only asks (report, export) keeps
    every entry."""
    d = registry_dir()
    out = []
    if not d.is_dir():
        return out
    for path in d.glob("*.json"):
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not _usable(entry):
            continue
        if not pid_alive(entry["pid"]):
            if prune and not _supervised(entry):
                unregister(path)
            continue
        out.append(entry)
    out.sort(key=lambda e: e["started"], reverse=True)
    return out


def _supervised(entry: dict) -> bool:
    """Whether the launcher's supervisor that started the entry's hub is alive (it restarts a
    hub that died, or removes the entry when the job is over)."""
    pid = entry.get("supervisor_pid")
    return isinstance(pid, int) and pid > 0 and pid_alive(pid)


def recording(log: str, run_ids: Iterable[str] = ()) -> dict | None:
    """The live run still recording ``log``: the entry of a hub alive on this machine that
    writes that file (its path or another path to it) or serves one of ``run_ids`` (a copy of
    its log), and whose job has not ended (a launch's TUI left open keeps its hub up after the
    job). None when no such run is listed: on this machine, the log's hub has stopped."""
    ids = set(run_ids)
    for e in live_runs(prune=False):
        if job_result(e) is not None:
            continue
        if e["run_id"] in ids or same_file(e.get("log"), log):
            return e
    return None


def same_file(a: object, b: str) -> bool:
    """True when ``a`` and ``b`` are paths to one file (a link, a relative path to it); False
    when either is not there, or ``a`` is no path (an entry's missing or damaged field)."""
    if not isinstance(a, str) or not a:
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def find(run_id: str | None = None) -> dict | None:
    """The live run with this id (or id prefix); the newest live one when None."""
    runs = live_runs()
    if run_id is None:
        return runs[0] if runs else None
    for e in runs:
        if e.get("run_id") == run_id:
            return e
    matches = [e for e in runs if str(e.get("run_id", "")).startswith(run_id)]
    return matches[0] if len(matches) == 1 else None
