"""A GAN of two DDP models, one Adam each, and an EMA of its generator evaluated every EVERY
steps: ema.eval(), 20 ms of work (a metric's set-up), a forward under no_grad, 30 ms more
(a sample grid saved), ema.train(). The EMA is a plain copy updated with lerp_ (timm's
ModelEmaV3, ema-pytorch) on rank 0 and torch's AveragedModel on rank 1, or the one KIND
names on both. Each evaluation prints the span the script measured itself:
``ema rank R step S took SECONDS``."""

import copy
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
every = int(sys.argv[2]) if len(sys.argv) > 2 else 4
dist.init_process_group("gloo")
rank = dist.get_rank()
kind = sys.argv[3] if len(sys.argv) > 3 else ("copy", "averaged")[rank % 2]
torch.manual_seed(0)
gen = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
disc = nn.Sequential(nn.Linear(8, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
if kind == "averaged":
    ema = AveragedModel(gen, multi_avg_fn=get_ema_multi_avg_fn(0.99))
else:
    ema = copy.deepcopy(gen).requires_grad_(False)
G, D = DDP(gen), DDP(disc)
opt_g = torch.optim.Adam(G.parameters(), 2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(D.parameters(), 2e-4, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
fixed = torch.randn(16, 16)
for step in range(1, steps + 1):
    real, z = torch.randn(8, 8), torch.randn(8, 16)
    fake = G(z)
    loss_d = bce(D(real), torch.ones(8, 1)) + bce(D(fake.detach()), torch.zeros(8, 1))
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    loss_g = bce(D(fake), torch.ones(8, 1))
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
    if kind == "averaged":
        ema.update_parameters(gen)
    else:
        with torch.no_grad():
            for e, p in zip(ema.parameters(), gen.parameters()):
                e.lerp_(p, 0.01)
    if step % every == 0:
        ema.eval()
        t0 = time.perf_counter()
        time.sleep(0.02)
        with torch.no_grad():
            ema(fixed).std().item()
        time.sleep(0.03)
        took = time.perf_counter() - t0
        ema.train()
        print(f"ema rank {rank} step {step} took {took:.6f}", flush=True)
dist.destroy_process_group()
