"""The bundled trainer's configuration: one dataclass, one flag set.

``pardash launch`` and the rank entry (``python -m pardash.trainer.train``) share the flags:
the CLI calls :func:`add_arguments` on its parser, builds a :class:`TrainConfig` with
:func:`from_args`, and passes :meth:`TrainConfig.to_argv` on to every rank through torchrun.
Every rule lives in ``__post_init__`` (and :meth:`TrainConfig.check_world_size` for the rules
that need the world size), each raising a one-line :class:`ValueError` that says what to do.
:func:`from_args` also checks the one path on disk, ``--checkpoint-dir``
(:func:`check_checkpoint_dir`), so a config built in code touches no disk.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Sequence

STRATEGIES = ("single", "dp", "ddp", "fsdp")
DEVICES = ("auto", "cpu", "cuda")
MODELS = ("gpt", "mlp")
PRECISIONS = ("fp32", "bf16")
STRAGGLER_KINDS = ("data", "compute")
LR_SCHEDULES = ("constant", "cosine")
DEFAULT_STEPS = 200
"""Steps run when neither --steps nor --epochs is given."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Straggler:
    """A rank made slow on purpose: ``RANK:KIND:SECONDS``."""

    rank: int
    """The rank that is slowed."""
    kind: str
    """``data``: sleep in the data phase; ``compute``: busy work in the forward of the model's
    last block."""
    seconds: float
    """Extra time per step."""

    @classmethod
    def parse(cls, text: str) -> "Straggler":
        parts = text.split(":")
        if len(parts) != 3:
            raise ValueError(
                f"--inject-straggler {text!r}: expected RANK:KIND:SECONDS, e.g. 1:data:0.05"
            )
        rank_s, kind, seconds_s = parts
        try:
            rank, seconds = int(rank_s), float(seconds_s)
        except ValueError:
            raise ValueError(
                f"--inject-straggler {text!r}: RANK must be an integer and SECONDS a number, "
                "e.g. 1:compute:0.05"
            ) from None
        return cls(rank=rank, kind=kind, seconds=seconds)

    def __str__(self) -> str:
        return f"{self.rank}:{self.kind}:{self.seconds!r}"


