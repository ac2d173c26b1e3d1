"""The dashboard at scale (issue 3): CPU per frame, attach time, publish-to-screen latency, RSS.

Live parts run a real hub process (``spawn_hub``) fed by ``python -m pardash.telemetry.simulate``
in a process of its own, and the app headless in this process (``app.run_test``), attached
through a real :class:`HubClient`:

- **CPU per frame drawn**: the app thread's CPU time (``time.thread_time``) from one poll that
  brought hub frames to the next such poll (see :class:`FrameMeter`): applying the frames,
  rebuilding the rows, the widgets' updates, Textual's compositor and the escape sequences a
  terminal would get (headless Textual skips that last step, so the bench encodes each update
  itself). Also reported: the part spent in ``HubClient.poll`` (decoding and applying frames,
  telemetry code). Baseline, same hub and run: a naive grid of one ``Static`` per rank showing
  the same fields, updated from the same rows; it falls behind and draws several hub frames at
  once, so the notes also give CPU per hub frame. At 1024 ranks x 40 steps/s the ratio to 10
  steps/s says whether the cost follows the message rate.
- **Attach to full screen**: from creating the ``HubClient`` to the first screen update whose
  grid has every rank's cell filled (a step for every rank), app start-up included.
- **Publish to screen**: each simulated rank's steps carry ``t``, the wall clock at which its
  Reporter sent them. In cells form, when a redrawn grid line shows a rank's new loss, the
  screen update that carries it is the moment it reaches the terminal; latency = that moment
  minus ``t`` of the step drawn.

RSS (offline, as fast as possible): a hub-side process feeds a ``HubCore`` (log to /dev/null)
through a ``SimulatedJob``'s real reporters (sockets swapped for a direct call), ticks a frame per
step (10 steps a second at 10 frames a second) and pushes each encoded frame to a viewer process
that decodes and applies it and redraws the real app every ``FRAMES_PER_DRAW`` frames. Both
sample their RSS and live Python objects; the second half's RSS slope and object count say
whether memory is bounded. ``PARDASH_BENCH_RSS_STEPS=36000`` runs a full hour's worth.

``python -m bench tui``: about 2.5 minutes on 2 quiet cores (timings are noisy on a busy one).
``python -m bench.tui quick --help``: one live configuration, for iterating on the frame cost.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager

from .common import Row, pct

SIZE = (200, 50)
"""Terminal size the app is driven at (columns, lines)."""
WARM_S = 3.0
"""Seconds of a job before measuring (every rank has said hello and stepped)."""
MEASURE_S = 8.0
"""Seconds of frames measured per configuration."""
ATTACHES = 3
LATENCY_S = 6.0
RSS_STEPS = int(os.environ.get("PARDASH_BENCH_RSS_STEPS", "1200"))
"""Steps of the offline RSS run: 1200 (2 minutes of a 10 steps/s job, five times the 240 points
a history keeps) fits the bench's few minutes; PARDASH_BENCH_RSS_STEPS=36000 runs a full hour."""
RSS_SAMPLE_EVERY = 50
"""Steps between RSS samples."""
OBJECT_SAMPLES = 3
"""Samples at each end of the second half whose fewest live objects are compared."""
FRAMES_PER_DRAW = 10
"""The offline viewer redraws the app once per this many frames (1 s of the run)."""


# -- a live job ---------------------------------------------------------------------------------


