"""A rank ended by a stop (an exit code of failures.STOPPED_CODES) is said "stopped" in the same
words by every output: the headless progress, the TUI's event log and alerts, the TensorBoard
export and the report (failures.stop_text), as its status says "stopped" wherever it is counted
(review 266: "[exit] ranks 0-4, 6-63 exited with code -15" above "1 exited, 63 stopped"; "ranks
0-1 exited with code -15: stopped by you" in the TUI's event log under "▬ 2 stopped"; "[exit]
ranks 0-1 stopped by SIGTERM (SIGTERM)")."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import pardash_env

from pardash.telemetry import schema
from pardash.telemetry.export import event_text
from pardash.telemetry.failures import stop_text
from pardash.telemetry.printer import event_line, group_alike, states_text
from pardash.telemetry.state import RunState


@pytest.mark.parametrize(
    ("code", "note", "step", "said"),
    [
        (-15, "stopped by you", None, "stopped by you (SIGTERM)"),
        (-15, "stopped by SIGTERM", 20, "stopped by SIGTERM at step 20"),  # (the signal named once)
        (-15, "stopped by SIGTERM on node 1 (vm)", None, "stopped by SIGTERM on node 1 (vm)"),
        (-2, "stopped by Ctrl-C on node 1 (vm)", 5, "stopped by Ctrl-C on node 1 (vm) at step 5 (SIGINT)"),
        (-15, None, None, "stopped (SIGTERM)"),  # (a rank's own exit: no one's note of who)
        (-15, "torchrun: rank 3 killed by signal 15 (SIGTERM)", None, "stopped (SIGTERM)"),
        (-15, "rank 3 was stopped by torchrun", None, "stopped by torchrun (SIGTERM)"),  # (an older log's note)
        (143, "stopped by you", None, "stopped by you (exit code 143)"),
    ],
)
def test_a_stop_is_worded_from_its_exit(code, note, step, said):
    assert stop_text(3, code, note, step) == said


def _exits(note: str | None, ranks=(0, 1)) -> list[schema.Event]:
    return [schema.Event(run="r", rank=r, seq=-1 if note else 9, name="exit", code=-15, message=note or "", t=2.0) for r in ranks]


def test_the_headless_progress_names_a_stops_signal_once():
    # "[exit] ranks 0-1 stopped by SIGTERM (SIGTERM)" of a `kill -TERM` of the launch
    lines = [event_line(*e) for e in group_alike(_exits("stopped by SIGTERM"))]
    assert lines == ["[exit] ranks 0-1 stopped by SIGTERM"]
    lines = [event_line(*e) for e in group_alike(_exits("stopped by SIGTERM on node 1 (vm)", ranks=(1,)))]
    assert lines == ["[exit] rank 1 stopped by SIGTERM on node 1 (vm)"]


def test_an_exit_without_a_launchers_note_reads_as_the_ranks_status_says():
    # Ranks under `pardash hub`, a job launched elsewhere: no launcher's note of the stop. Their
    # status is "stopped" (the code says so), and so are the words.
    st = RunState()
    msgs: list = [schema.Hello(run="r", rank=r, seq=0, world_size=2, strategy="ddp", t=1.0) for r in (0, 1)]
    msgs += _exits(None)
    for m in msgs:
        st.apply(m, 0.0)
    assert [event_line(*e) for e in group_alike(msgs[2:])] == ["[exit] ranks 0-1 stopped (SIGTERM)"]
    assert states_text(st) == "2 stopped"
    assert event_text(msgs[2]) == "stopped (SIGTERM)"  # (TensorBoard's text read "exit code -15, SIGTERM")


def test_the_tui_event_log_says_a_stop_as_the_header_does():
    # A job stopped in the TUI: "ranks 0-1 exited with code -15: stopped by you", in the
    # failure's colour, under a header of "▬ 2 stopped".
    from pardash.tui.widgets.event_log import describe

    (entry,) = group_alike(_exits("stopped by you"))
    assert describe(*entry) == ("ranks 0-1 stopped by you (SIGTERM)", "dim")
    (entry,) = group_alike(_exits("stopped by SIGTERM"))
    assert describe(*entry)[0] == "ranks 0-1 stopped by SIGTERM"
    # A failure keeps its words and colour.
    failed = schema.Event(run="r", rank=1, seq=9, name="exit", code=1, t=2.0)
    assert describe(failed) == ("rank 1 exited with code 1", "bad")


def test_a_simulated_crash_says_the_ranks_stopped_after_it_stopped(tmp_path):
    # `pardash simulate --crash`: the ranks stopped after the crash (their own exits, -15, no
    # launcher to note who stopped them) read "[exit] ranks 0, 2-7 exited with code -15", then
    # "1 exited, 7 stopped".
    sim = ["simulate", "--headless", "--ranks", "8", "--steps", "40", "--rate", "20", "--every", "60", "--crash", "1@5"]
    p = subprocess.run([sys.executable, "-m", "pardash", *sim], capture_output=True, text=True, env=pardash_env(),
                       cwd=tmp_path, timeout=120)  # fmt: skip
    assert "[exit] rank 1 exited with code 1" in p.stdout, p.stdout
    assert "[exit] ranks 0, 2-7 stopped (SIGTERM)" in p.stdout, p.stdout
    assert "code -15" not in p.stdout and "1 exited, 7 stopped" in p.stdout, p.stdout
