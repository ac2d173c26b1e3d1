"""`python -m bench [NAME ...]`: run benchmarks, print their tables, update bench/RESULTS.md."""

from __future__ import annotations

import argparse
import importlib
import sys

from .common import table, write_results

BENCHES = {
    "publish": "Rank-side publish cost (issue 2)",
    "throughput": "Training throughput, telemetry on/off (issue 2)",
    "detection": "Straggler detection matrix (issue 4)",
    "script": "Unmodified script under pardash against plain torchrun (issue 5)",
    "fuzz": "Hostile frames against a live hub (issue 7)",
    "traceml": "Side by side with TraceML, same script and slowdown (issues 4, 5)",
    "tui": "The dashboard at 256 and 1024 ranks (issue 3)",
    "soak": "Hub soak at 1024 ranks and ingest headroom against raw ZeroMQ (issue 7)",
    "hubcost": "Hub work per step message against decoding it alone (issue 7)",
    "replay_seek": "A replay's seeks on a big log, keyframes against playing it from its start",
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run benchmarks (all of them when none is named), print their tables and update bench/RESULTS.md.",
        epilog="benches:\n" + "\n".join(f"  {n:<12} {title}" for n, title in BENCHES.items())
        + "\n\n`python -m bench.NAME --help` says what one measures and how.",
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="benches to run, in this order")
    names = parser.parse_args(argv).names or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"unknown bench: {', '.join(unknown)}; choose from {', '.join(BENCHES)}", file=sys.stderr)
        return 2
    sections, notes = {}, {}
    for name in names:
        print(f"== {BENCHES[name]}", flush=True)
        rows, note = importlib.import_module(f"bench.{name}").run()
        print(table(rows))
        print(note, flush=True)
        sections[BENCHES[name]] = rows
        notes[BENCHES[name]] = note
    write_results(sections, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
