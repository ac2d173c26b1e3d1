"""`pardash simulate` keeps no log unless asked (1024 ranks x 10 steps/s write about 430 MB a
minute), and the growth rate it announces matches the log it writes when asked."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq
from helpers import pardash_env

from pardash.telemetry.simulate import SimConfig, log_bytes_per_minute, log_line_bytes

SIM = ["simulate", "--headless", "--ranks", "8", "--steps", "40", "--rate", "20", "--every", "60"]
PER_MINUTE = re.compile(r"about ([\d,.]+) MB a minute")


def _simulate(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [sys.executable, "-m", "pardash", *SIM, "--runs-dir", str(tmp_path / "runs"), *extra],
        capture_output=True, text=True, env=pardash_env(), cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    return p


def test_no_log_by_default_and_the_start_line_says_how_to_keep_one(tmp_path):
    p = _simulate(tmp_path)
    assert "no log (--keep-log to record one" in p.stdout
    assert not list(tmp_path.rglob("*.jsonl"))
    assert not (tmp_path / "runs").exists()


def test_kept_log_grows_as_the_start_line_says(tmp_path):
    p = _simulate(tmp_path, "--keep-log")
    (log,) = (tmp_path / "runs").glob("sim-*/telemetry.jsonl")
    assert f"log {log.relative_to(tmp_path)}" in p.stdout or f"log {log}" in p.stdout
    announced = float(PER_MINUTE.search(p.stdout).group(1).replace(",", ""))
    cfg = SimConfig(ranks=8, rate_hz=20.0, steps=40)
    assert announced == round(log_bytes_per_minute(cfg) / 1e6, 1)
    # Each kind of line the projection counts is the size the hub really writes.
    sizes: dict[str, list[int]] = {}
    for line in log.read_bytes().splitlines():
        kind = json.loads(line)["kind"]
        sizes.setdefault(kind, []).append(len(line) + 1)
    assert len(sizes["step"]) == 8 * 40
    projected = log_line_bytes(cfg, after_s=2.0)  # 40 steps at 20 a second
    for kind in ("step", "heartbeat", "system"):
        mean = sum(sizes[kind]) / len(sizes[kind])
        assert 0.95 <= projected[kind] / mean <= 1.05, (kind, projected[kind], mean)


def test_explicit_log_path_is_kept(tmp_path):
    target = tmp_path / "mine.jsonl"
    p = _simulate(tmp_path, "--log", str(target))
    assert target.stat().st_size > 0 and f"log {target}, about" in p.stdout


def test_a_simulated_crash_exits_1_as_a_failed_run_does(tmp_path):
    # It said "simulated failure" and exited 0: a script trying its alerting on the crash saw success.
    p = subprocess.run([sys.executable, "-m", "pardash", *SIM, "--crash", "1@5"],
                       capture_output=True, text=True, env=pardash_env(), cwd=tmp_path, timeout=120)  # fmt: skip
    last = p.stdout.rstrip().splitlines()[-1]
    assert last.startswith("pardash: simulated failure: rank 1 exited with code 1 at step 5"), p.stdout
    assert p.returncode == 1, p.stderr


def test_a_hub_recording_to_dev_null_tells_its_viewers_there_is_no_log():
    # A simulate's TUI header read "log /dev/null", where its start line says "no log".
    import os

    from pardash.telemetry.hub import Hub

    hub = Hub(run_id="sim-nolog", log_path=os.devnull)
    try:
        assert hub.core.stats().log_path == ""
    finally:
        hub.close()


def test_projection_at_1024_ranks_is_hundreds_of_megabytes_a_minute():
    # The figure the issue saw: 9.5 GB in 23 minutes at 1024 ranks x 10 steps/s.
    per_minute = log_bytes_per_minute(SimConfig(ranks=1024, rate_hz=10.0))
    assert 300e6 <= per_minute <= 600e6


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ranks": 0}, "--ranks 0: need at least 1"),
        ({"crash": (9, 5)}, "--crash 9@5: rank must be below 8"),
        ({"crash": (1, 0)}, "--crash 1@0: the step must be at least 1 and at most --steps 40"),
        ({"stall": (1, 41)}, "--stall 1@41: the step must be at least 1 and at most --steps 40"),
    ],
)
def test_a_simulated_fault_that_could_never_happen_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SimConfig(**{"ranks": 8, "steps": 40, **kwargs})


def test_a_simulate_stopped_by_sigterm_stops_its_hub_and_ranks_too(tmp_path):
    import signal

    import psutil

    p = subprocess.Popen([sys.executable, "-m", "pardash", "simulate", "--headless", "--ranks", "4", "--every", "0.2"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=pardash_env(), cwd=tmp_path)
    try:
        assert "step" in p.stdout.readline() + p.stdout.readline()  # the start line, then progress
        children = psutil.Process(p.pid).children(recursive=True)
        assert len(children) >= 2  # the hub and the simulated ranks
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 128 + signal.SIGTERM
        _, alive = psutil.wait_procs(children, timeout=15)
        assert not alive, [c.cmdline() for c in alive]
    finally:
        p.kill()


def test_a_simulate_killed_outright_leaves_no_hub_or_ranks_behind(tmp_path):
    # kill -9 of `pardash simulate` left its hub and simulated ranks running (in sessions of
    # their own, their parent gone), the hub writing the log for as long as nobody killed them.
    import signal

    import psutil

    log = tmp_path / "sim.jsonl"
    p = subprocess.Popen([sys.executable, "-m", "pardash", "simulate", "--headless", "--ranks", "2", "--every", "0.2", "--log", str(log)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=pardash_env(), cwd=tmp_path)  # fmt: skip
    try:
        assert "step" in p.stdout.readline() + p.stdout.readline()  # the start line, then progress
        children = psutil.Process(p.pid).children(recursive=True)
        assert len(children) >= 2  # the hub and the simulated ranks
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        _, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, [c.cmdline() for c in alive]
        assert "hub stopped" in log.read_text().splitlines()[-1]  # (its hub closed the log as at a stop)
    finally:
        p.kill()
        p.stdout.close()


def test_a_simulate_stopped_with_ctrl_c_as_it_hangs_says_so_and_exits_130(tmp_path):
    # It said "stopped by you" and exited 0, where a launch says the hang and exits 130.
    import signal

    p = subprocess.Popen([sys.executable, "-m", "pardash", "simulate", "--headless", "--ranks", "4", "--every", "0.5", "--stall", "2@5"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=pardash_env(), cwd=tmp_path)  # fmt: skip
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 120  # (progress lines come every 0.5 s: the loop turns)
        while not any(line.startswith("[stalled]") for line in lines):
            line = p.stdout.readline()
            assert line and time.monotonic() < deadline, "".join(lines)
            lines.append(line)
        p.send_signal(signal.SIGINT)
        out = p.stdout.read()
        assert p.wait(30) == 130
        last = out.rstrip().splitlines()[-1]
        assert re.fullmatch(r"pardash: stopped by you as it hung after step 4, likely waiting for rank 2 \(exit code 130\)", last), last
    finally:
        p.kill()


@pytest.mark.parametrize(
    "flag, value, said",
    [
        # A ZeroDivisionError traceback, then "done" and exit code 0.
        ("--ranks-per-node", "0", "argument --ranks-per-node: 0 must be at least 1"),
        # Accepted: "step 1/-5".
        ("--steps", "-5", "argument --steps: -5 must be at least 0"),
        # Ran 32,768 ranks without a word (what a hub tracks).
        ("--ranks", "100000", "argument --ranks: 100000 is not in 1..32768"),
        # Ran a job without any straggler.
        ("--straggler-kind", "compute", "--straggler-kind compute goes with --straggler RANK"),
    ],
)
def test_simulate_refuses_what_it_cannot_run_in_one_line(flag, value, said):
    p = subprocess.run([sys.executable, "-m", "pardash", "simulate", flag, value], capture_output=True, text=True, env=pardash_env(), timeout=60)
    assert p.returncode == 2 and said in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_simulated_fault_given_twice_is_refused_not_half_dropped():
    # Review 298: `--crash 8-15@30 --crash 3@20` crashed rank 3 alone, ranks 8-15 dropped without a word.
    p = subprocess.run([sys.executable, "-m", "pardash", "simulate", "--crash", "8-15@30", "--crash", "3@20"], capture_output=True,
                       text=True, env=pardash_env(), timeout=60)  # fmt: skip
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "--crash given twice (8-15@30 and 3@20): give it once, its ranks together (3,8-15@30)" in p.stderr


def test_a_simulated_straggler_slows_the_job_as_much_as_its_steps_say(monkeypatch):
    # The steps said 130 ms from step 20 while they came every 100 ms: a 29.9 s run of 299
    # such steps, and a rate "at the end" a third above the one shown while it ran.
    import time
    from types import SimpleNamespace

    from pardash.telemetry import simulate

    clock = [1000.0]
    fake = SimpleNamespace(monotonic=lambda: clock[0], time=time.time, sleep=lambda s: clock.__setitem__(0, clock[0] + s))
    monkeypatch.setattr(simulate, "time", fake)
    cfg = SimConfig(ranks=2, rate_hz=10.0, steps=40, straggler=1)
    job = simulate.SimulatedJob(cfg, "tcp://127.0.0.1:9", "sim-test")
    ticks: list[tuple[int, float]] = []
    tick = job.tick

    def timed_tick():
        tick()
        ticks.append((job.step, clock[0]))

    job.tick = timed_tick
    try:
        job.run()
    finally:
        job.close()
    assert [s for s, _ in ticks] == list(range(1, 41))
    for (_, a), (step, b) in zip(ticks, ticks[1:]):
        said = simulate.step_message(cfg, 0, step, 0.0, 0.0, 0.0).step_s
        assert b - a == pytest.approx(said), step
    assert simulate.step_message(cfg, 0, 20, 0.0, 0.0, 0.0).step_s == pytest.approx(0.13)


@pytest.mark.slow
def test_an_attached_viewer_exits_1_when_the_run_it_watched_failed(tmp_path):
    # `pardash attach --headless RUN` ended 0 after "the run is over: ... rank 1 exited with
    # code 1": a script waiting on the job read it as a success.
    # The simulated ranks step here, one tick at a time, and crash only once the viewer follows
    # the run: `pardash simulate --crash 1@120` crashed 6 s after it started, on its own clock,
    # and a viewer slower to start than that (a loaded machine) found the run, and its hub, gone.
    import signal

    from pardash.telemetry.simulate import SimulatedJob
    from pardash.telemetry.spawn import spawn_hub

    env = pardash_env(PARDASH_CURVE_DIR=None)  # the simulated ranks hold no keys
    hub, info = spawn_hub(["--run-id", "sim-crash", "--log", str(tmp_path / "run.jsonl"), "--world-size", "2",
                           "--no-registry"], env=env)  # fmt: skip
    job = SimulatedJob(SimConfig(ranks=2, rate_hz=20.0, steps=400, crash=(1, 5)), info["ingest"], "sim-crash",
                       context=zmq.Context())  # fmt: skip
    att = None
    try:
        job.hello()
        job.tick()  # step 1
        att = subprocess.Popen([sys.executable, "-m", "pardash", "attach", "--headless", "--every", "0.2", info["ingest"]],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)  # fmt: skip
        assert att.stdout is not None
        lines = []
        for line in att.stdout:  # until it follows the run
            lines.append(line)
            if "step" in line:
                break
        assert lines and "step" in lines[-1], "attach ended before following the run"
        while not job.done:
            job.tick()  # steps 2 to 4, then rank 1's crash at step 5
        out, err = att.communicate(timeout=120)  # (what the loop read ahead came before the crash)
        out = "".join(lines) + out
        assert "rank 1 exited with code 1" in out, out[-2000:] + err[-2000:]
        assert att.returncode == 1
    finally:
        job.close()
        job.ctx.destroy(linger=2000)
        if att is not None and att.poll() is None:
            att.kill()
            att.wait()
        hub.send_signal(signal.SIGTERM)
        hub.wait(30)


def test_an_attached_viewer_stopped_with_ctrl_c_says_the_run_goes_on_and_exits_130(tmp_path):
    # A Ctrl-C ended `pardash attach --headless` with 0 and not a word: a script read the run
    # as a success, a person did not learn the run was still going.
    import re
    import signal

    p = subprocess.Popen([sys.executable, "-m", "pardash", "simulate", "--headless", "--ranks", "2", "--rate", "20",
                          "--steps", "100000", "--every", "5"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=pardash_env(), cwd=tmp_path)  # fmt: skip
    try:
        m = re.search(r", run (\S+), hub (tcp://\S+),", p.stdout.readline())
        assert m, "no start line"
        att = subprocess.Popen([sys.executable, "-m", "pardash", "attach", "--headless", "--every", "0.2", m.group(2)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env(), cwd=tmp_path)  # fmt: skip
        assert att.stdout is not None
        assert any("step" in line for line in att.stdout), "attach ended before following the run"
        att.send_signal(signal.SIGINT)
        _out, err = att.communicate(timeout=60)
        assert att.returncode == 130, err[-2000:]
        assert f"stopped watching; the run goes on (`pardash attach {m.group(2)}` watches it again)" in err, err[-2000:]
        assert p.poll() is None  # the job itself untouched
        # A bare `attach` takes the one live run: it says which, and how to come back to that one
        # (a bare `attach` again may pick another by then).
        att = subprocess.Popen([sys.executable, "-m", "pardash", "attach", "--headless", "--every", "0.2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env(), cwd=tmp_path)  # fmt: skip
        assert att.stdout is not None
        assert att.stdout.readline().strip() == f"pardash: watching run {m.group(1)}"
        assert any("step" in line for line in att.stdout), "attach ended before following the run"
        att.send_signal(signal.SIGINT)
        _out, err = att.communicate(timeout=60)
        assert f"stopped watching; the run goes on (`pardash attach {m.group(1)}` watches it again)" in err, err[-2000:]
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait(30)


def test_simulate_in_the_tui_ends_with_the_headless_line_and_exit_code(tmp_path):
    # `pardash simulate --crash 1@5`, then q in the TUI: exit 0 and no word, where the headless
    # one says "simulated failure: ..." and exits 1 (a script trying its alerting on a crash
    # saw success).
    import os
    import pty
    import select

    from pardash.telemetry import schema
    from pardash.telemetry.logreader import load_log

    log = tmp_path / "sim.jsonl"
    import fcntl
    import struct
    import termios

    main, sub = pty.openpty()
    fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # (a new pty's is 0x0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash", "simulate", "--ranks", "2", "--rate", "20", "--crash", "1@5", "--log", str(log)],
        stdin=sub, stdout=sub, stderr=sub, env=pardash_env(TERM="xterm-256color"), cwd=tmp_path,
    )  # fmt: skip
    os.close(sub)
    out = b""

    def read(until) -> None:
        nonlocal out
        end = time.monotonic() + 120  # (bounded: a TUI that never ends fails the test)
        while time.monotonic() < end:
            if until():
                return
            if select.select([main], [], [], 0.1)[0]:
                try:
                    out += os.read(main, 65536)
                except OSError:  # (EIO: the terminal's other end closed)
                    return

    try:
        crashed = lambda: log.exists() and any(  # noqa: E731
            isinstance(m, schema.Event) and m.name == "exit" and m.rank == 1 for m in load_log(log)[0]
        )
        read(crashed)
        assert crashed(), out.decode(errors="replace")[-2000:]
        read(lambda: b"exited" in out)  # (its alert: the viewer has taken it)
        os.write(main, b"q")
        read(lambda: proc.poll() is not None)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(main)
    text = out.decode(errors="replace")
    assert proc.returncode == 1, text[-2000:]
    assert "pardash: simulated failure: rank 1 exited with code 1" in text, text[-2000:]


def test_a_simulated_node_lost_is_its_ranks_crashing_at_once():
    # Review 294: simulate injected one fault of each kind, one rank each: no node lost (its 8
    # ranks dying together), no several stragglers, to rehearse a big job's failures with.
    # `--crash 8-15@3`: ranks 8-15 fail at step 3, torchrun stops the others.
    from pardash.telemetry import schema
    from pardash.telemetry.simulate import SimulatedJob, parse_rank_step, parse_ranks

    assert parse_ranks("1,5,9-10", "--straggler") == (1, 5, 9, 10)
    for bad in ("8-", "15-8", "x", ""):
        with pytest.raises(ValueError, match="expected ranks as 3, 8-15 or 1,5,9-10"):
            parse_ranks(bad, "--straggler")
    with pytest.raises(ValueError, match=r"--crash 8-16@3: ranks must be below 16"):
        SimConfig(ranks=16, crash=parse_rank_step("8-16@3", "--crash"))
    assert SimConfig(ranks=4, straggler=2).straggler == (2,)  # (one rank, as before)
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    job = SimulatedJob(SimConfig(ranks=16, rate_hz=100.0, steps=50, crash=parse_rank_step("8-15@3", "--crash"), straggler=(1, 2)),
                       f"tcp://127.0.0.1:{port}", "sim-node", context=ctx)  # fmt: skip
    try:
        job.hello()
        while not job.done:
            job.tick()
        got = []
        while pull.poll(2000):
            got.append(schema.decode(pull.recv()))
            if sum(isinstance(m, schema.Event) and m.name == "exit" for m in got) == 16:
                break
    finally:
        job.close()
        pull.close(0)
        ctx.destroy(linger=0)
    errors = sorted(m.rank for m in got if isinstance(m, schema.Event) and m.name == "error")
    exits = {m.rank: m.code for m in got if isinstance(m, schema.Event) and m.name == "exit"}
    assert errors == list(range(8, 16))
    assert exits == {r: 1 if r >= 8 else -15 for r in range(16)}


def test_a_simulated_nan_turns_the_ranks_loss_as_a_real_ranks_reporter_says_it(tmp_path):
    # Review 306: simulate offered a straggler, a stall and a crash, no loss going wrong, to try
    # what the TUI, the report and /metrics say of one. `--nan 3@20`: rank 3's loss is NaN from
    # step 20, every other rank's from 21 (the all-reduce carries it), as a rank's reporter says
    # it: a warning as it turns, then steps without a loss.
    from pardash.telemetry.report import build_report
    from pardash.telemetry.report_render import render_text
    from pardash.telemetry import schema
    from pardash.telemetry.schema import decode_json as schema_decode

    log = tmp_path / "nan.jsonl"
    _simulate(tmp_path, "--nan", "3@20", "--log", str(log))
    msgs = [m for m in (schema_decode(line) for line in log.read_bytes().splitlines()) if m.rank >= 0]
    warned = {m.rank: m.step for m in msgs if isinstance(m, schema.Event) and m.name == "warning" and m.message.startswith("loss is nan")}
    assert warned == {r: 20 if r == 3 else 21 for r in range(8)}
    losses = {(m.rank, m.step): m.loss for m in msgs if isinstance(m, schema.Step)}
    assert all((loss is None) == (step >= (20 if rank == 3 else 21)) for (rank, step), loss in losses.items())
    assert len(losses) == 8 * 40
    # Its hellos say the fault and the pardash that made them, as a compare reads them
    # (two simulated runs, one with --straggler 3, read as differing in nothing).
    from pardash import __version__

    hello = next(m for m in msgs if isinstance(m, schema.Hello))
    assert hello.config["nan"] == "3@20" and "straggler" not in hello.config and hello.pardash_version == __version__
    text = render_text(build_report(str(log)))
    assert "rank 3" in text and "nan at 20" in text, text
    p = subprocess.run([sys.executable, "-m", "pardash", *SIM, "--nan", "8@20"], capture_output=True, text=True,
                       env=pardash_env(), cwd=tmp_path, timeout=60)  # fmt: skip
    assert p.returncode == 2 and "--nan 8@20: rank must be below 8" in p.stderr, p.stderr
