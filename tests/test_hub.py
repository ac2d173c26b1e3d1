"""The hub over real sockets: records everything, frames for viewers, snapshots for late
joiners, refuses garbage without falling over."""

import msgspec
import pytest
import zmq

from helpers import identity, wait_for, wait_logged
from pardash.telemetry import schema
from pardash.telemetry.client import HubClient, ReplaySource
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.logreader import load_log
from pardash.telemetry.reporter import Reporter


def _ranks(hub, world=2):
    reps = [Reporter(hub.ingest_endpoint, run="test-run", identity=identity(r, world), heartbeat_s=0) for r in range(world)]
    for r in reps:
        r.hello(strategy="ddp", world_size=world, params_count=1000)
    return reps


def _view(c):
    return {
        rank: (r.status, r.step.step if r.step else None, r.step.loss if r.step else None, r.history["step"].values())
        for rank, r in c.state.ranks.items()
    }


def test_every_message_is_recorded_and_viewers_agree(hub):
    early = HubClient(hub.updates_endpoint, hub.snapshot_endpoint)
    assert early.wait_synced(20)
    reps = _ranks(hub)
    for step in range(40):
        for r in reps:
            r.step(step=step, loss=1.0 / (step + 1), step_s=0.01, self_s=0.002, samples=8)
        early.poll()
    for r in reps:
        r.event("exit", code=0)
    wait_for(lambda: all(r.finished for r in early.state.ranks.values()) and len(early.state.ranks) == 2, poll=early.poll)
    late = HubClient(hub.updates_endpoint, hub.snapshot_endpoint)
    assert late.wait_synced(20)
    wait_for(lambda: late.fseq >= early.fseq, poll=lambda: (late.poll(), early.poll()))
    assert _view(late) == _view(early)
    assert {r: v[0] for r, v in _view(early).items()} == {0: "finished", 1: "finished"}

    for r in reps:
        r.close()
    wait_logged(hub)
    msgs, stats = load_log(hub.recorder.path)
    steps = [m for m in msgs if isinstance(m, schema.Step)]
    assert len(steps) == 80
    assert stats.skipped_total == 0
    assert early.stats.lost == 0
    hseqs = [m.hseq for m in msgs]
    assert hseqs == sorted(hseqs) and len(set(hseqs)) == len(hseqs)


def test_garbage_is_counted_and_the_hub_keeps_serving(hub):
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.connect(hub.ingest_endpoint)
    push.send(b"\xc1 never-used msgpack byte")
    push.send(msgspec.msgpack.encode({"kind": "step", "rank": "x"}))
    push.send(schema.encode(schema.Verdict(rank=0, verdict="straggler")))
    push.send(schema.encode(schema.Step(run="other-run", rank=0)))
    push.send(schema.encode(schema.Step(run="test-run", rank=0, step_s=float("nan"))))
    reps = _ranks(hub, world=1)
    reps[0].step(step=0, loss=1.0, step_s=0.1)
    wait_for(lambda: sum(hub.core.rejected.values()) == 5 and hub.core.state.ranks.get(0) and hub.core.state.ranks[0].step)
    assert hub.core.rejected["undecodable"] == 1
    assert hub.core.rejected["invalid"] == 1
    assert hub.core.rejected["verdict_from_rank"] == 1
    assert hub.core.rejected["foreign_run"] == 1
    assert hub.core.rejected["not_finite"] == 1
    push.close(0)
    reps[0].close()


def test_replay_serves_a_log_like_a_live_hub(hub, tmp_path):
    reps = _ranks(hub)
    for step in range(20):
        for r in reps:
            r.step(step=step, loss=2.0 - step * 0.05, step_s=0.01, samples=4)
    reps[1].event("exit", code=3)
    # Each rank pushes on a socket of its own: rank 1's exit can reach the hub before any of
    # rank 0's steps, so wait for both ranks' last message before reading the log.
    wait_for(
        lambda: hub.core.state.ranks.get(1) is not None
        and hub.core.state.ranks[1].exit_code == 3
        and hub.core.state.ranks.get(0) is not None
        and hub.core.state.ranks[0].step is not None
        and hub.core.state.ranks[0].step.step == 19
    )
    wait_logged(hub)
    src = ReplaySource(str(hub.recorder.path), speed=1000.0)
    src.seek(src.duration_s + 1)
    assert src.state.ranks[0].step.step == 19
    assert src.state.ranks[1].status == "exited"
    assert len(src.state.ranks[0].history["step"]) >= 1
    for r in reps:
        r.close()


def test_a_step_that_arrives_late_never_replaces_a_newer_one():
    # A rank's heartbeat thread sends the steps its loop left held on a socket of its own, so
    # they can overtake the loop's last burst. The rank's newest step is the one of highest
    # seq, at the hub, in the frame's history points and at every viewer.
    from pardash.telemetry.hubcore import HubCore
    from pardash.telemetry.state import RunState

    core = HubCore(run_id="r")
    viewer = RunState(run_id="r", track_seq=False)

    def step(seq):
        return schema.encode(schema.Step(run="r", rank=0, seq=seq, step=seq, step_s=0.1, t=1.0e9 + seq))

    assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=0, world_size=1, pid=10, t=1.0e9)), 1.0)
    for seq in (1, 2, 3, 6, 7):
        assert core.ingest_bytes(step(seq), 1.0)
    viewer.apply_frame(core.tick(2.0).messages, 2.0)
    for seq in (4, 5):  # the loop's burst, overtaken
        assert core.ingest_bytes(step(seq), 2.0)
    frame = core.tick(3.0)
    viewer.apply_frame(frame.messages, 3.0)
    assert core.state.ranks[0].step.step == 7 and viewer.ranks[0].step.step == 7
    # No stale history point: the frame carries the newest, which the rank's first step (its
    # frame's alone, so its charts start there) held back
    assert [m.step for m in frame.messages if isinstance(m, schema.Step)] == [7]
    assert viewer.ranks[0].history["step"].values() == [1.0, 7.0]
    frame = core.tick(3.5)
    assert not [m for m in frame.messages if isinstance(m, schema.Step)]
    assert core.state.ranks[0].steps_seen == 7 and core.state.lost == 0
    # A new process for the rank (torchrun restarted it) counts its steps from 1 again.
    assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=0, world_size=1, pid=11, restart=1, t=1.0e9 + 8)), 4.0)
    assert core.ingest_bytes(step(1), 4.0)
    viewer.apply_frame(core.tick(5.0).messages, 5.0)
    assert core.state.ranks[0].step.seq == 1 and viewer.ranks[0].step.seq == 1


def test_a_hub_back_from_a_pause_of_its_own_does_not_call_the_ranks_silent():
    # A hub stopped for 10 s (SIGSTOP, swapped out) took its backlog from each socket in turn:
    # at its first frame back rank 1's turn had not come, and it was called "silent for 10 s
    # (no heartbeat)" (then "heard from again"), in the log and the report's stalls, while it
    # had trained on throughout. A rank really silent after the pause is still called so.
    core = HubCore(run_id="r")
    now, seq = 100.0, {0: 0, 1: 0}

    def send(rank, step):
        msg = schema.Heartbeat(run="r", rank=rank, seq=seq[rank], step=step, phase="forward", t=1.0e9 + now, mono=now)
        seq[rank] += 1
        assert core.ingest_bytes(schema.encode(msg), now)

    for r in (0, 1):
        assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=r, seq=seq[r], world_size=2, t=1.0e9)), now)
        seq[r] += 1
    for k in range(30):  # 3 s of frames and heartbeats
        now += 0.1
        for r in (0, 1):
            send(r, k)
        core.tick(now)
    now += 10.0  # the hub stopped; back, it takes rank 0's backlog first
    for k in range(30, 130, 10):
        send(0, k)
    core.tick(now)
    for k in range(30, 130, 10):  # then rank 1's
        send(1, k)
    for _ in range(10):
        now += 0.1
        core.tick(now)
    verdicts = [(v.rank, v.verdict) for v in core.state.events if isinstance(v, schema.Verdict)]
    assert verdicts == []
    for _ in range(50):  # 5 s more: rank 0 beats, rank 1 (really) says nothing
        now += 0.1
        send(0, 200)
        core.tick(now)
    verdicts = [(v.rank, v.verdict) for v in core.state.events if isinstance(v, schema.Verdict)]
    assert verdicts == [(1, "silent")]


def test_a_ranks_own_exit_wins_over_a_launcher_note_taken_first():
    # ZeroMQ takes from each sender in turn: a launcher's note that a rank "was stopped" (seq
    # -1) can be taken before the rank's own last word, sent earlier. The rank's word decides.
    core = HubCore(run_id="r")
    assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=0, world_size=1, pid=10, t=1.0e9)), 1.0)
    note = schema.Event(run="r", rank=0, seq=-1, t=1.0e9 + 2, name="exit", code=-15, message="rank 0 was stopped by torchrun")
    assert core.ingest_bytes(schema.encode(note), 2.0)
    assert core.state.ranks[0].status == "exited"
    assert core.ingest_bytes(schema.encode(schema.Event(run="r", rank=0, seq=1, t=1.0e9 + 1, name="exit", code=0)), 2.0)
    r = core.state.ranks[0]
    assert r.status == "finished" and r.exit_code is None


