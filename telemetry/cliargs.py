"""Value types for the command lines' numbers (``type=`` of argparse): a bad value is a
one-line usage error naming the flag, never a traceback from deep inside (a port past 65535
reached the socket's bind, a frame rate of 0 a division)."""

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


def replay_position(text: str) -> float:
    """Where a replay begins: seconds into the run (``90``, ``1:30``, ``1:02:03``) or ``end``
    (its last figures; inf, which a seek takes as the end)."""
    if text.strip().lower() == "end":
        return float("inf")
    parts = text.strip().removesuffix("s").split(":")
    if len(parts) > 3:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time into the run (seconds, M:SS, H:MM:SS or end)")
    seconds = 0.0
    for i, part in enumerate(parts):
        try:
            x = _number(part, float)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a time into the run (seconds, M:SS, H:MM:SS or end)") from None
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
