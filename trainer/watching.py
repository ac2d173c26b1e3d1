"""Which modules pardash's forward hooks are on, and when they move (part of
:class:`pardash.trainer.instrument.Instrument`).

Global module hooks make every module call take PyTorch's slow call path (about 10 us a call on
a small CPU core, most of it PyTorch's own). They are needed only to find the roots; once the
same roots have trained for ``SETTLE_STEPS`` steps, they are swapped for hooks on the roots
alone, and submodule calls cost nothing again. An optimizer never seen before (a new model,
likely) or a root freed swaps the global hooks back in until the roots settle. TorchScript
takes no hooks of a module of its own, and compiles the ones a module has: the roots' hooks are
lifted while it compiles."""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch

from pardash.trainer.hooking import _Hook, _get_ident


class Watching:
    """The module hooks' placing: global until the roots settle, then on the roots (and the
    script's ``AveragedModel``s). Its state is :class:`Instrument`'s (set in its ``__init__``)."""

    def _root_gone(self) -> None:
        """A root module was freed: the next model must be seen from its first forward, so the
        global hooks return."""
        if self.dead or self.watching_all or not self._handles:
            return
        if self._swapping or _get_ident() != self._tid or self._depth:
            self._rewatch = True  # inside a swap, another thread or a module call: at the next step
        else:
            self._watch_all_modules()

    def _watch_all_modules(self) -> None:
        from torch.nn.modules import module as nn_module

        self._swapping = True
        try:
            self._unwatch()
            self._module_handles = [
                nn_module.register_module_forward_pre_hook(self._forward_pre),
                nn_module.register_module_forward_hook(self._forward_post, with_kwargs=True, always_call=True),
            ]
            self.watching_all = True
            self._settled_from = self.step
            self._rewatch = False
        finally:
            self._swapping = False

    def _watch_roots(self) -> None:
        if self.watching_all and _compiled(self._hooked_modules()):
            # torch.compile guards on the number of global hooks: their swap for the roots'
            # recompiled the model at step 4 (10.6 s of a DDP step, minutes on a real model).
            # Kept: a compiled graph runs none of them (each traced as nothing, see
            # Instrument._forward_pre), so they cost the roots' calls and a graph break's alone.
            self._settled_from = self.step
            return
        if any(isinstance(m, torch.jit.ScriptModule) for m in self._hooked_modules()):
            # TorchScript takes no hooks on a module of its own ("register_forward_pre_hook is
            # not supported on ScriptModules": the instrumentation stopped at step 2): the
            # global hooks, which see its calls, stay.
            if not self.watching_all:
                self._watch_all_modules()
            self._settled_from = self.step
            return
        self._swapping = True
        try:
            self._unwatch()
            for root in self._hooked_modules():
                # prepend: before FSDP2's pre-forward hook, whose all-gather is the arrival
                self._module_handles.append(root.register_forward_pre_hook(_Hook(self._forward_pre), prepend=True))
                self._module_handles.append(
                    root.register_forward_hook(_Hook(self._forward_post), with_kwargs=True, always_call=True)
                )
            self.watching_all = False
        finally:
            self._swapping = False

    def _wrap_jit_script(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def script(obj: Any, optimize: Any = None, _frames_up: int = 0, _rcb: Any = None, example_inputs: Any = None) -> Any:
            # TorchScript compiles a module's forward hooks with it, and pardash's are Python
            # ("Compiled functions can't take variable number of arguments"): the roots' hooks
            # are lifted while it compiles the module that holds them (the global hooks it
            # ignores). _frames_up + 1: a class's names are looked up in the frame that
            # scripted it, the script's, one above this one.
            if not self._lifts_for(obj):
                return original(obj, optimize, _frames_up + 1, _rcb, example_inputs)
            self._swapping = True
            try:
                self._unwatch()
            finally:
                self._swapping = False
            try:
                return original(obj, optimize, _frames_up + 1, _rcb, example_inputs)
            finally:
                if not self.dead and not self.watching_all and not self._module_handles:
                    self._watch_roots()

        return script

    def _wrap_average_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def __init__(average: Any, *args: Any, **kwargs: Any) -> None:
            original(average, *args, **kwargs)
            if not self.dead:
                self._averages.add(average)
                if not self.watching_all:
                    self._rehook = True

        return __init__

    def _lifts_for(self, obj: Any) -> bool:
        """Whether scripting ``obj`` must lift the roots' hooks: a module holding a root, on the
        training thread between two module calls (a thread scripting beside a forward would take
        its root's post-hook away mid-call)."""
        if self.watching_all or not self._module_handles or not isinstance(obj, torch.nn.Module):
            return False
        if _get_ident() != self._tid or self._depth:
            return False
        hooked = {id(m) for m in self._hooked_modules()}
        return any(id(m) in hooked for m in obj.modules())

    def _hooked_modules(self) -> list[Any]:
        """The modules the root hooks go on: the roots, and a DDP root's module (evaluated
        directly, bypassing DDP)."""
        roots = self.roots
        # (an AveragedModel's own: the copy of the model it holds stays free of hooks)
        averages = [m for m in self._averages if all(m is not r for r in roots)]
        return [*roots, *(r.module for r in roots if isinstance(getattr(r, "module", None), torch.nn.Module)), *averages]

    def _unwatch(self) -> None:
        for h in self._module_handles:
            h.remove()
        self._module_handles = []


def _compiled(roots: list[Any]) -> bool:
    """Whether a model of ``roots`` (a root or one of its modules) is ``torch.compile``d
    (``torch.compile(model)``, ``model.compile()``, a block each), once Dynamo has compiled a
    frame in this process. Not a loss function or a kernel compiled beside an eager model (a
    Hugging Face model's flex attention): no module call of theirs is compiled, and the global
    hooks kept for them cost every module call of the model (a step of 11.4 ms took 13.5)."""
    utils = sys.modules.get("torch._dynamo.utils")
    try:
        if utils is None or not utils.counters["frames"]["ok"]:
            return False
    except Exception:
        return False
    frame = sys.modules.get("torch._dynamo.eval_frame")
    optimized = getattr(frame, "OptimizedModule", ())
    return any(isinstance(m, optimized) or getattr(m, "_compiled_call_impl", None) is not None
               for root in roots for m in root.modules())  # fmt: skip
