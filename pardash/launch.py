"""``pardash launch``: check the flags, start the job (hub, torchrun, ranks) under its
supervisor, and watch it (the TUI, or progress lines headless) to its outcome."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from pardash.parser import PROG, fail
from pardash.preflight import check_hub_ports, check_insecure_with_keys, check_prometheus, gpu_count, headless_without_terminal, port_free
from pardash.telemetry import registry


def prepare_launch(ns: argparse.Namespace, script: list[str]):
    """Validate a launch and build its LaunchSpec; raises SystemExit(2) with one line."""
    from pardash.trainer import config as train_config
    from pardash.trainer.launcher import TRAINER_COMMAND, LaunchError, new_spec

    try:
        cfg = train_config.from_args(ns)
    except ValueError as exc:
        fail(str(exc))
    nproc = ns.nproc if ns.nproc is not None else (1 if cfg.strategy in ("single", "dp") else 2)
    if nproc < 1:
        fail(f"--nproc {nproc}: need at least 1 rank per node")
    cores = os.cpu_count() or 1
    if nproc > max(MAX_RANKS_A_CORE * cores, 64):
        # (--nproc 10000 was refused only for its dataset, with advice to make it large enough
        # to start 10,000 Python processes with torch, about 350 MB each)
        fail(f"--nproc {nproc}: that many processes, each a Python with torch, on this machine's {cores} core(s); "
             f"at most {max(MAX_RANKS_A_CORE * cores, 64)} ranks per node here (ranks on other machines: --nnodes)")  # fmt: skip
    if ns.nnodes < 1:
        fail(f"--nnodes {ns.nnodes}: need at least 1 node")
    if not 0 <= ns.node_rank < ns.nnodes:
        fail(f"--nnodes {ns.nnodes} --node-rank {ns.node_rank}: node rank must be in 0..nnodes-1")
    if os.path.exists(ns.runs_dir) and not os.path.isdir(ns.runs_dir):
        fail(f"--runs-dir {ns.runs_dir} is a file; give a folder (default ./runs)")
    world = nproc * ns.nnodes
    if not script and not ns.module:
        try:
            cfg.check_world_size(world)
        except ValueError as exc:
            fail(str(exc))
        if cfg.device == "cuda" and gpu_count() == 0:
            fail("--device cuda: no NVIDIA GPU is visible here; use --device cpu (or auto)")
        gpus = visible_gpus()
        if cfg.device != "cpu" and cfg.strategy != "dp" and 0 < gpus < nproc:
            # (each rank failed at its start, "local rank 2 has no GPU of its own", after the hub
            # and torchrun had started)
            fail(f"--nproc {nproc}: {gpus} GPU(s) visible here and each rank takes one of its own; start at most {gpus} "
                 "ranks per node, or use --device cpu")  # fmt: skip
        if cfg.precision == "bf16" and gpu_count() == 0:
            fail("--precision bf16 needs a GPU and none is visible here; use --precision fp32")
    elif given := _trainer_flags_given(cfg):
        fail(f"{', '.join(given)}: the bundled trainer's flags, which your script would not see; pass your script's own flags after `--`")
    elif script and not ns.module and script[0] in ("-m", "--module"):
        module = script[1] if len(script) > 1 else "MODULE"
        fail(f"-- {script[0]} {module}: a module goes before `--`: pardash launch -m {module} -- ARGS")
    elif script and not ns.module and os.path.isdir(script[0]) and not _runnable_folder(script[0]):
        # (it said "no such script" of a folder that is there)
        fail(f"{script[0]} is a folder with no __main__.py, which python needs to run a folder; "
             f"name the script in it: -- {os.path.join(script[0], 'SCRIPT.py')}")  # fmt: skip
    elif script and not ns.module and _is_python(script[0]):
        # (`srun python train.py`'s habit: "python: no such script")
        rest = script[1:]
        if "-m" in rest or "--module" in rest:
            at = rest.index("-m") if "-m" in rest else rest.index("--module")
            module = rest[at + 1] if at + 1 < len(rest) else "MODULE"
            fail(f"-- {script[0]} -m {module}: pardash runs python itself; a module goes before `--`: "
                 f"pardash launch -m {module} -- ARGS")  # fmt: skip
        target = next((w for w in rest if not w.startswith("-")), "SCRIPT")  # (past the interpreter's own options: -u)
        fail(f"-- {script[0]} {target}: pardash runs python itself (as torchrun does); leave `{script[0]}` out: "
             f"pardash launch [OPTIONS] -- {target} [ITS ARGS]")  # fmt: skip
    elif script and not ns.module and not (os.path.isfile(script[0]) or os.path.isdir(script[0])):
        fail(f"{script[0]}: no such script (the command after `--` is run as `python SCRIPT ARGS`)")
    elif script and not ns.module and (why := _not_python(script[0])):
        fail(why)
    elif ns.module:
        import importlib.util

        top = ns.module.split(".")[0]
        sys.path.insert(0, os.getcwd())  # where torchrun's `python -m` looks first
        try:
            found = importlib.util.find_spec(top)  # the top level only: nothing is imported
        except (ImportError, ValueError):
            found = None
        finally:
            sys.path.pop(0)
        if found is None:
            fail(f"-m {ns.module}: no module {top!r} here (run from the folder that holds it, or install it)")
        if top == ns.module and found.submodule_search_locations is not None and not any(
            os.path.isfile(os.path.join(d, "__main__.py")) for d in found.submodule_search_locations
        ):
            # (its ranks started and each failed: "'my_pkg' is a package and cannot be directly executed")
            fail(f"-m {ns.module} is a package with no __main__.py, which python needs to run a package; "
                 f"name the module in it: -m {ns.module}.MODULE")  # fmt: skip
    if ns.master_port is not None and ns.node_rank == 0:
        # torchrun's rendezvous store listens on every address of this machine, whatever
        # --master-addr says: a port held on one of them (127.0.0.2, the host's own address)
        # passed a check of 127.0.0.1 alone, and torchrun failed with 38 lines of traceback.
        if not port_free("0.0.0.0", ns.master_port):
            fail(f"--master-port {ns.master_port} is busy; pick a free port or leave it out")
    telemetry_port = ns.telemetry_port or (29600 if ns.nnodes > 1 else 0)
    bind = ns.telemetry_addr or ("127.0.0.1" if ns.nnodes == 1 else (ns.master_addr or "127.0.0.1"))
    if telemetry_port and ns.node_rank == 0:
        check_hub_ports("--telemetry-port", bind, telemetry_port)
    # Nodes > 0 start no hub: their ranks send to node 0's, at the same address and port.
    remote_hub = f"tcp://{bind}:{telemetry_port}" if ns.node_rank > 0 else ""
    check_insecure_with_keys(ns)
    insecure = getattr(ns, "insecure", False)
    curve_dir = _check_security(bind, getattr(ns, "curve_dir", None), insecure, hub=not remote_hub)
    if ns.module:
        from pardash.trainer import autorun

        command = autorun.torchrun_command(["-m", ns.module, *script])
    elif script:
        from pardash.trainer import autorun

        command = autorun.torchrun_command(script)
    else:
        command = [*TRAINER_COMMAND, *cfg.to_argv()]
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


TTY_VAR = "TTY_COMPATIBLE"
"""rich's word that its output goes to a terminal (rich >= 13.9): set for the ranks of a launch
seen in a terminal (see :func:`_terminal_output`)."""


def _terminal_output(ns: argparse.Namespace, spec) -> None:
    """Draw the ranks' live displays as in a terminal when the launch is seen in one (its TUI,
    or headless in a terminal): their output goes to a file the launch shows, where rich (PyTorch
    Lightning's progress bar, whenever rich is installed, as pardash's own TUI has it) drew
    nothing until the end. tqdm draws either way. The user's own TTY_COMPATIBLE and COLUMNS
    stand."""
    from pardash.telemetry.printer import is_terminal

    if TTY_VAR in os.environ or (ns.headless and not is_terminal(sys.stdout)):
        return
    spec.extra_env[TTY_VAR] = "1"
    if "COLUMNS" not in os.environ:
        # (as wide as the terminal: at rich's 80 columns without one, Lightning's bar wrapped onto
        # a second line, drawn again a line at a time)
        spec.extra_env["COLUMNS"] = str(shutil.get_terminal_size().columns)


def _not_python(path: str) -> str:
    """Why python cannot run the file ``path`` (a binary, a shell script, a syntax error), as
    one line; '' when it compiles (a folder, or a file too big to check at once, is left to
    python). Said before the hub, torchrun and every rank start, each rank to fail the same."""
    import warnings
    import zipfile

    if not os.path.isfile(path) or path.endswith(".pyc"):
        return ""
    try:
        if os.path.getsize(path) > 16 << 20 or zipfile.is_zipfile(path):  # (a zipapp, shebang or not, python runs)
            return ""
        with open(path, "rb") as fh:
            source = fh.read()
        with warnings.catch_warnings():  # (the script's own SyntaxWarnings are its ranks' to say)
            warnings.simplefilter("ignore")
            compile(source, path, "exec", dont_inherit=True)
    except OSError as exc:
        return f"{path}: cannot read it ({exc.strerror or exc})"
    except SyntaxError as exc:
        where = f", line {exc.lineno}" if exc.lineno else ""
        return f"{path}: python cannot run it ({type(exc).__name__}{where}: {exc.msg})"
    except (ValueError, UnicodeDecodeError) as exc:  # null bytes, an undecodable file
        return f"{path}: python cannot run it ({exc}): is it a Python script?"
    return ""


MAX_RANKS_A_CORE = 16
"""Ranks a node may start per CPU core (64 at least): past it, the launch is a mistake."""


def visible_gpus() -> int:
    """GPUs the ranks can see: NVML's count, less those CUDA_VISIBLE_DEVICES hides."""
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = gpu_count()
    if seen is None:
        return count
    return min(count, len([d for d in seen.split(",") if d.strip() and not d.strip().startswith("-")]))


