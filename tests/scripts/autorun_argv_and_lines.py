"""Prints its argv as JSON, then a line on stdout and one on stderr, each with another rank's
whole line written to the same stream between the pieces of its print().

One launch serves two tests of test_autorun.py: the script's flags reach it whole, and each
printed line comes out whole. It imports nothing of torch or pardash, so its rank costs next to
nothing under a launch with telemetry off."""

import json
import os
import sys


class AnotherRanksLine:
    """Printed, writes a whole line to ``fd`` as another rank would right then, between the
    pieces of this process's print() (the ranks of a launch share one output file)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __str__(self) -> str:
        os.write(self.fd, b"[another rank's line]\n")
        return "x"


print(json.dumps({"argv": sys.argv}))
print("LOG", AnotherRanksLine(1), 42)
print("ERR", AnotherRanksLine(2), 43, file=sys.stderr)
