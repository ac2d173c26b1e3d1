"""Iterations that end without an optimizer step (part of :class:`pardash.trainer.instrument.Instrument`).

A step ends at an optimizer's post-hook. Two kinds of iteration end without one:

- ``GradScaler.step`` skips ``optimizer.step()`` when the gradients are inf or NaN: its step is
  watched, and a skipped one ends the step as a step would.
- A script that skips its own update (``loss.backward(); if not finite(grad norm):
  optimizer.zero_grad(); continue``) throws the gradients away with ``zero_grad``. Without
  this, that iteration and the next were one step: twice the step time, both losses summed
  (a spike on the loss curve) and "2 micro-batches". A ``zero_grad`` (the optimizer's, or a
  trained model's) right after a backward in training mode, with one optimizer stepping and no
  step since, is where the iteration may have ended: the open step is cut there, pending. So is
  one after the next training forward, on another input, with no step since that backward
  (``loss = ...; optimizer.zero_grad(); loss.backward(); if not finite: continue``, the
  zero_grad at the top of the loop): cut at that backward's return, as a zero_grad there
  would have, the next batch's loading and forward after it (the time the skipped iteration
  took after its backward, clipping, is the next step's data). It is decided at the next
  optimizer step (with the cuts of skips in a row after it, each another
  batch trained on and zeroed): a step of its own if a training forward on another batch
  (another input tensor) came after the cut, or an evaluation, and the optimizer steps after a
  backward, as iterations do. Dropped, the iteration goes on as one step: a backward with no
  new forward first (a backward per task loss, PCGrad's), a forward on the same input (SAM's
  second pass), or gradients zeroed again right before the step, or set anew (per-micro-batch
  clipping, or a batch per task: each backward's gradients read, zeroed, their combination set
  and stepped).

A script that never calls an optimizer's step (its update by hand: ``p.data -= lr * p.grad``,
its gradients all-reduced by ``dist.all_reduce``) has no step at all from the above: pardash
showed "starting" throughout. Until an optimizer steps, each training forward that begins after
a backward returned is where an iteration may have ended, provisionally; it did if the
parameters changed in between (the update by hand), however the gradients are reset after it
(``zero_grad``, ``p.grad.zero_()``, set to None) or not. Passes that change no parameter are
not updates: micro-batches accumulated for one, gradient statistics gathered before training
(a Fisher information's), an adversarial example's PGD passes; they stay the next step's.
The parameters are told changed by a few elements of the first and last trainable ones,
copied as each backward returns and compared at the next backward's start (on the device:
read then, the next forward already queued), so only values are compared (``p.data -= ...``
leaves ``p._version`` as it was). Once :data:`~pardash.trainer.instrument.WARN_AFTER_FORWARDS`
iterations have ended so, they are steps (the first ones too, so the step numbers are the
script's iterations), and so is each one after, until an optimizer steps (the iterations after
that are its steps). Each step ends at the end of the last collective of the script's own after
its last backward (its gradients' all-reduce by hand), else at that backward's return: the
time from the backward's return to that end is its ``optimizer`` phase (the update), the
collectives in it its ``comm_s``; the update's work after them is the next step's data, as is
its loading. Its loss is the tensor backpropagated, its memory read as the backward returns
(parameters and gradients, no optimizer state), its self time from the last step's end to its
arrival at its first collective, as any step's. A script that ends with no optimizer step
counts its iterations so, however few (its last one a step if updated).

Not told apart: a skip before the backward (``if not finite(loss): continue``: its forward's
time joins the next step's, with no backward nor loss), a skip in a loop over one fixed batch
or one input buffer refilled each time (the same input tensor), an iteration skipped last
without a ``zero_grad`` after it (no step), an evaluation right after a skip whose ``zero_grad``
comes at the next iteration's start (part of the skipped step), a skip right before an
iteration whose gradients are set by hand (it joins that iteration's step), a skip whose
forward's input requires grad (taken for an adversarial example's pass: part of the step), and,
zeroed after each forward, passes of one iteration whose gradients are combined in place
(``p.grad.copy_(...)``, not set anew: each pass read as an iteration skipped) or an
evaluation between a skipped backward and the next forward (one step with the next).
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import torch

from pardash.trainer.hooking import _get_ident, _guarded, _is_compiling
from pardash.trainer.marks import _Cut
from pardash.trainer.trained import FORWARD_ARRIVES


@dataclass(slots=True)
class _HandCut:
    """Where an iteration by hand may have ended (see the module): the open step's cut there,
    what only that iteration has (its arrival at its first collective, the spans of its
    collectives after its backward, its memory), the waits the open step held then, and the
    mark made ``optimizer`` there (-1: none), made ``data`` again should the cut not hold."""

    cut: _Cut
    arrive: Any
    syncs: list[tuple[Any, Any]]
    mem: Any
    nsyncs: int
    renamed: int


def _local(p: Any) -> Any:
    """A parameter's elements on this rank (a DTensor's local shard)."""
    t = p.detach()
    to_local = getattr(t, "to_local", None)
    return to_local() if to_local is not None else t


def _fingerprint(p: Any) -> Any:
    """A few of a parameter's elements, to tell it changed (see the module)."""
    return _local(p).reshape(-1)[:16]


