"""The steps a training framework plans to take (part of :class:`pardash.trainer.instrument.Instrument`).

A script that trains through PyTorch Lightning's ``Trainer`` or Hugging Face's ``Trainer`` never
says its steps to pardash, but its framework knows them once training begins: every viewer read
"step 1037" where the bundled trainer's read "step 1,037/3,000" and the time left. Once the
framework says them, the rank's hello is sent again with ``config["total_steps"]`` (see
:class:`pardash.telemetry.schema.Hello`), which the hub, the log and every viewer take as the
run's planned steps, as they take the bundled trainer's (``summary.total_steps``).

What is read, when training begins (on every rank):

- Lightning (``lightning.pytorch`` or ``pytorch_lightning``): a callback of pardash's, put first
  in each ``Trainer``'s as it is made (a new list: the script's own is left as it was), reads at
  ``on_train_start`` (data set up, a checkpoint's ``global_step`` restored) the optimizer steps
  the fit will end at: ``trainer.estimated_stepping_batches`` (``max_steps``, or what
  ``max_epochs`` come to with gradient accumulation, whichever is first); ``max_steps`` alone
  under manual optimization (its estimate counts batches, not steps) or before the data is set
  up (the estimate would load it). Lightning's ``global_step`` counts each optimizer's steps
  and pardash a round of them: with several optimizers no total is said.
- Hugging Face (``transformers``): ``TrainerState.max_steps`` as ``CallbackHandler.on_train_begin``
  is called (``max_steps``, or what ``num_train_epochs`` come to; its ``global_step``, as
  pardash's, counts optimizer steps, and a resume's goes on from the checkpoint's).

Both are the step number the run ends at, a resume's steps included: the instrument's count goes
on from a resumed checkpoint's (see :mod:`pardash.trainer.loads`), and from the framework's own
global step as its training begins where that says otherwise (a checkpoint whose count the
instrument could not read). No total where the framework has none to say (Lightning's
``max_steps=-1`` with ``max_epochs=-1``, an iterable dataset with no length: -1 or inf), where a
version lacks what is read, or where reading it fails: the run is shown as it was without this. Accelerate plans no steps of its own. Nothing is imported: each
framework is watched once the script imports it (:func:`pardash.trainer.imported.once_imported`).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

from pardash.trainer.hooking import _guarded
from pardash.trainer.imported import once_imported

LIGHTNING_TRAINERS = ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer")
"""The modules of Lightning's ``Trainer`` (and the ``Callback`` it takes), under either name."""
HF_CALLBACKS = "transformers.trainer_callback"
"""The module of Hugging Face's ``CallbackHandler``."""


def planned(value: Any) -> int | None:
    """``value`` as the steps a run plans: a whole number above 0, else None (Lightning's -1 and
    inf: no end said)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            return None
        value = int(value)
    return value if isinstance(value, int) and value > 0 else None


def lightning_steps(trainer: Any) -> int | None:
    """The optimizer steps a Lightning ``trainer``'s fit ends at, as its training begins (see the
    module's docstring); None where it does not say."""
    if len(getattr(trainer, "optimizers", None) or ()) > 1:
        return None  # (its global_step counts each optimizer's steps: no total pardash counts to)
    module = getattr(trainer, "lightning_module", None)
    manual = module is not None and getattr(module, "automatic_optimization", True) is False
    if manual or getattr(trainer, "train_dataloader", None) is None:
        return planned(getattr(trainer, "max_steps", None))
    try:
        return planned(trainer.estimated_stepping_batches)
    except Exception:  # (a GradientAccumulationScheduler's accumulation that changes by epoch)
        return planned(getattr(trainer, "max_steps", None))


def lightning_done(trainer: Any) -> int | None:
    """A Lightning ``trainer``'s steps done as its fit begins (its ``global_step``: a resume's),
    where they count as pardash's do: None with several optimizers (each one's step counts)."""
    if len(getattr(trainer, "optimizers", None) or ()) > 1:
        return None
    return getattr(trainer, "global_step", None)


def hf_steps(state: Any) -> int | None:
    """The optimizer steps a Hugging Face ``TrainerState`` says its training ends at."""
    return planned(getattr(state, "max_steps", None))


