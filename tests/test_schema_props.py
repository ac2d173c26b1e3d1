"""Properties of the wire schema and of the hub's ingest, over inputs hypothesis makes up.

- Any record of any kind round-trips through MessagePack (the wire) and JSON (the log).
- Arbitrary bytes never make the decoders raise anything but msgspec's errors, or
  RecursionError for nesting deeper than Python's stack (msgspec's own answer, which the hub and
  the log reader count as ``too_deep``).
- ``HubCore.ingest_bytes`` on arbitrary bytes, hostile records and mutated valid frames never
  raises, counts every frame it does not take, keeps every frame, snapshot and log line
  encodable, and leaves a valid rank publishing alongside exactly as it would be alone.

Hostile frames never claim the valid rank's identity: without keys anyone who reaches the port
can speak for any rank (that is what CURVE keys are for, see test_security.py).
"""

from __future__ import annotations

import json
import math
import random
from typing import Any
from unittest import mock

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz import claims_valid_identity
from pardash.telemetry import frames, hubcore, limits, schema
from pardash.telemetry.hub import HubCore
from pardash.telemetry.logreader import load_log
from pardash.telemetry.recorder import Recorder

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KINDS = (schema.Hello, schema.Step, schema.System, schema.Event, schema.Heartbeat, schema.Verdict)
MSGSPEC_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)

# -- strategies -------------------------------------------------------------------------------

INTS = st.integers(-(1 << 63), (1 << 64) - 1)  # everything MessagePack carries
SMALL_INTS = st.integers(-(1 << 31), 1 << 31)


def floats(finite: bool) -> st.SearchStrategy[float]:
    return st.floats(allow_nan=False, allow_infinity=not finite)


