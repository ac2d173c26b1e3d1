"""App-wide messages (as in toolong and posting: dataclass Messages in one place)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


@dataclass
class RunUpdated(Message, bubble=False):
    """The source applied new frames (or the replay moved): redraw what shows the run.

    Posted by the app to the active screen at most every poll (10 Hz). A newer one replaces one
    still queued, so a busy screen draws the latest state once instead of every stale one.
    """

    version: int
    """The app's state version (counts polls that changed something)."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunUpdated)


@dataclass
class RankHighlighted(Message):
    """The grid's cursor moved to a rank."""

    rank: int | None


@dataclass
class RankChosen(Message):
    """The user asked for a rank's details (Enter or double click on a cell)."""

    rank: int
