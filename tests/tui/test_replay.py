"""The dashboard over recorded runs: replay controls, the header's note, the grid's forms."""

from __future__ import annotations

import argparse
import os
import re

import pytest

from tui_helpers import DATA, grid_text, replay_app, replay_at_end, widget_text

from pardash.telemetry.client import ReplaySource
from pardash.tui.app import make_app
from pardash.tui.grid_layout import LEVEL_GLYPHS
from pardash.tui.widgets.rank_grid import RankGrid
from pardash.tui.widgets.run_header import RunHeader

SIZE = (120, 40)


def header(app) -> str:
    return widget_text(app.screen.query_one(RunHeader))


async def test_replay_controls_pause_speed_and_seek():
    src = ReplaySource(str(DATA / "run4.jsonl"))
    src.seek(20.0)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "replay run4.jsonl 20s / 30s · 1× · paused" in header(app)
        await pilot.press("plus")
        await pilot.press("plus")
        assert src.speed == 4.0 and "4×" in header(app)
        await pilot.press("minus")
        assert src.speed == 2.0
        await pilot.press("left_square_bracket")
        await pilot.pause()
        assert src.position_s == 10.0 and "replay run4.jsonl 10s / 30s" in header(app)
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert src.position_s == 20.0
        assert app.check_action("play", ()) and not app.check_action("pause", ())  # the key bar: "space Play"
        await pilot.press("space")
        assert not src.paused and "playing" in header(app)
        assert app.check_action("pause", ()) and not app.check_action("play", ())
        for _ in range(200):
            await pilot.pause(0.05)
            if src.position_s > 20.5:
                break
        assert src.position_s > 20.5
        await pilot.press("space")
        assert src.paused


@pytest.mark.parametrize("given, key", [(100.0, "plus"), (0.1, "minus")])
async def test_a_speed_past_the_keys_steps_is_not_turned_back_by_them(given, key):
    # `--speed 100` then + played at 64x; `--speed 0.1` then - at 0.25x: each key went the other way.
    src = ReplaySource(str(DATA / "run4.jsonl"), speed=given)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(key)
        await pilot.pause()
        assert src.speed == given
        await pilot.press("minus" if key == "plus" else "plus")
        assert src.speed == (64.0 if key == "plus" else 0.25)


async def test_live_only_keys_are_not_replay_keys():
    app = replay_app("run4.jsonl")
    async with app.run_test(size=SIZE):
        # A replay's space is one of Pause (playing) or Play (paused): the key bar says which.
        assert [a for a in ("pause", "play") if app.check_action(a, ())] == ["play" if app.source.paused else "pause"]


async def test_the_note_is_always_in_the_header_even_at_80_columns():
    app = replay_app("dp1.jsonl")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = header(app)
        assert "dp runs one process (torch.nn.DataParallel over 2 GPUs)" in text
        assert "no per-GPU ranks" in text  # wrapped, not cut
        assert "□ 1 finished" in text


