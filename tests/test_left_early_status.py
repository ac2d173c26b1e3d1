"""A rank that left the job early (its script ended well, exit 0, while its peers trained on and
then failed in the collective it never joined) reads so everywhere: the TUI's grid and heat map,
the run header's counts, the rank detail, the headless progress line and the report's rank table
and exits. The alerts and the failure line named it the root cause while all of those said
"finished" (□) of it: two stories at once. A rank that finished with the others stays finished."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import pardash_env
from pardash.telemetry import schema
from pardash.telemetry import state as st
from pardash.telemetry.failures import failure_summary, left_early
from pardash.telemetry.logreader import load_log
from pardash.telemetry.printer import states_text
from pardash.telemetry.report import build_report
from pardash.telemetry.report_render import render_text

sys.path.insert(0, str(Path(__file__).resolve().parent / "tui"))  # (tui_helpers)

SCRIPT = Path(__file__).resolve().parent / "scripts" / "left_early.py"
RUN = "left"
T = 1.7e9
GLOO = ("RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:15272. "
        "This is typically caused by a remote worker crashing.")  # fmt: skip


def _steps(to: int, ranks=(0, 1), *, planned: int | None = None) -> list[schema.Message]:
    """Two DDP ranks' hellos (``planned``: the steps their config says) and steps 1-``to``."""
    config = {"steps": planned} if planned else {}
    msgs: list[schema.Message] = [schema.Hello(run=RUN, rank=r, world_size=2, strategy="ddp", pid=10 + r, seq=0, t=T, config=config)
                                  for r in ranks]  # fmt: skip
    for s in range(1, to + 1):
        msgs += [schema.Step(run=RUN, rank=r, step=s, seq=s, loss=1.0, samples=8, step_s=0.01, self_s=0.002, t=T + s * 0.01) for r in ranks]
    return msgs


def _left(at: int = 20) -> list[schema.Message]:
    """Rank 1's loop breaks after step ``at`` (exit 0); rank 0's next all-reduce fails on the
    closed connection (exit 1, at the step after)."""
    msgs = _steps(at)
    msgs += [
        schema.Event(run=RUN, rank=1, seq=at + 1, name="exit", code=0, step=at, t=T + 1),
        schema.Event(run=RUN, rank=0, seq=at + 1, name="error", step=at, message=GLOO, t=T + 1.05),
        schema.Event(run=RUN, rank=0, seq=at + 2, name="exit", code=1, step=at + 1, t=T + 1.06),
    ]  # fmt: skip
    return msgs


def _finished(to: int = 20) -> list[schema.Message]:
    """Both ranks end well after step ``to``, rank 1 a moment first."""
    return _steps(to) + [schema.Event(run=RUN, rank=r, seq=to + 1, name="exit", code=0, step=to, t=T + 1 + r * 0.01) for r in (1, 0)]


def _state(msgs: list[schema.Message]) -> st.RunState:
    state = st.RunState(run_id=RUN)
    for i, m in enumerate(msgs):
        m.hseq = i + 1
        state.apply(m, m.t)
    return state


def _log(tmp_path, msgs: list[schema.Message], name: str = "run.jsonl") -> str:
    path = tmp_path / name
    path.write_bytes(schema.encode_json_lines(msgs))
    return str(path)


def test_the_rank_that_left_reads_left_early_in_the_progress_line_and_the_grid_model():
    from pardash.tui.model import RowBuilder, run_totals

    state = _state(_left())
    assert left_early(state) == {1: 20}
    # It read "1 exited, 1 finished" under "pardash: ... rank 1 at step 20 had left the job".
    assert states_text(state) == "1 exited, 1 left early"
    rows = RowBuilder().update(state)
    assert [rows.row(r).status for r in (0, 1)] == [st.EXITED, st.LEFT_EARLY]
    assert rows.heat_key(1)[0] == st.LEFT_EARLY
    assert rows.row(0).exit_first is False  # (its exit came after the cause: not drawn as the root cause's)
    assert rows.totals.status_counts == {st.EXITED: 1, st.LEFT_EARLY: 1}
    assert run_totals(state).status_counts == {st.EXITED: 1, st.LEFT_EARLY: 1}
    # Its own status is still what it said (exit 0): only its peers tell it left early.
    assert state.ranks[1].status == st.FINISHED


