"""Zero-code instrumentation of the checkpoints a script saves itself (``torch.save`` of its
model's state, ``torch.distributed.checkpoint.save``): a ``checkpoint`` event with where and
how long, phase "checkpoint" while it runs, its time in no step. In process on a fake clock,
then one real 2-rank launch."""

from __future__ import annotations

import gc
import io
import os
import sys

import pytest
import torch
from torch import nn

from pardash.telemetry import api, schema
from pardash.telemetry.env import RankIdentity
from pardash.trainer.instrument import Instrument
from helpers import pardash_env
from pardash.trainer.saves import dcp_saved, file_saved, training_state
from test_autorun import RecordingReporter, _launch, _steps, _timed_step


class Reporter(RecordingReporter):
    """Keeps each event's fields too: ``events`` is [(name, fields)]."""

    def event(self, name: str, message: str = "", **fields) -> bool:
        self.events.append((name, {"message": message, **fields}))
        return True

    def close(self, linger_ms: int = 0) -> None:
        pass


@pytest.fixture
def hooked(monkeypatch):
    """An Instrument of a rank alone, on a fake clock (``clock[0]``, which the test moves)."""
    api._reset_for_tests()
    rep = Reporter()
    inst = Instrument(rep).install()
    clock = [100.0]
    monkeypatch.setattr(inst.clock, "stamp", lambda: clock[0])
    torch.manual_seed(0)
    yield inst, rep, clock
    inst.uninstall()
    api._reset_for_tests()


class SlowFile(io.FileIO):
    """A checkpoint file whose writing takes ``seconds`` on the fake clock, and notes the
    heartbeat's phase meanwhile."""

    def __init__(self, path, clock: list[float], rep: Reporter, seconds: float = 2.0) -> None:
        super().__init__(str(path), "wb")
        self.clock, self.rep, self.seconds = clock, rep, seconds
        self.phases: list[str] = []

    def write(self, b) -> int:
        if not self.phases:
            self.clock[0] += self.seconds
        self.phases.append(self.rep.phases[-1])
        return super().write(b)


def _checkpoints(rep: Reporter) -> list[dict]:
    return [fields for name, fields in rep.events if name == "checkpoint"]


def test_a_save_of_the_models_state_is_a_checkpoint_in_no_step(hooked, tmp_path):
    # The script saves its state every 5 steps (and after its first, while that step's round
    # may still go on). No checkpoint event came; each save's 2 s landed in the next step's
    # data time; and the heartbeat said "data" all along, so a save of minutes read "rank 0
    # stalled in data" after 5 s.
    inst, rep, clock = hooked
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    files = []
    for step in range(1, 13):
        _timed_step(model, opt, clock)
        if step == 1 or step % 5 == 0:
            with SlowFile(tmp_path / f"step{step}.pt", clock, rep) as f:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, f)
            files.append(f)
            assert rep.phases[-1] == "data"  # (the next step's, once it is over)
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, 13))
    # (the first step's clock starts at its first forward)
    assert [s["data_s"] for s in rep.steps] == pytest.approx([0.0] + [0.010] * 11)
    assert [s["step_s"] for s in rep.steps] == pytest.approx([0.050] + [0.060] * 11)
    saved = _checkpoints(rep)
    assert [(c["step"], c["message"]) for c in saved] == [(s, str(tmp_path / f"step{s}.pt")) for s in (1, 5, 10)]
    assert all(c["duration_s"] > 0 for c in saved)
    assert all(f.phases and set(f.phases) == {"checkpoint"} for f in files)
    assert torch.load(tmp_path / "step10.pt")["step"] == 10  # (saved as without pardash)


def test_a_small_save_that_is_no_training_state_is_no_checkpoint(hooked, tmp_path):
    # A list of losses, a dict of metrics, a batch of predictions saved each step: no
    # checkpoint, and their time is the step's. The model's weights saved at the end are one.
    inst, rep, clock = hooked
    model = nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(1, 5):
        _timed_step(model, opt, clock)
        losses.append(float(step))
        torch.save(losses, tmp_path / "losses.pt")
        torch.save({"loss": losses, "lr": 0.1}, tmp_path / "metrics.pt")
        torch.save(torch.randn(4, 4), tmp_path / "predictions.pt")
    assert "checkpoint" not in rep.phases
    torch.save(model.state_dict(), tmp_path / "final.pt")
    inst.finish()
    assert [(c["step"], c["message"]) for c in _checkpoints(rep)] == [(4, str(tmp_path / "final.pt"))]
    assert rep.phases.count("checkpoint") == 1



