"""A rank that hangs in its own work (its forward, backward or optimizer step) while the others
wait for it in a collective is the hang's likely cause, and the root cause when the others'
timeout ends the job; FSDP's forward, which holds its all-gathers, names no cause from the phase
alone. Unit tests of the rule, then one real 2-rank launch (gloo) of a DDP script whose rank 1
hangs in its forward."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import pardash_env
from pardash.telemetry import schema
from pardash.telemetry.analysis import Detector, hang_causes
from pardash.telemetry.logreader import load_log
from pardash.telemetry.report import build_report, render_text
from pardash.telemetry.state import RunState


@pytest.mark.parametrize("phase", ["forward", "backward", "optimizer"])
def test_a_rank_stuck_in_its_own_work_while_the_others_wait_in_a_collective_is_the_cause(phase):
    # ("sync": the phase the automatic instrumentation and the bundled trainer say while a rank
    # waits for the others, in DDP's all-reduce past its own backward or in a collective of the
    # script's own between steps)
    wait = "sync"
    # (It named nobody: "rank 0 stalled in sync, rank 1 stalled in forward", and at the end
    # rank 0, whose timeout ended the wait, was the root cause.)
    assert hang_causes([(0, "stalled", 50, wait), (1, "stalled", 50, phase)]) == {1}
    assert hang_causes([(0, "stalled", 7, phase), (1, "stalled", 7, wait), (2, "stalled", 7, wait)]) == {0}
    # Two stuck in their work, the rest waiting: both named.
    assert hang_causes([(0, "stalled", 7, wait), (1, "stalled", 7, phase), (2, "stalled", 7, phase)]) == {1, 2}


def test_without_a_rank_waiting_in_a_collective_the_forward_backward_and_optimizer_name_nobody():
    # FSDP: the forward holds the all-gathers, the backward the reduce-scatters; a rank stalled
    # in its forward beside others in theirs may wait as they do.
    assert hang_causes([(0, "stalled", 9, "forward"), (1, "stalled", 9, "forward")]) == set()
    assert hang_causes([(0, "stalled", 9, "forward"), (1, "stalled", 9, "backward")]) == set()
    assert hang_causes([(r, "stalled", 9, "backward") for r in range(4)]) == set()
    # "comm" (the simulator's, a script's pt.phase("comm")) beside "backward": nothing says the
    # backward holds no wait of its own.
    assert hang_causes([(0, "stalled", 9, "comm"), (1, "stalled", 9, "backward")]) == set()
    # Every rank waiting: nobody to name.
    assert hang_causes([(0, "stalled", 9, "sync"), (1, "stalled", 9, "sync")]) == set()
    # A phase that may hold collectives of its own (an explicit step block, a checkpoint's
    # load): no cause from it.
    assert hang_causes([(0, "stalled", 9, "sync"), (1, "stalled", 9, "step")]) == set()
    assert hang_causes([(0, "stalled", 9, "sync"), (1, "stalled", 9, "resume")]) == set()
    # The rules before it still come first: a rank behind the others, one in its data.
    assert hang_causes([(0, "stalled", 10, "sync"), (1, "stalled", 9, "forward"), (2, "stalled", 10, "forward")]) == {1}
    assert hang_causes([(0, "stalled", 9, "sync"), (1, "stalled", 9, "forward"), (2, "stalled", 9, "data")]) == {2}
    # A frozen rank (no heartbeat) beside one waiting: the silent one, as before.
    assert hang_causes([(0, "stalled", 9, "sync"), (1, "silent", 9, "forward")]) == {1}


def test_the_hub_says_the_rank_stuck_in_its_forward_first():
    # Both found stalled at one look: the rank the other waits for is said first (it read
    # "rank 0 stalled in sync" first, in rank order).
    st = RunState()
    det = Detector()
    for r in range(2):
        st.apply(schema.Hello(rank=r, world_size=2, strategy="ddp"), 0.0)
        st.apply(schema.Step(rank=r, step=50, step_s=0.01), 0.0)
        st.apply(schema.Heartbeat(rank=r, step=50, phase="sync" if r == 0 else "forward"), 0.0)
    assert det.update(st, 1.0) == []
    for r in range(2):
        st.ranks[r].last_seen = 9.0
    out = det.update(st, 9.5)
    assert [(v.rank, v.verdict, v.cause) for v in out] == [(1, "stalled", "forward"), (0, "stalled", "sync")]


HANGS_IN_ITS_FORWARD = """
import datetime, sys, time
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(sys.argv[1])))
rank = dist.get_rank()


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 1)

    def forward(self, x, step):
        h = torch.relu(self.a(x))
        if rank == 1 and step == 20:
            time.sleep(3600)  # rank 1 hangs in its forward; rank 0 waits in DDP's all-reduce
        return self.b(h)


