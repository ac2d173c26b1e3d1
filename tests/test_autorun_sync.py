"""Zero-code instrumentation around the collectives a script calls itself between steps (a
barrier after the optimizer step): the wait in them is no rank's work, the work before them
is; and the first step's data time. In process on a fake clock, then one real 2-rank launch."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, default_collate

from pardash.telemetry import api, schema
from pardash.telemetry.analysis import hang_causes
from pardash.telemetry.env import RankIdentity
from test_autorun import SCRIPTS, RecordingReporter, _batch, _launch, _model, _steps
from pardash.trainer.instrument import Instrument


@pytest.fixture
def hooked(monkeypatch):
    """An Instrument of rank 1 of 2, on a fake clock (``clock[0]``, which the test moves)."""
    api._reset_for_tests()
    rep = RecordingReporter()
    rep.identity = RankIdentity(rank=1, local_rank=1, world_size=2, node=0, host="here", restart=0)
    inst = Instrument(rep).install()
    clock = [100.0]
    monkeypatch.setattr(inst.clock, "stamp", lambda: clock[0])
    torch.manual_seed(0)
    yield inst, rep, clock
    inst.uninstall()
    api._reset_for_tests()


def _collectives(inst, rep, clock, wait_s: float):
    """The script's all_reduce (its gradients, by hand: the step's arrival) and barrier, as
    pardash wraps torch.distributed's, on stand-ins: the barrier waits ``wait_s`` for the
    other rank and notes the phase the heartbeat says meanwhile."""
    during: list[str] = []

    def barrier(*args, **kwargs):
        during.append(rep.phases[-1])
        clock[0] += wait_s

    class Work:
        def wait(self):
            barrier()

    def async_barrier(*args, async_op=False, **kwargs):
        return Work()

    all_reduce = inst._wrap_collective("all_reduce")(lambda *a, **k: None)
    wait = inst._wrap_work_wait(Work.wait)
    sync = inst._wrap_collective("barrier")(barrier)
    started = inst._wrap_collective("barrier")(async_barrier)
    return all_reduce, sync, lambda: wait(started(async_op=True)), during


@pytest.mark.parametrize("asynchronous", [False, True], ids=["barrier", "barrier(async_op=True).wait()"])
@pytest.mark.parametrize("rank", ["working alone", "waiting", "evaluating"])
def test_the_wait_in_the_scripts_barrier_is_no_work_and_the_work_before_it_is(hooked, rank, asynchronous):
    # Each step, rank 0 writes its metrics for 30 ms (or evaluates), then every rank waits in
    # dist.barrier(). The barrier was a sync point where the self time started again: rank 0's
    # 30 ms were thrown away and rank 1's 30 ms of waiting read as its data loading, on both
    # ranks alike ("data 30.6 ms", "stragglers: none"); a hang there read "stalled in data" on
    # both. The wait is now the step's comm_s, out of its self and data times, and the heartbeat
    # says "sync" while it lasts. An evaluation before the barrier is still no step work.
    inst, rep, clock = hooked
    all_reduce, barrier, async_barrier, during = _collectives(inst, rep, clock, 0.030 if rank == "waiting" else 0.0)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    after = []
    for _ in range(5):
        clock[0] += 0.010  # loading its batch
        x, y = _batch()
        loss = nn.functional.cross_entropy(model(x), y)
        clock[0] += 0.020
        loss.backward()
        all_reduce(torch.zeros(1))  # (its gradients, by hand: where the others wait for it)
        clock[0] += 0.030
        opt.step()
        opt.zero_grad()
        if rank == "working alone":
            clock[0] += 0.030  # its metrics and logs
        elif rank == "evaluating":
            model.eval()
            with torch.no_grad():
                model(torch.randn(4, 8))
                clock[0] += 0.030
            model.train()
        (async_barrier if asynchronous else barrier)()
        after.append(rep.phases[-1])
    inst.finish()
    steps = rep.steps[1:]  # (the first's work before the barrier is the second's)
    assert len(steps) == 4
    own = 0.030 if rank == "working alone" else 0.0
    assert [s["self_s"] for s in steps] == pytest.approx([own + 0.030] * 4)  # its work, its load, its backward
    assert [s["data_s"] for s in steps] == pytest.approx([own + 0.010] * 4)
    assert [s["comm_s"] for s in steps] == pytest.approx([0.030 if rank == "waiting" else 0.0] * 4)
    assert [s["step_s"] for s in steps] == pytest.approx([0.090 if rank != "evaluating" else 0.060] * 4)
    assert during == ["sync"] * 5
    assert after[1:] == ["data"] * 4  # (after the barrier: the next step's, as before it)


@pytest.mark.parametrize("reduced_by", ["all_reduce", "broadcast"])
def test_a_collective_between_micro_batches_is_a_wait_and_not_the_steps_arrival(hooked, reduced_by):
    # PyTorch Lightning broadcasts (whether a SIGTERM came) before every batch: with 4
    # micro-batches a step, the broadcasts before the 2nd to 4th came after a backward, and
    # the first of them was taken for the step's arrival. The self time ended after the first
    # micro-batch (a rank 20 ms slow in each read 20 ms a step behind, not 80) and the waits
    # in the next broadcasts read as data ("data 69.8 ms" on the rank waiting). They are the
    # step's comm_s now, and the arrival is the gradients' reduction after the last backward
    # (here by hand: a collective there before the optimizer step is still the arrival,
    # all_reduce or not).
    inst, rep, clock = hooked
    during: list[str] = []

    def waits_20ms(*args, **kwargs):  # (this rank waits there for the other)
        during.append(rep.phases[-1] if rep.phases else "")
        clock[0] += 0.020

    broadcast = inst._wrap_collective("broadcast")(waits_20ms)
    reduce = inst._wrap_collective(reduced_by)(lambda *a, **k: None)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        for _ in range(4):
            broadcast(torch.zeros(1), src=0)
            clock[0] += 0.001  # loading its micro-batch
            x, y = _batch()
            loss = nn.functional.cross_entropy(model(x), y)
            clock[0] += 0.002
            loss.backward()
        reduce(torch.zeros(1))  # its gradients, by hand
        clock[0] += 0.005  # clipping them, say
        opt.step()
        opt.zero_grad()
    inst.finish()
    steps = rep.steps[1:]  # (the first, before any optimizer step: as an update by hand's)
    assert len(steps) == 3 and all(s["custom"] == {"micro_batches": 4.0} for s in steps)
    assert [s["self_s"] for s in steps] == pytest.approx([4 * 0.003] * 3)  # its 4 micro-batches, no wait
    assert [s["comm_s"] for s in steps] == pytest.approx([4 * 0.020] * 3)
    assert [s["data_s"] for s in steps] == pytest.approx([4 * 0.001] * 3)
    assert [s["forward_s"] for s in steps] == pytest.approx([4 * 0.002] * 3)
    assert [s["backward_s"] for s in steps] == pytest.approx([0.005] * 3)
    assert [s["step_s"] for s in steps] == pytest.approx([4 * 0.023 + 0.005] * 3)
    assert during[4:] == ["sync"] * 12  # (its heartbeat's phase: a hang there is no cause)


def test_a_rank_stalled_in_the_scripts_barrier_is_told_from_the_one_it_waits_for():
    # (How the hub reads the heartbeats' phases the test above pins: the rank waiting in the
    # barrier is no cause of the hang; the rank stalled in its own work between steps is.)
    assert hang_causes([(0, "stalled", 20, "data"), (1, "stalled", 20, "sync")]) == {0}
    assert hang_causes([(0, "stalled", 20, "data"), (1, "stalled", 20, "data")]) == set()


def _slow_loader(clock: list[float], seconds: float) -> DataLoader:
    def collate(items):
        clock[0] += seconds  # each batch's loading, on the fake clock
        return default_collate(items)

    return DataLoader(TensorDataset(torch.randn(24, 8), torch.randint(0, 4, (24,))), batch_size=4, collate_fn=collate)


@pytest.mark.parametrize("first", ["the loop's", "one looked at before", "the first of the same pass looked at before"])
def test_the_first_steps_data_time_is_its_first_batchs_loading(hooked, first):
    # Step 1 opened at its first forward: the loading of its batch (spawned workers, a lazy
    # dataset's first reads) showed nowhere, data 0, while each later epoch's first step showed
    # its workers' start-up. A batch looked at before training (its shape), then a second of
    # setting up, is not the first step's.
    inst, rep, clock = hooked
    rep.identity = RankIdentity(rank=0, local_rank=0, world_size=1, node=0, host="here", restart=0)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = _slow_loader(clock, 0.050)
    batches = iter(loader)
    if first == "one looked at before":
        next(iter(loader))
        clock[0] += 1.0  # building the model, say
    elif first == "the first of the same pass looked at before":
        # (the pass's later batches are the steps': its second batch is step 1's; the second
        # of setting up after the first read as step 1's data time)
        next(batches)
        clock[0] += 1.0
    for x, y in batches:
        loss = nn.functional.cross_entropy(model(x), y)
        clock[0] += 0.020
        loss.backward()
        opt.step()
        opt.zero_grad()
    inst.finish()
    n = 5 if first.startswith("the first of the same pass") else 6
    assert [s["data_s"] for s in rep.steps] == pytest.approx([0.050] * n)
    assert [s["step_s"] for s in rep.steps] == pytest.approx([0.070] * n)


BARRIER_AFTER_RANK0S_LOGS = """
import sys, time, torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(40):
    model(torch.randn(16, 16)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    if rank == 0:
        time.sleep(0.03)  # its metrics and logs, written alone
    dist.barrier()
if rank == 0:
    time.sleep(float(sys.argv[1]))  # a checkpoint written alone, long: the other waits
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_rank_slow_before_the_scripts_barrier_is_named_and_a_hang_there_names_it(tmp_path):
    # Rank 0 writes its logs for 30 ms after each step, then both ranks meet in dist.barrier():
    # "stragglers: none", both ranks "data 30.6 ms". At the end rank 0 writes alone for 8 s
    # while rank 1 waits in the barrier: "ranks 0-1 stalled in data".
    (tmp_path / "logs.py").write_text(BARRIER_AFTER_RANK0S_LOGS)
    proc, msgs = _launch(tmp_path, "logs.py", "8")
    assert proc.returncode == 0, proc.stderr[-3000:]
    verdicts = [m for m in msgs if isinstance(m, schema.Verdict)]
    assert [(v.rank, v.cause) for v in verdicts if v.verdict == "straggler"] == [(0, "data")]
    stalled = [(v.rank, "stalled", v.step, v.cause) for v in verdicts if v.verdict == "stalled"]
    assert sorted((r, cause) for r, _, _, cause in stalled) == [(0, "data"), (1, "sync")]
    assert hang_causes(stalled) == {0}
    waiting = _steps(msgs, 1)[10:]
    assert all(s.comm_s is not None and s.comm_s > s.data_s for s in waiting)  # (its wait, not its data)


@pytest.mark.slow
@pytest.mark.parametrize("log", [[], ["log"]], ids=["broadcast before each", "and its loss all-reduced in its forward"])
def test_a_rank_slow_in_each_micro_batch_costs_the_others_all_of_it_despite_collectives_in_each(tmp_path, log):
    # The launch behind the in-process test above, with DDP's no_sync and a broadcast before
    # every micro-batch (PyTorch Lightning's loop): rank 1, 20 ms slow in each of 4, cost the
    # others "20 ms a step" (the first micro-batch's), and rank 0's waits read as its data. With
    # each micro-batch's loss all-reduced after its forward too (Lightning's self.log(...,
    # sync_dist=True)), the first of those was the arrival: "22 ms a step", the waits forward time.
    from pardash.telemetry.report import build_report

    slow_s = 0.020
    proc, msgs = _launch(tmp_path, str(SCRIPTS / "broadcast_each_micro_batch.py"), "40", "4", str(slow_s), *log)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = build_report(str(tmp_path / "run.jsonl"))  # (what `pardash report --format json` prints)
    assert [(s["rank"], s["kind"]) for s in rep["stragglers"]] == [(1, "data")]
    (straggler,) = rep["stragglers"]
    assert straggler["cost_total_s"] / straggler["steps_charged"] > 2.5 * slow_s  # 4 micro-batches' worth (it said 1)
    healthy, slow = rep["ranks"]
    # its waits are comm (all but one, the arrival's, in the forward that all-reduces), not its data
    assert healthy["median_comm_s"] > 2.5 * slow_s and healthy["median_data_s"] < 0.25 * healthy["median_comm_s"]
    assert slow["median_self_s"] - healthy["median_self_s"] > 2.5 * slow_s
    assert all(s.custom == {"micro_batches": 4.0} for s in _steps(msgs, 0)[1:])


def test_a_collective_in_the_forward_is_the_arrival_and_its_wait_is_comm_not_forward(hooked):
    # PyTorch Lightning's self.log(..., sync_dist=True) in training_step all-reduces the metric
    # in the forward: the step's first collective, its arrival, where the rank ahead waits for
    # the slow one. The wait read as its forward ("fwd 54.0" beside the straggler's 9.8; review
    # 327): it is its comm now, and its self time still ends where it arrived.
    inst, rep, clock = hooked
    during: list[str] = []

    def waits_20ms(*args, **kwargs):
        during.append(rep.phases[-1])
        clock[0] += 0.020

    all_reduce = inst._wrap_collective("all_reduce")(waits_20ms)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        clock[0] += 0.001  # loading its batch
        x, y = _batch()
        out = model(x)
        clock[0] += 0.002  # its forward, then the metric synced
        all_reduce(torch.zeros(1))
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        clock[0] += 0.003
        opt.step()
        opt.zero_grad()
    inst.finish()
    steps = rep.steps[1:]
    assert len(steps) == 3
    assert [s["forward_s"] for s in steps] == pytest.approx([0.002] * 3)
    assert [s["comm_s"] for s in steps] == pytest.approx([0.020] * 3)
    assert [s["self_s"] for s in steps] == pytest.approx([0.003] * 3)  # its data and forward, to its arrival
    assert [s["step_s"] for s in steps] == pytest.approx([0.026] * 3)
    assert during == ["sync"] * 4  # (a hang there: "stalled in sync", waiting, not its forward)
