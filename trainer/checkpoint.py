"""Checkpoints of the bundled trainer: save every N steps, resume from the newest.

Layout: ``DIR/step-00000020/``, one folder per saved step.

- ddp, fsdp: :mod:`torch.distributed.checkpoint` (DCP). ``get_state_dict`` gives the model's
  and the optimizer's state as this rank holds it (FSDP2: its DTensor shards; DDP: the module
  without the wrapper's ``module.`` prefix); every rank writes its part in parallel and rank 0
  writes ``.metadata`` last (by rename). A folder with ``.metadata`` is complete; one without is
  a save that died, and is ignored. DCP reshards on load, so the model and optimizer also load
  into another world size.
- single, dp: one process, so a plain :func:`torch.save` of the same dictionary to
  ``state.pt``, written under a temporary name and renamed (complete: ``state.pt`` exists).

Either strategy family resumes the other's checkpoint: :func:`load` goes by what the folder
holds, not by the strategy. One process reads a DCP folder without a process group; ddp and
fsdp ranks each read ``state.pt`` whole and keep their part (it was saved by one process, so it
fits in one).

What makes a resumed run follow the uninterrupted run's loss curve:

- the model and the optimizer state (AdamW's moments and its step count);
- the step: the loop goes on at step + 1, and the learning rate is a function of the step
  (``train.lr_at``), so the schedule continues where it stood;
- the data order: the DistributedSampler's order is a function of (seed, epoch, rank, world
  size); the checkpoint keeps the epoch and the steps already taken in it, which the loop skips;
- each rank's RNG state (CPU, and its GPU) for whatever is random in a step (dropout).

Each folder also names the job that saved it (``job``: the pardash run id, else torchrun's
run id), so that a torchrun restart resumes from its own job's checkpoints and never from an
older run's left in the same folder (:func:`job_id`, ``find_latest(job=...)``). A folder whose
``job`` file is damaged counts as the run's whose save it followed (:func:`saving_jobs`).

Which checkpoint was saved last (what ``--resume`` goes on from, :func:`newest_job`) is told by
the folder's ``save_order`` file, a count each save writes: one more than the highest any
checkpoint in the folder held when it began. It travels with the folder, where file times do
not: a plain ``cp -r`` (rsync, gsutil without keeping times) gives every file the copy's time.

The progress scalars are stored as tensors. Like any torch checkpoint, a checkpoint folder is
trusted input (DCP unpickles the optimizer's hyper-parameters): load only your own.
"""

from __future__ import annotations

import os
import shutil
import re
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch
import torch.distributed as dist

from .strategies import Wrapped

STEP_DIR = re.compile(r"^step-(\d+)$")
"""A checkpoint folder's name: ``step-`` and the step, zero-padded to 8 digits."""
PLAIN_FILE = "state.pt"
"""The single/dp checkpoint inside its step folder."""
DCP_METADATA = ".metadata"
"""Written last by DCP's coordinator: its presence marks a complete DCP checkpoint."""
JOB_FILE = "job"
"""The id of the job that saved the folder (:func:`job_id`), written by rank 0 before the save."""
ORIGIN_FILE = "resumed_from"
"""The id of the job whose checkpoint the saving job went on from (--resume), when another's:
a checkpoint that cannot be read falls back along that line first (a torchrun restart: that
line only, never to an unrelated run's; --resume: then to the folder's others, :func:`next_to_try`)."""
ORDER_FILE = "save_order"
"""The save's place in the order of the folder's saves (:func:`_completed`): 1 + the highest
``save_order`` of any checkpoint in the folder when the save began, written by rank 0 before the
save completes."""


def job_id(env: dict[str, str] | None = None) -> str:
    """This job's id, the same on every rank and across torchrun's restarts: the pardash run id
    (``PARDASH_RUN_ID``, set by ``pardash launch``), else torchrun's rendezvous id. "" when
    neither tells one job from another (torchrun's default id on several nodes is "none")."""
    env = os.environ if env is None else env
    for var in ("PARDASH_RUN_ID", "TORCHELASTIC_RUN_ID"):
        value = env.get(var, "").strip()
        if value and value != "none":
            return value
    return ""


def resumed_from(path: Path) -> str:
    """The job the job that saved ``path`` went on from ("" when it started afresh, or it is not
    known: saved before origins were kept, or its file is damaged)."""
    return _read_job(path / ORIGIN_FILE) or ""


