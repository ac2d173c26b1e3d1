"""Checkpoints of the bundled trainer (issue 7) on real runs: `pardash launch` with 2 gloo ranks.

A run killed at step 25 and resumed from its step-20 checkpoint must report, step for step and
rank for rank, the losses of the same run left alone: model, optimizer, step, learning rate
schedule, data order and RNG state all come back. Once through torchrun's elastic restart
(--max-restarts 1 --resume), once by hand (a second launch with --resume).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import pardash_env, serving, trainer_forks, wait_for
from pardash.telemetry import schema
from pardash.telemetry.logreader import load_log
from pardash.trainer import checkpoint



# 256 samples / (8 per batch x 2 ranks) = 16 steps an epoch: the step-20 checkpoint lies 4
# steps into epoch 1, so resuming must restore the epoch and skip within it.
SMALL = ["--dataset-size", "256", "--batch-size", "8", "--n-embd", "32", "--seq-len", "16",
         "--warmup-steps", "5", "--log-every", "0"]  # fmt: skip
TOLERANCE = dict(rel=1e-6, abs=1e-7)


def launch(tmp_path: Path, name: str, *args: str, sized: list[str] = SMALL) -> tuple[subprocess.CompletedProcess, list]:
    """``pardash launch --headless`` with ``sized`` then ``args``; (process, messages of its log)."""
    log = tmp_path / f"{name}.jsonl"
    cmd = [sys.executable, "-m", "pardash", "launch", "--headless", "--log", str(log),
           "--runs-dir", str(tmp_path / "runs"), "--every", "5", *sized, *args]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600,
                          env=pardash_env(OMP_NUM_THREADS="1"))
    return proc, load_log(log)[0] if log.exists() else []


def trained(tmp_path: Path, name: str, *args: str) -> tuple[subprocess.CompletedProcess, list]:
    """The bundled trainer as one plain process (a fork of one that has imported it:
    helpers.trainer_forks) publishing to a hub of its own, job id ``name``; (process, messages
    of the hub's log once the trainer's exit is in it)."""
    from pardash.telemetry.hub import Hub

    log = tmp_path / f"{name}.jsonl"
    with serving(Hub(run_id=name, log_path=str(log))) as hub:
        env = pardash_env(OMP_NUM_THREADS="1", PARDASH_ENDPOINT=hub.ingest_endpoint, PARDASH_RUN_ID=name)
        proc = trainer_forks.run([*SMALL, *args], env=env, timeout=240, cwd=str(tmp_path))
        wait_for(lambda: log.exists() and events(load_log(log)[0], "exit"), timeout_s=60)
    return proc, load_log(log)[0]


def losses(msgs: list) -> list[tuple[int, int, float]]:
    """(rank, step, loss) of every step message, in log order (a step run twice shows twice)."""
    return [(m.rank, m.step, m.loss) for m in msgs if isinstance(m, schema.Step)]


def events(msgs: list, name: str) -> list[schema.Event]:
    return [m for m in msgs if isinstance(m, schema.Event) and m.name == name and m.seq >= 0]


def assert_same_curve(run: list[tuple[int, int, float]], reference: dict[tuple[int, int], float]):
    for rank, step, loss in run:
        assert loss == pytest.approx(reference[rank, step], **TOLERANCE), (rank, step)


# The tests compared with it run where the session's shared launches are made (conftest's
# shared_run; pytest-xdist makes a session fixture once per worker that uses it).
REFERENCE_GROUP = pytest.mark.xdist_group("shared_run")


@pytest.fixture
def uninterrupted(shared_run):
    """The session's shared 2-rank DDP launch, left alone (conftest.SHARED_RUNS), and its
    losses {(rank, step): loss}: a run given its ``train_args`` (and 2 ranks) must follow them."""
    run = shared_run("ddp")
    curve = {(r, s): loss for r, s, loss in losses(run.messages)}
    assert sorted(curve) == [(r, s) for r in (0, 1) for s in range(1, run.steps + 1)]
    return run, curve


@pytest.mark.slow
@REFERENCE_GROUP
def test_a_crashed_fsdp_rank_restarts_from_the_checkpoint_on_the_same_curve(tmp_path, uninterrupted):
    # FSDP2 here, DDP in the resume by hand below: both through torch.distributed.checkpoint.
    # The reference is DDP's uninterrupted run: on these 2 gloo ranks FSDP2 follows DDP's loss
    # curve to the last bit (as the format tests' resume from one into the other shows).
    # Its 256 samples / (16 a batch x 2 ranks) = 8 steps an epoch: the step-20 checkpoint lies
    # 4 steps into epoch 2.
    strategy = "fsdp"
    shared, reference = uninterrupted
    assert shared.steps == 40
    ckpt = tmp_path / "ckpt"
    # An older run's checkpoint, further on than this job will be when it crashes: the
    # restart must not take it (this job never said --resume).
    older = checkpoint.step_path(ckpt, 30)
    older.mkdir(parents=True)
    (older / checkpoint.DCP_METADATA).write_bytes(b"not this job's")
    # The shared run's flags, its strategy overridden (the last of a flag given twice wins).
    proc, msgs = launch(
        tmp_path, "b", "--strategy", strategy, "--nproc", "2", "--inject-crash", "1@25", "--max-restarts", "1",
        "--checkpoint-every", "10", "--checkpoint-dir", str(ckpt), "--checkpoint-keep", "2",
        sized=shared.train_args,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]

    # Every rank saved at 10 and 20, crashed at 25, came back at 20 on its own, saved at 30
    # and 40.
    saves = events(msgs, "checkpoint")
    assert sorted((e.rank, e.step) for e in saves) == [
        (r, s) for r in (0, 1) for s in (10, 20, 30, 40)
    ]
    assert all(e.duration_s is not None and e.duration_s > 0 for e in saves)
    assert all(e.message == str(checkpoint.step_path(ckpt, e.step)) for e in saves)
    resumes = events(msgs, "resume")
    assert sorted((e.rank, e.step) for e in resumes) == [(0, 20), (1, 20)]
    assert all(e.duration_s is not None and e.duration_s > 0 for e in resumes)
    assert "resume: torchrun restart 1: from this job's newest checkpoint" in proc.stdout
    assert "resume: step 20 restored from" in proc.stdout
    assert checkpoint.saved_by(checkpoint.step_path(ckpt, 40)) == checkpoint.saved_by(older) != ""
    assert "checkpoint: step 40 saved to" in proc.stdout
    assert checkpoint.find_latest(ckpt) == checkpoint.Found(40, checkpoint.step_path(ckpt, 40))
    # --checkpoint-keep 2: the resume found step 20 (10 and 20 were kept), the end keeps 30, 40.
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-00000030", "step-00000040"]
    assert f"checkpoint: removed {checkpoint.step_path(ckpt, 20)} (--checkpoint-keep 2)" in proc.stdout

    # The restarted attempt ran steps 21..40; every loss either attempt reported is the
    # uninterrupted run's for that rank and step.
    run = losses(msgs)
    after_resume = [(r, s) for r, s, _ in run[-40:]]
    assert sorted(after_resume) == [(r, s) for r in (0, 1) for s in range(21, 41)]
    assert {(r, s) for r, s, _ in run} == set(reference)
    assert_same_curve(run, reference)

    # The report tells the same story: four saves, and the resume after torchrun's restart.
    from pardash.telemetry.report import build_report

    ck = build_report(str(tmp_path / "b.jsonl"))["checkpoints"]
    assert [(c["step"], c["ranks"]) for c in ck["saved"]] == [(s, 2) for s in (10, 20, 30, 40)]
    assert [(r["step"], r["restart"], r["ranks"]) for r in ck["resumed"]] == [(20, 1, 2)]
    assert ck["resumed"][0]["message"] == f"step 20 from {checkpoint.step_path(ckpt, 20)}"


@pytest.mark.slow
def test_a_killed_ddp_run_resumed_by_hand_continues_from_its_checkpoint(tmp_path):
    # --checkpoint-keep 1 bounds the folder across the resumed runs too: each launch is a job of
    # its own, and pruning only a job's own checkpoints let a run resumed again and again (a
    # requeued job) keep K a launch. The job it resumed from counts as its own.
    ckpt = tmp_path / "ckpt"
    common = ["--strategy", "ddp", "--nproc", "2", "--steps", "30", "--checkpoint-every", "10",
              "--checkpoint-dir", str(ckpt), "--checkpoint-keep", "1"]  # fmt: skip
    first, first_msgs = launch(tmp_path, "first", *common, "--inject-crash", "0@25")
    assert first.returncode != 0
    assert sorted((e.rank, e.step) for e in events(first_msgs, "checkpoint")) == [
        (0, 10), (0, 20), (1, 10), (1, 20)
    ]
    assert checkpoint.find_latest(ckpt).step == 20
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-00000020"]

    second, msgs = launch(tmp_path, "second", *common, "--resume")
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    assert sorted((e.rank, e.step) for e in events(msgs, "resume")) == [(0, 20), (1, 20)]
    run = losses(msgs)
    assert sorted((r, s) for r, s, _ in run) == [(r, s) for r in (0, 1) for s in range(21, 31)]
    # Steps 21..24 ran in both launches: the same losses.
    before = {(r, s): loss for r, s, loss in losses(first_msgs) if s > 20}
    # (Rank 0 raised and flushed its telemetry; rank 1, stopped by torchrun, may have lost the
    # steps its reporter still held, at most 50 ms of them: the curves compare where both are.)
    assert {(0, s) for s in range(21, 25)} <= set(before)
    assert_same_curve([(r, s, loss) for r, s, loss in run if (r, s) in before], before)
    assert sorted((e.rank, e.step) for e in events(msgs, "checkpoint")) == [(0, 30), (1, 30)]
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-00000030"]


def test_a_resume_from_a_folder_whose_only_save_never_completed_says_so(tmp_path):
    # It said "no checkpoint in ckpt yet; starting at step 1" of a folder holding a save killed
    # as it was written, as if nothing had ever been saved there.
    ckpt = tmp_path / "ckpt"
    checkpoint.step_path(ckpt, 20).mkdir(parents=True)
    run, _ = trained(tmp_path, "only-unfinished", "--strategy", "single", "--steps", "2", "--checkpoint-dir", str(ckpt), "--resume")
    assert run.returncode == 0, run.stderr[-3000:]
    said = [line for line in run.stdout.splitlines() if line.startswith("resume:")]
    assert said == [f"resume: {checkpoint.step_path(ckpt, 20)} is a save that never completed (stopped as it was written): not used",
                    f"resume: no checkpoint in {ckpt} yet; starting at step 1"], run.stdout  # fmt: skip


@pytest.mark.slow
def test_single_process_saves_plainly_and_resumes_on_the_same_curve(tmp_path):
    # One process, as a single run is (its launch's torchrun and hub aside: the tests above).
    ckpt = tmp_path / "ckpt"
    common = ["--strategy", "single", "--steps", "30", "--checkpoint-every", "10",
              "--checkpoint-dir", str(ckpt)]  # fmt: skip
    first, first_msgs = trained(tmp_path, "first", *common, "--inject-crash", "0@25")
    assert first.returncode != 0
    assert (checkpoint.step_path(ckpt, 20) / checkpoint.PLAIN_FILE).is_file()

    second, msgs = trained(tmp_path, "second", *common, "--resume")
    assert second.returncode == 0, second.stderr[-3000:]
    assert [e.step for e in events(msgs, "resume")] == [20]
    run = losses(msgs)
    # (each step once; in the log, the hub's order: steps the heartbeat thread sent for the
    # loop, on a socket of their own, can be taken after the loop's next ones)
    assert sorted(s for _, s, _ in run) == list(range(21, 31))
    # Steps 21..24 ran in both launches: the same losses, and the loss goes on falling after.
    before = {(r, s): loss for r, s, loss in losses(first_msgs) if s > 20}
    assert sorted(before) == [(0, s) for s in range(21, 25)]
    assert_same_curve([x for x in run if (x[0], x[1]) in before], before)
    assert run[-1][2] < losses(first_msgs)[0][2]
    assert [e.step for e in events(first_msgs, "exit")] == [25]  # the step it failed in
    # Resumed at 30, failing in its first step, before it published any: the exit still names
    # the step (the reporter's own count starts again at 0). A newer save that never completed
    # (its writer killed as it wrote) is said to be passed over, not skipped without a word.
    (checkpoint.step_path(ckpt, 35)).mkdir()
    third, third_msgs = trained(tmp_path, "third", "--strategy", "single", "--steps", "40", "--checkpoint-every", "10",
                               "--checkpoint-dir", str(ckpt), "--resume", "--inject-crash", "0@31")  # fmt: skip
    assert third.returncode != 0
    assert f"resume: {checkpoint.step_path(ckpt, 35)} is a save that never completed (stopped as it was written): not used" in third.stdout
    assert [e.step for e in events(third_msgs, "exit")] == [31]
    assert [e.step for e in events(third_msgs, "error")] == [30]
    # Resumed past its --steps: nothing to train, said so (it printed "done: 25 steps in 0.00 s").
    fourth, fourth_msgs = trained(tmp_path, "fourth", *common[:2], "--steps", "25", "--checkpoint-dir", str(ckpt), "--resume")
    assert fourth.returncode == 0, fourth.stderr[-3000:]
    assert losses(fourth_msgs) == []
    [warning] = [e.message for e in events(fourth_msgs, "warning")]
    assert "at step 30, at or past --steps 25: nothing to train" in warning
    assert "nothing to train" in fourth.stdout and "done: no step taken (resumed at step 30, --steps 25)" in fourth.stdout
    assert "ms/step" not in fourth.stdout
    # A fault at a step before the one resumed from never fires: said (it ended "done", no
    # crash and no word, where the flag is there to watch one).
    sixth, sixth_msgs = trained(tmp_path, "sixth", *common[:2], "--steps", "32", "--checkpoint-dir", str(ckpt), "--resume",
                                "--inject-crash", "0@20")  # fmt: skip
    assert sixth.returncode == 0, sixth.stderr[-3000:]
    said = "--inject-crash 0@20 will not fire: this run resumed at step 30, past its step (give a step above 30)"
    assert f"note: {said}" in sixth.stdout and said in [e.message for e in events(sixth_msgs, "warning")]
    # Without --resume in a folder of checkpoints: it starts over, and says its saves replace
    # those of the same steps (torch's UserWarning on overwriting was the only sign).
    fifth, fifth_msgs = trained(tmp_path, "fifth", *common[:2], "--steps", "3", "--checkpoint-dir", str(ckpt))
    assert fifth.returncode == 0, fifth.stderr[-3000:]
    # (its --steps 3 under SMALL's --warmup-steps 5 is warned of too)
    [warning] = [e.message for e in events(fifth_msgs, "warning") if not e.message.startswith("--warmup-steps")]
    assert warning.startswith(f"checkpoint: {ckpt} already holds checkpoints (the newest at step 32, saved by run sixth)")
    assert [s for _, s, _ in losses(fifth_msgs)] == [1, 2, 3]


def test_prune_keeps_the_newest_complete_checkpoints(tmp_path):
    def make(step, complete=True):
        p = checkpoint.step_path(tmp_path, step)
        p.mkdir()
        if complete:
            (p / checkpoint.DCP_METADATA).write_bytes(b"m")
        return p

    for step in (10, 20, 30):
        make(step)
    make(15, complete=False)  # a save that died: older than what is kept, so it goes too
    make(40, complete=False)  # a save under way (or dead) newer than the last complete one: kept
    (tmp_path / "notes").mkdir()  # not a checkpoint: never touched
    gone = checkpoint.prune(tmp_path, 2)
    assert sorted(p.name for p in gone) == ["step-00000010", "step-00000015"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes", "step-00000020", "step-00000030", "step-00000040"]
    assert checkpoint.prune(tmp_path, 2) == [] and checkpoint.prune(tmp_path, 0) == []
    assert checkpoint.prune(tmp_path / "missing", 1) == []

    # An older run's checkpoints further on (500, 400) never push this run's newest out: a new
    # run saving step 5 with --checkpoint-keep 2 used to delete its own step 5 at once.
    for step in (400, 500):
        make(step)
    make(5)
    assert checkpoint.prune(tmp_path, 2, upto=5) == []
    gone = checkpoint.prune(tmp_path, 2, upto=30)
    assert [p.name for p in gone] == ["step-00000005"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "notes", "step-00000020", "step-00000030", "step-00000040", "step-00000400", "step-00000500"]


def test_only_complete_checkpoints_count(tmp_path):
    # A save that died before DCP wrote its metadata is not a checkpoint.
    (checkpoint.step_path(tmp_path, 50)).mkdir()
    (checkpoint.step_path(tmp_path, 50) / "__0_0.distcp").write_bytes(b"partial")
    (tmp_path / "notes").mkdir()
    assert checkpoint.find_latest(tmp_path) is None
    assert checkpoint.find_latest(tmp_path / "missing") is None
    done = checkpoint.step_path(tmp_path, 7)
    done.mkdir()
    (done / ".metadata").write_bytes(b"")
    assert checkpoint.find_latest(tmp_path) == checkpoint.Found(7, done)


def test_a_restart_takes_only_its_own_jobs_checkpoints(tmp_path):
    def saved(step: int, job: str | None) -> Path:
        path = checkpoint.step_path(tmp_path, step)
        path.mkdir()
        (path / checkpoint.PLAIN_FILE).write_bytes(b"")
        if job is not None:
            (path / checkpoint.JOB_FILE).write_text(job + "\n")
        return path

    saved(50, None)  # from before jobs were named
    saved(40, "other-run")
    mine = saved(20, "20261201-140749-c5ee")
    saved(10, "20261201-140749-c5ee")
    assert checkpoint.find_latest(tmp_path).step == 50
    assert checkpoint.find_latest(tmp_path, job="20261201-140749-c5ee") == checkpoint.Found(20, mine)
    assert checkpoint.find_latest(tmp_path, below=20, job="20261201-140749-c5ee").step == 10
    assert checkpoint.find_latest(tmp_path, job="a-job-that-saved-nothing") is None
    assert checkpoint.saved_by(mine) == "20261201-140749-c5ee" and checkpoint.saved_by(tmp_path / "missing") == ""
    # The job's id: pardash's run id, else torchrun's; torchrun's default id tells no job apart.
    assert checkpoint.job_id({"PARDASH_RUN_ID": "r1", "TORCHELASTIC_RUN_ID": "t1"}) == "r1"
    assert checkpoint.job_id({"TORCHELASTIC_RUN_ID": "t1"}) == "t1"
    assert checkpoint.job_id({"TORCHELASTIC_RUN_ID": "none"}) == checkpoint.job_id({}) == ""


def test_a_run_prunes_only_its_own_checkpoints_and_resume_goes_on_from_the_run_that_saved_last(tmp_path):
    # --checkpoint-keep deleted another run's checkpoints left in the folder (steps 30..90 of a
    # 300-step run, leaving it with holes), and --resume took the highest step, an older run's
    # 100, over the 60 of the run just killed.
    def saved(step: int, job: str, at: float, complete: bool = True) -> Path:
        path = checkpoint.step_path(tmp_path, step)
        path.mkdir()
        (path / checkpoint.JOB_FILE).write_text(job + "\n")
        if complete:
            (path / checkpoint.DCP_METADATA).write_bytes(b"m")
            os.utime(path / checkpoint.DCP_METADATA, (at, at))
        return path

    for k, step in enumerate((50, 100)):
        saved(step, "run-a", 1000.0 + k)
    for k, step in enumerate((30, 60)):
        saved(step, "run-b", 2000.0 + k)
    saved(70, "run-b", 0, complete=False)  # its save under way when it was killed
    assert checkpoint.newest_job(tmp_path) == "run-b"
    assert checkpoint.find_latest(tmp_path, job=checkpoint.newest_job(tmp_path)).step == 60
    assert checkpoint.newest_job(tmp_path / "missing") == ""
    # run-b keeps its newest 1: its own 30 goes; run-a's 50 and 100 stay.
    assert [p.name for p in checkpoint.prune(tmp_path, 1, upto=60, jobs={"run-b"})] == ["step-00000030"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000050", "step-00000060", "step-00000070", "step-00000100"]
    # A run that resumed from run-a's 100 keeps 1 of run-a's and its own together.
    saved(110, "run-c", 3000.0)
    gone = checkpoint.prune(tmp_path, 1, upto=110, jobs={"run-c", "run-a"})
    assert sorted(p.name for p in gone) == ["step-00000050", "step-00000100"]


@pytest.mark.parametrize("damage", [b"\xff\xfe\x9c garbage\x81", b"zzqj!x", b"run-", b"", b"\n"],
                         ids=["not-utf8", "garbage", "cut-short", "emptied", "blank"])
def test_a_damaged_job_file_counts_as_the_run_whose_save_it_followed(tmp_path, damage):
    # A job file overwritten, cut short or emptied read as a job of its own (or as none): the
    # run's newest checkpoint belonged to no run but that one, so --resume found nothing older
    # of it to fall back to ("no older checkpoint"), or took an older run's highest step.
    def saved(root: Path, step: int, job: str, at: float) -> Path:
        path = checkpoint.step_path(root, step)
        path.mkdir(parents=True)
        (path / checkpoint.JOB_FILE).write_text(job + "\n")
        (path / checkpoint.DCP_METADATA).write_bytes(b"m")
        os.utime(path / checkpoint.DCP_METADATA, (at, at))
        return path

    for k, step in enumerate((40, 50)):
        saved(tmp_path, step, "run-u", 500.0 + k)  # an older run's, of higher steps
    for k, step in enumerate((10, 20, 30)):
        newest = saved(tmp_path, step, "run-a", 1000.0 + k)
    (newest / checkpoint.JOB_FILE).write_bytes(damage)
    assert checkpoint.saved_by(newest) is None
    assert checkpoint.newest_job(tmp_path) == "run-a"
    assert checkpoint.find_latest(tmp_path, job="run-a") == checkpoint.Found(30, newest)
    assert checkpoint.find_latest(tmp_path, below=30, job="run-a").step == 20
    assert checkpoint.find_latest(tmp_path, job="run-u").step == 50
    assert checkpoint.saving_job(newest) == "run-a"
    # A run's first save after an older run's higher steps is not that run's: its job is not
    # known, and no run's checkpoints take it in.
    fresh = tmp_path / "fresh"
    saved(fresh, 50, "run-u", 500.0)
    first = saved(fresh, 10, "run-d", 1000.0)
    (first / checkpoint.JOB_FILE).write_bytes(damage)
    assert checkpoint.newest_job(fresh) is None and checkpoint.last_saved(fresh) == checkpoint.Found(10, first)
    assert checkpoint.find_latest(fresh, job="run-u").step == 50
    assert checkpoint.find_latest(fresh, below=50, job="run-u") is None
    # A damaged origin names no run to fall back to.
    (first / checkpoint.ORIGIN_FILE).write_bytes(damage)
    assert checkpoint.resumed_from(first) == ""


def test_progress_round_trips_through_tensors():
    p = checkpoint.Progress(step=20, epoch=1, steps_into_epoch=4, total_steps=40, lr=1.95e-3,
                            seed=1337, world_size=2, batch_size=8, grad_accum=2, dataset_size=256, noise=0.25)
    assert checkpoint.Progress.from_tensors(p.to_tensors()) == p
    # A checkpoint saved before the data flags were kept: they read as 0 (unknown), noise -1.
    older = {k: v for k, v in p.to_tensors().items()
             if k not in ("batch_size", "grad_accum", "dataset_size", "noise")}
    back = checkpoint.Progress.from_tensors(older)
    assert (back.step, back.batch_size, back.grad_accum, back.dataset_size, back.noise) == (20, 0, 0, 0, -1.0)
    # DCP is given blanks of only the keys the checkpoint holds (it refuses a missing one).
    assert sorted(checkpoint.Progress.blank_tensors([f"progress.{k}" for k in older])) == sorted(older)


@pytest.mark.parametrize("strategy", ["single", "ddp"])
def test_a_resume_with_other_model_flags_says_so_and_keeps_the_checkpoints(tmp_path, strategy):
    # --n-embd 64 against a checkpoint of 32: each checkpoint "could not be read" in turn,
    # then "run without --resume to start at step 1", as if the files were damaged.
    ckpt = str(tmp_path / "ckpt")
    proc, _ = trained(tmp_path, "a", "--strategy", strategy, "--steps", "4", "--checkpoint-dir", ckpt, "--checkpoint-every", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc, msgs = trained(tmp_path, "b", "--strategy", strategy, "--steps", "6", "--checkpoint-dir", ckpt, "--resume", "--n-embd", "64")
    assert proc.returncode != 0
    (error,) = events(msgs, "error")
    assert f"resume: {ckpt}/step-00000004 holds another model than this run's flags make (" in error.message
    assert "resume with the model flags it was saved with" in error.message
    assert "could not be read" not in proc.stderr and not events(msgs, "warning")
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir() if p.name.startswith("step-")) == ["step-00000002", "step-00000004"]


def test_a_resume_with_other_data_flags_says_what_differs():
    from pardash.trainer.config import TrainConfig
    from pardash.trainer.resume import resume_notes as _resume_notes

    saved = checkpoint.Progress(step=4, epoch=0, steps_into_epoch=4, total_steps=6, lr=1e-3, seed=1,
                                world_size=1, batch_size=8, grad_accum=1, dataset_size=256, noise=0.1)
    same = TrainConfig(seed=1, batch_size=8, grad_accum=1, dataset_size=256)
    assert _resume_notes(saved, same, 6, 1, True) == []
    other = TrainConfig(seed=1, batch_size=16, grad_accum=2, dataset_size=512, noise=0.5)
    notes = _resume_notes(saved, other, 6, 1, True)
    assert [n.split(":")[0] for n in notes] == [
        "the checkpoint was saved with --dataset-size 256, this run has 512",
        "the checkpoint was saved with --noise 0.1, this run has 0.5",  # (the loss jumped unsaid)
        "the checkpoint was saved taking 8 samples a step (--batch-size 8 x --grad-accum 1 x 1 rank(s)), this run takes 32",
    ]
    # The same samples a step split otherwise (DDP x2 at 4 a rank, one rank at 8, or 4 twice
    # accumulated) take the same samples: nothing to say (it said "each rank's data differs").
    assert _resume_notes(saved, TrainConfig(seed=1, batch_size=4, grad_accum=1, dataset_size=256), 6, 2, True) == []
    assert _resume_notes(saved, TrainConfig(seed=1, batch_size=4, grad_accum=2, dataset_size=256), 6, 1, True) == []
    ddp2 = checkpoint.Progress(step=4, epoch=0, steps_into_epoch=4, total_steps=6, lr=1e-3, seed=1,
                               world_size=2, batch_size=4, grad_accum=1, dataset_size=256)
    assert _resume_notes(ddp2, same, 6, 1, False) == []  # another world keeps no rank's RNG: expected
    # An older checkpoint, which did not keep them, is not second-guessed.
    older = checkpoint.Progress(step=4, epoch=0, steps_into_epoch=4, total_steps=6, lr=1e-3,
                                seed=1, world_size=1)
    assert _resume_notes(older, other, 6, 1, True) == []
    # Another --steps rescales the schedule, one way or the other.
    assert _resume_notes(saved, same, 12, 1, True)[-1].endswith("schedule is stretched to the new length")
    assert _resume_notes(saved, same, 5, 1, True)[-1].endswith("schedule is compressed to the new length")


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # DCP in one process, as meant
def test_a_dcp_checkpoint_from_before_the_data_flags_were_kept_resumes(tmp_path):
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from pardash.trainer.strategies import Wrapped

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    progress = checkpoint.Progress(step=6, epoch=1, steps_into_epoch=2, total_steps=9, lr=1e-3,
                                   seed=3, world_size=2)
    older = {k: v for k, v in progress.to_tensors().items()
             if k not in ("batch_size", "grad_accum", "dataset_size")}
    path = checkpoint.step_path(tmp_path, 6)
    model_sd, optim_sd = get_state_dict(model, optimizer)  # as checkpoint.save has it
    dcp.save({"model": model_sd, "optim": optim_sd, "progress": older}, checkpoint_id=str(path))
    fresh = torch.nn.Linear(3, 2)
    fresh_opt = torch.optim.AdamW(fresh.parameters())
    back, _, had_rng = checkpoint.load(
        checkpoint.Found(6, path), w=Wrapped(model=fresh, inner=fresh, strategy="single"),
        optimizer=fresh_opt, rank=0, device=torch.device("cpu"))
    assert back == progress and not had_rng
    assert torch.equal(fresh.weight, model.weight)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"resume": True}, "--resume needs --checkpoint-dir DIR"),
        ({"checkpoint_every": 10}, "--checkpoint-every needs --checkpoint-dir DIR"),
        ({"checkpoint_every": 0, "checkpoint_dir": "c"}, "--checkpoint-every must be at least 1"),
        ({"checkpoint_keep": 2}, "--checkpoint-keep needs --checkpoint-dir DIR"),
        ({"checkpoint_keep": -1, "checkpoint_dir": "c"}, "--checkpoint-keep must not be negative"),
        ({"checkpoint_dir": " "}, "--checkpoint-dir is empty"),
    ],
)
def test_checkpoint_flags_are_checked_in_one_line(kwargs, message):
    from pardash.trainer.config import TrainConfig

    with pytest.raises(ValueError, match=message) as err:
        TrainConfig(**kwargs)
    assert "\n" not in str(err.value)


def test_checkpoint_flags_round_trip_to_the_ranks(tmp_path, monkeypatch):
    import argparse

    from pardash.trainer.config import TrainConfig, add_arguments, from_args

    monkeypatch.chdir(tmp_path)  # from_args creates the folder
    cfg = TrainConfig(checkpoint_dir="ckpt", checkpoint_every=10, resume=True)
    assert cfg.to_argv() == ["--checkpoint-dir", "ckpt", "--checkpoint-every", "10", "--resume"]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert from_args(parser.parse_args(cfg.to_argv())) == cfg
    assert "first attempt only" in " ".join(parser.format_help().split())


def parse_flags(*argv: str):
    import argparse

    from pardash.trainer.config import add_arguments, from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_args(parser.parse_args(argv))


def test_the_checkpoint_dir_is_created_before_the_run(tmp_path):
    ckpt = tmp_path / "a" / "ckpt"
    assert parse_flags("--checkpoint-dir", str(ckpt)).checkpoint_dir == str(ckpt)
    assert ckpt.is_dir() and list(ckpt.iterdir()) == []  # the test file is gone again


# Runs the program in its argv (from argv[1]) without CAP_DAC_OVERRIDE, dropped from the
# bounding set before the exec: root is then refused a folder's missing write permission, as
# any user is. (Root keeps it otherwise, and writes into a read-only folder: the test that
# skipped as root said nothing in CI, which runs as root.) Unprivileged, nothing to drop.
WITHOUT_DAC_OVERRIDE = """
import ctypes, os, sys
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE = 24, 1  # <linux/prctl.h>, <linux/capability.h>
if os.geteuid() == 0 and ctypes.CDLL(None, use_errno=True).prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0) != 0:
    sys.exit("prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE): " + os.strerror(ctypes.get_errno()))