@contextmanager
def live_job(ranks: int, rate_hz: float):
    """A hub process and a simulated job of ``ranks`` ranks at ``rate_hz`` steps a second."""
    from pardash.telemetry.simulate import SimConfig
    from pardash.telemetry.spawn import spawn_hub

    run_id = f"bench-tui-{os.getpid()}-{ranks}-{rate_hz:g}"
    # The log goes to /dev/null: the hub still encodes every record, the disk is spared.
    hub, info = spawn_hub(["--run-id", run_id, "--log", os.devnull, "--no-registry"], stderr=subprocess.DEVNULL)
    cfg = SimConfig(ranks=ranks, rate_hz=rate_hz)
    sim = subprocess.Popen(
        [sys.executable, "-m", "pardash.telemetry.simulate", "--endpoint", info["ingest"], "--run-id", run_id,
         "--config", json.dumps(dataclasses.asdict(cfg))],
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield info
    finally:
        for proc in (sim, hub):
            proc.terminate()
        for proc in (sim, hub):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def client_for(info: dict):
    from pardash.telemetry.client import HubClient

    return HubClient(info["updates"], info["snapshot"], run_id=info["run_id"])


# -- instrumenting an app -----------------------------------------------------------------------


def encode_updates(app) -> None:
    """Make a headless app render each screen update to the bytes a terminal would get (and
    drop them), so the measured frame includes that work as it would in a terminal."""
    from textual._compositor import CompositorUpdate

    display = app._display

    def _display(screen, renderable) -> None:
        display(screen, renderable)
        if isinstance(renderable, CompositorUpdate) and not app._batch_count:
            renderable.render_segments(app.console)

    app._display = _display


class FrameMeter:
    """Main-thread CPU from one poll that applied hub frames to the next such poll: the frames'
    application and everything the app then does to show them (rows, widgets, compositor,
    escape sequences), plus the empty polls in between. The app polls on a timer and when a
    frame arrives, so a frame's drawing may fall after a later empty poll; cutting at the polls
    that bring frames keeps each frame's drawing with it."""

    def __init__(self, app) -> None:
        self.app = app
        self.on = False
        self.intervals: list[tuple[float, float, int]] = []
        """(CPU seconds, of which applying frames, frames applied) per interval."""
        self.frames = 0
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self._cpu: float | None = None
        self._applied = 0
        self._apply_s = 0.0
        self._cpu0 = self._wall = 0.0
        poll, source_poll = app._poll, app.source.poll

        def _source_poll() -> bool:
            t = time.thread_time()
            try:
                return source_poll()
            finally:
                self._apply_s += time.thread_time() - t

        def _poll() -> None:
            cpu = time.thread_time()
            before = app.source.frames_applied
            apply_before = self._apply_s
            poll()
            applied = app.source.frames_applied - before
            if not applied:
                return
            if self.on and self._cpu is not None:
                self.intervals.append((cpu - self._cpu, apply_before, self._applied))
            if self.on:
                self.frames += applied
            self._cpu = cpu
            self._applied = applied
            self._apply_s -= apply_before  # this poll's application starts the next interval

        app.source.poll = _source_poll
        app._poll = _poll

    @property
    def per_frame_s(self) -> list[float]:
        """CPU per hub frame: each interval's CPU over the frames it applied (usually 1)."""
        return [cpu / n for cpu, _a, n in self.intervals]

    @property
    def per_update_s(self) -> list[float]:
        """CPU from one poll that brought frames to the next (a screen update or more)."""
        return [cpu for cpu, _a, _n in self.intervals]

    def start(self) -> None:
        self.on = True
        self._cpu = None
        self._wall, self._cpu0 = time.monotonic(), time.thread_time()

    def stop(self) -> None:
        self.on = False
        self.wall_s = time.monotonic() - self._wall
        self.cpu_s = time.thread_time() - self._cpu0


async def wait_until(pilot, predicate, timeout_s: float, step_s: float = 0.1) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        await pilot.pause(step_s)
    return predicate()


def all_stepped(source, ranks: int) -> bool:
    state = source.state
    return len(state.ranks) >= ranks and all(r.step is not None for r in state.ranks.values())


# -- the naive baseline -------------------------------------------------------------------------


def naive_app(source):
    """One ``Static`` per rank in a grid, showing the fields of pardash's cells, updated (when
    its text changed) from the same rows at the same poll rate. Generous to the baseline: plain
    text, no colours."""
    from textual.app import App, ComposeResult
    from textual.containers import Container, VerticalScroll
    from textual.widgets import Static

    from pardash.tui.app import POLL_S
    from pardash.tui.format import fmt_bytes, fmt_deviation, fmt_loss, fmt_step_time
    from pardash.tui.model import RowBuilder

    class NaiveGrid(App):
        CSS = """
        #cells { layout: grid; grid-size: 5; grid-gutter: 0 2; height: auto; }
        #cells Static { height: 1; width: 38; }
        """

        def __init__(self, source) -> None:
            super().__init__()
            self.source = source
            self.rows = RowBuilder()
            self.cells: dict[int, Static] = {}
            self.texts: dict[int, str] = {}

        def compose(self) -> ComposeResult:
            with VerticalScroll():
                yield Container(id="cells")

        def on_mount(self) -> None:
            self._poll()
            self.set_interval(POLL_S, self._poll)

        def _poll(self) -> None:
            if not self.source.poll():
                return
            rows = self.rows.build(self.source.state)
            new = []
            for row in rows:
                if row.rank not in self.cells:
                    self.cells[row.rank] = cell = Static()
                    new.append(cell)
            if new:
                self.query_one("#cells").mount_all(new)
            for row in rows:
                text = (
                    f"{row.rank:>4} {row.status:<9} {fmt_loss(row.loss):>7} {fmt_step_time(row.step_s):>6} "
                    f"{fmt_bytes(row.held_bytes, short=True):>6} {fmt_deviation(row.self_dev):>5}"
                )
                if self.texts.get(row.rank) != text:
                    self.texts[row.rank] = text
                    self.cells[row.rank].update(text)

    return NaiveGrid(source)


# -- live measurements --------------------------------------------------------------------------


async def _measure_frames(app, ranks: int, *, cells: bool = False, profiler=None) -> FrameMeter:
    encode_updates(app)
    meter = FrameMeter(app)
    async with app.run_test(size=SIZE) as pilot:
        if not await wait_until(pilot, lambda: all_stepped(app.source, ranks), 60):
            raise RuntimeError(f"the app never saw all {ranks} ranks step")
        if cells:
            app.screen.query_one("RankGrid").form = "cells"
        await pilot.pause(WARM_S)
        if profiler is not None:
            profiler.enable()
        meter.start()
        await asyncio.sleep(MEASURE_S)
        meter.stop()
        if profiler is not None:
            profiler.disable()
    return meter


def measure_frames(info: dict, ranks: int, *, naive: bool = False, cells: bool = False, profiler=None) -> FrameMeter:
    from pardash.tui.app import make_app

    source = client_for(info)
    app = naive_app(source) if naive else make_app(source)
    return asyncio.run(_measure_frames(app, ranks, cells=cells, profiler=profiler))


async def _attach_once(info: dict, ranks: int) -> tuple[float, float]:
    """Seconds from creating the client to its snapshot, and to the first full screen."""
    from pardash.tui.app import make_app
    from pardash.tui.widgets.rank_grid import RankGrid

    t0 = time.perf_counter()
    source = client_for(info)
    app = make_app(source)
    encode_updates(app)
    marks: dict[str, float] = {}
    display, poll = app._display, source.poll

    def _poll() -> bool:
        changed = poll()
        if "synced" not in marks and source.synced:
            marks["synced"] = time.perf_counter()
        return changed

    source.poll = _poll

    def full() -> bool:
        try:
            grid = app.screen.query_one(RankGrid)
        except Exception:
            return False
        # Every rank in the grid's table and none still starting (no step yet); the table's
        # counts, as making every rank's row at each screen update would slow what is measured.
        table = grid.table
        starting = table.totals.status_counts.get("starting", 0)
        return len(table) >= ranks and not starting and len(grid.layout.ordered) >= ranks

    def _display(screen, renderable) -> None:
        display(screen, renderable)
        if "full" not in marks and renderable is not None and full():
            marks["full"] = time.perf_counter()

    app._display = _display
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: "full" in marks, 30, step_s=0.01)
    if "full" not in marks:
        raise RuntimeError("the grid never showed every rank")
    return marks.get("synced", marks["full"]) - t0, marks["full"] - t0


