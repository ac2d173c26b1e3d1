"""The dashboard against a real hub: real sockets, real reporters, a real Textual app.

Each test starts a hub in a thread, publishes with real :class:`Reporter`s and attaches the app
through a :class:`HubClient`, then checks what a person would see. Waits poll the screen with
generous bounds; nothing asserts a time.
"""

from __future__ import annotations

import pytest
from helpers import identity, serving
from tui_helpers import grid_text, strip_text, until, widget_text

from pardash.telemetry.analysis import Detector, LivenessConfig
from pardash.telemetry.client import HubClient
from pardash.telemetry.hub import Hub
from pardash.telemetry.reporter import Reporter
from pardash.tui.app import make_app
from pardash.tui.screens.memory import MemoryScreen
from pardash.tui.screens.quit import QuitScreen
from pardash.tui.screens.rank_detail import RankDetailScreen
from pardash.tui.widgets.alert_list import AlertList
from pardash.tui.widgets.rank_grid import RankGrid
from pardash.tui.widgets.run_header import RunHeader
from pardash.tui.widgets.selected_rank import SelectedRank

RUN = "tui-live"
SIZE = (120, 40)
GiB = 1 << 30


@pytest.fixture
def live_hub(tmp_path):
    """A hub serving in a thread, stopped and closed after the test.

    The ranks here publish a few steps, then only heartbeats: 5 s on (LivenessConfig's
    stall_min_s) the hub calls them stalled, and a loaded machine can take that long to show
    what a test checks ("running", a grid without flagged ranks). Likewise 3 s without a
    message (silent_s) when a loaded machine keeps the ranks' heartbeat threads from the GIL
    (this process also runs the app and the hub). Here a rank is stalled or silent only after
    minutes: no test here is about either (test_stragglers and test_detection are)."""
    hub = Hub(run_id=RUN, log_path=str(tmp_path / "telemetry.jsonl"))
    hub.core.detector = Detector(LivenessConfig(stall_min_s=600.0, silent_s=600.0))
    with serving(hub):
        yield hub


@pytest.fixture
def ranks(live_hub):
    """Two ranks on one node, said hello (FSDP over 2 ranks of a 1M-parameter model)."""
    reporters = []
    for r in range(2):
        rep = Reporter(live_hub.ingest_endpoint, run=RUN, identity=identity(r, 2), heartbeat_s=0.2)
        rep.hello(strategy="fsdp", backend="gloo", device="cpu", params_count=1_000_000, params_bytes=4_000_000)
        reporters.append(rep)
    yield reporters
    for rep in reporters:
        rep.close(linger_ms=0)


def publish_steps(reporters: list[Reporter], steps: range) -> None:
    from pardash.telemetry.schema import Mem

    for step in steps:
        for rep in reporters:
            rep.step(
                step=step,
                loss=2.0 - 0.01 * step,
                samples=8,
                step_s=0.05,
                data_s=0.002,
                forward_s=0.01,
                backward_s=0.02,
                optimizer_s=0.005,
                comm_s=0.01,
                self_s=0.02,
                mem=Mem(
                    params_bytes=2_000_000,
                    grads_bytes=2_000_000,
                    optim_bytes=4_000_000,
                    params_full_bytes=4_000_000,
                    grads_full_bytes=4_000_000,
                    optim_full_bytes=8_000_000,
                ),
            )


def attach(live_hub, **kw):
    client = HubClient(live_hub.updates_endpoint, live_hub.snapshot_endpoint)
    return make_app(client, **kw)


def grid_rows(app) -> dict[int, str]:
    """Rank -> the text of its cell line, from what the grid draws."""
    out = {}
    for line in grid_text(app).splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].isdigit():
            out[int(parts[0])] = line
    return out


async def test_grid_shows_both_ranks_with_their_steps(live_hub, ranks):
    app = attach(live_hub)
    async with app.run_test(size=SIZE) as pilot:
        publish_steps(ranks, range(12))
        # Rank 1's steps may land a frame after rank 0's: wait for both (the header's step is
        # the slowest rank's).
        await until(pilot, lambda: "step 11" in widget_text(app.screen.query_one(RunHeader)) and len(grid_rows(app)) == 2)
        rows = grid_rows(app)
        assert set(rows) == {0, 1}
        assert all("running" in line for line in rows.values()), rows
        assert "1.8900" in rows[0]  # loss of step 11
        header = widget_text(app.screen.query_one(RunHeader))
        assert RUN in header and "fsdp" in header and "2 ranks" in header
        assert "step 11" in header
        assert "node 0 · node0 · 2 ranks" in grid_text(app)


