"""``pardash report`` of long, wide runs (review 257): past 32 ranks the rank table lists the
ranks that stand out and folds the rest (``--all-ranks`` lists each); the verdicts come before
it; a timeline cuts the run into about ten parts of its steps (a torchrun restart's steps run
again and a gap said so); ``--compare`` sets the stragglers' cost beside their verdicts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import pardash_env
from pardash.telemetry import schema
from pardash.telemetry.compare import compare_reports, render_compare_text
from pardash.telemetry.report import build_report, render_markdown, render_text

DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))
import make_logs  # noqa: E402  (tests/data/make_logs.py: the logs' writer)


def _wide_log(path: Path, world: int, *, straggler: int | None = None, steps: int = 40) -> Path:
    """A DDP job of ``world`` ranks, each step 100 ms; ``straggler``'s data 30 ms slower from step
    10, found at step 20 (the others wait for it); rank 5 exits with code 1 at the last step, the
    others finish."""
    log = make_logs.Log("wide")
    for r in range(world):
        log.add(make_logs.hello(r, world, strategy="ddp", host=f"node-{r // 8}", node=r // 8, local=r % 8, steps=steps), 0.1)
    t = 1.0
    for s in range(1, steps + 1):
        t += 0.1
        for r in range(world):
            slow = 0.03 if r == straggler and s >= 10 else 0.0
            self_s = 0.040 + 0.0001 * (r % 7) + slow
            log.add(schema.Step(rank=r, step=s, loss=2.0 - 0.01 * s, samples=16, step_s=0.1, data_s=0.01 + slow,
                                self_s=self_s), t)  # fmt: skip
        if s == 20 and straggler is not None:
            log.add(schema.Verdict(rank=straggler, verdict="straggler", cause="data", cost_s=0.03, step=20,
                                   message=f"rank {straggler} is a straggler"), t + 0.01)  # fmt: skip
    for r in range(world):
        log.add(schema.Event(rank=r, name="exit", code=1 if r == 5 else 0, step=steps), t + 0.2)
    log.write(path)
    return path


def _table_rows(text: str) -> list[str]:
    """The rank table's rows, header first."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("rank  host"))
    end = next(i for i in range(at + 1, len(lines)) if not lines[i].strip() or not lines[i][0].isspace() and not lines[i][0].isdigit())
    return lines[at:end]


def test_a_report_of_many_ranks_lists_the_ranks_that_stand_out_and_folds_the_rest(tmp_path):
    # Review 257: 1,024 ranks printed 1,056 lines, 1,024 of them near-identical rank rows, the
    # straggler's verdict and the memory summary only after all of them.
    rep = build_report(str(_wide_log(tmp_path / "wide.jsonl", 64, straggler=17)))
    text = render_text(rep)
    rows = _table_rows(text)
    assert rows[0].split()[-2:] == ["listed", "for"]
    listed = {row.split()[0]: row.split() for row in rows[1:]}
    # The rank that failed, the straggler (its self time the highest too), the lowest self time
    # (rank 0, the first of the least), and one row for the 61 others, in the order of their ranks.
    assert list(listed) == ["0", "1-4,6-16,18-63", "5", "17"], rows
    assert listed["0"][2] == "finished" and listed["0"][-2:] == ["lowest", "self"]
    assert listed["5"][2] == "exited" and listed["5"][-1] == "exited"
    assert listed["17"][-3:] == ["straggler;", "highest", "self"] and listed["17"][-11] == "70.3"
    assert listed["1-4,6-16,18-63"][1:4] == ["8", "hosts", "finished"] and listed["1-4,6-16,18-63"][-1] == "alike"
    assert "ranks 1-4, 6-16, 18-63 (61 ranks, alike): their row shows medians; step ms 100.0, self ms 40.0-40.6" in text
    assert "3 of 64 ranks listed one by one, those that stand out; --all-ranks lists every rank" in text
    # What it found before the table: the straggler, the exit and its root cause, memory.
    lines = text.splitlines()
    table = lines.index(rows[0])
    assert lines.index("stragglers:") < lines.index("exits:") < lines.index("root cause: rank 5 exited with code 1 at step 40") < table
    assert lines.index("no memory figures in this log") < table
    # Every row where asked, and in JSON always.
    every = _table_rows(render_text(rep, all_ranks=True))
    assert [int(row.split()[0]) for row in every[1:]] == list(range(64)) and "listed for" not in every[0]
    assert len(rep["ranks"]) == 64
    md = render_markdown(rep)
    assert md.index("## Stragglers") < md.index("## Stalls and exits") < md.index("## Memory") < md.index("## Ranks")
    md_rows = [line.split(" | ")[0] for line in md.splitlines() if line.startswith("| ") and line.split(" | ")[1].startswith(("node-", "8 hosts"))]
    assert md_rows == ["| 0", "| 1-4,6-16,18-63", "| 5", "| 17"]
    md_every = [line for line in render_markdown(rep, all_ranks=True).splitlines() if line.startswith("| ") and line.split(" | ")[1].startswith("node-")]
    assert len(md_every) == 64


