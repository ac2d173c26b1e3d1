"""One rank up close: its history against the others, its phases, memory, system and events."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.css.scalar import Scalar
from textual.screen import Screen
from textual.widgets import Static

from pardash.telemetry import state as st
from pardash.telemetry.client import Source
from pardash.telemetry.failures import left_early
from pardash.telemetry.schema import LOADER_PHASE
from pardash.telemetry.summary import straggled_text

from ..alerts import Alert, run_alerts
from ..charts import ChartSeries, chart_series
from ..format import fmt_bytes, fmt_loss, fmt_step_no, fmt_step_time
from ..messages import RunUpdated
from ..model import RowBuilder
from ..rank_facts import group_lrs, logged_facts, memory_facts, phases_of, system_facts, system_staleness
from ..run_clock import run_now, run_origin
from ..widgets.event_log import EventLog
from ..widgets.fact_list import FactList
from ..widgets.fitted_footer import FittedFooter
from ..widgets.history_chart import HistoryChart
from ..widgets.phase_bars import PhaseBars

CHART_REFRESH_S = 0.5
"""Charts redraw at most twice a second (the figures beside them at every update)."""

CHARTS = (
    ("loss", "loss", fmt_loss),
    ("step_s", "step time", fmt_step_time),
    ("self_s", "self time", fmt_step_time),
)
"""(history column, title, axis format) of each chart."""

STATUS_STYLES = {
    st.RUNNING: "$text-success",
    st.FINISHED: "$text-primary",
    st.STRAGGLER: "$text-warning",
    st.STALLED: "$text-warning",
    st.SILENT: "$text-error",
    st.EXITED: "$text-error",
    st.LEFT_EARLY: "$text-error",
    st.STARTING: "$text-muted",
}


Facts = tuple[tuple[str, str, str | tuple[str, ...]], ...]
"""A panel of figures' rows: (label, value, note or its forms)."""


def _cells(runs: list[tuple[str, str]]) -> int:
    return sum(len(text) for text, _style in runs)


