"""Faults on real processes (issue 7): the hub killed mid-run, the viewer killed, an
unwritable log. Training goes on; nothing is lost but what the gap counter reports."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import msgspec
import pytest
import psutil

from helpers import TerminalOutput, pardash_env, wait_for
from pardash.telemetry import registry, schema
from pardash.telemetry.logreader import load_log
from pardash.telemetry.report import build_report
from pardash.trainer import jobprocs

pytestmark = pytest.mark.slow


def _start(tmp_path, *args, env=None, stderr=subprocess.PIPE, **kw):
    trainer = [] if "--" in args else ["--log-every", "0"]  # a script of one's own takes no trainer flags
    cmd = [sys.executable, "-m", "pardash", "launch", "--headless", "--log", str(tmp_path / "run.jsonl"),
           "--runs-dir", str(tmp_path / "runs"), "--every", "1", *trainer, *args]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env or pardash_env(),
                            cwd=tmp_path, **kw)  # fmt: skip


def _ended(pid: int) -> bool:
    """Whether the process ``pid`` has ended (gone, or a zombie its parent has not reaped)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _steps(log, rank=None):
    if not log.exists():
        return []
    return [m for m in load_log(log)[0] if isinstance(m, schema.Step) and (rank is None or m.rank == rank)]


CHATTY = os.path.join(os.path.dirname(__file__), "scripts", "chatty.py")


def _gated(tmp_path: Path, steps: int, at: int) -> tuple[list[str], Path]:
    """chatty.py's arguments for ``steps`` steps that wait after step ``at`` until the test
    touches the returned file: what the test does mid-run happens while the job waits, not in
    a time budget of steps (a loaded machine ran the whole job first now and then)."""
    go = tmp_path / "go"
    return ["--nproc", "1", "--", CHATTY, str(steps), str(go), str(at)], go


def test_hub_killed_mid_run_is_restarted_and_the_log_carries_on(tmp_path):
    log = tmp_path / "run.jsonl"
    # One rank: what the restart keeps is each rank's own (its queue, its steps or their count
    # as lost); a second cost its start-up and proved that again. (The hub is back within a
    # second of the kill, and a rank's close waits 1.5 s for one: a rank that ends first still
    # sends its last steps.)
    p = _start(tmp_path, "--strategy", "ddp", "--nproc", "1", "--steps", "150")
    wait_for(lambda: len(_steps(log, 0)) >= 20, timeout_s=120, poll_s=0.3)
    runs = registry.live_runs()
    assert len(runs) == 1
    os.kill(runs[0]["pid"], signal.SIGKILL)
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, err[-2000:]
    assert "restarting it" in err
    msgs, stats = load_log(log)
    assert stats.skipped_total <= 1  # at most the line the dying hub was writing
    restarts = [m for m in msgs if isinstance(m, schema.Event) and m.name == "hub_restart"]
    assert len(restarts) == 1
    # Every step is there, or counted as lost: the ranks' queues outlive the hub.
    from pardash.telemetry.report import build_report

    rep = build_report(str(log))
    for r in rep["ranks"]:
        assert r["steps"] + r["lost_messages"] >= 150
    assert max(s.step for s in _steps(log, 0)) == 150
    # The last line and the report say the hub restarted, and when: the lost messages' reason.
    assert "the hub restarted 1x" in out
    assert len(rep["hub_restarts"]) == 1
    from pardash.telemetry.report import render_text

    assert "the hub was restarted 1x, at " in render_text(rep)


@pytest.mark.parametrize(
    ("sig", "code", "job"),
    # (2 ranks once: which of several stopped ranks exits first must not make it the cause)
    [(signal.SIGINT, 130, ["--strategy", "ddp", "--nproc", "2"]), (signal.SIGTERM, 143, ["--strategy", "single"]),
     (signal.SIGHUP, 129, ["--strategy", "single"])],
    ids=["ctrl-c", "sigterm", "sighup"],
)  # fmt: skip
def test_a_job_stopped_with_ctrl_c_or_sigterm_exits_as_the_shell_says_and_blames_no_rank(tmp_path, sig, code, job):
    # Ctrl-C: the launcher stops the job (SIGTERM to torchrun, which passes it on), says so,
    # and exits as the shell would for the signal it took: 128 + 2 for Ctrl-C, 128 + 15 for
    # SIGTERM (not -15's byte, 241). The report of such a run names no rank as the root
    # cause: every rank was stopped. A SIGTERM to a headless launch (`timeout`, a cancelled CI
    # job) stops the job too: nothing is left running. So does a SIGHUP (its terminal closed,
    # an ssh connection dropped), as torchrun stops its workers: the launch died of it without
    # a word (129), the job training on unwatched (review 293). (Its terminal's: not ignored,
    # as nohup would have it.)
    from pardash.telemetry.report import build_report

    log = tmp_path / "run.jsonl"
    p = _start(tmp_path, *job, "--steps", "100000", preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    wait_for(lambda: len(_steps(log, 0)) >= 5, timeout_s=120, poll_s=0.3)
    run = registry.live_runs()[0]
    p.send_signal(sig)
    if sig == signal.SIGTERM:
        # As `timeout` does: the launch, then its process group (here: the launch again). The
        # second, raised as the first unwound, ended the launch with 130 and not a word; or,
        # come as it stopped, said "not waiting" for a job it was waiting for.
        time.sleep(0.05)
        p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == code, err[-2000:]
    # (Ctrl-C is yours; a SIGTERM may be a scheduler's time limit, `timeout`, `docker stop`)
    assert f"stopped {'by you' if sig == signal.SIGINT else f'by {sig.name}'} (exit code {code})" in err
    rep = build_report(str(log))
    assert rep["failure"] is None
    assert not registry.live_runs()
    assert _ended(run["pid"])  # the hub


def _a_rank_deaf_to_sigterm(tmp_path):
    """A headless launch of one rank that ignores SIGTERM, once it runs: (launch, the rank).
    Its telemetry is off: the stop finds the ranks as torchrun's children, and the rank then
    never imports torch."""
    from pathlib import Path

    script = Path(__file__).resolve().parent / "scripts" / "deaf_to_sigterm.py"
    pid_file = tmp_path / "rank.pid"
    p = _start(tmp_path, "--nproc", "1", "--", str(script), str(pid_file), env=pardash_env(PARDASH_TELEMETRY="0"))
    wait_for(pid_file.exists, timeout_s=120, poll_s=0.2)
    return p, psutil.Process(int(pid_file.read_text()))


def test_a_stopped_job_leaves_no_rank_behind_that_sigterm_did_not_end(tmp_path):
    # torchrun starts each rank in a session of its own. A rank that SIGTERM does not end (its
    # own handler waits on a collective that never returns; a rank stopped with SIGSTOP) outlived
    # Ctrl-C: the supervisor's SIGKILL after the grace period went to torchrun's process group
    # alone, torchrun died before its own SIGKILL of the ranks, and the rank ran on, orphaned,
    # holding its memory (a GPU's) with nothing left to say so.
    p, rank = _a_rank_deaf_to_sigterm(tmp_path)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-2000:]
    assert "stopped by you" in err
    wait_for(lambda: _ended(rank.pid), timeout_s=30, poll_s=0.2)


def test_a_second_ctrl_c_while_the_job_stops_says_the_stop_goes_on(tmp_path):
    # Ctrl-C again during "stopping the job..." (a rank slow to end) left the launch at once
    # with 130 and not a word: whether the job was stopped, or would be, went unsaid. Twice in
    # a row, the second came before the launch had told the job to stop: it trained on, unsaid.
    p, rank = _a_rank_deaf_to_sigterm(tmp_path)
    p.send_signal(signal.SIGINT)
    for line in p.stderr:
        if "stopping the job..." in line:
            break
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-2000:]
    said = [line for line in err.splitlines() if line.startswith("pardash: not waiting for the job to stop: ")]
    assert said and "its supervisor kills what is left of it within " in said[0], err[-2000:]
    assert "Traceback" not in err
    wait_for(lambda: _ended(rank.pid), timeout_s=60, poll_s=0.2)


def test_ctrl_c_once_every_rank_has_finished_lets_the_job_end_and_says_it_finished(tmp_path):
    # Every rank had sent its last step and its exit 0, torchrun not ended yet (the ranks'
    # teardown, here held up by an exit hook): Ctrl-C stopped the job and said "stopped by you
    # (exit code 130)" of a job that had succeeded. The job ends by itself now, as it does when
    # q is pressed in the TUI once every rank is done, and its own exit code (0) says so.
    from pathlib import Path

    from pardash.telemetry.report import build_report

    # (One rank: its finish is every rank's, as it is for the TUI's test below.)
    script = Path(__file__).resolve().parent / "scripts" / "lingers_after_its_exit.py"
    go = tmp_path / "go"
    p = _start(tmp_path, "--nproc", "1", "--", str(script), str(go))
    assert p.stdout is not None and p.stderr is not None
    for line in p.stdout:  # the launch itself has seen the rank finish
        if "| 1 finished" in line:
            break
    p.send_signal(signal.SIGINT)
    for line in p.stderr:  # what it does about it (before the fix: "stopping the job...")
        if line.startswith(("pardash: every rank had finished", "pardash: stopping the job")):
            break
    go.touch()  # the ranks' exit hooks end
    out, err = p.communicate(timeout=120)
    assert "pardash: every rank had finished; waiting for torchrun to end (Ctrl-C again stops it)" in line
    assert p.returncode == 0, err[-2000:]
    assert "pardash: done, 1 rank(s), step 5, log " in out
    assert "stopped" not in err
    rep = build_report(str(tmp_path / "run.jsonl"))
    assert rep["exits"] == [] and rep["failure"] is None


