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

import itertools
import math
import os
import time
import weakref
from typing import Any, Iterator, Sequence

import msgspec

from .schema import Mem

BYTES_PER_PARAM_ADAM = 16
"""fp32 AdamW: 4 (param) + 4 (grad) + 8 (exp_avg, exp_avg_sq); also mixed-precision Adam's
2 + 2 + 12 in the ZeRO paper."""

_SHARDED = ("fsdp", "tp")
"""Strategies that shard parameters, gradients and optimizer state over the ranks (ZeRO-3;
tensor parallelism splits the layers themselves)."""


def expected_bytes_per_rank(
    params_count: int, world_size: int, strategy: str, bytes_per_param: int = BYTES_PER_PARAM_ADAM
) -> int:
    """Bytes of parameters + gradients + optimizer state one rank should hold (ZeRO paper).

    Replicated strategies (single, dp, ddp) hold ``bytes_per_param`` per parameter on every
    rank; sharded ones (fsdp, tp) hold 1/world_size of it (rounded up).
    """
    if params_count < 0 or world_size < 1:
        raise ValueError("params_count must be >= 0 and world_size >= 1")
    total = params_count * bytes_per_param
    if strategy.removeprefix("pp+") in _SHARDED:  # (a pipeline's stage: its own strategy's)
        return math.ceil(total / world_size)
    return total


FULL_EVERY = 50
"""account() recounts every tensor on its first call and every FULL_EVERY-th call after.

A full count walks every parameter, gradient and optimizer-state tensor (about 140 on the
default 2-layer GPT: ~50-100 us on a laptop core, ~150 us on a loaded one). In a training loop
these sizes change only when the optimizer creates its state or the model changes, so in
between the counts are reused (and recounted at once when an optimizer's number of states
changes); the process's RSS and the GPU allocator's figures are read every call (an RSS read
is one pread of /proc/self/statm, a few microseconds: a leak shows at the step it grows).
Measured in a 2-rank DDP run at 7 ms a step: a full count ~400 us, a reused one ~25 us; every 10th call averaged 59 us a
step, every 50th keeps the recount under 10 us a step."""


def _sparse_parts(t: Any) -> tuple[Any, ...]:
    """The tensors that hold a sparse tensor's data (none for a layout not known here)."""
    import torch

    if t.layout is torch.sparse_coo:
        return (t._indices(), t._values())
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return (t.crow_indices(), t.col_indices(), t.values())
    if t.layout in (torch.sparse_csc, torch.sparse_bsc):
        return (t.ccol_indices(), t.row_indices(), t.values())
    return ()


