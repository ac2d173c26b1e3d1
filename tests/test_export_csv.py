"""`pardash export LOG --csv FILE`: the steps as one table for pandas, R or a spreadsheet (review
307: the export was TensorBoard's only). Every step record of the log is a row, its figures the
TensorBoard export's by the same names; a loss that was not finite reads nan or inf, not a gap."""

from __future__ import annotations

import csv
import io
import math
import subprocess
import sys
from pathlib import Path

from helpers import pardash_env

from pardash.telemetry import schema
from pardash.telemetry.export import CSV_BASE, export_csv, step_scalars
from pardash.telemetry.logreader import load_log

DATA = Path(__file__).parent / "data"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pardash", "export", *args], capture_output=True, text=True, timeout=120,
                          env=pardash_env(), cwd=cwd)  # fmt: skip


def test_every_step_of_the_log_is_a_row_with_its_figures(tmp_path):
    log = DATA / "real_ddp2.jsonl"
    p = _cli(str(log), "--csv", "steps.csv", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("pardash: wrote 24 rows of ") and "to steps.csv (steps rank 0: 12, rank 1: 12)" in p.stdout, p.stdout
    with open(tmp_path / "steps.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    steps = [m for m in load_log(log)[0] if isinstance(m, schema.Step)]
    assert len(rows) == len(steps) == 24
    assert list(rows[0])[: len(CSV_BASE)] == list(CSV_BASE) and "loss" in rows[0] and "time/step_s" in rows[0]
    for row, m in zip(rows, steps):
        assert (int(row["rank"]), int(row["step"]), float(row["t"])) == (m.rank, m.step, m.t)
        for name, value in step_scalars(m).items():
            assert float(row[name]) == value, (name, row[name], value)
    assert not list(tmp_path.glob("*.tmp-*"))


def test_a_loss_not_finite_reads_nan_from_its_step_and_stdout_takes_the_table(tmp_path):
    log = tmp_path / "nan.jsonl"
    msgs: list = [schema.Hello(run="n", rank=r, world_size=2, seq=0, t=1.0) for r in (0, 1)]
    for s in range(1, 11):
        for r in (0, 1):
            if r == 1 and s == 6:
                msgs.append(schema.Event(run="n", rank=1, seq=100, name="warning", step=6, t=1.0 + s,
                                         message="loss is nan at step 6: diverged, or a spike (steps go on without a loss while it is not finite)"))  # fmt: skip
            msgs.append(schema.Step(run="n", rank=r, step=s, seq=s, loss=None if r == 1 and s >= 6 else 2.0 - s / 10, step_s=0.1, t=1.0 + s,
                                    custom={"acc": 0.5} if s == 9 else {}))  # fmt: skip
    log.write_bytes(schema.encode_json_lines(msgs))
    p = _cli(str(log), "--csv", "-", "--ranks", "1", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "pardash: wrote 10 rows" in p.stderr and "left out 1 other rank(s)" in p.stderr  # (the table alone on stdout)
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    loss = [row["loss"] for row in rows]
    assert [float(x) for x in loss[:5]] == [1.9, 1.8, 1.7, 1.6, 1.5] and all(math.isnan(float(x)) for x in loss[5:]), loss
    # A metric first logged late has its column all the same (the log is read twice), empty where none was logged.
    assert [row["custom/acc"] for row in rows] == [""] * 8 + ["0.5", ""]


def test_no_target_or_an_unwritable_file_is_one_line_and_nothing_half_written(tmp_path):
    log = str(DATA / "real_ddp2.jsonl")
    p = _cli(log, cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.strip().endswith("give --tensorboard DIR (TensorBoard's event files) or --csv FILE (a CSV table of the steps), or both")
    p = _cli(log, "--csv", str(tmp_path / "no" / "such" / "steps.csv"), cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "cannot write it" in p.stderr, p.stderr
    res = export_csv(log, str(tmp_path / "x.csv"))
    assert res["rows"] == 24 and res["ranks"] == {0: 12, 1: 12} and not list(tmp_path.glob("*.tmp-*"))


def test_a_reader_that_goes_away_ends_the_export_as_a_unix_tool_ends(tmp_path):
    # `export --csv - | head -2` said "error: -: cannot write it: Broken pipe" and exited 2.
    log = tmp_path / "long.jsonl"  # (a table past the pipe's buffer: its writer meets the closed pipe)
    msgs: list = [schema.Hello(run="l", rank=r, world_size=2, seq=0, t=1.0) for r in (0, 1)]
    msgs += [schema.Step(run="l", rank=r, step=s, seq=s, loss=1.0, step_s=0.01, data_s=0.001, t=1.0 + s / 100) for s in range(1, 3001) for r in (0, 1)]
    log.write_bytes(schema.encode_json_lines(msgs))
    p = subprocess.run(f"{sys.executable} -m pardash export {log} --csv - | head -c 50 > /dev/null; echo ${{PIPESTATUS[0]}}",
                       shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120, env=pardash_env(), cwd=tmp_path)  # fmt: skip
    assert p.stdout.strip() == "141" and "error" not in p.stderr, (p.stdout, p.stderr)


def test_steps_run_again_after_a_restart_are_told_apart_and_the_dataloaders_time_is_a_column(tmp_path):
    # Review 313: after a torchrun restart the table had each (rank, step) twice, with nothing
    # but the clock to tell the attempts apart; and no loader_s, the split of the data time.
    log = DATA / "real_ddp2_restart.jsonl"
    res = export_csv(str(log), str(tmp_path / "r.csv"))
    with open(tmp_path / "r.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    keys = [(row["rank"], row["restart"], row["step"]) for row in rows]
    assert len(keys) == len(set(keys)) == res["rows"], "a (rank, restart, step) twice"
    assert {row["restart"] for row in rows} == {"0", "1"}
    fast = tmp_path / "loader.jsonl"
    fast.write_bytes(schema.encode_json_lines([schema.Hello(run="d", rank=0, world_size=1, seq=0, t=1.0),
                                               schema.Step(run="d", rank=0, step=1, seq=1, step_s=0.1, data_s=0.03, loader_s=0.001, t=2.0)]))  # fmt: skip
    export_csv(str(fast), str(tmp_path / "d.csv"))
    with open(tmp_path / "d.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert (float(row["time/data_s"]), float(row["time/loader_s"])) == (0.03, 0.001)


def test_a_csv_of_a_log_without_its_end_says_so_as_the_tensorboard_export_does(tmp_path):
    # Its hub killed before the ranks ended: the TensorBoard export said "ends early", the CSV's
    # said nothing, read as the whole run.
    from pardash.telemetry.export import export_tensorboard

    lines = (DATA / "real_ddp2.jsonl").read_text().splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(lines[:20]))
    res = export_csv(str(cut), str(tmp_path / "cut.csv"))
    tb = export_tensorboard(str(cut), str(tmp_path / "tb"))
    assert res["log_ends_early"] == tb["log_ends_early"] and res["log_ends_early"]["running"] == 2
    p = _cli(str(cut), "--csv", "cut2.csv", cwd=tmp_path)
    assert p.returncode == 0 and f"pardash: warning: {cut} ends early" in p.stderr, p.stderr
    assert export_csv(str(DATA / "real_ddp2.jsonl"), str(tmp_path / "whole.csv"))["log_ends_early"] is None
