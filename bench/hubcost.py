"""The hub's work per step message, against decoding the same frame alone (issue 7).

``python -m bench hubcost``. The headroom bench (bench/headroom.py) measures rates on a machine
the senders share, so its figures move with the machine; this one counts what the hub does.
A workload runs in a child process: 1024 ranks' hellos, then 30 steps of each rank (30,720
frames built by ``pardash simulate``'s builder, as the headroom senders build them) taken by a
``HubCore`` the way a hub process takes them: ``ingest_batch`` in passes of 256, a frame (tick,
``frames.encode``) and a flush of the JSONL log to a temporary file every 8,192 frames, the
hub process's garbage-collector settings. The baseline, in the same run: ``schema.decode`` of
the same frames, and nothing else. The floor, in the same run: ``schema.decode`` of each frame
and its JSON line written, nothing else: what any hub that checks and records every frame must
spend, so hub/floor bounds what reworking the hub's Python could still gain.

- **Instructions** (deterministic): each workload under valgrind's callgrind, less a run that
  only builds the frames, divided by the frames. Needs ``valgrind``; the row says so without.
- **CPU time**: the same workloads in this process, best of 5 by ``time.process_time``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from .common import Row

ROUNDS = 30
RANKS = 1024
PASS = 256
FRAME_EVERY = 8192


def _frames():
    from .ingest_peers import _F64, _U32, hello_bytes, step_template

    hellos = [hello_bytes(r, RANKS) for r in range(RANKS)]
    tpls = [step_template(r, RANKS) for r in range(RANKS)]
    out = []
    for s in range(1, ROUNDS + 1):
        for buf, (o_seq, o_step, o_t, o_mono) in tpls:
            _U32.pack_into(buf, o_seq, s)
            _U32.pack_into(buf, o_step, s)
            _F64.pack_into(buf, o_t, 1.7e9 + s * 0.1)
            _F64.pack_into(buf, o_mono, 1000.0 + s * 0.1)
            out.append(bytes(buf))
    return hellos, out


def _workload(mode: str, hellos: list[bytes], frames_: list[bytes], folder: str) -> float:
    """Every mode sets up the same hub (hellos taken, a first frame); 'hub' then takes the step
    frames, 'decode' only decodes them, 'floor' decodes them and writes their JSON lines to a
    file in passes (what any hub that checks and records every frame must do, and no more),
    'base' stops there (what the others are counted above)."""
    from pardash.telemetry import frames, schema
    from pardash.telemetry.hub import _tune_gc
    from pardash.telemetry.hubcore import HubCore
    from pardash.telemetry.recorder import Recorder

    rec = Recorder(os.path.join(folder, f"hubcost-{os.getpid()}-{time.monotonic_ns()}.jsonl"))
    core = HubCore(run_id="soak-run", recorder=rec, world_size=RANKS)
    now = 1000.0
    core.ingest_batch(hellos, now)
    frames.encode(core.tick(now))
    _tune_gc()
    t0 = time.process_time()
    if mode == "decode":
        decode = schema.decode
        for raw in frames_:
            decode(raw)
    elif mode == "floor":
        decode, lines = schema.decode, schema.encode_json_lines
        with open(os.path.join(folder, f"floor-{os.getpid()}.jsonl"), "wb") as fh:
            for i in range(0, len(frames_), PASS):
                fh.write(lines([decode(raw) for raw in frames_[i : i + PASS]]))
    elif mode == "hub":
        for i in range(0, len(frames_), PASS):
            core.ingest_batch(frames_[i : i + PASS], now)
            if (i + PASS) % FRAME_EVERY == 0:
                now += 0.1
                frames.encode(core.tick(now))
        frames.encode(core.tick(now + 0.1))
        rec.flush()
    spent = time.process_time() - t0
    if mode == "hub":
        if core.state.lost or core.rejected or core.received != len(hellos) + len(frames_):
            raise SystemExit(f"the hub did not take every frame: {core.received} taken, {dict(core.rejected)} rejected")
    rec.close()
    os.unlink(rec.path)
    return spent


def _child(mode: str) -> None:
    hellos, frames_ = _frames()
    folder = tempfile.mkdtemp(prefix="pardash-hubcost-")
    try:
        _workload(mode, hellos, frames_, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def instructions() -> dict[str, float] | None:
    """Instructions per frame for 'hub' and 'decode' (callgrind), or None without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    counts = {}
    for mode in ("base", "decode", "floor", "hub"):
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m", "bench.hubcost", "--child", mode],
            capture_output=True, text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )  # fmt: skip
        m = re.search(r"Collected : (\d+)", proc.stderr)
        if proc.returncode != 0 or m is None:
            raise RuntimeError(f"callgrind run '{mode}' failed: {proc.stderr[-500:]}")
        counts[mode] = int(m.group(1))
    n = RANKS * ROUNDS
    return {k: (counts[k] - counts["base"]) / n for k in ("hub", "decode", "floor")}


def cpu_us(repeats: int = 5) -> dict[str, float]:
    """CPU microseconds per frame for 'hub' and 'decode', best of ``repeats`` (alternating)."""
    import gc

    hellos, frames_ = _frames()
    folder = tempfile.mkdtemp(prefix="pardash-hubcost-")
    best = {"hub": float("inf"), "decode": float("inf")}
    thresholds = gc.get_threshold()
    try:
        for _ in range(repeats):
            for mode in best:
                t = _workload(mode, hellos, frames_, folder)
                gc.unfreeze()
                gc.set_threshold(*thresholds)
                best[mode] = min(best[mode], t / len(frames_) * 1e6)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return best


def run() -> tuple[list[Row], str]:
    name = "hub work per step message"
    t0 = time.monotonic()
    ins = instructions()
    cpu = cpu_us()
    rows = []
    if ins is None:
        rows.append(Row(name, "CPU instructions (callgrind)", "n/a: valgrind not installed", "", "", ""))
    else:
        rows.append(Row(name, "CPU instructions (callgrind)", f"{ins['hub']:,.0f}", f"{ins['decode']:,.0f} (msgspec decode alone)",
                        f"{ins['hub'] / ins['decode']:.2f}x", ""))  # fmt: skip
        rows.append(Row(name, "CPU instructions against the floor (callgrind)", f"{ins['hub']:,.0f}",
                        f"{ins['floor']:,.0f} (decode + JSON line, nothing else)", f"{ins['hub'] / ins['floor']:.2f}x", ""))  # fmt: skip
    rows.append(Row(name, "CPU time, us (best of 5)", f"{cpu['hub']:.2f}", f"{cpu['decode']:.2f} (msgspec decode alone)",
                    f"{cpu['hub'] / cpu['decode']:.2f}x", ""))  # fmt: skip
    note = (
        f"- {RANKS} ranks' hellos, then {ROUNDS} steps of each ({RANKS * ROUNDS:,} frames of {len(_frames()[1][0])} bytes from "
        f"`pardash simulate`'s builder) through a HubCore as a hub process takes them: ingest_batch in passes of {PASS}, "
        f"a frame (tick, frames.encode) and a JSONL flush every {FRAME_EVERY:,} frames, the hub's GC settings; baseline: "
        f"schema.decode of the same frames alone; floor: schema.decode of each frame and its JSON line written (encode_lines "
        f"per pass), what any hub that checks and records every frame must spend: hub/floor bounds what reworking the hub's "
        f"Python could still gain. Instructions: callgrind, less a run that sets up the same hub and stops there. "
        f"{time.monotonic() - t0:.0f} s."
    )
    return rows, note


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
    else:
        from .common import standalone

        sys.exit(standalone(__spec__.name, __doc__, lambda _ns: run()))
