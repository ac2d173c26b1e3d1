"""A headless launch in a terminal shows the line the job is drawing (a tqdm bar, redrawn with
carriage returns, ended by a newline only when its loop is done) above its own bar, as plain
torchrun would animate it: nothing showed until an epoch's end (review 315)."""

from __future__ import annotations

import io
import re
from pathlib import Path

from test_report import _LogSource

from pardash.telemetry.printer import ProgressPrinter, strip_controls

DATA = Path(__file__).resolve().parent / "data"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _screen_lines(out: io.StringIO, since: int = 0) -> list[str]:
    text = _ANSI.sub("", out.getvalue()[since:])
    return [line.strip() for line in re.split(r"[\r\n]", text) if line.strip()]


def test_the_bar_shows_the_jobs_unended_line_as_its_last_drawing(tmp_path):
    out = io.StringIO()
    output = tmp_path / "output.log"
    output.write_bytes(b"epoch 0 starts\n\repoch 0:  10%|# | 3/32\repoch 0:  53%|\x1b[32m#####\x1b[0m | 17/32")
    printer = ProgressPrinter(_LogSource(DATA / "real_ddp2.jsonl"), out=out, bar=True, tail=str(output))
    printer.update()
    lines = _screen_lines(out)
    assert "epoch 0 starts" in lines
    assert "epoch 0:  53%|##### | 17/32" in lines  # drawn now, its colours left out
    assert not any("10%" in line for line in lines)  # (an earlier drawing: not news)
    seen = len(out.getvalue())
    with open(output, "ab") as fh:
        fh.write(b"\repoch 0: 100%|##########| 32/32\n")
    printer.update(force=True)
    printer.close()
    later = _screen_lines(out, seen)
    assert "epoch 0: 100%|##########| 32/32" in later  # ended: printed as a line, as before
    assert not any("53%" in line for line in later)  # (no stale drawing left above the bar)


def test_a_headless_launch_to_a_file_prints_only_ended_lines(tmp_path):
    out = io.StringIO()
    output = tmp_path / "output.log"
    output.write_bytes(b"\repoch 0:  53%|##### | 17/32")
    printer = ProgressPrinter(_LogSource(DATA / "real_ddp2.jsonl"), out=out, bar=False, tail=str(output), every_s=3600.0)
    printer.update()
    assert "53%" not in out.getvalue()
    printer.close()


def test_strip_controls_leaves_the_text():
    assert strip_controls("\x1b[1;32mok\x1b[0m\x07 \x1b[2K50%") == "ok 50%"