torch.manual_seed(0)
model = DDP(M())
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(40):
    loss = model(torch.randn(8, 16), step).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_rank_hung_in_its_forward_is_the_root_cause_not_the_rank_whose_timeout_ended_the_job(tmp_path):
    # Rank 1 sleeps in its forward after step 20; rank 0 waits for it in DDP's all-reduce until
    # gloo's timeout raises. It read "rank 0 exited with code 1 at step 21: RuntimeError: Timed
    # out ...; rank 1 was stopped", the report "rank 0 ... - the root cause", and while it hung
    # neither rank was marked the likely cause. (The timeout leaves the hub, which calls a rank
    # stalled 5 s or more after its last step, time to see the hang first, under load too.)
    (tmp_path / "hang.py").write_text(HANGS_IN_ITS_FORWARD)
    log = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "2", "--headless", "--log", str(log),
         "--runs-dir", str(tmp_path / "runs"), "--", "hang.py", "20"],
        capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    msgs = load_log(log)[0]
    stalled = {m.rank: m.cause for m in msgs if isinstance(m, schema.Verdict) and m.verdict == "stalled"}
    assert stalled == {0: "sync", 1: "forward"}, stalled
    # While it hung: the progress line names the rank the others wait for.
    assert "1 stalled, 1 waiting | likely waiting for rank 1" in proc.stdout, proc.stdout[-3000:]
    # At the end: the launcher's last line, and the report.
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "pardash: rank 1 stalled in forward after step 20 (the likely cause of the hang); "
        "rank 0 exited with code 1 at step 21 waiting for it: RuntimeError: Timed out waiting 20000ms"
    ), last
    rep = build_report(str(log))
    assert rep["failure"]["waited_for"] == [{"rank": 1, "kind": "stalled", "step": 20, "phase": "forward"}]
    assert {e["rank"]: e["role"] for e in rep["exits"]} == {0: "waited", 1: "hung"}
    text = render_text(rep)
    assert "rank 1 stalled in forward after step 20 for " in text and "; likely the cause of the hang" in text
    assert "rank 0 exited with code 1 at step 21 - failed waiting for the hung rank(s)" in text


def test_a_sharded_runs_forward_and_backward_hold_collectives_and_name_nobody_beside_a_wait():
    # Review 274: FSDP2, rank 0 alone calling an extra all_reduce after step 20 (a "log on rank
    # 0" bug): rank 0 "stalled in sync", rank 1 blocked in FSDP's all-gather of its next
    # forward, "stalled in forward", and rank 1 was named the hang's root cause.
    for phase in ("forward", "backward"):
        assert hang_causes([(0, "stalled", 20, "sync"), (1, "stalled", 20, phase)], sharded=True) == set()
    # Its optimizer step holds no collective (each rank steps its own shard): still its own work.
    assert hang_causes([(0, "stalled", 20, "sync"), (1, "stalled", 20, "optimizer")], sharded=True) == {1}
    # What the outputs take it from: the run's strategy (the ranks' hello).
    from pardash.telemetry.printer import hang_text
    from pardash.telemetry.causes import cause_ranks

    for strategy, named in (("fsdp", ""), ("ddp", "likely waiting for rank 1")):
        st = RunState()
        for r in (0, 1):
            st.apply(schema.Hello(run="x", rank=r, seq=0, world_size=2, strategy=strategy, t=1.0), 1.0)
            st.apply(schema.Step(run="x", rank=r, seq=1, step=20, step_s=0.1, samples=4, t=2.0), 2.0)
        for r, phase in ((0, "sync"), (1, "forward")):
            st.apply(schema.Verdict(run="x", rank=r, seq=-1, verdict="stalled", cause=phase, step=20, message=f"rank {r} stalled", t=8.0), 8.0)
        assert hang_text(st) == named, strategy
        assert cause_ranks(st, None) == (frozenset() if strategy == "fsdp" else frozenset({1})), strategy


