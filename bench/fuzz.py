"""Hostile frames against a live hub process (real sockets): it stays up, its memory stays flat,
every frame is taken or counted under a reason, and a valid rank publishing alongside is
recorded completely.

``python -m bench.fuzz [FRAMES]`` (default 100,000). The hub runs as ``pardash hub`` does, in a
process of its own told the world size (as the launcher tells it); a viewer follows it through
the real client. One PUSH socket sends the hostile frames: random bytes, truncated and mutated
valid frames, wrong types, unknown kinds and versions, NaN and infinities, ranks out of range,
foreign run ids, verdicts from a rank, giant and deeply nested configs, huge counters, frames
past the per-kind size limits, and multipart messages (the hub judges each part as a frame).
Frames above the socket's 1 MiB limit go on sockets of their own: libzmq drops them and the
connection before Python sees anything, so they cannot be counted, only survived.

Accounting: every hostile part, plus every valid message, must show up in the hub's own
counters as accepted (``received``) or rejected by reason, exactly. Hostile frames never claim
the valid rank's identity (without keys anyone can speak for any rank; test_security.py shows
keys keeping strangers out altogether).

Baselines (same run): the hub's RSS after the warm-up fifth of the frames against its RSS at the
end; the hostile frames against the valid rank's share of the traffic.
"""

from __future__ import annotations

import math
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

import msgspec
import zmq

from pardash.telemetry import schema, security
from pardash.telemetry.client import HubClient
from pardash.telemetry.env import RankIdentity
from pardash.telemetry.logreader import load_log
from pardash.telemetry.reporter import Reporter
from pardash.telemetry.spawn import spawn_hub

from .common import Row

RUN = "fuzz-run"
WORLD = 4
VALID = 0
"""The valid rank; hostile frames speak for ranks 1..3 or for ranks that do not exist."""
VALID_EVERY = 20
"""One valid message per this many hostile frames."""
OVERSIZED = 10
"""Frames above the socket limit (each costs its sender the connection)."""
N = 100_000
PACE = 2_000
"""Messages between waits for the hub to catch up: the fuzz measures what the hub holds, not
how far a sender can run ahead of it (that backlog sits in libzmq, bounded by the HWMs)."""

TEMPLATES = [
    schema.encode(m)
    for m in (
        schema.Hello(run=RUN, rank=1, seq=0, t=1000.0, world_size=WORLD, host="h", strategy="ddp", config={"x": [1, {"y": 2}], "lr": 0.1}),
        schema.Step(run=RUN, rank=2, seq=3, t=1001.0, step=12, loss=1.0, step_s=0.01, self_s=0.005, data_s=0.001, mono=3.0,
                    mem=schema.Mem(params_bytes=100, params_full_bytes=400), custom={"a": 1.0}),
        schema.Heartbeat(run=RUN, rank=3, seq=4, t=1002.0, step=12, phase="backward", phase_s=0.1, dropped=2, mono=4.0),
        schema.System(run=RUN, rank=1, seq=5, t=1003.0, cpu_pct=50.0, rss_bytes=1 << 30, gpu_util_pct=99.0),
        schema.Event(run=RUN, rank=2, seq=6, t=1004.0, name="error", message="boom", traceback="Traceback ...", step=3),
    )
]  # fmt: skip

# (field, value) pairs that make a well-formed record hostile
HOSTILE_FIELDS = [
    ("t", math.nan), ("t", math.inf), ("t", -math.inf), ("t", -1.0), ("step_s", math.nan), ("step_s", -math.inf),
    ("step_s", -0.5), ("self_s", math.inf), ("mono", math.inf), ("phase_s", math.nan), ("mono", -math.nan),
    ("custom", {"a": math.nan, "b": math.inf, "c": 1.0}), ("custom", {str(i): 1.0 for i in range(400)}),
    ("rank", WORLD), ("rank", WORLD + 7), ("rank", 1 << 40), ("rank", -5), ("rank", (1 << 64) - 1), ("rank", -(1 << 63)),
    ("world_size", 0), ("world_size", 1 << 62), ("world_size", -1), ("world_size", 2),
    ("run", "someone-else"), ("run", "x" * 5000), ("v", 99), ("v", 0), ("v", -(1 << 63)), ("v", (1 << 64) - 1),
    ("seq", (1 << 64) - 1), ("seq", 1 << 50), ("dropped", (1 << 64) - 1), ("dropped", -1),
    ("step", (1 << 63) - 1), ("step", -(1 << 63)), ("loss", math.nan), ("loss", -math.inf), ("lr", math.inf),
    ("config", {"deep": [[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]]}), ("config", {str(i): i for i in range(5000)}),
    ("config", {"blob": "c" * 300_000}), ("phase", "p" * 70_000), ("message", "m" * 40_000),
    ("traceback", "t" * 100_000), ("name", "n" * 100), ("host", "\x00\x01\x02"),
    ("code", (1 << 64) - 1), ("code", -(1 << 63)), ("cpu_pct", math.nan), ("gpu_util_pct", -math.inf),
]  # fmt: skip