class RankDetailScreen(Screen):
    """Loss, step time and self time over the rank's history against the other ranks' median
    and spread; the last step's phases against the others; memory and system figures; the
    rank's events. ``n``/``p`` move to the next or previous rank, escape goes back."""

    DEFAULT_CSS = """
    RankDetailScreen {
        layout: vertical;
    }
    RankDetailScreen #title {
        height: auto;
        padding: 0 1;
        background: $panel;
    }
    RankDetailScreen #body {
        height: 1fr;
    }
    RankDetailScreen #charts {
        width: 1fr;
    }
    RankDetailScreen #figures {
        width: 44%;
        max-width: 56;
        min-width: 34;
    }
    RankDetailScreen .panel {
        border: round $panel-lighten-2;
        border-title-color: $text-accent;
        border-title-style: bold;
        border-subtitle-color: $text-muted;
        background: $surface;
    }
    RankDetailScreen #phases, RankDetailScreen #memory, RankDetailScreen #system, RankDetailScreen #logged {
        height: auto;
    }
    RankDetailScreen #system.-stale {
        border-subtitle-color: $text-warning;
    }
    RankDetailScreen #logged.-empty {
        display: none;
    }
    RankDetailScreen #rank-events {
        height: 8;
    }
    RankDetailScreen.-narrow #figures {
        width: 36;
        min-width: 30;
    }
    RankDetailScreen HistoryChart {
        min-height: 5;
    }
    """

    SHORT_HEIGHT = 34
    """Below this many rows the rank's events keep three lines where the figures leave them
    (an exited rank's reason is among them), the memory panel its totals, the system panel a
    line for the process and one for the GPU, and the phases leave out the whole step (the
    title has its time): at 80x24 the figures' column holds them all (the system panel had two
    of its nine rows, its GPU figures only by scrolling), or nearly: see :meth:`_fit_figures`."""
    NARROW_WIDTH = 100
    EVENTS_ROWS = 8
    """The rank's events' panel, border and all; EVENTS_ROWS_SHORT below SHORT_HEIGHT."""
    EVENTS_ROWS_SHORT = 5
    EVENTS_LEAST = 3
    """What the events give up to the figures goes down to one line, their newest event (the
    title above says the rank's alerts and how it exited)."""
    FACTS_LEAST = 2
    """A panel of figures cut to fit keeps its first and a line that says how many more."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("n", "move(1)", "Next rank"),
        Binding("p", "move(-1)", "Prev rank"),
    ]

    def __init__(
        self,
        rank: int,
        *,
        rows: RowBuilder | None = None,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.rank = rank
        """The rank shown."""
        self._rows = rows if rows is not None else RowBuilder()
        """The ranks as the grid sees them (whom a hang's victims wait for, what a straggler
        costs now), for the title's verdicts to say what the alerts say; handed on by n and p
        (the dashboard's own is left to it: its grid redraws from what changed since its last
        update)."""
        self._chart_version = -1
        self._bands: dict[str, tuple[str, ...]] = {}
        """Each chart's legend, from its last drawing: its forms, longest first (the first that
        fits the chart's footer is said)."""
        self._facts: dict[str, Facts] = {}
        """Each panel of figures' facts, whole (its rows may be fewer: see _fit_figures)."""
        self._fact_rows: dict[str, int | None] = {}
        """The rows each panel of figures may show, from the last fit (None: all it has)."""

    @property
    def source(self) -> Source:
        return self.app.source  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        with Horizontal(id="body"):
            with Vertical(id="charts"):
                for column, title, fmt in CHARTS:
                    chart = HistoryChart(fmt, id=f"chart-{column}", classes="panel")
                    chart.border_title = title
                    yield chart
            with Vertical(id="figures"):
                yield PhaseBars(id="phases", classes="panel")
                yield FactList(id="memory", classes="panel")
                # (the script's own figures before the process's: at 120x36 the last panel
                # had one row, and the script's metrics were the ones cut)
                yield FactList(id="logged", classes="panel")
                yield FactList(id="system", classes="panel")
        yield EventLog(rank=self.rank, id="rank-events", classes="panel")
        yield FittedFooter()

    def on_mount(self) -> None:
        self.query_one("#phases").border_title = "last step"
        self.query_one("#memory").border_title = "memory"
        self.query_one("#system").border_title = "system"
        self.query_one("#logged").border_title = "other metrics"  # (the script's pt.log, and pardash's own: said in each row)
        self.query_one("#rank-events").border_title = f"rank {self.rank} events"
        self.set_interval(CHART_REFRESH_S, self._refresh_charts)
        self.refresh_run()
        self.call_after_refresh(self._refresh_charts, force=True)

    @on(RunUpdated)
    def _run_updated(self, _message: RunUpdated) -> None:
        self.refresh_run()

    def on_screen_resume(self) -> None:
        self.refresh_run()

    def on_resize(self) -> None:
        self.set_class(self.size.height < self.SHORT_HEIGHT, "-short")
        self.set_class(self.size.width < self.NARROW_WIDTH, "-narrow")
        self.refresh_run()  # the title fits its lines to the width; memory its rows to the height
        self.call_after_refresh(self._refresh_charts, force=True)

    @on(HistoryChart.WidthChanged)
    def _chart_resized(self, _message: HistoryChart.WidthChanged) -> None:
        self._refresh_charts(force=True)

    def refresh_run(self) -> None:
        """Redraw the figures (cheap); charts follow at their own rate."""
        if not self.is_mounted:
            return
        state = self.source.state
        r = state.ranks.get(self.rank)
        table = self._rows.update(state)
        origin = run_origin(self.source, table.first_word)
        self.query_one("#title", Static).update(self._title(state, r, self.size.width - 2, origin))  # (its padding)
        short = self.has_class("-short")
        phases = self.query_one(PhaseBars)
        phases.phases = phases_of(state, self.rank)
        phases.whole_step = not short  # (the title says the last step's time)
        if r is not None:
            memory = self.query_one("#memory", FactList)
            self._set_facts(memory, memory_facts(r, compact=short))
            system = self.query_one("#system", FactList)
            self._set_facts(system, system_facts(r, compact=short))
            # A gone rank's figures are its last sample's: said so, and greyed, not shown as now.
            row = self._rows.row(self.rank)
            stale = system_staleness(r, origin, run_now(self.source), row.status if row is not None else None)
            system.set_class(stale is not None, "-stale")
            title, subtitle = stale if stale is not None else ("", "")
            system.border_title = f"system · {title}" if title else "system"
            system.border_subtitle = subtitle
        logged = self.query_one("#logged", FactList)
        self._set_facts(logged, logged_facts(r) if r is not None else ())
        logged.set_class(not logged.facts, "-empty")
        events = self.query_one(EventLog)
        events.origin = origin
        events.sync(state)
        self._subtitle_charts()
        # (after the layout these figures and the title's lines make: what _fit_figures reads)
        self.call_after_refresh(self._fit_figures)

    def _set_facts(self, panel: FactList, facts: Facts) -> None:
        """Show ``facts`` in ``panel``, in the rows _fit_figures left it."""
        self._facts[panel.id or ""] = facts
        rows = self._fact_rows.get(panel.id or "")
        if rows is not None and len(facts) > rows:
            # (said where the rows end: cut, the panel read as all the rank had)
            facts = (*facts[: rows - 1], ("", f"+{len(facts) - rows + 1} more in a taller terminal", ""))
        panel.facts = facts

    def _fit_figures(self) -> None:
        """Fit the figures' column to the rows it has. Its panels follow their content; where
        they need more rows than the charts beside them, the rank's events below give theirs
        (down to EVENTS_LEAST), then the panels of figures from the last up show fewer (down to
        FACTS_LEAST), saying how many more. At 80x24 a rank with DDP's buckets, or with an
        alert in the title, had a system panel of one row and no bottom border, and the
        column's scrollbar drawn outside every panel."""
        if not self.is_mounted:
            return
        figures = self.query_one("#figures")
        events = self.query_one(EventLog)
        if not figures.region.height:  # (not laid out yet: a resize's refresh comes)
            return
        # The body takes the rows the events leave (1fr): between them, what the title and the
        # footer leave, whatever the events' height now.
        space = figures.region.height + events.region.height
        panels = [w for w in figures.children if w.display]
        width = max(1, figures.region.width - 4)  # (within a panel's border and padding)
        # Each panel's rows uncut, border and all (the lines are never wrapped: a list of
        # figures has a line a fact, or its "nothing reported yet").
        needs = [
            max(1, len(self._facts.get(w.id or "", ()))) + 2 if isinstance(w, FactList)
            else w.get_content_height(figures.size, self.size, width) + 2
            for w in panels
        ]  # fmt: skip
        wanted = self.EVENTS_ROWS_SHORT if self.has_class("-short") else self.EVENTS_ROWS
        rows = max(self.EVENTS_LEAST, min(wanted, space - sum(needs)))
        if events.styles.height != Scalar.from_number(rows):
            events.styles.height = rows
        over = sum(needs) - (space - rows)
        for panel, need in reversed(list(zip(panels, needs))):
            if not isinstance(panel, FactList):
                continue
            cut = max(0, min(over, need - 2 - self.FACTS_LEAST))
            over -= cut
            fitted = need - 2 - cut if cut else None
            if self._fact_rows.get(panel.id or "") != fitted:
                self._fact_rows[panel.id or ""] = fitted
                self._set_facts(panel, self._facts.get(panel.id or "", ()))

    @staticmethod
    def _no_series(column: str, r: st.RankState | None) -> str:
        """What a chart with nothing to draw says: a rank that steps without self times (the
        explicit API alone, under plain torchrun) never has them, and "no history yet" said
        they would come."""
        if column == "self_s" and r is not None and r.step is not None and r.step.self_s is None:
            return "not measured without the zero-code hooks (pardash launch)"
        return "no history yet"

    def _refresh_charts(self, force: bool = False) -> None:
        version = self.app.version  # type: ignore[attr-defined]
        if version == self._chart_version and not force:
            return
        self._chart_version = version
        state = self.source.state
        r = state.ranks.get(self.rank)
        for column, title, _fmt in CHARTS:
            chart = self.query_one(f"#chart-{column}", HistoryChart)
            series = chart_series(state, self.rank, column, chart.plot_width)
            if series is None:
                empty = self._no_series(column, r)
                if chart.empty != empty:
                    chart.empty = empty
                    chart.refresh()
            chart.series = series
            heading = self._chart_title(title, series, chart.size.width, r=r)
            if chart.border_title != heading:  # (setting it repaints the panel)
                chart.border_title = heading
            if series is not None:
                total = len(state.ranks) - 1
                n = series.others
                forms = [f"{n} other{'s' if n != 1 else ''}", "the others"]
                if n < total:  # a band over a sample of the ranks (charts.MAX_BAND_RANKS)
                    # (shorter forms where the footer is narrow: cut with "…", "range of 128 of
                    # the 1023 others" read "range of 128…", as if of 128 ranks)
                    forms = [f"the {total} others ({n} sampled)", f"{n} sampled others", "the others"]
                # (a world of one: no others to draw, "range of 0 others" drawn nowhere)
                self._bands[column] = (
                    (*(f" · ▀ rank {self.rank}  ─ median, ░ range of {others}" for others in forms),
                     f" · ▀ rank {self.rank} ─ median ░ others' range")
                    if n else (f" · ▀ rank {self.rank}",)
                )  # fmt: skip
            else:
                self._bands.pop(column, None)
        self._subtitle_charts()

    @staticmethod
    def _chart_title(title: str, series: ChartSeries | None, width: int, *, r: st.RankState | None) -> str:
        """A chart's title, and the steps it covers where the rank's history no longer holds
        its first: a rank keeps its last HISTORY_POINTS points (a point a frame: half a minute
        of a run), and "step 58 … 2000" after a run of 2000 steps read as the whole run."""
        if series is None or r is None or len(r.history) < r.history.capacity:
            return title
        steps = f"steps {fmt_step_no(series.first_step)}-{fmt_step_no(series.last_step)} only"
        kept = r.history.capacity
        longest = max(len(t) for _c, t, _f in CHARTS)  # (the three charts say it alike)
        # (points, not "samples": samples are what a rank trains on, samples/s)
        for note in (f"{steps}: the last {kept} points are kept", f"{steps} (the last {kept} points)", steps):
            if longest + len(f"─  · {note} ─") <= width - 2:  # (within the corners)
                break
        return f"{title} [not bold dim]· {note}[/]"

    def _subtitle_charts(self) -> None:
        """Each chart's 'now': the rank's last step, as the title says it, at the title's pace
        (the chart's newest point is a sample of the steps, drawn twice a second: 'loss 0.6770'
        above 'now 0.8295')."""
        r = self.source.state.ranks.get(self.rank)
        for column, _title, fmt in CHARTS:
            chart = self.query_one(f"#chart-{column}", HistoryChart)
            bands = self._bands.get(column)
            if bands is None:
                chart.border_subtitle = ""
                continue
            value = getattr(r.step, column, None) if r is not None and r.step is not None else None
            bad = r.loss_not_finite if column == "loss" and value is None and r is not None and r.step is not None else None
            room = chart.size.width - 4  # (within the border's corners and the rule's ends)
            said = ""
            for band in bands:
                if bad is not None:  # (its steps carry none: the chart ends where it turned so)
                    said = f"now {bad[0]}{band}"
                else:
                    said = f"now {fmt(value)}{band}" if value is not None else band.removeprefix(" · ")
                if len(said) <= room:
                    break
            if chart.border_subtitle != said:
                chart.border_subtitle = said

    def _alerts(self, state: st.RunState, origin: float) -> list[Alert]:
        """The rank's alerts, as the dashboard's alerts panel says them: the figures of now
        (since when a rank is silent, what a straggler costs the others a step now, whom a
        hang's victim waits for), not its verdicts' first words ("silent for 3 s" for as long
        as it was silent; "the others wait 20 ms" while the alerts said 21, then 18)."""
        table = self._rows
        row = table.row(self.rank)
        if row is None or not row.flagged:
            return []
        # (over every flagged rank, as the panel: a hang's likely cause, the root cause)
        alerts = run_alerts(state, table.flagged, t0=origin, costs=table.straggler_costs(), waits_for=table.waits_for)
        return [a for a in alerts if self.rank in (a.ranks or (a.rank,))]  # (a loss alert of ranks alike: each one's)

    def _title(self, state: st.RunState, r: st.RankState | None, width: int = 200, origin: float = 0.0) -> Content:
        """The title's lines, fitted to ``width`` cells."""
        parts: list[str | tuple[str, str]] = [(f"rank {self.rank}", "bold")]
        if r is None:
            parts.append(("  not seen yet", "$text-muted"))
            return Content.assemble(*parts)
        width = max(20, width)
        row = self._rows.row(self.rank)
        # (as the grid says it: a rank that left the job early read "finished" here, under the
        # alert that named it the root cause)
        status = row.status if row is not None else r.status
        label = status if r.exit_code is None else f"exited with code {r.exit_code}"
        if status == st.LEFT_EARLY:
            at = left_early(state).get(self.rank)
            label = "left the job early" + (f" at step {at}" if at is not None else "") + " (exit code 0)"
        if status == st.STALLED and row is not None and row.waits_for:
            # A hang's victim, drawn waiting (◇) on the grid: whom it waits for, as the grid
            # and the alerts name it, not only that it is stalled.
            label += f", waiting for {row.waits_for}"
        first: list[tuple[str, str]] = [(f"rank {self.rank}", "bold"), (f"  {label}", f"bold {STATUS_STYLES[status]}")]
        h = r.hello
        if h is not None:
            where = [(f"  {h.host or '?'} (node {h.node}, local rank {h.local_rank})", "$text-muted"), (f" · pid {h.pid}", "$text-muted")]
            # The device, shorter as the terminal narrows: its name goes first (the least of
            # what the line says), then its memory, never the kind.
            memory = f"{fmt_bytes(h.device_mem_bytes)} {'RAM' if h.device == 'cpu' else 'memory'}" if h.device_mem_bytes else ""
            forms = [
                " · ".join(filter(None, (f"{h.device} {h.device_name}" if h.device_name else h.device, memory))),
                " · ".join(filter(None, (h.device, memory))),
                h.device,
            ]
            used = _cells(first) + _cells(where)
            device = next((f for f in forms if used + 3 + len(f) <= width), "")
            first += where + ([(f" · {device}", "$text-muted")] if device else [])
        parts = list(first)
        if r.step is not None:
            # Cut from the least telling (epoch, then lr, then the phase now) to fit a line.
            line: list[tuple[str, str]] = [(f"step {r.step.step}", "bold")]
            epoch = (f" · epoch {r.step.epoch}", "")
            bad = r.loss_not_finite
            if bad is not None and r.step.loss is None:
                # Its steps carry no loss while it is not finite: "loss –" read as none reported.
                line += [(" · loss ", ""), (f"{bad[0]} since step {bad[1]}", "bold $text-error"), (f" · last step {fmt_step_time(r.step.step_s)}", "")]
            else:
                line.append((f" · loss {fmt_loss(r.step.loss)} · last step {fmt_step_time(r.step.step_s)}", ""))
            lrs = group_lrs(r)
            if len(lrs) > 3:  # (each one's row is under "other metrics")
                lr = (f" · lr {lrs[0]:.3g} (group 0; groups 1-{len(lrs) - 1} below)", "")
            elif lrs:  # a head at 10x the body's lr: group 0's alone hid it (review 337)
                lr = (f" · lr {', '.join(f'{x:.3g}' for x in lrs)} (groups 0-{len(lrs) - 1})", "")
            else:
                lr = (f" · lr {r.step.lr:.3g}", "") if r.step.lr is not None else None
        elif r.step_before is not None:  # torchrun restarted it: its new process has not stepped
            line = [(f"step {r.step_before}", "bold"), (" · its previous process's last; none since its restart", "$text-muted")]
            epoch = lr = None
        else:
            line, epoch, lr = [], None, None
        now = None
        if r.heartbeat is not None and r.heartbeat.phase and r.status not in (st.EXITED, st.FINISHED):
            # (the zero-code hooks' "loader": its DataLoader; "data" where the DataLoader is timed:
            # its own code between steps, as a stall there is said: analysis.stall_phase)
            phase = r.heartbeat.phase
            if phase == LOADER_PHASE:
                where = "in its DataLoader"
            elif phase == "data" and r.step is not None and r.step.loader_s is not None:
                where = "between steps, in its own code"
            else:
                where = f"in {phase}"
            now = (f" · now {where}", "$text-muted")
        for dropped in range(4):
            got = line[:1] + ([epoch] if epoch and dropped < 1 else []) + line[1:]
            got += ([lr] if lr and dropped < 2 else []) + ([now] if now and dropped < 3 else [])
            if _cells(got) <= width:
                break
        if got:
            parts.append(("\n" + got[0][0], got[0][1]))
            parts.extend(got[1:])
        done = r.status in (st.EXITED, st.FINISHED)
        hung = r.stalled is not None or r.silent is not None
        if done and r.straggled is not None and not hung:  # not "is a straggler" once it is done
            parts.append((f"\n⚠ {straggled_text(r)}", "$text-warning"))
        for alert in self._alerts(state, origin):
            # An exit is the first line's ("exited with code 1"); one that ended a hang says
            # how it hung ("went silent (no heartbeat); then exited with code -9").
            if alert.kind not in ("exited", "stopped") or hung:
                parts.append((f"\n⚠ {alert.text}", "$text-warning"))
        if r.restarts:
            parts.append((f"\nrestarted {r.restarts} time{'s' if r.restarts != 1 else ''}", "$text-warning"))
        return Content.assemble(*parts)

    def action_back(self) -> None:
        self.app.pop_screen()
        # Back on the grid, its cursor is on the rank last looked at (n and p move it here).
        grid = getattr(self.app.screen, "grid", None)
        if grid is not None:
            grid.select(self.rank)

    def action_move(self, delta: int) -> None:
        # In the grid's order, as it is sorted and filtered (n from a flagged rank, the grid
        # showing flagged ranks only, went to an unflagged one, which Escape then could not
        # put the cursor on); by rank where the grid does not show this one.
        below = self.app.screen_stack[-2] if len(self.app.screen_stack) > 1 else None
        grid = getattr(below, "grid", None)
        shown = grid.shown_ranks if grid is not None else []
        ranks = shown if self.rank in shown else sorted(self.source.state.ranks)
        if not ranks:
            return
        i = ranks.index(self.rank) if self.rank in ranks else 0
        self.app.switch_screen(RankDetailScreen(ranks[(i + delta) % len(ranks)], rows=self._rows))
