"""The hub under a long 1024-rank job, and how far its ingest is from a raw ZeroMQ loop (issue 7).

``python -m bench soak`` (the full measure, written to RESULTS.md) or
``python -m bench.soak [--minutes M] [--window S] [--rounds N] [--skip-soak] [--skip-headroom] [--profile] [--write]``.

**Soak.** A hub process started as ``pardash launch``/``pardash hub`` start it (``spawn_hub``,
recording every message to its JSONL log, told the world size) is fed by
``python -m pardash.telemetry.simulate``: 1024 ranks at 10 steps/s through the real reporter and
wire format, plus each rank's heartbeat and system sample once a second (12,288 messages/s).
A SUB socket follows the hub's frames and reads only their counters. The hub's RSS is taken once
every rank's hello is in ("start"), after the first minute ("warm": step histories are full after
240 steps, 24 s), every 10 s after, and at the end. Seq gaps are the hub's own ``lost`` count
(per-rank seq numbers: a message the reporter dropped on a full queue or one the hub never got),
read from the ``hub stopped: ...`` line it writes last to its log. The log's size is reported and
the log deleted.

The ingest headroom measure runs next, into the same table (bench/headroom.py); when the hub
misses its target, a profile of the hub's time per message follows (bench/hubprofile.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec
import zmq

from pardash.telemetry import frames
from pardash.telemetry.spawn import spawn_hub

from .common import Row

if TYPE_CHECKING:
    from .headroom import Headroom

RANKS = 1024
RATE_HZ = 10.0
MINUTES = 10.0
RUN = "soak-run"


# -- reading the hub's counters ---------------------------------------------------------------


class _FrameStats(msgspec.Struct):
    """A frame with only its counters decoded (msgspec skips the rest without building it)."""

    fseq: int
    t: float
    stats: frames.HubStats = msgspec.field(default_factory=frames.HubStats)


_decode_stats = msgspec.msgpack.Decoder(_FrameStats).decode


class StatsWatcher:
    """Follows a hub's frames on its PUB socket and keeps the latest counters."""

    def __init__(self, ctx: zmq.Context, updates: str) -> None:
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, frames.FRAME_TOPIC)
        self.sub.setsockopt(zmq.RCVHWM, 1000)
        self.sub.connect(updates)
        self.stats = frames.HubStats()
        self.t = 0.0
        """The hub's wall clock at the latest frame."""

    def poll(self, timeout_ms: int = 0) -> frames.HubStats:
        if self.sub.poll(timeout_ms):
            while True:
                try:
                    _, payload = self.sub.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                f = _decode_stats(payload)
                self.stats, self.t = f.stats, f.t
        return self.stats

    def wait(self, done, timeout_s: float) -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if done(self.poll(100)):
                return True
        return False

    def close(self) -> None:
        self.sub.close(0)


