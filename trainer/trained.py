"""What a script trains, as the instrumentation's hooks see it: the root modules and the
optimizers, held weakly.

:class:`Trained` is the model bookkeeping of :class:`~pardash.trainer.instrument.Instrument`:
which modules are roots (the outermost module called with parameters, under grad: the DDP or
FSDP2 wrapper when there is one), which DDP roots may sync, which optimizers stepped or were
made, which roots a step called, and what memory accounting should measure. Everything is held
through weak references, so a script that trains one model after another (k-fold, a sweep)
frees each as it would without pardash; a root freed is told to the instrument, which then looks
for the next model from its first forward. No hooks here: the instrument calls in.
"""

from __future__ import annotations

import functools
import re
import weakref
from typing import Any, Callable

import torch

from pardash.telemetry import memory, modelfacts

MADE_KEPT = 64
"""Weak references to optimizers made that are kept before the dead ones are swept."""

FORWARD_ARRIVES = ("fsdp", "tp")
"""Strategies whose ranks first wait for each other in the root's forward: FSDP's pre-forward
hook all-gathers (FSDP1, or a model compiled whole), tensor parallelism's layers all-reduce or
gather their activations (its collectives are torch's functional ones, untimed: a rank's self
time ends as its forward begins)."""


class Trained:
    """The roots and optimizers seen, weakly held; ``on_root_gone`` runs when a root is freed."""

    def __init__(self, on_root_gone: Callable[[], None]) -> None:
        self._on_root_gone = on_root_gone
        self._roots: list[weakref.ref[Any]] = []
        self.root_ids: set[int] = set()
        self.trained_ids: set[int] = set()
        """The live roots' ids and those of the modules DDP/DP roots wrap (see :meth:`trains`)."""
        self._optimizers: list[weakref.ref[Any]] = []
        self.ddp_ids: set[int] = set()
        """The live DDP roots' ids: a forward of any of them may sync (a kept model's or the new one's)."""
        self._has_params: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
        self._made: list[weakref.ref[Any]] = []
        """Optimizers made since install (one may step only after a model is evaluated with grad)."""
        self.optimizer_new = -1
        """The step in which the newest optimizer first stepped (see :meth:`used_roots`)."""
        self._root_step: dict[int, int] = {}
        self._unhooked_step: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        """The step each module called as a root without grad (not a root) was last called in."""
        self._may_step: tuple[Any, bool] = ((), False)
        """The last answer of :meth:`waiting_optimizer_holds`, and what it was asked about."""
        """The step each live root was last called in, training (see :meth:`used_roots`)."""
        self._holders: dict[str, Any] = {}
        self._measured: weakref.ref[Any] | None = None
        self._changes = 0
        """Changes to the optimizers made or stepping (see :meth:`waiting_optimizer_holds`)."""
        self._none_waiting = -1
        """The ``_changes`` at which no optimizer made was waiting (none can be until the next)."""

    @property
    def roots(self) -> list[Any]:
        """The root modules seen training that are still alive, oldest first."""
        return [m for m in (r() for r in self._roots) if m is not None]

    @property
    def optimizers(self) -> list[Any]:
        """The optimizers seen stepping that are still alive, oldest first."""
        return [o for o in (r() for r in self._optimizers) if o is not None]

    def ddps_of(self, model: Any) -> list[Any]:
        """The DDP roots among what memory accounting measures (``accountable``'s answer): a
        GAN's two models each have their buckets."""
        modules = model.modules() if isinstance(model, memory.Holder) else [model]
        return [m for m in modules if id(m) in self.ddp_ids]

    def has_roots(self) -> bool:
        return bool(self._roots)

    def optimizers_alive(self) -> int:
        """``len(self.optimizers)``, without the list."""
        n = 0
        for r in self._optimizers:
            if r() is not None:
                n += 1
        return n

    def optimizer_count(self) -> int:
        """Optimizers seen stepping, as weakly held (a freed one leaves at once)."""
        return len(self._optimizers)

    def has_params(self, module: Any) -> bool:
        has = self._has_params.get(module)
        if has is None:
            has = self._has_params[module] = next(module.parameters(), None) is not None
        return has

    # -- optimizers -----------------------------------------------------------------------

    def add_optimizer(self, optimizer: Any, step: int) -> bool:
        """Note an optimizer that stepped in ``step``; False if it was known already."""
        for r in self._optimizers:  # (a loop, not any(): no generator a step)
            if r() is optimizer:
                return False
        self._optimizers.append(weakref.ref(optimizer, self._optimizer_gone))
        self._changes += 1
        self.optimizer_new = step
        return True

    def _optimizer_gone(self, ref: Any) -> None:
        self._optimizers = [r for r in self._optimizers if r is not ref]
        self._changes += 1
        self._holders.clear()

    def made(self, optimizer: Any) -> None:
        """An optimizer was constructed (it may step only later, or never)."""
        if len(self._made) >= MADE_KEPT:
            self._made[:] = [r for r in self._made if r() is not None]
        self._made.append(weakref.ref(optimizer))
        self._changes += 1

    def _held(self) -> set[int]:
        """The ids of the parameters live optimizers hold, stepped or only made."""
        optimizers = {id(o): o for o in (*self.optimizers, *(r() for r in self._made)) if o is not None}
        return {id(p) for o in optimizers.values() for g in o.param_groups for p in g["params"]}

    def holds(self, param: Any) -> bool:
        """Whether a live optimizer, stepped or only made, holds ``param``."""
        return id(param) in self._held()

    def trained_by_an_optimizer(self, module: Any) -> bool:
        """Whether a live optimizer, stepped or only made, holds any of ``module``'s parameters
        (a LoRA model's first ones are frozen; fine-tuning may make its optimizer after
        ``model.eval()``)."""
        held = self._held()
        return any(id(p) in held for p in module.parameters())

    # -- roots ----------------------------------------------------------------------------

    def add_root(self, module: Any) -> str:
        """Note a root seen training; returns its strategy (single, ddp, fsdp, dp, tp)."""
        self.root_ids.add(id(module))
        inner = getattr(module, "module", None)
        ids = (id(module), id(inner)) if isinstance(inner, torch.nn.Module) else (id(module),)
        self.trained_ids.update(ids)
        ref = weakref.ref(module, functools.partial(self._root_gone, ids=ids))
        self._roots.append(ref)
        strategy = modelfacts.strategy_of(module)
        if strategy == "ddp":
            self.ddp_ids.add(id(module))
        return strategy

    def _root_gone(self, ref: Any, ids: tuple[int, ...] = ()) -> None:
        """A root module was freed (a model trained before the one the script builds next):
        its ids may come back as another object's."""
        try:
            self._roots = [r for r in self._roots if r is not ref]
            self.root_ids.difference_update(ids)
            self.trained_ids.difference_update(ids)
            self._holders.clear()
            for i in ids:
                self._root_step.pop(i, None)
            self.ddp_ids.difference_update(ids[:1])
            self._on_root_gone()
        except Exception:
            pass  # a callback in the collector, maybe at exit: never a traceback

    def trains(self, module: Any) -> bool:
        """Whether ``module`` is a model this script trains (a root seen training, or the
        module a DDP/DP root wraps)."""
        return id(module) in self.trained_ids

    def called(self, module: Any, step: int) -> None:
        """A root was called training in ``step``."""
        self._root_step[id(module)] = step

    def called_without_grad(self, module: Any, step: int) -> None:
        """A module with parameters was the outermost call, without grad, in ``step`` (a GAN's
        generator making fakes under ``no_grad``, a teacher's targets)."""
        self._unhooked_step[module] = step

    def waiting_optimizer_holds(self, since: int) -> bool:
        """Whether an optimizer made but never stepped holds parameters of a module called
        since step ``since``: a GAN's generator, called for the discriminator's fakes, whose
        optimizer first steps after the discriminator's, in the same iteration (from the second
        one, or after a warm-up). One that holds none (a model trained next) is no sign."""
        if self._none_waiting == self._changes:
            # None was waiting, and no optimizer was made or stepped first since: none is (one
            # made can only be freed meanwhile). Asked every step: the lists below, once.
            return False
        waiting = [o for o in (r() for r in self._made) if o is not None and all(o is not s() for s in self._optimizers)]
        if not waiting:
            self._none_waiting = self._changes
            return False
        called = [m for m in self.roots if self._root_step.get(id(m), -2) >= since]
        called += [m for m, s in list(self._unhooked_step.items()) if s >= since]
        key = (tuple(map(id, waiting)), tuple(map(id, called)))
        if self._may_step[0] != key:
            held = {id(p) for o in waiting for g in o.param_groups for p in g["params"]}
            self._may_step = (key, any(id(p) in held for m in called for p in m.parameters()))
        return self._may_step[1]

    def used_roots(self, step: int) -> list[Any]:
        """The roots ``step`` called, or the one before unless an optimizer is new in this one
        (a GAN's generator stepping every other step counts; a frozen backbone called as a root
        of its own too; a model kept after its training, an ensemble's earlier fold, not). None
        (a new model, not seen at its first step): its optimizers' parameters; without an
        optimizer, every root."""
        roots = self.roots
        since = self._used_since(step)
        used = [r for r in roots if self._root_step.get(id(r), -2) >= since]
        return used if used or self._optimizers else roots

    def _used_since(self, step: int) -> int:
        """The first step whose roots count as used in ``step`` (see :meth:`used_roots`)."""
        return step - 1 if self.optimizer_new < step else step

    def _one_used_root(self, step: int) -> Any:
        """The root, when there is one alive and ``step`` used it (:meth:`used_roots` is then
        it alone, and :func:`memory.accountable` of it is itself); else None."""
        if len(self._roots) != 1:
            return None
        root = self._roots[0]()
        if root is None or self._root_step.get(id(root), -2) < self._used_since(step):
            return None
        return root

    def accountable(self, step: int) -> tuple[Any, bool]:
        """What memory accounting measures in ``step`` (a module whose parameters, buffers and
        gradients are the step's), and whether it differs from what was measured last (None:
        nothing to measure)."""
        model = self._one_used_root(step)
        if model is None:  # (one root used, the common case: without the lists below)
            roots, optimizers = self.used_roots(step), self.optimizers
            if not roots and not optimizers:
                return None, False
            model = memory.accountable(roots, optimizers, self._holders)
        if self._measured is None or self._measured() is not model:  # another model (or set)
            self._measured = weakref.ref(model)
            return model, True
        return model, False

    def params(self) -> tuple[int, int]:
        """(count, bytes) of the live roots' parameters, each counted once (a GAN's two models)."""
        params = list(memory.accountable(self.roots, [], {}).parameters())
        return sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params)


