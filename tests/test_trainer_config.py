"""TrainConfig: every validation rule, and the flags round trip the launcher relies on."""

from __future__ import annotations

import argparse

import pytest

from pardash.trainer.config import (
    DEFAULT_STEPS,
    RankStep,
    Straggler,
    TrainConfig,
    add_arguments,
    from_args,
)


def parse(argv: list[str]) -> TrainConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_args(parser.parse_args(argv))


def test_defaults_are_valid_and_small():
    cfg = TrainConfig()
    assert (cfg.strategy, cfg.model) == ("ddp", "gpt")
    assert (cfg.steps, cfg.epochs) == (DEFAULT_STEPS, None)
    assert (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab, cfg.seq_len) == (2, 64, 4, 64, 32)
    assert (cfg.batch_size, cfg.lr, cfg.grad_accum, cfg.reshard_after_forward) == (16, 3e-3, 1, True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "zero"}, "--strategy 'zero' is not one of"),
        ({"device": "tpu"}, "--device 'tpu' is not one of"),
        ({"model": "bert"}, "--model 'bert' is not one of"),
        ({"precision": "fp16"}, "--precision 'fp16' is not one of"),
        ({"precision": "bf16", "device": "cpu"}, "--precision bf16 needs a GPU"),
        ({"steps": 10, "epochs": 2}, "give --steps or --epochs, not both"),
        ({"steps": 0}, "--steps must be at least 1"),
        ({"epochs": 0}, "--epochs must be at least 1"),
        ({"batch_size": 0}, "--batch-size must be at least 1"),
        ({"grad_accum": 0}, "--grad-accum must be at least 1"),
        ({"n_layer": 0}, "--n-layer must be at least 1"),
        ({"dataset_size": 0}, "--dataset-size must be at least 1"),
        ({"vocab": 1}, "--vocab must be at least 2"),
        ({"seq_len": 1}, "--seq-len must be at least 2"),
        ({"n_classes": 1}, "--n-classes must be at least 2"),
        ({"lr": 0.0}, "--lr must be a positive number"),
        ({"lr": float("nan")}, "--lr must be a positive number"),
        ({"warmup_steps": -1}, "--warmup-steps must be 0 or more"),
        ({"log_every": -1}, "--log-every must be 0 or more"),
        ({"noise": 1.0}, "--noise is a probability"),
        ({"pg_timeout_s": 0.0}, "--pg-timeout-s must be positive"),
        # (each of these died in every rank, or trained on to a nan loss, without a word here)
        ({"pg_timeout_s": float("inf")}, "--pg-timeout-s must be positive and at most 31536000 (a year)"),
        ({"pg_timeout_s": 1e15}, "--pg-timeout-s must be positive and at most"),
        ({"grad_clip": float("nan")}, "--grad-clip must be 0 or more, got nan"),
        ({"weight_decay": float("nan")}, "--weight-decay must be 0 or more, got nan"),
        ({"seed": 2**64 - 1}, "--seed must be from 0 to"),
        ({"seed": -1}, "--seed must be from 0 to"),
        ({"inject_straggler": "0:data:1e300"}, "SECONDS must be a positive number, at most 86400"),
        ({"log_every": -(10**400)}, "--log-every must be 0 or more"),  # (isfinite of it overflowed: a traceback)
        ({"n_embd": 64, "n_head": 5}, "--n-embd 64 is not divisible by --n-head 5"),
        ({"inject_straggler": "1:data"}, "expected RANK:KIND:SECONDS"),
        ({"inject_straggler": "x:data:1"}, "RANK must be an integer"),
        ({"inject_straggler": "1:disk:0.1"}, "KIND must be one of data, compute"),
        ({"inject_straggler": "1:data:0"}, "SECONDS must be a positive number"),
        ({"inject_straggler": "-1:data:0.1"}, "RANK must not be negative"),
        ({"inject_stall": "1-5"}, "--inject-stall '1-5': expected RANK@STEP"),
        ({"inject_stall": "1@0"}, "STEP counts from 1"),
        ({"inject_crash": "1@x"}, "--inject-crash '1@x': expected RANK@STEP"),
        ({"inject_crash": "0@500", "steps": 100}, "step 500 is past --steps 100"),
    ],
)
def test_invalid_configs_are_one_clear_line(kwargs, message):
    with pytest.raises(ValueError) as err:
        TrainConfig(**kwargs)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "world", "message"),
    [
        ({"strategy": "single"}, 2, "--strategy single runs one process"),
        ({"strategy": "dp"}, 4, "--strategy dp runs one process"),
        ({"inject_crash": "2@5"}, 2, "rank 2 does not exist in a world of 2"),
        ({"inject_straggler": "3:compute:0.1"}, 2, "rank 3 does not exist"),
        ({"dataset_size": 100, "batch_size": 16, "grad_accum": 2}, 4, "raise it to at least 128"),
        # past the run's end under --epochs (accepted, and never fired)
        ({"inject_crash": "1@999", "epochs": 1, "dataset_size": 256, "batch_size": 8}, 2,
         r"step 999 is past the run's last, 16 \(--epochs 1 of 16 steps\)"),
        ({"inject_stall": "0@33", "epochs": 2, "dataset_size": 256, "batch_size": 8}, 2, "step 33 is past the run's last, 32"),
    ],
)
def test_rules_that_need_the_world_size(kwargs, world, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs).check_world_size(world)


def test_check_world_size_accepts_a_fitting_world():
    TrainConfig(strategy="fsdp", inject_stall="3@10").check_world_size(4)
    TrainConfig(epochs=2, dataset_size=256, batch_size=8, inject_crash="1@32").check_world_size(2)  # the last step


