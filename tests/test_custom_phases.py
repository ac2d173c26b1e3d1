"""A script's own phases (``with pt.phase("augment"):``) travel as ``Step.phases``: the hub
judges them as it judges custom metrics and step times, the rank detail shows them beside
forward and backward against the other ranks, and the report and export carry them.

They went in ``Step.custom`` as ``augment_s``, so the rank detail showed them as a raw logged
metric and never against the other ranks."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import pardash_env
from pardash.telemetry import limits, schema
from pardash.telemetry.export import step_scalars
from pardash.telemetry.hubcore import MAX_FIELD, HubCore
from pardash.telemetry.logreader import load_log
from pardash.telemetry.recorder import Recorder
from pardash.telemetry.report import build_report
from pardash.telemetry.report_render import render_markdown, render_text
from pardash.telemetry.state import RunState

PY = sys.executable

SCRIPT = """\
import time

import torch
import torch.distributed as dist
from torch import nn

import pardash.telemetry as pt

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
pt.init(model=model, optimizer=opt)
for i in range(6):
    with pt.step():
        x = torch.randn(4, 8)
        with pt.phase("augment"):
            x = x + 0.01 * torch.randn_like(x)
            time.sleep(0.004)
        loss = model(x).pow(2).mean()
        loss.backward()
        with pt.phase("loss_scale"):
            time.sleep(0.001)
        opt.step()
        opt.zero_grad()
        pt.log(loss=loss.detach(), samples=len(x), tokens=32)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_launched_scripts_own_phases_reach_the_log_report_and_export_as_phases(tmp_path):
    script = tmp_path / "own_phases.py"
    script.write_text(SCRIPT)
    log = tmp_path / "run.jsonl"
    # One rank: its phases are its own, timed in its process (a second rank is 3 s more of a
    # core and times the same; the rank detail against the others is in process below).
    proc = subprocess.run(
        [PY, "-m", "pardash", "launch", "--nproc", "1", "--headless", "--log", str(log),
         "--runs-dir", str(tmp_path / "runs"), "--", str(script)],
        capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    msgs, _ = load_log(log)
    assert {m.rank for m in msgs if isinstance(m, schema.Step)} == {0}
    for rank in (0,):
        steps = sorted((m for m in msgs if isinstance(m, schema.Step) and m.rank == rank), key=lambda m: m.seq)
        assert [s.step for s in steps] == list(range(1, 7))
        for s in steps:
            # In the order the loop runs them, each its own seconds; not custom metrics.
            assert list(s.phases) == ["augment", "loss_scale"], s.phases
            assert 0.004 <= s.phases["augment"] <= s.step_s and 0.001 <= s.phases["loss_scale"] <= s.step_s
            assert s.custom.get("tokens") == 32.0 and not any(k.endswith("_s") for k in s.custom), s.custom
            assert s.forward_s is not None  # the measured phases still come with them
    rep = build_report(str(log))
    assert list(rep["custom_phases"]) == ["augment", "loss_scale"]
    assert rep["custom_phases"]["augment"] >= 0.004 and rep["custom_phases"]["loss_scale"] >= 0.001
    assert len(rep["ranks"]) == 1 and all(list(r["custom_phases"]) == ["augment", "loss_scale"] for r in rep["ranks"])
    assert not any(name.endswith("_s") for name in rep["custom"]), rep["custom"]
    # The text and markdown say them under a heading of their own (they read as a metric before).
    text, md = render_text(rep), render_markdown(rep)
    assert "the script's own phases (median a step over ranks):" in text
    assert re.search(r"^  augment: \d+\.\d+ ms a step", text, re.M) and "loss_scale: " in text, text
    assert "## The script's own phases" in md and "- augment: " in md
    last = steps[-1]
    scalars = step_scalars(last)
    assert scalars["time/augment_s"] == last.phases["augment"] and scalars["time/loss_scale_s"] == last.phases["loss_scale"]
    assert not any(tag.startswith("custom/") and tag.endswith("_s") for tag in scalars), scalars


def test_an_empty_phase_of_the_scripts_own_goes_in_phases_not_custom(fresh_api, hub, tmp_path, monkeypatch):
    # The same in this process, without the launcher's instrumentation: pt.step alone.
    import pardash.telemetry as pt
    from helpers import wait_for

    monkeypatch.setenv("PARDASH_ENDPOINT", hub.ingest_endpoint)
    monkeypatch.setenv("PARDASH_RUN_ID", "test-run")
    with pt.step():
        with pt.phase("ema"):
            pass
        with pt.phase("data"):
            pass
        with pt.phase("ema"):  # entered again: its time adds up
            pass
        pt.log(loss=1.0)
    fresh_api.close()
    path = tmp_path / "telemetry.jsonl"
    wait_for(lambda: path.exists() and any(isinstance(m, schema.Step) for m in load_log(path)[0]))
    (s,) = [m for m in load_log(path)[0] if isinstance(m, schema.Step)]
    assert list(s.phases) == ["ema"] and 0.0 <= s.phases["ema"] <= s.step_s
    assert s.data_s is not None and s.custom == {}


# -- the hub ----------------------------------------------------------------------------------


def _hub(tmp_path: Path) -> HubCore:
    core = HubCore(run_id="r", recorder=Recorder(tmp_path / "run.jsonl"), world_size=2)
    assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=0, world_size=2, t=1.0e9)), 1.0)
    return core


