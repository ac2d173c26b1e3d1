"""The ``pardash`` command line: every subcommand's flags and help, one-line errors.

:mod:`pardash.cli` runs what is parsed here. The bundled trainer's flags come from
:func:`pardash.trainer.config.add_arguments`, the hub's and /metrics' from their own modules, so
a flag is spelled in one place whichever command takes it.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from typing import Any, NoReturn

from pardash.telemetry import cliargs
from pardash.telemetry.limits import MAX_RANKS_TRACKED

PROG = "pardash"
BENCH_STEPS = 50
"""Steps each strategy of ``pardash bench`` runs unless --steps or --epochs says otherwise."""


def command(verb: str, *words: str, curve_dir: str | None = None) -> str:
    """``pardash VERB WORDS... [--curve-dir DIR]`` as a shell reads it (empty words left out):
    a command pardash suggests, with the keys a hub that has them needs (hints without
    --curve-dir failed as printed)."""
    keys = ["--curve-dir", curve_dir] if curve_dir else []
    return shlex.join([PROG, verb, *(w for w in words if w), *keys])


def fail(message: str, code: int = 2) -> NoReturn:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(code)


LOG_HELP = "a run's telemetry.jsonl, its folder, or its run id"
"""What report, replay and export take (pardash.recorded.find_log finds it)."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: what is wrong and where help is, exit code 2."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:"):
            # torchrun's habit, `torchrun --nproc-per-node 2 train.py`: pardash takes the script after `--`
            script = next((a for a in message.split()[2:] if a.endswith(".py")), None)
            argv = sys.argv[1:]
            argv = argv[: argv.index("--")] if "--" in argv else argv  # (a -m after it is the script's)
            module = next((b for a, b in zip(argv, argv[1:]) if a in ("-m", "--module")), None)
            if script and module:  # (it dropped the -m: "-- echo.py" would run another thing)
                self.exit(2, f"{self.prog}: error: {message}; a module's arguments go after `--`: "
                             f"{PROG} launch [OPTIONS] -m {module} -- {script} [ITS ARGS]\n")  # fmt: skip
            if script:
                self.exit(2, f"{self.prog}: error: {message}; a script goes after `--`: {PROG} launch [OPTIONS] -- {script} [ITS ARGS]\n")
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# -- launch and bench take the trainer's flags ------------------------------------------


