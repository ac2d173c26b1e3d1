"""Run a user's script as ``__main__`` on each rank, with pardash's instrumentation installed.

``pardash launch [flags] -- SCRIPT ARGS`` (or ``-m MODULE ARGS``) has torchrun run
``python -m pardash.trainer.autorun SCRIPT ARGS`` on every rank. This module installs the hooks
of :mod:`pardash.trainer.instrument` (only when PARDASH_ENDPOINT names a hub), then runs the
script as ``python SCRIPT ARGS`` would: as ``__main__``, with ``sys.argv`` exactly the user's
and the script's folder first on ``sys.path``.

The script's failures stay the script's: an exception prints a traceback that starts at the
user's code (runpy's, this module's and the hooks' frames are cut), is published as an
``error`` event with that traceback and written to torchrun's error file, and the process exits
with code 1; ``SystemExit`` codes pass through. Every way out publishes an ``exit`` event, but
a stop's under ``pardash launch``, which the launcher notes (see _stopped).
"""

from __future__ import annotations

import builtins
import importlib.machinery
import os
import runpy
import signal
import sys
import traceback
import types
from types import TracebackType
from typing import Any

USAGE = "usage: python -m pardash.trainer.autorun SCRIPT [ARGS...] | -m MODULE [ARGS...]"

_HOOKS = ("instrument.py", "watching.py", "evaluations.py", "epochs.py", "arrivals.py", "pipelines.py", "rounds.py", "skips.py",
          "frameworks.py", "hooking.py", "imported.py", "saves.py", "loads.py", "norms.py")
"""The instrument's files, whose wrappers (of a DataLoader iterator's ``__next__``, of
``Module.train``, of ``torch.autograd.backward``) sit between the script's frames."""
_OURS = (
    os.path.abspath(__file__),
    *(os.path.join(os.path.dirname(os.path.abspath(__file__)), name) for name in _HOOKS),
    os.path.abspath(runpy.__file__),
    "<frozen runpy>",
)
"""Files whose frames never show in the user's traceback."""


def torchrun_command(script: list[str]) -> list[str]:
    """What torchrun runs per rank for ``pardash launch -- SCRIPT ARGS`` (or ``-m MODULE``)."""
    return ["-m", "pardash.trainer.autorun", *script]


