"""The alerts panel: what wants attention now, most severe first."""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from pardash.telemetry.summary import ranks_text

from ..format import tame
from ..alerts import Alert
from ..styles import CachedStyles, component_fg
from .fit import FittedWidth, refresh_fitted

GLYPHS = {
    "jobs_mixed": "⚠",
    "exited": "×",
    "silent": "○",
    "stalled": "◆",
    "waiting": "◇",
    "loss": "⊘",
    "memory": "↗",
    "straggler": "▲",
    "held_up": "◑",
    "not_sharding": "▣",
    "stopped": "▬",
    "input_bound": "◔",
}
"""Each kind's glyph, as the grid's (a stalled rank waiting for a hang's cause: ◇ waiting)."""
LABELS = {
    "jobs_mixed": "jobs mixed",
    "exited": "exited",
    "silent": "silent",
    "stalled": "stalled",
    "waiting": "waiting",
    "loss": "losses not finite",
    "memory": "ranks' memory growing",
    "straggler": "stragglers",
    "held_up": "holding the others up now and then",
    "not_sharding": "not sharding",
    "stopped": "stopped",
    "input_bound": "input-bound",
}
MAX_ROWS = 10
"""Screen rows the alerts take at most (the panel's max-height less its border): alerts wrap,
so a count of alerts said nothing of the rows they need."""
CHROME_ROWS = 2
"""Rows of the panel around its alerts: its border."""


STALE_MARK = "⚠"


def rank_list(ranks: list[int], limit: int = 6) -> str:
    """[0, 1, 2, 3, 4, 6, 7] -> '0-4, 6-7': runs as ranges, the first ``limit`` pieces shown and
    the ranks of the others counted."""
    pieces = ranks_text(ranks).split(", ")
    shown = ", ".join(pieces[:limit])
    if len(pieces) <= limit:
        return shown
    hidden = 0
    for piece in pieces[limit:]:
        lo, _, hi = piece.partition("-")
        hidden += int(hi) - int(lo) + 1 if hi else 1
    return f"{shown}, … (+{hidden})"