def test_a_sigterm_to_a_tui_launch_once_every_rank_has_finished_lets_the_job_end(tmp_path):
    # As headless Ctrl-C or SIGTERM once every rank is done (and `q` in the TUI then): the job
    # ends by itself and the launch exits with its code, 0, where it said "stopped by you" of
    # a job that had succeeded and exited 143.
    import pty
    from pathlib import Path

    script = Path(__file__).resolve().parent / "scripts" / "lingers_after_its_exit.py"
    go, log = tmp_path / "go", tmp_path / "run.jsonl"
    master, slave = pty.openpty()
    p = subprocess.Popen(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "1", "--log", str(log), "--runs-dir", str(tmp_path / "runs"),
         "--", str(script), str(go)],
        stdin=slave, stdout=slave, stderr=slave, cwd=tmp_path, env=pardash_env(TERM="xterm-256color", COLUMNS="120", LINES="40"),
    )  # fmt: skip
    os.close(slave)
    screen = TerminalOutput(master)

    def finished() -> int:
        if not log.exists():
            return 0
        return sum(isinstance(m, schema.Event) and m.name == "exit" and m.code == 0 and m.seq >= 0 for m in load_log(log)[0])

    wait_for(lambda: finished() == 1, timeout_s=120, poll_s=0.2)  # the rank said so itself
    wait_for(lambda: b"finished" in bytes(screen.data), timeout_s=60, poll_s=0.2)  # ... and the viewer has it
    p.send_signal(signal.SIGTERM)
    go.touch()  # the ranks' exit hooks end
    assert p.wait(timeout=120) == 0
    out = screen.done()
    assert b"stopped by you" not in out and b"pardash: done, 1 rank(s), step 5" in out, out[-2000:]


def test_a_failure_under_the_tui_prints_its_traceback_and_names_the_output_file_and_attach_says_it_is_over(tmp_path):
    # The ranks' output goes to its file alone under the TUI: on leaving it, the launch said
    # "rank 1 exited with code 1 at step 3; ..." with no error, no traceback, and nothing said
    # where the output was. (One rank: its failure is the job's, as rank 1's was of two.)
    import pty
    from pathlib import Path

    script = Path(__file__).resolve().parent / "scripts" / "crash.py"
    log = tmp_path / "run.jsonl"
    master, slave = pty.openpty()
    p = subprocess.Popen(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "1", "--log", str(log), "--runs-dir", str(tmp_path / "runs"),
         "--", str(script)],
        stdin=slave, stdout=slave, stderr=slave, cwd=tmp_path, env=pardash_env(TERM="xterm-256color", COLUMNS="120", LINES="40"),
    )  # fmt: skip
    os.close(slave)
    screen = TerminalOutput(master)
    wait_for(lambda: list((tmp_path / "runs").glob("*/result.json")), timeout_s=120, poll_s=0.2)  # the job is over
    # The open TUI keeps its supervisor and hub up after the job's end: a headless attach then
    # printed the last state every second for ever, and `pardash ps` listed the job as live.
    (entry,) = registry.live_runs()
    att = subprocess.run(
        [sys.executable, "-m", "pardash", "attach", "--headless", "--every", "1", entry["run_id"]],
        capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert att.returncode == 1, att.stdout[-2000:] + att.stderr[-2000:]  # (the run failed)
    assert "pardash: the run is over: " in att.stdout and "rank 0 exited with code 1" in att.stdout, att.stdout[-2000:]
    ps = subprocess.run([sys.executable, "-m", "pardash", "ps"], capture_output=True, text=True, timeout=60, env=pardash_env())
    (listed,) = [x for x in ps.stdout.splitlines() if x.startswith(entry["run_id"])]
    assert " ended 1 " in listed, ps.stdout
    os.write(master, b"q")  # the TUI stays up on a failed job until then
    assert p.wait(timeout=60) == 1
    out = screen.done().decode(errors="replace").replace("\r\n", "\n")
    (output,) = (tmp_path / "runs").glob("*/output.log")
    after = out[out.rindex("\x1b[?1049l"):]  # what stays on the terminal once the TUI has gone
    told = after[after.index("pardash: rank 0's error, as it reported it:"):]
    assert 'File "' in told and "in backward" in told and "ValueError: boom in backward" in told, told
    last = told.strip().splitlines()[-1]
    assert last.startswith("pardash: rank 0 exited with code 1 at step 3: ValueError: boom in backward; "), last
    assert f"; output {output.relative_to(tmp_path)}; log " in last or f"; output {output}; log " in last, last
    assert "ValueError: boom in backward" in output.read_text()  # the file named has it


def test_a_rank_that_exits_1_of_the_stops_sigterm_is_stopped_not_failed(tmp_path):
    # A script whose SIGTERM handler ends it with sys.exit(1), no error said: Ctrl-C read
    # "stopped by you after the job failed: rank 0 exited with code 1", a failure the stop made.
    from pathlib import Path

    script = Path(__file__).resolve().parent / "scripts" / "exits_1_on_sigterm.py"
    log = tmp_path / "run.jsonl"
    p = _start(tmp_path, "--nproc", "1", "--", str(script))
    wait_for(lambda: len(_steps(log, 0)) >= 5, timeout_s=120, poll_s=0.2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-2000:]
    exits = [m for m in load_log(log)[0] if isinstance(m, schema.Event) and m.name == "exit"]
    # The exit its stop led to is the stop: the launcher's note stands ("stopped by you"), not
    # the rank's own word of code 1 (which the hub would take over the note).
    assert [(m.code, m.seq, m.message) for m in exits] == [(-15, -1, "stopped by Ctrl-C at the launch")], exits
    # Stopped, not failed: never "stopped by you after the job failed: rank 0 exited with code 1".
    # A loaded host may add " as it hung after step N": its rank unheard for 3 s (silent) before
    # the stop was said (a CI run; the rank held 4 s with SIGSTOP before the Ctrl-C reads so).
    assert re.search(r"pardash: stopped by you( as it hung[^;(]*)? \(exit code 130\); log ", err), err[-2000:]


def _launch_in_a_terminal(tmp_path, *, controlling: bool = False):
    """A TUI launch of the bundled trainer in a pty, once its ranks have stepped: (process,
    the terminal's master end, what it shows, the log). ``controlling``: the pty is the
    launch's controlling terminal, as a shell's is (its closing sends SIGHUP)."""
    import fcntl
    import pty
    import termios

    def own_terminal() -> None:
        # (SIGHUP as a shell leaves it: a suite run under nohup hands its ignoring down, and a
        # launch started ignoring SIGHUP rightly ignores it; the tests of SIGHUP then hung)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        if controlling:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    master, slave = pty.openpty()
    log = tmp_path / "run.jsonl"
    p = subprocess.Popen(
        [sys.executable, "-m", "pardash", "launch", "--strategy", "single", "--steps", "100000", "--log", str(log),
         "--runs-dir", str(tmp_path / "runs")],
        stdin=slave, stdout=slave, stderr=slave, cwd=tmp_path, env=pardash_env(TERM="xterm-256color", COLUMNS="120", LINES="40"),
        preexec_fn=own_terminal,
    )  # fmt: skip
    os.close(slave)
    screen = TerminalOutput(master)
    wait_for(lambda: len(_steps(log)) >= 5, timeout_s=120, poll_s=0.2)
    return p, master, screen, log


def test_a_launch_in_the_tui_whose_terminal_closes_stops_the_job_and_exits_129(tmp_path):
    # Its terminal closed (a tmux window killed, an ssh connection dropped: SIGHUP) ended the
    # TUI's launch alone, the job training on with nobody watching it, where a headless launch's
    # stopped (review 317); then the launch exited 1 on writing to the terminal gone, before it
    # waited for the job (review 322).
    p, master, screen, log = _launch_in_a_terminal(tmp_path, controlling=True)
    (entry,) = registry.live_runs()
    os.close(master)  # the terminal goes: the kernel hangs up its session
    assert p.wait(timeout=120) == 129
    wait_for(lambda: not psutil.pid_exists(entry["supervisor_pid"]), timeout_s=60)
    exits = [m for m in load_log(log)[0] if isinstance(m, schema.Event) and m.name == "exit"]
    assert exits and all(m.code == -15 and m.message == "stopped by SIGHUP" for m in exits), exits
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "result.json").read_text())["code"] == 129


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup"])
def test_a_sigterm_to_a_launch_in_the_tui_stops_the_job_and_gives_the_terminal_back(tmp_path, sig):
    # Only the headless launch took SIGTERM: the TUI's died with 143 under a frozen screen (the
    # terminal never left its alternate screen) while the job ran on, unwatched and unsaid.
    p, master, screen, log = _launch_in_a_terminal(tmp_path)
    (entry,) = registry.live_runs()
    p.send_signal(sig)
    assert p.wait(timeout=120) == 128 + sig
    out = screen.done()
    assert b"\x1b[?1049h" in out and out.rindex(b"\x1b[?1049l") > out.rindex(b"\x1b[?1049h")  # the screen given back
    wait_for(lambda: not psutil.pid_exists(entry["supervisor_pid"]), timeout_s=60)
    msgs, _ = load_log(log)
    exits = [m for m in msgs if isinstance(m, schema.Event) and m.name == "exit"]
    assert exits and all(m.code == -15 and m.message == f"stopped by {signal.Signals(sig).name}" for m in exits), exits


