"""The event log says an event every rank sends alike once, naming the ranks."""

from __future__ import annotations

from pardash.telemetry import schema
from pardash.telemetry.printer import group_alike
from pardash.tui.widgets.event_log import describe


def _save(rank: int, step: int, took: float) -> schema.Event:
    return schema.Event(rank=rank, name="checkpoint", step=step, message=f"/ckpt/step-{step:08d}", duration_s=took)


def test_the_same_event_of_many_ranks_is_one_line_in_its_place():
    msgs = [
        schema.Event(rank=-1, seq=-1, name="hub", message="hub started"),
        *[_save(r, 20, 1.0 + r / 100) for r in range(0, 1024, 2)],
        schema.Verdict(rank=3, verdict="straggler", step=20, message="rank 3 is a straggler"),
        *[_save(r, 20, 1.0) for r in range(1, 1024, 2)],
        schema.Event(rank=7, name="error", step=21, message="RuntimeError: boom"),
        schema.Event(rank=8, name="error", step=21, message="RuntimeError: boom"),
        _save(0, 40, 2.0),
    ]
    lines = [describe(*entry)[0] for entry in group_alike(msgs)]
    assert lines == [
        "hub: hub started",
        "ranks 0-1023 checkpoint at step 20 (slowest 11.22s): /ckpt/step-00000020",
        "rank 3 is a straggler",
        # errors are each a line of their own: each carries its own traceback
        "rank 7 error at step 21: RuntimeError: boom",
        "rank 8 error at step 21: RuntimeError: boom",
        "rank 0 checkpoint at step 40 (2.00s): /ckpt/step-00000040",
    ]


def test_exits_group_by_code_and_text():
    msgs = [schema.Event(rank=r, name="exit", code=0, step=60) for r in (2, 0, 1)]
    msgs += [schema.Event(rank=3, name="exit", code=1, step=25)]
    assert [describe(*e)[0] for e in group_alike(msgs)] == [
        "ranks 0-2 finished (exit code 0)",
        "rank 3 exited with code 1",
    ]


def test_progress_lines_say_it_once_too():
    from pardash.telemetry.printer import event_line

    msgs = [_save(r, 20, 1.0) for r in (0, 1, 2, 3)] + [schema.Event(rank=1, name="warning", message="slow disk")]
    assert [event_line(*entry) for entry in group_alike(msgs)] == [
        "[checkpoint] ranks 0-3: /ckpt/step-00000020 (slowest 1.00 s)",
        "[warning] rank 1: slow disk",
    ]


def test_a_rank_that_says_it_twice_is_named_once():
    from pardash.telemetry.printer import event_line

    twice = [schema.Event(rank=3, name="warning", message="slow disk") for _ in range(2)]
    assert [event_line(*entry) for entry in group_alike(twice)] == ["[warning] rank 3: slow disk"]
