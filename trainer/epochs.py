"""The epoch a step belongs to (part of :class:`pardash.trainer.instrument.Instrument`).

A ``DistributedSampler``'s ``set_epoch`` says it. A script whose sampler has no set_epoch (a
plain DataLoader, shuffled or not; Hugging Face's Trainer and accelerate, whose loaders shard
batches themselves) showed epoch 0 throughout. Its epochs are then its passes over the loader
it trains from: a backward on a batch of a new pass over the loader the previous training
batches came from is the next epoch's first; so is one on a batch of a loader made anew over
the same dataset object (``DataLoader(ds, shuffle=True)`` inside the epoch loop), once the
pass before was gone through to its end (its iterator ran out, or gave as many batches as its
sampler has). Only batches trained on count: a pass over the training loader to measure its
accuracy (in an evaluation, or under no_grad), or ``next(iter(loader))`` for a sample to log,
is no epoch; nor is a pass of one batch (``next(iter(loader))`` each step). A loader over
another dataset (a validation set, a second task's loader taking turns with the first) starts
none, nor does a second loader over the same dataset begun before the first ran out (two
taking turns). A loader made anew over a dataset made anew (a ``Subset`` for each epoch) is
not followed: nothing ties the new one to the old.

The passes also tell an evaluation of a model left in training mode (see
:mod:`~pardash.trainer.evaluations`): a pass begun after the last optimizer step whose
batches the trained model runs on without grad, going on to its next batch (or to its end)
before any training, is an evaluation's loader; and a batch asked of the training loader
ends an EMA's evaluation that no ``ema.train()`` ended (see
:meth:`~pardash.trainer.evaluations.Evaluations._eval_meets_training`)."""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from torch.utils.data.dataloader import _BaseDataLoaderIter

from pardash.telemetry import api
from pardash.telemetry.schema import LOADER_PHASE
from pardash.trainer.hooking import _get_ident, _guarded
from pardash.trainer.marks import _OpenStep


BETWEEN_PASSES = ("data", "backward", "optimizer")
"""The instrument's phases a batch for the step is asked for in: its data phase, and after a
backward or an optimizer step before the next pass's forward marks the data phase that began
there (Rounds._micro_batch_begins)."""


@dataclass(slots=True)
class _LoaderPass:
    """One pass over a DataLoader (an ``iter(loader)``): whose, over which dataset, from when,
    how many batches it gave so far and whether it ran out."""

    loader: Any
    """weakref to the DataLoader."""
    data: Any
    """weakref to its dataset (None: one that cannot be weakly held, a list: not followed)."""
    step: int
    posts: int
    """Optimizer steps ended before it began (the same count at a batch of it: no optimizer
    has stepped since it began)."""
    t0: float
    """perf_counter as it began (before its first batch's loading)."""
    size: int | None
    """Its batches, as its sampler counts them (None: unknown, an iterable dataset's)."""
    batches: int = 0
    turns: int = 0
    """Times it became the training pass (more than once: trained on by turns with another)."""
    ended: bool = False
    """Its iterator ran out (StopIteration)."""
    evaluated: bool = False
    """Its batches were an evaluation's: one fetched in it was run on in it, or it ran out in
    it (see Evaluations._eval_ends)."""
    last_in_eval: bool = False
    """Its latest batch was fetched while an evaluation went on."""

    def dataset(self) -> Any:
        """Its dataset, if still alive and weakly held."""
        return self.data() if self.data is not None else None

    def gone_through(self) -> bool:
        """Whether the pass reached its end (ran out, or gave every batch its sampler has)."""
        return self.ended or (self.size is not None and self.batches >= self.size)


