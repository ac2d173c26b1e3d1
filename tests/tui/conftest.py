"""TUI test fixtures: a steady cursor (snapshots must not depend on blink timing)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_cursor_blink(monkeypatch):
    """A blinking cursor (the command palette's input) would make snapshots flaky."""
    from textual.widgets import Input, TextArea

    monkeypatch.setattr(Input, "cursor_blink", False)
    monkeypatch.setattr(TextArea, "cursor_blink", False)