def test_faults_parse_into_typed_fields():
    cfg = TrainConfig(inject_straggler="1:compute:0.25", inject_stall="0@7", inject_crash="1@9")
    assert cfg.inject_straggler == Straggler(rank=1, kind="compute", seconds=0.25)
    assert cfg.inject_stall == RankStep(rank=0, step=7)
    assert cfg.inject_crash == RankStep(rank=1, step=9)
    assert cfg.to_dict()["inject_straggler"] == "1:compute:0.25"


def test_epochs_leave_steps_unset():
    cfg = TrainConfig(epochs=3)
    assert (cfg.steps, cfg.epochs) == (None, 3)


@pytest.mark.parametrize(
    "cfg",
    [
        TrainConfig(),
        TrainConfig(strategy="fsdp", reshard_after_forward=False, steps=30, lr=1e-3 / 3),
        TrainConfig(strategy="single", model="mlp", epochs=2, hidden=128, depth=2, seed=7),
        TrainConfig(device="cuda", precision="bf16", grad_accum=4, tie_weights=False),
        TrainConfig(inject_straggler="1:data:0.05", inject_stall="0@3", inject_crash="1@4",
                    steps=10, log_every=0, noise=0.0),
    ],
    ids=["defaults", "fsdp", "mlp-epochs", "bf16", "faults"],
)
def test_to_argv_round_trips_through_the_flags(cfg):
    argv = cfg.to_argv()
    assert parse(argv) == cfg
    assert all(isinstance(a, str) for a in argv)


def test_to_argv_names_only_what_differs_from_the_defaults():
    assert TrainConfig().to_argv() == []
    assert TrainConfig(reshard_after_forward=False).to_argv() == ["--no-reshard-after-forward"]


def test_flags_map_to_fields():
    cfg = parse(["--strategy", "fsdp", "--steps", "5", "--batch-size", "8", "--n-layer", "3",
                 "--no-reshard-after-forward", "--inject-stall", "1@2"])
    assert (cfg.strategy, cfg.steps, cfg.batch_size, cfg.n_layer) == ("fsdp", 5, 8, 3)
    assert cfg.reshard_after_forward is False
    assert cfg.inject_stall == RankStep(rank=1, step=2)


def test_from_args_ignores_foreign_attributes():
    ns = argparse.Namespace(strategy="single", nproc_per_node=4, headless=True)
    assert from_args(ns).strategy == "single"


def test_the_learning_rate_starts_at_its_peak_and_decays_to_a_tenth_by_the_last_step():
    # Without warm-up the cosine decay began before step 1: --steps 1 --lr 0.01 trained at 1e-3,
    # and the help's "peak learning rate" was never used.
    from pardash.trainer.train import lr_at

    cfg = TrainConfig(steps=20, lr=0.01)
    assert lr_at(1, cfg, 20) == pytest.approx(0.01) and lr_at(20, cfg, 20) == pytest.approx(0.001)
    assert lr_at(1, TrainConfig(steps=1, lr=0.01), 1) == pytest.approx(0.01)
    warm = TrainConfig(steps=20, lr=0.01, warmup_steps=5)  # (the peak at the warm-up's last step, as before)
    assert [lr_at(n, warm, 20) for n in (1, 5, 20)] == pytest.approx([0.002, 0.01, 0.001])


def test_a_collective_timeout_shorter_than_the_stall_check_is_said_as_the_run_starts():
    # --inject-stall 1@5 --pg-timeout-s 5 on 2 ranks: rank 0's timeout fired before the hub called
    # rank 1 stalled, and the failure line named rank 0 the cause, the stalled rank "stopped".
    from pardash.telemetry.analysis import LivenessConfig
    from pardash.trainer.config import STALL_TOLD_S

    assert STALL_TOLD_S >= LivenessConfig().stall_min_s + 1  # (kept in step with the hub's, not imported by ranks)
    (said,) = TrainConfig(pg_timeout_s=5).start_notes(total_steps=20, world_size=2)
    assert said.startswith("--pg-timeout-s 5 is shorter than the 8 s or so the hub takes to call a rank stalled"), said
    assert TrainConfig(pg_timeout_s=5).start_notes(20, world_size=1) == []  # (one process waits for nobody)
    assert TrainConfig(pg_timeout_s=20).start_notes(20, world_size=2) == []
    assert TrainConfig(log_every=10**400).log_every == 10**400  # (a huge whole number is no error)


def test_a_run_of_epochs_says_its_steps_out_of_their_total():
    # --epochs 2: the trainer printed "step 3/16", the progress lines "step 3" (the hello's
    # config said steps None); it says the steps the epochs come to now.
    from pardash.telemetry import schema
    from pardash.telemetry.printer import progress_line
    from pardash.telemetry.state import RunState

    st = RunState(run_id="r")
    config = {**TrainConfig(epochs=2, dataset_size=256, batch_size=16).to_dict(), "total_steps": 16}
    st.apply(schema.Hello(run="r", rank=0, world_size=1, strategy="single", config=config, hseq=1), 1.0)
    st.apply(schema.Step(run="r", rank=0, step=3, step_s=0.1, loss=1.0, samples=16, hseq=2), 2.0)
    assert progress_line(st, 1.0).startswith("[   1.0s] step 3/16 |"), progress_line(st, 1.0)
    from pardash.telemetry.summary import total_steps

    # (a steps that is no whole number does not hide the total the trainer said)
    assert total_steps(schema.Hello(rank=0, config={"steps": True, "total_steps": 16})) == 16
    assert total_steps(schema.Hello(rank=0, config={"steps": "16"})) is None