class Epochs:
    """Epochs from ``set_epoch`` or from passes over the training loader. Its state is
    :class:`Instrument`'s (set in its ``__init__``)."""

    def _wrap_set_epoch(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def set_epoch(sampler: Any, epoch: int) -> Any:
            self._sampler_epochs = True
            said = self._epoch_sampler() if self._epoch_sampler is not None else None
            if said is None or said is sampler or not isinstance(epoch, int) or epoch >= self.epoch:
                self._epoch_sampler = weakref.ref(sampler)
                self._new_epoch(epoch)
            # (else another loader's sampler going back: an evaluation's set_epoch(0) each time
            # showed epoch 0 from the first evaluation on)
            return original(sampler, epoch)

        return set_epoch

    def _wrap_loader_iter(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def __iter__(loader: Any) -> Any:
            mine = _get_ident() == self._tid
            # (a new pass's iterator starts its workers: a loader's time too, each epoch's)
            t0 = self._loader_enters() if mine and self._batch_is_data() else None
            try:
                it = original(loader)
            finally:
                if t0 is not None:
                    self._loader_leaves(t0)
            # (with a sampler's epochs too: an evaluation's loader is told by its pass)
            if not self.dead and mine:
                self._loader_pass(loader, it)
            return it

        return __iter__

    @_guarded
    def _loader_pass(self, loader: Any, it: Any) -> None:
        try:
            data = weakref.ref(loader.dataset)
        except (AttributeError, TypeError):  # a list, a tuple: not weakly held, not followed
            data = None
        size = None
        if isinstance(it, _BaseDataLoaderIter):
            try:
                size = len(it)  # its sampler's (an iterable dataset's has none: TypeError)
            except Exception:
                size = None
        try:
            it._pardash_pass = _LoaderPass(weakref.ref(loader), data, self.step, self._posts, time.perf_counter(), size)
        except (AttributeError, TypeError):  # an iterator of a class with __slots__: not followed
            pass

    def _trains_from(self, now: _LoaderPass) -> None:
        """A backward on a batch of the pass ``now``, not the previous training batch's."""
        last = self._train_pass
        self._train_pass = now
        now.turns += 1
        if last is None or self._sampler_epochs or last.batches <= 1 or self.step <= last.step:
            return
        loader = last.loader()
        if loader is not None and loader is now.loader():
            self._new_epoch(self.epoch + 1)  # the same loader again (an epoch cut short counts)
        elif last.turns == 1 and last.gone_through() and last.dataset() is not None and last.dataset() is now.dataset():
            self._new_epoch(self.epoch + 1)  # a loader made anew over the same dataset

    def _wrap_loader_next(self, original: Callable[..., Any]) -> Callable[..., Any]:
        # Every batch of the training thread counts here, an evaluation's too (a loop fetches
        # its next batch before it calls model.train(): Hugging Face's Trainer after its
        # evaluation); only a backward makes its pass the training one (_trains_from).
        def __next__(it: Any) -> Any:
            p = getattr(it, "_pardash_pass", None)
            mine = _get_ident() == self._tid
            if self.step == self._step_base and p is not None and mine:
                self._first_batch_asked(p)
            if self._eval_copy and p is not None and self._eval_t0 and mine:
                self._eval_meets_training(p)  # (an EMA's evaluation with no ema.train() to end it)
            t0 = self._loader_enters() if mine and self._batch_is_data() else None
            try:
                batch = original(it)
            except StopIteration:
                if t0 is not None:
                    self._loader_leaves(t0)
                    t0 = None
                if p is not None and mine:
                    self._pass_ends(p)
                raise
            finally:
                if t0 is not None:
                    self._loader_leaves(t0)
            if p is not None and mine:
                p.batches += 1
                p.last_in_eval = bool(self._eval_t0)
                self._batch_pass = p
            return batch

        return __next__

    def _batch_is_data(self) -> bool:
        """Whether a batch asked for now is the step's data (see LOADER_PHASE): between steps or
        micro-batches, not in an evaluation, a save, a backward or an optimizer step."""
        return (not self.dead and self._phase in BETWEEN_PASSES and not self._eval_t0 and not self._in_backward
                and not self._in_optimizer and self._saving is None)  # fmt: skip

    @_guarded
    def _loader_enters(self) -> float:
        """A DataLoader is asked for a batch (or a pass) in the step's data: the heartbeat says
        so while it is in there. (perf_counter now)"""
        self.reporter.set_phase(LOADER_PHASE)
        return time.perf_counter()

    @_guarded
    def _loader_leaves(self, t0: float) -> None:
        """Back from the DataLoader, in the step's data phase (after a backward, the next
        micro-batch's, which its forward marks from there): its seconds are the step's
        ``loader_s``; those after a cut the next step's, unless the round goes on (as the
        waits in collectives: Arrivals._keep_wait)."""
        took = time.perf_counter() - t0
        self.reporter.set_phase("data")
        if self._cut is not None or self._orphan is not None:
            self._loader_next = (self._loader_next or 0.0) + took
        elif self._open is not None:
            self._open.loader_s = (self._open.loader_s or 0.0) + took
        # (no step open: one opens at the next forward, its data from there, none of this)

    @_guarded
    def _first_batch_asked(self, p: _LoaderPass) -> None:
        """A batch asked for before the first step began (no forward or optimizer step yet):
        the first step opens there, as its first batch's loading begins (its data time was 0:
        the load, spawned workers' start-up, a lazy dataset's first reads, showed nowhere,
        while each later epoch's first step showed its workers' start-up). Each batch asked
        for before the first forward moves it there: the last is the step's (one taken to look
        at, of this pass or another, then a second of setting up, read as the first step's data
        time); an evaluation's batches (a validation before training) do not: its end does."""
        step = self._open
        if self._posts or self._cut is not None or self._explicit or self._eval_t0 or (step is not None and len(step.marks) > 1):
            return
        if step is None:
            self._open = _OpenStep(marks=[("data", self.clock.stamp())])
        else:
            step.marks[0] = ("data", self.clock.stamp())
            step.loader_s = None  # (the batches before were asked for before the step began)
        if self._phase != "data":
            self._phase = "data"
            self.reporter.set_phase("data")

    @_guarded
    def _pass_ends(self, p: _LoaderPass) -> None:
        """A pass ran out; one begun in an evaluation ends it no earlier (its last batch's
        metrics are the evaluation's, not the next step's data)."""
        p.ended = True
        if self._eval_t0:
            p.evaluated = True
        if self._eval_pending is not None:
            self._eval_stands()  # (a validation loader of one batch)
        if self._eval_t0 and p.t0 >= self._eval_t0:
            self._eval_end = self.clock.stamp()
            self._eval_t1 = time.perf_counter()

    @_guarded
    def _new_epoch(self, epoch: Any) -> None:
        if isinstance(epoch, int) and epoch != self.epoch:
            if self.step > self._step_base and epoch > self.epoch and not api.user_sent("epoch_end"):
                self.reporter.event("epoch_end", step=self.step, message=f"epoch {self.epoch} ended")
            self.epoch = epoch