def test_a_suspended_headless_launch_says_its_job_trains_on(tmp_path):
    # Ctrl-Z suspended the launch alone (its job runs in a session of its own) and said nothing:
    # under torchrun alone it pauses the workers too, so a user read the job as paused (review 317).
    import threading

    log = tmp_path / "run.jsonl"
    def as_a_shells_job() -> None:
        # A process group of its own in the test's session, as a shell's job is, with Ctrl-Z's
        # default: the kernel discards a stop sent to an orphaned group's process (the test
        # runner's own group under a CI with no job control), and the runner may ignore it.
        os.setpgid(0, 0)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)

    p = _start(tmp_path, "--strategy", "single", "--steps", "100000", stderr=subprocess.STDOUT, preexec_fn=as_a_shells_job)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True).start()
    try:
        wait_for(lambda: len(_steps(log)) >= 3, timeout_s=120, poll_s=0.2)
        # (its progress printed: the launch follows the job, its Ctrl-Z handled; before, a
        # Ctrl-Z of the start stops it as any process)
        wait_for(lambda: any(line.startswith("[") for line in lines), timeout_s=60, poll_s=0.1)
        p.send_signal(signal.SIGTSTP)
        proc = psutil.Process(p.pid)
        wait_for(lambda: proc.status() == psutil.STATUS_STOPPED, timeout_s=30, poll_s=0.1)
        trained = len(_steps(log))
        wait_for(lambda: len(_steps(log)) > trained + 3, timeout_s=60, poll_s=0.2)  # the job trains on
        os.kill(p.pid, signal.SIGCONT)
        wait_for(lambda: proc.status() != psutil.STATUS_STOPPED, timeout_s=30, poll_s=0.1)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    said = "pardash: this launch is suspended; the job trains on (`fg` brings its progress back, `pardash attach "
    assert p.returncode == 130, "".join(lines)[-2000:]
    assert any(line.startswith(said) for line in lines), "".join(lines)[-2000:]


def test_a_stop_chosen_in_the_tui_exits_130_as_ctrl_c_does_headless(tmp_path):
    # q (or Ctrl-C), then Stop, in the TUI exited 143 (torchrun's code for the SIGTERM that
    # stopped it) where a headless Ctrl-C exits 130, as the README says of Ctrl-C.
    p, master, screen, log = _launch_in_a_terminal(tmp_path)
    os.write(master, b"q")
    wait_for(lambda: b"Stop the job" in bytes(screen.data), timeout_s=60, poll_s=0.2)
    os.write(master, b"s")
    assert p.wait(timeout=120) == 130
    out = screen.done()
    assert b"stopped by you" in out and b"(exit code 130)" in out, out[-2000:]


def test_a_stop_chosen_in_an_attached_tui_ends_the_launch_with_130(tmp_path):
    # Stop chosen in `pardash attach`'s TUI reached the launch's supervisor as a SIGTERM: the
    # headless launch exited 143, as if killed, where a person's stop (Ctrl-C, Stop in its
    # own TUI) is 130 (the README's word).
    import pty

    log = tmp_path / "run.jsonl"
    p = _start(tmp_path, "--strategy", "single", "--steps", "100000")
    wait_for(lambda: len(_steps(log)) >= 3, timeout_s=120, poll_s=0.2)
    (entry,) = registry.live_runs()
    master, slave = pty.openpty()
    viewer = subprocess.Popen(
        [sys.executable, "-m", "pardash", "attach", entry["run_id"]], stdin=slave, stdout=slave, stderr=slave,
        cwd=tmp_path, env=pardash_env(TERM="xterm-256color", COLUMNS="120", LINES="40"),
    )  # fmt: skip
    os.close(slave)
    screen = TerminalOutput(master)
    wait_for(lambda: b"rank" in bytes(screen.data), timeout_s=60, poll_s=0.2)
    os.write(master, b"q")
    wait_for(lambda: b"Stop the job" in bytes(screen.data), timeout_s=60, poll_s=0.2)
    os.write(master, b"s")
    assert viewer.wait(timeout=120) == 0
    assert f"stopped run {entry['run_id']}".encode() in screen.done()
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-2000:]
    # Whose stop it was: the viewer's, not the person's at the launch's terminal ("stopped by
    # you" told them they had stopped it).
    by = f"by a viewer (pardash attach, pid {viewer.pid})"
    assert f"stopped {by} (exit code 130)" in out + err, (out + err)[-2000:]
    exits = [m for m in load_log(log)[0] if isinstance(m, schema.Event) and m.name == "exit"]
    assert exits and all(m.code == -15 and m.message == f"stopped {by}" for m in exits), exits
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "result.json").read_text())["stopper"] == by
    assert not (run_dir / "stop-request.json").exists()  # (said in result.json now)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_a_sigterm_as_the_launch_starts_leaves_nothing_running(tmp_path, sig, code):
    # A SIGTERM before the launch had put in its handler (while the job started) ended it and
    # left the supervisor, the hub, torchrun and the ranks training, unwatched. A Ctrl-C then
    # stopped them all but said nothing: the launch ended with 130 after its first line.
    me = psutil.Process()
    # (this process's own children from before: the multiprocessing resource tracker an earlier
    # test's torch.multiprocessing.spawn started lives as long as this process)
    before = {c.pid for c in me.children(recursive=True)}
    p = _start(tmp_path, "--strategy", "single", "--steps", "3000")
    assert p.stdout.readline().startswith("pardash: run ")  # said just before the job starts
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == code, err[-2000:]
    assert "pardash: stopped before the job started" in err or "pardash: stopped by you" in err, err[-2000:]
    wait_for(lambda: not registry.live_runs(), timeout_s=60)
    wait_for(lambda: not [c for c in me.children(recursive=True) if c.pid not in before and c.is_running() and c.status() != psutil.STATUS_ZOMBIE], timeout_s=60)


def test_viewer_killed_the_job_and_log_go_on(tmp_path):
    log = tmp_path / "run.jsonl"
    # The rank waits after its step 10 until the new viewer follows the run (a run of 120
    # steps stretched to 6 s for it to start in was over first on a loaded machine).
    args, go = _gated(tmp_path, 40, at=10)
    p = _start(tmp_path, *args)
    wait_for(lambda: len(_steps(log, 0)) >= 10, timeout_s=120, poll_s=0.3)
    entry = registry.live_runs()[0]
    run_id = entry["run_id"]
    p.kill()  # the foreground (viewer) dies; the supervisor, hub and ranks are in another session
    p.wait()
    # Attach again: the new viewer follows the run to its end, then ends by itself.
    said = tmp_path / "attach.out"
    with open(said, "w") as out:
        att = subprocess.Popen([sys.executable, "-m", "pardash", "attach", "--headless", "--every", "1", run_id],
                               stdout=out, stderr=subprocess.PIPE, text=True, env=pardash_env(), cwd=tmp_path)  # fmt: skip
    try:
        wait_for(lambda: re.search(r"\bstep 10\b", said.read_text()), timeout_s=120, poll_s=0.2)  # it follows the run
        go.touch()
        _, err = att.communicate(timeout=240)
    finally:
        if att.poll() is None:
            att.kill()
            att.wait()
    assert att.returncode == 0, err[-2000:]
    text = said.read_text()
    assert re.search(r"\bstep 40\b", text) and "pardash: the run is over: 1 finished" in text, text[-2000:]
    wait_for(lambda: any(s.step == 40 for s in _steps(log, 0)), timeout_s=180, poll_s=0.5)
    result = tmp_path / "runs" / run_id / "result.json"
    wait_for(result.exists, timeout_s=60)
    assert json.loads(result.read_text())["code"] == 0
    # ... and the supervisor, its viewer gone, ends with the job
    supervisor = entry["supervisor_pid"]
    wait_for(lambda: _ended(supervisor), timeout_s=60)
    # In the order the rank sent them (the log's is the hub's: steps its heartbeat thread sent
    # for the loop, on a socket of their own, can be taken after the loop's next ones).
    assert [s.step for s in sorted(_steps(log, 0), key=lambda s: s.seq)] == list(range(1, 41))


