"""A rank stopped by SIGTERM publishes what it still holds before it goes.

torchrun stops its workers with SIGTERM (a Ctrl-C at ``pardash launch``, a viewer's Stop, a
scheduler's preemption, a peer's failure), and Python's default for SIGTERM ends the process at
once: no ``finally``, no ``atexit``. A rank then lost what it held back for good reasons: the
step of a script that calls ``pardash.telemetry.log`` after its optimizer step (held until the
next begins, whose values are that step's), a GPU step (held until the next ends), the reporter's
last burst. The log ended a step short of what the heartbeat had said.

:func:`at_stop` registers what to run at SIGTERM. The handler runs them (last registered first,
as atexit does) and then ends the process by the same signal, with SIG_DFL, so torchrun, the
supervisor and the shell see what they saw before: killed by SIGTERM. A Python handler runs only
between bytecodes of the main thread, so a rank stuck in a collective (in C, for minutes) would
no longer end at SIGTERM; a watchdog thread, woken through ``signal.set_wakeup_fd`` as the
signal arrives, ends it by SIGTERM when the handler has not begun within ``BEGIN_S`` (or not
finished within ``FLUSH_S``): what the heartbeat thread already sent is all such a rank keeps,
as before. The kernel gives the signal to any one thread that does not block it: the watchdog
blocks it, and where another thread took it (the main thread, waiting in a system call, never
told), the watchdog sends it to the main thread itself after ``POKE_S``. A second SIGTERM while
the calls run ends the process at once (unless the main thread is in C then: ``FLUSH_S`` does).

To the script the handler is not there: ``signal.getsignal(SIGTERM)`` says SIG_DFL, and so does
``signal.signal`` of the handler it replaces. A framework that handles SIGTERM itself and chains
the handler it found (PyTorch Lightning calls any callable one after its own, which only notes
the signal so that training stops at the end of the step) called this one, which ended the
rank on the spot; told SIG_DFL, it chains nothing, as without pardash. Left alone: a SIGTERM
handler set before (the script's, or SIG_IGN: nohup-like), and one the script sets after (its
own wins; the watchdog sees it is not ours and never acts). A process forked from the rank (a
DataLoader worker) gets SIGTERM's default back and no wakeup descriptor (it would write to the
rank's pipe and have the watchdog end the rank).

:func:`received` says whether a stop came even where the script's own handler took it (its
handler set after this one: under autorun, every one): PyTorch Lightning's notes the SIGTERM and
raises ``SIGTERMException``, a ``SystemExit``, at the end of the step; a preemption handler calls
``sys.exit(0)`` after its checkpoint; Lightning turns a SIGINT's KeyboardInterrupt into
``sys.exit(1)``. autorun took that exit for the script's own: a rank stopped after 448 steps read
"finished 448", exit code 0. Python writes every signal it handles to the wakeup descriptor, the
watchdog's pipe, before any handler runs: the watchdog notes the first SIGTERM or SIGINT there.

Not covered: a main thread stuck in C *holding the GIL* (a C extension's deadlock) keeps the
watchdog from running too, so such a rank ends at the supervisor's SIGKILL, 10 s later, where
SIGTERM ended it before; and an asyncio loop that sets its own wakeup descriptor after this one
(a signal handler added to it) leaves a rank stuck in C to that SIGKILL as well. Where another
wakeup descriptor is set already, nothing is installed.
"""

from __future__ import annotations

import _signal as _csignal
import os
import signal
import sys
import threading
from typing import Callable

BEGIN_S = 3.0
"""How long the watchdog gives the main thread to begin the handler (it is in C otherwise: a
collective, a device wait, a long kernel on CPU) before it ends the process itself: long
enough for a GPU step's sync to come back, well inside the 10 s the supervisor gives."""
FLUSH_S = 5.0
"""How long the handler may take to publish and flush (the reporter lingers at most 1.5 s)."""
POKE_S = 0.05
"""How long the watchdog waits for the main thread to begin the handler before it sends the
signal to that thread itself (see _watch)."""

SYNC_S = 1.0
"""How long :func:`received` waits for the watchdog to have read what the pipe held (it takes
microseconds: it waits for nothing else while the script's own handler has SIGTERM)."""

