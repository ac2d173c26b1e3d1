"""Zero-code instrumentation: the hooks' step boundaries in process, then real torchrun runs
of plain scripts under `pardash launch` (and under torchrun alone, to compare losses)."""

from __future__ import annotations

import gc
import json
import re
import statistics
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from helpers import pardash_env, wait_for
from instrumented import instrumented
from pardash.telemetry import memory, modelfacts, schema
from pardash.telemetry.env import RankIdentity
from pardash.telemetry.logreader import load_log
from pardash.trainer.instrument import NO_STEP_UNCOUNTED, NO_STEP_WARNING, SETTLE_STEPS

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


SCRIPTS = ROOT / "tests" / "scripts"
DEMOS = ROOT / "demos"


# -- the hooks, in this process --------------------------------------------------------------


class RecordingReporter:
    """Stands in for a Reporter: keeps what would have been published."""

    enabled = True

    def __init__(self) -> None:
        self.identity = RankIdentity(rank=0, local_rank=0, world_size=1, node=0, host="here", restart=0)
        self.steps: list[dict] = []
        self.events: list[tuple[str, str]] = []
        self.hellos: list[dict] = []
        self.phases: list[str] = []
        self.last_step = 0

    def step(self, **fields) -> bool:
        self.steps.append(fields)
        self.last_step = fields["step"]
        return True

    def hello(self, **fields) -> bool:
        self.hellos.append(fields)
        return True

    def event(self, name: str, message: str = "", **fields) -> bool:
        self.events.append((name, message))
        return True

    def set_phase(self, phase: str, waits_in: str = "") -> None:
        self.phases.append(phase)


@pytest.fixture
def hooked():
    """An Instrument installed on this process's torch, removed after the test."""
    rep = RecordingReporter()
    with instrumented(rep) as inst:
        yield inst, rep


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _batch(n: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 8), torch.randint(0, 4, (n,))


def _train(model: nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    """``steps`` plain steps: a forward, a backward, an optimizer step."""
    for _ in range(steps):
        x, y = _batch()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()


def test_an_activation_sent_backward_with_its_gradient_is_no_loss(hooked):
    # Pipeline parallelism by hand: the first stage sends its activations backward with the
    # gradient the next stage sent back (``act.backward(grad)``) and has no loss of its own;
    # sum(act * grad) was read as its loss ("-0.2806", "-4.198"). Per-sample losses sent
    # backward with their weights still are the step's loss: a vector, or a loss function's
    # output (token losses, reduction="none").
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        x, _y = _batch()
        act = model(x)
        act.backward(torch.randn_like(act))
        opt.step()
        opt.zero_grad()
    per = []
    for _ in range(2):
        x, y = _batch()
        losses = nn.functional.cross_entropy(model(x).unsqueeze(0).expand(2, -1, -1).transpose(1, 2), y.expand(2, -1), reduction="none")
        assert losses.dim() == 2  # (token losses: 2 x 6)
        losses.backward(torch.full_like(losses, 1 / losses.numel()))
        per.append(losses.mean().item())
        opt.step()
        opt.zero_grad()
    inst.finish()
    assert [s.get("loss") for s in rep.steps[:2]] == [None, None]
    assert [s["loss"] for s in rep.steps[2:]] == [pytest.approx(v) for v in per]


def test_gradients_taken_by_hand_are_the_steps_backward_and_loss(hooked):
    # Data parallel by hand: grads = torch.autograd.grad(loss, params), all-reduced, set as
    # p.grad. The loss read None and the backward's time counted as forward's. A gradient
    # penalty's torch.autograd.grad (of the inputs, with a graph) is not the step's backward.
    inst, rep = hooked
    model = _model()
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.1)
    losses = []
    for _ in range(3):
        x, y = _batch()
        x.requires_grad_(True)
        out = model(x)
        (penalty,) = torch.autograd.grad(out.sum(), x, create_graph=True)
        loss = nn.functional.cross_entropy(out, y) + 0.0 * penalty.pow(2).sum()
        for p, g in zip(params, torch.autograd.grad(loss, params)):
            p.grad = g
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    inst.finish()
    assert [s["loss"] for s in rep.steps] == [pytest.approx(v) for v in losses]
    assert all(s["backward_s"] > 0 for s in rep.steps)


def test_one_step_per_optimizer_step_with_phases_loss_and_memory(hooked):
    inst, rep = hooked
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()  # a root call without parameters: not the model
    losses = []
    for _ in range(5):
        x, y = _batch()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4, 5]
    for s, loss in zip(rep.steps, losses):
        assert s["loss"] == pytest.approx(loss)
        assert s["samples"] == 6 and s["lr"] == pytest.approx(1e-3)
        phases = sum(s[f"{p}_s"] for p in ("data", "forward", "backward", "optimizer"))
        assert s["step_s"] > 0 and phases == pytest.approx(s["step_s"])
        assert s["self_s"] == pytest.approx(s["step_s"])  # one process: the whole step is its own
        assert s["mem"].params_bytes == s["mem"].params_full_bytes > 0
        assert s["mem"].optim_bytes >= 2 * s["mem"].params_bytes  # AdamW: exp_avg, exp_avg_sq, step
    assert inst.roots == [model] and inst.strategy == "single"
    hello = rep.hellos[-1]
    assert hello["source"] == "auto" and hello["strategy"] == "single"
    assert hello["params_count"] == sum(p.numel() for p in model.parameters())


def test_gradient_accumulation_is_one_step_of_several_micro_batches(hooked):
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = []
    for micro in (3, 3, 3, 3, 1):  # an epoch's remainder of one micro-batch last
        total = 0.0
        for _ in range(micro):
            x, y = _batch()
            loss = nn.functional.cross_entropy(model(x), y) / micro
            loss.backward()
            total += loss.item()
        opt.step()
        opt.zero_grad()
        expected.append(total)
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4, 5]
    for s, loss, micro in zip(rep.steps, expected, (3, 3, 3, 3, 1)):
        # (the last step's one was not said: the report read "3 at the last step")
        assert s["samples"] == 6 * micro and s["custom"] == {"micro_batches": float(micro)}
        assert s["loss"] == pytest.approx(loss)


def test_two_optimizers_stepped_together_are_one_step(hooked):
    inst, rep = hooked
    body, head = nn.Linear(8, 16), nn.Linear(16, 4)
    model = nn.Sequential(body, nn.ReLU(), head)
    opts = [torch.optim.AdamW(body.parameters()), torch.optim.SGD(head.parameters(), lr=0.1)]
    for _ in range(6):
        x, y = _batch()
        nn.functional.cross_entropy(model(x), y).backward()
        for o in opts:
            o.step()
        for o in opts:
            o.zero_grad()
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4, 5, 6]
    assert all(s["mem"].optim_bytes > 0 for s in rep.steps)
    assert inst.optimizers == opts


def test_two_optimizers_each_zeroing_after_its_step_count_every_gradient_held(hooked):
    # for o in opts: o.step(); o.zero_grad() -- at the second optimizer's post the first has
    # let its gradients go. The step's figure is the most held in the round (at the first
    # post), on every step: the cached count of the second post (recounted every FULL_EVERY
    # calls) used to stand for both, and the grads column read the head's alone.
    inst, rep = hooked
    body, head = nn.Linear(8, 64), nn.Linear(64, 4)
    model = nn.Sequential(body, nn.ReLU(), head)
    opts = [torch.optim.AdamW(body.parameters()), torch.optim.SGD(head.parameters(), lr=0.1)]
    for _ in range(2 * memory.FULL_EVERY + 5):
        x, y = _batch()
        nn.functional.cross_entropy(model(x), y).backward()
        for o in opts:
            o.step()
            o.zero_grad()
    inst.finish()
    every = sum(p.numel() * p.element_size() for p in model.parameters())
    assert len(rep.steps) == 2 * memory.FULL_EVERY + 5
    assert {s["mem"].grads_bytes for s in rep.steps} == {every}
    assert {s["mem"].grads_full_bytes for s in rep.steps} == {every}
    # the optimizer state is the round's last count: both optimizers' (AdamW's two moments
    # and its step count; SGD without momentum keeps none)
    assert rep.steps[-1]["mem"].optim_bytes >= 2 * sum(p.numel() * 4 for p in body.parameters())


def test_a_gans_iteration_is_one_step_though_its_optimizers_step_between_passes(hooked):
    # Each optimizer steps after its own forward/backward: the discriminator's, then the
    # generator's. It used to count two steps an iteration, their losses and rates alternating.
    inst, rep = hooked
    gen, disc = nn.Linear(4, 8), nn.Linear(8, 1)
    opt_d = torch.optim.SGD(disc.parameters(), lr=0.1)
    opt_g = torch.optim.SGD(gen.parameters(), lr=0.02)
    losses = []
    for _ in range(4):
        loss_d = disc(gen(torch.randn(5, 4)).detach()).mean()
        loss_d.backward()
        opt_d.step()
        opt_d.zero_grad()
        loss_g = (-disc(gen(torch.randn(5, 4)))).mean()
        loss_g.backward()
        opt_g.step()
        opt_g.zero_grad()
        losses.append(loss_d.item() + loss_g.item())
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4]
    for s, loss in zip(rep.steps, losses):
        assert s["loss"] == pytest.approx(loss)  # both backward passes' losses, summed
        assert s["lr"] == pytest.approx(0.1)  # the first optimizer's
        assert "custom" not in s  # one micro-batch: each model's backward is its own (it read "micro_batches 2")
        assert s["samples"] == 5  # one batch an iteration (counted at each model's pass, it read 10)
        phases = sum(s[f"{p}_s"] for p in ("data", "forward", "backward", "optimizer"))
        assert phases == pytest.approx(s["step_s"])
    assert rep.hellos[-1]["params_count"] == sum(p.numel() for m in (gen, disc) for p in m.parameters())


def _gan_iteration(gen, disc, opt_d, opt_g, *, g_steps: bool = True, clock=None, gap: float = 0.0, fakes_grad: bool = True) -> float:
    with torch.set_grad_enabled(fakes_grad):
        fake = gen(torch.randn(5, 4))
    loss_d = disc(fake.detach()).mean()
    loss_d.backward()
    opt_d.step()
    opt_d.zero_grad()
    if not g_steps:
        return loss_d.item()
    if clock is not None:
        clock[0] += gap  # loading the generator's batch
    loss_g = (-disc(gen(torch.randn(5, 4)))).mean()
    loss_g.backward()
    opt_g.step()
    opt_g.zero_grad()
    return loss_d.item() + loss_g.item()


@pytest.mark.parametrize(
    "pattern, fakes_grad",
    [
        ([True, False] * 3, True),  # the generator steps every other iteration
        ([False, True] * 20, True),  # ... from the second
        ([False, True] * 4, False),  # ... its fakes for the discriminator made under no_grad
        ([False] * 3 + [True] * 3, True),  # the discriminator warms up alone first
        ([True, True, False, True, True], True),
    ],
    ids=["every-other", "every-second", "every-second-no-grad-fakes", "warm-up", "one-skipped"],
)
def test_a_gan_iteration_is_one_step_however_often_the_generator_steps(hooked, pattern, fakes_grad):
    # A round of the last size was cut short, or one optimizer longer, and split from then on.
    # The generator first stepping in the second iteration (or after a warm-up): the
    # discriminator's step was published at its post-hook (one optimizer so far), and the
    # generator's passes went to the next step (step 2 the discriminator's loss alone, step 3
    # both models' losses of two iterations, 10 samples and the generator's rate).
    inst, rep = hooked
    gen, disc = nn.Linear(4, 8), nn.Linear(8, 1)
    opt_d, opt_g = torch.optim.SGD(disc.parameters(), lr=0.1), torch.optim.SGD(gen.parameters(), lr=0.02)
    losses = [_gan_iteration(gen, disc, opt_d, opt_g, g_steps=g, fakes_grad=fakes_grad) for g in pattern]
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, len(pattern) + 1))
    assert [s["loss"] for s in rep.steps] == pytest.approx(losses)
    assert [s["samples"] for s in rep.steps] == [5] * len(pattern)
    assert [s["lr"] for s in rep.steps] == pytest.approx([0.1] * len(pattern))  # the discriminator's
    assert [s.get("custom", {}).get("micro_batches", 1.0) for s in rep.steps] == [1.0] * len(pattern)


def test_between_two_optimizers_steps_a_load_is_data_and_a_crash_there_is_no_step(hooked, monkeypatch):
    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    gen, disc = nn.Linear(4, 8), nn.Linear(8, 1)
    opt_d, opt_g = torch.optim.SGD(disc.parameters(), lr=0.1), torch.optim.SGD(gen.parameters(), lr=0.02)
    for _ in range(3):
        _gan_iteration(gen, disc, opt_d, opt_g, clock=clock, gap=0.030)
    # the fourth iteration dies between the discriminator's step and the generator's
    _gan_iteration(gen, disc, opt_d, opt_g, g_steps=False)
    inst.finish(failed=True)
    assert [s["step"] for s in rep.steps] == [1, 2, 3]
    for s in rep.steps:
        assert s["optimizer_s"] == pytest.approx(0.0) and s["data_s"] == pytest.approx(0.030)


