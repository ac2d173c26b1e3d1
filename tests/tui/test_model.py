"""The figures the dashboard derives from a run state, without Textual."""

from __future__ import annotations

import math
import statistics

import pytest

from pardash.telemetry import schema
from pardash.telemetry.state import RunState
from pardash.tui import format as fmt
from pardash.tui.alerts import SEVERITY, run_alerts
from pardash.tui.charts import chart_series, run_series
from pardash.tui.memory import memory_savings
from pardash.tui.model import RowBuilder, leave_one_out_medians, sort_rows, throughput


@pytest.mark.parametrize(
    "values",
    [[1.0, 2.0], [3.0, 1.0, 2.0], [5.0, 1.0, 4.0, 2.0], [1.0, 1.0, 1.0, 9.0, 1.0], [0.2, 0.4, 0.1, 0.3, 0.5, 0.6]],
)
def test_leave_one_out_medians_match_the_definition(values):
    got = leave_one_out_medians(values)
    for i in range(len(values)):
        others = values[:i] + values[i + 1 :]
        assert got[i] == pytest.approx(statistics.median(others))


def test_leave_one_out_of_one_value_is_unknown():
    assert leave_one_out_medians([1.0]) == [None]


@pytest.mark.parametrize(
    ("fn", "value", "text"),
    [
        (fmt.fmt_bytes, 497_759_232, "475 MiB"),
        (fmt.fmt_bytes, 1536, "1.50 KiB"),
        (fmt.fmt_bytes, None, "–"),
        (fmt.fmt_step_time, 0.2431, "243ms"),
        (fmt.fmt_step_time, 0.0512, "51.2ms"),
        (fmt.fmt_step_time, 0.0008, "800µs"),
        (fmt.fmt_step_time, 1.25, "1.25s"),
        (fmt.fmt_step_time, 0.09996, "100ms"),
        (fmt.fmt_step_time, 0.0009996, "1.0ms"),
        (fmt.fmt_step_time, 0.9996, "1.00s"),
        (fmt.fmt_step_time, 0.0999, "99.9ms"),
        (fmt.fmt_duration, 3725, "1h02m"),
        (fmt.fmt_duration, 65, "1m05s"),
        (fmt.fmt_loss, 2.31412, "2.3141"),
        (fmt.fmt_loss, 12345.0, "1.2e+04"),
        (fmt.fmt_deviation, 0.45, "+45%"),
        (fmt.fmt_deviation, -0.001, "0%"),
        (fmt.fmt_deviation, 2.1, "3.1×"),
        (fmt.fmt_deviation, 9.2, "10×"),
        (fmt.fmt_deviation, 8.94, "9.9×"),
        (fmt.fmt_deviation, 998.0, "999×"),
        (fmt.fmt_deviation, 5000.0, ">999×"),
        (fmt.fmt_rate, 12345.0, "12.3k"),
    ],
)
def test_formats(fn, value, text):
    assert fn(value) == text


def _state(world: int = 4, strategy: str = "fsdp", params: int = 1000, *, sharded: bool = True) -> RunState:
    st = RunState(run_id="r")
    t = 1.0
    for r in range(world):
        st.apply(
            schema.Hello(
                rank=r, world_size=world, node=r // 2, host=f"h{r // 2}", strategy=strategy, params_count=params, t=t
            ),
            0,
        )
    div = world if sharded else 1
    for step in range(5):
        steps = []
        for r in range(world):
            self_s = 0.10 if r != 2 else 0.15
            mem = schema.Mem(
                params_bytes=4 * params // div, grads_bytes=4 * params // div, optim_bytes=8 * params // div,
                params_full_bytes=4 * params, grads_full_bytes=4 * params, optim_full_bytes=8 * params,
            )  # fmt: skip
            s = schema.Step(rank=r, step=step, loss=1.0, samples=8, step_s=0.2, self_s=self_s, t=t + step, mem=mem)
            st.apply(s, 0)
            steps.append(s)
        st.commit_history(steps)
    return st


def test_rows_compare_self_time_with_the_others_median():
    st = _state()
    rows = RowBuilder().build(st)
    by_rank = {row.rank: row for row in rows}
    assert by_rank[2].self_dev == pytest.approx(0.5)
    assert by_rank[0].self_dev == pytest.approx(0.0)
    assert by_rank[2].deviation_level == 2 and by_rank[0].deviation_level == 0
    assert [row.rank for row in sort_rows(rows, "self_time")][0] == 2
    for r in range(4):  # once every rank is done, no excess is judged: the self times order them
        st.apply(schema.Event(rank=r, name="exit", code=0, step=4, seq=9), 0)
    assert [row.rank for row in sort_rows(RowBuilder().build(st), "self_time")][0] == 2


def test_a_stalled_rank_shows_no_deviation_from_before_its_stall():
    # Its figure was frozen from before the stall, and pointed at a victim ("+4.4x").
    st = _state()
    st.apply(schema.Verdict(rank=2, verdict="stalled", cause="comm", step=4), 0)
    by_rank = {row.rank: row for row in RowBuilder().build(st)}
    assert by_rank[2].self_dev is None and by_rank[2].deviation_level == 0
    assert by_rank[0].self_dev == pytest.approx(0.0)


def test_the_header_elapsed_ends_with_the_ranks_not_the_hubs_last_note():
    # A replay read "elapsed 1m40s" for a 19 s run: the hub's "hub stopped" note, written when
    # the viewer that kept it up left, counted.
    from types import SimpleNamespace

    from pardash.telemetry.frames import HubStats
    from pardash.tui.widgets.run_header import summarize

    st = _state()  # steps at t = 1..5
    st.apply(schema.Event(rank=-1, name="hub", message="hub stopped", t=100.0), 0)
    assert summarize(SimpleNamespace(state=st, stats=HubStats(), live=False)).elapsed_s == pytest.approx(4.0)