def saved_by(path: Path) -> str | None:
    """The job id a checkpoint folder names ("" when it names none: saved before ids were kept,
    or by a job without one; None when its job file is damaged, so which job saved it is not
    known: :func:`saving_job` tells what can be)."""
    return _read_job(path / JOB_FILE)


def _read_job(file: Path) -> str | None:
    """The job id in ``file`` as :func:`_name_job` writes it, one printable line and its newline
    ("" when there is no such file; None when it is there but holds no such line). Anything
    else read as an id (bytes written over it, an id cut short, which loses its newline) would
    be a job of its own that no other checkpoint names: one with nothing to fall back to."""
    try:
        raw = file.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return ""
    except OSError:
        return None
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return None
    name = text[:-1]
    if not text.endswith("\n") or not name or not name.isprintable() or name != name.strip():
        return None
    return name


@dataclass(slots=True, kw_only=True)
class Progress:
    """Where the run stood after a saved step: everything besides model and optimizer."""

    step: int
    """Optimizer steps completed; the run resumes at step + 1."""
    epoch: int
    """Epoch of the next step."""
    steps_into_epoch: int
    """Steps of that epoch already taken (the resumed loop skips their batches)."""
    total_steps: int
    """The run's length when saved: the learning rate schedule's horizon."""
    lr: float
    """Learning rate of the saved step."""
    seed: int
    """--seed: model init, the data and its order."""
    world_size: int
    """Ranks when saved: the data order is per rank, so another world size changes it."""
    batch_size: int = 0
    """--batch-size when saved (0: a checkpoint from before it was kept). The steps already
    taken in the epoch are skipped by count, so another batch size moves the data position."""
    grad_accum: int = 0
    """--grad-accum when saved (0: not kept); as --batch-size."""
    dataset_size: int = 0
    """--dataset-size when saved (0: not kept): another size is other data and epochs."""
    noise: float = -1.0
    """--noise when saved (-1: not kept): another is other labels for the same samples."""
    n_head: int = 0
    """The model's attention heads (--n-head) when saved (0: not kept, or a model without
    attention), filled in by :func:`save` from the model. The one model flag the parameters'
    shapes do not tell: a checkpoint of another head count loads without an error."""

    def to_tensors(self) -> dict[str, torch.Tensor]:
        """Each field as a 0-d tensor (float64 for ``lr``, int64 otherwise)."""
        return {
            f.name: torch.tensor(
                getattr(self, f.name), dtype=torch.float64 if f.name in _FLOATS else torch.int64
            )
            for f in fields(self)
        }

    @classmethod
    def from_tensors(cls, values: dict[str, torch.Tensor]) -> "Progress":
        """The progress ``values`` hold; a field an older checkpoint lacks keeps its default."""
        kw = {f.name: values[f.name].item() for f in fields(cls) if f.name in values}
        return cls(**{k: float(v) if k in _FLOATS else int(v) for k, v in kw.items()})

    @classmethod
    def blank_tensors(cls, saved: Iterable[str] | None = None) -> dict[str, torch.Tensor]:
        """Tensors of the right dtypes for DCP to load into: of every field, or of those whose
        flattened key (``progress.step``) is in ``saved`` (DCP refuses to load a key the
        checkpoint lacks, and an older one lacks the newer fields)."""
        blank = cls(step=0, epoch=0, steps_into_epoch=0, total_steps=0, lr=0.0, seed=0,
                    world_size=0).to_tensors()
        if saved is None:
            return blank
        keys = set(saved)
        return {k: v for k, v in blank.items() if f"progress.{k}" in keys}


_FLOATS = ("lr", "noise")
"""Fields of :class:`Progress` kept as float64 (the rest as int64)."""


@dataclass(frozen=True, slots=True)
class Found:
    """A complete checkpoint on disk."""

    step: int
    path: Path


def uses_dcp(strategy: str) -> bool:
    """ddp and fsdp save with DCP (every rank its part); single and dp with torch.save."""
    return strategy in ("ddp", "fsdp")


def step_path(root: str | os.PathLike[str], step: int) -> Path:
    """The folder of the checkpoint of ``step`` under ``root``."""
    return Path(root) / f"step-{step:08d}"


def is_complete(path: Path) -> bool:
    """True when the save into ``path`` finished (DCP's metadata or the plain file is there)."""
    return (path / DCP_METADATA).is_file() or (path / PLAIN_FILE).is_file()


