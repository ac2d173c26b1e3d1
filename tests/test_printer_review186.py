"""The headless progress of ``pardash launch --headless`` (review 186): the bar's step and
elapsed time whole at any width, ranks saving said so, a save with no path, the step a run
resumed from, and no samples/s before it is measured over two steps."""

from __future__ import annotations

import io
import re

import msgspec
import pytest
from rich.cells import cell_len

from pardash.telemetry import schema
from pardash.telemetry.printer import ProgressPrinter, event_line, progress_line
from pardash.telemetry.state import RunState

STEP_S = 0.256


class _Fed:
    """A Source whose state the test feeds a frame at a time, as a hub's frames would (the
    ranks' history, which the rates are taken over, is a point a frame)."""

    live = False

    def __init__(self) -> None:
        self.state = RunState(run_id="r")
        self.hseq = 0

    def poll(self) -> bool:
        return False

    def take(self, t: float, *msgs: schema.Message) -> None:
        for msg in msgs:
            self.hseq += 1
            msg.run, msg.hseq, msg.t = "r", self.hseq, t
        self.state.apply_frame(list(msgs), t)


def _run(config: dict, steps: int, *, t0: float = 1000.0) -> tuple[_Fed, float]:
    """Two ranks that said hello with ``config`` and took ``steps`` steps, a frame each."""
    src = _Fed()
    src.take(t0, *(schema.Hello(rank=rank, world_size=2, strategy="ddp", pid=100 + rank, config=config if rank == 0 else {})
                   for rank in (0, 1)))  # fmt: skip
    t = t0
    for step in range(1, steps + 1):
        t += STEP_S
        src.take(t, *(schema.Step(rank=rank, seq=step, step=step, samples=14, samples_total=14 * step,
                                  step_s=STEP_S + rank * 0.004) for rank in (0, 1)))  # fmt: skip
    return src, t


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _bar_line(src: _Fed, width: int, monkeypatch) -> str:
    """The bar's last drawing on a terminal ``width`` columns wide."""
    monkeypatch.setenv("COLUMNS", str(width))
    out = io.StringIO()
    printer = ProgressPrinter(src, out=out, bar=True, every_s=3600.0)
    printer.update(force=True)
    printer.close()
    lines = [line.rstrip() for line in re.split(r"[\r\n]", _ANSI.sub("", out.getvalue())) if line.strip()]
    return lines[-1]


@pytest.mark.parametrize("width", [50, 60, 80, 100, 120, 200])
@pytest.mark.parametrize("over", [False, True])
def test_the_bar_keeps_the_step_the_states_and_the_elapsed_time_whole_at_any_width(width, over, monkeypatch):
    # At 80 columns: "step  … ━━ 110 samples/s | step ms 256.4/260.1/263.8 min/med/max | 2
    # running 0:…", and at the end "s… 2,071 wall-clock samples/s at the end | ...": rich
    # squeezed the step and the elapsed time to "…", a 30-cell bar and the long stats whole.
    src, t = _run({"steps": 300}, 300 if over else 150)
    if over:
        src.take(t + 0.1, *(schema.Event(rank=rank, seq=301, name="exit", code=0) for rank in (0, 1)))
    line = _bar_line(src, width, monkeypatch)
    step = "step 300/300" if over else "step 150/300"
    states = "2 finished" if over else "2 running"
    assert line.startswith(step + " "), line
    assert re.search(rf"(^| ){states}( |$)", line), line
    assert re.search(r" \d+:\d\d:\d\d$", line), line
    assert cell_len(line) <= width, line
    if width >= (200 if over else 120):  # room for all: the stats whole, beside a bar
        assert "min/med/max" in line and "━" in line, line
    if width <= 60:  # the bar and the step times give way first
        assert "min/med/max" not in line, line


def test_ranks_saving_a_checkpoint_are_said_saving():
    # A save of the script's own checkpoint of 6 s printed "step 10 | ... | 2 running" all the
    # while, the step standing still for no reason shown.
    src, t = _run({"steps": 60}, 10)
    src.take(t + 1.0, schema.Heartbeat(rank=0, seq=11, step=10, phase="checkpoint"),
             schema.Heartbeat(rank=1, seq=11, step=10, phase="data"))  # fmt: skip
    assert "| 1 running, 1 saving" in progress_line(src.state, 12.0)
    src.take(t + 2.0, schema.Heartbeat(rank=1, seq=12, step=10, phase="checkpoint"))
    assert "| 2 saving" in progress_line(src.state, 13.0)
    # Its save over, rank 0's next step comes before its next heartbeat: running again.
    src.take(t + 6.0, schema.Step(rank=0, seq=13, step=11, samples=14, samples_total=154, step_s=5.0))
    assert "| 1 running, 1 saving" in progress_line(src.state, 17.0)