def test_the_header_says_when_torchrun_restarted_the_job():
    # Only the rank detail said "restarted 1 time".
    from types import SimpleNamespace

    from pardash.telemetry.frames import HubStats
    from pardash.tui.widgets.run_header import summarize

    st = _state()
    src = SimpleNamespace(state=st, stats=HubStats(), live=False)
    assert summarize(src).restarts == 0
    st.apply(schema.Hello(rank=1, world_size=4, restart=1, t=6.0), 0)
    s = summarize(src)
    assert s.restarts == 1


def test_sorting_by_time_ignores_a_few_percent_of_noise():
    # 256 ranks at 129-132 ms swapped places every frame (a node label with each).
    rows = RowBuilder().build(_state())
    times = {0: 0.131, 1: 0.129, 2: 0.200, 3: 0.130}
    for row in rows:
        row.step_s = times[row.rank]
    assert [r.rank for r in sort_rows(rows, "step_time")] == [2, 0, 1, 3]


def test_a_small_models_noise_is_not_coloured_but_a_real_excess_is():
    # On a healthy 2-rank CPU run with ~1 ms self times, +25% (0.25 ms) flashed the alarm
    # colour from frame to frame; the colour now also needs 5 ms of excess, as a verdict does.
    from pardash.tui.model import DEVIATION_ABS_S

    st = _state(world=2)
    builder = RowBuilder()
    for step, times in ((5, (0.0010, 0.0013)), (6, (0.100, 0.130))):
        steps = [schema.Step(rank=r, step=step, samples=8, step_s=0.2, self_s=x, t=10.0 + step) for r, x in enumerate(times)]
        for _ in range(6):  # fill the smoothing window
            for s in steps:
                st.apply(s, 0)
            st.commit_history(steps)
        rows = {row.rank: row for row in builder.build(st)}
        excess = times[1] - times[0]
        assert rows[1].self_dev == pytest.approx(0.3)
        assert rows[1].deviation_level == (0 if excess < DEVIATION_ABS_S else 2), step
        assert builder.heat_key(1)[1] == rows[1].deviation_level


@pytest.mark.parametrize("step_s, self_s, level", [(0.0065, (0.0005, 0.0049), 2), (0.002, (0.0010, 0.0016), 0)])
def test_the_deviation_colour_takes_the_detectors_bar_for_the_steps_time(step_s, self_s, level):
    # In 6.5 ms steps a rank 4.4 ms slower than the other (9.8x), which the detector names,
    # was not coloured: the colour wanted a fixed 5 ms. In 2 ms steps 0.6 ms (+60%) stays
    # uncoloured (under the bar's 1 ms floor).
    st = _state(world=2)
    builder = RowBuilder()
    steps = [schema.Step(rank=r, step=5, samples=8, step_s=step_s, self_s=x, t=15.0) for r, x in enumerate(self_s)]
    for _ in range(6):  # fill the smoothing window
        for s in steps:
            st.apply(s, 0)
        st.commit_history(steps)
    rows = {row.rank: row for row in builder.build(st)}
    assert rows[1].deviation_level == level
    assert builder.heat_key(1)[1] == level


def test_throughput_sums_samples_over_step_time():
    assert throughput(_state()) == pytest.approx(4 * 8 / 0.2)


def test_the_header_rate_counts_the_steps_between_frames_at_their_own_sizes():
    # A script's epoch of 6 batches of 16 and a last one of 4, a step every 5 ms: the
    # reporter's burst went at each epoch's end, so each frame brought the partial step, and
    # the header read "samples/s 857" for 2,857 (a real run: 100 samples an epoch, 35 ms).
    from pardash.tui.model import RowBuilder

    st = RunState(run_id="r")
    st.apply(schema.Hello(rank=0, world_size=1, t=1000.0), 0)
    builder, total, rates = RowBuilder(), 0, []
    for step in range(1, 71):
        n = 4 if step % 7 == 0 else 16
        total += n
        if step % 7 == 0:  # a frame: this rank's latest step, the epoch's last
            st.apply_frame([schema.Step(rank=0, step=step, samples=n, samples_total=total, step_s=0.005, t=1000.0 + 0.005 * step)], 0.0)
            rates.append(builder.update(st).totals.samples_per_s)
    assert throughput(st) == pytest.approx(100 / 0.035)
    assert rates[-1] == pytest.approx(100 / 0.035)  # (the header: a median of the last updates)


def test_a_stuck_run_moves_no_samples_and_a_finished_one_says_what_it_ran_at():
    # The header and the progress lines kept the stalled ranks' last rate on screen for as
    # long as the stall lasted.
    from types import SimpleNamespace

    from pardash.telemetry.frames import HubStats
    from pardash.telemetry.printer import rate_text
    from pardash.tui.widgets.run_header import summarize

    st = _state()
    src = SimpleNamespace(state=st, stats=HubStats(), live=False)
    st.apply(schema.Verdict(rank=1, verdict="stalled", cause="data", step=4), 0)
    assert throughput(st) == pytest.approx(3 * 8 / 0.2) and rate_text(st) == "120 samples/s"
    for r in (0, 2, 3):
        st.apply(schema.Verdict(rank=r, verdict="stalled", cause="comm", step=4), 0)
    assert throughput(st) is None
    s = summarize(src)
    assert s.samples_per_s == 0.0 and not s.samples_per_s_when
    assert rate_text(st) == "0 samples/s"
    for r in range(4):  # the ranks come back, then all finish: the rate they ran at, "at the end"
        st.apply(schema.Verdict(rank=r, verdict="resumed", step=4), 0)
        st.apply(schema.Event(rank=r, name="exit", code=0, step=4), 0)
    s = summarize(src)
    assert s.samples_per_s_when == "at the end" and s.samples_per_s > 0 and rate_text(st).endswith("samples/s at the end")


