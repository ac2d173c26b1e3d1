"""The event log says an event every rank sends alike once, naming the ranks."""

from __future__ import annotations

from pardash.telemetry import schema
from pardash.telemetry.printer import group_alike
from pardash.tui.widgets.event_log import describe
from pardash.tui.format import fmt_clock


def _save(rank: int, step: int, took: float) -> schema.Event:
    return schema.Event(rank=rank, name="checkpoint", step=step, message=f"/ckpt/step-{step:08d}", duration_s=took)


def test_the_same_event_of_many_ranks_is_one_line_in_its_place():
    msgs = [
        schema.Event(rank=-1, seq=-1, name="hub", message="hub started"),
        *[_save(r, 20, 1.0 + r / 100) for r in range(0, 1024, 2)],
        schema.Verdict(rank=3, verdict="straggler", step=20, message="rank 3 is a straggler"),
        *[_save(r, 20, 1.0) for r in range(1, 1024, 2)],
        schema.Event(rank=7, name="error", step=21, message="RuntimeError: boom"),
        schema.Event(rank=8, name="error", step=21, message="RuntimeError: boom"),
        _save(0, 40, 2.0),
    ]
    lines = [describe(*entry)[0] for entry in group_alike(msgs)]
    assert lines == [
        "hub: hub started",
        "ranks 0-1023 checkpoint at step 20 (slowest 11.22s): /ckpt/step-00000020",
        "rank 3 is a straggler",
        # errors too (a line each, 1023 watchdog timeouts were 1023 entries; the first's traceback)
        "ranks 7-8 error after step 21: RuntimeError: boom",
        "rank 0 checkpoint at step 40 (2.00s): /ckpt/step-00000040",
    ]


def test_exits_group_by_code_and_text():
    msgs = [schema.Event(rank=r, name="exit", code=0, step=60) for r in (2, 0, 1)]
    msgs += [schema.Event(rank=3, name="exit", code=1, step=25)]
    assert [describe(*e)[0] for e in group_alike(msgs)] == [
        "ranks 0-2 finished (exit code 0)",
        "rank 3 exited with code 1",
    ]


def test_progress_lines_say_it_once_too():
    from pardash.telemetry.printer import event_line

    msgs = [_save(r, 20, 1.0) for r in (0, 1, 2, 3)] + [schema.Event(rank=1, name="warning", message="slow disk")]
    assert [event_line(*entry) for entry in group_alike(msgs)] == [
        "[checkpoint] ranks 0-3 at step 20: /ckpt/step-00000020 (slowest 1.00 s)",
        "[warning] rank 1: slow disk",
    ]


def test_a_rank_that_says_it_twice_is_named_once():
    from pardash.telemetry.printer import event_line

    twice = [schema.Event(rank=3, name="warning", message="slow disk") for _ in range(2)]
    assert [event_line(*entry) for entry in group_alike(twice)] == ["[warning] rank 3: slow disk"]


def _stalled(rank: int, phase: str, seconds: int) -> schema.Verdict:
    return schema.Verdict(
        rank=rank, verdict="stalled", cause=phase, step=79,
        message=f"rank {rank} stalled in {phase} after step 79 ({seconds} s without progress)",
    )


def test_a_hang_of_many_ranks_is_a_line_per_phase_not_one_per_rank():
    from pardash.telemetry.printer import event_line

    # The hub's liveness check finds them all in one pass; their seconds differ by rounding.
    msgs = [_stalled(r, "data" if r == 5 else "comm", 5 + (r % 3 == 0)) for r in range(1024)]
    msgs.append(schema.Verdict(rank=2, verdict="straggler", step=79, message="rank 2 is a straggler"))
    msgs += [
        schema.Verdict(rank=r, verdict="resumed", step=80, message=f"rank {r} resumed at step 80") for r in (0, 1, 2)
    ]
    assert [describe(*e)[0] for e in group_alike(msgs)] == [
        "ranks 0-4, 6-1023 stalled in comm after step 79 (6 s without progress)",
        "rank 5 stalled in data after step 79 (5 s without progress)",
        "rank 2 is a straggler",
        "ranks 0-2 resumed at step 80",
    ]
    assert [event_line(*e) for e in group_alike(msgs)][:2] == [
        "[stalled] ranks 0-4, 6-1023 stalled in comm after step 79 (6 s without progress)",
        "[stalled] rank 5 stalled in data after step 79 (5 s without progress)",
    ]


