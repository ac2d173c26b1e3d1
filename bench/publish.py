"""Rank-side cost of publishing one step: pardash's Reporter against logging the same scalars
with torch.utils.tensorboard's SummaryWriter, in the same process and run.

Target (issue 2): p50 at most 10 us, at least 50x cheaper than SummaryWriter.
The reporter publishes to a real hub socket (PUSH to a PULL that drains in a thread), so the
measured cost is the real one: build the struct, encode, hand to ZeroMQ.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time

import zmq

from pardash.telemetry import schema
from pardash.telemetry.env import RankIdentity
from pardash.telemetry.reporter import Reporter

from .common import Row, pct

N = 20_000
MEM = schema.Mem(params_bytes=1 << 20, grads_bytes=1 << 20, optim_bytes=2 << 20, params_full_bytes=4 << 20, rss_bytes=1 << 30)
SCALARS = ("loss", "step_s", "data_s", "forward_s", "backward_s", "optimizer_s", "comm_s", "self_s", "lr", "params_bytes", "grads_bytes", "optim_bytes")


def _time_pardash(n: int) -> list[float]:
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()

    def drain():
        while not stop.is_set():
            if pull.poll(50):
                while True:
                    try:
                        pull.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    ident = RankIdentity(rank=0, local_rank=0, world_size=1, node=0, host="bench", restart=0)
    rep = Reporter(f"tcp://127.0.0.1:{port}", run="bench", identity=ident, heartbeat_s=0)
    out = []
    clock = time.perf_counter_ns
    for i in range(n):
        t0 = clock()
        rep.step(step=i, epoch=0, loss=1.0, samples=32, step_s=0.01, data_s=0.001, forward_s=0.003, backward_s=0.004,
                 optimizer_s=0.001, comm_s=0.001, self_s=0.004, lr=3e-4, mem=MEM)  # fmt: skip
        out.append((clock() - t0) / 1e3)
    rep.close()
    stop.set()
    t.join()
    pull.close(0)
    return out


def _time_tensorboard(n: int) -> list[float]:
    from torch.utils.tensorboard import SummaryWriter

    with tempfile.TemporaryDirectory() as d:
        w = SummaryWriter(d)
        out = []
        clock = time.perf_counter_ns
        for i in range(n):
            t0 = clock()
            for name in SCALARS:
                w.add_scalar(name, 1.0, i)
            out.append((clock() - t0) / 1e3)
        w.close()
    return out


def run() -> tuple[list[Row], str]:
    _time_pardash(2000)  # warm up both paths
    _time_tensorboard(200)
    pd = _time_pardash(N)
    tb = _time_tensorboard(N // 4)
    p50, p99 = pct(pd, 50), pct(pd, 99)
    t50, t99 = pct(tb, 50), pct(tb, 99)
    rows = [
        Row("publish one step", "p50 us", f"{p50:.1f}", f"{t50:.1f} (SummaryWriter, {len(SCALARS)} scalars)", f"{t50 / p50:.0f}x cheaper", "<= 10 us, >= 50x", p50 <= 10 and t50 / p50 >= 50),
        Row("publish one step", "p99 us", f"{p99:.1f}", f"{t99:.1f}", f"{t99 / p99:.0f}x cheaper", "", None),
    ]
    note = f"publish: {N} steps through a real PUSH socket to a draining PULL; SummaryWriter logs the same {len(SCALARS)} scalars per step ({N // 4} steps)."
    return rows, note


if __name__ == "__main__":
    from .common import standalone

    sys.exit(standalone(__spec__.name, __doc__, lambda _ns: run()))
