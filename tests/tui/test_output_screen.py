"""`o`: the ranks' own output (what the script prints), which under the TUI goes to the run's
output.log alone. Before, nothing on the screen showed it, or said where it went: a review's
400 'step N loss ...' lines and its validation losses were nowhere a user looked."""

from __future__ import annotations

import shutil

from tui_helpers import DATA, strip_text, until

from pardash.telemetry.client import ReplaySource
from pardash.tui.app import make_app
from pardash.tui.screens import output as output_mod
from pardash.tui.screens.dashboard import DashboardScreen
from pardash.tui.screens.output import OutputScreen, OutputTail, output_file

SIZE = (100, 30)


def test_the_tail_gives_complete_lines_as_they_come_and_a_redrawn_line_as_a_terminal_shows_it(tmp_path):
    f = tmp_path / "output.log"
    f.write_bytes(b"a\nb\npart")
    tail = OutputTail(str(f))
    assert tail.read() == ["a", "b"]  # (the line being written waits for its end)
    assert tail.read() == []
    with open(f, "ab") as out:
        out.write(b"ial\n 10%|#\r 50%|###\r100%|#####\n\x1b[31mred\x1b[0m\n")
    # A progress bar redrawn with CR reads as its last state; a colour's escapes are not acted on.
    assert tail.read() == ["partial", "100%|#####", "red"]
    # The file made anew (a run started again in the folder): read from its start.
    f.write_bytes(b"new\n")
    assert tail.read() == ["new"]
    f.unlink()
    assert tail.read() is None


def test_the_line_being_written_is_shown_as_its_latest_drawing(tmp_path):
    # A progress bar (tqdm) redraws its line with CR and ends it only when done: the screen
    # showed nothing of it all that time, where tail -f shows its latest drawing.
    f = tmp_path / "output.log"
    f.write_bytes(b"epoch 1 start\ntrain:  10%|#| 100/1000\rtrain:  50%|#####| 500/1000")
    tail = OutputTail(str(f))
    assert tail.read() == ["epoch 1 start"]
    assert tail.partial == "train:  50%|#####| 500/1000"
    with open(f, "ab") as out:
        out.write(b"\rtrain: 100%|##########| 1000/1000\n")
    assert tail.read() == ["train: 100%|##########| 1000/1000"] and tail.partial == ""


def test_a_big_file_is_read_from_its_end_less_the_line_cut_there(tmp_path, monkeypatch):
    monkeypatch.setattr(output_mod, "TAIL_BYTES", 20)
    f = tmp_path / "output.log"
    f.write_bytes(b"".join(b"line %02d\n" % i for i in range(10)))  # 8 bytes a line
    tail = OutputTail(str(f))
    # The last 20 bytes begin 4 bytes into line 07: its rest is no line of its own.
    assert tail.read() == ["line 08", "line 09"]
    assert tail.skipped == 60


def test_a_line_with_no_end_for_a_long_while_keeps_its_latest_drawing(tmp_path):
    f = tmp_path / "output.log"
    bar = b"".join(b"\r%6d%%|" % i + b"#" * 50 for i in range(2000))  # a bar redrawn, never ended
    f.write_bytes(bar)
    tail = OutputTail(str(f))
    assert tail.read() == []
    with open(f, "ab") as out:
        out.write(b"\n")
    (line,) = tail.read()
    assert line == "  1999%|" + "#" * 50


def _replay_with_output(tmp_path, lines: list[str] | None):
    log = tmp_path / "telemetry.jsonl"
    shutil.copy(DATA / "run4.jsonl", log)
    if lines is not None:
        (tmp_path / "output.log").write_text("".join(f"{x}\n" for x in lines))
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    src.paused = True
    return src


def _shown(screen) -> str:
    from textual.widgets import RichLog

    log = screen.query_one(RichLog)
    return "\n".join(strip_text(s).rstrip() for s in log.lines)


async def test_o_shows_the_ranks_output_and_follows_it_as_it_grows(tmp_path):
    src = _replay_with_output(tmp_path, [f"step {i} loss 0.{i}" for i in range(1, 4)])
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, OutputScreen) and "step 3 loss 0.3" in _shown(app.screen))
        screen = app.screen
        assert _shown(screen).splitlines() == ["step 1 loss 0.1", "step 2 loss 0.2", "step 3 loss 0.3"]
        assert f"{tmp_path / 'output.log'} · 3 lines" in str(screen.query_one("#title").render())
        with open(tmp_path / "output.log", "a") as out:
            out.write("eval at step 3: val_loss 0.25\n")
        await until(pilot, lambda: "val_loss 0.25" in _shown(screen))
        partial = screen.query_one("#partial")
        assert not partial.display
        with open(tmp_path / "output.log", "a") as out:
            out.write("eval  40%|####\r")  # (a bar being drawn: its line not ended)
        await until(pilot, lambda: partial.display and "eval  40%|####" in str(partial.render()))
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))


async def test_o_says_why_when_there_is_no_output_file(tmp_path):
    src = _replay_with_output(tmp_path, None)
    path, why, _stderr, _note = output_file(src)
    assert path == "" and why.startswith("no output.log beside ")
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, OutputScreen))
        await pilot.pause()
        title = app.screen.query_one("#title")
        assert "no output.log beside" in str(title.render())
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))


