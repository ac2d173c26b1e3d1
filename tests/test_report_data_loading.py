"""The report says what loading data took of the steps, and calls a job whose every rank spends
a good share of its steps waiting for its data input-bound (review 277: a job two thirds data
loading said so nowhere; its medians hid the epochs' DataLoader start-ups, 88% of its time)."""

from __future__ import annotations

import msgspec
import pytest

from pardash.telemetry import schema
from pardash.telemetry.report import build_report, render_markdown, render_text

T = 1.0e9


def _log(tmp_path, data_s, name="run.jsonl", spike_every=0, loader_s=None):
    """Two ranks' 100 steps of 20 ms, ``data_s`` (rank -> seconds a step, None: not measured)
    of each loading data; ``spike_every``: each such step's data took 200 ms more (an epoch's
    DataLoader workers starting)."""
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, strategy="ddp", t=T) for r in (0, 1)]
    for s in range(1, 101):
        for r in (0, 1):
            spike = 0.2 if spike_every and s % spike_every == 1 else 0.0
            d = data_s[r]
            records.append(schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.02 + spike, samples=8, t=T + s * 0.03,
                                       data_s=None if d is None else d + spike, loss=1.0,
                                       loader_s=None if loader_s is None else loader_s[r]))  # fmt: skip
    path = tmp_path / name
    path.write_bytes(b"".join(schema.encode_json(msgspec.structs.replace(m, hseq=i + 1)) + b"\n" for i, m in enumerate(records)))
    return str(path)


def _row(text: str) -> str | None:
    rows = [line for line in text.splitlines() if line.startswith("data loading")]
    return " ".join(rows[0].split()[2:]) if rows else None


def test_a_job_whose_ranks_all_wait_for_their_data_is_said_input_bound(tmp_path):
    rep = build_report(_log(tmp_path, {0: 0.013, 1: 0.015}))
    dl = rep["data_loading"]
    assert (round(dl["share"], 3), round(dl["share_min"], 3), round(dl["share_max"], 3), dl["input_bound"]) == (0.7, 0.65, 0.75, True)
    assert _row(render_text(rep)) == ("70% of the ranks' step time (65-75% by rank): input-bound, every rank waits for its data "
                                      "(more DataLoader workers, num_workers, or a faster pipeline would speed it up)")  # fmt: skip
    assert "| data loading | 70% of the ranks' step time (65-75% by rank): input-bound" in render_markdown(rep)



def test_epoch_starts_that_medians_hide_count_and_a_little_data_loading_is_said_without_a_verdict(tmp_path):
    # 1 ms of 20 a step, and every 25th step's 200 ms DataLoader start-up: the median data time
    # says 1 ms (5%); the time spent, 32% (0.9 s of 2.8).
    rep = build_report(_log(tmp_path, {0: 0.001, 1: 0.001}, spike_every=25))
    assert rep["ranks"][0]["median_data_s"] == 0.001
    assert _row(render_text(rep)).startswith("32% of the ranks' step time: input-bound")
    rep = build_report(_log(tmp_path, {0: 0.002, 1: 0.002}, name="light.jsonl"))
    assert _row(render_text(rep)) == "10% of the ranks' step time"
    # One rank's slow loader is a straggler, not the job input-bound: the other waits in comm.
    rep = build_report(_log(tmp_path, {0: 0.001, 1: 0.015}, name="one.jsonl"))
    assert rep["data_loading"]["input_bound"] is False and _row(render_text(rep)) == "40% of the ranks' step time (5-75% by rank)"
    # Not measured (a script's explicit API with no data phase): no line.
    rep = build_report(_log(tmp_path, {0: None, 1: None}, name="none.jsonl"))
    assert rep["data_loading"] is None and _row(render_text(rep)) is None


