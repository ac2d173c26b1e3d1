"""A script that trains through PyTorch Lightning or Hugging Face's Trainer says its planned
steps through its framework (trainer/frameworks.py): every viewer shows "step N/TOTAL" and the
time left, as for the bundled trainer. The total is known only once training begins, so it
reaches the hub, the log and the viewers late, in the rank's hello sent again.

The mechanism is tested in CI without either framework: a stand-in ``transformers`` package
(its ``CallbackHandler.on_train_begin``, which the instrument follows) next to a small script,
under a real launch, hub, ``ps``, ``attach`` and report. The frameworks themselves are tested
where they are importable (CI has neither: those tests skip)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest
import torch

from helpers import pardash_env, terminate, wait_for
from instrumented import Recording, instrumented
from pardash.telemetry import schema
from pardash.telemetry.hub import _progress
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.logreader import read_log
from pardash.telemetry.report import build_report
from pardash.telemetry.summary import ETA_LEAST_S, time_left_s, total_steps
from pardash.trainer import frameworks

PLANNED = 1000

STAND_IN_HANDLER = '''
class CallbackHandler:
    """Hugging Face's, as far as the instrument reads it: on_train_begin(args, state, control)."""

    def on_train_begin(self, args, state, control, **kwargs):
        return control
'''

SCRIPT = f'''
import os, sys, time
import torch

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def step():
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()


for _ in range(3):  # steps taken (and the hello sent) before the framework says its total
    step()
from transformers.trainer_callback import CallbackHandler  # imported after the hooks, as a script does


class State:
    max_steps = {PLANNED}
    global_step = 0


CallbackHandler().on_train_begin(None, State(), "control")
# Trains until the test says stop (it has seen what it looks for), well short of the plan.
end = time.monotonic() + 300
while not os.path.exists(sys.argv[1]) and time.monotonic() < end:
    step()
    time.sleep(0.02)
