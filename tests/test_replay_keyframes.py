"""A replay's seek goes on from a keyframe kept as it played, not from its log's start, and
what it shows there is what a replay played from the start shows."""

from __future__ import annotations

import gzip
import json
import math
import os
import time

import msgspec
import pytest

from pardash.telemetry import keyframes, schema
from pardash.telemetry.client import ReplaySource
from pardash.telemetry.keyframes import Keyframes
from pardash.tui.model import RowBuilder

T0 = 1.7e9
RANKS = 4
SECONDS = 60


def _log(path, seconds: int = SECONDS):
    """Four ranks stepping five times a second for ``seconds``, with what a run's log holds
    besides: system samples, heartbeats, a checkpoint, a warning, a straggler verdict and its
    clearing, rank 3 crashing and torchrun restarting it, and every rank's exit."""
    msgs: list = [schema.Event(rank=-1, seq=-1, name="hub", message="hub started", t=T0 - 1, run="x")]
    msgs += [schema.Hello(rank=r, world_size=RANKS, t=T0, run="x", seq=0, host=f"n{r // 2}", strategy="ddp") for r in range(RANKS)]
    seq = [1] * RANKS
    restarted = False
    for s in range(1, seconds * 5 + 1):
        t = T0 + s / 5
        for r in range(RANKS):
            if r == 3 and 200 <= s < 206:
                continue  # (crashed, then restarted)
            slow = 0.05 if r == 1 and 50 <= s < 150 else 0.0
            mem = schema.Mem(params_bytes=1 << 20, grads_bytes=1 << 20, optim_bytes=(2 + r) << 20)
            msgs.append(schema.Step(rank=r, step=s, loss=2.0 / math.sqrt(s) + r * 1e-3, step_s=0.2, data_s=0.01 + slow, self_s=0.05 + slow,
                                    comm_s=0.1 - slow, samples=8, samples_total=8 * s, t=t + r * 1e-3, seq=seq[r], run="x", mem=mem))  # fmt: skip
            seq[r] += 1
            if s % 5 == 0:
                msgs.append(schema.Heartbeat(rank=r, step=s, phase="forward", t=t + 0.01, seq=seq[r], run="x"))
                msgs.append(schema.System(rank=r, cpu_pct=90.0 + s % 7, rss_bytes=(1 << 30) + s, t=t + 0.02, seq=seq[r] + 1, run="x"))
                seq[r] += 2
        if s == 100:
            msgs.append(schema.Event(rank=0, name="checkpoint", step=s, duration_s=1.5, t=t + 0.05, seq=seq[0], run="x"))
            seq[0] += 1
        if s == 60:
            msgs.append(schema.Verdict(rank=1, seq=-1, verdict="straggler", cause="data", cost_s=0.05, step=s, t=t + 0.05, run="x"))
        if s == 150:
            msgs.append(schema.Verdict(rank=1, seq=-1, verdict="straggler_cleared", step=s, t=t + 0.05, run="x"))
        if s == 120:
            msgs.append(schema.Event(rank=2, name="warning", message="loss spike", step=s, t=t + 0.05, seq=seq[2], run="x"))
            seq[2] += 1
        if s == 199:
            msgs.append(schema.Event(rank=3, name="error", message="RuntimeError: boom", step=s, t=t + 0.05, seq=seq[3], run="x"))
            msgs.append(schema.Event(rank=3, name="exit", code=1, step=s + 1, t=t + 0.06, seq=seq[3] + 1, run="x"))
        if s == 205 and not restarted:
            restarted = True
            seq[3] = 0
            msgs.append(schema.Hello(rank=3, world_size=RANKS, t=t + 0.1, run="x", seq=0, host="n1", strategy="ddp", restart=1, pid=7))
            seq[3] = 1
    end = T0 + seconds + 0.1
    msgs += [schema.Event(rank=r, name="exit", code=0, step=seconds * 5, t=end, seq=seq[r], run="x") for r in range(RANKS)]
    msgs.append(schema.Event(rank=-1, seq=-1, name="hub", message="hub stopped: 0 lost, 0 rejected", t=end + 0.5, run="x"))
    path.write_bytes(schema.encode_json_lines(msgs))
    os.utime(path, (1.6e9, 1.6e9))  # a finished log, not one being written
    return path


