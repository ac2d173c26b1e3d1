"""``pardash bench``: which strategies run and why one is left out, the table's arithmetic, and
a real bench of single, DDP and FSDP on gloo (FSDP holds half of DDP's parameters a rank)."""

from __future__ import annotations

import glob
import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from helpers import pardash_env
from pardash.telemetry.bench_table import render_bench_markdown, strategy_rows
from pardash.telemetry.report import build_report
from pardash.trainer.bench import BenchConfig, plan
from pardash.trainer.config import TrainConfig

DATA = Path(__file__).resolve().parent / "data"


def _cfg(strategies, gpus=0, **train) -> BenchConfig:
    return BenchConfig(strategies=strategies, nproc=2, train=TrainConfig(steps=20, **train), gpu_count=gpus)


def test_dp_is_left_out_below_two_gpus_and_says_why():
    runs, left = plan(_cfg(["single", "dp", "ddp", "fsdp"], gpus=1))
    assert [(r.strategy, r.ranks) for r in runs] == [("single", 1), ("ddp", 2), ("fsdp", 2)]
    assert left == [{"strategy": "dp", "why": "nn.DataParallel splits a batch over 2 or more GPUs; 1 visible here"}]


def test_dp_runs_one_process_over_every_gpu():
    runs, left = plan(_cfg(["single", "dp"], gpus=4))
    assert left == [] and [(r.strategy, r.ranks, r.devices) for r in runs] == [("single", 1, 1), ("dp", 1, 4)]
    assert all(r.train.strategy == r.strategy and r.train.steps == 20 for r in runs)


