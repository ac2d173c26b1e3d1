"""``pardash report LOG``: per-rank answers from a recorded log, as text or JSON.

The JSON keys (``ranks`` with rank/steps/median_step_s/last_loss/params_bytes/
params_full_bytes, ``stragglers``, ``exits``, ``lost_messages``, ``strategy``, ``world_size``)
are a contract: later additions extend them, never rename them.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from . import schema
from .logreader import LogReadStats, read_log
from .state import RunState, mem_full_bytes, mem_held_bytes
from .summary import human_bytes, ms, zero_expected_bytes

PHASES = ("data_s", "forward_s", "backward_s", "optimizer_s", "comm_s", "self_s")


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def build_report(path: str) -> dict:
    """Read the log at ``path`` and summarise it (the ``--format json`` object)."""
    stats = LogReadStats()
    state = RunState(track_seq=True)
    step_s: dict[int, list[float]] = defaultdict(list)
    phases: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    samples: dict[int, int] = defaultdict(int)
    first_loss: dict[int, float] = {}
    stragglers: list[dict] = []
    exits: dict[int, dict] = {}
    first_t = last_t = None
    step_t0 = step_t1 = None
    for msg in read_log(path, stats):
        state.apply(msg, msg.t)
        if msg.t:
            first_t = msg.t if first_t is None else min(first_t, msg.t)
            last_t = msg.t if last_t is None else max(last_t, msg.t)
        if isinstance(msg, schema.Step):
            step_t0 = msg.t - msg.step_s if step_t0 is None else min(step_t0, msg.t - msg.step_s)
            step_t1 = msg.t if step_t1 is None else max(step_t1, msg.t)
            step_s[msg.rank].append(msg.step_s)
            samples[msg.rank] += msg.samples
            if msg.loss is not None:
                first_loss.setdefault(msg.rank, msg.loss)
            for p in PHASES:
                v = getattr(msg, p)
                if v is not None:
                    phases[msg.rank][p].append(v)
        elif isinstance(msg, schema.Verdict):
            if msg.verdict == "straggler":
                stragglers.append(
                    {"rank": msg.rank, "kind": msg.cause, "cost_s": msg.cost_s, "step": msg.step, "message": msg.message}
                )
            elif msg.verdict == "exited" and msg.rank not in exits:
                exits[msg.rank] = {"rank": msg.rank, "code": msg.code, "step": msg.step, "message": msg.message}
        elif isinstance(msg, schema.Event) and msg.name == "exit" and msg.rank >= 0 and msg.code:
            exits[msg.rank] = {"rank": msg.rank, "code": msg.code, "step": msg.step, "message": msg.message}

    ranks = []
    for rank in sorted(state.ranks):
        r = state.ranks[rank]
        mem = r.step.mem if r.step is not None else None
        row = {
            "rank": rank,
            "host": r.host,
            "status": r.status,
            "steps": len(step_s.get(rank, [])),
            "last_step": r.step.step if r.step else None,
            "last_loss": r.step.loss if r.step else None,
            "first_loss": first_loss.get(rank),
            "median_step_s": _median(step_s.get(rank, [])),
            "samples": samples.get(rank, 0),
            "params_bytes": mem.params_bytes if mem else None,
            "params_full_bytes": mem.params_full_bytes if mem else None,
            "grads_bytes": mem.grads_bytes if mem else None,
            "optim_bytes": mem.optim_bytes if mem else None,
            "held_bytes": mem_held_bytes(mem),
            "full_bytes": mem_full_bytes(mem),
            "peak_bytes": (mem.cuda_peak_bytes if mem and mem.cuda_peak_bytes is not None else (mem.rss_bytes if mem else None)),
            "lost_messages": r.seq.lost,
        }
        for p in PHASES:
            row[f"median_{p}"] = _median(phases[rank].get(p, []))
        ranks.append(row)
    hello = state.hello
    duration = (last_t - first_t) if first_t is not None and last_t is not None else 0.0
    total_samples = sum(samples.values())
    train_s = (step_t1 - step_t0) if step_t0 is not None and step_t1 is not None else 0.0
    return {
        "log": path,
        "run_id": state.run_id,
        "strategy": hello.strategy if hello else "",
        "world_size": state.world_size,
        "device": hello.device if hello else "",
        "device_name": hello.device_name if hello else "",
        "note": hello.note if hello else "",
        "params_count": hello.params_count if hello else 0,
        "expected_bytes_per_rank": zero_expected_bytes(hello.params_count, state.world_size, hello.strategy) if hello else None,
        "duration_s": duration,
        "train_s": train_s,
        "samples_per_s": total_samples / train_s if train_s > 0 else None,
        "ranks": ranks,
        "stragglers": stragglers,
        "exits": sorted(exits.values(), key=lambda e: e["rank"]),
        "lost_messages": state.lost,
        "skipped_lines": stats.skipped_total,
        "skipped_by_reason": dict(stats.skipped),
    }


def render_text(rep: dict) -> str:
    """The report as a plain-text table (rich renders it to a string)."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    buf = StringIO()
    con = Console(file=buf, width=160, force_terminal=False, color_system=None)
    head = (
        f"run {rep['run_id']}  strategy {rep['strategy'] or '-'}  world size {rep['world_size']}  "
        f"device {rep['device_name'] or rep['device'] or '-'}  duration {rep['duration_s']:.1f} s"
    )
    if rep.get("samples_per_s"):
        head += f"  {rep['samples_per_s']:,.0f} samples/s"
    con.print(head)
    if rep.get("note"):
        con.print(f"note: {rep['note']}")
    t = Table(box=None, pad_edge=False)
    for col in ("rank", "host", "status", "steps", "last loss", "step ms", "data", "fwd", "bwd", "opt", "comm", "self", "params", "full", "grads", "optim", "held"):
        t.add_column(col, justify="left" if col in ("host", "status") else "right")
    for r in rep["ranks"]:
        t.add_row(
            str(r["rank"]),
            r["host"],
            r["status"],
            str(r["steps"]),
            "-" if r["last_loss"] is None else f"{r['last_loss']:.4f}",
            ms(r["median_step_s"]),
            *(ms(r[f"median_{p}"]) for p in PHASES),
            human_bytes(r["params_bytes"]),
            human_bytes(r["params_full_bytes"]),
            human_bytes(r["grads_bytes"]),
            human_bytes(r["optim_bytes"]),
            human_bytes(r["held_bytes"]),
        )
    con.print(t)
    if rep.get("expected_bytes_per_rank"):
        con.print(f"ZeRO expectation for {rep['strategy']} x{rep['world_size']}: {human_bytes(rep['expected_bytes_per_rank'])} a rank (16 bytes/parameter unsharded)")
    for s in rep["stragglers"]:
        con.print(f"straggler: {s['message']} (from step {s['step']})")
    for e in rep["exits"]:
        con.print(f"exit: rank {e['rank']} exited with code {e['code']}" + (f" at step {e['step']}" if e.get("step") is not None else ""))
    con.print(f"lost messages: {rep['lost_messages']}" + (f"; skipped log lines: {rep['skipped_lines']}" if rep["skipped_lines"] else ""))
    return buf.getvalue()