def test_a_ranks_own_exit_after_the_launchers_note_of_it_is_said_once():
    # The launcher's note (torchrun saw rank 1 die with code 1) was taken before the rank's own
    # exit, held up as it died: the headless lines said "[exit] rank 1 exited with code 1"
    # twice, and the TUI's event log likewise.
    from pardash.telemetry.printer import event_line

    core = HubCore(run_id="r")
    for r in (0, 1):
        assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=r, world_size=2, pid=10 + r, t=1.0e9)), 1.0)
    note = schema.Event(run="r", rank=1, seq=-1, t=1.0e9 + 2, name="exit", code=1, message="torchrun: rank 1 exit code 1")
    error = schema.Event(run="r", rank=1, seq=1, t=1.0e9 + 1, name="error", message="RuntimeError: boom", step=29)
    own = schema.Event(run="r", rank=1, seq=2, t=1.0e9 + 1, name="exit", code=1, step=30)
    for m in (note, error, own):
        assert core.ingest_bytes(schema.encode(m), 2.0)
    lines = [line for m in core.state.events if (line := event_line(m))]
    assert lines == ["[exit] rank 1 exited with code 1", "[error] rank 1: RuntimeError: boom"]
    # The rank's own word still counts where the failure is judged (its step).
    assert [m.step for m in core.state.lifecycle if isinstance(m, schema.Event) and m.name == "exit"] == [None, 30]
    # After a restart, the same rank's exit is a new one.
    assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=1, world_size=2, pid=20, restart=1, seq=0, t=1.0e9 + 3)), 3.0)
    again = schema.Event(run="r", rank=1, seq=5, t=1.0e9 + 4, name="exit", code=1, step=3)
    assert core.ingest_bytes(schema.encode(again), 4.0)
    assert event_line(core.state.events[-1]) == "[exit] rank 1 exited with code 1"


def test_a_step_of_a_rank_beyond_the_world_size_is_refused_even_when_the_rank_is_known():
    # A hub told the world size that resumes a log holding a higher rank (an earlier, larger
    # job under the same run id) knows that rank, yet must refuse its steps, by either path.
    core = HubCore(run_id="r", world_size=4)
    core.replay(schema.Hello(run="r", rank=5, world_size=8, pid=10, t=1.0e9), 1.0)
    core.replay(schema.Hello(run="r", rank=0, world_size=4, pid=11, t=1.0e9), 1.0)
    step = schema.Step(run="r", rank=5, seq=1, step=1, step_s=0.1, t=1.0e9 + 1)
    assert not core.ingest_bytes(schema.encode(step), 2.0)
    assert core.ingest_batch([schema.encode(step)] * 2, 2.0) == 0
    assert core.rejected["rank_out_of_range"] == 3 and core.state.ranks[5].steps_seen == 0


def test_a_hello_that_contradicts_the_world_size_the_hub_was_told_is_refused():
    # Rank 0 saying the job has a million ranks must not become the run's world size (the
    # memory expectation divides by it, /metrics reports it) on a hub the launcher told 2.
    core = HubCore(run_id="r", world_size=2)
    assert not core.ingest(schema.Hello(run="r", rank=0, world_size=1 << 20, pid=10, t=1.0e9), 1.0)
    assert core.rejected == {"world_size_mismatch": 1} and core.state.world_size == 0
    assert core.ingest(schema.Hello(run="r", rank=0, world_size=2, pid=10, t=1.0e9), 1.0)
    assert core.state.world_size == 2
    learnt = HubCore(run_id="r")  # told nothing: the hellos say it
    assert learnt.ingest(schema.Hello(run="r", rank=0, world_size=8, pid=10, t=1.0e9), 1.0)
    assert learnt.state.world_size == 8


def _hub_args(tmp_path, *extra):
    import argparse

    from pardash.telemetry.hub import add_hub_arguments

    p = argparse.ArgumentParser()
    add_hub_arguments(p)
    return p.parse_args(["--run-id", "r", "--log", str(tmp_path / "run.jsonl"), "--no-registry", *extra])


def test_a_restarted_hub_is_ready_before_it_reads_its_log_back(tmp_path, monkeypatch):
    # Reading a day's log back takes minutes: the supervisor waiting for the ready line must
    # not take that for a hub that failed to start (it gave up, and the hub crash-looped).
    import os
    import select

    from pardash.telemetry import hub as hub_mod

    (tmp_path / "run.jsonl").write_bytes(schema.encode_json(schema.Step(run="r", rank=0, seq=1, step=1, hseq=1)) + b"\n")
    r, w = os.pipe()
    seen = {}

    def recover(self):
        seen["ready_first"] = bool(select.select([r], [], [], 0)[0])
        self.stop()  # serve returns at once
        return 0

    monkeypatch.setattr(hub_mod.Hub, "recover", recover)
    monkeypatch.setattr(hub_mod.signal, "signal", lambda *a: None)  # keep pytest's own handlers
    assert hub_mod.run_hub(_hub_args(tmp_path, "--resume"), ready_fd=w) == 0
    assert seen == {"ready_first": True}
    assert b'"ingest"' in os.read(r, 65536)
    os.close(r)


def test_a_hub_nobody_waits_for_any_more_serves_all_the_same(tmp_path, monkeypatch):
    import os

    from pardash.telemetry import hub as hub_mod

    r, w = os.pipe()
    os.close(r)  # the supervisor gave up waiting
    served = []
    monkeypatch.setattr(hub_mod.Hub, "serve", lambda self, **kw: served.append(True))
    monkeypatch.setattr(hub_mod.signal, "signal", lambda *a: None)  # keep pytest's own handlers
    assert hub_mod.run_hub(_hub_args(tmp_path), ready_fd=w) == 0
    assert served == [True]


def test_a_hub_restarted_on_a_log_it_cannot_write_serves_all_the_same(tmp_path, monkeypatch, capsys):
    # Refusing an unwritable --log is right when a job starts; a hub the supervisor restarts
    # under a running job must serve anyway, or its restarts are spent in seconds and the run
    # loses its telemetry for good.
    import argparse

    from pardash.telemetry import hub as hub_mod
    from pardash.telemetry.hub import add_hub_arguments

    (tmp_path / "file").write_text("not a folder")
    p = argparse.ArgumentParser()
    add_hub_arguments(p)
    argv = ["--run-id", "r", "--log", str(tmp_path / "file" / "run.jsonl"), "--no-registry"]
    served = []
    monkeypatch.setattr(hub_mod.Hub, "serve", lambda self, **kw: served.append(self.recorder.error))
    monkeypatch.setattr(hub_mod.signal, "signal", lambda *a: None)
    assert hub_mod.run_hub(p.parse_args(argv)) == 2 and served == []
    assert hub_mod.run_hub(p.parse_args([*argv, "--resume"])) == 0
    assert len(served) == 1 and "cannot write" in served[0]
    assert "serving without it until it can write" in capsys.readouterr().err


def test_a_log_of_blank_lines_is_a_new_log_and_a_file_of_other_things_is_not_called_a_run(tmp_path, monkeypatch, capsys):
    # `pardash launch --log notes.txt` said "already holds a run" of a file that held none,
    # and refused a file of blank lines (an editor's save of an empty file) the same way.
    from pardash.telemetry import hub as hub_mod
    from pardash.trainer.launcher import LaunchError, new_spec

    log = tmp_path / "run.jsonl"
    log.write_text("\n \n")
    assert new_spec(log_path=str(log), runs_dir=str(tmp_path / "runs")).log_path == str(log)
    monkeypatch.setattr(hub_mod.Hub, "serve", lambda self, **kw: None)
    monkeypatch.setattr(hub_mod.signal, "signal", lambda *a: None)
    assert hub_mod.run_hub(_hub_args(tmp_path)) == 0
    log.write_text("my notes\n")
    with pytest.raises(LaunchError, match="is not a pardash log"):
        new_spec(log_path=str(log), runs_dir=str(tmp_path / "runs"))
    assert log.read_text() == "my notes\n"


def test_a_hub_does_not_append_a_new_run_to_a_log_that_holds_one(tmp_path, monkeypatch, capsys):
    from pardash.telemetry import hub as hub_mod

    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json(schema.Step(run="old", rank=0, seq=1, step=1, hseq=1)) + b"\n")
    before = log.read_bytes()
    monkeypatch.setattr(hub_mod.Hub, "serve", lambda self, **kw: None)
    monkeypatch.setattr(hub_mod.signal, "signal", lambda *a: None)
    assert hub_mod.run_hub(_hub_args(tmp_path)) == 2
    assert "already holds a run; pass --resume" in capsys.readouterr().err and log.read_bytes() == before
    assert hub_mod.run_hub(_hub_args(tmp_path, "--resume", "--run-id", "old")) == 0  # carrying it on is asked for


def test_a_hub_resuming_a_log_carries_on_its_run_id(tmp_path, monkeypatch, capsys):
    # `pardash hub --resume --log L` without --run-id made up a new id: the log then held two
    # runs ("the figures below mix them") and the hub told ranks to report under the new one.
    import argparse
    import json

    from pardash.telemetry import hub as hub_mod
    from pardash.telemetry.hub import add_hub_arguments
    from pardash.telemetry.logreader import load_log

    log = tmp_path / "run.jsonl"
    log.write_bytes(
        schema.encode_json(schema.Event(run="", rank=-1, name="hub", message="hub started", hseq=1)) + b"\n"
        + schema.encode_json(schema.Step(run="old-run", rank=0, seq=1, step=1, hseq=2)) + b"\n"
    )
    served = []
    monkeypatch.setattr(hub_mod.Hub, "serve", lambda self, **kw: served.append(self.core.state.run_id))
    monkeypatch.setattr(hub_mod.signal, "signal", lambda *a: None)
    p = argparse.ArgumentParser()
    add_hub_arguments(p)
    assert hub_mod.run_hub(p.parse_args(["--log", str(log), "--no-registry", "--resume"])) == 0
    out = capsys.readouterr().out
    assert json.loads(out.splitlines()[0])["run_id"] == "old-run" and served == ["old-run"]
    msgs, _ = load_log(log)
    assert {m.run for m in msgs} <= {"", "old-run"}

    # Another id than the log's, asked for: refused, the log untouched (it held two runs).
    before = log.read_bytes()
    assert hub_mod.run_hub(p.parse_args(["--log", str(log), "--no-registry", "--resume", "--run-id", "other-run"])) == 2
    assert "the log " + str(log) + " is run old-run's, not other-run's" in capsys.readouterr().err
    assert log.read_bytes() == before and served == ["old-run"]
    assert hub_mod.run_hub(p.parse_args(["--log", str(log), "--no-registry", "--resume", "--run-id", "old-run"])) == 0
    assert served == ["old-run", "old-run"]
    capsys.readouterr()

    # A log that holds nothing yet is started, and said so.
    fresh = tmp_path / "fresh.jsonl"
    assert hub_mod.run_hub(p.parse_args(["--log", str(fresh), "--no-registry", "--resume"])) == 0
    assert f"--resume: {fresh} holds no run yet; starting it" in capsys.readouterr().err


