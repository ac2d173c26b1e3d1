"""Trains without torch.optim: a hand-written SGD update, so no optimizer step is ever seen."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(nn.Linear(8, 2))
for i in range(25):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
            p.grad = None
print("done", flush=True)
dist.destroy_process_group()
