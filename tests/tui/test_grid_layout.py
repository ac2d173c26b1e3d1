"""The rank grid picks the richest form that fits, grouped by node (no Textual needed)."""

from __future__ import annotations

import re

import pytest

from pardash.tui.grid_layout import COLUMNS, COMPACT_COLUMNS, WIDE_COLUMNS, lay_out
from pardash.tui.model import RankRow


def rows(n: int, per_node: int = 8) -> list[RankRow]:
    return [
        RankRow(
            rank=r,
            node=r // per_node,
            host=f"h{r // per_node}",
            status="running",
            step=1,
            loss=1.0,
            step_s=0.1,
            self_s=0.05,
            self_dev=0.0,
            held_bytes=1,
            not_sharding=False,
            exit_code=None,
        )  # fmt: skip
        for r in range(n)
    ]


@pytest.mark.parametrize(
    ("ranks", "size", "columns", "heat"),
    [
        (4, (120, 33), WIDE_COLUMNS[0], False),  # a few ranks: one a line, every figure
        (8, (74, 33), WIDE_COLUMNS[1], False),
        (8, (44, 20), WIDE_COLUMNS[-1], False),  # 80x24 terminal: a rank a line, the straggler's figures
        (64, (73, 33), COMPACT_COLUMNS, False),  # tens of ranks: compact cells
        (1024, (73, 33), None, True),  # thousands: a heat map
    ],
)
def test_the_richest_form_that_fits(ranks, size, columns, heat):
    layout = lay_out(rows(ranks), width=size[0], height=size[1])
    assert layout.heat is heat
    if columns is not None:
        assert layout.columns == columns
    assert len(layout.lines) <= size[1] - 1
    assert sorted(layout.where) == list(range(ranks))


def test_a_run_without_gpus_gets_no_columns_of_dashes():
    from pardash.telemetry import schema
    from pardash.telemetry.state import RunState
    from pardash.tui.model import RowBuilder

    state, table = RunState(run_id="r"), RowBuilder()
    for r in (0, 1):
        state.apply(schema.Hello(rank=r, world_size=2, device="cpu", run="r", t=1.0), 1.0)
    table.update(state)
    assert not table.gpu
    layout = lay_out(table.rows(), width=120, height=33, gpu=table.gpu)
    assert layout.columns == WIDE_COLUMNS[1]  # "gpu" and "gpu mem" would only show "–"
    state.apply(schema.Hello(rank=2, world_size=3, device="cuda:0", run="r", t=1.0), 1.0)
    before = table.layout_gen
    table.update(state)
    assert table.gpu and table.layout_gen > before
    assert lay_out(table.rows(), width=120, height=33, gpu=table.gpu).columns == WIDE_COLUMNS[0]


def test_every_node_has_a_header_and_its_lines_are_balanced():
    layout = lay_out(rows(64), width=73, height=33)
    headers = [line for line in layout.lines if line.kind == "node"]
    assert len(headers) == 8 and headers[0].labels[0][1] == "node 0 · h0 · 8 ranks"
    cells = [len(line.cells) for line in layout.lines if line.kind == "cells"]
    assert set(cells) == {4}  # 8 ranks in 5 columns go 4 + 4


def test_heat_map_packs_small_nodes_side_by_side():
    layout = lay_out(rows(1024), width=73, height=33)
    first = layout.lines[0]
    assert [text.strip() for _x, text, _s in first.labels] == ["n0", "n1", "n2", "n3"]
    assert len(first.cells) == 32


def test_forced_cells_scroll_instead_of_a_heat_map():
    layout = lay_out(rows(1024), width=120, height=33, form="cells")
    assert not layout.heat and layout.columns == COLUMNS and len(layout.lines) > 33


