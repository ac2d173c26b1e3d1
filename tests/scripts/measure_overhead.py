"""What the zero-code hooks cost per training step.

    python tests/scripts/measure_overhead.py [--steps 2000]

1. The hooks' own work per step, driven directly (the calls one step makes: root forward
   pre/post, backward entry, optimizer pre/post, the step's publication), with a reporter that
   drops everything, then with a real Reporter sending to a real socket.
2. ``account`` (memory), the expensive part, on a small and a larger model, and how often the
   instrumentation then calls it (every step while under 1% of the step time and the steps
   0.1 s apart: ``memory.measure_every``).
3. End to end: a tiny CPU training loop plain and instrumented, interleaved, best of many
   short runs (other processes share the cores), and the per-submodule cost of having global
   module hooks at all (PyTorch's slow call path plus our depth increment).

Prints microseconds and ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import threading
import time

import torch
import zmq
from torch import nn

from pardash.telemetry import memory
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

    def set_phase(self, p, waits_in=""):
        pass


class NoMemory(memory.MemoryProbe):
    def measure(self, *a, **k):
        return None


def drive(inst: Instrument, model: nn.Module, sub: nn.Module, opt, steps: int) -> float:
    """Make the hook calls of ``steps`` training steps (a root with one submodule call)."""
    x = torch.randn(4, 8)
    loss = torch.tensor(1.0)
    args, kwargs = (x,), {}
    t0 = time.perf_counter()
    for _ in range(steps):
        inst._forward_pre(model, args)
        inst._forward_pre(sub, args)
        inst._forward_post(sub, args, kwargs, x)
        inst._forward_post(model, args, kwargs, x)
        inst._wrap_backward(lambda *a, **k: None)(loss)
        inst._optimizer_pre(opt, (), {})
        inst._optimizer_post(opt, (), {})
    return (time.perf_counter() - t0) / steps


def best_of(fn, repeats: int) -> float:
    return min(fn() for _ in range(repeats))


def hooks_cost(steps: int) -> None:
    ctx = zmq.Context.instance()
    sink = ctx.socket(zmq.PULL)
    port = sink.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()

    def drain():
        while not stop.is_set():
            if sink.poll(50):
                while sink.poll(0):
                    sink.recv()

    threading.Thread(target=drain, daemon=True).start()
    real = Reporter(f"tcp://127.0.0.1:{port}", run="bench", heartbeat_s=0)
    for name, rep in (("hooks alone", NullReporter()), ("hooks + publish", real)):
        sub = nn.Linear(8, 8)
        model = nn.Sequential(sub)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        inst = Instrument(rep)
        inst.probe = NoMemory()
        us = best_of(lambda: drive(inst, model, sub, opt, steps), 5) * 1e6
        print(f"  {name:16} {us:7.1f} us/step")
    stop.set()
    real.close(linger_ms=0)


def memory_cost() -> None:
    for name, model in (
        ("MLP, 6 tensors", nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 128), nn.Linear(128, 10))),
        ("24 blocks, 146 tensors", nn.Sequential(*[nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 256), nn.Linear(256, 64)) for _ in range(24)], nn.Linear(64, 2))),
    ):
        opt = torch.optim.AdamW(model.parameters())
        model(torch.randn(2, model[0].in_features if isinstance(model[0], nn.Linear) else 64)).sum().backward()
        opt.step()
        probe = memory.MemoryProbe()
        costs = []
        for _ in range(100):  # account() caches between full recounts: the mean is what a step pays
            probe.measure(model, [opt], force=True)
            costs.append(probe.cost_s)
        mean_us = sum(costs) / len(costs) * 1e6
        every = [memory.measure_every(mean_us / 1e6, step_s) for step_s in (0.002, 0.01, 0.1)]
        print(f"  account(), {name:24} first {costs[0] * 1e6:7.1f} us, mean {mean_us:6.1f} us"
              f"  -> every {every[0]} step(s) at 2 ms/step, {every[1]} at 10 ms, {every[2]} at 100 ms")


def train(model, opt, xs, ys, steps):
    t0 = time.perf_counter()
    for i in range(steps):
        nn.functional.cross_entropy(model(xs[i % 8]), ys[i % 8]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (time.perf_counter() - t0) / steps


def end_to_end(repeats: int) -> None:
    xs, ys = [torch.randn(8, 16) for _ in range(8)], [torch.randint(0, 4, (8,)) for _ in range(8)]
    extra = {}
    for layers in (2, 64):
        model = nn.Sequential(*[nn.Linear(16, 16) for _ in range(layers - 1)], nn.Linear(16, 4))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        inst = Instrument(NullReporter())
        inst.probe = NoMemory()
        plain = hooked = float("inf")
        for _ in range(repeats):
            plain = min(plain, train(model, opt, xs, ys, 50))
            inst.install()
            hooked = min(hooked, train(model, opt, xs, ys, 50))
            inst.uninstall()
        extra[layers] = hooked - plain
        print(f"  {layers:>2} layers: plain {plain * 1e6:7.1f} us/step, instrumented {hooked * 1e6:7.1f} us/step ({hooked / plain:.3f}x)")
    print(f"  per submodule call: {(extra[64] - extra[2]) / 62 * 1e6:+.2f} us")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=60)
    a = p.parse_args()
    torch.set_num_threads(1)
    print("the hooks' own work (driven directly):")
    hooks_cost(a.steps)
    print("memory accounting:")
    memory_cost()
    print("end to end (best of short runs):")
    end_to_end(a.repeats)


if __name__ == "__main__":
    main()
