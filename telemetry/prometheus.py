"""``--prometheus PORT``: the hub's state as Prometheus metrics on ``/metrics``.

A custom collector reads the hub's :class:`~pardash.telemetry.state.RunState` and
:meth:`HubCore.stats` when Prometheus scrapes, so ingest pays nothing per message. It runs on
prometheus-client's HTTP thread while the hub loop mutates the state: it copies what it
iterates (``list(dict.values())`` is atomic under the GIL) and reads each message object once.

Names follow Prometheus' conventions: a ``pardash_`` prefix, base units in the name (seconds,
bytes), ``_total`` on counters. By default the series are cross-rank aggregates, so a
thousand-rank job is a few dozen series; ``per_rank=True`` (``--prometheus-per-rank``) adds
``pardash_rank_*`` series labelled by rank (cardinality grows with the world size).

prometheus-client (a dependency of pardash's own) is imported lazily: the hub imports this
module only when asked to serve metrics.

The HTTP server is the library's WSGI app on wsgiref's server with two limits that
prometheus-client's ``start_http_server`` lacks: a connection that sends nothing for
``READ_TIMEOUT_S`` is closed, and at most ``MAX_CONNECTIONS`` are served at once (more are
closed as soon as they are accepted). Without them, a thousand connections that never finish
their request (slow loris) each held a thread and a file descriptor for good, until the hub had
no descriptor left for its ranks and viewers.

``--prometheus-textfile PATH`` writes the same hub metrics (not the process' own: see
:class:`TextfileWriter`) to a ``.prom`` file every ``TEXTFILE_EVERY_S`` and once more as the hub
stops, for node_exporter's textfile collector: a launched hub stops with its job, and /metrics
with it, well before a scrape every 15-60 s sees the ranks finished or exited. Every series of
the file carries a ``run`` label, the run's id: node_exporter serves all the files of its folder
as one target, and two jobs' files on a node otherwise held the same series. /metrics has none:
each hub is a target of its own there, told apart by Prometheus' ``instance`` label.

Step figures (``pardash_step``, the step times, the loss, memory, per-rank ones) keep their last
values while torchrun restarts a rank (``--max-restarts``): its new process has taken no step
yet, and a series gone for those seconds fired an ``absent()`` alert on every restart.

A rank that ended by a stop (Ctrl-C, the viewer's stop, SIGTERM: failures.STOPPED_CODES, as
``pardash report`` judges it) is in state ``stopped``, not ``exited``: every deliberate stop
fired the alert ``pardash_ranks{state="exited"} > 0`` that a failure is meant to fire.

Counters for ``rate()`` and for a run's end (a gauge of now reads 0 or nothing once the ranks
are done): steps and samples of all ranks, and straggler verdicts by cause. Each is worked out
at scrape time from what the hub keeps anyway (a rank's count of steps seen, the reporter's own
running sum of samples, the event log's verdicts); the collector keeps what it needs to carry
them over a rank's restart or past the event log's bound.
"""

from __future__ import annotations

import errno
import math
import os
import re
import socket
import stat
import statistics
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Iterator

from . import cliargs
from .cliargs import TEXTFILE_EVERY_S, textfile_name  # (where its flag is made: see cliargs)
from .hubcore import REJECT_REASONS
from .security import metrics_refusal
from .state import EXITED, SILENT, STALLED, STARTING, STATUSES, STRAGGLER, mem_device_bytes, mem_full_bytes, mem_held_bytes, mem_state_bytes
from .summary import cause_label, expected_state_bytes, samples_per_s

if TYPE_CHECKING:  # pragma: no cover
    from . import schema
    from .hubcore import HubCore
    from .state import RankState

PHASES = ("data", "forward", "backward", "optimizer", "comm")

INSTALL_HINT = "--prometheus needs prometheus-client (pip install prometheus-client): pardash's installation lacks it"

READ_TIMEOUT_S = 5.0
"""A connection that sends nothing (or takes nothing of the answer) for this long is closed. A
scraper sends its whole request at once and reads the answer as it comes."""
MAX_CONNECTIONS = 16
"""Connections served at once, each on a thread of its own; one more is closed as soon as it is
accepted. A Prometheus server scrapes over one connection at a time: a few of them, and a curl
or two, fit."""




STOPPED = "stopped"
"""The state of a rank that ended by a stop, not failing (see RANKS_HELP); the hub's own state
calls it exited (its exit code tells the two apart: failures.STOPPED_CODES)."""
_AFTER_EXITED = STATUSES.index(EXITED) + 1
LEFT_EARLY = "left_early"
"""The state of a rank whose script ended well (exit 0) while its peers trained on
(failures.left_early: the TUI and the report say "left early"); the hub's own state calls it
finished."""
RANK_STATES = (*STATUSES[:_AFTER_EXITED], STOPPED, *STATUSES[_AFTER_EXITED:], LEFT_EARLY)
"""The ``state`` label's values: the hub's states, ``stopped`` after ``exited``, and ``left_early``."""