@pytest.mark.parametrize("width", [67, 60])
def test_a_narrow_grid_of_a_rank_a_line_shows_each_ranks_step_and_self_time(width):
    # 70 columns, the side panels under the grid (67): it drew loss, wall, held and Δself, and
    # 25 columns empty, without the step a rank is at or its self time, which fit
    layout = lay_out(rows(2), width=width, height=10)
    assert {"step_no", "loss", "self", "dev", "data", "comm"} <= set(layout.columns)
    assert layout.cell_width <= width - 1
    # so with more ranks than lines: full cells too go a rank a line, and scroll no less
    layout = lay_out(rows(64), width=width, height=10, form="cells")
    assert not layout.heat and layout.max_cols == 1 and {"step_no", "self"} <= set(layout.columns)


@pytest.mark.parametrize(
    ("grid_width", "terminal", "dropped"),
    [
        (85, "140x40", ()),
        (73, "120x36", ("gpu", "gpu_mem")),
        (67, "110x30, 70x24", ("gpu", "gpu_mem", "held")),
        (60, "100x30", ("gpu", "gpu_mem", "held", "step")),
        (54, "90x30", ("gpu", "gpu_mem", "held", "step", "step_no")),
        (44, "80x24", ("gpu", "gpu_mem", "held", "step", "step_no", "self")),
    ],
)
def test_a_narrower_grid_keeps_the_figures_that_tell_a_data_straggler_from_a_compute_one(grid_width, terminal, dropped):
    # Review 277: at 80x24 the grid drew rank, status, loss, wall, held and Δself: a rank whose
    # data loading made it the straggler (Δself +45%, data 51 ms where the others' 7 ms, comm
    # 20 ms where theirs 64 ms) looked as one slow in its own compute. Its Δself, data and comm
    # stay longest, and the loss (a "nan" shows there); what is alike on every rank of a
    # synchronous run, or said elsewhere (memory held, the wall step time, the step, the self
    # time beside its Δself), goes first.
    width = grid_width - 1  # (the grid's scrollbar column)
    layout = lay_out(rows(4), width=width, height=20)
    assert layout.max_cols == 1 and layout.cell_width <= width - 1, terminal
    assert set(WIDE_COLUMNS[0]) - set(layout.columns) == set(dropped), terminal
    # Several cells a line (tens of ranks) carry them too.
    assert {"dev", "data", "comm"} <= set(COLUMNS)


def test_flagged_only_and_the_empty_note():
    rs = rows(8)
    rs[3].status = "straggler"
    layout = lay_out(rs, width=120, height=33, flagged_only=True)
    assert [row.rank for row in layout.ordered] == [3]
    rs[3].status = "running"
    empty = lay_out(rs, width=120, height=33, flagged_only=True)
    assert empty.lines[0].kind == "note" and "no flagged ranks" in empty.lines[0].labels[0][1]


@pytest.mark.parametrize(
    ("fixture", "size", "side_grows"),
    [
        ("run4.jsonl", (220, 50), True),  # 4 ranks: the grid needs a fraction of the width
        ("straggler8.jsonl", (120, 40), False),  # the stylesheet's split below 168 columns
        ("run1024.jsonl", (220, 50), False),  # a heat map uses every column it gets
    ],
)
async def test_a_wide_terminal_gives_the_grids_spare_columns_to_the_side_panels(fixture, size, side_grows):
    from pardash.tui.grid_layout import WIDE_COLUMNS
    from pardash.tui.screens.dashboard import DashboardScreen
    from pardash.tui.widgets.event_log import EventLog
    from pardash.tui.widgets.rank_grid import RankGrid
    from tui_helpers import replay_app, strip_text

    app = replay_app(fixture)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = app.screen
        side = screen.query_one("#side").size.width
        grid = screen.query_one(RankGrid)
        if side_grows:
            assert side > DashboardScreen.SIDE_WIDTH
            # ... while the grid keeps every column, a rank a line
            assert grid._layout.columns == WIDE_COLUMNS[0] and grid._layout.max_cols == 1
            # and the event log's lines are not wrapped: each begins with its time
            log = screen.query_one(EventLog)
            texts = [strip_text(line) for line in log.lines]
            assert texts and all(re.match(r"\d\d:\d\d ", t) for t in texts), texts
        else:
            assert side <= DashboardScreen.SIDE_WIDTH


