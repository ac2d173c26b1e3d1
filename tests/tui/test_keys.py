"""Keys a person presses, over recorded runs: leaving a launched run, help, paging through 1024
ranks, sorting, and the replay controls at their limits (test_live.py and test_replay.py cover
the arrows, enter, clicks, the filter and the replay controls' ordinary use)."""

from __future__ import annotations

import pytest
from tui_helpers import DATA, replay_app, replay_running_app, until

from pardash.telemetry.client import FrameApplier, ReplaySource
from pardash.tui.app import SPEEDS, make_app
from pardash.tui.model import SORT_KEYS
from pardash.tui.screens.dashboard import DashboardScreen
from pardash.tui.screens.help import HelpScreen
from pardash.tui.screens.memory import MemoryScreen
from pardash.tui.screens.quit import QuitScreen
from pardash.tui.screens.rank_detail import RankDetailScreen
from pardash.tui.widgets.rank_grid import RankGrid

SIZE = (120, 40)


@pytest.mark.parametrize(("key", "choice"), [("d", "detach"), ("s", "stop")])
async def test_q_then_a_key_leaves_a_launched_run_that_way(key, choice):
    chosen: list[str] = []
    app = replay_app("run4.jsonl", launched=True, on_exit_choice=chosen.append)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        assert isinstance(app.screen, QuitScreen)
        await pilot.press(key)
        await pilot.pause()
    assert app.return_value == choice
    assert chosen == [choice]


@pytest.mark.parametrize("job_over", [False, True])
async def test_q_after_every_rank_failed_asks_while_torchrun_may_restart_them(job_over):
    # Every rank exited with an error and --max-restarts had one left: q closed the viewer
    # as if the job were over, which then waited for it with nothing on screen.
    from pardash.telemetry.client import ReplaySource
    from pardash.tui.app import make_app

    src = ReplaySource(str(DATA.parent.parent / "data" / "fsdp4_crash.jsonl"))
    src.seek(src.duration_s)
    src.paused = True
    app = make_app(src, launched=True, job_over=lambda: job_over)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
        if job_over:
            assert app.return_value == "over"
        else:
            assert isinstance(app.screen, QuitScreen)
            await pilot.press("d")
            await pilot.pause()
            assert app.return_value == "detach"


async def test_a_job_that_ends_under_the_quit_dialog_is_said_and_q_then_leaves():
    # The dialog stayed as it was when the job ended under it: it offered to stop a job that
    # was over, and q on it did nothing (Esc, then q, left).
    from pardash.telemetry.client import ReplaySource
    from pardash.tui.app import make_app
    from textual.widgets import Button, Label

    ended = [False]
    chosen: list[str] = []
    src = ReplaySource(str(DATA.parent.parent / "data" / "fsdp4_crash.jsonl"))
    src.seek(src.duration_s)
    src.paused = True
    app = make_app(src, launched=True, job_over=lambda: ended[0], on_exit_choice=chosen.append)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, QuitScreen)
        await pilot.press("q")  # the job still runs: q again does nothing
        await pilot.pause()
        assert app.screen is dialog and not dialog.ended
        assert "Leave run" in str(dialog.query_one("#question", Label).render())
        ended[0] = True  # torchrun exits, with no new frame: the dialog's own check finds it
        await until(pilot, lambda: dialog.ended)
        assert "has ended" in str(dialog.query_one("#question", Label).render())
        assert not dialog.query_one("#stop", Button).display
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value == "over" and chosen == ["over"]


@pytest.mark.parametrize(("ask", "stop"), [("q", "s"), ("ctrl+c", "ctrl+c")])
async def test_stop_on_the_dialog_of_a_job_that_ended_leaves_without_stopping(ask, stop):
    # (ctrl+c, ctrl+c: a second Ctrl+C stops a job, one that has ended it leaves)
    from pardash.telemetry.client import ReplaySource
    from pardash.tui.app import make_app

    ended = [False]
    src = ReplaySource(str(DATA.parent.parent / "data" / "fsdp4_crash.jsonl"))
    src.seek(src.duration_s)
    src.paused = True
    app = make_app(src, launched=True, job_over=lambda: ended[0])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press(ask)
        await pilot.pause()
        ended[0] = True
        app.screen._check_over()
        await pilot.press(stop)
        await pilot.pause()
    assert app.return_value == "over"


async def test_ctrl_c_quits_as_q_does():
    # It showed Textual's "Press ctrl+q to quit" toast.
    app = replay_app("run4.jsonl", launched=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen)  # a launched run asks, as q does
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, DashboardScreen)
    viewer = replay_app("run4.jsonl")
    async with viewer.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert viewer.return_value == "quit"


