"""Per-rank memory accounting: what one rank holds after its optimizer step.

:func:`account` returns a :class:`~pardash.telemetry.schema.Mem`: bytes of parameters,
gradients and optimizer state this rank holds, de-duplicated by storage (a tied weight, or
views of one buffer, count once), next to what the same tensors take unsharded. FSDP2
parameters, gradients and Adam states are DTensors: their local shard's storage is counted,
and their global shape gives the unsharded size. :func:`expected_bytes_per_rank` is the ZeRO
paper's arithmetic to compare against.

torch is imported inside the functions only: the telemetry package stays importable (and
cheap) without torch.
"""

from __future__ import annotations

import math
import os
import weakref
from typing import Any, Iterable

from .schema import Mem

BYTES_PER_PARAM_ADAM = 16
"""fp32 AdamW: 4 (param) + 4 (grad) + 8 (exp_avg, exp_avg_sq); also mixed-precision Adam's
2 + 2 + 12 in the ZeRO paper."""

_SHARDED = ("fsdp",)
"""Strategies that shard parameters, gradients and optimizer state over the ranks (ZeRO-3)."""


def expected_bytes_per_rank(
    params_count: int, world_size: int, strategy: str, bytes_per_param: int = BYTES_PER_PARAM_ADAM
) -> int:
    """Bytes of parameters + gradients + optimizer state one rank should hold (ZeRO paper).

    Replicated strategies (single, dp, ddp) hold ``bytes_per_param`` per parameter on every
    rank; fully sharded ones (fsdp) hold 1/world_size of it (rounded up).
    """
    if params_count < 0 or world_size < 1:
        raise ValueError("params_count must be >= 0 and world_size >= 1")
    total = params_count * bytes_per_param
    if strategy in _SHARDED:
        return math.ceil(total / world_size)
    return total


class MemoryAccountant:
    """Measures one rank's memory; holds what can be cached between steps.

    The parameter list (and each parameter's unsharded size) is computed once; gradients and
    optimizer state are read every call, since the optimizer creates its state lazily and
    ``zero_grad(set_to_none=True)`` frees gradients each step. DDP's bucket sizes are read from
    its logging data until its buckets are rebuilt (after the first steps), then cached.
    """

    def __init__(self, model: Any, *, ddp_module: Any = None) -> None:
        import torch

        self._torch = torch
        try:
            from torch.distributed.tensor import DTensor

            self._dtensor: type | None = DTensor
        except ImportError:  # torch built without distributed
            self._dtensor = None
        seen: set[int] = set()
        self.params: list[Any] = []
        self.params_full_bytes = 0
        for p in model.parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            self.params.append(p)
            self.params_full_bytes += p.numel() * p.element_size()
        self.is_cuda = any(p.device.type == "cuda" for p in self.params)
        self._ddp = weakref.ref(ddp_module) if ddp_module is not None else None
        self._buckets_bytes: int | None = None
        self._buckets_final = False
        import psutil

        self._proc = psutil.Process(os.getpid())

    # -- pieces ------------------------------------------------------------------------------

    def _local(self, t: Any) -> Any:
        """The tensor whose storage this rank holds (a DTensor's local shard)."""
        if self._dtensor is not None and isinstance(t, self._dtensor):
            return t._local_tensor  # to_local() without its autograd bookkeeping
        return t

    def _add(self, t: Any, seen: set[int]) -> int:
        """Bytes of ``t``'s storage, or 0 when that storage was counted already."""
        storage = self._local(t).untyped_storage()
        ptr = storage.data_ptr()
        if ptr in seen or ptr == 0:
            return 0
        seen.add(ptr)
        return storage.nbytes()

    def buckets_bytes(self, grads_bytes: int) -> int:
        """DDP gradient-bucket bytes.

        Read from DDP's logging data (``rebuilt_bucket_sizes``, else ``bucket_sizes``: the
        bytes of each bucket's flat buffer). Only when that is unavailable (a torch without
        ``_get_ddp_logging_data``) is it taken to equal the gradient bytes, which is what the
        buckets hold. 0 without a DDP module.
        """
        ddp = self._ddp() if self._ddp is not None else None
        if ddp is None:
            return 0
        if self._buckets_final and self._buckets_bytes is not None:
            return self._buckets_bytes
        try:
            data = ddp._get_ddp_logging_data()
        except Exception:
            return grads_bytes
        sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes")
        if not sizes:
            return grads_bytes
        self._buckets_bytes = sum(int(s) for s in str(sizes).replace(",", " ").split())
        # DDP rebuilds its buckets once, in the order gradients became ready; after that the
        # sizes no longer change.
        self._buckets_final = bool(data.get("has_rebuilt_buckets"))
        return self._buckets_bytes

    # -- the measurement ---------------------------------------------------------------------

    def measure(self, optimizers: Iterable[Any], *, reset_peak: bool = True) -> Mem:
        """One :class:`Mem` for the current state (call after the optimizer step, before
        ``zero_grad``)."""
        seen: set[int] = set()
        params_bytes = grads_bytes = grads_full = 0
        for p in self.params:
            params_bytes += self._add(p, seen)
            g = p.grad
            if g is not None:
                grads_bytes += self._add(g, seen)
                grads_full += g.numel() * g.element_size()
        optim_bytes = optim_full = 0
        for opt in optimizers:
            for state in opt.state.values():
                for value in state.values():
                    if isinstance(value, self._torch.Tensor):
                        optim_bytes += self._add(value, seen)
                        optim_full += value.numel() * value.element_size()
        mem = Mem(
            params_bytes=params_bytes,
            grads_bytes=grads_bytes,
            optim_bytes=optim_bytes,
            buckets_bytes=self.buckets_bytes(grads_bytes),
            params_full_bytes=self.params_full_bytes,
            grads_full_bytes=grads_full,
            optim_full_bytes=optim_full,
            rss_bytes=self._proc.memory_info().rss,
        )
        if self.is_cuda:
            cuda = self._torch.cuda
            mem.cuda_allocated_bytes = int(cuda.memory_allocated())
            mem.cuda_reserved_bytes = int(cuda.memory_reserved())
            mem.cuda_peak_bytes = int(cuda.max_memory_allocated())
            if reset_peak:  # so the next call reports the next step's peak
                cuda.reset_peak_memory_stats()
        return mem


_accountants: "weakref.WeakKeyDictionary[Any, MemoryAccountant]" = weakref.WeakKeyDictionary()


def account(model: Any, optimizers: Any, *, ddp_module: Any = None) -> Mem:
    """Memory this rank holds now: call after the optimizer step, before ``zero_grad``.

    ``model``: the module whose parameters are trained (the FSDP2 root, or the module DDP
    wraps, or the DDP module itself); ``optimizers``: one optimizer or several;
    ``ddp_module``: the DDP wrapper, for its gradient-bucket sizes. The parameter list is
    cached per model, so calling this every step costs tens of microseconds on small models.
    """
    acct = _accountants.get(model)
    if acct is None:
        acct = MemoryAccountant(model, ddp_module=ddp_module)
        _accountants[model] = acct
    if hasattr(optimizers, "state") and hasattr(optimizers, "param_groups"):
        optimizers = (optimizers,)
    return acct.measure(optimizers)


__all__ = ["account", "expected_bytes_per_rank", "MemoryAccountant", "BYTES_PER_PARAM_ADAM"]
