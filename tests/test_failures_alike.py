"""Where the failure line, the report's exits and the TUI tell one failure alike (review 186's
line, told the same everywhere): a rank killed while saving its checkpoint died at the step it
saved, in the exit the hub keeps (the alerts', a restarted attempt's) as in the line; ranks
that all failed of the same error are each the cause in the report's exits, and no one of them
is marked the first exit in the TUI. A hub's state fed encoded frames; the report and the TUI
read a small log as a user's would."""

from __future__ import annotations

from pardash.telemetry import schema
from pardash.telemetry.client import ReplaySource
from pardash.telemetry.failures import failure_summary, recovered_failures
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.report import build_report, render_text
from pardash.tui.alerts import run_alerts

RUN = "r"
T = 1.0e9
GLOO = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
        "[127.0.0.1]:29382: Connection reset by peer")  # fmt: skip
UNREADABLE = ("resume: no checkpoint in /ckpt can be read on every rank (tried /ckpt/step-20: rank 0: "
              "unexpected EOF)")  # fmt: skip
KILLED = "killed by signal 9 (SIGKILL)"


def _hub(steps: int = 4):
    """A hub of a DDP job of two ranks, both at ``steps``; and a send(msg, t) that gives it a
    frame as it came (each rank's own seq; the launcher's notes seq -1)."""
    core = HubCore(run_id=RUN, world_size=2)
    seq = {0: 0, 1: 0}

    def send(msg: schema.Message, t: float) -> None:
        msg.run, msg.t = RUN, t
        if msg.seq != -1:
            if isinstance(msg, schema.Hello) and msg.restart:
                seq[msg.rank] = 0  # (a new process counts its messages anew)
            msg.seq, seq[msg.rank] = seq[msg.rank], seq[msg.rank] + 1
        core.ingest_bytes(schema.encode(msg), t - T)

    for r in (0, 1):
        send(schema.Hello(rank=r, world_size=2, pid=100 + r, strategy="ddp", source="trainer"), T)
    for s in range(1, steps + 1):
        for r in (0, 1):
            send(schema.Step(rank=r, step=s, step_s=0.01, samples=8, loss=1.0), T + s / 100)
    return core, send


def _killed_saving(send, t: float = T + 1.0) -> None:
    """Both ranks save the checkpoint of step 4; rank 1 is killed in its save (the OOM killer),
    rank 0's collective fails on its closed socket."""
    for r in (0, 1):
        send(schema.Heartbeat(rank=r, step=4, phase="checkpoint", phase_s=0.5), t)
    send(schema.Event(rank=1, seq=-1, name="exit", code=-9, message=KILLED), t + 0.2)
    send(schema.Event(rank=0, name="error", step=4, message=GLOO), t + 0.21)
    send(schema.Event(rank=0, name="exit", code=1, step=4), t + 0.22)


def _stored_exit(core: HubCore, rank: int) -> schema.Event:
    return [e for e in core.state.lifecycle if isinstance(e, schema.Event) and e.name == "exit" and e.rank == rank][-1]


def test_a_rank_killed_in_its_save_is_kept_as_dead_at_the_step_it_saved():
    # The line said "at step 4 while saving a checkpoint"; the exit the hub kept (its alert's
    # step, a restarted attempt's failure) said step 5, a step that never began.
    core, send = _hub()
    _killed_saving(send)
    assert failure_summary(core.state)["line"].startswith("rank 1 exited with code -9 (SIGKILL) at step 4 while saving")
    assert _stored_exit(core, 1).step == 4
    [cause] = [a for a in run_alerts(core.state) if a.first]
    assert cause.text == "rank 1, the root cause, exited with code -9 at step 4: " + KILLED, cause.text
    # torchrun restarts the job: the failure it recovered from, told from the exit kept.
    for r in (0, 1):
        send(schema.Event(rank=r, seq=-1, name="restart", code=1, message=f"rank {r} restarted by torchrun"), T + 2.0)
        send(schema.Hello(rank=r, world_size=2, pid=200 + r, strategy="ddp", source="trainer", restart=1), T + 2.1)
    [f] = recovered_failures(core.state)
    assert f["line"].startswith("rank 1 exited with code -9 (SIGKILL) at step 4; rank 0 failed after it"), f["line"]


