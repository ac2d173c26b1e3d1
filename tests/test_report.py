"""``pardash report``: pinned JSON and markdown on recorded logs (damaged ones included), the
answers a user reads in them, ``--compare``, and the headless progress (bar or lines)."""

from __future__ import annotations

import json
import math
import os
import pty
import random
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from helpers import TerminalOutput, pardash_env
from pardash.telemetry.compare import render_compare_markdown
from pardash.telemetry.logreader import load_log
from pardash.telemetry import schema
from pardash.telemetry.printer import progress_line
from pardash.telemetry.report import build_report, render_markdown, render_text
from pardash.telemetry.state import RunState
from pardash.telemetry.summary import samples_per_s_recent

DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))
import make_logs  # noqa: E402  (tests/data/make_logs.py: the logs' writer)

LOGS = make_logs.SYNTHETIC + make_logs.REAL


def _same(got, want, path="$"):
    """Equal, with floats compared to 1e-9 relative (the same arithmetic on another libm)."""
    if isinstance(want, float) and isinstance(got, (int, float)):
        assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12), f"{path}: {got} != {want}"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), f"{path}: keys {list(got)} != {list(want)}"
        for k in want:
            _same(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{path}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{path}[{i}]")
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"


# -- pinned outputs ----------------------------------------------------------------------


def test_the_synthetic_logs_are_reproducible(tmp_path):
    make_logs.write_logs(tmp_path)
    for name in make_logs.SYNTHETIC:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), f"{name}: rerun tests/data/make_logs.py"


@pytest.mark.parametrize("name", LOGS)
def test_report_json_is_pinned(name):
    want = json.loads((DATA / f"{name.removesuffix('.jsonl')}.report.json").read_text())
    _same(json.loads(json.dumps(make_logs.pinned_report(name))), want)


@pytest.mark.parametrize("name", LOGS)
def test_report_markdown_is_pinned(name):
    want = (DATA / f"{name.removesuffix('.jsonl')}.report.md").read_text()
    assert render_markdown(make_logs.pinned_report(name)) == want


@pytest.mark.parametrize("a, b", make_logs.COMPARE)
def test_compare_is_pinned(a, b):
    stem = f"{a.removesuffix('.jsonl')}.vs.{b.removesuffix('.jsonl')}"
    cmp = make_logs.pinned_compare(a, b)
    _same(json.loads(json.dumps(cmp)), json.loads((DATA / f"{stem}.compare.json").read_text()))
    assert render_compare_markdown(cmp) == (DATA / f"{stem}.compare.md").read_text()


# -- what the report says ----------------------------------------------------------------


def test_the_contract_keys_of_the_first_report_are_kept():
    rep = build_report(str(DATA / "real_fsdp2.jsonl"))
    for key in ("ranks", "stragglers", "exits", "lost_messages", "strategy", "world_size"):
        assert key in rep
    for r in rep["ranks"]:
        assert {"rank", "steps", "median_step_s", "last_loss", "params_bytes", "params_full_bytes"} <= set(r)
    assert rep["strategy"] == "fsdp" and rep["world_size"] == 2 and rep["exits"] == [] and rep["stragglers"] == []
    for r in rep["ranks"]:
        assert r["params_bytes"] * 2 == pytest.approx(r["params_full_bytes"], rel=0.01)


def test_damaged_lines_are_skipped_and_counted_never_raised():
    rep = build_report(str(DATA / "ddp4_straggler.jsonl"))
    assert rep["skipped_by_reason"] == {"invalid": 2, "malformed": 2, "truncated": 1}
    assert rep["skipped_lines"] == 5
    assert [r["steps"] for r in rep["ranks"]] == [60, 60, 60, 60]
    assert rep["lost_messages"] == 1 and [r["lost_messages"] for r in rep["ranks"]] == [0, 1, 0, 0]
    text = render_text(rep).splitlines()
    assert "lost messages      1" in text and "skipped log lines  5 (2 invalid, 2 malformed, 1 truncated)" in text
    # said once (the summary), no line ends in spaces, none is wrapped (one line a rank)
    assert sum(line.startswith("lost messages") for line in text) == 1
    assert not [line for line in text if line != line.rstrip()]
    assert len([line for line in text if line.lstrip().split(" ")[0] in ("0", "1", "2", "3") and "finished" in line]) == 4
    assert "5 (2 invalid, 2 malformed, 1 truncated)" in render_markdown(rep)


def test_a_step_without_its_time_does_not_stretch_the_run_to_1970(tmp_path):
    # t is 0 on a step line written by hand or by another tool: read as 1970, it made the
    # training time 56 years and the rate 0 samples/s.
    source = DATA / "real_fsdp2.jsonl"
    data = source.read_bytes()
    want = build_report(str(source))
    step = next(line for line in data.splitlines() if b'"kind":"step"' in line)
    timeless = msgspec.json.decode(step)
    timeless["t"] = 0.0
    timeless["seq"] = 10**6  # another line, not a copy of one already read
    log = tmp_path / "timeless.jsonl"
    log.write_bytes(data.rstrip(b"\n") + b"\n" + msgspec.json.encode(timeless) + b"\n")
    got = build_report(str(log))
    assert got["train_s"] == want["train_s"] > 0
    assert got["samples"] > want["samples"] and got["samples_per_s"] > want["samples_per_s"]


def with_clock_off(source: Path, out: Path, *, rank: int, shift_s: float) -> Path:
    """``source`` with every record ``rank`` sent stamped ``shift_s`` off (its node's clock)."""
    lines = []
    for line in source.read_bytes().splitlines():
        rec = msgspec.json.decode(line)
        if rec.get("rank", -1) == rank and rec.get("seq", 0) >= 0:
            rec["t"] += shift_s
        lines.append(msgspec.json.encode(rec))
    out.write_bytes(b"\n".join(lines) + b"\n")
    return out


T_1970 = -1796062903.0 + 5  # real_ddp2's start, back to 5 s after the epoch


@pytest.mark.parametrize("rank, shift_s, said", [
    (1, T_1970, "rank 1's clock is 57 years behind the hub's; its times are not used for the run's span; set its node's clock (NTP)"),
    (0, 3e8, "rank 0's clock is 10 years ahead of the hub's; its times are not used for the run's span; set its node's clock (NTP)"),
])  # fmt: skip
def test_a_rank_whose_clock_is_years_off_is_said_and_left_out_of_the_runs_span(tmp_path, rank, shift_s, said):
    # A node whose clock was never set (1970) or set years ahead: the report of a half-second
    # run read a duration of 1796062898 s (57 years) and 0 samples/s, with no word of a clock.
    source = DATA / "real_ddp2.jsonl"
    log = with_clock_off(source, tmp_path / "off.jsonl", rank=rank, shift_s=shift_s)
    want, got = build_report(str(source)), build_report(str(log))
    other = [m.t for m in load_log(source)[0] if m.rank == 1 - rank]
    assert got["duration_s"] == pytest.approx(max(other) - min(other))  # the other rank's span: a fraction of a second
    assert 0.9 * want["train_s"] < got["train_s"] <= want["train_s"]
    assert 0.9 * want["samples_per_s"] < got["samples_per_s"] < 1.1 * want["samples_per_s"]
    assert [e["rank"] for e in got["clocks_off"]] == [rank] and "clocks_off" not in want
    assert [r["steps"] for r in got["ranks"]] == [r["steps"] for r in want["ranks"]]  # its steps still count
    p = subprocess.run([sys.executable, "-m", "pardash", "report", str(log)], capture_output=True, text=True, env=pardash_env(), timeout=60)
    assert p.returncode == 0 and p.stderr == f"pardash: warning: {log}: {said}\n"
    duration = next(line for line in render_text(got).splitlines() if line.startswith("duration"))
    assert duration in p.stdout.splitlines() and " s (training 0.5" in duration and said in p.stdout


def on_node_clocks(source: Path, out: Path, shift_s: dict[int, float], *, verdict_seq: int | None = None) -> Path:
    """``source`` with what rank r's node stamps (its records, and its launcher's notes of its
    exit: seq -1) ``shift_s[r]`` off; the hub's own records and verdicts as they were.
    ``verdict_seq``: the verdicts' seq (-1 as the hub writes them, 0 as older versions did)."""
    recs = [msgspec.json.decode(line) for line in source.read_bytes().splitlines()]
    for rec in recs:
        if rec["kind"] == "verdict":
            if verdict_seq is not None:
                rec["seq"] = verdict_seq
        elif rec.get("rank", -1) in shift_s:
            rec["t"] += shift_s[rec["rank"]]
    out.write_bytes(b"".join(msgspec.json.encode(rec) + b"\n" for rec in recs))
    return out


CRASH_TO_1970 = 86400 - 1700000000.0  # fsdp4_crash's start, back to 1970-01-02
YEAR_S = 365.25 * 86400


def rank_span(path: Path, ranks) -> float:
    """How long ``ranks`` spoke in ``path`` (their records and their launchers' notes of their exits)."""
    ts = [m.t for m in load_log(path)[0] if m.rank in ranks and not isinstance(m, schema.Verdict)]
    return max(ts) - min(ts)


@pytest.mark.parametrize("source, ranks, said", [
    ("fsdp4_crash", (0, 1, 2, 3), "the hub's clock is 54 years behind every rank's; the ranks' times are used for the run's span; "
     "set the hub's machine's clock (NTP)"),
    ("real_ddp2", (0, 1), "the clocks of ranks 0-1 and the hub's disagree by 57 years (the hub's is behind); the ranks' times are used "
     "for the run's span; set the wrong clock (NTP)"),
    ("real_ddp2", (0,), "rank 0's clock and the hub's disagree by 57 years (the hub's is behind); the rank's times are used for the "
     "run's span; set the wrong clock (NTP)"),
], ids=["ranks on two hosts", "ranks on one host", "one rank"])  # fmt: skip
def test_a_hub_whose_clock_is_off_leaves_the_ranks_times_standing(tmp_path, source, ranks, said):
    # Every rank disagreeing with the hub the same way: no rank's times are left out. Ranks on
    # two hosts agreeing with each other say the hub's is the clock off (a hub run alone on a
    # login node); one host, or one rank, against the hub is one clock against another: the
    # report blamed the hub's, and said nothing of what to do.
    source = DATA / f"{source}.jsonl"
    log = tmp_path / "hub_off.jsonl"
    lines = [msgspec.json.decode(line) for line in source.read_bytes().splitlines()]
    lines = [rec for rec in lines if rec.get("rank", -1) in (-1, *ranks)]
    for rec in lines:
        if rec.get("rank", -1) < 0 or rec["kind"] == "verdict":  # the hub's own records
            rec["t"] -= (1700000000.0 if "crash" in source.name else 1796062903.0) - 86400
    log.write_bytes(b"\n".join(msgspec.json.encode(rec) for rec in lines) + b"\n")
    got = build_report(str(log))
    assert "clocks_off" not in got and got["hub_clock_off_s"] < -53 * YEAR_S
    assert got["hub_clock_blamed"] is (len(ranks) == 4)
    assert got["duration_s"] == pytest.approx(rank_span(source, ranks))
    p = subprocess.run([sys.executable, "-m", "pardash", "report", str(log)], capture_output=True, text=True, env=pardash_env(), timeout=60)
    assert p.returncode == 0 and p.stderr == f"pardash: warning: {log}: {said}\n"


def test_a_nodes_launcher_notes_of_exits_are_on_its_clock_not_the_hubs(tmp_path):
    # Node 1 (ranks 2-3) at 1970, and its launcher's notes of their exits (seq -1) stamped with
    # node 1's clock: they were taken for the hub's, which moved the hub's clock to 1970; node 0's
    # ranks read as 54 years ahead of it and 1970 entered the run's span (a duration of 54 years).
    source = DATA / "fsdp4_crash.jsonl"
    log = on_node_clocks(source, tmp_path / "node1_1970.jsonl", {2: CRASH_TO_1970, 3: CRASH_TO_1970})
    got = build_report(str(log))
    assert [e["rank"] for e in got["clocks_off"]] == [2, 3] and "hub_clock_off_s" not in got
    assert got["duration_s"] == pytest.approx(rank_span(source, (0, 1)))  # node 0's: 12 s
    clocks = [line for line in render_text(got).splitlines() if "years" in line]
    assert len(clocks) == 1 and "ranks 2-3: their clocks are 54 years behind the hub's" in clocks[0]


@pytest.mark.parametrize("verdict_seq", [-1, 0], ids=["as the hub writes them", "seq 0, as older versions wrote them"])
def test_the_hubs_verdicts_are_left_out_of_the_span_when_its_clock_is_the_one_off(tmp_path, verdict_seq):
    # Every node 3 hours ahead of the hub: the ranks' times stand, as the report says, but the
    # verdicts (on the hub's clock) stayed in the run's span: 3 hours and 12 s for a 12 s run.
    # An older log's verdicts (seq 0) read as their rank's own records: the same 3 hours.
    source = DATA / "fsdp4_crash.jsonl"
    log = on_node_clocks(source, tmp_path / "hub_behind.jsonl", dict.fromkeys(range(4), 3 * 3600.0), verdict_seq=verdict_seq)
    want, got = build_report(str(source)), build_report(str(log))
    assert "clocks_off" not in got and got["hub_clock_off_s"] == pytest.approx(-3 * 3600, abs=60)
    assert got["duration_s"] == pytest.approx(want["duration_s"]) and got["train_s"] == pytest.approx(want["train_s"])
    # Rank 3's stall: its length from its last step to its next, both on its own clock (a
    # verdict ending it would be on the hub's: then no length rather than a wrong one)
    assert want["stalls"] == got["stalls"] and want["stalls"][0]["seconds"] > 8


def test_a_rank_ahead_is_caught_in_a_log_the_hub_wrote_nothing_after(tmp_path):
    # A clock ahead was caught only by a hub record after the rank's: a log without "hub
    # stopped" (the hub killed, a live log) ran 57 years, of which 57 years training, unsaid.
    source = DATA / "real_ddp2.jsonl"
    log = on_node_clocks(source, tmp_path / "ahead.jsonl", {1: 57 * YEAR_S})
    log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:-1]))  # the hub's last line
    want, got = build_report(str(source)), build_report(str(log))
    assert [e["rank"] for e in got["clocks_off"]] == [1] and 56 * YEAR_S < got["clocks_off"][0]["off_s"] < 58 * YEAR_S
    assert got["duration_s"] == pytest.approx(rank_span(source, (0,))) and 0 < got["train_s"] <= want["train_s"]
    assert "rank 1's clock is 57 years ahead of the hub's" in render_text(got)
    # A rank that started 2 hours after the others (the hub and rank 0 waited for it), then
    # trained with them: its first time only is late, as no clock's would be.
    late = on_node_clocks(source, tmp_path / "late.jsonl", {})
    recs = [msgspec.json.decode(line) for line in late.read_bytes().splitlines()]
    assert [rec.get("rank", -1) for rec in recs[:2]] == [-1, 0]  # "hub started", rank 0's hello
    for rec in recs[:2]:
        rec["t"] -= 2 * 3600
    late.write_bytes(b"".join(msgspec.json.encode(rec) + b"\n" for rec in recs[:-1]))
    assert "clocks_off" not in build_report(str(late))


def test_a_line_whose_time_the_hub_would_refuse_is_skipped_and_replay_still_plays(tmp_path):
    # A step at t -1e308 (edited by hand; a live hub refuses a time below 0): the replay's
    # clock, computed from it, could not move (-1e308 + a frame is -1e308) and seek() never
    # returned; the report's duration read 1e308 s.
    from pardash.telemetry.client import ReplaySource

    source = DATA / "real_fsdp2.jsonl"
    data = source.read_bytes()
    step = next(line for line in data.splitlines() if b'"kind":"step"' in line)
    for t in (-1e308, -1.0):
        wild = msgspec.json.decode(step)
        wild["seq"] = 10**6
        log = tmp_path / f"wild{t}.jsonl"
        line = msgspec.json.encode(wild).replace(b'"t":', b'"t":' + repr(t).encode() + b',"_t":', 1)
        log.write_bytes(data.rstrip(b"\n") + b"\n" + line + b"\n")
        rep = build_report(str(log))
        assert rep["skipped_by_reason"].get("out_of_range") == 1, (t, rep["skipped_by_reason"])
        assert rep["duration_s"] == build_report(str(source))["duration_s"]
        replay = ReplaySource(str(log))
        replay.seek(5.0)
        assert replay.state.ranks


def test_a_line_of_a_rank_past_the_world_or_of_a_newer_schema_is_skipped(tmp_path):
    # A step of rank 99999 in a log of 2 ranks (edited by hand; the live hub refuses it as
    # rank_out_of_range) made a third rank: "world size 3", "last step 3 on the slowest
    # rank", a TensorBoard folder rank99999. A log of a newer pardash was read as if it were
    # this one's: its fields may mean other things.
    from pardash.telemetry.export import export_tensorboard
    from pardash.telemetry.logreader import LogReadStats, no_records, read_log

    source = DATA / "real_ddp2.jsonl"
    data = source.read_bytes()
    whole = build_report(str(source))
    phantom = tmp_path / "phantom.jsonl"
    phantom.write_bytes(data + b'{"kind":"step","rank":99999,"seq":3,"step":3,"step_s":1e308,"t":1.0}\n')
    rep = build_report(str(phantom))
    assert rep["skipped_by_reason"].get("out_of_range") == 1, rep["skipped_by_reason"]
    assert [r["rank"] for r in rep["ranks"]] == [0, 1] and rep["last_step"] == whole["last_step"]
    assert sorted(export_tensorboard(str(phantom), str(tmp_path / "tb"))["dirs"]) == [0, 1]
    # ... nor a hello of its own (a rank past the world it says)
    phantom.write_bytes(data + b'{"kind":"hello","rank":99999,"seq":0,"world_size":2,"pid":5,"t":1.0}\n')
    rep = build_report(str(phantom))
    assert rep["skipped_by_reason"].get("out_of_range") == 1 and rep["world_size"] == 2

    newer = tmp_path / "newer.jsonl"
    lines = data.splitlines()
    newer.write_bytes(b"\n".join(line.replace(b'{"kind"', b'{"v":99,"kind"', 1) for line in lines) + b"\n")
    stats = LogReadStats()
    assert list(read_log(newer, stats)) == []
    assert stats.skipped == {"newer_version": len(lines)}
    assert no_records(newer, stats) == (f"{newer}: written by a newer pardash ({len(lines)} of {len(lines)} line(s) in a "
                                        "schema past version 1); read it with that version")  # fmt: skip
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(data + lines[-1].replace(b'{"kind"', b'{"v":2,"kind"', 1) + b"\n")
    assert build_report(str(mixed))["skipped_by_reason"] == {"newer_version": 1}


def test_ranks_that_ended_at_different_steps_are_told_both(tmp_path):
    # A rank killed at step 814 while the others went on to 817: "steps 817 (last step 814)".
    from pardash.telemetry.report import render_text

    source = DATA / "real_ddp2.jsonl"
    whole = build_report(str(source))
    last = whole["last_step"]
    lines = [
        line for line in source.read_bytes().splitlines()
        if not (b'"kind":"step"' in line and msgspec.json.decode(line)["rank"] == 1 and msgspec.json.decode(line)["step"] > last - 3)
    ]  # fmt: skip
    log = tmp_path / "cut.jsonl"
    log.write_bytes(b"\n".join(lines) + b"\n")
    text = render_text(build_report(str(log)))
    assert f"(last step {last - 3} on the slowest rank, {last} on the furthest" in text
    assert f"(last step {last})" in render_text(whole) or f"(last step {last};" in render_text(whole)


def test_evaluations_are_counted_outside_the_steps(tmp_path):
    # The zero-code hooks' eval events (a validation loop between steps) were in no report.
    source = DATA / "real_fsdp2.jsonl"
    lines = [
        msgspec.json.encode(schema.Event(name="eval", rank=rank, step=step, duration_s=took, seq=10**6 + step, t=1.0))
        for rank, took in ((0, 0.25), (1, 0.5)) for step in (10, 20)
    ]  # fmt: skip
    log = tmp_path / "evals.jsonl"
    log.write_bytes(source.read_bytes().rstrip(b"\n") + b"\n" + b"\n".join(lines) + b"\n")
    rep = build_report(str(log))
    assert rep["evaluations"] == {"count": 2, "seconds": 1.0, "ranks": [0, 1]}
    assert "evaluations        2, 1.0 s in all" in render_text(rep)
    assert build_report(str(source))["evaluations"] is None
    # Short ones, as a small validation's: "0.0 s in all" of 15-21 ms each.
    short = tmp_path / "short.jsonl"
    short.write_bytes(log.read_bytes().replace(b'"duration_s":0.25', b'"duration_s":0.015').replace(b'"duration_s":0.5', b'"duration_s":0.021'))
    assert "evaluations        2, 0.042 s in all" in render_text(build_report(str(short)))  # (each the slowest rank's)


def test_a_log_cut_anywhere_or_sprayed_with_garbage_still_reports(tmp_path):
    raw = (DATA / "fsdp4_crash.jsonl").read_bytes()
    rng = random.Random(0)
    for i, cut in enumerate(sorted(rng.sample(range(1, len(raw)), 25))):
        log = tmp_path / f"cut{i}.jsonl"
        body = bytearray(raw[:cut])
        for _ in range(3):  # and a few bytes flipped on the way
            at = rng.randrange(len(body))
            body[at] = rng.randrange(256)
        log.write_bytes(bytes(body))
        rep = build_report(str(log))
        render_text(rep)
        render_markdown(rep)
        # Every line that is not blank is either read or skipped and counted, and the report
        # says the reader's count.
        records, stats = load_log(log)
        lines = sum(1 for piece in bytes(body).split(b"\n") if piece.strip())
        assert len(records) + stats.skipped_total == lines
        assert rep["skipped_lines"] == stats.skipped_total


def test_a_straggler_is_dated_and_its_cost_measured():
    rep = build_report(str(DATA / "ddp4_straggler.jsonl"))
    (s,) = rep["stragglers"]
    assert (s["rank"], s["kind"], s["step"], s["since_step"], s["until_step"], s["cleared_step"]) == (2, "data", 39, 20, 44, 59)
    # 25 slow steps (20..44) at 30 ms (not the odd step it arrived last by a hair after)
    assert s["steps_charged"] == 25 and s["cost_total_s"] == pytest.approx(25 * 0.030, rel=0.01)
    # a step's wait times the steps is the total (it said the verdict's 30.0 ms over 29 steps: 0.87 s, not 0.75)
    line = next(x for x in render_text(rep).splitlines() if "the others waited" in x)
    assert f"waited {s['cost_total_s'] / s['steps_charged'] * 1e3:.1f} ms a step on the {s['steps_charged']} steps it held them up, {s['cost_total_s']:.2f} s in all" in line
    # ...and the verdict's own figure, which the live line, /metrics and export said, named as such
    assert line.endswith(f"of training; {s['cost_s'] * 1e3:.1f} ms a step when found)"), line
    assert 0 < s["share_of_train"] < 1
    assert "rank 2 (data): straggling from step 20 to step 44, found at step 39, cleared at step 59" in render_text(rep)


