"""A rank whose loss went NaN is flagged wherever a person looks, until it is finite again: the
alerts panel said "✓ no alerts: every rank is healthy", `f` showed no rank, the grid's loss cell
and the rank's detail read "–" (as a loss never reported). Replayed from a recorded log."""

from __future__ import annotations

import pytest
from textual.widgets import Static
from tui_helpers import grid_text, replay_app, until, widget_text

from pardash.telemetry import schema
from pardash.tui.widgets.alert_list import AlertList
from pardash.tui.widgets.rank_grid import RankGrid

SIZE = (140, 40)
T = 1.7e9
NAN_AT_100 = "loss is nan at step 100: diverged, or a spike (steps go on without a loss while it is not finite)"
SAID = "rank 1's loss is nan since step 100 (diverged, or a spike)"


def _log(path, *, steps: int = 160, again_at: int | None = None, straggler: bool = False, finished: bool = False) -> str:
    """2 DDP ranks; from step 100 rank 1 logs a NaN loss (its reporter's warning, its steps
    without a loss), finite again at ``again_at``; ``straggler``: the hub also found rank 1 a
    straggler; ``finished``: both ranks exit 0 after ``steps``."""
    msgs: list = [schema.Hello(run="n", rank=r, world_size=2, strategy="ddp", pid=10 + r, seq=0, t=T, config={"steps": 300}) for r in range(2)]
    seq = {0: 1, 1: 1}
    for s in range(1, steps + 1):
        for r in range(2):
            bad = r == 1 and s >= 100 and (again_at is None or s < again_at)
            if r == 1 and s == 100:
                msgs.append(schema.Event(run="n", rank=1, seq=seq[1], name="warning", step=100, message=NAN_AT_100, t=T + s * 0.02))
                seq[1] += 1
            if r == 1 and s == again_at:
                msgs.append(schema.Event(run="n", rank=1, seq=seq[1], name="warning", step=s, t=T + s * 0.02,
                                         message=f"loss is finite again at step {s} (not finite from step 100)"))
                seq[1] += 1
            msgs.append(schema.Step(run="n", rank=r, step=s, seq=seq[r], loss=None if bad else 2.0 - s / 1000, samples=8,
                                    step_s=0.02, self_s=0.004, comm_s=0.01, t=T + s * 0.02))
            seq[r] += 1
    if straggler:
        msgs.append(schema.Verdict(run="n", rank=1, seq=-1, verdict="straggler", cause="data", step=150, cost_s=0.03,
                                   message="rank 1 is a straggler (data): the others wait 30 ms a step for it", t=T + 150 * 0.02))
    if finished:
        msgs += [schema.Event(run="n", rank=r, seq=seq[r], name="exit", code=0, step=steps, t=T + steps * 0.02 + 0.1) for r in range(2)]
    msgs.sort(key=lambda m: m.t)
    path.write_bytes(schema.encode_json_lines(msgs))
    return str(path)


def _alerts(app) -> dict[int, list[tuple[str, str]]]:
    out: dict[int, list[tuple[str, str]]] = {}
    for a in app.screen.query_one(AlertList).alerts:
        out.setdefault(a.rank, []).append((a.kind, a.text))
    return out


def _cell(app, rank: int) -> str:
    """The grid's line of ``rank``'s cell (cells: one rank a line at this width)."""
    lines = [line for line in grid_text(app).splitlines() if line.split()[:1] == [str(rank)]]
    assert len(lines) == 1, grid_text(app)
    return lines[0]


async def test_a_rank_whose_loss_went_nan_is_an_alert_flagged_and_said_in_its_cell_and_detail(tmp_path):
    app = replay_app(_log(tmp_path / "nan.jsonl"))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: _alerts(app))
        assert _alerts(app) == {1: [("loss", SAID)]}
        panel = widget_text(app.screen.query_one(AlertList))
        assert " ".join(panel.split()) == f"⊘ {SAID}", panel  # (wrapped to the panel's width)
        # Its loss cell says nan, in the alarm's colour; the healthy rank's its figure.
        assert _cell(app, 1).split()[3] == "nan", _cell(app, 1)
        assert _cell(app, 0).split()[3] == "1.8400", _cell(app, 0)
        grid = app.screen.query_one(RankGrid)
        row = grid.row_of(1)
        assert row.flagged and row.loss is None and row.loss_not_finite == ("nan", 100)
        look = grid._cell_look(row)
        assert [style for text, style in look if text.strip() == "nan"] == [grid._style("rank-grid--loss-bad")]
        # f: flagged ranks only: rank 1.
        await pilot.press("f")
        await until(pilot, lambda: "0 running" not in grid_text(app))
        assert [line.split()[0] for line in grid_text(app).splitlines() if line.strip()[:1].isdigit()] == ["1"], grid_text(app)
        # Its detail: its loss and the alert.
        grid.select(1)
        # The line under the grid: its loss as the detail says it (it read "loss –").
        from pardash.tui.widgets.selected_rank import SelectedRank

        await until(pilot, lambda: "loss nan since step 100" in widget_text(app.screen.query_one(SelectedRank)))
        await pilot.press("enter")
        await until(pilot, lambda: "#title" in [f"#{w.id}" for w in app.screen.query(Static)] and "⚠" in str(app.screen.query_one("#title", Static).render()))
        title = str(app.screen.query_one("#title", Static).render())
        assert "step 160 · epoch 0 · loss nan since step 100 · last step" in title, title
        assert f"⚠ {SAID}" in title, title