async def test_c_switches_between_cells_and_heat_map_and_back():
    app = replay_app("run4.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        grid = app.screen.query_one(RankGrid)
        assert not grid.heat and "running" in grid_text(app)
        await pilot.press("c")
        assert grid.heat and re.search(f"[{''.join(LEVEL_GLYPHS)}]{{2}}", grid_text(app))
        await pilot.press("c")
        assert not grid.heat


async def test_1024_ranks_become_a_heat_map_and_arrows_still_select():
    app = replay_app("run1024.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        grid = app.screen.query_one(RankGrid)
        assert grid.heat
        text = grid_text(app)
        assert "▲" in text and "×" in text
        # Every rank on screen: rows of blocks labelled by their first rank, across nodes (the
        # packed "n12 ■■■■■■■■" segments were 32 lines here, nodes 116-127 scrolled off).
        lines = grid.layout.lines
        assert len(lines) + 1 <= grid.scrollable_content_region.height and sorted(grid.layout.where) == list(range(1024))
        per_row = len(lines[0].cells)
        assert [line.labels[0][1].strip() for line in lines[:2]] == ["0", str(per_row)]
        await pilot.press("down")
        assert grid.cursor_rank == per_row  # the same place one line down
        await pilot.press("right")
        assert grid.cursor_rank == per_row + 1
        await pilot.press("end")
        assert grid.cursor_rank == 1023


async def test_sort_by_self_time_puts_the_straggler_first_and_filter_keeps_it():
    app = replay_app("straggler8.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        grid = app.screen.query_one(RankGrid)
        await pilot.press("s", "s")
        assert grid.sort_key == "self_time"
        assert grid.shown_ranks[:4] == [5, 4, 6, 7]  # rank 5's node leads, rank 5 first
        await pilot.press("f")
        assert grid.shown_ranks == [5]


async def test_palette_offers_the_dashboard_actions():
    app = replay_app("run4.jsonl")
    async with app.run_test(size=SIZE):
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Grid: cells or heat map" in titles
        assert "Grid: sort by self time (stragglers first)" in titles
        assert "Replay: pause / resume" in titles
        assert "Theme" in titles


async def test_detail_moves_to_the_next_and_previous_rank_and_back():
    from pardash.tui.screens.rank_detail import RankDetailScreen

    app = replay_app("straggler8.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, RankDetailScreen) and app.screen.rank == 0
        await pilot.press("n", "n")
        await pilot.pause()
        assert app.screen.rank == 2
        await pilot.press("p", "p", "p")
        await pilot.pause()
        assert app.screen.rank == 7  # wraps around
        await pilot.press("escape")
        assert not isinstance(app.screen, RankDetailScreen)


def test_a_finished_run_shows_the_rate_it_ran_at():
    # While ranks work the header shows their rate now; once every rank is done it shows what
    # they ran at over their last steps, marked "at the end", rather than nothing.
    from pardash.tui.widgets.run_header import summarize

    from pardash.telemetry import schema
    from pardash.telemetry.logreader import load_log

    log = DATA.parent.parent / "data" / "real_ddp2.jsonl"  # a real DDP run's log
    msgs, _ = load_log(log)
    steps = [m.t for m in msgs if isinstance(m, schema.Step)]
    src = ReplaySource(str(log))
    src.seek((steps[0] + steps[-1]) / 2 - src.t_start)  # half-way through its steps
    mid = summarize(src)
    assert mid.samples_per_s and not mid.samples_per_s_when
    src.seek(src.duration_s + 1)
    end = summarize(src)
    assert all(r.finished for r in src.state.ranks.values())
    assert end.samples_per_s_when == "at the end" and 0.5 * mid.samples_per_s < end.samples_per_s < 2 * mid.samples_per_s


async def test_seeking_back_to_the_start_shows_the_log_there_and_forward_fills_the_grid_again():
    # The grid kept the places of the ranks a seek back to the log's start had removed, and
    # drew them from rows that were no longer there (a crash, exit code 0). And the start
    # itself showed nothing of the run: "? · 0 ranks", no run id, "waiting for ranks to say
    # hello", paused so until played on, where the log holds rank 0's hello at its first
    # instant (the replay's 0 is its ranks' first record).
    src = ReplaySource(str(DATA / "run4.jsonl"))
    src.seek(20.0)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert len(src.state.ranks) == 4
        before = grid_text(app)
        await pilot.press("left_square_bracket", "left_square_bracket")
        await pilot.pause()
        assert src.position_s == 0.0 and sorted(src.state.ranks) == [0]
        assert src.state.run_id == "fsdp-gpt2-4" and "fsdp-gpt2-4" in widget_text(app.screen.query_one(RunHeader))
        assert app.is_running and grid_text(app) != before
        await pilot.press("right_square_bracket", "right_square_bracket")
        await pilot.pause()
        assert src.position_s == 20.0 and len(src.state.ranks) == 4
        assert grid_text(app) == before


def test_a_slow_viewer_slows_the_replay_and_the_clock_stops_at_the_end():
    # `replay --speed 50` showed "19s / 11s" and skipped the run's start: the viewer's start-up
    # time, times the speed, was added to the clock at the first poll.
    import time

    src = ReplaySource(str(DATA / "run4.jsonl"), speed=4.0)
    src._wall = time.monotonic() - 5.0  # the viewer was busy for 5 s before its first poll
    assert src.poll()
    assert 0 < src.position_s <= 0.5 * 4.0 + 0.1  # half a second of replay at most, times 4
    src.speed = 1000.0
    for _ in range(3):
        src._wall = time.monotonic() - 1.0
        src.poll()
    assert src.position_s == src.duration_s and src.done


def test_a_replay_ends_on_the_same_figures_at_any_speed():
    # Frames were cut on the viewer's clock: at 64x a frame held 6.4 s of the log, one history
    # point, and the grid's wall and self times (medians of the last points) and samples/s came
    # out differently at each speed, and unlike the live TUI's.
    from pardash.tui.model import RowBuilder

    def end_state(src: ReplaySource, hops: float):
        pos = 0.0
        while pos < src.duration_s:
            pos = min(pos + hops, src.duration_s)
            src.seek(pos)
        assert src.done
        rows = [(r.rank, r.step_s, r.self_s, r.loss) for r in RowBuilder().build(src.state)]
        histories = {q.rank: q.history.columns_bytes() for q in src.state.ranks.values()}
        return rows, histories, src.state.trend.points()

    one = end_state(ReplaySource(str(DATA / "straggler8.jsonl")), 0.1)
    assert len(one[0]) == 8 and all(r[1] for r in one[0])
    for hops in (0.37, 6.4, 1e9):
        assert end_state(ReplaySource(str(DATA / "straggler8.jsonl"), speed=64), hops) == one, hops


def _growing_log(tmp_path, monkeypatch):
    """A log being written, on a replay clock the test moves: (clock, log, write(msgs, tail)),
    ``tail`` the start of a line still being written."""
    from pardash.telemetry import client, schema

    clock = [1000.0]
    monkeypatch.setattr(client.time, "monotonic", lambda: clock[0])
    log = tmp_path / "telemetry.jsonl"

    def write(msgs, tail: bytes = b"") -> None:
        with open(log, "ab") as fh:
            fh.write(schema.encode_json_lines(msgs) + tail)

    return clock, log, write


def test_a_replay_of_a_log_being_written_follows_it(tmp_path, monkeypatch):
    # Replaying a running job's log stopped at what the file held when it opened, and said
    # "ended" while the job ran on.
    from pardash.telemetry import schema

    clock, log, write = _growing_log(tmp_path, monkeypatch)
    t0 = 1.7e9
    write([schema.Hello(rank=r, world_size=2, t=t0, run="x") for r in range(2)])
    torn = schema.encode_json_lines([schema.Step(rank=0, step=4, loss=1.0, t=t0 + 4, seq=4, run="x")])
    write([schema.Step(rank=r, step=s, loss=1.0, t=t0 + s, seq=s, run="x") for s in range(1, 4) for r in range(2)], torn[:9])
    src = ReplaySource(str(log), speed=8)
    assert src.following and src.read_stats.skipped_total == 0  # the line being written waits
    src.seek(src.duration_s)
    assert not src.done and src.state.ranks[1].step.step == 3

    with open(log, "ab") as fh:
        fh.write(torn[9:])
    write([schema.Step(rank=1, step=4, loss=1.0, t=t0 + 4, seq=4, run="x")])
    write([schema.Step(rank=r, step=5, loss=1.0, t=t0 + 5, seq=5, run="x") for r in range(2)])
    for _ in range(10):
        clock[0] += 0.2
        src.poll()
    assert [src.state.ranks[r].step.step for r in (0, 1)] == [5, 5] and src.duration_s == 5.0 and not src.done
    assert src.read_stats.skipped_total == 0 and src.state.ranks[0].steps_seen == 5
    # The hub's last record ends it.
    write([schema.Event(rank=-1, name="hub", message="hub stopped: 12 messages, 0 lost, 1 rejected", t=t0 + 6)])
    for _ in range(10):
        clock[0] += 0.2
        src.poll()
    assert src.done and not src.following


def test_a_finished_log_is_not_followed_and_its_torn_line_counted(tmp_path):
    from pardash.telemetry import schema

    log = tmp_path / "telemetry.jsonl"
    log.write_bytes(schema.encode_json_lines([schema.Hello(rank=0, world_size=1, t=1.7e9, run="x")]) + b'{"kind":"st')
    old = 1.6e9
    os.utime(log, (old, old))  # nothing written for years
    src = ReplaySource(str(log))
    assert not src.following and src.read_stats.skipped["truncated"] == 1
    # The header says it as the log's skipped line, not as a reject (hostile input the hub
    # refused), which it read as before.
    from pardash.tui.widgets.run_header import summarize

    src.seek(src.duration_s)
    s = summarize(src)
    assert (s.rejected, s.skipped_lines) == (0, 1)


def test_a_record_with_a_wild_clock_costs_no_empty_frames(tmp_path):
    # One record stamped t=1.0 (a clock unset at boot) put the log's start in 1970: seeking to
    # its end made 1.8e10 empty frames, forever.
    from pardash.telemetry import schema

    log = tmp_path / "telemetry.jsonl"
    msgs = [schema.Hello(rank=0, world_size=1, t=1.0, run="x")]
    msgs += [schema.Step(rank=0, step=s, loss=1.0, t=1.7e9 + s, seq=s, run="x") for s in range(1, 30)]
    log.write_bytes(schema.encode_json_lines(msgs))
    os.utime(log, (1.6e9, 1.6e9))
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    assert src.done and src.state.ranks[0].step.step == 29
    assert src.core.fseq < 400  # frames made: about one per 0.1 s of the log that holds records


def test_a_rank_whose_clock_is_decades_off_plays_where_the_hub_took_its_records(tmp_path):
    # Rank 1's node at 1970 (its clock never set): the replay of a half-second run was 57 years
    # long, and at 5 s into it no rank had appeared. Its records now play in the log's order,
    # the run is as long as rank 0 and the hub say, and the replay says why once.
    from pardash.telemetry import schema
    from pardash.telemetry.logreader import load_log

    source = DATA.parent.parent / "data" / "real_ddp2.jsonl"
    log = tmp_path / "off.jsonl"
    msgs, _ = load_log(source)
    for m in msgs:
        if m.rank == 1 and m.seq >= 0:
            m.t -= 1796062898.0
    log.write_bytes(schema.encode_json_lines(msgs))
    want, src = ReplaySource(str(source)), ReplaySource(str(log))
    rank0 = [m.t for m in msgs if m.rank == 0]
    assert src.duration_s == max(rank0) - min(rank0) and 0 < src.duration_s <= want.duration_s
    src.seek(src.duration_s)
    want.seek(want.duration_s)
    assert src.done and {r: x.step.step for r, x in src.state.ranks.items()} == {r: x.step.step for r, x in want.state.ranks.items()}
    said = [e.message for e in src.state.events if e.name == "warning"]
    assert said == ["rank 1's clock is 57 years behind the hub's; its times are not used for the run's span; set its node's clock (NTP)"]
    st = src.state
    assert 0 < st.t_last_rank - st.t0 < 60  # the header's elapsed time


def test_a_followed_log_says_how_long_it_has_grown_wherever_the_replay_is(tmp_path, monkeypatch):
    # The total stayed at what the log held when the replay opened until the replay reached it.
    from pardash.telemetry import client, schema

    clock = [1000.0]
    monkeypatch.setattr(client.time, "monotonic", lambda: clock[0])
    log = tmp_path / "telemetry.jsonl"
    t0 = 1.7e9
    log.write_bytes(schema.encode_json_lines([schema.Step(rank=0, step=s, loss=1.0, t=t0 + s, seq=s, run="x") for s in range(1, 4)]))
    src = ReplaySource(str(log))
    assert src.following and src.duration_s == 2.0
    with open(log, "ab") as fh:
        fh.write(schema.encode_json_lines([schema.Step(rank=0, step=4, loss=1.0, t=t0 + 30, seq=4, run="x")]))
    clock[0] += 0.2
    src.poll()
    assert src.duration_s == 29.0 and src.position_s < 1.0


def test_a_tui_left_open_after_the_job_adds_no_dead_time_to_its_replay(tmp_path):
    # The hub's "hub stopped" is written when the launcher ends, after its TUI closed: a job
    # of 17 s replayed as 44 s, the last 27 of them nothing.
    from pardash.telemetry import schema

    log = tmp_path / "telemetry.jsonl"
    t0 = 1.7e9
    msgs: list = [schema.Event(rank=-1, name="hub", message="hub started", t=t0 - 1)]
    msgs += [schema.Step(rank=0, step=s, loss=1.0, t=t0 + s, seq=s, run="x") for s in range(1, 18)]
    msgs += [schema.Event(rank=-1, name="hub", message="hub stopped: 17 messages, 0 lost, 0 rejected", t=t0 + 44)]
    log.write_bytes(schema.encode_json_lines(msgs))
    src = ReplaySource(str(log))
    assert src.duration_s == 16.0 and not src.following  # steps 1 to 17 (the hub's start is played with step 1)
    src.seek(src.duration_s)
    assert src.done and "hub stopped" in src.state.events[-1].message


async def test_a_replay_of_a_log_no_rank_ever_reported_to_says_so_not_waiting_for_ranks(tmp_path):
    # A hub started and stopped with no rank connecting: its replay read "waiting for ranks…"
    # to its end, where report and export say no rank ever reported (the same words here).
    from pardash.telemetry import schema
    from pardash.tui.widgets.alert_list import AlertList

    log = tmp_path / "hub.jsonl"
    log.write_bytes(schema.encode_json_lines([
        schema.Event(rank=-1, name="hub", message="hub started", t=1.7e9, run="x"),
        schema.Event(rank=-1, name="hub", message="hub stopped: 0 messages, 0 lost, 0 rejected", t=1.7e9 + 4, run="x"),
    ]))  # fmt: skip
    app = make_app(ReplaySource(str(log)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        said = widget_text(app.screen.query_one(AlertList))
        assert said == "⚠ no rank ever reported to its hub: the log holds only the hub's own records (did the ranks start?)", said
    # A run's replay seeked back to its start (rank 0's hello alone) says no such thing.
    src = ReplaySource(str(DATA / "run4.jsonl"))
    src.seek(10.0)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("left_square_bracket")
        await pilot.pause()
        assert src.position_s == 0.0 and not src.no_rank_reported
        assert "no rank ever reported" not in widget_text(app.screen.query_one(AlertList))


def test_a_replay_starts_with_the_ranks_not_the_hub_waiting_for_them(tmp_path):
    # The hub starts before the job's ranks (torch's import, a rendezvous, a queue): a replay
    # showed "0 ranks, step 0" for that long, 5 s of a 28 s run on a laptop, minutes on a
    # cluster. Its notes from then are played with the ranks' first frame.
    from pardash.telemetry import schema

    log = tmp_path / "telemetry.jsonl"
    t0 = 1.7e9
    msgs: list = [schema.Event(rank=-1, name="hub", message="hub started", t=t0 - 30)]
    msgs += [schema.Hello(rank=r, world_size=2, t=t0 + r / 10, run="x", seq=0) for r in (0, 1)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0, t=t0 + s, seq=s, run="x") for s in range(1, 11) for r in (0, 1)]
    msgs += [schema.Event(rank=-1, name="hub", message="hub stopped: 22 messages, 0 lost, 0 rejected", t=t0 + 11)]
    log.write_bytes(schema.encode_json_lines(msgs))
    src = ReplaySource(str(log))
    assert src.duration_s == 10.0
    src.seek(1.05)
    assert sorted(src.state.ranks) == [0, 1] and src.state.step == 1
    assert src.state.events[0].message == "hub started"


async def test_figures_at_the_floats_limits_never_crash_the_dashboard(tmp_path):
    # A broken or hostile rank's step time of 1e300 s or loss of +-1.7e308 (finite, so JSON
    # holds them) killed every viewer, live and in replay: an overflow formatting the step
    # time, a NaN row in the loss chart. The hub refuses such step times now, but a log is
    # replayed as recorded: the views take any float and the chart skips what it cannot scale.
    from pardash.telemetry import schema
    from pardash.tui.widgets.history_chart import HistoryChart

    log = tmp_path / "telemetry.jsonl"
    msgs = [schema.Hello(rank=r, world_size=2, t=1.7e9, run="x", seq=0) for r in (0, 1)]
    for s in range(1, 20):
        for r in (0, 1):
            loss = {(1, 5): 1.7e308, (1, 6): -1.7e308}.get((r, s), 1.0 / s)
            msgs.append(schema.Step(rank=r, step=s, loss=loss, step_s=1e300 if (r, s) == (1, 7) else 0.1, t=1.7e9 + s, seq=s, run="x"))
    log.write_bytes(schema.encode_json_lines(msgs))
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        grid = grid_text(app)
        assert "   0 " in grid and "   1 " in grid
        chart = app.screen.query_one(HistoryChart)
        assert chart.size.height > 0
        await pilot.press("enter")  # the rank's detail, with its own charts
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()


def test_a_replay_can_begin_anywhere_in_the_run_or_at_its_end(tmp_path):
    # `[` and `]` move 10 s a time and `+` tops out at 64x: the end of a run of hours was
    # hundreds of key presses, or minutes of watching, away.
    import math

    from pardash.telemetry import schema
    from pardash.telemetry.cliargs import replay_position

    log = tmp_path / "telemetry.jsonl"
    t0 = 1.7e9
    msgs: list = [schema.Hello(rank=r, world_size=2, t=t0, run="x", seq=0) for r in (0, 1)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0 / s, t=t0 + 60 * s, seq=s, run="x") for s in range(1, 121) for r in (0, 1)]
    msgs += [schema.Event(rank=r, name="exit", code=0, step=120, t=t0 + 7201, run="x", seq=121) for r in (0, 1)]
    log.write_bytes(schema.encode_json_lines(msgs))
    os.utime(log, (1.6e9, 1.6e9))  # a finished log, not one being written
    assert [replay_position(w) for w in ("90", "1:30", "1:02:03", "end", "75:00")] == [90.0, 90.0, 3723.0, math.inf, 4500.0]
    for wrong in ("9:99", "1:60:00", "1:02:60"):  # 9:99 was taken as 11:39
        with pytest.raises(argparse.ArgumentTypeError, match="go up to 59"):
            replay_position(wrong)
    at = ReplaySource(str(log), start_s=replay_position("1:00:30"))
    assert at.position_s == 3630.0 and at.state.step == 60 and not at.done
    end = ReplaySource(str(log), start_s=replay_position("end"))
    assert end.done and end.state.step == 120 and all(r.finished for r in end.state.ranks.values())
    # A step the report or a warning names ("loss is nan at step 77"): it had to be found by
    # time, by hand, pausing and seeking (review 306).
    assert [replay_position(w) for w in ("step:77", "step77", "STEP:0")] == [77, 77, 0]
    for wrong in ("step:", "step:-3", "step:1.5", "steps"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a step"):
            replay_position(wrong)
    at = ReplaySource(str(log), start_s=replay_position("step:77"))
    assert at.state.step == 77 and 77 * 60 <= at.position_s <= 77 * 60 + 0.1 and at.start_step_past is None and not at.done
    # Steps closer than the replay's frames (0.1 s of the run): the step itself is shown, not
    # the frame before it, five steps short at 50 steps a second.
    fast = tmp_path / "fast.jsonl"
    msgs = [schema.Hello(rank=r, world_size=2, t=t0, run="x", seq=0) for r in (0, 1)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0, t=t0 + 0.02 * s, seq=s, run="x") for s in range(1, 101) for r in (0, 1)]
    msgs += [schema.Event(rank=r, name="exit", code=0, step=100, t=t0 + 2.01, run="x", seq=101) for r in (0, 1)]
    fast.write_bytes(schema.encode_json_lines(msgs))
    os.utime(fast, (1.6e9, 1.6e9))
    at = ReplaySource(str(fast), start_s=replay_position("step:53"))
    assert 53 <= at.state.step <= 59, at.state.step
    # A rank that reaches it later (its NaN warning said first: it opened at step 119 under the
    # alert of step 120, review 313): every rank is at the step.
    late = tmp_path / "late.jsonl"
    msgs = [schema.Hello(rank=r, world_size=2, t=t0, run="x", seq=0) for r in (0, 1)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0, t=t0 + 0.02 * s + 0.5 * r, seq=s, run="x") for s in range(1, 101) for r in (0, 1)]
    msgs.sort(key=lambda m: m.t)
    late.write_bytes(schema.encode_json_lines(msgs))
    os.utime(late, (1.6e9, 1.6e9))
    at = ReplaySource(str(late), start_s=replay_position("step:53"))
    assert min(r.step.step for r in at.state.ranks.values()) >= 53, {q: r.step.step for q, r in at.state.ranks.items()}
    past = ReplaySource(str(log), start_s=replay_position("step:500"))
    assert past.done and past.start_step_past == 120


def test_a_replay_of_a_log_holding_two_runs_says_so(tmp_path):
    # A log appended to by hand: report and export warn that it mixes two runs; its replay
    # played them as one, under the first's run id, without a word.
    from pardash.tui.widgets.run_header import summarize

    both = tmp_path / "both.jsonl"
    both.write_bytes((DATA.parent.parent / "data" / "real_ddp2.jsonl").read_bytes() + (DATA.parent.parent / "data" / "real_fsdp2.jsonl").read_bytes())
    os.utime(both, (1.6e9, 1.6e9))
    src = ReplaySource(str(both), start_s=float("inf"))
    assert len(src.runs) == 2
    assert f"this log holds 2 runs ({src.runs[0]}, {src.runs[1]}): they play as one" in summarize(src).note
    one = ReplaySource(str(DATA.parent.parent / "data" / "real_ddp2.jsonl"), start_s=float("inf"))
    assert "runs" not in summarize(one).note


def _long_log(path, steps: int, ranks: int = 2):
    """A finished log of ``ranks`` ranks taking ``steps`` steps of 0.1 s, each with its memory."""
    from pardash.telemetry import schema

    t0 = 1.7e9
    mem = schema.Mem(params_bytes=1 << 20, grads_bytes=1 << 20, optim_bytes=2 << 20, cuda_allocated_bytes=3 << 30)
    msgs: list = [schema.Hello(rank=r, world_size=ranks, t=t0, run="x", seq=0) for r in range(ranks)]
    msgs += [
        schema.Step(rank=r, step=s, loss=1.0 / s, step_s=0.1, data_s=0.01, forward_s=0.03, backward_s=0.05, t=t0 + s / 10, seq=s, run="x", mem=mem)
        for s in range(1, steps + 1)
        for r in range(ranks)
    ]
    msgs += [schema.Event(rank=r, name="exit", code=0, step=steps, t=t0 + steps / 10 + 0.05, run="x", seq=steps + 1) for r in range(ranks)]
    path.write_bytes(schema.encode_json_lines(msgs))
    os.utime(path, (1.6e9, 1.6e9))
    return path


def test_replaying_a_log_ten_times_longer_takes_no_more_memory(tmp_path):
    # A replay read its whole log into a list before playing it: a 166 MB log made it 362 MB
    # resident, and a day of a big job (gigabytes) could not be replayed at all. It reads the
    # log as it plays it now: opening, playing, seeking back and to the end take the same
    # memory whatever the log's length. (Python's own count of the bytes it allocated, peak.)
    import tracemalloc

    def peak_bytes(log) -> int:
        tracemalloc.start()
        try:
            src = ReplaySource(str(log))
            for at in (src.duration_s / 2, src.duration_s, 0.0, src.duration_s):
                src.seek(at)
            assert src.done and src.state.step == int(log.stem)
            src.close()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    peak_bytes(_long_log(tmp_path / "40.jsonl", 40))  # (what a first replay imports and caches)
    short = peak_bytes(_long_log(tmp_path / "400.jsonl", 400))
    long = peak_bytes(_long_log(tmp_path / "4000.jsonl", 4000))
    assert long < short + (256 << 10), f"{short / 1e6:.2f} MB for 400 steps, {long / 1e6:.2f} MB for 4000"


def _end_figures(src: ReplaySource):
    """What the dashboard shows at the replay's end: each rank's row and the run's trend."""
    from pardash.tui.model import RowBuilder

    src.seek(src.duration_s)
    assert src.done
    rows = [(r.rank, r.status, r.step, r.step_s, r.self_s, r.loss, r.held_bytes) for r in RowBuilder().build(src.state)]
    histories = {q.rank: q.history.columns_bytes() for q in src.state.ranks.values()}
    return rows, histories, src.state.trend.points()


def test_a_gzip_log_plays_and_seeks_back_as_the_log_it_was(tmp_path):
    # A log kept compressed is read again from its start for a seek back (it is not held).
    import gzip

    log = _long_log(tmp_path / "run.jsonl", 300)
    kept = tmp_path / "run.jsonl.gz"
    kept.write_bytes(gzip.compress(log.read_bytes()))
    plain, packed = ReplaySource(str(log)), ReplaySource(str(kept))
    assert (packed.t_start, packed.t_end, packed.runs) == (plain.t_start, plain.t_end, plain.runs)
    at_end = _end_figures(plain)
    assert _end_figures(packed) == at_end
    packed.seek(10.0)
    assert packed.state.step == 100 and not packed.done
    assert _end_figures(packed) == at_end


def test_a_replay_seeks_back_after_its_log_was_deleted_or_compressed(tmp_path):
    # (The replay keeps its log open: `gzip telemetry.jsonl` or a cleanup while it plays does
    # not end it, as when it held the log in memory.)
    log = _long_log(tmp_path / "run.jsonl", 300)
    src = ReplaySource(str(log))
    at_end = _end_figures(src)
    log.unlink()
    src.seek(0.0)
    assert src.state.step == 0 and not src.done
    assert _end_figures(src) == at_end


def test_a_followed_log_seeked_back_plays_again_to_where_its_writer_got(tmp_path, monkeypatch):
    from pardash.telemetry import schema

    clock, log, write_msgs = _growing_log(tmp_path, monkeypatch)
    t0 = 1.7e9

    def write(steps, tail: bytes = b"") -> None:
        write_msgs([schema.Step(rank=0, step=s, loss=1.0, t=t0 + s, seq=s, run="x") for s in steps], tail)

    write(range(1, 4), b'{"kind":"step","ra')  # a line being written
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    assert src.following and src.state.step == 3 and not src.done
    with open(log, "ab") as fh:
        fh.write(b'nk":0,"step":4,"t":%r,"seq":4,"run":"x"}\n' % (t0 + 4))
    write(range(5, 7), b'{"kind":"st')
    clock[0] += 0.2
    src.poll()
    src.seek(src.duration_s)
    assert src.state.step == 6 and src.state.ranks[0].steps_seen == 6
    src.seek(0.0)
    src.seek(src.duration_s)  # again from the start, no further than the lines written whole
    assert src.state.step == 6 and src.state.ranks[0].steps_seen == 6 and src.following
    assert src.read_stats.skipped_total == 0


def test_a_long_first_read_says_how_far_it_is(tmp_path, monkeypatch):
    # `pardash replay` of a log of gigabytes reads it through before its first screen (a
    # minute): it shows how far, as report and export do.
    import gzip

    from pardash.telemetry import client, logreader

    monkeypatch.setattr(client, "PROGRESS_EVERY", 100)
    monkeypatch.setattr(logreader, "PROGRESS_EVERY", 100)
    log = _long_log(tmp_path / "run.jsonl", 300)  # 602 records
    kept = tmp_path / "run.jsonl.gz"
    kept.write_bytes(gzip.compress(log.read_bytes()))

    def told(path) -> list[tuple[int, int]]:
        calls: list[tuple[int, int]] = []
        ReplaySource(str(path), progress=lambda done, size: calls.append((done, size)))
        return calls

    size = log.stat().st_size
    plain = told(log)
    assert len(plain) == 7 and plain == sorted(plain) and plain[0][0] < size and plain[-1] == (size, size)
    assert told(kept)[-1] == (kept.stat().st_size,) * 2  # (its compressed bytes, read in large blocks)


def test_a_fifo_is_refused_in_one_line_not_waited_on(tmp_path):
    # (A replay reads its log twice: a FIFO can be read once, and opening it waits for a writer.)
    import pytest

    from pardash.telemetry.client import AttachError

    fifo = tmp_path / "telemetry.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(AttachError, match="not a regular file"):
        ReplaySource(str(fifo))


async def test_a_burst_of_seeks_back_is_one_replay_from_the_start(monkeypatch):
    # A seek back plays the log again from its start (seconds in a long log): six `[` typed
    # at once froze the screen for six of those, one after another.
    from textual import events

    src = ReplaySource(str(DATA / "run4.jsonl"))
    src.seek(src.duration_s)
    src.paused = True
    restarts = []
    real = src._restart
    monkeypatch.setattr(src, "_restart", lambda: (restarts.append(1), real())[1])
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        for _ in range(2):
            app.post_message(events.Key("left_square_bracket", "["))
        await pilot.pause()
        assert len(restarts) == 1 and abs(src.position_s - (src.duration_s - 20.0)) <= src.frame_s
        assert "replay run4.jsonl 10s / 30s" in header(app)


def test_a_replays_elapsed_time_is_its_clocks_and_reports_duration(tmp_path):
    # The header said "elapsed 14s" beside "replay r2.jsonl 10s / 10s", and report "duration
    # 10.5 s": the header counted from the hub's first note, 4 s of the ranks' start-up before
    # their first word, which the replay (and the report) count from.
    from pardash.telemetry import schema
    from pardash.telemetry.report import build_report
    from pardash.tui.widgets.run_header import summarize

    log = tmp_path / "telemetry.jsonl"
    t0 = 1.7e9
    msgs: list = [schema.Event(rank=-1, name="hub", message="hub started", t=t0, run="x")]
    msgs += [schema.Hello(rank=r, world_size=2, t=t0 + 4, run="x", seq=0) for r in (0, 1)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0, step_s=0.1, samples=4, t=t0 + 4 + s, seq=s, run="x") for s in range(1, 11) for r in (0, 1)]
    msgs += [schema.Event(rank=r, name="exit", code=0, step=10, t=t0 + 14, run="x", seq=11) for r in (0, 1)]
    log.write_bytes(schema.encode_json_lines(msgs))
    os.utime(log, (1.6e9, 1.6e9))
    src = ReplaySource(str(log), start_s=float("inf"))
    summary = summarize(src)
    assert summary.replay.position_s == summary.replay.duration_s == 10.0
    assert summary.elapsed_s == 10.0
    assert build_report(str(log))["duration_s"] == pytest.approx(10.0)
    half = ReplaySource(str(log), start_s=5.0)
    assert summarize(half).elapsed_s == summarize(half).replay.position_s == 5.0


async def test_a_replays_footer_shows_its_own_keys_in_80_columns_and_the_grids_keys_still_work():
    # The footer listed the grid's view keys first: at 80 columns the replay's own (space,
    # +/-, [/]) were cut off entirely, and "Speed" and "Seek" at 100.
    from textual.widgets._footer import FooterKey

    app = replay_app("straggler8.jsonl")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        keys = list(app.screen.query(FooterKey))
        shown = {k.description: k for k in keys}
        assert {"Play", "Speed", "Seek", "Help", "Quit"} <= set(shown), list(shown)  # (paused: space plays)
        for k in keys:  # each whole, on the screen, and clear of the others
            assert k.region.right <= 80 and k.region.width >= len(k.key_display) + len(k.description) + 1, (k.description, k.region)
        spans = sorted((k.region.x, k.region.right) for k in keys)
        assert all(a_end <= b for (_, a_end), (b, _) in zip(spans, spans[1:])), spans
        grid = app.screen.query_one(RankGrid)
        before = grid.form
        await pilot.press("c")  # not in the footer, still a key (the help lists it)
        await pilot.pause()
        assert grid.form != before


async def test_a_ranks_detail_while_torchrun_restarts_it_shows_the_step_it_reached(tmp_path):
    # Its new process has said hello and taken no step yet: the detail's title had no step line
    # (the header and the report said step 20; RankState.step_before).
    from pardash.telemetry import schema
    from pardash.tui.screens.rank_detail import RankDetailScreen

    t0 = 1.7e9
    msgs: list = [schema.Hello(rank=r, world_size=2, t=t0, run="x", seq=0, pid=100 + r) for r in range(2)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0, step_s=0.1, t=t0 + s / 10, seq=s, run="x") for s in range(1, 21) for r in range(2)]
    msgs.append(schema.Hello(rank=1, world_size=2, t=t0 + 5, run="x", seq=0, pid=201, restart=1))
    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json_lines(msgs))
    app = replay_app(str(log))
    async with app.run_test(size=(120, 40)) as pilot:
        app.screen.query_one(RankGrid).select(1)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, RankDetailScreen) and app.screen.rank == 1
        title = widget_text(app.screen.query_one("#title"))
        assert "\nstep 20 · its previous process's last; none since its restart" in title, title
        assert "restarted 1 time" in title
        await pilot.press("p")  # rank 0 stepped on: its own step line
        await pilot.pause()
        title = widget_text(app.screen.query_one("#title"))
        assert "\nstep 20 · epoch" in title and "previous process" not in title, title


