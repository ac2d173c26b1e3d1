"""A DDP script whose rank 1 is slow between its steps, one way or another. ``python
between_steps.py MODE``:

- ``own``: a fast DataLoader (num_workers=0, a random row a sample) on every rank, and rank 1
  sleeps 30 ms after its optimizer step, in its own code (review 308's logging, a checkpoint of
  its own): its data time is its own work, none of it in the DataLoader.
- ``loader``: the same DataLoader, rank 1's 15 ms slower a sample in ``__getitem__`` (batches
  of 2): its data time is its DataLoader's.
- ``none``: no DataLoader, batches made in the loop; rank 1 sleeps 30 ms there.
- ``hang``: after step 10, rank 0 hangs in its DataLoader (``__getitem__`` of its next batch)
  and rank 1 in its own code (a sleep after its optimizer step), each for an hour.

40 steps: the straggler detector's 10 warm-up steps and the two windows a verdict needs."""

import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

STEPS, SLOW_S, HANG_AFTER = 40, 0.03, 10
mode = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()


class Rows(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        if mode == "loader" and rank == 1:
            time.sleep(SLOW_S / 2)
        if mode == "hang" and rank == 0 and i >= 2 * HANG_AFTER:  # (the batch of step HANG_AFTER + 1)
            time.sleep(3600)
        return torch.randn(16), torch.randn(1)


def batches():
    if mode == "none":
        while True:
            if rank == 1:
                time.sleep(SLOW_S)
            yield torch.randn(2, 16), torch.randn(2, 1)
    yield from DataLoader(Rows(), batch_size=2, num_workers=0)


torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step, (x, y) in zip(range(STEPS), batches()):
    loss = F.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if mode == "own" and rank == 1:
        time.sleep(SLOW_S)
    if mode == "hang" and rank == 1 and step + 1 == HANG_AFTER:
        time.sleep(3600)
dist.destroy_process_group()
