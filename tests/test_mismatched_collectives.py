"""A hang of mismatched collectives (review 335): rank 0 out of its loop in a final barrier,
rank 1 in its next step's gradient all-reduce. Each waits for a collective the other never calls;
neither is slow, and nothing returns until the process group's timeout. Every rank read "stalled
in sync after step 40" and no cause was named; the last line named whichever rank timed out
first. Each rank's heartbeat now says the collective it waits in (``Heartbeat.waits_in``), its
stall says it, and the hang is said to be one of different collectives."""

from __future__ import annotations

import subprocess
import sys

from helpers import free_ports, pardash_env

from pardash.telemetry import schema
from pardash.telemetry.analysis import Detector, collectives_words, different_collectives, stuck_ranks
from pardash.telemetry.printer import hang_text
from pardash.telemetry.state import RunState

T = 1_800_000_000.0
BARRIER, ALL_REDUCE = "barrier", "DDP's gradient all-reduce"


def _hung(waits: dict[int, str], phases: dict[int, str] | None = None, strategy: str = "ddp") -> RunState:
    """Two ranks that took steps 1-40 together, then each beat for 20 s in phase "sync"
    (``phases``) waiting in ``waits[rank]``, judged by a hub's detector as they went."""
    st, det = RunState(), Detector()
    for r in (0, 1):
        st.apply(schema.Hello(rank=r, world_size=2, strategy=strategy, t=T), T)
    t = T
    for s in range(1, 41):
        t += 0.03
        for r in (0, 1):
            msg = schema.Step(rank=r, step=s, seq=s, t=t, step_s=0.03, self_s=0.02, comm_s=0.005)
            st.apply(msg, t)
            det.stragglers.observe(msg)
        for v in det.update(st, t):
            st.apply(v, t)
    for k in range(1, 21):
        now = t + k
        for r in (0, 1):
            phase = (phases or {}).get(r, "sync")
            st.apply(schema.Heartbeat(rank=r, step=40, seq=100 + k, phase=phase, phase_s=k, waits_in=waits.get(r, "") if phase == "sync" else "", t=now), now)
        for v in det.update(st, now):
            st.apply(v, now)
    return st


def test_ranks_waiting_in_different_collectives_are_said_so():
    st = _hung({0: BARRIER, 1: ALL_REDUCE})
    assert [(r.stalled.waits_in, r.stalled.message.split(" (")[0]) for r in st.ranks.values()] == [
        (BARRIER, "rank 0 stalled in sync"), (ALL_REDUCE, "rank 1 stalled in sync")]  # fmt: skip
    assert st.ranks[0].stalled.message.startswith("rank 0 stalled in sync (barrier) after step 40")
    apart = different_collectives(st, stuck_ranks(st))
    assert apart == [(0, BARRIER), (1, ALL_REDUCE)]
    said = "in different collectives (rank 0 in barrier, rank 1 in DDP's gradient all-reduce): a collective some ranks never call"
    assert collectives_words(apart) == said
    assert hang_text(st) == said  # (the live progress line's)


def test_ranks_waiting_in_the_same_collective_or_in_their_own_work_are_not():
    # Every rank in the same collective: a hang of another kind (nothing tells them apart)
    st = _hung({0: ALL_REDUCE, 1: ALL_REDUCE})
    assert different_collectives(st, stuck_ranks(st)) == [] and hang_text(st) == ""
    # One rank in its own work (its data): it is the cause, as before
    st = _hung({0: ALL_REDUCE}, phases={1: "data"})
    assert different_collectives(st, stuck_ranks(st)) == []
    assert hang_text(st) == "likely waiting for rank 1"
    # A rank whose hooks did not say where it waits: nothing is claimed
    st = _hung({0: BARRIER, 1: ""})
    assert different_collectives(st, stuck_ranks(st)) == []
    # A pipeline's stages wait in sends and receives of their own, by design
    st = _hung({0: "send", 1: "recv"}, strategy="pp")
    assert different_collectives(st, stuck_ranks(st)) == []


