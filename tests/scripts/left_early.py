"""Two DDP ranks, 200 steps planned; rank 1's loop breaks at step 20 (an early stop decided on
one rank alone) and its script ends well (exit 0), while rank 0 trains on into an all-reduce
no peer joins: its connection closes under it (gloo) and it fails. Rank 1 left the job early:
the root cause, not a rank that finished."""

import sys

import torch
import torch.distributed as dist
from torch import nn

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
LEAVE_AT = int(sys.argv[2]) if len(sys.argv) > 2 else 20

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, STEPS + 1):
    if rank == 1 and step > LEAVE_AT:
        break  # (rank 1 alone: its "early stop" is no collective decision)
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
# rank 1 ends here with exit code 0, without destroy_process_group's barrier
