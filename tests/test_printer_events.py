"""The headless printer: its event lines (alike events of several ranks on one line, and none
held longer than the wait for its ranks' alike ones) and the figures of its progress lines."""

from __future__ import annotations

import io
import re

import msgspec
import pytest

from pardash.telemetry import frames
from pardash.telemetry import printer as printer_mod
from pardash.telemetry import schema
from pardash.telemetry.printer import GROUP_WAIT_S, ProgressPrinter
from pardash.telemetry.recorder import Recorder
from pardash.telemetry.state import RunState

TICK_S = 0.1
"""The printer's poll interval under ``pardash launch --headless`` (ProgressPrinter.follow)."""


class _Fed:
    """A Source whose state the test feeds message by message, as a hub's frames would."""

    live = False

    def __init__(self) -> None:
        self.state = RunState(run_id="r")
        self.hseq = 0

    def poll(self) -> bool:
        return False

    def take(self, msg: schema.Message, t: float) -> None:
        self.hseq += 1
        msg.run, msg.hseq, msg.t = "r", self.hseq, t
        self.state.apply(msg, t)


def test_events_one_rank_sends_each_step_come_out_a_wait_after_they_came_not_a_wait_after_each_other(monkeypatch):
    # Rank 0 alone evaluates after every step (rank0_eval_often.py: a step and a 36 ms
    # evaluation ten times a second, then dist.barrier()). Each eval waited its second for
    # rank 1's alike one only once the one before it was printed: one line a second, the
    # progress line of step 60 before the eval after step 10, and the straggler verdict held
    # behind the queue until the job ended.
    clock = [1000.0]
    monkeypatch.setattr(printer_mod.time, "monotonic", lambda: clock[0])
    src = _Fed()
    for rank in (0, 1):
        src.take(schema.Hello(rank=rank, world_size=2, strategy="ddp"), clock[0])
    out = io.StringIO()
    printer = ProgressPrinter(src, out=out, bar=False, every_s=3600.0)
    came: dict[str, float] = {}
    printed: dict[str, float] = {}
    order: list[str] = []

    def update() -> None:
        before = len(out.getvalue().splitlines())
        printer.update()
        for line in out.getvalue().splitlines()[before:]:
            line = re.sub(r" \((slowest )?(\d+\.\d+ s|\d+ ms)\)$", "", line)  # (the eval's duration)
            printed.setdefault(line, clock[0])
            order.append(line)

    for step in range(1, 101):
        clock[0] += TICK_S
        src.take(schema.Event(rank=0, name="eval", step=step, duration_s=0.036), clock[0])
        came[f"[eval] rank 0 after step {step}"] = clock[0]
        if step == 3:
            # ...and an eval both ranks make, rank 1's half a second after rank 0's: one line
            src.take(schema.Event(rank=0, name="eval", step=1000, duration_s=0.2), clock[0])
            came["[eval] ranks 0-1 after step 1000"] = clock[0]
        if step == 8:
            src.take(schema.Event(rank=1, name="eval", step=1000, duration_s=0.3), clock[0])
        if step == 50:
            src.take(schema.Verdict(rank=1, verdict="straggler", cause="data", cost_s=0.035, step=50,
                                    message="rank 1 is a straggler (data loading): the others wait 35 ms a step for it"), clock[0])
            came["[straggler] rank 1 is a straggler (data loading): the others wait 35 ms a step for it"] = clock[0]
        update()
    for _ in range(int(2 * GROUP_WAIT_S / TICK_S)):  # the job goes on without events
        clock[0] += TICK_S
        update()
    assert set(printed) == set(came), (sorted(set(came) - set(printed))[:5], sorted(set(printed) - set(came))[:5])
    late = {line: round(printed[line] - came[line], 2) for line in came if printed[line] - came[line] > GROUP_WAIT_S + TICK_S / 2}
    assert not late, late
    # in the order they came (none overtakes one still waiting), once each
    assert order == sorted(came, key=lambda line: (came[line], line.startswith("[straggler]"))), order


