"""Cross-rank figures that the headless printer, the report and the TUI header share."""

from __future__ import annotations

import math
import os
import re
import statistics
from bisect import bisect_left

from .state import RunState, mem_full_bytes, mem_held_bytes

BYTES_PER_PARAM = 16
"""The ZeRO paper's model state per parameter for (mixed-precision or fp32) Adam: 4 parameter +
4 gradient + 8 optimizer state in fp32 (2 + 2 + 12 mixed)."""
SHARDED_STRATEGIES = ("fsdp", "zero", "shard")
"""Strategy names (substrings) whose ranks are expected to hold 1/N of the model state."""
TENSOR_PARALLEL = "tp"
"""Tensor parallelism (``parallelize_module``): each rank holds its slice of the layers it
splits, so 1/N of the model state too where every large layer is split."""
NOT_SHARDING_FACTOR = 1.5
"""A rank of a sharded run holding this many times its 1/N share is not sharding as meant (a
block left unwrapped): the hub's ``not_sharding`` verdict, and the memory view's flag."""


PIPELINE = "pp"
"""Pipeline parallelism: ``pp`` (a stage a rank), ``pp+ddp``, ``pp+fsdp``, ``pp+tp`` (a stage
itself data or tensor parallel): each rank holds its own stage, a part of the model, whole
unless the strategy after ``pp+`` shards it."""


def is_pipeline(strategy: str) -> bool:
    """Is ``strategy`` pipeline parallel (each rank its own stage of the model)?"""
    s = strategy.lower()
    return s == PIPELINE or s.startswith(PIPELINE + "+")


def is_sharded(strategy: str) -> bool:
    """Does ``strategy`` shard parameters, gradients and optimizer state across ranks? (A
    pipeline's stage: if the stage's own strategy does.)"""
    s = strategy.lower()
    if is_pipeline(s):
        s = s[len(PIPELINE) + 1 :]
    return s == TENSOR_PARALLEL or any(name in s for name in SHARDED_STRATEGIES)


def unheard_why(no_key: int) -> str:
    """Why ranks of the world never reported, as far as the hub knows: the connections it
    refused without a key it admits (another node launched without its --curve-dir), else
    nothing of them at all."""
    if no_key:
        return (f"the hub refused {no_key} connection attempt(s) with no key authorised for the port, likely theirs (keys "
                "not the hub's: a node launched without its --curve-dir)")
    return ""


def not_sharding_hint(strategy: str) -> str:
    """The question a rank holding far more than its share under ``strategy`` raises."""
    s = strategy.lower()
    if is_pipeline(s):
        s = s[len(PIPELINE) + 1 :]
    if s == TENSOR_PARALLEL:
        return "is every large layer split (parallelize_module's plan)?"
    return "is every block wrapped (fully_shard per block)?"


def expected_state_bytes(
    full_bytes: int | None, params_count: int, world_size: int, strategy: str, shards: int = 0
) -> tuple[int | None, str]:
    """What one rank should hold of parameters, gradients and optimizer state under
    ``strategy``, and on what basis. With the run's own state measured unsharded
    (``full_bytes``: its optimizer, its frozen parameters, its dtypes), all of it on every
    replicated rank and 1/N of it fully sharded, N the ranks its ranks say it is sharded over
    (``shards``, see :func:`shards_of`: HSDP shards within a node, its replicas hold the same),
    else the world; before any rank measured it, the ZeRO paper's 16 bytes a parameter (fp32
    Adam), which is wrong for other optimizers."""
    ways = shards or world_size
    sharded = is_sharded(strategy) and ways > 1
    if full_bytes and is_pipeline(strategy):
        # (each rank its own stage: what a stage holds, whole or sharded as its own strategy
        # says, not the model's; a "full copy" of the model no rank should hold)
        total, basis = full_bytes, "its stage's state unsharded"
    elif full_bytes:
        total, basis = full_bytes, "its state unsharded"
    elif params_count:
        total, basis = params_count * BYTES_PER_PARAM, f"{BYTES_PER_PARAM} B/param"
    else:
        return None, ""
    if ways != world_size and is_sharded(strategy):
        # (HSDP: a 2-D mesh's shard dimension; FSDP2's replicate(): none)
        basis += f" ÷ {ways}, the ranks it is sharded over" if sharded else ", sharded over no other rank"
    elif sharded:
        basis += f" ÷ {ways}"
    return (math.ceil(total / ways) if sharded else total), basis


