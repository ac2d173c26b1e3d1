"""Shared helpers: percentiles, the results table, and writing bench/RESULTS.md."""

from __future__ import annotations

import datetime
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).with_name("RESULTS.md")
DEMO_RATE = re.compile(rb"^steps/s ([\d.]+) \(steps (\d+)\.\.(\d+)\)")
"""The demo DDP script's last line on rank 0: its steady steps/s, timed by itself, over steps
first..last (demos/ddp_plain.py, bench/scripts/ddp_traceml.py)."""


def pct(values: list[float], q: float) -> float:
    """q-th percentile (0..100) by nearest rank."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


@dataclass
class Row:
    """One line of the results table."""

    bench: str
    metric: str
    value: str
    baseline: str
    ratio: str
    target: str
    ok: bool | None = None

    def cells(self) -> list[str]:
        verdict = "" if self.ok is None else ("met" if self.ok else "MISSED")
        return [self.bench, self.metric, self.value, self.baseline, self.ratio, self.target, verdict]


HEAD = ["bench", "metric", "pardash", "baseline (same run)", "ratio", "target", ""]


def table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def read_section(name: str) -> tuple[str, list[Row], list[str]]:
    """RESULTS.md's section ``name`` as last written: its time stamp, table rows and notes
    (("", [], []) when there is none)."""
    old = RESULTS.read_text() if RESULTS.exists() else ""
    stamp, rows, notes = "", [], []
    inside = False
    for line in old.splitlines():
        if line.startswith("## "):
            inside = line[3:].strip() == name
        elif not inside:
            continue
        elif line.startswith("_") and line.endswith("_") and not stamp:
            stamp = line.strip("_")
        elif line.startswith("| ") and not line.startswith("| " + HEAD[0] + " |"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if len(cells) == len(HEAD):
                rows.append(Row(*cells[:6], ok={"met": True, "MISSED": False}.get(cells[6])))
        elif line.startswith("- "):
            notes.append(line[2:])
    return stamp, rows, notes


def write_results(sections: dict[str, list[Row]], notes: dict[str, str]) -> str:
    """Replace the sections named in ``sections`` in RESULTS.md, keep the others."""
    old = RESULTS.read_text() if RESULTS.exists() else ""
    kept: dict[str, str] = {}
    current = None
    for line in old.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            kept[current] = ""
        elif current is not None:
            kept[current] += line + "\n"
    stamp = f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} on {platform.node()} ({os.cpu_count()} cores, {platform.python_version()})"
    for name, rows in sections.items():
        body = f"\n_{stamp}_\n\n{table(rows)}\n"
        if notes.get(name):
            body += f"\n{notes[name]}\n"
        kept[name] = body + "\n"
    out = "# Benchmark results\n\nWritten by `python -m bench` (what each bench measures and how: its module's docstring, bench/NAME.py). Ratios compare with a baseline measured in the same run.\n\n"
    for name, body in kept.items():
        out += f"## {name}\n{body.rstrip()}\n\n"
    RESULTS.write_text(out)
    return out


def standalone(
    module: str, doc: str | None, run: Callable[[Any], tuple[list[Row], str]], argv: list[str] | None = None,
    configure: Callable[[Any], None] | None = None,
) -> int:
    """``python -m bench.NAME``: one bench alone. ``--help`` says what it measures (``doc``, the module's
    docstring) without running it, an unknown argument is refused, and ``--write`` also puts the
    table in RESULTS.md as ``python -m bench NAME`` does. ``configure`` adds the bench's own
    arguments; ``run`` takes the parsed namespace."""
    import argparse

    from .__main__ import BENCHES

    name = module.rsplit(".", 1)[-1]
    parser = argparse.ArgumentParser(
        prog=f"python -m {module}", description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if configure is not None:
        configure(parser)
    if name in BENCHES:
        parser.add_argument("--write", action="store_true", help="also write the table into bench/RESULTS.md")
    ns = parser.parse_args(argv)
    rows, note = run(ns)
    print(table(rows))
    print(note, flush=True)
    if getattr(ns, "write", False):
        write_results({BENCHES[name]: rows}, {BENCHES[name]: note})
    return 0
