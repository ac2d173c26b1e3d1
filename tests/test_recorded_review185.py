"""A run's log asked for by the path the README gives (runs/ID/telemetry.jsonl) of a run launched
with --log elsewhere.jsonl: its folder's result.json says where the log went (review 185)."""

import json

import pytest

from pardash.recorded import find_log
from pardash.telemetry import schema


def _run_logged_elsewhere(tmp_path):
    run = tmp_path / "runs" / "20260101-000000-abcd"
    run.mkdir(parents=True)
    log = tmp_path / "elsewhere.jsonl"
    log.write_bytes(schema.encode_json_lines([schema.Step(run="r", rank=0, seq=s, step=s, t=1000.0 + s) for s in range(1, 4)]))
    (run / "result.json").write_text(json.dumps({"run_id": run.name, "code": 0, "log": str(log)}))
    return run, log


def test_the_folders_telemetry_jsonl_of_a_run_logged_elsewhere_reads_the_log_its_result_names(tmp_path, capsys):
    # It failed "no such log file, run folder or run id" though runs/ID/ was there and its
    # result.json named the log (report, replay and export all find their log here).
    run, log = _run_logged_elsewhere(tmp_path)
    assert find_log(str(run / "telemetry.jsonl"), str(tmp_path / "runs")) == str(log)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the run's log is {log} (its result.json names it)" in err, err


def test_another_missing_name_in_a_run_folder_says_where_the_runs_log_is(tmp_path, capsys):
    run, log = _run_logged_elsewhere(tmp_path)
    with pytest.raises(SystemExit):
        find_log(str(run / "telemetry.jsnol"), str(tmp_path / "runs"))
    err = capsys.readouterr().err
    assert f"no such file; that run's log is {log}" in err, err
    # A run whose log is gone too says so, as its folder does.
    log.unlink()
    with pytest.raises(SystemExit):
        find_log(str(run / "telemetry.jsonl"), str(tmp_path / "runs"))
    err = capsys.readouterr().err
    assert f"the run's log {log} (its result.json names it) is not there" in err, err
