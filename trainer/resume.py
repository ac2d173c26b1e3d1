"""What ``--resume`` does in the bundled trainer: find the newest checkpoint every rank can read,
load it, and say what differs between the run that saved it and this one. After a torchrun
restart (``--max-restarts``) the trainer resumes without being asked, from the newest
checkpoint its own job saved (an older run's, left in the same folder, is never taken then).

The checkpoint itself (layout, formats, what makes the curve continue) is :mod:`.checkpoint`'s.
Here: every rank agrees on the checkpoint rank 0 finds; one that fails to load on any rank (a
shard cut short after its save completed, a node's copy unreadable) is named, and every rank
goes back to the one before it together (with --resume, at last to the folder's other runs'
checkpoints); when none can be read the resume fails (one line,
:class:`ResumeError`) rather than start afresh, which would quietly throw the run's progress away.
"""

from __future__ import annotations

import re
import sys

import torch

from pardash.telemetry.reporter import Reporter

from . import checkpoint
from .checkpoint import one_line
from .config import TrainConfig
from .strategies import Runtime, Wrapped


def resume(
    cfg: TrainConfig, rt: Runtime, w: Wrapped, optimizer: torch.optim.Optimizer,
    reporter: Reporter, total_steps: int, *, restart: int = 0, job: str = "",
) -> checkpoint.Progress:
    """Where this run starts: the progress of the checkpoint loaded into ``w`` and
    ``optimizer``, else step 0. With --resume: the newest checkpoint in --checkpoint-dir. Without
    it, after torchrun's ``restart`` (1, 2, ...): the newest one saved by ``job`` (this job's
    id, :func:`checkpoint.job_id`), as the attempt before this one left it, unless --no-resume.
    (In a folder several runs saved into, --resume goes on from the run whose checkpoint was
    completed last, not from the highest step, which may be an older run's.)
    Collective for ddp/fsdp."""
    start = checkpoint.Progress(step=0, epoch=0, steps_into_epoch=0, total_steps=total_steps,
                                lr=0.0, seed=cfg.seed, world_size=rt.world_size, **data_flags(cfg))
    is_master = rt.rank == 0
    if cfg.checkpoint_dir and cfg.resume is False and restart > 0:
        _starts_over(reporter, is_master, f"resume: torchrun restart {restart} starts at step 1 (--no-resume)")
        return start
    if not cfg.checkpoint_dir or not (cfg.resume or restart > 0):
        if cfg.checkpoint_dir and is_master and restart == 0:
            _warn_of_older(cfg, reporter)
        return start
    own = None if cfg.resume else job  # after a restart: only this job's own checkpoints
    if own == "":
        _starts_over(reporter, is_master, f"resume: torchrun restart {restart} starts at step 1: this job has no id "
                     f"to tell its checkpoints in {cfg.checkpoint_dir} from another run's (--resume takes the newest)")
        return start
    reporter.set_phase("resume")
    alone = False
    if own is None:
        # --resume goes on from the run that saved last (a folder may hold several runs'
        # checkpoints: the highest step may be an older run's), from its newest checkpoint.
        own = checkpoint.newest_job(cfg.checkpoint_dir)
        # None: that checkpoint's job file is damaged and whose run it is cannot be told. It is
        # still the newest, so --resume goes on from it, and back only along the run it names
        # as its origin (taking "any run" instead would take an older run's highest step).
        alone, own = own is None, own or None
    if alone:
        found = checkpoint.agree_on(checkpoint.last_saved(cfg.checkpoint_dir), cfg.checkpoint_dir, rt.device)
    else:
        found = checkpoint.agree_on_latest(cfg.checkpoint_dir, rt.device, job=own)
    if found is None:
        if cfg.resume:
            if is_master:
                # (a folder holding only a save killed as it was written read "no checkpoint yet")
                for path in checkpoint.unfinished_after(cfg.checkpoint_dir, -1):
                    print(f"resume: {path} is a save that never completed (stopped as it was written): not used", flush=True)
                print(f"resume: no checkpoint in {cfg.checkpoint_dir} yet; starting at step 1", flush=True)
        else:
            _starts_over(reporter, is_master, f"resume: torchrun restart {restart}: no checkpoint of this job in "
                         f"{cfg.checkpoint_dir} yet; starting at step 1")
        return start
    if not cfg.resume and is_master:
        print(f"resume: torchrun restart {restart}: from this job's newest checkpoint", flush=True)
    start, load_s, had_rng, found = load_newest_readable(found, cfg, w, optimizer, rt, reporter, job=own,
                                                         alone=alone)
    notes = resume_notes(start, cfg, total_steps, rt.world_size, had_rng)
    of = _saved_by(found, job)
    reporter.event("resume", message=f"step {start.step} from {found.path}{of}"
                   + "".join(f"; {n}" for n in notes), step=start.step, duration_s=load_s)
    if is_master:
        for path in checkpoint.unfinished_after(cfg.checkpoint_dir, start.step):
            # (a newer folder passed over without a word read as a checkpoint lost)
            print(f"resume: {path} is a save that never completed (stopped as it was written): not used", flush=True)
        print(f"resume: step {start.step} restored from {found.path}{of} in {load_s:.2f} s", flush=True)
        for note in notes:
            print(f"note: {note}", flush=True)
        if restart == 0:
            _warn_of_others_past(cfg, reporter, start.step, total_steps, {job, checkpoint.saving_job(found.path)})
    if start.step >= total_steps:
        # Nothing is left to train: said, rather than a "done: 150 steps in 0.00 s".
        message = (f"resume: the checkpoint is at step {start.step}, at or past --steps {total_steps}: nothing "
                   f"to train (give --steps above {start.step} to go on)")
        if is_master:
            print(message, flush=True)
            reporter.event("warning", message=message, step=start.step)
    return start