RANKS_HELP = (
    "Ranks in each state: starting (not heard from yet, or started again by torchrun), running, straggler, stalled, silent, "
    "exited (failed: an error, a nonzero exit code, or killed by a signal such as SIGKILL or SIGSEGV), "
    "stopped (ended by a stop, not failing: Ctrl-C or a viewer's stop, or SIGTERM, as torchrun stops the other ranks "
    "after one failed and as a scheduler stops a job), finished (exit 0), left_early (exit 0 while its peers trained on: "
    "its loop ended early, and its peers then wait or fail in the collective it never joins). exited > 0: a rank failed."
)
"""``pardash_ranks``'s HELP: what each state means, so an alert on ``exited`` knows what it fires on."""

STRAGGLER_CAUSES = ("data", "own_work", "compute", "forward", "backward", "optimizer", "gpu", "host")
"""The causes of a straggler as the ``cause`` label says them: a verdict's (stragglers.py: a phase
for one slow past its step's first collective, found by its comm deficit), or
"own_work" for a data straggler slow in its own work between steps, not its DataLoader
(summary.is_own_work; the TUI, the launch's last line and the report say it so: a Grafana panel
read "data" of a script that logged for 30 ms after each step). Each has its counter series
from the start, so ``increase()`` sees a run's first verdict (a series that appears with it does not)."""


class MetricsError(Exception):
    """Metrics cannot be served; the message is one line that says what to do."""


LOSS_MEAN_HELP = (
    "Mean of the ranks' latest losses, each weighted by its step's samples: for DDP and FSDP, the global batch's mean loss "
    "(each rank's loss the mean over its own batch, whatever its size). The plain mean over the ranks where a rank with a loss said no samples. "
    "NaN while any rank's loss is not finite (NaN or infinite: pardash_ranks_loss_not_finite counts them)."
)
"""``pardash_loss_mean``'s HELP: what the figure is, exactly."""

PHASE_HELP = (
    "Phase times of the rank's latest step. phase=\"comm\" is two things: of the bundled trainer, the time in the step's "
    "collectives (DDP's all-reduces, FSDP's all-gathers and reduce-scatters), within forward and backward, so the phases "
    "sum past the step; of a script's zero-code hooks, the wait for the other ranks (in its own collectives between steps, "
    "and in DDP's all-reduces after the backward's work), in no other phase, "
    "so the phases and comm sum to the step."
)
"""``pardash_rank_phase_seconds``'s HELP: a query that adds the phases up needs to know which comm it has."""


def loss_now(r: "RankState", s: "schema.Step") -> float | None:
    """The rank's latest loss: its step's, or while its loss is not finite (its reporter sends
    none then, JSON having no NaN) what it turned to, NaN or an infinity, as the exposition
    format writes them (it was left out: a NaN rank had no series, and the mean was the
    others', review 306); None where it gave none."""
    if s.loss is not None:
        return s.loss
    bad = r.loss_not_finite
    return float(bad[0]) if bad is not None else None  # ("nan", "inf", "-inf")


def _loss_mean(steps: "list[tuple[RankState, schema.Step]]") -> float | None:
    """The ranks' latest losses as one figure (see LOSS_MEAN_HELP): weighted by the samples of
    each step when every step with a loss has some; else their plain mean (a rank of batch 16
    and one of 48 read as the mean of the two losses, not the global batch's); NaN while a
    rank's loss is not finite (a run whose every rank was NaN had no sample: an alert on it
    never fired)."""
    losses = [(x, s.samples) for r, s in steps if (x := loss_now(r, s)) is not None]
    if any(not math.isfinite(x) for x, _ in losses):
        return math.nan
    if not losses:
        return None
    if all(n > 0 for _, n in losses):
        return sum(loss * n for loss, n in losses) / sum(n for _, n in losses)
    return sum(loss for loss, _ in losses) / len(losses)


def rank_state(r: "RankState", stopped_codes: frozenset[int], left: "Mapping[int, int | None] | None" = None) -> str:
    """The rank's ``state`` label: its state, but ``stopped`` for a rank that exited with a code
    of ``stopped_codes`` (failures.STOPPED_CODES: how the report tells a stop from a failure),
    and ``left_early`` for one of ``left`` (failures.left_early)."""
    if left and r.rank in left:
        return LEFT_EARLY
    s = r.status
    return STOPPED if s == EXITED and (r.exit_code in stopped_codes or r.stopping is not None) else s


