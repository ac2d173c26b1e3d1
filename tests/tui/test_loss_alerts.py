"""Who went first, in the alerts: ranks whose loss went NaN read from the first to turn, the
ranks alike on one line (review 306); a rank that left the job early (exit 0) while its peer
waited in its collective is named the root cause, as the report names it (review 308)."""

from __future__ import annotations

from tui_helpers import replay_app, until, widget_text

from pardash.telemetry import schema
from pardash.telemetry.failures import failure_summary
from pardash.telemetry.state import RunState
from pardash.tui.alerts import run_alerts
from pardash.tui.widgets.alert_list import AlertList

T = 1.7e9
RUN = "n"


def nan_at(step: int) -> str:
    return f"loss is nan at step {step}: diverged, or a spike (steps go on without a loss while it is not finite)"


def _nan_log(world: int, first: int, first_at: int, *, steps: int = 80, finished: bool = False) -> list[schema.Message]:
    """``world`` DDP ranks; rank ``first``'s loss NaN from ``first_at``, the others' from the
    step after (its NaN reached them through the all-reduce), each warning before its step."""
    msgs: list[schema.Message] = [schema.Hello(run=RUN, rank=r, world_size=world, strategy="ddp", pid=10 + r, seq=0, t=T) for r in range(world)]
    seq = dict.fromkeys(range(world), 1)
    for s in range(1, steps + 1):
        for r in range(world):
            since = first_at if r == first else first_at + 1
            if s == since:
                msgs.append(schema.Event(run=RUN, rank=r, seq=seq[r], name="warning", step=s, message=nan_at(s), t=T + s * 0.02))
                seq[r] += 1
            msgs.append(schema.Step(run=RUN, rank=r, step=s, seq=seq[r], loss=None if s >= since else 2.0, samples=8, step_s=0.02,
                                    t=T + s * 0.02))  # fmt: skip
            seq[r] += 1
    if finished:
        msgs += [schema.Event(run=RUN, rank=r, seq=seq[r], name="exit", code=0, step=steps, t=T + steps * 0.02 + 0.1) for r in range(world)]
    return msgs


def _state(msgs: list[schema.Message]) -> RunState:
    st = RunState(run_id=RUN)
    for m in msgs:
        st.apply(m, m.t)
    return st


def test_the_rank_whose_loss_turned_first_reads_first_and_the_rest_on_one_line():
    # 4 ranks, rank 3 NaN at step 60: it read last, under ranks 0-2 "since step 61", each a line.
    alerts = run_alerts(_state(_nan_log(4, 3, 60)))
    assert [(a.kind, a.text) for a in alerts] == [
        ("loss", "rank 3's loss is nan since step 60 (diverged, or a spike)"),
        ("loss", "ranks 0-2' loss is nan since step 61 (diverged, or a spike)"),
    ]
    assert alerts[1].ranks == (0, 1, 2)
    done = run_alerts(_state(_nan_log(8, 6, 30, finished=True)))
    assert [a.text for a in done] == [
        "rank 6's loss was nan from step 30 to the end",
        "ranks 0-5, 7' loss was nan from step 31 to the end",
    ]


def _nan8_app(tmp_path):
    """The TUI replaying 8 ranks whose loss went NaN, rank 6 first (at step 30), to the end."""
    log = tmp_path / "nan8.jsonl"
    log.write_bytes(schema.encode_json_lines(sorted(_nan_log(8, 6, 30), key=lambda m: m.t)))
    return replay_app(str(log))


async def test_eight_ranks_gone_nan_at_80x24_name_the_first_first(tmp_path):
    app = _nan8_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        panel = app.screen.query_one(AlertList)
        await until(pilot, lambda: len(panel.alerts) == 2)
        text = " ".join(widget_text(panel).split())  # (the panel wraps a line at this width)
        # It read eight lines, rank 6 seventh, its step cut off.
        assert text.index("rank 6's loss is nan since step 30") < text.index("ranks 0-5, 7' loss is nan since step 31"), text