def measure_attach(info: dict, ranks: int, n: int) -> list[tuple[float, float]]:
    return [asyncio.run(_attach_once(info, ranks)) for _ in range(n)]


async def _latency(info: dict, ranks: int) -> list[float]:
    """Publish-to-screen latencies of the steps the visible cells show (cells form)."""
    from pardash.tui.app import make_app
    from pardash.tui.format import fmt_loss
    from pardash.tui.widgets.rank_grid import RankGrid

    source = client_for(info)
    app = make_app(source)
    encode_updates(app)
    out: list[float] = []
    pending: dict[int, tuple[float, str]] = {}
    """rank -> (publish t, loss text) of the step the grid was last given and has not drawn."""
    shown_step: dict[int, int] = {}
    drawn: list[tuple[int, str]] = []
    on = False

    async with app.run_test(size=SIZE) as pilot:
        if not await wait_until(pilot, lambda: all_stepped(app.source, ranks), 60):
            raise RuntimeError(f"the app never saw all {ranks} ranks step")
        grid = app.screen.query_one(RankGrid)
        grid.form = "cells"
        await pilot.pause(1.0)
        update_rows, render_line, display = grid.update_rows, grid.render_line, app._display

        def _update_rows(rows) -> None:
            update_rows(rows)
            if not on:
                return
            state = source.state
            for row in grid.layout.ordered[: 64 * 8]:
                r = state.ranks.get(row.rank)
                if r is None or r.step is None or shown_step.get(row.rank) == r.step.step:
                    continue
                shown_step[row.rank] = r.step.step
                pending[row.rank] = (r.step.t, fmt_loss(r.step.loss))

        def _render_line(y: int):
            strip = render_line(y)
            if on and y > 0:
                drawn.append((grid.scroll_offset.y + y - 1, "".join(seg.text for seg in strip)))
            return strip

        def _display(screen, renderable) -> None:
            display(screen, renderable)
            if not on or renderable is None or not drawn:
                return
            now = time.time()
            layout = grid.layout
            for index, text in drawn:
                if index >= len(layout.lines):
                    continue
                for x, idx in layout.lines[index].cells:
                    rank = layout.ordered[idx].rank
                    seen = pending.get(rank)
                    if seen is not None and seen[1] in text[x : x + layout.cell_width + 1]:
                        out.append(now - seen[0])
                        del pending[rank]
            drawn.clear()

        grid.update_rows, grid.render_line, app._display = _update_rows, _render_line, _display
        on = True
        await asyncio.sleep(LATENCY_S)
        on = False
    return out