RANK_RSS_HELP = ("The rank's process resident set now: its latest system sample's (about every second, between steps "
                 "too: an evaluation's or a save's memory, a leak's growth), else its latest step's.")
RSS_MAX_HELP = ("Largest process resident set of a rank still running, now (its latest system sample, about every second): what the host's "
                "memory and the OOM killer see, beside the model state pardash_state_max_bytes counts.")


def _rss_now(r: "RankState", step: "schema.Step | None") -> int | None:
    """The rank's process resident set now: its latest system sample's, else its latest step's
    (the steps' figure stood still through an evaluation that held 300 MiB more, and a rank
    killed there left its textfile's RSS below its peer's, review 340)."""
    sysm = r.system
    if sysm is not None and sysm.rss_bytes is not None:
        return sysm.rss_bytes
    mem = step.mem if step is not None else None
    return mem.rss_bytes if mem is not None else None


def _stat(values: list[float]) -> tuple[float, float, float] | None:
    return (min(values), statistics.median(values), max(values)) if values else None


class HubCollector:
    """Yields the hub's metrics at scrape time (a prometheus-client custom collector).

    ``strategy``: the job's strategy as its launcher said it, for ``pardash_run_info`` until a
    rank's hello says it. ``run_label``: a ``run`` label (the run's id) on every series, for a
    textfile (see the module's docstring)."""

    def __init__(self, core: "HubCore", *, per_rank: bool = False, strategy: str = "", run_label: bool = False) -> None:
        self.core = core
        self.per_rank = per_rank
        self.strategy = strategy
        self.run_label = run_label
        self._last_steps: dict[int, "schema.Step"] = {}
        """rank -> its latest step this collector saw: the figures a rank restarted by torchrun
        keeps until its new process steps (RankState.new_process forgets its step, keeping
        only the step's number)."""

    def describe(self) -> list:
        # Registering without calling collect() (which reads live state) at registration.
        return []

    def collect(self) -> Iterator:
        # The hub thread may add a rank while we iterate its dicts: build every family first,
        # and start again on "dictionary changed size during iteration" (rare: a rank joins).
        for attempt in range(3):
            try:
                families = list(self._families())
                break
            except RuntimeError:
                if attempt == 2:
                    raise
        if self.run_label:
            run = self.core.state.run_id
            for fam in families:
                fam.samples = [s._replace(labels={"run": run, **s.labels}) for s in fam.samples]
        yield from families

    def _latest_steps(self, ranks: "list[RankState]") -> "list[tuple[RankState, schema.Step]]":
        """Each rank's latest step: its process's, or for a rank torchrun restarted whose new
        process has taken none yet, its previous process's (as this collector last saw it).
        A rank that never stepped has none."""
        kept = self._last_steps
        out = []
        for r in ranks:
            s = r.step
            if s is not None:
                kept[r.rank] = s
            elif r.last_step is not None:
                s = kept.get(r.rank)
            if s is not None:
                out.append((r, s))
        return out

    @staticmethod
    def _count_samples(ranks: "list[RankState]") -> int:
        """Samples of all ranks so far: each rank's latest ``samples_total`` (its reporter's
        running sum, of its process) plus its earlier processes' last sums
        (``RankState.samples_before``, kept by the state as torchrun restarts it: a hub that
        read its log back counts the same, and no scrape's timing changes it)."""
        total = 0
        for r in ranks:
            s = r.step
            total += r.samples_before + (s.samples_total or 0 if s is not None else 0)
        return total

    def _families(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        core = self.core
        st = core.state
        stats = core.stats()
        ranks = list(st.ranks.values())
        steps = self._latest_steps(ranks)
        # (a rank restarted by torchrun has a last step, its previous process's, before its
        # new one steps: the run's progress is no less for the restart)
        stepped = any(r.last_step is not None for r in ranks)
        hello = st.hello
        # The launcher says the job's size before any rank speaks (its ranks start for seconds,
        # longer for a big model's import): until every rank's hello, the ranks not seen yet are
        # starting.
        world_size = max(st.world_size, core.world_size)

        info = InfoMetricFamily("pardash_run", "The run this hub records.")
        info.add_metric([], {"run_id": st.run_id, "strategy": st.strategy or self.strategy, "hub_id": core.hub_id})
        yield info

        def gauge(name: str, doc: str, value: float | None):
            g = GaugeMetricFamily(name, doc)
            if value is not None:
                g.add_metric([], value)
            return g

        yield gauge("pardash_world_size", "Ranks in the job (as its launcher said it, else from the ranks' hellos).", world_size)
        yield gauge("pardash_step", "Last step completed by the slowest rank still stepping (the run's progress).", st.step if stepped else None)
        yield gauge("pardash_samples_per_second", "Samples a second over all ranks, each over its last second or so of steps.", samples_per_s(st) if stepped else None)

        from .failures import STOPPED_CODES, left_early  # (what `pardash report` calls a stop)

        left = left_early(st)
        by_state = GaugeMetricFamily("pardash_ranks", RANKS_HELP, labels=["state"])
        counts = dict.fromkeys(RANK_STATES, 0)
        for r in ranks:
            counts[rank_state(r, STOPPED_CODES, left)] += 1
        counts[STARTING] += max(0, world_size - len(ranks))
        for s in RANK_STATES:
            by_state.add_metric([s], counts[s])
        yield by_state
        # Which ranks a hang going on waits for (its likely causes): "stalled 1024" named none,
        # where the headless line said "likely waiting for rank 5" (review 325).
        cause = GaugeMetricFamily("pardash_hang_cause", "1 for each rank a hang going on likely waits for (every rank alive stalled or "
                                  "silent, the others waiting for it): the node to look at; no series while no hang.", labels=["rank"])  # fmt: skip
        if counts[STALLED] or counts[SILENT]:
            from .causes import waited_for

            for rank in sorted(waited_for(st)):
                cause.add_metric([str(rank)], 1)
        yield cause
        yield gauge("pardash_last_heard_timestamp_seconds", "When the hub last heard from a rank, Unix seconds (the ranks' clock): a job "
                    "killed outright (SIGKILL, the OOM killer, its node lost) leaves its textfile as it last was, its ranks "
                    "'running'; time() minus this tells it.", st.t_last_rank or None)  # fmt: skip
        restarts = CounterMetricFamily("pardash_job_restarts", "Times torchrun restarted the job's workers (--max-restarts), as the launcher saw it or the ranks' hellos said.")
        restarts.add_metric([], max((r.restarts for r in ranks), default=0))
        yield restarts
        hub_restarts = CounterMetricFamily("pardash_hub_restarts", "Times the run's hub was started again on its log (--resume): the launcher's "
                                           "after one died, the ranks training on, what they sent meanwhile counted lost; or a "
                                           "`pardash hub --resume` of yours), as its log says.")  # fmt: skip
        hub_restarts.add_metric([], st.hub_restarts)
        yield hub_restarts

        yield gauge("pardash_loss_mean", LOSS_MEAN_HELP, _loss_mean(steps))
        yield gauge("pardash_ranks_loss_not_finite", "Ranks whose loss is not finite (NaN or infinite: diverged, or a spike), "
                    "from the step it turned so until it is finite again; a rank that ended so, to its end.",
                    sum(1 for r in ranks if r.loss_not_finite is not None))  # fmt: skip
        growing = st.memory_growing
        yield gauge("pardash_ranks_memory_growing", "Ranks whose memory the hub says grows step after step now (a leak: tensors "
                    "kept across steps), till it is steady again; every rank where they grow alike.",
                    len(ranks) if -1 in growing else sum(1 for q in growing if q >= 0))  # fmt: skip
        step_stat = _stat([s.step_s for _, s in steps])
        self_stat = _stat([s.self_s for _, s in steps if s.self_s is not None])
        yield gauge("pardash_step_median_seconds", "Median over ranks of the latest step's wall time.", step_stat[1] if step_stat else None)
        yield gauge("pardash_step_max_seconds", "Largest latest step wall time of any rank.", step_stat[2] if step_stat else None)
        yield gauge("pardash_self_median_seconds", "Median over ranks of the latest self time: a rank's work before the step's first collective, no waiting in it (DDP: data and forward; FSDP: those less their all-gathers).", self_stat[1] if self_stat else None)
        yield gauge("pardash_self_max_seconds", "Largest latest self time of any rank (the straggler signal).", self_stat[2] if self_stat else None)

        strag = GaugeMetricFamily(
            "pardash_straggler_cost_seconds", "Seconds a step the other ranks wait for each straggler rank.", labels=["rank", "cause"]
        )
        n_strag = 0
        for r in ranks:
            v = r.straggler
            # What pardash_ranks{state="straggler"} counts: a rank done keeps no one waiting,
            # and a stalled or silent one is that first (the whole job waits, not for a pace).
            if v is not None and r.status == STRAGGLER:
                n_strag += 1
                strag.add_metric([str(r.rank), cause_label(v.cause, v.message)], v.cost_s or 0.0)
        yield gauge("pardash_stragglers", "Ranks judged stragglers now.", n_strag)
        yield strag
        verdicts = CounterMetricFamily(
            "pardash_straggler_verdicts",
            "Straggler verdicts so far, by cause: each is a rank found to be a straggler (found again after it was cleared, it counts again).",
            labels=["cause"],
        )  # fmt: skip
        counted = st.straggler_verdicts
        for cause in (*STRAGGLER_CAUSES, *sorted(set(counted) - set(STRAGGLER_CAUSES))):
            verdicts.add_metric([cause], counted.get(cause, 0))
        yield verdicts
        held_up = CounterMetricFamily(
            "pardash_held_up_seconds",
            "Seconds ranks held the others up now and then, far past a step (a pause on one rank the others waited out, "
            "not a straggler's every step), as the hub's held_up verdicts said them.",
        )  # fmt: skip
        held_up.add_metric([], sum(st.held_up_s.values()))
        yield held_up

        steps_total = CounterMetricFamily(
            "pardash_steps",
            "Steps the hub received from the ranks, each rank's counted (a step of 4 ranks counts 4): "
            "rate(pardash_steps_total[1m]) / pardash_world_size is the job's steps a second.",
        )  # fmt: skip
        steps_total.add_metric([], sum(r.steps_seen for r in ranks))
        yield steps_total
        samples_total = CounterMetricFamily(
            "pardash_samples",
            "Samples all ranks processed, as their reporters count them (each step's samples), over every process of each rank "
            "(torchrun's restarts): rate(pardash_samples_total[1m]) is the job's samples a second.",
        )  # fmt: skip
        samples_total.add_metric([], self._count_samples(ranks))
        yield samples_total

        mems = [s.mem for _, s in steps if s.mem is not None]
        held = _stat([float(b) for b in (mem_held_bytes(m) for m in mems) if b is not None])
        dev = _stat([float(b) for b in (mem_device_bytes(m) for m in mems) if b is not None])
        peaks = [m.cuda_peak_bytes for m in mems if m.cuda_peak_bytes is not None]
        full = [b for b in (mem_full_bytes(m) for m in mems) if b]
        state_b = _stat([float(mem_state_bytes(m)) for m in mems])
        yield gauge("pardash_state_min_bytes", "Smallest model state a rank holds: parameters, gradients, optimizer state (what pardash_expected_bytes expects).", state_b[0] if state_b else None)
        yield gauge("pardash_state_max_bytes", "Largest model state a rank holds: parameters, gradients, optimizer state (what pardash_expected_bytes expects).", state_b[2] if state_b else None)
        yield gauge("pardash_held_min_bytes", "Smallest memory a rank holds for training: its model state plus DDP's gradient buckets.", held[0] if held else None)
        yield gauge("pardash_held_max_bytes", "Largest memory a rank holds for training: its model state plus DDP's gradient buckets.", held[2] if held else None)
        yield gauge("pardash_unsharded_bytes", "Model state one rank would hold unsharded (measured).", max(full) if full else None)
        expected, _ = expected_state_bytes(
            max(full) if full else None, hello.params_count if hello is not None else 0, st.world_size, hello.strategy if hello is not None else "",
            max((m.shards for m in mems), default=0),
        )
        yield gauge("pardash_expected_bytes", "Model state a rank should hold for the strategy (compare pardash_state_max_bytes): its state unsharded (measured), / N when sharded (16 bytes a parameter before any measure).", expected)
        yield gauge("pardash_device_memory_min_bytes", "Smallest device memory of a rank (CUDA allocated on GPU, RSS on CPU).", dev[0] if dev else None)
        yield gauge("pardash_device_memory_max_bytes", "Largest device memory of a rank (CUDA allocated on GPU, RSS on CPU).", dev[2] if dev else None)
        latest = {r.rank: s for r, s in steps}
        rss_now = [b for b in (_rss_now(r, latest.get(r.rank)) for r in ranks if r.exit_code is None and not r.finished) if b is not None]
        yield gauge("pardash_rss_max_bytes", RSS_MAX_HELP, max(rss_now) if rss_now else None)
        yield gauge("pardash_device_peak_max_bytes", "Largest CUDA allocator peak of a rank during its latest step.", max(peaks) if peaks else None)

        received = CounterMetricFamily("pardash_messages_received", "Messages the hub took from ranks.")
        received.add_metric([], stats.received)
        yield received
        rejected = CounterMetricFamily("pardash_messages_rejected", "Messages the hub refused, by reason.", labels=["reason"])
        counts = dict.fromkeys(REJECT_REASONS, 0) | stats.rejected  # (zeros too: see REJECT_REASONS)
        for reason, n in sorted(counts.items()):
            rejected.add_metric([reason], n)
        yield rejected
        lost = CounterMetricFamily("pardash_messages_lost", "Messages that never arrived (gaps in the ranks' sequence numbers).")
        lost.add_metric([], stats.lost)
        yield lost
        dropped = CounterMetricFamily("pardash_messages_dropped", "Messages the ranks' reporters dropped (queue full), as their heartbeats say.")
        dropped.add_metric([], stats.dropped)
        yield dropped
        yield gauge("pardash_ingest_messages_per_second", "Messages a second the hub ingested over the last second.", stats.ingest_hz)
        yield gauge("pardash_hub_behind_seconds", "How long the steps the hub takes now waited for it (beyond their ranks' least wait): how far behind the ranks its figures are.", stats.behind_s)

        if self.per_rank:
            yield from self._per_rank(ranks, dict((r.rank, s) for r, s in steps), left)

    def _per_rank(self, ranks: "list[RankState]", steps: "dict[int, schema.Step]", left: "Mapping[int, int | None]") -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        step = GaugeMetricFamily("pardash_rank_step", "Last step the rank completed.", labels=["rank"])
        step_s = GaugeMetricFamily("pardash_rank_step_seconds", "Wall time of the rank's latest step.", labels=["rank"])
        self_s = GaugeMetricFamily("pardash_rank_self_seconds", "Self time of the rank's latest step.", labels=["rank"])
        phase = GaugeMetricFamily("pardash_rank_phase_seconds", PHASE_HELP, labels=["rank", "phase"])
        loader = GaugeMetricFamily("pardash_rank_loader_seconds", "The part of the rank's latest step's data phase spent in its DataLoader "
                                   "(a script's zero-code hooks time it): the rest of phase=\"data\" is the script's own work between steps.",
                                   labels=["rank"])  # fmt: skip
        loss = GaugeMetricFamily("pardash_rank_loss", "Loss of the rank's latest step; NaN, +Inf or -Inf while it is not finite.", labels=["rank"])
        held = GaugeMetricFamily("pardash_rank_held_bytes", "Memory the rank holds for training: its model state plus DDP's gradient buckets.", labels=["rank"])
        device = GaugeMetricFamily("pardash_rank_device_memory_bytes", "Device memory of the rank (CUDA allocated, or RSS), as of its latest step.", labels=["rank"])
        rss = GaugeMetricFamily("pardash_rank_rss_bytes", RANK_RSS_HELP, labels=["rank"])
        state = GaugeMetricFamily(
            "pardash_rank_state", "1 for the rank's current state, 0 for the others (the states as pardash_ranks says them).", labels=["rank", "state"]
        )  # fmt: skip
        lost = CounterMetricFamily("pardash_rank_messages_lost", "The rank's messages that never arrived.", labels=["rank"])
        # What the script logs and times itself (pt.log's own names, pt.phase's): its tokens/s
        # or grad norm were in the TUI, the log and TensorBoard, and nowhere here.
        metric = GaugeMetricFamily("pardash_rank_metric", "The last value of a metric the script logs itself (pt.log), by name; and pardash's own grad_norm (the "
                                   "total gradient norm the script's clip_grad_norm_ returned) and lr_group1.. (each parameter group's lr past group 0's).",
                                   labels=["rank", "name"])  # fmt: skip
        own = GaugeMetricFamily("pardash_rank_own_phase_seconds", "A phase the script times itself (pt.phase) in the rank's latest step.",
                                labels=["rank", "phase"])  # fmt: skip
        from .failures import STOPPED_CODES

        for r in ranks:
            lab = str(r.rank)
            now = rank_state(r, STOPPED_CODES, left)
            for s_ in RANK_STATES:  # every state, so a series does not vanish when the rank leaves it
                state.add_metric([lab, s_], 1 if s_ == now else 0)
            lost.add_metric([lab], r.seq.lost)
            s = steps.get(r.rank)
            if s is None:
                continue
            step.add_metric([lab], r.last_step)  # (its process's, or its previous one's: exact)
            step_s.add_metric([lab], s.step_s)
            if s.self_s is not None:
                self_s.add_metric([lab], s.self_s)
            for p in PHASES:
                v = getattr(s, f"{p}_s")
                if v is not None:
                    phase.add_metric([lab, p], v)
            if s.loader_s is not None:
                loader.add_metric([lab], s.loader_s)
            x = loss_now(r, s)
            if x is not None:
                loss.add_metric([lab], x)
            for name, v in r.custom_last.items():
                if name != "micro_batches":  # (pardash's own count, not the script's: the report says so)
                    metric.add_metric([lab, name], v)
            for name, v in s.phases.items():
                own.add_metric([lab, name], v)
            h, d = mem_held_bytes(s.mem), mem_device_bytes(s.mem)
            if h is not None:
                held.add_metric([lab], h)
            if d is not None:
                device.add_metric([lab], d)
            b = _rss_now(r, s)
            if b is not None:
                rss.add_metric([lab], b)
        yield from (step, step_s, self_s, phase, loader, loss, held, device, rss, state, lost, metric, own)


def _bounded_server(addr: str, port: int, *, read_timeout_s: float, max_connections: int):
    """wsgiref's HTTP server, a thread a connection, at most ``max_connections`` of them, each
    closed once it keeps the server waiting ``read_timeout_s``. (Made here: every `pardash`
    command imports this module for its flags, and http.server costs it 15 ms.)"""
    import socketserver
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

    class Handler(WSGIRequestHandler):
        """One request a connection (wsgiref speaks HTTP/1.0); nothing logged (a scrape every
        15 s is not news)."""

        timeout = read_timeout_s  # StreamRequestHandler puts it on the socket: every read and write

        def log_message(self, format: str, *args: object) -> None:
            pass

    class BoundedServer(socketserver.ThreadingMixIn, WSGIServer):
        daemon_threads = True
        block_on_close = False  # a hub that stops does not wait for a scraper keeping it waiting
        # Connections the kernel holds until the server thread (which shares the interpreter
        # with the hub's loop) takes them: past socketserver's 5 a burst waits a second or more
        # for the client's SYN to be sent again, the ones the server would close at once too.
        request_queue_size = 128
        slots = threading.BoundedSemaphore(max_connections)

        def process_request(self, request, client_address) -> None:
            if not self.slots.acquire(blocking=False):
                self.shutdown_request(request)  # full: closed now, never queued
                return
            try:
                super().process_request(request, client_address)
            except BaseException:
                self.slots.release()
                self.shutdown_request(request)
                raise

        def process_request_thread(self, request, client_address) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                self.slots.release()

        def handle_error(self, request, client_address) -> None:
            # A client that timed out or hung up is the limits at work: nothing to print in the
            # hub's output. Anything else is a bug worth its traceback.
            if not isinstance(sys.exc_info()[1], OSError):
                super().handle_error(request, client_address)

    # The family the address needs (AF_INET6 for ::1 or ::), as prometheus-client picks it.
    family, _, _, _, sockaddr = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    BoundedServer.address_family = family
    return BoundedServer(sockaddr[:2], Handler)


class MetricsServer:
    """``/metrics`` over HTTP for one hub, on a server thread of its own (see the module's
    docstring for its limits; tests pass shorter ones)."""

    def __init__(
        self,
        core: "HubCore",
        *,
        port: int,
        addr: str = "127.0.0.1",
        per_rank: bool = False,
        strategy: str = "",
        insecure: bool = False,
        read_timeout_s: float = READ_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        # Checked here, where the socket is bound, so no entry point can skip it.
        refusal = metrics_refusal(addr, insecure=insecure)
        if refusal:
            raise MetricsError(refusal)
        try:
            from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
        except ImportError:
            raise MetricsError(INSTALL_HINT) from None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(HubCollector(core, per_rank=per_rank, strategy=strategy))
        ProcessCollector(registry=self.registry)
        try:
            self._server = _bounded_server(addr, port, read_timeout_s=read_timeout_s, max_connections=max_connections)
        except OSError as exc:
            fix = "choose another --prometheus PORT" if exc.errno == errno.EADDRINUSE else "check --prometheus-addr (an address of this machine)"
            raise MetricsError(f"cannot serve /metrics on {addr}:{port} ({exc.strerror or exc}); {fix}") from None
        self._server.set_app(make_wsgi_app(self.registry))
        self._thread = threading.Thread(target=self._server.serve_forever, name="pardash-metrics", daemon=True)
        self._thread.start()
        self.addr = addr
        self.port = self._server.server_port
        """The port bound (the one asked, or a free one for 0)."""

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve_metrics(
    core: "HubCore",
    port: int,
    *,
    addr: str = "127.0.0.1",
    per_rank: bool = False,
    strategy: str = "",
    insecure: bool = False,
    read_timeout_s: float = READ_TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
) -> MetricsServer:
    """Start serving ``core``'s metrics; raises :class:`MetricsError` with one line (also for
    ``addr`` beyond loopback without ``insecure``: /metrics has no authentication).
    ``strategy``: the launcher's word, until a rank's hello says it (see :class:`HubCollector`)."""
    return MetricsServer(
        core, port=port, addr=addr, per_rank=per_rank, strategy=strategy, insecure=insecure, read_timeout_s=read_timeout_s,
        max_connections=max_connections,
    )  # fmt: skip


class TextfileWriter:
    """``--prometheus-textfile PATH``: the hub's metrics written to PATH every ``every_s`` on a
    thread of its own (a slow disk never holds up a frame; the collector is built to run beside
    the hub's loop, as a scrape does), and once more by :meth:`close` as the hub stops, so the
    file keeps the run's end.

    Each write is whole or nothing (prometheus-client writes ``PATH.<pid>.<thread>`` and renames
    it over PATH). The file holds the pardash_* families of /metrics and not the process_*
    ones: node_exporter serves its own process_* series, and a textfile repeating their names
    fails its textfile collector; they would describe a process gone anyway.

    Every series has a ``run`` label, the run's id (the module's docstring says why).

    A write that fails (a full disk, PATH made a folder) never stops the hub: the first failure
    waits in :meth:`take_warning` for the hub's loop to say it, once for the hub's life; later
    writes try again."""

    def __init__(
        self, core: "HubCore", path: str, *, per_rank: bool = False, strategy: str = "", every_s: float = TEXTFILE_EVERY_S
    ) -> None:
        try:
            from prometheus_client import CollectorRegistry
        except ImportError:
            raise MetricsError(INSTALL_HINT.replace("--prometheus ", "--prometheus-textfile ")) from None
        self.path = path
        self.every_s = every_s
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(HubCollector(core, per_rank=per_rank, strategy=strategy, run_label=True))
        self._failed = False
        self._unsaid: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pardash-textfile", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        self.write()  # at once: the file says from the start which run it is
        while not self._done.wait(self.every_s):
            self.write()

    def write(self) -> bool:
        """Write the file now; False (and the first failure kept to be said) if it failed."""
        from prometheus_client import write_to_textfile

        try:
            write_to_textfile(self.path, self.registry)
        except Exception as exc:  # whatever it is, the hub goes on without the file
            if not self._failed:
                self._failed = True
                why = (exc.strerror or str(exc)) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
                self._unsaid = (
                    f"cannot write --prometheus-textfile {self.path} ({why}); the hub goes on and tries again "
                    f"every {self.every_s:g} s (said once)"
                )
            return False
        return True

    def take_warning(self) -> str | None:
        """The first failure's line, once (the hub's loop says it); None otherwise."""
        text, self._unsaid = self._unsaid, None
        return text

    def close(self) -> str | None:
        """Stop the periodic writes and write the final state; the failure not said yet, if any."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(10)
        self.write()
        return self.take_warning()


TEXTFILE_RUN = re.compile(rb'\brun="([^"\\]{1,200})"')
"""The ``run`` label every series of a textfile carries (:class:`TextfileWriter`)."""


def textfile_writer(path: str, run_id: str = "") -> dict | None:
    """The registry entry of another run (not ``run_id``) of this user's still running whose
    hub writes ``path`` (the run its series are labelled with), else None."""
    from . import registry

    try:
        # (never blocking: a FIFO at the path, opened for reading, waited for a writer, and the
        # hub hung before its first line, review 332)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.read(fd, 1 << 16)
    except OSError:
        return None
    finally:
        os.close(fd)
    found = TEXTFILE_RUN.search(head)
    if found is None:
        return None
    other = found.group(1).decode("utf-8", "replace")
    if other == run_id:
        return None  # (this run's hub, started again by its launcher)
    entry = registry.entry(other)
    if entry is None or not registry.hub_alive(entry) or registry.job_result(entry) is not None:
        return None
    return entry


def textfile_refusal(path: str, run_id: str = "") -> str | None:
    """Why the hub could not write ``path`` (one line), or None: a folder that does not exist or
    takes no file, checked before anything starts (a probe file made and removed at once: as
    root, permissions say nothing); a file another running job's hub writes (``run_id``: this
    run's, whose hub's file it may be): each would overwrite the other's every few seconds, and
    the file say one job or the other by turns, the alert on either's end lost."""
    import tempfile

    flag = f"--prometheus-textfile {path}"
    other = textfile_writer(path, run_id)
    if other is not None:
        stem = path[: -len(".prom")] if path.endswith(".prom") else path
        return (f"{flag}: run {other['run_id']} (still running) writes that file; give this job a file of its own, "
                f"e.g. --prometheus-textfile {stem}-2.prom (node_exporter reads every *.prom in its folder)")  # fmt: skip
    if path.endswith(("/", os.sep)) or os.path.isdir(path):
        return f"{flag} is a folder; give a file in it: --prometheus-textfile {os.path.join(path, 'pardash.prom')}"
    if os.path.exists(path) and not os.path.isfile(path):
        return f"{flag} is not a regular file (a FIFO, a device or a socket); give a .prom file node_exporter reads"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        return f"{flag}: {folder} {what}; give a file in an existing folder (node_exporter's --collector.textfile.directory)"
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".pardash-probe-", suffix=".tmp")
    except OSError as exc:
        return f"{flag}: cannot write in {folder} ({exc.strerror or exc}); choose a writable folder"
    os.close(fd)
    os.unlink(probe)
    return None


add_arguments = cliargs.prometheus_arguments
"""Prometheus's flags (made in cliargs, which every command's parser loads)."""


__all__ = [
    "HubCollector", "MetricsError", "MetricsServer", "TextfileWriter", "add_arguments", "serve_metrics", "textfile_name", "textfile_refusal",
]  # fmt: skip
