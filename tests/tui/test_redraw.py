"""What a frame redraws (issue 3): rows kept frame by frame match rows built afresh, a changed
rank's line is drawn again while the others keep what they drew, and the header's running
figures wait for their turn while what it says about the run shows at once.

A hub core is fed directly (no sockets) and framed on demand; the viewer applies its frames as
a live client does. Nothing here asserts a time: the one wait is a generous bound.
"""

from __future__ import annotations

import random

import pytest
from tui_helpers import Fed, settled, until

from pardash.telemetry import schema
from pardash.telemetry.client import NullDetector
from pardash.telemetry.hubcore import HubCore
from pardash.tui.app import make_app
from pardash.tui.grid_layout import LEVEL_GLYPHS
from pardash.tui.memory import memory_savings
from pardash.tui.model import RowBuilder, run_totals
from pardash.tui.screens import dashboard
from pardash.tui.styles import text_strip
from pardash.tui.widgets.alert_list import AlertList
from pardash.tui.widgets.rank_grid import RankGrid
from pardash.tui.widgets.run_header import RunHeader, RunSummary
from pardash.tui.widgets.selected_rank import SelectedRank

RUN = "redraw"
GiB = 1 << 30


class Job:
    """A hub core fed with steps, verdicts and events, and a viewer applying its frames."""

    def __init__(self, ranks: int, *, per_node: int = 8, seed: int = 0) -> None:
        self.core = HubCore(run_id=RUN, detector=NullDetector())  # type: ignore[arg-type]
        self.viewer = Fed()
        self.rng = random.Random(seed)
        self.t = 1000.0
        self.steps = dict.fromkeys(range(ranks), 0)
        self.hello(range(ranks), ranks, per_node=per_node)
        self.frame()

    def hello(self, ranks, world: int, *, per_node: int = 8) -> None:
        for r in ranks:
            self.steps.setdefault(r, 0)
            self.send(
                schema.Hello(
                    rank=r, world_size=world, node=r // per_node, host=f"h{r // per_node}", strategy="fsdp",
                    params_count=1_000_000, run=RUN, t=self.t,
                )
            )  # fmt: skip

    def send(self, msg: schema.Message) -> None:
        self.core.replay(msg, self.t)

    def step(self, ranks=None, *, loss: float | None = None, self_s: float | None = None, held: int = GiB) -> None:
        """A step of each of ``ranks`` (default all), with jittered self times (unless given)."""
        for r in self.steps if ranks is None else ranks:
            n = self.steps[r] = self.steps[r] + 1
            mem = schema.Mem(params_bytes=held // 4, grads_bytes=held // 4, optim_bytes=held // 2)
            self.send(
                schema.Step(
                    rank=r, step=n, loss=loss if loss is not None else 2.0 + self.rng.random(), samples=8,
                    step_s=0.1 + 0.001 * self.rng.random(),
                    self_s=self_s if self_s is not None else 0.05 + 0.02 * self.rng.random(),
                    t=self.t, run=RUN, mem=mem,
                )
            )  # fmt: skip

    def frame(self) -> None:
        self.t += 0.1
        self.viewer.apply_frame(self.core.tick(self.t))
        self.viewer.pending = True




def heat_keys(rows: RowBuilder) -> dict:
    return {rank: rows.heat_key(rank) for rank in rows.ranks}


def test_rows_kept_frame_by_frame_match_rows_built_afresh():
    """The rows a viewer keeps by feeding each frame are the rows a late viewer builds from the
    history at once; the totals are run_totals'; ``changed`` names exactly the ranks whose
    heat-map look moved."""
    job = Job(24)
    kept = RowBuilder()
    kept.update(job.viewer.state)
    for i in range(40):
        if i == 10:
            job.core.verdict(schema.Verdict(rank=5, verdict="straggler", message="rank 5 is a straggler"))
        if i == 20:
            job.core.verdict(schema.Verdict(rank=11, verdict="stalled", cause="backward", step=job.steps[11]))
        if i == 25:
            for r in (7, 9):
                job.send(schema.Event(rank=r, name="exit", code=1, run=RUN, t=job.t))
        if i == 30:
            # (its glyph turns ⊘: changed too; the heat map's legend counts the ranks that draw
            # it from the ranks changed, and listed none while every rank drew it, review 312)
            job.send(schema.Event(rank=3, name="warning", step=job.steps[3] + 1, run=RUN, t=job.t,
                                  message=f"loss is nan at step {job.steps[3] + 1}: diverged, or a spike"))  # fmt: skip
        if i >= 30:
            job.steps[3] += 1
            job.send(schema.Step(rank=3, step=job.steps[3], loss=None, samples=8, step_s=0.1, self_s=0.06, t=job.t, run=RUN))
        job.step([r for r in job.steps if not (i >= 25 and r in (7, 9)) and not (i >= 20 and r == 11) and not (i >= 30 and r == 3)])
        job.frame()
        state = job.viewer.state
        before = heat_keys(kept)
        kept.update(state)
        after = heat_keys(kept)
        assert kept.rows() == RowBuilder().build(state), f"frame {i}"
        # (the header's rate too: each rank's over its last history points, kept or afresh)
        assert kept.totals == run_totals(state)
        assert kept.changed == {rank for rank in after if after[rank] != before.get(rank)}
        assert [r.rank for r in kept.flagged] == sorted(kept.row(r.rank).rank for r in kept.flagged)
    rows = {row.rank: row for row in kept.rows()}
    assert rows[5].status == "straggler" and rows[11].status == "stalled"
    assert rows[7].status == "exited" and {rows[7].exit_first, rows[9].exit_first} == {True, False}
    assert {r.rank for r in kept.flagged} == {3, 5, 7, 9, 11}  # (rank 3: its loss not finite)
    from pardash.tui.model import LOSS_BAD

    assert kept.heat_key(3)[0] == LOSS_BAD


def test_memory_savings_reuse_what_did_not_change():
    job = Job(8)
    job.step()
    job.frame()
    first = memory_savings(job.viewer.state)
    job.step()
    job.frame()
    assert memory_savings(job.viewer.state, reuse=first) is first  # new steps, same memory
    job.step([3], held=2 * GiB)
    job.frame()
    moved = memory_savings(job.viewer.state, reuse=first)
    assert moved is not first and moved == memory_savings(job.viewer.state)
    assert moved.ranks[3].held_bytes == 2 * GiB and moved.ranks[0] is first.ranks[0]


def strips_of(grid: RankGrid) -> list:
    return [grid.render_line(y) for y in range(grid.size.height)]


def strip_text(strip) -> str:
    return "".join(seg.text for seg in strip)


async def test_a_changed_rank_is_redrawn_and_the_others_keep_their_lines():
    job = Job(48)
    job.step(loss=2.0, self_s=0.05)  # every rank level with the others: no deviation moves
    job.frame()
    app = make_app(job.viewer)
    async with app.run_test(size=(200, 60)) as pilot:  # cells with the loss, 3 a line
        grid = app.screen.query_one(RankGrid)
        grid.form = "cells"
        await pilot.pause()
        before = strips_of(grid)
        assert "2.0000" in strip_text(before[grid.layout.where[13][0] + 1])
        # Only rank 13 steps, with a loss its cell shows: its line alone is drawn again.
        job.step([13], loss=7.25, self_s=0.05)
        job.frame()
        app._poll()
        await pilot.pause()
        after = strips_of(grid)
        line = grid.layout.where[13][0] + 1  # line 0 is the title
        assert "7.2500" in strip_text(after[line]) and after[line] is not before[line]
        kept = [y for y in range(1, len(before)) if after[y] is before[y]]
        assert kept == [y for y in range(1, len(before)) if y != line]

        # A heat map: a rank that turns straggler changes its glyph's line, and only that.
        grid.form = "heat"
        await pilot.pause()
        before = strips_of(grid)
        job.core.verdict(schema.Verdict(rank=20, verdict="straggler"))
        job.step(loss=2.0, self_s=0.05)
        job.frame()
        app._poll()
        await pilot.pause()
        after = strips_of(grid)
        line = grid.layout.where[20][0] + 1
        assert "▲" in strip_text(after[line]) and "▲" not in strip_text(before[line])
        changed = [y for y in range(1, len(before)) if after[y] is not before[y]]
        assert line in changed
        # The flag also moves the node's label ("1 flagged"): the grid lays out again.
        assert all(y == line or strip_text(after[y]) == strip_text(before[y]) or "flagged" in strip_text(after[y]) for y in changed)


async def test_ranks_saying_hello_under_another_order_and_the_flag_filter_end_the_waiting_note():
    # Sorted by anything but rank, the grid's layout key was the ranks shown: none before the
    # hellos, and none flagged after. It never changed, and the grid of a running job went on
    # saying "waiting for ranks to say hello" until the filter was toggled twice. (A terminal
    # whose panels keep their sizes when the ranks come: a new size lays the grid out again.)
    job = Job(0)
    app = make_app(job.viewer)
    async with app.run_test(size=(120, 18)) as pilot:
        grid = app.screen.query_one(RankGrid)
        await pilot.press("s", "f")
        await pilot.pause()
        assert grid.sort_key != "rank" and grid.flagged_only
        assert "waiting for ranks to say hello" in strip_text(strips_of(grid)[1])
        job.hello(range(4), 4)
        job.frame()
        app._poll()
        await pilot.pause()
        job.step()
        job.frame()
        app._poll()
        await pilot.pause()
        text = "\n".join(strip_text(s) for s in strips_of(grid))
        assert "no flagged ranks (f shows all)" in text and "waiting for ranks" not in text
        await pilot.press("f")  # every rank: shown at once
        await pilot.pause()
        assert sorted(grid.layout.where) == [0, 1, 2, 3]


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def monotonic(self) -> float:
        return self.t


async def test_running_figures_wait_their_turn_but_statuses_show_at_once(monkeypatch):
    from pardash.tui import app as tui_app

    clock = Clock()
    monkeypatch.setattr(dashboard, "time", clock)
    # The app's clock too: on the real one, a start that a loaded machine slowed past 3 s had
    # the hub read quiet, and the header, whose "hub quiet for" then changed at each update,
    # took every frame's figures at once.
    monkeypatch.setattr(tui_app, "time", clock)
    # A few ranks: the figures follow every frame, as their grid rows do.
    job = Job(4)
    job.step()
    job.frame()
    app = make_app(job.viewer)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        screen = app.screen
        header, selected = screen.query_one(RunHeader), screen.query_one(SelectedRank)
        job.step(loss=3.5)
        job.frame()
        screen.refresh_run()
        assert header.summary.step == 2 and selected.row == screen.grid.row_of(0) and selected.row.loss == 3.5
    # Many: they wait their turn.
    job = Job(dashboard.FIGURES_EVERY_FRAME_UP_TO + 1)
    job.step()
    job.frame()
    app = make_app(job.viewer)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        screen = app.screen
        header = screen.query_one(RunHeader)
        assert header.summary.step == 1
        # The same instant: a frame that only moves the figures waits for its turn...
        job.step()
        job.frame()
        screen.refresh_run()
        assert header.summary.step == 1
        # ...one that changes a rank's status shows at once, figures and all.
        job.core.verdict(schema.Verdict(rank=2, verdict="straggler"))
        job.step()
        job.frame()
        screen.refresh_run()
        assert dict(header.summary.status_counts).get("straggler") == 1 and header.summary.step == 3
        # A turn later the figures follow; and when frames stop, the last ones still arrive.
        job.step()
        job.frame()
        screen.refresh_run()
        assert header.summary.step == 3
        clock.t += dashboard.FIGURES_S
        job.step()
        job.frame()
        screen.refresh_run()
        assert header.summary.step == 5
        job.step()
        job.frame()
        screen.refresh_run()
        assert header.summary.step == 5
        for _ in range(200):
            if header.summary.step == 6:
                break
            await pilot.pause(0.05)
        assert header.summary.step == 6


async def test_header_lines_drawn_from_runs_match_the_text():
    """The header draws its runs straight to segments; the same lines as Rich renders its text
    (the path it took before), narrow or wide, with a note that wraps."""
    app = make_app(Fed())
    async with app.run_test(size=(120, 40)) as pilot:
        header = app.screen.query_one(RunHeader)
        header.summary = RunSummary(
            run_id="run-20260101-000000-abcd", strategy="fsdp", world_size=1024, nodes=128, device="NVIDIA H100 80GB",
            step=12345, samples_per_s=65432.1, elapsed_s=3725, status_counts=(("running", 1020), ("straggler", 4)),
            lost=3, dropped=1, ingest_hz=30000.0, log_path="/tmp/a/very/long/path/to/telemetry.jsonl",
            note="DP runs one replica per rank: the memory figures are per replica",
        )  # fmt: skip
        await pilot.pause()
        console = app.console
        for width in (118, 70, 40, 24):
            header._lines = None
            drawn = [[(s.text, s.style) for s in strip] for strip in header._strips(width)]
            expected = []
            for line in header._text(width).split("\n"):
                for part in line.wrap(console, width) if line.cell_len > width else (line,):
                    expected.append([(s.text, s.style) for s in text_strip(header, part, width)])
            assert ["".join(t for t, _ in line) for line in drawn] == ["".join(t for t, _ in line) for line in expected]
            for line_drawn, line_expected in zip(drawn, expected, strict=True):
                assert _by_cell(line_drawn) == _by_cell(line_expected), width


def _by_cell(segments: list) -> list:
    """(character, style) per cell: the same picture whatever the segment boundaries."""
    return [(ch, style) for text, style in segments for ch in text]


async def test_quiet_hub_hides_its_stale_rate_and_alarms_only_while_ranks_run():
    """A hub that stops sending frames: its last ingest rate is not shown as if current; the
    'hub quiet' line is an alarm while ranks still run; once every rank ended (the launcher
    stops the hub then) the header says how the job ended, not that the hub is quiet ("job
    ended · hub quiet for 6 s" read as a fault after a clean finish)."""
    app = make_app(Fed())
    async with app.run_test(size=(160, 40)) as pilot:
        header = app.screen.query_one(RunHeader)
        base = dict(run_id="r", strategy="ddp", world_size=2, ingest_hz=1234.0, live=True)
        texts = {}
        for name, counts, quiet in (
            ("flowing", (("running", 2),), None),
            ("running", (("running", 2),), 12.0),
            ("ended", (("finished", 1), ("exited", 1)), 12.0),
            ("finished", (("finished", 2),), 12.0),
        ):
            header.summary = RunSummary(status_counts=counts, hub_quiet_s=quiet, **base)
            # Read before the app runs again: once its source has been quiet 3 s (a loaded
            # machine gets here that late), it redraws the header from it every second.
            texts[name] = header._text(158)
            await pilot.pause()
        assert "hub 1234 msg/s" in texts["flowing"].plain and "quiet" not in texts["flowing"].plain
        assert "msg/s" not in texts["running"].plain and "hub quiet for 12 s" in texts["running"].plain
        assert "job ended" not in texts["running"].plain
        for name in ("ended", "finished"):
            assert "msg/s" not in texts[name].plain and "quiet" not in texts[name].plain
        assert "job ended: every rank finished" in texts["finished"].plain
        assert "job ended: 1 rank exited" in texts["ended"].plain
        bad = header._s("bad")
        def style_of(text, needle):
            start = text.plain.index(needle)
            return [sp.style for sp in text.spans if sp.start <= start < sp.end]
        assert bad in style_of(texts["running"], "hub quiet")
        assert bad not in style_of(texts["finished"], "job ended")


def _drawn_at(grid: RankGrid, rank: int, width: int = 1) -> list:
    """(text, style) of each cell of ``rank``'s first ``width`` columns as the grid draws them."""
    y, k = grid.layout.where[rank]
    x = grid.layout.lines[y].cells[k][0]
    strip = grid.render_line(y + 1 - grid.scroll_offset.y)
    cells = [(ch, seg.style) for seg in strip for ch in seg.text]
    return cells[x : x + width]


async def test_the_rank_a_hang_waits_for_stands_out_from_the_ranks_waiting_for_it():
    """64 ranks stalled, rank 3 in its data loader, the rest in a collective waiting for it:
    every one read "stalled" in one amber, in the cells and the heat map alike, and only the
    alert named the cause. The cause is drawn on its own (reversed), the others as waiting;
    a stall is drawn more gravely than a straggler."""
    job = Job(8)
    for _ in range(3):
        job.step()
        job.frame()
    app = make_app(job.viewer)
    async with app.run_test(size=(120, 40)) as pilot:
        grid = app.screen.query_one(RankGrid)
        grid.form = "heat"
        await pilot.pause()
        assert [ch for ch, _ in _drawn_at(grid, 3)] in ([g] for g in LEVEL_GLYPHS)  # (running)
        # The hang comes in a frame of its own: the heat map redraws the glyphs that changed.
        job.core.verdict(schema.Verdict(rank=3, verdict="stalled", cause="data", step=3))
        for r in (0, 1, 2, 4, 5, 6, 7):
            job.core.verdict(schema.Verdict(rank=r, verdict="stalled", cause="comm", step=3))
        job.frame()
        app._poll()
        await pilot.pause()
        (cause_glyph, cause_style), = _drawn_at(grid, 3)
        (waiting_glyph, waiting_style), = _drawn_at(grid, 5)
        assert cause_glyph == "◆" and cause_style.reverse
        assert waiting_glyph == "◇" and not waiting_style.reverse and waiting_style.color != cause_style.color

        grid.form = "cells"
        await pilot.pause()
        assert grid.layout.columns[:2] == ("rank", "status")
        status_x = grid.layout.rank_width + 1

        def status_of(rank: int) -> tuple[str, object]:
            cells = _drawn_at(grid, rank, status_x + 9)[status_x:]
            return "".join(ch for ch, _ in cells).strip(), cells[0][1]

        cause_text, cause_style = status_of(3)
        waiting_text, waiting_style = status_of(5)
        assert cause_text == "stalled" and cause_style.reverse
        assert waiting_text == "waiting" and not waiting_style.reverse
        # The cause resumes: no rank is named any more, the others read stalled again.
        job.core.verdict(schema.Verdict(rank=3, verdict="resumed", step=4))
        job.frame()
        app._poll()
        await pilot.pause()
        text, style = status_of(5)
        assert text == "stalled" and not style.reverse
        stalled_style = style
        job.core.verdict(schema.Verdict(rank=3, verdict="straggler", message="rank 3 is a straggler"))
        job.frame()
        app._poll()
        await pilot.pause()
        text, straggler_style = status_of(3)
        assert text == "straggler" and straggler_style.color != stalled_style.color


async def test_the_wide_grid_says_the_step_each_rank_is_at():
    """One rank behind the others: the step it is at is the first thing to read, and the grid
    did not show it. Each rank's last step has a column of its own when every rank has a line."""
    job = Job(4)
    for n in range(12):
        job.step(None if n < 5 else [0, 1, 3])  # rank 2 stops stepping after step 5
        job.frame()
    app = make_app(job.viewer)
    async with app.run_test(size=(120, 40)) as pilot:
        grid = app.screen.query_one(RankGrid)
        await pilot.pause()
        assert grid.layout.max_cols == 1  # a rank a line
        lines = [strip_text(grid.render_line(y)) for y in range(grid.size.height)]
        title = lines[0].split()
        at = title.index("step")
        steps = {}
        for rank in range(4):
            y = grid.layout.where[rank][0] + 1
            steps[rank] = lines[y].split()[at]
        assert steps == {0: "12", 1: "12", 2: "5", 3: "12"}


async def test_alerts_fit_the_panels_rows_and_say_how_many_they_leave_out():
    """The panel counted alerts (8) where its height counts rows (10): alerts of three or four
    rows each were cut mid-sentence at the panel's edge and the later ones vanished unsaid."""
    from pardash.tui.alerts import Alert
    from pardash.tui.widgets.alert_list import AlertList

    long = "stalled in backward after step 1234, likely the cause: 1023 others wait for it"
    app = make_app(Fed())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)  # (laid out and drawn: see the test below)
        panel = app.screen.query_one(AlertList)
        width = panel.content_region.width
        assert 30 < width < 60  # the side panel of a 120-column terminal
        rows = int(panel.styles.max_height.value) - 2  # less its border

        def shown() -> list[str]:
            """The panel's lines as drawn at its width."""
            return [line.plain.rstrip() for line in panel.render().wrap(app.console, width)]

        # Six alerts of three rows or more: each keeps a line, the first ones whole.
        panel.alerts = tuple(Alert("stalled", r, f"rank {r} {long}") for r in range(6))
        await pilot.pause()
        lines = shown()
        assert len(lines) <= rows
        assert all(any(line.startswith(f"◆ rank {r} ") for line in lines) for r in range(6))
        assert lines[-1].endswith("…")
        assert panel.content_region.height == len(lines)  # drawn in full
        # More kinds of alert than rows: the first ones, then how many are left out.
        panel.alerts = tuple(Alert("exited", r, f"rank {r} exited with code {r + 1}", code=r + 1) for r in range(30))
        await pilot.pause()
        lines = shown()
        assert len(lines) == rows and lines[-1].startswith(f"+{30 - (rows - 1)} more")