def measure_latency(info: dict, ranks: int) -> list[float]:
    return asyncio.run(_latency(info, ranks))


# -- RSS over a long run, offline ---------------------------------------------------------------


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _sample(step: int) -> tuple[int, int, int]:
    """(step, RSS bytes, live Python objects after a collection): RSS alone mixes a leak with
    the allocator settling; a steady object count says nothing accumulates."""
    import gc

    gc.collect()
    return step, _rss(), len(gc.get_objects()) + gc.get_freeze_count()  # the app freezes its start-up objects


class _Direct:
    """Stands in for a simulated rank's PUSH socket: hands each message to the hub core."""

    def __init__(self, core, clock: list[float]) -> None:
        self.core = core
        self.clock = clock

    def send(self, raw: bytes, flags: int = 0) -> None:
        self.core.ingest_bytes(raw, self.clock[0])

    def close(self, *_: object) -> None:
        pass


def rss_hub_side(ranks: int, steps: int, endpoint: str, out_path: str) -> None:
    """A SimulatedJob's reporters into a HubCore (log to /dev/null), a frame per step, each
    frame encoded and pushed to the viewer process; RSS sampled every RSS_SAMPLE_EVERY steps."""
    import zmq

    from pardash.telemetry import frames
    from pardash.telemetry.hub import HubCore
    from pardash.telemetry.recorder import Recorder
    from pardash.telemetry.simulate import SimConfig, SimulatedJob

    ctx = zmq.Context.instance()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 4)
    push.connect(endpoint)
    clock = [1000.0]
    core = HubCore(run_id="rss", recorder=Recorder(os.devnull))
    job = SimulatedJob(SimConfig(ranks=ranks, rate_hz=10.0), "tcp://127.0.0.1:9", "rss", context=ctx)
    for s in job._socks:
        s.close(0)
    job._socks = [_Direct(core, clock)] * len(job._socks)
    job.hello()
    samples = []
    for step in range(steps):
        if step % 10 == 0:
            job.beat()
        job.tick()
        clock[0] += 0.1
        push.send(frames.encode(core.tick(clock[0])))
        if step % RSS_SAMPLE_EVERY == 0 or step == steps - 1:
            samples.append(_sample(step))
    push.send(b"")
    push.close(linger=-1)
    with open(out_path, "w") as fh:
        json.dump({"samples": samples, "received": core.received}, fh)


