"""Checkpoints the script saves itself (part of :class:`pardash.trainer.instrument.Instrument`):
``torch.save`` of training state (a model or optimizer, or a dict of their state dicts, see
:func:`training_state`) and ``torch.distributed.checkpoint``'s ``save`` (and its older
``save_state_dict``) on the training thread. While one runs, the heartbeat's phase is
``checkpoint`` (the hub gives the ranks longer before calling one stalled: a save of a big model
takes minutes, and read "rank 0 stalled in data"); after it, a ``checkpoint`` event says where it
went and how long it took, unless the script says so itself (``pt.event("checkpoint", ...)``);
and, saved between two steps, its time is in neither step: the next step keeps what came before
the save (the script's work after the optimizer step, its wait in a barrier), less the save
itself. A DCP save, which calls ``torch.save`` and collectives of its own, is one save, and
those collectives are no sync point of the step.

Free when nothing is saved: ``torch.save`` is wrapped at install (a test of its first argument
when called), and DCP's functions once the script imports ``torch.distributed.checkpoint``
(importing it at install cost each rank 0.7 s of its start)."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Mapping
from typing import Any, Callable

import torch

from pardash.telemetry import api
from pardash.trainer.hooking import _around, _get_ident, _guarded
from pardash.trainer.imported import once_imported
from pardash.trainer.marks import _OpenStep
from pardash.trainer.strategies import CommTimer

DCP = "torch.distributed.checkpoint"
DCP_SAVES = ("save", "save_state_dict")
"""``torch.distributed.checkpoint``'s functions that save (``async_save`` returns before its
writing is done, in threads of its own: not followed)."""

DCP_LOADS = ("load", "load_state_dict")
"""Its functions that load (a resume, see :mod:`pardash.trainer.loads`)."""
DCP_STATE_DICT = "torch.distributed.checkpoint.state_dict"
INIT_OPTIM_STATE = "_init_optim_state"
"""Its function that steps an optimizer without state once, to make it (see
:meth:`Saves._state_dicts_imported`)."""

LIBRARY_SAVES = {
    "safetensors.torch": {"save_file": ("tensors", "filename"), "save_model": ("model", "filename")},
    "lightning.fabric.utilities.cloud_io": {"_atomic_save": ("checkpoint", "filepath")},
    "lightning_fabric.utilities.cloud_io": {"_atomic_save": ("checkpoint", "filepath")},
}
"""Libraries' functions that save training state to a file another way than ``torch.save`` to
it, wrapped once their module is imported (before the importer binds their names): module ->
function -> (its state's argument, its path's). A Hugging Face Trainer's model is saved with
safetensors, its biggest file, whose time went into the evaluation before it; PyTorch
Lightning's checkpoint is ``torch.save`` to a buffer then written through fsspec: its event
said no path, its time left the write out, and two files at one step (``epoch=0-step=10.ckpt``,
``last.ckpt``) read as the same file saved twice."""
TORCH_SAVE = ("obj", "f")
"""``torch.save``'s arguments: the state, and where to."""

_STATE = (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)


def _is_state(value: Any) -> bool:
    """A tensor, a model or optimizer, or a state dict: a model's (its first value a tensor)
    or an optimizer's (plain SGD's holds no tensor)."""
    if isinstance(value, _STATE):
        return True
    if not isinstance(value, Mapping):
        return False
    return ("param_groups" in value and "state" in value) or isinstance(next(iter(value.values()), None), torch.Tensor)


def training_state(obj: Any) -> bool:
    """Whether ``obj``, given to ``torch.save``, is training state: a model or optimizer, or a
    dict with a tensor, a model, an optimizer or a state dict among its values or their values
    (``model.state_dict()``; ``{"model": model.state_dict(), "optimizer": opt.state_dict(),
    "step": step}``; ``{"models": [a.state_dict(), b.state_dict()]}``). A list of losses, a
    dict of metrics, a tensor alone (a batch of predictions) are not. Stops at the first
    tensor: a state dict's first value."""
    if isinstance(obj, (torch.nn.Module, torch.optim.Optimizer)):
        return True
    return within_two_levels(obj, _is_state) is not None


def within_two_levels(obj: Any, test: Callable[[Any], bool]) -> Any:
    """The first of the dict ``obj``, its values and their values (of dicts, lists and tuples)
    that passes ``test``, or None (``obj`` no dict, or none passes)."""
    if not isinstance(obj, Mapping):
        return None
    if test(obj):
        return obj
    for value in obj.values():
        if test(value):
            return value
        inner = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else ()
        for v in inner:
            if test(v):
                return v
    return None


def file_saved(f: Any) -> str:
    """Where ``torch.save`` writes to ``f`` (``torch.load`` reads from it): its path, an open
    file's name, else "" (a buffer, ``io.BytesIO()``: the event's message is the path, or
    nothing)."""
    if isinstance(f, (str, bytes, os.PathLike)):
        return os.fsdecode(f)
    name = getattr(f, "name", None)
    return name if isinstance(name, str) else ""


