"""The table of ``pardash bench``: training strategies side by side, one row a strategy's run, from
their reports (the dicts :func:`pardash.telemetry.report.build_report` returns), as
``report --compare`` (:mod:`.compare`) sets two runs side by side."""

from __future__ import annotations

from typing import Any

from .report import WARMUP_STEPS, _warmup_steps
from .report_render import COMM_NOTES, PHASE_LABELS, PHASES, md_table
from .summary import human_bytes, is_sharded


def _max_rank(rep: dict, key: str) -> float | None:
    vals = [r[key] for r in rep["ranks"] if r.get(key) is not None]
    return max(vals) if vals else None

def strategy_rows(results: list[dict]) -> list[dict]:
    """One row per strategy run: ``results`` items hold strategy, devices (GPUs or ranks the
    run used), code (its exit code) and report (its build_report dict, None if it failed)."""
    rows = []
    for res in results:
        rep = res.get("report")
        row: dict[str, Any] = {"strategy": res["strategy"], "ranks": res.get("ranks"), "devices": res.get("devices"), "code": res.get("code")}
        if rep is not None and res.get("code"):
            # Its figures are of the steps it took before it failed: no row of results (a
            # crash at step 5 read as 1199% scaling in a table people paste), and no baseline.
            row["steps"] = rep["steps"]
        elif rep is not None and rep["ranks"]:
            row["steps"] = rep["steps"]
            row["samples_per_s"] = rep["steady_samples_per_s"]
            # The step and phase times of the same steps as samples/s and p90: after the
            # warm-up (the report's medians are of every step; single's read 32.5 ms beside
            # a p90 of 105.0, where its steps after the warm-up took 10.6 at the median).
            steady = steady_figures(rep["log"]) or {}
            row["median_step_s"] = steady.get("median_step_s", rep["median_step_s"])
            row["p90_step_s"] = steady.get("p90_step_s")
            for p in PHASES:
                row[f"median_{p}"] = steady.get(f"median_{p}", rep["phases"].get(p)) if steady else rep["phases"].get(p)
            for key in ("params_bytes", "params_full_bytes", "grads_bytes", "optim_bytes", "buckets_bytes", "held_bytes", "peak_bytes"):
                row[key] = _max_rank(rep, key)
            row["peak_kind"] = rep["memory"]["peak_kind"]
            # (the report's "saving from sharding": the bench's note sets it beside saving_vs_ddp)
            row["saving_vs_unsharded"] = rep["memory"].get("saving_vs_unsharded") if is_sharded(res["strategy"]) else None
            row["log"] = rep["log"]
        rows.append(row)
    ddp = next((r for r in rows if r["strategy"] == "ddp" and r.get("held_bytes")), None)
    single = next((r for r in rows if r["strategy"] == "single" and r.get("samples_per_s")), None)
    for r in rows:
        held = r.get("held_bytes")
        # What sharding saves: a rank of a strategy that shards none (single, dp) holds no
        # buckets, and "saving 20%" of it read as a saving of sharding.
        shards = is_sharded(r["strategy"]) or r is ddp
        r["saving_vs_ddp"] = 1 - held / ddp["held_bytes"] if ddp is not None and held is not None and shards else None
        sps, dev = r.get("samples_per_s"), r.get("devices") or 1
        r["scaling_efficiency"] = sps / dev / single["samples_per_s"] if single is not None and sps else None
    return rows