def test_a_torchrun_killed_outright_has_its_orphaned_ranks_stopped_and_says_so(tmp_path):
    # The OOM killer (or a `kill -9`) takes torchrun alone: its ranks, orphaned, trained on to
    # the end with nobody to watch them, while the launch said "2 exited", "the job failed
    # with exit code 137", and stopped the hub.
    log = tmp_path / "run.jsonl"
    p = _start(tmp_path, "--strategy", "single", "--steps", "100000")
    wait_for(lambda: len(_steps(log, 0)) >= 3, timeout_s=120, poll_s=0.2)
    (entry,) = registry.live_runs()
    (torchrun,) = [c for c in psutil.Process(entry["supervisor_pid"]).children() if "pardash.trainer.torchrun" in c.cmdline()]
    ranks = torchrun.children()
    assert ranks
    torchrun.kill()
    out, err = p.communicate(timeout=120)
    assert p.returncode == 137, out[-2000:] + err[-2000:]
    assert "pardash: torchrun was killed (SIGKILL); stopping its 1 process(es) here, which nothing else would" in err
    last = (out + err).rstrip().splitlines()[-1]
    assert last.startswith("pardash: torchrun itself was killed (SIGKILL) and its ranks were stopped at step "), last
    assert not [r for r in ranks if r.is_running() and r.status() != psutil.STATUS_ZOMBIE]
    exits = [m for m in load_log(log)[0] if isinstance(m, schema.Event) and m.name == "exit"]
    assert exits and all(m.code == -15 for m in exits), exits


def test_unwritable_log_warns_and_training_goes_on(tmp_path):
    from pardash.telemetry.recorder import Recorder

    d = tmp_path / "logs"
    d.mkdir()
    rec = Recorder(d / "run.jsonl")
    rec.write(schema.Step(rank=0, step=1))
    rec.flush()
    assert rec.error == ""
    # The disk "fills": writes fail; the recorder keeps the lines and says why.
    rec._fh.close()
    rec._fh = open("/dev/full", "ab", buffering=0)
    rec.write(schema.Step(rank=0, step=2))
    rec.flush()
    assert "cannot write" in rec.error
    # Space comes back: the kept lines are written, in order.
    rec._fh = None
    rec.write(schema.Step(rank=0, step=3))
    rec.flush()
    assert rec.error == ""
    rec.close()
    assert [m.step for m in load_log(d / "run.jsonl")[0]] == [1, 2, 3]


