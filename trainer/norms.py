"""The gradient norm a script's clipping returns, and its optimizer's learning rates past the
first parameter group: figures of the step (its ``custom``, as pardash's own ``micro_batches``).

``torch.nn.utils.clip_grad_norm_`` (and the deprecated ``clip_grad_norm``, which calls it, and
FSDP's ``FullyShardedDataParallel.clip_grad_norm_``) returns the total norm of the gradients it
clipped (``clip_grads_with_norm_`` is given it): a script that clips every step had that norm nowhere in pardash (review 337: norms
0.49-1.96 in its run). The last call's in a step is its ``grad_norm``.

No new device synchronisation: the returned tensor is kept, and read with the step's loss when
the step is published (on a GPU one step late, after the step's last event was waited for and
the loss read: a copy of one number, no wait for more work; on CPU ``.item()`` is free). A
sharded norm (a DTensor not replicated) is left out: reading it would need a collective the
script does not make. A norm that is not finite (a GradScaler's overflow step, skipped) is left
out of its step, as the hub leaves out any figure that is not.

Several parameter groups with different learning rates (a body at x0.1, a head at x1): the
step's ``lr`` stays group 0's, as ever, and groups 1.. are ``lr_group1``, ... (from the first
step where any differs from group 0's on, every step, for the first MAX_LR_GROUPS groups; one
group, or groups all at one lr: as before, nothing added). Its state is :class:`Instrument`'s (set in its ``__init__``)."""

from __future__ import annotations

import math
import sys
from typing import Any, Callable

import torch

from pardash.trainer.hooking import _get_ident, _guarded, _is_compiling

GRAD_NORM = "grad_norm"
"""The step's custom figure: the total gradient norm the script's last clipping returned."""

LR_GROUP = "lr_group"
"""Prefix of the step's custom figures ``lr_group1``, ...: parameter group N's learning rate."""


MAX_LR_GROUPS = 8
"""Parameter groups whose lrs a step says (``lr`` and ``lr_group1`` to ``lr_group7``): a layer-wise
lr decay's group a layer (dozens) would be as many figures a step, and as many reads in the hook."""


def group_lrs(optimizer: Any) -> tuple[float, ...] | None:
    """The learning rates of ``optimizer``'s parameter groups past the first, up to
    :data:`MAX_LR_GROUPS` in all (None: one group)."""
    try:
        groups = optimizer.param_groups
        if len(groups) < 2:
            return None
        return tuple(float(g["lr"]) for g in groups[1:MAX_LR_GROUPS])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def readable_norm(total: Any) -> torch.Tensor | None:
    """The norm ``clip_grad_norm_`` returned, as a tensor readable without a collective: a
    DTensor's (FSDP2's gradients) local value where it is replicated, None where it is not
    (its value is the ranks' sum yet: reading it would all-reduce)."""
    if not isinstance(total, torch.Tensor):
        return None
    placements = getattr(total, "placements", None)
    if placements is not None:
        if not all(p.is_replicate() for p in placements):
            return None
        total = total.to_local()
    return total.detach()


class GradNorms:
    """Wraps the clipping functions; puts their norm and the groups' lrs in the step."""

    def _watch_norms(self) -> None:
        from torch.nn.utils import clip_grad

        # Both names: ``from torch.nn.utils import clip_grad_norm_`` binds the package's, and
        # the deprecated ``clip_grad_norm`` calls the module's (one call: one norm).
        self._patch(clip_grad, "clip_grad_norm_", self._wrap_clip_grad_norm)
        if getattr(torch.nn.utils, "clip_grad_norm_", None) is not None:
            self._patch(torch.nn.utils, "clip_grad_norm_", self._wrap_clip_grad_norm)
        # The two-part form (torch.nn.utils.get_total_norm, then clip_grads_with_norm_ given
        # it): the norm it clips with. (Only the package's name: clip_grad_norm_ calls the
        # module's, its norm said once.)
        if getattr(torch.nn.utils, "clip_grads_with_norm_", None) is not None:
            self._patch(torch.nn.utils, "clip_grads_with_norm_", self._wrap_clip_with_norm)
        self._fsdp_norms = False
        self._watch_fsdp_norms()

    def _watch_fsdp_norms(self) -> None:
        """FSDP's own ``clip_grad_norm_`` (its gradients sharded, their norm all-reduced inside):
        wrapped once its module is loaded (at install, or as a root it wraps is seen), not
        imported for it (``torch.distributed.fsdp`` costs most of a second)."""
        if self._fsdp_norms:
            return
        fsdp = sys.modules.get("torch.distributed.fsdp")
        cls = getattr(fsdp, "FullyShardedDataParallel", None) if fsdp is not None else None
        if cls is not None and callable(getattr(cls, "clip_grad_norm_", None)):
            self._fsdp_norms = True
            self._patch(cls, "clip_grad_norm_", self._wrap_clip_grad_norm)

    def _wrap_clip_grad_norm(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def clip_grad_norm_(*args: Any, **kwargs: Any) -> Any:
            total = original(*args, **kwargs)
            if not self.dead and not _is_compiling() and _get_ident() == self._tid:
                self._clipped(total)
            return total

        return clip_grad_norm_

    def _wrap_clip_with_norm(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def clip_grads_with_norm_(parameters: Any, max_norm: Any, total_norm: Any, *args: Any, **kwargs: Any) -> Any:
            done = original(parameters, max_norm, total_norm, *args, **kwargs)
            if not self.dead and not _is_compiling() and _get_ident() == self._tid:
                self._clipped(total_norm)
            return done

        return clip_grads_with_norm_

    @_guarded
    def _clipped(self, total: Any) -> None:
        step = self._open
        norm = readable_norm(total) if step is not None else None
        if norm is None:
            return
        seen = (len(step.marks), norm)
        if step.grad_norms is None:
            step.grad_norms = [seen]
        else:
            step.grad_norms.append(seen)

    def _norm_figures(self, opened: Any, lr: float | None) -> dict[str, float]:
        """The step's ``grad_norm`` and ``lr_groupN`` figures (see the module)."""
        custom: dict[str, float] = {}
        norms = opened.grad_norms
        if norms:
            # GPU: read one step late, after the step's end event was waited for and its loss
            # read (see _emit): no wait for more work than that read's.
            value = float(norms[-1][1].item())
            if math.isfinite(value):
                custom[GRAD_NORM] = value
        lrs = opened.lrs
        if lrs is not None and (self._lrs_said or any(x != lr for x in lrs)):
            self._lrs_said = True
            for i, x in enumerate(lrs, 1):
                if math.isfinite(x):
                    custom[f"{LR_GROUP}{i}"] = x
        return custom
