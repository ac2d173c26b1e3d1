"""What the report says of a run's DataLoader workers started anew each epoch, of a process's
first step (its warm-up), and of a loss that spikes to inf and back again and again (review
320: "more DataLoader workers would speed that up" of workers that took 0.2-0.7 s to start
each epoch; "rank 1 held the others once, at step 1, 2.07 s" of its torch.compile; 40 lines
"inf from step 7, finite again at step 8; ..." of a script that skips each inf loss's update)."""

from __future__ import annotations

import math
from types import SimpleNamespace

from pardash.telemetry import schema
from pardash.telemetry.report import build_report, render_markdown, render_text
from pardash.telemetry.reporter import Reporter

T = 1.0e9


def _write(tmp_path, records, name="run.jsonl") -> str:
    path = tmp_path / name
    path.write_bytes(schema.encode_json_lines(records))
    return str(path)


def _hello(r: int, pid: int = 100) -> schema.Hello:
    return schema.Hello(run="r", rank=r, seq=0, world_size=2, strategy="ddp", t=T, pid=100 + r + pid, source="auto", pardash_version="0.1.0")


def _line(rep: dict, start: str) -> str | None:
    rows = [x for x in render_text(rep).splitlines() if x.startswith(start)]
    return " ".join(rows[0].split()) if rows else None


def _epochs_log(tmp_path, *, epochs: int, start_at=lambda s, per: s % per == 1, name="run.jsonl") -> str:
    """Two ranks' ``epochs`` epochs of 25 steps of 20 ms, 1 ms of it in the DataLoader; at the
    steps ``start_at`` picks, 300 ms more in it (workers starting). The first epoch's steps say
    no epoch (as a script's that calls set_epoch from the second on), the next 1, 2, ..."""
    records = [_hello(r) for r in (0, 1)]
    t = T
    for s in range(1, epochs * 25 + 1):
        slow = 0.3 if start_at(s, 25) else 0.0
        t += 0.02 + slow
        epoch = (s - 1) // 25
        for r in (0, 1):
            records.append(schema.Step(run="r", rank=r, seq=s, step=s, samples=8, t=t, loss=1.0, step_s=0.02 + slow,
                                       **({"epoch": epoch} if epoch else {}), data_s=0.0012 + slow, loader_s=0.001 + slow, self_s=0.005 + slow,
                                       comm_s=0.005))  # fmt: skip
    return _write(tmp_path, records, name)


def test_dataloader_time_mostly_on_epoch_starts_says_persistent_workers(tmp_path):
    rep = build_report(_epochs_log(tmp_path, epochs=4))
    dl = rep["data_loading"]
    starts = dl["epoch_starts"]
    assert starts["epochs"] == 4 and starts["of_loader"] > 0.9
    line = _line(rep, "data loading")
    assert "persistent_workers=True" in line and f"{starts['share'] * 100:.0f}% its workers starting anew on each of 4 epochs' first steps" in line
    # What is left is 1 ms a step of 20: no "more workers" said of it.
    assert "num_workers" not in line, line
    assert "persistent_workers=True" in render_markdown(rep)


def test_dataloader_time_elsewhere_or_one_epoch_says_more_workers_as_before(tmp_path):
    # The same slow batches, in the middle of each epoch: more workers would help.
    rep = build_report(_epochs_log(tmp_path, epochs=4, start_at=lambda s, per: s % per == 12, name="middle.jsonl"))
    assert "epoch_starts" not in rep["data_loading"]
    line = _line(rep, "data loading")
    assert "persistent_workers" not in line and "(more DataLoader workers, num_workers, would speed that up)" in line
    # One epoch: its start is no pattern.
    rep = build_report(_epochs_log(tmp_path, epochs=1, name="one.jsonl"))
    assert "epoch_starts" not in rep["data_loading"] and "persistent_workers" not in _line(rep, "data loading")


def _held_log(tmp_path, slow_steps: dict[int, float], restart_at: int | None = None, name="run.jsonl") -> str:
    """Two ranks' 60 steps of 20 ms; at the steps of ``slow_steps`` rank 1's own work took that
    long (a compile, a first batch) and rank 0 waited for it; ``restart_at``: both processes
    started again (new pids) and resumed there."""
    records = [_hello(r) for r in (0, 1)]
    t = T
    for s in range(1, 61):
        if s == restart_at:
            records += [_hello(r, pid=200) for r in (0, 1)]
        own = slow_steps.get(s, 0.0)
        t += 0.02 + own
        for r in (0, 1):
            records.append(schema.Step(run="r", rank=r, seq=s, step=s, samples=8, t=t, loss=1.0, step_s=0.02 + own,
                                       data_s=0.001, loader_s=0.0005, self_s=0.01 + (own if r == 1 else 0.0),
                                       comm_s=0.005 + (own if r == 0 else 0.0)))  # fmt: skip
    return _write(tmp_path, records, name)


