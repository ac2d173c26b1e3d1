"""Gradient accumulation under DDP's ``no_sync``, with a collective of the script's own at the
start of every micro-batch, as PyTorch Lightning's loop has (it broadcasts whether a SIGTERM
came before every batch). ``python broadcast_each_micro_batch.py STEPS MICRO SLOW_S [log]``:
rank 1 sleeps SLOW_S in each micro-batch's data path, so the others wait MICRO * SLOW_S a step
for it, in the broadcasts and in the last backward's all-reduce; with ``log``, each micro-batch
also all-reduces its loss after its forward (Lightning's ``self.log(..., sync_dist=True)`` in
``training_step``), where the others wait for it then."""

import contextlib, sys, time, torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

steps, micro, slow_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
log = sys.argv[4:] == ["log"]
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(rank)
for step in range(steps):
    for k in range(micro):
        stop = torch.zeros(1)
        dist.broadcast(stop, src=0)  # (Lightning: received a SIGTERM? rank 0 says for all)
        if rank == 1:
            time.sleep(slow_s)
        x = torch.randn(16, 32, generator=g)
        with model.no_sync() if k < micro - 1 else contextlib.nullcontext():
            loss = model(x).pow(2).mean() / micro
            if log:
                dist.all_reduce(loss.detach().clone())
            loss.backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
