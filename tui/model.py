"""What the rank grid shows, derived from a :class:`RunState` (no Textual here).

A :class:`RankRow` holds one rank's figures as the grid draws them. Self times are compared with
the median of the *other* ranks (leave-one-out, as the hub's straggler detector does), each
rank's figure being the median of its last five steps so one slow step does not flash a cell.
The hub works those medians out from every step it took and sends them with its frames
(``RankState.smooth``), so a live viewer, a late one and a replay of the log show the same
figures however their frames were cut. Keeping the rows costs one pass over the ranks a frame,
whatever the message rate. That pass works out only what every rank shows in a heat map
(status, self-time deviation) and the run's totals; a rank's full row is made when something
draws it.
"""

from __future__ import annotations

import heapq
import math
import weakref
from array import array
from collections import deque
from dataclasses import dataclass

from pardash.telemetry import schema
from pardash.telemetry import state as st
from pardash.telemetry.causes import cause_of, cause_ranks
from pardash.telemetry.failures import failure_summary, left_early
from pardash.telemetry.ring import HISTORY_COLUMNS
from pardash.telemetry.state import median_small
from pardash.telemetry.stragglers import StragglerConfig, absolute_bar_s, wall_step_s
from pardash.telemetry.summary import PAUSE_SLACK_S, RATE_POINTS, _samples_done

from .alerts import waited_for_text
from .run_clock import ranks_first_word


SMOOTH_POINTS = 5
"""History points over which a rank's step, self, data and comm time are smoothed (median)
where its hub sent no medians of its steps (``RankState.smooth``: a hub before them). A point
is a step a frame brought (each rank's newest every 100 ms): at more than 10 steps a second
they are some of the steps, which ones depending on where frames fell, not the last five."""
DEVIATION_WARN = 0.10
"""Self time this far above the others' median is shown in the warning colour."""
DEVIATION_BAD = 0.25
"""...and this far above in the alarm colour (the straggler detector's relative bar)."""
DEVIATION_ABS_S = 0.005
"""...and never for less than this many seconds above it, where the step's time is not known:
else the straggler detector's absolute bar for it (``stragglers.absolute_bar_s``: 5 ms, or a
fifth of the step where less, never under 1 ms; timer and scheduler noise sit below it, and a
small model's 1 ms self time flashed +25% from frame to frame on a healthy run)."""
_DETECTOR = StragglerConfig()

WAITING = "waiting"
"""What the grid calls a stalled rank waiting for a hang's likely cause (drawn ◇), and the run's
totals count apart from the stalled ones."""

SAVING = "saving"
"""What the grid calls a running rank saving a checkpoint (see :func:`is_saving`), and the run's
totals count apart from the running ones (the header read "● 2 running" over a grid with one
of them "saving")."""


STOPPING = "stopping"
"""What the grid calls a working rank the launcher began stopping (see :func:`is_stopping`),
and the run's totals count apart from the running ones: a stop whose ranks take seconds to end
(a SIGTERM handler's save) read "● 2 running" under the events' "ranks 0-1 being stopped by
you", as the headless progress line no longer did ("2 stopping")."""


LOSS_BAD = "loss-bad"
"""What the heat map and the cells draw (⊘) for a running or finished rank whose loss is not
finite (``RankRow.loss_not_finite``): past a few ranks, where cells have no loss column, one rank
gone NaN among 40 looked as the others (review 306). Its status stays its own (the header counts
it running)."""
LOSS_BAD_STATUSES = frozenset((st.RUNNING, st.FINISHED))
"""The statuses :data:`LOSS_BAD` stands in for (a straggler, a stall or an exit says more)."""


STOPPED = "stopped"
"""What the grid and the header call a rank that exited by a stop, not failing: its exit code
one of failures.STOPPED_CODES (Ctrl-C, a viewer's Stop, SIGTERM from a scheduler, or from
torchrun after another rank failed), as the report, Prometheus and the headless progress say
it (a Ctrl-C's end read "× 2 exited" and "exit -15", a failure's words and colour). Its status
stays ``exited`` (``RankRow.stopped`` says it). The rank a failure or hang started from, stopped
as it hung, is stopped too, as the report's rank table and Prometheus count it; its alert says
the hang first and names it the likely cause ("rank 1 stalled in data after step 20, likely the
cause: ...; then stopped by SIGTERM at step 20"), and it stays ``RankRow.cause`` (a sort by
status puts it first; the line under the grid names it)."""


def is_saving(r: st.RankState, step: schema.Step | None) -> bool:
    """Whether a running rank is saving a checkpoint now: its heartbeat's phase, since its last
    step (a heartbeat from before that is no word of now: the save is over). Its step stands
    still for the save's length, which read as a plain running rank gone quiet."""
    beat = r.heartbeat
    return beat is not None and beat.phase == "checkpoint" and (step is None or beat.step >= step.step)


def is_stopping(r: st.RankState, status: str) -> bool:
    """Whether a rank of ``status`` (its ``RankState.status``) is being stopped now: the
    launcher said it began stopping it (``RankState.stopping``) and it has not ended. A running
    or starting rank only, as the headless progress line says it: a straggler or a stalled rank
    keeps its verdict, and one saving says so (:func:`is_saving`: what the stop waits for)."""
    return r.stopping is not None and (status == st.RUNNING or status == st.STARTING)


FLAGGED_STATUSES = frozenset({st.STRAGGLER, st.STALLED, st.SILENT, st.EXITED, st.LEFT_EARLY})
"""Statuses that count as flagged (the filter keeps them)."""

SORT_KEYS = ("rank", "step_time", "self_time", "memory", "loss", "status")
"""Orders of the grid, in the order the sort key cycles through them."""
SORT_LABELS = {
    "rank": "rank",
    "step_time": "step time ↓",
    "self_time": "self time ↓",
    "memory": "memory ↓",
    "loss": "loss ↓",
    "status": "status",
}

_STATUS_ORDER = {
    st.LEFT_EARLY: -1,  # (the root cause of its peers' failure: before them)
    st.EXITED: 0,
    st.SILENT: 1,
    st.STALLED: 2,
    st.STRAGGLER: 3,
    STOPPED: 4,
    STOPPING: 5,
    st.STARTING: 6,
    st.RUNNING: 7,
    st.FINISHED: 8,
}
"""Most urgent first when sorting by status."""