def test_verdicts_of_other_steps_or_kinds_stay_apart():
    msgs = [
        schema.Verdict(rank=0, verdict="silent", step=3, message="rank 0 silent for 3 s (no heartbeat)"),
        schema.Verdict(rank=1, verdict="silent", step=4, message="rank 1 silent for 3 s (no heartbeat)"),
        schema.Verdict(rank=2, verdict="resumed", step=4, message="rank 2 heard from again"),
        schema.Verdict(rank=3, verdict="resumed", step=4, message="rank 3 resumed at step 4"),
        # a message that does not start with its rank is kept as it is
        schema.Verdict(rank=4, verdict="silent", step=4, message="no heartbeat from rank 4"),
    ]
    assert [describe(*e)[0] for e in group_alike(msgs)] == [m.message for m in msgs]


async def test_a_line_wrapped_before_the_scrollbar_came_keeps_its_last_character():
    # The log wrapped lines to its whole width; once enough lines came for a scrollbar, that
    # took the last column and hid the last character of every line wrapped before.
    from textual.app import App

    from pardash.telemetry.state import RunState
    from pardash.tui.widgets.event_log import EventLog

    long = "RuntimeError: " + "".join(chr(97 + i % 26) for i in range(130))  # (an error's line stops at 160)

    class One(App):
        CSS = "EventLog { width: 40; height: 8; }"

        def compose(self):
            yield EventLog()

    app = One()
    async with app.run_test(size=(60, 12)) as pilot:
        st, log = RunState(), app.query_one(EventLog)
        st.apply(schema.Event(rank=1, seq=1, name="error", message=long, t=2.0, hseq=1), 0.0)
        log.sync(st)
        await pilot.pause()
        width_then = log.scrollable_content_region.width
        for i in range(12):
            st.apply(schema.Event(rank=-1, seq=-1, name="hub", message=f"note {i}", t=3.0 + i, hseq=2 + i), 0.0)
        log.sync(st)
        await pilot.pause()
        assert log.show_vertical_scrollbar
        width = log.scrollable_content_region.width
        assert width == width_then
        texts = [strip.text.rstrip() for strip in log.lines]
        assert max(map(len, texts)) <= width
        assert long.replace(" ", "") in "".join(texts).replace(" ", "")  # every character, in order


def test_an_emoji_in_a_message_keeps_the_panels_borders():
    # gloo's "... an error. GLHF! 🏖️": terminals and Rich disagree on the emoji's width, and
    # the event log's and the alerts' right borders moved on that line.
    from rich.cells import cell_len

    from pardash.tui.format import tame

    text = tame("rank 1 error after step 299: Connection closed by peer, likely an error. GLHF! 🏖️")
    assert text.endswith("GLHF! ") and cell_len(text) == len(text)
    assert tame("µs ✓ × ⚠ ±") == "µs ✓ × ⚠ ±"  # the glyphs the TUI draws itself stay


async def test_a_ranks_events_written_while_hidden_are_rewrapped_when_the_terminal_grows():
    # Below 34 rows the detail screen hides its event panel; the lines written then were
    # wrapped at RichLog's min_width (20 columns) and stayed so after the terminal grew.
    from tui_helpers import replay_app

    from pardash.tui.screens.rank_detail import RankDetailScreen
    from pardash.tui.widgets.event_log import EventLog

    app = replay_app("exited4.jsonl")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("down", "enter")  # rank 1, the one that failed
        await pilot.pause()
        assert isinstance(app.screen, RankDetailScreen)
        await pilot.resize_terminal(200, 60)
        await pilot.pause()
        log = app.screen.query_one(EventLog)
        texts = [strip.text.rstrip() for strip in log.lines]
        assert "RuntimeError: CUDA error: an illegal" in texts[0], texts  # at the panel's width, not at 20
        assert max(map(len, texts)) <= log.scrollable_content_region.width


