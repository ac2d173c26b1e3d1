"""An update skipped on a non-finite gradient, in a loop that zeroes its gradients after the
forward (``loss = ...; opt.zero_grad(); loss.backward(); if not finite(norm): continue;
opt.step()``), under the zero-code hooks.

The zero_grad that throws a skipped iteration's gradients away comes after the next
iteration's forward, not right after the skipped backward: each skip was merged into the next
step ("done: 141 iterations, 121 optimizer steps, 20 skipped", pardash: step 121, each merged
step 2 micro-batches, twice the samples and an inf loss; the report "loss was inf from step
121 to the end", review 315). Each iteration is a step of its own now, as a skip written with
``zero_grad(); continue`` after the backward was; passes zeroed after a forward inside one
iteration (SAM's second, per-micro-batch clipping, a batch per task) stay one step."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers import pardash_env
from instrumented import hooked  # noqa: F401 (the fixture)

SCRIPT = str(Path(__file__).resolve().parent / "scripts" / "skip_zero_grad_first.py")


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _batch(n: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 8), torch.randint(0, 4, (n,))


def _phases_add_up(steps: list[dict]) -> None:
    for s in steps:
        assert min(s["data_s"], s["forward_s"], s["backward_s"], s["optimizer_s"]) >= 0
        assert s["data_s"] + s["forward_s"] + s["backward_s"] + s["optimizer_s"] == pytest.approx(s["step_s"])


@pytest.mark.parametrize(
    "zero, skips, set_to_none",
    [("optimizer", (3, 6, 7), True), ("model", (3, 6, 7), True), ("optimizer", (2, 3, 4, 5, 6, 7), False)],
)
def test_an_update_skipped_with_zero_grad_after_the_forward_is_a_step_of_its_own(hooked, zero, skips, set_to_none):  # noqa: F811
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for i in range(10):
        x, y = _batch()
        loss = nn.functional.cross_entropy(model(x), y)
        if i in skips:
            loss = loss * float("inf")
        (opt if zero == "optimizer" else model).zero_grad(set_to_none=set_to_none)
        loss.backward()
        losses.append(loss.item())
        if not torch.isfinite(torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)):
            continue  # the update skipped: its gradients go at the next iteration's zero_grad
        opt.step()
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, 11))
    assert [s["samples"] for s in rep.steps] == [6] * 10
    assert [s["loss"] for s in rep.steps] == pytest.approx(losses)  # (inf for each skipped one)
    assert [i for i, s in enumerate(rep.steps) if math.isinf(s["loss"])] == list(skips)
    assert all("micro_batches" not in s.get("custom", {}) for s in rep.steps)  # (no "2 micro-batches")
    # (the clipping's norm, by pardash: of the steps whose norm was finite alone)
    assert [i for i, s in enumerate(rep.steps) if "grad_norm" not in s.get("custom", {})] == list(skips)
    _phases_add_up(rep.steps)


@pytest.mark.parametrize("first", [True, False], ids=["zeroed after the forward", "zeroed after the backward"])
def test_updates_skipped_in_a_row_each_have_their_own_batch_loading(hooked, first):  # noqa: F811
    # Each skipped step's time in the DataLoader is its own: the loading of a run of skips
    # went to the step after the first (its loader_s capped at its data time), the others none.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(24, 8), torch.randint(0, 4, (24,)))
    for i, (x, y) in enumerate(DataLoader(data, batch_size=2)):
        loss = nn.functional.cross_entropy(model(x), y)
        if first:
            opt.zero_grad()
        loss.backward()
        if i in (4, 5, 6, 9):
            if not first:
                opt.zero_grad()
            continue
        opt.step()
        if not first:
            opt.zero_grad()
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, 13))
    assert [s["samples"] for s in rep.steps] == [2] * 12
    assert all(0 < s.get("loader_s", 0) <= s["data_s"] for s in rep.steps), [s.get("loader_s") for s in rep.steps]
    _phases_add_up(rep.steps)


@pytest.mark.parametrize("algorithm", ["sam", "clipping", "tasks"])
def test_passes_zeroed_after_their_forward_inside_an_iteration_stay_one_step(hooked, algorithm):  # noqa: F811
    # The same zero_grad after a forward that followed a backward with no optimizer step
    # since, inside one iteration: SAM's second pass (on the same batch), per-micro-batch
    # clipping and a batch per task (each pass's gradients read, then their sum set and
    # stepped). Not iterations that skipped their update.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(6):
        x, y = _batch()
        if algorithm == "sam":
            first = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            first.backward()
            second = nn.functional.cross_entropy(model(x), y)
            model.zero_grad()
            second.backward()
            losses.append(first.item() + second.item())
        else:
            total = [torch.zeros_like(p) for p in model.parameters()]
            loss = 0.0
            for xm, ym in zip(x.chunk(3), y.chunk(3)) if algorithm == "clipping" else (_batch(2), _batch(2), _batch(2)):
                part = nn.functional.cross_entropy(model(xm), ym)
                opt.zero_grad()
                part.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                for t, p in zip(total, model.parameters()):
                    t += p.grad
                loss += part.item()
            for t, p in zip(total, model.parameters()):
                p.grad = t
            losses.append(loss)
        opt.step()
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4, 5, 6]
    assert [s["samples"] for s in rep.steps] == [12 if algorithm == "sam" else 6] * 6
    assert [s["loss"] for s in rep.steps] == pytest.approx(losses)
    micro = 2.0 if algorithm == "sam" else 3.0
    assert {s.get("custom", {}).get("micro_batches", 1.0) for s in rep.steps} == {micro}
    _phases_add_up(rep.steps)


@pytest.mark.slow
def test_a_ddp_run_skipping_updates_counts_its_iterations_and_reports_each_inf_loss(tmp_path):
    # Review 315's script, small: 2 ranks, 30 iterations, every 7th loss inf and its update skipped.
    log = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "2", "--headless", "--log", str(log),
         "--runs-dir", str(tmp_path / "runs"), "--", SCRIPT, "--iters", "30", "--every", "7"],
        capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "done: 30 iterations, 26 optimizer steps, 4 skipped" in proc.stdout
    assert "step 30" in proc.stdout.splitlines()[-1] and "to the end" not in proc.stdout
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    for rank in (0, 1):
        steps = sorted((r for r in records if r.get("kind") == "step" and r.get("rank") == rank), key=lambda r: r["step"])
        assert [s["step"] for s in steps] == list(range(1, 31))
        assert [s["samples"] for s in steps] == [16] * 30  # (a skipped iteration's batch, not two)
        assert [s["step"] for s in steps if s.get("loss") is None] == [7, 14, 21, 28]
        assert all("micro_batches" not in s.get("custom", {}) for s in steps)
    report = subprocess.run(
        [sys.executable, "-m", "pardash", "report", str(log)], capture_output=True, text=True, timeout=120, env=pardash_env()
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-2000:]
    assert "30 (last step 30)" in report.stdout
    loss = next(line for line in report.stdout.splitlines() if line.startswith("loss:"))
    assert "inf" in loss and "step 7" in loss and "to the end" not in report.stdout
    assert "micro_batches" not in report.stdout
