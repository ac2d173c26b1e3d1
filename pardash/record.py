"""``pardash record``: keep a copy of a live run's log, from its hub (telemetry/logfeed.py)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from pardash.parser import PROG, command, fail
from pardash.recorded import LOG_NAME
from pardash.telemetry import logfeed, registry
from pardash.telemetry.client import AttachError, hub_address, resolve, unanswered, viewer_keys
from pardash.telemetry.security import CurveKeyError


def _mb(n: int) -> str:
    """Bytes as report's, replay's and export's progress say them (MiB, not MB)."""
    from pardash.telemetry.summary import human_bytes

    return human_bytes(n)


def _again(ns: argparse.Namespace, run: str) -> str:
    """The command that carries this copy on: the same run, into the same file, with the same
    keys (a hint without --curve-dir got no answer from a hub with keys)."""
    words = [ns.target or run]
    if ns.output:
        words += ["-o", ns.output]
    elif os.path.abspath(ns.runs_dir) != os.path.abspath("runs"):  # (the copy is RUNS_DIR/<run id>/...)
        words += ["--runs-dir", ns.runs_dir]
    return command("record", *words, curve_dir=ns.curve_dir)


FIND_S = 10.0
"""How long a run not listed yet is looked for, from the start of a pardash command that may be
starting it (a record started with its launch: the launch prints its run's id before its hub is
up and lists it)."""
FIRST_ANSWER_S = 5.0
"""How long the hub's first answer is waited for before saying why none came (as `attach`
waits for its snapshot)."""
STARTERS = frozenset({"launch", "hub", "simulate"})
"""The commands that start a run (a hub, listed in the run registry)."""
REGISTRY_VARS = ("PARDASH_REGISTRY_DIR", "XDG_RUNTIME_DIR", "HOME")
"""What decides a process's run registry, the first one set (see telemetry/registry.py)."""


def run_over_or(target: str | None, why: str, runs_dir: str = "runs") -> str:
    """For a run id that no live hub serves but that a run folder under ``runs_dir`` holds (a
    run that has ended), where its record is; else ``why``. ("no live run" sent a user
    attaching to, or recording, yesterday's run to `pardash ps`, which lists only live ones.)"""
    from pardash.recorded import run_folder_log

    if not target or target.startswith("tcp://") or os.sep in target or not os.path.isdir(runs_dir):
        return why
    if any(str(e.get("run_id", "")).startswith(target) for e in registry.live_runs()):
        return why  # live after all: what kept the viewer out (keys it lacks, an id too short) is the news
    logs = {
        d: log for d in sorted(os.listdir(runs_dir)) if d.startswith(target) and (log := run_folder_log(os.path.join(runs_dir, d)))
    }  # fmt: skip
    if len(logs) != 1:
        return why
    ((run, log),) = logs.items()
    where = "" if os.path.abspath(runs_dir) == os.path.abspath("runs") else f" --runs-dir {runs_dir}"
    return f"run {run} is over (no hub serves it now): `{PROG} report {run}{where}` sums it up, `{PROG} replay {log}` shows it"


def _starts_a_run(line: list[str], target: str | None) -> bool:
    """Whether a command line is a pardash command that starts a run (``pardash launch``,
    ``pardash hub``, ``pardash simulate``, or the hub module they run) that may be ``target``'s
    (a hub named for another run is not)."""
    if "pardash.telemetry.hub" not in line and not any(
        os.path.basename(arg) == "pardash" and nxt in STARTERS for arg, nxt in zip(line, line[1:])
    ):  # fmt: skip
        return False
    # A launch of a node > 0 starts no hub: its ranks send to node 0's, whose run is listed there.
    node = [b for a, b in zip(line, line[1:]) if a == "--node-rank"] + [a.split("=", 1)[1] for a in line if a.startswith("--node-rank=")]
    if any(n.strip() not in ("", "0") for n in node):
        return False
    named = [b for a, b in zip(line, line[1:]) if a == "--run-id"] + [a.split("=", 1)[1] for a in line if a.startswith("--run-id=")]
    return not (target and named and not any(n.startswith(target) for n in named))


