"""Review 245's catches in the alerts: a lost node's stopped ranks, the cause, were listed third
and fourth under the ranks that failed of their stop; two jobs started with one hub's run id
left the panel saying "every rank is healthy" while the hub had warned that their figures mix.

Driven through a real HubCore with encoded messages in the order a hub takes them (a node's
launcher says its ranks' stop after its torchrun has ended, after the failure it caused)."""

from __future__ import annotations


from pardash.telemetry import schema
from pardash.telemetry.failures import failure_summary
from pardash.telemetry.hubcore import HubCore
from pardash.tui.alerts import jobs_mixed_alert, run_alerts

T = 1.0e9
RUN = "r245"
GLOO = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
        "[127.0.0.1]:29382: Connection reset by peer")  # fmt: skip


class _Sender:
    """Encoded messages into a hub, each process with its own seq (the launchers' notes -1)."""

    def __init__(self, core: HubCore) -> None:
        self.core = core
        self.seq: dict[int, int] = {}

    def __call__(self, msg: schema.Message, at: float, pid: int | None = None) -> None:
        msg.run, msg.t = RUN, T + at
        if msg.seq != -1:
            pid = msg.rank if pid is None else pid
            msg.seq = self.seq.get(pid, 0)
            self.seq[pid] = msg.seq + 1
        assert self.core.ingest_bytes(schema.encode(msg), at), self.core.rejected