def test_a_stragglers_streak_survives_a_noisy_step_and_starts_where_the_straggling_began(tmp_path):
    # --inject-straggler 0:compute:0.02: rank 0 arrived last by ~20 ms at every step from the
    # first but step 19 (rank 1 last by 8 ms there, noise). The streak was walked back from the
    # verdict to the first step it was not last at: "straggling from step 20 ... 1.11 s over 59
    # steps (37.0% of training)", where it cost 1.51 s (50%). Here the straggling begins at step
    # 10 after clean steps (each rank last by a hair in turn), and rank 0 is last by a hair
    # only at step 25: a noisy step too, charged what it cost.
    t, gap, n = 1.0e9, 0.020, 60
    lead = {step: (step % 2, 0.0003) for step in range(1, 10)}  # clean: rank 1, 0, 1, ... last by a hair
    lead |= {step: (0, gap) for step in range(10, n + 1)} | {19: (1, 0.008), 25: (0, 0.0005)}
    records: list = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    for step in range(1, n + 1):
        t += 0.05
        last, by = lead[step]
        for r in (0, 1):
            records.append(schema.Step(run="r", rank=r, seq=step, step=step, samples=16, step_s=0.05,
                                       self_s=0.01 + (by if r == last else 0.0), t=t))  # fmt: skip
        if step == 29:
            records.append(schema.Verdict(run="r", rank=0, seq=-1, verdict="straggler", cause="compute", cost_s=gap, step=29,
                                          message="rank 0 is a straggler (compute): the others wait 20 ms a step for it", t=t))
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    (s,) = build_report(str(log))["stragglers"]
    assert (s["since_step"], s["step"], s["cleared_step"]) == (10, 29, None)
    # every step from 10 that it arrived last at (all but 19), the hair at 25 as it was
    assert s["steps_charged"] == n - 10
    assert s["cost_total_s"] == pytest.approx((n - 11) * gap + 0.0005, abs=1e-6)
    assert "rank 0 (compute): straggling from step 10, found at step 29, until the end" in render_text(build_report(str(log)))


def _rank_1_straggling(tmp_path, figures, *, cause: str, cost_s: float, n: int = 60) -> dict:
    """The report's one straggler of two DDP ranks, rank 1 found at step 29: ``figures(step)``
    gives (rank 0's self_s, comm_s, rank 1's self_s, comm_s) at each of ``n`` steps."""
    t = 1.0e9
    records: list = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    for step in range(1, n + 1):
        t += 0.06
        mine0, comm0, mine1, comm1 = figures(step)
        records.append(schema.Step(run="r", rank=0, seq=step, step=step, samples=16, step_s=0.06, self_s=mine0, comm_s=comm0, t=t))
        records.append(schema.Step(run="r", rank=1, seq=step, step=step, samples=16, step_s=0.06, self_s=mine1, comm_s=comm1, t=t))
        if step == 29:
            records.append(schema.Verdict(run="r", rank=1, seq=-1, verdict="straggler", cause=cause, cost_s=cost_s, step=29,
                                          message=f"rank 1 is a straggler ({cause}): the others wait {cost_s * 1e3:.0f} ms a step for it", t=t))
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    (s,) = build_report(str(log))["stragglers"]
    return s


def test_a_stragglers_cost_is_what_the_others_waited_where_its_slowness_runs_on_after_its_first_collective(tmp_path):
    # DDP over a checkpoint_wrapper'd model, rank 1 sleeping 10 ms in its forward: the sleep runs
    # again in the backward's recompute, after its self time ends. Its self-time lead is 10 ms,
    # its peer's comm wait 20 ms more than its own (review 284). The verdict said 20 ms since
    # 7be7745, while the report charged the self-time lead and walked its streak by half the
    # verdict's cost: "straggling from step 26 ... 10.3 ms a step ... (23.3 ms a step when
    # found)"; it charges the wait, as the verdict does, from the straggling's start.
    s = _rank_1_straggling(tmp_path, lambda step: (0.010, 0.023, 0.020, 0.003), cause="compute", cost_s=0.020)
    assert (s["since_step"], s["step"]) == (1, 29)
    assert s["steps_charged"] == 60 and s["cost_total_s"] == pytest.approx(60 * 0.020, rel=1e-6)


def test_a_stragglers_cost_is_not_the_larger_of_two_noisy_measures_each_step(tmp_path):
    # Review 292: rank 1 sleeping 30 ms a step in its data loading; its self-time lead and its
    # peer's comm beyond its own each about 31 ms a step over the run, the report's "the others
    # waited 35.1 ms a step": each step charged the larger of the two, its noise upward. Here
    # each measure is 30 ms a step on average, 25 and 35 by turns, the two out of step.
    def figures(step: int) -> tuple[float, float, float, float]:
        lead, wait = (0.035, 0.025) if step % 2 else (0.025, 0.035)
        return 0.010, 0.005 + wait, 0.010 + lead, 0.005

    s = _rank_1_straggling(tmp_path, figures, cause="data", cost_s=0.030)
    assert s["steps_charged"] == 60 and s["cost_total_s"] == pytest.approx(60 * 0.030, rel=1e-6)


def test_two_stragglers_at_once_are_each_charged_the_others_wait_for_the_slower(tmp_path):
    # Review 298, `simulate --straggler 3,40`: two ranks 30 ms slow, the slower of the two by
    # turns. Each was charged its lead over the other ("the others waited 0.7 ms a step on the
    # 75 steps it held them up"), and its streak began where the other was slower twice running.
    t, n = 1.0e9, 60
    records: list = [schema.Hello(run="r", rank=r, seq=0, world_size=4, pid=10 + r, strategy="ddp", t=t) for r in range(4)]
    for step in range(1, n + 1):
        t += 0.05
        slower = 1 + step % 2
        for r in range(4):
            slow = 0.030 + (0.0005 if r == slower else 0.0) if step >= 10 and r in (1, 2) else 0.0
            records.append(schema.Step(run="r", rank=r, seq=step, step=step, samples=16, step_s=0.05, self_s=0.01 + slow, t=t))
        if step == 29:
            records += [schema.Verdict(run="r", rank=r, seq=-1, verdict="straggler", cause="compute", cost_s=0.030, step=29,
                                       message=f"rank {r} is a straggler (compute): the others wait 30 ms a step for it", t=t)
                        for r in (1, 2)]  # fmt: skip
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    one, two = rep["stragglers"]
    assert (one["rank"], one["since_step"], two["rank"], two["since_step"]) == (1, 10, 2, 10)
    assert one["steps_charged"] + two["steps_charged"] == n - 9
    assert one["cost_total_s"] + two["cost_total_s"] == pytest.approx((n - 9) * 0.0305, rel=1e-6)
    assert (one["straggling_with"], two["straggling_with"]) == ([2], [1])
    assert "; with rank 2, each step charged to the slowest of them" in render_text(rep)


def test_a_stragglers_second_episode_is_not_charged_the_firsts_steps(tmp_path):
    # Rank 0 last from step 10 (by 20 ms, then by 6 ms: cleared at 50), noise at 45 and 50,
    # found again at 70. Passing over the noisy step, the second episode's walk back went on into
    # the first: both read "from step 10", 108 steps charged of 80.
    t, n = 1.0e9, 80

    def lead(step: int) -> tuple[int, float]:
        if step < 10:
            return step % 2, 0.0003
        if step in (45, 50):
            return 1, 0.001
        return 0, 0.020 if step <= 40 else 0.006 if step < 60 else 0.010

    records: list = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    for step in range(1, n + 1):
        t += 0.05
        last, by = lead(step)
        for r in (0, 1):
            records.append(schema.Step(run="r", rank=r, seq=step, step=step, samples=16, step_s=0.05,
                                       self_s=0.01 + (by if r == last else 0.0), t=t))  # fmt: skip
        if step in (29, 70):
            records.append(schema.Verdict(run="r", rank=0, seq=-1, verdict="straggler", cause="compute", cost_s=0.020 if step == 29 else 0.010,
                                          step=step, message="rank 0 is a straggler (compute)", t=t))  # fmt: skip
        if step == 50:
            records.append(schema.Verdict(run="r", rank=0, seq=-1, verdict="straggler_cleared", step=50, message="cleared", t=t))
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    first, second = build_report(str(log))["stragglers"]
    assert (first["since_step"], first["cleared_step"], second["since_step"]) == (10, 50, 51)
    assert first["steps_charged"] + second["steps_charged"] <= n - 9  # (steps 10..80, less the noisy ones)


def _turns_log(path: Path, loaders: str, moved: bool = True) -> None:
    """Two ranks, two epochs of 64 steps, each rank's DataLoader two workers. ``loaders``
    "alike": both ranks' loaders equally slow; whichever's workers lag in phase (rank 1 in
    epoch 0, rank 0 in epoch 1, drawn anew as the workers start again) waits 25 ms for every
    other batch while the other rank waits in the all-reduce, and on the batches between, the
    other rank is last by 2 ms (s5_slowdata.py). "rank 1's slower": rank 1's loader alone
    (its every other batch 25 ms, rank 0's 2 ms). The hub named rank 1 at step 29 and, where
    ``moved``, cleared it at 89 and named rank 0 there."""
    t = 1.0e9
    records: list = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    for step in range(1, 129):
        epoch = (step - 1) // 64
        lagging = 1 if epoch == 0 or loaders != "alike" else 0
        if loaders == "alike":
            data = {lagging: 0.025, 1 - lagging: 0.005} if step % 2 else {lagging: 0.013, 1 - lagging: 0.015}
        else:
            data = {1: 0.025 if step % 2 else 0.004, 0: 0.002}
        t += 0.035
        records += [schema.Step(run="r", rank=r, seq=step, step=step, epoch=epoch, samples=16, step_s=0.035, data_s=data[r],
                                self_s=data[r] + 0.001, t=t) for r in (0, 1)]  # fmt: skip
        verdicts = [(1, "straggler", 29)] + ([(1, "straggler_cleared", 89), (0, "straggler", 89)] if moved else [])
        records += [schema.Verdict(run="r", rank=r, seq=-1, verdict=v, cause="data" if v == "straggler" else "", step=s,
                                   cost_s=0.020 if v == "straggler" else None, message=f"rank {r} {v}", t=t)
                    for r, v, s in verdicts if s == step]  # fmt: skip
    _write_log(path, records)


def test_a_stragglers_episode_ends_where_its_streak_did_not_where_it_was_cleared(tmp_path):
    # s5_slowdata.py (every rank's loader as slow): "rank 1 (data): straggling from step 3,
    # found at step 29, cleared at step 89" and "rank 0 (data): straggling from step 64, found
    # at step 89, until the end": both named for steps 64-89 of a 2-rank job. Rank 1 stopped
    # lagging at 63; the hub clears a verdict only after whole windows without it, and rank 1
    # was charged the 2 ms it was last by on the batches between rank 0's slow ones.
    log = tmp_path / "run.jsonl"
    _turns_log(log, "alike")
    rep = build_report(str(log))
    first, second = rep["stragglers"]
    assert (first["rank"], first["since_step"], first["until_step"], first["cleared_step"]) == (1, 1, 63, 89)
    assert first["steps_charged"] == 32 and first["cost_total_s"] == pytest.approx(32 * 0.020, abs=1e-6)  # (its odd steps)
    assert (second["rank"], second["since_step"], second["until_step"], second["cleared_step"]) == (0, 65, None, None)
    text = render_text(rep)
    assert "rank 1 (data): straggling from step 1 to step 63, found at step 29, cleared at step 89;" in text
    assert "rank 0 (data): straggling from step 65, found at step 89, until the end;" in text


@pytest.mark.parametrize("loaders, moved, said", [
    ("alike", True, True),
    ("rank 1's slower", True, False),  # (a verdict on rank 0 too: noise, or a second fault)
    ("alike", False, False),
], ids=["every rank's loader as slow", "rank 1's loader slower", "named once"])  # fmt: skip
def test_data_verdicts_that_move_between_ranks_whose_loaders_took_alike_time_say_the_job_is_data_bound(tmp_path, loaders, moved, said):
    # Both ranks' loaders equally slow read as each rank in turn the slow one (rank 1, then
    # rank 0 as epoch 1 began): nothing said the job was data-bound. Not said of one rank's
    # slow loader, whose peers load in a fraction of its time, nor of one verdict alone.
    log = tmp_path / "run.jsonl"
    _turns_log(log, loaders, moved)
    rep = build_report(str(log))
    line = ("the data-loading verdict moved from rank 1 to rank 0 as epoch 1 began, and every rank spent alike time loading data "
            "(41% of its steps): the ranks' loaders are likely equally slow (the job is data-bound) rather than one of them slower")
    if said:
        assert rep["data_bound"] == {"moves": [{"from_rank": 1, "to_rank": 0, "step": 65, "epoch": 1}],
                                     "data_share_min": pytest.approx(0.414, abs=1e-3), "data_share_max": pytest.approx(0.414, abs=1e-3)}
        assert f"  {line}\n" in render_text(rep)
        assert "\nThe data-loading verdict moved from rank 1 to rank 0 as epoch 1 began" in render_markdown(rep)
    else:
        assert rep["data_bound"] is None
        assert "data-bound" not in render_text(rep) and "data-bound" not in render_markdown(rep)