def test_ranks_that_finished_together_stay_finished():
    state = _state(_finished())
    assert left_early(state) == {}
    assert states_text(state) == "2 finished"
    # The moment between rank 1's exit and rank 0's, rank 0 past its loop (its heartbeat says
    # "data": the next step never began): not left early either.
    msgs = _finished()[:-1]
    msgs.append(schema.Heartbeat(run=RUN, rank=0, seq=21, step=20, phase="data", t=T + 1.005))
    state = _state(msgs)
    assert left_early(state) == {} and states_text(state) == "1 finished, 1 running"
    # A run that planned 20 steps, rank 0 still ending: rank 1 did them all.
    msgs = _steps(20, planned=20) + [schema.Event(run=RUN, rank=1, seq=21, name="exit", code=0, step=20, t=T + 1)]
    assert left_early(_state(msgs)) == {}


def test_a_rank_that_left_reads_so_before_its_peer_fails():
    # NCCL, or gloo's timeout: the peer waits in the all-reduce for minutes before it fails.
    # Its heartbeat says it is inside the step after rank 1's last.
    msgs = _steps(20) + [schema.Event(run=RUN, rank=1, seq=21, name="exit", code=0, step=20, t=T + 1)]
    msgs.append(schema.Heartbeat(run=RUN, rank=0, seq=21, step=20, phase="sync", t=T + 2))
    state = _state(msgs)
    assert left_early(state) == {1: 20}
    assert states_text(state) == "1 left early, 1 running"
    # Or the run planned more steps than it did, and the peer is inside a step (its heartbeat
    # says so); not before its heartbeat says where it is.
    msgs = _steps(20, planned=200) + [schema.Event(run=RUN, rank=1, seq=21, name="exit", code=0, step=20, t=T + 1)]
    assert left_early(_state(msgs)) == {}
    msgs.append(schema.Heartbeat(run=RUN, rank=0, seq=21, step=19, phase="backward", t=T + 2))
    assert left_early(_state(msgs)) == {1: 20}
    # Or held between steps, stalled there (a metrics all-reduce, a checkpoint's barrier: its
    # heartbeat says "data"): it waits for the rank too (review 324).
    msgs = _steps(20, planned=200) + [schema.Event(run=RUN, rank=1, seq=21, name="exit", code=0, step=20, t=T + 1)]
    msgs.append(schema.Heartbeat(run=RUN, rank=0, seq=21, step=20, phase="data", t=T + 2))
    assert left_early(_state(msgs)) == {}
    msgs.append(schema.Verdict(run=RUN, rank=0, seq=-1, verdict="stalled", cause="data", step=20, t=T + 8))
    assert left_early(_state(msgs)) == {1: 20}


def test_ranks_that_all_ended_before_the_planned_steps_did_not_leave_early():
    # Both ranks ended their loop at step 20 of 200 planned, rank 0 a moment after rank 1 (its
    # heartbeat between steps), then failed on its way out: rank 1 read "left early", and the
    # root cause of rank 0's failure (review 322).
    msgs = _steps(20, planned=200) + [schema.Event(run=RUN, rank=1, seq=21, name="exit", code=0, step=20, t=T + 1)]
    msgs.append(schema.Heartbeat(run=RUN, rank=0, seq=21, step=20, phase="data", t=T + 1.005))
    state = _state(msgs)
    assert left_early(state) == {} and states_text(state) == "1 finished, 1 running"
    msgs.append(schema.Event(run=RUN, rank=0, seq=22, name="exit", code=1, step=20, t=T + 1.2))
    state = _state(msgs)
    assert left_early(state) == {} and states_text(state) == "1 exited, 1 finished"


