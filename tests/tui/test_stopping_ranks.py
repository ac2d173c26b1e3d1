"""Ranks the launcher began stopping, not ended yet, are drawn "stopping" (◐) by the grid and
counted so by the header: a stop whose ranks take seconds to end (a SIGTERM handler that saves
for 8 s) read "● 2 running" and "running" cells under the events' "ranks 0-1 being stopped by
SIGTERM", where the headless progress line said "2 stopping". The records are shaped as a real
`pardash launch --headless` of such a script, killed with SIGTERM, recorded them: the launcher's
"stopping" notes (seq -1, dated when the stop began), the ranks' heartbeats for the 8 s their
handlers took, then the launcher's exit notes (dated when the stop began too)."""

from __future__ import annotations

import re

import msgspec
from tui_helpers import grid_text, widget_text

from pardash.telemetry import schema
from pardash.telemetry import state as st
from pardash.tui.model import STOPPED, STOPPING, RowBuilder, run_totals, sort_rows

T = 1.7e9
STOP_T = T + 2.1
"""When the stop began (the ranks' steps end at step 100, 2.0 s in)."""


def _slow_stop(ranks: int = 2, *, stopped: tuple[int, ...] | None = None) -> list[schema.Message]:
    """``ranks`` DDP ranks take steps 1-100, then the launcher stops ``stopped`` (all: None) by
    SIGTERM; their handlers take 8 s (heartbeats at step 100), then each exits -15."""
    stopped = tuple(range(ranks)) if stopped is None else stopped
    msgs: list[schema.Message] = [
        schema.Hello(run="s", rank=r, world_size=ranks, strategy="ddp", seq=0, t=T) for r in range(ranks)
    ]
    msgs += [
        schema.Step(run="s", rank=r, step=s, seq=s, loss=1.0, samples=8, step_s=0.02, self_s=0.012, comm_s=0.005, t=T + s * 0.02)
        for s in range(1, 101)
        for r in range(ranks)
    ]  # fmt: skip
    msgs += [schema.Event(run="s", rank=r, seq=-1, name="stopping", message="by SIGTERM", t=STOP_T) for r in stopped]
    seq = 101
    for k in range(1, 9):
        msgs += [schema.Heartbeat(run="s", rank=r, seq=seq, step=100, phase="sync", t=STOP_T + k) for r in range(ranks)]
        seq += 1
    msgs += [schema.Event(run="s", rank=r, seq=-1, name="exit", code=-15, message="stopped by SIGTERM", t=STOP_T) for r in stopped]
    return [msgspec.structs.replace(m, hseq=i + 1) for i, m in enumerate(msgs)]


def _state(msgs: list[schema.Message], *, until: str = "exit") -> st.RunState:
    """The state of ``msgs`` applied up to (not including) the first message named ``until``."""
    state = st.RunState()
    for m in msgs:
        if isinstance(m, schema.Event) and m.name == until:
            break
        state.apply(m, m.t)
    return state


def test_ranks_being_stopped_are_counted_and_drawn_stopping_until_they_end():
    msgs = _slow_stop()
    before = _state(msgs, until="stopping")
    builder = RowBuilder()
    assert builder.update(before).totals.status_counts == {st.RUNNING: 2}
    # The stop began: its 8 s read "● 2 running" and "running" cells.
    during = _state(msgs)
    builder = RowBuilder()
    totals = builder.update(during).totals
    assert totals.status_counts == {STOPPING: 2}
    assert run_totals(during).status_counts == {STOPPING: 2}  # (the header's, without a grid)
    assert [(row.status, row.stopping, row.stopped) for row in builder.rows()] == [(st.RUNNING, True, False)] * 2
    assert [builder.heat_key(r)[0] for r in (0, 1)] == [STOPPING, STOPPING]
    # Ended: stopped, no more stopping.
    after = _state(msgs, until="(none)")
    builder.update(after)
    assert builder.totals.status_counts == {STOPPED: 2} == run_totals(after).status_counts
    assert [(row.stopping, row.stopped) for row in builder.rows()] == [(False, True)] * 2


def test_a_rank_turning_stopping_is_redrawn_and_the_others_keep_running():
    # One node of two stopped (Ctrl-C on node 1): its rank stopping, the other running. The
    # builder fed frame by frame marks the rank whose glyph changed (a heat map redraws it).
    msgs = _slow_stop(stopped=(1,))
    state = st.RunState()
    builder = RowBuilder()
    for m in msgs:
        if isinstance(m, schema.Event) and m.name == "stopping":
            builder.update(state)
            state.apply(m, m.t)
            builder.update(state)
            assert builder.changed == {1}
            break
        state.apply(m, m.t)
    assert builder.totals.status_counts == {st.RUNNING: 1, STOPPING: 1}
    # A sort by status puts it among the ones that need no look (after a stop, before running).
    rows = builder.rows()
    assert [row.rank for row in sort_rows(rows, "status")] == [1, 0]


def test_a_rank_saving_as_it_is_stopped_is_said_saving_and_a_stalled_one_stays_stalled():
    # What the stop waits for (its SIGTERM handler's save) says more than "stopping", as the
    # headless progress line says it; a hang found before the stop stays the hang.
    msgs = _slow_stop()
    state = _state(msgs)
    state.apply(schema.Heartbeat(run="s", rank=0, seq=200, step=100, phase="checkpoint", t=STOP_T + 8.5), STOP_T + 8.5)
    state.ranks[1].stalled = schema.Verdict(run="s", rank=1, seq=-1, verdict="stalled", cause="data", step=100, t=STOP_T - 1)
    builder = RowBuilder().update(state)
    assert builder.totals.status_counts == {"saving": 1, st.STALLED: 1}
    assert [row.stopping for row in builder.rows()] == [False, False]


async def test_the_header_and_the_grid_say_stopping_during_a_slow_stop(tmp_path):
    from pardash.telemetry.client import ReplaySource
    from pardash.tui.app import make_app
    from pardash.tui.widgets.run_header import RunHeader
    from pardash.tui.widgets.selected_rank import SelectedRank

    log = tmp_path / "slow_stop.jsonl"
    log.write_bytes(schema.encode_json_lines(_slow_stop()))
    src = ReplaySource(str(log))
    src.seek(STOP_T + 4 - src.t_start)  # (4 s into the 8 s the ranks took to end)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        header = widget_text(app.screen.query_one(RunHeader))
        assert "◐ 2 stopping" in header and "running" not in header, header
        assert re.search(r"samples/s [\d,]+ before the stop", header), header  # (no rank steps now)
        cells = [line.split()[:2] for line in grid_text(app).splitlines() if line.strip()[:1].isdigit()]
        assert cells == [["0", "stopping"], ["1", "stopping"]], cells
        assert " · stopping · " in widget_text(app.screen.query_one(SelectedRank))
        # (the alerts panel read "✓ no alerts: every rank is healthy" over them)
        from pardash.tui.widgets.alert_list import AlertList

        calm = " ".join(widget_text(app.screen.query_one(AlertList)).split())
        assert "ranks 0-1 being stopped by SIGTERM: waiting for them to end" in calm and "healthy" not in calm, calm
        await pilot.press("c")  # the heat map: its glyph, and its legend says it
        await pilot.pause()
        heat = grid_text(app).splitlines()
        assert "◐ stopping" in heat[0], heat
        assert [line.split() for line in heat if line.strip().startswith("0 ")] == [["0", "◐◐"]], heat
