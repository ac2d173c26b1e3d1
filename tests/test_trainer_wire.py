"""What the bundled trainer publishes: every record of 2 real gloo ranks, as the hub logged
them (the session's shared launches, see conftest.py), checked field by field against the wire
schema; and the GPU step-time arithmetic on stand-in events.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from pardash.telemetry import schema

def by_rank(messages: list) -> dict[int, list]:
    ranks: dict[int, list] = defaultdict(list)
    for m in messages:
        ranks[m.rank].append(m)
    for msgs in ranks.values():
        msgs.sort(key=lambda m: m.seq)
    return ranks


@pytest.mark.slow
@pytest.mark.xdist_group("shared_run")  # one worker makes the shared launches
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_every_rank_publishes_hello_steps_and_exit(strategy, shared_run):
    run = shared_run(strategy)
    steps, extra = run.steps, "--grad-accum" in run.args
    run_id = run.messages[0].run
    # What the ranks said themselves (the launcher and hub add records with seq -1).
    messages = [m for m in run.messages if m.seq >= 0]
    ranks = by_rank(messages)
    assert sorted(ranks) == [0, 1]
    for rank, msgs in ranks.items():
        assert all(m.run == run_id for m in msgs)
        # Nothing lost: the per-rank sequence numbers run without a gap.
        assert [m.seq for m in msgs] == list(range(len(msgs)))

        hello = msgs[0]
        assert isinstance(hello, schema.Hello)
        assert (hello.strategy, hello.backend, hello.device, hello.world_size) == (
            strategy, "gloo", "cpu", 2)
        assert hello.source == "trainer" and hello.torch_version
        assert hello.params_count > 0 and hello.params_bytes == 4 * hello.params_count
        assert hello.config["strategy"] == strategy and hello.config["steps"] == steps

        step_msgs = [m for m in msgs if isinstance(m, schema.Step)]
        assert [m.step for m in step_msgs] == list(range(1, steps + 1))
        for m in step_msgs:
            assert m.loss is not None and m.loss > 0
            assert m.step_s > 0 and m.lr is not None and m.lr > 0
            phases = [m.data_s, m.forward_s, m.backward_s, m.optimizer_s]
            assert all(p is not None and p >= 0 for p in phases), m
            # The phases tile the step; self time ends inside it.
            assert sum(phases) == pytest.approx(m.step_s, rel=1e-6)
            assert 0 < m.self_s <= m.step_s
            assert m.samples == 16 * (2 if extra else 1)
            mem = m.mem
            assert mem is not None and mem.params_full_bytes == hello.params_bytes
            assert mem.rss_bytes and mem.optim_bytes > 0 and mem.grads_bytes > 0
            # DDP's bucket all-reduces; FSDP2's all-gathers and reduce-scatters
            assert m.comm_s is not None and 0 < m.comm_s <= m.step_s
            if strategy == "ddp":
                assert mem.params_bytes == mem.params_full_bytes
                assert mem.buckets_bytes > 0
            else:
                assert mem.params_bytes < mem.params_full_bytes
        # The model learns on every rank.
        assert step_msgs[-1].loss < step_msgs[0].loss

        events = [m for m in msgs if isinstance(m, schema.Event)]
        # 256 samples / 2 ranks / 16 per micro-batch = 8 micro-batches per rank and epoch.
        per_epoch = 8 // (2 if extra else 1)
        assert [e.step for e in events if e.name == "epoch_end"] == list(
            range(per_epoch, steps + 1, per_epoch))
        # Which epoch ended, in words, as a script's epochs are said (trainer/epochs.py).
        assert [e.message for e in events if e.name == "epoch_end"][:2] == ["epoch 0 ended", "epoch 1 ended"]
        assert not [e for e in events if e.name == "error"]
        # The exit event comes last, after every step (only heartbeats may follow it).
        assert (events[-1].name, events[-1].code) == ("exit", 0)
        assert events[-1].seq > step_msgs[-1].seq


class FakeEvent:
    """Stands in for torch.cuda.Event (no GPU here): a time stamp in seconds."""

    def __init__(self, t: float) -> None:
        self.t = t

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, other: "FakeEvent") -> float:
        return (other.t - self.t) * 1e3  # milliseconds, as CUDA events report


def test_comm_wait_is_the_union_of_bucket_intervals():
    from pardash.trainer.strategies import CommTimer

    assert CommTimer.seconds([]) == 0.0
    # Overlapping buckets count once; a gap between them is not waiting.
    assert CommTimer.seconds([(1.0, 3.0), (0.0, 2.0), (5.0, 6.0)]) == pytest.approx(4.0)
    events = [(FakeEvent(10.0), FakeEvent(12.0)), (FakeEvent(11.0), FakeEvent(13.5))]
    assert CommTimer.seconds(events) == pytest.approx(3.5)
    # Only what falls between two stamps (FSDP's self time: the all-gathers before the backward)
    assert CommTimer.seconds([(1.0, 3.0), (0.0, 2.0), (5.0, 6.0)], within=(0.5, 5.5)) == pytest.approx(3.0)
    assert CommTimer.seconds([(5.0, 6.0)], within=(0.0, 4.0)) == 0.0
    assert CommTimer.seconds(events, within=(FakeEvent(10.5), FakeEvent(12.5))) == pytest.approx(2.0)


def test_gpu_step_times_resolve_from_events():
    import torch

    from pardash.trainer.clock import StepClock, StepRecord

    e = [FakeEvent(t) for t in (0.0, 0.5, 1.5, 4.0, 4.25)]
    rec = StepRecord(
        step=1, epoch=0, loss=torch.zeros(()), marks=[("data", e[0]), ("forward", e[1]),
        ("backward", e[2]), ("optimizer", e[3])], end=e[4], arrive=e[2], comm=None, lr=1e-3,
        samples=16, mem=None, last_in_epoch=False,
    )
    times = StepClock(cuda=True).resolve(rec)
    assert times == pytest.approx({"data_s": 0.5, "forward_s": 1.0, "backward_s": 2.5,
                                   "optimizer_s": 0.25, "step_s": 4.25, "self_s": 1.5})
