"""Why a job failed, as the launcher's last line, the report and the TUI tell it: the job's
attempts (torchrun's restarts), the rank whose exit caused the others' (the root cause), where
its error was raised, and the failures a restart recovered from."""

from __future__ import annotations

import os
import re
import signal
from bisect import bisect_right
from itertools import accumulate

from . import schema
from .analysis import BETWEEN_STEPS_WORDS, JOINED, collectives_words, different_collectives, hang_causes, stall_phase, whole_hang
from .state import BETWEEN_STEPS, STOPPED_CODES, between_steps, run_again, torchrun_restart
from .summary import is_pipeline, is_sharded, ranks_named, total_steps


# Errors a rank raises because another rank died (its peer's socket closed under it).
PEER_FAILURE = re.compile(
    r"Connection reset by peer|Connection closed by peer|Broken pipe|remote worker|"
    r"NCCL communicator was aborted|ProcessGroupNCCL.*(?:Watchdog|timeout)|Socket Timeout|"
    r"DistNetworkError|DistBackendError|Connection refused",
    re.IGNORECASE,
)


WAIT_FAILURE = re.compile(r"timed?[ -]?out", re.IGNORECASE)
"""Errors a rank raises when a collective waited too long for a peer (gloo's "Timed out
waiting 15000ms for recv", NCCL's watchdog timeout): a peer's doing when the hub saw that peer
stalled outside any collective (see :func:`failure_summary`)."""


COLLECTIVE_TIMEOUT = re.compile(r"Timed out waiting \d+ ?ms for (?:recv|send|recv operation|send operation)|"
                                r"Watchdog caught collective operation timeout|collective operation timeout", re.IGNORECASE)
"""A collective's own timeout (gloo's "Timed out waiting 20000ms for recv operation to complete",
NCCL's watchdog), not any error that says "timed out" (a DataLoader's, an S3 read's, a file
lock's: review 280): what :func:`_not_waiting` takes as a wait for a peer."""


def attempts(st) -> list[list[schema.Event]]:
    """The run's events, split where torchrun restarted the job (``--max-restarts``) or the job
    was run again under the run's id (a resume by hand, to a hub run alone): the hub notes each
    rank's hello of a new attempt (``restart``; a job run again, see state.run_again), and the
    first such note after an exit starts the next attempt, that note its first event. A failure
    that a restart or a new job recovered from is not the cause of how the run ended."""
    out: list[list[schema.Event]] = [[]]
    exited = False
    for e in st.lifecycle:
        if not isinstance(e, schema.Event):
            continue
        if exited and (torchrun_restart(e) or run_again(e)):
            out.append([])
            exited = False
        exited = exited or (e.name == "exit" and e.rank >= 0)
        out[-1].append(e)
    return out




def stopped_how(rank: int, message: str | None) -> str | None:
    """Who stopped a rank, from the launcher's note of its exit: 'by you' (Ctrl-C), 'by
    pardash after torchrun was killed', 'by torchrun', 'by SIGTERM' (an older log's "rank 3 was
    stopped by torchrun" too); of a job of several nodes, where ('by Ctrl-C on node 1 (HOST)',
    'by the viewer on node 0 (HOST)': supervisor.Supervisor._stop_note); None where the note says
    no such thing (a rank's own exit)."""
    text = (message or "").removeprefix(f"rank {rank} ").removeprefix("was ")
    return text.removeprefix("stopped ") if text.startswith("stopped by ") else None


def stop_text(rank: int, code: int | None, message: str | None = None, step: int | None = None) -> str:
    """How a rank's stop reads wherever it is said (the headless progress, the TUI's alerts and
    event log, the TensorBoard export, the report): 'stopped by you at step 5 (SIGTERM)', from
    its exit's code (one of :data:`STOPPED_CODES`), the launcher's note of it (``message``: who
    stopped it, :func:`stopped_how`; 'stopped (SIGTERM)' where no note says) and the step it
    ended at, if known. The signal is named once: not again where the note names it ('stopped
    by SIGTERM on node 1 (h)' read '... (SIGTERM)' twice); a code that is no signal (130, 143)
    is said as the code."""
    how = stopped_how(rank, message)
    sig = signal_name(code)
    text = "stopped" + (f" {how}" if how else "") + (f" at step {step}" if step is not None else "")
    if sig and how and re.search(rf"\b{sig}\b", how):
        return text
    return text + (f" ({sig})" if sig else f" (exit code {code})")


def is_stop(e: schema.Message) -> bool:
    """Whether an exit event is a rank's stop, not a failure: its code one of
    :data:`STOPPED_CODES`, the rule by which a rank's status reads "stopped" (the report's and
    Prometheus's, the headless progress's counts, the TUI's header and grid), so its words say
    the same."""
    return isinstance(e, schema.Event) and e.name == "exit" and e.rank >= 0 and e.code in STOPPED_CODES