def _is_python(word: str) -> bool:
    """``python``, ``python3``, ``python3.11`` or a path to one."""
    return re.fullmatch(r"python(\d+(\.\d+)?)?", os.path.basename(word)) is not None


def _runnable_folder(path: str) -> bool:
    """Whether python runs the folder ``path`` (``python DIR`` runs its ``__main__``, as the
    ranks' autorun does): it has a ``__main__.py`` (or only its compiled ``__main__.pyc``)."""
    return any(os.path.isfile(os.path.join(path, name)) for name in ("__main__.py", "__main__.pyc"))


def _one_stream() -> bool:
    """This process's stdout and stderr are one file or pipe (``> out 2>&1``, ``|&``): the ranks'
    two streams then go through the one output file, in the order they were written (kept
    apart, a rank's traceback came out ahead of the lines it printed before it)."""
    try:
        out, err = os.fstat(1), os.fstat(2)
    except OSError:
        return False
    return (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino)


def _trainer_flags_given(cfg) -> list[str]:
    """The bundled trainer's flags set away from their defaults (with a script of one's own they
    would be silently ignored)."""
    import dataclasses

    default = type(cfg)()
    return [f"--{f.name.replace('_', '-')}" for f in dataclasses.fields(cfg) if getattr(cfg, f.name) != getattr(default, f.name)]


def _say_where_to_attach(spec, ingest: str) -> str:
    """Where a hub bound beyond loopback is reached from other machines, and, without keys, that
    anyone who reaches it may: a hub at 192.0.2.2 said neither, and a teammate had to find its
    port with `pardash ps` on the job's machine (review 300). Returns the words (for the TUI,
    which hides what was printed before it: review 305); '' where there is nothing to say."""
    from pardash.telemetry import security

    bind = spec.telemetry_bind
    if spec.remote_hub or not ingest or security.is_loopback(bind):
        return ""
    import socket

    host = socket.gethostname() if bind in ("0.0.0.0", "*", "::", "") else bind
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host  # (an IPv6 address)
    target = f"tcp://{host}:{ingest.rsplit(':', 1)[1]}"
    if spec.curve_dir:
        said = f"viewers on other machines: `pardash attach {target} --curve-dir DIR`, DIR a viewer's keys (`pardash keys --viewer NAME` makes them)"
        print(f"{PROG}: {said}", flush=True)
    else:
        said = (f"the hub listens on {target} without keys (--insecure): anyone who reaches it can read the run and send it "
                f"records; viewers on other machines: `pardash attach {target}`")  # fmt: skip
        print(f"{PROG}: {said}", file=sys.stderr, flush=True)
    return said


def _check_security(bind: str, curve_dir: str | None, insecure: bool, *, hub: bool) -> str:
    """The absolute key folder to use ('' for none), after checking that a hub may bind
    ``bind`` and that the keys it and the ranks need are there; fails with one line."""
    from pardash.telemetry import security

    curve_dir = curve_dir or security.curve_dir_from_env() or ""
    refusal = security.bind_refusal(bind, curve=bool(curve_dir), insecure=insecure)
    if refusal and not hub:
        # Node > 0 reaches node 0's hub at ``bind``: as node 0 must, with keys or --insecure (a
        # hub with keys refuses its ranks without them, and nothing said so).
        refusal = (f"node 0's hub at {bind} is reached over the network: pass the --curve-dir that node 0 has "
                   "(the same keys), or --insecure as node 0 did")  # fmt: skip
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


JOB_END_WAIT_S = 15.0
"""How long a viewer that quits after every rank is done waits for the job to end."""
SIGNAL_RELAY_S = 1.0
"""A SIGTERM this soon after the first is the same one relayed (`timeout` signals the launch,
then its process group), not a second asking not to wait."""


