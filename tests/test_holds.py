"""Ranks that now and then hold the others far past a step, said as the job runs (telemetry/holds.py):
fed as the hub feeds its detector, and from a real launch."""

import re
import subprocess
import sys
from pathlib import Path

from pardash.telemetry import schema
from pardash.telemetry.analysis import Detector
from pardash.telemetry.state import RunState

from helpers import pardash_env

T = 1_800_000_000.0


def _run(steps: int, pause_at, *, ranks: int = 2, step_s: float = 0.015, events=(), end: bool = True, past: bool = False):
    """Feed a hub's detector ``steps`` steps of each rank; ``pause_at(rank, step)``: the seconds
    that rank spent between steps before that step (the others wait them out in their comm;
    ``past``: in that step past its first collective, the others waiting at a later one, its
    self time as ever); ``events``: (step, rank, Event) applied once the step is in. Returns
    the held verdicts."""
    st = RunState()
    det = Detector()
    out = []
    t = T
    for r in range(ranks):
        st.apply(schema.Hello(rank=r, world_size=ranks, t=t, source="auto"), t)
    for s in range(1, steps + 1):
        pauses = {r: pause_at(r, s) for r in range(ranks)}
        longest = max(pauses.values())
        for tick in range(1, int(longest) + 1):  # (the hub's ticks while the ranks wait, their heartbeats)
            for r in range(ranks):
                st.apply(schema.Heartbeat(rank=r, step=s - 1, phase="data" if pauses[r] else "comm", t=t + tick), t + tick)
            out.extend(det.update(st, t + tick))
        t += step_s + longest
        for r in range(ranks):
            own = 0.011 + pauses[r] * (not past)
            msg = schema.Step(rank=r, step=s, seq=s, t=t, step_s=step_s + longest, self_s=own, data_s=0.009 + pauses[r] * (not past),
                              loader_s=0.0005, comm_s=0.002 + longest - pauses[r])  # fmt: skip
            st.apply(msg, t)
            det.stragglers.observe(msg)
        for at, r, ev in events:
            if at == s:
                st.apply(ev, t)
                if isinstance(ev, schema.Event):
                    det.stragglers.note_event(ev)  # (as the hub takes it)
        for v in det.update(st, t):
            st.apply(v, t)
            out.append(v)
    if end:
        for r in range(ranks):
            st.apply(schema.Verdict(rank=r, verdict="finished", t=t), t)
        for v in det.update(st, t + 1):
            out.append(v)
    return [v for v in out if v.verdict == "held_up"]


def every_60(rank: int, step: int) -> float:
    return 1.5 if rank == 1 and step % 60 == 1 and step > 1 else 0.0


def test_a_rank_that_now_and_then_pauses_is_said_as_it_goes_then_in_gathered_lines():
    # A rank pausing 1.5 s every 60 steps cost the job 58% of its time; nothing said it live.
    held = _run(1200, every_60)
    assert [v.message for v in held[:2]] == [
        "rank 1 held the others up 1.50 s at step 61 (its steps take 15.0 ms), in its own code between steps (not its DataLoader)",
        "rank 1 held the others up 4 more times since step 61, at steps 121, 181, 241, 301 (every 60 steps), 1.50 s each, 6.00 s in all, "
        "in its own code between steps (not its DataLoader)",
    ]
    assert all(v.rank == 1 for v in held) and held[0].cause == "own work" and held[0].cost_s == 1.5
    # Every hold is said once, the last ones as the job ends; the later lines a minute apart.
    said = [1] + [int(v.message.split(" more times")[0].rsplit(" ", 1)[1]) for v in held[1:]]
    assert sum(said) == 19 == len([s for s in range(1, 1201) if every_60(1, s)])
    assert len(held) == 3


def test_a_pause_past_the_steps_first_collective_is_found_by_the_others_wait():
    # Review 333: rank 0 logging its gradients' norm for 1 s between its backward and its
    # optimizer step every 40 steps (12 s of a 15 s run) was said nowhere: its self time (to its
    # first collective) had no lead; the others' comm at their next collective had it all.
    held = _run(500, lambda r, s: 1.0 if r == 0 and s % 40 == 1 and s > 40 else 0.0, past=True)
    assert held[0].message == ("rank 0 held the others up 1.00 s at step 41 (its steps take 15.0 ms), past its step's first collective "
                               "(in its backward or optimizer step, or between them)")
    assert sum(1 if " more times" not in v.message else int(v.message.split(" more times")[0].rsplit(" ", 1)[1]) for v in held) == 12