def test_lines_dropped_while_the_log_could_not_be_written_are_counted_and_said(tmp_path, monkeypatch):
    # Past the bound kept in memory the oldest lines went without a count: the TUI said lost 0,
    # and report's "log ends early" blamed the run or the hub.
    from pardash.telemetry import recorder
    from pardash.telemetry.recorder import Recorder

    one = len(msgspec.json.encode(schema.Step(rank=0, step=10))) + 1
    monkeypatch.setattr(recorder, "MAX_UNWRITTEN_BYTES", 3 * one)
    path = tmp_path / "run.jsonl"
    rec = Recorder(path)
    rec._fh.close()
    rec._fh = open("/dev/full", "ab", buffering=0)
    opener = recorder._open_log

    def full(_path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(recorder, "_open_log", full)
    for step in range(10, 16):
        rec.write(schema.Step(rank=0, step=step))
        rec.flush()
    assert rec.error.endswith("(3 lines dropped so far: the newest 0 MiB are kept)"), rec.error
    monkeypatch.setattr(recorder, "_open_log", opener)  # room again
    rec.write(schema.Step(rank=0, step=16))
    rec.flush()
    assert rec.error == "" and rec.notices == deque([f"log {path}: 3 lines were dropped while it could not be written "
                                                     "(the hub kept its newest lines, which are written now)"])  # fmt: skip
    rec.close()
    assert [m.step for m in load_log(path)[0] if isinstance(m, schema.Step)] == [13, 14, 15, 16]


# One launch serves the three tests of a supervisor killed outright mid-run, the job then left
# to end by itself: what the launch says and writes (its outcome, result.json, the hub's end),
# that the ranks write on after the kill (their streams were a pipe to the supervisor), and that
# a crash after the kill, which torchrun restarts the job after, is followed through to the
# restarted job's end. Each launch of them cost seconds of a 2-core machine, for the same fault.
SUPERVISOR_KILLED_STEPS = 30
SUPERVISOR_KILLED_CRASH_AT = 10
SUPERVISOR_KILLED_GROUP = pytest.mark.xdist_group("faults_supervisor_killed")


class SupervisorKilledRun:
    """A headless launch (--max-restarts 1) of chatty.py on one rank whose supervisor
    the fixture killed with SIGKILL after step 5, the rank waiting there until it was dead and
    the hub had said so, then writing on to its crash at step SUPERVISOR_KILLED_CRASH_AT, the
    job restarted by torchrun and trained to its end: the launch's output and exit code, its
    registry entry, torchrun's process, and what held as it returned."""

    dir: Path
    log: Path
    registry: Path
    entry: dict
    job: list
    out: str
    err: str
    returncode: int
    ranks_ended_at_return: dict[int, bool]


@pytest.fixture(scope="module")
def supervisor_killed_run(tmp_path_factory):
    # The module's launch outlives each test's own registry (conftest's _private_registry, set
    # up after this), so it has one of its own, which the tests read the run's entries from.
    run = SupervisorKilledRun()
    run.dir = tmp_path_factory.mktemp("supervisor-killed")
    run.log, run.registry = run.dir / "run.jsonl", run.dir / "registry"
    # The rank crashes when the fixture says, once the hub has found its supervisor gone: the
    # trainer's --inject-crash 0@20, 15 steps after the 5th the test waited for, had crashed
    # before the kill every time (a restart seen by a live supervisor: not these tests' case).
    args, go = _gated(run.dir, SUPERVISOR_KILLED_STEPS, at=5)
    args = ["--max-restarts", "1", *args, str(SUPERVISOR_KILLED_CRASH_AT)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PARDASH_REGISTRY_DIR", str(run.registry))
        p = _start(run.dir, *args, env=pardash_env())
        try:
            wait_for(lambda: len(_steps(run.log, 0)) >= 5, timeout_s=120, poll_s=0.1)
            (run.entry,) = registry.live_runs()
            run.job = psutil.Process(run.entry["supervisor_pid"]).children()  # (torchrun)
            os.kill(run.entry["supervisor_pid"], signal.SIGKILL)
            wait_for(lambda: _ended(run.entry["supervisor_pid"]), timeout_s=30)  # (its end of the job's streams closed)
            # ... and the hub has seen it gone: the job then goes on without it, not ending first
            gone = f"supervisor (pid {run.entry['supervisor_pid']}) is gone"
            wait_for(lambda: any(isinstance(m, schema.Event) and m.name == "warning" and gone in (m.message or "")
                                 for m in load_log(run.log)[0]), timeout_s=60, poll_s=0.2)  # fmt: skip
            go.touch()
            run.out, run.err = p.communicate(timeout=300)
            # At once, as the launch returns: a later look would find any process ended.
            pids = {m.pid for m in load_log(run.log)[0] if isinstance(m, schema.Hello)}
            run.ranks_ended_at_return = {pid: _ended(pid) for pid in pids}
        finally:
            go.touch()  # a failed wait leaves the rank to end by itself, and its hub with it
            if p.poll() is None:
                p.kill()
                p.communicate()
    run.returncode = p.returncode
    return run


@SUPERVISOR_KILLED_GROUP
def test_a_supervisor_killed_outright_leaves_the_job_followed_to_its_end_and_no_hub_behind(supervisor_killed_run, monkeypatch):
    # SIGKILL of the launcher's supervisor: torchrun and the ranks train on. The launch does not
    # call that a failed job: it says what happened, follows the ranks to their end and exits
    # with the run's outcome; the hub, unsupervised, stops once every rank is done.
    run = supervisor_killed_run
    entry, out, err, log = run.entry, run.out, run.err, run.log
    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(run.registry))
    assert "the launcher's supervisor was killed by SIGKILL before the job ended" in err
    assert "failed" not in err, err[-2000:]
    assert run.returncode == 0, err[-2000:]
    assert "the run is over: 1 finished" in out
    wait_for(lambda: _ended(entry["pid"]), timeout_s=30)
    assert not registry.live_runs()
    msgs, _ = load_log(log)
    assert max(m.step for m in msgs if isinstance(m, schema.Step)) == SUPERVISOR_KILLED_STEPS
    said = [m.message for m in msgs if isinstance(m, schema.Event) and m.name == "warning" and m.rank == -1]
    assert any(f"supervisor (pid {entry['supervisor_pid']}) is gone" in m for m in said)
    # Its result.json, which the supervisor would have written as the job ended, is written by
    # the launch that followed it there (there was none: `pardash ps` had no end to show).
    result = json.loads((Path(entry["run_dir"]) / "result.json").read_text())
    assert {k: result[k] for k in ("run_id", "code", "stopped", "log", "supervisor_gone")} == {
        "run_id": entry["run_id"], "code": 0, "stopped": False, "log": str(log), "supervisor_gone": "killed by SIGKILL"}  # fmt: skip
    assert "hub stopped" in [m for m in msgs if isinstance(m, schema.Event)][-1].message


def test_a_tui_launch_whose_supervisor_was_killed_ends_with_the_runs_outcome_and_its_result(tmp_path):
    # Under the TUI, the supervisor killed outright mid-run and every rank then finished: `q`
    # said "its ranks may train on without it" of a finished job, exited 1 and wrote no
    # result.json (headless followed the job to its end and wrote it).
    import pty

    args, go = _gated(tmp_path, 10, 5)
    log = tmp_path / "run.jsonl"
    master, slave = pty.openpty()
    p = subprocess.Popen(
        [sys.executable, "-m", "pardash", "launch", "--log", str(log), "--runs-dir", str(tmp_path / "runs"), *args],
        stdin=slave, stdout=slave, stderr=slave, cwd=tmp_path, env=pardash_env(TERM="xterm-256color", COLUMNS="120", LINES="40"),
    )  # fmt: skip
    os.close(slave)
    screen = TerminalOutput(master)
    wait_for(lambda: len(_steps(log, 0)) >= 5, timeout_s=120, poll_s=0.2)
    (entry,) = registry.live_runs()
    os.kill(entry["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: any(isinstance(m, schema.Event) and m.name == "warning" and "is gone" in m.message for m in load_log(log)[0]),
             timeout_s=60, poll_s=0.2)  # fmt: skip
    go.touch()
    wait_for(lambda: any(isinstance(m, schema.Event) and m.name == "exit" and m.code == 0 for m in load_log(log)[0]),
             timeout_s=120, poll_s=0.2)  # fmt: skip
    wait_for(lambda: b"finished" in bytes(screen.data), timeout_s=60, poll_s=0.2)
    os.write(master, b"q")
    code = p.wait(timeout=120)
    out = screen.done().decode(errors="replace")
    assert code == 0, out[-2000:]
    assert "the launcher's supervisor was killed by SIGKILL before the job ended; the job ended by itself" in out, out[-2000:]
    assert "pardash: done, 1 rank(s), step 10" in out and "may train on" not in out, out[-2000:]
    result = json.loads((Path(entry["run_dir"]) / "result.json").read_text())
    assert (result["code"], result["stopped"], result["supervisor_gone"]) == (0, False, "killed by SIGKILL")


def test_a_launch_whose_supervisor_was_killed_still_stops_the_job_at_ctrl_c(tmp_path):
    # SIGKILL of the supervisor, then Ctrl-C: the launch said "stopped watching; the ranks may
    # still run" and left torchrun and its ranks training, with no launcher able to stop them
    # (an attach's Stop sent SIGINT to the dead supervisor's pid and said "stopped run").
    script = os.path.join(os.path.dirname(__file__), "scripts", "chatty.py")
    log = tmp_path / "run.jsonl"
    said = tmp_path / "launch.err"
    with open(said, "w") as err_file:
        p = _start(tmp_path, "--nproc", "1", "--", script, "100000", stderr=err_file)
    wait_for(lambda: len(_steps(log, 0)) >= 5, timeout_s=120, poll_s=0.1)
    (entry,) = registry.live_runs()
    os.kill(entry["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: _ended(entry["supervisor_pid"]), timeout_s=30)
    job = jobprocs.job_processes(entry["supervisor_pid"], entry["run_id"])
    assert len(job) >= 2  # torchrun and its rank, training on
    # The launch has seen its supervisor gone (it says so) before it is stopped.
    wait_for(lambda: "train on without it" in said.read_text(), timeout_s=60, poll_s=0.1)
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=120)
    err = said.read_text()
    assert p.returncode == 130, err[-2000:]
    assert "stopped by you (exit code 130)" in err, err[-2000:]
    assert all(_ended(q.pid) for q in job)
    assert not jobprocs.job_processes(entry["supervisor_pid"], entry["run_id"])
    # ... and its hub: it wrote the log to its end and stopped (it waited for a restart). The
    # log says the rank was stopped (it read "no exit").
    assert _ended(entry["pid"])
    events = [m for m in load_log(log)[0] if isinstance(m, schema.Event)]
    assert "hub stopped" in events[-1].message
    assert [(m.rank, m.code, m.message) for m in events if m.name == "exit"] == [(0, -15, "stopped by Ctrl-C at the launch (its supervisor was gone)")]
    result = json.loads((Path(entry["run_dir"]) / "result.json").read_text())  # (written from the launch, which stopped it)
    assert (result["code"], result["stopped"], result["stopper"], result["supervisor_gone"]) == (130, True, "by you", "killed by SIGKILL")


def test_a_pid_the_system_gave_another_program_is_no_supervisor(tmp_path):
    # attach stops a launched job through its supervisor's pid from the registry: a supervisor
    # killed outright leaves that pid free for the system to give another program.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not jobprocs.supervisor_alive(other.pid, "20261204-000000-abcd")
        assert not jobprocs.job_processes(other.pid, "20261204-000000-abcd")
        assert jobprocs.stop_unsupervised(other.pid, "20261204-000000-abcd") == 0
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


@SUPERVISOR_KILLED_GROUP
def test_ranks_that_write_on_after_their_supervisor_was_killed_train_on(supervisor_killed_run):
    # torchrun's stderr was a pipe to the supervisor: once it was killed, a rank's next line
    # on stderr (a warning, a logger, a traceback) failed with EPIPE and ended the run.
    # The rank waits after its step 5 until its supervisor is dead, then writes on: 5 lines on
    # each stream and its crash's traceback, then the restarted rank's 30 (the kill landed at
    # step 7 of 300 of a run given no wait, or after its end).
    run = supervisor_killed_run
    out, err, log = run.out, run.err, run.log
    assert run.returncode == 0, out[-2000:] + err[-2000:]
    assert "the run is over: 1 finished" in out
    assert max(s.step for s in _steps(log, 0)) == SUPERVISOR_KILLED_STEPS
    # It wrote after the kill: its lines of the steps after the wait, on stdout (the job's
    # output file) and on stderr (torchrun's, in a file of its own once headless), the first
    # attempt's to its crash (said twice: the restarted rank said them again) and the rest.
    (run_dir,) = (run.dir / "runs").iterdir()
    for written in (run_dir / "output.log", run_dir / "torchrun" / "stderr.log"):
        lines = written.read_text().splitlines()
        assert all(lines.count(f"rank 0 step {step}") == 2 for step in range(6, SUPERVISOR_KILLED_CRASH_AT + 1)), (written.name, lines[-20:])
        assert all(f"rank 0 step {step}" in lines for step in range(6, SUPERVISOR_KILLED_STEPS + 1)), (written.name, lines[-20:])
    assert f"RuntimeError: crashed after step {SUPERVISOR_KILLED_CRASH_AT}, as told" in (run_dir / "torchrun" / "stderr.log").read_text()
    msgs, _ = load_log(log)
    # No error but the crash the fixture asked for (an EPIPE would be one of its own).
    errors = [m.message for m in msgs if isinstance(m, schema.Event) and m.name == "error"]
    assert errors == [f"RuntimeError: crashed after step {SUPERVISOR_KILLED_CRASH_AT}, as told"], errors
    # The launch ends once the ranks have: it returned as they said they finished, their
    # processes (GPU memory and all) still there for the next command.
    pids = {m.pid for m in msgs if isinstance(m, schema.Hello)}
    assert len(pids) == 2 and all(run.ranks_ended_at_return[pid] for pid in pids)  # (the first attempt, the restarted one)


def test_a_launch_whose_output_is_gone_still_restarts_the_hub_and_sees_the_job_out(tmp_path):
    # The terminal closed (ssh dropped: EIO) or the pipe's reader exited (`| head`: EPIPE): the
    # supervisor died at its next note ("restarting the hub"), so the log ended there, and the
    # ranks, writing to the same pipe, died at their next line.
    log = tmp_path / "run.jsonl"
    script = os.path.join(os.path.dirname(__file__), "scripts", "chatty.py")
    p = _start(tmp_path, "--nproc", "1", "--", script, "300")
    wait_for(lambda: len(_steps(log, 0)) >= 5, timeout_s=120, poll_s=0.1)
    p.stdout.close()
    p.stderr.close()
    (entry,) = registry.live_runs()
    os.kill(entry["pid"], signal.SIGKILL)  # the hub: the supervisor says so, and restarts it
    assert p.wait(timeout=240) == 0
    msgs, _ = load_log(log)
    assert [m for m in msgs if isinstance(m, schema.Event) and m.name == "hub_restart"]
    assert max(s.step for s in _steps(log, 0)) == 300
    assert "rank 0 step 300" in (tmp_path / "runs").glob("*/output.log").__next__().read_text()


@SUPERVISOR_KILLED_GROUP
def test_a_job_left_unsupervised_is_followed_through_torchruns_restart(supervisor_killed_run):
    # The supervisor killed, then a rank crashes and torchrun starts the job again: the launch
    # said "the run is over ... exited with code 1" and exited 1 while the restarted job went
    # on to finish. The job lives while its hub does; the hub waits for the restart.
    # (The fixture's rank crashes once the hub has found its supervisor gone.)
    run = supervisor_killed_run
    out, err, log = run.out, run.err, run.log
    assert run.job
    assert run.returncode == 0, out[-2000:] + err[-2000:]
    assert "the run is over: 1 finished" in out
    # torchrun ends once its rank has (the launch said the run over at the rank's last word, and
    # a loaded machine's torchrun was still ending when the test did)
    # (ended or a zombie: psutil.wait_procs counts an orphan that init has not reaped yet alive)
    wait_for(lambda: all(_ended(p.pid) for p in run.job), timeout_s=60)
    msgs, _ = load_log(log)
    assert sorted({m.restart for m in msgs if isinstance(m, schema.Hello)}) == [0, 1]
    assert max(m.step for m in msgs if isinstance(m, schema.Step)) == SUPERVISOR_KILLED_STEPS
    gone = f"supervisor (pid {run.entry['supervisor_pid']}) is gone"

    def said_gone(m) -> bool:
        return isinstance(m, schema.Event) and m.name == "warning" and m.rank == -1 and gone in (m.message or "")

    order = [m.name for m in msgs if said_gone(m) or isinstance(m, schema.Event) and m.name == "error"]
    assert order == ["warning", "error"]  # the crash came to a job left unsupervised


def test_restarts_of_a_script_that_fails_before_its_first_step_are_counted(tmp_path):
    # A crash loop at start-up (a bad config): torchrun ran the script 3 times, but with no
    # hello (it said its restart count) the log held no restart, the last line said none,
    # and the three attempts' exits read as one (the launcher's notes of the later ones were
    # taken for the first's again and dropped).
    (tmp_path / "early.py").write_text('raise ValueError("bad config")\n')
    p = _start(tmp_path, "--nproc", "1", "--max-restarts", "2", "--", "early.py")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 1, out[-2000:] + err[-2000:]
    assert "[restart] rank 0 restarted by torchrun (restart 1)" in out
    assert "[restart] rank 0 restarted by torchrun (restart 2)" in out
    last = (out + err).rstrip().splitlines()
    assert any(line.startswith("pardash: rank 0 exited with code 1: ValueError: bad config; torchrun restarted the job 2x;") for line in last), out + err
    msgs, _ = load_log(tmp_path / "run.jsonl")
    events = [m for m in msgs if isinstance(m, schema.Event) and m.name in ("restart", "exit")]
    assert [m.code for m in events if m.name == "restart"] == [1, 2]
    # The launcher's note of an exit (seq -1) may reach the hub before the rank's own word of
    # it (two sockets): the log keeps both, and they are one exit (RunState.apply says it once)
    said = [m.name for i, m in enumerate(events) if not (i and m.name == "exit" and m.seq >= 0 and events[i - 1].name == "exit" and events[i - 1].seq < 0)]
    assert said == ["exit", "restart", "exit", "restart", "exit"]
    assert out.count("[exit] rank 0 exited with code 1") == 3, out
    rep = build_report(str(tmp_path / "run.jsonl"))
    assert [r["restarts"] for r in rep["ranks"]] == [2]
    assert len(rep["recovered"]) == 2


def test_a_log_whose_folder_is_removed_mid_run_is_written_again_whole(tmp_path):
    # `rm -rf` of the run's folder while it trains: the hub still holds the deleted file open,
    # so it writes it again at its path, whole, and says so; nothing is lost.
    import shutil

    logs = tmp_path / "logs"
    log = logs / "run.jsonl"
    # The rank waits after its step 5 until the hub has written the log again (a run of 200
    # steps left the rest to chance: the deletion had to be seen before the run's end).
    args, go = _gated(tmp_path, 40, at=5)
    cmd = [sys.executable, "-m", "pardash", "launch", "--headless", "--log", str(log), "--runs-dir", str(tmp_path / "runs"),
           "--every", "1", *args]  # fmt: skip
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env(), cwd=tmp_path)
    wait_for(lambda: len(_steps(log, 0)) >= 5, timeout_s=120, poll_s=0.2)
    shutil.rmtree(logs)
    wait_for(lambda: log.exists() and b"written again at its path" in log.read_bytes(), timeout_s=60, poll_s=0.2)
    go.touch()
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, err[-2000:]
    msgs, stats = load_log(log)
    assert not stats.skipped_total
    assert sorted(m.step for m in msgs if isinstance(m, schema.Step)) == list(range(1, 41))
    said = [m.message for m in msgs if isinstance(m, schema.Event) and m.name == "warning" and m.rank == -1]
    assert len(said) == 1 and "was deleted while the hub wrote it: written again at its path" in said[0]
    assert "written again at its path" in out  # said as it happened (a deletion in the run's last moments is said in the log only)


def test_a_launch_names_the_file_its_log_went_on_in(tmp_path):
    # The log moved away and an empty file put in its place (a hand-made rotation): the hub goes
    # on beside it, and the launch's last line names that file, not the empty one.
    # A hub the launcher restarts then carries on in that file too (it appended to the file at
    # the path, splitting the run in two).
    # The rank waits after its step 5 until the restarted hub is up (a run of 300 steps left
    # the rotation and the restart to be done before its end).
    log = tmp_path / "run.jsonl"
    args, go = _gated(tmp_path, 40, at=5)
    p = _start(tmp_path, *args)
    wait_for(lambda: len(_steps(log, 0)) >= 5, timeout_s=120, poll_s=0.2)
    os.rename(log, tmp_path / "old.jsonl")
    log.write_bytes(b"")
    wait_for(lambda: list(tmp_path.glob("run.restored-*.jsonl")), timeout_s=60)
    (beside,) = tmp_path.glob("run.restored-*.jsonl")
    wait_for(lambda: registry.live_runs() and registry.live_runs()[0]["log"] == str(beside), timeout_s=30)
    killed = registry.live_runs()[0]["pid"]
    os.kill(killed, signal.SIGKILL)

    def restarted() -> bool:
        runs = registry.live_runs()
        return bool(runs) and runs[0]["pid"] != killed and runs[0]["log"] == str(beside)

    wait_for(restarted, timeout_s=60, poll_s=0.2)
    go.touch()
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, err[-2000:]
    assert "restarting it" in err
    assert out.strip().splitlines()[-1].endswith(f"log {beside}")
    from pardash.telemetry.report import build_report

    for r in build_report(str(beside))["ranks"]:
        assert r["steps"] + r["lost_messages"] >= 40
    assert log.read_bytes() == b""


def test_a_log_whose_path_another_file_took_goes_on_beside_it(tmp_path, monkeypatch):
    from pardash.telemetry import recorder
    from pardash.telemetry.recorder import Recorder

    monkeypatch.setattr(recorder, "CHECK_PATH_S", 0.0)
    path = tmp_path / "run.jsonl"
    rec = Recorder(path)
    rec.write(schema.Step(rank=0, step=1))
    rec.flush()
    path.unlink()
    path.write_text("somebody else's\n")
    rec.write(schema.Step(rank=0, step=2))
    rec.flush()
    rec.close()
    assert path.read_text() == "somebody else's\n"  # never overwritten
    assert rec.path != path and rec.path.parent == path.parent
    msgs = load_log(rec.path)[0]
    assert [m.step for m in msgs if isinstance(m, schema.Step)] == [1, 2]
    # No frame carried the notice (this recorder had no hub): it is the log's last line.
    (said,) = [m for m in msgs if isinstance(m, schema.Event)]
    assert said.name == "warning" and f"writes it on at {rec.path}" in said.message and not rec.notices


def test_a_log_whose_folder_became_a_file_goes_on_in_the_spare_folder_or_says_it_is_lost(tmp_path, monkeypatch):
    # `rm -rf logdir; touch logdir` mid-run: the path could not be reached (not a folder), the
    # hub wrote on into the deleted file with no error, and the last line named a log that
    # was not there: all 2,000 steps lost without a word.
    import tempfile

    from pardash.telemetry import recorder
    from pardash.telemetry.recorder import Recorder

    monkeypatch.setattr(recorder, "CHECK_PATH_S", 0.0)
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    # The spare folder elsewhere; the log's own folder (a launch's run folder is both); and
    # no place at all (the temp folder a file too).
    for case in ("spare", "own", "none"):
        folder = tmp_path / f"logdir-{case}"
        path = folder / "run.jsonl"
        spare = tmp_path / "spare" if case == "spare" else folder
        if case == "none":
            monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "file"))
            (tmp_path / "file").write_text("")
        rec = Recorder(path, spare_dir=spare)
        rec.write(schema.Step(rank=0, step=1))
        rec.flush()
        path.unlink()
        folder.rmdir()
        folder.write_text("")
        rec.write(schema.Step(rank=0, step=2))
        rec.flush()
        rec.write(schema.Step(rank=0, step=3))
        rec.flush()  # a write to the deleted file that works must not clear the error
        if case == "none":
            assert rec.error.startswith(f"cannot write {path} again (it was deleted or moved; {folder}/"), rec.error
            rec.close()
            continue
        assert rec.path.parent == (spare if case == "spare" else temp) and not rec.error, (case, rec.path, rec.error)
        rec.close()
        msgs = load_log(rec.path)[0]
        assert [m.step for m in msgs if isinstance(m, schema.Step)] == [1, 2, 3]
        (said,) = [m.message for m in msgs if isinstance(m, schema.Event)]
        assert said.startswith(f"log {path} was deleted and its path cannot be reached (Not a directory): the hub writes it on at {rec.path}")