def root_cause(st, events: list[schema.Event] | None = None) -> tuple[schema.Event, list[int], list[int]] | None:
    """(the exit that caused a failure, ranks that failed because of it, ranks stopped), among
    ``events`` (default: the last attempt's, see :func:`attempts`).

    A rank killed by a signal (SIGKILL from the OOM killer or a user, SIGSEGV...) is always a
    cause; next a rank that failed on its own error; ranks whose error is a peer failure
    (the collective's socket closed under them) are victims, SIGTERM (-15) is how torchrun
    stops the rest. A job in which every rank was only stopped (by the user, or a scheduler
    that sent SIGTERM) has no cause among its ranks: None.
    """
    if events is None:
        events = attempts(st)[-1]
    # A rank that said it finished (exit 0) makes a launcher's note that it was stopped, taken
    # before its own word, wrong (as RunState.apply has it); judged within the attempt.
    finished = {e.rank for e in events if e.name == "exit" and e.seq >= 0 and e.code == 0}
    exits = [
        e for e in events
        if e.name == "exit" and e.rank >= 0 and e.code and not (e.seq < 0 and e.rank in finished)
    ]  # fmt: skip
    if not exits:
        return None
    errors: dict[int, str] = {}
    for e in events:
        if e.name == "error" and e.rank >= 0:
            errors.setdefault(e.rank, (e.message or "") + "\n" + (e.traceback or ""))

    def grade(e: schema.Event) -> int:
        if e.code in STOPPED_CODES or _in_its_stop(st, e):
            return 3
        if e.code < 0:
            return 0
        if e.code > 0 and not PEER_FAILURE.search(errors.get(e.rank, "")):
            return 1
        if e.code > 0:
            return 2
        return 3

    first = min(exits, key=lambda e: (grade(e), e.hseq))
    if grade(first) == 3:
        return None
    victims = sorted({e.rank for e in exits if e.rank != first.rank and grade(e) == 2})
    stopped = sorted({e.rank for e in exits if e.rank != first.rank and e.code in STOPPED_CODES} - set(victims))
    return first, victims, stopped


def _in_its_stop(st, e: schema.Event) -> bool:
    """Whether a rank's exit came after the launcher began stopping it (its ``stopping`` note):
    a failure of the stop's making (its collective broken as torchrun stopped a peer first),
    no cause of the job's end (see RankState.ended_in_stop)."""
    r = st.ranks.get(e.rank)
    note = r.stopping if r is not None else None
    if note is None or not e.code or e.code < 0 or r.own_error:
        return False  # (a signal death, or an error of its own: a failure still, review 280)
    return note.hseq < e.hseq or (bool(note.t) and bool(e.t) and note.t <= e.t)


def _before(e: schema.Event, first: schema.Event) -> bool:
    """Whether ``e`` came before ``first``, as the hub took them, or happened before it (its
    time earlier: a launcher's note of a stop, said late, carries the stop's time)."""
    return e.hseq < first.hseq or (bool(e.t) and bool(first.t) and e.t < first.t)


