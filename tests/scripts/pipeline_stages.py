"""A two-stage pipeline (``torch.distributed.pipelining``: PipelineStage and ScheduleGPipe, 4
micro-batches of a batch of 32), one stage a rank, trained under ``pardash launch`` with no
change for pardash. ``python pipeline_stages.py STEPS [slow|hang] [1f1b]``:

- ``slow``: rank 1 computes 5 ms more in each micro-batch's forward (by its thread's CPU time,
  as ``--inject-straggler RANK:compute`` does: a rank asleep burns less CPU than its peer, and on
  a host saturated by other work it read as starved by its host), from step 3;
- ``hang``: after ``slow``'s straggler has had time to be named (step 36), rank 1 sleeps in its
  forward; rank 0's receive times out (the process group's timeout, 6 s) and the job fails;
- ``1f1b``: Schedule1F1B instead of ScheduleGPipe.

The last stage writes ``losses.json`` in the working folder: each step's loss as the script
sees it, the mean of the schedule's ``losses`` over the micro-batches.
"""

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

STEPS = int(sys.argv[1])
SLOW = "slow" in sys.argv[2:]
HANG = "hang" in sys.argv[2:]
BATCH = 32
SLOW_FROM, HANG_AT = 3, 36

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=6 if HANG else 120))
rank = dist.get_rank()
torch.set_num_threads(1)
step = 0


def burn(seconds: float) -> None:
    """Compute for ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    x = torch.ones(64, 64)
    while time.thread_time() < end:
        x = (x @ x).clamp_(-1, 1)


class Block(nn.Module):
    def __init__(self, d: int = 64, first: bool = False) -> None:
        super().__init__()
        self.l1, self.l2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.first = first  # (of its stage: the one slowed, once a micro-batch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if rank == 1 and SLOW and step >= SLOW_FROM and self.first:
            burn(0.005)
        if rank == 1 and HANG and step >= HANG_AT:
            time.sleep(3600)
        return x + self.l2(torch.relu(self.l1(x)))


torch.manual_seed(0)
full = nn.Sequential(*[Block(first=i % 2 == 0) for i in range(4)])
part = full[:2] if rank == 0 else full[2:]
stage = PipelineStage(part, rank, 2, torch.device("cpu"))
schedule = (Schedule1F1B if "1f1b" in sys.argv[2:] else ScheduleGPipe)(stage, n_microbatches=4, loss_fn=nn.MSELoss())
opt = torch.optim.AdamW(part.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(1)
seen = []
for step in range(STEPS):
    x = torch.randn(BATCH, 64, generator=g)
    opt.zero_grad()
    if rank == 0:
        schedule.step(x)
    else:
        losses: list = []
        schedule.step(target=x.roll(1, dims=1), losses=losses)
        seen.append(torch.stack(losses).mean().item())
    opt.step()
if rank == 1:
    with open("losses.json", "w") as f:
        json.dump(seen, f)
dist.barrier()
dist.destroy_process_group()