'''


def _launch(tmp_path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "2", "--headless", "--every", "1", "--log", str(tmp_path / "run.jsonl"),
         "--runs-dir", str(tmp_path / "runs"), "--", *args],
        stdout=open(tmp_path / "launch.out", "w"), stderr=subprocess.STDOUT, text=True, env=env or pardash_env(), cwd=tmp_path,
    )  # fmt: skip


def _ps(run_id: str | None = None) -> dict | None:
    out = subprocess.run([sys.executable, "-m", "pardash", "ps", "--json"], capture_output=True, text=True, env=pardash_env(), timeout=60)
    runs = json.loads(out.stdout or "[]")
    return next((e for e in runs if run_id is None or e.get("run_id") == run_id), None)


def _steps_span_s(log) -> float:
    """Seconds between rank 0's first and last step in ``log`` so far."""
    t = [m.t for m in read_log(log) if isinstance(m, schema.Step) and m.rank == 0]
    return t[-1] - t[0] if t else 0.0


def _hellos(log) -> list[schema.Hello]:
    return [m for m in read_log(log) if isinstance(m, schema.Hello) and m.rank == 0]


def test_a_total_said_once_training_began_reaches_the_hub_ps_attach_lines_log_and_report(tmp_path):
    (tmp_path / "transformers").mkdir()
    (tmp_path / "transformers" / "__init__.py").write_text("")
    (tmp_path / "transformers" / "trainer_callback.py").write_text(STAND_IN_HANDLER)
    (tmp_path / "train.py").write_text(SCRIPT)
    stop = tmp_path / "stop"
    launch = _launch(tmp_path, "train.py", str(stop))
    attach = None
    try:
        # `pardash ps`: from the hub's progress (it writes it every few seconds)
        seen: dict = {}

        def listed() -> bool:
            seen.update(_ps() or {})
            return isinstance(seen.get("progress"), dict) and seen["progress"].get("steps") is not None

        wait_for(listed, timeout_s=120, poll_s=0.5)
        assert seen["progress"]["steps"] == PLANNED
        # a viewer attached after the total was said: the hub's snapshot holds the late hello
        attach_out = tmp_path / "attach.out"
        attach = subprocess.Popen([sys.executable, "-m", "pardash", "attach", "--headless", "--every", "1", seen["run_id"]],
                                  stdout=open(attach_out, "w"), stderr=subprocess.STDOUT, env=pardash_env())  # fmt: skip
        wait_for(lambda: re.search(rf"step \d+/{PLANNED}\b", attach_out.read_text()), timeout_s=60, poll_s=0.2)
        # steps for long enough that a pace gives a time left (summary.ETA_LEAST_S)
        wait_for(lambda: _steps_span_s(tmp_path / "run.jsonl") > ETA_LEAST_S + 1, timeout_s=120, poll_s=0.5)
    finally:
        stop.write_text("")
        if attach is not None:
            terminate(attach)
        launch.wait(120)
    out = (tmp_path / "launch.out").read_text()
    assert launch.returncode == 0, out[-3000:]
    # the launch's own progress lines
    assert re.search(rf"step \d+/{PLANNED}\b", out), out[-3000:]
    # the log: a first hello without it, then one with it, after steps were taken
    log = tmp_path / "run.jsonl"
    hellos = _hellos(log)
    assert total_steps(hellos[0]) is None and total_steps(hellos[-1]) == PLANNED
    # the report: a run that ended short of its plan says so
    rep = build_report(str(log))
    assert rep["total_steps"] == PLANNED and rep["last_step"] < PLANNED
    # what the TUI header and ps work out from a hub's state, replayed from the log: the total
    # and, once the ranks have stepped for a while, the time left
    core = HubCore(run_id="r", world_size=2)
    lefts = []
    framed = 0.0
    for msg in read_log(log):
        core.replay(msg, msg.t)
        if isinstance(msg, schema.Step) and msg.t - framed >= 0.1:  # (frames at 10 Hz, as a hub's)
            framed = msg.t
            core.tick(msg.t)
            if total_steps(core.state.hello):
                lefts.append(time_left_s(core.state, total_steps(core.state.hello)))
    assert total_steps(core.state.hello) == PLANNED and _progress(core.state)["steps"] == PLANNED
    assert any(left is not None and left > 0 for left in lefts)


def test_a_resume_whose_checkpoint_holds_no_count_goes_on_from_the_frameworks_global_step(tmp_path, monkeypatch):
    # Hugging Face's optimizer.pt under SGD without momentum holds no step count (its global
    # step is in trainer_state.json): the steps counted from 1, and a resume from step 20 to 25
    # ended at "step 5/25"
    (tmp_path / "transformers").mkdir()
    (tmp_path / "transformers" / "__init__.py").write_text("")
    (tmp_path / "transformers" / "trainer_callback.py").write_text(STAND_IN_HANDLER)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n.split(".")[0] == "transformers"]:
        monkeypatch.delitem(sys.modules, name)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "optimizer.pt")
    rep = Recording()
    try:
        with instrumented(rep) as inst:
            opt.load_state_dict(torch.load(tmp_path / "optimizer.pt")["optimizer"])
            from transformers.trainer_callback import CallbackHandler

            state = type("TrainerState", (), {"global_step": 20, "max_steps": 25})()
            CallbackHandler().on_train_begin(None, state, None)
            for _ in range(5):
                model(torch.randn(8, 4)).pow(2).mean().backward()
                opt.step()
                opt.zero_grad()
            inst.finish()
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] == "transformers"]:
            del sys.modules[name]
    assert [s["step"] for s in rep.steps] == [21, 22, 23, 24, 25]
    assert [f.get("step") for name, f in rep.events if name == "resume"][-1] == 20
    assert rep.hellos[-1]["config"]["total_steps"] == 25


class _Hf:
    def __init__(self, max_steps):
        self.max_steps = max_steps


class _Pl:
    def __init__(self, max_steps=-1, estimated=None, loaded=True, optimizers=1, manual=False, raises=False, global_step=0):
        self.max_steps = max_steps
        self.global_step = global_step
        self._estimated = estimated
        self.train_dataloader = object() if loaded else None
        self.optimizers = [object()] * optimizers
        self.lightning_module = type("M", (), {"automatic_optimization": not manual})()
        self._raises = raises

    @property
    def estimated_stepping_batches(self):
        if self._raises:
            raise RuntimeError("accumulation that changes by epoch")
        return self._estimated


@pytest.mark.parametrize(
    "trainer, total",
    [
        (_Pl(max_steps=300, estimated=300), 300),
        (_Pl(max_steps=-1, estimated=157), 157),  # max_epochs, with accumulation: Lightning's estimate
        (_Pl(max_steps=-1, estimated=float("inf")), None),  # max_epochs=-1
        (_Pl(max_steps=-1, estimated=-1), None),  # an iterable dataset with no length
        (_Pl(max_steps=60, estimated=None, loaded=False), 60),  # (the data not set up: the estimate would load it)
        (_Pl(max_steps=-1, estimated=313, manual=True), None),  # manual optimization: the estimate counts batches
        (_Pl(max_steps=50, estimated=313, manual=True), 50),
        (_Pl(max_steps=100, estimated=100, optimizers=2), None),  # global_step counts each optimizer's steps
        (_Pl(max_steps=80, raises=True), 80),
        (object(), None),  # another version, without what is read
    ],
)
def test_lightnings_planned_steps(trainer, total):
    assert frameworks.lightning_steps(trainer) == total


@pytest.mark.parametrize("trainer, done", [(_Pl(global_step=20), 20), (_Pl(global_step=20, optimizers=2), None), (object(), None)])
def test_lightnings_steps_done(trainer, done):
    # (several optimizers: its global_step counts each one's steps, pardash a round of them)
    assert frameworks.lightning_done(trainer) == done


@pytest.mark.parametrize("value, total", [(_Hf(60), 60), (_Hf(-1), None), (_Hf(0), None), (object(), None)])
def test_hugging_faces_planned_steps(value, total):
    assert frameworks.hf_steps(value) == total


@pytest.mark.parametrize("value, total", [(3000, 3000), (12.0, 12), (math.inf, None), (-1, None), (True, None), (2.5, None), ("60", None)])
def test_planned(value, total):
    assert frameworks.planned(value) == total


# -- the frameworks themselves, where installed (not in CI) -------------------------------------------------------

PL_SCRIPT = '''
import os, time, torch, torch.nn as nn
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class M(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(8, 2)

    def training_step(self, batch, i):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


g = torch.Generator().manual_seed(0)
x = torch.randn(640, 8, generator=g)
data = TensorDataset(x, (x[:, 0] > 0).long())
if os.environ.get("ITERABLE"):
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self, rows=data):
            return iter(rows)
    data = Stream()
