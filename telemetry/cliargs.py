"""Value types for the command lines' numbers (``type=`` of argparse): a bad value is a
one-line usage error naming the flag, never a traceback from deep inside (a port past 65535
reached the socket's bind, a frame rate of 0 a division). And the flags the hub's and
Prometheus's commands share (:func:`hub_arguments`, :func:`prometheus_arguments`), here rather
than beside the code that serves them: every command builds the whole parser, and defining them
there loaded the hub's state, its security and ZeroMQ into `pardash ps` and `pardash report`
(40 ms of each one's start-up)."""

from __future__ import annotations

import argparse
import re

INSECURE_HELP = (
    "let the hub (and /metrics, --prometheus-addr) bind beyond loopback without keys: anyone who reaches those ports "
    "can read the run and send it records"
)
"""--insecure's help, the same for every command that has it."""


def _number(text: str, kind: type) -> int | float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'a whole number' if kind is int else 'a number'}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def port(text: str) -> int:
    """A TCP port, 0-65535 (0: a free one)."""
    n = _number(text, int)
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"{n} is not a port (0-65535)")
    return n


def hub_port(text: str) -> int:
    """A hub's ingest port: the hub also takes the next two, so 0-65533 (0: free ones)."""
    n = port(text)
    if n > 65533:
        raise argparse.ArgumentTypeError(f"{n}: a hub takes PORT..PORT+2, so at most 65533")
    return n


def positive(text: str) -> float:
    """A number above 0 (a rate, an interval)."""
    x = _number(text, float)
    if x <= 0:
        raise argparse.ArgumentTypeError(f"{x:g} must be above 0")
    return x


def count(low: int, high: int | None = None):
    """A whole number from ``low`` (to ``high``): ``type=count(1)`` for a number of ranks."""

    def parse(text: str) -> int:
        n = _number(text, int)
        if n < low or (high is not None and n > high):
            raise argparse.ArgumentTypeError(f"{n} is not in {low}..{high}" if high is not None else f"{n} must be at least {low}")
        return int(n)

    parse.__name__ = "count"  # argparse names the type in its messages
    return parse