@pytest.fixture
def one_rank_group(tmp_path):
    """A gloo process group of one rank, destroyed after the test (and its DDP models: a DDP
    model freed after its group was destroyed can hang in its destructor, joining the group's
    threads)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    gc.collect()
    dist.destroy_process_group()


def test_a_gan_of_two_ddp_models_counts_both_models_buckets(hooked, one_rank_group):
    # Only the newest DDP's buckets were counted: the generator's gradient buckets were missing
    # from what the rank held.
    inst, rep = hooked
    gen = nn.parallel.DistributedDataParallel(nn.Linear(4, 8))
    disc = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    opt_d, opt_g = torch.optim.SGD(disc.parameters(), lr=0.1), torch.optim.SGD(gen.parameters(), lr=0.02)
    for _ in range(4):
        _gan_iteration(gen, disc, opt_d, opt_g, fakes_grad=False)
    inst.finish()
    nbytes = {name: sum(p.numel() * p.element_size() for p in m.parameters()) for name, m in (("gen", gen), ("disc", disc))}
    mem = rep.steps[-1]["mem"]
    assert mem.params_bytes == nbytes["gen"] + nbytes["disc"]
    # one flat buffer per bucket, as large as the gradients it reduces: both models'
    assert mem.buckets_bytes == mem.grads_bytes == nbytes["gen"] + nbytes["disc"]


def test_a_pass_without_grad_in_training_mode_is_part_of_the_step(hooked, monkeypatch):
    # A GAN's fakes or a distillation teacher's targets, under no_grad: the step's, and the
    # load before them its data (an evaluation is a model in eval mode).
    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    teacher, student = _model(), _model()
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    for _ in range(4):
        clock[0] += 0.020  # the batch
        x, _y = _batch()
        with torch.no_grad():
            target = teacher(x).softmax(-1)
        clock[0] += 0.050  # the teacher's forward
        loss = nn.functional.cross_entropy(student(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad()
    inst.finish()
    assert [name for name, _ in rep.events] == []  # no evaluation
    assert [s["step_s"] for s in rep.steps[1:]] == pytest.approx([0.070] * 3)
    assert inst.roots == [student]


def test_a_closure_optimizers_passes_are_its_own(hooked, monkeypatch):
    # LBFGS evaluates its closure again and again in one step: the first pass is the step's
    # forward and backward (as a Lightning closure's is), the later ones the optimizer's work.
    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    model = _model()
    opt = torch.optim.LBFGS(model.parameters(), max_iter=4)
    x, y = _batch()
    first_losses, counts = [], []
    for _ in range(3):
        passes = []
        clock[0] += 0.010  # the batch

        def closure():
            opt.zero_grad()
            out = model(x)
            out.register_hook(lambda g: clock.__setitem__(0, clock[0] + 0.003))  # backward
            loss = nn.functional.cross_entropy(out, y)
            clock[0] += 0.005  # the loss, in the forward
            loss.backward()
            passes.append(loss.item())
            return loss

        opt.step(closure)
        first_losses.append(passes[0])  # what the step starts from (LBFGS's step returns it)
        counts.append(len(passes))
    inst.finish()
    assert [s["loss"] for s in rep.steps] == pytest.approx(first_losses)
    for s, n in zip(rep.steps[1:], counts[1:]):
        assert s["samples"] == 6 and "custom" not in s  # one batch, not a micro-batch a pass
        assert s["data_s"] == pytest.approx(0.010)
        assert s["forward_s"] + s["backward_s"] == pytest.approx(0.008)  # the first pass
        assert s["optimizer_s"] == pytest.approx(0.008 * (n - 1))  # the others
    assert max(counts) > 1


@pytest.mark.parametrize("accum", [1, 2])
def test_a_closure_that_runs_the_steps_training_pass_is_forward_and_backward(hooked, monkeypatch, one_rank_group, accum):
    # PyTorch Lightning's automatic optimization: the LightningModule's training_step and the
    # backward run in a closure that the DDP model's optimizer.step(closure=...) calls; with
    # accumulate_grad_batches, the micro-batches before the last call the closure directly,
    # under no_sync. All was the optimizer's: no model found (strategy unknown, no buckets), no
    # forward or backward time, and the last micro-batch's loss dropped.
    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    model = nn.parallel.DistributedDataParallel(_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    expected = []
    for _ in range(4):
        total = 0.0
        for i in range(accum):
            clock[0] += 0.010  # the loader's next batch
            x, y = _batch()

            def closure():  # training_step, zero_grad (first micro-batch), backward
                out = model(x)
                out.register_hook(lambda g: clock.__setitem__(0, clock[0] + 0.003))  # backward
                loss = nn.functional.cross_entropy(out, y) / accum
                clock[0] += 0.004  # the loss, in the forward
                if i == 0:
                    opt.zero_grad()
                loss.backward()
                return loss

            def wrapped():  # the precision plugin's: the closure, then gradient clipping
                loss = closure()
                clock[0] += 0.002
                return loss

            if i < accum - 1:
                with model.no_sync():
                    loss = closure()
            else:
                loss = opt.step(closure=wrapped)
                sched.step()
            total += loss.item()
        expected.append(total)
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4]
    assert [s["loss"] for s in rep.steps] == pytest.approx(expected)
    assert [s["lr"] for s in rep.steps] == pytest.approx([0.1, 0.05, 0.025, 0.0125])
    for s in rep.steps:
        assert s["samples"] == 6 * accum
        assert s.get("custom", {}).get("micro_batches", 1.0) == accum
    for s in rep.steps[1:]:  # (the first step's clock starts at its first forward)
        assert s["data_s"] == pytest.approx(0.010 * accum)
        assert s["forward_s"] == pytest.approx(0.004 * accum)
        assert s["backward_s"] == pytest.approx(0.003 * accum)
        assert s["optimizer_s"] == pytest.approx(0.002)
        assert s["step_s"] == pytest.approx(0.017 * accum + 0.002)
    assert inst.roots == [model] and inst.strategy == "ddp"
    assert rep.hellos[-1]["strategy"] == "ddp" and rep.hellos[-1]["params_count"] > 0
    assert rep.steps[-1]["mem"].buckets_bytes > 0


def test_a_second_model_trained_after_the_first_is_measured_with_its_own_rate(hooked):
    inst, rep = hooked
    a, b = _model(), _model()
    _train(a, torch.optim.SGD(a.parameters(), lr=0.1), 5)
    _train(b, torch.optim.Adam(b.parameters(), lr=0.003), 5)
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, 11))
    assert [s["lr"] for s in rep.steps] == pytest.approx([0.1] * 5 + [0.003] * 5)


def test_explicit_steps_take_precedence_and_keep_measured_phases(hooked):
    import pardash.telemetry as pt

    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(3):
        with pt.step():
            for _ in range(2):  # two optimizer steps inside one marked step
                x, y = _batch()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
            pt.log(tokens=100 * (i + 1))
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3]
    for i, s in enumerate(rep.steps):
        assert s["custom"]["tokens"] == 100.0 * (i + 1)
        assert s["samples"] == 12 and s["loss"] is not None
        assert s["forward_s"] > 0 and s["backward_s"] > 0 and s["optimizer_s"] > 0


def test_no_optimizer_step_warns_once(hooked):
    # Gradients never reset, no optimizer step: no iteration is seen to end (an update by hand
    # resets them each iteration: see test_autorun_no_optimizer.py), and no step is counted.
    inst, rep = hooked
    model = _model()
    for _ in range(45):
        x, y = _batch()
        nn.functional.cross_entropy(model(x), y).backward()
    inst.finish()
    assert rep.steps == []
    assert rep.events == [("warning", NO_STEP_UNCOUNTED.format(n=20))]


def test_evaluation_and_checkpoint_recomputation_are_not_training_passes(hooked):
    from torch.utils.checkpoint import checkpoint

    inst, rep = hooked
    inner = _model()

    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return checkpoint(self.inner, x, use_reentrant=False)

    model = Checkpointed()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        x, y = _batch()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            model(torch.randn(50, 8))  # evaluation: no step, no samples
    inst.finish()
    assert [s["samples"] for s in rep.steps] == [6, 6, 6]
    assert inst.roots == [model]


def _fake_clock(inst, monkeypatch) -> list[float]:
    """The instrument's stamps read ``clock[0]``, which the test moves."""
    clock = [100.0]
    monkeypatch.setattr(inst.clock, "stamp", lambda: clock[0])
    return clock


def _timed_step(model, opt, clock: list[float]) -> None:
    """One training step on a fake clock: 10 ms loading its batch, then a forward (the clock
    stands still in it), 20 ms of backward and 30 ms of optimizer."""
    clock[0] += 0.010  # loading the batch
    x, y = _batch()
    loss = nn.functional.cross_entropy(model(x), y)
    clock[0] += 0.020
    loss.backward()
    clock[0] += 0.030
    opt.step()
    opt.zero_grad()


def test_an_evaluation_between_steps_is_an_eval_not_the_next_steps_data(hooked, monkeypatch):
    # A validation loop under no_grad every few steps: its time went to the next step's data
    # phase (and self time, the straggler signal), and 5 s of it made the hub call the rank
    # stalled. Its forwards before any training step also raised the "no optimizer step" warning.
    # (The baseline before training is an evaluation too, as with grad; see the test below.)
    inst, rep = hooked
    inst.warn_after = 3
    clock = _fake_clock(inst, monkeypatch)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def evaluate(seconds: float) -> None:
        model.eval()
        clock[0] += 0.100  # the validation loader's first batch
        with torch.no_grad():
            for i in range(5):
                clock[0] += seconds / 4 if i else 0.0  # (the clock stands still in a forward)
                model(torch.randn(4, 8))
        clock[0] += 0.200  # its metrics, after its last forward
        model.train()

    evaluate(7.0)  # a baseline evaluation before training (of a model not yet seen training)
    for i in range(3):
        _timed_step(model, opt, clock)
        if i < 2:  # after the first step (its round not known to be over yet) and the second
            evaluate(0.5)
    evaluate(0.5)  # a last one, after training
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3]
    # (the first step's clock starts at its first forward; the third's after the evaluation)
    assert [s["data_s"] for s in rep.steps] == pytest.approx([0.0, 0.010, 0.010])
    assert [s["step_s"] for s in rep.steps] == pytest.approx([0.050, 0.060, 0.060])
    assert [s["self_s"] for s in rep.steps] == pytest.approx([0.050, 0.060, 0.060])
    assert rep.events == [("eval", "")] * 4  # and no "no optimizer step" warning
    assert "eval" in rep.phases


