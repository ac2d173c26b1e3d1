"""An unmodified torchrun script under pardash against plain torchrun (issue 5).

The demo DDP script (demos/ddp_plain.py, imports nothing from pardash) runs on 2 gloo ranks
plain (`python -m torch.distributed.run`) and under `pardash launch --headless -- SCRIPT`
(hub, zero-code instrumentation, log). Steady steps/s is what rank 0 times itself from step 20
to the last and prints at the end (the times at which its lines reach this reader are no clock:
under pardash a headless launch prints the ranks' output file every 0.1 s); start-to-exit is the whole
command's wall time on a short job, the hub's start and final flush included. Runs alternate.
Targets: steps/s ratio >= 0.98; start-to-exit at most 1.2x.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import DEMO_RATE, Row

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "demos" / "ddp_plain.py")
STEP = re.compile(rb"^step (\d+) loss")


def _cmd(under_pardash: bool, steps: int, workdir: str) -> list[str]:
    if under_pardash:
        return [sys.executable, "-m", "pardash", "launch", "--headless", "--nproc", "2", "--every", "600",
                "--log", os.path.join(workdir, f"run{time.monotonic_ns()}.jsonl"), "--runs-dir", workdir,
                "--", SCRIPT, "--steps", str(steps)]  # fmt: skip
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", SCRIPT, "--steps", str(steps)]


def _run(under_pardash: bool, steps: int, workdir: str) -> tuple[float, float]:
    """(steady steps/s from step 20 to the last, as rank 0 timed it; whole wall seconds)."""
    env = dict(os.environ)
    env.pop("PARDASH_ENDPOINT", None)
    env["PYTHONUNBUFFERED"] = "1"
    t0 = time.perf_counter()
    p = subprocess.Popen(_cmd(under_pardash, steps, workdir), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=workdir)
    seen, rate = 0, 0.0
    assert p.stdout is not None
    for line in p.stdout:
        if STEP.match(line):
            seen += 1
        elif m := DEMO_RATE.match(line):
            rate = float(m.group(1))
    code = p.wait()
    wall = time.perf_counter() - t0
    if code != 0 or seen != steps or (steps > 20 and not rate):
        raise RuntimeError(f"run failed (code {code}, steps seen {seen}, rate {'printed' if rate else 'missing'})")
    return rate, wall


def run(steps: int = 1000, short_steps: int = 30, pairs: int = 4) -> tuple[list[Row], str]:
    rate = {True: [], False: []}
    wall = {True: [], False: []}
    with tempfile.TemporaryDirectory() as d:
        _run(False, short_steps, d)  # warm the page cache
        for i in range(pairs):
            # Each pair back to back, order alternating: this VM's speed drifts over minutes,
            # and two runs seconds apart share the drift (ratios are medians of pair ratios).
            for under in ((True, False) if i % 2 == 0 else (False, True)):
                rate[under].append(_run(under, steps, d)[0])
                wall[under].append(_run(under, short_steps, d)[1])
    rate_ratios = sorted(a / b for a, b in zip(rate[True], rate[False]))
    wall_ratios = sorted(a / b for a, b in zip(wall[True], wall[False]))
    rr, wr = statistics.median(rate_ratios), statistics.median(wall_ratios)
    r_pd, r_plain = statistics.median(rate[True]), statistics.median(rate[False])
    w_pd, w_plain = statistics.median(wall[True]), statistics.median(wall[False])
    rows = [
        Row("script under pardash", "steps/s (demo DDP x2)", f"{r_pd:.1f}", f"{r_plain:.1f} (plain torchrun)", f"{rr:.3f}", ">= 0.98", rr >= 0.98),
        Row("script under pardash", f"start to exit, {short_steps} steps (s)", f"{w_pd:.2f}", f"{w_plain:.2f}", f"{wr:.2f}x", "<= 1.2x", wr <= 1.2),
    ]
    load = os.getloadavg()[0]
    note = (
        f"script: {pairs} back-to-back pairs (order alternating), ratios are medians of pair ratios; steps/s as rank 0 timed steps "
        f"21..{steps}: pardash {', '.join(f'{x:.1f}' for x in rate[True])}, plain "
        f"{', '.join(f'{x:.1f}' for x in rate[False])} (pair ratios {', '.join(f'{x:.3f}' for x in rate_ratios)}); "
        f"start-to-exit pardash {', '.join(f'{x:.2f}' for x in wall[True])} s, plain {', '.join(f'{x:.2f}' for x in wall[False])} s "
        f"(pair ratios {', '.join(f'{x:.2f}' for x in wall_ratios)}); load average {load:.1f}."
    )
    return rows, note


if __name__ == "__main__":
    from .common import standalone

    sys.exit(standalone(__spec__.name, __doc__, lambda _ns: run()))
