"""Values a script logs with ``pt.log`` and no step blocks, under ``pardash launch``'s automatic
instrumentation: a value logged before a step's optimizer step (its round's last), or after it
and before the next step begins (its first forward), is that step's, however late the step is
published (one optimizer's first step, once a second round shows it alone; every step of a
GAN's, once the next iteration's first optimizer steps); one logged after the last step, at the
script's end, is the last step's."""

from __future__ import annotations

import gc
import io
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from torch import nn

import instrumented
import pardash.telemetry as pt
from helpers import pardash_env, wait_for
from pardash.telemetry import api, schema
from pardash.telemetry.logreader import load_log


hooked = instrumented.hooked


def _logged(rep: instrumented.Recording, *names: str) -> list[dict]:
    """Each published step's custom values of ``names`` (the ones it carries)."""
    return [{n: v for n, v in s.get("custom", {}).items() if n in names} for s in rep.steps]


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _loss(model: nn.Module) -> torch.Tensor:
    return nn.functional.cross_entropy(model(torch.randn(6, 8)), torch.randint(0, 4, (6,)))


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_value_logged_before_or_after_the_optimizer_step_is_its_steps(hooked, where):
    # The first step is published only once the second iteration's optimizer steps (one
    # optimizer, seen to step again): it carried the second iteration's value (the first's
    # overwritten) and the second step none. Logged after the optimizer step (the most common
    # place), each value went with the next step, the first step had none and the last value
    # was lost: a step published at its post-hook was sent before the value came.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(1, 6):
        _loss(model).backward()
        if where == "before":
            pt.log(x=i)
        opt.step()
        if where == "after":
            pt.log(x=i)
        opt.zero_grad()
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4, 5]
    assert _logged(rep, "x") == [{"x": float(i)} for i in range(1, 6)]


def test_a_value_logged_after_the_step_and_before_the_next_begins_is_that_steps(hooked):
    # The boundary is the next step's first pass: a value logged after it is the next step's.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(1, 5):
        model(torch.randn(6, 8))  # (a forward that trains nothing: the step has begun)
        pt.log(early=i)
        _loss(model).backward()
        opt.step()
        opt.zero_grad()
        pt.log(late=i)
    pt.log(end=0)  # after the loop: the last step's
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4]
    assert _logged(rep, "early", "late") == [{"early": float(i), "late": float(i)} for i in range(1, 5)]
    assert _logged(rep, "end") == [{}, {}, {}, {"end": 0.0}]


def _gan_iteration(gen, disc, opt_d, opt_g, i: int, g_steps: bool = True) -> None:
    loss_d = disc(gen(torch.randn(5, 4)).detach()).mean()
    loss_d.backward()
    pt.log(d=i)
    opt_d.step()
    opt_d.zero_grad()
    if g_steps:
        loss_g = (-disc(gen(torch.randn(5, 4)))).mean()
        loss_g.backward()
        pt.log(g=i)
        opt_g.step()
        opt_g.zero_grad()


@pytest.mark.parametrize(
    "pattern",
    [[True] * 5, [False] * 3 + [True] * 3, [False, True] * 3],
    ids=["every", "warm-up", "every-second"],
)
def test_a_gans_values_logged_before_each_optimizers_step_are_the_iterations_step(hooked, pattern):
    # Each step is published when the next iteration's discriminator steps: what that
    # iteration logged before went with the step before (every step's values one late:
    # step 1 read d=2, g=1).
    inst, rep = hooked
    gen, disc = nn.Linear(4, 8), nn.Linear(8, 1)
    opt_d, opt_g = torch.optim.SGD(disc.parameters(), lr=0.1), torch.optim.SGD(gen.parameters(), lr=0.02)
    for i, g in enumerate(pattern, 1):
        _gan_iteration(gen, disc, opt_d, opt_g, i, g_steps=g)
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, len(pattern) + 1))
    expected = [{"d": float(i), **({"g": float(i)} if g else {})} for i, g in enumerate(pattern, 1)]
    assert _logged(rep, "d", "g") == expected


@pytest.mark.parametrize(
    "pattern",
    [[True] * 4, [False] * 2 + [True] * 2, [False, True] * 2],
    ids=["every", "warm-up", "every-second"],
)
def test_a_gans_values_logged_after_its_last_optimizer_step_are_the_iterations_step(hooked, pattern):
    # Logged after the generator's step (or the discriminator's, in an iteration where the
    # generator does not step), before the next iteration's first pass: that iteration's step,
    # the last one's kept at the script's end.
    inst, rep = hooked
    gen, disc = nn.Linear(4, 8), nn.Linear(8, 1)
    opt_d, opt_g = torch.optim.SGD(disc.parameters(), lr=0.1), torch.optim.SGD(gen.parameters(), lr=0.02)
    for i, g in enumerate(pattern, 1):
        _gan_iteration(gen, disc, opt_d, opt_g, i, g_steps=g)
        pt.log(after=i)
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, len(pattern) + 1))
    expected = [{"d": float(i), **({"g": float(i)} if g else {}), "after": float(i)} for i, g in enumerate(pattern, 1)]
    assert _logged(rep, "d", "g", "after") == expected


