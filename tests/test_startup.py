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


def test_pardashs_own_processes_load_none_of_the_ranks_api_and_a_script_still_finds_it():
    # `import pardash.telemetry` loaded the explicit API (its reporter, memory and environment
    # modules, psutil among them) into every process that imports any module of the package:
    # a launch's start-up was twice what it needed, and so the hub's, the supervisor's and each
    # command's a part. The API's names now load it when first used.
    probe = (
        "import json, sys\n"
        "import pardash.launch, pardash.telemetry.hub, pardash.trainer.supervisor\n"
        "before = sorted(m for m in sys.modules if m.startswith('pardash.telemetry.'))\n"
        "import pardash.telemetry as pt\n"
        "from pardash.telemetry import step\n"
        "print(json.dumps({'before': before, 'names': [getattr(pt, n).__module__ for n in pt.__all__],\n"
        "                  'step': step is pt.step, 'listed': set(pt.__all__) <= set(dir(pt))}))\n"
    )
    out = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=pardash_env()).stdout)
    assert "pardash.telemetry.api" not in out["before"] and "pardash.telemetry.reporter" not in out["before"], out["before"]
    assert out["names"] == ["pardash.telemetry.api"] * 5 and out["step"] and out["listed"]


def test_a_command_loads_no_other_commands_modules_to_build_its_parser():
    # Every command builds the whole parser: the hub's and Prometheus's flags were made beside
    # the code that serves them, and the launch's and the recorder's modules were imported with
    # the command line, so `pardash ps` and `pardash report` loaded the hub's state, the
    # recorder's client and the launch (190 ms of CPU a command, 145 without them). Then
    # ZeroMQ, for the bound of `simulate --ranks` (the hub's limits lived beside its keys): 30 ms.
    probe = (
        "import json, sys\n"
        "from pardash import cli, parser\n"
        "parser.build_parser()\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('pardash.', 'zmq')))))\n"
    )
    loaded = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=pardash_env()).stdout)
    for module in ("pardash.launch", "pardash.record", "pardash.telemetry.hub", "pardash.telemetry.prometheus", "pardash.telemetry.state",
                   "pardash.telemetry.client", "pardash.telemetry.security", "zmq"):  # fmt: skip
        assert module not in loaded, (module, loaded)
