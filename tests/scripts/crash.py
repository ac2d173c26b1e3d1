"""Trains three steps, then the last rank (rank 1 of two, rank 0 of one) raises from inside the
backward of a custom function."""

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


def train_step(model, opt, step, last):
    out = model(torch.randn(4, 8)).sum()
    if step == 3 and last:
        out = Explode.apply(out)
    out.backward()
    opt.step()
    opt.zero_grad()


dist.init_process_group("gloo")
last = dist.get_rank() == dist.get_world_size() - 1
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 6):
    train_step(model, opt, step, last)
dist.destroy_process_group()
