"""Review 268, finding 1: two launches of scripts in one folder were told apart by their run ids
alone: `pardash ps` (and its --json), result.json and the log named no script and no argument.
Now each says what every rank runs (``command``: ``python train_b.py --lr 3``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from helpers import pardash_env

from pardash import cli
from pardash.telemetry import registry

pytestmark = pytest.mark.timeout(180)

ENDS = {"ingest": "tcp://127.0.0.1:1", "updates": "tcp://127.0.0.1:2", "snapshot": "tcp://127.0.0.1:3"}

# A script that trains for no step: it waits until the test has looked at `pardash ps`.
WAITS = """\
import os, sys, time
while not os.path.exists("go"):
    time.sleep(0.05)
print("args", sys.argv[1:])
"""


def _wait_for(check, what: str, proc: subprocess.Popen, timeout_s: float = 120.0):
    """``check()``'s first true answer (the launch still running), polled."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        assert proc.poll() is None, f"the launch ended ({proc.returncode}) before {what}: {proc.communicate()}"
        time.sleep(0.05)
    raise AssertionError(f"no {what} in {timeout_s} s")


def test_a_launched_script_and_its_arguments_are_in_ps_result_json_and_the_log(tmp_path, capsys, monkeypatch):
    (tmp_path / "train_b.py").write_text(WAITS)
    env = pardash_env(PARDASH_REGISTRY_DIR=os.environ["PARDASH_REGISTRY_DIR"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--nproc", "1", "--runs-dir", "runs", "--",
         "train_b.py", "--lr", "3", "--note", "two words"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        entry = _wait_for(lambda: next(iter(registry.live_runs()), None), "registry entry", proc)
        want = ["python", "train_b.py", "--lr", "3", "--note", "two words"]
        assert entry["command"] == want, entry
        assert cli.main(["ps", "--json"]) == 0
        [listed] = json.loads(capsys.readouterr().out)
        assert listed["command"] == want and listed["cwd"] == str(tmp_path), listed
        monkeypatch.delenv("COLUMNS", raising=False)
        assert cli.main(["ps"]) == 0
        head, row = capsys.readouterr().out.splitlines()[:2]
        assert head.split()[-1] == "COMMAND", head
        assert row[head.index("COMMAND") :] == "python train_b.py --lr 3 --note 'two words'", (head, row)
    finally:
        (tmp_path / "go").touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)
    [run_dir] = (tmp_path / "runs").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["command"] == want and result["cwd"] == str(tmp_path), result
    # The log says it near its head, for `report` and a replay: the hub's note after its start.
    head = [json.loads(line) for line in (run_dir / "telemetry.jsonl").read_text().splitlines()[:5]]
    notes = [r["message"] for r in head if r["kind"] == "event" and r["name"] == "hub" and r.get("rank", -1) == -1]
    assert notes[:2] == [notes[0], "command: python train_b.py --lr 3 --note 'two words'"], head
    assert notes[0].startswith("hub started"), head
    from pardash.telemetry.state import command_of
    from pardash.telemetry.logreader import load_log

    said = [c for c in map(command_of, load_log(run_dir / "telemetry.jsonl")[0]) if c is not None]
    assert said == [want], said
    # `report` says it under the strategy (JSON: the list); a replay's header after the log.
    from pardash.telemetry.report import build_report
    from pardash.telemetry.report_render import render_text

    rep = build_report(str(run_dir / "telemetry.jsonl"))
    assert rep["command"] == want and "\ncommand            python train_b.py --lr 3 --note 'two words'\n" in render_text(rep)


def test_the_command_reaches_a_viewer_whose_event_log_has_let_its_note_go():
    # The TUI header says it ("command train_b.py --lr 3"): a viewer attaching to a run of days,
    # whose hub's event log has long let the note go, has it from the hub's snapshot.
    from pardash.telemetry.client import FrameApplier
    from pardash.telemetry.hubcore import HubCore
    from pardash.telemetry.state import COMMAND_NOTE, EVENTS_KEPT
    from pardash.tui.widgets.run_header import summarize

    core = HubCore(run_id="r")
    core.note(COMMAND_NOTE + "python train_b.py --lr 3")
    for i in range(EVENTS_KEPT + 10):
        core.note(f"note {i}")  # (the hub's notes, as the command's: kept to the same bound)
    assert core.state.command == ["python", "train_b.py", "--lr", "3"]
    assert not any(e.message.startswith(COMMAND_NOTE) for e in core.state.events)  # (gone from the event log)
    late = FrameApplier()
    late.load_snapshot(core.snapshot())
    assert late.state.command == ["python", "train_b.py", "--lr", "3"]
    assert summarize(late).command == "train_b.py --lr 3"


def test_the_bundled_trainers_command_is_its_flags():
    from pardash.trainer.supervisor import TRAINER_COMMAND, user_command

    assert user_command([*TRAINER_COMMAND, "--strategy", "fsdp", "--model", "mlp"]) == [
        "python", "-m", "pardash.trainer.train", "--strategy", "fsdp", "--model", "mlp"]  # fmt: skip
    assert user_command(["-m", "pardash.trainer.autorun", "-m", "pkg.train", "--x"]) == ["python", "-m", "pkg.train", "--x"]


def test_ps_in_a_pipe_has_the_whole_command(capsys, monkeypatch):
    long = ["python", "train_a.py", *(f"--flag-{i}" for i in range(40))]
    registry.register({"run_id": "long-run", "pid": os.getpid(), **ENDS, "curve": False, "log": "/tmp/x/telemetry.jsonl",
                       "command": long})  # fmt: skip
    registry.register({"run_id": "alone-run", "pid": os.getpid(), **ENDS, "curve": False, "log": "/tmp/much/longer/path/telemetry.jsonl"})
    monkeypatch.delenv("COLUMNS", raising=False)
    assert cli.main(["ps"]) == 0  # (capsys: no terminal, as `pardash ps | grep`)
    head, *rows = capsys.readouterr().out.splitlines()
    row = {r.split()[0]: r for r in rows}
    at = head.index("COMMAND")
    assert row["long-run"][at:] == " ".join(long), row
    assert row["alone-run"][at:] == "-", row  # (a hub alone says none)
    assert row["alone-run"][head.index("LOG") :].split()[0] == "/tmp/much/longer/path/telemetry.jsonl", row
    # (a terminal's width, which leaves LOG out for the COMMAND: test_ps_width, in a terminal)
    monkeypatch.setenv("COLUMNS", str(at + 40))
    assert cli.main(["ps"]) == 0  # (a pipe still: every column, whatever $COLUMNS says)
    assert capsys.readouterr().out.splitlines()[0] == head