def test_memory_savings_follow_zero_arithmetic():
    s = memory_savings(_state(world=4, params=1000))
    assert s is not None and s.sharded
    assert s.held_bytes == 4 * 16 * 1000 // 4
    assert s.full_bytes == 4 * 16 * 1000
    assert s.ratio == pytest.approx(4.0)
    assert s.expected_per_rank_bytes == 16 * 1000 // 4
    assert s.over_expectation == []


def test_an_fsdp_run_holding_full_copies_is_flagged():
    s = memory_savings(_state(world=4, params=1000, sharded=False))
    assert s is not None and s.over_expectation == [0, 1, 2, 3]
    ddp = memory_savings(_state(world=4, strategy="ddp", params=1000, sharded=False))
    assert ddp is not None and not ddp.sharded and ddp.over_expectation == []
    assert ddp.expected_per_rank_bytes == 16 * 1000 and ddp.sharded_expected_bytes == 16 * 1000 // 4


def test_a_rank_stalled_outside_any_collective_is_named_before_those_waiting_for_it():
    # 64 ranks stalled, rank 9 in its data loader, the others in the all-reduce waiting for it:
    # the alerts listed them by rank, the cause among the victims.
    st = _state()
    st.apply(schema.Verdict(rank=3, verdict="stalled", cause="data", step=4), 0)
    for r in (0, 1, 2):
        st.apply(schema.Verdict(rank=r, verdict="stalled", cause="backward", step=4), 0)
    alerts = run_alerts(st)
    assert [a.rank for a in alerts] == [3, 0, 1, 2]
    assert alerts[0].first and alerts[0].text == "rank 3 stalled in data after step 4, likely the cause: 3 others wait for it"
    assert not any(a.first for a in alerts[1:])
    # Every rank stuck in a collective's phase (or all in data): no guess.
    st.apply(schema.Verdict(rank=3, verdict="resumed", step=4), 0)
    st.apply(schema.Verdict(rank=3, verdict="stalled", cause="comm", step=4), 0)
    assert not any(a.first for a in run_alerts(st)) and [a.rank for a in run_alerts(st)] == [0, 1, 2, 3]


def test_alerts_name_the_cost_the_phase_and_the_code():
    st = _state()
    st.apply(
        schema.Verdict(
            rank=2,
            verdict="straggler",
            cost_s=0.05,
            message="rank 2 is a straggler (data loading): the others wait 50 ms a step for it",
        ),
        0,
    )
    st.apply(schema.Verdict(rank=1, verdict="stalled", cause="backward", step=4), 0)
    st.apply(schema.Event(rank=3, name="error", message="RuntimeError: boom\nmore"), 0)
    st.apply(schema.Event(rank=3, name="exit", code=1, step=5, seq=9), 0)
    alerts = run_alerts(st)
    assert [a.kind for a in alerts] == ["exited", "stalled", "straggler"]
    # The step it died in (its exit's), as the report says: not its last step done (4).
    assert alerts[0].text == "rank 3 exited with code 1 at step 5: RuntimeError: boom"
    assert alerts[1].text == "rank 1 stalled in backward after step 4"
    assert "50 ms a step" in alerts[2].text
    st.apply(schema.Verdict(rank=2, verdict="straggler_cleared"), 0)
    assert [a.kind for a in run_alerts(st)] == ["exited", "stalled"]


def test_chart_series_downsample_to_the_width_and_band_the_others():
    st = _state()
    s = chart_series(st, 2, "self_s", 10)
    assert s is not None
    assert len(s.values) == 10 and s.first_step == 0 and s.last_step == 4
    assert s.values[0] == pytest.approx(0.15)
    assert s.median[0] == pytest.approx(0.10) and s.high[0] == pytest.approx(0.10)
    assert s.others == 3
    assert chart_series(st, 99, "self_s", 10) is None


def test_the_runs_series_is_every_ranks_median_over_their_spread():
    st = RunState(run_id="r")
    for step in range(5):
        # rank 2's loss is 0.5 above the others' at every step
        steps = [schema.Step(rank=r, step=step, loss=2.0 - 0.1 * step + (0.5 if r == 2 else 0.0), t=1.0 + step) for r in range(4)]
        for s in steps:
            st.apply(s, 0)
        st.commit_history(steps)
    s = run_series(st, 10)
    assert s is not None and s.others == 4 and (s.first_step, s.last_step) == (0, 4)
    assert s.values[0] == pytest.approx(2.0) and s.values[-1] == pytest.approx(1.6)
    assert s.low[0] == pytest.approx(2.0) and s.high[0] == pytest.approx(2.5)
    assert all(math.isnan(m) for m in s.median)  # no rank of its own: no median rule over it
    assert s.latest == pytest.approx(1.6)
    assert run_series(RunState(run_id="r"), 10) is None


