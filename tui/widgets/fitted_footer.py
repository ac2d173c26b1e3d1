"""The key bindings line, fitted to the terminal's width: the keys that matter most stay."""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Footer

try:
    from textual.widgets._footer import FooterKey
except ImportError:  # (a private module of Textual's, which a later release may move)
    FooterKey = None


class FittedFooter(Footer):
    """Textual's footer, which cuts what does not fit at its right edge: below 80 columns "q
    Quit" and "? Help" went first, and a replay's "Seek". This one gives way in steps until its
    keys fit: one space between keys instead of two, then no command palette key (ctrl+p still
    opens it), then the keys of :attr:`DROP_FIRST` in that order. Quit, help, back, pause and
    play always stay; ``?`` lists every key left out.
    """

    DROP_FIRST: ClassVar[tuple[str, ...]] = (
        "ends",  # a replay's < and >, then { and }: [ and ] move too, a step at a time
        "jump",
        "toggle_form",  # c: the grid picks cells or a heat map by itself
        "toggle_flagged",
        "move",  # n/p in a rank's detail (escape and another rank do the same)
        "output",
        "memory",
        "cycle_sort",
        "choose",
        "seek",
        "speed",
    )
    """Actions whose keys are left out, first to last, while the keys do not fit (the rightmost
    of an action's keys first)."""

    def __init__(self, *, compact: bool = False, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(compact=compact, id=id, classes=classes)
        self.prefer_compact = compact
        """The footer's own style when its keys fit either way."""
        self._fitted_width = 0

    def compose(self) -> ComposeResult:
        keys = list(super().compose())
        if not keys:
            return
        width = self.size.width or self.screen.size.width or self.app.size.width
        self._fitted_width = width
        try:
            kept, compact = fit_keys(keys, width, prefer_compact=self.prefer_compact, drop_first=self.DROP_FIRST)
        except (TypeError, AttributeError):  # a Textual whose footer keys are made otherwise:
            yield from keys  # its own footer, cut at the edge as it does, never no footer at all
            return
        if compact != self.compact:
            self.compact = compact  # before the keys mount: they take it from the footer then
        yield from kept

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._fitted_width:
            self._fitted_width = event.size.width
            self.call_after_refresh(self.recompose)


def _action_name(action: str) -> str:
    return action.partition("(")[0].rpartition(".")[2]


def key_width(key: FooterKey, *, compact: bool) -> int:
    """Columns a footer key takes in one style or the other (Textual's footer styles)."""
    desc = cell_len(key.description)
    n = cell_len(key.key_display)
    if desc:
        n += 1 + desc if compact else 3 + desc  # compact: "k desc"; else " k desc " (padding)
    if compact:
        n += 1  # the margin after each key
    if compact and key.has_class("-command-palette"):
        n += 1  # its rule on the left (not compact, the rule takes the place of its key's padding)
    return n


def fit_keys(
    keys: list[Widget], width: int, *, prefer_compact: bool, drop_first: tuple[str, ...]
) -> tuple[list[Widget], bool]:
    """The footer's keys that fit ``width`` columns, and whether in the compact style: as they
    are; else compact; else without the command palette's key; else without the keys of
    ``drop_first``'s actions, one at a time in its order. What is not a footer key stays."""

    def need(shown: list[Widget], compact: bool) -> int:
        # Less the last column: a key's padding or margin, blank, which the palette key's rule
        # (or the screen's edge) may cover.
        return sum(key_width(k, compact=compact) for k in shown if isinstance(k, FooterKey)) - 1

    if need(keys, prefer_compact) <= width:
        return keys, prefer_compact
    if need(keys, True) <= width:
        return keys, True
    shown = [k for k in keys if not k.has_class("-command-palette")]
    for name in drop_first:
        for k in reversed([k for k in shown if isinstance(k, FooterKey) and _action_name(k.action) == name]):
            if need(shown, True) <= width:
                return shown, True
            shown.remove(k)
    return shown, True