@pytest.mark.parametrize("size", [(60, 20), (66, 24), (71, 30), (72, 20), (80, 24), (100, 20), (120, 40)])
async def test_the_alerts_fit_the_rows_the_side_area_has_at_every_size(size):
    """Below 72 columns the side panels go under the grid with 2/5 of its height (7 rows at
    60x20), and at 100x20 the memory panel takes its share: the alerts were fitted to 10 rows
    wherever they were, so their last lines and their "+N more" ran past the side area's edge
    unsaid, and the event log under them was pushed off the screen."""
    job = Job(32)
    job.step()
    job.frame()
    for r in range(12):  # twelve exit codes: more kinds of exit than the panel has rows
        job.send(schema.Event(rank=r, name="exit", code=r + 1, step=2, run=RUN, t=job.t))
    job.frame()
    app = make_app(job.viewer)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = app.screen
        panel, side, events = screen.query_one(AlertList), screen.query_one("#side"), screen.query_one("#events")
        lines = [line.plain for line in panel.render().wrap(app.console, panel.content_region.width)]
        assert len(lines) <= panel.content_region.height, lines  # drawn in full
        assert panel.region.bottom <= side.region.bottom, (panel.region, side.region)
        # (one row: the cause's own line, cut, with what it leaves out: "× rank 0, … +11 more")
        one_row = len(lines) == 1 and lines[0].startswith("× rank 0") and lines[0].endswith(" more")
        assert (lines[-1].startswith("+") and " more" in lines[-1]) or one_row, lines
        assert 3 <= events.region.height and events.region.bottom <= side.region.bottom, events.region


