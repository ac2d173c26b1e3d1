"""`pardash attach --wait RUN` waits for a listed hub that is slow to answer (one reading a long
log back with --resume, or on a loaded host), as `--wait tcp://HOST:PORT` does: it gave up 5 s
after the run appeared, "no answer from the hub", exit 2 (a CI run failed so)."""

from __future__ import annotations

import signal
import subprocess
import sys

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