def steady_figures(log: str) -> dict[str, float] | None:
    """A run's step times after the warm-up (every rank's, as the steady samples/s leaves out
    the first of each rank's): ``p90_step_s``, the time 9 in 10 of them took at most (the
    spread the median hides: a bench runs each strategy once, and a difference smaller than
    this spread is no difference); ``median_step_s`` and ``median_<phase>`` (each phase of
    :data:`PHASES` some step timed), the median over the ranks of each rank's median, as the
    report's medians are of every step. None where the log cannot be read or has too few steps."""
    import statistics

    from .logreader import read_log
    from .schema import Step

    by_rank: dict[int, list[Step]] = {}
    try:
        for msg in read_log(log):
            if isinstance(msg, Step) and msg.rank >= 0 and msg.step_s > 0:
                by_rank.setdefault(msg.rank, []).append(msg)
    except OSError:
        return None
    skip = _warmup_steps(max((len(v) for v in by_rank.values()), default=0))
    kept = {rank: steps[skip:] for rank, steps in by_rank.items() if steps[skip:]}
    steady = sorted(s.step_s for steps in kept.values() for s in steps)
    if len(steady) < 10:
        return None
    out = {
        "p90_step_s": steady[-(-9 * len(steady) // 10) - 1],  # (the nearest rank: the ceil(0.9 n)-th smallest)
        "median_step_s": statistics.median(statistics.median(s.step_s for s in steps) for steps in kept.values()),
    }
    for p in PHASES:
        medians = [statistics.median(xs) for steps in kept.values() if (xs := [v for s in steps if (v := getattr(s, p)) is not None])]
        if medians:
            out[f"median_{p}"] = statistics.median(medians)
    return out


BENCH_COLUMNS = (
    "strategy", "ranks", "samples/s", "step ms", "p90 ms",
    *(f"{PHASE_LABELS[p]} ms" for p in PHASES if p != "self_s"),
    "params/rank", "grads/rank", "optim/rank", "held/rank", "peak/rank", "saving vs DDP", "scaling vs single",
)  # fmt: skip


def bench_cells(r: dict) -> list[str]:
    def t(x):
        return "-" if x is None else f"{x * 1e3:.1f}"

    if r.get("samples_per_s") is None:
        steps = r.get("steps")
        if r.get("stopped"):  # (Ctrl-C in its run: "failed (exit code 130, ...)" blamed the strategy)
            why = f"stopped {r['stopped']}" + (f", after {_count(steps, 'step')}" if steps else "")
        elif r.get("code"):
            why = f"failed (exit code {r.get('code')}" + (f", after {_count(steps, 'step')})" if steps else ")")
        else:  # (exit 0: a run too short for a steady figure, or one that had nothing to train)
            why = f"{_count(steps, 'step')}, too few to time" if steps else "no steps"
        return [r["strategy"], str(r.get("ranks") or "-"), why, *["-"] * (len(BENCH_COLUMNS) - 3)]
    return [
        r["strategy"],
        str(r["ranks"]),
        f"{r['samples_per_s']:,.0f}",
        t(r["median_step_s"]),
        t(r.get("p90_step_s")),
        *(t(r.get(f"median_{p}")) for p in PHASES if p != "self_s"),
        human_bytes(r.get("params_bytes")),
        human_bytes(r.get("grads_bytes")),
        human_bytes(r.get("optim_bytes")),
        human_bytes(r.get("held_bytes")),
        human_bytes(r.get("peak_bytes")),
        "-" if r["saving_vs_ddp"] is None else f"{r['saving_vs_ddp'] * 100:.0f}%",
        "-" if r["scaling_efficiency"] is None else f"{r['scaling_efficiency'] * 100:.0f}%",
    ]


SUPERLINEAR = 1.1
"""Scaling against single above this, a device, is no speed-up of sharding but a slow baseline."""

BENCH_NOTES = (
    f"samples/s: steady, the samples of all ranks' steps after the first {WARMUP_STEPS} (a fifth of a shorter run: warm-up) / the "
    "time they took (evaluations, checkpoint saves and restarts left out), as the report's steady figure.",
    # (in the report's words: the bench runs the bundled trainer, whose comm is in the collectives)
    f"step and phase times: medians over steps and ranks. {COMM_NOTES['trainer']}",
    "p90 ms: 9 in 10 of the steps after the warm-up (every rank's) took at most this. Each strategy ran once: where it is "
    "far above the median, its steps varied that much (a busy host), and a difference between strategies smaller than that "
    "spread is no difference.",
    "memory: the largest rank after its last step; held is parameters + gradients + optimizer state + DDP buckets; "
    "peak is the CUDA allocator's peak on GPU, the process RSS on CPU.",
    "saving vs DDP: held bytes a rank of a sharded strategy against DDP's, DDP's gradient buckets counted (none for single "
    "and dp: they shard nothing). So it is more than the report's \"saving from sharding\", which sets a rank's model state "
    "against the same state unsharded, with no buckets.",
    "scaling vs single: samples/s per device / single's samples/s.",
)


def bench_notes(bench: dict) -> list[str]:
    out = list(BENCH_NOTES)
    ddp = next((r for r in bench.get("rows", []) if r["strategy"] == "ddp" and r.get("held_bytes")), None)
    for r in bench.get("rows", []):
        # The two savings of one run, side by side, so neither reads as the other one wrong
        # (fsdp: "saving vs DDP 60%" here, "saving from sharding 50.0%" in its report).
        if ddp is not None and r is not ddp and r.get("saving_vs_ddp") is not None and r.get("saving_vs_unsharded") is not None:
            out.append(
                f"{r['strategy']} saves {r['saving_vs_ddp'] * 100:.0f}% against DDP and {r['saving_vs_unsharded'] * 100:.0f}% "
                f"against its own state unsharded (its report's figure): the gap is DDP's gradient buckets, "
                f"{human_bytes(ddp.get('buckets_bytes'))} a rank, counted in DDP's held bytes."
            )
    for r in bench.get("rows", []):
        eff = r.get("scaling_efficiency")
        if eff is not None and eff > SUPERLINEAR:
            out.append(
                f"{r['strategy']} scaled {eff * 100:.0f}% of single a device: more than 100% says single ran slower than "
                "its share (a busy host; on CPU, one process's threads on every core against ranks with a share each), "
                "not that more ranks make each faster: compare on an idle host"
            )
    for left in bench.get("left_out", []):
        out.append(f"{left['strategy']} left out: {left['why']}")
    return out


def _count(n: int, what: str) -> str:
    """``1 step``, ``6 steps``."""
    return f"{n} {what}{'' if n == 1 else 's'}"


def bench_head(bench: dict) -> str:
    """``gpt 106,240 params, 6 steps, 1 or 2 ranks, cpu``: the ranks of the runs made (--nproc is
    ddp and fsdp's alone: "2 ranks" of a bench of single, one rank), and the steps asked for
    (the epochs, when those were)."""
    ran = sorted({r["ranks"] for r in bench.get("rows") or () if r.get("ranks")})
    if not ran:
        ranks = _count(bench["nproc"], "rank")
    elif len(ran) == 1:
        ranks = _count(ran[0], "rank")
    else:
        ranks = f"{', '.join(map(str, ran[:-1]))} or {ran[-1]} ranks"
    epochs = (bench.get("config") or {}).get("epochs")
    length = _count(bench["steps"], "step") if bench.get("steps") is not None else _count(epochs, "epoch") if epochs else "?"
    return f"{bench['model']}, {length}, {ranks}, {bench['device']}"


def render_bench_markdown(bench: dict) -> str:
    head = f"# pardash bench: {bench_head(bench)}"
    table = md_table(BENCH_COLUMNS, [bench_cells(r) for r in bench["rows"]], right=set(range(1, len(BENCH_COLUMNS))))
    return "\n".join([head, "", table, "", *(f"- {n}" for n in bench_notes(bench))]) + "\n"


def render_bench_text(bench: dict, width: int = 240) -> str:
    """The bench as plain text, a row a line up to ``width`` characters (a failed run's cell
    with the p90 column passed 200, and rich wrapped the cells)."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    buf = StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None, markup=False, highlight=False)
    con.print(f"pardash bench: {bench_head(bench)}")
    t = Table(box=None, pad_edge=False)
    for i, h in enumerate(BENCH_COLUMNS):
        t.add_column(h, justify="left" if i == 0 else "right")
    for r in bench["rows"]:
        t.add_row(*bench_cells(r))
    con.print(t)
    for n in bench_notes(bench):
        con.print(n)
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


__all__ = ["bench_cells", "bench_head", "bench_notes", "render_bench_markdown", "render_bench_text", "steady_figures", "strategy_rows"]