def test_a_rank_evaluating_alone_is_its_eval_lines_not_a_hold():
    # Review 333: rank 0 alone evaluating 1.6 s every 100 steps; its evaluation is in no step of
    # its own, but in rank 1's wait at its next collective.
    evals = [(s, 0, schema.Event(rank=0, name="eval", step=s, duration_s=1.6)) for s in range(100, 401, 100)]
    assert _run(400, lambda r, s: 1.6 if r == 0 and s % 100 == 1 and s > 1 else 0.0, past=True, events=evals) == []
    # ...and 1 s of its own code after it, past its first collective, is its hold.
    held = _run(400, lambda r, s: 2.6 if r == 0 and s == 201 else 0.0, past=True, events=evals)
    assert [v.message for v in held] == ["rank 0 held the others up 1.00 s at step 201 (its steps take 15.0 ms), right after its "
                                         "evaluation at step 200 (1.60 s, said apart): in its own code after it"]


def test_pauses_that_grow_are_said_growing_not_as_their_median():
    # Review 333: 0.3, 0.6, 0.9, 1.2, 1.5 s read "1.20 s each".
    grows = {60 * k + 1: 0.3 * k for k in range(1, 7)}
    held = _run(420, lambda r, s: grows.get(s, 0.0) if r == 1 else 0.0)
    assert held[0].message.startswith("rank 1 held the others up 0.30 s at step 61 "), held[0].message
    assert [v.message for v in held[1:]] == ["rank 1 held the others up 5 more times since step 61, at steps 121, 181, 241, 301, 361 "
                                             "(every 60 steps), growing from 0.60 s to 1.80 s, 6.00 s in all, in its own code between steps "
                                             "(not its DataLoader)"]


def test_what_a_rank_does_right_after_its_own_save_is_said_so():
    # Its saves' time is in no step (the hooks and the bundled trainer leave it out): after the
    # save of step 50 it went on at once; after that of step 100 it spent 3.5 s of its own (an
    # upload of the checkpoint, review 327's Lightning callback).
    def after_save(rank: int, step: int) -> float:
        return 3.5 if rank == 0 and step == 101 else 0.0

    saves = [(s, 0, schema.Event(rank=0, name="checkpoint", step=s, duration_s=1.0, message="/ckpt")) for s in (50, 100)]
    saving = [(s, 0, schema.Heartbeat(rank=0, step=s, phase="checkpoint", seq=s)) for s in (50, 100)]
    held = _run(200, after_save, events=saving + saves)
    assert [v.message for v in held] == [
        "rank 0 held the others up 3.50 s at step 101 (its steps take 15.0 ms), right after its checkpoint at step 100 (1.00 s, said "
        "apart): in its own code after it, e.g. an upload"
    ]
    # An upload after every save from step 100 on: the gathered lines say so of them all.
    uploads = [(s, 0, schema.Event(rank=0, name="checkpoint", step=s, duration_s=0.5, message="/ckpt")) for s in range(50, 801, 50)]
    held = _run(800, lambda r, s: 2.0 if r == 0 and s % 50 == 1 and s > 100 else 0.0, events=uploads)
    assert held[1].message == ("rank 0 held the others up 4 more times since step 101, at steps 151, 201, 251, 301 (every 50 steps), "
                               "2.00 s each, 8.00 s in all, each right after its checkpoint: in its own code after it, e.g. an upload")


def test_a_pause_long_enough_to_be_a_stall_is_the_stalls_and_a_straggler_holds_no_one():
    assert _run(200, lambda r, s: 7.0 if r == 1 and s == 101 else 0.0) == []  # (said stalled after 5 s, then resumed)
    assert len(_run(200, lambda r, s: 4.0 if r == 1 and s == 101 else 0.0)) == 1
    assert _run(200, lambda r, s: 0.3 if r == 1 and s > 20 else 0.0) == []  # (a straggler: its own verdict)
    assert _run(400, lambda r, s: 0.0) == []


HOLDER = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 81):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    if dist.get_rank() == 1 and step % 30 == 0:
        time.sleep(1.0)  # (an upload of its metrics, every 30 steps)
