"""DDP on gloo that skips its optimizer step on a non-finite gradient norm, its ``zero_grad``
at the top of the loop, after the forward and before the backward (a review's script, made
small). ``python skip_zero_grad_first.py [--iters N] [--every K]``: every K-th iteration's loss
is multiplied by inf, and its update skipped; rank 0 prints what it counted."""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--iters", type=int, default=30)
ap.add_argument("--every", type=int, default=7)
a = ap.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(0)
ds = TensorDataset(torch.randn(512, 16, generator=g), torch.randint(0, 4, (512,), generator=g))
loader = DataLoader(ds, batch_size=16, sampler=DistributedSampler(ds), drop_last=True)
it = taken = skipped = 0
while it < a.iters:
    for x, y in loader:
        it += 1
        loss = F.cross_entropy(model(x), y)
        if it % a.every == 0:
            loss = loss * float("inf")
        opt.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        if not torch.isfinite(norm):
            skipped += 1
            continue
        opt.step()
        taken += 1
        if it >= a.iters:
            break
if rank == 0:
    print(f"done: {it} iterations, {taken} optimizer steps, {skipped} skipped", flush=True)
dist.destroy_process_group()