def test_the_runs_series_goes_back_to_the_first_step_of_a_long_run():
    # The chart drew the ranks' histories, which keep their last 240 points: at 10 steps a
    # second the run's curve began 24 s back, its early fall long gone.
    from pardash.telemetry.state import HISTORY_POINTS
    from pardash.telemetry.trend import TREND_POINTS

    st = RunState(run_id="r")
    frames = 20 * TREND_POINTS
    for step in range(1, frames + 1):
        steps = [schema.Step(rank=r, step=step, loss=10.0 / step, t=1.0 + step) for r in range(2)]
        for s in steps:
            st.apply(s, 0)
        st.commit_history(steps)
    assert len(st.ranks[0].history["step"]) == HISTORY_POINTS  # a rank's history: its last points
    assert TREND_POINTS / 2 <= len(st.trend) <= TREND_POINTS  # the run's: bounded, whole
    s = run_series(st, 50)
    assert s is not None and (s.first_step, s.last_step) == (1, frames)  # from the first step
    assert s.high[0] == pytest.approx(10.0)  # its loss, not merged away
    assert s.values[0] > 100 * s.values[-1]  # the early fall is drawn (the last 240 steps: 0.00104 to 0.00107)
    assert s.values[-1] == pytest.approx(10.0 / frames, rel=0.1)
    assert list(s.values) == sorted(s.values, reverse=True)


def test_a_silent_rank_says_since_when_not_a_count_that_goes_stale():
    # The verdict says "silent for 3 s" once; an alert quoting it said 3 s for as long as the
    # rank stayed silent.
    st = _state()
    st.apply(schema.Verdict(rank=1, verdict="silent", step=4, t=st.t0 + 83.5, message="rank 1 silent for 3 s (no heartbeat)"), 0)
    [alert] = run_alerts(st)
    # (since its last step, at 00:04: not since the verdict, which came at 01:23)
    assert (alert.kind, alert.text) == ("silent", "rank 1 silent since 00:04 (no heartbeat)")


def test_an_exited_ranks_step_is_its_last_attempts():
    # After a torchrun restart, a rank SIGKILLed at step 81 (the launcher's note, no step) was
    # said to have exited "at step 31", the step of its first attempt's own exit.
    st = RunState(run_id="r")
    for r in (0, 1):
        st.apply(schema.Hello(rank=r, world_size=2, pid=10 + r, t=1.0, seq=0, hseq=r + 1), 0)
    st.apply(schema.Event(rank=1, name="exit", code=1, step=31, seq=40, hseq=10), 0)
    st.apply(schema.Event(rank=1, name="restart", message="rank 1 restarted by torchrun", seq=-1, hseq=11), 0)
    st.apply(schema.Hello(rank=1, world_size=2, pid=20, restart=1, t=2.0, seq=0, hseq=12), 0)
    st.apply(schema.Step(rank=1, step=80, loss=1.0, t=3.0, seq=90, hseq=13), 0)
    st.apply(schema.Event(rank=1, name="exit", code=-9, message="torchrun: rank 1 exit code -9", seq=-1, hseq=14), 0)
    [alert] = [a for a in run_alerts(st) if a.kind == "exited"]
    assert " at step 81" in alert.text and "31" not in alert.text


def test_sorting_by_status_puts_the_root_cause_first():
    # 64 ranks exited, rank 5 the cause (its own error), the rest stopped by torchrun: sorted by
    # status, rank 5 sat in its place among them.
    st = RunState(run_id="r")
    for r in range(8):
        st.apply(schema.Hello(rank=r, world_size=8, pid=10 + r, t=1.0, seq=0, hseq=r + 1), 0)
        st.apply(schema.Step(rank=r, step=149, loss=1.0, step_s=0.1, t=2.0, seq=1, hseq=20 + r), 0)
    h = 100
    for r in (0, 1, 2, 3, 4, 6, 7):
        h += 1
        st.apply(schema.Event(rank=r, name="exit", code=-15, step=149, seq=2, hseq=h), 0)
    st.apply(schema.Event(rank=5, name="error", message="RuntimeError: boom", step=149, seq=2, hseq=h + 1), 0)
    st.apply(schema.Event(rank=5, name="exit", code=1, step=150, seq=3, hseq=h + 2), 0)
    rows = sort_rows(RowBuilder().build(st), "status")
    assert [r.rank for r in rows][:2] == [5, 0] and rows[0].exit_first is True


def test_a_hang_names_the_rank_behind_not_the_one_waiting_between_steps():
    # Rank 1 hung in its step 100 (after step 99); rank 0 finished step 100 and waits in the
    # loss all-reduce between steps, which reads as "data": rank 0 was named the cause.
    st = _state(world=2)
    st.apply(schema.Verdict(rank=0, verdict="stalled", cause="data", step=100), 0)
    st.apply(schema.Verdict(rank=1, verdict="stalled", cause="backward", step=99), 0)
    alerts = run_alerts(st)
    assert [a.rank for a in alerts] == [1, 0] and alerts[0].first
    assert alerts[0].text == "rank 1 stalled in backward after step 99, likely the cause: 1 other waits for it"


def test_a_finished_run_still_names_its_straggler():
    # A run slowed by rank 1 for most of its steps ended on "every rank finished" alone: the
    # verdict was left in the event log only.
    from pardash.tui.screens.dashboard import _stragglers_were

    st = _state(world=2)
    assert _stragglers_were(st) == ""
    st.apply(schema.Verdict(rank=1, verdict="straggler", cause="data", step=29, cost_s=0.05), 0)
    st.apply(schema.Verdict(rank=1, verdict="straggler_cleared", step=90), 0)
    for r in range(2):
        st.apply(schema.Event(rank=r, name="exit", code=0, step=100), 0)
    assert all(r.finished for r in st.ranks.values())
    # (and when it caught up: "found at step 29" alone read the same of a spell to the run's end)
    assert _stragglers_were(st) == " · rank 1 was a straggler (data), found at step 29, no longer at step 90"