@pytest.mark.parametrize(
    "strategies, train, needle",
    [
        ([], {}, "--strategies is empty"),
        (["single", "zero3"], {}, "'zero3' is not one of"),
        (["ddp", "ddp"], {}, "each strategy once"),
        (["dp"], {}, "nothing to run: dp left out"),
        (["single", "ddp"], {"inject_straggler": "1:data:0.1"}, "rank 1 does not exist in a world of 1"),
    ],
)
def test_a_bench_that_cannot_run_says_why_before_running(strategies, train, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(")):
        plan(_cfg(strategies, **train))


def test_table_arithmetic_saving_against_ddp_and_scaling_against_single():
    ddp = build_report(str(DATA / "real_ddp2.jsonl"))
    fsdp = build_report(str(DATA / "real_fsdp2.jsonl"))
    single = json.loads(json.dumps(ddp))  # a pretend single run: DDP's memory, one rank at 500 samples/s
    single["steady_samples_per_s"] = 500.0
    results = [
        {"strategy": "single", "ranks": 1, "devices": 1, "code": 0, "report": single},
        {"strategy": "ddp", "ranks": 2, "devices": 2, "code": 0, "report": ddp},
        {"strategy": "fsdp", "ranks": 2, "devices": 2, "code": 0, "report": fsdp},
        {"strategy": "dp", "ranks": 1, "devices": 2, "code": 1, "report": None},
    ]
    rows = {r["strategy"]: r for r in strategy_rows(results)}
    assert rows["ddp"]["saving_vs_ddp"] == 0
    assert rows["single"]["saving_vs_ddp"] is None  # it shards nothing ("20%": DDP's buckets)
    held = lambda rep: max(r["held_bytes"] for r in rep["ranks"])  # noqa: E731
    assert rows["fsdp"]["saving_vs_ddp"] == pytest.approx(1 - held(fsdp) / held(ddp))
    assert rows["fsdp"]["params_bytes"] * 2 == pytest.approx(rows["ddp"]["params_bytes"], rel=0.01)
    assert rows["single"]["scaling_efficiency"] == 1
    assert rows["ddp"]["scaling_efficiency"] == pytest.approx(ddp["steady_samples_per_s"] / 2 / 500.0)
    md = render_bench_markdown({"model": "gpt", "steps": 12, "nproc": 2, "device": "cpu", "left_out": [], "rows": list(rows.values())})
    assert "| dp | 1 | failed (exit code 1) |" in md
    assert ("scaled" in md) == any(r["scaling_efficiency"] and r["scaling_efficiency"] > 1.1 for r in rows.values())
    # A busy host made single slow: "ddp 339%" read as a speed-up of sharding; now it is told.
    slow = json.loads(json.dumps(results))
    slow[0]["report"]["steady_samples_per_s"] = ddp["steady_samples_per_s"] / 6
    fast = {r["strategy"]: r for r in strategy_rows(slow)}
    md = render_bench_markdown({"model": "gpt", "steps": 12, "nproc": 2, "device": "cpu", "left_out": [], "rows": list(fast.values())})
    assert "- ddp scaled 300% of single a device: more than 100% says single ran slower than its share" in md
    # A run that failed part-way has a report of the steps it took: no results from it, and no
    # baseline (a crash at step 5 read as a valid row, and 1199% scaling beside it).
    crashed = json.loads(json.dumps(ddp))
    crashed["steps"] = 4
    results[0] = {"strategy": "single", "ranks": 1, "devices": 1, "code": 1, "report": crashed}
    rows = {r["strategy"]: r for r in strategy_rows(results)}
    assert rows["single"].get("samples_per_s") is None and rows["ddp"]["scaling_efficiency"] is None
    md = render_bench_markdown({"model": "gpt", "steps": 12, "nproc": 2, "device": "cpu", "left_out": [], "rows": list(rows.values())})
    assert "| single | 1 | failed (exit code 1, after 4 steps) |" in md


def _bench(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pardash", "bench", "--runs-dir", str(tmp_path / "runs"), *args],
        capture_output=True, text=True, timeout=600, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--strategy", "fsdp"], "not --strategy"),
        (["--strategies", "single,zero3"], "'zero3' is not one of"),
        (["--nproc", "0"], "--nproc 0"),
        (["--epochs", "0"], "--epochs must be at least 1"),
        (["--epochs", "1", "--steps", "3"], "not both"),
        # What launch refuses up front, the bench did only after running each strategy.
        (["--runs-dir", "a_file"], "--runs-dir a_file is a file"),
        # Resumed, ddp found single's checkpoint at the last step: "failed with exit code 0".
        (["--strategies", "single,ddp", "--checkpoint-dir", "ck", "--resume"], "--resume: bench runs each strategy over"),
    ],
)
def test_bench_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    (tmp_path / "a_file").write_text("")
    p = _bench(tmp_path, *args)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args, steps, epochs", [([], 50, None), (["--epochs", "2"], None, 2), (["--steps", "7"], 7, None)])
def test_bench_runs_its_own_default_steps_or_the_epochs_asked_for(args, steps, epochs, monkeypatch, capsys):
    # --epochs always failed ("give --steps or --epochs, not both"): the bench's default of 50
    # steps was in place before the trainer's config saw the flags.
    from pardash import cli
    from pardash.trainer import bench

    seen = []

    def run_bench(cfg, progress=None):
        seen.append(cfg)
        return {"rows": [{"code": 0}]}

    monkeypatch.setattr(bench, "run_bench", run_bench)
    assert cli.main(["bench", "--strategies", "single", "--format", "json", *args]) == 0
    (cfg,) = seen
    assert (cfg.train.steps, cfg.train.epochs) == (steps, epochs)


@pytest.mark.slow
def test_bench_single_ddp_fsdp_on_two_ranks(tmp_path):
    p = _bench(tmp_path, "--strategies", "single,ddp,fsdp", "--nproc", "2", "--steps", "20", "--format", "markdown",
               "--n-embd", "32", "--seq-len", "16", "--dataset-size", "512", "--batch-size", "8")
    assert p.returncode == 0, p.stderr[-3000:]
    progress = [line for line in p.stderr.splitlines() if line.startswith("bench [")]
    assert len(progress) == 3 and all("20 steps" in line and "samples/s" in line for line in progress), p.stderr
    rows = {}
    for line in p.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] in ("single", "ddp", "fsdp"):
            rows[cells[0]] = cells
    assert list(rows) == ["single", "ddp", "fsdp"], p.stdout
    head = [c.strip() for c in p.stdout.splitlines()[2].strip().strip("|").split("|")]
    col = {name: i for i, name in enumerate(head)}
    assert rows["single"][col["ranks"]] == "1" and rows["ddp"][col["ranks"]] == "2" and rows["fsdp"][col["ranks"]] == "2"
    assert rows["ddp"][col["saving vs DDP"]] == "0%" and rows["single"][col["scaling vs single"]] == "100%"
    for name in rows:
        assert float(rows[name][col["samples/s"]].replace(",", "")) > 0
    # FSDP holds half of DDP's parameters a rank: exactly, from the bench's JSON...
    (path,) = glob.glob(str(tmp_path / "runs" / "bench-*.json"))
    bench = {r["strategy"]: r for r in json.loads(Path(path).read_text())["rows"]}
    assert bench["fsdp"]["params_bytes"] * 2 == pytest.approx(bench["ddp"]["params_bytes"], rel=0.01)
    assert bench["ddp"]["params_bytes"] == bench["single"]["params_bytes"] == bench["ddp"]["params_full_bytes"]
    assert bench["fsdp"]["saving_vs_ddp"] > 0.5
    # ...and as the table prints it
    kib = {name: float(rows[name][col["params/rank"]].split()[0]) for name in ("ddp", "fsdp")}
    assert kib["fsdp"] * 2 == pytest.approx(kib["ddp"], rel=0.01)
    # each strategy's run is a normal run with a log that `pardash report` reads
    for run in json.loads(Path(path).read_text())["runs"]:
        assert run["code"] == 0 and build_report(run["log"])["steps"] == 20


