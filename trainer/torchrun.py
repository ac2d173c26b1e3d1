"""torchrun, as ``pardash launch`` runs it: ``python -m torch.distributed.run`` with the same
flags and the same output, but without the interpreter's teardown when it is done.

torchrun's agent imports torch; unloading it module by module once the workers have exited
takes about 0.7 s of a 2-core machine, which every launch would wait for before it could
report its exit. Failures print what torchrun prints, the ChildFailedError summary the
launcher reads, without torchrun's own frames above it, and exit 1 as torchrun does; a stop
signal exits 128 + its number.

A failure every rank explained in one line of its own (no checkpoint to resume can be read, the
checkpoint holds another model: an error file with a message and no traceback) ends in that
line: torchrun's lines about it (its "failed (exitcode: 1)", the summary with its error files)
go to ``failures.log`` in torchrun's --log-dir (``runs/<id>/torchrun/``), not to the terminal,
where some 30 lines of them followed the one that said what was wrong.

A --master-port that another program took after the launch found it free (torchrun's rendezvous
store cannot listen on it: EADDRINUSE) ends in no line here: its traceback (38 lines) goes to
``failures.log`` and the port to ``master_port_busy`` in the --log-dir, for the launch's last
line to say it as its check before the start does.
"""

from __future__ import annotations

import logging
import os
import re
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
        if _port_taken(e):
            pass  # (said by the launch's last line: see _port_taken)
        elif hasattr(e, "format_msg") and _quietly(e.failures):
            _keep(traceback.format_exception_only(e))
        elif hasattr(e, "format_msg"):
            # ChildFailedError: its summary of the failed workers, which the launcher reads,
            # without the 13 lines of torchrun's own frames above it (where torchrun raised it,
            # not where the job failed: the rank's traceback is above, in its output).
            sys.stderr.write("".join(traceback.format_exception_only(e)))
        else:
            traceback.print_exc()
        return 1


MASTER_PORT_BUSY_FILE = "master_port_busy"
"""Written in torchrun's --log-dir when its rendezvous store could not listen on the master port
(another program holds it): the port, for the launch's last line."""
_LISTEN_FAILED = re.compile(r"failed to (?:listen|bind)\b.*?(?:EADDRINUSE|address already in use)", re.IGNORECASE | re.DOTALL)
_PORT_SAID = re.compile(r"\bport: (\d+)|:(\d+) \(errno: 98\b")


def _port_taken(exc: BaseException, argv: list[str] | None = None) -> bool:
    """Whether torchrun (its agent, not a rank) failed as its rendezvous store could not listen
    on the master port, taken by another program (``DistNetworkError: The server socket has
    failed to listen on any local network address. port: 47811, ... EADDRINUSE``): then its
    traceback is kept in ``failures.log`` and the port in ``master_port_busy`` in the --log-dir,
    and True; False otherwise (or where there is no --log-dir to keep them in: torchrun's
    traceback is printed as ever)."""
    text = str(exc)
    if "DistNetworkError" not in {c.__name__ for c in type(exc).__mro__} or not _LISTEN_FAILED.search(text):
        return False
    folder = _log_dir(argv)
    said = _PORT_SAID.search(text)
    port = said.group(1) or said.group(2) if said else _flag_value(argv if argv is not None else sys.argv, "--master-port")
    if folder is None or not (port or "").isdigit():
        return False
    try:
        with open(os.path.join(folder, MASTER_PORT_BUSY_FILE), "w") as fh:
            fh.write(f"{port}\n")
    except OSError:
        return False
    _keep(traceback.format_exception(exc))
    return True


def _flag_value(argv: list[str], flag: str) -> str | None:
    """The value of torchrun's ``flag`` (``--master-port``, or its ``--master_port`` spelling) in
    ``argv``, before the rank command; None where it is not given."""
    names = (flag, flag.replace("-", "_").replace("__", "--"))
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg in names and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(tuple(f"{n}=" for n in names)):
            return arg.split("=", 1)[1]
    return None


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
        # torchrun's lines of a failure are logged as it is seen, here: held until it is known
        # whether every rank explained it in one line (then they are kept apart, not shown).
        held: list[logging.LogRecord] = []
        _HOLD.records = held
        failures: dict = {}
        try:
            result = poll(self)
            failures = getattr(result, "failures", None) or {}
        finally:
            _HOLD.records = None
            _HOLD.quiet = bool(failures) and _quietly(failures)
            if _HOLD.quiet:
                _keep([_HOLD.format(r) + "\n" for r in held])
            else:  # (a poll that raised too: what it logged is said)
                for record in held:
                    logging.getLogger(record.name).handle(record)
        for line in other_failures(failures):
            if _HOLD.quiet:
                _keep([line + "\n"])
            else:
                print(line, file=sys.stderr, flush=True)
        return result

    _poll._pardash = True  # type: ignore[attr-defined]
    SubprocessContext._poll = _poll
    logging.getLogger(SubprocessContext.__module__).addFilter(_HOLD)
    # (its "no error file defined for parent" line, logged after the last poll, as it gives up)
    logging.getLogger("torch.distributed.elastic.multiprocessing.errors.error_handler").addFilter(_HOLD)


