"""A checkpoint resumes under the other save format: single/dp save ``state.pt`` with
torch.save, ddp/fsdp save with torch.distributed.checkpoint, and either family resumes the
other's (it used to fail with FileNotFoundError on every rank).

The fast tests run the trainer as one plain process (a world of one, where single, dp, ddp and
fsdp all follow the same loss curve); the slow one resumes a single-process checkpoint on 2
gloo ranks, sharded, and that run's checkpoint in one process again.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pardash.trainer import checkpoint
from helpers import trainer_forks
from test_checkpoint import SMALL, TOLERANCE, launch, losses

STEP_LINE = re.compile(r"^step\s+(\d+)/\d+ .*$", re.M)


def train(
    ckpt: Path, strategy: str, *args: str, run_id: str = "", check: bool = True, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``python -m pardash.trainer.train`` as one process without a hub, every step printed
    (``run_id``: the job id its checkpoints are saved under, as ``pardash launch`` gives;
    ``check``: it must succeed). A fork of a process that has imported the trainer already."""
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env_extra or {}))
    env.pop("PARDASH_ENDPOINT", None)
    env.pop("PARDASH_RUN_ID", None)
    if run_id:
        env["PARDASH_RUN_ID"] = run_id
    proc = trainer_forks.run(
        ["--strategy", strategy, "--steps", "6",
         "--checkpoint-dir", str(ckpt), *SMALL, "--log-every", "1", *args],
        env=env, timeout=240,
    )  # fmt: skip
    if check:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr
    return proc


def step_lines(stdout: str) -> dict[int, str]:
    """{step: its printed line, less the timing}: loss and learning rate to 4 digits."""
    return {int(m.group(1)): re.sub(r"\|\s+[0-9.]+ ms ", "", m.group(0))
            for m in STEP_LINE.finditer(stdout)}


# The tests of a saved checkpoint share one worker (pytest-xdist makes a module's fixture once
# per worker that runs one of its tests).
SAVED_GROUP = pytest.mark.xdist_group("formats_saved")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """``saved("single")``: (a 6-step run's checkpoint folder holding steps 2 and 4, its
    printed steps), made once per saving strategy."""
    made: dict[str, tuple[Path, dict[int, str]]] = {}

    def get(strategy: str) -> tuple[Path, dict[int, str]]:
        if strategy not in made:
            ckpt = tmp_path_factory.mktemp(f"saved-{strategy}") / "ckpt"
            proc = train(ckpt, strategy, "--checkpoint-every", "2")
            shutil.rmtree(checkpoint.step_path(ckpt, 6))  # as if it died after step 4
            made[strategy] = ckpt, step_lines(proc.stdout)
        return made[strategy]

    return get


@pytest.mark.slow
@pytest.mark.parametrize(
    ("saved_by", "resumed_by"),
    # ddp's own load (the wrapper's "module." names) is in the slow test, on 2 ranks.
    [("single", "fsdp"), ("fsdp", "dp")],
)
@SAVED_GROUP
def test_a_checkpoint_resumes_under_the_other_format_on_the_same_curve(
    tmp_path, saved, saved_by, resumed_by
):
    original, reference = saved(saved_by)
    saved_file = checkpoint.DCP_METADATA if saved_by in ("ddp", "fsdp") else checkpoint.PLAIN_FILE
    assert (checkpoint.step_path(original, 4) / saved_file).is_file()
    ckpt = tmp_path / "ckpt"
    shutil.copytree(original, ckpt)
    proc = train(ckpt, resumed_by, "--resume")
    assert f"resume: step 4 restored from {checkpoint.step_path(ckpt, 4)}" in proc.stdout
    assert step_lines(proc.stdout) == {s: reference[s] for s in (5, 6)}
    # Its own save of step 6 is in its own format.
    own_file = checkpoint.DCP_METADATA if resumed_by in ("ddp", "fsdp") else checkpoint.PLAIN_FILE
    assert sorted(p.name for p in checkpoint.step_path(ckpt, 6).iterdir()
                  if not p.name.endswith(".distcp")) == sorted([own_file, checkpoint.ORDER_FILE])


def test_a_step_saved_again_in_the_other_format_holds_one_checkpoint(tmp_path):
    # A single run resumed from an earlier step saves a step a ddp run had saved before: the
    # ddp save's marker goes, so the folder is not read as the old DCP checkpoint.
    import torch

    from pardash.trainer.strategies import Wrapped

    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    progress = checkpoint.Progress(step=6, epoch=0, steps_into_epoch=6, total_steps=6, lr=1e-3,
                                   seed=1, world_size=1)
    step6 = checkpoint.step_path(tmp_path, 6)
    step6.mkdir()
    (step6 / checkpoint.DCP_METADATA).write_bytes(b"a ddp save of step 6")
    checkpoint.save(tmp_path, progress, w=Wrapped(model=model, inner=model, strategy="single"),
                    optimizer=optimizer, rank=0, device=torch.device("cpu"))
    assert sorted(p.name for p in step6.iterdir()) == sorted([checkpoint.PLAIN_FILE, checkpoint.ORDER_FILE])
    assert checkpoint.saved_with_dcp(step6, "ddp") is False


