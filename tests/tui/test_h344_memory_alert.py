"""The alerts panel says a rank whose memory grows (a leak) with its glyph, where it read "✓ no
alerts: every rank is healthy" (review 340)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_h344_memgrowth_views import write_leak_log  # noqa: E402


async def test_the_alerts_panel_says_the_growing_rank(tmp_path):
    from pardash.telemetry.client import ReplaySource
    from pardash.tui.app import make_app
    from pardash.tui.widgets.alert_list import AlertList

    path = tmp_path / "leak.jsonl"
    write_leak_log(path, exits=False)
    src = ReplaySource(str(path))
    src.seek(src.duration_s - src.frame_s)  # (its ranks still running)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        panel = app.screen.query_one(AlertList)
        lines = [line.plain for line in panel.fitted(100, 10)]
        assert lines and lines[0].startswith("↗ rank 1's memory grows 1.6 MiB a step ("), lines
        assert not any("healthy" in line for line in lines), lines
