"""The run registry: one small JSON file per live hub, so `pardash ps` and `pardash attach`
find running jobs.

Files live in ``$PARDASH_REGISTRY_DIR``, else ``$XDG_RUNTIME_DIR/pardash``, else
``$XDG_CACHE_HOME/pardash/runs`` (``~/.cache``); they are readable by their owner only, and only one's own are read (in
a folder others may write, theirs could point a viewer at anything). An entry whose hub is gone
(its pid ended, or is another process's now) is stale and is ignored (and removed) by
:func:`live_runs`.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import stat
import threading
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
    # $XDG_CACHE_HOME where it is set (an absolute path, as the XDG spec asks: a relative one
    # is ignored), as every other tool on the machine takes it (a HOME on a small quota or
    # read-only, the cache elsewhere); else ~/.cache.
    cache = os.environ.get("XDG_CACHE_HOME")
    base = Path(cache) if cache and os.path.isabs(cache) else Path.home() / ".cache"
    return base / "pardash" / "runs"


def new_run_id() -> str:
    """Sortable and unique: UTC time plus 4 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


_own: dict[str, tuple[Path, dict]] = {}
"""The entries this process wrote of its own hub (its pid's), by run id, with their paths, as
last written: :func:`update` writes one again when it is gone from the folder (a cleaner, or
another session, emptied it while the run trained: `pardash ps` and `pardash attach RUN` lost
a live run until its hub restarted). Dropped by :func:`unregister`."""
_own_lock = threading.Lock()
"""Held while an own entry is written again or removed: a hub removing its entry at its end
is never followed by an update that brings it back."""


def register(info: dict) -> Path:
    """Write ``info`` (run_id, endpoints, pid, ...) as a 0600 JSON file in a 0700 folder (made
    again if it is gone); returns its path."""
    from .security import make_private_dir  # loads zmq: not on every `pardash` start

    d = make_private_dir(registry_dir())
    path = d / f"{info['run_id']}.json"
    started = time.time()
    before = _read_own(path)
    try:  # a hub restarted for a live run: the run is as old as it was
        started = float(before.get("started", started)) if isinstance(before, dict) else started
    except (ValueError, TypeError):
        pass
    entry = {"started": started, **info}
    if created := _created(info.get("pid")):
        entry["pid_created"] = created
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
    if entry.get("pid") == os.getpid():
        _own[str(entry["run_id"])] = (path, entry)
    return path


def _read_own(path: Path) -> object:
    """The JSON in ``path`` when it is a file of this user's (None otherwise, and when it cannot
    be read): never through a link, and never waiting on a pipe planted under an entry's name."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return json.loads(fh.read())
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def entry(run_id: str) -> dict | None:
    """A run's entry as its hub last wrote it, whether that hub lives or not (a supervisor
    restarting it reads where the log went)."""
    found = _read_own(registry_dir() / f"{run_id}.json")
    return found if isinstance(found, dict) else None


PROGRESS_EVERY_S = 5.0
"""How often a hub writes where its run is (``progress``) into its entry."""


def update(run_id: str, **fields: object) -> None:
    """Merge fields into a run's entry. An entry of this process's own hub that is gone from
    the folder (or damaged) is written again, as last written, folder and all; another's is
    left gone. A no-op when it cannot be written: the listing is a convenience, never a reason
    for a hub to stop."""
    with _own_lock:
        found = entry(run_id)
        if found is None:
            own = _own.get(run_id)
            if own is None or own[0] != registry_dir() / f"{run_id}.json":
                return  # (not this process's, unregistered, or the registry named another folder since)
            found = dict(own[1])
        found.update(fields)
        try:
            register(found)
        except OSError:
            pass


def unregister(path: Path) -> None:
    """Remove an entry (its hub's end); an own entry is not written again after it."""
    with _own_lock:
        for run_id, (own_path, _) in list(_own.items()):
            if own_path == path:
                del _own[run_id]
        try:
            path.unlink()
        except OSError:
            pass


def pid_alive(pid: int) -> bool:
    """True while a process with this pid runs (ours or, without permission to signal it,
    someone's). A zombie (ended, its exit not yet collected by its parent: a simulate's hub
    killed with -9) runs no more, though signalling it still succeeds."""
    import psutil  # (not on every `pardash` start)

    if not isinstance(pid, int) or pid <= 0:  # 0 and -1 signal whole process groups
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # (a zombie psutil cannot read is one of these too)
        return False
    except psutil.Error:
        return True


CREATED_SLACK_S = 1.0
"""How far a process's start time may read apart between two looks (Linux derives it from the
boot time, which can move by a second)."""


def _created(pid: object) -> float | None:
    """When the process ``pid`` started (psutil's create_time), or None."""
    import psutil

    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OverflowError):
        return None


