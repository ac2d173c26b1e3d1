"""``pardash report A --compare B`` says what changed between two runs (review 307): what was set
otherwise (config, command, versions, devices, steps planned), each run's stragglers by rank,
cause and cost, a change inside the runs' own spread as "within noise", a log of an older pardash,
and a run that took no step, which leaves nothing to compare."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import zmq

from helpers import identity, pardash_env, wait_for
from pardash import __version__
from pardash.telemetry import schema
from pardash.telemetry.compare import compare_reports, render_compare_markdown, render_compare_text
from pardash.telemetry.report import build_report
from pardash.telemetry.report_render import comm_meaning

DATA = Path(__file__).resolve().parent / "data"
T0 = 1_700_000_000.0


def _config(**over) -> dict:
    """The bundled trainer's config as its hello sends it (the keys that matter here)."""
    return {"strategy": "ddp", "model": "gpt", "n_layer": 2, "n_embd": 64, "steps": 100, "batch_size": 16, "lr": 0.003,
            "seed": 1337, "total_steps": 100} | over  # fmt: skip


def _write(path: Path, *, steps: int = 100, ranks: int = 2, config: dict | None = None, version: str = __version__,
           step_s=lambda n, r: 0.02, data_s=lambda n, r: 0.002, comm_s=lambda n, r: 0.003, samples: int = 16,
           torch_version: str = "2.5.1", hello: bool = True, exit_code: int = 0) -> str:  # fmt: skip
    """A log as a hub records one of the bundled trainer's runs: each rank's hello, its steps
    (``step_s(n, rank)`` seconds, with data and comm phases), and its exit."""
    lines, t, seq = [], T0, dict.fromkeys(range(ranks), 0)

    def add(msg):
        msg.seq, seq[msg.rank] = seq[msg.rank], seq[msg.rank] + 1
        lines.append(schema.encode_json(msg) + b"\n")

    if hello:
        cfg = _config() if config is None else config
        for r in range(ranks):
            add(schema.Hello(rank=r, run=path.stem, t=t, world_size=ranks, pid=100 + r, host="node0", strategy=cfg.get("strategy", "ddp"),
                             torch_version=torch_version, pardash_version=version, params_count=1000, source="trainer", config=cfg))  # fmt: skip
    for n in range(1, steps + 1):
        t += max(step_s(n, r) for r in range(ranks))
        for r in range(ranks):
            s = step_s(n, r)
            add(schema.Step(rank=r, run=path.stem, t=t, step=n, step_s=s, data_s=data_s(n, r), forward_s=s / 4, backward_s=s / 3,
                            comm_s=comm_s(n, r), self_s=s / 3, samples=samples, loss=2.0 - n / steps))  # fmt: skip
    for r in range(ranks):
        add(schema.Event(rank=r, run=path.stem, t=t + 0.1, name="exit", code=exit_code, step=steps))
    path.write_bytes(b"".join(lines))
    return str(path)


def _report(tmp_path: Path, name: str, **kw) -> dict:
    return build_report(_write(tmp_path / f"{name}.jsonl", **kw))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pardash", "report", *args], capture_output=True, text=True, timeout=120, env=pardash_env())


def _rows(cmp: dict) -> dict:
    return {r["metric"]: r for r in cmp["rows"]}


# -- 1. what the user changed --------------------------------------------------------------