async def test_ctrl_c_on_the_quit_dialog_stops_the_job_as_a_second_ctrl_c_does():
    # Ctrl+C asked "Leave run?"; a second Ctrl+C on it did nothing (the job went on, the
    # dialog stayed): it stops the job, as the dialog's "Stop the job" does.
    chosen: list[str] = []
    app = replay_app("run4.jsonl", launched=True, on_exit_choice=chosen.append)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_value == "stop" and chosen == ["stop"]


async def test_ctrl_c_twice_in_an_attached_viewer_detaches_and_leaves_the_job_training():
    # `pardash attach` to a launched job, then Ctrl-C twice (as one leaves nvitop or tail -f,
    # pressing again when the first seemed to do nothing): it stopped the job, hours of training
    # with it. In the attached viewer it detaches; stopping takes s (or the button).
    from textual.widgets import Label

    chosen: list[str] = []
    app = replay_app("run4.jsonl", launched=True, attached=True, on_exit_choice=chosen.append)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen)
        assert str(app.screen.query_one("#keys", Label).render()) == "s stop · d or ctrl+c detach · esc cancel"
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_value == "detach" and chosen == ["detach"]


@pytest.mark.parametrize("come_back", ["", "pardash attach tcp://10.0.0.1:29600 --curve-dir keys"])
async def test_the_quit_dialog_says_the_command_that_watches_the_run_again(come_back):
    # On node 1 of a two-node job it said "come back with `pardash attach RUN_ID`", which fails
    # there (no hub on that node serves the id: node 0's does), and without --curve-dir on a run
    # with keys.
    from textual.widgets import Label

    app = replay_app("run4.jsonl", launched=True, come_back=come_back)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        assert isinstance(app.screen, QuitScreen)
        said = " ".join(str(label.render()) for label in app.screen.query(Label))
        again = come_back or f"pardash attach {app.source.state.run_id}"
        assert f"come back with `{again}`." in said, said


@pytest.mark.parametrize("size", [(40, 12), (40, 20), (60, 16), (80, 24)])
async def test_the_quit_dialogs_buttons_are_whole_on_a_small_screen(size):
    # At 40x12 the explanations, wrapped, pushed the three buttons below the screen's edge, and
    # at 40 columns Cancel was cut to "Cance" (review 302).
    from textual.containers import Vertical
    from textual.widgets import Button, Label

    app = replay_app("run4.jsonl", launched=True)
    async with app.run_test(size=size) as pilot:
        await pilot.press("q")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, QuitScreen)
        box = dialog.query_one(Vertical)
        assert dialog.region.contains_region(box.region), box.region  # its border too
        for button in dialog.query(Button):
            assert button.region.area and box.content_region.contains_region(button.region), (button.id, button.region)
        keys = dialog.query_one("#keys", Label)
        assert keys.region.area and box.content_region.contains_region(keys.region)
        explained = [label for label in dialog.query(".explain") if label.display]
        assert explained if size == (80, 24) else True  # (where they fit, the explanations stay)
        await pilot.press("s")
        await pilot.pause()
    assert app.return_value == "stop"


async def test_q_then_c_cancels_and_the_dashboard_carries_on():
    chosen: list[str] = []
    app = replay_app("run4.jsonl", launched=True, on_exit_choice=chosen.append)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q", "c")
        assert isinstance(app.screen, DashboardScreen)
        await pilot.press("down")
        assert app.screen.query_one(RankGrid).cursor_rank == 1  # the grid still has the keys
    assert chosen == []


async def test_help_opens_on_question_mark_and_closes_on_it_escape_or_q():
    app = replay_app("run4.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        for close in ("question_mark", "escape", "q"):
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            await pilot.press(close)
            assert isinstance(app.screen, DashboardScreen)
    assert app.return_value is None  # q closed the help, it did not quit


async def test_escape_walks_back_from_detail_and_memory():
    app = replay_app("straggler8.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        # (each screen waited for: one is pushed after its key's handler returns, and a loaded
        # machine took longer than the press to show it)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RankDetailScreen))
        await pilot.press("escape", "m")
        await until(pilot, lambda: isinstance(app.screen, MemoryScreen))
        await pilot.press("m")  # m toggles it
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))