def dcp_saved(args: tuple[Any, ...], kwargs: dict[str, Any], storage: str = "storage_writer") -> str:
    """Where a DCP save goes: its ``checkpoint_id``, else its storage writer's path (the second
    argument of ``save_state_dict``), else "" (a writer with no path of its own). With
    ``storage="storage_reader"``, where a DCP load reads from."""
    where = kwargs.get("checkpoint_id")
    if where is None:
        writer = kwargs.get(storage, args[1] if len(args) > 1 else None)
        where = getattr(writer, "path", None) or getattr(writer, "checkpoint_id", None)
    return os.fsdecode(where) if isinstance(where, (str, bytes, os.PathLike)) else str(where) if where is not None else ""


class Saves:
    """The script's own saves. Its state is :class:`Instrument`'s (set in its ``__init__``:
    ``_saving``, ``_saves_held``, ``saves``, ``_dcp_finder``, ``_state_dict_finder``,
    ``_not_stepping``)."""

    def _watch_saves(self) -> None:
        """Wrap ``torch.save`` now, DCP's saves now if imported, else when it is; the same for
        DCP's state-dict helpers (:meth:`_state_dicts_imported`)."""
        self._patch(torch, "save", self._wrap_save(dcp=False))
        self._dcp_finder = once_imported(DCP, self._dcp_imported)
        self._state_dict_finder = once_imported(DCP_STATE_DICT, self._state_dicts_imported)
        for name, saves in LIBRARY_SAVES.items():
            finder = once_imported(name, functools.partial(self._library_imported, saves))
            if finder is not None:
                self._library_finders.append(finder)

    @_guarded
    def _library_imported(self, saves: dict[str, tuple[str, str]], module: Any) -> None:
        """A library's saves (see LIBRARY_SAVES), wrapped as ``torch.save`` is; a ``torch.save``
        within one is part of it."""
        for name, arguments in saves.items():
            if callable(getattr(module, name, None)):
                self._patch(module, name, self._wrap_save(dcp=False, arguments=arguments))

    def _unwatch_saves(self) -> None:
        for finder in self._library_finders:
            finder.remove()
        self._library_finders.clear()
        if self._dcp_finder is not None:
            self._dcp_finder.remove()
            self._dcp_finder = None
        if self._state_dict_finder is not None:
            self._state_dict_finder.remove()
            self._state_dict_finder = None

    @_guarded
    def _state_dicts_imported(self, module: Any) -> None:
        """DCP's ``get_state_dict``/``set_state_dict`` (and their optimizer forms) first give an
        optimizer without state its state by a step of its own: zero gradients, every learning
        rate 0 (``_init_optim_state``). That step is no training step: each resume of the
        PyTorch FSDP2 example counted one (step 41 of 40, its first with lr 0 and no forward),
        and so did each save of a script that builds its state dict before its first step."""
        self._state_dict_finder = None
        if callable(getattr(module, INIT_OPTIM_STATE, None)):
            self._patch(module, INIT_OPTIM_STATE, self._wrap_init_optim_state)

    def _wrap_init_optim_state(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def init_optim_state(*args: Any, **kwargs: Any) -> Any:
            # (its thread's: a checkpoint thread making its state dict must not hide the
            # training thread's steps meanwhile)
            tid = _get_ident()
            self._not_stepping[tid] = self._not_stepping.get(tid, 0) + 1
            try:
                return original(*args, **kwargs)
            finally:
                if self._not_stepping[tid] > 1:
                    self._not_stepping[tid] -= 1
                else:
                    del self._not_stepping[tid]

        return init_optim_state

    @_guarded
    def _dcp_imported(self, module: Any) -> None:
        self._dcp_finder = None
        saver = getattr(module, "state_dict_saver", None)
        for owner in (module, saver):  # (the package's names are the saver module's functions)
            for name in DCP_SAVES:
                if owner is not None and callable(getattr(owner, name, None)):
                    self._patch(owner, name, self._wrap_save(dcp=True))
        loader = getattr(module, "state_dict_loader", None)
        for owner in (module, loader):  # (a resume from one: see pardash.trainer.loads)
            for name in DCP_LOADS:
                if owner is not None and callable(getattr(owner, name, None)):
                    self._patch(owner, name, self._wrap_dcp_load)

    def _wrap_save(self, dcp: bool, arguments: tuple[str, str] = TORCH_SAVE) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
            return _around(original, functools.partial(self._save_begins, dcp=dcp, arguments=arguments), self._save_ends)

        return wrap

    def _save_begins(self, args: tuple[Any, ...], kwargs: dict[str, Any], dcp: bool, arguments: tuple[str, str] = TORCH_SAVE) -> bool:
        """Whether the call is a save to follow: on the training thread, in no other save
        (DCP's torch.save of each file is that one's), of training state."""
        if self._saving is not None or self.dead or _get_ident() != self._tid:
            return False
        return bool(self._save_starts(args, kwargs, dcp, arguments))

    @_guarded
    def _save_starts(self, args: tuple[Any, ...], kwargs: dict[str, Any], dcp: bool, arguments: tuple[str, str] = TORCH_SAVE) -> bool:
        """A save of training state begins: phase ``checkpoint``. An evaluation seen at its
        forwards (no ``model.train()`` to end it) ended with its last one: the save is not
        its (saving the best model after the validation). ``arguments``: the names of the
        state's and the path's arguments (``torch.save``'s, or a library's save's)."""
        if dcp:
            where = dcp_saved(args, kwargs)
        else:
            state, path = arguments
            if not training_state(args[0] if args else kwargs.get(state)):
                return False
            where = file_saved(args[1] if len(args) > 1 else kwargs.get(path))
        if self._eval_t0 and not self._eval_called:
            self._eval_ends()
        if self._logging_to is not None:
            # The step just done goes out before its save, what was logged after it with it (a
            # rank killed in a save of minutes lost that step: held for values logged later).
            self._next_step_begins()
        # (self._phase too: a DCP save's own collectives are then no sync point of the step)
        self._saving = (self._phase, where, time.perf_counter(), self.clock.stamp())
        self._phase = "checkpoint"
        self.reporter.set_phase("checkpoint")
        return True

    @_guarded
    def _save_ends(self, saved: bool) -> None:
        """The save is over (``saved``: it returned): the phase is what it was, or, between
        steps, the next step's data, the save's time left out of it (not what came before it);
        its event is held until the next step is published, the script's own replacing it."""
        phase, where, t0, began = self._saving
        self._saving = None
        took = time.perf_counter() - t0
        self._phase = phase
        if saved and self._eval_t0:
            # Saved within model.eval() .. model.train(), or between its forwards: not
            # evaluating. After its last forward with no model.train() to follow (the final
            # evaluation, then the model saved) it is not in it at all: the evaluation ends at
            # that forward. Which it was shows at its end (see Evaluations._eval_ends); taken
            # out here, a 28.6 ms save after an 11.8 ms evaluation made it -17 ms.
            self._eval_saves.append((t0, took, self.clock.stamp()))
        elif saved and self._open is not None:
            step = self._open
            if self._cut is not None and len(step.marks) == self._cut.marks:
                self._left_out_after_cut(began, self.clock.stamp())
                self._phase = "data"
            elif len(step.marks) == 1:
                _left_out(step, began, self.clock.stamp(), self.clock)
                self._phase = "data"
        self.reporter.set_phase(self._phase)
        if saved:
            self.saves += 1
            step_done = self.steps_done()
            self._saves_held.append({"message": where, "step": step_done, "duration_s": took})

    def _left_out_after_cut(self, began: Any, end: Any) -> None:
        """Time between steps from ``began`` to ``end`` (a save, an evaluation, see
        :meth:`Evaluations._eval_ends`) after the cut of a round that may go on: the step after
        the cut, made when the round ends, starts that much later (see Rounds._publish_cut),
        and its waits in collectives before it move with it, so its time before it stays its
        own. (CUDA events cannot be moved: there it starts at ``end``, and what came between
        the cut and ``began`` is in no step.)"""
        start = self._resume_at if self._resume_at is not None else self._cut.end
        if not isinstance(start, float):
            self._resume_at = end
            return
        took = end - began
        self._resume_at = start + took
        if self._sync_next:  # (those in an evaluation, its metrics' all_reduce, are in no step)
            self._sync_next = [(a + took, b + took) if b <= began else (a, b) for a, b in self._sync_next if b <= began or a >= end]

    def _send_saves(self) -> None:
        """The held save events, sent (a step is published, or the script ends), unless the
        script has sent a ``checkpoint`` event of its own (after its save, with its own timing:
        two events of one save were counted as two checkpoints)."""
        held, self._saves_held = self._saves_held, []
        if api.user_sent("checkpoint"):
            return
        for fields in held:
            self.reporter.event("checkpoint", **fields)


def _left_out(step: _OpenStep, began: Any, end: Any, clock: Any) -> None:
    """Time between steps from ``began`` to ``end`` (a save, an evaluation), left out of the
    open step: its clock starts again at ``end``, and what the step had before ``began`` is
    carried as its lead (see _OpenStep.lead_s): its own time (the script's work after the
    optimizer step: the straggler signal, its data time) and its waits in collectives
    (comm_s). Moving its start to ``end`` dropped them: rank 0 working 30 ms before a barrier
    and a save read data 0.1 ms, rank 1 no wait."""
    start = step.marks[0][1]
    if clock.cuda:
        began.synchronize()  # sync: past it already (a save copied the state to the host, an evaluation read its metrics)
    before = clock.seconds(start, began)
    waited = CommTimer.seconds(step.syncs, within=(start, began)) if step.syncs else 0.0
    step.lead_s += max(0.0, before - waited)
    step.lead_wait_s += waited
    # Those after ``end`` (an evaluation's metrics all-reduced after its last forward) stay
    # the step's; those in between, no step's. (CUDA events are not compared here: none kept.)
    step.syncs = [s for s in step.syncs if s[0] >= end] if isinstance(end, float) else []
    step.marks[0] = ("data", end)