def test_a_bigger_batch_is_said_and_its_longer_steps_are_not_judged_worse(tmp_path):
    # --batch-size 64 against 16 read "step time 26.0 ms 63.5 ms +143.9% worse", "fwd +397.9%
    # worse", with no word of the batch (samples/s rose 95%).
    a = _write(tmp_path / "b16.jsonl")
    b = _write(tmp_path / "b64.jsonl", config=_config(batch_size=64), samples=64, step_s=lambda n, r: 0.05)
    p = _cli(a, "--compare", b)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "what differs (A -> B):" in lines and "  batch_size 16 -> 64" in lines, p.stdout
    step = next(line for line in lines if line.startswith("step time"))
    assert step.split()[-1] == "+150.0%", step  # shown, with no verdict
    fwd = next(line for line in lines if line.startswith("  fwd"))
    assert fwd.split()[-1].endswith("%"), fwd
    sps = next(line for line in lines if line.startswith("samples/s (some rank"))
    assert sps.split()[-1] == "better", sps
    assert "a step holds other numbers of samples (A 32, B 128, every rank's)" in " ".join(p.stdout.split())
    md = _cli(a, "--compare", b, "--format", "markdown").stdout
    assert "## what differs (A → B)" in md and "- batch\\_size 16 → 64" in md, md
    cmp = json.loads(_cli(a, "--compare", b, "--format", "json").stdout)
    assert {"what": "batch_size", "a": "16", "b": "64"} in cmp["differs"]
    assert cmp["samples_a_step"] == {"a": 32, "b": 128}
    rows = _rows(cmp)
    assert rows["median_step_s"]["verdict"] == "" and rows["phase:forward_s"]["verdict"] == ""
    assert rows["samples_per_s"]["verdict"] == "better"


def test_a_bigger_model_torch_devices_and_a_scripts_arguments_are_said(tmp_path):
    # --n-embd 128 --n-layer 4 read only "the runs train different models (A 106,240 parameters, B 805,632)".
    a = _report(tmp_path, "small")
    b = _report(tmp_path, "big", config=_config(n_embd=128, n_layer=4), torch_version="2.6.0")
    b["devices"] = [{"host": "gpu1", "device": "cuda", "device_name": "NVIDIA H100", "ranks": 2}]
    differs = {d["what"]: (d["a"], d["b"]) for d in compare_reports(a, b)["differs"]}
    assert differs == {"n_layer": ("2", "4"), "n_embd": ("64", "128"), "torch": ("2.5.1", "2.6.0"),
                       "devices": ("2 x cpu (cpu)", "2 x NVIDIA H100 (cuda)"), "hosts": ("node0", "gpu1")}  # fmt: skip
    # A script (no config): its command line's arguments that differ, and its words.
    for rep, cmd in ((a, ["python", "train.py", "--lr", "0.01", "--amp"]), (b, ["python", "train_b.py", "--lr=0.1", "--epochs", "3"])):
        rep["config"], rep["command"] = {}, cmd
    differs = {d["what"]: (d["a"], d["b"]) for d in compare_reports(a, b)["differs"]}
    assert differs["command"] == ("python train.py", "python train_b.py")
    assert (differs["--lr"], differs["--amp"], differs["--epochs"]) == (("0.01", "0.1"), ("set", "(not set)"), ("(not set)", "3"))
    # The same run twice: nothing differs, and it says so.
    text = render_compare_text(compare_reports(a, json.loads(json.dumps(a))))
    assert "what differs: nothing the logs record" in text


# -- 2. stragglers by rank, cause and cost ----------------------------------------------------


def test_each_runs_stragglers_are_named_and_another_rank_is_a_change():
    # A rank 3 (data) straggler against none read only "straggler verdicts 0 1 +1 worse"; moved
    # from rank 0 (data) to rank 1 (compute) it read "1 1 0 same".
    a = build_report(str(DATA / "ddp4_straggler.jsonl"))
    (s,) = a["stragglers"]
    assert (s["rank"], s["kind"]) == (2, "data")
    clean = json.loads(json.dumps(a)) | {"stragglers": []}
    cmp = compare_reports(clean, a)
    each = s["cost_total_s"] / s["steps_charged"]
    said = f"rank 2 (data) from step {s['since_step']}, cleared at step {s['cleared_step']}: the others waited {each * 1e3:.1f} ms a step"
    assert cmp["stragglers"]["a"] == [] and cmp["stragglers"]["b"][0].startswith(said), cmp["stragglers"]
    text = render_compare_text(cmp)
    assert "stragglers (as each run's report names them):\n  A: none\n  B: " + said in text, text
    moved = json.loads(json.dumps(a))
    moved["stragglers"][0] |= {"rank": 1, "kind": "compute"}
    assert _rows(compare_reports(a, moved))["stragglers"]["verdict"] == "different"
    assert _rows(compare_reports(a, json.loads(json.dumps(a))))["stragglers"]["verdict"] == "same"