async def test_an_exiting_rank_changes_status_and_raises_an_alert(live_hub, ranks):
    app = attach(live_hub)
    async with app.run_test(size=SIZE) as pilot:
        publish_steps(ranks, range(3))
        # each rank has a socket of its own: wait until both ranks' steps are in before the exit,
        # or rank 0 may still read "starting" when rank 1's exit lands
        await until(pilot, lambda: [("running" in line) for line in grid_rows(app).values()] == [True, True])
        ranks[1].event("exit", code=3, step=2)
        await until(pilot, lambda: "exit 3" in grid_rows(app).get(1, ""))
        alerts = widget_text(app.screen.query_one(AlertList))
        assert "rank 1 exited with code 3" in alerts
        assert "running" in grid_rows(app)[0]


async def test_arrows_move_the_selection_and_enter_opens_the_detail(live_hub, ranks):
    app = attach(live_hub)
    async with app.run_test(size=SIZE) as pilot:
        publish_steps(ranks, range(5))
        await until(pilot, lambda: len(grid_rows(app)) == 2)
        grid = app.screen.query_one(RankGrid)
        assert grid.cursor_rank == 0
        await pilot.press("down")
        assert grid.cursor_rank == 1
        assert widget_text(app.screen.query_one(SelectedRank)).startswith("rank 1")
        await pilot.press("up")
        assert grid.cursor_rank == 0
        await pilot.press("end")
        assert grid.cursor_rank == 1
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RankDetailScreen))
        assert app.screen.rank == 1
        title = app.screen.query_one("#title")
        assert "rank 1" in str(title.render())
        await until(pilot, lambda: app.screen.query_one("#chart-loss").series is not None)
        await pilot.press("escape")
        assert not isinstance(app.screen, RankDetailScreen)


async def test_clicking_a_cell_selects_it_and_a_double_click_opens_it(live_hub, ranks):
    app = attach(live_hub)
    async with app.run_test(size=SIZE) as pilot:
        publish_steps(ranks, range(3))
        await until(pilot, lambda: len(grid_rows(app)) == 2)
        grid = app.screen.query_one(RankGrid)
        lines = grid_text(app).splitlines()
        y = next(i for i, line in enumerate(lines) if line.split()[:1] == ["1"])
        await pilot.click(RankGrid, offset=(3, y))
        assert grid.cursor_rank == 1
        await pilot.click(RankGrid, offset=(3, y - 1), times=2)  # a double click opens the detail
        await until(pilot, lambda: isinstance(app.screen, RankDetailScreen))
        assert app.screen.rank == 0


async def test_m_opens_the_memory_screen(live_hub, ranks):
    app = attach(live_hub)
    async with app.run_test(size=SIZE) as pilot:
        publish_steps(ranks, range(3))
        await until(pilot, lambda: len(grid_rows(app)) == 2)
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, MemoryScreen))
        screen = app.screen
        bars = screen.query_one("#bars")
        # a rank's row shows from its hello; its memory comes with its first step, maybe later
        await until(pilot, lambda: bars.savings is not None and len(bars.savings.ranks) == 2)
        lines = [strip_text(bars.render_line(y)) for y in range(2)]
        assert lines[0].split()[0] == "0" and "2.0× less" in lines[0]
        assert lines[1].split()[0] == "1"
        summary = widget_text(screen.query_one("#summary"))
        assert "saving" in summary and "2.0×" in summary
        await pilot.press("escape")
        assert not isinstance(app.screen, MemoryScreen)


async def test_filter_hides_clean_ranks(live_hub, ranks):
    app = attach(live_hub)
    async with app.run_test(size=SIZE) as pilot:
        publish_steps(ranks, range(3))
        ranks[0].event("exit", code=1, step=2)
        await until(pilot, lambda: "exit 1" in grid_rows(app).get(0, "") and len(grid_rows(app)) == 2)
        await pilot.press("f")
        assert set(grid_rows(app)) == {0}
        await pilot.press("f")
        assert set(grid_rows(app)) == {0, 1}


@pytest.mark.parametrize("choice", ["stop", "detach"])
async def test_q_on_a_launched_run_asks_and_returns_the_choice(live_hub, ranks, choice):
    chosen: list[str] = []
    app = attach(live_hub, launched=True, on_exit_choice=chosen.append)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitScreen))
        await pilot.press("escape")  # cancel keeps the dashboard
        assert not isinstance(app.screen, QuitScreen)
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitScreen))
        await pilot.click(f"#{choice}")
        await pilot.pause()
    assert app.return_value == choice
    assert chosen == [choice]


async def test_before_any_rank_the_header_says_it_waits_for_them(live_hub):
    # For the 20 s torchrun and the ranks' imports take, the header read "? · 0 ranks  step 0
    # elapsed 0s", standing still: it looked hung.
    app = attach(live_hub)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "waiting for the ranks to start · " in widget_text(app.screen.query_one(RunHeader)))
        assert "? · 0 ranks" not in widget_text(app.screen.query_one(RunHeader))


