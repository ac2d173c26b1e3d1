"""A rank ended by a stop (Ctrl-C, the TUI's Stop, a viewer's stop, SIGTERM: an exit code of
failures.STOPPED_CODES) is said "stopped" by the header and the grid, as the report, Prometheus
and the headless progress say it; it read "× 2 exited" and "exit -15" in the failure's red
(helper 265, after a DDP run stopped from an attached viewer)."""

from __future__ import annotations

from tui_helpers import grid_text, replay_app, widget_text

from pardash.telemetry import schema
from pardash.telemetry.state import RunState
from pardash.tui.alerts import run_alerts
from pardash.tui.widgets.alert_list import AlertList
from pardash.tui.widgets.rank_grid import RankGrid
from pardash.tui.widgets.run_header import RunHeader

SIZE = (140, 40)
T = 1.7e9


def _log(path, exits: dict[int, tuple[int, str]], *, ranks: int = 2, error: int | None = None) -> str:
    """``ranks`` DDP ranks taking steps 1-20, then each rank of ``exits`` ending with (code,
    the launcher's note of it); ``error``: a rank whose own error comes first."""
    msgs: list = [schema.Hello(run="s", rank=r, world_size=ranks, strategy="ddp", seq=0, t=T) for r in range(ranks)]
    msgs += [
        schema.Step(run="s", rank=r, step=s, seq=s, loss=1.0, samples=8, step_s=0.02, self_s=0.002, comm_s=0.01, t=T + s * 0.02)
        for s in range(1, 21)
        for r in range(ranks)
    ]  # fmt: skip
    if error is not None:
        msgs.append(schema.Event(run="s", rank=error, seq=21, name="error", step=21, t=T + 1, message="ValueError: bad batch"))
    for r, (code, note) in exits.items():
        msgs.append(schema.Event(run="s", rank=r, seq=-1, name="exit", code=code, message=note, t=T + 2))
    path.write_bytes(schema.encode_json_lines(msgs))
    return str(path)


def _status_segments(app, rank: int) -> list:
    """The grid's segments on the line of ``rank``'s cell that hold its status."""
    grid = app.screen.query_one(RankGrid)
    y = grid.layout.where[rank][0] + grid.head_lines
    return [seg for seg in grid.render_line(y) if seg.text.strip() and not seg.text.strip()[0].isdigit()]


def _two_stopped(app) -> None:
    """The header and the grid say both ranks stopped, not exited (a failure's word)."""
    header = widget_text(app.screen.query_one(RunHeader))
    assert "▬ 2 stopped" in header and "exited" not in header, header
    grid = grid_text(app)
    assert grid.count(" stopped ") == 2 and "exit -15" not in grid, grid


async def test_ranks_stopped_by_a_viewer_are_said_stopped_in_the_header_and_the_grid(tmp_path):
    note = "stopped by a viewer (pardash attach, pid 15234)"
    app = replay_app(_log(tmp_path / "stopped.jsonl", {0: (-15, note), 1: (-15, note)}))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        _two_stopped(app)
        # Not in the failure's colour: the grid's exited style is the error colour.
        grid_widget = app.screen.query_one(RankGrid)
        error = grid_widget._style("rank-grid--exited").color
        (status,) = [seg for seg in _status_segments(app, 1) if "stopped" in seg.text]
        assert status.style.color != error, status
        # The line under the grid too (it said "rank 0 · exited -15 · ...").
        from pardash.tui.widgets.selected_rank import SelectedRank

        line = widget_text(app.screen.query_one(SelectedRank))
        assert " · stopped (SIGTERM) · " in line and "exited" not in line, line
        await pilot.press("c")  # the heat map: its own glyph, and the legend says it
        await pilot.pause()
        heat = grid_text(app).splitlines()
        assert "▬ stopped" in heat[0], heat  # (the legend)
        ranks = [line for line in heat if line.strip().startswith("0 ")]
        assert [line.split() for line in ranks] == [["0", "▬▬"]], heat


async def test_a_failure_and_the_rank_torchrun_stopped_after_it_are_told_apart(tmp_path):
    # rank 1 failed; torchrun stopped rank 0 (SIGTERM), as the report says it: "stopped"
    log = _log(tmp_path / "failed.jsonl", {1: (1, ""), 0: (-15, "stopped by torchrun")}, error=1)
    app = replay_app(log)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        header = widget_text(app.screen.query_one(RunHeader))
        assert "× 1 exited  ▬ 1 stopped" in header, header
        lines = {int(line.split()[0]): line for line in grid_text(app).splitlines() if line.strip()[:1].isdigit()}
        assert lines[1].split()[1:3] == ["exit", "1"] and lines[0].split()[1] == "stopped", lines
        grid = app.screen.query_one(RankGrid)
        grid.select(1)  # (the cursor's colours over rank 0's cell: its own drawn)
        await pilot.pause()
        (status,) = [seg for seg in _status_segments(app, 0) if "stopped" in seg.text]
        assert status.style.color not in (grid._style("rank-grid--exited").color, grid._style("rank-grid--exited-after").color)


