"""A rank's figures for the detail screen: phases against the others, memory, system."""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

from pardash.telemetry import schema
from pardash.telemetry import state as st
from pardash.telemetry.clocks import CLOCK_OFF_S
from pardash.telemetry.report_render import COUNTED_BY_PARDASH, by_pardash, lr_group_of
from pardash.telemetry.state import RankState, RunState
from pardash.telemetry.summary import is_pipeline

from .format import fmt_bytes, fmt_clock, fmt_duration, fmt_ratio
from .model import comm_wait_s


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of the rank's last step against the other ranks."""

    name: str
    seconds: float | None
    others_median_s: float | None


PHASES = (
    ("step", "step_s"),
    ("data", "data_s"),
    ("forward", "forward_s"),
    ("backward", "backward_s"),
    ("optimizer", "optimizer_s"),
    ("comm wait", "comm_s"),
    ("self time", "self_s"),
)
"""(label, Step field) of each phase row; the first is the whole step."""


LOADER_LABEL = " in DataLoader"
"""The row under "data" of the part of it in the rank's DataLoader (``Step.loader_s``)."""


OWN_PHASES_SHOWN = 4
"""Phases of the script's own (``pt.phase("augment")``) shown after the known ones; past one
more, the rest are counted in a last row, ``+N more`` (the log, the report and the export have
them all): a script that times a dozen does not push the memory and system panels out of the
figures' column (at 80x24 even two more rows have it scroll to the system panel)."""
OWN_LABEL_CHARS = 12
"""A phase of the script's own is labelled with its name cut to this many characters: the
label column is as wide as its longest label, and the bars take what is left."""


def phases_of(state: RunState, rank: int) -> tuple[Phase, ...]:
    """The rank's last step by phase, each with the other ranks' median of the same phase;
    then the script's own phases (``Step.phases``), in the rank's own order (the order its
    blocks ended in the step: the loop's, the same on every rank and step of a script), each
    with the median of the other ranks that have a phase of that name."""
    r = state.ranks.get(rank)
    if r is None or r.step is None:
        return ()
    others = [q.step for q in state.ranks.values() if q.rank != rank and q.step is not None]
    out = []
    for label, name in PHASES:
        mine = comm_wait_s(r.step, r.hello) if name == "comm_s" else getattr(r.step, name)
        if mine is None and name != "step_s":
            continue
        values = [getattr(s, name) for s in others if getattr(s, name) is not None]
        out.append(Phase(label, mine, statistics.median(values) if values else None))
        if name == "data_s" and r.step.loader_s is not None:
            # Of the data time, the part in its DataLoader (the zero-code hooks time it): the rest
            # is its own work between steps (review 308: 10 ms of sleep read as data loading).
            values = [s.loader_s for s in others if s.loader_s is not None]
            out.append(Phase(LOADER_LABEL, r.step.loader_s, statistics.median(values) if values else None))
    own = r.step.phases
    if own:
        shown = len(own) if len(own) <= OWN_PHASES_SHOWN + 1 else OWN_PHASES_SHOWN  # (never "+1 more": its row)
        for name, mine in itertools.islice(own.items(), shown):
            values = [x for s in others if (x := s.phases.get(name)) is not None]
            label = name if len(name) <= OWN_LABEL_CHARS else name[: OWN_LABEL_CHARS - 1] + "…"
            out.append(Phase(label, mine, statistics.median(values) if values else None))
        if len(own) > shown:
            out.append(Phase(f"+{len(own) - shown} more", None, None))
    return tuple(out)