def test_the_alerts_name_runs_of_ranks_as_ranges_and_count_the_rest():
    from pardash.tui.widgets.alert_list import rank_list

    assert rank_list([0, 1, 2, 3, 4, 6, 7, 8]) == "0-4, 6-8"
    assert rank_list(list(range(0, 20, 2))) == "0, 2, 4, 6, 8, 10, … (+4)"
    assert rank_list(list(range(6)) + list(range(7, 1024, 2)), limit=2) == "0-5, 7, … (+508)"


@pytest.mark.parametrize(
    ("fixture", "size", "shown"),
    [
        ("run4.jsonl", (120, 40), True),  # 4 ranks leave most of the grid's lines free
        ("straggler8.jsonl", (80, 24), False),  # 8 ranks and their nodes fill a small terminal
        ("run1024.jsonl", (120, 40), True),  # a heat map of every rank in rank order leaves room too
    ],
)
async def test_the_runs_loss_shows_under_the_grid_when_the_grid_leaves_room(fixture, size, shown):
    from pardash.tui.widgets.history_chart import HistoryChart
    from pardash.tui.widgets.rank_grid import RankGrid
    from tui_helpers import replay_app, until

    app = replay_app(fixture)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        trend = app.screen.query_one("#trend", HistoryChart)
        grid = app.screen.query_one(RankGrid)
        assert trend.display == shown
        if shown:
            await until(pilot, lambda: trend.series is not None)  # the chart follows at the slow panels' rate
        # the grid, with or without the chart, draws every line it drew before
        assert len(grid._layout.lines) + 1 <= grid.scrollable_content_region.height
        if shown:
            series = trend.series
            assert series is not None and series.others == {"run4.jsonl": 4, "run1024.jsonl": 1024}[fixture]
            # the line is the ranks' median: the last column lies within their spread
            assert series.low[-1] <= series.values[-1] <= series.high[-1]
            assert series.first_step == 0 < series.last_step


async def test_a_heat_map_with_rows_to_spare_keeps_the_runs_loss_under_it():
    # The loss chart showed under cells only: a heat map of 1024 ranks with 28 empty rows under
    # it, or a few ranks put in heat map form with `c`, lost it.
    from tui_helpers import replay_app

    app = replay_app("run1024.jsonl")
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        await pilot.pause()
        assert app.screen.has_class("-trend")
    app = replay_app("run4.jsonl")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.screen.has_class("-trend")
        await pilot.press("c")
        await pilot.pause()
        await pilot.pause()
        assert app.screen.has_class("-trend")


async def _loss_chart_rows(line: tuple[float, ...], size: tuple[int, int]) -> list[str]:
    """The plot rows (x axis left out) of a loss chart drawing ``line`` alone, its last point
    the newest, in an app of ``size``."""
    from textual.app import App

    from pardash.tui.charts import ChartSeries
    from pardash.tui.format import fmt_loss
    from pardash.tui.widgets.history_chart import HistoryChart

    nan = (float("nan"),) * len(line)

    class One(App):
        def compose(self):
            yield HistoryChart(fmt_loss)

    app = One()
    async with app.run_test(size=size) as pilot:
        chart = app.query_one(HistoryChart)
        chart.series = ChartSeries(line, nan, nan, nan, 1, len(line), line[-1], 0)
        await pilot.pause()
        return [chart.render_line(y).text for y in range(chart.content_region.height - 1)]