def test_compare_shows_restarts_recovered_failures_and_the_loss():
    # A run torchrun restarted after a crash compared "same" on every health row: a restart
    # and the failure behind it were nowhere, and neither was the loss either run reached.
    from pardash.telemetry.compare import compare_reports, render_compare_text

    a = build_report(str(DATA / "real_ddp2.jsonl"))
    b = json.loads(json.dumps(a))
    b["job_restarts"] = 1
    b["recovered"] = [{"line": "rank 1 exited with code 1 at step 30: InjectedCrash"}]
    for r in b["ranks"]:
        r["last_loss"] = r["last_loss"] + 0.5
    rows = {r["metric"]: r for r in compare_reports(a, b)["rows"]}
    assert (rows["job_restarts"]["a"], rows["job_restarts"]["b"], rows["job_restarts"]["verdict"]) == (0, 1, "worse")
    assert (rows["recovered"]["b"], rows["recovered"]["verdict"]) == (1, "worse")
    assert rows["last_loss"]["delta"] == pytest.approx(0.5) and rows["last_loss"]["verdict"] == "worse"
    assert rows["phase:self_s"]["verdict"] == ""  # the straggler signal, not a speed
    text = render_compare_text(compare_reports(a, b))
    assert "torchrun restarts" in text and "loss at the last step" in text


