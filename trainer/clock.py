"""How the bundled trainer times a step: phase stamps (``perf_counter`` on CPU, CUDA events on
GPU) resolved into phase, step and self times.

On GPU a step's stamps are read one step late, once the next step is queued (see
:mod:`.train`), so timing adds no synchronisation of its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

PHASES = ("data", "forward", "backward", "optimizer")
"""The phases of a step, in order; each step's times have ``<phase>_s`` for each."""


@dataclass(slots=True)
class StepRecord:
    """What one step measured; on GPU its stamps are CUDA events, resolved one step late."""

    step: int
    epoch: int
    loss: torch.Tensor
    """Mean loss over the step's micro-batches (a device tensor; read it with .item())."""
    marks: list[tuple[str, Any]]
    """(phase entered, stamp) in order; the first is the end of the previous step."""
    end: Any
    arrive: Any
    """Stamp of the arrival at the step's first collective (None: the whole step is self)."""
    comm: list[Any] | None
    lr: float
    samples: int
    mem: Any
    last_in_epoch: bool
    grad_norm: torch.Tensor | None = None
    """The total gradient norm ``--grad-clip``'s clipping returned (a device tensor, read with
    the loss; None: no clipping)."""


class StepClock:
    """Stamps phase boundaries: ``perf_counter`` on CPU, CUDA events on GPU.

    A step starts where the previous one ended (the same stamp), so step times add up to the
    run's wall time, publishing included.
    """

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self._last_end: Any = None

    def stamp(self) -> Any:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()  # enqueued on the current stream: no synchronisation
            return ev
        return time.perf_counter()

    def start(self) -> list[tuple[str, Any]]:
        begin = self._last_end if self._last_end is not None else self.stamp()
        return [("data", begin)]

    def end(self) -> Any:
        self._last_end = self.stamp()
        return self._last_end

    def restart(self) -> None:
        """The next step starts now: time spent between steps (a checkpoint, reported as an
        event with its duration) is left out of the next step's data time."""
        self._last_end = self.stamp()

    def elapsed(self, a: Any, b: Any) -> float:
        """Seconds from stamp a to stamp b (CUDA events must have completed)."""
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    def resolve(self, rec: StepRecord) -> dict[str, float | None]:
        """Phase times, step time and self time of ``rec`` in seconds."""
        out: dict[str, float | None] = {f"{p}_s": 0.0 for p in PHASES}
        bounds = rec.marks + [("", rec.end)]
        for (phase, a), (_, b) in zip(bounds, bounds[1:]):
            out[f"{phase}_s"] = (out[f"{phase}_s"] or 0.0) + self.elapsed(a, b)
        begin = rec.marks[0][1]
        out["step_s"] = self.elapsed(begin, rec.end)
        out["self_s"] = self.elapsed(begin, rec.arrive if rec.arrive is not None else rec.end)
        return out
