"""Evaluations that reviewers found miscounted under real libraries: PyTorch Lightning's
validations with gradient accumulation (its DDP wrapper left in eval mode, the model it runs
set back to training mode by attribute), and a final evaluation followed by a save (the save's
time taken out of the evaluation's). One real 2-rank launch in plain torch, then in process."""

from __future__ import annotations

import io
import time

import pytest
import torch
from torch import nn

from pardash.telemetry import api, schema
from test_autorun import _launch, _steps, _timed_step
from test_autorun_saves import _checkpoints, on_a_fake_clock

LIGHTNING_ACCUMULATING = """
import io, time, torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
model = DDP(net)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
train = DataLoader(TensorDataset(torch.randn(96, 16)), batch_size=8)
val = DataLoader(TensorDataset(torch.randn(24, 16)), batch_size=8)

class SlowFile(io.BytesIO):
    def write(self, b):
        time.sleep(0.2 if not self.tell() else 0.0)
        return super().write(b)

step = 0
for i, (x,) in enumerate(train):
    if (i + 1) % 2:  # accumulate_grad_batches=2: the first micro-batch without the all-reduce
        with model.no_sync():
            model(x).pow(2).mean().backward()
        continue
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    step += 1
    if step in (2, 4):
        model.eval()  # Lightning's on_validation_model_eval: trainer.model, the DDP wrapper
        with torch.no_grad():
            for (v,) in val:
                time.sleep(0.1)
                (model if step == 2 else net)(v).sum().item()
        if step == 4 and rank == 0:  # ModelCheckpoint, after the validation
            torch.save({"model": net.state_dict(), "optimizer": opt.state_dict()}, SlowFile())
        for m in net.modules():  # _ModuleMode.restore: by attribute, the wrapper left in eval mode
            m.training = True
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_lightnings_validations_with_gradient_accumulation_are_evaluations(tmp_path):
    # Lightning evaluates with trainer.model.eval() (the DDP wrapper), then sets the
    # LightningModule's modules back to training mode by attribute: the wrapper stays in eval
    # mode. With 2 micro-batches a step, the first training forward after a validation read
    # as one in eval mode with grad, and its backward made the validation training: no eval
    # event, its 0.3 s in the next step's data (a rank validating slower named the
    # straggler). Rank 0 saves after the second (ModelCheckpoint): its 0.2 s is in neither
    # the evaluation (which it made 0.1 s) nor the step after it.
    # One rank (DDP of a world of 1, its wrapper and no_sync as on 2): what is miscounted is
    # each rank's own evaluations; a second rank is 3 s more of a core.
    (tmp_path / "light.py").write_text(LIGHTNING_ACCUMULATING)
    proc, msgs = _launch(tmp_path, "light.py", nproc=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    evals = sorted((m.rank, m.step, m.duration_s) for m in msgs if isinstance(m, schema.Event) and m.name == "eval")
    assert [(r, s) for r, s, _ in evals] == [(0, 2), (0, 4)]
    assert all(took >= 0.3 for _, _, took in evals), evals  # (3 batches of 0.1 s)
    saves = [m for m in msgs if isinstance(m, schema.Event) and m.name == "checkpoint"]
    assert [(m.rank, m.step) for m in saves] == [(0, 4)] and saves[0].duration_s >= 0.2
    assert {m.rank for m in msgs if isinstance(m, schema.Step)} == {0}
    steps = _steps(msgs, 0)
    assert [s.step for s in steps] == list(range(1, 7))
    assert all(s.data_s < 0.2 for s in steps), [(s.step, s.data_s) for s in steps]


class SleepyFile(io.BytesIO):
    """A checkpoint whose writing takes ``seconds`` (real ones: an evaluation's length is read
    on ``time.perf_counter``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def write(self, b) -> int:
        if not self.tell():
            time.sleep(self.seconds)
        return super().write(b)


@pytest.mark.parametrize("where", ["after its last forward", "between its forwards", "before its model.train()"])
def test_a_save_is_taken_out_of_an_evaluation_only_within_it(monkeypatch, where):
    # The final evaluation (model.eval(), forwards under no_grad, no model.train() after it),
    # then rank 0 saves: its end is its last forward, yet the save was taken out of it too
    # ("rank0 eval 11.8 ms save 28.6 ms" read "[eval] rank 0 after step 5 (-17 ms)"). A save
    # between its forwards, or before the model.train() that ends it, is still not its time.
    inst, rep, clock = on_a_fake_clock(monkeypatch)

    def save() -> None:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, SleepyFile(0.5))

    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            _timed_step(model, opt, clock)
        model.eval()
        with torch.no_grad():
            for i in range(3):
                time.sleep(0.03)
                model(torch.randn(4, 8))
                if i == 1 and where == "between its forwards":
                    save()
        if where != "between its forwards":
            save()
        if where == "before its model.train()":
            model.train()
        inst.finish()
    finally:
        inst.uninstall()
        api._reset_for_tests()
    evals = [fields for name, fields in rep.events if name == "eval"]
    saves = _checkpoints(rep)
    assert [e["step"] for e in evals] == [3] and [c["step"] for c in saves] == [3]
    took = evals[0]["duration_s"]
    assert took >= 0.09  # its three 30 ms
    assert took < saves[0]["duration_s"]  # (the 0.5 s save not in it)
