"""The supervisor, in parts: it passes the ranks' stderr on as it comes, not line by line (a
progress bar redrawn with carriage returns has no newline to wait for) while still reading
torchrun's reports of dead workers in it; and a job's end that cannot be recorded (a full
disk) still stops the hub."""

from __future__ import annotations

import io
import os
import threading
from types import SimpleNamespace

import pytest
import zmq

from helpers import wait_for
from pardash.telemetry import schema
from pardash.trainer.supervisor import Supervisor


class Sink(io.RawIOBase):
    def __init__(self) -> None:
        self.data = b""
        self.lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        with self.lock:
            self.data += bytes(b)
        return len(b)


def test_stderr_is_passed_on_as_it_comes_and_deaths_are_still_read(tmp_path):
    # torchrun's stderr is a file (a pipe to the supervisor killed the ranks with it): it is
    # followed as it grows, passed on byte for byte, read for deaths, to the end once torchrun ends.
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    sup = Supervisor.__new__(Supervisor)
    sup.spec = SimpleNamespace(curve_dir="", node_rank=0, nproc=2, run_id="r", max_restarts=0)
    sup._global = {}
    sup.endpoints = {"ingest": f"tcp://127.0.0.1:{port}"}
    ended: list[int] = []
    sup.job = SimpleNamespace(poll=lambda: ended[0] if ended else None)
    path = tmp_path / "stderr.log"
    path.write_bytes(b"an earlier attempt's line\n")
    start = path.stat().st_size
    sink = Sink()
    thread = threading.Thread(target=sup._follow_stderr, args=(str(path), start, sink), daemon=True)
    thread.start()
    try:
        with open(path, "ab", buffering=0) as w:
            w.write(b"\rtrain: 1/12")
            wait_for(lambda: sink.data == b"\rtrain: 1/12")  # a partial line passed on before its newline
            w.write(b"\rtrain: 2/12\n[rank1] failed (exitcode: 1) loc")
            w.write(b"al_rank: 1 (pid: 42) of binary\n")
        ended.append(1)
        thread.join(10)
        assert not thread.is_alive()
        assert sink.data == (
            b"\rtrain: 1/12\rtrain: 2/12\n[rank1] failed (exitcode: 1) local_rank: 1 (pid: 42) of binary\n"
        )
        assert pull.poll(10_000)
        msg = schema.decode(pull.recv())
        assert (msg.name, msg.rank, msg.code) == ("exit", 1, 1)
    finally:
        pull.close(0)
        sup._stderr_push.close(0)  # (left open for the notes after torchrun's end: see run)


def test_a_result_that_cannot_be_written_still_stops_the_hub(tmp_path, capsys):
    # A full disk made writing result.json raise at the job's end: the launch reported a
    # finished run as failed and left its hub running, orphaned.
    import subprocess
    import sys

    hub = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        sup = Supervisor.__new__(Supervisor)
        blocker = tmp_path / "file"
        blocker.write_text("")
        sup.spec = SimpleNamespace(run_id="r", run_dir=str(blocker / "run"), log_path="x.jsonl", viewer_pid=0)
        sup._stopping = sup._gave_up = False
        sup._torchrun_killed = 0
        sup.hub_restarts = 0
        sup.hub = hub
        sup._finish(0)
        assert hub.wait(10) == -15
        assert "cannot write the run's result.json" in capsys.readouterr().err
    finally:
        hub.kill()


