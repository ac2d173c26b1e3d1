"""``pardash report``, ``report --compare``, ``export`` and the metrics on what review 187 found:
a checkpoint saved in 5 ms read "0.00 s" and one saved to a file object "the last in saved"; a
rank that waited in its all-reduce was said waited for, for another stall of the run; comm, the
trainer's collectives within backward or a script's waits between steps, said nowhere which;
a compare of a log cut short said nothing of it, nor of a run set against itself; and export
read a cut .gz as one truncated line. Each log is built here, small."""

from __future__ import annotations

import gzip
import sys
import zlib
from pathlib import Path

from pardash.telemetry import schema
from pardash.telemetry.compare import compare_reports, render_compare_markdown, render_compare_text
from pardash.telemetry.export import export_tensorboard, skipped_text
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.prometheus import HubCollector
from pardash.telemetry.report import build_report, render_markdown, render_text

DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))
import make_logs  # noqa: E402  (tests/data/make_logs.py: the logs' writer)


def _run(name: str, *, steps: int = 6, last: dict[int, int] | None = None, script: bool = False,
         extra=None, gap_after: int | None = None) -> make_logs.Log:  # fmt: skip
    """A small DDP run of 2 ranks, closed by its hub. ``last``: a rank's last step, where it
    stopped before the others; ``script``: its hellos a launched script's zero-code hooks' (no
    config), not the bundled trainer's; ``extra(log, s, t)``: more records after step ``s``
    at ``t``; ``gap_after``: a step after which the job stood 6 s."""
    log = make_logs.Log(name)
    make_logs.hub_note(log, 0.0, "hub started (pid 1), ingest tcp://127.0.0.1:29600")
    for r in range(2):
        hello = make_logs.hello(r, 2, strategy="ddp", host="vm", node=0, local=r, steps=steps)
        if script:
            hello.source, hello.config = "auto", {}
        log.add(hello, 0.1)
    t = 0.2
    for s in range(1, steps + 1):
        t += 0.1
        for r in range(2):
            if s <= (last or {}).get(r, steps):
                log.add(schema.Step(rank=r, step=s, loss=4.0 - 0.1 * s, samples=16, step_s=0.1, data_s=0.01, forward_s=0.03,
                                    backward_s=0.04, optimizer_s=0.01, comm_s=0.01, self_s=0.04), t)  # fmt: skip
        if extra is not None:
            extra(log, s, t)
        if s == gap_after:
            t += 6.0
    for r in range(2):
        log.add(schema.Event(rank=r, name="exit", code=0, step=(last or {}).get(r, steps)), t + 0.3)
    make_logs.hub_note(log, t + 0.5, "hub stopped: 40 messages, 0 lost, 0 rejected")
    return log


def _report(log: make_logs.Log, path: Path) -> dict:
    log.write(path)
    return build_report(str(path))


# -- checkpoints ------------------------------------------------------------------------------


def test_a_checkpoint_saved_in_milliseconds_says_its_ms_not_zero_seconds(tmp_path):
    # "slowest save 0.00 s (step 4)" where the headless line said "(5 ms)".
    def save(log, s, t):
        if s == 4:
            for r in range(2):
                log.add(schema.Event(rank=r, name="checkpoint", step=4, message="/ckpt/step-4", duration_s=0.0048), t + 0.01)

    rep = _report(_run("ms-save", extra=save), tmp_path / "log.jsonl")
    for text in (render_text(rep), render_markdown(rep)):
        assert "1 saved at step 4; the last in /ckpt/step-4; slowest save 5 ms (step 4)" in text, text
        assert "0.00 s" not in text


def test_a_checkpoint_saved_to_a_file_object_names_no_path(tmp_path):
    # A save to a buffer sends "" as its path: the report said "the last in saved" (the word
    # the trainer sent before), and would say "the last in " of ""; a path is said where there is one.
    def save(log, s, t):
        if s == 3:
            log.add(schema.Event(rank=0, name="checkpoint", step=3, message="", duration_s=1.5), t + 0.01)

    rep = _report(_run("buffer-save", extra=save), tmp_path / "log.jsonl")
    for text in (render_text(rep), render_markdown(rep)):
        assert "1 saved at step 3; slowest save 1.50 s (step 3)" in text, text
        assert "the last in" not in text
    assert rep["checkpoints"]["saved"][0]["path"] is None  # (the JSON's "" read as a path too)


# -- stalls -----------------------------------------------------------------------------------


