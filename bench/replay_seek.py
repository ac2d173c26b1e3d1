"""A replay's seek back on a big log: with its keyframes against playing the log from its start.

    python -m bench.replay_seek [--ranks 256] [--seconds 240] [--restart-at 10] [--log /tmp/sim256.jsonl] [--write]

writes (with --log once: an existing file of that name is kept) the log a `pardash simulate --ranks 256
--keep-log` of that length records, with no hub and no sockets: the simulator's own steps and
system samples, stamped with the log's clock instead of the wall clock's. Then, in a fresh
process each (so that one's memory is not the other's), it plays the log to its end, seeks back
10 s (``[`` at the end), to the middle and to 10 s in, and prints the seconds each seek took and
the process's peak resident memory, with keyframes and without (the baseline: every seek back
plays the log again from its start). The first seek, to the end (``>``, ``--start end``), is also
measured against the same replay making each frame of it in full (the baseline: a seek's frames
were, though the screen shows none of them until it is there). ``--restart-at S``: torchrun
restarts every rank S seconds into the log (each one's exit, the launcher's notes, a new
process's hello), its steps going on from there (as from a checkpoint).
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import time

T0 = 1.7e9
RUN = "sim-bench-replay"


def write_log(path: str, ranks: int, seconds: float, rate_hz: float = 10.0, seed: int = 0, restart_at_s: float | None = None) -> int:
    """The log of ``ranks`` simulated ranks stepping at ``rate_hz`` for ``seconds``; bytes written.
    ``restart_at_s``: torchrun restarts every rank that far in (see the module's docstring)."""
    from pardash.telemetry import schema
    from pardash.telemetry.simulate import SimConfig, step_message, system_sample

    cfg = SimConfig(ranks=ranks, rate_hz=rate_hz, straggler=ranks // 3, seed=seed)
    rng = random.Random(seed)
    seq = [0] * ranks
    hseq = 0
    encode = schema.encode_json

    def line(m, rank: int, t: float, note: bool = False) -> bytes:
        nonlocal hseq
        hseq += 1
        m.run, m.rank, m.t, m.hseq = RUN, rank, t, hseq
        # (the hub's and the launcher's notes, a rank's included, are no rank's own messages)
        m.seq = -1 if rank < 0 or note else seq[rank]
        if m.seq >= 0:
            seq[rank] += 1
        if hasattr(m, "mono"):
            m.mono = t - T0
        return encode(m) + b"\n"

    def hello(r: int, t: float, restart: int = 0) -> bytes:
        msg = schema.Hello(local_rank=r % 8, world_size=ranks, node=r // 8, host=f"node{r // 8:03d}", restart=restart,
                           pid=100_000 + restart * ranks + r, strategy=cfg.strategy, backend="nccl",
                           device_name="Simulated H100", source="simulate")  # fmt: skip
        return line(msg, r, t)

    restart_step = int(restart_at_s * rate_hz) if restart_at_s is not None else -1
    tmp = path + ".part"
    with open(tmp, "wb") as fh:
        fh.write(line(schema.Event(name="hub", message="hub started (bench)"), -1, T0 - 0.5))
        for r in range(ranks):
            fh.write(hello(r, T0))
        steps = int(seconds * rate_hz)
        for s in range(1, steps + 1):
            t = T0 + s / rate_hz
            if s == restart_step:  # (torchrun's restart, as the launcher and the ranks record it)
                out = [line(schema.Event(name="exit", code=1, step=s), r, t) for r in range(ranks)]
                for r in range(ranks):
                    note = schema.Event(name="exit", code=1, message=f"torchrun: rank {r} exit code 1")
                    out.append(line(note, r, t + 0.01, note=True))
                for r in range(ranks):
                    note = schema.Event(name="restart", code=1, message=f"rank {r} restarted by torchrun (restart 1)")
                    out.append(line(note, r, t + 0.02, note=True))
                seq = [0] * ranks  # (a new process counts its messages from 0)
                out += [hello(r, t + 0.03, restart=1) for r in range(ranks)]
                fh.write(b"".join(out))
            out = []
            for r in range(ranks):
                extra = 0.3 / rate_hz if r in cfg.straggler and s >= 20 else 0.0
                msg = step_message(cfg, r, s, rng.gauss(0, 0.01 / rate_hz), extra, rng.gauss(0, 0.02))
                out.append(line(msg, r, t + r * 1e-5))
            if s % int(rate_hz) == 0:
                for r in range(ranks):
                    out.append(line(schema.Heartbeat(step=s, phase="forward"), r, t + 0.01))
                    out.append(line(system_sample(r, rng), r, t + 0.01))
            fh.write(b"".join(out))
        t_end = T0 + steps / rate_hz + 0.05
        for r in range(ranks):
            fh.write(line(schema.Event(name="exit", code=0, step=steps), r, t_end))
        fh.write(line(schema.Event(name="hub", message=f"hub stopped: {hseq} messages, 0 lost, 0 rejected"), -1, t_end + 0.5))
    os.replace(tmp, path)
    os.utime(path, (T0, T0))  # a finished log: the replay does not follow it
    return os.path.getsize(path)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(path: str, with_keyframes: bool, full_frames: bool = False) -> dict:
    """In this process: play ``path`` to its end, then seek back three times; seconds and bytes.
    ``full_frames``: every frame of a seek made in full (see ``HubCore.tick``'s ``lean``)."""
    from pardash.telemetry import client, keyframes
    from pardash.telemetry.hubcore import HubCore

    if not with_keyframes:
        keyframes.EVERY_S = float("inf")  # (the baseline: no keyframe is ever taken)
    if full_frames:
        tick = HubCore.tick
        HubCore.tick = lambda self, now, lean=False: tick(self, now)  # type: ignore[method-assign]
    t = time.perf_counter()
    src = client.ReplaySource(path)
    opened_s = time.perf_counter() - t
    t = time.perf_counter()
    src.seek(src.duration_s)
    out: dict = {"open_s": opened_s, "play_to_end_s": time.perf_counter() - t, "rss_at_end_bytes": _rss_bytes()}
    for name, at in (("back_10s", src.duration_s - 10.0), ("middle", src.duration_s / 2), ("start_10s", 10.0)):
        t = time.perf_counter()
        src.seek(at)
        out[f"seek_{name}_s"] = time.perf_counter() - t
    out["keyframes"] = len(src.keyframes)
    out["keyframe_bytes"] = src.keyframes.bytes
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["step_at_start_10s"] = src.state.step
    src.close()
    return out


def _sides(path: str) -> tuple[dict, dict, dict]:
    """The baseline's, the keyframes' and the full frames' measures of ``path``, each in a fresh
    process."""
    results = {}
    for which in ("baseline", "keyframes", "full"):
        run = subprocess.run([sys.executable, "-m", "bench.replay_seek", "--only", which, path],
                             capture_output=True, text=True, check=True)  # fmt: skip
        results[which] = json.loads(run.stdout.strip().splitlines()[-1])
    return results["baseline"], results["keyframes"], results["full"]


def run(ranks: int = 256, seconds: float = 240.0, log: str | None = None, restart_at_s: float | None = None) -> tuple[list, str]:
    """Rows for bench/RESULTS.md: ``log`` kept (written when missing), else a temporary file."""
    import tempfile

    from .common import Row

    t0 = time.monotonic()
    name = f"replay of {ranks} ranks x {seconds:.0f} s"
    if restart_at_s is not None:
        name += f", restarted at {restart_at_s:g} s"
    with tempfile.TemporaryDirectory() as tmp:
        path = log or os.path.join(tmp, "run.jsonl")
        if not os.path.exists(path):
            write_log(path, ranks, seconds, restart_at_s=restart_at_s)
        size = os.path.getsize(path)
        base, key, full = _sides(path)
    rows = []
    for label, metric in (("seek back 10 s from the end ([)", "seek_back_10s_s"), ("seek to the middle", "seek_middle_s"),
                          ("seek to 10 s in", "seek_start_10s_s")):  # fmt: skip
        rows.append(Row(name, f"{label}, s", f"{key[metric]:.2f}", f"{base[metric]:.2f} (from the log's start)",
                        f"{base[metric] / max(key[metric], 1e-9):.1f}x faster", ""))  # fmt: skip
    rows.append(Row(name, "seek to the end (>, --start end), s", f"{key['play_to_end_s']:.2f}",
                    f"{full['play_to_end_s']:.2f} (each frame made in full)",
                    f"{full['play_to_end_s'] / max(key['play_to_end_s'], 1e-9):.2f}x faster", ""))  # fmt: skip
    rows.append(Row(name, "play to the end, s", f"{key['play_to_end_s']:.2f}", f"{base['play_to_end_s']:.2f} (no keyframes)",
                    f"{key['play_to_end_s'] / max(base['play_to_end_s'], 1e-9):.2f}x", ""))  # fmt: skip
    rows.append(Row(name, "peak RSS, MiB", f"{key['peak_rss_bytes'] / 2**20:.0f}", f"{base['peak_rss_bytes'] / 2**20:.0f}",
                    f"+{(key['peak_rss_bytes'] - base['peak_rss_bytes']) / 2**20:.0f} MiB", ""))  # fmt: skip
    restarted = f"; torchrun restarting every rank {restart_at_s:g} s in" if restart_at_s is not None else ""
    note = (
        f"- replay_seek: a {size / 2**20:.0f} MiB log of {ranks} simulated ranks at 10 steps/s (heartbeats and system samples "
        f"at 1 Hz{restarted}), played to its end, then sought back 10 s, to its middle and to 10 s in, each in a fresh process: "
        f"keyframes ({key['keyframes']} kept, {key['keyframe_bytes'] / 2**20:.1f} MiB) against the same replay without them "
        f"(every seek back plays the log again from its start); its first seek, to the end, also against the same seek "
        f"making each of its frames in full (the screen shows none until the seek is there). {time.monotonic() - t0:.0f} s."
    )
    return rows, note


def _configure(parser) -> None:
    parser.add_argument("--ranks", type=int, default=256, help="simulated ranks in the log written (default 256)")
    parser.add_argument("--seconds", type=float, default=240.0, help="its length in seconds of run (default 240)")
    parser.add_argument("--restart-at", type=float, default=None, metavar="S",
                        help="torchrun restarts every rank S seconds into the log written (default: no restart)")
    parser.add_argument("--log", default=None, help="the log to keep (written when missing; default: a temporary file)")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--only":  # (one side's measures, in a process of its own)
        print(json.dumps(measure(sys.argv[3], sys.argv[2] != "baseline", full_frames=sys.argv[2] == "full")))
    else:
        from .common import standalone

        sys.exit(standalone(__spec__.name, __doc__, lambda ns: run(ns.ranks, ns.seconds, ns.log, ns.restart_at), configure=_configure))
