"""Two FSDP2 ranks on gloo; each rank prints one JSON object with two memory accounts:

- ``uneven``: a model with a parameter of one row (rank 1's shard of it is empty), its account
  after an AdamW step;
- ``fsdp1``: the same model under FSDP1, its accounts (see :func:`fsdp1`); ``hsdp``: under
  HSDP (see :func:`hsdp`);
- ``accum``: gradients accumulated over two micro-batches through the bundled trainer's
  ``grad_sync``: after the first micro-batch's backward and after the last, the gradient bytes
  each rank holds, sharded (``param.grad``'s local shard) and unsharded (what FSDP2 keeps when
  a micro-batch does not reduce-scatter), against the model's whole gradient size;
- ``tp``: a model split by tensor parallelism, trained under the zero-code hooks (see :func:`tp`).

(One script for both: a torchrun of two ranks costs seconds of a 2-core machine.)
"""

import json
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule, fully_shard

from pardash.telemetry.memory import MemoryAccountant
from pardash.trainer.strategies import Wrapped, grad_sync


class Uneven(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(13, 37)
        self.one = torch.nn.Parameter(torch.ones(1))

    def forward(self, x):
        return self.lin(x).sum() * self.one


class Adapted(torch.nn.Module):
    """A base of 10,100 parameters and an adapter of 400 (LoRA's, when the base is frozen)."""

    def __init__(self) -> None:
        super().__init__()
        self.base = torch.nn.Linear(100, 100)
        self.adapter = torch.nn.Linear(100, 4, bias=False)

    def forward(self, x):
        return self.base(x).sum() + self.adapter(x).sum()


def uneven() -> dict:
    torch.manual_seed(0)
    model = Uneven()
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 13)).backward()
    opt.step()
    mem = MemoryAccountant(model, full_every=1).measure([opt])
    return {"optim_full": mem.optim_full_bytes, "grads_full": mem.grads_full_bytes, "params_full": mem.params_full_bytes,
            "shards": mem.shards}  # fmt: skip


def hsdp() -> dict:
    """The Uneven model under HSDP on a 2 x 1 mesh (replicated over the 2 ranks, each shard
    group one rank): its account after an AdamW step."""
    from torch.distributed.device_mesh import init_device_mesh

    torch.manual_seed(0)
    model = Uneven()
    fully_shard(model, mesh=init_device_mesh("cpu", (2, 1), mesh_dim_names=("replicate", "shard")))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 13)).backward()
    opt.step()
    mem = MemoryAccountant(model, full_every=1).measure([opt])
    return {"params": mem.params_bytes, "params_full": mem.params_full_bytes, "shards": mem.shards}


def fsdp1() -> dict:
    """The Uneven model under FSDP1 (one flat parameter of 519 elements, padded to 2 x 260),
    with its flat parameter and with use_orig_params (each rank's original parameters views of
    its shard, rank 1's of one of them empty): each account after an AdamW step, and the
    hello's parameter count. (FSDP1 refuses a CPU without device_id: it trains given it.)"""
    from torch.distributed.fsdp import FullyShardedDataParallel

    from pardash.telemetry.modelfacts import model_facts

    out = {}
    for orig in (False, True):
        torch.manual_seed(0)
        model = FullyShardedDataParallel(Uneven(), use_orig_params=orig, device_id=torch.device("cpu"))
        opt = torch.optim.AdamW(model.parameters())
        model(torch.randn(4, 13)).backward()
        opt.step()
        mem = MemoryAccountant(model, full_every=1).measure([opt])
        steps = sum(1 for state in opt.state.values() for v in state.values() if torch.is_tensor(v) and v.dim() == 0)
        out["orig" if orig else "flat"] = {
            "params": mem.params_bytes, "params_full": mem.params_full_bytes, "grads_full": mem.grads_full_bytes,
            "optim_full": mem.optim_full_bytes, "steps": steps, "count": model_facts(model)["params_count"],
            "shards": mem.shards,
        }  # fmt: skip
    # LoRA's shape: a frozen base and a trained adapter in one flat parameter (use_orig_params),
    # rank 0's shard of the base alone; and NO_SHARD, every rank holding the whole of it.
    from torch.distributed.fsdp import ShardingStrategy

    for how, kwargs in (("lora", {"use_orig_params": True}), ("noshard", {"sharding_strategy": ShardingStrategy.NO_SHARD})):
        torch.manual_seed(0)
        two = Adapted()
        if how == "lora":
            two.base.requires_grad_(False)
        model = FullyShardedDataParallel(two, device_id=torch.device("cpu"), **kwargs)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
        model(torch.randn(4, 100)).backward()
        opt.step()
        mem = MemoryAccountant(model, full_every=1).measure([opt])
        out[how] = {"params": mem.params_bytes, "params_full": mem.params_full_bytes, "grads_full": mem.grads_full_bytes,
                    "optim_full": mem.optim_full_bytes, "shards": mem.shards}  # fmt: skip
    return out