def on_a_fake_clock(monkeypatch) -> tuple[Instrument, "Reporter", list[float]]:
    """Rank 0 of two, instrumented on a clock the test moves (``clock[0]``), whose
    ``torch.distributed.barrier`` waits 30 ms for the other rank."""
    api._reset_for_tests()
    clock = [100.0]

    def barrier(*args, **kwargs) -> None:
        clock[0] += 0.030  # (waiting for the other rank)

    monkeypatch.setattr(torch.distributed, "barrier", barrier)
    rep = Reporter()
    rep.identity = RankIdentity(rank=0, local_rank=0, world_size=2, node=0, host="here", restart=0)
    inst = Instrument(rep).install()
    monkeypatch.setattr(inst.clock, "stamp", lambda: clock[0])
    return inst, rep, clock


def test_the_work_and_the_wait_before_a_save_stay_in_the_step(monkeypatch, tmp_path):
    # After each optimizer step the script works 5 ms (writes its logs), waits 30 ms in its own
    # barrier, then saves (2 s) every 3 steps, and after its first while that step's round may
    # still go on. The step after a save started at the save's end: data 0 and comm_s 0, the
    # rank's work and its wait before the save gone with the save, step 60 ms, not 95.
    inst, rep, clock = on_a_fake_clock(monkeypatch)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(1, 11):
            _timed_step(model, opt, clock)
            clock[0] += 0.005
            torch.distributed.barrier()
            if step == 1 or step % 3 == 0:
                with SlowFile(tmp_path / f"step{step}.pt", clock, rep) as f:
                    torch.save(model.state_dict(), f)
        inst.finish()
    finally:
        inst.uninstall()
        api._reset_for_tests()
    assert [c["step"] for c in _checkpoints(rep)] == [1, 3, 6, 9]
    after = rep.steps[1:]  # (the first step's clock starts at its first forward)
    assert [s["data_s"] for s in after] == pytest.approx([0.015] * 9)
    assert [s["comm_s"] for s in after] == pytest.approx([0.030] * 9)
    assert [s["step_s"] for s in after] == pytest.approx([0.095] * 9)
    phases = ("data_s", "forward_s", "backward_s", "optimizer_s", "comm_s")
    assert all(sum(s[p] for p in phases) == pytest.approx(s["step_s"]) for s in after)


def test_a_save_to_a_buffer_says_no_path(hooked):
    # torch.save to io.BytesIO(): the event's message read "saved", a path the report printed
    # as "the last in saved". A file has its name; a buffer none.
    inst, rep, clock = hooked
    model = nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _timed_step(model, opt, clock)
    torch.save(model.state_dict(), io.BytesIO())
    inst.finish()
    assert [(c["step"], c["message"]) for c in _checkpoints(rep)] == [(1, "")]
    assert file_saved(io.BytesIO()) == ""
    assert file_saved("ckpt/step5.pt") == "ckpt/step5.pt"
    assert dcp_saved((), {}) == ""
    assert dcp_saved((), {"checkpoint_id": "ckpt/dcp5"}) == "ckpt/dcp5"


@pytest.mark.parametrize(
    "obj, state",
    [
        (lambda m, o: m, True),
        (lambda m, o: m.state_dict(), True),
        (lambda m, o: o.state_dict(), True),  # (plain SGD's holds no tensor)
        (lambda m, o: {"model": m.state_dict(), "epoch": 3}, True),
        (lambda m, o: {"models": [m.state_dict()]}, True),
        (lambda m, o: [1.0, 2.0], False),
        (lambda m, o: {"loss": [1.0], "config": {"lr": 0.1}}, False),
        (lambda m, o: torch.zeros(3), False),
    ],
)
def test_training_state_is_a_model_or_state_dicts_within_two_levels(obj, state):
    model = nn.Linear(2, 2)
    assert training_state(obj(model, torch.optim.SGD(model.parameters(), lr=0.1))) is state