def test_a_log_deleted_after_its_last_check_is_written_again_at_close(tmp_path):
    # The path is checked once a second: a log deleted in the last second of a run (the hub's
    # last frames) was written to the deleted file, and lost, at the close.
    from pardash.telemetry.recorder import Recorder

    path = tmp_path / "logs" / "run.jsonl"
    rec = Recorder(path)
    rec.write(schema.Step(rank=0, step=1))
    rec.flush()
    path.unlink()
    path.parent.rmdir()
    rec.write(schema.Step(rank=0, step=2))
    rec.close()
    msgs = load_log(path)[0]
    assert [m.step for m in msgs if isinstance(m, schema.Step)] == [1, 2]
    assert [m.message.split(":")[0] for m in msgs if isinstance(m, schema.Event)] == [f"log {path} was deleted while the hub wrote it"]


class _StatsSource:
    """A live printer's source that says only the hub's counts (``stats``), set by the test."""

    live = True

    def __init__(self):
        from pardash.telemetry import frames
        from pardash.telemetry.state import RunState

        self.state, self.stats = RunState(), frames.HubStats()

    def poll(self):
        return False


def test_the_headless_view_warns_when_the_log_cannot_be_written():
    # The TUI's header shows the hub's log error; the headless view (and the launcher's last
    # line) must say it too, or a run whose disk filled would read as recorded in full.
    import io

    from pardash.telemetry import frames
    from pardash.telemetry.printer import ProgressPrinter, outcome_line

    src, out = _StatsSource(), io.StringIO()
    printer = ProgressPrinter(src, out=out, bar=False, every_s=3600)
    printer.update()
    src.stats = frames.HubStats(log_error="cannot write /x/run.jsonl: No space left on device")
    printer.update()
    printer.update()
    src.stats = frames.HubStats()
    printer.update()  # (writable again a moment later: said in a while, or at the end)
    printer.update(force=True)
    assert out.getvalue().splitlines() == [
        "warning: cannot write /x/run.jsonl: No space left on device; training goes on, the hub keeps the newest lines in memory until it can write",
        "log: writable again, the lines kept in memory are written",
    ]
    line = outcome_line(src.state, 0, {}, "/x/run.jsonl", log_error="cannot write /x/run.jsonl: No space left on device")
    assert line.endswith("log /x/run.jsonl (incomplete: cannot write /x/run.jsonl: No space left on device)")