def cmd_launch(ns: argparse.Namespace, script: list[str]) -> int:
    from pardash.telemetry.client import HubClient
    from pardash.trainer.launcher import LaunchError, start

    check_prometheus(ns)
    spec = prepare_launch(ns, script)
    headless_without_terminal(ns)
    _prometheus_spec(ns, spec)
    if not ns.headless:
        spec.output = os.path.join(spec.run_dir, "output.log")
        spec.viewer_pid = os.getpid()
    else:
        from pardash.telemetry.printer import is_terminal
        from pardash.telemetry.streams import unbreakable_stdio

        # The ranks write to a file that the printer follows and prints (above the progress bar
        # in a terminal): a viewer that dies, or a pipe whose reader exits (`| head`), never
        # breaks their stdout. Nor this process's: it stops printing and still sees the job out.
        # Without a terminal their stderr stays stderr (passed on through the supervisor).
        spec.output = os.path.join(spec.run_dir, "output.log")
        spec.stderr_apart = not is_terminal(sys.stdout) and not _one_stream()
        unbreakable_stdio()
        # Gone quietly, the launch held the shell for the rest of the job with no word of why:
        # said once on stderr (the terminal, under `| head`), and the last line goes there too.
        sys.stdout.on_break = lambda: print(
            f"{PROG}: nothing reads this launch's output any more; the job goes on and this launch sees it to its end "
            f"(Ctrl-C stops it): the ranks' output goes on in {spec.output}, the telemetry "
            + (_log_of(spec) if spec.remote_hub else f"in {spec.log_path}"),  # (node > 0 writes no log)
            file=sys.stderr, flush=True,
        )  # fmt: skip
    _terminal_output(ns, spec)
    # Until the job is up a SIGTERM ends the start, the supervisor with it; from then on it stops
    # the job (the modes below say how). It left a job starting with nobody watching it.
    terminated: list[int] = []
    stops = _stop_signals()

    def on_sigterm_starting(signum: int, _frame: object = None) -> None:
        terminated.append(signum)
        raise KeyboardInterrupt

    for sig in stops:
        signal.signal(sig, on_sigterm_starting)
    try:
        if spec.remote_hub:  # node > 0: node 0's hub names the run and records it
            # (its ranks here, then the job's as this node reckons it: "2 rank(s)" of a node
            # running one read as this node's)
            print(f"{PROG}: node {spec.node_rank} of {spec.nnodes}, {spec.nproc} rank(s) here ({spec.world_size} in all), "
                  f"telemetry to node 0's hub at {spec.remote_hub}", flush=True)  # fmt: skip
            if metrics_flags := _prometheus_flags(ns):
                # (the same command line on every node is common: said, not refused)
                print(f"{PROG}: {metrics_flags} does nothing on node {spec.node_rank}: the metrics are node 0's hub's, "
                      "for every node's ranks; give it to node 0's launch", file=sys.stderr, flush=True)  # fmt: skip
            if ns.log:  # (likewise said, not refused)
                print(f"{PROG}: --log does nothing on node {spec.node_rank}: node 0's hub keeps the run's log, every node's "
                      "ranks in it; give it to node 0's launch", file=sys.stderr, flush=True)  # fmt: skip
        else:
            print(f"{PROG}: run {spec.run_id}, {spec.world_size} rank(s), log {spec.log_path}", flush=True)
        _warn_if_telemetry_off()
        job = start(spec)
    except LaunchError as exc:
        fail(str(exc))
    except KeyboardInterrupt:  # Ctrl-C, or a SIGTERM (above): ``start`` stopped what it started
        print(f"{PROG}: stopped before the job started", file=sys.stderr, flush=True)
        return 128 + (terminated[0] if terminated else signal.SIGINT)

    def on_sigterm_started(signum: int, _frame: object = None) -> None:
        terminated.append(signum)
        job.stop(signum)

    for sig in stops:
        signal.signal(sig, on_sigterm_started)
    if job.endpoints.get("metrics"):
        print(f"{PROG}: Prometheus metrics on {job.endpoints['metrics']}", flush=True)
    open_hub = _say_where_to_attach(spec, job.endpoints.get("ingest", ""))
    rendezvous = ""
    if spec.nnodes > 1:
        others = "--node-rank 1 on the other" if spec.nnodes == 2 else f"--node-rank 1..{spec.nnodes - 1} on the others"
        rendezvous = f"torchrun's rendezvous waits for all {spec.nnodes} nodes" + (
            f": run this launch with {others}" if spec.node_rank == 0 else "")
    client = _launch_client(HubClient)(job.endpoints["updates"], job.endpoints["snapshot"], run_id=spec.run_id, curve=spec.curve_dir or None)
    # (the TUI's header said only "waiting for the ranks to start" while node 0 waited for the
    # other nodes, where the headless lines say why and what to run)
    client.waiting_for = rendezvous
    try:
        if ns.headless:
            from pardash.telemetry.printer import ProgressPrinter

            waiting = "no rank has said hello yet" + (f" ({rendezvous})" if rendezvous else "")
            printer = None
            stopped = False
            # Headless, this process stands for the job (as torchrun does): a SIGTERM (`timeout`,
            # `kill`, a CI job cancelled), a SIGHUP (the terminal closed, the ssh connection
            # dropped) or a SIGQUIT (Ctrl-\) stops the job as Ctrl-C does, rather than leave it
            # running unwatched. (A viewer killed outright, SIGKILL, leaves it running.)
            stopped_by = terminated
            first_term: list[float] = []

            def on_sigterm(signum: int, _frame: object = None) -> None:
                stopped_by.append(signum)
                now = time.monotonic()
                if first_term and now - first_term[0] < SIGNAL_RELAY_S:
                    # The same SIGTERM relayed (`timeout` signals the launch, then its process
                    # group): raised again as the first unwound, it left the launch with 130
                    # and not a word, 3 tries in 15. A second one later still means "now".
                    return
                first_term[:] = [now]
                raise KeyboardInterrupt

            try:
                # (a Ctrl-C as the printer is made stops the job as one later does: it escaped,
                # the job running with nobody to watch it)
                printer = ProgressPrinter(client, every_s=ns.every, tail=spec.output, waiting=waiting, remote_hub=spec.remote_hub)
                for sig in stops:
                    signal.signal(sig, on_sigterm)
                _say_suspends(printer, spec)
                try:
                    printer.follow(lambda: job.poll() is not None)
                finally:
                    # (not while the job stops: the job does not train on then)
                    if signal.getsignal(signal.SIGTSTP) is not signal.SIG_IGN:
                        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
                    signal.signal(signal.SIGCONT, signal.SIG_DFL)
            except KeyboardInterrupt:
                stopped_by.append(signal.SIGINT)
                try:
                    stopped = printer is None or not _ended_by_itself(job, client, printer)
                except KeyboardInterrupt:  # again, while it ended
                    stopped = True
                except Exception as exc:  # noqa: BLE001 (whatever the check raised, the job is stopped)
                    # Its check failing (a module the Ctrl-C left half-imported raised NameError
                    # in client.poll) left the launch with a traceback and the job training on,
                    # unwatched: a Ctrl-C stops the job whatever goes wrong here.
                    _said_failed(f"could not tell whether the job had ended ({_error(exc)}); stopping it")
                    stopped = True
            try:
                if stopped:
                    # Stopped before anything is said: a second Ctrl-C (a double tap) during the
                    # line left the launch before the stop, the job running with nobody to watch it.
                    job.stop(stopped_by[0])
                    print(f"{PROG}: stopping the job...", file=sys.stderr, flush=True)
                    try:
                        if printer is not None:
                            printer.follow(lambda: job.poll() is not None)
                    except Exception as exc:  # noqa: BLE001 (following it is not stopping it: waited for below)
                        _said_failed(f"cannot follow the job as it stops ({_error(exc)}); waiting for it to end")
                code = job.wait()
            except KeyboardInterrupt:
                # Again, while it stops: not waiting. Also a signal sent twice (`timeout` signals
                # the launch, then its process group): the second came in job.stop or job.wait and
                # left the launch with 130 and not a word, 3 tries in 15. No third one now.
                for sig in (signal.SIGINT, *stops):
                    signal.signal(sig, lambda *_: None)
                if not stopped_by:
                    stopped_by.append(signal.SIGINT)
                job.stop(stopped_by[0])
                return _not_waiting(spec, stopped_by[0])
            if stopped and code != 0:
                code = 128 + stopped_by[0]  # as the shell says for the signal this process took: 130, 143
            elif _supervisor_lost(job, code):
                return _follow_unsupervised(job, client, printer, code, stopped_by)
        else:
            STOP = "stop"  # (tui.screens.quit.STOP: Ctrl-C may come before textual is imported)
            app = None
            try:
                from pardash.tui.app import make_app

                app = make_app(client, launched=True, title=f"pardash {spec.run_id}", come_back=f"{PROG} attach {_watch(spec)}",
                               job_over=lambda: job.poll() is not None or bool(job.result()), output=spec.output, remote_hub=spec.remote_hub,
                               notice=open_hub)  # fmt: skip
            except KeyboardInterrupt:
                # Ctrl-C as the viewer was made (textual's import takes a while) is a stop, as one
                # in it is: it escaped, and the job trained on with nobody to watch it.
                terminated.append(signal.SIGINT)

            def on_sigterm(signum: int, _frame: object = None) -> None:
                # As headless: a SIGTERM (`kill`, `timeout`), a SIGHUP (the terminal closed, the
                # ssh connection dropped) or a SIGQUIT stops the job, and the app leaves the
                # terminal as it found it (it went on under a frozen screen, job and all; a closed
                # terminal's job trained on with nobody watching it, review 317). Once every rank
                # has finished, the job ends by itself, as `q` leaves it then.
                from pardash.telemetry.state import run_finished
                from pardash.telemetry.streams import unbreakable_stdio

                if signum == signal.SIGHUP:
                    # (the terminal is gone: once the app has ended, what is said goes nowhere,
                    # not an EIO traceback; while it runs, it gives back its streams as it ends,
                    # and this is done again then, below)
                    unbreakable_stdio()
                    # The kernel follows a terminal's hangup with a SIGCONT: Textual's handler of
                    # it started the app's driver again as the app ended, the old writer's queue
                    # full, and the launch hung there (a CI run; py-spy showed it).
                    for sig in (signal.SIGCONT, signal.SIGTSTP):
                        signal.signal(sig, signal.SIG_DFL)
                terminated.append(signum)
                if app is not None:
                    # (and at its next poll, should its loop not have taken this one yet)
                    app.end_with = "over" if run_finished(client.state) else STOP
                    app.exit(app.end_with)

            for sig in stops:
                signal.signal(sig, on_sigterm)
            choice = STOP if terminated or app is None else app.run()  # (one came as the app was made: no app)
            # Textual's driver took Ctrl-Z and the shell's fg for itself and left its handlers:
            # one after the app had ended ("stopping the job...") raised in them, the launch
            # ending on a traceback with exit 1 (review 324).
            for sig in (signal.SIGTSTP, signal.SIGCONT):
                signal.signal(sig, signal.SIG_DFL)
            if signal.SIGHUP in terminated:
                # The terminal is gone: what is said from here goes nowhere, not a traceback
                # (EIO) that left the launch with 1 before it waited for the job (review 322).
                # (Once the app has given back the streams it held.)
                from pardash.telemetry.streams import unbreakable_stdio

                unbreakable_stdio()
            # None: the app ended some other way (crashed, terminal gone). The job must not
            # die with its viewer, so that counts as a detach.
            over_unsupervised = False
            if choice == "over":  # every rank is done: the job ends by itself
                try:
                    code = job.wait_result(JOB_END_WAIT_S)
                except subprocess.TimeoutExpired:  # torchrun restarting them (--max-restarts)
                    choice = STOP if terminated else "detach"
                else:
                    if _supervisor_lost(job, code):
                        code = _over_unsupervised(job, client, code)
                        over_unsupervised = True
                    else:
                        client = _caught_up(job, client)
            if choice in ("detach", None):
                how = "the viewer ended on an error" if app.return_code else "detached"
                print(f"{PROG}: {how}; the job goes on. `{PROG} attach {_watch(spec)}` to watch it again, log {_log_of(spec)}")
                return app.return_code or 0
            if choice != "over" and _supervisor_lost(job, job.poll() or 0):
                return _stop_unsupervised(job, terminated[0] if terminated else signal.SIGINT, client)
            if choice != "over":
                # A job that had ended before the Stop (its supervisor keeps the hub up for this
                # viewer after torchrun's end) exits with its own code: a failure's 1 read 130,
                # its result.json saying 1, not stopped, and the last line "the job's exit code 130".
                ended = job.result().get("code")
                job.stop(terminated[0] if terminated else signal.SIGINT)
                try:
                    if ended is None:
                        print(f"{PROG}: stopping the job...", file=sys.stderr, flush=True)
                    code = job.wait()
                except KeyboardInterrupt:  # Ctrl-C while it stops
                    return _not_waiting(spec, terminated[0] if terminated else signal.SIGINT)
                if ended is not None:
                    code = int(ended)
                elif code != 0:
                    # As the shell says for the signal this process took; a stop chosen in the
                    # TUI (q or Ctrl-C, then Stop) is the person's, as Ctrl-C is headless: 130.
                    code = 128 + (terminated[0] if terminated else signal.SIGINT)
            if not over_unsupervised and _supervisor_lost(job, code):  # (one that ended by itself was said so)
                print(f"{PROG}: {_lost_words(code)}: its ranks may train on without it; `{PROG} attach {_watch(spec)}` follows them, "
                      f"log {_log_of(spec)}", file=sys.stderr)  # fmt: skip
                return 1
        ended_at = time.monotonic()
        log_fate = _hear_the_logs_end(job, client)
        hub_gone = _node0_hub_gone(job, client, code, ended_at)
    finally:
        client.close()
    from pardash.telemetry.printer import outcome_line

    # A node > 0 records nothing itself: node 0's hub keeps the log.
    # ... and where the hub writes it now (it goes on beside its path when another file took it).
    log_path = _log_of(spec) if spec.remote_hub else (client.stats.log_path or spec.log_path)
    if log_fate:
        log_path = log_fate
    if hub_gone:
        log_path += f", {hub_gone}"
    # Under the TUI the ranks' output went to its file alone: a failure's traceback, which a
    # terminal (or a headless launch) would have shown, is printed here, as its rank reported it.
    output = "" if ns.headless else spec.output
    if output and code != 0:
        from pardash.telemetry.printer import failure_traceback

        told = failure_traceback(client.state, job.result())
        if told is not None:
            print(f"{PROG}: rank {told[0]}'s error, as it reported it:\n{told[1]}", file=sys.stderr)
    line = _port_taken_line(job.result(), client.state, code, given=spec.master_port is not None) or outcome_line(
        client.state, code, job.result(), log_path, log_error=client.stats.log_error, output=output, refused=client.refused,
        no_key=client.stats.rejected.get("no_key", 0),
    )  # fmt: skip
    print(line, file=_closing_stream(ok=code == 0))
    return code