def test_a_run_stopped_as_it_hung_says_so_once_its_ranks_have_exited():
    # A hang the user then stopped (q, Ctrl-C): the header said the rate of the steps before
    # the hang ("1774 at the end") and the alerts only "exited with code -15: stopped by you",
    # where the report says "rank 0 stalled in data after step 24 ... likely the cause".
    from types import SimpleNamespace

    from pardash.telemetry.frames import HubStats
    from pardash.telemetry.printer import rate_text
    from pardash.tui.widgets.run_header import summarize

    st = _state(world=2, strategy="ddp", sharded=False)
    src = SimpleNamespace(state=st, stats=HubStats(), live=False)
    st.apply(schema.Verdict(rank=1, verdict="stalled", cause="backward", step=4), 0)
    st.apply(schema.Verdict(rank=0, verdict="stalled", cause="data", step=4), 0)
    assert run_alerts(st)[0].text == "rank 0 stalled in data after step 4, likely the cause: 1 other waits for it"
    for r in (0, 1):
        st.apply(schema.Event(rank=r, name="exit", code=-15, message=f"rank {r} was stopped by you"), 0)
    alerts = run_alerts(st)
    assert [(a.rank, a.first) for a in alerts] == [(0, True), (1, False)]
    # (the hang's cause, stopped as it hung: the hang first, then the stop as every output words
    # it; it read "; then exited with code -15 at step 5: rank 0 was stopped by you")
    assert alerts[0].text == (
        "rank 0 stalled in data after step 4, likely the cause: 1 other waited for it;"
        " then stopped by you at step 5 (SIGTERM)"
    )
    assert alerts[0].kind == "stalled"  # (its hang's alert: ◆)
    # (the rank that waited: stopped, as the grid says it; it read "; then exited with code -15")
    assert alerts[1].text == "rank 1 stalled in backward after step 4; then stopped by you at step 5 (SIGTERM)"
    assert alerts[1].kind == "stopped"
    s = summarize(src)
    assert (s.samples_per_s, s.samples_per_s_when) == (0.0, "at the end (stalled)")
    assert rate_text(st) == "0 samples/s at the end (stalled)"
    # ...and the launcher's last line: it said only "stopped by you (exit code 143)".
    from pardash.telemetry.printer import outcome_line

    assert outcome_line(st, 143, {"stopped": True}, "run.jsonl") == (
        "pardash: stopped by you as it hung after step 4, likely waiting for rank 0 (exit code 143); log run.jsonl"
    )


def test_ranks_that_were_only_stopped_are_said_calmly_after_the_failures():
    # A job the user stopped read as a failure: "× rank 0 exited with code -15 at step 5: rank
    # 0 was stopped by you", in the failure's red, one line a rank; so did the ranks torchrun
    # stopped after another failed, beside the root cause.
    st = _state(world=2, strategy="ddp", sharded=False)
    for r in (0, 1):
        st.apply(schema.Event(rank=r, name="exit", code=-15, seq=-1, message="stopped by you"), 0)
    alerts = run_alerts(st)
    assert [(a.kind, a.text) for a in alerts] == [
        ("stopped", "rank 0 was stopped by you at step 5 (SIGTERM)"),
        ("stopped", "rank 1 was stopped by you at step 5 (SIGTERM)"),
    ]
    assert all(a.severity > SEVERITY["not_sharding"] for a in alerts)

    st = _state(world=3, strategy="ddp", sharded=False)
    st.apply(schema.Event(rank=1, name="error", message="RuntimeError: boom"), 0)
    st.apply(schema.Event(rank=1, name="exit", code=1, step=5, seq=9), 0)
    st.apply(schema.Event(rank=0, name="exit", code=-15, seq=-1, message="stopped by torchrun"), 0)
    st.apply(schema.Event(rank=2, name="exit", code=-15, seq=-1, message="rank 2 was stopped by torchrun"), 0)  # an older log's
    alerts = run_alerts(st)
    assert [(a.kind, a.rank, a.first) for a in alerts] == [("exited", 1, True), ("stopped", 0, False), ("stopped", 2, False)]
    assert alerts[0].text == "rank 1, the root cause, exited with code 1 at step 5: RuntimeError: boom"
    assert alerts[2].text == "rank 2 was stopped by torchrun at step 5 (SIGTERM)"

    # A straggler that then exited: its alert went with the exit, and nothing said it was one.
    st.apply(schema.Verdict(rank=0, verdict="straggler", cause="data", step=3, message="rank 0 is a straggler"), 0)
    alerts = run_alerts(st)
    assert [a.text for a in alerts if a.rank == 0] == ["rank 0 was stopped by torchrun at step 5 (SIGTERM); it was a straggler (data)"]
    # One that was, and no longer was by the end: its exit says nothing of it.
    st.apply(schema.Verdict(rank=0, verdict="straggler_cleared", step=4, message="rank 0 no longer a straggler"), 0)
    assert [a.text for a in run_alerts(st) if a.rank == 0] == ["rank 0 was stopped by torchrun at step 5 (SIGTERM)"]