def _trim(exc: BaseException) -> BaseException:
    """Cut our frames from ``exc``'s traceback (and its causes'), keeping the frame where it was
    raised even if it is ours, so a pardash bug still shows where it is."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        frames: list[TracebackType] = []
        tb = e.__traceback__
        while tb is not None:
            frames.append(tb)
            tb = tb.tb_next
        last = len(frames) - 1 if not isinstance(e, SyntaxError) else -1  # compile()'s: the script's
        keep = [f for i, f in enumerate(frames) if i == last or f.tb_frame.f_code.co_filename not in _OURS]
        for a, b in zip(keep, keep[1:]):
            a.tb_next = b
        if keep:
            keep[-1].tb_next = None
        e.__traceback__ = keep[0] if keep else None
        todo += [e.__cause__, e.__context__]
    return exc


def _record_error_file(e: BaseException) -> None:
    """Write torchrun's error file (TORCHELASTIC_ERROR_FILE), as torch's @record would, so
    torchrun's summary names this rank's exception as the root cause."""
    if not os.environ.get("TORCHELASTIC_ERROR_FILE"):
        return
    try:
        from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

        ErrorHandler().record_exception(e)
    except Exception:
        pass


def _run(args: list[str]) -> None:
    from pardash.telemetry.reporter import say_unwatched

    if args[0] == "-m":
        if len(args) < 2:
            raise SystemExit(USAGE)
        say_unwatched(f"use `pardash launch -m {args[1]}`")
        sys.argv = [args[1], *args[2:]]  # runpy puts the module's file in argv[0], as python -m
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return
    script = args[0]
    if not os.path.exists(script):
        print(f"pardash: can't open file {script!r}: no such file", file=sys.stderr)
        raise SystemExit(2)
    say_unwatched(f"use `pardash launch -- {script}`")
    sys.argv = list(args)
    # python SCRIPT puts the script's folder first on sys.path (where autorun's -m put the
    # working directory), and gives __main__ an absolute __file__.
    path = os.path.abspath(script)
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    if not os.path.isfile(path):  # a folder or zip with __main__.py
        runpy.run_path(path, run_name="__main__")
        return
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    main.__builtins__ = builtins
    # The script is __main__ for good, as under python SCRIPT: pickling its classes and
    # multiprocessing's spawn find it there.
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


_ending: dict = {}
"""The failure a rank has caught and not yet said (``code``, ``error``): what a stop says in its
place (:func:`_stopped`). torchrun stops the other ranks (SIGTERM) once one has exited, and a
rank that failed of the same error a moment behind it (printing its traceback) was "stopped by
torchrun", its error never said and its rank left out of the error's."""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 2
    from pardash.telemetry import api, sigterm
    from pardash.telemetry.env import LINE_BUFFERED_VAR

    if os.environ.get(LINE_BUFFERED_VAR) == "1":
        _line_buffered()
    instrument = None
    if api.enabled():
        from pardash.trainer import startup

        with startup.imports():  # torch and the instrument (startup says why)
            reporter = api.reporter(gpu_index=_gpu_index())
            from pardash.trainer import instrument as instrument_mod

        instrument = instrument_mod.install(reporter)
        sigterm.at_stop(lambda: _stopped(reporter, instrument, signal.SIGTERM))
        sigterm.count_steps(lambda: instrument.step)  # (a stop the script went on from is not its exit's)
    else:
        reporter = api.reporter()  # a no-op: the script runs as it would without pardash
    # On with telemetry off too: the script runs in runpy's frames, not as torchrun runs it,
    # and aborted at exit 3 runs in 20 with PARDASH_TELEMETRY=0 (review 245; plain torchrun
    # 0 in 14): a user who turns telemetry off to rule pardash out met failures it made.
    _settle_before_destroy()
    code = 0
    error = None
    said = _StderrTail.install() if instrument is not None else None  # (telemetry off: the script's stderr untouched)
    try:
        _run(args)
    except SystemExit as e:
        code = api.exit_code(e.code)
        stop = sigterm.received()
        if stop:
            # An exit a stop led to is that stop, whatever code the script exits with (its
            # own): PyTorch Lightning's SIGTERM handler raises SIGTERMException, a SystemExit
            # of code None, at the end of the step, and the rank read "finished 448", exit 0,
            # after a Stop; a preemption handler's sys.exit(0) after its checkpoint, the same.
            # Said as a rank the signal ended says it (no error, no error file: no failure).
            _stopped(reporter, instrument, stop)
            raise
        if code:
            # A failure too: without this rank's error file, torchrun's summary could name the
            # rank whose collective broke after it (its error file has a time; this exit none).
            # Its traceback there starts at the script's code, as an exception's does.
            _record_error_file(_trim(e))
        # sys.exit("why"): Python prints the text and exits 1; it is the failure's error. An
        # exit with a code alone (argparse's 2 after "train.py: error: unrecognized arguments")
        # said why on stderr just before: its last line is the error, the lines before it
        # what the rank said last (shown as a traceback is).
        why = {"message": e.code} if isinstance(e.code, str) else said.error() if code and said else None
        _ending.update(code=code, error=why)
        _finish(reporter, instrument, code, why)
        raise
    except KeyboardInterrupt as e:
        traceback.print_exception(_trim(e))
        # Ctrl-C, a stop: said as a stop the script's own handler took (above), not as an
        # error "interrupted" (the viewers printed "[error] rank 0: interrupted" of a plain
        # torchrun's Ctrl-C, which reaches every rank, and a Lightning script's read "stopped
        # by SIGINT"). The process still exits 130, as Python's own Ctrl-C does to a shell.
        _stopped(reporter, instrument, signal.SIGINT)
        return 130
    except BaseException as e:
        code = 1
        _trim(e)
        _record_error_file(e)  # first: torchrun names the earliest error file the root cause
        tb = "".join(traceback.format_exception(e))
        error = {"message": traceback.format_exception_only(e)[-1].strip(), "traceback": tb}
        _ending.update(code=code, error=error)
        try:
            # As Python would print it: through sys.excepthook, which torch's
            # init_process_group (or the script) may have set, e.g. to tag lines [rank1]:.
            sys.excepthook(type(e), e, e.__traceback__)
        except Exception:
            sys.stderr.write(tb)
        sys.stderr.flush()
    _finish(reporter, instrument, code, error)
    return code