def test_runs_that_ended_at_different_steps_have_their_losses_shown_not_judged():
    # A run that crashed at step 20 against one that went on to 60: "loss at the last step
    # 0.91 vs 1.81, worse" judged step 60 against step 19, and a longer run read "better".
    from pardash.telemetry.compare import compare_reports, render_compare_markdown, render_compare_text

    a = build_report(str(DATA / "real_ddp2.jsonl"))
    b = json.loads(json.dumps(a))
    b["last_step"] = a["last_step"] - 10
    for r in b["ranks"]:
        r["last_loss"] = r["last_loss"] + 0.5
        r["last_step"] = b["last_step"]
    cmp = compare_reports(a, b)
    rows = {r["metric"]: r for r in cmp["rows"]}
    assert rows["last_loss"]["delta"] == pytest.approx(0.5) and rows["last_loss"]["verdict"] == ""
    assert rows["median_step_s"]["verdict"] == "same"  # the rest is judged as before
    said = f"the runs ended at different steps (A {a['last_step']}, B {b['last_step']})"
    assert said in render_compare_text(cmp) and said in render_compare_markdown(cmp)
    assert all(line == line.rstrip() for line in render_compare_text(cmp).splitlines())  # (for grep and diff)
    # (a log that names its pardash version: one that names none has a note of it)
    versioned = a | {"pardash_version": "0.1.0"}
    assert compare_reports(versioned, json.loads(json.dumps(versioned)))["notes"] == []
    # The header says the step each run ended at where its step count is not it ("B (ddp x2,
    # 60 steps)" beside "B 50" in the note).
    assert a["steps"] == a["last_step"]
    assert f"A: {a['run_id']} (ddp x2, {a['steps']} steps)" in render_compare_text(cmp)
    assert f"B: {b['run_id']} (ddp x2, {b['steps']} steps, to step {b['last_step']})" in render_compare_text(cmp)
    assert f"(ddp x2, {b['steps']} steps, to step {b['last_step']})" in render_compare_markdown(cmp)


def test_a_cpu_runs_peak_rss_is_not_judged_against_a_gpu_runs_cuda_peak():
    # A run on CPU (peak: the process RSS) against one on GPU (the CUDA allocator's peak):
    # "peak memory a rank 354 MiB vs 5.6 GiB, worse" set two different figures side by side.
    from pardash.telemetry.compare import compare_reports, render_compare_text

    a = build_report(str(DATA / "real_ddp2.jsonl"))
    assert a["memory"]["peak_kind"] == "rss"
    b = json.loads(json.dumps(a))
    b["memory"]["peak_kind"] = "cuda"
    for r in b["ranks"]:
        r["peak_bytes"] *= 10
    cmp = compare_reports(a, b)
    peak = next(r for r in cmp["rows"] if r["metric"] == "peak_bytes")
    assert peak["b"] == 10 * peak["a"] and (peak["better"], peak["verdict"]) == ("", "")
    assert "note: peak memory is the process RSS after a step in A, the CUDA allocator's peak in B: shown, not judged" in render_compare_text(cmp)
    same = {r["metric"]: r for r in compare_reports(a, json.loads(json.dumps(a)))["rows"]}
    assert same["peak_bytes"]["verdict"] == "same"


def _diverged_on(rep: dict, bad: dict[int, tuple[str, int]], last_step: int | None = None) -> dict:
    """A copy of report ``rep`` whose ranks in ``bad`` ended with their loss not finite:
    rank -> (value, step), as the report says it (``loss_not_finite``, no last loss)."""
    out = json.loads(json.dumps(rep))
    for r in out["ranks"]:
        if r["rank"] in bad:
            value, step = bad[r["rank"]]
            r["last_loss"], r["loss_not_finite"] = None, {"value": value, "step": step}
    if last_step is not None:
        out["last_step"] = last_step
    return out