async def test_a_multi_node_launch_says_what_its_first_rank_waits_for(live_hub):
    # Node 0's TUI said only "waiting for the ranks to start" while torchrun's rendezvous
    # waited for node 1, where its headless lines say so and what to run on the other node.
    app = attach(live_hub)
    app.source.waiting_for = "torchrun's rendezvous waits for all 2 nodes: run this launch with --node-rank 1 on the other"
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "--node-rank 1 on the other" in widget_text(app.screen.query_one(RunHeader)))
        rep = Reporter(live_hub.ingest_endpoint, run=RUN, identity=identity(0, 1), heartbeat_s=0.2)
        try:
            rep.hello(strategy="ddp", backend="gloo", device="cpu")
            publish_steps([rep], range(2))
            await until(pilot, lambda: "step 1" in widget_text(app.screen.query_one(RunHeader)))
            assert "rendezvous" not in widget_text(app.screen.query_one(RunHeader))  # (once a rank spoke: said no more)
        finally:
            rep.close(linger_ms=0)


async def test_the_dashboard_behind_the_help_stays_live(live_hub, ranks):
    # Under the help or the quit dialog the dashboard stood still (the header kept its step
    # for as long as the modal was open), then jumped.
    from pardash.tui.screens.help import HelpScreen

    app = attach(live_hub)
    async with app.run_test(size=SIZE) as pilot:
        publish_steps(ranks, range(3))
        await until(pilot, lambda: "step 2" in widget_text(app.screen.query_one(RunHeader)))
        dashboard = app.screen
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        publish_steps(ranks, range(3, 8))
        await until(pilot, lambda: "step 7" in widget_text(dashboard.query_one(RunHeader)))
        assert isinstance(app.screen, HelpScreen)


async def test_a_hub_gone_silent_is_no_all_clear(live_hub, ranks):
    # With its hub killed the viewer went on saying "every rank is healthy" from stale figures.
    app = attach(live_hub)
    async with app.run_test(size=SIZE) as pilot:
        publish_steps(ranks, range(3))
        alerts = app.screen.query_one(AlertList)
        await until(pilot, lambda: "every rank is healthy" in widget_text(alerts))
        live_hub.stop()
        await until(pilot, lambda: "no word from the hub for " in widget_text(alerts))
        assert "healthy" not in widget_text(alerts)


async def test_q_on_an_attached_run_just_quits(live_hub, ranks):
    app = attach(live_hub)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value == "quit"


async def test_grid_refreshes_per_poll_not_per_message(live_hub, ranks, monkeypatch):
    """A burst of messages costs a bounded number of grid refreshes: the app draws what the
    hub's frames (at most 10 a second) carry, never once per message."""
    # (A hub quiet for seconds, on a loaded machine, has the app redraw for its "hub quiet"
    # counter too, with no frame: not this test's count.)
    monkeypatch.setattr("pardash.tui.app.HUB_QUIET_S", 1e9)
    app = attach(live_hub)
    async with app.run_test(size=SIZE) as pilot:
        publish_steps(ranks, range(2))
        await until(pilot, lambda: len(grid_rows(app)) == 2)
        grid = app.screen.query_one(RankGrid)
        calls = 0
        update = grid.update_rows

        def counting(rows):
            nonlocal calls
            calls += 1
            update(rows)

        grid.update_rows = counting
        # The frames the app took meanwhile: however long the hub takes to pass on the burst
        # (a loaded machine: more frames), each poll redraws the grid once for all the frames
        # it took, so the grid is redrawn at most once a frame, not once a message.
        source = app.source
        applied = 0
        apply_frame = source.apply_frame

        def applying(frame):
            nonlocal applied
            applied += 1
            apply_frame(frame)

        source.apply_frame = applying
        synced = source.snapshots
        messages = 2 * 1500
        publish_steps(ranks, range(2, 1502))
        await until(pilot, lambda: "step 1501" in widget_text(app.screen.query_one(RunHeader)))
        frames = applied + source.snapshots - synced  # (a missed frame: a snapshot instead)
        assert 0 < calls <= frames < messages, (calls, frames)


async def test_a_ranks_detail_shows_what_the_script_logged(live_hub, ranks):
    # pt.log(grad_norm=..., tokens=...) reached the log only: the demo promised the TUI too.
    app = attach(live_hub)
    async with app.run_test(size=SIZE) as pilot:
        publish_steps(ranks, range(2))
        ranks[0].step(step=2, loss=1.5, samples=8, step_s=0.05, custom={"grad_norm": 0.25, "tokens": 512.0})
        await until(pilot, lambda: "1.5000" in grid_rows(app).get(0, ""))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RankDetailScreen))
        logged = app.screen.query_one("#logged")
        await until(pilot, lambda: "grad_norm" in widget_text(logged))
        assert "grad_norm  0.25" in widget_text(logged) and "tokens" in widget_text(logged) and "512" in widget_text(logged)
        assert logged.display
        await pilot.press("n")  # rank 1 logged nothing: no panel
        await until(pilot, lambda: isinstance(app.screen, RankDetailScreen) and app.screen.rank == 1)
        await pilot.pause()
        assert not app.screen.query_one("#logged").display