def test_a_hub_that_dies_now_and_then_is_restarted_every_time(monkeypatch):
    # The cap of 20 hub restarts counted over the run's whole life: a hub dying once a day lost
    # the telemetry of a long run for good on day 21. Only deaths close together (a crash loop)
    # count now.
    from pardash.trainer import supervisor

    clock = [0.0]
    monkeypatch.setattr(supervisor.time, "monotonic", lambda: clock[0])
    sup = supervisor.Supervisor.__new__(supervisor.Supervisor)
    sup.hub_restarts, sup._stopping, sup._hub_deaths = 0, False, supervisor.deque()
    restarted = []

    class Dead:
        returncode = -9

        def poll(self):
            return -9

    sup.start_hub = lambda resume=False: restarted.append(clock[0])
    for day in range(30):
        clock[0] = day * 86400.0
        sup.hub = Dead()
        assert sup._recent_hub_deaths() < supervisor.MAX_HUB_RESTARTS
        sup._watch_hub()
    assert len(restarted) == 30 and sup.hub_restarts == 30
    for k in range(supervisor.MAX_HUB_RESTARTS):  # then a crash loop: 20 deaths in seconds
        clock[0] = 31 * 86400.0 + k
        sup.hub = Dead()
        sup._watch_hub()
    assert sup._recent_hub_deaths() == supervisor.MAX_HUB_RESTARTS  # _wait_job gives up at the next death
    # ... and forgets the burst once it is older than the window: a death a day later is restarted.
    clock[0] += supervisor.HUB_RESTART_WINDOW_S + 86400.0
    assert sup._recent_hub_deaths() == 0


def _crashing_job(tmp_path, viewer_pid: int):
    """A one-rank job of the bundled trainer that crashes at step 2, watched by ``viewer_pid``."""
    from pardash.trainer.launcher import new_spec

    return new_spec(log_path=str(tmp_path / "run.jsonl"), runs_dir=str(tmp_path / "runs"), nproc=1, strategy="single",
                    command=["-m", "pardash.trainer.train", "--strategy", "single", "--model", "mlp", "--steps", "3",
                             "--inject-crash", "0@2"], viewer_pid=viewer_pid)  # fmt: skip


@pytest.mark.slow
def test_a_job_tells_the_viewer_that_started_it_how_it_ended_even_without_its_result_file(tmp_path):
    # A full disk under the run's folder: the supervisor could not write result.json, and the
    # launch took the job's end for its supervisor's death ("its ranks train on without it ...
    # following them to the end"), or, in the TUI, waited 15 s and said "detached; the job
    # goes on" of a job that was over. The result also comes down the supervisor's pipe.
    # And the viewer that started the job has that outcome while the job waits for it: the
    # supervisor keeps the hub up until its viewer has gone (so it can read the end), and the
    # viewer waited for the supervisor to exit (`q` on a finished run froze 15 s, then said
    # "detached; the job goes on" and exited 0, also after a crash). (One job for both: the
    # result read from result.json, as here before the file was blocked, is every launch's.)
    import subprocess
    import sys

    from pardash.trainer.launcher import start

    viewer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        spec = _crashing_job(tmp_path, viewer.pid)
        blocked = os.path.join(spec.run_dir, "result.json")
        os.makedirs(os.path.join(blocked, "taken"))  # its place taken: the file cannot be written
        job = start(spec, output=subprocess.DEVNULL)
        assert job.wait_result(120) == 1
        assert job.result()["code"] == 1 and not job.result()["stopped"]
        assert job.poll() is None  # still up for its viewer
    finally:
        viewer.kill()
        viewer.wait()
    assert job.wait(60) == 1
    assert job.result()["code"] == 1  # after the supervisor is gone too