def test_an_error_heard_after_the_exits_it_caused_is_said_before_them():
    # 1024 simulated ranks, rank 500 crashing: "ranks 0-499, 501-1023 exited with code -15"
    # came ahead of "rank 500 error after step 119" (the hub takes from each rank in turn).
    msgs = [schema.Event(rank=-1, seq=-1, name="hub", message="hub started")]
    msgs += [schema.Event(rank=r, name="exit", code=-15, message="stopped by torchrun") for r in range(1024) if r != 500]
    msgs += [schema.Event(rank=500, name="error", step=119, message="RuntimeError: simulated crash")]
    msgs += [schema.Event(rank=500, name="exit", code=1, step=120)]
    assert [describe(*e)[0] for e in group_alike(msgs)] == [
        "hub: hub started",
        "rank 500 error after step 119: RuntimeError: simulated crash",
        "rank 500 exited with code 1",  # (and its exit ahead of the stops it caused)
        "ranks 0-499, 501-1023 stopped by torchrun (SIGTERM)",  # (a stop, as the header says it)
    ]


def test_an_error_goes_only_ahead_of_the_exits_just_before_it():
    # The event log writes the whole history through group_alike again (a resize, a seek): a
    # later attempt's error went ahead of the first attempt's exits and restart.
    msgs = [
        schema.Event(rank=1, name="error", message="RuntimeError: boom", t=10.0),
        schema.Event(rank=1, name="exit", code=1, t=11.0),
        schema.Event(rank=0, seq=-1, name="exit", code=-15, message="stopped by torchrun", t=11.0),
        schema.Event(rank=0, seq=-1, name="restart", code=1, message="rank 0 restarted by torchrun (restart 1)", t=12.0),
        schema.Event(rank=0, seq=-1, name="exit", code=-9, message="killed", t=4999.0),
        schema.Event(rank=0, name="error", message="RuntimeError: again", t=5000.0),
    ]
    assert [describe(*e)[0] for e in group_alike(msgs)] == [
        "rank 1 error: RuntimeError: boom",
        "rank 1 exited with code 1",
        "rank 0 stopped by torchrun (SIGTERM)",
        "rank 0 restarted by torchrun (restart 1)",
        "rank 0 error: RuntimeError: again",  # (ahead of the exit 1 s before it)
        "rank 0 exited with code -9: killed",
    ]


def test_a_scripts_own_event_named_restart_is_not_torchruns():
    from pardash.telemetry.state import RunState

    own = [schema.Event(rank=r, seq=5, name="restart", message=f"reconnected to data server {r}") for r in (2, 3)]
    assert [describe(*e)[0] for e in group_alike(own)] == [
        "rank 2 restart: reconnected to data server 2",
        "rank 3 restart: reconnected to data server 3",
    ]
    st = RunState(run_id="r", track_seq=False)
    st.apply(schema.Event(rank=2, name="exit", code=1, seq=4), 0.0)
    st.apply(schema.Event(rank=2, seq=5, name="restart", code=3, message="reconnected"), 0.0)
    assert st.ranks[2].restarts == 0 and st.ranks[2].exit_code == 1


def test_a_backends_error_is_one_short_line_without_its_source_path_and_sign_off():
    # A gloo timeout or a peer gone filled several lines of a 43-column pane with a C++ path,
    # a callback's wrapper and gloo's sign-off, and pushed the events that mattered off it.
    peer = (
        "RuntimeError: Got the following error when running the callback: RuntimeError: "
        "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:42723. This is typically caused by a remote worker crashing. Check the logs of the remote "
        "worker before reporting an error. GLHF! \U0001f3d6\ufe0f\n\nAt:\n  /work/trainer/strategies.py(239): done\n"
    )
    timeout = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 60000ms for recv operation to complete"
    msgs = [
        schema.Event(rank=1, name="error", step=99, message=peer),
        schema.Event(rank=0, name="error", step=99, message=timeout),
        schema.Event(rank=2, name="exit", code=1, step=99, message=timeout),
        schema.Event(rank=3, name="error", step=5, message="ValueError: " + "x" * 400),
    ]
    lines = [describe(m)[0] for m in msgs]
    assert lines[:3] == [
        "rank 1 error after step 99: RuntimeError: Connection closed by peer [127.0.0.1]:42723. This is typically caused by a remote worker crashing.",
        "rank 0 error after step 99: RuntimeError: Timed out waiting 60000ms for recv operation to complete",
        "rank 2 exited with code 1: RuntimeError: Timed out waiting 60000ms for recv operation to complete",
    ]
    assert lines[3].endswith("x…") and len(lines[3]) < 200


