"""Ranks forked from a warm process (tests/scripts/rank_zygote.py says why and how): the
server, one per test process, and the shim torchrun runs in place of python ($PYTHON_EXEC).
``PARDASH_TEST_FORK_RANKS=0`` turns it off (every rank its own interpreter, as without the
tests); a test that needs that (a rank's process tree, its parent) unsets PYTHON_EXEC."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile

SHIM = '''#!{python} -S
# torchrun's python for a rank in pardash's tests: see tests/scripts/rank_zygote.py.
import json, os, signal, socket, sys
argv = sys.argv[1:]
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ["PARDASH_TEST_ZYGOTE"])
    ns = {{}}
    for name in ("net", "mnt", "pid", "uts", "ipc", "user"):
        try:
            ns[name] = os.stat("/proc/self/ns/" + name).st_ino
        except OSError:
            pass
    body = json.dumps({{"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "ns": ns}}).encode()
    socket.send_fds(s, [len(body).to_bytes(4, "big") + body], [0, 1, 2])
    replies = s.makefile("rb")
    first = json.loads(replies.readline() or b'{{"exec": true}}')
except (OSError, KeyError, ValueError):
    first = {{"exec": True}}
if "pid" not in first:
    os.execv({python!r}, [{python!r}, *argv])
pid = first["pid"]

def forward(sig, frame):
    try:
        os.killpg(pid, sig)
    except OSError:
        pass

for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(sig, forward)
line = replies.readline()
end = json.loads(line) if line else {{"code": 1}}
if "signal" in end:
    if end["signal"] != signal.SIGKILL:
        signal.signal(end["signal"], signal.SIG_DFL)
    os.kill(os.getpid(), end["signal"])
os._exit(end.get("code", 1) & 0xFF)
'''


def start() -> None:
    """Start this process's rank server and point the ranks its tests start at it (through
    the environment their launches inherit)."""
    if os.environ.get("PARDASH_TEST_FORK_RANKS") == "0" or "PYTHON_EXEC" in os.environ:
        return
    folder = tempfile.mkdtemp(prefix="pardash-ranks-")
    shim = os.path.join(folder, "python")
    with open(shim, "w") as f:
        f.write(SHIM.format(python=sys.executable))
    os.chmod(shim, 0o755)
    path = os.path.join(folder, "zygote.sock")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "rank_zygote.py")
    env = dict(os.environ)
    env.pop("PARDASH_ENDPOINT", None)
    server = subprocess.Popen([sys.executable, "-u", script, path], stdin=subprocess.PIPE, env=env,
                              start_new_session=True)  # fmt: skip
    os.environ["PYTHON_EXEC"] = shim
    os.environ["PARDASH_TEST_ZYGOTE"] = path

    def stop() -> None:
        if server.stdin is not None:
            server.stdin.close()  # (its loop ends at the end of its input)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)
