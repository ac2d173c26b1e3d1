"""``pardash report`` on checkpoints, as a review of PyTorch's own examples found it: the DDP
tutorial's rank 0 saving a snapshot every 5 epochs (4.4 s each, rank 1 waiting) read "24 saved
... slowest save 4.42 s" and nowhere the 106 s the saves took of a 121 s run; and the FSDP2
example's model and optimizer, two ``torch.save`` calls between the same two steps, read as one
save of the optimizer's time with the model's path. Each log is built here, small."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from pardash.telemetry import schema
from pardash.telemetry.report import build_report, render_markdown, render_text

DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))
import make_logs  # noqa: E402  (tests/data/make_logs.py: the logs' writer)

STEP_S = 0.1


def _run(tmp_path: Path, saves, *, steps: int = 20, beside: bool = False) -> dict:
    """The report of a DDP run of 2 ranks, closed by its hub, whose steps take 0.1 s; ``saves``:
    step -> [(rank, path, seconds)] saved after it, each rank's in the order given, back to
    back, the others waiting for the slowest; ``beside``: each save said once the next step
    had run (asynchronous), the steps not held for it."""
    log = make_logs.Log("ckpt")
    make_logs.hub_note(log, 0.0, "hub started (pid 1), ingest tcp://127.0.0.1:29600")
    for r in range(2):
        log.add(make_logs.hello(r, 2, strategy="ddp", host="vm", node=0, local=r, steps=steps), 0.1)
    t = 0.2
    pending: list[tuple[float, schema.Event]] = []
    for s in range(1, steps + 1):
        t += STEP_S
        for r in range(2):
            log.add(schema.Step(rank=r, step=s, loss=4.0 - 0.1 * s, samples=16, step_s=STEP_S, self_s=0.05), t)
        for at, ev in pending:
            log.add(ev, at)
        pending = []
        held = 0.0
        for r in range(2):
            done = t
            for rank, path, seconds in saves.get(s, ()):
                if rank == r:
                    done += seconds or 0.0  # (None: a save that says no time)
                    ev = schema.Event(rank=r, name="checkpoint", step=s, message=path, duration_s=seconds)
                    if beside:
                        pending.append((done, ev))
                    else:
                        log.add(ev, done)
            held = max(held, done - t)
        if not beside:
            t += held
    for r in range(2):
        log.add(schema.Event(rank=r, name="exit", code=0, step=steps), t + 0.1)
    make_logs.hub_note(log, t + 0.2, "hub stopped: 100 messages, 0 lost, 0 rejected")
    path = tmp_path / "run.jsonl"
    log.write(path)
    return build_report(str(path))


@pytest.mark.parametrize("savers", [(0,), (0, 1)], ids=["rank 0 alone, the other waiting", "every rank its shard (DCP)"])
def test_the_checkpoints_time_in_all_is_said_as_the_evaluations_is(tmp_path, savers):
    # The DDP tutorial's snapshot every 5 steps, 4.4 s each: the run spent 17.6 s of its 19.7 s
    # saving and the report said the slowest save alone. Saved by every rank at once (each its
    # shard, rank 1 a little faster) it is as long: the run waits for the slowest once, not for
    # the ranks' times added up.
    saves = {s: [(r, "/ckpt/snapshot.pt", 4.4 if r == 0 else 4.3) for r in savers] for s in (5, 10, 15, 20)}
    rep = _run(tmp_path, saves)
    ck = rep["checkpoints"]
    assert ck["saving_s"] == pytest.approx(4 * 4.4)
    assert ck["saving_outside_steps_s"] == pytest.approx(4 * 4.4, abs=1e-4)
    said = "4 saved, 17.6 s in all, outside the steps"
    assert re.search(rf"\ncheckpoints +{said}\n", render_text(rep)), render_text(rep)
    assert f"| checkpoints | {said} |" in render_markdown(rep), render_markdown(rep)


def test_a_save_beside_the_steps_is_not_said_to_be_outside_them(tmp_path):
    # An asynchronous save, said once the next step had run, held no rank out of its steps
    # (the training time keeps it): "outside the steps" would say the opposite.
    rep = _run(tmp_path, {5: [(0, "/ckpt/5", 0.05)], 10: [(0, "/ckpt/10", 0.05)]}, beside=True)
    assert rep["checkpoints"]["saving_s"] == pytest.approx(0.1)
    assert rep["checkpoints"]["saving_outside_steps_s"] == pytest.approx(0.0, abs=1e-4)
    assert "2 saved, 0.1 s in all, beside the steps (asynchronous)" in render_text(rep)


def test_saves_that_said_no_time_are_not_counted_in_the_time(tmp_path):
    # One of three saves said its time: "3 saved, 0.9 s in all" read as the three's.
    rep = _run(tmp_path, {5: [(0, "/ckpt/5", 0.9)], 10: [(0, "/ckpt/10", None)], 15: [(0, "/ckpt/15", None)]})
    assert rep["checkpoints"]["saving_s"] == pytest.approx(0.9)
    assert "3 saved, 0.9 s in the 1 that said their time, outside the steps" in render_text(rep), render_text(rep)


def test_a_run_without_saves_says_no_checkpoints_time(tmp_path):
    rep = _run(tmp_path, {})
    assert rep["checkpoints"]["saving_s"] is None
    assert "checkpoints" not in render_text(rep)


def test_the_model_and_the_optimizer_saved_in_two_files_are_one_save_of_both_times(tmp_path):
    # PyTorch's FSDP2 example: torch.save of the model's state dict, then of the optimizer's,
    # between the same two steps. The report said "slowest save 47 ms" (the optimizer's file)
    # beside "the last in .../model_state_dict.pt" (the model's).
    files = [(0, "/ckpt/1700000000/model_state_dict.pt", 0.016), (0, "/ckpt/1700000000/optim_state_dict.pt", 0.0468)]
    rep = _run(tmp_path, {4: files})
    (saved,) = rep["checkpoints"]["saved"]
    assert saved == {"step": 4, "path": "/ckpt/1700000000/model_state_dict.pt", "ranks": 1,
                     "duration_s": pytest.approx(0.0628), "files": 2}  # fmt: skip
    assert rep["checkpoints"]["saving_s"] == pytest.approx(0.0628)
    for text in (render_text(rep), render_markdown(rep).replace("\\_", "_")):  # (markdown escapes the names' _)
        assert "1 saved at step 4; the last in /ckpt/1700000000/model_state_dict.pt and 1 more file; slowest save 63 ms (step 4)" in text, text


@pytest.mark.parametrize("named", ["by its step", "by its time"])
def test_a_save_of_several_files_in_a_folder_of_its_own_is_named_by_the_folder(tmp_path, named):
    # A Hugging Face Trainer's save, rank 1's rng_state_1.pth heard first: "the last in
    # .../checkpoint-30/rng_state_1.pth and 2 more files". PyTorch's FSDP2 example's folders are
    # named by the time: a folder each save, none another's.
    def folder(s):
        return f"/out/checkpoint-{s}" if named == "by its step" else f"/ckpt/{1700000000 + s}"

    rep = _run(tmp_path, {s: [(1, f"{folder(s)}/rng_state_1.pth", 0.01), (0, f"{folder(s)}/optimizer.pt", 0.02),
                              (0, f"{folder(s)}/rng_state_0.pth", 0.01)] for s in (10, 20)})  # fmt: skip
    assert [c["path"] for c in rep["checkpoints"]["saved"]] == [f"{folder(10)}/", f"{folder(20)}/"]
    assert f"2 saved at steps 10, 20; the last in {folder(20)}/ (3 files); slowest save 30 ms" in render_text(rep), render_text(rep)


def test_each_ranks_own_file_is_one_save_of_the_slowest_rank(tmp_path):
    # Every rank saving a file of its own at once: the checkpoint is of both files, and takes
    # the slowest rank's time (the ranks wrote at once), not their sum.
    rep = _run(tmp_path, {6: [(0, "/ckpt/step-6-rank0.pt", 0.5), (1, "/ckpt/step-6-rank1.pt", 0.3)]})
    (saved,) = rep["checkpoints"]["saved"]
    assert (saved["ranks"], saved["duration_s"], saved["files"]) == (2, pytest.approx(0.5), 2)
    assert "the last in /ckpt/step-6-rank0.pt and 1 more file; slowest save 0.50 s (step 6)" in render_text(rep)