async def test_a_replay_started_at_its_end_shows_its_newest_event_in_a_one_line_log():
    # `pardash replay LOG --start end` below 72 columns: the event panel, one line high under
    # the alerts, showed the log's oldest line ("00:00 hub: hub started…"), not its newest:
    # the jump to the end scrolled before the panel shrank to its final height.
    from tui_helpers import DATA, strip_text

    from pardash.telemetry.client import ReplaySource
    from pardash.tui.app import make_app
    from pardash.tui.widgets.event_log import EventLog

    app = make_app(ReplaySource(str(DATA / "exited4.jsonl"), start_s=1e9))
    async with app.run_test(size=(70, 24)) as pilot:
        await pilot.pause()
        log = app.screen.query_one("#events", EventLog)
        rows = log.scrollable_content_region.height
        assert 0 < rows < len(log.lines)
        shown = [strip_text(line) for line in log.lines[log.scroll_offset.y :][:rows]]
        assert shown[-1] == strip_text(log.lines[-1]), shown


def test_a_hub_line_before_the_run_starts_is_as_wide_as_the_lines_after_it():
    # The hub starts seconds before its ranks' first word (the run's 00:00): its line read
    # "-00:09 hub: ..." above "00:18 ranks ...", one column out of line with every other.
    assert [fmt_clock(t) for t in (-9.5, -0.4, 0.0, 18.0)] == ["-0:09", "00:00", "00:00", "00:18"]
    assert len(fmt_clock(-599)) == len(fmt_clock(18)) == 5
    assert fmt_clock(-754) == "-12:34" and fmt_clock(-3725) == "-1:02:05"


def test_an_error_before_any_step_says_so_not_after_step_0():
    # An error event carries the last step done: 0 before the first, read "error after step 0".
    before = describe(schema.Event(rank=1, name="error", step=0, message="train.py: error: unrecognized arguments: --bogus"))
    assert before[0] == "rank 1 error before its first step: train.py: error: unrecognized arguments: --bogus"
    assert describe(schema.Event(rank=1, name="error", step=299, message="boom"))[0] == "rank 1 error after step 299: boom"
    assert describe(schema.Event(rank=1, name="checkpoint", step=0, message="/ck/step-0"))[0].startswith("rank 1 checkpoint at step 0")


async def test_an_events_printed_time_never_changes_once_said():
    # A live run: "00:00 hub: hub started" while the ranks were awaited (counted from the hub's
    # first record), then "-0:02 hub: hub started" once they spoke (the run's 00:00 moved to
    # their first word) - the same line's time changed under the user's eyes. Now it has no
    # time until the zero is known ("--:--"), then the one it keeps.
    from pardash.telemetry.client import FrameApplier, NullDetector
    from pardash.telemetry.hubcore import HubCore
    from pardash.tui.app import make_app
    from pardash.tui.widgets.event_log import EventLog

    class Live(FrameApplier):
        live, synced, pending = True, True, False

        def poll(self) -> bool:
            changed, self.pending = self.pending, False
            return changed

        def close(self) -> None:
            pass

    core = HubCore(run_id="r", detector=NullDetector())  # type: ignore[arg-type]
    viewer = Live()
    core.replay(schema.Event(rank=-1, seq=-1, name="hub", message="hub started (pid 1)", run="r", t=1000.0), 1000.0)
    viewer.apply_frame(core.tick(1000.1))
    said: dict[str, set[str]] = {}
    app = make_app(viewer)
    async with app.run_test(size=(120, 40)) as pilot:

        async def look() -> list[str]:
            app._poll()
            await pilot.pause()
            lines = [line.text.rstrip() for line in app.screen.query_one("#events", EventLog).lines]
            for line in lines:
                clock, _, text = line.partition(" ")
                said.setdefault(text, set()).add(clock)
            return lines

        assert await look() == ["--:-- hub: hub started (pid 1)"]
        for r in (0, 1):
            core.replay(schema.Hello(rank=r, world_size=2, strategy="ddp", run="r", t=1002.0), 1002.0)
        viewer.apply_frame(core.tick(1002.1))
        viewer.pending = True
        for s in range(1, 4):
            for r in (0, 1):
                core.replay(schema.Step(rank=r, step=s, loss=1.0, samples=8, step_s=1.0, run="r", t=1002.0 + s), 1002.0 + s)
            if s == 3:
                core.replay(schema.Event(rank=0, name="checkpoint", step=3, run="r", t=1005.5), 1005.5)
            viewer.apply_frame(core.tick(1002.1 + s))
            viewer.pending = True
            await look()
        assert (await look())[:2] == ["-0:02 hub: hub started (pid 1)", "00:03 rank 0 checkpoint at step 3"]
    # Each line's time: none, then one for good.
    assert {text: clocks - {"--:--"} for text, clocks in said.items()} == {
        "hub: hub started (pid 1)": {"-0:02"},
        "rank 0 checkpoint at step 3": {"00:03"},
    }, said