@pytest.mark.parametrize("kept", [True, False], ids=["first kept", "first freed"])
def test_values_logged_as_a_model_trained_next_starts_are_its_steps(hooked, kept):
    # The next model's optimizer first steps after a step published at its post-hook: its
    # step is told only when it steps again (it carried the next iteration's value).
    inst, rep = hooked
    i, models = 0, []
    for _ in range(2):
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            i += 1
            _loss(model).backward()
            pt.log(x=i)
            opt.step()
            opt.zero_grad()
        if kept:
            models.append((model, opt))
        del model, opt
        gc.collect()
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4, 5, 6]
    assert _logged(rep, "x") == [{"x": float(i)} for i in range(1, 7)]


@pytest.mark.parametrize("skips", [(4,), (3, 4, 5)])
def test_a_value_logged_in_an_iteration_that_skipped_its_update_is_that_steps(hooked, skips):
    # zero_grad(); backward; log; if bad: continue; step. A skipped iteration's step is known
    # only at the next optimizer step: it carried that iteration's value, its own none.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(1, 8):
        opt.zero_grad()
        _loss(model).backward()
        pt.log(x=i)
        if i in skips:
            continue
        opt.step()
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, 8))
    assert _logged(rep, "x") == [{"x": float(i)} for i in range(1, 8)]


@pytest.mark.parametrize("skips", [(4,), (3, 4, 5)])
def test_a_value_logged_after_an_iteration_skipped_its_update_is_that_steps(hooked, skips):
    # backward; if bad: zero_grad, log, continue; step; zero_grad; log. The skipped
    # iteration is cut at its zero_grad: what it logged after is its step's, as a stepped one's.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(1, 8):
        _loss(model).backward()
        if i in skips:
            opt.zero_grad()
            pt.log(x=i)
            continue
        opt.step()
        opt.zero_grad()
        pt.log(x=i)
    inst.finish()
    assert [s["step"] for s in rep.steps] == list(range(1, 8))
    assert _logged(rep, "x") == [{"x": float(i)} for i in range(1, 8)]


@pytest.mark.parametrize("algorithm", ["sam", "clipping"])
def test_values_logged_around_gradients_zeroed_within_an_iteration_stay_its_steps(hooked, algorithm):
    # A zero_grad after a backward may end an iteration (a skipped update): the step is cut
    # there, pending, and the cut dropped at the optimizer step (SAM's second pass on the same
    # batch; per-micro-batch clipping's sum set by hand). What was logged before the cut is
    # the step's still, with what was logged after it.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(1, 6):
        x, y = torch.randn(6, 8), torch.randint(0, 4, (6,))
        if algorithm == "sam":
            nn.functional.cross_entropy(model(x), y).backward()
            pt.log(a=i)
            model.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            pt.log(b=i)
        else:
            total = [torch.zeros_like(p) for p in model.parameters()]
            for k, (xm, ym) in enumerate(zip(x.chunk(3), y.chunk(3))):
                nn.functional.cross_entropy(model(xm), ym).backward()
                for t, p in zip(total, model.parameters()):
                    t += p.grad
                pt.log(**{f"m{k}": i})
                opt.zero_grad()
            for t, p in zip(total, model.parameters()):
                p.grad = t
        opt.step()
        opt.zero_grad()
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3, 4, 5]
    names = ("a", "b") if algorithm == "sam" else ("m0", "m1", "m2")
    assert _logged(rep, *names) == [{n: float(i) for n in names} for i in range(1, 6)]


def test_a_steps_values_taken_in_parts_merge_later_over_earlier_and_phases_add_up():
    # (a GAN's step: what was logged before the discriminator's step, then the generator's)
    before, later = api.Logged(), api.Logged()
    before.fields.update(loss=1.0, samples=5)
    before.custom.update(d=1.0, x=1.0)
    before.phases.update(augment=0.25, data=0.5)
    later.fields.update(loss=2.0)
    later.custom.update(g=1.0, x=2.0)
    later.phases.update(augment=0.5)
    merged = before.merge(later)
    assert merged.fields == {"loss": 2.0, "samples": 5}
    assert merged.custom == {"d": 1.0, "x": 2.0, "g": 1.0}
    assert merged.phases == {"augment": 0.75, "data": 0.5}


