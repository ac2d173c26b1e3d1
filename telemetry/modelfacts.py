"""What a rank says about its model and machine in its hello: the strategy (from the wrapper
types), the full parameter count and bytes, the device and its memory, the process group's
backend.

torch is imported inside the functions only: the telemetry package stays importable (and
cheap) without torch.
"""

from __future__ import annotations

import sys
from typing import Any


def strategy_of(model: Any) -> str:
    """``ddp``, ``fsdp``, ``dp``, ``tp`` or ``single`` from the type of the module that is called
    (through ``torch.compile``'s wrapper: ``torch.compile(DDP(model))`` is DDP). ``tp``: tensor
    parallel, no wrapper but parameters that are DTensors sharded over other ranks
    (``parallelize_module``); with FSDP on top (2-D parallelism) it is ``fsdp``."""
    import torch

    model = getattr(model, "_orig_mod", model)
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return "ddp"
    if isinstance(model, torch.nn.DataParallel):
        return "dp"
    try:
        from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

        sharded: tuple[type, ...] = (FSDPModule, FullyShardedDataParallel)
    except ImportError:  # torch built without distributed
        return "single"
    if isinstance(model, sharded) or any(isinstance(m, sharded) for m in model.modules()):
        return "fsdp"
    if any(dtensor_shards(p) > 1 for p in model.parameters()):
        return "tp"
    return "single"


PIPELINE = "pp"
"""Pipeline parallelism's strategy: each rank holds a stage, a part of the model's layers, and
trains it on every micro-batch of the step's batch (``torch.distributed.pipelining``)."""


def pipelined(strategy: str) -> str:
    """The strategy of a rank that holds a pipeline stage whose module reads as ``strategy``
    (:func:`strategy_of`): ``pp`` for a stage alone (``single``), else ``pp+`` the stage's own
    data or tensor parallelism (``pp+ddp``, ``pp+fsdp``, ``pp+tp``), so the memory expected of
    it is its stage's, replicated or sharded as that says."""
    if strategy.startswith(PIPELINE):
        return strategy
    return PIPELINE if strategy in ("", "single") else f"{PIPELINE}+{strategy}"


def pipeline_stage(stages: list[Any]) -> tuple[int, int, bool, bool] | None:
    """(the first stage index, the pipeline's stages, whether it is the first stage, whether
    one is the last) of the pipeline stages a rank holds (``PipelineStage``: several under an
    interleaved schedule); None where they cannot be read (a torch whose stages differ)."""
    try:
        index = [int(s.stage_index) for s in stages]
        count = int(stages[0].num_stages)
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    return (min(index), count, 0 in index, count - 1 in index)


def tensor_parallel(model: Any) -> bool:
    """Whether a module of ``model`` is split by tensor parallelism (``parallelize_module``,
    which marks each module it distributes), FSDP on top of it or not."""
    return any(getattr(m, "_distribute_module_applied", False) for m in model.modules())


