"""The headless view: a progress line every few seconds, and every event and verdict as it
comes, read from a hub through the same client as the TUI."""

from __future__ import annotations

import re
import signal
import sys
import time
from typing import TextIO

from . import schema
from .client import Source
from .summary import held_spread, human_bytes, ms, samples_per_s, self_s_spread, step_s_spread


class ProgressPrinter:
    """Prints what a :class:`Source` shows, as plain lines."""

    def __init__(self, source: Source, *, out: TextIO | None = None, every_s: float = 5.0) -> None:
        self.source = source
        self.out = out or sys.stdout
        self.every_s = every_s
        self._last_line = 0.0
        self._printed_hseq = 0
        self._noted = False
        self.t_start = time.monotonic()

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def update(self, *, force: bool = False) -> None:
        """Poll the source; print new events now and a progress line when one is due."""
        self.source.poll()
        st = self.source.state
        hello = st.hello
        if hello is not None and hello.note and not self._noted:
            self._noted = True
            self._print(f"note: {hello.note}")
        for ev in list(st.events):
            if ev.hseq <= self._printed_hseq:
                continue
            self._printed_hseq = ev.hseq
            line = event_line(ev)
            if line:
                self._print(line)
        now = time.monotonic()
        if force or now - self._last_line >= self.every_s:
            self._last_line = now
            if st.ranks:
                self._print(progress_line(st, now - self.t_start))

    def follow(self, done, poll_s: float = 0.1) -> None:
        """Print until ``done()`` is true, then a last progress line."""
        while not done():
            self.update()
            time.sleep(poll_s)
        self.update(force=True)


def event_line(ev: schema.Message) -> str:
    if isinstance(ev, schema.Verdict):
        return f"[{ev.verdict}] {ev.message}"
    if isinstance(ev, schema.Event):
        who = "hub" if ev.rank < 0 else f"rank {ev.rank}"
        if ev.name == "exit":
            return "" if not ev.code else f"[exit] {who} exited with code {ev.code}"
        if ev.name == "error":
            first = (ev.message or "").strip().splitlines()[:1]
            return f"[error] {who}: {first[0] if first else 'error'}"
        if ev.name in ("hub", "epoch_end"):
            return ""
        return f"[{ev.name}] {who}: {ev.message}".rstrip(": ")
    return ""


def progress_line(st, elapsed_s: float) -> str:
    hello = st.hello
    total = (hello.config or {}).get("steps") if hello else None
    step = f"step {st.step}" + (f"/{total}" if total else "")
    parts = [f"[{elapsed_s:6.1f}s] {step}", f"{samples_per_s(st):,.0f} samples/s"]
    sp = step_s_spread(st)
    if sp:
        parts.append("step ms min/med/max " + "/".join(ms(x) for x in sp))
    ss = self_s_spread(st)
    if ss:
        parts.append("self ms " + "/".join(ms(x) for x in ss))
    hs = held_spread(st)
    if hs:
        lo, _, hi = hs
        held = human_bytes(lo) if lo == hi else f"{human_bytes(lo)}..{human_bytes(hi)}"
        parts.append(f"mem/rank {held}")
    counts = st.status_counts()
    parts.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    if st.lost:
        parts.append(f"{st.lost} lost")
    return " | ".join(parts)


def _ranks_text(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out: list[str] = []
    for r in sorted(ranks):
        if out and "-" not in out[-1].split(", ")[-1] and int(out[-1]) == r - 1:
            out[-1] = f"{out[-1]}-{r}"
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == r - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ", ".join(out)


# Errors a rank raises because another rank died (its peer's socket closed under it).
PEER_FAILURE = re.compile(
    r"Connection reset by peer|Connection closed by peer|Broken pipe|remote worker|"
    r"NCCL communicator was aborted|ProcessGroupNCCL.*(?:Watchdog|timeout)|Socket Timeout|"
    r"DistNetworkError|DistBackendError|Connection refused",
    re.IGNORECASE,
)


def root_cause(st) -> tuple[schema.Event, list[int], list[int]] | None:
    """(the exit that caused a failure, ranks that failed because of it, ranks stopped).

    A rank killed by a signal (SIGKILL from the OOM killer or a user, SIGSEGV...) is always a
    cause; next a rank that failed on its own error; ranks whose error is a peer failure
    (the collective's socket closed under them) are victims, SIGTERM (-15) is how torchrun
    stops the rest.
    """
    exits = [e for e in st.events if isinstance(e, schema.Event) and e.name == "exit" and e.rank >= 0 and e.code]
    if not exits:
        return None
    errors: dict[int, str] = {}
    for e in st.events:
        if isinstance(e, schema.Event) and e.name == "error" and e.rank >= 0:
            errors.setdefault(e.rank, (e.message or "") + "\n" + (e.traceback or ""))

    def grade(e: schema.Event) -> int:
        if e.code < 0 and e.code != -15:
            return 0
        if e.code > 0 and not PEER_FAILURE.search(errors.get(e.rank, "")):
            return 1
        if e.code > 0:
            return 2
        return 3

    first = min(exits, key=lambda e: (grade(e), e.hseq))
    victims = sorted({e.rank for e in exits if e.rank != first.rank and grade(e) == 2})
    stopped = sorted({e.rank for e in exits if e.rank != first.rank and e.code == -15} - set(victims))
    return first, victims, stopped


def outcome_line(st, code: int, result: dict, log_path: str) -> str:
    """The launcher's last line: success, or the one-line cause of a failure."""
    if code == 0:
        return f"pardash: done, {len(st.ranks)} rank(s), step {st.step}, log {log_path}"
    if result.get("stopped"):
        return f"pardash: stopped by you (exit code {code}); log {log_path}"
    found = root_cause(st)
    if found is None:
        return f"pardash: the job failed with exit code {code}; log {log_path}"
    first, victims, stopped = found
    r = st.ranks.get(first.rank)
    # The step it died in: the one after its last completed step, unless it said.
    step = first.step if first.step is not None else (r.step.step + 1 if r is not None and r.step is not None else None)
    at = f" at step {step}" if step is not None else ""
    how = ""
    if first.code < 0:
        try:
            how = f" ({signal.Signals(-first.code).name})"
        except ValueError:
            pass
    line = f"pardash: rank {first.rank} exited with code {first.code}{how}{at}"
    if victims:
        line += f"; rank{'s' if len(victims) > 1 else ''} {_ranks_text(victims)} failed after it"
    if stopped:
        line += f"; rank{'s' if len(stopped) > 1 else ''} {_ranks_text(stopped)} {'were' if len(stopped) > 1 else 'was'} stopped"
    return line + f" (exit code {code}); log {log_path}"