def test_up_to_32_ranks_every_rank_has_its_row(tmp_path):
    text = render_text(build_report(str(_wide_log(tmp_path / "w.jsonl", 32, straggler=17))))
    rows = _table_rows(text)
    assert [int(row.split()[0]) for row in rows[1:]] == list(range(32)) and "listed for" not in rows[0]


def test_the_report_command_takes_all_ranks(tmp_path):
    path = _wide_log(tmp_path / "w.jsonl", 40, straggler=3)

    def report(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "pardash", "report", str(path), *args], capture_output=True, text=True,
                              env=pardash_env(), cwd=tmp_path, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert len(_table_rows(report())) == 5  # header, ranks 0, 3, 5, and the 37 others
    assert len(_table_rows(report("--all-ranks"))) == 41
    md = report("--format", "markdown", "--all-ranks").splitlines()
    assert sum(1 for line in md if line.startswith("| ") and line.split(" | ")[1].startswith("node-")) == 40
    assert len(json.loads(report("--format", "json"))["ranks"]) == 40


# -- the timeline -----------------------------------------------------------------------------


def test_the_timeline_cuts_the_run_into_ten_parts_with_the_stragglers_cost_in_each():
    rep = build_report(str(DATA / "ddp4_straggler.jsonl"))
    parts = rep["timeline"]
    assert [(p["first_step"], p["last_step"]) for p in parts] == [(s, s + 5) for s in range(1, 61, 6)]
    assert sum(p["samples"] for p in parts) == rep["samples"]
    # Rank 2 loaded its data 30 ms slower in steps 20-44: those parts' steps took 130 ms.
    assert [round(p["step_s_median"] * 1e3) for p in parts] == [100, 100, 100, 130, 130, 130, 130, 100, 100, 100]
    assert round(parts[5]["step_s_p90"] * 1e3) == 130 and round(parts[7]["step_s_p90"] * 1e3) == 130
    cost = rep["stragglers"][0]["cost_total_s"]
    assert sum(p["straggler_s"] for p in parts) == pytest.approx(cost)
    assert [p["straggler_s"] > 0 for p in parts] == [False, False, False, True, True, True, True, True, False, False]
    assert parts[4]["straggler_share"] == pytest.approx(parts[4]["straggler_s"] / parts[4]["train_s"])
    losses = [p["loss_median"] for p in parts]
    assert losses == sorted(losses, reverse=True)
    text = render_text(rep)
    assert "timeline (10 parts of the steps)" in text
    row = next(line for line in text.splitlines() if line.lstrip().startswith("25-30 "))
    # (data: rank 2's slower loads in it, beside the others' 10 ms of 100 ms)
    assert row.split()[5:11] == ["492", "130.2", "130.3", "13.8%", "2.6049", "0.18"], row
    assert [round(p["data_share"] * 100, 1) for p in parts][2:5] == [10.4, 13.4, 13.8], [p["data_share"] for p in parts]


