"""A rank's process that torchrun restarts may still be heard from after the restart: its last
steps, its error and its exit were on their way as it died, and the launcher's note of the
restart (from node 0's own supervisor) can reach the hub first. Review 258 killed node 1 of a
two-node job run with --max-restarts 1: node 0's rank 0 failed on the closed connection, torchrun
restarted it, and its last words came after the note. Taken as the new process's, they read as
1,918 lost messages (the new process counts from 0), rank 0's new process, waiting for node 1 in
the rendezvous, read "exited 1", the exit was said twice, and the report's "restarted by torchrun
after:" named rank 0, whose error says only that its peer went.

tests/data/restart_late_words.jsonl is the end of that log (node 0's hub; each rank's messages
numbered again from its hello, as a log of only these would be), in the order the hub took
them: the launcher's note of rank 0's exit (hseq 15) and of its restart (17) before rank 0's own
steps 1875-1876, its error and its exit (18-21), which its clock puts before the notes. The hub's
closing line is the one it wrote then (its count of lost messages included)."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec

from pardash.telemetry import schema
from pardash.telemetry.failures import attempts, recovered_failures
from pardash.telemetry.hub import Hub
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.logreader import read_log
from pardash.telemetry.report import build_report
from pardash.telemetry.state import EXITED, STARTING, RunState

LOG = Path(__file__).parent / "data" / "restart_late_words.jsonl"


def _ranks_words() -> list[schema.Message]:
    """The log's messages as the hub took them from the ranks and the launcher (not its own
    notes and verdicts), unstamped."""
    return [
        msgspec.structs.replace(m, hseq=0)
        for m in read_log(str(LOG))
        if not isinstance(m, schema.Verdict) and not (m.rank < 0 and m.seq < 0)
    ]


def _live_hub() -> HubCore:
    core = HubCore(run_id="20261206-163505-a00a")
    for i, m in enumerate(_ranks_words()):
        assert core.ingest_bytes(schema.encode(m), 100.0 + i), core.rejected
    core.tick(200.0)
    return core


def _said(st: RunState) -> list[tuple[str, int, int]]:
    """The event log's exits, errors and restarts: (name, rank, code)."""
    return [(e.name, e.rank, e.code or 0) for e in st.events if isinstance(e, schema.Event) and e.name in ("exit", "error", "restart")]


def _check(st: RunState, lost: int, *, viewer: bool = False) -> None:
    """What every reader of the run must say of it (``viewer``: one from the hub's snapshot,
    which carries no rank's steps of before its restart)."""
    assert lost == 0  # every message of rank 0's old process is there: none lost
    r0 = st.ranks[0]
    # Restarted and waiting for node 1 in the rendezvous: not its old process's exit
    assert r0.status == STARTING and r0.exit_code is None and r0.awaited
    assert r0.restarts == 1 and r0.step_before == (None if viewer else 1876)  # its old process's last step, heard late
    # The exit said once (the launcher's note), the error too
    assert _said(st) == [("exit", 0, 1), ("restart", 0, 1), ("error", 0, 0)]
    # The attempt torchrun restarted holds rank 0's error and exit; the new one only its restart
    first, now = attempts(st)
    assert [(e.name, e.seq >= 0) for e in first] == [("exit", False), ("error", True), ("exit", True)]
    assert [e.name for e in now] == ["restart"]
    (failed,) = recovered_failures(st)
    assert failed["then"] == "restarted by torchrun" and failed["unrecorded"] == [1]
    assert failed["line"].startswith("the rank that failed first left no exit record (no word from rank 1: killed?), the likely cause; rank 0 exited with code 1 at step 1877 after it")


def test_the_live_hub_takes_the_restarted_processs_late_words_as_its_old_ones():
    core = _live_hub()
    _check(core.state, core.state.lost)
    assert core.stats().lost == 0
    assert core.state.ranks[1].status != EXITED


def test_a_viewer_from_the_hubs_snapshot_says_the_same():
    core = _live_hub()
    snap = core.snapshot()
    st = RunState(run_id=snap.run_id, track_seq=False, t0=snap.t0)
    for m in snap.messages:
        st.apply(m, 0.0)
    _check(st, snap.stats.lost, viewer=True)