async def test_a_replays_event_log_counts_from_where_its_position_does(tmp_path):
    # At 33s / 33s a replay's event log said "00:39 rank 0 exited": it counted from the hub's
    # start, the header from the ranks' first word (as `report` and the seek do).
    from pardash.telemetry import schema
    from pardash.tui.widgets.event_log import EventLog
    from tui_helpers import strip_text

    t = 1.7e9
    msgs = [schema.Event(run="r", rank=-1, seq=-1, name="hub", message="hub started", t=t, hseq=1)]
    msgs += [schema.Hello(run="r", rank=r, world_size=2, t=t + 6, hseq=2 + r) for r in (0, 1)]
    msgs += [schema.Step(run="r", rank=r, step=s, seq=s, step_s=0.5, samples=4, t=t + 6 + s, hseq=10 * s + r) for s in range(1, 9) for r in (0, 1)]
    msgs += [schema.Event(run="r", rank=r, seq=9, name="exit", code=0, step=8, t=t + 15, hseq=200 + r) for r in (0, 1)]
    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json_lines(msgs))
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(0.2)
        assert src.duration_s == 9.0  # from the ranks' first word to the last record
        clocks = [strip_text(line).split()[0] for line in app.screen.query_one(EventLog).lines]
        # the hub's start before the zero, as before it (it read 00:00); the exits at 9 s, not 15
        assert clocks == ["-0:06", "00:09"], clocks


