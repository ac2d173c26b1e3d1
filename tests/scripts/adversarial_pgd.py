"""Adversarial training with DDP: each batch's perturbation found by 20 steps of PGD (each a
forward and backward through the model, the parameters untouched), then one optimizer step on
the perturbed batch. ``python adversarial_pgd.py [ITERATIONS] [--zero-each]`` (30): that many
steps; ``--zero-each`` zeroes the gradients before each PGD pass (else the PGD passes' are
accumulated, and zeroed before the training pass)."""

import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

args = [a for a in sys.argv[1:] if a != "--zero-each"]
zero_each = "--zero-each" in sys.argv
iterations = int(args[0]) if args else 30
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
eps, alpha = 0.1, 0.02
for it in range(iterations):
    x, y = torch.randn(16, 20), torch.randint(0, 4, (16,))
    delta = torch.zeros_like(x, requires_grad=True)
    for k in range(20):
        if zero_each:
            opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x + delta), y)
        loss.backward()
        delta.data = (delta + alpha * delta.grad.sign()).clamp(-eps, eps)
        delta.grad.zero_()
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x + delta.detach()), y)
    loss.backward()
    opt.step()
dist.destroy_process_group()
