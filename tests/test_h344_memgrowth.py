"""A rank whose memory grows step after step (a leak) is said so by the hub's detector, once,
and said steady again when it stops; honest warm-up growth, an evaluation's spike that comes
back down and a checkpoint's one-off rise are not (review 340: a rank keeping every loss with its
graph grew 1.6 MiB a step, 360 MiB -> 1.1 GiB, and every view read "every rank is healthy")."""

from __future__ import annotations

import math

from pardash.telemetry import schema
from pardash.telemetry.analysis import Detector
from pardash.telemetry.state import RunState

MIB = 1 << 20
STEP_S = 0.15
"""The reviewer's run's step: 500 steps in 82 s."""


def feed(world: int, steps: int, rss, cuda=None, *, step_s: float = STEP_S, state: RunState | None = None,
         detector: Detector | None = None, pid: int = 100):  # fmt: skip
    """Steps 1..``steps`` of ``world`` ranks, ``rss(rank, step)`` bytes each (``cuda`` likewise,
    where given), fed to a state and a detector in order as the hub takes them (its frame's
    ``now`` the steps' clock); the verdicts, in order."""
    state = state or RunState()
    det = detector or Detector()
    out = []
    t0 = 1_000_000.0 + (pid - 100) * 10_000
    for r in range(world):
        state.apply(schema.Hello(rank=r, run="x", seq=0, t=t0, world_size=world, pid=pid + r, strategy="ddp"), t0)
    for s in range(1, steps + 1):
        t = t0 + s * step_s
        for r in range(world):
            mem = schema.Mem(params_bytes=1 * MIB, rss_bytes=int(rss(r, s)),
                             cuda_allocated_bytes=None if cuda is None else int(cuda(r, s)))  # fmt: skip
            m = schema.Step(rank=r, run="x", seq=s + 1, t=t, step=s, loss=1.0, samples=8, step_s=step_s, self_s=0.01, mem=mem)
            state.apply(m, t)
            det.stragglers.observe(m)
        for v in det.update(state, t):
            state.apply(v, t)
            if v.verdict.startswith("memory"):
                out.append(v)
    return out, state, det


def leak(rank: int, per_step: float, *, base: float = 360 * MIB, until: int | None = None):
    def rss(r: int, s: int) -> float:
        wobble = ((s * 7919 + r * 31) % 13 - 6) * 0.3 * MIB  # the allocator's churn, a few MiB
        grown = per_step * (min(s, until) if until else s) if r == rank else 0.0
        return base + grown + wobble
    return rss


def test_a_rank_that_keeps_1_6_mib_a_step_is_said_growing_once_and_the_other_not():
    said, _, _ = feed(2, 500, leak(1, 1.6 * MIB))
    assert [(v.rank, v.verdict, v.cause) for v in said] == [(1, "memory_growing", "rss")], said
    v = said[0]
    assert v.message.startswith("rank 1's memory grows 1.6 MiB a step ("), v.message
    assert "the others' stays flat" in v.message and "a loss or output kept with its graph" in v.message
    # Found within the reviewer's run, which read "every rank is healthy" to its end.
    assert v.step is not None and v.step < 350


def test_growth_that_stops_is_said_steady_again():
    said, state, _ = feed(2, 900, leak(1, 1.6 * MIB, until=400))
    assert [(v.rank, v.verdict) for v in said] == [(1, "memory_growing"), (1, "memory_steady")], said
    assert said[1].step > 400 and "no longer grows" in said[1].message
    assert state.memory_growing == {}


def test_warm_up_growth_then_flat_is_not_a_leak():
    # Caches filling over the first minute (150 MiB, then flat): the allocator's, a compile's.
    def rss(r: int, s: int) -> float:
        x = 360 * MIB + 150 * MIB * (1 - math.exp(-s / 80)) + (s % 5) * MIB
        return x + (1.6 * MIB * s if r == 2 else 0.0)  # (rank 2 leaks as well)
    said, _, _ = feed(3, 1200, rss)
    assert [(v.rank, v.verdict) for v in said] == [(2, "memory_growing")], said