def _say_suspends(printer, spec) -> None:
    """A headless launch suspended (Ctrl-Z: SIGTSTP) says, as it stops, that its job trains on:
    the job runs in a session of its own, which the terminal's stop does not reach, and under
    torchrun alone Ctrl-Z pauses the workers too (review 317). Not where SIGTSTP is ignored
    (no job control)."""
    if signal.getsignal(signal.SIGTSTP) is not signal.SIG_DFL:
        return

    def in_front() -> bool:
        """Whether this launch is the terminal's foreground job (`fg`), not in the background (`bg`)."""
        try:
            return os.tcgetpgrp(sys.stdout.fileno()) == os.getpgrp()
        except (OSError, ValueError):
            return True

    def on_cont(_signum: int = 0, _frame: object = None) -> None:
        if in_front():  # (after `bg`, the bar drawn over the shell's prompt; `fg` sends SIGCONT again)
            printer.go_on_display()

    def on_tstp(_signum: int, _frame: object = None) -> None:
        printer.say(f"{PROG}: this launch is suspended; the job trains on (`fg` brings its progress back, "
                    f"`{PROG} attach {_watch(spec)}` watches it meanwhile)")  # fmt: skip
        printer.hold_display()  # (its bar stopped, the cursor shown: the shell's prompt had none)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # (stopped here until SIGCONT: `fg`, `bg`)
        signal.signal(signal.SIGTSTP, on_tstp)
        signal.signal(signal.SIGCONT, on_cont)
        on_cont()

    signal.signal(signal.SIGTSTP, on_tstp)


