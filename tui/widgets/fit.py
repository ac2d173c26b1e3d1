"""Redraw a widget whose height follows its content (``height: auto``) without laying out the
whole screen, unless that height changed.

A reactive declared with ``layout=True`` reflows every widget on the screen each time it
changes; the header and the side panels change with every frame, so at 1024 ranks that reflow
was most of a frame's cost. Their height changes far less often (a new alert, a wrapped line).
Also what such a widget's lines are fitted to a width with: ``FittedWidth`` (measure and redraw
at a new width) and ``fit_phrases`` (phrases kept whole on a line).
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from textual.geometry import Size
from textual.widget import Widget


def refresh_fitted(widget: Widget) -> None:
    """Repaint ``widget``; ask for a layout only when its content height is new."""
    widget.refresh()
    width = widget.content_region.width if widget.is_mounted else 0
    if not width:
        widget.refresh(layout=True)
        return
    # Renders once (Textual keeps the result for the paint that follows).
    height = widget.get_content_height(widget.size, widget.app.size, width)
    if height != getattr(widget, "_fitted_height", None):
        widget._fitted_height = height  # type: ignore[attr-defined]
        widget.refresh(layout=True)


class FittedWidth:
    """For a widget (``height: auto``) whose ``render()`` fits its lines to a width: render at
    ``self._measuring or self.content_region.width`` and set ``self._fitted_width`` to it."""

    _measuring = 0
    """The width a layout measures the widget's height at (its own is not set yet then)."""
    _fitted_width = 0
    """The width the lines were last fitted to."""

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        # The lines are fitted to a width: Textual keeps what render() gave until a refresh,
        # which measured at another width kept the old lines' height (a blank row at 200
        # columns, the alerts panel having been measured narrower before the side panels grew).
        if width != self._fitted_width:
            self._layout_cache.pop("_render.visual", None)  # type: ignore[attr-defined]
        self._measuring = width
        try:
            return super().get_content_height(container, viewport, width)  # type: ignore[misc]
        finally:
            self._measuring = 0

    def on_resize(self) -> None:
        if self.content_region.width != self._fitted_width:  # type: ignore[attr-defined]
            refresh_fitted(self)  # type: ignore[arg-type]


Piece = tuple[str, Any]
"""A run of text and its style (a Rich Style, or a Textual style string)."""
Phrase = tuple[Piece, ...]
"""Pieces that stay together on one line (a figure and its unit, a legend's glyph and label)."""


def fit_phrases(
    phrases: list[Phrase], width: int, *, indent: int = 0, gap: int = 1, space_style: Any = ""
) -> list[list[Piece]]:
    """``phrases`` as lines of at most ``width`` cells, ``gap`` spaces (in ``space_style``)
    between two on a line, each phrase whole: one that does not fit the rest of a line starts
    the next, after ``indent`` spaces (under a row's value) where it fits so. One wider than a
    line is left to the widget to wrap. (Rich and Textual break a line at any space, a
    no-break one too: phrases are kept whole here.)"""
    lines: list[list[Piece]] = [[]]
    used = 0
    for phrase in phrases:
        n = sum(cell_len(text) for text, _style in phrase)
        if used and used + gap + n > width:
            # (under the value where it fits there, else from the line's start)
            lead = indent if indent + n <= width else 0
            lines.append([(" " * lead, space_style)] if lead else [])
            used = lead
        elif used:
            lines[-1].append((" " * gap, space_style))
            used += gap
        lines[-1].extend(phrase)
        used += n
    return [joined(line) for line in lines]


def joined(pieces: list[Piece]) -> list[Piece]:
    """Neighbouring pieces of one style made one (a space between two phrases is no run of
    its own)."""
    out: list[Piece] = []
    for text, style in pieces:
        if out and out[-1][1] == style:
            out[-1] = (out[-1][0] + text, style)
        else:
            out.append((text, style))
    return out