@pytest.mark.parametrize("values", [(9.1e-4, 0.0255), (-12.5, -2.31), (1.2e4, 3.4e4)], ids=["tiny", "negative", "huge"])
async def test_a_charts_y_axis_stays_in_one_column_whatever_its_labels(values):
    # A loss chart of 9.1e-04 ... 0.0255 drew "9.1e-04 ┤" a column right of "0.0255 ┤": the
    # axis labels had room for 6 characters, and a loss takes up to 7.
    lo, hi = values
    n = 30
    rows = await _loss_chart_rows(tuple(lo + (hi - lo) * i / (n - 1) for i in range(n)), (60, 12))
    labelled = [r for r in rows if "┤" in r]
    assert len(labelled) == 3, rows
    assert {r.index("┤") for r in labelled} | {r.index("│") for r in rows if "┤" not in r} == {labelled[0].index("┤")}, rows
    labels = [float(r[: r.index("┤")]) for r in labelled]  # whole numbers, top to bottom
    assert labels == sorted(labels, reverse=True) and labels[0] > labels[-1], rows


async def test_a_warm_ups_first_steps_do_not_flatten_the_rest_of_a_chart():
    # A loss of 4.2 falling to 0.6 in its first steps set the y scale, and the run's steady
    # part, 0.60 to 0.50, was one flat row. As TensorBoard ignores outliers in its scale, the
    # outermost 5% of points are left out of it (drawn at the edge); the newest value never is.
    n = 60
    line = (4.2, 2.5, 1.4) + tuple(0.60 - 0.10 * i / (n - 4) for i in range(n - 3))
    rows = await _loss_chart_rows(line, (80, 12))
    plot_h = len(rows)
    steady = {y for y, r in enumerate(rows) for c in range(9 + 10, 9 + n) if r[c] != " "}
    assert len(steady) >= plot_h - 2, rows  # the steady part spans the chart, not a row
    assert rows[0][9] != " "  # the first step, over the scale, at its top edge
    assert float(rows[-1][: rows[-1].index("┤")]) == pytest.approx(line[-1], abs=1e-4)  # the newest, at the bottom


async def test_the_heat_maps_cursor_stands_out_on_an_exited_rank():
    # An exited rank's glyph is drawn reversed; the cursor reversed it again, so the rank the
    # cursor was on looked like every other exited rank, and the cursor was nowhere to be seen.
    from pardash.telemetry import state as st
    from pardash.tui.widgets.rank_grid import RankGrid
    from tui_helpers import replay_app

    app = replay_app("exited4.jsonl")
    async with app.run_test(size=(120, 40)) as pilot:
        grid = app.screen.query_one(RankGrid)
        await pilot.pause()
        exited = [row.rank for row in grid.rows if row.status == st.EXITED]
        others = [row.rank for row in grid.rows if row.status != st.EXITED]
        assert exited and others, [(row.rank, row.status) for row in grid.rows]
        grid.form = "heat"
        await pilot.pause()
        assert grid.heat

        def glyph_style(rank):
            y, k = grid.layout.where[rank]
            x = grid.layout.lines[y].cells[k][0]
            grid._strips.clear()
            strip = grid.render_line(y + grid.head_lines - grid.scroll_offset.y)
            at = 0
            for seg in strip:
                if at <= x < at + len(seg.text):
                    return seg.style
                at += len(seg.text)
            raise AssertionError(f"rank {rank} not drawn")

        grid.cursor_rank = others[0]
        await pilot.pause()
        off = glyph_style(exited[0])
        grid.cursor_rank = exited[0]
        await pilot.pause()
        on = glyph_style(exited[0])
        assert on != off and off.reverse and (not on.reverse or on.underline)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_heat_maps_legend_keeps_every_glyph_on_screen_and_says_what_its_percentages_are_of(size):
    # A grid too narrow for the whole legend cut its last entries, whatever was on screen:
    # "× exited" went while exited ranks were drawn, and "self +10%" read as a bare "+10%".
    from pardash.tui.grid_layout import HEAT_GLYPHS, LEVEL_GLYPHS, WAITING_GLYPH
    from pardash.tui.widgets.rank_grid import RankGrid
    from tui_helpers import grid_text, replay_app

    app = replay_app("exited4.jsonl")
    async with app.run_test(size=size) as pilot:
        await pilot.press("c")
        await pilot.pause()
        grid = app.screen.query_one(RankGrid)
        assert grid.heat
        lines = grid_text(app).splitlines()
        legend = "\n".join(lines[: grid.head_lines])
        drawn = "".join(line for line in lines[grid.head_lines :] if "node " not in line)  # (its "·")
        glyphs = {g for g in (*HEAT_GLYPHS.values(), *LEVEL_GLYPHS, WAITING_GLYPH) if g in drawn}
        assert {"×", WAITING_GLYPH} <= glyphs, drawn
        for glyph in glyphs:
            assert glyph in legend, (glyph, legend)
        assert "+10%" not in legend.replace("self +10%", ""), legend  # (where listed: never a bare "+10%")
        assert grid.head_lines <= 2