class AlertList(FittedWidth, CachedStyles, Widget):
    """Stragglers with what they cost, stalled ranks with the phase they are stuck in, silent
    ranks, exited ranks with their code, ranks whose memory grows (a leak) and ranks that do not
    shard. Calm when there are
    none; folded into one line per kind when there are many."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "alert-list--ok",
        "alert-list--jobs_mixed",
        "alert-list--exited",
        "alert-list--silent",
        "alert-list--stalled",
        "alert-list--waiting",
        "alert-list--loss",
        "alert-list--memory",
        "alert-list--straggler",
        "alert-list--held_up",
        "alert-list--not_sharding",
        "alert-list--stopped",
        "alert-list--input_bound",
        "alert-list--stale",
    }

    DEFAULT_CSS = """
    AlertList {
        height: auto;
        max-height: 12;  /* MAX_ROWS and the border */
        padding: 0 1;
    }
    AlertList > .alert-list--ok { color: $text-success; }
    AlertList > .alert-list--jobs_mixed { color: $text-warning; }
    AlertList > .alert-list--exited { color: $text-error; }
    AlertList > .alert-list--silent { color: $text-error; }
    AlertList > .alert-list--stalled { color: $text-error; }
    AlertList > .alert-list--waiting { color: $text-warning; }
    AlertList > .alert-list--loss { color: $text-error; }
    AlertList > .alert-list--memory { color: $text-error; }
    AlertList > .alert-list--straggler { color: $text-warning; }
    AlertList > .alert-list--held_up { color: $text-warning; }
    AlertList > .alert-list--not_sharding { color: $text-warning; }
    AlertList > .alert-list--stopped { color: $text-muted; }
    AlertList > .alert-list--input_bound { color: $text-warning; }
    AlertList > .alert-list--stale { color: $text-warning; }
    """

    alerts: reactive[tuple[Alert, ...]] = reactive(())
    """Current alerts, most severe first."""
    max_rows: reactive[int] = reactive(MAX_ROWS)
    """Screen rows the alerts may take: MAX_ROWS, or fewer where the panels around them leave
    fewer (the dashboard says so: a short or stacked side area)."""
    calm: reactive[str] = reactive("waiting for ranks…")
    """What to say when there is no alert (waiting, healthy, finished; in the warning's colour
    when it starts with STALE_MARK: no word from the hub)."""

    def watch_alerts(self) -> None:
        refresh_fitted(self)

    def watch_calm(self) -> None:
        refresh_fitted(self)

    def watch_max_rows(self, rows: int) -> None:
        # As a style too: a new style lays the panel out anew, where a refresh asking for a
        # layout while an earlier one was pending kept the height measured before (Textual
        # counts layouts asked for once until the widget has been laid out).
        self.styles.max_height = rows + CHROME_ROWS
        refresh_fitted(self)

    def _s(self, name: str) -> Style:
        return component_fg(self, f"alert-list--{name}")

    def render(self) -> Text:
        width = self._fitted_width = self._measuring or self.content_region.width or 40
        if not self.alerts:
            calm = Text(self.calm, style=self._s("stale" if self.calm.startswith(STALE_MARK) else "ok"))
            width, console = max(10, width), self.app.console
            if len(calm.wrap(console, width)) <= self.max_rows:
                return calm
            return Text("\n").join(_cut(calm, console, width, self.max_rows))  # (in the rows the panel has)
        return Text("\n").join(self.fitted(width, self.max_rows))

    def _line(self, glyph_kind: str, head: str, rest: str = "") -> Text:
        return Text.assemble((head, self._s(glyph_kind)), tame(rest))

    def fitted(self, width: int, rows: int) -> list[Text]:
        """The alerts as lines of at most ``width`` cells, ``rows`` of them at most: each alert
        whole while the rest still get a line each, else cut to the rows left (ending in "…");
        too many alerts for a line each: one line per kind, the cause never folded in; still
        too many: the first ones and "+N more" for the rest (the event log holds them all)."""
        console = self.app.console
        width, rows = max(10, width), max(1, rows)
        alerts = self.alerts
        if len(alerts) > rows:  # (folded before any alert's line is made: 1024 exits took 5 ms a fit)
            items = self._folded()
        else:
            items = [(self._line(shown_kind(a), GLYPHS[shown_kind(a)] + " ", a.text), (a,)) for a in alerts]
        hidden: list[Alert] = []
        if len(items) > rows == 1:
            # One row (a short or stacked side area): the first alert's own line, the cause,
            # with how many more where it leaves room; "+2 more ranks exited" alone named no
            # rank, under a grid that showed them all exited.
            return [self._first_of(items, width)]
        if len(items) > rows:
            hidden = [a for _, said in items[rows - 1 :] for a in said]
            items = items[: rows - 1]
        out: list[Text] = []
        left = rows - (1 if hidden else 0)
        for k, (item, _) in enumerate(items):
            wrapped = _cut(item, console, width, left - (len(items) - k - 1))  # the alerts after it get a line each
            out.extend(wrapped)
            left -= len(wrapped)
        if hidden:
            out.append(_ellipsized(Text(more_text(hidden, width), style=self._s("stopped")), width))
        return out

    def _first_of(self, items: list[tuple[Text, list[Alert]]], width: int) -> Text:
        """The first item on one line of ``width`` cells, "+N more" after it where the item
        keeps most of the line (it is cut with "…" first)."""
        head = _rstripped(items[0][0])
        n = sum(len(said) for _, said in items[1:])
        more = Text(f" +{n} more", style=self._s("stopped"))
        room = width - more.cell_len
        if head.cell_len <= room:
            return head + more
        if room >= max(20, width * 2 // 3):
            return _ellipsized(head, room) + more
        return _ellipsized(head, width)

    def _folded(self) -> list[tuple[Text, list[Alert]]]:
        """One line per kind (exited ranks: the first to exit on its own line, the others by
        exit code), so the cause is never buried under its victims; a kind one rank has is
        that rank's own line. Each line with the alerts it says."""
        groups: dict[tuple[str, object], list[Alert]] = {}
        for a in self.alerts:
            kind = shown_kind(a)
            key: tuple[str, object] = (
                kind,
                "first" if a.first else a.code if kind == "exited" else a.waiting_for if kind == "waiting" else None,
            )
            groups.setdefault(key, []).append(a)
        lines: list[tuple[Text, list[Alert]]] = []
        for (kind, detail), items in groups.items():
            if len(items) == 1:  # its own line ("1 exited with code first: ranks 0" said the cause)
                lines.append((self._line(kind, GLYPHS[kind] + " ", items[0].text), items))
                continue
            ranks = sorted(a.rank for a in items)
            what = f"{len(items)} {LABELS[kind]}"
            if detail == "first":  # (ranks a hang waited for, stopped as it hung)
                what += ", likely the cause"
            elif kind == "exited" and detail is not None:
                what += f" with code {detail}"
            elif kind == "waiting":
                what += f" for {detail}"
            lines.append((self._line(kind, f"{GLYPHS[kind]} {what}: ", f"ranks {rank_list(ranks)}"), items))
        return lines


