"""``pardash bench`` stopped with Ctrl-C, and the flags it takes from the trainer (review 226):
a stop keeps the table and JSON of the strategies run before it, the stopped run is said stopped
by you as a launch's Ctrl-C is, and --help offers no --resume and says a fault goes to every
strategy."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from helpers import pardash_env, wait_for
from pardash import cli
from pardash.trainer.bench import BenchConfig, plan
from pardash.trainer.config import TrainConfig

# The bench as the CLI runs it, but with its last strategy stalled on rank 0 at step 3 (the
# other rank waits in its all-reduce): it is still running, however slow the host, when the
# test's Ctrl-C comes. (--inject-stall itself goes to every strategy, single's too.)
STALL_LAST = """
import sys
from pardash.trainer import bench
from pardash.trainer.config import RankStep

planned = bench.plan

def plan(cfg):
    runs, left_out = planned(cfg)
    runs[-1].train.inject_stall = RankStep.parse("0@3", flag="--inject-stall")
    return runs, left_out

bench.plan = plan
from pardash import cli
sys.exit(cli.main(sys.argv[1:]))
"""


def _stepped(log: str) -> bool:
    """Whether the run's log at ``log`` has a step record (its job is up and training)."""
    try:
        with open(log) as fh:
            return any('"kind":"step"' in line for line in fh)
    except OSError:
        return False


def test_ctrl_c_during_a_strategy_prints_the_table_so_far_and_says_stopped_by_you(tmp_path):
    # Before: stdout empty, no bench-*.json, exit 130; the stopped run's result.json said
    # "stopped by SIGTERM" (143) of the user's Ctrl-C.
    runs = tmp_path / "runs"
    p = subprocess.Popen(
        [sys.executable, "-c", STALL_LAST, "bench", "--strategies", "single,ddp", "--model", "mlp", "--nproc", "2",
         "--steps", "6", "--runs-dir", str(runs), "--format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env(), cwd=tmp_path,
        start_new_session=True,  # (its own process group: the Ctrl-C goes to it alone, as a terminal's does)
    )  # fmt: skip
    said: list[bytes] = []  # (as it comes: "[2/2] ddp x2: running..." has no line end until the run ends)
    reader = threading.Thread(target=lambda: said.extend(iter(lambda: os.read(p.stderr.fileno(), 4096), b"")), daemon=True)
    reader.start()
    err = lambda: b"".join(said).decode(errors="replace").splitlines()  # noqa: E731
    try:
        assert wait_for(lambda: any("[2/2] ddp" in line for line in err()) or p.poll() is not None, timeout_s=120), err()
        assert p.poll() is None, err()
        # ddp's run is the folder that is not single's (whose log the first line named)
        single_log = next(line for line in err() if "[1/2] single" in line).rsplit("log ", 1)[-1].strip()
        ddp_log = lambda: [x for x in glob.glob(str(runs / "*" / "telemetry.jsonl")) if x != single_log]  # noqa: E731
        assert wait_for(lambda: any(_stepped(x) for x in ddp_log()) or p.poll() is not None, timeout_s=120), err()
        os.killpg(p.pid, signal.SIGINT)
        out = p.stdout.read()
        p.wait(120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    reader.join(10)
    assert p.returncode == 130, err()
    bench = json.loads(out)
    single, ddp = bench["rows"]
    assert (single["strategy"], single["code"], single["steps"]) == ("single", 0, 6) and "stopped" not in single
    assert (ddp["strategy"], ddp["code"], ddp["stopped"]) == ("ddp", 130, "by you")
    assert bench["stopped"] == "by you" and bench["runs"][1]["stopped"] == "by you"
    (saved,) = glob.glob(str(runs / "bench-*.json"))
    assert json.loads(open(saved).read())["rows"] == bench["rows"]
    assert any("[2/2] ddp x2: running... stopped by you" in line for line in err()), err()
    (log,) = ddp_log()
    result = json.loads(open(os.path.join(os.path.dirname(log), "result.json")).read())
    assert (result["code"], result["stopped"], result["stopper"]) == (130, True, "by you")
    exits = [json.loads(line) for line in open(log) if '"name":"exit"' in line]
    notes = [e for e in exits if e["seq"] == -1]  # the launcher's word, for a rank that said none
    assert notes and all(e["message"] == "stopped by Ctrl-C at the launch" for e in notes), exits  # (what `pardash report` says of them)
    # torchrun signals its ranks one by one: on a busy host the stalled rank 0 can be gone before
    # rank 1's SIGTERM comes, and rank 1's all-reduce, its socket closed, fails first; it says
    # that exit itself (code 1, no "stopped by you": a CI run found one). Said after the stop
    # began, it is the stop's doing (outcome_line's stop_t), as the table and result.json say.
    assert all(e["t"] >= result["stop_t"] for e in exits if e["seq"] >= 0), (exits, result)


def test_bench_help_offers_no_resume_and_says_a_fault_goes_to_every_strategy(capsys):
    # It listed --resume, --no-resume ("Continue from the newest checkpoint ..."), which it refuses.
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--resume" not in text and "Continue from the newest checkpoint" not in text
    assert "--max-restarts" not in text  # (the trainer's --inject-crash help said to pair it with one bench lacks)
    for flag in ("--inject-straggler", "--inject-stall", "--inject-crash"):
        at = text.rindex(f"{flag} RANK")  # (its help, after the usage line)
        assert "Every strategy gets it: single and dp run one rank (rank 0)" in text[at : at + 400], flag


@pytest.mark.parametrize("fault", ["inject_crash", "inject_stall"])
def test_a_fault_on_a_rank_single_lacks_says_it_goes_to_every_strategy(fault):
    # It read "--inject-crash 1@3: rank 1 does not exist in a world of 1" with --nproc 2.
    cfg = BenchConfig(strategies=["single", "ddp"], nproc=2, train=TrainConfig(steps=6, **{fault: "1@3"}))
    with pytest.raises(ValueError) as e:
        plan(cfg)
    assert str(e.value) == (f"--{fault.replace('_', '-')} 1@3: the fault goes to every strategy, and single runs 1 rank: "
                            "rank 1 does not exist in a world of 1; pick rank 0, or leave single out of --strategies")  # fmt: skip
    assert plan(BenchConfig(strategies=["ddp"], nproc=2, train=TrainConfig(steps=6, **{fault: "1@3"})))[0][0].ranks == 2
    # Of the only strategy listed, "leave ddp out of --strategies" left nothing to run.
    with pytest.raises(ValueError) as e:
        plan(BenchConfig(strategies=["ddp"], nproc=2, train=TrainConfig(steps=6, **{fault: "2@3"})))
    assert str(e.value).endswith("rank 2 does not exist in a world of 2; pick a rank below 2 (or more ranks: --nproc)"), str(e.value)


def test_a_strategy_stopped_with_ctrl_c_reads_stopped_in_the_table_not_failed():
    # Its row read "failed (exit code 130, after 2 steps)": the strategy blamed for the user's stop.
    from pardash.telemetry.bench_table import bench_cells

    row = {"strategy": "ddp", "ranks": 2, "samples_per_s": None, "steps": 2, "code": 130, "stopped": "by you"}
    assert bench_cells(row)[:3] == ["ddp", "2", "stopped by you, after 2 steps"]
    assert bench_cells({**row, "stopped": None})[2] == "failed (exit code 130, after 2 steps)"