async def test_a_kind_of_alert_folded_from_one_rank_is_that_ranks_own_line():
    """With more kinds of alert than rows, a kind that one rank has was folded as if many:
    the root cause read "× 1 exited with code first: ranks 0"."""
    from pardash.tui.alerts import Alert

    first = Alert("exited", 0, "rank 0, the root cause, exited with code 1", code=1, first=True)
    others = [Alert("exited", r, f"rank {r} exited with code {r}", code=r) for r in range(1, 12)]
    app = make_app(Fed())
    async with app.run_test(size=(120, 40)) as pilot:
        # (the screen draws again once laid out, setting the model's alerts, none: on a loaded
        # machine that came after the test's and fitted() read no alert)
        await settled(pilot)
        panel = app.screen.query_one(AlertList)
        panel.alerts = (first, *others)
        lines = [line.plain for line in panel.fitted(60, 4)]
        assert lines[:3] == [
            "× rank 0, the root cause, exited with code 1",
            "× rank 1 exited with code 1",
            "× rank 2 exited with code 2",
        ]
        # Two ranks a hang waited for, stopped as it hung: the likely cause, not "code first".
        hung = "stalled in data; then exited with code -15"
        causes = [Alert("exited", r, f"rank {r} {hung}", code=-15, first=True) for r in (0, 1)]
        panel.alerts = (*causes, *others[1:])
        assert panel.fitted(60, 4)[0].plain == "× 2 exited, likely the cause: ranks 0-1"


