"""Which ranks a failure or a hang started from, as the TUI's alerts and grid, the launcher's
last line and `pardash ps` name them (from the run's state: :func:`failures.failure_summary`,
the hang's stuck ranks)."""

from __future__ import annotations

from .analysis import hang_causes, stuck_ranks, whole_hang
from .failures import failure_summary
from .state import RunState
from .summary import is_sharded


def cause_rank(state: RunState) -> int | None:
    """The rank whose exit caused the others', as the report and the launcher's last line name
    it (a signal death, then a rank's own error, before the ranks that failed on its closed
    connection or were stopped); None when no rank did (every one was stopped). Not the first
    exit heard: the hub takes from each rank in turn, so a rank torchrun stopped may be heard
    from before the one that failed. None too where ranks all failed alike (the same error
    at the same step: a resume none of whose checkpoints could be read): no rank's failure
    caused the others', and the failure line names them together ("ranks 0-1 exited with
    code 1: ..."); the lowest of them marked the first exit read as the others failing after it."""
    return cause_of(failure_summary(state))


def cause_of(f: dict | None) -> int | None:
    """:func:`cause_rank` of the run's failure summary ``f`` (None: no failure)."""
    if f is not None and (f.get("alike") or f.get("collectives")):
        # (ranks hung in different collectives: the mismatch is the cause, no rank of them)
        return None
    if f is not None and f["waited_for"]:
        # The rank whose hang the failing one timed out waiting for; several: none here, the
        # hang's own marks name them (run_alerts)
        return f["waited_for"][0]["rank"] if len(f["waited_for"]) == 1 else None
    if f is None or f["left_early"] or f.get("stopped_first"):
        # A rank that left the job early (exit 0), or one stopped first (another node's launch
        # stopped), broke its peers' collectives: no victim is the cause.
        return None
    if f.get("unrecorded"):
        # Its error says only that a peer went, and ranks left no word (killed with their
        # node): the likely cause is the silent one, as the failure line names it.
        return f["unrecorded"][0] if len(f["unrecorded"]) == 1 else None
    return f["rank"]


def cause_ranks(state: RunState, first: int | None) -> frozenset[int]:
    """The ranks a failure or a hang most likely started from, as the alerts and the
    launcher's last line name them: ``first`` (:func:`cause_rank`, when a rank exited: the one
    whose exit caused the others', or the stalled rank their failure waited for); else the
    ranks a hang going on waits for; else those of the hang the run was stopped in (empty:
    no failure, or nothing tells its ranks apart)."""
    if first is not None:
        return frozenset((first,))
    sharded = is_sharded(state.strategy)
    causes = hang_causes(stuck_ranks(state), sharded=sharded)
    if not causes:
        causes = hang_causes(whole_hang(state), sharded=sharded)
    return frozenset(causes)


def waited_for(state: RunState) -> frozenset[int]:
    """The ranks the stalled ranks of a hang going on wait for, as the grid marks them (the
    likely causes, :func:`cause_ranks`, while no rank alive makes progress); empty otherwise."""
    if not stuck_ranks(state):  # (some rank alive makes progress, or none is stuck)
        return frozenset()
    exited = any(r.exit_code is not None for r in state.ranks.values())
    return cause_ranks(state, cause_rank(state) if exited else None)


def waiting_count(state: RunState, counts: dict[str, int] | None = None) -> int:
    """Of a hang going on (every rank alive stalled or silent), the stalled ranks that wait for
    its likely cause, as the TUI draws them (◇ "waiting", the cause ◆ "stalled"): `ps` and the
    headless lines said "2 stalled" of a hang the TUI showed as 1 stalled, 1 waiting. 0
    otherwise. ``counts``: the ranks by status, where the caller has them."""
    from .state import STALLED

    if counts is not None and not counts.get(STALLED):
        return 0
    causes = waited_for(state)
    if not causes:
        return 0
    return sum(1 for r in state.ranks.values() if r.status == STALLED and r.rank not in causes)