def tensor_parallel_group(model: Any) -> tuple[int, int]:
    """(ranks in this rank's tensor-parallel group, its place in that group, 0-based): the ranks
    that split one copy of ``model``'s layers between them (``parallelize_module``), and so
    train on one batch, the same on each. (1, 0) without tensor parallelism: DDP, FSDP alone,
    one process, expert parallelism.

    Read from the DTensor meshes of the parameters that tensor parallelism splits: the weights
    of ``nn.Linear`` and ``nn.Embedding`` modules (ColwiseParallel's and RowwiseParallel's, the
    styles whose ranks share a batch: a layer's input replicated over them, or its sequence
    split), on the mesh dimensions they are split over (``Shard``). A parameter of another
    module split over ranks (a mixture of experts' stacked weights, ``[experts, in, out]``
    split by experts over an ``ep`` mesh, torchtitan's ExpertParallel) is no such evidence: the
    ranks of expert parallelism each train on a batch of their own, and counted as a
    tensor-parallel group a job read half its samples/s. Nor is a replicated one (a layer
    ``distribute_module`` left whole). Where no split parameter is a linear layer's or an
    embedding's, each rank's batch counts as its own, as data parallelism's: a tensor-parallel
    job of custom modules split by hand reads twice its samples, never an expert-parallel one
    half. Under FSDP2 on top (2-D parallelism), its data-parallel mesh dimensions are left out
    (FSDP's own mesh says them). The largest group any parameter is on."""
    try:
        from torch import nn
    except ImportError:  # (pragma: the callers have torch)
        return (1, 0)
    fsdp_meshes = _fsdp_meshes(model)
    marked = None
    best = (1, 0)
    for module in model.modules():
        if not isinstance(module, (nn.Linear, nn.Embedding)):
            continue
        for p in module.parameters(recurse=False):
            mesh, placements = getattr(p, "device_mesh", None), getattr(p, "placements", None)
            if mesh is None or placements is None:
                continue
            try:
                dims = list(range(mesh.ndim))
                dp_mesh = fsdp_meshes.get(id(p), False)
                if dp_mesh is None:  # FSDP's, its mesh unknown (a torch that keeps it elsewhere)
                    if marked is None:
                        marked = tensor_parallel(model)
                    if not marked or mesh.ndim < 2:
                        continue  # FSDP's own DTensor
                    dims = dims[1:]  # (FSDP over TP: its dimension first, as fully_shard makes them)
                elif dp_mesh is not False:
                    names, dp_names = mesh.mesh_dim_names or (), dp_mesh.mesh_dim_names or ()
                    if dp_names and all(n in names for n in dp_names):
                        dims = [d for d in dims if names[d] not in dp_names]
                    else:
                        dims = dims[dp_mesh.ndim :]
                coordinate = mesh.get_coordinate()
                if coordinate is None:
                    continue  # (a mesh this rank is not in)
                ways, place = 1, 0
                for d in dims:
                    if not placements[d].is_shard():
                        continue  # (replicated over that dimension: a layer left whole there)
                    size = int(mesh.size(d))
                    ways, place = ways * size, place * size + int(coordinate[d])
            except Exception:  # (a DTensor API unlike this one: counted as not tensor parallel)
                continue
            if ways > best[0]:
                best = (ways, place)
    return best