@dataclass(slots=True, eq=True)
class RankRow:
    """One rank as the grid draws it."""

    rank: int
    node: int
    host: str
    status: str
    step: int | None
    loss: float | None
    step_s: float | None
    """Smoothed wall step time."""
    self_s: float | None
    """Smoothed self time (work before the first collective)."""
    self_dev: float | None
    """(self_s - others' median) / others' median; None when unknown."""
    held_bytes: int | None
    """Parameters + gradients + optimizer state + buckets held."""
    not_sharding: bool
    exit_code: int | None
    data_s: float | None = None
    """Smoothed data-loading time (as ``step_s``)."""
    comm_s: float | None = None
    """Smoothed communication wait (victims of a straggler wait longest), as ``step_s``."""
    gpu_util_pct: float | None = None
    gpu_mem_bytes: int | None = None
    """Device memory in use (NVML), else CUDA allocated."""
    exit_first: bool | None = None
    """When several ranks exited: True for the root cause (see ``causes.cause_rank``), False
    for the others (failed or stopped because of it); None otherwise."""
    cause: bool = False
    """The rank a failure or a hang most likely started from (``causes.cause_ranks``: the
    alerts' "the root cause" or "likely the cause"), whatever its status: a rank stalled in its
    data loader that the others wait for, or that the rank whose timeout ended the job waited
    for. A sort by status puts it first."""
    stalled_in: str | None = None
    """The phase a stalled rank is stuck in, as its verdict says (data, backward, ...)."""
    waiting: bool = False
    """Stalled in a hang whose likely cause is another rank (one marked ``cause``): it waits for
    that one, a victim, not a second fault."""
    waits_for: str = ""
    """Who it waits for when ``waiting`` ("rank 3", ``alerts.waited_for_text``), else empty."""
    dev_floor_s: float = 0.005
    """The excess in seconds under which no deviation is coloured (``RowBuilder.dev_floor_s``)."""
    loss_not_finite: tuple[str, int] | None = None
    """("nan", 100): its loss is not finite ("nan", "inf" or "-inf") since that step
    (``RankState.loss_not_finite``; ``loss`` is None then, its steps carrying none)."""
    saving: bool = False
    """Running and saving a checkpoint now (its heartbeat's phase, since its last step): its step
    stands still for the save's length, which read as a plain running rank gone quiet."""
    joined: bool = False
    """Running, out of inputs under DDP's Join (``RankState.joined``): it shadows the others'
    collectives, taking no step, by design; the grid says "joined", not "running"."""
    stopped: bool = False
    """Exited by a stop, not failing (see :data:`STOPPED`): the grid says "stopped", not
    "exit -15"."""
    stopping: bool = False
    """Being stopped: a stop began and the rank has not ended yet (see :data:`STOPPING`)."""
    memory_growing: bool = False
    """Said growing in memory step after step (``RunState.memory_growing``: a leak): flagged."""

    @property
    def flagged(self) -> bool:
        """A verdict or a condition a person should look at."""
        return self.status in FLAGGED_STATUSES or self.not_sharding or self.loss_not_finite is not None or self.memory_growing

    @property
    def filtered_in(self) -> bool:
        """Kept by the grid's "flagged only" (f): flagged, and a finding of its own. Not a rank
        the launcher or torchrun stopped (after one rank of 4096 failed, it listed the 4,095
        stopped beside it; the cause of a hang, stopped as it hung, stays), nor one waiting in a
        hang for the rank that causes it (1,016 waiting hid the 8 stalled ranks of a node hung
        among them)."""
        if self.not_sharding or self.loss_not_finite is not None:
            return True
        return self.status in FLAGGED_STATUSES and (not self.stopped or self.cause) and not self.waiting

    @property
    def deviation_level(self) -> int:
        """0 calm, 1 warning, 2 alarm, from the self-time deviation."""
        d = self.self_dev
        if d is None or d <= -1 or (self.self_s or 0.0) * d / (1 + d) < self.dev_floor_s:  # excess in seconds
            return 0
        if d >= DEVIATION_BAD:
            return 2
        if d >= DEVIATION_WARN:
            return 1
        return 0


def leave_one_out_medians(values: list[float]) -> list[float | None]:
    """For each value, the median of all the *others* (None when there are none).

    One sort, then a comparison or two per value: removing a value at or below the middle of
    the sorted list shifts the middle up by one, removing one above it leaves it in place, so
    the others' median is one of three numbers worked out once.
    """
    n = len(values)
    if n < 2:
        return [None] * n
    s = sorted(values)
    m = n - 1
    if m % 2:
        k = m // 2
        lo, hi = s[k], s[k + 1]
        return [hi if v <= lo else lo for v in values]
    k1, k2 = m // 2 - 1, m // 2
    a_lo, a_hi, b_lo, b_hi = s[k1], s[k1 + 1], s[k2], s[k2 + 1]
    # v <= s[k1]: both middles move up; s[k1] < v <= s[k2]: only the upper one; above: neither.
    both_up, upper_up, neither = (a_hi + b_hi) / 2, (a_lo + b_hi) / 2, (a_lo + b_lo) / 2
    return [both_up if v <= a_lo else upper_up if v <= b_lo else neither for v in values]


def _known(values: list[float]) -> list[float]:
    """The last SMOOTH_POINTS values that are not NaN (a step without the figure)."""
    return [v for v in values if v == v][-SMOOTH_POINTS:]


_LIVE = (st.RUNNING, st.STRAGGLER)
"""Statuses whose self time sets the pace (gone ranks are left out of the others' median, and
stalled ones: their figure is from before the stall, and pointed at a victim)."""
_GONE = (st.EXITED, st.FINISHED, st.LEFT_EARLY, st.SILENT)
_NO_RATE = (*_GONE, st.STALLED)
"""Statuses whose last step is no rate of the run's (a stalled rank's moves nothing)."""


_STEP, _T, _STEP_S, _SAMPLES = (HISTORY_COLUMNS.index(c) for c in ("step", "t", "step_s", "samples"))
"""Where each column rank_rate reads lies in a history row."""


