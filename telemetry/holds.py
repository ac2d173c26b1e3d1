"""Ranks that now and then hold the others far past a step, said as the job runs.

A rank that pauses 1.5 s every 60 steps (an upload of its metrics, a slow read of shared
storage, a garbage collection of a large heap) holds every other rank in its next collective
for as long: the job lost 58% of its training time so, and nothing said it as it ran (the
report's "held up" line, afterwards, alone did). The straggler detector rightly names no one:
its windows' medians see one slow step in sixty. Here each scored window's steps are read one
by one: a rank whose self time at a step leads the next slowest rank's by HOLD_MIN_S and by
HOLD_FACTOR of the ranks' wall step time or more held the others that long (the report's rule,
``report._holds``, which imports these constants).

Said as a ``held_up`` verdict (not "held": that is a rank's memory figure): the first of a rank
as it is found, the next ones gathered into one line at most every HOLD_SAY_S. A rank's own
checkpoint save or evaluation is in no step (the zero-code hooks and the bundled trainer leave
its time out; its ``checkpoint``/``eval`` line says how long it took): what the rank did right
after it, an upload of the checkpoint, is a hold said so. Not said: a pause the liveness rule
said was a stall (its "stalled" and "resumed" said it: ``note_stall``), and a named straggler's
steps (its own verdict says them; its steady lead is never HOLD_FACTOR steps, the others' steps
wait it out).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .schema import Verdict
from .summary import took_text

HOLD_MIN_S = 0.25
"""The least a rank's lead over the others at one step for it to have held them..."""
HOLD_FACTOR = 5.0
"""...and the least, in the ranks' wall step times."""
HOLD_SAY_S = (10.0, 60.0)
"""Of a rank that holds the others again and again, its second line no sooner than the first of
these after its first (seconds of the ranks' clock: soon, to show whether they repeat), each
later one no sooner than the second after the last, of the holds since its last."""
GROWING = 1.1
"""Holds each this much longer than the one before read as growing (said so, not a median)."""
STEPS_NAMED = 5
"""Steps a gathered line names; "and N more" after them."""
BUSY = {"checkpoint": "checkpoint", "eval": "evaluation", "resume": "resume"}
"""Events of a rank's own pause between steps, said by their own lines with how long they took
(in no step's time)."""
BUSY_KEPT = 8
"""A rank's latest such events kept."""

WHERE = {
    "own work": "in its own code between steps (not its DataLoader)",
    "dataloader": "in its DataLoader",
    "data": "between steps (loading data or its own work)",
    "step": "in its step's own work",
    "after": "past its step's first collective (in its backward or optimizer step, or between them)",
}
"""Where a hold's time went, as the held verdicts and the report's "held up" lines say it."""


@dataclass(slots=True)
class _Rank:
    said: bool = False
    """Its first hold has been said."""
    said_t: float = 0.0
    """The ranks' clock at its last line."""
    lines: int = 0
    """Its lines said."""
    since: int = 0
    """The step of its last hold said."""
    steps: list[int] = field(default_factory=list)
    """Its holds since its last line (steps, and their leads in ``leads``, and the event each
    came right after, if one did, in ``after``)."""
    leads: list[float] = field(default_factory=list)
    after: list[str | None] = field(default_factory=list)
    wheres: list[str] = field(default_factory=list)
    """Where each of those holds' time went (a key of WHERE)."""
    busy: dict[int, tuple[str, float]] = field(default_factory=dict)
    """Step -> (event name, seconds they took) of its latest BUSY events, those of one step
    summed (an evaluation then a save at step 200: both are in no step; named after the
    checkpoint, what came right after is more likely its upload)."""


def _busy_before(r: _Rank, step: int) -> tuple[int, str, float] | None:
    """(step, event name, seconds) of the rank's own save or evaluation right before ``step``."""
    for at in (step - 1, step):
        if at in r.busy:
            return (at, *r.busy[at])
    return None


def _two_slowest(selfs: dict[int, list], i: int) -> tuple[tuple[float | None, int], tuple[float | None, int]]:
    """The two slowest (self time, rank) at index ``i`` of the ranks' ``selfs`` ((None, -1)
    where fewer ranks measured one)."""
    a: tuple[float | None, int] = (None, -1)
    b: tuple[float | None, int] = (None, -1)
    for q, ys in selfs.items():
        y = ys[i]
        if y is None:
            continue
        if a[0] is None or y > a[0]:
            a, b = (y, q), a
        elif b[0] is None or y > b[0]:
            b = (y, q)
    return a, b


def where_held(lead: float, data_s: float | None, loader_s: float | None) -> str:
    """Where a hold of ``lead`` seconds went, from the step's data time (between steps) and time
    in its DataLoader: a key of WHERE."""
    if (data_s or 0.0) < lead / 2:
        return "step"
    if loader_s is None:
        return "data"
    return "dataloader" if loader_s >= data_s / 2 else "own work"


