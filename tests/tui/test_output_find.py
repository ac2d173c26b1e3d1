"""`/` in the output view (`o`), as less finds: each n or N lands on its match where the reader
sees it, marked. Review 256: after a run, `/epoch 0 | loss 0.7` said '1 of 13' with no match on
the top line, n went to '5 of 13' with the view unmoved, and no line was marked: the newest
matches are in the file's last screenful, which the view cannot scroll to the top."""

from __future__ import annotations

import shutil

from tui_helpers import DATA, strip_text, until

from pardash.telemetry.client import ReplaySource
from pardash.tui.app import make_app
from pardash.tui.screens.dashboard import DashboardScreen
from pardash.tui.screens.output import OutputScreen, output_file

SIZE = (100, 30)
NEEDLE = "epoch 0 | loss 0.7"
MATCHES = [50, 100, 150, 200, 250, 300, 350, 372, 378, 384, 390, 395, 399]
"""The lines that hold NEEDLE: the newest five in the last screenful of 400."""


def _line(i: int) -> str:
    return f"step {i}/400 | epoch 0 | loss {'0.7' if i in MATCHES else '0.8'}{i:03d}"


def _replay(tmp_path, lines: list[str]) -> ReplaySource:
    log = tmp_path / "telemetry.jsonl"
    shutil.copy(DATA / "run4.jsonl", log)
    (tmp_path / "output.log").write_text("".join(f"{x}\n" for x in lines))
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    src.paused = True
    return src


def _rows(screen) -> list[list]:
    """The output view's rows as drawn: each a list of segments."""
    from textual.widgets import RichLog

    log = screen.query_one(RichLog)
    return [list(log.render_line(y)) for y in range(log.scrollable_content_region.height)]


def _marked_lines(screen) -> list[str]:
    """The rows drawn on another background than the view's from edge to edge: the line the
    find is at."""
    from textual.widgets import RichLog

    plain = screen.query_one(RichLog).rich_style.bgcolor
    return [strip_text(row).rstrip() for row in _rows(screen) if row and all(seg.style.bgcolor != plain for seg in row)]


def _marked_texts(screen) -> list[str]:
    """The stretches of text drawn unlike the rest of their row: the find's matches."""
    from textual.widgets import RichLog

    plain = screen.query_one(RichLog).rich_style.bgcolor
    marked = []
    for row in _rows(screen):
        styles = {seg.style for seg in row}
        if len(styles) > 1:
            common = max(styles, key=lambda s: sum(len(seg.text) for seg in row if seg.style == s))
            marked += [seg.text for seg in row if seg.style != common and seg.text.strip()]
        elif row and row[0].style.bgcolor != plain:
            marked.append(strip_text(row).strip())
    return marked


async def test_each_n_lands_on_its_match_in_view_and_marks_it_even_in_the_last_screenful(tmp_path):
    src = _replay(tmp_path, [_line(i) for i in range(400)])
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, OutputScreen) and "step 399/400" in strip_text(app.screen.query_one("RichLog").lines[-1]))
        screen = app.screen
        title = screen.query_one("#title")
        assert _marked_lines(screen) == []
        await pilot.press("slash", *NEEDLE, "enter")
        newest_first = sorted(MATCHES, reverse=True)
        for k, i in enumerate(newest_first[:9], 1):
            if k > 1:
                await pilot.press("n")
            await until(pilot, lambda k=k: f"{NEEDLE!r}: {k} of 13, newest first" in str(title.render()))
            await pilot.pause()
            # The match is on the screen and is the one line marked across the view; the
            # matched text of every match on the screen is marked too.
            assert _marked_lines(screen) == [_line(i)], k
            shown = [strip_text(row) for row in _rows(screen)]
            on_screen = [j for j in MATCHES if any(_line(j) in text for text in shown)]
            assert _marked_texts(screen).count(NEEDLE) == len(on_screen) >= 1
        # An older match than the last screenful is the view's top line.
        assert strip_text(_rows(screen)[0]).rstrip() == _line(newest_first[8])
        await pilot.press("N", "N")
        await until(pilot, lambda: f"{NEEDLE!r}: 7 of 13" in str(title.render()))
        await pilot.pause()
        assert _marked_lines(screen) == [_line(newest_first[6])]
        # Escape takes the marks away and stays; again, goes back.
        await pilot.press("escape")
        await until(pilot, lambda: _marked_lines(screen) == [] and _marked_texts(screen) == [])
        assert isinstance(app.screen, OutputScreen) and NEEDLE not in str(title.render())
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))