def test_a_scripts_own_event_of_many_ranks_is_one_line_too():
    # pardash.event("my_eval", ...) on every rank was a line per rank (checkpoints and warnings
    # were one line): at 256 ranks, 256 lines.
    msgs = [schema.Event(rank=r, name="my_eval", step=50, message="top-1 0.91") for r in range(256)]
    msgs.append(schema.Event(rank=3, name="my_eval", step=50, message="top-1 0.40"))
    assert [describe(*e)[0] for e in group_alike(msgs)] == [
        "ranks 0-255 my eval at step 50: top-1 0.91",
        "rank 3 my eval at step 50: top-1 0.40",
    ]


def test_an_evaluation_is_said_after_its_step_as_the_headless_line_says_it():
    # "ranks 0-1 eval at step 0" of a baseline evaluation before training, where the headless
    # line said "before the first step"; "at step 10" of one after it.
    msgs = [schema.Event(rank=r, name="eval", step=s, duration_s=0.2) for s in (0, 10) for r in (0, 1)]
    assert [describe(*e)[0] for e in group_alike(msgs)] == [
        "ranks 0-1 eval before the first step (slowest 200ms)",
        "ranks 0-1 eval after step 10 (slowest 200ms)",
    ]


async def test_a_reader_scrolled_up_stays_where_they_are_as_lines_come_and_are_written_again():
    # Every new line took a reader who had scrolled up to read an earlier event back to the
    # end (and so did writing every line again, on a theme change or past the state's bound).
    from textual.app import App

    from pardash.telemetry.state import RunState
    from pardash.tui.widgets.event_log import EventLog

    class One(App):
        CSS = "EventLog { width: 60; height: 8; }"

        def compose(self):
            yield EventLog()

    def epoch(step: int) -> schema.Event:  # (a script's own event each: epoch ends and checkpoints would be one line)
        return schema.Event(rank=0, seq=step, name="snapshot", step=step, hseq=step)

    app = One()
    async with app.run_test(size=(70, 12)) as pilot:
        st, log = RunState(), app.query_one(EventLog)
        for step in range(1, 41):
            st.apply(epoch(step), 0.0)
        log.sync(st)
        await pilot.pause()

        def top() -> str:
            return log.lines[round(log.scroll_y)].text

        assert "step 40" in log.lines[-1].text and log.scroll_y == log.max_scroll_y > 0
        log.scroll_to(y=10, animate=False, immediate=True)  # (as the wheel or the arrow keys do)
        await pilot.pause()
        assert "snapshot at step 11" in top()

        for step in range(41, 46):  # new lines come
            st.apply(epoch(step), 0.0)
        log.sync(st)
        await pilot.pause()
        assert "snapshot at step 11" in top() and "step 45" in log.lines[-1].text

        app.theme = "textual-light" if app.theme != "textual-light" else "nord"  # written again
        await pilot.pause()
        assert "step 45" in log.lines[-1].text
        assert "snapshot at step 11" in top()
        log.styles.width = 26  # wrapped again, each line in two rows: row 10 is another event's
        await pilot.pause()
        await pilot.pause()
        assert len(log.lines) == 90 and top().startswith("--:-- rank 0 snapshot"), top()
        assert log.lines[round(log.scroll_y) + 1].text.startswith("at step 11"), top()

        log.scroll_end(animate=False, immediate=True)  # back at the end: it follows again
        await pilot.pause()
        st.apply(epoch(46), 0.0)
        log.sync(st)
        await pilot.pause()
        await pilot.pause()
        assert "step 46" in log.lines[-1].text and log.scroll_y == log.max_scroll_y