def lr_of(optimizer: Any) -> float | None:
    """The learning rate of ``optimizer``'s first parameter group, if it has one."""
    try:
        return float(optimizer.param_groups[0]["lr"])
    except (AttributeError, KeyError, IndexError, TypeError, ValueError):
        return None


def ddp_syncs_buffers(ddp: Any) -> bool:
    """True when this DDP forward broadcasts buffers first (a collective before the backward)."""
    try:
        return bool(ddp._check_sync_bufs_pre_fwd())
    except Exception:
        return False


def is_average(module: Any) -> bool:
    """A running average of a trained model's weights (torch's ``AveragedModel``, an EMA such
    as timm's ``ModelEmaV2``): it is only ever evaluated, never trained."""
    if isinstance(module, torch.optim.swa_utils.AveragedModel):
        return True
    name = type(module).__name__
    return "Averaged" in name or "MovingAverage" in name or _EMA_NAME.search(name) is not None


_EMA_NAME = re.compile(r"(?:^|(?<=[a-z0-9_]))(?:EMA|Ema)(?=[A-Z0-9_]|$)")
""""Ema" or "EMA" as a word of a class name: ModelEmaV2, EMAModel, not SemanticModel."""


def first_tensor(args: Any, kwargs: Any) -> torch.Tensor | None:
    """The first tensor among the arguments (one level into lists and dicts), None when there is none."""
    for value in (*args, *(kwargs.values() if kwargs else ())):
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, (list, tuple)):
            for v in value:
                if isinstance(v, torch.Tensor):
                    return v
    return None


def rows(t: torch.Tensor | None) -> int:
    """A batch's size: its first dimension (1 for a scalar, 0 for no tensor)."""
    if t is None:
        return 0
    return int(t.shape[0]) if t.dim() else 1


def batch_size(args: Any, kwargs: Any) -> int:
    """First dimension of the first tensor among the arguments (see first_tensor), 0 when there is none."""
    return rows(first_tensor(args, kwargs))
