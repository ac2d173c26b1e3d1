"""Theme-aware styles for widgets that draw Rich segments or text themselves."""

from __future__ import annotations

from rich.color import ColorSystem
from rich.style import Style
from rich.text import Text
from textual.color import Color, ColorParseError
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


SIXTEEN_COLOURS: dict[str, tuple[tuple[int, ...], str, str]] = {
    # variable: (the ANSI colours that keep its meaning, on a dark theme, on a light one)
    "error": ((1, 9), "#ff2020", "#aa0000"),
    "warning": ((3, 11), "#ffff33", "#a05000"),
    "success": ((2, 10), "#33ff33", "#008800"),
}
"""On a terminal of 16 colours, what stands in for a theme's error, warning and success colours
(and their ``text-`` forms) that would lose their hue there. Each downgrades to the bright ANSI
colour (dark) or the plain one (light), and stays in its hue at the partial strengths the
widgets draw with (``$text-error 70%``): #ff5555 went yellow (ANSI 3) at 70%."""


def sixteen_colour_variables(variables: dict[str, str], *, dark: bool) -> dict[str, str]:
    """The theme variables to replace where the terminal has 16 colours (Rich's STANDARD
    colour system: TERM=xterm, screen, linux): the error, warning and success colours whose
    nearest of the 16 is not of their hue. Textual's dark theme's ``$text-error``, #d17e92,
    came out grey (ANSI 7), so a stalled or exited rank was drawn grey beside the bright
    yellow of the ranks waiting for it. Truecolor and 256-colour terminals keep the theme's."""
    out: dict[str, str] = {}
    for name, (hues, on_dark, on_light) in SIXTEEN_COLOURS.items():
        for variable in (name, f"text-{name}"):
            value = variables.get(variable)
            if value is None or value.startswith("ansi_"):  # (an ANSI theme's own choice)
                continue
            try:
                number = Color.parse(value).rich_color.downgrade(ColorSystem.STANDARD).number
            except ColorParseError:
                continue
            if number not in hues:
                out[variable] = on_dark if dark else on_light
    return out