def test_a_disk_full_and_freed_by_turns_is_said_a_few_times_not_at_each_turn(monkeypatch):
    # A disk left full: the hub's error changed with each count of lines dropped, and went
    # "writable again" and back (a line fitted in a freed block): 224 warnings in 80 s buried
    # the progress lines (review 316). Said at most once a minute, the same trouble once in ten.
    import io

    from pardash.telemetry import frames
    from pardash.telemetry import printer as printer_mod
    from pardash.telemetry.printer import ProgressPrinter

    clock = [1000.0]
    monkeypatch.setattr(printer_mod.time, "monotonic", lambda: clock[0])
    src, out = _StatsSource(), io.StringIO()
    printer = ProgressPrinter(src, out=out, bar=False, every_s=3600)
    printer.update()
    full = "cannot write /x/run.jsonl: No space left on device ({} lines dropped so far, 512 MiB held)"
    for second in range(900):  # 15 minutes: a new count each second, writable for a second in ten
        clock[0] = 1000.0 + second
        src.stats = frames.HubStats(log_error="" if second % 10 == 9 else full.format(second * 100))
        printer.update()
    lines = [line for line in out.getvalue().splitlines() if line.startswith(("warning", "log"))]
    assert 2 <= len(lines) <= 6, lines  # (it said 1,800 lines: one at each turn)
    assert lines[0].startswith("warning: cannot write /x/run.jsonl: No space left on device (0 lines dropped so far")
    # The state at the end is said, whatever the wait: writable again.
    src.stats = frames.HubStats()
    printer.update(force=True)
    assert out.getvalue().splitlines()[-1] == "log: writable again, the lines kept in memory are written"


def test_a_disk_full_again_after_it_was_said_writable_is_said_within_a_minute(monkeypatch):
    # Full (said), freed for good (said a minute on), full again: said 8 minutes late, the last
    # line saying the log was writable while its lines were dropped (review 322).
    import io

    from pardash.telemetry import frames
    from pardash.telemetry import printer as printer_mod
    from pardash.telemetry.printer import ProgressPrinter

    clock = [0.0]
    monkeypatch.setattr(printer_mod.time, "monotonic", lambda: clock[0])
    src, out = _StatsSource(), io.StringIO()
    printer = ProgressPrinter(src, out=out, bar=False, every_s=3600)
    said: list[tuple[float, str]] = []
    for second in range(300):
        clock[0] = float(second)
        full = second < 30 or second >= 120
        src.stats = frames.HubStats(log_error="cannot write /x/run.jsonl: No space left on device" if full else "")
        before = out.getvalue()
        printer.update()
        said += [(clock[0], line.split(":")[0]) for line in out.getvalue()[len(before):].splitlines()]
    assert said == [(0.0, "warning"), (90.0, "log"), (150.0, "warning")], said


def test_the_headless_view_says_when_its_hub_goes_quiet_and_when_it_sends_again(monkeypatch):
    # A hub stopped (SIGSTOP, swapped out, cut off) for 20 s: the TUI's header said "hub quiet";
    # the headless view printed the hub's last figures every few seconds as if they were
    # current ("step 81/2000 | 1,425 samples/s | 2 running") while the ranks trained on.
    import io

    from pardash.telemetry import frames
    from pardash.telemetry import printer as printer_mod
    from pardash.telemetry.printer import ProgressPrinter
    from pardash.telemetry.state import RunState

    clock = [100.0]
    monkeypatch.setattr(printer_mod.time, "monotonic", lambda: clock[0])

    class Source:
        live = True
        synced = True
        last_frame_t = 1.0

        def __init__(self):
            self.state, self.stats = RunState(), frames.HubStats()

        def poll(self):
            return False

    src, out = Source(), io.StringIO()
    src.state.apply(schema.Hello(run="r", rank=0, world_size=1, t=1.0), 0.0)
    printer = ProgressPrinter(src, out=out, bar=False, every_s=5.0)
    for _ in range(5):  # frames come: nothing said
        clock[0] += 1.0
        src.last_frame_t += 1.0
        printer.update()
    for _ in range(20):  # none for 20 s
        clock[0] += 1.0
        printer.update()
    src.last_frame_t += 1.0
    printer.update()
    lines = out.getvalue().splitlines()
    warned = [i for i, line in enumerate(lines) if line.startswith("warning: the hub has sent nothing for 4 s")]
    assert len(warned) == 1, lines
    quiet = [line for line in lines[warned[0]:] if line.startswith("[")]
    assert quiet and all("| hub quiet for " in line for line in quiet), lines
    assert lines[-1] == "hub: sending again"
    assert "hub quiet" not in " ".join(lines[: warned[0]])


