"""A job's live display drawn over several lines (rich's: PyTorch Lightning's progress bar with its
validation bar under it, or a bar wrapped onto two lines) shows as a terminal leaves it in the
headless launch's lines and the TUI's output view: the script's own lines, and the display as it
ends, not a line each time it is drawn again (ten a second). And the ranks of a launch seen in a
terminal draw rich's displays as they would in one (Lightning's bar showed nothing until the end)."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

from pardash.telemetry.printer import strip_controls
from pardash.telemetry.redraws import HOLD_S, Redraws, last_drawing, lines_up

RICH_JOB = """
import time
from rich.progress import Progress
print("starting")
with Progress() as p:
    train = p.add_task("train", total=30)
    for i in range(30):
        time.sleep(0.02)
        p.advance(train)
        if i % 10 == 9:
            p.console.print(f"the script's line {i}")  # (printed above the live display)
        if i == 14:
            val = p.add_task("validation", total=20)
            for _ in range(20):
                time.sleep(0.05)
                p.advance(val)
            p.remove_task(val)
print("done")
"""


def _rich_output() -> bytes:
    """What rich writes of a live display with a second bar for a while, as to a terminal."""
    env = dict(os.environ, TTY_COMPATIBLE="1", NO_COLOR="1", COLUMNS="100")
    return subprocess.run([sys.executable, "-c", RICH_JOB], capture_output=True, env=env, timeout=60, check=True).stdout


def _shown(lines: list[bytes]) -> list[str]:
    return [strip_controls(last_drawing(line).decode()).strip() for line in lines]


def test_a_live_display_of_two_bars_shows_the_scripts_lines_and_its_end():
    data = _rich_output()
    *ended, rest = data.split(b"\n")
    assert sum(lines_up(line) > 0 for line in ended) >= 5  # (rich drew the two bars again and again)
    clock = [0.0]
    redraws = Redraws(clock=lambda: clock[0])
    shown = _shown(redraws.take(ended))
    clock[0] += HOLD_S
    shown += _shown(redraws.flush())
    assert "starting" in shown and "done" in shown
    assert [s for s in shown if s.startswith("the script's line")] == [f"the script's line {i}" for i in (9, 19, 29)]
    assert not any(s.startswith("validation") for s in shown), shown  # (drawn over, gone as rich removed it)
    bars = [s for s in shown if s.startswith("train")]
    assert bars and bars[-1].startswith("train") and "100%" in bars[-1], shown  # its end
    # Not a line a redraw (there were dozens), nor the display's first drawing, nor the last
    # drawing of its two lines before its second bar went (review 332: both were left)
    assert shown == ["starting", *(f"the script's line {i}" for i in (9, 19, 29)), bars[-1], "done"], shown


def test_output_without_cursor_moves_goes_through_as_it_comes():
    redraws = Redraws(clock=lambda: 0.0)
    lines = [b"epoch 1", b"\repoch 1:  50%|#####| 5/10\repoch 1: 100%|##########| 10/10", b"loss 0.3"]
    assert redraws.take(lines) == lines  # (nothing held: a tqdm bar is one line)
    assert redraws.flush() == [] and redraws.held == []


def test_held_lines_go_once_the_display_is_still():
    clock = [0.0]
    redraws = Redraws(clock=lambda: clock[0])
    # A two-line display drawn twice, then the script prints with no display any more.
    assert redraws.take([b"a1", b"a2\r\x1b[2K\x1b[1A\x1b[2Kb1"]) == [b"a1"]
    held = list(redraws.held)
    assert held and lines_up(held[-1]) == 1
    assert redraws.flush() == []  # (still within HOLD_S: the display may draw over it)
    clock[0] += HOLD_S
    assert _shown(redraws.flush()) == ["b1"]
    assert redraws.take([b"plain"]) == [b"plain"]


def test_a_launch_seen_in_a_terminal_has_its_ranks_draw_as_in_one(monkeypatch):
    from pardash import launch

    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    leader, follower = os.openpty()
    try:
        with open(follower, "w", closefd=False) as tty:
            monkeypatch.setattr(sys, "stdout", tty)
            spec = SimpleNamespace(extra_env={})
            launch._terminal_output(SimpleNamespace(headless=True), spec)
            assert spec.extra_env["TTY_COMPATIBLE"] == "1" and int(spec.extra_env["COLUMNS"]) > 0
            monkeypatch.setenv("TTY_COMPATIBLE", "0")  # the user's own word stands
            spec = SimpleNamespace(extra_env={})
            launch._terminal_output(SimpleNamespace(headless=True), spec)
            assert spec.extra_env == {}
    finally:
        os.close(leader)
        os.close(follower)
    monkeypatch.delenv("TTY_COMPATIBLE")
    with open(os.devnull, "w") as null:  # headless to a file: nothing drawn in place
        monkeypatch.setattr(sys, "stdout", null)
        spec = SimpleNamespace(extra_env={})
        launch._terminal_output(SimpleNamespace(headless=True), spec)
        assert spec.extra_env == {}
        launch._terminal_output(SimpleNamespace(headless=False), spec)  # (the TUI's ranks: its output view draws)
        assert spec.extra_env.get("TTY_COMPATIBLE") == "1"