def test_the_step_and_self_times_are_the_ranks_recent_medians_not_their_last_steps():
    # The end line read "step ms min/med/max 15.4/15.7/16.1": each rank's last step alone, of a
    # run (s1_accum.py) whose ranks' last five steps took 16-18 ms and whose report said median
    # 17.7. Now each rank's median over its last five steps, as the grid shows it (the hub's,
    # of every step), then their min, median and max.
    from pardash.telemetry import frames
    from pardash.telemetry.client import FrameApplier
    from pardash.telemetry.hubcore import HubCore
    from pardash.telemetry.printer import progress_line, progress_stats

    walls = {0: (0.0180, 0.0175, 0.0185, 0.0180, 0.0154), 1: (0.0160, 0.0165, 0.0170, 0.0160, 0.0140)}
    selfs = {0: (0.002, 0.002, 0.002, 0.002, 0.0005), 1: (0.001, 0.001, 0.001, 0.001, 0.0005)}
    core = HubCore()
    for rank in (0, 1):
        core.replay(schema.Hello(run="r", rank=rank, seq=0, world_size=2, strategy="ddp", t=1000.0), 0.0)
    viewer, older = FrameApplier(), FrameApplier()  # (older: a hub before the medians, whose frames carry none)
    for i in range(5):
        for rank in (0, 1):
            core.replay(schema.Step(run="r", rank=rank, seq=i + 1, step=i + 1, samples=16, step_s=walls[rank][i],
                                    self_s=selfs[rank][i], t=1001.0 + i), 0.0)  # fmt: skip
        frame = frames.decode_frame(frames.encode(core.tick(0.0)))
        viewer.apply_frame(frame)
        older.apply_frame(frames.decode_frame(frames.encode(msgspec.structs.replace(frame, smooth={}))))
    assert "| step ms min/med/max 16.0/17.0/18.0 | self ms 1.0/1.5/2.0 |" in progress_line(viewer.state, 2.0)
    assert "step ms 16.0/17.0/18.0 min/med/max" in progress_stats(viewer.state)
    # without the hub's medians: each rank's last step, as before
    assert "| step ms min/med/max 14.0/14.7/15.4 | self ms 0.5/0.5/0.5 |" in progress_line(older.state, 2.0)


def _hub_stopped(src: _Fed, rec: Recorder, t: float) -> None:
    """What a hub's last frame carries as it stops (Hub.close): its closed recorder's path and
    error, and its last word, what became of the lines its disk never took, as a warning."""
    src.stats = frames.HubStats(log_path=str(rec.path), log_error=rec.error)
    src.take(schema.Event(rank=-1, seq=-1, name="warning", message=rec.last_word), t)


def test_lines_a_full_disk_never_took_are_said_lost_as_the_hub_stops_not_kept_until_it_can_write(tmp_path):
    # /dev/full refuses every write to the end: as the hub stopped, the printer said of the
    # lines it had just lost "...: lost: no place could take them; training goes on, the hub
    # keeps the newest lines in memory until it can write".
    rec = Recorder("/dev/full", spare_dir=tmp_path / "spare")
    for step in range(1, 6):
        rec.write(schema.Step(rank=0, step=step))
    rec.flush()
    src, out = _Fed(), io.StringIO()
    src.stats = frames.HubStats(log_path=str(rec.path), log_error=rec.error)
    printer = ProgressPrinter(src, out=out, bar=False, every_s=3600.0)
    printer.update()
    assert _not_progress(out) == [
        "warning: cannot write /dev/full: No space left on device; training goes on, the hub keeps the newest lines in memory until it can write"]
    rec.close()
    _hub_stopped(src, rec, 1000.0)
    printer.update(force=True)
    assert rec.last_word.startswith("log /dev/full: 5 lines of steps 1-5 lost: ")
    assert _not_progress(out)[1:] == [f"[warning] hub: {rec.last_word}"]  # once, as the hub said it


def test_a_log_gone_on_elsewhere_is_said_where_not_writable_again():
    # The hub's stats alone (no last word among its events, as from an older hub): the log's
    # error cleared and its path is another file's.
    src = _Fed()
    src.stats = frames.HubStats(log_path="/x/run.jsonl", log_error="cannot write /x/run.jsonl: No space left on device")
    out = io.StringIO()
    printer = ProgressPrinter(src, out=out, bar=False, every_s=3600.0)
    printer.update()
    src.stats = frames.HubStats(log_path="/runs/r/run.complete-7.jsonl")
    printer.update()
    assert out.getvalue().splitlines() == [
        "warning: cannot write /x/run.jsonl: No space left on device; training goes on, the hub keeps the newest lines in memory until it can write",
        "log /x/run.jsonl: continued in full at /runs/r/run.complete-7.jsonl (all it holds, then the lines kept in memory)",
    ]
    # ... and its lines lost as it stopped: said so, not kept until the disk takes them
    lost = "cannot write /x/run.jsonl: No space left on device; 9 lines of steps 3-5 lost: no place could take them (/tmp/x: No space left on device)"
    src.stats = frames.HubStats(log_path="/x/run.jsonl", log_error=lost)
    printer.update()
    assert out.getvalue().splitlines()[-1] == f"warning: {lost}"


def _not_progress(out: io.StringIO) -> list[str]:
    """The lines printed but the progress lines ("[   1.0s] step 5 | ...")."""
    return [line for line in out.getvalue().splitlines() if not re.match(r"\[ *[\d.]+s\] ", line)]



