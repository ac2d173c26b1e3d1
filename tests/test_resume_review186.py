"""Resumes of the bundled trainer in a folder other runs saved into, and how they fail (review
186): another run's checkpoints past the resumed step are said before this run's saves replace
them; a resume that fails in one line ends in that line, not in torchrun's failure summary;
a rank gone during a save is said to have gone at the step it was saving."""

from __future__ import annotations

from pathlib import Path

import pytest

from pardash.trainer import checkpoint
from test_checkpoint import events, launch, trained


def test_a_resumed_run_says_whose_checkpoints_past_its_step_it_replaces(tmp_path):
    # Run a saved 2, 4, 6; run b, fresh, replaced its 2 (and said so); run c resumed from b's 2
    # (saved last) and replaced a's 4 without a word, a's 6 left beside it.
    ckpt = tmp_path / "ckpt"
    common = ["--strategy", "ddp", "--checkpoint-dir", str(ckpt)]
    for name, args in (("a", ["--steps", "6", "--checkpoint-every", "2"]), ("b", ["--steps", "2"])):
        proc, _ = trained(tmp_path, name, *common, *args)
        assert proc.returncode == 0, proc.stderr[-2000:]
    proc, msgs = trained(tmp_path, "c", *common, "--steps", "4", "--checkpoint-every", "1", "--checkpoint-keep", "2",
                         "--resume")
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = (f"checkpoint: {ckpt} holds another run's checkpoints past step 2 (step(s) 4, 6, saved by run a); this "
            "run resumes at step 2, and its saves replace those of step(s) 4")
    assert [line for line in proc.stdout.splitlines() if "another run's" in line] == [said], proc.stdout
    assert [e.message for e in events(msgs, "warning") if "another run's" in e.message] == [said]
    # What it said is what it did: a's 4 is c's now, a's 6 is a's still (never pruned).
    assert checkpoint.saved_by(checkpoint.step_path(ckpt, 4)) == "c"
    assert checkpoint.saved_by(checkpoint.step_path(ckpt, 6)) == "a"
    assert Path(checkpoint.step_path(ckpt, 6)).is_dir()


@pytest.mark.parametrize("why", ["damaged", "other-model"])
def test_a_resume_that_fails_in_one_line_ends_in_it_without_torchruns_summary(tmp_path, why):
    # "none readable: one line, exit 1" was that line, then some 30 of torchrun's: its
    # "failed (exitcode: 1)", "ChildFailedError:", "Failures:", "Root Cause" and error files.
    ckpt = tmp_path / "ckpt"
    proc, _ = trained(tmp_path, "a", "--strategy", "ddp", "--steps", "2", "--checkpoint-dir", str(ckpt))
    assert proc.returncode == 0, proc.stderr[-2000:]
    if why == "damaged":
        for shard in checkpoint.step_path(ckpt, 2).glob("*.distcp"):
            shard.write_bytes(shard.read_bytes()[:100])
    flags = ["--n-embd", "64"] if why == "other-model" else []
    proc, msgs = launch(tmp_path, "b", "--strategy", "ddp", "--nproc", "2", "--steps", "4", "--checkpoint-dir",
                        str(ckpt), "--resume", *flags)
    assert proc.returncode == 1
    said = "can be read on every rank" if why == "damaged" else "holds another model than this run's flags make"
    assert said in events(msgs, "error")[0].message
    out = proc.stdout + proc.stderr
    for torchruns in ("failed (exitcode", "ChildFailedError", "Root Cause", "error_file", "also failed"):
        assert torchruns not in out, out[-3000:]
    # (every rank failed of the same error: named together, not the one whose exit came first)
    assert proc.stderr.splitlines()[-1].startswith("pardash: ranks 0-1 exited with code 1: "), proc.stderr[-2000:]
    assert said in proc.stderr.splitlines()[-1]
    # Kept in the run's folder, for whoever wants torchrun's word.
    (kept,) = (tmp_path / "runs").glob("*/torchrun/failures.log")
    assert "Root Cause" in kept.read_text() and "failed (exitcode: 1)" in kept.read_text()
