"""DDP's Join made to raise on every rank once one runs out (``throw_on_early_termination=True``),
caught, the training going on (torch's documented use) under a real launch (review 339): the
rank that ran out no longer reads joined once the error is raised, and its later collectives
are timed again (the zero-code hooks' ``_joined`` left set, it read "1 joined" and its waits
went unmeasured for the rest of the job)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pardash.telemetry import schema
from pardash.telemetry.logreader import load_log

from helpers import pardash_env

THROWS_THEN_TRAINS_ON = """
import time
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.algorithms.join import Join
from pardash.telemetry import api

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def step():
    loss = model(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()

try:
    with Join([model], throw_on_early_termination=True):
        for i in range(5 if rank == 0 else 10):
            step()
except RuntimeError as e:
    print(f"rank {rank} caught: {e}", flush=True)
time.sleep(2.5)  # (between epochs: its heartbeats say what it does meanwhile)
for i in range(5):  # the next epoch
    step()
print(f"rank {rank} joined after the next epoch: {api._api.auto._joined}", flush=True)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_rank_that_ran_out_under_a_throwing_join_is_not_joined_after_the_error(tmp_path):
    (tmp_path / "throws.py").write_text(THROWS_THEN_TRAINS_ON)
    log = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "2", "--headless", "--log", str(log),
         "--runs-dir", str(tmp_path / "runs"), "--", "throws.py"],
        capture_output=True, text=True, timeout=240, env=pardash_env(PARDASH_REGISTRY_DIR=str(tmp_path / "registry")), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "rank 0 caught: Rank 0 exhausted all inputs." in out, out[-3000:]
    # Its collectives are timed again (the hooks' flag that leaves them untimed is down)
    assert "rank 0 joined after the next epoch: False" in out, out[-3000:]
    msgs = load_log(log)[0]
    joins = [(m.rank, m.step) for m in msgs if isinstance(m, schema.Event) and m.name == "join"]
    assert joins == [(0, 5)]
    # Between the epochs, in its own code: its heartbeats no longer say "join" (the hub read it
    # as joined, "1 joined, 1 running", of a rank back in the script)
    at = next(i for i, m in enumerate(msgs) if isinstance(m, schema.Event) and m.name == "join")
    first_after = next(i for i, m in enumerate(msgs) if i > at and isinstance(m, schema.Step) and m.rank == 0)
    between = [m.phase for m in msgs[at:first_after] if isinstance(m, schema.Heartbeat) and m.rank == 0 and m.seq > msgs[at].seq + 1]
    assert between and schema.JOIN_PHASE not in between, between