def steps_named(steps: list[int]) -> str:
    """"121, 181 and 3 more"."""
    named = ", ".join(map(str, steps[:STEPS_NAMED]))
    return named + (f" and {len(steps) - STEPS_NAMED} more" if len(steps) > STEPS_NAMED else "")


class HoldWatch:
    """Fed each scored window's steps by the straggler detector; gives ``held_up`` verdicts."""

    def __init__(self) -> None:
        self._ranks: dict[int, _Rank] = {}
        self._stalls: set[tuple[int, int]] = set()
        """(rank, step) of the stall verdicts said: a pause said as a stall, then "resumed"."""

    def restart(self) -> None:
        """A new attempt of the job: its processes are new, their holds not yet said."""
        self._ranks.clear()
        self._stalls.clear()

    def note_stall(self, rank: int, step: int | None) -> None:
        """A stall said of ``rank`` after ``step`` (the liveness rule's verdict)."""
        if step is not None:
            self._stalls.add((rank, step))
            if len(self._stalls) > 4 * BUSY_KEPT:
                self._stalls.remove(min(self._stalls, key=lambda k: k[1]))

    def note_busy(self, rank: int, said) -> None:
        """A rank's own event: a save's or an evaluation's step and time, kept for the holds
        right after it."""
        if said is None or said.name not in BUSY or said.step is None:
            return
        r = self._ranks.get(rank)
        if r is None:
            r = self._ranks[rank] = _Rank()
        known = r.busy.get(said.step)
        took = said.duration_s or 0.0
        if known is None:
            r.busy[said.step] = (said.name, took)
            if len(r.busy) > BUSY_KEPT:
                del r.busy[next(iter(r.busy))]
        else:
            r.busy[said.step] = ("checkpoint" if "checkpoint" in (known[0], said.name) else known[0], known[1] + took)

    def window(self, steps: Sequence[int], candidates: Iterable[int], selfs: dict[int, list], data: dict[int, list],
               loader: dict[int, list], wall_s: float | None, skip: set[int], now: float,
               comms: dict[int, list] | None = None) -> list[Verdict]:  # fmt: skip
        """Of the window of ``steps``: the ranks that may have held the others (a step of
        HOLD_MIN_S or more), each rank's self times, data and DataLoader times, in step order
        (None where not measured; ``loader`` of the ranks that measure one), the ranks' wall step
        time, the ranks not judged (stragglers), the ranks' clock now; ``comms``: each rank's
        comm times in step order, where some rank waited HOLD_MIN_S or more in its collectives
        (else None). A rank that held the others *past* its step's first collective (a pause
        between its backward and its optimizer step: a synchronous log of the gradients' norm)
        has no lead in self time: the others' comm less its own at the next collective is its
        lead there (review 333: such pauses, 12 s of a 15 s run, were said nowhere)."""
        bar = max(HOLD_MIN_S, HOLD_FACTOR * (wall_s or 0.0))
        out: list[Verdict] = []
        found: set[int] = set()
        """The window's steps (indexes) a hold was found at: one rank a step."""
        tops: dict[int, tuple] = {}
        """Index -> the two slowest (self time, rank) there: read once a step, however many
        ranks pass the bar at it (an epoch's first step, each rank's workers starting anew:
        every rank read every other's, 0.4 s of the hub's loop at 2,048 ranks, review 334)."""
        for rank in candidates:
            if rank in skip:
                continue
            xs = selfs[rank]
            for i, x in enumerate(xs):
                if x is None or x < bar:
                    continue
                top = tops.get(i)
                if top is None:
                    top = tops[i] = _two_slowest(selfs, i)
                nxt = top[1][0] if top[0][1] == rank else top[0][0]
                if nxt is not None and x - nxt >= bar:
                    d, ld = data.get(rank), loader.get(rank)
                    if self._held(out, rank, steps[i], x - nxt, where_held(x - nxt, d[i] if d else None, ld[i] if ld else None),
                                  wall_s, now):  # fmt: skip
                        found.add(i)
        if comms:
            for i in range(len(steps)):
                if i in found:
                    continue
                at = sorted((cs[i], q) for q, cs in comms.items() if cs is not None and cs[i] is not None)
                if len(at) < 2 or at[-1][0] < bar or (lead := at[1][0] - at[0][0]) < bar or at[0][1] in skip:
                    continue
                # (its own save or evaluation is in no step of its own but in the others' wait,
                # less what the next rank spent in its own: their lines say it; a rank evaluating
                # alone is no hold of its own code, nor are all ranks evaluating together)
                own, next_s = self._busy_s(at[0][1], steps[i]), self._busy_s(at[1][1], steps[i])
                lead -= max(0.0, own - next_s)
                if lead < bar:
                    continue
                self._held(out, at[0][1], steps[i], lead, "after", wall_s, now, after_busy=own > next_s)
        for rank, r in self._ranks.items():
            if r.steps and now - r.said_t >= HOLD_SAY_S[min(r.lines, 2) - 1]:
                out.append(self._more(rank, r, now))
        return out

    def _busy_s(self, rank: int, step: int) -> float:
        """Seconds of ``rank``'s own saves and evaluations right before ``step`` (in no step)."""
        r = self._ranks.get(rank)
        busy = _busy_before(r, step) if r is not None else None
        return busy[2] if busy is not None else 0.0

    def _held(self, out: list[Verdict], rank: int, step: int, lead: float, where: str, wall_s: float | None, now: float,
              after_busy: bool = True) -> bool:  # fmt: skip
        """Note that ``rank`` held the others ``lead`` seconds at ``step`` (its first hold said
        into ``out``, the next kept for a gathered line; ``after_busy``: said right after its own
        save or evaluation where one came before, not where the others' were as long, their
        wait holding none of it); False where a stall said it: a stall
        after the step before (a pause between steps), or the one before that (a pause past the
        step's first collective, said "stalled in backward after step 29", shows in the others'
        wait at step 31's first collective, review 334)."""
        if any((rank, step - k) in self._stalls for k in (0, 1, 2)):
            return False
        r = self._ranks.get(rank)
        if r is None:
            r = self._ranks[rank] = _Rank()
        # (right after its own save or evaluation: their time is in no step, the hooks and the
        # bundled trainer leave it out, so the lead is what it did after it)
        busy = _busy_before(r, step) if after_busy else None
        if not r.said:
            r.said, r.said_t, r.since, r.lines = True, now, step, 1
            out.append(self._first(rank, step, lead, where, busy, wall_s))
        else:
            r.steps.append(step)
            r.leads.append(lead)
            r.after.append(busy[1] if busy is not None else None)
            r.wheres.append(where)
        return True

    def flush(self, now: float) -> list[Verdict]:
        """The holds not said yet, of every rank (the job is ending: fewer than two ranks run)."""
        return [self._more(rank, r, now) for rank, r in self._ranks.items() if r.steps]

    @staticmethod
    def _first(rank: int, step: int, lead: float, where: str, busy: tuple | None, wall_s: float | None) -> Verdict:
        steps_take = f" (its steps take {wall_s * 1e3:.1f} ms)" if wall_s else ""
        if busy is not None:
            at, name, took = busy
            what = (f"right after its {BUSY[name]} at step {at} ({took_text(took)}, said apart): in its own code after it"
                    + (", e.g. an upload" if name == "checkpoint" else ""))  # fmt: skip
        else:
            what = WHERE[where]
        return Verdict(rank=rank, verdict="held_up", cause=where if busy is None else busy[1], cost_s=lead, step=step,
                       message=f"rank {rank} held the others up {lead:.2f} s at step {step}{steps_take}, {what}")  # fmt: skip

    @staticmethod
    def _more(rank: int, r: _Rank, now: float) -> Verdict:
        """The line of its holds since its last, which it then forgets."""
        steps, in_order, after, wheres = r.steps, r.leads, set(r.after), set(r.wheres)
        leads = sorted(in_order)
        since = r.since
        r.said_t, r.since, r.lines = now, steps[-1], r.lines + 1
        r.steps, r.leads, r.after, r.wheres = [], [], [], []
        gaps = {b - a for a, b in zip([since, *steps], steps)}
        every = f" (every {gaps.pop()} steps)" if len(gaps) == 1 else ""
        n = len(steps)
        if n == 1:
            said = f"once more, {leads[0]:.2f} s at step {steps[0]} ({steps[0] - since} steps after step {since})"
        else:
            # (pauses that grow, 0.3 s then 1.5 s, read as a median "0.9 s each", review 333)
            growing = n >= 3 and all(b > a * GROWING for a, b in zip(in_order, in_order[1:]))
            each = f"growing from {in_order[0]:.2f} s to {in_order[-1]:.2f} s" if growing else f"{leads[n // 2]:.2f} s each"
            said = f"{n} more times since step {since}, at steps {steps_named(steps)}{every}, {each}, {sum(leads):.2f} s in all"
        name = next(iter(after)) if len(after) == 1 else None
        if name is not None:
            said += f", {'' if n == 1 else 'each '}right after its {BUSY[name]}: in its own code after it" + (", e.g. an upload" if name == "checkpoint" else "")
        elif after == {None} and len(wheres) == 1:
            said += f", {WHERE[next(iter(wheres))]}"  # (as its first line said where: the gathered ones too)
        return Verdict(rank=rank, verdict="held_up", cost_s=sum(leads), step=steps[-1], message=f"rank {rank} held the others up {said}")
