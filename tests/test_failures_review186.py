"""How a failure is told (review 186): a rank killed while it saved a checkpoint died between
steps, at the step it saved, and the line says what it was doing (it read "at step 41" of a
rank killed in the save after step 40, a step that never began; its peer's error said step
39); ranks that all failed of the same error (a resume none of whose checkpoints could be
read) are named together, not the one whose exit reached the hub first. The summary's logic
through a real HubCore fed encoded frames; the trainer's side on a real launch."""

from __future__ import annotations

import os
import textwrap

import pytest

from pardash.telemetry import schema
from pardash.telemetry.failures import failure_summary
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.printer import outcome_line
from test_checkpoint import events, launch

RUN = "r"
T = 1.0e9
GLOO = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
        "[127.0.0.1]:29382: Connection reset by peer")  # fmt: skip
UNREADABLE = ("resume: no checkpoint in /ckpt can be read on every rank (tried /ckpt/step-20: rank 0: "
              "unexpected EOF)")  # fmt: skip


def _hub(steps: int = 40, source: str = "trainer"):
    """A hub of a DDP job of two ranks, both at ``steps``; and a send(msg, t) that gives it a
    frame as it came (each rank's own seq; the launcher's notes seq -1)."""
    core = HubCore(run_id=RUN, world_size=2)
    seq = {0: 0, 1: 0}

    def send(msg: schema.Message, t: float) -> None:
        msg.run, msg.t = RUN, t
        if msg.seq != -1:
            msg.seq, seq[msg.rank] = seq[msg.rank], seq[msg.rank] + 1
        took = core.ingest_bytes(schema.encode(msg), t - T)
        assert took or msg.seq == -1, core.rejected  # (a note of an exit its rank said is not kept again)

    for r in (0, 1):
        send(schema.Hello(rank=r, world_size=2, pid=100 + r, strategy="ddp", source=source), T)
    for s in range(1, steps + 1):
        for r in (0, 1):
            send(schema.Step(rank=r, step=s, step_s=0.01, samples=8, loss=1.0), T + s / 100)
    return core, send


@pytest.mark.parametrize("phase, doing", [("checkpoint", "saving a checkpoint"), ("eval", "evaluating")])
def test_a_rank_killed_between_steps_died_at_its_step_doing_what_its_heartbeat_said(phase, doing):
    core, send = _hub()
    for r in (0, 1):
        send(schema.Heartbeat(rank=r, step=40, phase=phase, phase_s=0.5), T + 1.0)
    send(schema.Event(rank=1, seq=-1, name="exit", code=-9, message="killed by signal 9 (SIGKILL)"), T + 1.2)
    send(schema.Event(rank=0, name="error", step=40, message=GLOO), T + 1.21)
    send(schema.Event(rank=0, name="exit", code=1, step=40), T + 1.22)
    f = failure_summary(core.state)
    assert f["rank"] == 1 and f["step"] == 40 and f["during"] == phase and f["unsent"] is None
    assert f["line"] == f"rank 1 exited with code -9 (SIGKILL) at step 40 while {doing}; rank 0 failed after it", f["line"]
    line = outcome_line(core.state, 1, {"code": 1, "stopped": False}, "job.jsonl")
    assert line.startswith(f"pardash: rank 1 exited with code -9 (SIGKILL) at step 40 while {doing}; "), line


def test_a_rank_that_raised_in_its_save_says_so():
    core, send = _hub()
    send(schema.Heartbeat(rank=1, step=40, phase="checkpoint", phase_s=0.5), T + 1.0)
    send(schema.Event(rank=1, name="error", step=40, message="OSError: [Errno 5] Input/output error"), T + 1.1)
    send(schema.Event(rank=1, seq=-1, name="exit", code=1, message="exit code 1"), T + 1.2)  # (torchrun's, first)
    send(schema.Event(rank=1, name="exit", code=1, step=40), T + 1.1)
    f = failure_summary(core.state)
    assert f["line"].startswith("rank 1 exited with code 1 at step 40 while saving a checkpoint: OSError"), f["line"]


def test_a_rank_out_of_its_save_died_in_the_next_step():
    # Its heartbeat said "checkpoint", then its save's event came: it went on, and died in step
    # 41 before another heartbeat (the next step's data, say). Not "while saving".
    core, send = _hub()
    send(schema.Heartbeat(rank=1, step=40, phase="checkpoint", phase_s=0.5), T + 1.0)
    send(schema.Event(rank=1, name="checkpoint", step=40, message="/ckpt/step-40", duration_s=0.6), T + 1.1)
    send(schema.Event(rank=1, seq=-1, name="exit", code=-9, message="killed by signal 9 (SIGKILL)"), T + 1.15)
    f = failure_summary(core.state)
    assert f["step"] == 41 and f.get("during") is None
    assert f["line"] == "rank 1 exited with code -9 (SIGKILL) at step 41", f["line"]
    # Nor one whose last heartbeat came before its last step.
    core, send = _hub(steps=39)
    send(schema.Heartbeat(rank=1, step=39, phase="eval", phase_s=0.5), T + 1.0)
    send(schema.Step(rank=1, step=40, step_s=0.01, samples=8, loss=1.0), T + 1.1)
    send(schema.Event(rank=1, seq=-1, name="exit", code=-9, message="killed by signal 9 (SIGKILL)"), T + 1.15)
    assert failure_summary(core.state)["line"] == "rank 1 exited with code -9 (SIGKILL) at step 41"


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_ranks_that_all_failed_of_the_same_error_are_named_together(order):
    # A resume whose checkpoints none could be read: every rank raises the same ResumeError
    # before its first step. The line named the rank whose exit came first (rank 1, often).
    core, send = _hub(steps=0)
    for i, r in enumerate(order):
        send(schema.Event(rank=r, name="error", message=UNREADABLE), T + 1.0 + i / 100)
        send(schema.Event(rank=r, name="exit", code=1), T + 1.0 + i / 100)
    for i, r in enumerate(order):
        send(schema.Event(rank=r, seq=-1, name="exit", code=1, message="exit code 1"), T + 1.1 + i / 100)
    f = failure_summary(core.state)
    assert f["rank"] == 0 and f["alike"] == [0, 1] and f["victims"] == []
    assert f["line"] == f"ranks 0-1 exited with code 1: {UNREADABLE}", f["line"]