def test_a_script_that_says_its_own_checkpoints_gets_no_second_event(hooked, tmp_path):
    # pt.event("checkpoint", ...) after its torch.save, the script's only use of the API: its
    # events are the checkpoints, the instrumentation's are not sent; the saves still keep
    # their time out of the steps.
    import pardash.telemetry as pt

    inst, rep, clock = hooked
    api._api.reporter = rep  # (the script's events and the instrumentation's, in one list)
    model = nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 11):
        _timed_step(model, opt, clock)
        if step % 5 == 0:
            with SlowFile(tmp_path / f"step{step}.pt", clock, rep) as f:
                torch.save(model.state_dict(), f)
            pt.event("checkpoint", f"ours {step}", step=step, duration_s=2.0)
    inst.finish()
    api.flush()  # (as the launch's rank does at its end)
    assert [c["message"] for c in _checkpoints(rep)] == ["ours 5", "ours 10"]
    assert [s["data_s"] for s in rep.steps] == pytest.approx([0.0] + [0.010] * 9)


def test_a_dcp_save_is_one_checkpoint_and_its_collectives_no_sync(hooked, tmp_path):
    # torch.distributed.checkpoint.save (its torch.save of each file inside, its gathers and
    # broadcasts between the ranks): one checkpoint event naming its folder, phase
    # "checkpoint" throughout, and its collectives no wait of the step's ("sync", comm_s).
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    inst, rep, clock = hooked
    rep.identity = RankIdentity(rank=0, local_rank=0, world_size=2, node=0, host="here", restart=0)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = nn.Linear(8, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        seen = []
        gather = dist.gather_object  # (as pardash wraps it)

        def noting(*args, **kwargs):
            seen.append(rep.phases[-1])
            clock[0] += 1.0
            return gather(*args, **kwargs)

        dist.gather_object = noting
        try:
            for step in range(1, 5):
                _timed_step(model, opt, clock)
                if step == 2:
                    dcp.save({"model": model.state_dict()}, checkpoint_id=tmp_path / "ckpt2")
                if step == 3:
                    dcp.save({"model": model.state_dict()}, storage_writer=dcp.FileSystemWriter(tmp_path / "ckpt3"))
        finally:
            dist.gather_object = gather
        inst.finish()
    finally:
        gc.collect()
        dist.destroy_process_group()
    assert [(c["step"], c["message"]) for c in _checkpoints(rep)] == [(2, str(tmp_path / "ckpt2")), (3, str(tmp_path / "ckpt3"))]
    assert seen and set(seen) == {"checkpoint"}
    assert "sync" not in rep.phases
    assert [s["data_s"] for s in rep.steps] == pytest.approx([0.0] + [0.010] * 3)
    assert all(not s.get("comm_s") for s in rep.steps)


def test_dcps_state_dict_helpers_step_the_optimizer_in_no_step(hooked):
    # get_state_dict and set_state_dict (DCP's, what the PyTorch FSDP2 example saves and
    # resumes with) first step an optimizer without state, on zero gradients with every
    # learning rate 0, to make its state: for plain SGD, at every call. Each was a step: one
    # more a save, one at each resume (step 41 of 40), with lr 0, no forward, no samples.
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    inst, rep, clock = hooked
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 8):
        _timed_step(model, opt, clock)
        if step == 3:
            model_state, optim_state = get_state_dict(model, opt)
        if step == 5:
            set_state_dict(model, opt, model_state_dict=model_state, optim_state_dict=optim_state)
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, 8))
    assert [s["lr"] for s in rep.steps] == pytest.approx([0.1] * 7)
    assert [s["samples"] for s in rep.steps] == [6] * 7
    assert [s["step_s"] for s in rep.steps] == pytest.approx([0.050] + [0.060] * 6)


def _resumes(rep: Reporter) -> list[dict]:
    return [fields for name, fields in rep.events if name == "resume"]