def test_a_stall_in_data_loading_as_an_epoch_begins_says_why(tmp_path):
    # Review 277: a DataLoader whose workers (not persistent) took 7 s to start each epoch read
    # "ranks 0-1 stalled in data after step 100 for 7.1 s" beside real hangs, with no word why.
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, strategy="ddp", t=T) for r in (0, 1)]
    seq = {0: 0, 1: 0}
    t = T
    for s in range(1, 121):
        t += 0.03 if s not in (31, 51, 101) else 7.1
        for r in (0, 1):
            if s in (31, 51, 101):  # stalled in data before this step, then resumed
                records.append(schema.Verdict(run="r", rank=r, seq=-1, verdict="stalled", cause="data", step=s - 1, t=t - 2.0,
                                              message=f"rank {r} stalled in data after step {s - 1} (5 s without progress)"))  # fmt: skip
                records.append(schema.Verdict(run="r", rank=r, seq=-1, verdict="resumed", step=s, t=t, message=f"rank {r} resumed at step {s}"))
            seq[r] += 1
            records.append(schema.Step(run="r", rank=r, seq=seq[r], step=s, step_s=0.02, samples=8, t=t, epoch=(s - 1) // 50, data_s=0.005))
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(schema.encode_json(msgspec.structs.replace(m, hseq=i + 1)) + b"\n" for i, m in enumerate(records)))
    text = render_text(build_report(str(path)))
    stalls = text.split("stalls:")[1].split("exits:")[0].strip().splitlines()
    why = " (an epoch's first batch: its DataLoader workers starting? persistent_workers=True keeps them)"
    assert [" ".join(line.split()) for line in stalls] == [
        "ranks 0-1 stalled in data after step 30 for 7.1 s; resumed at step 31",  # (mid-epoch: a stall, no more said)
        f"ranks 0-1 stalled in data after step 50 for 7.1 s; resumed at step 51{why}",
        f"ranks 0-1 stalled in data after step 100 for 7.1 s; resumed at step 101{why}",
    ], stalls


def test_data_verdicts_on_the_ranks_by_turns_with_quiet_between_say_the_job_is_data_bound(tmp_path):
    # Two DataLoader workers a rank on a busy host: rank 1, rank 0, rank 1, rank 0 named in
    # spells with a while between each; every rank's loader as slow (40% of its steps). The
    # line said the verdict "moved 2 times" (only those handed straight on), or nothing.
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, strategy="ddp", t=T) for r in (0, 1)]
    spells = [(1, 20, 60), (0, 120, 160), (1, 220, 260), (0, 320, 360)]  # (rank, found at, cleared at)
    t = T
    for s in range(1, 401):
        t += 0.025
        for r in (0, 1):
            records.append(schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.025, samples=8, t=t, data_s=0.010, self_s=0.011))
        for r, found, cleared in spells:
            if s == found:
                records.append(schema.Verdict(run="r", rank=r, seq=-1, verdict="straggler", cause="data", step=s, cost_s=0.004,
                                              message=f"rank {r} is a straggler", t=t))  # fmt: skip
            if s == cleared:
                records.append(schema.Verdict(run="r", rank=r, seq=-1, verdict="straggler_cleared", step=s, message="cleared", t=t))
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(schema.encode_json(msgspec.structs.replace(m, hseq=i + 1)) + b"\n" for i, m in enumerate(records)))
    rep = build_report(str(path))
    db = rep["data_bound"]
    assert (db["turns"], db["spells"], db["ranks"]) == (3, 4, [0, 1]), db
    assert ("the data-loading verdict fell on ranks 0-1 by turns (4 spells, the rank named changing 3 times), and every rank "
            "spent alike time loading data (40% of its steps)") in render_text(rep)  # fmt: skip


def test_time_between_steps_outside_the_dataloader_is_not_called_input_bound(tmp_path):
    # Review 308: a script that slept 10 ms after its optimizer's step, over a DataLoader of
    # microseconds, read "data loading 68% ...: input-bound, every rank waits for its data (more
    # DataLoader workers ... would speed it up)". The zero-code hooks now time the DataLoader.
    rep = build_report(_log(tmp_path, {0: 0.013, 1: 0.015}, loader_s={0: 0.0003, 1: 0.0004}))
    dl = rep["data_loading"]
    assert (dl["input_bound"], dl["between_steps"], round(dl["loader_share"], 4)) == (False, True, 0.0175)
    line = [x for x in render_text(rep).splitlines() if x.startswith("between steps")]
    assert line == ["between steps      70% of the ranks' step time (65-75% by rank): 2% in the DataLoader, 68% the script's own work "
                    "between steps (logging, evaluating, saving, preprocessing on the main thread), which DataLoader workers do not "
                    "speed up"], line
    # A loader that takes the time: input-bound, as before, the DataLoader's share said.
    rep = build_report(_log(tmp_path, {0: 0.013, 1: 0.015}, name="slow.jsonl", loader_s={0: 0.0128, 1: 0.0149}))
    dl = rep["data_loading"]
    assert (dl["input_bound"], dl["between_steps"]) == (True, False)
    assert _row(render_text(rep)) == ("70% of the ranks' step time (65-75% by rank): input-bound, every rank waits for its data: 69% in the "
                                      "DataLoader (more DataLoader workers, num_workers, would speed that up)")
    # Both parts, each with what would speed it up (review 314: 23% in the DataLoader beside 47% of
    # preprocessing on the main thread read "more DataLoader workers would not speed it up", and
    # two workers took 24% off its step); and one rank's own work is no "data loading" (review 313).
    rep = build_report(_log(tmp_path, {0: 0.014, 1: 0.014}, name="mixed.jsonl", loader_s={0: 0.0046, 1: 0.0046}))
    assert rep["data_loading"]["between_steps"] and _row(render_text(rep)) is None  # (labelled "between steps")
    line = [x for x in render_text(rep).splitlines() if x.startswith("between steps")][0]
    assert "23% in the DataLoader (more DataLoader workers, num_workers, would speed that up), 47% the script's own work" in line, line
    rep = build_report(_log(tmp_path, {0: 0.0004, 1: 0.019}, name="one.jsonl", loader_s={0: 0.0003, 1: 0.0002}))
    assert not rep["data_loading"]["input_bound"] and rep["data_loading"]["between_steps"]