def test_a_failure_names_its_root_cause_and_the_stall_before_it():
    rep = build_report(str(DATA / "fsdp4_crash.jsonl"))
    f = rep["failure"]
    assert (f["rank"], f["code"], f["step"], f["victims"], f["stopped"]) == (1, 1, 25, [0], [2, 3])
    assert f["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert [(e["rank"], e["code"], e["role"]) for e in rep["exits"]] == [(0, 1, "victim"), (1, 1, "cause"), (2, -15, "stopped"), (3, -15, "stopped")]
    assert rep["exits"][2]["signal"] == "SIGTERM"
    (stall,) = rep["stalls"]
    assert (stall["rank"], stall["kind"], stall["phase"], stall["step"], stall["until"]) == (3, "stalled", "data", 12, "resumed at step 13")
    md = render_markdown(rep)
    assert "**Root cause:** rank 1 exited with code 1 at step 25: RuntimeError: CUDA error" in md
    assert "ranks 2-3 were stopped" in md


def test_checkpoints_and_warnings_are_summed_up():
    rep = build_report(str(DATA / "ddp4_straggler.jsonl"))
    saved = rep["checkpoints"]["saved"]
    assert [(c["step"], c["ranks"], c["path"]) for c in saved] == [
        (s, 4, f"/ckpt/step-{s:08d}") for s in (20, 40, 60)
    ]
    # A save takes as long as its slowest rank: rank 3's at step 40.
    assert [c["duration_s"] for c in saved] == pytest.approx([2.8, 4.3, 2.8])
    assert rep["checkpoints"]["resumed"] == []
    assert [(w["step"], w["ranks"], w["message"]) for w in rep["warnings"]] == [
        (5, [0, 1, 2, 3], "DataLoader has 2 workers for 8 cores"),
        (50, [0, 1], "loss scale fell to 1024"),
    ]
    text = render_text(rep)
    assert "checkpoints:\n  3 saved at steps 20, 40, 60; the last in /ckpt/step-00000060; slowest save 4.30 s (step 40)\n" in text
    assert "warnings:\n  ranks 0-3 at step 5: DataLoader has 2 workers for 8 cores\n  ranks 0-1 at step 50: loss scale fell to 1024\n" in text
    # A run with neither says nothing of them.
    plain = render_text(build_report(str(DATA / "real_ddp2.jsonl")))
    assert "checkpoints:" not in plain and "warnings:" not in plain


def test_memory_is_measured_against_zero_and_the_unsharded_model():
    fsdp = build_report(str(DATA / "fsdp4_crash.jsonl"))["memory"]
    assert fsdp["vs_expected"] == pytest.approx(1.0) and fsdp["saving_vs_unsharded"] == pytest.approx(0.75)
    assert fsdp["expected_bytes_per_rank"] * 4 == fsdp["unsharded_bytes_per_rank"]
    wrong = build_report(str(DATA / "fsdp2_not_sharding.jsonl"))
    m = wrong["memory"]
    assert m["vs_expected"] == pytest.approx(2.0, rel=0.01) and m["not_sharding"] == [0, 1]
    assert "is every block wrapped" in m["verdict"] and "is every block wrapped" in render_text(wrong)
    ddp = build_report(str(DATA / "real_ddp2.jsonl"))["memory"]
    assert ddp["vs_expected"] == pytest.approx(1.0, rel=0.01) and ddp["buckets_bytes_max"] > 0


# -- the command --------------------------------------------------------------------------


def _pardash(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pardash", *args], capture_output=True, text=True, env=pardash_env(), timeout=120, **kw)


def test_a_log_kept_compressed_reads_as_itself_and_one_with_nothing_is_an_error(tmp_path):
    import gzip

    from pardash.telemetry.logreader import load_log

    plain = (DATA / "real_ddp2.jsonl").read_bytes()
    gz = tmp_path / "run.jsonl.gz"
    gz.write_bytes(gzip.compress(plain))
    msgs, stats = load_log(gz)
    assert [schema.encode_json(m) for m in msgs] == [schema.encode_json(m) for m in load_log(DATA / "real_ddp2.jsonl")[0]]
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gz.read_bytes()[: len(gz.read_bytes()) // 2])
    msgs_cut, stats_cut = load_log(cut)
    assert 0 < len(msgs_cut) < len(msgs) and stats_cut.skipped["truncated"] == 1
    # Bytes after the last gzip member (a copy padded, an append gone wrong): every record is
    # whole, and they are counted, not the whole log refused ("Not a gzipped file").
    padded = tmp_path / "padded.jsonl.gz"
    padded.write_bytes(gz.read_bytes() + b"garbage after the stream")
    msgs_padded, stats_padded = load_log(padded)
    assert len(msgs_padded) == len(msgs) and dict(stats_padded.skipped) == {"trailing_garbage": 1}
    # Nothing to report is one line and exit 2, not an empty report.
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("hello\nworld\n")
    for name, needle in (("empty.jsonl", "empty.jsonl: empty, no telemetry records"),
                         ("notes.txt", "notes.txt: no telemetry records in 2 line(s) (2 malformed)")):  # fmt: skip
        proc = _pardash("report", name, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stdout == "" and needle in proc.stderr, proc.stderr
    proc = _pardash("report", "run.jsonl.gz", cwd=tmp_path)
    assert proc.returncode == 0 and "steps              12" in proc.stdout, proc.stderr


def test_report_command_formats(tmp_path):
    log = tmp_path / "fsdp4_crash.jsonl"
    log.write_bytes((DATA / "fsdp4_crash.jsonl").read_bytes())
    md = _pardash("report", "fsdp4_crash.jsonl", "--format", "markdown", cwd=tmp_path)
    assert md.returncode == 0, md.stderr
    assert md.stdout == (DATA / "fsdp4_crash.report.md").read_text()
    js = _pardash("report", str(log), "--format", "json")
    assert json.loads(js.stdout)["failure"]["rank"] == 1
    text = _pardash("report", str(log))
    assert text.returncode == 0 and "root cause: rank 1 exited with code 1 at step 25" in text.stdout
    assert "raised at: train.py:88 in step" in text.stdout  # the traceback's innermost frame
    cmp = _pardash("report", str(DATA / "real_ddp2.jsonl"), "--compare", str(DATA / "real_fsdp2.jsonl"))
    assert cmp.returncode == 0, cmp.stderr
    row = next(line for line in cmp.stdout.splitlines() if line.startswith("parameters a rank"))
    assert "-50.0%" in row and "better" in row
    missing = _pardash("report", str(log), "--compare", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and "nope.jsonl: no such log file, run folder or run id" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_a_run_compared_with_itself_is_said_so(tmp_path):
    # `report A --compare A` (a name mistyped, a run id and its log) read "no change" in every
    # row without a word.
    import shutil

    run = "20261201-120000-aaaa"
    (tmp_path / "runs" / run).mkdir(parents=True)
    log = tmp_path / "runs" / run / "telemetry.jsonl"
    shutil.copy(DATA / "real_ddp2.jsonl", log)
    (tmp_path / "link.jsonl").symlink_to(log)
    for a, b, said in (
        (str(log), str(log), f"--compare {log} is the log reported"),
        (run, str(tmp_path / "link.jsonl"), f"--compare {tmp_path / 'link.jsonl'} is the log reported, {os.path.join('runs', run, 'telemetry.jsonl')} (the same file)"),
    ):  # fmt: skip
        p = _pardash("report", a, "--compare", b, cwd=tmp_path)
        assert p.returncode == 0 and p.stdout.startswith("A: "), p.stderr
        assert p.stderr.splitlines() == [f"pardash: warning: {said}: the run is compared with itself, every figure unchanged"]
    other = _pardash("report", str(log), "--compare", str(DATA / "real_fsdp2.jsonl"))
    assert other.returncode == 0 and other.stderr == "", other.stderr


def test_bad_input_to_the_recorded_run_commands_is_one_line_naming_the_command(tmp_path):
    # An unknown flag pointed at `pardash --help`, an absolute --runs-dir read ".//nonexist",
    # --speed nan froze a replay for good, and an empty --tensorboard wrote into the cwd.
    log = str(DATA / "real_ddp2.jsonl")
    cases = [
        (("report", log, "--bogus"), "pardash report: error: unrecognized arguments: --bogus (see pardash report --help)"),
        (("report", "--runs-dir", str(tmp_path / "none"), "ID"), f"(runs are in {tmp_path / 'none'};"),
        (("replay", "--speed", "nan", log), "pardash replay: error: argument --speed: 'nan' is not a finite number"),
        (("replay", "--speed", "inf", log), "'inf' is not a finite number"),
        (("replay", "--start", "1:x", log), "argument --start: '1:x' is not a time into the run (seconds, M:SS, H:MM:SS, end or step:N)"),
        (("export", log, "--tensorboard", ""), "--tensorboard: give a folder for the event files"),
        (("report", "/dev/null"), "/dev/null: not a regular file"),  # it said "no such log file"
    ]
    rankless = tmp_path.parent / f"{tmp_path.name}-rankless.jsonl"  # (tmp_path must stay empty)
    rankless.write_text('{"kind":"step","step":1}\n')  # a step of no rank: a whole report of "world size 0" before
    cases.append((("report", str(rankless)), "no telemetry records in 1 line(s) (1 invalid)"))
    for args, said in cases:
        p = _pardash(*args)
        assert p.returncode == 2 and said in p.stderr and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
    assert list(tmp_path.iterdir()) == []


def test_replay_without_a_terminal_says_first_what_is_wrong_with_the_log(tmp_path):
    # `pardash replay empty.jsonl` in a pipe said it needs a terminal and to run `pardash report
    # empty.jsonl`, which then refused the log: the log's own trouble comes first, as report says it.
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("hello\nworld\n")
    for name in ("empty.jsonl", "notes.txt"):
        replay, report = (_pardash(cmd, name, cwd=tmp_path, stdin=subprocess.DEVNULL) for cmd in ("replay", "report"))
        assert replay.returncode == report.returncode == 2 and replay.stderr == report.stderr
        assert "no telemetry records" in replay.stderr and "terminal" not in replay.stderr, replay.stderr
    # A log with records is one the report reads: there, the terminal is what is missing.
    replay = _pardash("replay", str(DATA / "real_ddp2.jsonl"), stdin=subprocess.DEVNULL)
    assert replay.returncode == 2 and f"which needs a terminal; for a summary without one: pardash report {DATA / 'real_ddp2.jsonl'}" in replay.stderr


def test_a_log_holding_two_runs_is_reported_with_a_warning(tmp_path):
    # A log appended to by hand: the report merged both runs without a word.
    both = tmp_path / "both.jsonl"
    both.write_bytes((DATA / "real_ddp2.jsonl").read_bytes() + (DATA / "real_fsdp2.jsonl").read_bytes())
    p = _pardash("report", str(both))
    assert p.returncode == 0 and "holds 2 runs" in p.stderr and "the figures below mix them" in p.stderr
    one = _pardash("report", str(DATA / "real_ddp2.jsonl"))
    assert one.returncode == 0 and "warning" not in one.stderr
    hub_only = tmp_path / "hub_only.jsonl"
    hub_only.write_bytes(b'{"kind":"event","name":"hub","message":"hub started","run":"r","seq":-1,"t":1.0,"hseq":1}\n')
    p = _pardash("report", str(hub_only))
    assert p.returncode == 0 and "no rank ever reported to its hub" in p.stderr


def test_a_run_is_found_by_its_folder_or_its_run_id(tmp_path):
    # `launch` prints the run id and the folder; report, replay and export took only the file.
    import shutil

    for run in ("20261201-120000-aaaa", "20261201-130000-bbbb"):
        (tmp_path / "runs" / run).mkdir(parents=True)
        shutil.copy(DATA / "fsdp4_crash.jsonl", tmp_path / "runs" / run / "telemetry.jsonl")
    by_file = _pardash("report", "runs/20261201-120000-aaaa/telemetry.jsonl", cwd=tmp_path)
    assert by_file.returncode == 0 and "root cause: rank 1" in by_file.stdout, by_file.stderr
    for what in ("runs/20261201-120000-aaaa", "runs/20261201-120000-aaaa/", "20261201-120000-aaaa", "20261201-13"):
        got = _pardash("report", what, cwd=tmp_path)
        assert got.returncode == 0 and got.stdout == by_file.stdout, (what, got.stderr)
    both = _pardash("report", "20261201", cwd=tmp_path)
    assert both.returncode == 2 and "20261201: matches 2 runs" in both.stderr
    # named by their ids, which the prefix is of (it listed their logs' paths)
    assert "(20261201-120000-aaaa, 20261201-130000-bbbb); give more of the id" in both.stderr, both.stderr
    (tmp_path / "empty").mkdir()
    empty = _pardash("report", "empty", cwd=tmp_path)
    assert empty.returncode == 2 and "empty: a folder without a telemetry.jsonl" in empty.stderr
    # A run launched with --log elsewhere and --runs-dir: its folder's result.json names the
    # log; found by id from another folder with --runs-dir.
    elsewhere = tmp_path / "logs" / "a1.jsonl"
    elsewhere.parent.mkdir()
    shutil.copy(DATA / "fsdp4_crash.jsonl", elsewhere)
    run = tmp_path / "kept" / "20261202-090000-cccc"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({"run_id": run.name, "code": 1, "log": str(elsewhere)}))
    for what, where in ((str(run), tmp_path), ("20261202-09", tmp_path / "logs")):
        got = _pardash("report", what, "--runs-dir", str(tmp_path / "kept"), cwd=where)
        assert got.returncode == 0, (what, got.stderr)
        def said(out: str) -> list[str]:
            return [" ".join(line.split()) for line in out.splitlines() if not line.startswith("log ")]

        assert "a1.jsonl" in got.stdout and said(got.stdout) == said(by_file.stdout)



def test_a_run_whose_log_was_compressed_or_moved_is_found_or_said_so(tmp_path):
    # `gzip runs/ID/telemetry.jsonl`, as the README suggests for keeping: report, replay and
    # export read a .gz log, but by the run's id or folder it was "no such log file, run folder
    # or run id". A log its result.json names, moved away: the same words, of a run that is there.
    import gzip
    import shutil

    runs = tmp_path / "runs"
    kept = runs / "20261201-120000-aaaa"
    kept.mkdir(parents=True)
    (kept / "telemetry.jsonl.gz").write_bytes(gzip.compress((DATA / "fsdp4_crash.jsonl").read_bytes()))
    elsewhere = tmp_path / "logs" / "b.jsonl"
    elsewhere.parent.mkdir()
    shutil.copy(DATA / "real_ddp2.jsonl", elsewhere)
    named = runs / "20261202-090000-bbbb"
    named.mkdir()
    (named / "result.json").write_text(json.dumps({"run_id": named.name, "code": 0, "log": str(elsewhere)}))
    for what, said in (("20261201-12", "root cause: rank 1"), (str(kept), "root cause: rank 1"), ("20261202-09", "finished")):
        got = _pardash("report", what, cwd=tmp_path)
        assert got.returncode == 0 and said in got.stdout, (what, got.stderr)
    with open(elsewhere, "rb") as src, gzip.open(f"{elsewhere}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    elsewhere.unlink()  # `gzip logs/b.jsonl`
    got = _pardash("report", "20261202-09", cwd=tmp_path)
    assert got.returncode == 0 and "b.jsonl.gz" in got.stdout, got.stderr
    os.unlink(f"{elsewhere}.gz")  # moved away
    for what in ("20261202-09", str(named)):
        gone = _pardash("report", what, cwd=tmp_path)
        assert gone.returncode == 2 and len(gone.stderr.strip().splitlines()) == 1, gone.stderr
        assert f"the run's log {elsewhere} (its result.json names it) is not there" in gone.stderr


# -- headless progress: a bar on a terminal, lines elsewhere ---------------------------------

SIM = ["simulate", "--headless", "--ranks", "4", "--steps", "40", "--rate", "20", "--every", "0.5"]
PLAIN_LINE = re.compile(r"^\[\s*\d+\.\ds\] step \d+/40 \| loss med [\d.]+ \| (?:[\d,]+ (?:wall-clock )?samples/s(?: at the end)? \| )?step ms min/med/max [\d.]+/[\d.]+/[\d.]+ \|")


def test_a_finished_run_shows_the_rate_it_ran_at():
    # Two ranks, 16 samples a step, a step every 50 ms: 640 samples/s. Frames carry each rank's
    # latest step only (every other one here), so the rate counts steps by their numbers.
    st = RunState(run_id="r", track_seq=False)
    for step in range(0, 40, 2):
        frame = [schema.Step(run="r", rank=r, step=step, samples=16, step_s=0.05, t=1000.0 + step * 0.05) for r in (0, 1)]
        st.apply_frame(frame, 0.0)
    assert "| 640 samples/s |" in progress_line(st, 2.0)  # live: 2 x 16 / 0.05, from the latest steps
    for r in (0, 1):
        st.apply(schema.Event(run="r", rank=r, name="exit", code=0, t=1002.0), 0.0)
    line = progress_line(st, 2.5)
    assert "| 640 wall-clock samples/s at the end |" in line and "2 finished" in line, line


def _epochs_with_a_partial_batch(n_steps: int) -> list[tuple[int, int, int, float]]:
    """(step, samples, samples so far, t): batches of 16 with a partial last one of 4 every 10
    steps (a DataLoader's remainder), a step every 10 ms: 148 samples per 100 ms."""
    out, total = [], 0
    for step in range(1, n_steps + 1):
        n = 4 if step % 10 == 0 else 16
        total += n
        out.append((step, n, total, 1000.0 + 0.01 * step))
    return out


def test_the_rate_counts_each_step_at_its_own_size():
    # Frames carry each rank's latest step (every other one here), and the last step of each
    # epoch is the partial one: its 4 samples times the steps read "800 samples/s at the end"
    # for 2,960.
    st = RunState(run_id="r", track_seq=False)
    steps = _epochs_with_a_partial_batch(40)
    for step, n, total, t in steps[1::2]:
        st.apply_frame([schema.Step(run="r", rank=r, step=step, samples=n, samples_total=total, step_s=0.01, t=t) for r in (0, 1)], 0.0)
    assert "| 2,960 samples/s |" in progress_line(st, 1.0)  # live: the last ten points, steps 21..40
    _finish(st, 1000.5)
    assert samples_per_s_recent(st) == pytest.approx(2 * 1480, rel=1e-3)
    assert "| 2,960 wall-clock samples/s at the end |" in progress_line(st, 1.5)


def test_a_viewer_that_attached_late_counts_each_step_at_its_own_size():
    # A viewer's first frames after its snapshot: the rank's last history point came in the
    # snapshot, and what the rank did since it counts from that point's step.
    from pardash.telemetry import frames
    from pardash.telemetry.client import FrameApplier

    hub = RunState(run_id="r", track_seq=False, t0=999.0)
    steps = _epochs_with_a_partial_batch(40)
    for step, n, total, t in steps[1:20:2]:
        hub.apply_frame([schema.Step(run="r", rank=0, step=step, samples=n, samples_total=total, step_s=0.01, t=t)], 0.0)
    snap = frames.Snapshot(fseq=10, hseq=0, t=1000.2, run_id="r", t0=999.0, messages=[hub.ranks[0].step], history={0: hub.ranks[0].history.columns_bytes()})
    viewer = FrameApplier()
    viewer.load_snapshot(frames.decode_snapshot(frames.encode(snap)))
    for step, n, total, t in steps[21::2]:
        viewer.state.apply_frame([schema.Step(run="r", rank=0, step=step, samples=n, samples_total=total, step_s=0.01, t=t)], 0.0)
    _finish(viewer.state, 1000.5)
    assert samples_per_s_recent(viewer.state) == pytest.approx(1480, rel=1e-3)


def test_the_rate_of_a_log_from_before_samples_total_is_its_steps_times_the_latest_size():
    st = RunState(run_id="r", track_seq=False)
    for step in range(2, 41, 2):
        st.apply_frame([schema.Step(run="r", rank=0, step=step, samples=16, step_s=0.01, t=1000.0 + 0.01 * step)], 0.0)
    _finish(st, 1000.5)
    assert samples_per_s_recent(st) == pytest.approx(1600, rel=1e-3)


def test_steady_samples_per_s_counts_each_step_at_its_own_size(tmp_path):
    # The report's "steady" took the last step's samples: a partial last batch of 4 read a
    # quarter of the run's 1,480 samples/s.
    records: list = [schema.Hello(run="r", rank=0, seq=0, world_size=1, pid=10, strategy="single", t=1000.0)]
    for step, n, total, t in _epochs_with_a_partial_batch(100):
        records.append(schema.Step(run="r", rank=0, seq=step, step=step, samples=n, samples_total=total, step_s=0.01, t=t))
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert rep["steady_samples_per_s"] == pytest.approx(1480, rel=1e-3)


@pytest.mark.parametrize("n, warmup", [(300, 20), (40, 8)], ids=["300 steps", "40 steps: a fifth"])
def test_steady_samples_per_s_is_the_rate_sustained_after_the_warm_up(tmp_path, n, warmup):
    # demos/ddp_plain.py --steps 300 timed itself at 14,513 samples/s over steps 21..300; the
    # report said "steady 18,630" (samples a step / the median step time: the median leaves
    # out the recurring slow steps, not the warm-up alone), and pardash bench's single 361
    # where it ran at 197. Here: 2 ranks, 32 samples a step each; warm-up steps of 50 ms, then
    # 10 ms steps with every fourth 30 ms (a loader refilling); an evaluation and a checkpoint
    # save of 0.5 s each between steps, which no rank trained through.
    t = 1.0e9
    records: list = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    seq = 0
    for step in range(1, n + 1):
        took = 0.05 if step <= warmup else 0.03 if step % 4 == 0 else 0.01
        t += took
        seq += 1
        records += [schema.Step(run="r", rank=r, seq=seq, step=step, samples=32, step_s=took, t=t) for r in (0, 1)]
        if step in (warmup + 5, warmup + 9):
            t += 0.5
            seq += 1
            name = "eval" if step == warmup + 5 else "checkpoint"
            records += [schema.Event(run="r", rank=r, seq=seq, name=name, message="ck", step=step, duration_s=0.5, t=t) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    steady = range(warmup + 1, n + 1)
    took = sum(0.03 if step % 4 == 0 else 0.01 for step in steady)
    assert rep["steady_samples_per_s"] == pytest.approx(2 * 32 * len(steady) / took, rel=1e-4)
    assert rep["steady_steps"] == {"first": warmup + 1, "last": n, "warmup": warmup}
    assert rep["median_step_s"] == pytest.approx(0.01)  # (samples a step / which: 6,400)
    line = f"(steady {rep['steady_samples_per_s']:,.0f} over steps {warmup + 1}-{n}: the {warmup} before left out as warm-up)"
    assert line in render_text(rep)


def _finish(st: RunState, t: float) -> None:
    for r in st.ranks:
        st.apply(schema.Event(run="r", rank=r, name="exit", code=0, t=t), 0.0)


def test_the_rate_at_the_end_leaves_out_the_slow_first_steps():
    # A 20-step run on a loaded laptop: steps 2 and 3 took 750 and 330 ms, the rest 9.4 ms
    # (measured, `--strategy dp --steps 20`). "At the end" read 245 samples/s for 1,700.
    st = RunState(run_id="r", track_seq=False)
    durations = [0.487, 0.751, 0.334] + [0.0094] * 17
    t = 1000.0
    for step, d in enumerate(durations, 1):
        t += d
        st.apply_frame([schema.Step(run="r", rank=0, step=step, samples=16, step_s=d, t=t)], 0.0)
    _finish(st, t)
    rate = samples_per_s_recent(st)
    assert rate == pytest.approx(16 / 0.0094, rel=1e-3)
    assert "| 1,702 wall-clock samples/s at the end |" in progress_line(st, 5.0)


def test_the_rate_at_the_end_is_the_last_attempts_after_a_torchrun_restart():
    # Rank crashed at step 10, torchrun restarted both ranks 4 s later, steps from 1 again:
    # the rate over steps 1..20 of the history counted the first attempt and the gap (76 for
    # 1,370 a rank).
    st = RunState(run_id="r", track_seq=False)
    t = 1000.0
    for attempt, last in ((0, 9), (1, 20)):
        t += 4.0 * attempt
        for step in range(1, last + 1):
            t += 0.0117
            st.apply_frame([schema.Step(run="r", rank=r, step=step, samples=16, step_s=0.0117, t=t) for r in (0, 1)], 0.0)
    _finish(st, t)
    assert samples_per_s_recent(st) == pytest.approx(2 * 16 / 0.0117, rel=1e-3)


def test_the_rate_at_the_end_skips_a_restart_that_goes_on_from_the_last_step():
    # A checkpoint at step 10, the last step published, then a crash and a torchrun restart 30 s
    # later: steps 11..16 follow 10 with no step number going back, and the gap was counted
    # (4.3 samples/s for 1,600). And a restart that published one step only.
    def rate(points):
        st = RunState(run_id="r", track_seq=False)
        for step, t in points:
            st.apply_frame([schema.Step(run="r", rank=0, step=step, samples=16, step_s=0.01, t=t)], 0.0)
        _finish(st, points[-1][1])
        return samples_per_s_recent(st)

    first = [(step, 1000.0 + 0.01 * step) for step in range(1, 11)]
    after = [(step, 1030.0 + 0.01 * step) for step in range(11, 17)]
    assert rate(first + after) == pytest.approx(1600, rel=1e-3)
    assert rate(first + after[:1]) == pytest.approx(1600, rel=1e-3)  # the attempt before: not 0
    assert rate(first[:2]) == pytest.approx(1600, rel=1e-3)


def test_progress_lines_say_when_no_rank_has_said_hello(monkeypatch):
    # A job of 2 nodes waits in torchrun's rendezvous until the other node joins: node 0's
    # launch printed nothing after its first line for as long.
    import io

    from pardash.telemetry import printer as printer_mod
    from pardash.telemetry.printer import ProgressPrinter

    clock = [100.0]
    monkeypatch.setattr(printer_mod.time, "monotonic", lambda: clock[0])

    class Empty:
        live = True
        state = RunState()

        def poll(self) -> bool:
            return False

    out = io.StringIO()
    p = ProgressPrinter(Empty(), out=out, bar=False, every_s=5.0, waiting="no rank has said hello yet (2 nodes)")
    p.update()
    clock[0] += 5.0
    p.update()
    p.update(force=True)  # the closing line is no time to say it
    # (no run time yet: the run's 00:00 is its ranks' first word, and the line after read
    # "[   0.9s] step 4/100", a clock gone backwards)
    assert out.getvalue().splitlines() == ["[waiting 5 s] no rank has said hello yet (2 nodes)"]
    # A hub that has not answered at all (stopped, out of reach) cannot say whether any rank
    # has: the line said "no rank has said hello yet" for as long.
    silent_hub = Empty()
    silent_hub.synced = False
    silent_hub.last_frame_t = 0.0
    out = io.StringIO()
    p = ProgressPrinter(silent_hub, out=out, bar=False, every_s=5.0, waiting="no rank has said hello yet")
    clock[0] += 5.0
    p.update()
    assert out.getvalue().splitlines() == ["[waiting 5 s] no answer from the hub yet (stopped, overloaded or out of reach)"]
    # A hub with keys refusing the ranks' connections: the line said "no rank has said hello
    # yet" for as long, and only the ranks' own stderr said why.
    from pardash.telemetry.frames import HubStats

    refusing = Empty()
    refusing.stats = HubStats(rejected={"no_key": 14})
    out = io.StringIO()
    p = ProgressPrinter(refusing, out=out, bar=False, every_s=5.0, waiting="no rank has said hello yet")
    clock[0] += 5.0
    p.update()
    assert out.getvalue().splitlines() == [
        "[waiting 5 s] no rank has said hello yet; the hub refused 14 connection attempt(s) with no key authorised for the port"
    ]
    # A job under a stale PARDASH_RUN_ID: the hub warned once, and the line said "no rank has
    # said hello yet" on and on while that job trained and ended.
    foreign = Empty()
    foreign.stats = HubStats(rejected={"foreign_run": 36})
    out = io.StringIO()
    p = ProgressPrinter(foreign, out=out, bar=False, every_s=5.0, waiting="no rank has said hello yet")
    clock[0] += 5.0
    p.update()
    assert out.getvalue().splitlines() == [
        "[waiting 5 s] no rank has said hello yet; the hub refused 36 record(s) of another run's id (see its warning above)"
    ]


def test_progress_lines_say_a_finished_run_once(monkeypatch):
    # A job's teardown can take longer than a line's interval after its last step (a loaded
    # machine): the same "2 finished" line came again 5 s on, and again as the closing line.
    import io

    from pardash.telemetry import printer as printer_mod
    from pardash.telemetry.printer import ProgressPrinter

    clock = [100.0]
    monkeypatch.setattr(printer_mod.time, "monotonic", lambda: clock[0])

    class Done:
        live = False
        state = RunState(run_id="r", track_seq=False)

        def poll(self) -> bool:
            return False

    src = Done()
    for step in range(1, 4):
        src.state.apply_frame([schema.Step(run="r", rank=r, step=step, samples=8, step_s=0.01, t=1000.0 + step) for r in (0, 1)], 0.0)
    out = io.StringIO()
    p = ProgressPrinter(src, out=out, bar=False, every_s=5.0)
    p.update(force=True)  # running: said
    clock[0] += 5.0
    p.update()  # running still, said again 5 s on (a heartbeat of a long run)
    _finish(src.state, 1004.0)
    for _ in range(3):
        clock[0] += 5.0
        p.update()
    p.update(force=True)
    said = [line.partition("] ")[2] for line in out.getvalue().splitlines() if line.startswith("[")]
    assert len(said) == 3, said
    assert said[0] == said[1] and "running" in said[0]
    assert "2 finished" in said[2]


def test_progress_is_plain_lines_when_piped(tmp_path):
    p = _pardash(*SIM, "--runs-dir", str(tmp_path), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = [line for line in p.stdout.splitlines() if PLAIN_LINE.match(line)]
    assert lines, p.stdout
    # Once done, never "0 samples/s": the rate the ranks ran at over their last steps.
    assert "finished" in lines[-1] and re.search(r"\| [1-9][\d,]* wall-clock samples/s at the end \|", lines[-1]), lines[-1]
    assert any(re.search(r"\| [1-9][\d,]* samples/s \|", line) for line in lines[:-1])
    said = [line.partition("] ")[2] for line in lines]
    assert len(said) < 2 or said[-1] != said[-2]  # the last state once, not again as the closing line
    assert "\x1b[" not in p.stdout  # no terminal control codes in a log file


def test_progress_is_a_bar_on_a_terminal(tmp_path):
    master, slave = pty.openpty()
    env = pardash_env(TERM="xterm-256color", COLUMNS="160", LINES="40")
    p = subprocess.Popen(
        [sys.executable, "-m", "pardash", *SIM, "--runs-dir", str(tmp_path)], stdin=slave, stdout=slave, stderr=slave, env=env, cwd=tmp_path
    )
    os.close(slave)
    screen = TerminalOutput(master)
    assert p.wait(60) == 0
    out = screen.done()
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.decode(errors="replace"))  # colours, cursor moves
    assert "━" in text  # rich's bar
    assert re.search(r"step\s+\d+/40", text) and "samples/s" in text and "min/med/max" in text
    assert not any(PLAIN_LINE.match(line.strip()) for line in text.splitlines())


class _LogSource:
    """A Source over a whole recorded log (every message applied at once)."""

    live = False
    fseq = 0

    def __init__(self, path: Path) -> None:
        from pardash.telemetry.logreader import load_log
        from pardash.telemetry.state import RunState

        self.state = RunState()
        for msg in load_log(path)[0]:
            self.state.apply(msg, msg.t)

    def poll(self) -> bool:
        return False

    def close(self) -> None:
        pass


def test_the_bar_prints_the_jobs_output_above_itself(tmp_path):
    import io

    from pardash.telemetry.printer import ProgressPrinter

    out = io.StringIO()
    output = tmp_path / "output.log"
    output.write_bytes(b"pardash trainer: ddp on 2 rank(s)\nstep     1/12 | loss 4.18")
    printer = ProgressPrinter(_LogSource(DATA / "real_ddp2.jsonl"), out=out, bar=True, tail=str(output))
    printer.update()
    with open(output, "ab") as fh:
        # a tqdm bar redrawn with carriage returns: the last drawing is what a terminal shows
        fh.write(b"52\n\rload 1/3\rload 2/3\rload 3/3\r\ndone: 12 steps\n")
    printer.update(force=True)
    printer.close()
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.getvalue())
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines()]
    assert "pardash trainer: ddp on 2 rank(s)" in lines and "step     1/12 | loss 4.1852" in lines and "done: 12 steps" in lines
    assert "load 3/3" in lines and "load 1/3" not in text
    assert re.search(r"step 12/12 ━+ loss med [\d.]+ \| 2 finished", text)  # (the step ms spread is the first to go)


def test_the_bar_keeps_its_clock_when_it_goes_on_after_a_stop():
    # Headless Ctrl-C: the bar stops, "stopping the job..." is said, and a bar follows the job
    # to its end; that bar started its clock again at 0:00:00.
    import io

    from pardash.telemetry.printer import ProgressPrinter

    out = io.StringIO()
    src = _LogSource(DATA / "real_ddp2.jsonl")
    src.state.hello.config = {}  # no total: the bar's clock runs on (a finished bar's stops)
    printer = ProgressPrinter(src, out=out, bar=True)
    printer.update()
    (task,) = printer._progress.tasks
    task.start_time -= 3600  # the job has run an hour
    printer.close()
    printer._print("pardash: stopping the job...")
    printer.update(force=True)
    printer.close()
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.getvalue())
    after = text[text.index("stopping the job..."):]
    assert re.search(r"2 finished +1:00:0\d", after), after
    assert "0:00:00" not in after


def test_plain_lines_keep_their_format():
    import io

    from pardash.telemetry.printer import ProgressPrinter

    out = io.StringIO()
    ProgressPrinter(_LogSource(DATA / "real_ddp2.jsonl"), out=out, bar=False).update(force=True)
    (line,) = out.getvalue().splitlines()
    assert re.fullmatch(r"\[\s*\d+\.\ds\] step 12/12 \| loss med [\d.]+ \| step ms min/med/max [\d./]+ \| self ms [\d./]+ \| held/rank [\d.]+ MiB \| 2 finished", line)


def test_memory_a_few_bytes_apart_is_one_figure():
    # FSDP2's padded shards: ranks a few hundred bytes apart; the line read
    # "held/rank 1.0 MiB..1.0 MiB", and report "1.0 MiB .. 1.0 MiB".
    from pardash.telemetry.printer import progress_line

    st = RunState()
    for r, held in ((0, 1_071_616), (1, 1_072_656)):
        st.apply(schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="fsdp", t=1.0e9), 0.0)
        st.apply(schema.Step(run="r", rank=r, seq=1, step=1, step_s=0.1, t=1.0e9 + 1, mem=schema.Mem(params_bytes=held)), 0.0)
    assert "| held/rank 1.0 MiB |" in progress_line(st, 1.0)
    st.apply(schema.Step(run="r", rank=1, seq=2, step=2, step_s=0.1, t=1.0e9 + 2, mem=schema.Mem(params_bytes=1_600_000)), 0.0)
    assert "| held/rank 1.0 MiB..1.5 MiB |" in progress_line(st, 2.0)


def test_an_event_is_one_bounded_line_whatever_a_rank_sent():
    from pardash.telemetry.printer import EVENT_TEXT_MAX, event_line

    line = event_line(schema.Event(rank=1, name="warning", message="x" * 16_000 + "\nsecond line"))
    assert "\n" not in line and len(line) < EVENT_TEXT_MAX + 30 and line.startswith("[warning] rank 1: xxx")
    assert event_line(schema.Event(rank=1, name="", message="hi")) == "[event] rank 1: hi"


def test_a_rank_that_finished_is_not_reported_stopped_by_a_note_taken_first(tmp_path):
    # Rank 1 fails; the launcher then notes that rank 0 "was stopped" (seq -1), and the hub,
    # taking from each sender in turn, records that note before rank 0's own exit 0, sent
    # earlier. The report, the failure line and the state must all take rank 0's word.
    t = 1.0e9
    records = [
        schema.Hello(run="r", rank=r, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)
    ] + [
        schema.Step(run="r", rank=r, seq=1, step=1, step_s=0.1, samples=4, t=t + 1) for r in (0, 1)
    ] + [
        schema.Event(run="r", rank=1, seq=2, name="exit", code=1, step=1, message="boom", t=t + 2),
        schema.Event(run="r", rank=0, seq=-1, name="exit", code=-15, message="rank 0 was stopped by torchrun", t=t + 3),
        schema.Event(run="r", rank=0, seq=2, name="exit", code=0, step=1, t=t + 2),
    ]  # fmt: skip
    log = tmp_path / "run.jsonl"
    log.write_bytes(b"".join(schema.encode_json(msgspec.structs.replace(m, hseq=i + 1)) + b"\n" for i, m in enumerate(records)))
    rep = build_report(str(log))
    assert [(e["rank"], e["code"]) for e in rep["exits"]] == [(1, 1)]
    f = rep["failure"]
    assert (f["rank"], f["code"], f["victims"], f["stopped"]) == (1, 1, [], [])
    assert "stopped" not in render_text(rep)


def _write_log(path, records):
    path.write_bytes(b"".join(schema.encode_json(msgspec.structs.replace(m, hseq=i + 1)) + b"\n" for i, m in enumerate(records)))


@pytest.mark.parametrize("saved", [False, True])
def test_the_time_torchrun_took_to_restart_the_job_is_not_training(tmp_path, saved):
    # --max-restarts 1: "duration 5.6 s (training 5.6 s)" and samples/s a third of the steady
    # rate, the 3.7 s from the crash to the restarted ranks' first step counted as training.
    # ``saved``: a checkpoint saved after step 12, right before the crash, was taken out twice,
    # as a save and in the restart (training 20.85 s; the usual way a fault test goes).
    t = 1.0e9
    hello = lambda r, restart, at: schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r + 100 * restart, strategy="ddp", restart=restart, t=at)  # noqa: E731
    step = lambda r, s, seq, at: schema.Step(run="r", rank=r, seq=seq, step=s, step_s=0.5, samples=4, t=at)  # noqa: E731
    records = [hello(0, 0, t), hello(1, 0, t)]
    records += [step(r, s, s, t + s) for s in range(1, 13) for r in (0, 1)]  # steps 1..12 end at t+1..t+12
    if saved:
        records += [schema.Event(run="r", rank=r, seq=100, name="checkpoint", message="saved", step=12, duration_s=0.15, t=t + 12.15) for r in (0, 1)]
    records += [schema.Event(run="r", rank=1, seq=13, name="exit", code=1, step=13, t=t + 12.2)]
    records += [hello(r, 1, t + 15) for r in (0, 1)]
    records += [step(r, s, s - 9, t + 6 + s) for s in range(11, 21) for r in (0, 1)]  # resumed: steps 11..20 end at t+17..t+26
    records += [schema.Event(run="r", rank=r, seq=12, name="exit", code=0, step=20, t=t + 26) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert rep["restart_s"] == pytest.approx(4.5)  # attempt 0's last step ended at t+12, attempt 1's first began at t+16.5
    assert rep["train_s"] == pytest.approx(26 - 0.5 - 4.5)
    assert rep["samples_per_s"] == pytest.approx(22 * 2 * 4 / 21.0)
    assert "duration" in render_text(rep) and "(training 21.0 s; restarting 4.5 s)" in render_text(rep)
    # A run that never restarted says nothing of it.
    one = build_report(str(DATA / "real_ddp2.jsonl"))
    assert one["restart_s"] == 0 and "restarting" not in render_text(one)


def test_a_job_run_again_under_the_runs_id_is_an_attempt_and_the_time_between_is_not_training(tmp_path):
    # Two torchrun jobs sent to one hub alone under one PARDASH_RUN_ID, the second 15 s after
    # the first finished (torchrun's restart count 0 in both): "duration 16.1 s (training 16.0
    # s)" and 639 samples/s of jobs that trained 1 s at 12,000. The same holds for elastic
    # workers started again when nodes join (new processes, the same count).
    t = 1.0e9
    hello = lambda r, pid, at: schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=pid, strategy="ddp", t=at)  # noqa: E731
    step = lambda r, s, seq, at: schema.Step(run="r", rank=r, seq=seq, step=s, step_s=0.01, samples=8, t=at)  # noqa: E731
    records = [hello(r, 10 + r, t) for r in (0, 1)]
    records += [hello(r, 10 + r, t + 0.001) for r in (0, 1)]  # (a second hello of the same process: pt.init again)
    records += [step(r, s, s, t + s * 0.01) for s in range(1, 101) for r in (0, 1)]  # to t+1.0
    records += [schema.Event(run="r", rank=r, seq=101, name="exit", code=0, step=100, t=t + 1.0) for r in (0, 1)]
    records += [hello(r, 20 + r, t + 16) for r in (0, 1)]
    records += [step(r, s, s, t + 16 + s * 0.01) for s in range(1, 61) for r in (0, 1)]  # to t+16.6
    records += [schema.Event(run="r", rank=r, seq=61, name="exit", code=0, step=60, t=t + 16.6) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert rep["train_s"] == pytest.approx(1.0 + 0.6)
    assert rep["restart_s"] == pytest.approx(16.0 - 1.0)  # job 1's last step ended at t+1, job 2's first began at t+16
    assert rep["samples_per_s"] == pytest.approx(160 * 2 * 8 / 1.6)


def test_a_failure_torchrun_restarted_from_is_no_root_cause_and_keeps_its_step(tmp_path):
    # --max-restarts 1: rank 1 crashes in step 13; torchrun restarts both ranks, which resume
    # from the checkpoint at step 10 and finish at 20. The run did not fail: no root cause, and
    # the recovered failure is told with the step it happened in, not the rank's last step.
    t = 1.0e9
    hello = lambda r, restart: schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r + 100 * restart, strategy="ddp", restart=restart, t=t)  # noqa: E731
    step = lambda r, s, seq: schema.Step(run="r", rank=r, seq=seq, step=s, step_s=0.1, samples=4, t=t + s)  # noqa: E731
    records = [hello(0, 0), hello(1, 0)]
    records += [step(r, s, s) for s in range(1, 13) for r in (0, 1)]
    records += [
        schema.Event(run="r", rank=1, seq=13, name="error", message="InjectedCrash: injected crash on rank 1 at step 13", step=12, t=t + 13),
        schema.Event(run="r", rank=1, seq=14, name="exit", code=1, step=13, t=t + 13),
    ]  # fmt: skip
    records += [hello(0, 1), schema.Event(run="r", rank=0, seq=-1, name="restart", message="rank 0 restarted by torchrun", t=t + 14)]
    records += [hello(1, 1), schema.Event(run="r", rank=1, seq=-1, name="restart", message="rank 1 restarted by torchrun", t=t + 14)]
    records += [step(r, s, s - 9) for s in range(11, 21) for r in (0, 1)]
    records += [schema.Event(run="r", rank=r, seq=12, name="exit", code=0, step=20, t=t + 21) for r in (0, 1)]
    # Rank 0, stopped by torchrun for the restart without a word, went silent meanwhile.
    records.insert(2 + 24 + 2, schema.Verdict(run="r", rank=0, seq=-1, verdict="silent", step=12, message="rank 0 silent for 3 s", t=t + 13))
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert [(s["rank"], s["kind"], s["until"]) for s in rep["stalls"]] == [(0, "silent", "restarted by torchrun (restart 1)")]
    assert rep["failure"] is None and rep["exits"] == []
    (f,) = rep["recovered"]
    assert (f["rank"], f["code"], f["step"]) == (1, 1, 13)
    text = render_text(rep)
    assert "root cause" not in text
    assert "restarted by torchrun after: rank 1 exited with code 1 at step 13: InjectedCrash" in text
    assert "restarted by torchrun after: rank 1 exited with code 1 at step 13" in render_markdown(rep)
    # An older log whose exit events carry no step: the error event's step tells it.
    records[2 + 24 + 1] = msgspec.structs.replace(records[2 + 24 + 1], step=None)
    assert records[2 + 24 + 1].name == "exit"
    _write_log(log, records)
    assert build_report(str(log))["recovered"][0]["step"] == 13


def test_a_rank_that_failed_before_its_first_step_is_not_said_to_fail_at_step_1(tmp_path):
    # Its own exit has no step (autorun: an argument error, a model that did not build); its
    # error event carries step 0. The root cause said "at step 1".
    records = [
        schema.Hello(run="r", rank=0, seq=0, world_size=1, t=1.0),
        schema.Event(run="r", rank=0, seq=1, name="error", message="ValueError: bad config", step=0, t=2.0),
        schema.Event(run="r", rank=0, seq=2, name="exit", code=1, step=None, t=2.0),
    ]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert rep["failure"]["step"] is None
    assert rep["failure"]["line"] == "rank 0 exited with code 1: ValueError: bad config"


def test_a_node_stopped_on_purpose_is_why_the_other_failed_not_the_other():
    # Two nodes: node 1's launch got a SIGTERM (its scheduler); rank 0 on node 0 then died of
    # the closed connection. The root cause was rank 0, "the rank that failed first left no
    # exit record", though rank 1's stop was in the log before it.
    from pardash.telemetry.failures import failure_summary

    t = 1.0e9
    st = RunState()
    for m in [
        *(schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)),
        *(schema.Step(run="r", rank=r, seq=1, step=682, step_s=0.1, t=t + 1) for r in (0, 1)),
        schema.Event(run="r", rank=1, seq=-1, name="exit", code=-15, message="stopped by SIGTERM", t=t + 2, hseq=10),
        schema.Event(run="r", rank=0, seq=2, name="error", step=682, t=t + 3, hseq=11,
                     message="RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.201.0.2]:1234"),
        schema.Event(run="r", rank=0, seq=3, name="exit", code=1, step=683, t=t + 3, hseq=12),
    ]:
        st.apply(m, 0.0)
    f = failure_summary(st)
    assert f["line"] == ("rank 1 was stopped by SIGTERM first; rank 0 exited with code 1 at step 683 after it: "
                         "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.201.0.2]:1234")  # fmt: skip
    from pardash.telemetry.report import _role

    assert (_role(1, f), _role(0, f)) == ("stopped_first", "victim")