def test_a_folder_holding_both_formats_is_read_as_the_strategy_saves(tmp_path):
    (tmp_path / checkpoint.DCP_METADATA).write_bytes(b"")
    (tmp_path / checkpoint.PLAIN_FILE).write_bytes(b"")
    assert [checkpoint.saved_with_dcp(tmp_path, s) for s in ("single", "dp", "ddp", "fsdp")] == [
        False, False, True, True
    ]


@pytest.mark.slow
@SAVED_GROUP
def test_a_single_process_checkpoint_resumes_sharded_on_two_ranks_and_back(tmp_path, saved):
    original, _ = saved("single")
    curves = {}
    for strategy in ("fsdp", "ddp"):
        ckpt = tmp_path / strategy
        shutil.copytree(original, ckpt)
        proc, msgs = launch(tmp_path, strategy, "--strategy", strategy, "--nproc", "2",
                            "--steps", "6", "--resume", "--checkpoint-dir", str(ckpt))
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr
        curves[strategy] = losses(msgs)
        assert sorted((r, s) for r, s, _ in curves[strategy]) == [(r, s) for r in (0, 1)
                                                                  for s in (5, 6)]
    # FSDP took its shards of the full state the single process saved: the same model as DDP.
    reference = {(r, s): loss for r, s, loss in curves["ddp"]}
    for rank, step, loss in curves["fsdp"]:
        assert loss == pytest.approx(reference[rank, step], **TOLERANCE), (rank, step)

    # And their step 6, saved in 2 DCP shards each, resumes in one process: the same model.
    after = {s: step_lines(train(tmp_path / s, "single", "--steps", "8", "--resume").stdout)
             for s in ("fsdp", "ddp")}
    assert after["fsdp"] == after["ddp"] and sorted(after["fsdp"]) == [7, 8]


@pytest.mark.slow
@SAVED_GROUP
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(tmp_path, saved):
    # A shard cut short after its save completed (.metadata is there, so it looks complete):
    # the resume says so and goes on from the checkpoint before, on the same curve.
    original, reference = saved("fsdp")
    ckpt = tmp_path / "ckpt"
    shutil.copytree(original, ckpt)

    def damage(step: int) -> None:
        shards = sorted(checkpoint.step_path(ckpt, step).glob("*.distcp"))
        assert shards
        for shard in shards:
            shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])

    damage(4)
    proc = train(ckpt, "fsdp", "--resume")
    assert f"resume: step 2 restored from {checkpoint.step_path(ckpt, 2)}" in proc.stdout
    assert f"resume: {checkpoint.step_path(ckpt, 4)} could not be read (" in proc.stderr
    assert f"trying {checkpoint.step_path(ckpt, 2)}" in proc.stderr
    assert step_lines(proc.stdout) == {s: reference[s] for s in (3, 4, 5, 6)}

    # A run that resumed another and saved once (step 6, of its own id): its newest damaged,
    # --resume goes back to the other run's step 4, the one it started from ("no older
    # checkpoint" before: only the newest run's own were tried). An unrelated run's only when
    # nothing of that line can be read.
    def cut(folder: Path, step: int) -> None:
        for shard in sorted(checkpoint.step_path(folder, step).glob("*.distcp")):
            shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])

    chain = tmp_path / "chain"
    train(chain, "fsdp", "--steps", "4", "--checkpoint-every", "2", run_id="run-a")
    resumed = train(chain, "fsdp", "--resume", "--steps", "6", "--checkpoint-every", "2", run_id="run-b")
    six, four = checkpoint.step_path(chain, 6), checkpoint.step_path(chain, 4)
    assert (checkpoint.saved_by(six), checkpoint.resumed_from(six), checkpoint.saved_by(four)) == ("run-b", "run-a", "run-a")
    unrelated = tmp_path / "unrelated"
    shutil.copytree(chain, unrelated)
    cut(chain, 6)
    again = train(chain, "fsdp", "--resume", "--steps", "8", run_id="run-c")
    assert f"resume: {six} could not be read (" in again.stderr
    assert f"trying {four} (saved by run run-a, which this one went on from)" in again.stderr
    assert f"resume: step 4 restored from {four}" in again.stdout
    assert sorted(step_lines(again.stdout)) == [5, 6, 7, 8]
    loss = re.compile(r"loss \S+")  # step 5 again from step 4: the same loss (the lr schedule is 8 steps long now)
    assert loss.findall(step_lines(resumed.stdout)[5]) == loss.findall(step_lines(again.stdout)[5])
    # A run that started afresh in the same folder (no --resume) and saved step 6: its damaged
    # step 6 sends --resume to run-a's step 4, said to be another run's (it said "no older
    # checkpoint" and "no checkpoint in ... can be read", run-a's 4 readable beside it).
    shutil.rmtree(checkpoint.step_path(unrelated, 6))
    train(unrelated, "fsdp", "--steps", "6", "--checkpoint-every", "6", run_id="run-d")
    assert checkpoint.resumed_from(checkpoint.step_path(unrelated, 6)) == ""
    cut(unrelated, 6)
    other = train(unrelated, "fsdp", "--steps", "8", "--resume", run_id="run-e")
    four_there = checkpoint.step_path(unrelated, 4)
    assert f"trying {four_there} (saved by run run-a, another run's)" in other.stderr, other.stderr[-2000:]
    assert f"resume: step 4 restored from {four_there} (saved by run run-a)" in other.stdout

    # With none readable the resume fails rather than quietly starting afresh.
    shutil.rmtree(checkpoint.step_path(ckpt, 6))
    shutil.rmtree(checkpoint.step_path(ckpt, 4))
    damage(2)
    error_file = tmp_path / "error.json"  # torchrun's: the trainer's handler of errors writes it
    failed = train(ckpt, "fsdp", "--resume", check=False, env_extra={"TORCHELASTIC_ERROR_FILE": str(error_file)})
    assert failed.returncode == 1, failed.stderr[-2000:]
    assert "could not be read" in failed.stderr and "no older checkpoint" in failed.stderr
    assert not STEP_LINE.search(failed.stdout)
    # One line that says so and what to do, no traceback.
    assert "Traceback" not in failed.stderr, failed.stderr[-3000:]
    (error,) = [line for line in failed.stderr.splitlines() if "error:" in line]
    assert error.startswith(f"pardash-train: error: resume: no checkpoint in {ckpt} can be read on every rank; the newest: rank 0: ")
    assert error.endswith("; run without --resume to start at step 1")
    # A failure of the run as any other (DCP's own error would pass `except Exception` by, and
    # the rank would report a clean exit): it names the folder and the newest's error.
    assert f"ResumeError: resume: no checkpoint in {ckpt} can be read on every rank; the newest: rank 0: " in (
        error_file.read_text())


