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


def _start(tmp_path, procs: list, body: str) -> tuple[subprocess.Popen, str, list[str]]:
    """A Python process running ``body`` after PRELUDE, in a session of its own (in ``procs``,
    killed after the test whatever happens); returns it once it printed READY, its mark file's
    path and the words after READY."""
    mark = tmp_path / "mark.txt"
    code = PRELUDE + textwrap.dedent(body)
    p = subprocess.Popen([sys.executable, "-c", code, str(mark)], stdout=subprocess.PIPE, text=True,
                         env=pardash_env(), start_new_session=True)  # fmt: skip
    procs.append(p)
    line = p.stdout.readline()
    assert line.startswith("READY"), line
    return p, str(mark), line.split()[1:]


def _stop(p: subprocess.Popen) -> int:
    """SIGTERM to ``p``, as torchrun stops a worker; its exit status (-15: ended by SIGTERM)."""
    p.send_signal(signal.SIGTERM)
    return p.wait(60)


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
    p, mark, _ = _start(tmp_path, procs, """
        assert sigterm.at_stop(lambda: mark("first"))
        assert sigterm.at_stop(lambda: mark("second"))
        print("READY", flush=True)
        time.sleep(120)
    """)
    assert _stop(p) == -signal.SIGTERM  # as without pardash: torchrun and the shell see the same
    assert _marks(mark) == [f"second {p.pid}", f"first {p.pid}"]


def test_no_other_handler_cuts_the_flush_short(tmp_path, procs):
    # torchrun signals the rank's process group: its DataLoader workers die as it flushes, and
    # torch's SIGCHLD handler raised "DataLoader worker ... is killed" inside the flush (the
    # held step lost, 2 stops in 12).
    p, mark, _ = _start(tmp_path, procs, """
        def worker_died(signum, frame):
            raise RuntimeError("DataLoader worker (pid N) is killed by signal: Terminated")

        def flush():
            time.sleep(0.5)  # (a reporter lingering: the worker's death comes meanwhile)
            mark("flushed")

        signal.signal(signal.SIGCHLD, worker_died)
        assert sigterm.at_stop(flush)
        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
        print("READY", flush=True)
        time.sleep(120)
    """)
    os.killpg(p.pid, signal.SIGTERM)  # (the rank and its worker, as torchrun stops them)
    assert p.wait(60) == -signal.SIGTERM
    assert _marks(mark) == [f"flushed {p.pid}"]


def test_a_stop_inside_the_reporters_send_still_flushes(tmp_path, procs):
    # The handler runs on the loop's thread, maybe inside the reporter's lock of a send: the
    # flush waited on that lock for ever, and the watchdog ended the rank with nothing sent.
    p, mark, _ = _start(tmp_path, procs, """
        from pardash.telemetry.reporter import Reporter

        rep = Reporter("tcp://127.0.0.1:9", run="r", heartbeat_s=0)
        assert sigterm.at_stop(lambda: mark("closed"))  # (runs after the reporter's close)
        assert sigterm.at_stop(rep.close)
        print("READY", flush=True)
        with rep._held_lock:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(120)
    """)
    assert p.wait(60) == -signal.SIGTERM
    assert _marks(mark) == [f"closed {p.pid}"]


def test_where_another_wakeup_descriptor_is_set_nothing_is_installed(tmp_path, procs):
    # (an asyncio loop's, with a signal handler added): no watchdog, so a rank stuck in C would
    # not end at SIGTERM; SIGTERM stays the default
    p, mark, _ = _start(tmp_path, procs, """
        r, w = os.pipe()
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w)
        assert not sigterm.at_stop(lambda: mark("ours"))
        assert sigterm._getsignal(signal.SIGTERM) is signal.SIG_DFL
        print("READY", flush=True)
        time.sleep(120)
    """)
    assert _stop(p) == -signal.SIGTERM
    assert _marks(mark) == []


