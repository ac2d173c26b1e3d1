"""Expert parallelism (a mixture of experts) over 2 ranks, each rank its own batch of 16 tokens:
4 experts, their weights stacked ([experts, in, out]) and split by experts over an ``ep`` mesh
(``Shard(0)``: experts 0-1 on rank 0, 2-3 on rank 1), each token sent by all-to-all (torchtitan's autograd one) to the rank
of the expert its router picks and back. The router and the layers around the experts are
replicated, their gradients all-reduced by hand. ``python moe_expert_parallel.py STEPS [style]``:
the experts split by ``distribute_tensor``, or (``style``) by ``parallelize_module`` with a
ParallelStyle of the script's own, as torchtitan's ExpertParallel does."""

import sys, torch, torch.distributed as dist
from torch.distributed._functional_collectives import all_to_all_single_autograd
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import ParallelStyle, parallelize_module

steps, by_style = int(sys.argv[1]), sys.argv[2:] == ["style"]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ep_mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("ep",))
EXPERTS, D, H = 4, 16, 32


class Experts(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(EXPERTS, D, H) * 0.1)
        self.w2 = nn.Parameter(torch.randn(EXPERTS, H, D) * 0.1)

    def forward(self, x, expert):
        """Tokens ``x`` routed to this rank's experts, ``expert`` the local index of each's."""
        w1, w2 = self.w1.to_local(), self.w2.to_local()
        out = torch.zeros_like(x)
        for e in range(w1.shape[0]):
            picked = expert == e
            out[picked] = torch.relu(x[picked] @ w1[e]) @ w2[e]
        return out


def shard_experts(name, module, mesh):
    for pname, p in list(module.named_parameters(recurse=False)):
        module.register_parameter(pname, nn.Parameter(distribute_tensor(p.data, mesh, [Shard(0)])))


class ExpertParallel(ParallelStyle):
    def _apply(self, module, device_mesh):
        return distribute_module(module, device_mesh, partition_fn=lambda n, m, mesh: shard_experts(n, m, mesh) if isinstance(m, Experts) else None)


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.router, self.out = nn.Linear(D, D), nn.Linear(D, EXPERTS), nn.Linear(D, D)
        self.experts = Experts()

    def forward(self, x):
        x = self.inp(x)
        gate = self.router(x).softmax(-1)
        weight, expert = gate.max(-1)
        order = expert.argsort()
        per_rank = EXPERTS // world
        send = torch.bincount(expert // per_rank, minlength=world)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send)
        send_split, recv_split = send.tolist(), recv.tolist()
        tokens = all_to_all_single_autograd(x[order], recv_split, send_split, dist.group.WORLD)
        ids = torch.empty(sum(recv_split), dtype=torch.long)
        dist.all_to_all_single(ids, expert[order].contiguous(), recv_split, send_split)
        done = self.experts(tokens, ids % per_rank)
        back = all_to_all_single_autograd(done, send_split, recv_split, dist.group.WORLD)
        y = torch.empty_like(back).index_copy(0, order, back)
        return self.out(x + y * weight.unsqueeze(-1))


torch.manual_seed(0)
model = MoE()
if by_style:
    parallelize_module(model.experts, ep_mesh, ExpertParallel())
else:
    shard_experts("experts", model.experts, ep_mesh)
replicated = [p for n, p in model.named_parameters() if not n.startswith("experts.")]
opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
g = torch.Generator().manual_seed(rank)  # (each rank its own batch)
for step in range(steps):
    x = torch.randn(16, D, generator=g)
    loss = (model(x) - x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    for p in replicated:
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
    opt.step()
dist.destroy_process_group()
