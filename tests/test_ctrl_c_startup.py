"""A Ctrl-C that lands in a headless launch's first polls of the hub (a real SIGINT, sent by a
sitecustomize hook on PYTHONPATH at a chosen moment): the launch stops the job, says so, exits
130, and leaves no process of it behind. It died with a traceback (exit 1), the supervisor,
hub, torchrun and rank training on with nobody to watch them."""

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap

from helpers import pardash_env
from pardash.trainer import jobprocs

GATE = "PARDASH_TEST_HOOK"

# The launch's first import of asyncio (pyzmq's zmq.utils.monitor pulls it in) gets a SIGINT,
# which leaves asyncio half-imported: importing it again raises NameError. The hook notes that
# it fired (in the file $PARDASH_TEST_HOOK names).
AT_ASYNCIO = """
import os, sys, signal
mark = os.environ.pop("PARDASH_TEST_HOOK", "")
if mark and "launch" in sys.argv:
    class _F:
        def find_spec(self, name, path=None, target=None):
            if name == "asyncio.unix_events":
                sys.meta_path.remove(self)
                open(mark, "w").close()
                os.kill(os.getpid(), signal.SIGINT)
            return None
    sys.meta_path.insert(0, _F())
"""

# The launch's hub client: its first poll gets a SIGINT, and every poll after raises NameError
# (as one through a module a Ctrl-C left half-imported did): the check before the stop fails,
# and so does following the job as it stops.
BROKEN_POLL = """
import importlib.util, os, sys, signal
mark = os.environ.pop("PARDASH_TEST_HOOK", "")
if mark and "launch" in sys.argv:
    class _F:
        def find_spec(self, name, path=None, target=None):
            if name != "pardash.launch":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module
            def exec_module(module):
                run(module)
                made = module._launch_client
                def launch_client(base):
                    cls = made(base)
                    polls = []
                    def poll(self, *a, **k):
                        polls.append(1)
                        if len(polls) == 1:
                            open(mark, "w").close()
                            os.kill(os.getpid(), signal.SIGINT)
                            return cls.__mro__[1].poll(self, *a, **k)
                        raise NameError("name 'base_events' is not defined")
                    cls.poll = poll
                    return cls
                module._launch_client = launch_client
            spec.loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, _F())
"""


def _launch(tmp_path, hook: str, *, signal_when_running: bool) -> tuple[int, str, dict]:
    """Run a launch of a job that cannot end by itself (100,000 steps) with ``hook``; when the
    hook never fires, a Ctrl-C is sent once the job trains (its first progress line). Returns
    the exit code, what it wrote, whether the hook fired and the runs folder."""
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(textwrap.dedent(hook))
    mark = tmp_path / "fired"
    env = pardash_env(PYTHONPATH=os.pathsep.join([str(tmp_path / "hook"), os.environ.get("PYTHONPATH", "")]),
                      **{GATE: str(mark)}, OMP_NUM_THREADS="1")  # fmt: skip
    runs = tmp_path / "runs"
    out = tmp_path / "out.txt"
    # (to a file: the job's supervisor holds the launch's output too, so a pipe would not end
    # when the launch does)
    with open(out, "w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pardash", "launch", "--strategy", "single", "--headless", "--steps", "100000",
             "--every", "0.2", "--runs-dir", str(runs)],
            stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
        )  # fmt: skip
    try:
        for _ in range(3000):  # (a launch that never ends fails the test, killed, its job with it)
            if proc.poll() is not None:
                break
            if signal_when_running and "step" in out.read_text() and not mark.exists():
                proc.send_signal(signal.SIGINT)
                signal_when_running = False
            try:
                proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out.read_text(), {"fired": mark.exists(), "runs": runs}


def _left_of(runs) -> list:
    """The job's processes (supervisor, hub, torchrun, rank) still running, killed here (the
    test then fails): no job is left training after a test."""
    left = []
    for run_dir in runs.iterdir() if runs.is_dir() else ():
        left += [p for p in jobprocs.psutil.process_iter() if _of_run(p, run_dir.name)]
    for p in left:
        with contextlib.suppress(jobprocs.psutil.Error):
            p.kill()
    return left


def _of_run(p, run_id: str) -> bool:
    try:
        return p.status() != jobprocs.psutil.STATUS_ZOMBIE and (
            any(run_id in a for a in p.cmdline()) or p.environ().get(jobprocs.RUN_ID_VAR) == run_id)
    except jobprocs.psutil.Error:
        return False


def _stopped_by_you(code: int, out: str, runs) -> None:
    left = _left_of(runs)
    assert code == 130, out[-3000:]
    assert "stopped by you" in out.strip().splitlines()[-1], out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert left == []
    (run_dir,) = runs.iterdir()
    assert json.loads((run_dir / "result.json").read_text())


def test_a_ctrl_c_in_the_launchs_first_import_of_asyncio_stops_the_job(tmp_path):
    code, out, seen = _launch(tmp_path, AT_ASYNCIO, signal_when_running=True)
    _stopped_by_you(code, out, seen["runs"])
    # Watching the job imports no asyncio (the hook never fired): no import left half-done.
    assert not seen["fired"], out[-3000:]


def test_a_ctrl_c_stops_the_job_whatever_the_checks_before_the_stop_raise(tmp_path):
    code, out, seen = _launch(tmp_path, BROKEN_POLL, signal_when_running=False)
    assert seen["fired"], out[-3000:]
    _stopped_by_you(code, out, seen["runs"])


# The viewer's import of textual (a launch with the TUI, before it takes the terminal) gets a SIGINT.
AT_TEXTUAL = """
import os, sys, signal
mark = os.environ.pop("PARDASH_TEST_HOOK", "")
if mark and "launch" in sys.argv:
    class _F:
        def find_spec(self, name, path=None, target=None):
            if name == "textual.app":
                sys.meta_path.remove(self)
                open(mark, "w").close()
                os.kill(os.getpid(), signal.SIGINT)
            return None
    sys.meta_path.insert(0, _F())
"""


def test_a_ctrl_c_as_the_launchs_viewer_is_made_stops_the_job(tmp_path):
    # It escaped the launch (exit 130, not a word) and the job trained on with nobody to watch it.
    import pty

    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(textwrap.dedent(AT_TEXTUAL))
    mark = tmp_path / "fired"
    env = pardash_env(PYTHONPATH=os.pathsep.join([str(tmp_path / "hook"), os.environ.get("PYTHONPATH", "")]),
                      **{GATE: str(mark)}, OMP_NUM_THREADS="1", TERM="xterm-256color")  # fmt: skip
    runs = tmp_path / "runs"
    main, sub = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash", "launch", "--strategy", "single", "--steps", "100000", "--runs-dir", str(runs)],
        stdin=sub, stdout=sub, stderr=sub, env=env, cwd=tmp_path,
    )  # fmt: skip
    os.close(sub)
    out = b""
    try:
        # Read until the launch ends (the terminal's reader gone, it would block); a job left
        # training holds the terminal open after it, so the read ends with the launch's end.
        for _ in range(1200):  # (a launch that never ends fails the test, killed, its job with it)
            if select.select([main], [], [], 0.1)[0]:
                try:
                    out += os.read(main, 65536)
                except OSError:  # (EIO: every holder of the terminal's other end closed it)
                    break
            elif proc.poll() is not None:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(main)
    text = out.decode(errors="replace").replace("\r\n", "\n")
    assert mark.exists(), text[-3000:]
    _stopped_by_you(proc.returncode, text, runs)