def _stop_signals() -> tuple[int, ...]:
    """The signals that stop a headless launch's job, as torchrun's stop its workers: SIGTERM,
    and SIGHUP and SIGQUIT unless this process was started ignoring them (``nohup``: a launch
    meant to outlive its terminal). A closed terminal or Ctrl-\\ ended the launch without a word
    (129, 131), the job training on with nobody watching it."""
    return (signal.SIGTERM, *(sig for sig in (signal.SIGHUP, signal.SIGQUIT) if signal.getsignal(sig) is signal.SIG_DFL))


def _port_taken_line(result: dict, state, code: int, *, given: bool = True) -> str:
    """The last line of a job whose torchrun could not listen on its --master-port (another
    program took it after the check before the start: two launches given one port), said as that
    check says it; '' for any other end. It read "the job failed with exit code 1" under 38 lines
    of torchrun's traceback, and the TUI "job ended: torchrun exited", nothing naming the port.
    ``given``: the port was the user's --master-port (else torchrun's default, on node 0 of several)."""
    port = result.get("master_port_busy")
    if code == 0 or state.ranks or not isinstance(port, int) or isinstance(port, bool):
        return ""
    if not given:
        return (f"{PROG}: port {port}, torchrun's default --master-port, is busy: torchrun could not listen on it; "
                f"pick a free one with --master-port PORT (the same on every node); the job's exit code {code}")  # fmt: skip
    return (f"{PROG}: --master-port {port} is busy (another program took it after this launch found it free, and torchrun "
            f"could not listen on it); pick a free port or leave it out; the job's exit code {code}")  # fmt: skip


HUB_CLOSE_WAIT_S = 60.0
"""How long the launch waits, at most, for a hub that could not write its log to say, as it
stops, where the whole log went (it may be copying a long log)."""
HUB_SYNC_S = 5.0
"""... for that hub's snapshot, when the TUI's client is gone."""
LAST_FRAME_WAIT_S = 1.0
"""... and, once that hub has ended, for its last frame to come in."""


def _launch_client(base):
    """The launch's hub client: ``base`` that also remembers the log's trouble (its path and
    error as the last frame that had one said it), until the log is written at that path again.
    The hub's last frame, which says where the whole log went, clears the error: the launch's
    last line says what it was."""

    class LaunchClient(base):
        log_trouble: tuple[str, str] = ("", "")
        heard_at: float | None = None
        """When the hub last sent a frame (or its snapshot), by this process's monotonic clock."""

        def _note_log(self) -> None:
            if self.stats.log_error:
                self.log_trouble = (self.stats.log_path, self.stats.log_error)
            elif self.stats.log_path == self.log_trouble[0]:
                self.log_trouble = ("", "")  # written again where it was

        def load_snapshot(self, snap) -> None:
            super().load_snapshot(snap)
            self._note_log()
            self.heard_at = time.monotonic()

        def apply_frame(self, frame) -> None:
            super().apply_frame(frame)
            self._note_log()
            self.heard_at = time.monotonic()

    return LaunchClient


def _caught_up(job, client):
    """The viewer's client once the job ended by itself under the TUI, as of now: the app closed
    its own as it ended, its state as of the app's last poll, which a quick end left behind the
    hub (a rank's last steps in the frame after its exit's: the last line read "done, 1 rank(s),
    step 1" of a job of 5 steps, a CI run). A new one synced with the hub (kept up for this
    viewer) where it answers in time; else the one it was."""
    if client.sockets() or job.spec.remote_hub:
        return client
    try:
        fresh = type(client)(job.endpoints["updates"], job.endpoints["snapshot"], run_id=job.spec.run_id,
                             curve=job.spec.curve_dir or None)  # fmt: skip
    except Exception:  # (a hub gone, keys that no longer load: the last line from what was seen)
        return client
    # What the frames noted of the log as the run went (its disk filled, the hub went on writing
    # elsewhere): the snapshot says only where it writes now, and the last line lost its "LOG
    # (...: continued at NEW)" (review 339). Its own snapshot clears it where the log is written
    # again where it was.
    fresh.log_trouble = getattr(client, "log_trouble", ("", ""))
    if not fresh.wait_synced(HUB_SYNC_S):
        fresh.close()
        return client
    return fresh


def _hear_the_logs_end(job, client) -> str:
    """A log whose disk was still full (or its path unwritable) at the job's end: its hub writes
    the whole log, what its disk took and the lines it held, to a copy elsewhere as it stops,
    and says where in its last frame (or how many lines were lost: the error says it then).
    Waits for that frame, for as long as the hub lives (bounded) and a moment after; returns the
    log as the last line names it: the log asked for and where it went on in full; '' to leave
    it as the last frame says. Under the TUI the job is over while its supervisor keeps the hub
    up for this viewer, which no longer watches: the hub is stopped from here, so that the last
    line can say where the log is."""
    from pardash.telemetry.recorder import CONTINUED_AT
    from pardash.trainer.jobprocs import is_hub_of

    spec = job.spec
    if spec.remote_hub:
        return ""
    if client.stats.log_error:  # its last word has not come yet
        said = (client.stats.log_path, client.stats.log_error)
        hub = int((registry.find(spec.run_id) or job.endpoints).get("pid") or 0)
        listener = client
        if job.poll() is None and hub and is_hub_of(hub, spec.run_id):
            if not client.sockets():  # (the TUI closed its client as it ended): a new one, synced first
                listener = type(client)(job.endpoints["updates"], job.endpoints["snapshot"], run_id=spec.run_id,
                                        curve=spec.curve_dir or None)  # fmt: skip
                listener.wait_synced(HUB_SYNC_S)
                said = (listener.stats.log_path, listener.stats.log_error)
            with contextlib.suppress(OSError):
                os.kill(hub, signal.SIGTERM)
        try:
            deadline = time.monotonic() + HUB_CLOSE_WAIT_S
            gone_at = None
            while (listener.stats.log_path, listener.stats.log_error) == said and listener.sockets():
                listener.poll()
                now = time.monotonic()
                if gone_at is None and not (hub and registry.pid_alive(hub) and is_hub_of(hub, spec.run_id)):
                    gone_at = now
                if now >= deadline or (gone_at is not None and now - gone_at >= LAST_FRAME_WAIT_S):
                    return ""  # (killed outright: its log ends where its disk filled, as the error says)
                time.sleep(0.02)
        except KeyboardInterrupt:  # not waiting: the last line says what the last frame said
            return ""
        finally:
            if listener is not client:
                client.stats = listener.stats
                listener.close()
    old, error = client.log_trouble
    stats = client.stats
    if not error or stats.log_error or stats.log_path == old:
        return ""
    return f"{old} ({error.removeprefix(f'cannot write {old}: ')}: {CONTINUED_AT}{stats.log_path})"


