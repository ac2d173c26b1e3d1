"""Runs the bundled trainer again and again, each run a process forked from this one, which has
imported it (and what its runs import: torch's compiler, FSDP2, DCP) once.

`python -m pardash.trainer.train` spends about 5 s of a core on imports before its first step;
a test that runs the trainer as one plain process a dozen times spent a minute of CPU on
them. A fork starts with all of it loaded, and is otherwise the process `python -m` makes:
its own environment, working folder, stdout and stderr (files), exit code; the trainer's own
exit path (``_exit_now``). Nothing here has run torch code before a fork (no thread pool, no
process group), so a child starts as clean as a fresh interpreter.

Protocol: one JSON object a line on stdin, ``{"argv", "env", "cwd", "stdout", "stderr"}``;
two lines back on stdout per run: ``{"pid": N}`` as its process starts, ``{"code": N}`` once it
has ended (tests/helpers.py's TrainerForks is the other end).
"""

import importlib
import json
import os
import signal
import sys
import threading

from pardash.trainer import startup

# As `python -m pardash.trainer.train` does (pardash.trainer.startup): the imports with the
# collector off, then frozen; here with what the runs import as they go too: torch's compiler
# (an optimizer's first construction imports it), FSDP2 and torch.distributed.checkpoint.
with startup.imports():
    from pardash.trainer import train

    for name in ("torch._dynamo", "torch.distributed.fsdp", "torch.distributed.checkpoint"):
        importlib.import_module(name)

assert threading.active_count() == 1, threading.enumerate()  # a fork copies this thread alone

replies = sys.stdout
for line in sys.stdin:
    request = json.loads(line)
    replies.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()  # its own session and process group, as a subprocess started apart
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(f, fd)
                os.close(f)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            sys.argv = [train.__file__, *request["argv"]]
            code = train.main(request["argv"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            train._exit_now(code)
    replies.write(json.dumps({"pid": pid}) + "\n")
    replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")
    replies.flush()
