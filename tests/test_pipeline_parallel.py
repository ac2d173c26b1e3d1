"""Pipeline parallelism (``torch.distributed.pipelining``) read as what it is (helper 283, after
review 276): each stage read as ``single`` holding a full copy of the model, its loss the sum of
its micro-batches' (4x what the script printed), its batch counted on every stage, its waits
for the other stage its forward and backward time (comm ``-``), and a stage slowed in its
forward went unnamed ("stragglers: none").

Two real 2-rank gloo launches under ``pardash launch --headless`` (tests/scripts/pipeline_stages.py),
read in the report's JSON; the rest on a one-rank process group in this process (both stages of a
pipeline on one rank, as an interleaved schedule places them)."""

from __future__ import annotations

import gc
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from helpers import launched_report, pardash_env
from instrumented import Recording
from pardash.telemetry import api, schema
from pardash.telemetry.summary import expected_state_bytes, is_pipeline, is_sharded, not_sharding_hint
from pardash.telemetry.modelfacts import pipeline_stage, pipelined
from pardash.trainer.instrument import Instrument

SCRIPT = Path(__file__).resolve().parent / "scripts" / "pipeline_stages.py"
BATCH = 32


@pytest.fixture
def one_rank_pipeline(tmp_path):
    """The zero-code hooks installed over a recording reporter, then a gloo group of one rank
    (destroyed after the test)."""
    import torch.distributed as dist

    api._reset_for_tests()
    rep = Recording()
    inst = Instrument(rep).install()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield inst, rep
    finally:
        inst.uninstall()
        api._reset_for_tests()
        gc.collect()
        dist.destroy_process_group()


@pytest.mark.parametrize("schedule", ["ScheduleLoopedBFS", "ScheduleInterleaved1F1B"])
def test_a_pipeline_step_says_the_mean_loss_and_its_batch_once(one_rank_pipeline, schedule):
    # Both stages of a 2-stage pipeline on this rank: it read "single", the loss the sum of the
    # 4 micro-batches' (4x the script's), and the batch counted by each stage's forwards (64).
    from torch.distributed import pipelining

    inst, rep = one_rank_pipeline
    torch.manual_seed(0)
    full = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    stages = [pipelining.PipelineStage(full[:2], 0, 2, torch.device("cpu")),
              pipelining.PipelineStage(full[2:], 1, 2, torch.device("cpu"))]  # fmt: skip
    sched = getattr(pipelining, schedule)(stages, n_microbatches=4, loss_fn=nn.MSELoss())
    opt = torch.optim.SGD(full.parameters(), lr=0.1)
    seen = []
    for _ in range(3):
        x = torch.randn(BATCH, 8)
        losses: list = []
        sched.step(x, target=x.flip(1), losses=losses)
        seen.append(torch.stack(losses).mean().item())
        opt.step()
        opt.zero_grad()
    inst.finish()
    assert [s["loss"] for s in rep.steps] == pytest.approx(seen, rel=1e-6)
    assert [s["samples"] for s in rep.steps] == [BATCH] * 3
    assert [s["custom"]["micro_batches"] for s in rep.steps] == [8.0] * 3  # (4 a stage)
    said = rep.hellos[-1]
    assert (said["strategy"], said["pp_stage"], said["pp_stages"]) == ("pp", 0, 2)


