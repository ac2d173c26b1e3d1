"""Zero-code instrumentation of a script that never calls an optimizer's step (its update by
hand, its gradients all-reduced by the script): its iterations are steps once 20 have ended with
their parameters updated, the first ones too. In process on a fake clock, then real 2-rank
launches. (It showed "starting" throughout, every column "–": "done, 2 rank(s), no step taken".)
Passes that change no parameter before an optimizer's first step (gradient statistics, PGD's)
are no steps of their own."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from pardash.telemetry import schema
from pardash.trainer.instrument import NO_STEP_UNCOUNTED, NO_STEP_WARNING
from test_autorun import SCRIPTS, _batch, _launch, _model, _printed_losses, _steps
import test_autorun_sync

hooked = test_autorun_sync.hooked
"""The fixture: an Instrument of rank 1 of 2 on a fake clock (``clock[0]``, which the test moves)."""


def _all_reduce(inst, clock, wait_s: float):
    """torch.distributed.all_reduce as pardash wraps it, on a stand-in that waits ``wait_s``."""

    def all_reduce(*args, **kwargs):
        clock[0] += wait_s

    return inst._timed_by_hand(inst._wrap_collective("all_reduce"))(all_reduce)


def _by_hand(model, clock, all_reduce, reset: str, micro: int = 1) -> float:
    """One iteration by hand: 10 ms loading its batch, 5 ms of forward, 3 ms of backward (each
    ``micro`` times, their gradients accumulated), then each gradient all-reduced (4 ms) and
    stepped (1 ms). Its gradients reset by ``zero_grad`` after the forward, zeroed in place
    (``p.grad.zero_()``) or set to None after the update. Its loss, summed over micro-batches."""
    total = 0.0
    for k in range(micro):
        clock[0] += 0.010
        x, y = _batch()
        out = model(x)
        out.register_hook(lambda g: clock.__setitem__(0, clock[0] + 0.003))
        loss = nn.functional.cross_entropy(out, y)
        clock[0] += 0.005
        if reset == "zero_grad" and k == 0:
            model.zero_grad()
        loss.backward()
        total += loss.item()
    with torch.no_grad():
        for p in model.parameters():
            all_reduce(p.grad)
            clock[0] += 0.001
            p.data -= 0.1 * p.grad
            if reset == "grad = None":
                p.grad = None
            elif reset == "grad.zero_()":
                p.grad.zero_()
    return total


@pytest.mark.parametrize("reset", ["zero_grad", "grad = None", "grad.zero_()"])
def test_iterations_updated_by_hand_are_steps_from_the_first(hooked, reset):
    inst, rep, clock = hooked
    all_reduce = _all_reduce(inst, clock, 0.004)
    model = _model()
    losses = [_by_hand(model, clock, all_reduce, reset) for _ in range(25)]
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, 26))
    assert [s["loss"] for s in rep.steps] == pytest.approx(losses)
    assert [s["samples"] for s in rep.steps] == [6] * 25 and all("custom" not in s for s in rep.steps)
    assert rep.events == [("warning", NO_STEP_WARNING.format(n=20))]
    steps = rep.steps[1:]  # (the first one's clock starts at its forward)
    # Its update to the end of its last all_reduce is its optimizer phase, the all_reduces its
    # comm; the last parameter's update and the next batch's loading, the next step's data.
    assert [s["data_s"] for s in steps] == pytest.approx([0.011] * 24)
    assert [s["forward_s"] for s in steps] == pytest.approx([0.005] * 24)
    assert [s["backward_s"] for s in steps] == pytest.approx([0.003] * 24)
    assert [s["optimizer_s"] for s in steps] == pytest.approx([0.003] * 24)
    assert [s["comm_s"] for s in steps] == pytest.approx([0.016] * 24)
    assert [s["step_s"] for s in steps] == pytest.approx([0.038] * 24)
    # the straggler signal: from the last step's end to its first all_reduce
    assert [s["self_s"] for s in steps] == pytest.approx([0.019] * 24)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    for s in rep.steps:
        assert (s["mem"].params_bytes, s["mem"].optim_bytes) == (nbytes, 0)
        assert s["mem"].grads_bytes == nbytes


def test_micro_batches_accumulated_for_an_optimizer_stepping_late_are_one_step(hooked):
    # 24 micro-batches a step, more than the 20 passes after which steps are counted by hand:
    # their gradients are kept, so none is a step of its own, and the optimizer's steps count.
    inst, rep, clock = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        for _ in range(24):
            x, y = _batch()
            nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2]
    assert [s["custom"] for s in rep.steps] == [{"micro_batches": 24.0}] * 2
    assert [s["samples"] for s in rep.steps] == [144, 144]
    assert NO_STEP_WARNING.format(n=20) not in [m for _, m in rep.events]


@pytest.mark.parametrize("by_hand", [10, 30])
def test_an_optimizer_stepping_after_iterations_by_hand_counts_from_there(hooked, by_hand):
    # A warm-up by hand, then an optimizer: each iteration one step, none counted twice,
    # whether the optimizer's first step came before or after the counting by hand began.
    inst, rep, clock = hooked
    all_reduce = _all_reduce(inst, clock, 0.0)
    model = _model()
    losses = [_by_hand(model, clock, all_reduce, "grad = None") for _ in range(by_hand)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        x, y = _batch()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    inst.finish()
    if by_hand < 20:  # (not counted yet: they were the first step's micro-batches, as before)
        assert [s["step"] for s in rep.steps] == [1, 2, 3, 4, 5]
        assert rep.steps[0]["loss"] == pytest.approx(sum(losses[: by_hand + 1]))
        assert [s["loss"] for s in rep.steps[1:]] == pytest.approx(losses[by_hand + 1 :])
    else:
        assert [s["step"] for s in rep.steps] == list(range(1, by_hand + 6))
        assert [s["loss"] for s in rep.steps] == pytest.approx(losses)
        assert [s["samples"] for s in rep.steps] == [6] * (by_hand + 5)


def test_micro_batches_accumulated_by_hand_are_one_step_and_warned_of_once(hooked):
    # 2 micro-batches an update, their gradients set to None after it: 25 steps of 2, and the
    # one warning of steps counted by hand (it also said no step was counted, after 20 passes).
    inst, rep, clock = hooked
    all_reduce = _all_reduce(inst, clock, 0.0)
    model = _model()
    losses = [_by_hand(model, clock, all_reduce, "grad = None", micro=2) for _ in range(25)]
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, 26))
    assert [s["loss"] for s in rep.steps] == pytest.approx(losses)
    assert [s["custom"] for s in rep.steps] == [{"micro_batches": 2.0}] * 25
    assert rep.events == [("warning", NO_STEP_WARNING.format(n=20))]


@pytest.mark.parametrize("reset", ["zero_grad", "grad = None"])
def test_passes_changing_no_parameter_before_the_first_optimizer_step_are_not_steps(hooked, reset):
    # Gradient statistics gathered before training (a Fisher information's, EWC/SNIP): 30
    # forward and backward passes, each's gradients reset, all-reduced by hand and the
    # parameters left as they were; then 5 optimizer steps. 5 steps, the first with the 30
    # passes as its micro-batches (it read 35: the 30 passes as steps 1-30, the optimizer's after).
    inst, rep, clock = hooked
    all_reduce = _all_reduce(inst, clock, 0.002)
    model = _model()
    fisher = [torch.zeros_like(p) for p in model.parameters()]
    for _ in range(30):
        x, y = _batch()
        if reset == "zero_grad":
            model.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for f, p in zip(fisher, model.parameters()):
                f += p.grad**2
                all_reduce(f)
                if reset == "grad = None":
                    p.grad = None
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        x, y = _batch()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4, 5]
    assert rep.steps[0]["custom"] == {"micro_batches": 31.0}
    # (it warned of steps counted at updates by hand: there were none)
    assert rep.events == [("warning", NO_STEP_UNCOUNTED.format(n=20))]


@pytest.mark.parametrize("zero_each", [False, True])
def test_adversarial_training_is_a_step_an_optimizer_step_its_pgd_passes_in_it(hooked, zero_each):
    # Each batch's perturbation found by 8 PGD passes (a forward and backward on the batch plus
    # it, the gradients zeroed before each or only before the training pass), then a pass on
    # the perturbed batch and an optimizer step: 4 steps. (The optimizer's zero_grad after PGD
    # passes was taken for a skipped iteration's: 6 steps, or 20 zeroed before each pass.)
    inst, rep, clock = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        x, y = _batch()
        delta = torch.zeros_like(x, requires_grad=True)
        for _ in range(8):
            if zero_each:
                opt.zero_grad()
            nn.functional.cross_entropy(model(x + delta), y).backward()
            delta.data = (delta + 0.01 * delta.grad.sign()).clamp(-0.1, 0.1)
            delta.grad.zero_()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x + delta.detach()), y).backward()
        opt.step()
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4]
    assert [s["custom"] for s in rep.steps] == [{"micro_batches": 9.0}] * 4


def test_a_script_ending_without_an_update_after_its_last_backward_has_no_step_for_it(hooked):
    # 21 iterations by hand, then one more forward and backward and no update: 21 steps.
    inst, rep, clock = hooked
    all_reduce = _all_reduce(inst, clock, 0.0)
    model = _model()
    for _ in range(21):
        _by_hand(model, clock, all_reduce, "grad = None")
    x, y = _batch()
    nn.functional.cross_entropy(model(x), y).backward()
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, 22))


# -- real launches ------------------------------------------------------------------------------

# One launch serves the test: 2 ranks, rank 1 loading its batches 50 ms slower, 2 micro-batches
# an update, the gradients zeroed in place after it (p.grad.zero_(), as PyTorch's tutorials: it
# read 0 steps, and with two warnings, one saying no step was counted). 40 steps: the straggler
# detector's 10 warm-up steps, then the two windows of 10 a verdict needs.
BY_HAND_STEPS = 40


@pytest.mark.slow
def test_a_script_updating_by_hand_shows_its_steps_losses_memory_and_straggler(tmp_path):
    proc, msgs = _launch(tmp_path, str(SCRIPTS / "update_by_hand.py"), "--steps", str(BY_HAND_STEPS),
                         "--slow-rank", "1", "--slow-s", "0.025", "--reset", "zero_", "--accum", "2")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"done, 2 rank(s), step {BY_HAND_STEPS};" in proc.stdout  # (it read "no step taken")
    printed = _printed_losses(proc.stdout)
    assert [s for s, _ in printed] == list(range(BY_HAND_STEPS))  # (the script counts from 0)
    for rank in (0, 1):
        steps = _steps(msgs, rank)
        assert [s.step for s in steps] == list(range(1, BY_HAND_STEPS + 1))
        for s in steps:
            assert s.samples == 256 and s.custom == {"micro_batches": 2.0} and s.mem is not None
            assert s.mem.params_bytes == s.mem.grads_bytes > 0 and s.mem.optim_bytes == 0
            assert s.optimizer_s > 0 and s.comm_s > 0 and s.self_s is not None
            assert s.data_s + s.forward_s + s.backward_s + s.optimizer_s + s.comm_s == pytest.approx(s.step_s)
        if rank == 0:
            assert [s.loss for s in steps] == pytest.approx([float(loss) for _, loss in printed], abs=2e-6)
    warnings = [(m.rank, m.message) for m in msgs if isinstance(m, schema.Event) and m.name == "warning"]
    assert sorted(warnings) == [(0, NO_STEP_WARNING.format(n=20)), (1, NO_STEP_WARNING.format(n=20))]
    verdicts = [m for m in msgs if isinstance(m, schema.Verdict) and m.verdict == "straggler"]
    assert [(v.rank, v.cause) for v in verdicts] == [(1, "data")]


@pytest.mark.slow
def test_gradient_statistics_before_training_are_no_steps_of_their_own(tmp_path):
    # 30 passes summing squared gradients (a Fisher information's), each's gradients zeroed and
    # all-reduced, the parameters untouched, then 40 optimizer steps: 40 steps (it read 70).
    proc, msgs = _launch(tmp_path, str(SCRIPTS / "fisher_then_train.py"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # (then the log, or on a loaded host first how much of each step was between steps)
    assert re.search(r"done, 2 rank\(s\), step 40[,;] ", proc.stdout), proc.stdout[-2000:]
    for rank in (0, 1):
        steps = _steps(msgs, rank)
        assert [s.step for s in steps] == list(range(1, 41))
        assert steps[0].custom == {"micro_batches": 31.0}
    warnings = [m.message for m in msgs if isinstance(m, schema.Event) and m.name == "warning"]
    assert warnings == [NO_STEP_UNCOUNTED.format(n=20)] * 2