NODE0_HUB_PROBE_S = 3.0
"""How long a node > 0's launch whose job ended unheard by node 0's hub listens for that hub's
next frame (it frames at 10 Hz) before it says the hub no longer answers."""


def _node0_hub_gone(job, client, code: int, ended_at: float) -> str:
    """On a node > 0 whose job ended with ``code`` (not 0: a success's ranks all finished) at
    ``ended_at`` (monotonic), its end never shown by node 0's hub (not every rank's end heard):
    '' while that hub still sends frames; else, for the last line, that it no longer answers,
    since when, and that this node's steps after it are in no log. Node 1 ended "log kept by
    node 0's hub (tcp://...)" of a hub killed with node 0 two minutes before, nothing saying
    its last steps went nowhere. Listens at most NODE0_HUB_PROBE_S (a live hub's next frame
    ends it at once)."""
    from pardash.telemetry.state import run_over

    spec = job.spec
    if not spec.remote_hub or code == 0 or client.heard_at is None or run_over(client.state):
        return ""
    heard_at = client.heard_at
    listener = client
    try:
        if not client.sockets():  # (the TUI closed its client as it ended): a new one
            listener = type(client)(job.endpoints["updates"], job.endpoints["snapshot"], run_id=spec.run_id,
                                    curve=spec.curve_dir or None)  # fmt: skip
            if listener.wait_synced(NODE0_HUB_PROBE_S):
                return ""
        else:
            deadline = time.monotonic() + NODE0_HUB_PROBE_S
            while client.heard_at == heard_at and time.monotonic() < deadline:
                client.poll()
                time.sleep(0.05)
            if client.heard_at != heard_at:
                return ""
    except KeyboardInterrupt:  # not waiting: the last line says what is known
        return ""
    finally:
        if listener is not client:
            listener.close()
    st = client.state
    steps = [r.last_step for r in st.ranks.values() if r.last_step is not None]
    at = f" at step {max(steps)}" if steps else ""
    return (f"which no longer answers (last heard{at}, {max(0.0, ended_at - heard_at):.0f} s before this node's job "
            f"ended): node 0 may be lost, and this node's steps after that are in no log")  # fmt: skip


def _closing_stream(*, ok: bool):
    """Where the launch's last line goes: stdout when the job succeeded, stderr when it did not,
    or when stdout's reader has gone (`| head`: the outcome was otherwise never said)."""
    return sys.stdout if ok and not getattr(sys.stdout, "broken", False) else sys.stderr


def _ended_by_itself(job, client, printer) -> bool:
    """Headless, on Ctrl-C (or SIGTERM): when every rank had already said it finished (exit 0,
    in its own words) and only torchrun had not ended yet (its workers' teardown, its exit
    barrier waiting for the other nodes' agents), the job is over: waits for it to end by
    itself, up to JOB_END_WAIT_S, and says True once it has (its own exit code then says how it
    ended: 0). Stopping it said "stopped by you (exit code 130)" of a job that had succeeded,
    and cut the ranks' teardown short. False, having waited for nothing, while a rank is not
    done (or when torchrun did not end in time): the job is to be stopped. A Ctrl-C during the
    wait raises KeyboardInterrupt (the caller stops the job then).

    Judged from the ranks' own exit records only, all of them taken before the stop was asked
    for: a rank that stops gracefully on SIGTERM also exits 0, so an exit seen after a stop
    would prove nothing."""
    from pardash.telemetry.state import run_finished

    client.poll()  # what the hub has sent since the last progress line
    if not run_finished(client.state) or job.poll() is not None:
        return job.poll() is not None
    print(f"{PROG}: every rank had finished; waiting for torchrun to end (Ctrl-C again stops it)", file=sys.stderr, flush=True)
    end = time.monotonic() + JOB_END_WAIT_S
    printer.follow(lambda: job.poll() is not None or time.monotonic() >= end)
    return job.poll() is not None


def _said_failed(text: str) -> None:
    """One line on stderr for a step of a stop that failed (the stop goes on without it)."""
    with contextlib.suppress(Exception):
        print(f"{PROG}: {text}", file=sys.stderr, flush=True)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _not_waiting(spec, sig: int) -> int:
    """A second Ctrl-C (or SIGTERM) while the job stops: say that the stop goes on without this
    process (it exited without a word, the job's end unsaid) and exit as the shell would."""
    from pardash.trainer.jobprocs import STOP_GRACE_S

    print(f"{PROG}: not waiting for the job to stop: its supervisor kills what is left of it within {STOP_GRACE_S:.0f} s; "
          f"log {_log_of(spec)}", file=sys.stderr, flush=True)  # fmt: skip
    return 128 + sig


def _supervisor_lost(job, code: int) -> bool:
    """The job's supervisor ended without a result (killed outright, SIGKILL or the OOM killer):
    torchrun and the ranks outlive it, so its exit code is not the job's."""
    return code != 0 and not job.result()


def _watch(spec) -> str:
    """What `pardash attach` takes to watch this job: its run id, or on a node > 0 node 0's
    hub (no hub on this node serves the run's id); with the job's keys (a hub with keys refuses
    a viewer without them, and the command said failed as printed)."""
    import shlex

    words = [spec.remote_hub or spec.run_id]
    if getattr(spec, "curve_dir", ""):
        words += ["--curve-dir", spec.curve_dir]
    return shlex.join(words)


def _log_of(spec) -> str:
    """Where the job's log is: on a node > 0, node 0's hub keeps it (never the path here)."""
    return f"kept by node 0's hub ({spec.remote_hub})" if spec.remote_hub else spec.log_path


def _own_hub_entry(spec) -> dict | None:
    """The registry entry of the hub this launch started (None on a node > 0, which starts none:
    an entry of its run's id on this machine is node 0's hub, not to be stopped from here)."""
    return None if spec.remote_hub else registry.find(spec.run_id)


def _lost_how(code: int) -> str:
    """How the supervisor ended, by its exit code: 'killed by SIGKILL'."""
    try:
        return f"killed by {signal.Signals(-code).name}" if code < 0 else f"ended with code {code}"
    except ValueError:
        return f"ended with code {code}"


def _lost_words(code: int) -> str:
    return f"the launcher's supervisor was {_lost_how(code)} before the job ended"


def _write_result(job, client, code: int, supervisor_code: int, stopped_by: int = 0, *, ended_unwatched: bool = False,
                  failure: str = "") -> None:  # fmt: skip
    """The job's result.json, which its supervisor (ended with ``supervisor_code``: killed
    outright) could not write, from here once the job has ended: ``code`` is the launch's word for
    its end. One the supervisor wrote after all is left as it is. ``ended_unwatched``: its hub
    was gone too as the job ended (``failure``: what the ranks' error files said, '' none)."""
    from pardash.trainer.launcher import lost_supervisor_result, write_result
    from pardash.trainer.supervisor import user_command

    spec = job.spec
    log = None if spec.remote_hub else (client.stats.log_path or spec.log_path)  # (node > 0: node 0's hub keeps it)
    result = lost_supervisor_result(spec.run_id, code, log, gone=_lost_how(supervisor_code), stopped_by=stopped_by,
                                    hub_restarts=client.hub_restarts, remote_hub=spec.remote_hub, node_rank=spec.node_rank,
                                    curve_dir=spec.curve_dir, command=user_command(spec.command) if spec.command else None,
                                    cwd=os.getcwd())  # fmt: skip
    if ended_unwatched:
        result["ended_unwatched"] = True
        result["failure"] = failure or None
    try:
        write_result(spec.run_dir, result)
    except OSError as exc:
        print(f"{PROG}: cannot write the run's result.json ({exc.strerror or exc}); the job's exit code is {code}", file=sys.stderr, flush=True)


