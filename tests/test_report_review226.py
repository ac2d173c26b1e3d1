"""Review 226's catches in the export and the report: the first run's steps a re-run never
reaches stay in TensorBoard; a silent rank of a log that ends early is said silent; a job run
again by hand is no restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pardash.telemetry import schema
from pardash.telemetry.export import export_tensorboard


def _accumulator(folder: Path):
    """The rank's scalars as TensorBoard reads them, with its default settings (orphaned data
    purged at a restart's mark, 10000 points a series)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return acc


def _job(pid: int, restart: int, steps: range, t0: float, loss) -> list:
    """A rank's process: its hello, its steps (a sample of the system after each), its exit."""
    msgs: list = [schema.Hello(rank=0, world_size=1, pid=pid, restart=restart, strategy="ddp", t=t0, seq=0, run="r")]
    seq = 1
    for n in steps:
        t = t0 + n
        msgs.append(schema.Step(rank=0, step=n, seq=seq, loss=loss(n), samples=8, step_s=0.1, t=t, run="r"))
        msgs.append(schema.System(rank=0, cpu_pct=float(pid), t=t + 0.5, seq=seq + 1, run="r"))
        seq += 2
    msgs.append(schema.Event(rank=0, name="exit", step=steps[-1], code=0, t=t0 + steps[-1] + 0.9, seq=seq, run="r"))
    return msgs


def test_the_first_runs_steps_a_rerun_never_reaches_stay_in_tensorboard(tmp_path):
    # A job of 30 steps run again under the run's id for 20: TensorBoard purged every point
    # from the re-run's restart mark on, and showed steps 1-20 where the export said 30.
    # A third process resuming at step 26 replaces those on from it and leaves 21-25.
    log = tmp_path / "again.jsonl"
    msgs = _job(10, 0, range(1, 31), 1000.0, lambda n: 100.0 + n)
    msgs += _job(11, 0, range(1, 21), 2000.0, lambda n: 200.0 + n)
    log.write_bytes(schema.encode_json_lines(msgs))
    res = export_tensorboard(str(log), str(tmp_path / "tb"))
    assert res["ranks"] == {0: 30} and res["rerun"] == {0: 20}
    acc = _accumulator(tmp_path / "tb" / "rank0")
    loss = [(e.step, e.value) for e in acc.Scalars("loss")]
    assert loss == [(n, pytest.approx(200.0 + n)) for n in range(1, 21)] + [(n, pytest.approx(100.0 + n)) for n in range(21, 31)]
    # the first run's samples at those steps with them (each at the step finished before it)
    cpu = [(e.step, e.value) for e in acc.Scalars("system/cpu_pct")]
    assert cpu == [(n, 11.0) for n in range(1, 21)] + [(n, 10.0) for n in range(21, 31)]


def test_a_rerun_that_fails_again_and_a_resume_further_on_keep_the_steps_none_ran_again(tmp_path):
    # A restart from step 4 that fails again at 15, then a resume from a checkpoint at 25 that
    # stops at 28: TensorBoard kept steps 1-15 only.
    log = tmp_path / "again3.jsonl"
    msgs = _job(10, 0, range(1, 31), 1000.0, lambda n: 100.0 + n)
    msgs += _job(11, 1, range(5, 16), 2000.0, lambda n: 200.0 + n)  # restarted from 4, failed at 15
    msgs += _job(12, 2, range(26, 29), 3000.0, lambda n: 300.0 + n)  # resumed at 26, stopped at 28
    log.write_bytes(schema.encode_json_lines(msgs))
    export_tensorboard(str(log), str(tmp_path / "tb"))
    points = _accumulator(tmp_path / "tb" / "rank0").Scalars("loss")
    loss = {e.step: e.value for e in points}
    assert len(points) == 30  # one point a step
    want = {n: 100.0 + n for n in range(1, 31)} | {n: 200.0 + n for n in range(5, 16)} | {n: 300.0 + n for n in range(26, 29)}
    assert loss == pytest.approx(want)