def _saved_by(found: checkpoint.Found, job: str) -> str:
    """' (saved by run X)' for a checkpoint another job saved, and whether its job file is
    damaged: the run named is then the one it is taken to continue (:func:`checkpoint.saving_jobs`),
    which a user who damaged it by hand may know better."""
    by = checkpoint.saving_job(found.path)
    said = [f"saved by run {by}"] if by and by != job else []
    if checkpoint.saved_by(found.path) is None:
        said.append("its job file damaged" + ("" if by is not None else ": which run saved it is not known"))
    return f" ({', '.join(said)})" if said else ""


def _warn_of_older(cfg: TrainConfig, reporter: Reporter) -> None:
    """A run without --resume in a folder that holds another run's checkpoints starts at step
    1 and writes over those of the steps it saves too (torch's UserWarning was the only sign):
    said once, in the output and as a warning, with what --resume would have done."""
    found = checkpoint.find_latest(cfg.checkpoint_dir)
    if found is None:
        return
    message = (f"checkpoint: {cfg.checkpoint_dir} already holds checkpoints (the newest at step {found.step}"
               + (f", saved by run {checkpoint.saved_by(found.path)}" if checkpoint.saved_by(found.path) else "")
               + "); this run starts at step 1 without --resume, and its saves replace those of the same steps")
    print(message, flush=True)
    reporter.event("warning", message=message, step=0)


def saving_steps(start: int, total_steps: int, every: int | None) -> list[int]:
    """The steps a run going on from ``start`` saves at: every ``every`` steps and the last
    (the training loop's rule)."""
    return [s for s in range(start + 1, total_steps + 1) if s == total_steps or (every and s % every == 0)]


def _warn_of_others_past(cfg: TrainConfig, reporter: Reporter, step: int, total_steps: int,
                         own: set[str | None]) -> None:
    """A resumed run in a folder that holds another run's checkpoints past the step it resumed
    at writes over those of the steps it saves too, as a fresh run does (:func:`_warn_of_older`),
    but nothing said so: another run's step 40 became this one's without a word, its step 60
    left beside it. Said once, in the output and as a warning, with the steps replaced.
    ``own``: this job and the one it went on from, whose checkpoints are the run's own line."""
    jobs = checkpoint.saving_jobs(cfg.checkpoint_dir)
    others = {}
    for name, by in jobs.items():
        m = checkpoint.STEP_DIR.match(name)
        if m and int(m.group(1)) > step and by not in own:
            others[int(m.group(1))] = by
    replaced = sorted(set(others) & set(saving_steps(step, total_steps, cfg.checkpoint_every)))
    if not replaced:
        return
    runs = sorted({others[s] for s in others if others[s]})
    message = (f"checkpoint: {cfg.checkpoint_dir} holds another run's checkpoints past step {step} (step(s) "
               + ", ".join(str(s) for s in sorted(others))
               + (f", saved by run {', '.join(runs)}" if runs else "")
               + f"); this run resumes at step {step}, and its saves replace those of step(s) "
               + ", ".join(str(s) for s in replaced))
    print(message, flush=True)
    reporter.event("warning", message=message, step=step)


