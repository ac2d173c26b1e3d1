"""``pardash export LOG --tensorboard DIR``: TensorBoard's own event reader reads back, for
every rank, the values the log holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import pardash_env
from pardash.telemetry import schema
from pardash.telemetry.export import ExportError, export_tensorboard
from pardash.telemetry.logreader import load_log

DATA = Path(__file__).resolve().parent / "data"


def _read_back(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    return acc


def _expected(step: schema.Step) -> dict[str, float]:
    """What the log says, computed here without the exporter's help."""
    m = step.mem
    out = {
        "loss": step.loss,
        "lr": step.lr,
        "throughput/samples_per_s": step.samples / step.step_s,
        "time/step_s": step.step_s,
        "time/data_s": step.data_s,
        "time/forward_s": step.forward_s,
        "time/backward_s": step.backward_s,
        "time/optimizer_s": step.optimizer_s,
        "time/self_s": step.self_s,
        "memory/params_bytes": m.params_bytes,
        "memory/grads_bytes": m.grads_bytes,
        "memory/optim_bytes": m.optim_bytes,
        "memory/held_bytes": m.params_bytes + m.grads_bytes + m.optim_bytes + m.buckets_bytes,
        "memory/rss_bytes": m.rss_bytes,
    }
    if step.comm_s is not None:
        out["time/comm_s"] = step.comm_s
    if m.cuda_peak_bytes is not None:
        out["memory/cuda_peak_bytes"] = m.cuda_peak_bytes
        out["memory/cuda_allocated_bytes"] = m.cuda_allocated_bytes
    return out


@pytest.mark.parametrize("name", ["ddp4_straggler.jsonl", "real_fsdp2.jsonl"])
def test_tensorboard_reads_back_the_logs_values(tmp_path, name):
    out = tmp_path / "tb"
    res = export_tensorboard(str(DATA / name), str(out))
    msgs, stats = load_log(DATA / name)
    steps = [m for m in msgs if isinstance(m, schema.Step)]
    ranks = sorted({s.rank for s in steps})
    assert list(res["ranks"]) == ranks and res["skipped_lines"] == stats.skipped_total
    assert sorted(p.name for p in out.iterdir()) == [f"rank{r}" for r in ranks]
    for rank in ranks:
        mine = [s for s in steps if s.rank == rank]
        acc = _read_back(out / f"rank{rank}")
        tags = set(acc.Tags()["scalars"])
        for tag, _ in _expected(mine[0]).items():
            assert tag in tags, tag
            events = acc.Scalars(tag)
            assert [e.step for e in events] == [s.step for s in mine]
            assert [e.wall_time for e in events] == pytest.approx([s.t for s in mine], abs=1e-6)
            # TensorBoard keeps scalars as float32: 7 significant digits
            assert [e.value for e in events] == pytest.approx([_expected(s)[tag] for s in mine], rel=1e-6), tag
        if name.startswith("real"):
            assert "memory/cuda_peak_bytes" not in tags  # a CPU run has no CUDA figures
        # DDP's buckets only: an FSDP run had a series of zeros
        assert ("memory/buckets_bytes" in tags) == any(s.mem.buckets_bytes for s in mine)


def test_steps_run_again_after_a_restart_replace_the_first_run_of_them(tmp_path):
    # A rank killed at step 5 and restarted from its checkpoint at step 2 runs steps 3-5
    # again: TensorBoard drew the curve jumping back; now it keeps the second run of them.
    import msgspec

    log = tmp_path / "restart.jsonl"
    first = [(s, 10.0 - s) for s in range(1, 6)]
    second = [(s, 5.0 - s / 10) for s in range(3, 8)]
    lines = [
        schema.Step(rank=0, step=s, loss=loss, step_s=0.1, samples=8, t=1000.0 + i, seq=i, run="r")
        for i, (s, loss) in enumerate(first + second)
    ]
    log.write_bytes(b"".join(msgspec.json.encode(m) + b"\n" for m in lines))
    export_tensorboard(str(log), str(tmp_path / "tb"))
    events = _read_back(tmp_path / "tb" / "rank0").Scalars("loss")
    assert [e.step for e in events] == [1, 2, 3, 4, 5, 6, 7]
    assert [e.value for e in events] == pytest.approx([9.0, 8.0, 4.7, 4.6, 4.5, 4.4, 4.3])


