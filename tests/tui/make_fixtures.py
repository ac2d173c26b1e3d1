"""Write the recorded runs the TUI snapshot tests replay (tests/tui/data/*.jsonl).

Every value is fixed: timestamps start at T0 and advance by fixed steps, and the "noise" comes
from a seeded generator, so running this script twice writes the same bytes (a test checks
that). The logs look like what a hub records: hellos, steps with phase times and memory,
system samples, heartbeats, events and the hub's verdicts, in hub order with ``hseq``, and
each ends with the hub's closing line ("hub stopped: ..."), as a log its hub closed does, but
killed2's, cut where its hub was killed (the replay says the log ends early).

How each ends is what its replay says at its end, as the live viewer and `pardash report` say
it of such a log: dp1 is a finished job, its rank's ``exit`` (code 0) its last word before the
hub's closing line, as the bundled trainer's hub records a clean end; exited4's ranks exited or
stalled; run4, straggler8 and run1024 show jobs still running, and are logs their hub closed
under running ranks ("the hub stopped at step N, K ranks not ended"), a rank's end never heard.

    python tests/tui/make_fixtures.py            # rewrite tests/tui/data/
"""

from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pardash.telemetry import schema

DATA = Path(__file__).resolve().parent / "data"
T0 = 1_700_000_000.0
"""Wall clock of every run's first message (2023-11-14T22:13:20Z)."""

GPT2_PARAMS = 124_439_808
RESNET50_PARAMS = 25_557_032
LLAMA7B_PARAMS = 6_738_415_616
H100 = "NVIDIA H100 80GB HBM3"
H100_BYTES = 85_520_809_984
GiB = 1 << 30


@dataclass
class Log:
    """Messages of one run, written in time order with hub sequence numbers."""

    run: str
    messages: list[schema.Message] = field(default_factory=list)
    seqs: dict[int, int] = field(default_factory=dict)

    def add(self, msg: schema.Message, t: float) -> None:
        msg.run = self.run
        msg.t = round(T0 + t, 6)
        if msg.rank >= 0 and not isinstance(msg, schema.Verdict):
            msg.seq = self.seqs.get(msg.rank, 0)
            self.seqs[msg.rank] = msg.seq + 1
        self.messages.append(msg)

    def finish(self, ranks: list[int], *, step: int) -> None:
        """Each rank's end as the bundled trainer's hub records a clean one: its ``exit`` with
        code 0 at its last step, 2 ms after its last record (no heartbeat or system sample of a
        rank after its exit), then the hub's closing line (:meth:`close`)."""
        for r in ranks:
            last = max(m.t for m in self.messages if m.rank == r and not isinstance(m, schema.Verdict)) - T0
            self.add(schema.Event(rank=r, name="exit", code=0, step=step), last + 0.002)

    def close(self, after_s: float = 0.5) -> None:
        """The hub's closing line, ``after_s`` after the last record, as a real hub ends its log
        when it stops: a replay of a log without it, its ranks not ended, says the log ends
        early (its hub killed), as `pardash report` does."""
        received = sum(1 for m in self.messages if m.rank >= 0 and not isinstance(m, schema.Verdict))
        last = max(m.t for m in self.messages) - T0
        self.add(schema.Event(rank=-1, name="hub", message=f"hub stopped: {received} messages, 0 lost, 0 rejected"), last + after_s)

    def write(self, path: Path) -> None:
        # Stable sort: equal times keep the order they were added in.
        ordered = sorted(self.messages, key=lambda m: m.t)
        lines = []
        for hseq, msg in enumerate(ordered, start=1):
            msg.hseq = hseq
            lines.append(schema.encode_json(msg))
        path.write_bytes(b"\n".join(lines) + b"\n")


def sharded_mem(params: int, world: int, rng: random.Random, *, sharded: bool, buckets: bool = False) -> schema.Mem:
    p_full, g_full, o_full = 4 * params, 4 * params, 8 * params
    div = world if sharded else 1
    params_b, grads_b, optim_b = p_full // div, g_full // div, o_full // div
    held = params_b + grads_b + optim_b + (g_full if buckets else 0)
    activations = int(6 * GiB + rng.random() * 0.05 * GiB)
    return schema.Mem(
        params_bytes=params_b,
        grads_bytes=grads_b,
        optim_bytes=optim_b,
        buckets_bytes=g_full if buckets else 0,
        params_full_bytes=p_full,
        grads_full_bytes=g_full,
        optim_full_bytes=o_full,
        cuda_allocated_bytes=held + activations,
        cuda_reserved_bytes=held + activations + 2 * GiB,
        cuda_peak_bytes=held + activations + 5 * GiB,
        nvml_used_bytes=held + activations + 3 * GiB,
        rss_bytes=int(3.2 * GiB + rng.random() * 0.1 * GiB),
    )