def _same_registry(env: dict[str, str]) -> bool:
    """Whether a process with the environment ``env`` lists its runs where this one looks."""
    for var in REGISTRY_VARS:
        if env.get(var) or os.environ.get(var):
            return env.get(var) == os.environ.get(var)
    return True


def _starting(target: str | None) -> list:
    """This user's pardash commands begun in the last FIND_S that start a run listed where this
    one looks (psutil processes): a run not listed yet may be theirs. With none, a run not
    listed never will be, and is said at once (it was looked for 10 s in silence)."""
    import psutil

    now = time.time()
    found = []
    for p in psutil.process_iter(["uids", "create_time", "cmdline"]):
        info = p.info
        if p.pid == os.getpid() or not info["cmdline"] or info["uids"] is None or info["uids"].real != os.getuid():
            continue
        if now - (info["create_time"] or 0) > FIND_S or not _starts_a_run(info["cmdline"], target):
            continue
        try:
            if _same_registry(p.environ()):
                found.append(p)
        except psutil.Error:
            continue
    return found


def _unlisted(starting: list) -> list:
    """Those of ``starting`` (from :func:`_starting`) still running whose run is not listed yet:
    neither they nor a process of theirs (a launch's supervisor and hub, a simulate's hub) is a
    live entry's hub."""
    import psutil

    listed = {e.get("pid") for e in registry.live_runs(prune=False)}
    out = []
    for p in starting:
        try:
            if p.is_running() and not ({p.pid} | {c.pid for c in p.children(recursive=True)}) & listed:
                out.append(p)
        except psutil.Error:
            continue
    return out


def _find(ns: argparse.Namespace, stopped: list[int]) -> dict | None:
    """The run to copy (:func:`resolve`'s entry), or a one-line failure at once for what waiting
    cannot fix: a run id not listed with no run starting (an ended run's: where its record is,
    as `attach` says it), an id several runs begin. A run being started (see :func:`_starting`)
    is waited for, said so, up to FIND_S from its start; None once ``stopped`` (Ctrl-C)."""
    pending: list | None = None  # commands starting a run, not listed as of before the last look
    until = 0.0
    said = False
    while True:
        try:
            return resolve(ns.target)
        except AttachError as exc:
            why = str(exc)
        if stopped:  # (Ctrl-C while it waits for a run being started: not "no such run")
            return None
        if hub_address(ns.target) or "begins" in why:
            fail(why)
        if pending is None:
            over = run_over_or(ns.target, why, ns.runs_dir)
            if over != why:
                fail(over)
            starting = _starting(ns.target)
            until = max((p.info["create_time"] for p in starting), default=0.0) + FIND_S
            pending = _unlisted(starting)
            continue  # (looked for again: one of them may have listed its run meanwhile)
        if not pending or time.time() >= until:
            fail(why)
        if not said:
            said = True
            what = f"run {ns.target}" if ns.target else "a live run"
            print(f"{PROG} record: waiting for {what} to appear (`{_command(pending[0])}` is starting one)...", file=sys.stderr, flush=True)
        time.sleep(0.2)
        pending = _unlisted(pending)


def _command(proc) -> str:
    """A process's pardash command as a person typed it (``pardash launch``), from its line."""
    line = proc.info["cmdline"]
    verb = next((b for a, b in zip(line, line[1:]) if os.path.basename(a) == "pardash" and b in STARTERS), "hub")
    return f"{PROG} {verb}"


