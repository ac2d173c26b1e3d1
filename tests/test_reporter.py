"""The rank side never blocks and never breaks training, hub or no hub."""

import os
import threading
import time

import pytest
import zmq

from helpers import identity, wait_for
from pardash.telemetry import schema
from pardash.telemetry.env import rank_identity, telemetry_enabled
from pardash.telemetry.reporter import Reporter


NO_HUB = "tcp://127.0.0.1:9"
"""Where no hub listens (the discard port, closed here: a port picked free and closed again
could be bound meanwhile by another test's hub)."""


def _first_beat_after_the_loop(rep: Reporter, monkeypatch) -> threading.Event:
    """Hold ``rep``'s heartbeat thread before its first beat until the returned event is set:
    the loop's steps then all come before that beat, however slowly a loaded machine runs the
    test. (A beat among them takes the steps held so far with it; and each beat counts in
    ``sent``.) Set before ``hello``, which starts the thread."""
    loop_done = threading.Event()
    beat = rep.heartbeat

    def after_the_loop(*args):
        loop_done.wait(60)
        return beat(*args)

    monkeypatch.setattr(rep, "heartbeat", after_the_loop)
    return loop_done


def test_no_hub_never_blocks_and_counts_drops():
    rep = Reporter(NO_HUB, run="r", identity=identity(0), hwm=100, heartbeat_s=0)
    done = threading.Event()

    def publish():
        for i in range(5000):
            rep.step(step=i, loss=1.0, step_s=0.01)
        done.set()

    t = threading.Thread(target=publish, daemon=True)
    t.start()
    t.join(60)  # a liveness bound: a blocking send would hang here forever
    assert done.is_set()
    rep.flush()  # steps held for the last burst
    assert rep.dropped > 0
    assert rep.sent + rep.dropped == 5000
    rep.close(linger_ms=0)


def test_disabled_reporter_is_a_no_op(monkeypatch):
    monkeypatch.setenv("PARDASH_TELEMETRY", "0")
    monkeypatch.setenv("PARDASH_ENDPOINT", "tcp://127.0.0.1:1")
    assert not telemetry_enabled()
    rep = Reporter.from_env()
    assert not rep.enabled
    assert rep.step(step=1, loss=1.0, step_s=0.1) is False
    rep.close()