class _HeldLive:
    """A live source over a hub's snapshot, held still (what a viewer attached to the hub shows)."""

    live = True

    def __init__(self, snapshot) -> None:
        from pardash.telemetry.client import FrameApplier

        applier = FrameApplier()
        applier.live = True
        applier.load_snapshot(snapshot)
        self.state, self.stats = applier.state, applier.stats

    def poll(self) -> bool:
        return False

    def sockets(self) -> list:
        return []

    def close(self) -> None:
        pass


async def test_a_run_counts_from_its_ranks_first_word_live_as_in_its_replay(tmp_path):
    # One run read "elapsed 51s" live and "47s" in its replay (and in report): live counted from
    # the hub's start, the seconds torchrun and torch's import took before the ranks said
    # hello. The event log's clock and an alert's "since" count from the same 00:00.
    from pardash.telemetry import schema
    from pardash.telemetry.hubcore import HubCore
    from pardash.tui.widgets.alert_list import AlertList
    from pardash.tui.widgets.event_log import EventLog
    from tui_helpers import strip_text

    t = 1.7e9
    msgs: list = [schema.Event(run="r", rank=-1, seq=-1, name="hub", message="hub started", t=t)]
    msgs += [schema.Hello(run="r", rank=r, world_size=2, seq=0, t=t + 4) for r in (0, 1)]
    msgs += [schema.Step(run="r", rank=r, step=s, seq=s, step_s=0.5, samples=4, t=t + 4 + s) for s in range(1, 9) for r in (0, 1)]
    msgs.append(schema.Verdict(run="r", rank=1, seq=-1, verdict="silent", message="rank 1 silent for 3 s", t=t + 12.5))
    msgs.append(schema.Event(run="r", rank=0, seq=9, name="exit", code=0, step=8, t=t + 14))
    core = HubCore(run_id="r")
    for m in msgs:
        core.replay(m, 0.0)
    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json_lines(msgs))
    replay = ReplaySource(str(log), start_s=float("inf"))
    replay.paused = True
    seen = {}
    for name, src in (("live", _HeldLive(core.snapshot())), ("replay", replay)):
        app = make_app(src)
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause(0.2)
            clocks = [strip_text(line).split()[0] for line in app.screen.query_one(EventLog).lines]
            alerts = widget_text(app.screen.query_one(AlertList))
            seen[name] = (app.screen.query_one(RunHeader).summary.elapsed_s, clocks, "rank 1 silent since 00:08" in alerts)
    assert seen["live"] == seen["replay"] == (10.0, ["-0:04", "00:08", "00:10"], True), seen  # (the hub's start before 00:00)


