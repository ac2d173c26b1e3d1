"""The per-step shortcuts of the instrumentation publish what the general paths would: the one
root of memory accounting, the probe's repeat-first call, a step's own send path, the root
hooks' call without a Python frame, and a forked child's instruments left inert."""

from __future__ import annotations

import copy
import os
import pickle

import pytest
import torch
import zmq
from torch import nn

from helpers import identity
from pardash.telemetry import memory, schema
from pardash.telemetry.reporter import Reporter
from pardash.trainer import hooking, instrument
from pardash.trainer.trained import Trained


def _general_accountable(trained: Trained, step: int):
    """Trained.accountable's model as the lists give it, without the one-root shortcut."""
    roots, optimizers = trained.used_roots(step), trained.optimizers
    if not roots and not optimizers:
        return None
    return memory.accountable(roots, optimizers, {})


@pytest.mark.parametrize("roots", [1, 2])
def test_the_one_root_shortcut_measures_what_the_lists_would(roots):
    trained = Trained(lambda: None)
    models = [nn.Linear(4, 4) for _ in range(roots)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    for m in models:
        trained.add_root(m)
    # (step, what is called in it, optimizer stepping first in it): called now, called the step
    # before, not called for two steps, a new optimizer in the step
    for step, called, new_opt in [(0, True, 0), (1, False, None), (2, False, None), (3, True, None), (4, False, None), (5, False, 0)]:
        if called:
            for m in models:
                trained.called(m, step)
        if new_opt is not None:
            trained.optimizer_new = step
        for o in opts:
            trained.add_optimizer(o, step)
        model, _ = trained.accountable(step)
        want = _general_accountable(trained, step)
        if isinstance(want, nn.Module):
            assert model is want, (step, model, want)
        else:  # a holder (of the roots, or of the optimizers' parameters) holding the same
            assert isinstance(model, memory.Holder), (step, model)
            assert [id(m) for m in model.modules()] == [id(m) for m in want.modules()], step
            assert [id(p) for p in model.parameters()] == [id(p) for p in want.parameters()], step


def test_asking_the_probe_to_repeat_first_publishes_what_measure_alone_does(monkeypatch):
    # The instrument asks repeat() first (measure's arguments cost something to gather), then
    # measure(force=True) when due: the same measurements on the same steps as measure() alone.
    monkeypatch.setattr(memory, "MEM_BUDGET", 1e-12)  # every call costs more: sampled steps,
    monkeypatch.setattr(memory, "MEM_MAX_EVERY", 3)  # every third one measured, in both probes
    model = nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters())
    a, b = memory.MemoryProbe(), memory.MemoryProbe()
    fresh_a, fresh_b = [], []
    a_last = b_last = None
    for step in range(40):
        model(torch.randn(2, 8)).sum().backward()
        opt.step()
        ma = a.measure(model, [opt], step_s=0.001)
        held = b.repeat(model)
        mb = held if held is not memory.DUE else b.measure(model, [opt], step_s=0.001, force=True)
        # a repeat is the very object measured last; a new measurement is a new one
        fresh_a.append(ma is not a_last)
        fresh_b.append(mb is not b_last)
        a_last, b_last = ma, mb
        opt.zero_grad()
    assert fresh_a == fresh_b
    assert sum(fresh_a) < len(fresh_a)  # some steps were repeats


def test_a_step_through_its_own_send_path_is_the_message_send_would_make():
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVTIMEO, 10_000)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    rep = Reporter(f"tcp://127.0.0.1:{port}", run="r1", identity=identity(1), heartbeat_s=0)
    try:
        mem = schema.Mem(params_bytes=10, grads_bytes=10, rss_bytes=5)
        assert rep.step(step=1, loss=2.0, samples=4, step_s=0.1, data_s=0.05, mem=mem, custom={"x": 1.0})
        assert rep.step(step=2, loss=float("nan"), samples=4, step_s=0.1)
        assert rep.step(step=3, loss=1.5, samples=4, step_s=0.1)
        got = [schema.decode(pull.recv()) for _ in range(5)]
    finally:
        rep.close(0)
        pull.close(0)
    steps = [m for m in got if isinstance(m, schema.Step)]
    events = [m for m in got if isinstance(m, schema.Event)]
    assert [(s.run, s.rank, s.step, s.loss, s.samples_total) for s in steps] == [
        ("r1", 1, 1, 2.0, 4), ("r1", 1, 2, None, 8), ("r1", 1, 3, 1.5, 12)
    ]
    assert steps[0].mem == mem and steps[0].custom == {"x": 1.0} and steps[0].data_s == 0.05
    assert all(s.mono > 0 and s.t > 0 for s in steps)
    seqs = sorted(m.seq for m in got)
    assert seqs == list(range(5))  # one counter for steps and events: no gap, no repeat
    assert ["not finite" in e.message or "diverged" in e.message for e in events] == [True, True]


def test_a_root_hook_copies_and_pickles_as_a_no_op_and_calls_through():
    calls = []
    hook = hooking._Hook(lambda *a: calls.append(a))
    hook(1, 2)
    assert calls == [(1, 2)]
    for copied in (copy.deepcopy(hook), pickle.loads(pickle.dumps(hook))):
        assert copied(1, 2) is None and calls == [(1, 2)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_childs_instruments_are_inert_and_the_parents_are_not():
    inst = instrument.Instrument(_NullReporter())
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: say whether its copy is inert, and go
        os.write(w, b"1" if inst.dead else b"0")
        os._exit(0)
    os.close(w)
    said = os.read(r, 1)
    os.waitpid(pid, 0)
    os.close(r)
    assert said == b"1"
    assert not inst.dead


class _NullReporter:
    enabled = True
    identity = identity(0, 1)

    def step(self, **fields):
        return True

    def hello(self, **fields):
        return True

    def event(self, *a, **fields):
        return True

    def set_phase(self, phase, waits_in=""):
        pass