@pytest.mark.parametrize("strategy", ["ddp", "pp", "pp+fsdp", "script"])
def test_a_killed_rank_of_a_lockstep_job_died_where_its_peers_stopped(strategy, tmp_path):
    # kill -9 of rank 0 of a DDP job: its last steps (held to be sent in a batch) died with it.
    # Its log ended at step 110, rank 1's at 115, and the report said "rank 0 exited with code
    # -9 (SIGKILL) at step 111", four steps before its peer could have gone without it.
    from pardash.telemetry.failures import failure_summary

    t = 1.0e9
    records = [
        *(schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy=strategy, t=t) for r in (0, 1)),
        schema.Step(run="r", rank=0, seq=1, step=110, step_s=0.01, t=t + 1),
        schema.Step(run="r", rank=1, seq=1, step=115, step_s=0.01, t=t + 1.05),
        schema.Event(run="r", rank=0, seq=-1, name="exit", code=-9, message="torchrun: rank 0 killed by signal 9 (SIGKILL)", t=t + 2, hseq=10),
        schema.Event(run="r", rank=1, seq=2, name="error", step=115, t=t + 2, hseq=11,
                     message="RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1234"),
        schema.Event(run="r", rank=1, seq=3, name="exit", code=1, step=116, t=t + 2, hseq=12),
    ]
    st = RunState()
    for m in records:
        st.apply(m, 0.0)
    f = failure_summary(st)
    if strategy != "script":  # (a pipeline's stages too: each step's sends and receives need every stage)
        assert f["step"] == 115 and f["line"].startswith(
            "rank 0 exited with code -9 (SIGKILL) at step 115 (its last steps died with it: its log ends at step 110, "
            "its peers reached 115); rank 1 failed after it")
    else:  # a script's ranks may step apart (no collective every step): as it said
        assert f["step"] == 111 and "died with it" not in f["line"]
    log = tmp_path / "run.jsonl"
    log.write_bytes(b"".join(msgspec.json.encode(m) + b"\n" for m in records))
    assert build_report(str(log))["failure"]["step"] == f["step"]


def test_a_rank_killed_before_any_of_its_steps_was_sent_died_where_its_peers_stopped():
    # A fast run's rank killed 17 ms in: its 10 steps, held to be sent in a batch, died with it.
    # The report read "rank 1 exited with code -9 (SIGKILL)", no step, its peer at step 10.
    from pardash.telemetry.failures import failure_summary

    t = 1.0e9
    st = RunState()
    for m in [
        *(schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)),
        schema.Step(run="r", rank=0, seq=1, step=10, step_s=0.002, t=t + 0.02),
        schema.Event(run="r", rank=1, seq=-1, name="exit", code=-9, message="torchrun: rank 1 killed by signal 9 (SIGKILL)", t=t + 0.2, hseq=10),
    ]:
        st.apply(m, 0.0)
    f = failure_summary(st)
    assert f["step"] == 10 and f["unsent"] == {"own": 0, "peers": 10}
    assert f["line"] == "rank 1 exited with code -9 (SIGKILL) at step 10 (its last steps died with it: its log has none, its peers reached 10)"


def test_a_rank_killed_long_after_its_last_step_died_where_its_log_ends():
    # DDP's join (uneven inputs): rank 0 did its 20 steps and waited, joined, while rank 1
    # trained on to 159; killed then, it read "at step 159 (its last steps died with it...)".
    from pardash.telemetry.failures import failure_summary

    t = 1.0e9
    st = RunState()
    for m in [
        *(schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)),
        schema.Step(run="r", rank=0, seq=1, step=20, step_s=0.02, t=t + 1),
        schema.Step(run="r", rank=1, seq=1, step=159, step_s=0.02, t=t + 8.9),
        schema.Event(run="r", rank=0, seq=-1, name="exit", code=-9, message="torchrun: rank 0 killed by signal 9 (SIGKILL)", t=t + 9, hseq=10),
    ]:
        st.apply(m, 0.0)
    f = failure_summary(st)
    assert f["step"] == 21 and f["unsent"] is None


def test_a_rank_never_heard_to_end_in_a_log_its_hub_closed_is_no_exit_not_running(tmp_path):
    # Node 1's torchrun killed: node 0's hub had stopped before node 1's launcher could note
    # rank 1's end, and report listed rank 1 as "running" in a log that had ended.
    t = 1.0e9
    records = [
        *(schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)),
        *(schema.Step(run="r", rank=r, seq=1, step=5, step_s=0.1, t=t + 1) for r in (0, 1)),
        schema.Event(run="r", rank=0, seq=2, name="error", step=5, t=t + 2, message="RuntimeError: Connection closed by peer"),
        schema.Event(run="r", rank=0, seq=3, name="exit", code=1, step=6, t=t + 2),
        schema.Event(run="r", rank=-1, seq=-1, name="hub", t=t + 3, message="hub stopped: 9 messages, 0 lost, 0 rejected"),
    ]
    log = tmp_path / "run.jsonl"
    log.write_bytes(b"".join(msgspec.json.encode(m) + b"\n" for m in records))
    rep = build_report(str(log))
    assert [(r["rank"], r["status"]) for r in rep["ranks"]] == [(0, "exited"), (1, "no exit")]


def test_a_node_whose_ranks_finished_while_another_nodes_failed_does_not_say_done():
    # Node 1's rank ran its 20 steps and exited 0 (torchrun on node 1: 0) while rank 0 on node
    # 0 failed: node 1's last line read "done, 2 rank(s), step 20".
    from pardash.telemetry.printer import outcome_line

    t = 1.0e9
    st = RunState()
    for m in [
        *(schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)),
        *(schema.Step(run="r", rank=r, seq=1, step=20, step_s=0.1, t=t + 1) for r in (0, 1)),
        schema.Event(run="r", rank=1, seq=2, name="exit", code=0, step=20, t=t + 2),
        schema.Event(run="r", rank=0, seq=2, name="error", step=20, t=t + 3, message="ValueError: bad batch"),
        schema.Event(run="r", rank=0, seq=3, name="exit", code=1, step=21, t=t + 3),
    ]:
        st.apply(m, 0.0)
    assert outcome_line(st, 0, {}, "run.jsonl") == (
        "pardash: this node's ranks finished, but the job failed: rank 0 exited with code 1 at step 21: ValueError: bad batch; log run.jsonl"
    )


def test_a_run_whose_hub_was_given_up_says_its_log_ends_there():
    # The hub killed 21 times: the launcher stopped restarting it, the ranks trained on to step
    # 5000, and the last line said "done, 2 rank(s), step 1880" as if the job had ended there.
    from pardash.telemetry.printer import outcome_line

    st = RunState()
    for r in (0, 1):
        st.apply(schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=1.0e9), 0.0)
        st.apply(schema.Step(run="r", rank=r, seq=1, step=1880, step_s=0.1, samples=4, t=1.0e9 + 1), 0.0)
    assert outcome_line(st, 0, {"hub_restarts": 20, "hub_given_up": True}, "run.jsonl") == (
        "pardash: done, 2 rank(s), step 1880 when telemetry stopped; the hub restarted 20x; then it kept dying and was "
        "given up: training went on without telemetry, and the log ends there, log run.jsonl"
    )
    assert outcome_line(st, 0, {"hub_restarts": 2}, "run.jsonl") == "pardash: done, 2 rank(s), step 1880; the hub restarted 2x, log run.jsonl"
    # Ranks that ended at different steps (DDP's Join): "step 6" read as the whole job's end
    st.apply(schema.Step(run="r", rank=1, seq=2, step=1890, step_s=0.1, samples=4, t=1.0e9 + 2), 0.0)
    assert outcome_line(st, 0, {}, "run.jsonl") == "pardash: done, 2 rank(s), step 1890 (last step 1880 on the slowest rank), log run.jsonl"


def test_a_failure_the_tui_hid_is_told_with_its_error_its_traceback_and_where_the_output_is():
    # Under the TUI the ranks' output goes to its file alone: the launch's last line named who
    # failed and where, but not the error, its traceback, nor the file that has them.
    from pardash.telemetry.printer import failure_traceback, outcome_line

    t = 1.0e9
    tb = 'Traceback (most recent call last):\n  File "train.py", line 11, in <module>\nValueError: bad batch\n'
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    records += [schema.Step(run="r", rank=r, seq=1, step=1, step_s=0.1, samples=4, t=t + 1) for r in (0, 1)]
    records += [
        schema.Event(run="r", rank=1, seq=2, name="error", message="ValueError: bad batch", traceback=tb, step=1, t=t + 2),
        schema.Event(run="r", rank=1, seq=3, name="exit", code=1, step=2, t=t + 2),
        schema.Event(run="r", rank=0, seq=-1, name="exit", code=-15, message="rank 0 was stopped by torchrun", t=t + 3),
    ]
    st = RunState()
    for m in records:
        st.apply(m, 0.0)
    # Headless too: torchrun's summary of the failed workers (30 lines and more) stood between
    # the error above and the last line, which said who failed but not why.
    assert outcome_line(st, 1, {}, "run.jsonl") == (
        "pardash: rank 1 exited with code 1 at step 2: ValueError: bad batch; rank 0 was stopped; the job's exit code 1; log run.jsonl"
    )
    assert outcome_line(st, 1, {}, "run.jsonl", output="runs/r/output.log") == (
        "pardash: rank 1 exited with code 1 at step 2: ValueError: bad batch; rank 0 was stopped; the job's exit code 1; "
        "output runs/r/output.log; log run.jsonl"
    )
    assert failure_traceback(st, {}) == (1, tb.rstrip("\n"))
    assert failure_traceback(st, {"stopped": True}) == (1, tb.rstrip("\n"))  # it failed before the stop
    # A job only stopped, or one that succeeded, has nothing to tell.
    stopped = RunState()
    for m in records[:4]:
        stopped.apply(m, 0.0)
    stopped.apply(schema.Event(run="r", rank=0, seq=-1, name="exit", code=-15, message="rank 0 was stopped by you", t=t + 3), 0.0)
    assert failure_traceback(stopped, {"stopped": True}) is None
    assert failure_traceback(RunState(), {}) is None


def test_a_failure_a_stop_on_another_node_caused_prints_no_traceback():
    # Stop in node 0's TUI ended rank 0; rank 1, on node 1, failed in its collective with the
    # socket closed. Node 1's last line said so ("rank 0 was stopped by the viewer on node 0
    # first"), and its launch printed rank 1's gloo traceback above it, as if it had failed
    # of itself.
    from pardash.telemetry.printer import failure_traceback

    t = 1.0e9
    tb = "Traceback (most recent call last):\n  ...\nRuntimeError: [gloo] Connection closed by peer [127.0.0.1]:5000\n"
    st = RunState()
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    records += [schema.Step(run="r", rank=r, seq=1, step=1, step_s=0.1, samples=4, t=t + 1) for r in (0, 1)]
    records += [
        schema.Event(run="r", rank=0, seq=-1, name="exit", code=-15, message="stopped by the viewer on node 0 (h0)", t=t + 2),
        schema.Event(run="r", rank=1, seq=2, name="error", message="RuntimeError: [gloo] Connection closed by peer [127.0.0.1]:5000",
                     traceback=tb, step=1, t=t + 3),
        schema.Event(run="r", rank=1, seq=3, name="exit", code=1, step=1, t=t + 3),
    ]  # fmt: skip
    for m in records:
        st.apply(m, 0.0)
    assert failure_traceback(st, {}) is None  # (node 1's launch: not itself stopped)


