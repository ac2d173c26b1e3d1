"""Review 245: the report of a log in which the hub warned keeps the hub's warnings. Two jobs
started with one hub's run id read as one job ("samples/s 601", both jobs' added; "300 run
again after a restart or resume"), with ``"warnings": []``: the report took only the ranks'
own warnings (seq >= 0) and dropped every one the hub made (rank -1, seq -1).

Logs written by a real HubCore and Recorder from encoded messages, as a hub records them."""

from __future__ import annotations

import json
import time

from pardash.telemetry import schema
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.recorder import Recorder
from pardash.telemetry.report import build_report
from pardash.telemetry.report_render import render_markdown, render_text

RUN = "two-r245"


class _Sender:
    """Encoded messages into a hub, each process with its own seq (as its reporter counts)."""

    def __init__(self, core: HubCore, t0: float) -> None:
        self.core, self.t0 = core, t0
        self.seq: dict[int, int] = {}

    def __call__(self, pid: int, msg: schema.Message, at: float, run: str = RUN, off: float = 0.0) -> bool:
        """``at``: seconds into the run on the hub's clock; ``off``: the sender's clock's error."""
        msg.run, msg.t = run, self.t0 + at + off
        msg.seq = self.seq.get(pid, 0)
        self.seq[pid] = msg.seq + 1
        return self.core.ingest_bytes(schema.encode(msg), at)


def _two_jobs_log(path) -> None:
    """Job A (pids 100-101, 0.1 s steps) and, 0.5 s in, job B (pids 200-201, 0.05 s steps), 2
    ranks each, both under RUN: B ends first, A 0.5 s after it."""
    rec = Recorder(path)
    core = HubCore(run_id=RUN, recorder=rec)
    send = _Sender(core, time.time())
    for r in range(2):
        assert send(100 + r, schema.Hello(rank=r, world_size=2, pid=100 + r, host="vm", strategy="ddp"), 0.0)
    step_a = step_b = 0
    for i in range(1, 51):
        at = i * 0.05
        if i % 2 == 0 and step_a < 20:
            step_a += 1
            for r in range(2):
                assert send(100 + r, schema.Step(rank=r, step=step_a, samples=16, step_s=0.1, loss=1.0), at)
        if i == 10:
            for r in range(2):
                assert send(200 + r, schema.Hello(rank=r, world_size=2, pid=200 + r, host="vm", strategy="ddp"), at)
        elif i > 10 and step_b < 20:
            step_b += 1
            for r in range(2):
                assert send(200 + r, schema.Step(rank=r, step=step_b, samples=16, step_s=0.05, loss=1.0), at)
    for pid, at in ((200, 2.0), (201, 2.0), (100, 2.5), (101, 2.5)):
        assert send(pid, schema.Event(rank=pid % 100, name="exit", code=0, step=20), at)
    rec.close()


def test_two_jobs_on_one_run_id_the_report_names_the_hubs_warning(tmp_path):
    log = tmp_path / "two.jsonl"
    _two_jobs_log(log)
    rep = build_report(str(log))
    hub = [w for w in rep["warnings"] if w.get("hub")]
    assert len(hub) == 1, rep["warnings"]
    assert hub[0]["ranks"] == [] and "two jobs share run id two-r245" in hub[0]["message"]
    assert rep["jobs_sharing_run_id"] is True
    json.dumps(rep)  # (the JSON a user gets: --format json)

    text = render_text(rep)
    lines = {line.split("  ", 1)[0]: line for line in text.splitlines()}
    # The steps job B ran after job A's are no restart's, and the rate is both jobs'.
    assert "after a restart or resume" not in text
    assert "run again by a second job sharing the run id: see the hub's warning" in lines["steps"]
    assert "two jobs' together: they shared the run id" in lines["samples/s"]
    assert "  hub: rank 0: pid 200 on vm says it is rank 0 while pid 100 on vm still sends as it: two jobs share" in text
    md = render_markdown(rep)
    assert "## Warnings" in md and "- hub: rank 0: pid 200 on vm says it is rank 0" in md


def test_the_report_lists_the_hub_warnings_about_what_the_log_holds_and_not_the_clocks(tmp_path):
    # A hub told --world-size 2 that hears a rank of a job of 4 (its hello refused: hosts and
    # strategy unknown), a rank of another run (every record refused), and a rank whose clock
    # is two hours behind: the first two are listed; the clock is the report's own "clocks"
    # line, judged from the log, not said twice.
    log = tmp_path / "warned.jsonl"
    rec = Recorder(log)
    t0 = time.time()
    core = HubCore(run_id=RUN, recorder=rec, world_size=2, wall_clock=lambda: t0)
    send = _Sender(core, t0)
    assert send(100, schema.Hello(rank=0, world_size=2, pid=100, host="a", strategy="ddp"), 0.0)
    assert send(101, schema.Hello(rank=1, world_size=2, pid=101, host="b", strategy="ddp"), 0.0, off=-7200.0)
    assert not send(300, schema.Hello(rank=1, world_size=4, pid=300, host="c", strategy="ddp"), 0.2)
    assert not send(400, schema.Hello(rank=0, world_size=2, pid=400, host="d", strategy="ddp"), 0.3, run="other")
    for s in range(1, 4):
        assert send(100, schema.Step(rank=0, step=s, samples=8, step_s=0.1), 0.1 * s)
        assert send(101, schema.Step(rank=1, step=s, samples=8, step_s=0.1), 0.1 * s, off=-7200.0)
    assert send(100, schema.Event(rank=0, name="warning", message="loss scale fell to 1024", step=3), 0.4)
    rec.close()
    said = [e.message for e in core.state.events if isinstance(e, schema.Event) and e.name == "warning" and e.rank < 0]
    assert len(said) == 3 and any("clock" in m for m in said)  # (what the hub said)

    rep = build_report(str(log))
    hub = [w["message"] for w in rep["warnings"] if w.get("hub")]
    assert len(hub) == 2, hub
    assert hub[0].startswith("rank 1 says its job has 4 ranks (its hello), but this hub was told 2")
    assert hub[1].startswith("refusing every record of run 'other' (rank 0 is the first)")
    assert [(w["message"], w["ranks"]) for w in rep["warnings"] if not w.get("hub")] == [("loss scale fell to 1024", [0])]
    text = render_text(rep)
    assert "hub: rank 1's clock" not in text and rep.get("clocks_off")
    assert "  rank 0 at step 3: loss scale fell to 1024" in text
