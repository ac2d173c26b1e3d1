"""The explicit API as a script uses it, right or wrong: an evaluation the script reports itself
is one evaluation under ``pardash launch`` too; the heartbeat names the phase a rank is in
around a ``pt.phase`` block and after a step that raised; ``pt.step()`` without ``with`` and a
phase timed between the steps are said, not silently wrong."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn

import instrumented
from helpers import pardash_env, wait_for
from pardash.telemetry import api, schema
from pardash.telemetry.logreader import load_log
from pardash.telemetry.report import build_report

PY = sys.executable


hooked = instrumented.hooked


def _train_step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    model(torch.randn(4, 8)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()


# -- 1. an evaluation the script reports itself is one evaluation --------------------------------


@pytest.mark.parametrize("said", ["after model.train()", "before model.train()", "not at all"])
@pytest.mark.parametrize("explicit", [True, False], ids=["pt.step", "optimizer steps"])
def test_an_evaluation_the_script_reports_itself_is_one_event(hooked, said, explicit):
    # pt.event("eval", ...) after the script's model.train(): the instrumentation had sent its
    # own at model.train() already, and the report counted 4 evaluations of 2.
    import pardash.telemetry as pt

    inst, rep = hooked
    api._api.reporter = rep  # (the script's events and the instrumentation's, in one list)
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pt.init(model=model, optimizer=opt)
    for step in range(1, 7):
        if explicit:
            with pt.step():
                _train_step(model, opt)
        else:
            _train_step(model, opt)
        if step % 3 == 0:
            model.eval()
            with torch.no_grad():
                model(torch.randn(4, 8))
            if said == "before model.train()":
                pt.event("eval", step=step, duration_s=0.5)
            model.train()
            if said == "after model.train()":
                pt.event("eval", step=step, duration_s=0.5)
    inst.finish()
    api.flush()  # (as the launch's rank does at its end)
    evals = [fields for name, fields in rep.events if name == "eval"]
    assert [e["step"] for e in evals] == [3, 6]
    if said == "not at all":  # the instrumentation's own, each once, after its step
        assert all(e["duration_s"] > 0 and e["duration_s"] != 0.5 for e in evals)


# One 1-rank launch serves two tests: its script reports its own evaluations, and ends with a
# bare pt.step() after its last step, under PYTHONWARNINGS=error::UserWarning (each claim needs
# the script to train to its end; a launch costs ~5 CPU-s before the script's first line).
OWN_EVALS_BARE_LAST = (
    "import time\n"
    "import torch, torch.distributed as dist\n"
    "from torch import nn\n"
    "import pardash.telemetry as pt\n"
    "dist.init_process_group('gloo')\n"
    "model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "for step in range(1, 13):\n"
    "    with pt.step():\n"
    "        model(torch.randn(4, 8)).pow(2).mean().backward()\n"
    "        opt.step()\n"
    "        opt.zero_grad()\n"
    "        pt.log(loss=1.0, samples=1)\n"
    "    if step % 5 == 0:\n"
    "        t0 = time.perf_counter()\n"
    "        model.eval()\n"
    "        with torch.no_grad():\n"
    "            model(torch.randn(4, 8))\n"
    "        model.train()\n"
    "        pt.event('eval', step=step, duration_s=time.perf_counter() - t0)\n"
    "pt.step()  # the last one bare\n"
    "dist.destroy_process_group()\n"
    "print('done')\n"
)
OWN_EVALS_GROUP = pytest.mark.xdist_group("api_review_own_evals_bare_last")


@pytest.fixture(scope="module")
def own_evals_run(tmp_path_factory):
    """The launch of OWN_EVALS_BARE_LAST (its process, and its log's path)."""
    tmp = tmp_path_factory.mktemp("own-evals")
    script = tmp / "own_evals.py"
    script.write_text(OWN_EVALS_BARE_LAST)
    log = tmp / "run.jsonl"
    proc = subprocess.run(
        [PY, "-m", "pardash", "launch", "--nproc", "1", "--headless", "--log", str(log),
         "--runs-dir", str(tmp / "runs"), "--", str(script)],
        capture_output=True, text=True, timeout=300, cwd=tmp,
        # (a registry of its own: made before any test's, as the shared runs' are)
        env=pardash_env(PYTHONWARNINGS="error::UserWarning", PARDASH_REGISTRY_DIR=str(tmp / "registry")),
    )  # fmt: skip
    return proc, log


@pytest.mark.slow
@OWN_EVALS_GROUP
def test_a_launched_scripts_own_eval_events_are_its_evaluations(own_evals_run):
    # One rank: an evaluation was two eval events of each rank ('[eval] ... after step 5'
    # twice), and the report, which counts the evaluations of the rank with the most, read 4.
    # A second rank read the same, for 2.5 s more of a core.
    proc, log = own_evals_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    msgs, _ = load_log(log)
    evals = [(m.rank, m.step) for m in msgs if isinstance(m, schema.Event) and m.name == "eval"]
    assert evals == [(0, 5), (0, 10)], evals
    assert build_report(str(log))["evaluations"]["count"] == 2  # (it said 4)


# -- 2, 3. the heartbeat's phase around phase blocks and after a failed step ------------------------


def _heartbeat_phase() -> str:
    """The phase the rank's heartbeat says it is in now."""
    return api.reporter()._phase


def test_a_phase_inside_a_step_gives_the_step_back_its_phase(fresh_api):
    import pardash.telemetry as pt

    with pt.step():
        assert _heartbeat_phase() == "step"
        with pt.phase("data"):
            assert _heartbeat_phase() == "data"
            with pt.phase("augment"):
                assert _heartbeat_phase() == "augment"
            assert _heartbeat_phase() == "data"
        assert _heartbeat_phase() == "step"  # it read "" (a stall there: "stalled in unknown")
    assert _heartbeat_phase() == ""


def test_after_a_step_that_raised_the_rank_is_between_steps(fresh_api):
    import pardash.telemetry as pt

    for inner in (False, True):
        with pytest.raises(RuntimeError):
            with pt.step():
                if inner:
                    with pt.phase("forward"):
                        raise RuntimeError("out of memory")
                raise RuntimeError("out of memory")
        # the script caught it and saves a checkpoint: no step runs ("step" read as a stall in one)
        assert _heartbeat_phase() == ""


def test_a_phase_under_the_instrumentation_gives_back_the_instrumentations(hooked):
    import pardash.telemetry as pt

    inst, _ = hooked
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rep = api.reporter()
    inst.reporter = rep  # (the heartbeat's phase is this reporter's)
    with pt.step():
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        with pt.phase("clip"):
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        assert _heartbeat_phase() == "backward"  # as the instrumentation had it
        with pt.phase("fwd"):
            model(torch.randn(4, 8))  # it marks a phase of its own inside: that one goes on
        assert _heartbeat_phase() == "forward"
        opt.step()
        opt.zero_grad()


# -- 4. pt.step() without `with` --------------------------------------------------------------------


def test_a_step_called_without_with_is_said_once(hub, tmp_path, monkeypatch, fresh_api):
    import pardash.telemetry as pt

    monkeypatch.setenv("PARDASH_ENDPOINT", hub.ingest_endpoint)
    monkeypatch.setenv("PARDASH_RUN_ID", "test-run")
    pt.init()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            pt.log(loss=1.0)
            pt.step()  # as scheduler.step(): it marks nothing
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and "`with pt.step():`" in said[0], said
    assert caught[0].filename == __file__  # at the script's call
    api.close()
    path = tmp_path / "telemetry.jsonl"

    def warned():
        return [m.message for m in load_log(path)[0] if isinstance(m, schema.Event) and m.name == "warning"] if path.exists() else []

    wait_for(lambda: warned())
    assert warned() == said


def test_a_single_step_called_without_with_is_said_at_the_end(fresh_api, capfd):
    # (at exit a plain line: a warning's place was autorun's api.flush(), no line of the script)
    import pardash.telemetry as pt

    pt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (-W error: it raised out of autorun's exit, and failed the job)
        api.flush()
    assert "pardash: warning: pardash.telemetry.step() called without `with` marks no step" in capfd.readouterr().err


def test_the_apis_warnings_never_raise_into_the_script(fresh_api, capfd):
    # Under -W error (PYTHONWARNINGS=error) the phase warning raised out of the script's
    # `with pt.phase(...)`, the step one out of its pt.step().
    import pardash.telemetry as pt

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pt.step():
            pass
        with pt.phase("eval"):
            pass
        pt.step()
        pt.step()
    err = capfd.readouterr().err
    assert "pardash: warning: pardash.telemetry.phase('eval') outside a `with pt.step():` block" in err, err
    assert "pardash: warning: pardash.telemetry.step() called without `with`" in err, err


@pytest.mark.slow
@OWN_EVALS_GROUP
def test_a_launched_script_under_w_error_ends_as_it_did(own_evals_run):
    # A script that trained to its end, its last pt.step() bare, run with
    # PYTHONWARNINGS=error::UserWarning: pardash's exit raised the warning, the rank's exit
    # record never went, and the launch said "rank 0 exited with code 1".
    done, _ = own_evals_run
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "pardash: warning: pardash.telemetry.step() called without `with`" in done.stdout + done.stderr


def test_steps_used_rightly_say_nothing(fresh_api):
    import pardash.telemetry as pt

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            with pt.step():
                with pt.phase("data"):
                    pass
            block = pt.step()  # made, then entered: right too
            with block:
                pass
        api.flush()


# -- 5. a phase timed between the script's steps ---------------------------------------------------


def test_a_phase_between_the_scripts_steps_is_in_no_step(hub, tmp_path, monkeypatch, fresh_api):
    # An eval loop timed with pt.phase between two steps went into the next step's phases, past
    # that step's own time (and the report said "eval: 101.8 ms a step").
    import pardash.telemetry as pt

    monkeypatch.setenv("PARDASH_ENDPOINT", hub.ingest_endpoint)
    monkeypatch.setenv("PARDASH_RUN_ID", "test-run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            with pt.step():
                with pt.phase("augment"):
                    pass
                pt.log(loss=1.0)
            with pt.phase("eval"):  # between the steps
                assert _heartbeat_phase() == "eval"  # (a stall in it still says where)
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and "pardash.telemetry.phase('eval') outside a `with pt.step():` block" in said[0], said
    api.close()
    path = tmp_path / "telemetry.jsonl"

    def steps():
        return [m for m in load_log(path)[0] if isinstance(m, schema.Step)] if path.exists() else []

    wait_for(lambda: len(steps()) == 3)
    assert [list(s.phases) for s in steps()] == [["augment"]] * 3


def test_under_the_instrumentation_a_phase_before_the_forward_is_the_steps(hooked):
    # Without pt.step(), the instrumentation cuts the steps at the optimizer's: a phase before
    # the forward is the step's being made, said by nobody.
    import pardash.telemetry as pt

    inst, rep = hooked
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(4):
            with pt.phase("augment"):
                x = torch.randn(4, 8)
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        inst.finish()
    # (The first step is published as the second's optimizer steps, the first known to end its
    # round then: the second's phase goes with it. From the third on, each its own.)
    assert [list(s.get("phases", ())) for s in rep.steps][2:] == [["augment"]] * 2
    assert [name for name, _ in rep.events if name == "warning"] == []
