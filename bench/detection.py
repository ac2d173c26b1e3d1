"""Straggler detection over the matrix of issue 4: latency in steps and false verdicts per
1000 steps, on real gloo runs of the bundled trainer.

Injected runs: ddp and fsdp x data and compute stragglers x 2 and 4 ranks (rank 1 slowed by
SECONDS a step from step 1). Clean runs: ddp and fsdp x 2 and 4 ranks, no injection.
Short steps: demos/ddp_plain.py on 2 ranks (a few ms a step), rank 1 sleeping SHORT_INJECT_S in
its data path (over half of every step lost; under a fixed 5 ms bar it went unnamed), and the
same script clean for SHORT_CLEAN_STEPS steps.
After the first collective: a plain DDP script (written to the run's folder, under the zero-code
hooks) whose rank 1 sleeps INJECT_S in its backward, past DDP's first bucket all-reduce: its
self time is the others', and it is named by the others' extra comm (review 328); the same
script clean for AFTER_CLEAN_STEPS steps.
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
from pardash.telemetry.stragglers import HOST_PERSIST, HOST_PERSIST_S, StragglerConfig

from .common import Row

INJECT_S = 0.04
WINDOW = 10
WARMUP = 10
SHORT_INJECT_S = 0.003
SHORT_CLEAN_STEPS = 1500
DEMO = Path(__file__).resolve().parents[1] / "demos" / "ddp_plain.py"
AFTER_STEPS = 300
AFTER_CLEAN_STEPS = 500
AFTER_JOB = """
import os, sys, time
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

torch.set_num_threads(1)
dist.init_process_group("gloo")
RANK = dist.get_rank()
SLEEP = float(sys.argv[2]) if RANK == 1 else 0.0


class SlowBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        if SLEEP:
            time.sleep(SLEEP)  # past the last bucket's all-reduce: after the step's first collective
        return g


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(32, 256), nn.Linear(256, 256), nn.Linear(256, 4)

    def forward(self, x):
        return self.c(torch.relu(self.b(SlowBackward.apply(torch.relu(self.a(x))))))


torch.manual_seed(0)
model = DDP(Net(), bucket_cap_mb=0.01)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 32), torch.randint(0, 4, (64,))
for step in range(int(sys.argv[1])):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
"""
"""A DDP script whose rank 1 sleeps ``argv[2]`` seconds a step in its backward, past its first
collective, for ``argv[1]`` steps."""


def _launch(d: Path, name: str, args: list[str]) -> list:
    log = d / f"{name}.jsonl"
    env = dict(os.environ)
    env.pop("PARDASH_ENDPOINT", None)
    trainer = [] if "--" in args else ["--log-every", "0"]  # (the bundled trainer's flag; a script takes its own)
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--log", str(log), "--runs-dir", str(d / "runs"),
         "--every", "60", *trainer, *args],
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


def _judge_injected(name: str, msgs: list, kind: str, max_windows: int | None = 3) -> tuple[Row, int | None, int]:
    """The row of a run with rank 1 made a straggler of ``kind``, to be named within
    ``max_windows`` windows after the warm-up (None: within the run); the step it was named at
    (None: missed) and the number of verdicts naming another rank."""
    found = [m for m in msgs if isinstance(m, schema.Verdict) and m.verdict == "straggler"]
    right = [v for v in found if v.rank == 1 and v.cause == kind]
    others = [v for v in found if v.rank != 1]
    lat = right[0].step if right else None
    windows = None if lat is None else (lat - WARMUP + WINDOW - 1) // WINDOW
    said = ", ".join(sorted({f"rank {v.rank} {v.cause}" for v in found})) or "nothing"
    row = Row(f"detect {name}", "named at step (windows after warm-up); verdicts",
              ("missed" if lat is None else f"{lat} ({windows})") + f"; {said}",
              "naive: " + ("right" if _naive_names_straggler(msgs, 1) else "wrong"),
              "", f"<= {max_windows} windows, only rank 1" if max_windows else "named, only rank 1",
              lat is not None and (max_windows is None or windows <= max_windows) and not others)  # fmt: skip
    return row, lat, len(others)


def _median_step_s(msgs) -> float:
    """The median wall step time past the warm-up, over every rank."""
    return statistics.median(m.step_s for m in msgs if isinstance(m, schema.Step) and m.step > WARMUP)


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
                    row, lat, others = _judge_injected(name, msgs, kind)
                    rows.append(row)
                    wrong += others
                    injected += 1
                    naive_right += _naive_names_straggler(msgs, 1)
                    if lat is not None:
                        latencies.append(lat)
        # A short step: what the others lose is a share of it, however few ms that is.
        name = "short-step-ddp-data-2"
        msgs = _launch(d, name, ["--nproc", "2", "--", str(DEMO), "--steps", str(2 * injected_steps),
                                 "--straggler-rank", "1", "--straggler-s", str(SHORT_INJECT_S)])  # fmt: skip
        row, _, others = _judge_injected(name, msgs, "data")
        rows.append(row)
        wrong += others
        short_step_ms = 1e3 * _median_step_s(msgs)
        # Slow after its first collective: its self time is the others'.
        after = d / "after_collective.py"
        after.write_text(AFTER_JOB)
        name = "after-first-collective-ddp-backward-2"
        msgs = _launch(d, name, ["--nproc", "2", "--", str(after), str(AFTER_STEPS), str(INJECT_S)])
        # (found by the others' comm alone: on a saturated host, or before its load is known,
        # only once it has lasted HOST_PERSIST times the windows and HOST_PERSIST_S, as ranks
        # taking turns at its cores are)
        row, _, others = _judge_injected(name, msgs, "backward", max_windows=None)
        rows.append(row)
        wrong += others
        injected += 1
        naive_right += _naive_names_straggler(msgs, 1)
        false_verdicts = 0
        clean_total = 0
        clean_runs = [(f"{strategy}-clean-{nproc}", ["--strategy", strategy, "--nproc", str(nproc), "--steps", str(clean_steps)])
                      for strategy in ("ddp", "fsdp") for nproc in (2, 4)]  # fmt: skip
        clean_runs.append(("short-step-ddp-clean-2", ["--nproc", "2", "--", str(DEMO), "--steps", str(SHORT_CLEAN_STEPS)]))
        clean_runs.append(("after-first-collective-ddp-clean-2", ["--nproc", "2", "--", str(after), str(AFTER_CLEAN_STEPS), "0"]))
        for name, args in clean_runs:
            msgs = _launch(d, name, args)
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
    notes.append(f"Short steps: demos/ddp_plain.py, rank 1 sleeping {SHORT_INJECT_S * 1e3:.0f} ms a step in its data "
                 f"(median step {short_step_ms:.1f} ms with it), and clean for {SHORT_CLEAN_STEPS} steps.")  # fmt: skip
    notes.append(f"After the first collective: a DDP script under the zero-code hooks, rank 1 sleeping {INJECT_S * 1e3:.0f} ms "
                 f"a step in its backward past its first bucket all-reduce ({AFTER_STEPS} steps; named within 3 windows on a "
                 f"host with cores to spare, else after {HOST_PERSIST * StragglerConfig().persist} windows and "
                 f"{HOST_PERSIST_S:.0f} s, as ranks taking turns at a saturated host's cores are), and clean for "
                 f"{AFTER_CLEAN_STEPS} steps.")  # fmt: skip
    return rows, " ".join(notes)


if __name__ == "__main__":
    from .common import standalone

    sys.exit(standalone(__spec__.name, __doc__, lambda _ns: run()))