def test_a_run_with_one_diverged_rank_is_worse_than_one_with_none():
    # Rank 1 NaN, rank 0 finite and lower: the finite rank's median was judged alone, and the
    # run that diverged read "better" than one whose ranks are all finite, its cell a number.
    from pardash.telemetry.compare import compare_reports, render_compare_text

    good = build_report(str(DATA / "real_ddp2.jsonl"))
    assert [r["rank"] for r in good["ranks"]] == [0, 1]
    half = _diverged_on(good, {1: ("nan", 12)})
    half["ranks"][0]["last_loss"] = good["ranks"][0]["last_loss"] / 2
    median = half["ranks"][0]["last_loss"]
    cmp = compare_reports(good, half)
    (row,) = [r for r in cmp["rows"] if r["metric"] == "last_loss"]
    assert (row["b_not_finite"], row["verdict"]) == (f"{median:.4f} (1 of 2 nan)", "worse")
    assert "a_not_finite" not in row
    assert row["delta"] is None and row["change"] is None  # (the medians' "-x%" beside "worse" misled)
    text = render_compare_text(cmp)
    line = next(line for line in text.splitlines() if line.startswith("loss at the last step"))
    assert line.split()[-1] == "worse" and f"{median:.4f} (1 of 2 nan)" in line, text
    assert "note: B's loss was not finite from step 12 to its end on rank 1 (nan at 12): it diverged" in text
    (row,) = [r for r in compare_reports(half, good)["rows"] if r["metric"] == "last_loss"]
    assert (row["a_not_finite"], row["verdict"]) == (f"{median:.4f} (1 of 2 nan)", "better")
    # Both diverged somewhere (one on every rank or not): not judged.
    other = _diverged_on(good, {0: ("nan", 20)})
    every = _diverged_on(good, {0: ("nan", 3), 1: ("nan", 3)})
    for a, b in ((half, other), (other, half), (half, every), (every, half)):
        (row,) = [r for r in compare_reports(a, b)["rows"] if r["metric"] == "last_loss"]
        assert row["verdict"] == "", (row, a["ranks"], b["ranks"])


def test_runs_ended_at_different_steps_keep_their_note_unless_a_divergence_judged_the_loss():
    # The note went whenever either run diverged, although the row was then not judged at all
    # where both had.
    from pardash.telemetry.compare import compare_reports

    good = build_report(str(DATA / "real_ddp2.jsonl"))
    end = good["last_step"]
    said = f"the runs ended at different steps (A {end}, B {end - 10}): their last losses are shown, not judged"
    half = _diverged_on(good, {1: ("nan", 12)})
    both = (_diverged_on(good, {0: ("nan", 5)}), _diverged_on(good, {1: ("nan", 12)}, last_step=end - 10))
    cmp = compare_reports(*both)
    (row,) = [r for r in cmp["rows"] if r["metric"] == "last_loss"]
    assert row["verdict"] == "" and said in cmp["notes"], cmp["notes"]
    every = (_diverged_on(good, {0: ("nan", 5), 1: ("nan", 5)}), _diverged_on(good, {0: ("nan", 4), 1: ("nan", 4)}, last_step=end - 10))
    assert said in compare_reports(*every)["notes"]
    # One run diverged: its verdict is the divergence's, at any step, and the note would deny it.
    cmp = compare_reports(good, _diverged_on(half, {}, last_step=end - 10))
    (row,) = [r for r in cmp["rows"] if r["metric"] == "last_loss"]
    assert row["verdict"] == "worse" and not any("different steps" in n for n in cmp["notes"]), cmp["notes"]


