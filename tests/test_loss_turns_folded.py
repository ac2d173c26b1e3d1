"""A loss that turns inf and is finite again the next step, again and again (a script that skips
the update of each poisoned batch, every 6 steps), sends two warnings a turn from each rank:
the log keeps them (the hub's state turns a rank's loss not finite and back by them), but the
report's warnings, a headless launch's lines and the TUI's event log each listed 40 of them. A
set of ranks' repeated turns are one line there; a single divergence or a spike reads as before."""

from __future__ import annotations

import io
import math
import sys
from pathlib import Path
from types import SimpleNamespace

from pardash.telemetry import schema
from pardash.telemetry.loss_turns import LOSS_TURNS_PRINTED, LOSS_TURNS_QUIET_S
from pardash.telemetry.printer import ProgressPrinter
from pardash.telemetry.report import MAX_WARNINGS, build_report, render_markdown, render_text
from pardash.telemetry.reporter import Reporter

DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))
import make_logs  # noqa: E402  (tests/data/make_logs.py: the logs' writer)
from test_printer_events import _Fed  # noqa: E402  (a source fed message by message)

EVERY = 6
TURNS = 19
"""Rank 0 and 1's loss inf at steps 7, 13, ... 115, finite again the step after each."""


def reporter_says(loss: float, step: int, bad_since: int | None = None) -> str:
    """What a rank's reporter says as its loss turns (Reporter._loss_turns), in its words."""
    said: list[str] = []
    fake = SimpleNamespace(_loss_bad=bad_since, event=lambda name, message, **kw: said.append(message))
    Reporter._loss_turns(fake, {"loss": loss}, loss, step)  # type: ignore[arg-type]
    assert len(said) == 1, said
    return said[0]


def turns_at(turns: int) -> list[int]:
    return [7 + EVERY * i for i in range(turns)]


def skipping_log(path: Path, *, turns: int = TURNS, others: int = 1) -> Path:
    """2 DDP ranks whose loss is inf at ``turns`` steps, finite again the step after each, and
    ``others`` warnings of their own (one text each, rank 0's, at steps 120 on)."""
    steps = 120 + others
    log = make_logs.Log("skip")
    for r in (0, 1):
        log.add(make_logs.hello(r, 2, strategy="ddp", host="vm", node=0, local=r, steps=steps, cpu=True), 0.1)
    bad = set(turns_at(turns))
    t = 1.0
    for s in range(1, steps + 1):
        t += 0.1
        for r in (0, 1):
            if s in bad:
                log.add(schema.Event(rank=r, name="warning", step=s, message=reporter_says(math.inf, s)), t)
            if s - 1 in bad:
                log.add(schema.Event(rank=r, name="warning", step=s, message=reporter_says(1.0, s, bad_since=s - 1)), t)
            if r == 0 and 120 <= s < 120 + others:
                log.add(schema.Event(rank=0, name="warning", step=s, message=f"loss scale fell at step {s}"), t)
            log.add(schema.Step(rank=r, step=s, loss=None if s in bad else 2.0 - 0.001 * s, samples=16, step_s=0.1), t)
    for r in (0, 1):
        log.add(schema.Event(rank=r, name="exit", code=0, step=steps), t + 0.2)
    log.write(path)
    return path


def warned(text: str) -> list[str]:
    lines = text.splitlines()
    return [line.strip() for line in lines[lines.index("warnings:") + 1:]]


def test_the_reports_warnings_say_a_loss_that_keeps_turning_in_one_line_where_it_first_did(tmp_path):
    rep = build_report(str(skipping_log(tmp_path / "skip.jsonl")))
    text = render_text(rep)
    assert warned(text) == [
        "ranks 0-1 at step 7: loss inf at 19 steps (every 6 steps, from step 7 to 115), finite again the step after each",
        "rank 0 at step 120: loss scale fell at step 120",
    ]
    # As the findings' loss line says it.
    assert "loss: not finite: ranks 0-1 inf at 19 steps (every 6 steps, from step 7 to 115), finite again the step after each" in text
    assert "- ranks 0-1 at step 7: loss inf at 19 steps" in render_markdown(rep)
    # The JSON keeps the first turn's words, and each turn.
    first = rep["warnings"][0]
    assert first["message"].startswith("loss is inf at step 7: diverged") and first["ranks"] == [0, 1]
    assert first["loss_turns"] == {"value": "inf", "turns": [[s, s + 1] for s in turns_at(TURNS)]}


def test_a_spike_or_two_read_as_before(tmp_path):
    rep = build_report(str(skipping_log(tmp_path / "two.jsonl", turns=2)))
    assert warned(render_text(rep)) == [
        "ranks 0-1 at step 7: loss is inf at step 7: diverged, or a spike (steps go on without a loss while it is not finite)",
        "ranks 0-1 at step 8: loss is finite again at step 8 (not finite from step 7)",
        "ranks 0-1 at step 13: loss is inf at step 13: diverged, or a spike (steps go on without a loss while it is not finite)",
        "ranks 0-1 at step 14: loss is finite again at step 14 (not finite from step 13)",
        "rank 0 at step 120: loss scale fell at step 120",
    ]
    assert not any("loss_turns" in w for w in rep["warnings"])


def test_the_turns_leave_the_runs_other_warnings_their_room(tmp_path):
    # 38 warnings of turns took 38 of the report's MAX_WARNINGS texts: the run's own warnings
    # after them were counted under "(more warnings than a report lists)".
    others = MAX_WARNINGS - 5
    rep = build_report(str(skipping_log(tmp_path / "many.jsonl", others=others)))
    said = warned(render_text(rep))
    assert len(said) == 1 + others and "(more warnings than a report lists)" not in "\n".join(said)
    assert said[0].startswith("ranks 0-1 at step 7: loss inf at 19 steps")


