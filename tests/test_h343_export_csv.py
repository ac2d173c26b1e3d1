"""`pardash export LOG --csv FILE` writes the same columns in the same order for every run (review
341: an FSDP run's table had no memory/buckets_bytes, a script's put time/loader_s in the middle,
so two runs' tables did not line up), with each step's samples and samples_total (in the log
each step, not in the table)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

from helpers import pardash_env

from pardash.telemetry import schema


def _log(path: Path, *, buckets: bool, loader: bool, custom: bool = False) -> Path:
    """Two ranks' ten steps of 8 samples: a DDP run's (gradient buckets in its memory) or an
    FSDP run's (none), a script's DataLoader time where ``loader``, a custom metric from step 3."""
    msgs: list = [schema.Hello(run=path.stem, rank=r, world_size=2, seq=0, t=1.0) for r in (0, 1)]
    for s in range(1, 11):
        for r in (0, 1):
            mem = schema.Mem(params_bytes=100, grads_bytes=100, optim_bytes=200, buckets_bytes=100 if buckets else 0)
            msgs.append(schema.Step(run=path.stem, rank=r, step=s, seq=s, loss=1.0, step_s=0.1, t=1.0 + s, samples=8,
                                    samples_total=8 * s, data_s=0.01, loader_s=0.005 if loader else None, mem=mem,
                                    custom={"acc": 0.5} if custom and s >= 3 else {}))  # fmt: skip
    path.write_bytes(schema.encode_json_lines(msgs))
    return path


def _table(log: Path, tmp_path: Path) -> list[dict]:
    out = tmp_path / f"{log.stem}.csv"
    p = subprocess.run([sys.executable, "-m", "pardash", "export", str(log), "--csv", str(out)], capture_output=True, text=True,
                       timeout=120, env=pardash_env(), cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stderr
    with open(out, newline="") as fh:
        return list(csv.DictReader(fh))


def test_two_runs_tables_have_the_same_columns_in_the_same_order_with_the_samples(tmp_path):
    ddp = _table(_log(tmp_path / "ddp.jsonl", buckets=True, loader=False), tmp_path)
    fsdp = _table(_log(tmp_path / "fsdp.jsonl", buckets=False, loader=True, custom=True), tmp_path)
    head_ddp, head_fsdp = list(ddp[0]), list(fsdp[0])
    # The known columns in one order in both; the script's own metric after them all.
    assert head_fsdp[: len(head_ddp)] == head_ddp and head_fsdp[len(head_ddp):] == ["custom/acc"], (head_ddp, head_fsdp)
    assert head_ddp.index("samples") < head_ddp.index("samples_total") < head_ddp.index("time/step_s")
    assert [(r["step"], r["samples"], r["samples_total"]) for r in ddp if r["rank"] == "1"][-2:] == [("9", "8", "72"), ("10", "8", "80")]
    assert {r["memory/buckets_bytes"] for r in fsdp} == {""} and {r["time/loader_s"] for r in ddp} == {""}
    assert {r["time/loader_s"] for r in fsdp} == {"0.005"}