def test_ranks_diverged_to_different_values_are_said_each_with_its_own_step():
    # Rank 0 inf from step 9, rank 1 nan from step 4: the row read "inf" as for every rank,
    # and the note "B's loss was inf from step 4", rank 0's value at rank 1's step.
    from pardash.telemetry.compare import compare_reports, render_compare_text

    good = build_report(str(DATA / "real_ddp2.jsonl"))
    mixed = _diverged_on(good, {0: ("inf", 9), 1: ("nan", 4)})
    cmp = compare_reports(good, mixed)
    (row,) = [r for r in cmp["rows"] if r["metric"] == "last_loss"]
    assert (row["b_not_finite"], row["verdict"]) == ("nan/inf", "worse")
    text = render_compare_text(cmp)
    assert "note: B's loss was not finite from step 4 on rank 1 (nan at 4) and from step 9 on rank 0 (inf at 9), to its end: it diverged" in " ".join(text.split()), text  # (a long note wraps)
    # The same value on every rank: the step of the first rank to turn, and its value.
    same = _diverged_on(good, {0: ("inf", 9), 1: ("inf", 4)})
    assert "B's loss was not finite from step 4 to its end (inf at 4): it diverged" in compare_reports(good, same)["notes"]
    # Three ranks, two diverged to different values: the cell says how many, and which values.
    three = json.loads(json.dumps(good))
    three["ranks"].append({**three["ranks"][1], "rank": 2})
    three = _diverged_on(three, {1: ("-inf", 7), 2: ("nan", 7)})
    (row,) = [r for r in compare_reports(good, three)["rows"] if r["metric"] == "last_loss"]
    assert row["b_not_finite"] == f"{good['ranks'][0]['last_loss']:.4f} (2 of 3 -inf/nan)"
    assert "B's loss was not finite from step 7 on rank 1 (-inf at 7) and from step 7 on rank 2 (nan at 7), to its end: it diverged" in compare_reports(good, three)["notes"]


def test_a_diverged_runs_loss_is_compact_in_the_comparison():
    # A run whose loss went to 1e308 printed it in full in --compare's table (300 digits in a
    # cell, and as many in B - A), as the report did.
    from pardash.telemetry.compare import compare_reports, render_compare_markdown, render_compare_text

    a = build_report(str(DATA / "real_ddp2.jsonl"))
    b = json.loads(json.dumps(a))
    for r in b["ranks"]:
        r["last_loss"] = 1e308
    cmp = compare_reports(a, b)
    for text in (render_compare_text(cmp), render_compare_markdown(cmp)):
        (line,) = [line for line in text.splitlines() if "loss at the last step" in line]
        assert "1.000e+308" in line and len(line) < 160, line


def _bench_of_fixtures() -> dict:
    ddp = build_report(str(DATA / "real_ddp2.jsonl"))
    fsdp = build_report(str(DATA / "real_fsdp2.jsonl"))
    rows = strategy_rows([{"strategy": "ddp", "ranks": 2, "devices": 2, "code": 0, "report": ddp},
                          {"strategy": "fsdp", "ranks": 2, "devices": 2, "code": 0, "report": fsdp}])  # fmt: skip
    return {"model": "gpt", "steps": 12, "nproc": 2, "device": "cpu", "left_out": [], "rows": rows}


def test_the_bench_says_what_comm_is_and_why_its_saving_is_not_the_reports():
    # Review 244: the bench's note said comm is "time waiting on communication" where the report
    # of the same run says it is the time in the collectives, within forward and backward (the
    # phases summed past the step, unexplained); and fsdp's "saving vs DDP 60%" stood beside
    # its report's "saving from sharding 50.0%" with no word of why.
    from pardash.telemetry.report_render import COMM_NOTES, memory_rows

    bench = _bench_of_fixtures()
    md = render_bench_markdown(bench)
    assert "waiting on communication" not in md
    assert f"- step and phase times: medians over steps and ranks. {COMM_NOTES['trainer']}" in md
    assert "the phases sum past the step" in md
    fsdp = build_report(str(DATA / "real_fsdp2.jsonl"))
    assert ("saving from sharding, against its state unsharded", "50.0%") in memory_rows(fsdp)  # the report's figure
    rows = {r["strategy"]: r for r in bench["rows"]}
    assert rows["fsdp"]["saving_vs_unsharded"] == fsdp["memory"]["saving_vs_unsharded"] and rows["ddp"]["saving_vs_unsharded"] is None
    assert "| 60% |" in md
    assert ("- fsdp saves 60% against DDP and 50% against its own state unsharded (its report's figure): the gap is DDP's "
            "gradient buckets, 415.0 KiB a rank, counted in DDP's held bytes.") in md
    assert "- saving vs DDP: held bytes a rank of a sharded strategy against DDP's, DDP's gradient buckets counted" in md
    # Without a DDP row there is no saving against it, and no line setting the two side by side.
    alone = bench | {"rows": [r for r in bench["rows"] if r["strategy"] == "fsdp"]}
    assert "fsdp saves" not in render_bench_markdown(alone)


