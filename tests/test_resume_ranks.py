"""A checkpoint that one rank alone cannot read (its node's copy of DCP's metadata) sends every
rank back to the checkpoint before, together: none is left waiting in a collective the others
never reach. Two gloo ranks under DDP, in processes of their own (forked from one that has
imported torch: RANKS)."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import types

import pytest


def _rank(rank: int, root: str, store: str, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from pardash.trainer import checkpoint, resume
    from pardash.trainer.strategies import Wrapped

    # The ranks meet through a file, not a port: a port picked free and bound later by rank 0
    # could be taken in between by another test's process.
    # A rank left behind in a collective fails after this, instead of hanging the test.
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=30))  # fmt: skip
    torch.manual_seed(0)
    inner = torch.nn.Linear(4, 2)
    model = DDP(inner)
    opt = torch.optim.AdamW(model.parameters())
    w = Wrapped(model=model, inner=inner, strategy="ddp")
    cpu = torch.device("cpu")
    weights = {}
    for step in (2, 4):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        weights[step] = inner.weight.detach().clone()
        progress = checkpoint.Progress(step=step, epoch=0, steps_into_epoch=step, total_steps=6, lr=1e-3, seed=0,
                                       world_size=2)
        checkpoint.save(root, progress, w=w, optimizer=opt, rank=rank, device=cpu)
    if rank == 1:
        from torch.distributed.checkpoint import FileSystemReader

        read = FileSystemReader.read_metadata

        def unreadable_here(self, *a, **k):
            if "step-00000004" in str(self.path):
                raise OSError(5, "Input/output error")
            return read(self, *a, **k)

        FileSystemReader.read_metadata = unreadable_here
    said = []
    reporter = types.SimpleNamespace(event=lambda name, **kw: said.append((name, kw.get("message", ""))))
    try:
        progress, _, _, found = resume.load_newest_readable(
            checkpoint.Found(4, checkpoint.step_path(root, 4)), types.SimpleNamespace(checkpoint_dir=root), w, opt,
            types.SimpleNamespace(rank=rank, device=cpu), reporter,
        )  # fmt: skip
        same = torch.equal(inner.weight.detach(), weights[2])
        result = f"step {progress.step} from {found.path.name}, weights of step 2: {same}; {said}"
    except BaseException as e:  # noqa: BLE001 - the test reads what happened
        result = f"failed: {type(e).__name__}: {e}"
    with open(os.path.join(out, f"rank{rank}"), "w") as fh:
        fh.write(result)
    # Down together, the group torn down before the interpreter: gloo's threads left to the
    # interpreter's exit aborted a rank now and then ("terminate called without an active
    # exception", SIGABRT) after it had written its result.
    try:
        dist.barrier()
    finally:
        dist.destroy_process_group()


# The ranks are forked from one process that has imported torch, the compiler every optimizer
# imports and DCP (with the collector off, as a rank does: pardash.trainer.startup), and _rank:
# torch.multiprocessing's two fresh interpreters each imported all of it with the collector on,
# some 8 CPU-s of a 2-core machine for the test against 3 now (as tests/scripts/trainer_forks.py
# does for the trainer). No torch code has run before the forks (no thread pool, no process
# group), so each rank starts as clean as a fresh interpreter; it ends with os._exit, past the
# interpreter's teardown.
RANKS = """
import importlib, os, sys, threading, traceback
from pardash.trainer import startup
with startup.imports():
    for name in ("torch._dynamo", "torch.distributed.checkpoint", "torch.nn.parallel"):
        importlib.import_module(name)
    sys.path.insert(0, sys.argv[1])
    from test_resume_ranks import _rank
assert threading.active_count() == 1, threading.enumerate()  # a fork copies this thread alone
pids = []
for rank in (0, 1):
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            _rank(rank, *sys.argv[2:])
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    pids.append(pid)
codes = {rank: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for rank, pid in enumerate(pids)}
sys.exit(f"ranks' exit codes: {codes}" if any(codes.values()) else 0)
"""


@pytest.mark.slow
def test_a_checkpoint_one_rank_cannot_read_sends_every_rank_back(tmp_path):
    root, out = tmp_path / "ckpt", tmp_path / "out"
    out.mkdir()
    ranks = subprocess.run(
        [sys.executable, "-c", RANKS, os.path.dirname(__file__), str(root), str(tmp_path / "store"), str(out)],
        capture_output=True, text=True, timeout=240, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )  # fmt: skip
    assert ranks.returncode == 0, ranks.stdout[-2000:] + ranks.stderr[-3000:]
    results = {r: (out / f"rank{r}").read_text() for r in (0, 1)}
    for r, text in results.items():
        assert text.startswith("step 2 from step-00000002, weights of step 2: True"), (r, text)
    assert "could not be read (OSError: [Errno 5] Input/output error)" in results[1]
    assert "another rank could not read" in results[0]