async def _flagged_only(app, pilot) -> list[int]:
    """The ranks the grid lists once `f` (flagged only) is pressed."""
    await pilot.pause()
    await pilot.press("f")
    await pilot.pause()
    return [int(line.split()[0]) for line in grid_text(app).splitlines() if line.strip()[:1].isdigit()]


async def test_flagged_only_keeps_the_failure_not_the_ranks_torchrun_stopped_after_it(tmp_path):
    # Review 294: after one rank of 4096 failed, "flagged only" (f) listed every rank, the 4,095
    # torchrun stopped beside it with it: it filtered nothing. The alerts still say them.
    log = _log(tmp_path / "failed.jsonl", {1: (1, ""), 0: (-15, "stopped by torchrun"), 2: (-15, "stopped by torchrun")}, ranks=3, error=1)
    app = replay_app(log)
    async with app.run_test(size=SIZE) as pilot:
        assert await _flagged_only(app, pilot) == [1], grid_text(app)
        alerts = widget_text(app.screen.query_one(AlertList))
        assert "stopped by torchrun" in alerts, alerts


async def test_flagged_only_keeps_a_hangs_cause_not_the_ranks_waiting_for_it(tmp_path):
    # Review 298: in a hang of 1024 ranks, `f` left all 1,016 waiting ranks beside the 8 stalled
    # that held them (a node hung): it filtered nothing a person needed filtered.
    msgs: list = [schema.Hello(run="s", rank=r, world_size=3, strategy="ddp", seq=0, t=T) for r in range(3)]
    msgs += [schema.Step(run="s", rank=r, step=s, seq=s, loss=1.0, samples=8, step_s=0.02, self_s=0.002, comm_s=0.01, t=T + s * 0.02)
             for s in range(1, 21) for r in range(3)]  # fmt: skip
    for r in range(3):
        cause = "data" if r == 1 else "sync"
        msgs.append(schema.Verdict(run="s", rank=r, seq=-1, verdict="stalled", cause=cause, step=20, t=T + 9,
                                   message=f"rank {r} stalled in {cause} after step 20"))  # fmt: skip
    log = tmp_path / "hung.jsonl"
    log.write_bytes(schema.encode_json_lines(msgs))
    app = replay_app(str(log))
    async with app.run_test(size=SIZE) as pilot:
        assert await _flagged_only(app, pilot) == [1], grid_text(app)


def _state_stopped_on_another_node(how: str) -> RunState:
    st = RunState(run_id="s")
    for r in range(2):
        st.apply(schema.Hello(run="s", rank=r, world_size=2, node=r, host="h", seq=0, t=1.0), 0.0)
        st.apply(schema.Step(run="s", rank=r, seq=1, step=4, step_s=0.1, t=2.0), 0.0)
    for r in range(2):
        st.apply(schema.Event(run="s", rank=r, seq=-1, name="exit", code=-15, message=f"stopped by {how}", t=3.0), 0.0)
    return st


def test_a_stop_whose_words_name_its_signal_does_not_name_it_again():
    # "rank 1 was stopped by SIGTERM on node 1 (h) at step 5 (SIGTERM)"
    texts = [a.text for a in run_alerts(_state_stopped_on_another_node("SIGTERM on node 1 (h)")) if a.rank == 1]
    assert texts == ["rank 1 was stopped by SIGTERM on node 1 (h) at step 5"]
    # Words that name no signal keep it named: who stopped it, and how.
    texts = [a.text for a in run_alerts(_state_stopped_on_another_node("the viewer on node 0 (h)")) if a.rank == 1]
    assert texts == ["rank 1 was stopped by the viewer on node 0 (h) at step 5 (SIGTERM)"]


async def test_the_alert_list_draws_a_stop_with_the_grids_glyph(tmp_path):
    note = "stopped by you"
    app = replay_app(_log(tmp_path / "stopped.jsonl", {0: (-2, note), 1: (-2, note)}))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        alerts = widget_text(app.screen.query_one(AlertList))
        assert "▬ rank 0 was stopped by you at step 21 (SIGINT)" in alerts, alerts
        assert "■" not in alerts  # (the heat map's running rank)


