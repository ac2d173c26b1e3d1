"""The memory view (m) at 1,024 ranks: a list of 1,024 rows running from rank 0, each '1.85 MiB of
1.85 GiB  1024× less', buried the rank that held a full copy. Ranks alike fold into a row named
'ranks 0-511, 513-1023', the ranks that differ come first; a small job keeps a row a rank."""

from __future__ import annotations

import msgspec
import pytest
from tui_helpers import strip_text

from pardash.telemetry import schema
from pardash.tui.widgets.memory_bars import PART_GLYPHS

T = 1.7e9
MIB = 1 << 20


def held_cells(bar: str) -> int:
    """Cells of a bar drawn as held (params, grads, optimizer state, buckets: a fill each)."""
    return sum(bar.count(glyph) for glyph in PART_GLYPHS.values())


def _job(tmp_path, ranks: int, held_of=lambda rank, shard: shard, full: int = 1024 * MIB) -> str:
    """An FSDP job's log: ``ranks`` ranks, two steps each; rank r holds ``held_of(r, full/N)``
    bytes of state (a quarter parameters, a quarter gradients, half optimizer state)."""
    msgs: list[schema.Message] = [
        schema.Hello(run="f", rank=r, world_size=ranks, strategy="fsdp", seq=0, t=T) for r in range(ranks)
    ]
    for s in (1, 2):
        for r in range(ranks):
            b = held_of(r, full // ranks)
            mem = schema.Mem(params_bytes=b // 4, grads_bytes=b // 4, optim_bytes=b // 2,
                             params_full_bytes=full // 4, grads_full_bytes=full // 4, optim_full_bytes=full // 2)  # fmt: skip
            msgs.append(schema.Step(run="f", rank=r, step=s, seq=s, loss=1.0, samples=8, step_s=0.1, self_s=0.05,
                                    comm_s=0.05, mem=mem, t=T + s * 0.1 + r * 1e-6))  # fmt: skip
    log = tmp_path / "job.jsonl"
    log.write_bytes(schema.encode_json_lines([msgspec.structs.replace(m, hseq=i + 1) for i, m in enumerate(msgs)]))
    return str(log)


def _app(log: str):
    from pardash.telemetry.client import ReplaySource
    from pardash.tui.app import make_app

    src = ReplaySource(log)
    src.seek(src.duration_s)
    src.paused = True
    return make_app(src)


async def _view(app, pilot) -> tuple[list[str], str]:
    """The memory view's lines (every one, scrolled or not) and its panel's title."""
    from pardash.tui.widgets.memory_bars import MemoryBars

    await pilot.press("m")
    await pilot.pause()
    bars = app.screen.query_one(MemoryBars)
    lines = []
    for y in range(bars.virtual_size.height):
        bars.scroll_to(y=max(0, y - bars.size.height + 1), animate=False, immediate=True)
        lines.append(strip_text(bars.render_line(y - int(bars.scroll_offset.y))).rstrip())
    return lines, str(bars.border_title)


@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
async def test_a_rank_not_sharding_among_1024_comes_first_and_the_ranks_alike_fold_into_a_row(tmp_path, size):
    # Rank 512 holds a full copy (a block left unwrapped), rank 7 a fifth more than its share.
    held = {512: lambda shard: shard * 1024, 7: lambda shard: shard * 6 // 5}
    log = _job(tmp_path, 1024, lambda r, shard: held.get(r, lambda s: s)(shard))
    app = _app(log)
    async with app.run_test(size=size) as pilot:
        lines, title = await _view(app, pilot)
    assert len(lines) == 4, "\n".join(lines)
    flagged, larger, names, rest = (" ".join(line.split()) for line in lines)
    assert flagged.split()[0] == "512" and flagged.endswith("1.00 GiB of 1.00 GiB full copy ⚠"), flagged
    assert larger.split()[0] == "7" and larger.endswith("1.20 MiB of 1.00 GiB 853× less"), larger
    assert names == "ranks 0-6, 8-511, 513-1023 (1,022 ranks, alike)", names
    assert rest.endswith("1.00 MiB of 1.00 GiB 1024× less"), rest
    assert title == "per rank · ranks alike in one row, those that differ first"


async def test_a_rank_holding_a_full_copy_runs_off_the_scale_and_leaves_the_others_bars_drawn(tmp_path):
    # Its full copy set the scale: the other 1,023 ranks' bars, 1/1024 of it, were no cell at
    # all ('┃░░░░…'), rank 7's fifth more than theirs unseen.
    held = {512: lambda shard: shard * 1024, 7: lambda shard: shard * 6 // 5}
    app = _app(_job(tmp_path, 1024, lambda r, shard: held.get(r, lambda s: s)(shard)))
    async with app.run_test(size=(80, 24)) as pilot:
        lines, _title = await _view(app, pilot)
    flagged, larger, _names, rest = (line.split()[1] if line.split()[0].isdigit() else line.split()[0] for line in lines)
    assert flagged[-2] in PART_GLYPHS.values() and flagged.endswith("»") and "░" not in flagged, flagged  # held, off the scale
    assert held_cells(rest) >= 4 and rest.endswith("░»"), rest  # held, then the unsharded rest off the scale
    assert held_cells(larger) > held_cells(rest), (larger, rest)


async def test_many_ranks_flagged_alike_fold_first_and_a_long_list_of_ranks_is_cut_to_the_width(tmp_path):
    # Every 100th rank not sharding: ten ranks alike (one row, flagged, first), the rest one row
    # whose ranks, with their ten gaps, would run past 80 columns.
    log = _job(tmp_path, 1000, lambda r, shard: shard * 1000 if r % 100 == 50 else shard)
    app = _app(log)
    async with app.run_test(size=(80, 24)) as pilot:
        lines, _title = await _view(app, pilot)
        width = app.screen.query_one("#bars").scrollable_content_region.width
    assert len(lines) == 4, "\n".join(lines)
    said = [" ".join(line.split()) for line in lines]
    assert said[0] == "ranks 50, 150, 250, 350, 450, 550, 650, 750, 850, 950 (10 ranks, alike)", said
    assert said[1].endswith("full copy ⚠"), said
    assert said[2].startswith("ranks 0-49, 51-149, ") and said[2].endswith(", … (990 ranks, alike)"), said
    assert all(len(line) <= width for line in lines), lines
    assert said[3].endswith("1000× less"), said


async def test_a_small_job_keeps_a_row_a_rank_in_rank_order(tmp_path):
    # Eight ranks, each holding a little more than the last: every rank's row, by rank, as before.
    log = _job(tmp_path, 8, lambda r, shard: shard + r * MIB // 4)
    app = _app(log)
    async with app.run_test(size=(80, 24)) as pilot:
        lines, title = await _view(app, pilot)
    assert [line.split()[0] for line in lines] == [str(r) for r in range(8)], lines
    assert title == "per rank"


async def test_1024_ranks_alike_are_one_row(tmp_path):
    from pardash.tui.widgets.memory_bars import MemoryBars

    app = _app(_job(tmp_path, 1024))
    async with app.run_test(size=(80, 24)) as pilot:
        lines, title = await _view(app, pilot)
        assert app.screen.query_one(MemoryBars).virtual_size.height == 2
    assert " ".join(lines[0].split()) == "ranks 0-1023 (1,024 ranks, alike)", lines
    assert " ".join(lines[1].split()).endswith("1.00 MiB of 1.00 GiB 1024× less"), lines
    assert title == "per rank · ranks alike in one row"  # (none differ)


def test_memory_screen_1024_ranks_one_not_sharding(snap_compare, tmp_path):
    """Rank 512 not sharding (flagged) and rank 7 holding more come first, a row each; the
    other 1,022 ranks one row under their names."""
    held = {512: lambda shard: shard * 1024, 7: lambda shard: shard * 6 // 5}
    app = _app(_job(tmp_path, 1024, lambda r, shard: held.get(r, lambda s: s)(shard)))
    assert snap_compare(app, terminal_size=(100, 30), press=["m"])


@pytest.mark.parametrize("size", [(160, 45), (100, 30), (80, 24)])
async def test_a_job_sharded_more_ways_never_draws_its_held_part_larger_than_one_sharded_fewer(tmp_path, size):
    # Review 298: past 32 ranks the held part of a bar was drawn across two thirds of it (its
    # unsharded rest off the scale), so 64 ranks' "64.0× less" looked fuller than 8 ranks'
    # "8.0× less" across an eighth; review 305: zoomed from under 4 cells to 12, 10 ranks at 80
    # columns were drawn across 12 cells beside 8 ranks' 5. Never larger for more ways.
    held = []
    for ranks in (2, 8, 10, 16, 64, 1024):
        app = _app(_job(tmp_path, ranks))
        async with app.run_test(size=size) as pilot:
            lines, _title = await _view(app, pilot)
        bar = next(line for line in lines if "█" in line)  # (the first rank's, or the fold's)
        held.append(sum(bar.count(c) for c in "█▆▄▂"))  # (params, grads, optimizer, buckets)
    assert held == sorted(held, reverse=True) and held[-1] >= 8, held  # (8: its parts told apart)
