"""pardash against TraceML (traceml-ai on PyPI, the closest peer), the same script and the same
injected slowdown (issue 4, "Measure"; issue 5's start-to-exit and uninstrumented bars).

The script is demos/ddp_plain.py on 2 gloo ranks, rank 1 sleeping STRAGGLER_S a step in its data
path. pardash watches it unmodified (`pardash launch --headless --log X -- demos/ddp_plain.py`).
TraceML gets it the way its docs say for a plain loop: bench/scripts/ddp_traceml.py is the same
file plus ``import traceml_ai as traceml``, ``traceml.init(mode="auto")`` and
``with traceml.trace_step(model.module):`` around each step (same losses), launched with
``traceml run SCRIPT --nproc-per-node 2 --args ...``; its verdict is read from its own
``final_summary.json`` (``step_time.diagnosis.ranks``, ``primary_diagnosis``).

Measured in one run, runs alternating, medians:
- who each names: pardash's straggler verdicts in its log (`build_report`), TraceML's diagnosis;
- cost per step: steady steps/s (as rank 0 times steps 21..N, its last line) of the clean
  script plain under torchrun, under pardash and under TraceML, in runs of STEADY_STEPS (about
  ten seconds of steps: a 200-step run times 1.2 s, which one busy moment of the 2 cores moves
  by 10-30%), and the same with the slowdown; the ratio is the median of each round's ratio to
  plain (a round's runs are seconds apart and share the VM's drift);
- start to exit of the clean job (a short CPU job: a few seconds of steps), each tool's own start and
  final flush in;
- what TraceML makes of the unmodified demos/ddp_plain.py (steps it reports) against pardash.

TraceML is not a project dependency: `pip install traceml-ai` into the venv to run this; without
it the TraceML rows say "skipped" and the pardash/plain ones still run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .common import DEMO_RATE, Row

ROOT = Path(__file__).resolve().parents[1]
PLAIN_SCRIPT = str(ROOT / "demos" / "ddp_plain.py")
TRACEML_SCRIPT = str(ROOT / "bench" / "scripts" / "ddp_traceml.py")
STEP = re.compile(rb"^step (\d+) loss (\S+)")
BENCH = "vs TraceML"
STRAGGLER_RANK = 1
STRAGGLER_S = 0.04
STEADY_STEPS = 1500
"""Steps of the clean runs whose steady steps/s is compared."""
SKIP = "skipped: pip install traceml-ai"


@dataclass
class RunOut:
    wall: float
    code: int
    seen: dict[int, float] = field(default_factory=dict)
    last_loss: str | None = None
    out_dir: str = ""
    t0: float = 0.0
    timed: dict[tuple[int, int], float] = field(default_factory=dict)
    """Steps/s as rank 0 timed them, by (first, last) step (its last line)."""

    def ends(self) -> tuple[float | None, float | None]:
        """(start to rank 0's first step line, its last step line to exit), seconds."""
        if self.code != 0 or not self.seen:
            return None, None
        return self.seen[min(self.seen)] - self.t0, self.wall - (self.seen[max(self.seen)] - self.t0)

    def rate(self, steps: int, first: int = 20) -> float | None:
        """Steps/s from step ``first`` to ``steps``, as rank 0 timed them (the times its lines
        arrive here are no clock: pardash prints a headless run's output file every 0.1 s)."""
        if self.code != 0:
            return None
        return self.timed.get((first + 1, steps))


def traceml_available() -> bool:
    return importlib.util.find_spec("traceml_ai") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _traceml_cli() -> list[str]:
    exe = Path(sys.executable).with_name("traceml")  # the console script its docs use
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "traceml_ai.launcher.cli"]


def _script_args(steps: int, straggler: bool) -> list[str]:
    args = ["--steps", str(steps)]
    if straggler:
        args += ["--straggler-rank", str(STRAGGLER_RANK), "--straggler-s", str(STRAGGLER_S)]
    return args


def _cmd(tool: str, steps: int, straggler: bool, workdir: str, tag: str, script: str | None = None) -> tuple[list[str], str]:
    """The command line and where its output lands (pardash's log, TraceML's run folder)."""
    args = _script_args(steps, straggler)
    if tool == "plain":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", script or PLAIN_SCRIPT, *args], ""
    if tool == "pardash":
        log = os.path.join(workdir, f"{tag}.jsonl")
        return [sys.executable, "-m", "pardash", "launch", "--headless", "--nproc", "2", "--every", "600", "--log", log,
                "--runs-dir", workdir, "--", script or PLAIN_SCRIPT, *args], log  # fmt: skip
    logs = os.path.join(workdir, "traceml-logs")
    return [*_traceml_cli(), "run", script or TRACEML_SCRIPT, "--nproc-per-node", "2", "--master-port", str(_free_port()),
            "--aggregator-port", str(_free_port()), "--logs-dir", logs, "--run-name", tag, "--args", *args], os.path.join(logs, tag)  # fmt: skip