def rss_viewer_side(ranks: int, steps: int, endpoint: str, out_path: str) -> None:
    """Decode and apply every frame the hub side pushes; redraw the real app every
    FRAMES_PER_DRAW frames (headless); RSS sampled every RSS_SAMPLE_EVERY frames."""
    import zmq

    from pardash.telemetry import frames
    from pardash.telemetry.client import FrameApplier
    from pardash.tui.app import make_app

    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 2)  # frames queued here would count in this process's RSS
    pull.bind(endpoint)

    class Pushed(FrameApplier):
        live = True
        synced = True
        ended = False

        def poll(self) -> bool:
            changed = False
            for _ in range(FRAMES_PER_DRAW if not self.ended else 0):
                raw = pull.recv()
                if not raw:
                    self.ended = True
                    break
                self.apply_frame(frames.decode_frame(raw))
                changed = True
                if self.frames_applied % RSS_SAMPLE_EVERY == 1:
                    samples.append(_sample(self.frames_applied - 1))
            return changed

        def close(self) -> None:
            pass

    samples: list[tuple[int, int]] = []
    source = Pushed()
    app = make_app(source)

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            while not source.ended:
                app._poll()
                await pilot.pause()
            samples.append(_sample(source.frames_applied))

    asyncio.run(drive())
    pull.close(0)
    with open(out_path, "w") as fh:
        json.dump({"samples": samples, "frames": source.frames_applied}, fh)


def _slope_per_1000(samples: list[tuple[int, int, int]]) -> float:
    """Least-squares slope of RSS over steps, in bytes per 1000 steps."""
    if len(samples) < 2:
        return float("nan")
    xs = [s[0] for s in samples]
    ys = [s[1] for s in samples]
    return statistics.linear_regression(xs, ys).slope * 1000


def measure_rss(ranks: int, steps: int) -> dict:
    """Run both sides in processes of their own; return their samples and slopes."""
    tmp = tempfile.mkdtemp(prefix="pardash-bench-rss-")
    try:
        return _measure_rss_in(tmp, ranks, steps)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # (each run left its folder in /tmp)


def _measure_rss_in(tmp: str, ranks: int, steps: int) -> dict:
    endpoint = f"ipc://{tmp}/frames"
    hub_out, viewer_out = os.path.join(tmp, "hub.json"), os.path.join(tmp, "viewer.json")
    code = "import sys, bench.tui as b; getattr(b, sys.argv[1])(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])"
    t0 = time.monotonic()
    viewer = subprocess.Popen([sys.executable, "-c", code, "rss_viewer_side", str(ranks), str(steps), endpoint, viewer_out])
    time.sleep(1.0)  # the viewer binds first
    hub = subprocess.Popen([sys.executable, "-c", code, "rss_hub_side", str(ranks), str(steps), endpoint, hub_out])
    if hub.wait(RSS_STEPS) or viewer.wait(120):
        raise RuntimeError("the RSS run failed")
    wall = time.monotonic() - t0
    out = {"wall_s": wall}
    for side, path in (("hub", hub_out), ("tui", viewer_out)):
        with open(path) as fh:
            samples = [tuple(s) for s in json.load(fh)["samples"]]
        half = samples[-1][0] / 2
        first = [s for s in samples if s[0] <= half]
        second = [s for s in samples if s[0] >= half]
        out[side] = {
            "start": samples[0][1],
            "end": samples[-1][1],
            "first": _slope_per_1000(first),
            "second": _slope_per_1000(second),
            # The fewest live objects of the first and the last few samples of the second half:
            # one sample taken while the viewer held a redraw's passing objects read +2,800 once
            # (the runs before and after it: -4, +122); a leak grows every sample's count.
            "objects_half": min(s[2] for s in second[:OBJECT_SAMPLES]),
            "objects_end": min(s[2] for s in second[-OBJECT_SAMPLES:]),
            "samples": samples,
        }
    return out


# -- the table ----------------------------------------------------------------------------------


def _ms(x: float) -> str:
    return f"{x * 1000:.1f}"


def _mib(x: float) -> str:
    return f"{x / (1 << 20):.1f}"