def test_a_second_restart_at_the_same_step_keeps_each_runs_steps_and_exports(tmp_path):
    # Steps 1-35, a restart from 30 to 40, another from 30 that stopped at 33: the export died of
    # a MemoryError (the first restart's mark was not counted where the records lie, so a
    # record read back after the second took its length from the middle of another).
    log = tmp_path / "twice.jsonl"
    msgs = _job(10, 0, range(1, 36), 1000.0, lambda n: 100.0 + n)
    msgs += _job(11, 1, range(31, 41), 2000.0, lambda n: 200.0 + n)
    msgs += _job(12, 2, range(31, 34), 3000.0, lambda n: 300.0 + n)
    log.write_bytes(schema.encode_json_lines(msgs))
    export_tensorboard(str(log), str(tmp_path / "tb"))
    points = _accumulator(tmp_path / "tb" / "rank0").Scalars("loss")
    assert len(points) == 40  # one point a step
    want = {n: 100.0 + n for n in range(1, 31)} | {n: 300.0 + n for n in range(31, 34)} | {n: 200.0 + n for n in range(34, 41)}
    assert {e.step: e.value for e in points} == pytest.approx(want)


def _hub_log(path: Path):
    """A hub recording two ranks into ``path`` (the report's tests build their logs so)."""
    from pardash.telemetry.hubcore import HubCore
    from pardash.telemetry.recorder import Recorder

    rec = Recorder(path)
    return HubCore(run_id="r", recorder=rec, world_size=2), rec


def _two_ranks(core, steps: int) -> float:
    """Ranks 0 and 1 say hello a minute ago and take ``steps`` steps, a second each; their start."""
    t = float(int(time.time()) - 60)
    for rank in (0, 1):
        core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=rank, world_size=2, pid=10 + rank, t=t)), 1.0)
        for n in range(1, steps + 1):
            core.ingest_bytes(schema.encode(schema.Step(run="r", rank=rank, seq=n, step=n, step_s=0.1, t=t + n)), 1.0)
    return t


def test_a_job_run_again_by_hand_is_time_between_jobs_not_restarting(tmp_path):
    # A second torchrun started by hand under the run's id after the first had ended (the hub
    # alone notes "rank 0 started again"): "duration 14.7 s (training 3.7 s; restarting 10.9
    # s)" and "200 run again after a restart or resume" of jobs torchrun never restarted.
    from pardash.telemetry.report import build_report
    from pardash.telemetry.report_render import render_text

    log = tmp_path / "run.jsonl"
    core, rec = _hub_log(log)
    t = float(int(time.time()) - 60)  # (the hub's note has its own time: near the ranks')

    def job(pid: int, t0: float, steps: int) -> None:
        for rank in (0, 1):
            hello = schema.Hello(run="r", rank=rank, world_size=2, pid=pid + rank, strategy="ddp", t=t0)
            core.ingest_bytes(schema.encode(hello), t0 - t)
        for n in range(1, steps + 1):
            for rank in (0, 1):
                core.ingest_bytes(schema.encode(schema.Step(run="r", rank=rank, seq=n, step=n, step_s=0.1, samples=8, t=t0 + n * 0.1)), 0.0)
        for rank in (0, 1):
            core.ingest_bytes(schema.encode(schema.Event(run="r", rank=rank, seq=steps + 1, name="exit", code=0, step=steps, t=t0 + steps * 0.1)), 0.0)

    job(10, t, 30)  # steps to t+3
    job(20, t + 13, 20)  # 10 s after the first ended
    rec.close()
    rep = build_report(str(log))
    assert rep["jobs_run_again"] == 1 and rep["job_restarts"] == 0
    assert rep["restart_s"] == 0 and rep["between_jobs_s"] == pytest.approx(10.0)  # t+3 to t+13 (its first step's start)
    assert rep["train_s"] == pytest.approx(3.0 + 2.0)  # the time between stays out of training
    text = render_text(rep)
    assert "(training 5.0 s; between jobs 10.0 s)" in text and "restarting" not in text
    assert "steps              30 (last step 20; 20 run again by a later job under the run's id)" in text


