"""The test session's ranks (and scripts), forked from a process that has imported torch already.

Every rank torchrun starts in the tests (``python -u -m pardash.trainer.autorun SCRIPT`` or
``-m pardash.trainer.train``) imported torch and, through torch.optim, its compiler: about 3 s
of a core each, most of the suite's CPU on a 2-core machine. torchrun runs ``$PYTHON_EXEC`` for
a rank's python, and the tests point it at a shim (written by tests/rank_forks.py) that asks
this server to fork the rank from a process that imported those once. The rank is then a real
process of its own, in a session of its own as torchrun makes it, with the shim's standard
streams, environment, working directory and arguments, running the same module in the same
way; the shim stands in for it before torchrun: it passes torchrun's signals on to the rank's
process group, and exits as the rank did (its code, or killed by its signal). A rank whose
environment differs in what an interpreter or torch reads as it starts (PYTHON*, OMP_*, ...)
or whose command is another, or that runs in other Linux namespaces (a second node's network),
is run by the real python instead, as without this.

It runs ``python -u -m MODULE ARGS`` and ``python -u SCRIPT ARGS`` (a test's script run alone,
through ``$PYTHON_EXEC`` too). ``python rank_zygote.py SOCKET``: serves until its standard input ends (the test worker that
started it is gone). One request a connection: a JSON header and the shim's fds 0-2; replies
``{"pid": N}`` then ``{"code": C}`` or ``{"signal": S}``, or ``{"exec": true}`` (run the real
python). A shim gone before its rank (torchrun killed it) takes the rank's session with it."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys

STARTUP = ("PYTHON", "OMP_", "MKL_", "KMP_", "LD_", "TORCH_", "TORCHDYNAMO", "TORCHINDUCTOR", "PYTORCH", "CUDA", "MALLOC", "GLIBC")
"""What an interpreter, its allocator, OpenMP or torch read as they start or import: a rank's
value of any of these unlike this server's is run by the real python."""
MAX_REQUEST = 1 << 22


READ_LATER = ("PYTHONUNBUFFERED", "PYTHON_EXEC", "TORCH_NCCL_", "TORCHINDUCTOR_CACHE_DIR")
"""Of those, what is read later (torchrun sets TORCH_NCCL_ASYNC_ERROR_HANDLING for its ranks,
NCCL reads it when a group is made; Inductor sets its cache folder in a process that compiled,
a test worker, and reads it when it compiles) or stands for a rank's ``-u``."""


def startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP) and not k.startswith(READ_LATER)}


def namespaces() -> dict[str, int]:
    """This process's Linux namespaces: a rank in others (a test's second node, in a network
    namespace of its own) is run by the real python, where it was started."""
    out = {}
    for name in ("net", "mnt", "pid", "uts", "ipc", "user"):
        try:
            out[name] = os.stat(f"/proc/self/ns/{name}").st_ino
        except OSError:
            pass
    return out


class Become(Exception):
    """Raised in a forked child: unwind the server's frames and run the rank at top level."""

    def __init__(self, module: bool, argv: list[str]) -> None:
        self.module, self.argv = module, argv
        """``-m MODULE ARGS`` (``module``) or ``SCRIPT ARGS``: ``[MODULE or SCRIPT, *ARGS]``."""


