"""The run's loss from its first step to its last, in a bounded number of points.

A rank's history (ring.py) keeps its last :data:`~.state.HISTORY_POINTS` points: half a minute
of a run at 10 steps a second. The dashboard's run chart wants the whole curve, as TensorBoard
draws it: the early fall is what tells a run that learns from one that does not. A
:class:`Trend` takes one point a frame (the ranks' median loss, their lowest and highest, at
the frame's newest step) and, once it holds :data:`TREND_POINTS`, merges them two by two (all
but the first: the curve starts at the run's first loss) and merges twice as many frames into
each point from then on. A week-long run costs the same handful of kilobytes as a minute's, and
the curve's resolution halves as the run doubles.

A live hub and its viewers feed it the same frames in the same order (``RunState.commit_history``),
so they hold the same points; a viewer that attaches late takes the hub's (``Snapshot.trend``).
Its points are as the frames fell: a replay of the run's log, which cuts its frames on the log's
clock (``client.ReplaySource``), or a hub reading its log back (``Hub.recover``), holds the
same curve through other points, not the live viewers' points.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import frames, schema

TREND_POINTS = 480
"""Points kept; past that, neighbours are merged and each point spans twice the frames."""


class Trend:
    """The run's median loss over its ranks, one point per ``stride`` frames."""

    __slots__ = ("stride", "rows", "_open", "_frames", "_rank_step")

    def __init__(self) -> None:
        self.stride = 1
        """Frames merged into one point."""
        self.rows: list[tuple[float, float, float, float]] = []
        """Closed points, oldest first: (step, median loss, lowest, highest)."""
        self._open: list[float] | None = None
        """The point being filled: [step, sum of medians, lowest, highest]."""
        self._frames = 0
        """Frames in the open point."""
        self._rank_step: dict[int, int] = {}
        """Each rank's newest step in a frame: one that goes back has run its steps again."""

    def __len__(self) -> int:
        return len(self.rows) + (self._open is not None)

    def add_frame(self, steps: Iterable[schema.Step]) -> None:
        """Take a frame's steps (each rank's newest since the previous frame)."""
        losses: list[float] = []
        step = None
        last = self._rank_step
        back = None
        for s in steps:
            was = last.get(s.rank)
            if was is not None and s.step < was and (back is None or s.step < back):
                back = s.step
            last[s.rank] = s.step
            loss = s.loss
            if loss is not None and loss == loss:  # NaN (a diverged rank) has no place in a median
                losses.append(loss)
                if step is None or s.step > step:
                    step = s.step
        if back is not None:
            self.drop_from(back)
        if step is None:
            return
        losses.sort()
        n = len(losses)
        median = losses[n // 2] if n % 2 else (losses[n // 2 - 1] + losses[n // 2]) / 2
        self.add(step, median, losses[0], losses[-1])

    def add(self, step: float, median: float, low: float, high: float) -> None:
        """One frame's point: merged into the open point until it spans ``stride`` frames."""
        p = self._open
        if p is None:
            p = self._open = [step, median, low, high]
            self._frames = 1
        else:
            p[0] = step  # the newest (after a restart's resume, steps may go back)
            p[1] += median
            if low < p[2]:
                p[2] = low
            if high > p[3]:
                p[3] = high
            self._frames += 1
        if self._frames < self.stride:
            return
        self.rows.append((p[0], p[1] / self._frames, p[2], p[3]))
        self._open = None
        self._frames = 0
        if len(self.rows) >= TREND_POINTS:
            # The first point is kept as it is: the curve starts at the run's first loss (merged,
            # step 1's 4.18 became a 3.43 at step 7).
            first, rest = self.rows[0], self.rows[1:]
            merged = [
                (b[0], (a[1] + b[1]) / 2, min(a[2], b[2]), max(a[3], b[3])) for a, b in zip(rest[::2], rest[1::2], strict=False)
            ]
            if len(rest) % 2:
                merged.append(rest[-1])
            self.rows = [first, *merged]
            self.stride *= 2

    def rank_stepped(self, rank: int, step: int) -> None:
        """A rank's newest step as known from elsewhere (a viewer's snapshot): one of its next
        frames that goes back from it has run its steps again."""
        self._rank_step[rank] = step

    def drop_from(self, step: float) -> None:
        """Forget the points at ``step`` and after: a rank that torchrun restarted (from its
        start, or a checkpoint) runs those steps again, and its new run of them replaces the
        first, as an export's do (the chart kept the failed attempt's steps 455-599 to the
        right of the new attempt's 1-454, review 246). A frame's point whose ranks were at
        several steps is kept by its newest step."""
        p = self._open
        if p is not None and p[0] >= step:
            self._open = None
            self._frames = 0
        rows = self.rows
        while rows and rows[-1][0] >= step:
            rows.pop()

    def points(self) -> tuple[list[float], list[float], list[float], list[float]]:
        """Steps, medians, lows and highs, oldest first (the open point last)."""
        rows = list(self.rows)
        p = self._open
        if p is not None:
            rows.append((p[0], p[1] / self._frames, p[2], p[3]))
        if not rows:
            return [], [], [], []
        steps, medians, lows, highs = (list(c) for c in zip(*rows, strict=True))
        return steps, medians, lows, highs

    # -- the snapshot ------------------------------------------------------------------------

    def to_data(self) -> frames.TrendData:
        return frames.TrendData(stride=self.stride, rows=list(self.rows), open=list(self._open or ()), open_frames=self._frames)

    def load(self, data: frames.TrendData) -> None:
        self.stride = max(1, data.stride)
        self.rows = [tuple(r) for r in data.rows][-TREND_POINTS:]  # type: ignore[misc]
        self._open = list(data.open) if len(data.open) == 4 and data.open_frames > 0 else None
        self._frames = data.open_frames if self._open is not None else 0
