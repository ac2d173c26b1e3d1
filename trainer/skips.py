"""Iterations that end without an optimizer step (part of :class:`pardash.trainer.instrument.Instrument`).

A step ends at an optimizer's post-hook. Two kinds of iteration end without one:

- ``GradScaler.step`` skips ``optimizer.step()`` when the gradients are inf or NaN: its step is
  watched, and a skipped one ends the step as a step would.
- A script that skips its own update (``loss.backward(); if not finite(grad norm):
  optimizer.zero_grad(); continue``) throws the gradients away with ``zero_grad``. Without
  this, that iteration and the next were one step: twice the step time, both losses summed
  (a spike on the loss curve) and "2 micro-batches". A ``zero_grad`` (the optimizer's, or a
  trained model's) right after a backward in training mode, with one optimizer stepping and no
  step since, is where the iteration may have ended: the open step is cut there, pending. It is
  decided at the next optimizer step: a step of its own if a training forward on another batch
  (another input tensor) came after the cut, or an evaluation, and the optimizer steps after a
  backward, as iterations do. Dropped, the iteration goes on as one step: a backward with no
  new forward first (a backward per task loss, PCGrad's), a forward on the same input (SAM's
  second pass), or gradients zeroed again right before the step (per-micro-batch clipping, or
  a batch per task: each backward's gradients read, zeroed, their combination set and stepped).

Not told apart: a skip before the backward (``if not finite(loss): continue``: its forward's
time joins the next step's, with no backward nor loss), a skip in a loop over one fixed batch
or one input buffer refilled each time (the same input tensor), and skips in a row after the
first (one cut is pending at a time: the iterations after it join the next step). An iteration
skipped last, with no optimizer step after it, is no step.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch

from pardash.trainer.hooking import _get_ident, _guarded, _is_compiling
from pardash.trainer.marks import _Cut


class Skips:
    """Steps without an optimizer step. Its state is :class:`Instrument`'s (set in its ``__init__``):
    ``_skip_from`` (the backward's end the pending cut took from the open step, or ``False``
    when no cut is pending), ``_skip_batch`` (a forward on another batch came after the cut),
    ``_skip_zeroed`` (gradients zeroed since the last backward) and ``_input`` (the last
    training forward's first tensor, weakly)."""

    def _wrap_scaler_step(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            before = self._posts
            result = original(scaler, optimizer, *args, **kwargs)
            if self._posts == before and _get_ident() == self._tid:
                # The scaler skipped optimizer.step() (inf or NaN gradients): still a step.
                self._optimizer_pre(optimizer, (), {})
                self._optimizer_post(optimizer, (), {})
            return result

        return step

    def _wrap_zero_grad(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``Optimizer.zero_grad`` or ``Module.zero_grad``: read before the gradients go."""

        def zero_grad(owner: Any, *args: Any, **kwargs: Any) -> Any:
            if not _is_compiling() and self._phase == "backward" and _get_ident() == self._tid:
                self._zeroed(owner)
            return original(owner, *args, **kwargs)

        return zero_grad

    @_guarded
    def _zeroed(self, owner: Any) -> None:
        """Gradients zeroed after a backward: cut the open step there, pending (see the module)."""
        if self._in_optimizer or self._in_backward or self._explicit:
            return
        if self._skip_from is not False:
            self._skip_zeroed = True  # (again: right before the step, gradients are set by hand)
            return
        if not self._early or not self._published_round or self._cut is not None or self._orphan is not None:
            return  # several optimizers, a round going on, or not seen to step twice yet
        optimizers = self.trained.optimizers
        if len(optimizers) != 1:
            return
        if isinstance(owner, torch.optim.Optimizer):
            if owner is not optimizers[0]:
                return  # another optimizer's (SAM's own, around the one that steps)
        elif not self.trained.trains(owner):
            return
        step = self._open
        if step is None or not step.micro:
            return
        if not any(m.training for m in self.trained.roots):
            return  # a backward in eval mode (test-time adaptation inside an evaluation)
        now = self.clock.stamp()
        self._cut = _Cut(now, len(step.marks), len(step.losses), step.micro, step.samples, len(step.waits))
        self._pending_mem = self._memory(slot=0)  # (the gradients are still held)
        self._skip_from = self._backward_end
        self._skip_batch = False
        self._skip_zeroed = True
        self._backward_end = None  # what follows is the next step's data, if the cut holds
        self._resume_at = None

    def _skip_drop(self) -> None:
        """The pending cut was inside an iteration: the open step goes on as if never cut."""
        resumed = self._skip_from
        self._skip_from = False
        cut, self._cut = self._cut, None
        self._pending_mem = self._arrive_next = self._sync_next = self._resume_at = None
        step = self._open
        if resumed is None or step is None or cut is None:
            return
        if len(step.marks) > cut.marks and step.marks[cut.marks][0] == "forward":
            step.marks.insert(cut.marks, ("data", resumed))  # from the backward's end, as uncut
        elif len(step.marks) == cut.marks and self._backward_end is None:
            self._backward_end = resumed

    def _skip_backward(self) -> None:
        """A backward with a cut pending: with no forward since (a backward per task loss of one
        forward), the same iteration's; after a forward on another batch, the next iteration's."""
        self._skip_zeroed = False
        if not self._skip_batch:
            self._skip_drop()

    def _skip_step(self) -> None:
        """The optimizer steps with a cut pending: it was an iteration's end if another batch
        (or an evaluation) came after it and the gradients were not zeroed again since the last
        backward (set by hand before the step: one iteration of several zeroed passes)."""
        if (self._skip_batch or self._resume_at is not None) and not self._skip_zeroed:
            cut, mem = self._cut, self._pending_mem
            self._skip_from = False
            self._cut = self._pending_mem = None
            if cut is not None:
                self._publish_cut(cut, mem)
        else:
            self._skip_drop()

    def _skip_forward(self, first: Any) -> None:
        """A training forward ended with a cut pending: on the same input as the last (SAM's
        second pass), the same iteration; on another, maybe the next (see _skip_step)."""
        last = self._input() if self._input is not None else None
        if last is not None and first is last and self._resume_at is None:
            self._skip_drop()
        else:
            self._skip_batch = True

    def _note_input(self, first: Any) -> None:
        try:
            self._input = weakref.ref(first) if first is not None else None
        except TypeError:
            self._input = None