def _left_early() -> list[schema.Message]:
    """2 DDP ranks; rank 1's script leaves the loop at step 40 (sys.exit(0)) while rank 0 waits
    in the all-reduce, whose connection closes under it (as /tmp/rev308-scratch/crash.py exit0)."""
    msgs: list[schema.Message] = [schema.Hello(run=RUN, rank=r, world_size=2, strategy="ddp", pid=10 + r, seq=0, t=T) for r in range(2)]
    seq = {0: 1, 1: 1}
    for s in range(40):
        for r in range(2):
            msgs.append(schema.Step(run=RUN, rank=r, step=s, seq=seq[r], loss=1.0, samples=8, step_s=0.01, t=T + s * 0.01))
            seq[r] += 1
    msgs.append(schema.Event(run=RUN, rank=1, seq=seq[1], name="exit", code=0, step=40, t=T + 0.5))
    msgs.append(schema.Event(run=RUN, rank=0, seq=seq[0], name="error", step=40, t=T + 0.55,
                             message="RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:15272. "
                                     "This is typically caused by a remote worker crashing."))  # fmt: skip
    msgs.append(schema.Event(run=RUN, rank=0, seq=seq[0] + 1, name="exit", code=1, step=41, t=T + 0.56))
    for i, m in enumerate(msgs):
        m.hseq = i + 1
    return msgs


def test_a_rank_that_left_the_job_early_is_named_the_root_cause():
    st = _state(_left_early())
    assert "rank 1 at step 40 left the job (exit code 0)" in failure_summary(st)["line"]  # (the report's and the launch's)
    alerts = run_alerts(st)
    # It read only "rank 0 exited with code 1 at step 41, after a peer failed (its connection closed)".
    assert [(a.kind, a.rank, a.first, a.text) for a in alerts] == [
        ("exited", 1, True, "rank 1, the root cause, left the job at step 40 (exit code 0) while the others trained on: "
                            "a rank that leaves the loop early breaks the others' collectives"),
        ("exited", 0, False, "rank 0 exited with code 1 at step 41, after a peer had left the job (its connection closed)"),
    ]  # fmt: skip


def test_the_rank_that_left_is_named_when_its_exit_reaches_the_hub_after_the_failure_it_caused():
    # Review 313: 1 of 3 runs under the TUI read "rank 0 exited ... the root cause" and "the rank
    # that failed first left no exit record", rank 1's exit 0 (its time the earlier) the log's
    # next line: the hub took it after rank 0's.
    msgs = _left_early()
    i = next(k for k, m in enumerate(msgs) if isinstance(m, schema.Event) and m.name == "exit" and m.rank == 1)
    msgs.append(msgs.pop(i))  # (after rank 0's error and exit, its t still the earlier)
    for k, m in enumerate(msgs):
        m.hseq = k + 1
    st = _state(msgs)
    assert "rank 1 at step 40 left the job (exit code 0)" in failure_summary(st)["line"]
    assert [(a.rank, a.first) for a in run_alerts(st)][0] == (1, True)


def test_a_line_of_ranks_alike_counts_each_rank_where_the_panel_leaves_it_out():
    # The panel's "+N more" counted a loss alert of seven ranks as one rank ("+1 more rank").
    from pardash.tui.widgets.alert_list import more_text

    alerts = run_alerts(_state(_nan_log(8, 6, 30)))
    assert more_text(alerts[1:], 80).startswith("+7 more ranks with a loss not finite"), more_text(alerts[1:], 80)
    assert more_text(alerts, 80).startswith("+8 more ranks with a loss not finite")


async def test_a_ranks_detail_holds_the_alert_of_the_line_it_is_on(tmp_path):
    # A loss alert of ranks alike ("ranks 0-5, 7' loss is nan since step 31") showed in the
    # detail of rank 0 alone, the first of them.
    from textual.widgets import Static

    app = _nan8_app(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        panel = app.screen.query_one(AlertList)
        await until(pilot, lambda: len(panel.alerts) == 2)
        from pardash.tui.widgets.rank_grid import RankGrid

        app.screen.query_one(RankGrid).select(5)
        await pilot.press("enter")
        await until(pilot, lambda: "⚠" in str(app.screen.query_one("#title", Static).render()))
        title = " ".join(str(app.screen.query_one("#title", Static).render()).split())
        assert "ranks 0-5, 7' loss is nan since step 31" in title, title
