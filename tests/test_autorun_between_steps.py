"""The DataLoader's time told from the script's own work between steps, under the zero-code hooks.

The data phase runs from the end of a step to the next forward: all a rank does between its
steps. A script whose DataLoader took microseconds and that slept 10 ms after its optimizer
step read "data 10.4 ms", a report "input-bound ... more DataLoader workers", and, rank 1 hung
in its own code after its batch came, "rank 1 stalled in data" (review 308); rank 1 doing 20
matmuls before its forward, "a straggler (data)" (review 307). Each step now says how much of
its data time was inside the DataLoader (``loader_s``), the heartbeat says "loader" while the
rank is in it, and the hub's verdicts tell the two apart.

Real 2-rank launches (gloo) of tests/scripts/between_steps.py; the heartbeat's phase on this
process's torch with a real DataLoader; the hub's words on states built from messages."""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from helpers import pardash_env, terminate, wait_for
from instrumented import Recording, instrumented
from pardash.telemetry import schema
from pardash.telemetry import analysis
from pardash.telemetry.analysis import Detector, hang_causes, stuck_ranks
from pardash.telemetry.logreader import load_log
from pardash.telemetry.state import RunState
from pardash.trainer import epochs

SCRIPT = str(Path(__file__).resolve().parent / "scripts" / "between_steps.py")
OWN_WORK = "(its own work between steps, not its DataLoader)"
LOADER_PHASE = "loader"
"""What the heartbeat says while the rank is in its DataLoader (a wire value, as "data")."""


def _launch(tmp_path: Path, mode: str) -> list:
    log = tmp_path / f"{mode}.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "2", "--headless", "--log", str(log),
         "--runs-dir", str(tmp_path / "runs"), "--", SCRIPT, mode],
        capture_output=True, text=True, timeout=240, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return load_log(log)[0]


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """mode -> the messages of its launch (one launch per mode, for the tests that read it)."""
    runs: dict[str, list] = {}

    def get(mode: str) -> list:
        if mode not in runs:
            runs[mode] = _launch(tmp_path_factory.mktemp(mode), mode)
        return runs[mode]

    return get


def _steps(msgs: list, rank: int) -> list[schema.Step]:
    return sorted((m for m in msgs if isinstance(m, schema.Step) and m.rank == rank), key=lambda m: m.step)


def _stragglers(msgs: list) -> list[tuple[int, str, str]]:
    return [(m.rank, m.cause, m.message) for m in msgs if isinstance(m, schema.Verdict) and m.verdict == "straggler"]


SHARED = pytest.mark.xdist_group("between_steps")


@pytest.mark.slow
@SHARED
def test_a_sleep_after_the_step_with_a_fast_loader_is_its_own_work_not_the_loaders(launched):
    # Review 308's shape: the DataLoader takes microseconds, rank 1 sleeps 30 ms after each
    # optimizer step. Its data time is the sleep; its loader time a sliver of it.
    msgs = launched("own")
    for rank in (0, 1):
        steps = _steps(msgs, rank)
        assert [s.step for s in steps] == list(range(1, 41))
        assert all(s.loader_s is not None and 0 <= s.loader_s <= s.data_s for s in steps), [(s.data_s, s.loader_s) for s in steps]
    slow = _steps(msgs, 1)[2:]
    data = statistics.median(s.data_s for s in slow)
    loader = statistics.median(s.loader_s for s in slow)
    quick = statistics.median(s.data_s for s in _steps(msgs, 0)[2:])
    assert data > 10 * quick  # (the sleep is rank 1's data time, as before: data_s keeps its meaning)
    assert loader < data / 10, (loader, data)
    # The straggler is named for what it does: it read "(data loading or its own work between steps)".
    [(rank, cause, message)] = _stragglers(msgs)
    assert (rank, cause) == (1, "data") and OWN_WORK in message, message


