"""The micro-batches pardash counts a step (``custom: micro_batches``, which the TUI shows under
"logged by the script" as "counted by pardash"): forward passes of a trained model with a
backward each, not backward calls. A second backward of one forward's graph, or a GAN's two
models each with its backward and optimizer, read "micro_batches 2", as gradient accumulation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from instrumented import hooked  # noqa: F401  (the fixture)


def _micro(rep) -> list[float]:
    return [s.get("custom", {}).get("micro_batches", 1.0) for s in rep.steps]


def _batch():
    x = torch.randn(6, 4)
    return x, x[:, :1] * 0.5


@pytest.mark.parametrize("mode", ["regulariser", "retained graph", "list"])
def test_a_second_backward_without_a_forward_of_its_own_is_no_micro_batch(hooked, mode):  # noqa: F811
    # custom.py --mode twice: the task's backward, then a regulariser's on the weights, one step
    inst, rep = hooked
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(4):
        x, y = _batch()
        out = model(x)
        task, aux = nn.functional.mse_loss(out[:, :1], y), out[:, 1:].pow(2).mean()
        opt.zero_grad()
        if mode == "regulariser":
            (task + aux).backward()
            (1e-3 * sum((p**2).sum() for p in model.parameters())).backward()
        elif mode == "retained graph":
            task.backward(retain_graph=True)
            aux.backward()
        else:
            torch.autograd.backward([task, aux])
        opt.step()
    inst.finish()
    assert len(rep.steps) == 4
    assert _micro(rep) == [1.0] * 4


def test_a_gans_two_models_each_with_its_backward_are_one_micro_batch(hooked):  # noqa: F811
    # gan.py: the discriminator's backward and step, then the generator's through it
    inst, rep = hooked
    gen, disc = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8)), nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.Adam(gen.parameters(), 1e-3), torch.optim.Adam(disc.parameters(), 1e-3)
    bce = nn.BCEWithLogitsLoss()
    for _ in range(5):
        real = torch.randn(6, 8)
        fake = gen(torch.randn(6, 4))
        loss_d = bce(disc(real), torch.ones(6, 1)) + bce(disc(fake.detach()), torch.zeros(6, 1))
        opt_d.zero_grad()
        loss_d.backward()
        opt_d.step()
        loss_g = bce(disc(fake), torch.ones(6, 1))
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
    inst.finish()
    assert len(rep.steps) == 5
    assert _micro(rep) == [1.0] * 5


def test_two_models_backward_before_their_optimizers_step_are_one_micro_batch(hooked):  # noqa: F811
    inst, rep = hooked
    a, b = nn.Linear(4, 1), nn.Linear(4, 1)
    opt_a, opt_b = torch.optim.SGD(a.parameters(), 0.01), torch.optim.SGD(b.parameters(), 0.01)
    for _ in range(4):
        x, y = _batch()
        nn.functional.mse_loss(a(x), y).backward()
        nn.functional.mse_loss(b(x), y).backward()
        opt_a.step()
        opt_b.step()
        opt_a.zero_grad()
        opt_b.zero_grad()
    inst.finish()
    assert len(rep.steps) == 4
    assert _micro(rep) == [1.0] * 4


@pytest.mark.parametrize("order", ["each forward then its backward", "forwards first", "siamese"])
def test_accumulated_micro_batches_are_counted(hooked, order):  # noqa: F811
    inst, rep = hooked
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        batches = [_batch() for _ in range(4)]
        if order == "forwards first":
            losses = [nn.functional.mse_loss(model(x), y) / 4 for x, y in batches]
            for loss in losses:
                loss.backward()
        else:
            for x, y in batches:
                out = model(x) if order != "siamese" else model(x) - model(x.flip(0))  # (two forwards, one backward)
                (nn.functional.mse_loss(out, y) / 4).backward()
        opt.step()
        opt.zero_grad()
    inst.finish()
    assert len(rep.steps) == 3
    assert _micro(rep) == [4.0] * 3
