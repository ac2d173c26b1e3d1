"""Tensor parallelism counts each batch once (review 276), on real 2-rank gloo runs under
``pardash launch --headless``, read in the report's JSON: the ranks of a tensor-parallel group
train on one batch, the same on each, and each counted it, so samples/s read twice what the job
took (3,767 where ~1,880; with FSDP on top, 2-D, too). Expert parallelism's ranks each train on
a batch of their own, counted as data parallelism's are (tests/test_ddp_buffer_broadcast.py's)."""

from pathlib import Path

import pytest

from helpers import launched_report

SCRIPTS = Path(__file__).resolve().parent / "scripts"

pytestmark = pytest.mark.slow


def _report(tmp_path, *script: str) -> dict:
    return launched_report(tmp_path, *script)


@pytest.mark.parametrize("two_d", [False, True], ids=["tp", "fsdp-over-tp"])
def test_tensor_parallel_counts_each_batch_once(tmp_path, two_d):
    steps, batch = 30, 8
    rep = _report(tmp_path, str(SCRIPTS / "tensor_parallel.py"), str(steps), *(["2d"] if two_d else []))
    assert rep["strategy"] == ("fsdp" if two_d else "tp")
    assert rep["samples"] == steps * batch  # (one group of 2 ranks, one batch a step)
    assert [r["samples"] for r in rep["ranks"]] == [steps * batch // 2] * 2
    taken = steps * batch / rep["train_s"]
    assert 0.8 < rep["samples_per_s"] / taken < 1.25, (rep["samples_per_s"], taken)


def test_expert_parallel_counts_each_ranks_batch(tmp_path):
    # A mixture of experts whose stacked expert weights are split by experts over an "ep" mesh
    # (parallelize_module with an ExpertParallel style of the script's own, as torchtitan's):
    # each rank trains on a batch of its own, its tokens exchanged by all-to-all. Read as a
    # tensor-parallel group, it counted half its samples (480 of 960, samples/s halved).
    steps, batch = 30, 16
    rep = _report(tmp_path, str(SCRIPTS / "moe_expert_parallel.py"), str(steps), "style")
    assert rep["samples"] == steps * batch * 2
    assert [r["samples"] for r in rep["ranks"]] == [steps * batch] * 2
    taken = steps * batch * 2 / rep["train_s"]
    assert 0.8 < rep["samples_per_s"] / taken < 1.25, (rep["samples_per_s"], taken)
