"""A script's own FSDP2 (``fully_shard``) under the zero-code hooks: while a rank waits for the
others in FSDP's collectives (its all-gather in a block's pre-forward, its all-gathers and
reduce-scatters in the backward), its heartbeat's phase is "sync", as in DDP's wait for its
all-reduces, and its pass's again once the collective returns. It read "forward" or
"backward" there: a rank waiting for a peer hung in its own forward read "stalled in forward"
as that peer did, and one hung in FSDP's backward "stalled in backward", where it waited.

On a one-rank gloo group in this process (FSDP2 needs one), the instrumentation's phases as
its reporter is told them, read from inside FSDP's pre-forward hook and inside the collective."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.distributed as dist
from torch import nn

from instrumented import Recording
from pardash.telemetry import api
from pardash.telemetry.env import RankIdentity
from pardash.trainer.instrument import Instrument


class Phases(Recording):
    """The reporter, keeping the heartbeat's phase as the instrumentation sets it."""

    phase = ""

    def set_phase(self, phase: str, waits_in: str = "") -> None:
        self.phase, self.waits_in = phase, waits_in


@pytest.fixture
def rank0(tmp_path, monkeypatch):
    """Rank 0 of 2 as the instrumentation sees it, on a gloo group of one; ``seen`` collects the
    heartbeat's phase inside each blocking ``all_gather_single`` the script's backward calls."""
    seen: list[str] = []
    rep = Phases()
    real = dist.all_gather_single

    def all_gather_single(*args, **kwargs):
        seen.append(rep.phase)
        return real(*args, **kwargs)

    # (before the hooks are installed: theirs wraps this one, as it wraps torch's)
    monkeypatch.setattr(dist, "all_gather_single", all_gather_single)
    api._reset_for_tests()
    rep.identity = RankIdentity(rank=0, local_rank=0, world_size=2, node=0, host="here", restart=0)
    inst = Instrument(rep).install()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield inst, rep, seen
    finally:
        inst.uninstall()
        api._reset_for_tests()
        gc.collect()
        dist.destroy_process_group()


class GathersInItsBackward(torch.autograd.Function):
    """Its backward waits in a blocking all-gather, as FSDP2's backward does for its
    parameters resharded after the forward (on one rank FSDP calls none of its own there);
    ``after`` keeps the heartbeat's phase once the all-gather returned."""

    rep: Phases
    after: list[str] = []

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        out = torch.empty_like(grad)
        dist.all_gather_single(out, grad.contiguous())
        GathersInItsBackward.after.append(GathersInItsBackward.rep.phase)
        return out


def test_a_rank_waiting_in_fsdps_collectives_is_in_sync_and_back_in_its_pass_after(rank0):
    from torch.distributed.fsdp import fully_shard

    inst, rep, seen = rank0
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
    model = nn.Sequential(nn.Linear(8, 16), block, nn.Linear(16, 1))
    fully_shard(block)
    fully_shard(model)
    in_gather: list[str] = []
    after_gather: list[str] = []
    hooks = block._forward_pre_hooks
    fsdp_id = block._get_fsdp_state()._pre_forward_hook_handle.id
    fsdp_pre_forward = hooks[fsdp_id]

    def pre_forward(module, args, kwargs):  # FSDP's own, where it waits for the all-gather
        in_gather.append(rep.phase)
        return fsdp_pre_forward(module, args, kwargs)

    hooks[fsdp_id] = pre_forward
    GathersInItsBackward.rep, GathersInItsBackward.after = rep, []
    block[0].register_forward_pre_hook(lambda m, a: after_gather.append(rep.phase))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(4):
        x = torch.randn(4, 8)
        GathersInItsBackward.apply(model(x)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    inst.finish()
    assert len(rep.steps) == 4
    # (the first step: the hooks found the model in its forward, its waits untimed)
    assert in_gather[1:] == ["sync"] * 3, in_gather
    assert after_gather[1:] == ["forward"] * 3, after_gather
    assert seen[1:] == ["sync"] * 3, seen
    assert GathersInItsBackward.after[1:] == ["backward"] * 3, GathersInItsBackward.after
    assert all(s["comm_s"] > 0 for s in rep.steps[1:])