LOGS_AFTER_THE_STEP = """
    import torch
    import torch.distributed as dist
    from torch import nn

    import pardash.telemetry as pt

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(STEPS):
        loss = model(torch.randn(6, 8)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        pt.log(gnorm=float(i))
    dist.destroy_process_group()
"""


class LoggedRun:
    """``pardash launch --headless --nproc 1 -- logs_after.py`` (LOGS_AFTER_THE_STEP, STEPS
    steps), ended: ``proc``, ``log``, ``textfile`` the Prometheus textfile it wrote too
    (``--prometheus-textfile --prometheus-per-rank``)."""

    STEPS = 4

    def __init__(self, base) -> None:
        (base / "logs_after.py").write_text(textwrap.dedent(LOGS_AFTER_THE_STEP).replace("STEPS", str(self.STEPS)))
        self.log, self.textfile = base / "run.jsonl", base / "job.prom"
        self.proc = subprocess.run(
            [sys.executable, "-m", "pardash", "launch", "--nproc", "1", "--headless", "--log", str(self.log),
             "--runs-dir", str(base / "runs"), "--prometheus-textfile", str(self.textfile), "--prometheus-per-rank", "--", "logs_after.py"],
            capture_output=True, text=True, timeout=240, env=pardash_env(PARDASH_REGISTRY_DIR=str(base / "registry")), cwd=base,
        )  # fmt: skip


# One launch serves this test and test_prometheus_textfile.py's of the file a launch that
# ended leaves (a launch is 4 s of a core here): its tests share a worker, which makes it once.
LOGGED_RUN_GROUP = pytest.mark.xdist_group("h289_logged_run")
_logged_runs: list[LoggedRun] = []


def shared_logged_run(tmp_path_factory) -> LoggedRun:
    """The worker's :class:`LoggedRun`, made by the first test that asks for it."""
    if not _logged_runs:
        _logged_runs.append(LoggedRun(tmp_path_factory.mktemp("logged-run")))
    return _logged_runs[0]


@pytest.fixture
def logged_run(tmp_path_factory) -> LoggedRun:
    return shared_logged_run(tmp_path_factory)


@LOGGED_RUN_GROUP
def test_under_launch_a_value_logged_after_the_optimizer_step_is_its_steps_in_the_log(logged_run):
    # pardash launch -- script.py, 2 ranks: the log read step 1 with no gnorm, step 2
    # gnorm 0 ... step 4 gnorm 2, and the last value, 3, nowhere. One rank here: the step a
    # value joins is each rank's own (the other rank read the same), and a second rank is
    # 2.5 s more of a core for it.
    steps, log, proc = logged_run.STEPS, logged_run.log, logged_run.proc
    assert proc.returncode == 0, proc.stdout + proc.stderr
    msgs = load_log(log)[0]
    got = sorted((m for m in msgs if isinstance(m, schema.Step)), key=lambda m: m.seq)
    assert {m.rank for m in got} == {0}
    assert [(m.step, (m.custom or {}).get("gnorm")) for m in got] == [(i + 1, float(i)) for i in range(steps)]


HELD_WHEN_STOPPED = """
    import sys
    import time

    import torch
    from torch import nn

    import pardash.telemetry as pt

    model = nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(3):
        model(torch.randn(6, 8)).square().mean().backward()
        opt.step()
        opt.zero_grad()
        pt.log(gnorm=float(i))
    open(sys.argv[1], "w").write("step 3 held")  # (no step begins after it: it waits for the next)
    time.sleep(600)
"""


