"""TUI test fixtures: a steady cursor and a truecolor console (snapshots must depend on neither
blink timing nor the TERM of the shell)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_cursor_blink(monkeypatch):
    """A blinking cursor (the command palette's input) would make snapshots flaky."""
    from textual.widgets import Input, TextArea

    monkeypatch.setattr(Input, "cursor_blink", False)
    monkeypatch.setattr(TextArea, "cursor_blink", False)


@pytest.fixture(autouse=True)
def truecolor_console(monkeypatch):
    """The app's console as a truecolor terminal's, whatever TERM the tests run under: on a
    terminal of 16 colours (TERM=xterm, or none) the app swaps some theme colours
    (styles.sixteen_colour_variables), and the snapshots would depend on the shell they were
    taken in. A test of 16 colours sets ``textual.constants.COLOR_SYSTEM`` itself."""
    from textual import constants

    monkeypatch.setattr(constants, "COLOR_SYSTEM", "truecolor")