@pytest.mark.slow
@SHARED
def test_a_slow_dataset_is_the_loaders_time(launched):
    # Rank 1's __getitem__ sleeps: its data time is inside the DataLoader.
    msgs = launched("loader")
    steps = _steps(msgs, 1)
    assert all(s.loader_s is not None and s.loader_s <= s.data_s for s in steps)
    data = statistics.median(s.data_s for s in steps[2:])
    loader = statistics.median(s.loader_s for s in steps[2:])
    assert loader > 0.8 * data, (loader, data)
    [(rank, cause, message)] = _stragglers(msgs)
    assert (rank, cause) == (1, "data") and "(data loading)" in message, message


@pytest.mark.slow
@SHARED
def test_without_a_dataloader_no_step_says_a_loader_time(launched):
    # Batches made in the loop: nothing tells the script's data from its other work.
    msgs = launched("none")
    assert all(s.loader_s is None for r in (0, 1) for s in _steps(msgs, r))
    assert all(b'"loader_s"' not in schema.encode_json(s) for s in _steps(msgs, 1))  # (omitted, as the other unknown figures)
    [(rank, cause, message)] = _stragglers(msgs)
    assert (rank, cause) == (1, "data") and "(data loading or its own work between steps)" in message, message


@pytest.mark.slow
def test_a_rank_hung_in_its_own_code_between_steps_is_not_said_stalled_in_data(tmp_path):
    # After step 10, rank 0 hangs in its DataLoader and rank 1 in its own code after its
    # optimizer step (review 308: a sleep after its batch came read "rank 1 stalled in data
    # (the likely cause of the hang)").
    log = tmp_path / "run.jsonl"
    said: dict[int, tuple[str, str]] = {}

    def both_stalled() -> bool:
        if log.exists():
            said.update((m.rank, (m.cause, m.message)) for m in load_log(log)[0] if isinstance(m, schema.Verdict) and m.verdict == "stalled")
        return len(said) == 2

    with open(tmp_path / "out.txt", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pardash", "launch", "--nproc", "2", "--headless", "--log", str(log),
             "--runs-dir", str(tmp_path / "runs"), "--", SCRIPT, "hang"],
            stdout=out, stderr=subprocess.STDOUT, env=pardash_env(), cwd=tmp_path,
        )  # fmt: skip
        try:
            try:
                wait_for(both_stalled, timeout_s=120, poll_s=0.2)
            except AssertionError:
                raise AssertionError((tmp_path / "out.txt").read_text()[-3000:]) from None
        finally:
            terminate(proc)
    assert said[0][0] == said[1][0] == "data"  # (the phase: the gap between steps, as data_s)
    assert said[0][1].startswith("rank 0 stalled in data after step 10 ("), said
    assert said[1][1].startswith("rank 1 stalled between steps, in its own code (not in its DataLoader) after step 10 ("), said


