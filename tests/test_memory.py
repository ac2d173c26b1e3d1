"""Memory accounting: FSDP2 ranks hold half of what DDP ranks hold, measured on 2 real gloo
ranks; plus the ZeRO arithmetic and the torch-free import of the module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pardash.telemetry.memory import expected_bytes_per_rank

PROBE = Path(__file__).parent / "scripts" / "mem_probe.py"


def run_probe(strategy: str, out: Path, nproc: int = 2) -> list[dict]:
    """Start ``nproc`` gloo ranks of the probe; one parsed account per rank, by rank."""
    out.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1", MEM_PROBE_OUT=str(out))
    env.pop("PARDASH_ENDPOINT", None)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc-per-node", str(nproc), str(PROBE), "--strategy", strategy],
        capture_output=True, text=True, env=env, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


@pytest.fixture(scope="module")
def ddp_fsdp(tmp_path_factory) -> tuple[list[dict], list[dict]]:
    base = tmp_path_factory.mktemp("mem")
    return run_probe("ddp", base / "ddp"), run_probe("fsdp", base / "fsdp")


@pytest.mark.slow
def test_ddp_ranks_hold_the_full_model(ddp_fsdp):
    ddp, _ = ddp_fsdp
    for r in ddp:
        m = r["mem"]
        assert m["params_bytes"] == m["params_full_bytes"] == r["params_count"] * 4
        assert m["grads_bytes"] == m["grads_full_bytes"] == m["params_full_bytes"]
        # AdamW: exp_avg + exp_avg_sq (8 bytes a parameter) and a 4-byte step per tensor.
        assert m["optim_bytes"] == m["optim_full_bytes"]
        assert 2 * m["params_full_bytes"] <= m["optim_bytes"] < 2 * m["params_full_bytes"] + 4096
        # One flat bucket buffer per bucket, as large as the gradients it reduces.
        assert m["buckets_bytes"] == m["grads_bytes"]
        assert m["rss_bytes"] > m["params_bytes"]


@pytest.mark.slow
def test_fsdp_ranks_hold_half_of_the_model(ddp_fsdp):
    ddp, fsdp = ddp_fsdp
    full = ddp[0]["mem"]
    for r in fsdp:
        m = r["mem"]
        # Unsharded equivalents agree with what DDP holds.
        assert m["params_full_bytes"] == full["params_full_bytes"]
        assert m["grads_full_bytes"] == full["grads_full_bytes"]
        assert m["optim_full_bytes"] == full["optim_full_bytes"]
        # Locally: half, up to the padding of dims that do not split evenly (and the
        # replicated 4-byte Adam step counters).
        for kind in ("params", "grads", "optim"):
            assert m[f"{kind}_bytes"] == pytest.approx(m[f"{kind}_full_bytes"] / 2, rel=0.02), kind
        assert m.get("buckets_bytes", 0) == 0
    # Measured against the ZeRO arithmetic: 16 bytes a parameter, over 2 ranks.
    for ddp_r, fsdp_r in zip(ddp, fsdp):
        held = lambda m: m["params_bytes"] + m["grads_bytes"] + m["optim_bytes"]  # noqa: E731
        assert held(ddp_r["mem"]) == pytest.approx(ddp_r["expected_bytes"], rel=0.02)
        assert held(fsdp_r["mem"]) == pytest.approx(fsdp_r["expected_bytes"], rel=0.02)


@pytest.mark.parametrize(
    ("count", "world", "strategy", "expected"),
    [
        (1000, 1, "single", 16000),
        (1000, 4, "ddp", 16000),
        (1000, 8, "dp", 16000),
        (1000, 4, "fsdp", 4000),
        (1001, 4, "fsdp", 4004),
        (1000, 3, "fsdp", 5334),  # rounded up
    ],
)
def test_expected_bytes_follow_zero_arithmetic(count, world, strategy, expected):
    assert expected_bytes_per_rank(count, world, strategy) == expected


def test_account_counts_tied_weights_once_and_reads_state_growth():
    import torch

    from pardash.telemetry.memory import MemoryAccountant
    from pardash.trainer.config import TrainConfig
    from pardash.trainer.models import build_model, count_params

    model = build_model(TrainConfig(strategy="single"))
    count, nbytes = count_params(model)
    opt = torch.optim.AdamW(model.parameters())
    acct = MemoryAccountant(model)
    before = acct.measure([opt])  # no step yet: no gradients, no optimizer state
    assert before.params_bytes == before.params_full_bytes == nbytes == count * 4
    assert before.grads_bytes == before.optim_bytes == 0
    model(torch.randint(0, 64, (2, 32)), torch.randint(0, 64, (2, 32))).backward()
    opt.step()
    after = acct.measure([opt])  # the optimizer's state appeared: recounted at once
    assert after.grads_bytes == nbytes
    assert after.optim_bytes >= 2 * nbytes


def test_memory_module_does_not_import_torch():
    code = (
        "import sys, pardash.telemetry.memory as m;"
        "assert 'torch' not in sys.modules, 'torch was imported';"
        "print(m.expected_bytes_per_rank(10, 2, 'fsdp'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "80"