class HostileFrames:
    """A seeded source of hostile frames, each with the category it was made as."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def message(self) -> tuple[str, list[bytes]]:
        """One ZeroMQ message: (category, parts). Never one that speaks for the valid rank."""
        while True:
            if self.rng.random() < 0.05:
                parts = [self.frame()[1] for _ in range(self.rng.randint(2, 4))]
                what = "multipart"
            else:
                what, raw = self.frame()
                parts = [raw]
            if not any(claims_valid_identity(p) for p in parts):
                return what, parts

    def frame(self) -> tuple[str, bytes]:
        rng = self.rng
        pick = rng.random()
        if pick < 0.15:
            return "random_bytes", rng.randbytes(rng.randrange(256))
        if pick < 0.25:
            t = rng.choice(TEMPLATES)
            return "truncated", t[: rng.randrange(len(t))]
        if pick < 0.50:
            return "mutated", mutate(rng.choice(TEMPLATES), rng)
        if pick < 0.60:
            return "wrong_types", wrong_types(rng)
        if pick < 0.65:
            return "deep_nesting", deep_hello(rng.choice((50, 500, 5000)))
        return "hostile_field", hostile_record(rng)


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
            b[i:i] = rng.randbytes(rng.randint(1, 9))
        elif op == 3 and b:
            del b[i : i + rng.randint(1, 4)]
        else:
            del b[rng.randrange(len(b) + 1) :]
    return bytes(b)


def wrong_types(rng: random.Random) -> bytes:
    """MessagePack of the right general shape with the wrong kinds and types in it."""
    kind = rng.choice(["hello", "step", "system", "event", "heartbeat", "verdict", "nope", "", "STEP", 7, None])
    keys = ["rank", "seq", "t", "step", "step_s", "config", "custom", "mem", "world_size", "v", "run", "kind2", "x"]
    values = [None, True, "str", -1, (1 << 63) - 1, 1.5, [], {}, [1, "a"], {"k": []}, b"\x00\xff", math.nan]
    body = {k: rng.choice(values) for k in rng.sample(keys, rng.randint(0, len(keys)))}
    if rng.random() < 0.9:
        body["kind"] = kind
    return msgspec.msgpack.encode(rng.choice([body, [body], kind, rng.choice(values), {1: body}]))


def deep_hello(depth: int) -> bytes:
    """A hello whose config nests ``depth`` lists deep (1 KiB at depth 1000)."""
    raw = msgspec.msgpack.encode({"kind": "hello", "run": RUN, "rank": 1, "world_size": WORLD, "config": {"a": 0}})
    return raw.replace(msgspec.msgpack.encode({"a": 0}), b"\x81\xa1a" + b"\x91" * depth + b"\x00")


def hostile_record(rng: random.Random) -> bytes:
    """A well-formed record of ranks 1..3 with one or two hostile fields, or a verdict."""
    if rng.random() < 0.03:
        return schema.encode(schema.Verdict(run=RUN, rank=rng.randrange(1, WORLD), verdict="straggler", message="trust me"))
    msg = schema.decode(rng.choice(TEMPLATES))
    for _ in range(rng.randint(1, 2)):
        name, value = rng.choice(HOSTILE_FIELDS)
        if hasattr(msg, name):
            setattr(msg, name, value)
    try:
        return schema.encode(msg)
    except (TypeError, ValueError, OverflowError):
        return rng.randbytes(16)


def claims_valid_identity(raw: bytes) -> bool:
    """True for a frame that speaks for the valid rank or for the launcher (seq < 0):
    impersonation, which only keys can stop. That is a record that decodes, or a map that says
    ``rank`` plainly: the hub books a refused message to the rank it names (counted received,
    not lost: HubCore._refused_raw), so a mutated frame naming the valid rank changes its counts."""
    try:
        msg = schema.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        try:
            plain = msgspec.msgpack.decode(raw)
        except Exception:  # (as the hub: nested past the stack, and so on)
            return False
        return isinstance(plain, dict) and type(plain.get("rank")) is int and plain["rank"] == VALID
    return msg.rank == VALID or msg.seq < 0


@dataclass
class FuzzResult:
    """What a fuzz run found (the numbers the bench and the test report)."""

    messages: int = 0
    """Hostile ZeroMQ messages sent (a multipart message is one)."""
    frames: int = 0
    """Hostile frames sent (each part of a multipart message is one)."""
    sent_by_category: Counter = field(default_factory=Counter)
    oversized: int = 0
    """Frames above the socket's size limit, each on a socket of its own."""
    valid_sent: int = 0
    received: int = 0
    """The hub's count of accepted messages (valid plus hostile ones that are well-formed)."""
    rejected: dict[str, int] = field(default_factory=dict)
    accounted: bool = False
    """received + rejected == valid + hostile frames, exactly."""
    valid_logged: int = 0
    valid_missing: list[int] = field(default_factory=list)
    valid_dropped: int = 0
    """Messages the valid rank's reporter dropped (queue full)."""
    hostile_logged: int = 0
    log_skipped: int = 0
    rss_start: int = 0
    rss_warm: int = 0
    rss_end: int = 0
    rss_curve: list[tuple[int, int]] = field(default_factory=list)
    """(frames sent, hub RSS) at each tenth of the run, each taken once the hub caught up."""
    hub_alive: bool = False
    hub_exit: int | None = None
    viewer_frames: int = 0
    seconds: float = 0.0

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())


