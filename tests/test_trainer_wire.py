"""What the bundled trainer publishes, read off a real ZeroMQ socket without the hub.

The test binds a PULL socket where the hub's ingest would be, points the ranks at it through
PARDASH_ENDPOINT / PARDASH_RUN_ID, runs 2 gloo ranks under torchrun and decodes every frame
with the wire schema.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict

import pytest
import zmq

from pardash.telemetry import schema

RUN_ID = "wire-test"


def run_ranks(args: list[str], nproc: int = 2) -> tuple[subprocess.CompletedProcess, list]:
    """Run the trainer on ``nproc`` ranks publishing to a socket of ours; (process, messages)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.MAXMSGSIZE, schema.MAX_MESSAGE_BYTES)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    env = dict(os.environ, OMP_NUM_THREADS="1", PARDASH_ENDPOINT=f"tcp://127.0.0.1:{port}",
               PARDASH_RUN_ID=RUN_ID)
    env.pop("PARDASH_TELEMETRY", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), "-m", "pardash.trainer.train", "--log-every", "0",
           *args]
    messages = []
    try:
        with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) as proc:
            # Read while the ranks run, so nothing waits on a full queue.
            while proc.poll() is None:
                if sock.poll(100):
                    messages.append(schema.decode(sock.recv()))
            out, err = proc.communicate(timeout=240)
        # Ranks flush on close (linger) before they exit; take what is still queued here.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and sock.poll(200):
            messages.append(schema.decode(sock.recv()))
    finally:
        sock.close()
        ctx.term()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), messages


def by_rank(messages: list) -> dict[int, list]:
    ranks: dict[int, list] = defaultdict(list)
    for m in messages:
        ranks[m.rank].append(m)
    for msgs in ranks.values():
        msgs.sort(key=lambda m: m.seq)
    return ranks


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "extra"),
    [("ddp", []), ("fsdp", ["--grad-accum", "2"])],
)
def test_every_rank_publishes_hello_steps_and_exit(strategy, extra):
    steps = 12
    proc, messages = run_ranks(
        ["--strategy", strategy, "--steps", str(steps), "--dataset-size", "256", *extra]
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    ranks = by_rank(messages)
    assert sorted(ranks) == [0, 1]
    for rank, msgs in ranks.items():
        assert all(m.run == RUN_ID for m in msgs)
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
            if strategy == "ddp":
                assert m.comm_s is not None and 0 < m.comm_s <= m.step_s
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
        assert not [e for e in events if e.name == "error"]
        # The exit event comes last, after every step (only heartbeats may follow it).
        assert (events[-1].name, events[-1].code) == ("exit", 0)
        assert events[-1].seq > step_msgs[-1].seq


@pytest.mark.slow
def test_injected_crash_is_published_with_its_traceback():
    proc, messages = run_ranks(["--strategy", "ddp", "--steps", "20", "--inject-crash", "1@3",
                                "--dataset-size", "256"])
    assert proc.returncode != 0
    crashed = by_rank(messages)[1]
    steps = [m.step for m in crashed if isinstance(m, schema.Step)]
    assert steps == [1, 2]
    events = [m for m in crashed if isinstance(m, schema.Event)]
    error = next(e for e in events if e.name == "error")
    assert "injected crash on rank 1 at step 3" in error.message
    assert error.traceback and "InjectedCrash" in error.traceback
    assert (events[-1].name, events[-1].code) == ("exit", 1)


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


def test_gpu_step_times_resolve_from_events():
    import torch

    from pardash.trainer.train import StepClock, StepRecord

    e = [FakeEvent(t) for t in (0.0, 0.5, 1.5, 4.0, 4.25)]
    rec = StepRecord(
        step=1, epoch=0, loss=torch.zeros(()), marks=[("data", e[0]), ("forward", e[1]),
        ("backward", e[2]), ("optimizer", e[3])], end=e[4], arrive=e[2], comm=None, lr=1e-3,
        samples=16, mem=None, last_in_epoch=False,
    )
    times = StepClock(cuda=True).resolve(rec)
    assert times == pytest.approx({"data_s": 0.5, "forward_s": 1.0, "backward_s": 2.5,
                                   "optimizer_s": 0.25, "step_s": 4.25, "self_s": 1.5})