def _starts_over(reporter: Reporter, is_master: bool, message: str) -> None:
    """A restarted job that goes back to step 1: said on rank 0's output and, as a warning, in
    the dashboard and the log (where the steps starting over would otherwise go unexplained)."""
    if is_master:
        print(message, flush=True)
        reporter.event("warning", message=message, step=0)


OTHER_MODEL = re.compile(r"size mismatch|missing key|unexpected key|optimizer holds \d+ parameters, this model", re.IGNORECASE)
"""What loading a checkpoint of another model says (DCP's and load_state_dict's own words, and
:func:`checkpoint._optim_by_name`'s)."""


def _other_model(err: BaseException) -> str | None:
    """The line of a load's error that says the checkpoint holds another model (load_state_dict
    names every mismatch on a line of its own under its first), else None."""
    for line in [one_line(err, 1000), *str(err).splitlines()]:
        if OTHER_MODEL.search(line):
            line = line.strip()
            return line if len(line) <= 200 else line[:199] + "…"
    return None


class ResumeError(RuntimeError):
    """No checkpoint to resume from can be read on every rank. The run fails with this one line,
    no traceback: what is wrong is the folder's files, which each line before it named."""


def load_newest_readable(
    found: checkpoint.Found, cfg: TrainConfig, w: Wrapped, optimizer: torch.optim.Optimizer,
    rt: Runtime, reporter: Reporter, job: str | None = None, *, alone: bool = False,
) -> tuple[checkpoint.Progress, float, bool, checkpoint.Found]:
    """Load ``found``, or when it cannot be read on some rank (a shard cut short or damaged
    after its save completed) the newest older checkpoint that can (of ``job``'s, when given,
    then of the job it went on from, as its checkpoints name it, and so on: a run that resumed
    another and saved once has only the other's to go back to, the very one it started from;
    never an unrelated run's), saying which and why:
    (progress, seconds, whether the RNG state was there, the checkpoint loaded). With --resume,
    when none of that line can be read, the folder's other checkpoints, in the order --resume
    picks (:func:`checkpoint.next_to_try`: another run's that can be read is the folder's newest
    progress; a run that started afresh beside an older one and whose checkpoints were damaged
    said "no older checkpoint" and failed with the older run's readable); after a torchrun
    restart never another run's. Every rank goes back together. ``alone``: which run saved
    ``found`` is not known (its job file is damaged), so only the run it went on from is gone
    back along first. Raises :class:`ResumeError` (from the first error) when no checkpoint can
    be read: starting afresh instead would quietly throw the run's progress away."""
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

    first: BaseException | None = None
    tried: list[checkpoint.Found] = []
    while True:
        try:
            loaded = checkpoint.load(found, w=w, optimizer=optimizer, rank=rt.rank, device=rt.device)
            err = None
        except (Exception, CheckpointException) as e:  # files on a disk: anything can be wrong
            loaded, err = None, e
        if checkpoint.on_every_rank(err is None, rt.device):
            return (*loaded, found)
        other = _other_model(err) if err is not None else None
        if not checkpoint.on_every_rank(other is None, rt.device):  # (every rank raises together)
            other = other or "another rank found it so"
            # Not damage: the checkpoint holds another model than these flags make (older
            # ones too, most likely); "could not be read" and "run without --resume" said
            # to throw the progress away
            raise ResumeError(f"resume: {found.path} holds another model than this run's flags make ({other}): "
                              "resume with the model flags it was saved with (--model, --n-layer, --n-embd, --n-head, "
                              "--hidden, --vocab, --seq-len), or give another --checkpoint-dir") from err
        first = first or err
        tried.append(found)
        why = one_line(err) if err is not None else "another rank could not read it"
        older = None if alone else checkpoint.agree_on_latest(cfg.checkpoint_dir, rt.device, below=found.step, job=job)
        origin = checkpoint.resumed_from(found.path) if job or alone else ""
        if older is None and origin:
            older = checkpoint.agree_on_latest(cfg.checkpoint_dir, rt.device, below=found.step, job=origin)
        other = False
        if (older is None or older in tried) and getattr(cfg, "resume", None):
            # --resume, nothing of that line readable: the folder's other checkpoints, in the
            # order --resume picks (an older run's that can be read is progress, not nothing).
            # A torchrun restart never: only its own job's.
            older = checkpoint.agree_on(checkpoint.next_to_try(cfg.checkpoint_dir, [f.path for f in tried]),
                                        cfg.checkpoint_dir, rt.device)
            other = older is not None
        by = checkpoint.saving_job(older.path) if older is not None else ""
        message = (f"{found.path} could not be read ({why}); "
                   + (f"trying {older.path}" + (f" (saved by run {by}, another run's)" if other and by else
                                                 " (another run's)" if other else
                                                 f" (saved by run {by}, which this one went on from)" if by and by != job else "")
                      if older is not None else "no older checkpoint"))
        if other:
            job, alone = by or None, by is None  # from here on, along that run's line
        elif older is not None and by and by == origin:
            job, alone = origin, False  # from here on, along that run's own line
        reporter.event("warning", message=f"resume: {message}", step=found.step)
        if rt.rank == 0:
            print(f"resume: {message}", file=sys.stderr, flush=True)
        if older is None:
            # An error of our own (DCP's CheckpointException is a BaseException, which a
            # caller's `except Exception` would let through as if the run had ended well).
            raise ResumeError(f"resume: no checkpoint in {cfg.checkpoint_dir} can be read on every rank"
                              + (f"; the newest: {one_line(first)}" if first is not None else "")
                              + ("; run without --resume to start at step 1" if getattr(cfg, "resume", None) else "")
                              ) from first
        found = older


