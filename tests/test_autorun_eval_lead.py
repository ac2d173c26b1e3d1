"""Zero-code instrumentation of an evaluation between two steps: its time is in neither step,
what came before it (the script's work after the optimizer step, its wait in a barrier) stays
in the step after it, as around a save. In process on a fake clock, then one real 2-rank
launch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pardash.telemetry import api, schema
from test_autorun import _steps, _timed_step
from test_autorun_saves import SAVES_RUN_GROUP, on_a_fake_clock, shared_saves_run


@pytest.mark.parametrize("how", ["model.eval()", "lined up", "an ema"])
def test_the_work_and_the_wait_before_an_evaluation_stay_in_the_step(monkeypatch, how):
    # After each optimizer step the script works 5 ms (writes its logs), waits 30 ms in its own
    # barrier, then evaluates (model.eval(), forwards under no_grad, model.train(): 1.3 s)
    # every 3 steps, and after its first while that step's round may still go on; or lines its
    # ranks up first in a barrier of its own (30 ms more, the evaluation's); or evaluates its
    # EMA (ema.eval(), forwards, its metrics after: 200 ms of the next step's data, as
    # before). The step after an evaluation started at its end: data 0 and comm_s 0, the
    # rank's work and its wait before the evaluation gone with it, step 60 ms, not 95.
    from torch.optim.swa_utils import AveragedModel

    inst, rep, clock = on_a_fake_clock(monkeypatch)

    def evaluate() -> None:
        evaluated = ema if ema is not None else model
        evaluated.eval()
        if how == "lined up":
            torch.distributed.barrier()  # (the evaluation's: in no step)
        clock[0] += 0.100  # the validation loader's first batch
        with torch.no_grad():
            for i in range(5):
                clock[0] += 0.250 if i else 0.0  # (the clock stands still in a forward)
                evaluated(torch.randn(4, 8))
        clock[0] += 0.200  # its metrics, after its last forward
        if ema is None:
            model.train()

    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ema = AveragedModel(model) if how == "an ema" else None
        for step in range(1, 11):
            _timed_step(model, opt, clock)
            if ema is not None:
                ema.update_parameters(model)
            clock[0] += 0.005
            torch.distributed.barrier()
            if step == 1 or step % 3 == 0:
                evaluate()
        inst.finish()
    finally:
        inst.uninstall()
        api._reset_for_tests()
    assert [(name, fields["step"]) for name, fields in rep.events] == [("eval", s) for s in (1, 3, 6, 9)]
    after = rep.steps[1:]  # (the first step's clock starts at its first forward)
    metrics = [0.200 if how == "an ema" and s["step"] in (2, 4, 7, 10) else 0.0 for s in after]
    assert [s["data_s"] for s in after] == pytest.approx([0.015 + m for m in metrics])
    assert [s["comm_s"] for s in after] == pytest.approx([0.030] * 9)
    assert [s["step_s"] for s in after] == pytest.approx([0.095 + m for m in metrics])
    phases = ("data_s", "forward_s", "backward_s", "optimizer_s", "comm_s")
    assert all(sum(s[p] for p in phases) == pytest.approx(s["step_s"]) for s in after)


@pytest.fixture
def saves_run(tmp_path_factory):
    return shared_saves_run(tmp_path_factory)


@pytest.mark.slow
@SAVES_RUN_GROUP
def test_a_launched_ranks_work_and_wait_before_its_evaluation_stay_in_its_step(saves_run):
    # Rank 0 works 30 ms after each optimizer step, then every rank waits in dist.barrier(),
    # then evaluates (after step 1, while its round may go on, and every 3 steps). The step
    # after an evaluation started at its end: rank 0's data read next to nothing, not its
    # 30 ms, and rank 1's wait in the barrier was gone (comm_s 0). (The launch is
    # test_autorun_saves.py's, shared: its script saves before each evaluation, which leaves
    # the same out, and at steps 5 and 10 alone.)
    proc, msgs = saves_run.proc, saves_run.msgs
    assert proc.returncode == 0, proc.stderr[-3000:]
    evals = sorted((m.rank, m.step) for m in msgs if isinstance(m, schema.Event) and m.name == "eval")
    assert evals == [(r, s) for r in (0, 1) for s in (1, 3, 6, 9)]
    first, second = _steps(msgs, 0), _steps(msgs, 1)
    assert [s.step for s in first] == [s.step for s in second] == list(range(1, 11))
    # (the first step's clock starts at its first forward; the sleep is at least its 30 ms)
    assert all(s.data_s >= 0.03 for s in first[1:])
    assert all(s.comm_s > 0 for s in second[1:])
    for s in first + second:
        assert s.data_s + s.forward_s + s.backward_s + s.optimizer_s + (s.comm_s or 0.0) == pytest.approx(s.step_s)