def test_a_crash_stays_the_root_cause_of_ranks_stopped_as_they_waited_for_it():
    st = _state(world=2, strategy="ddp", sharded=False)
    st.apply(schema.Event(rank=1, name="error", message="RuntimeError: boom"), 0)
    st.apply(schema.Event(rank=1, name="exit", code=1, step=5, seq=9), 0)
    st.apply(schema.Verdict(rank=0, verdict="stalled", cause="comm", step=4), 0)
    st.apply(schema.Event(rank=0, name="exit", code=-15, message="rank 0 was stopped by torchrun"), 0)
    alerts = run_alerts(st)
    assert [(a.rank, a.first) for a in alerts] == [(1, True), (0, False)]
    assert alerts[0].text == "rank 1, the root cause, exited with code 1 at step 5: RuntimeError: boom"
    assert "likely the cause" not in alerts[1].text


def test_an_exits_alert_says_a_backends_error_in_a_line_without_its_source_path():
    # The panel is 40 columns: a gloo error's C++ path and its sign-off took its rows.
    st = _state(world=2, strategy="ddp", sharded=False)
    said = "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/common/linux.cc:214] Unable to find address for: eth7"
    st.apply(schema.Event(rank=1, name="error", message=said), 0)
    st.apply(schema.Event(rank=1, name="exit", code=1, step=5, seq=9), 0)
    (alert,) = run_alerts(st)
    assert alert.text == "rank 1 exited with code 1 at step 5: RuntimeError: Unable to find address for: eth7"


def test_a_done_ranks_detail_says_it_was_a_straggler_not_that_it_is():
    from pardash.tui.screens.rank_detail import RankDetailScreen

    st = _state()
    msg = "rank 2 is a straggler (data loading): the others wait 46 ms a step for it"
    st.apply(schema.Verdict(rank=2, verdict="straggler", cause="data", step=29, cost_s=0.046, message=msg), 0)
    screen = RankDetailScreen(2)
    screen._rows.update(st)  # (as each update does, before the title)
    # (its cost as the alerts say it, now: see test_a_ranks_detail_says_its_verdicts_as_the_alerts_do)
    assert "rank 2 is a straggler (data loading): the others wait" in screen._title(st, st.ranks[2]).plain
    st.apply(schema.Event(rank=2, name="exit", code=0, step=4, seq=9), 0)
    screen._rows.update(st)
    title = screen._title(st, st.ranks[2]).plain
    assert "is a straggler" not in title and "rank 2 was a straggler (data), found at step 29" in title


def test_figures_no_rank_could_send_do_not_break_the_viewer():
    # A hub is trusted less than its keys say: one that sent an infinite step time or a NaN
    # step number crashed the TUI (OverflowError sorting, ValueError charting).
    st = _state(world=2)
    st.ranks[1].step.step_s = float("inf")
    rows = RowBuilder().build(st)
    for row in rows:
        row.step_s = float("inf") if row.rank == 1 else row.step_s
    assert [r.rank for r in sort_rows(rows, "step_time")] == [0, 1]
    st.ranks[0].history.append_row(float("nan"), *[1.0] * (len(st.ranks[0].history.columns) - 1))
    assert chart_series(st, 0, "self_s", 10) is not None


def test_a_rank_failed_by_its_peers_crash_is_said_calmly_and_long_errors_are_cut():
    # Two ranks, rank 1 crashed: rank 0's gloo error read in the alert as
    # "RuntimeError: [/__w/pytorch/.../pair.cc:553] Connection closed by peer [127.0.0.1]:56543.
    # This is typically caused by a remote worker", cut mid-sentence by the panel's height.
    from pardash.tui.alerts import CAUSE_MAX

    gloo = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
            "[127.0.0.1]:56543. This is typically caused by a remote worker that exited early. GLHF!")  # fmt: skip
    st = _state(world=2, strategy="ddp", sharded=False)
    st.apply(schema.Event(rank=1, name="error", message="InjectedCrash: injected crash at step 100"), 0)
    st.apply(schema.Event(rank=1, name="exit", code=1, step=100, seq=9), 0)
    st.apply(schema.Event(rank=0, name="error", message=gloo), 0)
    st.apply(schema.Event(rank=0, name="exit", code=1, step=100, seq=9), 0)
    alerts = run_alerts(st)
    assert [(a.rank, a.first) for a in alerts] == [(1, True), (0, False)]
    assert alerts[0].text == "rank 1, the root cause, exited with code 1 at step 100: InjectedCrash: injected crash at step 100"
    assert alerts[1].text == "rank 0 exited with code 1 at step 100, after a peer failed (its connection closed)"
    # An error of its own, however long, ends in an ellipsis within the alert's room.
    st = _state(world=2, strategy="ddp", sharded=False)
    st.apply(schema.Event(rank=1, name="error", message="ValueError: " + "x" * 500), 0)
    st.apply(schema.Event(rank=1, name="exit", code=1, step=7, seq=9), 0)
    (alert,) = [a for a in run_alerts(st) if a.rank == 1]
    cause = alert.text.partition(": ")[2]
    assert len(cause) == CAUSE_MAX and cause.endswith("…") and cause.startswith("ValueError: xxx")


