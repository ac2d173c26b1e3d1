"""Two FSDP2 ranks on gloo over a model with a parameter of one row (rank 1's shard of it is
empty): each rank prints its memory account as JSON after an AdamW step."""

import json

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from pardash.telemetry.memory import MemoryAccountant

dist.init_process_group("gloo")
torch.manual_seed(0)


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(13, 37)
        self.one = torch.nn.Parameter(torch.ones(1))

    def forward(self, x):
        return self.lin(x).sum() * self.one


model = Model()
fully_shard(model)
opt = torch.optim.AdamW(model.parameters())
model(torch.randn(4, 13)).backward()
opt.step()
mem = MemoryAccountant(model, full_every=1).measure([opt])
print(json.dumps({"rank": dist.get_rank(), "optim_full": mem.optim_full_bytes, "grads_full": mem.grads_full_bytes, "params_full": mem.params_full_bytes}), flush=True)
dist.barrier()
dist.destroy_process_group()
