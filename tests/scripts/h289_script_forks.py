"""Runs a script again and again, as ``python -m pardash.trainer.autorun SCRIPT ARGS`` or as
``python SCRIPT ARGS``, each run a process forked from this one, which has imported torch and
its compiler (what every run imports first) once.

A run of a tiny script spends about 2.5 s of a core importing torch and torch._dynamo (which
autorun's instrument and any torch.optim optimizer import); the stop-signal tests ran a dozen
of them. A fork starts with them loaded and is otherwise the process ``python`` makes: its own
environment, working folder, stdout and stderr (files), signal dispositions as a fresh
interpreter's (Python's SIGINT handler, the rest default), and its end is the interpreter's own:
autorun's ``sys.exit(main())``, or the script's exception, leaves this file's top level, so
CPython exits as it does from a script (atexit, threads joined, an unhandled
KeyboardInterrupt's SIGINT to itself). Nothing of pardash is imported here and no torch code has
run before a fork (no thread pool, no process group).

Protocol: one JSON object a line on stdin, ``{"autorun", "argv", "env", "cwd", "stdout",
"stderr"}``; two lines back on stdout per run: ``{"pid": N}`` as its process starts,
``{"code": N}`` (as ``subprocess``'s returncode: -N for signal N) once it has ended.
"""

import importlib
import json
import os
import runpy
import sys
import threading

from pardash.trainer import startup

with startup.imports():  # as autorun does (pardash.trainer.startup)
    for name in ("torch", "torch.nn", "torch.distributed", "torch._dynamo"):
        importlib.import_module(name)

assert threading.active_count() == 1, threading.enumerate()  # a fork copies this thread alone

child = None
for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child = request
        break
    sys.stdout.write(json.dumps({"pid": pid}) + "\n")
    sys.stdout.flush()
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")
    sys.stdout.flush()

if child is not None:
    os.setsid()  # its own session and process group, as a subprocess started apart
    os.chdir(child["cwd"])
    os.environ.clear()
    os.environ.update(child["env"])
    for fd, path in ((1, child["stdout"]), (2, child["stderr"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    sys.path[0] = os.path.dirname(os.path.abspath(child["argv"][0])) if not child["autorun"] else os.getcwd()
    if child["autorun"]:
        from pardash.trainer import autorun

        sys.argv = [autorun.__file__, *child["argv"]]
        sys.exit(autorun.main())  # as its ``if __name__ == "__main__"`` does
    sys.argv = list(child["argv"])
    runpy.run_path(sys.argv[0], run_name="__main__")