def test_only_the_rank_that_held_the_others_up_in_an_episode_is_said_waited_for(tmp_path):
    # Rank 0 stood 6 s in its data after step 10, rank 1 waiting in its all-reduce; later rank 1
    # alone stood in its backward. The episodes were judged all together: both of rank 1's
    # lines read "the others waited for it", for the lower step of rank 0's.
    def stalls(log, s, t):
        if s == 10:
            log.add(schema.Verdict(rank=0, verdict="stalled", cause="data", step=10, message="rank 0 stalled in data"), t + 5.0)
            log.add(schema.Verdict(rank=1, verdict="stalled", cause="backward", step=10, message="rank 1 stalled in backward"), t + 5.0)
            for r in range(2):
                log.add(schema.Verdict(rank=r, verdict="resumed", step=11, message=f"rank {r} resumed at step 11"), t + 6.05)
        if s == 13:
            log.add(schema.Verdict(rank=1, verdict="stalled", cause="backward", step=13, message="rank 1 stalled in backward"), t + 0.05)
            log.add(schema.Verdict(rank=1, verdict="resumed", step=14, message="rank 1 resumed at step 14"), t + 0.08)

    rep = _report(_run("stalls", steps=16, extra=stalls, gap_after=10), tmp_path / "log.jsonl")
    text = render_text(rep)
    lines = [line.strip() for line in text.splitlines() if "stalled in" in line]
    assert len(lines) == 2, text  # (rank 1's wait at step 10 said on rank 0's line: a pause is said once)
    (held,) = [line for line in lines if line.startswith("rank 0 stalled in data after step 10")]
    assert held.endswith("resumed at step 11; a pause the others waited out (rank 1 in backward), not a hang"), held
    assert [line for line in lines if line.startswith("rank 1")] and all(
        "waited" not in line for line in lines if line.startswith("rank 1")), lines  # fmt: skip
    assert "rank 1 in backward" in render_markdown(rep)


# -- what comm is -----------------------------------------------------------------------------

TRAINER_COMM = "which run within forward and backward: the phases sum past the step"
SCRIPT_COMM = ("in the script's own collectives (between steps: a barrier, or the all-reduces of an update by hand; in its "
               "forward or backward: a metric's all_reduce), in DDP's all-reduces once the backward's work is done, and in FSDP2's all-gathers and reduce-scatters, in no other phase")


def test_the_rank_table_says_what_comm_is_of_the_trainer_and_of_a_script(tmp_path):
    trainer = _report(_run("trainer"), tmp_path / "trainer.jsonl")
    script = _report(_run("script", script=True), tmp_path / "script.jsonl")
    assert (trainer["source"], script["source"]) == ("trainer", "auto")  # (what made the log, not a guess)
    for render in (render_text, render_markdown):
        assert TRAINER_COMM in render(trainer) and SCRIPT_COMM not in render(trainer)
        assert SCRIPT_COMM in render(script) and TRAINER_COMM not in render(script)


def test_the_phase_metrics_help_says_comm_is_two_things():
    core = HubCore(run_id="r", world_size=1)
    core.ingest(schema.Hello(run="r", rank=0, world_size=1, t=1.0e9), 1.0)
    core.ingest(schema.Step(run="r", rank=0, seq=1, step=1, t=1.0e9 + 1, step_s=0.1, comm_s=0.01), 1.0)
    (phase,) = [f for f in HubCollector(core, per_rank=True).collect() if f.name == "pardash_rank_phase_seconds"]
    assert "bundled trainer" in phase.documentation and "zero-code hooks" in phase.documentation
    assert "sum past the step" in phase.documentation and "sum to the step" in phase.documentation


def test_compare_of_the_trainer_and_a_script_does_not_judge_comm(tmp_path):
    trainer = _report(_run("trainer"), tmp_path / "trainer.jsonl")
    script = _report(_run("script", script=True), tmp_path / "script.jsonl")
    script["phases"]["comm_s"] *= 3  # (a script's waits three times the trainer's all-reduces: no worse for it)
    cmp = compare_reports(trainer, script)
    (comm,) = [r for r in cmp["rows"] if r["metric"] == "phase:comm_s"]
    assert comm["verdict"] == "" and comm["better"] == ""
    (note,) = [n for n in cmp["notes"] if "comm" in n]
    assert "bundled trainer" in note and "zero-code hooks" in note and "not judged" in note
    # two runs of the trainer: judged as before
    other = _report(_run("trainer2"), tmp_path / "trainer2.jsonl")
    other["phases"]["comm_s"] *= 3
    (comm,) = [r for r in compare_reports(trainer, other)["rows"] if r["metric"] == "phase:comm_s"]
    assert comm["verdict"] == "worse"


# -- compare: a log cut short, ranks ending apart, a run against itself -------------------------