def failure_summary(st, events: list[schema.Event] | None = None, hang: list | None = None) -> dict | None:
    """The root cause among ``events`` (default: the last attempt's; or an earlier one's list
    from :func:`attempts`) as the report and the launcher's last line tell it: rank, code,
    signal, the step it died in, its error's first line, victims, stopped, and ``line``, one
    sentence of all that; ``during``, where it died between steps (a phase of
    :data:`BETWEEN_STEPS`), and ``alike``, where ranks all failed alike (``rank`` then the
    first of them), only when so."""
    last = events is None
    if events is None:
        events = attempts(st)[-1]
    if last:
        hang = whole_hang(st)
    found = root_cause(st, events)
    if found is None:
        return None
    first, victims, stopped = found
    alike = _failed_alike(events, first, victims)
    if alike:
        # Every rank failed alike (a resume none of whose checkpoints could be read): no rank's
        # failure caused the others'. Named all, and the first of them by rank, not the one
        # whose exit reached the hub first (rank 1 one launch, rank 0 the next).
        first = min((e for e in events if e.name == "exit" and e.rank == alike[0] and e.code == first.code),
                    key=lambda e: (e.seq < 0, e.hseq))  # (its own, which says its step)  # fmt: skip
    error, step, where, message, tb = None, first.step, None, "", None  # the step it died in, when it said (exit events carry it)
    # One the launcher noted for a rank (seq -1: torchrun saw it die) says nothing of where:
    # guessed from what the rank said. A rank's own exit without a step died before its first
    # (or is from a log older than exit steps: then its error's step tells).
    guess = first.seq < 0
    for e in events:
        if e.name == "error" and e.rank == first.rank:
            error = error_line(e.message, e.traceback)
            message = e.message or ""
            where = raised_at(e.traceback)
            tb = e.traceback
            if step is None and e.step is not None and (guess or e.step > 0):
                step = e.step + 1  # an error event carries the last step completed
            break
    r = st.ranks.get(first.rank)
    busy = between_steps(r) if last and r is not None else None
    if busy is not None and guess:
        # Its last word was that it was saving, evaluating or loading a checkpoint, after its
        # step: it died there, between steps, not in the next ("at step 41" of a rank killed
        # in the save after step 40, a step that never began).
        step = busy[0]
    if step is None and last and r is not None and r.step is not None:
        step = r.step.step + 1  # the one after its last step (known for the last attempt only)
    unsent = None
    if (guess and last and busy is None and first.code < 0 and r is not None and _in_lockstep(st)
            and _died_stepping(first, r)):  # fmt: skip
        # Killed (SIGKILL: no word of its own), its last steps died with it: a rank sends its
        # steps in batches, up to 50 ms of them held. Its peers, in lockstep with it (each
        # step's collectives need every rank), went as far as it did: "at step 111" of a rank
        # whose peers had done 115.
        own = r.step.step if r.step is not None else 0
        peers = max((x.step.step for q, x in st.ranks.items() if q != first.rank and x.step is not None), default=0)
        step = max(step or 0, peers)
        if peers > own + 1:  # (one ahead: it may have died in that step, after its collective)
            unsent = {"own": own, "peers": peers}
    unrecorded = None
    left: list[tuple[int, int | None]] = []
    stopped_first: list[dict] = []
    if first.code > 0 and error is not None and PEER_FAILURE.search(error):
        # Even the first failure is a peer's failure. A rank that ended well (exit 0) before
        # the step the failing rank died in left their collectives without a peer (an early
        # stop decided on one rank; not a rank that finished the last step with the others
        # while a peer failed in teardown). Else the rank that failed first left no exit
        # (torchrun, restarting, names only the first worker it saw fail): ranks with no word
        # in this attempt are where to look. Before it as it happened, not only as the hub took
        # them: the exit of the rank that left could reach the hub after the failure it caused
        # (1 of 3 runs under the TUI read "the rank that failed first left no exit record", its
        # exit in the log the line after; review 313).
        left = _left_before(events, first, step)
        said = {e.rank for e in events if e.name == "exit"}
        unrecorded = sorted(q for q in st.ranks if q not in said)
        # A rank stopped before it (one node's launch stopped, by you or a scheduler): the stop
        # broke the others' collectives; no rank failed of itself. Before it in time: a node's
        # launcher notes its ranks' stop, at the stop's time, only once its torchrun has ended,
        # after the failure it caused on another node has come.
        stops = {e.rank: e for e in events if is_stop(e) and _before(e, first) and e.rank != first.rank}
        if stops and not left:
            stopped_first = [{"rank": r, "how": (e.message or "") if (e.message or "").startswith("stopped") else "stopped"}
                             for r, e in sorted(stops.items())]  # fmt: skip
            unrecorded = None
    elif first.code > 0 and error is not None and COLLECTIVE_TIMEOUT.search(error):
        # A collective that timed out (gloo's "Timed out waiting 20000ms for recv") waiting for
        # a rank that had left the job before: the cause, as of a peer's closed connection. The
        # grid and the header said "left early" of it while this line named the rank that
        # timed out (review 324).
        left = _left_before(events, first, step)
    waited: list[dict] = []
    if hang and first.code > 0 and not left and (PEER_FAILURE.search(message) or WAIT_FAILURE.search(message)):
        # The first failure is a wait (a collective's timeout) or a peer's failure, in a run the
        # hub saw hang (``hang``: the last attempt's now, an earlier one's as torchrun restarted
        # it): the rank the hang waited for (stalled outside any collective, or behind the
        # others) is the cause, though the waiting rank's error ended the job.
        causes = hang_causes(hang, sharded=is_sharded(st.strategy)) - {first.rank}
        if not causes and COLLECTIVE_TIMEOUT.search(message) and not PEER_FAILURE.search(message):
            causes = _not_waiting(hang, events, first)
        waited = [{"rank": r, "kind": kind, "step": at, "phase": phase, **_where(st, r, phase)} for r, kind, at, phase in hang if r in causes]
        if waited:
            unrecorded = None
            victims = [v for v in victims if v not in causes]  # (one that then died of a closed socket: the cause still)
    apart: list[tuple[int, str]] = []
    if last and hang and not waited and not left and first.code > 0 and (PEER_FAILURE.search(message) or WAIT_FAILURE.search(message)):
        # A wait's failure (a collective's timeout) in a hang whose ranks each waited in a
        # collective the others did not call (rank 0 in a final barrier, rank 1 in its next
        # step's all-reduce): that mismatch is the cause, no rank's slowness (review 335).
        apart = different_collectives(st, hang)
    f = {"rank": first.rank, "code": first.code, "signal": signal_name(first.code), "step": step, "error": error,
         "where": where, "victims": victims, "stopped": stopped, "unrecorded": unrecorded,
         "left_early": [{"rank": r, "step": at} for r, at in left], "waited_for": waited,
         "stopped_first": stopped_first, "unsent": unsent}  # fmt: skip
    # (only where they say something: the report's JSON of any other failure keeps its keys)
    if busy is not None:
        f["during"] = busy[1]
    if apart:
        f["collectives"] = [{"rank": r, "waits_in": w} for r, w in apart]
    if tb:
        f["traceback"] = traceback_end(tb)
    if alike:
        f["alike"] = alike
    f["line"] = failure_line(f)
    return f