@pytest.mark.slow
def test_what_the_supervisor_says_under_a_launchs_tui_goes_to_the_output_file_not_over_the_tui(tmp_path):
    # The hub killed under `pardash launch`'s TUI: the supervisor's "pardash: the hub exited (code
    # -9); restarting it" was written on the terminal the TUI draws on, over its header (the
    # TUI says the restart as an event). Once the launch has its answer, the supervisor's lines
    # go to the ranks' output file.
    import signal
    import subprocess
    import sys

    from pardash.telemetry import registry
    from pardash.telemetry.logreader import load_log
    from pardash.trainer.launcher import new_spec, start

    viewer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    spec = new_spec(log_path=str(tmp_path / "run.jsonl"), runs_dir=str(tmp_path / "runs"), nproc=1, strategy="single",
                    command=["-m", "pardash.trainer.train", "--strategy", "single", "--model", "mlp", "--steps", "100000"],
                    viewer_pid=viewer.pid)  # fmt: skip
    spec.output = os.path.join(spec.run_dir, "output.log")  # (as the launch gives it when its TUI is to run)
    terminal = tmp_path / "terminal.txt"

    def said(name: str) -> bool:
        return any(isinstance(m, schema.Event) and m.name == name for m in load_log(spec.log_path)[0])

    job = None
    try:
        with open(terminal, "ab") as tty:
            job = start(spec, output=tty)
        wait_for(lambda: any(isinstance(m, schema.Step) for m in load_log(spec.log_path)[0]), timeout_s=120, poll_s=0.3)
        # Its first hub too, which says its log's fate as it stops (the supervisor's own lines
        # went to the file; the hub it had started kept the terminal).
        hub = registry.live_runs()[0]["pid"]
        assert [os.readlink(f"/proc/{pid}/fd/2") for pid in (hub, job.supervisor.pid)] == [spec.output] * 2
        assert "output" not in registry.live_runs()[0]  # (the launcher's word to its hub, not the run's)
        os.kill(hub, signal.SIGKILL)
        wait_for(lambda: said("hub_restart"), timeout_s=60, poll_s=0.3)
    finally:
        if job is not None:
            job.stop()
        viewer.kill()
        viewer.wait()
        if job is not None:
            job.wait(60)
    assert "restarting it" in open(spec.output).read()
    assert "restarting it" not in terminal.read_text()
    # (The run's folder, its output in it, is no other user's to read, as its log is not.)
    assert os.stat(spec.run_dir).st_mode & 0o007 == 0


CTRL_C_AS_THE_SUPERVISOR_STARTS = """
import os, signal, subprocess, sys
from pardash.trainer import launcher
started = []
real = subprocess.Popen
def popen_then_ctrl_c(*args, **kw):
    started.append(real(*args, **kw))
    os.kill(os.getpid(), signal.SIGINT)  # as it returns
    return started[-1]
launcher.subprocess.Popen = popen_then_ctrl_c
spec = launcher.new_spec(log_path=sys.argv[1] + "/run.jsonl", runs_dir=sys.argv[1] + "/runs", nproc=1, strategy="single",
                         command=["-m", "pardash.trainer.train", "--strategy", "single", "--model", "mlp", "--steps", "100000"])
try:
    launcher.start(spec, output=subprocess.DEVNULL)
    print("started, no KeyboardInterrupt")
except KeyboardInterrupt:
    print("KeyboardInterrupt")
(sup,) = started
try:
    print(sup.wait(60))  # stopped, not left to run the job
finally:
    if sup.poll() is None:  # (the defect: the job's supervisor, running on)
        os.kill(sup.pid, signal.SIGINT)
        sup.wait(60)
"""


def test_a_ctrl_c_that_comes_while_the_supervisor_is_started_stops_it(tmp_path):
    # A loaded machine takes its time to fork and exec: a Ctrl-C (or SIGTERM) that landed inside
    # Popen, after the supervisor had started but before the launch had its handle, left the
    # supervisor, the hub, torchrun and the ranks training with nobody to watch or stop them
    # (the launch said "stopped before the job started"; its pipes stayed open to the job).
    # In a process of its own: a SIGINT sent to the test's worker itself can be taken by
    # another of its threads and land later, anywhere (a KeyboardInterrupt in hypothesis's
    # garbage-collector callback, and the worker's next tests failing, in one `make test`).
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", CTRL_C_AS_THE_SUPERVISOR_STARTS, str(tmp_path)], capture_output=True,
                         text=True, timeout=180)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    said, code = out.stdout.split("\n")[:2]
    assert said == "KeyboardInterrupt" and int(code) != 0, out.stdout


