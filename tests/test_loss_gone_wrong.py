"""A loss that goes wrong (NaN or infinite), said plainly after the run (review 306): the
report's findings name it at the top, its JSON has a field of it, its timeline's parts read
``nan`` where their loss was so (``-`` read as no loss ever reported), and its warnings come in
the order the ranks turned, not the hub's."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from helpers import pardash_env
from pardash.telemetry import schema
from pardash.telemetry.report import build_report, render_markdown, render_text
from pardash.telemetry.reporter import Reporter

DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))
import make_logs  # noqa: E402  (tests/data/make_logs.py: the logs' writer)


def reporter_says(loss: float, step: int, bad_since: int | None = None) -> str:
    """What a rank's reporter says as its loss turns (Reporter._loss_turns), in its words."""
    said: list[str] = []
    fake = SimpleNamespace(_loss_bad=bad_since, event=lambda name, message, **kw: said.append(message))
    Reporter._loss_turns(fake, {"loss": loss}, loss, step)  # type: ignore[arg-type]
    assert len(said) == 1, said
    return said[0]


def loss_log(path: Path, world: int, bad: dict[int, tuple[float, int, int | None]], *, steps: int = 200,
             said_first: tuple[int, ...] = ()) -> Path:  # fmt: skip
    """A DDP job of ``world`` ranks; ``bad``: rank -> (the value its loss turned to, the step it
    did, the step it was finite again or None); its warning goes before its step (as its reporter
    sends it), those of the ranks in ``said_first`` before the others' at each step."""
    log = make_logs.Log("lossy")
    for r in range(world):
        log.add(make_logs.hello(r, world, strategy="ddp", host="vm", node=0, local=r, steps=steps, cpu=True), 0.1)
    t = 1.0
    for s in range(1, steps + 1):
        t += 0.1
        order = sorted(range(world), key=lambda r: (r not in said_first, r))
        for r in order:
            value, since, again = bad.get(r, (0.0, steps + 1, None))
            if s == since:
                log.add(schema.Event(rank=r, name="warning", step=s, message=reporter_says(value, s)), t)
            if again is not None and s == again:
                log.add(schema.Event(rank=r, name="warning", step=s, message=reporter_says(1.0, s, bad_since=since)), t)
            not_finite = since <= s and (again is None or s < again)
            log.add(schema.Step(rank=r, step=s, loss=None if not_finite else 2.0 - 0.001 * s, samples=16, step_s=0.1), t)
    for r in range(world):
        log.add(schema.Event(rank=r, name="exit", code=0, step=steps), t + 0.2)
    log.write(path)
    return path


def findings(text: str) -> list[str]:
    """The report's findings: from 'stragglers:' to the first blank line."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("stragglers:"))
    return lines[at: lines.index("", at)]


def timeline_losses(text: str) -> list[str]:
    """The timeline's loss cells, by part (the column between p90 and stragglers)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("step range"))
    head = lines[at]
    start, end = head.index("p90 ms") + len("p90 ms"), head.index("stragglers")
    out = []
    for line in lines[at + 1:]:
        if not line.strip() or line.startswith("the run in parts"):
            break
        out.append(line[start:end].strip())
    return out


def test_a_diverged_run_says_so_in_its_findings_json_and_markdown(tmp_path):
    log = loss_log(tmp_path / "nan.jsonl", 2, {1: (math.nan, 120, None), 0: (math.nan, 121, None)})
    rep = build_report(str(log))
    # At the top: it read "stragglers: none / stalls: none / exits: none with an error" alone.
    assert findings(render_text(rep)) == [
        "stragglers: none",
        "stalls: none",
        "exits: none with an error",
        "loss: not finite to the end: rank 1 nan from step 120, rank 0 nan from step 121",
    ]
    assert rep["loss_not_finite"] == [
        {"rank": 1, "value": "nan", "step": 120, "until": "end", "finite_again_step": None},
        {"rank": 0, "value": "nan", "step": 121, "until": "end", "finite_again_step": None},
    ]
    assert json.loads(json.dumps(rep))["loss_not_finite"][0]["rank"] == 1
    md = render_markdown(rep)
    assert "**Loss:** not finite to the end: rank 1 nan from step 120, rank 0 nan from step 121" in md
    assert md.index("**Loss:**") < md.index("## Memory")


