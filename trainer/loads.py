"""Checkpoints a script loads itself to resume (part of :class:`pardash.trainer.instrument.Instrument`):
a ``torch.load`` (or ``torch.distributed.checkpoint.load``) on the training thread, before the
process's first optimizer step, of state that holds an optimizer's (``{"model": ...,
"optimizer": opt.state_dict(), "iter_num": 250}``, or an optimizer's state dict alone, as
Hugging Face's ``optimizer.pt``). A model's weights alone are no resume: a fine-tune starts
from them.

The steps go on from the step count the checkpoint holds: an int under ``global_step``,
``iter_num``, ``iteration`` or ``step`` at its top level, else its optimizer's own count (Adam's
``step``). A resumed nanoGPT (``--init_from=resume``) read steps 1, 2, ... again, its
TensorBoard export laid over the first run's, and its evaluation at iteration 250 read "before
the first step". A ``resume`` event says it, as the bundled trainer's: the step, where from,
how long the load took. A checkpoint with no count in it still says where from; its steps
count from 1.

Free when nothing is loaded: ``torch.load`` is wrapped at install, and once the process's
first optimizer step is past, a load is only a test of a counter."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Callable

import torch

from pardash.trainer.hooking import _get_ident, _guarded
from pardash.trainer.saves import dcp_saved, file_saved, within_two_levels

STEP_KEYS = ("global_step", "iter_num", "iteration", "step")
"""Where a checkpoint keeps the steps done, at its top level, first found first."""


def optimizer_state(obj: Any) -> Mapping | None:
    """The optimizer state dict in ``obj`` (itself, or among its values or their values), or
    None."""
    return within_two_levels(obj, _is_optimizer_state)


def _is_optimizer_state(value: Any) -> bool:
    return isinstance(value, Mapping) and "param_groups" in value and "state" in value


def steps_in(obj: Mapping, optim_state: Mapping) -> tuple[int | None, str]:
    """The steps done that the checkpoint ``obj`` says, and where it says it: its own counter
    (the key's name), else its optimizer's count ("its optimizer's count"); (None, "") when
    neither is there (plain SGD's state holds none)."""
    for key in STEP_KEYS:
        value = obj.get(key)
        if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
            value = int(value.item())
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value, key
    counts = []
    state = optim_state.get("state")
    for entry in state.values() if isinstance(state, Mapping) else ():
        value = entry.get("step") if isinstance(entry, Mapping) else None
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 and float(value).is_integer():
            counts.append(int(value))
    return (max(counts), "its optimizer's count") if counts else (None, "")


class Loads:
    """The script's own resumes. Its state is :class:`Instrument`'s (set in its ``__init__``:
    ``_loading``, ``_step_base``)."""

    def _wrap_load(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``torch.load``: what it returns is what was loaded."""
        return self._followed(original, lambda args, kwargs, out: (out, file_saved(args[0] if args else kwargs.get("f"))))

    def _wrap_dcp_load(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """DCP's ``load`` (and its older ``load_state_dict``): loads in place, into the state
        dict it is given; its own ``torch.load`` of each file is part of it."""
        return self._followed(original, lambda args, kwargs, out: (args[0] if args else kwargs.get("state_dict"), dcp_saved(args, kwargs, "storage_reader")))

    def _followed(self, original: Callable[..., Any], read: Callable[[tuple, dict, Any], tuple[Any, str]]) -> Callable[..., Any]:
        """``original``, a load, timed before the first optimizer step; ``read(args, kwargs,
        returned)`` says what was loaded and where from."""

        def load(*args: Any, **kwargs: Any) -> Any:
            if self._posts or self._loading or self._saving is not None or self.dead or _get_ident() != self._tid:
                return original(*args, **kwargs)
            self._loading = True
            t0 = time.perf_counter()
            try:
                out = original(*args, **kwargs)
            finally:
                self._loading = False
            self._loaded(read, args, kwargs, out, time.perf_counter() - t0)
            return out

        return load

    @_guarded
    def _loaded(self, read: Callable[[tuple, dict, Any], tuple[Any, str]], args: tuple, kwargs: dict, out: Any, took: float) -> None:
        """A load before the first optimizer step is done (``read`` says what it loaded, see
        :meth:`_followed`): a resume when that holds an optimizer's state; the steps go on from
        its count."""
        obj, where = read(args, kwargs, out)
        optim_state = optimizer_state(obj)
        if optim_state is None:
            return
        step, said = steps_in(obj, optim_state)
        source = f" ({said})" if said and said not in STEP_KEYS else ""
        if step is None:
            self.reporter.event("resume", message=f"from {where or 'a checkpoint'} (no step count in it: steps count from 1)",
                                duration_s=took)
            return
        if step > self.step:
            self.step = self._step_base = step
            self.reporter.last_step = step
        self.reporter.event("resume", message=f"step {step} from {where or 'a checkpoint'}{source}", step=step, duration_s=took)