def _not_waiting(hang: list, events: list[schema.Event], first: schema.Event) -> set[int]:
    """The rank a collective's timeout (``first``'s) waited for, where the phases name none (a
    tensor-parallel model's collectives and a pipeline's sends are in its forward, on every
    rank: "ranks 0-1 stalled in forward"): the one rank of the hang that raised no error of its
    own, stopped or never heard of again, the others each timed out waiting (a rank 1 that
    slept in its forward read "rank 0 exited with code 1 ...: Timed out waiting 20000ms for
    recv operation - the root cause", review 276). None where more than one is so (torchrun
    stopped them before their own timeouts: any of them may be the one)."""
    failed = {e.rank for e in events if e.name == "error" and e.rank >= 0} | {first.rank}
    failed |= {e.rank for e in events if e.name == "exit" and e.rank >= 0 and e.code and not is_stop(e)}
    phases = {r: phase for r, _kind, _at, phase in hang}
    if phases.get(first.rank) in ("data", "checkpoint", "eval", "resume"):
        return set()  # (it timed out in its own work, not in a collective)
    # (one itself waiting in a collective, "sync", is no one the others wait for)
    # (nor one joined under DDP's Join: it waits for the others by design)
    left = {r for r, kind, _at, phase in hang if r not in failed and phase != "sync" and kind != JOINED}
    return left if len(left) == 1 else set()


_CAUGHT = re.compile(r"^[\w.]+: Caught [\w.]+ in (?P<where>.+?)\.?$")


_WORKER_GONE = re.compile(r"DataLoader worker \(pid\(s\) [\d, ]+\) exited unexpectedly")
_WORKER_KILLED = re.compile(r"DataLoader worker \(pid \d+\) is killed by signal: [^\n.]*[^\n. ]")


def error_line(message: str | None, traceback: str | None = None) -> str | None:
    """An error's line for the root cause: its message's first line; for an error torch carried
    over from another process or thread (a DataLoader worker's, a DataParallel replica's:
    "Caught ValueError in DataLoader worker process 0." then the original traceback) the
    original error's (the last line of it not in a frame: not the carets under a frame's code,
    nor a message cut in memory), and where it was caught. A DataLoader worker killed by a
    signal ("exited unexpectedly"): the signal, which the error it was raised from in the
    ``traceback`` says (the OOM killer's SIGKILL, most often)."""
    lines = [line for line in (message or "").strip().splitlines() if line.strip()]
    if not lines:
        return None
    caught = _CAUGHT.match(lines[0])
    if caught is not None and len(lines) > 1 and "Original Traceback" in message:
        said = [line for line in lines[1:] if not line[0].isspace() and not line.startswith(("Original Traceback", "Traceback", "…"))]
        return f"{(said or lines)[-1].strip()} (in {caught['where']})"
    killed = _WORKER_KILLED.findall(lines[0])
    if not killed and traceback and _WORKER_GONE.search(lines[0]) is not None:
        killed = _WORKER_KILLED.findall(traceback)
    if killed:
        kind = lines[0].split(":", 1)[0] if ":" in lines[0] else "RuntimeError"
        hint = " (SIGKILL: the OOM killer?)" if killed[-1].endswith("Killed") else ""
        return f"{kind}: {killed[-1]}{hint}"
    return lines[0]


_SOURCE_AT = re.compile(r"\[[^\]\s]+\.(?:cc|cpp|cu|cuh|h|hpp):\d+\]\s*")
"""A C++ source location a backend's error begins with (gloo's ``[/__w/pytorch/.../pair.cc:553]``)."""
_CALLBACK = re.compile(r"Got the following error when running the callback: (?:\w+Error: )?")
_BOILERPLATE = re.compile(r"\s*Check the logs of the remote worker before reporting an error\. GLHF!.*$")


def short_error(message: str | None, limit: int = 160, traceback: str | None = None) -> str | None:
    """An error's line (:func:`error_line`) for a line of a screen: without the C++ source
    location a backend error begins with, the wrapper of an error raised in a communication
    hook's callback and gloo's sign-off, cut at ``limit`` characters. (A gloo timeout or a peer
    gone filled several lines of the event log with a path and boilerplate; the whole text
    stays in the log and the rank's detail.)"""
    line = error_line(message, traceback)
    if line is None:
        return None
    line = _BOILERPLATE.sub("", _SOURCE_AT.sub("", _CALLBACK.sub("", line))).strip()
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$', re.MULTILINE)


