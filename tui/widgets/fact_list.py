"""A panel of labelled figures (a rank's memory breakdown, its system samples)."""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ..styles import CachedStyles, component_fg
from .fit import refresh_fitted


Note = "str | tuple[str, ...]"
"""A row's note, or its forms, longest first."""


def fitted_note(note: str | tuple[str, ...], room: int) -> str:
    """The first form of ``note`` at most ``room`` cells long, else its shortest (cut)."""
    if isinstance(note, str):
        return note
    return next((form for form in note if len(form) <= room), note[-1] if note else "")


class FactList(CachedStyles, Widget):
    """Rows of ``label  value  note``; a row whose label is empty is a sub-heading. With the
    class ``-stale`` (figures no longer current: a gone rank's last) the values are greyed."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "fact-list--label",
        "fact-list--value",
        "fact-list--note",
        "fact-list--heading",
    }

    DEFAULT_CSS = """
    FactList {
        text-wrap: nowrap;
        text-overflow: ellipsis;
        height: auto;
        padding: 0 1;
    }
    FactList > .fact-list--label { color: $text-muted; }
    FactList > .fact-list--value { text-style: bold; }
    FactList > .fact-list--note { color: $text-muted; }
    FactList > .fact-list--heading { color: $text-secondary; }
    FactList.-stale > .fact-list--value { color: $text-muted; text-style: none; }
    """

    facts: reactive[tuple[tuple[str, str, Note], ...]] = reactive(())
    """(label, value, note) rows; a note given as several forms, longest first, shows the
    first that fits the panel (a narrow one: "2.0× less", not "of 415 KiB (2.0×…")."""
    empty: reactive[str] = reactive("nothing reported yet")
    """Shown when there are no rows."""

    def watch_facts(self) -> None:
        refresh_fitted(self)

    def _s(self, name: str) -> Style:
        return component_fg(self, f"fact-list--{name}")

    def render(self) -> Text:
        if not self.facts:
            return Text(self.empty, style=self._s("note"))
        label_w = max(len(label) for label, _, _ in self.facts)
        value_w = max(len(value) for label, value, _ in self.facts if label)
        room = (self.content_region.width or 80) - label_w - 2 - value_w - 2
        lines = []
        for label, value, note in self.facts:
            if not label:
                lines.append(Text(value, style=self._s("heading")))
                continue
            note = fitted_note(note, room)
            lines.append(
                Text.assemble(
                    (f"{label:<{label_w}}  ", self._s("label")),
                    (f"{value:>{value_w}}", self._s("value")),
                    (f"  {note}" if note else "", self._s("note")),
                    no_wrap=True,
                    overflow="ellipsis",
                )
            )
        out = Text("\n").join(lines)
        out.no_wrap = True
        out.overflow = "ellipsis"
        return out
