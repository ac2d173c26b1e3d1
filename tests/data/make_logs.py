"""Write the recorded logs that pin ``pardash report`` and ``pardash export`` (tests/data/).

Every value is fixed: time starts at T0 and advances by computed step times, and the noise
comes from a seeded generator, so running this twice writes the same bytes (a test checks
that). The logs look like what a hub records, in hub order with ``hseq``, plus the damage a
real log can carry: malformed and invalid lines in the middle and a truncated last line.

    python tests/data/make_logs.py              # rewrite the logs
    python tests/data/make_logs.py --goldens    # ...and the pinned reports (review the diff!)

The ``real_*.jsonl`` logs beside them are recordings of real ``pardash launch --headless``
runs (gloo on CPU, 2 ranks, 12 steps); this script does not touch them.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
from pathlib import Path

from pardash.telemetry import schema

DATA = Path(__file__).resolve().parent
T0 = 1_700_000_000.0
"""Wall clock of every run's first record (2023-11-14T22:13:20Z)."""
H100 = "NVIDIA H100 80GB HBM3"
H100_BYTES = 85_520_809_984
GPT2_PARAMS = 124_439_808
GiB = 1 << 30

SYNTHETIC = ("ddp4_straggler.jsonl", "fsdp4_crash.jsonl", "fsdp2_not_sharding.jsonl")
REAL = ("real_ddp2.jsonl", "real_fsdp2.jsonl")
COMPARE = (("ddp4_straggler.jsonl", "fsdp4_crash.jsonl"), ("real_ddp2.jsonl", "real_fsdp2.jsonl"))


