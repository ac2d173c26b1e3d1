"""The report's timeline (telemetry/timeline.py): parts of a run of steps are the same size, on
round steps, whatever bins the run's length gathered its steps in; the steps a restart runs again
are parts of their own, however few (review 266)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pardash.telemetry.report import build_report
from pardash.telemetry.report_render import render_text
from pardash.telemetry.timeline import Timeline

DATA = Path(__file__).resolve().parent / "data"


def _run(tl: Timeline, steps: range, t: float, attempt: int = 0, ranks=(0, 1)) -> float:
    for s in steps:
        for r in ranks:
            tl.step(r, s, t, 0.1, 32, 1.0, attempt=attempt)
        t += 0.1
    return t


def _spans(parts: list[dict]) -> list[tuple[int, int, int, int]]:
    return [(p["first_step"], p["last_step"], p["steps"], p["restart"]) for p in parts]


def test_parts_after_a_restart_are_equal_and_on_round_steps():
    # Review 266: 1,000 steps, then steps 495-994 again after a restart: bins of 20 steps cut in
    # parts of 150 read 1-160 (160 steps), 161-300 (140), 301-460, 461-600, ...
    tl = Timeline()
    t = _run(tl, range(1, 1001), 1000.0)
    _run(tl, range(495, 995), t + 30, attempt=1)
    assert _spans(tl.parts(run_t0=1000.0)) == [
        (1, 200, 200, 0), (201, 400, 200, 0), (401, 600, 200, 0), (601, 800, 200, 0), (801, 1000, 200, 0),
        (495, 600, 106, 1), (601, 800, 200, 1), (801, 994, 194, 1),
    ]  # fmt: skip


SHAPES = [(n, None) for n in (37, 120, 480, 1000, 1500, 7400, 16000)]
SHAPES += [(n, (n // 2, n + n // 3)) for n in (37, 120, 1000, 1499, 3000, 16000)]
SHAPES += [(n, (n, n + n // 3)) for n in (37, 480, 7400)]
SHAPES += [(1000, (495, 994)), (10000, (4950, 9940)), (1200, (601, 1490))]


@pytest.mark.parametrize(("first", "again"), SHAPES)
def test_every_part_is_whole_bins_of_one_size(first, again):
    """Whatever the run's length and where its restart goes back to: a part's edges are on the
    multiples of one round size, its steps all of one part of them (a part that is not a run of
    steps' first or last spans that size whole)."""
    tl = Timeline()
    t = _run(tl, range(1, first + 1), 0.0)
    if again is not None:
        _run(tl, range(again[0], again[1] + 1), t + 10, attempt=1)
    parts = tl.parts()
    total = first + (again[1] - again[0] + 1 if again is not None else 0)
    size = max(p["last_step"] - p["first_step"] + 1 for p in parts)
    if total >= 50:
        assert str(size).rstrip("0") in ("1", "15", "2", "3", "4", "5", "6", "8"), size  # (round: 1.5-8 x 10^n)
    for i, p in enumerate(parts):
        assert (p["first_step"] - 1) // size == (p["last_step"] - 1) // size, (size, tl.width, p)
        whole = 0 < i < len(parts) - 1 and parts[i - 1]["restart"] == p["restart"] == parts[i + 1]["restart"]
        if whole:
            assert (p["first_step"] - 1) % size == 0 and p["steps"] == size, (size, p)
    assert sum(p["steps"] for p in parts) == total
    assert len([p for p in parts if p["restart"] == 0]) <= 10


def test_a_restart_after_a_step_or_two_runs_them_again_in_a_part_of_its_own():
    # Review 266: a crash at step 2 (--inject-crash 1@2, --max-restarts 1): the new attempt's
    # steps 1-2 were taken as the old one's arriving out of order, both attempts' step 1 averaged.
    tl = Timeline()
    t = _run(tl, range(1, 2), 0.0)
    tl.step(0, 2, t, 0.1, 32, 1.0)  # (rank 0's step 2, rank 1 died in it)
    _run(tl, range(1, 61), t + 3.0, attempt=1)
    parts = tl.parts()
    assert _spans(parts)[:2] == [(1, 2, 2, 0), (1, 8, 8, 1)]
    assert parts[1]["steps_again"] == 2 and sum(p["steps"] for p in parts) == 62


def test_steps_out_of_order_and_an_old_process_s_late_step_begin_no_run_of_steps():
    tl = Timeline()
    t = _run(tl, range(1, 11), 0.0)
    # A rank's reporter sends on two sockets: step 12 before 11 is no restart.
    tl.step(0, 12, t, 0.1, 32, 1.0)
    tl.step(0, 11, t, 0.1, 32, 1.0)
    tl.step(1, 11, t, 0.1, 32, 1.0)
    tl.step(1, 12, t, 0.1, 32, 1.0)
    # Rank 1's old process's last step, on its way as it died, taken after torchrun's restart
    # (its caller says the new attempt's): the old run of steps' step 13, not a run of its own.
    tl.step(1, 13, t + 0.1, 0.1, 32, 1.0, attempt=1)
    tl.step(0, 13, t + 0.1, 0.1, 32, 1.0)
    _run(tl, range(1, 21), t + 5.0, attempt=1)
    assert [(p["first_step"], p["last_step"], p["restart"]) for p in tl.parts()] == [
        (1, 6, 0), (7, 12, 0), (13, 13, 0), (1, 6, 1), (7, 12, 1), (13, 18, 1), (19, 20, 1)]  # fmt: skip
    assert tl.run_of(0) == tl.run_of(1) == 1


def test_a_report_of_a_crash_at_step_2_runs_steps_again_in_a_part_of_its_own():
    # tests/data/real_ddp2_restart_at2.jsonl: pardash launch --strategy ddp --nproc 2 --model mlp
    # --steps 30 --headless --inject-crash 1@2 --max-restarts 1. Its timeline's first part, 1-5,
    # said only "no step for 1.3 s after step 1", the two attempts' step 1 in one.
    rep = build_report(str(DATA / "real_ddp2_restart_at2.jsonl"))
    parts = rep["timeline"]
    assert [(p["first_step"], p["last_step"], p["restart"], p["steps_again"]) for p in parts][:2] == [(1, 1, 0, 0), (1, 6, 1, 1)]
    assert not any(p["longest_gap_s"] for p in parts)
    assert sum(p["steps"] for p in parts) == 31
    # One step run again is one: it read "1 steps run again after torchrun's restart 1".
    assert "1 step run again after torchrun's restart 1" in render_text(rep)