def test_a_log_that_ends_early_says_a_silent_rank_silent_and_a_stalled_one_stalled(tmp_path):
    # Rank 1 killed with SIGKILL (no heartbeat since), rank 0 waiting for it in its
    # all-reduce (heartbeats, no step), then the hub killed too: the log's end said
    # "2 rank(s) not ended (2 stalled)" where its rows and stalls said one silent.
    from pardash.telemetry.report import build_report
    from pardash.telemetry.report_render import render_text

    log = tmp_path / "run.jsonl"
    core, rec = _hub_log(log)
    t = _two_ranks(core, steps=1)
    for k in range(2, 12):
        beat = schema.Heartbeat(run="r", rank=0, seq=k, step=1, phase="backward", t=t + k)
        core.ingest_bytes(schema.encode(beat), float(k))
        core.tick(float(k) + 0.5)
    rec.close()  # (no closing line: the hub was killed)
    rep = build_report(str(log))
    assert {(s["rank"], s["kind"]) for s in rep["stalls"]} == {(0, "stalled"), (1, "silent")}
    end = rep["log_ends_early"]
    assert (end["running"], end["stalled"], end["silent"]) == (2, 1, 1)
    assert "log ends early     at step 1, with 2 rank(s) not ended (1 stalled, 1 silent) and no closing line" in render_text(rep)


def test_a_log_its_hub_closed_under_running_ranks_says_they_did_not_end(tmp_path):
    # A simulate (or a hub alone) stopped while its ranks ran: the live viewer said "the hub
    # stopped at step 3 with 2 ranks not ended"; the report's rows said "no exit" and its
    # summary nothing (review 231).
    from pardash.telemetry.report import build_report
    from pardash.telemetry.report_render import render_text

    log = tmp_path / "run.jsonl"
    core, rec = _hub_log(log)
    _two_ranks(core, steps=3)
    core.note("hub stopped: 8 messages, 0 lost, 0 rejected")
    core.tick(2.0)
    rec.close()
    rep = build_report(str(log))
    assert rep["hub_stopped_first"] == {"step": 3, "ranks": [0, 1]} and rep["log_ends_early"] is None
    assert "not ended          ranks 0-1 at step 3: the hub stopped before their end was heard (no exit)" in render_text(rep)


def test_the_ranks_the_hub_stopped_under_are_by_rank_not_by_their_hellos_order():
    # Rank 1's hello first (a loaded machine): "ranks": [1, 0] (a real-process test met it).
    from pardash.telemetry.report import hub_stopped_first
    from pardash.telemetry.state import RunState

    st = RunState(run_id="r")
    for rank in (1, 0):
        st.apply(schema.Hello(run="r", rank=rank, world_size=2, strategy="ddp"), 1.0)
        st.apply(schema.Step(run="r", rank=rank, step=3, step_s=0.1), 2.0)
    assert hub_stopped_first(st, True) == {"step": 3, "ranks": [0, 1]}


def test_a_long_runs_durations_read_in_hours_too():
    # A day's run read "duration 102009.4 s (training 102007.1 s)"; the TUI said "1d04h".
    from pardash.telemetry.report_render import _seconds

    assert [_seconds(x) for x in (12.3, 3600, 102009.4)] == ["12.3 s", "3,600 s (1h 0m)", "102,009 s (1d 4h 20m)"]
    # (rounded first, the hours say what the seconds do; a sum that overflowed is no traceback)
    assert [_seconds(x) for x in (3599.96, 86399.99, float("inf"))] == ["3,600 s (1h 0m)", "86,400 s (1d 0h 0m)", "inf s"]


@pytest.mark.parametrize(("command", "said"), [("report", "report stopped"), ("export", "export stopped")])
def test_ctrl_c_in_a_long_read_says_it_stopped(tmp_path, monkeypatch, capsys, command, said):
    # Ctrl-C while a big log was read wiped the progress line and exited 130 without a word.
    from pardash import cli, recorded

    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json_lines(_job(10, 0, range(1, 4), 1000.0, lambda n: 1.0)))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(recorded, "_report_of", interrupted)
    monkeypatch.setattr(recorded, "export_tensorboard", interrupted, raising=False)
    import pardash.telemetry.export as export_mod

    monkeypatch.setattr(export_mod, "export_tensorboard", interrupted)
    argv = [command, str(log)] + (["--tensorboard", str(tmp_path / "tb")] if command == "export" else [])
    assert cli.main(argv) == 130
    assert f"pardash: {said}" in capsys.readouterr().err
