"""Trains with no optimizer: the update by hand, each gradient all-reduced by the script
(``dist.all_reduce``) and stepped as ``p.data -= lr * p.grad``. ``python update_by_hand.py
--steps N [--slow-rank R --slow-s S]``: rank R sleeps S seconds loading each batch."""

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
a = ap.parse_args()
dist.init_process_group("gloo")
rank, ws = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 1))
w = torch.randn(20, 1)
for step in range(a.steps):
    if rank == a.slow_rank:
        time.sleep(a.slow_s)  # its data path
    x = torch.randn(128, 20)
    y = x @ w
    loss = ((m(x) - y) ** 2).mean()
    m.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in m.parameters():
            dist.all_reduce(p.grad)
            p.grad /= ws
            p.data -= a.lr * p.grad
    if rank == 0:
        print(f"step {step} loss {loss.item():.6f}", flush=True)
dist.destroy_process_group()