def _fsdp_meshes(model: Any) -> dict[int, Any]:
    """id(parameter) -> the data-parallel mesh FSDP2 shards it over (None where FSDP2 holds it
    but its mesh cannot be read), for the parameters ``fully_shard`` manages in ``model``."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch built without distributed
        return {}
    out: dict[int, Any] = {}
    for m in model.modules():
        if not isinstance(m, FSDPModule):
            continue
        try:  # (private: FSDP's state, its parameter group and mesh)
            group = m._get_fsdp_state()._fsdp_param_group
            if group is None:
                continue
            mesh = group.mesh_info.mesh
            out.update((id(fp.sharded_param), mesh) for fp in group.fsdp_params)
        except Exception:  # (its parameters and its submodules': an inner FSDP module, later, sets its own)
            out.update((id(p), None) for p in m.parameters())
    return out


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def is_lazy(p: Any) -> bool:
    """A parameter of a lazy module (``nn.LazyLinear``) its first forward has not made yet: it
    has no shape, and its numel() raises."""
    from torch.nn.parameter import UninitializedParameter

    return isinstance(p, UninitializedParameter)


def has_lazy(model: Any) -> bool:
    return any(is_lazy(p) for p in model.parameters())


def fsdp1_flat_params(model: Any) -> list[tuple[Any, int, dict[int, int], int]]:
    """FSDP1's (``FullyShardedDataParallel``) flat parameters in ``model``: each with its
    unsharded size (its original parameters' elements, without padding) and, by ``id``, the parameters ``model.parameters()``
    yields of it with their unsharded sizes: the flat parameter itself, or (``use_orig_params``)
    the original parameters, views of this rank's shard. Their ``numel()`` is this rank's
    shard's: unsharded, a 2-rank model read as half of itself, its saving as none. Last, the
    ranks it is sharded over (its process group: HYBRID_SHARD's is the node's; 0 unknown).
    [] without FSDP1."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:  # torch built without distributed
        return []
    out = []
    for m in model.modules():
        handle = getattr(m, "_handle", None) if isinstance(m, FullyShardedDataParallel) else None
        flat = getattr(handle, "flat_param", None)
        if flat is None:
            continue
        try:
            # (the original parameters' sizes: its unpadded size has room to align each)
            full = int(sum(flat._numels))
            members = {id(flat): full}
            if getattr(flat, "_params", None):  # use_orig_params: each original parameter, whole
                members.update((id(q), int(n)) for q, n in zip(flat._params, flat._numels))
        except (AttributeError, TypeError):  # (private: a torch that keeps them otherwise)
            continue
        try:  # (NO_SHARD: each rank holds all of it, as DDP's)
            ways = 1 if getattr(m.sharding_strategy, "name", "") == "NO_SHARD" else int(m.process_group.size())
        except Exception:
            ways = 0
        out.append((flat, full, members, ways))
    return out


def dtensor_shards(t: Any) -> int:
    """The ranks a DTensor is split over (the sizes of the mesh dimensions it is Shard on:
    FSDP2's, under HSDP only the shard dimension's; 1 replicated), 0 for another tensor."""
    mesh, placements = getattr(t, "device_mesh", None), getattr(t, "placements", None)
    if mesh is None or placements is None:
        return 0
    ways = 1
    for dim, placement in enumerate(placements):
        if placement.is_shard():
            ways *= int(mesh.size(dim))
    return ways


def model_facts(model: Any) -> dict[str, Any]:
    """Hello fields that describe ``model``: strategy, full parameter count and bytes (each
    shared parameter once; an FSDP2 DTensor counts its global size, an FSDP1 flat parameter its
    unsharded one), device, its name and memory, torch version."""
    import torch

    count = nbytes = 0
    device = None
    whole = {k: n for _, _, members, _ in fsdp1_flat_params(model) for k, n in members.items()}
    for p in model.parameters():
        if is_lazy(p):
            continue  # not made yet (a LazyLinear before its first forward): counted once it is
        n = whole.get(id(p), p.numel())
        count += n
        nbytes += n * p.element_size()
        if device is None:
            device = p.device
    facts: dict[str, Any] = {
        "strategy": strategy_of(model),
        "params_count": count,
        "params_bytes": nbytes,
        "torch_version": str(torch.__version__),
    }
    if device is not None and device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        facts.update(device=f"cuda:{index}", device_name=props.name, device_mem_bytes=int(props.total_memory))
    else:
        import psutil

        facts.update(device="cpu", device_name=cpu_name(), device_mem_bytes=int(psutil.virtual_memory().total))
    return facts


def process_group_facts() -> dict[str, Any]:
    """The process group's backend, when torch is loaded and one exists."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    try:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return {"backend": _backend(dist)}
    except Exception:
        pass
    return {}


def _backend(dist: Any) -> str:
    """The default group's backend. A group made without one named (``init_device_mesh``, or
    ``init_process_group()`` alone) reads "undefined" from ``get_backend()``; torch picked one
    for each device type (``get_backend_config()``: "cpu:gloo,cuda:nccl"), and the group's
    default is NCCL where CUDA has it, else gloo: that one."""
    backend = str(dist.get_backend())
    if backend != "undefined":
        return backend
    try:
        name = str(dist.distributed_c10d._get_default_group()._get_backend_name())
        if name and name != "undefined":
            return name
    except Exception:  # (private: a version without it)
        pass
    try:
        per_device = dict(part.split(":", 1) for part in str(dist.get_backend_config()).split(","))
        return per_device.get("cuda") or per_device.get("cpu") or backend
    except Exception:
        return backend