def hello(rank: int, world: int, node: int, per_node: int, host: str, strategy: str, params: int, **kw) -> schema.Hello:
    return schema.Hello(
        rank=rank,
        local_rank=rank % per_node,
        world_size=world,
        node=node,
        host=host,
        pid=41000 + rank,
        strategy=strategy,
        backend="nccl",
        device=f"cuda:{rank % per_node}",
        device_name=H100,
        device_mem_bytes=H100_BYTES,
        torch_version="2.6.0+cu124",
        params_count=params,
        params_bytes=4 * params,
        **kw,
    )


def system(rank: int, rng: random.Random, mem: schema.Mem | None) -> schema.System:
    return schema.System(
        rank=rank,
        cpu_pct=round(95 + rng.random() * 10, 1),
        rss_bytes=int(3.2 * GiB + rng.random() * 0.1 * GiB),
        gpu_util_pct=round(88 + rng.random() * 10, 1),
        gpu_mem_used_bytes=mem.nvml_used_bytes if mem is not None else int(2 * GiB),
        gpu_mem_total_bytes=H100_BYTES,
        gpu_temp_c=float(58 + rng.randrange(8)),
        gpu_power_w=round(540 + rng.random() * 110, 1),
        gpu_sm_clock_mhz=1980.0,
    )


def phases(rng: random.Random, *, slow_data: float = 0.0, slow_compute: float = 0.0) -> dict[str, float]:
    data = 0.006 + rng.random() * 0.002 + slow_data
    forward = (0.055 + rng.random() * 0.004) * (1 + slow_compute)
    backward = (0.110 + rng.random() * 0.006) * (1 + slow_compute)
    optimizer = 0.014 + rng.random() * 0.002
    return {
        "data_s": round(data, 6),
        "forward_s": round(forward, 6),
        "backward_s": round(backward, 6),
        "optimizer_s": round(optimizer, 6),
        "self_s": round(data + forward + 0.3 * backward, 6),
    }


def synchronous_steps(
    log: Log,
    *,
    ranks: list[int],
    steps: range,
    step_dt: float,
    t_start: float,
    rng: random.Random,
    mem_of,
    loss_of,
    slow: dict[int, dict[str, float]] | None = None,
    samples: int = 32,
    mem_every: int = 1,
) -> float:
    """Steps of a synchronous data-parallel run: every rank's wall step time is the same (all
    wait for the slowest at the collectives); the waiting shows as comm time."""
    slow = slow or {}
    t = t_start
    for step in steps:
        ph = {r: phases(rng, **(slow.get(r, {}) if step >= 30 or len(ranks) > 64 else {})) for r in ranks}
        slowest = max(p["self_s"] for p in ph.values())
        step_s = round(step_dt + (slowest - 0.1 - 0.006), 6)
        for r in ranks:
            p = ph[r]
            comm = round(0.02 + (slowest - p["self_s"]), 6)
            log.add(
                schema.Step(
                    rank=r,
                    step=step,
                    epoch=step // 100,
                    loss=round(loss_of(step, r), 5),
                    samples=samples,
                    step_s=step_s,
                    comm_s=comm,
                    lr=round(3e-4 * min(1.0, (step + 1) / 20), 8),
                    mono=round(1000 + t, 6),
                    mem=mem_of(r) if (step + 1) % mem_every == 0 or step == steps[-1] else None,
                    **p,
                ),
                t + r * 0.0005,
            )
        t += step_s
    return t


def beats_and_systems(
    log: Log, ranks: list[int], t_from: float, t_to: float, rng, step_at, mem_of, phase_of=None
) -> None:
    """A heartbeat and a system sample per rank per second."""
    t = math.ceil(t_from)
    while t <= t_to:
        for r in ranks:
            phase = phase_of(r, t) if phase_of else "forward"
            log.add(
                schema.Heartbeat(rank=r, step=step_at(r, t), phase=phase, phase_s=0.05, mono=1000 + t),
                t + 0.3 + r * 0.0001,
            )
            log.add(system(r, rng, mem_of(r)), t + 0.31 + r * 0.0001)
        t += 1


def loss_curve(step: int, rank: int, rng: random.Random) -> float:
    return 3.2 + 7.7 * math.exp(-step / 45) + (rng.random() - 0.5) * 0.08


# -- the runs ---------------------------------------------------------------------------------