def _step(seq: int, phases: dict[str, float]) -> bytes:
    return schema.encode(schema.Step(run="r", rank=0, seq=seq, step=seq, t=1.0e9 + seq, step_s=0.1, mono=5.0, loss=1.0, phases=phases))


def test_the_hub_refuses_or_drops_phases_as_it_does_custom_metrics_and_step_times(tmp_path):
    core = _hub(tmp_path)
    # Taken (the general way: a step with phases never takes the short one), as sent.
    assert core.ingest_bytes(_step(1, {"augment": 0.01, "loss_scale": 0.0}), 1.0)
    assert core.state.ranks[0].step.phases == {"augment": 0.01, "loss_scale": 0.0}
    # A phase not finite is left out (JSON has none), the step kept: as a custom metric.
    for seq, bad in ((2, math.nan), (3, math.inf), (4, -math.inf)):
        assert core.ingest_bytes(_step(seq, {"augment": 0.02, "bad": bad}), 1.0)
        assert core.state.ranks[0].step.phases == {"augment": 0.02}
    # A negative time, or one past the hub's bound for a step time, refuses the step; so do
    # more phases than custom metrics a step may have. Each counted under its reason.
    refused = {
        "out_of_range": [{"augment": -0.001}, {"augment": 1e8}],
        "too_large": [{f"p{i}": 0.001 for i in range(limits.MAX_CUSTOM + 1)}],
    }
    seq = 5
    for reason, cases in refused.items():
        for phases in cases:
            assert not core.ingest_bytes(_step(seq, phases), 1.0), phases
            seq += 1
        assert core.rejected[reason] == len(cases), reason
    assert core.state.ranks[0].step.step == 4  # none of them taken
    # As many as custom metrics may be: taken.
    many = {f"p{i}": 0.001 for i in range(limits.MAX_CUSTOM)}
    assert core.ingest_bytes(_step(seq, many), 1.0) and core.state.ranks[0].step.phases == many
    # A name is shown by every viewer: cut, and without what a terminal would act on.
    esc = "\x1b]0;owned\x07\x1b[2J\u202e"
    assert core.ingest_bytes(_step(seq + 1, {"aug" + esc + "x" * 5000: 0.01}), 1.0)
    (name,) = core.state.ranks[0].step.phases
    assert name.startswith("augxxx") and len(name) <= MAX_FIELD and name.isprintable()
    core.recorder.close()
    logged = [m for m in load_log(tmp_path / "run.jsonl")[0] if isinstance(m, schema.Step)]
    assert [s.step for s in logged] == [1, 2, 3, 4, seq, seq + 1]  # the log is JSON: no NaN in it