_SIGCHLD = int(getattr(signal, "SIGCHLD", 0))
_STOPS = (int(signal.SIGTERM), int(signal.SIGINT))
_SYNC = 0
"""The byte :func:`received` writes to the watchdog's pipe (no signal's number) to learn that
the watchdog has read every signal written before it."""
_getsignal = signal.getsignal
_signal = signal.signal
"""The signal module's own (see _hide)."""
_calls: list[Callable[[], None]] = []
_pid = 0
"""The process the handler was installed in (0: none)."""
_wakeup = -1
"""The write end of the watchdog's pipe, set as Python's wakeup descriptor (-1: none)."""
_began = threading.Event()
_done = threading.Event()
_fork_hook = False
_poked = False
"""The watchdog has sent the main thread a SIGTERM of its own (see _watch), not yet seen."""
_stop = 0
"""The latest stop signal (SIGTERM, SIGINT) the watchdog saw this process receive (0: none)."""
_count: Callable[[], int] | None = None
"""The steps the process has done (see :func:`count_steps`), read as each stop comes."""
_stop_count: int | None = None
"""The steps done as ``_stop`` came (None: not counted)."""
STOP_STEPS = 2
"""Steps done since a stop after which an exit is not its: Lightning's ends at the end of the
step it came in, a preemption handler's at once; a step published late counts one more. A
Ctrl-C the script took and went on from, 47 steps before its sys.exit("validation loss too
high"), read as that stop: no error, no error file."""
_synced = threading.Event()
_watchdog: threading.Thread | None = None


def at_stop(call: Callable[[], None]) -> bool:
    """Run ``call`` when SIGTERM stops this process (before it ends by it). Returns whether
    the handler is in place: False off the main thread, on Windows, where SIGTERM already had a
    handler (the script's own, or ignored), which is left as it was, or where another wakeup
    descriptor is set (no watchdog)."""
    if sys.platform == "win32":
        return False
    if _pid != os.getpid() and not _install():
        return False
    _calls.append(call)
    return True


def count_steps(count: Callable[[], int]) -> None:
    """``count()`` says the steps done: read as each stop comes, so that :func:`received`
    tells a stop the script went on from (STOP_STEPS)."""
    global _count
    _count = count


def _counted() -> int | None:
    try:
        return int(_count()) if _count is not None else None
    except Exception:  # (whatever the count's owner is doing: not counted)
        return None


def received() -> int:
    """The stop signal (SIGTERM or SIGINT; the latest) this process has received since the
    handler was installed, whoever's handler ran it, unless the script went on for more than
    STOP_STEPS steps after it (it took it and carried on: its exit is not that stop's); 0 if
    none, or where no handler was installed (nothing watched). Called as the script exits: the
    watchdog reads the pipe on its own thread, a moment after the signal, so it is asked to
    read up to a byte written now (the pipe keeps their order) and waited for."""
    if _pid != os.getpid():
        return 0
    if not _stop and _watchdog is not None and _watchdog.is_alive():
        _synced.clear()
        try:
            os.write(_wakeup, bytes([_SYNC]))
        except OSError:  # (full: a storm of signals unread; what was seen is all it knows)
            pass
        else:
            _synced.wait(SYNC_S)
    stop, at, now = _stop, _stop_count, _counted()
    if stop and at is not None and now is not None and now - at > STOP_STEPS:
        return 0
    return stop


def _install() -> bool:
    global _pid, _fork_hook, _poked, _stop, _stop_count
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        if _getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return False
        _signal(signal.SIGTERM, _on_term)
    except (ValueError, OSError):  # not the main interpreter
        return False
    if not _start_watchdog():
        # Without it, a rank stuck in C would no longer end at SIGTERM: SIG_DFL, as it was.
        _signal(signal.SIGTERM, signal.SIG_DFL)
        return False
    _pid = os.getpid()
    _poked = False
    _stop, _stop_count = 0, None
    _calls.clear()
    _began.clear()
    _done.clear()
    if not _fork_hook:
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_forked)
        _fork_hook = True
    _hide()
    return True


def _hide() -> None:
    """``signal.getsignal`` and ``signal.signal`` say SIG_DFL where the handler is this one."""
    if signal.getsignal is not _getsignal:
        return  # (done, or another's wrapper there: left as it is)

    def getsignal(signalnum):
        handler = _getsignal(signalnum)
        return signal.SIG_DFL if handler in (_on_term, _again) else handler

    def set_handler(signalnum, handler):
        previous = _signal(signalnum, handler)
        return signal.SIG_DFL if previous in (_on_term, _again) else previous

    getsignal.__doc__, set_handler.__doc__ = _getsignal.__doc__, _signal.__doc__
    getsignal.__name__, set_handler.__name__ = "getsignal", "signal"
    signal.getsignal, signal.signal = getsignal, set_handler


def _on_term(signum: int, frame: object) -> None:
    if os.getpid() != _pid:  # a fork the hook missed: not the rank
        _end_by(signum)
    # A worker's death (SIGCHLD) comes with the stop: its handler quieted first, through the
    # C functions (signal.signal's Python code let it in on its way, 1 stop in 60 on a loaded
    # machine), then the others'.
    if callable(_csignal.getsignal(_SIGCHLD)):
        _csignal.signal(_SIGCHLD, 0)  # SIG_DFL
    _quiet_others()
    _began.set()
    _signal(signum, _again)
    calls = _calls[::-1]
    _calls.clear()
    for call in calls:
        try:
            call()
        except BaseException:  # telemetry never keeps a process from its stop
            pass
    _done.set()
    _end_by(signum)


