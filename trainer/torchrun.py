"""torchrun, as ``pardash launch`` runs it: ``python -m torch.distributed.run`` with the same
flags and the same output, but without the interpreter's teardown when it is done.

torchrun's agent imports torch; unloading it module by module once the workers have exited
takes about 0.7 s of a 2-core machine, which every launch would wait for before it could
report its exit. Failures print what torchrun prints, the ChildFailedError summary the
launcher reads, without torchrun's own frames above it, and exit 1 as torchrun does; a stop
signal exits 128 + its number.
"""

from __future__ import annotations

import os
import sys
import traceback


def main() -> int:
    from pardash.trainer import startup

    with startup.imports():  # torch (startup says why)
        from torch.distributed.run import main as torchrun_main

    _say_every_failure()
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
        if hasattr(e, "format_msg"):
            # ChildFailedError: its summary of the failed workers, which the launcher reads,
            # without the 13 lines of torchrun's own frames above it (where torchrun raised it,
            # not where the job failed: the rank's traceback is above, in its output).
            sys.stderr.write("".join(traceback.format_exception_only(e)))
        else:
            traceback.print_exc()
        return 1


def _say_every_failure() -> None:
    """torchrun logs one failed worker when its workers fail ("failed (exitcode: 1) local_rank:
    0 ..."), the first by its error file's time, and lists the others only in the summary it
    prints when it gives up. Under --max-restarts it restarts instead: a rank killed outright
    (SIGKILL: no error file, so "later" than its peer's error about the broken connection) went
    unsaid, and the launcher blamed the peer. Every other failed worker is said too, in the same
    form, after torchrun's line (the launcher reads them all: see supervisor.FAILED_WORKER)."""
    try:
        from torch.distributed.elastic.multiprocessing.api import SubprocessContext
    except ImportError:  # another torch's layout: torchrun's own line only
        return
    poll = getattr(SubprocessContext, "_poll", None)
    if poll is None or getattr(poll, "_pardash", False):
        return

    def _poll(self):
        result = poll(self)
        for line in other_failures(getattr(result, "failures", None) or {}):
            print(line, file=sys.stderr, flush=True)
        return result

    _poll._pardash = True  # type: ignore[attr-defined]
    SubprocessContext._poll = _poll


def other_failures(failures: dict) -> list[str]:
    """A line for each failed worker (torchrun's ProcessFailure by local rank) but the one
    torchrun logs itself (the first by time), in torchrun's form."""
    if len(failures) < 2:
        return []
    first = min(failures.values(), key=lambda f: f.timestamp)
    return [f"pardash: also failed (exitcode: {f.exitcode}) local_rank: {f.local_rank} (pid: {f.pid})"
            for f in sorted(failures.values(), key=lambda f: f.local_rank) if f is not first]  # fmt: skip


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