def test_an_input_bound_run_is_said_in_the_comparison(tmp_path):
    a = _report(tmp_path, "fed")
    b = _report(tmp_path, "starved", data_s=lambda n, r: 0.015)
    assert b["data_loading"]["input_bound"] and not a["data_loading"]["input_bound"]
    text = render_compare_text(compare_reports(a, b))
    assert "as each run's report says it:\n  A: none\n  B: data loading 75% of the ranks' step time: input-bound" in text, text


def test_all_ranks_adds_each_ranks_medians(tmp_path):
    # Phase rows are medians over ranks: rank 1's data loading 5x slower read "data same".
    a = _report(tmp_path, "even", ranks=4)
    b = _report(tmp_path, "rank1", ranks=4, data_s=lambda n, r: 0.010 if r == 1 else 0.002)
    assert _rows(compare_reports(a, b))["phase:data_s"]["verdict"] == "same"
    assert not any(k.startswith("rank:") for k in _rows(compare_reports(a, b)))
    rows = _rows(compare_reports(a, b, all_ranks=True))
    assert (rows["rank:1:median_data_s"]["a"], rows["rank:1:median_data_s"]["b"]) == pytest.approx((0.002, 0.010))
    assert rows["rank:1:median_data_s"]["verdict"] == "worse" and rows["rank:0:median_data_s"]["verdict"] == "same"
    assert "  rank 1 data" in render_compare_text(compare_reports(a, b, all_ranks=True))
    # ...and from the command line (--all-ranks was taken with --compare and did nothing).
    logs = [str(tmp_path / f"{name}.jsonl") for name in ("even", "rank1")]
    shown = _cli(logs[0], "--compare", logs[1], "--all-ranks")
    assert shown.returncode == 0 and "  rank 1 data" in shown.stdout, shown.stdout + shown.stderr
    assert "  rank 1 data" not in _cli(logs[0], "--compare", logs[1]).stdout


# -- 3. noise ------------------------------------------------------------------------------------


