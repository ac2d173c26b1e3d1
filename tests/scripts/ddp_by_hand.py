"""Data parallel by hand: no DDP wrapper, the gradients all-reduced by the script itself
(torch.distributed.all_reduce after backward). ``python ddp_by_hand.py [SECONDS]``: rank 1 sleeps
that long in its data path each step."""

import sys, time, torch, torch.distributed as dist
from torch import nn
dist.init_process_group("gloo"); rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
slow = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
for step in range(1, 81):
    if rank == 1 and slow:
        time.sleep(slow)  # its data path
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step(); opt.zero_grad()
    if rank == 0 and step % 20 == 0:
        print(f"step {step} loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
