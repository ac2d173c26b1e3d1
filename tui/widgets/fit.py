"""Redraw a widget whose height follows its content (``height: auto``) without laying out the
whole screen, unless that height changed.

A reactive declared with ``layout=True`` reflows every widget on the screen each time it
changes; the header and the side panels change with every frame, so at 1024 ranks that reflow
was most of a frame's cost. Their height changes far less often (a new alert, a wrapped line).
"""

from __future__ import annotations

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