@pytest.fixture
def kept_often(monkeypatch):
    """Keyframes every second of the log, whatever its size (a test's log is small)."""
    monkeypatch.setattr(keyframes, "EVERY_S", 1.0)
    monkeypatch.setattr(keyframes, "LEAST_BYTES", 0)
    monkeypatch.setattr(keyframes, "LOG_BYTES_PER_BYTE", 0)
    monkeypatch.setattr(keyframes, "PLAY_PER_KEEP", 0.0)


def _from_the_start(path, at: float) -> ReplaySource:
    """A fresh replay of ``path`` seeked to ``at``: every frame played from the log's start."""
    src = ReplaySource(str(path))
    src.keyframes = Keyframes(every_s=math.inf)
    src.seek(at)
    return src


def _shown(src: ReplaySource) -> dict:
    """What the dashboard shows of a replay, and the counts behind it: the grid's rows, each
    rank's history (its charts) and counters, the event log, the run's trend and the header's
    counts."""
    st = src.state
    enc = msgspec.json.encode
    ranks = {
        r.rank: (
            r.history.columns_bytes(), r.steps_seen, r.restarts, r.exit_code, r.finished, r.smooth, r.samples_rate,
            enc(r.step), enc(r.hello), enc(r.system), enc(r.heartbeat), enc(r.straggler), enc(r.straggled), r.seq.received, r.seq.lost,
        )  # fmt: skip
        for r in st.ranks.values()
    }
    rows = [(r.rank, r.status, r.step, r.step_s, r.self_s, r.loss, r.held_bytes) for r in RowBuilder().build(st)]
    stats = src.stats
    return {
        "rows": rows,
        "ranks": ranks,
        "events": [enc(m) for m in st.events],
        "lifecycle": [enc(m) for m in st.lifecycle],
        "trend": st.trend.points(),
        "run": (st.run_id, st.t0, st.t_last, st.t_last_rank, st.step, st.lost, st.hseq, dict(st.counts)),
        "stats": (stats.received, stats.rejected, stats.lost, stats.dropped),
        "frames": (src.fseq, src.frames_applied, src.position_s, src.done),
        "core": (src.core.received, src.core.hseq, src.core.fseq),
    }


def test_a_seek_back_goes_on_from_a_keyframe_and_shows_what_a_replay_from_the_start_shows(tmp_path, kept_often, monkeypatch):
    # A seek back played the log again from its start: 18 s near the end of a 450 MB log, an
    # hour in a day's. It goes on from the nearest keyframe before its target now, and the
    # figures there are those of a replay played to there from the start.
    log = _log(tmp_path / "run.jsonl")
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    assert len(src.keyframes) >= 10
    first = next(iter(src.keyframes)).at - src.t_start
    restarts = []
    real = src._restart
    monkeypatch.setattr(src, "_restart", lambda: (restarts.append(1), real())[1])
    for at in (src.duration_s - 10.0, 12.5, 40.8, 39.0, 1.3, 0.05, 21.0, src.duration_s):
        src.seek(at)
        assert _shown(src) == _shown(_from_the_start(log, at)), at
        assert len(restarts) == (at < first), at  # (from the log's start only before its first keyframe)
        restarts.clear()
    # (a keyframe at the target itself: nothing played after it)
    kf = next(iter(src.keyframes))
    src.seek(kf.at - src.t_start)
    assert _shown(src) == _shown(_from_the_start(log, kf.at - src.t_start))


