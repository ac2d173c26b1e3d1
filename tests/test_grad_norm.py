"""The gradient norm a script's clipping returns is its step's ``grad_norm`` (pardash's own
figure, in ``custom``), and an optimizer's parameter groups at different learning rates are
each its step's (``lr`` group 0's, ``lr_group1``, ...): review 337 found the norm nowhere and a
head at 10x the body's lr invisible."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from instrumented import hooked  # noqa: F401  (the fixture)


def _custom(rep, name: str) -> list[float | None]:
    return [s.get("custom", {}).get(name) for s in rep.steps]


def _batch():
    x = torch.randn(6, 4)
    return x, x[:, :1] * 0.5


@pytest.mark.parametrize("how", ["torch.nn.utils.clip_grad_norm_", "imported name", "clip_grad_norm (deprecated)", "get_total_norm, then clip_grads_with_norm_"])
def test_each_steps_clipping_norm_is_its_grad_norm(hooked, how):  # noqa: F811
    inst, rep = hooked
    from torch.nn.utils import clip_grad_norm_  # (bound after pardash installed, as a script's import)

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    norms = []
    for _ in range(5):
        x, y = _batch()
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        if how == "imported name":
            total = clip_grad_norm_(model.parameters(), 0.5)
        elif how == "clip_grad_norm (deprecated)":
            with pytest.warns(FutureWarning):
                total = torch.nn.utils.clip_grad_norm(model.parameters(), 0.5)
        elif how.startswith("get_total_norm"):
            total = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
            torch.nn.utils.clip_grads_with_norm_(model.parameters(), 0.5, total)
        else:
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        norms.append(total.item())
        opt.step()
    inst.finish()
    assert _custom(rep, "grad_norm") == pytest.approx(norms)
    assert all(s["lr"] == 0.05 for s in rep.steps)


def test_norm_of_accumulated_micro_batches_goes_with_its_step_not_the_next(hooked):  # noqa: F811
    # A clipping per micro-batch (each one's norm), then one before the step: the last in the
    # step is its figure, the cut at the optimizer's post-hook leaving the next step's alone.
    inst, rep = hooked
    model = nn.Linear(4, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    last = []
    for _ in range(4):
        opt.zero_grad()
        for _micro in range(2):
            x, y = _batch()
            nn.functional.mse_loss(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        last.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())
        opt.step()
    inst.finish()
    assert _custom(rep, "micro_batches") == [2.0] * 4
    assert _custom(rep, "grad_norm") == pytest.approx(last)


def test_no_clipping_no_grad_norm_and_one_group_no_group_lrs(hooked):  # noqa: F811
    inst, rep = hooked
    model = nn.Linear(4, 1)
    decay, no_decay = [model.weight], [model.bias]
    opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    for _ in range(3):
        x, y = _batch()
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    inst.finish()
    assert len(rep.steps) == 3
    assert all("custom" not in s for s in rep.steps)  # (two groups at one lr: nothing added)


def test_each_param_groups_lr_where_they_differ(hooked):  # noqa: F811
    # A body at lr x0.1 and a head at x1, both warmed up by a LambdaLR: group 0's is the
    # step's lr, as ever; the head's, 10 times higher, is lr_group1.
    inst, rep = hooked
    body, head = nn.Linear(4, 8), nn.Linear(8, 1)
    opt = torch.optim.SGD([{"params": body.parameters(), "lr": 1e-3}, {"params": head.parameters(), "lr": 1e-2}])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / 4)
    seen = []
    for _ in range(4):
        x, y = _batch()
        opt.zero_grad()
        nn.functional.mse_loss(head(torch.relu(body(x))), y).backward()
        seen.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    inst.finish()
    assert [s["lr"] for s in rep.steps] == pytest.approx([a for a, _ in seen])
    assert _custom(rep, "lr_group1") == pytest.approx([b for _, b in seen])
    assert _custom(rep, "lr_group1")[-1] == pytest.approx(10 * rep.steps[-1]["lr"])


def test_a_scripts_own_logged_grad_norm_wins(hooked):  # noqa: F811
    from pardash.telemetry import api

    inst, rep = hooked
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        x, y = _batch()
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        api.log(grad_norm=123.0)
        opt.step()
    inst.finish()
    assert _custom(rep, "grad_norm") == [123.0] * 3


def test_a_norm_that_is_not_finite_is_left_out_of_its_step(hooked):  # noqa: F811
    # A GradScaler's overflow step (its norm inf, the update skipped): no grad_norm that step,
    # the steps before and after theirs.
    inst, rep = hooked
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(3):
        x, y = _batch()
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        if i == 1:
            model.weight.grad[0, 0] = float("inf")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if i == 1:
            opt.zero_grad()  # (the update skipped, as a GradScaler's: the weights stay finite)
        opt.step()
    inst.finish()
    assert len(rep.steps) == 3
    norms = _custom(rep, "grad_norm")
    assert norms[1] is None and norms[0] > 0 and norms[2] is not None


def test_fsdps_own_clip_grad_norm_is_wrapped_and_given_back(hooked):  # noqa: F811
    # (FSDP1 needs an accelerator in this torch: its method is wrapped, as the module functions)
    from torch.distributed.fsdp import FullyShardedDataParallel

    inst, _rep = hooked
    inst._watch_fsdp_norms()  # (done at install where its module is loaded, else as an FSDP root is seen)
    inst._watch_fsdp_norms()  # (again: wrapped once)

    def ours(fn) -> int:  # (pardash's wrappers around it)
        return 0 if fn is None else (fn.__code__.co_filename.endswith("norms.py")) + ours(getattr(fn, "__wrapped__", None))

    assert ours(FullyShardedDataParallel.__dict__["clip_grad_norm_"]) == 1
    inst.uninstall()
    assert ours(FullyShardedDataParallel.__dict__["clip_grad_norm_"]) == 0


def test_a_layerwise_lr_decays_many_groups_say_the_first_eight(hooked):  # noqa: F811
    # One group a layer (dozens in a ViT's fine-tuning): lr and lr_group1-7, not a figure each.
    inst, rep = hooked
    layers = nn.Sequential(*(nn.Linear(4, 4) for _ in range(12)))
    opt = torch.optim.SGD([{"params": m.parameters(), "lr": 0.5**i} for i, m in enumerate(layers)], lr=1.0)
    for _ in range(2):
        x = torch.randn(6, 4)
        opt.zero_grad()
        layers(x).pow(2).mean().backward()
        opt.step()
    inst.finish()
    assert sorted(rep.steps[-1]["custom"]) == [f"lr_group{i}" for i in range(1, 8)]
    assert rep.steps[-1]["custom"]["lr_group7"] == 0.5**7