loader = DataLoader(data, batch_size=16)
kw = dict(accelerator="cpu", devices=2, strategy="ddp", accumulate_grad_batches=int(os.environ["ACC"]), logger=False,
          enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
          enable_checkpointing=bool(os.environ.get("SAVE")))
if os.environ.get("MAX_STEPS"):
    kw["max_steps"] = int(os.environ["MAX_STEPS"])
if os.environ.get("MAX_EPOCHS"):
    kw["max_epochs"] = int(os.environ["MAX_EPOCHS"])
if os.environ.get("SAVE"):
    from lightning.pytorch.callbacks import ModelCheckpoint
    kw["callbacks"] = [ModelCheckpoint(dirpath="ckpt", every_n_train_steps=int(os.environ["SAVE"]), save_top_k=-1)]
t = L.Trainer(**kw)
t.fit(M(), loader, ckpt_path=os.environ.get("RESUME") or None)
print(f"[global_step] rank {t.global_rank} {t.global_step}", flush=True)
'''

HF_SCRIPT = '''
import os, torch
from transformers import Trainer, TrainingArguments


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 2)

    def forward(self, x, labels):
        return {"loss": torch.nn.functional.cross_entropy(self.net(x), labels)}


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 640

    def __getitem__(self, i):
        x = torch.randn(8, generator=torch.Generator().manual_seed(i))
        return {"x": x, "labels": int(x[0] > 0)}


args = TrainingArguments(output_dir="out", per_device_train_batch_size=16, gradient_accumulation_steps=int(os.environ["ACC"]),
                         max_steps=int(os.environ.get("MAX_STEPS", "-1")), num_train_epochs=float(os.environ.get("EPOCHS", "1")),
                         use_cpu=True, report_to=[], disable_tqdm=True, save_strategy="steps" if os.environ.get("SAVE") else "no",
                         save_steps=int(os.environ.get("SAVE", "500")), optim=os.environ.get("OPTIM", "adamw_torch"), learning_rate=1e-3)