def test_a_pipeline_without_the_losses_list_says_the_mean_its_backward_passes_took(one_rank_pipeline):
    from torch.distributed import pipelining

    inst, rep = one_rank_pipeline
    torch.manual_seed(0)
    model = nn.Linear(8, 8)
    stage = pipelining.PipelineStage(model, 0, 1, torch.device("cpu"))
    sched = pipelining.ScheduleGPipe(stage, n_microbatches=4, loss_fn=nn.MSELoss(), scale_grads=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # (no update: the losses can be taken again)
    x = torch.randn(BATCH, 8)
    for _ in range(2):
        sched.step(x, target=x.flip(1))
        opt.step()
        opt.zero_grad()
    inst.finish()
    with torch.no_grad():
        mean = sum(nn.functional.mse_loss(model(c), c.flip(1)).item() for c in x.chunk(4)) / 4
    assert [s["loss"] for s in rep.steps] == pytest.approx([mean, mean], rel=1e-5)
    assert [s["samples"] for s in rep.steps] == [BATCH, BATCH]


def test_pipeline_strategies_and_the_memory_each_stage_is_expected_to_hold():
    assert [pipelined(s) for s in ("single", "", "ddp", "fsdp", "tp", "pp+ddp")] == ["pp", "pp", "pp+ddp", "pp+fsdp", "pp+tp", "pp+ddp"]
    assert [is_pipeline(s) for s in ("pp", "pp+fsdp", "ddp", "tp", "")] == [True, True, False, False, False]
    # Each stage its own part, whole: no sharding expected (nor advised) of a stage alone or
    # data parallel; a stage FSDP shards is expected to hold its share.
    assert [is_sharded(s) for s in ("pp", "pp+ddp", "pp+fsdp", "pp+tp")] == [False, False, True, True]
    assert expected_state_bytes(16_000, 1000, 2, "pp") == (16_000, "its stage's state unsharded")
    assert expected_state_bytes(16_000, 1000, 4, "pp+fsdp", shards=2) == (8_000, "its stage's state unsharded ÷ 2, the ranks it is sharded over")
    assert "parallelize_module" in not_sharding_hint("pp+tp")

    class Stage:
        def __init__(self, index: int, count: int) -> None:
            self.stage_index, self.num_stages = index, count

    assert pipeline_stage([Stage(1, 4), Stage(3, 4)]) == (1, 4, False, True)
    assert pipeline_stage([Stage(0, 2)]) == (0, 2, True, False)
    assert pipeline_stage([object()]) is None  # (a torch whose stages say neither: read as before)


def test_a_hello_of_before_pipelines_reads_as_it_did():
    old = b'{"kind":"hello","run":"r","rank":1,"seq":0,"t":1.0,"strategy":"ddp","world_size":2}'
    hello = schema.decode_json(old)
    assert (hello.strategy, hello.pp_stage, hello.pp_stages) == ("ddp", None, 0)
    assert b"pp_" not in schema.encode_json(hello)  # (no pipeline fields written where none was seen)
    new = schema.decode(schema.encode(schema.Hello(run="r", rank=0, t=1.0, strategy="pp", pp_stage=0, pp_stages=2)))
    assert (new.pp_stage, new.pp_stages) == (0, 2)


def _median(rank: dict, phase: str) -> float:
    return rank[f"median_{phase}_s"] or 0.0


@pytest.mark.slow
@pytest.mark.serial  # (a clean run's lack of a straggler: load beside it could sway it)
def test_a_clean_two_stage_pipeline(tmp_path):
    # Schedule1F1B, 40 steps of a batch of 32 in 4 micro-batches.
    steps = 40
    rep = launched_report(tmp_path, str(SCRIPT), str(steps), "1f1b")
    printed = json.loads((tmp_path / "losses.json").read_text())
    assert rep["strategy"] == "pp"
    by_rank = {r["rank"]: r for r in rep["ranks"]}
    # The loss the script sees (the mean of the schedule's losses), from the last stage only.
    assert by_rank[0]["last_loss"] is None
    assert math.isclose(by_rank[1]["last_loss"], printed[-1], rel_tol=1e-6), (by_rank[1]["last_loss"], printed[-1])
    # One batch a step for the pipeline, counted on its first stage.
    assert rep["samples"] == steps * BATCH
    assert [by_rank[r]["samples"] for r in (0, 1)] == [steps * BATCH, 0]
    # Each stage holds its own half, whole: what pp x2 should.
    assert rep["memory"]["vs_expected"] == pytest.approx(1.0, rel=0.05)
    assert "stage" in rep["memory"]["expected_basis"]
    # Each stage waits for the other: comm, not forward or backward (it read "-").
    assert all(_median(by_rank[r], "comm") > 0 for r in (0, 1))
    # Balanced stages: no stage named.
    assert rep["stragglers"] == []


@pytest.mark.slow
def test_a_slow_stage_is_named_and_its_hang_by_the_timeout(tmp_path):
    # Rank 1 computes 5 ms more in each micro-batch's forward from step 3, and sleeps in its
    # forward at step 36: rank 0's receive times out after 6 s.
    log = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "2", "--headless", "--log", str(log),
         "--runs-dir", str(tmp_path / "runs"), "--", str(SCRIPT), "60", "slow", "hang"],
        capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout[-2000:]
    from pardash.telemetry.report import build_report

    rep = build_report(str(log))
    assert [(s["rank"], s["kind"]) for s in rep["stragglers"]] == [(1, "compute")], rep["stragglers"]
    by_rank = {r["rank"]: r for r in rep["ranks"]}
    # Rank 0 waits for rank 1 in its receives: comm, several times its own forward and backward
    # (they held the wait, comm "-"); rank 1's forward holds its extra work.
    fast = by_rank[0]
    assert _median(fast, "comm") > 3 * max(_median(fast, "forward"), _median(fast, "backward")), fast
    assert _median(by_rank[1], "forward") > 3 * _median(fast, "forward")
    # The hang: rank 1, which raised nothing, named its cause by rank 0's timeout.
    assert [(w["rank"], w["kind"], w["phase"]) for w in rep["failure"]["waited_for"]] == [(1, "stalled", "forward")], rep["failure"]
    assert {e["rank"]: e["role"] for e in rep["exits"]} == {0: "waited", 1: "hung"}
