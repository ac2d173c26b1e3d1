"""The conditions that want a person's attention now, most severe first.

Alerts are read from the ranks' current verdicts (the hub's conclusions), not from the event
log: a straggler that was cleared, or a stalled rank that resumed, is no longer an alert.
"""

from __future__ import annotations

from dataclasses import dataclass

from pardash.telemetry import schema
from pardash.telemetry import state as st

from .format import fmt_step_time

SEVERITY = {"exited": 0, "silent": 1, "stalled": 2, "straggler": 3, "not_sharding": 4}
"""Lower is more severe."""


@dataclass(frozen=True, slots=True)
class Alert:
    """One rank's condition."""

    kind: str
    """exited | silent | stalled | straggler | not_sharding"""
    rank: int
    text: str

    @property
    def severity(self) -> int:
        return SEVERITY[self.kind]


def rank_alerts(r: st.RankState, cause: str = "") -> list[Alert]:
    """The alerts of one rank (a rank may be both a straggler and not sharding); ``cause`` is
    the last error the rank (or the launcher, from torchrun's error file) reported."""
    out: list[Alert] = []
    status = r.status
    if status == st.EXITED:
        text = f"rank {r.rank} exited with code {r.exit_code}"
        if r.step is not None:
            text += f" at step {r.step.step}"
        if cause:
            text += f": {cause}"
        out.append(Alert("exited", r.rank, text))
    elif status == st.SILENT and r.silent is not None:
        out.append(Alert("silent", r.rank, r.silent.message or f"rank {r.rank} silent (no heartbeat)"))
    elif status == st.STALLED and r.stalled is not None:
        v = r.stalled
        phase = v.cause or "unknown phase"
        text = f"rank {r.rank} stalled in {phase}"
        if v.step is not None:
            text += f" at step {v.step}"
        out.append(Alert("stalled", r.rank, text))
    elif status == st.STRAGGLER and r.straggler is not None:
        v = r.straggler
        if v.message:
            text = v.message
        else:
            text = f"rank {r.rank} is a straggler"
            if v.cost_s:
                text += f": the others wait {fmt_step_time(v.cost_s)} a step"
        out.append(Alert("straggler", r.rank, text))
    if r.not_sharding is not None and status not in (st.EXITED, st.FINISHED):
        out.append(Alert("not_sharding", r.rank, r.not_sharding.message or f"rank {r.rank} holds the full model (not sharding)"))
    return out


def run_alerts(state: st.RunState) -> list[Alert]:
    """Every current alert of the run, most severe first, then by rank."""
    out: list[Alert] = []
    causes: dict[int, str] | None = None
    for r in state.ranks.values():
        if r.status in (st.RUNNING, st.STARTING, st.FINISHED) and r.not_sharding is None:
            continue
        cause = ""
        if r.status == st.EXITED:
            if causes is None:
                causes = exit_causes(state)
            cause = causes.get(r.rank, "")
        out.extend(rank_alerts(r, cause))
    out.sort(key=lambda a: (a.severity, a.rank))
    return out


def exit_causes(state: st.RunState) -> dict[int, str]:
    """Rank -> first line of its last error event or exit verdict message (the root cause)."""
    out: dict[int, str] = {}
    for m in state.events:
        rank = m.rank
        if rank < 0:
            continue
        if isinstance(m, schema.Event) and m.name in ("error", "exit") and m.message:
            out[rank] = m.message.strip().splitlines()[0]
        elif isinstance(m, schema.Verdict) and m.verdict == "exited" and m.cause:
            out[rank] = m.cause.strip().splitlines()[0]
    return out
