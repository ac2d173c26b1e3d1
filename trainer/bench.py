"""``pardash bench``: the same model and data under each strategy, then one table.

Each strategy runs as a real job through :mod:`pardash.trainer.launcher` (a hub recording
every rank's telemetry, torchrun starting the ranks), one after the other so they never share
the machine; its log lands in the runs folder like any ``pardash launch --headless`` run, and
the table is built from the logs by :func:`pardash.telemetry.report.build_report`, so the
bench and ``pardash report`` can never disagree.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import TextIO

from pardash.telemetry import registry
from pardash.telemetry.bench_table import strategy_rows
from pardash.telemetry.report import build_report

from .config import STRATEGIES, TrainConfig, check_checkpoint_dir
from .launcher import TRAINER_COMMAND, LaunchError, new_spec, start


@dataclass(kw_only=True, slots=True)
class BenchConfig:
    """What ``pardash bench`` runs."""

    strategies: list[str]
    """Strategies in the order they run (single, dp, ddp, fsdp)."""
    nproc: int = 2
    """Ranks for ddp and fsdp (single and dp run one process)."""
    train: TrainConfig
    """Model, data and schedule shared by every strategy (its ``strategy`` is replaced)."""
    runs_dir: str = "runs"
    """Folder for the runs' logs and the bench's JSON."""
    gpu_count: int = 0
    """GPUs visible (NVML): dp needs 2 or more."""

    def __post_init__(self) -> None:
        if not self.strategies:
            raise ValueError("--strategies is empty; e.g. --strategies single,ddp,fsdp")
        for s in self.strategies:
            if s not in STRATEGIES:
                raise ValueError(f"--strategies: {s!r} is not one of {', '.join(STRATEGIES)}")
        if len(set(self.strategies)) != len(self.strategies):
            raise ValueError(f"--strategies {','.join(self.strategies)}: each strategy once")
        if self.nproc < 1:
            raise ValueError(f"--nproc {self.nproc}: need at least 1 rank")
        if self.train.resume:
            # Resumed, a strategy trains what the checkpoint before it left: none, after the
            # first strategy saved at the last step ("ddp x2: failed with exit code 0").
            raise ValueError("--resume: bench runs each strategy over the same steps from step 1; leave --resume out "
                             "(with --checkpoint-dir each strategy saves in a folder of its own)")  # fmt: skip


@dataclass(kw_only=True, slots=True)
class PlannedRun:
    strategy: str
    ranks: int
    devices: int
    """Devices the run uses (for scaling efficiency): its ranks, or dp's GPUs."""
    train: TrainConfig


def _faults(train: TrainConfig) -> tuple:
    """The faults injected, by flag (each None when not asked for): every strategy gets them."""
    return (("--inject-straggler", train.inject_straggler), ("--inject-stall", train.inject_stall),
            ("--inject-crash", train.inject_crash))  # fmt: skip


def plan(cfg: BenchConfig) -> tuple[list[PlannedRun], list[dict]]:
    """The runs to make, and the strategies left out with why. Raises ValueError (one line)
    when a run could not start, before any run starts."""
    runs: list[PlannedRun] = []
    left_out: list[dict] = []
    for s in cfg.strategies:
        if s == "dp" and cfg.gpu_count < 2:
            left_out.append(
                {"strategy": "dp", "why": f"nn.DataParallel splits a batch over 2 or more GPUs; {cfg.gpu_count} visible here"}
            )
            continue
        ranks = 1 if s in ("single", "dp") else cfg.nproc
        train = dataclasses.replace(cfg.train, strategy=s)
        for flag, fault in _faults(train):
            if fault is not None and fault.rank >= ranks:
                # Said as the trainer says it, "rank 1 does not exist in a world of 1", it read
                # as a mistake of --nproc 2's: the fault goes to single too, which has one rank.
                pick = "rank 0" if ranks == 1 else f"a rank below {ranks}"
                if len(cfg.strategies) > 1:  # (of the only one, "leave ddp out" left nothing to run)
                    pick += f", or leave {s} out of --strategies"
                elif s != "single" and s != "dp":
                    pick += " (or more ranks: --nproc)"
                raise ValueError(f"{flag} {fault}: the fault goes to every strategy, and {s} runs {ranks} rank{'' if ranks == 1 else 's'}: "
                                 f"rank {fault.rank} does not exist in a world of {ranks}; pick {pick}")  # fmt: skip
        if train.checkpoint_dir is not None:
            # Each strategy its own folder: in a shared one a strategy's saves land beside (or on)
            # the one's before it, its checkpoints of another strategy's model layout.
            train.checkpoint_dir = os.path.join(train.checkpoint_dir, s)
            check_checkpoint_dir(train.checkpoint_dir)
        train.check_world_size(ranks)
        runs.append(PlannedRun(strategy=s, ranks=ranks, devices=cfg.gpu_count if s == "dp" else ranks, train=train))
    if not runs:
        raise ValueError("nothing to run: " + "; ".join(f"{x['strategy']} left out: {x['why']}" for x in left_out))
    return runs, left_out


