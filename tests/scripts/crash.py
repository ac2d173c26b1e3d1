"""Trains three steps, then rank 1 raises from inside the backward of a custom function."""

import torch
import torch.distributed as dist
from torch import nn


class Explode(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise ValueError("boom in backward")


def train_step(model, opt, step, rank):
    out = model(torch.randn(4, 8)).sum()
    if step == 3 and rank == 1:
        out = Explode.apply(out)
    out.backward()
    opt.step()
    opt.zero_grad()


dist.init_process_group("gloo")
rank = dist.get_rank()
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 6):
    train_step(model, opt, step, rank)
dist.destroy_process_group()