def _follow_unsupervised(job, client, printer, code: int, stopped_by: list[int]) -> int:
    """Headless, the supervisor gone: the ranks train on (the hub records them until they are
    done): follow them as ``pardash attach`` does and end with the run's own outcome; should the
    hub go too, follow their processes (see :func:`_follow_unwatched`)."""
    from pardash.telemetry.failures import failure_summary
    from pardash.telemetry.printer import follow_attached
    from pardash.telemetry.state import run_over

    spec = job.spec
    try:
        # (a Ctrl-C from the first word on stops the ranks: one between it and the following,
        # with the hub's entry still being read, left the launch exiting 130 and the job training)
        print(f"{PROG}: {_lost_words(code)}; its ranks train on without it (no hub restarts now): following them to the end "
              f"(Ctrl-C stops them, as before)", file=sys.stderr, flush=True)  # fmt: skip
        entry = _own_hub_entry(spec) or {"pid": job.endpoints.get("pid")}
        # Followed while its hub lives: the hub, unsupervised, stops once every rank is done
        # (after a failure it waits for torchrun to start them again, --max-restarts).
        client.info = {**entry, "supervisor_pid": entry.get("pid")}
        line = follow_attached(printer, client)
        if not run_over(client.state):
            # The hub gone too (killed as well, nothing to start it again): the job's processes
            # are its only sign of life now. The launch gave up here, exit 1, and left them
            # training with nothing to stop them; it stands for them to their end.
            return _follow_unwatched(job, client, printer, code, line)
    except KeyboardInterrupt:  # (a SIGTERM too: this process stands for the job, as torchrun does)
        return _stop_unsupervised(job, stopped_by[-1] if stopped_by else signal.SIGINT, client)
    _wait_for_ranks_here(client.state)
    ok = failure_summary(client.state) is None
    _write_result(job, client, 0 if ok else 1, code)
    print(f"{line}; log {_log_of(spec)}", file=_closing_stream(ok=ok), flush=True)
    return 0 if ok else 1


UNWATCHED_POLL_S = 1.0
"""How often a launch whose job's supervisor and hub are both gone looks whether the job's
processes still run, and prints what they wrote (a handful of system calls: such a job may
train on for days)."""


def _follow_unwatched(job, client, printer, supervisor_code: int, last_seen: str) -> int:
    """Headless, the supervisor gone and then the hub (nothing starts it again): the job's
    processes train on with no telemetry. Says so once, prints their output as it comes, and
    waits for them to end (a Ctrl-C or SIGTERM raises KeyboardInterrupt: the caller stops them);
    then says what is known of their end and exits 1 (see :func:`_unwatched_end`)."""
    from pardash.trainer.jobprocs import job_processes, still_running, torchrun_of

    spec = job.spec
    procs = job_processes(job.supervisor.pid, spec.run_id)
    print(last_seen, file=sys.stderr, flush=True)  # (what the hub last showed: the figures the log ends with)
    if procs:
        runner = torchrun_of(procs)
        hub = f"node 0's hub ({spec.remote_hub}) is out of reach" if spec.remote_hub else (
            f"its hub{_pid_text((client.info or {}).get('pid'))} is gone too, and with no supervisor nothing starts it again")
        print(f"{PROG}: {hub}: the ranks train on unwatched ("
              + (f"torchrun pid {runner.pid}" if runner else f"pids {', '.join(str(p.pid) for p in procs)}")
              + f"), their steps no longer logged; waiting for them to end (Ctrl-C stops them); their output goes on in "
              f"{_output_of(spec)}", file=sys.stderr, flush=True)  # fmt: skip
    stderr = _StderrPassedOn(spec)
    while procs:
        time.sleep(UNWATCHED_POLL_S)
        printer._follow_tail()
        stderr.pass_on()
        procs = [p for p in procs if still_running(p)] or job_processes(job.supervisor.pid, spec.run_id)
    printer._follow_tail(final=True)
    stderr.pass_on()
    return _unwatched_end(job, client, supervisor_code)


class _StderrPassedOn:
    """The ranks' stderr, where it is kept apart from their output (a launch without a terminal:
    torchrun's stderr.log), passed on to this process's stderr from now on, as their supervisor
    passed it on while it lived: a crash's traceback was otherwise in that file alone."""

    def __init__(self, spec) -> None:
        import codecs

        self.path = os.path.join(spec.run_dir, "torchrun", "stderr.log") if spec.stderr_apart else ""
        self.pos = 0
        with contextlib.suppress(OSError):
            self.pos = os.path.getsize(self.path) if self.path else 0
        self.decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode

    def pass_on(self) -> None:
        """What they wrote since the last call, all of it."""
        chunk = b"x" * TAIL_BYTES
        while self.path and len(chunk) == TAIL_BYTES:
            try:
                with open(self.path, "rb") as fh:
                    fh.seek(self.pos)
                    chunk = fh.read(TAIL_BYTES)
            except OSError:
                return
            self.pos += len(chunk)
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(self.decode(chunk))
                sys.stderr.flush()


TAIL_BYTES = 1 << 20
"""The ranks' stderr is read a megabyte at a time."""


def _pid_text(pid) -> str:
    return f" (pid {pid})" if pid else ""


def _output_of(spec) -> str:
    """Where the ranks' output goes: their file, and where their stderr goes apart from it."""
    if spec.stderr_apart:
        return f"{spec.output} (their stderr in {os.path.join(spec.run_dir, 'torchrun', 'stderr.log')})"
    return spec.output


def _unwatched_end(job, client, supervisor_code: int) -> int:
    """The last line and result.json of a job whose processes ended with neither its supervisor
    nor its hub there to see it. torchrun's own code went to its new parent (the supervisor was
    its parent), and a rank's end went to no hub: the code is the one torchrun wrote as it ended
    (``trainer/torchrun.py``), and 1 where it wrote none (killed outright): nothing else on disk
    proves a success (a rank killed outright, by the OOM killer say, leaves no file), and a
    launch's 0 is read by scripts as "the model trained to its end". A rank's error file in
    torchrun's last attempt names a failure in the line."""
    spec = job.spec
    failure = _last_attempt_failure(spec, client.state)
    step = max((r.last_step for r in client.state.ranks.values() if r.last_step is not None), default=None)
    at = f" (step {step})" if step is not None else ""
    if spec.remote_hub:  # (node > 0: node 0's hub, which keeps the log, out of reach)
        gone, log = "its supervisor gone and node 0's hub out of reach", f"the log is {_log_of(spec)}, its last word here{at}"
    else:
        gone, log = "its supervisor and hub gone", f"the log ends where the hub stopped{at}, {client.stats.log_path or spec.log_path}"
    code = _torchrun_exit_code(spec)
    if code == 0:
        how = "torchrun exited 0: every rank finished"
    elif code is not None:
        how = failure or f"torchrun exited {code}; no rank left an error file (their output's last lines may say)"
    else:
        how = failure or "how they ended is not known (no rank left an error file; their output's last lines may say)"
        code = 1
    _write_result(job, client, code, supervisor_code, ended_unwatched=True, failure=failure)
    print(f"{PROG}: the job's processes ended unwatched, {gone}: {how}; exit code {code}; {log}; their output to the end is in "
          f"{_output_of(spec)}", file=sys.stderr, flush=True)  # fmt: skip
    return code