def test_a_checkpoint_saved_to_a_file_object_with_no_name_says_saved():
    # Its message is its path, '' for a file object with no name: "[checkpoint] rank 0 (3 ms)".
    one = schema.Event(rank=0, name="checkpoint", step=5, duration_s=0.003, message="")
    assert event_line(one) == "[checkpoint] rank 0 saved at step 5 (3 ms)"
    assert event_line(one, [0, 1], 0.004) == "[checkpoint] ranks 0-1 saved at step 5 (slowest 4 ms)"
    named = schema.Event(rank=0, name="checkpoint", step=5, duration_s=0.003, message="/ckpt/step5.pt")
    assert event_line(named) == "[checkpoint] rank 0 at step 5: /ckpt/step5.pt (3 ms)"


def _step_said(src: _Fed) -> str | None:
    m = re.match(r"\[ *[\d.]+s\] step (\d+/\d+)", progress_line(src.state, 1.0))
    return m.group(1) if m else None


def test_a_resumed_run_says_the_step_it_resumed_from_or_none():
    # "step 0/60 | 2 starting" of a --resume run that went on from step 20.
    src, t = _run({"steps": 60, "checkpoint_dir": "/c", "resume": True}, 0)
    assert _step_said(src) is None, progress_line(src.state, 1.0)
    src.take(t + 1.0, *(schema.Event(rank=rank, seq=1, name="resume", step=20, message="step 20 from /c/step20")
                        for rank in (0, 1)))  # fmt: skip
    assert _step_said(src) == "20/60", progress_line(src.state, 1.0)
    src.take(t + 1.3, schema.Step(rank=0, seq=2, step=21, samples=14, samples_total=14, step_s=STEP_S))
    assert _step_said(src) == "20/60"  # (rank 1 at 20 still)
    src.take(t + 1.4, schema.Step(rank=1, seq=2, step=21, samples=14, samples_total=14, step_s=STEP_S))
    assert _step_said(src) == "21/60"


def test_a_run_torchrun_restarted_says_the_step_it_resumed_from_not_the_last_before():
    # "step 29/60 | 2 starting" after torchrun's restart of a job that went on from its
    # checkpoint at step 20 (its first process had itself resumed from step 10).
    src, t = _run({"steps": 60, "checkpoint_dir": "/c"}, 0)
    src.take(t, *(schema.Event(rank=rank, seq=1, name="resume", step=10) for rank in (0, 1)))
    for step in range(11, 30):
        t += STEP_S
        src.take(t, *(schema.Step(rank=rank, seq=step - 9, step=step, samples=14, step_s=STEP_S) for rank in (0, 1)))
    assert _step_said(src) == "29/60"
    t += 1.0
    for rank in (0, 1):
        src.take(t, schema.Event(rank=rank, seq=-1, name="restart", code=1, message=f"rank {rank} restarted by torchrun"))
        src.take(t, schema.Hello(rank=rank, seq=0, world_size=2, strategy="ddp", pid=200 + rank, restart=1,
                                 config={"steps": 60, "checkpoint_dir": "/c"} if rank == 0 else {}))  # fmt: skip
    line = progress_line(src.state, 1.0)
    assert _step_said(src) is None and "2 starting" in line, line
    src.take(t + 1.0, *(schema.Event(rank=rank, seq=1, name="resume", step=20) for rank in (0, 1)))
    assert _step_said(src) == "20/60", progress_line(src.state, 1.0)