def test_a_hub_does_not_append_to_a_compressed_log(tmp_path, monkeypatch, capsys):
    import gzip

    from pardash.telemetry import hub as hub_mod

    log = tmp_path / "run.jsonl"
    log.write_bytes(gzip.compress(schema.encode_json(schema.Step(run="r", rank=0, seq=1, step=1, hseq=1)) + b"\n"))
    before = log.read_bytes()
    monkeypatch.setattr(hub_mod.Hub, "serve", lambda self, **kw: None)
    monkeypatch.setattr(hub_mod.signal, "signal", lambda *a: None)
    assert hub_mod.run_hub(_hub_args(tmp_path, "--resume")) == 2
    assert "gzip-compressed" in capsys.readouterr().err and log.read_bytes() == before


def test_a_hub_refuses_what_is_no_log_of_its_own_and_ids_that_are_no_file_name(tmp_path, monkeypatch, capsys):
    # `--resume` appended records to any file (a text file: "hello world" then JSON lines);
    # `--run-id ../../etc` put the log and the registry entry outside their folders; a .gz
    # name was refused by launch but not by hub or simulate; `--world-size -1` refused every rank.
    import argparse

    from pardash.telemetry import hub as hub_mod
    from pardash.telemetry.hub import add_hub_arguments

    monkeypatch.setattr(hub_mod.Hub, "serve", lambda self, **kw: None)
    monkeypatch.setattr(hub_mod.signal, "signal", lambda *a: None)
    notes = tmp_path / "notes.txt"
    notes.write_text("hello world\n")
    for extra in ([], ["--resume"]):
        assert hub_mod.run_hub(argparse.Namespace(**{**vars(_hub_args(tmp_path, *extra)), "log": str(notes)})) == 2
        assert f"{notes} is not a pardash log" in capsys.readouterr().err and notes.read_text() == "hello world\n"
    assert hub_mod.run_hub(argparse.Namespace(**{**vars(_hub_args(tmp_path)), "log": str(tmp_path / "new.jsonl.gz")})) == 2
    assert "the hub writes plain JSON lines" in capsys.readouterr().err and not (tmp_path / "new.jsonl.gz").exists()
    p = argparse.ArgumentParser()
    add_hub_arguments(p)
    for argv, needle in ((["--run-id", "../../etc"], "a run id is letters"), (["--run-id", "a/b"], "a run id is letters"),
                         (["--run-id", ".hidden"], "a run id is letters"), (["--world-size", "-1"], "must be at least 0")):  # fmt: skip
        with pytest.raises(SystemExit) as exit_:
            p.parse_args(argv)
        assert exit_.value.code == 2 and needle in capsys.readouterr().err
    # A log whose own run id would be such a name is not carried on under it.
    log = tmp_path / "odd.jsonl"
    log.write_bytes(schema.encode_json(schema.Step(run="../../etc", rank=0, seq=1, step=1, hseq=1)) + b"\n")
    assert hub_mod.run_hub(p.parse_args(["--log", str(log), "--no-registry", "--resume"])) == 2
    assert "not a run id pardash makes; pass --run-id ID" in capsys.readouterr().err
    assert hub_mod.run_hub(p.parse_args(["--log", str(log), "--no-registry", "--resume", "--run-id", "mine"])) == 0


def test_the_ingest_decodes_a_plain_step_as_a_step_and_sends_the_odd_ones_the_general_way():
    # The hub's first decode checks a step's bounds (IngestStep); it must mirror the schema's
    # Step (a log line is the same whichever way the step came), and every step outside the
    # bounds must still reach the general way, which names its reason.
    from pardash.telemetry.hubcore import HubCore, IngestStep, _defaults

    assert IngestStep.__struct_fields__ == schema.Step.__struct_fields__
    assert _defaults(IngestStep) == _defaults(schema.Step)
    core = HubCore(run_id="r", world_size=4)
    assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=0, world_size=4, t=1.0e9)), 1.0)
    plain = schema.Step(run="r", rank=0, seq=1, step=1, step_s=0.1, data_s=0.01, t=1.0e9 + 1, mono=5.0)
    assert core.ingest_bytes(schema.encode(plain), 1.0)
    taken = core.state.ranks[0].step
    assert type(taken) is IngestStep and schema.encode_json(taken) == schema.encode_json(
        msgspec.structs.replace(plain, hseq=taken.hseq)
    )
    odd = {
        "not_finite": dict(step_s=float("nan")),
        "out_of_range": dict(t=-1.0),
        "newer_version": dict(v=schema.SCHEMA_VERSION + 1),
        "rank_out_of_range": dict(rank=4),
    }
    for seq, (reason, change) in enumerate(odd.items(), start=2):
        fields = {**msgspec.structs.asdict(plain), "seq": seq, **change}
        assert not core.ingest_bytes(schema.encode(schema.Step(**fields)), 1.0)
        assert core.rejected[reason] == 1, reason
    # Custom metrics are taken, by the general way.
    assert core.ingest_bytes(schema.encode(msgspec.structs.replace(plain, seq=9, step=2, custom={"acc": 0.5})), 1.0)
    assert core.state.ranks[0].step.custom == {"acc": 0.5} and core.state.counts["step"] == 2


def test_ps_learns_what_a_hub_alone_records_from_its_first_hello(tmp_path):
    # A hub started alone (ranks from plain torchrun) listed "-  -" for strategy and ranks,
    # while its TUI said "ddp · 2 ranks".
    import json
    import subprocess
    import sys

    from helpers import pardash_env

    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash", "hub", "--run-id", "alone", "--log", str(tmp_path / "t.jsonl")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env(),
    )  # fmt: skip
    try:
        info = json.loads(proc.stdout.readline())
        # and for a person: how ranks and viewers reach it (it printed only the JSON line)
        said = proc.stderr.readline()
        assert f"PARDASH_ENDPOINT={info['ingest']} PARDASH_RUN_ID=alone" in said and "`pardash attach alone`" in said

        def listed() -> dict:
            ps = subprocess.run([sys.executable, "-m", "pardash", "ps", "--json"], capture_output=True, text=True, env=pardash_env(), timeout=60)
            return next(e for e in json.loads(ps.stdout) if e["run_id"] == "alone")

        assert not listed().get("strategy")
        rep = Reporter(info["ingest"], run="alone", identity=identity(0, 2), heartbeat_s=0)
        rep.hello(strategy="ddp")
        wait_for(lambda: listed().get("strategy") == "ddp", timeout_s=30, poll_s=0.3)
        assert listed()["world_size"] == 2
        rep.close()
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_hub_alone_told_another_world_size_says_why_it_refuses_the_hellos(tmp_path):
    # `pardash hub --world-size 4` and a 2-rank job: every hello was refused in silence (the
    # report's "refused ... world_size_mismatch 4" afterwards; hosts and strategy "-").
    import json
    import subprocess
    import sys

    from helpers import pardash_env

    err = tmp_path / "stderr"
    with open(err, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pardash", "hub", "--run-id", "ws", "--world-size", "4", "--log", str(tmp_path / "t.jsonl"), "--no-registry"],
            stdout=subprocess.PIPE, stderr=fh, text=True, env=pardash_env(),
        )  # fmt: skip
    try:
        info = json.loads(proc.stdout.readline())
        rep = Reporter(info["ingest"], run="ws", identity=identity(1, 2), heartbeat_s=0)
        rep.hello(strategy="ddp")
        wait_for(lambda: "says its job has" in err.read_text())
        assert "rank 1 says its job has 2 ranks (its hello), but this hub was told 4 (--world-size)" in err.read_text()
        rep.close()
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_hub_alone_whose_output_has_no_reader_warns_without_error_and_serves_on(tmp_path):
    # `pardash hub 2>&1 | tee hub.txt` with the tee gone: the warning said to that pipe raised
    # in the hub's loop, and was counted as an internal_error reject of the rank's hello.
    import json
    import os
    import subprocess
    import sys

    from helpers import pardash_env

    log = tmp_path / "t.jsonl"
    read, write = os.pipe()
    os.close(read)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash", "hub", "--run-id", "ws", "--world-size", "4", "--log", str(log), "--no-registry"],
        stdout=subprocess.PIPE, stderr=write, text=True, env=pardash_env(),
    )  # fmt: skip
    os.close(write)
    reporters = []
    try:
        info = json.loads(proc.stdout.readline())
        wrong = Reporter(info["ingest"], run="ws", identity=identity(1, 2), heartbeat_s=0)
        right = Reporter(info["ingest"], run="ws", identity=identity(0, 4), heartbeat_s=0)
        reporters = [wrong, right]
        wrong.hello(strategy="ddp")  # a warning, said to the pipe without a reader
        right.hello(strategy="ddp")
        right.step(step=1, step_s=0.1, loss=1.0)
        wait_for(lambda: '"kind":"step"' in log.read_text() and "refused so far" in log.read_text())
    finally:
        for rep in reporters:
            rep.close()
        proc.terminate()
        assert proc.wait(30) == 0
    text = log.read_text()
    assert "rank 1 says its job has 2 ranks" in text and "world_size_mismatch 1" in text and "internal_error" not in text