def _two_nodes_at_step(steps: int) -> tuple[HubCore, _Sender]:
    """A DDP job of 4 ranks on two nodes (ranks 0-1 on node 0), at step ``steps``."""
    core = HubCore(run_id=RUN, world_size=4)
    send = _Sender(core)
    for r in range(4):
        send(schema.Hello(rank=r, world_size=4, node=r // 2, local_rank=r % 2, pid=100 + r, strategy="ddp"), 0.0)
    for s in range(1, steps + 1):
        for r in range(4):
            send(schema.Step(rank=r, step=s, step_s=0.01, samples=8, loss=1.0), s / 100)
    return core, send


def test_a_lost_nodes_stopped_ranks_read_first_as_the_report_names_them():
    # kill -TERM of the torchrun of ranks 0-1: ranks 3 and 2 failed of it (their collective's
    # connection reset), then that torchrun's launcher said its ranks' stop, stamped at the
    # stop's time. The panel read ranks 3, 2 (exited), then 0, 1 (stopped).
    core, send = _two_nodes_at_step(189)
    for r in (3, 2):
        send(schema.Event(rank=r, name="error", step=189, message=GLOO), 1.95)
        send(schema.Event(rank=r, name="exit", code=1, step=190), 1.96)
    for r in (0, 1):
        send(schema.Event(rank=r, seq=-1, name="exit", code=-15, message="stopped by SIGTERM"), 1.9)
    assert failure_summary(core.state)["line"].startswith("ranks 0-1 were stopped by SIGTERM first; rank 3 exited")

    alerts = run_alerts(core.state)
    assert [(a.kind, a.rank, a.first) for a in alerts] == [
        ("stopped", 0, True), ("stopped", 1, True), ("exited", 3, False), ("exited", 2, False),
    ]  # fmt: skip
    assert alerts[0].text == "rank 0 was stopped by SIGTERM at step 190, first: 2 others failed after it"
    # (their peer was stopped: "after a peer failed" named no failure the panel shows)
    assert alerts[2].text == "rank 3 exited with code 1 at step 190, after a peer was stopped (its connection closed)"

    # A stop after the failure (torchrun stopping the rest) is no cause: the failure reads first.
    core, send = _two_nodes_at_step(189)
    send(schema.Event(rank=3, name="error", step=189, message="ValueError: bad batch"), 1.95)
    send(schema.Event(rank=3, name="exit", code=1, step=190), 1.96)
    for r in (0, 1, 2):
        send(schema.Event(rank=r, seq=-1, name="exit", code=-15, message="stopped by torchrun"), 2.0)
    assert [(a.kind, a.rank, a.first) for a in run_alerts(core.state)] == [
        ("exited", 3, True), ("stopped", 0, False), ("stopped", 1, False), ("stopped", 2, False),
    ]  # fmt: skip


def _two_jobs(recorder=None, together: int = 3) -> tuple[HubCore, _Sender]:
    """Job A (pids 100-101) and, while it trains, job B (pids 200-201), both under RUN, 2 ranks
    each, ``together`` steps side by side: the hub warns that two jobs share the run id as B's
    first hello comes."""
    core = HubCore(run_id=RUN, recorder=recorder)
    send = _Sender(core)
    for r in range(2):
        send(schema.Hello(rank=r, world_size=2, pid=100 + r, host="vm", strategy="ddp"), 0.0, pid=100 + r)
    for s in range(1, 6):
        for r in range(2):
            send(schema.Step(rank=r, step=s, step_s=0.1, samples=16, loss=1.0), s / 10, pid=100 + r)
    assert jobs_mixed_alert(core.state) is None and run_alerts(core.state) == []
    for r in range(2):
        send(schema.Hello(rank=r, world_size=2, pid=200 + r, host="vm", strategy="ddp"), 0.6, pid=200 + r)
    for s in range(1, together + 1):
        for job in (100, 200):
            for r in range(2):
                send(schema.Step(rank=r, step=s + (5 if job == 100 else 0), step_s=0.1, samples=16, loss=1.0), 0.6 + s / 10, pid=job + r)
    return core, send


def test_two_jobs_on_one_run_id_are_one_alert_of_the_run_while_it_stands():
    core, send = _two_jobs()
    said = [e.message for e in core.state.events if isinstance(e, schema.Event) and e.name == "warning"]
    assert len(said) == 1 and "two jobs share run id r245" in said[0]
    mixed = jobs_mixed_alert(core.state)
    assert mixed is not None and (mixed.kind, mixed.rank) == ("jobs_mixed", -1)
    # The hub's words, from the clash on (the pids are in the event log's line)
    assert mixed.text == ("two jobs share run id r245 (or two nodes the same ranks), and their figures mix; "
                          "give each job its own hub or PARDASH_RUN_ID")  # fmt: skip
    # Many events later (a straggler found and cleared, checkpoints), it stands.
    for s in range(4, 40):
        send(schema.Event(rank=0, name="checkpoint", step=s, message=f"/ck/{s}.pt"), 1.0 + s / 10, pid=100)
    assert jobs_mixed_alert(core.state) == mixed
    # Both jobs end: their figures stay mixed, and so does the alert.
    for pid in (200, 201, 100, 101):
        send(schema.Event(rank=pid % 100, name="exit", code=0, step=8), 6.0, pid=pid)
    assert jobs_mixed_alert(core.state) == mixed
    # A job run again under the run's id after every rank had ended: its figures are its own.
    send(schema.Hello(rank=0, world_size=2, pid=300, host="vm", strategy="ddp"), 20.0, pid=300)
    assert any(e.name == "hub" and "started again" in e.message for e in core.state.events if isinstance(e, schema.Event))
    assert jobs_mixed_alert(core.state) is None
    # ...and a second job started beside that one is a new clash, said and alerted again (the
    # hub said it once a run: its flag was never put back).
    send(schema.Hello(rank=1, world_size=2, pid=301, host="vm", strategy="ddp"), 20.1, pid=301)
    for s in range(1, 3):
        for r in range(2):
            send(schema.Step(rank=r, step=s, step_s=0.1, samples=16, loss=1.0), 20.2 + s / 10, pid=300 + r)
    send(schema.Hello(rank=0, world_size=2, pid=400, host="vm", strategy="ddp"), 21.0, pid=400)
    again = jobs_mixed_alert(core.state)
    assert again is not None and again.text == mixed.text


async def test_two_jobs_on_one_run_id_the_panel_says_so_not_every_rank_is_healthy(tmp_path):
    # The hub's warning, said once as an event, scrolled away; the panel read "✓ no alerts:
    # every rank is healthy" over a grid of both jobs' figures for the whole run.
    from tui_helpers import replay_app, widget_text

    from pardash.telemetry.recorder import Recorder
    from pardash.tui.widgets.alert_list import AlertList

    log = tmp_path / "two.jsonl"
    rec = Recorder(log)
    _two_jobs(rec, together=5)
    rec.close()
    app = replay_app(str(log))
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        panel = app.screen.query_one(AlertList)
        assert [a.kind for a in panel.alerts] == ["jobs_mixed"]
        text = " ".join(widget_text(panel).split())  # (as wrapped in the panel's width)
        assert text.startswith("⚠ two jobs share run id r245 (or two nodes the same ranks), and their figures mix;"), text
        assert "healthy" not in text
