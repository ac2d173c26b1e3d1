"""A live run drawn less often where the viewer's process would take more than its share of a
core (review 303: the TUI drawing every 10 Hz frame took 7-12% of a core from two CPU-bound
ranks on 2 cores, about 20% of their steps)."""

from __future__ import annotations

from pardash.tui.pacing import DRAW_BUDGET, DRAW_MAX_S, DrawPacer


class _Clock:
    def __init__(self) -> None:
        self.t = self.cpu = 0.0
        self.host = 100.0  # (the host's cores all busy)


def _run(pacer: DrawPacer, clock: _Clock, seconds: float, cpu_share: float, frame_s: float = 0.125) -> int:
    """Frames every ``frame_s`` for ``seconds``, each drawn when due, the process taking
    ``cpu_share`` of a core; how many were drawn."""
    drawn = 0
    for _ in range(round(seconds / frame_s)):
        clock.t += frame_s
        clock.cpu += cpu_share * frame_s
        if pacer.due(clock.t):
            pacer.drawn(clock.t)
            drawn += 1
        pacer.tick(clock.t)
    return drawn


def test_a_cheap_viewer_draws_every_frame_and_a_costly_one_backs_off_to_once_a_second_and_back():
    clock = _Clock()
    pacer = DrawPacer(0.125, cpu=lambda: clock.cpu, clock=lambda: clock.t, host_busy=lambda: clock.host)  # (frames 1/8 s apart: exact sums)
    assert _run(pacer, clock, 5, DRAW_BUDGET / 4) == 40  # (every frame)
    assert pacer.every == 0.0
    # Over its budget: twice as far apart each second, to DRAW_MAX_S, no further.
    assert _run(pacer, clock, 1, DRAW_BUDGET * 3) == 8 and pacer.every == 0.125
    _run(pacer, clock, 10, DRAW_BUDGET * 3)
    assert pacer.every == DRAW_MAX_S
    assert _run(pacer, clock, 10, DRAW_BUDGET * 3) == 10  # (once a second: a stall shows within it)
    # Between a third of its budget and all of it: where it is.
    _run(pacer, clock, 5, DRAW_BUDGET / 2)
    assert pacer.every == DRAW_MAX_S
    # Well under: twice as close each second, then every frame.
    _run(pacer, clock, 10, DRAW_BUDGET / 4)
    assert pacer.every == 0.0 and _run(pacer, clock, 2, DRAW_BUDGET / 4) == 16


def test_a_viewer_on_a_host_with_cores_to_spare_draws_every_frame_whatever_it_costs():
    # Review 305: paced on its own CPU alone, a viewer drawing once a second still took more
    # than a third of its budget (its frames' decoding) and never drew every frame again, on a
    # laptop or a node of 64 cores alike. It takes its CPU from nobody there.
    clock = _Clock()
    pacer = DrawPacer(0.125, cpu=lambda: clock.cpu, clock=lambda: clock.t, host_busy=lambda: clock.host)
    _run(pacer, clock, 10, DRAW_BUDGET * 3)
    assert pacer.every == DRAW_MAX_S  # (the host busy: backed off)
    clock.host = 40.0
    _run(pacer, clock, 10, DRAW_BUDGET * 3)
    assert pacer.every == 0.0 and _run(pacer, clock, 2, DRAW_BUDGET * 3) == 16