def test_a_rank_whose_peers_train_on_far_past_it_did_not_leave_early():
    # Ranks sharing no collective (each its own work): rank 1 done at step 20, rank 0 training on
    # to step 60. It read "left early" (and Prometheus' left_early fired) on a job that then
    # ended well (review 323); a peer held by it goes no further than the step after its own.
    msgs = _steps(20) + [schema.Event(run=RUN, rank=1, seq=21, name="exit", code=0, step=20, t=T + 1)]
    msgs += [schema.Step(run=RUN, rank=0, step=s, seq=s, loss=1.0, samples=8, step_s=0.01, self_s=0.002, t=T + 1 + s * 0.01)
             for s in range(21, 61)]  # fmt: skip
    msgs.append(schema.Heartbeat(run=RUN, rank=0, seq=61, step=60, phase="forward", t=T + 2))
    state = _state(msgs)
    assert left_early(state) == {} and states_text(state) == "1 finished, 1 running"
    # One step past it, and held there: left early, as before.
    msgs = _steps(20) + [schema.Event(run=RUN, rank=1, seq=21, name="exit", code=0, step=20, t=T + 1)]
    msgs.append(schema.Step(run=RUN, rank=0, step=21, seq=21, loss=1.0, samples=8, step_s=0.01, self_s=0.002, t=T + 1.2))
    msgs.append(schema.Heartbeat(run=RUN, rank=0, seq=22, step=21, phase="sync", t=T + 2))
    assert left_early(_state(msgs)) == {1: 20}


def test_a_collective_timeout_after_a_rank_left_names_the_rank_that_left():
    # gloo's "Timed out waiting ...ms for recv" (no peer's closed connection): the grid said
    # "left early" of rank 1, the failure line named rank 0, which timed out (review 324).
    timeout = "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete"
    msgs = _steps(20, planned=200) + [schema.Event(run=RUN, rank=1, seq=21, name="exit", code=0, step=20, t=T + 1)]
    msgs.append(schema.Heartbeat(run=RUN, rank=0, seq=21, step=20, phase="backward", t=T + 2))
    msgs.append(schema.Event(run=RUN, rank=0, seq=22, name="error", step=20, message=timeout, t=T + 1800))
    msgs.append(schema.Event(run=RUN, rank=0, seq=23, name="exit", code=1, step=21, t=T + 1800.1))
    state = _state(msgs)
    line = failure_summary(state)["line"]
    assert line.startswith("rank 1 at step 20 left the job (exit code 0) while the others trained on"), line
    assert "; rank 0 exited with code 1 at step 21 after it: RuntimeError:" in line, line
    assert left_early(state) == {1: 20} and states_text(state) == "1 exited, 1 left early"


def test_the_reports_rank_table_and_exits_say_it_left_early(tmp_path):
    rep = build_report(_log(tmp_path, _left()))
    assert [r["status"] for r in rep["ranks"]] == ["exited", "left early"]
    assert rep["left_early"] == [{"rank": 1, "step": 20}]
    text = render_text(rep)
    rows = {int(m[1]): m[2] for m in re.finditer(r"^\s+(\d)\s+\S+\s+(\S+(?: early)?)\s", text, re.M)}
    assert rows == {0: "exited", 1: "left early"}, text
    exits = text.split("exits:")[1].split("root cause:")[0].strip().splitlines()
    assert exits[0].strip() == "rank 1 left the job at step 20 (exit code 0) while the others trained on - the root cause", exits
    assert "rank 0 exited with code 1 at step 21 - failed as a peer had left the job" in exits[1]
    rep = build_report(_log(tmp_path, _finished(), "done.jsonl"))
    assert [r["status"] for r in rep["ranks"]] == ["finished", "finished"] and "left_early" not in rep


