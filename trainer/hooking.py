"""How pardash's hooks sit in a script's process (see :mod:`pardash.trainer.instrument`):
the hook objects put on the script's modules and kept out of its copies and pickles, the guards
that keep an internal error or a torch.compile trace from ever reaching the script, the fork
that makes every hook inert in a DataLoader worker, the placing of FSDP2's wait timers, and the
wrappers of functions the script calls (in this file, as the other hooks' files, so that their
frames never show in the script's traceback: see autorun._HOOKS)."""

from __future__ import annotations

import functools
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable

import torch

if TYPE_CHECKING:
    from pardash.trainer.instrument import Instrument

_is_compiling = torch.compiler.is_compiling
_get_ident = threading.get_ident

# What a rank waiting in phase "sync" says it waits in (schema.Heartbeat.waits_in), beside the
# name of a torch.distributed function the script calls itself ("barrier", "all_reduce").
DDP_ALL_REDUCE = "DDP's gradient all-reduce"
DDP_BROADCAST = "DDP's buffer broadcast"
FSDP_ALL_GATHER = "FSDP's all-gather"
FSDP_REDUCE_SCATTER = "FSDP's reduce-scatter"
FSDP_SAYS = {"all_gather_single": FSDP_ALL_GATHER, "reduce_scatter_single": FSDP_REDUCE_SCATTER}
"""The torch.distributed functions FSDP2 calls, by what a rank waiting in one says."""


class _Hook(functools.partial):
    """A hook pardash puts on one of the script's modules: calls ``fn``. Copies and pickles of
    the module leave it out (:func:`_without_hooks_in_state`); where a class's own
    ``__getstate__`` keeps it, it is copied or pickled as a no-op, ``None.__init__`` (a builtin
    that takes any positional arguments and returns None). A model copied (``copy.deepcopy``, ``AveragedModel``, ``quantize_dynamic``)
    or saved whole (``torch.save(model)``) once pardash hooked it carried the hook's bound
    method, and with it the instrument's sockets and locks: "cannot pickle '_thread.lock'
    object", in the script's own line. A copy's forward passes are not timed (the global hooks
    see a copy that is trained), and a model saved whole loads where pardash is not installed.
    A ``functools.partial``: its call is C's, no Python frame between the module and ``fn``
    (twice a step, on the root)."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return getattr, (None, "__init__")


_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks")
_HOOK_FLAGS = ("_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs", "_forward_hooks_always_called")


def _without_hooks_in_state(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``Module.__getstate__`` (and DDP's own), less pardash's hooks: a model copied
    (``copy.deepcopy``, ``AveragedModel``) or pickled (``torch.save(model)``) carries none of
    them, so the copy scripts, loads under ``weights_only`` with its classes allowed, and names
    nothing of pardash (``_Hook.__reduce__`` stays the fallback for a class of its own)."""

    def getstate(module: Any) -> Any:
        state = original(module)
        if not isinstance(state, dict):
            return state
        ours = {key for name in _HOOK_DICTS for key, hook in (state.get(name) or {}).items() if isinstance(hook, _Hook)}
        if not ours:
            return state
        state = dict(state)
        for name in _HOOK_DICTS + _HOOK_FLAGS:
            hooks = state.get(name)
            if hooks:
                state[name] = type(hooks)((k, v) for k, v in hooks.items() if k not in ours)
        return state

    return getstate


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    """A hook body that must never break the training loop: an internal error stops the
    instrumentation (a warning event says so, with the traceback) instead of reaching the
    user's code. Also inert in a forked child (a DataLoader worker), whose copy of the
    reporter's socket must not be used."""

    @functools.wraps(method)
    def guarded(self: "Instrument", *args: Any, **kwargs: Any) -> Any:
        if self.dead:  # (a forked child's instruments are: see _forked)
            return None
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            self._fail(exc)
            return None

    return guarded


def _untraced(method: Callable[..., Any]) -> Callable[..., Any]:
    """A hook torch.compile calls but must not trace, guarded as :func:`_guarded` (inline: one
    Python call less a hook). An optimizer step compiled whole (``@torch.compile def opt_step():
    opt.step()``, a PyTorch recipe) traced the optimizer hooks, and broke its graph at their
    clocks, pids and sockets 19 times (2 without pardash), with Dynamo's warnings, at twice the
    time a step. Disabled, each is one break that runs it as it is, for 0.5 us a call. (The
    module and backward hooks return first thing when compiling.) The disabled function must be
    what the optimizer calls: a plain wrapper that called it when ``is_compiling()`` broke the
    graph inside an inlined call in the optimizer's loop over its hooks, which Dynamo cannot
    resume, and it fell back to compiling every frame the hooks called."""

    @functools.wraps(method)
    def untraced(self: "Instrument", *args: Any) -> Any:
        if self.dead:  # (a forked child's instruments are: see _forked)
            return None
        try:
            return method(self, *args)
        except Exception as exc:
            self._fail(exc)
            return None

    return torch.compiler.disable(untraced)


_instruments: "weakref.WeakSet[Instrument]" = weakref.WeakSet()
"""Every instrument made in this process (see _forked)."""


def _forked() -> None:
    """In a forked child (a DataLoader worker): every instrument inherited is inert, as after an
    internal error (its copy of the reporter's socket must not be used). Said once here, at the
    fork, instead of a pid read at each hook call (a system call)."""
    for inst in list(_instruments):
        inst.dead = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _around_fsdp(module: Any, begin_id: int, end_id: int) -> None:
    """Move forward pre-hooks ``begin_id`` and ``end_id`` of ``module`` to run right before and
    right after FSDP2's own pre-forward (the all-gather's wait), none of the script's pre-hooks
    between: their work is the rank's, not waiting. Best effort: FSDP's hook handle is its own
    (no public way to find it)."""
    try:
        fsdp_id = module._get_fsdp_state()._pre_forward_hook_handle.id
        hooks = module._forward_pre_hooks
        keys = [k for k in hooks if k not in (begin_id, end_id)]
        at = keys.index(fsdp_id)
        keys[at : at + 1] = [begin_id, fsdp_id, end_id]
        for k in keys:
            hooks.move_to_end(k)
    except Exception:
        pass  # first and last: a script's own pre-hooks on the module then count as waiting


def _around(original: Callable[..., Any], begins: Callable[..., Any], ends: Callable[[bool], Any]) -> Callable[..., Any]:
    """``original``, followed: when ``begins(args, kwargs)`` says so, ``ends(returned)`` after
    it, returned or raised (a save that failed: its phase given back)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if not begins(args, kwargs):
            return original(*args, **kwargs)
        returned = False
        try:
            out = original(*args, **kwargs)
            returned = True
            return out
        finally:
            ends(returned)

    return call


