"""DDP with BatchNorm buffers, DDP's defaults kept (``broadcast_buffers=True``: rank 0's
running statistics broadcast at the start of every forward), and an unused branch every other
step (``find_unused_parameters=True``). ``python ddp_batchnorm.py STEPS SLOW_RANK SLOW_S WHERE``:
rank SLOW_RANK computes SLOW_S more a step in its forward (WHERE ``fwd``: matrix products for
SLOW_S of its thread's CPU time, as the bundled trainer's --inject-straggler RANK:compute; a
sleep there, on a host saturated by other work, reads as a rank starved by its host), or sleeps
SLOW_S before it, as it loads its batch (``data``); SLOW_RANK -1: no rank is slow. Batches of 16."""

import sys, time, torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

steps, slow_rank, slow_s, where = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
dist.init_process_group("gloo")
rank = dist.get_rank()
slow = rank == slow_rank
busy = torch.randn(96, 96)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.ReLU())
        self.head, self.aux = nn.Linear(64, 4), nn.Linear(64, 4)

    def forward(self, x, use_aux=False):
        if slow and where == "fwd":
            deadline = time.thread_time() + slow_s
            while time.thread_time() < deadline:
                busy @ busy
        h = self.body(x)
        return self.head(h) + self.aux(h) if use_aux else self.head(h)


torch.manual_seed(0)
model = DDP(Net(), broadcast_buffers=True, find_unused_parameters=True)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(rank)
for step in range(steps):
    if slow and where == "data":
        time.sleep(slow_s)
    x = torch.randn(16, 32, generator=g)
    loss = model(x, use_aux=step % 2 == 1).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
