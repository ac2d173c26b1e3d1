"""What the zero-code hooks cost per training step, against the same loop without them.

    python tests/scripts/measure_overhead.py [--steps 400] [--repeats 7]

Runs a tiny CPU training loop (so the hooks' cost is not hidden in the compute) plain and
instrumented, interleaved, and prints the best-of-repeats difference per step, split into:
the hooks alone (reporter that drops everything, memory off), + publishing through a real
Reporter to a real socket, + memory accounting; and the cost per submodule call, from a model
of 64 layers against one of 2. Prints ratios and microseconds; asserts nothing.
"""

from __future__ import annotations

import argparse
import threading
import time

import torch
import zmq
from torch import nn

from pardash.telemetry import api
from pardash.telemetry.env import RankIdentity
from pardash.telemetry.reporter import Reporter
from pardash.trainer.instrument import Instrument


class NullReporter:
    enabled = True
    last_step = 0
    identity = RankIdentity(rank=0, local_rank=0, world_size=1, node=0, host="", restart=0)

    def step(self, **f):
        return True

    def hello(self, **f):
        return True

    def event(self, *a, **f):
        return True

    def set_phase(self, p):
        pass


class NoMemory(api.MemoryProbe):
    def measure(self, *a, **k):
        return None


def loop(model, opt, xs, ys, steps):
    loss_fn = nn.functional.cross_entropy
    t0 = time.perf_counter()
    for i in range(steps):
        loss = loss_fn(model(xs[i % 8]), ys[i % 8])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (time.perf_counter() - t0) / steps


def build(layers):
    mods = [nn.Linear(16, 16) for _ in range(layers - 1)] + [nn.Linear(16, 4)]
    model = nn.Sequential(*mods)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    torch.set_num_threads(1)
    xs, ys = [torch.randn(8, 16) for _ in range(8)], [torch.randint(0, 4, (8,)) for _ in range(8)]

    ctx = zmq.Context.instance()
    sink = ctx.socket(zmq.PULL)
    port = sink.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()

    def drain():
        while not stop.is_set():
            if sink.poll(50):
                sink.recv()

    threading.Thread(target=drain, daemon=True).start()
    real = Reporter(f"tcp://127.0.0.1:{port}", run="bench", heartbeat_s=0)

    def variant(name, layers):
        model, opt = build(layers)
        if name == "plain":
            return lambda: loop(model, opt, xs, ys, args.steps), None
        inst = Instrument(real if name != "hooks" else NullReporter())
        if name != "memory":
            inst.probe = NoMemory()

        def run():
            inst.install()
            try:
                return loop(model, opt, xs, ys, args.steps)
            finally:
                inst.uninstall()

        return run, inst

    results = {}
    for layers in (2, 64):
        runs = {name: variant(name, layers) for name in ("plain", "hooks", "publish", "memory")}
        best = {name: float("inf") for name in runs}
        for _ in range(args.repeats):
            for name, (run, _) in runs.items():
                best[name] = min(best[name], run())
        results[layers] = best
        probe = runs["memory"][1].probe
        print(f"{layers:>2} layers: plain {best['plain'] * 1e6:8.1f} us/step")
        for name in ("hooks", "publish", "memory"):
            extra = best[name] - best["plain"]
            print(f"    + {name:8} {extra * 1e6:+8.1f} us/step  ({best[name] / best['plain']:.3f}x)")
        print(f"    account() last call {probe.cost_s * 1e6:.1f} us, measured every {probe.every} step(s)")
    per_module = ((results[64]["hooks"] - results[64]["plain"]) - (results[2]["hooks"] - results[2]["plain"])) / 62
    print(f"per submodule call (forward): {per_module * 1e6:+.2f} us")
    stop.set()
    real.close(linger_ms=0)


if __name__ == "__main__":
    main()