class _Rows(Dataset):
    """Rows whose loading notes the phase the heartbeat says meanwhile."""

    def __init__(self, rep) -> None:
        self.rep, self.seen = rep, []

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i):
        self.seen.append(self.rep.phases[-1] if self.rep.phases else "")
        return torch.randn(8), torch.randn(4)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_the_heartbeat_says_loader_only_while_the_dataloader_is_asked(accumulate):
    # What the hub names a stalled rank's phase from: "loader" inside the DataLoader's
    # __next__, "data" in the script's own code between steps (its logging, a sleep). With
    # gradient accumulation, the batch of a step's second micro-batch too.
    rep = Recording()
    with instrumented(rep) as inst:
        rows = _Rows(rep)
        model = nn.Linear(8, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        between = []
        for i, (x, y) in enumerate(DataLoader(rows, batch_size=4)):
            F.mse_loss(model(x), y).backward()
            if (i + 1) % accumulate == 0:
                opt.step()
                opt.zero_grad()
                between.append(rep.phases[-1])  # (the script's own code after its step)
        inst.finish()
    # (the first step's first batch too: the step begins as it is asked for)
    assert len(rows.seen) == 64 and set(rows.seen) == {"loader"}, rows.seen
    assert set(between) == {"data"}, between
    assert len(rep.steps) == 16 // accumulate
    assert all(s["loader_s"] is not None and 0 <= s["loader_s"] <= s["data_s"] for s in rep.steps)


def test_two_optimizers_each_step_has_its_loader_time():
    # A GAN's round of two optimizer steps: its step is cut at the second's post-hook and
    # published when the round ends, a step later; the batch asked for after the cut is the
    # next step's.
    rep = Recording()
    with instrumented(rep) as inst:
        d, g = nn.Linear(8, 4), nn.Linear(8, 8)
        od, og = torch.optim.SGD(d.parameters(), lr=0.01), torch.optim.SGD(g.parameters(), lr=0.01)
        for x, _y in DataLoader(_Rows(rep), batch_size=4):
            F.mse_loss(d(x), torch.zeros(4, 4)).backward()
            od.step()
            od.zero_grad()
            d(g(x)).pow(2).mean().backward()
            og.step()
            og.zero_grad()
        inst.finish()
    assert len(rep.steps) == 16
    assert all(s["loader_s"] is not None and 0 <= s["loader_s"] <= s["data_s"] for s in rep.steps), rep.steps


def _hung(phase: str, loader_s: float | None) -> RunState:
    st = RunState()
    for r in range(2):
        st.apply(schema.Hello(rank=r, world_size=2, strategy="ddp", source="auto"), 0.0)
        st.apply(schema.Step(rank=r, step=40, step_s=0.01, data_s=0.008, loader_s=loader_s), 0.0)
        st.apply(schema.Heartbeat(rank=r, step=40, phase="sync" if r == 0 else phase), 0.0)
    return st


@pytest.mark.parametrize(
    "phase, loader_s, words",
    [
        ("data", 0.0001, "rank 1 stalled between steps, in its own code (not in its DataLoader) after step 40"),
        (LOADER_PHASE, 0.0001, "rank 1 stalled in data after step 40"),
        ("data", None, "rank 1 stalled in data after step 40"),  # (no DataLoader, or a rank from before loader_s)
    ],
)
def test_the_hub_says_where_between_steps_a_rank_stalled(phase, loader_s, words):
    st = _hung(phase, loader_s)
    det = Detector()
    assert det.update(st, 1.0) == []
    for r in range(2):
        st.ranks[r].last_seen = 9.0
    out = det.update(st, 9.5)
    # Said first, as the likely cause, whichever: its phase is its data phase (no collective in it).
    assert [(v.rank, v.verdict, v.cause) for v in out] == [(1, "stalled", "data"), (0, "stalled", "sync")]
    assert out[0].message.startswith(words + " ("), out[0].message


def test_a_rank_gone_silent_in_its_dataloader_is_one_stuck_in_its_data():
    st = _hung(LOADER_PHASE, 0.0001)
    for v in (schema.Verdict(rank=0, verdict="stalled", cause="sync", step=40), schema.Verdict(rank=1, verdict="silent", step=40)):
        st.apply(v, 9.0)
    assert sorted(stuck_ranks(st)) == [(0, "stalled", 40, "sync"), (1, "silent", 40, "data")]
    assert hang_causes(stuck_ranks(st)) == {1}
    # (the hub's name for it is the ranks')
    assert getattr(analysis, "LOADER_PHASE", None) == getattr(epochs, "LOADER_PHASE", None) == LOADER_PHASE


@pytest.mark.parametrize(
    "data_lead, loader_lead, auto, words",
    [
        (0.030, 0.0002, True, "its own work between steps, not its DataLoader"),
        (0.030, 0.029, True, "data loading"),
        (0.030, 0.016, True, "data loading"),  # (half of it or more: its loader's)
        (0.030, None, True, "data loading or its own work between steps"),  # (no DataLoader)
        (0.030, None, False, "data loading"),  # (the bundled trainer: its data phase is its loader)
    ],
)
def test_what_a_data_straggler_is_slow_at(data_lead, loader_lead, auto, words):
    # (what the live verdict says, and the report may say of an episode from its steps)
    from pardash.telemetry.stragglers import data_words

    assert data_words(data_lead, loader_lead, auto) == words
