"""One snapshot per screen state, drawn from recorded runs (tests/tui/data, see
make_fixtures.py) replayed to their end and paused: nothing on screen depends on the clock.

Update after an intended change with ``pytest tests/tui --snapshot-update`` and look at the
report before committing the new SVGs.
"""

from __future__ import annotations

from tui_helpers import replay_app

SIZE = (120, 40)


def test_dashboard_4_ranks(snap_compare):
    """FSDP over 4 ranks on 2 nodes, healthy: wide cells grouped by node, 4x sharding saving."""
    assert snap_compare(replay_app("run4.jsonl"), terminal_size=SIZE)


def test_dashboard_1024_ranks_heat_map(snap_compare):
    """1024 ranks on 128 nodes do not fit as cells: one character per rank, packed by node;
    a straggler, a stalled, a silent and an exited rank stand out."""
    assert snap_compare(replay_app("run1024.jsonl"), terminal_size=SIZE)


def test_dashboard_straggler(snap_compare):
    """DDP over 8 ranks: rank 5 flagged as a straggler with its cost; selected."""
    assert snap_compare(replay_app("straggler8.jsonl"), terminal_size=SIZE, press=["down"] * 5)


def test_dashboard_exited_rank(snap_compare):
    """Rank 1 exited with code 1 (its error as the cause); the others stalled in backward."""
    assert snap_compare(replay_app("exited4.jsonl"), terminal_size=SIZE)


def test_dashboard_of_a_log_cut_short(snap_compare):
    """A healthy run whose hub was killed: the log ends early, which the header's note says,
    the statuses marked as of the log's end, and the alerts claim no health."""
    assert snap_compare(replay_app("killed2.jsonl"), terminal_size=SIZE)


def test_dashboard_narrow_80x24(snap_compare):
    """80x24: the memory panel gives way to the event log; the header wraps, nothing hides."""
    assert snap_compare(replay_app("straggler8.jsonl"), terminal_size=(80, 24))


def test_rank_detail(snap_compare):
    """The straggler's detail: its self time above the others' band, its data phase long."""
    assert snap_compare(replay_app("straggler8.jsonl"), terminal_size=SIZE, press=["down"] * 5 + ["enter"])


def test_rank_detail_of_an_exited_rank(snap_compare):
    """Rank 1 exited with code 1 at 00:10: its system figures greyed, "at its exit", their
    sample's time and age under them."""
    assert snap_compare(replay_app("exited4.jsonl"), terminal_size=SIZE, press=["down", "enter"])


def test_memory_screen(snap_compare):
    """Per-rank shards against the ZeRO expectation and the unsharded alternative."""
    assert snap_compare(replay_app("run4.jsonl"), terminal_size=SIZE, press=["m"])


def test_help(snap_compare):
    assert snap_compare(replay_app("run4.jsonl"), terminal_size=SIZE, press=["question_mark"])


def test_quit_modal_of_a_launched_run(snap_compare):
    assert snap_compare(replay_app("run4.jsonl", launched=True), terminal_size=SIZE, press=["q"])


def test_dashboard_wide_200x50(snap_compare):
    """200x50: the grid keeps the width its cells need; the alerts, memory and events take
    the rest, their lines unwrapped."""
    assert snap_compare(replay_app("straggler8.jsonl"), terminal_size=(200, 50))