def _restarted_log(path: Path, *, gap_s: float = 0.0, lost: range = range(0)) -> Path:
    """Two ranks, 100 ms steps: steps 1-40, rank 1 crashes, torchrun restarts the job 5 s later,
    which resumes from its checkpoint of step 30 and runs steps 31-80. ``gap_s``: in the first
    attempt, no step for that long after step 20; ``lost``: those steps' records never reached
    the log (the hub down)."""
    log = make_logs.Log("restarted")
    for r in range(2):
        log.add(make_logs.hello(r, 2, strategy="ddp", host="h", node=0, local=r, steps=80), 0.1)
    t = 1.0

    def steps(span: range, attempt: int) -> None:
        nonlocal t
        for s in span:
            t += 0.1 + (gap_s if s == 21 and attempt == 0 else 0.0)
            for r in range(2):
                if s in lost and attempt == 0:
                    log.seq[r] = log.seq.get(r, 0) + 1
                    continue
                log.add(schema.Step(rank=r, step=s, loss=3.0 - 0.02 * s, samples=8, step_s=0.1, self_s=0.05), t)

    steps(range(1, 41), 0)
    log.add(schema.Event(rank=1, name="exit", code=1, step=41, message="boom"), t + 0.05)
    log.add(schema.Event(rank=0, seq=-1, name="exit", code=-15, message="rank 0 was stopped by torchrun"), t + 0.1)
    t += 5.0
    for r in range(2):
        hello = make_logs.hello(r, 2, strategy="ddp", host="h", node=0, local=r, steps=80)
        hello.restart, hello.pid = 1, 5000 + r
        log.seq[r] = 0
        log.add(hello, t)
        log.add(schema.Event(rank=r, name="resume", step=30, message="resumed from step 30"), t + 0.01)
    steps(range(31, 81), 1)
    for r in range(2):
        log.add(schema.Event(rank=r, name="exit", code=0, step=80), t + 0.2)
    log.write(path)
    return path


def test_a_restarts_steps_run_again_are_parts_of_their_own_and_its_wait_in_none(tmp_path):
    rep = build_report(str(_restarted_log(tmp_path / "r.jsonl")))
    parts = rep["timeline"]
    spans = [(p["first_step"], p["last_step"], p["restart"]) for p in parts]
    # 40 steps before the restart, 50 after: parts of each in order, none across the restart.
    assert spans == [(1, 10, 0), (11, 20, 0), (21, 30, 0), (31, 40, 0), (31, 40, 1), (41, 50, 1), (51, 60, 1), (61, 70, 1),
                     (71, 80, 1)], spans  # fmt: skip
    assert [p["steps_again"] for p in parts] == [0, 0, 0, 0, 10, 0, 0, 0, 0]
    assert all(p["steps"] == 10 and p["steps_missing"] == 0 for p in parts)
    # The 5 s of the restart are in no part: each part's 10 steps took 1 s.
    assert [round(p["wall_s"], 3) for p in parts] == [1.0] * 9
    assert [round(p["samples_per_s"]) for p in parts] == [160] * 9
    assert sum(p["samples"] for p in parts) == rep["samples"]
    assert rep["restart_s"] == pytest.approx(5.0, abs=0.05)
    assert parts[4]["start_s"] - (parts[3]["start_s"] + parts[3]["wall_s"]) == pytest.approx(5.0, abs=0.05)
    text = render_text(rep)
    row = next(line for line in text.splitlines() if "run again" in line and line.lstrip().startswith("31-40"))
    assert row.endswith("10 steps run again after torchrun's restart 1"), row