def _stop(proc: subprocess.Popen, timeout_s: float = 30.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _tail_line(path: str, needle: str) -> str:
    """The last line of ``path`` containing ``needle`` (read from the end: the log is GBs)."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - (1 << 20)))
        tail = fh.read().decode(errors="replace")
    for line in reversed(tail.splitlines()):
        if needle in line:
            return line
    return ""


def _slope(points: list[tuple[float, int]]) -> float:
    """Least-squares slope of (x, y)."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f}"


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


# -- the soak -----------------------------------------------------------------------------------


@dataclass
class SoakResult:
    minutes: float = 0.0
    ranks: int = RANKS
    rate_hz: float = RATE_HZ
    rss_start: int = 0
    rss_warm: int = 0
    rss_end: int = 0
    rss_curve: list[tuple[float, int]] = field(default_factory=list)
    """(seconds since start, hub RSS), every 10 s."""
    catch_ups: list[tuple[float, float, float]] = field(default_factory=list)
    """(seconds since start, highest ingest rate in the 10 s before, 1-minute load average)
    where the hub took messages 25% faster than they were offered: it had fallen behind."""
    received: int = 0
    lost: int = 0
    dropped: int = 0
    rejected: int = 0
    stopped_line: str = ""
    log_bytes: int = 0
    hub_cpu_s: float = 0.0
    sim_cpu_s: float = 0.0
    seconds: float = 0.0
    hub_exit: int | None = None
    sim_exit: int | None = None
    load_start: str = ""
    load_end: str = ""


def soak(minutes: float = MINUTES, ranks: int = RANKS, rate_hz: float = RATE_HZ, *, progress=print) -> SoakResult:
    import psutil

    res = SoakResult(minutes=minutes, ranks=ranks, rate_hz=rate_hz, load_start=_load())
    folder = tempfile.mkdtemp(prefix="pardash-soak-")
    log = os.path.join(folder, "telemetry.jsonl")
    meta = json.dumps({"strategy": "fsdp", "world_size": ranks, "simulated": True})
    hub, info = spawn_hub(["--run-id", RUN, "--log", log, "--no-registry", "--world-size", str(ranks), "--meta", meta])
    ctx = zmq.Context()
    watch = StatsWatcher(ctx, info["updates"])
    cfg = {"ranks": ranks, "rate_hz": rate_hz}
    sim = subprocess.Popen(
        [sys.executable, "-m", "pardash.telemetry.simulate", "--endpoint", info["ingest"], "--run-id", RUN, "--config", json.dumps(cfg)],
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    hproc, sproc = psutil.Process(hub.pid), psutil.Process(sim.pid)
    try:
        if not watch.wait(lambda st: st.received >= ranks, 60):
            raise RuntimeError(f"the hub did not get {ranks} hellos within 60 s: {watch.stats}")
        t0 = time.monotonic()
        res.rss_start = hproc.memory_info().rss
        cpu0 = sum(hproc.cpu_times()[:2]), sum(sproc.cpu_times()[:2])
        res.rss_curve.append((0.0, res.rss_start))
        end = t0 + minutes * 60
        next_sample = t0 + 10
        offered = ranks * (rate_hz + 2)
        top_hz = 0.0
        while time.monotonic() < end:
            top_hz = max(top_hz, watch.poll(200).ingest_hz)
            now = time.monotonic()
            if now >= next_sample:
                next_sample += 10
                rss = hproc.memory_info().rss
                res.rss_curve.append((now - t0, rss))
                if top_hz > 1.25 * offered:
                    res.catch_ups.append((now - t0, top_hz, os.getloadavg()[0]))
                top_hz = 0.0
                if not res.rss_warm and now - t0 >= 60:
                    res.rss_warm = rss
                st = watch.stats
                if int(now - t0) % 60 < 10:
                    progress(f"soak {now - t0:4.0f} s: hub RSS {_mib(rss)} MiB, {st.received:,} messages, {st.ingest_hz:,.0f}/s, "
                             f"lost {st.lost}, log {os.path.getsize(log) / 1e6:,.0f} MB", flush=True)  # fmt: skip
            if hub.poll() is not None or sim.poll() is not None:
                raise RuntimeError(f"hub exit {hub.poll()}, simulator exit {sim.poll()} during the soak")
        res.rss_end = hproc.memory_info().rss
        res.rss_curve.append((time.monotonic() - t0, res.rss_end))
        res.rss_warm = res.rss_warm or res.rss_curve[min(len(res.rss_curve) - 1, 1)][1]
        res.hub_cpu_s = sum(hproc.cpu_times()[:2]) - cpu0[0]
        res.sim_cpu_s = sum(sproc.cpu_times()[:2]) - cpu0[1]
        res.seconds = time.monotonic() - t0
        res.sim_exit = _stop(sim)
        time.sleep(0.5)  # the hub drains what the ranks sent last
        watch.poll(200)
        res.hub_exit = _stop(hub)
        res.stopped_line = _tail_line(log, "hub stopped:")
        st = watch.stats
        res.dropped = st.dropped
        m = re.search(r"hub stopped: (\d+) messages, (\d+) lost, (\d+) rejected", res.stopped_line)
        if m:
            res.received, res.lost, res.rejected = (int(x) for x in m.groups())
        else:  # no closing line: the last frame's counters
            res.received, res.lost, res.rejected = st.received, st.lost, sum(st.rejected.values())
        res.log_bytes = os.path.getsize(log)
    finally:
        watch.close()
        ctx.term()
        for p in (sim, hub):
            if p.poll() is None:
                _stop(p)
        shutil.rmtree(folder, ignore_errors=True)
    res.load_end = _load()
    return res


# -- the table --------------------------------------------------------------------------------


def rows_and_note(s: SoakResult | None, h: Headroom | None = None, prof: dict | None = None) -> tuple[list[Row], str]:
    rows: list[Row] = []
    notes: list[str] = []
    if s is not None:
        name = f"soak {s.ranks} ranks x {s.rate_hz:g} steps/s, {s.minutes:g} min"
        after = [y for x, y in s.rss_curve if x >= 60] or [s.rss_end]
        slope = _slope([(x / 60, y) for x, y in s.rss_curve if x >= max(60, s.seconds / 2)]) / 1024  # KiB/min, 2nd half
        slope1 = _slope([(x / 60, y) for x, y in s.rss_curve if 60 <= x <= s.seconds / 2]) / 1024
        growth = s.rss_end / s.rss_warm if s.rss_warm else float("nan")
        per_s = s.received / s.seconds if s.seconds else 0.0
        expect = s.ranks * (s.rate_hz + 2)
        rows += [
            Row(name, "hub RSS MiB, start (all hellos in) / after 1 min / end",
                f"{_mib(s.rss_start)} / {_mib(s.rss_warm)} / {_mib(s.rss_end)}", f"{_mib(s.rss_warm)} after 1 min",
                f"{growth:.3f}x", "end <= 1.10x the 1-minute RSS (bounded)", growth <= 1.10),
            Row(name, "hub RSS slope, KiB per minute (2nd half)", f"{slope:+,.0f}", f"{slope1:+,.0f} (1 min to half-way)",
                f"peak after 1 min {_mib(max(after))} MiB", "<= +512 (no leak)", slope <= 512),
            Row(name, "seq gaps (hub's lost count)", f"{s.lost:,}", f"{s.received:,} messages taken ({per_s:,.0f}/s; {expect:,.0f}/s offered)",
                f"{s.dropped:,} dropped by reporters, {s.rejected:,} rejected", "0", s.lost == 0 and s.received > 0),
            Row(name, "log written (deleted after)", f"{s.log_bytes / 1e9:.2f} GB", f"{s.log_bytes / 1e6 / max(s.seconds / 60, 1e-9):,.0f} MB/min",
                f"{s.log_bytes / max(s.received, 1):.0f} B/message", "", None),
        ]  # fmt: skip
        curve = " ".join(_mib(min(s.rss_curve, key=lambda p: abs(p[0] - 60 * k))[1]) for k in range(int(s.seconds // 60) + 1))
        curve += f" (end {_mib(s.rss_end)})"
        caught = "; ".join(f"{x:.0f} s ({hz:,.0f}/s, load {load:.1f})" for x, hz, load in s.catch_ups) or "none"
        notes.append(
            f"soak: a `pardash hub` process (JSONL log, world size {s.ranks}) fed by `python -m pardash.telemetry.simulate` "
            f"({s.ranks} ranks x {s.rate_hz:g} steps/s + 1 Hz heartbeats and system samples) for {s.seconds:.0f} s; hub CPU "
            f"{s.hub_cpu_s:.0f} s ({100 * s.hub_cpu_s / max(s.seconds, 1):.0f}% of a core), simulator {s.sim_cpu_s:.0f} s "
            f"({100 * s.sim_cpu_s / max(s.seconds, 1):.0f}%). Hub RSS MiB each minute: {curve}. Closing log line: "
            f"{s.stopped_line[:200] or '(none)'}; exit codes hub {s.hub_exit}, simulator {s.sim_exit}. "
            f"The hub fell behind and caught up (ingest above 125% of the offered rate within a 10 s sample) at: {caught}. "
            f"Load average (1/5/15 min) {s.load_start} before, {s.load_end} after, on {os.cpu_count()} cores."
        )
    if h is not None:
        from .headroom import headroom_rows

        hrows, hnotes = headroom_rows(h, prof)
        rows += hrows
        notes += hnotes
    return rows, "\n".join(f"- {n}" for n in notes)


def run(minutes: float = MINUTES, window_s: float | None = None, *, do_soak: bool = True, do_headroom: bool = True,
        do_profile: bool = False, rounds: int | None = None) -> tuple[list[Row], str]:  # fmt: skip
    """The soak, then the ingest headroom (bench/headroom.py), then, when the hub misses the
    headroom target (or when asked), a profile of where its time per message goes."""
    from .headroom import ROUNDS, WINDOW_S, headroom
    from .hubprofile import profile

    s = soak(minutes) if do_soak else None
    h = headroom(window_s or WINDOW_S, rounds=rounds or ROUNDS) if do_headroom else None
    # Where the hub's time goes, when it misses the headroom target (or when asked).
    missed = h is not None and not h.ratio >= 0.5
    p = profile() if do_profile or missed else None
    return rows_and_note(s, h, p)


def main(argv: list[str] | None = None) -> int:
    from .common import table, write_results

    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=MINUTES, help=f"soak length (default {MINUTES:g})")
    p.add_argument("--window", type=float, default=None, help="seconds per headroom level (default 8)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of the headroom climbs; the median round counts (default 3)")
    p.add_argument("--skip-soak", action="store_true")
    p.add_argument("--skip-headroom", action="store_true")
    p.add_argument("--profile", action="store_true", help="py-spy the hub draining a backlog; time per message by part")
    p.add_argument("--write", action="store_true", help="write the table into bench/RESULTS.md")
    ns = p.parse_args(argv)
    rows, note = run(ns.minutes, ns.window, do_soak=not ns.skip_soak, do_headroom=not ns.skip_headroom, do_profile=ns.profile,
                     rounds=ns.rounds)
    print(table(rows))
    print(note)
    if ns.write:
        from .__main__ import BENCHES

        name = BENCHES["soak"]
        if ns.skip_soak or ns.skip_headroom:
            rows, note = _keep_other_part(name, rows, note, soak_ran=not ns.skip_soak)
        write_results({name: rows}, {name: note})
    return 0


def _keep_other_part(name: str, rows: list[Row], note: str, *, soak_ran: bool) -> tuple[list[Row], str]:
    """Rows and notes for RESULTS.md's section when only one part ran: the other part's rows
    and notes stay as last written, marked with the time of their run."""
    from .common import read_section

    stamp, old_rows, old_notes = read_section(name)
    kept_rows = [r for r in old_rows if r.bench.startswith("soak") != soak_ran]
    if not kept_rows:
        return rows, note
    kept_notes = [n for n in old_notes if n.startswith("soak:") != soak_ran and not n.startswith("The ")]
    notes = [n[2:] for n in note.splitlines() if n.startswith("- ")] + kept_notes
    # The soak first, as a whole run writes them (sorted() keeps the order within each part).
    rows = sorted(rows + kept_rows, key=lambda r: not r.bench.startswith("soak"))
    notes = sorted(notes, key=lambda n: not n.startswith("soak:"))
    notes.append(f"The {'headroom' if soak_ran else 'soak'} rows and notes are kept from the run of {stamp}; the others are this run's.")
    return rows, "\n".join(f"- {n}" for n in notes)

if __name__ == "__main__":
    sys.exit(main())