JSONISH = st.recursive(
    st.none() | st.booleans() | SMALL_INTS | floats(True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _field(tp: Any, finite: bool) -> st.SearchStrategy:
    if tp is int:
        return INTS
    if tp is float:
        return floats(finite)
    if tp is str:
        return st.text(max_size=40)
    if tp == (int | None):
        return st.none() | INTS
    if tp == (float | None):
        return st.none() | floats(finite)
    if tp == (str | None):
        return st.none() | st.text(max_size=40)
    if tp == dict[str, float]:
        return st.dictionaries(st.text(max_size=10), floats(finite), max_size=5)
    if tp == dict[str, Any]:
        return st.dictionaries(st.text(max_size=10), JSONISH, max_size=5)
    if tp == (schema.Mem | None):
        return st.none() | record(schema.Mem, finite)
    raise AssertionError(f"no strategy for {tp!r}: add one")


def record(cls: type, finite: bool = False) -> st.SearchStrategy:
    """Any instance of ``cls`` (a schema Struct): every field drawn over its whole type."""
    return st.fixed_dictionaries({f.name: _field(f.type, finite) for f in msgspec.structs.fields(cls)}).map(
        lambda kw: cls(**kw)
    )


ANY_RECORD = st.one_of(*(record(k) for k in KINDS))
FINITE_RECORD = st.one_of(*(record(k, finite=True) for k in KINDS))

# -- the schema -------------------------------------------------------------------------------


@SETTINGS
@given(ANY_RECORD)
def test_any_record_round_trips_the_wire(msg):
    assert schema.decode(schema.encode(msg)) == msg


@SETTINGS
@given(FINITE_RECORD)
def test_any_finite_record_round_trips_the_log(msg):
    line = schema.encode_json(msg)
    assert b"\n" not in line
    back = schema.decode_json(line)
    # JSON has no integer keys in a config: compare through the log's own form.
    assert schema.encode_json(back) == line


@SETTINGS
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_only_raise_msgspec_errors(raw):
    for decode in (schema.decode, schema.decode_json, frames.decode_frame, frames.decode_snapshot):
        try:
            decode(raw)
        except MSGSPEC_ERRORS:
            pass
        except RecursionError:
            pass  # see test_deep_nesting_is_refused_by_the_hub


def test_deep_nesting_is_refused_by_the_hub_not_raised():
    # A 1 KiB frame: a hello whose config nests 1000 lists deep. msgspec raises RecursionError
    # (not one of its own errors); the hub counts it and carries on.
    raw = msgspec.msgpack.encode({"kind": "hello", "rank": 0, "config": {"a": 0}})
    raw = raw.replace(msgspec.msgpack.encode({"a": 0}), b"\x81\xa1a" + b"\x91" * 1000 + b"\x00")
    with pytest.raises(RecursionError):
        schema.decode(raw)
    core = HubCore(run_id="r")
    assert core.ingest_bytes(raw, 0.0) is False
    assert core.rejected["too_deep"] == 1
    # Shallower but still deep (within Python's limit): refused before it reaches the log,
    # whose encoder would hit the same limit.
    raw = msgspec.msgpack.encode({"kind": "hello", "rank": 0, "config": {"a": 0}})
    raw = raw.replace(msgspec.msgpack.encode({"a": 0}), b"\x81\xa1a" + b"\x91" * 100 + b"\x00")
    assert core.ingest_bytes(raw, 0.0) is False
    assert core.rejected["too_large"] == 1


# -- the hub loop -----------------------------------------------------------------------------

RUN = "run-a"
WORLD = 4
VALID = 0
"""The valid rank; hostile frames speak for ranks 1..3, or out of range."""


def valid_frames(n_steps: int) -> list[bytes]:
    """What a well-behaved rank 0 sends: hello, steps (past the straggler warm-up), heartbeats."""
    seq = iter(range(10**6))
    out = [schema.Hello(rank=VALID, world_size=WORLD, strategy="ddp", config={"lr": 0.1, "nested": {"a": [1, 2]}})]
    for i in range(n_steps):
        out.append(
            schema.Step(
                step=i, loss=2.0 - i * 0.01, samples=8, step_s=0.01, self_s=0.004, data_s=0.001, mono=float(i),
                mem=schema.Mem(params_bytes=100, params_full_bytes=400), custom={"tokens": 512.0},
            )
        )  # fmt: skip
        if i % 5 == 0:
            out.append(schema.Heartbeat(step=i, phase="forward", phase_s=0.001, mono=float(i)))
    frames_ = []
    for m in out:
        m.run, m.rank, m.seq = RUN, VALID, next(seq)
        m.t = 1000.0 + m.seq
        frames_.append(schema.encode(m))
    return frames_


TEMPLATES = [
    schema.encode(m)
    for m in (
        schema.Hello(run=RUN, rank=1, seq=0, t=1000.0, world_size=WORLD, host="h", config={"x": [1, {"y": 2}]}),
        schema.Step(run=RUN, rank=2, seq=3, t=1001.0, step=12, loss=1.0, step_s=0.01, self_s=0.005, mono=3.0, custom={"a": 1.0}),
        schema.Heartbeat(run=RUN, rank=3, seq=4, t=1002.0, step=12, phase="backward", phase_s=0.1, dropped=2, mono=4.0),
        schema.System(run=RUN, rank=1, seq=5, t=1003.0, cpu_pct=50.0, rss_bytes=1 << 30),
        schema.Event(run=RUN, rank=2, seq=6, t=1004.0, name="error", message="boom", traceback="Traceback ..."),
    )
]


def mutate(raw: bytes, rng: random.Random) -> bytes:
    """A valid frame with a few bytes flipped, replaced, inserted, deleted, or cut short."""
    b = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        i = rng.randrange(len(b)) if b else 0
        if op == 0 and b:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            b[i] = rng.choice((0x00, 0x7F, 0x80, 0xC0, 0xC1, 0xCB, 0xCF, 0xD3, 0xDC, 0xDE, 0xFF, rng.randrange(256)))
        elif op == 2:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 9)))
        elif op == 3 and b:
            del b[i : i + rng.randint(1, 4)]
        else:
            del b[rng.randrange(len(b) + 1) :]
    return bytes(b)