def test_a_step_logged_after_the_next_one_is_kept_and_is_no_restart(tmp_path):
    # Steps a rank's heartbeat thread sends for a paused loop go on a socket of their own; the
    # hub can log the loop's next step first (seq 4 before seq 3). Read as a restart, the
    # late step's mark had TensorBoard drop step 4. A real restart (a new hello, seq from 0
    # again) still replaces the steps it runs again.
    import msgspec

    log = tmp_path / "late.jsonl"
    hello = schema.Hello(rank=0, seq=0, world_size=1, pid=10, strategy="ddp", t=999.0, run="r")
    order = [(1, 1), (2, 2), (4, 4), (3, 3), (5, 5)]  # (seq, step) as logged
    lines = [hello] + [
        schema.Step(rank=0, step=step, loss=10.0 - step, step_s=0.1, samples=8, t=1000.0 + seq, seq=seq, run="r")
        for seq, step in order
    ]
    restart = msgspec.structs.replace(hello, pid=11, restart=1, t=1010.0)
    lines += [restart] + [
        schema.Step(rank=0, step=step, loss=1.0 / step, step_s=0.1, samples=8, t=1010.0 + seq, seq=seq, run="r")
        for seq, step in ((1, 5), (2, 6))
    ]
    log.write_bytes(b"".join(msgspec.json.encode(m) + b"\n" for m in lines))
    export_tensorboard(str(log), str(tmp_path / "tb"))
    events = _read_back(tmp_path / "tb" / "rank0").Scalars("loss")
    assert sorted(e.step for e in events) == [1, 2, 3, 4, 5, 6]  # step 5 once: the restart's
    by_step = {e.step: e.value for e in events}
    assert by_step[3] == pytest.approx(7.0) and by_step[4] == pytest.approx(6.0)
    assert by_step[5] == pytest.approx(0.2) and by_step[6] == pytest.approx(1 / 6)


def test_export_refuses_to_mix_with_an_earlier_export(tmp_path):
    out = tmp_path / "tb"
    export_tensorboard(str(DATA / "real_ddp2.jsonl"), str(out))
    with pytest.raises(ExportError, match="already holds TensorBoard event files"):
        export_tensorboard(str(DATA / "real_ddp2.jsonl"), str(out))


def test_export_command(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "pardash", "export", *args], capture_output=True, text=True, env=pardash_env(), timeout=120)

    ok = run(str(DATA / "ddp4_straggler.jsonl"), "--tensorboard", str(tmp_path / "tb"))
    assert ok.returncode == 0, ok.stderr
    assert "rank 0: 60, rank 1: 60, rank 2: 60, rank 3: 60" in ok.stdout
    assert "skipped 5 malformed or truncated log line(s)" in ok.stdout
    again = run(str(DATA / "ddp4_straggler.jsonl"), "--tensorboard", str(tmp_path / "tb"))
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1
    missing = run(str(tmp_path / "nope.jsonl"), "--tensorboard", str(tmp_path / "tb2"))
    assert missing.returncode == 2 and "no such log file" in missing.stderr
    # A log without steps: said, and no "wrote 0 scalars ... view with tensorboard" of a
    # folder never made.
    stepless = tmp_path / "stepless.jsonl"
    stepless.write_bytes(schema.encode_json(schema.Event(run="r", rank=-1, name="hub", message="hub started", hseq=1)) + b"\n")
    empty = run(str(stepless), "--tensorboard", str(tmp_path / "tb3"))
    assert empty.returncode == 1 and "no step in the log, so nothing to export" in empty.stderr, empty.stderr
    assert "wrote" not in empty.stdout and not (tmp_path / "tb3").exists()


def test_the_exporter_imports_tensorboard_only_when_it_runs():
    code = "import sys, pardash.telemetry.export, pardash.telemetry.prometheus; print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorboard', 'prometheus_client', 'torch')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_step_number_tensorboard_cannot_hold_is_skipped_and_counted(tmp_path):
    # A log the hub wrote before it bounded step numbers held step 2**64-1: export died with
    # "ValueError: Value out of range".
    log = tmp_path / "run.jsonl"
    msgs = [schema.Step(rank=0, step=s, seq=s, loss=1.0, step_s=0.1, t=1.0e9 + s) for s in (1, 2)]
    msgs.append(schema.Step(rank=0, step=2**64 - 1, seq=3, loss=1.0, step_s=0.1, t=1.0e9 + 3))
    log.write_bytes(schema.encode_json_lines(msgs))
    done = export_tensorboard(str(log), str(tmp_path / "tb"))
    assert done["ranks"] == {0: 2} and done["skipped_lines"] == 1


