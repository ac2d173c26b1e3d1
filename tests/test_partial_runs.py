"""Runs that hold less than the job: another node's ranks whose keys the hub refused (the
report, node 0's last line, and node 1's progress and last lines), and a bench whose
strategies trained less than asked or ran fewer ranks than --nproc. Logs and states are built
here, small; the printer is fed as a hub's frames would feed it."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from pardash.telemetry import printer as printer_mod
from pardash.telemetry import schema
from pardash.telemetry.bench_table import render_bench_markdown, render_bench_text, strategy_rows
from pardash.telemetry.printer import ProgressPrinter, outcome_line
from pardash.telemetry.report import build_report, render_markdown, render_text
from pardash.telemetry.state import RunState
from pardash.trainer.bench import BenchConfig, plan, run_said
from pardash.trainer.config import TrainConfig

DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))
import make_logs  # noqa: E402  (tests/data/make_logs.py: the logs' writer)

REFUSED = ("it has CURVE keys and this viewer has none (--curve-dir DIR or PARDASH_CURVE_DIR: a copy of the hub's "
           "keys folder)")  # fmt: skip
"""Why a hub with keys refuses a viewer without (security.refusal's words)."""


def _node0_log(tmp_path: Path) -> Path:
    """Node 0's hub's log of a 2-node job whose node 1 had no keys: rank 0 alone trained in it,
    the hub refused 13 connection attempts without a key."""
    log = make_logs.Log("r")
    make_logs.hub_note(log, 0.0, "hub started (pid 1), ingest tcp://10.201.0.1:29600")
    make_logs.hub_note(log, 0.1, "refused so far: 1 rejected (no_key 1)")
    log.add(make_logs.hello(0, 2, strategy="ddp", host="node0", node=0, local=0, steps=20, cpu=True), 0.2)
    for s in range(1, 21):
        log.add(schema.Step(rank=0, step=s, loss=4.0 - 0.1 * s, samples=16, step_s=0.1, data_s=0.01, forward_s=0.03,
                            backward_s=0.04, optimizer_s=0.01, comm_s=0.01, self_s=0.04), 0.3 + 0.1 * s)  # fmt: skip
    log.add(schema.Event(rank=0, name="exit", code=0, step=20), 2.5)
    make_logs.hub_note(log, 2.6, "hub stopped: 25 messages, 0 lost, 13 rejected (no_key 13)")
    path = tmp_path / "telemetry.jsonl"
    log.write(path)
    return path


def test_a_report_says_which_ranks_of_the_world_never_reported_and_that_its_rates_are_theirs_alone(tmp_path):
    # "world size 2" over a rank table of rank 0 alone, its samples/s one rank's (half the
    # job's), and only "refused by the hub 66 connection attempt(s)" to hint at rank 1.
    rep = build_report(str(_node0_log(tmp_path)))
    assert rep["world_size"] == 2 and [r["rank"] for r in rep["ranks"]] == [0]
    assert rep["ranks_unheard"] == [1] and rep["samples_partial"] is True
    why = ("2; rank 1 never heard from: the hub refused 13 connection attempt(s) with no key authorised for the port, likely "
           "theirs (keys not the hub's: a node launched without its --curve-dir)")  # fmt: skip
    partial = "; partial: of the 1 rank heard from, not the job's"
    text = render_text(rep)
    assert f"world size          {why}" in text, text
    assert next(line for line in text.splitlines() if line.startswith("samples/s")).endswith(partial), text
    md = render_markdown(rep)
    assert f"| world size | {why} |" in md, md
    assert partial in md


def test_a_report_of_every_rank_says_nothing_of_ranks_unheard(tmp_path):
    log = make_logs.Log("r")
    for r in range(2):
        log.add(make_logs.hello(r, 2, strategy="ddp", host="n", node=0, local=r, steps=2, cpu=True), 0.1)
    for s in (1, 2):
        for r in range(2):
            log.add(schema.Step(rank=r, step=s, loss=1.0, samples=16, step_s=0.1), 0.2 + 0.1 * s)
    log.write(tmp_path / "t.jsonl")
    rep = build_report(str(tmp_path / "t.jsonl"))
    assert "ranks_unheard" not in rep and "samples_partial" not in rep
    assert "never heard" not in render_text(rep) and "partial" not in render_text(rep)


class _Refused:
    """A launch's viewer of node 0's hub that refuses its (absent) keys: never synced."""

    live = True
    synced = False
    stats = None
    last_frame_t = None

    def __init__(self) -> None:
        self.state = RunState(run_id="")
        self.refused = ""

    def poll(self) -> bool:
        return False


def test_a_refused_node_waits_saying_it_is_refused_not_that_the_hub_does_not_answer(monkeypatch):
    # Node 1's progress lines after "the hub refuses ...": "[waiting 16 s] no answer from the
    # hub yet (stopped, overloaded or out of reach)", every few seconds to the end.
    clock = [1000.0]
    monkeypatch.setattr(printer_mod.time, "monotonic", lambda: clock[0])
    src = _Refused()
    out = io.StringIO()
    printer = ProgressPrinter(src, out=out, bar=False, every_s=2.0)
    clock[0] += 2.5
    printer.update()  # not refused yet: whether the hub is there is not known
    src.refused = REFUSED
    for _ in range(3):
        clock[0] += 2.5
        printer.update()
    lines = out.getvalue().splitlines()
    assert lines[0] == "[waiting 2 s] no answer from the hub yet (stopped, overloaded or out of reach)", lines
    assert lines[1].startswith("warning: the hub refuses this viewer now: it has CURVE keys"), lines
    assert lines[2:] == [f"[waiting {n} s] the hub refuses this viewer (see above): nothing of the run shows here; training goes on"
                         for n in (5, 8, 10)], lines  # fmt: skip


def test_a_refused_nodes_last_line_says_its_telemetry_was_refused_not_that_it_took_no_step():
    # Node 1, whose rank trained all 250 steps: "done, 0 rank(s), no step taken, log kept by
    # node 0's hub (tcp://10.201.0.1:29600)", every part false.
    kept = "kept by node 0's hub (tcp://10.201.0.1:29600)"
    line = outcome_line(RunState(run_id=""), 0, {}, kept, refused=REFUSED)
    assert line == (
        "pardash: this node's ranks ended (exit code 0), but the hub refused this node's telemetry: it has CURVE keys and "
        "this node has none (--curve-dir DIR or PARDASH_CURVE_DIR: a copy of the hub's keys folder); nothing of this "
        f"node's ranks is in the log {kept}: their output above says how far they went"
    )
    failed = outcome_line(RunState(run_id=""), 1, {}, kept, refused=REFUSED, output="/runs/x/output.log")
    assert failed.startswith("pardash: the job failed (exit code 1), but the hub refused this node's telemetry")
    assert failed.endswith("their output (/runs/x/output.log) says how far they went")
    # Not refused: as before.
    assert outcome_line(RunState(run_id=""), 0, {}, kept) == f"pardash: done, 0 rank(s), no step taken, log {kept}"


def test_node_0s_last_line_says_the_ranks_of_the_world_it_never_heard_from():
    # Node 0: "done, 1 rank(s), step 250" of a world of 2, as if that were the job.
    st = RunState(run_id="r")
    st.apply(schema.Hello(run="r", rank=0, world_size=2, strategy="ddp", hseq=1), 1.0)
    st.apply(schema.Step(run="r", rank=0, step=250, step_s=0.1, loss=1.0, hseq=2), 2.0)
    st.apply(schema.Event(run="r", rank=0, name="exit", code=0, step=250, hseq=3), 3.0)
    line = outcome_line(st, 0, {}, "/runs/r/telemetry.jsonl")
    assert line == ("pardash: done, 1 rank(s), step 250; rank 1 of 2 never heard from: nothing of it in the log, "
                    "log /runs/r/telemetry.jsonl")  # fmt: skip
    # And why, where its hub refused connections without a key (`report` said it; this line did not).
    line = outcome_line(st, 0, {}, "/runs/r/telemetry.jsonl", no_key=825)
    assert line == ("pardash: done, 1 rank(s), step 250; rank 1 of 2 never heard from: the hub refused 825 connection attempt(s) "
                    "with no key authorised for the port, likely theirs (keys not the hub's: a node launched without its "
                    "--curve-dir), log /runs/r/telemetry.jsonl")  # fmt: skip


def test_the_last_line_under_the_tui_names_the_ranks_output_after_a_success_or_a_stop_too():
    # Under the TUI a script's own prints go to output.log alone; a success's last line named
    # only the log ("done, 2 rank(s), step 400, log ..."), so the 400 lines it printed were
    # nowhere a user looked. A stop that was no failure left it out as well.
    st = RunState(run_id="r")
    st.apply(schema.Hello(run="r", rank=0, world_size=1, strategy="ddp", hseq=1), 1.0)
    st.apply(schema.Step(run="r", rank=0, step=400, step_s=0.1, loss=1.0, hseq=2), 2.0)
    out = "/runs/r/output.log"
    assert outcome_line(st, 0, {}, "/runs/r/telemetry.jsonl", output=out) == (
        "pardash: done, 1 rank(s), step 400, log /runs/r/telemetry.jsonl; output /runs/r/output.log"
    )
    stopped = outcome_line(st, 130, {"stopped": True, "stop_t": 3.0}, "/runs/r/telemetry.jsonl", output=out)
    assert stopped.startswith("pardash: stopped by you") and stopped.endswith(
        "; output /runs/r/output.log; log /runs/r/telemetry.jsonl"
    ), stopped
    # Headless, the output was on the screen above: not named.
    assert outcome_line(st, 0, {}, "/runs/r/telemetry.jsonl") == "pardash: done, 1 rank(s), step 400, log /runs/r/telemetry.jsonl"


def test_the_last_line_of_a_run_that_had_a_straggler_says_so():
    # The TUI said "rank 1 was a straggler (data), found at step 29" as the run ended; the
    # launch's last line, what a CI job's log is read by, said only "done, 2 rank(s), step 300".
    st = RunState(run_id="r")
    for rank in (0, 1):
        st.apply(schema.Hello(run="r", rank=rank, world_size=2, strategy="ddp", hseq=1 + rank), 1.0)
        st.apply(schema.Step(run="r", rank=rank, step=300, step_s=0.1, loss=1.0, hseq=3 + rank), 2.0)
    st.apply(schema.Verdict(run="r", rank=1, verdict="straggler", cause="data", cost_s=0.02, step=29, hseq=5), 2.0)
    st.apply(schema.Verdict(run="r", rank=1, verdict="straggler_cleared", step=40, hseq=6), 2.0)
    assert outcome_line(st, 0, {}, "run.jsonl") == (
        "pardash: done, 2 rank(s), step 300; rank 1 was a straggler (data), found at step 29, no longer at step 40, "
        "log run.jsonl"
    )
    st.apply(schema.Verdict(run="r", rank=0, verdict="straggler", cause="compute", cost_s=0.02, step=50, hseq=7), 2.0)
    assert "; ranks 0, 1 were stragglers (see the events), log run.jsonl" in outcome_line(st, 0, {}, "run.jsonl")


# -- pardash bench --------------------------------------------------------------------------


def _report(steps: int, steady: float | None, resumed: int | None = None) -> dict:
    return {"steps": steps, "steady_samples_per_s": steady, "median_step_s": 0.05,
            "checkpoints": {"saved": [], "resumed": [{"step": resumed}] if resumed is not None else []}}  # fmt: skip


def test_a_bench_run_that_exited_0_is_not_said_to_have_failed():
    # "bench [2/2] ddp x2: running... failed with exit code 0 (10 s)": ddp resumed from
    # single's checkpoint at step 6 and had nothing left to train.
    res = {"code": 0, "report": _report(0, None, resumed=6), "log": "l", "output": "o.log"}
    assert run_said(res, 10.2, 6) == "trained no step: resumed at step 6 of 6 (10 s); see o.log"
    res = {"code": 0, "report": _report(1, None), "log": "l", "output": "o.log"}
    assert run_said(res, 3.0, 1) == "1 step: too few for a steady samples/s (3 s); see o.log"
    res = {"code": 0, "report": _report(1, 200.0), "log": "l", "output": "o.log"}
    assert run_said(res, 3.0, 1).startswith("1 step, 200 samples/s, 50.0 ms/step (3 s)")
    assert run_said({"code": 1, "report": None, "output": "o.log"}, 3.0) == "failed with exit code 1 (3 s); see o.log"


def test_bench_refuses_resume_and_gives_each_strategy_its_own_checkpoint_folder(tmp_path):
    with pytest.raises(ValueError, match=r"^--resume: bench runs each strategy over the same steps from step 1"):
        BenchConfig(strategies=["single", "ddp"], train=TrainConfig(steps=6, checkpoint_dir=str(tmp_path), resume=True))
    cfg = BenchConfig(strategies=["single", "ddp"], train=TrainConfig(steps=6, checkpoint_dir=str(tmp_path / "ck")))
    runs, _ = plan(cfg)
    assert [r.train.checkpoint_dir for r in runs] == [str(tmp_path / "ck" / "single"), str(tmp_path / "ck" / "ddp")]
    assert (tmp_path / "ck" / "ddp").is_dir()


@pytest.mark.parametrize(("ranks", "head"), [((1,), "6 steps, 1 rank"), ((1, 2), "6 steps, 1 or 2 ranks"),
                                             ((1, 2, 4), "6 steps, 1, 2 or 4 ranks")])  # fmt: skip
def test_the_bench_header_says_the_ranks_that_ran(ranks, head):
    # `--strategies single` read "pardash bench: ..., 1 steps, 2 ranks" of one rank.
    names = ("single", "ddp", "fsdp")
    rows = strategy_rows([{"strategy": names[i], "ranks": n, "devices": n, "code": 1, "report": None}
                          for i, n in enumerate(ranks)])  # fmt: skip
    bench = {"model": "gpt", "steps": 6, "nproc": 2, "device": "cpu", "left_out": [], "rows": rows}
    assert render_bench_text(bench).splitlines()[0] == f"pardash bench: gpt, {head}, cpu"
    assert render_bench_markdown(bench).splitlines()[0] == f"# pardash bench: gpt, {head}, cpu"


def test_the_bench_says_one_step_in_the_singular():
    # "after 1 steps", "1 steps" in the header.
    rows = [{"strategy": "single", "ranks": 1, "devices": 1, "code": 1, "steps": 1, "saving_vs_ddp": None,
             "scaling_efficiency": None}]  # fmt: skip
    bench = {"model": "gpt", "steps": 1, "nproc": 2, "device": "cpu", "left_out": [], "rows": rows}
    text = render_bench_text(bench)
    assert text.splitlines()[0] == "pardash bench: gpt, 1 step, 1 rank, cpu"
    assert "failed (exit code 1, after 1 step)" in text
