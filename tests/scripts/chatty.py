"""Trains STEPS steps of a tiny DDP model, each rank saying each step on stderr and stdout (as
a logger or a progress bar does), 20 ms a step.

``chatty.py STEPS GO AT``: after its step AT each rank waits for the file GO before the rest, so
a test does what it does mid-run while the job waits for it (not in a time budget of steps).
``chatty.py STEPS GO AT CRASH``: the job's first attempt also crashes after its step CRASH
(torchrun's restart, the file there already, trains all STEPS)."""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
go, at = (sys.argv[2], int(sys.argv[3])) if len(sys.argv) > 3 else (None, 0)
crash = int(sys.argv[4]) if len(sys.argv) > 4 and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0" else 0
dist.init_process_group("gloo")
rank = dist.get_rank()
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, steps + 1):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
    print(f"rank {rank} step {step}", file=sys.stderr, flush=True)
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(0.02)
    if go is not None and step == at:
        while not os.path.exists(go):
            time.sleep(0.05)
    if step == crash:
        raise RuntimeError(f"crashed after step {crash}, as told")
dist.destroy_process_group()