def hub_alive(entry: dict) -> bool:
    """Whether the entry's hub runs: its pid is alive and is still the process that registered
    (it started when the entry says), or, for an entry that does not say, a pardash hub of that
    run by its command line. A pid given since to another program (a `sleep`) is no hub. Where
    the process cannot be looked at (another user's), it is taken at its word."""
    import psutil

    pid = entry.get("pid")
    if not isinstance(pid, int) or not pid_alive(pid):
        return False
    try:
        proc = psutil.Process(pid)
        created = entry.get("pid_created")
        if isinstance(created, (int, float)) and not isinstance(created, bool) and abs(proc.create_time() - created) <= CREATED_SLACK_S:
            return True
        # (no start time said, or another: a process started since, or the same one whose start
        # reads otherwise now that the wall clock was stepped, NTP or a VM's resync: its command
        # line tells)
        return _hub_command(proc.cmdline(), str(entry.get("run_id", "")))
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def _hub_command(line: list[str], run_id: str) -> bool:
    """Whether a command line is a pardash hub's for ``run_id``: one a launch or a simulate
    started (``python -m pardash.telemetry.hub --run-id ID``), or ``pardash hub``, whose run id
    may have been made up (then it is not on the line)."""
    named = run_id in line or f"--run-id={run_id}" in line
    if "pardash.telemetry.hub" in line:
        return named
    for i, arg in enumerate(line[:-1]):
        if os.path.basename(arg) == "pardash" and line[i + 1] == "hub":
            return named or not any(a.startswith("--run-id") for a in line)
    return False


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


def reachable(endpoint: str) -> str:
    """``endpoint`` as other machines reach it: one bound to every address (0.0.0.0, ::)
    names this machine instead (tcp://0.0.0.0:PORT is no address for a rank on another node)."""
    host, sep, port = endpoint.removeprefix("tcp://").rpartition(":")
    if sep and host in ("0.0.0.0", "[::]", "::", "*"):
        return f"tcp://{socket.gethostname()}:{port}"
    return endpoint


def unusable() -> str:
    """Why no run can ever be listed in this user's registry, in one line: its folder cannot be
    read, or cannot be made (a read-only or missing HOME: runs launched so are not listed
    either); '' where it can (a wait for a run to appear there may end)."""
    d = registry_dir()
    try:
        made = d.is_dir()
        there = None if made else next((p for p in d.absolute().parents if p.exists()), None)
    except OSError as exc:  # (a folder on the way this user may not enter)
        return f"the run registry {d} cannot be read ({exc.strerror or exc}): set PARDASH_REGISTRY_DIR to a folder of yours"
    if not made and there is not None and (not there.is_dir() or not os.access(there, os.W_OK | os.X_OK)):
        return (f"the run registry {d} cannot be made ({there} is not a writable folder), so runs launched here are not "
                "listed either: set PARDASH_REGISTRY_DIR to a writable folder, or attach with the tcp://HOST:PORT a hub prints")
    return ""