dist.destroy_process_group()
"""


def test_a_launch_says_a_rank_that_held_the_others_as_its_report_does(tmp_path: Path):
    from pardash.telemetry.report import build_report

    (tmp_path / "holder.py").write_text(HOLDER)
    log = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "2", "--headless", "--log", str(log), "--runs-dir",
         str(tmp_path / "runs"), "--", "holder.py"],
        cwd=tmp_path, env=pardash_env(PARDASH_REGISTRY_DIR=str(tmp_path / "registry")), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    held = [line for line in proc.stdout.splitlines() if line.startswith("[held_up]")]
    assert held and held[0].startswith("[held_up] rank 1 held the others up 1."), proc.stdout
    assert " at step 31 (its steps take " in held[0] and held[0].endswith("between steps (loading data or its own work)"), held
    # Its end: the rate of its last steps is since the last pause; the last line says the holds.
    ends = [line for line in proc.stdout.splitlines() if "wall-clock samples/s at the end" in line]
    assert ends and "wall-clock samples/s at the end, since the last held-up pause (`pardash report` counts them)" in ends[-1], ends
    last = proc.stdout.strip().splitlines()[-1]
    assert re.search(r"; rank 1 held the others up \d+\.\d s in all, now and then \(see the events\)", last), last
    # The holds the report finds in the log are those said live (the first, then the rest gathered).
    (hold,) = build_report(str(log))["holds"]
    more = [int(line.split(" more times")[0].rsplit(" ", 1)[1]) if " more times" in line else 1 for line in held[1:]]
    assert (hold["rank"], hold["count"], hold["steps"]) == (1, 1 + sum(more), [31, 61]), (hold, held)


def test_the_report_finds_the_holds_past_the_first_collective_as_the_hub_does(tmp_path):
    from pardash.telemetry.report import build_report
    from pardash.telemetry.report_render import render_text

    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, strategy="ddp", t=T, source="auto", pardash_version="0.1.0") for r in (0, 1)]
    t = T
    for s in range(1, 201):
        held = s % 50 == 1 and s > 1  # (rank 0's 1 s between its backward and its optimizer step of the step before)
        t += 1.02 if held else 0.02
        for r in (0, 1):
            records.append(schema.Step(run="r", rank=r, seq=s, step=s, samples=8, t=t, loss=1.0, step_s=1.02 if held else 0.02,
                                       data_s=0.005, loader_s=0.0005, self_s=0.01, comm_s=1.005 if held and r == 1 else 0.005))  # fmt: skip
    path = tmp_path / "past.jsonl"
    path.write_bytes(schema.encode_json_lines(records))
    rep = build_report(str(path))
    (hold,) = rep["holds"]
    assert (hold["rank"], hold["count"], hold["steps"], hold["where"]) == (0, 3, [51, 101, 151], "after")
    (line,) = [x for x in render_text(rep).splitlines() if x.startswith("held up")]
    assert line.endswith("past its step's first collective (in its backward or optimizer step, or between them)"), line
    # The same waits, of rank 0's evaluations alone (in no step of its own): its eval lines, no hold.
    evals = [schema.Event(run="r", rank=0, seq=1000 + s, name="eval", step=s, duration_s=1.0, t=T + s) for s in (50, 100, 150)]
    path.write_bytes(schema.encode_json_lines(records + evals))
    assert build_report(str(path))["holds"] == []



def test_the_seconds_held_up_are_the_launchs_last_line_and_a_prometheus_counter():
    from pardash.telemetry.hubcore import HubCore
    from pardash.telemetry.printer import outcome_line
    from pardash.telemetry.prometheus import HubCollector

    core = HubCore(run_id="held", world_size=2)
    for r in (0, 1):
        core.ingest(schema.Hello(run="held", rank=r, world_size=2, t=T, source="auto"), 1.0)
        core.ingest(schema.Step(run="held", rank=r, step=100, seq=1, t=T + 10, step_s=0.02, samples=8), 1.0)
    for v in _run(1200, every_60):
        core.verdict(v)
    for r in (0, 1):
        core.ingest(schema.Event(run="held", rank=r, seq=2, name="exit", code=0, step=100, t=T + 11), 1.0)
    assert core.state.held_up_s == {1: 28.5}
    line = outcome_line(core.state, 0, {}, "log.jsonl")
    assert "; rank 1 held the others up 28.5 s in all, now and then (see the events)" in line, line
    fams = {f.name: f for f in HubCollector(core).collect()}
    assert fams["pardash_held_up_seconds"].samples[0].value == 28.5
