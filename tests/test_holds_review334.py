"""Holds said once, of the right rank, alike live and in the report (review 334 of the live
``held_up`` verdicts): a stall past the first collective, a resumed job's first steps, a save
and an evaluation at one step, every rank evaluating, a hello sent again mid-stall, the report
past 10,000 waited steps, the TUI's alert with the ranks' clocks off the hub's."""

from pardash.telemetry import report, schema
from pardash.telemetry.analysis import Detector
from pardash.telemetry.holds import HoldWatch
from pardash.telemetry.report import build_report
from pardash.telemetry.state import RunState
from pardash.tui.alerts import held_up_alerts

from test_holds import _run

T = 1_800_000_000.0


def _report_holds(tmp_path, records) -> list[tuple[int, list[int], str]]:
    path = tmp_path / "run.jsonl"
    path.write_bytes(schema.encode_json_lines(records))
    return [(h["rank"], h["steps"], h["where"]) for h in build_report(str(path))["holds"]]


def _waited_log(at: int, held_s: float, *, steps: int = 400, step_s: float = 0.02, comm_s: float = 0.005, events=()) -> list:
    """Two ranks' log: rank 1 waits ``held_s`` more in its collectives at step ``at`` (rank 0
    held it past its first collective); ``events``: (rank, name, step, seconds) of their saves
    and evaluations, each after that step."""
    records: list = _hellos()
    t = T
    for s in range(1, steps + 1):
        t += step_s + (held_s if s == at else 0.0)
        for r in (0, 1):
            waited = held_s if s == at and r == 1 else 0.0
            records.append(schema.Step(run="r", rank=r, seq=s, step=s, samples=8, t=t, loss=1.0, step_s=step_s + (held_s if s == at else 0.0),
                                       data_s=0.005, loader_s=0.0005, self_s=0.01, comm_s=comm_s + waited))  # fmt: skip
        for k, (r, name, step, took) in enumerate(events):
            if step == s:
                records.append(schema.Event(run="r", rank=r, seq=1000 + k, name=name, step=s, duration_s=took, t=t + took))
    return records


def _hellos(ranks: int = 2, **kw) -> list[schema.Hello]:
    return [schema.Hello(run="r", rank=r, seq=0, world_size=ranks, strategy="ddp", t=T, source="auto", pardash_version="0.1.0", **kw)
            for r in range(ranks)]  # fmt: skip


def test_a_stall_past_the_first_collective_is_not_said_a_hold_too():
    # Rank 0 stops 7 s in its step 101, between its backward and its optimizer step: "stalled in
    # optimizer after step 100", then "resumed"; rank 1 waited at step 102's first collective,
    # which read as a hold at 102 (the stalls were looked for at 101 and 102 alone): one pause
    # said twice, and its 7 s in the launch's last line and Prometheus' counter.
    st, det, out = RunState(), Detector(), []
    t = T

    def step(r, s, t, step_s=0.015, comm=0.002):
        m = schema.Step(rank=r, step=s, seq=s, t=t, step_s=step_s, self_s=0.011, data_s=0.009, loader_s=0.0005, comm_s=comm)
        st.apply(m, t)
        det.stragglers.observe(m)

    def tick(t):
        for v in det.update(st, t):
            st.apply(v, t)
            out.append(v)

    for r in (0, 1):
        st.apply(schema.Hello(rank=r, world_size=2, t=t, source="auto"), t)
    for s in range(1, 201):
        if s == 102:
            continue
        t += 0.015
        if s != 101:
            for r in (0, 1):
                step(r, s, t)
            tick(t)
            continue
        step(1, 101, t)
        tick(t)
        for k in range(1, 8):  # rank 0 stopped in its step 101, rank 1 waiting in 102's collective
            st.apply(schema.Heartbeat(rank=0, step=100, phase="optimizer", t=t + k), t + k)
            st.apply(schema.Heartbeat(rank=1, step=101, phase="comm", t=t + k), t + k)
            tick(t + k)
        t += 7.0
        step(0, 101, t, step_s=7.015)
        t += 0.015
        step(0, 102, t)
        step(1, 102, t, step_s=7.015, comm=7.002)
        tick(t)
    for r in (0, 1):
        st.apply(schema.Verdict(rank=r, verdict="finished", t=t), t)
    tick(t + 1)
    said = [(v.verdict, v.rank) for v in out if v.verdict in ("stalled", "held_up")]
    assert ("stalled", 0) in said and ("held_up", 0) not in said, [v.message for v in out]