_runs = 0


def _run(tool: str, steps: int, straggler: bool, workdir: str, script: str | None = None) -> RunOut:
    global _runs
    _runs += 1
    tag = f"{tool}-{_runs}"
    cmd, out_dir = _cmd(tool, steps, straggler, workdir, tag, script)
    env = dict(os.environ)
    for k in ("PARDASH_ENDPOINT", "TRACEML_DISABLED"):
        env.pop(k, None)
    env["PYTHONUNBUFFERED"] = "1"
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=workdir)
    out = RunOut(wall=0.0, code=0, out_dir=out_dir, t0=t0)
    assert p.stdout is not None
    for line in p.stdout:
        m = STEP.match(line)
        if m:
            out.seen[int(m.group(1))] = time.perf_counter()
            out.last_loss = m.group(2).decode()
        elif m := DEMO_RATE.match(line):
            out.timed[(int(m.group(2)), int(m.group(3)))] = float(m.group(1))
    out.code = p.wait()
    out.wall = time.perf_counter() - t0
    return out


def pardash_verdict(log: str) -> dict:
    from pardash.telemetry.report import build_report

    rep = build_report(log)
    return {
        "named": sorted({s["rank"] for s in rep["stragglers"]}),
        "kind": ",".join(sorted({s["kind"] or "?" for s in rep["stragglers"]})),
        "first_step": min((s["step"] for s in rep["stragglers"] if s["step"] is not None), default=None),
        "steps": {r["rank"]: r["steps"] for r in rep["ranks"]},
    }


def traceml_verdict(run_dir: str) -> dict | None:
    """TraceML's own end-of-run diagnosis, from its final_summary.json."""
    path = Path(run_dir) / "final_summary.json"
    if not path.exists():
        return None
    d = json.loads(path.read_text())
    st = d.get("step_time") or {}
    diag = st.get("diagnosis") or {}
    meta = st.get("metadata") or {}
    prim = d.get("primary_diagnosis") or {}
    return {
        "named": sorted(diag.get("ranks") or []),
        "status": prim.get("status") or diag.get("status") or "?",
        "summary": prim.get("summary") or diag.get("summary") or "",
        "steps": meta.get("training_total_steps") or 0,
        "ranks_with_steps": meta.get("global_ranks_seen") or 0,
        "world": (d.get("meta") or {}).get("world_size"),
    }


