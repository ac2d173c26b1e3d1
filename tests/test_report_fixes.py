"""``pardash report`` on logs a user may hand it: a log whose strings hold terminal escape
sequences, a compressed log cut short, runs that are not like for like under --compare, a
report bigger than a pipe's buffer whose reader goes away, and the JSON's keys in --help.
Each log is built here, small; the commands run as a user runs them."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from helpers import pardash_env
from pardash.telemetry import schema
from pardash.telemetry.compare import compare_reports, render_compare_text
from pardash.telemetry.report import build_report, render_markdown, render_text

DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))
import make_logs  # noqa: E402  (tests/data/make_logs.py: the logs' writer)

READER_GONE = 141  # 128 + SIGPIPE, as the shell reports `seq 1000000 | head -1`'s seq

TERMINAL_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""What a terminal acts on (ESC, BEL, CSI as one byte, ...): newline and tab are text."""
HIJACK = "\x1b]0;TITLE-HIJACK\x07\x1b[2J"
"""Sets the terminal's (tmux pane's) title, then clears the screen."""


def _pardash(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pardash", *args], capture_output=True, text=True,
                          env=pardash_env(), cwd=cwd, timeout=120)  # fmt: skip


def _run(name: str, *, world: int = 2, params: int = make_logs.GPT2_PARAMS, steps: int = 6, hostile: bool = False,
         finished: bool = True) -> make_logs.Log:  # fmt: skip
    """A small DDP run; ``hostile``: every string a rank sends carries escape sequences (its
    host, its device's name, a warning, a checkpoint's path, an error and its traceback)."""
    bad = HIJACK if hostile else ""
    log = make_logs.Log(name + bad)
    make_logs.hub_note(log, 0.0, "hub started (pid 1), ingest tcp://127.0.0.1:29600")
    for r in range(world):
        hello = make_logs.hello(r, world, strategy="ddp", host=f"vm{bad}", node=0, local=r, steps=steps)
        hello.device_name += bad
        hello.params_count, hello.params_bytes = params, params * 4
        log.add(hello, 0.1)
    for s in range(1, steps + 1):
        for r in range(world):
            full = 4 * params
            mem = schema.Mem(params_bytes=full, grads_bytes=full, optim_bytes=2 * full, params_full_bytes=full,
                             grads_full_bytes=full, optim_full_bytes=2 * full, cuda_peak_bytes=5 * full)  # fmt: skip
            log.add(schema.Step(rank=r, step=s, loss=4.0 - 0.1 * s, samples=16, step_s=0.1, data_s=0.01, forward_s=0.03,
                                backward_s=0.04, optimizer_s=0.01, comm_s=0.01, self_s=0.04, mem=mem), 0.2 + 0.1 * s)  # fmt: skip
    t = 0.3 + 0.1 * steps
    if hostile:
        log.add(schema.Event(rank=0, name="warning", step=2, message=f"slow disk{bad} \x9b31m here"), t)
        log.add(schema.Event(rank=0, name="checkpoint", step=steps, message=f"/ckpt/{bad}step-6", duration_s=1.0), t)
        tb = f'Traceback (most recent call last):\n  File "tr{bad}ain.py", line 8, in step\nRuntimeError: boom{bad}'
        log.add(schema.Event(rank=1, name="error", step=steps, message=f"RuntimeError: boom{bad}", traceback=tb), t + 0.1)
        log.add(schema.Event(rank=1, name="exit", code=1, step=steps), t + 0.2)
    if finished:
        for r in range(world):
            if not (hostile and r == 1):
                log.add(schema.Event(rank=r, name="exit", code=0, step=steps), t + 0.3)
        make_logs.hub_note(log, t + 0.5, "hub stopped: 40 messages, 0 lost, 0 rejected")
    return log


def _write(log: make_logs.Log, path: Path) -> Path:
    log.write(path)
    return path


# -- escape sequences in the log ------------------------------------------------------------