async def test_a_gone_ranks_system_figures_say_they_are_its_last_not_now():
    # Rank 1 died at 00:10; at 00:22 its detail showed "gpu util 95%", "cpu 102%" in bold under
    # "system", as a live rank's figures are shown (nvitop greys a process that is gone).
    from pardash.tui.screens.rank_detail import RankDetailScreen
    from pardash.tui.widgets.fact_list import FactList

    app = replay_app("exited4.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        app.screen.query_one(RankGrid).select(1)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, RankDetailScreen) and app.screen.rank == 1
        system = app.screen.query_one("#system", FactList)
        assert "gpu util" in widget_text(system)
        assert system.border_title == "system · at its exit"
        assert system.border_subtitle == "last sample 00:10 · 12s ago", system.border_subtitle
        assert not system.get_component_rich_style("fact-list--value").bold  # greyed, not as now
        await pilot.press("p")  # rank 0 is alive (stalled, still sampled): its figures are now
        await pilot.pause()
        system = app.screen.query_one("#system", FactList)
        assert (system.border_title, system.border_subtitle) == ("system", "")
        assert system.get_component_rich_style("fact-list--value").bold


async def test_a_rank_with_no_one_to_talk_to_shows_no_communication_figure(tmp_path):
    # A `single` run's grid said "comm 0µs" and its detail "comm wait 0µs": a figure measured
    # as zero, where there is no communication at all. A one-process `dp` run over GPUs that
    # did wait (20 ms) keeps its figure.
    from pardash.telemetry import schema
    from pardash.tui.screens.rank_detail import RankDetailScreen
    from pardash.tui.widgets.phase_bars import PhaseBars

    t = 1.7e9
    msgs: list = [schema.Hello(run="s", rank=0, world_size=1, strategy="single", device="cpu", seq=0, t=t)]
    msgs += [
        schema.Step(run="s", rank=0, step=s, seq=s, loss=1.0, samples=16, step_s=0.06, data_s=0.0003, forward_s=0.015,
                    backward_s=0.035, optimizer_s=0.0097, comm_s=0.0, self_s=0.06, t=t + s * 0.06)
        for s in range(1, 31)
    ]
    log = tmp_path / "single.jsonl"
    log.write_bytes(schema.encode_json_lines(msgs))
    for name, comm in ((str(log), "–"), ("dp1.jsonl", "20.0ms")):
        app = replay_app(name)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            lines = grid_text(app).splitlines()
            columns = lines[0].split()
            assert "comm" in columns, lines[0]
            row = next(line.split() for line in lines if line.split()[:1] == ["0"])
            assert row[columns.index("comm")] == comm, (name, lines[0], row)
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, RankDetailScreen)
            phases = [p.name for p in app.screen.query_one(PhaseBars).phases]
            assert ("comm wait" in phases) == (comm != "–"), (name, phases)
            # (one rank: its charts drew no band of others, and said "range of 0 others")
            subtitle = str(app.screen.query_one("#chart-loss").border_subtitle)
            assert subtitle.startswith("now ") and "others" not in subtitle, subtitle