def shards_of(state: RunState) -> int:
    """The ranks the run's sharded state is split over, as its ranks measure it (Mem.shards:
    FSDP's shard group, which HSDP keeps within a node); 0 where none says (an older log)."""
    return max((r.step.mem.shards for r in state.ranks.values() if r.step is not None and r.step.mem is not None), default=0)


RATE_POINTS = 10
"""History points (a rank's latest step of each hub frame, ten a second) the live rate is taken
over: about a second of a fast job; one step's time alone jumped (925, 1038, 544 samples/s
within a second of a steady run)."""


PAUSE_SLACK_S = 1.0
"""Seconds a rate window may span beyond 1.5x its steps' own times before it is taken to hold
a pause (an evaluation, a save) and the latest step's rate stands instead."""


def ran_out_apart(state: RunState) -> set[int]:
    """The ranks that ran out of inputs under DDP's Join (``RunState.ran_out``), where another
    rank stepped on: the job's step, rate and step times are the others' (a rank's own, where
    none did). Empty otherwise."""
    out = state.ran_out()
    if out and any(r.step is not None and r.rank not in out for r in state.ranks.values()):
        return out
    return set()


def joined_words(joins: dict[int, int], furthest: int) -> str:
    """``rank 0 ran out of inputs at step 400 and joined`` (``; ranks 2-3 ... at step 500 ...``): of
    ``joins`` (rank -> the step its ``join`` event said), those before ``furthest``; '' if none.
    The launch's last line and the report say it alike."""
    early = sorted((at, q) for q, at in joins.items() if at is not None and at < furthest)
    return "; ".join(f"{ranks_named([q for a, q in early if a == at])} ran out of inputs at step {at} and joined"
                     for at in sorted({a for a, _ in early}))  # fmt: skip


def samples_per_s(state: RunState) -> float:
    """Samples a second across ranks, now: each working rank's over its last RATE_POINTS
    history points (steps done over the time they took), else its latest step's (a stalled
    or silent rank's last steps are no rate)."""
    total = 0.0
    k = RATE_POINTS
    for r in state.ranks.values():
        s = r.step
        if s is None or s.step_s <= 0 or r.exit_code is not None or r.finished or r.stalled is not None or r.silent is not None:
            continue
        if r.joined:
            continue  # (out of inputs under DDP's Join: its last steps' rate is not now's)
        h = r.history
        then = h.ago("step", k)
        if then is not None:
            now, t1, t0 = h.ago("step", 0), h.ago("t", 0), h.ago("t", k)
            # (not across a restart, nor behind the latest step, nor across a pause between
            # steps: an evaluation or a save of a minute made a job at 5 s a step read half;
            # the steps' own times tell how long they took)
            took = (now - then) * sum(h.ago("step_s", j) or 0.0 for j in range(k)) / k
            if now == s.step and now > then and 0 < t1 - t0 <= 1.5 * took + PAUSE_SLACK_S:
                done = _samples_done([h.ago("samples", j) for j in range(k)])
                total += (s.samples * (now - then) if done is None else done) / (t1 - t0)
                continue
        total += s.samples / s.step_s
    return total


def ended_stuck(state: RunState) -> bool:
    """Some rank was stalled or silent when it exited (stopped or killed while stuck), and none
    is stuck and alive: the rate of the ranks' last steps is not how the run ended."""
    stuck = [r for r in state.ranks.values() if (r.stalled is not None or r.silent is not None) and not r.finished]
    return bool(stuck) and all(r.exit_code is not None for r in stuck)


