"""A launched job's processes, seen from outside: which of this node's processes are the job's
(torchrun, its ranks, their data loader workers, wherever they were reparented), whether its
supervisor still lives, and how to stop them as the supervisor would. The supervisor stops its
own job with these; ``pardash stop`` and a launcher whose supervisor was killed outright stop a
job that has none left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from pardash.telemetry import schema, security
from pardash.telemetry.env import RUN_ID_VAR, SUPERVISOR_VAR  # noqa: F401  (SUPERVISOR_VAR: the job's, here)
STOP_GRACE_S = 10.0
"""Seconds torchrun and its ranks get after SIGTERM before SIGKILL."""


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_job(proc: subprocess.Popen) -> None:
    """SIGKILL torchrun and its ranks. torchrun starts each rank in a session of its own, which
    a signal to torchrun's process group does not reach: a rank that SIGTERM did not end (its
    own handler waiting on a collective that never returns, a rank stopped with SIGSTOP)
    outlived the stop, orphaned, holding its memory. Each rank's group goes too (its data
    loader workers)."""
    try:
        ranks = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        ranks = []
    for p in ranks:
        _signal_process_group(p, signal.SIGKILL, also=proc.pid)
    _signal_group(proc, signal.SIGKILL)


def _signal_process_group(p: psutil.Process, sig: int, also: int = -1) -> None:
    """``sig`` to ``p`` and its process group (a rank's: its data loader workers), unless
    that group is this process's or ``also``'s."""
    try:
        group = os.getpgid(p.pid)
        if group not in (os.getpgrp(), also):
            os.killpg(group, sig)  # (``p`` among them: a SIGTERM sent twice may cut its handler short)
        else:
            p.send_signal(sig)
    except (OSError, psutil.Error):
        pass  # gone already


def job_processes(supervisor_pid: int, run_id: str) -> list[psutil.Process]:
    """This node's processes of a launched job still running (torchrun, its ranks, their data
    loader workers), wherever they were reparented: found by the environment its supervisor
    gave them (the supervisor's pid and the run id: another node's, in the same PID namespace,
    have another supervisor; a pid used again by another program has neither), never this
    process or its parents."""
    me = psutil.Process()
    skip = {me.pid, *(p.pid for p in me.parents())}
    want = (str(supervisor_pid), run_id)
    found = []
    for p in psutil.process_iter():
        if p.pid in skip:
            continue
        try:
            env = p.environ()
            if (env.get(SUPERVISOR_VAR), env.get(RUN_ID_VAR)) == want and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue  # gone, or another user's
    return found


def torchrun_of(procs: list[psutil.Process]) -> psutil.Process | None:
    """torchrun among a job's processes (as :func:`job_processes` finds them), if it is there."""
    found = {p.pid for p in procs}
    return next((p for p in procs if _parent_pid(p) not in found and _is_torchrun(p)), None)


