"""A note the command line had for the user, shown on the dashboard that covers the terminal."""

from __future__ import annotations

from tui_helpers import replay_app


async def test_a_notice_from_the_command_line_is_shown_on_the_dashboard():
    # `replay --start 99:00:00` printed why it opened at the end on stderr, behind the
    # dashboard: it was read only after leaving it. The notice is a toast on the screen.
    from textual.widgets._toast import Toast

    app = replay_app("run4.jsonl", notice="--start 99:00:00 is past the run's end")
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await pilot.pause()
        await pilot.pause(0.1)
        shown = [str(t.render()) for t in app.screen.query(Toast)]
        assert any("past the run's end" in text for text in shown), shown
    quiet = replay_app("run4.jsonl")
    async with quiet.run_test(size=(120, 36), notifications=True) as pilot:
        await pilot.pause()
        assert not list(quiet.screen.query(Toast))