def test_compare_says_a_sides_log_ends_early_and_a_run_set_against_itself(tmp_path):
    whole = tmp_path / "log.jsonl"
    _run("cut", steps=40).write(whole)
    packed = gzip.compress(whole.read_bytes(), mtime=0)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    whole_lines = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut.read_bytes()).count(b"\n")
    cmp = compare_reports(build_report(str(whole)), build_report(str(cut)))
    ends = [n for n in cmp["notes"] if "ends early" in n]
    assert len(ends) == 1 and ends[0].startswith("B's log ends early"), cmp["notes"]
    assert f"the compressed log is cut short after line {whole_lines}" in ends[0]
    assert any("same run (cut)" in n for n in cmp["notes"]), cmp["notes"]
    for text in (render_compare_text(cmp, width=400), render_compare_markdown(cmp)):
        assert "B's log ends early" in text and "same run" in text


def test_compare_says_the_steps_of_ranks_that_ended_apart_without_a_contradiction(tmp_path):
    # "38 steps, to step 37": the furthest rank's count beside the slowest rank's last step.
    a = _report(_run("apart", steps=8, last={1: 7}), tmp_path / "a.jsonl")
    b = _report(_run("even", steps=8), tmp_path / "b.jsonl")
    text = render_compare_text(compare_reports(a, b), width=400)
    assert "A: apart (ddp x2, 8 steps, ranks to step 7-8)" in text, text
    assert "B: even (ddp x2, 8 steps)" in text
    assert "to step 7)" not in text


# -- export of a cut .gz ----------------------------------------------------------------------


def test_export_of_a_cut_gz_says_what_report_says_of_it(tmp_path):
    # Export said "skipped 1 log line(s) (1 truncated)" and nothing of the cut; report said
    # "skipped log lines 0; the compressed log is cut short after line N".
    whole = tmp_path / "log.jsonl"
    _run("cut", steps=40).write(whole)
    packed = gzip.compress(whole.read_bytes(), mtime=0)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    rep = build_report(str(cut))
    res = export_tensorboard(str(cut), str(tmp_path / "tb"))
    assert res["gzip_damage"] == rep["gzip_damage"] and res["gzip_damage"]["how"] == "cut short"
    said = skipped_text(res)
    after = f"the compressed log is cut short after line {rep['gzip_damage']['after_line']}"
    assert said == f"{after}, the rest of it lost", said
    assert f"skipped log lines  0; {after}" in render_text(rep)
    # a log read whole skipped nothing
    assert skipped_text(export_tensorboard(str(whole), str(tmp_path / "tb2"))) is None
    # and `pardash export` prints it so
    import subprocess

    p = subprocess.run([sys.executable, "-m", "pardash", "export", str(cut), "--tensorboard", str(tmp_path / "tb3")],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert f"pardash: {after}, the rest of it lost" in p.stdout and "truncated" not in p.stdout, p.stdout


def test_a_scripts_comm_median_counts_its_steps_without_a_wait_as_none_waited(tmp_path):
    # A launched script's comm_s is its wait in its own collectives between steps, none on a
    # step without one: its median over the steps with a barrier only (rank 0 evaluating every
    # 2nd step, rank 1 waiting) read 61.8 ms of comm beside a 22 ms step.
    log = make_logs.Log("sparse-comm")
    make_logs.hub_note(log, 0.0, "hub started (pid 1), ingest tcp://127.0.0.1:29600")
    for r in range(2):
        hello = make_logs.hello(r, 2, strategy="ddp", host="vm", node=0, local=r, steps=9)
        hello.source, hello.config = "auto", {}
        log.add(hello, 0.1)
    t = 0.2
    for s in range(1, 10):
        t += 0.1
        for r in range(2):
            comm = 0.06 if r == 1 and s % 3 == 0 else None
            log.add(schema.Step(rank=r, step=s, loss=1.0, samples=16, step_s=0.02 + (comm or 0.0), data_s=0.01,
                                forward_s=0.005, backward_s=0.004, optimizer_s=0.001, comm_s=comm), t)  # fmt: skip
    for r in range(2):
        log.add(schema.Event(rank=r, name="exit", code=0, step=9), t + 0.3)
    make_logs.hub_note(log, t + 0.5, "hub stopped: 40 messages, 0 lost, 0 rejected")
    rep = _report(log, tmp_path / "log.jsonl")
    ranks = {r["rank"]: r for r in rep["ranks"]}
    assert ranks[1]["median_comm_s"] == 0.0  # (3 steps of 9 waited 60 ms: the median step none)
    assert ranks[0]["median_comm_s"] is None  # (a rank that never waited: no comm, as before)
