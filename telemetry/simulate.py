"""``pardash simulate``: a synthetic job of N ranks publishing realistic telemetry through the
real reporter and wire format into a real hub, so anyone can watch the TUI at 1024 ranks
without GPUs, and the benchmarks and snapshot tests have a reproducible feed.

The ranks behave like synchronous data-parallel training: every rank's wall step time is the
same (they wait for each other at the collectives), only self time differs; a straggler makes
every rank slower and shows in its own self time; a stalled rank stops the others at the next
collective (their heartbeats say they wait in ``comm``); a crashed rank exits with code 1 and
the others are stopped (-15) like torchrun does.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any

import zmq

from .. import __version__
from . import schema
from .env import RankIdentity
from .reporter import Reporter
from .summary import ranks_text


@dataclass(kw_only=True, slots=True)
class SimConfig:
    """The synthetic job."""

    ranks: int = 8
    """Number of ranks."""
    rate_hz: float = 10.0
    """Steps a second per rank."""
    ranks_per_node: int = 8
    """Ranks per host (for grouping by node)."""
    strategy: str = "fsdp"
    """Strategy named in the hello (fsdp shards the memory figures by the world size)."""
    params: int = 124_000_000
    """Parameters of the pretend model."""
    steps: int = 0
    """Stop after this many steps (0: run until stopped)."""
    straggler: Any = None
    """Ranks whose self time is 30% of a step longer from step 20 on: a rank, or several (any
    iterable of ranks; kept as a tuple)."""
    straggler_kind: str = "data"
    stall: Any = None
    """(ranks, step): those ranks (a rank, or several: a node hung) stop stepping at that step;
    the others wait in comm. Kept as (tuple of ranks, step)."""
    crash: Any = None
    """(ranks, step): those ranks (a rank, or several: a node lost) exit with code 1 at that
    step; the others are stopped. Kept as (tuple of ranks, step)."""
    nan: Any = None
    """(ranks, step): those ranks' loss turns NaN at that step (a bad batch), every other rank's
    at the next, as the gradients' all-reduce carries it, to the end. Kept as (tuple of ranks, step)."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.ranks < 1:
            raise ValueError(f"--ranks {self.ranks}: need at least 1")
        if self.rate_hz <= 0:
            raise ValueError(f"--rate {self.rate_hz}: must be above 0")
        if self.straggler is not None:
            self.straggler = _ranks_of(self.straggler)
            if not all(0 <= r < self.ranks for r in self.straggler):
                raise ValueError(f"--straggler {ranks_text(self.straggler)}: {_rank_s(self.straggler)} must be below {self.ranks}")
        for name in FAULTS:
            rs = getattr(self, name)
            if rs is None:
                continue
            ranks, step = _ranks_of(rs[0]), int(rs[1])
            setattr(self, name, (ranks, step))
            said = f"--{name} {ranks_text(ranks)}@{step}"
            if not all(0 <= r < self.ranks for r in ranks):
                raise ValueError(f"{said}: {_rank_s(ranks)} must be below {self.ranks}")
            if not (1 <= step and (not self.steps or step <= self.steps)):
                last = f" and at most --steps {self.steps}" if self.steps else ""
                raise ValueError(f"{said}: the step must be at least 1{last} (steps count from 1)")


FAULTS = ("stall", "crash", "nan")
"""The faults given as RANKS@STEP (``--stall``, ``--crash``, ``--nan``)."""


def _fault_text(fault: Any) -> str:
    """A fault as its flag gives it: ``3``, ``8-15@200``."""
    if isinstance(fault, tuple) and len(fault) == 2 and isinstance(fault[0], tuple):
        return f"{ranks_text(fault[0])}@{fault[1]}"
    return ranks_text(fault)


def _rank_s(ranks: tuple[int, ...]) -> str:
    return "rank" if len(ranks) == 1 else "ranks"


def _ranks_of(ranks: Any) -> tuple[int, ...]:
    """A rank, or several, as a sorted tuple."""
    return (int(ranks),) if isinstance(ranks, int) else tuple(sorted({int(r) for r in ranks}))