SAID = {
    "jobs_mixed": ("of two jobs", "of two jobs"),
    "exited": ("exited", "exited"),
    "silent": ("silent", "silent"),
    "stalled": ("stalled", "stalled"),
    "waiting": ("waiting", "waiting"),
    "loss": ("with a loss not finite", "with a loss not finite"),
    "memory": ("with memory growing", "with memory growing"),
    "straggler": ("straggler", "stragglers"),
    "held_up": ("holding the others up", "holding the others up"),
    "not_sharding": ("not sharding", "not sharding"),
    "stopped": ("stopped", "stopped"),
    "input_bound": ("input-bound", "input-bound"),
}
"""Each kind of alert after a count of ranks (one, many): '4 stalled', '2 stragglers'."""
MORE_NOTE = " (the events list them)"


def more_text(hidden: list[Alert], width: int) -> str:
    """'+19 more ranks exited', '+14 more ranks: 10 exited, 4 stalled', '+22 more alerts' (a
    rank has two): how many ranks or alerts the panel leaves out, not how many of its folded
    lines ("+2 more" said 14 ranks); what kinds, and the events note, where they fit."""
    # (an alert of several ranks alike, a loss gone NaN on seven at once, counts them all: it
    # was one, "+1 more rank" of seven)
    n = sum(len(a.ranks) or 1 for a in hidden)
    counts: dict[str, int] = {}
    for a in hidden:
        kind = shown_kind(a)
        counts[kind] = counts.get(kind, 0) + (len(a.ranks) or 1)
    if len(counts) == 1:
        (kind,) = counts
        said = SAID[kind][n != 1]
        text = f"+{n} more {said}" if kind == "straggler" else f"+{n} more rank{'s' if n != 1 else ''} {said}"
    elif len({r for a in hidden for r in (a.ranks or (a.rank,))}) == n:  # an alert a rank: counted as ranks
        text = f"+{n} more ranks"
        kinds = f"{text}: " + ", ".join(f"{k} {SAID[kind][k != 1]}" for kind, k in counts.items())
        if cell_len(kinds) <= width:
            text = kinds
    else:
        text = f"+{len(hidden)} more alerts"
    return text + MORE_NOTE if cell_len(text + MORE_NOTE) <= width else text


def shown_kind(alert: Alert) -> str:
    """The kind an alert is shown as: a stalled rank waiting for a hang's cause as "waiting"
    (◇, in the grid's colour for it), not as one more stalled rank (◆)."""
    return "waiting" if alert.waiting_for else alert.kind


def _cut(text: Text, console, width: int, rows: int) -> list[Text]:
    """``text`` wrapped to ``width``, its lines past ``rows`` cut with "…" on the last one."""
    wrapped = [_rstripped(line) for line in text.wrap(console, width)]
    if len(wrapped) > rows:
        cut = Text(" ").join(wrapped[rows - 1 :]) if rows > 1 else text
        wrapped = [*wrapped[: rows - 1], _ellipsized(cut, width)]
    return wrapped


def _rstripped(line: Text) -> Text:
    """A wrapped line without the space it broke at."""
    line = line.copy()
    line.rstrip()
    return line


def _ellipsized(text: Text, width: int) -> Text:
    """``text`` on one line of ``width`` cells, cut with "…" when longer."""
    line = text.copy()
    line.truncate(width, overflow="ellipsis")
    return line