def test_a_legend_wraps_to_a_second_line_before_it_leaves_out_a_glyph_in_use():
    from pardash.tui.grid_layout import heat_legend

    present = {"running", "dev-warn", "dev-bad", "stalled", "waiting", "exited", "finished"}  # (running: ranks ok)
    (line,), _gap = heat_legend(200, present)
    assert [text for _g, _c, text in line][-1] == "done"
    for width in (40, 50, 60, 70):
        lines, _gap = heat_legend(width, present)
        texts = [text for line in lines for _g, _c, text in line]
        assert {"ok", "self +10%", "+25%", "stalled", "waiting", "exited", "done"} <= set(texts), (width, texts)
        assert len(lines) <= 2
        assert all(1 + sum(len(t) + 3 for _g, _c, t in line) - 1 <= width for line in lines)


def test_a_sorted_heat_map_orders_every_rank_across_nodes_and_says_so():
    # Node by node, the second worst rank (on another node) came after every rank of the
    # worst's node; a heat map draws no rank numbers, so the order is all a reader has.
    rs = rows(16)
    for rank, dev in ((3, 0.5), (12, 0.4), (2, 0.1)):
        rs[rank].self_dev = dev
    heat = lay_out(rs, width=73, height=33, form="heat", sort_key="self_time")
    assert [row.rank for row in heat.ordered[:3]] == [3, 12, 2]
    assert "across nodes" in heat.lines[0].labels[0][1]
    # At 80x24 the grid is 43 columns: the label fits, shorter (it was cut at "across node").
    narrow = lay_out(rs, width=43, height=18, form="heat", sort_key="status").lines[0].labels[0][1]
    assert narrow.endswith("across nodes") and len(f"─ {narrow} ") <= 42, narrow
    first = [heat.ordered[i].rank for _x, i in heat.lines[1].cells]
    assert first[:3] == [3, 12, 2]
    # Cells keep their node groups (each cell says its rank, under its node's header).
    cells = lay_out(rs, width=73, height=33, form="cells", sort_key="self_time")
    assert [row.rank for row in cells.ordered[:3]] == [3, 2, 0]


async def test_the_sorted_heat_map_on_screen_is_in_the_sorts_order():
    from pardash.tui.model import sort_rows
    from pardash.tui.widgets.rank_grid import RankGrid
    from tui_helpers import replay_app

    app = replay_app("straggler8.jsonl")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("c", "s", "s")
        await pilot.pause()
        grid = app.screen.query_one(RankGrid)
        assert grid.heat and grid.sort_key == "self_time"
        assert grid.shown_ranks == [row.rank for row in sort_rows(grid.rows, "self_time")]


def test_no_flagged_ranks_keeps_the_title_of_every_rank():
    # The note "no flagged ranks" had room for the widest columns: the column names switched
    # to another set at each f.
    rs = rows(16)
    for width, height, form in ((120, 33, "auto"), (73, 33, "auto"), (73, 33, "heat"), (44, 10, "auto")):
        every = lay_out(rs, width=width, height=height, form=form)
        none = lay_out(rs, width=width, height=height, form=form, flagged_only=True)
        assert not none.ordered and none.lines[0].kind == "note"
        assert (none.columns, none.heat, none.max_cols) == (every.columns, every.heat, every.max_cols), (width, height, form)


