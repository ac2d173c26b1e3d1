"""Training throughput with telemetry on against PARDASH_TELEMETRY=0 (issue 2).

Both arms run the same `pardash launch --headless` (hub, printer and all) with the bundled
trainer, DDP on 2 gloo ranks, a model whose step takes about 10-15 ms on this CPU; only the
ranks' publishing differs. Runs alternate on/off to spread machine noise over both arms, and
the ratio is of medians of the trainer's own "done: N steps in X s" timing.
Target: ratio >= 0.99.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile

from .common import Row

MODEL = ["--model", "mlp", "--hidden", "128", "--depth", "2"]
DONE = re.compile(r"done: (\d+) steps in ([\d.]+) s")


def one_run(steps: int, telemetry: bool, workdir: str) -> float:
    """Steps per second of one launch."""
    env = dict(os.environ)
    env.pop("PARDASH_ENDPOINT", None)
    env["PARDASH_TELEMETRY"] = "1" if telemetry else "0"
    out = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--strategy", "ddp", "--nproc", "2",
         "--steps", str(steps), "--log-every", "0", "--every", "60", "--runs-dir", workdir, *MODEL],
        capture_output=True, text=True, env=env, cwd=workdir, timeout=600,
    )  # fmt: skip
    m = DONE.search(out.stdout + out.stderr)
    if out.returncode != 0 or not m:
        raise RuntimeError(f"launch failed ({out.returncode}): {out.stderr[-2000:]}")
    return int(m.group(1)) / float(m.group(2))


def run(steps: int = 400, pairs: int = 4) -> tuple[list[Row], str]:
    on: list[float] = []
    off: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        one_run(50, True, d)  # warm the page cache and the interpreter's imports
        for i in range(pairs):
            # Alternate which arm goes first, so drift in machine load falls on both.
            order = (True, False) if i % 2 == 0 else (False, True)
            for tel in order:
                (on if tel else off).append(one_run(steps, tel, d))
    m_on, m_off = statistics.median(on), statistics.median(off)
    ratio = m_on / m_off
    rows = [
        Row("throughput ddp x2", "steps/s, telemetry on", f"{m_on:.1f}", f"{m_off:.1f} (PARDASH_TELEMETRY=0)", f"{ratio:.3f}", ">= 0.99", ratio >= 0.99),
    ]
    note = (
        f"throughput: {pairs} alternating pairs of {steps}-step runs, medians; on {', '.join(f'{x:.1f}' for x in on)}; "
        f"off {', '.join(f'{x:.1f}' for x in off)} steps/s; step {1e3 / m_off:.1f} ms."
    )
    return rows, note


if __name__ == "__main__":
    rows, note = run()
    for r in rows:
        print(r.cells())
    print(note)