@pytest.mark.parametrize("joined", [True, False])
def test_a_viewer_that_joins_a_run_says_the_events_it_finds_are_the_runs_past(joined):
    # `pardash attach --headless` on a run going on printed its old straggler verdict, with no
    # time, as the first line: read as news. A launch's own printer finds nothing to call past.
    src = _Fed()
    src.take(schema.Hello(rank=0, world_size=2, strategy="ddp"), 1000.0)
    src.take(schema.Verdict(rank=1, verdict="straggler", cause="data", cost_s=0.035, step=50,
                            message="rank 1 is a straggler (data loading): the others wait 35 ms a step for it"), 1001.0)
    out = io.StringIO()
    printer = ProgressPrinter(src, out=out, bar=False, every_s=3600.0, joined=joined)
    printer.update(force=True)
    src.take(schema.Event(rank=0, name="checkpoint", step=60, duration_s=0.5, message="saved"), 1002.0)
    printer.update(force=True)
    lines = [line for line in out.getvalue().splitlines() if not line.startswith("[ ")]
    past = ["pardash: earlier in the run (before this viewer started):"] if joined else []
    assert lines == [*past, "[straggler] rank 1 is a straggler (data loading): the others wait 35 ms a step for it",
                     "[checkpoint] rank 0 at step 60: saved (0.50 s)"], out.getvalue()  # fmt: skip


def test_a_live_hub_that_refuses_the_viewer_after_taking_it_is_said_once(monkeypatch):
    # A headless attach whose key was revoked (and its hub restarted since) printed "the hub has
    # sent nothing for 5 s (stopped, overloaded or out of reach)" and went on as if the hub were
    # gone, where the TUI's header says the hub refuses it.
    clock = [1000.0]
    monkeypatch.setattr(printer_mod.time, "monotonic", lambda: clock[0])
    src = _Fed()
    src.live, src.synced, src.refused, src.last_frame_t = True, True, "", 1.0
    src.take(schema.Hello(rank=0, world_size=1, strategy="ddp"), clock[0])
    src.take(schema.Step(rank=0, step=1, step_s=0.1, loss=1.0), clock[0])
    out = io.StringIO()
    printer = ProgressPrinter(src, out=out, bar=False, every_s=3600.0)
    printer.update()
    src.synced, src.refused = False, "it does not admit this viewer's client key (copy client.key into ...)"
    for _ in range(100):  # 10 s with no frame
        clock[0] += TICK_S
        printer.update()
    lines = out.getvalue().splitlines()
    said = [line for line in lines if "refuses this viewer" in line]
    assert said == ["warning: the hub refuses this viewer now: it does not admit this viewer's client key (copy client.key "
                    "into ...); the figures below are from before, and training does not wait for it"], lines
    assert not any("has sent nothing" in line for line in lines), lines
    src.synced, src.refused, src.last_frame_t = True, "", 2.0  # its key admitted again, frames come
    clock[0] += TICK_S
    printer.update()
    assert out.getvalue().splitlines()[-1] == "hub: takes this viewer again"


def test_a_fast_evaluation_and_one_before_any_step_are_said_as_they_were():
    from pardash.trainer.evaluations import EVAL_CUT_SHORT

    # "[eval] ranks 0-1 after step 0 (slowest 0.00 s)": an evaluation before training, of 3 ms.
    src = _Fed()
    for rank in (0, 1):
        src.take(schema.Hello(rank=rank, world_size=2, strategy="ddp"), 1000.0)
    out = io.StringIO()
    printer = ProgressPrinter(src, out=out, bar=False, every_s=3600.0)
    for rank in (0, 1):
        src.take(schema.Event(rank=rank, name="eval", step=0, duration_s=0.003 + rank * 0.001), 1001.0)
    src.take(schema.Event(rank=0, name="eval", step=5, duration_s=1.25), 1002.0)
    for rank in (0, 1):
        src.take(schema.Event(rank=rank, name="checkpoint", step=5, duration_s=0.05, message="saved"), 1003.0)
    # One its rank's stop ended (Ctrl-C in nanoGPT's evaluation) read as one done.
    src.take(schema.Event(rank=0, name="eval", step=7, duration_s=0.8, message=EVAL_CUT_SHORT), 1004.0)
    printer.update(force=True)
    printer.close()
    lines = [line for line in out.getvalue().splitlines() if line.startswith("[") and not line.startswith("[ ")]
    assert lines == ["[eval] ranks 0-1 before the first step (slowest 4 ms)", "[eval] rank 0 after step 5 (1.25 s)",
                     "[checkpoint] ranks 0-1 at step 5: saved (slowest 50 ms)",
                     "[eval] rank 0 after step 7 (0.80 s): cut short: the rank ended in it"], out.getvalue()  # fmt: skip


