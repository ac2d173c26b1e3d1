"""``torch.compile(DDP(model), backend="aot_eager")`` of a small MLP with BatchNorm, DDP's defaults kept
(``broadcast_buffers=True``: rank 0's running statistics broadcast at the start of every
forward, from DDP's forward, which dynamo traces). ``python ddp_batchnorm_compiled.py STEPS
SLOW_RANK SLOW_S WHERE``: rank SLOW_RANK sleeps SLOW_S a step as it loads its batch (WHERE
``data``), or computes SLOW_S more in its forward (``fwd``: matrix products for SLOW_S of its
thread's CPU time, in a function dynamo leaves to run as it is); SLOW_RANK -1: no rank is slow.
Batches of 16."""

import sys, time, torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

steps, slow_rank, slow_s, where = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
dist.init_process_group("gloo")
rank = dist.get_rank()
slow = rank == slow_rank
busy = torch.randn(96, 96)


@torch.compiler.disable
def burn() -> None:
    deadline = time.thread_time() + slow_s
    while time.thread_time() < deadline:
        busy @ busy


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.ReLU())
        self.head = nn.Linear(64, 4)

    def forward(self, x):
        if slow and where == "fwd":
            burn()
        return self.head(self.body(x))


torch.manual_seed(0)
# aot_eager: dynamo traces DDP's forward (and breaks its graph at the buffer broadcast) and
# AOTAutograd compiles forward and backward as Inductor's would be, without Inductor's code
# generation (a launch of 16 CPU-s, 11.8 so; with "eager", 9.6, the backward is not compiled).
model = torch.compile(DDP(Net(), broadcast_buffers=True), backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(rank)
for step in range(steps):
    if slow and where == "data":
        time.sleep(slow_s)
    x = torch.randn(16, 32, generator=g)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