def test_the_file_is_the_launchs_own_else_the_attached_runs_folders(tmp_path):
    class Attached:
        live = True
        info = {"run_dir": str(tmp_path)}

    assert output_file(Attached(), "/runs/x/output.log") == ("/runs/x/output.log", "", "", "")
    path, why, _stderr, _note = output_file(Attached())
    assert path == "" and why == f"no output.log in the run's folder {tmp_path} (a launch on another node keeps its own)"
    (tmp_path / "output.log").write_text("hi\n")
    assert output_file(Attached()) == (str(tmp_path / "output.log"), "", "", "")
    # A headless launch keeps the ranks' stderr apart (tracebacks, warnings, progress bars):
    # attached to it, `o` showed output.log alone, nothing said where its traceback was.
    (tmp_path / "torchrun").mkdir()
    (tmp_path / "torchrun" / "stderr.log").write_text("Traceback (most recent call last):\n")
    assert output_file(Attached()).stderr == str(tmp_path / "torchrun" / "stderr.log")

    class Elsewhere:
        live = True
        info: dict = {}

    assert output_file(Elsewhere())[1].startswith("this run's output file is not known here")


async def test_scrolled_up_the_view_holds_still_and_end_follows_again_while_lines_come(tmp_path):
    # Review 241: End after reading back did not follow again while lines kept coming (a line
    # written during End's scroll animation left the view short of the end, for good), and
    # scrolled up the text moved under the reader as the oldest lines went.
    from textual.widgets import RichLog

    src = _replay_with_output(tmp_path, [f"old line {i}" for i in range(200)])
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, OutputScreen) and "old line 199" in _shown(app.screen))
        screen = app.screen
        log = screen.query_one(RichLog)
        await until(pilot, lambda: log.is_vertical_scroll_end and log.max_scroll_y > 0)
        await pilot.press("pageup")
        await until(pilot, lambda: not log.is_vertical_scroll_end)
        held_at = log.scroll_y
        with open(tmp_path / "output.log", "a") as out:
            out.write("".join(f"new line {i}\n" for i in range(30)))
        title = screen.query_one("#title")
        await until(pilot, lambda: "paused: 30 new lines (end follows)" in str(title.render()))
        assert log.scroll_y == held_at and "new line" not in _shown(screen)
        await pilot.press("end")
        await until(pilot, lambda: "new line 29" in _shown(screen) and log.is_vertical_scroll_end)
        for k in range(3):  # lines go on coming: each lot followed
            with open(tmp_path / "output.log", "a") as out:
                out.write(f"later line {k}\n")
            await until(pilot, lambda k=k: f"later line {k}" in _shown(screen) and log.is_vertical_scroll_end)
        assert "paused" not in str(title.render())


async def test_e_shows_the_stderr_a_headless_launch_kept_apart(tmp_path):
    src = _replay_with_output(tmp_path, ["step 1 loss 0.5"])
    (tmp_path / "torchrun").mkdir()
    (tmp_path / "torchrun" / "stderr.log").write_text("Traceback (most recent call last):\nValueError: boom\n")
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, OutputScreen) and "step 1 loss 0.5" in _shown(app.screen))
        assert "e: its stderr" in str(app.screen.query_one("#title").render())
        await pilot.press("e")
        await until(pilot, lambda: "ValueError: boom" in _shown(app.screen))
        assert "step 1" not in _shown(app.screen)
        await pilot.press("e")
        await until(pilot, lambda: "step 1 loss 0.5" in _shown(app.screen))


async def test_slash_finds_a_line_newest_first_and_n_goes_to_older_ones(tmp_path):
    # A user after the traceback of an hour ago, or the line where the loss went NaN, paged
    # through 5,000 lines: `/` finds them, as less and a W&B console log do.
    from textual.widgets import RichLog

    lines = [f"step {i} loss 0.{i}" for i in range(300)]
    lines[40] = "eval at step 40: val_loss 0.31"
    lines[200] = "eval at step 200: val_loss 0.12"
    src = _replay_with_output(tmp_path, lines)
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, OutputScreen) and "step 299" in _shown(app.screen))
        screen = app.screen
        log = screen.query_one(RichLog)
        title = screen.query_one("#title")
        await pilot.press("slash", *"val_loss", "enter")
        await until(pilot, lambda: "'val_loss': 1 of 2, newest first" in str(title.render()))
        assert screen.query_one(RichLog).has_focus and not screen._follow
        # The newest match is the view's top line; n goes to the older one, N back.
        assert log.scroll_y == screen._found[1] and "step 200: val_loss" in log.lines[int(log.scroll_y)].text
        await pilot.press("n")
        await until(pilot, lambda: "'val_loss': 2 of 2, newest first" in str(title.render()))
        assert "step 40: val_loss" in log.lines[int(log.scroll_y)].text
        await pilot.press("N")
        await until(pilot, lambda: "'val_loss': 1 of 2, newest first" in str(title.render()))
        # Typed into the find box, o and n are letters, escape closes it (not the screen).
        await pilot.press("slash", "o", "n", "escape")
        await pilot.pause()
        assert isinstance(app.screen, OutputScreen) and not screen._finding()
        await pilot.press("slash", *"nothing like it", "enter")
        await until(pilot, lambda: "no line holds 'nothing like it'" in str(title.render()))
