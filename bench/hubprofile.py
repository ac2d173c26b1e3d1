"""Where a hub's time per message goes: py-spy on a hub process draining a backlog of step
messages, samples split by the part of the hub their innermost pardash frame is in.

``python -m bench.soak --skip-soak --skip-headroom --profile`` (the soak bench runs it by itself
when the hub misses the headroom target). The hub's Python thread's CPU time per message is split
by the shares of samples: py-spy counts a thread waiting for a CPU as busy, so its sample counts
give shares, not times.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from .ingest_peers import SENDERS, HubReceiver, Senders
from .soak import RANKS


HUB_METHODS = {
    "ingest_bytes": "decode and take (ingest_batch: msgspec decode, checks, state)",
    "ingest_batch": "decode and take (ingest_batch: msgspec decode, checks, state)",
    "_settle": "decode and take (ingest_batch: msgspec decode, checks, state)",
    "_ingest_decoded": "take (ingest, replay, _take: stamp, dispatch)",
    "_refuse": "validate (_refuse)",
    "ingest": "take (ingest, replay, _take: stamp, dispatch)",
    "replay": "take (ingest, replay, _take: stamp, dispatch)",
    "_take": "take (ingest, replay, _take: stamp, dispatch)",
    "_drain": "receive (zmq recv in _drain)",
    "serve": "loop (serve, poll)",
    "tick": "frames (tick, stats, encode, publish)",
    "stats": "frames (tick, stats, encode, publish)",
    "_publish": "frames (tick, stats, encode, publish)",
    "snapshot": "frames (tick, stats, encode, publish)",
}
FILES = {
    "recorder.py": "record (JSON encode, buffer, write)",
    "stragglers.py": "straggler detector (observe, update)",
    "analysis.py": "straggler detector (observe, update)",
    "ring.py": "history rings",
    "frames.py": "frames (tick, stats, encode, publish)",
    "limits.py": "validate (_refuse)",
    "schema.py": "schema hooks",
}


def _category(frame: str) -> str | None:
    """The part of the hub a py-spy frame (``Class.method (telemetry/file.py:line)``) is in,
    or None for a frame outside pardash."""
    name, _, where = frame.partition(" (")
    if "telemetry/" not in where:
        return None
    file = where.split(":")[0].rsplit("/", 1)[-1]
    method = name.split(".<locals>")[0].rsplit(".", 1)[-1]
    if file in FILES:
        return FILES[file]
    if file == "state.py":
        return "history rings" if method == "commit_history" else "state apply (RunState.apply)"
    if file == "hub.py":
        return HUB_METHODS.get(method, f"hub.py {method}")
    return f"{file} {method}"


PYSPY_HZ = 200


def profile(seconds: float = 20.0, ranks: int = RANKS, n: int = 1_500_000) -> dict:
    """py-spy on a hub draining a backlog: shares of samples by part of the hub, the CPU seconds
    of the hub's Python thread and of the whole process (ZeroMQ's I/O thread too), messages
    taken in the sampled span, the raw py-spy output. (py-spy counts a thread that waits for a
    CPU as busy, so time per message comes from the thread's CPU time, split by the shares.)"""
    import psutil

    folder = tempfile.mkdtemp(prefix="pardash-profile-")
    senders = Senders(SENDERS, ranks)
    out = os.path.join(tempfile.gettempdir(), "pardash-hub-profile.txt")
    rx = HubReceiver(ranks, folder)
    try:
        os.kill(rx.pid, signal.SIGSTOP)
        senders.start(rx.endpoint, 0, 0, burst=n, hwm=0, lead_s=0.2)
        senders.results(600)
        os.kill(rx.pid, signal.SIGCONT)
        time.sleep(0.5)
        got0, _ = rx.received(50)
        proc = psutil.Process(rx.pid)

        def main_cpu() -> float:  # the hub's Python thread alone (its thread id is the pid)
            return next(t.user_time + t.system_time for t in proc.threads() if t.id == rx.pid)

        cpu0, main0 = sum(proc.cpu_times()[:2]), main_cpu()
        pyspy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
        subprocess.run([pyspy, "record", "--pid", str(rx.pid), "-o", out, "--format", "raw", "-d", str(int(seconds)), "-r", str(PYSPY_HZ), "--threads"],
                       check=True, capture_output=True)  # fmt: skip
        got1, _ = rx.received(50)
        cpu, main = sum(proc.cpu_times()[:2]) - cpu0, main_cpu() - main0
        senders.release()
    finally:
        rx.close()
        senders.close()
        shutil.rmtree(folder, ignore_errors=True)
    shares, samples = categorise(out, thread=rx.pid)
    return {"shares": shares, "python_s": samples / PYSPY_HZ, "main_cpu_s": main, "cpu_s": cpu, "messages": got1 - got0, "raw": out, "seconds": seconds}


def categorise(path: str, thread: int | None = None) -> tuple[dict[str, float], int]:
    """Shares of py-spy raw samples (``frame;frame;... count``) by the innermost pardash frame,
    and the number of samples. With ``thread``, only that thread's samples (py-spy ``--threads``
    starts each stack with ``thread (ID): NAME``): the hub's loop, not its log writer, whose
    waits for the next frame's lines py-spy may count as busy."""
    totals: dict[str, int] = {}
    all_n = 0
    own = f"thread ({thread}):"
    with open(path) as fh:
        for line in fh:
            stack, _, num = line.rstrip().rpartition(" ")
            if not num.isdigit():
                continue
            if thread is not None:
                if not stack.startswith(own):
                    continue
                stack = stack.split(";", 1)[1] if ";" in stack else ""
            count = int(num)
            all_n += count
            cat = "outside pardash (start-up, interpreter)"
            for fr in reversed(stack.split(";")):
                found = _category(fr)
                if found is not None:
                    cat = found
                    break
            totals[cat] = totals.get(cat, 0) + count
    return ({k: v / all_n for k, v in sorted(totals.items(), key=lambda kv: -kv[1])} if all_n else {}), all_n


def profile_note(prof: dict) -> str:
    msgs = prof["messages"]
    per_us = prof["main_cpu_s"] / msgs * 1e6 if msgs else float("nan")
    parts = ", ".join(f"{k} {v * per_us:.1f} us ({100 * v:.0f}%)" for k, v in prof["shares"].items() if v >= 0.005)
    return (
        f"hub profile (py-spy at {PYSPY_HZ} Hz for {prof['seconds']:g} s on a hub draining a backlog of steps from {RANKS} ranks): "
        f"{msgs:,} messages taken in {prof['main_cpu_s']:.1f} CPU s of the hub's Python thread = {per_us:.1f} us each "
        f"(whole process, ZeroMQ's I/O thread too, {prof['cpu_s'] / max(msgs, 1) * 1e6:.1f} us): {parts}."
    )