def run() -> tuple[list[Row], str]:
    rows: list[Row] = []
    facts: list[str] = []
    load0 = os.getloadavg()[0]
    t_start = time.monotonic()
    measured: dict[str, FrameMeter] = {}
    ingest: dict[str, float] = {}

    def ingest_of(info: dict) -> float:
        c = client_for(info)
        try:
            c.wait_synced(10)
            return c.stats.ingest_hz
        finally:
            c.close()

    # 1024 ranks at 10 steps a second: pardash (auto form: a heat map at 200x50; then cells,
    # the form that redraws most), the naive grid, attach, publish-to-screen.
    with live_job(1024, 10.0) as info:
        measured["1024"] = measure_frames(info, 1024)
        ingest["1024"] = ingest_of(info)
        measured["1024 cells"] = measure_frames(info, 1024, cells=True)
        measured["1024 naive"] = measure_frames(info, 1024, naive=True)
        attaches = measure_attach(info, 1024, ATTACHES)
        latencies = measure_latency(info, 1024)
    with live_job(1024, 40.0) as info:
        measured["1024x40"] = measure_frames(info, 1024)
        ingest["1024x40"] = ingest_of(info)
    with live_job(256, 10.0) as info:
        measured["256"] = measure_frames(info, 256)
        ingest["256"] = ingest_of(info)
        measured["256 naive"] = measure_frames(info, 256, naive=True)
    live_s = time.monotonic() - t_start

    # A frame drawn: from a poll that brought hub frames to the next one (see FrameMeter).
    med = {k: statistics.median(m.per_update_s) for k, m in measured.items()}
    p95 = {k: pct(m.per_update_s, 95) for k, m in measured.items()}

    def frame_rows(label: str, key: str, base: str | None, target: str = "") -> None:
        ok = med[key] <= 0.015 if target else None
        if base is not None:
            rows.append(Row(label, "CPU ms per frame drawn, median", _ms(med[key]), f"{_ms(med[base])} (a Static per rank)", f"{med[base] / med[key]:.1f}x cheaper", target, ok))
            rows.append(Row(label, "CPU ms per frame drawn, p95", _ms(p95[key]), _ms(p95[base]), f"{p95[base] / p95[key]:.1f}x cheaper", "", None))
        else:
            rows.append(Row(label, "CPU ms per frame drawn, median", _ms(med[key]), "", "", target, ok))
            rows.append(Row(label, "CPU ms per frame drawn, p95", _ms(p95[key]), "", "", "", None))
        apply = statistics.median(a for _c, a, _n in measured[key].intervals)
        rows.append(Row(label, "of which HubClient applying frames, median", _ms(apply), "", "", "", None))

    frame_rows("256 ranks x 10 steps/s", "256", "256 naive")
    frame_rows("1024 ranks x 10 steps/s", "1024", "1024 naive", "<= 15 ms")
    frame_rows("1024 ranks x 10 steps/s, cells form", "1024 cells", "1024 naive", "<= 15 ms")
    growth = med["1024x40"] / med["1024"]
    rate_ratio = ingest["1024x40"] / ingest["1024"] if ingest["1024"] else float("nan")
    rows.append(Row("1024 ranks x 40 steps/s", "CPU ms per frame drawn, median", _ms(med["1024x40"]), f"{_ms(med['1024'])} (x 10 steps/s)", f"{growth:.2f}x at {rate_ratio:.1f}x the messages", "no growth (<= 1.3x)", growth <= 1.3))
    rows.append(Row("1024 ranks x 40 steps/s", "CPU ms per frame drawn, p95", _ms(p95["1024x40"]), _ms(p95["1024"]), f"{p95['1024x40'] / p95['1024']:.2f}x", "", None))

    full = [f for _s, f in attaches]
    rows.append(Row("attach, 1024 ranks", "s to a full screen, median", f"{statistics.median(full):.2f}", "", "", "< 1 s", statistics.median(full) < 1.0))
    rows.append(Row("attach, 1024 ranks", "s to a full screen, worst", f"{max(full):.2f}", "", "", "", None))
    if latencies:
        rows.append(Row("publish to screen, 1024 ranks", "ms, p95", f"{pct(latencies, 95) * 1000:.0f}", "", "", "< 250 ms", pct(latencies, 95) < 0.25))
        rows.append(Row("publish to screen, 1024 ranks", "ms, median", f"{pct(latencies, 50) * 1000:.0f}", "", "", "", None))

    rss = measure_rss(1024, RSS_STEPS)
    for side, name in (("tui", "TUI"), ("hub", "hub")):
        r = rss[side]
        # Bounded: nothing accumulates (over the second half, fewer new live objects than
        # frames, where a leak of one object per rank and frame would add 600,000) and RSS grows
        # by less than 2 MiB there (the allocator settling).
        steady = r["objects_end"] - r["objects_half"] < RSS_STEPS / 2
        bounded = steady and abs(r["second"]) * (RSS_STEPS / 2) / 1000 < 2 * (1 << 20)
        rows.append(Row(
            f"RSS, {name}, 1024 ranks x {RSS_STEPS} steps",
            "bytes per 1000 steps, 2nd half",
            f"{r['second']:+,.0f}",
            f"{r['first']:+,.0f} (1st half)",
            f"RSS {_mib(r['start'])} -> {_mib(r['end'])} MiB; objects {r['objects_half']:,} -> {r['objects_end']:,}",
            "~0 (bounded)",
            bounded,
        ))  # fmt: skip

    load1 = os.getloadavg()[0]
    facts.append(
        f"tui: {SIZE[0]}x{SIZE[1]} terminal, headless Textual with each update encoded to escape sequences as "
        f"for a terminal; hub and simulated ranks in processes of their own (log to /dev/null). A frame drawn: the "
        f"app thread's thread_time from one poll that brought hub frames to the next such poll (applying them, rows, "
        f"widgets, compositor, escape sequences); pardash draws every hub frame, the naive grid falls behind and "
        f"draws several in one. {MEASURE_S:g} s measured per configuration after {WARM_S:g} s of warm-up."
    )
    for key, label in (("256", "256 x 10"), ("1024", "1024 x 10"), ("1024x40", "1024 x 40")):
        facts.append(f"hub ingest at {label}: {ingest[key]:,.0f} messages/s (steps + 1 Hz heartbeats and system samples)")
    for key, m in measured.items():
        per_update = m.per_update_s
        per_frame = m.per_frame_s
        facts.append(
            f"{key}: {len(per_update)} frames drawn from {m.frames} hub frames in {m.wall_s:.1f} s; "
            f"per hub frame median {_ms(statistics.median(per_frame))} ms, p95 {_ms(pct(per_frame, 95))} ms; "
            f"app thread {100 * m.cpu_s / m.wall_s:.0f}% of a core"
        )
    facts.append(
        "attach: " + "; ".join(f"snapshot {s:.2f} s, full screen {f:.2f} s" for s, f in attaches)
        + " (from creating the HubClient to the first screen update with every rank stepped; app start-up included)"
    )
    if latencies:
        facts.append(
            f"publish to screen: {len(latencies)} cells redrawn with a new step in {LATENCY_S:g} s (cells form); "
            f"p50 {pct(latencies, 50) * 1000:.0f} ms, p95 {pct(latencies, 95) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
        )
    facts.append(
        f"RSS: {RSS_STEPS} steps x 1024 ranks ({RSS_STEPS / 10 / 60:g} minutes of a 10 steps/s job: "
        f"{RSS_STEPS * 1024 / 1e6:.1f}M steps + 1 Hz heartbeats and system samples), fed as fast as possible in "
        f"{rss['wall_s']:.0f} s; histories are full after 240 steps; the viewer redraws every {FRAMES_PER_DRAW} "
        f"frames; hub RSS includes the SimulatedJob's 1024 reporters feeding it."
    )
    facts.append(f"live part {live_s:.0f} s; load average {load0:.1f} before, {load1:.1f} after ({os.cpu_count()} cores).")
    return rows, "\n".join(f"- {f}" for f in facts)