def rank_rate(r: st.RankState, rows: list[list[float]] | None = None) -> float | None:
    """A working rank's samples a second, as the headless lines and /metrics take each rank's
    (``summary.samples_per_s``): over its last RATE_POINTS history points (those it has, while
    it has fewer), else its latest step's; None when neither is known. Of its history only: a
    replay opened at its end (``--start end``) and one played there, a late viewer and one there
    from the start, say the same. (The header's was the median of the viewer's last 9 updates,
    one a redraw: a replay opened at its end had made one, its last frame's, and said 2,103
    samples/s where played there at 4x it said 1,415, at 8x 1,543.) ``rows``: the rank's last
    history rows, as :func:`rate_rows` gives them, when at hand."""
    s = r.step
    if s is None or s.step_s <= 0:
        return None
    if rows is None:
        rows = rate_rows(r)
    k = len(rows) - 1
    if k >= 1:
        first, last = rows[0], rows[-1]
        now, then = last[_STEP], first[_STEP]
        t1, t0 = last[_T], first[_T]
        # (not across a restart, nor behind the latest step, nor across a pause between steps:
        # the steps' own times tell how long they took)
        took = (now - then) * sum(row[_STEP_S] for row in rows[1:] if row[_STEP_S] == row[_STEP_S]) / k
        if now == s.step and now > then and 0 < t1 - t0 <= 1.5 * took + PAUSE_SLACK_S:
            done = _samples_done([row[_SAMPLES] for row in rows[1:]])
            return (s.samples * (now - then) if done is None else done) / (t1 - t0)
    return s.samples / s.step_s


RATE_SPREAD_FROM = 256
"""Above this many ranks, each rank's rate (:func:`rank_rate`) is worked out every
RATE_SPREAD updates, a share of the ranks at each, the others' as last worked out: at 1024
ranks, every rank's at every frame took the update from 0.6 ms to 4.5 ms, past the dashboard's
15 ms a frame. The header's rate is then up to RATE_SPREAD frames behind (0.8 s at ten a
second; the header takes its figures four times a second); under it, every update's is exact."""
RATE_SPREAD = 8


def rate_rows(r: st.RankState) -> list[list[float]]:
    """The rank's last RATE_POINTS + 1 history rows, oldest first (all it has while it has
    fewer: its latest step's own samples over its time read a fraction of its rate where a
    reporter's bursts made each frame's last step an epoch's short one)."""
    return r.history.tail(RATE_POINTS + 1)


class _Rank:
    """What the builder keeps of one rank between updates.

    Its figures are the hub's medians of its last steps where the hub sends them
    (``RankState.smooth``); its windows serve a hub that does not. The self-time window is fed
    at every update (every rank's deviation depends on it); the step-time window only when the
    rank's full row is asked for (a cell on screen, the selected rank, a sort by step time),
    catching up from the rank's history then. Either way a window
    holds the last SMOOTH_POINTS known history points, so it is the same whether it was seeded
    from a snapshot or fed frame by frame, and whether or not every frame was drawn: a late
    viewer shows what an early one shows.
    """

    __slots__ = (
        "rank",
        "r",
        "seen",
        "self_win",
        "self_med",
        "step_seen",
        "step_win",
        "step_med",
        "hello",
        "node",
        "host",
        "status",
        "self_s",
        "self_dev",
        "level",
        "flagged",
        "loss_bad",
        "exit_first",
        "cause",
        "stopped",
        "stopping",
        "row",
        "row_gen",
        "smooth",
        "rate_step",
        "rate_t",
        "rate_val",
        "rate_rows",
        "rate_seen",
    )

    def __init__(self, r: st.RankState) -> None:
        self.rank = r.rank
        self.r = r
        self.self_win = deque(_known(r.history["self_s"].values()), SMOOTH_POINTS)
        self.self_med = median_small(self.self_win)
        self.seen = r.steps_seen
        self.step_seen = -1
        """steps_seen the step-time window was fed up to (-1: not seeded yet)."""
        self.step_win: deque[float] = deque((), SMOOTH_POINTS)
        self.step_med: float | None = None
        self.hello: object = None
        self.node = 0
        self.host = ""
        self.status = ""
        self.self_s: float | None = None
        self.self_dev: float | None = None
        self.level = 0
        self.flagged = False
        self.loss_bad = False
        """Its loss not finite (its heat-map glyph ⊘, see heat_key), as of the last update."""
        self.exit_first: bool | None = None
        self.cause = False
        self.stopped = False
        """Exited with a code of a stop (:func:`is_stop`), cause or not."""
        self.stopping = False
        """Being stopped (:func:`is_stopping`, not saving)."""
        self.row: RankRow | None = None
        self.row_gen = -1
        self.smooth: dict[str, list] = {}
        """History column -> [steps_seen fed up to, its last known values, their median]."""
        self.rate_step: object = None
        self.rate_t: float | None = None
        self.rate_val: float | None = None
        """:func:`rank_rate` as of the step and the history point in ``rate_step`` and
        ``rate_t`` (worked out again only when a new point comes)."""
        self.rate_seen = 0
        """The rank's ``steps_seen`` (history points) when ``rate_rows`` were taken."""
        self.rate_rows: list[list[float]] = []
        """:func:`rate_rows` as of then, moved on by the one new point a frame brings (read
        afresh, they cost the update 8x its time at 1024 ranks)."""

    def rate(self) -> float | None:
        """:func:`rank_rate` of the rank, now."""
        r = self.r
        step, t = r.step, r.t_mark
        if step is not self.rate_step or t != self.rate_t:
            self.rate_step, self.rate_t = step, t
            rows, h = self.rate_rows, r.history
            new = r.steps_seen - self.rate_seen
            self.rate_seen = r.steps_seen
            if rows and 0 < new <= RATE_POINTS and len(h) >= len(rows) + new and h.ago("t", new) == rows[-1][_T] and h.ago("step", new) == rows[-1][_STEP]:
                # (the points since, a frame's one or those of the updates that left it out,
                # after the ones kept)
                rows = (rows + h.tail(new))[-(RATE_POINTS + 1) :]
            else:
                rows = rate_rows(r)
            self.rate_rows = rows
            self.rate_val = rank_rate(r, rows)
        return self.rate_val

    def feed_self(self) -> None:
        """Take the self times of the history points added since the last call."""
        r = self.r
        new = r.steps_seen - self.seen
        self.seen = r.steps_seen
        if new <= 0:
            return
        if new == 1:
            last = r.history.last("self_s")
            if last is not None and last == last:
                self.self_win.append(last)
        else:
            self.self_win.extend(_known(r.history["self_s"].values()[-min(new, SMOOTH_POINTS) :]))
        self.self_med = median_small(self.self_win)

    def smoothed(self, column: str, last: float | None) -> float | None:
        """The median of the last SMOOTH_POINTS known values of history ``column`` (fed from
        the points added since the last call, as :meth:`smoothed_step_s`), else ``last``; None
        when ``last`` is (the step has no such figure). Re-reading the history each frame took
        a row's making at 1024 ranks from 1.5 to 4.2 ms."""
        if last is None:
            return None
        r = self.r
        seen = r.steps_seen
        kept = self.smooth.get(column)
        if kept is None:
            win: deque[float] = deque(_known(r.history[column].values()), SMOOTH_POINTS)
            kept = self.smooth[column] = [seen, win, median_small(win) if win else None]
        elif kept[0] != seen:
            new = seen - kept[0]
            win = kept[1]
            if new == 1:
                v = r.history.last(column)
                if v is not None and v == v:
                    win.append(v)
            elif new > 1:
                win.extend(_known(r.history[column].values()[-min(new, SMOOTH_POINTS) :]))
            kept[0], kept[2] = seen, median_small(win) if win else None
        return kept[2] if kept[2] is not None else last

    def smoothed_step_s(self) -> float | None:
        """The median of the last few known step times, fed up to the latest history point."""
        r = self.r
        seen = r.steps_seen
        if self.step_seen < 0:
            self.step_win.extend(_known(r.history["step_s"].values()))
            self.step_med = median_small(self.step_win)
        elif seen != self.step_seen:
            new = seen - self.step_seen
            if new == 1:
                last = r.history.last("step_s")
                if last is not None and last == last:
                    self.step_win.append(last)
                    self.step_med = median_small(self.step_win)
            elif new > 1:
                self.step_win.extend(_known(r.history["step_s"].values()[-min(new, SMOOTH_POINTS) :]))
                self.step_med = median_small(self.step_win)
        self.step_seen = seen
        return self.step_med