def test_the_alerts_and_the_report_say_it(tmp_path):
    from pardash.telemetry.report import build_report
    from pardash.telemetry.report_render import stall_lines
    from pardash.tui.alerts import run_alerts

    st = _hung({0: BARRIER, 1: ALL_REDUCE})
    alerts = run_alerts(st)
    assert [(a.rank, a.first) for a in alerts] == [(0, True), (1, False)]
    assert alerts[0].text.endswith("stalled in sync (barrier) after step 40; ranks 0-1 wait in different collectives "
                                   "(rank 0 in barrier, rank 1 in DDP's gradient all-reduce): a collective some ranks never call"), alerts[0].text  # fmt: skip
    assert "stalled in sync (DDP's gradient all-reduce) after step 40" in alerts[1].text
    # The report, of the log the hub keeps (its verdicts carry the collective)
    log = tmp_path / "run.jsonl"
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, strategy="ddp", t=T) for r in (0, 1)]
    records += [schema.Step(run="r", rank=r, seq=s, step=s, samples=8, t=T + s * 0.03, step_s=0.03) for s in range(1, 41) for r in (0, 1)]
    records += [schema.Verdict(run="r", rank=r, seq=-1, verdict="stalled", cause="sync", step=40, t=T + 6, waits_in=w,
                               message=f"rank {r} stalled in sync ({w}) after step 40 (5 s without progress)")
                for r, w in ((0, BARRIER), (1, ALL_REDUCE))]  # fmt: skip
    log.write_bytes(schema.encode_json_lines(records))
    lines = stall_lines(build_report(str(log)))
    assert sorted(line.split(" for ")[0] for line in lines) == ["rank 0 stalled in sync (barrier) after step 40",
                                                                "rank 1 stalled in sync (DDP's gradient all-reduce) after step 40"], lines


MISMATCHED = """
import datetime, time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=12))
rank = dist.get_rank()
model = DDP(torch.nn.Linear(8, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(20 if rank == 0 else 21):  # rank 0 runs out of batches one step early
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    time.sleep(0.01)
dist.barrier()  # rank 0 here, rank 1 in its step 21's all-reduce: neither returns
dist.destroy_process_group()
"""


def test_a_real_job_hung_in_mismatched_collectives_says_so_in_its_last_line(tmp_path):
    script = tmp_path / "mismatched.py"
    script.write_text(MISMATCHED)
    hub, _, _, master = free_ports(4)
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "2", "--headless", "--runs-dir", str(tmp_path / "runs"),
         "--telemetry-port", str(hub), "--master-port", str(master), "--", str(script)],
        capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "[stalled] rank 0 stalled in sync (barrier) after step 20" in out, out[-3000:]
    assert "[stalled] rank 1 stalled in sync (DDP's gradient all-reduce) after step 20" in out, out[-3000:]
    last = [line for line in out.splitlines() if line.startswith("pardash: ")][-1]
    assert last.startswith("pardash: ranks 0-1 hung in different collectives (rank 0 in barrier, rank 1 in DDP's gradient "
                           "all-reduce): a collective some ranks never call; rank "), last  # fmt: skip
    # The TUI's alerts of the job as it ended: the mismatch first, no rank called the root cause
    from pardash.telemetry.logreader import read_log
    from pardash.tui.alerts import run_alerts

    [log] = (tmp_path / "runs").glob("*/telemetry.jsonl")
    st = RunState()
    for m in read_log(log):
        st.apply(m, m.t)
    alerts = run_alerts(st)
    assert alerts[0].first and alerts[0].rank == 0, alerts
    assert alerts[0].text.endswith("; ranks 0-1 hung in different collectives (rank 0 in barrier, rank 1 in DDP's gradient "
                                   "all-reduce): a collective some ranks never call"), alerts[0].text  # fmt: skip
    assert not any("root cause" in a.text for a in alerts), alerts
    # ...and the report's exit lines (its root cause line is the last line's)
    from pardash.telemetry.report import build_report
    from pardash.telemetry.report_render import exit_lines

    lines = exit_lines(build_report(str(log)))
    assert not any("root cause" in line for line in lines), lines
    assert sum(line.endswith(" - timed out first, in a collective the others never called") for line in lines) == 1, lines