class _Module(nn.Module):
    """PyTorch Lightning's LightningModule: the model put in eval mode, whose own forward is
    never called (its validation_step calls its network's, ``self.net(x)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _model()

    def forward(self, x):  # (a training step's: through the DDP wrapper's forward)
        return self.net(x)


@pytest.mark.parametrize("wrapped", [False, True], ids=["one device", "DDP"])
def test_an_evaluation_of_a_models_network_before_and_after_training_is_one(hooked, monkeypatch, one_rank_group, wrapped):
    # Lightning's sanity check before training (the LightningModule in eval mode, its
    # validation_step running self.net), and trainer.validate() after fit (its DDP wrapper
    # gone): no eval event, and the first's time in no step.
    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    module = _Module()
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    trained = nn.parallel.DistributedDataParallel(module) if wrapped else module

    def validate() -> None:
        module.eval()
        with torch.no_grad():
            for _ in range(2):
                module.net(torch.randn(4, 8))
                clock[0] += 0.2
        module.train()

    validate()  # the sanity check
    for _ in range(3):
        _timed_step(trained, opt, clock)
    validate()  # trainer.validate()
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3]
    assert [s["step_s"] for s in rep.steps] == pytest.approx([0.050, 0.060, 0.060])
    assert rep.events == [("eval", "")] * 2


def test_an_evaluation_its_rank_ended_in_says_it_was_cut_short(hooked, monkeypatch):
    # Ctrl-C in nanoGPT's evaluation: "[eval] rank 0 after step 20 (1.64 s)", then the exit,
    # read as an evaluation done.
    from pardash.trainer.evaluations import EVAL_CUT_SHORT

    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        _timed_step(model, opt, clock)
    import time

    wall = [1000.0]  # (an evaluation's length is on the process's own clock)
    monkeypatch.setattr(time, "perf_counter", lambda: wall[0])
    took = []
    said = rep.event
    monkeypatch.setattr(rep, "event", lambda name, message="", **f: took.append(f.get("duration_s")) or said(name, message, **f))
    model.eval()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(4, 8))
            clock[0] += 0.5
            wall[0] += 0.5
    wall[0] += 30.0  # then hung in it 30 s, until stopped (review 276: "0.034 s in all" of 33 s)
    inst.finish(failed=True)  # (autorun's at SIGTERM, or at the script's failure)
    assert [s["step"] for s in rep.steps] == [1, 2]
    assert rep.events == [("eval", EVAL_CUT_SHORT)]
    assert took == [pytest.approx(31.5)]


def test_an_evaluation_after_a_micro_batch_left_over_is_an_eval_and_the_step_goes_on(hooked, monkeypatch):
    # Gradient accumulation of 2 over an epoch of 5 micro-batches: the last one's backward, no
    # optimizer step, then the epoch's validation. It was that step's backward (9.6 s of it,
    # the ranks said stalled in backward meanwhile, no eval event); it is an evaluation, left
    # out of the step, which goes on with the next epoch's micro-batches (3 of them).
    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def micro_batch(i: int) -> None:
        clock[0] += 0.010  # loading its batch
        x, y = _batch()
        loss = nn.functional.cross_entropy(model(x), y) / 2
        clock[0] += 0.020
        loss.backward()
        if i % 2 == 1:
            clock[0] += 0.030
            opt.step()
            opt.zero_grad()

    for epoch in range(2):
        for i in range(5):
            micro_batch(i)
        clock[0] += 0.005  # (after the last backward, before the validation's first forward)
        model.eval()
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn(4, 8))
                clock[0] += 3.0
        model.train()
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4]
    third = rep.steps[2]
    assert (third.get("custom") or {}).get("micro_batches") == 3.0
    # its three micro-batches' loading and forwards, the leftover's backward up to the
    # validation and the last one's up to the step; the validation's 9 s in none of it
    assert third["data_s"] == pytest.approx(3 * 0.010)
    assert third["forward_s"] == pytest.approx(3 * 0.020)
    assert third["backward_s"] == pytest.approx(0.005 + 0.030)
    assert third["step_s"] == pytest.approx(0.030 + 0.060 + 0.035)
    assert [name for name, _ in rep.events if name == "eval"] == ["eval", "eval"]
    assert "eval" in rep.phases


def test_an_evaluation_after_a_micro_batch_left_over_under_no_sync_is_no_self_time(hooked, monkeypatch, one_rank_group):
    # The same under DDP with no_sync for the micro-batches before the last: the step's arrival
    # (its first all-reduce) comes after the validation, and its self time, the straggler
    # signal, held the validation's 6 s.
    from pardash.telemetry.env import RankIdentity

    inst, rep = hooked
    monkeypatch.setattr(inst.reporter, "identity", RankIdentity(rank=0, local_rank=0, world_size=2, node=0, host="here", restart=0))
    clock = _fake_clock(inst, monkeypatch)
    model = nn.parallel.DistributedDataParallel(_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def micro_batch(i: int) -> None:
        clock[0] += 0.010
        x, y = _batch()
        if i % 2 == 0:
            with model.no_sync():
                (nn.functional.cross_entropy(model(x), y) / 2).backward()
        else:
            (nn.functional.cross_entropy(model(x), y) / 2).backward()
            opt.step()
            opt.zero_grad()

    for epoch in range(2):
        for i in range(5):
            micro_batch(i)
        model.eval()
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn(4, 8))
                clock[0] += 2.0
        model.train()
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4]
    third = rep.steps[2]
    assert (third.get("custom") or {}).get("micro_batches") == 3.0
    assert third["step_s"] == pytest.approx(0.030) and third["self_s"] == pytest.approx(0.030)  # (3 loads: the clock stands still in the rest)


def test_a_ddp_backwards_wait_for_its_all_reduces_is_comm_not_backward(hooked, monkeypatch, one_rank_group):
    # DDP waits for its gradient all-reduces once the backward's graph has run: a rank whose
    # peer was still evaluating (rank 0 of nanoGPT, every eval_interval) waited there, and it
    # read as its backward (3.4 s of rank 1's 3.5 s steps). The wait is its comm_s now, and its
    # heartbeat says "sync" while it lasts. Here the all-reduce of the second step's buckets
    # completes 0.3 s after the graph (a callback queued by the comm hook, run in DDP's wait).
    from torch.autograd import Variable
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from pardash.telemetry.env import RankIdentity

    inst, rep = hooked
    monkeypatch.setattr(inst.reporter, "identity", RankIdentity(rank=1, local_rank=1, world_size=2, node=0, host="here", restart=0))
    clock = _fake_clock(inst, monkeypatch)
    model = nn.parallel.DistributedDataParallel(_model())
    waits = [0.0, 0.300, 0.0]
    phase_in_wait: list[str] = []

    def late(wait: float) -> None:
        clock[0] += wait
        phase_in_wait.append(rep.phases[-1])

    def slow_allreduce(state, bucket):  # (unannotated: register_comm_hook checks annotations)
        if waits[0]:
            Variable._execution_engine.queue_callback(lambda w=waits[0]: late(w))
        return allreduce_hook(state, bucket)

    model.register_comm_hook(None, slow_allreduce)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for wait in list(waits):
        waits[0] = wait
        _timed_step(model, opt, clock)
    inst.finish()
    steps = rep.steps
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert [s["backward_s"] for s in steps] == pytest.approx([0.030] * 3)
    assert [s.get("comm_s") or 0.0 for s in steps] == pytest.approx([0.0, 0.300, 0.0])
    assert [s["step_s"] for s in steps] == pytest.approx([0.050, 0.360, 0.060])  # (the wall time, the wait in it)
    assert steps[1]["self_s"] == pytest.approx(0.030)  # (up to its backward, its arrival: no wait in it)
    for s in steps:
        assert s["data_s"] + s["forward_s"] + s["backward_s"] + s["optimizer_s"] + (s.get("comm_s") or 0.0) == pytest.approx(s["step_s"])
    assert phase_in_wait == ["sync"] and rep.phases[rep.phases.index("sync") + 1] == "backward"


def test_a_model_trained_in_eval_mode_is_no_evaluation(hooked, monkeypatch):
    # Fine-tuning with BatchNorm and dropout frozen (model.eval() before the loop): every step
    # read as an evaluation, its data and forward time dropped and its self time 0.
    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    model.eval()
    for _ in range(3):
        _timed_step(model, opt, clock)
    inst.finish()
    assert [name for name, _ in rep.events] == []
    assert [s["step"] for s in rep.steps] == [1, 2, 3]
    assert [s["step_s"] for s in rep.steps] == pytest.approx([0.050, 0.060, 0.060])
    assert [s["data_s"] for s in rep.steps] == pytest.approx([0.0, 0.010, 0.010])
    assert [s["samples"] for s in rep.steps] == [6, 6, 6]


def test_compiling_a_model_under_the_hooks_warns_nothing(hooked):
    # torch warned on every rank that global hooks fire an extra time for the compiled
    # wrapper: pardash's hooks, not the script's (the depth count takes care of it).
    import warnings

    model = torch.compile(_model(), backend="eager")
    with warnings.catch_warnings(record=True) as seen:
        model(torch.randn(2, 8))
    assert not [w for w in seen if "global hooks" in str(w.message)]


def test_an_evaluation_without_no_grad_is_still_an_evaluation(hooked, monkeypatch):
    # model.eval(), forwards with grad (no torch.no_grad()), model.train(): the first forward
    # ended the evaluation at 0 s, and the next step took its time and its first batch.
    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def evaluate(seconds: float) -> None:
        model.eval()
        clock[0] += 0.100
        for i in range(5):
            clock[0] += seconds / 4 if i else 0.0
            model(torch.randn(4, 8)).sum().item()
        clock[0] += 0.200
        model.train()

    for i in range(3):
        _timed_step(model, opt, clock)
        if i < 2:
            evaluate(0.5)
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3]
    assert [s["data_s"] for s in rep.steps] == pytest.approx([0.0, 0.010, 0.010])
    assert [s["step_s"] for s in rep.steps] == pytest.approx([0.050, 0.060, 0.060])
    assert [s["samples"] for s in rep.steps] == [6, 6, 6]
    assert [name for name, _ in rep.events] == ["eval"] * 2


@pytest.mark.parametrize("grad", [True, False], ids=["with-grad", "no-grad"])
def test_a_validation_before_the_first_step_is_an_evaluation(hooked, monkeypatch, grad):
    # model.eval(), a baseline validation (25 batches of 50), model.train(), then training:
    # the model was not seen training yet, so model.eval() went unnoticed; with grad, the 25
    # forwards were step 1's (samples 50, its forward time theirs) and raised the "no optimizer
    # step" warning; without grad they were dropped, and no eval event said how long they took.
    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.eval()
    clock[0] += 0.100  # the validation loader's first batch
    with torch.set_grad_enabled(grad):
        for i in range(25):
            clock[0] += 0.040 if i else 0.0
            nn.functional.cross_entropy(model(torch.randn(50, 8)), torch.randint(0, 4, (50,))).item()
    clock[0] += 0.200  # its metrics
    model.train()
    for _ in range(20):
        _timed_step(model, opt, clock)
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, 21))
    assert [s["samples"] for s in rep.steps] == [6] * 20
    assert [s["forward_s"] for s in rep.steps] == pytest.approx([0.020] * 20)
    assert [s["step_s"] for s in rep.steps] == pytest.approx([0.050] + [0.060] * 19)
    assert rep.events == [("eval", "")]  # and no "no optimizer step" warning
    assert inst.evals == 1 and inst.roots == [model]


def test_a_teacher_in_eval_mode_before_training_is_no_evaluation(hooked, monkeypatch):
    # A distillation teacher put in eval mode before the loop (no optimizer holds its weights),
    # called each step before the student: part of the step, as in training mode.
    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    teacher, student = _model(), _model()
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    teacher.eval()
    for _ in range(4):
        clock[0] += 0.020
        x, _y = _batch()
        target = teacher(x).softmax(-1).detach()
        clock[0] += 0.050
        nn.functional.cross_entropy(student(x), target).backward()
        opt.step()
        opt.zero_grad()
    inst.finish()
    assert [name for name, _ in rep.events] == []
    assert [s["step_s"] for s in rep.steps] == pytest.approx([0.050] + [0.070] * 3)


@pytest.mark.parametrize("frozen_first", [False, True], ids=["all", "lora"])
def test_a_model_put_in_eval_mode_before_each_step_trains(hooked, monkeypatch, frozen_first):
    # model.eval() at every step (BatchNorm frozen), then a forward with grad and a backward:
    # training, not an evaluation per step; also when its first layer is frozen (an adapter's).
    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    model = _model()
    if frozen_first:
        model[0].requires_grad_(False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    for _ in range(4):
        model.eval()
        _timed_step(model, opt, clock)
    inst.finish()
    assert [name for name, _ in rep.events] == []
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4]
    assert [s["step_s"] for s in rep.steps] == pytest.approx([0.050, 0.060, 0.060, 0.060])
    assert [s["data_s"] for s in rep.steps] == pytest.approx([0.0, 0.010, 0.010, 0.010])
    assert [s["forward_s"] for s in rep.steps] == pytest.approx([0.020] * 4)
    assert [s["samples"] for s in rep.steps] == [6, 6, 6, 6]


def test_fine_tuning_with_an_optimizer_made_after_model_eval_trains(hooked, monkeypatch):
    # The new optimizer had not stepped yet when the first backward came: that step read as
    # an evaluation (samples 0, its data time an "eval" event).
    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        _timed_step(model, opt, clock)
    del opt
    gc.collect()
    model.eval()  # BatchNorm frozen for the fine-tuning
    tuning = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(4):
        _timed_step(model, tuning, clock)
    inst.finish()
    assert [name for name, _ in rep.events] == []
    assert [s["samples"] for s in rep.steps] == [6] * 7


def test_memory_counts_a_frozen_backbone_called_every_step(hooked):
    # Transfer learning, head(backbone(x)) with the backbone frozen and called as a root of its
    # own: memory counted the head alone (144 B of 17,584).
    inst, rep = hooked
    backbone = nn.Sequential(nn.Linear(8, 256), nn.ReLU(), nn.Linear(256, 8)).requires_grad_(False)
    head = nn.Linear(8, 4)
    opt = torch.optim.SGD(head.parameters(), lr=0.1)
    for _ in range(4):
        x, y = _batch()
        nn.functional.cross_entropy(head(backbone(x.requires_grad_())), y).backward()
        opt.step()
        opt.zero_grad()
    inst.finish()
    size = sum(p.numel() * p.element_size() for m in (backbone, head) for p in m.parameters())
    assert [s["mem"].params_bytes for s in rep.steps][1:] == [size] * 3


def test_a_backward_inside_an_evaluated_forward_breaks_nothing(hooked):
    # Test-time adaptation (a backward inside the model's forward in eval mode) left a flag
    # set, and the next evaluation raised TypeError in the script's forward.
    inst, rep = hooked

    class Adapting(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body, self.head, self.adapt = nn.Linear(8, 8), nn.Linear(8, 4), True

        def forward(self, x):
            if not self.training and self.adapt:
                with torch.enable_grad():
                    self.body(x).pow(2).mean().backward()
            return self.head(self.body(x))

    model = Adapting()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(6):
        _train(model, opt, 1)
        if i == 1:
            model.eval()
            model(torch.randn(3, 8)).sum().item()
            opt.zero_grad()
            model.train()
        if i == 3:
            model.adapt = False
            model.eval()
            with torch.no_grad():
                model(torch.randn(3, 8))
            model.train()
    inst.finish()
    assert not inst.dead and [s["step"] for s in rep.steps] == list(range(1, 7))


def test_a_fold_ending_on_an_evaluation_with_grad_is_freed_and_evaluated(hooked):
    # k-fold whose folds end on model.eval() and forwards with grad, with no model.train():
    # the evaluation held the model, and the next fold's backward made it that fold's first
    # step (its samples and time).
    inst, rep = hooked
    freed = []
    for fold in range(3):
        width = 16 * (fold + 1)
        model = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        _train(model, opt, 6)
        model.eval()
        for _ in range(3):
            model(torch.randn(7, 8)).sum().item()
        freed.append(weakref.ref(model))
        del model, opt
        assert all(m() is None for m in freed)
    inst.finish()
    assert [s["samples"] for s in rep.steps] == [6] * 18
    assert [name for name, _ in rep.events] == ["eval"] * 3  # (the last one ends at exit)


def _evaluate(model, clock: list[float]) -> None:
    """Three evaluation passes of 2 s each (on the fake clock), in eval mode without grad."""
    model.eval()
    with torch.no_grad():
        for _ in range(3):
            clock[0] += 2.0
            model(torch.randn(4, 8))


def test_an_ema_of_the_model_evaluated_between_steps_is_an_evaluation(hooked, monkeypatch):
    # torch's AveragedModel (an EMA) evaluated every few steps: never trained, so its passes
    # went to the next step's data time (200 ms of a 17 ms step), and 8 s of them read as a
    # rank stalled in data.
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    model = _model()
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.99))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(3):
        _timed_step(model, opt, clock)
        ema.update_parameters(model)
        if i == 1:
            _evaluate(ema, clock)
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3]
    assert [name for name, _ in rep.events] == ["eval"]
    assert [s["data_s"] for s in rep.steps] == pytest.approx([0.0, 0.010, 0.010])


@pytest.mark.parametrize("made", ["before", "after"])
def test_an_ema_evaluated_after_the_roots_settled_is_an_evaluation(hooked, monkeypatch, made):
    # Once the trained roots settle (SETTLE_STEPS), only they are watched: an EMA first
    # evaluated after that was not seen, its 6 s went into the next step's data time. The EMA
    # may be made before training, or later (SWA from some epoch on).
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    n = SETTLE_STEPS + 3
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.99)) if made == "before" else None
    for i in range(n):
        _timed_step(model, opt, clock)
        if ema is None and i == SETTLE_STEPS:
            ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.99))
        if ema is not None:
            ema.update_parameters(model)
        if i == n - 2:
            assert not inst.watching_all
            _evaluate(ema, clock)
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, n + 1))
    assert [name for name, _ in rep.events] == ["eval"]
    assert [s["data_s"] for s in rep.steps] == pytest.approx([0.0] + [0.010] * (n - 1))
    assert not ema.module._forward_pre_hooks  # (its model, a copy, carries none: see below)


def _slow_loader(clock: list[float], data, batch_size: int, seconds: float = 0.010, **kwargs) -> DataLoader:
    """A DataLoader whose every batch takes ``seconds`` to load, on the fake clock."""
    from torch.utils.data import default_collate

    def collate(items):
        clock[0] += seconds
        return default_collate(items)

    return DataLoader(data, batch_size=batch_size, collate_fn=collate, **kwargs)


@pytest.mark.parametrize("how", ["no_grad", "inference_mode", "one batch", "an ema too", "model.train() after the next batch", "compiled"])
def test_a_validation_loop_of_the_model_left_in_training_mode_is_an_evaluation(hooked, monkeypatch, how):
    # A model without dropout or BatchNorm is often never put in eval mode: its validation
    # under torch.no_grad() (rank 0's, 0.1 s every 25 steps) was no evaluation, its time the
    # next step's data ("step 98.1 data 96.4" ms). Its loader's pass, begun after the
    # optimizer step and gone on to its next batch (or its end) before training resumed,
    # tells it from a pass without grad inside a step (see the test below).
    from torch.optim.swa_utils import AveragedModel

    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ema = AveragedModel(model) if how == "an ema too" else None  # (left in training mode too)
    run = torch.compile(model, backend="eager") if how == "compiled" else model
    train = _slow_loader(clock, _data(24), 4)
    val = _slow_loader(clock, _data(4 if how == "one batch" else 12), 4, seconds=0.100)
    batches = iter(train)
    for i in range(5):
        x, y = next(batches)  # 10 ms
        if how == "model.train() after the next batch":
            model.train()  # (after its evaluation: the batch it loaded is the step's data)
        loss = nn.functional.cross_entropy(run(x), y)
        clock[0] += 0.020
        loss.backward()
        clock[0] += 0.030
        opt.step()
        opt.zero_grad()
        if i in (1, 2):
            with torch.inference_mode() if how == "inference_mode" else torch.no_grad():
                for vx, vy in val:  # 100 ms a batch
                    if ema is not None:
                        ema(vx)
                    (run(vx).argmax(1) == vy).sum().item()
                    clock[0] += 0.005  # its metrics
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4, 5]
    # (the first step's clock starts as its first batch is asked for; the others' at the end of
    # the step before, or of the evaluation after it: its loader's last batch, its metrics included)
    assert [s["data_s"] for s in rep.steps] == pytest.approx([0.010] * 5)
    assert [s["step_s"] for s in rep.steps] == pytest.approx([0.060] * 5)
    assert [name for name, _ in rep.events] == ["eval", "eval"]
    assert "eval" in rep.phases


def _gan_step(gen, disc, opt_g, opt_d, real) -> None:
    z = torch.randn(real.shape[0], 8)
    with torch.no_grad():
        fake = gen(z)  # the discriminator's fakes
    ones, zeros = torch.ones(real.shape[0], 4), torch.zeros(real.shape[0], 4)
    bce = nn.functional.binary_cross_entropy_with_logits
    (bce(disc(real), ones) + bce(disc(fake), zeros)).backward()
    opt_d.step()
    opt_d.zero_grad()
    bce(disc(gen(z)), ones).backward()
    opt_g.step()
    opt_g.zero_grad()


@pytest.mark.parametrize(
    "pattern", ["own targets", "compiled, own targets", "gan", "pseudo-labels", "accumulation", "accumulation, batches taken first"]
)
def test_a_pass_without_grad_of_the_trained_model_in_its_step_is_no_evaluation(hooked, monkeypatch, pattern):
    # The trained model run without grad on the step's batch before its forward with grad:
    # the model's own targets (self-distillation, consistency), a GAN's fakes, pseudo-labels on
    # an unlabelled loader's batch, a metric on each micro-batch. At an epoch's start (or the
    # unlabelled loader's) the batch comes from a loader pass begun after the optimizer step,
    # as a validation's does: the pass takes no other batch before training goes on, so that
    # is the step's work and its data time, not an evaluation.
    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = torch.compile(model, backend="eager") if pattern.startswith("compiled") else model
    micro = 2 if pattern.startswith("accumulation") else 1
    train = _slow_loader(clock, _data(12), 4 // micro, shuffle=True)  # 10 ms a batch
    unlabelled = _slow_loader(clock, _data(8), 4)
    gen = nn.Sequential(nn.Linear(8, 8))
    opt_g = torch.optim.SGD(gen.parameters(), lr=0.1)
    u_batches = iter(unlabelled)
    for _ in range(3):  # epochs
        batches = iter(train)
        for _ in range(3):  # steps
            if pattern == "gan":
                real, _ = next(batches)
                clock[0] += 0.005
                _gan_step(gen, model, opt_g, opt, real)
                continue
            taken = [next(batches) for _ in range(micro)] if pattern.endswith("taken first") else None
            for k in range(micro):
                x, y = taken[k] if taken else next(batches)
                if pattern == "pseudo-labels":
                    try:
                        u, _ = next(u_batches)
                    except StopIteration:
                        u_batches = iter(unlabelled)
                        u, _ = next(u_batches)
                clock[0] += 0.005
                with torch.no_grad():
                    target = run(u if pattern == "pseudo-labels" else x + 0.1).argmax(1)
                loss = nn.functional.cross_entropy(run(x), y if pattern == "pseudo-labels" else target)
                if pattern == "pseudo-labels":
                    loss = loss + nn.functional.cross_entropy(run(u), target)
                loss.backward()
            opt.step()
            opt.zero_grad()
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, 10))
    assert [name for name, _ in rep.events if name == "eval"] == []
    assert "eval" not in rep.phases
    # the loading and the pass without grad stay the step's data (the first step's clock starts
    # at its first forward)
    data = {"pseudo-labels": 0.025, "accumulation": 0.030, "accumulation, batches taken first": 0.030}.get(pattern, 0.015)
    assert [s["data_s"] for s in rep.steps[1:]] == pytest.approx([data] * 8)


def test_a_micro_batchs_loading_after_a_backward_is_data_time(hooked, monkeypatch):
    inst, rep = hooked
    clock = _fake_clock(inst, monkeypatch)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        for _ in range(4):
            clock[0] += 0.010  # loading the micro-batch
            x, y = _batch()
            loss = nn.functional.cross_entropy(model(x), y) / 4
            clock[0] += 0.001
            loss.backward()
        clock[0] += 0.005  # clipping: backward's, as the docs say
        opt.step()
        opt.zero_grad()
    inst.finish()
    # (the first step's clock starts at its first forward: its first load is before it)
    assert [s["data_s"] for s in rep.steps] == pytest.approx([0.030, 0.040])
    for s in rep.steps:
        assert s["forward_s"] == pytest.approx(0.004)
        assert s["backward_s"] == pytest.approx(0.005)


def test_the_learning_rate_is_the_one_the_step_ran_at(hooked):
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0 / (i + 1))
    for _ in range(3):
        x, y = _batch()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()  # before the first step is published (at the next forward)
        opt.zero_grad()
    inst.finish()
    assert [s["lr"] for s in rep.steps] == pytest.approx([0.1, 0.05, 0.1 / 3])


def test_the_exit_step_is_the_step_the_script_ended_in(hooked):
    from pardash.trainer.autorun import _exit_step

    inst, rep = hooked
    assert _exit_step(rep, inst, 2) is None  # an argument error, before any step
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train(model, opt, 3)
    inst.finish()
    assert rep.last_step == 3
    assert _exit_step(rep, inst, 0) == 3 and _exit_step(rep, inst, 3) == 3  # failed after training
    model(torch.randn(2, 8))  # a fourth step begins...
    assert _exit_step(rep, inst, 1) == 4  # ...and fails in it


def test_a_failures_error_says_the_last_step_done_and_its_exit_the_step_it_failed_in(hooked):
    # The error event carries the last step completed (the report adds one where a launcher's
    # note has no step), the exit the step the script ended in. With two optimizers a step is
    # published when the next round begins: sent before the steps held back, the error said 2
    # of a rank that had done 3.
    from pardash.trainer.autorun import _finish

    inst, rep = hooked
    said = []
    rep.event = lambda name, message="", **fields: said.append((name, message, fields.get("step"))) or True
    rep.close = lambda: None
    body, head = nn.Linear(8, 16), nn.Linear(16, 4)
    model = nn.Sequential(body, nn.ReLU(), head)
    opts = [torch.optim.SGD(body.parameters(), lr=0.1), torch.optim.SGD(head.parameters(), lr=0.1)]
    for _ in range(3):
        x, y = _batch()
        nn.functional.cross_entropy(model(x), y).backward()
        for o in opts:
            o.step()
            o.zero_grad()
    model(torch.randn(2, 8))  # a fourth step begins, and fails in it
    _finish(rep, inst, 1, {"message": "RuntimeError: boom", "traceback": "..."})
    assert [s["step"] for s in rep.steps] == [1, 2, 3]
    assert said == [("error", "RuntimeError: boom", 3), ("exit", "", 4)]


def test_grad_scaler_loss_is_unscaled_and_a_skipped_step_still_counts(hooked):
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    losses = []
    for i in range(4):
        x, y = _batch()
        if i == 2:
            x[0, 0] = float("inf")  # inf gradients: the scaler skips optimizer.step()
        loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        losses.append(loss.item())
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4]
    assert [s["samples"] for s in rep.steps] == [6, 6, 6, 6]
    assert rep.steps[0]["loss"] == pytest.approx(losses[0])  # not 1024 times it


@pytest.mark.parametrize("zero, skips", [("optimizer", (3, 6, 7)), ("model", (3, 6, 7)), ("optimizer", (2, 3, 4, 5, 6, 7))])
def test_an_iteration_that_skips_its_optimizer_step_is_a_step_of_its_own(hooked, zero, skips):
    # for each batch: zero_grad(); loss.backward(); if bad: continue; opt.step() -- the
    # skipped iteration and the next were one step: both losses summed, "2 micro-batches".
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for i in range(10):
        (opt if zero == "optimizer" else model).zero_grad()
        x, y = _batch()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        losses.append(loss.item())
        if i in skips:  # a non-finite gradient norm, say (several in a row too)
            continue
        opt.step()
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, 11))
    assert [s["samples"] for s in rep.steps] == [6] * 10
    assert [s["loss"] for s in rep.steps] == pytest.approx(losses)
    assert all("custom" not in s for s in rep.steps)
    for s in rep.steps:
        assert min(s["data_s"], s["forward_s"], s["backward_s"], s["optimizer_s"]) >= 0
        assert s["data_s"] + s["forward_s"] + s["backward_s"] + s["optimizer_s"] == pytest.approx(s["step_s"])


def test_skipped_updates_that_end_the_script_are_its_last_steps(hooked):
    # zero_grad after each step and after a skip: the script's last two iterations skipped.
    # The first of them was published at the end, the second thrown away (9 steps of 10).
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(10):
        x, y = _batch()
        nn.functional.cross_entropy(model(x), y).backward()
        if i < 8:
            opt.step()
        opt.zero_grad()
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, 11))
    assert [s["samples"] for s in rep.steps] == [6] * 10


def test_an_evaluation_after_a_skipped_update_follows_its_step(hooked):
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(6):
        opt.zero_grad()
        x, y = _batch()
        nn.functional.cross_entropy(model(x), y).backward()
        if i == 3:
            opt.zero_grad()  # the update skipped, then a validation
            model.eval()
            with torch.no_grad():
                model(_batch()[0])
            model.train()
            continue
        opt.step()
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4, 5, 6]
    assert [s["samples"] for s in rep.steps] == [6] * 6
    assert [m for n, m in rep.events if n == "eval"] == [""]


@pytest.mark.parametrize("algorithm", ["sam", "surgery", "clipping", "tasks", "clipping, zeroed first", "tasks, zeroed first"])
def test_gradients_zeroed_within_an_iteration_leave_it_one_step(hooked, algorithm):
    # Sharpness-aware minimisation: a backward, the gradients zeroed, a second forward and
    # backward on the same batch, then the step. Gradient surgery (PCGrad): a backward per task
    # loss, each read and zeroed, the combined gradients set, then the step. Per-micro-batch
    # clipping: a forward and backward per micro-batch, its gradients clipped, added up and
    # zeroed; their sum set and stepped. And a batch of its own per task. (Split one step a
    # micro-batch, 154 steps for 40 iterations, by a first take of skipped updates.)
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(6):
        x, y = _batch()
        if algorithm.startswith(("clipping", "tasks")):
            first = algorithm.endswith("first")  # (zero_grad before each pass, not after)
            total = [torch.zeros_like(p) for p in model.parameters()]
            loss = 0.0
            for xm, ym in zip(x.chunk(3), y.chunk(3)) if algorithm.startswith("clipping") else (_batch(2), _batch(2), _batch(2)):
                if first:
                    opt.zero_grad()
                part = nn.functional.cross_entropy(model(xm), ym)
                part.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                for t, p in zip(total, model.parameters()):
                    t += p.grad
                if not first:
                    opt.zero_grad()
                loss += part.item()
            for t, p in zip(total, model.parameters()):
                p.grad = t
            losses.append(loss)
        elif algorithm == "sam":
            first = nn.functional.cross_entropy(model(x), y)
            first.backward()
            model.zero_grad()
            second = nn.functional.cross_entropy(model(x), y)
            second.backward()
            losses.append(first.item() + second.item())
        else:
            out = model(x)
            tasks = [nn.functional.cross_entropy(out, y), out.pow(2).mean()]
            grads = []
            for k, task in enumerate(tasks):
                opt.zero_grad()
                task.backward(retain_graph=k == 0)
                grads.append([p.grad.clone() for p in model.parameters()])
            opt.zero_grad()
            for p, *gs in zip(model.parameters(), *grads):
                p.grad = sum(gs)
            losses.append(sum(t.item() for t in tasks))
        opt.step()
        opt.zero_grad()
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4, 5, 6]
    assert [s["samples"] for s in rep.steps] == [12 if algorithm == "sam" else 6] * 6
    assert [s["loss"] for s in rep.steps] == pytest.approx(losses)
    # (gradient surgery's two backward passes of one forward are one micro-batch; SAM's two
    # forwards with a backward each, two)
    micro = 3.0 if algorithm.startswith(("clipping", "tasks")) else 2.0 if algorithm == "sam" else 1.0
    assert {s.get("custom", {}).get("micro_batches", 1.0) for s in rep.steps} == {micro}
    for s in rep.steps:
        assert min(s["data_s"], s["forward_s"], s["backward_s"], s["optimizer_s"]) >= 0


def test_an_internal_error_stops_the_instrumentation_not_the_training(hooked, monkeypatch):
    inst, rep = hooked

    def broken(model):
        raise RuntimeError("no facts today")

    monkeypatch.setattr(modelfacts, "model_facts", broken)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train(model, opt, 3)
    inst.finish()
    assert inst.dead and rep.steps == []
    assert [name for name, _ in rep.events] == ["warning"]
    assert "internal error (RuntimeError: no facts today)" in rep.events[0][1]
    assert not hasattr(torch.autograd.backward, "__wrapped__")  # the patches are gone
    assert not torch.nn.modules.module._global_forward_pre_hooks


def test_global_module_hooks_give_way_to_root_hooks_once_the_roots_settle(hooked):
    from pardash.trainer.instrument import SETTLE_STEPS

    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    _train(model, opt, SETTLE_STEPS + 1)
    assert not inst.watching_all and not torch.nn.modules.module._global_forward_pre_hooks
    _train(model, opt, 2)
    # A new model with its own optimizer: its first forward passes unseen, its optimizer's
    # first step brings the global hooks back, and from the next step it is measured.
    second = _model()
    _train(second, torch.optim.SGD(second.parameters(), lr=0.1), 3)
    assert inst.watching_all
    inst.finish()
    samples = [s["samples"] for s in rep.steps]
    assert samples == [6] * (SETTLE_STEPS + 3) + [0, 6, 6]
    assert inst.roots == [model, second]


def test_a_torchscript_class_scripted_under_the_hooks_finds_its_names(hooked):
    # torch.jit.script resolves a class's names in the frame that scripted it: through
    # pardash's wrapper it looked in instrument.py ("undefined value Inner").
    from typing import List

    @torch.jit.script
    class Inner:
        def __init__(self, a: int):
            self.a = a

    @torch.jit.script
    class Outer:
        def __init__(self, a: int):
            self.x = Inner(a)

        def values(self) -> List[int]:
            return [self.x.a]

    assert Outer(3).values() == [3]


@pytest.mark.parametrize("scaled", [False, True])
def test_losses_backpropagated_together_are_the_steps_loss(hooked, scaled):
    # torch.autograd.backward([l1, l2]) (a multi-task step) was read as l1 alone; scaled by a
    # GradScaler, each must be unscaled (not 1024 times it).
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, enabled=scaled)
    sums = []
    for _ in range(3):
        x, y = _batch()
        out = model(x)
        l1, l2 = nn.functional.cross_entropy(out, y), out.pow(2).mean()
        torch.autograd.backward([scaler.scale(l1), scaler.scale(l2)])
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        sums.append(l1.item() + l2.item())
    inst.finish()
    assert [s["loss"] for s in rep.steps] == pytest.approx(sums)


def test_a_model_hooked_by_pardash_copies_pickles_and_scripts_as_without_it(hooked):
    # Once the roots settled, the script's own deepcopy (keeping the best model, an EMA, a
    # quantized copy), torch.save(model) and torch.jit.script(model) failed: the hooks on the
    # model held the instrument ("cannot pickle '_thread.lock' object"), or were not
    # TorchScript.
    import copy
    import io
    import pickle

    from pardash.trainer.instrument import SETTLE_STEPS

    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train(model, opt, SETTLE_STEPS + 1)
    assert not inst.watching_all and model._forward_pre_hooks  # pardash's hooks are on the model

    best = copy.deepcopy(model)
    ema = torch.optim.swa_utils.AveragedModel(model)
    buf = io.BytesIO()
    torch.save(model, buf)
    raw = pickle.dumps(model)
    assert b"pardash" not in raw  # a model saved whole loads where pardash is not installed
    restored = pickle.loads(raw)
    scripted = torch.jit.script(model)
    x, _ = _batch()
    for other in (best, ema.module, restored, scripted):
        assert torch.equal(other(x), model(x))
    # The copies carry no hook of pardash's (not even a no-op): they script, and a model saved
    # whole names no global beyond torch's and its own classes (weights_only with them allowed).
    for other in (best, ema.module, restored):
        assert not other._forward_pre_hooks and not other._forward_hooks
        torch.jit.script(other)
    assert b"getattr" not in raw
    buf.seek(0)
    with torch.serialization.safe_globals([nn.Sequential, nn.Linear, nn.ReLU]):
        torch.load(buf, weights_only=True)

    _train(model, opt, 2)  # measured as before, the copies' passes left out
    assert model._forward_pre_hooks and not inst.watching_all
    inst.finish()
    assert [s["samples"] for s in rep.steps] == [6] * (SETTLE_STEPS + 3)


def test_models_trained_one_after_another_are_freed_and_each_measured(hooked):
    # k-fold, a sweep, pretraining then fine-tuning: pardash held every model and optimizer
    # (a GPU would run out of memory), the third optimizer's first step merged with the step
    # before, each model's first forward passed unseen, and memory summed every model seen.
    from pardash.trainer.instrument import SETTLE_STEPS

    inst, rep = hooked
    freed, sizes = [], []
    for fold in range(3):
        width = 16 * (fold + 1)
        model = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 4))
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        _train(model, opt, SETTLE_STEPS + 3)
        sizes.append(sum(p.numel() * p.element_size() for p in model.parameters()))
        freed.append((weakref.ref(model), weakref.ref(opt)))
        del model, opt
        gc.collect()
        assert all(m() is None and o() is None for m, o in freed)
    inst.finish()
    n = SETTLE_STEPS + 3
    assert [s["step"] for s in rep.steps] == list(range(1, 3 * n + 1))
    assert [s["samples"] for s in rep.steps] == [6] * (3 * n)
    assert [s["mem"].params_bytes for s in rep.steps] == [size for size in sizes for _ in range(n)]
    assert inst.roots == [] and inst.optimizers == []


# -- epochs without a sampler's set_epoch ----------------------------------------------------


def _loaders(n: int = 12, batch: int = 4) -> tuple[DataLoader, DataLoader]:
    data = TensorDataset(torch.randn(n, 8), torch.randint(0, 4, (n,)))
    return DataLoader(data, batch_size=batch, shuffle=True), DataLoader(data, batch_size=6)


def _data(n: int) -> TensorDataset:
    return TensorDataset(torch.randn(n, 8), torch.randint(0, 4, (n,)))


def _fit(model, opt, batches, train_each: bool = False) -> None:
    for x, y in batches:
        if train_each:  # (Hugging Face's Trainer: model.train() in each step, after its batch came)
            model.train()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("validation", ["model.eval", "no_grad only", "model.train each step"])
def test_passes_over_the_training_loader_are_its_epochs(hooked, validation):
    # A plain DataLoader has no set_epoch (nor have Hugging Face's Trainer and accelerate's
    # loaders, which shard batches themselves): every step read epoch 0 and no epoch ended.
    # The validation loader between epochs, with or without model.eval(), is no epoch of its own.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train, val = _loaders()
    next(iter(train))  # a look at one batch before training
    for _ in range(3):
        _fit(model, opt, train, train_each=validation == "model.train each step")  # 3 steps a pass
        for loader in (val, train):  # the training loader's accuracy too
            if validation != "no_grad only":
                model.eval()
            with torch.no_grad():
                for x, _ in loader:
                    model(x)
            if validation != "model.train each step":
                model.train()
        next(iter(train))  # a sample batch to log, with grad
    inst.finish()
    assert [s["epoch"] for s in rep.steps] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [m for name, m in rep.events if name == "epoch_end"] == ["epoch 0 ended", "epoch 1 ended"]


def test_a_batch_taken_with_a_new_iterator_each_step_is_no_epoch(hooked):
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train, _ = _loaders()
    for _ in range(6):
        _fit(model, opt, [next(iter(train))])
    inst.finish()
    assert [s["epoch"] for s in rep.steps] == [0] * 6
    assert not [name for name, _ in rep.events if name == "epoch_end"]


@pytest.mark.parametrize("validation", ["model.eval", "training mode, no_grad", "model.eval, one batch"])
def test_validations_through_a_loader_of_a_script_that_makes_its_training_batches_are_no_epochs(hooked, validation):
    # A nanoGPT-style loop: its training batches made in the loop (get_batch()), a DataLoader
    # for its validations alone. Each validation after the first read as an epoch ended: the
    # next backward was taken for one on the validation loader's last batch.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _, val = _loaders()  # 2 batches of 6
    if validation == "model.eval, one batch":
        val = DataLoader(val.dataset, batch_size=12)
    for _ in range(3):
        _fit(model, opt, [(torch.randn(4, 8), torch.randint(0, 4, (4,))) for _ in range(3)])
        if validation != "training mode, no_grad":
            model.eval()
        with torch.no_grad():
            for x, _ in val:
                model(x)
        model.train()
    inst.finish()
    assert [s["epoch"] for s in rep.steps] == [0] * 9
    assert not [name for name, _ in rep.events if name == "epoch_end"]
    assert len([name for name, _ in rep.events if name == "eval"]) == 3


def test_an_evaluation_on_tensors_between_an_epochs_first_batch_and_its_backward_keeps_the_epoch(hooked):
    # (review 223 of the fix above: the evaluation's forwards took the training pass for the
    # evaluation's, and each epoch's first step read as the epoch before's)
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train, _ = _loaders()  # 3 batches an epoch
    for _ in range(3):
        for i, (x, y) in enumerate(train):
            if i == 0:
                model.eval()
                with torch.no_grad():
                    model(torch.randn(4, 8))
                model.train()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    inst.finish()
    assert [s["epoch"] for s in rep.steps] == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_a_samplers_set_epoch_says_the_epoch_not_the_loaders_passes(hooked):
    # A DistributedSampler's epoch is the script's own (a resumed run starts at epoch 5): the
    # passes over its loader count no more once it has spoken.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(8, 8), torch.randint(0, 4, (8,)))
    sampler = DistributedSampler(data, num_replicas=1, rank=0)
    train = DataLoader(data, batch_size=4, sampler=sampler)
    for epoch in (5, 6):
        sampler.set_epoch(epoch)
        _fit(model, opt, train)
    inst.finish()
    assert [s["epoch"] for s in rep.steps] == [5, 5, 6, 6]
    assert [m for name, m in rep.events if name == "epoch_end"] == ["epoch 5 ended"]


def test_an_evaluation_samplers_set_epoch_0_is_not_the_training_epoch(hooked):
    # A validation loader's DistributedSampler set to epoch 0 before each evaluation (shuffle
    # off, so any epoch does) showed epoch 0 from the first evaluation on.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(8, 8), torch.randint(0, 4, (8,)))
    sampler, val_sampler = DistributedSampler(data, num_replicas=1, rank=0), DistributedSampler(data, num_replicas=1, rank=0, shuffle=False)
    train, val = DataLoader(data, batch_size=4, sampler=sampler), DataLoader(data, batch_size=4, sampler=val_sampler)
    for epoch in (1, 2, 3):
        sampler.set_epoch(epoch)
        _fit(model, opt, train)
        val_sampler.set_epoch(0)
        with torch.no_grad():
            for x, _ in val:
                model(x)
    inst.finish()
    assert [s["epoch"] for s in rep.steps] == [1, 1, 2, 2, 3, 3]
    assert [m for name, m in rep.events if name == "epoch_end"] == ["epoch 1 ended", "epoch 2 ended"]


@pytest.mark.parametrize("made", ["assigned", "inline", "kept", "counted"])
def test_a_loader_made_anew_for_each_epoch_over_the_same_data_is_the_next_epoch(hooked, made):
    # A plain DataLoader made inside the epoch loop (shuffled, no sampler): every step read
    # epoch 0. A loader made anew over the same dataset, begun once the one before was gone
    # through (it ran out, or gave every batch: a loop that counts them), starts the next
    # epoch; the validation loaders made anew each epoch (another dataset, and the training
    # data for its accuracy, without grad) start none.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data, held = _data(12), _data(12)
    kept = []
    for _ in range(3):
        if made == "inline":
            _fit(model, opt, DataLoader(data, batch_size=4, shuffle=True))
        else:
            loader = DataLoader(data, batch_size=4, shuffle=True)
            kept.append(loader if made == "kept" else None)
            if made == "counted":  # (its iterator never runs out)
                batches = iter(loader)
                _fit(model, opt, (next(batches) for _ in range(len(loader))))
            else:
                _fit(model, opt, loader)
        with torch.no_grad():
            for loader in (DataLoader(held, batch_size=6), DataLoader(data, batch_size=6)):
                for x, _ in loader:
                    model(x)
    inst.finish()
    assert [s["epoch"] for s in rep.steps] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [m for name, m in rep.events if name == "epoch_end"] == ["epoch 0 ended", "epoch 1 ended"]


def _by_turns(*makers):
    """Batches from each loader ``makers`` make in turn, each made anew when it runs out."""
    passes = [iter(make()) for make in makers]
    while True:
        for k, make in enumerate(makers):
            try:
                yield next(passes[k])
            except StopIteration:
                passes[k] = iter(make())
                yield next(passes[k])


@pytest.mark.parametrize("pattern", ["two datasets by turns", "two loaders of one dataset by turns", "each cut short", "another dataset next"])
def test_a_loader_made_anew_that_is_no_next_pass_is_no_epoch(hooked, pattern):
    # Loaders made anew that do not go through the same data one after another: two tasks'
    # loaders taking turns, batch by batch (each made anew when it runs out), over two
    # datasets or over one; a loader over the same data begun before the one before ran out;
    # a loader over another dataset (fine-tuning after pre-training), whose own loader made
    # anew is its next epoch.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data, other = _data(12), _data(12)
    if pattern == "each cut short":
        batches = (b for _ in range(9) for _, b in zip(range(2), DataLoader(data, batch_size=4, shuffle=True)))  # 2 of 3
    elif pattern == "another dataset next":
        batches = (b for d in (data, other, other) for b in DataLoader(d, batch_size=2, shuffle=True))
    else:
        second = other if pattern == "two datasets by turns" else data
        made = _by_turns(lambda: DataLoader(data, batch_size=4, shuffle=True), lambda: DataLoader(second, batch_size=4, shuffle=True))
        batches = (next(made) for _ in range(18))
    _fit(model, opt, batches)
    inst.finish()
    epochs = [0] * 12 + [1] * 6 if pattern == "another dataset next" else [0] * 18
    assert [s["epoch"] for s in rep.steps] == epochs
    assert len([name for name, _ in rep.events if name == "epoch_end"]) == epochs[-1]


# -- autorun as a process, without torchrun --------------------------------------------------


def _probe(*cmd: str, cwd: Path = SCRIPTS, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PY, *cmd], capture_output=True, text=True, cwd=cwd, env=env or pardash_env(), timeout=120)


@pytest.mark.parametrize(
    "plain, ours",
    [
        (["argv_probe.py", "a", "--b"], ["-m", "pardash.trainer.autorun", "argv_probe.py", "a", "--b"]),
        (["-m", "argv_probe", "x"], ["-m", "pardash.trainer.autorun", "-m", "argv_probe", "x"]),
    ],
)
def test_the_script_sees_what_python_would_show_it(plain, ours, tmp_path):
    a, b = _probe(*plain), _probe(*ours)
    assert a.returncode == b.returncode == 0, b.stderr
    assert json.loads(a.stdout) == json.loads(b.stdout)
    assert json.loads(b.stdout)["name"] == "__main__"


# One run of a script that exits 3 without a word serves two tests (each an autorun process,
# ~2 CPU-s of torch's import before the script's first line): the code passes through, and
# an exit that said nothing has no error to say.
EXIT_3_GROUP = pytest.mark.xdist_group("autorun_exit_3")


@pytest.fixture(scope="module")
def exit_3_run():
    return _probe("-m", "pardash.trainer.autorun", "argv_probe.py", "--exit", "3")


@EXIT_3_GROUP
def test_exit_codes_pass_through(exit_3_run):
    assert exit_3_run.returncode == 3


def test_a_failed_exit_leaves_torchruns_error_file(tmp_path):
    # Rank 1 called sys.exit(3); rank 0's collective then broke and left an error file (its
    # exception's): torchrun's "Root Cause" named rank 0 whenever the two fell in different
    # seconds, since rank 1 left none.
    error_file = tmp_path / "error.json"
    proc = _probe("-m", "pardash.trainer.autorun", "argv_probe.py", "--exit", "3", env=pardash_env(TORCHELASTIC_ERROR_FILE=str(error_file)))
    assert proc.returncode == 3
    recorded = json.loads(error_file.read_text())["message"]
    assert "SystemExit" in recorded["message"] and recorded["extraInfo"]["timestamp"]
    # torchrun's summary prints that traceback: the script's frames, none of pardash's
    assert "argv_probe.py" in recorded["extraInfo"]["py_callstack"] and "autorun.py" not in recorded["extraInfo"]["py_callstack"]
    ok = tmp_path / "ok.json"
    assert _probe("-m", "pardash.trainer.autorun", "argv_probe.py", "--exit", "0", env=pardash_env(TORCHELASTIC_ERROR_FILE=str(ok))).returncode == 0
    assert not ok.exists()


def test_a_crash_prints_the_users_traceback_and_reaches_the_hub(hub, tmp_path):
    env = pardash_env(PARDASH_ENDPOINT=hub.ingest_endpoint, PARDASH_RUN_ID="test-run")
    proc = _probe("-m", "pardash.trainer.autorun", "argv_probe.py", "--raise", env=env)
    assert proc.returncode == 1
    frames = re.findall(r'File "([^"]+)"', proc.stderr)
    assert frames == [str(SCRIPTS / "argv_probe.py")] * 2, proc.stderr
    assert proc.stderr.rstrip().endswith("RuntimeError: probe failed on purpose")

    def events():
        return [m for m in load_log(tmp_path / "telemetry.jsonl")[0] if isinstance(m, schema.Event) and m.rank == 0]

    wait_for(lambda: any(e.name == "exit" for e in events()))
    error = next(e for e in events() if e.name == "error")
    assert error.message == "RuntimeError: probe failed on purpose"
    assert error.traceback.strip() == proc.stderr.strip()
    assert [e.code for e in events() if e.name == "exit"] == [1]


def test_an_exit_with_a_text_is_the_failures_error(hub, tmp_path):
    # sys.exit("why"): Python prints the text and exits 1, and the report's root cause said only
    # "rank 0 exited with code 1".
    from pardash.telemetry.failures import failure_summary
    from pardash.telemetry.state import RunState

    env = pardash_env(PARDASH_ENDPOINT=hub.ingest_endpoint, PARDASH_RUN_ID="test-run")
    proc = _probe("-m", "pardash.trainer.autorun", "argv_probe.py", "--exit", "no data left in /data/train", env=env)
    assert proc.returncode == 1 and proc.stderr.strip() == "no data left in /data/train"
    wait_for(lambda: any(getattr(m, "name", "") == "exit" for m in load_log(tmp_path / "telemetry.jsonl")[0]))
    st = RunState(run_id="test-run")
    for m in load_log(tmp_path / "telemetry.jsonl")[0]:
        st.apply(m, m.t)
    assert failure_summary(st)["line"] == "rank 0 exited with code 1: no data left in /data/train"


BAD_ARGS = """
import argparse, sys
print("starting", file=sys.stderr)
p = argparse.ArgumentParser(prog="train.py")
p.add_argument("--lr", type=float)
p.parse_args()
"""


@EXIT_3_GROUP
def test_an_exit_that_said_why_on_stderr_has_that_for_its_error(hub, tmp_path, exit_3_run):
    # A script's first failure is often its arguments (argparse prints the usage and the error,
    # then exits 2): no exception, so no error event; the TUI, the report and the launch's last
    # line said only "rank 0 exited with code 2", the why left in the output file.
    from pardash.telemetry.failures import failure_summary
    from pardash.telemetry.state import RunState

    (tmp_path / "train.py").write_text(BAD_ARGS)
    env = pardash_env(PARDASH_ENDPOINT=hub.ingest_endpoint, PARDASH_RUN_ID="test-run")
    proc = _probe("-m", "pardash.trainer.autorun", "train.py", "--bogus", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and proc.stderr.endswith("train.py: error: unrecognized arguments: --bogus\n"), proc.stderr
    wait_for(lambda: any(getattr(m, "name", "") == "exit" for m in load_log(tmp_path / "telemetry.jsonl")[0]))
    st = RunState(run_id="test-run")
    for m in load_log(tmp_path / "telemetry.jsonl")[0]:
        st.apply(m, m.t)
    assert failure_summary(st)["line"] == "rank 0 exited with code 2: train.py: error: unrecognized arguments: --bogus"
    (error,) = [m for m in st.events if getattr(m, "name", "") == "error"]
    assert error.traceback == proc.stderr  # what it said last, whole (the usage above the error)
    # An exit with no word, or a success, has no error (argv_probe.py's sys.exit(3)).
    assert exit_3_run.returncode == 3


def test_a_script_that_destroys_its_group_gives_gloos_threads_the_gil_first(hub):
    # A small DDP script that destroyed its group and returned from main() hung 1 run in 3 at
    # exit under pardash: its model, freed in main()'s frame, joined a gloo thread waiting for
    # the GIL to free a work's Python object (torch's). With telemetry on (only then are the
    # reporter's threads there), destroy_process_group gives the GIL up for a moment first;
    # with it off too, where the script still runs in runpy's frames (review 245: 3 runs in 20
    # aborted at exit, "terminate called without an active exception").
    env = pardash_env(PARDASH_ENDPOINT=hub.ingest_endpoint, PARDASH_RUN_ID="test-run")
    on = _probe("-m", "pardash.trainer.autorun", "destroys_its_group.py", env=env)
    assert on.returncode == 0, on.stderr
    assert json.loads(on.stdout) == {"settles": True, "same": True, "before": True, "after": False}
    off = _probe("-m", "pardash.trainer.autorun", "destroys_its_group.py", env=pardash_env(PARDASH_TELEMETRY="0"))
    assert off.returncode == 0, off.stderr
    assert json.loads(off.stdout) == {"settles": True, "same": True, "before": True, "after": False}


def test_a_missing_script_is_one_line():
    proc = _probe("-m", "pardash.trainer.autorun", "nope.py")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "pardash: can't open file 'nope.py': no such file"


# -- real torchrun runs ----------------------------------------------------------------------


def _launch(tmp_path: Path, *script: str, nproc: int = 2, env: dict | None = None) -> tuple[subprocess.CompletedProcess, list]:
    log = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [PY, "-m", "pardash", "launch", "--nproc", str(nproc), "--headless", "--log", str(log),
         "--runs-dir", str(tmp_path / "runs"), "--", *script],
        capture_output=True, text=True, timeout=240, env=env or pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    msgs = load_log(log)[0] if log.exists() else []
    return proc, msgs


def _steps(msgs: list, rank: int) -> list[schema.Step]:
    """``rank``'s steps in the order it sent them: the log's is the hub's, and steps the loop
    left held go out from the heartbeat thread on a socket of their own, so the loop's next
    ones can reach the hub first (no run here restarts a rank, whose seq would start over)."""
    return sorted((m for m in msgs if isinstance(m, schema.Step) and m.rank == rank), key=lambda m: m.seq)


def _printed_losses(stdout: str) -> list[tuple[int, str]]:
    return [(int(m.group(1)), m.group(2)) for m in re.finditer(r"^step (\d+) loss (\S+)$", stdout, re.M)]


# One launch of the demo DDP script serves four tests (every step of every rank, gradient
# accumulation, the same losses as plain torchrun, the slow data path of rank 1 named the
# straggler): launches cost seconds apiece here. 40 steps: the detector's 10 warm-up steps,
# then the two windows of 10 a verdict needs, and one to spare.
PLAIN_DDP_STEPS = 40
PLAIN_DDP = [str(DEMOS / "ddp_plain.py"), "--steps", str(PLAIN_DDP_STEPS), "--grad-accum", "3", "--seed", "3",
             "--straggler-rank", "1", "--straggler-s", "0.05"]  # fmt: skip


# Its tests share one worker (pytest-xdist makes a module's fixture once per worker that runs
# one of its tests: spread over three workers, the launch ran three times).
PLAIN_DDP_GROUP = pytest.mark.xdist_group("plain_ddp")


@pytest.fixture(scope="module")
def plain_ddp_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp-plain")
    # (each rank its own interpreter, as a user's are: the tests' others are forked from one
    # that imported torch already, tests/scripts/rank_zygote.py)
    proc, msgs = _launch(tmp, *PLAIN_DDP, env=pardash_env(PYTHON_EXEC=None))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, msgs


@pytest.mark.slow
@PLAIN_DDP_GROUP
def test_plain_ddp_script_every_step_of_every_rank(plain_ddp_run):
    proc, msgs = plain_ddp_run
    printed = _printed_losses(proc.stdout)
    assert [s for s, _ in printed] == list(range(1, PLAIN_DDP_STEPS + 1))
    hellos = [m for m in msgs if isinstance(m, schema.Hello) and m.strategy]
    assert {(h.rank, h.strategy, h.source, h.backend) for h in hellos} == {(0, "ddp", "auto", "gloo"), (1, "ddp", "auto", "gloo")}
    for rank in (0, 1):
        steps = _steps(msgs, rank)
        assert [s.step for s in steps] == list(range(1, PLAIN_DDP_STEPS + 1))
        for s in steps:
            assert s.loss is not None and s.step_s > 0
            assert None not in (s.data_s, s.forward_s, s.backward_s, s.optimizer_s, s.self_s)
            assert s.mem is not None and s.mem.params_bytes == s.mem.params_full_bytes > 0 and s.mem.buckets_bytes > 0
    # rank 0's published losses are the ones it printed
    assert [f"{s.loss:.6f}" for s in _steps(msgs, 0)] == [loss for _, loss in printed]
    exits = sorted((m.rank, m.code) for m in msgs if isinstance(m, schema.Event) and m.name == "exit" and m.seq >= 0)
    assert exits == [(0, 0), (1, 0)]


# One launch of one rank serves two tests: the script's flags that torchrun could take for its
# own, and the lines it prints with another rank's written between their pieces. Telemetry off:
# neither claim needs it, and the rank then never imports torch (4 s of CPU less). Its tests
# share one worker, as the plain DDP run's do.
SCRIPT_FLAGS = ["--nproc", "7", "--log", "mine.txt", "--role", "r", "--standalone", "--", "z"]
ARGV_AND_LINES_GROUP = pytest.mark.xdist_group("argv_and_lines")


@pytest.fixture(scope="module")
def argv_and_lines_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("argv-and-lines")
    # (Named as a user names theirs, from the folder the launch runs in.)
    (tmp / "train.py").write_text((SCRIPTS / "autorun_argv_and_lines.py").read_text())
    # The user's own PYTHONUNBUFFERED=1, as Docker images and CI set it: their ranks' lines
    # are whole too (it once kept the ranks unbuffered, and their lines mixed in output.log).
    env = pardash_env(PYTHONUNBUFFERED="1", PARDASH_TELEMETRY="0")
    proc, _msgs = _launch(tmp, "train.py", *SCRIPT_FLAGS, nproc=1, env=env)
    return proc


@pytest.mark.slow
@ARGV_AND_LINES_GROUP
def test_the_scripts_flags_never_reach_torchrun(argv_and_lines_run):
    # torchrun's parser took a script's `--nproc 7` as ambiguous (the launch never started)
    # and would take `--role x` or `--standalone` as its own.
    proc, args = argv_and_lines_run, SCRIPT_FLAGS
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [s["argv"][1:] for s in seen] == [args]


KFOLD = """
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
kept = []
for fold in range(3):
    model = DDP(nn.Sequential(nn.Linear(8, 32 * (fold + 1)), nn.ReLU(), nn.Linear(32 * (fold + 1), 1)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(5):
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    if fold == 1:
        kept.append(model)  # an ensemble's folds: the first freed, the second kept
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_ddp_models_trained_one_after_another_keep_their_self_time(tmp_path):
    # Self time (the straggler signal) was lost from the second model on: the new DDP wrapper
    # was never the one watched, and the arrival of a new optimizer's next step was dropped.
    # Memory summed every model alive, kept ones too. (One launch for both cases: the first
    # model is freed before the second trains, the second kept as the third does.)
    (tmp_path / "kfold.py").write_text(KFOLD)
    proc, msgs = _launch(tmp_path, "kfold.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sizes = [4 * ((8 + 1) * w + (w + 1)) for w in (32, 64, 96)]
    for rank in (0, 1):
        steps = _steps(msgs, rank)
        assert [s.step for s in steps] == list(range(1, 16))
        # After a kept model, a new model's first forward passes unseen (the old one's hooks
        # only), so its first step's arrival too; after a freed one, nothing is lost.
        assert [s.step for s in steps if s.self_s is None] == [11]
        assert [s.mem.params_bytes for s in steps] == [size for size in sizes for _ in range(5)]


@pytest.mark.slow
@PLAIN_DDP_GROUP
def test_a_slow_data_path_in_the_script_is_named_the_straggler(plain_ddp_run):
    # The script sleeps in rank 1's data path; both ranks' step times are equal (they wait
    # for each other), so only the self time the hooks measure can tell them apart.
    _, msgs = plain_ddp_run
    verdicts = [m for m in msgs if isinstance(m, schema.Verdict) and m.verdict == "straggler"]
    assert [(v.rank, v.cause) for v in verdicts] == [(1, "data")]


@pytest.mark.slow
def test_data_parallel_by_hand_has_self_time_and_its_straggler_named(tmp_path):
    # A script that all-reduces its gradients itself (no DDP) read as strategy "single", with
    # no self time: the straggler detector had nothing to judge.
    proc, msgs = _launch(tmp_path, str(SCRIPTS / "ddp_by_hand.py"), "0.05")
    assert proc.returncode == 0, proc.stderr[-3000:]
    hellos = [m for m in msgs if isinstance(m, schema.Hello) and m.rank == 0]
    assert hellos[-1].strategy == "ddp" and "data parallel by hand" in hellos[-1].note
    for rank in (0, 1):
        steps = _steps(msgs, rank)
        assert len(steps) == 80 and all(s.self_s is not None for s in steps[2:])
    verdicts = [m for m in msgs if isinstance(m, schema.Verdict) and m.verdict == "straggler"]
    assert [(v.rank, v.cause) for v in verdicts] == [(1, "data")]


@pytest.mark.slow
def test_a_rank_waiting_in_the_scripts_own_barrier_for_anothers_evaluation_is_no_straggler(tmp_path):
    # Rank 0 evaluates 30 ms after each step, then every rank waits in dist.barrier(): rank 1's
    # wait there was its data loading in its self time, and it was named the straggler ("the
    # others wait 31.5 ms a step for it"). The wait in a collective of the script's own between
    # steps is left out of the self time (an asynchronous one's, barrier(None, True): its wait()).
    # The script waits in the one after an odd step, in the other after an even one.
    proc, msgs = _launch(tmp_path, str(SCRIPTS / "own_collectives.py"), "barrier")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not [m for m in msgs if isinstance(m, schema.Verdict) and m.verdict == "straggler"]
    steps = _steps(msgs, 1)[2:]
    assert len(steps) == 38 and all(s.self_s is not None for s in steps)
    for parity in (0, 1):  # each barrier's wait, whichever step it is counted in
        some = [s for s in steps if s.step % 2 == parity]
        # (its wait is its comm_s, out of its data time too: step_s is still the wall time)
        assert statistics.median(s.self_s for s in some) < statistics.median(s.comm_s for s in some) / 4
        assert statistics.median(s.data_s for s in some) < statistics.median(s.comm_s for s in some) / 4


@pytest.mark.slow
def test_a_rank_slow_before_the_scripts_own_all_gather_is_named_and_its_weighted_losses_read(tmp_path):
    # A contrastive loss all-gathers the ranks' embeddings in the forward: rank 0 waits there
    # for rank 1, slow in its data path. The wait counted as rank 0's own forward and nobody
    # was named. The all_gather is the step's first collective: its arrival. Its per-sample
    # losses go backward with their weights (per.backward(w)), no scalar: the step read no loss.
    proc, msgs = _launch(tmp_path, str(SCRIPTS / "own_collectives.py"), "gather")
    assert proc.returncode == 0, proc.stderr[-3000:]
    verdicts = [m for m in msgs if isinstance(m, schema.Verdict) and m.verdict == "straggler"]
    assert [(v.rank, v.cause) for v in verdicts] == [(1, "data")]
    printed = _printed_losses(proc.stdout)
    assert len(printed) == 40
    assert [(s.step, f"{s.loss:.6f}") for s in _steps(msgs, 0)] == printed


@pytest.mark.slow
def test_a_rank_slow_inside_an_fsdp_models_blocks_is_named_the_straggler_and_each_holds_half(tmp_path):
    # FSDP2 all-gathers each block's parameters as the forward reaches it: the rank ahead waits
    # for the slow one in a later all-gather than the step's first, where the self time ended
    # (2.3 against 2.9 ms: no verdict). Its waits in FSDP's pre-forward are now left out, and
    # with 8 micro-batches a step its backward passes too (FSDP gathers again there, untimed:
    # 405.6 against 435.0 ms, no verdict, when the self time ran to the last backward; 4 here,
    # half the time, and still no verdict that way). Each of the 4 micro-batches has its
    # forward's gathers too, so this one launch needs both (it was run with 1 micro-batch as
    # well, which needs only the first: 14 s of the suite's serial part, for no case more). Two
    # blocks, each sharded and gathered on its own, as four are: 3 CPU-s less a run.
    proc, msgs = _launch(tmp_path, str(DEMOS / "fsdp_plain.py"), "--steps", "40", "--straggler-rank", "1",
                         "--straggler-s", "0.03", "--straggler-in", "model", "--accum", "4", "--blocks", "2")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    # First what this run shows whatever its timing (a launch of its own once): FSDP2 sharded
    # per block, each rank holds half the parameters and optimizer state.
    rep = subprocess.run(
        [PY, "-m", "pardash", "report", str(tmp_path / "run.jsonl"), "--format", "json"],
        capture_output=True, text=True, check=True, env=pardash_env(),
    )  # fmt: skip
    out = json.loads(rep.stdout)
    assert out["strategy"] == "fsdp" and out["world_size"] == 2
    for r in out["ranks"]:
        assert r["steps"] == 40
        assert r["params_bytes"] * 2 == pytest.approx(r["params_full_bytes"], rel=0.01)
    for rank in (0, 1):
        assert all(s.self_s is not None and s.mem.optim_bytes * 2 == pytest.approx(s.mem.optim_full_bytes, rel=0.01) for s in _steps(msgs, rank))
    # Rank 0's waits for rank 1 in FSDP's all-gathers and reduce-scatters are its comm, not its
    # forward and backward (it read "comm -", its backward 236 ms against rank 1's 73), by the
    # ranks' medians.
    fields = ("forward_s", "backward_s", "comm_s")
    med = {r: {f: statistics.median(getattr(s, f) or 0.0 for s in _steps(msgs, r)[10:]) for f in fields} for r in (0, 1)}
    assert med[0]["comm_s"] > med[0]["forward_s"] + med[0]["backward_s"] and med[0]["comm_s"] > med[1]["comm_s"]
    assert med[1]["forward_s"] > 2 * med[0]["forward_s"]
    # Then the verdict.
    verdicts = [m for m in msgs if isinstance(m, schema.Verdict) and m.verdict == "straggler"]
    assert [(v.rank, v.cause) for v in verdicts] == [(1, "compute")]


MESH_FSDP2 = """
import torch, torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
mesh = init_device_mesh("cpu", (1,))  # the process group made with it, no backend named
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
fully_shard(model, mesh=mesh)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(3):
    model(torch.randn(4, 8)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_process_group_made_by_init_device_mesh_has_its_backend(tmp_path):
    # init_device_mesh("cpu", ...) makes the default group without a backend named, and
    # dist.get_backend() says "undefined" for it: the hello and the report read "undefined".
    (tmp_path / "mesh.py").write_text(MESH_FSDP2)
    proc, msgs = _launch(tmp_path, "mesh.py", nproc=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    hellos = [m for m in msgs if isinstance(m, schema.Hello) and m.rank >= 0]
    assert {(h.rank, h.strategy, h.backend) for h in hellos} == {(0, "fsdp", "gloo")}
    assert [s.step for s in _steps(msgs, 0)] == [1, 2, 3]


@pytest.mark.slow
@PLAIN_DDP_GROUP
def test_gradient_accumulation_counts_optimizer_steps(plain_ddp_run):
    _, msgs = plain_ddp_run
    for rank in (0, 1):
        steps = _steps(msgs, rank)
        # 3 micro-batches of 32 samples a step, one optimizer step: one pardash step (not 3).
        assert [s.step for s in steps] == list(range(1, PLAIN_DDP_STEPS + 1))
        assert all(s.samples == 96 and s.custom.get("micro_batches") == 3 for s in steps)
        # DDP all-reduces in the last micro-batch's backward: the self time reaches past the
        # first two micro-batches' forward and backward.
        assert all(s.self_s > s.data_s for s in steps)


@pytest.mark.slow
def test_two_optimizers_make_one_step_per_iteration(tmp_path):
    proc, msgs = _launch(tmp_path, str(SCRIPTS / "two_optimizers.py"), "--steps", "6", nproc=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [s.step for s in _steps(msgs, 0)] == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_loaders_made_anew_each_epoch_are_its_epochs_and_a_validation_in_training_mode_an_eval(tmp_path):
    # Real ranks (the reviewer's s10b_newloader.py and s4d_rank0_eval_noevalmode.py in one):
    # a DataLoader made inside the epoch loop read epoch 0 throughout, and rank 0's validation
    # under no_grad, the model left in training mode, was no evaluation (its time the next
    # step's data).
    slow = 0.05
    proc, msgs = _launch(tmp_path, str(SCRIPTS / "new_loader_each_epoch.py"), "3", str(slow))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        assert [s.epoch for s in _steps(msgs, rank)] == [0] * 4 + [1] * 4 + [2] * 4
    evals = {rank: [m for m in msgs if isinstance(m, schema.Event) and m.name == "eval" and m.rank == rank] for rank in (0, 1)}
    assert [e.step for e in evals[0]] == [4, 8, 12] and evals[1] == []
    # (from its loader's start: both its batches' loading, the first's too)
    assert all(e.duration_s >= 2 * slow for e in evals[0])


@pytest.mark.slow
def test_a_script_without_optimizer_steps_is_told_so(tmp_path):
    # Its update by hand (no torch.optim), its gradients set to None after it: each iteration
    # is a step, and the warning says how they are counted (it read "no step taken").
    proc, msgs = _launch(tmp_path, str(SCRIPTS / "no_step.py"), nproc=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [m for m in msgs if isinstance(m, schema.Event) and m.name == "warning"]
    assert [w.rank for w in warnings] == [0]
    assert all(w.message == NO_STEP_WARNING.format(n=20) for w in warnings)
    steps = _steps(msgs, 0)
    assert [s.step for s in steps] == list(range(1, 26))
    assert all(s.samples == 4 and s.loss is not None and s.mem is not None for s in steps)


@pytest.mark.slow
@ARGV_AND_LINES_GROUP
def test_each_printed_line_reaches_the_output_whole_as_in_a_terminal(argv_and_lines_run):
    # The launcher sets PYTHONUNBUFFERED=1 (the ranks' output is a file, read as it grows):
    # print() then wrote each piece of a line apart, and two ranks' lines came out mixed
    # ("LOGLOG {...}", 37,733 of 40,000 lines printed at once by two ranks). A terminal's
    # stdout is line-buffered: a line goes out in one write, as under plain torchrun. The
    # script prints "LOG x 42" and "ERR x 43" (stderr), another rank's line written to the same
    # stream between the pieces of each. (The lines are made unbuffered and line-buffered again
    # with telemetry on or off.)
    proc = argv_and_lines_run
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert re.search(r"^LOG x 42$", out, re.M) and re.search(r"^ERR x 43$", out, re.M), out
    assert len(re.findall(r"^\[another rank's line\]$", out, re.M)) == 2, out


def test_a_launch_whose_output_and_errors_go_to_one_file_keeps_their_order(tmp_path):
    # `pardash launch ... -- train.py > out 2>&1`: the ranks' stderr went on apart from their
    # stdout (which the launch reads from its output file and prints), so a rank's traceback
    # came out ahead of the lines it printed before it, and the output file had no traceback.
    script = tmp_path / "both.py"
    script.write_text(
        "import sys\n"
        "for i in range(1, 41):\n"
        "    print(f'out {i}', flush=True) if i % 2 else print(f'err {i}', file=sys.stderr, flush=True)\n"
    )
    with open(tmp_path / "all.txt", "w") as both:  # telemetry off: the rank never imports torch
        proc = subprocess.run(
            [PY, "-m", "pardash", "launch", "--nproc", "1", "--headless", "--runs-dir", str(tmp_path / "runs"), "--", str(script)],
            stdout=both, stderr=both, stdin=subprocess.DEVNULL, timeout=240, env=pardash_env(PARDASH_TELEMETRY="0"), cwd=tmp_path,
        )  # fmt: skip
    text = (tmp_path / "all.txt").read_text()
    assert proc.returncode == 0, text
    printed = [int(m.group(1)) for m in re.finditer(r"^(?:out|err) (\d+)$", text, re.M)]
    assert printed == list(range(1, 41)), text
    (output,) = (tmp_path / "runs").glob("*/output.log")
    assert "err 40" in output.read_text()


@pytest.mark.slow
def test_a_crashing_script_reports_its_own_traceback(tmp_path):
    proc, msgs = _launch(tmp_path, str(SCRIPTS / "crash.py"))
    assert proc.returncode != 0
    errors = {m.rank: m for m in msgs if isinstance(m, schema.Event) and m.name == "error"}
    boom = errors[1]
    assert boom.message == "ValueError: boom in backward"
    assert 'crash.py", line' in boom.traceback and "in train_step" in boom.traceback
    # Every traceback printed (the ranks', and torchrun's copy of the root cause) starts at the
    # script and holds no frame of pardash; torchrun's own traceback of itself aside.
    blocks = [re.findall(r'File "([^"]+)"', b) for b in proc.stderr.split("Traceback (most recent call last):")[1:]]
    ranks = [b for b in blocks if not any(f.endswith("torch/distributed/run.py") for f in b)]
    assert ranks, proc.stderr[-3000:]
    for frames in ranks:
        assert frames[0] == str(SCRIPTS / "crash.py"), frames
        assert not any(("pardash" in f or str(ROOT / "trainer") in f or "runpy" in f) for f in frames), frames
    assert not re.search(r'File "[^"]*(autorun|instrument)\.py"', boom.traceback)


@pytest.mark.slow
@PLAIN_DDP_GROUP
def test_the_same_script_learns_the_same_under_pardash(tmp_path, plain_ddp_run):
    for _ in range(4):
        plain = subprocess.run(
            [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *PLAIN_DDP],
            capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
        )  # fmt: skip
        # Without pardash, gloo itself now and then aborts a rank as its interpreter exits
        # (pytorch/pytorch#179291: its threads outlive the process group): run it again then
        # (twice in a row in one `make test` of a loaded machine: up to four tries).
        if "terminate called without an active exception" not in plain.stderr:
            break
    assert plain.returncode == 0, plain.stderr[-3000:]
    ours, _ = plain_ddp_run
    assert len(_printed_losses(plain.stdout)) == PLAIN_DDP_STEPS
    assert _printed_losses(ours.stdout) == _printed_losses(plain.stdout)


@pytest.mark.slow
def test_ranks_that_end_with_os_exit_finish_when_torchrun_ends_with_0(tmp_path):
    # os._exit skips every exit hook: the ranks never said they finished, and the TUI and the
    # report showed them "running" after a job that ended well.
    from pardash.telemetry.report import build_report

    proc, msgs = _launch(tmp_path, str(SCRIPTS / "os_exit.py"), nproc=1)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rep = build_report(str(tmp_path / "run.jsonl"))
    assert [r["status"] for r in rep["ranks"]] == ["finished"]
    assert rep["exits"] == []


def test_the_hooks_add_no_graph_break_to_a_compiled_model(hooked):
    # torch.compile traced pardash's hooks of the modules it compiles: a thread id it cannot
    # trace broke the graph at each of them (10 graph breaks against plain torchrun's 6).
    import torch._dynamo

    inst, rep = hooked
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = _model()
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        x, y = _batch()
        nn.functional.cross_entropy(compiled(x), y).backward()
        opt.step()
        opt.zero_grad()
    inst.finish()
    assert dict(torch._dynamo.utils.counters["graph_break"]) == {}
    assert [s["step"] for s in rep.steps] == [1, 2, 3] and [s["samples"] for s in rep.steps] == [6, 6, 6]
    torch._dynamo.reset()


@pytest.mark.parametrize("how", ["torch.compile(model)", "model.compile()", "a loss compiled beside it"])
def test_the_hooks_settling_on_the_roots_recompile_no_compiled_model(hooked, monkeypatch, how):
    # Dynamo guards on the number of global module hooks: their swap for hooks on the roots
    # once the roots settled (step 4) recompiled the model (10.6 s of a DDP step on this VM,
    # minutes on a real model). Kept global once anything was compiled, a loss function
    # compiled beside an eager model cost every module call of it the global hooks all run long
    # (a step of 11.4 ms took 13.5): they settle on its roots.
    import torch._dynamo

    inst, rep = hooked
    torch._dynamo.reset()
    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)
    model = run = _model()
    loss_fn = nn.functional.cross_entropy
    if how == "torch.compile(model)":
        run = torch.compile(model, backend="eager")
    elif how == "model.compile()":
        model.compile(backend="eager")
    else:
        loss_fn = torch.compile(lambda out, y: nn.functional.cross_entropy(out, y), backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        for _ in range(8):
            x, y = _batch()
            loss_fn(run(x), y).backward()
            opt.step()
            opt.zero_grad()
        inst.finish()
    finally:
        torch._dynamo.reset()
    assert [s["step"] for s in rep.steps] == list(range(1, 9))
    assert inst.watching_all == (how != "a loss compiled beside it")


def test_an_optimizer_step_compiled_whole_breaks_its_graph_once_a_hook_and_counts_every_step(hooked):
    # `@torch.compile def opt_step(): opt.step()` traced the optimizer hooks: their clocks and
    # pids broke its graph again and again (19 breaks against 2 without pardash, twice the time
    # a step, and Dynamo's warnings), and the step's memory went unmeasured.
    import torch._dynamo

    inst, rep = hooked
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    @torch.compile(backend="eager")
    def opt_step():
        opt.step()

    for _ in range(4):
        x, y = _batch()
        nn.functional.cross_entropy(model(x), y).backward()
        opt_step()
        opt.zero_grad()
    inst.finish()
    breaks = dict(torch._dynamo.utils.counters["graph_break"])
    torch._dynamo.reset()
    # Each hook is one break (it runs as it is, outside the graph); nothing inside them is traced.
    assert breaks and all("disable" in reason for reason in breaks), breaks
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4]
    assert all(s["mem"] is not None and s["mem"].optim_bytes > 0 for s in rep.steps[1:]), rep.steps


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_model_of_lazy_modules_is_counted_once_its_parameters_are_made(hooked, dry_run):
    # Counting a LazyLinear's parameter before its first forward raised ("Attempted to use an
    # uninitialized parameter"): the instrumentation stopped, and the run had no step at all.
    inst, rep = hooked
    model = nn.Sequential(nn.LazyLinear(16), nn.ReLU(), nn.Linear(16, 4))
    if dry_run:  # PyTorch's advice: a forward to make them, before the optimizer
        model(torch.zeros(1, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3) if dry_run else None
    for _ in range(3):
        x, y = _batch()
        loss = nn.functional.cross_entropy(model(x), y)
        opt = opt or torch.optim.AdamW(model.parameters(), lr=1e-3)
        loss.backward()
        opt.step()
        opt.zero_grad()
    inst.finish()
    assert not inst.dead and [e for e in rep.events if e[0] == "warning"] == []
    assert [s["step"] for s in rep.steps] == [1, 2, 3]
    n = 8 * 16 + 16 + 16 * 4 + 4
    assert rep.hellos[-1]["params_count"] == n and rep.hellos[-1]["params_bytes"] == 4 * n
    assert rep.steps[-1]["mem"].params_bytes == 4 * n


def test_a_scripted_model_keeps_the_global_hooks_and_every_step(hooked):
    # Once the roots settled, their own hooks replaced the global ones, and a ScriptModule
    # refuses hooks: the instrumentation stopped at step 2 of 8.
    inst, rep = hooked
    model = torch.jit.script(_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train(model, opt, 8)
    inst.finish()
    assert not inst.dead and [e for e in rep.events if e[0] == "warning"] == []
    assert [s["step"] for s in rep.steps] == list(range(1, 9)) and {s["samples"] for s in rep.steps} == {6}


def test_an_error_in_the_scripts_data_loading_reports_its_own_traceback(tmp_path):
    # The error passes through pardash's wrapper of the DataLoader iterator's __next__ (in
    # trainer/epochs.py since the instrument was split into parts): no frame of it shows.
    proc, msgs = _launch(tmp_path, str(SCRIPTS / "crash_in_data.py"), nproc=1)
    assert proc.returncode != 0
    (error,) = [m for m in msgs if isinstance(m, schema.Event) and m.name == "error"]
    assert error.message == "FileNotFoundError: record 11 is missing"
    assert "in train" in error.traceback and "in __getitem__" in error.traceback
    assert not re.search(r'File "[^"]*/trainer/[a-z_]+\.py"', error.traceback), error.traceback
    blocks = [re.findall(r'File "([^"]+)"', b) for b in proc.stderr.split("Traceback (most recent call last):")[1:]]
    ranks = [b for b in blocks if not any(f.endswith("torch/distributed/run.py") for f in b)]
    assert ranks, proc.stderr[-3000:]
    for frames in ranks:
        assert frames[0] == str(SCRIPTS / "crash_in_data.py"), frames
        assert not any(str(ROOT / "trainer") in f for f in frames), frames
