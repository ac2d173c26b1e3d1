"""Checks a ``pardash`` command makes before it starts anything: a refusal is one line and exit
code 2, and nothing is left behind."""

from __future__ import annotations

import argparse
import codecs
import os
import sys
from typing import Any

from pardash.parser import PROG, fail


def gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0


def port_free(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def check_hub_ports(flag: str, bind: str, port: int) -> None:
    """Refuse a hub's ports (PORT..PORT+2) that are taken, before anything starts."""
    for p in (port, port + 1, port + 2):
        if not port_free(bind, p):
            fail(f"{flag} {port}: port {p} is busy; pick another (the hub uses PORT..PORT+2)")


def check_prometheus(ns: argparse.Namespace) -> None:
    """Refuse, before anything starts (one line, exit 2): /metrics beyond loopback without
    --insecure (HTTP has no CURVE keys: anyone who reaches it reads the run), a busy port, a
    --prometheus-textfile whose folder takes no file."""
    from pardash.telemetry import security

    textfile = getattr(ns, "prometheus_textfile", None)
    if textfile:
        from pardash.telemetry.prometheus import textfile_refusal

        if refusal := textfile_refusal(textfile):
            fail(refusal)
    if getattr(ns, "prometheus", None) is None:
        if getattr(ns, "prometheus_per_rank", False) and not textfile:
            fail("--prometheus-per-rank goes with --prometheus PORT (0: a free port) or --prometheus-textfile PATH; without either nothing is served")
        return
    refusal = security.metrics_refusal(ns.prometheus_addr, insecure=getattr(ns, "insecure", False))
    if refusal:
        fail(refusal)
    hub = next((port for name in ("telemetry_port", "port") if (port := getattr(ns, name, None))), None)
    if hub is None and getattr(ns, "nnodes", 1) > 1:
        hub = 29600  # (a launch of several nodes: the hub's default there, launch.py's)
    if getattr(ns, "node_rank", 0) > 0:
        hub = None  # (no hub on a node > 0: its ranks send to node 0's)
    if ns.prometheus and hub and hub <= ns.prometheus <= hub + 2:
        # (free before the start, then taken by the hub: it read "cannot serve /metrics ...
        # (Address already in use)" with nothing else on the port; review 323)
        flag = "--telemetry-port" if hasattr(ns, "telemetry_port") else "--port"
        fail(f"--prometheus {ns.prometheus}: the hub takes {flag} {hub} and the two after it ({hub}-{hub + 2}); choose another --prometheus PORT")
    if ns.prometheus and not port_free(ns.prometheus_addr, ns.prometheus):
        fail(f"--prometheus {ns.prometheus}: port {ns.prometheus} is busy on {ns.prometheus_addr}; choose another --prometheus PORT")


def check_insecure_with_keys(ns: argparse.Namespace) -> None:
    """Refuse --insecure beside --curve-dir DIR (one line, exit 2): --insecure is for a hub bound
    beyond loopback *without* keys (anyone who reaches it gets in); with keys the hub admits
    only their holders whatever --insecure says, so one of the two was not meant. Both were
    taken without a word. Kept where --insecure still does something: /metrics beyond loopback
    (plain HTTP takes no keys), --prometheus-addr."""
    if not getattr(ns, "insecure", False):
        return
    from pardash.telemetry import security

    # (PARDASH_CURVE_DIR, as `pardash keys` says to export, is taken as --curve-dir is: a hub
    # asked for with --insecure came up keyed without a word)
    keys = f"--curve-dir {ns.curve_dir}" if getattr(ns, "curve_dir", None) else None
    drop = "drop one of the two"
    if keys is None and "curve_dir" in ns and (env := security.curve_dir_from_env()):
        keys, drop = f"{security.CURVE_DIR_VAR}={env} (in the environment)", f"unset {security.CURVE_DIR_VAR} or drop --insecure"
    if keys is None:
        return
    if getattr(ns, "prometheus", None) is not None and not security.is_loopback(ns.prometheus_addr):
        return
    fail(f"{keys} with --insecure: with keys the hub admits only the ranks and viewers holding them, "
         f"so --insecure (a hub beyond loopback without keys, open to anyone) would do nothing; {drop}")  # fmt: skip


NO_TERMINAL = "no terminal here"


def _tty(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (a stream closed before Python started, ``<&-``, is
    None: launch, simulate, replay and attach failed with a traceback on it)."""
    return stream is not None and stream.isatty()


def _codec(encoding: str) -> str:
    """The codec's own name of ``encoding`` ("utf8", "UTF-8" -> "utf-8"); itself where unknown."""
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        return encoding


def no_tui_here() -> str:
    """Why the TUI cannot be shown here ('' where it can): no terminal (CI, nohup, a pipe), or
    stderr not one (Textual draws there: `2>err.log` sent the whole TUI into the file, the
    terminal blank), or TERM=dumb (a terminal that cannot redraw: the TUI stood on its first
    frame and took no key; review 279), or a terminal whose encoding is not UTF-8 (a locale
    such as LANG=en_US, ISO-8859-1: the TUI's borders and glyphs came out as "\u2500" text
    and its layout in pieces, review 302; the progress lines are ASCII)."""
    if not (_tty(sys.stdin) and _tty(sys.stdout)):
        return NO_TERMINAL
    if not _tty(sys.stderr):
        return "stderr is not the terminal (the TUI draws there)"
    if os.environ.get("TERM", "") == "dumb":
        return "TERM=dumb cannot redraw"
    encoding = getattr(sys.stderr, "encoding", None) or ""
    if encoding and _codec(encoding) != "utf-8":
        return f"the terminal's encoding is {encoding}, not UTF-8 (set LANG to a UTF-8 locale, such as C.UTF-8, for the TUI)"
    return ""


def headless_without_terminal(ns: argparse.Namespace) -> None:
    """Without a terminal (CI, nohup, a pipe) nobody could see the TUI or quit it, and the
    command would wait for its `q` for ever: progress lines instead, said once."""
    why = "" if ns.headless else no_tui_here()
    if why:
        # Where the person at the terminal reads it: with `2>err.log` the lines came on the
        # terminal and their reason went into the file.
        to = sys.stdout if _tty(sys.stdout) and not _tty(sys.stderr) else sys.stderr
        print(f"{PROG}: {why}, so progress lines instead of the TUI (as --headless)", file=to, flush=True)
        ns.headless = True
