"""Synthetic data the models can learn, made locally and deterministically from a seed.

- gpt: token sequences that follow a hidden rule, ``next = (a * tok + b) % vocab``, except that
  with probability ``noise`` a token is replaced by a random one (and the rule continues from
  it). Cross-entropy starts at about ln(vocab) and falls towards the noise floor within a few
  dozen steps.
- mlp: Gaussian features labelled by a fixed random teacher network (argmax of its logits),
  each label replaced by a random class with probability ``noise``.

Every rank builds the same dataset from the seed; a :class:`DistributedSampler` gives each rank
its own share and order, reshuffled every epoch by ``set_epoch``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from .config import TrainConfig


class TokenRuleDataset(Dataset):
    """Sequences of ``seq_len + 1`` tokens following ``next = (a*tok + b) % vocab`` with noise;
    item i is (tokens[:-1], tokens[1:])."""

    def __init__(self, *, size: int, seq_len: int, vocab: int, noise: float, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        # An odd multiplier (a permutation when vocab is a power of two) and an offset, both
        # hidden in the seed.
        self.a = int(torch.randint(1, max(2, vocab // 2), (1,), generator=g)) * 2 + 1
        self.b = int(torch.randint(0, vocab, (1,), generator=g))
        tokens = torch.empty(size, seq_len + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(0, vocab, (size,), generator=g)
        for t in range(1, seq_len + 1):
            follow = (self.a * tokens[:, t - 1] + self.b) % vocab
            random = torch.randint(0, vocab, (size,), generator=g)
            flip = torch.rand(size, generator=g) < noise
            tokens[:, t] = torch.where(flip, random, follow)
        self.tokens = tokens

    def __len__(self) -> int:
        return self.tokens.size(0)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        row = self.tokens[i]
        return row[:-1], row[1:]


class TeacherDataset(Dataset):
    """Features x ~ N(0, 1) labelled by a fixed random two-layer teacher, with label noise."""

    def __init__(
        self, *, size: int, in_dim: int, n_classes: int, noise: float, seed: int,
        teacher_hidden: int = 64,
    ) -> None:
        g = torch.Generator().manual_seed(seed)
        w1 = torch.randn(in_dim, teacher_hidden, generator=g) / in_dim**0.5
        w2 = torch.randn(teacher_hidden, n_classes, generator=g) / teacher_hidden**0.5
        x = torch.randn(size, in_dim, generator=g)
        labels = (torch.tanh(x @ w1) @ w2).argmax(dim=1)
        random = torch.randint(0, n_classes, (size,), generator=g)
        flip = torch.rand(size, generator=g) < noise
        self.x = x
        self.y = torch.where(flip, random, labels)

    def __len__(self) -> int:
        return self.x.size(0)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def build_dataset(cfg: TrainConfig) -> Dataset:
    """The dataset for ``cfg.model``, identical on every rank (it depends on the seed only)."""
    if cfg.model == "gpt":
        return TokenRuleDataset(
            size=cfg.dataset_size, seq_len=cfg.seq_len, vocab=cfg.vocab, noise=cfg.noise,
            seed=cfg.seed,
        )
    return TeacherDataset(
        size=cfg.dataset_size, in_dim=cfg.in_dim, n_classes=cfg.n_classes, noise=cfg.noise,
        seed=cfg.seed,
    )


def build_loader(
    dataset: Dataset, cfg: TrainConfig, *, rank: int, world_size: int, pin_memory: bool = False
) -> tuple[DataLoader, DistributedSampler]:
    """A loader over this rank's share of ``dataset``.

    All strategies use a DistributedSampler (one replica for single and dp), so the order is a
    function of (seed, epoch, rank) alone. ``drop_last`` everywhere keeps every rank at the
    same number of batches per epoch: a rank with one batch more would wait in a collective
    that the others never join. ``pin_memory`` (for a GPU) lets batches copy to the device
    asynchronously.
    """
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=cfg.seed, drop_last=True
    )
    # num_workers=0: the batches are slices of an in-memory tensor; worker processes would
    # only add start-up time and compete for the same cores as the ranks.
    loader = DataLoader(
        dataset, batch_size=cfg.batch_size, sampler=sampler, drop_last=True, pin_memory=pin_memory
    )
    return loader, sampler


@dataclass(slots=True, kw_only=True)
class StepBatches:
    """The micro-batches of one optimizer step."""

    epoch: int
    """Epoch (from 0) the micro-batches come from."""
    last_in_epoch: bool
    """True for the last full step of the epoch."""
    micro: list[tuple[torch.Tensor, torch.Tensor]]
    """``grad_accum`` (inputs, targets) pairs."""


def steps_per_epoch(loader: DataLoader, grad_accum: int) -> int:
    """Full optimizer steps in one pass of ``loader`` (leftover micro-batches are dropped)."""
    return len(loader) // grad_accum


def step_batches(
    loader: DataLoader, sampler: DistributedSampler, grad_accum: int, *, start_epoch: int = 0
) -> Iterator[StepBatches]:
    """Yield the micro-batches of each optimizer step, forever, epoch after epoch.

    ``sampler.set_epoch`` is called at the start of every epoch so that each epoch has its own
    order. Micro-batches left over at an epoch's end (fewer than ``grad_accum``) are dropped,
    so an optimizer step never spans two epochs.
    """
    per_epoch = steps_per_epoch(loader, grad_accum)
    if per_epoch < 1:
        raise ValueError(
            f"one epoch holds {len(loader)} micro-batches per rank, fewer than --grad-accum "
            f"{grad_accum}; raise --dataset-size or lower --batch-size/--grad-accum"
        )
    epoch = start_epoch
    while True:
        sampler.set_epoch(epoch)
        batches = iter(loader)
        for i in range(per_epoch):
            micro = [next(batches) for _ in range(grad_accum)]
            yield StepBatches(epoch=epoch, last_in_epoch=i == per_epoch - 1, micro=micro)
        epoch += 1