def test_a_processs_first_step_is_warm_up_not_a_hold(tmp_path):
    rep = build_report(_held_log(tmp_path, {1: 2.0, 30: 2.0, 31: 1.0}, restart_at=31))
    # Step 1 (the first process's) and step 31 (the resumed one's) are warm-up; step 30 held.
    (hold,) = rep["holds"]
    assert (hold["rank"], hold["steps"]) == (1, [30])
    assert _line(rep, "held up").startswith("held up: rank 1 held the others once, at step 30, 2.00 s")
    assert "(a process's first step (restarts and resumes too) took up to 2.0 s: warm-up" in _line(rep, "median step")
    rep = build_report(_held_log(tmp_path, {1: 2.0}, name="first.jsonl"))
    assert rep["holds"] == [] and _line(rep, "held up") is None
    # ...said beside the median step instead.
    assert _line(rep, "median step") == ("median step 20.0 ms (the first step took 2.0 s: warm-up, such as torch.compile or the "
                                         "DataLoader's first batch; not counted as held up)")  # fmt: skip
    rep = build_report(_held_log(tmp_path, {}, name="even.jsonl"))
    assert "warmup_step" not in rep and _line(rep, "median step") == "median step 20.0 ms"


def _says(loss: float, step: int, bad_since: int | None = None) -> str:
    """The rank's reporter's warning as its loss turns, in its words."""
    said: list[str] = []
    fake = SimpleNamespace(_loss_bad=bad_since, event=lambda name, message, **kw: said.append(message))
    Reporter._loss_turns(fake, {"loss": loss}, loss, step)  # type: ignore[arg-type]
    return said[0]


def _loss_log(tmp_path, bad: dict[int, int], last: int, name="run.jsonl") -> str:
    """Two ranks' ``last`` steps; at each step of ``bad`` their loss went inf, finite again
    that many steps later (0: never)."""
    records: list = [_hello(r) for r in (0, 1)]
    seq = {0: 0, 1: 0}
    until: dict[int, int] = {}
    for s in range(1, last + 1):
        for r in (0, 1):
            seq[r] += 1
            if s in bad:
                records.append(schema.Event(run="r", rank=r, seq=seq[r], name="warning", message=_says(math.inf, s), step=s, t=T + s))
                seq[r] += 1
                until[r] = s
            elif r in until and (s - until[r] == bad[until[r]]):
                records.append(schema.Event(run="r", rank=r, seq=seq[r], name="warning", message=_says(1.0, s, until.pop(r)), step=s, t=T + s))
                seq[r] += 1
            ok = r not in until
            records.append(schema.Step(run="r", rank=r, seq=seq[r], step=s, samples=8, t=T + s + 0.5, step_s=0.02, loss=1.0 if ok else None))
    return _write(tmp_path, records, name)


def test_a_loss_that_spikes_again_and_again_is_one_piece(tmp_path):
    spikes = {s: 1 for s in range(7, 141, 7)}
    rep = build_report(_loss_log(tmp_path, spikes, 145))
    assert _line(rep, "loss:") == ("loss: not finite: ranks 0-1 inf at 20 steps (every 7 steps, from step 7 to 140), "
                                   "finite again the step after each")  # fmt: skip
    # The last spike never over: said apart, as now.
    rep = build_report(_loss_log(tmp_path, {**spikes, 140: 0}, 145, name="end.jsonl"))
    assert _line(rep, "loss:") == ("loss: not finite: ranks 0-1 inf at 19 steps (every 7 steps, from step 7 to 133), "
                                   "finite again the step after each; ranks 0-1 inf from step 140 to the end")  # fmt: skip


def test_a_loss_that_spiked_twice_or_diverged_reads_as_before(tmp_path):
    rep = build_report(_loss_log(tmp_path, {7: 2, 30: 1}, 40))
    assert _line(rep, "loss:") == "loss: not finite: ranks 0-1 inf from step 7, finite again at step 9; ranks 0-1 inf from step 30, finite again at step 31"
    rep = build_report(_loss_log(tmp_path, {30: 0}, 40, name="diverged.jsonl"))
    assert _line(rep, "loss:") == "loss: not finite to the end: ranks 0-1 inf from step 30"


def test_a_hold_on_an_epochs_first_step_says_its_workers_started_anew(tmp_path):
    # Rank 1's DataLoader workers took 1 s to start at epoch 2's first step (step 51), rank 0's
    # at once: "held up ... in its DataLoader" said nothing of why.
    records = [_hello(r) for r in (0, 1)]
    t = T
    for s in range(1, 101):
        slow = 1.0 if s == 51 else 0.0
        t += 0.02 + slow
        for r in (0, 1):
            own = slow if r == 1 else 0.0
            records.append(schema.Step(run="r", rank=r, seq=s, step=s, samples=8, t=t, loss=1.0, step_s=0.02 + slow,
                                       epoch=(s - 1) // 25, data_s=0.001 + own, loader_s=0.0005 + own, self_s=0.01 + own,
                                       comm_s=0.005 + (slow if r == 0 else 0.0)))  # fmt: skip
    rep = build_report(_write(tmp_path, records))
    (hold,) = rep["holds"]
    assert (hold["rank"], hold["steps"], hold["where"], hold["epoch_starts"]) == (1, [51], "dataloader", 1)
    assert _line(rep, "held up").endswith("in its DataLoader, on an epoch's first step: its workers starting anew "
                                          "(persistent_workers=True keeps them from one epoch to the next)")  # fmt: skip