def test_a_hello_against_the_told_world_size_is_said_once_in_the_log_and_to_the_operator():
    said: list[str] = []
    core = HubCore(run_id="r", world_size=4)
    core.say = said.append
    for rank in (0, 1):
        assert not core.ingest(schema.Hello(run="r", rank=rank, world_size=2, pid=10, t=1.0e9), 1.0)
    warnings = [m for m in core.state.events if isinstance(m, schema.Event) and m.name == "warning"]
    assert len(said) == len(warnings) == 1 and said[0] == warnings[0].message
    assert core.rejected == {"world_size_mismatch": 2}


def test_a_rank_stopped_by_torchrun_that_says_another_code_itself_exits_once_with_torchruns():
    # torchrun stopped rank 0 with SIGTERM after rank 1 died (its note: -15); rank 0's own exit,
    # held up as it died, said code 1: "[exit] rank 0 exited with code -15" then "... code 1".
    # (Said as a stop, as its status "stopped" says: failures.stop_text.)
    from pardash.telemetry.printer import event_line

    core = HubCore(run_id="r")
    for r in (0, 1):
        assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=r, world_size=2, pid=10 + r, t=1.0e9)), 1.0)
    note = schema.Event(run="r", rank=0, seq=-1, t=1.0e9 + 2, name="exit", code=-15, message="rank 0 was stopped by torchrun")
    own = schema.Event(run="r", rank=0, seq=3, t=1.0e9 + 1, name="exit", code=1, step=752)
    for m in (note, own):
        assert core.ingest_bytes(schema.encode(m), 2.0)
    assert [line for m in core.state.events if (line := event_line(m))] == ["[exit] rank 0 stopped by torchrun (SIGTERM)"]
    assert core.state.ranks[0].exit_code == -15


def test_a_step_with_figures_no_viewer_can_show_is_refused_and_a_lost_loss_is_dropped():
    # A step time of 1e300 s or a step number past 2**48 is refused (out_of_range); a loss or a
    # learning rate gone NaN or infinite is the rank's news, so the step is kept without it
    # (JSON has no NaN, and the viewers chart the loss).
    from pardash.telemetry.hubcore import HubCore

    core = HubCore(run_id="r", world_size=2)
    assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=0, world_size=2, t=1.0e9)), 1.0)
    base = dict(run="r", rank=0, step_s=0.1, t=1.0e9 + 1, mono=5.0)
    assert not core.ingest_bytes(schema.encode(schema.Step(seq=1, step=1, **{**base, "step_s": 1e300})), 1.0)
    assert not core.ingest_bytes(schema.encode(schema.Step(seq=2, step=2**64 - 1, **base)), 1.0)
    assert not core.ingest_bytes(schema.encode(schema.Step(seq=2, step=2, samples_total=-1, **base)), 1.0)
    assert not core.ingest_bytes(schema.encode(schema.Step(seq=2, step=2, samples_total=2**63 - 1, **base)), 1.0)
    assert core.rejected["out_of_range"] == 4
    assert core.ingest_bytes(schema.encode(schema.Step(seq=3, step=3, loss=float("inf"), lr=float("nan"), **base)), 1.0)
    taken = core.state.ranks[0].step
    assert (taken.step, taken.loss, taken.lr) == (3, None, None)
    assert core.ingest_bytes(schema.encode(schema.Step(seq=4, step=4, loss=0.5, lr=1e-3, **base)), 1.0)
    assert (core.state.ranks[0].step.loss, core.state.ranks[0].step.lr) == (0.5, 1e-3)


def test_a_viewer_that_asks_for_snapshots_and_never_reads_them_costs_the_hub_little(hub):
    # A snapshot is megabytes at scale. A viewer asking at every frame and reading nothing had
    # the hub encode the whole state ten times a second and queue up to 1000 of them for it
    # (2.4 GB of hub memory in a minute at 512 ranks). Now: one snapshot a second per viewer,
    # a few queued per viewer at most, and other viewers are answered as ever.
    import time

    from pardash.telemetry import hub as hubmod

    reps = _ranks(hub, world=8)
    for r in reps:
        r.step(step=1, loss=1.0, step_s=0.01)
    ctx = zmq.Context.instance()
    hog = ctx.socket(zmq.DEALER)
    hog.setsockopt(zmq.RCVHWM, 1)
    hog.setsockopt(zmq.RCVBUF, 4096)
    hog.connect(hub.snapshot_endpoint)
    served0 = hub.core.snapshots_served
    t0 = time.monotonic()
    for _ in range(60):  # 1.2 s or more of asking, never reading
        hog.send(schema_request(), zmq.NOBLOCK)
        time.sleep(0.02)
    elapsed = time.monotonic() - t0
    hog_served = hub.core.snapshots_served - served0
    assert 1 <= hog_served <= elapsed / hubmod.SNAPSHOT_EVERY_S + 1
    viewer = HubClient(hub.updates_endpoint, hub.snapshot_endpoint)
    assert viewer.wait_synced(10)
    assert len(viewer.state.ranks) == 8
    viewer.close()
    hog.close(0)
    for r in reps:
        r.close()


def schema_request() -> bytes:
    from pardash.telemetry import frames

    return frames.SNAPSHOT_REQUEST


def test_big_hellos_and_events_are_kept_whole_in_the_log_and_cut_in_memory(tmp_path):
    # 1000 hellos of 250 kB and 4000 error events with 16k-character messages and 65k-character
    # tracebacks took a hub from 30 MB to 1.7 GB (and every viewer's snapshot with it). The log
    # keeps every one whole; memory keeps rank 0's config and the ends of long texts.
    from pardash.telemetry import state as state_mod
    from pardash.telemetry.recorder import Recorder

    rec = Recorder(tmp_path / "run.jsonl")
    core = HubCore(run_id="r", recorder=rec, world_size=64)
    config = {f"key{k}": "v" * 1000 for k in range(100)}  # 100 kB
    for rank in range(64):
        assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=rank, world_size=64, t=1.0e9, config=config)), 1.0)
        err = schema.Event(run="r", rank=rank, seq=1, t=1.0e9 + 1, name="error", message="m" * 16_000, traceback="t" * 60_000 + "Boom")
        assert core.ingest_bytes(schema.encode(err), 1.0)
    rec.close()
    st = core.state
    assert st.hello.config == config and all(st.ranks[r].hello.config == {} for r in range(1, 64))
    kept = [e for e in st.events if e.name == "error"]
    assert len(kept) == 64 and all(len(e.message) <= state_mod.MESSAGE_KEPT for e in kept)
    assert all(len(e.traceback) <= state_mod.TRACEBACK_KEPT and e.traceback.endswith("Boom") for e in kept)
    msgs, _ = load_log(tmp_path / "run.jsonl")
    logged = [m for m in msgs if isinstance(m, schema.Event) and m.name == "error"]
    assert len(logged) == 64 and all(len(m.message) == 16_000 and len(m.traceback) == 60_004 for m in logged)
    assert all(m.config == config for m in msgs if isinstance(m, schema.Hello))


def test_a_message_numbered_far_past_its_ranks_newest_is_refused():
    # One step with seq 2**48 made the run's lost count 281,474,976,710,5xx for good. A hub that
    # starts late still takes a rank's first message at any number (what came before is lost).
    core = HubCore(run_id="r", world_size=2)
    assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=0, world_size=2, t=1.0e9)), 1.0)
    base = dict(run="r", rank=0, step_s=0.1, t=1.0e9 + 1, mono=5.0)
    for seq in range(1, 4):
        assert core.ingest_bytes(schema.encode(schema.Step(seq=seq, step=seq, **base)), 1.0)
    assert not core.ingest_bytes(schema.encode(schema.Step(seq=2**47, step=4, **base)), 1.0)
    assert core.rejected["out_of_range"] == 1 and core.state.lost == 0
    assert core.ingest_bytes(schema.encode(schema.Step(seq=4, step=4, **base)), 1.0)
    assert core.ingest_bytes(schema.encode(schema.Step(run="r", rank=1, seq=50_000_000, step=9, step_s=0.1, t=1.0e9 + 1)), 1.0)
    assert core.state.ranks[1].seq.lost == 50_000_000


def test_a_hub_alone_takes_a_job_that_grows():
    # A job requeued on more nodes, or scaled up by torchelastic (whose restart count does not
    # change when nodes join), says a larger world size in the same attempt: a hub alone takes
    # its new ranks (the bound on ranks is the largest size a hello said).
    core = HubCore(run_id="r")
    assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=0, world_size=2, t=1.0e9, pid=10)), 1.0)
    for rank in range(4):
        assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=rank, world_size=4, t=1.0e9, pid=20 + rank)), 1.0)
        assert core.ingest_bytes(schema.encode(schema.Step(run="r", rank=rank, seq=1, step=1, step_s=0.1, t=1.0e9 + 1)), 1.0)
    assert not core.rejected and core.state.world_size == 4


def test_a_hub_alone_refuses_ranks_beyond_the_size_its_run_said():
    # Without --world-size, 40,000 made-up ranks filled the hub's room for ranks and the job's
    # own rank 0 was refused as too_many_ranks. Once the run's hello says its size, ranks
    # beyond it are refused.
    core = HubCore(run_id="r")
    assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=0, world_size=2, t=1.0e9)), 1.0)
    for rank in range(100, 2100):
        core.ingest_bytes(schema.encode(schema.Step(run="r", rank=rank, seq=1, step=1, step_s=0.1, t=1.0e9 + 1)), 1.0)
    assert core.rejected["rank_out_of_range"] == 2000 and sorted(core.state.ranks) == [0]
    assert core.ingest_bytes(schema.encode(schema.Step(run="r", rank=1, seq=1, step=1, step_s=0.1, t=1.0e9 + 1)), 1.0)


