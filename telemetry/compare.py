"""Two runs side by side, from their reports: ``pardash report A --compare B`` (the table of
``pardash bench`` is :mod:`.bench_table`'s).

It takes the dicts :func:`pardash.telemetry.report.build_report` returns, so what they show
is what the report says of each run; no figure is measured twice in two ways.
"""

from __future__ import annotations

import math
import shlex
import statistics
from typing import Any

from .report_render import (
    PHASE_LABELS, PHASES, _ends_early_text, comm_meaning, data_bound_line, data_loading_text, loss_text, md_table,
    md_text, plain_report,
)  # fmt: skip
from .summary import first_few, human_bytes, ms, ranks_named, straggler_cause

# (key, label, unit, better): unit is "1/s", "s" (shown in ms), "seconds" (a total), "share" (of
# the training time), "bytes", "loss" or "count"; better "higher",
# "lower" or "" (no verdict: a figure that is neither).
_RUN_METRICS: list[tuple[str, str, str, str]] = [
    ("samples_per_s", "samples/s (some rank in a step, none evaluating or saving)", "1/s", "higher"),
    ("steady_samples_per_s", "samples/s (steady: after the warm-up steps)", "1/s", "higher"),
    ("median_step_s", "step time", "s", "lower"),
    # Self time is the straggler signal, not a speed: what it holds differs by strategy (work up
    # to DDP's first all-reduce; FSDP's data and forward less its all-gathers). No "better" across runs.
    *((f"phase:{p}", f"  {PHASE_LABELS[p]}", "s", "" if p == "self_s" else "lower") for p in PHASES),
]
_LOSS_METRICS: list[tuple[str, str, str, str]] = [
    ("first_loss", "loss at the first step", "loss", ""),
    ("last_loss", "loss at the last step", "loss", "lower"),
]
_MEMORY_METRICS: list[tuple[str, str, str, str]] = [
    ("params_bytes", "parameters a rank", "bytes", "lower"),
    ("grads_bytes", "gradients a rank", "bytes", "lower"),
    ("optim_bytes", "optimizer state a rank", "bytes", "lower"),
    ("buckets_bytes", "DDP buckets a rank", "bytes", "lower"),
    ("held_bytes", "held a rank (state + DDP buckets)", "bytes", "lower"),
    ("peak_bytes", "peak memory a rank", "bytes", "lower"),
]
_HEALTH_METRICS: list[tuple[str, str, str, str]] = [
    ("stragglers", "straggler verdicts", "count", "lower"),
    # What they cost, the number to compare (two runs' one verdict each read "1 1 same" of
    # 110.98 s against 80.2 s): the others' wait for them, in all and as a share of training.
    ("straggler_s", "time the others waited for stragglers", "seconds", "lower"),
    ("straggler_share", "the same, share of training", "share", "lower"),
    ("stalls", "stalls", "count", "lower"),
    ("exits", "exits with an error", "count", "lower"),
    # A rank stopped (SIGTERM from torchrun after a peer failed, a scheduler, the user's Ctrl-C
    # or the TUI's Stop) ended without an error of its own, as the report says ("- stopped"):
    # counted apart, and not judged (a run stopped by its user is no worse a run for it).
    ("stopped", "ranks stopped (no error of their own)", "count", ""),
    ("job_restarts", "torchrun restarts", "count", "lower"),
    ("recovered", "failures a restart recovered", "count", "lower"),
    ("checkpoints_saved", "checkpoints saved", "count", ""),
    ("lost_messages", "lost messages", "count", "lower"),
    ("skipped_lines", "skipped log lines", "count", "lower"),
]
SAME_WITHIN = 0.01
"""Changes smaller than this fraction of A's figure are called "same"."""

TIME_FLOOR_S = 50e-6
"""A time (the step or a phase) that moved by less than this is "same", whatever the fraction:
the phases are timed around Python code, and the same run made twice moves a phase's median
by some tens of µs (a data phase of 0.2 ms read "+3.3%, worse" of 7 µs)."""

STEP_SHARE = 0.01
"""A phase that moved by less than this fraction of the step (the shorter of the two runs'
median steps) is "same": a change the step cannot show, as the step's own row calls a change
under SAME_WITHIN "same" (data 1.2 -> 0.9 ms of a 39 ms step read "-26%, better", where the
step cannot tell 0.3 ms from noise)."""

PEAK_FLOOR_BYTES = 4 << 20
"""Peak memory that moved by less than this is "same": it is no count of the model's state
(those are exact, and a change of them past SAME_WITHIN is a change) but what an allocator
holds: the process RSS moves by a few MiB between runs of one script (the allocator's arenas,
pages touched once), the CUDA caching allocator takes memory in blocks of 2 MiB."""

NOISE_CAP = 0.5
"""The widest a run's own spread makes the band of "within noise" (see :func:`within_noise`):
a step 1.5 times as long, or a phase that moved by half a step, is always judged, however much
the steps varied (the reviewer's 20 ms sleep in the data loading, 8.6 -> 29.7 ms, reads worse)."""

BUSY_SPREAD = 0.25
"""A run whose pace moved by this much or more while it ran (:func:`step_spread`) is said to
have run on a likely busy host: an idle host's runs move by a few % (the bundled trainer's
200 steps on 2 idle cores: 8%), one shared with other work by 28-54%."""

SAMPLES_SAME_WITHIN = 0.01
"""Steps whose samples (every rank's together) differ by less than this fraction hold the same
work: a partial last batch moves a run's mean by a little."""

PART_T = 3.0
"""How many times the runs' own noise a change of a time, a rate or the loss must be to be
judged: the noise of a figure is the standard error of its difference, from each run's parts
(the timeline's parts after the first, the warm-up's: how much the figure moved from part to
part over the run's course, the host's load with it) or, of the loss, from its steps in the
window both runs reached. The same command made three times on a busy 2-core host moved
samples/s by 19% and 15% at t = 1.9 and 2.3; the changes the reviewer found real (batch size,
compile, FSDP, a host's load) stood at t >= 4 (review 341)."""

WAIT_NOISE = 2.0
"""A wait on the others (comm) is the gap between the ranks' arrivals, each off by the step's
noise, and it takes time the phases around it lose when the host moves a rank: it is within
noise up to this many times the pace's noise of the step (the same command three times read
comm 14.9, 12.5 and 3.2 ms of a 48-60 ms step; FSDP's all-gathers, +50 ms, and a straggling
DataLoader's wait, +26 ms, stay judged)."""

MIN_PARTS = 3
"""The fewest parts after the first a run needs for its own spread to be told (a short run's
figures are judged by SAME_WITHIN and the step's floor alone, as before)."""

LOSS_STEPS = 20
"""The loss is compared over this many of the last steps both runs reached (fewer where they
reached fewer: a quarter of them), the mean of each step's ranks' median: one step's loss
moves with its batch by more than a change of the run does (0.7709 against 0.7216 read
"-6.4% better" of one step, review 341)."""

HOST_SHARE_MOVED = 0.15
"""The ranks' CPU share (their processes', in % of a core, DataLoader workers in) of one run
lower than the other's by this fraction or more, while their CPU time a step stayed within
CPU_STEP_SAME, is a host that gave them less of its CPU: its load, not the runs, made the
slower one slower (the reviewer's script twice: 27% against 18% of a core, 14.1 against 15.0
ms of CPU a step, -35.9% samples/s)."""

CPU_STEP_SAME = 0.25
"""Ranks whose CPU time a step (their CPU share times their step time) differs by less than
this fraction did the same work a step; by more (THREADS=1 against 2: 18 against 210 ms a
step), they did other work, whatever their log records."""

MIN_CPU_SAMPLES = 4
"""The fewest System samples (about one a second a rank) a run's log needs for its ranks' CPU
share to be told."""

HOST_BUSY_PCT = 80.0
"""The host's CPU busy (System.host_cpu_pct, its median, % of all its cores) under which a run's
lower CPU share is not the host's load (a sleep, a wait on I/O): where the log records it."""


def _max_rank(rep: dict, key: str) -> float | None:
    vals = [r[key] for r in rep["ranks"] if r.get(key) is not None]
    return max(vals) if vals else None


