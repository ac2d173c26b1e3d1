"""A pause is no hang, and a pause right after a rank's own checkpoint save is the checkpoint's
time (review 327). A PyTorch Lightning job whose checkpoint plugin spent 6 s after writing each
file (an upload to object storage) exited 0, yet its report said six stall lines, one of them
"rank 0 stalled ... after step 200 for 6.0 s until it finished; likely the cause of the hang",
"checkpoints 4 saved, 0.03 s in all", and "held up: rank 0 held the others 3 times ... in its
own code" with no word of the saves at the same steps. The logs here are made up as that run's
was: rank 0 saves every 10 steps (a ``checkpoint`` event of 10 ms, sent with its next step),
then spends 6 s in its own code, rank 1 waiting in its next all-reduce; the hub called both
stalled after two of the saves, and after the last, from which rank 0 went on to finish."""

from __future__ import annotations

import pytest

from pardash.telemetry import schema
from pardash.telemetry.analysis import BETWEEN_STEPS_WORDS
from pardash.telemetry.report import build_report
from pardash.telemetry.report_render import render_markdown, render_text

RUN = "pauses"
T = 1.8e9
STEPS = 40
EVERY = 10
UPLOAD_S = 6.0
SAVE_S = 0.01


def _log(tmp_path, *, saves: bool = True, stalled_at=(10, 30), last_stalled: bool = True, in_loader: bool = False) -> str:
    """The run's log: steps 1-40 of two DDP ranks, rank 0 pausing UPLOAD_S after each EVERY-th
    step (after its save there, ``saves``), the hub's stall verdicts after ``stalled_at`` and
    (``last_stalled``) after the last step, then both ranks' exit 0. ``in_loader``: rank 0's
    pauses are in its DataLoader (an epoch's first batch after its save), not its own code."""
    msgs: list[schema.Message] = [schema.Hello(run=RUN, rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=T) for r in (0, 1)]
    seq = {0: 0, 1: 0}

    def nxt(rank: int) -> int:
        seq[rank] += 1
        return seq[rank]

    t = T + 1.0
    for s in range(1, STEPS + 1):
        paused = s > 1 and (s - 1) % EVERY == 0
        t += 0.02 + (UPLOAD_S + SAVE_S if paused else 0.0)
        for r in (0, 1):
            own = UPLOAD_S if paused and r == 0 else 0.0
            wait = UPLOAD_S if paused and r == 1 else 0.0
            msgs.append(schema.Step(run=RUN, rank=r, seq=nxt(r), step=s, loss=1.0, samples=8, step_s=0.02 + own + wait,
                                    data_s=0.002 + own, loader_s=0.001 + (own if in_loader else 0.0), self_s=0.004 + own,
                                    comm_s=0.01 + wait, t=t))  # fmt: skip
        if paused and saves:
            # (sent with the step after the save, as the trainer's hooks do)
            msgs.append(schema.Event(run=RUN, rank=0, seq=nxt(0), name="checkpoint", step=s - 1, duration_s=SAVE_S,
                                     message=f"/ckpt/epoch=0-step={s - 1}.ckpt", t=t))  # fmt: skip
        if paused and s - 1 in stalled_at:
            for r, cause in ((0, "data"), (1, "sync")):
                where = "in data" if in_loader else BETWEEN_STEPS_WORDS
                said = f"rank 0 stalled {where} after step {s - 1}" if r == 0 else f"rank 1 stalled in sync after step {s - 1}"
                msgs.append(schema.Verdict(run=RUN, rank=r, seq=-1, verdict="stalled", cause=cause, step=s - 1, message=said,
                                           t=t - UPLOAD_S - SAVE_S + 5.0))  # fmt: skip
            msgs += [schema.Verdict(run=RUN, rank=r, seq=-1, verdict="resumed", step=s, message=f"rank {r} resumed at step {s}", t=t + 0.01)
                     for r in (0, 1)]  # fmt: skip
    # The last save, then UPLOAD_S in rank 0's own code, rank 1 waiting in the job's last
    # collective; both finish.
    if last_stalled:
        msgs += [schema.Verdict(run=RUN, rank=0, seq=-1, verdict="stalled", cause="data", step=STEPS,
                                message=f"rank 0 stalled {'in data' if in_loader else BETWEEN_STEPS_WORDS} after step {STEPS}",
                                t=t + 5.0),
                 schema.Verdict(run=RUN, rank=1, seq=-1, verdict="stalled", cause="sync", step=STEPS,
                                message=f"rank 1 stalled in sync after step {STEPS}", t=t + 5.0)]  # fmt: skip
    end = t + SAVE_S + UPLOAD_S
    msgs.append(schema.Event(run=RUN, rank=1, seq=nxt(1), name="exit", code=0, step=STEPS, t=end))
    if saves:
        msgs.append(schema.Event(run=RUN, rank=0, seq=nxt(0), name="checkpoint", step=STEPS, duration_s=SAVE_S,
                                 message=f"/ckpt/epoch=0-step={STEPS}.ckpt", t=end + 0.01))  # fmt: skip
    msgs.append(schema.Event(run=RUN, rank=0, seq=nxt(0), name="exit", code=0, step=STEPS, t=end + 0.01))
    msgs.append(schema.Event(run=RUN, rank=-1, seq=-1, name="hub", message="hub stopped: 1 messages, 0 lost, 0 rejected", t=end + 1.0))
    path = tmp_path / "run.jsonl"
    path.write_bytes(schema.encode_json_lines(msgs))
    return str(path)