class _Rss:
    """This process's resident set size, read cheaply: /proc/self/statm kept open (Linux), else
    psutil."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._proc: Any = None
        try:
            self._fd: int | None = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._fd = None

    def __call__(self) -> int:
        if self._fd is not None:
            try:
                return int(os.pread(self._fd, 128, 0).split()[1]) * self._page
            except (OSError, ValueError, IndexError):
                pass
        if self._proc is None:
            import psutil

            self._proc = psutil.Process(os.getpid())
        return self._proc.memory_info().rss

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass


class MemoryAccountant:
    """Measures one rank's memory; holds what can be cached between steps.

    The parameter list (and each parameter's unsharded size) is computed once; gradients and
    optimizer state are recounted every ``full_every`` calls (see :data:`FULL_EVERY`), since
    the optimizer creates its state lazily and ``zero_grad(set_to_none=True)`` replaces
    gradients each step. DDP's bucket sizes are read from its logging data until its buckets
    are rebuilt (after the first steps), then cached.
    """

    def __init__(self, model: Any, *, ddp_module: Any = None, full_every: int = FULL_EVERY) -> None:
        import torch

        self._torch = torch
        try:
            from torch.distributed.tensor import DTensor

            self._dtensor: type | None = DTensor
        except ImportError:  # torch built without distributed
            self._dtensor = None
        from .modelfacts import fsdp1_flat_params

        self.params: list[Any] = []
        """The parameters this rank holds and trains: the model's, and any other an optimizer
        trains (a free-standing nn.Parameter, a layer added as it trains)."""
        self.params_full_bytes = 0
        flats = fsdp1_flat_params(model)
        self._flat: dict[int, tuple[int, int]] = {
            k: (i, n) for i, (_, _, members, _) in enumerate(flats) for k, n in members.items()
        }
        """id of each parameter FSDP1 keeps in a flat parameter -> (the flat parameter's index in
        ``_flat_full``, the parameter's unsharded elements): its numel() is this rank's shard's,
        so its gradient and optimizer state are counted unsharded by the flat parameter's."""
        self._flat_full = [_trainable(flat, full) for flat, full, _, _ in flats]
        """Each flat parameter's trainable elements, unsharded: what its gradients and optimizer
        state are of (LoRA's frozen weights share a flat parameter with trained ones)."""
        self._flat_shards = max((ways for *_, ways in flats), default=0)
        self.shards = 0
        """Ranks the sharded parameters are split over (the most any is: see Mem.shards)."""
        self.is_cuda = False
        self._model = weakref.ref(model)
        self._list_params(model, ())
        self.full_every = max(1, full_every)
        ddps = () if ddp_module is None else ddp_module if isinstance(ddp_module, (list, tuple)) else (ddp_module,)
        self._ddps = [weakref.ref(d) for d in ddps]
        """Every DDP wrapper of the model's parameters (a GAN wraps its two models apart)."""
        self._buckets: dict[int, int] = {}
        """Bucket bytes of each DDP wrapper (by its place in _ddps) whose buckets are final."""
        self._slots: dict[int, tuple[Mem, tuple[int, ...], int]] = {}
        """Per slot (see :meth:`measure`): its last count, the optimizers' state sizes then, and
        its calls since."""
        self._rss = _Rss()

    def _list_params(self, model: Any, optimizers: Sequence[Any]) -> None:
        """List the model's parameters and the ones ``optimizers`` train besides (a soft
        prompt's or a learnt loss weight's nn.Parameter no module holds; the layers of a model
        grown as it trains, put in a param group then): their params and grads read 2.0 MiB
        beside 12.0 MiB of Adam state (review 299)."""
        from .modelfacts import dtensor_shards

        seen: set[int] = set()
        params: list[Any] = []
        full = 0
        shards = self._flat_shards
        flat = self._flat
        groups = (p for opt in optimizers for group in getattr(opt, "param_groups", ()) for p in group["params"])
        for p in itertools.chain(model.parameters() if model is not None else (), groups):
            if id(p) in seen:
                continue
            seen.add(id(p))
            params.append(p)
            full += flat.get(id(p), (0, p.numel()))[1] * p.element_size()
            shards = max(shards, dtensor_shards(p))
        self.params, self.params_full_bytes, self.shards = params, full, shards
        self.is_cuda = any(p.device.type == "cuda" for p in params)

    def buckets_bytes(self, grads_bytes: int) -> int:
        """DDP gradient-bucket bytes, summed over the model's DDP wrappers.

        Read from each DDP's logging data (``rebuilt_bucket_sizes``, else ``bucket_sizes``: the
        bytes of each bucket's flat buffer). Only when that is unavailable (a torch without
        ``_get_ddp_logging_data``) is it taken to equal the gradient bytes, which is what the
        buckets hold. 0 without a DDP module, and 0 for a DDP with ``gradient_as_bucket_view=True``:
        the gradients are then views of the buckets, counted once, as gradients.
        """
        total = 0
        for i, ref in enumerate(self._ddps):
            ddp = ref()
            if ddp is None or getattr(ddp, "gradient_as_bucket_view", False):
                continue
            cached = self._buckets.get(i)
            if cached is not None:
                total += cached
                continue
            try:
                data = ddp._get_ddp_logging_data()
            except Exception:
                return grads_bytes
            sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes")
            if not sizes:
                return grads_bytes
            nbytes = sum(int(s) for s in str(sizes).replace(",", " ").split())
            # DDP rebuilds its buckets once, in the order gradients became ready; after that the
            # sizes no longer change.
            if data.get("has_rebuilt_buckets"):
                self._buckets[i] = nbytes
            total += nbytes
        return total

    def count(self, optimizers: Sequence[Any]) -> Mem:
        """Walk every tensor: local bytes de-duplicated by storage, and unsharded bytes."""
        dtensor = self._dtensor
        tensor_type = self._torch.Tensor
        strided = self._torch.strided
        seen: set[int] = set()

        def local_bytes(t: Any) -> int:
            if dtensor is not None and isinstance(t, dtensor):
                t = t._local_tensor  # the local shard (to_local() without autograd bookkeeping)
            if t.layout is not strided:
                # A sparse gradient (nn.Embedding(sparse=True)) has no storage of its own: its
                # indices' and values' (untyped_storage() raised, and the step lost every figure).
                return sum(map(local_bytes, _sparse_parts(t)))
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr in seen or ptr == 0:
                return 0
            seen.add(ptr)
            return storage.nbytes()

        flat = self._flat
        flat_grads: dict[int, int] = {}
        """FSDP1 flat parameters (their index) some of whose gradients are held -> element size."""
        params_bytes = grads_bytes = grads_full = 0
        for p in self.params:
            params_bytes += local_bytes(p)
            g = p.grad
            if g is not None:
                held = local_bytes(g)
                grads_bytes += held
                if id(p) in flat:
                    # unsharded, its flat parameter's whole gradient (a parameter outside this
                    # rank's shard has none here, as its optimizer state)
                    flat_grads[flat[id(p)][0]] = g.element_size()
                else:
                    # A DTensor's numel is global; a sparse gradient's is its dense shape's.
                    grads_full += held if g.layout is not strided else g.numel() * g.element_size()
        grads_full += sum(self._flat_full[i] * size for i, size in flat_grads.items())
        # Gradients that are views of DDP's buckets (gradient_as_bucket_view) hold the whole
        # bucket, room for a parameter unused this step (its grad None) too: that is what the
        # unsharded state holds as well (a replicated run read 1.07x "what ddp should").
        grads_full = max(grads_full, grads_bytes)
        optim_bytes = optim_full = 0
        counted: set[int] = set()
        states: set[int] = set()
        flat_state: dict[int, list[int]] = {}
        """FSDP1 flat parameter (index) -> [bytes of its parameters' elementwise states here
        (Adam's moments), the elements they are of]: scaled to its unsharded elements."""
        for opt, scale in _optimizer_states(optimizers):
            if id(opt) in counted:
                continue
            counted.add(id(opt))
            for param, state in opt.state.items():
                at = flat.get(id(param))
                elementwise = 0
                for value in state.values():
                    if isinstance(value, tensor_type) and id(value) not in states:
                        # A tensor two optimizers share counts once in both sums. Unsharded,
                        # it counts even when this rank's shard of it is empty (a parameter
                        # with fewer rows than ranks leaves some ranks none).
                        states.add(id(value))
                        optim_bytes += local_bytes(value)
                        nbytes = value.numel() * value.element_size()
                        if at is not None and value.shape == param.shape and value.numel():  # (not a step count)
                            elementwise += nbytes
                        else:
                            optim_full += int(nbytes * scale)
                if elementwise:
                    one = flat_state.setdefault(at[0], [0, 0])
                    one[0] += elementwise
                    one[1] += param.numel()
        for i, (nbytes, elements) in flat_state.items():
            optim_full += int(nbytes * self._flat_full[i] / elements)
        return Mem(
            params_bytes=params_bytes,
            grads_bytes=grads_bytes,
            optim_bytes=optim_bytes,
            buckets_bytes=self.buckets_bytes(grads_bytes),
            params_full_bytes=self.params_full_bytes,
            grads_full_bytes=grads_full,
            optim_full_bytes=optim_full,
            shards=self.shards,
            rss_bytes=self._rss(),
        )

    def measure(self, optimizers: Sequence[Any], *, reset_peak: bool = True, slot: int = 0) -> Mem:
        """One :class:`Mem` for now (call after the optimizer step, before ``zero_grad``):
        a full :meth:`count` on the first and every ``full_every``-th call or when an
        optimizer's number of states or the number of gradients held changed, else the last
        count with fresh GPU figures.

        ``slot``: where in the iteration the call is, each with a count of its own. Optimizers
        that step and zero in turn (``for o in opts: o.step(); o.zero_grad()``) hold different
        gradients at each one's step: the first holds all, the second only its own. One cache
        would carry whichever the recount fell on to both."""
        # (and the gradients held: a branch no longer used, an expert no token reached, layers
        # frozen as it trains have none now, and the count before held theirs for 50 calls)
        # (and the parameters the optimizers train: a param group added as it trains)
        trained = sum(len(group["params"]) for opt in optimizers for group in getattr(opt, "param_groups", ()))
        sig = (*(len(opt.state) for opt in optimizers), trained, sum(p.grad is not None for p in self.params))
        held = self._slots.get(slot)
        if held is None or sig != held[1] or held[2] >= self.full_every:
            # Listed again with each count: a model grown as it trains has new parameters.
            self._list_params(self._model(), optimizers)
            sig = (*sig[:-1], sum(p.grad is not None for p in self.params))
            held = (self.count(optimizers), sig, 0)
        last = held[0]
        self._slots[slot] = (last, sig, held[2] + 1)
        rss = self._rss()
        if not self.is_cuda:
            return msgspec.structs.replace(last, rss_bytes=rss)  # a copy: callers may fill in more fields
        cuda = self._torch.cuda
        mem = msgspec.structs.replace(
            last,
            rss_bytes=rss,
            cuda_allocated_bytes=int(cuda.memory_allocated()),
            cuda_reserved_bytes=int(cuda.memory_reserved()),
            cuda_peak_bytes=int(cuda.max_memory_allocated()),
        )
        if reset_peak:  # so that the next call reports the next step's peak
            cuda.reset_peak_memory_stats()
        return mem


def _trainable(flat: Any, full: int) -> int:
    """The elements of FSDP1's flat parameter ``flat`` (``full`` of them unsharded) that train:
    with use_orig_params, its original parameters that require grad; else all or none."""
    params = getattr(flat, "_params", None)
    if params:
        return sum(int(n) for q, n in zip(params, flat._numels) if q.requires_grad)
    return full if flat.requires_grad else 0


def _optimizer_states(optimizers: Sequence[Any]) -> list[tuple[Any, float]]:
    """The optimizers whose ``state`` holds tensors, each with how much bigger its state would
    be unsharded. ZeroRedundancyOptimizer (ZeRO stage 1) keeps this rank's shard of the state
    in an inner optimizer (``.optim``; its own ``state`` stays empty) over the parameters this
    rank owns: unsharded, every parameter of its groups would have as much state per element."""
    zero: dict[int, float] = {}
    out: list[tuple[Any, float]] = []
    for opt in optimizers:
        inner = getattr(opt, "optim", None)
        if inner is not None and hasattr(opt, "_partition_parameters") and hasattr(inner, "state"):
            owned = sum(p.numel() for p in inner.state)
            total = sum(p.numel() for group in opt.param_groups for p in group["params"])
            zero[id(inner)] = total / owned if owned else 1.0
            out.append((inner, 1.0))
        else:
            out.append((opt, 1.0))
    return [(opt, zero.get(id(opt), scale)) for opt, scale in out]


_accountants: "weakref.WeakKeyDictionary[Any, MemoryAccountant]" = weakref.WeakKeyDictionary()


def account(model: Any, optimizers: Any, *, ddp_module: Any = None, slot: int = 0) -> Mem:
    """Memory this rank holds now: call after the optimizer step, before ``zero_grad``.

    ``model``: the module whose parameters are trained (the FSDP2 root, or the module DDP
    wraps, or the DDP module itself); ``optimizers``: one optimizer or several;
    ``ddp_module``: the DDP wrapper, or a list of them, for their gradient-bucket sizes. The parameter list is
    cached per model, and the tensors are recounted every :data:`FULL_EVERY` calls (and
    whenever an optimizer's state grows), so calling this every step costs a few microseconds
    on average. Use :class:`MemoryAccountant` with ``full_every=1`` to recount every call.
    ``slot``: see :meth:`MemoryAccountant.measure`.
    """
    acct = _accountants.get(model)
    if acct is None:
        acct = MemoryAccountant(model, ddp_module=ddp_module)
        _accountants[model] = acct
    if hasattr(optimizers, "state") and hasattr(optimizers, "param_groups"):
        optimizers = (optimizers,)
    return acct.measure(tuple(optimizers), slot=slot)


__all__ = [
    "MemoryProbe",
    "measure_every",
    "accountable",
    "account",
    "expected_bytes_per_rank",
    "MemoryAccountant",
    "BYTES_PER_PARAM_ADAM",
    "FULL_EVERY",
]


# -- measured no more often than it is cheap ----------------------------------------------

MEM_BUDGET = 0.01
"""Fraction of the step time that memory accounting may take; above it, it is sampled every
few steps and the steps between repeat the last measurement."""
MEM_MAX_EVERY = 100
"""Memory is measured at least once every this many steps."""
MEM_EVERY_S = 0.1
"""Steps closer together than this are not all measured: one every this many seconds of steps
(at most MEM_MAX_EVERY steps apart). Viewers see memory at the hub's frames, ten a second; a
CUDA peak is the allocator's since the last measurement, so none between is missed. Measured at
every step of a 2 ms step (its cost under MEM_BUDGET), memory took 23 us of each rank's step
in a DDP x2 run whose hooks' whole cost was about 140 us."""


def measure_every(cost_s: float, step_s: float, slots: int = 1) -> int:
    """Steps per measurement for a measurement that costs ``cost_s`` and steps of ``step_s``
    (0: not known yet), ``slots`` measurements a step sharing the budget: every step while it
    costs under MEM_BUDGET of the step and the steps are MEM_EVERY_S apart, else as many steps
    as keep it so, up to MEM_MAX_EVERY."""
    budget_s = MEM_BUDGET * step_s / slots
    by_cost = 1 if budget_s <= 0 or cost_s <= budget_s else math.ceil(cost_s / budget_s)
    by_time = math.ceil(MEM_EVERY_S / step_s) if step_s > 0 else 1
    return min(MEM_MAX_EVERY, max(by_cost, by_time))


_clock = time.monotonic
"""When a repeated measurement is too old (tests set a clock of their own)."""

DUE = object()
""":meth:`MemoryProbe.repeat`'s answer when a measurement is due (None is a measurement: one
that failed)."""


class MemoryProbe:
    """Calls :func:`account` every step while it costs under :data:`MEM_BUDGET` of the step
    time and the steps are :data:`MEM_EVERY_S` apart or more, else every N steps (N chosen from
    the measured cost and the step time, and never longer apart than that cost and MEM_EVERY_S
    allow in time); the steps in between repeat the last measurement, so every step carries
    one. Each ``slot`` (an optimizer's place in the step, see :meth:`MemoryAccountant.measure`)
    is sampled and repeated apart, the budget shared between them."""

    def __init__(self) -> None:
        self.last: Mem | None = None
        """The newest measurement, of any slot."""
        self.cost_s = 0.0
        """Wall time of the last ``account`` call."""
        self.mean_cost_s: float | None = None
        """Running mean of those times."""
        self.every = 1
        """Steps per measurement, from the last cost and step time."""
        self._slots: dict[int, tuple[Mem | None, int, float]] = {}
        """Per slot: its last measurement, the calls left to repeat it (of ``_model``), and the
        time.monotonic() from which it is repeated no more: steps that slowed down (a backbone
        unfrozen, a larger batch) do not repeat a measurement of fast ones for long."""
        self._model: Any = None
        """A weak reference to the model measured last (one the script lets go must go)."""

    def repeat(self, model: Any, *, force: bool = False, slot: int = 0) -> Any:
        """The ``slot``'s last measurement of ``model`` when this call repeats it (counted as
        one), else :data:`DUE`. :meth:`measure` asks this first; a caller whose arguments to
        it cost something to gather (most calls repeat) may ask first, then measure with
        ``force`` when it is due."""
        ref = self._model
        if ref is None or ref() is not model:  # another model (a fold trained next)
            self._model = weakref.ref(model)
            self._slots = {}
        held = self._slots.get(slot)
        if not force and held is not None and held[1] > 0 and _clock() < held[2]:
            self._slots[slot] = (held[0], held[1] - 1, held[2])
            return held[0]
        return DUE

    def measure(self, model: Any, optimizers: Any, *, ddp_module: Any = None, step_s: float = 0.0, force: bool = False, slot: int = 0) -> Mem | None:
        held = self.repeat(model, force=force, slot=slot)
        if held is not DUE:
            return held
        t0 = time.perf_counter()
        until = math.inf
        try:
            mem = account(model, optimizers, ddp_module=ddp_module, slot=slot)
        except Exception:  # an odd model or optimizer: the step goes out without memory
            mem = None
            self.every = MEM_MAX_EVERY
        else:
            self.cost_s = time.perf_counter() - t0
            # A running mean: account() itself caches, so its calls are mostly cheap with an
            # occasional full recount; the mean is what a step pays.
            self.mean_cost_s = self.cost_s if self.mean_cost_s is None else 0.8 * self.mean_cost_s + 0.2 * self.cost_s
            slots = max(1, len(self._slots))
            self.every = measure_every(self.mean_cost_s, step_s, slots=slots)
            # repeated for that many steps, and no longer than its cost keeps within the budget
            until = _clock() + max(MEM_EVERY_S, self.mean_cost_s * slots / MEM_BUDGET)
        self.last = mem
        self._slots[slot] = (mem, self.every - 1, until)
        return mem


class Holder:
    """Several modules (or optimizers' parameters) seen as one model by ``account``."""

    def __init__(self, modules: list[Any], optimizers: list[Any]) -> None:
        # Weakly: a model the script lets go must go (the instrumentation keeps this holder).
        self._modules = [weakref.ref(m) for m in modules]
        self._optimizers = [weakref.ref(o) for o in optimizers]

    def modules(self) -> list[Any]:
        """The modules held that are still alive."""
        return [m for m in (r() for r in self._modules) if m is not None]

    def parameters(self) -> Iterator[Any]:
        seen: set[int] = set()
        modules = self.modules()
        optimizers = [o for o in (r() for r in self._optimizers) if o is not None]
        if modules:
            params = (p for m in modules for p in m.parameters())
        else:
            params = (p for opt in optimizers for g in opt.param_groups for p in g["params"])
        for p in params:
            if id(p) not in seen:
                seen.add(id(p))
                yield p


def accountable(modules: list[Any], optimizers: list[Any], cache: dict[str, Any]) -> Any:
    """The object to pass to ``account`` as the model: the one module when there is one, else a
    holder of all (kept in ``cache`` while the lists do not change, since ``account`` caches by
    model)."""
    if len(modules) == 1:
        return modules[0]
    key = (tuple(id(m) for m in modules), tuple(id(o) for o in optimizers) if not modules else ())
    if cache.get("key") != key:
        cache["key"] = key
        cache["holder"] = Holder(modules, optimizers)
    return cache["holder"]