def test_a_seek_forward_past_a_keyframe_goes_on_from_it(tmp_path, kept_often):
    # Back at the start, then to the end (`>`, or `]` held): the end's keyframes are there still.
    log = _log(tmp_path / "run.jsonl")
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    src.seek(0.0)
    fed = []
    real = src._feed_until
    src._feed_until = lambda t: (fed.append(t), real(t))[1]  # type: ignore[method-assign]
    src.seek(src.duration_s)
    assert len(fed) < 20  # (from the last keyframe: some 10 frames, not the 300 of the whole log)
    assert _shown(src) == _shown(_from_the_start(log, src.duration_s))


def test_a_replay_played_on_by_its_polls_after_a_seek_back_ends_as_one_from_the_start(tmp_path, kept_often, monkeypatch):
    # The viewer's own way: `[` asks (seek_soon), its polls go on with it, then play on to the end.
    from pardash.telemetry import client

    clock = [1000.0]
    monkeypatch.setattr(client.time, "monotonic", lambda: clock[0])
    log = _log(tmp_path / "run.jsonl")
    src = ReplaySource(str(log), speed=64.0)
    src.seek(30.0)
    src._restart = lambda: pytest.fail("a seek back played the log from its start")  # type: ignore[method-assign]
    src.seek_soon(17.0)
    while src.seeking:
        src.poll()
    assert src.position_s == 17.0
    assert _shown(src) == _shown(_from_the_start(log, 17.0))
    while not src.done:
        clock[0] += 0.25
        src.poll()
    assert _shown(src) == _shown(_from_the_start(log, src.duration_s))


def test_a_gzip_log_seeks_back_from_its_keyframes_too(tmp_path, kept_often):
    log = _log(tmp_path / "run.jsonl")
    kept = tmp_path / "run.jsonl.gz"
    kept.write_bytes(gzip.compress(log.read_bytes()))
    src = ReplaySource(str(kept))
    src.seek(src.duration_s)
    src._restart = lambda: pytest.fail("a seek back played the log from its start")  # type: ignore[method-assign]
    src.seek(33.3)
    assert _shown(src) == _shown(_from_the_start(log, 33.3))


def test_the_keyframes_of_a_long_replay_stay_few_and_close_behind_where_it_is(tmp_path, kept_often, monkeypatch):
    # Their memory is the state's times a bound, not the log's length: past the bound one goes,
    # the newest few staying, the rest further apart the further back they are.
    monkeypatch.setattr(keyframes, "MAX_COUNT", 8)
    log = _log(tmp_path / "run.jsonl")
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    ats = [kf.at - src.t_start for kf in src.keyframes]
    assert len(ats) == 8, ats
    assert src.duration_s - ats[-1] < 2.0  # (every second: the newest is the last second's)
    gaps = [b - a for a, b in zip(ats, ats[1:])]
    assert gaps[1 - keyframes.NEWEST_KEPT :] == pytest.approx([1.0] * (keyframes.NEWEST_KEPT - 1)), ats
    assert gaps == sorted(gaps, reverse=True) and gaps[1] > 4.0, ats  # (further back, further apart)
    src.seek(ats[2] + 0.5)
    assert _shown(src) == _shown(_from_the_start(log, ats[2] + 0.5))
    one = src.keyframes.bytes / len(ats)
    # A byte budget of three keyframes' bytes keeps three at the most (past KEPT_AT_LEAST)...
    monkeypatch.setattr(keyframes, "MAX_COUNT", 100)
    monkeypatch.setattr(keyframes, "KEPT_AT_LEAST", 2)
    monkeypatch.setattr(keyframes, "BUDGET_BYTES", int(3.5 * one))
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    assert 1 <= len(src.keyframes) <= 3 and src.keyframes.bytes <= 3.5 * one
    # ...and a state larger alone than MEMORY_SHARE of the machine's memory is kept in none, once
    # tried (its seeks play the log from its start, as before): not copied at every frame after,
    # to be thrown away.
    monkeypatch.setattr(keyframes, "BUDGET_BYTES", int(0.1 * one))
    monkeypatch.setattr(keyframes, "MEMORY_SHARE", 0.1 * one / keyframes._machine_bytes())
    src = ReplaySource(str(log))
    tried = []
    real = keyframes._Pickler.dump
    monkeypatch.setattr(keyframes._Pickler, "dump", lambda self, obj: (tried.append(1), real(self, obj))[1])
    src.seek(src.duration_s)
    assert len(src.keyframes) == 0 and len(tried) == 1
    src.seek(30.0)
    assert _shown(src) == _shown(_from_the_start(log, 30.0))


