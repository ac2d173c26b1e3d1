"""The headless view: a progress line every few seconds, and every event and verdict as it
comes, read from a hub through the same client as the TUI."""

from __future__ import annotations

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


def outcome_line(st, code: int, result: dict, log_path: str) -> str:
    """The launcher's last line: success, or the one-line cause of a failure."""
    if code == 0:
        steps = st.step
        return f"pardash: done, {len(st.ranks)} rank(s), step {steps}, log {log_path}"
    if result.get("stopped"):
        return f"pardash: stopped by you (exit code {code}); log {log_path}"
    failed = [r for r in st.ranks.values() if r.exit_code is not None]
    if failed:
        first = min(failed, key=lambda r: (r.step.t if r.step else 0.0, r.rank))
        at = f" at step {first.step.step}" if first.step is not None else ""
        others = sorted(r.rank for r in st.ranks.values() if r.rank != first.rank)
        tail = f"; ranks {_ranks_text(others)} were stopped" if others else ""
        return f"pardash: rank {first.rank} exited with code {first.exit_code}{at}{tail} (exit code {code}); log {log_path}"
    return f"pardash: the job failed with exit code {code}; log {log_path}"