class RowBuilder:
    """Every rank as the grid draws it, kept up to date from a run state.

    :meth:`update` makes one pass over the ranks, feeding each rank's self-time window and
    working out what every rank shows in a heat map (status, self-time deviation), the run's
    totals for the header, and which ranks changed since the previous update. A rank's full
    :class:`RankRow` (loss, step time, memory, ...) is made only when asked for, by
    :meth:`row` or :meth:`rows`, and kept until the next update: a heat map of 1024 ranks needs
    one (the selected rank), a screen of cells a few hundred.
    """

    def __init__(self) -> None:
        self._state: st.RunState | None = None
        self._state_id = 0
        self._ranks: list[_Rank] = []
        """By rank."""
        self._by_rank: dict[int, _Rank] = {}
        self._rows: list[RankRow] | None = None
        self._growing: dict | None = None
        """The state's ranks said growing in memory, as of the last update (RunState.memory_growing)."""
        self.gen = 0
        """Counts updates (rows made for one update are kept until the next)."""
        self.changed: set[int] | None = None
        """Ranks whose status, deviation level or exit order changed in the last update
        (what a heat map draws); None when every rank may have (a new state, new ranks)."""
        self.layout_gen = 0
        """Changes when the set of ranks or a rank's node does (the grid lays out again)."""
        self.flagged_gen = 0
        """Changes when any rank becomes flagged or stops being flagged."""
        self.gpu = False
        """Whether any rank said it runs on a GPU (the grid's GPU columns are shown then)."""
        self.totals = RunTotals({}, 0, 0, None, [])
        self.dev_floor_s = DEVIATION_ABS_S
        """Deviations of less excess than this are not coloured (set at each update)."""
        """Run-wide figures of the last update (see :func:`run_totals`)."""
        self._turn = 0
        """Updates made (which ranks' rates an update works out, see RATE_SPREAD)."""
        self.flagged: list[st.RankState] = []
        """The ranks with a verdict, an exit, a memory flag or a loss not finite (the ones
        alerts are about), by rank, as of the last update."""
        self._notes: list[str] = []
        self._nodes = 0
        self._exit_marked = False
        self._causes: frozenset[int] = frozenset()
        """The ranks marked as a failure's or a hang's cause (see RankRow.cause)."""
        self._waiting = False
        """Whether the stalled ranks other than a cause wait for it (see RankRow.waiting): a
        cause is named and no rank alive makes progress."""
        self._waits_for_text = ""
        self._costs_gen = -1
        self._costs: dict[int, float] = {}
        self._cost_sums: dict[int, tuple[float, float]] = {}
        """Rank -> each straggler's two measures of its cost summed since it was named (see
        straggler_costs)."""
        """Who they wait for, said once for every row (see RankRow.waits_for)."""
        self.first_word: float | None = None
        """When the ranks first said anything, as of the last update (see
        :func:`~.run_clock.ranks_first_word`; worked out again only when a hello changes)."""

    # -- updating -----------------------------------------------------------------------------

    def update(self, state: st.RunState) -> RowBuilder:
        """Bring every rank up to date with ``state``: one pass over the ranks."""
        self.gen += 1
        self._rows = None
        changed: set[int] | None = set()
        if id(state) != self._state_id or self._state is not state:
            # A new snapshot or a replay seek replaced the state: start the windows again.
            self._state, self._state_id = state, id(state)
            self._ranks, self._by_rank = [], {}
            self._notes, self._nodes, self._exit_marked = [], 0, False
            self._causes = frozenset()
            self._waiting = False
            self._waits_for_text = ""
            self._cost_sums = {}
            self.layout_gen += 1  # the places go too (a seek to before any rank leaves none)
            changed = None
        if len(self._ranks) != len(state.ranks):
            by_rank = self._by_rank
            for rank, r in state.ranks.items():
                if rank not in by_rank:
                    by_rank[rank] = _Rank(r)
            self._ranks = sorted(by_rank.values(), key=_rank_of)
            self.layout_gen += 1
            changed = None
        self.changed = changed
        self._update(state)
        return self

    def _update(self, state: st.RunState) -> None:
        # The hot loop of a frame at 1024 ranks: plain attribute reads, no calls per rank
        # beyond the status and the window's sort.
        growing = self._growing = state.memory_growing  # (the ranks said leaking: flagged; nearly always none)
        full = SMOOTH_POINTS
        mid = SMOOTH_POINTS // 2 if SMOOTH_POINTS % 2 else -1
        changed = self.changed
        counts: dict[str, int] = {}
        nodes_moved = hellos_moved = flags_moved = False
        none = 1 << 62
        slowest = none
        total = 0.0
        seen_rate = False
        spread = len(self._ranks) > RATE_SPREAD_FROM
        turn = self._turn = self._turn + 1
        fresh: list[_Rank] = []
        fresh_self: list[float] = []
        live: list[_Rank] = []
        self.flagged = flagged_ranks = []
        exited = running = saving = 0
        RUNNING = st.RUNNING
        left: dict[int, int | None] | None = None
        for e in self._ranks:
            r = e.r
            status = r.status
            if status == st.FINISHED:
                # A rank that left the job early (exit 0 as its peers trained on) reads so, as
                # the alerts and the failure line name it: it read "finished" (□) beside them.
                # (Asked once an update, at the first finished rank: never on a running run.)
                if left is None:
                    left = frame_failure(state)[1]
                if e.rank in left:
                    status = st.LEFT_EARLY
            hello = r.hello
            if hello is not e.hello:
                e.hello = hello
                node, host = (hello.node, hello.host) if hello is not None else (0, "")
                if node != e.node or host != e.host:
                    e.node, e.host = node, host
                    nodes_moved = True  # the grid's groups and their labels
                hellos_moved = True
            step = r.step
            seen = r.steps_seen
            sm = r.smooth
            if sm is not None:  # the hub's medians of the rank's last steps
                e.seen = seen
                e.self_med = sm[1]
            elif seen != e.seen:
                if seen == e.seen + 1 and step is not None and mid >= 0:
                    # The common case: one new history point, the step just applied; its
                    # self time goes through float32 below, as the history holds it.
                    e.seen = seen
                    if step.self_s is not None:
                        fresh.append(e)
                        fresh_self.append(step.self_s)
                else:
                    e.feed_self()
            self_s = e.self_med
            if (
                status is RUNNING
                and e.status is RUNNING
                and not e.flagged
                and r.not_sharding is None
                and (not growing or e.rank not in growing)
                and r.loss_bad is None
                and r.stopping is None
                and not e.stopping
            ):
                # Nearly every rank of a healthy run, every frame: running (so it has a step)
                # and was running, nothing flagged; the general case below, cut short.
                if r.heartbeat is not None and r.heartbeat.phase == "checkpoint" and is_saving(r, step):
                    saving += 1
                else:
                    running += 1
                if self_s is None:
                    self_s = step.self_s  # a snapshot may carry a step that never reached the history
                n = step.step  # type: ignore[union-attr]
                if n < slowest:
                    slowest = n
                rate = e.rate_val if spread and (e.rank + turn) % RATE_SPREAD and e.rate_val is not None else e.rate()
                if rate is not None:
                    total += rate
                    seen_rate = True
                e.self_s = self_s
                e.self_dev = None
                if self_s is not None:
                    live.append(e)
                elif e.level:
                    e.level = 0
                    if changed is not None:
                        changed.add(e.rank)
                continue
            stopped = status == st.EXITED and r.ended_in_stop
            saving_now = status == RUNNING and is_saving(r, step)
            stopping = not saving_now and is_stopping(r, status)
            if stopped != e.stopped or stopping != e.stopping:
                e.stopped, e.stopping = stopped, stopping
                if changed is not None:
                    changed.add(e.rank)
            counted = SAVING if saving_now else STOPPING if stopping else STOPPED if stopped else status
            counts[counted] = counts.get(counted, 0) + 1
            if step is not None:
                if self_s is None:
                    self_s = step.self_s
                n = step.step
                if n < slowest:
                    slowest = n
                if status not in _NO_RATE:
                    rate = e.rate_val if spread and (e.rank + turn) % RATE_SPREAD and e.rate_val is not None else e.rate()
                    if rate is not None:
                        total += rate
                        seen_rate = True
            else:
                # No step of its own yet: starting, or restarted by torchrun (the figures of its
                # previous process are not the new one's; the run's progress is where it left off).
                self_s = None
                n = r.step_before
                if n is not None and n < slowest:
                    slowest = n
            e.self_s = self_s
            e.self_dev = None
            if status != e.status:
                e.status = status
                if changed is not None:
                    changed.add(e.rank)
            flagged = status in FLAGGED_STATUSES or r.not_sharding is not None or r.loss_bad is not None or e.rank in growing
            if (r.loss_bad is not None) != e.loss_bad:
                # (its glyph turns ⊘ or back: the heat map's legend counts the ranks that draw it
                # from the ranks changed, and listed no ⊘ while every rank drew it, review 312)
                e.loss_bad = not e.loss_bad
                if changed is not None:
                    changed.add(e.rank)
            if flagged:
                flagged_ranks.append(r)  # (the alerts': the stopped ranks too; the grid's filter leaves them out, RankRow.flagged)
            if flagged != e.flagged:
                e.flagged = flagged
                flags_moved = True
            if status == st.EXITED:
                exited += 1
            if self_s is not None and status in _LIVE:
                live.append(e)
            elif e.level:
                e.level = 0
                if changed is not None:
                    changed.add(e.rank)
        if running:
            counts[RUNNING] = counts.get(RUNNING, 0) + running
        if saving:
            counts[SAVING] = counts.get(SAVING, 0) + saving
        if fresh:
            try:
                values = array("f", fresh_self).tolist()
            except (OverflowError, TypeError):
                values = [e.r.history.last("self_s") for e in fresh]
            for e, last in zip(fresh, values, strict=True):
                if last is not None and last == last:
                    window = e.self_win
                    window.append(last)
                    v = sorted(window)
                    e.self_med = e.self_s = v[mid] if len(v) == full else median_small(v)
        # The straggler detector's absolute bar for this run's step (a colour for an excess no
        # verdict would ever name, or none for one it names, read as a contradiction).
        self.dev_floor_s = absolute_bar_s(_DETECTOR, wall_step_s(state, [e.rank for e in live])) if live else DEVIATION_ABS_S
        self._fill_deviation(live)
        stuck = counts.get(st.STALLED, 0) + counts.get(st.SILENT, 0)
        first = cause_of(frame_failure(state)[0]) if exited else None
        if exited >= 2 or self._exit_marked or (exited and left):
            self._mark_first_exit(first if exited >= 2 else None, after=bool(exited and left))
        if exited or stuck or self._causes:
            # Hung: every rank alive stalled or silent (a rank stalled in its data loader while
            # the others run waits for nobody, whoever failed elsewhere).
            hung = stuck > 0 and not (
                counts.get(RUNNING) or counts.get(SAVING) or counts.get(STOPPING) or counts.get(st.STRAGGLER) or counts.get(st.STARTING)
            )
            if self._mark_causes(cause_ranks(state, first) if exited or stuck else frozenset(), hung):
                flags_moved = True  # (the grid's flagged ranks: not those waiting for a cause, RankRow.flagged)
            if self._waiting and counts.get(st.STALLED):
                # Counted as the grid draws them: the stalled ranks waiting for a hang's cause
                # are "waiting" (◇), not stalled (the header read "◆ 1024 stalled" over a grid
                # of 1023 ◇ and the one ◆ they wait for).
                by_rank = self._by_rank
                stalled = sum(1 for rank in self._causes if (c := by_rank.get(rank)) is not None and c.status == st.STALLED)
                counts[WAITING] = counts[st.STALLED] - stalled
                if stalled:
                    counts[st.STALLED] = stalled
                else:
                    del counts[st.STALLED]
        if nodes_moved:
            self.layout_gen += 1
        if flags_moved:
            self.flagged_gen += 1
        if hellos_moved or changed is None:
            notes: list[str] = []
            for r in state.ranks.values():
                note = r.hello.note if r.hello is not None else ""
                if note and note not in notes:
                    notes.append(note)
            self._notes = notes
            self._nodes = len({e.node for e in self._ranks})
            self.first_word = ranks_first_word(state)
            gpu = any(r.hello is not None and r.hello.device.startswith("cuda") for r in state.ranks.values())
            if gpu != self.gpu:
                self.gpu = gpu
                self.layout_gen += 1
        self.totals = RunTotals(
            counts, self._nodes, slowest if slowest != none else 0, total if seen_rate else None, list(self._notes)
        )

    def straggler_costs(self) -> dict[int, float]:
        """Rank -> what each straggler costs the others a step as of the last update: its self
        time less the slowest other working rank's, or the others' comm wait beyond its own
        (the hub's measures when it found it, on the grid's smoothed figures): of the two, the
        one larger over all the updates since it was named a straggler. (The larger of the two
        at each update pushed their noise upward: 36-42 ms live for a rank 31-33 ms slow,
        review 292.)"""
        if self._costs_gen != self.gen:
            self._costs_gen = self.gen
            self._costs = self._pick_costs(self._cost_measures())
        return dict(self._costs)

    def _pick_costs(self, measures: dict[int, tuple[float, float | None]]) -> dict[int, float]:
        """Each straggler's cost, by the measure of the two (``measures``: rank -> its self-time
        lead and the comm one, None where not known) whose sum over the updates that had both
        is the larger; sums kept for the stragglers of now only."""
        sums = {rank: self._cost_sums.get(rank, (0.0, 0.0)) for rank in measures}
        out: dict[int, float] = {}
        for rank, (by_self, by_comm) in measures.items():
            if by_comm is not None:
                s0, s1 = sums[rank]
                sums[rank] = (s0 + by_self, s1 + by_comm)
            picked = by_comm if by_comm is not None and sums[rank][1] > sums[rank][0] else by_self
            # In whole milliseconds, as the hub says it: the alert's text changes when the figure
            # does, not with every frame's smoothed figures (it re-fitted and repainted the
            # alerts each frame).
            out[rank] = round(max(0.0, picked), 3)
        self._cost_sums = sums
        return out

    def _cost_measures(self) -> dict[int, tuple[float, float | None]]:
        """Rank -> each straggler's two measures of the others' wait a step, now (see
        straggler_costs)."""
        out: dict[int, tuple[float, float | None]] = {}
        if not self.totals.status_counts.get(st.STRAGGLER):
            return out
        live = [e for e in self._ranks if e.status in _LIVE and e.self_s is not None]
        stragglers = [e for e in live if e.status == st.STRAGGLER]
        if not stragglers or len(live) < 2:
            return out
        # Against the slowest of the ranks that are no stragglers, where there are any: two
        # stragglers alike slow, each against the other, read "the others no longer wait for it"
        # beside a grid marking both.
        calm = [e for e in live if e.status != st.STRAGGLER]
        top = heapq.nlargest(2, live, key=_self_of)
        # (and the others' comm wait beyond its own, where larger: a straggler slow again after
        # its first collective, in its backward's recompute, cost them 23 ms a step where its
        # self-time lead said 10; the hub's verdict says the larger, stragglers.straggler_cost_s)
        comm = {e.rank: row.comm_s if (row := self.row(e.rank)) is not None else None for e in live}
        # (the calm ranks' figures, the same for every straggler: once)
        calm_max = max(e.self_s for e in calm) if calm else None  # type: ignore[type-var]
        calm_comm = min((c for e in calm if (c := comm[e.rank]) is not None), default=None)
        for e in stragglers:
            if calm_max is not None:
                others_max, others_comm = calm_max, calm_comm
            else:
                others_max = top[1].self_s if e is top[0] else top[0].self_s
                others_comm = min((c for rank, c in comm.items() if rank != e.rank and c is not None), default=None)
            mine = comm[e.rank]
            out[e.rank] = (e.self_s - others_max, others_comm - mine if mine is not None and others_comm is not None else None)  # type: ignore[operator]
        return out

    def _fill_deviation(self, live: list[_Rank]) -> None:
        """Self time against the others' median, for the working ranks only (gone ranks no
        longer set the pace), and its level; notes the ranks whose level moved."""
        changed = self.changed
        medians = leave_one_out_medians([e.self_s for e in live])  # type: ignore[misc]
        warn, bad, floor = DEVIATION_WARN, DEVIATION_BAD, self.dev_floor_s
        for e, med in zip(live, medians, strict=True):
            if med is not None and med > 0:
                d = e.self_dev = (e.self_s - med) / med  # type: ignore[operator]
                level = 0 if e.self_s - med < floor else 2 if d >= bad else 1 if d >= warn else 0  # type: ignore[operator]
            else:
                level = 0
            if level != e.level:
                e.level = level
                if changed is not None:
                    changed.add(e.rank)

    def _mark_causes(self, causes: frozenset[int], hung: bool) -> bool:
        """Mark the ranks a failure or hang started from (``causes``) and unmark the rest;
        ``hung``: no rank alive makes progress (the other stalled ranks wait for the causes).
        Whether any mark changed."""
        waiting = bool(causes) and hung
        if causes == self._causes and waiting == self._waiting:
            return False
        by_rank = self._by_rank
        touched = [by_rank[rank] for rank in self._causes ^ causes if rank in by_rank]
        if waiting != self._waiting:
            # Every stalled rank turns into one waiting for the cause, or back (see heat_key).
            touched += [e for e in self._ranks if e.status == st.STALLED]
        before = [self._hang_mark(e) for e in touched]
        for e in touched:
            e.cause = e.rank in causes
        self._causes, self._waiting = causes, waiting
        self._waits_for_text = waited_for_text(causes) if waiting else ""
        changed = self.changed
        if changed is not None:
            changed.update(e.rank for e, mark in zip(touched, before) if self._hang_mark(e) != mark)
        return True

    def _mark_first_exit(self, first: int | None, after: bool = False) -> None:
        """When several ranks exited (``first``: the root cause, see ``causes.cause_rank``; None:
        fewer exited), mark the root cause and the others. ``after``: a rank left the job early,
        the root cause: every exited rank failed after it (its one peer's exit was drawn as a
        root cause's, beside it)."""
        changed = self.changed
        marked = False
        for e in self._ranks:
            mark = False if after and e.status == st.EXITED else (e.rank == first) if first is not None and e.status == st.EXITED else None
            marked = marked or mark is not None
            if mark != e.exit_first:
                e.exit_first = mark
                if changed is not None:
                    changed.add(e.rank)
        self._exit_marked = marked

    # -- reading ------------------------------------------------------------------------------

    @property
    def ranks(self) -> list[int]:
        """Every rank known, in order."""
        return [e.rank for e in self._ranks]

    def __len__(self) -> int:
        return len(self._ranks)

    def __contains__(self, rank: object) -> bool:
        return rank in self._by_rank

    @property
    def waiting(self) -> bool:
        """Whether stalled ranks wait for a hang's likely cause (drawn as waiting), as of the
        last update."""
        return self._waiting

    @property
    def waits_for(self) -> frozenset[int]:
        """The ranks the stalled ranks wait for (the hang's likely causes) while ``waiting``;
        empty otherwise."""
        return self._causes if self._waiting else frozenset()

    def heat_key(self, rank: int) -> tuple[str, int, bool | None, bool | None] | None:
        """What a rank's heat-map glyph shows: (status, deviation level, exit order mark, hang
        mark); the status :data:`STOPPED` for a rank shown stopped (``RankRow.stopped``),
        :data:`STOPPING` for one being stopped (``RankRow.stopping``), :data:`LOSS_BAD` for a
        running or finished one whose loss is not finite. The
        hang mark is True for the stalled or silent rank a hang likely waits for
        (``RankRow.cause``), False for a stalled rank waiting for it, None otherwise."""
        e = self._by_rank.get(rank)
        if e is None:
            return None
        status = STOPPED if e.stopped else STOPPING if e.stopping else e.status
        if e.loss_bad and status in LOSS_BAD_STATUSES:  # (as of the last update, as its status)
            status = LOSS_BAD
        return (status, e.level, e.exit_first, self._hang_mark(e))

    def _hang_mark(self, e: _Rank) -> bool | None:
        status = e.status
        if status == st.STALLED or status == st.SILENT:
            if e.cause:
                return True
            if self._waiting and status == st.STALLED:
                return False
        return None

    def row(self, rank: int | None) -> RankRow | None:
        """The full row of ``rank`` as of the last update (None for an unknown rank)."""
        e = self._by_rank.get(rank) if rank is not None else None  # type: ignore[arg-type]
        if e is None:
            return None
        if e.row_gen != self.gen:
            e.row = self._make_row(e)
            e.row_gen = self.gen
        return e.row

    def rows(self) -> list[RankRow]:
        """Every rank's full row, by rank (made once per update)."""
        if self._rows is None:
            row = self.row
            self._rows = [row(e.rank) for e in self._ranks]  # type: ignore[misc]
        return self._rows

    def build(self, state: st.RunState) -> list[RankRow]:
        """:meth:`update`, then every rank's row, by rank."""
        return self.update(state).rows()

    def _make_row(self, e: _Rank) -> RankRow:
        r = e.r
        step = r.step
        sysm = r.system
        sm = r.smooth  # the hub's medians of the rank's last steps (None: a hub before them)
        step_s = None
        if step is not None:
            step_s = sm[0] if sm is not None else e.smoothed_step_s()
            if step_s is None:
                step_s = step.step_s
            mem = step.mem
            # On the basis of the wall and self time beside them (the median of the last few
            # steps), not the last step's: "wall 128ms · comm 182ms" read as a wait longer
            # than the step.
            step_no, loss = step.step, step.loss
            comm_s = comm_wait_s(step, r.hello)
            if sm is not None:  # (a figure its last step has not: none shown, as below)
                data_s = step.data_s if step.data_s is None or sm[2] is None else sm[2]
                if comm_s is not None and sm[3] is not None:
                    comm_s = sm[3]
            else:
                data_s = e.smoothed("data_s", step.data_s)
                if comm_s is not None:
                    comm_s = e.smoothed("comm_s", comm_s)
        else:
            mem = None
            step_no = loss = data_s = comm_s = None
        if sysm is not None:
            gpu_util, gpu_mem = sysm.gpu_util_pct, sysm.gpu_mem_used_bytes
        else:
            gpu_util = gpu_mem = None
        if gpu_mem is None and mem is not None:
            gpu_mem = mem.nvml_used_bytes if mem.nvml_used_bytes is not None else mem.cuda_allocated_bytes
        waiting = self._hang_mark(e) is False
        saving = e.status == st.RUNNING and is_saving(r, step)
        return RankRow(
            e.rank,
            e.node,
            e.host,
            e.status,
            step_no,
            loss,
            step_s,
            e.self_s,
            e.self_dev,
            st.mem_held_bytes(mem),
            r.not_sharding is not None,
            r.exit_code,
            data_s,
            comm_s,
            gpu_util,
            gpu_mem,
            e.exit_first,
            e.cause,
            r.stalled.cause or None if r.stalled is not None and e.status == st.STALLED else None,
            waiting,
            self._waits_for_text if waiting else "",
            self.dev_floor_s,
            r.loss_not_finite,
            saving,
            e.status == st.RUNNING and r.joined,
            e.stopped,
            e.stopping,
            self._growing is not None and e.rank in self._growing,
        )