def parse_ranks(text: str, flag: str) -> tuple[int, ...]:
    """'3' -> (3,); '8-15' -> (8, ..., 15); '1,5,9-10' -> (1, 5, 9, 10)."""
    out: set[int] = set()
    try:
        for part in text.split(","):
            lo, dash, hi = part.strip().partition("-")
            first, last = int(lo), int(hi) if dash else int(lo)
            if last < first or last - first >= 1 << 16:
                raise ValueError
            out.update(range(first, last + 1))
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected ranks as 3, 8-15 or 1,5,9-10") from None
    return tuple(sorted(out))


def parse_rank_step(text: str, flag: str) -> tuple[tuple[int, ...], int]:
    """'3@40' -> ((3,), 40); '8-15@200' -> ((8, ..., 15), 200): a node of 8 ranks."""
    try:
        r, s = text.split("@")
        return parse_ranks(r, flag), int(s)
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected RANKS@STEP, e.g. 3@40 or 8-15@200 (a node's ranks)") from None


def memory(cfg: SimConfig, rank: int) -> schema.Mem:
    """A rank's memory figures: the pretend model's fp32 Adam state, sharded by the world size
    under fsdp."""
    full = cfg.params * 4
    shard = full // cfg.ranks if cfg.strategy == "fsdp" else full
    return schema.Mem(
        params_bytes=shard,
        grads_bytes=shard,
        optim_bytes=2 * shard,
        params_full_bytes=full,
        grads_full_bytes=full,
        optim_full_bytes=2 * full,
        cuda_allocated_bytes=4 * shard + 2_000_000_000 + rank * 1_000_000,
        cuda_reserved_bytes=4 * shard + 3_000_000_000,
        cuda_peak_bytes=4 * shard + 6_000_000_000,
    )


def step_period(cfg: SimConfig, step: int) -> float:
    """Seconds the job's step ``step`` takes: 1/rate, and from step 20 with a straggler 30 %
    more on every rank (the others wait for it in their collective)."""
    base = 1.0 / cfg.rate_hz
    return base * 1.3 if cfg.straggler is not None and step >= 20 else base


def step_message(cfg: SimConfig, rank: int, step: int, jitter: float, extra_s: float, loss_noise: float) -> schema.Step:
    """One rank's step: ``jitter`` (s) on its step and data time, ``extra_s`` of straggling."""
    base = 1.0 / cfg.rate_hz
    step_s = step_period(cfg, step)
    data = 0.05 * base + abs(jitter)
    fwd = 0.3 * base
    data_x = extra_s if cfg.straggler_kind == "data" else 0.0
    fwd_x = extra_s - data_x
    self_s = data + data_x + fwd + fwd_x
    return schema.Step(
        step=step,
        epoch=step // 1000,
        loss=4.0 * math.exp(-step / 300) + 0.5 + loss_noise,
        samples=32,
        samples_total=32 * step,
        step_s=step_s + jitter,
        data_s=data + data_x,
        forward_s=fwd + fwd_x,
        backward_s=0.45 * base,
        optimizer_s=0.05 * base,
        comm_s=max(0.0, step_s - self_s - 0.5 * base),
        self_s=self_s,
        lr=3e-4,
        mono=time.monotonic(),
        mem=memory(cfg, rank),
    )


def system_sample(rank: int, rng: random.Random) -> schema.System:
    """A rank's once-a-second system sample."""
    return schema.System(
        cpu_pct=100.0 + rng.uniform(-5, 5),
        host_cpu_pct=60.0 + rng.uniform(-5, 5),
        rss_bytes=6 << 30,
        gpu_util_pct=95.0 + rng.uniform(-3, 3),
        gpu_mem_used_bytes=60 << 30,
        gpu_mem_total_bytes=80 << 30,
        gpu_temp_c=65.0 + rank % 7,
        gpu_power_w=600.0,
        gpu_sm_clock_mhz=1980.0,
    )


# A clock reading of full precision, as time.time() and time.monotonic() give: fixed, so that
# the projection is the same figure in every process (the start line's and a test's; a reading
# of the clock varied by a digit or two).
_TYPICAL_T = 1764600000.123456
_TYPICAL_MONO = 3600.123456789


def log_line_bytes(cfg: SimConfig, *, after_s: float = 3600.0, run_id: str = "sim-20260101-000000-abcd") -> dict[str, int]:
    """Bytes of one line of each kind the job sends each rank, as the hub records them (JSON,
    with its hub seq and a newline), for the highest rank ``after_s`` seconds into the run."""
    rng = random.Random(cfg.seed)
    rank = cfg.ranks - 1
    step = int(cfg.rate_hz * after_s)
    msgs = {
        "step": step_message(cfg, rank, step, 0.01 / cfg.rate_hz, 0.0, 0.012345),
        "heartbeat": schema.Heartbeat(step=step, phase="forward", mono=_TYPICAL_MONO),
        "system": system_sample(rank, rng),
    }
    seq = int((cfg.rate_hz + 2) * after_s)
    out = {}
    for kind, m in msgs.items():
        m.run, m.rank, m.seq, m.t, m.hseq = run_id, rank, seq, _TYPICAL_T, seq * cfg.ranks
        if hasattr(m, "mono"):
            m.mono = _TYPICAL_MONO
        out[kind] = len(schema.encode_json(m)) + 1
    return out


def log_bytes_per_minute(cfg: SimConfig) -> int:
    """About how fast the hub's log grows for this job: every rank's steps, and its heartbeat
    and system sample once a second."""
    b = log_line_bytes(cfg)
    return int(60 * cfg.ranks * (cfg.rate_hz * b["step"] + b["heartbeat"] + b["system"]))


class SimulatedJob:
    """Publishes for every rank from one thread, over one shared PUSH socket per 256 ranks."""

    def __init__(self, cfg: SimConfig, endpoint: str, run_id: str, *, context: zmq.Context | None = None) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.ctx = context or zmq.Context.instance()
        self.reporters: list[Reporter] = []
        for r in range(cfg.ranks):
            ident = RankIdentity(
                rank=r,
                local_rank=r % cfg.ranks_per_node,
                world_size=cfg.ranks,
                node=r // cfg.ranks_per_node,
                host=f"node{r // cfg.ranks_per_node:03d}",
                restart=0,
            )
            rep = Reporter(None, run=run_id, identity=ident, heartbeat_s=0)
            rep.endpoint = endpoint
            self.reporters.append(rep)
        self._socks = []
        for i in range(0, cfg.ranks, 256):
            s = self.ctx.socket(zmq.PUSH)
            s.setsockopt(zmq.SNDHWM, 200_000)
            s.setsockopt(zmq.LINGER, 2000)
            s.connect(endpoint)
            self._socks.append(s)
        self.step = 0
        self.alive = [True] * cfg.ranks
        self.done = False
        self.t_start = time.time()

    def _sock(self, rank: int) -> zmq.Socket:
        return self._socks[rank // 256]

    def hello(self) -> None:
        cfg = self.cfg
        for rep in self.reporters:
            rep.send(
                schema.Hello(
                    local_rank=rep.identity.local_rank,
                    world_size=cfg.ranks,
                    node=rep.identity.node,
                    host=rep.identity.host,
                    pid=100_000 + rep.rank,
                    strategy=cfg.strategy,
                    backend="nccl",
                    device=f"cuda:{rep.identity.local_rank}",
                    device_name="Simulated H100",
                    device_mem_bytes=80 << 30,
                    torch_version="simulated",
                    params_count=cfg.params,
                    params_bytes=cfg.params * 4,
                    source="simulate",
                    pardash_version=__version__,
                    # (what a compare of two simulated runs says differs: --straggler 3 read as nothing)
                    config={"steps": cfg.steps or None, "simulated": True, "rate": cfg.rate_hz,
                            **{name: _fault_text(getattr(cfg, name)) for name in ("straggler", *FAULTS) if getattr(cfg, name) is not None},
                            **({"straggler_kind": cfg.straggler_kind} if cfg.straggler is not None else {})},
                ),
                self._sock(rep.rank),
            )

    def tick(self) -> None:
        """One synchronous step of every live rank (plus heartbeats and system samples)."""
        cfg, rng = self.cfg, self.rng
        s = self.step + 1  # steps are numbered from 1, as the trainer's
        base = 1.0 / cfg.rate_hz
        stalled = cfg.stall is not None and s >= cfg.stall[1]
        if cfg.crash is not None and s == cfg.crash[1] and any(self.alive[r] for r in cfg.crash[0]):
            self._crash(cfg.crash[0])
            return
        slow = 0.3 * base if cfg.straggler is not None and s >= 20 else 0.0
        if not stalled:
            for rep in self.reporters:
                r = rep.rank
                if not self.alive[r]:
                    continue
                extra = slow if slow and r in cfg.straggler else 0.0
                msg = step_message(cfg, r, s, rng.gauss(0, 0.01 * base), extra, rng.gauss(0, 0.02))
                if cfg.nan is not None and s >= cfg.nan[1] + (r not in cfg.nan[0]):
                    # As a rank's reporter says it: a warning as it turns, then steps without a
                    # loss (JSON has no NaN) while it is not finite.
                    msg.loss = None
                    if s == cfg.nan[1] + (r not in cfg.nan[0]):
                        rep.send(schema.Event(name="warning", step=s, message=(
                            f"loss is nan at step {s}: diverged, or a spike (steps go on without a loss while it is not finite)")),
                            self._sock(r))  # fmt: skip
                rep.send(msg, self._sock(r))
                rep.last_step = s
            self.step += 1
        if cfg.steps and self.step >= cfg.steps:
            for rep in self.reporters:
                if self.alive[rep.rank]:
                    rep.send(schema.Event(name="exit", code=0, step=rep.last_step), self._sock(rep.rank))
                    self.alive[rep.rank] = False
            self.done = True

    def beat(self) -> None:
        """Heartbeats and system samples, about once a second."""
        cfg = self.cfg
        stalled = cfg.stall is not None and self.step + 1 >= cfg.stall[1]
        for rep in self.reporters:
            r = rep.rank
            if not self.alive[r]:
                continue
            phase = ("data" if r in cfg.stall[0] else "comm") if stalled and cfg.stall else "forward"
            rep.send(schema.Heartbeat(step=rep.last_step, phase=phase, mono=time.monotonic()), self._sock(r))
            rep.send(system_sample(r, self.rng), self._sock(r))

    def _crash(self, ranks: tuple[int, ...]) -> None:
        for rank in ranks:
            if not self.alive[rank]:
                continue
            rep = self.reporters[rank]
            rep.send(
                schema.Event(
                    name="error",
                    message="RuntimeError: simulated crash",
                    traceback="Traceback (most recent call last):\n  ...\nRuntimeError: simulated crash",
                    step=self.step,  # an error carries the last step completed
                ),
                self._sock(rank),
            )
            rep.send(schema.Event(name="exit", code=1, step=self.step + 1), self._sock(rank))  # the step it died in
            self.alive[rank] = False
        for other in self.reporters:
            if self.alive[other.rank]:
                other.send(schema.Event(name="exit", code=-15, step=other.last_step), self._sock(other.rank))
                self.alive[other.rank] = False
        self.done = True

    def run(self, stop=lambda: False) -> None:
        """Publish in real time until ``stop()``, the step count, or a crash."""
        self.hello()
        next_step = time.monotonic()
        next_beat = next_step
        while not stop() and not self.done:
            now = time.monotonic()
            if now >= next_beat:
                self.beat()
                next_beat = now + 1.0
            if now >= next_step:
                self.tick()
                period = step_period(self.cfg, self.step + 1)  # as long as the next step says it took
                next_step += period
                if next_step < now - 1.0:  # fell behind by a second: do not try to catch up
                    next_step = now + period
            time.sleep(max(0.0, min(next_step, next_beat) - time.monotonic()))

    def close(self) -> None:
        for s in self._socks:
            s.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m pardash.telemetry.simulate --endpoint E --run-id R --config JSON``: publish
    until SIGTERM, the step count, or a crash (the CLI runs this in a process of its own so
    the hub and the viewer each get their own interpreter)."""
    import argparse
    import json
    import signal
    import threading

    p = argparse.ArgumentParser(prog="pardash simulate (ranks)")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--run-id", required=True)
    p.add_argument("--config", required=True, help="SimConfig fields as JSON")
    ns = p.parse_args(argv)
    fields = json.loads(ns.config)
    for key in FAULTS:
        if fields.get(key) is not None:
            fields[key] = tuple(fields[key])
    job = SimulatedJob(SimConfig(**fields), ns.endpoint, ns.run_id)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        job.run(stop.is_set)
    finally:
        job.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
