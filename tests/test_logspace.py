"""The hub says, before the disk fills, that its log will not fit there: at about which step
and when, once (and once more within the hour). A long run's log (about 650 bytes a
rank-step) filled its disk with no word until the writes failed, and whatever else wrote there
(checkpoints) with it."""

from __future__ import annotations

from pardash.telemetry import logspace, schema
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.logreader import load_log
from pardash.telemetry.logspace import CHECK_S, LEAST_S, LogSpace
from pardash.telemetry.recorder import Recorder

MiB = 1 << 20
GiB = 1 << 30


def _run(space: LogSpace, *, total: int | None, free: int, bytes_per_s: float, steps_per_s: float = 10.0, seconds: float = 600) -> list[tuple[float, str]]:
    """What ``space`` says of a log growing at ``bytes_per_s`` on a disk whose free space
    shrinks as it grows from ``free``, checked as a hub does (every frame, it looks when due)."""
    space.free = lambda _path: max(0, int(free - bytes_per_s * now))
    said = []
    now = 0.0
    while now <= seconds:
        if space.due(now):
            words = space.check(now, "/runs/x/telemetry.jsonl", 1000 + int(bytes_per_s * now), 1 + int(steps_per_s * now), total)
            if words:
                said.append((now, words))
        now += 0.1
    return said


def test_a_run_whose_planned_steps_will_not_fit_is_told_where_the_disk_fills():
    # 8 ranks at 10 steps/s, ~650 B a rank-step: 52,000 B/s; 1 GiB free; 1,000,000 steps planned
    # (27 hours, 5.2 GB of log).
    said = _run(LogSpace(), total=1_000_000, free=GiB, bytes_per_s=52_000.0, seconds=6 * 3600)
    first_at, first = said[0]
    assert LEAST_S <= first_at < LEAST_S + 2 * CHECK_S, said  # (once its growth is measured)
    assert "the log will not fit on its disk" in first, first
    assert "(/runs/x) has" in first and "5.1 KiB a step" in first and "178.5 MiB an hour" in first, first
    # The disk fills at 1 GiB / 52,000 B/s = 20,650 s, 10 steps a second: at step ~206,490.
    step = int(first.split("fills at about step ")[1].split(" ")[0].replace(",", ""))
    assert abs(step - GiB / 52_000 * 10) < 500, first  # (steps counted whole: within 0.25%)
    assert "of 1,000,000" in first and "in about 6 hours" in first, first
    # Once, then once more within the hour of it filling (not every 30 s).
    assert len(said) == 2, said
    last_at, last = said[1]
    assert "fills in about" in last and GiB / 52_000 - last_at <= logspace.LAST_S, said


def test_a_run_that_fits_is_not_warned():
    assert _run(LogSpace(), total=10_000, free=GiB, bytes_per_s=52_000.0, seconds=900) == []


def test_a_run_that_needs_nearly_all_the_free_space_fits_and_is_not_warned():
    # Review 332: a run whose rest needed 95-100% of the free space was said not to fit, "which
    # fills at about step 103,092 of 100,000", and the header's countdown then went away unsaid.
    # 52,000 B/s at 10 steps/s: 5,200 B a step, 520 MB for 100,000 steps; 536 MB free.
    space = LogSpace()
    assert _run(space, total=100_000, free=int(52_000 * 10_000 / 0.97), bytes_per_s=52_000.0, seconds=9000) == []
    assert space.full_at is None


def test_the_countdown_ends_once_the_log_is_closed_by_a_full_disk():
    # The recorder closes its log when its disk fills (its size then reads 0); the header said
    # "log's disk full in 1s" for the rest of the hub's life.
    space = LogSpace()
    _run(space, total=None, free=2 * GiB, bytes_per_s=52_000.0, seconds=600)
    assert space.full_at is not None
    space.check(40_000.0, "/runs/x/telemetry.jsonl", 0, 400_000, None)
    assert space.full_at is None


def test_without_planned_steps_it_warns_of_a_disk_full_within_half_a_day_only():
    assert _run(LogSpace(), total=None, free=20 * GiB, bytes_per_s=52_000.0, seconds=600) == []  # (4.6 days)
    said = _run(LogSpace(), total=None, free=2 * GiB, bytes_per_s=52_000.0, seconds=600)  # (11.5 hours)
    assert len(said) == 1 and "the log grows 178.5 MiB an hour" in said[0][1] and "in about 11 hours" in said[0][1], said


def test_an_unknown_free_space_says_nothing():
    space = LogSpace(free=lambda _p: None)
    assert all(space.check(t, "/x/log", 1000 + 100 * int(t), 1 + int(t), 100) is None for t in range(0, 600, 30))


def test_a_hubs_log_holds_the_warning(tmp_path):
    # A hub with a real log: the warning is a hub event in it (the TUI's event log, the headless
    # lines and the report read it from there), with the disk's free space read as a tiny one.
    _core, rec, _now = _short_hub(tmp_path)
    rec.flush()
    rec.close()
    warnings = [m for m in load_log(rec.path)[0] if isinstance(m, schema.Event) and m.name == "warning" and m.rank == -1]
    assert len(warnings) == 1 and "the log will not fit on its disk" in warnings[0].message, warnings
    assert "of 100,000" in warnings[0].message, warnings[0].message


def _short_hub(tmp_path) -> tuple[HubCore, Recorder, float]:
    """A hub with a real log whose disk has 64 KiB left, two ranks stepping at 10 steps/s
    until past its first forecast; (the hub, its recorder, its clock then)."""
    rec = Recorder(tmp_path / "run.jsonl")
    core = HubCore(run_id="r", recorder=rec, world_size=2)
    core.log_space.free = lambda _p: 64 * 1024
    t0 = 1.7e9
    for r in range(2):
        core.ingest(schema.Hello(run="r", rank=r, world_size=2, pid=10 + r, seq=0, t=t0, config={"steps": 100_000}), 0.0)
    now, step = 0.0, 0
    while now < LEAST_S + 2 * CHECK_S:
        step += 1
        now = step * 0.1
        for r in range(2):
            core.ingest(schema.Step(run="r", rank=r, step=step, seq=step, loss=1.0, samples=8, step_s=0.1, t=t0 + now), now)
        core.tick(now)
    return core, rec, now


async def test_the_viewers_header_counts_down_to_the_disk_full(tmp_path):
    # The warning scrolls out of the events; the header keeps saying it while the log will not fit.
    from types import SimpleNamespace

    from textual.app import App

    from pardash.tui.widgets.run_header import RunHeader, summarize

    core, rec, now = _short_hub(tmp_path)
    stats = core.tick(now).stats
    try:
        assert 0 < stats.log_full_in_s < 3600, stats  # (64 KiB at the log's rate: a few seconds, to the second)

        class One(App):
            def compose(self):
                yield RunHeader()

        app = One()
        async with app.run_test(size=(200, 8)) as pilot:
            header = app.query_one(RunHeader)
            header.summary = summarize(SimpleNamespace(state=core.state, stats=stats, live=True))
            await pilot.pause()
            text = header.render()
            assert "log's disk full in " in getattr(text, "plain", str(text)), text
        # Space freed: it fits, and nothing is counted down.
        core.log_space.free = lambda _p: 1 << 40
        later = now + 2 * CHECK_S
        assert core.tick(later).stats.log_full_in_s == 0
    finally:
        rec.close()
