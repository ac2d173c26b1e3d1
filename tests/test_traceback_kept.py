"""An error's traceback as memory keeps it (state.TRACEBACK_KEPT characters of its end) still
says where the job's own code raised it. A shape error under DDP with a two-layer model is
2,642 characters: the report's "raised at" read torch's linear.py alone, the script's line cut
off with the traceback's start (review 308)."""

from __future__ import annotations

from pardash.telemetry import schema
from pardash.telemetry.failures import raised_at
from pardash.telemetry.state import TRACEBACK_KEPT, _kept

TORCH = "/venv/lib/python3.11/site-packages/torch"


def _traceback(library_frames: int) -> str:
    lines = ["Traceback (most recent call last):",
             '  File "/home/me/train.py", line 88, in <module>', "    main()",
             '  File "/home/me/train.py", line 29, in main', "    loss = ((m(x) - y) ** 2).mean()"]  # fmt: skip
    for i in range(library_frames):
        lines += [f'  File "{TORCH}/nn/modules/module.py", line {1700 + i}, in _call_impl', "    return forward_call(*args, **kwargs)"]
    lines += [f'  File "{TORCH}/nn/modules/linear.py", line 134, in forward', "    return F.linear(input, self.weight, self.bias)",
              "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x17 and 32x256)"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _error(tb: str) -> schema.Event:
    return schema.Event(rank=1, name="error", message="RuntimeError: mat1 and mat2 shapes cannot be multiplied", traceback=tb, seq=9)


def test_a_long_traceback_cut_to_its_end_keeps_the_scripts_own_frame():
    tb = _traceback(30)
    assert len(tb) > TRACEBACK_KEPT and "train.py" not in tb[-TRACEBACK_KEPT:]  # (the cut takes it)
    kept = _kept(_error(tb)).traceback
    assert raised_at(kept) == raised_at(tb) == "/home/me/train.py:29 in main (in torch/nn/modules/linear.py:134 in forward)"
    assert tb.endswith(kept.split("  …\n", 1)[1]) and "loss = ((m(x) - y) ** 2).mean()" in kept
    assert len(kept) < TRACEBACK_KEPT + 200


def test_a_short_traceback_is_kept_whole_and_one_of_library_frames_alone_is_cut_as_before():
    tb = _traceback(2)
    assert _kept(_error(tb)).traceback == tb
    only_torch = "".join(f'  File "{TORCH}/a.py", line {i}, in f\n    g()\n' for i in range(100)) + "RuntimeError: x\n"
    assert _kept(_error(only_torch)).traceback == only_torch[-TRACEBACK_KEPT:]


def test_the_report_shows_the_tracebacks_end_and_the_scripts_own_frame_above_it():
    # The report named the line ("raised at") and left the traceback to be found in the ranks'
    # output (review 308): its end is shown now, the script's frame first where it is further
    # up, Python's ^^^^ marks left out.
    from pardash.telemetry.failures import TRACEBACK_SHOWN, traceback_end

    tb = _traceback(30).replace("    return forward_call(*args, **kwargs)\n", "    return forward_call(*args, **kwargs)\n           ^^^^^^^^^^^^\n")
    shown = traceback_end(tb)
    assert shown[:3] == ['  File "/home/me/train.py", line 29, in main', "    loss = ((m(x) - y) ** 2).mean()", "  ..."], shown
    assert shown[-1] == "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x17 and 32x256)"
    assert shown[3].lstrip().startswith("File ") and len(shown) <= 3 + TRACEBACK_SHOWN  # (from a frame's start)
    assert not any(set(line.strip()) <= {"^", "~"} for line in shown)
    short = _traceback(0)
    assert traceback_end(short) == [line for line in short.splitlines()[1:]][-TRACEBACK_SHOWN:]
