"""How much of what a rank sends the hub will hold.

A message that fits the socket's size limit (schema.MAX_MESSAGE_BYTES) can still ask the hub to
hold far more than its size (a config nested a thousand deep, ten thousand custom metrics):
:func:`config_fits` and the ``MAX_*`` constants bound what one record may hold, so a flood of
hostile but well-formed records cannot grow the hub's memory without bound. The hub reads them
per message (a test may lower one); commands read them for their flags' bounds without loading
ZeroMQ (who may talk to a hub: :mod:`pardash.telemetry.security`).
"""

from __future__ import annotations

from typing import Any

MAX_RECORD_BYTES = 64 << 10
"""Largest step, system or heartbeat frame (a step with a few dozen custom metrics is < 2 KiB)."""
MAX_HELLO_BYTES = 256 << 10
"""Largest hello frame (it carries the run's config)."""
MAX_CONFIG_DEPTH = 16
"""Nesting depth of a hello's config (msgspec itself fails past Python's recursion limit)."""
MAX_CONFIG_ITEMS = 4096
"""Values in a hello's config, counted through every nested list and dict."""
MAX_CUSTOM = 256
"""Custom metrics in one step."""
MAX_TEXT = 16 << 10
"""An event's message is cut to this many characters (the log keeps the cut text)."""
MAX_TRACEBACK = 64 << 10
"""An event's traceback keeps its last this many characters (where the error is)."""
MAX_COUNT = 1 << 48
"""Largest seq or drop count a rank may report (9 years at a million messages a second); sums
over every rank then stay inside MessagePack's 64-bit integers."""
MAX_RANKS_TRACKED = 1 << 15
"""Ranks a hub tracks when it was not told the world size (each costs about 15 KiB)."""


def config_fits(obj: Any, max_depth: int = MAX_CONFIG_DEPTH, max_items: int = MAX_CONFIG_ITEMS) -> bool:
    """True when ``obj`` nests at most ``max_depth`` deep and holds at most ``max_items``
    values. Iterative, so a hostile depth cannot exhaust the stack here either."""
    todo: list[tuple[Any, int]] = [(obj, 0)]
    items = 0
    while todo:
        value, depth = todo.pop()
        items += 1
        if items > max_items or depth > max_depth:
            return False
        if isinstance(value, dict):
            todo.extend((v, depth + 1) for v in value.values())
            items += len(value)  # the keys
        elif isinstance(value, (list, tuple)):
            todo.extend((v, depth + 1) for v in value)
    return True


def cut_text(text: str, limit: int, *, keep_tail: bool = False) -> str:
    """``text`` cut to ``limit`` characters, saying so."""
    if len(text) <= limit:
        return text
    if keep_tail:
        return f"[{len(text) - limit} characters cut]\n" + text[-limit:]
    return text[:limit] + f" [{len(text) - limit} characters cut]"
