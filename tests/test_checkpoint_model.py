"""A checkpoint of another model than the flags make, where the parameters' shapes cannot tell:
--n-head (each head's size is --n-embd / --n-head, the weights' shapes are the same)."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch

from pardash.trainer import checkpoint, resume
from pardash.trainer.config import TrainConfig
from pardash.trainer.models import build_model
from pardash.trainer.strategies import Wrapped

CPU = torch.device("cpu")


def _trained(n_head: int, strategy: str = "single") -> tuple[Wrapped, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = build_model(TrainConfig(n_embd=32, n_head=n_head, n_layer=1, vocab=16, seq_len=8))
    optimizer = torch.optim.AdamW(model.parameters())
    return Wrapped(model=model, inner=model, strategy=strategy), optimizer


def _save(root, strategy: str, n_head: int = 4) -> checkpoint.Found:
    w, optimizer = _trained(n_head, strategy)
    w.model(torch.zeros(2, 8, dtype=torch.long), torch.zeros(2, 8, dtype=torch.long)).backward()
    optimizer.step()
    progress = checkpoint.Progress(step=4, epoch=0, steps_into_epoch=4, total_steps=8, lr=1e-3, seed=0, world_size=1)
    path, _ = checkpoint.save(root, progress, w=w, optimizer=optimizer, rank=0, device=CPU, job="run-a")
    return checkpoint.Found(4, path)


# DCP in one process, as meant (the save; the load silences it itself).
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@pytest.mark.parametrize("strategy", ["single", "ddp"], ids=["plain", "dcp"])
def test_a_checkpoint_of_another_head_count_is_another_model(tmp_path, strategy):
    # It was resumed without a word: the shapes agree, so the load succeeded, and the run went
    # on with another attention than the one trained.
    found = _save(tmp_path / "ckpt", strategy)
    w, optimizer = _trained(2, strategy)
    said = []
    reporter = types.SimpleNamespace(event=lambda name, **kw: said.append((name, kw.get("message", ""))))
    cfg = types.SimpleNamespace(checkpoint_dir=str(tmp_path / "ckpt"), resume=True)
    with pytest.raises(resume.ResumeError) as err:
        resume.load_newest_readable(found, cfg, w, optimizer, types.SimpleNamespace(rank=0, device=CPU), reporter)
    assert str(err.value) == (
        f"resume: {found.path} holds another model than this run's flags make (ValueError: attention head size "
        "mismatch: the checkpoint's model has --n-head 4 (heads of 8), this one --n-head 2 (heads of 16)): "
        "resume with the model flags it was saved with (--model, --n-layer, --n-embd, --n-head, --hidden, --vocab, "
        "--seq-len), or give another --checkpoint-dir")
    assert said == []  # not taken for damage ("could not be read")
    # The same head count loads, and the checkpoint keeps it.
    w, optimizer = _trained(4, strategy)
    progress, _, _ = checkpoint.load(found, w=w, optimizer=optimizer, rank=0, device=CPU)
    assert (progress.step, progress.n_head) == (4, 4)


def test_a_checkpoint_that_kept_no_head_count_is_not_second_guessed():
    older = checkpoint.Progress(step=4, epoch=0, steps_into_epoch=4, total_steps=8, lr=1e-3, seed=0, world_size=1)
    assert older.n_head == 0
    checkpoint.check_same_heads(older, _trained(2)[0].inner)  # nothing to tell it by: no error
    mlp = build_model(TrainConfig(model="mlp"))  # no attention: nothing to compare
    assert checkpoint.attention_heads(mlp) == 0
    checkpoint.check_same_heads(dataclasses.replace(older, n_head=4), mlp)


def test_a_dcp_checkpoint_loads_in_one_process_without_torchs_warning(tmp_path):
    # --strategy single --resume from a ddp/fsdp checkpoint printed torch's "UserWarning:
    # torch.distributed is disabled, unavailable or uninitialized, assuming the intent is to
    # load in a single process", which is the intent. Only that warning goes, and only there.
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # the save's, as meant
        found = _save(tmp_path / "ckpt", "ddp")
    w, optimizer = _trained(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("another warning", UserWarning)
        assert checkpoint.load(found, w=w, optimizer=optimizer, rank=0, device=CPU)[0].step == 4
        warnings.warn("torch.distributed is disabled, unavailable or uninitialized (not the load's)", UserWarning)
    assert [str(c.message) for c in caught] == [
        "another warning", "torch.distributed is disabled, unavailable or uninitialized (not the load's)"]
