"""A pipeline's stage (``torch.distributed.pipelining``) as the zero-code instrument reads it:
its stage and the pipeline's stages, the last stage's loss, the first stage's batch, and its
waits for its neighbours in the schedule's sends and receives, between its micro-batches'
passes: those waits are comm, out of its forward, backward and data time, and its own work is
the rest (part of :class:`pardash.trainer.instrument.Instrument`, beside
:class:`pardash.trainer.arrivals.Arrivals`)."""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch

from pardash.telemetry import modelfacts
from pardash.trainer.hooking import _get_ident, _guarded, _is_compiling
from pardash.trainer.imported import once_imported
from pardash.trainer.trained import first_tensor, rows

PIPELINING = "torch.distributed.pipelining"
"""Pipeline parallelism's package: its schedules and stages are wrapped once it is imported."""


class Pipelines:
    """Pipeline parallelism (``torch.distributed.pipelining``): a rank holds a stage of the
    model (``PipelineStage``), and a schedule's ``step()`` (``ScheduleGPipe``,
    ``Schedule1F1B``, the interleaved ones) runs the step's micro-batches through it, receiving
    each micro-batch's activations from the stage before and its gradients from the stage
    after. Part of :class:`Instrument` (its state set in its ``__init__``). Read as the
    model's hooks alone see it, each stage was ``single`` (a full copy of the model expected),
    its loss the sum of its micro-batches' (4x what the script printed, the mean over them), its
    batch counted on every stage, and its waits for the other stage its forward and backward
    time. Here, once a schedule steps:

    - the strategy is ``pp`` (``pp+ddp``, ``pp+fsdp``, ``pp+tp`` where the stage is itself
      wrapped or split: :func:`~pardash.telemetry.modelfacts.pipelined`), and the hello says the
      stage (``pp_stage``) and the pipeline's stages (``pp_stages``);
    - the loss is the last stage's, the mean over the step's micro-batches (the schedule's
      ``losses`` list where the script passed one, else the losses its backward passes took);
      other stages have none;
    - the step's batch (``step()``'s first tensor) counts once, on the first stage, so a
      pipeline counts its batch once, and data-parallel pipelines each their own;
    - the schedule's sends and receives waited for (``Work.wait()`` between passes, in
      ``step()``) are waits: comm, out of the phase they fall in; the stage's own work, the
      straggler signal, is the step less them (see Instrument._emit).

    On a torch without ``torch.distributed.pipelining``, or whose stages lack ``stage_index``
    and ``num_stages``, nothing here applies: the reading is the hooks' alone."""

    def _pipelining_imported(self, module: Any) -> None:
        try:
            from torch.distributed.pipelining import schedules, stage
        except ImportError:  # (a torch whose package is laid out otherwise: today's reading)
            return
        base = getattr(stage, "_PipelineStageBase", None) or getattr(stage, "PipelineStage", None)
        if base is not None and "__init__" in vars(base):
            self._patch(base, "__init__", self._wrap_stage_init)
        for name in ("PipelineScheduleSingle", "PipelineScheduleMulti"):
            cls = getattr(schedules, name, None)
            if cls is not None and "step" in vars(cls):
                self._patch(cls, "step", self._wrap_schedule_step)

    def _watch_pipelining(self) -> None:
        self._pp_finder = once_imported(PIPELINING, self._pipelining_imported)

    def _unwatch_pipelining(self) -> None:
        if self._pp_finder is not None:
            self._pp_finder.remove()
            self._pp_finder = None

    def _wrap_stage_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def __init__(stage: Any, *args: Any, **kwargs: Any) -> None:
            original(stage, *args, **kwargs)
            if not self.dead:
                self._stage_made(stage)

        return __init__

    @_guarded
    def _stage_made(self, stage: Any) -> None:
        self._pp_stages = [r for r in self._pp_stages if r() is not None and r() is not stage] + [weakref.ref(stage)]

    def _wrap_schedule_step(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def step(schedule: Any, *args: Any, **kwargs: Any) -> Any:
            if self._pp_in_step or self.dead or _get_ident() != self._tid or _is_compiling():
                return original(schedule, *args, **kwargs)
            began = self._pipeline_step_begins()
            if began is None:
                return original(schedule, *args, **kwargs)
            self._pp_in_step = True
            try:
                return original(schedule, *args, **kwargs)
            finally:
                self._pp_in_step = False
                self._pipeline_step_ends(began, args, kwargs)

        return step

    @_guarded
    def _pipeline_step_begins(self) -> tuple[Any, int, int] | None:
        """A schedule's training step begins: the rank is a pipeline's stage (said in its hello
        the first time). (the open step, its losses and backward passes so far); None where the
        stages cannot be read, or the step trains nothing (an evaluation under no_grad)."""
        if not torch.is_grad_enabled():
            return None
        stages = [s for s in (r() for r in self._pp_stages) if s is not None]
        facts = modelfacts.pipeline_stage(stages) if stages else None
        if facts is None:
            return None
        if facts != self._pp:
            self._pp = facts
            self.strategy = modelfacts.pipelined(self.strategy)
            self._hello.update(strategy=self.strategy, pp_stage=facts[0], pp_stages=facts[1])
            if self.roots:  # (else the stage's first forward, its root's, says it with the model)
                self._send_hello()
        opened = self._open
        return (opened, len(opened.losses), opened.micro) if opened is not None else (None, 0, 0)

    @_guarded
    def _pipeline_step_ends(self, began: tuple[Any, int, int], args: Any, kwargs: Any) -> None:
        """A schedule's step returned: its micro-batches' losses become the step's one loss,
        their mean, on the last stage (none on the others); its batch counts on the first."""
        opened, n_losses, micro = began
        step = self._open
        if step is None:
            return
        if opened is not step:  # (the step opened by its first forward, in the schedule)
            n_losses = micro = 0
        if step.micro == micro:
            return  # no backward pass: nothing trained
        _, _, first, last = self._pp
        taken = step.losses[n_losses:]
        del step.losses[n_losses:]
        if last:
            given = kwargs.get("losses")
            said = [t for t in given if isinstance(t, torch.Tensor) and t.numel() == 1] if isinstance(given, list) else []
            losses = said or taken
            if losses:
                try:
                    with torch.no_grad():
                        step.losses.append(torch.stack([t.detach().reshape(()) for t in losses]).mean())
                except (RuntimeError, TypeError):  # (losses on different devices or of other dtypes: their sum, as before)
                    step.losses.extend(taken)
        if first:
            step.samples += rows(first_tensor(args, kwargs))
