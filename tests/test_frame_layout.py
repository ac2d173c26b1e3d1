"""Frames from the hub to viewers (frames.py): each step travels once and is also its rank's
history point; viewers build the same histories as the hub; a backlog at the ingest socket does
not hold frames back; the client names the sockets a viewer's loop watches."""

import threading
from pathlib import Path

import msgspec
import pytest
import zmq

from helpers import identity, wait_for
from pardash.telemetry import frames, schema
from pardash.telemetry.client import FrameApplier, HubClient, ReplaySource
from pardash.telemetry.hub import Hub, HubCore
from pardash.telemetry.logreader import read_log
from pardash.telemetry.reporter import Reporter
from pardash.telemetry.state import RunState

DATA = Path(__file__).parent / "tui" / "data"


def _histories(state: RunState) -> dict[int, dict[str, bytes]]:
    return {rank: {name: col.to_bytes() for name, col in r.history.items()} for rank, r in state.ranks.items()}


def test_each_step_travels_once_and_viewers_chart_what_the_hub_charts(hub):
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, frames.FRAME_TOPIC)
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(hub.updates_endpoint)
    early = HubClient(hub.updates_endpoint, hub.snapshot_endpoint)
    assert early.wait_synced(20)
    reps = [Reporter(hub.ingest_endpoint, run="test-run", identity=identity(r, 3), heartbeat_s=0) for r in range(3)]
    for r in reps:
        r.hello(strategy="ddp", world_size=3)
    for step in range(30):
        for i, r in enumerate(reps):
            r.step(step=step, loss=1.0 / (step + 1), step_s=0.01 * (i + 1), self_s=0.002, comm_s=None if i else 0.001)
        early.poll()
    wait_for(lambda: all(r.step is not None and r.step.step == 29 for r in early.state.ranks.values()) and len(early.state.ranks) == 3, poll=early.poll)

    raw_frames = []
    while True:
        try:
            raw_frames.append(sub.recv_multipart(zmq.NOBLOCK)[1])
        except zmq.Again:
            break
    assert raw_frames
    for raw in raw_frames:
        plain = msgspec.msgpack.decode(raw)
        assert "history" not in plain  # the steps are not sent a second time
        ranks = [m["rank"] for m in plain.get("messages", []) if m.get("kind") == "step"]
        assert len(ranks) == len(set(ranks))  # at most one step per rank and frame
    sub.close(0)

    # Each rank's chart holds one point per frame that carried a step of it, and a viewer
    # that attaches now (snapshot) charts what the early one built frame by frame.
    for r in early.state.ranks.values():
        assert len(r.history["step"]) == r.steps_seen
        assert r.history["step"].values()[-1] == 29.0
    late = HubClient(hub.updates_endpoint, hub.snapshot_endpoint)
    assert late.wait_synced(20)
    wait_for(lambda: late.fseq == early.fseq, poll=lambda: (late.poll(), early.poll()))
    assert _histories(late.state) == _histories(early.state)
    # The run's loss curve too: the late viewer takes the hub's, the early one built its own.
    assert len(early.state.trend) and late.state.trend.points() == early.state.trend.points()
    for c in (early, late):
        c.close()
    for r in reps:
        r.close()


def test_a_frame_in_the_older_layout_is_applied_once():
    # Hubs before this layout also sent each step in ``history``; the field is ignored.
    step = schema.Step(run="r", rank=0, seq=1, hseq=2, step=7, t=5.0, loss=0.5, step_s=0.1)
    hello = schema.Hello(run="r", rank=0, seq=0, hseq=1, t=4.0, world_size=1)
    old = msgspec.msgpack.encode(
        {"fseq": 1, "hseq": 2, "t": 5.0, "hub_id": "h", "messages": [hello, step], "history": [step]}
    )
    viewer = FrameApplier()
    viewer.hub_id = "h"
    viewer.apply_frame(frames.decode_frame(old))
    r = viewer.state.ranks[0]
    assert r.steps_seen == 1 and len(r.history["step"]) == 1 and r.history["step"].last() == 7.0