GAP_PACE = 10.0
"""A stretch of the history this many times slower a step than the rank's median pace, and
over GAP_S long, is no training: a restart (torchrun's, from a checkpoint at the last step
published, so no step number goes back), an evaluation, a long save."""
GAP_S = 1.0


def _last_run(steps: list[float], t: list[float]) -> tuple[int, int]:
    """(first, last): the indexes bounding a rank's last stretch of steady training in its
    history, which ends at ``last``; first == last when there is none of two points."""
    paces = sorted((t[i] - t[i - 1]) / (steps[i] - steps[i - 1]) for i in range(1, len(steps)) if steps[i] > steps[i - 1])
    ref = paces[len(paces) // 2] if paces else 0.0

    def gap(i: int) -> bool:  # the interval ending at point i is no training
        ds, dt = steps[i] - steps[i - 1], t[i] - t[i - 1]
        return ds <= 0 or (dt > GAP_S and dt > GAP_PACE * ref * ds)

    last = len(steps) - 1
    while last > 0 and gap(last):  # a last attempt of one point: the one before it
        last -= 1
    first = last
    while first > 0 and not gap(first):
        first -= 1
    return first, last


def samples_per_s_recent(state: RunState) -> float:
    """Samples a second across ranks over each rank's last steps: what a run ran at, still
    known once every rank is done. A rank's history keeps its latest step of each frame (the
    last HISTORY_POINTS), so steps are counted by their numbers. Only its last stretch of
    steady training counts (:func:`_last_run`: a torchrun restart, an evaluation or a long save
    before it is no step), and of that its later half: the first steps of a job (allocations,
    the first collectives, DDP's bucket rebuild) ran several times slower, which on a short job
    read as a tenth of its speed. A rank that ran out of inputs under DDP's Join
    (``RunState.ran_out``), or whose last step reached us well before the last rank's (one that
    left its loop early, 30 s before the end), was not stepping at the end: not counted (it read
    28,694 samples/s where the rank still stepping then did 15,556, review 335). When its last
    step came is read on one clock for every rank (``RankState.step_seen``), not on its own:
    nodes' clocks disagree, and a rank's 2 s behind was left out (review 339)."""
    rates: list[tuple[float, float, float]] = []  # (when its last step came, slack, samples/s)
    out = ran_out_apart(state)
    for r in state.ranks.values():
        s = r.step
        if s is None or not (s.samples or s.samples_total) or r.rank in out:
            continue
        steps, t = r.history["step"].values(), r.history["t"].values()
        first, last = _last_run(steps, t)
        first += (last - first) // 2
        if last > first and t[last] > t[first] and steps[last] > steps[first]:
            done = _samples_done(r.history["samples"].values()[first + 1 : last + 1])
            pace = (t[last] - t[first]) / (steps[last] - steps[first])
            rates.append((r.step_seen, max(GAP_S, GAP_PACE * pace),
                          (s.samples * (steps[last] - steps[first]) if done is None else done) / (t[last] - t[first])))  # fmt: skip
    end = max((at for at, _, _ in rates), default=0.0)
    return sum(rate for at, slack, rate in rates if at >= end - slack)


def _samples_done(points: list[float | None]) -> float | None:
    """Samples a rank processed over history points (each point's ``samples``: what it did
    since the point before), or None where a point does not say (a reporter from before
    ``samples_total``, the first point after a restart): the latest step's samples times the
    steps stand instead, wrong only where steps differ in size."""
    done = 0.0
    for x in points:
        if x is None or x != x:
            return None
        done += x
    return done


def spread(values: list[float]) -> tuple[float, float, float] | None:
    """(min, median, max), or None for no values."""
    if not values:
        return None
    return min(values), statistics.median(values), max(values)


def held_spread(state: RunState) -> tuple[float, float, float] | None:
    vals = [mem_held_bytes(r.step.mem) for r in state.ranks.values() if r.step is not None and r.step.mem is not None]
    return spread([float(v) for v in vals if v is not None])


def full_bytes(state: RunState) -> int | None:
    """What one rank would hold unsharded (the largest any rank reports)."""
    vals = [mem_full_bytes(r.step.mem) for r in state.ranks.values() if r.step is not None and r.step.mem is not None]
    vals = [v for v in vals if v]
    return max(vals) if vals else None


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.1f}"


