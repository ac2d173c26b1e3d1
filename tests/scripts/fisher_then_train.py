"""Gradient statistics before training (EWC/SNIP style): 30 forward and backward passes whose
squared gradients are summed and all-reduced, the parameters untouched, then 40 steps of SGD
with the gradients all-reduced by hand. 40 steps, not 70."""

import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.SGD(m.parameters(), lr=0.01)


def batch():
    x = torch.randn(32, 20)
    return x, x.sum(1, keepdim=True)


fisher = [torch.zeros_like(p) for p in m.parameters()]
for i in range(30):
    x, y = batch()
    m.zero_grad()
    ((m(x) - y) ** 2).mean().backward()
    for f, p in zip(fisher, m.parameters()):
        f += p.grad**2
    for f in fisher:
        dist.all_reduce(f)
for i in range(40):
    x, y = batch()
    opt.zero_grad()
    loss = ((m(x) - y) ** 2).mean()
    loss.backward()
    for p in m.parameters():
        dist.all_reduce(p.grad)
    opt.step()
dist.destroy_process_group()