def _med(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _pairs(a: list[float | None], b: list[float | None]) -> list[float]:
    """Each round's a/b: the two runs of a round are seconds apart and share the VM's drift
    (10-20 % over minutes), which a ratio of the medians of runs minutes apart does not."""
    return [x / y for x, y in zip(a, b) if x is not None and y]


def _f(x: float | None, fmt: str = ".1f") -> str:
    return "n/a" if x is None else format(x, fmt)


def _ratio(a: float | None, b: float | None, fmt: str = ".3f") -> str:
    return "n/a" if a is None or b is None or b == 0 else format(a / b, fmt)


def run(steps: int = 200, straggler_steps: int = 80, rounds: int = 3, steady_steps: int = STEADY_STEPS, steady_rounds: int = 5) -> tuple[list[Row], str]:
    have = traceml_available()
    tools = ["plain", "pardash"] + (["traceml"] if have else [])
    load0 = os.getloadavg()
    t_start = time.perf_counter()
    rate: dict[str, list] = {t: [] for t in tools}
    srate: dict[str, list] = {t: [] for t in tools}
    wall: dict[str, list] = {t: [] for t in tools}
    head: dict[str, list] = {t: [] for t in tools}
    tail: dict[str, list] = {t: [] for t in tools}
    loss: dict[str, set] = {t: set() for t in tools}
    pd_v: list[dict] = []
    tm_v: list[dict | None] = []
    failures: list[str] = []
    subprocess.run([sys.executable, "-c", "import torch.distributed.run"], check=False)  # warm the page cache
    with tempfile.TemporaryDirectory() as d:
        for i in range(rounds):
            order = tools if i % 2 == 0 else tools[::-1]
            for tool in order:  # the clean script: the whole job's start to exit
                r = _run(tool, steps, False, d)
                wall[tool].append(r.wall if r.code == 0 else None)
                h, t = r.ends()
                head[tool].append(h)
                tail[tool].append(t)
                loss[tool].add(r.last_loss)
                if r.code:
                    failures.append(f"{tool} clean exit {r.code}")
            for tool in order[::-1]:  # the clean script, longer: its steady steps/s
                r = _run(tool, steady_steps, False, d)
                rate[tool].append(r.rate(steady_steps))
                if r.code:
                    failures.append(f"{tool} steady exit {r.code}")
            for tool in order:  # the same script with rank 1 slowed: who is named, and steps/s
                r = _run(tool, straggler_steps, True, d)
                srate[tool].append(r.rate(straggler_steps))
                if r.code:
                    failures.append(f"{tool} straggler exit {r.code}")
                if tool == "pardash" and r.code == 0:
                    pd_v.append(pardash_verdict(r.out_dir))
                elif tool == "traceml":
                    tm_v.append(traceml_verdict(r.out_dir))
        for i in range(rounds, steady_rounds):  # more rounds of the steady rate: its target is 2 %
            for tool in tools if i % 2 else tools[::-1]:
                r = _run(tool, steady_steps, False, d)
                rate[tool].append(r.rate(steady_steps))
                if r.code:
                    failures.append(f"{tool} steady exit {r.code}")
        bare = None
        if have:  # TraceML on the unmodified demo script, the same slowdown
            r = _run("traceml", straggler_steps, True, d, script=PLAIN_SCRIPT)
            bare = traceml_verdict(r.out_dir)
            if r.code:
                failures.append(f"traceml unmodified exit {r.code}")
    load1 = os.getloadavg()
    elapsed = time.perf_counter() - t_start

    rows: list[Row] = []
    slow = f"rank {STRAGGLER_RANK} +{STRAGGLER_S * 1000:.0f} ms/step in its data path, {straggler_steps} steps"
    pd_named = [v["named"] for v in pd_v]
    pd_ok = bool(pd_v) and len(pd_v) == rounds and all(n == [STRAGGLER_RANK] for n in pd_named)
    pd_cell = (
        f"rank {','.join(map(str, pd_named[0])) or 'none'} ({pd_v[0]['kind']}), from step {pd_v[0]['first_step']}; "
        f"{sum(n == [STRAGGLER_RANK] for n in pd_named)}/{rounds} runs"
        if pd_v else "no log"
    )  # fmt: skip
    if have:
        good = [v for v in tm_v if v]
        tm_hits = sum(v["named"] == [STRAGGLER_RANK] for v in good)
        tm_cell = (
            f"TraceML: rank {','.join(map(str, good[0]['named'])) or 'none'} ({good[0]['status']}: {good[0]['summary']}), "
            f"end of run; {tm_hits}/{rounds} runs"
            if good else "TraceML: no final_summary.json"
        )  # fmt: skip
        same = "same rank" if good and pd_ok and tm_hits == rounds else "differ"
    else:
        tm_cell, same = f"TraceML {SKIP}", ""
    rows.append(Row(BENCH, f"straggler named ({slow})", pd_cell, tm_cell, same, f"rank {STRAGGLER_RANK} only", pd_ok))

    # steps/s: the medians of the runs, and as ratio the median of the rounds' pair ratios
    pairs = {kind: {t: _pairs(xs[t], xs["plain"]) for t in tools[1:]} for kind, xs in (("steady", rate), ("slowdown", srate))}
    plain_r, pd_r, tm_r = _med(rate["plain"]), _med(rate["pardash"]), _med(rate.get("traceml", []))
    pd_q, tm_q = _med(pairs["steady"]["pardash"]), _med(pairs["steady"].get("traceml", []))
    tm_txt = f"TraceML {_f(tm_r)} ({_f(tm_q, '.3f')})" if have else f"TraceML {SKIP}"
    rows.append(Row(BENCH, f"steps/s, clean demo DDP x2 ({steady_steps} steps)", _f(pd_r), f"plain {_f(plain_r)}; {tm_txt}",
                    _f(pd_q, ".3f"), ">= 0.98", None if pd_q is None else pd_q >= 0.98))  # fmt: skip
    plain_s, pd_s, tm_s = _med(srate["plain"]), _med(srate["pardash"]), _med(srate.get("traceml", []))
    pd_q, tm_q = _med(pairs["slowdown"]["pardash"]), _med(pairs["slowdown"].get("traceml", []))
    tm_txt = f"TraceML {_f(tm_s)} ({_f(tm_q, '.3f')})" if have else f"TraceML {SKIP}"
    rows.append(Row(BENCH, "steps/s, with the slowdown", _f(pd_s), f"plain {_f(plain_s)}; {tm_txt}", _f(pd_q, ".3f"), ">= 0.98",
                    None if pd_q is None else pd_q >= 0.98))  # fmt: skip
    plain_w, pd_w, tm_w = _med(wall["plain"]), _med(wall["pardash"]), _med(wall.get("traceml", []))
    tm_txt = f"TraceML {_f(tm_w, '.2f')} ({_ratio(tm_w, plain_w, '.2f')}x)" if have else f"TraceML {SKIP}"
    rows.append(Row(BENCH, f"start to exit, clean {steps}-step job (s)", _f(pd_w, ".2f"), f"plain {_f(plain_w, '.2f')}; {tm_txt}",
                    f"{_ratio(pd_w, plain_w, '.2f')}x", "<= 1.2x", None if pd_w is None or plain_w is None else pd_w / plain_w <= 1.2))  # fmt: skip
    pd_steps = pd_v[0]["steps"] if pd_v else {}
    pd_steps_txt = ", ".join(f"r{k} {v}" for k, v in sorted(pd_steps.items())) or "none"
    if have and bare:
        bare_txt = f"TraceML: {bare['steps']} steps, {bare['ranks_with_steps']}/{bare['world']} ranks ({bare['status']})"
    elif have:
        bare_txt = "TraceML: no final_summary.json"
    else:
        bare_txt = f"TraceML {SKIP}"
    rows.append(Row(BENCH, f"steps seen of the unmodified script ({straggler_steps}/rank)", pd_steps_txt, bare_txt, "",
                    f"{straggler_steps} per rank", bool(pd_steps) and all(v == straggler_steps for v in pd_steps.values())))  # fmt: skip
    if not have:
        rows.append(Row(BENCH, "TraceML", SKIP, "", "", "", None))

    def runs(xs: list, fmt: str) -> str:
        return ", ".join(_f(x, fmt) for x in xs)

    same_loss = all(len(v) == 1 for v in loss.values()) and len({next(iter(v)) for v in loss.values() if v}) == 1
    note = (
        f"vs TraceML: {rounds} alternating rounds of each tool (the clean script, {steps} steps: start to exit; {steady_steps} steps: "
        f"steady steps/s, {steady_rounds} rounds; {straggler_steps} steps with the slowdown: verdicts and steps/s), medians; steps/s as rank 0 timed steps "
        "21..N (its last line); the steps/s ratios are the median of each round's ratio to plain (a round's runs are seconds "
        "apart and share this VM's drift, as throughput's whole-run pairs). "
        + (
            f"TraceML ({_traceml_version()}) runs bench/scripts/ddp_traceml.py, demos/ddp_plain.py plus its documented "
            f"`traceml.init(mode=\"auto\")` and `with traceml.trace_step(model.module):` per step, under `traceml run SCRIPT "
            f"--nproc-per-node 2 --args ...` (summary mode, its default; its verdict comes at the end of the run, from "
            f"final_summary.json); "
            if have
            else f"TraceML {SKIP}; "
        )
        + f"pardash runs demos/ddp_plain.py unmodified. Same final loss on the clean runs under all "
        f"tools: {'yes' if same_loss else 'NO ' + str({k: sorted(v) for k, v in loss.items()})}. "
        f"Steady steps/s ({steady_steps}-step runs) plain {runs(rate['plain'], '.1f')}; pardash {runs(rate['pardash'], '.1f')}"
        + (f"; TraceML {runs(rate['traceml'], '.1f')}" if have else "")
        + f"; pardash/plain by round {runs(pairs['steady']['pardash'], '.3f')}"
        + (f"; TraceML/plain {runs(pairs['steady']['traceml'], '.3f')}" if have else "")
        + f". With the slowdown, pardash/plain by round {runs(pairs['slowdown']['pardash'], '.3f')}"
        + f". Start-to-exit plain {runs(wall['plain'], '.2f')} s; pardash {runs(wall['pardash'], '.2f')} s"
        + (f"; TraceML {runs(wall['traceml'], '.2f')} s" if have else "")
        + ". Of which start to step 1 / last step to exit (medians): "
        + "; ".join(f"{t} {_f(_med(head[t]), '.1f')} / {_f(_med(tail[t]), '.1f')} s" for t in tools)
        + ". "
        + (f"TraceML verdicts: {'; '.join(v['status'] + ' ' + str(v['named']) if v else 'none' for v in tm_v)}. " if have else "")
        + (f"Failures: {'; '.join(failures)}. " if failures else "")
        + f"Load average (1 min) {load0[0]:.1f} at start, {load1[0]:.1f} at end, on {os.cpu_count()} cores; bench took {elapsed:.0f} s."
    )
    return rows, note


def _traceml_version() -> str:
    try:
        from importlib.metadata import version

        return f"traceml-ai {version('traceml-ai')}"
    except Exception:
        return "traceml-ai ?"


if __name__ == "__main__":
    from .common import standalone

    sys.exit(standalone(__spec__.name, __doc__, lambda _ns: run()))