def _launch_parser(sub) -> argparse.ArgumentParser:
    from pardash.trainer import config as train_config

    p = sub.add_parser(
        "launch",
        help="run the bundled trainer (or your script) under torchrun and watch it",
        usage="%(prog)s [OPTIONS] [-- SCRIPT [ARGS] | -m MODULE -- [ARGS]]",
        description=(
            "Run the bundled trainer (single, dp, ddp or fsdp) under torchrun, or any torchrun "
            "script after `--`, with a hub recording every rank's telemetry and the TUI (or, "
            "with --headless, progress lines) attached."
        ),
        epilog="examples:\n  pardash launch --strategy fsdp --nproc 4\n  pardash launch --nproc 2 --headless --steps 100\n  pardash launch --nproc 4 -- train.py --lr 3e-4",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("job (torchrun's meanings)")
    g.add_argument("--nproc", "--nproc-per-node", dest="nproc", type=int, default=None, help="ranks on this node (default 2; 1 with --strategy single or dp)")
    g.add_argument("--nnodes", type=int, default=1, help="number of nodes (default 1)")
    g.add_argument("--node-rank", type=int, default=0, help="this node's rank (default 0)")
    g.add_argument("--master-addr", default=None, help="address of node 0 (default 127.0.0.1)")
    g.add_argument("--master-port", type=cliargs.port, default=None, help="rendezvous port on node 0 (default: a free one on one node, 29500 on several)")
    g.add_argument("--max-restarts", type=cliargs.count(0), default=0, help="torchrun's elastic restarts (default 0)")
    v = p.add_argument_group("telemetry and view")
    v.add_argument("--headless", action="store_true", help="no TUI: print progress lines instead (the log is recorded either way)")
    v.add_argument("--log", type=cliargs.path, default=None, help="JSONL telemetry log (default RUNS_DIR/<run id>/telemetry.jsonl)")
    v.add_argument("--runs-dir", type=cliargs.path, default="runs", help="folder for run logs and outputs (default ./runs)")
    v.add_argument("--telemetry-addr", default=None, help="address the hub binds (default 127.0.0.1 on one node, the master address on several); on nodes > 0, where node 0's hub is")
    v.add_argument("--telemetry-port", type=cliargs.hub_port, default=0, help="hub ingest port; the hub takes PORT..PORT+2 (ingest, frames, snapshots: open or tunnel all three) (default: free ports on one node, 29600 on several)")
    v.add_argument("--every", type=cliargs.positive, default=5.0, help="seconds between headless progress lines (default 5)")
    v.add_argument("--curve-dir", default=None, metavar="DIR", help="CURVE keys from `pardash keys`: the hub admits only ranks and viewers with an authorised key (default $PARDASH_CURVE_DIR)")
    v.add_argument("--insecure", action="store_true", help=cliargs.INSECURE_HELP)
    cliargs.prometheus_arguments(v)
    t = p.add_argument_group("bundled trainer")
    train_config.add_arguments(t)
    p.add_argument("-m", dest="module", default=None, help="run this module under torchrun instead of the bundled trainer")
    return p


def _bench_parser(sub) -> argparse.ArgumentParser:
    from pardash.trainer import config as train_config

    b = sub.add_parser(
        "bench",
        help="run several strategies on the same model and data, and compare them",
        description="Run each strategy of --strategies (default single, ddp, fsdp; dp, when listed, only with 2+ GPUs) on the same model and data with telemetry, then print samples/s, step time and its phases, per-rank memory, the saving against DDP and scaling efficiency against single.",
    )
    b.add_argument("--strategies", default="single,ddp,fsdp", help="comma-separated strategies (default single,ddp,fsdp)")
    b.add_argument("--nproc", type=int, default=2, help="ranks for ddp/fsdp (default 2)")
    b.add_argument("--format", choices=("text", "markdown", "json"), default="text", help="output format (default text)")
    b.add_argument("--runs-dir", type=cliargs.path, default="runs", help="folder for the runs' logs (default ./runs)")
    t = b.add_argument_group(f"bundled trainer (same for every strategy; --steps defaults to {BENCH_STEPS})")
    train_config.add_arguments(t)
    for action in b._actions:  # --strategies replaces the trainer's --strategy here
        if action.dest == "strategy":
            action.help = argparse.SUPPRESS
        elif action.dest == "steps":  # and the bench's own default is 50
            action.help = f"optimizer steps each strategy runs (default {BENCH_STEPS}, unless --epochs)"
        elif action.dest == "resume":  # which the bench refuses (each strategy from step 1): not offered
            action.help = argparse.SUPPRESS
        elif action.dest.startswith("inject_"):  # ("rank 1 does not exist in a world of 1" of --inject-crash 1@3 read as a slip)
            text = action.help.replace(" (default: off)", "")
            # (bench takes no --max-restarts: the trainer's "so --max-restarts 1 ... shows the job recover" is no bench's)
            text = re.sub(r",? so --max-restarts .*? from its last checkpoint\.", ".", text)
            text = re.sub(r", and --max-restarts 1 shows the job recover\.", ".", text)
            action.help = text + " Every strategy gets it: single and dp run one rank (rank 0). (default: off)"
    b.set_defaults(strategy=None)
    return b


class _Once(argparse.Action):
    """An option given once: a second refused in one line (`--crash 8-15@30 --crash 3@20` crashed
    rank 3 alone, ranks 8-15 dropped without a word; several ranks go in one: 3,8-15@30)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:
        if getattr(namespace, self.dest) is not None and self.dest == "compare":
            # (`report A --compare X --compare Y` compared A with Y alone, without a word)
            parser.error(f"{option_string} given twice ({getattr(namespace, self.dest)} and {values}): a report sets one run "
                         "beside its log; run it once for each pair")  # fmt: skip
        if getattr(namespace, self.dest) is not None:
            example = "3,8-15" if self.dest == "straggler" else "3,8-15@30"
            parser.error(f"{option_string} given twice ({getattr(namespace, self.dest)} and {values}): give it once, its ranks "
                         f"together ({example})")  # fmt: skip
        setattr(namespace, self.dest, values)


class _VersionAction(argparse.Action):
    """--version, looked up only when asked (the package metadata costs a CLI start ~0.1 s)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"{PROG} {_version()}")
        parser.exit()


