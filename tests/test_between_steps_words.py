"""A rank hung in its own code between steps (not in its DataLoader, which the zero-code hooks
time) is said so wherever its hang is named: the hub's live verdict said it (helper 311), but
the launch's last line, the report's stall lines and root cause, and the TUI's alert read "rank
1 stalled in data after step 40 (the likely cause of the hang)" (review 308). The log is a real
run's: tests/data/between_steps_hang.jsonl, review 308's crash.py MODE=hang (rank 1 sleeps after
its batch came at step 40; rank 0 times out in the all-reduce after 20 s)."""

from __future__ import annotations

from pathlib import Path

from pardash.telemetry.analysis import BETWEEN_STEPS_WORDS
from pardash.telemetry.failures import failure_summary
from pardash.telemetry.logreader import load_log
from pardash.telemetry.report import build_report
from pardash.telemetry.report_render import render_text
from pardash.telemetry.state import RunState
from pardash.tui.alerts import run_alerts

LOG = Path(__file__).parent / "data" / "between_steps_hang.jsonl"
SAID = f"rank 1 stalled {BETWEEN_STEPS_WORDS} after step 40"


def test_the_report_names_the_hang_between_steps_as_the_live_verdict_did():
    text = render_text(build_report(str(LOG)))
    stalls = [line.strip() for line in text.splitlines() if "stalled" in line and line.startswith("  ")]
    assert stalls[0].startswith(f"{SAID} for 20.3 s until it was stopped; likely the cause of the hang"), stalls
    assert "rank 0 stalled in sync after step 40" in stalls[1]
    root = next(line for line in text.splitlines() if line.startswith("root cause:"))
    assert root.startswith(f"root cause: {SAID} (the likely cause of the hang); rank 0 exited with code 1"), root


def test_the_failure_line_and_the_tui_alert_say_it_too():
    msgs, _ = load_log(LOG)
    st = RunState()
    for m in msgs:
        st.apply(m, m.t)
    assert failure_summary(st)["line"].startswith(f"{SAID} (the likely cause of the hang)")
    first = run_alerts(st)[0]
    assert first.rank == 1 and first.text.startswith(f"rank 1, the root cause, stalled {BETWEEN_STEPS_WORDS} after step 40"), first.text


def test_a_straggler_slow_in_its_own_work_between_steps_is_said_so_after_its_verdict():
    # The hub's verdict said "(its own work between steps, not its DataLoader)"; the launch's last
    # line and the report's stragglers read "rank 1 was a straggler (data)".
    from pardash.telemetry import schema
    from pardash.telemetry.stragglers import OWN_WORK
    from pardash.telemetry.summary import straggled_text, straggler_cause

    said = f"rank 1 is a straggler ({OWN_WORK}): the others wait 31 ms a step for it"
    assert straggler_cause("data", said) == "own work between steps"
    assert straggler_cause("data", "rank 1 is a straggler (data loading): ...") == "data"
    assert straggler_cause("compute", said) == "compute" and straggler_cause(None, None) == "cause unknown"
    st = RunState()
    msgs = [schema.Hello(run="s", rank=r, world_size=2, seq=0, t=1.0) for r in (0, 1)]
    msgs += [schema.Step(run="s", rank=r, step=s, seq=s, step_s=0.04, data_s=0.03 if r else 0.0, loader_s=0.0003, t=1.0 + s * 0.04)
             for s in range(1, 31) for r in (0, 1)]  # fmt: skip
    msgs.append(schema.Verdict(run="s", rank=1, seq=-1, verdict="straggler", cause="data", step=29, cost_s=0.031, message=said, t=2.3))
    for m in msgs:
        st.apply(m, m.t)
    assert straggled_text(st.ranks[1]) == "rank 1 was a straggler (own work between steps), found at step 29"


def test_a_ranks_detail_shows_the_part_of_its_data_time_in_its_dataloader():
    from pardash.telemetry import schema
    from pardash.tui.rank_facts import LOADER_LABEL, phases_of

    st = RunState()
    for r in (0, 1):
        st.apply(schema.Hello(run="s", rank=r, world_size=2, seq=0, t=1.0), 0.0)
        st.apply(schema.Step(run="s", rank=r, step=5, seq=1, step_s=0.04, data_s=0.03, loader_s=0.0003 * (r + 1), t=2.0), 0.0)
    rows = [(p.name, p.seconds, p.others_median_s) for p in phases_of(st, 1)]
    at = [name for name, _, _ in rows].index("data")
    assert rows[at + 1] == (LOADER_LABEL, 0.0006, 0.0003), rows
    st.apply(schema.Step(run="s", rank=1, step=6, seq=2, step_s=0.04, data_s=0.03, t=3.0), 0.0)  # (no DataLoader: no row)
    assert LOADER_LABEL not in [p.name for p in phases_of(st, 1)]


def test_the_report_says_whose_traceback_it_shows_where_that_rank_failed_after_the_cause():
    # Review 312: the hang's report showed rank 0's gloo timeout under "raised at" and "its
    # traceback" below a root cause line that named rank 1.
    text = render_text(build_report(str(LOG)))
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("raised at"))
    assert lines[at].startswith("raised at (rank 0, which failed after it): crash.py:30 in main"), lines[at]
    assert lines[at + 1].startswith("rank 0's traceback's end, it failed after the cause;"), lines[at + 1]