def test_no_samples_per_s_before_every_rank_took_two_steps():
    # "[0.2s] step 1 | 4,002 samples/s" of a job at 1,180: its first step's own time is not
    # the time between steps.
    src, t = _run({"steps": 60}, 0)
    src.take(t + 0.054, *(schema.Step(rank=rank, seq=1, step=1, samples=32, samples_total=32, step_s=0.016) for rank in (0, 1)))
    assert "samples/s" not in progress_line(src.state, 1.0), progress_line(src.state, 1.0)
    src.take(t + 0.108, schema.Step(rank=0, seq=2, step=2, samples=32, samples_total=64, step_s=0.054))
    assert "samples/s" not in progress_line(src.state, 1.0), progress_line(src.state, 1.0)  # (rank 1: one step)
    src.take(t + 0.110, schema.Step(rank=1, seq=2, step=2, samples=32, samples_total=64, step_s=0.054))
    assert "| 1,185 samples/s |" in progress_line(src.state, 1.0), progress_line(src.state, 1.0)


@pytest.mark.parametrize("width", [80, 160])
def test_a_run_of_no_known_length_has_no_bar(width, monkeypatch):
    # A script's run (its hello says no steps) drew rich's pulse: a bar that a still look sees
    # full, a run of 40 steps read as done at step 3. No bar, and the room is the stats'.
    src, _ = _run({}, 3)
    line = _bar_line(src, width, monkeypatch)
    assert line.startswith("step 3 "), line
    assert "━" not in line and "╸" not in line, line
    assert re.search(r" \d+:\d\d:\d\d$", line), line
    assert cell_len(line) <= width, line
    if width >= 160:
        assert "min/med/max" in line, line


def test_a_saves_files_in_one_folder_are_one_line_of_their_summed_time():
    # A Hugging Face Trainer's save at step 10, two ranks: rank 0's optimizer.pt and
    # rng_state_0.pth, rank 1's rng_state_1.pth, a line each (9 a save of 8 ranks), the folder
    # that is the checkpoint named by none. Rank 0 wrote its two back to back: 4 + 1 ms.
    from pardash.telemetry.printer import group_alike

    folder = "/out/checkpoint-10"
    saves = [schema.Event(rank=1, name="checkpoint", step=10, duration_s=0.004, message=f"{folder}/rng_state_1.pth"),
             schema.Event(rank=0, name="checkpoint", step=10, duration_s=0.004, message=f"{folder}/optimizer.pt"),
             schema.Event(rank=0, name="checkpoint", step=10, duration_s=0.001, message=f"{folder}/rng_state_0.pth"),
             schema.Event(rank=0, name="checkpoint", step=20, duration_s=0.002, message="/out/checkpoint-20/optimizer.pt")]  # fmt: skip
    assert [event_line(*entry) for entry in group_alike(saves)] == [
        f"[checkpoint] ranks 0-1 at step 10: {folder}/, 3 files (slowest 5 ms)",
        "[checkpoint] rank 0 at step 20: /out/checkpoint-20/optimizer.pt (2 ms)",
    ]
    # One rank's alone: its files' sum, not the first file's time.
    assert [event_line(*entry) for entry in group_alike(saves[1:3])] == [f"[checkpoint] rank 0 at step 10: {folder}/, 2 files (5 ms)"]
    # Files that said no time: none said, not "(slowest 0 ms)"; the script's own messages at one
    # step (pt.event("checkpoint", ...)) are no files, each its line.
    untimed = [msgspec.structs.replace(e, duration_s=None) for e in saves[:3]]
    assert [event_line(*entry) for entry in group_alike(untimed)] == [f"[checkpoint] ranks 0-1 at step 10: {folder}/, 3 files"]
    own = [schema.Event(rank=0, name="checkpoint", step=10, duration_s=1.5, message=text) for text in ("best model (acc 0.91)", "epoch 3 end")]
    assert [event_line(*entry) for entry in group_alike(own)] == [
        "[checkpoint] rank 0 at step 10: best model (acc 0.91) (1.50 s)", "[checkpoint] rank 0 at step 10: epoch 3 end (1.50 s)"]
    # Lightning's two files in the folder of every save: the first named, as the report does.
    ckpt = [schema.Event(rank=0, name="checkpoint", step=10, duration_s=0.002, message=f"/out/ckpt/{name}")
            for name in ("epoch=0-step=10.ckpt", "last.ckpt")]  # fmt: skip
    assert [event_line(*entry) for entry in group_alike(ckpt)] == [
        "[checkpoint] rank 0 at step 10: /out/ckpt/epoch=0-step=10.ckpt and 1 more file (4 ms)"]