def test_a_process_stuck_in_c_still_ends_by_sigterm(tmp_path, procs):
    # A rank waiting in a collective is in C for as long as its peers keep it there; a Python
    # handler runs only between bytecodes of the main thread, so without the watchdog SIGTERM no
    # longer ended it (torchrun's SIGKILL did, 30 s later). Here the main thread waits on a
    # pthread condition in C, and READY comes from another thread once it holds the mutex that
    # wait let go of (so the main thread is in C before the signal, and could not leave it: even
    # woken, it needs the mutex back). Zeroed pthread objects are glibc's static initialisers.
    p, mark, _ = _start(tmp_path, procs, """
        sigterm.BEGIN_S = 0.5  # (the watchdog's patience, 3 s: what the test waits out)
        import ctypes, threading
        libc = ctypes.CDLL(None)
        mutex, cond = ctypes.create_string_buffer(64), ctypes.create_string_buffer(64)
        assert sigterm.at_stop(lambda: mark("ran"))

        def ready():
            libc.pthread_mutex_lock(mutex)  # (the main thread is waiting in C now)
            print("READY", flush=True)
            time.sleep(120)

        assert libc.pthread_mutex_lock(mutex) == 0
        threading.Thread(target=ready, daemon=True).start()
        libc.pthread_cond_wait(cond, mutex)
        mark("returned")
    """)
    assert _stop(p) == -signal.SIGTERM
    assert _marks(mark) == []  # (nothing run from the watchdog's thread: the main thread's state is in mid-air)


def test_a_handler_the_script_sets_after_is_its_own_and_the_watchdog_leaves_it_alone(tmp_path, procs):
    # A script that checkpoints at a scheduler's SIGTERM, longer than the watchdog's patience.
    p, mark, _ = _start(tmp_path, procs, """
        sigterm.BEGIN_S = 0.5  # (the watchdog's patience, 3 s: what the test waits out)
        assert sigterm.at_stop(lambda: mark("ours"))
        def own(signum, frame):
            time.sleep(2 * sigterm.BEGIN_S)
            mark("own")
            sys.exit(3)
        signal.signal(signal.SIGTERM, own)
        print("READY", flush=True)
        time.sleep(120)
    """)
    assert _stop(p) == 3
    assert _marks(mark) == [f"own {p.pid}"]


def test_a_framework_that_chains_the_handler_it_finds_stops_as_it_would_without_pardash(tmp_path, procs):
    # PyTorch Lightning's SIGTERM handler notes the signal (training stops at the step's end)
    # and calls the handler it found if that is callable: this one, which ended the rank on the
    # spot, its graceful stop never reached. Told SIG_DFL, it chains nothing, as without pardash.
    p, mark, said = _start(tmp_path, procs, """
        assert sigterm.at_stop(lambda: mark("ours"))
        found = signal.getsignal(signal.SIGTERM)
        stopping = []

        def composed(signum, frame):
            stopping.append(signum)
            if callable(found):
                found(signum, frame)

        replaced = signal.signal(signal.SIGTERM, composed)
        print("READY", found is signal.SIG_DFL, replaced is signal.SIG_DFL, flush=True)
        while not stopping:
            time.sleep(0.01)
        mark("stopped at the step's end")
        sys.exit(0)
    """)
    assert said == ["True", "True"]
    assert _stop(p) == 0
    assert _marks(mark) == [f"stopped at the step's end {p.pid}"]


def test_a_handler_the_script_set_before_is_left_as_it_was(tmp_path, procs):
    p, mark, _ = _start(tmp_path, procs, """
        signal.signal(signal.SIGTERM, lambda *_: (mark("own"), sys.exit(4)))
        assert not sigterm.at_stop(lambda: mark("ours"))
        print("READY", flush=True)
        time.sleep(120)
    """)
    assert _stop(p) == 4
    assert _marks(mark) == [f"own {p.pid}"]