def test_an_evaluation_spike_that_comes_back_down_and_a_checkpoint_step_are_not_a_leak():
    def rss(r: int, s: int) -> float:
        x = 360 * MIB
        if r == 0 and s % 150 < 20:  # an evaluation holding 300 MiB of features, given back
            x += 300 * MIB
        if r == 0 and s >= 300:  # a checkpoint's copy the allocator keeps: one rise, then flat
            x += 120 * MIB
        return x + (1.6 * MIB * s if r == 1 else 0.0)  # (rank 1 leaks as well)
    said, _, _ = feed(2, 1200, rss)
    assert [(v.rank, v.verdict) for v in said] == [(1, "memory_growing")], said


def test_every_rank_growing_alike_is_said_once_for_the_job():
    def rss(r: int, s: int) -> float:
        return 360 * MIB + (1.0 + 0.1 * r) * MIB * s
    said, state, _ = feed(4, 500, rss)
    assert [(v.rank, v.verdict) for v in said] == [(-1, "memory_growing")], said
    assert said[0].message.startswith("every rank's memory grows alike, about 1."), said[0].message
    assert "a leak in code every rank runs" in said[0].message
    assert list(state.memory_growing) == [-1]


def test_a_gpu_leak_is_found_in_the_allocator_s_bytes_with_the_rss_flat():
    said, _, _ = feed(2, 500, leak(0, 0.0), cuda=lambda r, s: 2 * 1024 * MIB + (4 * MIB * s if r == 0 else 0))
    assert [(v.rank, v.verdict, v.cause) for v in said] == [(0, "memory_growing", "cuda_allocated")], said
    assert said[0].message.startswith("rank 0's GPU memory (allocated) grows 4.0 MiB a step"), said[0].message


def test_slow_growth_of_a_large_process_is_not_said_but_slow_growth_that_doubles_it_in_hours_is():
    # 8 GiB growing 20 KiB a step at 0.15 s (~470 MiB an hour, 6%): the churn of a long run.
    big = leak(1, 20 * 1024, base=8 * 1024 * MIB)
    said, _, _ = feed(2, 4000, big)
    assert said == []
    # 300 KiB a step (~7 GiB an hour, over half of it): said, once its rise is a tenth of it
    # over the slowest ring's window (34 min).
    said, _, _ = feed(2, 16000, leak(1, 300 * 1024, base=8 * 1024 * MIB))
    assert [(v.rank, v.verdict) for v in said] == [(1, "memory_growing")], said
    # 512 MiB growing 100 KiB a step (~2.3 GiB an hour): said, from the slower rings.
    said, _, _ = feed(2, 6000, leak(1, 100 * 1024, base=512 * MIB))
    assert [(v.rank, v.verdict) for v in said] == [(1, "memory_growing")], said


def test_a_restarted_rank_s_memory_counts_anew():
    st = RunState()
    det = Detector()
    said, st, det = feed(2, 400, leak(1, 1.6 * MIB), state=st, detector=det)
    assert [(v.rank, v.verdict) for v in said] == [(1, "memory_growing")]
    # torchrun restarts the job from step 1 (its memory back where it began, flat this time)
    again, _, _ = feed(2, 300, leak(1, 0.0), state=st, detector=det, pid=200)
    assert [(v.rank, v.verdict) for v in again] == [(1, "memory_steady")], again
    assert "a new process" in again[0].message


def test_growth_that_goes_on_is_not_said_steady_as_the_process_grows_large():
    # A tenth of the memory over the finest window fails once the process is large (9 GiB
    # growing 160 MiB in 32 s): found so, the verdict cleared and said again, over and over.
    said, _, _ = feed(2, 8000, leak(1, 1.6 * MIB), step_s=0.1)
    assert [(v.rank, v.verdict) for v in said] == [(1, "memory_growing")], said

    def rss(r: int, s: int) -> float:
        return 360 * MIB + 1.6 * MIB * s
    said, _, _ = feed(3, 8000, rss, step_s=0.1)
    assert [(v.rank, v.verdict) for v in said] == [(-1, "memory_growing")], said