def serve(listener: socket.socket, before: dict[str, str]) -> None:
    """``before``: this process's environment before its imports (torch sets some variables
    as it is imported, CUDA_MODULE_LOADING: set again in each rank, as its import would)."""
    mine = startup_env(before)
    spaces = namespaces()
    log = listener.getsockname() + ".log"
    set_by_imports = {k: v for k, v in os.environ.items() if k not in before}
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(wake_r, selectors.EVENT_READ, "child")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
    ranks: dict[int, socket.socket] = {}  # pid -> its shim's connection
    shims: dict[socket.socket, int] = {}
    while True:
        for key, _ in sel.select():
            what = key.data
            if what == "stdin":
                if not os.read(sys.stdin.fileno(), 4096):
                    for pid in ranks:
                        _kill(pid)
                    return
            elif what == "child":
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
                _reap(ranks, shims, sel)
            elif what == "accept":
                conn, _ = listener.accept()
                try:
                    request, fds = _receive(conn)
                except (OSError, ValueError):
                    conn.close()
                    continue
                argv, env = request["argv"], request["env"]
                theirs = startup_env(env)
                # (what it runs: -m's module, or a script; another flag, or a script on stdin, not)
                runs = argv[2:3] if argv[:2] == ["-u", "-m"] else argv[1:2] if argv[:1] == ["-u"] else []
                if not runs or runs[0].startswith("-") or theirs != mine or request.get("ns") != spaces:
                    differ = sorted(k for k in {*theirs, *mine} if theirs.get(k) != mine.get(k))
                    differ += ["namespaces"] if request.get("ns") != spaces else []
                    with open(log, "a") as f:  # (why a rank was not forked: a folder beside the socket)
                        print(f"ran by python: {argv[:3]} {differ}", file=f)
                    _say(conn, {"exec": True})
                    for fd in fds:
                        os.close(fd)
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    listener.close()
                    for other in shims:
                        other.close()
                    conn.close()
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    # As a rank torchrun starts has them, whatever this server inherited (the
                    # suite run as a background job, SIGINT ignored, or under nohup): torchrun
                    # handles these itself, so its workers' exec leaves them at their defaults,
                    # and Python makes SIGINT a KeyboardInterrupt. A forked rank ignored a Ctrl-C.
                    signal.signal(signal.SIGINT, signal.default_int_handler)
                    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
                        signal.signal(sig, signal.SIG_DFL)
                    os.close(wake_r)
                    os.close(wake_w)
                    os.setsid()
                    for target, fd in enumerate(fds):
                        os.dup2(fd, target)
                    for fd in fds:
                        if fd > 2:
                            os.close(fd)
                    os.environ.clear()
                    os.environ.update({**set_by_imports, **env})
                    os.chdir(request["cwd"])
                    raise Become(argv[1] == "-m", argv[2:] if argv[1] == "-m" else argv[1:])
                for fd in fds:
                    os.close(fd)
                ranks[pid] = conn
                shims[conn] = pid
                sel.register(conn, selectors.EVENT_READ, "shim")
                _say(conn, {"pid": pid})
                _reap(ranks, shims, sel)
            else:  # a shim's connection: it ended (torchrun killed it) before its rank
                conn = key.fileobj
                sel.unregister(conn)  # (its end read: no more to wait for on it)
                pid = shims.get(conn)
                if pid is not None and pid in ranks:
                    _kill(pid)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    msg, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 3)
    size = int.from_bytes(msg[:4], "big")
    data = msg[4:]
    while len(data) < size:
        more = conn.recv(size - len(data))
        if not more:
            raise ValueError("short request")
        data += more
    if len(fds) != 3:
        raise ValueError("three fds expected")
    return json.loads(data), fds


def _say(conn: socket.socket, reply: dict) -> None:
    try:
        conn.sendall((json.dumps(reply) + "\n").encode())
    except OSError:
        pass


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _reap(ranks: dict[int, socket.socket], shims: dict[socket.socket, int], sel: selectors.BaseSelector) -> None:
    while ranks:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = ranks.pop(pid, None)
        if conn is None:
            continue
        shims.pop(conn, None)
        if os.WIFSIGNALED(status):
            _say(conn, {"signal": os.WTERMSIG(status)})
        else:
            _say(conn, {"code": os.waitstatus_to_exitcode(status)})
        try:
            sel.unregister(conn)
        except KeyError:  # (its shim ended first)
            pass
        conn.close()


def _warm() -> None:
    """Imports a rank makes before its script's first line, made once here as a rank makes
    them (the collector off, what they made frozen: see pardash.trainer.startup)."""
    import importlib

    from pardash.trainer import startup

    with startup.imports():
        for name in ("torch", "torch._dynamo", "torch.distributed", "torch.optim"):
            importlib.import_module(name)


if __name__ == "__main__":
    # (listening first: a rank that asks while the imports are made waits for them)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sys.argv[1])
    listener.listen(64)
    before = dict(os.environ)
    _warm()
    try:
        serve(listener, before)
        sys.exit(0)
    except Become as rank:
        sys.argv, module = rank.argv, rank.module
    # (out of the handler: an exception of the rank's own has no "during handling" of this)
    import runpy

    # An exception the rank leaves uncaught prints as python's, but for the frames at its top:
    # this file's, and runpy's where the rank is a script (autorun prints a script's own,
    # without them).
    if module:
        sys.path[0] = os.getcwd()  # (python -m puts the working directory first)
        runpy._run_module_as_main(sys.argv[0], alter_argv=True)  # (what python -m calls)
    else:
        sys.path[0] = os.path.dirname(os.path.realpath(sys.argv[0]))  # (python SCRIPT: its folder first)
        runpy.run_path(sys.argv[0], run_name="__main__")