async def test_the_alerts_left_out_are_counted_in_ranks_not_in_folded_lines():
    """Folded, a line says many ranks ("9 exited with code 1: ranks 1-9"), and "+N more" counted
    the lines it left out: "+2 more" for 14 ranks' alerts."""
    from pardash.tui.alerts import Alert

    first = Alert("exited", 0, "rank 0, the root cause, exited with code 1", code=1, first=True)
    peers = [Alert("exited", r, f"rank {r} exited with code 1", code=1) for r in range(1, 10)]
    aborted = [Alert("exited", r, f"rank {r} exited with code 134", code=134) for r in range(10, 20)]
    stalled = [Alert("stalled", r, f"rank {r} stalled in comm after step 3") for r in range(20, 24)]
    app = make_app(Fed())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)  # (laid out and drawn: see the test above)
        panel = app.screen.query_one(AlertList)
        # (each fitted as it is set, no pause between: the app's own refresh, which a loaded
        # machine let in there, set the panel's alerts back to the run's, none: IndexError)
        panel.alerts = (first, *peers, *aborted)
        # The first line, the cause's; the two lines of exits by code left out: 19 ranks.
        lines = [line.plain for line in panel.fitted(60, 2)]
        assert lines[0].startswith("× rank 0, the root cause,")
        assert lines[1].startswith("+19 more ranks exited"), lines
        # Kinds mixed: each counted.
        panel.alerts = (first, *peers, *aborted, *stalled)
        lines = [line.plain for line in panel.fitted(60, 3)]
        assert lines[1].startswith("× 9 exited with code 1: ranks 1-9")
        assert lines[2].startswith("+14 more ranks: 10 exited, 4 stalled"), lines
        # A rank with two alerts: alerts are counted, not ranks.
        straggler = Alert("straggler", 24, "rank 24 is a straggler")
        not_sharding = [Alert("not_sharding", r, f"rank {r} holds the full model") for r in (23, 24)]
        panel.alerts = (first, *peers, *aborted, straggler, *not_sharding)
        lines = [line.plain for line in panel.fitted(60, 2)]
        assert lines[1].startswith("+22 more alerts"), lines
        # Narrow: the count whole, the note about the events left out before it is cut.
        lines = [line.plain for line in panel.fitted(24, 2)]
        assert lines[1] == "+22 more alerts", lines


