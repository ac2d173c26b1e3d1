"""Where a rank finds the hub and who it is, from the environment any launcher sets.

Ranks learn their identity from torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK)
or Slurm's (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NODEID), and the hub from
``PARDASH_ENDPOINT``; ``PARDASH_TELEMETRY=0`` switches publishing off.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

ENDPOINT_VAR = "PARDASH_ENDPOINT"
RUN_ID_VAR = "PARDASH_RUN_ID"
TELEMETRY_VAR = "PARDASH_TELEMETRY"
LINE_BUFFERED_VAR = "PARDASH_LINE_BUFFERED"
SUPERVISOR_VAR = "PARDASH_SUPERVISOR"
"""The supervisor's pid, in the job's environment: which processes are this node's of the job,
and that ``pardash launch`` notes how each rank ended."""
"""Set by ``pardash launch`` where it made the ranks unbuffered (PYTHONUNBUFFERED): a script
run by autorun then prints line by line instead, as to a terminal."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankIdentity:
    """Who this process is in the job."""

    rank: int
    """Global rank."""
    local_rank: int
    """Rank on this node."""
    world_size: int
    """Number of ranks in the job."""
    node: int
    """Node rank."""
    host: str
    """Host name."""
    restart: int
    """How many times torchrun restarted the workers."""
    max_restarts: int = 0
    """torchrun's --max-restarts (TORCHELASTIC_MAX_RESTARTS): a failed attempt before the last
    is started again."""


def _int(env: dict[str, str], *names: str, default: int) -> int:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                continue
    return default


def rank_identity(env: dict[str, str] | None = None) -> RankIdentity:
    """Read the rank's identity from torchrun's or Slurm's variables (rank 0 of 1 if neither)."""
    env = dict(os.environ) if env is None else env
    return RankIdentity(
        rank=_int(env, "RANK", "SLURM_PROCID", "PMI_RANK", default=0),
        local_rank=_int(env, "LOCAL_RANK", "SLURM_LOCALID", default=0),
        world_size=_int(env, "WORLD_SIZE", "SLURM_NTASKS", "PMI_SIZE", default=1),
        node=_int(env, "GROUP_RANK", "SLURM_NODEID", default=0),
        host=socket.gethostname(),
        restart=_int(env, "TORCHELASTIC_RESTART_COUNT", default=0),
        max_restarts=_int(env, "TORCHELASTIC_MAX_RESTARTS", default=0),
    )


def telemetry_switched_off(env: dict[str, str] | None = None) -> bool:
    """True when PARDASH_TELEMETRY is 0/false/off/no."""
    env = os.environ if env is None else env
    return env.get(TELEMETRY_VAR, "1").strip().lower() in ("0", "false", "off", "no")


def telemetry_enabled(env: dict[str, str] | None = None) -> bool:
    """False when PARDASH_TELEMETRY is 0/false/off or no endpoint is set."""
    env = os.environ if env is None else env
    return not telemetry_switched_off(env) and bool(env.get(ENDPOINT_VAR))
