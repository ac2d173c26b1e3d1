"""The two ends of the ingest headroom bench (bench/headroom.py): sender processes that speak
for 1024 ranks, and the receivers they feed in turn: a hub process, the raw pyzmq PULL loop
(the baseline) and the floor loop (the raw loop plus ``schema.decode`` and the JSON line).
Also used by bench/hubcost.py (the same frames) and bench/hubprofile.py (a hub under load)."""

from __future__ import annotations

import multiprocessing as mp
import os
import struct
import time

import zmq

from pardash.telemetry import schema
from pardash.telemetry.simulate import SimConfig, step_message
from pardash.telemetry.spawn import spawn_hub

from .soak import RANKS, RUN, StatsWatcher, _stop

SENDERS = 2
"""Sender processes (one a core)."""
HWM = 10_000
"""Each sender socket's SNDHWM: the reporter's default."""
SLICE_S = 0.005
"""A paced sender's time slice."""


# -- headroom: senders ------------------------------------------------------------------------

_SEQ, _STEP, _T, _MONO = 0x7FFFFFF0, 0x7FFFFFE0, 1234567.25, 7654321.5
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")


def step_template(rank: int, ranks: int = RANKS) -> tuple[bytearray, tuple[int, int, int, int]]:
    """A simulated rank's step message (``pardash simulate``'s own, encoded by ``schema.encode``)
    and the byte offsets at which seq, step (fixed-width uint32) and t, mono (float64) are
    patched for each send."""
    msg = step_message(SimConfig(ranks=ranks), rank, _STEP, 0.0013, 0.0, 0.0123)
    msg.run, msg.rank, msg.seq, msg.t, msg.mono = RUN, rank, _SEQ, _T, _MONO
    raw = schema.encode(msg)
    offs = (
        raw.index(b"\xce" + _U32.pack(_SEQ)) + 1,
        raw.index(b"\xce" + _U32.pack(_STEP)) + 1,
        raw.index(b"\xcb" + _F64.pack(_T)) + 1,
        raw.index(b"\xcb" + _F64.pack(_MONO)) + 1,
    )
    return bytearray(raw), offs


def hello_bytes(rank: int, ranks: int = RANKS) -> bytes:
    return schema.encode(
        schema.Hello(run=RUN, rank=rank, seq=0, t=time.time(), local_rank=rank % 8, world_size=ranks, node=rank // 8,
                     host=f"node{rank // 8:03d}", pid=100_000 + rank, strategy="fsdp", backend="nccl", device="cuda:0",
                     device_name="Simulated H100", device_mem_bytes=80 << 30, torch_version="simulated", params_count=124_000_000,
                     params_bytes=124_000_000 * 4, source="simulate", config={"simulated": True})
    )  # fmt: skip


def _sender_main(conn, first: int, count: int, ranks: int) -> None:
    """A sender process: for each command, connect, send hellos, then steps at a rate (or a
    burst of N as fast as it can), report, and close when told."""
    ctx = zmq.Context()
    tpls = [step_template(r, ranks) for r in range(first, first + count)]
    hellos = [hello_bytes(r, ranks) for r in range(first, first + count)]
    u32, f64 = _U32.pack_into, _F64.pack_into
    while True:
        cmd = conn.recv()
        if cmd is None:
            break
        endpoint, rate, window_s, burst, hwm, start_at = cmd
        sock = ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, hwm)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        send, NB, Again = sock.send, zmq.NOBLOCK, zmq.Again
        sent = dropped = 0
        for h in hellos:
            try:
                send(h, NB)
                sent += 1
            except Again:
                dropped += 1
        seq = 0
        i = 0  # messages of the level so far, cycling through the ranks
        n = len(tpls)
        while time.monotonic() < start_at:
            time.sleep(0.001)
        t0 = time.monotonic()
        target_total = burst if burst else int(rate * window_s)
        while i < target_total:
            now = time.monotonic()
            due = target_total if burst else min(target_total, int(rate * (now - t0 + SLICE_S)))
            t_wall = time.time()
            while i < due:
                k = i % n
                if k == 0:
                    seq += 1
                buf, (o_seq, o_step, o_t, o_mono) = tpls[k]
                u32(buf, o_seq, seq)
                u32(buf, o_step, seq)
                f64(buf, o_t, t_wall)
                f64(buf, o_mono, now)
                try:
                    send(buf, NB, copy=True)
                    sent += 1
                except Again:
                    dropped += 1
                i += 1
            if not burst:
                if now - t0 > window_s * 1.05 + 0.1:
                    break  # the senders cannot keep up: the level ends on time, under-offered
                left = t0 + (i / rate) - time.monotonic()
                if left > 0:
                    time.sleep(min(left, SLICE_S))
            elif window_s and time.monotonic() - t0 > window_s:
                break
        elapsed = time.monotonic() - t0
        conn.send((sent, dropped, elapsed, i))
        conn.recv()  # close: the receiver has been judged
        sock.close(0)
    ctx.term()