async def test_a_diverged_straggler_keeps_both_alerts(tmp_path):
    app = replay_app(_log(tmp_path / "nan.jsonl", straggler=True))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: _alerts(app))
        kinds = [kind for kind, _ in _alerts(app)[1]]
        assert kinds == ["loss", "straggler"], _alerts(app)
        assert _cell(app, 1).split()[1:4:2] == ["straggler", "nan"], _cell(app, 1)


async def test_a_loss_finite_again_is_no_alert(tmp_path):
    app = replay_app(_log(tmp_path / "nan.jsonl", again_at=140))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert _alerts(app) == {}
        assert widget_text(app.screen.query_one(AlertList)) == "✓ no alerts: every rank is healthy"
        assert _cell(app, 1).split()[3] == "1.8400"
        assert not app.screen.query_one(RankGrid).row_of(1).flagged


async def test_a_run_that_finished_with_a_nan_loss_says_it_to_the_end(tmp_path):
    app = replay_app(_log(tmp_path / "nan.jsonl", finished=True))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: _alerts(app))
        assert _alerts(app) == {1: [("loss", "rank 1's loss was nan from step 100 to the end")]}
        assert _cell(app, 1).split()[1:4:2] == ["finished", "nan"], _cell(app, 1)


@pytest.mark.parametrize("ranks", [3])
async def test_many_ranks_gone_nan_fold_into_one_line(tmp_path, ranks):
    from pardash.tui.alerts import Alert

    app = replay_app(_log(tmp_path / "nan.jsonl"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        panel = app.screen.query_one(AlertList)
        panel.alerts = tuple(Alert("loss", r, f"rank {r}'s loss is nan since step 100 (diverged, or a spike)") for r in range(12))
        lines = [line.plain for line in panel.fitted(100, ranks)]
        assert lines == ["⊘ 12 losses not finite: ranks 0-11"], lines


async def test_n_and_p_in_a_detail_follow_the_grid_as_filtered(tmp_path):
    # With f (flagged ranks only), n from the diverged rank's detail went to rank 0, which the
    # grid did not show, and Escape then could not put the cursor on it.
    from pardash.tui.screens.rank_detail import RankDetailScreen

    app = replay_app(_log(tmp_path / "nan.jsonl"))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: _alerts(app))
        await pilot.press("f")
        grid = app.screen.query_one(RankGrid)
        await until(pilot, lambda: grid.shown_ranks == [1])
        # Its node's header counts the node's ranks, not the ones shown ("1 rank · 1 flagged").
        assert "─ node 0 · 2 ranks · 1 flagged" in grid_text(app), grid_text(app)
        grid.select(1)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RankDetailScreen))
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, RankDetailScreen) and app.screen.rank == 1
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, RankDetailScreen))
        assert app.screen.query_one(RankGrid).cursor_rank == 1


async def test_the_runs_loss_chart_says_the_ranks_it_leaves_out(tmp_path):
    # Its title read "▀ 1 rank, ░ its range" of a job of two, as if a rank had gone.
    from pardash.tui.widgets.history_chart import HistoryChart

    app = replay_app(_log(tmp_path / "nan.jsonl"))
    async with app.run_test(size=SIZE) as pilot:
        trend = app.screen.query_one("#trend", HistoryChart)
        await until(pilot, lambda: "not finite" in str(trend.border_title or ""))
        assert "▀ 1 rank, ░ its range · rank 1 not finite, left out" in str(trend.border_title)