def still_running(p: psutil.Process) -> bool:
    """Whether ``p`` runs still: not ended, not a zombie, its pid not given to another program."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def supervisor_alive(pid: int, run_id: str) -> bool:
    """Whether ``pid`` is the supervisor of run ``run_id``, running (not a pid the system gave
    another program since the supervisor died: a signal meant for the job must not reach it)."""
    try:
        p = psutil.Process(pid)
        line = p.cmdline()
        return p.status() != psutil.STATUS_ZOMBIE and "pardash.trainer.supervisor" in line and any(run_id in a for a in line)
    except psutil.Error:
        return False


def hub_push(ingest: str, curve_dir: str | None):
    """A PUSH socket to a hub's ingest for a launcher's notes (with the client keys when the hub
    has CURVE keys)."""
    import zmq

    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 2000)
    try:
        keys = security.client_keys(curve_dir or None)
    except security.CurveKeyError as exc:
        print(f"pardash: {exc}", file=sys.stderr, flush=True)
        keys = None
    if keys is not None:
        keys.apply(push)
    security.allow_ipv6(push, ingest)
    push.connect(ingest)
    return push


def stop_unsupervised(supervisor_pid: int, run_id: str, *, hub_pid: int = 0, ingest: str = "", curve_dir: str | None = None,
                      who: str = "by a viewer", grace_s: float = STOP_GRACE_S) -> int:  # fmt: skip
    """Stop a job whose supervisor is gone (killed outright: SIGKILL, the OOM killer), as the
    supervisor would have: SIGTERM to torchrun, which stops its ranks (to each rank's process
    group when torchrun is gone too), SIGKILL to what is left after ``grace_s``; the ranks'
    exits told to the hub at ``ingest`` ("stopped ``who``", as the supervisor tells them); then
    SIGTERM to its hub (``hub_pid``, when it is that run's), which writes the log to its end and
    stops (left alone, it waited 30 s for a restart that nothing would make). Returns how many of
    the job's processes there were (0: nothing of it runs on this machine)."""
    procs = job_processes(supervisor_pid, run_id)
    if procs:
        ranks = sorted({r for r in map(_rank_of, procs) if r is not None})  # (torchrun has none of its own)
        _stop_job_processes(procs, grace_s)
        if ingest and ranks:
            push = hub_push(ingest, curve_dir)
            for rank in ranks:  # (the hub takes these only for a rank that has not said it itself)
                msg = schema.Event(run=run_id, rank=rank, seq=-1, t=time.time(), name="exit", code=-signal.SIGTERM,
                                   message=f"stopped {who} (its supervisor was gone)")  # fmt: skip
                push.send(schema.encode(msg))
            push.close()
    if hub_pid and is_hub_of(hub_pid, run_id):
        try:
            hub = psutil.Process(hub_pid)
            hub.send_signal(signal.SIGTERM)
            hub.wait(10)
        except psutil.TimeoutExpired:
            _send(hub, signal.SIGKILL)
        except psutil.Error:
            pass
    return len(procs)


def _stop_job_processes(procs: list[psutil.Process], grace_s: float) -> None:
    """SIGTERM to torchrun among ``procs`` (a job's), else to each of its ranks' process groups
    (their data loader workers with them); SIGKILL to the groups of what is left after ``grace_s``."""
    found = {p.pid for p in procs}
    # torchrun: the job's process whose parent is not of the job (the ranks are its children).
    tops = [p for p in procs if _parent_pid(p) not in found]
    runner = [p for p in tops if _is_torchrun(p)]
    if runner:
        for p in runner:
            _send(p, signal.SIGTERM)
    else:  # torchrun died: each rank's group
        for p in tops:
            _signal_process_group(p, signal.SIGTERM)
    _, left = psutil.wait_procs(procs, timeout=grace_s)
    for p in left:
        _signal_process_group(p, signal.SIGKILL)
    psutil.wait_procs(left, timeout=5)


def _rank_of(p: psutil.Process) -> int | None:
    """The global rank torchrun gave ``p`` (a rank, or its data loader worker), if any."""
    try:
        return None if _is_torchrun(p) else int(p.environ()["RANK"])
    except (psutil.Error, KeyError, ValueError):
        return None


def is_hub_of(pid: int, run_id: str) -> bool:
    try:
        line = psutil.Process(pid).cmdline()
    except psutil.Error:
        return False
    return "pardash.telemetry.hub" in line and run_id in line


def _parent_pid(p: psutil.Process) -> int:
    try:
        return p.ppid()
    except psutil.Error:
        return -1


def _is_torchrun(p: psutil.Process) -> bool:
    try:
        line = p.cmdline()
    except psutil.Error:
        return False
    return any(a in ("pardash.trainer.torchrun", "torch.distributed.run") for a in line) or bool(line) and os.path.basename(line[0]) == "torchrun"


def _send(p: psutil.Process, sig: int) -> None:
    try:
        p.send_signal(sig)
    except psutil.Error:
        pass


__all__ = ["STOP_GRACE_S", "SUPERVISOR_VAR", "hub_push", "job_processes", "still_running", "stop_unsupervised", "supervisor_alive",
           "torchrun_of"]
