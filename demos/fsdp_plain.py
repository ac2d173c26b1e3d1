"""A classic FSDP2 training script, with nothing of pardash in it.

    torchrun --standalone --nproc-per-node 2 demos/fsdp_plain.py --steps 100
    pardash launch --nproc 2 -- demos/fsdp_plain.py --steps 100       # the same, watched

A small residual MLP whose blocks are each sharded with ``fully_shard`` (FSDP2), then the root:
every rank holds 1/N of the parameters, gradients and AdamW state. Data, flags and the loss
line are those of ddp_plain.py: a DistributedSampler share of a synthetic classification set,
``--straggler-rank R --straggler-s S`` for a slow data path on rank R (``--straggler-in model``:
a slow last block instead), deterministic losses for a given ``--seed``.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100, help="optimizer steps (default 100)")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    p.add_argument("--batch-size", type=int, default=32, help="samples per rank per step (default 32)")
    p.add_argument("--blocks", type=int, default=4, help="residual blocks, each sharded on its own (default 4)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the initial weights (default 0)")
    p.add_argument("--straggler-rank", type=int, default=None, metavar="R", help="this rank is slow to load data")
    p.add_argument("--straggler-s", type=float, default=0.05, metavar="S", help="seconds it is slow each step: asleep in its data path, or (--straggler-in model) at work in its last block, that much of its CPU time (default 0.05)")
    p.add_argument("--accum", type=int, default=1, metavar="N", help="micro-batches a step: the batch in N parts, gradients accumulated (default 1)")
    p.add_argument("--straggler-in", choices=("data", "model"), default="data",
                   help="where the straggler is slow: its data path (default) or its model's last block")
    return p.parse_args()


def synthetic_dataset(seed: int, n: int = 4096, dim: int = 32, classes: int = 10) -> TensorDataset:
    """Points labelled by a fixed random linear teacher: learnable, and the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    teacher = torch.randn(dim, classes, generator=g)
    y = (x @ teacher).argmax(dim=1)
    return TensorDataset(x, y)


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, dim: int = 32, width: int = 128, classes: int = 10, blocks: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(dim, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(blocks))
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def main() -> None:
    args = parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    torch.manual_seed(args.seed)  # every rank builds the same weights, then keeps its shard
    model = Net(blocks=args.blocks).to(device)
    mesh = init_device_mesh(device.type, (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    if rank == args.straggler_rank and args.straggler_in == "model":
        # a slow block on this rank only (a throttled device, say): busy in its forward, for
        # that much of its own CPU time (work, as a slow block does: a deadline by the clock
        # made it work no more than the others on a busy host)
        def slow(_module, _args):
            until = time.thread_time() + args.straggler_s
            while time.thread_time() < until:
                pass

        model.blocks[-1].register_forward_pre_hook(slow)

    dataset = synthetic_dataset(args.seed)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    step, epoch = 0, 0
    model.train()
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            if rank == args.straggler_rank and args.straggler_in == "data":
                time.sleep(args.straggler_s)  # a slow data path on this rank only
            x, y = x.to(device), y.to(device)
            for xm, ym in zip(x.chunk(args.accum), y.chunk(args.accum)):
                loss = loss_fn(model(xm), ym) / args.accum
                loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if rank == 0:
                print(f"step {step} loss {loss.item():.6f}", flush=True)
            if step == args.steps:
                break
        epoch += 1

    dist.barrier()  # every rank done with its collectives before the group goes (gloo's teardown)
    del model  # freed before its group: a DDP model freed after (at exit) can hang in gloo's destructor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