def fed_turns(src: _Fed, steps: list[int], t0: float) -> None:
    for s in steps:
        for r in (0, 1):
            src.take(schema.Event(rank=r, seq=2 * s, name="warning", step=s, message=reporter_says(math.inf, s)), t0 + s)
        for r in (0, 1):
            src.take(schema.Event(rank=r, seq=2 * s + 1, name="warning", step=s + 1,
                                  message=reporter_says(1.0, s + 1, bad_since=s)), t0 + s + 0.5)  # fmt: skip


def printed_warnings(printer: ProgressPrinter, out: io.StringIO) -> list[str]:
    printer.update(force=True)
    return [line for line in out.getvalue().splitlines() if line.startswith("[warning]")]


def test_a_headless_launch_prints_the_first_turns_then_says_later_ones_are_not_printed():
    src = _Fed()
    for r in (0, 1):
        src.take(schema.Hello(rank=r, world_size=2, strategy="ddp"), 1000.0)
    out = io.StringIO()
    printer = ProgressPrinter(src, out=out, bar=False, every_s=3600.0)
    fed_turns(src, turns_at(TURNS), 1000.0)
    lines = printed_warnings(printer, out)
    assert len(lines) == 2 * LOSS_TURNS_PRINTED + 1, lines
    assert lines[0] == ("[warning] ranks 0-1: loss is inf at step 7: diverged, or a spike (steps go on without a loss "
                        "while it is not finite)")  # fmt: skip
    assert lines[1] == "[warning] ranks 0-1: loss is finite again at step 8 (not finite from step 7)"
    assert lines[-1] == ("[warning] ranks 0-1: loss inf again at step 25, the 4th time: later turns are not printed each "
                         "(pardash report sums them up)")  # fmt: skip
    # Another warning is printed; a turn long after the last is said again, as a first.
    src.take(schema.Event(rank=0, seq=999, name="warning", step=130, message="loss scale fell to 1024"), 1200.0)
    late = 130 + int(LOSS_TURNS_QUIET_S)
    fed_turns(src, [late], 1000.0)
    more = printed_warnings(printer, out)[len(lines):]
    assert more == ["[warning] rank 0: loss scale fell to 1024",
                    f"[warning] ranks 0-1: loss is inf at step {late}: diverged, or a spike (steps go on without a loss while it "
                    "is not finite)",
                    f"[warning] ranks 0-1: loss is finite again at step {late + 1} (not finite from step {late})"]  # fmt: skip


def test_a_headless_launch_prints_a_spike_or_three_as_before():
    src = _Fed()
    for r in (0, 1):
        src.take(schema.Hello(rank=r, world_size=2, strategy="ddp"), 1000.0)
    out = io.StringIO()
    printer = ProgressPrinter(src, out=out, bar=False, every_s=3600.0)
    fed_turns(src, turns_at(LOSS_TURNS_PRINTED), 1000.0)
    lines = printed_warnings(printer, out)
    assert len(lines) == 2 * LOSS_TURNS_PRINTED and not any("later turns" in line for line in lines)


async def test_the_tuis_event_log_lists_the_first_turns_then_says_later_ones_are_not_listed():
    # Rank 0's warnings in one frame, rank 1's in the next (each its own line, as it comes);
    # epoch ends between the turns stay one line, the turns held not ending it.
    from textual.app import App

    from pardash.tui.widgets.event_log import EventLog

    class One(App):
        CSS = "EventLog { width: 150; height: 30; }"

        def compose(self):
            yield EventLog()

    app = One()
    async with app.run_test(size=(160, 34)) as pilot:
        src, log = _Fed(), app.query_one(EventLog)
        await pilot.pause()  # (its size known: lines not wrapped)
        for r in (0, 1):
            src.take(schema.Hello(rank=r, seq=0, world_size=2), 1000.0)
        for i, s in enumerate(turns_at(TURNS)):
            for r in (0, 1):
                src.take(schema.Event(rank=r, seq=3 * s, name="warning", step=s, message=reporter_says(math.inf, s)), 1000.0 + s)
                log.sync(src.state)
            for r in (0, 1):
                src.take(schema.Event(rank=r, seq=3 * s + 1, name="warning", step=s + 1,
                                      message=reporter_says(1.0, s + 1, bad_since=s)), 1000.5 + s)  # fmt: skip
                log.sync(src.state)
            if i >= LOSS_TURNS_PRINTED + 1:
                for r in (0, 1):
                    src.take(schema.Event(rank=r, seq=3 * s + 2, name="epoch_end", step=s + 2, message=f"epoch {i} ended"), 1001.0 + s)
                log.sync(src.state)
        await pilot.pause()
        rows = [line.text.rstrip() for line in log.lines]
        starts = [row for _, row in log._starts] + [len(rows)]  # (each entry's first row: wrapped)
        texts = [" ".join(rows[a:b])[6:] for a, b in zip(starts, starts[1:])]  # (less the clock)
        loss = [t for t in texts if "loss" in t]
        assert len(loss) == 2 * (2 * LOSS_TURNS_PRINTED + 1), texts
        assert loss[0] == ("rank 0 warning after step 7: loss is inf at step 7: diverged, or a spike (steps go on without a "
                           "loss while it is not finite)")  # fmt: skip
        assert loss[-2:] == [f"rank {r} warning after step 25: loss inf again at step 25, the 4th time: later turns are not "
                             "listed each (pardash report sums them up)" for r in (0, 1)]  # fmt: skip
        assert texts[-1].startswith(f"ranks 0-1 ended epochs {LOSS_TURNS_PRINTED + 1}-{TURNS - 1}")
        assert len(texts) == len(loss) + 1, texts