def memory_facts(r: RankState, *, compact: bool = False) -> tuple[tuple[str, str, str | tuple[str, ...]], ...]:
    """What the rank holds (model state by kind, against unsharded) and what the device says;
    ``compact`` (a short terminal): the totals and the device's figure, not each kind."""
    mem: schema.Mem | None = r.step.mem if r.step is not None else None
    if mem is None:
        return ()
    rows: list[tuple[str, str, str | tuple[str, ...]]] = []
    # (a pipeline's rank holds its own stage of the model: "full copy" said the opposite)
    whole = "its stage" if r.hello is not None and is_pipeline(r.hello.strategy or "") else "full copy"

    def share(held: int, full: int) -> tuple[str, ...]:
        # Shorter forms for a narrow panel: the saving outlasts the size it is against.
        if not full:
            return ()
        # In the value's own units ("208 KiB of 415K" read as two kinds of figure), and said
        # what it is against: this rank's unsharded size, not the run's total.
        full_text = fmt_bytes(full)
        if held >= full:
            return (f"of {full_text} unsharded ({whole})", f"of {full_text} ({whole})", whole)
        less = f"{fmt_ratio(full / held) if held else '∞'} less"
        return (f"of {full_text} unsharded ({less})", f"of {full_text} ({less})", less)

    if not compact:
        rows.append(("params", fmt_bytes(mem.params_bytes), share(mem.params_bytes, mem.params_full_bytes)))
        rows.append(("grads", fmt_bytes(mem.grads_bytes), share(mem.grads_bytes, mem.grads_full_bytes)))
        rows.append(("optimizer", fmt_bytes(mem.optim_bytes), share(mem.optim_bytes, mem.optim_full_bytes)))
    if mem.buckets_bytes and not compact:
        rows.append(("buckets", fmt_bytes(mem.buckets_bytes), ("DDP gradient buckets", "DDP")))
    held = mem.params_bytes + mem.grads_bytes + mem.optim_bytes
    full = mem.params_full_bytes + mem.grads_full_bytes + mem.optim_full_bytes
    if mem.buckets_bytes:  # the grid's "held" is the state and DDP's buckets: the same here
        rows.append(("state", fmt_bytes(held), share(held, full)))
        rows.append(("held", fmt_bytes(held + mem.buckets_bytes), ("state + buckets", "+ buckets")))
    else:
        rows.append(("held", fmt_bytes(held), share(held, full)))
    if mem.cuda_allocated_bytes is not None:
        extra = []
        if mem.cuda_reserved_bytes is not None:
            extra.append(f"reserved {fmt_bytes(mem.cuda_reserved_bytes)}")
        if mem.cuda_peak_bytes is not None:
            extra.append(f"peak {fmt_bytes(mem.cuda_peak_bytes)}")
        # The peak outlasts the reserve in a narrow panel: it is what ran out, if anything.
        rows.append(("allocated", fmt_bytes(mem.cuda_allocated_bytes), (" · ".join(extra), *extra[-1:], "")))
    elif mem.rss_bytes is not None:
        # As of its last step (the system panel's "rss" is its latest sample, "now": 404 MiB here
        # beside 685 MiB there read as two figures of one thing, review 340).
        at = f"at step {r.step.step}" if r.step is not None else ""
        rows.append(("rss", fmt_bytes(mem.rss_bytes), (f"process resident set {at}".rstrip(), at or "process")))
    return tuple(rows)


def system_facts(r: RankState, *, compact: bool = False) -> tuple[tuple[str, str, str | tuple[str, ...]], ...]:
    """The rank's last system sample (CPU, RSS and, where present, the GPU's NVML figures);
    ``compact`` (a short terminal): a line for the GPU (its use and memory, its temperature
    and power where they fit) and one for the process (its CPU and RSS)."""
    s = r.system
    if s is None:
        return ()
    if compact:
        return _system_compact(s)
    rows: list[tuple[str, str, str | tuple[str, ...]]] = []
    if s.cpu_pct is not None:
        rows.append(("cpu", f"{s.cpu_pct:.0f}%", "of one core"))
    if s.host_cpu_pct is not None:
        rows.append(("host cpu", f"{s.host_cpu_pct:.0f}%", "of all cores"))
    if s.rss_bytes is not None:
        rows.append(("rss", fmt_bytes(s.rss_bytes), ("process resident set now", "now")))  # (the memory panel's is its last step's)
    if s.children:
        rows.append(("children", str(s.children), _children_text(s)))
    if s.gpu_util_pct is not None:
        rows.append(("gpu util", f"{s.gpu_util_pct:.0f}%", ""))
    if s.gpu_mem_used_bytes is not None:
        total = f"of {fmt_bytes(s.gpu_mem_total_bytes)}" if s.gpu_mem_total_bytes else ""
        rows.append(("gpu mem", fmt_bytes(s.gpu_mem_used_bytes), total))
    if s.gpu_temp_c is not None:
        rows.append(("gpu temp", f"{s.gpu_temp_c:.0f} °C", ""))
    if s.gpu_power_w is not None:
        rows.append(("gpu power", f"{s.gpu_power_w:.0f} W", ""))
    if s.gpu_sm_clock_mhz is not None:
        rows.append(("sm clock", f"{s.gpu_sm_clock_mhz:.0f} MHz", ""))
    return tuple(rows)