def test_the_runs_clock_starts_at_the_ranks_first_hello_not_a_clock_behind_nor_a_restart():
    # Live, the run's 00:00 is its ranks' first word (as a replay's): a rank whose clock is two
    # hours behind would make the run two hours long, and a hello of a process torchrun
    # restarted is no first word. The hub keeps the first hello's time through a restart and
    # a viewer attached after one gets it in its snapshot (it counted from the hub's start,
    # seconds before the ranks).
    from types import SimpleNamespace

    from pardash.telemetry import frames
    from pardash.telemetry.client import FrameApplier
    from pardash.telemetry.hubcore import HubCore
    from pardash.tui.run_clock import ranks_first_word, run_origin

    core = HubCore(run_id="r")
    st = core.state
    st.apply(schema.Event(rank=-1, seq=-1, name="hub", message="hub started", t=1000.0), 0)
    st.apply(schema.Hello(rank=0, world_size=2, t=1004.0), 0)
    st.apply(schema.Hello(rank=1, world_size=2, t=1005.0 - 7200), 0)
    live = SimpleNamespace(state=st, live=True)
    assert ranks_first_word(st) == 1004.0 and run_origin(live) == 1004.0
    for rank in (0, 1):
        st.apply(schema.Hello(rank=rank, world_size=2, t=1030.0, restart=1, pid=2), 0)
    assert ranks_first_word(st) == 1004.0 and run_origin(live) == 1004.0
    late = FrameApplier()
    late.load_snapshot(frames.decode_snapshot(frames.encode(core.snapshot())))
    assert ranks_first_word(late.state) == 1004.0
    # From a hub before the figure: a restart's hellos cannot say it, the hub's start stands.
    old = frames.decode_snapshot(frames.encode(core.snapshot()))
    old.first_hello_t = 0.0
    late.load_snapshot(old)
    assert ranks_first_word(late.state) is None and run_origin(SimpleNamespace(state=late.state, live=True)) == 1000.0


def test_a_stragglers_alert_says_what_it_costs_now_not_when_it_was_found():
    # The verdict said "the others wait 18 ms a step" when it was found; the grid showed the gap
    # grow to 50 ms and the alert kept saying 18 for the rest of the run.
    st = _state()  # rank 2's self time 150 ms, the others' 100 ms
    st.apply(
        schema.Verdict(
            rank=2, verdict="straggler", cause="data", cost_s=0.018,
            message="rank 2 is a straggler (data loading): the others wait 18 ms a step for it",
        ),
        0,
    )  # fmt: skip
    table = RowBuilder()
    table.update(st)
    costs = table.straggler_costs()
    assert costs == {2: pytest.approx(0.05)}
    (alert,) = run_alerts(st, costs=costs)
    assert alert.text == "rank 2 is a straggler (data loading): the others wait 50 ms a step for it"  # (in the hub's words)
    # Nothing to go on (no working rank to compare with): the verdict's own words.
    assert run_alerts(st)[0].text.endswith("the others wait 18 ms a step for it")


def test_a_rows_data_and_comm_are_on_the_basis_of_its_wall_time_beside_them():
    # The grid read "wall 128ms · comm 182ms": its wall the median of the last few steps, the
    # comm wait the last step's, a slow one.
    st = RunState(run_id="r")
    for r in range(2):
        st.apply(schema.Hello(rank=r, world_size=2, node=0, host="h", strategy="ddp", t=1.0), 0)
    for step in range(6):
        slow = step == 5
        steps = []
        for r in range(2):
            s = schema.Step(
                rank=r, step=step, loss=1.0, samples=8, step_s=0.25 if slow else 0.128, self_s=0.02,
                data_s=0.09 if slow else 0.004, comm_s=0.182 if slow else 0.06, t=2.0 + step,
            )  # fmt: skip
            st.apply(s, 0)
            steps.append(s)
        st.commit_history(steps)
    row = RowBuilder().build(st)[0]
    assert row.step_s == pytest.approx(0.128)
    assert row.comm_s == pytest.approx(0.06) and row.comm_s < row.step_s
    assert row.data_s == pytest.approx(0.004)


async def test_a_ranks_detail_says_now_what_its_title_says_of_its_last_step():
    # The title read "loss 0.6770", the loss chart under it "now 0.8295" (its newest point,
    # drawn at its own slower pace).
    from tui_helpers import replay_app

    from pardash.tui.screens.rank_detail import RankDetailScreen

    app = replay_app("straggler8.jsonl")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, RankDetailScreen)
        r = app.source.state.ranks[0]
        r.history.append_row(*[float(x) for x in range(len(r.history.keys()))])  # a newer sampled point
        r.step.loss = 0.677
        screen.refresh_run()
        screen._refresh_charts(force=True)
        assert screen.query_one("#chart-loss").border_subtitle.startswith("now 0.6770 ")
        assert "loss 0.6770" in screen.query_one("#title").render().plain


def test_the_headers_log_path_needs_no_working_folder(monkeypatch, tmp_path):
    # The header shortens the log's path against the working folder; a folder deleted under
    # the app (os.getcwd raises) would have stopped it mid-draw.
    from pardash.tui.widgets.run_header import short_log_path

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert short_log_path("/data/runs/r1/telemetry.jsonl", "r1") == ["/data/runs/r1/telemetry.jsonl", "/data/runs/…/telemetry.jsonl"]


async def test_the_header_counts_connections_refused_for_want_of_a_key_apart_from_records():
    # A node whose keys the hub does not admit tries again ~40 times a second: the header read
    # "rejected 825", records refused, an attack; the progress lines already said them apart.
    from types import SimpleNamespace

    from textual.app import App

    from pardash.telemetry.frames import HubStats
    from pardash.tui.widgets.run_header import RunHeader, summarize
    from tui_helpers import widget_text

    src = SimpleNamespace(state=_state(), stats=HubStats(rejected={"no_key": 825, "invalid": 3, "log_truncated": 1}), live=False)
    s = summarize(src)
    assert (s.rejected, s.no_key, s.skipped_lines) == (3, 825, 1)

    class One(App):
        def compose(self):
            yield RunHeader()

    app = One()
    async with app.run_test(size=(160, 6)) as pilot:
        app.query_one(RunHeader).summary = s
        await pilot.pause()
        text = widget_text(app.query_one(RunHeader))
    assert "rejected 3" in text and "no key 825" in text, text


