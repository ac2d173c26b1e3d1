"""A rank's child processes (its DataLoader workers) in its system samples: a rank at 17% of a
core whose two workers did its data work, each holding 400 MiB of its own, read as neither
(review 277). Real forked DataLoader workers, sampled as the reporter's heartbeat thread does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import msgspec
import torch
from torch.utils.data import DataLoader, Dataset

from helpers import pardash_env

from pardash.telemetry import schema
from pardash.telemetry.state import RankState
from pardash.telemetry.system import SystemSampler
from pardash.tui.rank_facts import system_facts


class Held(Dataset):
    """Each worker holds 64 MiB of its own (written: its pages, not the rank's)."""

    def __init__(self) -> None:
        self.cache = None

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i):
        if self.cache is None:
            self.cache = torch.ones(16 << 20)  # (float32: 64 MiB, in the worker)
        return torch.zeros(4)


def _sampled() -> tuple[dict, dict, dict]:
    """In a process of its own (a test's process may have children of other tests'): the
    sampler's figures alone, then with a DataLoader's two workers running, and again."""
    import psutil

    sampler = SystemSampler()
    ended = subprocess.Popen(["true"])  # (never waited for: a zombie, which holds nothing, review 280)
    while psutil.Process(ended.pid).status() != psutil.STATUS_ZOMBIE:
        pass
    alone = sampler.sample()
    loader = DataLoader(Held(), batch_size=4, num_workers=2, persistent_workers=True, prefetch_factor=2)
    it = iter(loader)
    for _ in range(4):  # (both workers have loaded, each its own cache)
        next(it)
    first = sampler.sample()
    for _ in range(8):
        next(it)
    again = sampler.sample()
    return tuple(msgspec.to_builtins(m) for m in (alone, first, again))


def test_a_ranks_dataloader_workers_are_counted_apart_from_it():
    code = f"import sys, json; sys.path.insert(0, {os.path.dirname(__file__)!r}); import test_system_children as t; print(json.dumps(t._sampled()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=pardash_env())
    assert out.returncode == 0, out.stderr[-2000:]
    alone, first, again = (msgspec.convert(m, schema.System) for m in json.loads(out.stdout.strip().splitlines()[-1]))
    assert (alone.children, alone.children_cpu_pct, alone.children_uss_bytes) == (None, None, None)
    assert first.children == 2
    assert first.children_uss_bytes >= 2 * (64 << 20), first  # (each worker's own 64 MiB)
    assert again.children == 2 and again.children_cpu_pct is not None
    # In the rank's detail: a row of their own.
    r = RankState(0)
    r.system = again
    rows = {name: (value, note) for name, value, note in system_facts(r)}
    assert rows["children"][0] == "2" and rows["children"][1][0].startswith("cpu ") and " MiB own" in rows["children"][1][0], rows
    compact = {name: value for name, value, _ in system_facts(r, compact=True)}
    assert compact["children"] == "2"
    # A sample of a log from before these figures: no row.
    r.system = schema.System(cpu_pct=12.0, rss_bytes=1 << 30)
    assert "children" not in {name for name, _, _ in system_facts(r)}


def test_the_report_says_the_most_memory_a_ranks_workers_held_of_their_own(tmp_path):
    import msgspec

    from pardash.telemetry.report import build_report, render_text

    t = 1.0e9
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, strategy="ddp", t=t) for r in (0, 1)]
    for s in range(1, 21):
        for r in (0, 1):
            records.append(schema.Step(run="r", rank=r, seq=2 * s - 1, step=s, step_s=0.02, samples=8, t=t + s,
                                       mem=schema.Mem(params_bytes=1 << 20, rss_bytes=300 << 20)))  # fmt: skip
            records.append(schema.System(run="r", rank=r, seq=2 * s, t=t + s, cpu_pct=17.0, rss_bytes=300 << 20, children=2,
                                         children_cpu_pct=180.0, children_uss_bytes=(800 + s + 10 * r) << 20))  # fmt: skip
    log = tmp_path / "run.jsonl"
    log.write_bytes(b"".join(schema.encode_json(msgspec.structs.replace(m, hseq=i + 1)) + b"\n" for i, m in enumerate(records)))
    rep = build_report(str(log))
    assert (rep["memory"]["children_bytes_max"], rep["memory"]["children_max"]) == (830 << 20, 2)
    line = [" ".join(x.split()) for x in render_text(rep).splitlines() if "child processes" in x]
    assert line == ["child processes' own memory (DataLoader workers: not in the RSS), largest rank 830.0 MiB in 2 processes"], line


def test_a_ranks_peak_rss_is_its_processes_high_water_mark_not_the_largest_after_a_step(tmp_path):
    # Review 299: on CPU the report's "peak (process RSS)" was the largest RSS read after a
    # step; an FSDP rank's all-gathers and activations within the steps took it higher (1.0 GiB
    # read, the kernel's VmHWM 1.12 GiB).
    from pardash.telemetry.report import build_report

    sampler = SystemSampler()
    before = sampler.sample()
    block = b"x" * (64 << 20)  # written: resident, then given back
    del block
    after = sampler.sample()
    assert before.rss_peak_bytes >= before.rss_bytes
    assert after.rss_peak_bytes >= before.rss_bytes + (60 << 20) > after.rss_bytes
    t = 1.0e9
    records = [schema.Hello(run="r", rank=r, seq=0, world_size=2, strategy="ddp", t=t) for r in (0, 1)]
    for s in range(1, 11):
        for r in (0, 1):
            records.append(schema.Step(run="r", rank=r, seq=2 * s - 1, step=s, step_s=0.02, samples=8, t=t + s,
                                       mem=schema.Mem(params_bytes=1 << 20, rss_bytes=(300 + s) << 20)))  # fmt: skip
            records.append(schema.System(run="r", rank=r, seq=2 * s, t=t + s, rss_bytes=300 << 20,
                                         rss_peak_bytes=(400 + 10 * r) << 20))  # fmt: skip
    log = tmp_path / "run.jsonl"
    log.write_bytes(b"".join(schema.encode_json(msgspec.structs.replace(m, hseq=i + 1)) + b"\n" for i, m in enumerate(records)))
    rep = build_report(str(log))
    assert [r["peak_bytes"] for r in rep["ranks"]] == [400 << 20, 410 << 20]
    assert rep["memory"]["peak_kind"] == "rss_hwm" and rep["memory"]["peak_bytes_max"] == 410 << 20
    # (another figure than an older log's largest RSS after a step: shown beside it, not judged)
    from pardash.telemetry.compare import compare_reports

    older = dict(rep, memory=dict(rep["memory"], peak_kind="rss"))
    assert any("peak memory is the process RSS after a step in A" in n for n in compare_reports(older, rep)["notes"])