def test_a_step_held_for_its_logged_values_goes_out_when_the_rank_is_stopped(tmp_path):
    # The heartbeat said step 3 done; Ctrl-C at the launch (torchrun's SIGTERM to the rank)
    # ended the rank with step 3 still held for the values logged after it, and the log ended
    # at step 2. The rank still ends by SIGTERM, and the launcher says who stopped it.
    (tmp_path / "held.py").write_text(textwrap.dedent(HELD_WHEN_STOPPED))
    log, held = tmp_path / "run.jsonl", tmp_path / "held.txt"
    p = subprocess.Popen(
        [sys.executable, "-m", "pardash", "launch", "--nproc", "1", "--headless", "--log", str(log),
         "--runs-dir", str(tmp_path / "runs"), "--", "held.py", str(held)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    try:
        wait_for(held.exists, timeout_s=120, poll_s=0.2)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:  # (whatever went wrong: the launch stops its job and rank)
            p.send_signal(signal.SIGINT)
            p.communicate(timeout=120)
    assert p.returncode == 130, err[-2000:]
    msgs = load_log(log)[0]
    got = sorted((m for m in msgs if isinstance(m, schema.Step)), key=lambda m: m.seq)
    assert [(m.step, (m.custom or {}).get("gnorm")) for m in got] == [(1, 0.0), (2, 1.0), (3, 2.0)]
    exits = [(m.code, m.message) for m in msgs if isinstance(m, schema.Event) and m.name == "exit"]
    assert exits == [(-signal.SIGTERM, "stopped by Ctrl-C at the launch")]


def test_an_event_sent_after_the_optimizer_step_is_that_steps(hooked):
    # A step goes out as the next begins (so a value logged after its optimizer step joins it):
    # pt.event's default step, the reporter's last published, read the step before for an
    # event sent there (a script's own checkpoint event after its save: "checkpoint at step 2"
    # of step 3's).
    inst, rep = hooked
    api._api.reporter = rep  # (pt.event sends through the rank's one reporter)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(1, 4):
        _loss(model).backward()
        opt.step()
        opt.zero_grad()
        pt.event("checkpoint", message=f"ck{i}.pt")
    inst.finish()
    assert [(f["step"]) for name, f in rep.events if name == "checkpoint"] == [1, 2, 3]
    assert [s["step"] for s in rep.steps] == [1, 2, 3]


def test_a_value_logged_before_the_forward_each_iteration_is_its_own_steps(hooked):
    # pt.log at the top of the loop (before the forward): each value went with the step before,
    # the first of them overwritten (step 1 read 2, the 1 nowhere); one logged after the
    # optimizer step still joins its step.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(1, 5):
        pt.log(top=i)
        _loss(model).backward()
        opt.step()
        opt.zero_grad()
        pt.log(late=i)
    inst.finish()
    assert _logged(rep, "top", "late") == [{"top": float(i), "late": float(i)} for i in range(1, 5)]


def test_a_step_is_held_only_where_the_script_logs_and_the_heartbeat_says_it_done(hooked):
    # Held until the next step began (for values pt.log'd after it), every step of a script
    # that never logs was one late: a rank hung in its data loader after step 5 read "stalled
    # after step 4", killed there it lost step 5, and its record's time was the next step's.
    inst, rep = hooked
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def iteration() -> None:
        _loss(model).backward()
        opt.step()
        opt.zero_grad()

    iteration()
    assert [s["step"] for s in rep.steps] == [] and rep.last_step == 1  # the first: held, said done
    iteration()
    assert [s["step"] for s in rep.steps] == [1, 2]  # a script that never logs: out at its cut
    # It logs from now on (step 2 is out: this is step 3's), and its steps wait for what it
    # logs after them.
    pt.log(first=3)
    iteration()
    ended = time.time()
    time.sleep(0.05)
    pt.log(late=3)
    assert [s["step"] for s in rep.steps] == [1, 2] and rep.last_step == 3  # held, the heartbeat's step 3
    torch.save(model.state_dict(), io.BytesIO())  # a save: the step goes out before it
    assert [s["step"] for s in rep.steps] == [1, 2, 3]
    assert rep.steps[-1]["t"] <= ended  # stamped when it ended, not when sent
    inst.finish()
    assert _logged(rep, "first", "late") == [{}, {}, {"first": 3.0, "late": 3.0}]


def test_a_step_published_after_its_round_keeps_the_time_it_ended(hooked):
    # A GAN's step goes out as the next round ends, its last at the script's end: each was
    # stamped then, the last with the script's exit (4 s of work after the loop read as its
    # time, the run's rate 12 times too low).
    inst, rep = hooked
    gen, disc = nn.Linear(4, 8), nn.Linear(8, 1)
    opt_d, opt_g = torch.optim.SGD(disc.parameters(), lr=0.1), torch.optim.SGD(gen.parameters(), lr=0.02)
    ended = []
    for i in range(1, 4):
        _gan_iteration(gen, disc, opt_d, opt_g, i)
        ended.append(time.time())
        time.sleep(0.02)  # (the next iteration's data; after the last, the script's own work)
    inst.finish()
    assert [s["step"] for s in rep.steps] == [1, 2, 3]
    assert all(s["t"] <= t for s, t in zip(rep.steps, ended, strict=True)), ([s["t"] for s in rep.steps], ended)


def test_after_a_rounds_optimizer_step_the_phase_is_data(hooked):
    # After a GAN's step, its round maybe going on: a rank hung in its loader there read
    # "stalled in optimizer".
    inst, rep = hooked
    phases: list[str] = []
    rep.set_phase = phases.append
    gen, disc = nn.Linear(4, 8), nn.Linear(8, 1)
    opt_d, opt_g = torch.optim.SGD(disc.parameters(), lr=0.1), torch.optim.SGD(gen.parameters(), lr=0.02)
    for i in range(1, 3):
        _gan_iteration(gen, disc, opt_d, opt_g, i)
        assert phases[-1] == "data", phases[-6:]
    inst.finish()
