"""A long run's routine events (epoch ends, checkpoints) do not push its verdicts, warnings and
errors out of the events a state keeps for the event log (review 238: after 25 minutes the
straggler spell of 00:46 was gone)."""

from __future__ import annotations

import pickle

from pardash.telemetry import schema
from pardash.telemetry.event_ring import EventRing, is_routine
from pardash.telemetry.state import EVENTS_KEPT, RunState


def _epoch(hseq: int, rank: int = 0) -> schema.Event:
    return schema.Event(rank=rank, seq=hseq, name="epoch_end", step=hseq, t=float(hseq), hseq=hseq)


def _own_event(hseq: int, rank: int = 0) -> schema.Event:
    """A script's own routine event (``pt.event("snapshot", ...)``)."""
    return schema.Event(rank=rank, seq=hseq, name="snapshot", step=hseq, t=float(hseq), hseq=hseq)


def _straggler(hseq: int) -> schema.Verdict:
    return schema.Verdict(rank=1, verdict="straggler", step=hseq, t=float(hseq), hseq=hseq)


def test_a_verdict_outlives_many_times_the_bound_of_routine_events_and_order_is_kept():
    st = RunState()
    st.apply(_straggler(1), 0.0)
    st.apply(schema.Event(rank=0, seq=2, name="warning", message="loss is nan", t=2.0, hseq=2), 0.0)
    for h in range(3, 3 + 4 * EVENTS_KEPT):
        st.apply(_epoch(h, rank=h % 2), 0.0)
    kept = list(st.events)
    assert [m.hseq for m in kept[:2]] == [1, 2]  # the straggler and the warning, first
    routine = kept[2:]
    assert len(routine) == EVENTS_KEPT and all(is_routine(m) for m in routine)
    assert [m.hseq for m in routine] == list(range(3 + 3 * EVENTS_KEPT, 3 + 4 * EVENTS_KEPT))  # the newest
    assert [m.hseq for m in reversed(st.events)] == [m.hseq for m in kept][::-1]
    assert st.events[0].hseq == 1 and st.events[-1].hseq == 2 + 4 * EVENTS_KEPT
    assert len(st.events) == EVENTS_KEPT + 2


def test_the_rest_is_bound_too_and_reads_interleaved_in_the_order_it_came():
    ring = EventRing(maxlen=3)
    for h in range(1, 9):
        ring.append(_epoch(h) if h % 2 else _straggler(h))
    assert [m.hseq for m in ring] == [3, 4, 5, 6, 7, 8]  # 3 of each, merged
    again = pickle.loads(pickle.dumps(ring))  # (a replay's keyframes copy the state)
    assert [m.hseq for m in again] == [3, 4, 5, 6, 7, 8] and again.maxlen == 3
    grown = EventRing(ring, maxlen=6)  # (the state's bound grows with its ranks)
    grown.append(_epoch(9))
    assert [m.hseq for m in grown] == [3, 4, 5, 6, 7, 8, 9]


def test_what_is_not_routine():
    assert is_routine(_epoch(1))
    assert is_routine(schema.Event(rank=2, seq=5, name="checkpoint", step=3))
    assert is_routine(schema.Event(rank=2, seq=5, name="my_own_event"))  # a script's own, said often
    for name in ("warning", "error", "exit", "refused", "restart", "resume"):
        assert not is_routine(schema.Event(rank=2, seq=5, name=name))
    assert not is_routine(schema.Event(rank=1, seq=-1, name="exit", code=-9))  # the launcher's note
    assert not is_routine(schema.Event(rank=-1, seq=-1, name="hub", message="hub started"))
    assert not is_routine(_straggler(1))


async def test_the_event_log_still_shows_the_first_verdict_after_many_routine_events():
    # The widget's lines were bound by their count (500 rows): written as they came, the
    # routine lines pushed the verdict out even while the state kept it. (A script's own
    # events: epoch ends and checkpoints one after another fold into one line, see
    # tests/tui/test_event_log.py.)
    from textual.app import App

    from pardash.tui.widgets.event_log import EventLog

    class One(App):
        CSS = "EventLog { width: 60; height: 10; }"

        def compose(self):
            yield EventLog()

    app = One()
    async with app.run_test(size=(70, 14)) as pilot:
        st, log = RunState(), app.query_one(EventLog)
        st.apply(_straggler(1), 0.0)
        log.sync(st)
        h = 2
        for _ in range(8):  # frames of them, as a long run sends them
            for _ in range(EVENTS_KEPT // 3):
                st.apply(_own_event(h, rank=0), 0.0)
                h += 1
            log.sync(st)
            await pilot.pause()
        texts = [strip.text.rstrip() for strip in log.lines]
        assert "rank 1: straggler" in texts[0], texts[:3]
        assert texts[-1].endswith(f"rank 0 snapshot at step {h - 1}"), texts[-3:]
        assert len(texts) <= 3 * EVENTS_KEPT  # bounded: rewritten from the state past its bound