class Senders:
    """``SENDERS`` processes speaking for ``ranks`` ranks between them."""

    def __init__(self, n: int = SENDERS, ranks: int = RANKS) -> None:
        spawn = mp.get_context("spawn")
        self.conns, self.procs = [], []
        per = ranks // n
        for k in range(n):
            a, b = spawn.Pipe()
            first = k * per
            count = per if k < n - 1 else ranks - first
            p = spawn.Process(target=_sender_main, args=(b, first, count, ranks), daemon=True)
            p.start()
            self.conns.append(a)
            self.procs.append(p)

    def start(self, endpoint: str, rate: float, window_s: float, *, burst: int = 0, hwm: int = HWM, lead_s: float = 1.0) -> float:
        start_at = time.monotonic() + lead_s
        n = len(self.conns)
        for c in self.conns:
            c.send((endpoint, rate / n, window_s, burst // n, hwm, start_at))
        return start_at

    def results(self, timeout_s: float) -> tuple[int, int, float, int]:
        """(sent, dropped, longest elapsed, asked) summed over the senders."""
        sent = dropped = asked = 0
        elapsed = 0.0
        for c in self.conns:
            if not c.poll(timeout_s):
                raise RuntimeError("a sender did not report")
            s, d, e, i = c.recv()
            sent, dropped, asked, elapsed = sent + s, dropped + d, asked + i, max(elapsed, e)
        return sent, dropped, elapsed, asked

    def release(self) -> None:
        for c in self.conns:
            c.send("close")

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send(None)
            except (BrokenPipeError, OSError):
                pass
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.kill()


# -- headroom: receivers ----------------------------------------------------------------------


def _raw_main(conn, count, last_t, log: str = "") -> None:
    """The baseline: a PULL socket like the hub's ingest, a poller and a NOBLOCK drain loop
    like the hub's; it only counts. With ``log``, the floor: it also decodes each message
    (``schema.decode``) and appends their JSON lines to ``log`` (``encode_json_lines`` per pass,
    a buffered file): what any hub that checks and records every message must do, and no more."""
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.MAXMSGSIZE, schema.MAX_MESSAGE_BYTES)
    pull.setsockopt(zmq.RCVHWM, 100_000)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    conn.send(f"tcp://127.0.0.1:{port}")
    poller = zmq.Poller()
    poller.register(pull, zmq.POLLIN)
    recv, NB, Again = pull.recv, zmq.NOBLOCK, zmq.Again
    decode, lines = schema.decode, schema.encode_json_lines
    fh = open(log, "ab") if log else None
    n = 0
    while not conn.poll():
        if not poller.poll(100):
            continue
        if fh is None:
            for _ in range(50_000):
                try:
                    recv(NB, copy=True)
                except Again:
                    break
                n += 1
        else:
            got: list[bytes] = []
            for _ in range(256):  # the hub's pass
                try:
                    got.append(recv(NB, copy=True))
                except Again:
                    break
            fh.write(lines([decode(raw) for raw in got]))
            n += len(got)
        count.value = n
        last_t.value = time.time()
    if fh is not None:
        fh.close()
    pull.close(0)
    ctx.term()


class RawReceiver:
    kind = "raw PULL loop"
    log = ""

    def __init__(self) -> None:
        spawn = mp.get_context("spawn")
        self.count = spawn.Value("q", 0, lock=False)
        self.last_t = spawn.Value("d", 0.0, lock=False)
        self.conn, child = spawn.Pipe()
        self.proc = spawn.Process(target=_raw_main, args=(child, self.count, self.last_t, self.log), daemon=True)
        self.proc.start()
        self.endpoint = self.conn.recv()
        self.pid = self.proc.pid

    def received(self, timeout_ms: int = 50) -> tuple[int, float]:
        time.sleep(timeout_ms / 1000)
        return self.count.value, self.last_t.value

    lost = 0

    def close(self) -> None:
        self.conn.send("stop")
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
        if self.log:
            try:
                os.unlink(self.log)
            except OSError:
                pass


class FloorReceiver(RawReceiver):
    """The raw loop that also decodes each message and writes its JSON line."""

    kind = "floor loop"

    def __init__(self, folder: str) -> None:
        self.log = os.path.join(folder, f"floor-{time.monotonic_ns()}.jsonl")
        super().__init__()


class HubReceiver:
    kind = "hub"

    def __init__(self, ranks: int, folder: str) -> None:
        self.log = os.path.join(folder, f"headroom-{time.monotonic_ns()}.jsonl")
        self.proc, info = spawn_hub(["--run-id", RUN, "--log", self.log, "--no-registry", "--world-size", str(ranks)])
        self.endpoint = info["ingest"]
        self.pid = self.proc.pid
        self.ctx = zmq.Context()
        self.watch = StatsWatcher(self.ctx, info["updates"])

    def received(self, timeout_ms: int = 50) -> tuple[int, float]:
        st = self.watch.poll(timeout_ms)
        return st.received, self.watch.t

    @property
    def lost(self) -> int:
        return self.watch.stats.lost

    def close(self) -> None:
        _stop(self.proc)
        self.watch.close()
        self.ctx.term()
        try:
            os.unlink(self.log)
        except OSError:
            pass