def _hang_log(path, *, timed_out: bool) -> None:
    """3 DDP ranks; rank 2 stalls in its data loader after step 29, ranks 0 and 1 in backward
    waiting for it (the hub's verdicts, as a real run with --inject-stall 2@30 records them);
    ``timed_out``: then ranks 0 and 1 fail on gloo's timeout while rank 2 is still stuck."""
    from pardash.telemetry import schema

    t = 1.7e9
    msgs: list = [schema.Hello(run="h", rank=r, world_size=3, strategy="ddp", seq=0, t=t) for r in range(3)]
    msgs += [
        schema.Step(run="h", rank=r, step=s, seq=s, loss=1.0, samples=8, step_s=0.02, self_s=0.002, comm_s=0.01, t=t + s * 0.02)
        for s in range(1, 30)
        for r in range(3)
    ]
    for r, phase in ((0, "backward"), (1, "backward"), (2, "data")):
        msgs.append(schema.Verdict(run="h", rank=r, seq=-1, verdict="stalled", cause=phase, step=29,
                                   message=f"rank {r} stalled in {phase} after step 29 (5 s without progress)", t=t + 6))
    if timed_out:
        for r in (0, 1):
            msgs.append(schema.Event(run="h", rank=r, seq=30, name="error", step=29, t=t + 26,
                                     message="RuntimeError: [gloo] Timed out waiting 25000ms for recv operation to complete"))
            msgs.append(schema.Event(run="h", rank=r, seq=31, name="exit", code=1, step=30, t=t + 26))
    path.write_bytes(schema.encode_json_lines(msgs))


