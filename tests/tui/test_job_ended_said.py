"""Once the launch saw its job end (torchrun exited: ``RunState.job_ended``) with a rank whose
end no word said (silent, killed with its node) or never heard from, the header says the job
ended, and the quit dialog open then says which ranks' ends are not known; it said "Every rank has
finished or exited, and torchrun with them", and the header nothing of the end while the hub's
frames went on (helper 265, after review 258's node 1 killed)."""

from __future__ import annotations

from tui_helpers import widget_text

from pardash.telemetry import schema
from pardash.telemetry.state import RunState
from pardash.tui.widgets.run_header import RunHeader

SIZE = (140, 40)


async def test_a_job_whose_torchrun_ended_with_a_rank_silent_is_said_ended_by_the_header_and_the_dialog(tmp_path):
    # Node 1's processes killed: rank 1 silent for good, rank 0 failed, torchrun on node 0
    # exited. The header said "○ 1 silent × 1 exited" and nothing of the end; the quit dialog,
    # open as the job ended, said "Every rank has finished or exited, and torchrun with them".
    from helpers import identity, serving
    from tui_helpers import until

    from pardash.telemetry.analysis import Detector, LivenessConfig
    from pardash.telemetry.client import HubClient
    from pardash.telemetry.hub import Hub
    from pardash.telemetry.reporter import Reporter
    from pardash.telemetry.state import EXITED, SILENT
    from pardash.tui.app import make_app
    from pardash.tui.screens.quit import QuitScreen
    from textual.widgets import Label

    run = "tui-stopped"
    hub = Hub(run_id=run, log_path=str(tmp_path / "telemetry.jsonl"))
    hub.core.detector = Detector(LivenessConfig(stall_min_s=600.0, silent_s=1.0))
    ended = [False]
    with serving(hub):
        reps = [Reporter(hub.ingest_endpoint, run=run, identity=identity(r, 2, node=r), heartbeat_s=0.2) for r in range(2)]
        try:
            for rep in reps:
                rep.hello(strategy="ddp", backend="gloo", device="cpu", params_count=1000, params_bytes=4000)
                for step in range(1, 6):
                    rep.step(step=step, loss=1.0, samples=8, step_s=0.05, self_s=0.02)
                rep.flush()
            reps[1].close(linger_ms=1000)  # not a word more from rank 1
            reps[0].event("error", "RuntimeError: Connection reset by peer", step=5)
            reps[0].event("exit", code=1, step=6)
            app = make_app(HubClient(hub.updates_endpoint, hub.snapshot_endpoint), launched=True, job_over=lambda: ended[0])
            async with app.run_test(size=SIZE) as pilot:
                header = app.screen.query_one(RunHeader)
                await until(pilot, lambda: {q: r.status for q, r in app.source.state.ranks.items()} == {0: EXITED, 1: SILENT})
                assert "job ended" not in widget_text(header)  # (torchrun may yet restart them)
                await pilot.press("q")
                await until(pilot, lambda: isinstance(app.screen, QuitScreen))
                dialog = app.screen
                ended[0] = True  # torchrun exited on this node
                await until(pilot, lambda: dialog.ended)
                explain = " ".join(str(label.render()) for label in dialog.query(".explain").results(Label) if label.display)
                assert explain == (
                    "torchrun has exited, though rank 1 said no end of its own (how it ended is not known): "
                    "there is nothing to stop or leave running."
                ), explain
                await pilot.press("escape")  # (stay)
                await until(pilot, lambda: not isinstance(app.screen, QuitScreen))
                await until(pilot, lambda: "job ended" in widget_text(header))
                text = widget_text(header)
                assert "○ 1 silent  × 1 exited   job ended: torchrun exited; how 1 rank ended is not known" in text, text
        finally:
            for rep in reps:
                rep.close(linger_ms=0)


def test_the_dialog_names_the_ranks_whose_end_no_word_said():
    from pardash.telemetry.state import EXITED
    from pardash.tui.screens.quit import ended_text

    st = RunState(run_id="s")
    for r in range(3):  # (of a world of 4: rank 3 never heard from)
        st.apply(schema.Hello(run="s", rank=r, world_size=4, seq=0, t=1.0), 0.0)
        st.apply(schema.Step(run="s", rank=r, seq=1, step=4, step_s=0.1, t=2.0), 0.0)
    for r in range(2):
        st.apply(schema.Event(run="s", rank=r, seq=-1, name="exit", code=-15, message="stopped by you", t=3.0), 0.0)
    assert [st.ranks[r].status for r in range(2)] == [EXITED, EXITED]
    assert ended_text(st) == (
        "torchrun has exited, though rank 2 said no end of its own and rank 3 was never heard from "
        "(how they ended is not known): there is nothing to stop or leave running."
    )
    st.apply(schema.Event(run="s", rank=2, seq=-1, name="exit", code=-15, message="stopped by you", t=3.0), 0.0)
    st.apply(schema.Hello(run="s", rank=3, world_size=4, seq=0, t=1.0), 0.0)
    st.apply(schema.Event(run="s", rank=3, seq=-1, name="exit", code=0, t=3.0), 0.0)
    assert ended_text(st) == "Every rank has ended, and torchrun with them: there is nothing to stop or leave running."