def test_a_logs_escape_sequences_never_reach_the_terminal_in_text_markdown_or_compare(tmp_path):
    # A hello's host `vm<OSC title><clear screen>` set the tmux pane's title and cleared the
    # screen of whoever ran `pardash report`; warnings, device names, paths and errors the same.
    log = _write(_run("esc", hostile=True), tmp_path / "esc.jsonl")
    other = _write(_run("plain"), tmp_path / "plain.jsonl")
    for args in (["report", str(log)], ["report", "--format", "markdown", str(log)], ["report", str(log), "--compare", str(other)],
                 ["report", "--format", "markdown", str(other), "--compare", str(log)]):  # fmt: skip
        got = _pardash(*args, cwd=tmp_path)
        assert got.returncode == 0, got.stderr
        assert not TERMINAL_CONTROL.search(got.stdout), (args, TERMINAL_CONTROL.findall(got.stdout))
        assert "esc" in got.stdout
    text = _pardash("report", str(log), cwd=tmp_path).stdout
    assert re.search(r"^   1\s+vm\s", text, re.M), text  # the host, as written less what a terminal acts on
    assert "slow disk  here" in text.replace("31m", "") and "/ckpt/step-6" in text and "RuntimeError: boom" in text
    # JSON escapes them itself: what the log said, as it said it, for a script.
    got = _pardash("report", "--format", "json", str(log), cwd=tmp_path)
    assert not TERMINAL_CONTROL.search(got.stdout)
    assert json.loads(got.stdout)["ranks"][0]["host"] == "vm" + HIJACK


# -- a compressed log cut short ---------------------------------------------------------------


def test_a_compressed_log_cut_short_is_said_so_not_blamed_on_its_hub(tmp_path):
    # `head -c 3000 log.jsonl.gz > cut.jsonl.gz` read "skipped log lines 1 (1 truncated)" and
    # "its hub stopped recording (killed, out of disk) before the run ended".
    plain = _write(_run("cut", steps=40), tmp_path / "log.jsonl").read_bytes()
    packed = gzip.compress(plain, mtime=0)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    whole_lines = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut.read_bytes()).count(b"\n")
    assert 0 < whole_lines < plain.count(b"\n")

    rep = json.loads(_pardash("report", "--format", "json", str(cut), cwd=tmp_path).stdout)
    assert rep["gzip_damage"] == {"how": "cut short", "after_line": whole_lines}
    assert rep["log_ends_early"]["live_run"] is None
    for fmt in ("text", "markdown"):
        got = _pardash("report", "--format", fmt, str(cut), cwd=tmp_path)
        assert got.returncode == 0, got.stderr
        assert f"the compressed log is cut short after line {whole_lines}" in got.stdout, got.stdout
        assert "hub stopped recording" not in got.stdout and "killed" not in got.stdout
        assert "1 truncated" not in got.stdout  # the stream's break is no torn line of the log
    # The log whole says nothing of it.
    whole = tmp_path / "whole.jsonl.gz"
    whole.write_bytes(packed)
    assert build_report(str(whole))["gzip_damage"] is None


# -- --compare of runs not like for like ------------------------------------------------------


def test_compare_says_when_the_models_differ_and_judges_no_memory_across_them(tmp_path):
    a = build_report(str(_write(_run("small", params=10_000_000), tmp_path / "a.jsonl")))
    b = build_report(str(_write(_run("big", params=124_000_000), tmp_path / "b.jsonl")))
    cmp = compare_reports(a, b)
    memory = [r for r in cmp["rows"] if r["section"].startswith("memory")]
    assert memory and all(r["verdict"] == "" for r in memory), memory
    assert any("different models" in n and "10,000,000" in n and "124,000,000" in n for n in cmp["notes"]), cmp["notes"]
    text = render_compare_text(cmp)
    assert "better" not in "\n".join(line for line in text.splitlines() if "a rank" in line), text
    # The same model: memory is judged as before.
    same = compare_reports(a, build_report(str(_write(_run("small2", params=10_000_000), tmp_path / "c.jsonl"))))
    assert {r["verdict"] for r in same["rows"] if r["metric"] == "params_bytes"} == {"same"}
    assert not any("different models" in n for n in same["notes"])