def cmd_record(ns: argparse.Namespace) -> int:
    stopped: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        stopped.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    info = _find(ns, stopped)
    if info is None:
        print(f"{PROG} record: stopped before the run appeared; nothing was copied", file=sys.stderr)
        return 128 + stopped[0]
    run_id = info.get("run_id", "")
    if not ns.target and (others := len(registry.live_runs(prune=False)) - 1) > 0:
        # (as `attach` says it: a second job's copy was of the newest with nothing said of the first)
        print(f"{PROG} record: recording the newest of {others + 1} live runs: {run_id} (`{PROG} ps` lists them; "
              f"`{PROG} record RUN_ID` picks one)", file=sys.stderr, flush=True)  # fmt: skip
    try:
        follower = logfeed.LogFollower(info["snapshot"], curve=viewer_keys(info, ns.curve_dir))
    except (AttachError, CurveKeyError) as exc:  # (keys it lacks, or cannot read: no wait mends that)
        fail(str(exc))
    said = [time.monotonic()]  # when the last progress line was printed

    def progress(cp: logfeed.Copy, news: str) -> None:
        now = time.monotonic()
        if news == "caught_up":
            print(f"{PROG} record: run {cp.run}: {cp.path} holds its log so far ({_mb(cp.offset)}); following it live",
                  file=sys.stderr, flush=True)  # fmt: skip
        elif news == "hub_restarted":
            print(f"{PROG} record: run {cp.run}: its hub restarted; the copy goes on", file=sys.stderr, flush=True)
        elif news == "hub_error":
            print(f"{PROG} record: run {cp.run}: its hub says: {cp.hub_error}; asking again", file=sys.stderr, flush=True)
        elif now - said[0] >= ns.every:
            said[0] = now
            # (catching up on a day's log takes minutes: how far, not a number growing alone)
            behind = "" if cp.caught_up or cp.hub_size <= cp.offset else f" of {_mb(cp.hub_size)} ({100 * cp.offset // cp.hub_size}%)"
            print(f"{PROG} record: run {cp.run}: {cp.path} holds {_mb(cp.offset)}{behind}"
                  f"{', following it live' if cp.caught_up else ''}", file=sys.stderr, flush=True)  # fmt: skip

    try:
        cp = logfeed.follow(
            follower, ns.output,
            default_out=lambda run: os.path.join(ns.runs_dir, run or "run", LOG_NAME),
            wait_s=ns.wait, first_wait_s=FIRST_ANSWER_S, progress=progress, stop=lambda: bool(stopped),
            run_gone=(lambda: not logfeed.run_live(run_id)) if run_id else (lambda: False),
        )  # fmt: skip
    except logfeed.CopyError as exc:
        why = str(exc)
        code = 2 if isinstance(exc, logfeed.CopyRefused) else 1  # (bad input, as attach has it; else the hub's doing)
        if why == "stopped":
            print(f"{PROG} record: stopped before the hub answered; nothing was copied", file=sys.stderr)
            return 130
        if why == "no answer":  # (said as `attach` says it: the hub refuses this viewer's key, nothing answers, ...)
            fail(unanswered(ns.target, run_id, follower.endpoint, follower), code)
        fail(why, code)
    finally:
        follower.close()
    held = f"{cp.path} holds"
    again = f"`{_again(ns, cp.run)}` carries it on"
    if cp.ended:
        print(f"{PROG} record: run {cp.run} ended; {held} its whole log ({_mb(cp.offset)}"
              f"{f', of which {_mb(cp.offset - cp.carried_from)} copied now' if cp.carried_from else ''})")  # fmt: skip
        return 0
    if stopped:
        print(f"{PROG} record: stopped; {held} run {cp.run}'s log up to byte {cp.offset:,}; {again}", file=sys.stderr)
        return 130
    if cp.gone:
        why = "its hub stopped without saying its log ended (killed?), and the run is live no more"
    else:
        why = f"no answer from its hub for {ns.wait:g} s, and it never said its log ended (stopped or killed)"
    print(f"{PROG} record: run {cp.run}: {why}; {held} its log up to byte {cp.offset:,}; {again} if it is back",
          file=sys.stderr)  # fmt: skip
    return 1