STOPPED_AS_TORCHRUN_STARTS = """
import os, signal, subprocess, sys
from pardash.trainer import launcher, supervisor
spec = launcher.new_spec(log_path=sys.argv[1] + "/run.jsonl", runs_dir=sys.argv[1] + "/runs", nproc=1, strategy="single",
                         command=["-m", "pardash.trainer.train", "--strategy", "single", "--model", "mlp", "--steps", "100000"])
real, torchrun = subprocess.Popen, []
def popen(argv, *a, **kw):
    p = real(argv, *a, **kw)
    if "pardash.trainer.torchrun" in argv:
        torchrun.append(p)
        os.kill(os.getpid(), signal.SIGINT)  # as Popen returns: no job to tell yet
    return p
supervisor.subprocess.Popen = popen
sup = supervisor.Supervisor(spec)
code = sup.run(None)
print(code, torchrun[0].returncode, sup._told_to_stop)
"""


def test_a_stop_that_comes_as_torchrun_starts_tells_torchrun(tmp_path):
    # The supervisor's stop, come while it started torchrun (a slow fork and exec), found no job
    # to tell: the ranks trained on until the grace period's SIGKILL, 10 s later.
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", STOPPED_AS_TORCHRUN_STARTS, str(tmp_path)], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    code, torchrun, told = out.stdout.split()[-3:]
    assert (code, told) == ("130", "True") and torchrun != "-9", out.stdout


def test_only_this_nodes_processes_of_the_job_are_found_to_stop():
    # Two nodes' launches in one PID namespace (tests/test_two_nodes.py, the netns demo): node
    # 1's supervisor, its torchrun killed, stopped node 0's torchrun and rank too (they carry
    # the same run id and hub address).
    import os
    import subprocess
    import sys

    from pardash.trainer import supervisor

    sup = supervisor.Supervisor.__new__(supervisor.Supervisor)
    sup.spec = SimpleNamespace(run_id="run-x")
    code = "import time; time.sleep(60)"
    ours = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, PARDASH_SUPERVISOR=str(os.getpid()), PARDASH_RUN_ID="run-x"))
    other = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, PARDASH_SUPERVISOR="1", PARDASH_RUN_ID="run-x"))
    try:
        assert [p.pid for p in sup._job_processes()] == [ours.pid]
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()


def test_the_hub_of_a_job_on_several_nodes_learns_its_world_from_the_ranks():
    # Node 0 with --nproc 1, node 1 with --nproc 2 (torchrun takes it: 3 ranks): node 0's hub,
    # told 2 ranks, refused every hello ("says its job has 3 ranks") and rank 2's steps.
    from pardash.trainer import supervisor

    sup = supervisor.Supervisor.__new__(supervisor.Supervisor)
    sup.spec = SimpleNamespace(strategy="ddp", world_size=2, nnodes=2, run_dir="/runs/r", viewer_pid=0, output="inherit")
    assert sup.hub_meta()["world_size"] == 0
    sup.spec.nnodes, sup.spec.world_size = 1, 4
    assert sup.hub_meta()["world_size"] == 4


def _gone(p) -> bool:
    """Dead, or dead and not reaped yet (a zombie: its parent killed too)."""
    import psutil

    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_nodes_ranks_are_named_as_torchrun_numbered_them():
    # Node 0 with --nproc 1, node 1 with --nproc 2: node 1's ranks are 1 and 2, but its
    # launcher noted their ends as ranks 2 and 3 (node rank x its own --nproc), and the hub
    # refused rank 3 as out of range. The ranks' environment says which they are.
    import signal
    import subprocess
    import sys

    import psutil

    from pardash.trainer import supervisor

    code = ("import os, subprocess, sys, time; "
            "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
            "env=dict(os.environ, LOCAL_RANK=str(i), RANK=str(1 + i))) for i in (0, 1)]; time.sleep(60)")  # fmt: skip
    job = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)  # (its group: the kids too)
    try:
        sup = supervisor.Supervisor.__new__(supervisor.Supervisor)
        sup.spec = SimpleNamespace(node_rank=1, nproc=2)
        sup.job, sup.ranks_started, sup._global = job, False, {}
        assert sup.global_rank(0) == 2  # (before the ranks start: the same --nproc everywhere)
        wait_for(lambda: (sup._look_for_ranks(), len(sup._global) == 2)[1], timeout_s=60)
        assert sup.ranks_started and (sup.global_rank(0), sup.global_rank(1)) == (1, 2)
    finally:
        # The whole group (a kid the job had not started yet when its children were listed was
        # left sleeping a minute), and each gone before the next test looks (a kill lands later).
        kids = psutil.Process(job.pid).children(recursive=True)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        wait_for(lambda: all(_gone(k) for k in kids), timeout_s=30)


