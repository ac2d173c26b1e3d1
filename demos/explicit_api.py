"""The explicit API: a DDP script that tells pardash what a step is and what to plot.

    pardash hub --run-id demo &                     # prints its ingest endpoint
    PARDASH_ENDPOINT=tcp://127.0.0.1:PORT PARDASH_RUN_ID=demo \\
        torchrun --standalone --nproc-per-node 2 demos/explicit_api.py --steps 50
    pardash launch --nproc 2 -- demos/explicit_api.py --steps 50   # or all in one

``pt.init`` introduces the rank (strategy, parameters, device, your config); ``with
pt.step():`` marks one step; ``pt.phase("data")`` times the data path; ``pt.log`` gives the
loss, the samples, and custom metrics (here ``tokens`` and ``grad_norm``) that the TUI and
the log show next to the built-in ones. Without PARDASH_ENDPOINT every call is a no-op, so the
script runs the same anywhere.

Under plain torchrun the steps carry no *self time* (the work up to the first collective, which
the straggler verdict needs): the zero-code hooks measure it. Add them, keeping these marks:

    torchrun --standalone --nproc-per-node 2 -m pardash.trainer.autorun demos/explicit_api.py --steps 50
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import pardash.telemetry as pt


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50, help="optimizer steps (default 50)")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    p.add_argument("--batch-size", type=int, default=32, help="samples per rank per step (default 32)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")

    g = torch.Generator().manual_seed(args.seed)
    x_all = torch.randn(2048, 32, generator=g)
    y_all = (x_all @ torch.randn(32, 10, generator=g)).argmax(dim=1)
    dataset = TensorDataset(x_all, y_all)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    torch.manual_seed(args.seed)
    model = DDP(nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 10)).to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    pt.init(model=model, optimizer=optimizer, config=vars(args))

    step, epoch = 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        batches = iter(loader)
        while step < args.steps:
            try:
                with pt.step():
                    with pt.phase("data"):
                        x, y = next(batches)  # StopIteration: a step that did not happen
                    x, y = x.to(device), y.to(device)
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    step += 1
                    pt.log(loss=loss.detach(), samples=len(x), tokens=x.numel(), grad_norm=grad_norm)
            except StopIteration:
                break  # the epoch ran out
            if rank == 0:
                print(f"step {step} loss {loss.item():.6f}", flush=True)
        pt.event("epoch_end", f"epoch {epoch} done")
        epoch += 1

    dist.barrier()  # every rank done with its collectives before the group goes (gloo's teardown)
    del model  # freed before its group: a DDP model freed after (at exit) can hang in gloo's destructor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