async def test_a_rank_waiting_in_a_hang_says_which_rank_it_waits_for():
    """8 ranks stalled, rank 3 in its data loader, the rest in a collective: the grid drew the
    others as waiting (◇) for rank 3, but their alerts, their line under the grid and their
    detail said "stalled in comm", not for whom."""
    from pardash.tui.screens.rank_detail import RankDetailScreen

    job = Job(8)
    for _ in range(3):
        job.step()
        job.frame()
    job.core.verdict(schema.Verdict(rank=3, verdict="stalled", cause="data", step=3))
    for r in (0, 1, 2, 4, 5, 6, 7):
        job.core.verdict(schema.Verdict(rank=r, verdict="stalled", cause="comm", step=3))
    job.frame()
    app = make_app(job.viewer)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        panel = app.screen.query_one(AlertList)
        texts = {a.rank: a.text for a in panel.alerts}
        assert texts[3].startswith("rank 3 stalled in data after step 3, likely the cause")
        assert texts[5] == "rank 5 stalled in comm after step 3, waiting for rank 3", texts[5]
        # Folded (more alerts than rows): one line for the ranks waiting for rank 3.
        lines = [line.plain for line in panel.fitted(60, 4)]
        assert lines[-1] == "◇ 7 waiting for rank 3: ranks 0-2, 4-7", lines
        grid = app.screen.query_one(RankGrid)
        grid.select(5)
        await pilot.pause()
        line = app.screen.query_one(SelectedRank).render().plain
        assert "stalled in comm, waiting for rank 3" in line, line
        app.push_screen(RankDetailScreen(5))
        await pilot.pause()
        title = app.screen.query_one("#title").render()
        assert str(title).splitlines()[0].startswith("rank 5  stalled, waiting for rank 3"), str(title)


