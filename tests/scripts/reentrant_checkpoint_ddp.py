"""DDP over a model in a reentrant activation checkpoint as a whole
(``DDP(checkpoint_wrapper(model, checkpoint_impl=REENTRANT))``): the backward recomputes the
model and backpropagates through it in a nested ``torch.autograd.backward``, where DDP's hooks
run and where it waits for its all-reduces. ``--slow-rank R --slow-s S``: rank R sleeps S
seconds in its forward each step (its peers wait for it in DDP's all-reduces)."""

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--slow-rank", type=int, default=-1)
p.add_argument("--slow-s", type=float, default=0.0)
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 1))

    def forward(self, x):
        if rank == args.slow_rank:
            time.sleep(args.slow_s)  # (run again by the backward's recompute)
        return self.layers(x)


model = DDP(checkpoint_wrapper(Net(), checkpoint_impl=CheckpointImpl.REENTRANT))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(rank)
for step in range(args.steps):
    x = torch.randn(16, 32, generator=g).requires_grad_(True)  # (a reentrant checkpoint needs an input with grad)
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.barrier()
dist.destroy_process_group()
