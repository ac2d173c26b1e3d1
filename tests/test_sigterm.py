"""A rank stopped by SIGTERM (torchrun's stop of its workers) runs what it registered with
``telemetry.sigterm.at_stop`` and then ends by SIGTERM, as it would have without pardash; stuck
in C, where no Python handler can run, it still ends by SIGTERM; a handler of the script's own
and a forked child (a DataLoader worker) are left as they would be. Real processes, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from helpers import pardash_env

PRELUDE = """
import os, signal, sys, time
from pardash.telemetry import sigterm

MARK = sys.argv[1]

def mark(what):
    with open(MARK, "a") as f:
        f.write(f"{what} {os.getpid()}\\n")
"""


def _start(tmp_path, body: str) -> tuple[subprocess.Popen, str, list[str]]:
    """A Python process running ``body`` after PRELUDE, in a session of its own; returns it
    once it printed READY, its mark file's path and the words after READY."""
    mark = tmp_path / "mark.txt"
    code = PRELUDE + textwrap.dedent(body)
    p = subprocess.Popen([sys.executable, "-c", code, str(mark)], stdout=subprocess.PIPE, text=True,
                         env=pardash_env(), start_new_session=True)  # fmt: skip
    line = p.stdout.readline()
    assert line.startswith("READY"), line
    return p, str(mark), line.split()[1:]


def _marks(path: str) -> list[str]:
    return open(path).read().split("\n")[:-1] if os.path.exists(path) else []


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:  # (their process groups: whatever a test left behind)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(30)


def test_at_sigterm_what_was_registered_runs_last_first_then_the_process_ends_by_sigterm(tmp_path, procs):
    p, mark, _ = _start(tmp_path, """
        assert sigterm.at_stop(lambda: mark("first"))
        assert sigterm.at_stop(lambda: mark("second"))
        print("READY", flush=True)
        time.sleep(120)
    """)
    procs.append(p)
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == -signal.SIGTERM  # as without pardash: torchrun and the shell see the same
    assert _marks(mark) == [f"second {p.pid}", f"first {p.pid}"]


def test_a_process_stuck_in_c_still_ends_by_sigterm(tmp_path, procs):
    # A rank waiting in a collective is in C for as long as its peers keep it there; a Python
    # handler runs only between bytecodes of the main thread, so without the watchdog SIGTERM no
    # longer ended it (torchrun's SIGKILL did, 30 s later). A pthread mutex locked twice by its
    # thread waits in C for ever, going back to its wait when a signal cuts it short: the same
    # hold (a zeroed mutex is glibc's PTHREAD_MUTEX_INITIALIZER, a default mutex).
    p, mark, _ = _start(tmp_path, """
        import ctypes
        libc, mutex = ctypes.CDLL(None), ctypes.create_string_buffer(64)
        assert sigterm.at_stop(lambda: mark("ran"))
        assert libc.pthread_mutex_lock(mutex) == 0
        print("READY", flush=True)
        libc.pthread_mutex_lock(mutex)
        mark("returned")
    """)
    procs.append(p)
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == -signal.SIGTERM
    assert _marks(mark) == []  # (nothing run from the watchdog's thread: the main thread's state is in mid-air)


def test_a_handler_the_script_sets_after_is_its_own_and_the_watchdog_leaves_it_alone(tmp_path, procs):
    # A script that checkpoints at a scheduler's SIGTERM, longer than the watchdog's patience.
    p, mark, _ = _start(tmp_path, """
        assert sigterm.at_stop(lambda: mark("ours"))
        def own(signum, frame):
            time.sleep(2 * sigterm.BEGIN_S)
            mark("own")
            sys.exit(3)
        signal.signal(signal.SIGTERM, own)
        print("READY", flush=True)
        time.sleep(120)
    """)
    procs.append(p)
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 3
    assert _marks(mark) == [f"own {p.pid}"]


def test_a_handler_the_script_set_before_is_left_as_it_was(tmp_path, procs):
    p, mark, _ = _start(tmp_path, """
        signal.signal(signal.SIGTERM, lambda *_: (mark("own"), sys.exit(4)))
        assert not sigterm.at_stop(lambda: mark("ours"))
        print("READY", flush=True)
        time.sleep(120)
    """)
    procs.append(p)
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 4
    assert _marks(mark) == [f"own {p.pid}"]


def test_a_forked_child_ends_by_sigterm_alone_and_runs_nothing_of_the_rank(tmp_path, procs):
    # A DataLoader worker is forked from the rank. It must not run the rank's flush (its copy of
    # the rank's ZeroMQ sockets), nor wake the rank's watchdog through the inherited wakeup pipe
    # (which then ended the rank: it saw a SIGTERM its handler never began on).
    p, mark, (child,) = _start(tmp_path, """
        assert sigterm.at_stop(lambda: mark("flushed"))
        child = os.fork()
        if child == 0:
            time.sleep(120)
            os._exit(0)
        print("READY", child, flush=True)
        _, status = os.waitpid(child, 0)
        print("CHILD", os.waitstatus_to_exitcode(status), flush=True)
        time.sleep(3 * sigterm.BEGIN_S)  # (time for a watchdog woken by the child's signal to act)
        print("ALIVE", flush=True)
        time.sleep(120)
    """)
    procs.append(p)
    os.kill(int(child), signal.SIGTERM)
    assert p.stdout.readline().split() == ["CHILD", str(-signal.SIGTERM)]
    assert p.stdout.readline().strip() == "ALIVE"
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == -signal.SIGTERM
    assert _marks(mark) == [f"flushed {p.pid}"]


def test_a_script_of_its_own_steps_stopped_by_sigterm_has_its_last_steps_in_the_log(tmp_path):
    # A script of pt.step blocks, stopped as torchrun stops a worker, just after its steps: the
    # reporter held them for its next burst (BATCH_S), and the rank ended with them unsent.
    from helpers import hub_alone, wait_for
    from pardash.telemetry import schema
    from pardash.telemetry.logreader import load_log

    log = tmp_path / "run.jsonl"
    hub, info = hub_alone(log, "stopped-run")
    script = textwrap.dedent("""
        import os, signal, time
        import pardash.telemetry as pt

        for i in range(5):
            with pt.step():
                pt.log(loss=1.0 / (i + 1), samples=4)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)
    """)
    try:
        env = pardash_env(PARDASH_ENDPOINT=info["ingest"], PARDASH_RUN_ID="stopped-run", RANK="0", WORLD_SIZE="1")
        p = subprocess.run([sys.executable, "-c", script], env=env, timeout=60)
        assert p.returncode == -signal.SIGTERM

        def steps() -> list[int]:
            return sorted(m.step for m in load_log(log)[0] if isinstance(m, schema.Step)) if log.exists() else []

        wait_for(lambda: steps() == [1, 2, 3, 4, 5], timeout_s=30)
    finally:
        hub.terminate()
        hub.wait(30)
