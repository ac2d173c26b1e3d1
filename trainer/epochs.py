"""The epoch a step belongs to (part of :class:`pardash.trainer.instrument.Instrument`).

A ``DistributedSampler``'s ``set_epoch`` says it. A script whose sampler has no set_epoch (a
plain DataLoader, shuffled or not; Hugging Face's Trainer and accelerate, whose loaders shard
batches themselves) showed epoch 0 throughout. Its epochs are then its passes over the loader
it trains from: a backward on a batch of a new pass over the loader the previous training
batches came from is the next epoch's first. Only batches trained on count: a pass over the
training loader to measure its accuracy (in an evaluation, or under no_grad), or
``next(iter(loader))`` for a sample to log, is no epoch; nor is a pass of one batch
(``next(iter(loader))`` each step). A loader remade for each epoch is not followed (nothing
ties the new one to the old)."""

from __future__ import annotations

import weakref
from typing import Any, Callable

from pardash.telemetry import api
from pardash.trainer.hooking import _get_ident, _guarded
from pardash.trainer.marks import _Pass


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
            it = original(loader)
            if not self.dead and _get_ident() == self._tid and not self._sampler_epochs:
                self._loader_pass(loader, it)
            return it

        return __iter__

    @_guarded
    def _loader_pass(self, loader: Any, it: Any) -> None:
        try:
            it._pardash_pass = _Pass(weakref.ref(loader), self.step)
        except (AttributeError, TypeError):  # an iterator of a class with __slots__: not followed
            pass

    def _trains_from(self, now: _Pass) -> None:
        """A backward on a batch of the pass ``now``, not the previous training batch's."""
        last = self._train_pass
        self._train_pass = now
        if last is not None and not self._sampler_epochs and last.loader() is now.loader() and last.batches > 1 and self.step > last.step:
            self._new_epoch(self.epoch + 1)

    def _wrap_loader_next(self, original: Callable[..., Any]) -> Callable[..., Any]:
        # Every batch of the training thread counts here, an evaluation's too (a loop fetches
        # its next batch before it calls model.train(): Hugging Face's Trainer after its
        # evaluation); only a backward makes its pass the training one (_trains_from).
        def __next__(it: Any) -> Any:
            batch = original(it)
            p = getattr(it, "_pardash_pass", None)
            if p is not None and _get_ident() == self._tid:
                p.batches += 1
                self._batch_pass = p
            return batch

        return __next__

    @_guarded
    def _new_epoch(self, epoch: Any) -> None:
        if isinstance(epoch, int) and epoch != self.epoch:
            if self.step and epoch > self.epoch and not api.user_sent("epoch_end"):
                self.reporter.event("epoch_end", step=self.step, message=f"epoch {self.epoch} ended")
            self.epoch = epoch