def test_a_run_whose_loss_came_back_says_when_and_a_healthy_one_says_nothing(tmp_path):
    log = loss_log(tmp_path / "spike.jsonl", 2, {1: (math.inf, 50, 53), 0: (-math.inf, 150, None)})
    rep = build_report(str(log))
    assert findings(render_text(rep))[-1] == (
        "loss: not finite: rank 1 inf from step 50, finite again at step 53; rank 0 -inf from step 150 to the end")
    assert [(t["rank"], t["until"], t["finite_again_step"]) for t in rep["loss_not_finite"]] == [(1, "finite", 53), (0, "end", None)]
    healthy = build_report(str(loss_log(tmp_path / "ok.jsonl", 2, {})))
    assert healthy["loss_not_finite"] == []
    assert not any(line.startswith("loss") for line in findings(render_text(healthy)))
    assert "**Loss:**" not in render_markdown(healthy)


def test_the_timeline_reads_nan_where_a_parts_loss_was_not_finite(tmp_path):
    rep = build_report(str(loss_log(tmp_path / "nan.jsonl", 2, {1: (math.nan, 120, None), 0: (math.nan, 121, None)})))
    text = render_text(rep)
    cells = timeline_losses(text)
    assert len(cells) == 10
    # Its parts after the NaN read "-", the mark of a loss never reported.
    assert cells[6:] == ["nan"] * 4
    assert all(c not in ("-", "nan") for c in cells[:6])
    # The part it turned in: the steps before it, and a note of the step it turned at.
    part = next(line for line in text.splitlines() if line.lstrip().startswith("101-120"))
    assert part.endswith("loss nan from step 120 (1 of its steps)")
    assert rep["timeline"][6]["loss_not_finite"] == {"value": "nan", "steps": 20, "from_step": 121, "ranks": 2}
    assert rep["timeline"][0]["loss_not_finite"] is None
    # One rank of two (its grads finite, the other's loss too): said so.
    one = render_text(build_report(str(loss_log(tmp_path / "nan1.jsonl", 2, {1: (math.nan, 120, None)}))))
    assert timeline_losses(one)[6:] == ["nan (1 of 2 ranks)"] * 4


def test_the_warnings_and_the_loss_line_begin_with_the_first_to_turn(tmp_path):
    # 8 ranks: rank 6 NaN at step 30, the others at 31, their warnings taken first by the hub.
    bad = {r: (math.nan, 30 if r == 6 else 31, None) for r in range(8)}
    rep = build_report(str(loss_log(tmp_path / "nan8.jsonl", 8, bad, steps=60, said_first=(0, 1, 2, 3, 4, 5, 7))))
    text = render_text(rep)
    assert findings(text)[-1] == "loss: not finite to the end: rank 6 nan from step 30, ranks 0-5, 7 nan from step 31"
    warned = text.splitlines()[text.splitlines().index("warnings:") + 1:]
    assert [w.split(":")[0].strip() for w in warned] == ["rank 6 at step 30", "ranks 0-5, 7 at step 31"]
    assert [w["step"] for w in rep["warnings"]] == [30, 31]


