"""A rank whose script takes SIGTERM with a handler of its own and then exits through
``SystemExit`` was stopped, not finished: PyTorch Lightning's handler notes the signal and raises
``SIGTERMException`` (a ``SystemExit`` of code None) at the end of the step, and a Lightning run
stopped under ``pardash launch`` read "finished 448", exit code 0, in the log and the report,
where a plain script's ranks read "stopped by you". Real processes under autorun, a real hub."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import pardash_env, wait_for
from pardash.telemetry import schema
from pardash.telemetry.logreader import load_log
from pardash.telemetry.report import build_report
from pardash.telemetry.report_render import render_text

SCRIPT = """
import os, signal, sys, time
import torch
from torch import nn

HOW = sys.argv[1]


class SIGTERMException(SystemExit):
    # As Lightning's (lightning.pytorch.utilities.exceptions), raised as its fit loop does.
    pass


noted = []


def handler(signum, frame):
    if HOW == "exits_in_handler":
        sys.exit(0)  # a preemption handler's: "done, exit cleanly"
    noted.append(signum)  # Lightning's: stop at the end of the step


if HOW != "plain":
    signal.signal(signal.SIGTERM, handler)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 201):
    if HOW == "lightning_sigint" and step == 4:
        try:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, as a step begins
        except KeyboardInterrupt:
            sys.exit(1)  # Lightning's _call_and_handle_interrupt: "graceful shutdown", exit 1
    opt.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    opt.step()
    if noted:
        raise SIGTERMException()
    if step == 3 and HOW == "stop_launch":
        # A Stop in the launch's viewer (its SIGINT to the supervisor, as Ctrl-C's): torchrun's
        # SIGTERM reaches this rank after it, which waits for it between steps
        os.kill(int(os.environ["PARDASH_SUPERVISOR"]), signal.SIGINT)
        for _ in range(1200):
            if noted:
                break
            time.sleep(0.05)
    elif step == 3 and HOW in ("lightning", "exits_in_handler", "plain"):
        os.kill(os.getpid(), signal.SIGTERM)  # a preemption, as the step ends
    elif step == 3 and HOW == "ctrl_c":
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C (a plain torchrun's reaches every rank)
    if step == 5 and HOW == "no_signal":
        sys.exit(0)
    if HOW == "went_on" and step == 3:
        try:
            os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C the script takes: "skip to the next epoch"
        except KeyboardInterrupt:
            pass
    if HOW == "went_on" and step == 50:
        sys.exit("validation loss too high")  # a failure, 47 steps on
print("never stopped", file=sys.stderr)
"""


def _forked(argv: list[str], env: dict[str, str], cwd: Path, autorun: bool, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m pardash.trainer.autorun SCRIPT ARGS`` or ``python SCRIPT ARGS`` as the tests'
    ranks run: a process forked from one that imported torch and its compiler already, through
    ``$PYTHON_EXEC`` (tests/scripts/rank_zygote.py): its own process, session, signals and exit,
    less the 2.5 s of a core its imports take. (The launched test below is a fresh
    interpreter's.)"""
    run = ["-m", "pardash.trainer.autorun", *argv] if autorun else argv
    return subprocess.run([os.environ.get("PYTHON_EXEC", sys.executable), "-u", *run], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=env, cwd=cwd, timeout=timeout)  # fmt: skip


def _run(hub, tmp_path, how: str) -> tuple[subprocess.CompletedProcess, list, dict]:
    """``SCRIPT how`` under autorun, with the hub: the process, the rank's events, the report."""
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    env = pardash_env(PARDASH_ENDPOINT=hub.ingest_endpoint, PARDASH_RUN_ID="test-run", PARDASH_SUPERVISOR=None)
    proc = _forked(["train.py", how], env, tmp_path, autorun=True)
    log = tmp_path / "telemetry.jsonl"

    def events() -> list:
        return [m for m in load_log(log)[0] if isinstance(m, schema.Event) and m.rank == 0] if log.exists() else []

    wait_for(lambda: any(e.name == "exit" for e in events()))
    return proc, events(), build_report(str(log))


@pytest.mark.parametrize(
    "how, returncode, sig",
    [("lightning", 0, "SIGTERM"), ("exits_in_handler", 0, "SIGTERM"), ("lightning_sigint", 1, "SIGINT"), ("ctrl_c", 130, "SIGINT")],
)
def test_an_exit_after_a_stop_signal_the_script_took_itself_is_a_stop(hub, tmp_path, how, returncode, sig):
    # (ctrl_c: no handler of the script's; Python's KeyboardInterrupt ended it, and the rank
    # read error "interrupted", printed "[error] rank 0: interrupted", where Lightning's read
    # stopped.)
    proc, events, rep = _run(hub, tmp_path, how)
    # The process's own exit is the script's: pardash changes nothing of it.
    assert proc.returncode == returncode, proc.stderr
    assert "never stopped" not in proc.stderr
    code = -int(getattr(signal, sig))
    (exit_,) = [e for e in events if e.name == "exit"]
    assert (exit_.code, exit_.message) == (code, f"stopped by {sig}"), exit_
    assert not [e for e in events if e.name == "error"]  # a stop, no failure (Lightning's exit 1 read as one)
    # At the step it was stopped after: its last (4 where the script stops at the end of the
    # next step, as Lightning does; 3 where its handler exits at once, or the next one begins)
    last = max(m.step for m in load_log(tmp_path / "telemetry.jsonl")[0] if isinstance(m, schema.Step))
    assert exit_.step == last == (4 if how == "lightning" else 3)
    (row,) = rep["exits"]
    assert (row["code"], row["role"], row["signal"]) == (code, "stopped", sig)
    text = render_text(rep)
    assert f"rank 0 stopped by {sig} at step {last}\n" in text, text  # (its signal named once: failures.stop_text)
    assert "none with an error" not in text and "finished" not in text, text


def test_a_rank_sigterm_ends_without_pardash_launch_says_it_was_stopped(hub, tmp_path):
    # A scheduler's preemption of a plain torchrun: the script has no handler of its own, and
    # pardash's flushed and said nothing; its ranks read "silent ... never resumed" for ever.
    proc, events, rep = _run(hub, tmp_path, "plain")
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    (exit_,) = [e for e in events if e.name == "exit"]
    assert (exit_.code, exit_.message) == (-15, "stopped by SIGTERM"), exit_
    (row,) = rep["exits"]
    assert (row["code"], row["role"]) == (-15, "stopped")
    assert rep["stalls"] == [], rep["stalls"]


def test_an_exit_with_no_signal_before_it_still_finishes(hub, tmp_path):
    proc, events, rep = _run(hub, tmp_path, "no_signal")
    assert proc.returncode == 0, proc.stderr
    assert [(e.code, e.step) for e in events if e.name == "exit"] == [(0, 5)]
    assert rep["exits"] == []


def test_an_exit_long_after_a_stop_the_script_went_on_from_is_its_own(hub, tmp_path):
    # The script took a Ctrl-C and trained on; its sys.exit(msg) 47 steps later read "stopped
    # by SIGINT": no error, no error file.
    proc, events, rep = _run(hub, tmp_path, "went_on")
    assert proc.returncode == 1, proc.stderr
    assert [(e.code, e.step) for e in events if e.name == "exit"] == [(1, 50)]
    assert [e.message for e in events if e.name == "error"] == ["validation loss too high"]


def test_a_stop_of_a_launch_whose_rank_exits_through_its_own_handler_is_stopped_by_you(tmp_path):
    # The reviewer's case: `pardash launch -- pl_train.py`, Stop. The rank says no exit of its
    # own (the hub would take it over the launcher's note): the launcher's says who stopped it.
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    log = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "1", "--headless", "--log", str(log),
         "--runs-dir", str(tmp_path / "runs"), "--", "train.py", "stop_launch"],
        capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 130, proc.stderr
    assert "never stopped" not in proc.stderr + proc.stdout
    msgs = load_log(log)[0]
    exits = [m for m in msgs if isinstance(m, schema.Event) and m.name == "exit" and m.rank == 0]
    assert [(e.code, e.seq, e.message) for e in exits] == [(-15, -1, "stopped by Ctrl-C at the launch")], exits
    # As the stop began, the launcher said so (dated as the exit's note is: the stop's start):
    # the hub judges no stall of a rank that takes seconds to end (test_stopping.py).
    stopping = [m for m in msgs if isinstance(m, schema.Event) and m.name == "stopping"]
    assert [(m.rank, m.seq, m.message, m.t) for m in stopping] == [(0, -1, "by Ctrl-C at the launch", exits[0].t)], stopping
    assert "[stopping] rank 0 being stopped by Ctrl-C at the launch" in proc.stdout, proc.stdout[-2000:]
    rep = build_report(str(log))
    (row,) = rep["exits"]
    assert (row["code"], row["role"]) == (-15, "stopped")
    text = render_text(rep)
    assert "rank 0 stopped by Ctrl-C at the launch (SIGTERM)" in text, text  # (a stop in the words of every output)
    assert "none with an error" not in text, text


