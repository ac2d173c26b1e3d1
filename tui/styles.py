"""Theme-aware styles for widgets that draw Rich segments or text themselves."""

from __future__ import annotations

from rich.style import Style
from textual.widget import Widget


def component_fg(widget: Widget, name: str) -> Style:
    """A component class's colour and text style, without a background of its own.

    The colour is taken from the full style, where Textual has blended any alpha (``$text-muted``
    is the foreground at partial opacity) over the widget's background; a partial style would
    drop the alpha and draw muted text at full strength. Leaving the background out lets the
    text sit on whatever is under it (a chart band, the cursor).
    """
    full = widget.get_component_rich_style(name)
    return Style(
        color=full.color,
        bold=full.bold,
        dim=full.dim,
        italic=full.italic,
        underline=full.underline,
        reverse=full.reverse,
        strike=full.strike,
    )


def component_bg(widget: Widget, name: str) -> Style:
    """A component class's background only (alpha blended), e.g. a cursor or a band."""
    return Style(bgcolor=widget.get_component_rich_style(name).bgcolor)