class _Hold(logging.Filter):
    """Holds torchrun's log records while ``records`` is a list (a poll that may see a failure),
    and keeps them out of the terminal once ``quiet`` (the last failure seen was explained in
    one line by every rank: :func:`_quietly`)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] | None = None
        self.quiet = False
        self._formatter = logging.Formatter("%(levelname)s %(asctime)s %(name)s: %(message)s")

    def filter(self, record: logging.LogRecord) -> bool:
        if self.records is not None:
            self.records.append(record)
            return False
        if self.quiet:
            _keep([self.format(record) + "\n"])
            return False
        return True

    def format(self, record: logging.LogRecord) -> str:
        return self._formatter.format(record)


_HOLD = _Hold()


def said_in_one_line(failure) -> bool:
    """Whether a failed worker (torchrun's ProcessFailure) explained its failure in one line of
    its own: an exit with an error file that holds a message and no traceback (the bundled
    trainer's for an error that is the user's files or flags, not its code)."""
    data = getattr(failure, "error_file_data", None)
    message = data.get("message") if isinstance(data, dict) else None
    if getattr(failure, "exitcode", 0) <= 0 or not isinstance(message, dict) or not message.get("message"):
        return False
    extra = message.get("extraInfo")
    return not (isinstance(extra, dict) and extra.get("py_callstack"))


def _quietly(failures: dict) -> bool:
    """Whether torchrun's lines of ``failures`` stay out of the terminal: every failed worker
    explained itself in one line (:func:`said_in_one_line`), or was stopped by torchrun after
    one did (SIGTERM), and there is a --log-dir to keep them in."""
    said = [f for f in failures.values() if said_in_one_line(f)]
    stopped = [f for f in failures.values() if getattr(f, "exitcode", 0) == -15]
    return bool(said) and len(said) + len(stopped) == len(failures) and _log_dir() is not None


def _log_dir(argv: list[str] | None = None) -> str | None:
    """torchrun's --log-dir in ``argv`` (the launcher always gives one), or None."""
    return _flag_value(sys.argv if argv is None else argv, "--log-dir")


def _keep(lines: list[str]) -> None:
    """Append ``lines`` to ``failures.log`` in torchrun's --log-dir; to stderr when it cannot
    be written (never lost)."""
    try:
        with open(os.path.join(_log_dir() or ".", "failures.log"), "a") as fh:
            fh.writelines(lines)
    except OSError:
        sys.stderr.writelines(lines)
        sys.stderr.flush()


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


def attempt_dirs(log_dir: str) -> list[tuple[int, str]]:
    """torchrun's attempts of the job, as its --log-dir holds them
    (``<log dir>/<rdzv id>/attempt_N``): (N, folder) each, in no order; [] where none can be read."""
    found: list[tuple[int, str]] = []
    try:
        for run in os.scandir(log_dir):
            if run.is_dir():
                found += [(int(a.name[8:]), a.path) for a in os.scandir(run.path) if a.name.startswith("attempt_") and a.name[8:].isdigit()]
    except OSError:
        return []
    return found


EXIT_CODE_FILE = "exit_code"
"""Written in torchrun's --log-dir (``runs/<id>/torchrun/``) as it ends: its exit code, for a
launch whose supervisor (torchrun's parent, which alone can wait for it) was killed."""


def _keep_exit_code(code: int) -> None:
    folder = _log_dir()
    if folder is None:
        return
    try:
        tmp = os.path.join(folder, f".{EXIT_CODE_FILE}.{os.getpid()}")
        with open(tmp, "w") as fh:
            fh.write(f"{code}\n")
        os.replace(tmp, os.path.join(folder, EXIT_CODE_FILE))
    except OSError:
        pass  # (a folder gone or full: the launch says the outcome is not known)


if __name__ == "__main__":
    code = main()
    _keep_exit_code(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)