def fuzz(n_frames: int = N, *, seed: int = 0, oversized: int = OVERSIZED, workdir: str | None = None) -> FuzzResult:
    """Send about ``n_frames`` hostile frames (and a valid rank's messages) to a fresh hub
    process and collect what happened."""
    import psutil

    res = FuzzResult()
    tmp = tempfile.TemporaryDirectory() if workdir is None else None
    folder = workdir or tmp.name
    log = os.path.join(folder, "telemetry.jsonl")
    env = {k: v for k, v in os.environ.items() if k != security.CURVE_DIR_VAR}
    hub, info = spawn_hub(["--run-id", RUN, "--log", log, "--no-registry", "--world-size", str(WORLD)], env=env)
    ctx = zmq.Context()
    viewer = rep = push = None
    try:
        proc = psutil.Process(hub.pid)
        res.rss_start = proc.memory_info().rss
        viewer = HubClient(info["updates"], info["snapshot"], context=ctx, curve=False)
        ident = RankIdentity(rank=VALID, local_rank=0, world_size=WORLD, node=0, host="fuzz", restart=0)
        rep = Reporter(info["ingest"], run=RUN, identity=ident, heartbeat_s=0, context=ctx, curve=False)
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 5000)
        push.connect(info["ingest"])

        hostile = HostileFrames(seed)
        rep.hello(strategy="ddp", world_size=WORLD, config={"lr": 0.1})
        step = 0
        # The valid rank gets past the straggler warm-up before the hostile frames start.
        for _ in range(12):
            rep.step(step=step, loss=1.0, step_s=0.01, self_s=0.004, data_s=0.001, samples=8)
            step += 1
        oversized_at = {n_frames * (i + 1) // (oversized + 1) for i in range(oversized)}
        checkpoints = [n_frames * (i + 1) // 10 for i in range(10)]

        def caught_up(timeout_s: float = 120.0) -> bool:
            # Wait until the hub has taken or refused everything sent so far, so RSS measures
            # the hub's state, not a backlog queued in libzmq (bounded by the HWMs anyway).
            want = rep.sent + res.frames
            end = time.monotonic() + timeout_s
            while time.monotonic() < end and hub.poll() is None:
                viewer.poll()
                st = viewer.stats
                if st.received + sum(st.rejected.values()) >= want:
                    return True
                time.sleep(0.02)
            return False

        t0 = time.perf_counter()
        while res.frames < n_frames:
            what, parts = hostile.message()
            push.send_multipart(parts)  # blocking: nothing hostile is lost before the hub
            res.messages += 1
            res.frames += len(parts)
            res.sent_by_category[what] += len(parts)
            if res.messages % VALID_EVERY == 0:
                if step % 10 == 0:
                    rep.heartbeat()
                rep.step(step=step, loss=1.0 / (step + 1), step_s=0.01, self_s=0.004, data_s=0.001, samples=8)
                step += 1
            if res.messages in oversized_at:
                _send_oversized(ctx, info["ingest"])
                res.oversized += 1
            if res.messages % 256 == 0:
                viewer.poll()
            if res.messages % PACE == 0:
                caught_up()
            if checkpoints and res.frames >= checkpoints[0]:
                checkpoints.pop(0)
                caught_up()
                res.rss_curve.append((res.frames, proc.memory_info().rss))
        res.valid_sent = rep.sent
        res.valid_dropped = rep.dropped
        expected = res.valid_sent + res.frames
        caught_up()
        res.seconds = time.perf_counter() - t0
        res.rss_warm = res.rss_curve[1][1] if len(res.rss_curve) > 1 else 0
        res.received = viewer.stats.received
        res.rejected = dict(viewer.stats.rejected)
        res.accounted = res.received + res.rejected_total == expected
        res.viewer_frames = viewer.frames_applied
        res.hub_alive = hub.poll() is None
        if res.hub_alive:
            res.rss_end = proc.memory_info().rss
    finally:
        for s in (rep, viewer):
            if s is not None:
                s.close()
        if push is not None:
            push.close(0)
        ctx.term()
        if hub.poll() is None:
            hub.send_signal(signal.SIGTERM)
        try:
            res.hub_exit = hub.wait(30)
        except Exception:
            hub.kill()
            res.hub_exit = hub.wait()
    msgs, stats = load_log(log)
    res.log_skipped = stats.skipped_total
    seqs = Counter(m.seq for m in msgs if m.rank == VALID and m.seq >= 0)
    res.valid_logged = sum(seqs.values())
    res.valid_missing = [s for s in range(res.valid_sent) if seqs.get(s) != 1]
    res.hostile_logged = sum(1 for m in msgs if 0 < m.rank and m.seq >= 0 and not isinstance(m, schema.Verdict))
    if tmp is not None:
        tmp.cleanup()
    return res


def _send_oversized(ctx: zmq.Context, endpoint: str) -> None:
    """One frame of 1.5 MiB on a socket of its own: libzmq drops it and the connection."""
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.LINGER, 1000)
    s.connect(endpoint)
    s.send(schema.encode(schema.Event(run=RUN, rank=1, seq=1, name="error", message="x" * (3 << 19))))
    s.close()


def _slope(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of RSS (bytes) over frames."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f}"


def run(n_frames: int = N) -> tuple[list[Row], str]:
    r = fuzz(n_frames)
    after = [rss for frames_, rss in r.rss_curve[1:]]
    peak = max(after) if after and r.rss_end else 0
    growth = peak / r.rss_warm if r.rss_warm and peak else float("nan")
    complete = r.valid_logged == r.valid_sent and not r.valid_missing
    rows = [
        Row("fuzz: live hub", "hostile frames", f"{r.frames:,} ({r.messages:,} messages)", f"{r.valid_sent:,} valid messages alongside",
            f"{r.frames / max(r.valid_sent, 1):.0f}x", ">= 100,000, hub up", r.frames >= 100_000 and r.hub_alive and r.hub_exit == 0),
        Row("fuzz: live hub", "every frame counted", f"{r.received:,} taken + {r.rejected_total:,} rejected",
            f"{r.valid_sent + r.frames:,} sent", "exact" if r.accounted else "MISMATCH", "exact, 0 internal errors",
            r.accounted and not r.rejected.get("internal_error")),
        Row("fuzz: live hub", "valid rank recorded", f"{r.valid_logged:,} of {r.valid_sent:,} seqs", f"{r.valid_dropped} dropped by its reporter",
            "complete" if complete else f"{len(r.valid_missing)} missing", "all, once each", complete and r.valid_dropped == 0),
        Row("fuzz: live hub", "hub RSS MiB (start / warm / end; peak after warm-up)",
            f"{_mib(r.rss_start)} / {_mib(r.rss_warm)} / {_mib(r.rss_end)}; {_mib(peak)}", f"{_mib(r.rss_warm)} after {r.frames // 5:,} frames",
            f"{growth:.2f}x", "peak <= 1.5x warm (bounded; allocator noise is a few MiB)", growth <= 1.5),
    ]  # fmt: skip
    reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(r.rejected.items(), key=lambda kv: -kv[1]))
    sent = ", ".join(f"{k} {v:,}" for k, v in r.sent_by_category.most_common())
    curve = " ".join(f"{_mib(rss)}" for _, rss in r.rss_curve)
    slope = _slope(r.rss_curve[1:]) * 10_000 / 1024  # KiB per 10,000 frames after warm-up
    note = (
        f"fuzz: {r.frames:,} hostile frames in {r.seconds:.1f} s against a `pardash hub` process told world size {WORLD}, "
        f"plus {r.oversized} frames over the 1 MiB socket limit (dropped by libzmq with their connection, uncountable by design). "
        f"Sent: {sent}. Rejected by reason: {reasons}. Accepted hostile records (well-formed, for ranks 1..{WORLD - 1}): "
        f"{r.received - r.valid_sent:,}, of which {r.hostile_logged:,} in the log; log lines skipped on reading: {r.log_skipped}. "
        f"Hub RSS MiB at each tenth of the run (hub caught up): {curve}; least-squares trend after warm-up "
        f"{slope:+.0f} KiB per 10,000 frames. "
        f"The viewer applied {r.viewer_frames} frames throughout; hub exit code {r.hub_exit}."
    )
    return rows, note


if __name__ == "__main__":
    from .common import standalone

    def _frames(parser) -> None:
        parser.add_argument("frames", nargs="?", type=int, default=N, help=f"hostile frames to send (default {N:,})")

    sys.exit(standalone(__spec__.name, __doc__, lambda ns: run(ns.frames), configure=_frames))