def test_a_job_resumed_at_step_5000_warms_up_from_its_first_step(tmp_path):
    # A fresh hub's first steps of a job resumed from its checkpoint: rank 1's first step 2 s (a
    # compile), rank 0's 0.4 s. The warm-up was steps below 10: "rank 1 held the others up 1.60
    # s at step 5001" live, where the report (each process's first step out) said none.
    st, det, out = RunState(), Detector(), []
    records: list = _hellos(pid=100)
    t = T
    for r in (0, 1):
        st.apply(records[r], t)
    for i, s in enumerate(range(5001, 5201)):
        own = {0: 0.4 if i == 0 else 0.011, 1: 2.0 if i == 0 else 0.011}
        longest = max(own.values())
        t += 0.004 + longest
        for r in (0, 1):
            m = schema.Step(run="r", rank=r, seq=i + 1, step=s, samples=8, loss=1.0, t=t, step_s=0.004 + longest, self_s=own[r],
                            data_s=0.009, loader_s=0.0005, comm_s=0.002 + longest - own[r])  # fmt: skip
            st.apply(m, t)
            det.stragglers.observe(m)
            records.append(m)
        for v in det.update(st, t):
            st.apply(v, t)
            out.append(v)
    for r in (0, 1):
        st.apply(schema.Verdict(rank=r, verdict="finished", t=t), t)
    out += det.update(st, t + 1)
    assert [v.message for v in out if v.verdict == "held_up"] == []
    assert _report_holds(tmp_path, records) == []
    # (its windows begin after its own warm-up)
    assert det.stragglers._next_window > 5001


def test_an_evaluation_then_a_save_at_one_step_are_both_in_no_hold(tmp_path):
    # Rank 0 alone evaluates 1.6 s then saves 1.0 s after step 200: the others wait 2.6 s at their
    # next collective. Live kept one event a step (the save's) and said "rank 0 held the others up
    # 1.60 s at step 201 ... right after its checkpoint ... e.g. an upload"; the report, none.
    events = [(200, 0, schema.Event(rank=0, name="eval", step=200, duration_s=1.6)),
              (200, 0, schema.Event(rank=0, name="checkpoint", step=200, duration_s=1.0, message="/ckpt"))]  # fmt: skip
    held = _run(400, lambda r, s: 2.6 if r == 0 and s == 201 else 0.0, past=True, events=events)
    assert [v.message for v in held] == []
    records = _waited_log(201, 2.6, events=[(0, "eval", 200, 1.6), (0, "checkpoint", 200, 1.0)])
    assert _report_holds(tmp_path, records) == []


def test_a_hold_while_every_rank_evaluates_is_still_said(tmp_path):
    # Every rank evaluates 1.6 s after step 200 (nobody waits for anyone for it), then rank 0
    # holds the others 1.5 s past its first collective (a synchronous log of its gradients'
    # norm). Its own evaluation was taken off the others' wait, which held none of it: said
    # nowhere, live or in the report.
    pause = lambda r, s: 1.5 if r == 0 and s == 201 else 0.0  # noqa: E731
    evals = [(200, r, schema.Event(rank=r, name="eval", step=200, duration_s=1.6)) for r in (0, 1)]
    held = _run(400, pause, past=True, events=evals)
    assert [v.message for v in held] == [
        "rank 0 held the others up 1.50 s at step 201 (its steps take 15.0 ms), past its step's first collective "
        "(in its backward or optimizer step, or between them)"
    ]
    records = _waited_log(201, 1.5, events=[(r, "eval", 200, 1.6) for r in (0, 1)])
    assert _report_holds(tmp_path, records) == [(0, [201], "after")]


