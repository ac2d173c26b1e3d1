"""A replay opened at its end (``--start end``) says the samples/s one played to its end says
(helper 235): the header's rate was the median of the viewer's last 9 updates, one a redraw,
and a replay opened at its end had made one (2,103 samples/s where one played there at 4x said
1,415, at 8x 1,543)."""

from __future__ import annotations

import pytest
from tui_helpers import DATA

from pardash.telemetry.client import ReplaySource
from pardash.tui.model import RowBuilder, run_totals


@pytest.mark.parametrize("name", ["straggler8.jsonl", "run4.jsonl", "killed2.jsonl"])
@pytest.mark.parametrize("redraw_s", [0.1, 0.35, 1.6])
def test_a_replay_opened_at_its_end_says_the_rate_one_played_there_says(name, redraw_s):
    played = ReplaySource(str(DATA / name))
    seen = RowBuilder()
    at = 0.0
    while at < played.duration_s:  # played on, the screen redrawn every redraw_s of the run
        at = min(at + redraw_s, played.duration_s)
        played.seek(at)
        seen.update(played.state)
    jumped = ReplaySource(str(DATA / name), start_s=float("inf"))
    once = RowBuilder().update(jumped.state)
    assert once.totals.samples_per_s is not None
    assert seen.totals.samples_per_s == pytest.approx(once.totals.samples_per_s, rel=1e-9)
    assert once.totals == run_totals(jumped.state)  # (the header's when it has no builder at hand)