def test_ranks_that_failed_apart_are_not_named_together():
    # Another error, or the same at another step, or one stopped: the first is the cause still.
    for other, step in (("ValueError: another", None), (UNREADABLE, 3)):  # (another error; another step)
        core, send = _hub(steps=0)
        send(schema.Event(rank=1, name="error", message=UNREADABLE), T + 1.0)
        send(schema.Event(rank=1, name="exit", code=1), T + 1.0)
        send(schema.Event(rank=0, name="error", message=other, step=step), T + 1.1)
        send(schema.Event(rank=0, name="exit", code=1), T + 1.1)
        f = failure_summary(core.state)
        assert f["rank"] == 1 and not f.get("alike") and f["line"].startswith("rank 1 exited with code 1: resume:"), f["line"]
    timeout = "RuntimeError: Timed out waiting 1800000ms for recv operation to complete"
    core, send = _hub(steps=0)  # (alike, but a wait: for whom, the hang's analysis says)
    for r in (1, 0):
        send(schema.Event(rank=r, name="error", message=timeout, step=0), T + 1.0)
        send(schema.Event(rank=r, name="exit", code=1), T + 1.0)
    f = failure_summary(core.state)
    assert f["rank"] == 1 and not f.get("alike"), f["line"]
    core, send = _hub(steps=0)
    send(schema.Event(rank=1, name="error", message=UNREADABLE), T + 1.0)
    send(schema.Event(rank=1, name="exit", code=1), T + 1.0)
    send(schema.Event(rank=0, seq=-1, name="exit", code=-15, message="stopped by torchrun"), T + 1.1)
    f = failure_summary(core.state)
    assert f["rank"] == 1 and not f.get("alike") and f["stopped"] == [0]


# -- the trainer, on a real launch -----------------------------------------------------------------

# Rank 1's save of step 4 (the bundled trainer's checkpoint.save) waits past a heartbeat or two,
# then the rank is killed (or raises), as the OOM killer or a full disk's error would end it.
SAVE_FAULT = """
import importlib.util, os, signal, sys, time
fault = os.environ.get("PARDASH_TEST_SAVE_FAULT", "")
if fault and os.environ.get("RANK") == "1":
    class _F:
        def find_spec(self, name, path=None, target=None):
            if name != "pardash.trainer.checkpoint":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module
            def exec_module(module):
                run(module)
                save = module.save
                def slow_save(root, progress, **kw):
                    if progress.step == 4:
                        time.sleep(2.5)
                        if fault == "kill":
                            os.kill(os.getpid(), signal.SIGKILL)
                        raise RuntimeError("injected failure in the save")
                    return save(root, progress, **kw)
                module.save = slow_save
            spec.loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, _F())
"""


@pytest.mark.parametrize("fault", ["kill", "raise"])
def test_a_rank_that_died_in_its_save_died_at_the_step_it_saved(tmp_path, monkeypatch, fault):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(SAVE_FAULT))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PARDASH_TEST_SAVE_FAULT", fault)
    proc, msgs = launch(tmp_path, fault, "--strategy", "ddp", "--nproc", "2", "--steps", "6", "--checkpoint-dir",
                        str(tmp_path / "ckpt"), "--checkpoint-every", "2")  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.splitlines()[-1]
    code = "-9 (SIGKILL)" if fault == "kill" else "1"
    assert last.startswith(f"pardash: rank 1 exited with code {code} at step 4 while saving a checkpoint"), last
    # The error events say the last step completed: 4 (the save came after it), not 3.
    errors = {e.rank: e.step for e in events(msgs, "error")}
    if fault == "raise":
        assert errors[1] == 4, errors
    assert errors.get(0, 4) == 4, errors  # (rank 0's, of the broken save, when said before torchrun stopped it)
    # The cause named in the log too, as for a rank killed or crashed anywhere in its steps (what
    # two launches of their own said: a kill -9 from outside, the trainer's --inject-crash).
    assert f"; the job's exit code {proc.returncode}; log " in last  # torchrun's, not the rank's
    exits = [m for m in msgs if isinstance(m, schema.Event) and m.name == "exit" and m.rank == 1]
    assert exits and exits[0].code == (-9 if fault == "kill" else 1), exits
    if fault == "raise":
        (error,) = [e for e in events(msgs, "error") if e.rank == 1]
        assert error.message == "RuntimeError: injected failure in the save", error.message
        assert "in slow_save" in error.traceback
        # (in the order rank 1 sent them: steps its heartbeat thread sent for the loop, on a
        # socket of their own, can reach the hub after the loop's next ones)
        steps = sorted((m for m in msgs if isinstance(m, schema.Step) and m.rank == 1), key=lambda m: m.seq)
        assert [m.step for m in steps] == [1, 2, 3, 4]  # intact up to the end
