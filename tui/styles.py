"""Theme-aware styles for widgets that draw Rich segments or text themselves."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget


class CachedStyles:
    """Mixin (before the Textual base) for a widget that draws with its component classes:
    :func:`component_fg` keeps each component's style until the widget's styles change.

    Textual drops its own style cache at every repaint, and working a component style out
    walks the DOM for the background; a header redrawn ten times a second spent most of its
    time there.
    """

    def notify_style_update(self) -> None:
        super().notify_style_update()  # type: ignore[misc]
        self.__dict__.pop("_component_fg", None)


def component_fg(widget: Widget, name: str) -> Style:
    """A component class's colour and text style, without a background of its own.

    The colour is taken from the full style, where Textual has blended any alpha (``$text-muted``
    is the foreground at partial opacity) over the widget's background; a partial style would
    drop the alpha and draw muted text at full strength. Leaving the background out lets the
    text sit on whatever is under it (a chart band, the cursor). Cached on widgets that are
    :class:`CachedStyles`.
    """
    cache: dict[str, Style] | None = None
    if isinstance(widget, CachedStyles):
        cache = widget.__dict__.setdefault("_component_fg", {})
        style = cache.get(name)
        if style is not None:
            return style
    full = widget.get_component_rich_style(name)
    style = Style(
        color=full.color,
        bold=full.bold,
        dim=full.dim,
        italic=full.italic,
        underline=full.underline,
        reverse=full.reverse,
        strike=full.strike,
    )
    if cache is not None:
        cache[name] = style
    return style


def component_bg(widget: Widget, name: str) -> Style:
    """A component class's background only (alpha blended), e.g. a cursor or a band."""
    return Style(bgcolor=widget.get_component_rich_style(name).bgcolor)


def text_strip(widget: Widget, text: Text, width: int) -> Strip:
    """One line of Rich text as a Strip over the widget's own style, cut or padded to ``width``.

    For one-line widgets redrawn every frame: going straight to segments skips Textual's
    conversion of the text to its own content, which was most of their cost.
    """
    base = widget.rich_style
    return Strip(text.render(widget.app.console, end="")).apply_style(base).crop_extend(0, width, base)