def saved_with_dcp(path: Path, strategy: str) -> bool:
    """True when the checkpoint in ``path`` is DCP's, False when it is ``state.pt``. A folder
    holding both (saved before :func:`save` cleared the other format's marker) is read the way
    ``strategy`` saves."""
    dcp_done, plain_done = (path / DCP_METADATA).is_file(), (path / PLAIN_FILE).is_file()
    return uses_dcp(strategy) if dcp_done and plain_done else dcp_done


def find_latest(root: str | os.PathLike[str], below: int | None = None, job: str | None = None) -> Found | None:
    """The complete checkpoint of the highest step under ``root`` (None: no folder, or none),
    or of the highest step under ``below`` (the one before a checkpoint that would not load);
    with ``job``, only among the checkpoints that job saved (:func:`saving_jobs`)."""
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return None
    jobs = saving_jobs(root) if job is not None else {}
    best: Found | None = None
    for entry in entries:
        m = STEP_DIR.match(entry.name)
        if m and entry.is_dir() and is_complete(Path(entry.path)):
            step = int(m.group(1))
            if below is not None and step >= below:
                continue
            if job is not None and jobs.get(entry.name) != job:
                continue
            if best is None or step > best.step:
                best = Found(step, Path(entry.path))
    return best


def _completed(root: str | os.PathLike[str]) -> list[Found]:
    """The complete checkpoints under ``root`` in the order their saves were made: by the count
    each save wrote (:data:`ORDER_FILE`), which no copy of the folder changes.

    By its marker's file time (then its step) only where that count is not there: a checkpoint
    saved before counts were kept comes before every counted one (each counted save saw it in
    the folder, so began after it completed); one whose count is damaged goes after the counted
    ones whose markers are older than its own (the best the times can tell, right while the
    folder has not been copied). File times alone put an older run's step 800 after the
    resumed run's 1000 and 1200 once ``cp -r`` had given every file the copy's time in the
    order the copy went, and --resume went back to it, its saves replacing the newer ones."""
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    done: list[tuple[int, int | None, float, Path]] = []
    for entry in entries:
        m = STEP_DIR.match(entry.name)
        if not (m and entry.is_dir()):
            continue
        path = Path(entry.path)
        times = []
        for marker in (DCP_METADATA, PLAIN_FILE):
            try:
                times.append(os.stat(path / marker).st_mtime)
            except OSError:
                continue
        if times:
            done.append((int(m.group(1)), _read_order(path), max(times), path))
    counted = sorted((at, order) for _, order, at, _ in done if order)
    keys = []
    for step, order, at, path in done:
        if order is None:
            # Damaged: just after the newest counted checkpoint completed before it (0.5: before
            # the next count; 0 when none was, yet after those saved before counts were kept).
            before = [o for t, o in counted if t <= at]
            place: float = max(before) + 0.5 if before else 0.5
        else:
            place = order
        keys.append(((place, at, step), Found(step, path)))
    return [found for _, found in sorted(keys, key=lambda k: k[0])]


def _read_order(path: Path) -> int | None:
    """The count in ``path``'s :data:`ORDER_FILE`: 0 when there is none (a checkpoint saved
    before counts were kept), None when it is there but holds no count as :func:`_name_job`
    writes it (damaged)."""
    try:
        raw = (path / ORDER_FILE).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return 0
    except OSError:
        return None
    if not (raw.endswith(b"\n") and raw[:-1].isdigit()) or int(raw[:-1]) < 1:
        return None
    return int(raw[:-1])


def _next_order(root: Path) -> int:
    """The count the save beginning now writes: one more than the highest of any checkpoint
    folder under ``root``, complete or not (a save that began is older than this one)."""
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return 1
    return 1 + max((_read_order(Path(e.path)) or 0 for e in entries if STEP_DIR.match(e.name) and e.is_dir()),
                   default=0)