def test_a_job_whose_ranks_were_only_stopped_names_no_root_cause(tmp_path):
    # The user stopped the job (or a scheduler sent SIGTERM): every rank ended by SIGTERM, as
    # the launcher notes for them. None of them caused it.
    from pardash.telemetry.printer import outcome_line

    t = 1.0e9
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    records += [schema.Step(run="r", rank=r, seq=1, step=1, step_s=0.1, samples=4, t=t + 1) for r in (0, 1)]
    records += [schema.Event(run="r", rank=r, seq=-1, name="exit", code=-15, message=f"rank {r} was stopped by you", t=t + 2) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert rep["failure"] is None
    assert [(e["rank"], e["code"], e["signal"], e["role"]) for e in rep["exits"]] == [(0, -15, "SIGTERM", "stopped"), (1, -15, "SIGTERM", "stopped")]
    assert "root cause" not in render_text(rep)
    st = RunState()
    for m in load_log(log)[0]:
        st.apply(m, 0.0)
    assert outcome_line(st, 143, {}, "run.jsonl") == "pardash: the job failed with exit code 143; log run.jsonl"
    assert outcome_line(st, 143, {"stopped": True}, "run.jsonl") == "pardash: stopped by you (exit code 143); log run.jsonl"


@pytest.mark.parametrize(("note", "said"), [
    ("stopped by pardash after torchrun was killed", "stopped by pardash after torchrun was killed"),
    ("stopped by you", "stopped by you"),
    ("rank {r} was stopped by torchrun", "stopped by torchrun"),  # an older launcher's note
])  # fmt: skip
def test_the_report_says_who_stopped_the_ranks(tmp_path, note, said):
    # torchrun killed (kill -9) under `pardash launch`: the launcher said "torchrun itself was
    # killed (SIGKILL) and its ranks were stopped", the report only "ranks 0-1 exited with code
    # -15 (SIGTERM) - stopped", the launcher's note of why in the JSON's exits[].message alone.
    t = 1.0e9
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    records += [schema.Step(run="r", rank=r, seq=1, step=1, step_s=0.1, samples=4, t=t + 1) for r in (0, 1)]
    records += [schema.Event(run="r", rank=r, seq=-1, name="exit", code=-15, message=note.format(r=r), t=t + 2) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert rep["failure"] is None  # no rank failed: something outside the ranks stopped them
    line = f"ranks 0-1 {said} (SIGTERM)"  # (a stop in the words of every output: failures.stop_text)
    assert f"\nexits:\n  {line}\n" in render_text(rep)
    assert f"\n- {line}\n" in render_markdown(rep)


@pytest.mark.parametrize(
    ("failed", "said"),
    [((1, "ValueError: bad batch"), "rank 1 exited with code 1 at step 3; rank 0 was stopped"),
     ((-11, None), "rank 1 exited with code -11 (SIGSEGV) at step 3; rank 0 was stopped")],
    ids=["its-own-error", "a-signal"],
)
def test_a_job_that_failed_and_was_then_stopped_says_both(tmp_path, failed, said):
    # A rank failed and the user stopped the job while torchrun tore it down: the last line said
    # only "stopped by you (exit code 130)", the failure hidden behind the stop.
    from pardash.telemetry.printer import outcome_line

    code, error = failed
    t = 1.0e9
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    records += [schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.1, samples=4, t=t + s) for s in (1, 2) for r in (0, 1)]
    if error:
        records.append(schema.Event(run="r", rank=1, seq=3, name="error", message=error, step=2, t=t + 3))
    records.append(schema.Event(run="r", rank=1, seq=4 if error else -1, name="exit", code=code, step=3, t=t + 3))
    records.append(schema.Event(run="r", rank=0, seq=-1, name="exit", code=-15, message="rank 0 was stopped by you", t=t + 4))
    st = RunState()
    for m in records:
        st.apply(m, 0.0)
    with_error = said.replace(" at step 3", f" at step 3: {error}") if error else said
    assert outcome_line(st, 130, {"stopped": True}, "run.jsonl") == (
        f"pardash: stopped by you after the job failed: {with_error} (exit code 130); log run.jsonl"
    )
    # The stop's time (the supervisor's result): a rank's own exit before it is a failure
    # before the stop; one after it is the stop's doing (a SIGTERM handler's sys.exit(1)). The
    # launcher's note of a signal (seq -1) is torchrun's word at the end: not judged by time.
    assert outcome_line(st, 130, {"stopped": True, "stop_t": t + 3.5}, "run.jsonl").startswith("pardash: stopped by you after the job failed")
    after = outcome_line(st, 130, {"stopped": True, "stop_t": t + 2.5}, "run.jsonl")
    assert after == ("pardash: stopped by you (exit code 130); log run.jsonl" if error else outcome_line(st, 130, {"stopped": True}, "run.jsonl"))
    # Under the TUI (the ranks' output on no screen): where the output is, too.
    assert outcome_line(st, 130, {"stopped": True}, "run.jsonl", output="runs/x/output.log") == (
        f"pardash: stopped by you after the job failed: {with_error} (exit code 130); output runs/x/output.log; log run.jsonl"
    )
    # A peer's failure (the collective's socket closed under a rank as the stop ended the other)
    # is the stop's doing, not a failure before it.
    st = RunState()
    for m in records[:4]:
        st.apply(m, 0.0)
    st.apply(schema.Event(run="r", rank=1, seq=3, name="error", message="RuntimeError: Connection closed by peer [127.0.0.1]:1234", step=2, t=t + 3), 0.0)
    st.apply(schema.Event(run="r", rank=1, seq=4, name="exit", code=1, step=3, t=t + 3), 0.0)
    st.apply(schema.Event(run="r", rank=0, seq=-1, name="exit", code=-15, message="rank 0 was stopped by you", t=t + 4), 0.0)
    assert outcome_line(st, 130, {"stopped": True}, "run.jsonl") == "pardash: stopped by you (exit code 130); log run.jsonl"
    # (the ranks' output is named all the same: under the TUI, their prints went to it alone)
    assert outcome_line(st, 130, {"stopped": True}, "run.jsonl", output="o.log") == "pardash: stopped by you (exit code 130); output o.log; log run.jsonl"
    # Nor is a script's own error raised of the stop's SIGTERM (a handler raising an exception of its own).
    st = RunState()
    for m in records[:4]:
        st.apply(m, 0.0)
    st.apply(schema.Event(run="r", rank=1, seq=3, name="error", message="SigtermException: ", step=2, t=t + 3), 0.0)
    st.apply(schema.Event(run="r", rank=1, seq=4, name="exit", code=1, step=3, t=t + 3), 0.0)
    assert outcome_line(st, 130, {"stopped": True}, "run.jsonl") == "pardash: stopped by you (exit code 130); log run.jsonl"


def _two_ranks_ended(path, codes: dict[int, tuple[int, int]]) -> None:
    """A 2-rank ddp log of 3 steps whose ranks end as ``codes`` says: {rank: (code, seq)}, seq
    -1 for the launcher's note of an exit, else the rank's own word."""
    t = 1.0e9
    records = [schema.Hello(run=path.stem, rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    records += [schema.Step(run=path.stem, rank=r, seq=s, step=s, step_s=0.1, samples=4, loss=1.0 / s, t=t + s) for s in (1, 2, 3) for r in (0, 1)]
    records += [schema.Event(run=path.stem, rank=r, seq=seq, name="exit", code=code, step=3, t=t + 4) for r, (code, seq) in codes.items()]
    _write_log(path, records)


def test_compare_counts_stopped_ranks_apart_from_exits_with_an_error(tmp_path):
    # `pardash report --compare A B` of a clean run against the same run stopped by its user
    # (the launcher's notes: SIGTERM; the bundled trainer's own exit on Ctrl-C: 130; a script
    # that exits as the shell would on SIGTERM: 143) said B had "2 exits with an error",
    # "worse", where `pardash report B` names no error and says "- stopped".
    _two_ranks_ended(tmp_path / "clean.jsonl", {0: (0, 4), 1: (0, 4)})
    for name, codes in (("by_you", {0: (-15, -1), 1: (-15, -1)}), ("ctrl_c", {0: (130, 4), 1: (143, 4)})):
        _two_ranks_ended(tmp_path / f"{name}.jsonl", codes)
        rep = build_report(str(tmp_path / f"{name}.jsonl"))
        assert rep["failure"] is None and {e["role"] for e in rep["exits"]} == {"stopped"}
        proc = _pardash("report", "clean.jsonl", "--compare", f"{name}.jsonl", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        rows = {line.split("  ")[0]: line.split() for line in proc.stdout.splitlines()}
        # A, B, B - A, change, verdict ("stopped" has none)
        assert rows["exits with an error"][-5:] == ["0", "0", "0", "-", "same"], proc.stdout
        assert rows["ranks stopped (no error of their own)"][-4:] == ["0", "2", "+2", "-"], proc.stdout
    # A failure's stopped ranks are no errors either: the root cause and its victim are.
    rows = {r["metric"]: r for r in make_logs.pinned_compare("ddp4_straggler.jsonl", "fsdp4_crash.jsonl")["rows"]}
    assert (rows["exits"]["b"], rows["stopped"]["b"]) == (2, 2)


def _diverging_log(path, bad_from: int | None, bad_to: int = 7, first: float = math.nan) -> None:
    """A 2-rank ddp log of 6 steps whose loss is NaN on both ranks from ``bad_from`` (None:
    never; ``first`` at that step) to before ``bad_to``, with the warnings each rank's reporter
    sends then (its own text), its steps going on without a loss."""
    from pardash.telemetry.reporter import Reporter

    class Said:  # (what the reporter sends when its loss turns, without a socket)
        _loss_bad = None

        def __init__(self) -> None:
            self.events: list[schema.Event] = []

        def event(self, name: str, message: str = "", **fields) -> None:
            self.events.append(schema.Event(name=name, message=message, **fields))

    t = 1.0e9
    records = [schema.Hello(run=path.stem, rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    said = {r: Said() for r in (0, 1)}
    for s in range(1, 7):
        for r in (0, 1):
            fields = {"loss": (first if s == bad_from else math.nan) if bad_from is not None and bad_from <= s < bad_to else 2.0 / s}
            Reporter._loss_turns(said[r], fields, fields["loss"], s)
            records += [msgspec.structs.replace(e, run=path.stem, rank=r, seq=0, t=t + s) for e in said[r].events]
            said[r].events.clear()
            records.append(schema.Step(run=path.stem, rank=r, seq=s, step=s, step_s=0.1, samples=4, loss=fields["loss"], t=t + s))
    records += [schema.Event(run=path.stem, rank=r, seq=7, name="exit", code=0, step=6, t=t + 7) for r in (0, 1)]
    _write_log(path, records)


def test_a_diverged_runs_last_loss_reads_nan_and_compare_judges_it_worse(tmp_path):
    # A run whose loss went NaN at step 3 (--lr 1e5): its steps carry no loss from then on
    # (JSON has no NaN), so the report's "last loss" read "-" as for a script that gives none,
    # and `--compare` set it beside a good run as "0.7204  -  -  -" with "the runs ... their
    # last losses are shown, not judged".
    from pardash.telemetry.compare import compare_reports, render_compare_text

    _diverging_log(tmp_path / "good.jsonl", None)
    _diverging_log(tmp_path / "nan.jsonl", 3)
    bad = build_report(str(tmp_path / "nan.jsonl"))
    assert [(r["last_loss"], r["loss_not_finite"]) for r in bad["ranks"]] == [(None, {"value": "nan", "step": 3})] * 2
    row = next(line for line in render_text(bad).splitlines() if line.lstrip().startswith("0 "))
    assert " 6  not finite from step 3 (nan at 3) " in row, row
    good = build_report(str(tmp_path / "good.jsonl"))
    assert all("loss_not_finite" not in r for r in good["ranks"])
    _diverging_log(tmp_path / "spike.jsonl", 3, 4)  # (a spike it came back from: no NaN at its end)
    spike = build_report(str(tmp_path / "spike.jsonl"))
    assert [(r["last_loss"], "loss_not_finite" in r) for r in spike["ranks"]] == [(2.0 / 6, False)] * 2
    text = render_compare_text(compare_reports(good, bad))
    row = next(line for line in text.splitlines() if line.startswith("loss at the last step"))
    assert row.split()[-5:] == ["0.3333", "nan", "-", "-", "worse"], text
    assert "note: B's loss was not finite from step 3 to its end (nan at 3): it diverged" in text
    assert "not judged" not in text
    cmp = compare_reports(bad, good)
    (last,) = [r for r in cmp["rows"] if r["metric"] == "last_loss"]
    assert (last["a_not_finite"], last["verdict"]) == ("nan", "better")


def test_a_loss_that_went_inf_then_nan_is_not_said_to_end_inf(tmp_path):
    # Loss inf at step 18, nan from 19 to the end (cd.jsonl): the reporter says the first value
    # alone (a warning; its steps go on without a loss), and the rank table's "last loss" read
    # "inf", which the run's last loss was not.
    _diverging_log(tmp_path / "inf.jsonl", 3, first=math.inf)
    rep = build_report(str(tmp_path / "inf.jsonl"))
    assert [(r["last_loss"], r["loss_not_finite"]) for r in rep["ranks"]] == [(None, {"value": "inf", "step": 3})] * 2
    for text in (render_text(rep), render_markdown(rep)):
        rows = [line for line in text.splitlines() if re.match(r"^\|? *[01] ", line)]
        assert len(rows) == 2 and all("not finite from step 3 (inf at 3)" in row for row in rows), text


def test_compare_says_a_run_resumed_from_a_checkpoint_began_past_the_models_first_step(tmp_path):
    # `--compare` of a run from step 1 against one `--resume`d from step 40's checkpoint set
    # "loss at the first step 4.1842 0.9255 -77.9%" side by side without a word: B's first
    # loss is a trained model's.
    from pardash.telemetry.compare import compare_reports, render_compare_text

    def run(path, steps, resumed_at=None):
        t = 1.0e9
        records = [schema.Hello(run=path.stem, rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
        if resumed_at is not None:
            records += [schema.Event(run=path.stem, rank=r, seq=1, name="resume", step=resumed_at, message=f"step {resumed_at} from ck", duration_s=0.1, t=t + 0.5) for r in (0, 1)]
        records += [schema.Step(run=path.stem, rank=r, seq=s + 1, step=s, step_s=0.1, samples=4, loss=4.0 / s, t=t + s) for s in steps for r in (0, 1)]
        _write_log(path, records)
        return build_report(str(path))

    fresh = run(tmp_path / "fresh.jsonl", range(1, 51))
    resumed = run(tmp_path / "resumed.jsonl", range(41, 51), resumed_at=40)
    text = render_compare_text(compare_reports(fresh, resumed))
    assert "note: B resumed from a checkpoint of step 40: its first step is 41, not the model's first" in text, text
    assert "resumed from" not in render_compare_text(compare_reports(fresh, fresh))
    both = render_compare_text(compare_reports(resumed, resumed))  # the same start: nothing to say
    assert "resumed from" not in both


def test_a_job_that_took_no_step_says_so_and_why_rather_than_step_0():
    # `--resume` from a checkpoint already at --steps: every rank says hello and resumes at
    # step 150, trains nothing and exits 0. "done, 2 rank(s), step 0" read as a run that lost
    # its checkpoint.
    from pardash.telemetry.printer import outcome_line

    t = 1.0e9
    st = RunState()
    for r in (0, 1):
        st.apply(schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t), 0.0)
        st.apply(schema.Event(run="r", rank=r, seq=1, name="resume", step=150, message="step 150 from ckpt", t=t + 1), 0.0)
    assert outcome_line(st, 0, {}, "run.jsonl") == (
        "pardash: done, 2 rank(s), no step taken (resumed at step 150, nothing left to train), log run.jsonl")
    st.apply(schema.Step(run="r", rank=0, seq=2, step=151, step_s=0.1, samples=4, t=t + 2), 0.0)
    st.apply(schema.Step(run="r", rank=1, seq=2, step=151, step_s=0.1, samples=4, t=t + 2), 0.0)
    assert outcome_line(st, 0, {}, "run.jsonl") == "pardash: done, 2 rank(s), step 151, log run.jsonl"


def test_a_kill_torchrun_restarted_from_is_a_recovered_failure_told_verbatim(tmp_path):
    # Attempt 1: rank 1 SIGKILLed (the launcher's note), rank 0 fails on the broken connection;
    # torchrun restarts both, which finish. The kill is the recovered failure even though rank
    # 1 finished in the end; gloo's '[/path/pair.cc:537]' is text, not markup.
    t = 1.0e9
    hello = lambda r, restart: schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", restart=restart, t=t)  # noqa: E731
    gloo = "RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:1: Connection reset by peer"
    records = [hello(0, 0), hello(1, 0)]
    records += [schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.1, samples=4, t=t + s / 10) for s in (1, 2, 3) for r in (0, 1)]
    records += [
        schema.Event(run="r", rank=1, seq=-1, name="exit", code=-9, message="torchrun: rank 1 killed by signal 9 (SIGKILL)", t=t + 1),
        schema.Event(run="r", rank=0, seq=1, name="error", message=gloo, step=3, t=t + 1),
        schema.Event(run="r", rank=0, seq=2, name="exit", code=1, step=4, t=t + 1),
        hello(0, 1), schema.Event(run="r", rank=0, seq=-1, name="restart", message="rank 0 restarted", t=t + 2),
        hello(1, 1), schema.Event(run="r", rank=1, seq=-1, name="restart", message="rank 1 restarted", t=t + 2),
    ]  # fmt: skip
    records += [schema.Event(run="r", rank=r, seq=1, name="exit", code=0, step=9, t=t + 3) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert rep["failure"] is None
    (f,) = rep["recovered"]
    assert (f["rank"], f["code"], f["signal"], f["victims"]) == (1, -9, "SIGKILL", [0])
    # ... in the step after its last, as the job's last failure is told (it had no step: that
    # attempt's steps were gone from memory by the end).
    assert f["step"] == 4 and "restarted by torchrun after: rank 1 exited with code -9 (SIGKILL) at step 4" in render_text(rep)
    # Without the kill's note, only the victim's word is there: it is told as a peer's failure.
    del records[8]
    _write_log(log, records)
    rep = build_report(str(log))
    (f,) = rep["recovered"]
    assert (f["rank"], f["unrecorded"]) == (0, [1])
    text = " ".join(render_text(rep).split())  # as words: the console wraps long lines
    assert "[/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:1" in text
    assert "the rank that failed first left no exit record (no word from rank 1: killed?)" in text


def test_a_rank_that_left_early_is_named_behind_its_peers_failure(tmp_path):
    # An early stop decided on rank 1 alone: it exits 0 at step 15, rank 0's next all-reduce
    # fails on the closed connection. The line said "the rank that failed first left no exit
    # record" though rank 1's exit was right there.
    t = 1.0e9
    gloo = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:5"
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    records += [
        schema.Event(run="r", rank=1, seq=1, name="exit", code=0, step=15, t=t + 1),
        schema.Event(run="r", rank=0, seq=1, name="error", message=gloo, step=15, t=t + 2),
        schema.Event(run="r", rank=0, seq=2, name="exit", code=1, step=16, t=t + 2),
    ]  # fmt: skip
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    f = rep["failure"]
    assert (f["rank"], f["left_early"], f["unrecorded"]) == (0, [{"rank": 1, "step": 15}], [])
    assert "rank 1 at step 15 left the job (exit code 0) while the others trained on" in f["line"]
    assert "left no exit record" not in f["line"]
    assert "rank 0 exited with code 1 at step 16 - failed as a peer had left the job" in render_text(rep)
    # The TUI names no victim "the root cause" either.
    from pardash.telemetry.causes import cause_rank

    st = RunState()
    for m in load_log(log)[0]:
        st.apply(m, m.t)
    assert cause_rank(st) is None

    # A rank that finished the last step with the others is no early leaver: rank 1 failing in
    # teardown, rank 2 killed without a word (the hint that names it stays).
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=3, pid=10 + r, strategy="ddp", t=t) for r in (0, 1, 2)]
    records += [
        schema.Event(run="r", rank=0, seq=1, name="exit", code=0, step=100, t=t + 1),
        schema.Event(run="r", rank=1, seq=1, name="error", message=gloo.replace("closed", "reset"), step=100, t=t + 2),
        schema.Event(run="r", rank=1, seq=2, name="exit", code=1, step=100, t=t + 2),
    ]  # fmt: skip
    _write_log(log, records)
    f = build_report(str(log))["failure"]
    assert (f["rank"], f["left_early"], f["unrecorded"]) == (1, [], [2])
    assert "left no exit record (no word from rank 2: killed?)" in f["line"]


def test_training_time_and_samples_per_s_leave_the_evaluations_out(tmp_path):
    # 10 steps of 20 ms and a 12 s validation after step 5: "training 12.2 s" and 13 samples/s,
    # where the steps ran at 800.
    t = 1.0e9
    records: list = [schema.Hello(run="r", rank=0, seq=0, world_size=1, pid=10, strategy="single", t=t)]
    for step in range(1, 11):
        t += 0.02
        records.append(schema.Step(run="r", rank=0, seq=step, step=step, samples=16, step_s=0.02, t=t))
        if step == 5:
            t += 12.0
            records.append(schema.Event(run="r", rank=0, seq=100, name="eval", duration_s=12.0, step=5, t=t))
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert rep["train_s"] == pytest.approx(0.2)
    assert rep["samples_per_s"] == pytest.approx(160 / 0.2)
    assert rep["evaluations"] == {"count": 1, "seconds": 12.0, "ranks": [0]}


@pytest.mark.parametrize("saving", ["between the steps", "beside the steps"])
def test_training_time_and_samples_per_s_leave_the_checkpoint_saves_out(tmp_path, saving):
    # --checkpoint-every 1: 40 steps of 13.5 ms, each followed by a 35 ms save on both ranks
    # (the trainer's step times leave the saves out, as evaluations): "667 samples/s over the
    # time some rank was in a step", the saves counted in, where the steps ran at 2,361. A save
    # that ran beside the steps (asynchronous: said once the next steps had run) held no rank
    # out of them: nothing of it is taken out.
    t = 1.0e9
    step_s, save_s, n = 0.0135, 0.035, 40
    records: list = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    for step in range(1, n + 1):
        t += step_s
        records += [schema.Step(run="r", rank=r, seq=2 * step, step=step, samples=16, step_s=step_s, t=t) for r in (0, 1)]
        if saving == "between the steps":
            t += save_s
        records += [schema.Event(run="r", rank=r, seq=2 * step + 1, name="checkpoint", message=f"ck/step-{step:08d}",
                                 step=step, duration_s=save_s, t=t) for r in (0, 1)]  # fmt: skip
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    near = {"abs": 1e-4}  # (times of 1e9 s: float64 holds them to a microsecond)
    assert rep["train_s"] == pytest.approx(n * step_s, **near)  # (the last save is after the last step)
    assert rep["samples_per_s"] == pytest.approx(2 * 16 * n / (n * step_s), rel=1e-3)
    assert len(rep["checkpoints"]["saved"]) == n


@pytest.mark.parametrize("evaluating", [(0,), (0, 1)], ids=["rank 0 alone, the others wait in their steps", "every rank"])
def test_no_rank_trains_while_any_rank_evaluates(tmp_path, evaluating):
    # Rank 0 alone validates every 25 steps for 0.1 s (s4c_rank0_eval.py, no barrier): rank 1
    # waits for it in its next step's backward (its all-reduce), its self time untouched. The
    # report said the evaluations were outside the steps and counted rank 1's wait for them as
    # training: "training 1.2 s", 10,396 samples/s, where the same script with every rank
    # evaluating read 28,000 and rank 0's own steps ran at 24,000. Whichever ranks evaluate,
    # their evaluations are no training time, nor is the time the others wait for them.
    t = 1.0e9
    work, evaluation, n, every = 0.004, 0.1, 100, 25
    records: list = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    for step in range(1, n + 1):
        after_eval = step > 1 and (step - 1) % every == 0
        for r in (0, 1):
            waits = after_eval and r not in evaluating  # its step holds the wait for rank 0's evaluation
            took = work + evaluation if waits else work
            records.append(schema.Step(run="r", rank=r, seq=step, step=step, samples=32, step_s=took, self_s=0.001,
                                       backward_s=took - 0.002, t=t + took))
        t += work
        if step % every == 0:
            records += [schema.Event(run="r", rank=r, seq=1000 + step, name="eval", step=step, duration_s=evaluation, t=t + evaluation)
                        for r in evaluating]  # fmt: skip
            t += evaluation
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    near = {"abs": 1e-4}  # (times of 1e9 s: float64 holds them to a microsecond)
    assert rep["duration_s"] == pytest.approx(n * work + n // every * evaluation, **near)
    assert rep["train_s"] == pytest.approx(n * work, **near)
    assert rep["samples_per_s"] == pytest.approx(2 * 32 * n / (n * work), rel=1e-4)
    assert rep["steady_samples_per_s"] == pytest.approx(2 * 32 / work, rel=1e-4)
    # (the others' wait at their next step's collective: none after the last evaluation, the job's last step before it)
    alone_waited = {"others_waited_s": pytest.approx((n // every - 1) * evaluation)} if len(evaluating) == 1 else {}
    assert rep["evaluations"] == {"count": n // every, "seconds": pytest.approx(n // every * evaluation), "ranks": sorted(evaluating), **alone_waited}
    # A rank evaluating alone: the others' wait for it said beside the figures that leave it out
    # (review 333: "rank 0 alone evaluating 1.6 s every 100 steps" read nowhere)
    alone = "; rank 0 alone evaluated: the others waited 0.3 s for it (37.5% of the run)" in render_text(rep)
    assert alone == (len(evaluating) == 1), render_text(rep)
    # what the figure is over, beside the progress lines' wall clock (evaluations in): two
    # figures for one run said neither
    line = f"samples/s          {rep['samples_per_s']:,.0f} over the time some rank was in a step, none evaluating (steady"
    assert line in render_text(rep)


def test_a_failure_far_back_in_a_long_run_is_still_reported():
    # A viewer keeps the newest 500 events; the report must keep a long run's early failure.
    import tempfile

    t = 1.0e9
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", restart=0, t=t) for r in (0, 1)]
    records += [schema.Event(run="r", rank=1, seq=1, name="exit", code=1, step=3, t=t + 1)]
    records += [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=20 + r, strategy="ddp", restart=1, t=t + 2) for r in (0, 1)]
    records += [schema.Event(run="r", rank=r, seq=-1, name="restart", message="restarted", t=t + 2) for r in (0, 1)]
    records += [schema.Event(run="r", rank=0, seq=1 + i, name="checkpoint", step=10 * i, duration_s=0.1, t=t + 3) for i in range(1, 700)]
    records += [schema.Event(run="r", rank=r, seq=800, name="exit", code=0, step=7000, t=t + 4) for r in (0, 1)]
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "run.jsonl"
        _write_log(log, records)
        rep = build_report(str(log))
    assert rep["failure"] is None and [(f["rank"], f["step"]) for f in rep["recovered"]] == [(1, 3)]


def test_a_step_saved_again_after_a_resume_counts_its_ranks_once(tmp_path):
    lines = []
    for rank in (0, 1):
        lines.append(schema.Hello(rank=rank, world_size=2, run="r", seq=0, t=1.0, hseq=1 + rank))
    h = 10
    for attempt in range(2):  # saved, then saved again by a run resumed from an earlier step
        for rank in (0, 1):
            h += 1
            lines.append(schema.Event(rank=rank, name="checkpoint", step=4, message="/c/step-00000004",
                                      duration_s=1.0 + attempt, run="r", seq=h, t=2.0, hseq=h))
    log = tmp_path / "run.jsonl"
    log.write_bytes(b"".join(schema.encode_json(m) + b"\n" for m in lines))
    (saved,) = build_report(str(log))["checkpoints"]["saved"]
    assert saved == {"step": 4, "path": "/c/step-00000004", "ranks": 2, "duration_s": 2.0}


def test_a_hang_names_the_rank_stalled_outside_any_collective_first():
    # rank 1 stuck in its data loader, the others waiting for it in backward's all-reduce: the
    # report listed rank 0 first, each "stalled" alike.
    from pardash.telemetry.summary import ranks_named
    from pardash.telemetry.report_render import stall_lines

    def stall(rank, phase, step=5):
        return {"rank": rank, "kind": "stalled", "phase": phase, "step": step, "until": None}

    rep = {"world_size": 3, "stalls": [stall(0, "backward"), stall(1, "data"), stall(2, "backward")]}
    assert stall_lines(rep) == [
        "rank 1 stalled in data after step 5; never resumed; likely the cause of the hang",
        f"{ranks_named([0, 2])} stalled in backward after step 5; never resumed",
    ]
    # A data stall alone (or every rank in data) is no guess about anyone else.
    assert stall_lines({"world_size": 3, "stalls": [stall(3, "data", 12)]}) == ["rank 3 stalled in data after step 12; never resumed"]
    # Nor are two ranks stuck while the job's other ranks went on.
    rep["world_size"] = 8
    assert not any("likely the cause" in line for line in stall_lines(rep))
    # The rank behind the others, whatever its phase: rank 0 had finished step 100 and waited
    # between steps (which reads as "data"); rank 1 hung in its step 100.
    hang = {"world_size": 2, "stalls": [stall(0, "data", 100), stall(1, "backward", 99)]}
    assert stall_lines(hang)[0] == "rank 1 stalled in backward after step 99; never resumed; likely the cause of the hang"


def test_metrics_the_script_logged_are_in_the_report(tmp_path):
    # `pt.log(grad_norm=..., tokens=...)` reached the log and `export`, but not the report.
    from pardash.telemetry import schema
    from pardash.telemetry.report import build_report, render_markdown, render_text

    log = tmp_path / "run.jsonl"
    msgs: list = [schema.Hello(rank=r, world_size=2, t=1.7e9, run="x", strategy="ddp") for r in range(2)]
    for step in range(1, 6):
        for r in range(2):
            custom = {"grad_norm": 10.0 / step + r, "tokens": 512.0, "micro_batches": 2.0}
            msgs.append(schema.Step(rank=r, step=step, seq=step, t=1.7e9 + step, step_s=0.1, loss=1.0, custom=custom, run="x"))
    log.write_bytes(schema.encode_json_lines(msgs))
    rep = build_report(str(log))
    assert rep["custom"] == {
        "grad_norm": {"first": 10.5, "last": 2.5, "ranks": 2},
        "tokens": {"first": 512.0, "last": 512.0, "ranks": 2},
        "micro_batches": {"first": 2.0, "last": 2.0, "ranks": 2},
    }
    assert "  grad_norm: 2.5 at the last step (first 10.5)" in render_text(rep)
    # pardash's own count is said as such (it read as a metric "the script logged").
    assert "micro_batches: 2 at the last step (first 2) - batches a step, each a forward with its own backward (gradient accumulation), counted by pardash" in render_text(rep)
    assert "## Other metrics" in render_markdown(rep)


def test_the_progress_line_says_which_rank_a_hang_waits_for():
    # The headless lines said only "1 silent, 1 stalled": the rank frozen by SIGSTOP was named
    # nowhere until the report.
    from pardash.telemetry.printer import progress_line
    from pardash.telemetry.state import RunState

    st = RunState()
    for r in range(2):
        st.apply(schema.Hello(rank=r, world_size=2), 0)
        st.apply(schema.Step(rank=r, step=345, step_s=0.1), 0)
    st.apply(schema.Verdict(rank=1, verdict="silent", step=345), 0)
    st.apply(schema.Verdict(rank=0, verdict="stalled", cause="backward", step=345), 0)
    assert progress_line(st, 12.0).endswith("| 1 silent, 1 waiting | likely waiting for rank 1")


def test_an_exit_torchrun_noted_keeps_its_code_and_the_root_cause_its_step(tmp_path):
    # torchrun saw rank 0 end with SIGTERM after rank 1 was killed; rank 0 then said "1" itself:
    # the report kept 1. Rank 1, killed without a word, had no step in the exits list while the
    # failure line said "at step 748".
    from pardash.telemetry.report import build_report

    msgs = [schema.Hello(rank=r, world_size=2, pid=10 + r, strategy="ddp", seq=0, t=1.0e9) for r in range(2)]
    for s in range(1, 748):
        msgs += [schema.Step(rank=r, step=s, seq=s, step_s=0.1, t=1.0e9 + s * 0.1) for r in range(2)]
    msgs += [
        schema.Event(rank=1, seq=-1, name="exit", code=-9, message="torchrun: rank 1 killed by signal 9 (SIGKILL)", t=1.0e9 + 80),
        schema.Event(rank=0, seq=-1, name="exit", code=-15, message="torchrun: rank 0 killed by signal 15 (SIGTERM)", t=1.0e9 + 80),
        schema.Event(rank=0, seq=900, name="exit", code=1, step=748, t=1.0e9 + 80.1),
    ]
    log = tmp_path / "run.jsonl"
    log.write_bytes(b"".join(schema.encode_json(m) + b"\n" for m in msgs))
    exits = {e["rank"]: e for e in build_report(str(log))["exits"]}
    assert (exits[0]["code"], exits[0]["step"]) == (-15, 748)
    assert (exits[1]["code"], exits[1]["role"], exits[1]["step"]) == (-9, "cause", 748)


def test_a_step_that_arrives_after_a_later_one_is_counted_once_not_as_a_rerun(tmp_path):
    # A rank's heartbeat thread sends the steps its loop holds on its own socket: step 74 came
    # after step 75, and the report counted 74 as "taken again" (146 steps of 147).
    from pardash.telemetry.report import build_report

    order = [*range(1, 74), 75, 74, *range(76, 101), *range(91, 101)]  # then a resume back to 91
    msgs = [schema.Hello(rank=0, world_size=1, pid=10, seq=0, t=1.0e9)]
    msgs += [schema.Step(rank=0, step=s, seq=i + 1, step_s=0.1, t=1.0e9 + i * 0.1) for i, s in enumerate(order)]
    log = tmp_path / "run.jsonl"
    log.write_bytes(b"".join(schema.encode_json(m) + b"\n" for m in msgs))
    (r,) = build_report(str(log))["ranks"]
    assert (r["steps"], r["steps_rerun"]) == (100, 10)


def test_a_viewer_left_open_after_the_job_adds_nothing_to_the_runs_duration(tmp_path):
    # The hub's "hub stopped" note comes when the last viewer quits: a TUI left open 50 s after
    # a 7 s job made the report say "duration 54.4 s". Nor does a hub started alone 11 s before
    # the job count: the run is from its ranks' first word to their last.
    msgs = [schema.Event(rank=-1, seq=-1, name="hub", message="hub started", t=1.0e9 - 11)]
    msgs += [schema.Hello(rank=0, world_size=1, pid=10, seq=0, t=1.0e9 + 0.5)]
    msgs += [schema.Step(rank=0, step=s, seq=s, step_s=0.1, t=1.0e9 + 1 + s * 0.1) for s in range(1, 61)]
    msgs += [schema.Event(rank=0, seq=61, name="exit", code=0, t=1.0e9 + 7.0)]
    msgs += [schema.Event(rank=-1, seq=-1, name="hub", message="hub stopped: 63 messages", t=1.0e9 + 55.0)]
    log = tmp_path / "run.jsonl"
    log.write_bytes(b"".join(schema.encode_json(m) + b"\n" for m in msgs))
    assert build_report(str(log))["duration_s"] == pytest.approx(6.5)


def test_a_run_stopped_before_its_first_step_lasts_from_its_hubs_start(tmp_path):
    # Ctrl-C of a launch before step 1: the ranks' only words were their hellos, 2e-05 s apart,
    # and the report said "duration 2e-05 s (training 0.0 s)" of a job that ran 14 s.
    t = 1.0e9
    msgs = [schema.Event(rank=-1, seq=-1, name="hub", message="hub started", t=t)]
    msgs += [schema.Hello(rank=r, world_size=2, pid=10 + r, seq=0, strategy="ddp", t=t + 14.0 + r * 2e-5) for r in (0, 1)]
    msgs += [schema.Event(rank=-1, seq=-1, name="hub", message="hub stopped: 2 messages", t=t + 40.0)]
    log = tmp_path / "run.jsonl"
    _write_log(log, msgs)
    rep = build_report(str(log))
    assert rep["duration_s"] == pytest.approx(14.0 + 2e-5)  # to the ranks' last word, not the hub's (a viewer kept open)
    assert "\nduration           14.0 s (training 0.0 s)\n" in render_text(rep)
    # With no rank's word at all, the hub's own records are all the log holds of the run.
    _write_log(log, [msgs[0], msgs[-1]])
    assert build_report(str(log))["duration_s"] == pytest.approx(40.0)


def test_a_duration_under_a_second_is_written_out(tmp_path):
    # Two steps a few microseconds long (a hand-made log, a step timer's resolution) read
    # "duration 2e-05 s (training 2e-05 s)".
    t = 1.0e9
    msgs = [schema.Hello(rank=r, world_size=2, pid=10 + r, seq=0, strategy="ddp", t=t) for r in (0, 1)]
    msgs += [schema.Step(rank=r, step=1, seq=1, step_s=2e-5, samples=4, t=t + 2e-5) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, msgs)
    line = next(x for x in render_text(build_report(str(log))).splitlines() if x.startswith("duration"))
    assert line == "duration           0.00002 s (training 0.00002 s)"


def test_the_report_counts_what_the_hubs_refused_and_says_when_the_log_ends_early(tmp_path):
    # What the hub refused was shown only live (a total in the TUI's header); a log cut short
    # (the hub killed for good, its disk full) read as a run whose ranks were still "running".
    from pardash.telemetry.hubcore import HubCore
    from pardash.telemetry.recorder import Recorder

    log = tmp_path / "run.jsonl"
    rec = Recorder(log)
    core = HubCore(run_id="r", recorder=rec, world_size=2)
    for rank in (0, 1):
        core.ingest_bytes(schema.encode(schema.Hello(run="r", rank=rank, world_size=2, t=1.0e9)), 1.0)
    for k in range(3):
        core.ingest_bytes(b"\x00garbage" + bytes([k]), 1.0)
    core.ingest_bytes(schema.encode(schema.Step(run="other", rank=0, seq=1, step=1, t=1.0e9 + 1)), 1.0)
    core.ingest_bytes(schema.encode(schema.Step(run="r", rank=0, seq=1, step=1, step_s=0.1, t=1.0e9 + 1)), 1.0)
    core.tick(100.0)  # the hub notes its count as it grows
    rec.close()
    # A second hub (restarted after the first was killed) refuses one more, and is killed too.
    with open(log, "ab") as fh:
        for m in (schema.Event(rank=-1, seq=-1, name="hub_restart", message="hub restarted", t=1.0e9 + 2),
                  schema.Event(rank=-1, seq=-1, name="hub", message="refused so far: 1 rejected (foreign_run 1)", t=1.0e9 + 3),
                  schema.Step(run="r", rank=1, seq=1, step=1, step_s=0.1, t=1.0e9 + 4)):  # fmt: skip
            fh.write(schema.encode_json(m) + b"\n")
    rep = build_report(str(log))
    assert rep["rejected_by_reason"] == {"invalid": 3, "foreign_run": 2}
    assert rep["log_ends_early"] == {"step": 1, "running": 2, "stalled": 0, "silent": 2, "live_run": None,  # (the tick at 100 s judged them)
                                     "continued_at": None, "lines_lost": None, "steps_lost": None}  # fmt: skip
    text = render_text(rep)
    assert "refused by the hub  5 message(s) at its ports (invalid 3, foreign_run 2)" in text
    assert "log ends early      at step 1, with 2 rank(s) not ended (2 silent) and no closing line from the hub" in text
    # The hub's closing line ends the log as it should: nothing said then.
    with open(log, "ab") as fh:
        fh.write(schema.encode_json(schema.Event(rank=-1, seq=-1, name="hub", message="hub stopped: 9 messages, 0 lost, 1 rejected (foreign_run 1)", t=1.0e9 + 5)) + b"\n")
    rep = build_report(str(log))
    assert rep["log_ends_early"] is None and rep["rejected_by_reason"] == {"invalid": 3, "foreign_run": 2}
    # The headless progress lines say it as it happens.
    assert progress_line(RunState(), 1.0, {"invalid": 3, "foreign_run": 2}).endswith(" | 5 refused by the hub")
    # A node's ranks whose keys the hub does not admit try again ~40 times a second: connections,
    # not records ("825 refused by the hub" read as an attack).
    line = progress_line(RunState(), 1.0, {"invalid": 3, "no_key": 825})
    assert line.endswith(" | 3 refused by the hub | 825 connections refused (no key)"), line



def test_a_log_whose_disk_stayed_full_points_to_its_complete_copy_not_a_killed_hub(tmp_path):
    # The hub wrote the whole log to a copy as it stopped, its disk still full, and ended the
    # log with where ("log continued in full at PATH (...)"): the report blamed the hub
    # ("killed, out of disk") and read the 5 steps the disk took as the run.
    from pardash.telemetry.recorder import CONTINUED_AT

    log, copy = tmp_path / "run.jsonl", tmp_path / "runs" / "r 1" / "run.complete-7.jsonl"
    msgs = [schema.Hello(run="r", rank=0, world_size=1, t=1000.0),
            *(schema.Step(run="r", rank=0, seq=s, step=s, step_s=0.1, t=1000.0 + s) for s in range(1, 6))]  # fmt: skip
    note = schema.Event(rank=-1, seq=-1, name="warning", t=1010.0,
                        message=f"{CONTINUED_AT}{copy} (the hub stopped with 995 lines of steps 6-1000 that this disk could not take; "
                                "that file holds all of this one and them)")  # fmt: skip
    log.write_bytes(b"".join(schema.encode_json(m) + b"\n" for m in (*msgs, note)))
    rep = build_report(str(log))
    assert rep["log_ends_early"]["continued_at"] == str(copy) and rep["log_ends_early"]["live_run"] is None
    row = next(line for line in render_text(rep).splitlines() if line.startswith("log ends early"))
    assert row == (f"log ends early     at step 5, with 1 rank(s) not ended: its disk was full, and its hub, as it stopped, wrote the whole "
                   f"log to {copy}, where the run goes on (`pardash report '{copy}'` reads it all)")  # fmt: skip
    # Lost, where no place took them: how many, of which steps.
    note.message = "the hub stopped with 1,995 lines of steps 6-1000 that this disk could not take and no other place could: lost"
    log.write_bytes(b"".join(schema.encode_json(m) + b"\n" for m in (*msgs, note)))
    rep = build_report(str(log))
    assert {k: rep["log_ends_early"][k] for k in ("continued_at", "lines_lost", "steps_lost")} == {
        "continued_at": None, "lines_lost": 1995, "steps_lost": [6, 1000]}
    row = next(line for line in render_text(rep).splitlines() if line.startswith("log ends early"))
    assert row.endswith(": its disk was full, and its hub stopped with 1,995 lines of steps 6-1000 that it could not take and no other "
                        "place could: lost"), row  # fmt: skip
    # A note the log went on past (a hub restarted on the log, its disk with room again) is no end.
    log.write_bytes(b"".join(schema.encode_json(m) + b"\n" for m in (*msgs, note, schema.Step(run="r", rank=0, seq=6, step=6, t=1011.0))))
    rep = build_report(str(log))
    assert rep["log_ends_early"]["lines_lost"] is None and "no closing line from the hub" in render_text(rep)

LIVENESS_SAID = r" \(\d+ (?:stalled|silent)(?:, \d+ (?:stalled|silent))?\)"
"""What "with 2 rank(s) not ended" is followed by once the hub has judged the ranks stalled
(beating with no step) or silent (not beating: a loaded machine's heartbeat threads late)."""


def test_a_log_that_ends_early_says_whether_its_run_is_still_going(tmp_path):
    # "the run is still going (`pardash ps`), or its hub stopped recording (killed, out of
    # disk)" of a live run's log, where the run registry knew its hub was alive: now the one
    # that is true, of the log by its path, by another path to it, and of a copy of it.
    from helpers import hub_alone, live_ranks

    log = tmp_path / "run.jsonl"
    proc, info = hub_alone(log, "live-run")
    try:
        live_ranks(info, "live-run", log)
        (tmp_path / "link.jsonl").symlink_to(log)
        copy = tmp_path / "copy.jsonl"
        copy.write_bytes(log.read_bytes())
        for path in (log, tmp_path / "link.jsonl", copy):
            p = _pardash("report", str(path))
            row = next(line for line in p.stdout.splitlines() if line.startswith("log ends early"))
            # (the ranks, beating with no step after their 3, are stalled once 5 s have gone by:
            # on a loaded machine before the report reads the log, which then says so)
            assert p.returncode == 0 and re.sub(LIVENESS_SAID, "", row).endswith(
                "at step 3, with 2 rank(s) not ended: the run is still going, its hub recording "
                "(`pardash attach live-run` watches it; report again once it ends)"), (path, row)  # fmt: skip
            assert "stopped recording" not in row
        assert build_report(str(log))["log_ends_early"]["live_run"] == "live-run"
    finally:
        proc.kill()  # killed: no closing line, as a hub killed by the OOM killer leaves
        proc.wait(30)
    p = _pardash("report", str(log))
    row = next(line for line in p.stdout.splitlines() if line.startswith("log ends early"))
    # (not stated as fact: the hub may be recording it on another machine, or another registry's)
    assert re.sub(LIVENESS_SAID, "", row).endswith("at step 3, with 2 rank(s) not ended and no closing line from the hub, and no live run on this machine "
                        "records it: its hub stopped recording (killed, out of disk) before the run ended, or runs elsewhere "
                        "(`pardash ps`)"), row  # fmt: skip
    assert "still going" not in row
    assert build_report(str(log))["log_ends_early"]["live_run"] is None


def test_a_live_run_is_found_by_its_id_in_the_default_runs_folder(tmp_path):
    # The registry holds a live run's log by its absolute path, its folder under ./runs gave
    # a relative one: one file, two matches ("live-run: matches 2 runs (live-run); give more
    # of the id") for report, export and replay of a live run named by its id.
    from helpers import hub_alone, live_ranks

    log = tmp_path / "runs" / "live-run" / "telemetry.jsonl"
    log.parent.mkdir(parents=True)
    proc, info = hub_alone(log, "live-run")
    try:
        live_ranks(info, "live-run", log)
        for what in ("live-run", "live"):
            p = _pardash("report", what, cwd=tmp_path)
            assert p.returncode == 0 and "matches" not in p.stderr, (what, p.stderr)
            assert "the run is still going, its hub recording (`pardash attach live-run` watches it" in p.stdout
    finally:
        proc.kill()
        proc.wait(30)


def test_same_file_is_one_function_for_the_registry_and_the_commands(tmp_path):
    # (recorded.py kept its own copy of registry's; one rule for "another path to the same log")
    from pardash import recorded
    from pardash.telemetry import registry

    log = tmp_path / "run.jsonl"
    log.write_text("")
    (tmp_path / "link.jsonl").symlink_to(log)
    assert registry.same_file(str(log), str(tmp_path / "link.jsonl"))
    assert registry.same_file(os.path.relpath(log), str(log))
    assert not registry.same_file(str(log), str(tmp_path / "gone.jsonl"))
    assert not registry.same_file(None, str(log)) and not registry.same_file("", str(log))
    assert not hasattr(recorded, "_same_file") and not hasattr(registry, "_same_file")


def test_asking_whether_a_log_is_recorded_keeps_a_dead_hubs_entry(tmp_path):
    # report and export ask the registry whether a log's hub records it still; that removed a
    # dead hub's entry, which the launcher's supervisor reads (where its log went) to restart it.
    from pardash.telemetry import registry

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(30)
    log = tmp_path / "run.jsonl"
    log.write_text("")
    registry.register({"run_id": "dead-hub", "pid": dead.pid, "log": str(log), "ingest": "tcp://127.0.0.1:1",
                       "updates": "tcp://127.0.0.1:2", "snapshot": "tcp://127.0.0.1:3"})  # fmt: skip
    assert registry.recording(str(log), ["dead-hub"]) is None
    assert registry.entry("dead-hub")["log"] == str(log)
    assert _pardash("report", "dead-hub", cwd=tmp_path).returncode == 2  # (a run id looked up: live runs only)
    assert registry.entry("dead-hub")["log"] == str(log)
    assert registry.live_runs() == [] and registry.entry("dead-hub") is None  # (`ps` still tidies it away)


def test_a_dead_hubs_entry_stays_while_the_supervisor_that_restarts_it_lives(tmp_path):
    # `pardash ps` (or an attach) between a launched hub's death and its supervisor restarting
    # it removed the entry the supervisor reads to find where the dead hub's log went on.
    from pardash.telemetry import registry

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(30)
    log = tmp_path / "moved.jsonl"
    common = {"log": str(log), "ingest": "tcp://127.0.0.1:1", "updates": "tcp://127.0.0.1:2", "snapshot": "tcp://127.0.0.1:3"}
    registry.register({"run_id": "restarting", "pid": dead.pid, "supervisor_pid": os.getpid(), **common})
    registry.register({"run_id": "orphaned", "pid": dead.pid, "supervisor_pid": dead.pid, **common})
    assert registry.live_runs() == []
    assert registry.entry("restarting")["log"] == str(log)  # its supervisor lives: kept
    assert registry.entry("orphaned") is None  # both gone: tidied away


NO_RANK = "no rank ever reported to its hub: the log holds only the hub's own records (did the ranks start?)"


@pytest.mark.parametrize("closed", [True, False], ids=["hub-stopped", "hub-killed"])
def test_a_log_no_rank_ever_reported_to_is_said_so_alike_by_report_export_and_replay(tmp_path, closed):
    # A hub started and stopped (or killed) with no rank connecting: the report read "log ends
    # early at step 0, with 0 rank(s) not ended ... the run is still going" over an empty rank
    # table, export "no step in the log (its ranks published none)", replay "waiting for ranks…".
    from pardash.telemetry.client import ReplaySource

    log = tmp_path / "hub.jsonl"
    _write_log(log, [schema.Event(run="r", rank=-1, seq=-1, name="hub", message="hub started (pid 1)", t=1.0e9),
                     *([schema.Event(run="r", rank=-1, seq=-1, name="hub", message="hub stopped: 0 messages, 0 lost, 0 rejected",
                                     t=1.0e9 + 4)] if closed else [])])  # fmt: skip
    os.utime(log, (1.0e9 + 4, 1.0e9 + 4))  # (written long ago: a replay follows a log that grew just now)
    p = _pardash("report", str(log))
    assert p.returncode == 0 and f"ranks: {NO_RANK}" in p.stdout.splitlines(), p.stdout
    assert "log ends early" not in p.stdout and "rank(s) not ended" not in p.stdout and "ranks (medians" not in p.stdout
    assert p.stderr == f"pardash: warning: {log}: {NO_RANK}\n"
    md = _pardash("report", str(log), "--format", "markdown")
    assert "## Ranks\n\nNo rank ever reported to its hub: the log holds only the hub's own records (did the ranks start?)\n" in md.stdout
    e = _pardash("export", str(log), "--tensorboard", str(tmp_path / "tb"))
    assert e.returncode == 1 and e.stderr == f"pardash: error: {log}: {NO_RANK}; nothing to export\n" and not (tmp_path / "tb").exists()
    assert ReplaySource(str(log)).no_rank_reported  # (its dashboard's words: tests/tui/test_replay.py)


def test_a_live_hub_no_rank_has_reported_to_yet_is_said_to_be_waiting(tmp_path):
    from helpers import hub_alone, wait_for

    log = tmp_path / "hub.jsonl"
    proc, info = hub_alone(log, "live-run")
    try:
        wait_for(lambda: log.exists() and "hub started" in log.read_text())
        p = _pardash("report", str(log))
        want = "no rank has reported yet: its hub is still waiting for them (`pardash attach live-run` watches it)"
        assert p.returncode == 0 and f"ranks: {want}" in p.stdout.splitlines() and p.stderr == f"pardash: warning: {log}: {want}\n", p.stdout
        e = _pardash("export", str(log), "--tensorboard", str(tmp_path / "tb"))
        assert e.returncode == 1 and e.stderr == f"pardash: error: {log}: {want}; nothing to export\n"
    finally:
        proc.kill()
        proc.wait(30)


def test_a_report_of_many_ranks_is_quick_and_groups_its_hosts(tmp_path):
    # 10,000 ranks took 24 s to lay out as a rich table, and the devices row listed every host.
    msgs = []
    for rank in range(300):
        msgs.append(schema.Hello(rank=rank, world_size=300, host=f"node{rank // 8:03d}", device="cuda:0", device_name="H100", seq=0, t=1.0e9))
        msgs.append(schema.Step(rank=rank, step=1, seq=1, step_s=0.1, loss=1.0, t=1.0e9 + 1))
    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json_lines(msgs))
    text = render_text(build_report(str(log)), all_ranks=True)  # (past 32 ranks, every row only when asked)
    assert re.search(r"^devices +300 x H100 \(cuda\) on 38 hosts *$", text, re.MULTILINE)
    lines = text.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("rank  host")))
    rows = lines[header + 1 : header + 301]
    assert [int(r.split()[0]) for r in rows] == list(range(300))
    assert all(len(r) <= len(lines[header]) for r in rows)


def _applied(records: list) -> RunState:
    """A viewer's state of ``records``, each applied at its own time."""
    st = RunState(run_id="r", track_seq=False)
    for m in records:
        st.apply(m, m.t)
    return st


def _stalled_in_data(t: float, *, at: float) -> list:
    """Two DDP ranks' records: 3 steps, then, ``at`` s on, rank 1 stalled in its data and rank 0
    in its backward (waiting for it in the allreduce)."""
    records: list = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    records += [schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.1, samples=4, t=t + s * 0.1) for s in (1, 2, 3) for r in (0, 1)]
    records += [
        schema.Verdict(run="r", rank=1, seq=-1, verdict="stalled", cause="data", step=3, message="rank 1 stalled", t=t + at),
        schema.Verdict(run="r", rank=0, seq=-1, verdict="stalled", cause="backward", step=3, message="rank 0 stalled", t=t + at + 0.1),
    ]  # fmt: skip
    return records


def test_a_run_that_ended_stalled_says_for_how_long(tmp_path):
    # Rank 1 stuck in its data from step 3, rank 0 waiting in its backward, both stopped 30 s
    # later (Ctrl-C): the report said "training 0.3 s" and nothing of the 30 s hang, its stalls
    # had no length, and the last progress line the rate of the steps before the hang.
    t = 1.0e9
    records = _stalled_in_data(t, at=10.3)
    records += [schema.Event(run="r", rank=r, seq=-1, name="exit", code=-2, message="stopped", t=t + 30.3) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert [(s["rank"], s["seconds"], s["until"]) for s in rep["stalls"]] == [(1, 30.0, "exit"), (0, 30.0, "exit")]
    text = render_text(rep)
    assert "(training 0.3 s; then stalled 30.0 s)" in text
    # (it said "for 30.0 s; exit - likely the cause")
    # (it said "until it exited" of ranks stopped as they hung, whose rank rows say "stopped")
    assert "rank 1 stalled in data after step 3 for 30.0 s until it was stopped; likely the cause of the hang" in text
    assert "rank 0 stalled in backward after step 3 for 30.0 s until it was stopped\n" in text
    st = _applied(records)
    assert "0 samples/s at the end (stalled)" in progress_line(st, t + 31)


def test_ranks_a_slow_stop_left_quiet_are_no_stall(tmp_path):
    # A Stop chosen in the TUI of a Lightning job: its ranks stepped until the stop began, then
    # took seconds to end, and the hub called them stalled 5 s on. The report read "ranks 0-1
    # stalled in sync after step 3 for 0.016 s until it exited" of the user's own stop. The
    # launcher's notes are dated when the stop began (before the verdicts): no hang.
    t = 1.0e9
    records = _stalled_in_data(t, at=5.3)
    records += [schema.Event(run="r", rank=r, seq=-1, name="exit", code=-15, message="stopped by you", t=t + 0.316) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert rep["stalls"] == []
    text = render_text(rep)
    assert "stalls: none" in text and "then stalled" not in text and "ranks 0-1 stopped by you (SIGTERM)" in text
    # The launch's last line and the TUI's alerts too (review 275: "stopped by you as it hung
    # after step 211, likely waiting for rank 1", "◆ rank 1 stalled in forward ...").
    from pardash.telemetry.printer import outcome_line
    from pardash.tui.alerts import run_alerts

    st = _applied(records)
    assert outcome_line(st, 130, {"stopped": True, "stop_t": t + 0.316}, "run.jsonl") == "pardash: stopped by you (exit code 130); log run.jsonl"
    assert not any("stalled" in a.text for a in run_alerts(st)), run_alerts(st)
    # A stop that came after the hub had called them stalled (a hang the user stopped) keeps it.
    records[-2:] = [schema.Event(run="r", rank=r, seq=-1, name="exit", code=-15, message="stopped by you", t=t + 9.3) for r in (0, 1)]
    _write_log(log, records)
    assert [(s["rank"], s["seconds"], s["until"]) for s in build_report(str(log))["stalls"]] == [(1, 9.0, "exit"), (0, 9.0, "exit")]
    st = _applied(records)
    assert outcome_line(st, 130, {"stopped": True, "stop_t": t + 9.3}, "run.jsonl").startswith(
        "pardash: stopped by you as it hung after step 3, likely waiting for rank 1 (exit code 130)")
    assert any("rank 1 stalled in data" in a.text for a in run_alerts(st)), run_alerts(st)


def test_a_collective_that_timed_out_waiting_for_a_stalled_rank_names_that_rank_the_cause(tmp_path):
    # Rank 1 stuck in its data loader, rank 0 in its backward's allreduce until gloo's timeout
    # raised: the root cause, the launcher's last line and the TUI named rank 0, whose error
    # only ended the wait, while the stalls section said rank 1 was likely the cause.
    from pardash.telemetry.printer import outcome_line
    from pardash.telemetry.causes import cause_rank
    from pardash.tui.alerts import run_alerts

    t = 1.0e9
    timeout = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 15000ms for recv operation to complete"
    records = _stalled_in_data(t, at=5.3)
    records += [
        schema.Event(run="r", rank=0, seq=4, name="error", step=3, message=timeout, traceback="Traceback ...", t=t + 15.3),
        schema.Event(run="r", rank=0, seq=5, name="exit", code=1, step=4, t=t + 15.4),
        schema.Event(run="r", rank=1, seq=-1, name="exit", code=-15, message="stopped by torchrun", t=t + 15.5),
    ]  # fmt: skip
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    line = rep["failure"]["line"]
    assert line.startswith("rank 1 stalled in data after step 3 (the likely cause of the hang); rank 0 exited with code 1 at step 4 waiting for it: RuntimeError")
    assert line.endswith("Timed out waiting 15000ms for recv operation to complete; rank 1 was stopped")
    assert rep["failure"]["waited_for"] == [{"rank": 1, "kind": "stalled", "step": 3, "phase": "data"}]
    assert {e["rank"]: e["role"] for e in rep["exits"]} == {0: "waited", 1: "hung"}
    text = render_text(rep)
    assert "rank 1 stopped by torchrun (SIGTERM) - the root cause: it hung, the others waited\n" in text
    assert "rank 0 exited with code 1 at step 4 - failed waiting for the hung rank(s)" in text
    st = _applied(records)
    assert outcome_line(st, 1, {}, "run.jsonl").startswith("pardash: rank 1 stalled in data after step 3 (the likely cause of the hang); rank 0 exited")
    assert cause_rank(st) == 1
    first = run_alerts(st)[0]
    assert first.rank == 1 and first.first and "stalled in data after step 3" in first.text

    # Two ranks hung: both named, neither "failed after it" when it then died of the closed
    # socket; the TUI marks both as the hang's (it named rank 0 the root cause).
    three = [schema.Hello(run="r", rank=r, seq=0, world_size=3, pid=10 + r, strategy="ddp", t=t) for r in (0, 1, 2)]
    three += [schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.1, samples=4, t=t + s * 0.1) for s in (1, 2, 3) for r in (0, 1, 2)]
    three += [schema.Verdict(run="r", rank=r, seq=-1, verdict="stalled", cause=c, step=3, message="stalled", t=t + 5.3)
              for r, c in ((1, "data"), (2, "data"), (0, "backward"))]  # fmt: skip
    three += [
        schema.Event(run="r", rank=0, seq=4, name="error", step=3, message=timeout, t=t + 15.3),
        schema.Event(run="r", rank=0, seq=5, name="exit", code=1, step=4, t=t + 15.4),
        schema.Event(run="r", rank=1, seq=4, name="error", step=3, message="RuntimeError: Connection reset by peer", t=t + 15.5),
        schema.Event(run="r", rank=1, seq=5, name="exit", code=1, step=4, t=t + 15.5),
        schema.Event(run="r", rank=2, seq=-1, name="exit", code=-15, message="stopped by torchrun", t=t + 15.6),
    ]  # fmt: skip
    _write_log(log, three)
    line = build_report(str(log))["failure"]["line"]
    assert line.startswith("ranks 1-2 stalled in data after step 3 (the likely cause of the hang); rank 0 exited with code 1 at step 4 waiting for them: ")
    assert "failed after it" not in line
    st = _applied(three)
    assert cause_rank(st) is None
    marked = [a.rank for a in run_alerts(st) if a.first]
    assert sorted(marked) == [1, 2]

    # The same error without a hang the hub saw (no stall verdict): rank 0's own, as before.
    plain = [m for m in records if not isinstance(m, schema.Verdict)]
    _write_log(log, plain)
    rep = build_report(str(log))
    assert rep["failure"]["line"].startswith("rank 0 exited with code 1 at step 4: RuntimeError") and rep["failure"]["waited_for"] == []
    assert {e["rank"]: e["role"] for e in rep["exits"]} == {0: "cause", 1: "stopped"}


def test_a_stall_the_ranks_stepped_on_from_before_the_hub_said_so_is_no_hang(tmp_path):
    # Rank 1 slept 12 s in its data at step 10, then both ranks trained on and finished before
    # the hub's next look (no "resumed" verdict): the report said "stalled ... for 12.0 s until
    # it finished; likely the cause of the hang" of a run that went on.
    t = 1.0e9
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    records += [schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.1, samples=4, t=t + s * 0.1) for s in range(1, 10) for r in (0, 1)]
    records += [
        schema.Verdict(run="r", rank=1, seq=-1, verdict="stalled", cause="data", step=9, message="rank 1 stalled", t=t + 6.0),
        schema.Verdict(run="r", rank=0, seq=-1, verdict="stalled", cause="backward", step=9, message="rank 0 stalled", t=t + 6.1),
    ]  # fmt: skip
    records += [schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.1, samples=4, t=t + 12.9 + s * 0.01) for s in range(10, 30) for r in (0, 1)]
    records += [schema.Event(run="r", rank=r, seq=30, name="exit", code=0, step=29, t=t + 13.5) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert [(s["rank"], s["until"], s["ended_run"]) for s in rep["stalls"]] == [(1, "resumed at step 10", False), (0, "resumed at step 10", False)]
    assert rep["stalls"][0]["seconds"] == pytest.approx(13.0 - 0.9, abs=0.01)  # from its step 9 to its step 10
    text = render_text(rep)
    assert "rank 1 stalled in data after step 9 for 12.1 s; resumed at step 10; a pause the others waited out (rank 0 in backward), not a hang" in text
    assert "cause of the hang" not in text and "until it finished" not in text
    assert not any(line.strip().startswith("rank 0") for line in text.splitlines())  # (its wait: on rank 1's line, once)


def test_a_stall_torchrun_restarted_the_job_from_is_not_how_the_run_ended(tmp_path):
    # Rank 1 stalled in attempt 0; torchrun stopped both ranks (exits) and restarted the job,
    # which finished: the duration line said "then stalled 41 s" of a run that ended healthy.
    t = 1.0e9
    hello = lambda r, restart, at: schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r + 100 * restart, strategy="ddp", restart=restart, t=at)  # noqa: E731
    step = lambda r, s, seq, at: schema.Step(run="r", rank=r, seq=seq, step=s, step_s=0.1, samples=4, t=at)  # noqa: E731
    records = [hello(0, 0, t), hello(1, 0, t)]
    records += [step(r, s, s, t + s * 0.1) for s in (1, 2, 3) for r in (0, 1)]
    records += [schema.Verdict(run="r", rank=1, seq=-1, verdict="stalled", cause="data", step=3, message="stalled", t=t + 10.3)]
    records += [schema.Event(run="r", rank=r, seq=-1, name="exit", code=-15, message="stopped", t=t + 40.3) for r in (0, 1)]
    records += [hello(0, 1, t + 41), hello(1, 1, t + 41)]
    records += [step(r, s, s, t + 41 + s * 0.1) for s in (4, 5, 6) for r in (0, 1)]
    records += [schema.Event(run="r", rank=r, seq=7, name="exit", code=0, step=6, t=t + 42) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    (stall,) = rep["stalls"]
    assert (stall["seconds"], stall["ended_run"]) == (40.0, False)
    assert "then stalled" not in render_text(rep) and "for 40.0 s" in render_text(rep)


def test_the_jobs_last_output_is_printed_whole_however_much_it_is(tmp_path):
    # Ranks that printed 12 MB in their last seconds: the last update read one more megabyte,
    # and the rest (each rank's last lines) never reached the user.
    import io

    from pardash.telemetry.printer import TAIL_CHUNK, ProgressPrinter

    out = io.StringIO()
    output = tmp_path / "output.log"
    output.write_bytes(b"")
    printer = ProgressPrinter(_LogSource(DATA / "real_ddp2.jsonl"), out=out, bar=False, tail=str(output))
    printer.update()
    lines = [b"%06d " % i + b"x" * 93 for i in range(3 * TAIL_CHUNK // 100)]
    output.write_bytes(b"\n".join(lines) + b"\nLAST LINE, no newline")
    printer.update(force=True)
    said = [line for line in out.getvalue().splitlines() if not line.startswith("[")]  # not the progress lines
    assert said[0] == lines[0].decode() and said[len(lines) - 1] == lines[-1].decode()
    assert said[len(lines)] == "LAST LINE, no newline"


def test_reading_a_long_log_shows_how_far_it_is_on_a_terminal_only(tmp_path, monkeypatch):
    # A report of a 166 MB log took 3 s and its export 20 s (a log of gigabytes, minutes) with
    # no word until the end.
    import gzip
    import io

    from pardash.recorded import ReadProgress
    from pardash.telemetry import logreader

    monkeypatch.setattr(logreader, "PROGRESS_EVERY", 10)
    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json_lines([schema.Step(rank=0, step=s, seq=s, loss=1.0, step_s=0.1, t=1.0e9 + s) for s in range(1, 101)]))
    packed = tmp_path / "run.jsonl.gz"
    packed.write_bytes(gzip.compress(log.read_bytes()))
    for path in (log, packed):
        told: list[tuple[int, int]] = []
        rep = build_report(str(path), lambda done, total: told.append((done, total)))
        size = path.stat().st_size
        assert rep["steps"] == 100 and len(told) == 11 and told[-1] == (size, size), path
        assert [d for d, _ in told] == sorted(d for d, _ in told) and 0 < told[0][0] <= size
        assert path == packed or told[0][0] < size  # (gzip reads a small file whole at once)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("TERM", "xterm")
    term = Terminal()
    progress = ReadProgress(str(log), "exporting", out=term, after_s=0.0)
    progress(3 << 20, 12 << 20)
    progress.close()
    assert term.getvalue() == "\rpardash: exporting run.jsonl: 25% (3.0 MiB of 12.0 MiB)\x1b[K\r\x1b[K"
    # A run's own log is named by its folder too (`report --compare` read "telemetry.jsonl" twice).
    term = Terminal()
    progress = ReadProgress(str(tmp_path / "20261206-0931-ab12" / "telemetry.jsonl"), "reading", out=term, after_s=0.0)
    progress(1, 4)
    assert term.getvalue().startswith("\rpardash: reading 20261206-0931-ab12/telemetry.jsonl: 25%"), term.getvalue()
    piped = io.StringIO()  # no terminal: not a byte
    progress = ReadProgress(str(log), out=piped, after_s=0.0)
    progress(3, 12)
    progress.close()
    assert piped.getvalue() == ""


def test_markdown_shows_what_the_ranks_said_as_written(tmp_path):
    # The markdown of a run that died of "KeyError: '<pad>'" read "KeyError: ''" on GitHub
    # (a tag, dropped), and a warning's `*` or `_` turned into emphasis.
    t = 1.0e9
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    records += [schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.1, samples=4, loss=1.0, t=t + s) for s in (1, 2) for r in (0, 1)]
    records += [
        schema.Event(run="r", rank=0, seq=3, name="warning", message="loss*scale fell to 2**10 in my_loop", step=2, t=t + 2.5),
        schema.Event(run="r", rank=1, seq=3, name="error", message="KeyError: '<pad>'", step=2, t=t + 3),
        schema.Event(run="r", rank=1, seq=4, name="exit", code=1, step=3, t=t + 3),
        schema.Event(run="r", rank=0, seq=-1, name="exit", code=-15, message="rank 0 was stopped by torchrun", t=t + 4),
    ]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert "KeyError: '<pad>'" in rep["failure"]["line"] and "KeyError: '<pad>'" in render_text(rep)
    md = render_markdown(rep)
    assert "**Root cause:** rank 1 exited with code 1 at step 3: KeyError: '\\<pad\\>'" in md
    assert "- rank 0 at step 2: loss\\*scale fell to 2\\*\\*10 in my\\_loop" in md


def test_a_file_of_no_records_is_told_alike_by_report_and_export(tmp_path):
    # report counted only the lines it skipped: a README of 163 lines, 19 of them blank, read
    # "no telemetry records in 144 line(s)", and three blank lines "empty", where export (and
    # replay) said 163 lines and 3 blank ones.
    (tmp_path / "notes.md").write_text("# notes\n\nsome text\n\n* a list\n")
    (tmp_path / "blank.jsonl").write_text("\n\n\n")
    for name, said in (("notes.md", "notes.md: no telemetry records in 5 line(s) (3 malformed)"),
                       ("blank.jsonl", "blank.jsonl: no telemetry records in 3 line(s) (all blank)")):  # fmt: skip
        for args in (("report", name), ("export", name, "--tensorboard", "tb")):
            proc = _pardash(*args, cwd=tmp_path)
            assert proc.returncode == 2 and proc.stderr.strip() == f"pardash: error: {said}; is it a pardash log?", (args, proc.stderr)


def test_a_damaged_compressed_log_is_said_damaged_not_cut_short_or_still_running(tmp_path):
    # Bytes flipped inside a .gz log: its lines after them were counted "truncated" or
    # "trailing_garbage" (bytes after the stream, records whole), and the report said the run
    # "is still going (`pardash ps`), or its hub stopped recording" of a log copied badly.
    import gzip

    from pardash.telemetry.logreader import load_log

    t = 1.0e9
    msgs = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    msgs += [schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.1, samples=4, loss=1.0 / s, t=t + s) for s in range(1, 2001) for r in (0, 1)]
    packed = bytearray(gzip.compress(schema.encode_json_lines(msgs)))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    assert set(load_log(cut)[1].skipped) == {"truncated"}  # cut short: still said so
    for at in (len(packed) // 2, 2 * len(packed) // 3):
        bad = bytearray(packed)
        bad[at : at + 16] = bytes(b ^ 0xFF for b in bad[at : at + 16])
        log = tmp_path / f"bad{at}.jsonl.gz"
        log.write_bytes(bytes(bad))
        msgs, stats = load_log(log)
        assert stats.skipped["corrupt"] == 1 and "truncated" not in stats.skipped and "trailing_garbage" not in stats.skipped
        rep = build_report(str(log))
        assert rep["log_ends_early"] is not None
        assert re.search(r"^log ends early +at step \d+, with 2 rank\(s\) not ended: the compressed log is damaged there, the rest of it lost$",
                         render_text(rep), re.MULTILINE), render_text(rep)  # fmt: skip


def test_report_json_is_json_whatever_the_log_holds(tmp_path):
    # Broken lines' clocks (+-1e308 s) took the training time past a float's range: the report
    # wrote "train_s": Infinity, which JSON has not (JSON.parse and Go's and serde's decoders
    # refuse the whole report). Figures that are not finite are null.
    t = 1.0e9
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    records += [schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.1, samples=4, loss=1.0, t=t + s) for s in (1, 2) for r in (0, 1)]
    # (a time below 0 is skipped when the log is read, as the live hub refuses it)
    records += [schema.Step(run="r", rank=r, seq=3, step=3, step_s=1e308, samples=4, loss=1.0, t=1e308) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    for args in (("report", str(log), "--format", "json"), ("report", str(log), "--compare", str(log), "--format", "json")):
        p = _pardash(*args)
        assert p.returncode == 0, p.stderr
        got = json.loads(p.stdout, parse_constant=lambda c: pytest.fail(f"{args}: {c} in the JSON"))
        assert "Infinity" not in p.stdout and "NaN" not in p.stdout
    assert got["rows"]
    from pardash.recorded import json_text

    assert json.loads(json_text({"train_s": float("inf"), "rows": [{"change": float("nan"), "a": 1.5}]})) == {
        "train_s": None,
        "rows": [{"change": None, "a": 1.5}],
    }


def test_a_run_without_steps_reads_no_step_time_without_its_unit(tmp_path):
    # A job whose ranks said hello and took no step read "median step   - ms".
    t = 1.0e9
    log = tmp_path / "run.jsonl"
    _write_log(log, [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)])
    rep = build_report(str(log))
    assert re.search(r"^median step +-$", render_text(rep), re.MULTILINE)
    assert "| median step | - |" in render_markdown(rep)


def test_a_report_of_a_resume_with_nothing_left_to_train_says_so(tmp_path):
    # --resume from a checkpoint already at --steps: the launcher's last line says "no step
    # taken (resumed at step 150, nothing left to train)"; the report read "steps 0 (last step 0)".
    t = 1.0e9
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    records += [schema.Event(run="r", rank=r, seq=1, name="resume", step=150, message="step 150 from ckpt", t=t + 1) for r in (0, 1)]
    records += [schema.Event(run="r", rank=r, seq=2, name="exit", code=0, step=150, t=t + 2) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert re.search(r"^steps +0 \(resumed at step 150, nothing left to train\)$", render_text(rep), re.MULTILINE)
    assert "| steps | 0 (resumed at step 150, nothing left to train) |" in render_markdown(rep)


@pytest.mark.slow
def test_a_reports_memory_does_not_grow_with_a_ranks_steps(tmp_path, monkeypatch):
    # The report kept every step's time and phases for exact medians: as lists of Python floats
    # (32 bytes each), a day of a job (millions of steps) took gigabytes; as C doubles, 8 bytes a
    # figure, still 10 GB for a day of 256 ranks. Past figures.EXACT steps a rank they are binned
    # (medians within 0.05 %). (Python's own count of the bytes it holds once the log is read;
    # past the bounded recent steps each rank keeps, _RecentSteps.KEEP.)
    import tracemalloc

    def log(steps: int) -> Path:
        t0 = 1.7e9
        msgs: list = [schema.Hello(rank=r, world_size=2, t=t0, run="x", seq=0) for r in range(2)]
        msgs += [
            schema.Step(rank=r, step=s, loss=1.0, step_s=0.1, data_s=0.01, forward_s=0.03, backward_s=0.05, optimizer_s=0.01, t=t0 + s / 10, seq=s, run="x")
            for s in range(1, steps + 1)
            for r in range(2)
        ]
        path = tmp_path / f"{steps}.jsonl"
        path.write_bytes(schema.encode_json_lines(msgs))
        return path

    def held_bytes(path: Path) -> int:
        """What the report holds once it has read the whole log (its progress told so)."""
        held: list[int] = []

        def progress(done: int, size: int) -> None:
            if done == size:
                held.append(tracemalloc.get_traced_memory()[0])

        tracemalloc.start()
        try:
            assert build_report(str(path), progress)["ranks"][0]["steps"] == int(path.stem)
            return held[-1]
        finally:
            tracemalloc.stop()

    # The bounds at a quarter of their size (what is bounded is the same; read under tracemalloc,
    # the logs at full size took 10 CPU-s of the suite's).
    from pardash.telemetry import figures, report

    exact = 1024
    monkeypatch.setattr(figures, "EXACT", exact)
    monkeypatch.setattr(report, "FIGURES_KEPT", exact)
    monkeypatch.setattr(report._RecentSteps, "KEEP", exact)
    # (both logs past the recent steps a rank keeps; as many figures left unbinned at the end of either)
    short, long = log(2 * exact + 100), log(2 * exact + 100 + 3 * exact)
    build_report(str(short))  # (what a first report imports and caches)
    per_rank_step = (held_bytes(long) - held_bytes(short)) / (2 * 3 * exact)
    # 5 figures a step kept one by one took 40 bytes (lists of floats: 170); binned, what their
    # bins grow by (none: the same times every step)
    assert per_rank_step < 4, f"{per_rank_step:.1f} bytes a rank's step"


def test_a_run_read_while_torchrun_restarts_its_ranks_is_at_the_step_they_reached(tmp_path):
    # Both ranks' new processes have said hello and taken no step yet: the report read "steps
    # 20 (last step 0)" and "log ends early at step 0", as the run's step in a viewer's header
    # (each rank's last step was dropped with its old process, for the new one's message order).
    t0 = 1.7e9
    msgs: list = [schema.Hello(rank=r, world_size=2, t=t0, run="x", seq=0, pid=100 + r) for r in range(2)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0, step_s=0.1, t=t0 + s / 10, seq=s, run="x") for s in range(1, 21) for r in range(2)]
    msgs += [schema.Hello(rank=r, world_size=2, t=t0 + 5, run="x", seq=0, pid=200 + r, restart=1) for r in range(2)]
    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json_lines(msgs))
    rep = build_report(str(log))
    assert rep["last_step"] == 20 and [r["last_step"] for r in rep["ranks"]] == [20, 20]
    text = render_text(rep)
    assert "20 (last step 20)" in text and "log ends early     at step 20," in text
    from pardash.tui.model import run_totals

    state = RunState()
    for m in msgs:
        state.apply(m, now=1.0)
    assert state.step == run_totals(state).step == 20
    # Once the new processes step, their steps are the run's: from the start again, here.
    state.apply(schema.Step(rank=0, step=1, loss=1.0, step_s=0.1, t=t0 + 6, seq=1, run="x"), now=2.0)
    assert state.step == run_totals(state).step == 1


def test_an_error_torch_carried_over_from_a_worker_is_named_by_the_original():
    # A DataLoader worker's error reaches the loop as "ValueError: Caught ValueError in
    # DataLoader worker process 0." with the original traceback in its text: the root cause
    # named that first line, never the sample that was corrupt.
    from pardash.telemetry.failures import error_line

    carried = (
        "ValueError: Caught ValueError in DataLoader worker process 0.\n"
        "Original Traceback (most recent call last):\n"
        '  File "/data/ds.py", line 7, in __getitem__\n'
        '    raise ValueError(f"corrupt sample {i}")\n'
        "ValueError: corrupt sample 105\n"
    )
    assert error_line(carried) == "ValueError: corrupt sample 105 (in DataLoader worker process 0)"
    replica = "RuntimeError: Caught RuntimeError in replica 1 on device 1.\nOriginal Traceback (most recent call last):\n  ...\nRuntimeError: CUDA out of memory"
    assert error_line(replica) == "RuntimeError: CUDA out of memory (in replica 1 on device 1)"
    assert error_line("KeyError: 'x'\nmore") == "KeyError: 'x'" and error_line("") is None and error_line(None) is None


def test_raised_at_names_the_jobs_own_line_before_the_library_frame_it_raised_in():
    # A gloo timeout raised inside loss.backward() read "raised at: .../site-packages/torch/
    # autograd/graph.py:979 in _engine_run_backward", torch's line alone: the script's line
    # that called it is where a user looks first.
    from pardash.telemetry.failures import raised_at

    def tb(*frames: str) -> str:
        lines = "".join(f'  File "{path}", line {line}, in {func}\n    code\n' for path, line, func in (f.split(":") for f in frames))
        return f"Traceback (most recent call last):\n{lines}RuntimeError: Timed out waiting 8000ms\n"

    venv = "/home/u/.venv/lib/python3.11/site-packages"
    backward = tb("/home/u/train.py:497:main", "/home/u/train.py:320:train", f"{venv}/torch/_tensor.py:623:backward",
                  f"{venv}/torch/autograd/graph.py:979:_engine_run_backward")  # fmt: skip
    assert raised_at(backward) == "/home/u/train.py:320 in train (in torch/autograd/graph.py:979 in _engine_run_backward)"
    # The standard library is a library too (a DataLoader's queue, a thread's join).
    stdlib = tb("/srv/job/train.py:40:main", "/usr/lib/python3.12/threading.py:1147:join")
    assert raised_at(stdlib) == "/srv/job/train.py:40 in main (in /usr/lib/python3.12/threading.py:1147 in join)"
    # Raised in the job's own code: that frame alone; pardash's bundled trainer installed in
    # site-packages is the job's code, not a library's.
    assert raised_at(tb("/home/u/train.py:10:main", "/home/u/model.py:88:step")) == "/home/u/model.py:88 in step"
    bundled = tb(f"{venv}/pardash/trainer/train.py:497:main", f"{venv}/pardash/trainer/train.py:280:train", f"{venv}/torch/nn/modules/module.py:1775:_call_impl")
    assert raised_at(bundled) == f"{venv}/pardash/trainer/train.py:280 in train (in torch/nn/modules/module.py:1775 in _call_impl)"
    # pardash's instrument wrapping the script's collective (zero-code) is no frame of the job's:
    # it read "raised at: /tmp/rev274/trainer/arrivals.py:122 in wait" (review 274).
    from pardash.trainer import arrivals

    for here in (arrivals.__file__, f"{venv}/pardash/trainer/arrivals.py"):
        wrapped = tb("/home/u/fsdp_desync.py:15:<module>", f"{here}:122:wait",
                     f"{venv}/torch/distributed/distributed_c10d.py:2816:all_reduce")  # fmt: skip
        assert raised_at(wrapped) == "/home/u/fsdp_desync.py:15 in <module> (in torch/distributed/distributed_c10d.py:2816 in all_reduce)"
        # ...nor its wrapper of a Work's wait(), innermost, under a library's frame (a pipeline
        # stage's receive read "(in trainer/arrivals.py:195 in wait)"): the library's that waited.
        waited = tb("/home/u/pp.py:30:<module>", f"{venv}/torch/distributed/pipelining/schedules.py:690:step",
                    f"{venv}/torch/distributed/pipelining/schedules.py:512:_step_microbatches", f"{here}:195:wait")  # fmt: skip
        assert raised_at(waited) == "/home/u/pp.py:30 in <module> (in torch/distributed/pipelining/schedules.py:512 in _step_microbatches)"
        # (the script's own call of the wrapped wait: the script's line alone)
        assert raised_at(tb("/home/u/train.py:12:main", f"{here}:195:wait")) == "/home/u/train.py:12 in main"
    # A script's own package named telemetry/ is the job's code.
    assert raised_at(tb("/home/u/train.py:10:main", "/home/u/telemetry/log.py:5:write")) == "/home/u/telemetry/log.py:5 in write"
    # No frame of the job's own (a launcher's import failed): the innermost, as it is.
    assert raised_at(tb(f"{venv}/torch/distributed/run.py:9:main")) == f"{venv}/torch/distributed/run.py:9 in main"
    assert raised_at("") is None and raised_at(None) is None


def test_the_live_rate_is_taken_over_the_last_second_not_one_step():
    # One step's time alone made the rate jump (925, 1038, 544 samples/s within a second of a
    # steady run): a rank that steps every 0.1 s, its steps' own times jittering 0.05-0.2 s.
    from pardash.telemetry.summary import RATE_POINTS, samples_per_s

    st = RunState(run_id="r", track_seq=False)
    st.apply(schema.Hello(run="r", rank=0, world_size=1, t=1000.0), 1000.0)
    for n in range(1, 31):
        s = schema.Step(run="r", rank=0, step=n, samples=8, step_s=(0.05, 0.2)[n % 2], t=1000.0 + 0.1 * n)
        st.apply(s, s.t)
        st.commit_history([s])
        if n > RATE_POINTS:
            assert samples_per_s(st) == pytest.approx(80.0, rel=1e-3)  # 8 samples, 10 steps a second
        else:
            assert samples_per_s(st) == 8 / s.step_s  # too few points: the latest step's
    st.apply(schema.Verdict(run="r", rank=0, verdict="stalled", cause="data", step=30), 0.0)
    assert samples_per_s(st) == 0.0


def test_the_live_rate_is_not_taken_across_a_pause_between_steps():
    # An evaluation of a minute between steps of 5 s: the window's steps took 50 s of the
    # 110 s it spans, and the rate read half for the next ten steps.
    from pardash.telemetry.summary import RATE_POINTS, samples_per_s

    st = RunState(run_id="r", track_seq=False)
    st.apply(schema.Hello(run="r", rank=0, world_size=1, t=1000.0), 1000.0)
    t = 1000.0
    for n in range(1, RATE_POINTS + 3):
        t += 5.0 + (60.0 if n == RATE_POINTS + 1 else 0.0)
        s = schema.Step(run="r", rank=0, step=n, samples=8, step_s=5.0, t=t)
        st.apply(s, s.t)
        st.commit_history([s])
    assert samples_per_s(st) == pytest.approx(8 / 5.0)


def test_steps_lost_with_the_hub_are_said_beside_the_steps_in_the_log(tmp_path):
    # A hub restarted mid-run: what the ranks sent while it was down is lost (counted by their
    # message numbers). "steps 8 (last step 10)" read as two steps never trained.
    t = 1.0e9
    records = [schema.Hello(run="r", rank=0, seq=0, world_size=1, pid=10, strategy="single", t=t)]
    records += [schema.Step(run="r", rank=0, seq=s, step=s, step_s=0.1, samples=4, t=t + s) for s in (1, 2, 3, 6, 7, 8, 9, 10)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert (rep["lost_messages"], rep["steps"], rep["steps_missing"]) == (2, 8, 2)
    assert "steps              8 (last step 10; 2 more not in the log: among the lost messages)" in render_text(rep).splitlines()
    # Steps a script numbers sparsely (its own publishing every few steps), nothing lost: no such word.
    _write_log(log, [records[0], *(msgspec.structs.replace(m, seq=i) for i, m in enumerate(records[1:], 1))])
    rep = build_report(str(log))
    assert (rep["lost_messages"], rep["steps_missing"]) == (0, 0) and "not in the log" not in render_text(rep)


@pytest.mark.parametrize("count", [1, None], ids=["restart count said", "an older log's restart note"])
def test_a_restart_after_a_hang_names_the_rank_the_hang_waited_for(tmp_path, count):
    # --max-restarts 1, rank 1 stalled in its data: rank 0's collective timed out and torchrun
    # restarted the job. The restart's cause read "rank 0 exited with code 1: ... Timed out
    # waiting 12000ms", where the same failure as the job's last was told as rank 1's hang (the
    # attempt's stalls were forgotten as its ranks started again).
    t = 1.0e9
    hello = lambda r, restart, at: schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r + 100 * restart, strategy="ddp", restart=restart, t=at)  # noqa: E731
    stalled = lambda r, phase, at: schema.Verdict(rank=r, verdict="stalled", cause=phase, step=29, t=at,  # noqa: E731
                                                  message=f"rank {r} stalled in {phase} after step 29 (5 s without progress)")
    timeout = "RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 12000ms for recv"
    records = [hello(0, 0, t), hello(1, 0, t)]
    records += [schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.1, samples=4, t=t + s / 10) for s in range(1, 30) for r in (0, 1)]
    records += [
        stalled(1, "data", t + 9), stalled(0, "backward", t + 9),
        schema.Event(run="r", rank=0, seq=30, name="error", message=timeout, step=29, t=t + 15),
        schema.Event(run="r", rank=0, seq=31, name="exit", code=1, step=30, t=t + 15),
        schema.Event(run="r", rank=1, seq=-1, name="exit", code=-15, message="torchrun: rank 1 killed by signal 15 (SIGTERM)", t=t + 15.2),
        schema.Event(run="r", rank=0, seq=-1, name="restart", code=count, message="rank 0 restarted", t=t + 16), hello(0, 1, t + 16),
        schema.Event(run="r", rank=1, seq=-1, name="restart", code=count, message="rank 1 restarted", t=t + 16), hello(1, 1, t + 16),
    ]  # fmt: skip
    records += [schema.Step(run="r", rank=r, seq=s, step=20 + s, step_s=0.1, samples=4, t=t + 17 + s / 10) for s in range(1, 11) for r in (0, 1)]
    records += [schema.Event(run="r", rank=r, seq=11, name="exit", code=0, step=30, t=t + 19) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert rep["failure"] is None
    (f,) = rep["recovered"]
    assert f["waited_for"] == [{"rank": 1, "kind": "stalled", "step": 29, "phase": "data"}]
    assert f["line"].startswith("rank 1 stalled in data after step 29 (the likely cause of the hang); rank 0 exited with code 1 at step 30 waiting for it")


def test_training_is_never_longer_than_the_run(tmp_path):
    # A first step timed from before its rank's first word (its time is taken back from its
    # end) read "duration 14.9 s (training 15.0 s)" of a simulated run.
    t = 1.0e9
    records = [schema.Hello(run="r", rank=0, seq=0, world_size=1, pid=10, strategy="single", t=t)]
    records += [schema.Step(run="r", rank=0, seq=s, step=s, step_s=0.5, samples=4, t=t + 0.1 * s) for s in range(1, 11)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert rep["duration_s"] == pytest.approx(1.0) and rep["train_s"] == pytest.approx(1.0)  # (1.4 from the first step's start)


def test_the_epochs_the_steps_went_through_are_said(tmp_path):
    # The log has each step's epoch (and epoch_end events); the report said nothing of them.
    t = 1.0e9
    records = [schema.Hello(run="r", rank=0, seq=0, world_size=1, pid=10, strategy="single", t=t)]
    records += [schema.Step(run="r", rank=0, seq=s, step=s, epoch=(s - 1) // 4, step_s=0.1, samples=4, t=t + s) for s in range(1, 11)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert rep["epochs"] == {"first": 0, "last": 2}
    assert "epochs             3 (epochs 0 to 2)" in render_text(rep).splitlines()
    # A script with no epochs (every step says 0): no line of them.
    _write_log(log, [msgspec.structs.replace(m, epoch=0) if isinstance(m, schema.Step) else m for m in records])
    rep = build_report(str(log))
    assert rep["epochs"] == {"first": 0, "last": 0} and "epochs " not in render_text(rep)


def test_refused_handshakes_are_counted_as_connection_attempts_not_messages():
    # Two viewers with an unadmitted key, left open 40 s, read "refused by the hub 596
    # message(s)": ZeroMQ tries a refused connection again and again; none of them sent one.
    from pardash.telemetry.report_render import _refused_text

    assert _refused_text({"no_key": 596}) == "596 connection attempt(s) with no key authorised for the port (a refused client tries again and again)"
    assert _refused_text({"invalid": 3, "no_key": 2}) == (
        "3 message(s) at its ports (invalid 3); 2 connection attempt(s) with no key authorised for the port (a refused client tries again and again)"
    )


@pytest.mark.parametrize("ranks", [0, 1])
def test_a_quiet_hub_warning_speaks_of_figures_only_where_there_are_some(monkeypatch, ranks):
    # "the figures below are from before" came where no rank had said anything: no figures.
    import io

    from pardash.telemetry import printer as printer_mod
    from pardash.telemetry.printer import HUB_QUIET_S, ProgressPrinter

    clock = [100.0]
    monkeypatch.setattr(printer_mod.time, "monotonic", lambda: clock[0])
    st = RunState()
    if ranks:
        st.apply(schema.Hello(rank=0, world_size=1, t=1.0e9), 0.0)

    class Quiet:
        live = True
        synced = True
        last_frame_t = 5.0  # one frame, then nothing
        state = st

        def poll(self) -> bool:
            return False

    out = io.StringIO()
    p = ProgressPrinter(Quiet(), out=out, bar=False, every_s=600.0, waiting="no rank has said hello yet")
    p.update()
    clock[0] += HUB_QUIET_S + 1
    p.update()
    warned = [line for line in out.getvalue().splitlines() if line.startswith("warning: the hub has sent nothing")]
    assert len(warned) == 1, out.getvalue()
    assert ("the figures below are from before" in warned[0]) == bool(ranks), warned[0]


@pytest.mark.parametrize("reached", [False, True])
def test_a_run_stopped_short_of_its_total_says_of_how_many(tmp_path, reached):
    # Review 238: a run of --steps 300000 stopped at step 83,840 read "steps 83840 (last step
    # 83840)", as if that were all it was for; the TUI and `pardash ps` said "83840/300000".
    from pardash.telemetry.report import build_report
    from pardash.telemetry.report_render import render_text

    t = 1.0e9
    last = 300 if reached else 120
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, strategy="ddp", config={"steps": 300}, t=t) for r in (0, 1)]
    records += [schema.Step(run="r", rank=r, seq=s, step=s, step_s=0.1, samples=4, t=t + 0.1 * s) for s in range(1, last + 1) for r in (0, 1)]
    records += [schema.Event(run="r", rank=r, seq=last + 1, name="exit", code=-15, step=last, t=t + 0.1 * last + 0.05) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    _write_log(log, records)
    rep = build_report(str(log))
    assert rep["total_steps"] == 300
    text = render_text(rep)
    if reached:
        assert "planned" not in text
    else:
        assert re.search(r"steps\s+120 \(last step 120 of 300 planned\)", text), text