def test_a_state_dict_made_on_another_thread_hides_no_training_step(hooked):
    # A checkpoint thread in get_state_dict (its optimizer step that makes the state) while the
    # training thread steps: every optimizer step, the training thread's too, was ignored.
    import threading

    from torch.distributed.checkpoint import state_dict as dcp_state_dict

    inst, rep, clock = hooked
    inside, release = threading.Event(), threading.Event()

    class Waiting(torch.optim.SGD):
        def step(self, closure=None):
            inside.set()
            release.wait(30)
            return super().step(closure)

    other = Waiting(nn.Linear(2, 2).parameters(), lr=0.1)
    maker = threading.Thread(target=dcp_state_dict._init_optim_state, args=(other,))
    maker.start()
    try:
        assert inside.wait(30)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            _timed_step(model, opt, clock)
    finally:
        release.set()
        maker.join(30)
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3]
    assert [s["step_s"] for s in rep.steps] == pytest.approx([0.050, 0.060, 0.060])


def test_a_scripts_resume_goes_on_from_its_checkpoints_step(hooked, tmp_path):
    # nanoGPT's --init_from=resume: torch.load of {"model", "optimizer", "iter_num": 250}
    # before its first step, its optimizer given its state. Its steps read 1, 2, 3 again (a
    # TensorBoard export laid over the first run's) and nothing said the resume. The load alone
    # is none (a full checkpoint read for its weights: a fine-tune's start, a teacher), nor is
    # a load after the first step (the best model, for a last evaluation).
    inst, rep, clock = hooked
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "iter_num": 250, "config": {}}, path)
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"])
    assert not _resumes(rep) and rep.last_step == 0
    opt.load_state_dict(ckpt["optimizer"])
    assert rep.last_step == 250  # (the heartbeat's, before the first step)
    for _ in range(3):
        _timed_step(model, opt, clock)
    opt.load_state_dict(torch.load(path)["optimizer"])
    inst.finish()
    assert [s["step"] for s in rep.steps] == [251, 252, 253]
    assert [s["step_s"] for s in rep.steps] == pytest.approx([0.050, 0.060, 0.060])
    [resume] = _resumes(rep)
    assert resume["step"] == 250 and resume["message"] == f"step 250 from {path}" and resume["duration_s"] >= 0