def test_a_hub_reading_the_log_back_and_the_report_say_the_same(tmp_path):
    log = tmp_path / "telemetry.jsonl"
    shutil.copy(LOG, log)
    hub = Hub(run_id="20261206-163505-a00a", log_path=str(log))
    try:
        assert hub.recover(now=1000.0) > 0
        _check(hub.core.state, hub.core.state.lost)
    finally:
        hub.close()
    rep = build_report(str(LOG))
    assert rep["lost_messages"] == 0
    assert [(x["rank"], x["status"], x["last_step"]) for x in rep["ranks"]] == [(0, "no exit", 1876), (1, "silent", 1872)]
    assert rep["failure"] is None  # the last attempt's rank 0 has not failed: it waits
    (failed,) = rep["recovered"]
    assert failed["unrecorded"] == [1] and failed["rank"] == 0 and failed["step"] == 1877


def _hello(pid: int, t: float, restart: int = 0) -> schema.Hello:
    return schema.Hello(rank=0, world_size=1, pid=pid, restart=restart, max_restarts=1, strategy="ddp", seq=0, t=t)


def test_late_words_after_the_new_processs_hello_are_the_old_ones():
    # The other order: torchrun's new process said hello (the hub's own note of the restart
    # comes with it) before its old one's last words came. Those are older than its hello.
    st = RunState()
    st.apply(_hello(10, 1.0), 0)
    for i in range(1, 6):
        st.apply(schema.Step(rank=0, seq=i, step=i, step_s=0.1, samples_total=8 * i, t=1.0 + i), 0)
    st.apply(schema.Event(rank=0, seq=-1, name="restart", code=1, message="rank 0 restarted by torchrun (restart 1, pid 11)", t=9.0), 0)
    st.apply(_hello(11, 9.0, restart=1), 0)
    st.apply(schema.Step(rank=0, seq=6, step=6, step_s=0.1, samples_total=48, t=6.5), 0)  # the old process's
    st.apply(schema.Event(rank=0, seq=7, name="exit", code=1, step=7, t=6.6), 0)
    r = st.ranks[0]
    assert r.status == STARTING and r.exit_code is None and r.step is None
    assert r.step_before == 6 and r.samples_before == 48
    assert st.lost == 0
    st.apply(schema.Step(rank=0, seq=1, step=1, step_s=0.1, samples_total=8, t=9.5), 0)  # the new one's first step
    assert r.step is not None and r.step.step == 1 and st.lost == 0
    assert [e.name for e in attempts(st)[0]] == ["exit"] and [e.name for e in attempts(st)[1]] == ["restart"]


def test_a_viewer_takes_such_late_words_from_its_frames_as_the_old_ones_too():
    # A viewer's frames take the short way for steps of a rank it knows: not for these.
    st = RunState(run_id="r", track_seq=False, t0=1.0)
    frames = [
        [_hello(10, 1.0), *(schema.Step(rank=0, seq=i, step=i, step_s=0.1, t=1.0 + i) for i in range(1, 6))],
        [schema.Event(rank=0, seq=-1, name="restart", code=1, message="rank 0 restarted by torchrun (restart 1, pid 11)", t=9.0),
         _hello(11, 9.0, restart=1)],
        [schema.Step(rank=0, seq=6, step=6, step_s=0.1, t=6.5)],  # the old process's, late
    ]  # fmt: skip
    for n, frame in enumerate(frames, 1):
        for m in frame:
            m.run, m.hseq = "r", n * 10 + frame.index(m)
        st.apply_frame(frame, 0.0)
    r = st.ranks[0]
    assert r.step is None and r.step_before == 6 and r.status == STARTING
    assert r.history["step"].values() == [float(s) for s in range(1, 6)]  # (the old steps' chart, not a step 6 of the new process)


def test_a_gap_in_the_old_processs_late_words_is_still_lost():
    st = RunState()
    st.apply(_hello(10, 1.0), 0)
    for i in range(1, 4):
        st.apply(schema.Step(rank=0, seq=i, step=i, step_s=0.1, t=1.0 + i), 0)
    st.apply(schema.Event(rank=0, seq=-1, name="restart", code=1, message="rank 0 restarted by torchrun (restart 1)", t=9.0), 0)
    st.apply(schema.Event(rank=0, seq=6, name="exit", code=1, step=6, t=5.0), 0)  # seq 4 and 5 never came
    assert st.lost == 2
    st.apply(_hello(11, 9.5, restart=1), 0)
    for i in range(1, 3):
        st.apply(schema.Step(rank=0, seq=i, step=i, step_s=0.1, t=9.5 + i), 0)
    assert st.lost == 2 and st.ranks[0].status != EXITED
