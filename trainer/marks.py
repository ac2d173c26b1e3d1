"""A step as :class:`pardash.trainer.instrument.Instrument` measures it: the clock its marks
are stamped with, the open step, where an optimizer's post-hook may cut it, the loader pass its
batches came from, the finished step waiting to be published, and its memory over several
optimizers' posts."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgspec
import torch

from pardash.telemetry import api

class _Clock:
    """Stamps: ``perf_counter`` seconds on CPU, recorded CUDA events on a GPU (no waiting)."""

    def __init__(self, cuda: bool = False) -> None:
        self.cuda = cuda
        if not cuda:
            # perf_counter itself, no Python frame: several stamps a step, each hook's
            self.stamp = time.perf_counter  # type: ignore[method-assign]

    def stamp(self) -> Any:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def seconds(self, a: Any, b: Any) -> float:
        """From stamp a to stamp b (CUDA: both events must have completed)."""
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a


@dataclass(slots=True)
class _OpenStep:
    """What the step being measured has seen so far."""

    marks: list[tuple[str, Any]]
    """(phase entered, stamp), in order; the first is ("data", end of the previous step)."""
    losses: list[Any] = field(default_factory=list)
    """Detached loss of each micro-batch."""
    micro: int = 0
    """Backward passes (each one's, an autograd.grad of the parameters too)."""
    passes: list[tuple[int, tuple[tuple[int, int], ...]]] = field(default_factory=list)
    """For each backward: (optimizer steps ended before it, (root id, its training forwards
    begun since the backward before it) of each root): the step's micro-batches (see
    :func:`micro_batches`)."""
    samples: int = 0
    arrive: Any = None
    """Stamp of the arrival at the first collective (None: not seen)."""
    syncs: list[tuple[Any, Any]] = field(default_factory=list)
    """(start, end) stamps of the waits in collectives of the script's own between steps (a
    barrier after the optimizer step, a metric's all_reduce before the forward): waiting for
    the other ranks, neither the rank's self time nor its data loading (see
    Arrivals._wrap_collective)."""
    lr: float | None = None
    """The first optimizer's learning rate as its step began (a scheduler changes it after)."""
    lrs: tuple[float, ...] | None = None
    """That optimizer's other parameter groups' learning rates then (None: it has one group;
    see :mod:`pardash.trainer.norms`)."""
    grad_norms: list[tuple[int, Any]] | None = None
    """(marks then, tensor) of each ``clip_grad_norm_`` in the step: the total gradient norm
    it returned, read as the step is published, the last one's (None: none clipped). A cut
    at an optimizer's post-hook gives those after it to the next step, as its marks."""
    waits: list[tuple[Any, Any]] = field(default_factory=list)
    """FSDP2: (start, end) stamps of each sharded module's pre-forward in the step, where it
    waits for its parameters' all-gather (and so for the ranks behind it)."""
    lead_s: float = 0.0
    """Seconds of the step's data phase before its first mark, its own work (the first batch
    asked for before the clock turned to CUDA events, which cannot be stamped in the past)."""
    lead_wait_s: float = 0.0
    """Seconds of that lead spent waiting in collectives between steps (as ``syncs``)."""
    loader_s: float | None = None
    """Seconds of its data phases spent inside a DataLoader (its iterators' ``__next__``,
    ``iter(loader)``); None: no DataLoader was asked for a batch in them (see
    Epochs._loader_leaves)."""


@dataclass(slots=True)
class _Between:
    """Collectives of the script's own called after a backward returned, before any other pass
    or optimizer step (see Arrivals._between_passes): waits between two micro-batches if another
    pass follows (PyTorch Lightning broadcasts at every batch), else the step's arrival, as
    before the optimizer step."""

    backward_end: Any
    """The return of the backward they came after (the stamp object itself)."""
    posts: int
    """Optimizer steps ended when they began (another since: they came before it)."""
    arrive: Any
    """The arrival their first one noted, None if the step had arrived before."""
    spans: list[tuple[Any, Any]] = field(default_factory=list)
    """(start, end) stamps of their waits."""


@dataclass(slots=True, frozen=True)
class _Cut:
    """Where the open step stood at an optimizer's post-hook: where it ends if its round of
    optimizer steps ends there (known only later: when an optimizer of the round steps again,
    or at exit). What came after belongs to the next step."""

    end: Any
    marks: int
    losses: int
    micro: int
    samples: int
    waits: int
    logged: api.Logged
    """What the script logged (``pt.log`` without step blocks) up to the cut, taken from the
    API there, and what it logs after, until the next step begins (added then): the step's,
    though it is published later (what is logged once the next began is the next's)."""
    t: float | None = None
    """The wall clock at the cut (and ``mono``, the monotonic one's): its step's record's time,
    published later (a GAN's step, read at the next round's end, carried that time, and its last
    step the script's exit: its rate 12 times too low)."""
    mono: float | None = None


@dataclass(slots=True)
class _Done:
    """A finished step, resolved when published (one step late on a GPU)."""

    step: int
    epoch: int
    open: _OpenStep
    end: Any
    lr: float | None
    mem: Any
    logged: api.Logged
    t: float | None = None
    """The wall clock when it ended (its record's ``t``; with ``mono``, the monotonic clock's):
    a step sent later than it ended (held for what is logged after it, or a GPU's timings) was
    stamped when sent, so a script's work after its last step read as that step's time
    ("training 9.1 s" of a run of 0.05 s, its rate 200 times too low)."""
    mono: float | None = None


def _most_held(before: Any, now: Any) -> Any:
    """A step's memory over its optimizers' posts: the latest figures (the optimizer state
    grows as each steps), with the most gradients held at any post and the highest peak. Where
    each optimizer zeroes its gradients after its own step, the first post held them all."""
    if before is None or now is None:
        return now if now is not None else before
    peaks = [p for p in (before.cuda_peak_bytes, now.cuda_peak_bytes) if p is not None]
    return msgspec.structs.replace(
        now,
        grads_bytes=max(before.grads_bytes, now.grads_bytes),
        grads_full_bytes=max(before.grads_full_bytes, now.grads_full_bytes),
        buckets_bytes=max(before.buckets_bytes, now.buckets_bytes),
        cuda_peak_bytes=max(peaks) if peaks else None,
    )


def micro_batches(passes: list[tuple[int, tuple[tuple[int, int], ...]]]) -> int:
    """The step's micro-batches: forward passes of a trained model with a backward each, in
    the most of any stretch between two optimizer steps (gradient accumulation: 4 forwards of
    the model, 4 backwards). A second backward of the same forward's graph (gradient surgery, a
    regulariser's loss on the weights) has no forward of its own, and a GAN's discriminator,
    called again for the generator's loss, has it after the discriminator's optimizer step:
    neither is another micro-batch (both read "micro_batches 2", as accumulation). Each stretch
    counts, for the model forwarded most, the fewer of its forwards and of the backwards (a
    siamese model's two forwards a backward are one micro-batch)."""
    most = 0
    i, n = 0, len(passes)
    while i < n:
        posts = passes[i][0]
        forwards: dict[int, int] = {}
        backwards = 0
        while i < n and passes[i][0] == posts:
            backwards += 1
            for root, k in passes[i][1]:
                forwards[root] = forwards.get(root, 0) + k
            i += 1
        most = max(most, min(backwards, max(forwards.values(), default=1)))
    return most
