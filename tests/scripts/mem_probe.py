"""Run under torchrun: build the trainer's model for a strategy, take two optimizer steps, and
print this rank's memory account as one JSON line ``MEM {"rank": .., "mem": {..}}``; with
MEM_PROBE_OUT=DIR set, also write it to DIR/rank<N>.json (the ranks share torchrun's stdout,
where their lines can interleave).

    python -m torch.distributed.run --standalone --nproc-per-node 2 \
        tests/scripts/mem_probe.py --strategy fsdp
"""

from __future__ import annotations

import json
import os
import sys

import msgspec
import torch

from pardash.telemetry.memory import account, expected_bytes_per_rank
from pardash.trainer.config import parse_args
from pardash.trainer.data import build_dataset, build_loader, step_batches
from pardash.trainer.models import build_model, count_params
from pardash.trainer.strategies import destroy_distributed, init_distributed, wrap_model


def main() -> int:
    cfg = parse_args(sys.argv[1:] + ["--device", "cpu", "--dataset-size", "256"])
    rt = init_distributed(cfg)
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg)
    params_count, _ = count_params(model)
    w = wrap_model(model, cfg, rt)
    opt = torch.optim.AdamW(w.model.parameters(), lr=cfg.lr)
    loader, sampler = build_loader(build_dataset(cfg), cfg, rank=rt.rank, world_size=rt.world_size)
    batches = step_batches(loader, sampler, 1)
    ddp = w.model if w.strategy == "ddp" else None
    mem = None
    for _ in range(2):  # two steps: DDP rebuilds its buckets after the first
        x, y = next(batches).micro[0]
        w.model(x, y).backward()
        opt.step()
        mem = account(w.inner, opt, ddp_module=ddp)
        opt.zero_grad(set_to_none=True)
    out = {
        "rank": rt.rank,
        "world_size": rt.world_size,
        "strategy": cfg.strategy,
        "params_count": params_count,
        "expected_bytes": expected_bytes_per_rank(params_count, rt.world_size, cfg.strategy),
        "mem": msgspec.to_builtins(mem),
    }
    line = json.dumps(out)
    sys.stdout.write(f"MEM {line}\n")
    sys.stdout.flush()
    if os.environ.get("MEM_PROBE_OUT"):
        with open(os.path.join(os.environ["MEM_PROBE_OUT"], f"rank{rt.rank}.json"), "w") as f:
            f.write(line)
    destroy_distributed(rt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
