"""The dashboard: header, rank grid, alerts, memory savings and the event log."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Input

from pardash.telemetry.client import Source
from pardash.telemetry.logreader import no_rank_reported
from pardash.telemetry.summary import ranks_named, stragglers_were

from ..alerts import run_alerts
from ..charts import newest_loss, run_series
from ..format import fmt_loss
from ..grid_layout import lay_out
from ..memory import memory_savings
from ..messages import RankChosen, RankHighlighted, RunUpdated
from ..model import SORT_KEYS, SORT_LABELS, RankRow, RowBuilder, is_stopping
from ..run_clock import run_origin
from ..widgets.alert_list import CHROME_ROWS, MAX_ROWS, STALE_MARK, AlertList
from ..widgets.event_log import EventLog
from ..widgets.fitted_footer import FittedFooter
from ..widgets.history_chart import HistoryChart, off_scale
from ..widgets.memory_summary import MemorySummary
from ..widgets.rank_grid import RankGrid
from ..widgets.run_header import RunHeader, RunSummary, replay_position, summarize
from ..widgets.selected_rank import SelectedRank

SLOW_REFRESH_S = 0.5
"""Panels that summarise every rank (memory savings) redraw at most this often."""
FIGURES_S = 0.25
"""The header's running figures (step, samples/s, elapsed time, the hub's rate) and the
selected rank's figures (loss, times) redraw at most this often; what they say about the run
(rank statuses, flags, notes, warnings) redraws at once. Each frame moves those figures, and
redrawing the header and that line at every frame, at opposite ends of the screen, made Textual
render every widget across the screen's height: at 1024 ranks about as much as all the rest of
drawing a frame (a heat map of steady ranks redraws nothing)."""

FIGURES_EVERY_FRAME_UP_TO = 64
"""Ranks up to which the header and the selected rank's line redraw with every frame, as the
grid does: their cost is small then, and a line that lagged its grid row by a quarter second
showed the same rank's figures twice, different."""


@dataclass(frozen=True, slots=True)
class _Widgets:
    """The dashboard's widgets that a frame updates."""

    grid: RankGrid
    selected: SelectedRank
    header: RunHeader
    alerts: AlertList
    memory: MemorySummary
    events: EventLog
    main: Vertical
    side: Vertical
    trend: HistoryChart


def _said(summary: RunSummary) -> RunSummary:
    """What a header says about the run, its running figures left out (see FIGURES_S)."""
    replay = summary.replay
    if replay is not None:
        replay = replace(
            replay,
            position_s=0.0,
            reached=None if replay.reached is None else 0.0,
            seeking_at=None if replay.seeking_at is None else 0.0,
        )
    return replace(summary, step=0, samples_per_s=None, elapsed_s=0.0, ingest_hz=0.0, replay=replay)


def _said_row(row: RankRow | None) -> tuple | None:
    """What the selected-rank line says about the rank, its figures left out."""
    if row is None:
        return None
    return (row.rank, row.node, row.host, row.status, row.flagged, row.exit_code, row.self_dev is None, row.cause, row.stalled_in, row.waits_for)


