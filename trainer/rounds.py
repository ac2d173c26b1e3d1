"""Step boundaries from the optimizer steps (part of :class:`pardash.trainer.instrument.Instrument`).

A step is one round of optimizer steps (see the instrument's module docstring): the
optimizer's pre- and post-hooks open and close its phase, a round ends when one of its
optimizers steps again, and its step ends at the post-hook of the round's last optimizer step
(the cut); what came after the cut is the next step's (:meth:`Rounds._publish_cut`). With one
optimizer, once seen to step twice, each step is published at its post-hook.

What the script logs without step blocks (``pt.log``) is taken from the API at each cut and
kept with it, and what it logs after the cut, until the next step begins (its first forward,
backward or optimizer step: :meth:`Rounds._next_step_begins`) or the script ends, joins it:
``pt.log`` after ``optimizer.step()`` is where most scripts log. So a step published at its
post-hook is sent only then (on CPU; a GPU's waits longer anyway), and a step published later
than its cut (a round's, known only when an optimizer of it steps again) carries the values
logged before its cut and right after it; those logged once the next step began are the next's.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from pardash.telemetry import api
from pardash.trainer.hooking import _get_ident, _is_compiling, _untraced
from pardash.trainer.marks import _Cut, _most_held, _OpenStep
from pardash.trainer.norms import group_lrs
from pardash.trainer.trained import lr_of


class Rounds:
    """Optimizer rounds and the steps they make. Its state is :class:`Instrument`'s (set in its ``__init__``)."""

    @_untraced
    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if _is_compiling() or (self._not_stepping and _get_ident() in self._not_stepping):
            return None
        if not self._stepped:  # (the first: what was counted as iterations by hand gives way)
            self._hand_stop()
        if self._logging_to is not None:
            self._next_step_begins()  # (an optimizer step with no pass before it)
        if self._skip_from is not False:
            self._skip_step()  # an iteration without an optimizer step before this one?
        for r in self._round:  # (a loop, not any(): no generator a step)
            if optimizer is r():
                self._round_ends(optimizer)  # an optimizer of the round steps again: a new round
                break
        if self._eval_t0:
            self._eval_ends()
        if self._open is None:
            self._open = _OpenStep(marks=[("data", self.clock.stamp())])
        if self._open.lr is None:
            self._open.lr = lr_of(optimizer)  # the step's first optimizer, as it steps
            self._open.lrs = group_lrs(optimizer)
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)  # (args[0]: the optimizer)
        if not self._in_optimizer and callable(closure):
            # optimizer.step(closure): the closure's first pass is the step's forward and
            # backward (PyTorch Lightning's automatic optimization), the optimizer's phase
            # begins when its backward returns (see _root_begin, _backward_returns)
            self._closure = (self.clock.stamp(), len(self._open.marks))
        else:
            if self._phase != "optimizer":
                self._mark("optimizer", self.clock.stamp())
            self._backward_end = None
        self._in_optimizer += 1
        self._closure_passes = 0
        return None

    @_untraced
    def _optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if _is_compiling() or (self._not_stepping and _get_ident() in self._not_stepping):
            return None
        now = self.clock.stamp()
        self._posts += 1
        self._stepped = True
        self._in_optimizer = max(0, self._in_optimizer - 1)
        if not self._in_optimizer and self._closure is not None:
            # a closure without a backward: the optimizer's from its step's start, or from its
            # forward's end (none is seen) when it had one
            began, marks = self._closure
            self._closure = None
            if self._open is not None and self._phase != "optimizer":
                self._mark("optimizer", began if len(self._open.marks) == marks else now)
            self._backward_end = None
        if self.trained.add_optimizer(optimizer, self.step):
            if not self.watching_all and self._handles:
                self._watch_all_modules()  # a new optimizer: maybe a new model to find
        if self._published_round and all(optimizer is not r() for r in self._round):
            # Another optimizer after a step published at its post-hook: the same iteration's
            # (a GAN's generator starting to step after the discriminator's warm-up) or the
            # first step of a model trained next. The next repeat tells: the first optimizer
            # again, and its work joins the next step; this one again, and it was a step.
            step = self._open
            if self._orphan is not None:  # (a third optimizer after the published step: its cut is forgotten, its values are not)
                self._logged_back(self._orphan[1].logged)
            cut = _Cut(now, len(step.marks), len(step.losses), step.micro, step.samples, len(step.waits), self._logged_to_cut(),
                       time.time(), time.monotonic())
            self._orphan = (weakref.ref(optimizer), cut)
            self._logging_to = cut.logged
            self._pending_mem = self._memory(slot=len(self._round))
            self._round.append(weakref.ref(optimizer))
            self._last_post = now
            return None
        self._round.append(weakref.ref(optimizer))
        self._last_post = now
        if self._arrive_next is not None:  # the round went on after the cut: still this step's
            if self._open is not None and self._open.arrive is None:
                self._open.arrive = self._arrive_next
            self._arrive_next = None
        if self._sync_next is not None:  # (its waits in collectives after the cut too)
            if self._open is not None:
                self._open.syncs += self._sync_next
            self._sync_next = None
        if self._loader_next is not None:  # (and its time in a DataLoader)
            if self._open is not None:
                self._open.loader_s = (self._open.loader_s or 0.0) + self._loader_next
            self._loader_next = None
        if self._explicit:
            self._pending_mem = _most_held(self._pending_mem, self._memory(slot=len(self._round) - 1))
            return None
        if self._in_optimizer:
            return None  # an optimizer stepped inside another's step (ZeRO's inner one)
        if self._early and self.trained.optimizer_count() == 1 and not self.trained.waiting_optimizer_holds(self.step - 1):
            # One optimizer, seen to step again: each of its steps is a step, published now;
            # unless an optimizer made but not stepped yet holds weights of a model called in
            # the step (a GAN's generator, for the fakes), which may step after more passes:
            # then the round may go on, as with several optimizers.
            # Held for what the script logs after it (pt.log after the optimizer step), where it
            # logs (the first step is a cut, published as the second's round ends): one that never does
            # has its step out now, so a rank hung or killed before its next step has it in the
            # log and the dashboard as it was.
            self._publish(now, self._memory(slot=len(self._round) - 1), held=api._api.log_used)
            self._published_round = True
            self._cut = self._pending_mem = None
            self._own_work_done()
        else:  # the round may go on (another optimizer may step after more passes)
            step = self._open
            logged = self._logged_to_cut()
            if self._cut is not None:
                # A later optimizer of the round (a GAN's generator after its discriminator):
                # its passes are the same iteration's, on the same batch: its samples once, and
                # what was logged before either step is the step's.
                step.samples = self._cut.samples
                logged = self._cut.logged.merge(logged)
            self._cut = _Cut(now, len(step.marks), len(step.losses), step.micro, step.samples, len(step.waits), logged,
                             time.time(), time.monotonic())
            self._logging_to = logged
            self.reporter.last_step = self.steps_done()  # (the heartbeat's step: see Instrument._publish)
            # What comes next is data, the step's if the round goes on, the next's if not (a
            # rank hung in its loader after a GAN's round read "stalled in optimizer"). Said to
            # the heartbeat only: the open step's own phase, which its next mark reads, stays.
            self.reporter.set_phase("data")
            self._resume_at = None
            self._pending_mem = _most_held(self._pending_mem, self._memory(force=not self._rounds, slot=len(self._round) - 1))
            self._own_work_done()
        return None

    def _own_work_done(self) -> None:
        """The post-hook's own work (the memory probe, the step's publishing) is done: what comes
        next is the script's again, from now. It was taken from the optimizer step's end, and
        counted as the next step's data loading: 0.3 ms a step of a small model, 1.8 of one
        with 2,000 parameter tensors, and any preemption of the hook on a busy host (15 ms
        read as a step's data time, a clean run's rank named a data straggler). On a GPU the
        stamps are events on the stream, where the hook's host time does not show."""
        if self.clock.cuda:
            return
        now = self.clock.stamp()
        step = self._open
        if step is not None and len(step.marks) == 1 and step.marks[0][0] == "data" and not step.waits:
            step.marks[0] = ("data", now)  # (the step after the one just published)
        if self._last_post is not None:
            self._last_post = now

    def _micro_batch_begins(self) -> Any:
        """A forward or backward starts (after the evaluation before it, if any). A forward
        after a backward (gradient accumulation) loaded its micro-batch since that backward
        returned: that is data time, not backward's. It does not end an optimizer round: a
        GAN's generator steps after the discriminator's step and another forward (what came
        between the two optimizer steps is data, not optimizer time)."""
        if self._eval_t0:
            self._eval_ends()
        if self._open is None:
            now = self.clock.stamp()
            self._open = _OpenStep(marks=[("data", now)])
            return now
        if self._phase == "backward" and self._backward_end is not None:
            self._mark("data", self._backward_end)
        elif self._phase == "optimizer" and self._last_post is not None:
            self._mark("data", self._last_post)
        self._backward_end = None
        return self.clock.stamp()

    def _round_ends(self, by: Any = None) -> None:
        """An optimizer of the round steps again (``by``; None: the script ends): the round is
        over. Its step, if not published yet, ends at its last post-hook (the cut); what
        followed the cut is the next step's."""
        if not self._explicit:
            mem = self._pending_mem if self._pending_mem is not None else self.probe.last
            orphan, self._orphan = self._orphan, None
            if orphan is not None and (by is orphan[0]() or by is None):
                self._publish_cut(orphan[1], mem)  # a model trained next: its first step
                self._round = [orphan[0]]
            elif orphan is not None:
                self._logged_back(orphan[1].logged)  # its passes join the next step: its values too
            if self._cut is not None:
                self._publish_cut(self._cut, mem)
            self._rounds += 1
            self._early = self.trained.optimizers_alive() == 1  # (one alive: a model trained before is gone)
            self._last_round = self._round  # (a new list follows: this one is not changed again)
        self._round = []
        self._published_round = False
        self._cut = self._pending_mem = self._arrive_next = self._sync_next = self._loader_next = None

    def _next_step_begins(self) -> None:
        """The first thing of the step after a cut (a forward, a backward, an optimizer step,
        a ``pt.step()`` block, a save), or the script's end: what it logged since the cut
        (``pt.log`` after the optimizer step, the most common place) is the cut step's, which is
        published late enough to carry it (on CPU, a step published at its post-hook waits for
        this where the script logs). A phase timed since is the next step's: its time is, from
        the cut on; and so is a value of a name the cut step has (logged before its forward)."""
        to, self._logging_to = self._logging_to, None
        logged = api.take_logged()
        # A phase timed since (``with pt.phase("augment")``) is the next step's time, as its data
        # is; and so is a value the cut step has already: the script logs it before its forward,
        # at the top of its loop (``pt.log(lr=...)``), where it took the step before's place, the
        # first of them lost.
        nexts = api.Logged()
        nexts.phases, logged.phases = logged.phases, {}
        for mine, theirs, again in ((logged.fields, to.fields, nexts.fields), (logged.custom, to.custom, nexts.custom)):
            for name in [n for n in mine if n in theirs]:
                again[name] = mine.pop(name)
        if nexts:
            self._logged_after = self._logged_after.merge(nexts) if self._logged_after is not None else nexts
        if logged:
            to.merge(logged)
        if not self.clock.cuda and self._late is not None:
            late, self._late = self._late, None
            self._emit(late)

    def _logged_to_cut(self) -> api.Logged:
        """What the script logged since the last cut: the values of the step a cut made now ends."""
        logged = api.take_logged()
        before, self._logged_after = self._logged_after, None
        return before.merge(logged) if before is not None else logged

    def _logged_back(self, logged: api.Logged) -> None:
        """A cut that ended no step (its iteration went on): what it took is the open step's
        again, logged before what was taken since."""
        after = self._logged_after
        self._logged_after = logged.merge(after) if after is not None else logged

    def _publish_cut(self, cut: _Cut, mem: Any) -> None:
        step = self._open
        if step is None:
            self._logged_back(cut.logged)
            return
        # What was logged since the next step began (taken into the cut's values until then,
        # see _next_step_begins) is the next step's: taken now, so that the events the API
        # held (an evaluation's) still go out before this step, as at any publishing.
        after = api.take_logged()
        if after:
            self._logged_after = self._logged_after.merge(after) if self._logged_after is not None else after
        start = self._resume_at if self._resume_at is not None else cut.end
        rest = _OpenStep(
            marks=[("data", start), *step.marks[cut.marks :]],
            losses=step.losses[cut.losses :],
            micro=step.micro - cut.micro,
            passes=step.passes[cut.micro :],
            samples=step.samples - cut.samples,
            arrive=self._arrive_next,
            syncs=self._sync_next if self._sync_next is not None else [],
            waits=step.waits[cut.waits :],
            loader_s=self._loader_next,
        )
        if step.grad_norms:  # (a clipping after the cut: the next step's)
            k = cut.marks
            rest.grad_norms = [(i - k + 1, t) for i, t in step.grad_norms if i >= k] or None
            step.grad_norms = [(i, t) for i, t in step.grad_norms if i < k] or None
        del step.marks[cut.marks :]
        del step.losses[cut.losses :]
        del step.waits[cut.waits :]
        del step.passes[cut.micro :]
        step.micro, step.samples = cut.micro, cut.samples
        self._arrive_next = self._sync_next = self._loader_next = None
        self._resume_at = None
        self._publish(cut.end, mem, cut.logged, ended=(cut.t, cut.mono))
        self._open = rest
        self._phase = rest.marks[-1][0]
        self.reporter.set_phase(self._phase)
