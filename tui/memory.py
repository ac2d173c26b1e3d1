"""Sharding savings: what the ranks hold against what an unsharded run would hold.

Measured bytes come from each rank's last ``Step.mem`` (parameters, gradients, optimizer state
and DDP buckets held locally, and the ``*_full_bytes`` the same tensors take unsharded). The
expectation is the run's own state measured unsharded, on every rank when replicated and 1/N of
it fully sharded over N ranks (``summary.expected_state_bytes``; the ZeRO paper's 16 bytes a
parameter before any rank measured it).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from pardash.telemetry import state as st
from pardash.telemetry.summary import NOT_SHARDING_FACTOR, expected_state_bytes, is_pipeline, is_sharded, shards_of


@dataclass(frozen=True, slots=True)
class RankMemory:
    """One rank's model-state bytes, measured."""

    rank: int
    params_bytes: int
    grads_bytes: int
    optim_bytes: int
    buckets_bytes: int
    full_bytes: int
    """What the same rank would hold unsharded (parameters + gradients + optimizer state)."""
    device_bytes: int | None
    """CUDA allocated (GPU) or RSS (CPU), for comparison."""
    not_sharding: bool

    @property
    def held_bytes(self) -> int:
        """Parameters + gradients + optimizer state held (comparable with ``full_bytes``)."""
        return self.params_bytes + self.grads_bytes + self.optim_bytes

    @property
    def total_bytes(self) -> int:
        """Everything the rank holds for the model, DDP buckets included."""
        return self.held_bytes + self.buckets_bytes


@dataclass(frozen=True, slots=True)
class MemorySavings:
    """Sharding savings of a run, summed and per rank."""

    strategy: str
    world_size: int
    ranks: tuple[RankMemory, ...]
    """Ranks that reported memory, by rank."""
    params_count: int
    """Model parameters (from the ranks' hello; 0 when unknown)."""
    shards: int = 0
    """Ranks the sharded state is split over, as the ranks say (summary.shards_of; 0 unsaid)."""

    @property
    def sharded(self) -> bool:
        return is_sharded(self.strategy)

    @property
    def pipeline(self) -> bool:
        """Pipeline parallel: each rank holds its own stage of the model, not a copy of it."""
        return is_pipeline(self.strategy)

    @property
    def held_bytes(self) -> int:
        """Model state (parameters, gradients, optimizer state) held across all reporting ranks."""
        return sum(r.held_bytes for r in self.ranks)

    @property
    def buckets_bytes(self) -> int:
        """DDP gradient buckets across ranks (extra to the model state; 0 for other strategies)."""
        return sum(r.buckets_bytes for r in self.ranks)

    @property
    def full_bytes(self) -> int:
        """What the same ranks would hold unsharded (DDP: every rank a full copy)."""
        return sum(r.full_bytes for r in self.ranks)

    @property
    def saving_bytes(self) -> int:
        return self.full_bytes - self.held_bytes

    @property
    def ratio(self) -> float | None:
        """Unsharded over held: 4.0 means a quarter of the memory."""
        held = self.held_bytes
        return self.full_bytes / held if held > 0 else None

    @property
    def held_per_rank(self) -> tuple[int, int, int]:
        """(min, median, max) bytes held by a rank."""
        held = [r.held_bytes for r in self.ranks]
        return min(held), int(statistics.median(held)), max(held)

    @property
    def full_per_rank_bytes(self) -> int:
        """Median bytes a rank would hold unsharded (a pipeline's: the largest stage's, as the
        report takes it; its stages hold unequal parts, one the embedding, one the head, and
        the median flagged the larger ones over their expectation)."""
        if self.pipeline:
            return max(r.full_bytes for r in self.ranks)
        return int(statistics.median(r.full_bytes for r in self.ranks))

    def _expected(self, strategy: str) -> tuple[int | None, str]:
        shards = self.shards if strategy == self.strategy else 0  # ("if fully sharded": over every rank)
        return expected_state_bytes(self.full_per_rank_bytes, self.params_count, self.world_size, strategy, shards)

    @property
    def sharded_expected_bytes(self) -> int | None:
        """What a rank would hold fully sharded over the run's ranks (1/N of its state); None
        for a pipeline (the other ranks hold other stages: not copies to shard over)."""
        return self._expected("fsdp")[0] if self.world_size > 1 and not self.pipeline else None

    @property
    def expected_per_rank_bytes(self) -> int | None:
        """What a rank should hold for this run's strategy."""
        return self._expected(self.strategy)[0]

    @property
    def expected_label(self) -> str:
        """How the expectation is worked out ("its state unsharded ÷ 4", "16 B/param")."""
        return self._expected(self.strategy)[1]

    @property
    def over_expectation(self) -> list[int]:
        """Sharded run: ranks holding far more than the expectation (a wrap-policy mistake)."""
        exp = self.expected_per_rank_bytes
        out = [r.rank for r in self.ranks if r.not_sharding]
        if self.sharded and exp and self.world_size > 1:
            out += [r.rank for r in self.ranks if r.held_bytes > NOT_SHARDING_FACTOR * exp and not r.not_sharding]
        return sorted(out)


def memory_savings(state: st.RunState, *, reuse: MemorySavings | None = None) -> MemorySavings | None:
    """Savings of the run in ``state``; None until a rank has reported its memory.

    ``reuse``: the savings worked out last time. A rank whose figures did not change keeps its
    :class:`RankMemory`, and when none changed ``reuse`` itself comes back, so a panel that
    redraws on a change compares it in no time (at 1024 ranks, making and comparing a fresh
    set cost milliseconds, twice a second, for figures that rarely move)."""
    before = {m.rank: m for m in reuse.ranks} if reuse is not None else {}
    ranks: list[RankMemory] = []
    same = reuse is not None
    full_of, device_of = st.mem_full_bytes, st.mem_device_bytes
    by_rank = state.ranks
    for rank in sorted(by_rank):
        r = by_rank[rank]
        mem = r.step.mem if r.step is not None else None
        if mem is None:
            continue
        full = full_of(mem) or 0
        device = device_of(mem)
        not_sharding = r.not_sharding is not None
        m = before.get(rank)
        if (
            m is None
            or m.params_bytes != mem.params_bytes
            or m.grads_bytes != mem.grads_bytes
            or m.optim_bytes != mem.optim_bytes
            or m.buckets_bytes != mem.buckets_bytes
            or m.full_bytes != full
            or m.device_bytes != device
            or m.not_sharding != not_sharding
        ):
            same = False
            m = RankMemory(
                rank=rank,
                params_bytes=mem.params_bytes,
                grads_bytes=mem.grads_bytes,
                optim_bytes=mem.optim_bytes,
                buckets_bytes=mem.buckets_bytes,
                full_bytes=full,
                device_bytes=device,
                not_sharding=not_sharding,
            )
        ranks.append(m)
    if not ranks:
        return None
    hello = state.hello
    strategy, world_size, params_count = state.strategy, state.world_size, hello.params_count if hello else 0
    shards = shards_of(state)
    if (
        same
        and reuse is not None
        and len(ranks) == len(reuse.ranks)
        and (strategy, world_size, params_count, shards) == (reuse.strategy, reuse.world_size, reuse.params_count, reuse.shards)
    ):
        return reuse
    return MemorySavings(strategy=strategy, world_size=world_size, ranks=tuple(ranks), params_count=params_count, shards=shards)