class DashboardScreen(Screen):
    """The default screen: every rank at a glance, and what needs attention.

    It holds the view settings (the grid's form, sort and filter live on the grid) and turns
    :class:`RunUpdated` into widget updates: the grid, header, alerts and event log on every
    update, the memory summary at a lower rate.
    """

    DEFAULT_CSS = """
    DashboardScreen {
        layout: vertical;
    }
    DashboardScreen #body {
        height: 1fr;
    }
    DashboardScreen #main {
        width: 1fr;
        min-width: 40;
        border: round $panel-lighten-2;
        border-title-color: $text-accent;
        border-title-style: bold;
        border-subtitle-color: $text-muted;
    }
    DashboardScreen #main:focus-within {
        border: round $border;
    }
    DashboardScreen #trend {
        display: none;
        height: 11;
        border-top: solid $panel-lighten-2;
        border-title-color: $text-accent;
        border-title-style: bold;
    }
    DashboardScreen.-trend #trend {
        display: block;
    }
    DashboardScreen #side {
        width: 38%;
        max-width: 64;
        min-width: 30;
    }
    DashboardScreen.-narrow #side {
        width: 34;
        min-width: 30;
    }
    DashboardScreen.-narrow #memory, DashboardScreen.-short #memory {
        display: none;
    }
    DashboardScreen.-stacked #body {
        layout: vertical;
    }
    DashboardScreen.-stacked #main {
        width: 100%;
        min-width: 0;
        height: 3fr;
        /* a line of ranks at least, with its border and the selected rank's line (60x12: the
           grid's share was none) */
        min-height: 4;
    }
    DashboardScreen.-stacked #side {
        width: 100%;
        min-width: 0;
        max-width: 100%;
        height: 2fr;
    }
    DashboardScreen .panel {
        border: round $panel-lighten-2;
        border-title-color: $text-accent;
        border-title-style: bold;
        background: $surface;
    }
    DashboardScreen #events:focus {
        border: round $border;
    }
    DashboardScreen #goto {
        display: none;
    }
    DashboardScreen #goto.-open {
        display: block;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m", "memory", "Memory", tooltip="Per-rank memory: sharded against unsharded"),
        Binding("o", "output", "Output", tooltip="The ranks' own output (what the script prints), as it grows"),
        Binding("c", "toggle_form", "Cells/heat", tooltip="Switch the grid between cells and a heat map"),
        Binding("s", "cycle_sort", "Sort", tooltip="Sort by rank, step time, self time, memory, status"),
        Binding("f", "toggle_flagged", "Flagged", tooltip="Show only flagged ranks, or all"),
        # (in the footer of none: ? lists it)
        # (a priority binding: `/` opens the box before the app routes the keys after it, which
        # went to the grid where they came in one read, a paste's `/37⏎`; check_action leaves `/`
        # to an input box)
        Binding("slash", "goto_rank", "Rank", key_display="/", show=False, priority=True, tooltip="Go to a rank by its number"),
        # Shown while the event log has the focus (tab), where the grid's keys are not: the
        # footer lost "⏎ Detail" and said nothing of the way back (tab, shift+tab or this).
        Binding("escape", "focus_grid", "Grid", key_display="esc/tab", tooltip="Back to the rank grid"),
    ]

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._rows = RowBuilder()
        self._slow_version = -1
        self._widgets: _Widgets | None = None
        """The widgets a frame updates, found once (a query per widget and frame added up)."""
        self._figures_t = 0.0
        """When the header and the selected-rank line last took a frame's figures."""
        self._figures_due: Timer | None = None
        """Brings the latest figures when frames stop coming (see FIGURES_S)."""
        self._summary: RunSummary | None = None
        """The latest frame's header, shown or waiting for its turn."""
        self._side_width: int | None = None
        """The side panels' width when the grid leaves them more than the stylesheet's."""
        self._trend_key: tuple = ()
        """What the loss chart was last shown or hidden for (see :meth:`_fit_trend`)."""
        self._memory_rows = 0
        """The memory panel's height as last drawn (see :meth:`_fit_alerts`)."""
        self._alert_lines_of: tuple[tuple, int] | None = None
        """The alerts' lines, and what they were worked out for (see :meth:`_alert_lines`)."""
        self._trend_band = ""
        """The loss chart's legend, from its last drawing (its "now" is the grid's)."""
        self._drawn_version = -1
        """The app's version :meth:`refresh_run` last drew (see :meth:`_run_updated`)."""
        self._titles: dict[tuple[str | None, str], str] = {}
        """The border titles this screen set, as it gave them (see :meth:`_set_title`)."""

    @property
    def source(self) -> Source:
        return self.app.source  # type: ignore[attr-defined]

    @property
    def grid(self) -> RankGrid:
        return self._widgets.grid if self._widgets is not None else self.query_one(RankGrid)

    def compose(self) -> ComposeResult:
        yield RunHeader(id="header")
        with Horizontal(id="body"):
            with Vertical(id="main"):
                yield RankGrid(id="grid")
                yield HistoryChart(fmt_loss, id="trend")
                yield SelectedRank(id="selected")
            with Vertical(id="side"):
                yield AlertList(id="alerts", classes="panel")
                yield MemorySummary(id="memory", classes="panel")
                yield EventLog(id="events", classes="panel")
        yield Input(placeholder="go to rank: its number (enter; esc: never mind)", id="goto", type="integer")
        yield FittedFooter(compact=self.COMPACT_FOOTER)

    COMPACT_FOOTER = False
    """One space between the footer's keys, not two (a replay's, for its own keys)."""

    NARROW_WIDTH = 100
    """Below this many columns the memory panel gives its room to the event log (m shows it)."""

    STACKED_WIDTH = 72
    """Below this many columns the side panels go under the grid: side by side, the two would
    not fit (their least widths), and the alerts ran off the screen's edge."""

    SIDE_WIDTH = 64
    """The side panels' width on a terminal of 168 columns or more (38% below), unless the grid
    leaves them more (see :meth:`_fit_side`)."""
    WIDE_SIDE_WIDTH = 110
    """The most the side panels take when the grid needs less than its share: enough for the
    event log's lines not to wrap."""
    WIDE_SIDE_SHARE = 0.45
    """And the most of the screen's width they take then: the grid's panel keeps the larger
    share, for the loss chart under the grid (at 200x50 the side panels took 110 columns and
    the chart 88)."""
    MAIN_CHROME = 3
    """Columns of the grid's panel around the grid itself: its border and the scrollbar's."""

    EVENTS_LEAST = 3
    """Rows the event log keeps under the alerts (its border and its latest line): the alerts
    give way to them, not the log to the alerts, which pushed it off a short side area."""
    EVENTS_USEFUL = 8
    """Rows the event log keeps before the memory panel is shown (its border and six lines: a
    failure's traceback and exits). The memory panel gives way to them, as it does below
    NARROW_WIDTH; the alerts keep their lines. At 100x30 a dead DDP job's alerts and the
    panel's ten lines left the log one line, which said half of "killed by signal 15"."""

    TREND_HEIGHT = 11
    """Lines of the run's loss chart under the grid (its rule included), shown when the grid
    leaves them free (see :meth:`_fit_trend`)."""

    def on_resize(self) -> None:
        self.set_class(self.size.width < self.NARROW_WIDTH, "-narrow")
        self.set_class(self.size.width < self.STACKED_WIDTH, "-stacked")
        self._fit_side()
        self._fit_trend()
        # Again once the grid has laid itself out at its new size: what it needs was measured
        # at the old one (an ended replay, which no new frame redraws, kept a small terminal's
        # side panels after the terminal grew back).
        self.call_after_refresh(self._refit)

    def _refit(self) -> None:
        self._fit_side()
        self._fit_trend()
        self._fit_alerts()

    def _fit_alerts(self) -> None:
        """The rows the alerts may take: the side area's less the memory panel's and the
        event log's least (below 72 columns the side area goes under the grid with 2/5 of its
        height; on a short terminal the memory panel takes its share). The panel was fitted
        to MAX_ROWS wherever it was, and past the side area's edge its last alerts and its
        "+N more" were cut unsaid. Cheap (a few sizes read): called with every frame, as the
        header's height, and so the side area's, may change with one."""
        w = self._widgets
        if w is None:
            return
        height = w.side.size.height
        if not height:
            return
        # A side area too short for the memory panel over an alert and the event log's least
        # leaves the panel out, as a narrow one does (m shows it): the panel pushed the alerts
        # out of a short side area. Its height is the last it was drawn at while hidden.
        if w.memory.display:
            self._memory_rows = w.memory.outer_size.height
        # (the same for the event log's useful least, the alerts having every line they take)
        narrow = self.has_class("-narrow")
        short = not narrow and height - self._memory_rows - CHROME_ROWS - self._alert_lines(w) < self.EVENTS_USEFUL
        self.set_class(short, "-short")
        memory = 0 if short or narrow else self._memory_rows
        rows = height - memory - self.EVENTS_LEAST - CHROME_ROWS
        # A side area too short for an alert and the event log's least (a tiny terminal)
        # leaves the log out: it was its border and title alone, under the alerts.
        events = rows >= 1
        if not events:
            rows = height - memory - CHROME_ROWS
        # (and one too short for an alert leaves them out too: a border and no line)
        alerts = height - memory >= CHROME_ROWS + 1
        rows = max(1, min(MAX_ROWS, rows))
        if w.events.display != events:
            w.events.display = events
        if w.alerts.display != alerts:
            w.alerts.display = alerts
        if w.alerts.max_rows != rows:
            w.alerts.max_rows = rows

    def _alert_lines(self, w: _Widgets) -> int:
        """The lines the alerts take given MAX_ROWS (worked out again only when the alerts, the
        calm line or the panel's width change: the reactive keeps its tuple while equal)."""
        alerts = w.alerts
        width = max(10, alerts.content_region.width or w.side.size.width - 4)  # (its border, padding)
        key = (alerts.alerts, alerts.calm, width)
        cached = self._alert_lines_of
        if cached is not None and cached[0][0] is key[0] and cached[0][1:] == key[1:]:
            return cached[1]
        if alerts.alerts:
            lines = len(alerts.fitted(width, MAX_ROWS))
        else:
            lines = min(MAX_ROWS, len(Text(alerts.calm).wrap(self.app.console, width)))
        self._alert_lines_of = (key, lines)
        return lines

    def _fit_trend(self) -> None:
        """Show the run's loss under the grid when the grid, that much shorter, still draws
        its ranks as it does now (same form, same columns, every line): a run of a few ranks
        gets its loss curve on the first screen, and so does a heat map of 1024 ranks with rows
        to spare; one whose grid needs every line keeps them."""
        w = self._widgets
        if w is None:
            return
        grid = w.grid
        table = self._rows
        # (less the selected-rank line, and a heat map's legend's second line where it wraps)
        height = w.main.scrollable_content_region.height - 1 - (max(1, grid.head_lines) - 1)
        width = grid.scrollable_content_region.width
        key = (table.layout_gen, table.flagged_gen, width, height, grid.form, grid.sort_key, grid.flagged_only)
        if key == self._trend_key:
            return
        self._trend_key = key
        show = False
        rows = table.rows()
        if rows and width > 0 and height > self.TREND_HEIGHT:
            settings = {"width": width, "form": grid.form, "sort_key": grid.sort_key, "flagged_only": grid.flagged_only, "gpu": table.gpu}
            tall = lay_out(rows, height=height, **settings)
            short = lay_out(rows, height=height - self.TREND_HEIGHT, **settings)
            show = (
                short.heat == tall.heat  # a heat map that still fits keeps the chart under it too
                and short.columns == tall.columns
                and len(short.lines) + 1 <= height - self.TREND_HEIGHT
            )
        if show != self.has_class("-trend"):
            self.set_class(show, "-trend")
            if show:
                self._slow_version = -1
                self.call_after_refresh(self._refresh_slow)

    def _fit_side(self) -> None:
        """On a wide terminal whose ranks fit the grid a line each, the grid's panel keeps the
        width it needs and the side panels (alerts, memory, events) take the rest, up to
        WIDE_SIDE_WIDTH and WIDE_SIDE_SHARE of the screen; otherwise the grid keeps its share
        (it packs more ranks a line)."""
        w = self._widgets
        if w is None:
            return
        need = w.grid.one_column_width
        width: int | None = None
        if need is not None:
            room = self.size.width - need - self.MAIN_CHROME
            width = min(room, self.WIDE_SIDE_WIDTH, int(self.size.width * self.WIDE_SIDE_SHARE))
            if width <= self.SIDE_WIDTH:
                width = None
        if width == self._side_width:
            return
        self._side_width = width
        styles = w.side.styles
        if width is None:  # back to the stylesheet's
            styles.clear_rule("width")
            styles.clear_rule("max_width")
        else:
            styles.width = styles.max_width = width

    def on_mount(self) -> None:
        self._widgets = _Widgets(
            grid=self.query_one(RankGrid),
            selected=self.query_one(SelectedRank),
            header=self.query_one(RunHeader),
            alerts=self.query_one(AlertList),
            memory=self.query_one(MemorySummary),
            events=self.query_one(EventLog),
            main=self.query_one("#main", Vertical),
            side=self.query_one("#side", Vertical),
            trend=self.query_one("#trend", HistoryChart),
        )
        self.query_one("#main").border_title = "ranks"
        self.query_one("#alerts").border_title = "alerts"
        self.query_one("#memory").border_title = "memory · m"
        self.query_one("#events").border_title = "events"
        self.grid.focus()
        self._update_labels()
        self.set_interval(SLOW_REFRESH_S, self._refresh_slow)
        self.refresh_run()

    # -- updates ------------------------------------------------------------------------------

    @on(RunUpdated)
    def _run_updated(self, _message: RunUpdated) -> None:
        if self._drawn_version == self.app.version and not self._moves_with_the_clock():  # type: ignore[attr-defined]
            return  # (a hub's frame that brought nothing: the same picture, drawn again)
        self.refresh_run()

    def _moves_with_the_clock(self) -> bool:
        """What the dashboard shows changes with time alone, no frame bringing anything: the
        seconds waited for the first rank, the hub's quiet (its counter while ranks run; its
        start and end once they ended, when the header says how the job ended instead)."""
        summary = self._summary
        if summary is None or summary.waiting_s is not None:
            return True
        quiet = self.app.hub_quiet_s  # type: ignore[attr-defined]
        if (quiet is None) != (summary.hub_quiet_s is None):
            return True
        return quiet is not None and not summary.ended

    def on_screen_resume(self) -> None:
        self.refresh_run()
        self._show_figures(now=True)

    def refresh_run(self) -> None:
        """Redraw from the source's current state (cheap: one pass over the ranks)."""
        w = self._widgets
        if not self.is_mounted or w is None:
            return
        source = self.source
        if self._seeking():
            # A seek on its way (it plays the log from a keyframe, or its start): the header says
            # where it goes and how far it has got; the rest keeps the figures from before it until
            # it is there. The grid and charts replayed the run from its start, under a header
            # that already said the target.
            self._summary = replace(self._summary, replay=replay_position(source))
            self._show_figures()
            return
        state = source.state
        # (drawn before the first layout, the panels' sizes unknown, it is drawn again with them)
        self._drawn_version = self.app.version if w.side.size.height else -1  # type: ignore[attr-defined]
        table = self._rows.update(state)
        w.grid.update_rows(table)
        self._fit_side()
        self._fit_trend()
        origin = run_origin(source, table.first_word)
        self._summary = summarize(
            source,
            hub_quiet_s=self.app.hub_quiet_s,  # type: ignore[attr-defined]
            hub_lost=getattr(self.app, "hub_lost", ""),
            totals=table.totals,
            origin=origin,
        )
        self._show_figures()
        alerts = w.alerts
        alerts.alerts = tuple(
            run_alerts(state, table.flagged, t0=origin, costs=table.straggler_costs(), waits_for=table.waits_for)
        )
        quiet = self._summary.hub_quiet_s
        if not state.ranks:
            # (a replay of a log no rank ever reported to read "waiting for ranks…" at its end)
            if getattr(source, "no_rank_reported", False):
                alerts.calm = f"{STALE_MARK} {no_rank_reported()}"
            elif source.live and state.job_ended:
                # (it read "waiting for ranks…" after torchrun had failed to start them: q's last
                # line says why, `o` shows torchrun's own words)
                alerts.calm = f"{STALE_MARK} no rank started: torchrun exited first (o: its output; q: why)"
            else:
                alerts.calm = "waiting for ranks…"
        elif all(r.finished for r in state.ranks.values()):
            restarts = max(r.restarts for r in state.ranks.values())
            again = f", after torchrun restarted the job {restarts}x" if restarts else ""
            alerts.calm = "✓ every rank finished" + again + _stragglers_were(state)
        elif (early := getattr(source, "ended_early", None)) is not None:
            # A log whose hub died: "every rank is healthy" claimed what the log does not know
            # (what became of them after; the header's note says why it ends, in a line).
            where = "the hub stopped" if early.get("hub_stopped") else "the log ends early"
            alerts.calm = f"{STALE_MARK} no alerts up to step {early['step']}, where {where}"
        elif quiet is not None and not self._summary.ended:
            # The hub itself is not heard from: "healthy" would be a guess from stale figures.
            alerts.calm = f"{STALE_MARK} no word from the hub for {quiet:.0f} s: these figures may be stale"
        elif restart := _starting_again(state):
            # (every rank "healthy" read oddly right under the crash that made torchrun restart them)
            alerts.calm = f"… torchrun restarted the job (restart {restart}): its ranks are starting again"
        elif being_stopped := _being_stopped(state):
            # (a slow stop's seconds read "✓ no alerts: every rank is healthy" over a grid of
            # ranks "stopping")
            alerts.calm = being_stopped
        else:
            # (and who was a straggler before: someone looking in after hours read "every rank is
            # healthy" and nothing of the spell at 00:46, gone from the event log's 500 lines)
            alerts.calm = "✓ no alerts: every rank is healthy" + _stragglers_were(state)
        self._fit_alerts()
        w.events.origin = origin
        w.events.sync(state)
        self._update_labels()
        if self._slow_version < 0:
            self._refresh_slow()

    def _seeking(self) -> bool:
        """A replay's seek is on its way, and the screen has the figures from before it."""
        return self._summary is not None and getattr(self.source, "seeking", False)

    def _show_figures(self, *, now: bool = False) -> None:
        """The latest header and selected-rank line: at once when what they say changed (or
        ``now``), else with the next turn of FIGURES_S (see there)."""
        w = self._widgets
        summary = self._summary
        if w is None or summary is None:
            return
        grid = w.grid
        # (a rank the flagged filter hides is not described under a grid without it)
        row = grid.row_of(grid.cursor_rank) if grid.shows(grid.cursor_rank) else None
        t = time.monotonic()
        wait = self._figures_t + FIGURES_S - t
        if (
            not now
            and wait > 0
            and len(self.source.state.ranks) > FIGURES_EVERY_FRAME_UP_TO
            and _said(summary) == _said(w.header.summary)
            and _said_row(row) == _said_row(w.selected.row)
        ):
            if self._figures_due is None:
                self._figures_due = self.set_timer(wait, self._figures_turn)
            return
        self._figures_t = t
        if self._figures_due is not None:
            self._figures_due.stop()
            self._figures_due = None
        w.header.summary = summary
        w.selected.row = row
        self._trend_now()

    @on(HistoryChart.WidthChanged)
    def _trend_resized(self, message: HistoryChart.WidthChanged) -> None:
        if self._widgets is not None and message.chart is self._widgets.trend:
            self._slow_version = -1  # (drawn again at the chart's new width, frame or none)
            self._refresh_slow()

    def _trend_now(self) -> None:
        """The loss chart's "now": the median of the losses the grid shows, at the pace of the
        header and the selected rank's line (the curve itself at the charts' lower rate). Taken
        with the curve, "now 0.8181" sat half a second behind the grid, above both ranks'
        losses beside it."""
        w = self._widgets
        if w is None or not self._trend_band or not self.has_class("-trend") or self._seeking():
            return
        latest, _n = newest_loss(self.source.state)
        self._set_title(w.trend, "border_title", f"loss [not bold dim]now {fmt_loss(latest)} · {self._trend_band}[/]")

    def _figures_turn(self) -> None:
        self._figures_due = None
        self._show_figures(now=True)

    def _refresh_slow(self) -> None:
        version = self.app.version  # type: ignore[attr-defined]
        if version == self._slow_version or self._widgets is None or self._seeking():
            return  # (a seek's: once it is there)
        self._slow_version = version
        memory = self._widgets.memory
        savings = memory.savings
        memory.savings = memory_savings(self.source.state, reuse=savings)
        if memory.savings is not savings:  # (its height may be new: known once laid out)
            self.call_after_refresh(self._fit_alerts)
        trend = self._widgets.trend
        if self.has_class("-trend"):
            series = run_series(self.source.state, trend.plot_width)
            trend.series = series
            if series is not None:
                # (one rank, single or dp: no median of one; its band is its spread in a column)
                # (no rank with a loss now: starting again after a restart)
                self._trend_band = (
                    "▀ 1 rank, ░ its range" if series.others == 1
                    else f"▀ median, ░ range of {series.others} ranks" if series.others else "▀ median, ░ range of the ranks"
                )  # fmt: skip
                # Ranks whose loss is not finite have none to draw: said, where "1 rank" of a
                # job of two read as a rank gone.
                bad = [r.rank for r in self.source.state.ranks.values() if r.loss_bad is not None]
                if bad:
                    from ...telemetry.summary import ranks_named

                    self._trend_band += f" · {ranks_named(bad)} not finite, left out"
                if off_scale(series, trend.plot_width):  # (its glyphs are the grid's straggler's too: said)
                    self._trend_band += " · ▲▼ off the scale"
                self._trend_now()

    @on(RankHighlighted)
    def _highlighted(self, message: RankHighlighted) -> None:
        self.query_one(SelectedRank).row = self.grid.row_of(message.rank)

    @on(RankChosen)
    def _chosen(self, message: RankChosen) -> None:
        from .rank_detail import RankDetailScreen

        self.app.push_screen(RankDetailScreen(message.rank))

    # -- actions ------------------------------------------------------------------------------

    def _update_labels(self) -> None:
        grid = self.grid
        form = "heat map" if grid.heat else "cells"
        label = f"{form} · sorted by {SORT_LABELS[grid.sort_key]}" + (" · flagged only" if grid.flagged_only else "")
        main = self._widgets.main if self._widgets is not None else self.query_one("#main")
        self._set_title(main, "border_subtitle", label)

    def _set_title(self, widget: Widget, which: str, title: str) -> None:
        """Set a border title (``which``: "border_title" or "border_subtitle") unless it is the
        one this screen last set there. Setting one repaints the widget's whole panel, the same
        text or not; and one read back is Textual's markup of it, not the text as set ("loss
        [not bold dim]now …[/]" reads back otherwise): compared with that, the loss chart's
        title was set, and its panel repainted, at every frame."""
        key = (widget.id, which)
        if self._titles.get(key) == title:
            return
        setattr(widget, which, title)
        self._titles[key] = title

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "focus_grid":
            return self.focused is not None and self.focused is not self.grid
        if action == "goto_rank":
            return not isinstance(self.focused, Input)
        return True

    def on_descendant_focus(self) -> None:
        self.refresh_bindings()  # (the footer's "esc/tab Grid" comes and goes with the focus)

    def on_descendant_blur(self) -> None:
        self.refresh_bindings()

    def action_focus_grid(self) -> None:
        box = self.query_one("#goto", Input)
        if box.has_class("-open"):
            box.remove_class("-open")
            box.styles.display = "none"
        self.grid.focus()

    def action_goto_rank(self) -> None:
        """Ask for a rank's number, to put the cursor on it: at 4096 ranks, rank 3001 was 62
        presses of the arrow keys away (review 294)."""
        box = self.query_one("#goto", Input)
        box.value = ""
        box.add_class("-open")
        # (at once, not at the next idle, as focus() would: the keys typed right after `/`,
        # a fast typist's or a paste's, went to the grid, and its enter opened a rank's detail)
        box.styles.display = "block"
        self.set_focus(box)

    @on(Input.Submitted, "#goto")
    def _goto(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        self.action_focus_grid()
        if not text:
            return
        grid = self.grid
        rank = int(text) if text.lstrip("-").isdigit() else -1
        if rank not in self._rows:
            ranks = self._rows.ranks
            self.notify(f"no rank {text} here ({ranks_named(ranks) if ranks else 'no rank yet'})", severity="warning", timeout=4)
            return
        if grid.flagged_only and not grid.shows(rank):
            grid.flagged_only = False  # (it is not flagged: every rank, to show it)
            self._view_changed()
            self.call_after_refresh(grid.select, rank)
            return
        grid.select(rank)

    def action_memory(self) -> None:
        from .memory import MemoryScreen

        self.app.push_screen(MemoryScreen())

    def action_output(self) -> None:
        from .output import OutputScreen, output_file

        app = self.app
        self.app.push_screen(OutputScreen(*output_file(app.source, getattr(app, "output", ""), runs_dir=getattr(app, "runs_dir", "runs"))))

    def action_toggle_form(self) -> None:
        grid = self.grid
        grid.form = "cells" if grid.heat else "heat"
        self._view_changed()

    def action_cycle_sort(self) -> None:
        grid = self.grid
        grid.sort_key = SORT_KEYS[(SORT_KEYS.index(grid.sort_key) + 1) % len(SORT_KEYS)]
        self._view_changed()

    def action_sort(self, key: str) -> None:
        self.grid.sort_key = key
        self._view_changed()

    def action_toggle_flagged(self) -> None:
        self.grid.flagged_only = not self.grid.flagged_only
        self._view_changed()
        self._show_figures(now=True)

    def _view_changed(self) -> None:
        """The grid's form, order or filter changed: its labels, and the room it leaves the loss
        chart and the side panels, now. (They were fitted at the next redraw, which an ended
        or paused replay never makes: the chart stayed under 1024 cells that needed its lines.)"""
        self._update_labels()
        self._fit_trend()
        self.call_after_refresh(self._refit)


class ReplayDashboardScreen(DashboardScreen):
    """The dashboard of a replay: its footer leaves out the grid's view keys (c, s, f; they work,
    and ``?`` lists them) for the replay's own (space, +/-, [/]), which an 80-column footer cut
    off entirely, as it did "Speed" and "Seek" at 100 columns; compact, they fit in 80."""

    COMPACT_FOOTER = True

    BINDINGS: ClassVar[list[BindingType]] = [
        replace(b, show=False) for b in DashboardScreen.BINDINGS if isinstance(b, Binding) and b.key in ("c", "s", "f")
    ]


def _starting_again(state) -> int:
    """torchrun's restart count while a restarted rank has taken no step yet (0 otherwise)."""
    return max((r.restarts for r in state.ranks.values() if r.restarts and r.step is None and r.exit_code is None
                and not r.finished), default=0)  # fmt: skip


def _being_stopped(state) -> str:
    """What the alerts panel says, with no alert, while the launcher stops ranks that have not
    ended yet (as the grid draws them "stopping"): who is being stopped, by whom; '' otherwise."""
    ranks, who = [], ""
    for r in state.ranks.values():
        if r.stopping is not None and is_stopping(r, r.status):
            ranks.append(r.rank)
            who = who or (r.stopping.message or "")
    if not ranks:
        return ""
    return f"◐ {ranks_named(sorted(ranks))} being stopped {who}".rstrip() + ": waiting for them to end"


def _stragglers_were(state) -> str:
    """The run's stragglers, which its alerts no longer show once they are done or caught up
    (the events say when; in a run of hours the event log's first lines are gone)."""
    slow = stragglers_were(state)
    return f" · {slow}" if slow else ""