def test_a_hello_sent_again_mid_stall_leaves_the_stall_to_be_resumed():
    # A Lightning script's second fit sends its hello again with its total (same process) in the
    # gap between the fits: the stall was cleared as a new process's, then said again, longer,
    # and never "resumed".
    st, det, out = RunState(), Detector(), []
    t = T
    seq = {0: 0, 1: 0}

    def tick(t):
        for v in det.update(st, t):
            st.apply(v, t)
            out.append(v)

    def step(s, t):
        for r in (0, 1):
            seq[r] += 1
            m = schema.Step(rank=r, step=s, seq=seq[r], t=t, step_s=0.05, self_s=0.04, data_s=0.01, comm_s=0.005)
            st.apply(m, t)
            det.stragglers.observe(m)

    for r in (0, 1):
        st.apply(schema.Hello(rank=r, world_size=2, t=t, source="auto", pid=100 + r, seq=0, config={"total_steps": 100}), t)
    for s in range(1, 101):
        t += 0.05
        step(s, t)
        tick(t)
    for k in range(1, 30):
        if k == 15:
            for r in (0, 1):
                seq[r] += 1
                st.apply(schema.Hello(rank=r, world_size=2, t=t + k, source="auto", pid=100 + r, seq=seq[r], config={"total_steps": 300}), t + k)
        for r in (0, 1):
            seq[r] += 1
            st.apply(schema.Heartbeat(rank=r, step=100, phase="data", seq=seq[r], t=t + k), t + k)
        tick(t + k)
    t += 30
    for s in range(101, 301):
        t += 0.05
        step(s, t)
        tick(t)
    said = [(v.verdict, v.rank) for v in out if v.verdict in ("stalled", "resumed")]
    assert sorted(said) == [("resumed", 0), ("resumed", 1), ("stalled", 0), ("stalled", 1)], [v.message for v in out]
    assert st.ranks[0].hello.config == {"total_steps": 300}


def test_the_report_finds_holds_past_the_first_collective_however_many_steps_waited(tmp_path, monkeypatch):
    # Collectives of 0.3 s every step (a large model's all-reduce): the steps some rank waited
    # 0.25 s or more were kept up to HOLD_KEPT (10,000), and a 4 s hold past rank 0's first
    # collective after that was in no report. (HOLD_KEPT made small here, as 10,000 steps are.)
    monkeypatch.setattr(report, "HOLD_KEPT", 50)
    records = _waited_log(151, 4.0, steps=200, step_s=0.32, comm_s=0.3)
    assert _report_holds(tmp_path, records) == [(0, [151], "after")]


def test_ranks_whose_own_time_passes_the_bar_together_are_each_measured_against_the_slowest_other():
    # (An epoch's first step, every rank's DataLoader workers starting anew: the two slowest
    # ranks are read once a step; each rank's lead is over the slowest of the others.)
    watch = HoldWatch()
    selfs = {0: [1.0, 0.01], 1: [2.2, 0.01], 2: [0.3, 0.01], 3: [None, 0.01]}
    out = watch.window([11, 12], [0, 1, 2], selfs, {r: [0.0, 0.0] for r in selfs}, {}, 0.02, set(), T)
    assert [(v.rank, v.step, round(v.cost_s, 2)) for v in out] == [(1, 11, 1.2)]


def test_the_held_up_alert_stands_by_the_ranks_clock_whatever_the_hubs():
    # The verdict's time is the hub's; the ranks' clocks 3 minutes ahead made it "older than
    # 150 s" at once: no alert.
    for ahead in (0.0, 180.0, -180.0):
        st = RunState(run_id="r")
        for r in (0, 1):
            st.apply(schema.Hello(run="r", rank=r, world_size=2, seq=0, t=T + ahead), T)
        for s in range(1, 40):
            for r in (0, 1):
                st.apply(schema.Step(run="r", rank=r, step=s, seq=s, step_s=0.05, t=T + ahead + s * 0.05), T)
        st.apply(schema.Verdict(run="r", rank=1, seq=-1, verdict="held_up", step=31, cost_s=1.5, t=T + 2, message="rank 1 held the others up"), T + 2)
        assert [(a.kind, a.rank) for a in held_up_alerts(st)] == [("held_up", 1)], ahead
        # ...and stands no longer than HELD_UP_ALERT_S of the ranks' clock
        st.apply(schema.Step(run="r", rank=0, step=40, seq=40, step_s=0.05, t=T + ahead + 2 + 151), T + 153)
        st.apply(schema.Step(run="r", rank=1, step=40, seq=40, step_s=0.05, t=T + ahead + 2 + 151), T + 153)
        assert held_up_alerts(st) == [], ahead


