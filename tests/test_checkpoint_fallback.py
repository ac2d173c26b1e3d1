"""Where --resume goes when the checkpoint it chose cannot be read: back along that run's line,
then to the folder's other checkpoints (never for a torchrun restart: only its own job's)."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest
import torch

from pardash.trainer import checkpoint, resume
from pardash.trainer.strategies import Wrapped

CPU = torch.device("cpu")


def _save(root: Path, step: int, job: str, at: float) -> Path:
    """A plain checkpoint of a Linear(3, 2) whose weight is all ``step``, saved by ``job``,
    completed at ``at`` (its marker's time)."""
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.fill_(step)
    w = Wrapped(model=model, inner=model, strategy="single")
    progress = checkpoint.Progress(step=step, epoch=0, steps_into_epoch=step, total_steps=40, lr=1e-3, seed=0,
                                   world_size=1)
    path, _ = checkpoint.save(root, progress, w=w, optimizer=torch.optim.AdamW(model.parameters()), rank=0,
                              device=CPU, job=job)
    os.utime(path / checkpoint.PLAIN_FILE, (at, at))
    return path


def _resume(root: Path, found: checkpoint.Found, *, asked: bool, job: str | None):
    model = torch.nn.Linear(3, 2)
    w = Wrapped(model=model, inner=model, strategy="single")
    said: list[str] = []
    reporter = types.SimpleNamespace(event=lambda name, **kw: said.append(kw.get("message", "")))
    cfg = types.SimpleNamespace(checkpoint_dir=str(root), resume=True if asked else None)
    progress, _, _, loaded = resume.load_newest_readable(
        found, cfg, w, torch.optim.AdamW(model.parameters()), types.SimpleNamespace(rank=0, device=CPU), reporter,
        job=job)
    assert torch.all(model.weight == progress.step)  # the weights of the step it says
    return loaded, said


def test_resume_goes_on_to_another_runs_checkpoint_when_none_of_the_newest_runs_can_be_read(tmp_path, capsys):
    # Run A saved 10, 20, 30; run B (no --resume) saved 5 in the same folder, then its file was
    # cut short: --resume said "no older checkpoint" and "no checkpoint in ... can be read on
    # every rank; run without --resume", though A's 30 could be.
    for k, step in enumerate((10, 20, 30)):
        _save(tmp_path, step, "run-a", 1000.0 + k)
    five = _save(tmp_path, 5, "run-b", 2000.0)
    (five / checkpoint.PLAIN_FILE).write_bytes((five / checkpoint.PLAIN_FILE).read_bytes()[:100])
    assert checkpoint.newest_job(tmp_path) == "run-b"  # the choice: the run that saved last
    assert checkpoint.next_to_try(tmp_path, []) == checkpoint.Found(5, five)
    thirty = checkpoint.step_path(tmp_path, 30)
    assert checkpoint.next_to_try(tmp_path, [five]) == checkpoint.Found(30, thirty)

    loaded, said = _resume(tmp_path, checkpoint.Found(5, five), asked=True, job="run-b")
    assert loaded == checkpoint.Found(30, thirty)
    assert len(said) == 1 and said[0].startswith(f"resume: {five} could not be read (")
    assert said[0].endswith(f"; trying {thirty} (saved by run run-a, another run's)")
    assert capsys.readouterr().err.splitlines() == said

    # A's 30 cut short too: back along A's line, to its 20.
    (thirty / checkpoint.PLAIN_FILE).write_bytes(b"")
    loaded, said = _resume(tmp_path, checkpoint.Found(5, five), asked=True, job="run-b")
    assert loaded.step == 20 and said[-1].endswith(f"; trying {checkpoint.step_path(tmp_path, 20)}")

    # A torchrun restart of run B takes only its own: nothing, and the one-line error.
    with pytest.raises(resume.ResumeError, match="no checkpoint in .* can be read on every rank; the newest: "):
        _resume(tmp_path, checkpoint.Found(5, five), asked=False, job="run-b")


def test_resume_fails_only_when_no_checkpoint_in_the_folder_can_be_read(tmp_path):
    for k, (step, job) in enumerate(((10, "run-a"), (20, "run-a"), (5, "run-b"))):
        path = _save(tmp_path, step, job, 1000.0 + k)
        (path / checkpoint.PLAIN_FILE).write_bytes(b"cut")
    five = checkpoint.step_path(tmp_path, 5)
    with pytest.raises(resume.ResumeError) as err:
        _resume(tmp_path, checkpoint.Found(5, five), asked=True, job="run-b")
    assert str(err.value).startswith(f"resume: no checkpoint in {tmp_path} can be read on every rank; the newest: ")
    assert str(err.value).endswith("; run without --resume to start at step 1")