async def test_the_root_cause_stopped_as_it_hung_is_said_stopped_after_its_hang(tmp_path):
    # Rank 2 stalled in its data loader, ranks 0-1 failed on gloo's timeout waiting for it, and
    # torchrun stopped rank 2 (SIGTERM): the alerts name it the root cause, its hang first, then
    # its stop as every output words it; the header and the grid say "stopped" of it, as the
    # report's rank table and Prometheus do (it read "× 3 exited" over its "exit -15", in red,
    # and "; then exited with code -15 at step 30: stopped by torchrun").
    from test_replay import _hang_log

    log = tmp_path / "hang.jsonl"
    _hang_log(log, timed_out=True)
    with open(log, "ab") as f:
        f.write(schema.encode_json_lines([schema.Event(run="h", rank=2, seq=-1, name="exit", code=-15, message="stopped by torchrun", t=T + 27)]))
    app = replay_app(str(log))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        alerts = " ".join(widget_text(app.screen.query_one(AlertList)).split())
        assert alerts.startswith("◆ rank 2, the root cause, stalled in data after step 29; then stopped by torchrun at step 30 (SIGTERM) ×"), alerts
        assert "× 2 exited  ▬ 1 stopped" in widget_text(app.screen.query_one(RunHeader))
        lines = {int(line.split()[0]): line for line in grid_text(app).splitlines() if line.strip()[:1].isdigit()}
        assert lines[2].split()[1] == "stopped" and lines[0].split()[1:3] == ["exit", "1"], lines


def _hung_then_stopped_log(path) -> str:
    """Two DDP ranks: rank 1 stalls in its data loader after step 20, rank 0 in its sync waiting
    for it (the hub's verdicts), then both are stopped by SIGTERM as they hung (a `kill -TERM`
    of the launch: its note "stopped by SIGTERM" of each), as a real run with --inject-stall
    1@20 records them."""
    msgs: list = [schema.Hello(run="s", rank=r, world_size=2, strategy="ddp", seq=0, t=T) for r in range(2)]
    msgs += [
        schema.Step(run="s", rank=r, step=s, seq=s, loss=1.0, samples=8, step_s=0.02, self_s=0.002, comm_s=0.01, t=T + s * 0.02)
        for s in range(1, 21)
        for r in range(2)
    ]  # fmt: skip
    for r, phase in ((1, "data"), (0, "sync")):
        msgs.append(schema.Verdict(run="s", rank=r, seq=-1, verdict="stalled", cause=phase, step=20,
                                   message=f"rank {r} stalled in {phase} after step 20 (5 s without progress)", t=T + 6))  # fmt: skip
    msgs += [schema.Event(run="s", rank=r, seq=-1, name="exit", code=-15, message="stopped by SIGTERM", t=T + 40) for r in range(2)]
    path.write_bytes(schema.encode_json_lines(msgs))
    return str(path)


async def test_a_hangs_cause_stopped_as_it_hung_is_stopped_in_the_header_grid_and_alert(tmp_path):
    # Review 266: the launch's headless progress said "2 stopped", the report's rank table and
    # Prometheus "stopped" of both; the TUI "× 1 exited  ▬ 1 stopped", rank 1's cell "exit -15"
    # in red, its alert "...; then exited with code -15 at step 21: stopped by SIGTERM". Its hang
    # is still said as the hang: its stall alert first, named the likely cause.
    app = replay_app(_hung_then_stopped_log(tmp_path / "hung.jsonl"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        _two_stopped(app)
        grid_widget = app.screen.query_one(RankGrid)
        error = grid_widget._style("rank-grid--exited").color
        grid_widget.select(0)  # (the cursor's colours over rank 1's cell: its own drawn)
        await pilot.pause()
        (status,) = [seg for seg in _status_segments(app, 1) if "stopped" in seg.text]
        assert status.style.color != error, status
        alerts = widget_text(app.screen.query_one(AlertList)).splitlines()
        said = " ".join(" ".join(alerts).split())
        assert said.startswith("◆ rank 1 stalled in data after step 20, likely the cause: 1 other waited for it;"
                               " then stopped by SIGTERM at step 21 ▬ rank 0 stalled in sync after step 20;"
                               " then stopped by SIGTERM at step 21"), said  # fmt: skip
        # (and sorted by status, the cause first, as before)
        from pardash.tui.model import SORT_KEYS

        await pilot.press(*["s"] * SORT_KEYS.index("status"))
        await pilot.pause()
        first = [line for line in grid_text(app).splitlines() if line.strip()[:1].isdigit()][0]
        assert first.split()[:2] == ["1", "stopped"], first


async def test_the_header_says_how_a_stopped_job_ended_once_its_hub_is_quiet(tmp_path):
    # It read "job ended: 2 ranks exited" of a job stopped with Ctrl-C.
    from pardash.tui.widgets.run_header import RunSummary

    app = replay_app(_log(tmp_path / "any.jsonl", {}))
    async with app.run_test(size=SIZE) as pilot:
        header = app.screen.query_one(RunHeader)
        said = []
        for counts in ((("stopped", 2),), (("exited", 1), ("stopped", 1)), (("finished", 2),)):
            header.summary = RunSummary(run_id="s", strategy="ddp", world_size=2, status_counts=counts, hub_quiet_s=6.0)
            await pilot.pause()
            said.append(header._text(120).plain.splitlines()[1])
        assert [line.split("   ")[:2] for line in said] == [
            ["▬ 2 stopped", "job ended: 2 ranks stopped"],
            ["× 1 exited  ▬ 1 stopped", "job ended: 1 rank exited, 1 stopped"],
            ["□ 2 finished", "job ended: every rank finished"],
        ], said
