"""Prints how it was started, as JSON; exits with --exit CODE (a text: sys.exit(TEXT)), raises with --raise."""

import json
import os
import sys


def fail():
    raise RuntimeError("probe failed on purpose")


if "--raise" in sys.argv:
    fail()
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "file": os.path.abspath(__file__) if "__file__" in globals() else None, "name": __name__}))
if "--exit" in sys.argv:
    code = sys.argv[sys.argv.index("--exit") + 1]
    sys.exit(int(code) if code.lstrip("-").isdigit() else code)
