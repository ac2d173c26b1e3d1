"""Review 185: a followed replay's clock, the header at a replay's end, a rank saving its
checkpoint in the grid, a nameless checkpoint in the event log, DDP buckets in the memory bars."""

from __future__ import annotations

from tui_helpers import replay_app, strip_text, until, widget_text

from pardash.telemetry import client, schema
from pardash.telemetry.client import ReplaySource
from pardash.tui.run_clock import run_origin
from pardash.tui.widgets.run_header import RunHeader, summarize

T0 = 1.7e9


def _hub_started(path) -> None:
    path.write_bytes(schema.encode_json_lines([schema.Event(rank=-1, seq=-1, name="hub", message="hub started", t=T0, run="x")]))


def _ranks_run(path, at_s: float, steps: int) -> None:
    """The ranks say hello ``at_s`` after the hub started, then take ``steps`` steps of 0.1 s."""
    msgs = [schema.Hello(rank=r, world_size=2, t=T0 + at_s, run="x") for r in range(2)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0, samples=8, step_s=0.1, t=T0 + at_s + 0.1 * s, seq=s, run="x")
             for s in range(1, steps + 1) for r in range(2)]  # fmt: skip
    with open(path, "ab") as fh:
        fh.write(schema.encode_json_lines(msgs))


def test_a_replay_following_a_log_from_before_its_ranks_spoke_counts_from_their_first_word(tmp_path, monkeypatch):
    # Opened 12 s into a launch whose ranks had not said hello: its clock counted from the hub's
    # start ("elapsed 1m20s" at the end, where the same log replayed after read 1m00s; its events
    # "00:00 hub: hub started").
    clock = [1000.0]
    monkeypatch.setattr(client.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(client, "FOLLOW_QUIET_S", 1e9)
    log = tmp_path / "telemetry.jsonl"
    _hub_started(log)
    src = ReplaySource(str(log), speed=1)
    assert src.following
    for _ in range(30):  # the replay waits 3 s at the hub's record
        clock[0] += 0.1
        src.poll()
    _ranks_run(log, 20.0, 50)
    for _ in range(120):
        clock[0] += 0.1
        src.poll()
    fresh = ReplaySource(str(log))
    fresh.seek(fresh.duration_s)
    assert run_origin(src) == run_origin(fresh) == T0 + 20.0
    assert src.state.step == 50
    assert src.duration_s == fresh.duration_s and 0 < src.position_s <= src.duration_s
    assert summarize(src).elapsed_s == summarize(fresh).elapsed_s == 5.0
    # A seek back plays it from the ranks' first word, as the fresh replay does.
    src.seek(1.0)
    fresh.seek(1.0)
    assert (src.state.step, src.position_s) == (fresh.state.step, fresh.position_s)


async def test_the_grid_says_a_rank_saving_its_checkpoint_is_saving_until_its_next_step(tmp_path):
    # Its heartbeat's phase "checkpoint" for 6 s, its step standing still: the grid showed it
    # plain "running" (its detail said "now in checkpoint").
    from tui_helpers import grid_text

    from pardash.tui.app import make_app

    log = tmp_path / "telemetry.jsonl"
    msgs: list = [schema.Hello(rank=r, world_size=2, t=T0, run="x") for r in range(2)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0, samples=8, step_s=0.1, t=T0 + 0.1 * s, seq=s, run="x") for s in range(1, 6) for r in range(2)]
    msgs += [schema.Heartbeat(rank=0, step=5, phase="checkpoint", phase_s=s, t=T0 + 1 + s, seq=10 + s, run="x") for s in range(6)]
    msgs += [schema.Heartbeat(rank=1, step=5, phase="sync", phase_s=s, t=T0 + 1 + s, seq=10 + s, run="x") for s in range(6)]
    msgs += [schema.Step(rank=r, step=6, loss=1.0, samples=8, step_s=6.1, t=T0 + 7.5, seq=20, run="x") for r in range(2)]
    msgs.append(schema.Event(rank=-1, seq=-1, name="hub", message="hub stopped", t=T0 + 8, run="x"))
    log.write_bytes(schema.encode_json_lines(msgs))
    src = ReplaySource(str(log))
    src.seek(5.0)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()

        def status_of(rank: int) -> str:
            line = next(ln for ln in grid_text(app).splitlines() if ln.split()[:1] == [str(rank)])
            return line.split()[1]

        await until(pilot, lambda: status_of(0) == "saving")
        assert status_of(1) == "running"
        # and the header counts it so (it read "● 2 running" over the grid's "saving")
        header = app.screen.query_one(RunHeader)
        assert dict(header.summary.status_counts) == {"running": 1, "saving": 1}
        assert "● 1 running  ◎ 1 saving" in header.render().plain
        src.seek_soon(src.duration_s)  # its next step: the save is over
        await until(pilot, lambda: status_of(0) != "saving")
        assert status_of(0) == "running"
        assert dict(header.summary.status_counts) == {"running": 2}