def quick(argv: list[str]) -> None:
    """One live configuration, for iterating on the frame cost: ``python -m bench.tui quick
    [--ranks 1024] [--rate 10] [--cells] [--naive] [--profile FILE]`` prints the median and p95
    CPU per frame drawn and the part spent applying frames. ``--profile`` writes a cProfile of
    the measured seconds (the profiler's overhead inflates the times printed with it)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.tui quick")
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--cells", action="store_true")
    parser.add_argument("--naive", action="store_true")
    parser.add_argument("--profile", default="")
    parser.add_argument("--repeat", type=int, default=1, help="measurements against the same job")
    args = parser.parse_args(argv)
    with live_job(args.ranks, args.rate) as info:
        for _ in range(args.repeat):
            profiler = None
            if args.profile:
                import cProfile

                profiler = cProfile.Profile()
            m = measure_frames(info, args.ranks, naive=args.naive, cells=args.cells, profiler=profiler)
            if profiler is not None:
                profiler.dump_stats(args.profile)
            per = m.per_update_s
            apply = statistics.median(a for _c, a, _n in m.intervals)
            print(
                f"{args.ranks} ranks x {args.rate:g} steps/s{' cells' if args.cells else ''}: "
                f"median {_ms(statistics.median(per))} ms, p95 {_ms(pct(per, 95))} ms, "
                f"applying {_ms(apply)} ms; {len(per)} frames drawn from {m.frames}; "
                f"load {os.getloadavg()[0]:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["quick"]:
        quick(sys.argv[2:])
        sys.exit(0)
    from .common import standalone

    sys.exit(standalone(__spec__.name, __doc__, lambda _ns: run()))
