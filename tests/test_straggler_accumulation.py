"""A compute straggler whose steps hold more micro-batches than the others' (each rank its own
gradient accumulation count) is said so: its verdict read "compute" alone (review 335)."""

from pardash.telemetry import schema
from pardash.telemetry.analysis import Detector
from pardash.telemetry.state import RunState

T = 1_800_000_000.0


def _verdicts(micro: dict[int, float | None], slow: int = 1) -> list[schema.Verdict]:
    st, det, out = RunState(), Detector(), []
    t = T
    for r in micro:
        st.apply(schema.Hello(rank=r, world_size=len(micro), t=t, source="auto"), t)
    for s in range(1, 200):
        t += 0.03
        for r, m in micro.items():
            own = 0.02 if r == slow else 0.01
            msg = schema.Step(rank=r, step=s, seq=s, t=t, step_s=0.03, self_s=own, data_s=0.001, comm_s=0.03 - own,
                              custom={"micro_batches": m} if m is not None else {})  # fmt: skip
            st.apply(msg, t)
            det.stragglers.observe(msg)
        for v in det.update(st, t):
            st.apply(v, t)
            out.append(v)
    return [v for v in out if v.verdict == "straggler"]


def test_a_straggler_accumulating_more_micro_batches_is_said_so():
    (v,) = _verdicts({0: 2.0, 1: 4.0, 2: 2.0})
    assert v.rank == 1 and v.cause == "compute", v.message
    assert v.message.endswith(": it runs 4 micro-batches a step (gradient accumulation), the others 2"), v.message


def test_a_straggler_with_the_others_count_or_none_is_not():
    for micro in ({0: 2.0, 1: 2.0, 2: 2.0}, {0: None, 1: None, 2: None}, {0: 4.0, 1: 2.0, 2: 4.0}):
        (v,) = _verdicts(micro)
        assert v.rank == 1 and "micro-batches" not in v.message, (micro, v.message)