@pytest.mark.parametrize("timed_out", [False, True])
async def test_sorting_by_status_puts_the_rank_a_hang_waits_for_first_and_says_what_it_is_stuck_in(tmp_path, timed_out):
    # Sorted by status, the rank stalled in its data loader (the alerts' "likely the cause: 2
    # others wait for it") came last, after the ranks stalled waiting for it; once their gloo
    # timeout had failed them, after them too (exited sorted first). The line under the grid said
    # "stalled" alone.
    from pardash.tui.model import SORT_KEYS
    from pardash.tui.widgets.alert_list import AlertList
    from pardash.tui.widgets.selected_rank import SelectedRank

    log = tmp_path / "hang.jsonl"
    _hang_log(log, timed_out=timed_out)
    app = replay_app(str(log))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        grid = app.screen.query_one(RankGrid)
        await pilot.press(*["s"] * SORT_KEYS.index("status"))
        await pilot.pause()
        assert grid.sort_key == "status"
        assert grid.shown_ranks == [2, 0, 1], grid_text(app)
        assert grid.cursor_rank == 2  # (a new order is read from its top)
        line = widget_text(app.screen.query_one(SelectedRank))
        assert line.startswith("rank 2 · stalled in data, likely the cause · "), line
        # The alerts say it too (once the others' timeout had failed them, they did not).
        waited = "2 others failed waiting for it" if timed_out else "2 others wait for it"
        alerts = widget_text(app.screen.query_one(AlertList))
        # (first, and whole: below the two it failed, it was cut at "2 others failed waitin…")
        assert " ".join(alerts.split()).startswith(f"◆ rank 2 stalled in data after step 29, likely the cause: {waited}"), alerts
        grid.select(0)
        await pilot.pause()
        line = widget_text(app.screen.query_one(SelectedRank))
        # (waiting, ◇ on the grid: for whom, as its alert says)
        assert line.startswith("rank 0 · exited 1 · " if timed_out else "rank 0 · stalled in backward, waiting for rank 2 · "), line


@pytest.mark.parametrize("timed_out", [False, True])
async def test_the_header_counts_the_ranks_waiting_for_a_hangs_cause_as_the_grid_draws_them(tmp_path, timed_out):
    # The grid drew ranks 0 and 1 waiting (◇) for rank 2, stalled in its data loader (◆), and
    # its legend said "◆ stalled ◇ waiting"; the header counted "◆ 3 stalled".
    log = tmp_path / "hang.jsonl"
    _hang_log(log, timed_out=timed_out)
    app = replay_app(str(log))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        header = widget_text(app.screen.query_one(RunHeader))
        grid = grid_text(app)
        if timed_out:  # (0 and 1 exited: no rank waits any more)
            assert "◆ 1 stalled" in header and "waiting" not in header and "waiting" not in grid, header
        else:
            assert "◆ 1 stalled  ◇ 2 waiting" in header, header
            assert grid.count("waiting") == 2 + ("◇ waiting" in grid), grid


def _slow_and_silent_log(path) -> None:
    """3 DDP ranks: rank 1 a straggler, found when it cost the others 20 ms a step (its self
    time 50 ms against 20 ms: 30 ms now); rank 2 last heard at 00:04, said "silent for 3 s" at 00:08."""
    from pardash.telemetry import schema

    t = 1.7e9
    msgs: list = [schema.Hello(run="s", rank=r, world_size=3, strategy="ddp", seq=0, t=t) for r in range(3)]
    msgs += [
        schema.Step(run="s", rank=r, step=s, seq=s, loss=1.0, samples=8, step_s=0.06, self_s=0.05 if r == 1 else 0.02,
                    data_s=0.03 if r == 1 else 0.0, comm_s=0.01, t=t + s * 0.06)
        for s in range(1, 100)
        for r in range(3 if s < 80 else 2)
    ]  # fmt: skip
    msgs.append(schema.Verdict(run="s", rank=1, seq=-1, verdict="straggler", cause="data loading", step=40, cost_s=0.02,
                               message="rank 1 is a straggler (data loading): the others wait 20 ms a step for it", t=t + 2.4))
    msgs.append(schema.Verdict(run="s", rank=2, seq=-1, verdict="silent", step=79, message="rank 2 silent for 3 s (no heartbeat)",
                               t=t + 8))
    msgs.sort(key=lambda m: m.t)
    path.write_bytes(schema.encode_json_lines(msgs))


@pytest.mark.parametrize(
    ("hang", "rank", "said", "not_said"),
    [
        (False, 1, "the others wait 30 ms a step", "20 ms"),  # a straggler's cost now
        (False, 2, "rank 2 silent since 00:04 (no heartbeat)", "for 3 s"),  # since when (its last word)
        (True, 0, "rank 0 stalled in backward after step 29, waiting for rank 2", "5 s without progress"),
        (True, 2, "rank 2 stalled in data after step 29, likely the cause: 2 others wait for it", "5 s without"),
    ],
)
async def test_a_ranks_detail_says_its_verdicts_as_the_alerts_do(tmp_path, hang, rank, said, not_said):
    # The detail printed each verdict's first words: "rank 1 silent for 3 s (no heartbeat)"
    # while the alerts said "silent since 00:16", "the others wait 20 ms" while they said 21,
    # then 18, a stall's "(5 s without progress)" for as long as it lasted.
    from pardash.tui.screens.rank_detail import RankDetailScreen
    from pardash.tui.widgets.alert_list import AlertList

    log = tmp_path / "run.jsonl"
    _hang_log(log, timed_out=False) if hang else _slow_and_silent_log(log)
    app = replay_app(str(log))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        alerts = [a.text for a in app.screen.query_one(AlertList).alerts if a.rank == rank]
        assert len(alerts) == 1 and said in alerts[0], alerts
        app.screen.grid.select(rank)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, RankDetailScreen)
        title = widget_text(app.screen.query_one("#title")).splitlines()
        warned = [line.removeprefix("⚠ ") for line in title if line.startswith("⚠")]
        assert warned == alerts, title
        assert not_said not in "\n".join(title)
        if hang and rank == 0:  # whom it waits for, on its first line too (as the grid says it)
            assert "stalled, waiting for rank 2" in title[0], title


def _live_run4():
    """run4.jsonl as a viewer attached to its hub sees it (a live dashboard's keys)."""
    from pardash.telemetry.hubcore import HubCore
    from pardash.telemetry.logreader import read_log

    core = HubCore()
    for msg in read_log(str(DATA / "run4.jsonl")):
        core.replay(msg, 0.0)
    return _HeldLive(core.snapshot())


@pytest.mark.parametrize("width", [60, 70])
@pytest.mark.parametrize("live", [True, False], ids=["live", "replay"])
async def test_a_narrow_terminals_footer_keeps_quit_help_and_the_screens_own_keys_whole(width, live):
    # Under 80 columns the footer cut what did not fit at its right edge: "q Qu" and no "? Help"
    # at 70 (live), no "[/] Seek" in a replay, and a rank's detail lost Quit and Help at 60.
    from textual.widgets._footer import FooterKey

    from pardash.tui.screens.rank_detail import RankDetailScreen

    app = make_app(_live_run4() if live else replay_at_end("run4.jsonl"))
    async with app.run_test(size=(width, 30)) as pilot:
        await pilot.pause()
        for must in (
            {"Quit", "Help", "Detail", "Sort", "Flagged"} if live else {"Quit", "Help", "Detail", "Play", "Speed", "Seek"},
            {"Quit", "Help", "Back"} | (set() if live else {"Play", "Speed", "Seek"}),
        ):
            await pilot.pause()
            keys = list(app.screen.query(FooterKey))
            shown = {k.description for k in keys}
            assert must <= shown, (type(app.screen).__name__, sorted(shown))
            for k in keys:  # each whole, on the screen, and clear of the others
                assert k.region.right <= width and k.region.width >= len(k.key_display) + len(k.description) + 1, (k.description, k.region)
            spans = sorted((k.region.x, k.region.right) for k in keys)
            assert all(a_end <= b for (_, a_end), (b, _) in zip(spans, spans[1:])), spans
            if not isinstance(app.screen, RankDetailScreen):
                await pilot.press("enter")


