"""`pardash attach --wait RUN` waits for a listed hub that is slow to answer (one reading a long
log back with --resume, or on a loaded host), as `--wait tcp://HOST:PORT` does: it gave up 5 s
after the run appeared, "no answer from the hub", exit 2 (a CI run failed so)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from helpers import hub_alone, pardash_env, terminate


def test_attach_wait_by_run_id_waits_for_a_hub_slow_to_answer(tmp_path):
    hub, _info = hub_alone(tmp_path / "slow.jsonl", "slow-run")
    att = None
    try:
        hub.send_signal(signal.SIGSTOP)  # listed, alive, and answering nothing (a hub busy reading its log back)
        att = subprocess.Popen([sys.executable, "-m", "pardash", "attach", "--headless", "--every", "1", "--wait", "slow-run"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env())  # fmt: skip
        first = att.stderr.readline()  # (said once its 0.5 s without an answer are up)
        assert first.startswith("pardash attach: waiting for the hub at tcp://127.0.0.1:") and first.endswith(" to answer...\n"), first
        try:
            att.wait(7)  # past the 5 s it gave a listed hub
        except subprocess.TimeoutExpired:
            pass
        assert att.poll() is None, att.communicate()
        hub.send_signal(signal.SIGCONT)
        said = att.stdout.readline()  # (watching: its first progress line, once the hub answered)
        att.send_signal(signal.SIGINT)
        _, err = att.communicate(timeout=30)
        assert said.startswith("[waiting"), (said, err)
        assert "no answer" not in err, err
        assert att.returncode == 130 and "stopped watching; the run goes on" in err, err
    finally:
        hub.send_signal(signal.SIGCONT)
        for proc in (att, hub):
            if proc is not None:
                terminate(proc)


@pytest.mark.parametrize("pruned", [False, True], ids=["listed", "its entry pruned"])
def test_attach_wait_says_a_hub_killed_as_it_waited_is_gone(tmp_path, pruned):
    # Review 332: its dropped connection read "refuses this viewer: it has CURVE keys and this
    # viewer has none ... or what listens there is not a pardash hub". So it did again where the
    # dead hub's entry was pruned meanwhile (by another viewer, or `pardash ps`: a CI run's).
    from pardash.telemetry import registry

    log = tmp_path / "gone.jsonl"
    hub, _info = hub_alone(log, "gone-run")
    att = None
    try:
        hub.send_signal(signal.SIGSTOP)
        att = subprocess.Popen([sys.executable, "-m", "pardash", "attach", "--headless", "--every", "1", "--wait", "gone-run"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env())  # fmt: skip
        first = att.stderr.readline()
        assert first.endswith(" to answer...\n"), first
        if pruned:
            (registry.registry_dir() / "gone-run.json").unlink()  # (the hub stopped: it writes it again no more)
        hub.send_signal(signal.SIGKILL)
        hub.wait(30)
        _, err = att.communicate(timeout=60)
        assert att.returncode == 2, err
        assert err.strip().endswith(f"the hub of run gone-run is gone: its process (pid {hub.pid}) ended before it answered this viewer; "
                                    f"its log {log} holds the run so far (`pardash report` or `pardash replay` reads it)"), err
        assert "CURVE" not in err, err
    finally:
        for proc in (att, hub):
            if proc is not None:
                terminate(proc)


def test_a_hub_whose_process_ends_just_after_it_dropped_the_viewer_is_gone_not_refusing(tmp_path):
    # A hub killed drops its connections as its process ends, a moment before it is gone: a
    # viewer asking within that moment read "refuses this viewer: it has CURVE keys ..." (a
    # fresh-clone CI run on a loaded host). A process that ends half a second on stands in.
    import types

    import psutil

    from pardash.telemetry.client import unanswered

    ending = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    try:
        entry = {"run_id": "ending-run", "pid": ending.pid, "pid_created": psutil.Process(ending.pid).create_time(),
                 "log": str(tmp_path / "ending.jsonl")}  # fmt: skip
        viewer = types.SimpleNamespace(refused="it has CURVE keys and this viewer has none", reached=True, keys=None, info=entry)
        said = unanswered("ending-run", "ending-run", "tcp://127.0.0.1:1", viewer)
        assert said.startswith(f"the hub of run ending-run is gone: its process (pid {ending.pid}) ended before it answered"), said
        # A hub that lives on and drops the viewer refuses it
        alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        try:
            entry = {**entry, "pid": alive.pid, "pid_created": psutil.Process(alive.pid).create_time()}
            said = unanswered("ending-run", "ending-run", "tcp://127.0.0.1:1", types.SimpleNamespace(**{**vars(viewer), "info": entry}))
            assert said.startswith("the hub of run ending-run (its snapshot port, tcp://127.0.0.1:1) refuses this viewer"), said
        finally:
            alive.kill()
            alive.wait(30)
    finally:
        ending.kill()
        ending.wait(30)
