"""Trains a tiny DDP model for EPOCHS epochs, each over a DataLoader made anew (shuffled, no
sampler: each rank goes through the whole dataset), and rank 0 validates it after each epoch
under torch.no_grad() without model.eval() (a model with no dropout or BatchNorm): two
batches, each SLOW seconds to load. The automatic instrumentation counts the epochs and
publishes each validation as an ``eval`` event."""

import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, default_collate

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
slow = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05


def slow_collate(items):
    time.sleep(slow)  # the validation set's loading
    return default_collate(items)


dist.init_process_group("gloo")
torch.manual_seed(0)
data = TensorDataset(torch.randn(32, 8), torch.randn(32, 2))
held = TensorDataset(torch.randn(16, 8), torch.randn(16, 2))
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(epochs):
    for x, y in DataLoader(data, batch_size=8, shuffle=True):
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    if dist.get_rank() == 0:
        with torch.no_grad():
            loss = sum(nn.functional.mse_loss(model.module(x), y).item() for x, y in DataLoader(held, batch_size=8, collate_fn=slow_collate))
        print(f"epoch {epoch} validation loss {loss / 2:.4f}", flush=True)
dist.destroy_process_group()