def run_one(run: PlannedRun, runs_dir: str) -> dict:
    """Launch one strategy, wait for it, and read its log."""
    spec = new_spec(
        log_path=None,
        runs_dir=runs_dir,
        nproc=run.ranks,
        command=[*TRAINER_COMMAND, *run.train.to_argv()],
        strategy=run.strategy,
        world_size=run.ranks,
    )
    spec.output = os.path.join(spec.run_dir, "output.log")
    job = start(spec)
    stopped = ""
    try:
        code = job.wait()
    except KeyboardInterrupt:
        # SIGINT, as launch's Ctrl-C: the supervisor says the job was stopped by you (130). Its
        # SIGTERM before said "stopped by SIGTERM" (143) of the user's Ctrl-C.
        job.stop(signal.SIGINT)
        try:
            code = job.wait()
        except KeyboardInterrupt:  # again: not waiting; the supervisor, in a session of its own, stops it
            code = 128 + signal.SIGINT
        stopped = job.result().get("stopper") or "by you"
    report = build_report(spec.log_path) if os.path.exists(spec.log_path) else None
    res = {
        "strategy": run.strategy,
        "ranks": run.ranks,
        "devices": run.devices,
        "code": code,
        "log": spec.log_path,
        "output": spec.output,
        "report": report,
    }
    if stopped:
        res["stopped"] = stopped
    return res


def _steps(n: int) -> str:
    return f"{n} step{'' if n == 1 else 's'}"


def run_said(res: dict, took: float, steps: int | None = None) -> str:
    """What became of one strategy's run (:func:`run_one`'s ``res``, ``took`` seconds), as its
    progress line ends. A run that exited 0 failed nothing: without a steady samples/s it took
    too few steps for one, or none ("failed with exit code 0" of a resumed run with nothing
    left to train). ``steps``: the steps asked for."""
    rep, code = res.get("report"), res.get("code")
    where = f"({took:.0f} s); see {res.get('output')}"
    if res.get("stopped"):
        after = f" after {_steps(rep['steps'])}" if rep and rep["steps"] else ""
        log = f", log {res['log']}" if rep else ""
        return f"stopped {res['stopped']}{after} ({took:.0f} s){log}"
    if code:
        return f"failed with exit code {code} {where}"
    if rep is None:
        return f"exit code 0 but no log was written {where}"
    if rep["steady_samples_per_s"]:
        return (f"{_steps(rep['steps'])}, {rep['steady_samples_per_s']:,.0f} samples/s, "
                f"{rep['median_step_s'] * 1e3:.1f} ms/step ({took:.0f} s), log {res['log']}")  # fmt: skip
    if not rep["steps"]:
        resumed = [r["step"] for r in rep["checkpoints"]["resumed"] if r.get("step") is not None]
        of = f" of {steps}" if steps else ""
        why = f": resumed at step {max(resumed)}{of}" if resumed else ""
        return f"trained no step{why} {where}"
    return f"{_steps(rep['steps'])}: too few for a steady samples/s {where}"


def run_bench(cfg: BenchConfig, *, progress: TextIO | None = None) -> dict:
    """Run every planned strategy; one progress line each on ``progress``; the bench dict."""
    out = progress if progress is not None else sys.stderr
    runs, left_out = plan(cfg)
    for left in left_out:
        print(f"bench: {left['strategy']} left out: {left['why']}", file=out, flush=True)
    results = []
    stopped = ""
    for i, run in enumerate(runs, start=1):
        if stopped:  # (a stop is of the whole bench: the strategies after it are not run)
            left_out.append({"strategy": run.strategy, "why": f"not run: the bench was stopped {stopped} during {results[-1]['strategy']}"})
            continue
        print(f"bench [{i}/{len(runs)}] {run.strategy} x{run.ranks}: running...", end="", file=out, flush=True)
        t0 = time.monotonic()
        try:
            res = run_one(run, cfg.runs_dir)
        except LaunchError as exc:
            print(f" could not start: {exc}", file=out, flush=True)
            results.append({"strategy": run.strategy, "ranks": run.ranks, "devices": run.devices, "code": 2, "report": None, "error": str(exc)})
            continue
        except KeyboardInterrupt:  # before its job was up (start() stopped it): no log to read
            res = {"strategy": run.strategy, "ranks": run.ranks, "devices": run.devices, "code": 128 + signal.SIGINT, "report": None, "stopped": "by you"}
        # A Ctrl-C ends the bench with the table of the strategies run so far, the stopped one's
        # row among them (before, it printed no table and wrote no JSON of those that had run).
        stopped = res.get("stopped") or ""
        print(f" {run_said(res, time.monotonic() - t0, cfg.train.steps)}", file=out, flush=True)
        results.append(res)
    reps = [r["report"] for r in results if r.get("report")]
    first = reps[0] if reps else {}
    model = cfg.train.model
    if first.get("params_count"):
        model = f"{model} {first['params_count']:,} params"
    bench = {
        "model": model,
        "config": cfg.train.to_dict() | {"strategy": None},
        "steps": cfg.train.steps,
        "nproc": cfg.nproc,
        "device": (first.get("device_name") or first.get("device") or cfg.train.device) if first else cfg.train.device,
        "left_out": left_out,
        "rows": strategy_rows(results),
        "runs": [{k: r.get(k) for k in ("strategy", "ranks", "code", "log")} for r in results],
    }
    for row, ran, res in zip(bench["rows"], bench["runs"], results):
        if res.get("stopped"):  # who stopped it: its exit code is no failure of the strategy's
            row["stopped"] = ran["stopped"] = res["stopped"]
    if stopped:
        bench["stopped"] = stopped
    path = os.path.join(cfg.runs_dir, f"bench-{registry.new_run_id()}.json")
    try:
        os.makedirs(cfg.runs_dir, exist_ok=True)
        with open(path, "w") as fh:
            json.dump(bench, fh, indent=2)
        bench["path"] = os.path.abspath(path)
        print(f"bench: results in {bench['path']}", file=out, flush=True)
    except OSError as exc:
        print(f"bench: could not write {path}: {exc.strerror or exc}", file=out, flush=True)
    return bench


__all__ = ["BenchConfig", "PlannedRun", "plan", "run_bench", "run_one", "run_said"]
