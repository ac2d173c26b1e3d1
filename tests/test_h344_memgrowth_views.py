"""A rank said growing in memory (memgrowth) reads so in every view: the headless event line and
the launch's last line, the TUI's alerts (below stalls, above stragglers), `pardash report`'s
summary, memory section and report.json (review 340: "✓ no alerts: every rank is healthy" and
"ranks hold 1.00x what ddp x2 should" of a rank whose RSS tripled)."""

from __future__ import annotations

import json

import msgspec

from pardash.telemetry import schema
from pardash.telemetry.analysis import Detector
from pardash.telemetry.state import RunState

MIB = 1 << 20


def write_leak_log(path, steps: int = 500, stop_at: int | None = None, exits: bool = True) -> RunState:
    """A 2-rank DDP run's log whose rank 1 keeps 1.6 MiB a step (to ``stop_at``), with the
    verdicts a hub's detector draws as it goes; the state as a hub left it."""
    enc = msgspec.json.Encoder()
    st, det = RunState(), Detector()
    t0 = 1_800_000_000.0
    with open(path, "wb") as f:
        def put(m, t):
            f.write(enc.encode(m) + b"\n")
            st.apply(m, t)
        for r in range(2):
            put(schema.Hello(rank=r, run="leak", seq=0, t=t0, world_size=2, pid=10 + r, strategy="ddp"), t0)
        for s in range(1, steps + 1):
            t = t0 + s * 0.15
            for r in range(2):
                grown = 1.6 * MIB * min(s, stop_at or s) if r == 1 else 0
                mem = schema.Mem(params_bytes=4 * MIB, grads_bytes=4 * MIB, optim_bytes=8 * MIB, params_full_bytes=4 * MIB,
                                 grads_full_bytes=4 * MIB, optim_full_bytes=8 * MIB, rss_bytes=int(360 * MIB + grown + (s % 7) * MIB))
                m = schema.Step(rank=r, run="leak", seq=s, t=t, step=s, loss=2.0, samples=128, step_s=0.15, self_s=0.01, mem=mem)
                put(m, t)
                det.stragglers.observe(m)
            for v in det.update(st, t):
                put(msgspec.structs.replace(v, run="leak", t=t), t)
        if exits:
            t = t0 + (steps + 1) * 0.15
            for r in range(2):
                put(schema.Event(rank=r, run="leak", seq=steps + 1, t=t, name="exit", code=0), t)
    return st


def test_the_event_line_and_the_launch_s_last_line_say_the_growing_rank(tmp_path):
    from pardash.telemetry.printer import event_line, outcome_line

    st = write_leak_log(tmp_path / "leak.jsonl")
    said = [m for m in st.events if isinstance(m, schema.Verdict) and m.verdict.startswith("memory")]
    assert [event_line(v) for v in said] == [f"[memory_growing] {said[0].message}"]
    assert said[0].message.startswith("rank 1's memory grows 1.6 MiB a step"), said[0].message
    last = outcome_line(st, 0, {}, str(tmp_path / "leak.jsonl"))
    assert "; rank 1's memory grew 1.6 MiB a step to the end (a leak? `pardash report` says more)" in last, last


def test_growth_that_stopped_is_not_said_at_the_end(tmp_path):
    from pardash.telemetry.printer import outcome_line

    st = write_leak_log(tmp_path / "leak.jsonl", steps=900, stop_at=400)
    kinds = [m.verdict for m in st.events if isinstance(m, schema.Verdict) and m.verdict.startswith("memory")]
    assert kinds == ["memory_growing", "memory_steady"]
    assert "memory grew" not in outcome_line(st, 0, {}, "log")


def test_the_alerts_say_a_growing_rank_below_stalls_above_stragglers_and_not_once_steady(tmp_path):
    from pardash.tui.alerts import SEVERITY, run_alerts

    st = write_leak_log(tmp_path / "leak.jsonl", exits=False)
    alerts = run_alerts(st)
    assert [(a.kind, a.rank) for a in alerts] == [("memory", 1)], alerts
    assert alerts[0].text.startswith("rank 1's memory grows 1.6 MiB a step"), alerts[0].text
    assert SEVERITY["stalled"] < SEVERITY["memory"] < SEVERITY["straggler"]
    ended = write_leak_log(tmp_path / "ended.jsonl")
    (a,) = run_alerts(ended)
    assert a.text.startswith("rank 1's memory grew 1.6 MiB a step to its end ("), a.text  # (finished since)
    steady = write_leak_log(tmp_path / "steady.jsonl", steps=900, stop_at=400, exits=False)
    assert run_alerts(steady) == []


def test_the_report_says_the_growth_in_its_summary_memory_section_and_json(tmp_path):
    from pardash.telemetry.report import build_report
    from pardash.telemetry.report_render import render_markdown, render_text

    path = tmp_path / "leak.jsonl"
    write_leak_log(path)
    rep = build_report(str(path))
    (g,) = rep["memory"]["growing"]
    assert (g["rank"], g["series"], g["steady_step"], g["from_step"], g["to_step"]) == (1, "rss", None, 21, 500)
    assert abs(g["per_step_bytes"] - 1.6 * MIB) < 0.05 * MIB, g
    json.dumps(rep)  # (report.json)
    text = render_text(rep)
    assert "memory growing     rank 1: " in text and "1.6 MiB a step, to the end (a leak? see memory below)" in text, text
    assert "rank 1's memory grew 1.6 MiB a step (" in text and "at step 21 -> " in text and ", to the end: tensors kept across steps?" in text
    # The memory verdict says what its ratio counts: model state, not the processes' memory.
    assert "ranks hold 1.00x what ddp x2 should (its state unsharded), counting model state only" in text
    assert "- rank 1's memory grew 1.6 MiB a step" in render_markdown(rep)


def test_a_report_of_growth_that_stopped_says_where(tmp_path):
    from pardash.telemetry.report import build_report
    from pardash.telemetry.report_render import growth_lines

    path = tmp_path / "leak.jsonl"
    write_leak_log(path, steps=900, stop_at=400)
    rep = build_report(str(path))
    (g,) = rep["memory"]["growing"]
    assert g["steady_step"] is not None and g["steady_step"] > 400 and g["to_step"] == g["steady_step"], g
    (line,) = growth_lines(rep)
    assert f", steady again at step {g['steady_step']}" in line, line