trainer = Trainer(model=Model(), args=args, train_dataset=Data())
trainer.train(resume_from_checkpoint=os.environ.get("RESUME") or None)
print(f"[global_step] rank {os.environ['RANK']} {trainer.state.global_step}", flush=True)
'''


def _run_framework(tmp_path, script: str, **env: str) -> tuple[list[int], int | None, str]:
    """The framework's own last step on each rank, the planned steps the log's rank 0 said last,
    and the launch's output, of ``script`` under ``pardash launch --nproc 2 --headless``."""
    (tmp_path / "train.py").write_text(script)
    log = tmp_path / "run.jsonl"
    log.unlink(missing_ok=True)
    proc = _launch(tmp_path, "train.py", env=pardash_env(**env))
    proc.wait(300)
    out = (tmp_path / "launch.out").read_text()
    assert proc.returncode == 0, out[-3000:]
    theirs = sorted(int(s) for s in re.findall(r"\[global_step\] rank \d (\d+)", out))
    return theirs, total_steps(_hellos(log)[-1]), out


def _last_line_step(out: str) -> str:
    return re.findall(r"\] step (\S+) \|", out)[-1]


def test_lightning_says_its_steps_as_its_global_step_counts_them(tmp_path):
    pytest.importorskip("lightning")
    # max_epochs, no max_steps, with gradient accumulation: 640 samples, 2 ranks, 16 a batch,
    # 20 batches a rank an epoch, 3 a step: 7 steps an epoch (the last of 2 batches)
    theirs, total, out = _run_framework(tmp_path, PL_SCRIPT, ACC="3", MAX_EPOCHS="2", SAVE="5")
    assert theirs == [14, 14] and total == 14 and _last_line_step(out) == "14/14"
    # resumed at step 10, to max_steps: the steps go on, the total is where the fit ends
    theirs, total, out = _run_framework(tmp_path, PL_SCRIPT, ACC="1", MAX_STEPS="25", RESUME="ckpt/epoch=1-step=10.ckpt")
    assert theirs == [25, 25] and total == 25 and _last_line_step(out) == "25/25"
    # an iterable dataset with no length and no max_steps: no total, as before
    theirs, total, out = _run_framework(tmp_path, PL_SCRIPT, ACC="1", MAX_EPOCHS="1", ITERABLE="1")
    assert total is None and _last_line_step(out) == str(theirs[0])


def test_hugging_faces_trainer_says_its_steps_as_its_global_step_counts_them(tmp_path):
    pytest.importorskip("transformers")
    theirs, total, out = _run_framework(tmp_path, HF_SCRIPT, ACC="2", MAX_STEPS="12", SAVE="6", OPTIM="sgd")
    assert theirs == [12, 12] and total == 12 and _last_line_step(out) == "12/12"
    # resumed at step 6 (SGD's optimizer.pt holds no count: the framework's own count says it)
    theirs, total, out = _run_framework(tmp_path, HF_SCRIPT, ACC="2", MAX_STEPS="16", OPTIM="sgd", RESUME="out/checkpoint-6")
    assert theirs == [16, 16] and total == 16 and _last_line_step(out) == "16/16"
    assert build_report(str(tmp_path / "run.jsonl"))["steps"] == 10
    # num_train_epochs, no max_steps: 20 batches a rank an epoch, 2 a step
    theirs, total, out = _run_framework(tmp_path, HF_SCRIPT, ACC="2", EPOCHS="1.5")
    assert theirs == [15, 15] and total == 15 and _last_line_step(out) == "15/15"


AGAIN_T = 1_800_000_000.0


def test_a_hello_its_process_sends_again_is_no_restart_in_the_report(tmp_path):
    # A framework's ranks send their hello again once training begins (its planned steps): the
    # report read each as a restart, closing a loss gone NaN as "until restart".
    hello = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=100 + r, t=AGAIN_T, source="auto", pardash_version="0.1.0") for r in (0, 1)]
    records = list(hello)
    for s in range(1, 41):
        if s == 10:
            records.append(schema.Event(run="r", rank=1, seq=1000 + s, name="warning", step=9, t=AGAIN_T + s,
                                        message="loss is nan at step 9: diverged, or a spike (steps go on without a loss while it is not finite)"))  # fmt: skip
        if s == 20:
            records += [schema.Hello(run="r", rank=r, seq=2000 + r, world_size=2, pid=100 + r, t=AGAIN_T + s, source="auto",
                                     pardash_version="0.1.0", config={"total_steps": 40}) for r in (0, 1)]  # fmt: skip
        records += [schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.02, samples=8, t=AGAIN_T + s, loss=None if r == 1 and s >= 9 else 1.0)
                    for r in (0, 1)]  # fmt: skip
    path = tmp_path / "again.jsonl"
    path.write_bytes(schema.encode_json_lines(records))
    (turn,) = build_report(str(path))["loss_not_finite"]
    assert (turn["rank"], turn["step"], turn["until"]) == (1, 9, "end"), turn
