"""The bundled trainer as a user runs it without pardash: one plain process without a hub (no
PARDASH_ENDPOINT). It exits 0 and its loss falls. (2 ranks: tests/test_launch.py.)"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest

from helpers import pardash_env, wait_for

LOSS = re.compile(r"^step\s+(\d+)/\d+ .*\| loss ([0-9.]+)", re.M)


def losses(stdout: str) -> list[tuple[int, float]]:
    return [(int(s), float(v)) for s, v in LOSS.findall(stdout)]


def assert_learns(stdout: str, vocab: int = 64) -> None:
    seen = losses(stdout)
    assert len(seen) >= 3, stdout
    first, last = seen[0][1], seen[-1][1]
    # The first loss is about ln(vocab): the model starts knowing nothing ...
    assert abs(first - math.log(vocab)) < 0.3, seen
    # ... and it learns the hidden rule: the loss falls well below that.
    assert last < first - 1.0, seen


@pytest.mark.slow
def test_single_process_trains_and_exits_0():
    proc = subprocess.run(
        [sys.executable, "-m", "pardash.trainer.train", "--strategy", "single", "--steps", "30",
         "--log-every", "5"],
        capture_output=True, text=True, env=pardash_env(OMP_NUM_THREADS="1"), timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_learns(proc.stdout)
    assert "done: 30 steps" in proc.stdout


def test_bad_flags_exit_2_with_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "pardash.trainer.train", "--n-embd", "64", "--n-head", "5"],
        capture_output=True, text=True, env=pardash_env(OMP_NUM_THREADS="1"), timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "--n-embd 64 is not divisible by --n-head 5; pick a head count that divides the width"
    )
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_warmup_longer_than_the_run_and_one_rank_of_fsdp_are_said_once(tmp_path):
    # --warmup-steps 10 --steps 3 trained at a fraction of --lr without a word; fsdp on one rank
    # saved nothing without a word (dp's single replica had a note, printed twice).
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--strategy", "fsdp", "--nproc", "1", "--model", "mlp",
         "--steps", "3", "--warmup-steps", "10", "--log-every", "0", "--log", str(tmp_path / "run.jsonl"), "--runs-dir", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert out.count("--warmup-steps 10 is longer than the run's 3 steps: the learning rate never reaches --lr") == 1, out
    assert out.count("fsdp: one rank holds every shard, so nothing is saved") == 1, out


@pytest.mark.slow
def test_a_disk_full_under_its_output_costs_lines_never_the_training_and_is_said(hub, tmp_path):
    # Under `pardash launch` a rank's output goes to a file in the run's folder: on a disk that
    # filled, the rank died at its next print (OSError: No space left on device). Then it
    # trained on, but its output (and the launch's terminal) stopped mid-line without a word.
    from pardash.telemetry import schema
    from pardash.telemetry.logreader import load_log

    env = pardash_env(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PARDASH_ENDPOINT=hub.ingest_endpoint, PARDASH_RUN_ID="test-run")
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "pardash.trainer.train", "--strategy", "single", "--steps", "5", "--log-every", "1"],
            stdout=full, stderr=full, env=env, timeout=300,
        )  # fmt: skip
    assert proc.returncode == 0

    def warnings():
        msgs = load_log(tmp_path / "telemetry.jsonl")[0]
        return [m.message for m in msgs if isinstance(m, schema.Event) and m.name == "warning" and m.rank == 0]

    wait_for(lambda: any(isinstance(m, schema.Event) and m.name == "exit" for m in load_log(tmp_path / "telemetry.jsonl")[0]))
    assert warnings() == ["its output cannot be written (No space left on device): its lines are lost until the disk has room"]


def test_an_unbreakable_stream_drops_what_a_full_disk_refuses_and_goes_quiet_on_a_broken_pipe():
    import io

    from pardash.telemetry.streams import Unbreakable

    # (unbuffered, as a rank's streams are under the launcher: PYTHONUNBUFFERED=1)
    with io.TextIOWrapper(io.FileIO("/dev/full", "w"), write_through=True) as full:
        s = Unbreakable(full)
        assert s.write("a line\n") == 7 and not s.broken  # the disk may have room again later
    r, w = os.pipe()
    os.close(r)
    pipe = io.TextIOWrapper(io.FileIO(w, "w"), write_through=True)
    s = Unbreakable(pipe)
    s.write("to nobody\n")
    assert s.broken
    s.write("still nobody\n")
    s.flush()
    pipe.close()


def test_an_injected_stall_fires_on_the_first_attempt_only(tmp_path):
    # As the injected crash: after torchrun's restart (--max-restarts) the run goes on. The
    # stall fired again on every attempt, so the recovery it was there to show never came.
    from helpers import trainer_forks

    argv = ["--strategy", "single", "--model", "mlp", "--steps", "3", "--inject-stall", "0@2"]
    proc = trainer_forks.run(argv, env=pardash_env(TORCHELASTIC_RESTART_COUNT="1"), timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done: 3 steps" in proc.stdout, proc.stdout[-2000:]