def test_a_hub_that_cannot_bind_leaves_no_empty_log_behind(tmp_path, capsys):
    # A busy --port: the hub said "cannot bind" and left an empty log (and run folder) behind,
    # which the next `pardash report` of the run id found.
    from pardash.telemetry import hub as hub_mod

    import socket

    ctx = zmq.Context.instance()
    for _ in range(100):  # a busy port whose port below is free (other jobs bind ports too)
        busy = ctx.socket(zmq.PULL)
        port = busy.bind_to_random_port("tcp://127.0.0.1")
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port - 1))
                break
            except OSError:
                busy.close(0)
    try:
        args = _hub_args(tmp_path / "runs" / "r", "--port", str(port))
        assert hub_mod.run_hub(args) == 2
        assert f"cannot bind 127.0.0.1:{port} (Address already in use): the hub's ingest port" in capsys.readouterr().err
        assert not (tmp_path / "runs").exists()
        # --port one below the busy one: the updates port (PORT+1) was taken, and the error
        # named the free --port, with the address of the busy one in its ZeroMQ text.
        args = _hub_args(tmp_path / "runs" / "r", "--port", str(port - 1))
        assert hub_mod.run_hub(args) == 2
        err = capsys.readouterr().err
        assert f"cannot bind 127.0.0.1:{port} (Address already in use): the hub's updates port: it takes --port {port - 1}" in err, err
        assert not (tmp_path / "runs").exists()
    finally:
        busy.close(0)


def test_what_a_terminal_would_act_on_never_reaches_a_viewer_and_a_hellos_strings_are_cut(tmp_path):
    # A rank's host, note, event messages and metric names went to every viewer's terminal
    # as they were: escape sequences that set its title, clear its screen, write its clipboard.
    # And a hello's strings had no bound (1000 hellos with 200 kB hosts took the hub to 288 MB).
    from pardash.telemetry.hubcore import MAX_FIELD
    from pardash.telemetry.recorder import Recorder

    rec = Recorder(tmp_path / "run.jsonl")
    core = HubCore(run_id="r", recorder=rec, world_size=2)
    esc = "\x1b]0;owned\x07\x1b[2J\x1b]52;c;aGk=\x07\u202e\x9b"
    hello = schema.Hello(
        run="r", rank=0, world_size=2, t=1.0e9, host="h" + esc + "x" * 200_000, note="n" + esc,
        strategy="ddp" + esc, config={"lr" + esc: ["a\nb" + esc], "k": 1},
    )  # fmt: skip
    assert core.ingest_bytes(schema.encode(hello), 1.0)
    base = dict(run="r", rank=0, t=1.0e9 + 1)
    assert core.ingest_bytes(schema.encode(schema.Step(seq=1, step=1, step_s=0.1, mono=5.0, custom={"acc" + esc: 1.0}, **base)), 1.0)
    err = schema.Event(seq=2, name="error" + esc, message="boom" + esc + "\r\nline 2\tx", traceback="Traceback\n" + esc, **base)
    assert core.ingest_bytes(schema.encode(err), 1.0)
    assert core.ingest_bytes(schema.encode(schema.Heartbeat(seq=3, phase="data" + esc, mono=5.0, **base)), 1.0)
    rec.close()
    msgs, _ = load_log(tmp_path / "run.jsonl")
    for held in (msgs, [core.state.ranks[0].hello, core.state.ranks[0].step, *core.state.events]):
        text = "".join(str(msgspec.to_builtins(m)) for m in held)
        assert not any(c in text for c in "\x1b\x07\u202e\x9b"), text[:300]
    h = core.state.ranks[0].hello
    assert h.host.startswith("hxxx") and len(h.host) <= MAX_FIELD
    assert (h.note, h.strategy, h.config) == ("n", "ddp", {"lr": ["a\nb"], "k": 1})
    e = [m for m in msgs if isinstance(m, schema.Event) and m.rank == 0][0]
    assert (e.name, e.message) == ("error", "boom\nline 2\tx")
    assert list(core.state.ranks[0].step.custom) == ["acc"]


def test_a_second_hub_on_a_log_another_hub_writes_is_refused(tmp_path):
    # Two runs started at once with the same --log both found it empty and both appended to
    # it (the report then mixed them): the first hub holds the log while it lives.
    import subprocess
    import sys

    from helpers import pardash_env
    from pardash.telemetry.spawn import spawn_hub

    log = tmp_path / "same.jsonl"
    first, _ = spawn_hub(["--run-id", "a", "--log", str(log), "--no-registry"], env=pardash_env())
    try:
        second = subprocess.run(
            [sys.executable, "-m", "pardash.telemetry.hub", "--run-id", "b", "--log", str(log), "--no-registry"],
            capture_output=True, text=True, timeout=60, env=pardash_env(),
        )  # fmt: skip
        assert second.returncode == 2
        assert f"the log {log} is being written by another hub" in second.stderr
        assert '"run":"b"' not in log.read_text()
    finally:
        first.terminate()
        first.wait(30)
    again, _ = spawn_hub(["--run-id", "c", "--log", str(tmp_path / "next.jsonl"), "--no-registry"], env=pardash_env())
    again.terminate()
    again.wait(30)


def test_a_flood_of_events_from_one_rank_is_refused_past_its_budget():
    # 22,000 events of a megabyte from rank 0 in 10 s were all taken (cut to 16 KiB each):
    # 363 MB of log. A rank's events have a budget; the launcher's notes (seq -1) are not its.
    from pardash.telemetry.hubcore import EVENTS_BURST, EVENTS_PER_S

    core = HubCore(run_id="r", world_size=2)
    flood = [schema.encode(schema.Event(run="r", rank=0, seq=i, t=1.0e9, name="warning", message="x" * 100_000)) for i in range(1, 1001)]
    taken = sum(core.ingest_bytes(raw, 5.0) for raw in flood)
    assert taken == EVENTS_BURST and core.rejected["too_many_events"] == 1000 - EVENTS_BURST
    assert core.ingest_bytes(schema.encode(schema.Event(run="r", rank=1, seq=1, t=1.0e9, name="checkpoint")), 5.0)  # another rank's
    later = 5.0 + 10 / EVENTS_PER_S  # the budget refills at EVENTS_PER_S
    assert sum(core.ingest_bytes(raw, later) for raw in flood[:20]) == 10
    note = schema.encode(schema.Event(run="r", rank=0, seq=-1, t=1.0e9, name="exit", code=-15, message="stopped"))
    assert core.ingest_bytes(note, later)  # the launcher's word on its behalf
    # Its budget spent, a rank that crashes still says so: its error and exit are never refused.
    assert not core.ingest_bytes(flood[-1], later)
    crash = [schema.Event(run="r", rank=0, seq=2000, t=1.0e9, name="error", message="RuntimeError: boom", traceback="..."),
             schema.Event(run="r", rank=0, seq=2001, t=1.0e9, name="exit", code=1)]  # fmt: skip
    assert all(core.ingest_bytes(schema.encode(m), later) for m in crash)


def test_a_hub_records_into_a_fifo_another_tool_reads(tmp_path):
    # `pardash hub --log FIFO` never started: looking whether the log was gzip-compressed
    # opened the FIFO for reading, which waits for a writer that never comes.
    import os
    import threading

    from helpers import pardash_env
    from pardash.telemetry.spawn import spawn_hub

    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    got = bytearray()

    def read() -> None:
        with open(fifo, "rb") as fh:  # (opens once the hub opens it to write)
            got.extend(fh.readline())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc, info = spawn_hub(["--run-id", "r", "--log", str(fifo), "--no-registry"], timeout_s=30, env=pardash_env())
    try:
        assert info["run_id"] == "r"
        reader.join(30)
        assert b'"name":"hub"' in got
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_hello_from_a_clock_far_from_the_hubs_is_said_once_a_host():
    # A node whose clock was never set (1970) showed only as a run decades long: the hub holds
    # each hello's time against its own and says so live, once for each host.
    now = 1.8e9
    core = HubCore(run_id="r", wall_clock=lambda: now)
    hellos = [
        schema.Hello(run="r", rank=0, world_size=4, pid=10, host="n0", t=now - 2.0),  # sent a moment ago
        schema.Hello(run="r", rank=1, world_size=4, pid=11, host="n1", t=1.0),  # 1970
        schema.Hello(run="r", rank=2, world_size=4, pid=12, host="n1", t=2.0),  # the same node's
        schema.Hello(run="r", rank=3, world_size=4, pid=13, host="n2", t=now + 3 * 86400),
    ]
    for h in hellos:
        assert core.ingest(h, 1.0)
    said = [m.message for m in core.state.events if m.name == "warning"]
    assert said == [
        "rank 1's clock (host n1) is 57 years behind the hub's: one of the two is wrong (or the hello waited that long for the hub); set the wrong clock (NTP)",
        "rank 3's clock (host n2) is 3 days ahead of the hub's: one of the two is wrong (or the hello waited that long for the hub); set the wrong clock (NTP)",
    ]
    # A core fed recorded or made-up times holds them against nothing.
    plain = HubCore(run_id="r")
    for h in hellos:
        assert plain.ingest(h, 1.0)
    assert not [m for m in plain.state.events if m.name == "warning"]