def ranks_text(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out: list[str] = []
    for r in sorted(ranks):
        if out and "-" not in out[-1].split(", ")[-1] and int(out[-1]) == r - 1:
            out[-1] = f"{out[-1]}-{r}"
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == r - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ", ".join(out)


def ranks_brief(ranks: list[int], width: int = 60) -> str:
    """``ranks_text`` cut to about ``width`` characters: '0-3, 5, 7, 9, ... (600 ranks)' (a
    job's ranks with many gaps would be a screen of them)."""
    text = ranks_text(ranks)
    if len(text) <= width:
        return text
    return text[: text.rfind(", ", 0, width)] + f", ... ({len(ranks)} ranks)"


def ranks_named(ranks: list[int]) -> str:
    """[3] -> 'rank 3'; [0, 1, 2, 5] -> 'ranks 0-2, 5'."""
    return f"rank{'s' if len(ranks) > 1 else ''} {ranks_text(ranks)}"


ETA_LEAST_S = 5.0
"""Run time a rank's recent history must span before its pace gives a time left."""


def time_left_s(state: RunState, total: int | None) -> float | None:
    """Seconds until the run reaches step ``total`` (the trainer's ``--steps``, or what its
    epochs come to) at its slowest running rank's pace over its recent history (the newest half
    of its last HISTORY_POINTS frames: pauses for evaluations and saves included, as they will
    recur);
    None when not known: no total, no rank training, under ETA_LEAST_S of history, or the total
    reached."""
    if not total:
        return None
    left = None
    for r in state.ranks.values():
        if r.step is None or r.exit_code is not None or r.finished or r.joined:
            continue  # (joined under DDP's Join: done with its inputs, the others' pace says it)
        steps, t = r.history["step"].values(), r.history["t"].values()
        if len(steps) < 2 or t[-1] - t[0] < ETA_LEAST_S or steps[-1] <= steps[0] or steps[-1] >= total:
            continue
        # (its newest half, ETA_LEAST_S at the least: a pace that changed shows twice as soon; a
        # slow start held "45 s left" of a run 29.5 s from its end, review 337)
        i = min(bisect_left(t, t[-1] - max(ETA_LEAST_S, (t[-1] - t[0]) / 2)), len(t) - 2)
        if steps[-1] <= steps[i] or t[-1] <= t[i]:
            i = 0
        mine = (total - steps[-1]) * (t[-1] - t[i]) / (steps[-1] - steps[i])
        left = mine if left is None else max(left, mine)
    return left


def straggler_cause(cause: str | None, message: str | None) -> str:
    """A straggler's cause as said after its verdict: the verdict's cause, or, a data straggler
    the hub found slow in its own work between steps (not its DataLoader: its verdict's words,
    stragglers.OWN_WORK), "own work between steps": the launch's last line and the report read
    "rank 1 was a straggler (data)" where the verdict said its DataLoader was not it (review 308)."""
    return OWN_WORK_CAUSE if is_own_work(cause, message) else cause or "cause unknown"


OWN_WORK_CAUSE = "own work between steps"
"""How a data straggler slow in its own work between steps (:func:`is_own_work`) is said."""


def cause_label(cause: str | None, message: str | None) -> str:
    """A straggler verdict's cause as Prometheus' ``cause`` label says it: "own_work" for a data
    straggler slow in its own work between steps (:func:`is_own_work`), else its cause."""
    return "own_work" if is_own_work(cause, message) else cause or "unknown"


def is_own_work(cause: str | None, message: str | None) -> bool:
    """Whether a straggler verdict's cause (``cause``, its ``message``) is the rank's own work
    between steps: a data straggler whose DataLoader the hub found was not it."""
    from .stragglers import OWN_WORK

    return cause == "data" and OWN_WORK in (message or "")


def straggled_text(r) -> str:
    """A rank that was a straggler (its first spell: ``RankState.straggled``, cleared at
    ``straggled_to``), once it is done or caught up: when the hub found it and, where it caught
    up, when (the report gives since when it straggled, from the steps before). "found at step
    29" alone read the same of a spell of ten steps and of one to the run's end."""
    v = r.straggled
    text = f"rank {v.rank} was a straggler ({straggler_cause(v.cause, v.message)}), found at step {v.step}"
    text += f", no longer at step {r.straggled_to}" if r.straggled_to is not None else ""
    again = r.straggler
    if again is not None and again is not v:
        # A later spell that ran to the end ("found at step 29, no longer at step 149" of a
        # rank that straggled again from step 160 to the end, as the report said; review 335)
        cause = straggler_cause(again.cause, again.message)
        same = cause == straggler_cause(v.cause, v.message)
        text += f", and again{'' if same else f' ({cause})'} from step {again.step} to the end"
    return text


def stragglers_were(state: RunState) -> str:
    """A run's stragglers, said once it is over: 'rank 1 was a straggler (data), found at step
    29', or 'ranks 1, 3 were stragglers (see the events)'; '' when none was."""
    slow = sorted((r for r in state.ranks.values() if r.straggled is not None), key=lambda r: r.rank)
    if not slow:
        return ""
    if len(slow) == 1:
        return straggled_text(slow[0])
    names = ", ".join(str(r.rank) for r in slow[:6]) + (", …" if len(slow) > 6 else "")
    return f"ranks {names} were stragglers (see the events)"


def held_up_were(state: RunState) -> str:
    """The ranks that held the others up now and then, said once the run is over: 'rank 1 held
    the others up 28.5 s in all, now and then (see the events)'; '' when none did."""
    held = sorted(state.held_up_s.items())
    if not held:
        return ""
    total = sum(s for _, s in held)
    return f"{ranks_named([r for r, _ in held])} held the others up {total:.1f} s in all, now and then (see the events)"


def total_steps(hello) -> int | None:
    """The steps the run is to take, as its hello's config says them: --steps, or (the bundled
    trainer under --epochs) the steps its epochs come to, or what a script's framework plans
    (PyTorch Lightning, Hugging Face's Trainer: its hello sent again once training begins, see
    trainer/frameworks.py); None where it does not say (a plain script's). With --epochs the
    progress said "step 16" where the trainer said "step 16/16"."""
    config = (hello.config or {}) if hello is not None else {}
    for total in (config.get("steps"), config.get("total_steps")):
        if isinstance(total, int) and not isinstance(total, bool) and total > 0:
            return total
    return None


def first_few(names: list[str], n: int = 3) -> str:
    """['a', 'b', 'c', 'd'] -> 'a, b, c, ...': the first ``n``, and whether there are more."""
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")


def span_text(seconds: float) -> str:
    """A span of run time, compact: ``42s``, ``3m05s``, ``1h02m``, ``2d03h`` (the TUI's header
    and the headless lines alike)."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def took_text(s: float) -> str:
    """How long a save or a resume took, in the report and the headless lines alike: ``5 ms``
    under 0.1 s (a 4.8 ms save read "0.00 s" in the report), else ``2.80 s``."""
    return f"{s * 1e3:.0f} ms" if s < 0.1 else f"{s:.2f} s"


def named_by_step(folder: str, step: int | None) -> bool:
    """Whether ``folder``'s own name holds the step number (``.../checkpoint-30`` of a save at
    step 30): a checkpoint's own folder, which names it better than any of its files does."""
    return step is not None and re.search(rf"(?<!\d){step}(?!\d)", os.path.basename(folder)) is not None
