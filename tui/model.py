"""What the rank grid shows, derived from a :class:`RunState` (no Textual here).

A :class:`RankRow` holds one rank's figures as the grid draws them. Self times are compared with
the median of the *other* ranks (leave-one-out, as the hub's straggler detector does), each
rank's figure being the median of its last few steps so one slow step does not flash a cell.
Building the rows costs one pass over the ranks, whatever the message rate: each rank's
smoothing window is seeded once from its history and then fed its latest step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from pardash.telemetry import state as st

from .alerts import exit_info

SMOOTH_POINTS = 5
"""Steps over which a rank's step and self time are smoothed (median) for the grid."""
DEVIATION_WARN = 0.10
"""Self time this far above the others' median is shown in the warning colour."""
DEVIATION_BAD = 0.25
"""...and this far above in the alarm colour (the straggler detector's relative bar)."""

FLAGGED_STATUSES = frozenset({st.STRAGGLER, st.STALLED, st.SILENT, st.EXITED})
"""Statuses that count as flagged (the filter keeps them)."""

SORT_KEYS = ("rank", "step_time", "self_time", "memory", "status")
"""Orders of the grid, in the order the sort key cycles through them."""
SORT_LABELS = {
    "rank": "rank",
    "step_time": "step time ↓",
    "self_time": "self time ↓",
    "memory": "memory ↓",
    "status": "status",
}