def shown_status(row: RankRow) -> str:
    """The status the grid draws a row with: its status, or :data:`STOPPED` or
    :data:`STOPPING` (not "saving": a running rank's cell says it)."""
    return STOPPED if row.stopped else STOPPING if row.stopping else row.status


def comm_wait_s(step: schema.Step, hello: schema.Hello | None) -> float | None:
    """The step's communication wait, None where the rank has no one to communicate with (a
    world of one process: the bundled trainer's ``single`` says 0.0, which read as a measured
    "comm 0µs" beside ranks that do communicate). A one-process world's wait that is not zero
    (``dp`` over several GPUs, where timed) is a figure of its own and stays."""
    comm = step.comm_s
    if not comm and hello is not None and hello.world_size <= 1:
        return None
    return comm


def _rank_of(e: _Rank) -> int:
    return e.rank


def _self_of(e: _Rank) -> float:
    return e.self_s  # type: ignore[return-value]


SORT_BINS = 20
"""Sorting by a time, values 1/SORT_BINS apart (5%, or 5 points of a deviation) tie."""


def _bin_ratio(seconds: float | None) -> float:
    if seconds is None or not 0 < seconds < math.inf:  # (inf: a hub's word, not a rank's)
        return float("-inf")
    return round(math.log(seconds) * SORT_BINS)