async def test_epoch_ends_one_after_another_are_one_line_that_the_next_updates():
    # A job whose epochs end every 50 steps wrote "ranks 0-1 epoch end at step 50: epoch 1
    # ended" and a line for each after it, a screenful a minute that pushed the verdicts,
    # warnings and errors out of the panel. Consecutive ones are one line, brought up to date by
    # each; anything else said between them ends it (the log and the report keep every one).
    from textual.app import App

    from pardash.telemetry.state import RunState
    from pardash.tui.widgets.event_log import EventLog

    class One(App):
        CSS = "EventLog { width: 70; height: 8; }"

        def compose(self):
            yield EventLog()

    hseq = iter(range(1, 10_000))

    def epoch_end(rank: int, n: int) -> schema.Event:
        return schema.Event(rank=rank, seq=n, name="epoch_end", step=50 * n, message=f"epoch {n} ended", t=T0 + n, hseq=next(hseq))

    def texts(log) -> list[str]:
        return [line.text.rstrip()[6:] for line in log.lines]  # (less the clock)

    app = One()
    async with app.run_test(size=(80, 12)) as pilot:
        st, log = RunState(), app.query_one(EventLog)
        st.apply(schema.Event(rank=-1, seq=-1, name="hub", message="hub started", t=T0, hseq=next(hseq)), 0.0)
        for r in (0, 1):
            st.apply(schema.Hello(rank=r, seq=0, world_size=2, t=T0, hseq=next(hseq)), 0.0)
        st.apply(epoch_end(0, 1), 0.0)  # rank 1's end of epoch 1 comes with the next frame
        log.sync(st)
        await pilot.pause()
        assert texts(log) == ["hub: hub started", "rank 0 epoch end at step 50: epoch 1 ended"]
        for m in (epoch_end(1, 1), epoch_end(0, 2), epoch_end(1, 2)):
            st.apply(m, 0.0)
            log.sync(st)
            await pilot.pause()
        assert texts(log) == ["hub: hub started", "ranks 0-1 ended epochs 1-2 (the last at step 100)"]
        assert log.lines[-1].text.startswith("00:02 ")  # (the newest one's time)
        for n in range(3, 42):  # many frames' worth at once (a late viewer, a seek)
            st.apply(epoch_end(0, n), 0.0)
            st.apply(epoch_end(1, n), 0.0)
        log.sync(st)
        await pilot.pause()
        assert texts(log) == ["hub: hub started", "ranks 0-1 ended epochs 1-41 (the last at step 2050)"]
        # A verdict between them ends the line; the epochs after it begin another.
        st.apply(schema.Verdict(rank=1, seq=-1, verdict="straggler", step=2060, message="rank 1 is a straggler", t=T0 + 42, hseq=next(hseq)), 0.0)
        log.sync(st)
        for n in (42, 43):
            st.apply(epoch_end(0, n), 0.0)
            st.apply(epoch_end(1, n), 0.0)
            log.sync(st)
            await pilot.pause()
        want = [
            "hub: hub started",
            "ranks 0-1 ended epochs 1-41 (the last at step 2050)",
            "rank 1 is a straggler",
            "ranks 0-1 ended epochs 42-43 (the last at step 2150)",
        ]
        assert texts(log) == want
        # Written again (a theme change, a new width): the same lines.
        app.theme = "textual-light" if app.theme != "textual-light" else "nord"
        await pilot.pause()
        assert texts(log) == want
        # A script's own words of its epochs: the newest said, and they are counted.
        st.apply(schema.Event(rank=0, seq=99, name="warning", step=2199, message="slow disk", t=T0 + 49, hseq=next(hseq)), 0.0)
        for k in range(3):
            st.apply(schema.Event(rank=0, seq=100 + k, name="epoch_end", step=2200 + k, message=f"val acc 0.9{k}", t=T0 + 50 + k, hseq=next(hseq)), 0.0)
        log.sync(st)
        await pilot.pause()
        assert texts(log)[4:] == ["rank 0 warning after step 2199: slow disk", "rank 0 ended 3 epochs (steps 2200 to 2202): val acc 0.92"]