_STATUS_ORDER = {
    st.EXITED: 0,
    st.SILENT: 1,
    st.STALLED: 2,
    st.STRAGGLER: 3,
    st.STARTING: 4,
    st.RUNNING: 5,
    st.FINISHED: 6,
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
    """Last step's data-loading time."""
    comm_s: float | None = None
    """Last step's communication wait (victims of a straggler wait longest)."""
    gpu_util_pct: float | None = None
    gpu_mem_bytes: int | None = None
    """Device memory in use (NVML), else CUDA allocated."""
    exit_first: bool | None = None
    """When several ranks exited: True for the first to exit (the likely cause), False for
    the others (usually stopped because of it); None otherwise."""

    @property
    def flagged(self) -> bool:
        """A verdict or a condition a person should look at."""
        return self.status in FLAGGED_STATUSES or self.not_sharding

    @property
    def deviation_level(self) -> int:
        """0 calm, 1 warning, 2 alarm, from the self-time deviation."""
        d = self.self_dev
        if d is None:
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


def _median_small(values) -> float | None:
    """Median of a handful of numbers (cheaper than statistics.median for five)."""
    v = sorted(values)
    n = len(v)
    if not n:
        return None
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def _known(values: list[float]) -> list[float]:
    """The last SMOOTH_POINTS values that are not NaN (a step without the figure)."""
    return [v for v in values if v == v][-SMOOTH_POINTS:]


class _Smoothed:
    """A rank's last few known step and self times, read from its history.

    A viewer's state commits one history point for every step it applies (``steps_seen``
    counts them), so the window is the same whether it was seeded from a snapshot or fed
    frame by frame, and whether or not every frame was drawn: a late viewer shows what an early
    one shows. The medians are worked out when the window changes, not at every draw.
    """

    __slots__ = ("seen", "step_s", "self_s", "step_med", "self_med")

    def __init__(self, r: st.RankState) -> None:
        self.step_s = deque(_known(r.history["step_s"].values()), SMOOTH_POINTS)
        self.self_s = deque(_known(r.history["self_s"].values()), SMOOTH_POINTS)
        self.seen = r.steps_seen
        self.step_med = _median_small(self.step_s)
        self.self_med = _median_small(self.self_s)

    def feed(self, r: st.RankState) -> None:
        """Take the history points added since the last call."""
        seen = r.steps_seen
        new = seen - self.seen
        self.seen = seen
        if new <= 0:
            return
        ring = r.history
        self.step_s.extend(_known(ring["step_s"].values()[-min(new, SMOOTH_POINTS) :]))
        self.self_s.extend(_known(ring["self_s"].values()[-min(new, SMOOTH_POINTS) :]))
        self.step_med = _median_small(self.step_s)
        self.self_med = _median_small(self.self_s)


class RowBuilder:
    """Builds the grid's rows from a run state; keeps each rank's smoothing window, so a
    refresh costs a few operations per rank whatever arrived in between."""

    def __init__(self) -> None:
        self._smooth: dict[int, _Smoothed] = {}
        self._state_id = 0

    def build(self, state: st.RunState) -> list[RankRow]:
        if id(state) != self._state_id:
            # A new snapshot or a replay seek replaced the state: start the windows again.
            self._smooth.clear()
            self._state_id = id(state)
        smooth = self._smooth
        held_of = st.mem_held_bytes
        rows: list[RankRow] = []
        append = rows.append
        full = SMOOTH_POINTS
        mid = SMOOTH_POINTS // 2 if SMOOTH_POINTS % 2 else -1
        # The hot loop of a refresh at 1024 ranks: plain attribute reads, positional fields.
        for rank, r in state.ranks.items():
            sm = smooth.get(rank)
            if sm is None:
                sm = smooth[rank] = _Smoothed(r)
            elif r.steps_seen == sm.seen + 1 and mid >= 0:
                # _Smoothed.feed's common case inlined (one new point per rank and frame).
                sm.seen += 1
                ring = r.history
                last = ring.last("step_s")
                if last is not None and last == last:
                    window = sm.step_s
                    window.append(last)
                    v = sorted(window)
                    sm.step_med = v[mid] if len(v) == full else _median_small(v)
                last = ring.last("self_s")
                if last is not None and last == last:
                    window = sm.self_s
                    window.append(last)
                    v = sorted(window)
                    sm.self_med = v[mid] if len(v) == full else _median_small(v)
            elif r.steps_seen != sm.seen:
                sm.feed(r)
            step_s = sm.step_med
            self_s = sm.self_med
            step = r.step
            sysm = r.system
            hello = r.hello
            if step is not None:
                # A snapshot may carry a step that never reached the history.
                if step_s is None:
                    step_s = step.step_s
                if self_s is None:
                    self_s = step.self_s
                mem = step.mem
                step_no, loss, data_s, comm_s = step.step, step.loss, step.data_s, step.comm_s
            else:
                mem = None
                step_no = loss = data_s = comm_s = None
            if sysm is not None:
                gpu_util, gpu_mem = sysm.gpu_util_pct, sysm.gpu_mem_used_bytes
            else:
                gpu_util = gpu_mem = None
            if gpu_mem is None and mem is not None:
                gpu_mem = mem.nvml_used_bytes if mem.nvml_used_bytes is not None else mem.cuda_allocated_bytes
            append(
                RankRow(
                    rank,
                    hello.node if hello is not None else 0,
                    hello.host if hello is not None else "",
                    r.status,
                    step_no,
                    loss,
                    step_s,
                    self_s,
                    None,
                    held_of(mem),
                    r.not_sharding is not None,
                    r.exit_code,
                    data_s,
                    comm_s,
                    gpu_util,
                    gpu_mem,
                )
            )
        _fill_deviation(rows)
        _mark_first_exit(state, rows)
        rows.sort(key=_by_rank)
        return rows


def _by_rank(row: RankRow) -> int:
    return row.rank


def _mark_first_exit(state: st.RunState, rows: list[RankRow]) -> None:
    exited = [row for row in rows if row.status == st.EXITED]
    if len(exited) < 2:
        return
    info = exit_info(state)
    if not info:
        return
    first = min(info, key=lambda rank: info[rank].order)
    for row in exited:
        row.exit_first = row.rank == first


def _fill_deviation(rows: list[RankRow]) -> None:
    # Ranks that are gone (exited, finished, silent) no longer set the pace: compare the
    # working ranks only.
    live = [row for row in rows if row.self_s is not None and row.status in (st.RUNNING, st.STRAGGLER, st.STALLED)]
    medians = leave_one_out_medians([row.self_s for row in live])  # type: ignore[misc]
    for row, med in zip(live, medians, strict=True):
        if med is not None and med > 0:
            row.self_dev = (row.self_s - med) / med  # type: ignore[operator]


def sort_rows(rows: list[RankRow], key: str) -> list[RankRow]:
    """Rows in ``key`` order (ties by rank); unknown figures last."""
    inf = float("inf")
    if key == "rank":
        return sorted(rows, key=lambda r: r.rank)
    if key == "step_time":
        return sorted(rows, key=lambda r: (-(r.step_s if r.step_s is not None else -inf), r.rank))
    if key == "self_time":
        return sorted(rows, key=lambda r: (-(r.self_dev if r.self_dev is not None else -inf), r.rank))
    if key == "memory":
        return sorted(rows, key=lambda r: (-(r.held_bytes if r.held_bytes is not None else -1), r.rank))
    if key == "status":
        return sorted(rows, key=lambda r: (_STATUS_ORDER.get(r.status, 9), r.rank))
    raise ValueError(f"unknown sort key {key!r}")


@dataclass(slots=True)
class RunTotals:
    """Run-wide figures the header shows, gathered in one pass over the ranks."""

    status_counts: dict[str, int]
    nodes: int
    step: int
    """The slowest rank's last step (as ``RunState.step``)."""
    samples_per_s: float | None
    """As :func:`throughput`."""
    notes: list[str]
    """The ranks' hello notes, each once, in rank order of first appearance."""


def run_totals(state: st.RunState) -> RunTotals:
    """Status counts, nodes, progress, throughput and notes of the run: one pass over the
    ranks where asking each of ``RunState`` and :func:`throughput` took four."""
    counts: dict[str, int] = {}
    nodes: set[int] = set()
    notes: list[str] = []
    slowest: int | None = None
    total = 0.0
    seen = False
    gone = (st.EXITED, st.FINISHED, st.SILENT)
    for r in state.ranks.values():
        status = r.status
        counts[status] = counts.get(status, 0) + 1
        hello = r.hello
        if hello is None:
            nodes.add(0)
        else:
            nodes.add(hello.node)
            if hello.note and hello.note not in notes:
                notes.append(hello.note)
        step = r.step
        if step is not None:
            if slowest is None or step.step < slowest:
                slowest = step.step
            if step.samples and step.step_s > 0 and status not in gone:
                total += step.samples / step.step_s
                seen = True
    return RunTotals(counts, len(nodes), slowest or 0, total if seen else None, notes)


def throughput(state: st.RunState) -> float | None:
    """Samples per second over the working ranks: each rank's samples per step over its
    latest step time, summed."""
    return run_totals(state).samples_per_s
