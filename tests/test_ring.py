"""A rank's history: one ring of float32 rows (a row per step, a column per HISTORY_COLUMNS
name), bounded whatever the run's length, read by column as the charts and the grid read it."""

import math
import struct
from array import array

import pytest

from pardash.telemetry.ring import HISTORY_COLUMNS, Ring
from pardash.telemetry.state import RunState
from pardash.telemetry import schema

COLS = ("step", "loss", "t")


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def test_rows_are_read_back_by_column_oldest_first():
    ring = Ring(4, COLS)
    for i in range(3):
        ring.append_row(i, 1.0 / (i + 1), 0.5 * i)
    assert len(ring) == len(ring["loss"]) == 3
    assert ring["step"].values() == [0.0, 1.0, 2.0]
    assert ring["loss"].values() == [_f32(1.0), _f32(0.5), _f32(1 / 3)]
    assert ring["t"].last() == ring.last("t") == 1.0
    assert ring.tail(2) == [[1.0, 0.5, 0.5], [2.0, _f32(1 / 3), 1.0]]


def test_a_full_ring_keeps_the_newest_rows():
    ring = Ring(3, COLS)
    for i in range(10):
        ring.append_row(i, -i, 2 * i)
    assert len(ring) == 3
    assert ring["step"].values() == [7.0, 8.0, 9.0]
    assert ring["t"].values() == [14.0, 16.0, 18.0]
    assert ring.tail() == [[7.0, -7.0, 14.0], [8.0, -8.0, 16.0], [9.0, -9.0, 18.0]]
    assert ring.tail(1) == [[9.0, -9.0, 18.0]]
    assert ring.tail(0) == []


def test_missing_and_out_of_range_values_are_nan_and_inf():
    ring = Ring(2, COLS)
    ring.append([1, None, 1e300])  # a loss the rank did not send, a t float32 cannot hold
    ring.append_row(2, -1e300, math.nan)
    loss = ring["loss"].values()
    assert math.isnan(loss[0]) and loss[1] == -math.inf
    t = ring["t"].values()
    assert t[0] == 1e300 and math.isnan(t[1])  # (t is kept as float64 too: WIDE_COLUMNS)
    assert struct.unpack("<2f", ring["t"].to_bytes()) [0] == math.inf  # (the snapshot's float32)
    with pytest.raises(ValueError):
        ring.append([1, 2])


def test_an_empty_ring_has_nothing_to_show():
    ring = Ring(5)
    assert len(ring) == 0 and ring.last("loss") is None and ring["loss"].last() is None
    assert ring["loss"].values() == [] and ring["loss"].to_bytes() == b"" and ring.tail(3) == []
    assert ring.keys() == HISTORY_COLUMNS and "loss" in ring and "nope" not in ring
    assert ring.get("nope") is None


@pytest.mark.parametrize("written", [0, 3, 5, 12])
def test_columns_survive_the_snapshot_bytes(written):
    ring = Ring(5, COLS)
    for i in range(written):
        ring.append_row(i, i * 0.25, i + 0.5)
    copy = Ring(5, COLS)
    copy.load_columns({name: col.to_bytes() for name, col in ring.items()})
    assert len(copy) == len(ring)
    assert copy.tail() == ring.tail()
    # The copy carries on as the original does.
    for r in (ring, copy):
        r.append_row(99, 9.0, 9.5)
    assert copy.tail() == ring.tail()


def test_a_snapshot_of_one_ring_per_column_still_loads():
    # What a hub from before the multi-column ring sent: each column its own float32 array,
    # possibly longer than this ring, and possibly of unequal lengths; unknown names ignored.
    old = {
        "step": array("f", range(8)).tobytes(),
        "loss": array("f", [0.5, 0.25]).tobytes(),
        "retired_column": array("f", [1.0]).tobytes(),
    }
    ring = Ring(6, COLS)
    ring.load_columns(old)
    assert ring["step"].values() == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    loss = ring["loss"].values()
    assert all(math.isnan(x) for x in loss[:4]) and loss[4:] == [0.5, 0.25]
    assert all(math.isnan(x) for x in ring["t"].values())


def test_a_week_of_steps_does_not_grow_a_ranks_history():
    ring = Ring(240)
    size = len(ring._buf)
    for i in range(10_000):
        ring.append_row(*([float(i)] * len(HISTORY_COLUMNS)))
    assert len(ring) == 240 and len(ring._buf) == size
    assert ring["step"].values()[0] == 10_000 - 240


def test_commit_history_writes_one_row_per_step_in_column_order():
    st = RunState(run_id="r", track_seq=False)
    mem = schema.Mem(params_bytes=1, grads_bytes=2, optim_bytes=3, buckets_bytes=4, rss_bytes=100)
    steps = [
        schema.Step(rank=0, step=5, t=10.0, loss=0.5, step_s=0.25, self_s=0.125, comm_s=0.0625, mem=mem),
        schema.Step(rank=1, step=5, t=10.5, step_s=0.5),
    ]
    for s in steps:
        st.apply(s, 0.0)
    st.commit_history(steps)
    row0 = dict(zip(HISTORY_COLUMNS, st.ranks[0].history.tail(1)[0], strict=True))
    assert row0["step"] == 5 and row0["t"] == 0.0 and row0["loss"] == 0.5 and row0["self_s"] == 0.125
    assert row0["mem_held_bytes"] == 10 and row0["mem_device_bytes"] == 100 and row0["comm_s"] == 0.0625
    assert math.isnan(row0["data_s"])
    row1 = dict(zip(HISTORY_COLUMNS, st.ranks[1].history.tail(1)[0], strict=True))
    assert row1["t"] == 0.5 and math.isnan(row1["loss"]) and math.isnan(row1["mem_held_bytes"])


def test_steps_and_times_are_exact_past_what_float32_holds():
    # float32 holds whole steps only to 16,777,216 (two days at 100 steps/s) and a run's seconds
    # to 8 ms after a day: a rate over the last points read 20% off, or jittered 3 to 6%.
    ring = Ring(4, COLS)
    for k in range(6):
        step, t = 16_777_217 + k, 604_800.0 + 0.01 * k  # a week in, at 100 steps/s
        ring.append_row(step, 0.5, t)
    assert ring["step"].values() == [16_777_219.0, 16_777_220.0, 16_777_221.0, 16_777_222.0]
    assert ring.ago("step", 0) - ring.ago("step", 3) == 3 and ring.last("step") == 16_777_222
    assert ring.ago("t", 0) - ring.ago("t", 3) == pytest.approx(0.03, rel=1e-9)
    assert [row[2] for row in ring.tail(2)] == [604_800.0 + 0.01 * 4, 604_800.0 + 0.01 * 5]
    assert ring["t"].values()[-1] == 604_800.0 + 0.01 * 5
    # The snapshot carries them as float32, as it did.
    assert struct.unpack("<4f", ring["step"].to_bytes()) == tuple(_f32(x) for x in ring["step"].values())


def test_ago_reads_back_from_the_newest_row_across_the_wrap():
    ring = Ring(4, ("a",))
    assert ring.ago("a", 0) is None
    for v in range(1, 7):  # 1..6 into 4 slots: 3, 4, 5, 6 held
        ring.append([float(v)])
    assert [ring.ago("a", k) for k in range(5)] == [6.0, 5.0, 4.0, 3.0, None]