class _StderrTail:
    """``sys.stderr`` as the script sees it: the same stream (every attribute its own), whose
    last ``KEEP`` characters written are kept, for an exit that says why only there."""

    KEEP = 4096
    LINES = 20

    def __init__(self, stream) -> None:
        self._stream = stream
        self._tail = ""

    @classmethod
    def install(cls) -> "_StderrTail":
        tail = cls(sys.stderr)
        if sys.stderr is not None:
            sys.stderr = tail  # type: ignore[assignment]
        return tail

    def write(self, text):
        n = self._stream.write(text)
        if isinstance(text, str):
            self._tail = (self._tail + text)[-self.KEEP :]
        return n

    def __getattr__(self, name: str):
        return getattr(self._stream, name)

    def error(self) -> dict | None:
        """The error event's fields from what was written last: its last line the message, the
        lines before it (at most LINES) its traceback; None when nothing was."""
        lines = [line.rstrip() for line in self._tail.replace("\r", "\n").split("\n") if line.strip()]
        if not lines:
            return None
        return {"message": lines[-1].strip(), "traceback": "\n".join(lines[-self.LINES :]) + "\n"}


SETTLE_S = 0.05
"""How long ``destroy_process_group`` lets gloo's threads take the GIL before it runs."""


def _settle_before_destroy() -> None:
    """Let gloo's work threads finish before the script tears its process group down.

    A gloo work made in a backward pass holds a Python object (torch stashes a context in
    its thread-local state) that the work's thread frees when the work is done, which needs
    the GIL. A script that destroys its group and returns from ``main()`` while that free
    waits frees its DDP model in ``main()``'s frame: ~ProcessGroupGloo then joins the work
    thread holding the GIL, and the rank hangs forever (a torch bug; plain torchrun hits it
    as a rarer abort). The reporter's threads, contending for the GIL, made it 1 run in 3 of
    a small DDP script. Giving up the GIL for a moment at ``destroy_process_group`` lets the
    work thread finish first; nothing else changes. Put in place once the script imports
    ``torch.distributed`` (with telemetry on, the instrument has: at once): a rank whose
    script never does (one that prints its arguments) imported torch for it, 2 s of a core."""
    from pardash.trainer.imported import once_imported

    once_imported("torch.distributed.distributed_c10d", _settle_at_destroy)


def _settle_at_destroy(distributed_c10d: Any) -> None:
    """``torch.distributed.distributed_c10d``, imported: its ``destroy_process_group`` (and
    ``torch.distributed``'s, where that module has it already) waits SETTLE_S first."""
    import functools
    import time

    original = distributed_c10d.destroy_process_group

    @functools.wraps(original)
    def destroy_process_group(group=None, *args, **kwargs):
        if group is None or group is distributed_c10d.GroupMember.WORLD:  # (a subgroup's costs nothing)
            try:
                gloo = distributed_c10d.is_initialized() and "gloo" in str(distributed_c10d.get_backend())
            except Exception:
                gloo = False
            if gloo:
                time.sleep(SETTLE_S)
        return original(group, *args, **kwargs)

    distributed_c10d.destroy_process_group = destroy_process_group
    dist = sys.modules.get("torch.distributed")
    if dist is not None and getattr(dist, "destroy_process_group", None) is original:
        dist.destroy_process_group = destroy_process_group


