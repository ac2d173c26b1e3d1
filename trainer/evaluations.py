"""Evaluations between training steps (part of
:class:`pardash.trainer.instrument.Instrument`): a trained model put in eval mode
(``model.eval()`` to ``model.train()``, or its forwards in eval mode without grad) is evaluated,
not trained. Its phase is ``eval``, an ``eval`` event says how long it took, and its time is
in neither step: the next step keeps what came before it (the script's work after the
optimizer step, its wait in a barrier), as after a save (see saves._left_out). Forwards with
grad after ``model.eval()`` are training if a backward follows them (BatchNorm and dropout
frozen), and a model put in eval mode before it was seen training is evaluated if an
optimizer already holds its weights (a baseline validation before the first step).

A model left in training mode (no dropout or BatchNorm to switch, so no ``model.eval()``) is
evaluated too when, after an optimizer step and before the next step's training, it (or its
running average, an EMA) runs without grad on the batches of a DataLoader pass begun since
that optimizer step, and the pass goes on to its next batch or to its end before training
resumes: a validation loop. From the first such forward the evaluation is provisional (its
phase is ``eval``), and it is dropped, as if never begun, when training resumes before its
loader took another batch: a forward without grad on the first batch of a pass is part of the
step (a GAN's fakes, a teacher's or the model's own targets, pseudo-labels, at the start of an
epoch or of the unlabelled loader's pass). Its time runs from its loader's start to the end
of its last forward, or of its loader's pass if that comes later, and the next step starts at
its end (what came before its loader's start is not kept: no stamp of the step's clock marks
it). A validation without a DataLoader (a tensor held, a list of batches) is not seen so: it
stays in the next step's data.

An EMA of the trained model (a copy no optimizer holds, updated in place after each step, or
torch's AveragedModel) put in eval mode between steps is evaluated from its ``ema.eval()`` to
its ``ema.train()``, or, where that never comes, to its last forward or the next batch asked
of the training loader (see :meth:`Evaluations._eval_of_copy`); a frozen distillation
teacher's forward, in eval mode or not, stays part of its step."""

from __future__ import annotations

import time
import weakref
from typing import Any, Callable

from pardash.telemetry import api
from pardash.trainer.hooking import _get_ident, _guarded
from pardash.trainer.marks import _OpenStep
from pardash.trainer.saves import _left_out
from pardash.trainer.trained import FORWARD_ARRIVES, batch_size, is_average

EVAL_CUT_SHORT = "cut short: the rank ended in it"
"""An ``eval`` event's message where the rank was stopped or failed before its end."""


