"""The automatic instrumentation installed in the test's own process, over a reporter that
keeps what it would publish: shared by the tests of the hooks' decisions that need no hub."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch

from pardash.telemetry import api
from pardash.telemetry.env import RankIdentity
from pardash.trainer.instrument import Instrument


class Recording:
    """Stands in for the instrumentation's Reporter: keeps the hellos, steps and events it sends."""

    enabled = True

    def __init__(self) -> None:
        self.identity = RankIdentity(rank=0, local_rank=0, world_size=1, node=0, host="here", restart=0)
        self.hellos: list[dict] = []
        self.steps: list[dict] = []
        self.events: list[tuple[str, dict]] = []
        self.phases: list[str] = []
        """The phases its heartbeat would say, in turn."""
        self.last_step = 0

    def step(self, **fields) -> bool:
        self.steps.append(fields)
        self.last_step = fields["step"]
        return True

    def hello(self, **fields) -> bool:
        self.hellos.append(fields)
        return True

    def event(self, name: str, message: str = "", **fields) -> bool:
        self.events.append((name, fields))
        return True

    def set_phase(self, phase: str, waits_in: str = "") -> None:
        self.phases.append(phase)
        self.waits_in = waits_in  # (the collective it waits in, as its heartbeat would say)

    def close(self, linger_ms: int = 0) -> None:
        pass


@contextlib.contextmanager
def instrumented(rep) -> Iterator[Instrument]:
    """The automatic instrumentation installed on this process's torch over the reporter
    ``rep``, as ``pardash launch`` installs it in a rank; removed after."""
    api._reset_for_tests()
    inst = Instrument(rep).install()
    torch.manual_seed(0)
    try:
        yield inst
    finally:
        inst.uninstall()
        api._reset_for_tests()


@pytest.fixture
def hooked():
    """:func:`instrumented` over a :class:`Recording`, for a test."""
    rep = Recording()
    with instrumented(rep) as inst:
        yield inst, rep