async def test_the_tui_draws_and_counts_the_rank_that_left(tmp_path):
    from tui_helpers import grid_text, widget_text

    from pardash.telemetry.client import ReplaySource
    from pardash.tui.app import make_app
    from pardash.tui.widgets.run_header import RunHeader

    src = ReplaySource(_log(tmp_path, _left()))
    src.seek(src.duration_s)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        header = widget_text(app.screen.query_one(RunHeader))
        assert "◁ 1 left early" in header and "finished" not in header, header
        summary = app.screen.query_one(RunHeader).summary
        assert summary.ranks_ended and summary.ended_how() == "1 rank left early, 1 exited"  # ("job ended: ..." of a launch)
        cells = grid_text(app)
        assert re.search(r"\b1 left\b", cells) and "finished" not in cells, cells
        await pilot.press("c")  # the heat map: its own glyph, and the legend says it
        await pilot.pause()
        heat = grid_text(app).splitlines()
        assert "◁ left early" in heat[0], heat  # (the legend)
        assert [line.split() for line in heat if line.strip().startswith("0 ")] == [["0", "×◁"]], heat
        await pilot.press("c")
        await pilot.pause()
        grid = app.screen.query_one("RankGrid")
        grid.select(1)
        await pilot.press("enter")  # the rank's detail
        await pilot.pause()
        title = " ".join(str(w.render()) for w in app.screen.query("Static"))
        assert "left the job early at step 20 (exit code 0)" in title, title
        assert "finished" not in title, title


@pytest.mark.slow
def test_a_launch_whose_rank_leaves_its_loop_says_it_left_early(tmp_path):
    # The real thing: rank 1 breaks its loop after step 20 of 200, rank 0's all-reduce fails.
    log = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "2", "--headless", "--log", str(log), "--runs-dir",
         str(tmp_path / "runs"), "--", str(SCRIPT), "200", "20"],
        capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout[-2000:]
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if re.match(r"\[\s*[\d.]+s\] step", line)]
    assert lines and lines[-1].endswith("1 exited, 1 left early"), out[-3000:]
    assert "rank 1 at step 20 left the job (exit code 0)" in out, out[-3000:]
    state = st.RunState()
    for m in load_log(log)[0]:
        state.apply(m, m.t)
    assert left_early(state) == {1: 20}
    rep = build_report(str(log))
    assert [r["status"] for r in rep["ranks"]] == ["exited", "left early"]


async def test_the_event_log_says_the_rank_left_once_its_peers_show_it():
    # Its exit 0 comes first, a "finished" as far as anyone knows; once rank 0 fails in the
    # collective rank 1 never joined, its line says it left (it stayed a green "rank 1
    # finished (exit code 0)" beside the alert that named it the root cause).
    from textual.app import App

    from pardash.tui.widgets.event_log import EventLog

    msgs = _left()
    cut = next(i for i, m in enumerate(msgs) if isinstance(m, schema.Event) and m.rank == 1) + 1
    state = st.RunState(run_id=RUN)

    def feed(part: list[schema.Message]) -> None:
        for m in part:
            m.hseq = state.hseq + 1
            state.apply(m, m.t)

    class One(App):
        def compose(self):
            yield EventLog()

    app = One()
    async with app.run_test(size=(120, 20)) as pilot:
        log = app.query_one(EventLog)

        def text() -> str:
            return "\n".join("".join(seg.text for seg in line) for line in log.lines)

        feed(msgs[:cut])
        log.sync(state)
        await pilot.pause()
        assert "rank 1 finished (exit code 0)" in text(), text()  # (nothing says otherwise yet)
        feed(msgs[cut:])
        log.sync(state)
        await pilot.pause()
        assert "rank 1 left the job early (exit code 0) while the others trained on" in text(), text()
        assert "finished" not in text() and "rank 0 exited with code 1" in text(), text()