class Log:
    """Records of one run, in the order given, with per-rank seq and hub seq stamped."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.lines: list[bytes] = []
        self.seq: dict[int, int] = {}
        self.hseq = 0

    def add(self, msg: schema.Message, t: float, *, lose_before: bool = False) -> None:
        msg.run = self.run
        msg.t = round(T0 + t, 6)
        if msg.rank >= 0 and not isinstance(msg, schema.Verdict) and msg.seq != -1:
            n = self.seq.get(msg.rank, 0) + (1 if lose_before else 0)
            msg.seq = n
            self.seq[msg.rank] = n + 1
        self.hseq += 1
        msg.hseq = self.hseq
        self.lines.append(schema.encode_json(msg) + b"\n")

    def damage(self, raw: bytes) -> None:
        """A line as a broken writer or a bad disk leaves it (newline included by the caller)."""
        self.lines.append(raw)

    def write(self, path: Path, *, cut_last: bool = False) -> None:
        lines = list(self.lines)
        if cut_last:  # the writer died halfway through its last line
            last = lines[-1]
            lines[-1] = last[: len(last) // 2]
        path.write_bytes(b"".join(lines))


def hub_note(log: Log, t: float, message: str, name: str = "hub") -> None:
    log.add(schema.Event(rank=-1, seq=-1, name=name, message=message), t)


def warnings_and_saves(log: Log, s: int, t: float) -> None:
    """After step ``s`` of 4 ranks: every rank warns at step 5, ranks 0-1 at 50; a checkpoint
    every 20 steps (rank 3 the slowest to save at 40)."""
    if s == 5 or s == 50:
        for r in range(4) if s == 5 else range(2):
            text = "DataLoader has 2 workers for 8 cores" if s == 5 else "loss scale fell to 1024"
            log.add(schema.Event(rank=r, name="warning", step=s, message=text), t + 0.002)
    if s % 20 == 0:
        for r in range(4):
            took = 2.5 + 0.1 * r + (1.5 if (s, r) == (40, 3) else 0.0)
            log.add(schema.Event(rank=r, name="checkpoint", step=s, message=f"/ckpt/step-{s:08d}", duration_s=took), t + 0.003)


def gpu_mem(params: int, world: int, rng: random.Random, *, sharded: bool, buckets: bool) -> schema.Mem:
    full_p, full_g, full_o = 4 * params, 4 * params, 8 * params
    div = world if sharded else 1
    p, g, o = full_p // div, full_g // div, full_o // div
    held = p + g + o + (full_g if buckets else 0)
    act = int(6 * GiB + rng.random() * 0.05 * GiB)
    return schema.Mem(
        params_bytes=p, grads_bytes=g, optim_bytes=o, buckets_bytes=full_g if buckets else 0,
        params_full_bytes=full_p, grads_full_bytes=full_g, optim_full_bytes=full_o,
        cuda_allocated_bytes=held + act, cuda_reserved_bytes=held + act + 2 * GiB,
        cuda_peak_bytes=held + act + 5 * GiB, nvml_used_bytes=held + act + 3 * GiB,
        rss_bytes=int(3.2 * GiB + rng.random() * 0.1 * GiB),
    )  # fmt: skip


def hello(rank: int, world: int, *, strategy: str, host: str, node: int, local: int, steps: int, cpu: bool = False) -> schema.Hello:
    return schema.Hello(
        rank=rank, local_rank=local, world_size=world, node=node, host=host, pid=4000 + rank,
        strategy=strategy, backend="gloo" if cpu else "nccl",
        device="cpu" if cpu else f"cuda:{local}", device_name="AMD EPYC" if cpu else H100,
        device_mem_bytes=64 * GiB if cpu else H100_BYTES, torch_version="2.6.0+cu124",
        params_count=GPT2_PARAMS if not cpu else 106_240, params_bytes=(GPT2_PARAMS if not cpu else 106_240) * 4,
        config={"model": "gpt", "steps": steps, "batch_size": 16, "strategy": strategy},
    )  # fmt: skip


def ddp4_straggler() -> Log:
    """DDP on 4 GPUs, 60 steps: rank 2 loads data 30 ms slower from step 20 to 44 (found at
    39, cleared at 59); rank 1 loses one message; damaged lines; the last line cut short.
    Checkpoints at steps 20, 40 and 60 (rank 3 the slowest to save at 40); every rank warns
    once at step 5, ranks 0 and 1 once more at 50."""
    rng = random.Random(4)
    log = Log("ddp4-straggler")
    hub_note(log, 0.0, "hub started (pid 4242), ingest tcp://127.0.0.1:29600")
    for r in range(4):
        log.add(hello(r, 4, strategy="ddp", host="gpu-node-0", node=0, local=r, steps=60), 0.5 + 0.01 * r)
    t = 1.0
    for s in range(1, 61):
        slow = 0.030 if 20 <= s <= 44 else 0.0
        step_s = 0.100 + slow
        t += step_s
        for r in range(4):
            data = 0.010 + rng.random() * 0.001 + (slow if r == 2 else 0.0)
            fwd, bwd, opt = 0.030 + rng.random() * 0.001, 0.045, 0.005
            wall = step_s + rng.random() * 0.0005
            log.add(
                schema.Step(
                    rank=r, step=s, loss=round(4.0 * math.exp(-s / 30) + 1.0 + rng.gauss(0, 0.01), 6), samples=16,
                    step_s=wall, data_s=data, forward_s=fwd, backward_s=bwd, optimizer_s=opt,
                    comm_s=max(0.0, wall - data - fwd - bwd - opt), self_s=data + fwd, lr=3e-4, mono=1000.0 + t,
                    mem=gpu_mem(GPT2_PARAMS, 4, rng, sharded=False, buckets=True),
                ),
                t + 0.001 * r,
                lose_before=(r == 1 and s == 33),
            )  # fmt: skip
        warnings_and_saves(log, s, t)
        if s % 10 == 0:
            for r in range(4):
                log.add(schema.Heartbeat(rank=r, step=s, phase="forward", phase_s=0.01, mono=1000.0 + t), t + 0.005)
                log.add(schema.System(rank=r, cpu_pct=101.0, rss_bytes=3 * GiB, gpu_util_pct=97.0, gpu_sm_clock_mhz=1980.0), t + 0.006)
        if s == 10:
            log.damage(b'{"kind":"step","rank":1,"step":\n')  # a line cut by a crashed writer
        if s == 20:
            log.damage(b'{"kind":"step","rank":"two","step":20}\n')  # wrong type: invalid
            log.damage(b"\n")  # blank lines are not records and not damage
        if s == 30:
            log.damage(b'{"kind":"gossip","rank":0}\n')  # unknown kind: invalid
        if s == 39:
            log.add(
                schema.Verdict(rank=2, verdict="straggler", cause="data", cost_s=0.030, step=39,
                               message="rank 2 is a straggler (data loading): the others wait 30 ms a step for it"),
                t + 0.05,
            )  # fmt: skip
        if s == 40:
            log.damage(b"\xff\xfe\x00 not json at all\n")
        if s == 59:
            log.add(
                schema.Verdict(rank=2, verdict="straggler_cleared", step=59,
                               message="rank 2 no longer a straggler (self time 40.5 ms, others 40.5 ms)"),
                t + 0.05,
            )  # fmt: skip
    for r in range(4):
        log.add(schema.Event(rank=r, name="exit", code=0, step=60), t + 0.2)
    hub_note(log, t + 0.5, "hub stopped: 293 messages, 1 lost, 0 rejected")
    log.add(schema.Heartbeat(rank=0, step=60, phase="exit", mono=1000.0 + t), t + 0.6)  # written halfway
    return log


def fsdp4_crash() -> Log:
    """FSDP on 2 nodes x 2 GPUs, 30 steps planned: rank 3 stalls in data after step 12 and
    resumes; rank 1 dies with a CUDA error in step 25, rank 0 fails on the closed connection,
    torchrun stops ranks 2 and 3. A checkpoint at step 20; every rank warns once at step 5."""
    rng = random.Random(7)
    log = Log("fsdp4-crash")
    hub_note(log, 0.0, "hub started (pid 4343), ingest tcp://10.0.0.1:29600")
    for r in range(4):
        node = r // 2
        log.add(hello(r, 4, strategy="fsdp", host=f"gpu-node-{node}", node=node, local=r % 2, steps=30), 0.5 + 0.01 * r)
    t = 1.0
    for s in range(1, 25):
        step_s = 0.080
        t += step_s
        if s == 13:
            t += 9.0  # every rank waited for rank 3 at the collective
            log.add(
                schema.Verdict(rank=3, verdict="stalled", cause="data", step=12,
                               message="rank 3 stalled in data after step 12 (8 s without progress)"),
                t - 1.0,
            )  # fmt: skip
        for r in range(4):
            data = 0.008 + rng.random() * 0.001
            fwd, bwd, opt = 0.020, 0.035, 0.004
            wall = step_s + (9.0 if s == 13 else 0.0) + rng.random() * 0.0005
            log.add(
                schema.Step(
                    rank=r, step=s, loss=round(4.0 * math.exp(-s / 20) + 1.2 + rng.gauss(0, 0.01), 6), samples=16,
                    step_s=wall, data_s=data + (9.0 if (s == 13 and r == 3) else 0.0), forward_s=fwd, backward_s=bwd,
                    optimizer_s=opt, comm_s=max(0.0, wall - data - fwd - bwd - opt - (9.0 if (s == 13 and r == 3) else 0.0)),
                    self_s=data + fwd + (9.0 if (s == 13 and r == 3) else 0.0), lr=3e-4, mono=2000.0 + t,
                    mem=gpu_mem(GPT2_PARAMS, 4, rng, sharded=True, buckets=False),
                ),
                t + 0.001 * r,
            )  # fmt: skip
        if s == 13:
            log.add(schema.Verdict(rank=3, verdict="resumed", step=13, message="rank 3 resumed at step 13"), t + 0.01)
        warnings_and_saves(log, s, t)
        if s % 10 == 0:
            for r in range(4):
                log.add(schema.Heartbeat(rank=r, step=s, phase="forward", dropped=3 if r == 2 else 0, mono=2000.0 + t), t + 0.005)
    t += 0.05
    tb = "Traceback (most recent call last):\n  File \"train.py\", line 88, in step\n    loss.backward()\nRuntimeError: CUDA error: an illegal memory access was encountered"
    log.add(schema.Event(rank=1, name="error", step=25, message="RuntimeError: CUDA error: an illegal memory access was encountered", traceback=tb), t)
    log.add(schema.Event(rank=1, name="exit", code=1, step=25), t + 0.01)
    peer = "RuntimeError: [/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:41234"
    log.add(schema.Event(rank=0, name="error", step=25, message=peer), t + 0.3)
    log.add(schema.Event(rank=0, name="exit", code=1, step=25), t + 0.31)
    for r in (2, 3):
        log.add(schema.Event(rank=r, seq=-1, name="exit", code=-15, message=f"rank {r} was stopped by torchrun"), t + 1.0)
    hub_note(log, t + 1.5, "hub stopped: 131 messages, 0 lost, 0 rejected")
    return log


def fsdp2_not_sharding() -> Log:
    """FSDP on 2 CPU ranks, 12 steps, but nothing sharded (no block was wrapped): both ranks
    hold the whole model, and the hub said so."""
    rng = random.Random(2)
    log = Log("fsdp2-not-sharding")
    params = 106_240
    hub_note(log, 0.0, "hub started (pid 4444), ingest tcp://127.0.0.1:29700")
    for r in range(2):
        log.add(hello(r, 2, strategy="fsdp", host="laptop", node=0, local=r, steps=12, cpu=True), 0.5 + 0.01 * r)
    t = 1.0
    for s in range(1, 13):
        t += 0.050
        for r in range(2):
            data = 0.004 + rng.random() * 0.001
            mem = schema.Mem(
                params_bytes=4 * params, grads_bytes=4 * params, optim_bytes=8 * params + 16,
                params_full_bytes=4 * params, grads_full_bytes=4 * params, optim_full_bytes=8 * params + 16,
                rss_bytes=340_000_000 + rng.randrange(1_000_000),
            )  # fmt: skip
            log.add(
                schema.Step(rank=r, step=s, loss=round(4.2 - 0.1 * s + rng.gauss(0, 0.01), 6), samples=16, step_s=0.050,
                            data_s=data, forward_s=0.012, backward_s=0.025, optimizer_s=0.003, comm_s=0.006,
                            self_s=data + 0.012, lr=3e-3, mono=50.0 + t, mem=mem),
                t + 0.001 * r,
            )  # fmt: skip
        if s == 1:
            for r in range(2):
                log.add(
                    schema.Verdict(rank=r, verdict="not_sharding", step=1,
                                   message=f"rank {r} holds 100% of the model state under fsdp x2 (expected 50%): is every block wrapped?"),
                    t + 0.01,
                )  # fmt: skip
    for r in range(2):
        log.add(schema.Event(rank=r, name="exit", code=0, step=12), t + 0.1)
    return log


def write_logs(folder: Path = DATA) -> None:
    ddp4_straggler().write(folder / "ddp4_straggler.jsonl", cut_last=True)
    fsdp4_crash().write(folder / "fsdp4_crash.jsonl")
    fsdp2_not_sharding().write(folder / "fsdp2_not_sharding.jsonl")


def pinned_report(name: str) -> dict:
    """The report of a log here, with the path made independent of where the tests run."""
    from pardash.telemetry.report import build_report

    rep = build_report(str(DATA / name))
    rep["log"] = name
    return rep


def pinned_compare(a: str, b: str) -> dict:
    """The comparison of two logs here, as ``report A --compare B`` makes it (which reads the logs
    again: from their full paths, wherever the tests run), with their paths made names."""
    from pardash.telemetry.compare import compare_reports
    from pardash.telemetry.report import build_report

    cmp = compare_reports(build_report(str(DATA / a)), build_report(str(DATA / b)))
    text = json.dumps(cmp)
    for name in (a, b):
        text = text.replace(json.dumps(str(DATA / name))[1:-1], name)
    return json.loads(text)


def write_goldens() -> None:
    from pardash.telemetry.compare import render_compare_markdown
    from pardash.telemetry.report import render_markdown

    for name in SYNTHETIC + REAL:
        rep = pinned_report(name)
        stem = name.removesuffix(".jsonl")
        (DATA / f"{stem}.report.json").write_text(json.dumps(rep, indent=2) + "\n")
        (DATA / f"{stem}.report.md").write_text(render_markdown(rep))
    for a, b in COMPARE:
        cmp = pinned_compare(a, b)
        stem = f"{a.removesuffix('.jsonl')}.vs.{b.removesuffix('.jsonl')}"
        (DATA / f"{stem}.compare.json").write_text(json.dumps(cmp, indent=2) + "\n")
        (DATA / f"{stem}.compare.md").write_text(render_compare_markdown(cmp))


if __name__ == "__main__":
    os.chdir(DATA)
    write_logs()
    if "--goldens" in sys.argv[1:]:
        write_goldens()
