"""A headless launch in a terminal shows the line the job is drawing (a tqdm bar, redrawn with
carriage returns, ended by a newline only when its loop is done) above its own bar, as plain
torchrun would animate it: nothing showed until an epoch's end (review 315)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
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


RICH_JOB = """
import time
from rich.progress import Progress
with Progress(refresh_per_second=20) as p:
    train, val = p.add_task("train", total=10), p.add_task("val", total=10)
    for i in range(10):
        p.advance(train); p.advance(val)
        if i == 5:
            p.console.print("epoch 0 done: loss 0.123")
        time.sleep(0.06)
print("the script's last line")
"""


def test_the_jobs_lines_keep_their_colours_above_the_bar_but_never_move_the_cursor(tmp_path):
    # Review 332: rich's live display in a rank (TTY_COMPATIBLE, as a launch in a terminal gives
    # them) starts the lines printed during it with "erase the line, up one, erase": printed as
    # they came, each wiped the line above pardash's bar ("epoch 0 done" lost from the screen).
    output = tmp_path / "output.log"
    with open(output, "wb") as fh:
        subprocess.run([sys.executable, "-c", RICH_JOB], stdout=fh, stderr=subprocess.STDOUT, check=True, timeout=60,
                       env={**os.environ, "TTY_COMPATIBLE": "1", "COLUMNS": "100"})  # fmt: skip
    assert b"\x1b[1A\x1b[2Kepoch " in output.read_bytes()  # (what rich wrote, as under a launch)
    out = io.StringIO()
    printer = ProgressPrinter(_LogSource(DATA / "real_ddp2.jsonl"), out=out, bar=True, tail=str(output))
    printer.update(force=True)  # (the job's end: what its display still held, its last line)
    printer.close()
    written = out.getvalue()
    assert "epoch 0 done: loss 0.123" in _screen_lines(out) and "the script's last line" in _screen_lines(out)
    at = written.index("epoch ")
    assert not written[:at].endswith("\x1b[1A\x1b[2K"), repr(written[at - 40 : at])  # (the bar's own erase before it, no move up)
    assert re.search(r"done: loss \x1b\[[0-9;]*36m0\.123", written[at:]), repr(written[at : at + 80])  # (rich's colours kept)


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