def path(text: str) -> str:
    """A file or folder named on the command line: an empty one ('' from an unset shell
    variable) would mean the current folder, or match every run id."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty; give a path")
    return text


_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=@-]{0,127}")


def valid_run_id(text: str) -> bool:
    """A run id names a folder (runs/ID) and a registry file (ID.json): letters, digits and
    ``. _ + = @ -``, not first, at most 128 (never ``/`` or ``..``: outside its folder)."""
    return _RUN_ID.fullmatch(text) is not None


def run_id(text: str) -> str:
    if not valid_run_id(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: a run id is letters, digits and . _ + = @ - (not first), at most 128 (it names a folder and a file)"
        )
    return text


class StartStep(int):
    """``replay --start step:N``: the replay begins as the run first reached step N (a NaN's
    step, a straggler's: what `pardash report` and the headless lines name), not at a time."""


def replay_position(text: str) -> float | StartStep:
    """Where a replay begins: seconds into the run (``90``, ``1:30``, ``1:02:03``), ``end``
    (its last figures; inf, which a seek takes as the end) or ``step:N`` (a :class:`StartStep`)."""
    if text.strip().lower() == "end":
        return float("inf")
    if text.strip().lower().startswith("step"):
        number = text.strip()[4:].lstrip(": =")
        if not number.isdigit():
            raise argparse.ArgumentTypeError(f"{text!r} is not a step: step:N, N a step's number (step:120)")
        return StartStep(int(number))
    parts = text.strip().removesuffix("s").split(":")
    if len(parts) > 3:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time into the run (seconds, M:SS, H:MM:SS, end or step:N)")
    seconds = 0.0
    for i, part in enumerate(parts):
        try:
            x = _number(part, float)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a time into the run (seconds, M:SS, H:MM:SS, end or step:N)") from None
        if x < 0:
            raise argparse.ArgumentTypeError(f"{text!r}: a time into the run is not negative")
        if i and x >= 60:
            raise argparse.ArgumentTypeError(f"{text!r}: minutes and seconds after a colon go up to 59 (1:30, 1:02:03)")
        seconds = seconds * 60 + x
    return seconds


def rank_set(text: str) -> frozenset[int]:
    """Ranks as a person lists them: ``0,17,100-103``."""
    ranks: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a list of ranks (e.g. 0,17,100-103)") from None
        if first < 0 or last < first:
            raise argparse.ArgumentTypeError(f"{part.strip()!r} is not a rank or a range of ranks (e.g. 100-103)")
        if last - first >= 1 << 20:
            raise argparse.ArgumentTypeError(f"{part.strip()!r}: more ranks than a job has")
        ranks.update(range(first, last + 1))
    return frozenset(ranks)


TEXTFILE_EVERY_S = 5.0
"""Seconds between two writes of --prometheus-textfile while the hub runs: node_exporter reads
the file when it is scraped (every 15-60 s), so a newer one would never be read; what counts is
the write as the hub stops."""
TEXTFILE_SUFFIX = ".prom"


def textfile_name(text: str) -> str:
    """``--prometheus-textfile``'s value (``type=`` of argparse): a name node_exporter reads."""
    text = path(text)
    if not text.endswith(TEXTFILE_SUFFIX):
        raise argparse.ArgumentTypeError(
            f"{text!r} does not end in {TEXTFILE_SUFFIX}: node_exporter's textfile collector reads only *{TEXTFILE_SUFFIX} files"
        )
    return text


def prometheus_arguments(p: argparse.ArgumentParser) -> None:
    """``--prometheus PORT``, ``--prometheus-addr``, ``--prometheus-per-rank``,
    ``--prometheus-textfile PATH`` (hub, launch, simulate; served by telemetry/prometheus.py)."""
    p.add_argument("--prometheus", type=port, default=None, metavar="PORT", help="serve Prometheus metrics on http://ADDR:PORT/metrics (0: a free port) while the hub runs; a launched hub stops with its job, so for the job's final state use --prometheus-textfile")
    p.add_argument("--prometheus-addr", default="127.0.0.1", metavar="ADDR", help="address /metrics binds (default 127.0.0.1; beyond loopback only with --insecure: /metrics has no authentication)")
    p.add_argument("--prometheus-per-rank", action="store_true", help="add per-rank series (pardash_rank_*; one series per rank and metric) to /metrics and the textfile")
    p.add_argument(
        "--prometheus-textfile", type=textfile_name, default=None, metavar="PATH",
        help=f"also write the metrics to PATH (ending in .prom; with or without --prometheus) every {TEXTFILE_EVERY_S:g} s and once more as the hub "
        "stops, whole or not at all: a batch job's final state (ranks finished or exited, totals) for node_exporter's textfile collector "
        "(PATH in its --collector.textfile.directory), which keeps it after the job and its /metrics are gone",
    )  # fmt: skip


def hub_arguments(p: argparse.ArgumentParser) -> None:
    """A hub's flags (`pardash hub`, ``python -m pardash.telemetry.hub``), Prometheus's with them."""
    p.add_argument("--run-id", type=run_id, default=None, help="run id (default: a new one; with --resume, the log's)")
    p.add_argument("--log", type=path, default=None, help="JSONL log path (default: runs/<run id>/telemetry.jsonl)")
    p.add_argument("--bind", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs --curve-dir or --insecure)")
    p.add_argument("--curve-dir", default=None, metavar="DIR", help="CURVE keys from `pardash keys`: only ranks and viewers with an authorised key get in (default $PARDASH_CURVE_DIR)")
    p.add_argument("--insecure", action="store_true", help=INSECURE_HELP)
    p.add_argument("--world-size", type=count(0), default=0, help="the job's number of ranks: refuse any other rank (default: learnt from the ranks)")
    p.add_argument("--port", type=hub_port, default=0, help="ingest port (default: a free one); when set, frames and snapshots take PORT+1 and PORT+2")
    p.add_argument("--frame-hz", type=positive, default=10.0, help="frames a second to viewers (default 10)")
    p.add_argument("--no-registry", action="store_true", help="do not list this hub in `pardash ps`")
    p.add_argument("--resume", action="store_true", help="carry on the existing log given by --log PATH: rebuild state from it, then append (its run id is kept)")
    prometheus_arguments(p)
