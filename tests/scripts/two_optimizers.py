"""DDP with two optimizers stepped back to back (AdamW for the body, SGD for the head): one
training step per iteration, though two optimizer.step() calls."""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=8)
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
body, head = nn.Sequential(nn.Linear(16, 32), nn.ReLU()), nn.Linear(32, 4)
model = DDP(nn.Sequential(body, head))
opt_body = torch.optim.AdamW(body.parameters(), lr=1e-3)
opt_head = torch.optim.SGD(head.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(rank)
for step in range(1, args.steps + 1):
    x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt_body.step()
    opt_head.step()
    opt_body.zero_grad()
    opt_head.zero_grad()
    if rank == 0:
        print(f"step {step} loss {loss.item():.6f}", flush=True)
dist.destroy_process_group()
