"""The ``pardash`` command: a thin layer over functions the tests call directly (its flags and
help are :mod:`pardash.parser`'s)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from typing import Sequence

from pardash.parser import PROG, build_parser, fail
from pardash.recorded import cmd_export, cmd_report, find_log
from pardash.telemetry import registry


# -- launch -------------------------------------------------------------------------------


def _gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0


def _port_free(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def prepare_launch(ns: argparse.Namespace, script: list[str]):
    """Validate a launch and build its LaunchSpec; raises SystemExit(2) with one line."""
    from pardash.trainer import config as train_config
    from pardash.trainer.launcher import LaunchError, new_spec

    try:
        cfg = train_config.from_args(ns)
    except ValueError as exc:
        fail(str(exc))
    nproc = ns.nproc if ns.nproc is not None else (1 if cfg.strategy in ("single", "dp") else 2)
    if nproc < 1:
        fail(f"--nproc {nproc}: need at least 1 rank per node")
    if ns.nnodes < 1 or not 0 <= ns.node_rank < ns.nnodes:
        fail(f"--nnodes {ns.nnodes} --node-rank {ns.node_rank}: node rank must be in 0..nnodes-1")
    if os.path.exists(ns.runs_dir) and not os.path.isdir(ns.runs_dir):
        fail(f"--runs-dir {ns.runs_dir} is a file; give a folder (default ./runs)")
    world = nproc * ns.nnodes
    if not script and not ns.module:
        try:
            cfg.check_world_size(world)
        except ValueError as exc:
            fail(str(exc))
        if cfg.device == "cuda" and _gpu_count() == 0:
            fail("--device cuda: no NVIDIA GPU is visible here; use --device cpu (or auto)")
        if cfg.precision == "bf16" and _gpu_count() == 0:
            fail("--precision bf16 needs a GPU and none is visible here; use --precision fp32")
    elif given := _trainer_flags_given(cfg):
        fail(f"{', '.join(given)}: the bundled trainer's flags, which your script would not see; pass your script's own flags after `--`")
    elif script and not ns.module and script[0] in ("-m", "--module"):
        module = script[1] if len(script) > 1 else "MODULE"
        fail(f"-- {script[0]} {module}: a module goes before `--`: pardash launch -m {module} -- ARGS")
    elif script and not ns.module and not os.path.isfile(script[0]):
        fail(f"{script[0]}: no such script (the command after `--` is run as `python SCRIPT ARGS`)")
    elif ns.module:
        import importlib.util

        top = ns.module.split(".")[0]
        sys.path.insert(0, os.getcwd())  # where torchrun's `python -m` looks first
        try:
            found = importlib.util.find_spec(top) is not None  # the top level only: nothing is imported
        except (ImportError, ValueError):
            found = False
        finally:
            sys.path.pop(0)
        if not found:
            fail(f"-m {ns.module}: no module {top!r} here (run from the folder that holds it, or install it)")
    if ns.master_port is not None and ns.node_rank == 0:
        host = ns.master_addr or "127.0.0.1"
        if not _port_free("0.0.0.0" if host not in ("127.0.0.1", "localhost") else "127.0.0.1", ns.master_port):
            fail(f"--master-port {ns.master_port} is busy; pick a free port or leave it out")
    telemetry_port = ns.telemetry_port or (29600 if ns.nnodes > 1 else 0)
    bind = ns.telemetry_addr or ("127.0.0.1" if ns.nnodes == 1 else (ns.master_addr or "127.0.0.1"))
    if telemetry_port and ns.node_rank == 0:
        for port in (telemetry_port, telemetry_port + 1, telemetry_port + 2):
            if not _port_free(bind, port):
                fail(f"--telemetry-port {telemetry_port}: port {port} is busy; pick another (the hub uses PORT..PORT+2)")
    # Nodes > 0 start no hub: their ranks send to node 0's, at the same address and port.
    remote_hub = f"tcp://{bind}:{telemetry_port}" if ns.node_rank > 0 else ""
    insecure = getattr(ns, "insecure", False)
    curve_dir = _check_security(bind if not remote_hub else "127.0.0.1", getattr(ns, "curve_dir", None), insecure, hub=not remote_hub)
    if ns.module:
        from pardash.trainer import autorun

        command = autorun.torchrun_command(["-m", ns.module, *script])
    elif script:
        from pardash.trainer import autorun

        command = autorun.torchrun_command(script)
    else:
        command = ["-m", "pardash.trainer.train", *cfg.to_argv()]
    try:
        spec = new_spec(
            log_path=ns.log,
            runs_dir=ns.runs_dir,
            nproc=nproc,
            nnodes=ns.nnodes,
            node_rank=ns.node_rank,
            master_addr=ns.master_addr,
            master_port=ns.master_port,
            max_restarts=ns.max_restarts,
            telemetry_bind=bind,
            telemetry_port=telemetry_port,
            remote_hub=remote_hub,
            curve_dir=curve_dir,
            insecure=insecure,
            command=command,
            strategy=cfg.strategy if not (script or ns.module) else "script",
            world_size=world,
        )
    except LaunchError as exc:
        fail(str(exc))
    return spec


def _trainer_flags_given(cfg) -> list[str]:
    """The bundled trainer's flags set away from their defaults (with a script of one's own they
    would be silently ignored)."""
    import dataclasses

    default = type(cfg)()
    return [f"--{f.name.replace('_', '-')}" for f in dataclasses.fields(cfg) if getattr(cfg, f.name) != getattr(default, f.name)]


def _check_security(bind: str, curve_dir: str | None, insecure: bool, *, hub: bool) -> str:
    """The absolute key folder to use ('' for none), after checking that a hub may bind
    ``bind`` and that the keys it and the ranks need are there; fails with one line."""
    from pardash.telemetry import security

    curve_dir = curve_dir or security.curve_dir_from_env() or ""
    refusal = security.bind_refusal(bind, curve=bool(curve_dir), insecure=insecure)
    if refusal:
        fail(refusal)
    if curve_dir:
        try:
            if hub:
                security.load_server_keys(curve_dir)
            security.load_client_keys(curve_dir)
        except security.CurveKeyError as exc:
            fail(str(exc))
    return os.path.abspath(curve_dir) if curve_dir else ""


JOB_STOP_WAIT_S = 60.0
"""How long an attached viewer that stops a job waits for it to end (torchrun's grace is 10 s)."""
JOB_END_WAIT_S = 15.0
"""How long a viewer that quits after every rank is done waits for the job to end."""


def _headless_without_terminal(ns: argparse.Namespace) -> None:
    """Without a terminal (CI, nohup, a pipe) nobody could see the TUI or quit it, and the
    command would wait for its `q` for ever: progress lines instead, said once."""
    if not ns.headless and not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(f"{PROG}: no terminal here, so progress lines instead of the TUI (as --headless)", file=sys.stderr, flush=True)
        ns.headless = True


def cmd_launch(ns: argparse.Namespace, script: list[str]) -> int:
    from pardash.telemetry.client import HubClient
    from pardash.trainer.launcher import LaunchError, start

    _check_prometheus(ns)
    spec = prepare_launch(ns, script)
    _headless_without_terminal(ns)
    _prometheus_spec(ns, spec)
    if not ns.headless:
        spec.output = os.path.join(spec.run_dir, "output.log")
        spec.viewer_pid = os.getpid()
    else:
        from pardash.telemetry.printer import is_terminal

        if is_terminal(sys.stdout):
            # The progress bar owns the terminal: the ranks write to a file that the printer
            # follows and prints above the bar (a viewer that dies never breaks their stdout).
            spec.output = os.path.join(spec.run_dir, "output.log")
    if spec.remote_hub:  # node > 0: node 0's hub names the run and records it
        print(f"{PROG}: node {spec.node_rank} of {spec.nnodes}, {spec.world_size} rank(s), telemetry to node 0's hub at {spec.remote_hub}", flush=True)
    else:
        print(f"{PROG}: run {spec.run_id}, {spec.world_size} rank(s), log {spec.log_path}", flush=True)
    try:
        job = start(spec)
    except LaunchError as exc:
        fail(str(exc))
    if job.endpoints.get("metrics"):
        print(f"{PROG}: Prometheus metrics on {job.endpoints['metrics']}", flush=True)
    client = HubClient(job.endpoints["updates"], job.endpoints["snapshot"], run_id=spec.run_id, curve=spec.curve_dir or None)
    try:
        if ns.headless:
            from pardash.telemetry.printer import ProgressPrinter

            printer = ProgressPrinter(client, every_s=ns.every, tail=None if spec.output == "inherit" else spec.output)
            # Headless, this process stands for the job (as torchrun does): a SIGTERM (`timeout`,
            # `kill`, a CI job cancelled) stops the job as Ctrl-C does, rather than leave it
            # running unwatched. (A viewer killed outright, SIGKILL, leaves it running.)
            stopped_by: list[int] = []

            def on_sigterm(*_: object) -> None:
                stopped_by.append(signal.SIGTERM)
                raise KeyboardInterrupt

            signal.signal(signal.SIGTERM, on_sigterm)
            try:
                printer.follow(lambda: job.poll() is not None)
            except KeyboardInterrupt:
                stopped_by.append(signal.SIGINT)
                print(f"{PROG}: stopping the job...", file=sys.stderr, flush=True)
                job.stop()
                printer.follow(lambda: job.poll() is not None)
            code = job.wait()
            if stopped_by and code != 0:
                code = 128 + stopped_by[0]  # as the shell says for the signal this process took: 130, 143
            elif _supervisor_lost(job, code):
                return _follow_unsupervised(job, client, printer, code)
        else:
            from pardash.tui.app import make_app

            app = make_app(client, launched=True, title=f"pardash {spec.run_id}")
            choice = app.run()
            # None: the app ended some other way (crashed, terminal gone). The job must not
            # die with its viewer, so that counts as a detach.
            if choice == "over":  # every rank is done: the job ends by itself
                try:
                    code = job.wait(JOB_END_WAIT_S)
                except subprocess.TimeoutExpired:  # torchrun restarting them (--max-restarts)
                    choice = "detach"
            if choice in ("detach", None):
                how = "the viewer ended on an error" if app.return_code else "detached"
                print(f"{PROG}: {how}; the job goes on. `{PROG} attach {spec.run_id}` to watch it again, log {spec.log_path}")
                return app.return_code or 0
            if choice != "over":
                job.stop()
                code = job.wait()
            if _supervisor_lost(job, code):
                print(f"{PROG}: {_lost_words(code)}: its ranks may train on without it; `{PROG} attach {spec.run_id}` follows them, "
                      f"log {spec.log_path}", file=sys.stderr)  # fmt: skip
                return 1
    finally:
        client.close()
    from pardash.telemetry.printer import outcome_line

    # A node > 0 records nothing itself: node 0's hub keeps the log.
    # ... and where the hub writes it now (it goes on beside its path when another file took it).
    log_path = f"kept by node 0's hub ({spec.remote_hub})" if spec.remote_hub else (client.stats.log_path or spec.log_path)
    line = outcome_line(client.state, code, job.result(), log_path, log_error=client.stats.log_error)
    print(line, file=sys.stderr if code else sys.stdout)
    return code


def _supervisor_lost(job, code: int) -> bool:
    """The job's supervisor ended without a result (killed outright, SIGKILL or the OOM killer):
    torchrun and the ranks outlive it, so its exit code is not the job's."""
    return code != 0 and not job.result()


def _lost_words(code: int) -> str:
    try:
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"ended with code {code}"
    except ValueError:
        how = f"ended with code {code}"
    return f"the launcher's supervisor was {how} before the job ended"


def _follow_unsupervised(job, client, printer, code: int) -> int:
    """Headless, the supervisor gone: the ranks train on (the hub records them until they are
    done): follow them as ``pardash attach`` does and end with the run's own outcome."""
    from pardash.telemetry.failures import failure_summary
    from pardash.telemetry.printer import follow_attached
    from pardash.telemetry.state import run_over

    spec = job.spec
    print(f"{PROG}: {_lost_words(code)}; its ranks train on without it (no hub restarts now): following them to the end "
          f"(Ctrl-C stops watching, not them; `{PROG} attach {spec.run_id}` follows them again)", file=sys.stderr, flush=True)  # fmt: skip
    entry = registry.find(spec.run_id) or {"pid": job.endpoints.get("pid")}
    # The job lives while its hub does: the hub, unsupervised, stops once every rank is done
    # (after a failure it waits for torchrun to start them again, --max-restarts).
    client.info = {**entry, "supervisor_pid": entry.get("pid")}
    try:
        line = follow_attached(printer, client)
    except KeyboardInterrupt:
        print(f"{PROG}: stopped watching; the ranks may still run: `{PROG} attach {spec.run_id}`, log {spec.log_path}", file=sys.stderr)
        return 130
    ok = run_over(client.state) and failure_summary(client.state) is None
    print(f"{line}; log {spec.log_path}", file=sys.stdout if ok else sys.stderr, flush=True)
    return 0 if ok else 1


# -- other commands -------------------------------------------------------------------------


def cmd_hub(ns: argparse.Namespace) -> int:
    from pardash.telemetry.hub import run_hub

    _check_prometheus(ns)
    return run_hub(ns)


def cmd_keys(ns: argparse.Namespace) -> int:
    from pardash.telemetry import security

    d = ns.dir or str(security.default_curve_dir())
    try:
        paths = security.make_keys(d, force=ns.force)
    except security.CurveKeyError as exc:
        fail(str(exc))
    d = os.path.abspath(d)
    print(f"{PROG}: CURVE keys in {d} (folder 0700, files 0600)")
    print(f"  hub:              {paths['server_secret']}")
    print(f"  ranks, viewers:   {paths['client_secret']} and {paths['server_public']}")
    print(f"  admitted clients: {paths['authorized']}/ (add another client's .key here to let it in)")
    revoked = [p.name for k, p in paths.items() if k.startswith("revoked_")]
    if revoked:
        print(f"  revoked:          {', '.join(revoked)} (admitted before; add them again to let them in)")
    print(f"use: {PROG} hub --bind 0.0.0.0 --curve-dir {d}    (or {PROG} launch --curve-dir {d} ...)")
    print(f"     export PARDASH_CURVE_DIR={d}    for ranks and viewers (copy the folder to other nodes)")
    return 0


def cmd_ps(ns: argparse.Namespace) -> int:
    runs = registry.live_runs()
    if ns.json:
        print(json.dumps(runs, indent=2))
        return 0
    if not runs:
        print("no live runs")
        return 0
    print(f"{'RUN':24} {'STRATEGY':9} {'RANKS':>5} {'AGE':>8}  INGEST                  LOG")
    now = time.time()
    for e in runs:
        age = now - e.get("started", now)
        print(
            f"{e.get('run_id', ''):24} {e.get('strategy', '') or '-':9} {e.get('world_size', '-')!s:>5} "
            f"{age:7.0f}s  {e.get('ingest', ''):23} {e.get('log', '')}"
        )
    return 0


def _run_tui(source, *, title: str) -> int:
    from pardash.tui.app import make_app

    app = make_app(source, launched=False, title=title)
    app.run()
    return app.return_code or 0  # 1 when the app ended on an error (Textual printed it)


def cmd_attach(ns: argparse.Namespace) -> int:
    from pardash.telemetry.client import AttachError, HubClient

    try:
        client = HubClient.attach(ns.target)
    except AttachError as exc:
        fail(str(exc))
    _headless_without_terminal(ns)
    if ns.headless:
        from pardash.telemetry.printer import ProgressPrinter, follow_attached, run_over

        if not client.wait_synced(5.0):
            if client.keys is None:
                hint = "; a hub with CURVE keys answers only viewers with an authorised key (PARDASH_CURVE_DIR)"
            else:
                hint = "; or it does not admit this viewer's key (its authorized folder must hold it)"
            where = f"{ns.target} (asked on its snapshot port, {client.snapshot_endpoint})" if (ns.target or "").startswith("tcp://") else client.snapshot_endpoint
            fail(f"no answer from the hub at {where}; is the run still live? (`pardash ps`){hint}")
        try:
            print(follow_attached(ProgressPrinter(client, every_s=ns.every), client), flush=True)
        except KeyboardInterrupt:
            return 0
        finally:
            client.close()
        return 0 if run_over(client.state) else 1
    # A job `pardash launch` started can be stopped from any viewer, as from the one that
    # launched it (which may have detached): its supervisor is in the registry.
    entry = getattr(client, "info", {})  # the registry's entry of a run attached by id
    supervisor = int(entry.get("supervisor_pid") or 0)
    from pardash.tui.app import make_app

    app = make_app(client, launched=bool(supervisor), title=f"pardash attach {client.run_id or ns.target or ''}")
    choice = app.run()
    if choice == "stop" and supervisor:
        print(f"{PROG}: stopping run {client.run_id}...", flush=True)
        try:
            os.kill(supervisor, signal.SIGTERM)
        except ProcessLookupError:
            pass
        end = time.monotonic() + JOB_STOP_WAIT_S
        while registry.pid_alive(supervisor) and time.monotonic() < end:
            time.sleep(0.2)
        if registry.pid_alive(supervisor):
            fail(f"run {client.run_id} did not stop within {JOB_STOP_WAIT_S:.0f} s; its supervisor is pid {supervisor}", 1)
        print(f"{PROG}: stopped run {client.run_id}; log {entry.get('log', '')}")
    return app.return_code or 0


def cmd_replay(ns: argparse.Namespace) -> int:
    from pardash.telemetry.client import AttachError, ReplaySource

    ns.log = find_log(ns.log, ns.runs_dir)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        fail(f"replay shows the TUI, which needs a terminal; for a summary without one: {PROG} report {ns.log}")
    if ns.speed <= 0:
        fail(f"--speed {ns.speed}: must be above 0")
    try:
        source = ReplaySource(ns.log, speed=ns.speed)
    except AttachError as exc:
        fail(str(exc))
    return _run_tui(source, title=f"pardash replay {os.path.basename(ns.log)}")


# -- issue 6: bench, export, Prometheus -----------------------------------------------------


def _check_prometheus(ns: argparse.Namespace) -> None:
    """Refuse, before anything starts (one line, exit 2): /metrics beyond loopback without
    --insecure (HTTP has no CURVE keys: anyone who reaches it reads the run), a busy port."""
    from pardash.telemetry import security

    if getattr(ns, "prometheus", None) is None:
        return
    refusal = security.metrics_refusal(ns.prometheus_addr, insecure=getattr(ns, "insecure", False))
    if refusal:
        fail(refusal)
    if ns.prometheus and not _port_free(ns.prometheus_addr, ns.prometheus):
        fail(f"--prometheus {ns.prometheus}: port {ns.prometheus} is busy on {ns.prometheus_addr}; choose another --prometheus PORT")


def _prometheus_spec(ns: argparse.Namespace, spec) -> None:
    """Pass --prometheus on to the hub the supervisor starts."""
    if ns.prometheus is None:
        return
    spec.prometheus_port = ns.prometheus
    spec.prometheus_addr = ns.prometheus_addr
    spec.prometheus_per_rank = ns.prometheus_per_rank


def cmd_bench(ns: argparse.Namespace) -> int:
    from pardash.telemetry.compare import render_bench_markdown, render_bench_text
    from pardash.trainer import config as train_config
    from pardash.trainer.bench import BenchConfig, run_bench
    from pardash.trainer.launcher import LaunchError

    if ns.strategy is not None:
        fail("bench runs every strategy in --strategies LIST (e.g. single,ddp,fsdp), not --strategy")
    ns.strategy = "single"
    try:
        train = train_config.from_args(ns)
        cfg = BenchConfig(
            strategies=[x.strip() for x in ns.strategies.split(",") if x.strip()],
            nproc=ns.nproc,
            train=train,
            runs_dir=ns.runs_dir,
            gpu_count=_gpu_count(),
        )
        if train.device == "cuda" and cfg.gpu_count == 0:
            fail("--device cuda: no NVIDIA GPU is visible here; use --device cpu (or auto)")
        bench = run_bench(cfg, progress=sys.stderr)
    except (ValueError, LaunchError) as exc:
        fail(str(exc))
    render = {"json": lambda b: json.dumps(b, indent=2) + "\n", "markdown": render_bench_markdown, "text": render_bench_text}[ns.format]
    print(render(bench), end="", flush=True)
    return 0 if all(r.get("code") == 0 for r in bench["rows"]) else 1


def cmd_simulate(ns: argparse.Namespace) -> int:
    import dataclasses

    from pardash.telemetry.client import HubClient
    from pardash.telemetry.simulate import SimConfig, log_bytes_per_minute, parse_rank_step
    from pardash.telemetry.spawn import SpawnError, spawn_hub

    _check_prometheus(ns)
    try:
        cfg = SimConfig(
            ranks=ns.ranks,
            rate_hz=ns.rate,
            ranks_per_node=ns.ranks_per_node,
            strategy=ns.strategy,
            steps=ns.steps,
            straggler=ns.straggler,
            straggler_kind=ns.straggler_kind,
            stall=parse_rank_step(ns.stall, "--stall") if ns.stall else None,
            crash=parse_rank_step(ns.crash, "--crash") if ns.crash else None,
            seed=ns.seed,
        )
    except ValueError as exc:
        fail(str(exc))
    _headless_without_terminal(ns)
    run_id = "sim-" + registry.new_run_id()
    # A simulated job is for watching, and its log grows fast (about 430 MB a minute at 1024
    # ranks x 10 steps/s): none unless asked for. The hub still encodes every record.
    keep = ns.log is not None or ns.keep_log
    log = ns.log or (os.path.join(ns.runs_dir, run_id, "telemetry.jsonl") if keep else os.devnull)
    per_minute = _megabytes(log_bytes_per_minute(cfg))
    if keep:
        from pardash.trainer.launcher import LaunchError, check_writable

        try:
            check_writable(log)
        except LaunchError as exc:
            fail(str(exc))
        log_text = f"log {log}, about {per_minute} a minute"
    else:
        log_text = f"no log (--keep-log to record one: about {per_minute} a minute)"
    # Hub, simulated ranks and viewer each in a process of their own, as in a real job: at
    # 1024 ranks none of them waits on another's interpreter lock.
    hub_args = ["--run-id", run_id, "--log", log, "--bind", ns.bind, "--meta", json.dumps({"strategy": cfg.strategy, "world_size": cfg.ranks, "simulated": True})]
    if ns.port:
        hub_args += ["--port", str(ns.port)]
    if getattr(ns, "insecure", False):
        hub_args += ["--insecure"]
    # The simulated ranks hold no keys: hub and viewer go without them too.
    plain_env = {k: v for k, v in os.environ.items() if k != "PARDASH_CURVE_DIR"}
    if getattr(ns, "prometheus", None) is not None:
        hub_args += ["--prometheus", str(ns.prometheus), "--prometheus-addr", ns.prometheus_addr]
        hub_args += ["--prometheus-per-rank"] if ns.prometheus_per_rank else []
    # The hub and the simulator are in sessions of their own (a Ctrl-C is this process's to
    # handle): a SIGTERM or the terminal closing must stop them too, through the clean-up below.
    def _stop_on(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_on)
    try:
        hub, info = spawn_hub(hub_args, start_new_session=True, env=plain_env)
    except SpawnError as exc:
        fail(f"{exc}; see the message above")
    sim = subprocess.Popen(
        [sys.executable, "-m", "pardash.telemetry.simulate", "--endpoint", info["ingest"], "--run-id", run_id,
         "--config", json.dumps(dataclasses.asdict(cfg))],
        stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    print(f"{PROG}: simulating {cfg.ranks} ranks at {cfg.rate_hz:g} steps/s, run {run_id}, hub {info['ingest']}, {log_text}", flush=True)
    if info.get("metrics"):
        print(f"{PROG}: Prometheus metrics on {info['metrics']}", flush=True)
    client = HubClient(info["updates"], info["snapshot"], run_id=run_id, curve=False)
    try:
        if ns.headless:
            from pardash.telemetry.failures import failure_line, failure_summary
            from pardash.telemetry.printer import ProgressPrinter

            ended: list[float] = []

            def over() -> bool:
                # The simulator's last messages reach this viewer a frame or two after it ends.
                if sim.poll() is None:
                    return False
                ended[:1] = ended[:1] or [time.monotonic()]
                return time.monotonic() - ended[0] >= SIM_SETTLE_S

            try:
                ProgressPrinter(client, every_s=ns.every).follow(over)
            except KeyboardInterrupt:
                print(f"{PROG}: stopped by you", flush=True)
            else:
                st = client.state
                f = failure_summary(st)
                if f is not None:
                    print(f"{PROG}: simulated failure: {failure_line(f)}", flush=True)
                else:
                    print(f"{PROG}: done, {len(st.ranks)} rank(s), step {st.step}", flush=True)
        else:
            from pardash.tui.app import make_app

            make_app(client, launched=False, title=f"pardash simulate {cfg.ranks} ranks").run()
    finally:
        if sim.poll() is None:
            sim.send_signal(signal.SIGTERM)
        try:
            sim.wait(10)
        except subprocess.TimeoutExpired:
            sim.kill()
        time.sleep(0.3)  # the hub drains what the ranks sent last
        hub.send_signal(signal.SIGTERM)
        try:
            hub.wait(10)
        except subprocess.TimeoutExpired:
            hub.kill()
        client.close()
    return 0


SIM_SETTLE_S = 0.5
"""How long a headless simulate follows the hub after the simulator ends (5 frames)."""


def _megabytes(n: float) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 10e6 else f"{n / 1e6:.1f} MB"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    script: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, script = argv[:i], argv[i + 1 :]
    parser = build_parser()
    ns, extra = parser.parse_known_args(argv)
    if extra:
        # Said by the command's own parser, so the hint names its help (`pardash report --help`).
        command = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[ns.command]
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    if script and ns.command != "launch":
        parser.error("`-- SCRIPT` goes with `pardash launch` only")
    commands = {
        "launch": lambda ns: cmd_launch(ns, script),
        "hub": cmd_hub,
        "ps": cmd_ps,
        "attach": cmd_attach,
        "replay": cmd_replay,
        "report": cmd_report,
        "simulate": cmd_simulate,
        "keys": cmd_keys,
        "bench": cmd_bench,
        "export": cmd_export,
    }
    try:
        code = commands[ns.command](ns)
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:  # fail(): a one-line error, already said
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        # Whatever ended the command (a write to a terminal closed under it, say), a thread
        # stuck on that terminal must not keep the process alive: say it, then go.
        traceback.print_exc()
        code = 1
    return _no_thread_left_behind(code)


STUCK_THREAD_GRACE_S = 1.0


def _no_thread_left_behind(code: int) -> int:
    """After a TUI: a terminal closed under the viewer can leave Textual's input thread spinning
    on the dead terminal, and Python would wait for it at exit for ever (seen: a viewer with no
    terminal at 50-70% of a core). Past a short grace such a thread is not waited for."""
    if "textual" not in sys.modules:  # no TUI ran: nothing of its kind to wait for
        return code
    import threading

    end = time.monotonic() + STUCK_THREAD_GRACE_S
    for t in threading.enumerate():
        if t is not threading.current_thread() and not t.daemon:
            t.join(max(0.0, end - time.monotonic()))
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.current_thread()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