API_SCRIPT = """
import os, signal, sys
import torch
from torch import nn
import pardash.telemetry as pt


class SIGTERMException(SystemExit):
    pass


noted = []
pt.init()
if sys.argv[1:] == ["ctrl_c, its hook replaced"]:
    sys.excepthook = lambda *a: sys.__excepthook__(*a)  # (rich.traceback.install(), say)
if sys.argv[1:] != ["plain"]:
    signal.signal(signal.SIGTERM, lambda signum, frame: noted.append(signum))  # (in trainer.fit, Lightning's)
model = nn.Linear(4, 1)
for step in range(1, 201):
    with pt.step():
        model.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        with torch.no_grad():  # (by hand: torch.optim's first optimizer imports torch's compiler, 1.3 s of a core)
            for p in model.parameters():
                p -= 0.1 * p.grad
    if noted:
        raise SIGTERMException()
    if step == 3 and sys.argv[1:] == ["ctrl_c, its hook replaced"]:
        raise KeyboardInterrupt  # (no signal seen: the script's own, or _thread.interrupt_main())
    if step == 3:
        os.kill(os.getpid(), signal.SIGINT if sys.argv[1:] == ["ctrl_c"] else signal.SIGTERM)
print("never stopped", file=sys.stderr)
"""


@pytest.mark.parametrize(
    "how, returncode, sig",
    [("its own handler", 0, "SIGTERM"), ("plain", -15, "SIGTERM"), ("ctrl_c", -2, "SIGINT"), ("ctrl_c, its hook replaced", -2, "SIGINT")],
)
def test_the_explicit_apis_exit_after_a_stop_signal_is_a_stop_too(hub, tmp_path, how, returncode, sig):
    # A script of pt.init() and pt.step() under plain torchrun, Lightning's way of stopping:
    # its exit event said "finished", code 0; without a handler of its own, it said none; at
    # Ctrl-C, error "interrupted" and exit 130.
    (tmp_path / "train.py").write_text(textwrap.dedent(API_SCRIPT))
    env = pardash_env(PARDASH_ENDPOINT=hub.ingest_endpoint, PARDASH_RUN_ID="test-run", PARDASH_SUPERVISOR=None)
    proc = _forked(["train.py", how], env, tmp_path, autorun=False)
    assert proc.returncode == returncode and "never stopped" not in proc.stderr, proc.stderr
    log = tmp_path / "telemetry.jsonl"

    def exits() -> list:
        return [m for m in load_log(log)[0] if isinstance(m, schema.Event) and m.name == "exit"] if log.exists() else []

    wait_for(lambda: exits())
    code = -int(getattr(signal, sig))
    assert [(e.code, e.step, e.message) for e in exits()] == [(code, 4 if how == "its own handler" else 3, f"stopped by {sig}")]
    assert not [m for m in load_log(log)[0] if isinstance(m, schema.Event) and m.name == "error"]


def test_the_bundled_trainers_ctrl_c_is_a_stop_too(hub, tmp_path):
    # Under plain torchrun, Ctrl-C reaches every rank: the bundled trainer said error
    # "interrupted" and exit 130 (the viewers' "[error] rank 0: interrupted"), as autorun did.
    env = pardash_env(PARDASH_ENDPOINT=hub.ingest_endpoint, PARDASH_RUN_ID="test-run", PARDASH_SUPERVISOR=None)
    proc = subprocess.Popen([sys.executable, "-m", "pardash.trainer.train", "--strategy", "single", "--steps", "100000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)  # fmt: skip
    log = tmp_path / "telemetry.jsonl"

    def events(name: str) -> list:
        return [m for m in load_log(log)[0] if isinstance(m, schema.Event) and m.name == name] if log.exists() else []

    try:
        wait_for(lambda: log.exists() and any(isinstance(m, schema.Step) for m in load_log(log)[0]), timeout_s=120)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    wait_for(lambda: events("exit"))
    (exit_,) = events("exit")
    assert (exit_.code, exit_.message) == (-2, "stopped by SIGINT") and exit_.step, exit_
    assert events("error") == []