os.execv(sys.argv[1], sys.argv[1:])
"""


def test_a_read_only_checkpoint_dir_is_one_line(tmp_path):
    # A rank's own flags, in a process that may not override the folder's mode, root or not:
    # the real EACCES of a real write.
    ckpt = tmp_path / "ro"
    ckpt.mkdir(mode=0o500)
    check = "import sys; from pardash.trainer.config import parse_args; parse_args(sys.argv[1:], prog='train')"
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_DAC_OVERRIDE, sys.executable, "-c", check, "--checkpoint-dir", str(ckpt)],
        capture_output=True, text=True, timeout=120, env=pardash_env(),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = f"train: error: --checkpoint-dir {ckpt}: cannot write there (Permission denied); name a writable folder"
    assert proc.stderr.splitlines()[-1] == line, proc.stderr[-2000:]
    assert list(ckpt.iterdir()) == []  # its test file never made, or gone again


@pytest.mark.parametrize(
    ("where", "flags", "message"),
    [
        ("file", ["--checkpoint-every", "2"],
         "{dir} exists and is not a folder; name a folder to save checkpoints in"),
        # --resume used to find "no checkpoint" in a file and start afresh.
        ("file", ["--resume"],
         "{dir} exists and is not a folder; name a folder to save checkpoints in"),
        ("file/ckpt", ["--checkpoint-every", "2"],
         "{dir}: cannot write there (Not a directory); name a writable folder"),
    ],
    ids=["file", "file-resume", "under-a-file"],
)
def test_a_bad_checkpoint_dir_stops_the_launch_before_anything_starts(tmp_path, where, flags,
                                                                       message):
    # It used to be found at the first save, after --checkpoint-every steps of training, and
    # end in a traceback.
    (tmp_path / "file").write_text("not a folder")
    proc, msgs = launch(tmp_path, "bad", "--strategy", "single", "--steps", "4",
                        "--checkpoint-dir", str(tmp_path / where), *flags)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    line = "pardash: error: --checkpoint-dir " + message.format(dir=tmp_path / where)
    assert proc.stderr.splitlines() == [line]
    assert msgs == [] and not (tmp_path / "bad.jsonl").exists() and not (tmp_path / "runs").exists()
    assert (tmp_path / "file").read_text() == "not a folder"


@pytest.mark.parametrize("marker", [checkpoint.DCP_METADATA, checkpoint.PLAIN_FILE, "__0_0.distcp"])
def test_a_checkpoint_dir_that_is_one_checkpoint_names_its_parent(tmp_path, marker, capsys):
    # --resume --checkpoint-dir CK/step-00000030 found "no checkpoint ... yet; starting at step
    # 1" and then saved inside it (CK/step-00000030/step-00000040).
    from pardash.trainer import config

    one = checkpoint.step_path(tmp_path / "ck", 30)
    one.mkdir(parents=True)
    (one / marker).write_bytes(b"m")
    with pytest.raises(SystemExit) as exited:
        config.parse_args(["--resume", "--checkpoint-dir", f"{one}/"], prog="train")
    assert exited.value.code == 2
    line = (f"train: error: --checkpoint-dir {one}/ is one checkpoint (step 30) of the folder {tmp_path / 'ck'}, "
            f"not a folder of checkpoints; give that folder: --checkpoint-dir {tmp_path / 'ck'}")
    assert capsys.readouterr().err.splitlines()[-1] == line
    assert sorted(p.name for p in one.iterdir()) == [marker]  # nothing written into it
    # The folder of checkpoints itself, and a new folder that only looks like one, are fine.
    assert parse_flags("--resume", "--checkpoint-dir", str(tmp_path / "ck")).resume
    assert parse_flags("--checkpoint-dir", str(tmp_path / "step-00000001")).checkpoint_dir
    assert config._STEP_FOLDER.pattern == checkpoint.STEP_DIR.pattern  # (kept in both)


def test_no_resume_starts_a_restarted_job_over_and_says_so(tmp_path, hub):
    # After a torchrun restart the trainer resumes from its job's newest checkpoint unasked;
    # --no-resume (False, not the default None) starts the restart over at step 1, with a
    # warning in the dashboard, and --resume/none/--no-resume survive the trip through argv.
    import argparse

    import torch

    from helpers import identity, wait_for
    from pardash.telemetry.reporter import Reporter
    from pardash.trainer import config, resume
    from pardash.trainer.strategies import Runtime, Wrapped

    p = argparse.ArgumentParser()
    config.add_arguments(p)
    for argv, want in (([], None), (["--resume"], True), (["--no-resume"], False)):
        cfg = config.from_args(p.parse_args([*argv, "--checkpoint-dir", str(tmp_path / "ck")]))
        assert cfg.resume is want
        assert config.from_args(p.parse_args(cfg.to_argv())).resume is want

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    w = Wrapped(model=model, inner=model, strategy="single")
    rt = Runtime(rank=0, local_rank=0, world_size=1, local_world_size=1, device=torch.device("cpu"), backend="")
    progress = checkpoint.Progress(step=4, epoch=0, steps_into_epoch=4, total_steps=8, lr=1e-3, seed=1, world_size=1)
    checkpoint.save(tmp_path / "ck", progress, w=w, optimizer=optimizer, rank=0, device=rt.device, job="job-1")
    rep = Reporter(hub.ingest_endpoint, run="test-run", identity=identity(0, 1), heartbeat_s=0)
    try:
        rep.hello(strategy="single", world_size=1, params_count=8)
        unasked = config.TrainConfig(checkpoint_dir=str(tmp_path / "ck"))
        assert resume.resume(unasked, rt, w, optimizer, rep, 8, restart=1, job="job-1").step == 4
        refused = config.TrainConfig(checkpoint_dir=str(tmp_path / "ck"), resume=False)
        assert resume.resume(refused, rt, w, optimizer, rep, 8, restart=1, job="job-1").step == 0

        def warned() -> list[str]:
            return [e.message for e in hub.core.state.events if isinstance(e, schema.Event) and e.name == "warning"]

        wait_for(lambda: warned())
        assert warned() == ["resume: torchrun restart 1 starts at step 1 (--no-resume)"]
    finally:
        rep.close()


def test_a_save_that_fails_names_the_folder_and_the_room_left(tmp_path, monkeypatch):
    # A full disk made torch say only "[enforce fail at inline_container.cc:672] . unexpected
    # pos 704 vs 598", and that was the run's root cause.
    import torch

    from pardash.trainer.strategies import Wrapped

    model = torch.nn.Linear(2, 2)
    w = Wrapped(model=model, inner=model, strategy="single")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    progress = checkpoint.Progress(step=40, epoch=0, steps_into_epoch=40, total_steps=100, lr=0.1, seed=0,
                                   world_size=1, batch_size=16, grad_accum=1, dataset_size=256)  # fmt: skip

    def full(*_a, **_k):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(checkpoint.CheckpointSaveError) as err:
        checkpoint.save(tmp_path / "ckpt", progress, w=w, optimizer=opt, rank=0, device=torch.device("cpu"))
    message = str(err.value)
    assert message.startswith(f"checkpoint save to {checkpoint.step_path(tmp_path / 'ckpt', 40)} failed: RuntimeError: [enforce")
    assert "MiB free on its disk" in message


@pytest.mark.slow
@REFERENCE_GROUP
def test_a_checkpoint_that_cannot_be_saved_costs_that_checkpoint_not_the_run(tmp_path, uninterrupted):
    # A full disk at one save killed a run left for days, and --max-restarts spent every
    # restart failing at the same save. Now the ranks agree it failed, warn, train on and try
    # again at the next interval. Step 20's folder cannot be made (a file holds its name).
    # Step 30's cannot be begun by rank 0 alone: it prepares the folder (it names the job in it)
    # before DCP's first collective, and when that failed, rank 0 went to agree on the failure
    # while rank 1 waited in DCP's collectives, both until the process group's timeout, and the
    # job died.
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    blocked = checkpoint.step_path(ckpt, 20)
    blocked.write_text("not a folder")
    (checkpoint.step_path(ckpt, 30) / checkpoint.JOB_FILE).mkdir(parents=True)  # rank 0 cannot write it
    shared, reference = uninterrupted
    proc, msgs = launch(tmp_path, "a", "--nproc", "2", "--checkpoint-every", "10", "--checkpoint-dir", str(ckpt),
                        "--max-restarts", "1", "--pg-timeout-s", "60", sized=shared.train_args)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted((e.rank, e.step) for e in events(msgs, "checkpoint")) == [(0, 10), (0, 40), (1, 10), (1, 40)]
    warned = events(msgs, "warning")
    assert sorted((e.rank, e.step) for e in warned) == [(0, 20), (0, 30), (1, 20), (1, 30)]
    assert all(f"checkpoint save to {blocked} failed" in e.message and "training goes on, the next try at step 30" in e.message
               for e in warned if e.step == 20)  # fmt: skip
    assert not events(msgs, "resume")  # no restart was spent on either
    assert_same_curve(losses(msgs), reference)
    assert checkpoint.find_latest(ckpt).step == 40