def _again(signum: int, frame: object) -> None:
    """SIGTERM while the calls run: the watchdog's poke (the calls go on), or a second stop,
    which ends the process at once."""
    global _poked
    if _poked:
        _poked = False
        return
    _end_by(signum)


def _quiet_others() -> None:
    """The process ends by SIGTERM once the calls are done: no other Python handler may run
    meanwhile. torchrun signals the rank's process group, its DataLoader workers with it, and
    torch's SIGCHLD handler raised "DataLoader worker is killed" inside the flush, cutting it
    short (its held step lost, 2 stops in 12); a SIGINT's KeyboardInterrupt would end the
    process through the script's error path instead of by SIGTERM."""
    for sig in signal.valid_signals():
        if sig == signal.SIGTERM:
            continue
        try:
            if callable(_getsignal(sig)):
                _signal(sig, signal.SIG_DFL if sig == signal.SIGCHLD else signal.SIG_IGN)
        except (ValueError, OSError, TypeError):  # (SIGKILL, SIGSTOP, and what Python cannot set)
            pass


def _end_by(signum: int) -> None:
    try:
        _signal(signum, signal.SIG_DFL)
    except ValueError:  # (off the main thread: see _end_from_thread)
        pass
    os.kill(os.getpid(), signum)


def _start_watchdog() -> bool:
    global _wakeup, _watchdog
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:
        os.close(r)
        os.close(w)
        return False
    if previous != -1:  # another's (an asyncio loop in the main thread): theirs kept
        signal.set_wakeup_fd(previous)
        os.close(r)
        os.close(w)
        return False
    _wakeup = w
    _watchdog = threading.Thread(target=_watch, args=(r,), name="pardash-sigterm", daemon=True)
    _watchdog.start()
    return True


def _watch(r: int) -> None:
    global _poked, _stop, _stop_count
    # The kernel gives a process's SIGTERM to one thread that does not block it; taken here,
    # the main thread (in a sleep, a lock's wait, a read) went on waiting and the handler never
    # began: the rank ended unflushed at BEGIN_S (1 stop in 8 on a loaded machine).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    watched = False
    while True:
        try:
            woken = os.read(r, 64)
        except OSError:
            return
        if not woken:
            return
        stops = [b for b in woken if b in _STOPS]
        if stops:  # (whoever's handler runs it: see received)
            _stop, _stop_count = stops[-1], _counted()
        if _SYNC in woken:
            _synced.set()
        if signal.SIGTERM not in woken or watched:
            continue  # another signal Python handles (SIGINT, SIGCHLD, ...), or this stop's again
        if not _began.is_set() and _getsignal(signal.SIGTERM) is not _on_term:
            continue  # the script's own handler has it
        watched = True
        if not _began.wait(POKE_S):
            # Another thread of the rank's took it (gloo's, a DataLoader's pin thread): the
            # main thread, waiting in a system call, is told again, to itself; stuck in C, it
            # takes it no sooner, and BEGIN_S ends it.
            _poked = True
            try:
                signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
            except (OSError, ValueError):
                pass
        if not _began.wait(BEGIN_S) or not _done.wait(FLUSH_S):
            _end_from_thread()


def _end_from_thread() -> None:
    """End the process by SIGTERM from this thread: Python's ``signal.signal`` is the main
    thread's alone (stuck in C here), so SIG_DFL is set through the C library's."""
    import ctypes

    libc = ctypes.CDLL(None)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
    libc.signal(signal.SIGTERM, None)  # NULL: SIG_DFL
    os.kill(os.getpid(), signal.SIGTERM)


_forking = threading.local()
"""Whether this thread blocked SIGTERM for its fork (``_before_fork``)."""


def _before_fork() -> None:
    """SIGTERM waits while the rank forks: a child signalled before its at-fork hook ran had the
    rank's handler and wakeup pipe still, and woke the rank's watchdog, which ended the rank. The
    child is born with it blocked and lets it in once they are its own (``_forked``); in the rank,
    one that comes meanwhile goes to another of its threads."""
    blocked = _pid == os.getpid() and signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    _forking.blocked = blocked


def _after_fork() -> None:
    if getattr(_forking, "blocked", False):
        _forking.blocked = False
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _forked() -> None:
    """In a child forked from the rank: SIGTERM's default back, the rank's wakeup pipe let go,
    then SIGTERM let in."""
    if _pid == 0:
        return
    try:
        if _getsignal(signal.SIGTERM) in (_on_term, _again):
            _signal(signal.SIGTERM, signal.SIG_DFL)
        previous = signal.set_wakeup_fd(-1)
        if previous not in (-1, _wakeup):  # (another's since: theirs kept)
            signal.set_wakeup_fd(previous)
    except (ValueError, OSError):
        pass
    _after_fork()