def test_a_write_that_fails_half_way_leaves_no_torn_or_doubled_line(tmp_path):
    # The disk fills in the middle of a flush: part of the lines reach the file, the last one
    # torn. When space comes back the file is cut back to its last good line and the kept
    # lines are written once, whole.
    from pardash.telemetry.recorder import Recorder

    rec = Recorder(tmp_path / "run.jsonl")
    rec.write(schema.Step(rank=0, step=1))
    rec.flush()
    real = rec._fh

    class HalfFull:
        def tell(self):
            return real.tell()

        def fileno(self):
            return real.fileno()

        def write(self, data):
            real.write(data[: len(data) // 2])
            real.flush()
            raise OSError(28, "No space left on device")

        def flush(self):
            pass

        def close(self):
            real.close()

    rec._fh = HalfFull()
    for step in (2, 3, 4):
        rec.write(schema.Step(rank=0, step=step))
    rec.flush()
    assert "No space left" in rec.error and rec._fh is None
    rec.write(schema.Step(rank=0, step=5))
    rec.close()  # writing works again
    msgs, stats = load_log(tmp_path / "run.jsonl")
    assert [m.step for m in msgs] == [1, 2, 3, 4, 5] and not stats.skipped


def test_a_hub_restarted_on_a_torn_log_starts_its_own_line(tmp_path):
    # The hub died in the middle of a line; the restarted hub (--resume, on the same log) must
    # not glue its first record to the fragment, which would make both unreadable.
    from pardash.telemetry.recorder import Recorder

    path = tmp_path / "run.jsonl"
    whole = schema.encode_json(schema.Step(rank=0, step=1)) + b"\n"
    path.write_bytes(whole + schema.encode_json(schema.Step(rank=0, step=2))[:25])
    rec = Recorder(path)
    for step in (3, 4):
        rec.write(schema.Step(rank=0, step=step))
    rec.close()
    msgs, stats = load_log(path)
    assert [m.step for m in msgs] == [1, 3, 4]
    assert stats.skipped == {"malformed": 1}  # the fragment, kept as a line of its own and counted
    assert path.read_bytes().startswith(whole)


def test_a_log_that_stays_unwritable_keeps_only_the_newest_lines_in_memory(tmp_path, monkeypatch):
    from pardash.telemetry import recorder
    from pardash.telemetry.recorder import Recorder

    monkeypatch.setattr(recorder, "MAX_UNWRITTEN_BYTES", 4096)
    rec = Recorder(tmp_path / "run.jsonl")
    rec._fh.close()
    rec._fh = open("/dev/full", "ab", buffering=0)
    for step in range(1, 201):  # a flush a step: each fails, and what is kept stays bounded
        rec.write(schema.Step(rank=0, step=step))
        rec.flush()
        assert "cannot write" in rec.error
        assert rec._unwritten_bytes <= 4096 + 64
        rec._fh = open("/dev/full", "ab", buffering=0)
    rec._fh = None  # the disk has room again: the newest lines are written, in order
    rec.close()
    msgs = load_log(tmp_path / "run.jsonl")[0]
    steps = [m.step for m in msgs if isinstance(m, schema.Step)]
    assert steps[-1] == 200 and steps == list(range(201 - len(steps), 201)) and 40 < len(steps) < 200
    (said,) = [m.message for m in msgs if isinstance(m, schema.Event)]  # ... and the gap is said
    assert said.startswith(f"log {tmp_path / 'run.jsonl'}: {200 - len(steps)} lines were dropped while it could not be written")


def test_elastic_restart_shows_as_events_and_the_log_continues(tmp_path):
    log = tmp_path / "run.jsonl"
    # Checkpoints only at the end: the restart finds none of this job's and says it starts over.
    p = _start(tmp_path, "--strategy", "ddp", "--nproc", "2", "--steps", "60", "--max-restarts", "1",
               "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "1000")

    def rank1_pid():
        msgs = load_log(log)[0] if log.exists() else []
        hello = [m for m in msgs if isinstance(m, schema.Hello) and m.rank == 1]
        return hello[0].pid if hello and len(_steps(log, 1)) >= 10 else None

    wait_for(lambda: rank1_pid() is not None, timeout_s=120, poll_s=0.3)
    os.kill(rank1_pid(), signal.SIGKILL)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-2000:]
    msgs, _ = load_log(log)
    restarts = [m for m in msgs if isinstance(m, schema.Event) and m.name == "restart"]
    assert sorted(m.rank for m in restarts) == [0, 1]
    hellos = [m for m in msgs if isinstance(m, schema.Hello)]
    assert sorted((m.rank, m.restart) for m in hellos) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # after the restart the job runs to its end, from step 1, and the dashboard is told why
    assert max(s.step for s in _steps(log, 0)) == 60
    warnings = [m for m in msgs if isinstance(m, schema.Event) and m.name == "warning"]
    assert [(m.rank, m.message) for m in warnings] == [
        (0, f"resume: torchrun restart 1: no checkpoint of this job in {tmp_path / 'ck'} yet; starting at step 1")]
    assert not [m for m in msgs if isinstance(m, schema.Event) and m.name == "resume"]
    # The last line and the report count the restart; the exits are of the last attempt.
    from pardash.telemetry.report import build_report, render_text

    assert "torchrun restarted the job 1x" in out
    rep = build_report(str(log))
    text = render_text(rep)
    assert "torchrun restarted the job 1x (--max-restarts)" in text and "none with an error in the last attempt" in text
    # Each rank's count, in the rank table (it was in the JSON only).
    # (the table's header: a loaded run's stragglers section, before it, has a "rank 1 (compute) ..." line)
    header = next(line for line in text.splitlines() if line.split()[:3] == ["rank", "host", "status"])
    assert header.split()[:5] == ["rank", "host", "status", "restarts", "steps"]
    from pardash.telemetry.report import render_markdown

    assert "| rank | host | status | restarts | steps |" in render_markdown(rep)
    # The steps the restart ran again are not counted twice (it said "steps 71 (last step 60)").
    # (The most any rank ran again: torchrun's SIGTERM may cost the rank it stops its last step
    # held for sending, so the two ranks' counts can differ by one.)
    again = max(len(_steps(log, r)) - 60 for r in (0, 1))
    assert again > 0 and (rep["steps"], rep["steps_rerun"]) == (60, again)
    assert re.search(rf"^steps +60 \(last step 60; {again} run again after a restart or resume\)$", text, re.MULTILINE)
    from pardash.telemetry.report import render_markdown

    # It said "None.", then the failure the job was restarted after. (A stall while torchrun
    # restarted the ranks may be listed: the exits are the last attempt's.)
    section = render_markdown(rep).split("## Stalls and exits", 1)[1].split("\n## ", 1)[0]
    assert "None.\n" not in section and ("None in the last attempt." in section or rep["stalls"])


def test_an_attached_headless_view_waits_out_restarts_and_hub_restarts():
    # Every rank exited, but the job's supervisor lives: torchrun may start them again
    # (--max-restarts), so the view goes on until the supervisor ends. A hub that sends no frame
    # while it lives (a restarted hub reading a long log back) is not taken for gone either.
    import io
    import threading

    from pardash.telemetry import frames
    from pardash.telemetry.printer import ProgressPrinter, follow_attached
    from pardash.telemetry.state import RunState

    class Source:
        live = True
        last_frame_t = 0.0

        def __init__(self, info):
            self.state, self.stats, self.info = RunState(), frames.HubStats(), info

        def poll(self):
            return False

    def follow(src):
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("line", follow_attached(ProgressPrinter(src, out=io.StringIO(), bar=False), src, gone_s=0.2)))
        t.start()
        return t, out

    supervisor = subprocess.Popen(["sleep", "60"])
    src = Source({"supervisor_pid": supervisor.pid})
    for r in (0, 1):
        src.state.apply(schema.Hello(run="r", rank=r, world_size=2, t=1.0), 0.0)
        src.state.apply(schema.Event(run="r", rank=r, seq=1, name="exit", code=1, t=2.0), 0.0)
    t, out = follow(src)
    t.join(1.0)
    assert t.is_alive()  # all exited, hub quiet for 5x gone_s: the supervisor decides
    supervisor.kill()
    supervisor.wait()
    t.join(30)
    assert not t.is_alive() and out["line"].startswith("pardash: the run is over: 2 exited")

    hub = subprocess.Popen(["sleep", "60"])
    src = Source({"pid": hub.pid})
    src.state.apply(schema.Hello(run="r", rank=0, world_size=2, t=1.0), 0.0)
    t, out = follow(src)
    t.join(1.0)
    assert t.is_alive()
    hub.kill()
    hub.wait()
    t.join(30)
    assert not t.is_alive() and out["line"].startswith("pardash: the hub has sent nothing for 0 s")


def test_a_hubs_log_is_written_from_a_thread_in_order_and_bounded(tmp_path, monkeypatch):
    # A hub's recorder hands its lines to a writer thread at each frame; a slow disk delays the
    # log, not the hub, until the lines waiting pass MAX_UNWRITTEN_BYTES: then the hub writes
    # them itself. Whoever writes, the log keeps the hub's order and loses nothing.
    import threading

    from pardash.telemetry import recorder
    from pardash.telemetry.recorder import Recorder

    line = len(schema.encode_json(schema.Step(rank=0, step=100))) + 1
    monkeypatch.setattr(recorder, "MAX_UNWRITTEN_BYTES", 5 * line)
    path = tmp_path / "run.jsonl"
    rec = Recorder(path, background=True)
    rec.write(schema.Step(rank=0, step=100))
    rec.flush_soon()
    wait_for(lambda: path.stat().st_size == line)  # written by the thread, not by this one
    assert rec._writer is not None and rec._writer.is_alive()

    # The disk stalls: a write holds the lock, and what is handed over waits behind it.
    held, release = threading.Event(), threading.Event()

    def stalled_write() -> None:
        with rec._lock:
            held.set()
            release.wait(60)

    stall = threading.Thread(target=stalled_write)
    stall.start()
    held.wait(10)
    for step in range(101, 106):
        rec.write(schema.Step(rank=0, step=step))
        rec.flush_soon()  # returns at once: handed to the thread
    assert path.stat().st_size == line
    # Past the bound the hub writes itself (blocking on the stalled write, as it would on the
    # disk without the thread), everything handed over first.
    release.set()
    rec.write(schema.Step(rank=0, step=106))
    rec.flush_soon()
    assert [m.step for m in load_log(path)[0]] == list(range(100, 107))
    stall.join(10)
    rec.write(schema.Step(rank=0, step=107))
    rec.flush_soon()
    rec.close()
    assert rec._writer is None
    msgs, stats = load_log(path)
    assert [m.step for m in msgs] == list(range(100, 108)) and not stats.skipped
