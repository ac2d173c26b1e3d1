"""A replay's seek (`>`, `--start end`, `}`) makes the frames on its way lean, and lands on the
state a replay that made every frame in full has: the ranks' figures, their medians, history
and trend, the events and verdicts, the hub's counts."""

from __future__ import annotations

import dataclasses
import gzip
import math
import shutil
from collections import deque
from pathlib import Path

import msgspec
import pytest

from pardash.telemetry import keyframes
from pardash.telemetry.client import NullDetector, ReplaySource
from pardash.telemetry.hubcore import HubCore
from pardash.telemetry.logreader import LogCursor, read_log
from pardash.telemetry.ring import Ring

DATA = Path(__file__).parent / "data"
RECORDED = ["restart_late_words", "fsdp4_crash", "ddp4_straggler", "real_fsdp2", "real_ddp2_restart"]
"""Logs of real runs (tests/data/make_logs.py): torchrun restarting ranks whose last words come
late, a crash, a straggler, a clean run, and a restarted run going on after its restart
(real_ddp2_restart: ``pardash launch --strategy ddp --nproc 2 --model mlp --steps 60 --headless
--inject-crash 1@20 --max-restarts 1``)."""


def plain(obj):
    """``obj`` as plain data to compare, every field of it (the receiver's clock left out)."""
    if isinstance(obj, float):
        return "nan" if math.isnan(obj) else obj
    if obj is None or isinstance(obj, (int, str, bool, bytes)):
        return obj
    if isinstance(obj, msgspec.Struct):
        return plain(msgspec.structs.asdict(obj))
    if isinstance(obj, Ring):
        return obj.columns_bytes()
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items() if k != "last_seen"}
    if isinstance(obj, (list, tuple, deque)):
        return [plain(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if dataclasses.is_dataclass(obj):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    slots = getattr(type(obj), "__slots__", None)
    if slots:
        return {s: plain(getattr(obj, s, None)) for s in slots if s != "last_seen"}
    return plain(vars(obj))


def shown(src: ReplaySource) -> dict:
    """What a viewer of the replay has: its state, the hub's counts, where it is."""
    st = src.state
    return {
        "state": plain(st),
        "trend": st.trend.points(),
        "statuses": {r.rank: r.status for r in st.ranks.values()},
        "stats": plain(msgspec.structs.replace(src.stats, ingest_hz=0.0)),
        "fseq": src.fseq,
        "frames": src.frames_applied,
        "at": src.played_s,
        "ended_early": src.ended_early,
    }


@pytest.fixture
def full_frames(monkeypatch):
    """Every frame made in full, a seek's too (the replay as it was before its seeks made lean
    frames): the reference a seek must land on."""

    def full():
        tick = HubCore.tick
        monkeypatch.setattr(HubCore, "tick", lambda self, now, lean=False: tick(self, now))

    return full


def _seeks(path: str, positions: list, full_frames=None) -> list[dict]:
    src = ReplaySource(path)
    out = []
    for pos in positions:
        src.seek(src.duration_s if pos == "end" else pos)
        out.append(shown(src))
    src.close()
    return out


@pytest.mark.parametrize("name", RECORDED)
def test_a_seek_lands_where_full_frames_do(name, full_frames, tmp_path):
    """To the end, back (from a keyframe or the log's start), into the middle, on again: each
    lands on the state of a replay whose every frame was made in full; a gzip log's the same."""
    path = str(DATA / f"{name}.jsonl")
    positions = ["end", 0.5, 3.0, "end", 1.0, 7.5]
    lean = _seeks(path, positions)
    gz = tmp_path / f"{name}.jsonl.gz"
    with open(path, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    lean_gz = _seeks(str(gz), positions)
    full_frames()
    full = _seeks(path, positions)
    for pos, a, b, c in zip(positions, lean, full, lean_gz, strict=True):
        assert a == b, f"{name}: a seek to {pos} differs from full frames"
        assert c == b, f"{name} (gzip): a seek to {pos} differs from full frames"


def _big_log(path: Path) -> str:
    from bench.replay_seek import write_log

    write_log(str(path), ranks=16, seconds=60)
    return str(path)


def test_a_seek_by_keyframes_lands_where_full_frames_do(full_frames, tmp_path, monkeypatch):
    """A log long enough for keyframes (kept on a seek's way, the lean frames worked out first):
    seeks back to them and on land where full frames do; so does the TUI's seek, made a poll at a
    time (``seek_soon`` then ``seek_now`` until there)."""
    monkeypatch.setattr(keyframes, "LEAST_BYTES", 1 << 16)
    monkeypatch.setattr(keyframes, "EVERY_S", 5.0)
    monkeypatch.setattr(keyframes, "PLAY_PER_KEEP", 0.0)  # (where they fall by the log alone, not the wall clock)
    path = _big_log(tmp_path / "run.jsonl")
    positions = ["end", 55.0, 12.3, 40.0, "end", 0.05]

    def polled(path: str) -> list[dict]:
        src = ReplaySource(path)
        monkeypatch.setattr("pardash.telemetry.client.SEEK_BUDGET_S", 0.0)  # (a frame a poll: every way back in)
        out = []
        polls = 0
        for pos in positions:
            src.seek_soon(src.duration_s if pos == "end" else pos)
            while src.seeking:
                src.seek_now()
                polls += 1
            out.append(shown(src))
        assert polls > 100 and len(src.keyframes) >= 2
        return out

    lean = _seeks(path, positions)
    lean_polled = polled(path)
    full_frames()
    full = _seeks(path, positions)
    for pos, a, b, c in zip(positions, lean, full, lean_polled, strict=True):
        assert a == b, f"a seek to {pos} differs from full frames"
        assert c == b, f"a seek to {pos}, a poll at a time, differs from full frames"


@pytest.mark.parametrize("name", RECORDED)
def test_replay_routine_takes_records_as_replay_does(name):
    """The core's short path for the bulk of a log (steps, system samples, heartbeats) leaves the
    state, and the frames, that taking each record the general way does."""
    records = list(read_log(DATA / f"{name}.jsonl"))
    copies = list(read_log(DATA / f"{name}.jsonl"))
    general = HubCore(detector=NullDetector())  # type: ignore[arg-type]
    short = HubCore(detector=NullDetector())  # type: ignore[arg-type]
    short_path = 0
    for n, (a, b) in enumerate(zip(records, copies, strict=True), 1):
        general.replay(a, 5.0)
        hseq = short.hseq
        short.replay_routine(b, 5.0)
        short_path += short.hseq == hseq + 1 and type(b).__name__ in ("Step", "System", "Heartbeat")
        if n % 7 == 0:
            fa, fb = general.tick(1.0), short.tick(1.0)
            assert plain(fa.messages) == plain(fb.messages) and fa.smooth == fb.smooth
    assert short_path > len(records) // 2
    for k in ("received", "hseq"):
        assert getattr(general, k) == getattr(short, k)
    assert plain(general.state) == plain(short.state)


def _general_calls(core: HubCore, records: list) -> list[bool]:
    """Play ``records`` into ``core`` by its short path where it may; for each, whether it went
    the general way (``HubCore.replay``)."""
    went = []
    general = core.replay
    calls = [0]

    def counted(msg, now):
        calls[0] += 1
        general(msg, now)

    core.replay = counted  # type: ignore[method-assign]
    for msg in records:
        before = calls[0]
        core.replay_routine(msg, 5.0)
        went.append(calls[0] != before)
    return went


def test_the_short_path_holds_after_a_restart():
    """After torchrun restarted the ranks, their new processes' steps, samples and heartbeats go
    the short way again (a days-long log restarted early took the rest of it the general way, a
    seek's speed-up lost), while a late word of the old process (numbered past its last, older
    than the new hello), come after the new process's hello, still goes the general way and is
    the old process's: the state is the one taking every record the general way leaves."""
    path = DATA / "real_ddp2_restart.jsonl"
    records = list(read_log(path))
    kinds = [type(m).__name__ for m in records]
    hellos = [i for i, k in enumerate(kinds) if k == "Hello"]
    assert len(hellos) == 4  # (two ranks, two processes each)
    # Rank 1's old process's last step, error and exit come after the new processes' hellos, as
    # they may when they were still on their way as it died.
    late = [i for i, m in enumerate(records[: hellos[2]]) if m.rank == 1 and m.seq >= 0 and i > hellos[1]][-3:]
    assert [kinds[i] for i in late] == ["Step", "Event", "Event"]

    def moved(records: list) -> list:
        kept = [m for i, m in enumerate(records) if i not in late]
        at = hellos[3] + 1 - len(late)
        return kept[:at] + [records[i] for i in late] + kept[at:]

    for log in (lambda: list(read_log(path)), lambda: moved(list(read_log(path)))):
        short, general = HubCore(detector=NullDetector()), HubCore(detector=NullDetector())  # type: ignore[arg-type]
        mine = log()
        went = _general_calls(short, mine)
        for msg in log():
            general.replay(msg, 5.0)
        assert plain(general.state) == plain(short.state)
        assert general.received == short.received and general.hseq == short.hseq
        restarted = max(i for i, m in enumerate(mine) if type(m).__name__ == "Hello")
        new_hello_t = {m.rank: m.t for m in mine[: restarted + 1] if type(m).__name__ == "Hello"}  # (the last of each)
        after = [(m.t < new_hello_t[m.rank], g) for m, g in zip(mine[restarted + 1 :], went[restarted + 1 :], strict=True)
                 if type(m).__name__ in ("Step", "System", "Heartbeat")]  # fmt: skip
        assert len(after) > 100
        old = [g for was_old, g in after if was_old]
        assert all(old) and not any(g for was_old, g in after if not was_old)
    assert len(old) == 1 and short.state.ranks[1].step_before == 19
    assert short.state.ranks[1].seq.lost == 0


def test_cursor_reads_straight_and_marks_the_same(tmp_path):
    """A log not followed is read straight from its file (no limit to hold to): the bytes read
    up to each record, a mark and a go back to it, and a limit set later are as before."""
    path = DATA / "fsdp4_crash.jsonl"
    ends = []
    at = 0
    with open(path, "rb") as fh:
        for line in fh:
            at += len(line)
            ends.append(at)
    cursor = LogCursor(path)
    offsets = []
    marks = {}
    n = 0
    while (msg := cursor.peek()) is not None:
        offsets.append(cursor.offset)
        if n in (5, 100):
            marks[n] = (cursor.mark(), msgspec.json.encode(msg))
        cursor.take()
        n += 1
    assert offsets == ends[: len(offsets)] and n == len(ends)
    for n, (mark, raw) in marks.items():
        cursor.go_back(mark)
        assert msgspec.json.encode(cursor.peek()) == raw and cursor.offset == ends[n]
    cursor.go_back(marks[5][0])
    cursor.upto = ends[8]  # (a log followed again: read no further than its whole lines)
    taken = 0
    while cursor.take() is not None:
        taken += 1
    assert taken == 4 and cursor.offset == ends[8]
    cursor.close()


def test_a_seeks_frames_on_its_way_are_lean(monkeypatch):
    """The frames on a seek's way work out neither the ranks' medians nor the hub's counts (a
    fifth of a seek's time, for frames the screen does not show); the replay's state has both
    once it is there, and a play (not a seek) makes every frame in full."""
    made = []
    apply_frame = ReplaySource.apply_frame

    def keep(self, frame):
        made.append(frame)
        apply_frame(self, frame)

    monkeypatch.setattr(ReplaySource, "apply_frame", keep)
    src = ReplaySource(str(DATA / "ddp4_straggler.jsonl"))
    src.seek(src.duration_s)
    stepped = [f for f in made if any(type(m).__name__ == "Step" for m in f.messages)]
    assert len(stepped) > 50
    assert sum(1 for f in stepped if f.smooth) < len(stepped) // 10
    assert len({id(f.stats) for f in made}) < len(made) // 10
    assert all(r.smooth is not None for r in src.state.ranks.values())
    assert src.stats.received == src.core.received

    made.clear()
    src.seek(1.0)
    src._advance(src.t_start + 10.0)  # (a play's frames: as a poll makes them, without its wall clock)
    stepped = [f for f in made if any(type(m).__name__ == "Step" for m in f.messages)]
    assert len(stepped) > 50 and sum(1 for f in stepped if f.smooth) > len(stepped) * 9 // 10
