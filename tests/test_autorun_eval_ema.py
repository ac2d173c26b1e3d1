"""Zero-code instrumentation of an EMA of the model evaluated between steps (a plain copy
updated with ``lerp_``, or torch's AveragedModel): from its ``ema.eval()`` to its
``ema.train()`` is an evaluation, in neither step, while a frozen teacher's forward in a step
stays the step's. In process on a fake clock, then one real 2-rank launch."""

from __future__ import annotations

import copy
import time

import pytest
import torch
from torch import nn

from pardash.telemetry import api, schema
from pardash.trainer.instrument import SETTLE_STEPS
from test_autorun import _launch, _steps, _timed_step
from test_autorun_saves import on_a_fake_clock

SCRIPTS = __import__("pathlib").Path(__file__).resolve().parent / "scripts"


def _ema_of(model: nn.Module, kind: str) -> nn.Module:
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    if kind == "averaged":
        return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.99))
    return copy.deepcopy(model).requires_grad_(False)  # (timm's ModelEmaV3, ema-pytorch)


def _update(ema: nn.Module, model: nn.Module) -> None:
    if hasattr(ema, "update_parameters"):
        ema.update_parameters(model)
    else:
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.lerp_(p, 0.01)


def _run(monkeypatch, body) -> tuple[list[dict], list[tuple[str, dict]]]:
    """``body(model, opt, clock)`` on an instrumented rank whose step clock and
    ``time.perf_counter`` (an evaluation's length) are both the fake ``clock[0]``."""
    inst, rep, clock = on_a_fake_clock(monkeypatch)
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        body(model, opt, clock)
        inst.finish()
    finally:
        inst.uninstall()
        api._reset_for_tests()
    return rep.steps, rep.events


@pytest.mark.parametrize("work", ["after its forward", "before its forward"])
@pytest.mark.parametrize("kind", ["copy", "averaged"])
def test_an_emas_evaluation_runs_from_its_eval_to_its_train(monkeypatch, kind, work):
    # Every 4 steps (the roots long settled) the script evaluates its EMA: ema.eval(), a
    # forward under no_grad, 50 ms saving a sample grid (or before the forward), ema.train().
    # A plain copy: "evals: 3" in the script's words, no eval event, and its 50 ms in the next
    # step's data; an AveragedModel: "evaluations 3, 0.0024 s in all", ended at its forward,
    # the work after it the next step's data (or, before it, in neither). Review 284.
    def body(model, opt, clock):
        ema = _ema_of(model, kind)
        for step in range(1, 13):
            _timed_step(model, opt, clock)  # 10 ms data, 20 ms backward, 30 ms optimizer
            _update(ema, model)
            if step % 4 == 0:
                ema.eval()
                clock[0] += 0.050 if work == "before its forward" else 0.0
                with torch.no_grad():
                    ema(torch.randn(4, 8))
                clock[0] += 0.050 if work == "after its forward" else 0.0
                ema.train()

    steps, events = _run(monkeypatch, body)
    assert [s["step"] for s in steps] == list(range(1, 13))
    evals = [(fields["step"], fields["duration_s"]) for name, fields in events if name == "eval"]
    assert evals == [(4, pytest.approx(0.050)), (8, pytest.approx(0.050)), (12, pytest.approx(0.050))]
    after = steps[1:]  # (the first step's clock starts at its first forward)
    assert [s["data_s"] for s in after] == pytest.approx([0.010] * 11)
    assert [s["step_s"] for s in after] == pytest.approx([0.060] * 11)


def test_a_copys_evaluation_without_train_is_told_by_its_weights_written_in_place(monkeypatch):
    # The script puts its EMA in eval mode for each evaluation and never back: nothing ends
    # the evaluation but its last forward. Its first is a teacher's forward as far as anything
    # tells (no earlier look at its weights); from the second, its weights, written in place
    # since, make it an average: an evaluation from its ema.eval(), the work before its
    # forward included, its forwards seen though the roots settled long before.
    def body(model, opt, clock):
        ema = _ema_of(model, "copy")
        for step in range(1, 13):
            _timed_step(model, opt, clock)
            _update(ema, model)
            if step % 4 == 0:
                ema.eval()
                clock[0] += 0.050
                with torch.no_grad():
                    for _ in range(2):
                        clock[0] += 0.020
                        ema(torch.randn(4, 8))

    steps, events = _run(monkeypatch, body)
    assert SETTLE_STEPS < 4
    evals = [(fields["step"], fields["duration_s"]) for name, fields in events if name == "eval"]
    assert evals == [(8, pytest.approx(0.090)), (12, pytest.approx(0.090))]
    assert [s["data_s"] for s in steps[1:]] == pytest.approx([0.010] * 3 + [0.100] + [0.010] * 7)  # (step 5: the first)