def test_compare_says_when_the_world_sizes_differ_and_judges_no_last_loss_across_them(tmp_path):
    a = build_report(str(_write(_run("two", world=2), tmp_path / "a.jsonl")))
    b = build_report(str(_write(_run("four", world=4), tmp_path / "b.jsonl")))
    b["ranks"] = [r | {"last_loss": r["last_loss"] - 0.5} for r in b["ranks"]]  # B saw twice the samples a step
    cmp = compare_reports(a, b)
    (loss,) = [r for r in cmp["rows"] if r["metric"] == "last_loss"]
    assert loss["verdict"] == "", loss
    assert any("different world sizes" in n and "A 2 ranks, B 4" in n for n in cmp["notes"]), cmp["notes"]
    same = compare_reports(a, build_report(str(_write(_run("two2", world=2), tmp_path / "c.jsonl"))))
    assert not any("world sizes" in n for n in same["notes"])


# -- a reader that goes away partway ----------------------------------------------------------


def test_a_big_report_whose_reader_takes_one_line_ends_with_141(tmp_path):
    # `pardash report BIG | head -1` exited 0: one write of 157 KB went out in part (73,728
    # bytes) before head left, and Python dropped the rest without the EPIPE.
    log = make_logs.Log("big")
    world = 1024
    for r in range(world):
        log.add(make_logs.hello(r, world, strategy="ddp", host=f"node-{r // 8}", node=r // 8, local=r % 8, steps=2), 0.1)
    for s in (1, 2):
        for r in range(world):
            log.add(schema.Step(rank=r, step=s, loss=2.0, samples=16, step_s=0.1, self_s=0.05), 0.2 + 0.1 * s)
    path = _write(log, tmp_path / "big.jsonl")
    whole = _pardash("report", str(path), "--all-ranks", cwd=tmp_path).stdout  # (every rank's row: a long output)
    assert len(whole.encode()) > 2 * 65536  # past a pipe's buffer and the 8 KiB read of it
    with open(tmp_path / "stderr.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "pardash", "report", str(path), "--all-ranks"], stdout=subprocess.PIPE,
                                stderr=err, env=pardash_env(), cwd=tmp_path)  # fmt: skip
        first = proc.stdout.readline()  # (its 8 KiB read: the writer is then inside its write)
        proc.stdout.close()
        code = proc.wait(timeout=120)
    assert first.decode() == whole.splitlines(keepends=True)[0]
    said = (tmp_path / "stderr.txt").read_text()
    assert code == READER_GONE and "Traceback" not in said, said


# -- the JSON's keys in --help ----------------------------------------------------------------


def test_report_help_names_the_jsons_main_keys_and_units(tmp_path):
    got = _pardash("report", "--help", cwd=tmp_path)
    assert got.returncode == 0
    text = " ".join(got.stdout.split())
    assert "--format json" in text and "*_s seconds" in text and "*_bytes bytes" in text
    for key in ("ranks", "stragglers", "median_step_s", "log_ends_early", "gzip_damage"):
        assert key in text, key
    assert "pardash.telemetry.report" in text


def test_a_straggler_of_one_step_says_its_cost_in_ms_and_one_step():
    # "the others waited 2.0 ms a step on average, 0.00 s over 1 steps": nothing said, wrongly.
    from pardash.telemetry.report_render import straggler_lines

    s = {"rank": 3, "kind": "data", "since_step": 40, "until_step": 40, "step": 49, "cleared_step": 60,
         "cost_total_s": 0.002, "steps_charged": 1, "cost_s": 0.002, "share_of_train": 0.0004}  # fmt: skip
    (line,) = straggler_lines({"stragglers": [s]})
    assert "2.0 ms a step on the 1 step it held them up, 2.0 ms in all (" in line, line
    s.update(cost_total_s=12.5, steps_charged=400)
    (line,) = straggler_lines({"stragglers": [s]})
    assert "on the 400 steps it held them up, 12.50 s in all (" in line, line


def test_report_on_a_keyed_node_after_the_first_says_a_record_with_its_keys(tmp_path):
    # "from here, while the run lives: `pardash record tcp://...`": refused by a hub with keys.
    folder = tmp_path / "runs" / "r1-node1"
    folder.mkdir(parents=True)
    result = {"run_id": "r1", "code": 0, "stopped": False, "log": None, "hub_restarts": 0, "hub": "tcp://10.0.0.1:29600",
              "node_rank": 1, "curve_dir": "/k/my keys"}  # fmt: skip
    (folder / "result.json").write_text(json.dumps(result))
    proc = subprocess.run([sys.executable, "-m", "pardash", "report", str(folder)], capture_output=True, text=True,
                          env=pardash_env(), timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "while the run lives: `pardash record tcp://10.0.0.1:29600 --curve-dir '/k/my keys'`)" in proc.stderr, proc.stderr


def test_the_reports_recent_steps_tell_a_step_from_far_back_as_a_scan_of_them_does():
    # Each step from further back than the 4096 kept took min() over all of them (a resume from
    # an old checkpoint: the report four times slower); the running minimum must say the same.
    import random

    from pardash.telemetry.report import _RecentSteps

    rng = random.Random(7)
    recent = _RecentSteps()
    recent.KEEP = 64
    kept: list[int] = []
    for _ in range(5000):
        step = rng.choice([rng.randrange(0, 400), len(kept) + rng.randrange(-80, 10)])
        scan = step not in kept and (len(kept) < recent.KEEP or step > min(kept))
        assert recent.first_time(step) == scan
        recent.add(step)
        if step not in kept:
            kept.append(step)
            kept = kept[-recent.KEEP :]


# -- a rank frozen with steps still in its reporter ---------------------------------------------


def _frozen(hub_first: bool) -> make_logs.Log:
    """Two DDP ranks, 80 steps of 0.1 s; rank 1 frozen (kill -STOP) 12 s after step 73, its
    steps 72 and 73 held in its reporter: the hub says it silent after step 71 and rank 0
    stalled in backward after 73. On CONT the held steps come first, stamped before the
    verdicts, then step 74; the hub's "heard from again" before it (``hub_first``) or after."""
    log = make_logs.Log("frozen")
    make_logs.hub_note(log, 0.0, "hub started (pid 1), ingest tcp://127.0.0.1:29600")
    for r in range(2):
        log.add(make_logs.hello(r, 2, strategy="ddp", host="vm", node=0, local=r, steps=80), 0.1)

    def step(r: int, s: int, t: float) -> None:
        log.add(schema.Step(rank=r, step=s, loss=2.0, samples=16, step_s=0.1, self_s=0.05), t)

    for s in range(1, 74):
        for r in range(2):
            if r == 0 or s <= 71:
                step(r, s, 0.2 + 0.1 * s)
    stopped = 0.2 + 0.1 * 73  # rank 1 frozen here, in step 74
    log.add(schema.Verdict(rank=1, verdict="silent", step=71, message="rank 1 silent for 5 s (no heartbeat)"), stopped + 5)
    log.add(schema.Verdict(rank=0, verdict="stalled", cause="backward", step=73,
                           message="rank 0 stalled in backward after step 73 (6 s without progress)"), stopped + 6)  # fmt: skip
    woke = stopped + 12
    step(1, 72, 0.2 + 0.1 * 72)
    step(1, 73, 0.2 + 0.1 * 73)
    heard = schema.Verdict(rank=1, verdict="resumed", step=73, message="rank 1 heard from again")
    if hub_first:
        log.add(heard, woke + 0.05)
    step(1, 74, woke + 0.1)
    step(0, 74, woke + 0.1)
    if not hub_first:
        log.add(heard, woke + 0.2)
    log.add(schema.Verdict(rank=0, verdict="resumed", step=74, message="rank 0 resumed at step 74"), woke + 0.2)
    for s in range(75, 81):
        for r in range(2):
            step(r, s, woke + 0.1 * (s - 73))
    end = woke + 0.1 * 8
    for r in range(2):
        log.add(schema.Event(rank=r, name="exit", code=0, step=80), end)
    make_logs.hub_note(log, end + 0.2, "hub stopped: 400 messages, 0 lost, 0 rejected")
    return log


@pytest.mark.parametrize("hub_first", [False, True], ids=["step-first", "hub-first"])
def test_a_frozen_rank_whose_held_steps_came_after_the_verdict_was_silent_for_the_freeze(tmp_path, hub_first):
    # kill -STOP of rank 1 for 12 s read "rank 1 silent (no heartbeat) after step 71 for 0.022 s;
    # resumed at step 72": its steps 72 and 73, done before the stop, ended the episode.
    rep = build_report(str(_write(_frozen(hub_first), tmp_path / "frozen.jsonl")))
    (silent,) = [s for s in rep["stalls"] if s["rank"] == 1]
    assert (silent["kind"], silent["step"], silent["until"]) == ("silent", 73, "resumed at step 74"), silent
    assert 11.9 <= silent["seconds"] <= 12.2, silent
    (stalled,) = [s for s in rep["stalls"] if s["rank"] == 0]
    assert (stalled["step"], stalled["until"]) == (73, "resumed at step 74") and 11.9 <= stalled["seconds"] <= 12.2
    text = render_text(rep)
    assert re.search(r"\brank 1 silent \(no heartbeat\) after step 73 for 12\.\d s; resumed at step 74", text), text


# -- the ranks' statuses at a log's end ---------------------------------------------------------


def test_the_ranks_statuses_and_their_counts_agree_in_a_log_closed_with_ranks_stalled(tmp_path):
    # A hang its hub was stopped in: "statuses {'stalled': 4}" beside four ranks "no exit".
    # Rank 1 stalled, rank 2 silent at the end, rank 0 still stepping, rank 3 finished.
    log = make_logs.Log("hung")
    make_logs.hub_note(log, 0.0, "hub started (pid 1), ingest tcp://127.0.0.1:29600")
    for r in range(4):
        log.add(make_logs.hello(r, 4, strategy="ddp", host="vm", node=0, local=r, steps=9), 0.1)
    for s in range(1, 6):
        for r in range(4):
            log.add(schema.Step(rank=r, step=s, loss=2.0, samples=16, step_s=0.1), 0.2 + 0.1 * s)
    log.add(schema.Event(rank=3, name="exit", code=0, step=5), 0.8)
    log.add(schema.Verdict(rank=1, verdict="stalled", cause="backward", step=5, message="rank 1 stalled in backward after step 5"), 8.0)
    log.add(schema.Verdict(rank=2, verdict="silent", step=5, message="rank 2 silent for 9 s (no heartbeat)"), 9.0)
    log.add(schema.Heartbeat(rank=0, step=5, phase="forward"), 9.5)
    make_logs.hub_note(log, 10.0, "hub stopped: 40 messages, 0 lost, 0 rejected")
    rep = build_report(str(_write(log, tmp_path / "hung.jsonl")))
    # (rank 3 ended well at step 5 of the 9 planned, rank 0 in step 6's forward: it left the
    # job early, as failures.left_early says it, not "finished")
    assert [r["status"] for r in rep["ranks"]] == ["no exit", "stalled", "silent", "left early"]
    assert rep["statuses"] == {"no exit": 1, "stalled": 1, "silent": 1, "left early": 1}
    rows = {int(line.split()[0]): line.split()[2] for line in render_text(rep).splitlines() if re.match(r"\s+\d\s+vm\s", line)}
    assert rows == {0: "no", 1: "stalled", 2: "silent", 3: "left"}, rows


# -- a diverged loss --------------------------------------------------------------------------


def test_a_diverged_loss_is_written_compactly_in_text_and_markdown(tmp_path):
    # loss=1e308 filled the "last loss" cell with a 309-digit number, 1e20 with 26 characters.
    losses = [1e308, -1e20, 4.2e-06, 2.30258, 0.0]
    log = make_logs.Log("diverged")
    make_logs.hub_note(log, 0.0, "hub started (pid 1), ingest tcp://127.0.0.1:29600")
    for r in range(len(losses)):
        log.add(make_logs.hello(r, len(losses), strategy="ddp", host="vm", node=0, local=r, steps=2), 0.1)
    for s in (1, 2):
        for r, loss in enumerate(losses):
            log.add(schema.Step(rank=r, step=s, loss=loss, samples=16, step_s=0.1), 0.2 + 0.1 * s)
    rep = build_report(str(_write(log, tmp_path / "diverged.jsonl")))
    want = ["1.000e+308", "-1.000e+20", "4.200e-06", "2.3026", "0.0000"]
    text = render_text(rep)
    rows = [line.split() for line in text.splitlines() if re.match(r"\s+\d\s+vm\s", line)]
    assert [row[4] for row in rows] == want, text
    md = render_markdown(rep)
    cells = [line.split("|")[5].strip() for line in md.splitlines() if re.match(r"\| \d \| vm \|", line)]
    assert cells == want, md
    assert not re.search(r"\d{12}", text + md)


# -- every rank silent until the hub stopped ----------------------------------------------------


def test_a_log_whose_ranks_all_went_silent_lasts_until_its_hub_stopped(tmp_path):
    # A hub ran 26 s over two ranks frozen after their first step: "duration 3.1 s (training
    # 0.1 s; then stalled 3.1 s)" and "silent ... for 3.1 s", ended at the hub's verdicts.
    log = make_logs.Log("frozen-all")
    make_logs.hub_note(log, 0.0, "hub started (pid 1), ingest tcp://127.0.0.1:29600")
    for r in range(2):
        log.add(make_logs.hello(r, 2, strategy="ddp", host="vm", node=0, local=r, steps=9), 0.1)
    for r in range(2):
        log.add(schema.Step(rank=r, step=1, loss=2.0, samples=16, step_s=0.1), 0.2)
    for r in range(2):
        log.add(schema.Verdict(rank=r, verdict="silent", step=1, message=f"rank {r} silent for 3 s (no heartbeat)"), 3.2)
    make_logs.hub_note(log, 26.0, "hub stopped: 8 messages, 0 lost, 0 rejected")
    rep = build_report(str(_write(log, tmp_path / "frozen-all.jsonl")))
    assert abs(rep["duration_s"] - 25.9) < 1e-6, rep["duration_s"]
    assert [(s["rank"], s["kind"], s["until"], s["seconds"]) for s in rep["stalls"]] == [(0, "silent", None, 25.8), (1, "silent", None, 25.8)]
    text = render_text(rep)
    assert "duration           25.9 s (training 0.1 s; then silent 25.8 s)" in text, text
    assert "ranks 0-1 silent (no heartbeat) after step 1 for 25.8 s; never resumed" in text, text
    # Ranks that ended: a hub that stayed on after them (a viewer left open) adds no time.
    ended = _run("ended", steps=6)
    make_logs.hub_note(ended, 60.0, "hub stopped: 40 messages, 0 lost, 0 rejected")
    assert build_report(str(_write(ended, tmp_path / "ended.jsonl")))["duration_s"] < 2.0
