"""Which ranks' wall clocks a recorded log cannot take for the run's time.

Every record carries ``t``, its sender's wall clock. A node whose clock was never set (1970), or
set to the wrong year or zone, sends times that put the run's start or end decades away: the
report read a two-minute run as 57 years, and a replay waited for decades of nothing. The log
holds no hub receive time per record, but it holds the hub's own clock: its notes and verdicts
are written in the order the hub took every record (a launcher's note of a rank's exit is on that
rank's node's clock: it counts as the rank's). So:

- a rank record after a hub note of time H was taken after H: a time far before H was sent by a
  clock behind the hub's (a reporter's queue delivers at most minutes late);
- a rank record before a hub note of time H was taken before H, so sent before it: a time far
  after H is a clock ahead;
- with no hub note after them (a hub killed, a live log), a rank whose first and last times are
  both far after the other ranks' (their median) is a clock ahead.

A rank whose clock disagrees by more than CLOCK_OFF_S is off; its times are left out of the
run's span (report) and its records play where the hub took them (replay). When every rank
disagrees with the hub the same way, the hub's clock is the wrong one: the ranks' times stand.
A log without the hub's records (written by hand) has no reference and nothing is judged.
"""

from __future__ import annotations

from . import schema
from .summary import ranks_named

CLOCK_OFF_S = 3600.0
"""How far a rank's clock may disagree with the hub's before its times are not used: beyond
NTP's drift and a reporter's queue delivered late (minutes), below a wrong zone, day or year."""

_Event, _Hello, _Verdict = schema.Event, schema.Hello, schema.Verdict


def is_hub_side(msg: schema.Message) -> bool:
    """Stamped with the hub's clock, not a rank's: the hub's own notes (rank -1), its verdicts
    and its notes about a rank (seq -1: a restart it saw). A verdict is told by its kind, not its
    seq: logs of older versions hold verdicts at seq 0, which read as the rank's own word. Not a
    launcher's note of a rank's exit (seq -1 too): each node's launcher stamps it with its node's
    clock, the rank's (node 1's at 1970 moved the hub's clock there, and node 0's ranks read as
    57 years ahead)."""
    if msg.rank < 0:
        return True
    cls = msg.__class__
    return cls is _Verdict or (msg.seq < 0 and not (cls is _Event and msg.name == "exit"))