async def test_epoch_ends_and_checkpoints_taking_turns_are_one_line():
    # A job saving at each epoch's end (`--checkpoint-every` an epoch's steps) filled the panel
    # with the two taking turns, three rows an epoch ("ranks 0-1 epoch end at step 60: epoch 2
    # ended", "ranks 0-1 checkpoint at step 60 (slowest 263ms):", its path), and the epoch ends'
    # fold never came. Both fold into one line the next of either brings up to date.
    from textual.app import App

    from pardash.telemetry.state import RunState
    from pardash.tui.widgets.event_log import EventLog

    class One(App):
        CSS = "EventLog { width: 100; height: 8; }"

        def compose(self):
            yield EventLog()

    hseq = iter(range(1, 10_000))

    def end(rank: int, n: int) -> schema.Event:
        return schema.Event(rank=rank, seq=2 * n, name="epoch_end", step=20 * n, message=f"epoch {n} ended", t=T0 + n, hseq=next(hseq))

    def save(rank: int, n: int, took: float) -> schema.Event:
        return schema.Event(rank=rank, seq=2 * n + 1, name="checkpoint", step=20 * n, message=f"/ck/step-{20 * n:08d}",
                            duration_s=took, t=T0 + n, hseq=next(hseq))  # fmt: skip

    def texts(log) -> list[str]:
        """Each line (its rows, where it wrapped, joined), less its clock."""
        rows = [line.text.rstrip() for line in log.lines]
        starts = [row for _, row in log._starts] + [len(rows)]
        return [" ".join(rows[a:b])[6:] for a, b in zip(starts, starts[1:])]

    app = One()
    async with app.run_test(size=(160, 12)) as pilot:
        st, log = RunState(), app.query_one(EventLog)
        for r in (0, 1):
            st.apply(schema.Hello(rank=r, seq=0, world_size=2, t=T0, hseq=next(hseq)), 0.0)
        st.apply(save(0, 1, 0.2), 0.0)
        st.apply(save(1, 1, 0.25), 0.0)
        log.sync(st)
        await pilot.pause()
        assert texts(log) == ["ranks 0-1 checkpoint at step 20 (slowest 250ms): /ck/step-00000020"]  # (one: as it was)
        for n in range(2, 10):
            for m in (end(0, n), end(1, n), save(0, n, 0.1 * n), save(1, n, 0.1)):
                st.apply(m, 0.0)
            log.sync(st)
            await pilot.pause()
        assert texts(log) == [
            "ranks 0-1 ended epochs 2-9 (the last at step 180) and saved 9 checkpoints, steps 20-180 (slowest 900ms): /ck/step-00000180"
        ]
        assert log.lines[0].text.startswith("00:09 ")  # (the newest one's time)
        # A warning between them ends the line; the next ones begin another (here rank 0 alone
        # saves: its ranks are named apart).
        st.apply(schema.Event(rank=1, seq=50, name="warning", step=180, message="slow disk", t=T0 + 9, hseq=next(hseq)), 0.0)
        for m in (end(0, 10), end(1, 10), save(0, 10, 0.3)):
            st.apply(m, 0.0)
        log.sync(st)
        await pilot.pause()
        assert texts(log)[1:] == [  # (one of each: their lines as they were)
            "rank 1 warning after step 180: slow disk",
            "ranks 0-1 epoch end at step 200: epoch 10 ended",
            "rank 0 checkpoint at step 200 (300ms): /ck/step-00000200",
        ]
        for m in (end(0, 11), end(1, 11), save(0, 11, 0.2)):
            st.apply(m, 0.0)
        log.sync(st)
        await pilot.pause()
        assert texts(log)[1:] == [
            "rank 1 warning after step 180: slow disk",
            "ranks 0-1 ended epochs 10-11 (the last at step 220); rank 0 saved 2 checkpoints, steps 200-220 (slowest 300ms): /ck/step-00000220",
        ]


T0 = 1.7e9



def test_a_textual_whose_richlog_keeps_other_fields_writes_the_log_again_instead():
    # Taking a written line back uses RichLog's own fields (it has no public way); pyproject
    # allows any Textual >= 0.80, and one without them would raise AttributeError out of the
    # panel's sync at each epoch end. It asks for the whole log written again instead (from
    # the state, where consecutive ends fold: the theme change of the test above).
    from types import SimpleNamespace

    from pardash.tui.widgets.event_log import EventLog, RoutineRun

    ends = RoutineRun(schema.Event(rank=0, seq=1, name="epoch_end", step=50, message="epoch 1 ended", t=T0, hseq=1))
    ends.row = 0
    log = SimpleNamespace(_state_id=123, _size_known=True, lines=["a line"], _starts=[(1, 0)])
    assert EventLog._unwrite(log, ends) is False
    assert log._state_id == 0 and log.lines == ["a line"]