BOTH_FAIL = """
import os, signal, sys, time
if os.environ["RANK"] == "1":
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(1.0)  # rank 0: torchrun finds rank 1 dead, and stops this one
sys.exit(3)
"""
"""Two workers that both fail, torch-free (what torchrun says of them is the claim: a process
group each cost 1.4 CPU-s of torch's import for nothing)."""


def test_torchrun_as_launched_says_every_worker_that_failed(tmp_path):
    # torchrun logs one failed worker (the first by its error file's time) and lists the rest
    # only in the summary of a job it gives up on: under --max-restarts, a rank killed outright
    # went unsaid, and the report blamed its peer's "Connection reset by peer".
    import subprocess
    import sys

    from pardash.trainer import torchrun
    from pardash.trainer.supervisor import FAILED_WORKER

    fake = {r: SimpleNamespace(local_rank=r, exitcode=c, pid=100 + r, timestamp=t) for r, c, t in ((0, 1, 5), (1, -9, 7), (2, -15, 7))}
    lines = torchrun.other_failures(fake)
    assert [FAILED_WORKER.search(x).group(1, 2) for x in lines] == [("-9", "1"), ("-15", "2")]
    assert torchrun.other_failures({0: fake[0]}) == []
    script = tmp_path / "both_fail.py"
    script.write_text(BOTH_FAIL)
    out = subprocess.run(
        [sys.executable, "-m", "pardash.trainer.torchrun", "--nproc-per-node", "2", "--standalone", "--max-restarts", "0",
         "--monitor-interval", "0.1", str(script)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    said = {int(m.group(2)): int(m.group(1)) for m in map(FAILED_WORKER.search, out.stderr.splitlines()) if m}
    assert set(said) == {0, 1} and said[1] == -9, out.stderr[-3000:]
    # Its summary of them, without torchrun's own 13 lines of frames above it.
    assert out.returncode == 1 and "ChildFailedError" in out.stderr and "Root Cause" in out.stderr
    assert "Traceback (most recent call last)" not in out.stderr, out.stderr[-3000:]


def test_a_result_written_for_a_killed_supervisor_is_whole_and_never_replaces_the_supervisors_own(tmp_path, capsys):
    # The launch that followed a job to its end after its supervisor was killed writes the
    # result.json the supervisor could not (none was written: `pardash ps`, `report RUN_DIR`
    # and the README's "result.json holds its code once it ends" had nothing), but one the
    # supervisor wrote after all stays as it wrote it.
    import json

    from pardash.telemetry import registry
    from pardash.trainer.launcher import lost_supervisor_result, write_result

    run_dir = tmp_path / "runs" / "r"
    ours = lost_supervisor_result("r", 0, "x.jsonl", gone="killed by SIGKILL")
    assert write_result(str(run_dir), ours) is True
    found = registry.job_result({"run_dir": str(run_dir)})
    assert found == ours and found["code"] == 0 and found["supervisor_gone"] == "killed by SIGKILL" and not found["stopped"]
    assert write_result(str(run_dir), lost_supervisor_result("r", 1, "x.jsonl", gone="killed by SIGKILL")) is False
    assert json.loads((run_dir / "result.json").read_text()) == ours
    assert sorted(p.name for p in run_dir.iterdir()) == ["result.json"]  # no temporary file left
    # The supervisor's own, there first, is not replaced.
    other = tmp_path / "runs" / "s"
    sup = Supervisor.__new__(Supervisor)
    sup.spec = SimpleNamespace(run_id="s", run_dir=str(other), log_path="y.jsonl", viewer_pid=0)
    sup._stopping = sup._gave_up = False
    sup._torchrun_killed = 0
    sup.hub_restarts = 0
    sup.hub = None
    sup._finish(3)
    written = (other / "result.json").read_text()
    stopped = lost_supervisor_result("s", 130, "y.jsonl", gone="killed by SIGKILL", stopped_by=2)
    assert stopped["stopper"] == "by you" and stopped["stopped"] is True
    assert write_result(str(other), stopped) is False
    assert (other / "result.json").read_text() == written


def test_a_node_whose_keys_node_0s_hub_refuses_says_so_at_once(tmp_path, capsys):
    # Node 1 with keys node 0's hub does not admit waited 30 s, then said "no answer from
    # node 0's hub ... (not up yet, not at that address ...)": the hub had answered, refusing it.
    import shutil

    from helpers import serving

    from pardash.telemetry import security
    from pardash.telemetry.hub import Hub

    security.make_keys(tmp_path / "hub")
    security.make_keys(tmp_path / "node1")  # its own client key, never admitted, with the hub's server.key
    shutil.copy(tmp_path / "hub" / "server.key", tmp_path / "node1" / "server.key")
    with serving(Hub(run_id="r", log_path=None, curve=str(tmp_path / "hub"))) as hub:
        sup = SimpleNamespace(spec=SimpleNamespace(remote_hub=hub.ingest_endpoint, curve_dir=str(tmp_path / "node1"), run_id="r"),
                              _stopping=False)  # fmt: skip
        Supervisor.join_remote_hub(sup)
    err = capsys.readouterr().err
    assert "node 0's hub at " in err and "refuses this node: it does not admit this node's client key" in err, err
    # Named by the address the user gave (the ingest port); it named the snapshot port (+2).
    assert f"node 0's hub at {hub.ingest_endpoint} refuses" in err, err
    assert sup.spec.run_id == ""


def test_a_run_id_from_node0s_hub_that_names_no_folder_is_not_taken(tmp_path, capsys):
    # It comes over the network and became a path: "../../escaped" moved node 1's run folder
    # out of its runs folder (RUN_ID-nodeN beside it).
    from helpers import serving

    from pardash.telemetry.hub import Hub

    with serving(Hub(run_id="../../escaped", log_path=None)) as hub:
        sup = SimpleNamespace(spec=SimpleNamespace(remote_hub=hub.ingest_endpoint, curve_dir="", run_id="mine"), _stopping=False)
        Supervisor.join_remote_hub(sup)
    assert sup.spec.run_id == ""
    err = capsys.readouterr().err
    assert "says its run id is '../../escaped', which names no folder: this node's folder keeps its own name" in err, err


def test_a_keyed_node_after_the_firsts_result_names_the_keys_its_hub_takes():
    from pardash.trainer.launcher import lost_supervisor_result
    from pardash.trainer.supervisor import result_fields_of_node

    assert result_fields_of_node("tcp://h:1", 1) == {"log": None, "hub": "tcp://h:1", "node_rank": 1}
    assert result_fields_of_node("tcp://h:1", 1, "/k") == {"log": None, "hub": "tcp://h:1", "node_rank": 1, "curve_dir": "/k"}
    lost = lost_supervisor_result("r", 0, None, gone="killed", remote_hub="tcp://h:1", node_rank=2, curve_dir="/k")
    assert (lost["hub"], lost["node_rank"], lost["curve_dir"]) == ("tcp://h:1", 2, "/k")
