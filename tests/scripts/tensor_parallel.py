"""Tensor parallelism over 2 ranks: two MLP blocks split by ``parallelize_module`` (Colwise then
Rowwise), each rank fed the same batch of 8. ``python tensor_parallel.py STEPS [2d]``: with
``2d``, FSDP2's ``fully_shard`` on top, over a (dp=1, tp=2) mesh."""

import sys, torch, torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

steps, two_d = int(sys.argv[1]), sys.argv[2:] == ["2d"]
dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp")) if two_d else init_device_mesh("cpu", (2,))
tp_mesh = mesh["tp"] if two_d else mesh


class MLP(nn.Module):
    def __init__(self, d=32, h=64):
        super().__init__()
        self.up, self.act, self.down = nn.Linear(d, h), nn.GELU(), nn.Linear(h, d)

    def forward(self, x):
        return self.down(self.act(self.up(x)))


torch.manual_seed(0)
model = nn.Sequential(MLP(), MLP())
for block in model:
    parallelize_module(block, tp_mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    if two_d:
        from torch.distributed.fsdp import fully_shard

        fully_shard(block, mesh=mesh["dp"])
if two_d:
    fully_shard(model, mesh=mesh["dp"])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(1)  # (the same batch on each rank of the group)
for step in range(steps):
    x = torch.randn(8, 32, generator=g)
    loss = (model(x) - x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
