"""Straggler detection over the matrix of issue 4: latency in steps and false verdicts per
1000 steps, on real gloo runs of the bundled trainer.

Injected runs: ddp and fsdp x data and compute stragglers x 2 and 4 ranks (rank 1 slowed by
SECONDS a step from step 1). Clean runs: ddp and fsdp x 2 and 4 ranks, no injection.
Baseline in the same run: the wall step time spread (max/min across ranks) that a naive
"compare step times" detector would use, which in synchronous training cannot tell the
straggler (all ranks wait for it).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pardash.telemetry import schema
from pardash.telemetry.logreader import load_log

from .common import Row

INJECT_S = 0.04
WINDOW = 10
WARMUP = 10


def _launch(d: Path, name: str, args: list[str]) -> list:
    log = d / f"{name}.jsonl"
    env = dict(os.environ)
    env.pop("PARDASH_ENDPOINT", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--log", str(log), "--runs-dir", str(d / "runs"),
         "--every", "60", "--log-every", "0", *args],
        capture_output=True, text=True, env=env, cwd=d, timeout=1200,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed: {proc.stderr[-1500:]}")
    return load_log(log)[0]


def _naive_names_straggler(msgs, rank: int) -> bool:
    """Would 'the rank with the longest median wall step time' pick the straggler?"""
    by_rank: dict[int, list[float]] = {}
    for m in msgs:
        if isinstance(m, schema.Step) and m.step > WARMUP:
            by_rank.setdefault(m.rank, []).append(m.step_s)
    med = {r: statistics.median(v) for r, v in by_rank.items()}
    return max(med, key=med.get) == rank


def run(clean_steps: int = 500, injected_steps: int = 60) -> tuple[list[Row], str]:
    rows: list[Row] = []
    notes: list[str] = []
    latencies: list[int] = []
    wrong = 0
    naive_right = 0
    injected = 0
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for strategy in ("ddp", "fsdp"):
            for kind in ("data", "compute"):
                for nproc in (2, 4):
                    name = f"{strategy}-{kind}-{nproc}"
                    msgs = _launch(d, name, ["--strategy", strategy, "--nproc", str(nproc), "--steps", str(injected_steps),
                                             "--inject-straggler", f"1:{kind}:{INJECT_S}"])  # fmt: skip
                    found = [m for m in msgs if isinstance(m, schema.Verdict) and m.verdict == "straggler"]
                    right = [v for v in found if v.rank == 1 and v.cause == kind]
                    others = [v for v in found if v.rank != 1]
                    wrong += len(others)
                    injected += 1
                    naive_right += _naive_names_straggler(msgs, 1)
                    lat = right[0].step if right else None
                    if lat is not None:
                        latencies.append(lat)
                    windows = None if lat is None else (lat - WARMUP + WINDOW - 1) // WINDOW
                    said = ", ".join(sorted({f"rank {v.rank} {v.cause}" for v in found})) or "nothing"
                    rows.append(Row(f"detect {name}", "named at step (windows after warm-up); verdicts",
                                    ("missed" if lat is None else f"{lat} ({windows})") + f"; {said}",
                                    "naive: " + ("right" if _naive_names_straggler(msgs, 1) else "wrong"),
                                    "", "<= 3 windows, only rank 1", lat is not None and windows <= 3 and not others))  # fmt: skip
        false_verdicts = 0
        clean_total = 0
        for strategy in ("ddp", "fsdp"):
            for nproc in (2, 4):
                name = f"{strategy}-clean-{nproc}"
                msgs = _launch(d, name, ["--strategy", strategy, "--nproc", str(nproc), "--steps", str(clean_steps)])
                fv = [m for m in msgs if isinstance(m, schema.Verdict) and m.verdict == "straggler"]
                steps = sum(1 for m in msgs if isinstance(m, schema.Step))
                false_verdicts += len(fv)
                clean_total += steps
                rows.append(Row(f"clean {name}", "straggler verdicts", str(len(fv)), "", "", "0", not fv))
    per_k = 1000 * false_verdicts / max(1, clean_total)
    rows.append(Row("clean runs", "false verdicts / 1000 rank-steps", f"{per_k:.2f}", f"{clean_total} rank-steps", "", "0", false_verdicts == 0))
    if latencies:
        rows.append(Row("injected runs", "median detection step", f"{statistics.median(latencies):.0f}",
                        f"naive step-time picks rank 1 in {naive_right}/{injected}", "", "", None))  # fmt: skip
    notes.append(f"detection: injected {INJECT_S * 1e3:.0f} ms/step on rank 1 from step 1; windows of {WINDOW} steps after {WARMUP} warm-up steps; clean runs {clean_steps} steps.")
    return rows, " ".join(notes)


if __name__ == "__main__":
    from .common import standalone

    sys.exit(standalone(__spec__.name, __doc__, lambda _ns: run()))
