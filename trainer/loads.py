"""Checkpoints a script loads itself to resume (part of :class:`pardash.trainer.instrument.Instrument`):
an optimizer given its state (``Optimizer.load_state_dict``) on the training thread before the
process's first optimizer step. A checkpoint's weights alone are no resume, nor is a full
checkpoint read for its weights only (a fine-tune's start, a distillation's teacher): only the
optimizer's state loaded says the training goes on.

Where from, how long, and the steps done are the latest load's before it that held an
optimizer's state: a ``torch.load`` (``{"model": ..., "optimizer": opt.state_dict(), "iter_num":
250}``, or an optimizer's state dict alone, as Hugging Face's ``optimizer.pt``) or a
``torch.distributed.checkpoint.load``. The steps go on from the count it holds: an int under
``global_step``, ``iter_num``, ``iteration`` or ``step`` at its top level, else the optimizer's
own count (Adam's ``step``, in the state loaded). A resumed nanoGPT (``--init_from=resume``)
read steps 1, 2, ... again, its TensorBoard export laid over the first run's, and its
evaluation at iteration 250 read "before the first step". A ``resume`` event says it, as the
bundled trainer's: the step, where from, how long the load took; one a process (a GAN's two
optimizers are one resume). With no count anywhere, the steps count from 1, and the event says so.

Free when nothing is loaded: ``torch.load`` and ``Optimizer.load_state_dict`` are wrapped at
install, and once the process's first optimizer step is past, they only test a counter."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Callable

import torch

from pardash.trainer.hooking import _get_ident, _guarded
from pardash.trainer.saves import dcp_saved, file_saved, within_two_levels

STEP_KEYS = ("global_step", "iter_num", "iteration", "step")
"""Where a checkpoint keeps the steps done, at its top level, first found first."""
OPTIMIZERS_COUNT = "its optimizer's count"


def optimizer_state(obj: Any) -> Mapping | None:
    """The optimizer state dict in ``obj`` (itself, or among its values or their values), or
    None."""
    return within_two_levels(obj, _is_optimizer_state)


def _is_optimizer_state(value: Any) -> bool:
    return isinstance(value, Mapping) and "param_groups" in value and "state" in value


def steps_in(obj: Mapping, optim_state: Mapping) -> tuple[int | None, str]:
    """The steps done that the checkpoint ``obj`` says, and where it says it: its own counter
    (the key's name, :func:`counter_in`), else the count in the optimizer state ``optim_state``
    (OPTIMIZERS_COUNT); (None, "") when neither is there (plain SGD's state holds none)."""
    found = counter_in(obj)
    if found[0] is not None:
        return found
    state = optim_state.get("state")
    counts = [_count(entry.get("step")) for entry in state.values() if isinstance(entry, Mapping)] if isinstance(state, Mapping) else []
    counts = [c for c in counts if c is not None]
    return (max(counts), OPTIMIZERS_COUNT) if counts else (None, "")


def counter_in(obj: Mapping) -> tuple[int | None, str]:
    """The steps done that the checkpoint ``obj`` says at its top level, and under which key;
    (None, "") where it says none."""
    for key in STEP_KEYS:
        value = _count(obj.get(key))
        if value is not None:
            return value, key
    return None, ""


def _count(value: Any) -> int | None:
    """``value`` as a count of steps (a whole number, of a one-element tensor too), or None. A
    tensor with no value to read (loaded to the meta device) is none: its ``item()`` raised, and
    the instrumentation stopped."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_meta:
            return None
        try:
            value = value.item()
        except Exception:  # (a fake tensor)
            return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 and float(value).is_integer():
        return int(value)
    return None


def _has_state(state_dict: Any) -> bool:
    """Whether an optimizer's ``state_dict`` holds per-parameter state (a step taken)."""
    state = state_dict.get("state") if isinstance(state_dict, Mapping) else None
    return bool(state) if isinstance(state, Mapping) else True


class Loads:
    """The script's own resumes. Its state is :class:`Instrument`'s (set in its ``__init__``:
    ``_loading``, ``_loaded_last``, ``_resumed``, ``_step_base``)."""

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
        :meth:`_followed`): kept when it holds an optimizer's state, for the resume that loads
        it (:meth:`_optimizer_loaded`)."""
        obj, where = read(args, kwargs, out)
        if optimizer_state(obj) is not None:
            # (its counter, not the checkpoint: one read for its weights alone, never resumed
            # from, stays alive no longer than the script keeps it)
            self._loaded_last = (counter_in(obj), where, took)

    def _wrap_optimizer_load(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``Optimizer.load_state_dict``: the resume (see the module)."""

        def load_state_dict(optimizer: Any, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(optimizer, state_dict, *args, **kwargs)
            if not (self._posts or self._resumed or self.dead) and _get_ident() == self._tid:
                self._optimizer_loaded(state_dict)
            return out

        return load_state_dict

    @_guarded
    def _optimizer_loaded(self, state_dict: Any) -> None:
        """An optimizer was given ``state_dict`` before the first step: say the resume, and go
        on from its step count. One given a state of no step taken (no per-parameter state) that
        no load read is none: Hugging Face's ``accelerator.prepare`` (so every ``Trainer``) gives
        each optimizer its own fresh state back, to move it to the device. Taken for a resume, it
        said "resumed: no step count" of every fresh run, and the real resume after it (Trainer's
        ``resume_from_checkpoint``, ``accelerator.load_state``) went unsaid, its steps from 1."""
        if self._loaded_last is None and not _has_state(state_dict):
            return
        self._resumed = True
        counter, where, took = self._loaded_last or ((None, ""), "", None)
        self._loaded_last = None
        # (else the count of the state loaded: of a checkpoint's several optimizers, this one's)
        step, said = counter if counter[0] is not None else steps_in({}, state_dict if isinstance(state_dict, Mapping) else {})
        if step is None:
            # (the report says "resumed: " before it: "resumed: resumed from ..." it read)
            held = f" in {where}" if where else " in the state loaded"
            self.reporter.event("resume", message=f"no step count{held}, steps count from 1", duration_s=took)
            return
        where = f" from {where}" if where else ""
        if step > self.step:
            self.step = self._step_base = step
            self.reporter.last_step = step
        source = f" ({said})" if said == OPTIMIZERS_COUNT else ""
        self.reporter.event("resume", message=f"step {step}{where}{source}", step=step, duration_s=took)