def accum() -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    full = sum(p.numel() * p.element_size() for p in model.parameters())
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    w = Wrapped(model=model, inner=model, strategy="fsdp")

    def held() -> dict:
        sharded = sum(p.grad.to_local().numel() * 4 for p in model.parameters() if p.grad is not None)
        unsharded = 0
        for m in model.modules():
            if isinstance(m, FSDPModule):
                group = m._get_fsdp_state()._fsdp_param_group  # FSDP2's own, where no public view exists
                for fp in group.fsdp_params if group is not None else ():
                    for t in (fp._unsharded_param.grad, fp.unsharded_accumulated_grad):
                        unsharded += t.numel() * t.element_size() if t is not None else 0
        return {"sharded": sharded, "unsharded": unsharded}

    x = torch.randn(8, 64)
    with grad_sync(w, sync=False):
        model(x).sum().backward()
    after_first = held()
    with grad_sync(w, sync=True):
        model(x).sum().backward()
    return {"full": full, "first": after_first, "last": held()}


def tp() -> dict:
    """A two-layer MLP split by tensor parallelism (``parallelize_module``, the up projection by
    columns, the down one by rows), alone and with FSDP over it (2-D), each trained 4 steps with
    the zero-code hooks installed over a recording reporter: the strategy its hello says, the
    self and data times of its steps, and the memory its last step measured."""
    import sys

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from pardash.telemetry.env import RankIdentity
    from pardash.trainer.instrument import Instrument

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from instrumented import Recording

    class Told(Recording):
        def hello(self, **fields) -> bool:
            self.hellos.append(fields)
            return True

    out = {}
    for how in ("tp", "2d"):  # (2d: FSDP over it, on a mesh of 1 x 2)
        rep = Told()
        rep.hellos = []
        rep.identity = RankIdentity(rank=dist.get_rank(), local_rank=dist.get_rank(), world_size=2, node=0, host="here", restart=0)
        inst = Instrument(rep).install()
        try:
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
            mesh = init_device_mesh("cpu", (2,)) if how == "tp" else init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
            model = parallelize_module(model, mesh if how == "tp" else mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
            if how == "2d":
                fully_shard(model, mesh=mesh["dp"])
            opt = torch.optim.AdamW(model.parameters())
            for _ in range(4):
                model(torch.randn(8, 16)).pow(2).mean().backward()
                opt.step()
                opt.zero_grad()
        finally:
            inst.uninstall()
        mem = [s["mem"] for s in rep.steps if s.get("mem") is not None][-1]
        out[how] = {"strategy": rep.hellos[-1]["strategy"], "params_count": rep.hellos[-1]["params_count"],
                    "self": [s["self_s"] for s in rep.steps], "data": [s["data_s"] for s in rep.steps],
                    "shards": mem.shards, "params": mem.params_bytes, "params_full": mem.params_full_bytes}  # fmt: skip
    return out


dist.init_process_group("gloo")
parts = {"uneven": uneven(), "fsdp1": fsdp1(), "hsdp": hsdp()}
last = accum()  # (its section last: the test's pattern ends at its nested object)
parts["tp"] = tp()
print(json.dumps({"rank": dist.get_rank(), **parts, "accum": last}), flush=True)
dist.barrier()
# Out without gloo's teardown: a rank whose peer closed its pairs first while its own were torn
# down died of SIGABRT once under a loaded suite (after its line was printed), failing the test
# on torch's exit, not on anything measured here.
os._exit(0)