@pytest.mark.slow
def test_a_damaged_job_file_resumes_from_the_newest_checkpoint_that_can_be_read(tmp_path):
    # A job file overwritten with other bytes made the run's newest checkpoint a run of its own:
    # with its shards damaged too, --resume said "no older checkpoint" beside the run's own
    # step 4 and died in a traceback.
    saved = tmp_path / "saved"
    train(saved, "fsdp", "--checkpoint-every", "2", run_id="run-a")
    (checkpoint.step_path(saved, 6) / checkpoint.JOB_FILE).write_bytes(b"x9#garbage")

    # Its data intact, it is still the newest that can be read: go on from it.
    ckpt = tmp_path / "named"
    shutil.copytree(saved, ckpt)
    proc = train(ckpt, "fsdp", "--resume", "--steps", "8", run_id="run-b")
    six_here = checkpoint.step_path(ckpt, 6)
    assert f"resume: step 6 restored from {six_here} (saved by run run-a, its job file damaged)" in proc.stdout
    assert sorted(step_lines(proc.stdout)) == [7, 8]
    assert checkpoint.resumed_from(checkpoint.step_path(ckpt, 8)) == "run-a"

    # Its shards damaged too: one line says so, and the run's step 4 takes over.
    ckpt = tmp_path / "cut"
    shutil.copytree(saved, ckpt)
    for shard in checkpoint.step_path(ckpt, 6).glob("*.distcp"):
        shard.write_bytes(shard.read_bytes()[:100])
    proc = train(ckpt, "fsdp", "--resume", "--steps", "8", run_id="run-b")
    said = [line for line in proc.stderr.splitlines() if line.startswith("resume: ")]
    assert said == [f"resume: {checkpoint.step_path(ckpt, 6)} could not be read (rank 0: EOFError); "
                    f"trying {checkpoint.step_path(ckpt, 4)}"], proc.stderr[-2000:]
    assert f"resume: step 4 restored from {checkpoint.step_path(ckpt, 4)}" in proc.stdout
    assert sorted(step_lines(proc.stdout)) == [5, 6, 7, 8]

    # Nothing of the run readable (its newest's job file and every shard damaged): the one-line
    # error, not a fresh start nor a traceback.
    ckpt = tmp_path / "none"
    shutil.copytree(saved, ckpt)
    for step in (2, 4, 6):
        for shard in checkpoint.step_path(ckpt, step).glob("*.distcp"):
            shard.write_bytes(shard.read_bytes()[:100])
    failed = train(ckpt, "fsdp", "--resume", "--steps", "8", run_id="run-b", check=False)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr[-3000:]
    (error,) = [line for line in failed.stderr.splitlines() if "error:" in line]
    assert error.startswith(f"pardash-train: error: resume: no checkpoint in {ckpt} can be read on every rank; the newest: rank 0: ")
    assert not STEP_LINE.search(failed.stdout)