class RankClocks:
    """Fed a log's records in order (:meth:`take`), says which ranks' clocks are off
    (:meth:`off`) and each rank's first and last time. Memory: a few floats a rank."""

    def __init__(self) -> None:
        self.hub_t = 0.0
        """The hub's newest time so far (0.0: none yet)."""
        self.hub_first = 0.0
        """The hub's first time (0.0: none)."""
        self.about: list[float] = []
        """The first and last time of the hub's records about ranks (verdicts, restarts it saw):
        on the hub's clock, and in the run's span."""
        self.first: dict[int, float] = {}
        """rank -> the first time it sent (on its own clock)."""
        self.last: dict[int, float] = {}
        self._since: dict[int, float] = {}
        """rank -> its newest time since the hub's last record (to check against the next one)."""
        self._off: dict[int, float] = {}
        """rank -> seconds its clock is ahead (+) or behind (-) the hub's, where past CLOCK_OFF_S."""
        self._hosts: dict[int, str] = {}
        """rank -> the host it said it runs on (its hello)."""

    def take(self, msg: schema.Message) -> None:
        t = msg.t
        if not t:
            return
        rank = msg.rank
        cls = msg.__class__
        # is_hub_side(msg), inline: this runs once a record over a log of millions
        if rank < 0 or cls is _Verdict or (msg.seq < 0 and not (cls is _Event and msg.name == "exit")):
            if rank >= 0:
                if not self.about:
                    self.about = [t, t]
                elif t < self.about[0]:
                    self.about[0] = t
                elif t > self.about[1]:
                    self.about[1] = t
            if not self.hub_first or t < self.hub_first:
                self.hub_first = t
            for r, newest in self._since.items():
                if newest - t > CLOCK_OFF_S:
                    self._note(r, newest - t)
            self._since.clear()
            if t > self.hub_t:
                self.hub_t = t
            return
        if rank not in self.first:
            self.first[rank] = self.last[rank] = t
        elif t < self.first[rank]:
            self.first[rank] = t
        elif t > self.last[rank]:
            self.last[rank] = t
        if self.hub_t and self.hub_t - t > CLOCK_OFF_S:
            self._note(rank, t - self.hub_t)
        if t > self._since.get(rank, 0.0):
            self._since[rank] = t
        if cls is _Hello:
            self._hosts[rank] = msg.host

    def _note(self, rank: int, off_s: float) -> None:
        if abs(off_s) > abs(self._off.get(rank, 0.0)):
            self._off[rank] = off_s

    def off(self) -> dict[int, float]:
        """Ranks whose times are not the run's: rank -> seconds ahead (+) or behind (-) the
        hub's clock (where the hub's is the clock off, :meth:`hub_off_s`, or said nothing after
        a rank's records, the other ranks')."""
        off = {} if self.hub_off_s() is not None else dict(self._off)
        ok = [r for r in self.first if r not in off]
        if len(ok) > 1 and self.hub_first:
            # A rank ahead is caught by the hub's notes after its records, and a log cut short
            # (a hub killed, a live log) has none: its ranks are each other's witnesses. A clock
            # moves a rank's first and last time alike; a rank that started late (a node that
            # joined at a restart, a later run in the same log) has only its first later. The
            # lower median: of two ranks, the one behind, whom the hub's notes before it judged.
            mid = (len(ok) - 1) // 2
            first = sorted(self.first[r] for r in ok)[mid]
            last = sorted(self.last[r] for r in ok)[mid]
            for r in ok:
                ahead_s = min(self.first[r] - first, self.last[r] - last)
                if ahead_s > CLOCK_OFF_S:
                    off[r] = ahead_s
        return off

    def hub_off_s(self) -> float | None:
        """Seconds the hub's clock is ahead (+) or behind (-) its ranks', when every rank
        disagrees with it the same way (None: it agrees with some). The ranks' times are the
        run's then; whether the hub's is the clock off, :meth:`hub_blamed` says."""
        if not self.first or len(self._off) < len(self.first):
            return None
        offs = sorted(self._off.values())
        if offs[0] < 0 < offs[-1]:
            return None
        return -offs[len(offs) // 2]

    def hub_blamed(self) -> bool:
        """Whether ranks on two hosts or more, agreeing with each other, disagree with the hub:
        its clock is the odd one. One host (or one rank) against the hub is one clock against
        another, and either may be the wrong one."""
        return len(set(self._hosts.values())) > 1

    def warnings(self) -> list[str]:
        """What to say of the clocks that disagree (:func:`clock_warnings`)."""
        return clock_warnings(self.off(), self.hub_off_s(), self.hub_blamed(), sorted(self.first))

    def span(self) -> tuple[float, float] | None:
        """The run's first and last time: its ranks' first and last word, of the ranks whose
        clocks are the run's, and the hub's records about them where its clock is the run's too
        (None: no rank's). A hub waits for its job (torch's import, a rendezvous, a queue) and
        writes on while a viewer stays open after it: its own notes are no run time."""
        off = self.off()
        good = [r for r in self.first if r not in off]
        about = self.about if self.hub_off_s() is None else []  # a verdict 3 hours before the run's start made it 3 hours long
        firsts = [self.first[r] for r in good] + about[:1]
        lasts = [self.last[r] for r in good] + about[1:]
        if not firsts:
            return None
        return min(firsts), max(lasts)


def human_span(seconds: float) -> str:
    """A clock's disagreement as a person says it: '57 years', '3 hours', '2 days'."""
    s = abs(seconds)
    for unit, size in (("year", 365.25 * 86400), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if s >= size:
            n = round(s / size)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{s:.0f} s"


def clock_warnings(off: dict[int, float], hub_off_s: float | None = None, hub_blamed: bool = True, ranks=()) -> list[str]:
    """One line each, saying what to do, for the ranks off by about the same (a node's 8 ranks
    share its clock): "rank 1's clock is 57 years behind the hub's; its times are not used for
    the run's span; set its node's clock (NTP)". ``hub_off_s``: every rank (``ranks``) disagrees
    with the hub by that; ``hub_blamed``: on hosts enough to say the hub's is the clock off."""
    if hub_off_s is not None:
        how = f"{human_span(hub_off_s)} {'ahead of' if hub_off_s > 0 else 'behind'}"
        if hub_blamed:
            return [f"the hub's clock is {how} every rank's; the ranks' times are used for the run's span; set the hub's machine's clock (NTP)"]
        one = len(ranks) == 1
        who = f"{ranks_named(ranks)}'s clock" if one else f"the clocks of {ranks_named(ranks)}"
        whose = "the rank's" if one else "the ranks'"
        way = "ahead" if hub_off_s > 0 else "behind"
        return [
            f"{who} and the hub's disagree by {human_span(hub_off_s)} (the hub's is {way}); "
            f"{whose} times are used for the run's span; set the wrong clock (NTP)"
        ]
    groups: dict[str, list[int]] = {}
    for rank, off_s in sorted(off.items()):
        groups.setdefault(f"{human_span(off_s)} {'ahead of' if off_s > 0 else 'behind'}", []).append(rank)
    lines = []
    for how, ranks in groups.items():
        if len(ranks) == 1:
            lines.append(f"{ranks_named(ranks)}'s clock is {how} the hub's; its times are not used for the run's span; set its node's clock (NTP)")
        else:
            lines.append(f"{ranks_named(ranks)}: their clocks are {how} the hub's; their times are not used for the run's span; set their nodes' clocks (NTP)")
    return lines


__all__ = ["CLOCK_OFF_S", "RankClocks", "clock_warnings", "human_span", "is_hub_side"]