def _stall_lines(text: str) -> list[str]:
    """The lines under the text report's ``stalls:``."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("stalls:"))
    out = []
    for line in lines[at + 1:]:
        if not line.startswith("  "):
            break
        out.append(line.strip())
    return out


def test_a_stall_a_rank_finished_in_is_a_pause_said_once_not_the_cause_of_a_hang(tmp_path):
    rep = build_report(_log(tmp_path, saves=False))
    text = render_text(rep)
    assert "hang" not in text.replace("not a hang", "").replace("no hang", ""), text
    # Rank 0's pause, and rank 1's wait in it, one line with its length: no "until it finished;
    # likely the cause of the hang" beside "rank 1 stalled in sync ... until it finished".
    assert _stall_lines(text) == [f"rank 0 stalled {BETWEEN_STEPS_WORDS} after step {STEPS} for 6.0 s until it finished; "
                         "a pause the others waited out (rank 1 in sync), not a hang"], text  # fmt: skip
    assert not [line for line in text.splitlines() if line.strip().startswith("rank 1 stalled")], text
    assert not any(s.get("ended_run") for s in rep["stalls"])
    assert "then stalled" not in text  # (the duration line's word of a run that ended in a stall)
    assert "cause of the hang" not in render_markdown(rep)


def test_pauses_right_after_a_ranks_own_saves_are_said_with_its_checkpoints(tmp_path):
    rep = build_report(_log(tmp_path))
    text, md = render_text(rep), render_markdown(rep)
    assert "cause of the hang" not in text and "cause of the hang" not in md

    # The checkpoints' time holds the 6 s after each save: it said "0.04 s in all" of 24 s.
    ck = rep["checkpoints"]
    assert [c["step"] for c in ck["saved"]] == [10, 20, 30, 40]
    assert [c["after_save_s"] for c in ck["saved"]] == pytest.approx([UPLOAD_S] * 4, abs=0.05)
    assert ck["after_saves_s"] == pytest.approx(4 * UPLOAD_S, abs=0.2) and ck["after_saves"] == 4
    (summary,) = [line for line in text.splitlines() if line.startswith("checkpoints ")]
    assert summary.split(None, 1)[1] == ("4 saved, 24.0 s in all: 0.04 s writing, 24.0 s in the script's own code right after "
                                         "each (e.g. an upload)"), summary  # fmt: skip

    # The holds after saves 10, 20, 30 name them, and the hub's stalls in two of them, once.
    (held,) = [line for line in text.splitlines() if line.startswith("held up:")]
    assert held.startswith("held up: rank 0 held the others 3 times, at steps 11, 21, 31 (every 10 steps), "), held
    assert held.endswith("each right after its checkpoint (at steps 10, 20, 30): in its own code after the save, e.g. an upload; "
                         "the hub's stall verdicts after steps 10, 30 were these pauses: no hang"), held  # fmt: skip
    assert rep["holds"][0]["after_checkpoints"]["steps"] == [10, 20, 30]

    # The pause after the last save (no step after it to hold): one line, the save named.
    assert _stall_lines(text) == [
        f"rank 0 stalled {BETWEEN_STEPS_WORDS} after step {STEPS} for 6.0 s until it finished, after its checkpoint at step {STEPS}: "
        "6.0 s in its own code after the save, e.g. an upload; a pause the others waited out (rank 1 in sync), not a hang"], text  # fmt: skip
    stalled = [line for line in text.splitlines() if " stalled " in line and not line.startswith("held up")]
    assert len(stalled) == 1, text
    assert [s["after_checkpoint"]["step"] for s in rep["stalls"] if s.get("after_checkpoint")] == [10, 30, 40]
    assert "after its checkpoint at step 40: 6.0 s in its own code after the save" in md
    (listed,) = [line.strip() for line in text.splitlines() if line.strip().startswith("4 saved at steps")]
    assert listed.endswith("; then 24.0 s in the saving rank's own code right after each (e.g. an upload), the longest 6.0 s (step 40)"), listed


def test_pauses_the_holds_say_leave_the_stalls_none(tmp_path):
    # No stall after the last save: the two the hub found are the holds', said there.
    text = render_text(build_report(_log(tmp_path, last_stalled=False)))
    assert "stalls: none but the pauses held up above, no hang" in text, text
    assert "hub's stall verdicts after steps 10, 30 were these pauses" in text


def test_a_pause_in_the_dataloader_after_a_save_is_not_the_saves(tmp_path):
    # Rank 0's DataLoader took the 6 s after each save (an epoch's first batch, its workers
    # starting anew after an epoch end's save): not the checkpoint's time.
    rep = build_report(_log(tmp_path, in_loader=True))
    text = render_text(rep)
    assert _stall_lines(text) == [f"rank 0 stalled in data after step {STEPS} for 6.0 s until it finished; "
                                  "a pause the others waited out (rank 1 in sync), not a hang"], text  # fmt: skip
    assert rep["holds"][0]["where"] == "dataloader" and "after_checkpoints" not in rep["holds"][0], rep["holds"]
    assert "after_saves_s" not in rep["checkpoints"] and not any(s.get("after_checkpoint") for s in rep["stalls"])
    assert "after its checkpoint" not in text and "right after" not in text, text
    assert "checkpoints        4 saved, 0.04 s in all," in text, text