def sort_rows(rows: list[RankRow], key: str) -> list[RankRow]:
    """Rows in ``key`` order (ties by rank); unknown figures last."""
    if key == "rank":
        return sorted(rows, key=lambda r: r.rank)
    # Times within a few percent of each other tie (then by rank): ranks a millisecond apart
    # swapped places every frame, and the node labels with them.
    if key == "step_time":
        return sorted(rows, key=lambda r: (-_bin_ratio(r.step_s), r.rank))
    if key == "self_time":
        # Live ranks by their excess over the others; then the rest (finished, exited,
        # stalled: no excess is judged) by their last self time, as a post-mortem reads them.
        return sorted(
            rows,
            key=lambda r: (0, -round(r.self_dev * SORT_BINS), r.rank)
            if r.self_dev is not None
            else (1, -_bin_ratio(r.self_s), r.rank),
        )
    if key == "memory":
        return sorted(rows, key=lambda r: (-(r.held_bytes if r.held_bytes is not None else -1), r.rank))
    if key == "loss":
        # Not finite first (a NaN's rank among hundreds), then the highest: ranks drifting apart
        # or one spiking; ranks with no loss last.
        # (of those not finite, the first to turn first: it read rank 0 first of 40 gone NaN at
        # step 31, rank 17 at step 30 among them, review 312)
        return sorted(rows, key=lambda r: (r.loss_not_finite is None, r.loss_not_finite[1] if r.loss_not_finite else 0, r.loss is None,
                                           -(r.loss or 0.0), r.rank))  # fmt: skip
    if key == "status":
        # The rank a failure or hang started from first, whatever its status (a rank stalled in
        # its data loader sat after the ranks stalled waiting for it, and after a rank whose
        # timeout waiting for it ended the job); then the worst first, the root cause of a
        # failure first among the exited (it sat in its rank's place, among the 1023 ranks
        # stopped because of it).
        return sorted(rows, key=lambda r: (not r.cause, _STATUS_ORDER.get(shown_status(r), 9), r.exit_first is not True, r.rank))
    raise ValueError(f"unknown sort key {key!r}")