def _trained_adam(steps: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Linear(8, 4)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(steps):
        model(torch.randn(3, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


@pytest.mark.parametrize(
    "what, first, said",
    [
        # a model's weights alone: a fine-tune's start, no resume
        ("weights", 1, None),
        # a full checkpoint read for its weights (a teacher, a fine-tune from a pretraining run)
        ("teacher", 1, None),
        # an optimizer's state dict alone (Hugging Face's optimizer.pt): Adam's own count
        ("optimizer", 8, "step 7 from {path} (its optimizer's count)"),
        # plain SGD's state holds no count, nor does the checkpoint: said, counted from 1
        ("sgd", 1, "no step count in {path}, steps count from 1"),
    ],
)
def test_what_a_load_before_the_first_step_resumes(what, first, said, tmp_path):
    # (made before the instrument: its own steps would be counted)
    model, adam = _trained_adam(7)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    path = tmp_path / f"{what}.pt"
    saved = {"weights": model.state_dict(), "teacher": {"model": model.state_dict(), "optimizer": adam.state_dict(), "iter_num": 600000},
             "optimizer": adam.state_dict(), "sgd": {"model": model.state_dict(), "optimizer": sgd.state_dict()}}  # fmt: skip
    torch.save(saved[what], path)
    api._reset_for_tests()
    rep = Reporter()
    inst = Instrument(rep).install()
    try:
        loaded = torch.load(path)
        opt = torch.optim.Adam(model.parameters(), lr=0.1) if what == "optimizer" else sgd
        if what == "optimizer":
            opt.load_state_dict(loaded)
        elif what == "sgd":
            opt.load_state_dict(loaded["optimizer"])
        else:
            model.load_state_dict(loaded["model"] if what == "teacher" else loaded)
        _train_one(model, opt)
        inst.finish()
    finally:
        inst.uninstall()
        api._reset_for_tests()
    assert [s["step"] for s in rep.steps] == [first]
    assert [r["message"] for r in _resumes(rep)] == ([said.format(path=path)] if said else [])


@pytest.mark.parametrize("then", ["fresh", "resumed"])
def test_an_optimizer_given_its_own_fresh_state_is_no_resume(then, tmp_path):
    # Hugging Face's accelerator.prepare (so every Trainer) gives each optimizer its own fresh
    # state back (load_state_dict, to move it to the device): every fresh run said "[resume]
    # resumed: no step count in it", and Trainer's resume_from_checkpoint after it went
    # unsaid, its steps counted from 1 again.
    model, trained = _trained_adam(7)
    path = tmp_path / "optimizer.pt"
    torch.save(trained.state_dict(), path)
    api._reset_for_tests()
    rep = Reporter()
    inst = Instrument(rep).install()
    try:
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        opt.load_state_dict(opt.state_dict())  # (accelerate's AcceleratedOptimizer.__init__)
        if then == "resumed":
            opt.load_state_dict(torch.load(path))
        _train_one(model, opt)
        inst.finish()
    finally:
        inst.uninstall()
        api._reset_for_tests()
    assert [s["step"] for s in rep.steps] == ([8] if then == "resumed" else [1])
    said = [f"step 7 from {path} (its optimizer's count)"] if then == "resumed" else []
    assert [r["message"] for r in _resumes(rep)] == said


def _train_one(model, opt) -> None:
    model(torch.randn(3, 8)).sum().backward()
    opt.step()
    opt.zero_grad()


def test_a_load_that_fails_shows_none_of_pardashs_frames(hooked, tmp_path):
    # A script's torch.load of a missing file: its traceback held `trainer/loads.py, in load`,
    # pardash's wrapper, between the script's line and torch's.
    import traceback

    from pardash.trainer import autorun

    with pytest.raises(FileNotFoundError) as raised:
        torch.load(tmp_path / "missing.pt")
    files = [f.filename for f in traceback.extract_tb(autorun._trim(raised.value).__traceback__)]
    assert files[0] == __file__ and not any(f.startswith(os.path.dirname(autorun.__file__)) for f in files), files


def test_a_checkpoint_read_for_its_weights_is_freed_when_the_script_drops_it(hooked, tmp_path):
    # A full checkpoint (weights, optimizer, counter) read for its weights alone, a teacher's:
    # held by pardash for a resume that never came, its tensors stayed alive all run.
    import weakref

    inst, rep, clock = hooked
    model, adam = _trained_adam(0)  # (no step: the loads are before this process's first)
    torch.save({"model": model.state_dict(), "optimizer": adam.state_dict(), "iter_num": 9}, tmp_path / "teacher.pt")
    teacher = torch.load(tmp_path / "teacher.pt")
    model.load_state_dict(teacher["model"])
    kept = weakref.ref(teacher["model"]["weight"])
    del teacher
    gc.collect()
    assert kept() is None


def test_a_step_count_with_no_value_to_read_is_none():
    # A checkpoint loaded to the meta device: its count's item() raised inside the hook, and
    # the instrumentation stopped for the rest of the run.
    from pardash.trainer.loads import steps_in

    meta = torch.empty((), device="meta")
    assert steps_in({"step": meta}, {"state": {0: {"step": meta}}}) == (None, "")
    assert steps_in({"iter_num": torch.tensor(5)}, {}) == (5, "iter_num")


def test_a_dcp_load_before_the_first_step_is_a_resume(hooked, tmp_path):
    # torch.distributed.checkpoint.load into the script's state dict, then set_state_dict: the
    # same, its count from the state dict it loaded; its own torch.load of each file no resume.
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    inst, rep, clock = hooked
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model, opt = _trained_adam(0)
        model_state, optim_state = get_state_dict(model, opt)
        dcp.save({"model": model_state, "optim": optim_state, "step": 12}, checkpoint_id=tmp_path / "ckpt")
        state = {"model": model_state, "optim": optim_state, "step": 0}
        dcp.load(state, checkpoint_id=tmp_path / "ckpt")
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        _train_one(model, opt)
        inst.finish()
    finally:
        gc.collect()
        dist.destroy_process_group()
    assert [r["message"] for r in _resumes(rep)] == [f"step 12 from {tmp_path / 'ckpt'}"]
    assert [s["step"] for s in rep.steps] == [13]


def test_a_save_that_fails_raises_as_without_pardash_and_gives_its_phase_back(hooked, tmp_path):
    # A save to a folder that is not there: the script's own error, with no pardash frame in
    # its traceback (autorun cuts the instrument's files), no checkpoint, the phase given back.
    import traceback

    from pardash.trainer import autorun

    inst, rep, clock = hooked
    model = nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _timed_step(model, opt, clock)
    _timed_step(model, opt, clock)
    with pytest.raises(RuntimeError) as failed:
        torch.save(model.state_dict(), tmp_path / "missing" / "step2.pt")
    frames = [f.filename for f in traceback.extract_tb(failed.value.__traceback__)]
    pardash = os.path.dirname(os.path.dirname(autorun.__file__))
    ours = [f for f in frames if f.startswith(pardash + os.sep) and "site-packages" not in f and not f.endswith("test_autorun_saves.py")]
    assert ours and set(ours) <= set(autorun._OURS)
    assert rep.phases[-2:] == ["checkpoint", "data"]
    _timed_step(model, opt, clock)
    inst.finish()
    assert not _checkpoints(rep) and not inst.dead


SAVES = """
import time, torch, torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint import save
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 11):
    model(torch.randn(16, 16)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    torch.save([step], f"progress{rank}.pt")  # (no checkpoint)
    if rank == 0:
        time.sleep(0.03)  # its own work after the step (writing its logs)
    dist.barrier()
    if step == 1 or step % 3 == 0 and (rank == 0 or step != 6):  # (step 6: rank 0 alone)
        torch.save(model.module.state_dict(), f"ck{rank}.pt")
    if step % 5 == 0:
        if rank == 0:
            torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict()}, f"ckpt{step}.pt")
        dist.barrier()
    if step == 1 or step % 3 == 0:  # (test_autorun_eval_lead.py's evaluations, after the saves)
        model.eval()
        with torch.no_grad():
            for _ in range(4):
                model(torch.randn(64, 16)).sum().item()
        model.train()
save({"model": model.module.state_dict()}, checkpoint_id="dcp")  # every rank's shard
dist.destroy_process_group()
"""


class SavesRun:
    """``pardash launch --headless --nproc 2 -- saves.py`` (SAVES), ended: ``proc`` and the
    log's messages, ``msgs``."""

    def __init__(self, base) -> None:
        (base / "saves.py").write_text(SAVES)
        self.proc, self.msgs = _launch(base, "saves.py", env=pardash_env(PARDASH_REGISTRY_DIR=str(base / "registry")))


# One launch serves this test and test_autorun_eval_lead.py's launched one: the script saves
# and evaluates between the same steps, as a validation and a checkpoint each epoch do (a
# launch of 2 ranks is 7 s of a core here). Its tests share a worker, which makes it once.
SAVES_RUN_GROUP = pytest.mark.xdist_group("h289_saves_run")
_saves_runs: list[SavesRun] = []


def shared_saves_run(tmp_path_factory) -> SavesRun:
    """The worker's :class:`SavesRun`, made by the first test that asks for it."""
    if not _saves_runs:
        _saves_runs.append(SavesRun(tmp_path_factory.mktemp("saves-run")))
    return _saves_runs[0]


@pytest.fixture
def saves_run(tmp_path_factory) -> SavesRun:
    return shared_saves_run(tmp_path_factory)


@SAVES_RUN_GROUP
def test_a_launched_scripts_saves_are_its_checkpoints_and_the_work_before_them_stays_in_its_step(saves_run):
    # The script's own saves under `pardash launch`: each rank's model state after step 1 and
    # every 3 steps (at step 6 rank 0 alone), rank 0's model and optimizer every 5 steps before
    # a barrier, then a DCP save on every rank (imported by name before the run began).
    # Rank 0 works 30 ms after each optimizer step, then every rank waits in dist.barrier(),
    # then saves. The step after a save started at the save's end: rank 0's data read 0.1 ms,
    # not its 30 ms, and rank 1's wait in the barrier was gone (comm_s 0).
    proc, msgs = saves_run.proc, saves_run.msgs
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = sorted((m.rank, m.step, m.message) for m in msgs if isinstance(m, schema.Event) and m.name == "checkpoint")
    mine = [(r, s, f"ck{r}.pt") for r, s in ((0, 1), (0, 3), (0, 6), (0, 9), (1, 1), (1, 3), (1, 9))]
    assert saved == sorted([*mine, (0, 5, "ckpt5.pt"), (0, 10, "ckpt10.pt"), (0, 10, "dcp"), (1, 10, "dcp")])
    assert all(m.duration_s > 0 for m in msgs if isinstance(m, schema.Event) and m.name == "checkpoint")
    first, second = _steps(msgs, 0), _steps(msgs, 1)
    assert [s.step for s in first] == [s.step for s in second] == list(range(1, 11))
    # (the first step's clock starts at its first forward; the sleep is at least its 30 ms)
    assert all(s.data_s >= 0.03 for s in first[1:])
    assert all(s.comm_s > 0 for s in second[1:])
    for s in first + second:
        assert s.data_s + s.forward_s + s.backward_s + s.optimizer_s + (s.comm_s or 0.0) == pytest.approx(s.step_s)


_LIBRARIES = {
    # safetensors: the file written by its own code, no torch.save (a Hugging Face Trainer's model)
    "safetensors/torch.py": (
        "def save_file(tensors, filename, metadata=None):\n"
        "    with open(filename, 'wb') as f:\n"
        "        f.write(SLOW.write(b'st'))\n"
    ),
    # PyTorch Lightning's: torch.save to a buffer, then the bytes written through fsspec
    "lightning/fabric/utilities/cloud_io.py": (
        "import io, torch\n"
        "def _atomic_save(checkpoint, filepath):\n"
        "    buf = io.BytesIO()\n"
        "    torch.save(checkpoint, buf)\n"
        "    with open(filepath, 'wb') as f:\n"
        "        f.write(SLOW.write(buf.getvalue()))\n"
    ),
    # (its checkpoint IO binds the name at its import, as Lightning's torch_io does)
    "lightning/fabric/plugins/torch_io.py": "from lightning.fabric.utilities.cloud_io import _atomic_save\n",
}


@pytest.fixture
def libraries(tmp_path, monkeypatch):
    """The fake libraries of _LIBRARIES, importable from ``tmp_path/lib``; gone after."""
    for rel, text in _LIBRARIES.items():
        path = tmp_path / "lib" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for parent in path.relative_to(tmp_path / "lib").parents:
            if str(parent) != ".":
                (tmp_path / "lib" / parent / "__init__.py").touch()
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    yield
    for name in [n for n in sys.modules if n.split(".")[0] in ("safetensors", "lightning")]:
        del sys.modules[name]


def test_a_librarys_save_of_the_model_is_a_checkpoint_with_its_path_and_time(hooked, libraries, tmp_path):
    # A Hugging Face Trainer's model.safetensors (its biggest file) was no checkpoint, its time
    # the evaluation's before it; Lightning's checkpoint, torch.save to a buffer then written,
    # said no path, its write left out of its time, and its two files at one step
    # (epoch=0-step=10.ckpt, last.ckpt) read as one file saved twice.
    inst, rep, clock = hooked

    class Slow:
        def write(self, b):
            clock[0] += 1.0
            assert rep.phases[-1] == "checkpoint"
            return b

    from safetensors import torch as st_torch
    from lightning.fabric.plugins.torch_io import _atomic_save

    st_torch.SLOW = sys.modules["lightning.fabric.utilities.cloud_io"].SLOW = Slow()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        _timed_step(model, opt, clock)
    st_torch.save_file(model.state_dict(), str(tmp_path / "model.safetensors"))
    for name in ("epoch=0-step=2.ckpt", "last.ckpt"):
        _atomic_save({"state_dict": model.state_dict(), "global_step": 2}, tmp_path / name)
    _timed_step(model, opt, clock)
    inst.finish()
    assert [(c["step"], c["message"]) for c in _checkpoints(rep)] == [
        (2, str(tmp_path / "model.safetensors")), (2, str(tmp_path / "epoch=0-step=2.ckpt")), (2, str(tmp_path / "last.ckpt"))]
    assert all(c["duration_s"] > 0 for c in _checkpoints(rep))  # (its own clock: perf_counter)
    assert [s["step_s"] for s in rep.steps] == pytest.approx([0.050, 0.060, 0.060])  # (the saves in none)
    assert torch.load(tmp_path / "last.ckpt")["global_step"] == 2  # (saved as without pardash)