def test_a_headless_attach_the_hub_refuses_now_ends_saying_so():
    # Its warning said the hub refuses this viewer, and its last line, 5 s on, blamed the
    # hub's liveness: "the hub has sent nothing for 5 s (stopped, or out of reach)".
    src = _Fed()
    src.live, src.synced, src.last_frame_t, src.info = True, False, 1.0, {}
    src.refused = "it does not admit this viewer's client key"
    src.take(schema.Hello(rank=0, world_size=1, strategy="ddp"), 1000.0)
    out = io.StringIO()
    line = printer_mod.follow_attached(ProgressPrinter(src, out=out, bar=False, every_s=3600.0), src, gone_s=0.2)
    assert line.startswith("pardash: stopped watching: the hub refuses this viewer now: it does not admit this viewer's client key"), line
    assert "sent nothing" not in line


def test_the_closing_line_comes_again_below_events_printed_after_it(monkeypatch):
    # A Lightning run's "[ 1.9s] step 20 | ... | 2 finished", then the step-10 checkpoint and
    # the step-20 evaluation, which had waited for their other rank's: the run's last line read
    # as said before them. Said again below them, once; not again with nothing between.
    clock = [1000.0]
    monkeypatch.setattr(printer_mod.time, "monotonic", lambda: clock[0])
    src = _Fed()
    for rank in (0, 1):
        src.take(schema.Hello(rank=rank, world_size=2, strategy="ddp"), 1000.0)
    out = io.StringIO()
    printer = ProgressPrinter(src, out=out, bar=False, every_s=1.0)
    for rank in (0, 1):
        src.take(schema.Step(rank=rank, seq=1, step=20, samples=4, samples_total=80, step_s=0.01), 1000.1)
    src.take(schema.Event(rank=0, name="checkpoint", step=10, duration_s=0.002, message="/ckpt/s10.ckpt"), 1000.1)
    for rank in (0, 1):
        src.take(schema.Event(rank=rank, name="exit", code=0, step=20), 1000.2)
    clock[0] += 2.0
    printer.update()
    clock[0] += 2.0
    printer.update(force=True)
    printer.update(force=True)
    lines = [re.sub(r"^\[ *[\d.]+s\] ", "", line) for line in out.getvalue().splitlines()]
    assert [line.split(" |")[0] for line in lines] == ["step 20", "[checkpoint] rank 0 at step 10: /ckpt/s10.ckpt (2 ms)", "step 20"], lines


def test_a_stopped_ranks_end_is_said_as_a_stop_not_an_exit():
    # A Ctrl-C at a headless launch printed "[exit] ranks 0-1 exited with code -15" and
    # "2 exited", a failure's words, as the report and Prometheus say "stopped".
    from pardash.telemetry.printer import event_line, group_alike, states_text
    from pardash.telemetry.state import RunState

    st = RunState()
    msgs = [schema.Hello(run="r", rank=r, seq=0, world_size=3, strategy="ddp", t=1.0) for r in range(3)]
    msgs += [schema.Event(run="r", rank=r, seq=-1, name="exit", code=-15, message="stopped by you", t=2.0) for r in (0, 1)]
    msgs.append(schema.Event(run="r", rank=2, seq=5, name="exit", code=1, t=2.0))
    for m in msgs:
        st.apply(m, 0.0)
    assert sorted(event_line(*e) for e in group_alike(msgs[3:])) == [
        "[exit] rank 2 exited with code 1",
        "[exit] ranks 0-1 stopped by you (SIGTERM)",
    ]
    assert states_text(st) == "1 exited, 2 stopped"


class _CtrlCOnSecondWrite(io.StringIO):
    """A terminal pipe whose writer gets its Ctrl-C right after its first write call."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        if self.writes == 2:
            raise KeyboardInterrupt
        return super().write(text)


def test_a_ctrl_c_as_a_progress_line_is_printed_never_leaves_it_open():
    # print() writes a line, then its newline: a Ctrl-C between the two left the line open, and
    # the launch's last word went on the end of it ("... likely waiting for rank 2pardash:
    # stopped by you as it hung after step 4 ..."), where a test matched the last line.
    src = _Fed()
    src.take(schema.Hello(rank=0, world_size=1, strategy="single"), 0.0)
    out = _CtrlCOnSecondWrite()
    printer = ProgressPrinter(src, out=out, bar=False, every_s=3600.0)
    with pytest.raises(KeyboardInterrupt):
        printer._print("[   6.4s] step 4 | 1 stalled")
        printer._print("[   6.9s] step 4 | 1 stalled")
    assert out.getvalue() == "[   6.4s] step 4 | 1 stalled\n"