def test_a_hub_behind_its_ranks_says_how_far():
    # Review 294: a hub on 2 busy cores fell a minute behind 4096 ranks ("step 291 ... 4096
    # running" of ranks stalled at 299 a minute before), and nothing said it. Each ingest pass's
    # newest step tells how long it waited for the hub, beyond the least its rank's steps have
    # waited (rank 1's clock is 100 s ahead of the hub's: that is no wait).
    from pardash.telemetry.printer import progress_line

    wall = 1.8e9
    core = HubCore(run_id="r", world_size=2, wall_clock=lambda: wall)
    ahead = {0: 0.0, 1: 100.0}
    for r in (0, 1):
        assert core.ingest(schema.Hello(run="r", rank=r, world_size=2, pid=10 + r, host=f"n{r}", t=wall + ahead[r]), 1.0)
    now, sent = 1.0, wall

    def steps(first: int) -> list[bytes]:
        return [schema.encode(schema.Step(run="r", rank=r, seq=n, step=n, step_s=0.1, t=sent + ahead[r])) for n in (first, first + 1) for r in (0, 1)]

    for k in range(1, 20, 2):  # keeping up: each step taken 10 ms after it was sent
        sent += 0.2
        wall, now = sent + 0.01, now + 0.2
        assert core.ingest_batch(steps(k), now) == 4
    assert core.tick(now).stats.behind_s == 0.0
    for k in range(21, 61, 2):  # then each taken 30 s after it was sent (waiting in the hub's queue)
        sent += 0.2
        wall, now = sent + 30.01, now + 0.2
        core.ingest_batch(steps(k), now)
    behind = core.tick(now).stats.behind_s
    assert behind == 30.0
    line = progress_line(core.state, 12.0, hub_behind_s=behind)
    assert line.endswith(" | hub 30 s behind the ranks"), line
    # Nothing taken for a while: nothing waits, it is behind nobody.
    assert core.tick(now + 5.0).stats.behind_s == 0.0
    assert "behind" not in progress_line(core.state, 17.0, hub_behind_s=0.0)


def test_a_live_hub_says_a_ranks_clock_is_off(hub):
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.connect(hub.ingest_endpoint)
    push.send(schema.encode(schema.Hello(run="test-run", rank=0, world_size=1, pid=10, host="n1", t=1.0)))
    wait_for(lambda: any(m.name == "warning" and "57 years behind" in m.message for m in hub.core.state.events))
    push.close(0)


def test_a_hub_bound_to_every_address_tells_ranks_this_machines_name():
    # "PARDASH_ENDPOINT=tcp://0.0.0.0:39157" is no address for a rank on another node.
    import socket

    from pardash.telemetry.registry import reachable

    here = socket.gethostname()
    assert reachable("tcp://0.0.0.0:39157") == f"tcp://{here}:39157"
    assert reachable("tcp://[::]:39157") == f"tcp://{here}:39157"
    assert reachable("tcp://10.1.2.3:39157") == "tcp://10.1.2.3:39157"
    assert reachable("tcp://127.0.0.1:5") == "tcp://127.0.0.1:5"


def test_two_processes_sending_as_one_rank_are_warned_of_once():
    # Two jobs given one hub's run id (`pardash hub` alone, its PARDASH_RUN_ID exported in two
    # shells), or two nodes started with the same node rank: both send as rank 0, and their
    # steps and lost counts mixed in one rank without a word.
    from pardash.telemetry.hubcore import HubCore

    def hello(rank, pid, t, restart=0, host="a", world=2):
        return schema.encode(schema.Hello(run="r", rank=rank, seq=0, world_size=world, pid=pid, host=host, restart=restart, t=1.0e9 + t))

    def beat(rank, seq, t):
        return schema.encode(schema.Heartbeat(run="r", rank=rank, seq=seq, step=seq, phase="forward", t=1.0e9 + t, mono=t))

    def warnings(core):
        return [e.message for e in core.state.events if e.name == "warning" and "still sends as it" in e.message]

    core = HubCore(run_id="r")
    assert core.ingest_bytes(hello(0, 100, 0.0), 0.0) and core.ingest_bytes(hello(1, 101, 0.0), 0.0)
    # torchrun's restart of rank 1 (its count up), then a requeued rank 0 whose process before
    # went quiet 5 s ago: new processes, one at a time, and no warning
    assert core.ingest_bytes(hello(1, 201, 0.5, restart=1), 0.5)
    assert core.ingest_bytes(hello(0, 300, 5.0), 5.0)
    # an elastic scale-up: torchrun starts its workers again for the new nodes (its restart
    # count the same), the job's size grown
    assert core.ingest_bytes(beat(1, 1, 5.2), 5.2)
    assert core.ingest_bytes(hello(1, 301, 5.5, restart=1, world=4), 5.5)
    assert warnings(core) == []
    # a second job's rank 0 while pid 300 sends
    assert core.ingest_bytes(beat(0, 1, 6.0), 6.0)
    assert core.ingest_bytes(hello(0, 400, 6.5, host="b"), 6.5)
    assert warnings(core) == [
        "rank 0: pid 400 on b says it is rank 0 while pid 300 on a still sends as it: two jobs share run id r "
        "(or two nodes the same ranks), and their figures mix; give each job its own hub or PARDASH_RUN_ID"
    ]
    # said once: the two go on taking turns
    assert core.ingest_bytes(hello(0, 300, 7.0), 7.0) and core.ingest_bytes(hello(0, 400, 7.5, host="b"), 7.5)
    assert len(warnings(core)) == 1


def test_a_job_run_again_under_the_runs_id_after_every_rank_ended_is_said_once():
    # A second torchrun job sent to a hub alone under the first's PARDASH_RUN_ID, 15 s after it
    # finished: not a word, and its steps read as the first job's (steps 1..60 "run again").
    from pardash.telemetry.hubcore import HubCore

    def hello(rank, pid, t, restart=0):
        return schema.encode(schema.Hello(run="r", rank=rank, seq=0, world_size=2, pid=pid, host="a", restart=restart, t=1.0e9 + t))

    def exit_(rank, t, code=0):
        return schema.encode(schema.Event(run="r", rank=rank, seq=1, name="exit", code=code, step=0, t=1.0e9 + t))

    def said(core):
        return [e.message for e in core.state.events if "started again" in e.message]

    lines: list[str] = []
    core = HubCore(run_id="r")
    core.say = lines.append
    assert core.ingest_bytes(hello(0, 100, 0.0), 0.0) and core.ingest_bytes(hello(1, 101, 0.0), 0.0)
    # a rank restarted by torchrun while the other runs, then one of the job's ranks failing:
    # neither is a job run again
    assert core.ingest_bytes(hello(1, 201, 0.5, restart=1), 0.5)
    assert core.ingest_bytes(exit_(0, 1.0, code=1), 1.0)
    assert core.ingest_bytes(hello(0, 200, 1.5, restart=1), 1.5)
    assert said(core) == []
    # every rank failed, and torchrun restarted the job (the launcher said so before the new
    # processes did): a restart, said as one
    assert core.ingest_bytes(exit_(0, 2.0, code=1), 2.0) and core.ingest_bytes(exit_(1, 2.0, code=1), 2.0)
    for rank in (0, 1):
        assert core.ingest_bytes(schema.encode(schema.Event(run="r", rank=rank, seq=-1, name="restart", code=2, t=1.0e9 + 2.5)), 2.5)
    assert core.ingest_bytes(hello(0, 250, 3.0, restart=2), 3.0) and core.ingest_bytes(hello(1, 251, 3.0, restart=2), 3.0)
    assert said(core) == []
    # every rank ended; then a new process of rank 1, the count unchanged
    assert core.ingest_bytes(exit_(0, 4.0), 4.0) and core.ingest_bytes(exit_(1, 4.0), 4.0)
    assert core.ingest_bytes(hello(1, 301, 17.0, restart=2), 17.0)
    expected = ("rank 1 started again (pid 301 on a) after every rank of run r had ended: a new job under this run's id, "
                "whose records go on in its log (give each job its own PARDASH_RUN_ID to keep them apart)")  # fmt: skip
    assert said(core) == [expected] and lines == [expected]
    # the new job's other rank: said once a rerun
    assert core.ingest_bytes(hello(0, 300, 17.0, restart=2), 17.0)
    assert len(said(core)) == 1
    # every rank ended again; a job run once more, torchrun's count of it back at 0 (the last
    # one was restarted twice): no restart of that one, a new job, said (it said nothing)
    assert core.ingest_bytes(exit_(0, 20.0), 20.0) and core.ingest_bytes(exit_(1, 20.0), 20.0)
    assert core.ingest_bytes(hello(0, 400, 30.0), 30.0)
    assert len(said(core)) == 2 and said(core)[-1].startswith("rank 0 started again (pid 400 on a)")


def test_a_job_run_again_from_an_earlier_checkpoint_is_not_stalled_on_its_old_steps():
    # A job failed at step 25 (its last heartbeat said 24 done), then run again by hand under
    # the run's id, resumed from step 20: its steps 21-24 at full speed read as no progress past
    # the old heartbeat's 24, and "stalled in data after step 24 (7 s without progress)".
    from pardash.telemetry.hubcore import HubCore

    core = HubCore(run_id="r")
    seqs = {}

    def send(msg, t):
        seqs[msg.rank] = seq = seqs.get(msg.rank, -1) + 1 if not isinstance(msg, schema.Hello) else 0
        msg.run, msg.seq, msg.t = "r", seq, 1.0e9 + t
        assert core.ingest_bytes(schema.encode(msg), t)

    send(schema.Hello(rank=0, world_size=1, pid=100), 0.0)
    for step in range(1, 25):
        send(schema.Step(rank=0, step=step, step_s=0.05, samples=4), step * 0.05)
        core.tick(step * 0.05)
    send(schema.Heartbeat(rank=0, step=24, phase="data"), 1.25)
    core.tick(1.35)  # (liveness judged at step 24)
    send(schema.Event(rank=0, name="exit", code=1, step=25), 1.4)
    for k in range(14, 80):  # (the hub's frames go on, 10 a second)
        core.tick(k / 10)
    # the job run again, 7 s on, its hello and first step in one frame (the hub judges liveness
    # once a second, at a frame)
    send(schema.Hello(rank=0, world_size=1, pid=200), 8.0)
    for step in range(21, 31):
        send(schema.Step(rank=0, step=step, step_s=0.05, samples=4), 8.0 + (step - 20) * 0.05)
        core.tick(8.0 + (step - 20) * 0.05)
    assert [v.message for v in core.state.events if isinstance(v, schema.Verdict) and v.verdict == "stalled"] == []