@dataclass(slots=True)
class RunTotals:
    """Run-wide figures the header shows, gathered in one pass over the ranks."""

    status_counts: dict[str, int]
    """Ranks by status, the stalled ones waiting for a hang's cause under ``WAITING`` and the
    exited ones stopped under ``STOPPED``, those being stopped under ``STOPPING``, the running
    ones saving under ``SAVING`` (as the grid draws them; :func:`run_totals`, which
    knows no grid, counts the waiting ones stalled)."""
    nodes: int
    step: int
    """The slowest rank's last step (as ``RunState.step``)."""
    samples_per_s: float | None
    """As :func:`throughput`."""
    notes: list[str]
    """The ranks' hello notes, each once, in rank order of first appearance."""


_FRAME_FAILURE: tuple[tuple, tuple[dict | None, dict[int, int | None]]] | None = None
"""((a weak reference to the state, its hseq, messages, lifecycle events), its answer): see frame_failure."""


def frame_failure(state: st.RunState) -> tuple[dict | None, dict[int, int | None]]:
    """The run's failure summary (None: no rank exited) and its ranks that left early
    (failures.left_early), worked out once for a state as it is now: the grid's rows, the
    root cause's mark and the header's counts each asked, three summaries a frame, 84% of a
    1,024-rank frame's time (review 322). Known again while no message has come since."""
    global _FRAME_FAILURE
    # (the state itself, by a weak reference: another state given the id of one gone, with as
    # many messages, got its answer; review 324)
    key = (state.hseq, sum(state.counts.values()), len(state.lifecycle))
    if _FRAME_FAILURE is not None and _FRAME_FAILURE[0][0]() is state and _FRAME_FAILURE[0][1:] == key:
        return _FRAME_FAILURE[1]
    ranks = state.ranks.values()
    failure = failure_summary(state) if any(r.exit_code is not None for r in ranks) else None
    left = left_early(state, failure) if any(r.finished for r in ranks) else {}
    _FRAME_FAILURE = ((weakref.ref(state), *key), (failure, left))
    return failure, left