def test_the_report_command_says_it(tmp_path):
    log = loss_log(tmp_path / "nan.jsonl", 2, {1: (math.nan, 120, None), 0: (math.nan, 121, None)})
    out = subprocess.run([sys.executable, "-m", "pardash", "report", str(log)], capture_output=True, text=True,
                         env=pardash_env(), timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "loss: not finite to the end: rank 1 nan from step 120, rank 0 nan from step 121" in out.stdout


# -- Prometheus ------------------------------------------------------------------------------


def _hub_of(world: int, bad: dict[int, tuple[float, int]], steps: int = 10):
    """A hub's core fed ``world`` ranks' steps, as their reporters send them: ``bad``, rank ->
    (what its loss turned to, the step it did), its warning before that step, its steps after
    without a loss."""
    from pardash.telemetry.hubcore import HubCore

    core = HubCore(run_id="r")
    seq = dict.fromkeys(range(world), 1)
    for r in range(world):
        core.ingest(schema.Hello(rank=r, world_size=world, t=1.0, seq=0), 0.0)
    for s in range(1, steps + 1):
        for r in range(world):
            value, since = bad.get(r, (0.0, steps + 1))
            if s == since:
                core.ingest(schema.Event(rank=r, name="warning", step=s, message=reporter_says(value, s), t=1.0 + s, seq=seq[r]), 0.0)
                seq[r] += 1
            core.ingest(schema.Step(rank=r, step=s, loss=None if s >= since else 1.0 + r, samples=8, step_s=0.1, t=1.0 + s, seq=seq[r]), 0.0)
            seq[r] += 1
    return core


def _scrape(core) -> str:
    import urllib.request

    from pardash.telemetry.prometheus import serve_metrics

    server = serve_metrics(core, 0, per_rank=True)
    try:
        with urllib.request.urlopen(server.url, timeout=10) as r:
            return r.read().decode()
    finally:
        server.close()


def _samples(text: str, name: str) -> dict[str, float]:
    """rank label (or "" without one) -> value of each sample of ``name``."""
    from prometheus_client.parser import text_string_to_metric_families

    return {s.labels.get("rank", ""): s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name}


def test_prometheus_says_a_loss_not_finite_and_the_mean_is_so():
    from test_prometheus import check_conventions

    text = _scrape(_hub_of(2, {1: (math.nan, 5)}))
    check_conventions(text)
    # Rank 1's series was missing, and the mean was rank 0's alone (1.0).
    loss = _samples(text, "pardash_rank_loss")
    assert loss["0"] == 1.0 and math.isnan(loss["1"])
    assert 'pardash_rank_loss{rank="1"} NaN' in text
    assert math.isnan(_samples(text, "pardash_loss_mean")[""])
    assert _samples(text, "pardash_ranks_loss_not_finite") == {"": 1.0}
    assert "NaN while any rank's loss is not finite" in text
    # Every rank's NaN: the mean had no sample, so an alert on it (> X) never fired.
    text = _scrape(_hub_of(2, {0: (math.nan, 5), 1: (math.inf, 4)}))
    assert math.isnan(_samples(text, "pardash_loss_mean")[""])
    assert 'pardash_rank_loss{rank="1"} +Inf' in text
    assert _samples(text, "pardash_ranks_loss_not_finite") == {"": 2.0}
    # A healthy run: its mean, and none counted.
    text = _scrape(_hub_of(2, {}))
    assert _samples(text, "pardash_loss_mean") == {"": 1.5} and _samples(text, "pardash_ranks_loss_not_finite") == {"": 0.0}


# -- TensorBoard -----------------------------------------------------------------------------


def test_tensorboard_gets_the_loss_at_each_step_it_was_not_finite(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from pardash.telemetry.export import export_tensorboard

    log = loss_log(tmp_path / "nan.jsonl", 2, {1: (math.nan, 120, 150), 0: (math.inf, 121, None)}, steps=160)
    export_tensorboard(str(log), str(tmp_path / "tb"))

    def loss(rank: int) -> dict[int, float]:
        acc = EventAccumulator(str(tmp_path / "tb" / f"rank{rank}"), size_guidance={"scalars": 0})
        acc.Reload()
        return {e.step: e.value for e in acc.Scalars("loss")}

    # Rank 1's curve stopped at step 119, as if it had stopped logging.
    one = loss(1)
    assert sorted(one) == list(range(1, 161))
    assert all(math.isnan(one[s]) for s in range(120, 150))
    assert all(math.isfinite(one[s]) for s in (*range(1, 120), *range(150, 161)))
    zero = loss(0)
    assert sorted(zero) == list(range(1, 161))
    assert all(zero[s] == math.inf for s in range(121, 161)) and math.isfinite(zero[120])


def test_ranks_losses_far_apart_are_said_with_their_spread_on_a_progress_line():
    # Review 306: one rank's data gone bad, its loss 19.04 against rank 0's 0.197, read
    # "loss med 9.619", a figure neither rank had.
    from pardash.telemetry.printer import loss_figure
    from pardash.telemetry.state import RunState

    def state(*losses: float) -> RunState:
        st = RunState(run_id="d")
        for r, loss in enumerate(losses):
            st.apply(schema.Hello(run="d", rank=r, world_size=len(losses), seq=0, t=1.0), 0.0)
            st.apply(schema.Step(run="d", rank=r, step=300, seq=1, loss=loss, step_s=0.01, t=2.0), 0.0)
        return st

    assert loss_figure(state(0.1971, 19.04)) == "loss min/med/max 0.1971/9.619/19.04"
    assert loss_figure(state(2.31, 2.35, 2.29, 2.40)) == "loss med 2.33"
    assert loss_figure(state(0.5)) == "loss 0.5"


def test_ps_says_a_runs_ranks_whose_loss_is_not_finite():
    # Review 306: a run whose loss had been NaN since step 30 was listed as "JOB running".
    from pardash.cli import _ps_progress
    from pardash.telemetry.hub import _progress
    from pardash.telemetry.state import RunState

    st = RunState(run_id="p")
    for r in range(4):
        st.apply(schema.Hello(run="p", rank=r, world_size=4, seq=0, t=1.0), 0.0)
        if r >= 1:
            st.apply(schema.Event(run="p", rank=r, seq=1, name="warning", step=30, t=2.0,
                                  message="loss is nan at step 30: diverged, or a spike (steps go on without a loss while it is not finite)"), 0.0)  # fmt: skip
        st.apply(schema.Step(run="p", rank=r, step=31, seq=2, loss=None if r else 1.0, step_s=0.1, t=3.0), 0.0)
    progress = _progress(st)
    assert progress["loss_not_finite"] == {"nan": 3}
    assert _ps_progress(progress, launched=True)[2] == "3 loss nan"
    assert _ps_progress({**progress, "loss_not_finite": {"nan": 1, "inf": 2}}, launched=True)[2] == "3 loss not finite"
    assert _ps_progress({**progress, "loss_not_finite": {}}, launched=True)[2] == ""
    assert _ps_progress({**progress, "ranks": {"stalled": 4}}, launched=True)[2] == "4 stalled"  # (a hang says more)


def test_a_spike_the_parts_median_hides_is_said_in_its_note(tmp_path):
    # Review 306: a loss 100x for a few steps read "101-120 ... 4.7856", the part's median, and
    # nothing said it anywhere; a first part's descent from a high first loss is no spike.
    from pardash.telemetry.report import build_report
    from pardash.telemetry.report_render import render_text

    log = tmp_path / "spike.jsonl"
    msgs: list = [schema.Hello(run="k", rank=r, world_size=2, seq=0, t=1.0) for r in (0, 1)]
    for s in range(1, 201):
        loss = 30.0 / s + 0.3 if s < 100 or s > 102 else 3000.0
        msgs += [schema.Step(run="k", rank=r, step=s, seq=s, loss=loss, step_s=0.01, samples=8, t=1.0 + s * 0.01) for r in (0, 1)]
    msgs += [schema.Event(run="k", rank=r, seq=201, name="exit", code=0, step=200, t=4.0) for r in (0, 1)]
    log.write_bytes(schema.encode_json_lines(msgs))
    rep = build_report(str(log))
    spiked = [p for p in rep["timeline"] if p["first_step"] <= 100 <= p["last_step"]][0]
    assert (spiked["loss_max"], spiked["loss_max_step"]) == (3000.0, 100)
    notes = [line.split()[0] + " " + line.rstrip().rsplit("  ", 1)[-1] for line in render_text(rep).splitlines() if "loss up to" in line]
    assert notes == ["81-100 loss up to 3000 at step 100", "101-120 loss up to 3000 at step 101"], render_text(rep)  # (the first part's 30.3 at step 1: none)


def test_warnings_are_in_step_order_within_each_of_torchruns_attempts(tmp_path):
    # Review 312: sorted by step alone, after a restart from a checkpoint attempt 1's warning at
    # step 118 read before attempt 0's at step 120.
    from pardash.telemetry.report import build_report

    log = tmp_path / "restarted.jsonl"
    msgs: list = [schema.Hello(run="w", rank=0, world_size=1, seq=0, pid=10, t=1.0)]
    msgs += [schema.Step(run="w", rank=0, step=s, seq=s, loss=1.0, step_s=0.01, t=1.0 + s / 100) for s in range(1, 121)]
    msgs.append(schema.Event(run="w", rank=0, seq=200, name="warning", step=120, message="first attempt's warning at step 120", t=2.3))
    msgs.append(schema.Hello(run="w", rank=0, world_size=1, seq=0, pid=11, restart=1, t=3.0))
    msgs += [schema.Step(run="w", rank=0, step=s, seq=s - 99, loss=1.0, step_s=0.01, t=3.0 + s / 100) for s in range(100, 119)]
    msgs.append(schema.Event(run="w", rank=0, seq=30, name="warning", step=118, message="second attempt's warning at step 118", t=4.3))
    for i, m in enumerate(msgs):
        m.hseq = i + 1
    log.write_bytes(schema.encode_json_lines(msgs))
    rep = build_report(str(log))
    said = [w["message"] for w in rep["warnings"] if "attempt" in w["message"]]
    assert said == ["first attempt's warning at step 120", "second attempt's warning at step 118"], rep["warnings"]
    assert all("attempt" not in w and "_at" not in w for w in rep["warnings"])


def test_a_launchs_last_line_says_a_job_that_spent_most_of_each_step_between_steps():
    # Review 314: a job input-bound, or whose logging took three quarters of each step, ended on
    # "pardash: done, 2 rank(s), step 200": only the report said it.
    from pardash.telemetry.printer import between_steps_said
    from pardash.telemetry.state import RunState

    def state(data_s: float, step_s: float = 0.04, rank_1_data_s: float | None = None) -> RunState:
        st = RunState(run_id="b")
        for r in (0, 1):
            st.apply(schema.Hello(run="b", rank=r, world_size=2, seq=0, t=1.0), 0.0)
        for s in range(1, 21):
            steps = [schema.Step(run="b", rank=r, step=s, seq=s, step_s=step_s, t=1.0 + s,
                                 data_s=data_s if r == 0 or rank_1_data_s is None else rank_1_data_s) for r in (0, 1)]
            for m in steps:
                st.apply(m, 0.0)
            st.commit_history(steps)
        return st

    assert between_steps_said(state(0.03)) == "each step 75% between steps (loading data or the script's own work: `pardash report` tells them apart)"
    assert between_steps_said(state(0.004)) == ""
    assert between_steps_said(state(0.0009, step_s=0.0012)) == ""  # (a millisecond's step: the loop's own Python)
    # One rank slow in its data, the other waiting for it in comm: a straggler (its own line
    # says it), not every step spent between steps (the slow rank's 80% was said of the job)
    assert between_steps_said(state(0.002, rank_1_data_s=0.032)) == ""