GLOO_TIMEOUT = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
                "waiting 20000ms for recv operation to complete")  # fmt: skip


def _timed_out(strategy: str, world: int, timed_out: set[int], phase: str = "forward", phases: dict[int, str] | None = None) -> RunState:
    """A job of ``world`` ranks that hung after step 60, every rank stalled in ``phase``: the
    ranks ``timed_out`` raised a collective's timeout (rank 0 first), torchrun stopped the rest."""
    st = RunState()
    for r in range(world):
        st.apply(schema.Hello(run="x", rank=r, seq=0, world_size=world, strategy=strategy, t=1.0), 1.0)
        st.apply(schema.Step(run="x", rank=r, seq=1, step=60, step_s=0.1, samples=4, t=2.0), 2.0)
    for r in range(world):
        cause = (phases or {}).get(r, phase)
        st.apply(schema.Verdict(run="x", rank=r, seq=-1, verdict="stalled", cause=cause, step=60, message=f"rank {r} stalled", t=8.0), 8.0)
    seq = 2
    for r in sorted(timed_out):
        st.apply(schema.Event(run="x", rank=r, seq=seq, name="error", message=GLOO_TIMEOUT, step=60, t=22.0 + r), 22.0 + r)
        st.apply(schema.Event(run="x", rank=r, seq=seq + 1, name="exit", code=1, step=61, t=22.0 + r), 22.0 + r)
    for r in range(world):
        if r not in timed_out:
            st.apply(schema.Event(run="x", rank=r, seq=-1, name="exit", code=-15, message="stopped by torchrun", t=23.0), 23.0)
    return st


@pytest.mark.parametrize("strategy", ["tp", "single"])  # (a pipeline's ranks say "single")
def test_a_timeout_beside_one_rank_that_raised_nothing_names_that_rank_where_the_phases_cannot(strategy):
    # Review 276: tensor parallel (its all-reduces in every rank's forward) and a pipeline (its
    # sends there too), rank 1 asleep in its forward: "ranks 0-1 stalled in forward", then rank
    # 0's timeout, "the root cause". The rank that timed out waited; the one that raised nothing,
    # stopped by torchrun, is what it waited for.
    from pardash.telemetry.failures import failure_summary

    f = failure_summary(_timed_out(strategy, 2, {0}), hang=[(r, "stalled", 60, "forward") for r in (0, 1)])
    assert f["rank"] == 0 and f["waited_for"] == [{"rank": 1, "kind": "stalled", "step": 60, "phase": "forward"}], f
    assert f["line"].startswith("rank 1 stalled in forward after step 60 (the likely cause of the hang); rank 0 exited with code 1 "
                                "at step 61 waiting for it"), f["line"]  # fmt: skip
    # Four ranks, the others' timeouts in before torchrun stopped them: the one left.
    f = failure_summary(_timed_out(strategy, 4, {0, 1, 3}), hang=[(r, "stalled", 60, "forward") for r in range(4)])
    assert [w["rank"] for w in f["waited_for"]] == [2], f
    # Two or more that raised nothing (torchrun stopped them before their own timeouts): any of
    # them may be it, none named.
    f = failure_summary(_timed_out(strategy, 4, {0}), hang=[(r, "stalled", 60, "forward") for r in range(4)])
    assert f["waited_for"] == [] and f["line"].startswith("rank 0 exited with code 1 at step 61"), f["line"]


def test_a_timeout_of_the_ranks_own_work_names_no_peer():
    # Review 280: "RuntimeError: DataLoader timed out after 60 seconds" (rank 0 in its data, rank 1
    # waiting in sync) named rank 1 "the likely cause of the hang". Only a collective's own
    # timeout is a wait for a peer, and a rank itself waiting in a collective is nobody's cause.
    from pardash.telemetry.failures import failure_summary

    st = _timed_out("tp", 2, {0}, phases={0: "data", 1: "sync"})
    for m in st.lifecycle:
        if m.name == "error":
            m.message = "RuntimeError: DataLoader timed out after 60 seconds"
    f = failure_summary(st)
    assert f["waited_for"] == [] and f["line"].startswith("rank 0 exited with code 1 at step 61: RuntimeError: DataLoader timed out"), f["line"]
    f = failure_summary(_timed_out("tp", 2, {0}, phases={0: "forward", 1: "sync"}))
    assert f["waited_for"] == [], f["line"]