def _value(rep: dict, key: str) -> float | None:
    if key.startswith("rank:"):  # rank:<n>:<its row's key>, of --all-ranks
        _, rank, field = key.split(":", 2)
        row = next((r for r in rep["ranks"] if r["rank"] == int(rank)), None)
        return row.get(field) if row is not None else None
    if key.startswith("phase:"):
        return rep.get("phases", {}).get(key[6:])
    if key.startswith("own_phase:"):
        return (rep.get("custom_phases") or {}).get(key[10:])
    if key in ("stragglers", "stalls", "recovered"):
        return len(rep.get(key) or [])
    if key in ("straggler_s", "straggler_share"):
        cost = sum((s.get("cost_total_s") or 0.0 for s in rep.get("stragglers") or []), 0.0)
        if key == "straggler_s":
            return cost
        return cost / rep["train_s"] if rep.get("train_s") else None
    if key == "exits":  # the report's exits but those it says were stopped (role)
        return sum(1 for e in rep.get("exits") or [] if e.get("role") != "stopped")
    if key == "stopped":
        return sum(1 for e in rep.get("exits") or [] if e.get("role") == "stopped")
    if key in ("first_loss", "last_loss"):  # the ranks' median (ranks of a DDP job agree)
        vals = sorted(r[key] for r in rep["ranks"] if r.get(key) is not None)
        n = len(vals)
        # (halves added, not the sum halved: two ranks' 1e308 made inf)
        return (vals[n // 2] if n % 2 else vals[n // 2 - 1] / 2 + vals[n // 2] / 2) if n else None
    if key == "job_restarts":
        return rep.get(key) or 0
    if key == "checkpoints_saved":
        return len((rep.get("checkpoints") or {}).get("saved") or [])
    if key in ("lost_messages", "skipped_lines") or key.endswith("_per_s") or key == "median_step_s":
        return rep.get(key)
    return _max_rank(rep, key)


def _own_phase_metrics(a: dict, b: dict) -> list[tuple[str, str, str, str]]:
    """A row for each phase of the scripts' own (``pt.phase("augment")``) that either run timed,
    after the known phases (A's order, then B's new ones)."""
    names = dict.fromkeys([*(a.get("custom_phases") or {}), *(b.get("custom_phases") or {})])
    return [(f"own_phase:{name}", f"  {name} (the script's own)", "s", "lower") for name in names]


def _noise_floor(key: str, unit: str, a: dict, b: dict) -> float:
    """The smallest change of ``key`` that is a change (B - A, in its unit), beside
    SAME_WITHIN's fraction: see TIME_FLOOR_S, STEP_SHARE and PEAK_FLOOR_BYTES. Counts, losses,
    samples/s and the state's bytes have none: a count is exact, and the others are judged by
    their fraction alone."""
    if unit == "s":
        floor = TIME_FLOOR_S
        steps = [s for s in (a.get("median_step_s"), b.get("median_step_s")) if s]
        if key != "median_step_s" and steps:
            floor = max(floor, STEP_SHARE * min(steps))
        return floor
    if key == "peak_bytes":
        return PEAK_FLOOR_BYTES
    return 0.0


def _verdict(a: float | None, b: float | None, better: str, floor: float = 0.0) -> str:
    if a is None or b is None or not better:
        return ""
    if a == b or abs(b - a) < floor or (a and abs(b - a) / abs(a) < SAME_WITHIN):
        return "same"
    up = b > a
    return "better" if up == (better == "higher") else "worse"


def run_label(rep: dict) -> str:
    return f"{rep['strategy'] or '?'} x{rep['world_size']}"


def _furthest_step(rep: dict) -> int | None:
    """The last step of the rank that went furthest (a report's ranks, or a comparison's side)."""
    if "furthest_step" in rep:
        return rep["furthest_step"]
    last = [r["last_step"] for r in rep.get("ranks") or () if r.get("last_step") is not None]
    return max(last) if last else None


def steps_text(rep: dict) -> str:
    """``60 steps``; ``50 steps, to step 100`` for a run whose log starts later (resumed from a
    checkpoint) or that ran steps again: the notes speak of the step it ended at. Where its
    ranks ended at different steps, ``38 steps, ranks to step 37-38``: the steps are the
    furthest rank's count, the run's last step the slowest rank's ("38 steps, to step 37" read
    as a contradiction)."""
    steps, last, furthest = rep.get("steps") or 0, rep.get("last_step"), _furthest_step(rep)
    if last is not None and furthest is not None and furthest != last:
        return f"{steps} steps, ranks to step {last}-{furthest}"
    if last is None or last == steps:
        return f"{steps} steps"
    return f"{steps} steps, to step {last}"


# -- what makes two runs comparable, and what tells a change from noise --------------------


def step_spread(rep: dict) -> float | None:
    """How much a run's own pace moved while it ran, as a fraction: the median step times of
    the parts of its timeline (the first left out: it holds the warm-up), from each part to the
    next, the median of the larger over the smaller, less 1. 0.28: its pace moved by 28% from a
    part to the next as often as not (a busy host's run drifts so: the same command, made twice,
    read -32.6%); an idle host's by a few %. Parts, not steps: a median of 200 steps moves far less than its
    steps do (their p90 is 40% over it on 2 busy cores), and what moves it between two runs is
    the host's load, which moves a run's parts alike. None: fewer than 4 parts timed after the
    first (a short run)."""
    medians = [p["step_s_median"] for p in (rep.get("timeline") or [])[1:] if p.get("step_s_median")]
    if len(medians) < 4 or min(medians) <= 0:
        return None
    # From each part to the next, the median of how far the pace moved: a host's load moves it
    # back and forth from part to part; a change the run went through once (a straggler from
    # step 100 of 200, the regression a user compares for) is one move among them, not the
    # spread. Its quartiles over the whole run took that change for noise: 7.5 -> 23 ms a step
    # read "within noise" and "its host was likely busy" (review 312).
    moves = sorted(max(x, y) / min(x, y) - 1 for x, y in zip(medians, medians[1:]))
    return statistics.median(moves)


def noise_band(a: dict, b: dict) -> float:
    """The band of "within noise": the larger of the two runs' :func:`step_spread`, at most
    :data:`NOISE_CAP` (0 where neither run's steps were timed in parts)."""
    spreads = [s for s in (step_spread(a), step_spread(b)) if s is not None]
    return min(NOISE_CAP, max(spreads, default=0.0))


def within_noise(key: str, va: float, vb: float, band: float, step_s: float | None) -> bool:
    """Whether a change of a time or a rate from ``va`` to ``vb`` is inside the runs' own spread
    (``band``, :func:`noise_band`), so that it is "within noise", neither better nor worse.

    The rule: the step time and samples/s (a run's and its steady one) are within noise when the
    larger of the two over the smaller is under 1 + band: a run whose pace moved by 28% while it
    ran can differ by as much from itself made again (the same command read -32.6% on a busy
    host). A phase (and a rank's own figure under --all-ranks) is within noise when it
    moved by less than band times ``step_s``, the shorter of the two median steps: the report
    has no spread of each phase, and a wait (comm) moves with the step's noise as a whole (the
    same command's comm read -59.2%); but a phase of the rank's own work that doubled or halved
    is judged whatever the spread (comm, a wait on the others, is not the rank's own work). The
    band is capped (:data:`NOISE_CAP`) so that a 2x change of the step is never called noise.
    Other figures (memory, losses, counts) are not judged by it."""
    if band <= 0 or va is None or vb is None:
        return False
    if key in ("median_step_s", "samples_per_s", "steady_samples_per_s"):
        lo, hi = sorted((abs(va), abs(vb)))
        return lo > 0 and hi / lo < 1 + band
    if key.startswith(("phase:", "own_phase:", "rank:")) and step_s:
        lo, hi = sorted((abs(va), abs(vb)))
        waits = key == "phase:comm_s" or key.endswith("median_comm_s")
        return abs(vb - va) < band * step_s and (waits or (lo > 0 and hi / lo < 2))
    return False


def run_course(rep: dict, loss_from: int | None = None, loss_to: int | None = None) -> dict:
    """What the comparison reads of a run's log beside its report, in one pass: each phase's
    median in each of the timeline's parts after the first (``parts``: ``phase:data_s`` ->
    one figure a part, the ranks' median of each rank's median, as the report's phases are),
    the ranks' CPU share (``cpu_pct``: the median of their System samples' cpu_pct, their
    DataLoader workers' children_cpu_pct added, % of a core; ``cpu_samples`` how many) and
    the host's (``host_cpu_pct``), and each step's loss from ``loss_from`` to ``loss_to``
    (``loss``: step -> the ranks' median). Empty where the log cannot be read (a report made
    of a dict, a log moved)."""
    from bisect import bisect_right

    from .logreader import read_log
    from .schema import Step, System
    from .timeline import Sketch

    out: dict[str, Any] = {"parts": {}, "cpu_pct": None, "cpu_samples": 0, "host_cpu_pct": None, "loss": {}}
    bounds = [(p["first_step"], p["last_step"]) for p in (rep.get("timeline") or [])[1:]
              if p.get("first_step") is not None and p.get("last_step") is not None and not p.get("restart")]  # fmt: skip
    firsts = [f for f, _ in bounds]
    cells: dict[tuple[str, int, int], Sketch] = {}
    cpu, host = Sketch(), Sketch()
    losses: dict[int, dict[int, float]] = {}
    try:
        for msg in read_log(rep["log"]):
            if isinstance(msg, Step):
                i = bisect_right(firsts, msg.step) - 1
                if i >= 0 and msg.step <= bounds[i][1]:
                    for p in PHASES:
                        if (v := getattr(msg, p)) is not None:
                            cells.setdefault((f"phase:{p}", i, msg.rank), Sketch()).add(v)
                    for name, v in (msg.phases or {}).items():
                        cells.setdefault((f"own_phase:{name}", i, msg.rank), Sketch()).add(v)
                if loss_from is not None and loss_to is not None and loss_from <= msg.step <= loss_to \
                        and msg.loss is not None and math.isfinite(msg.loss):  # fmt: skip
                    losses.setdefault(msg.step, {})[msg.rank] = msg.loss  # (a step run again: its last)
            elif isinstance(msg, System) and msg.cpu_pct is not None:
                cpu.add(msg.cpu_pct + (msg.children_cpu_pct or 0.0))
                if msg.host_cpu_pct is not None:
                    host.add(msg.host_cpu_pct)
    except (OSError, KeyError, TypeError, ValueError):
        return out
    by_key: dict[str, dict[int, list[float]]] = {}
    for (key, i, _rank), sk in cells.items():
        if (m := sk.median()) is not None:
            by_key.setdefault(key, {}).setdefault(i, []).append(m)
    out["parts"] = {key: [statistics.median(parts[i]) for i in sorted(parts)] for key, parts in by_key.items()}
    out["cpu_pct"], out["cpu_samples"], out["host_cpu_pct"] = cpu.median(), len(cpu), host.median()
    out["loss"] = {step: statistics.median(v.values()) for step, v in sorted(losses.items())}
    return out


def part_series(rep: dict, course: dict, key: str) -> list[float]:
    """A figure in each part of the run after the first: samples/s and the step's median from
    the report's timeline, a phase's from :func:`run_course`."""
    parts = [p for p in (rep.get("timeline") or [])[1:] if not p.get("restart")]
    if key in ("samples_per_s", "steady_samples_per_s"):
        return [p["samples_per_s"] for p in parts if p.get("samples_per_s")]
    if key == "median_step_s":
        return [p["step_s_median"] for p in parts if p.get("step_s_median")]
    return list((course.get("parts") or {}).get(key) or [])


def _log_var(values: list[float]) -> tuple[float, int] | None:
    """The variance of the logs of a run's part figures, and how many (None: fewer than
    MIN_PARTS that are positive), from how far the figure moved from each part to the next
    (the median of those moves over 0.954, the median move of two draws of one spread): a run
    that changed once (a straggler from its middle) moved once, and one part apart (a restart's
    gap: samples/s 41 among 800s) moves two of them, neither its spread."""
    logs = [math.log(v) for v in values if v and v > 0]
    if len(logs) < MIN_PARTS:
        return None
    sd = statistics.median(abs(y - x) for x, y in zip(logs, logs[1:])) / 0.954
    return sd * sd, len(logs)


def part_noise(xs: list[float], ys: list[float]) -> float | None:
    """The standard error of the log of B's figure over A's, from each run's parts (how far
    the figure moved from part to part over its course): None where a run has too few."""
    va, vb = _log_var(xs), _log_var(ys)
    if va is None or vb is None:
        return None
    return math.sqrt(va[0] / va[1] + vb[0] / vb[1])


def beyond_noise(va: float | None, vb: float | None, se: float | None) -> bool | None:
    """Whether B's figure is off A's by PART_T times the runs' own noise ``se`` (in logs, from
    :func:`part_noise`) or more, or by 1 + NOISE_CAP times; None where it cannot be told (no
    spread, a figure not positive)."""
    if not va or not vb or va <= 0 or vb <= 0:
        return None
    d = abs(math.log(vb / va))
    if d >= math.log1p(NOISE_CAP):
        return True  # (1.5x is judged, however the runs moved: NOISE_CAP)
    if se is None:
        return None
    return d > 0 if se == 0 else d >= PART_T * se


def host_load(a: dict, b: dict, ca: dict, cb: dict) -> dict | None:
    """What the ranks' CPU says of the two runs' hosts: each run's ranks' CPU share
    (``share``, % of a core), their CPU time a step (``cpu_step_s``: share times the median
    step) and the host's busy (``host_pct``), and ``says``: "host" where the slower run's
    ranks had a share lower by HOST_SHARE_MOVED or more for the same CPU a step (their host
    gave them less: its load), "work" where their CPU a step differs by more than
    CPU_STEP_SAME (they did other work a step), "" otherwise. None where a run's log has
    fewer than MIN_CPU_SAMPLES CPU samples."""
    if not ca.get("cpu_pct") or not cb.get("cpu_pct") or not a.get("median_step_s") or not b.get("median_step_s"):
        return None
    if min(ca.get("cpu_samples") or 0, cb.get("cpu_samples") or 0) < MIN_CPU_SAMPLES:
        return None  # (a run of a second or two: its one sample is of its start)
    share = {"a": ca["cpu_pct"], "b": cb["cpu_pct"]}
    cpu_step = {"a": share["a"] / 100 * a["median_step_s"], "b": share["b"] / 100 * b["median_step_s"]}
    out = {"share": share, "cpu_step_s": cpu_step, "host_pct": {"a": ca.get("host_cpu_pct"), "b": cb.get("host_cpu_pct")}, "says": ""}
    lo, hi = sorted(cpu_step.values())
    slow = "b" if b["median_step_s"] > a["median_step_s"] else "a"
    fast = "a" if slow == "b" else "b"
    if lo <= 0 or hi / lo - 1 > CPU_STEP_SAME:
        out["says"] = "work"
    elif share[slow] <= share[fast] * (1 - HOST_SHARE_MOVED) and (out["host_pct"][slow] is None or out["host_pct"][slow] >= HOST_BUSY_PCT):
        out["says"], out["slower"] = "host", slow
    return out


def loss_window(a: dict, b: dict) -> tuple[int, int] | None:
    """The last steps both runs reached (their slowest ranks'): LOSS_STEPS of them, or a quarter
    of the steps where fewer; None where a run has no last step."""
    ends = [rep.get("last_step") for rep in (a, b)]
    if None in ends:
        return None
    end = min(ends)
    firsts = [min((p["first_step"] for p in rep.get("timeline") or () if p.get("first_step") is not None), default=1) for rep in (a, b)]
    first = max(firsts)
    n = min(LOSS_STEPS, max(1, (end - first + 1) // 4))
    return (max(first, end - n + 1), end) if end >= first else None


def samples_windows(a: dict, b: dict) -> tuple[tuple[int, int], tuple[int, int], tuple[float, float]] | None:
    """Where a step of each run holds other numbers of samples (:func:`samples_a_step`): the
    steps of A and of B over which both saw the same samples, the last both saw (LOSS_STEPS of
    the larger steps' samples, a quarter of them where fewer), and those samples (from, to).
    None where a run has no samples or last step."""
    sa, sb, la, lb = samples_a_step(a), samples_a_step(b), a.get("last_step"), b.get("last_step")
    if not sa or not sb or not la or not lb:
        return None
    end = min(la * sa, lb * sb)
    start = end - min(LOSS_STEPS * max(sa, sb), end / 4)

    def steps(per: float) -> tuple[int, int]:
        return max(1, math.floor(start / per) + 1), math.floor(end / per + 1e-9)

    wa, wb = steps(sa), steps(sb)
    return (wa, wb, (start, end)) if wa[0] <= wa[1] and wb[0] <= wb[1] else None


def loss_at_equal_samples(la: dict[int, float], lb: dict[int, float], seen: tuple[float, float]) -> dict | None:
    """The two runs' mean losses over their steps of the same samples seen (``seen``, from
    :func:`samples_windows`), and the noise of their difference (``se``, from each run's
    steps' spread). None: fewer than 2 steps of a run."""
    if len(la) < 2 or len(lb) < 2:
        return None
    se = math.sqrt(statistics.variance(la.values()) / len(la) + statistics.variance(lb.values()) / len(lb))
    return {"seen": [round(seen[0]), round(seen[1])], "steps_a": [min(la), max(la)], "steps_b": [min(lb), max(lb)],
            "a": statistics.fmean(la.values()), "b": statistics.fmean(lb.values()), "se": se}  # fmt: skip


def loss_compare(la: dict[int, float], lb: dict[int, float]) -> dict | None:
    """The two runs' losses over the steps both logged in the window: each run's mean, and the
    noise of one step (``step_sd``: the spread of B's loss less A's, step by step, each run's
    batches' own noise in it) and of the mean (``se``). None: fewer than 2 such steps."""
    steps = sorted(set(la) & set(lb))
    if len(steps) < 2:
        return None
    diffs = [lb[s] - la[s] for s in steps]
    sd = statistics.stdev(diffs)
    return {"first": steps[0], "last": steps[-1], "steps": len(steps), "a": statistics.fmean(la[s] for s in steps),
            "b": statistics.fmean(lb[s] for s in steps), "step_sd": sd, "se": sd / math.sqrt(len(steps))}


def samples_a_step(rep: dict) -> float | None:
    """The samples a step of the job holds: each rank's samples over its steps, the ranks'
    together (None: no rank took a step)."""
    per = [r["samples"] / r["steps"] for r in rep.get("ranks") or () if r.get("steps") and r.get("samples")]
    return sum(per) if per else None


def _steps_differ(a: dict, b: dict) -> bool:
    """Whether a step of each run holds other numbers of samples (a batch size, the ranks):
    a step and its phases then take longer or shorter for that alone."""
    sa, sb = samples_a_step(a), samples_a_step(b)
    return bool(sa and sb) and abs(sb - sa) / sa >= SAMPLES_SAME_WITHIN


def log_pardash_version(rep: dict) -> str:
    """The pardash version a run's first hello names ("" where it names none: recorded by a
    pardash older than the field, or a log that cannot be read). The report's own key where it
    has one; else read from the head of its log, up to its first hello."""
    if "pardash_version" in rep:
        return rep["pardash_version"] or ""
    from .logreader import read_log
    from .schema import Hello

    try:
        for n, msg in enumerate(read_log(rep["log"])):
            if isinstance(msg, Hello):
                return msg.pardash_version
            if n >= HELLO_WITHIN:
                break
    except (OSError, KeyError, TypeError):
        pass
    return ""


HELLO_WITHIN = 10_000
"""Records read for a run's first hello before giving up (a hub's notes come first)."""

OLDEST_MEANINGS = "a script's FSDP2 waits became comm, not forward or backward, and a straggler's cost its self-time lead or the others' extra comm, on 2026-12-07"
"""What changed meaning last, said beside a log that names no pardash version."""


def _version_note(a: dict, b: dict, va: str, vb: str) -> tuple[str | None, bool]:
    """The note where the two runs' pardash versions differ or a run's log names none, and
    whether their self and comm are then left unjudged: where one names none and the other
    one, or they name two versions. Two logs that both name none were both recorded by a
    pardash older than the field, most likely alike: said, and judged as before. A simulated
    run's figures are the simulator's, not a measure whose meaning changed: its lack of a
    version says nothing."""
    missing = [name for name, rep, v in (("A", a, va), ("B", b, vb)) if not v and rep.get("source") != "simulate"]
    if len(missing) == 2:
        return ("neither log names a pardash version: both were recorded by a pardash older than this one, and whether "
                "by the same one cannot be told (what some figures mean last changed on 2026-12-07)"), False
    if missing:
        return (f"{missing[0]}'s log names no pardash version: it was recorded by a pardash older than this one, whose figures "
                f"may mean otherwise ({OLDEST_MEANINGS}): self and comm get no verdict"), True
    if va and vb and va != vb:
        return f"the runs were recorded by different pardash versions (A {va}, B {vb}): self and comm get no verdict", True
    return None, False


def _shown(v: Any) -> str:
    """A config value or the like as the "what differs" part shows it."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return shlex.join(str(x) for x in v)
    return str(v)


NOT_SET = "(not set)"

_CONFIG_LEFT_OUT = {"steps", "total_steps"}
"""Config keys the "what differs" part says otherwise: the planned steps, from the report."""


def _options(command: list[str]) -> tuple[list[str], dict[str, str]]:
    """A command line's words: its positional ones, and its ``--name value`` / ``--name=value``
    / ``--flag`` options by name (a flag's value "set")."""
    words, opts = [], {}
    i = 0
    while i < len(command):
        w = command[i]
        if w.startswith("-") and len(w) > 1 and not _number(w):
            name, eq, value = w.partition("=")
            if not eq and i + 1 < len(command) and not (command[i + 1].startswith("-") and not _number(command[i + 1])):
                value, i = command[i + 1], i + 1
            opts[name] = value if (eq or value) else "set"
        else:
            words.append(w)
        i += 1
    return words, opts


def _number(w: str) -> bool:
    try:
        float(w)
        return True
    except ValueError:
        return False


def _device_kinds(rep: dict) -> str:
    """``2 x Intel Xeon (cpu)``: the run's devices by kind, hosts aside."""
    kinds: dict[tuple[str, str], int] = {}
    for d in rep.get("devices") or ():
        key = (d.get("device_name") or d.get("device") or "?", d.get("device") or "?")
        kinds[key] = kinds.get(key, 0) + d.get("ranks", 0)
    return "; ".join(f"{n} x {name} ({dev})" for (name, dev), n in kinds.items()) or "-"


def _hosts(rep: dict) -> str:
    hosts = sorted({d.get("host") or "?" for d in rep.get("devices") or ()})
    return f"{len(hosts)} ({first_few(hosts)})" if len(hosts) > 1 else (hosts[0] if hosts else "-")


def _unset(v: Any) -> bool:
    """A config value that sets nothing: absent, None, false, 0 or empty."""
    return v is None or v is False or v == 0 or v == "" or v == [] or v == {}


def what_differs(a: dict, b: dict, va: str = "", vb: str = "") -> list[dict]:
    """What the two runs' logs say was set otherwise, A then B: ``{"what", "a", "b"}`` each,
    values as shown (``batch_size``, 16, 64). The bundled trainer's config keys that differ;
    a script's command line's options and words that differ (where a run has no config); the
    strategy and ranks; torch and pardash versions (``va``, ``vb``); devices by kind and
    hosts; the steps planned."""
    out: list[dict] = []

    def differ(what: str, x: Any, y: Any) -> None:
        if x != y:
            out.append({"what": what, "a": x, "b": y})

    differ("strategy", a.get("strategy") or NOT_SET, b.get("strategy") or NOT_SET)
    differ("ranks", a.get("world_size"), b.get("world_size"))
    ca, cb = a.get("config") or {}, b.get("config") or {}
    for key in dict.fromkeys([*ca, *cb]):
        if key in _CONFIG_LEFT_OUT or key == "strategy":
            continue
        if _unset(ca.get(key)) and _unset(cb.get(key)):
            # (a key an older trainer wrote otherwise, or not at all: "resume false -> none" and
            # "checkpoint_keep (not set) -> 0" of two runs that set neither, review 312)
            continue
        differ(key, _shown(ca[key]) if key in ca else NOT_SET, _shown(cb[key]) if key in cb else NOT_SET)
    cmd_a, cmd_b = a.get("command"), b.get("command")
    if cmd_a and cmd_b and cmd_a != cmd_b and not (ca and cb):
        (wa, oa), (wb, ob) = _options(cmd_a), _options(cmd_b)
        if wa != wb:
            differ("command", shlex.join(wa), shlex.join(wb))
        for name in dict.fromkeys([*oa, *ob]):
            differ(name, oa.get(name, NOT_SET), ob.get(name, NOT_SET))
    differ("torch", a.get("torch_version") or NOT_SET, b.get("torch_version") or NOT_SET)
    differ("pardash", va or NOT_SET, vb or NOT_SET)
    differ("devices", _device_kinds(a), _device_kinds(b))
    differ("hosts", _hosts(a), _hosts(b))
    differ("planned steps", _shown(a.get("total_steps")) if a.get("total_steps") else "not said",
           _shown(b.get("total_steps")) if b.get("total_steps") else "not said")  # fmt: skip
    return out


def straggler_texts(rep: dict) -> list[str]:
    """A run's stragglers as its report names them, each with its cause and cost: ``rank 3
    (data) from step 20 to the end: the others waited 14.6 ms a step, 1.91 s in all``."""
    out = []
    for s in rep.get("stragglers") or ():
        until = f"cleared at step {s['cleared_step']}" if s.get("cleared_step") is not None else "to the end"
        each = s["cost_total_s"] / s["steps_charged"] if s.get("steps_charged") else s.get("cost_s")
        cost = f"the others waited {ms(each)} ms a step" if each is not None else "its cost not measured"
        if s.get("steps_charged"):
            cost += f", {s['cost_total_s']:.2f} s in all"
        kind = straggler_cause(s["kind"], s.get("message")) if s.get("kind") else "?"  # (as the report says it)
        out.append(f"rank {s['rank']} ({kind}) from step {s['since_step']}, {until}: {cost}")
    return out


def _straggler_set(rep: dict) -> set[tuple[int, str]]:
    return {(s["rank"], s.get("kind") or "") for s in rep.get("stragglers") or ()}


BETWEEN_SAID = 0.25
"""The share of the step a run's time between steps, mostly not in its DataLoader, takes for the
comparison to quote its report's line of it."""


def input_texts(rep: dict) -> list[str]:
    """What the single report says of a run's data loading where it matters: input-bound (its
    data phase a large share of every rank's steps), or its loaders alike slow (data-bound)."""
    out = []
    dl = rep.get("data_loading")
    if dl and dl.get("between_steps") and dl["share"] >= BETWEEN_SAID:
        # (the script's own work between steps, as its report says it: the compare read "data
        # +3336% worse" of a sleep after the optimizer's step as of a slow __getitem__, review 313)
        out.append(f"between steps {data_loading_text(dl)}")
    elif dl and dl.get("input_bound"):
        out.append(f"data loading {data_loading_text(dl)}")
    if line := data_bound_line(rep):
        out.append(line)
    return out


def nothing_to_compare(a: dict, b: dict) -> str | None:
    """One line where a run took no step (it failed first, or was stopped): every figure of
    it is "-", and there is nothing to set beside the other's. None where both took steps."""
    empty = [(name, rep) for name, rep in (("A", a), ("B", b)) if not rep.get("steps")]
    if not empty:
        return None
    if len(empty) == 2:
        return "neither run took a step: nothing to compare"
    name, rep = empty[0]
    why = ""
    if rep.get("failure") and rep["failure"].get("line"):
        why = f" (root cause: {rep['failure']['line']})"
    elif rep.get("log_ends_early") is not None and not rep.get("ranks"):
        why = " (no rank reported)"
    return f"{name} took no step{why}: nothing to compare"


def _rank_metrics(a: dict, b: dict) -> list[tuple[str, str, str, str]]:
    """--all-ranks: each rank's step, self and data medians, the ranks of either run in order."""
    ranks = sorted({r["rank"] for r in a["ranks"]} | {r["rank"] for r in b["ranks"]})
    return [m for n in ranks for m in ((f"rank:{n}:median_step_s", f"  rank {n} step", "s", "lower"),
                                        (f"rank:{n}:median_self_s", f"  rank {n} self", "s", ""),
                                        (f"rank:{n}:median_data_s", f"  rank {n} data", "s", "lower"))]  # fmt: skip


def compare_reports(a: dict, b: dict, all_ranks: bool = False) -> dict:
    """Two reports side by side: what differs between the runs (``differs``), every metric
    with A, B, B - A, B / A - 1 and a verdict (better, worse, same, within noise: see
    :func:`within_noise`; different: other stragglers), each run's stragglers as its report
    names them, and notes. ``all_ranks``: a row of each rank's step, self and data medians too.
    Where a run took no step, ``nothing_to_compare`` says so and there are no rows."""
    side = ("log", "run_id", "strategy", "world_size", "devices", "steps", "last_step", "params_count")
    sides = {"a": {k: a.get(k) for k in side} | {"furthest_step": _furthest_step(a)},
             "b": {k: b.get(k) for k in side} | {"furthest_step": _furthest_step(b)}}  # fmt: skip
    if nothing := nothing_to_compare(a, b):
        return {**sides, "rows": [], "notes": [], "nothing_to_compare": nothing}
    version_a, version_b = log_pardash_version(a), log_pardash_version(b)
    version_note, versions_differ = _version_note(a, b, version_a, version_b)
    band = noise_band(a, b)
    shorter_step = min((s for s in (a.get("median_step_s"), b.get("median_step_s")) if s), default=None)
    steps_differ = _steps_differ(a, b)
    # The loss over the last steps both reached; where a step holds other samples, over the
    # steps of each at the same samples seen (a loss at a step after 4x the samples is lower for that)
    equal = samples_windows(a, b) if steps_differ else None
    window = loss_window(a, b) if not steps_differ else None
    wa, wb = (equal[0], equal[1]) if equal else (window, window) if window else ((None, None), (None, None))
    ca, cb = run_course(a, *wa), run_course(b, *wb)
    losses = loss_compare(ca["loss"], cb["loss"]) if window else None
    if equal:
        losses = loss_at_equal_samples(ca["loss"], cb["loss"], equal[2])
    host = host_load(a, b, ca, cb)
    differs = what_differs(a, b, version_a, version_b)
    # One test of the pace for its three rows (samples/s, steady, the step): the same figure
    # inverted read "-19.3% better" beside "+19.6% within noise" when each was judged alone.
    pace_key = next((k for k in _PACE_KEYS if _value(a, k) and _value(b, k)), None)
    pace = {"a": _value(a, pace_key), "b": _value(b, pace_key)} if pace_key else {"a": None, "b": None}
    # (its noise from the parts' median steps: a part's samples/s holds its pauses too, a
    # restart's gap read 41 samples/s among 800s, and a pause is no noise of the pace)
    pace_se = part_noise(part_series(a, ca, "median_step_s"), part_series(b, cb, "median_step_s")) if pace_key else None
    pace_noisy = pace_key is not None and (beyond_noise(pace["a"], pace["b"], pace_se) is False
                                           or within_noise(pace_key, pace["a"], pace["b"], band, shorter_step))  # fmt: skip
    # What the pace's noise is as a share of the step, for the phases (a phase that moved by less
    # than the step's own noise cannot be told apart from it: same command, fwd +75.6%)
    pace_band = min(NOISE_CAP, max(band, math.expm1(PART_T * pace_se) if pace_se is not None else 0.0))
    host_said = bool(host and host["says"] == "host" and not differs)
    step_a, step_b = a.get("median_step_s"), b.get("median_step_s")
    step_moved = 0 if pace_noisy or steps_differ or not step_a or not step_b or step_a == step_b else (1 if step_b > step_a else -1)
    noisy = []
    rows: list[dict[str, Any]] = []
    sections = (
        ("throughput and time", _RUN_METRICS + _own_phase_metrics(a, b)),
        ("loss (median over ranks)", _LOSS_METRICS),
        ("memory per rank (largest rank)", _MEMORY_METRICS),
        ("health", _HEALTH_METRICS),
        *((("ranks (each rank's medians)", _rank_metrics(a, b)),) if all_ranks else ()),
    )
    for section, metrics in sections:
        for key, label, unit, better in metrics:
            va, vb = _value(a, key), _value(b, key)
            if va is None and vb is None:
                continue
            if steps_differ and (key == "median_step_s" or key.startswith(("phase:", "own_phase:", "rank:"))):
                better = ""  # a step of more samples takes longer for that alone: samples/s is judged
            if versions_differ and (key in ("phase:self_s", "phase:comm_s") or key.endswith(("median_self_s", "median_comm_s"))):
                better = ""  # measured by another pardash, maybe another way
            if key == "last_loss" and not _same_end(a, b):
                better = ""  # a loss further on is lower for that alone: not judged
            if key == "peak_bytes" and not _same_peak(a, b):
                better = ""  # a process's RSS against the CUDA allocator's peak: not judged
            if metrics is _MEMORY_METRICS and _differ(a, b, "params_count"):
                better = ""  # a smaller model holds less for that alone: "better" by 78% read as a saving
            if key == "last_loss" and _differ(a, b, "world_size"):
                better = ""  # twice the ranks see twice the samples a step: a lower loss at its step for that alone
            if key == "phase:comm_s" and _comm_differs(a, b):
                better = ""  # the trainer's collectives within backward against a script's waits between steps
            if key == "last_loss" and steps_differ:
                better = ""  # a step of more samples: a loss at the same step after more seen
            verdict = _verdict(va, vb, better, _noise_floor(key, unit, a, b))
            if verdict in ("better", "worse") and _within_noise(key, va, vb, a, b, ca, cb, pace_noisy, pace_band, shorter_step, step_moved):
                verdict = "within noise"
                noisy.append(label.strip())
            if key == "last_loss" and verdict in ("better", "worse") and losses and "step_sd" in losses and abs(vb - va) < PART_T * losses["step_sd"]:
                verdict = "within noise"  # one step's loss, inside what a step's batch moves it by
                noisy.append(label.strip())
            if host_said and verdict in ("better", "worse") and (key in _PACE_KEYS or key.startswith(("phase:", "own_phase:", "rank:"))):
                verdict = "host load"  # nothing recorded differs, and the slower run's ranks got less CPU
            if key == "stragglers" and verdict == "same" and _straggler_set(a) != _straggler_set(b):
                verdict = "different"  # as many, but other ranks or causes
            not_finite = {}
            if key == "last_loss":
                # A loss NaN at its end on any rank ("-" read as none measured, and the finite
                # ranks' median judged alone): shown as such, and worse at whatever step than a
                # run with none; two runs that both diverged somewhere are not judged.
                cells = {"a": _not_finite_cell(a, va), "b": _not_finite_cell(b, vb)}
                not_finite = {f"{side}_not_finite": cell for side, cell in cells.items() if cell}
                if cells["a"] or cells["b"]:
                    verdict = "" if cells["a"] and cells["b"] else "better" if cells["a"] else "worse"
            rows.append(
                {
                    "section": section,
                    "metric": key,
                    "label": label.strip(),
                    "unit": unit,
                    "better": better,
                    "a": va,
                    "b": vb,
                    # (none where a rank diverged: the finite ranks' medians alone read "+25%"
                    # beside a "worse" that the divergence gave)
                    "delta": vb - va if va is not None and vb is not None and not not_finite else None,
                    "change": (vb - va) / va if va and vb is not None and not not_finite else None,
                    "verdict": verdict,
                    **not_finite,
                }
            )
    _extra_rows(rows, a, b, host, losses, steps_differ)
    notes = []
    if a.get("run_id") and a.get("run_id") == b.get("run_id") and a.get("log") != b.get("log"):
        # (a log against a copy of itself: "same" on every row read as two runs that agreed; one
        # log given twice says so in the header's two paths)
        notes.append(f"A and B are the same run ({a['run_id']}): a log and a copy of it, not two runs")
    for name, rep in (("A", a), ("B", b)):
        if rep.get("log_ends_early"):
            # (the single report says so; the comparison set a cut log's figures beside a whole
            # run's without a word)
            end = _ends_early_text(rep["log_ends_early"], rep.get("skipped_by_reason") or {}, rep.get("gzip_damage"))
            notes.append(f"{name}'s log ends early {end}: its figures are of the part there is")
    if not _same_end(a, b) and bool(_diverged(a)) == bool(_diverged(b)):
        # (where one run diverged, the last loss's verdict is its divergence's, at any step)
        notes.append(
            f"the runs ended at different steps (A {a.get('last_step')}, B {b.get('last_step')}): "
            "their last losses are shown, not judged"
        )
    if not _same_end(a, b):
        # (a run stopped at step 124 of 3000 set beside one of 200 steps: medians of other steps)
        notes.append(f"the medians are over each run's own steps (A {_step_range(a)}, B {_step_range(b)}), "
                     "not over the steps both took")
    starts = {name: _resumed_at(rep) for name, rep in (("A", a), ("B", b))}
    if starts["A"] != starts["B"]:
        # (its "loss at the first step" is then the loss of a trained model: B's 0.93 against
        # A's 4.18 read as a better start)
        notes += [f"{name} resumed from a checkpoint of step {at}: its first step is {at + 1}, not the model's first" for name, at in starts.items() if at is not None]
    for name, rep in (("A", a), ("B", b)):
        if groups := _divergence(rep):
            if len(groups) == 1:
                ((value, step, ranks),) = groups
                whose = "" if len(ranks) == len(rep["ranks"]) else f" on {ranks_named(ranks)}"
                # (the reporter sends the first value that is not finite, not the ones after it)
                notes.append(f"{name}'s loss was not finite from step {step} to its end{whose} ({value} at {step}): it diverged")
            else:
                said = " and ".join(f"from step {step} on {ranks_named(ranks)} ({value} at {step})" for value, step, ranks in groups)
                notes.append(f"{name}'s loss was not finite {said}, to its end: it diverged")
    if _differ(a, b, "params_count"):
        notes.append(
            f"the runs train different models (A {a['params_count']:,} parameters, B {b['params_count']:,}): "
            "not like for like; memory is shown, not judged"
        )
    if _differ(a, b, "world_size"):
        notes.append(
            f"the runs have different world sizes (A {a['world_size']} ranks, B {b['world_size']}): a step of each is "
            "another number of samples; the last losses are shown, not judged"
        )
    if _comm_differs(a, b):
        notes.append(f"A's comm is {_COMM_WHOSE[comm_meaning(a)]}; B's is {_COMM_WHOSE[comm_meaning(b)]}: not one figure, "
                     "shown, not judged")
    if not _same_peak(a, b):
        notes.append(
            f"peak memory is {_PEAK_KINDS[_peak_kind(a)]} in A, {_PEAK_KINDS[_peak_kind(b)]} in B: shown, not judged"
        )
    per_step = {"a": samples_a_step(a), "b": samples_a_step(b)}
    if steps_differ:
        notes.append(
            f"a step holds other numbers of samples (A {per_step['a']:,.0f}, B {per_step['b']:,.0f}, every rank's): a step and "
            "its phases take longer with more samples for that alone, so their times are shown, not judged; samples/s is the "
            "figure to judge"
        )
    if version_note:
        notes.append(version_note)
    spreads = {"a": step_spread(a), "b": step_spread(b)}
    busy = [f"{name} by {spreads[side] * 100:.0f}%" for name, side in (("A", "a"), ("B", "b")) if (spreads[side] or 0) >= BUSY_SPREAD]
    notes += _host_notes(host, differs, pace_noisy, any(r["verdict"] == "host load" for r in rows))
    if steps_differ:
        # (a bigger batch's last step read "-6.4% better": a loss after 4x the samples)
        at = (f": the loss is compared at the same samples seen, A's steps {losses['steps_a'][0]}-{losses['steps_a'][1]} against "
              f"B's {losses['steps_b'][0]}-{losses['steps_b'][1]}") if losses else ""
        notes.append(f"where a step holds other numbers of samples, the loss at a step is of other samples seen, not judged{at}")
    if busy and host is None:  # (the ranks' CPU, where the log has it, says whether the host was busy)
        # (the report has no host CPU of its own: the pace's drift is what tells, and what matters)
        notes.append(
            f"the pace moved while the run ran ({', '.join(busy)}: its parts' median steps, from a part to the next, as often as not): "
            f"its host was likely busy with other work, and two runs on such a host differ by as much: compare on an idle one"
        )
    if noisy:
        parts = f"; {PART_T:g} times the noise of its parts over the run's course, {_spread_text(pace_band)} of the pace" if pace_se is not None else ""
        loss = f"; a loss, {PART_T:g} times how much it moves from a step to the next" if any(n.startswith("loss") for n in noisy) else ""
        notes.append(
            f"within noise: a change smaller than each run's own pace moved while it ran (its parts' median steps, from a "
            f"part to the next, as often as not, A {_spread_text(spreads['a'])}, B {_spread_text(spreads['b'])}{parts}; a phase: that share of "
            f"the step{loss}), as the same command made twice differs: neither better nor worse"
        )
    return {**sides, "differs": differs, "rows": rows, "host": host, "loss_window": losses, "pace_noise": pace_band,
            "stragglers": {"a": straggler_texts(a), "b": straggler_texts(b)},
            "input": {"a": input_texts(a), "b": input_texts(b)},
            "samples_a_step": per_step, "step_spread": spreads, "noise_band": band,
            "pardash_version": {"a": version_a, "b": version_b}, "notes": notes}


_PACE_KEYS = ("steady_samples_per_s", "samples_per_s", "median_step_s")


def _within_noise(key: str, va: float, vb: float, a: dict, b: dict, ca: dict, cb: dict, pace_noisy: bool,
                  pace_band: float, step_s: float | None, step_moved: int = 0) -> bool:  # fmt: skip
    """Whether a better or worse of a time or a rate is within the runs' noise: the pace's rows
    by their one test (``pace_noisy``); a phase where it moved by less than the pace's noise
    (``pace_band``) of the step (:func:`within_noise`; not where it moved as the step did,
    ``step_moved`` +1 longer or -1 shorter past its noise), or by less than PART_T times its
    own noise over the runs' parts; other figures never."""
    if key in _PACE_KEYS:
        return pace_noisy
    if key.startswith(("phase:", "own_phase:", "rank:")):
        waits = key == "phase:comm_s" or key.endswith("median_comm_s")
        # A phase that moved with a step that moved past its noise is part of that change (the
        # step twice as long, its backward 1.9x: judged); else it must move by more than the
        # step's own noise, which moves time from a phase to another (the same command's fwd +75.6%).
        with_step = step_moved and (vb > va) == step_moved > 0
        if not with_step and within_noise(key, va, vb, min(NOISE_CAP, pace_band * (WAIT_NOISE if waits else 1)), step_s):
            return True
        if key.startswith("rank:"):
            return False
        return beyond_noise(va, vb, part_noise(part_series(a, ca, key), part_series(b, cb, key))) is False
    return False


def _extra_rows(rows: list[dict], a: dict, b: dict, host: dict | None, losses: dict | None, steps_differ: bool) -> None:
    """The rows the logs give beside the reports: the ranks' CPU share and CPU a step (after
    the phases; shown, not judged: a figure of the host's load and of the work alike), and the
    loss over the last steps both runs reached (after the last step's)."""

    def row(section: str, key: str, label: str, unit: str, better: str, va: float, vb: float, verdict: str) -> dict:
        return {"section": section, "metric": key, "label": label, "unit": unit, "better": better, "a": va, "b": vb,
                "delta": vb - va, "change": (vb - va) / va if va else None, "verdict": verdict}  # fmt: skip

    if host:
        at = max((i for i, r in enumerate(rows) if r["section"] == "throughput and time"), default=len(rows) - 1) + 1
        rows[at:at] = [
            row("throughput and time", "cpu_pct", "ranks' CPU (median, % of a core, workers in)", "pct", "", host["share"]["a"], host["share"]["b"], ""),
            row("throughput and time", "cpu_step_s", "their CPU time a step", "s", "", host["cpu_step_s"]["a"], host["cpu_step_s"]["b"], ""),
        ]
    if losses:
        last = next((i for i, r in enumerate(rows) if r["metric"] == "last_loss"), None)
        if last is None:
            return
        # (at the same steps, or the same samples seen, in both: judged where their ends differ too,
        # but not where a rank's loss was not finite)
        judged = not {"a_not_finite", "b_not_finite"} & set(rows[last])
        better = "lower" if judged else ""
        verdict = _verdict(losses["a"], losses["b"], better)
        if verdict in ("better", "worse") and abs(losses["b"] - losses["a"]) < PART_T * losses["se"]:
            verdict = "within noise"
        if "seen" in losses:
            label = f"loss, mean at samples {losses['seen'][0]:,}-{losses['seen'][1]:,} seen (both runs')"
        else:
            label = "loss, mean of " + (f"step {losses['last']}" if losses["first"] == losses["last"] else f"steps {losses['first']}-{losses['last']}") + " (both runs')"
        rows.insert(last + 1, row(rows[last]["section"], "window_loss", label, "loss", better, losses["a"], losses["b"], verdict))


HOST_LOAD_SAID = ' ("host load" in the table)'


def _host_notes(host: dict | None, differs: list[dict], pace_noisy: bool, marked: bool = False) -> list[str]:
    """What the ranks' CPU says of the runs' hosts, where it says something."""
    if not host or not host["says"] or differs:
        # (where the logs record a difference, a run slower for it gets a lower CPU share for
        # the same CPU a step too: the share cannot tell the host's load from the change, and
        # other work a step is what a change does)
        return []
    share, cpu_step = host["share"], host["cpu_step_s"]
    shares = f"A {share['a']:.0f}%, B {share['b']:.0f}% of a core"
    steps = f"A {cpu_step['a'] * 1e3:.1f} ms, B {cpu_step['b'] * 1e3:.1f} ms"
    if host["says"] == "host":
        slow = "B" if host["slower"] == "b" else "A"
        busy = host["host_pct"][host["slower"]]
        on = f", on a host {busy:.0f}% busy" if busy is not None else ""
        return [f"the ranks of {slow} had less of their host's CPU ({shares}), for the same CPU time a step ({steps}){on}: "
                f"nothing the logs record differs, and the host's load likely explains {slow}'s slower pace, not a change of the "
                f"runs{HOST_LOAD_SAID if marked else ''}: compare on an idle host"]
    if pace_noisy:
        return []
    more = "B" if cpu_step["b"] > cpu_step["a"] else "A"
    ratio = max(cpu_step.values()) / min(cpu_step.values())
    return [f"the ranks of {more} spent {ratio:.1f}x the CPU time a step ({steps}; {shares}): nothing the logs record "
            "differs, so something they do not does (an environment variable, threads, the code or data the script reads), "
            "not the host's load"]


def _spread_text(spread: float | None) -> str:
    return "too short to tell" if spread is None else f"+{spread * 100:.0f}%"


def _step_range(rep: dict) -> str:
    """``steps 1-200``: the steps a run's figures are of."""
    parts = rep.get("timeline") or []
    first = min((p["first_step"] for p in parts if p.get("first_step") is not None), default=None)
    last = _furthest_step(rep)
    if first is None or last is None:
        return f"to step {rep.get('last_step')}"
    return f"steps {first}-{last}"


_COMM_WHOSE = {
    "trainer": "the bundled trainer's, the time in the step's collectives, within forward and backward",
    "script": "a script's zero-code hooks', the wait for the other ranks (its own collectives between steps, DDP's all-reduces after the backward's work), in no other phase",
}


def _comm_differs(a: dict, b: dict) -> bool:
    """Whether one run's comm is the bundled trainer's and the other's a script's (see
    report_render.COMM_NOTES): two figures of one name, not one to judge."""
    ka, kb = comm_meaning(a), comm_meaning(b)
    return ka is not None and kb is not None and ka != kb


_PEAK_KINDS = {"cuda": "the CUDA allocator's peak", "rss": "the process RSS after a step",
               "rss_hwm": "the process's RSS high-water mark (its whole life)"}


def _peak_kind(rep: dict) -> str | None:
    return (rep.get("memory") or {}).get("peak_kind")


def _same_peak(a: dict, b: dict) -> bool:
    """Whether both runs' peak memory is the same kind of figure (a run without one compares
    with either: its row shows "-")."""
    ka, kb = _peak_kind(a), _peak_kind(b)
    return ka is None or kb is None or ka == kb


def _resumed_at(rep: dict) -> int | None:
    """The step a run resumed from at its start (``--resume``; not a torchrun restart's)."""
    resumed = [r["step"] for r in (rep.get("checkpoints") or {}).get("resumed") or [] if not r.get("restart") and r.get("step")]
    return min(resumed) if resumed else None


def _diverged(rep: dict) -> list[dict]:
    """The ranks whose loss was not finite at their end (the report's ``loss_not_finite``)."""
    return [r for r in rep["ranks"] if r.get("loss_not_finite")]


def _divergence(rep: dict) -> list[tuple[str, int, list[int]]]:
    """A run's diverged ranks by the value their loss turned to: (value, the step its first
    rank turned at, the ranks), the first to diverge first (ties: the lower rank)."""
    groups: dict[str, tuple[int, list[int]]] = {}
    for r in sorted(_diverged(rep), key=lambda r: (r["loss_not_finite"]["step"], r["rank"])):
        bad = r["loss_not_finite"]
        groups.setdefault(bad["value"], (bad["step"], []))[1].append(r["rank"])
    return [(value, step, sorted(ranks)) for value, (step, ranks) in groups.items()]


def _not_finite_cell(rep: dict, median: float | None) -> str | None:
    """A run's last-loss cell where some rank's loss was not finite at its end: ``nan`` (``nan/inf``
    where they differ) where every rank's was; else the finite ranks' median and how many were
    not, ``0.5000 (1 of 2 nan)``. None where no rank diverged."""
    groups = _divergence(rep)
    if not groups:
        return None
    values = "/".join(value for value, _, _ in groups)
    bad = sum(len(ranks) for _, _, ranks in groups)
    if bad == len(rep["ranks"]):
        return values
    return f"{_fmt(median, 'loss')} ({bad} of {len(rep['ranks'])} {values})"


def _differ(a: dict, b: dict, key: str) -> bool:
    """Whether both runs say ``key`` (a model's ``params_count``, the ``world_size``) and say
    it differently: the runs are not like for like in it."""
    va, vb = a.get(key), b.get(key)
    return bool(va) and bool(vb) and va != vb


def _same_end(a: dict, b: dict) -> bool:
    """Whether both runs' slowest ranks ended at the same step (their last losses compare)."""
    return a.get("last_step") == b.get("last_step")


def _fmt(x: float | None, unit: str, signed: bool = False) -> str:
    if x is None:
        return "-"
    sign = "+" if signed and x > 0 else ("-" if signed and x < 0 else "")
    v = abs(x) if signed else x
    if unit == "bytes":
        return sign + human_bytes(v)
    if unit == "s":
        return f"{sign}{v * 1e3:.1f} ms"
    if unit == "seconds":
        return f"{sign}{v:.2f} s"
    if unit == "share":  # (a change of it in points: 21.3% to 20.9% is -0.4)
        return f"{sign}{v * 100:.1f} points" if signed else f"{v * 100:.1f}%"
    if unit == "1/s":
        return f"{sign}{v:,.0f}"
    if unit == "pct":  # (of a core: 150% is a core and a half; a change of it in points)
        return f"{sign}{v:.0f} points" if signed else f"{v:.0f}%"
    if unit == "loss":  # (a diverged run's 1e308 printed in full: 300 digits in a cell)
        return sign + loss_text(v)
    return f"{sign}{v:g}"


def _change(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def _compare_cells(cmp: dict) -> tuple[list[str], list[list[str]]]:
    head = ["metric", f"A: {run_label(cmp['a'])}", f"B: {run_label(cmp['b'])}", "B - A", "change", "B is"]
    body = []
    section = None
    for r in cmp["rows"]:
        if r["section"] != section:
            section = r["section"]
            body.append([f"**{section}**", "", "", "", "", ""])
        label = r["label"] if not r["metric"].startswith(("phase:", "rank:")) else f"  {r['label']}"
        body.append([label, r.get("a_not_finite") or _fmt(r["a"], r["unit"]), r.get("b_not_finite") or _fmt(r["b"], r["unit"]), _fmt(r["delta"], r["unit"], signed=True), _change(r["change"]), r["verdict"]])
    return head, body


NOTHING_DIFFERS = "nothing the logs record (config, command, torch and pardash versions, devices, steps planned)"


def differs_lines(cmp: dict) -> list[str]:
    """``batch_size 16 -> 64``: the comparison's "what differs" part, a line each."""
    return [f"{d['what']} {d['a']} -> {d['b']}" for d in cmp.get("differs") or ()]


def side_lines(cmp: dict, key: str) -> list[str]:
    """``A: none``, ``B: rank 3 (data) ...``: each run's stragglers (``key`` "stragglers") or
    what its report says of its data loading ("input", only where either says something)."""
    said = cmp.get(key) or {}
    if key == "input" and not (said.get("a") or said.get("b")):
        return []
    return [f"{name}: {'; '.join(said.get(side) or []) or 'none'}" for name, side in (("A", "a"), ("B", "b"))]


def render_compare_markdown(cmp: dict) -> str:
    cmp = plain_report(cmp)  # (the runs' ids and logs, as the report shows them)
    a, b = cmp["a"], cmp["b"]
    out = [
        f"# pardash: {run_label(a)} against {run_label(b)}",
        "",
        f"- A: `{a['run_id'] or a['log']}` ({run_label(a)}, {steps_text(a)})",
        f"- B: `{b['run_id'] or b['log']}` ({run_label(b)}, {steps_text(b)})",
        "",
    ]
    if cmp.get("nothing_to_compare"):
        return "\n".join([*out, cmp["nothing_to_compare"]]) + "\n"
    head, body = _compare_cells(cmp)
    for row in body:
        row[0] = row[0].replace("  ", "&nbsp;&nbsp;", 1) if row[0].startswith("  ") else row[0]
    differs = differs_lines(cmp)
    out += [
        "## what differs (A → B)" if differs else f"what differs: {NOTHING_DIFFERS}",
        *(["", *(f"- {md_text(d['what'])} {md_text(str(d['a']))} → {md_text(str(d['b']))}" for d in cmp["differs"])] if differs else []),
        "",
        md_table(head, body, right={1, 2, 3, 4}),
        "",
        "## stragglers (as each run's report names them)",
        "",
        *(f"- {md_text(line)}" for line in side_lines(cmp, "stragglers")),
        *(["", "## Between steps (data loading and the script's own work)", "", *(f"- {md_text(line)}" for line in side_lines(cmp, "input"))] if side_lines(cmp, "input") else []),
        *(["", *(f"- {n}" for n in cmp.get("notes", []))] if cmp.get("notes") else []),
    ]
    return "\n".join(out) + "\n"


def render_compare_text(cmp: dict, width: int = 120) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    cmp = plain_report(cmp)
    buf = StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None, markup=False, highlight=False)
    a, b = cmp["a"], cmp["b"]
    con.print(f"A: {a['run_id'] or a['log']} ({run_label(a)}, {steps_text(a)})")
    con.print(f"B: {b['run_id'] or b['log']} ({run_label(b)}, {steps_text(b)})")
    if cmp.get("nothing_to_compare"):
        con.print(cmp["nothing_to_compare"], soft_wrap=True)  # (one line, as a refusal)
        return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())
    differs = differs_lines(cmp)
    con.print("what differs (A -> B):" if differs else f"what differs: {NOTHING_DIFFERS}")
    for line in differs:
        con.print(f"  {line}")
    head, body = _compare_cells(cmp)
    t = Table(box=None, pad_edge=False)
    for i, h in enumerate(head):
        t.add_column(h, justify="right" if i in (1, 2, 3, 4) else "left")
    for row in body:
        t.add_row(row[0].replace("**", ""), *row[1:])
    con.print(t)
    con.print("stragglers (as each run's report names them):")
    for line in side_lines(cmp, "stragglers"):
        con.print(f"  {line}")
    if side_lines(cmp, "input"):
        con.print("between steps (data loading and the script's own work), as each run's report says it:")
        for line in side_lines(cmp, "input"):
            con.print(f"  {line}")
    for note in cmp.get("notes", []):
        con.print(f"note: {note}")
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


__all__ = ["compare_reports", "render_compare_markdown", "render_compare_text"]