class Evaluations:
    """The evaluation's start, end and event. Its state is :class:`Instrument`'s (set in its
    ``__init__``: the ``_eval_*`` fields)."""

    _eval_began: Any = None
    """The step clock's stamp as the evaluation began (``_eval_t0``, a ``perf_counter``, is its
    length's): what the step had before it is kept, the rest left out (see _eval_ends). None:
    not known (it began at its loader's start, before any stamp of it), the step then starts
    at its end."""
    _eval_in_step = False
    """Whether the evaluation began inside a step, after a backward whose optimizer step had not
    come (see _eval_begins): its span goes in that step's marks, as ``eval``."""
    _eval_asked: tuple[int, Any] | None = None
    """(optimizer steps ended, stamp) at the script's last ``model.eval()`` of a model not seen
    training (an EMA's): an evaluation of it begins there, not at its first forward."""
    _eval_copy = False
    """The evaluation began at the script's ``model.eval()`` of a model no optimizer holds (an
    EMA's, see :meth:`_eval_of_copy`), between steps: ``_eval_new`` holds that model, whose
    ``model.train()`` ends it."""
    _eval_until_train = False
    """Such an evaluation of a model not known for an average: it stands only if the script puts
    that model back in training mode (or evaluates the trained model, or an average, in it)
    before training resumes; else it was a frozen teacher's forward of the step, and is dropped."""
    _eval_written: Any = None
    """WeakKeyDictionary: a model no optimizer holds -> (optimizer steps ended, its parameters'
    in-place writes, steps ended) at the script's last ``model.eval()`` of it (see
    :meth:`_eval_of_copy`)."""

    def _wrap_train(self, original: Callable[..., Any]) -> Callable[..., Any]:
        trained = self.trained.trained_ids

        def train(module: Any, mode: bool = True) -> Any:
            if self.dead or _get_ident() != self._tid:
                return original(module, mode)
            self._train_depth += 1
            try:
                result = original(module, mode)
            finally:
                self._train_depth -= 1
            # Called for every submodule too (train() recurses): one set lookup for those.
            if id(module) in trained:
                self._mode_set(module, mode)
            elif not self._train_depth:  # the script's own call, on a model not seen training
                self._mode_set_new(module, mode)
            return result

        return train

    @_guarded
    def _mode_set(self, module: Any, mode: bool) -> None:
        """``model.eval()`` on a trained model starts an evaluation there (its loader's start
        and first batch are the evaluation's); ``model.train()`` ends it (its metrics too)."""
        if not self.trained.trains(module):
            return
        if not mode:
            self._eval_begins(called=True)
        elif self._eval_t0:
            if self._eval_called:  # (one begun at a forward in training mode ends where its forwards did)
                self._eval_end = self.clock.stamp()
                self._eval_t1 = time.perf_counter()
            self._eval_ends(by_script=True)

    @_guarded
    def _mode_set_new(self, module: Any, mode: bool) -> None:
        """``model.eval()`` on a model not seen training (none has stepped yet, say): noted, for
        its forwards in eval mode to tell (see :meth:`_eval_of_new`); between steps, on a copy
        of the model no optimizer holds (an EMA), an evaluation begins there (see
        :meth:`_eval_of_copy`). ``model.train()`` on it ends the evaluation."""
        new = self._eval_new
        if not mode:
            if self._eval_t0 and self._eval_copy:
                return  # (another model put in eval mode in it: the copy's train() still ends it)
            self._eval_new = (weakref.ref(module), time.perf_counter())
            self._eval_asked = (self._posts, self.clock.stamp())
            if self._posts and not self._eval_t0 and self.trained.has_params(module):
                self._eval_of_copy(module)
        elif new is not None and new[0]() is module:
            self._eval_new = None
            if self._eval_t0:
                self._eval_end = self.clock.stamp()
                self._eval_t1 = time.perf_counter()
                self._eval_ends(by_script=True)

    def _eval_of_copy(self, module: Any) -> None:
        """``model.eval()``, between steps, of a model not seen training: an EMA of the trained
        model (``copy.deepcopy(model).requires_grad_(False)`` updated with ``lerp_`` after each
        step, timm's ModelEmaV2/V3, ema-pytorch, torch's AveragedModel) is evaluated from there
        to its ``model.train()``. Its copy is no root and no optimizer holds it, so its
        evaluations read as a distillation teacher's forwards (part of the step): "evals: 4"
        in the script's words, no ``eval`` event, and 50 ms of its sample grid in the next
        step's data (review 284). An average is told by its class (:func:`is_average`), or by
        its parameters written in place since its last ``model.eval()`` an optimizer step ago
        or more (their ``_version`` counters: ``lerp_``, ``copy_``, ``mul_``), while no
        optimizer holds them; a frozen teacher's never are (a momentum teacher's are, but it
        is put in eval mode every step: see _written_since). Another model (its first
        evaluation, one updated less often than evaluated) is evaluated provisionally: it
        stands at its ``model.train()``, which a teacher's forward in the step has no call for
        (see _eval_until_train). Its parameters are walked here once a ``model.eval()``, never
        a forward."""
        if self.trained.trained_by_an_optimizer(module):
            return  # (one an optimizer holds: evaluated from its first forward, see _eval_of_new)
        written = _written_since(self, module)
        self._eval_begins(called=True, until_train=not (written or is_average(module)))
        if not self._eval_t0:
            return  # inside a step: part of it
        self._eval_copy = True
        if (written or is_average(module)) and module not in self._averages:
            # Hooked beside the roots, as an AveragedModel is (once they settled, its forwards
            # were not seen): an evaluation without model.train() ends at its last forward, or
            # at the training loader's next batch (see _eval_meets_training).
            self._averages.add(module)
            if not self.watching_all and not self._depth:
                self._watch_roots()

    @_guarded
    def _eval_meets_training(self, p: Any) -> None:
        """A batch asked, in an evaluation begun at an EMA's ``model.eval()`` (see
        :meth:`_eval_of_copy`), of the loader the training batches come from (its pass, or a
        new one): the next step's, so the evaluation ended before it. An EMA is seldom put back
        in training mode (timm's validate() puts it in eval mode, nothing after), and its
        evaluation ended at its last forward: what came after (its metrics, a sample grid
        saved) was the next step's data. One not known for an average was a teacher's forward
        of the step (see _eval_until_train), and is dropped."""
        train = self._train_pass
        if train is None or (p is not train and (train.loader() is None or p.loader() is not train.loader())):
            return
        if self._eval_until_train:
            self._eval_ends()
            return
        self._eval_end = self.clock.stamp()
        self._eval_t1 = time.perf_counter()
        self._eval_ends(by_script=True)

    def _eval_of_new(self, module: Any, t0: float) -> None:
        """A forward in eval mode of a model put in eval mode before it was seen training: an
        evaluation from ``model.eval()`` if an optimizer holds its weights (a baseline
        validation before the first step, with grad or without), as it would be between two
        steps; with grad, a backward may still make it training (:meth:`_eval_trained`). A
        model no optimizer holds (a distillation teacher) is part of the step, as before."""
        if self.trained.trains(module) or not self.trained.trained_by_an_optimizer(module):
            self._eval_new = None
            return
        self._eval_begins(called=True)
        if self._eval_t0:
            self._eval_t0 = min(self._eval_t0, t0)
            if self._eval_asked is not None:
                self._eval_began = self._eval_asked[1]  # (its model.eval(), that t0)
        else:  # inside a step: part of it, and the question is not asked again
            self._eval_new = None

    def _evaluating_new(self, module: Any) -> bool:
        """Whether the evaluation going is of ``module``, a model not seen training yet."""
        new = self._eval_new
        return new is not None and self._eval_t0 != 0.0 and _holds(new[0](), module)

    def _eval_begins(self, called: bool = False, loader_pass: bool = False, until_train: bool = False) -> None:
        """A forward of a trained model put in eval mode (``model.eval()``) between two steps:
        an evaluation. It is not the next step's data loading: the phase says "eval" (the hub
        then gives the ranks longer before calling one stalled), and the step after it starts
        its clock when the evaluation's last forward ends. (A pass without grad of a model in
        training mode, a GAN's fakes, or of another model, a teacher's, is part of the step.)
        ``loader_pass``: a forward without grad of the trained model in training mode, on a
        batch of a loader pass begun between the steps: an evaluation provisionally, its phase
        unchanged until it stands (see :meth:`_eval_stands`). ``until_train``: at the script's
        ``model.eval()`` of a model no optimizer holds, not known for an average: provisionally,
        until its ``model.train()`` (see :meth:`_eval_of_copy`)."""
        if self._eval_t0:
            if self._eval_pending is not None:  # model.eval(), or a model in eval mode, in one begun provisionally
                self._eval_pending = None
                self._eval_called = called
                self._phase = "eval"
                self.reporter.set_phase("eval")
            elif self._eval_until_train and not loader_pass:  # the trained model, or an average, evaluated in it
                self._eval_until_train = False
                self._phase = "eval"
                self.reporter.set_phase("eval")
            return
        step = self._open
        cut = self._cut
        in_step = False
        if step is not None and len(step.marks) > (cut.marks if cut is not None else 1):
            if loader_pass or cut is not None or step.marks[-1][0] != "backward" or self._in_backward:
                return  # inside a step (between its forward and backward, say): part of its phase
            # After a backward whose optimizer step has not come: the micro-batch an epoch had
            # over its accumulation (65 micro-batches of 2), before a validation at the epoch's
            # end. The step goes on after it (the leftover gradients are the next step's), and
            # the evaluation is left out of it (an ``eval`` span in its marks); it was the step's
            # backward, 9.6 s of it, and the ranks read as stalled in backward meanwhile.
            in_step = True
        now = time.perf_counter()
        p = self._batch_pass
        if not self._between_steps(p):
            if loader_pass:
                return
            p = None
        self._eval_t0 = self._eval_t1 = now
        asked = self._eval_asked
        if not called and asked is not None and asked[0] == self._posts:
            self._eval_began = asked[1]  # (an EMA's model.eval() since the last optimizer step)
        else:
            self._eval_began = self.clock.stamp()
        if p is not None and not called:
            self._eval_t0 = min(now, p.t0)  # its loader's start and first batch are the evaluation's
            self._eval_began = None  # (no stamp there: a CUDA event cannot be recorded in the past)
        self._eval_end = None
        self._eval_called = called
        self._eval_grad = None
        self._eval_grad_pass = False
        self._eval_in_step = in_step
        if in_step and self._eval_began is None:  # (begun at its loader's start: there, on a CPU clock)
            self._eval_began = self._eval_t0 if not self.clock.cuda else self.clock.stamp()
        if loader_pass:
            self._eval_pending = (p, p.batches, p.ended)
            return
        self._eval_pending = None
        self._eval_until_train = until_train
        if until_train:
            return  # (its phase unchanged until it stands)
        self._phase = "eval"
        self.reporter.set_phase("eval")

    def _between_steps(self, p: Any) -> bool:
        """Whether the loader pass ``p`` began after an optimizer step and none has stepped
        since."""
        return p is not None and self._posts > 0 and p.posts == self._posts

    def _eval_stands(self) -> bool:
        """Whether an evaluation begun provisionally (see the module's docstring) is one: its
        loader's pass gave another batch since its first forward, or ran out since. From then
        its phase is ``eval``."""
        p, batches, ended = self._eval_pending
        if p.batches > batches or (p.ended and not ended):
            self._eval_pending = None
            self._phase = "eval"
            self.reporter.set_phase("eval")
            return True
        return False

    def _eval_drop(self) -> None:
        """Training resumes before an evaluation begun provisionally stood: it was none (a
        GAN's fakes, the model's own targets on an epoch's first batch), as if never begun."""
        self._eval_t0 = 0.0
        self._eval_end = None
        self._eval_called = False
        self._eval_grad = None
        self._eval_grad_pass = False
        self._eval_pending = None
        self._eval_saves = []
        if self._eval_until_train:
            self._eval_new = None  # (a teacher's: the question is not asked again until its next model.eval())
            self._eval_until_train = False
            self._eval_copy = False

    def _eval_clear(self) -> None:
        """No evaluation going, none pending."""
        self._eval_t0 = 0.0
        self._eval_pending = None
        self._eval_new = None
        self._eval_end = None
        self._eval_called = False
        self._eval_grad = None
        self._eval_grad_pass = False
        self._eval_in_step = False
        self._eval_saves = []
        self._eval_copy = False
        self._eval_until_train = False

    def _eval_ends(self, by_script: bool = False, cut_short: bool = False) -> None:
        """Training resumes: the evaluation's time is left out of the open step, what came
        before it kept. (The step starts at its end before the first optimizer step, what came
        before it the script's setting up, see Epochs._first_batch_asked; and after one begun
        at its loader's start, not placed on the step's clock.) It is an event, unless the
        script says it with an ``eval`` event of its own (``pt.event``). Ended ``by_script``
        (its ``model.train()``), the script's own may come just after: the event is held until
        the next step, and the script's replaces it (it was counted twice). ``cut_short``: the
        rank ended in it (stopped, or failed): its event says so, with the time it ran (it read
        as an evaluation done)."""
        if (self._eval_pending is not None and not self._eval_stands()) or (self._eval_until_train and not by_script):
            self._eval_drop()
            return
        # (cut short: it ran until the rank ended, not until its last forward: a rank hung in its
        # evaluation for 33 s read "evaluations 1, 0.034 s in all", review 276)
        t1 = time.perf_counter() if cut_short else self._eval_t1
        # The saves that began before its end were in it (model.eval(), a save, forwards or
        # model.train()): not its time. Those after its last forward, with no model.train()
        # after them, came after it (see Saves._save_ends): between steps, left out of the next
        # step with it, as a save alone is (its clock starts at the last one's end).
        saves = self._eval_saves
        took = t1 - self._eval_t0 - sum(s for t, s, _ in saves if t < t1)
        began, end = self._eval_began, self._eval_end
        in_step = self._eval_in_step
        after = [e for t, _, e in saves if t >= t1]
        if after and end is not None and not in_step:
            end = after[-1]
        self._eval_clear()
        self.evals += 1
        if self._batch_pass is not None and self._batch_pass.evaluated:
            # The last batch was the evaluation's (its validation loader): the next backward's
            # is another loader's, or one the script made itself (nanoGPT's get_batch()), whose
            # each validation after the first read as an epoch ended (the same loader again).
            self._batch_pass = None
        if in_step and self._open is not None and began is not None:
            # In the open step (see _eval_begins): its span left out there, the step's data
            # phase again from its end (the next micro-batch's loading).
            self._open.marks += [("eval", began), ("data", end if end is not None else self.clock.stamp())]
        elif end is not None and self._cut is not None and self._open is not None and len(self._open.marks) == self._cut.marks:
            # The step before has not ended yet (its round may go on).
            if began is not None:
                self._left_out_after_cut(began, end)
            else:
                self._resume_at = end
        elif end is not None and self._open is not None and len(self._open.marks) == 1:
            if began is not None and self._posts:
                _left_out(self._open, began, end, self.clock)
            else:
                self._open.marks[0] = ("data", end)
        self._phase = "data"
        self.reporter.set_phase("data")
        if api.user_sent("eval"):
            return
        step = self.steps_done()
        if by_script:
            api.auto_event(self.reporter.event, "eval", step=step, duration_s=took)
        else:  # (at training's next forward or optimizer step, or at exit: the script's came before)
            self.reporter.event("eval", message=EVAL_CUT_SHORT if cut_short else "", step=step, duration_s=took)

    @_guarded
    def _eval_grad_samples(self, args: Any, kwargs: Any) -> None:
        self._eval_grad_pass = False
        if self._eval_grad is not None:
            self._eval_grad[1] += batch_size(args, kwargs)

    def _eval_trained(self) -> None:
        """A backward after forwards with grad of the model put in eval mode: it trains so
        (BatchNorm and dropout frozen), and those forwards began the step's forward phase."""
        stamp, samples, ref = self._eval_grad
        module = ref()
        self._eval_clear()
        self.forwards += 1
        if module is not None and id(module) not in self.trained.root_ids:
            self._add_root(module)  # put in eval mode before its first step (fine-tuning)
        if module is not None:
            self.trained.called(module, self.step)
        if self._open is None:
            self._open = _OpenStep(marks=[("data", stamp)])
        self._mark("forward", stamp)
        self._open.samples += samples
        if self.strategy in FORWARD_ARRIVES:
            self._arrive(stamp)
        if id(module) in self.trained.ddp_ids and module.require_backward_grad_sync:
            self._ddp_sync = True