def test_a_failure_a_job_run_again_went_on_from_is_recovered_not_the_runs_root_cause(tmp_path):
    # A job failed at step 5, then run again by hand under the run's id (to a hub alone) and
    # finished: the report read "exits: none with an error", then "root cause: rank 0 exited
    # with code 1 at step 5", and an attached viewer's failure was the same. As a failure
    # torchrun restarted the job after, it is one the run recovered from, said as such.
    from pardash.telemetry.failures import failure_summary
    from pardash.telemetry.recorder import Recorder
    from pardash.telemetry.report import build_report
    from pardash.telemetry.report_render import render_text

    path = tmp_path / "run.jsonl"
    core = HubCore(run_id="r", recorder=Recorder(path))
    for pid, last, crash in ((100, 5, True), (200, 10, False)):  # (each job's process counts its messages from 0)
        job = [schema.Hello(rank=0, world_size=1, pid=pid, host="a")]
        job += [schema.Step(rank=0, step=step, step_s=0.05, samples=4) for step in range(1, last + 1)]
        if crash:
            job.append(schema.Event(rank=0, name="error", message="RuntimeError: boom at 5", step=4))
        job.append(schema.Event(rank=0, name="exit", code=1 if crash else 0, step=last))
        for seq, msg in enumerate(job):
            msg.run, msg.seq, msg.t = "r", seq, 1.0e9 + pid + seq * 0.1
            assert core.ingest_bytes(schema.encode(msg), pid + seq * 0.1)
    core.recorder.close()
    assert failure_summary(core.state) is None  # what an attached viewer judges
    rep = build_report(str(path))
    assert rep["failure"] is None
    assert [(f["line"], f["then"]) for f in rep["recovered"]] == [("rank 0 exited with code 1 at step 5: RuntimeError: boom at 5", "run again")]
    text = render_text(rep)
    assert "root cause" not in text and "run again after: rank 0 exited with code 1 at step 5" in text, text


def test_the_grids_medians_are_each_ranks_last_five_steps_at_the_hub_its_viewers_and_a_hub_restarted_on_its_log(tmp_path):
    # A frame carries each rank's newest step: where ranks step faster than frames come, some
    # of their steps. The grid's wall, self, data and comm, medians of those, moved with where
    # the frames fell (a live hub's timer, a replay's clock). The hub sends each rank's
    # medians of its last five steps instead, of every step it took.
    import statistics

    from pardash.telemetry import frames
    from pardash.telemetry.client import FrameApplier
    from pardash.telemetry.hub import Hub
    from pardash.telemetry.recorder import Recorder

    path = tmp_path / "run.jsonl"
    core = HubCore(run_id="r", recorder=Recorder(path))
    for rank in (0, 1):
        assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=rank, world_size=2, pid=10 + rank, t=1.0e9)), 0.0)
    early = FrameApplier()
    core.tick(0.0)
    early.load_snapshot(frames.decode_snapshot(frames.encode(core.snapshot())))
    wall_ms = [5, 1, 9, 2, 8, 3, 7, 4, 6, 10, 12, 0.5]
    sent: dict[int, list[schema.Step]] = {0: [], 1: []}

    def step(rank: int, n: int, pid_seq: int = 0) -> bytes:
        s = schema.Step(
            run="r", rank=rank, seq=pid_seq or n, step=n, t=1.0e9 + n / 100, step_s=wall_ms[(n + 5 * rank) % 12] / 1e3,
            self_s=wall_ms[(n + 2) % 12] / 2e3, data_s=None if rank and n % 3 else n / 1e4,  # rank 1: every third step's
            comm_s=None if rank else wall_ms[(n + 7) % 12] / 4e3,  # rank 1: none
        )  # fmt: skip
        sent[rank].append(s)
        return schema.encode(s)

    def last_five(rank: int) -> tuple:
        steps = sent[rank][-5:]
        known = ([getattr(s, name) for s in steps if getattr(s, name) is not None] for name in ("step_s", "self_s", "data_s", "comm_s"))
        return tuple(statistics.median(v) if v else None for v in known)

    n = 0
    for burst in (4, 3, 6, 2, 5, 7):  # a frame after each burst
        assert core.ingest_batch([step(rank, n + i) for i in range(1, burst + 1) for rank in (0, 1)], 1.0) == 2 * burst
        n += burst
        early.apply_frame(frames.decode_frame(frames.encode(core.tick(1.0))))
    assert len(early.state.ranks[0].history["step"]) < n  # some of the steps were frame points
    truth = {rank: last_five(rank) for rank in (0, 1)}
    assert truth[1][3] is None and truth[0] != truth[1]
    late = FrameApplier()
    late.load_snapshot(frames.decode_snapshot(frames.encode(core.snapshot())))
    for viewer in (core.state, early.state, late.state):
        assert {rank: r.smooth for rank, r in viewer.ranks.items()} == truth
    core.recorder.close()

    # The hub dies; one restarted on its log sends the same, then a restarted rank's own.
    hub = Hub(run_id="r", log_path=str(path))
    try:
        assert hub.recover(now=50.0) > 0
        again = FrameApplier()
        again.load_snapshot(frames.decode_snapshot(frames.encode(hub.core.snapshot())))
        assert {rank: r.smooth for rank, r in again.state.ranks.items()} == truth
        hello = schema.Hello(run="r", rank=0, world_size=2, pid=20, restart=1, t=1.0e9 + 1)
        assert hub.core.ingest_bytes(schema.encode(hello), 51.0)
        sent[0].clear()
        assert hub.core.ingest_batch([step(0, n + 1, pid_seq=1), step(0, n + 2, pid_seq=2)], 51.0) == 2
        again.apply_frame(frames.decode_frame(frames.encode(hub.core.tick(51.0))))
        assert again.state.ranks[0].smooth == hub.core.state.ranks[0].smooth == last_five(0)  # its new process's two
        assert again.state.ranks[1].smooth == truth[1]
    finally:
        hub.close()


def test_a_core_with_the_replays_detector_takes_steps_the_fast_way():
    # A replay's HubCore draws no conclusions (NullDetector); fed through ingest_batch, as a hub's
    # loop feeds its own, every step batch was an internal error: NullDetector had no observe_many.
    from pardash.telemetry.client import NullDetector

    core = HubCore(run_id="r", detector=NullDetector())  # type: ignore[arg-type]
    hello = schema.encode(schema.Hello(run="r", rank=0, world_size=1, pid=10, t=1.0e9))
    steps = [schema.encode(schema.Step(run="r", rank=0, seq=s, step=s, step_s=0.1, t=1.0e9 + s)) for s in range(1, 9)]
    assert core.ingest_batch([hello, *steps], 1.0) == 9
    assert not core.rejected.get("internal_error")
    assert core.state.ranks[0].step.step == 8


def test_messages_the_hub_refuses_are_rejected_not_also_lost_live_and_in_the_log(tmp_path):
    # A rank's messages refused for their figures (an event past its budget, a step time below
    # 0, a message of the wrong type) left seq gaps: the header said "lost 4 · rejected 4" of 4
    # messages that had reached the hub. A real gap is still lost.
    from pardash.telemetry.hubcore import EVENTS_BURST
    from pardash.telemetry.recorder import Recorder
    from pardash.telemetry.report import build_report

    path = tmp_path / "run.jsonl"
    core = HubCore(run_id="r", world_size=2, recorder=Recorder(path))
    assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=0, world_size=2, pid=10, t=1.0e9)), 0.0)
    seq = 0

    def step(n: int, **kw) -> bytes:
        return schema.encode(schema.Step(run="r", rank=0, seq=seq, step=n, t=1.0e9 + n, step_s=0.01, **kw))

    for n in range(1, 6):
        seq += 1
        assert core.ingest_bytes(step(n), 1.0)
    for _ in range(int(EVENTS_BURST) + 3):  # the last 3 past the rank's budget
        seq += 1
        core.ingest_bytes(schema.encode(schema.Event(run="r", rank=0, seq=seq, t=1.0e9, name="note", message="hi")), 1.0)
    seq += 1
    assert not core.ingest_bytes(step(6, data_s=-1.0), 1.0)
    seq += 1
    wrong_type = msgspec.msgpack.encode({"kind": "event", "run": "r", "rank": 0, "seq": seq, "t": 1.0e9, "name": "x", "message": 5})
    assert not core.ingest_bytes(wrong_type, 1.0)
    seq += 1
    assert core.ingest_bytes(step(7), 1.0)
    assert dict(core.rejected) == {"too_many_events": 3, "not_finite": 1, "invalid": 1}
    assert core.stats().lost == 0  # at once, before the hub has said it
    core.tick(2.0)
    said = [e for e in core.state.events if isinstance(e, schema.Event) and e.name == "refused"]
    assert [(e.rank, e.code) for e in said] == [(0, 5)]
    assert "too_many_events 3, invalid 1, not_finite 1" in said[0].message and "not counted as lost" in said[0].message
    assert core.stats().lost == 0
    seq += 5  # 4 messages that never came
    assert core.ingest_bytes(step(8), 3.0)
    assert core.stats().lost == 4
    core.recorder.close()
    rep = build_report(str(path))
    assert [r["lost_messages"] for r in rep["ranks"]] == [4] and rep["lost_messages"] == 4