def _wide_log(path, ranks: int = 40, bad: int = 17) -> str:
    """``ranks`` DDP ranks of which ``bad`` logs a NaN loss from step 30 (the others train on)."""
    msgs: list = [schema.Hello(run="w", rank=r, world_size=ranks, strategy="ddp", pid=10 + r, seq=0, t=T, host=f"h{r // 8}", node=r // 8)
                  for r in range(ranks)]  # fmt: skip
    for s in range(1, 61):
        for r in range(ranks):
            if r == bad and s == 30:
                msgs.append(schema.Event(run="w", rank=r, seq=1000 + s, name="warning", step=30, t=T + s * 0.02,
                                         message=NAN_AT_100.replace("100", "30")))  # fmt: skip
            loss = None if r == bad and s >= 30 else 2.0 - s / 1000 + r / 1e4
            msgs.append(schema.Step(run="w", rank=r, step=s, seq=s, loss=loss, samples=8, step_s=0.02, self_s=0.004, comm_s=0.01, t=T + s * 0.02))
    path.write_bytes(schema.encode_json_lines(msgs))
    return str(path)


async def test_one_rank_gone_nan_among_40_stands_out_in_cells_and_the_heat_map_and_sorts_first(tmp_path):
    # Review 306: past a few ranks the cells have no loss column, and rank 17's cell read
    # "17 □ –" as every other's; the heat map was all one glyph, its legend with no mark for a
    # loss not finite; `s` had no order by loss.
    from pardash.tui.grid_layout import HEAT_GLYPHS
    from pardash.tui.model import LOSS_BAD

    bad = HEAT_GLYPHS[LOSS_BAD]
    app = replay_app(_wide_log(tmp_path / "wide.jsonl"))
    async with app.run_test(size=(120, 35)) as pilot:
        await until(pilot, lambda: bad in grid_text(app))
        text = grid_text(app)
        marked = [cell.split()[0] for line in text.splitlines() for cell in line.split("  ") if bad in cell]
        assert marked == ["17"], text
        assert "loss" not in text.splitlines()[0]  # (cells without a loss column: the mark is all there is)
        await pilot.press("c")  # the heat map
        await until(pilot, lambda: "loss nan" in grid_text(app))
        heat = grid_text(app)
        assert sum(line.count(bad) for line in heat.splitlines()[1:]) == 1, heat
        assert f"{bad} loss nan" in heat.splitlines()[0], heat
        await pilot.press("c")
        grid = app.screen.query_one(RankGrid)
        while grid.sort_key != "loss":
            await pilot.press("s")
        await pilot.pause()
        first = next(line for line in grid_text(app).splitlines() if line.strip()[:1].isdigit())
        assert first.split()[:2] == ["17", bad], grid_text(app)


async def test_a_live_heat_maps_legend_lists_the_nan_mark_once_a_rank_draws_it():
    # Review 312: with the heat map open as the ranks' loss went NaN, every rank drew ⊘ and the
    # legend still read "▪ ok" alone (the ranks drawing ⊘ were counted from the ranks changed,
    # which a loss turning NaN was not).
    from fed_job import RUN, Job

    from pardash.tui.app import make_app
    from pardash.tui.grid_layout import HEAT_GLYPHS
    from pardash.tui.model import LOSS_BAD

    job = Job(512)
    for _ in range(3):
        job.step()
        job.frame()
    app = make_app(job.viewer)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        grid = app.screen.query_one(RankGrid)
        assert grid.heat and "loss nan" not in grid_text(app).splitlines()[0]
        job.core.replay(schema.Event(rank=17, name="warning", step=job.steps + 1, run=RUN, t=job.t,
                                     message=f"loss is nan at step {job.steps + 1}: diverged, or a spike"), job.t)  # fmt: skip
        job.step()
        job.frame()
        app._poll()
        await pilot.pause()
        legend = grid_text(app).splitlines()[0]
        assert f"{HEAT_GLYPHS[LOSS_BAD]} loss nan" in legend, grid_text(app)


def test_sorted_by_loss_the_first_rank_to_go_nan_comes_first():
    # Review 312: with every rank gone NaN (rank 2 at step 30, the rest at 31) the order fell
    # back to the rank number: rank 0 first.
    from pardash.telemetry.state import RunState
    from pardash.tui.model import RowBuilder, sort_rows

    st = RunState(run_id="o")
    for r in range(4):
        st.apply(schema.Hello(run="o", rank=r, world_size=4, seq=0, t=T), 0.0)
        at = 30 if r == 2 else 31
        st.apply(schema.Event(run="o", rank=r, seq=1, name="warning", step=at, t=T + 1, message=NAN_AT_100.replace("100", str(at))), 0.0)
        st.apply(schema.Step(run="o", rank=r, step=31, seq=2, loss=None, step_s=0.02, t=T + 2), 0.0)
    rows = RowBuilder()
    rows.update(st)
    assert [row.rank for row in sort_rows(rows.rows(), "loss")] == [2, 0, 1, 3]
