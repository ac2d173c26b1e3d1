"""A classic DDP training script, with nothing of pardash in it.

    torchrun --standalone --nproc-per-node 2 demos/ddp_plain.py --steps 100
    pardash launch --nproc 2 -- demos/ddp_plain.py --steps 100        # the same, watched

Each rank trains the same small MLP on its DistributedSampler share of a synthetic
classification set (the sampler reshuffles every epoch through ``set_epoch``) with AdamW;
rank 0 prints the loss of every step, and at the end its steady steps/s. ``--straggler-rank R --straggler-s S`` makes rank R
sleep S seconds in its data path every step, a slow data loader the others wait for.
Losses are deterministic for a given ``--seed``.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


TIMED_FROM = 20
"""Rank 0 times its steady rate from the end of this step (see the last line it prints)."""


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100, help="optimizer steps (default 100)")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    p.add_argument("--batch-size", type=int, default=32, help="samples per rank per micro-batch (default 32)")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the initial weights (default 0)")
    p.add_argument("--straggler-rank", type=int, default=None, metavar="R", help="this rank is slow to load data")
    p.add_argument("--straggler-s", type=float, default=0.05, metavar="S", help="seconds it sleeps each step (default 0.05)")
    return p.parse_args()


def synthetic_dataset(seed: int, n: int = 4096, dim: int = 32, classes: int = 10) -> TensorDataset:
    """Points labelled by a fixed random linear teacher: learnable, and the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    teacher = torch.randn(dim, classes, generator=g)
    y = (x @ teacher).argmax(dim=1)
    return TensorDataset(x, y)


def build_model(dim: int = 32, hidden: int = 128, classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Linear(dim, hidden), nn.GELU(),
        nn.Linear(hidden, hidden), nn.GELU(),
        nn.Linear(hidden, classes),
    )  # fmt: skip


def main() -> None:
    args = parse_args()
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)

    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = DDP(build_model().to(device), device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    dataset = synthetic_dataset(args.seed)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    step, epoch = 0, 0
    timed_t0 = None
    model.train()
    while step < args.steps:
        sampler.set_epoch(epoch)
        batches = iter(loader)
        while step < args.steps:
            micro = []
            for _ in range(args.grad_accum):
                try:
                    micro.append(next(batches))
                except StopIteration:
                    break
            if len(micro) < args.grad_accum:
                break  # the epoch ran out
            if rank == args.straggler_rank:
                time.sleep(args.straggler_s)  # a slow data path on this rank only
            total = 0.0
            for i, (x, y) in enumerate(micro):
                x, y = x.to(device), y.to(device)
                last = i == len(micro) - 1
                # Gradients are all-reduced on the last micro-batch only.
                with model.no_sync() if not last else _nothing():
                    loss = loss_fn(model(x), y) / args.grad_accum
                    loss.backward()
                total += loss.item()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if rank == 0:
                print(f"step {step} loss {total:.6f}", flush=True)
                if step == TIMED_FROM:
                    timed_t0 = time.perf_counter()
        epoch += 1

    if rank == 0 and timed_t0 is not None and step > TIMED_FROM:
        # the steady rate, timed here (the first steps warm up; a reader of this output may
        # see its lines late, in batches)
        print(f"steps/s {(step - TIMED_FROM) / (time.perf_counter() - timed_t0):.2f} (steps {TIMED_FROM + 1}..{step})", flush=True)
    dist.barrier()  # every rank done with its collectives before the group goes (gloo's teardown)
    del model  # freed before its group: a DDP model freed after (at exit) can hang in gloo's destructor
    dist.destroy_process_group()


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