def _written_since(inst: Any, module: Any) -> bool:
    """Whether ``module``'s parameters were written in place (their ``_version`` counters
    moved) since the script last put it in eval mode, an optimizer step ago or more, and not
    in the step before: a momentum teacher (BYOL's, MoCo's, an EMA of the student) put in eval
    mode at each step is written in place between steps too, and its forward is the step's.
    Notes them for the next time."""
    seen = inst._eval_written
    if seen is None:
        seen = inst._eval_written = weakref.WeakKeyDictionary()
    try:
        writes = sum(p._version for p in module.parameters())
    except Exception:  # (a tensor without a version counter: an inference tensor's)
        return False
    last = seen.get(module)
    done = inst.steps_done()
    seen[module] = (inst._posts, writes, done)
    return last is not None and last[0] != inst._posts and last[1] != writes and last[2] < done - 1


def _holds(outer: Any, module: Any) -> bool:
    """Whether ``module`` is the model ``outer`` or one of its modules: a LightningModule put
    in eval mode, whose validation_step calls its network (``self.net(x)``), never its own
    forward; Lightning's sanity check before training read as no evaluation, its time in no
    step. (Asked only of a model put in eval mode before it was seen training.)"""
    return outer is module or (outer is not None and any(m is module for m in outer.modules()))
