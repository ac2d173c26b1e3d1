"""A replay's bigger moves: `{`/`}` a minute (a tenth of a long run), `<`/`>` to its start and end."""

from __future__ import annotations

import io
import os

from rich.console import Console
from tui_helpers import widget_text

from pardash.telemetry import schema
from pardash.telemetry.client import ReplaySource
from pardash.tui.app import make_app
from pardash.tui.screens.help import HelpScreen, keys_table
from pardash.tui.widgets.run_header import RunHeader

SIZE = (120, 40)
T0 = 1.7e9


def _log(tmp_path, seconds: int):
    """Two ranks stepping every 5 s for ``seconds``."""
    log = tmp_path / "telemetry.jsonl"
    msgs: list = [schema.Hello(rank=r, world_size=2, t=T0, run="x", seq=0) for r in (0, 1)]
    msgs += [
        schema.Step(rank=r, step=s, loss=1.0 / s, step_s=5.0, t=T0 + 5 * s - r * 1e-3, seq=s, run="x")
        for s in range(1, seconds // 5 + 1)
        for r in (0, 1)
    ]
    msgs.append(schema.Event(rank=-1, name="hub", message="hub stopped: 0 lost, 0 rejected", t=T0 + seconds + 0.5, run="x"))
    log.write_bytes(schema.encode_json_lines(msgs))
    os.utime(log, (1.6e9, 1.6e9))  # a finished log, not one being written
    return log


def header(app) -> str:
    return widget_text(app.screen.query_one(RunHeader))


async def _press(pilot, key: str) -> None:
    await pilot.press(key)
    await pilot.pause()  # (the jump comes after the keys typed: see PardashApp._seek_to)


async def test_braces_move_a_tenth_of_a_long_run_and_angle_brackets_go_to_its_ends(tmp_path):
    # Only `[`/`]` moved, 10 s a press: 90 presses from the start to the end of a 15-minute run.
    src = ReplaySource(str(_log(tmp_path, 900)))
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await _press(pilot, "right_curly_bracket")
        assert src.position_s == 90.0 and src.state.step == 18
        assert "replay telemetry.jsonl 1m30s / 15m00s" in header(app), header(app)
        await _press(pilot, "greater_than_sign")
        assert src.position_s == src.duration_s == 900.0 and src.state.step == 180 and src.done
        assert "15m00s / 15m00s" in header(app)
        await _press(pilot, "left_curly_bracket")
        assert src.position_s == 810.0 and src.state.step == 162
        await _press(pilot, "left_square_bracket")
        assert src.position_s == 800.0 and src.state.step == 160
        await _press(pilot, "less_than_sign")
        assert src.position_s == 0.0 and src.state.step == 0
        assert "0s / 15m00s" in header(app)
        assert src.paused  # (a jump moves the replay; it does not play it)


async def test_braces_move_a_minute_in_a_run_under_ten_minutes(tmp_path):
    src = ReplaySource(str(_log(tmp_path, 300)))
    src.seek(100.0)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await _press(pilot, "left_curly_bracket")
        assert src.position_s == 40.0 and src.state.step == 8
        await _press(pilot, "left_curly_bracket")
        assert src.position_s == 0.0  # (no further than the start)
        for _ in range(6):
            await pilot.press("right_curly_bracket")  # a burst of presses: one jump, to where they add up to
        await pilot.pause()
        assert src.position_s == 300.0 and src.done


async def test_the_new_keys_are_in_the_footer_and_the_help_and_not_a_live_runs(tmp_path):
    from textual.widgets._footer import FooterKey

    src = ReplaySource(str(_log(tmp_path, 300)))
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        shown = {k.key_display: k.description for k in app.screen.query(FooterKey)}
        assert shown.get("{/}") == "Jump" and shown.get("</>") == "Start/end", shown
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        console = Console(width=100, record=True, file=io.StringIO())
        console.print(keys_table())
        text = console.export_text()
        assert "{  }" in text and "back, forward 60 s" in text and "<  >" in text and "to the run's start, to its end" in text
    app.source.live = True  # (as a hub's source is: these keys move nothing there)
    for action in ("jump", "ends"):
        assert not app.check_action(action, (1,))
