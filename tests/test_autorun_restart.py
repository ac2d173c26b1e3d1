"""A script of the user's restarted by torchrun (``pardash launch --max-restarts 1 -- script.py``)
recovers as under plain torchrun: its restarted ranks rendezvous afresh. torchrun's static
rendezvous keeps one store across restarts, keys and all, and the restarted ranks' gloo read a
peer's address from the failed attempt: they failed at once ("Gloo connectFullMesh failed ...
Connection refused") or waited 100 s for a peer long dead (review 308: 6 runs of 8 failed, 1 of
8 under plain torchrun). Here rank 1 comes back 2 s after rank 0, so rank 0 always finds the
first attempt's address of it first. The static rendezvous is torchrun's with ``--master-port``
(and on several nodes); one node without it is ``--standalone``, whose store is the attempt's
own. Real torchrun, real gloo, a real hub."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

from helpers import pardash_env
from pardash.telemetry.report import build_report
from pardash.telemetry.report_render import render_text

SCRIPT = """
import datetime, os, time
import torch, torch.distributed as dist
from torch import nn

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if attempt and os.environ["RANK"] == "1":
    time.sleep(2.0)  # the restarted rank 1 comes back after rank 0 looked for it
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 21):
    if step == 5 and rank == 1 and attempt == 0:
        raise ValueError("a bad batch")
    opt.zero_grad()
    model(torch.randn(4, 8)).pow(2).mean().backward()
    opt.step()
dist.destroy_process_group()
"""


def test_a_script_restarted_by_torchrun_rendezvous_afresh_and_finishes(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    log = tmp_path / "run.jsonl"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "2", "--headless", "--max-restarts", "1", "--log", str(log),
         "--master-port", str(port),
         "--runs-dir", str(tmp_path / "runs"), "--", "train.py"],
        capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    said = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, said
    assert "connectFullMesh" not in said
    text = render_text(build_report(str(log)))
    assert "torchrun restarted the job 1x" in text, text
    assert "ValueError: a bad batch" in text, text  # why it restarted, kept
    rep = build_report(str(log))
    assert {r["rank"]: (r["status"], r["last_step"]) for r in rep["ranks"]} == {0: ("finished", 20), 1: ("finished", 20)}, rep["ranks"]