_PACKAGES = re.compile(r"[/\\](?:site|dist)-packages[/\\]")
_STDLIB = re.compile(r"[/\\]lib[/\\]python\d+(?:\.\d+)?[/\\]|^<frozen ")


_WATCHING_TRAINER = ("instrument", "arrivals", "joins", "pipelines", "epochs", "evaluations", "loads", "rounds", "saves", "skips", "hooking",
                     "imported", "marks", "watching", "trained", "autorun")  # fmt: skip
"""pardash.trainer's modules that watch a script (the zero-code instrument, its wrappers of the
script's collectives), not the bundled trainer's."""
_WATCHING = re.compile(r"pardash[/\\](?:telemetry[/\\][^/\\]+|trainer[/\\](?:" + "|".join(_WATCHING_TRAINER) + r")\.py)$")
_TELEMETRY_DIR = os.path.dirname(os.path.abspath(__file__))
_TRAINER_DIR = os.path.join(os.path.dirname(_TELEMETRY_DIR), "trainer")


def _watching(path: str) -> bool:
    """A frame of pardash's code that watches a script: installed (``.../pardash/telemetry/...``)
    or where this copy of it is (an editable install's ``telemetry/``, ``trainer/arrivals.py``)."""
    if _WATCHING.search(path) is not None:
        return True
    folder, name = os.path.split(path)
    return folder == _TELEMETRY_DIR or (folder == _TRAINER_DIR and name[:-3] in _WATCHING_TRAINER and name.endswith(".py"))


def _is_library(path: str) -> bool:
    """A frame of an installed package's or the standard library's code, or of pardash's code
    that watches a script (:func:`_watching`); pardash's bundled trainer is the job's code
    wherever it is installed. A script's error raised in a collective read "raised at:
    .../trainer/arrivals.py:122 in wait" (review 274), the instrument's wrapper of it."""
    if _watching(path):
        return True
    installed = _PACKAGES.split(path)
    if len(installed) > 1:
        return not re.match(r"pardash[/\\]", installed[-1])
    return _STDLIB.search(path) is not None


def raised_at(tb: str | None) -> str | None:
    """Where a traceback's exception was raised, as ``file:line in func``: the innermost frame
    of the job's own code, and the innermost frame in parentheses when that is a library's
    (``train.py:320 in train (in torch/autograd/graph.py:979 in _engine_run_backward)``; an
    error torch raised in a backward named torch's line alone, not the script's that called
    it). The innermost frame when every frame is a library's."""
    frames = list(_FRAME.finditer(tb or ""))
    if not frames:
        return None
    # (pardash's own wrapper of a wait is no library's line: a pipeline stage's receive that
    # failed read "(in trainer/arrivals.py:195 in wait)"; the innermost frame under it, the
    # library's that called the wait, where there is one)
    inner = next((m for m in reversed(frames) if not _watching(m["file"])), frames[-1])
    own = next((m for m in reversed(frames) if not _is_library(m["file"])), None)
    if own is None or own is inner:
        return _frame_text(inner)
    inside = _PACKAGES.split(inner["file"])[-1]  # (torch/..., as it is imported)
    return f"{_frame_text(own)} (in {_frame_text(inner, inside)})"


TRACEBACK_SHOWN = 8
"""Lines of the root cause's traceback the report shows: its end, where the error is, and the
job's own innermost frame above it where that is further up."""
_CARETS = re.compile(r"^\s*[\^~]+\s*$")


def traceback_end(tb: str) -> list[str]:
    """What the report shows of a traceback under "raised at" (it named the line and left the
    traceback to be found in the ranks' output, review 308): its last TRACEBACK_SHOWN lines,
    and the job's own innermost frame first, with "..." between, where it is not among them;
    Python's ``^^^^`` marks and the "Traceback (most recent call last):" head left out."""
    def kept(text: str) -> list[str]:
        return [line for line in text.rstrip("\n").splitlines()
                if line.strip() and not _CARETS.match(line) and not line.startswith("Traceback (most recent call last)") and line.strip() != "…"]  # fmt: skip

    lines = kept(tb)
    end = lines[-TRACEBACK_SHOWN:]
    while len(end) > 1 and not end[0].lstrip().startswith("File ") and any(line.lstrip().startswith("File ") for line in end):
        end = end[1:]  # (from a frame's start: not its source line alone)
    own = kept(own_frame_lines(tb, len(tb)))
    if own and own[0] not in end:
        return [*own, "  ...", *end]
    return end