def test_a_charts_columns_between_two_points_take_the_line_between_them():
    # Fast steps: the run's trend has a point a frame (here every 5th step), and the columns
    # between two points carried the earlier one: a loss falling smoothly drew flats and drops
    # ("4.1842 ┤▄▄▄▄▄" then a fall) the run never had.
    st = RunState(run_id="r")
    for step in (0, 5, 10):
        steps = [schema.Step(rank=r, step=step, loss=4.0 - 0.2 * step, t=1.0 + step) for r in range(2)]
        for s in steps:
            st.apply(s, 0)
        st.commit_history(steps)
    s = run_series(st, 11)
    assert s is not None and (s.first_step, s.last_step) == (0, 10)
    assert list(s.values) == pytest.approx([4.0 - 0.2 * c for c in range(11)])  # a straight fall
    assert list(s.low) == pytest.approx(list(s.values)) and list(s.high) == pytest.approx(list(s.values))
    # A rank's own chart and the others' band alike.
    mine = chart_series(st, 0, "loss", 11)
    assert mine is not None and list(mine.values) == pytest.approx([4.0 - 0.2 * c for c in range(11)])
    assert list(mine.median) == pytest.approx(list(mine.values))
    # After the last point the line carries it; before the first there is none.
    from pardash.tui.charts import _carry

    nan = float("nan")
    filled = _carry([nan, 1.0, nan, nan, 4.0, nan])
    assert math.isnan(filled[0]) and filled[1:] == pytest.approx([1.0, 2.0, 3.0, 4.0, 4.0])


def test_a_stragglers_alert_counts_the_others_wait_after_its_first_collective():
    # DDP over a checkpoint_wrapper'd model, rank 1 slow in its forward and again in its
    # backward's recompute: its self-time lead 10 ms, its peer's comm 20 ms more than its own.
    # The hub's verdict says 20 (stragglers.straggler_cost_s); the alert, which says the cost now
    # from the grid's figures, said 10, the self-time lead alone.
    st = RunState(run_id="r")
    for r in range(2):
        st.apply(schema.Hello(rank=r, world_size=2, node=0, host="h", strategy="ddp", t=1.0), 0)
    for step in range(1, 8):
        steps = [schema.Step(rank=r, step=step, loss=1.0, samples=8, step_s=0.04, self_s=(0.010, 0.020)[r],
                             comm_s=(0.023, 0.003)[r], t=1.0 + step) for r in range(2)]  # fmt: skip
        for s in steps:
            st.apply(s, 0)
        st.commit_history(steps)
    st.apply(schema.Verdict(rank=1, verdict="straggler", cause="compute", cost_s=0.020,
                            message="rank 1 is a straggler (compute): the others wait 20 ms a step for it"), 0)  # fmt: skip
    table = RowBuilder()
    table.update(st)
    assert table.straggler_costs() == {1: pytest.approx(0.020)}


def test_a_stragglers_live_cost_is_not_the_larger_of_two_noisy_measures_each_update():
    # Review 292: a rank 31-33 ms slow read 36-42 ms live: each update said the larger of its
    # self-time lead and the others' comm beyond its own, each noisy. Here the lead is 30 ms at
    # every update and the comm measure 34 and 20 by turns: the lead is the larger over the
    # updates, and said at each of them after the first.
    st = RunState(run_id="r")
    for r in range(2):
        st.apply(schema.Hello(rank=r, world_size=2, node=0, host="h", strategy="ddp", t=1.0), 0)
    st.apply(schema.Verdict(rank=1, verdict="straggler", cause="data", cost_s=0.030,
                            message="rank 1 is a straggler (data): the others wait 30 ms a step for it"), 0)  # fmt: skip
    table, said, step = RowBuilder(), [], 0
    for update in range(8):
        wait = 0.034 if update % 2 == 0 else 0.020
        for _ in range(8):
            step += 1
            steps = [schema.Step(rank=r, step=step, loss=1.0, samples=8, step_s=0.06, self_s=(0.010, 0.040)[r],
                                 comm_s=(0.005 + wait, 0.005)[r], t=1.0 + step) for r in range(2)]  # fmt: skip
            for m in steps:
                st.apply(m, 0)
            st.commit_history(steps)
        table.update(st)
        said.append(table.straggler_costs()[1])
    assert said == [pytest.approx(0.034)] + [pytest.approx(0.030)] * 7


def test_two_stragglers_alike_slow_each_cost_the_others_wait_in_the_alerts():
    # Review 298: `simulate --straggler 3,40`: the grid marked both ▲ while the alert said
    # "the others no longer wait for it": each was charged its lead over the other straggler.
    st = RunState(run_id="r")
    for r in range(4):
        st.apply(schema.Hello(rank=r, world_size=4, node=0, host="h", strategy="ddp", t=1.0), 0)
    for step in range(1, 8):
        steps = [schema.Step(rank=r, step=step, loss=1.0, samples=8, step_s=0.04, self_s=0.030 if r in (1, 2) else 0.010,
                             comm_s=0.003 if r in (1, 2) else 0.023, t=1.0 + step) for r in range(4)]  # fmt: skip
        for s in steps:
            st.apply(s, 0)
        st.commit_history(steps)
    for r in (1, 2):
        st.apply(schema.Verdict(rank=r, verdict="straggler", cause="data", cost_s=0.020,
                                message=f"rank {r} is a straggler (data): the others wait 20 ms a step for it"), 0)  # fmt: skip
    table = RowBuilder()
    table.update(st)
    assert table.straggler_costs() == {1: pytest.approx(0.020), 2: pytest.approx(0.020)}
