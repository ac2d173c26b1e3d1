"""Trains until stopped; its SIGTERM handler ends it with sys.exit(1) and no error of its own
(a script that saves a checkpoint on preemption, say, then exits non-zero)."""

import signal
import sys

import torch
import torch.distributed as dist
from torch import nn

signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
dist.init_process_group("gloo")
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
while True:
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