def run_totals(state: st.RunState) -> RunTotals:
    """Status counts, nodes, progress, throughput and notes of the run: one pass over the
    ranks where asking each of ``RunState`` and :func:`throughput` took four."""
    counts: dict[str, int] = {}
    nodes: set[int] = set()
    notes: list[str] = []
    slowest: int | None = None
    total = 0.0
    seen = False
    left = frame_failure(state)[1]
    for r in state.ranks.values():
        status = st.status_of(r, left)
        if status == st.EXITED and r.ended_in_stop:
            counted = STOPPED
        elif status == st.RUNNING and is_saving(r, r.step):
            counted = SAVING
        elif is_stopping(r, status):
            counted = STOPPING
        else:
            counted = status
        counts[counted] = counts.get(counted, 0) + 1
        hello = r.hello
        if hello is None:
            nodes.add(0)
        else:
            nodes.add(hello.node)
            if hello.note and hello.note not in notes:
                notes.append(hello.note)
        last = r.last_step
        if last is not None and (slowest is None or last < slowest):
            slowest = last
        step = r.step
        if step is not None and status not in _NO_RATE:
            rate = rank_rate(r)
            if rate is not None:
                total += rate
                seen = True
    return RunTotals(counts, len(nodes), slowest or 0, total if seen else None, notes)


def throughput(state: st.RunState) -> float | None:
    """Samples per second over the working ranks, each over its last history points
    (:func:`rank_rate`), summed."""
    return run_totals(state).samples_per_s