def own_frame_lines(tb: str, before: int) -> str:
    """The lines of ``tb``'s innermost frame of the job's own code (its ``File ...`` line and
    the source line under it), where that frame starts before offset ``before``; "" where it
    does not or there is none. What a traceback cut to its end (state.TRACEBACK_KEPT) keeps
    ahead of the end: a shape error under DDP and a two-layer model is 2,642 characters, and
    the report's "raised at" read torch's linear.py alone, the script's line cut off (review 308)."""
    frames = list(_FRAME.finditer(tb))
    own = next((m for m in reversed(frames) if not _is_library(m["file"])), None)
    if own is None or own.start() >= before:
        return ""
    head = tb[own.start() : own.end()].lstrip("\n") + "\n"
    src_end = tb.find("\n", own.end() + 1)  # (the source line under it, where there is one)
    if src_end < 0 or tb[own.end() + 1 : src_end].lstrip().startswith("File "):
        return head
    return head + tb[own.end() + 1 : src_end] + "\n"


def _frame_text(m: re.Match, path: str | None = None) -> str:
    return f"{path or m['file']}:{m['line']} in {m['func'].strip()}"


def _failed_alike(events: list[schema.Event], first: schema.Event, victims: list[int]) -> list[int]:
    """The ranks, two or more, that all failed of the same error at the same step with the
    same code, when every rank that failed did (each rank's own, no peer's failure): a resume
    whose checkpoints none could read, a bad flag every rank checks. Empty otherwise, and for
    a collective's timeout, which every rank may say alike of the one rank they waited for (the
    hang's analysis names it: :func:`failure_summary`)."""
    if victims or first.code <= 0:
        return []
    failed = {e.rank for e in events if e.name == "exit" and e.rank >= 0 and e.code and e.code not in STOPPED_CODES}
    if len(failed) < 2 or any(e.code != first.code for e in events if e.name == "exit" and e.rank in failed and e.code):
        return []
    said: dict[int, tuple[str | None, int | None]] = {}
    for e in events:
        if e.name == "error" and e.rank in failed:
            said.setdefault(e.rank, (error_line(e.message), e.step))
    texts = set(said.values())
    if set(said) != failed or len(texts) != 1:
        return []
    text = next(iter(texts))[0]
    if text is None or WAIT_FAILURE.search(text):
        return []
    return sorted(failed)


def _left_before(events, first: schema.Event, step: int | None) -> list[tuple[int, int | None]]:
    """(rank, step) of the ranks that ended well (exit 0) before the step the failing rank
    ``first`` died in (``step``), and before it as it happened: an early stop decided on one
    rank left the others' collectives without a peer (not a rank that finished the last step
    with the others while a peer failed in teardown)."""
    ended = {
        e.rank: e.step for e in events
        if e.name == "exit" and e.rank >= 0 and e.code == 0 and _before(e, first)
        and e.step is not None and step is not None and e.step < step
    }  # fmt: skip
    return sorted(ended.items())


def failure_line(f: dict, *, error: bool = True) -> str:
    """One sentence of a :func:`failure_summary` (``error``: with the error's first line)."""
    who = ranks_named(f["alike"]) if f.get("alike") else f"rank {f['rank']}"
    line = f"{who} exited with code {f['code']}" + (f" ({f['signal']})" if f["signal"] else "")
    line += f" at step {f['step']}" if f["step"] is not None else ""
    line += f" while {BETWEEN_STEPS[f['during']]}" if f.get("during") in BETWEEN_STEPS else ""
    unsent = f.get("unsent")
    if unsent:
        ends = f"its log ends at step {unsent['own']}" if unsent["own"] else "its log has none"
        line += f" (its last steps died with it: {ends}, its peers reached {unsent['peers']})"
    waited = f.get("waited_for") or []
    if waited:
        line = f"{hung_text(waited)} (the likely cause of the hang); {line} waiting for {'it' if len(waited) == 1 else 'them'}"
    apart = [(x["rank"], x["waits_in"]) for x in f.get("collectives") or []]
    if apart:
        line = f"{ranks_named(sorted(r for r, _ in apart))} hung {collectives_words(apart)}; {line}"
    first = f.get("stopped_first") or []
    if first:
        hows = {x["how"] for x in first}
        how = hows.pop() if len(hows) == 1 else "stopped"
        who = ranks_named([x["rank"] for x in first])
        line = f"{who} {'were' if len(first) > 1 else 'was'} {how} first; {line} after it"
    left = f.get("left_early") or []
    if left:
        # The rank that left named first, as the cause (the line led with the failure it
        # caused, "rank 0 exited with code 1 ...; that is a peer's failure: rank 1 ... had left
        # the job", under the report's "rank 1 ... - the root cause"; review 323).
        by_step: dict[int | None, list[int]] = {}
        for x in left:
            by_step.setdefault(x["step"], []).append(x["rank"])
        said = ", ".join(ranks_named(rs) + (f" at step {at}" if at is not None else "") for at, rs in by_step.items())
        line = (f"{said} left the job (exit code 0) while the others trained on (a rank that leaves the loop early breaks "
                f"the others' collectives); {line} after {'them' if len(left) > 1 else 'it'}")  # fmt: skip
    unrecorded = f.get("unrecorded")
    if unrecorded and not left:
        # A peer's failure, and ranks silent to the end: the likely cause is among them, not
        # the rank whose error says only that a peer went (it read "rank 0 exited with code 1
        # at step 10: ...Connection reset by peer; that is a peer's failure ... (no word from
        # rank 1: killed?)", rank 0 named first, as the cause).
        line = (f"the rank that failed first left no exit record (no word from {ranks_named(unrecorded)}: killed?), "
                f"the likely cause; {line} after it")  # fmt: skip
    line += f": {f['error']}" if error and f["error"] else ""
    victims = f["victims"]
    stopped = [r for r in f["stopped"] if not any(x["rank"] == r for x in first)]
    if victims:
        line += f"; {ranks_named(victims)} failed after it"
    if stopped:
        line += f"; {ranks_named(stopped)} {'were' if len(stopped) > 1 else 'was'} stopped"
    if left:
        if unrecorded:
            line += f"; no word from {ranks_named(unrecorded)}: killed?"
    elif unrecorded is not None and not unrecorded:
        line += "; that is a peer's failure, and the rank that failed first left no exit record"
    return line