def _torchrun_exit_code(spec) -> int | None:
    """torchrun's exit code as it wrote it as it ended (``trainer/torchrun.py``, its
    --log-dir's ``exit_code``); None where it wrote none (killed outright, or a version before)."""
    from pardash.trainer.torchrun import EXIT_CODE_FILE

    try:
        with open(os.path.join(spec.run_dir, "torchrun", EXIT_CODE_FILE)) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _last_attempt_failure(spec, state) -> str:
    """'rank 1 failed: RuntimeError: ...' from the error files of torchrun's last attempt
    (``runs/<id>/torchrun/<rdzv id>/attempt_N/<local rank>/error.json``, written by a rank
    that raised), '' where there is none."""
    import json
    import socket

    from pardash.trainer.torchrun import attempt_dirs

    attempts = attempt_dirs(os.path.join(spec.run_dir, "torchrun"))
    if not attempts:
        return ""
    last = max(attempts)[1]
    here = socket.gethostname()
    global_of = {r.hello.local_rank: rank for rank, r in state.ranks.items() if r.hello is not None and r.hello.host in ("", here)}
    said = []
    for local in sorted(int(d.name) for d in os.scandir(last) if d.name.isdigit()):
        try:
            with open(os.path.join(last, str(local), "error.json")) as fh:
                message = json.load(fh).get("message")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(message, dict):
            message = message.get("message")
        first = (str(message or "").strip().splitlines() or ["no message"])[0]
        who = f"rank {global_of[local]}" if local in global_of else f"local rank {local}"
        said.append(f"{who} failed: {first}")
    return "; ".join(said)


def _over_unsupervised(job, client, supervisor_code: int) -> int:
    """Under the TUI, every rank done and the supervisor gone (killed outright mid-run): the job
    ended by itself, as the TUI saw. Its result.json, which the supervisor would have written, is
    written from here, and the launch's code is the run's own outcome (it said "its ranks may
    train on without it" of a finished job, exited 1, and wrote no result)."""
    from pardash.telemetry.failures import failure_summary

    _wait_for_ranks_here(client.state)
    code = 0 if failure_summary(client.state) is None else 1
    _write_result(job, client, code, supervisor_code)
    print(f"{PROG}: {_lost_words(supervisor_code)}; the job ended by itself", file=sys.stderr, flush=True)
    return code


def _stop_unsupervised(job, sig: int, client) -> int:
    """Stop a job whose supervisor is gone, from here (a Ctrl-C, or Stop in the TUI): torchrun
    gets SIGTERM as the supervisor would have sent it. Before, the ranks trained on, and the
    launch could not stop them. Its result.json, which the supervisor would have written, is
    written from here."""
    from pardash.telemetry.failures import failure_summary
    from pardash.telemetry.state import run_over
    from pardash.trainer.jobprocs import stop_unsupervised

    spec = job.spec
    print(f"{PROG}: stopping the job (its supervisor is gone: torchrun gets SIGTERM from here)...", file=sys.stderr, flush=True)
    hub = (_own_hub_entry(spec) or {}).get("pid") or job.endpoints.get("pid") or 0
    # (in the words the supervisor would have said it in to the viewers attached, the log and its
    # report: not "by you", of a stop they had not made)
    who = ("by the launch's viewer" if getattr(spec, "viewer_pid", 0) else "by Ctrl-C at the launch") if sig == signal.SIGINT else f"by {signal.Signals(sig).name}"
    try:
        found = stop_unsupervised(job.supervisor.pid, spec.run_id, hub_pid=int(hub), ingest=job.endpoints.get("ingest", ""),
                                  curve_dir=spec.curve_dir, who=who)  # fmt: skip
    except KeyboardInterrupt:
        print(f"{PROG}: not waiting for the job to stop; log {_log_of(spec)}", file=sys.stderr, flush=True)
        return 128 + sig
    supervisor_code = job.poll() or 0
    if not found:
        client.poll()  # (its ranks' last words)
        if run_over(client.state):  # it ended by itself: as it ended
            _write_result(job, client, 0 if failure_summary(client.state) is None else 1, supervisor_code)
        print(f"{PROG}: the job had ended; log {_log_of(spec)}", file=sys.stderr, flush=True)
        return 1
    _write_result(job, client, 128 + sig, supervisor_code, stopped_by=sig)
    by = " by you" if sig == signal.SIGINT else ""
    print(f"{PROG}: stopped{by} (exit code {128 + sig}); log {_log_of(spec)}", file=sys.stderr, flush=True)
    return 128 + sig


RANKS_EXIT_S = 15.0
"""How long a launch whose supervisor is gone waits, once every rank has said it is done, for
this node's rank processes to end (their last flush, torchrun's teardown)."""


def _wait_for_ranks_here(state, timeout_s: float = RANKS_EXIT_S) -> None:
    """Wait until this node's ranks (their hellos' pids) have ended, at most ``timeout_s``: the
    launch returned as they said they finished, their processes, GPU memory and all, still
    there for the next command."""
    import socket

    here = socket.gethostname()
    pids = {r.hello.pid for r in state.ranks.values() if r.hello is not None and r.hello.pid and r.hello.host in ("", here)}
    deadline = time.monotonic() + timeout_s
    while pids and time.monotonic() < deadline:
        pids = {pid for pid in pids if registry.pid_alive(pid)}
        if pids:
            time.sleep(0.1)


def _prometheus_flags(ns: argparse.Namespace) -> str:
    """The Prometheus flags given, as the user wrote them ("" for none)."""
    given = [flag for flag, on in (("--prometheus", ns.prometheus is not None), ("--prometheus-textfile", bool(ns.prometheus_textfile))) if on]
    return " and ".join(given)


def _prometheus_spec(ns: argparse.Namespace, spec) -> None:
    """Pass --prometheus and --prometheus-textfile on to the hub the supervisor starts."""
    if ns.prometheus_textfile:
        # Absolute: the hub writes where the user meant, whatever folder it runs in.
        spec.prometheus_textfile = os.path.abspath(ns.prometheus_textfile)
        spec.prometheus_per_rank = ns.prometheus_per_rank
    if ns.prometheus is None:
        return
    spec.prometheus_port = ns.prometheus
    spec.prometheus_addr = ns.prometheus_addr
    spec.prometheus_per_rank = ns.prometheus_per_rank


def _warn_if_telemetry_off() -> None:
    """PARDASH_TELEMETRY=0 left in the environment (it switches a rank's publishing off, for
    A/B timing) made a launch that showed and logged nothing, and ended "no step taken"."""
    from pardash.telemetry.env import TELEMETRY_VAR, telemetry_switched_off

    if telemetry_switched_off():
        print(f"{PROG}: warning: {TELEMETRY_VAR}={os.environ[TELEMETRY_VAR]} in the environment: the ranks publish "
              f"nothing, so the dashboard and the log stay empty (unset it to watch them)", file=sys.stderr, flush=True)