def _drifting(scale: float = 1.0, drift: float = 0.3, data: float = 0.002):
    """Step times of a run whose pace moves by ``drift`` between parts of ten steps (a busy host)."""
    return lambda n, r: scale * 0.02 * (1 + drift * (((n - 1) // 10) % 2)) + data


@pytest.mark.parametrize(
    "scale, drift, verdict",
    [
        (0.8, 0.3, "within noise"),  # the same command on a busy host, 20% apart: inside its 30%
        (1.25, 0.3, "within noise"),
        (2.0, 0.3, "worse"),  # 2x is never noise
        (1.2, 0.0, "worse"),  # an idle host's 20% is a change
    ],
)
def test_a_change_inside_the_runs_own_spread_is_within_noise(tmp_path, scale, drift, verdict):
    from pardash.telemetry.compare import step_spread

    a = _report(tmp_path, "a", step_s=_drifting(drift=drift))
    b = _report(tmp_path, "b", step_s=_drifting(scale, drift))
    assert step_spread(a) == pytest.approx(drift * 0.02 / 0.022, abs=0.01)
    cmp = compare_reports(a, b)
    assert _rows(cmp)["median_step_s"]["verdict"] == verdict
    # (a busy host's drift said: the report has no host CPU of its own)
    busy = [n for n in cmp["notes"] if n.startswith("the pace moved while the run ran (A by 27%, B by 2")]
    assert bool(busy) == (drift > 0) and all("its host was likely busy with other work" in n for n in busy), cmp["notes"]
    if verdict == "within noise":
        assert any(n.startswith("within noise: a change smaller than each run's own pace moved") for n in cmp["notes"])
    else:  # (a step twice as long: its own work's phases, doubled, are judged too)
        assert _rows(cmp)["phase:backward_s"]["verdict"] == verdict


def test_a_real_slowdown_in_data_loading_reads_worse_on_a_busy_host(tmp_path):
    # The reviewer's 20 ms sleep in the data loading: 8.6 -> 29.7 ms must still read worse.
    a = _report(tmp_path, "a", step_s=_drifting(drift=0.3, data=0.0086), data_s=lambda n, r: 0.0086)
    b = _report(tmp_path, "b", step_s=_drifting(drift=0.3, data=0.0297), data_s=lambda n, r: 0.0297)
    rows = _rows(compare_reports(a, b))
    assert rows["phase:data_s"]["verdict"] == "worse" and rows["median_step_s"]["verdict"] == "worse"
    # ...and a comm that moved by less than the step's own spread is noise (same command, -59%)
    c = _report(tmp_path, "c", step_s=_drifting(drift=0.3, data=0.0086), data_s=lambda n, r: 0.0086, comm_s=lambda n, r: 0.0012)
    assert _rows(compare_reports(a, c))["phase:comm_s"]["verdict"] == "within noise"


# -- 4. pardash versions ------------------------------------------------------------------------


def test_the_hello_says_its_pardash_version_and_old_logs_still_read():
    old = b'{"kind":"hello","rank":0,"torch_version":"2.5.1"}'
    assert schema.decode_json(old).pardash_version == ""
    assert b"pardash_version" not in schema.encode_json(schema.Hello(rank=0))  # (omitted when empty)
    new = schema.Hello(rank=0, pardash_version="0.1.0")
    assert schema.decode(schema.encode(new)).pardash_version == "0.1.0"
    assert schema.decode_json(schema.encode_json(new)).pardash_version == "0.1.0"


def test_a_ranks_reporter_sends_the_pardash_version():
    from pardash.telemetry.reporter import Reporter

    pull = zmq.Context.instance().socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    rep = Reporter(f"tcp://127.0.0.1:{port}", run="r", identity=identity(0), heartbeat_s=60)
    try:
        rep.hello(strategy="ddp")
        seen = []

        def hello():
            while pull.poll(10):
                seen.append(schema.decode(pull.recv()))
            return any(isinstance(m, schema.Hello) for m in seen)

        wait_for(hello)
        (got,) = [m for m in seen if isinstance(m, schema.Hello)]
        assert got.pardash_version == __version__
    finally:
        rep.close()
        pull.close(0)


def test_a_log_of_an_older_pardash_is_said_and_its_self_and_comm_not_judged(tmp_path):
    a = _report(tmp_path, "old", version="")
    b = _report(tmp_path, "new", comm_s=lambda n, r: 0.009)
    cmp = compare_reports(a, b)
    assert cmp["pardash_version"] == {"a": "", "b": __version__}
    assert any(n.startswith("A's log names no pardash version: it was recorded by a pardash older than this one") for n in cmp["notes"])
    rows = _rows(cmp)
    assert rows["phase:comm_s"]["verdict"] == "" and rows["phase:self_s"]["verdict"] == ""
    assert {"what": "pardash", "a": "(not set)", "b": __version__} in cmp["differs"]
    other = _report(tmp_path, "other", version="0.0.9", comm_s=lambda n, r: 0.009)
    assert "the runs were recorded by different pardash versions (A 0.0.9, B 0.1.0)" in " ".join(compare_reports(other, b)["notes"])
    same = compare_reports(b, _report(tmp_path, "again", comm_s=lambda n, r: 0.003))
    assert not any("pardash version" in n for n in same["notes"]) and _rows(same)["phase:comm_s"]["verdict"] == "better"
    # Two logs that both name none: said, and judged as before (most likely of one older pardash)
    both = compare_reports(a, _report(tmp_path, "old2", version="", comm_s=lambda n, r: 0.009))
    assert any(n.startswith("neither log names a pardash version") for n in both["notes"])
    assert _rows(both)["phase:comm_s"]["verdict"] == "worse"


# -- 5. steps planned ---------------------------------------------------------------------------


def test_a_changed_plan_and_the_steps_each_median_is_over_are_said(tmp_path):
    # 200 steps against a run stopped at 124 of 3000: "the runs ended at different steps" alone.
    a = _report(tmp_path, "all", steps=200, config=_config(steps=200, total_steps=200))
    b = _report(tmp_path, "cut", steps=124, config=_config(steps=3000, total_steps=3000))
    cmp = compare_reports(a, b)
    assert {"what": "planned steps", "a": "200", "b": "3000"} in cmp["differs"]
    assert not any(d["what"] in ("steps", "total_steps") for d in cmp["differs"])
    assert "the medians are over each run's own steps (A steps 1-200, B steps 1-124), not over the steps both took" in cmp["notes"]


# -- 6. a run that took no step -----------------------------------------------------------------


def test_a_run_that_took_no_step_leaves_nothing_to_compare(tmp_path):
    # The bundled trainer failed before any step (no hello heard): every figure "-", compared
    # as if it ran, with "A's comm is a script's zero-code hooks'..." of the bundled trainer.
    a = _write(tmp_path / "failed.jsonl", steps=0, hello=False, exit_code=1)
    b = _write(tmp_path / "ran.jsonl")
    failed = build_report(a)
    assert failed["steps"] == 0 and failed["ranks"] and comm_meaning(failed) is None
    p = _cli(a, "--compare", b)
    # (one line on stderr and exit 2, as other input it cannot compare: it printed the line as
    # the comparison and exited 0)
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout)
    said = p.stderr.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("pardash: error: A took no step") and said[0].endswith(": nothing to compare"), p.stderr
    assert "comm" not in p.stderr
    cmp = compare_reports(build_report(b), failed)
    assert cmp["rows"] == [] and cmp["nothing_to_compare"].startswith("B took no step")
    assert render_compare_markdown(cmp).rstrip().endswith(": nothing to compare")


def test_config_keys_neither_run_sets_are_no_difference_and_stragglers_read_as_the_report_says():
    # Review 312: an older trainer's log against a new one read "resume false -> none" and
    # "checkpoint_keep (not set) -> 0", though neither run set them; a straggler the report names
    # "(own work between steps)" read "(data)" in the comparison.
    from pardash.telemetry.compare import straggler_texts, what_differs
    from pardash.telemetry.stragglers import OWN_WORK

    a = {"config": {"resume": False, "batch_size": 16}, "world_size": 2}
    b = {"config": {"resume": None, "checkpoint_keep": 0, "batch_size": 32}, "world_size": 2}
    assert [(d["what"], d["a"], d["b"]) for d in what_differs(a, b)] == [("batch_size", "16", "32")]
    rep = {"stragglers": [{"rank": 1, "kind": "data", "message": f"rank 1 is a straggler ({OWN_WORK}): ...", "since_step": 3,
                           "cleared_step": None, "cost_total_s": 1.17, "steps_charged": 38, "cost_s": 0.031}]}  # fmt: skip
    assert straggler_texts(rep) == ["rank 1 (own work between steps) from step 3, to the end: the others waited 30.8 ms a step, 1.17 s in all"]


def test_a_slowdown_from_the_middle_of_a_run_is_a_change_not_its_noise(tmp_path):
    # Review 312: a straggler from step 100 of 200 made B's pace move from 7.5 to 23 ms a step
    # once; its quartiles over the whole run took that move for B's spread (201%), and the
    # comparison read "within noise" and "its host was likely busy".
    from pardash.telemetry.compare import step_spread

    a = _report(tmp_path, "a", steps=200, step_s=lambda n, r: 0.0075)
    b = _report(tmp_path, "b", steps=200, step_s=lambda n, r: 0.0075 if n < 100 else 0.023)
    assert step_spread(b) == pytest.approx(0.0, abs=0.01)
    cmp = compare_reports(a, b)
    assert _rows(cmp)["median_step_s"]["verdict"] == "worse" and _rows(cmp)["samples_per_s"]["verdict"] == "worse"
    assert not [n for n in cmp["notes"] if "likely busy" in n or n.startswith("within noise")], cmp["notes"]


def test_time_between_steps_outside_the_dataloader_is_quoted_as_its_report_says_it(tmp_path):
    # Review 313: a sleep after the optimizer's step read "data +3336% worse" in the comparison,
    # as a slow __getitem__ did, while B's own report said the script's own work between steps.
    from pardash.telemetry.compare import input_texts

    rep = {"data_loading": {"share": 0.56, "share_min": 0.55, "share_max": 0.57, "input_bound": False, "loader_share": 0.02,
                            "between_steps": True}}  # fmt: skip
    (said,) = input_texts(rep)
    assert said.startswith("between steps 56% of the ranks' step time (55-57% by rank): 2% in the DataLoader, 54% the script's own work"), said
    assert input_texts({"data_loading": {**rep["data_loading"], "share": 0.1, "share_min": 0.1, "share_max": 0.1}}) == []