LOCKSTEP = ("ddp", "fsdp", "dp", "tp")
"""Strategies whose ranks step together (every step's collectives need every rank)."""


STEPPING_S = 2.0
"""A rank killed within this long of its last step logged was stepping when it died (steps held
back to be sent, up to 50 ms of them, die with it; torchrun notes the death within its 0.1 s)."""


def _died_stepping(death: schema.Event, r) -> bool:
    """Whether a rank died while it stepped, not long after its last step (a rank done with its
    share of uneven inputs, waiting in DDP's join while the others train on, is not); of a rank
    with no step logged (all it took held to be sent: a rank killed 17 ms into a fast run read
    "exited with code -9" with no step, its peers at 10), not long after its last heartbeat."""
    said = r.step or r.heartbeat or r.hello
    return said is not None and bool(death.t) and bool(said.t) and death.t - said.t < STEPPING_S


def _in_lockstep(st) -> bool:
    """(A pipeline's stages too: each step's sends and receives need every stage.)"""
    hello = st.run_hello
    return hello is not None and (hello.strategy in LOCKSTEP or is_pipeline(hello.strategy)) and len(st.ranks) > 1


def _where(st, rank: int, phase: str | None) -> dict:
    """{"where": words} of a rank stalled in its data phase outside its DataLoader (its last
    heartbeat and step say so, analysis.stall_phase), as its live verdict says it; {} otherwise.
    A rank hung in its own code after its batch came read "rank 1 stalled in data after step 40
    (the likely cause of the hang)" in the launch's last line and the report (review 308)."""
    r = st.ranks.get(rank)
    if phase != "data" or r is None or r.heartbeat is None:
        return {}
    words = stall_phase(r.heartbeat.phase, r.step)[1]
    return {"where": words} if words == BETWEEN_STEPS_WORDS else {}


def hung_text(waited: list[dict]) -> str:
    """'rank 1 stalled in data after step 29' of a failure's ``waited_for``, ranks stuck alike
    on one line."""
    alike: dict[str, list[int]] = {}
    for w in waited:
        where = w.get("where") or f"in {w['phase'] or 'an unknown phase'}"
        what = f"stalled {where}" if w["kind"] == "stalled" else "went silent (no heartbeat)"
        alike.setdefault(what + (f" after step {w['step']}" if w["step"] is not None else ""), []).append(w["rank"])
    return ", ".join(f"{ranks_named(ranks)} {what}" for what, ranks in alike.items())


def recovered_failures(st) -> list[dict]:
    """The failures torchrun restarted the job after, or the job was run again after
    (:func:`failure_summary` of each attempt but the last, its ``then`` how the next began:
    "restarted by torchrun" or "run again"), oldest first."""
    out = []
    split = attempts(st)
    # torchrun's restarts of the run so far, and of its jobs before this one: a job run again
    # has a torchrun of its own, which counts from 0 (``hangs_restarted`` is by the run's count)
    restarts = before = 0
    for events, after in zip(split, split[1:]):
        for e in events:
            if torchrun_restart(e) and e.code is not None:
                restarts = max(restarts, before + e.code)
        begun = after[0]  # (the note that began the next attempt)
        if run_again(begun):
            f, then = failure_summary(st, events), "run again"
            before = restarts
        else:
            # (the count, where an older log's restart note says none)
            restarts = before + begun.code if begun.code is not None else restarts + 1
            hang = st.hangs_restarted.get(restarts)
            f, then = failure_summary(st, events, hang=hang), "restarted by torchrun"
        if f is not None:
            out.append({**f, "then": then})
    return out


