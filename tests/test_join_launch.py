"""DDP's Join under a real launch (review 335): rank 0 runs out of inputs and joins while
rank 1 steps on, then rank 1 hangs in its own data. The zero-code hooks say rank 0 joined; the
hub never calls it stalled, names rank 1 the hang's cause, and the launch's last line too."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pardash.telemetry import schema
from pardash.telemetry.logreader import load_log

from helpers import pardash_env

JOINS_THEN_HANGS = """
import datetime, sys, time
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.algorithms.join import Join

# gloo's timeout ends the hang: rank 0's shadowing all-reduce times out waiting for rank 1
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with Join([model]):
    for i in range(10 if rank == 0 else 100):
        if rank == 1 and i >= 10:
            # past rank 0's 10 batches, 6 s of steps (over the hub's 5 s to call a rank
            # stalled), then hung in its data
            time.sleep(3600 if i == 70 else 0.1)
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_rank_that_joined_is_not_stalled_and_the_rank_hung_after_it_is_the_cause(tmp_path):
    (tmp_path / "joins.py").write_text(JOINS_THEN_HANGS)
    log = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "2", "--headless", "--log", str(log),
         "--runs-dir", str(tmp_path / "runs"), "--", "joins.py"],
        capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    msgs = load_log(log)[0]
    joins = [(m.rank, m.step) for m in msgs if isinstance(m, schema.Event) and m.name == "join"]
    assert joins == [(0, 10)]  # (rank 1, the last to run out, never shadowed anyone)
    stalled = {m.rank: m.cause for m in msgs if isinstance(m, schema.Verdict) and m.verdict == "stalled"}
    assert stalled == {1: "data"}, stalled
    out = proc.stdout
    assert "[join] rank 0 ran out of inputs at step 10 and joined: it shadows the others' collectives until they finish" in out
    assert "1 joined, 1 running" in out, out[-3000:]
    assert "1 joined, 1 stalled | likely waiting for rank 1" in out, out[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "pardash: rank 1 stalled in data after step 70 (the likely cause of the hang); rank 0 exited with code 1 at step 10 waiting for it"
    ), last