def test_a_part_with_a_gap_says_it_and_one_with_steps_missing_too(tmp_path):
    rep = build_report(str(_restarted_log(tmp_path / "gap.jsonl", gap_s=20.0)))
    parts = rep["timeline"]
    gapped = [p for p in parts if p["longest_gap_s"]]
    assert len(gapped) == 1 and (gapped[0]["first_step"], gapped[0]["last_step"]) == (21, 30)
    assert gapped[0]["longest_gap_s"] == pytest.approx(20.0) and gapped[0]["gap_after_step"] == 20
    assert gapped[0]["wall_s"] == pytest.approx(21.0) and gapped[0]["samples_per_s"] == pytest.approx(160 / 21)
    assert "no step for 20.0 s after step 20" in render_text(rep)

    rep = build_report(str(_restarted_log(tmp_path / "lost.jsonl", lost=range(13, 18))))
    part = next(p for p in rep["timeline"] if p["first_step"] == 11)
    assert part["steps"] == 5 and part["steps_missing"] == 5 and part["last_step"] == 20
    assert "5 steps not in the log" in render_text(rep)


def test_a_script_that_logs_one_step_in_fifty_has_no_gaps_nor_steps_missing(tmp_path):
    log = make_logs.Log("sparse")
    log.add(make_logs.hello(0, 1, strategy="single", host="h", node=0, local=0, steps=3000), 0.1)
    for s in range(50, 3001, 50):
        log.add(schema.Step(rank=0, step=s, loss=1.0, samples=8, step_s=0.1), 1.0 + s * 0.1)
    log.write(tmp_path / "sparse.jsonl")
    rep = build_report(str(tmp_path / "sparse.jsonl"))
    parts = rep["timeline"]
    assert [(p["first_step"], p["last_step"], p["steps"]) for p in parts] == [(s + 50, s + 300, 6) for s in range(0, 3000, 300)]
    assert not any(p["longest_gap_s"] or p["steps_missing"] for p in parts)
    assert "no step for" not in render_text(rep) and "not in the log" not in render_text(rep)


# -- --compare -------------------------------------------------------------------------------


def test_compare_sets_the_stragglers_cost_beside_their_count(tmp_path):
    # Review 257: two runs with one straggler verdict each read "1 1 ... same"; what the
    # stragglers cost (21.3% of training against 20.9%) was not compared.
    a = build_report(str(_wide_log(tmp_path / "a.jsonl", 4, straggler=1)))
    b = build_report(str(_wide_log(tmp_path / "b.jsonl", 4, straggler=1, steps=80)))
    cmp = compare_reports(a, b)
    rows = {r["metric"]: r for r in cmp["rows"]}
    assert rows["stragglers"]["a"] == rows["stragglers"]["b"] == 1 and rows["stragglers"]["verdict"] == "same"
    cost_a, cost_b = a["stragglers"][0]["cost_total_s"], b["stragglers"][0]["cost_total_s"]
    assert cost_b > cost_a > 0
    assert rows["straggler_s"]["a"] == pytest.approx(cost_a) and rows["straggler_s"]["b"] == pytest.approx(cost_b)
    assert rows["straggler_s"]["verdict"] == "worse"
    assert rows["straggler_share"]["a"] == pytest.approx(a["stragglers"][0]["share_of_train"])
    assert rows["straggler_share"]["b"] == pytest.approx(b["stragglers"][0]["share_of_train"])
    text = render_compare_text(cmp, width=200)
    said = next(line for line in text.splitlines() if line.startswith("time the others waited for stragglers"))
    assert said.split()[-8:] == [f"{cost_a:.2f}", "s", f"{cost_b:.2f}", "s", f"+{cost_b - cost_a:.2f}", "s",
                                 f"{(cost_b / cost_a - 1) * 100:+.1f}%", "worse"], said  # fmt: skip
    share = next(line for line in text.splitlines() if line.startswith("the same, share of training"))
    sa, sb = a["stragglers"][0]["share_of_train"], b["stragglers"][0]["share_of_train"]
    assert share.split()[5:9] == [f"{sa * 100:.1f}%", f"{sb * 100:.1f}%", f"+{(sb - sa) * 100:.1f}", "points"], share
