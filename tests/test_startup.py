"""A rank's start-up (pardash.trainer.startup): torch imported with the collector off, what it
made frozen, and the collector back on before any step, never left off for the run."""

import gc
import json
import subprocess
import sys

from helpers import pardash_env
from pardash.trainer import startup


def test_imports_run_with_the_collector_off_and_leave_it_as_it_was_with_them_frozen():
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with startup.imports():
        inside = gc.isenabled()
        made = [[i] for i in range(1000)]  # tracked containers, as an import's are
    assert not inside and gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(made)
    gc.disable()
    try:
        with startup.imports():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


# The bundled trainer as `python -m` runs it (runpy, __main__), with a finder that notes whether
# the collector was on as torch and its compiler were first looked for, and the process's exit
# (trainer._exit_now ends in os._exit) saying how it left the collector.
PROBE = """
import gc, json, os, runpy, sys
seen = {}
class Note:
    def find_spec(self, name, path=None, target=None):
        if name in ("torch", "torch._dynamo") and name not in seen:
            seen[name] = gc.isenabled()
sys.meta_path.insert(0, Note())
real_exit = os._exit
def leave(code):
    print(json.dumps({"seen": seen, "on": gc.isenabled(), "frozen": gc.get_freeze_count(), "code": code}))
    sys.stdout.flush()
    real_exit(code)
os._exit = leave
sys.argv = ["pardash-train", "--help"]
runpy.run_module("pardash.trainer.train", run_name="__main__", alter_sys=True)
"""


def test_the_trainer_imports_torch_with_the_collector_off_and_runs_with_it_on():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=pardash_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    state = json.loads(proc.stdout.strip().splitlines()[-1])
    # torch, and torch._dynamo (which its optimizer would import at the first step), with it off
    assert state["seen"] == {"torch": False, "torch._dynamo": False}
    # then on, every object of those imports frozen
    assert state["on"] is True and state["frozen"] > 100_000 and state["code"] == 0