async def test_a_textual_whose_footer_keys_moved_still_shows_its_own_footer(monkeypatch):
    # The fitted footer reads Textual's private FooterKey: a release that moves it must cost
    # the fitting, never the footer (nor the app).
    from textual.widgets._footer import FooterKey

    from pardash.tui.widgets import fitted_footer

    monkeypatch.setattr(fitted_footer, "FooterKey", None)
    app = make_app(replay_at_end("run4.jsonl"))
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        shown = {k.description for k in app.screen.query(FooterKey)}
        assert {"Quit", "Help", "Detail"} <= shown, sorted(shown)


@pytest.mark.parametrize("phase", [0.0, 0.03, 0.06])
def test_the_grid_shows_each_ranks_last_five_steps_however_the_frames_were_cut(phase):
    # A real DDP run of ~30 steps a second: a frame brought every third step or so, and the
    # grid's wall, self, data and comm (medians of the last five history points) came out
    # differently live (frames cut on the hub's clock, as bursts arrived) and in its replay
    # (frames cut at t_start + k * 0.1 on the ranks' clocks), and neither was the median of
    # the rank's last five steps, which the log holds.
    import statistics
    import time

    from pardash.telemetry import schema
    from pardash.telemetry.client import FrameApplier, NullDetector
    from pardash.telemetry.hubcore import HubCore
    from pardash.telemetry.logreader import read_log
    from pardash.tui.model import RowBuilder

    log = DATA.parent.parent / "data" / "real_ddp2.jsonl"
    records = list(read_log(str(log)))
    core, viewer = HubCore(detector=NullDetector()), FrameApplier()  # a live hub and its viewer
    edge = min(m.t for m in records if m.rank >= 0 and m.t) + phase
    for m in records:
        while m.t and m.t > edge:  # the hub's own clock cuts a frame every 100 ms
            viewer.apply_frame(core.tick(time.monotonic()))
            edge += 0.1
        core.replay(m, time.monotonic())
    viewer.apply_frame(core.tick(time.monotonic()))
    replay = ReplaySource(str(log), start_s=float("inf"))
    newest: dict[int, list[schema.Step]] = {}
    for m in records:
        if isinstance(m, schema.Step):
            newest.setdefault(m.rank, []).append(m)

    def last_five(rank: int, name: str) -> float:
        return statistics.median([getattr(s, name) for s in newest[rank]][-5:])

    for state in (viewer.state, replay.state):
        for row in RowBuilder().build(state):
            for got, name in ((row.step_s, "step_s"), (row.self_s, "self_s"), (row.data_s, "data_s"), (row.comm_s, "comm_s")):
                assert got == pytest.approx(last_five(row.rank, name), rel=1e-6), (row.rank, name)


async def test_ranks_torchrun_is_restarting_show_nothing_of_their_dead_processes(tmp_path):
    # Between torchrun's restart and the new processes' first step, the grid showed the ranks
    # "starting" beside the wall and self times of the processes that had died (16.2ms, 3.0ms),
    # the header "step 0", the alerts "every rank is healthy" right under the crash, and the
    # loss chart "range of 0 ranks".
    from pardash.telemetry import schema
    from pardash.tui.widgets.alert_list import AlertList

    t0 = 1.7e9
    msgs: list = [schema.Hello(rank=r, world_size=2, t=t0, run="x", seq=0, pid=100 + r) for r in range(2)]
    msgs += [schema.Step(rank=r, step=s, loss=1.0, step_s=0.1, self_s=0.03, samples=8, t=t0 + s / 10, seq=s, run="x")
             for s in range(1, 21) for r in range(2)]  # fmt: skip
    msgs += [schema.Event(rank=r, name="exit", code=1, seq=21, t=t0 + 2.1, run="x") for r in range(2)]
    msgs += [schema.Event(rank=r, name="restart", code=1, seq=-1, t=t0 + 2.5, run="x") for r in range(2)]
    msgs += [schema.Hello(rank=r, world_size=2, t=t0 + 6, run="x", seq=0, pid=200 + r, restart=1) for r in range(2)]
    msgs += [schema.Step(rank=r, step=10 + s, loss=0.9, step_s=0.1, self_s=0.03, samples=8, t=t0 + 7 + s / 10, seq=s, run="x")
             for s in range(1, 21) for r in range(2)]  # fmt: skip
    msgs += [schema.Event(rank=r, name="exit", code=0, seq=21, t=t0 + 9.1, run="x") for r in range(2)]
    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json_lines(msgs))
    src = ReplaySource(str(log))
    src.seek(4.0)  # restarted, no new step yet
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        rows = [line.split() for line in grid_text(app).splitlines() if line.split()[:1] in (["0"], ["1"])]
        assert len(rows) == 2 and all(row[1:] == ["starting"] + ["–"] * 8 for row in rows), rows
        assert "step 20 " in header(app), header(app)
        alerts = widget_text(app.screen.query_one(AlertList))
        assert "torchrun restarted the job (restart 1): its ranks are starting again" in alerts, alerts
        assert "range of 0 ranks" not in widget_text(app.screen)
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        alerts = widget_text(app.screen.query_one(AlertList))
        assert "every rank finished, after torchrun restarted the job 1x" in alerts, alerts


def _where(src: ReplaySource) -> tuple:
    """What a replay shows of its ranks, and where its clock is."""
    return src._clock, {r.rank: (r.step.step if r.step else None, r.steps_seen, r.finished) for r in src.state.ranks.values()}


def test_a_seek_the_viewer_asks_for_goes_a_poll_at_a_time_and_ends_where_a_seek_does(monkeypatch):
    # A seek back plays the log again from its start: 7 s of a 565 MB log, the screen and its
    # keys (`q` too) frozen meanwhile. Now each poll plays SEEK_BUDGET_S of it; the header says
    # the position asked for at once.
    from pardash.telemetry import client

    monkeypatch.setattr(client, "SEEK_BUDGET_S", 0.0)  # one frame a poll
    src = ReplaySource(str(DATA / "run4.jsonl"))
    src.seek(src.duration_s)
    src.paused = True
    want = ReplaySource(str(DATA / "run4.jsonl"))
    want.seek(12.0)
    src.seek_soon(12.0)
    assert src.poll() and src.position_s == 12.0  # began: from the log's start again
    polls = 1
    while _where(src) != _where(want):
        assert src.poll()
        assert src.position_s == 12.0
        polls += 1
        assert polls < 10_000
    assert polls > 10 and not src.poll()  # there, and paused: nothing more
    assert not src.seek_now()


def test_a_replay_started_far_in_says_how_far_its_play_up_to_there_is():
    # `replay --start end` of a long log played every frame up to its end with "reading: 100%"
    # on the terminal for as long again as the reading took.
    told: list[tuple[int, int]] = []
    src = ReplaySource(str(DATA / "run4.jsonl"), start_s=29.0, start_progress=lambda done, total: told.append((done, total)))
    assert src.position_s == 29.0
    assert told and all(0 < done <= total == 29_000 for done, total in told), told