def test_an_export_of_many_ranks_writes_every_file_from_its_own_thread(tmp_path, monkeypatch):
    # TensorBoard's EventFileWriter gives each event file a thread fed through a queue: with one
    # a rank, an export of 256 ranks x 900 steps took 62 s, most of it spent handing the
    # interpreter lock between 257 threads (21 s written from the exporting thread).
    import threading

    started: list[str] = []
    start = threading.Thread.start

    def counted(self, *args, **kwargs):
        started.append(self.name)
        return start(self, *args, **kwargs)

    monkeypatch.setattr(threading.Thread, "start", counted)
    ranks, steps = 40, 3
    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json_lines(
        [schema.Step(rank=r, step=s, seq=s, loss=r + s / 10, step_s=0.1, samples=4, t=1.0e9 + s) for s in range(1, steps + 1) for r in range(ranks)]
    ))  # fmt: skip
    done = export_tensorboard(str(log), str(tmp_path / "tb"))
    assert started == []
    assert done["ranks"] == {r: steps for r in range(ranks)}
    for r in (0, 17, ranks - 1):
        events = _read_back(tmp_path / "tb" / f"rank{r}").Scalars("loss")
        assert [(e.step, e.value) for e in events] == [(s, pytest.approx(r + s / 10)) for s in range(1, steps + 1)]


def test_the_closing_line_of_an_export_of_many_ranks_groups_them(tmp_path):
    # It named every rank with its steps: 256 ranks were a 4,000-character line.
    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json_lines(
        [schema.Step(rank=r, step=s, seq=s, loss=1.0, step_s=0.1, samples=4, t=1.0e9 + s) for s in (1, 2) for r in range(300) if s == 1 or r != 17]
    ))  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "pardash", "export", str(log), "--tensorboard", str(tmp_path / "tb")],
        capture_output=True, text=True, env=pardash_env(), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert "(steps ranks 0-16, 18-299: 2; rank 17: 1); view with" in line, line


def test_an_export_of_a_log_holding_two_runs_warns_as_the_report_does(tmp_path):
    # A log appended to by hand: report warns that it mixes the runs; export made one
    # TensorBoard run a rank of both without a word, the second run's steps replacing the first's.
    both = tmp_path / "both.jsonl"
    both.write_bytes((DATA / "real_ddp2.jsonl").read_bytes() + (DATA / "real_fsdp2.jsonl").read_bytes())

    def run(log, out):
        return subprocess.run([sys.executable, "-m", "pardash", "export", str(log), "--tensorboard", str(out)],
                              capture_output=True, text=True, env=pardash_env(), timeout=120)  # fmt: skip

    p = run(both, tmp_path / "tb")
    assert p.returncode == 0 and "holds 2 runs" in p.stderr and "exported as one" in p.stderr, p.stderr
    one = run(DATA / "real_ddp2.jsonl", tmp_path / "tb1")
    assert one.returncode == 0 and "warning" not in one.stderr


def test_an_export_can_take_only_the_ranks_asked_for(tmp_path):
    # One TensorBoard run a rank: a job of 1024 ranks was 1024 overlaid runs (and minutes of
    # writing) when the question was rank 17 against rank 0.
    done = export_tensorboard(str(DATA / "ddp4_straggler.jsonl"), str(tmp_path / "tb"), ranks={0, 2})
    assert done["ranks"] == {0: 60, 2: 60} and done["left_out"] == 2
    assert sorted(p.name for p in (tmp_path / "tb").iterdir()) == ["rank0", "rank2"]
    steps = [m for m in load_log(DATA / "ddp4_straggler.jsonl")[0] if isinstance(m, schema.Step) and m.rank == 2]
    assert [e.value for e in _read_back(tmp_path / "tb" / "rank2").Scalars("time/self_s")] == pytest.approx([s.self_s for s in steps], rel=1e-6)

    def run(*args):
        return subprocess.run([sys.executable, "-m", "pardash", "export", str(DATA / "ddp4_straggler.jsonl"), *args],
                              capture_output=True, text=True, env=pardash_env(), timeout=120)  # fmt: skip

    ok = run("--tensorboard", str(tmp_path / "tb2"), "--ranks", "1-2,3")
    assert ok.returncode == 0 and "(steps rank 1: 60, rank 2: 60, rank 3: 60)" in ok.stdout and "left out 1 other rank(s)" in ok.stdout, ok.stderr
    none = run("--tensorboard", str(tmp_path / "tb3"), "--ranks", "7")
    assert none.returncode == 1 and "no step of --ranks 7 in the log" in none.stderr and not (tmp_path / "tb3").exists()
    bad = run("--tensorboard", str(tmp_path / "tb4"), "--ranks", "3-1")
    assert bad.returncode == 2 and "argument --ranks: '3-1' is not a rank or a range of ranks" in bad.stderr