def test_the_hubs_medians_are_a_field_older_viewers_skip_and_a_viewer_of_an_older_hub_does_without():
    # Frame.smooth and Snapshot.smooth (the medians of each rank's last steps) came after the
    # rest: a viewer before them decodes the frame as it did, and the grid of a viewer of a hub
    # before them takes medians of its history points, as it did.
    from pardash.tui.model import RowBuilder

    class OlderFrame(msgspec.Struct):  # frames.Frame as it was
        fseq: int
        hseq: int
        t: float
        hub_id: str = ""
        messages: list[schema.Message] = []
        stats: frames.HubStats = msgspec.field(default_factory=frames.HubStats)

    core = HubCore()
    core.replay(schema.Hello(run="r", rank=0, seq=0, world_size=1, t=4.0), 0.0)
    new, old = FrameApplier(), FrameApplier()
    for n, wall in enumerate((0.5, 0.1, 0.9, 0.2, 0.8, 0.3), 1):
        core.replay(schema.Step(run="r", rank=0, seq=n, step=n, t=5.0 + n, step_s=wall, self_s=wall / 2), 0.0)
        raw = frames.encode(core.tick(0.0))
        frame = frames.decode_frame(raw)
        assert frame.smooth.keys() == {0}
        older = msgspec.msgpack.decode(raw, type=OlderFrame)
        assert older.messages == frame.messages
        new.apply_frame(frame)
        old.apply_frame(frames.decode_frame(frames.encode(msgspec.structs.replace(frame, smooth={}))))
    assert new.state.ranks[0].smooth == (0.3, 0.15, None, None)  # steps 2-6
    assert old.state.ranks[0].smooth is None
    assert RowBuilder().build(new.state)[0].step_s == 0.3
    assert RowBuilder().build(old.state)[0].step_s == pytest.approx(0.3)  # (its history holds float32)


def _frames_of(path: Path) -> list[frames.Frame]:
    """A recorded run as the hub frames it: a frame every 20 records, through the wire."""
    core = HubCore()
    out = []
    for i, msg in enumerate(read_log(path)):
        core.replay(msg, 0.0)
        if i % 20 == 19:
            out.append(frames.decode_frame(frames.encode(core.tick(0.0))))
    out.append(frames.decode_frame(frames.encode(core.tick(0.0))))
    return out


def test_apply_frame_is_apply_then_commit_history():
    for path in sorted(DATA.glob("*.jsonl")):
        fast, plain = RunState(track_seq=False), RunState(track_seq=False)
        for frame in _frames_of(path):
            fast.apply_frame(frame.messages, 1.0)
            for msg in frame.messages:
                plain.apply(msg, 1.0)
            plain.commit_history([m for m in frame.messages if isinstance(m, schema.Step)])
        assert fast.ranks.keys() == plain.ranks.keys(), path.name
        for rank, a in fast.ranks.items():
            b = plain.ranks[rank]
            assert (a.status, a.step, a.system, a.heartbeat, a.steps_seen, a.last_seen) == (
                b.status, b.step, b.system, b.heartbeat, b.steps_seen, b.last_seen
            ), path.name  # fmt: skip
        assert _histories(fast) == _histories(plain), path.name
        assert (fast.counts, fast.hseq, fast.t0, fast.t_last, list(fast.events)) == (
            plain.counts, plain.hseq, plain.t0, plain.t_last, list(plain.events)
        ), path.name  # fmt: skip


