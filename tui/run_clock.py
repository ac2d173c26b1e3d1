"""Where the run's clock starts: the same 00:00 live and in a replay.

The header's elapsed time, the event log's clock and the alerts' "since" count from the ranks'
first word, as a replay's position, ``pardash report``'s duration and the headless progress lines
do. A hub starts before its ranks (torchrun, torch's import and a rendezvous take seconds;
``pardash hub`` may wait hours for a queued job): counted from the hub's start, one run read
"elapsed 51s" live and "47s" replayed. The hub's records from before read before 00:00 in the
event log ("-0:07 hub: hub started"), and with no clock while the ranks are awaited ("--:--"):
not on the hub's first record, a zero that moves when they speak (:func:`zero_known`).
"""

from __future__ import annotations

import time

from pardash.telemetry.clocks import CLOCK_OFF_S
from pardash.telemetry.client import Source
from pardash.telemetry.state import RunState


def ranks_first_word(state: RunState) -> float | None:
    """When the ranks first said anything (wall clock): their earliest hello, a rank's first
    message, as the hub kept it (``RunState.first_hello_t``, through a torchrun restart too).
    From a hub before that figure, the hellos at hand, where they can say it: none where a
    process torchrun restarted said hello again (a hello replaces its rank's first one). A
    hello far before the hub's first record is a clock behind (see ``telemetry.clocks``), not
    the run's start."""
    if state.first_hello_t:
        return state.first_hello_t
    floor = state.t0 - CLOCK_OFF_S if state.t0 else 0.0
    first: float | None = None
    for r in state.ranks.values():
        hello = r.hello
        if hello is None:
            continue
        if hello.restart:
            return None
        t = hello.t
        if t > floor and (first is None or t < first):
            first = t
    return first


def run_origin(source: Source, first_word: float | None = None) -> float:
    """The wall-clock time of the run's 00:00: a replay's start (the ranks' first word, its
    ranks' clocks judged over the whole log), live the ranks' first word as their hellos say it
    (``first_word``, when already at hand), else the hub's first record (0.0: nothing yet)."""
    if not source.live:
        start = getattr(source, "t_start", None)
        if start:
            return start
    state = source.state
    if first_word is None:
        first_word = ranks_first_word(state)
    return first_word or state.t0


def zero_known(state: RunState, origin: float | None) -> bool:
    """Whether the run's 00:00 is settled: the ranks' first word is known, or ``origin`` (a
    replay's start) is apart from the hub's first record. Before, a live run's zero is the
    hub's first record only for want of a better one, and moves to the ranks' first word when
    they speak: a clock read from it then ("00:00 hub: hub started") would change ("-0:02")."""
    return ranks_first_word(state) is not None or bool(origin and state.t0 and origin != state.t0)


def run_now(source: Source) -> float:
    """The wall-clock time the view is at: now, live; a replay's position (paused, it stays)."""
    if source.live:
        return time.time()
    start = getattr(source, "t_start", None)
    if start:
        return start + getattr(source, "position_s", 0.0)
    return source.state.t_last_rank or source.state.t_last
