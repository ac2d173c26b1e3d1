"""The header's command (what the ranks run), the last piece of its second line: `make run`'s
was left out at 160 columns, where the log's whole path took its room (review 275)."""

from __future__ import annotations

import os

from textual.app import App
from tui_helpers import widget_text

from pardash.tui.widgets.run_header import RunHeader, RunSummary, command_forms

RUN = "20261206-215304-9478"


def _summary(command: str) -> RunSummary:
    return RunSummary(
        run_id=RUN, strategy="fsdp", world_size=2, step=1224, total_steps=3000, samples_per_s=1234.0, elapsed_s=36.0,
        time_left_s=53.0, status_counts=(("running", 2),), lost=0, rejected=0, dropped=0, ingest_hz=1200.0,
        log_path=os.path.join(os.getcwd(), "runs", RUN, "telemetry.jsonl"), command=command, synced=True,
    )  # fmt: skip


async def _header(summary: RunSummary, width: int) -> str:
    class One(App):
        def compose(self):
            yield RunHeader()

    app = One()
    async with app.run_test(size=(width, 8)) as pilot:
        app.query_one(RunHeader).summary = summary
        await pilot.pause()
        return widget_text(app.query_one(RunHeader))


async def test_the_command_keeps_its_place_with_the_logs_shorter_path_where_the_header_is_no_taller():
    make_run = "-m pardash.trainer.train --strategy fsdp --steps 3000"
    text = await _header(_summary(make_run), 160)
    assert f"command {make_run}" in text and "log runs/…/telemetry.jsonl" in text, text
    assert len(text.strip().splitlines()) == 2, text
    # Wide enough for both whole: the log's whole path.
    text = await _header(_summary(make_run), 220)
    assert f"command {make_run}" in text and f"log runs/{RUN}/telemetry.jsonl" in text, text
    # A long command: the script, its arguments as "…".
    long = "train.py " + " ".join(f"--flag-{i} {i}" for i in range(12))
    text = await _header(_summary(long), 160)
    assert "command train.py …" in text and len(text.strip().splitlines()) == 2, text
    # At 80 columns the header is no taller for it: left out, as before.
    assert "command" not in await _header(_summary(make_run), 80)


def test_the_commands_short_form_is_its_script_or_module():
    assert command_forms("train.py --lr 3") == ["train.py --lr 3", "train.py …"]
    assert command_forms("-m pkg.train --lr 3") == ["-m pkg.train --lr 3", "-m pkg.train …"]
    assert command_forms("train.py") == ["train.py"]