async def test_a_match_in_the_last_screenful_holds_the_view_still_while_lines_come(tmp_path):
    # The view a find put at the file's end did not hold: the next line written took it on (the
    # view at its end read as the reader's scroll back down to it), the match scrolled away.
    from textual.widgets import RichLog

    src = _replay(tmp_path, [_line(i) for i in range(400)])
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, OutputScreen) and "step 399/400" in strip_text(app.screen.query_one(RichLog).lines[-1]))
        screen = app.screen
        log = screen.query_one(RichLog)
        title = screen.query_one("#title")
        await pilot.press("slash", *NEEDLE, "enter", "n")
        await until(pilot, lambda: f"{NEEDLE!r}: 2 of 13" in str(title.render()))
        await pilot.pause()
        assert _marked_lines(screen) == [_line(395)]
        held_at = log.scroll_y
        with open(tmp_path / "output.log", "a") as out:
            out.write("".join(f"later line {j}\n" for j in range(30)))
        await until(pilot, lambda: "paused: 30 new lines (end follows)" in str(title.render()), timeout_s=20)
        assert log.scroll_y == held_at and _marked_lines(screen) == [_line(395)]
        await pilot.press("end")
        await until(pilot, lambda: "later line 29" in strip_text(log.lines[-1]) and log.is_vertical_scroll_end)


def _replayed_elsewhere(tmp_path, *, runs: str = "runs"):
    """A log recorded at a --log path (run1.jsonl), its run's output.log in RUNS/<run id>/ as a
    launch keeps it."""
    tmp_path.mkdir(exist_ok=True)
    log = tmp_path / "run1.jsonl"
    shutil.copy(DATA / "run4.jsonl", log)
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    src.paused = True
    (run_dir := tmp_path / runs / src.runs[0]).mkdir(parents=True)
    (run_dir / "output.log").write_text("step 1 loss 0.5\n")
    return src, run_dir / "output.log"


async def test_replay_of_a_log_given_by_path_finds_the_output_in_its_runs_folder(tmp_path, monkeypatch):
    # README's own `pardash launch ... --log run1.jsonl`, then `pardash replay run1.jsonl`: `o`
    # said "no output.log beside run1.jsonl", though runs/<run id>/output.log was there.
    monkeypatch.chdir(tmp_path)
    src, output = _replayed_elsewhere(tmp_path)
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, OutputScreen) and any("step 1 loss 0.5" in strip_text(s) for s in app.screen.query_one("RichLog").lines))
        assert f"{output} · 1 lines" in str(app.screen.query_one("#title").render())


def test_the_runs_folder_is_looked_for_beside_the_log_and_under_runs_dir_and_named_when_missing(tmp_path, monkeypatch):
    elsewhere = tmp_path / "else"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # (replayed from another folder than the launch's)
    src, output = _replayed_elsewhere(tmp_path)
    assert output_file(src).path == str(output)
    src, output = _replayed_elsewhere(tmp_path / "b", runs="mine")
    assert output_file(src, runs_dir=str(tmp_path / "b" / "mine")).path == str(output)
    path, why, _stderr, _note = output_file(src)
    run = src.runs[0]
    assert path == "" and why == (f"no output.log beside {src.path}, nor in {tmp_path / 'b' / 'runs' / run} or runs/{run} "
                                  "(a launch keeps one in its run's folder, under its --runs-dir)")


async def test_the_match_stays_in_view_as_the_view_gets_shorter(tmp_path):
    # The newest match is the file's last line, at the view's foot: a shorter terminal (or a
    # title grown a line) cut the view's foot off, the match with it, the view held still.
    from textual.widgets import RichLog

    src = _replay(tmp_path, [_line(i) for i in range(400)])
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, OutputScreen) and "step 399/400" in strip_text(app.screen.query_one(RichLog).lines[-1]))
        screen = app.screen
        title = screen.query_one("#title")
        await pilot.press("slash", *NEEDLE, "enter")
        await until(pilot, lambda: f"{NEEDLE!r}: 1 of 13" in str(title.render()))
        await pilot.pause()
        assert _marked_lines(screen) == [_line(399)]
        await pilot.resize_terminal(100, 20)
        await until(pilot, lambda: screen.query_one(RichLog).size.height < 20)
        await pilot.pause()
        assert _marked_lines(screen) == [_line(399)]


async def test_replays_runs_dir_is_where_o_looks_for_the_runs_folder(tmp_path, monkeypatch):
    # `pardash replay run1.jsonl --runs-dir mine` (a launch's --runs-dir): `o` looked in ./runs
    # alone, whatever the replay was told.
    elsewhere = tmp_path / "else"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    src, output = _replayed_elsewhere(tmp_path / "b", runs="mine")
    app = make_app(src, runs_dir=str(tmp_path / "b" / "mine"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, OutputScreen) and any("step 1 loss 0.5" in strip_text(s) for s in app.screen.query_one("RichLog").lines))
        assert f"{output} · 1 lines" in str(app.screen.query_one("#title").render())
