"""Short, fixed-width renderings of the numbers the dashboard shows.

Every function takes ``None`` (or NaN) for "not known" and answers a dash, so a rank that has not
reported a figure yet reads as missing rather than as zero.
"""

from __future__ import annotations

import math
import re

from pardash.telemetry.summary import span_text

DASH = "–"


def _missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and not math.isfinite(x))


def fmt_bytes(n: float | None, *, short: bool = False) -> str:
    """Bytes in binary units: ``1.21 GiB``; ``short``, at most six characters for a column:
    ``1.21Gi``, ``830Ki``, ``512B`` (a bare ``1.21G`` read as decimal, or not as bytes, beside
    the ``GiB`` everywhere else)."""
    if _missing(n):
        return DASH
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            break
        n /= 1024
    if unit == "B":
        text = f"{n:.0f}"
    elif n >= 100:
        text = f"{n:.0f}"
    elif n >= 10:
        text = f"{n:.1f}"
    else:
        text = f"{n:.2f}"
    if short:
        return f"{sign}{text}{unit[:2] if unit != 'B' else unit}"
    return f"{sign}{text} {unit}"


def fmt_step_time(seconds: float | None) -> str:
    """A step or phase time: ``812µs``, ``125ms``, ``1.25s``, ``2m05s``."""
    if _missing(seconds):
        return DASH
    s = float(seconds)
    # The unit is chosen on the value as it will be rounded: 0.09996 s is "100ms", not
    # "100.0ms" (a character more than the column), and 0.0009996 s "1.0ms", not "1000µs".
    if s < 999.5e-6:
        return f"{s * 1e6:.0f}µs"
    if s < 0.09995:
        return f"{s * 1e3:.1f}ms"
    if s < 0.9995:
        return f"{s * 1e3:.0f}ms"
    if s < 59.995:
        return f"{s:.2f}s"
    return fmt_duration(s)


def fmt_duration(seconds: float | None) -> str:
    """A span of run time: ``42s``, ``3m05s``, ``1h02m``, ``2d03h``."""
    return DASH if _missing(seconds) else span_text(seconds)


def fmt_clock(seconds: float | None) -> str:
    """Run time as a clock for the event log: ``00:42``, ``12:05``, ``1:02:05``; before the
    run's 00:00 (the hub's start, seconds before its ranks' first word), ``-0:07``: as wide as
    the times after it under ten minutes, so the event log's first line lines up with the rest."""
    if _missing(seconds):
        return "--:--"
    s = int(seconds)  # (toward zero: a hair before 00:00 is 00:00)
    if s < 0:
        after = fmt_clock(-s)
        return "-" + (after[1:] if after.startswith("0") else after)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def fmt_loss(loss: float | None) -> str:
    """A loss in at most 7 characters: ``2.3141``, ``12.052``, ``1.2e+04``."""
    if _missing(loss):
        return DASH
    x = float(loss)
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    a = abs(x)
    if a != 0 and (a >= 1e4 or a < 1e-3):
        return f"{x:.1e}"
    if a >= 100:
        return f"{x:.1f}"
    if a >= 10:
        return f"{x:.3f}"
    return f"{x:.4f}"


def fmt_deviation(fraction: float | None) -> str:
    """How far a value sits from the others' median: ``+31%``, ``-4%``, and from twice it,
    the ratio, ``3.2×`` (without a sign: "+3.2×" read as 3.2 times *more*)."""
    if _missing(fraction):
        return DASH
    f = float(fraction)
    # At most 5 characters, as "-100%": the grid's column is that wide (+10.2× cut off the
    # column after it).
    times = f + 1
    if times >= 999.5:
        return ">999×"
    if times >= 9.95:
        return f"{times:.0f}×"
    if f >= 0.995:
        return f"{times:.1f}×"
    pct = round(f * 100)
    return "0%" if pct == 0 else f"{pct:+d}%"


def fmt_rate(per_s: float | None) -> str:
    """A throughput: ``812``, ``12.3k``, ``1.20M``."""
    if _missing(per_s):
        return DASH
    x = float(per_s)
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e4:
        return f"{x / 1e3:.1f}k"
    if x >= 100 or x == 0:
        return f"{x:.0f}"
    return f"{x:.1f}"


def fmt_params(n: int) -> str:
    """A parameter count: ``124.4M``, ``6.74B``."""
    if n >= 1e9:
        return f"{n / 1e9:.2f}B"
    if n >= 1e6:
        return f"{n / 1e6:.1f}M"
    if n >= 1e3:
        return f"{n / 1e3:.1f}k"
    return str(n)


def fmt_step_no(n: int | None) -> str:
    """A step number in at most six characters: ``123456``, ``1.23M``."""
    if n is None:
        return DASH
    if n < 1_000_000:
        return str(n)
    if n < 99_995_000:
        return f"{n / 1e6:.2f}M"
    return f"{n / 1e6:.0f}M" if n < 999_500_000 else f"{n / 1e9:.1f}B"


def fmt_count(n: int) -> str:
    """A big count with thin grouping: ``1,234,567``."""
    return f"{n:,}"


def fmt_ratio(x: float | None) -> str:
    """A saving ratio: ``4.0×``."""
    if _missing(x):
        return DASH
    return f"{x:.1f}×" if x < 100 else f"{x:.0f}×"


_WIDE_GLYPHS = re.compile("[\U0001F000-\U0001FAFF\uFE0F\u200D]")
"""Emoji (and the selectors and joiners that make them): terminals and Rich disagree on their
width, and a panel's border moves (an error ending in "GLHF! 🏖️", gloo's)."""


def tame(text: str) -> str:
    """``text`` without the glyphs whose width terminals disagree on."""
    return _WIDE_GLYPHS.sub("", text) if not text.isascii() else text
