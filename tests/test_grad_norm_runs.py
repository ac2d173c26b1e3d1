"""Real runs (2 ranks, a few steps): the gradient norm a script's clipping returns, and the lr of
each of its optimizer's parameter groups, reach the log, the report, the CSV export and the
TUI's rank detail; the bundled trainer's --grad-clip too (review 337 found them nowhere)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap

import pytest

from helpers import pardash_env
from pardash.telemetry import schema
from pardash.telemetry.logreader import load_log

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent('''
    import json, os, sys
    import torch, torch.distributed as dist
    from torch import nn
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    body, head = nn.Linear(8, 16), nn.Linear(16, 1)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(body, nn.ReLU(), head))
    opt = torch.optim.SGD([{"params": body.parameters(), "lr": 1e-3}, {"params": head.parameters(), "lr": 1e-2}])
    seen = []
    for step in range(8):
        torch.manual_seed(100 + step)
        x = torch.randn(16, 8)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), x[:, :1]).backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        seen.append(norm.item())
        opt.step()
    with open(f"norms{rank}.json", "w") as f:
        json.dump(seen, f)
    dist.destroy_process_group()
''')


def _launch(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    log = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "2", "--headless", "--log", str(log),
         "--runs-dir", str(tmp_path / "runs"), *args],
        capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc, str(log)


def _steps(log: str, rank: int) -> list[schema.Step]:
    return sorted((m for m in load_log(log)[0] if isinstance(m, schema.Step) and m.rank == rank), key=lambda m: m.step)


@pytest.fixture(scope="module")
def script_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("grad_norm_script")
    (tmp_path / "train.py").write_text(SCRIPT)
    _, log = _launch(tmp_path, "--", "train.py")
    return tmp_path, log


def test_a_scripts_clipping_norm_and_head_lr_are_in_each_step(script_run):
    tmp_path, log = script_run
    for rank in (0, 1):
        truth = json.loads((tmp_path / f"norms{rank}.json").read_text())
        steps = _steps(log, rank)
        assert [s.custom.get("grad_norm") for s in steps] == pytest.approx(truth)
        assert [s.lr for s in steps] == [1e-3] * 8
        assert [s.custom.get("lr_group1") for s in steps] == [1e-2] * 8


def test_the_report_and_csv_say_them(script_run, tmp_path):
    from pardash.telemetry.export import export_csv
    from pardash.telemetry.report import build_report
    from pardash.telemetry.report_render import render_text

    _, log = script_run
    text = render_text(build_report(log))
    assert "grad_norm: " in text and "the total gradient norm the script's clip_grad_norm_ returned" in text
    assert "lr_group1: 0.01 at the last step (first 0.01) - the learning rate of the optimizer's parameter group 1 (lr is group 0's)" in text
    export_csv(log, str(tmp_path / "steps.csv"))
    with open(tmp_path / "steps.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 16 and all(float(r["custom/grad_norm"]) > 0 and float(r["custom/lr_group1"]) == 0.01 for r in rows)


async def test_the_rank_detail_says_each_groups_lr_and_whose_figures_they_are(script_run):
    from pardash.telemetry.client import ReplaySource
    from pardash.tui.app import make_app
    from pardash.tui.widgets.fact_list import FactList

    _, log = script_run
    src = ReplaySource(log)
    src.seek(src.duration_s)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        shown = "\n".join(str(w.render()) for w in app.screen.query("Static"))
        assert "lr 0.001, 0.01 (groups 0-1)" in shown
        logged = app.screen.query_one("#logged", FactList)
        assert [(name, note) for name, _value, note in logged.facts] == [
            ("grad_norm", "clipping's, by pardash"), ("lr_group1", "group 1's lr, by pardash")]
        assert logged.border_title == "other metrics"


def test_the_bundled_trainers_grad_clip_says_its_norm(tmp_path):
    _, log = _launch(tmp_path, "--strategy", "ddp", "--steps", "6", "--grad-clip", "1.0", "--log-every", "0")
    norms = {rank: [s.custom.get("grad_norm") for s in _steps(log, rank)] for rank in (0, 1)}
    assert len(norms[0]) == 6 and all(n is not None and n > 0 for n in norms[0])
    assert norms[0] == pytest.approx(norms[1])  # (DDP: the same averaged gradients on each rank)
