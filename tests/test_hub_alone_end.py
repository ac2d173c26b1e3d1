"""A hub run alone (``pardash hub``, for the user's own torchrun) says on its terminal how each
job it serves ends, and serves on (review 245, finding 6: its only closing line was Ctrl-C's
"hub stopped: 938 messages, 0 lost, 0 rejected", after a job whose 4 ranks had all failed).

A real hub process, fed by real rank processes through PARDASH_ENDPOINT, as a user's ranks
reach it."""

import json
import os
import signal
import subprocess
import sys

from helpers import pardash_env, wait_for

RANK = r"""
import os, sys
from pardash.telemetry.reporter import Reporter

rep = Reporter.from_env(heartbeat_s=0)
rep.hello(strategy="ddp")
print("hello", flush=True)
sys.stdin.readline()  # (the job's rendezvous: every rank's hello is in)
steps, code, error = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for step in range(1, steps + 1):
    rep.step(step=step, loss=1.0 / step, step_s=0.01, samples=4)
if error:
    rep.event("error", message=error, traceback="Traceback (most recent call last):\n" + error, step=steps)
rep.event("exit", code=code, step=steps, message="stopped by SIGTERM" if code < 0 else "")
rep.close()
"""


def _job(info: dict, log, ranks: list[tuple[int, int, str]], steps: int, restart: int = 0, max_restarts: int = 0) -> None:
    """One job of len(ranks) rank processes (torchrun's attempt ``restart``), as a job's ranks
    go: every rank says hello (and the hub has them all) before any steps; then each, in the
    order given, takes ``steps`` steps and ends with its code, after its error where it has one
    (as torchrun stops the others once one failed)."""
    procs = []
    for rank, code, error in ranks:
        env = pardash_env(PARDASH_ENDPOINT=info["ingest"], PARDASH_RUN_ID=info["run_id"], RANK=str(rank), LOCAL_RANK=str(rank),
                          WORLD_SIZE=str(len(ranks)), TORCHELASTIC_RESTART_COUNT=str(restart),
                          TORCHELASTIC_MAX_RESTARTS=str(max_restarts))  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, "-c", RANK, str(steps), str(code), error], env=env, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE))  # fmt: skip
    try:
        for p in procs:
            assert p.stdout.readline() == "hello\n"
        wait_for(lambda: all(f'"pid":{p.pid},' in log.read_text() for p in procs))
        for p in procs:
            p.stdin.write("\n")
            p.stdin.flush()
            assert p.wait(60) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_hub_alone_says_how_each_job_it_serves_ends_and_serves_on(tmp_path):
    err = tmp_path / "stderr"
    log = tmp_path / "t.jsonl"
    with open(err, "w") as fh:
        hub = subprocess.Popen(
            [sys.executable, "-m", "pardash", "hub", "--run-id", "alone", "--log", str(log), "--no-registry"],
            stdout=subprocess.PIPE, stderr=fh, text=True, env=pardash_env(),
        )  # fmt: skip
    try:
        info = json.loads(hub.stdout.readline())

        def ended() -> list[str]:
            return [line for line in err.read_text().splitlines() if "the job has ended" in line]

        # A job whose ranks all finish: said once, with its step and where the log is.
        _job(info, log, [(0, 0, ""), (1, 0, "")], steps=5)
        wait_for(lambda: len(ended()) == 1)
        assert ended()[0] == (
            f"pardash hub: the job has ended at step 5: ranks 0-1 finished; log {log}; the hub serves on "
            "(a job run again under run id alone goes on in its log; Ctrl-C stops the hub)"
        )
        # Run again under the same id (torchrun --max-restarts 1), and its first attempt failed:
        # said with its root cause as the report and a launch's last line say it, not as the
        # job's end (torchrun starts it again; review 254 found "the job has ended" at each
        # failed attempt); and the hub still serves.
        _job(info, log, [(1, 1, "RuntimeError: CUDA error: out of memory"), (0, -signal.SIGTERM, "")], steps=3, max_restarts=1)
        wait_for(lambda: "an attempt failed" in err.read_text())
        (attempt,) = [line for line in err.read_text().splitlines() if "an attempt failed" in line]
        assert attempt == ("pardash hub: an attempt failed, and torchrun starts the job again (1 restart left): rank 1 exited with "
                           "code 1 at step 3: RuntimeError: CUDA error: out of memory; rank 0 was stopped")  # fmt: skip
        assert len(ended()) == 1
        text = err.read_text()
        assert text.index("the job has ended at step 5") < text.index("started again") < text.index("rank 1 exited")
        # torchrun started that job again, and it finished: said so, then its end.
        _job(info, log, [(0, 0, ""), (1, 0, "")], steps=4, restart=1, max_restarts=1)
        wait_for(lambda: len(ended()) == 2)
        lines = err.read_text().splitlines()
        assert lines[-2:] == [
            "pardash hub: torchrun restarted the job (restart 1): it goes on",
            f"pardash hub: the job has ended at step 4: ranks 0-1 finished; log {log}; the hub serves on "
            "(a job run again under run id alone goes on in its log; Ctrl-C stops the hub)",
        ]
        assert hub.poll() is None
    finally:
        hub.send_signal(signal.SIGINT)
        code = hub.wait(30)
    # Ctrl-C stops it as before: exit 0 (the hub did what it was asked; the job's end is said above).
    assert code == 0
    assert "hub stopped:" in err.read_text().splitlines()[-1]
    assert os.path.getsize(log) > 0


def test_a_hub_alone_whose_terminal_closes_stops_as_at_a_sigterm(tmp_path):
    # `pardash hub` in a terminal that closes (SIGHUP, review 293): it died where it stood (129),
    # its log without "hub stopped" and its registry entry left behind. Under nohup (SIGHUP
    # ignored) it would serve on.
    from pardash.telemetry import registry

    log = tmp_path / "h.jsonl"
    hub = subprocess.Popen(
        [sys.executable, "-m", "pardash", "hub", "--run-id", "hup", "--log", str(log)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=pardash_env(), preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )  # fmt: skip
    try:
        json.loads(hub.stdout.readline())
        wait_for(lambda: any(r.get("run_id") == "hup" for r in registry.live_runs()))
        hub.send_signal(signal.SIGHUP)
        code = hub.wait(30)
    finally:
        if hub.poll() is None:
            hub.kill()
            hub.wait()
    assert code == 0, hub.stderr.read()[-2000:]
    assert '"hub stopped: 0 messages' in log.read_text().splitlines()[-1]
    assert not [r for r in registry.live_runs() if r.get("run_id") == "hup"]