def test_a_grid_of_a_line_or_two_draws_its_ranks_not_their_nodes_headers():
    # 60x15: the grid had two lines, the legend and "─ node 0 · vm · 2 ranks", and its ranks
    # under a scrollbar.
    one_node = rows(2)
    layout = lay_out(one_node, width=57, height=2)  # the title's line and one more
    assert layout.heat and [line.kind for line in layout.lines] == ["heat"]
    assert layout.lines[0].labels[0][1].strip() == "n0" and sorted(layout.where) == [0, 1]
    # Sorted, the line that says the order gives way too.
    sorted_ = lay_out(one_node, width=57, height=2, sort_key="self_time")
    assert [line.kind for line in sorted_.lines] == ["heat"] and sorted(sorted_.where) == [0, 1]
    # Where there is the room, each node keeps its header; and a map that scrolls anyway too.
    assert lay_out(one_node, width=57, height=3).lines[0].kind == "node"
    big = lay_out(rows(1024, per_node=256), width=73, height=10)
    assert big.lines[0].kind == "node" and len(big.lines) > 9


@pytest.mark.parametrize(("ranks", "size", "form", "laid_out"), [(1024, (150, 45), "cells", 1), (2, (60, 2), "cells", 2)])
async def test_a_grid_lays_itself_out_without_its_title_only_where_its_ranks_can_fit_so(monkeypatch, ranks, size, form, laid_out):
    # 1024 ranks in cells scroll (512 lines): laid out again without the column names at each
    # change, 4.2 ms thrown away. A grid of a line or two still tries (its ranks, not their title).
    from textual.app import App

    from pardash.telemetry import schema
    from pardash.telemetry.state import RunState
    from pardash.tui.model import RowBuilder
    from pardash.tui.widgets import rank_grid

    class Host(App):
        def compose(self):
            yield rank_grid.RankGrid()

    state, table = RunState(run_id="r"), RowBuilder()
    for r in range(ranks):
        state.apply(schema.Hello(rank=r, world_size=ranks, node=r // 8, run="r", t=1000.0), 1000.0)
    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs["height"])
        return lay_out(*args, **kwargs)

    app = Host()
    async with app.run_test(size=size) as pilot:
        grid = app.query_one(rank_grid.RankGrid)
        grid.form = form
        grid.update_rows(table.update(state))
        await pilot.pause()
        monkeypatch.setattr(rank_grid, "lay_out", counted)
        grid._relayout(force=True)
        assert len(calls) == laid_out, calls


@pytest.mark.parametrize(("width", "height"), [(72, 21), (77, 17)])
def test_many_small_nodes_whose_packed_map_would_scroll_are_every_rank_in_rank_order(width, height):
    # 1024 ranks of 8 a node: the packed "n12 ■■■■■■■■" segments were 32 lines at 120x36 and 64
    # at 80x24, nodes 116-127 off screen. Rows of blocks labelled by their first rank put every
    # rank on screen; a map that would scroll anyway keeps its node headers (see above).
    layout = lay_out(rows(1024), width=width, height=height)
    assert layout.heat and len(layout.lines) <= height - 1 and sorted(layout.where) == list(range(1024))
    per_row = len(layout.lines[0].cells)
    assert per_row % 8 == 0 and [line.labels[0][1].strip() for line in layout.lines] == [str(r) for r in range(0, 1024, per_row)]


def test_a_packed_map_that_scrolls_twice_as_far_gives_way_to_rank_order_too():
    # 80x24 (a grid 44 wide): 64 lines of two nodes each, against 32 in rank order.
    layout = lay_out(rows(1024), width=44, height=17)
    assert [line.labels[0][1].strip() for line in layout.lines[:2]] == ["0", "32"] and len(layout.lines) == 32
