"""Helpers for the TUI tests: recorded runs to replay and reading what is on screen."""

from __future__ import annotations

from pathlib import Path

from pardash.telemetry.client import FrameApplier

DATA = Path(__file__).resolve().parent / "data"


def replay_at_end(name: str):
    """A ReplaySource over tests/tui/data/<name>, seeked to the end and paused, so what is
    drawn depends on the recording only."""
    from pardash.telemetry.client import ReplaySource

    src = ReplaySource(str(DATA / name))
    src.seek(src.duration_s)
    src.paused = True
    return src


def replay_app(name: str, **kw):
    from pardash.tui.app import make_app

    return make_app(replay_at_end(name), **kw)


def replay_running_app(name: str, **kw):
    """The app over tests/tui/data/<name> paused a frame before its end, its ranks still running
    there: the dashboard as it was while the run went on. (At their end run4, straggler8 and
    run1024 say their hub stopped under running ranks, on a third header line.)"""
    from pardash.telemetry.client import ReplaySource
    from pardash.tui.app import make_app

    src = ReplaySource(str(DATA / name))
    src.seek(src.duration_s - src.frame_s)
    src.paused = True
    return make_app(src, **kw)


def strip_text(strip) -> str:
    return "".join(seg.text for seg in strip)


def grid_text(app) -> str:
    """The rank grid's visible lines, as a person reads them."""
    from pardash.tui.widgets.rank_grid import RankGrid

    grid = app.screen.query_one(RankGrid)
    return "\n".join(strip_text(grid.render_line(y)) for y in range(grid.size.height))


def widget_text(widget) -> str:
    """Plain text of a widget that renders with render()."""
    rendered = widget.render()
    return getattr(rendered, "plain", str(rendered))


async def until(pilot, pred, timeout_s: float = 60.0) -> None:
    """Let the app run until ``pred()`` holds (what it waits for comes with a timer of the app's
    or a hub's frames); fails the test after a generous bound (not a timing claim)."""
    import time

    end = time.monotonic() + timeout_s
    await pilot.pause()
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await pilot.pause(0.05)


async def settled(pilot, timeout_s: float = 60.0) -> None:
    """Let the app run until its layout holds still: every widget's region the same after
    one more pause. A fit done after a refresh (the side panels fitted to the alerts' lines,
    which the first frame brings) can take more than one pause on a loaded machine, where a
    test that read the layout after one saw the panels mid-fit."""
    import time

    def regions():
        return [(id(w), w.region, w.display) for w in pilot.app.screen.walk_children()]

    end = time.monotonic() + timeout_s
    await pilot.pause()
    before = regions()
    while True:
        await pilot.pause(0.05)
        now = regions()
        if now == before:
            return
        if time.monotonic() > end:
            raise AssertionError(f"the layout still moved after {timeout_s} s")
        before = now


class Fed(FrameApplier):
    """A live source whose poll reports the frames the test applied (as a hub client does:
    any frame is a change, whatever it brought); a test sets ``pending`` with each frame."""

    live = True
    synced = True
    pending = False

    def poll(self) -> bool:
        changed, self.pending = self.pending, False
        return changed

    def close(self) -> None:
        pass


def counting_redraws(screen) -> list[int]:
    """``screen``'s refresh_run counted: the list's one number is how many times it ran since."""
    count = [0]
    refresh_run = screen.refresh_run

    def counting() -> None:
        count[0] += 1
        refresh_run()

    screen.refresh_run = counting
    return count