STALL_TOLD_S = 8.0
"""About how long a stalled rank goes before the hub calls it stalled: its shortest wait
(analysis.LivenessConfig.stall_min_s, 5 s; not imported here, for the ranks' start-up), and the
heartbeats that tell it (one a second)."""
MAX_PG_TIMEOUT_S = 365 * 86400.0
"""The longest --pg-timeout-s: a year is "never" to a training job, and torch's timedelta and
C++ milliseconds take it."""
MAX_SEED = 2**63 - 2**31
"""The largest --seed: torch's generators take a signed 64-bit seed, and the data sampler adds
the epoch to it."""
MAX_STRAGGLER_S = 86400.0
"""The longest delay --inject-straggler injects a step: a day."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankStep:
    """A fault that hits one rank at one step: ``RANK@STEP``."""

    rank: int
    """The rank the fault hits."""
    step: int
    """The optimizer step (counted from 1) at which it hits."""

    @classmethod
    def parse(cls, text: str, *, flag: str) -> "RankStep":
        rank_s, sep, step_s = text.partition("@")
        try:
            if not sep:
                raise ValueError
            return cls(rank=int(rank_s), step=int(step_s))
        except ValueError:
            raise ValueError(f"{flag} {text!r}: expected RANK@STEP, e.g. 1@50") from None

    def __str__(self) -> str:
        return f"{self.rank}@{self.step}"


@dataclass(kw_only=True, slots=True)
class TrainConfig:
    """Everything one run of the bundled trainer needs; identical on every rank."""

    # -- parallelism and device --------------------------------------------------------------
    strategy: str = "ddp"
    """single | dp (nn.DataParallel) | ddp (DistributedDataParallel) | fsdp (FSDP2 fully_shard)."""
    device: str = "auto"
    """auto (cuda when a GPU is visible, else cpu) | cpu | cuda."""
    precision: str = "fp32"
    """fp32 | bf16 (bf16 needs cuda: autocast, or FSDP2's MixedPrecisionPolicy)."""
    reshard_after_forward: bool = True
    """FSDP2: free the all-gathered parameters after forward (ZeRO-3) instead of keeping them
    until backward (ZeRO-2 like). Ignored by the other strategies."""
    pg_timeout_s: float = 1800.0
    """Timeout of the process group's collectives, seconds (torch's default for gloo)."""

    # -- model -------------------------------------------------------------------------------
    model: str = "gpt"
    """gpt (a small decoder-only transformer) | mlp (a residual MLP classifier)."""
    n_layer: int = 2
    """gpt: number of transformer blocks."""
    n_embd: int = 64
    """gpt: embedding width."""
    n_head: int = 4
    """gpt: attention heads; must divide n_embd."""
    vocab: int = 64
    """gpt: vocabulary size of the synthetic token stream."""
    seq_len: int = 32
    """gpt: tokens per sample (the context length)."""
    tie_weights: bool = True
    """gpt: share the token embedding with the output head."""
    hidden: int = 256
    """mlp: width of the hidden blocks."""
    depth: int = 4
    """mlp: number of hidden blocks."""
    in_dim: int = 32
    """mlp: input features."""
    n_classes: int = 8
    """mlp: classes the teacher network assigns."""

    # -- schedule ----------------------------------------------------------------------------
    steps: int | None = None
    """Optimizer steps to run, cycling epochs as needed (200 when --epochs is not given)."""
    epochs: int | None = None
    """Passes over the dataset instead of a step count."""
    batch_size: int = 16
    """Samples per micro-batch per rank (dp: per process, split across its GPUs)."""
    grad_accum: int = 1
    """Micro-batches per optimizer step; DDP all-reduces gradients on the last one only, FSDP
    reduce-scatters each (its gradients stay sharded)."""
    lr: float = 3e-3
    """Peak learning rate of AdamW."""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay."""
    warmup_steps: int = 0
    """Steps of linear warm-up from 0 to lr."""
    lr_schedule: str = "cosine"
    """constant | cosine (decay from lr to lr/10 over the run after warm-up)."""
    grad_clip: float = 0.0
    """Clip the global gradient norm to this (0: off)."""
    seed: int = 1337
    """Seeds model init (identical on every rank) and the data and its order."""

    # -- data --------------------------------------------------------------------------------
    dataset_size: int = 8192
    """Samples in the synthetic dataset (shared by all ranks; each sees 1/world of it)."""
    noise: float = 0.1
    """Probability that a synthetic token or label is replaced by a random one."""

    # -- output ------------------------------------------------------------------------------
    log_every: int = 10
    """Rank 0 prints the loss every this many steps (0: never)."""

    # -- checkpoints -------------------------------------------------------------------------
    checkpoint_dir: str | None = None
    """Folder for checkpoints, one step-NNNNNNNN folder each (ddp and fsdp save with
    torch.distributed.checkpoint, every rank its own shard: on several nodes, a shared folder)."""
    checkpoint_every: int | None = None
    """Save every this many steps (default: only at the end of the run); needs
    --checkpoint-dir."""
    checkpoint_keep: int = 0
    """Keep only the newest this many checkpoints, deleting older ones after each save (0:
    keep every one). Counted over this run's saves and those of the run it resumed from (K
    in all, not K a resume); other runs' checkpoints in the folder are never deleted."""
    resume: bool | None = None
    """Continue from the newest checkpoint in --checkpoint-dir (start afresh when there is
    none): model, optimizer, step, data order, learning rate schedule and RNG state. One that
    cannot be read is named and the one before it is used. After a torchrun restart
    (--max-restarts) the run resumes without it, from the newest checkpoint this job saved;
    --no-resume starts every restart over at step 1."""

    # -- fault injection (for straggler / stall / crash detection) ---------------------------
    inject_straggler: Straggler | None = None
    """RANK:KIND:SECONDS: that rank spends SECONDS more per step, sleeping in its data
    phase (data) or busy computing in the forward of the model's last block (compute: SECONDS
    of its own CPU time on a CPU, more by the clock on a host busy with other work)."""
    inject_stall: RankStep | None = None
    """RANK@STEP: that rank blocks forever in the data phase of STEP (heartbeats go on), on
    the first attempt only (not after a torchrun restart): --pg-timeout-s ends the hang, and
    --max-restarts 1 shows the job recover."""
    inject_crash: RankStep | None = None
    """RANK@STEP: that rank raises at STEP and exits with code 1, on the first attempt only
    (not after a torchrun restart), so --max-restarts 1 --checkpoint-dir DIR --checkpoint-every N
    shows the job recover from its last checkpoint."""

    def __post_init__(self) -> None:
        # Faults may arrive as their flag text (from argparse or a dict).
        if isinstance(self.inject_straggler, str):
            self.inject_straggler = Straggler.parse(self.inject_straggler)
        if isinstance(self.inject_stall, str):
            self.inject_stall = RankStep.parse(self.inject_stall, flag="--inject-stall")
        if isinstance(self.inject_crash, str):
            self.inject_crash = RankStep.parse(self.inject_crash, flag="--inject-crash")

        _choice("--strategy", self.strategy, STRATEGIES)
        _choice("--device", self.device, DEVICES)
        _choice("--model", self.model, MODELS)
        _choice("--precision", self.precision, PRECISIONS)
        _choice("--lr-schedule", self.lr_schedule, LR_SCHEDULES)
        if self.precision == "bf16" and self.device == "cpu":
            raise ValueError(
                "--precision bf16 needs a GPU; use --precision fp32 with --device cpu"
            )

        if self.steps is not None and self.epochs is not None:
            raise ValueError("give --steps or --epochs, not both")
        if self.steps is None and self.epochs is None:
            self.steps = DEFAULT_STEPS
        for flag, value in (
            ("--steps", self.steps),
            ("--epochs", self.epochs),
            ("--batch-size", self.batch_size),
            ("--grad-accum", self.grad_accum),
            ("--n-layer", self.n_layer),
            ("--n-embd", self.n_embd),
            ("--n-head", self.n_head),
            ("--hidden", self.hidden),
            ("--depth", self.depth),
            ("--in-dim", self.in_dim),
            ("--dataset-size", self.dataset_size),
        ):
            if value is not None and value < 1:
                raise ValueError(f"{flag} must be at least 1, got {value}")
        for flag, value, least in (("--vocab", self.vocab, 2), ("--seq-len", self.seq_len, 2),
                                   ("--n-classes", self.n_classes, 2)):
            if value < least:
                raise ValueError(f"{flag} must be at least {least}, got {value}")
        for flag, value in (
            ("--warmup-steps", self.warmup_steps),
            ("--weight-decay", self.weight_decay),
            ("--grad-clip", self.grad_clip),
            ("--log-every", self.log_every),
        ):
            # (NaN passed "not negative": --grad-clip nan trained on to a loss of nan, and
            # --weight-decay nan died in AdamW's constructor on every rank)
            if not (value >= 0 and (isinstance(value, int) or math.isfinite(value))):  # (a 400-digit int overflows isfinite)
                raise ValueError(f"{flag} must be 0 or more, got {value}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"--lr must be a positive number, got {self.lr}")
        if not (0 < self.pg_timeout_s <= MAX_PG_TIMEOUT_S):
            # (inf, or 1e15, died in each rank's timedelta or in torch's C++ int: "never" is a year)
            raise ValueError(f"--pg-timeout-s must be positive and at most {MAX_PG_TIMEOUT_S:.0f} (a year), got {self.pg_timeout_s}")
        if not (0 <= self.seed <= MAX_SEED):
            # (torch takes seeds below 2**64 and folds the others; the sampler adds the epoch to
            # it: 2**64 - 1 trained epoch 0 and died as epoch 1 began, "Overflow when unpacking")
            raise ValueError(f"--seed must be from 0 to {MAX_SEED}, got {self.seed}")
        if not (0.0 <= self.noise < 1.0):
            raise ValueError(f"--noise is a probability in [0, 1), got {self.noise}")
        if self.checkpoint_dir is not None and not self.checkpoint_dir.strip():
            raise ValueError("--checkpoint-dir is empty; name a folder, e.g. --checkpoint-dir ckpt")
        if self.checkpoint_every is not None:
            if self.checkpoint_every < 1:
                raise ValueError(
                    f"--checkpoint-every must be at least 1, got {self.checkpoint_every}"
                )
            if self.checkpoint_dir is None:
                raise ValueError("--checkpoint-every needs --checkpoint-dir DIR to save into")
        if self.checkpoint_keep < 0:
            raise ValueError(f"--checkpoint-keep must not be negative, got {self.checkpoint_keep}")
        if self.checkpoint_keep and self.checkpoint_dir is None:
            raise ValueError("--checkpoint-keep needs --checkpoint-dir DIR")
        if self.resume and self.checkpoint_dir is None:
            raise ValueError("--resume needs --checkpoint-dir DIR to resume from")
        if self.n_embd % self.n_head:
            raise ValueError(
                f"--n-embd {self.n_embd} is not divisible by --n-head {self.n_head}; "
                "pick a head count that divides the width"
            )

        s = self.inject_straggler
        if s is not None:
            if s.rank < 0:
                raise ValueError(f"--inject-straggler {s}: RANK must not be negative")
            if s.kind not in STRAGGLER_KINDS:
                raise ValueError(
                    f"--inject-straggler {s}: KIND must be one of {', '.join(STRAGGLER_KINDS)}"
                )
            if not (math.isfinite(s.seconds) and 0 < s.seconds <= MAX_STRAGGLER_S):
                # (1e300 died in the rank's sleep: "timestamp out of range")
                raise ValueError(f"--inject-straggler {s}: SECONDS must be a positive number, at most {MAX_STRAGGLER_S:.0f}")
        for flag, fault in (("--inject-stall", self.inject_stall),
                            ("--inject-crash", self.inject_crash)):
            if fault is None:
                continue
            if fault.rank < 0:
                raise ValueError(f"{flag} {fault}: RANK must not be negative")
            if fault.step < 1:
                raise ValueError(f"{flag} {fault}: STEP counts from 1")
            if self.steps is not None and fault.step > self.steps:
                raise ValueError(
                    f"{flag} {fault}: step {fault.step} is past --steps {self.steps}, "
                    "so the fault would never fire; pick an earlier step"
                )

    def start_notes(self, total_steps: int, world_size: int) -> list[str]:
        """What a run of this config should be told as it starts (a warning each): settings
        that run, but not as their user likely means."""
        notes = []
        if self.warmup_steps > total_steps > 0:
            notes.append(f"--warmup-steps {self.warmup_steps} is longer than the run's {total_steps} steps: the learning "
                         f"rate never reaches --lr {self.lr:g}")
        if world_size > 1 and self.pg_timeout_s < STALL_TOLD_S:
            # (--inject-stall 1@5 --pg-timeout-s 5 named rank 0, whose timeout fired first, the
            # cause, and the stalled rank 1 "stopped")
            notes.append(f"--pg-timeout-s {self.pg_timeout_s:g} is shorter than the {STALL_TOLD_S:.0f} s or so the hub takes to "
                         "call a rank stalled (8 steps' time, where steps are slower): a hang ends in a timeout first, "
                         "and the rank whose timeout fires first reads as its cause")
        return notes

    # -- rules that need the job's shape -----------------------------------------------------

    def check_world_size(self, world_size: int) -> None:
        """Raise ValueError when this config cannot run on ``world_size`` ranks."""
        if self.strategy in ("single", "dp") and world_size > 1:
            raise ValueError(
                f"--strategy {self.strategy} runs one process, not {world_size}; "
                "use --nproc 1, or --strategy ddp/fsdp for several ranks"
            )
        for flag, fault in (
            ("--inject-straggler", self.inject_straggler),
            ("--inject-stall", self.inject_stall),
            ("--inject-crash", self.inject_crash),
        ):
            if fault is not None and fault.rank >= world_size:
                raise ValueError(
                    f"{flag} {fault}: rank {fault.rank} does not exist in a world of "
                    f"{world_size}; pick a rank below {world_size}"
                )
        need = self.batch_size * self.grad_accum * world_size
        if self.dataset_size < need:
            raise ValueError(
                f"--dataset-size {self.dataset_size} is smaller than one step over all ranks "
                f"(batch {self.batch_size} x grad-accum {self.grad_accum} x {world_size} ranks); "
                f"raise it to at least {need}"
            )
        if self.steps is None:  # --epochs: the run's length is known now (as data.steps_per_epoch counts it)
            total = (self.epochs or 1) * (self.dataset_size // world_size // self.batch_size // self.grad_accum)
            for flag, fault in (("--inject-stall", self.inject_stall), ("--inject-crash", self.inject_crash)):
                if fault is not None and fault.step > total:
                    raise ValueError(
                        f"{flag} {fault}: step {fault.step} is past the run's last, {total} "
                        f"(--epochs {self.epochs or 1} of {total // (self.epochs or 1)} steps), "
                        "so the fault would never fire; pick an earlier step"
                    )

    # -- conversions -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (faults as their flag text), e.g. for the hello message."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = str(value) if isinstance(value, (Straggler, RankStep)) else value
        return out

    def to_argv(self) -> list[str]:
        """The flags that rebuild this config (only those that differ from the defaults)."""
        argv: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "steps" and self.epochs is None and value == DEFAULT_STEPS:
                continue
            if value is None or value == f.default:
                continue
            flag = _flag(f.name)
            if isinstance(value, bool):
                argv.append(flag if value else "--no-" + flag[2:])
            elif isinstance(value, float):
                argv += [flag, repr(value)]
            else:
                argv += [flag, str(value)]
        return argv


def _choice(flag: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{flag} {value!r} is not one of: {', '.join(choices)}")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# -- argparse ------------------------------------------------------------------------------

_CHOICES = {
    "strategy": STRATEGIES,
    "device": DEVICES,
    "model": MODELS,
    "precision": PRECISIONS,
    "lr_schedule": LR_SCHEDULES,
}
_METAVARS = {
    "inject_straggler": "RANK:KIND:SECONDS",
    "inject_stall": "RANK@STEP",
    "inject_crash": "RANK@STEP",
    "checkpoint_dir": "DIR",
    "checkpoint_every": "STEPS",
}


def _first_line(doc: str | None) -> str:
    return " ".join((doc or "").split())


def _field_docs() -> dict[str, str]:
    """Field docstrings, read from this module's source (dataclass fields keep none)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(TrainConfig))
    docs: dict[str, str] = {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    for node, nxt in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = _first_line(nxt.value.value)
    return docs


class _OneFault(argparse.Action):
    """An --inject-* flag given twice is refused: the last one alone was kept, the first fault
    dropped without a word (``--inject-crash 0@3 --inject-crash 1@4`` crashed rank 1 only)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None) -> None:
        before = getattr(namespace, self.dest, None)
        if before is not None and before != self.default:
            parser.error(f"{option} given twice ({before} and {values}): a run takes one fault of each kind")
        setattr(namespace, self.dest, values)


def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add every TrainConfig flag (``--strategy``, ``--steps``, ...) to ``parser``.

    Defaults are the dataclass defaults, so ``--help`` shows them; ``--steps`` and ``--epochs``
    default to None (see :attr:`TrainConfig.steps`).
    """
    try:
        docs = _field_docs()
    except (OSError, TypeError, SyntaxError):  # no source (frozen app): flags without help
        docs = {}
    for f in dataclasses.fields(TrainConfig):
        help_text = docs.get(f.name, "").replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": f.name, "default": f.default}
        if f.name in ("steps", "epochs", "checkpoint_every"):
            kwargs["type"] = int
            kwargs["default"] = None
            kwargs["metavar"] = _METAVARS.get(f.name)
        elif f.name in _METAVARS:
            kwargs["type"] = str
            kwargs["metavar"] = _METAVARS[f.name]
            if f.name.startswith("inject_"):
                kwargs["action"] = _OneFault
        elif isinstance(f.default, bool) or f.name == "resume":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif f.name in _CHOICES:
            kwargs["choices"] = _CHOICES[f.name]
        else:
            kwargs["type"] = type(f.default)
        if "action" not in kwargs and kwargs["default"] is not None:
            help_text += " (default: %(default)s)"
        elif f.name == "resume":
            help_text += " (default: only after a torchrun restart)"
        elif "action" in kwargs:
            help_text += f" (default: {'on' if f.default else 'off'})"
        kwargs["help"] = help_text
        parser.add_argument(_flag(f.name), **kwargs)


def from_args(ns: argparse.Namespace) -> TrainConfig:
    """Build a TrainConfig from a namespace :func:`add_arguments` filled (other attributes of
    the namespace are ignored), and create and test ``--checkpoint-dir``. Raises ValueError
    with a one-line reason."""
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    cfg = TrainConfig(**{n: getattr(ns, n) for n in names if hasattr(ns, n)})
    if cfg.checkpoint_dir is not None:
        check_checkpoint_dir(cfg.checkpoint_dir)
    return cfg


def check_checkpoint_dir(path: str) -> None:
    """Create the folder ``path`` if it is missing and write a file in it; raise ValueError
    (one line) when either fails, or when ``path`` is one checkpoint's own folder rather than
    the folder of checkpoints (:func:`_one_checkpoint`): the error names its parent.

    Checked before anything starts, like the log path: otherwise the first save finds out
    only after --checkpoint-every steps of training, and --resume on a file finds "no
    checkpoint" and starts afresh. The test file's name is unique: several ranks check at once.
    """
    import os
    import tempfile

    one = _one_checkpoint(path)
    if one is not None:
        step, parent = one
        raise ValueError(
            f"--checkpoint-dir {path} is one checkpoint (step {step}) of the folder {parent}, not a "
            f"folder of checkpoints; give that folder: --checkpoint-dir {parent}"
        )
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".pardash-write-test-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except FileExistsError:  # makedirs: something other than a folder holds the name
        raise ValueError(
            f"--checkpoint-dir {path} exists and is not a folder; name a folder to save "
            "checkpoints in"
        ) from None
    except OSError as exc:
        raise ValueError(
            f"--checkpoint-dir {path}: cannot write there ({exc.strerror or exc}); "
            "name a writable folder"
        ) from None


_STEP_FOLDER = re.compile(r"^step-(\d+)$")
"""A checkpoint's own folder's name (:data:`.checkpoint.STEP_DIR`; kept here too, since the CLI
checks the flags without importing torch, which :mod:`.checkpoint` does)."""
_CHECKPOINT_FILES = (".metadata", "state.pt", "job")
"""Files only a checkpoint's own folder holds (DCP's metadata, the plain file, the saving job)."""


def _one_checkpoint(path: str) -> tuple[int, str] | None:
    """(its step, its parent folder) when ``path`` is one checkpoint's own folder, such as
    ``ckpt/step-00000030``: --resume would find no checkpoint in it and start at step 1, and
    the saves would go inside it (``ckpt/step-00000030/step-00000040``). None otherwise."""
    import os

    name = os.path.basename(os.path.normpath(path))
    m = _STEP_FOLDER.match(name)
    if m is None or not os.path.isdir(path):
        return None
    try:
        held = os.listdir(path)
    except OSError:
        return None
    if not any(f in _CHECKPOINT_FILES or f.endswith(".distcp") for f in held):
        return None
    return int(m.group(1)), os.path.dirname(os.path.normpath(path)) or "."


def parse_args(argv: Sequence[str] | None = None, *, prog: str | None = None) -> TrainConfig:
    """Parse trainer flags; a bad value exits with argparse's one-line usage error (code 2)."""
    parser = argparse.ArgumentParser(prog=prog, description="The pardash bundled trainer.")
    add_arguments(parser)
    ns = parser.parse_args(argv)
    try:
        return from_args(ns)
    except ValueError as e:
        parser.error(str(e))
        raise  # unreachable: parser.error exits


__all__ = [
    "TrainConfig",
    "Straggler",
    "RankStep",
    "add_arguments",
    "check_checkpoint_dir",
    "from_args",
    "parse_args",
    "STRATEGIES",
    "DEVICES",
    "MODELS",
    "PRECISIONS",
    "DEFAULT_STEPS",
]