def hostile_record(rng: random.Random) -> bytes:
    """A well-formed record with one hostile field: NaN and infinities, ranks out of range,
    foreign runs, unknown versions, huge counters, giant configs, verdicts from a rank."""
    base = schema.decode(rng.choice(TEMPLATES))
    field, value = rng.choice(
        [
            ("t", math.nan), ("t", math.inf), ("t", -1.0), ("step_s", math.nan), ("step_s", -math.inf),
            ("mono", math.inf), ("phase_s", math.nan), ("custom", {"a": math.nan, "b": 1.0}),
            ("custom", {str(i): 1.0 for i in range(300)}),
            ("phases", {"a": math.nan, "b": 1.0}), ("phases", {"a": -1.0}), ("phases", {"a": 1e39}),
            ("phases", {str(i): 1.0 for i in range(300)}), ("phases", {"\x1b]0;x\x07" + "p" * 2000: 1.0}),
            ("rank", WORLD), ("rank", 1 << 40), ("rank", -5), ("rank", (1 << 64) - 1),
            ("world_size", 0), ("world_size", 1 << 62), ("world_size", -1),
            ("run", "someone-else"), ("v", 99), ("v", 0), ("v", -(1 << 63)),
            ("seq", (1 << 64) - 1), ("seq", -7), ("dropped", (1 << 64) - 1), ("dropped", -1),
            ("step", (1 << 63) - 1), ("config", {"deep": [[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]}),
            ("config", {str(i): i for i in range(5000)}), ("message", "x" * 40_000), ("name", "n" * 100),
            ("traceback", "t" * 100_000),
        ]
    )  # fmt: skip
    if field in msgspec.structs.asdict(base) or field in ("rank", "run", "v", "seq", "t"):
        setattr(base, field, value)
    if rng.random() < 0.05:
        return schema.encode(schema.Verdict(run=RUN, rank=1, verdict="straggler"))
    return schema.encode(base)


def wrong_types(rng: random.Random) -> bytes:
    kind = rng.choice(["hello", "step", "system", "event", "heartbeat", "verdict", "nope", "", 7, None])
    keys = ["rank", "seq", "t", "step", "step_s", "config", "custom", "mem", "world_size", "v", "run", "x"]
    values = [None, True, "str", -1, 1 << 70 if False else (1 << 63) - 1, 1.5, [], {}, [1, "a"], {"k": []}, b"\x00"]
    body = {k: rng.choice(values) for k in rng.sample(keys, rng.randint(0, len(keys)))}
    if rng.random() < 0.9:
        body["kind"] = kind
    return msgspec.msgpack.encode(rng.choice([body, [body], kind, rng.choice(values)]))


def hostile_frame(rng: random.Random) -> bytes:
    pick = rng.random()
    if pick < 0.2:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
    if pick < 0.5:
        return mutate(rng.choice(TEMPLATES), rng)
    if pick < 0.8:
        return hostile_record(rng)
    return wrong_types(rng)


def rank_view(core: HubCore, rank: int) -> tuple:
    """Everything the hub holds about ``rank`` (its records without the hub's stamps)."""
    r = core.state.ranks[rank]

    def plain(m):  # as bytes: a NaN loss is then equal to itself
        return None if m is None else schema.encode(msgspec.structs.replace(m, hseq=0))

    return (
        plain(r.hello), plain(r.step), plain(r.heartbeat), plain(r.system), r.steps_seen, r.exit_code, r.finished,
        r.seq.received, r.seq.max_seq, r.seq.lost, {k: ring.to_bytes() for k, ring in r.history.items() if k != "t"},
    )  # fmt: skip


def detector_view(core: HubCore) -> dict:
    """The straggler detector's pending windows: the steps it has kept, by rank."""
    return {rank: (dict(w.self_s), dict(w.data_s)) for rank, w in core.detector.stragglers._ranks.items()}


def check_encodable(core: HubCore) -> None:
    frames.encode(core.tick(5000.0))
    frames.decode_snapshot(frames.encode(core.snapshot()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 1 << 32), st.integers(50, 300), st.lists(st.binary(max_size=300), max_size=30))
def test_hub_ingest_never_raises_counts_every_reject_and_spares_the_valid_rank(tmp_path_factory, seed, n_hostile, blobs):
    rng = random.Random(seed)
    log = tmp_path_factory.mktemp("fuzz") / "telemetry.jsonl"
    core = HubCore(run_id=RUN, recorder=Recorder(log))
    alone = HubCore(run_id=RUN)
    valid = valid_frames(40)
    # The valid rank gets past the straggler warm-up first (see the report on
    # StragglerDetector.update: with only hostile ranks live it walks every window up to their
    # step numbers).
    head, tail = valid[:15], valid[15:]
    hostile = [hostile_frame(rng) for _ in range(n_hostile)] + blobs
    hostile = [h for h in hostile if not claims_valid_identity(h)]
    stream = [(True, f) for f in tail] + [(False, h) for h in hostile]
    rng.shuffle(stream)
    stream = [(True, f) for f in head] + stream

    taken = refused = 0
    for i, (is_valid, raw) in enumerate(stream):
        if is_valid:
            assert alone.ingest_bytes(raw, 1.0)
        ok = core.ingest_bytes(raw, 1.0)
        if is_valid:
            assert ok, schema.decode(raw)
        taken += ok
        refused += not ok
        if i % 50 == 0:
            check_encodable(core)
            alone.tick(5000.0)
    check_encodable(core)
    alone.tick(5000.0)

    assert core.received == taken
    assert sum(core.rejected.values()) + core.redundant == refused
    assert core.rejected["internal_error"] == 0
    assert rank_view(core, VALID) == rank_view(alone, VALID)
    assert core.state.ranks[VALID].seq.lost == 0
    # Every rank the hub tracks is one of the job's.
    assert set(core.state.ranks) <= set(range(WORLD))
    # The log holds every accepted record, and every line reads back.
    core.recorder.close()
    msgs, stats = load_log(log)
    assert stats.skipped_total == 0
    assert len(msgs) == taken + sum(1 for m in msgs if m.rank < 0 or m.seq < 0 or isinstance(m, schema.Verdict))
    assert sorted(m.seq for m in msgs if m.rank == VALID and isinstance(m, (schema.Hello, schema.Step, schema.Heartbeat))) == list(range(len(valid)))


@SETTINGS
@given(st.lists(st.binary(max_size=512), min_size=1, max_size=50))
def test_arbitrary_bytes_never_raise_out_of_ingest(blobs):
    core = HubCore(run_id=RUN)
    taken = sum(core.ingest_bytes(b, 0.0) for b in blobs)
    assert taken + sum(core.rejected.values()) + core.redundant == len(blobs)
    assert core.rejected["internal_error"] == 0
    check_encodable(core)


def test_a_hello_flood_of_distinct_ranks_is_bounded(monkeypatch):
    # Without a world size the hub learns it from the hellos, and never tracks more than
    # MAX_RANKS_TRACKED ranks; with one (the launcher passes it) it refuses every other rank.
    told = HubCore(run_id=RUN, world_size=WORLD)
    for r in range(0, 5000, 7):
        told.ingest(schema.Hello(run=RUN, rank=r, world_size=1 << 20), 0.0)
    assert set(told.state.ranks) <= set(range(WORLD))
    assert told.rejected["rank_out_of_range"] > 700

    monkeypatch.setattr(limits, "MAX_RANKS_TRACKED", 64)  # the hub reads it per message
    learnt = HubCore(run_id=RUN)
    big = limits.MAX_RANKS_TRACKED
    for r in range(big + 100):
        learnt.ingest(schema.Hello(run=RUN, rank=r, world_size=big + 100), 0.0)
    assert len(learnt.state.ranks) == big
    assert learnt.rejected["too_many_ranks"] == 100


def test_event_text_is_cut_not_refused():
    core = HubCore(run_id=RUN)
    core.ingest(schema.Hello(run=RUN, rank=0, world_size=1), 0.0)
    assert core.ingest(schema.Event(run=RUN, rank=0, seq=1, name="error", message="m" * 100_000, traceback="x" * 10 + "y" * 200_000), 0.0)
    ev = core.state.events[-1]
    assert len(ev.message) < limits.MAX_TEXT + 100
    assert ev.traceback.endswith("y" * 1000) and len(ev.traceback) < limits.MAX_TRACEBACK + 100


@pytest.mark.parametrize("max_count", [limits.MAX_COUNT, (1 << 63) - 1], ids=["max_count", "int64_max"])
def test_counters_summed_over_hostile_ranks_still_encode(monkeypatch, max_count):
    # Each rank's counts as large as the hub takes, in every one of its processes: its first
    # message (a hello, at any seq) says max_count messages lost, and so does each process
    # torchrun started again (a new pid and restart count: its seq starts again at 0, and its
    # next hello's seq is taken too); each heartbeat says max_count dropped. With the hub's
    # MAX_COUNT raised to int64's largest, the sums pass what MessagePack carries (2**64 - 1):
    # only the hub's clamp of its stats keeps the frame and snapshot encodable.
    monkeypatch.setattr(limits, "MAX_COUNT", max_count)  # the hub reads it per message
    big, ranks, restarts = max_count, 3, 3
    core = HubCore(run_id=RUN)
    for r in range(ranks):
        pid = 1000 * (r + 1)
        core.ingest(schema.Hello(run=RUN, rank=r, world_size=ranks, seq=big, pid=pid), 0.0)
        core.ingest(schema.Heartbeat(run=RUN, rank=r, seq=big, dropped=big), 0.0)
        for k in range(1, restarts + 1):
            core.ingest(schema.Hello(run=RUN, rank=r, world_size=ranks, seq=0, pid=pid + k, restart=k), 0.0)
            core.ingest(schema.Hello(run=RUN, rank=r, world_size=ranks, seq=big, pid=pid + k, restart=k), 0.0)
            core.ingest(schema.Heartbeat(run=RUN, rank=r, seq=big, dropped=big), 0.0)
    # The set-up took: nothing refused, and the counts are the large ones (each process lost
    # all but the 2 or 3 messages it sent of its max_count + 1).
    assert not any(core.rejected.values()) and core.redundant == 0
    assert core.state.lost >= ranks * (restarts + 1) * (big - 2)
    assert sum(r.heartbeat.dropped for r in core.state.ranks.values()) == ranks * big
    frames.encode(core.tick(5000.0))  # raises where a count does not fit
    snap = frames.decode_snapshot(frames.encode(core.snapshot()))
    limit = (1 << 63) - 1
    assert snap.stats.lost == min(core.state.lost, limit) and snap.stats.dropped == min(ranks * big, limit)


def mostly(valid: st.SearchStrategy, hostile: st.SearchStrategy) -> st.SearchStrategy:
    """``valid`` three times in four: a step must often be valid in every field at once."""
    return st.one_of(valid, valid, valid, hostile)


SECONDS = st.floats(0, 10)
ODD_FLOATS = st.floats() | st.sampled_from([-0.0, 1e308, -1e-9, 3.5e38, 1e39, math.inf, math.nan])
STEP_FIGURE = mostly(st.none() | SECONDS, ODD_FLOATS)


@SETTINGS
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "rank": mostly(st.sampled_from([0, 1, 2]), st.sampled_from([3, 7, -1])),
                "seq": mostly(st.integers(0, 40), st.sampled_from([-2, -1, limits.MAX_COUNT, limits.MAX_COUNT + 1])),
                "v": mostly(st.just(schema.SCHEMA_VERSION), st.integers(0, schema.SCHEMA_VERSION + 1)),
                "run": mostly(st.sampled_from([RUN, ""]), st.just("someone-else")),
                "t": mostly(st.just(1.0e9) | st.floats(1.0e9, 2.0e9), ODD_FLOATS),
                "step_s": mostly(SECONDS, ODD_FLOATS),
                "data_s": STEP_FIGURE,
                "forward_s": STEP_FIGURE,
                "self_s": STEP_FIGURE,
                "comm_s": STEP_FIGURE,
                "mono": mostly(st.floats(0, 1e6), ODD_FLOATS),
                "loss": st.none() | st.floats(),
                "custom": mostly(st.just({}), st.dictionaries(st.text(max_size=3), ODD_FLOATS, min_size=1, max_size=3)),
                # The script's own phases: a step with any goes the general way, like custom's.
                "phases": mostly(st.just({}), st.dictionaries(st.text(max_size=3), SECONDS | ODD_FLOATS, min_size=1, max_size=3)),
            }
        ).map(lambda kw: schema.Step(step=max(kw["seq"], 0), **kw)),
        max_size=40,
    ),
    st.data(),
)
def test_the_hubs_fast_step_path_takes_and_refuses_as_the_general_one(tmp_path_factory, steps, data):
    # ingest_bytes takes the plainly valid steps of known ranks by a short path (the hot path
    # at scale); ingest judges every message the general way. Fed the same stream, both hubs
    # must end in the same state, with the same counts and the same log.
    # The hub's loop hands over a pass's frames at once (ingest_batch): a third hub takes the
    # stream in batches cut at drawn points, hostile frames among them, and must end the same.
    fast, general, batched = (HubCore(run_id=RUN, world_size=4) for _ in range(3))
    logs = tmp_path_factory.mktemp("fast")
    fast.recorder, general.recorder = Recorder(logs / "fast.jsonl"), Recorder(logs / "general.jsonl")
    batched.recorder = Recorder(logs / "batched.jsonl")
    hellos = [schema.Hello(run=RUN, rank=r, world_size=4, t=1.0e9) for r in range(3)]
    raws = [schema.encode(m) for m in hellos + steps]
    taken = 0
    # The hub's own notes (a foreign run's records refused, said at once) carry its clock: one
    # clock for the three, so the run's latest time is the same in each.
    clock = mock.patch.object(hubcore.time, "time", lambda: 1.5e9)
    clock.start()
    try:
        for raw in raws:
            ok = general.ingest(schema.decode(raw), 1.0)
            assert fast.ingest_bytes(raw, 1.0) == ok
            taken += ok
        garbage = b"\x81\xa4kind\xa4step\x00"  # does not decode: counted, and the batch goes on
        general.rejected["undecodable"] += 1
        fast.rejected["undecodable"] += 1
        cuts = sorted(data.draw(st.lists(st.integers(0, len(raws)), max_size=4)))
        taken_batched = 0
        chunks = [raws[a:b] for a, b in zip([0] + cuts, cuts + [len(raws)])]
        chunks[-1] = chunks[-1] + [garbage]
        for chunk in chunks:
            taken_batched += batched.ingest_batch(chunk, 1.0)
    finally:
        clock.stop()
    assert taken_batched == taken
    for other in (fast, batched):
        assert other.received == general.received and other.rejected == general.rejected and other.hseq == general.hseq
        assert other.state.counts == general.state.counts and other.state.t_last == general.state.t_last
        for r in general.state.ranks:
            assert rank_view(other, r) == rank_view(general, r)
        assert detector_view(other) == detector_view(general)
    for core in (fast, general, batched):
        check_encodable(core)
        core.recorder.close()
    # The same lines, but for the clock time on the hub's own notes (seq -1).
    def lines(name):
        records = [json.loads(line) for line in (logs / name).read_bytes().split(b"\n") if line]
        return [{k: v for k, v in rec.items() if k != "t" or rec.get("seq") != -1} for rec in records]

    assert lines("fast.jsonl") == lines("general.jsonl") == lines("batched.jsonl")