def run4(path: Path) -> None:
    """4 ranks of FSDP on 2 nodes, healthy: sharding saves 4x."""
    rng = random.Random(4)
    log = Log("fsdp-gpt2-4")
    hosts = {0: "gpu-a", 1: "gpu-b"}
    ranks = list(range(4))
    log.add(schema.Event(rank=-1, name="hub", message="hub started (pid 4242), ingest tcp://127.0.0.1:5555"), 0.0)
    for r in ranks:
        log.add(
            hello(r, 4, r // 2, 2, hosts[r // 2], "fsdp", GPT2_PARAMS, config={"model": "gpt2", "batch_size": 32}),
            0.5 + r * 0.01,
        )
    mems = {r: sharded_mem(GPT2_PARAMS, 4, rng, sharded=True) for r in ranks}
    end = synchronous_steps(
        log, ranks=ranks, steps=range(120), step_dt=0.25, t_start=2.0, rng=rng, mem_of=mems.get,
        loss_of=lambda s, r: loss_curve(s, r, rng),
    )  # fmt: skip
    log.add(schema.Event(rank=0, name="epoch_end", step=99, message="epoch 0 done"), 2.0 + 100 * 0.25)
    log.add(
        schema.Event(rank=0, name="checkpoint", step=100, duration_s=1.84, message="checkpoints/step-100.pt"),
        2.0 + 101 * 0.25,
    )
    beats_and_systems(log, ranks, 1.0, end, rng, lambda r, t: max(0, int((t - 2.0) / 0.25)), mems.get)
    log.close()
    log.write(path)


def straggler8(path: Path) -> None:
    """8 ranks of DDP on 2 nodes; rank 5's data loading slows from step 30: a straggler."""
    rng = random.Random(8)
    log = Log("ddp-resnet50-8")
    ranks = list(range(8))
    for r in ranks:
        log.add(hello(r, 8, r // 4, 4, f"dgx-{r // 4 + 1:02d}", "ddp", RESNET50_PARAMS), 0.2 + r * 0.01)
    mems = {r: sharded_mem(RESNET50_PARAMS, 8, rng, sharded=False, buckets=True) for r in ranks}
    end = synchronous_steps(
        log, ranks=ranks, steps=range(100), step_dt=0.2, t_start=1.0, rng=rng, mem_of=mems.get,
        loss_of=lambda s, r: 0.9 + 6.0 * math.exp(-s / 30) + (rng.random() - 0.5) * 0.05,
        slow={5: {"slow_data": 0.045}}, samples=256, mem_every=5,
    )  # fmt: skip
    t_verdict = 1.0 + 50 * 0.245
    log.add(
        schema.Verdict(
            rank=5,
            verdict="straggler",
            cause="data",
            cost_s=0.041,
            step=49,
            message="rank 5 is a straggler (data loading): the others wait 41 ms a step for it",
        ),
        t_verdict,
    )
    beats_and_systems(log, ranks, 0.5, end, rng, lambda r, t: max(0, int((t - 1.0) / 0.22)), mems.get)
    log.close()
    log.write(path)


def exited4(path: Path) -> None:
    """4 ranks of FSDP on one node; rank 1 dies at step 40, the others hang in backward."""
    rng = random.Random(41)
    log = Log("fsdp-gpt2-exit")
    ranks = list(range(4))
    for r in ranks:
        log.add(hello(r, 4, 0, 4, "gpu-a", "fsdp", GPT2_PARAMS), 0.3 + r * 0.01)
    mems = {r: sharded_mem(GPT2_PARAMS, 4, rng, sharded=True) for r in ranks}
    end = synchronous_steps(
        log, ranks=ranks, steps=range(41), step_dt=0.25, t_start=1.0, rng=rng, mem_of=mems.get,
        loss_of=lambda s, r: loss_curve(s, r, rng),
    )  # fmt: skip
    tb = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 212, in train_step\n'
        "    loss.backward()\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    log.add(
        schema.Event(
            rank=1,
            name="error",
            step=40,
            message="RuntimeError: CUDA error: an illegal memory access was encountered",
            traceback=tb,
        ),
        end + 0.05,
    )
    log.add(schema.Event(rank=1, name="exit", code=1, step=40), end + 0.06)
    stall_t = end + 8.5
    for r in (0, 2, 3):
        log.add(
            schema.Verdict(
                rank=r, verdict="stalled", cause="backward", step=40,
                message=f"rank {r} stalled in backward after step 40 (8 s without progress)",
            ),
            stall_t + r * 0.001,
        )  # fmt: skip

    beats_and_systems(log, [0, 2, 3], 0.5, end + 12, rng, lambda r, t: min(40, max(0, int((t - 1.0) / 0.25))), mems.get,
                      phase_of=lambda r, t: "backward" if t > end else "forward")  # fmt: skip
    beats_and_systems(log, [1], 0.5, end, rng, lambda r, t: min(40, max(0, int((t - 1.0) / 0.25))), mems.get)
    log.close()
    log.write(path)


def run1024(path: Path) -> None:
    """1024 ranks of FSDP on 128 nodes: a straggler, a stalled, a silent and an exited rank,
    and one node whose ranks run a little slow."""
    rng = random.Random(1024)
    world, per_node = 1024, 8
    log = Log("llama7b-1024")
    ranks = list(range(world))
    for r in ranks:
        node = r // per_node
        log.add(hello(r, world, node, per_node, f"gpu-{node:03d}", "fsdp", LLAMA7B_PARAMS), 0.5 + r * 0.0005)
    mem = sharded_mem(LLAMA7B_PARAMS, world, rng, sharded=True)
    slow = {517: {"slow_compute": 0.6}}
    slow.update({r: {"slow_compute": 0.12} for r in range(128, 136)})
    slow.update({r: {"slow_compute": 0.3} for r in (300, 301)})
    end = synchronous_steps(
        log, ranks=ranks, steps=range(2), step_dt=1.0, t_start=2.0, rng=rng, mem_of=lambda r: mem,
        loss_of=lambda s, r: 2.1 - 0.01 * s + (rng.random() - 0.5) * 0.02, slow=slow, samples=4, mem_every=1000,
    )  # fmt: skip
    log.add(
        schema.Verdict(rank=517, verdict="straggler", cause="compute", cost_s=0.098, step=1,
                       message="rank 517 is a straggler (compute): the others wait 98 ms a step for it"),
        end + 0.1,
    )  # fmt: skip
    log.add(
        schema.Event(rank=900, name="exit", code=-9, step=1, message="killed by SIGKILL (host out of memory)"),
        end + 0.2,
    )
    log.add(
        schema.Verdict(rank=64, verdict="silent", step=1, message="rank 64 silent for 4 s (no heartbeat)"), end + 0.3
    )
    log.add(
        schema.Verdict(rank=777, verdict="stalled", cause="data", step=1,
                       message="rank 777 stalled in data after step 1 (9 s without progress)"),
        end + 0.4,
    )  # fmt: skip
    log.close()
    log.write(path)


def dp1(path: Path) -> None:
    """DP: one process driving two GPUs, with the note the header must always show."""
    rng = random.Random(1)
    log = Log("dp-mlp-1")
    note = "dp runs one process (torch.nn.DataParallel over 2 GPUs): one replica, no per-GPU ranks"
    log.add(hello(0, 1, 0, 1, "gpu-a", "dp", 1_200_000, note=note), 0.1)
    mems = {0: sharded_mem(1_200_000, 1, rng, sharded=False)}
    end = synchronous_steps(
        log, ranks=[0], steps=range(40), step_dt=0.1, t_start=0.5, rng=rng, mem_of=mems.get,
        loss_of=lambda s, r: 1.5 * math.exp(-s / 20) + 0.2, samples=512,
    )  # fmt: skip
    beats_and_systems(log, [0], 0.2, end, rng, lambda r, t: min(39, int(t / 0.1)), mems.get)
    log.finish([0], step=39)
    log.close()
    log.write(path)


def killed2(path: Path) -> None:
    """2 ranks of DDP, healthy, their hub killed (kill -9) at step 29: no closing line, no
    rank's end. The replay says the log ends early, not that every rank is healthy."""
    rng = random.Random(2)
    log = Log("ddp-gpt2-killed")
    ranks = [0, 1]
    log.add(schema.Event(rank=-1, name="hub", message="hub started (pid 4343), ingest tcp://127.0.0.1:5555"), 0.0)
    for r in ranks:
        log.add(hello(r, 2, 0, 2, "gpu-a", "ddp", GPT2_PARAMS), 0.4 + r * 0.01)
    mems = {r: sharded_mem(GPT2_PARAMS, 2, rng, sharded=False, buckets=True) for r in ranks}
    end = synchronous_steps(
        log, ranks=ranks, steps=range(30), step_dt=0.25, t_start=1.0, rng=rng, mem_of=mems.get,
        loss_of=lambda s, r: loss_curve(s, r, rng), mem_every=5,
    )  # fmt: skip
    beats_and_systems(log, ranks, 0.5, end, rng, lambda r, t: max(0, int((t - 1.0) / 0.25)), mems.get)
    log.write(path)  # (no log.close(): its hub never wrote one)


FIXTURES = {
    "run4.jsonl": run4,
    "straggler8.jsonl": straggler8,
    "exited4.jsonl": exited4,
    "run1024.jsonl": run1024,
    "dp1.jsonl": dp1,
    "killed2.jsonl": killed2,
}


def build_all(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, build in FIXTURES.items():
        build(out / name)
        paths.append(out / name)
    return paths


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0]) if argv else DATA
    for p in build_all(out):
        print(f"{p}  {p.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
