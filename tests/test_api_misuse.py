"""The explicit API refuses a script's misuse at the call, in one line naming the call and what
it takes, the same with a hub as without one; what the hub takes, it takes. Metrics that stop
being finite are said, not dropped without a word; the automatic instrumentation's calls into
the API never raise."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import wait_for
from pardash.telemetry import api, schema
from pardash.telemetry.logreader import load_log


@pytest.fixture(params=["alone", "watched"])
def watched(request, monkeypatch, tmp_path, fresh_api):
    """The script run alone (no PARDASH_ENDPOINT), then under a real hub: it must fail alike."""
    if request.param == "alone":
        monkeypatch.delenv("PARDASH_ENDPOINT", raising=False)
        yield None
        return
    hub = request.getfixturevalue("hub")
    monkeypatch.setenv("PARDASH_ENDPOINT", hub.ingest_endpoint)
    monkeypatch.setenv("PARDASH_RUN_ID", "test-run")
    yield hub


def _log(tmp_path: Path) -> list:
    path = tmp_path / "telemetry.jsonl"
    return load_log(path)[0] if path.exists() else []


def _warnings(tmp_path: Path) -> list[str]:
    return [m.message for m in _log(tmp_path) if isinstance(m, schema.Event) and m.name == "warning"]


@pytest.mark.parametrize(
    "call, error, says",
    [
        # TypeError: Unexpected keyword argument 'foo', from building schema.Event (both ranks died)
        (lambda pt: pt.event("custom", "with fields", foo={"a": 1}), TypeError,
         "pardash.telemetry.event('custom', foo=...): no such field; it takes step=, duration_s=, code= and traceback="),
        # accepted, then refused by the hub (invalid): the script never knew
        (lambda pt: pt.event("x", 5), TypeError, "pardash.telemetry.event('x', message): expected a string for the message, got int"),
        (lambda pt: pt.event(123, "int name"), TypeError, "pardash.telemetry.event(name, ...): expected a string for the event's name, got int"),
        (lambda pt: pt.event("n" * 65), ValueError, "pardash.telemetry.event(name, ...): a name of 65 characters; at most 64"),
        (lambda pt: pt.event("x", step=2.5), TypeError, "pardash.telemetry.event('x', step=...): expected a whole number, got float"),
        (lambda pt: pt.event("x", step=True), TypeError, "pardash.telemetry.event('x', step=...): expected a whole number, got bool"),
        (lambda pt: pt.event("x", duration_s="2s"), TypeError, "pardash.telemetry.event('x', duration_s=...): expected a number of seconds, got str"),
        (lambda pt: pt.event("x", code=2**70), TypeError, "pardash.telemetry.event('x', code=...): a whole number of 22 digits is too large"),
        (lambda pt: pt.event("x", traceback=5), TypeError, "pardash.telemetry.event('x', traceback=...): expected a string, got int"),
        # truncated by int(), or taken below zero
        (lambda pt: pt.log(samples=2.5), ValueError, "pardash.telemetry.log(samples=...): expected a non-negative whole number, got 2.5"),
        (lambda pt: pt.log(samples=-1), ValueError, "pardash.telemetry.log(samples=...): expected a non-negative whole number, got -1"),
        (lambda pt: pt.log(samples=float("nan")), ValueError, "pardash.telemetry.log(samples=...): expected a non-negative whole number, got nan"),
        (lambda pt: pt.log(samples=2**49), ValueError, "pardash.telemetry.log(samples=...): expected a non-negative whole number up to 2**48, got 562949953421312"),
        (lambda pt: pt.log(samples=__import__("torch").tensor(2.5)), ValueError, "pardash.telemetry.log(samples=...): expected a non-negative whole number, got 2.5"),
        (lambda pt: pt.log(epoch=1.5), ValueError, "pardash.telemetry.log(epoch=...): expected a whole number, got 1.5"),
        (lambda pt: pt.log(epoch=1e30), ValueError, "pardash.telemetry.log(epoch=...): expected a whole number within 64 bits, got 1e+30"),
    ],
)  # fmt: skip
def test_misuse_fails_at_the_call_with_or_without_a_hub(call, error, says, watched, tmp_path):
    import pardash.telemetry as pt

    pt.init()
    with pytest.raises(error) as info:
        call(pt)
    assert str(info.value).startswith(says), str(info.value)
    assert "\n" not in str(info.value)
    if watched is not None:
        # the process goes on publishing: nothing of the refused call reached the hub
        pt.event("info", "after")
        api.close()
        wait_for(lambda: any(isinstance(m, schema.Event) and m.name == "info" for m in _log(tmp_path)))
        assert sum(watched.core.rejected.values()) == 0
        assert [m.name for m in _log(tmp_path) if isinstance(m, schema.Event)] == ["info"]


def test_what_the_hub_takes_the_api_takes(hub, tmp_path, monkeypatch, fresh_api):
    # Refused at the call exactly what the hub would refuse, no more: a whole float or tensor
    # for samples, a negative epoch, a negative step or duration, numpy's integers, an empty name.
    import numpy as np
    import torch

    import pardash.telemetry as pt

    monkeypatch.setenv("PARDASH_ENDPOINT", hub.ingest_endpoint)
    monkeypatch.setenv("PARDASH_RUN_ID", "test-run")
    with pt.step():
        pt.log(samples=32.0, epoch=-1, tokens=np.int64(7))
    with pt.step():
        pt.log(samples=torch.tensor(16), epoch=np.int64(2))
    pt.event("eval", "held out", step=np.int64(2), duration_s=torch.tensor(1.5), code=0)
    pt.event("", step=-1, duration_s=-0.5, traceback="tb")
    pt.event("n" * 64)
    api.close()
    wait_for(lambda: len([m for m in _log(tmp_path) if isinstance(m, schema.Event)]) == 3)
    steps = sorted((m for m in _log(tmp_path) if isinstance(m, schema.Step)), key=lambda m: m.seq)
    assert [(s.samples, s.epoch, s.custom.get("tokens")) for s in steps] == [(32, -1, 7.0), (16, 2, None)]
    events = [m for m in _log(tmp_path) if isinstance(m, schema.Event)]
    assert [(e.name, e.step, e.duration_s, e.code) for e in events] == [("eval", 2, 1.5, 0), ("", -1, -0.5, None), ("n" * 64, 2, None, None)]
    assert sum(hub.core.rejected.values()) == 0


def test_a_metric_that_stops_being_finite_is_said_once_each_way(hub, tmp_path, monkeypatch, fresh_api):
    # A NaN custom metric or grad_norm vanished from its steps without a word (only the loss
    # was said).
    import torch

    import pardash.telemetry as pt

    monkeypatch.setenv("PARDASH_ENDPOINT", hub.ingest_endpoint)
    monkeypatch.setenv("PARDASH_RUN_ID", "test-run")
    for i in range(1, 7):
        with pt.step():
            nan = float("nan")
            pt.log(loss=1.0, my_metric=nan if i in (2, 3) else float(i), grad_norm=torch.tensor(float("inf")) if i >= 4 else 0.5)
    api.close()
    wait_for(lambda: len([m for m in _log(tmp_path) if isinstance(m, schema.Step)]) == 6)
    steps = sorted((m for m in _log(tmp_path) if isinstance(m, schema.Step)), key=lambda m: m.seq)
    assert [s.custom for s in steps] == [
        {"my_metric": 1.0, "grad_norm": 0.5},
        {"grad_norm": 0.5},
        {"grad_norm": 0.5},
        {"my_metric": 4.0},
        {"my_metric": 5.0},
        {"my_metric": 6.0},
    ]
    assert _warnings(tmp_path) == [
        "my_metric is nan at step 2 (steps go on without it while it is not finite)",
        "my_metric is finite again at step 4 (not finite from step 2)",
        "grad_norm is inf at step 4 (steps go on without it while it is not finite)",
    ]
    assert sum(hub.core.rejected.values()) == 0


def test_thousands_of_metrics_gone_nan_do_not_flood_the_hub(hub, tmp_path, monkeypatch, fresh_api):
    import pardash.telemetry as pt
    from pardash.telemetry.reporter import MAX_METRICS_FOLLOWED

    monkeypatch.setenv("PARDASH_ENDPOINT", hub.ingest_endpoint)
    monkeypatch.setenv("PARDASH_RUN_ID", "test-run")
    for i in range(1, 21):
        with pt.step():
            pt.log(loss=1.0, **{f"m{i}_{j}": float("nan") for j in range(100)})  # 2,000 names in all
    api.close()
    wait_for(lambda: len([m for m in _log(tmp_path) if isinstance(m, schema.Step)]) == 20)
    warnings = _warnings(tmp_path)
    assert len(warnings) == MAX_METRICS_FOLLOWED + 1
    assert warnings[0] == "m1_0 is nan at step 1 (steps go on without it while it is not finite)"
    assert warnings[-1].startswith(f"m1_{MAX_METRICS_FOLLOWED} is nan at step 1 (steps go on without it); {MAX_METRICS_FOLLOWED} other")
    assert sum(hub.core.rejected.values()) == 0
    assert len(api.reporter()._metrics_bad) == MAX_METRICS_FOLLOWED  # the names tracked stay bounded


def test_the_loss_is_still_said_in_the_words_the_report_reads(hub, tmp_path, monkeypatch, fresh_api):
    from pardash.telemetry.report import LOSS_NOT_FINITE

    import pardash.telemetry as pt

    monkeypatch.setenv("PARDASH_ENDPOINT", hub.ingest_endpoint)
    monkeypatch.setenv("PARDASH_RUN_ID", "test-run")
    for i in range(1, 4):
        with pt.step():
            pt.log(loss=float("inf") if i == 2 else 1.0, val_loss=float("nan") if i == 2 else 1.0)
    api.close()
    wait_for(lambda: len(_warnings(tmp_path)) == 4)
    said = [w for w in _warnings(tmp_path) if LOSS_NOT_FINITE.match(w)]
    assert said == ["loss is inf at step 2: diverged, or a spike (steps go on without a loss while it is not finite)"]


class _DeviceScalar:
    """A one-element tensor on a GPU, as far as the API looks (this machine may have none)."""

    class device:
        type = "cuda"

    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value

    def numel(self) -> int:
        return 1


def test_the_instrumentations_calls_into_the_api_never_raise(hub, tmp_path, monkeypatch, fresh_api):
    # The hooks publish what the script logged (Logged.apply) and send events through the
    # reporter: a bad value found there is said, never raised into the training loop.
    import pardash.telemetry as pt

    monkeypatch.setenv("PARDASH_ENDPOINT", hub.ingest_endpoint)
    monkeypatch.setenv("PARDASH_RUN_ID", "test-run")
    pt.init()
    pt.log(samples=_DeviceScalar(2.5), epoch=_DeviceScalar(float("nan")), loss=1.0)  # read only when published
    logged = api.take_logged()
    out = {"step": 1, "step_s": 0.1}
    logged.apply(out)  # as trainer/instrument.py's _emit does
    assert out == {"step": 1, "step_s": 0.1, "loss": 1.0}
    rep = api.reporter()
    assert rep.step(**out)
    assert rep.event("warning", "from a hook", foo=1) is False  # a field the schema lacks: counted
    assert rep.dropped == 1
    api.close()
    wait_for(lambda: any(isinstance(m, schema.Step) for m in _log(tmp_path)))
    assert _warnings(tmp_path) == [
        "pardash.telemetry.log(samples=...): expected a non-negative whole number, got 2.5 (a device tensor, read as its "
        "step was published): left out of the steps",
        "pardash.telemetry.log(epoch=...): expected a whole number, got nan (a device tensor, read as its step was "
        "published): left out of the steps",
    ]
