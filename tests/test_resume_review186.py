"""Resumes of the bundled trainer in a folder other runs saved into, and how they fail (review
186): another run's checkpoints past the resumed step are said before this run's saves replace
them; a resume that fails in one line ends in that line, not in torchrun's failure summary;
a rank gone during a save is said to have gone at the step it was saving."""

from __future__ import annotations

from pathlib import Path

from pardash.trainer import checkpoint
from test_checkpoint import events, trained


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