def test_identity_from_torchrun_and_slurm():
    ident = rank_identity({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "GROUP_RANK": "1"})
    assert (ident.rank, ident.local_rank, ident.world_size, ident.node) == (3, 1, 8, 1)
    ident = rank_identity({"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "6", "SLURM_NODEID": "2"})
    assert (ident.rank, ident.local_rank, ident.world_size, ident.node) == (5, 1, 6, 2)


def _beating(rank: int, heartbeat_s: float) -> tuple[zmq.Socket, Reporter]:
    """A PULL socket and a reporter that said hello to it, beating every ``heartbeat_s``."""
    pull = zmq.Context.instance().socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    rep = Reporter(f"tcp://127.0.0.1:{port}", run="r", identity=identity(rank), heartbeat_s=heartbeat_s)
    rep.hello(strategy="ddp")
    return pull, rep


def test_heartbeats_name_the_phase_while_the_loop_is_stuck():
    pull, rep = _beating(1, 0.05)
    rep.set_phase("backward")  # and then the loop never comes back
    seen: list = []

    def said_all():
        while pull.poll(10):
            seen.append(schema.decode(pull.recv()))
        hello = any(isinstance(m, schema.Hello) for m in seen)
        beat = any(isinstance(m, schema.Heartbeat) and m.phase == "backward" for m in seen)
        return hello and beat and any(isinstance(m, schema.System) for m in seen)

    wait_for(said_all)
    # The hello is the rank's first message by its seq (the heartbeats and samples went on a
    # socket of their own once, and the hello did not always arrive first).
    (hello,) = [m for m in seen if isinstance(m, schema.Hello)]
    assert hello.seq == 0 and hello.rank == 1
    assert all(m.seq > 0 and m.rank == 1 for m in seen if m is not hello)
    assert all(m.rss_bytes > 0 for m in seen if isinstance(m, schema.System))
    rep.close()
    pull.close(0)


def test_the_first_system_sample_has_the_hosts_cpu():
    # psutil keeps the host's last CPU reading per thread, and the sampler was primed in the
    # main thread: the heartbeat thread's first sample always said the host was idle (0.0).
    import time

    pull, rep = _beating(0, 0.2)
    first: list = []

    def busy_until_sampled() -> bool:
        end = time.perf_counter() + 0.02
        while time.perf_counter() < end:  # this process keeps a core of the host busy
            pass
        while pull.poll(0):
            m = schema.decode(pull.recv())
            if isinstance(m, schema.System):
                first.append(m)
        return bool(first)

    wait_for(busy_until_sampled, poll_s=0.0)
    assert first[0].cpu_pct > 0 and first[0].host_cpu_pct is not None and first[0].host_cpu_pct > 0, first[0]
    rep.close()
    pull.close(0)


def test_fast_steps_go_in_bursts_and_none_is_left_behind(monkeypatch):
    from pardash.telemetry import reporter

    # Ten steps within a burst interval however slowly the test runs (at 50 ms, a loaded
    # machine that paused the loop sent the last step, and the held ones with it, at once).
    monkeypatch.setattr(reporter, "BATCH_S", 60.0)
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    rep = Reporter(f"tcp://127.0.0.1:{port}", run="r", identity=identity(0), heartbeat_s=0.05)
    loop_done = _first_beat_after_the_loop(rep, monkeypatch)
    rep.hello(strategy="ddp")  # goes at once, and starts the heartbeat thread
    for i in range(1, 11):  # ten steps within a burst interval: held, not sent one by one
        rep.step(step=i, loss=1.0, step_s=0.001, samples=16 if i < 10 else 4)  # a partial last batch
    assert rep.sent < 11
    loop_done.set()
    # The loop sends nothing more (stuck, or done without close): the heartbeat thread sends
    # what it left held.
    seen: list = []

    def all_steps():
        while pull.poll(10):
            seen.append(schema.decode(pull.recv()))
        return sorted(m.step for m in seen if isinstance(m, schema.Step)) == list(range(1, 11))

    wait_for(all_steps)
    assert rep.dropped == 0
    # Each step carries the samples of its process so far: a viewer that gets one step in
    # several still counts the steps between at their own sizes.
    steps = sorted((m for m in seen if isinstance(m, schema.Step)), key=lambda m: m.step)
    assert [m.samples_total for m in steps] == [16 * i for i in range(1, 10)] + [148]
    rep.close()
    pull.close(0)


def test_a_heartbeat_never_overtakes_the_steps_held_before_it(monkeypatch):
    # Steps held for a burst (under 0.1 s old) stayed behind while the heartbeat thread sent
    # a heartbeat with a later seq: the hub read the gap as lost messages ("9 lost") and the
    # rank, its steps unseen, as "starting", until the steps came.
    from pardash.telemetry import reporter

    monkeypatch.setattr(reporter, "BATCH_S", 60.0)  # the loop holds every step after the first
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    rep = Reporter(f"tcp://127.0.0.1:{port}", run="r", identity=identity(0), heartbeat_s=0.05)
    loop_done = _first_beat_after_the_loop(rep, monkeypatch)
    rep.hello(strategy="ddp")
    for i in range(1, 6):
        rep.step(step=i, loss=1.0, step_s=0.001)
    loop_done.set()
    seen: list = []

    def a_beat():
        while pull.poll(10):
            seen.append(schema.decode(pull.recv()))
        return any(isinstance(m, schema.Heartbeat) for m in seen)

    wait_for(a_beat)
    beat = next(m for m in seen if isinstance(m, schema.Heartbeat))
    before = [m.step for m in seen[: seen.index(beat)] if isinstance(m, schema.Step)]
    assert before == [1, 2, 3, 4, 5] and beat.step == 5
    rep.close()
    pull.close(0)


def _sched(tid: int) -> tuple[str, int]:
    with open(f"/proc/self/task/{tid}/comm") as fh:
        return fh.read().strip(), os.sched_getscheduler(tid)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE") or not os.path.isdir("/proc/self/task"), reason="Linux scheduling")
def test_zeromq_threads_of_the_reporter_never_take_a_core_from_training():
    # Its own context's I/O thread and reaper run under SCHED_IDLE; the process's other
    # threads, and the ZeroMQ threads of a context the user made, keep their scheduling.
    user_ctx = zmq.Context()
    user_sock = user_ctx.socket(zmq.PUSH)  # starts the user's context's threads
    before = {t: _sched(t) for t in map(int, os.listdir("/proc/self/task"))}
    rep = Reporter(NO_HUB, identity=identity(0), heartbeat_s=0)
    try:
        after = {t: _sched(t) for t in map(int, os.listdir("/proc/self/task"))}
        new = {t: s for t, s in after.items() if t not in before}
        assert sorted(name for name, _ in new.values()) == ["ZMQbg/IO/0", "ZMQbg/Reaper"]
        assert all(policy == os.SCHED_IDLE for _, policy in new.values()), new
        # The user's context's threads (named by now; perhaps not yet in ``before``) untouched.
        assert all(after[t][1] == policy for t, (_, policy) in before.items() if t in after)
        assert any(after[t][0].startswith("ZMQbg") and after[t][1] != os.SCHED_IDLE for t in before if t in after)
    finally:
        rep.close(linger_ms=0)
        user_sock.close(0)
        user_ctx.term()


def test_steps_a_stuck_loop_left_held_go_between_beats(monkeypatch):
    # A rank stuck in a collective sent the steps it held only with its next heartbeat, up to
    # a second on: stopped by torchrun within it, its last steps never reached the log (and no
    # later message showed them lost).
    from pardash.telemetry import reporter

    monkeypatch.setattr(reporter, "BATCH_S", 60.0)  # the loop holds every step after the first
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    rep = Reporter(f"tcp://127.0.0.1:{port}", run="r", identity=identity(0), heartbeat_s=3600)  # no beat in this test
    rep.hello(strategy="ddp")
    for i in range(1, 6):
        rep.step(step=i, loss=1.0, step_s=0.001)
    seen: list = []

    def all_steps():
        while pull.poll(10):
            seen.append(schema.decode(pull.recv()))
        return sorted(m.step for m in seen if isinstance(m, schema.Step)) == [1, 2, 3, 4, 5]

    wait_for(all_steps, timeout_s=20)  # (RESCUE_S after the loop stopped; at the beat: an hour)
    assert not any(isinstance(m, schema.Heartbeat) for m in seen) and rep.dropped == 0
    rep.close()
    pull.close(0)


def test_a_step_sent_later_than_it_ended_keeps_its_end_time():
    # The automatic instrumentation holds a step for what the script logs after it: stamped
    # when sent, the work after a script's last step (9 s of it) read as that step's time.
    pull, rep = _beating(0, 0)
    rep.step(step=1, loss=1.0, step_s=0.1, t=1.7e9, mono=42.0)
    before = time.time()
    rep.step(step=2, loss=1.0, step_s=0.1)  # (the common case: stamped now)
    rep.flush()
    steps: list = []
    wait_for(lambda: [steps.append(m) for m in [schema.decode(pull.recv())] if isinstance(m, schema.Step)] is not None and len(steps) == 2)
    assert (steps[0].t, steps[0].mono) == (1.7e9, 42.0)
    assert steps[1].t >= before and steps[1].mono > 42.0
    rep.close()
    pull.close(0)


def test_steps_the_heartbeat_thread_rescued_stay_in_order_with_the_loops_next(monkeypatch):
    # A loop held up (a busy host) had the steps it held sent by the heartbeat thread on that
    # thread's own socket, while it went on and sent newer ones on its socket: the hub, taking
    # turns between the two connections, read 107, 114, 108, 115, ... (1 log of 24 in a
    # review). Over inproc, where the hub's socket holds both connections' messages before it
    # reads any, taking turns between them is certain.
    from pardash.telemetry import reporter

    monkeypatch.setattr(reporter, "BATCH_S", 60.0)  # the loop holds every step after the hello
    monkeypatch.setattr(reporter, "HUB_GRACE_S", 0.0)  # (inproc has no handshake to wait for)
    monkeypatch.setattr(reporter, "MORE_GRACE_S", 0.0)
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind("inproc://pardash-test-rescue")
    rep = Reporter("inproc://pardash-test-rescue", run="r", identity=identity(1), heartbeat_s=3600, context=ctx)
    rescued = threading.Event()
    rescue = rep._rescue_held

    def rescue_once(*args):
        try:
            return rescue(*args)
        finally:
            reporter.RESCUE_S = 3600.0  # (monkeypatch puts it back) no more rescues: the loop is back
            rescued.set()

    monkeypatch.setattr(rep, "_rescue_held", rescue_once)
    monkeypatch.setattr(reporter, "RESCUE_S", reporter.RESCUE_S)
    rep.hello(strategy="ddp")
    for i in range(1, 8):
        rep.step(step=i, loss=1.0, step_s=0.001)
    assert rescued.wait(30)  # the loop stalled: RESCUE_S on, the heartbeat thread sent its steps
    assert rep.sent == 8
    for i in range(8, 15):  # the loop is back
        rep.step(step=i, loss=1.0, step_s=0.001)
    rep.flush()
    seen = []
    while len(seen) < 15 and pull.poll(10_000):
        seen.append(schema.decode(pull.recv()))
    assert [m.step for m in seen if isinstance(m, schema.Step)] == list(range(1, 15))
    assert [m.seq for m in seen] == list(range(15)) and rep.dropped == 0
    rep.close(linger_ms=0)
    pull.close(0)
    ctx.term()