def test_a_state_larger_than_the_budget_alone_is_kept_still(tmp_path, kept_often, monkeypatch):
    # A 4096-rank replay's state is 73 MiB, over the 64 MiB budget alone: it was kept in no
    # keyframe, and every seek back played the log from its start (`[` near the end of a
    # 2.5-minute log took 2 minutes, "seeking, at 0s, at 1s..."). KEPT_AT_LEAST are kept now,
    # the budget theirs, and a seek back goes on from the nearest.
    log = _log(tmp_path / "run.jsonl")
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    one = max(kf.nbytes for kf in src.keyframes)
    monkeypatch.setattr(keyframes, "BUDGET_BYTES", one // 2)
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    assert len(src.keyframes) > 1
    assert len(src.keyframes) == keyframes.KEPT_AT_LEAST and src.keyframes.bytes <= keyframes.KEPT_AT_LEAST * one
    assert src.duration_s - list(src.keyframes)[-1].at + src.t_start < 2.0  # (the newest close behind)
    src._restart = lambda: pytest.fail("a seek back played the log from its start")  # type: ignore[method-assign]
    for at in (src.duration_s - 10.0, 31.0, src.duration_s - 0.5):
        src.seek(at)
        assert _shown(src) == _shown(_from_the_start(log, at)), at


def test_keyframes_lie_about_their_own_bytes_of_log_apart(tmp_path, monkeypatch):
    # A keyframe takes about a quarter as long to make as playing its bytes of log does. They
    # were kept 10 bytes of log apart for each byte of theirs: at 4096 ranks (73 MiB a state)
    # 750 MiB of log apart, 30 s of it and more, and a seek back played as much. (The four ranks'
    # state here, about 70 KB, is 17 s of their log.)
    monkeypatch.setattr(keyframes, "EVERY_S", 1.0)
    monkeypatch.setattr(keyframes, "LEAST_BYTES", 0)
    monkeypatch.setattr(keyframes, "PLAY_PER_KEEP", 0.0)
    log = _log(tmp_path / "run.jsonl")
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    kept = list(src.keyframes)
    assert len(kept) >= 3, [(kf.at - src.t_start, kf.offset, kf.nbytes) for kf in kept]
    for a, b in zip(kept, kept[1:]):
        assert a.nbytes <= b.offset - a.offset < 1.2 * a.nbytes
    src._restart = lambda: pytest.fail("a seek back played the log from its start")  # type: ignore[method-assign]
    at = kept[-1].at - src.t_start - 1.0
    src.seek(at)
    assert _shown(src) == _shown(_from_the_start(log, at))


def test_a_keyframe_keeps_a_ranks_history_once_for_the_hub_and_the_viewer(tmp_path, kept_often):
    # (The hub core's state and the viewer's hold the same charts: most of a keyframe's bytes.)
    log = _log(tmp_path / "run.jsonl")
    src = ReplaySource(str(log))
    src.seek(30.0)
    kf = list(src.keyframes)[-1]
    core, state = Keyframes.load(kf)[:2]
    rows = sum(len(q.history._buf) for q in state.ranks.values())
    assert rows < kf.nbytes < 2 * rows, (rows, kf.nbytes)
    assert {r: q.history.columns_bytes() for r, q in core.state.ranks.items()} == {
        r: q.history.columns_bytes() for r, q in state.ranks.items()
    }
    assert core.state.ranks[0].history is not state.ranks[0].history  # (each its own, as played)


def test_a_small_log_keeps_no_keyframes(tmp_path):
    # Played again from its start in a moment: keyframes would be memory for nothing.
    log = _log(tmp_path / "run.jsonl")
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    assert len(src.keyframes) == 0


def test_a_keyframe_slow_to_make_waits_for_that_much_play_times_play_per_keep(monkeypatch):
    # A 256-rank state takes about as long to make as its bytes of log take to play, a
    # 4096-rank one a quarter as long: how far apart keyframes lie for a tenth of the replay's
    # time is the wall time they take, not the log's bytes.
    clock = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    real = keyframes._Pickler.dump
    monkeypatch.setattr(keyframes._Pickler, "dump", lambda self, obj: (clock.__setitem__(0, clock[0] + 0.5), real(self, obj))[1])
    monkeypatch.setattr(keyframes, "PLAY_PER_KEEP", 9.0, raising=False)
    kept = Keyframes(every_s=1.0, least_bytes=0)
    assert kept.keep(1.0, 0, b"state") is not None  # (made in 0.5 s)
    clock[0] += 4.49
    assert not kept.due(30.0, 1 << 30, 0.0)  # (29 s and a GiB of log on, but 4.49 s of play)
    clock[0] += 0.02
    assert kept.due(30.0, 1 << 30, 0.0)


def test_a_day_long_replays_newest_keyframe_stays_near_its_end(monkeypatch):
    # A day of 256 ranks (1.77 MB of log a second, a keyframe every 37 MiB of it): every other
    # keyframe went and the spacing doubled for the whole log, so the newest was 71 minutes
    # behind the end and `[` there played 7 GiB of log. Now a seek back plays a share of how far
    # back it goes.
    monkeypatch.setattr(keyframes, "PLAY_PER_KEEP", 0.0)  # (the log's bytes alone: no wall clock)
    kept = Keyframes(least_bytes=37 << 20)
    rate = 1.77e6
    end = 24 * 3600
    for t in range(end + 1):
        if kept.due(float(t), int(t * rate), 0.0):
            kept.keep(float(t), int(t * rate), b"state")
    assert len(kept) == keyframes.MAX_COUNT
    for back in (10, 60, 600, 3600, 6 * 3600):
        played = end - back - kept.before(end - back).at
        assert played <= max(60.0, back / 2), (back, played)


@pytest.mark.parametrize("last", ["step 200 of every rank", "step 200 of rank 0 (on a frame's end)"])
def test_no_keyframe_carries_a_log_ends_early_warning_after_the_log_grew(tmp_path, kept_often, monkeypatch, last):
    # A log replayed to where it stopped said "log ends early at step 199"; the rest of it came
    # after. The keyframes taken as it played on held that warning (and its extra frame), and a
    # seek back to one showed them, where a replay from the start does not.
    from pardash.telemetry import client

    clock = [1000.0]
    monkeypatch.setattr(client.time, "monotonic", lambda: clock[0])
    full = _log(tmp_path / "full.jsonl").read_bytes()
    lines = full.splitlines(keepends=True)
    if last.startswith("step 200 of every"):
        n = next(i for i, line in enumerate(lines) if b'"step":201,' in line)
    else:  # (its time, 40 s into the run, is where a frame ends: no frame is cut at the end)
        n = 1 + next(i for i, line in enumerate(lines) if (d := json.loads(line)).get("kind") == "step" and d["step"] == 200)
        assert json.loads(lines[n - 1])["t"] == T0 + 40.0
    log = tmp_path / "run.jsonl"
    log.write_bytes(b"".join(lines[:n]))
    os.utime(log, (1.6e9, 1.6e9))  # (not being written: the replay says its early end)
    src = ReplaySource(str(log), speed=64.0)
    src.seek(src.duration_s)
    assert src.ended_early is not None and src.ended_early["step"] == 199
    with open(log, "ab") as fh:
        fh.write(full[len(log.read_bytes()) :])
    clock[0] += 2.0
    src.poll()  # (at the end: looks whether the log grew, and follows it again)
    assert src.ended_early is None
    while not src.done:
        clock[0] += 0.25
        src.poll()
    assert src.duration_s > 59.0
    for at in (50.0, 45.3):
        src.seek(at)
        assert not any(b"log ends early" in e for e in _shown(src)["events"])
        assert _shown(src) == _shown(_from_the_start(log, at)), at


def test_keyframes_taken_while_following_a_growing_log_are_those_of_a_replay_from_the_start(tmp_path, kept_often, monkeypatch):
    # A replay that caught up with its log's writer cut a frame at the log's end as it was, off
    # the frames' grid; the keyframes after it held that frame, and a seek back to one showed
    # other trend points than a replay from the start.
    from pardash.telemetry import client

    clock = [1000.0]
    monkeypatch.setattr(client.time, "monotonic", lambda: clock[0])
    lines = _log(tmp_path / "full.jsonl").read_bytes().splitlines(keepends=True)
    log = tmp_path / "run.jsonl"
    half = len(lines) // 2
    log.write_bytes(b"".join(lines[:half]))  # (just written: followed)
    src = ReplaySource(str(log), speed=64.0)
    assert src.following
    src.seek(src.duration_s)
    for i in range(half, len(lines), 200):
        with open(log, "ab") as fh:
            fh.write(b"".join(lines[i : i + 200]))
        clock[0] += 0.25
        src.poll()
    while not src.done:
        clock[0] += 0.25
        src.poll()
    assert not src.following and src.duration_s > 59.0
    for at in (45.0, 58.0, 31.0):
        src.seek(at)
        assert _shown(src) == _shown(_from_the_start(log, at)), at


def test_a_seek_into_the_first_frame_then_on_keeps_keyframes_of_a_replay_from_the_start(tmp_path, kept_often):
    # A seek to 0.05 s cut a frame there, off the grid; the keyframes taken as it played on held it.
    msgs = [schema.Hello(rank=r, world_size=2, t=T0, run="x", seq=0) for r in range(2)]
    for s in range(1, 400):
        for r in range(2):
            msgs.append(schema.Step(rank=r, step=s, loss=1.0 / s, step_s=0.04, samples=8, samples_total=8 * s, t=T0 + 0.04 * s + r * 1e-3,
                                    seq=s, run="x"))  # fmt: skip
    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json_lines(msgs))
    os.utime(log, (1.6e9, 1.6e9))
    src = ReplaySource(str(log))
    src.seek(0.05)
    src.seek(10.0)
    src.seek(8.0)
    assert _shown(src) == _shown(_from_the_start(log, 8.0))


