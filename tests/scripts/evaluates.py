"""Trains STEPS steps of a tiny DDP model, 40 ms a step, and evaluates it every EVERY steps
(model.eval() and forwards without grad, as a validation loop does): the automatic
instrumentation publishes each evaluation as an ``eval`` event with its duration."""

import sys
import time

import torch
import torch.distributed as dist
from torch import nn

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
every = int(sys.argv[2]) if len(sys.argv) > 2 else 10
dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, steps + 1):
    model(torch.randn(4, 8)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    time.sleep(0.04)
    if step % every == 0:
        model.eval()
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn(4, 8))
                time.sleep(0.01)
        model.train()
dist.destroy_process_group()
