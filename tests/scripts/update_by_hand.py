"""Trains with no optimizer: the update by hand, each gradient all-reduced by the script
(``dist.all_reduce``) and stepped as ``p.data -= lr * p.grad``. ``python update_by_hand.py
--steps N [--slow-rank R --slow-s S] [--reset zero_grad|zero_|none] [--accum K]``: rank R
sleeps S seconds loading each batch; the gradients are reset by ``m.zero_grad()`` before the
backward (the default), by ``p.grad.zero_()`` after the update, or set to None after it; K
micro-batches' gradients are accumulated for each update (1)."""

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=50)
ap.add_argument("--lr", type=float, default=0.05)
ap.add_argument("--slow-rank", type=int, default=-1)
ap.add_argument("--slow-s", type=float, default=0.0)
ap.add_argument("--reset", choices=["zero_grad", "zero_", "none"], default="zero_grad")
ap.add_argument("--accum", type=int, default=1)
a = ap.parse_args()
dist.init_process_group("gloo")
rank, ws = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 1))
w = torch.randn(20, 1)
for step in range(a.steps):
    if a.reset == "zero_grad":
        m.zero_grad()
    total = 0.0
    for _ in range(a.accum):
        if rank == a.slow_rank:
            time.sleep(a.slow_s)  # its data path
        x = torch.randn(128, 20)
        y = x @ w
        loss = ((m(x) - y) ** 2).mean()
        loss.backward()
        total += loss.item()
    with torch.no_grad():
        for p in m.parameters():
            dist.all_reduce(p.grad)
            p.grad /= ws
            p.data -= a.lr * p.grad
            if a.reset == "zero_":
                p.grad.zero_()
            elif a.reset == "none":
                p.grad = None
    if rank == 0:
        print(f"step {step} loss {total:.6f}", flush=True)
dist.destroy_process_group()
