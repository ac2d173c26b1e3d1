"""``pardash record``: keep a copy of a live run's log, from its hub (telemetry/logfeed.py)."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time

from pardash.parser import PROG, fail
from pardash.recorded import LOG_NAME
from pardash.telemetry import logfeed
from pardash.telemetry.client import AttachError, resolve, viewer_keys
from pardash.telemetry.security import CurveKeyError


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n / 1e3:,.1f} kB"


def _again(ns: argparse.Namespace, run: str) -> str:
    """The command that carries this copy on: the same run, into the same file, with the same
    keys (a hint without --curve-dir got no answer from a hub with keys)."""
    words = [PROG, "record", ns.target or run]
    if ns.output:
        words += ["-o", ns.output]
    elif os.path.abspath(ns.runs_dir) != os.path.abspath("runs"):  # (the copy is RUNS_DIR/<run id>/...)
        words += ["--runs-dir", ns.runs_dir]
    if ns.curve_dir:
        words += ["--curve-dir", ns.curve_dir]
    return shlex.join(words)


FIND_S = 10.0
"""How long a run not listed yet is looked for (a record started with its launch)."""


def cmd_record(ns: argparse.Namespace) -> int:
    stopped: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        stopped.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    end = time.monotonic() + FIND_S
    while True:
        try:
            info = resolve(ns.target)
            follower = logfeed.LogFollower(info["snapshot"], curve=viewer_keys(info, ns.curve_dir))
            break
        except CurveKeyError as exc:
            fail(str(exc))
        except AttachError as exc:
            # A run id, or none (the newest live run): a launch started a moment ago lists its
            # run once its hub is up.
            if (ns.target or "").startswith("tcp://") or time.monotonic() >= end or stopped or "begins" in str(exc):
                fail(str(exc))
            time.sleep(0.2)
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
            print(f"{PROG} record: run {cp.run}: {cp.path} holds {_mb(cp.offset)}"
                  f"{', following it live' if cp.caught_up else ''}", file=sys.stderr, flush=True)  # fmt: skip

    run_id = info.get("run_id", "")
    where = ns.target if (ns.target or "").startswith("tcp://") else f"run {run_id}"
    try:
        cp = logfeed.follow(
            follower, ns.output,
            default_out=lambda run: os.path.join(ns.runs_dir, run or "run", LOG_NAME),
            wait_s=ns.wait, progress=progress, stop=lambda: bool(stopped),
            run_gone=(lambda: not logfeed.run_live(run_id)) if run_id else (lambda: False),
        )  # fmt: skip
    except logfeed.CopyError as exc:
        why = str(exc)
        code = 2 if isinstance(exc, logfeed.CopyRefused) else 1  # (bad input, as attach has it; else the hub's doing)
        if why == "stopped":
            print(f"{PROG} record: stopped before the hub answered; nothing was copied", file=sys.stderr)
            return 130
        if why == "no answer":
            hint = "; a hub with CURVE keys answers only viewers with an authorised key (--curve-dir DIR or PARDASH_CURVE_DIR)"
            fail(f"no answer from the hub of {where} (its snapshot port, {follower.endpoint}); is the run still live? "
                 f"(`{PROG} ps`){hint if follower.keys is None else ''}", code)  # fmt: skip
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