def test_a_rank_that_alone_says_its_evaluations_is_said_alone_only_where_the_others_waited(tmp_path):
    # A script that says its evaluations on rank 0 alone (`if rank == 0: pardash.event(...)`)
    # while every rank evaluates: rank 1's collectives after each waited nothing, and the
    # report said "rank 0 alone evaluated: the others waited 4.0 s for it (most of the run)".
    from pardash.telemetry.report_render import render_text

    # (and where every step's collectives take 0.8 s, that usual time is no wait for it: "the
    # others waited 2.4 s" of a job where every rank evaluated, review 339)
    for alone, usual in ((False, 0.005), (True, 0.005), (False, 0.8), (True, 0.8)):
        records: list = _hellos()
        t = T
        for s in range(1, 201):
            after = s > 1 and (s - 1) % 50 == 0
            t += 0.015 + usual + (1.0 if after and alone else 0.0)
            for r in (0, 1):
                waited = 1.0 if after and alone and r == 1 else 0.0
                records.append(schema.Step(run="r", rank=r, seq=s, step=s, samples=8, t=t, loss=1.0, step_s=0.015 + usual + waited,
                                           data_s=0.005, loader_s=0.0005, self_s=0.01, comm_s=usual + waited))  # fmt: skip
            if s % 50 == 0:
                t += 0.0 if alone else 1.0  # (every rank evaluates: nobody waits for anyone)
                records.append(schema.Event(run="r", rank=0, seq=1000 + s, name="eval", step=s, duration_s=1.0, t=t))
        path = tmp_path / f"run{alone}{usual}.jsonl"
        path.write_bytes(schema.encode_json_lines(records))
        lines = [line for line in render_text(build_report(str(path))).splitlines() if line.startswith("evaluations")]
        assert ("alone evaluated" in lines[0]) == alone, lines
        if alone:  # (three of them: the job's last step came before the last)
            assert "rank 0 alone evaluated: the others waited 3.0 s for it" in lines[0], lines


def test_a_hold_after_a_save_counts_its_own_work_not_the_save_the_others_waited_through(tmp_path):
    # Review 340: rank 0 saves 2.16 s after step 150, then spends 1.19 s of its own code before
    # step 151 (in its data phase); rank 1 waits through both in its next collective. Live:
    # "held the others up 1.19 s at step 151 ... right after its checkpoint (2.16 s, said
    # apart)"; the report said 3.32 s (its lead in self time and in the others' comm was one, the
    # comm holding the save). At step 301: an evaluation (11.67 s) and a save (1.82 s), then 0.74
    # s of its own code: "14.23 s" in the report.
    records: list = _hellos()
    t = T
    own = {151: 1.19, 301: 0.74}
    busy = {150: [("checkpoint", 2.16)], 300: [("eval", 11.67), ("checkpoint", 1.82)]}
    for s in range(1, 361):
        pause = own.get(s, 0.0) + sum(x for _, x in busy.get(s - 1, ()))
        t += 0.1 + pause
        for r in (0, 1):
            mine = own.get(s, 0.0) if r == 0 else 0.0
            records.append(schema.Step(run="r", rank=r, seq=s, step=s, samples=8, t=t, loss=1.0, step_s=0.1 + pause,
                                       data_s=0.05 + mine, self_s=0.055 + mine, comm_s=0.01 + (pause if r == 1 else 0.0)))  # fmt: skip
        for k, (name, took) in enumerate(busy.get(s, ())):
            records.append(schema.Event(run="r", rank=0, seq=1000 + s + k, name=name, step=s, duration_s=took, t=t + took))
    path = tmp_path / "run.jsonl"
    path.write_bytes(schema.encode_json_lines(records))
    [held] = build_report(str(path))["holds"]
    assert (held["rank"], held["steps"]) == (0, [151, 301])
    assert abs(held["total_s"] - (1.19 + 0.74)) < 0.05, held