async def test_a_calm_note_longer_than_the_panels_rows_is_cut_to_them():
    """The note said when no alert is up ("no word from the hub…") wraps as it always did where
    the panel has the rows, and is cut with "…" to the rows it has where not (a side area under
    the grid at 60x20 gives the alerts one)."""
    app = make_app(Fed())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)  # (laid out and drawn, its own calm line set: see the tests above)
        panel = app.screen.query_one(AlertList)
        note = "⚠ no word from the hub for 12 s: these figures may be stale"
        panel.calm = note
        await pilot.pause()
        width = panel.content_region.width
        assert width < len(note) and panel.render().plain == note  # whole: Textual wraps it
        panel.max_rows = 1
        await pilot.pause()
        (line,) = panel.render().plain.splitlines()
        assert line.endswith("…") and len(line) <= width, line
        assert panel.content_region.height == 1


async def test_the_loss_charts_now_is_the_median_of_the_losses_the_grid_shows():
    """The run's loss chart said "now 0.8181" above both ranks' losses in the grid: its "now"
    was taken with the curve, twice a second, and lagged the grid; it goes with the grid's
    frame now (the curve keeps its own rate)."""
    from pardash.tui.format import fmt_loss
    from pardash.tui.widgets.history_chart import HistoryChart

    job = Job(2)
    for _ in range(5):
        job.step()
        job.frame()
    app = make_app(job.viewer)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        # (the chart shows once the grid is laid out, and draws)
        await until(pilot, lambda: screen.has_class("-trend") and "now" in str(screen.query_one("#trend", HistoryChart).border_title))
        for loss in (0.5, 3.0):
            job.step(loss=loss)
            job.frame()
            app._poll()
            screen.refresh_run()  # (no timer runs between: the chart's own turn does not come)
            grid = [screen.grid.row_of(r).loss for r in (0, 1)]
            assert grid == [loss, loss]
            title = str(screen.query_one("#trend", HistoryChart).border_title)
            assert f"now {fmt_loss(loss)} " in title, title