def why_none_listed(run_id: str = "") -> str:
    """Why this user is shown no live run (``run_id``: none of that id), where the registry says
    more than that none runs: its folder cannot be made (a read-only or missing HOME: runs
    launched so are not listed either), or the runs there are other users' (each sees only
    their own); '' otherwise. A second user read "no live runs" of another's, and a read-only
    HOME the same with no word why (review 279)."""
    if why := unusable():
        return why
    d = registry_dir()
    if not d.is_dir():
        return ""
    theirs = []
    for path in d.glob("*.json"):
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid != os.getuid() and (not run_id or path.stem.startswith(run_id)):
            theirs.append(path)
    if not theirs:
        return ""
    n = len(theirs)
    what = f"run {run_id!r} is" if run_id and n == 1 else f"{n} run{'s' if n != 1 else ''} in {d} {'are' if n != 1 else 'is'}"
    return (f"{what} another user's: each user's `pardash ps` and attach see only their own runs (attach with the "
            "tcp://HOST:PORT its hub printed, if you may)")


def live_runs(*, prune: bool = True) -> list[dict]:
    """This user's entries whose hub is alive (:func:`hub_alive`), newest first. With ``prune``,
    a dead hub's entry is removed
    as it is passed over, unless the launcher's supervisor that started that hub lives: it
    reads where the dead hub's log went to restart it (and `pardash ps` or an attach between
    the death and the restart took that away). A reader that only asks (report, export) keeps
    every entry."""
    d = registry_dir()
    out = []
    try:
        if not d.is_dir():
            return out
        paths = list(d.glob("*.json"))
    except OSError:  # (a folder on the way this user may not enter: ps says so, see why_none_listed)
        return out
    for path in paths:
        entry = _read_own(path)  # (another user's is passed over, never removed)
        if not _usable(entry):
            continue
        if not hub_alive(entry):
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


def serving(path: str) -> list[dict]:
    """The live runs (a hub alive on this machine, of this user's) whose log is the file
    ``path`` (its path or another path to it), or whose run folder, or its log's folder, is the
    folder ``path``: what `pardash attach` takes a log or a run folder for, as report, replay
    and export take them. A launch's TUI left open keeps its hub, and so its run, up after the
    job ended: it is served still (an attach by its id shows it too). A folder may hold the logs
    of several (two runs given --log in one folder)."""
    folder = os.path.isdir(path)
    found = []
    for e in live_runs(prune=False):
        log = e.get("log")
        log = None if log == os.devnull else log  # (a simulate's that keeps none)
        if folder:
            if same_file(e.get("run_dir"), path) or (isinstance(log, str) and log and same_file(os.path.dirname(log), path)):
                found.append(e)
        elif same_file(log, path):
            found.append(e)
    return found


def serving_here(run_id: str, address: str) -> dict | None:
    """The live entry of run ``run_id`` whose hub takes ranks at ``address`` (tcp://HOST:PORT
    of its ingest, as a viewer attached by address was given it), when HOST is this machine:
    the job's own entry (its supervisor, run folder and log), which an attach by id reads. None
    for a hub elsewhere (a run of the same id on another machine is another job), a port that
    is not this run's hub's, or a run not listed here."""
    if not run_id:
        return None
    e = entry(run_id)
    if e is None or not _usable(e) or not hub_alive(e):
        return None
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    _, _, own_port = str(e["ingest"]).rpartition(":")
    if not port or port != own_port or not _this_machine(host.strip("[]")):
        return None
    return e


def _this_machine(host: str) -> bool:
    """Whether ``host`` (a name or an address) is one of this machine's addresses."""
    import psutil

    if host in ("localhost", socket.gethostname()):
        return True
    try:
        wanted = {ai[4][0] for ai in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False
    own = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
    return any(a.startswith("127.") or a == "::1" or a in own for a in wanted)


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


def command_words(value: object) -> list[str] | None:
    """A run's ``command`` (what each rank runs, a list of words: supervisor.user_command) as an
    entry, a result or a hub's meta holds it; None where it is not one (absent, or not a list of
    strings: an older launch's, a hand-edited file)."""
    if isinstance(value, list) and value and all(isinstance(w, str) for w in value):
        return value
    return None