async def test_a_narrow_memory_view_of_ddp_says_the_held_figure_with_its_buckets():
    # Too narrow for "+ 415 KiB buckets": "1.62 MiB of 1.62 MiB  full copy + buckets" beside the
    # grid's and the summary's held 2.03 MiB: the figure left the buckets out, its label said "+".
    import re

    from pardash.tui.widgets.memory_bars import MemoryBars
    from pardash.tui.widgets.memory_summary import MemorySummary

    app = replay_app("straggler8.jsonl")  # DDP over 8 ranks
    async with app.run_test(size=(66, 24)) as pilot:
        await pilot.pause()
        await pilot.press("m")
        await pilot.pause()
        summary = " ".join(widget_text(app.screen.query_one(MemorySummary)).split())
        per_rank = re.search(r"per rank (\S+ \S+) \+ (\S+ \S+) buckets = (\S+ \S+)", summary)
        assert per_rank, summary
        state, _buckets, held = per_rank.groups()
        bars = app.screen.query_one(MemoryBars)
        lines = [" ".join(strip_text(bars.render_line(y)).split()) for y in range(8)]
        for line in lines:
            assert line.endswith(f"{held} of {state} full copy + buckets"), line


async def test_the_header_at_80_columns_says_the_rate_of_a_job_a_stall_ended_is_at_its_end():
    # A stall ended the job (--inject-stall 1@50 --pg-timeout-s 20): "step 49   samples/s 0
    # elapsed 21s" at 80 columns, read as the rate now; "at the end (stalled)" was left out
    # where it would take a line's room, though no device's name was there to lose.
    from pardash.tui.app import make_app
    from pardash.tui.widgets.run_header import RunSummary

    ended = RunSummary(
        run_id="20261205-163906-ffb7", strategy="ddp", world_size=2, device="AMD EPYC 7B13 64-Core Processor", step=49,
        samples_per_s=0.0, samples_per_s_when="at the end (stalled)", elapsed_s=21, status_counts=(("exited", 2),),
    )  # fmt: skip
    app = make_app(replay_app("run4.jsonl").source)
    async with app.run_test(size=(80, 30)) as pilot:
        header = app.screen.query_one(RunHeader)
        header.summary = ended
        await pilot.pause()
        text = header._text(78).plain
        assert "samples/s 0 at end (stalled)" in text, text


def test_a_checkpoint_saved_to_a_nameless_file_object_says_no_path_after_a_colon():
    # A save to io.BytesIO() sends the checkpoint event no path (message ""): the events pane
    # says the save and its time, not "...: " with nothing after it.
    from pardash.tui.widgets.event_log import describe

    for message in ("", " "):
        one = schema.Event(rank=0, seq=1, name="checkpoint", message=message, step=5, duration_s=1.2, t=T0)
        assert describe(one)[0] == "rank 0 checkpoint at step 5 (1.20s)"
        assert describe(one, [0, 1], 1.3)[0] == "ranks 0-1 checkpoint at step 5 (slowest 1.30s)"
    named = schema.Event(rank=0, seq=1, name="checkpoint", message="/ck/step5.pt", step=5, duration_s=1.2, t=T0)
    assert describe(named)[0] == "rank 0 checkpoint at step 5 (1.20s): /ck/step5.pt"