def data_flags(cfg: TrainConfig) -> dict[str, float]:
    """The flags besides --seed that decide which samples each step takes, and what they are,
    as a checkpoint's :class:`~.checkpoint.Progress` keeps them."""
    return {"batch_size": cfg.batch_size, "grad_accum": cfg.grad_accum, "dataset_size": cfg.dataset_size, "noise": cfg.noise}


def resume_notes(
    saved: checkpoint.Progress, cfg: TrainConfig, total_steps: int, world_size: int,
    had_rng: bool,
) -> list[str]:
    """What differs between the checkpoint's run and this one, so the loss curve may too."""
    notes = []
    if saved.seed != cfg.seed:
        notes.append(f"the checkpoint was saved with --seed {saved.seed}, this run has "
                     f"{cfg.seed}: the data order differs")
    if saved.dataset_size and saved.dataset_size != cfg.dataset_size:  # 0: not kept then
        notes.append(f"the checkpoint was saved with --dataset-size {saved.dataset_size}, this run has "
                     f"{cfg.dataset_size}: the data and its epochs differ from the saved run's")
    if saved.noise >= 0 and saved.noise != cfg.noise:  # -1: not kept then
        notes.append(f"the checkpoint was saved with --noise {saved.noise:g}, this run has {cfg.noise:g}: "
                     "the data's labels differ from the saved run's")
    # A step takes the next batch x grad-accum x ranks samples of the seeded order, however they
    # are split among ranks and micro-batches: DDP x2 at --batch-size 16 takes what one rank at
    # 32 does, so only another number of samples a step changes them.
    if saved.batch_size and saved.grad_accum:
        was = saved.batch_size * saved.grad_accum * saved.world_size
        now = cfg.batch_size * cfg.grad_accum * world_size
        if was != now:
            notes.append(f"the checkpoint was saved taking {was} samples a step (--batch-size {saved.batch_size} "
                         f"x --grad-accum {saved.grad_accum} x {saved.world_size} rank(s)), this run takes {now}: the "
                         "steps already taken in the epoch are skipped by count, so each step from here takes "
                         "other samples than the saved run's would have")
    elif saved.world_size != world_size:  # a checkpoint that kept no batch flags
        notes.append(f"the checkpoint was saved by {saved.world_size} rank(s), this run has "
                     f"{world_size}: each step's samples may differ from then on")
    if saved.world_size == world_size and not had_rng:
        notes.append("this rank's RNG state is not in the checkpoint")
    if saved.total_steps != total_steps:
        notes.append(f"the checkpoint's run had {saved.total_steps} steps, this one "
                     f"{total_steps}: the learning rate schedule is "
                     + ("stretched" if total_steps > saved.total_steps else "compressed") + " to the new length")
    return notes
