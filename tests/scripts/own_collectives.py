"""Collectives a script calls itself, beside DDP's. ``python own_collectives.py MODE``:

- ``barrier``: rank 0 evaluates (model.eval(), no_grad, 30 ms) after every step, then every
  rank waits in a barrier: rank 1 waits there for rank 0, and is no straggler. The barrier is
  ``dist.barrier()`` after an odd step, ``dist.barrier(None, True).wait()`` after an even one.
- ``gather``: a contrastive loss all-gathers every rank's embeddings (``dist.all_gather``) in
  the forward, and rank 1 sleeps 30 ms in its data path: rank 1 is the straggler. Its per-sample
  losses are backpropagated with their weights (``per.backward(w)``), no scalar loss at all.
Prints each step's loss as rank 0 sees it."""

import sys, time, torch, torch.distributed as dist, torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

mode = sys.argv[1]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(rank)
for step in range(1, 41):
    if mode == "gather" and rank == 1:
        time.sleep(0.03)  # its data path
    x = torch.randn(16, 16, generator=g)
    if mode == "barrier":
        model.train()
        loss = F.cross_entropy(model(x), (x[:, 0] > 0).long())
        loss.backward()
    else:
        z = F.normalize(model(x), dim=1)
        zs = [torch.zeros_like(z) for _ in range(world)]
        dist.all_gather(zs, z.detach())
        zs[rank] = z
        per = F.cross_entropy(z @ torch.cat(zs).T / 0.1, torch.arange(16) + rank * 16, reduction="none")
        loss = per.mean()
        per.backward(torch.full_like(per, 1 / per.numel()))
    opt.step()
    opt.zero_grad()
    if rank == 0:
        print(f"step {step} loss {loss.item():.6f}", flush=True)
    if mode == "barrier":
        if rank == 0:
            model.eval()
            with torch.no_grad():
                for _ in range(3):
                    model.module(torch.randn(64, 16, generator=g))
                    time.sleep(0.01)
                model.module(torch.randn(64, 16, generator=g))
        if step % 2 == 0:
            dist.barrier(None, True).wait()
        else:
            dist.barrier()
dist.destroy_process_group()