class Frameworks:
    """The instrument's part that reads a framework's planned steps (see the module's docstring)."""

    _framework_finders: list[Any]
    _planned_steps: int | None

    def _watch_frameworks(self) -> None:
        watched: list[tuple[str, Callable[[Any], None]]] = [(name, self._lightning_imported) for name in LIGHTNING_TRAINERS]
        watched.append((HF_CALLBACKS, self._hf_imported))
        for name, then in watched:
            finder = once_imported(name, then)
            if finder is not None:
                self._framework_finders.append(finder)

    def _unwatch_frameworks(self) -> None:
        for finder in getattr(self, "_framework_finders", ()):
            finder.remove()
        self._framework_finders = []

    @_guarded
    def _lightning_imported(self, module: Any) -> None:
        """Lightning's trainer module, imported: each ``Trainer`` made from now on has pardash's
        callback, which says the fit's steps as its training starts."""
        base, trainer = getattr(module, "Callback", None), getattr(module, "Trainer", None)
        if not isinstance(base, type) or not isinstance(trainer, type):
            return
        says = self._framework_says

        class PardashPlannedSteps(base):  # type: ignore[misc, valid-type]
            """pardash's: says the steps this fit will take to the run's viewers (no state)."""

            def on_train_start(self, trainer: Any, pl_module: Any) -> None:
                says(lightning_steps, trainer, lightning_done(trainer))

            def __reduce__(self) -> Any:
                return (base, ())  # a copy or a pickle (a spawned process's trainer) is a plain Callback

        self._patch(trainer, "__init__", functools.partial(_with_callback, PardashPlannedSteps))

    @_guarded
    def _hf_imported(self, module: Any) -> None:
        handler = getattr(module, "CallbackHandler", None)
        if isinstance(handler, type) and callable(getattr(handler, "on_train_begin", None)):
            self._patch(handler, "on_train_begin", self._wrap_train_begin)

    def _wrap_train_begin(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def on_train_begin(handler: Any, args: Any, state: Any, *rest: Any, **kwargs: Any) -> Any:
            control = original(handler, args, state, *rest, **kwargs)
            self._framework_says(hf_steps, state, getattr(state, "global_step", None))
            return control

        return on_train_begin

    @_guarded
    def _framework_says(self, steps_of: Callable[[Any], int | None], source: Any, done: Any) -> None:
        """As the framework's training begins: its steps done so far (``done``, its global step)
        and the steps it plans (``steps_of(source)``)."""
        self._goes_on_from(done)
        try:
            total = steps_of(source)
        except Exception:  # (another version, without what is read: no total, as without pardash)
            total = None
        self.plan_steps(total)

    def _goes_on_from(self, done: Any) -> None:
        """The framework's own count of the steps done as its training begins (a resume's: its
        checkpoint's global step): where this process's steps go on from, while none was taken
        here, so that pardash's step numbers are the framework's, which its planned steps count
        to. The optimizer's state a Hugging Face resume loads holds no count under SGD without
        momentum (its global step is in trainer_state.json, which no ``torch.load`` reads): the
        steps counted from 1, and a resume from step 20 to 70 ended at "step 50/70". A ``resume``
        event says the step they go on from."""
        if isinstance(done, bool) or not isinstance(done, int) or done < 0 or self._posts or self._explicit or done == self.step:
            return
        self.step = self._step_base = done
        self.reporter.last_step = done
        # (after the load's "no step count ..., steps count from 1", where it said that: the
        # viewers count a rank not stepped yet at the step its latest resume says)
        self.reporter.event("resume", message=f"step {done} (the framework's own count)", step=done)

    @_guarded
    def plan_steps(self, total: int | None) -> None:
        """The run is to end at step ``total`` (None: not known): said in this rank's hello,
        sent again now if it was sent already (else the first one says it)."""
        total = planned(total)
        if total == self._planned_steps:
            return
        self._planned_steps = total
        if self._hello_sent:
            self._send_hello()


def _with_callback(callback: type, init: Callable[..., Any]) -> Callable[..., Any]:
    """Lightning's ``Trainer.__init__``, then a ``callback`` of pardash's put first in the
    trainer's callbacks (a new list: the script's own list is not changed)."""

    def __init__(trainer: Any, *args: Any, **kwargs: Any) -> None:
        init(trainer, *args, **kwargs)
        try:
            callbacks = trainer.callbacks
            if not any(type(c) is callback for c in callbacks):  # (a subclass's __init__ calls ours once more)
                trainer.callbacks = [callback(), *callbacks]  # (first: Lightning keeps its checkpoints' last)
        except Exception:
            pass  # (another version: no total, the trainer as it was)

    return __init__