@pytest.mark.parametrize("back", [False, True], ids=["left in eval mode", "train() after"])
@pytest.mark.parametrize("teacher_kind", ["frozen", "momentum"])
def test_a_teacher_put_in_eval_mode_each_step_is_still_the_steps(monkeypatch, back, teacher_kind):
    # A frozen distillation teacher put in eval mode at the top of each step (no optimizer
    # holds it, its weights never written): its forward is the step's, as in training mode.
    # Put back in training mode after the student's backward it is still no evaluation: its
    # eval() and train() are in the step, not between two. So is a momentum teacher's (BYOL,
    # MoCo: an EMA of the student, written in place after each step).
    def body(student, opt, clock):
        teacher = copy.deepcopy(student).requires_grad_(False)
        for _ in range(12):
            if teacher_kind == "momentum":
                _update(teacher, student)
            teacher.eval()
            clock[0] += 0.010
            x = torch.randn(6, 8)
            with torch.no_grad():
                target = teacher(x).softmax(-1)
            clock[0] += 0.050  # the teacher's forward
            loss = nn.functional.cross_entropy(student(x), target)
            clock[0] += 0.020
            loss.backward()
            if back:
                teacher.train()
            clock[0] += 0.030
            opt.step()
            opt.zero_grad()

    steps, events = _run(monkeypatch, body)
    assert [name for name, _ in events] == []
    assert [s["step_s"] for s in steps[1:]] == pytest.approx([0.110] * 11)


@pytest.mark.slow
def test_a_launched_gans_ema_evaluations_are_timed_whole(tmp_path):
    # A GAN whose generator's EMA (rank 0: a plain copy, rank 1: an AveragedModel) is evaluated
    # every 4 steps: 20 ms of work, its forward, 30 ms more, between ema.eval() and ema.train().
    # Rank 0 had no eval event and its 50 ms in the next step's data; rank 1's evaluations
    # lasted its forward alone (0.0024 s for 20), the 30 ms after it the next step's data.
    proc, msgs = _launch(tmp_path, str(SCRIPTS / "ema_evaluations.py"), "12", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    import re

    own = {(int(r), int(s)): float(t) for r, s, t in re.findall(r"^ema rank (\d) step (\d+) took (\S+)$", proc.stdout, re.M)}
    assert sorted(own) == [(r, s) for r in (0, 1) for s in (4, 8, 12)]
    evals = {(m.rank, m.step): m.duration_s for m in msgs if isinstance(m, schema.Event) and m.name == "eval"}
    assert sorted(evals) == sorted(own)
    for key, took in own.items():
        assert evals[key] >= took  # (its span holds the script's, from inside ema.eval() to inside ema.train())
    for rank in (0, 1):
        steps = _steps(msgs, rank)
        assert [s.step for s in steps] == list(range(1, 13))
        for s in steps:  # the step after each evaluation: no more than a fraction of it in its data
            if s.step in (5, 9):
                assert s.data_s < own[(rank, s.step - 1)] / 2, (rank, s.step, s.data_s)


@pytest.mark.parametrize("kind", ["copy", "averaged"])
def test_an_emas_evaluation_without_train_ends_as_the_next_training_batch_is_asked(monkeypatch, kind):
    # timm's validate() puts the EMA in eval mode and never back: its evaluation ended at its
    # last forward, the 50 ms after it (its metrics, a sample grid saved) the next step's data
    # (60 ms, not its batch's 10). The next batch asked of the training loader ends it. (A
    # plain copy's first evaluation is not told from a teacher's forward: see above.)
    from test_autorun import _data, _slow_loader

    def body(model, opt, clock):
        ema = _ema_of(model, kind)
        batches = iter(_slow_loader(clock, _data(64), 4))  # 10 ms a batch
        for step in range(1, 14):
            x, y = next(batches)
            loss = nn.functional.cross_entropy(model(x), y)
            clock[0] += 0.020
            loss.backward()
            clock[0] += 0.030
            opt.step()
            opt.zero_grad()
            _update(ema, model)
            if step % 4 == 0:
                ema.eval()
                with torch.no_grad():
                    clock[0] += 0.020
                    ema(torch.randn(4, 8))
                clock[0] += 0.050

    steps, events = _run(monkeypatch, body)
    evals = [(fields["step"], fields["duration_s"]) for name, fields in events if name == "eval"]
    told = (4, 8, 12) if kind == "averaged" else (8, 12)
    assert evals == [(s, pytest.approx(0.070)) for s in told]
    data = [0.080 if kind == "copy" and s["step"] == 5 else 0.010 for s in steps]
    assert [s["data_s"] for s in steps] == pytest.approx(data)