def _system_compact(s: schema.System) -> tuple[tuple[str, str, str | tuple[str, ...]], ...]:
    rows: list[tuple[str, str, str | tuple[str, ...]]] = []
    gpu = [s.gpu_util_pct, s.gpu_mem_used_bytes, s.gpu_temp_c, s.gpu_power_w]
    if any(v is not None for v in gpu):
        memory = ""
        if s.gpu_mem_used_bytes is not None:
            memory = fmt_bytes(s.gpu_mem_used_bytes)
            if s.gpu_mem_total_bytes:
                memory += f" of {fmt_bytes(s.gpu_mem_total_bytes)}"
        heat = [f"{s.gpu_temp_c:.0f} °C"] if s.gpu_temp_c is not None else []
        heat += [f"{s.gpu_power_w:.0f} W"] if s.gpu_power_w is not None else []
        # The memory outlasts the temperature and power as the panel narrows: it is what runs out.
        forms = (" · ".join(filter(None, (memory, *heat))), " · ".join(filter(None, (memory, *heat[:1]))), memory)
        util = f"{s.gpu_util_pct:.0f}%" if s.gpu_util_pct is not None else "–"
        rows.append(("gpu", util, tuple(dict.fromkeys(forms))))
    # The GPU first: where a long title leaves the panel one line, the device a rank trains on.
    if s.cpu_pct is not None or s.rss_bytes is not None:
        cpu = f"{s.cpu_pct:.0f}%" if s.cpu_pct is not None else "–"
        rows.append(("cpu", cpu, (f"rss {fmt_bytes(s.rss_bytes)} now", f"rss {fmt_bytes(s.rss_bytes)}") if s.rss_bytes is not None else ""))
    if s.children:
        rows.append(("children", str(s.children), _children_text(s)))
    return tuple(rows)


def _children_text(s: schema.System) -> str | tuple[str, ...]:
    """``cpu 183% · 1.3 GiB own``: what the rank's child processes (its DataLoader workers) take,
    together: not in its own CPU and RSS."""
    cpu = f"cpu {s.children_cpu_pct:.0f}%" if s.children_cpu_pct is not None else ""
    own = f"{fmt_bytes(s.children_uss_bytes)} own" if s.children_uss_bytes is not None else ""
    return tuple(dict.fromkeys(filter(None, (" · ".join(filter(None, (cpu, own))), cpu)))) or ""


_GONE_AS = {
    st.EXITED: "at its exit",
    st.FINISHED: "as it finished",
    st.LEFT_EARLY: "as it left the job",
    st.SILENT: "before it went silent",
}
"""What a gone rank's last system sample is, by its status (its figures are no longer now)."""


def system_staleness(r: RankState, origin: float, now: float, status: str | None = None) -> tuple[str, str] | None:
    """For a rank that exited, finished or went silent, what its system panel says of its
    figures, which are its last sample's and no longer now (nvitop greys a process that is
    gone): a title ("at its exit") and when the sample was taken on the run's clock and how
    long ago ("last sample 00:10 · 12s ago"). None while the rank is alive (its samples come
    about once a second) or it sent none. ``status``: the rank's as the grid says it (one that
    left the job early: ``state.LEFT_EARLY``), default its own."""
    s = r.system
    gone_as = _GONE_AS.get(status or r.status)
    if s is None or gone_as is None:
        return None
    when = [f"last sample {fmt_clock(s.t - origin)}"] if s.t and origin else ["last sample"]
    ago = now - s.t if s.t else -1.0
    if 0 <= ago < CLOCK_OFF_S:  # (a clock far off says nothing of how long ago)
        when.append(f"{fmt_duration(ago)} ago")
    return gone_as, " · ".join(when)


def _pardash_says(name: str) -> str:
    """The note beside a custom metric pardash's own hooks add ('' for the script's own)."""
    if name in COUNTED_BY_PARDASH:
        return "counted by pardash" if name == "micro_batches" else "clipping's, by pardash"
    group = lr_group_of(name)
    return f"group {group}'s lr, by pardash" if group is not None else ""


def group_lrs(r: RankState) -> list[float]:
    """The learning rates of the rank's optimizer's parameter groups at its last step, group
    0's (its ``lr``) first, where they differ ([]: one group, or all at one lr)."""
    step = r.step
    if step is None or step.lr is None or not step.custom or "lr_group1" not in step.custom:
        return []
    out, group = [step.lr], 1
    while (x := step.custom.get(f"lr_group{group}")) is not None:
        out.append(x)
        group += 1
    return out


LOGGED_SHOWN = 12
"""Metrics the script logged shown in a rank's detail (the rest are counted)."""


def logged_facts(r: RankState) -> tuple[tuple[str, str, str], ...]:
    """The metrics the script logged with the rank's last step (``pt.log(grad_norm=...)``; in
    a log from before ``Step.phases``, its own ``pt.phase`` blocks too, as ``<name>_s``), by
    name. Its own phases are rows of :func:`phases_of`, against the other ranks."""
    custom = r.step.custom if r.step is not None else {}
    # The script's own first; then what pardash's instrumentation adds (micro_batches,
    # grad_norm, lr_group1..), said as such: it read as the script's, alone in the panel the
    # script's own were cut from.
    named = sorted(custom.items(), key=lambda item: (by_pardash(item[0]) is not None, item[0]))
    rows = [(name, f"{value:.6g}", _pardash_says(name)) for name, value in named[:LOGGED_SHOWN]]
    if len(custom) > LOGGED_SHOWN:
        rows.append(("", f"+{len(custom) - LOGGED_SHOWN} more in the log", ""))
    return tuple(rows)
