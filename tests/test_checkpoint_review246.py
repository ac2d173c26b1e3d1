"""--resume after the checkpoint folder was copied without its file times (review 246).

A folder held run A's checkpoints of steps 200-800 and run B's of 1000 and 1200 (B resumed from
A's 800). Copied with a plain ``cp -r`` (rsync or gsutil without keeping times), every file had
the copy's time, step 800's last: --resume took step 800, said that another run's 1000 and 1200
would be replaced, and saved over them. The order of the saves is now a count each save writes
into its folder (``save_order``), which a copy keeps.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from pardash.trainer import checkpoint
from pardash.trainer.strategies import Wrapped
from test_checkpoint_formats import step_lines, train

CPU = torch.device("cpu")


def save(root: Path, step: int, job: str, origin: str = "") -> Path:
    """A real checkpoint (the module's own save, plain format) of a Linear(3, 2) after ``step``,
    saved by ``job``, which went on from ``origin``."""
    model = torch.nn.Linear(3, 2)
    w = Wrapped(model=model, inner=model, strategy="single")
    progress = checkpoint.Progress(step=step, epoch=0, steps_into_epoch=step, total_steps=2000, lr=1e-3, seed=0,
                                   world_size=1)
    path, _ = checkpoint.save(root, progress, w=w, optimizer=torch.optim.AdamW(model.parameters()), rank=0,
                              device=CPU, job=job, origin=origin)
    return path


def markers(root: Path) -> dict[int, Path]:
    """{step: the file that marks its checkpoint complete} of every checkpoint under ``root``."""
    out = {}
    for folder in root.iterdir():
        for name in (checkpoint.DCP_METADATA, checkpoint.PLAIN_FILE):
            if (folder / name).is_file():
                out[int(folder.name.removeprefix("step-"))] = folder / name
    return out


def copied_without_times(src: Path, dst: Path, last: int) -> Path:
    """``src`` copied as ``cp -r`` copies it (no file times kept), the copy of step ``last``'s
    marker made last (in the review, the older run's step 800 had the latest time of all)."""
    shutil.copytree(src, dst, copy_function=shutil.copyfile)
    at = markers(dst)
    when = max(p.stat().st_mtime for p in at.values())
    for step, marker in at.items():
        os.utime(marker, (when + (1 if step == last else 0),) * 2)
    return dst


def test_resume_takes_the_newest_run_after_a_copy_that_kept_no_file_times(tmp_path):
    ck = tmp_path / "ckC"
    for step in (200, 400, 600, 800):
        save(ck, step, "run-b7f7")
    for step in (1000, 1200):
        save(ck, step, "run-6878", origin="run-b7f7")
    for folder in (ck, copied_without_times(ck, tmp_path / "ckE", last=800)):
        assert checkpoint.newest_job(folder) == "run-6878", folder
        assert checkpoint.find_latest(folder, job="run-6878") == checkpoint.Found(1200, checkpoint.step_path(folder, 1200))
        assert checkpoint.last_saved(folder).step == 1200
        assert checkpoint.next_to_try(folder, []).step == 1200
        # Step 1200 damaged: back to 1000, then along the run it went on from.
        assert checkpoint.next_to_try(folder, [checkpoint.step_path(folder, 1200)]).step == 1000


def test_a_fresh_run_beside_an_older_runs_higher_steps_stays_the_newest_after_a_copy(tmp_path):
    # Why the order is by save and not by step: run A saved 50 and 100, then run B started afresh
    # (no --resume) in the same folder and saved 30 and 60. --resume goes on from B's 60, not
    # from A's 100, copied or not.
    ck = tmp_path / "ck"
    for step in (50, 100):
        save(ck, step, "run-a")
    for step in (30, 60):
        save(ck, step, "run-b")
    for folder in (ck, copied_without_times(ck, tmp_path / "copy", last=100)):
        assert checkpoint.newest_job(folder) == "run-b", folder
        assert checkpoint.find_latest(folder, job="run-b").step == 60
        assert checkpoint.last_saved(folder).step == 60


def test_checkpoints_saved_before_the_count_go_by_their_file_times_and_before_counted_ones(tmp_path):
    ck = tmp_path / "ck"
    for step in (50, 100):
        save(ck, step, "run-a")
    for step in (30, 60):
        save(ck, step, "run-b")
    at = markers(ck)
    for k, step in enumerate((50, 100, 30, 60)):
        os.utime(at[step], (1000.0 + k, 1000.0 + k))
    # Saved before counts were kept: the file times tell the order, as before.
    for folder in ck.iterdir():
        (folder / checkpoint.ORDER_FILE).unlink()
    assert checkpoint.newest_job(ck) == "run-b" and checkpoint.last_saved(ck).step == 60
    os.utime(at[100], (2000.0, 2000.0))
    assert checkpoint.newest_job(ck) == "run-a" and checkpoint.last_saved(ck).step == 100
    # A run saving into such a folder counts after all of them, whatever their times say
    # (its save saw them there).
    save(ck, 80, "run-c", origin="run-b")
    os.utime(at[100], (9e9, 9e9))
    assert checkpoint.newest_job(ck) == "run-c" and checkpoint.last_saved(ck).step == 80
    assert (checkpoint.step_path(ck, 80) / checkpoint.ORDER_FILE).read_text() == "1\n"


@pytest.mark.parametrize("damage", [b"\xff\xfe", b"", b"7", b"-3\n", b"0\n", b"x\n"],
                         ids=["not-utf8", "emptied", "cut-short", "negative", "zero", "garbage"])
def test_a_damaged_count_goes_by_its_file_time_among_the_counted(tmp_path, damage):
    ck = tmp_path / "ck"
    for step in (10, 20, 30):
        save(ck, step, "run-a")
    five = save(ck, 5, "run-b")
    at = markers(ck)
    for k, step in enumerate((10, 20, 30, 5)):
        os.utime(at[step], (1000.0 + k, 1000.0 + k))
    (five / checkpoint.ORDER_FILE).write_bytes(damage)
    assert checkpoint.newest_job(ck) == "run-b" and checkpoint.last_saved(ck).step == 5
    os.utime(at[5], (1001.5, 1001.5))  # completed between run-a's 20 and 30
    assert checkpoint.newest_job(ck) == "run-a" and checkpoint.last_saved(ck).step == 30
    # The next save counts past every count that can be read, so after it too.
    save(ck, 40, "run-c")
    assert (checkpoint.step_path(ck, 40) / checkpoint.ORDER_FILE).read_text() == "4\n"
    assert checkpoint.last_saved(ck).step == 40


def test_resume_from_a_copy_without_file_times_goes_on_from_the_newest_checkpoint(tmp_path):
    # The trainer itself, DCP's format (ddp in a world of one): run-a saved steps 2 and 4,
    # run-b resumed from its 4 and saved 6 and 8. From a copy whose step-4 marker came last,
    # --resume took step 4 and said run-b's 6 and 8 would be replaced.
    ck = tmp_path / "ck"
    train(ck, "ddp", "--steps", "4", "--checkpoint-every", "2", run_id="run-a")
    train(ck, "ddp", "--resume", "--steps", "8", "--checkpoint-every", "2", run_id="run-b")
    copy = copied_without_times(ck, tmp_path / "copy", last=4)
    proc = train(copy, "ddp", "--resume", "--steps", "10", "--checkpoint-every", "2", run_id="run-c")
    eight = checkpoint.step_path(copy, 8)
    assert f"resume: step 8 restored from {eight} (saved by run run-b)" in proc.stdout, proc.stdout[-2000:]
    assert "holds another run's checkpoints" not in proc.stdout
    assert sorted(step_lines(proc.stdout)) == [9, 10]
    assert checkpoint.resumed_from(checkpoint.step_path(copy, 10)) == "run-b"
