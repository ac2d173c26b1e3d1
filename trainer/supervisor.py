"""The supervisor of a launched job: the process that starts the hub, then torchrun with the
ranks, restarts a hub that dies, reads torchrun's word of each rank's exit, and stops it all
cleanly (see :mod:`pardash.trainer.launcher`, which starts it).

``python -m pardash.trainer.supervisor --ready-fd N SPEC_JSON`` runs in a session of its own:
the viewer can quit, detach or crash without stopping the job or losing the log; SIGTERM to it
stops the job (torchrun first, then the hub after a final flush).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from pardash.telemetry import registry, schema, security
from pardash.telemetry.env import ENDPOINT_VAR, LINE_BUFFERED_VAR, RUN_ID_VAR
from pardash.telemetry.failures import signal_name
from pardash.telemetry.spawn import exit_code, quiet_ports, read_line
from pardash.telemetry.streams import off_the_terminal, unbreakable_stdio
from pardash.trainer.torchrun import AUTORUN, MASTER_PORT_BUSY_FILE, attempt_dirs
from pardash.trainer.jobprocs import (
    STOP_GRACE_S, SUPERVISOR_VAR, _kill_job, _signal_group, _stop_job_processes, hub_push, job_processes,
)  # fmt: skip

# torchrun's agent logs each worker failure as it finds it (every --monitor-interval):
#   "... failed (exitcode: -9) local_rank: 1 (pid: 4056) of binary: ..."
FAILED_WORKER = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
# ...and, when it gives up, lists every failed worker in its summary:
#   "  rank      : 1 (local_rank: 1)"  then  "  exitcode  : -9 (pid: 5294)"
SUMMARY_RANK = re.compile(r"^\s*rank\s*:\s*(\d+) \(local_rank: \d+\)")
SUMMARY_CODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
STDERR_POLL_S = 0.1
"""How often the supervisor looks for new lines of torchrun's stderr (its monitor looks every
--monitor-interval, 0.1 s)."""

HUB_READY_TIMEOUT_S = 30.0
LISTEN_BACKLOG = 100
"""The early ports' listening sockets' backlog (ZeroMQ's own, ZMQ_BACKLOG's default)."""


def _listener() -> socket.socket:
    """A TCP socket to listen on as ZeroMQ's own do: SO_REUSEADDR, which the connections it
    takes keep in TIME_WAIT once closed, so a hub restarted on its port binds it again (without
    it, a killed hub's connections held the port: "cannot bind ... (Address already in use)")."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return s
NODES_END_WAIT_S = 5.0
"""How long node 0 of several keeps its hub up, its job failed, for the other nodes' notes of
how their ranks ended (see Supervisor._await_nodes_ends)."""
TRAINER_COMMAND = ["-m", "pardash.trainer.train"]
"""What torchrun runs per rank for the bundled trainer (its arguments follow)."""


MAX_HUB_RESTARTS = 20
"""Hub deaths within HUB_RESTART_WINDOW_S after which the launcher stops restarting it (a hub
that cannot live: a crash loop), training going on without telemetry."""
HUB_RESTART_WINDOW_S = 600.0
"""A hub that dies now and then over days is restarted every time: only deaths this close
together count toward MAX_HUB_RESTARTS."""


class LaunchError(Exception):
    """A launch that cannot start; the message is one line that says what to do."""


@dataclass(kw_only=True, slots=True)
class LaunchSpec:
    """Everything the supervisor needs to run one job (JSON-serialisable)."""

    run_id: str
    """Run id (registry key, PARDASH_RUN_ID)."""
    log_path: str
    """Absolute path of the JSONL telemetry log (node > 0 writes none: node 0's hub keeps it)."""
    run_dir: str
    """Folder for the job's output log and result file (node > 0: named RUN_ID-nodeN once node
    0's hub has said the run's id, see :meth:`Supervisor._name_run_dir`)."""
    nproc: int = 1
    """Ranks per node (torchrun --nproc-per-node)."""
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    max_restarts: int = 0
    telemetry_bind: str = "127.0.0.1"
    """Address the hub binds (loopback unless the user asks otherwise)."""
    telemetry_port: int = 0
    """Hub ingest port (0: free ports picked by the hub)."""
    remote_hub: str = ""
    """Nodes > 0: node 0's hub ingest (tcp://HOST:PORT; updates and snapshot on PORT+1 and
    PORT+2). The ranks send there, and this node starts no hub of its own."""
    command: list[str] = field(default_factory=list)
    """What torchrun runs per rank: ['-m', module, args...] or [script, args...]."""
    strategy: str = ""
    world_size: int = 1
    output: str = "inherit"
    """'inherit' (the terminal) or a file path for the ranks' stdout/stderr."""
    stderr_apart: bool = False
    """With an ``output`` file: the ranks' stderr is passed on to the supervisor's stderr
    rather than written into that file (a launch without a terminal keeps the two streams)."""
    viewer_pid: int = 0
    """Foreground pid; after the job ends the hub stays up while this process lives."""
    extra_env: dict[str, str] = field(default_factory=dict)
    prometheus_port: int | None = None
    """Serve Prometheus metrics from the hub on this port (None: no; 0: a free port)."""
    prometheus_addr: str = "127.0.0.1"
    """Address the hub's /metrics binds."""
    prometheus_per_rank: bool = False
    """Add per-rank series to /metrics (and to the textfile)."""
    prometheus_textfile: str = ""
    """Have the hub write its metrics to this .prom file ('': none) while it runs, and once more as it stops."""
    curve_dir: str = ""
    """CURVE key folder (``pardash keys``): the hub admits only authorised keys, the ranks and
    the supervisor use the client keys (PARDASH_CURVE_DIR in the ranks' environment)."""
    insecure: bool = False
    """Let the hub bind beyond loopback without keys (``--insecure``)."""


def user_command(command: list[str]) -> list[str]:
    """What each rank runs, as one would type it: ``python SCRIPT ARGS``, ``python -m MODULE
    ARGS``, or the bundled trainer's ``python -m pardash.trainer.train FLAGS`` (the flags given,
    not the defaults), from a spec's ``command`` (pardash's own wrapper of a script, autorun,
    left out). Recorded as ``command`` in the registry entry, result.json and the log (see
    :data:`pardash.telemetry.state.COMMAND_NOTE`): two runs of one folder were told apart by their
    run ids alone."""
    if command[:2] == ["-m", AUTORUN]:
        command = command[2:]
    return ["python", *command]


def torchrun_argv(spec: LaunchSpec) -> list[str]:
    """The torchrun command line for ``spec`` (torchrun's own flags, then the rank command)."""
    argv = [sys.executable, "-m", "pardash.trainer.torchrun", "--nproc-per-node", str(spec.nproc)]
    if spec.nnodes == 1 and spec.master_port is None:
        argv.append("--standalone")
    else:
        argv += ["--nnodes", str(spec.nnodes), "--node-rank", str(spec.node_rank)]
        argv += ["--master-addr", spec.master_addr or "127.0.0.1"]
        argv += ["--master-port", str(spec.master_port or 29500)]
    argv += ["--max-restarts", str(spec.max_restarts), "--monitor-interval", "0.1"]
    argv += ["--log-dir", os.path.join(spec.run_dir, "torchrun")]
    # torchrun's parser takes any word that starts a flag of its own as that flag, even among
    # the script's arguments (`--nproc 7` ambiguous, `--role x` taken): after `--` none is.
    command = list(spec.command)
    if command[:1] == ["-m"]:
        return argv + ["-m", "--", *command[1:]]
    return argv + ["--", *command]


def _run_id_of_node0(run_id: str, where: str) -> str:
    """The run id node 0's hub said, where it can name this node's folder (RUN_ID-nodeN) and go
    in its ranks' messages; else '' (said): it comes over the network, and "../x" would have
    moved the folder out of the runs folder."""
    from pardash.telemetry.cliargs import valid_run_id

    if valid_run_id(run_id):
        return run_id
    print(f"pardash: node 0's hub at {where} says its run id is {run_id!r}, which names no folder: this node's "
          "folder keeps its own name and its ranks send with no run id", file=sys.stderr, flush=True)  # fmt: skip
    return ""


class Supervisor:
    """Runs in its own process: hub, then torchrun, then a clean stop."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.hub: subprocess.Popen | None = None
        self.job: subprocess.Popen | None = None
        self.endpoints: dict = {}
        self._early_socks: list[socket.socket] = []
        """The early ports' sockets, bound and listening until the hub takes them (:meth:`_early_port`)."""
        self._stopping = False
        self._noted_stopping = False
        self._stop_t = 0.0
        """When the stop began (wall clock): a rank's own exit after it is the stop's doing."""
        self.hub_restarts = 0
        """Hubs started again after one died, in the job's life."""
        self.ranks_started = False
        """Whether torchrun was seen with a child process (its ranks) while it ran."""
        self._gave_up = False
        self._told_to_stop = False
        """Whether torchrun was sent its SIGTERM (it is sent once)."""
        self._stopped_by = signal.SIGTERM
        """The signal that first asked this process to stop: SIGINT is a person's stop (the
        launch's Ctrl-C, a Stop chosen in an attached viewer), SIGTERM anything's (`kill`)."""
        self._hub_deaths: deque[float] = deque()
        """When the hub died, within the last HUB_RESTART_WINDOW_S."""
        self._attempt = 0
        """torchrun's last restart told to the hub (see :meth:`_look_for_restarts`)."""
        self._torchrun_killed = 0
        """The signal that killed torchrun when nothing here sent it (the OOM killer), else 0."""
        self._global: dict[int, int] = {}
        """Local rank -> global rank, read from the ranks' environment (see global_rank)."""
        self._late_run_id = ""
        """Node > 0 whose node 0's hub answered only after torchrun started: the run's id, once
        it did (see :meth:`_learn_run_id`); the ranks keep the empty one they were given."""
        self._learning: threading.Thread | None = None
        self._job_over = False
        """Set as the job ends: the thread of :meth:`_learn_run_id` stops asking."""
        self._node_result = result_fields_of_node(spec.remote_hub, spec.node_rank, spec.curve_dir) if spec.remote_hub else {}
        """Node > 0's own fields of its result.json (it writes no log: node 0's hub keeps it)."""

    def start_hub(self, *, resume: bool = False) -> dict:
        spec = self.spec
        if spec.remote_hub:
            self.endpoints = self.join_remote_hub()
            return self.endpoints
        return self.wait_hub(self.spawn_hub(resume=resume))

    def _under_a_tui(self) -> bool:
        """A launch's TUI is to own the terminal (the ranks' output goes to a file meanwhile)."""
        return bool(self.spec.viewer_pid) and self.spec.output != "inherit"

    def hub_meta(self) -> dict:
        """What the hub is told of the job. Its world size only on one node: torchrun lets
        each node have its own --nproc (1 here and 2 there is 3 ranks), which this node cannot
        know, and a hub told 2 refused every hello of the 3. Under a TUI, the file its output
        goes to once it is ready (see streams.off_the_terminal)."""
        spec = self.spec
        meta = {"strategy": spec.strategy, "world_size": spec.world_size if spec.nnodes == 1 else 0,
                "supervisor_pid": os.getpid(), "cwd": os.getcwd(), "run_dir": spec.run_dir}  # fmt: skip
        if getattr(spec, "command", None):  # (a stand-in spec of the tests has none)
            meta["command"] = user_command(spec.command)
        if self._under_a_tui():
            meta["output"] = spec.output
        return meta

    def spawn_hub(self, *, resume: bool = False) -> int:
        """Start the hub process; returns the read end of its ready pipe (see :meth:`wait_hub`)."""
        spec = self.spec
        if resume:
            # Where the dead hub's log went on (beside its path, when another file took it).
            moved = (registry.entry(spec.run_id) or {}).get("log")
            if isinstance(moved, str) and moved and moved != spec.log_path:
                spec.log_path = moved
        r, w = os.pipe()
        meta = self.hub_meta()
        argv = [
            sys.executable, "-m", "pardash.telemetry.hub",
            "--run-id", spec.run_id, "--log", spec.log_path, "--bind", spec.telemetry_bind,
            "--ready-fd", str(w), "--meta", json.dumps(meta),
        ]  # fmt: skip
        if spec.curve_dir:
            argv += ["--curve-dir", spec.curve_dir]
        if spec.insecure:
            argv += ["--insecure"]
        if resume:
            # Same ports (the ranks know them and reconnect by themselves), same log.
            port = int(self.endpoints["ingest"].rsplit(":", 1)[1])
            argv += ["--port", str(port), "--resume"]
        elif spec.telemetry_port:
            argv += ["--port", str(spec.telemetry_port)]
        if spec.prometheus_port is not None:
            # A restarted hub serves /metrics on the same port again.
            metrics_port = self.endpoints.get("metrics", "").rsplit(":", 1)[-1].split("/")[0] if resume else ""
            argv += ["--prometheus", metrics_port or str(spec.prometheus_port), "--prometheus-addr", spec.prometheus_addr]
        if spec.prometheus_textfile:
            argv += ["--prometheus-textfile", spec.prometheus_textfile]
        if spec.prometheus_per_rank and (spec.prometheus_port is not None or spec.prometheus_textfile):
            argv += ["--prometheus-per-rank"]
        fds = [s.fileno() for s in self._early_socks] if not resume else []
        if fds:
            argv += ["--listen-fds", ",".join(map(str, fds))]
        self.hub = subprocess.Popen(argv, pass_fds=(w, *fds), stdin=subprocess.DEVNULL)
        os.close(w)
        self._let_early_go()
        return r

    def wait_hub(self, r: int) -> dict:
        """Wait for the hub's ready line on ``r``; its endpoints (LaunchError if it failed)."""
        assert self.hub is not None
        line = read_line(r, HUB_READY_TIMEOUT_S)
        os.close(r)
        if not line:
            code = exit_code(self.hub)
            if code is None:  # alive but silent: no use to anyone, and it holds the ports
                self.hub.kill()
                self.hub.wait()
                raise LaunchError(f"the hub did not say it was ready within {HUB_READY_TIMEOUT_S:.0f} s")
            raise LaunchError(f"the hub did not start (exit code {code}); see its message above")
        self.endpoints = json.loads(line)
        return self.endpoints

    def join_remote_hub(self) -> dict:
        """Node > 0: node 0's hub endpoints, and its run id for our ranks' messages (the hub
        drops messages of another run). A hub that does not answer in time is no reason to
        stop the job: the ranks then send with no run id, which the hub accepts once it is up."""
        from pardash.telemetry.client import HubClient, resolve

        spec = self.spec
        endpoints = {k: v for k, v in resolve(spec.remote_hub).items() if k != "run_id"}
        client = HubClient(endpoints["updates"], endpoints["snapshot"], curve=spec.curve_dir or None)
        try:
            deadline = time.monotonic() + HUB_READY_TIMEOUT_S
            while not (client.wait_synced(0.5) or client.refused or self._stopping or time.monotonic() > deadline):
                pass
            if client.synced:
                spec.run_id = _run_id_of_node0(client.state.run_id, spec.remote_hub)
            elif client.refused and not self._stopping:
                spec.run_id = ""
                print(f"pardash: node 0's hub at {spec.remote_hub} refuses this node: {client.refused.replace('this viewer', 'this node')}; training goes "
                      "on, unwatched from this node", file=sys.stderr, flush=True)  # fmt: skip
            elif not self._stopping:
                spec.run_id = ""
                print(f"pardash: no answer from node 0's hub at {spec.remote_hub} (not up yet, not at that "
                      "address: see --master-addr, or its keys are not this node's: both nodes need the same "
                      "--curve-dir, or both --insecure); the job trains once torchrun's rendezvous has every node, and its "
                      "telemetry reaches the hub once that is up",
                      file=sys.stderr, flush=True)  # fmt: skip
        finally:
            client.close()
        return endpoints

    def _follow_node0s_run_id(self) -> None:
        """Node > 0, before torchrun starts: its run folder takes the run's id that node 0's hub
        gave; where that hub has not answered yet, a thread goes on asking it (see
        :meth:`_learn_run_id`)."""
        if self.spec.run_id:
            self._name_run_dir()
            return
        self._learning = threading.Thread(target=self._learn_run_id, name="node0-run-id", daemon=True)
        self._learning.start()

    def _run_dir_by_id(self, run_id: str) -> str:
        """A free path for this node's folder named by ``run_id``: RUN_ID-nodeN beside its
        folder now (RUN_ID-nodeN.2, ... when this node was launched into that run before); ''
        when none is free."""
        spec = self.spec
        base = os.path.join(os.path.dirname(spec.run_dir), f"{run_id}-node{spec.node_rank}")
        for path in (base, *(f"{base}.{n}" for n in range(2, 100))):
            if not os.path.lexists(path):
                return path
        return ""

    def _name_run_dir(self) -> None:
        """Node > 0: its run folder, named by an id of this launch's own until node 0's hub said
        the run's, is renamed RUN_ID-nodeN before torchrun writes in it. So the run's id finds
        it (`pardash report RUN_ID`), and in a --runs-dir both nodes share it stands beside node
        0's RUN_ID, whose log holds this node's telemetry. (The folder the launch made for it
        is still empty: the launch learns the new one from the ready line.)"""
        spec = self.spec
        new = self._run_dir_by_id(spec.run_id)
        try:
            if not new:
                raise FileExistsError("RUN_ID-nodeN.2 to .99 are taken")
            os.rename(spec.run_dir, new)
        except OSError as exc:
            print(f"pardash: this node's run folder {spec.run_dir} keeps its name: it cannot be named by the run's id "
                  f"({exc.strerror or exc})", file=sys.stderr, flush=True)  # fmt: skip
            return
        if spec.output.startswith(spec.run_dir + os.sep):
            spec.output = new + spec.output[len(spec.run_dir) :]
        spec.run_dir = new

    def _learn_run_id(self) -> None:
        """Node > 0 whose node 0's hub did not answer before torchrun started (node 0 late): go
        on asking it until it answers, refuses this node, or the job ends. Its run id then names
        this node's folder by a link (RUN_ID-nodeN): the folder itself keeps its name, torchrun
        and the ranks writing in it by path, and the result.json in it says the run's id."""
        from pardash.telemetry.client import HubClient

        spec = self.spec
        try:
            client = HubClient(self.endpoints["updates"], self.endpoints["snapshot"], curve=spec.curve_dir or None)
        except Exception:
            return  # (keys it could not read were said as the node joined)
        try:
            while not (client.wait_synced(0.5) or client.refused or self._job_over):
                pass
            run_id = _run_id_of_node0(client.state.run_id, spec.remote_hub) if client.synced else ""
        finally:
            client.close()
        if not run_id:
            return
        self._late_run_id = run_id
        link = self._run_dir_by_id(run_id)
        with contextlib.suppress(OSError):
            if link:
                os.symlink(os.path.basename(spec.run_dir), link)
                print(f"pardash: node 0's hub answered: run {run_id}; this node's folder {spec.run_dir} is also {link}",
                      file=sys.stderr, flush=True)  # fmt: skip

    def _early_port(self) -> int:
        """A port P with P..P+2 free on loopback, for a local hub whose ports nobody chose
        (0: start the hub first, as for a remote hub, a chosen port or another bind address)."""
        spec = self.spec
        if spec.remote_hub or spec.telemetry_port or spec.telemetry_bind != "127.0.0.1":
            return 0
        # Above the kernel's ephemeral range, as a hub picks its own (spawn.quiet_ports): picked
        # from it, a port was free here and some process's connecting socket had it as its
        # source port by the time the hub bound it ("cannot bind 127.0.0.1:35807 (Address already
        # in use)", the launch ended), the ranks already told the ingest port.
        # Held, listening, until the hub has them (spawn_hub passes them on, ZMQ_USE_FD): let go
        # between this look and the hub's bind, a port was taken by another process's bind in
        # between ("cannot bind 127.0.0.1:64716 (Address already in use)", a CI run's launch).
        quiet = quiet_ports()
        for i in range(20):
            socks = []
            try:
                first = _listener()
                socks.append(first)
                first.bind(("127.0.0.1", random.choice(quiet) if quiet is not None and i < 15 else 0))
                port = first.getsockname()[1]
                for p in (port + 1, port + 2):
                    s = _listener()
                    socks.append(s)
                    s.bind(("127.0.0.1", p))
                for s in socks:
                    s.listen(LISTEN_BACKLOG)
            except OSError:
                for s in socks:
                    s.close()
                continue
            self._early_socks = socks
            return port
        return 0

    def _let_early_go(self) -> None:
        """Close this process's copies of the early ports' sockets (the hub holds its own)."""
        socks, self._early_socks = self._early_socks, []
        for s in socks:
            s.close()

    def _recent_hub_deaths(self) -> int:
        """Hub deaths within the last HUB_RESTART_WINDOW_S (older ones forgotten)."""
        now = time.monotonic()
        while self._hub_deaths and now - self._hub_deaths[0] > HUB_RESTART_WINDOW_S:
            self._hub_deaths.popleft()
        return len(self._hub_deaths)

    def _watch_hub(self) -> None:
        """Restart a hub that died while the job runs (training never notices)."""
        if self.hub is None or self.hub.poll() is None or self._stopping:
            return
        self.hub_restarts += 1
        self._hub_deaths.append(time.monotonic())
        self._gave_up = False
        print(f"pardash: the hub exited (code {self.hub.returncode}); restarting it", file=sys.stderr, flush=True)
        try:
            self.start_hub(resume=True)
        except LaunchError as exc:
            print(f"pardash: {exc}; training goes on without telemetry", file=sys.stderr, flush=True)

    def start_job(self) -> None:
        spec = self.spec
        env = dict(os.environ)
        env.update(spec.extra_env)
        env[ENDPOINT_VAR] = self.endpoints["ingest"]
        env[RUN_ID_VAR] = spec.run_id
        env[SUPERVISOR_VAR] = str(os.getpid())  # (this node's processes of the job: see _job_processes)
        if spec.curve_dir:
            env[security.CURVE_DIR_VAR] = spec.curve_dir
        env.setdefault("PYTHONUNBUFFERED", "1")
        # ...and a script's prints line by line, as to a terminal (see autorun), the user's own
        # PYTHONUNBUFFERED=1 too (Docker images and CI set it): unbuffered, print() writes a
        # line's pieces apart, and the ranks sharing the output file mixed their lines
        # ("... time 39.8msrank 1 step 84 ...").
        env[LINE_BUFFERED_VAR] = "1"
        if spec.command[:2] == TRAINER_COMMAND and spec.nproc > 1:
            # What torchrun sets for several local ranks (OMP_NUM_THREADS=1), set here, spares
            # every launch its four-line warning of it: the bundled trainer sets its ranks'
            # threads itself and says how many. A script of the user's keeps torchrun's word.
            env.setdefault("OMP_NUM_THREADS", "1")
        if spec.max_restarts > 0:
            # torchrun's workers share its rendezvous TCPStore across restarts, keys and all
            # (no per-attempt prefix): restarted gloo ranks can read their peers' addresses from
            # the failed attempt and die in connectFullMesh ("Connection refused"). Opting out
            # gives each attempt a store of its own.
            env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
        Path(spec.run_dir, "torchrun").mkdir(parents=True, exist_ok=True)
        # No stream of the job is a pipe to this process: a write to a pipe nobody reads fails,
        # so a supervisor that died would take the ranks with it at their next line. torchrun's
        # stderr goes to a file followed here for the deaths torchrun reports: the ranks' output
        # file (stdout and stderr in one, as a terminal shows them), else a file of its own
        # whose lines are passed on to this process's stderr.
        merged = spec.output != "inherit" and not spec.stderr_apart
        if merged:
            path, sink = spec.output, None
        else:
            path, sink = os.path.join(spec.run_dir, "torchrun", "stderr.log"), sys.stderr.buffer
        with contextlib.ExitStack() as files:
            err = files.enter_context(open(path, "ab"))
            out = err if merged else None if spec.output == "inherit" else files.enter_context(open(spec.output, "ab"))
            start = os.fstat(err.fileno()).st_size
            self.job = subprocess.Popen(
                torchrun_argv(spec),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self._stderr_thread = threading.Thread(
            target=self._follow_stderr, args=(path, start, sink), name="torchrun-stderr", daemon=True
        )
        self._stderr_thread.start()

    def _push(self):
        """A PUSH socket to the hub's ingest for the supervisor's own notes."""
        return hub_push(self.endpoints["ingest"], self.spec.curve_dir)

    def _follow_stderr(self, path: str, start: int, sink) -> None:
        """Read torchrun's stderr in ``path`` from ``start`` as it grows, for the deaths
        torchrun reports, and pass it on to ``sink`` (if any) byte for byte as it comes (a
        progress bar redrawn with carriage returns, or a prompt, has no newline to wait for).
        Ends once torchrun has ended and every byte is read, its socket left open for
        :meth:`run`, which says the ranks' ends after torchrun's word on them (see
        :meth:`_note_ends`)."""
        push = self._push()
        summary_rank = None
        rest = b""
        job = self.job
        assert job is not None
        try:
            with open(path, "rb") as fh:
                fh.seek(start)
                while True:
                    ended = job.poll() is not None  # before the read: what it wrote is in the file
                    chunk = fh.read(1 << 16)
                    if not chunk:
                        if not ended:
                            # Caught up: the failures torchrun wrote before it restarted are
                            # told, on this same socket, before the restart is
                            try:
                                self._look_for_restarts(push)
                            except Exception:
                                pass  # (never at the cost of torchrun's stderr)
                            time.sleep(STDERR_POLL_S)
                            continue
                        lines, rest = ([rest] if rest else []), b""
                    else:
                        if sink is not None:
                            try:
                                sink.write(chunk)
                                sink.flush()
                            except (OSError, ValueError):
                                pass
                        *lines, rest = (rest + chunk).split(b"\n")
                        if len(rest) > 1 << 16:  # no newline for a long while: nothing to read in it
                            rest = b""
                    for line in lines:
                        text = line.decode(errors="replace")
                        m = FAILED_WORKER.search(text)
                        if m:
                            code, local_rank = int(m.group(1)), int(m.group(2))
                            rank = self.global_rank(local_rank)
                            self.report_exit(push, rank, code)
                            continue
                        m = SUMMARY_RANK.match(text)
                        if m:
                            summary_rank = int(m.group(1))
                            continue
                        m = SUMMARY_CODE.match(text)
                        if m and summary_rank is not None:
                            self.report_exit(push, summary_rank, int(m.group(1)))
                            summary_rank = None
                    if not chunk:
                        break
        except OSError:
            pass  # the file went (its folder removed): the deaths are told by the ranks' own exits
        finally:
            self._stderr_push = push

    def report_exit(self, push, rank: int, code: int) -> None:
        """Tell the hub a rank died, on its behalf (seq -1: not part of the rank's own count).
        The hub ignores it when the rank already said so itself."""
        why = f"killed by signal {-code} ({signal.Signals(-code).name})" if code < 0 and -code in signal.valid_signals() else f"exit code {code}"
        msg = schema.Event(
            run=self.spec.run_id, rank=rank, seq=-1, t=time.time(), name="exit", code=code,
            message=f"torchrun: rank {rank} {why}",
        )  # fmt: skip
        try:
            push.send(schema.encode(msg))
        except Exception:
            pass

    def stop(self, signum: int | None = None, _frame: object = None) -> None:
        """Stop the job: SIGTERM to torchrun's process group, SIGKILL after a grace period.
        Once: a second SIGTERM broke into torchrun's own stop of the ranks (a traceback of its
        agent's under the launch's last lines)."""
        if not self._stopping and signum is not None:
            self._stopped_by = signum
        if not self._stopping:
            self._stop_t = time.time()
        self._stopping = True
        if self.job is not None and self.job.poll() is None and not self._told_to_stop:
            self._told_to_stop = True
            _signal_group(self.job, signal.SIGTERM)

    def run(self, ready_fd: int | None) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        # In a session of its own, no terminal's hangup reaches it: a SIGHUP or SIGQUIT is a
        # headless launch's own, passed on (its terminal closed, Ctrl-\), a stop as torchrun's.
        signal.signal(signal.SIGHUP, self.stop)
        signal.signal(signal.SIGQUIT, self.stop)
        early = self._early_port()
        try:
            if early:
                # The ranks take seconds to import torch; the hub starts meanwhile, on ports
                # picked here, and ZeroMQ holds their first messages until it binds.
                self.spec.telemetry_port = early
                ready = self.spawn_hub()
                self.endpoints = {"ingest": f"tcp://127.0.0.1:{early}"}
                if not self._stopping:  # (stopped as it started: no job to stop again)
                    self.start_job()
                self.wait_hub(ready)
            else:
                self.start_hub()
                if self.spec.remote_hub and not self._stopping:
                    self._follow_node0s_run_id()
        except LaunchError as exc:
            if self.job is not None:  # nothing half-started stays behind
                self.stop()
                self._wait_job()
            _tell(ready_fd, {"error": str(exc)})
            return 2
        if self._stopping and self.job is None:  # stopped while waiting for a hub (node > 0: node 0's)
            _tell(ready_fd, {"error": "stopped before the job started"})
            self._finish(128 + self._stopped_by)
            return 128 + self._stopped_by
        if self.job is None:
            self.start_job()
        # (with the run's id and folder, which on a node > 0 node 0's hub has just given: the launch takes them)
        _tell(ready_fd, {**self.endpoints, "supervisor_pid": os.getpid(), "run_id": self.spec.run_id, "run_dir": self.spec.run_dir},
              close=False)  # fmt: skip
        self._result_fd = ready_fd
        if self._under_a_tui():
            off_the_terminal(self.spec.output)  # (said before the launch had its answer: still the terminal)
        raw = self._wait_job()
        code = exit_status(raw)
        if raw < 0 and not self._stopping:
            self._end_orphans(-raw)
        if self._stopping and code != 0:
            # As the shell says for the signal this process took (torchrun's own code for the
            # SIGTERM it was sent said 143 of a person's stop too): 130, 143.
            code = 128 + self._stopped_by
        self._say_ends(raw, code)
        self._finish(code)
        return code

    def _say_ends(self, raw: int, code: int) -> None:
        """Once torchrun has ended (``raw``, its return code; ``code``, the launch's): the
        rest of its stderr read, then the ranks' ends it did not say (:meth:`_note_ends`)."""
        t = getattr(self, "_stderr_thread", None)
        push = None
        if t is not None:
            t.join(5)  # the ranks' last lines pass through it
            # Its socket, for the notes after torchrun's word: sent on another, they raced it
            # to the hub, which takes the first note of a rank's end (a rank SIGKILLed on node
            # 1 read "stopped by torchrun" one time in four, its -9 dropped). (A thread still
            # reading after 5 s keeps its socket: one of their own then.)
            push = None if t.is_alive() else getattr(self, "_stderr_push", None)
        try:
            self._note_ends(raw, code, push)
        finally:
            if push is not None:
                push.close()

    def _note_ends(self, raw: int, code: int, push=None) -> None:
        """Say how this node's ranks ended that never said so themselves (the hub drops these
        notes for a rank that did, or that torchrun's word, said before on ``push``, named),
        once torchrun has ended with ``raw`` (its return code; ``code``, the launch's)."""
        if not self.ranks_started:
            return  # a torchrun that started no rank (it refused its command line) stopped none
        if self._torchrun_killed:
            self._note_exits(-15, "stopped by pardash after torchrun was killed", push)
        elif raw < 0 and not self._stopping:
            # torchrun killed (nothing here sent it a signal), and its ranks gone with it though
            # none died before it (torchrun would have said): killed with it, a machine lost,
            # the OOM killer, a kill of the whole group. Not "stopped by torchrun", which was
            # dead; nothing sent them a SIGTERM.
            self._note_exits(raw, f"gone with torchrun, which was killed ({_signal_text(-raw)})", push)
        elif code != 0 or self._stopping:
            # Every rank that never said it exited was stopped: by torchrun after another rank
            # failed, or by the stop, as it began (``_stop_t``): another node's rank that failed
            # after it failed of it, however late this note comes, after torchrun's end.
            if self._stopping:
                self._note_exits(-15, "stopped " + self._stop_note(), push, t=self._stop_t)
            else:
                self._note_exits(-15, "stopped by torchrun", push)
        else:
            # torchrun ends with 0 only when every rank did: a rank silent about it (os._exit
            # skips every exit hook) finished.
            self._note_exits(0, "finished (torchrun ended with 0)", push)

    def _stopper(self) -> str:
        """Who stopped the job: 'by you' (Ctrl-C, Stop in the launch's viewer: SIGINT), 'by a
        viewer (pardash attach, pid N)' where an attached viewer's Stop asked for it (its note in
        the run folder, STOP_REQUEST), else the signal (a scheduler's time limit, `kill`,
        `docker stop`: no person's doing, maybe)."""
        if self._stopped_by == signal.SIGINT:
            asked = stop_request(self.spec.run_dir, self._stop_t)
            if asked:
                return f"by a viewer ({asked})"
        return stopper_text(self._stopped_by)

    def _stop_note(self) -> str:
        """Who stopped this node's ranks, as their exit notes say it to every node's readers
        (node 0's hub and log, each node's viewer, the report): :meth:`_stopper`'s words on one
        node; on a job of several nodes, where it was done ('by Ctrl-C on node 1 (HOST)', 'by
        the viewer on node 0 (HOST)', 'by SIGTERM on node 1 (HOST)'). Each node's "by you" said
        to the people at the others that they had stopped it ("rank 1 was stopped by you first"
        on node 0 of a Ctrl-C on node 1); on one node, 'by Ctrl-C at the launch' or 'by the
        launch's viewer'. The launch's own last line keeps "by you" (result.json's
        ``stopper``): it is read where the stop was made."""
        spec = self.spec
        who = self._stopper()
        here = self._stopped_by == signal.SIGINT and who == stopper_text(signal.SIGINT)
        if spec.nnodes <= 1:
            # (nor to the people attached to a job of one node: "ranks 0-1 stopped by you" in
            # their viewers, the log and its report, of a Ctrl-C at the launch, review 300)
            return ("by the launch's viewer" if self._under_a_tui() else "by Ctrl-C at the launch") if here else who
        if here:
            # A person's stop here: a Stop chosen in the launch's viewer (which has the
            # terminal and its Ctrl-C), else Ctrl-C at a headless launch.
            who = "by the viewer" if self._under_a_tui() else "by Ctrl-C"
        return f"{who} on node {spec.node_rank} ({socket.gethostname()})"

    def _note_exits(self, code: int, what: str, push=None, t: float | None = None) -> None:
        """Say, for every rank of this node, that it exited with ``code`` (seq -1: the
        launcher's word, which the hub takes only for a rank that has not said it itself), at
        ``t`` (default now), on ``push`` (default a socket of its own)."""
        self._note_ranks("exit", code, what, push, t)

    def _note_stopping(self) -> None:
        """Say, as the stop begins, that this node's ranks are being stopped (and by whom):
        the hub judges no stall or silence of theirs from then on. A framework's ranks may take
        seconds to end (Lightning's ~10 s), quiet: a Stop of a healthy job printed "[stalled]
        rank 1 stalled in forward" and raised its alert before the exit notes came."""
        if self.ranks_started and not self._noted_stopping:
            self._noted_stopping = True
            self._note_ranks("stopping", None, self._stop_note(), t=self._stop_t)

    def _note_ranks(self, name: str, code: int | None, what: str, push=None, t: float | None = None) -> None:
        """The launcher's note ``name`` (seq -1) of every rank of this node: see :meth:`_note_exits`."""
        own = push is None
        if own:
            push = self._push()
        spec = self.spec
        try:
            for local in range(spec.nproc):
                rank = self.global_rank(local)
                # (the same text for every rank: the event log says it once for all of them)
                msg = schema.Event(run=spec.run_id, rank=rank, seq=-1, t=t or time.time(), name=name, code=code, message=what)
                push.send(schema.encode(msg))
        finally:
            if own:
                push.close()

    def _look_for_ranks(self) -> None:
        if self.job is None or (self.ranks_started and len(self._global) >= self.spec.nproc):
            return
        try:
            ranks = psutil.Process(self.job.pid).children()
        except psutil.Error:
            return
        self.ranks_started = self.ranks_started or bool(ranks)
        for p in ranks:  # their global ranks, as torchrun gave them
            try:
                env = p.environ()
                self._global[int(env["LOCAL_RANK"])] = int(env["RANK"])
            except (psutil.Error, KeyError, ValueError):
                continue

    def global_rank(self, local: int) -> int:
        """This node's ``local`` rank's global rank: as torchrun gave it (nodes may have
        another --nproc each: then node 1's first rank is not 1 x its own --nproc), else the
        same --nproc on every node."""
        found = self._global.get(local)
        return found if found is not None else self.spec.node_rank * self.spec.nproc + local

    def _job_processes(self) -> list[psutil.Process]:
        """This node's processes of the job still running (torchrun's ranks, their data loader
        workers), wherever they were reparented: see :func:`job_processes`."""
        return job_processes(os.getpid(), self.spec.run_id)

    def _end_orphans(self, signum: int) -> None:
        """torchrun died of ``signum``, which nothing here sent (the OOM killer, a `kill -9` of
        it alone): its ranks, orphaned, trained on with no one to report their end or stop them,
        while the launch said they had exited. Stop them as torchrun would have: SIGTERM, then
        SIGKILL after the grace (each rank's process group, its data loader workers with it)."""
        alive = self._job_processes()
        if not alive:
            return  # (its ranks had ended: only torchrun died)
        self._torchrun_killed = signum
        print(f"pardash: torchrun was killed ({_signal_text(signum)}); stopping its {len(alive)} process(es) here, "
              "which nothing else would", file=sys.stderr, flush=True)  # fmt: skip
        _stop_job_processes(alive, STOP_GRACE_S)

    def _look_for_restarts(self, push) -> None:
        """Tell the hub when torchrun restarts the job (``--max-restarts``): its log folder
        gains ``attempt_N`` as it starts the workers again. The ranks' hellos say it too
        (their restart count), but a script that fails before its first step sends none: its
        restarts went uncounted, and each attempt's exits read as one. Called by the thread
        that reads torchrun's stderr once it has read all of it, on its socket: torchrun says
        a worker failed before it makes the next attempt, so the hub hears the failure (the
        last attempt's exit) first; the other way round, the exit would count for the new one."""
        if not self.spec.max_restarts or self._stopping:
            return
        attempt = max((n for n, _ in attempt_dirs(os.path.join(self.spec.run_dir, "torchrun"))), default=0)
        if attempt <= self._attempt:
            return
        self._attempt = attempt
        spec = self.spec
        for local in range(spec.nproc):
            rank = self.global_rank(local)
            msg = schema.Event(run=spec.run_id, rank=rank, seq=-1, t=time.time(), name="restart", code=attempt,
                               message=f"rank {rank} restarted by torchrun (restart {attempt})")  # fmt: skip
            with contextlib.suppress(Exception):
                push.send(schema.encode(msg))

    def _wait_job(self) -> int:
        assert self.job is not None
        deadline = None
        while True:
            if self._stopping and not self._told_to_stop:
                self.stop()  # asked while torchrun was being started, before there was a job to tell
            self._look_for_ranks()
            code = self.job.poll()
            if code is not None:
                return code
            if self._recent_hub_deaths() < MAX_HUB_RESTARTS:
                self._watch_hub()
            elif not self._gave_up and self.hub is not None and self.hub.poll() is not None:
                self._gave_up = True
                print(f"pardash: the hub died {len(self._hub_deaths) + 1} times in {HUB_RESTART_WINDOW_S / 60:.0f} minutes; "
                      "no more restarts: training goes on without telemetry, and the log ends here", file=sys.stderr, flush=True)
            if self._stopping and deadline is None:
                deadline = time.monotonic() + STOP_GRACE_S
                self._note_stopping()
            if deadline is not None and time.monotonic() > deadline:
                _kill_job(self.job)
            time.sleep(0.1)

    def _finish(self, code: int) -> None:
        spec = self.spec
        self._job_over = True
        learning = getattr(self, "_learning", None)
        if learning is not None:
            learning.join(2)  # (it asks every 0.5 s: its answer, if it had one, goes in the result)
        self._follow_log()  # (the log went on in another file: result.json names that one)
        result = {"run_id": spec.run_id, "code": code, "stopped": self._stopping, "log": spec.log_path,
                  "hub_restarts": self.hub_restarts}  # fmt: skip
        if getattr(spec, "command", None):  # (a stand-in spec of the tests has none)
            result.update(command=user_command(spec.command), cwd=os.getcwd())
        if code != 0 and not getattr(self, "ranks_started", True) and (busy := self._master_port_busy()):
            result["master_port_busy"] = busy  # (the launch's last line says it: see trainer/torchrun.py)
        if getattr(self, "_node_result", None):
            # Node > 0 writes no log: node 0's hub keeps every node's telemetry in its own. (A
            # run_id null: node 0's hub never answered this node.)
            result.update(self._node_result, run_id=spec.run_id or self._late_run_id or None)
        if self._gave_up:
            result["hub_given_up"] = True  # the log ends where it did (outcome_line)
        if self._torchrun_killed:
            result["torchrun_killed"] = self._torchrun_killed
        if self._stopping:
            result["stop_t"] = self._stop_t
            result["stopper"] = self._stopper()  # what a rank's exit after it is (outcome_line)
        written = self._write_result(result)
        with contextlib.suppress(OSError):  # (said in result.json's stopper now)
            os.unlink(os.path.join(spec.run_dir, STOP_REQUEST))
        # ... and down the pipe the launch started this process with, which no full disk
        # fails: without the file the launch took the job's end for its supervisor's death
        # ("its ranks train on without it"), or (the TUI) for a detach after 15 s.
        _tell(getattr(self, "_result_fd", None), result)
        self._result_fd = None
        # The ranks have flushed their last messages as they exited; the hub takes them before
        # it stops (until its ingest is quiet, hub.FINAL_QUIET_MS). A viewer still attached
        # keeps the hub up so it can read the end.
        while spec.viewer_pid and registry.pid_alive(spec.viewer_pid) and not self._stopping:
            time.sleep(0.2)
        if getattr(spec, "nnodes", 1) > 1 and code != 0 and not self._stopping and not getattr(spec, "remote_hub", ""):
            self._await_nodes_ends()
        logs = [spec.log_path]
        if self.hub is not None and self.hub.poll() is None:
            self._follow_log()  # (where it is as the hub stops: a copy is named after it)
            logs.append(spec.log_path)
            self.hub.send_signal(signal.SIGTERM)
            try:
                self.hub.wait(10)
            except subprocess.TimeoutExpired:
                self.hub.kill()
        # A log its disk could still not take as the hub stopped went, whole, to a complete copy
        # (the launch's last line names it): result.json names that file, which report reads.
        if written and self.hub is not None and not getattr(spec, "remote_hub", "") and self.hub.poll() is not None:
            copy = complete_copy(logs, [spec.run_dir], self.hub.pid)
            if copy is not None:
                spec.log_path = copy
                self._write_result({**result, "log": copy}, quiet=True)

    def _master_port_busy(self) -> int:
        """The master port torchrun's rendezvous could not listen on, another program holding
        it (taken after the launch found it free), as torchrun wrote it in its --log-dir; 0 for
        none."""
        try:
            with open(os.path.join(self.spec.run_dir, "torchrun", MASTER_PORT_BUSY_FILE)) as fh:
                return int(fh.read().strip())
        except (OSError, ValueError):
            return 0

    def _await_nodes_ends(self) -> None:
        """Node 0 of several, its job failed (of itself, or of another node's stop): the other
        nodes' launchers note how their ranks ended once their own torchrun has ended ("stopped
        by Ctrl-C on node 1 (HOST)"), which can be after this node's ranks failed of it. The hub
        stayed up for them no longer than its ingest's last quiet moment, and a Ctrl-C on node 1
        could reach node 0's log as rank 0's failure alone. Kept up until every rank's end is
        known, or NODES_END_WAIT_S (a node lost says nothing)."""
        from pardash.telemetry.client import HubClient
        from pardash.telemetry.state import run_over

        endpoints = getattr(self, "endpoints", None) or {}
        if self.hub is None or self.hub.poll() is not None or "updates" not in endpoints:
            return
        try:
            client = HubClient(endpoints["updates"], endpoints["snapshot"], curve=self.spec.curve_dir or None)
        except Exception:
            return
        try:
            deadline = time.monotonic() + NODES_END_WAIT_S
            while time.monotonic() < deadline and not client.refused and self.hub.poll() is None:
                client.poll()
                if client.synced and run_over(client.state):
                    return
                time.sleep(0.1)
        finally:
            client.close()

    def _follow_log(self) -> None:
        """``spec.log_path`` where the hub writes the log now: its registry entry says so
        (hub.follow_log) when the log went on in another file (another file took its path, its
        folder vanished)."""
        spec = self.spec
        if getattr(spec, "remote_hub", ""):
            return  # (node > 0: node 0's hub keeps the log)
        with contextlib.suppress(Exception):
            moved = (registry.entry(spec.run_id) or {}).get("log")
            if isinstance(moved, str) and moved and os.path.abspath(moved) != os.path.abspath(spec.log_path):
                spec.log_path = moved

    def _write_result(self, result: dict, *, quiet: bool = False) -> bool:
        """The run folder's result.json, whole or not at all (a full disk must not leave half a
        file, nor the hub running); False where it could not be written (said, unless ``quiet``)."""
        spec = self.spec
        try:
            Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
            tmp = Path(spec.run_dir, "result.json.tmp")
            tmp.write_text(json.dumps(result))
            tmp.replace(Path(spec.run_dir, "result.json"))
            return True
        except OSError as exc:
            if not quiet:
                print(f"pardash: cannot write the run's result.json ({exc.strerror or exc}); the job's exit code is {result.get('code')}",
                      file=sys.stderr, flush=True)  # fmt: skip
            with contextlib.suppress(OSError):
                Path(spec.run_dir, "result.json.tmp").unlink(missing_ok=True)
            return False


def complete_copy(logs: list[str], spare_dirs: list[str], hub_pid: int) -> str | None:
    """The complete copy of a log that the hub ``hub_pid`` wrote as it stopped, its disk still
    unable to take the lines it held (telemetry/recorder.py, ``NAME.complete-PID.jsonl`` in
    the spare folder, the run's, else the temp folder), for the log at any of ``logs``: the
    copy's path, as the hub named it; None where it wrote none. A file of that name is taken
    for it only where its closing lines say it is where the log went on ("log continued in
    full at" it): one another hub of that pid left is never it."""
    import tempfile

    from pardash.telemetry.recorder import CONTINUED_AT

    folders = [*(Path(d).absolute() for d in spare_dirs if d), Path(tempfile.gettempdir())]
    for log in dict.fromkeys(logs):
        old = Path(log)
        name = f"{old.stem}.complete-{hub_pid}{old.suffix}"
        for folder in dict.fromkeys(folders):
            copy = folder / name
            said = f"{CONTINUED_AT}{copy} ("
            try:
                with open(copy, "rb") as fh:
                    fh.seek(max(0, os.fstat(fh.fileno()).st_size - COPY_TAIL_BYTES))
                    tail = fh.read().splitlines()
            except OSError:
                continue
            for line in reversed(tail):
                with contextlib.suppress(ValueError, AttributeError):
                    message = json.loads(line).get("message")
                    if isinstance(message, str) and said in message:
                        return str(copy)
    return None


COPY_TAIL_BYTES = 64 << 10
"""How much of a complete copy's end :func:`complete_copy` reads for its closing lines."""


def result_fields_of_node(hub: str, node_rank: int, curve_dir: str = "") -> dict:
    """A node > 0's result.json fields for the log: none here (``log`` null), node 0's hub at
    ``hub`` (tcp://HOST:PORT: `pardash attach` and `record` take it) keeps it, this node's
    rank, whose ranks' telemetry is in it, and the key folder that hub takes (``curve_dir``,
    where it has keys: without it, `record` and `attach` are refused)."""
    return {"log": None, "hub": hub, "node_rank": node_rank, **({"curve_dir": curve_dir} if curve_dir else {})}


def _signal_text(signum: int) -> str:
    """'SIGKILL' for 9 ('signal 99' for a number no signal has)."""
    return signal_name(-signum) or f"signal {signum}"


STOP_REQUEST = "stop-request.json"
"""What an attached viewer's Stop leaves in the run folder before its SIGINT to the supervisor:
{"by": "pardash attach, pid N", "t": time}, so the launch says whose stop it was (it said
"stopped by you" to the person at the launch's terminal, who had done nothing)."""
STOP_REQUEST_S = 30.0
"""How far a stop may be from its request's time to be that request's."""


def stop_request(run_dir: str, stop_t: float) -> str:
    """Whose Stop (an attached viewer's) stopped the job at ``stop_t``, from its note in
    ``run_dir``; '' where none asked then."""
    try:
        with open(os.path.join(run_dir, STOP_REQUEST)) as fh:
            asked = json.load(fh)
        by, t = asked["by"], float(asked["t"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    return by if isinstance(by, str) and by and abs(stop_t - t) <= STOP_REQUEST_S else ""


def stopper_text(signum: int) -> str:
    """Who stopped a job with ``signum``: 'by you' (Ctrl-C, a Stop chosen in a viewer: SIGINT),
    else the signal (a scheduler's time limit, `kill`, `docker stop`: no person's doing, maybe)."""
    return "by you" if signum == signal.SIGINT else f"by {_signal_text(signum)}"


def exit_status(code: int) -> int:
    """A process's return code as an exit status: a death by signal N (code -N) is the shell's
    128 + N (sys.exit(-15) would exit 241, -15's low byte)."""
    return 128 - code if code < 0 else code


def _tell(fd: int | None, info: dict, *, close: bool = True) -> None:
    """Write ``info`` as a line to ``fd`` (the launch's pipe; gone if it has exited), then close it
    unless told not to."""
    if fd is None:
        return
    try:
        os.write(fd, (json.dumps(info) + "\n").encode())
    except OSError:
        pass
    if close:
        with contextlib.suppress(OSError):
            os.close(fd)


def main(argv: list[str] | None = None) -> int:
    """``python -m pardash.trainer.supervisor --ready-fd N SPEC_JSON``: the supervisor."""
    argv = sys.argv[1:] if argv is None else argv
    ready_fd = None
    if argv[:1] == ["--ready-fd"]:
        ready_fd = int(argv[1])
        argv = argv[2:]
    spec = LaunchSpec(**json.loads(argv[0]))
    # The terminal it was started from may close (ssh drops) or its pipe's reader exit: a note
    # it cannot print must not end the supervisor, which restarts the hub and outlives them.
    unbreakable_stdio()
    return Supervisor(spec).run(ready_fd)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["HUB_READY_TIMEOUT_S", "LaunchError", "LaunchSpec", "Supervisor", "TRAINER_COMMAND", "exit_status", "result_fields_of_node",
           "stopper_text", "torchrun_argv"]
