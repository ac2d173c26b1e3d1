"""An error in a DataLoader worker, as the root cause says it (review 277): torch carries it
over to the rank ("Caught ValueError in DataLoader worker process 0." and the original
traceback, the original error last); its message, over the 1 KiB memory keeps of it, was cut at
its start and the root cause read "^^^^^… (in DataLoader worker process 0)". A worker killed by a
signal (the OOM killer's SIGKILL) read "exited unexpectedly", the signal only in its traceback.
Real DataLoader workers (forked), their errors as pardash's excepthook words them."""

from __future__ import annotations

import traceback

import torch
from torch.utils.data import DataLoader, Dataset

from pardash.telemetry import schema
from pardash.telemetry.failures import error_line, short_error
from pardash.telemetry.printer import event_line
from pardash.telemetry.state import MESSAGE_KEPT, RunState


def _decode(i):
    return _parse(i)


def _parse(i):
    return _check(i)


def _check(i):
    if i == 5:
        raise ValueError(f"corrupt record {i} in shard /data/imagenet/train-00017-of-01024.tar (offset 123456789)")
    return torch.zeros(4)


class Records(Dataset):
    def __init__(self, how: str) -> None:
        self.how = how

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i):
        return _decode(i)


def _error(how: str) -> schema.Event:
    """The rank's error event (its message and traceback as pardash's excepthook makes them)."""
    try:
        for _ in DataLoader(Records(how), batch_size=2, num_workers=1):
            pass
    except Exception as exc:
        message = traceback.format_exception_only(type(exc), exc)[-1].strip()
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return schema.Event(run="r", rank=1, seq=3, t=1.0, name="error", message=message, traceback=text, step=48)
    raise AssertionError("no error")


def test_an_error_a_dataloader_worker_raised_is_said_as_the_original_error_however_long_its_traceback():
    ev = _error("raise")
    assert len(ev.message) > MESSAGE_KEPT  # (cut in memory: what the event log and the alerts read)
    want = ("ValueError: corrupt record 5 in shard /data/imagenet/train-00017-of-01024.tar (offset 123456789) "
            "(in DataLoader worker process 0)")  # fmt: skip
    st = RunState()
    st.apply(ev, 1.0)
    (kept,) = [m for m in st.events if m.name == "error"]
    assert len(kept.message) <= MESSAGE_KEPT + 1
    assert error_line(ev.message) == error_line(kept.message) == want
    assert event_line(ev) == f"[error] rank 1: {want}"  # (it read "ValueError: Caught ValueError in DataLoader worker process 0.")


def test_a_dataloader_worker_killed_by_a_signal_is_said_so():
    # Torch says it one of several ways as its handler of the worker's end fires (a worker killed
    # here, in the test's process, raised in whatever came next: its words, made for sure):
    # "is killed by signal", or, as the rank waited for a batch, "exited unexpectedly" raised
    # from it, the signal only in the traceback (a DDP job's, review 277).
    said = "RuntimeError: DataLoader worker (pid 29073) is killed by signal: Killed (SIGKILL: the OOM killer?)"
    killed = "DataLoader worker (pid 29073) is killed by signal: Killed. "  # (torch's trailing space)
    assert error_line(f"RuntimeError: {killed}") == said
    try:
        try:
            raise RuntimeError(killed)
        except RuntimeError as e:
            raise RuntimeError("DataLoader worker (pid(s) 29073) exited unexpectedly") from e
    except RuntimeError as exc:
        message = traceback.format_exception_only(type(exc), exc)[-1].strip()
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    assert error_line(message, text) == short_error(message, 160, text) == said
    assert error_line(message) == message  # (no traceback: its message, as before)
    seg = "RuntimeError: DataLoader worker (pid 7) is killed by signal: Segmentation fault. "
    assert error_line(seg) == "RuntimeError: DataLoader worker (pid 7) is killed by signal: Segmentation fault"