def _started_late() -> tuple[HubCore, Fed]:
    """A hub that started at 1000.0 and ranks 0 and 1 that said hello 7 s later, then took 9 s
    of steps (torchrun and torch's import between: the run's 00:00 is their first word)."""
    core = HubCore(run_id=RUN, detector=NullDetector())  # type: ignore[arg-type]
    viewer = Fed()
    core.replay(schema.Event(rank=-1, seq=-1, name="hub", message="hub started (pid 1)", run=RUN, t=1000.0), 1000.0)
    viewer.apply_frame(core.tick(1000.1))
    return core, viewer


def _steps(core: HubCore, viewer: Fed) -> None:
    for r in (0, 1):
        core.replay(schema.Hello(rank=r, world_size=2, strategy="ddp", run=RUN, t=1007.0), 1007.0)
    for s in range(1, 10):
        for r in (0, 1):
            core.replay(schema.Step(rank=r, step=s, loss=1.0, samples=8, step_s=1.0, run=RUN, t=1007.0 + s), 1007.0 + s)
        viewer.apply_frame(core.tick(1007.1 + s))
    viewer.pending = True


async def test_the_event_log_says_the_hubs_start_before_the_runs_00_00_not_at_it():
    # "hub started", 7 s before the ranks' first word (the run's 00:00, as the header's elapsed
    # counts), read "00:00", as if the ranks had started with the hub.
    from pardash.tui.widgets.event_log import EventLog

    core, viewer = _started_late()
    app = make_app(viewer)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        log = app.screen.query_one("#events", EventLog)
        # (no rank yet: the run's 00:00 is not known, no clock rather than one that moves)
        assert [line.text.rstrip() for line in log.lines] == ["--:-- hub: hub started (pid 1)"]
        _steps(core, viewer)
        app._poll()
        await pilot.pause()
        assert log.lines[0].text.startswith("-0:07 hub: hub started"), [line.text for line in log.lines]
        assert "elapsed 9s" in str(app.screen.query_one(RunHeader).render())