def next_to_try(root: str | os.PathLike[str], tried: Iterable[Path]) -> Found | None:
    """The checkpoint ``--resume`` would take were those in ``tried`` not there (None: none is
    left): the newest of the run whose save completed last (:func:`newest_job`), or the one
    completed last when which run saved it is not known. What --resume goes on to when every
    checkpoint of the run it chose, and of the runs that one went on from, cannot be read: an
    older run's that can be is the folder's newest progress, not nothing."""
    names = {Path(p).name for p in tried}
    left = [f for f in _completed(root) if f.path.name not in names]
    if not left:
        return None
    jobs = saving_jobs(root)
    job = jobs.get(left[-1].path.name)
    if job is None:
        return left[-1]
    return max((f for f in left if jobs.get(f.path.name) == job), key=lambda f: f.step)


def unfinished_after(root: str | os.PathLike[str], step: int) -> list[Path]:
    """Folders of saves past ``step`` that never completed (no marker: their writer died or
    was stopped as it wrote), by step: a resume from ``step`` says it passed them over."""
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for entry in entries:
        m = STEP_DIR.match(entry.name)
        if m and int(m.group(1)) > step and entry.is_dir():
            path = Path(entry.path)
            if not any((path / marker).exists() for marker in (DCP_METADATA, PLAIN_FILE)):
                out.append((int(m.group(1)), path))
    return [path for _, path in sorted(out)]


def saving_jobs(root: str | os.PathLike[str]) -> dict[str, str | None]:
    """The job that saved each complete checkpoint under ``root``, by folder name, in the order
    their saves completed: the one its job file names ("" none); where that file is damaged,
    the job of the checkpoint completed just before it when that is of a lower step (a run's
    saves climb, each completing after the last: the run it continued, as far as can be told);
    else None, not known (the folder's first save, or one after a higher step, an older run's:
    counting it as that run's could send a resume to a run it never trained from)."""
    jobs: dict[str, str | None] = {}
    before: tuple[int, str | None] | None = None
    for found in _completed(root):
        job = saved_by(found.path)
        if job is None and before is not None and before[0] < found.step:
            job = before[1]
        jobs[found.path.name] = job
        before = (found.step, job)
    return jobs


def saving_job(path: Path) -> str | None:
    """The job that saved the checkpoint in ``path``, as :func:`saving_jobs` tells it."""
    return saving_jobs(path.parent).get(path.name, saved_by(path))


def last_saved(root: str | os.PathLike[str]) -> Found | None:
    """The checkpoint completed last under ``root`` (None: none)."""
    done = _completed(root)
    return done[-1] if done else None


def newest_job(root: str | os.PathLike[str]) -> str | None:
    """The job that saved the checkpoint completed last under ``root`` ("" when there is none,
    or it names no job; None when its job file is damaged and :func:`saving_jobs` cannot tell):
    what ``--resume`` goes on from, in a folder several runs saved into."""
    jobs = saving_jobs(root)
    return jobs[next(reversed(jobs))] if jobs else ""


