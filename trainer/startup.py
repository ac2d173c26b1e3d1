"""A rank's start-up: torch imported with the cyclic garbage collector off, and everything the
imports made frozen (``gc.freeze``) before the collector comes back on.

Importing torch makes a few hundred thousand objects (modules, classes, functions, their
dicts) that live as long as the process. With the collector on, each full collection during
the rest of the imports traversed all of them again: ``import torch, torch._dynamo`` (which
every ``torch.optim`` optimizer imports) took 5.2 CPU-s here with it on, 4.0 with torch's
imports frozen and 3.7 with both done this way (median of 6 each, 2-core VM). Frozen, they are
also left out of every collection while the rank trains. What is frozen stays until the process
ends, which these would anyway; a cycle of garbage the imports left is never freed.

Torch-free: the rank entry points (``pardash.trainer.train``, ``.autorun`` and ``.torchrun``)
call it before their first torch import.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def quiet() -> bool:
    """Turn the collector off for the imports that follow; returns whether it was on (for
    :func:`settle`)."""
    was_on = gc.isenabled()
    gc.disable()
    return was_on


def settle(was_on: bool) -> None:
    """Freeze every object made so far and turn the collector back on if it was."""
    gc.freeze()
    if was_on:
        gc.enable()


@contextmanager
def imports() -> Iterator[None]:
    """The block's imports with the collector off, what they made frozen after."""
    was_on = quiet()
    try:
        yield
    finally:
        settle(was_on)