async def test_paging_through_1024_ranks_in_cells():
    app = replay_app("run1024.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        grid = app.screen.query_one(RankGrid)
        # (each key's move waited for: a loaded machine lays the grid out and scrolls it later)
        await pilot.press("c")  # cells: 1024 ranks are many screens long
        await until(pilot, lambda: not grid.heat and grid.cursor_rank == 0 and grid.max_scroll_y > 0)
        await pilot.press("pagedown")
        await until(pilot, lambda: grid.cursor_rank is not None and grid.cursor_rank >= 30 and grid.scroll_offset.y > 0)  # a screenful down
        paged = grid.cursor_rank
        await pilot.press("pagedown")
        await until(pilot, lambda: grid.cursor_rank > paged)
        await pilot.press("pageup")
        await until(pilot, lambda: grid.cursor_rank == paged)
        await pilot.press("end")
        # the last line is on screen
        await until(pilot, lambda: grid.cursor_rank == 1023 and grid.scroll_offset.y == grid.max_scroll_y > 0)
        await pilot.press("home")
        await until(pilot, lambda: grid.cursor_rank == 0 and grid.scroll_offset.y == 0)


async def test_s_cycles_through_every_order_and_back():
    app = replay_app("straggler8.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        grid = app.screen.query_one(RankGrid)
        seen = [grid.sort_key]
        for _ in SORT_KEYS:
            await pilot.press("s")
            seen.append(grid.sort_key)
        assert seen == [*SORT_KEYS, SORT_KEYS[0]]
        assert "sorted by rank" in str(app.screen.query_one("#main").border_subtitle)


async def test_a_new_order_is_shown_from_its_top():
    # The cursor kept its rank far down the list, which left the first-sorted ranks off-screen.
    app = replay_app("run1024.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        grid = app.screen.query_one(RankGrid)
        await pilot.press("c", "pagedown", "pagedown")
        assert grid.scroll_offset.y > 0
        await pilot.press("s")
        assert grid.sort_key == SORT_KEYS[1] and grid.scroll_offset.y == 0
        assert grid.cursor_rank == grid._layout.ordered[0].rank


async def test_the_flagged_filter_describes_no_rank_it_hides():
    # With nothing flagged the grid was empty, and the line under it still described rank 0.
    from pardash.tui.widgets.selected_rank import SelectedRank

    app = replay_app("run4.jsonl")  # a healthy run: nothing flagged
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        line = app.screen.query_one(SelectedRank)
        assert line.row is not None
        await pilot.press("f")
        await pilot.pause()
        assert app.screen.query_one(RankGrid).flagged_only and line.row is None


async def test_replay_speed_and_seek_stop_at_their_limits():
    src = ReplaySource(str(DATA / "run4.jsonl"))
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*["plus"] * (len(SPEEDS) + 2))
        assert src.speed == SPEEDS[-1]
        await pilot.press(*["minus"] * (len(SPEEDS) + 2))
        assert src.speed == SPEEDS[0]
        await pilot.press("left_square_bracket")
        assert src.position_s == 0.0
        await pilot.press(*["right_square_bracket"] * 5)
        assert src.position_s == src.duration_s  # 31 s: the end, not past it
        assert src.done


class _Live(FrameApplier):
    """A live source with nothing arriving."""

    live = True
    synced = True

    def poll(self) -> bool:
        return False

    def close(self) -> None:
        pass


async def test_replay_keys_do_nothing_on_a_live_run():
    src = _Live()
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "plus", "minus", "left_square_bracket", "right_square_bracket")
        assert isinstance(app.screen, DashboardScreen)
        assert not hasattr(src, "paused") and not hasattr(src, "speed")
        assert app.check_action("pause", ()) is False


async def test_q_after_every_rank_is_done_leaves_without_asking():
    # The dialog offered to stop a job whose ranks had all finished, and "detach" then said
    # the job goes on.
    chosen: list[str] = []
    app = replay_app("dp1.jsonl", launched=True, on_exit_choice=chosen.append)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, QuitScreen)
    assert app.return_value == "over" and chosen == ["over"]


async def _palette_screenshot(app) -> list[str]:
    """Take a screenshot as a person does (the command palette's "Screenshot"); the
    notifications' texts."""
    async with app.run_test(size=SIZE) as pilot:
        # (Textual's own called deliver_screenshot directly: the folder asked for was unused)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Screenshot")
        # Enter runs a command only once the palette's search has listed it (a loaded
        # machine can take longer than any fixed pause).
        from textual.command import CommandList

        await until(pilot, lambda: bool(app.screen.query(CommandList)) and app.screen.query_one(CommandList).option_count > 0)
        await pilot.press("enter")
        # Until the app has its "Saved screenshot": the thread that wrote the file tells it so,
        # and one that found the app gone raised in the next test's warnings.
        await until(pilot, lambda: any(n.title == "Screenshot" for n in app._notifications))
        return [str(n.message) for n in app._notifications if n.title == "Screenshot"]