def test_a_forked_child_ends_by_sigterm_alone_and_runs_nothing_of_the_rank(tmp_path, procs):
    # A DataLoader worker is forked from the rank. It must not run the rank's flush (its copy of
    # the rank's ZeroMQ sockets), nor wake the rank's watchdog through the inherited wakeup pipe
    # (which then ended the rank: it saw a SIGTERM its handler never began on).
    p, mark, (child,) = _start(tmp_path, procs, """
        sigterm.BEGIN_S = 0.5  # (the watchdog's patience, 3 s: what the test waits out)
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
    os.kill(int(child), signal.SIGTERM)
    assert p.stdout.readline().split() == ["CHILD", str(-signal.SIGTERM)]
    assert p.stdout.readline().strip() == "ALIVE"
    assert _stop(p) == -signal.SIGTERM
    assert _marks(mark) == [f"flushed {p.pid}"]


def _stopped_with_a_hub(tmp_path, argv: list[str], until) -> list:
    """Run ``argv`` as rank 0 of 1 of run "stopped-run", publishing to a hub alone of its own, in
    ``tmp_path``; it must end by SIGTERM. The hub's log's messages, once ``until`` says of them."""
    from helpers import hub_alone, wait_for
    from pardash.telemetry.logreader import load_log

    log = tmp_path / "run.jsonl"
    hub, info = hub_alone(log, "stopped-run")
    try:
        env = pardash_env(PARDASH_ENDPOINT=info["ingest"], PARDASH_RUN_ID="stopped-run", RANK="0", WORLD_SIZE="1")
        p = subprocess.run(argv, env=env, cwd=tmp_path, timeout=120, capture_output=True, text=True)
        assert p.returncode == -signal.SIGTERM, p.stderr[-2000:]

        def logged() -> list:
            return load_log(log)[0] if log.exists() else []

        wait_for(lambda: until(logged()), timeout_s=30)
        return logged()
    finally:
        hub.terminate()
        hub.wait(30)


def _ends(msgs: list) -> list[tuple]:
    """(name, code, message) of the rank's error and exit events."""
    from pardash.telemetry import schema

    return [(m.name, m.code, m.message) for m in msgs if isinstance(m, schema.Event) and m.name in ("error", "exit")]


def _python(script: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(script)]


def test_a_script_of_its_own_steps_stopped_by_sigterm_has_its_last_steps_in_the_log(tmp_path):
    # A script of pt.step blocks, stopped as torchrun stops a worker, just after its steps: the
    # reporter held them for its next burst (BATCH_S), and the rank ended with them unsent.
    from pardash.telemetry import schema

    def steps(msgs: list) -> list[int]:
        return sorted(m.step for m in msgs if isinstance(m, schema.Step))

    _stopped_with_a_hub(tmp_path, _python("""
        import os, signal, time
        import pardash.telemetry as pt

        for i in range(5):
            with pt.step():
                pt.log(loss=1.0 / (i + 1), samples=4)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)
    """), until=lambda msgs: steps(msgs) == [1, 2, 3, 4, 5])


def test_a_trainer_rank_stopped_after_its_error_still_says_the_exit_it_decided(tmp_path):
    # Every rank of a failed resume fails of the same error; one exits first and torchrun stops
    # the others (SIGTERM). One stopped between its error and its exit read "stopped by torchrun"
    # and was left out of the ranks named with the error (a loaded machine's rank 0, a moment
    # behind: "rank 1 exited with code 1 ...; rank 0 was stopped"). Here the stop comes as the
    # rank writes torchrun's error file, between the two.
    msgs = _stopped_with_a_hub(tmp_path, _python("""
        import os, signal, sys
        from pardash.trainer import train

        def fails(*args):
            raise RuntimeError("the resumed checkpoint holds another model")

        def stopped_as_it_records(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGTERM)

        train.train = fails
        train._record_error_file = stopped_as_it_records
        sys.exit(train.main(["--strategy", "single", "--steps", "2"]))
    """), until=lambda msgs: len(_ends(msgs)) >= 2)
    assert _ends(msgs) == [("error", None, "RuntimeError: the resumed checkpoint holds another model"), ("exit", 1, "")]


def test_a_script_stopped_as_it_prints_its_traceback_still_says_its_error_and_exit(tmp_path):
    # The same race in a script of the user's own: every rank raises the same error, one exits
    # first, torchrun stops the rest as they print their tracebacks. The stop comes here from
    # the script's own sys.excepthook, through which the rank prints it.
    (tmp_path / "bad_config.py").write_text(textwrap.dedent("""
        import os, signal, sys

        sys.excepthook = lambda *exc: os.kill(os.getpid(), signal.SIGTERM)
        raise ValueError("bad config")
    """))
    argv = [sys.executable, "-m", "pardash.trainer.autorun", "bad_config.py"]
    msgs = _stopped_with_a_hub(tmp_path, argv, until=lambda msgs: len(_ends(msgs)) >= 2)
    assert _ends(msgs) == [("error", None, "ValueError: bad config"), ("exit", 1, "")]


def test_an_explicit_api_script_stopped_as_it_prints_its_traceback_still_says_its_exit(tmp_path):
    # The same under plain torchrun with pt.init: the API's hook says the error, then the hook
    # before it prints the traceback, where the stop comes.
    msgs = _stopped_with_a_hub(tmp_path, _python("""
        import os, signal, sys
        import pardash.telemetry as pt

        sys.excepthook = lambda *exc: os.kill(os.getpid(), signal.SIGTERM)
        pt.init()
        with pt.step():
            pt.log(loss=1.0)
        raise ValueError("bad config")
    """), until=lambda msgs: len(_ends(msgs)) >= 2)
    assert _ends(msgs) == [("error", None, "ValueError: bad config"), ("exit", 1, "")]
