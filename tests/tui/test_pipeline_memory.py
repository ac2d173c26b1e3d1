"""A pipeline's ranks each hold a stage of the model, not a copy of it (strategy ``pp``): the
memory panel read "unsharded ... 2 full copies", "saving none: full copies", offered "FSDP ...
if sharded ÷ 2" (the other ranks hold other stages: nothing to shard over), and expected every
rank to hold the median stage's state, so the larger of two unequal stages read over it."""

from __future__ import annotations

import msgspec
from tui_helpers import strip_text, widget_text

from pardash.telemetry import schema
from pardash.telemetry import state as st
from pardash.tui.memory import memory_savings

T = 1.7e9
MIB = 1 << 20


def _pipeline(strategy: str = "pp") -> list[schema.Message]:
    """Two stages of unequal size (the second holds the head: half again the first's state),
    ten steps each; the last stage has the loss."""
    stage_bytes = {0: 1 * MIB, 1: 3 * MIB // 2}
    msgs: list[schema.Message] = [
        schema.Hello(run="p", rank=r, world_size=2, strategy=strategy, pp_stage=r, pp_stages=2, seq=0, t=T) for r in (0, 1)
    ]
    for s in range(1, 11):
        for r in (0, 1):
            b = stage_bytes[r]
            mem = schema.Mem(params_bytes=b // 4, grads_bytes=b // 4, optim_bytes=b // 2,
                             params_full_bytes=b // 4, grads_full_bytes=b // 4, optim_full_bytes=b // 2)  # fmt: skip
            msgs.append(schema.Step(run="p", rank=r, step=s, seq=s, loss=1.0 if r else None, samples=32 if r == 0 else 0,
                                    step_s=0.02, self_s=0.01, comm_s=0.01, mem=mem, t=T + s * 0.02))  # fmt: skip
    return [msgspec.structs.replace(m, hseq=i + 1) for i, m in enumerate(msgs)]


def test_a_pipelines_stages_are_expected_to_hold_their_own_and_no_sharding_is_offered():
    state = st.RunState()
    for m in _pipeline():
        state.apply(m, m.t)
    s = memory_savings(state)
    assert s is not None and s.pipeline and not s.sharded
    assert s.sharded_expected_bytes is None  # (no "FSDP ... if sharded ÷ 2")
    assert s.expected_per_rank_bytes == 3 * MIB // 2  # the largest stage's, as the report takes it
    assert s.over_expectation == []
    # The rank's detail: "of 384 KiB unsharded (full copy)" said its stage was the whole model.
    from pardash.tui.rank_facts import memory_facts

    said = {label: how for label, _, how in memory_facts(state.ranks[1])}
    assert said["params"][0] == "of 384 KiB unsharded (its stage)", said


async def test_the_memory_panel_and_view_say_stages_not_full_copies(tmp_path):
    from pardash.telemetry.client import ReplaySource
    from pardash.tui.app import make_app
    from pardash.tui.widgets.memory_bars import MemoryBars
    from pardash.tui.widgets.memory_summary import MemorySummary

    log = tmp_path / "pp.jsonl"
    log.write_bytes(schema.encode_json_lines(_pipeline()))
    src = ReplaySource(str(log))
    src.seek(10.0)
    app = make_app(src)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        panel = " ".join(widget_text(app.screen.query_one(MemorySummary)).split())
        assert "unsharded 2.50 MiB 2 stages, unsharded" in panel and "saving none: each its own stage" in panel, panel
        assert "full cop" not in panel and "FSDP" not in panel and "sharded ÷" not in panel, panel
        await pilot.press("m")
        await pilot.pause()
        widget = app.screen.query_one(MemoryBars)
        bars = " ".join(" ".join(strip_text(widget.render_line(y)).split()) for y in range(2))
        assert "1.50 MiB of 1.50 MiB its stage" in bars and "full copy" not in bars, bars