def test_a_rank_killed_after_its_save_is_kept_as_dead_in_the_next_step():
    # Out of its save (its event said so), or its last heartbeat before its last step: it died
    # in the step after its last, as before.
    core, send = _hub()
    send(schema.Heartbeat(rank=1, step=4, phase="checkpoint", phase_s=0.5), T + 1.0)
    send(schema.Event(rank=1, name="checkpoint", step=4, message="/ckpt/step-4", duration_s=0.6), T + 1.1)
    send(schema.Event(rank=1, seq=-1, name="exit", code=-9, message=KILLED), T + 1.2)
    assert _stored_exit(core, 1).step == 5
    core, send = _hub(steps=3)
    send(schema.Heartbeat(rank=1, step=3, phase="eval", phase_s=0.5), T + 1.0)
    send(schema.Step(rank=1, step=4, step_s=0.01, samples=8, loss=1.0), T + 1.1)
    send(schema.Event(rank=1, seq=-1, name="exit", code=-9, message=KILLED), T + 1.2)
    assert _stored_exit(core, 1).step == 5
    assert failure_summary(core.state)["line"] == "rank 1 exited with code -9 (SIGKILL) at step 5"


def _alike_log(path) -> None:
    """Two DDP ranks whose resume finds no checkpoint it can read: both raise the same error
    before their first step and exit with code 1, rank 1's first (the hub keeps no note of
    torchrun's of an exit its rank said)."""
    msgs: list[schema.Message] = [schema.Hello(rank=r, world_size=2, pid=100 + r, strategy="ddp", source="trainer")
                                  for r in (0, 1)]  # fmt: skip
    for r in (1, 0):
        msgs += [schema.Event(rank=r, name="error", message=UNREADABLE), schema.Event(rank=r, name="exit", code=1)]
    seq = {0: 0, 1: 0}
    for h, m in enumerate(msgs, 1):
        m.run, m.t, m.hseq = RUN, T + h / 100, h
        if m.seq != -1:
            m.seq, seq[m.rank] = seq[m.rank], seq[m.rank] + 1
    path.write_bytes(schema.encode_json_lines(msgs))


def test_ranks_that_failed_alike_are_each_the_cause_in_the_reports_exits(tmp_path):
    # "ranks 0-1 exited with code 1: resume: ..." above an exits table that read "rank 0
    # exited with code 1 - the root cause" and "rank 1 exited with code 1", as if rank 1 had
    # failed of rank 0's failure.
    log = tmp_path / "alike.jsonl"
    _alike_log(log)
    rep = build_report(str(log))
    assert rep["failure"]["alike"] == [0, 1]
    assert {e["rank"]: e["role"] for e in rep["exits"]} == {0: "cause", 1: "cause"}
    text = render_text(rep)
    assert "ranks 0-1 exited with code 1 - the root cause" in text, text
    assert "rank 1 exited with code 1\n" not in text + "\n" and "rank 0 exited" not in text, text


async def test_ranks_that_failed_alike_are_no_one_first_exit_in_the_tui(tmp_path):
    # The grid drew rank 0 as the first exit (reverse ×) and its alert read "rank 0, the root
    # cause, exited with code 1", under a failure line that names ranks 0-1 together.
    from pardash.tui.app import make_app
    from pardash.tui.widgets.alert_list import AlertList

    log = tmp_path / "alike.jsonl"
    _alike_log(log)
    src = ReplaySource(str(log))
    src.seek(src.duration_s)
    src.paused = True
    app = make_app(src)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        alerts = app.screen.query_one(AlertList).alerts
        assert sorted(a.rank for a in alerts if a.kind == "exited") == [0, 1], alerts
        assert not any(a.first or "root cause" in a.text for a in alerts), alerts
        assert {a.text for a in alerts} == {f"rank {r} exited with code 1: {UNREADABLE}" for r in (0, 1)}, alerts
        rows = app.screen._rows
        assert [rows.heat_key(r)[2] for r in (0, 1)] == [None, None]  # (no exit marked first, none after it)
