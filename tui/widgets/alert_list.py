"""The alerts panel: what wants attention now, most severe first."""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from pardash.telemetry.summary import ranks_text

from ..format import tame
from ..alerts import Alert
from ..styles import CachedStyles, component_fg
from .fit import refresh_fitted

GLYPHS = {"exited": "×", "silent": "○", "stalled": "◆", "straggler": "▲", "not_sharding": "▣", "stopped": "■"}
LABELS = {
    "exited": "exited",
    "silent": "silent",
    "stalled": "stalled",
    "straggler": "stragglers",
    "not_sharding": "not sharding",
    "stopped": "stopped",
}
MAX_LINES = 8
"""Alert lines shown before alerts of one kind are folded into a line per kind."""


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


class AlertList(CachedStyles, Widget):
    """Stragglers with what they cost, stalled ranks with the phase they are stuck in, silent
    ranks, exited ranks with their code and ranks that do not shard. Calm when there are
    none; folded into one line per kind when there are many."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "alert-list--ok",
        "alert-list--exited",
        "alert-list--silent",
        "alert-list--stalled",
        "alert-list--straggler",
        "alert-list--not_sharding",
        "alert-list--stopped",
        "alert-list--stale",
    }

    DEFAULT_CSS = """
    AlertList {
        height: auto;
        max-height: 12;
        padding: 0 1;
    }
    AlertList > .alert-list--ok { color: $text-success; }
    AlertList > .alert-list--exited { color: $text-error; }
    AlertList > .alert-list--silent { color: $text-error; }
    AlertList > .alert-list--stalled { color: $text-error; }
    AlertList > .alert-list--straggler { color: $text-warning; }
    AlertList > .alert-list--not_sharding { color: $text-warning; }
    AlertList > .alert-list--stopped { color: $text-muted; }
    AlertList > .alert-list--stale { color: $text-warning; }
    """

    alerts: reactive[tuple[Alert, ...]] = reactive(())
    """Current alerts, most severe first."""
    calm: reactive[str] = reactive("waiting for ranks…")
    """What to say when there is no alert (waiting, healthy, finished; in the warning's colour
    when it starts with STALE_MARK: no word from the hub)."""

    def watch_alerts(self) -> None:
        refresh_fitted(self)

    def watch_calm(self) -> None:
        refresh_fitted(self)

    def _s(self, name: str) -> Style:
        return component_fg(self, f"alert-list--{name}")

    def render(self) -> Text:
        alerts = self.alerts
        if not alerts:
            return Text(self.calm, style=self._s("stale" if self.calm.startswith(STALE_MARK) else "ok"))
        lines: list[Text] = []
        if len(alerts) <= MAX_LINES:
            for a in alerts:
                lines.append(Text.assemble((GLYPHS[a.kind] + " ", self._s(a.kind)), tame(a.text)))
        else:
            # Too many to list: one line per kind (exited ranks: the first to exit on its own
            # line, the others by exit code), so the cause is never buried under its victims.
            groups: dict[tuple[str, object], list[Alert]] = {}
            for a in alerts:
                key: tuple[str, object] = (a.kind, "first" if a.first else a.code if a.kind == "exited" else None)
                groups.setdefault(key, []).append(a)
            for (kind, detail), items in groups.items():
                if len(items) <= 1 and len(groups) < MAX_LINES:
                    lines += [Text.assemble((GLYPHS[kind] + " ", self._s(kind)), tame(a.text)) for a in items]
                    continue
                ranks = sorted(a.rank for a in items)
                what = f"{len(items)} {LABELS[kind]}"
                if kind == "exited" and detail is not None:
                    what += f" with code {detail}"
                lines.append(Text.assemble((f"{GLYPHS[kind]} {what}: ", self._s(kind)), f"ranks {rank_list(ranks)}"))
        return Text("\n").join(lines)