def test_a_backlog_at_ingest_does_not_hold_frames_back(tmp_path):
    """Messages queued faster than the hub reads them: frames keep going out while the backlog
    is read (the first frame comes before the last message is taken), and all of it is read."""
    h = Hub(run_id="backlog", log_path=None)
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, frames.FRAME_TOPIC)
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(h.updates_endpoint)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 0)  # queue all of it here; the hub's side holds what it can
    push.setsockopt(zmq.LINGER, 0)
    push.connect(h.ingest_endpoint)
    total = 150_000
    beats = [
        schema.encode(schema.Heartbeat(run="backlog", rank=r, seq=i, t=1.0 + i, step=i))
        for i in range(total // 8)
        for r in range(8)
    ]
    for raw in beats:
        push.send(raw)
    thread = threading.Thread(target=h.serve, daemon=True)
    try:
        thread.start()
        seen: list[int] = []

        def drain() -> None:
            while True:
                try:
                    seen.append(frames.decode_frame(sub.recv_multipart(zmq.NOBLOCK)[1]).hseq)
                except zmq.Again:
                    return

        wait_for(lambda: seen and seen[-1] >= total, timeout_s=120, poll=drain)
        assert seen[0] < total  # a frame went out mid-backlog
        assert seen == sorted(seen)
        assert h.core.received == total
    finally:
        h.stop()
        thread.join(10)
        push.close(0)
        sub.close(0)
        h.close()


def test_a_drain_past_its_deadline_takes_one_batch_and_leaves_the_rest():
    """What lets the loop frame on time under a flood: a drain stops at its deadline (checked
    every batch), and what it leaves waits in the socket for the next pass, none of it lost."""
    h = Hub(run_id="flood", log_path=None)
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 0)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(h.ingest_endpoint)
    total = 5_000
    for i in range(total):
        push.send(schema.encode(schema.Heartbeat(run="flood", rank=i % 4, seq=i // 4, t=1.0, step=i)))
    taken: list[int] = []
    try:

        def drain_late() -> None:
            before = h.core.received
            h._drain(0.0, until=0.0, batch=100)  # the deadline has passed already
            taken.append(h.core.received - before)

        wait_for(lambda: h.core.received == total, poll=drain_late)
        assert max(taken) <= 100 and sum(taken) == total
    finally:
        push.close(0)
        h.close()


def test_a_client_names_the_sockets_to_watch(hub):
    c = HubClient(hub.updates_endpoint, hub.snapshot_endpoint)
    socks = c.sockets()
    assert len(socks) == 2 and all(isinstance(s, zmq.Socket) for s in socks)
    assert all(s.getsockopt(zmq.FD) >= 0 for s in socks)
    assert c.wait_synced(20)
    c.close()
    assert c.sockets() == []
    replay = ReplaySource(str(DATA / "run4.jsonl"))
    assert replay.sockets() == []


def test_a_rank_whose_clock_is_ahead_does_not_stretch_a_viewers_elapsed_time():
    # Node 1's clock set 57 years ahead: the header's elapsed time, the newest rank time less the
    # first, read decades in the live TUI (report and replay already leave such a rank out). The
    # hub's frames carry its own clock, which bounds the run's time in a viewer.
    import time

    from pardash.tui.widgets.run_header import summarize

    now = time.time()
    ahead = 57 * 365.25 * 86400
    core = HubCore()
    for rank, off in ((0, 0.0), (1, ahead)):
        core.replay(schema.Hello(run="r", rank=rank, seq=0, world_size=2, strategy="ddp", t=now - 12 + off), 0.0)
    for step in range(1, 11):
        for rank, off in ((0, 0.0), (1, ahead)):
            core.replay(schema.Step(run="r", rank=rank, seq=step, step=step, step_s=1.0, samples=4, t=now - 10 + step + off), 0.0)
        if step == 5:
            snap = frames.decode_snapshot(frames.encode(core.snapshot()))
            first = frames.decode_frame(frames.encode(core.tick(0.0)))
    rest = frames.decode_frame(frames.encode(core.tick(0.0)))
    class Viewer(FrameApplier):
        live = True  # (a HubClient without its sockets)

    live = Viewer()  # from the start
    live.apply_frame(first)
    live.apply_frame(rest)
    late = Viewer()  # attached mid-run
    late.load_snapshot(snap)
    late.apply_frame(rest)
    for viewer in (live, late):
        assert 9.0 <= summarize(viewer).elapsed_s <= 12.0


def test_a_log_recorded_on_a_clock_ahead_of_this_machines_replays_its_whole_elapsed_time(tmp_path):
    # A replay's frames are made now, on this machine's clock: they are no hub clock to hold a
    # rank's times to (a log from a machine whose clock ran 2 h ahead read as 0 s elapsed).
    from pardash.tui.widgets.run_header import summarize

    import time

    records = [msgspec.json.decode(line) for line in (DATA / "run4.jsonl").read_bytes().splitlines()]
    shift = time.time() + 2 * 3600.0 - min(r["t"] for r in records if r.get("t"))  # 2 h ahead of now
    shifted = tmp_path / "ahead.jsonl"
    shifted.write_bytes(b"".join(msgspec.json.encode({**r, "t": r["t"] + shift} if r.get("t") else r) + b"\n" for r in records))
    elapsed = []
    for path in (DATA / "run4.jsonl", shifted):
        replay = ReplaySource(str(path), speed=1e9)
        replay.seek(1e9)
        elapsed.append(summarize(replay).elapsed_s)
    assert elapsed[0] > 10.0 and elapsed[1] == pytest.approx(elapsed[0], abs=1e-3)