def test_a_step_without_phases_still_takes_the_hubs_short_way():
    from pardash.telemetry.hubcore import IngestStep

    core = HubCore(run_id="r", world_size=2)
    assert core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=0, world_size=2, t=1.0e9)), 1.0)
    assert core.ingest_bytes(_step(1, {}), 1.0)
    assert type(core.state.ranks[0].step) is IngestStep
    assert core.ingest_bytes(_step(2, {"augment": 0.01}), 1.0)
    assert type(core.state.ranks[0].step) is schema.Step  # judged the general way


def test_a_log_from_before_keeps_its_phases_as_custom_metrics(tmp_path):
    # Written before Step.phases: the same line reads as it did.
    line = b'{"kind":"step","v":1,"run":"r","rank":0,"seq":0,"t":1000000000.0,"step":1,"step_s":0.1,"custom":{"augment_s":0.01}}'
    s = schema.decode_json(line)
    assert s.custom == {"augment_s": 0.01} and s.phases == {}
    assert b"phases" not in schema.encode_json(s)  # and a step without phases is written as before


# -- the rank detail --------------------------------------------------------------------------


def _state(phases_by_rank: dict[int, dict[str, float]]) -> RunState:
    state = RunState(run_id="r")
    for rank, phases in phases_by_rank.items():
        state.apply(schema.Hello(run="r", rank=rank, world_size=len(phases_by_rank), t=1.0e9), 1.0)
        step = schema.Step(run="r", rank=rank, seq=1, step=1, t=1.0e9 + 1, step_s=0.2, forward_s=0.05, backward_s=0.1, phases=phases)
        state.apply(step, 1.0)
    return state


def test_the_rank_detail_lists_a_ranks_own_phases_after_the_known_ones_against_the_others():
    from pardash.tui.rank_facts import phases_of

    state = _state({
        0: {"augment": 0.030, "loss_scale": 0.002},
        1: {"augment": 0.010, "loss_scale": 0.003},
        2: {"augment": 0.012},
        3: {"loss_scale": 0.001, "eval": 0.5},
    })  # fmt: skip
    rows = [(p.name, p.seconds, p.others_median_s) for p in phases_of(state, 0)]
    assert rows == [
        ("step", 0.2, 0.2), ("forward", 0.05, 0.05), ("backward", 0.1, 0.1),
        # the rank's own order; each against the median of the others that timed it
        ("augment", 0.030, 0.011), ("loss_scale", 0.002, 0.002),
    ]  # fmt: skip
    names = [p.name for p in phases_of(state, 3)]
    assert names[3:] == ["loss_scale", "eval"]
    assert [p.others_median_s for p in phases_of(state, 3)][3:] == [0.0025, None]  # none of the others has it


def test_the_rank_detail_counts_the_phases_past_a_few_and_cuts_long_names():
    from pardash.tui.rank_facts import OWN_LABEL_CHARS, OWN_PHASES_SHOWN, phases_of

    many = {f"phase{i}": 0.001 * (i + 1) for i in range(OWN_PHASES_SHOWN + 3)}
    own = [p for p in phases_of(_state({0: many, 1: {}}), 0)][3:]
    assert [p.name for p in own] == [*list(many)[:OWN_PHASES_SHOWN], "+3 more"]
    assert own[-1].seconds is None
    one_more = dict(list(many.items())[: OWN_PHASES_SHOWN + 1])  # its own row, not "+1 more"
    assert [p.name for p in phases_of(_state({0: one_more}), 0)][3:] == list(one_more)
    long = "a_rather_long_phase_name"
    (row,) = phases_of(_state({0: {long: 0.01}}), 0)[3:]
    assert row.name == long[: OWN_LABEL_CHARS - 1] + "…" and len(row.name) == OWN_LABEL_CHARS


