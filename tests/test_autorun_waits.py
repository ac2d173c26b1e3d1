"""FSDP2 in the script's own code (``fully_shard``), under the zero-code hooks: a rank ahead
waits in a sharded module's pre-forward for its all-gather, that is, for the rank behind. That
wait is the step's ``comm_s``, out of its forward, as DDP's wait for its all-reduces is; the
self time (the straggler signal) leaves it out as before. It read as the forward, the comm
column '-': a victim's forward looked as slow as the straggler's (review 284: 35.0 against
35.5 ms, rank 1 sleeping 20 ms in its forward).

On a one-rank gloo group in this process, the instrumentation on a clock the test moves: the
wait for the peer is the clock moved inside FSDP's own pre-forward hook of a block (where the
all-gather is waited for), the rank's own work the clock moved in its layers. (FSDP's
collectives in the backward, on one rank, are none: tests/test_autorun.py's FSDP launch has
them, the victim's backward 236 ms before, its comm now.)

And DDP over a model in a reentrant activation checkpoint as a whole: DDP waits for its
all-reduces inside the checkpoint's nested backward, which pardash's watch of the outer
backward came after: "comm 0.0", the wait read as the backward (review 284: the victim of a
rank slow in its forward "bwd 24.8", as if slowest in its backward). One real 2-rank launch."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch
from torch import nn

from helpers import launched_report
from instrumented import Recording
from pardash.telemetry import api
from pardash.telemetry.env import RankIdentity
from pardash.trainer.instrument import Instrument

WAIT_S, WORK_S, DATA_S = 0.020, 0.004, 0.001
SCRIPTS = Path(__file__).resolve().parent / "scripts"


@pytest.fixture
def sharded(tmp_path, monkeypatch):
    """Rank 0 of 2 as the instrumentation sees it, on a gloo group of one (FSDP2 needs one),
    its clock ``clock[0]``."""
    import torch.distributed as dist

    api._reset_for_tests()
    rep = Recording()
    rep.identity = RankIdentity(rank=0, local_rank=0, world_size=2, node=0, host="here", restart=0)
    inst = Instrument(rep).install()
    clock = [100.0]
    monkeypatch.setattr(inst.clock, "stamp", lambda: clock[0])
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield inst, rep, clock
    finally:
        inst.uninstall()
        api._reset_for_tests()
        gc.collect()
        dist.destroy_process_group()


def _waits_in_its_all_gather(block: nn.Module, clock: list[float]) -> None:
    """FSDP's pre-forward hook of ``block`` (which waits for its all-gather) takes WAIT_S more:
    the peer behind."""
    hooks = block._forward_pre_hooks
    fsdp_id = block._get_fsdp_state()._pre_forward_hook_handle.id
    fsdp_pre_forward = hooks[fsdp_id]

    def waiting(module, args, kwargs):
        clock[0] += WAIT_S
        return fsdp_pre_forward(module, args, kwargs)

    hooks[fsdp_id] = waiting


def _works(module: nn.Module, clock: list[float], seconds: float) -> None:
    def work(m, args):
        clock[0] += seconds

    module.register_forward_pre_hook(work)


def test_a_wait_for_an_fsdp2_all_gather_in_the_forward_is_comm_not_forward(sharded):
    from torch.distributed.fsdp import fully_shard

    inst, rep, clock = sharded
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Sequential(nn.Linear(16, 16), nn.ReLU()), nn.Linear(16, 1))
    _works(model[1][0], clock, WORK_S)
    fully_shard(model[1])
    fully_shard(model)
    _waits_in_its_all_gather(model[1], clock)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(5):
        clock[0] += DATA_S
        x = torch.randn(4, 8)
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    inst.finish()
    assert len(rep.steps) == 5
    for s in rep.steps[1:]:  # (the first: the hooks found the model in its forward)
        assert s["forward_s"] == pytest.approx(WORK_S)
        assert s["comm_s"] == pytest.approx(WAIT_S)
        # the straggler signal as before: its data and forward less the wait
        assert s["self_s"] == pytest.approx(DATA_S + WORK_S)
        phases = sum(s[f"{p}_s"] for p in ("data", "forward", "backward", "optimizer", "comm"))
        assert phases == pytest.approx(s["step_s"])



@pytest.mark.slow
def test_ddps_wait_inside_a_reentrant_checkpoints_backward_is_comm_not_backward(tmp_path):
    # Rank 1 sleeps 20 ms in its forward (and again in the backward's recompute): rank 0 waits
    # for it in DDP's all-reduces, in the nested backward. Its medians, by ratio.
    rep = launched_report(tmp_path, str(SCRIPTS / "reentrant_checkpoint_ddp.py"), "--steps", "20", "--slow-rank", "1", "--slow-s", "0.02")
    ranks = {r["rank"]: r for r in rep["ranks"]}
    victim, slow = ranks[0], ranks[1]
    assert victim["steps"] == slow["steps"] == 20
    assert victim["median_comm_s"] > 2 * victim["median_backward_s"]
    assert victim["median_comm_s"] > 2 * slow["median_comm_s"]
    assert slow["median_backward_s"] > victim["median_backward_s"]  # (its recompute sleeps)
