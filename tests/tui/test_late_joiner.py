"""A viewer that attaches late shows what a viewer attached from the start shows (issue 3).

1024 simulated ranks publish through real reporters into a real hub process. Viewer A attaches
before the job starts and runs the dashboard all along; viewer B attaches a few seconds in. Once
B has its snapshot and one frame after it ("within a second": the hub frames at 10 Hz), both
clients are brought to the same frame and compared: every rank's status, last step, loss and
history columns, then the rank grid each app draws (heat map, cells, and the cells at the end).
Nothing here asserts a time: waits are generous bounds.
"""

from __future__ import annotations

import re
import threading

import pytest
from tui_helpers import grid_text, until

from pardash.telemetry.client import HubClient
from pardash.telemetry.simulate import SimConfig, SimulatedJob
from pardash.telemetry.spawn import spawn_hub
from pardash.tui.app import make_app
from pardash.tui.grid_layout import LEVEL_GLYPHS
from pardash.tui.widgets.rank_grid import RankGrid

RUN = "late-joiner"
RANKS = 1024
SIZE = (120, 40)


class Gated:
    """A source the test can hold still: while ``held``, the app's polls read nothing new, and
    report a change once after :meth:`changed` (so the app redraws what the test applied)."""

    def __init__(self, client: HubClient, *, held: bool = False) -> None:
        self.client = client
        self.held = held
        self._changed = False

    def __getattr__(self, name: str):
        return getattr(self.client, name)

    def changed(self) -> None:
        self._changed = True

    def poll(self) -> bool:
        if not self.held:
            return self.client.poll()
        changed, self._changed = self._changed, False
        return changed

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def hub(tmp_path):
    proc, info = spawn_hub(["--run-id", RUN, "--log", str(tmp_path / "telemetry.jsonl"), "--no-registry"])
    yield info
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def job(hub):
    """1024 ranks at 5 steps a second (a hub on a busy test machine keeps up), publishing from
    a thread until the test ends."""
    sim = SimulatedJob(SimConfig(ranks=RANKS, rate_hz=5.0), hub["ingest"], RUN)
    stop = threading.Event()
    thread = threading.Thread(target=sim.run, args=(stop.is_set,), daemon=True)
    yield thread, stop
    stop.set()
    if thread.is_alive():
        thread.join(10)
    sim.close()


def client(hub) -> HubClient:
    return HubClient(hub["updates"], hub["snapshot"], run_id=RUN)


def every_rank_charted(c: HubClient, points: int) -> bool:
    """Every rank has stepped in at least ``points`` frames (one history point per frame)."""
    ranks = c.state.ranks
    return len(ranks) == RANKS and all(len(r.history["step"]) >= points for r in ranks.values())


def rank_facts(c: HubClient) -> dict[int, tuple]:
    """What a person sees of each rank, and the history its charts draw."""
    out = {}
    for rank, r in c.state.ranks.items():
        step = r.step
        out[rank] = (
            r.status,
            r.exit_code,
            step.step if step else None,
            step.loss if step else None,
            {name: ring.to_bytes() for name, ring in r.history.items()},
        )
    return out


async def grid_views(app, pilot) -> list[str]:
    """The grid as drawn: the 1024 ranks' heat map, then cells from the top and at the end."""
    grid = app.screen.query_one(RankGrid)
    views = [grid_text(app)]
    await pilot.press("c")
    await pilot.pause()
    views.append(grid_text(app))
    await pilot.press("end")
    await pilot.pause()
    views.append(grid_text(app))
    assert grid.cursor_rank == RANKS - 1
    return views


async def test_a_late_viewer_shows_what_an_early_one_shows(hub, job):
    thread, stop = job
    early = Gated(client(hub))
    app_a = make_app(early)
    async with app_a.run_test(size=SIZE) as pilot:
        thread.start()
        # A follows the job frame by frame for a few seconds (its rows' smoothing included).
        await until(pilot, lambda: every_rank_charted(early.client, 5))
        late = client(hub)
        early.held = True
        # Bring both to one frame: B's snapshot plus at least one frame after it, A at the same.
        a, b = early.client, late
        for _ in range(4000):
            a.poll()
            b.poll()
            if b.synced and b.frames_applied >= 1 and a.fseq == b.fseq:
                break
            await pilot.pause(0.01)
        else:
            raise AssertionError("the late viewer never caught up")
        stop.set()
        assert b.snapshots >= 1 and b.fseq > b.frames_applied  # it did start from a snapshot
        facts_a, facts_b = rank_facts(a), rank_facts(b)
        assert set(facts_a) == set(facts_b) == set(range(RANKS))
        for rank in range(RANKS):
            assert facts_a[rank][:4] == facts_b[rank][:4], f"rank {rank}"
            assert facts_a[rank][4] == facts_b[rank][4], f"rank {rank}'s history"
        assert every_rank_charted(b, 5)  # B's charts start with the history, not empty
        early.changed()  # A draws the frame it was brought to
        await until(pilot, lambda: app_a.screen.query_one(RankGrid).rows[0].step == facts_a[0][2])
        await pilot.pause()
        views_a = await grid_views(app_a, pilot)

    app_b = make_app(Gated(late, held=True))
    async with app_b.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app_b.screen.query_one(RankGrid).rows) == RANKS)
        await pilot.pause()
        views_b = await grid_views(app_b, pilot)

    assert re.search(f"1008 [{''.join(LEVEL_GLYPHS)}]", views_a[0]) and "running" in views_a[1]  # the views hold what they should (the last row of the map)
    for view_a, view_b in zip(views_a, views_b, strict=True):
        assert view_a.splitlines() == view_b.splitlines()