def _replayed_log(path: Path) -> None:
    """4 DDP ranks, 30 steps, each with two phases of the script's own; rank 2's augment slow."""
    msgs: list[schema.Message] = []
    for r in range(4):
        msgs.append(schema.Hello(run="own", rank=r, seq=0, t=1.0e9 + 0.1 * r, world_size=4, strategy="ddp", host="vm"))
    for step in range(1, 31):
        for r in range(4):
            t = 1.0e9 + 1 + 0.25 * step + 0.001 * r
            msgs.append(schema.Step(
                run="own", rank=r, seq=step, t=t, step=step, loss=2.0 / step, samples=32, step_s=0.25, data_s=0.006,
                forward_s=0.05, backward_s=0.1, optimizer_s=0.014, comm_s=0.02, self_s=0.1, mono=t,
                phases={"augment": 0.036 if r == 2 else 0.012, "loss_scale": 0.002}, custom={"grad_norm": 0.5},
            ))  # fmt: skip
    msgs.sort(key=lambda m: m.t)
    for hseq, m in enumerate(msgs, start=1):
        m.hseq = hseq
    path.write_bytes(schema.encode_json_lines(msgs))


@pytest.mark.parametrize("size", [(80, 24), (120, 36)])
async def test_the_rank_detail_screen_shows_the_scripts_phases_whole(tmp_path, size):
    from pardash.telemetry.client import ReplaySource
    from pardash.tui.app import make_app
    from pardash.tui.widgets.phase_bars import PhaseBars

    _replayed_log(tmp_path / "own.jsonl")
    src = ReplaySource(str(tmp_path / "own.jsonl"))
    src.seek(src.duration_s)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=size) as pilot:
        await pilot.press("down", "down", "enter")  # rank 2
        await pilot.pause()
        bars = app.screen.query_one(PhaseBars)
        rendered = bars.render()
        lines = rendered.plain.splitlines()
        own = {line.split()[0]: line for line in lines if line.split()[0] in ("augment", "loss_scale")}
        assert list(own) == ["augment", "loss_scale"], lines
        assert "36.0ms" in own["augment"] and "med 12.0ms" in own["augment"], own
        assert "2.0ms" in own["loss_scale"] and "med 2.0ms" in own["loss_scale"], own
        width = bars.content_region.width
        assert all(len(line) <= width for line in lines), lines  # every row whole, the median in view
        assert bars.region.height == len(lines) + 2  # every row drawn (within its border)
        figures = app.screen.query_one("#figures")
        assert figures.region.right <= size[0] and app.screen.query_one("#logged").display


def test_compare_sets_two_runs_own_phases_side_by_side(tmp_path):
    # `report --compare` left the scripts' own phases out (the report has them).
    from pardash.telemetry.compare import compare_reports, render_compare_text

    def log(name: str, augment_s: float, extra: dict[str, float]) -> str:
        path = tmp_path / f"{name}.jsonl"
        lines = [schema.Hello(run=name, rank=r, seq=0, world_size=2, strategy="ddp", t=1.0e9) for r in (0, 1)]
        lines += [
            schema.Step(run=name, rank=r, seq=i, step=i, t=1.0e9 + i * 0.1, step_s=0.1, samples=8, phases={"augment": augment_s, **extra})
            for i in range(1, 21) for r in (0, 1)
        ]  # fmt: skip
        path.write_bytes(b"".join(schema.encode_json(m) + b"\n" for m in lines))
        return str(path)

    a, b = build_report(log("a", 0.02, {})), build_report(log("b", 0.01, {"loss_scale": 0.003}))
    rows = {r["metric"]: r for r in compare_reports(a, b)["rows"]}
    assert (rows["own_phase:augment"]["a"], rows["own_phase:augment"]["b"], rows["own_phase:augment"]["verdict"]) == (0.02, 0.01, "better")
    assert rows["own_phase:loss_scale"]["a"] is None and rows["own_phase:loss_scale"]["b"] == 0.003
    text = render_compare_text(compare_reports(a, b))
    assert "augment (the script's own)" in text and "loss_scale (the script's own)" in text, text