def test_the_progress_lines_count_from_the_runs_00_00_as_the_header_does(monkeypatch):
    # `launch --headless` and `pardash attach`: the printer said "0:00:15" (from its own start,
    # the launch) where the TUI said "elapsed 9s" (from the ranks' first word); attached to a
    # run an hour old, it said 0:00:00.
    import io

    from pardash.telemetry import printer as printer_mod
    from pardash.telemetry.printer import ProgressPrinter
    from pardash.tui.widgets.run_header import summarize

    clock = [500.0]
    monkeypatch.setattr(printer_mod.time, "monotonic", lambda: clock[0])
    core, viewer = _started_late()
    out = io.StringIO()
    printer = ProgressPrinter(viewer, out=out, bar=False, every_s=5.0)
    printer.update()  # (attached as the hub started: no rank yet)
    clock[0] += 16.0
    _steps(core, viewer)
    printer.update(force=True)
    assert out.getvalue().splitlines()[-1].startswith("[   9.0s] step 9 "), out.getvalue()
    assert summarize(viewer).elapsed_s == 9.0
    # Attached later: the same clock, not the printer's own from 0.
    out = io.StringIO()
    clock[0] += 60.0
    ProgressPrinter(viewer, out=out, bar=False).update(force=True)
    assert out.getvalue().startswith("[   9.0s] step 9 "), out.getvalue()
