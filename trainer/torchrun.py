"""torchrun, as ``pardash launch`` runs it: ``python -m torch.distributed.run`` with the same
flags and the same output, but without the interpreter's teardown when it is done.

torchrun's agent imports torch; unloading it module by module once the workers have exited
takes about 0.7 s of a 2-core machine, which every launch would wait for before it could
report its exit. Failures print exactly what torchrun prints (its traceback ends with the
ChildFailedError summary the launcher reads) and exit 1, as torchrun does; a stop signal
exits 128 + its number.
"""

from __future__ import annotations

import os
import sys
import traceback


def main() -> int:
    from pardash.trainer import startup

    with startup.imports():  # torch (startup says why)
        from torch.distributed.run import main as torchrun_main

    try:
        torchrun_main()
        return 0
    except SystemExit as e:  # argparse, or an agent that exits by itself
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:
        return 130
    except BaseException as e:
        sig = getattr(e, "sigval", None)
        if sig is not None:
            # SignalException: the agent was told to stop (SIGTERM from the launcher, a
            # scheduler) and has stopped the workers. A stop, not a failure to trace back:
            # exit as the shell would for the signal.
            return 128 + int(sig)
        _name_the_script(e)
        traceback.print_exc()
        return 1


AUTORUN = "pardash.trainer.autorun"


def _name_the_script(exc: BaseException, argv: list[str] | None = None) -> None:
    """torchrun's failure summary names the program it ran: for ``pardash launch -- train.py``
    that is pardash's wrapper ("pardash.trainer.autorun FAILED"), where plain torchrun names
    the script. The summary is made again with the script's name (or ``-m``'s module)."""
    argv = sys.argv if argv is None else argv
    if getattr(exc, "name", None) != AUTORUN or not hasattr(exc, "format_msg") or AUTORUN not in argv:
        return
    rest = argv[argv.index(AUTORUN) + 1 :]
    if rest[:1] == ["-m"]:
        rest = rest[1:]
    if rest:
        exc.name = rest[0]
        exc.args = (exc.format_msg(),)


if __name__ == "__main__":
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)