def _version() -> str:
    """pardash's installed version, with the torch it runs on."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("pardash")
    except PackageNotFoundError:
        ours = "(not installed)"
    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "none"
    return f"{ours} (torch {torch_version})"


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="A terminal dashboard for distributed PyTorch training.")
    p.add_argument("--version", action=_VersionAction, nargs=0, help="show pardash's version (and torch's) and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    _launch_parser(sub)

    h = sub.add_parser(
        "hub",
        help="run a hub alone, for jobs started by torchrun, srun or Kubernetes",
        description="Run a hub alone: ranks started by torchrun, srun or Kubernetes with PARDASH_ENDPOINT set to "
        "its ingest (printed at start) publish to it; it records the JSONL log and serves viewers (`pardash attach`).",
    )
    cliargs.hub_arguments(h)

    a = sub.add_parser(
        "attach",
        help="open the TUI on a running job",
        description="Open the TUI (or, with --headless or without a terminal, progress lines) on a live run: the "
        "newest, one named by its run id (`pardash ps`), its log or its folder, or a hub at tcp://HOST:PORT. A job `pardash launch` "
        "started can be stopped from here (q, then s), on its machine.",
    )
    a.add_argument("target", nargs="?", default=None, help="run id (prefix), a live run's log or folder, or tcp://HOST:PORT of a hub's ingest (default: the newest live run)")
    a.add_argument("--wait", action="store_true", help="wait for the run to appear (with no run named: a run started after this), or for the hub at "
                   "tcp://HOST:PORT to answer, until Ctrl-C: a viewer started before its job")  # fmt: skip
    a.add_argument("--headless", action="store_true", help="print progress lines instead of the TUI")
    a.add_argument("--every", type=cliargs.positive, default=5.0, help="seconds between progress lines (default 5)")
    a.add_argument("--curve-dir", default=None, metavar="DIR", help="CURVE keys from `pardash keys`, for a hub that admits only viewers with an authorised key (default $PARDASH_CURVE_DIR)")
    a.add_argument("--runs-dir", type=cliargs.path, default="runs", help="where a run id that has ended is looked for, to say how to see it (default ./runs)")

    sim = sub.add_parser(
        "simulate",
        help="a synthetic job of N ranks, to try the TUI without GPUs",
        description="A synthetic job of N ranks (a hub, the ranks and the viewer each a process, real sockets) with a straggler, "
        "stall, crash or NaN loss if asked, to try the TUI and the hub at 1024 ranks on a laptop.",
    )
    sim.add_argument("--ranks", type=cliargs.count(1, MAX_RANKS_TRACKED), default=64, help=f"number of ranks (default 64, at most {MAX_RANKS_TRACKED}, what a hub tracks)")
    sim.add_argument("--rate", type=cliargs.positive, default=10.0, help="steps a second per rank (default 10)")
    sim.add_argument("--ranks-per-node", type=cliargs.count(1), default=8, help="ranks per host (default 8)")
    sim.add_argument("--strategy", choices=("ddp", "fsdp"), default="fsdp", help="strategy to pretend (default fsdp)")
    sim.add_argument("--steps", type=cliargs.count(0), default=0, help="stop after this many steps (default 0: until quit)")
    sim.add_argument("--straggler", default=None, metavar="RANKS", action=_Once,
                     help="make these ranks stragglers from step 20: a rank (3), a range (8-15) or a list (1,5,9-10)")
    sim.add_argument("--straggler-kind", choices=("data", "compute"), default=None, help="what the --straggler is slow at (default data)")
    sim.add_argument("--stall", default=None, metavar="RANKS@STEP", action=_Once, help="these ranks stop at this step (8-15@300: a node hung)")
    sim.add_argument("--crash", default=None, metavar="RANKS@STEP", action=_Once,
                     help="these ranks exit with code 1 at this step (8-15@200: a node lost)")
    sim.add_argument("--nan", default=None, metavar="RANKS@STEP", action=_Once,
                     help="these ranks' loss turns NaN at this step (3@120: a bad batch), every other rank's at the next, to the end")
    sim.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    sim.add_argument("--headless", action="store_true", help="print progress lines; attach the TUI with `pardash attach`")
    sim.add_argument("--every", type=cliargs.positive, default=5.0, help="seconds between progress lines (default 5)")
    sim.add_argument("--log", type=cliargs.path, default=None, help="record the JSONL log here (default: no log; it grows fast, see --keep-log)")
    sim.add_argument("--keep-log", action="store_true", help="record the log under --runs-dir (the start line says how fast it grows)")
    sim.add_argument("--runs-dir", type=cliargs.path, default="runs", help="folder for kept logs (default ./runs)")
    sim.add_argument("--bind", default="127.0.0.1", help="hub address (default 127.0.0.1)")
    sim.add_argument("--port", type=cliargs.hub_port, default=0, help="hub ingest port; when set, frames and snapshots take PORT+1 and PORT+2 (default: free ports)")
    sim.add_argument("--insecure", action="store_true", help=cliargs.INSECURE_HELP + "; simulated ranks hold no keys, so it is the only way off loopback")
    cliargs.prometheus_arguments(sim)

    rec = sub.add_parser(
        "record",
        help="keep a copy of a live run's log, from its hub, as it is written",
        description="Copy a live run's JSONL log from its hub, from the run's first line to its last, as the hub "
        "writes it: a copy on this machine of a job whose log is on another (a Kubernetes pod's disk goes with the "
        "pod). report, replay and export read the copy; run the same command again to carry a stopped copy on. "
        "It ends when the run's hub stops, with the log's last line.",
    )
    rec.add_argument("target", nargs="?", default=None, help="run id (prefix), the live run's log or run folder (as `pardash ps` lists it), or tcp://HOST:PORT of a hub's ingest (default: the newest live run)")
    rec.add_argument("-o", "--output", type=cliargs.path, default=None, metavar="PATH", help="where the copy goes (default RUNS_DIR/<run id>/telemetry.jsonl)")
    rec.add_argument("--runs-dir", type=cliargs.path, default="runs", help="folder of the default copy (default ./runs)")
    rec.add_argument("--curve-dir", default=None, metavar="DIR", help="CURVE keys from `pardash keys`, for a hub that admits only viewers with an authorised key (default $PARDASH_CURVE_DIR)")
    rec.add_argument("--wait", type=cliargs.positive, default=60.0, metavar="SECONDS", help="how long a silent hub is waited for (restarted, or a network gone) before the copy stops (default 60)")
    rec.add_argument("--every", type=cliargs.positive, default=10.0, help="seconds between progress lines (default 10)")

    ps = sub.add_parser("ps", help="list live runs", description="List your live runs on this machine (from $PARDASH_REGISTRY_DIR, else $XDG_RUNTIME_DIR/pardash, else $XDG_CACHE_HOME/pardash/runs (~/.cache); other users' runs are not read): run id, strategy, ranks, age, STEP (the slowest running rank's, of the steps the run plans, and the time left) and SAMPLES/S as its hub last said them (every 5 s), whether its hub takes only viewers with keys (KEYS curve: pass --curve-dir to attach and record), JOB (running, or 'running, 1 joined' where ranks ran out of inputs under DDP\'s Join; 2 stalled, 2 silent, or 4 stuck of both; of a hub alone, finished or failed once every rank ended; quiet 2m05s where its hub has not said where the run is for that long, its STEP as of then; stopped or ended CODE by a launch's result.json), hub, log and COMMAND (what each rank of a launch runs: python train.py --lr 3, or the bundled trainer's flags; cut to the terminal's width).")
    ps.add_argument("--json", action="store_true", help="print the registry entries as JSON")

    r = sub.add_parser(
        "replay",
        help="the TUI over a recorded log",
        description="Play a recorded run's log in the TUI: space pauses, + and - change speed, [ and ] move 10 s, { and } 60 s, < and > go to the start and the end, o shows the ranks' output.",
    )
    r.add_argument("log", type=cliargs.path, help=LOG_HELP)
    r.add_argument("--runs-dir", type=cliargs.path, default="runs", help="where to look for a run id (default ./runs)")
    r.add_argument("--speed", type=cliargs.positive, default=1.0, help="playback speed (default 1.0)")
    r.add_argument(
        "--start", type=cliargs.replay_position, default=0.0, metavar="WHEN",
        help="begin this far into the run: seconds, M:SS or H:MM:SS; `step:N` where the run first reached step N (a step the "
             "report or a warning names); or `end` for its last figures (default: its first step)",
    )  # fmt: skip

    rep = sub.add_parser(
        "report",
        help="per-rank summary of a recorded log",
        description="Summarise a recorded run: per-rank steps, times, memory against what the strategy should hold, "
        "stragglers and their cost, stalls, exits and the root cause, checkpoints; --compare sets two runs side by side.",
        epilog="--format json: one object for scripts. Its main keys: run_id, strategy, world_size, params_count, "
        "duration_s, train_s, steps, samples_per_s, median_step_s, phases (medians a step, by phase), custom_phases (the "
        "same of the script's own pt.phase blocks, by name), ranks (one object a rank: steps, median_step_s, last_loss, "
        "params_bytes, held_bytes, peak_bytes, custom_phases, ...), timeline (the run in about 10 parts of its steps: "
        "first_step, last_step, wall_s, samples_per_s, step_s_median, step_s_p90, loss_median, straggler_s, ...), stragglers, stalls, exits, "
        "failure (the root cause), checkpoints, warnings, memory, lost_messages, skipped_lines, log_ends_early, restart_s, "
        "and, only where a job was run again by hand under the run's id, between_jobs_s and jobs_run_again, only in a log "
        "its hub closed under ranks still running, hub_stopped_first, "
        "gzip_damage, and where ranks of the world never reported, ranks_unheard and samples_partial. Units are in the names: *_s seconds, *_bytes bytes, *_per_s a second; null where the log does "
        "not say. Keys are added, never renamed; the docstring of pardash.telemetry.report says what they answer "
        "(python -m pydoc pardash.telemetry.report).",
    )
    rep.add_argument("log", type=cliargs.path, help=LOG_HELP)
    rep.add_argument("--runs-dir", type=cliargs.path, default="runs", help="where to look for a run id (default ./runs)")
    rep.add_argument("--format", choices=("text", "json", "markdown"), default="text", help="output format (default text)")
    rep.add_argument("--all-ranks", action="store_true", help="list every rank in the text and markdown rank tables (past 32 ranks they list the ranks that stand out and fold the rest into one row; JSON lists every rank); with --compare, each rank's step, self and data times, A against B")
    rep.add_argument("--compare", type=cliargs.path, default=None, metavar="LOG_B", action=_Once, help="set this second run (a log, folder or run id) beside the first (DDP against FSDP, before against after), once: a change is judged better or worse only past 3 times the runs' own noise (how much each run's pace moved from part to part over its course), and 'host load' where nothing the logs record differs and the slower run's ranks got less of their host's CPU for the same CPU a step")

    k = sub.add_parser(
        "keys",
        help="make CURVE keys: a hub bound beyond loopback admits only ranks and viewers holding them",
        description=(
            "Make a server and a client CURVE key pair (files readable by you only) and admit the "
            "client key. Give the folder to the hub (--curve-dir DIR) and to ranks and viewers "
            "(PARDASH_CURVE_DIR=DIR); copy it to the other nodes of a job. "
            "With --viewer NAME, make a key for someone who should watch the run and never send it records: "
            "admitted in DIR/authorized_viewers/NAME.key, it gets frames, snapshots and log copies, and the hub "
            "refuses it on the ranks' ingest. Its folder (DIR/viewers/NAME/, or --out) holds the hub's server.key "
            "and the viewer's client.key and client.key_secret: give it to the viewer as is, as their "
            "--curve-dir or PARDASH_CURVE_DIR. A running hub takes a viewer key added or removed within a second."
        ),
    )
    k.add_argument("--dir", type=cliargs.path, default=None, help="key folder (default $PARDASH_CURVE_DIR, else ~/.config/pardash/curve; hub, launch, attach and record do not look there by themselves: pass --curve-dir DIR or export PARDASH_CURVE_DIR, as this command prints); with --viewer, the hub's key folder")
    k.add_argument("--viewer", default=None, metavar="NAME", help="make a watch-only key for viewer NAME (letters, digits, '.', '_', '-') in a hub's key folder made before")
    k.add_argument("--out", type=cliargs.path, default=None, metavar="OUT", help="with --viewer: the viewer's key folder (default DIR/viewers/NAME/)")
    k.add_argument("--force", action="store_true", help="replace existing keys: every client and viewer key admitted in authorized_clients/ and authorized_viewers/ is revoked (running hubs refuse them within a second); running hubs keep the old server key until restarted. With --viewer: replace that viewer's key only")

    _bench_parser(sub)

    ex = sub.add_parser(
        "export",
        help="write a recorded log's per-rank scalars and events for TensorBoard, or its steps as CSV",
        description="Write a recorded run's per-rank scalars (loss, step and phase times, memory, custom metrics, system "
        "samples: GPU and CPU utilisation, memory, temperature; evaluation, checkpoint save and load times) and its events "
        "(checkpoints, errors with their tracebacks, exits, warnings, the hub's verdicts) as TensorBoard event files, one "
        "folder a rank: `tensorboard --logdir DIR`; or (--csv FILE) its steps as one CSV table, a row a rank's step.",
    )
    ex.add_argument("log", type=cliargs.path, help=LOG_HELP)
    ex.add_argument("--runs-dir", type=cliargs.path, default="runs", help="where to look for a run id (default ./runs)")
    ex.add_argument("--tensorboard", default=None, metavar="DIR", help="folder for the event files: DIR/rank0, DIR/rank1, ...")
    ex.add_argument("--csv", default=None, metavar="FILE",
                    help="one CSV table of the steps, a row a rank's step (run, rank, restart, step, t, then loss, lr, epoch, samples, "
                         "samples_total, time/step_s, memory/held_bytes ... as TensorBoard's tags, the same columns in the same "
                         "order for every run, empty where the log has none, then the script's own phases and custom/NAME; nan "
                         "or inf where the loss was not finite): for pandas, R or a spreadsheet; - writes it to stdout")  # fmt: skip
    ex.add_argument(
        "--ranks", type=cliargs.rank_set, metavar="LIST",
        help="only these ranks, e.g. 0,17,100-103 (default: every rank; TensorBoard shows each as a run)",
    )  # fmt: skip
    ex.add_argument(
        "--force", action="store_true",
        help="export into a DIR that holds an earlier export (of a run that was still going, say): its event files are "
        "replaced, every rank's, once this export is written; no other file is touched, and a DIR holding event files "
        "another writer made is refused",
    )  # fmt: skip
    return p
