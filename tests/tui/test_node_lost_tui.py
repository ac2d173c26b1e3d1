"""A node > 0's launch with its TUI, node 0 lost: review 258 found node 1's TUI saying "● 2
running · hub quiet for 106 s" for minutes of node 0 powered off (its headless progress says
node 0's hub is unreachable, since 007eaa7). The TUI says it too: the header, and a warning."""

from __future__ import annotations

import time

from tui_helpers import Fed, until

from pardash.telemetry import schema
from pardash.telemetry.client import NullDetector
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.printer import HUB_LOST_S
from pardash.tui.app import make_app
from pardash.tui.widgets.run_header import RunHeader

RUN = "nodes"
NODE0 = "tcp://10.0.0.1:29600"


def _two_ranks_running() -> Fed:
    core = HubCore(run_id=RUN, detector=NullDetector())  # type: ignore[arg-type]
    viewer = Fed()
    for r in (2, 3):  # (node 1's ranks)
        core.replay(schema.Hello(rank=r, world_size=4, strategy="ddp", run=RUN, t=1000.0), 1000.0)
    for s in range(1, 6):
        for r in (2, 3):
            core.replay(schema.Step(rank=r, step=s, loss=1.0, samples=8, step_s=0.1, run=RUN, t=1000.0 + s), 1000.0 + s)
        viewer.apply_frame(core.tick(1000.1 + s))
    viewer.pending = True
    return viewer


async def test_node_1s_tui_says_node_0s_hub_is_unreachable_not_quiet():
    app = make_app(_two_ranks_running(), remote_hub=NODE0)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        header = app.screen.query_one(RunHeader)
        assert "running" in header.render().plain and "unreachable" not in header.render().plain
        # Node 0's hub silent past HUB_LOST_S (the app's clock of its last frame set back: no
        # waiting in a test).
        app._last_change = time.monotonic() - HUB_LOST_S - 5
        await until(pilot, lambda: "unreachable" in header.render().plain)
        text = " ".join(header.render().plain.split())
        assert f"node 0's hub ({NODE0}) unreachable for" in text and "node 0 may be lost, the ranks here then wait for it" in text, text
        assert "● 2 running when last heard" in text and "hub quiet" not in text, text
        # At 80 columns, its shorter form: the address goes first.
        narrow = " ".join(header._text(78).plain.split())
        assert "node 0's hub unreachable for" in narrow and NODE0 not in narrow, narrow
        await until(pilot, lambda: bool(app._notifications))
        (note,) = list(app._notifications)
        assert note.title == "node 0 unreachable" and note.severity == "warning"
        assert note.message.startswith(f"node 0's hub ({NODE0}) unreachable for") and "what they do from now on is in no log" in note.message


async def test_a_viewer_of_node_0s_own_hub_says_it_quiet_as_before():
    # (attach, or node 0's own launch: no node 0 to lose)
    app = make_app(_two_ranks_running())
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        header = app.screen.query_one(RunHeader)
        app._last_change = time.monotonic() - HUB_LOST_S - 5
        await until(pilot, lambda: "hub quiet for" in header.render().plain)
        assert "unreachable" not in header.render().plain and "when last heard" not in header.render().plain
        assert not list(app._notifications)


async def test_a_job_whose_torchrun_ended_before_any_rank_says_no_rank_started():
    # Review 275: the loser of two launches given one --master-port (torchrun could not listen
    # on it): its TUI read "waiting for the ranks to start · 18 s" and "waiting for ranks…", the
    # counter climbing on beside "job ended: torchrun exited".
    from pardash.tui.widgets.alert_list import AlertList

    app = make_app(Fed(), launched=True, job_over=lambda: True)
    async with app.run_test(size=(120, 40)) as pilot:
        header = app.screen.query_one(RunHeader)
        await until(pilot, lambda: "job ended" in header.render().plain)
        text = " ".join(header.render().plain.split())
        assert "no rank started" in text and "waiting for the ranks" not in text, text
        alerts = app.screen.query_one(AlertList)
        await until(pilot, lambda: "no rank started" in alerts.calm)
        assert alerts.calm == "⚠ no rank started: torchrun exited first (o: its output; q: why)"
