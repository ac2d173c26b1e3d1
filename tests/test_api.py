"""The explicit API (``import pardash.telemetry as pt``): in this process against a real hub,
as a no-op without one, and under plain torchrun with a hub the test starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import pardash_env, wait_for
from pardash.telemetry import api, schema
from pardash.telemetry.logreader import load_log

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def _log(tmp_path: Path) -> list:
    path = tmp_path / "telemetry.jsonl"
    return load_log(path)[0] if path.exists() else []


def test_steps_logs_phases_and_events_reach_the_hub(hub, tmp_path, monkeypatch, fresh_api):
    import torch
    from torch import nn

    import pardash.telemetry as pt

    monkeypatch.setenv("PARDASH_ENDPOINT", hub.ingest_endpoint)
    monkeypatch.setenv("PARDASH_RUN_ID", "test-run")
    model = nn.Linear(8, 4)
    opt = torch.optim.AdamW(model.parameters())
    pt.init(model=model, optimizer=opt, config={"lr": 1e-3})
    pt.init(model=model)  # idempotent: no second hello
    for i in range(3):
        with pt.step():
            with pt.phase("data"):
                x = torch.randn(5, 8)
            with pt.phase("eval"):
                pass
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            pt.log(loss=loss.detach(), samples=len(x), tokens=40 * (i + 1), grad_norm=torch.tensor(0.5))
    pt.event("checkpoint", "saved step 3")
    api.close()

    def steps():
        # in the order they were sent (a loop slowed past its first heartbeat can have steps
        # sent from the heartbeat thread, whose socket the hub may take after the loop's)
        return sorted((m for m in _log(tmp_path) if isinstance(m, schema.Step)), key=lambda m: m.seq)

    wait_for(lambda: len(steps()) == 3)
    msgs = _log(tmp_path)
    hellos = [m for m in msgs if isinstance(m, schema.Hello)]
    assert len(hellos) == 1
    h = hellos[0]
    assert (h.source, h.strategy, h.params_count, h.params_bytes) == ("api", "single", 36, 144)
    assert h.config == {"lr": 1e-3}
    for i, s in enumerate(steps()):
        assert s.step == i + 1 and s.samples == 5 and s.loss is not None
        assert s.custom == {"tokens": 40.0 * (i + 1), "grad_norm": 0.5}
        assert list(s.phases) == ["eval"] and 0.0 <= s.phases["eval"] <= s.step_s  # an empty phase of its own
        assert s.data_s is not None and s.data_s <= s.step_s
        assert s.mem is not None and s.mem.params_bytes == 144 and s.mem.optim_bytes >= 288
    wait_for(lambda: any(isinstance(m, schema.Event) and m.name == "checkpoint" for m in _log(tmp_path)))
    ev = next(m for m in _log(tmp_path) if isinstance(m, schema.Event) and m.name == "checkpoint")
    assert ev.message == "saved step 3" and ev.step == 3


def test_a_step_that_raises_is_not_published(hub, tmp_path, monkeypatch, fresh_api):
    import pardash.telemetry as pt

    monkeypatch.setenv("PARDASH_ENDPOINT", hub.ingest_endpoint)
    monkeypatch.setenv("PARDASH_RUN_ID", "test-run")
    with pytest.raises(StopIteration):
        with pt.step():
            pt.log(loss=1.0)
            next(iter(()))
    with pt.step():
        pt.log(loss=2.0)
    api.close()
    wait_for(lambda: any(isinstance(m, schema.Step) for m in _log(tmp_path)))
    steps = [m for m in _log(tmp_path) if isinstance(m, schema.Step)]
    assert [(s.step, s.loss) for s in steps] == [(1, 2.0)]


def test_a_later_init_adds_the_model(hub, tmp_path, monkeypatch, fresh_api):
    from torch import nn

    import pardash.telemetry as pt

    monkeypatch.setenv("PARDASH_ENDPOINT", hub.ingest_endpoint)
    monkeypatch.setenv("PARDASH_RUN_ID", "test-run")
    with pt.step():  # the first use introduces the rank, as yet without a model
        pass
    pt.init(model=nn.Linear(3, 2), note="warm-up done")
    api.close()

    def hellos():
        return [m for m in _log(tmp_path) if isinstance(m, schema.Hello)]

    wait_for(lambda: len(hellos()) == 2)
    first, second = hellos()
    assert first.params_count == 0 and (second.params_count, second.note) == (8, "warm-up done")


def test_without_a_hub_everything_is_a_no_op(monkeypatch, fresh_api):
    import pardash.telemetry as pt

    monkeypatch.delenv("PARDASH_ENDPOINT", raising=False)
    pt.init(config={"a": 1})
    for _ in range(3):
        with pt.step():
            with pt.phase("data"):
                pass
            pt.log(loss=0.5, tokens=3)
    pt.event("info", "nothing listens")
    assert not api.reporter().enabled


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda pt: pt.log(loss="low"), TypeError),
        (lambda pt: pt.log(tokens=None), TypeError),
        (lambda pt: pt.log(ok=True), TypeError),
        (lambda pt: pt.phase(""), ValueError),
        # These failed only once a hub listened: at publishing, out of `with pt.step()`.
        (lambda pt: pt.log(vec=__import__("torch").tensor([1.0, 2.0])), TypeError),
        (lambda pt: pt.log(h=10**400), TypeError),
        (lambda pt: pt.log(samples=2**64 - 1), TypeError),  # passed, then the step could not be sent
    ],
)
def test_bad_values_fail_at_the_call(call, error, fresh_api):
    import pardash.telemetry as pt

    with pytest.raises(error):
        call(pt)


def test_a_bad_endpoint_turns_telemetry_off_and_the_script_trains(monkeypatch, fresh_api, capfd):
    # PARDASH_ENDPOINT=localhost:29720 (no tcp://) raised ZMQError out of pt.init: the script
    # never ran.
    import pardash.telemetry as pt

    for bad in ("localhost:29720", "http://127.0.0.1:29720", "garbage"):
        api._reset_for_tests()
        monkeypatch.setenv("PARDASH_ENDPOINT", bad)
        pt.init()
        with pt.step():
            pt.log(loss=1.0)
        assert not api.reporter().enabled
        err = capfd.readouterr().err
        assert f"PARDASH_ENDPOINT='{bad}' is no hub address" in err and "telemetry is off for rank" in err, err


def test_a_diverged_loss_is_said_and_too_many_metrics_are_cut(hub, tmp_path, monkeypatch, fresh_api):
    # A NaN loss vanished from the log without a word; 300 custom metrics made the hub refuse
    # every step, loss and all.
    import torch

    import pardash.telemetry as pt

    monkeypatch.setenv("PARDASH_ENDPOINT", hub.ingest_endpoint)
    monkeypatch.setenv("PARDASH_RUN_ID", "test-run")
    for i in range(1, 6):
        with pt.step():
            pt.log(loss=torch.tensor(float("nan")) if i in (3, 4) else float(i), **{f"k{j}": float(j) for j in range(300)})
    api.close()
    wait_for(lambda: len([m for m in _log(tmp_path) if isinstance(m, schema.Step)]) == 5)
    msgs = _log(tmp_path)
    # (in the order they were sent: steps the heartbeat thread sent go on a socket of its own)
    steps = sorted((m for m in msgs if isinstance(m, schema.Step)), key=lambda m: m.seq)
    assert [s.loss for s in steps] == [1.0, 2.0, None, None, 5.0]
    assert all(len(s.custom) == 256 for s in steps)
    warnings = [m.message for m in msgs if isinstance(m, schema.Event) and m.name == "warning"]
    assert warnings == [
        "300 custom metrics in a step; the first 256 are kept",
        "loss is nan at step 3: diverged, or a spike (steps go on without a loss while it is not finite)",
        "loss is finite again at step 5 (not finite from step 3)",  # it said "diverged" alone
    ]
    # pt.close() flushes: the process has not ended, and is not said to have.
    assert not [m for m in msgs if isinstance(m, schema.Event) and m.name == "exit"]


def test_steps_cannot_nest(fresh_api):
    import pardash.telemetry as pt

    with pytest.raises(RuntimeError, match="cannot be nested"):
        with pt.step():
            with pt.step():
                pass


def test_the_api_never_loads_torch():
    code = (
        "import sys, pardash.telemetry as pt\n"
        "pt.init(config={'x': 1})\n"
        "with pt.step():\n"
        "    with pt.phase('data'):\n"
        "        pt.log(loss=1.0, tokens=2)\n"
        "pt.event('info', 'hi')\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([PY, "-c", code], check=True, env=pardash_env(PARDASH_ENDPOINT="tcp://127.0.0.1:9"), timeout=60)


@pytest.mark.slow
def test_explicit_api_under_plain_torchrun(hub, tmp_path):
    # One rank: what this adds to the launched runs' tests is plain torchrun (no launch sets
    # the endpoint, the run id or the end), which a second rank would only repeat.
    env = pardash_env(PARDASH_ENDPOINT=hub.ingest_endpoint, PARDASH_RUN_ID="test-run")
    proc = subprocess.run(
        [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
         str(ROOT / "demos" / "explicit_api.py"), "--steps", "5"],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]

    def steps(rank):
        # In the order the rank sent them (the log's is the hub's: steps its heartbeat thread
        # sent for the loop, on a socket of their own, can be taken after the loop's next ones).
        return sorted((m for m in _log(tmp_path) if isinstance(m, schema.Step) and m.rank == rank), key=lambda m: m.seq)

    wait_for(lambda: len(steps(0)) == 5)
    msgs = _log(tmp_path)
    hellos = {m.rank: m for m in msgs if isinstance(m, schema.Hello)}
    assert {r: (h.source, h.strategy, h.backend) for r, h in hellos.items()} == {0: ("api", "ddp", "gloo")}
    assert hellos[0].config["steps"] == 5
    for rank in (0,):
        for i, s in enumerate(steps(rank)):
            assert s.step == i + 1 and s.samples == 32 and s.loss is not None and s.data_s is not None
            assert s.custom["tokens"] == 32 * 32 and s.custom["grad_norm"] > 0
            assert s.mem is not None and s.mem.params_bytes == s.mem.params_full_bytes
    # Each rank said it finished: the run read "silent" for good under plain torchrun.
    wait_for(lambda: len([m for m in _log(tmp_path) if isinstance(m, schema.Event) and m.name == "exit"]) == 1)
    exits = {m.rank: (m.code, m.step) for m in _log(tmp_path) if isinstance(m, schema.Event) and m.name == "exit"}
    assert exits == {0: (0, 5)}


def test_a_script_on_the_explicit_api_says_how_it_ended(hub, tmp_path):
    # No launcher notes its end: without its own word the rank reads silent forever.
    code = (
        "import pardash.telemetry as pt\n"
        "pt.init()\n"
        "for i in range(1, 6):\n"
        "    with pt.step():\n"
        "        pt.log(loss=1.0 / i)\n"
        "        if i == 4:\n"
        "            raise ValueError('bad batch')\n"
        "    if i == 2:\n"
        "        pt.event('epoch_end', 'epoch 0 done')\n"
    )
    env = pardash_env(PARDASH_ENDPOINT=hub.ingest_endpoint, PARDASH_RUN_ID="test-run")
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 1 and "ValueError: bad batch" in proc.stderr  # Python's own report is kept
    wait_for(lambda: any(isinstance(m, schema.Event) and m.name == "exit" for m in _log(tmp_path)))
    events = [(m.name, m.code, m.step, m.message) for m in _log(tmp_path) if isinstance(m, schema.Event)]
    assert events == [("epoch_end", None, 2, "epoch 0 done"), ("error", None, 3, "ValueError: bad batch"), ("exit", 1, 4, "")]
    # The steps after an epoch's end are the next epoch's (the rank detail read "epoch 0" for good).
    assert [m.epoch for m in _log(tmp_path) if isinstance(m, schema.Step)] == [0, 0, 1]


@pytest.mark.parametrize(
    "ending, code, events",
    [
        # sys.exit(3) after training read "finished": no hook sees a SystemExit.
        ("sys.exit(3)", 3, [("exit", 3, 5, "")]),
        # An argparse error goes through sys.exit too.
        ("import argparse; argparse.ArgumentParser().parse_args(['--nope'])", 2, [("exit", 2, 5, "")]),
        # A library that replaced sys.excepthook (rich.traceback.install) hid the failure.
        ("sys.excepthook = lambda *a: None; raise RuntimeError('after training')", 1,
         [("error", None, 5, "RuntimeError: after training"), ("exit", 1, 5, "")]),
        ("pass", 0, [("exit", 0, 5, "")]),
    ],
)
def test_how_a_script_ended_is_what_its_exit_event_says(hub, tmp_path, ending, code, events):
    script = (
        "import sys\n"
        "import pardash.telemetry as pt\n"
        "pt.init()\n"
        "for i in range(1, 6):\n"
        "    with pt.step():\n"
        "        pt.log(loss=1.0 / i)\n"
        f"{ending}\n"
    )
    env = pardash_env(PARDASH_ENDPOINT=hub.ingest_endpoint, PARDASH_RUN_ID="test-run")
    proc = subprocess.run([PY, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == code, proc.stderr
    wait_for(lambda: any(isinstance(m, schema.Event) and m.name == "exit" for m in _log(tmp_path)))
    assert [(m.name, m.code, m.step, m.message) for m in _log(tmp_path) if isinstance(m, schema.Event)] == events


def test_a_compiled_ddp_model_is_ddp(tmp_path):
    # torch.compile(DDP(model)), the order PyTorch recommends: the hello said "single".
    import torch
    import torch.distributed as dist

    from pardash.telemetry.modelfacts import strategy_of

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
        # (backend="eager": the wrapper is what is read, and Inductor's import is a CPU-second)
        assert strategy_of(torch.compile(ddp, backend="eager")) == strategy_of(ddp) == "ddp"
        assert strategy_of(torch.compile(torch.nn.Linear(4, 4), backend="eager")) == "single"
    finally:
        dist.destroy_process_group()