async def test_the_palettes_screenshot_goes_to_a_cache_folder_not_the_current_one(tmp_path, monkeypatch):
    # Textual's default folder, ~/Downloads, is often missing on a training node (it said only
    # "Failed to save screenshot"); the current folder, a project's checkout, filled with SVGs.
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(tmp_path / "no-home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    said = await _palette_screenshot(replay_app("run4.jsonl"))  # (a log not in a run's folder)
    assert not list(project.iterdir())
    shots = list((tmp_path / "cache" / "pardash" / "screenshots").glob("*.svg"))
    assert len(shots) == 1 and "fsdp-gpt2-4" in shots[0].read_text()
    assert len(said) == 1 and str(shots[0]) in said[0]


async def test_the_palettes_screenshot_of_a_run_goes_to_the_runs_folder(tmp_path, monkeypatch):
    import shutil

    run_dir = tmp_path / "runs" / "fsdp-gpt2-4"
    run_dir.mkdir(parents=True)
    shutil.copy(DATA / "run4.jsonl", run_dir / "telemetry.jsonl")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = ReplaySource(str(run_dir / "telemetry.jsonl"))
    src.seek(src.duration_s)
    src.paused = True
    said = await _palette_screenshot(make_app(src))
    shots = list(run_dir.glob("*.svg"))
    assert len(shots) == 1 and not list(tmp_path.glob("*.svg")) and not (tmp_path / "cache").exists()
    assert len(said) == 1 and str(shots[0]) in said[0]


async def test_the_cursor_stays_on_the_first_rank_until_a_person_moves_it():
    # Ranks say hello in any order: the cursor used to stay on whichever came first (rank 1
    # after most launches) with rank 0 drawn above it.
    from textual.app import App

    from pardash.telemetry import schema
    from pardash.telemetry.state import RunState
    from pardash.tui.model import RowBuilder

    class Host(App):
        def compose(self):
            yield RankGrid()

    state, rows, now = RunState(run_id="r"), RowBuilder(), 1000.0
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        grid = app.query_one(RankGrid)
        grid.focus()

        def hello(rank: int) -> None:
            state.apply(schema.Hello(rank=rank, world_size=8, run="r", t=now), now)
            grid.update_rows(rows.update(state))

        for r in (3, 1, 0, 2):
            hello(r)
            await pilot.pause()
        assert grid.cursor_rank == 0
        await pilot.press("down", "down")
        assert grid.cursor_rank == 2
        hello(5)  # a rank joining later leaves a chosen rank where it is
        await pilot.pause()
        assert grid.cursor_rank == 2


async def test_back_from_a_ranks_detail_the_grid_is_on_the_rank_last_shown():
    app = replay_app("straggler8.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("enter", "n", "n", "n", "escape")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        assert app.screen.query_one(RankGrid).cursor_rank == 3


async def test_the_side_panels_take_their_width_back_when_the_terminal_grows_again():
    # An ended replay (no frame redraws it): after 200x60 -> 50x12 -> 200x60 the side panels
    # stayed at 64 columns and the grid kept 70 empty ones.
    app = replay_app("exited4.jsonl")
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        side = app.screen.query_one("#side")
        wide = side.size.width
        assert wide > 64
        await pilot.resize_terminal(50, 12)
        await pilot.pause()
        assert side.size.width < wide
        await pilot.resize_terminal(200, 60)
        await until(pilot, lambda: side.size.width == wide)


@pytest.mark.parametrize("size", [(60, 20), (50, 16)])
async def test_a_terminal_too_narrow_for_the_panels_side_by_side_has_them_under_the_grid(size):
    # Below 72 columns the grid (at least 40) and the side panels (at least 30) ran off the
    # right edge: the alerts cut mid-word, with no border. The quit dialog, 64 wide, lost its
    # Cancel button at 50 columns.
    app = replay_app("exited4.jsonl", launched=True)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = app.screen.region
        main, alerts = app.screen.query_one("#main").region, app.screen.query_one("#alerts").region
        assert main.right <= screen.right and alerts.right <= screen.right
        assert alerts.y >= main.bottom and alerts.width == main.width == size[0]
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen)
        for button in app.screen.query("Button"):
            assert screen.contains_region(button.region), button.id


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_footer_says_how_to_get_back_from_the_event_log_and_escape_does(size):
    # Tab focused the event log; the footer lost "⏎ Detail" and said nothing of the way back.
    from textual.widgets._footer import FooterKey

    from pardash.tui.widgets.event_log import EventLog
    from pardash.tui.widgets.rank_grid import RankGrid

    app = replay_app("run4.jsonl")
    async with app.run_test(size=size) as pilot:
        await pilot.pause()

        def footer():
            return [(k.key_display, k.description) for k in app.screen.query(FooterKey)]

        assert isinstance(app.focused, RankGrid)
        assert ("esc/tab", "Grid") not in footer()
        await pilot.press("tab")
        await pilot.pause()
        assert isinstance(app.focused, EventLog)
        assert ("esc/tab", "Grid") in footer()
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.focused, RankGrid)
        assert ("⏎", "Detail") in footer() and ("esc/tab", "Grid") not in footer()
        await pilot.press("tab", "tab")
        await pilot.pause()
        assert isinstance(app.focused, RankGrid)