class Skips:
    """Steps without an optimizer step. Its state is :class:`Instrument`'s (set in its ``__init__``):
    ``_skip_from`` (the backward's end the pending cut took from the open step, or ``False``
    when no cut is pending), ``_skip_batch`` (a forward on another batch came after the cut),
    ``_skip_zeroed`` (gradients zeroed since the last backward), ``_skip_more`` (the cuts of
    skips in a row after the first: cut, memory, the arrival, waits in collectives and seconds
    in a DataLoader between the cut before it and it, the backward's end it took),
    ``_skip_grad`` (the gradient the last backward left on the optimizer's first parameter,
    weakly), ``_input`` (the last training forward's first tensor, weakly), ``_input_grad``
    (whether it required grad) and ``_returned`` (the open step as the last backward returned)."""

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
            if not _is_compiling():
                phase = self._phase
                if phase == "backward":
                    if _get_ident() == self._tid:
                        self._zeroed(owner)
                elif phase == "forward" and self._open is not None and self._open.micro and _get_ident() == self._tid:
                    # (a backward in the step, no optimizer step since: most loops zero here
                    # with none, their last step just published)
                    self._zeroed_after_forward(owner)
            return original(owner, *args, **kwargs)

        return zero_grad

    @_guarded
    def _zeroed(self, owner: Any) -> None:
        """Gradients zeroed after a backward: cut the open step there, pending (see the module)."""
        if self._in_optimizer or self._in_backward or self._explicit:
            return
        if self._skip_from is not False:
            self._skip_zeroed = True  # (again: right before the step, gradients are set by hand)
            step = self._open
            last = self._skip_more[-1][0] if self._skip_more else self._cut
            if self._skip_batch and step is not None and last is not None and step.micro > last.micro:
                # Another batch trained on since the last cut, and zeroed: skips in a row, or
                # micro-batches zeroed one by one (told apart at the step, as the first cut)
                cut = _Cut(self.clock.stamp(), len(step.marks), len(step.losses), step.micro, step.samples, len(step.waits),
                           self._logged_to_cut(), time.time(), time.monotonic())  # fmt: skip
                self._skip_more.append((cut, self._memory(slot=0), self._arrive_next, self._sync_next, self._loader_next,
                                        self._backward_end))  # fmt: skip
                self._logging_to = cut.logged
                self._arrive_next = self._sync_next = self._loader_next = self._backward_end = None
                self._skip_batch = False
            return
        if self._input_grad:
            # The last training forward's input is being optimised, its gradient wanted (an
            # adversarial example's PGD passes, zeroed after each or before the training pass):
            # a pass of the iteration, not one skipped.
            return
        if not self._may_cut(owner):
            return
        step = self._open
        if step is None or not step.micro:
            return
        now = self.clock.stamp()
        self._cut = _Cut(now, len(step.marks), len(step.losses), step.micro, step.samples, len(step.waits), self._logged_to_cut(),
                         time.time(), time.monotonic())  # fmt: skip
        self._logging_to = self._cut.logged  # (what is logged before the next forward: the skipped step's, if the cut holds)
        self._pending_mem = self._memory(slot=0)  # (the gradients are still held)
        self._skip_from = self._backward_end
        self._skip_batch = False
        self._skip_zeroed = True
        self._backward_end = None  # what follows is the next step's data, if the cut holds
        self._resume_at = None

    def _may_cut(self, owner: Any) -> bool:
        """Whether a ``zero_grad`` of ``owner`` may end an iteration (none pending): one optimizer,
        seen to step twice, each step published at its post-hook, and ``owner`` it or a model
        it trains, in training mode."""
        if not self._early or not self._published_round or self._cut is not None or self._orphan is not None:
            return False  # several optimizers, a round going on, or not seen to step twice yet
        optimizers = self.trained.optimizers
        if len(optimizers) != 1:
            return False
        if isinstance(owner, torch.optim.Optimizer):
            if owner is not optimizers[0]:
                return False  # another optimizer's (SAM's own, around the one that steps)
        elif not self.trained.trains(owner):
            return False
        # (not in eval mode: a backward there is test-time adaptation inside an evaluation)
        return any(m.training for m in self.trained.roots)

    @_guarded
    def _zeroed_after_forward(self, owner: Any) -> None:
        """Gradients zeroed after a training forward that came after a backward with no
        optimizer step since (``loss = ...; optimizer.zero_grad(); loss.backward(); if not
        finite(grad norm): continue``, the zero_grad at the top of the next iteration): that
        backward's gradients are thrown away unstepped, its iteration ended as it returned.
        Cut there, pending, as a ``zero_grad`` right after it would have been, and decided at
        the next optimizer step as such a cut is (see the module): what came since its return
        (the loading of the next batch, waits in collectives, the next forward's samples and
        arrival) goes after the cut."""
        if self._in_optimizer or self._in_backward or self._explicit or self._input_grad:
            return  # (an input optimised: an adversarial example's passes, see _zeroed)
        step, returned = self._open, self._returned
        if returned is None or step is None:
            return
        end, before, samples, waits, loader, syncs, syncs_next, loader_next = returned
        marks = step.marks
        at = len(marks) - 2
        if at < 1 or marks[at][0] != "data" or marks[at][1] is not end or marks[-1][0] != "forward":
            return  # not a data phase from that return, then forwards (an evaluation between)
        last = before() if before is not None else None
        if last is not None and self._input is not None and last is self._input():
            return  # a forward on the same input: the same iteration's (SAM's second pass)
        pending = self._skip_from is not False
        if pending:
            prior = self._skip_more[-1][0] if self._skip_more else self._cut
            if not self._skip_batch or prior is None or step.micro <= prior.micro:
                return  # (no other batch trained on since the last cut)
        elif not self._may_cut(owner):
            return
        forward = marks[-1][1]
        t, mono = time.time(), time.monotonic()
        if not self.clock.cuda:  # (when the backward returned: a perf_counter stamp)
            ago = time.perf_counter() - end
            t, mono = t - ago, mono - ago
        del marks[at]  # (the next step's data, from the cut: as a cut at the backward's return leaves it)
        cut = _Cut(end, at, len(step.losses), step.micro, samples, waits, self._logged_to_cut(), t, mono)
        # The next iteration's arrival: its forward's (FSDP, TP), or, the cut one's iteration
        # not arrived, whatever arrived since (DDP's broadcast of its buffers).
        arrived = self._arrive_next if pending else step.arrive
        if arrived is not None and (arrived is forward or arrived is self._buffer_arrive):
            arrived, arrive_next = None, arrived
        else:
            arrive_next = forward if self.strategy in FORWARD_ARRIVES else None
        mem = self._memory(slot=0)  # (the gradients are still held)
        if pending:
            held = self._sync_next or []
            self._skip_more.append((cut, mem, arrived, held[:syncs_next] or None, loader_next, end))
            self._sync_next = held[syncs_next:] or None
            if self._loader_next is not None and self._loader_next != loader_next:  # (the next batch's loading)
                self._loader_next -= loader_next or 0.0
            else:
                self._loader_next = None
        else:
            self._sync_next = step.syncs[syncs:] or None
            del step.syncs[syncs:]
            step.arrive = arrived
            if step.loader_s is not None and step.loader_s != loader:  # (the next batch's loading)
                self._loader_next = step.loader_s - (loader or 0.0)
                step.loader_s = loader
            self._cut = cut
            self._pending_mem = mem
            self._skip_from = end
            self._resume_at = None
        self._arrive_next = arrive_next
        self._skip_batch = True  # (another batch trained on since the cut: the forward just seen)
        self._skip_zeroed = True

    def _uncut(self, cut: Any, resumed: Any) -> None:
        """Undo a cut's taking of the data mark at the backward's end ``resumed``."""
        step = self._open
        if resumed is None or step is None or cut is None:
            return
        if len(step.marks) > cut.marks and step.marks[cut.marks][0] == "forward":
            step.marks.insert(cut.marks, ("data", resumed))  # from the backward's end, as uncut
        elif len(step.marks) == cut.marks and self._backward_end is None:
            self._backward_end = resumed

    def _skip_drop(self) -> None:
        """The pending cuts were inside an iteration: the open step goes on as if never cut."""
        step = self._open
        after = [(arrive, sync, loader) for _cut, _mem, arrive, sync, loader, _resumed in self._skip_more]
        after.append((self._arrive_next, self._sync_next, self._loader_next))
        for cut, _mem, _arrive, _sync, _loader, resumed in reversed(self._skip_more):  # (later marks first)
            self._uncut(cut, resumed)
            self._logged_back(cut.logged)
        self._skip_more = []
        resumed = self._skip_from
        self._skip_from = False
        self._skip_grad = None
        cut, self._cut = self._cut, None
        self._pending_mem = self._arrive_next = self._sync_next = self._resume_at = None
        if step is not None:  # (the open step's, as never cut: its first arrival, its waits, its loading)
            for arrive, sync, loader in after:
                if step.arrive is None:
                    step.arrive = arrive
                if sync:
                    step.syncs += sync
                if loader is not None:
                    step.loader_s = (step.loader_s or 0.0) + loader
        self._loader_next = None
        self._uncut(cut, resumed)
        if cut is not None:
            self._logged_back(cut.logged)

    def _skip_backward(self) -> None:
        """A backward with a cut pending: with no forward since (a backward per task loss of one
        forward), the same iteration's; after a forward on another batch, the next iteration's."""
        self._skip_zeroed = False
        if not self._skip_batch:
            self._skip_last_inside()

    def _skip_last_inside(self) -> None:
        """The last cut was inside an iteration: dropped, the ones before it stay pending."""
        if not self._skip_more:
            self._skip_drop()
            return
        cut, _mem, arrive, sync, loader, resumed = self._skip_more.pop()
        self._uncut(cut, resumed)
        self._logged_back(cut.logged)
        self._arrive_next = arrive if arrive is not None else self._arrive_next
        self._sync_next = (sync or []) + (self._sync_next or []) or None  # (its waits, then those since)
        if loader is not None:
            self._loader_next = (self._loader_next or 0.0) + loader
        self._skip_batch = True  # (the cut before it had another batch after it)

    def _first_grad(self) -> Any:
        """The gradient of the stepping optimizer's first parameter (None: none, or no such)."""
        try:
            return self.trained.optimizers[0].param_groups[0]["params"][0].grad
        except (IndexError, KeyError, TypeError, AttributeError):
            return None

    def _skip_grads(self) -> None:
        """A backward returned with a cut pending: note the gradient it left, to tell at the
        step whether the optimizer steps on it."""
        grad = self._first_grad()
        self._skip_grad = weakref.ref(grad) if grad is not None else None

    def _set_by_hand(self) -> bool:
        """Whether the optimizer steps on gradients set by hand (``p.grad = ...``), not the
        ones the last backward left: per-micro-batch clipping's sum, PCGrad's combination."""
        grad = self._first_grad()
        left = self._skip_grad() if self._skip_grad is not None else None
        return grad is not None and left is not grad

    def _skip_end(self) -> None:
        """The script ends (or fails) with cuts pending: each ended an iteration, its gradients
        thrown away (what follows the last cut, with no optimizer step, is no step)."""
        if self._cut is None:
            self._skip_drop()
            return
        self._skip_publish()

    def _skip_step(self) -> None:
        """The optimizer steps with a cut pending: it was an iteration's end if another batch
        (or an evaluation) came after it and the optimizer steps on the gradients the last
        backward left (not zeroed since, nor set by hand: one iteration of several zeroed
        passes, per-micro-batch clipping's, zeroed before or after each pass)."""
        if not (self._skip_batch or self._resume_at is not None) or self._skip_zeroed or self._cut is None or self._set_by_hand():
            self._skip_drop()
            return
        self._skip_publish()

    def _skip_publish(self) -> None:
        """Make each pending cut the end of a step."""
        # Each cut ends a step; the arrival, waits and loading after each are the next one's.
        cuts = [(self._cut, self._pending_mem)] + [(c, m) for c, m, _a, _s, _ld, _r in self._skip_more]
        after = [(a, s, ld) for _c, _m, a, s, ld, _r in self._skip_more] + [(self._arrive_next, self._sync_next, self._loader_next)]
        self._skip_from = False
        self._skip_more = []
        self._skip_grad = None
        self._cut = self._pending_mem = None
        before = None
        for (cut, mem), (arrive, sync, loader) in zip(cuts, after):
            here = cut
            if before is not None:  # (counted in the open step as it was: now after the last cut)
                here = _Cut(cut.end, cut.marks - before.marks + 1, cut.losses - before.losses, cut.micro - before.micro,
                            cut.samples - before.samples, cut.waits - before.waits, cut.logged, cut.t, cut.mono)  # fmt: skip
            self._arrive_next, self._sync_next, self._loader_next = arrive, sync, loader
            self._publish_cut(here, mem)
            before = cut

    def _skip_forward(self, first: Any) -> None:
        """A training forward ended with a cut pending: on the same input as the last (SAM's
        second pass), the same iteration; on another, maybe the next (see _skip_step)."""
        last = self._input() if self._input is not None else None
        if last is not None and first is last and (self._resume_at is None or self._skip_more):
            self._skip_last_inside()
        else:
            self._skip_batch = True

    def _note_input(self, first: Any) -> None:
        self._input_grad = bool(getattr(first, "requires_grad", False))
        try:
            self._input = weakref.ref(first) if first is not None else None
        except TypeError:
            self._input = None

    # -- iterations by hand, no optimizer step (see the module) -----------------------------------

    def _hand_watched(self) -> list[Any]:
        """The parameters whose values tell an update by hand: the first root's first and last
        trainable ones (with elements on this rank)."""
        watched = [ref() for ref in self._hand_params]
        if not watched or any(p is None for p in watched):
            watched = []
            for root in self.trained.roots:
                params = [q for q in root.parameters() if q.requires_grad and _local(q).numel()]
                if params:
                    watched = [params[0]] if len(params) == 1 else [params[0], params[-1]]
                    break
            self._hand_params = [weakref.ref(p) for p in watched]
        return watched

    def _hand_returned(self) -> None:
        """A backward returned, no optimizer step seen yet: its iteration may end at the next
        training forward (see _hand_boundary)."""
        step = self._open
        if step is None:
            return
        self._hand_after = True
        self._hand_end = self._backward_end
        self._hand_marks = len(step.marks)
        self._hand_coll_end = None
        self._hand_t = (time.time(), time.monotonic())
        with torch.no_grad():
            self._hand_print = [_fingerprint(p).clone() for p in self._hand_watched()]
        if self._hand_on or self._hand:  # (an iteration by hand seen: its gradients are held now)
            self._hand_mem = self._memory()
            if self._hand_on:
                self.reporter.set_phase("optimizer")  # (the update by hand)

    def _timed_by_hand(self, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Around a collective's wrapper (Arrivals._wrap_collective): a collective after a
        backward, no optimizer step seen, is the update by hand's (its gradients' all-reduce)."""

        def outer(original: Callable[..., Any]) -> Callable[..., Any]:
            inner = wrap(original)

            def collective(*args: Any, **kwargs: Any) -> Any:
                if not self._hand_after or self.dead or _get_ident() != self._tid or _is_compiling():
                    return inner(*args, **kwargs)
                start = self.clock.stamp()
                try:
                    return inner(*args, **kwargs)
                finally:
                    self._hand_collective(start)

            return collective

        return outer

    @_guarded
    def _hand_collective(self, start: Any) -> None:
        end = self.clock.stamp()
        self._hand_syncs.append((start, end))
        self._hand_coll_end = end
        self._hand_t = (time.time(), time.monotonic())

    def _hand_boundary(self) -> bool:
        """A training forward begins after a backward returned, no optimizer step seen: the
        iteration may have ended, at the end of its last collective after that backward or
        at the backward's return (decided at the next backward: _hand_confirm). Whether a
        provisional end was made."""
        self._hand_after = False
        step = self._open
        end = self._hand_end
        if step is None or not step.micro or end is None:
            return False
        n, renamed = self._hand_marks, -1
        if self._hand_coll_end is not None and len(step.marks) == n:
            step.marks.append(("optimizer", end))  # the update by hand, to its last collective's end
            renamed, n = n, n + 1
            end = self._backward_end = self._hand_coll_end  # (the next micro-batch's data from there)
        with torch.no_grad():  # (on the device, not read yet: see _hand_updated)
            changed = [torch.ne(_fingerprint(p), before).any() for p, before in zip(self._hand_watched(), self._hand_print)
                       if _fingerprint(p).shape == before.shape]  # fmt: skip
        self._hand_changed = torch.stack(changed).any() if changed else None
        t, mono = self._hand_t
        cut = _Cut(end, n, len(step.losses), step.micro, step.samples, len(step.waits), self._logged_to_cut(), t, mono)
        self._hand.append(_HandCut(cut, step.arrive, self._hand_syncs, self._hand_mem, len(step.syncs), renamed))
        step.arrive = None  # (the next iteration arrives anew)
        self._hand_syncs = []
        self._hand_pending = True
        return True

    def _hand_updated(self) -> bool:
        """Whether the parameters changed between the last backward's return and the training
        forward after it (the update by hand: an iteration ended); unchanged, the passes are
        one step's (micro-batches accumulated, gradient statistics, adversarial examples)."""
        changed, self._hand_changed = self._hand_changed, None
        if changed is None:
            return False
        updated = bool(changed)
        self._hand_updates += updated
        return updated

    def _hand_confirm(self) -> None:
        """A backward begins (or the script ends) after a provisional end of an iteration: it
        holds if the parameters changed before that forward; once enough have, they are steps."""
        self._hand_pending = False
        if not self._hand_updated():
            self._hand_merge()
            return
        if self._hand_on or len(self._hand) >= self.warn_after:
            self._hand_publish()

    def _hand_merge(self) -> None:
        """The last provisional end was inside an iteration (micro-batches accumulated)."""
        rec = self._hand.pop()
        step = self._open
        if step is not None:
            if 0 <= rec.renamed < len(step.marks) and step.marks[rec.renamed][0] == "optimizer":
                step.marks[rec.renamed] = ("data", step.marks[rec.renamed][1])
            if rec.arrive is not None:
                step.arrive = rec.arrive
        self._hand_syncs = rec.syncs + self._hand_syncs
        self._logged_back(rec.cut.logged)

    def _hand_stop(self) -> None:
        """An optimizer steps: the provisional ends not made steps were none (the open step
        goes on as if never cut); those made steps stay, and the optimizer's count from here."""
        step = self._open
        first = None
        for rec in reversed(self._hand):  # (later marks first)
            if step is not None and 0 <= rec.renamed < len(step.marks) and step.marks[rec.renamed][0] == "optimizer":
                step.marks[rec.renamed] = ("data", step.marks[rec.renamed][1])
            self._logged_back(rec.cut.logged)
            first = rec.arrive if rec.arrive is not None else first
        if first is not None and step is not None:
            step.arrive = first
        self._hand_clear()

    def _hand_clear(self) -> None:
        self._hand = []
        self._hand_syncs = []
        self._hand_on = self._hand_after = self._hand_pending = False
        self._hand_mem = None
        self._hand_changed = None
        self._hand_print = []

    def _hand_publish(self) -> None:
        """Make each provisional end a step's end (the first time, with the warning)."""
        if not self._hand_on:
            self._hand_on = True
            if not self._hand_warned:
                self._hand_warned = True
                from pardash.trainer.instrument import NO_STEP_WARNING

                self.reporter.event("warning", message=NO_STEP_WARNING.format(n=len(self._hand)))
        records, self._hand = self._hand, []
        step = self._open
        current, syncs = step.arrive, step.syncs
        before, taken = None, 0
        for rec in records:
            cut = rec.cut
            if before is not None:  # (counted in the open step as it was: now after the last cut)
                cut = _Cut(cut.end, cut.marks - before.marks + 1, cut.losses - before.losses, cut.micro - before.micro,
                           cut.samples - before.samples, cut.waits - before.waits, cut.logged, cut.t, cut.mono)  # fmt: skip
            self._open.arrive = rec.arrive
            self._open.syncs = syncs[taken : rec.nsyncs] + rec.syncs  # its own waits, and its update's collectives
            # (the first iterations' memory, read before any was known to be by hand: the next's,
            # the same parameters and gradients)
            self._publish_cut(cut, rec.mem if rec.mem is not None else self._hand_mem)
            before, taken = rec.cut, rec.nsyncs
        self._open.arrive = current
        self._open.syncs = syncs[taken:]

    def _hand_finish(self) -> None:
        """The script ends with no optimizer step: its iterations by hand are steps, the last
        one too if the parameters changed after its backward."""
        if self._hand_pending:
            self._hand_pending = False
            if not self._hand_updated():
                self._hand_merge()
        if self._hand_after and self._hand_boundary():  # (the last iteration: updated before the end?)
            self._hand_pending = False
            if not self._hand_updated():
                self._hand_merge()
        if self._hand:
            self._hand_publish()