def _line_buffered() -> None:
    """Print each line in one write, as to a terminal. ``pardash launch`` makes the ranks
    unbuffered (their output is a file that is read as it grows), and unbuffered, print()
    writes each piece of a line apart: the ranks sharing the file mixed their lines
    ("LOGLOG {...}"). A line-buffered stream is as prompt, a line at a time."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "write_through", False) and not stream.isatty():
            try:
                stream.reconfigure(line_buffering=True, write_through=False)
            except Exception:
                pass  # not a TextIOWrapper after all: left as it is


def _finish(reporter, instrument, code: int, error: dict | None = None) -> None:
    """Publish what is still held back, then the error event (fields of it: message,
    traceback) at the last step completed, as every error event says (a GPU's last step is
    published here: sent before, the error said the one before it), and the exit event at the
    step the script ended in (see _exit_step), then flush."""
    from pardash.telemetry import api

    if instrument is not None:
        try:
            instrument.finish(failed=code != 0)
        except Exception:
            pass
    api.flush()
    _ending.clear()  # (said here from now on)
    _say_end(reporter, instrument, code, error)
    reporter.close()


def _say_end(reporter, instrument, code: int, error: dict | None) -> None:
    if error is not None:
        reporter.event("error", step=reporter.last_step, **error)
    reporter.event("exit", code=code, step=_exit_step(reporter, instrument, code))


def _stopped(reporter, instrument, signum: int = 0) -> None:
    """At the stop ``signum`` (SIGTERM: torchrun stopping the job, see telemetry.sigterm; or a
    stop the script's own handler took and its exit followed, see main): publish what is still
    held back (a step whose logged values were awaited, a GPU step) and flush. If the rank had
    failed already (``_ending``): its error and exit, as it would have said them. Else, under
    ``pardash launch``, no exit event: the launcher notes the rank's, and who stopped it
    ("stopped by you"; the hub would take a rank's own word over it). Elsewhere (torchrun alone,
    a scheduler's preemption of it) nothing notes it, and the rank, alive still, says it as the
    launcher would: exit -signum, "stopped by SIGTERM" (it said nothing: its ranks read
    "silent ... never resumed" of a preemption)."""
    from pardash.telemetry import api

    ending = dict(_ending)
    _ending.clear()
    for publish in (lambda: instrument.finish(failed=True), api.flush):
        try:
            publish()
        except Exception:  # (whatever the loop was doing when the signal came: the flush still goes)
            pass
    try:
        if ending:
            _say_end(reporter, instrument, ending["code"], ending["error"])
        elif signum and not _launched():
            step = _exit_step(reporter, instrument, -signum)
            reporter.event("exit", code=-signum, step=step, message=f"stopped by {signal.Signals(signum).name}")
    except Exception:
        pass
    reporter.close()


def _launched() -> bool:
    """Whether ``pardash launch``'s supervisor runs this rank (and notes how it ended)."""
    from pardash.telemetry.env import SUPERVISOR_VAR

    return bool(os.environ.get(SUPERVISOR_VAR))


def _exit_step(reporter, instrument, code: int) -> int | None:
    """The step the script ended in: its last one when it finished or failed between steps
    (after training, say), the one after when it failed inside a step, None when it failed
    before its first (an argument error)."""
    last = reporter.last_step
    if code and instrument is not None and instrument.in_step():
        return last + 1
    return last if last or not code else None


def _gpu_index() -> int | None:
    """This rank's GPU (LOCAL_RANK) for the system sampler, when there are GPUs. Counted with
    NVML (torch.cuda.device_count), which unlike is_available() does not initialise CUDA, so
    a script that forks workers still can."""
    try:
        import torch

        count = torch.cuda.device_count()
    except Exception:
        return None
    if count <= 0:
        return None
    return int(os.environ.get("LOCAL_RANK", "0") or 0) % count


if __name__ == "__main__":
    sys.exit(main())