def test_a_gzip_logs_seek_back_reads_it_again_a_poll_at_a_time(tmp_path, kept_often, monkeypatch):
    # A gzip log seeks back by reading it again from its start up to the keyframe: that was done
    # in one go, before the seek's first frame (0.4 s on a 266 MiB log, 15 s on 10 GiB, the
    # screen and its keys frozen). It goes a poll at a time now, as the seek's frames do.
    from pardash.telemetry import client
    from pardash.telemetry.logreader import LogCursor
    from pardash.tui.widgets.run_header import replay_position

    monkeypatch.setattr(client, "SEEK_BUDGET_S", 0.0)  # (a poll reads one piece of it)
    monkeypatch.setattr(LogCursor, "CATCH_UP_BYTES", 4096, raising=False)
    log = _log(tmp_path / "run.jsonl")
    kept = tmp_path / "run.jsonl.gz"
    kept.write_bytes(gzip.compress(log.read_bytes()))
    src = ReplaySource(str(kept))
    src.seek(src.duration_s)
    goal = src.keyframes.before(src.t_start + 33.3).offset
    assert goal > 10 * 4096
    src.seek_soon(33.3)
    src.poll()
    shown = replay_position(src)  # (the header, drawn between two polls: it asks whether the replay is done)
    assert shown.seeking_at is not None and not shown.done
    assert src._cursor._fh.tell() <= 4096  # (gzip reads on from its start)
    polls = 1
    while src.seeking:
        src.poll()
        polls += 1
    assert polls > goal // 4096
    assert _shown(src) == _shown(_from_the_start(log, 33.3))