def test_records_of_another_run_are_refused_and_said_at_once(tmp_path):
    # A job started with a stale PARDASH_RUN_ID: every record refused, the run unrecorded, and
    # nothing said but "refused so far: 4 rejected (foreign_run 4)" in the log a minute later.
    from pardash.telemetry.hubcore import MAX_FOREIGN_SAID

    core = HubCore(run_id="r", world_size=2)
    said: list[str] = []
    core.say = said.append
    for seq in range(5):
        assert not core.ingest_bytes(schema.encode(schema.Step(run="old", rank=seq % 2, seq=seq, step=seq, t=1.0e9, step_s=0.01)), 1.0)
    assert core.rejected["foreign_run"] == 5
    assert said == ["refusing every record of run 'old' (rank 0 is the first): this hub records run 'r'; "
                    "start the job with PARDASH_RUN_ID=r, or this hub with --run-id old"]  # fmt: skip
    assert [e.message for e in core.state.events if isinstance(e, schema.Event) and e.name == "warning"] == said
    for i in range(50):  # a fuzzer's many runs: a few named, then one line
        core.ingest_bytes(schema.encode(schema.Step(run=f"x\x1b[2J{i}", rank=0, seq=1, step=1, t=1.0e9)), 1.0)
    assert len(said) == MAX_FOREIGN_SAID + 1 and "yet more other runs" in said[-1]
    assert not any("\x1b" in s for s in said)


def test_a_hub_alone_says_a_foreign_run_at_once_and_its_end_with_the_refused_not_lost(tmp_path):
    # `pardash hub`, then a job whose PARDASH_RUN_ID was the last hub's: its terminal said
    # nothing (only the log, a minute later), nor anything as it stopped.
    import json
    import signal
    import subprocess
    import sys
    import time

    from helpers import pardash_env

    log = tmp_path / "run.jsonl"
    # As a user starts it (no --ready-fd: its first line on stdout, its words on its terminal).
    hub = subprocess.Popen([sys.executable, "-m", "pardash", "hub", "--run-id", "r", "--log", str(log), "--no-registry"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env())  # fmt: skip
    assert hub.stdout is not None
    info = json.loads(hub.stdout.readline())
    try:
        ctx = zmq.Context()
        push = ctx.socket(zmq.PUSH)
        push.connect(info["ingest"])
        push.send(schema.encode(schema.Hello(run="r", rank=0, world_size=1, pid=1, t=time.time())))
        push.send(schema.encode(schema.Step(run="old", rank=0, seq=1, step=1, t=time.time(), step_s=0.01)))
        push.send(schema.encode(schema.Step(run="r", rank=0, seq=1, step=1, t=time.time(), step_s=-1.0)))  # refused, not lost
        push.send(schema.encode(schema.Step(run="r", rank=0, seq=2, step=2, t=time.time(), step_s=0.01)))
        wait_for(lambda: log.exists() and any(isinstance(m, schema.Step) and m.step == 2 for m in load_log(log)[0]), timeout_s=60)
        push.close(linger=1000)
        ctx.term()
    finally:
        hub.send_signal(signal.SIGINT)
        _, err = hub.communicate(timeout=60)
    assert "pardash hub: refusing every record of run 'old' (rank 0 is the first): this hub records run 'r'" in err, err
    assert f"pardash hub: hub stopped: 2 messages, 0 lost, 2 rejected (foreign_run 1, not_finite 1); log {log}" in err, err
    assert build_report_lost(log) == 0


def build_report_lost(log) -> int:
    from pardash.telemetry.report import build_report

    return build_report(str(log))["lost_messages"]


def test_refused_messages_newest_of_a_rank_hide_no_real_loss_before_them_nor_after_a_restart(tmp_path):
    # Seqs 4-6 lost, then 10-12 refused: counted received without their seq raising the
    # rank's highest, they hid the 3 lost (lost 0, live and in the log). And a rank restarted
    # within the 2 s its refusals wait to be said: they were booked to its new process, hiding
    # its own loss.
    from pardash.telemetry.recorder import Recorder
    from pardash.telemetry.report import build_report

    path = tmp_path / "run.jsonl"
    core = HubCore(run_id="r", world_size=2, recorder=Recorder(path))

    def hello(pid: int) -> bytes:
        return schema.encode(schema.Hello(run="r", rank=0, world_size=2, pid=pid, t=1.0e9))

    def step(seq: int, **kw) -> bytes:
        return schema.encode(schema.Step(run="r", rank=0, seq=seq, step=seq, t=1.0e9 + seq, **{"step_s": 0.01, **kw}))

    assert core.ingest_bytes(hello(10), 1.0)
    for seq in (1, 2, 3, 7, 8, 9):
        assert core.ingest_bytes(step(seq), 1.0)
    for seq in (10, 11, 12):
        assert not core.ingest_bytes(step(seq, step_s=-1.0), 1.0)
    assert core.stats().lost == 3
    core.tick(5.0)
    assert core.stats().lost == 3
    # Its next process: 2 refused, then said only after its new hello.
    assert core.ingest_bytes(hello(11), 6.0)
    assert core.ingest_bytes(step(1), 6.0) and core.ingest_bytes(step(3), 6.0)  # its seq 2 lost
    assert not core.ingest_bytes(step(4, step_s=-1.0), 6.0)
    assert core.stats().lost == 3 + 1
    core.tick(6.1)  # (within REFUSED_SAID_S of the last: held)
    assert core.ingest_bytes(hello(12), 6.2)  # restarted again before it was said
    assert core.stats().lost == 3 + 1
    core.tick(9.0)
    assert core.stats().lost == 3 + 1
    core.recorder.close()
    assert build_report(str(path))["lost_messages"] == 4


def _stopped_hub_alone(tmp_path, job, stopped):
    """A `pardash hub` process and a viewer attached to it: ``job(ingest)`` sends the ranks'
    part, then the hub is stopped (SIGTERM) and the viewer polled until ``stopped(viewer)``."""
    import json
    import subprocess
    import sys

    from helpers import pardash_env

    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash", "hub", "--run-id", "hs", "--log", str(tmp_path / "t.jsonl"), "--no-registry"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=pardash_env(),
    )  # fmt: skip
    try:
        info = json.loads(proc.stdout.readline())
        viewer = HubClient(info["updates"], info["snapshot"])
        assert viewer.wait_synced(20)
        reps = job(info["ingest"], viewer)
        for r in reps:
            r.close()
        proc.terminate()
        wait_for(lambda: stopped(viewer), poll=viewer.poll)
    finally:
        proc.terminate()
        proc.wait(30)
    return viewer


def test_a_viewer_is_told_the_hub_stopped_and_does_not_show_ranks_not_ended_running_for_ever(tmp_path):
    # Node 1 of a two-node job died with its supervisor: node 0's rank failed, its job ended and
    # its hub stopped, writing "hub stopped" in its log only. An attached TUI showed node 1's
    # rank "running" with "hub quiet for 63 s" for as long as it stayed open; a headless one
    # said "sent nothing for 5 s (stopped, or out of reach)". The hub's last frame carries its
    # stop now, and the viewers say it.
    import io
    import subprocess
    import sys
    import threading

    from pardash.telemetry.printer import ProgressPrinter, follow_attached
    from pardash.tui.widgets.run_header import summarize

    def job(ingest, viewer):
        reps = [Reporter(ingest, run="hs", identity=identity(r, 2), heartbeat_s=0) for r in range(2)]
        for r in reps:
            r.hello(strategy="ddp", world_size=2)
            r.step(step=1, loss=1.0, step_s=0.01, samples=8)
        reps[0].event("exit", code=1)
        wait_for(lambda: len(viewer.state.ranks) == 2 and viewer.state.ranks[0].exit_code == 1, poll=viewer.poll)
        return reps

    viewer = _stopped_hub_alone(tmp_path, job, lambda v: v.ended_early is not None)
    assert viewer.ended_early == {"step": 1, "running": 1, "ranks": [1], "hub_stopped": True}
    assert summarize(viewer).log_ends_early == "when the hub stopped"
    # A launched job's supervisor, alive, restarts a hub that stopped (a SIGTERM): its headless
    # viewer waits for it (it quit, exit 1, "the hub stopped", while the job trained on).
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    viewer.info = {"supervisor_pid": supervisor.pid, "run_dir": str(tmp_path / "no-result-yet")}
    printer = ProgressPrinter(viewer, out=io.StringIO(), bar=False)
    looks, update = [], printer.update
    printer.update = lambda **kw: (looks.append(1), update(**kw))[1]
    said: list[str] = []
    watching = threading.Thread(target=lambda: said.append(follow_attached(printer, viewer, gone_s=600)))
    watching.start()
    try:
        wait_for(lambda: len(looks) >= 3 or not watching.is_alive())
        assert watching.is_alive() and not said  # (waiting on: each look said "not done")
    finally:
        supervisor.kill()
        supervisor.wait()
    watching.join(60)
    assert said and said[0].startswith("pardash: the hub stopped at step 1 with 1 rank not ended"), said
    viewer.close()


def test_a_hub_stopped_with_no_rank_left_running_says_no_ranks_not_ended(tmp_path):
    # Rank 0 of 2 finished, rank 1 never heard from (another node's, keys refused): the hub's
    # stop read "the hub stopped at step 3, 0 ranks not ended"; ranks never heard from are said
    # apart (node 0's last line, report).
    def job(ingest, viewer):
        rep = Reporter(ingest, run="hs", identity=identity(0, 2), heartbeat_s=0)
        rep.hello(strategy="ddp", world_size=2)
        rep.step(step=3, loss=1.0, step_s=0.01, samples=8)
        rep.event("exit", code=0)
        wait_for(lambda: 0 in viewer.state.ranks and viewer.state.ranks[0].finished, poll=viewer.poll)
        return [rep]

    def stopped(viewer) -> bool:
        return any(isinstance(m, schema.Event) and m.name == "hub" and m.message.startswith("hub stopped") for m in viewer.state.events)

    viewer = _stopped_hub_alone(tmp_path, job, stopped)
    assert viewer.ended_early is None
    viewer.close()