def test_a_scripts_steps_none_of_which_came_from_a_dataloader_are_its_own_work(tmp_path):
    # Review 313: a script with no DataLoader that slept after its optimizer's step read
    # "input-bound, every rank waits for its data (more DataLoader workers ... would speed it up)".
    path = tmp_path / "nodl.jsonl"
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, strategy="ddp", t=T, source="auto", pardash_version="0.1.0") for r in (0, 1)]
    records += [schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.02, samples=8, t=T + s * 0.03, data_s=0.014, loss=1.0)
                for s in range(1, 101) for r in (0, 1)]  # fmt: skip
    path.write_bytes(schema.encode_json_lines(records))
    rep = build_report(str(path))
    assert rep["data_loading"]["no_dataloader"] and not rep["data_loading"]["input_bound"]
    line = [x for x in render_text(rep).splitlines() if x.startswith("between steps")]
    assert line == ["between steps      70% of the ranks' step time: no torch DataLoader gave the steps their batches: the script's own "
                    "work between steps (making its batches, logging, evaluating, saving)"], line
    # A log older than the DataLoader's timing says what it said (its hooks timed none).
    old = tmp_path / "old.jsonl"
    old.write_bytes(schema.encode_json_lines([msgspec.structs.replace(m, pardash_version="") if isinstance(m, schema.Hello) else m for m in records]))
    assert build_report(str(old))["data_loading"]["input_bound"]


def test_a_rank_that_now_and_then_holds_the_others_is_said(tmp_path):
    # Review 314: rank 0 slept 1 s after its checkpoint every 50 steps, the others waiting in their
    # all-reduce: no straggler step after step, named nowhere; the report said "stragglers: none".
    path = tmp_path / "holds.jsonl"
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, strategy="ddp", t=T, source="auto", pardash_version="0.1.0") for r in (0, 1)]
    t = T
    for s in range(1, 201):
        held = s % 50 == 1 and s > 1
        t += 1.02 if held else 0.02
        for r in (0, 1):
            own = 1.0 if held and r == 0 else 0.01
            records.append(schema.Step(run="r", rank=r, seq=s, step=s, samples=8, t=t, loss=1.0, step_s=1.02 if held else 0.02,
                                       data_s=own - 0.005, loader_s=0.0005, self_s=own, comm_s=1.01 if held and r == 1 else 0.005))  # fmt: skip
    path.write_bytes(schema.encode_json_lines(records))
    rep = build_report(str(path))
    (hold,) = rep["holds"]
    assert (hold["rank"], hold["count"], hold["steps"], hold["every"], hold["where"]) == (0, 3, [51, 101, 151], 50, "own work")
    assert hold["total_s"] == pytest.approx(3.0, abs=0.1)
    line = [x for x in render_text(rep).splitlines() if x.startswith("held up")]
    assert line == ["held up: rank 0 held the others 3 times, at steps 51, 101, 151 (every 50 steps), 1.01 s each, 3.02 s in all "
                    f"({hold['share_of_train'] * 100:.1f}% of training), in its own code between steps (not its DataLoader)"], line
    assert "- Held up: rank 0 held the others 3 times" in render_markdown(rep)
    # A run whose steps are all alike holds nobody.
    assert build_report(_log(tmp_path, {0: 0.013, 1: 0.015}))["holds"] == []