def _moved(rep: dict, **scale: float) -> dict:
    """A copy of report ``rep`` with the run's figures ``scale``d: phase names (data_s, ...) or
    median_step_s, peak_bytes (every rank's), held_bytes (every rank's)."""
    out = json.loads(json.dumps(rep))
    for key, k in scale.items():
        if key in out["phases"]:
            out["phases"][key] *= k
        elif key == "median_step_s":
            out[key] *= k
        else:
            for r in out["ranks"]:
                r[key] = round(r[key] * k)
    return out


@pytest.mark.parametrize(
    "scale, metric, verdict",
    [
        # Review 244: "data 0.2 ms -> 0.2 ms, +3.3%" read "worse": 7 µs, under the timers' noise.
        ({"data_s": 1.033}, "phase:data_s", "same"),
        # 0.3 ms of a 39 ms step: past 50 µs, but under 1% of the step, which the step cannot show
        ({"data_s": 1.25}, "phase:data_s", "same"),
        ({"forward_s": 1.2}, "phase:forward_s", "worse"),  # 1.3 ms of 39: a change, judged
        ({"backward_s": 0.9}, "phase:backward_s", "better"),
        ({"median_step_s": 1.03}, "median_step_s", "worse"),  # the step itself: 1%, as before
        ({"median_step_s": 1.005}, "median_step_s", "same"),
        ({"held_bytes": 1.02}, "held_bytes", "worse"),  # counted bytes: a change past 1% is one
    ],
)
def test_compare_calls_noise_same_and_a_change_a_change(scale, metric, verdict):
    from pardash.telemetry.compare import compare_reports

    a = build_report(str(DATA / "real_ddp2.jsonl"))
    assert 0.035 < a["median_step_s"] < 0.045 and 0.0005 < a["phases"]["data_s"] < 0.002
    rows = {r["metric"]: r for r in compare_reports(a, _moved(a, **scale))["rows"]}
    assert rows[metric]["verdict"] == verdict, rows[metric]
    assert rows[metric]["change"] == pytest.approx(next(iter(scale.values())) - 1, rel=1e-3, abs=1e-4)  # (shown as it is)


def test_a_peak_a_few_mib_apart_is_the_same_and_one_further_is_not():
    # The process RSS moves by a few MiB between two runs of one script: a peak of 100 MiB
    # against 102 read "+2%, worse".
    from pardash.telemetry.compare import compare_reports

    a = build_report(str(DATA / "real_ddp2.jsonl"))
    for r in a["ranks"]:
        r["peak_bytes"] = 100 << 20
    for more, verdict in ((2 << 20, "same"), (10 << 20, "worse")):
        b = json.loads(json.dumps(a))
        for r in b["ranks"]:
            r["peak_bytes"] += more
        (row,) = [r for r in compare_reports(a, b)["rows"] if r["metric"] == "peak_bytes"]
        assert row["verdict"] == verdict, (more, row)