def prune(root: str | os.PathLike[str], keep: int, upto: int | None = None, jobs: set[str] | None = None) -> list[Path]:
    """Delete all but the newest ``keep`` complete checkpoints under ``root``, and any
    unfinished save older than the oldest one kept; returns what was deleted. ``upto``: the
    step just saved; checkpoints of later steps (another run's, left in the folder) are neither
    counted nor deleted, so they never push this run's own newest ones out. ``jobs``: only
    those jobs' checkpoints are counted and deleted (this job's and the one it resumed from;
    another run's, left in the folder, are its own); none given or only "": every one. Safe to call from several processes on one shared folder (what another deleted first
    is skipped)."""
    if keep < 1:
        return []
    try:
        entries = [e for e in os.scandir(root) if e.is_dir() and STEP_DIR.match(e.name)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    steps = sorted(((int(STEP_DIR.match(e.name).group(1)), Path(e.path)) for e in entries), reverse=True)
    if upto is not None:
        steps = [(s, p) for s, p in steps if s <= upto]
    if jobs and jobs != {""}:
        named = saving_jobs(root)
        steps = [(s, p) for s, p in steps if named.get(p.name, saved_by(p)) in jobs]
    complete = [(s, p) for s, p in steps if is_complete(p)]
    if len(complete) <= keep:
        return []
    oldest_kept = complete[keep - 1][0]
    gone = [p for s, p in steps if s < oldest_kept]
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    return gone


def agree_on_latest(
    root: str | os.PathLike[str], device: torch.device, below: int | None = None, job: str | None = None
) -> Found | None:
    """:func:`find_latest` as rank 0 sees it, on every rank.

    Ranks listing the folder on their own could pick different steps (a slow shared file
    system) and then silently train from different states; rank 0 decides instead.
    """
    return agree_on(find_latest(root, below, job), root, device)


def agree_on(found: Found | None, root: str | os.PathLike[str], device: torch.device) -> Found | None:
    """Rank 0's ``found`` (a checkpoint under ``root``), on every rank (:func:`agree_on_latest`).
    Collective."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return found
    step = torch.tensor([found.step if found is not None else -1], dtype=torch.int64,
                        device=device)
    dist.broadcast(step, src=0)
    chosen = int(step.item())  # sync (GPU): once, before the first step
    if chosen < 0:
        return None
    path = step_path(root, chosen)
    if not is_complete(path):
        raise FileNotFoundError(
            f"rank 0 resumes from {path}, which this rank cannot read; "
            "--checkpoint-dir must be a folder every node shares"
        )
    return Found(chosen, path)


def on_every_rank(ok: bool, device: torch.device) -> bool:
    """True when ``ok`` (this rank's word) is true on every rank. A read that failed on one
    rank alone (its node's copy unreadable) must stop every rank at the same point: never
    leave them training from different states, or some in a collective the others never
    reach. Collective."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return ok
    failed = torch.tensor([0 if ok else 1], dtype=torch.int64, device=device)
    dist.all_reduce(failed, op=dist.ReduceOp.MAX)
    return int(failed.item()) == 0  # sync (GPU): once, before the first step


# -- RNG ---------------------------------------------------------------------------------------


def rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    """This process's CPU RNG state, and its GPU's when ``device`` is one."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"].cpu())
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)


def _rng_key(rank: int) -> str:
    # Per-rank key: DCP saves a plain tensor under a key all ranks share only once (rank 0's).
    return f"rng_rank{rank}"


# -- save --------------------------------------------------------------------------------------


def save(
    root: str | os.PathLike[str],
    progress: Progress,
    *,
    w: Wrapped,
    optimizer: torch.optim.Optimizer,
    rank: int,
    device: torch.device,
    job: str = "",
    origin: str = "",
) -> tuple[Path, float]:
    """Save the model, the optimizer, ``progress`` and this rank's RNG state after step
    ``progress.step``, in a folder naming ``job`` (:func:`job_id`) and ``origin``, the job it
    went on from (:func:`resumed_from`); returns (folder, seconds this rank spent). Collective
    for ddp/fsdp: every rank calls it at the same step."""
    t0 = time.perf_counter()
    path = step_path(root, progress.step)
    try:
        _save(path, progress, w=w, optimizer=optimizer, rank=rank, device=device, job=job, origin=origin)
    except (Exception, _dcp_error()) as exc:
        # torch says "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"
        # for a full disk: say what was being written, where, and how much room is left.
        raise CheckpointSaveError(f"checkpoint save to {path} failed: {one_line(exc)}{_room(path)}") from exc
    return path, time.perf_counter() - t0


class CheckpointSaveError(RuntimeError):
    """A checkpoint could not be written; the message names the folder and the room left."""


def _dcp_error() -> type[BaseException]:
    try:
        from torch.distributed.checkpoint.api import CheckpointException  # a BaseException
    except ImportError:
        return Exception
    return CheckpointException


def one_line(e: BaseException, limit: int = 200) -> str:
    """``e`` as one line; DCP's CheckpointException as the first rank's own error in it."""
    failures = getattr(e, "failures", None)
    if isinstance(failures, dict) and failures:
        rank = min(failures)
        inner = failures[rank][0] if isinstance(failures[rank], tuple) else None
        if isinstance(inner, BaseException):
            return f"rank {rank}: {one_line(inner, limit)}"
    text = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
    text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _room(path: Path) -> str:
    """'; N MiB free on its disk' (what a full disk looks like), or '' when unknown."""
    import shutil

    for p in (path, *path.parents):
        try:
            free = shutil.disk_usage(p).free
        except OSError:
            continue
        return f"; {free / (1 << 20):.1f} MiB free on its disk" + (" (full)" if free < (1 << 20) else "")
    return ""


def attention_heads(module: torch.nn.Module) -> int:
    """The attention heads of ``module``'s attention layers (0: it has none)."""
    from .models import CausalSelfAttention

    return next((m.n_head for m in module.modules() if isinstance(m, CausalSelfAttention)), 0)


def check_same_heads(saved: Progress, module: torch.nn.Module) -> None:
    """Raise ValueError when the checkpoint's model had another number of attention heads than
    ``module``. Its parameters have the same shapes, so the load would succeed and the run go
    on with another model than the one trained (each head's size is --n-embd / --n-head). The
    words "size mismatch" are those the resume tells another model by (``resume.OTHER_MODEL``):
    it stops, naming the model flags, as for another --n-embd."""
    from .models import CausalSelfAttention

    attn = next((m for m in module.modules() if isinstance(m, CausalSelfAttention)), None)
    if attn is None or not saved.n_head or saved.n_head == attn.n_head:
        return
    width = attn.proj.in_features
    raise ValueError(
        f"attention head size mismatch: the checkpoint's model has --n-head {saved.n_head} "
        f"(heads of {width // saved.n_head}), this one --n-head {attn.n_head} (heads of {width // attn.n_head})"
    )


def _save(path: Path, progress: Progress, *, w: Wrapped, optimizer: torch.optim.Optimizer, rank: int,
          device: torch.device, job: str, origin: str = "") -> None:
    progress = replace(progress, n_head=attention_heads(w.inner))
    if uses_dcp(w.strategy):
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        failed: OSError | None = None
        try:
            path.mkdir(parents=True, exist_ok=True)
            if rank == 0:
                # A folder saved before (a resumed run passing the same step again, perhaps with
                # another strategy) must not look complete while it is being rewritten. Other
                # ranks write only after DCP's first collective, which rank 0 reaches after this.
                (path / DCP_METADATA).unlink(missing_ok=True)
                (path / PLAIN_FILE).unlink(missing_ok=True)
                _name_job(path, job, origin)
        except OSError as exc:
            failed = exc
        # Every rank enters DCP's collectives or none does: a rank that could not prepare the
        # folder (a full disk, a node's own folder) would leave the others waiting in them
        # until the process group's timeout. Collective.
        if not on_every_rank(failed is None, device):
            raise failed or RuntimeError("another rank could not prepare the checkpoint folder")
        model_sd, optim_sd = get_state_dict(w.model, optimizer)
        state = {
            "model": model_sd,
            "optim": optim_sd,
            "progress": progress.to_tensors(),
            _rng_key(rank): rng_state(device),
        }
        dcp.save(state, checkpoint_id=str(path))  # sync (GPU): copies the state to the host
    else:
        state = {
            "model": w.inner.state_dict(),
            "optim": optimizer.state_dict(),
            "progress": progress.to_tensors(),
            _rng_key(0): rng_state(device),
        }
        # As above: a DCP save of this step by an earlier run must not outlive this one.
        path.mkdir(parents=True, exist_ok=True)
        (path / DCP_METADATA).unlink(missing_ok=True)
        _name_job(path, job, origin)
        tmp = path / (PLAIN_FILE + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path / PLAIN_FILE)


def _name_job(path: Path, job: str, origin: str = "") -> None:
    """Name the saving job, and the job it went on from, in ``path``, and count the save in the
    folder's order (:data:`ORDER_FILE`), before the save completes: a complete folder never
    names another job; an earlier job's names go when this job has none."""
    for name, value in ((JOB_FILE, job), (ORIGIN_FILE, origin if origin != job else "")):
        if value:
            (path / name).write_text(value + "\n")
        else:
            (path / name).unlink(missing_ok=True)
    (path / ORDER_FILE).write_text(f"{_next_order(path.parent)}\n")


# -- load --------------------------------------------------------------------------------------


def load(
    found: Found,
    *,
    w: Wrapped,
    optimizer: torch.optim.Optimizer,
    rank: int,
    device: torch.device,
) -> tuple[Progress, float, bool]:
    """Load ``found`` into the model and optimizer and restore this rank's RNG state;
    returns (progress, seconds, whether this rank's RNG state was in the checkpoint).
    Collective for ddp/fsdp."""
    t0 = time.perf_counter()
    key = _rng_key(rank)
    # What each rank reads on its own (DCP's metadata, the whole plain file) is read before any
    # collective, and every rank learns whether every other read it: one that failed alone
    # would otherwise wait in the resume's agreement on going back while the others wait in
    # DCP's or set_state_dict's collectives, until the process group timed out.
    dcp_format = saved_with_dcp(found.path, w.strategy)
    try:
        if dcp_format:
            from torch.distributed.checkpoint import FileSystemReader

            saved = FileSystemReader(str(found.path)).read_metadata().state_dict_metadata
        else:
            state = torch.load(found.path / PLAIN_FILE, map_location="cpu", weights_only=True)
        err = None
    except Exception as e:
        err = e
    if not on_every_rank(err is None, device):
        if err is not None:
            raise err
        raise RuntimeError(f"another rank could not read {found.path}")
    if dcp_format:
        state, has_rng = _load_dcp(found.path, saved, w=w, optimizer=optimizer, key=key, device=device)
    else:
        # Every rank read the same progress: all of them raise here, or none.
        check_same_heads(Progress.from_tensors(state["progress"]), w.inner)
        if uses_dcp(w.strategy):
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

            # Every rank holds the whole state: full_state_dict makes each keep its shard.
            set_state_dict(w.model, optimizer, model_state_dict=state["model"],
                           optim_state_dict=_optim_by_name(state["optim"], w.inner, optimizer),
                           options=StateDictOptions(full_state_dict=True))
        else:
            w.inner.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optim"])
        has_rng = key in state
    if has_rng:
        set_rng_state(state[key], device)
    return Progress.from_tensors(state["progress"]), time.perf_counter() - t0, has_rng


def _load_dcp(
    path: Path, saved: dict, *, w: Wrapped, optimizer: torch.optim.Optimizer, key: str, device: torch.device
) -> tuple[dict, bool]:
    """The DCP checkpoint in ``path`` (``saved``: its metadata's keys), loaded into the model
    and optimizer; (state, whether ``key``'s RNG state was in it). Without a process group
    (single, dp) DCP reads every shard in this process."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    # single/dp: the bare module, whose names DCP saved (DataParallel's would add "module.").
    module = w.model if uses_dcp(w.strategy) else w.inner
    # The optimizer must hold state to load into: get_state_dict creates it (a step with
    # zero gradients and lr 0, which changes no parameter).
    model_sd, optim_sd = get_state_dict(module, optimizer)
    state: dict = {"model": model_sd, "optim": optim_sd, "progress": Progress.blank_tensors(saved)}
    has_rng = f"{key}.cpu" in saved  # a rank the saving run did not have: none
    if has_rng:
        state[key] = rng_state(device)
        if device.type == "cuda" and f"{key}.cuda" not in saved:
            del state[key]["cuda"]
    with warnings.catch_warnings():
        # Without a process group (single, dp) torch warns that it "assumes the intent is to
        # load in a single process": it is the intent here, and the line read as a fault.
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized",
                                category=UserWarning)
        dcp.load(state, checkpoint_id=str(path))
    # The progress is read with the model (one collective read); before the model is set from it
    # (every rank read the same progress: all of them raise here, or none).
    check_same_heads(Progress.from_tensors(state["progress"]), w.inner)
    set_state_dict(module, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    return state, has_rng


def _optim_by_name(saved: dict, inner: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """A plain ``optimizer.state_dict()`` (parameters numbered in the optimizer's order) keyed
    by parameter name instead, as :func:`set_state_dict` takes it. The numbering is the order of
    ``model.parameters()``, the same in the saving run as in this one, whatever the wrapper."""
    names = {id(p): name for name, p in inner.named_parameters()}
    ours = [p for group in optimizer.param_groups for p in group["params"]]
    numbers = [i for group in saved["param_groups"] for i in group["params"]]
    if len(numbers) != len(ours):
        raise ValueError(
            f"the checkpoint's optimizer holds {len(numbers)} parameters, this model "
            f"{len(ours)}; resume with the model flags the checkpoint was saved with"
        )
    name_of = {i: names[id(p)] for i, p in zip(numbers, ours)}
    return {
        "state": {name_of[i]: s for i, s in saved["state"].items()},
        "param_groups": [{**g, "params": [name_of[i] for i in g["params"]]}
                         for g in saved["param_groups"]],
    }


__all__ = [
    "Found",
    "Progress",
    "agree_on",
    "agree_on_latest",
    "attention_heads",
    "check_same_heads",
    "find_latest",
    "last_saved",
    "newest_job",
    "next_to_try",
    "saving_job",
    "saving_jobs",
    "is_complete",
    "load",
    "on_every_rank",
    "rng_state",
    "save",
    "saved_with_dcp",
    "set_rng_state",
    "step_path",
    "uses_dcp",
]