def signal_name(code: int | None) -> str | None:
    """SIGKILL for -9; None for a code that is no signal."""
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return None


STEP_PHASES = ("forward", "backward", "optimizer", "comm", "sync")
"""Phases a rank's heartbeat names while inside a step (a step's own work or its collectives),
not between two ("data": the loop's next batch, or its end; a save, an evaluation)."""

_ASK = object()


def left_early(st, failure=_ASK) -> dict[int, int | None]:
    """Rank -> the step it left at, of each rank that left the job early: its script ended well
    (exit 0) while its peers, who did not finish, trained on past that step (a loop broken on
    one rank: its peers then wait, or fail, in the collective it never joins). The one test
    the TUI's grid, header and detail, the headless progress and the report's rank table share,
    as the alerts and the failure line name it: they read "finished" (□) of the rank the failure
    line called the root cause. Found from ``failure`` (:func:`failure_summary`'s, worked out
    here unless given; its ``left_early``: exits 0 before the step a peer's failure came in), or,
    before any peer failed, from the peers themselves: one not finished, held no further than
    the step after it, that took a step past it, or whose heartbeat says it is inside the step
    after it (DDP's all-reduce no one joins), or that got as far while the run planned more
    steps (``total_steps``) and is inside a step. Not a rank whose peers train on far past it
    (they share no collective with it), nor one whose every peer finished too (all reached the
    end), nor one that did the steps the run planned; a rank at the end of a lockstep run, gone
    a moment before its peers, is in no step after its own (their heartbeats say "data" once
    their loop is done)."""
    ranks = st.ranks
    done = [r for r in ranks.values() if r.finished and r.exit_code is None]
    if not done or len(done) == len(ranks):
        return {}
    if failure is _ASK:
        failure = failure_summary(st) if any(r.exit_code is not None for r in ranks.values()) else None
    out: dict[int, int | None] = {x["rank"]: x["step"] for x in (failure or {}).get("left_early") or ()}
    total = total_steps(st.hello)
    # The peers not finished, by their last step: (last step, the step each went on past).
    # Sorted once, with the furthest reach among those up to each (not a pass over the peers
    # for each finished rank: a thousand ranks ending one by one).
    peers = sorted((q.step.step if q.step is not None else -1, p) for q in ranks.values()
                   if not q.finished and (p := _went_on_past(q, total)) is not None)  # fmt: skip
    if not peers:
        return out
    lasts = [last for last, _ in peers]
    reach = list(accumulate((p for _, p in peers), max))
    steps = None
    for r in done:
        if r.rank in out:
            continue
        if steps is None:
            steps = _exit_steps(st)
        at = steps.get(r.rank, r.step.step if r.step is not None else None)
        if at is None or (total is not None and at >= total):
            continue  # (never stepped; or did every step the run planned)
        # A peer that went on past its step, and is held there: no further than the step after
        # it, which needs the rank's part in its collective. Peers that train on steps beyond
        # (ranks that share no collective: each its own work) did not need it: a rank of 100
        # steps beside one of 1,500 read "left early" while both ran, and fired an alert on a
        # job that then ended well (review 323).
        i = bisect_right(lasts, at + 1)
        if i and reach[i - 1] >= at:
            out[r.rank] = at
    return out


def _exit_steps(st) -> dict[int, int]:
    """Rank -> the step its own exit 0 said (its last completed), of the ranks that said one."""
    return {e.rank: e.step for e in st.lifecycle
            if isinstance(e, schema.Event) and e.name == "exit" and e.rank >= 0 and e.seq >= 0 and not e.code and e.step is not None}  # fmt: skip


def _went_on_past(q, total: int | None) -> int | None:
    """The last step peer ``q`` (not finished) trained on past: the one before its last step
    taken; the step its heartbeat says it is inside the step after (newer than its last step:
    DDP's all-reduce no one joins), or, while its heartbeat says it is inside a step (or it is
    stalled or silent), its last step where the run planned more (``total``: the caller leaves
    out a rank that did them all). None: none it is known to have."""
    last = q.step.step if q.step is not None else None
    hb = q.heartbeat
    # (inside a step, or stuck wherever it is: a metrics all-reduce or a checkpoint's barrier
    # between steps waits for the rank too; review 324)
    in_step = (hb is not None and hb.phase in STEP_PHASES) or q.stalled is not None or q.silent is not None
    # (its last step counts where the run planned more only while the peer is inside a step:
    # ranks that all ended their loop at step 120 of 200 planned, the last between steps, named
    # the first gone "left early", and the root cause of a failure at the last one's exit;
    # review 322)
    past = None if last is None else last if total is not None and in_step else last - 1
    if hb is not None and hb.phase in STEP_PHASES and (last is None or hb.step >= last):
        past = hb.step if past is None else max(past, hb.step)
    return past