def test_the_benchs_step_and_phase_times_are_of_the_steps_after_the_warm_up(tmp_path):
    # Review 292: its samples/s and p90 left the warm-up out, its step ms and phase columns were
    # the report's medians of every step (single read 32.5 ms beside a p90 of 105.0, its steps
    # after the warm-up 10.6 at the median). 50 steps: the first 10 slow (the warm-up left out),
    # then 21 of 10 ms and 19 of 20 ms, half of each in data loading.
    from pardash.telemetry import schema
    from pardash.telemetry.bench_table import steady_figures

    log = tmp_path / "warm.jsonl"
    lines = [schema.Hello(rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=999.0, run="r") for r in (0, 1)]
    for n in range(1, 51):
        step_s = 9.0 if n <= 10 else 0.01 if n <= 31 else 0.02
        lines += [schema.Step(rank=r, step=n, step_s=step_s, data_s=step_s / 2, samples=8, loss=1.0, t=1000.0 + 9 * n, seq=n, run="r")
                  for r in (0, 1)]  # fmt: skip
    lines += [schema.Event(rank=r, seq=51, name="exit", code=0, t=1500.0, run="r") for r in (0, 1)]
    log.write_bytes(b"".join(schema.encode_json(m) + b"\n" for m in lines))
    rep = build_report(str(log))
    assert rep["median_step_s"] == pytest.approx(0.02) and rep["phases"]["data_s"] == pytest.approx(0.01)  # (every step's)
    (row,) = strategy_rows([{"strategy": "ddp", "ranks": 2, "devices": 2, "code": 0, "report": rep}])
    assert row["median_step_s"] == pytest.approx(0.01) and row["median_data_s"] == pytest.approx(0.005), row
    assert row["p90_step_s"] == pytest.approx(0.02)
    assert steady_figures(str(log))["median_step_s"] == pytest.approx(0.01)


def test_the_bench_shows_the_spread_of_each_strategys_steps(tmp_path):
    # Review 244: one run a strategy and medians alone, so a reader could not tell a difference
    # from noise (on a busy host, single's steps 100 ms at the median and 230-380 ms at p90 made
    # "scaling 307%" and, run again, "859%"). A run whose every fifth step is 10x slower: its
    # median is the fast steps', its p90 the slow ones'.
    from pardash.telemetry import schema
    from pardash.telemetry.bench_table import render_bench_text, steady_figures

    log = tmp_path / "spread.jsonl"
    lines = [schema.Hello(rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=999.0, run="r") for r in (0, 1)]
    for n in range(1, 51):
        step_s = 0.1 if n % 5 == 0 else 0.01
        lines += [schema.Step(rank=r, step=n, step_s=step_s, samples=8, loss=1.0, t=1000.0 + n, seq=n, run="r") for r in (0, 1)]
    lines += [schema.Event(rank=r, seq=51, name="exit", code=0, t=1051.0, run="r") for r in (0, 1)]
    log.write_bytes(b"".join(schema.encode_json(m) + b"\n" for m in lines))
    rep = build_report(str(log))
    (row,) = strategy_rows([{"strategy": "ddp", "ranks": 2, "devices": 2, "code": 0, "report": rep}])
    assert row["median_step_s"] == pytest.approx(0.01) and row["p90_step_s"] == pytest.approx(0.1)
    text = render_bench_text({"model": "gpt", "steps": 50, "nproc": 2, "device": "cpu", "left_out": [], "rows": [row]})
    head, ddp = text.splitlines()[1:3]
    assert head.split()[:7] == ["strategy", "ranks", "samples/s", "step", "ms", "p90", "ms"]
    assert ddp.split()[3:5] == ["10.0", "100.0"], text
    assert "p90 ms: 9 in 10 of the steps after the warm-up (every rank's) took at most this" in text
    # The warm-up's steps are left out, as the steady samples/s leaves them: 10 slow first steps
    # of 50 change nothing.
    slow_start = [m if not isinstance(m, schema.Step) or m.step > 10 else msgspec.structs.replace(m, step_s=9.0) for m in lines]
    log.write_bytes(b"".join(schema.encode_json(m) + b"\n" for m in slow_start))
    assert steady_figures(str(log))["p90_step_s"] == pytest.approx(0.1)
    # Too few steps for a 90th percentile, or no log: none.
    log.write_bytes(b"".join(schema.encode_json(m) + b"\n" for m in lines[:8]))
    assert steady_figures(str(log)) is None and steady_figures(str(tmp_path / "gone.jsonl")) is None