async def test_the_quit_dialog_says_how_to_attach_to_this_run_again():
    # "come back with `pardash attach`": with several live runs that attaches to the newest.
    from textual.widgets import Label

    app = replay_app("run4.jsonl", launched=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
        run_id = app.source.state.run_id
        assert run_id
        said = " ".join(str(label.render()) for label in app.screen.query(Label))
        assert f"`pardash attach {run_id}`" in said, said


async def test_a_form_chosen_in_a_replay_at_rest_fits_the_loss_chart_at_once():
    # An ended replay redraws on no frame: c fitted the loss chart only at the next redraw, so
    # it stayed under a grid of 1024 cells that needs every line (a page down went 20 ranks,
    # not 31, and the paging test failed whenever the replay had come to rest before the key).
    app = replay_app("run1024.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        screen, grid = app.screen, app.screen.query_one(RankGrid)
        await until(pilot, lambda: screen.has_class("-trend") and grid.heat)  # a heat map with rows to spare
        for _ in range(5):  # (at rest: the replay's last frames drawn)
            await pilot.pause(0.05)
        await pilot.press("c")
        await until(pilot, lambda: not grid.heat and not screen.has_class("-trend"))
        await pilot.press("c")
        await until(pilot, lambda: grid.heat and screen.has_class("-trend"))


async def test_slash_goes_to_a_rank_by_its_number():
    # Review 294: at 4096 ranks nothing went to a given rank (rank 3001 was 62 presses of the
    # arrows away). `/`, its number, enter: the cursor is on it, in view; under f, a rank not
    # flagged shows every rank again to show it; a rank that is not there is said so.
    app = replay_running_app("run1024.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        grid = app.screen.query_one(RankGrid)
        await pilot.press("slash", "9", "0", "1", "enter")
        await pilot.pause()
        assert grid.cursor_rank == 901 and grid.shows(901)
        top, rows = grid.scroll_offset.y, grid.scrollable_content_region.height
        assert top <= grid.layout.where[901][0] + grid.head_lines < top + rows
        assert grid.has_focus
        await pilot.press("f")
        await pilot.pause()
        assert grid.flagged_only and not grid.shows(5)
        await pilot.press("slash", "5", "enter")
        await pilot.pause()
        await pilot.pause()
        assert grid.cursor_rank == 5 and grid.shows(5) and not grid.flagged_only
        await pilot.press("slash", "5", "0", "0", "0", "enter")
        await pilot.pause()
        assert grid.cursor_rank == 5
        assert any("no rank 5000 here (ranks 0-1023)" in str(n.message) for n in app._notifications)
        await pilot.press("slash", "7", "escape")  # never mind
        await pilot.pause()
        assert grid.cursor_rank == 5 and grid.has_focus


async def test_slash_and_a_number_in_one_burst_go_to_the_rank():
    # A paste, or a fast typist's `/37⏎`, reaches the app in one read: the keys after `/` went
    # to the grid before `/` had opened the box (its enter opened rank 0's detail).
    from textual import events

    app = replay_running_app("run1024.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        grid = app.screen.query_one(RankGrid)
        for key, char in (("slash", "/"), ("3", "3"), ("7", "7"), ("enter", "\r")):
            app._driver.send_message(events.Key(key, char))
        for _ in range(5):  # (the app idle: every key taken)
            await pilot.pause()
        assert grid.cursor_rank == 37 and grid.has_focus and isinstance(app.screen, DashboardScreen)
