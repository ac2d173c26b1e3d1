"""Review 295: `pardash ps` in an 80x24 terminal wrapped each row onto two lines: the columns
before COMMAND took 101 characters of fixed widths. Now its columns are as wide as what they
hold, and a narrow terminal leaves out the columns a user needs least (LOG, then INGEST, ...),
says which, and wraps nothing; a pipe has every column, as before."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time

import pytest
from helpers import pardash_env

from pardash import cli
from pardash.telemetry import registry

pytestmark = pytest.mark.timeout(120)

ENDS = {"ingest": "tcp://127.0.0.1:34203", "updates": "tcp://127.0.0.1:34204", "snapshot": "tcp://127.0.0.1:34205"}
TRAINER = ["python", "-m", "pardash.trainer.train", "--strategy", "ddp", "--model", "mlp"]
SCRIPT = ["python", "train_b.py", "--lr", "3"]
NOTE = "Not shown at {} columns: "


def _register_runs(*, curve: bool = True) -> None:
    """The reviewer's run (a launch no rank has reached yet) and one training at 8 ranks."""
    now = time.time()
    registry.register({"run_id": "20261207-055323-268b", "pid": os.getpid(), **ENDS, "curve": False, "strategy": "ddp",
                       "world_size": 2, "log": "/work/main/runs/20261207-055323-268b/telemetry.jsonl", "command": TRAINER,
                       "progress": {"step": 0, "ranks": {}, "t": now}})  # fmt: skip
    registry.register({"run_id": "20261207-055401-9f1c", "pid": os.getpid(), **ENDS, "curve": curve, "strategy": "fsdp",
                       "world_size": 8, "log": "/work/main/runs/20261207-055401-9f1c/telemetry.jsonl", "command": SCRIPT,
                       "progress": {"step": 1234, "steps": 5000, "samples_per_s": 10933.2, "ranks": {"running": 8}, "t": now}})  # fmt: skip


def _ps_in_terminal(columns: int, rows: int = 24, **env: str | None) -> list[str]:
    """The lines `pardash ps` writes to a terminal ``columns`` wide (no $COLUMNS: pytest's
    workers set it)."""
    main, tty = pty.openpty()
    fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "pardash", "ps"], stdin=tty, stdout=tty, stderr=tty,
                            env=pardash_env(**{"COLUMNS": None, **env}))  # fmt: skip
    os.close(tty)
    out = b""
    try:
        while chunk := os.read(main, 65536):
            out += chunk
    except OSError:  # (EIO: the terminal's other end closed, its writer gone)
        pass
    finally:
        os.close(main)
    assert proc.wait(60) == 0, out
    return out.decode().replace("\r\n", "\n").splitlines()


def _table(lines: list[str]) -> tuple[str, dict[str, str], list[str]]:
    """(head, rows by run id, the lines after them)."""
    head, *rest = lines
    rows = {r.split()[0]: r for r in rest if r.startswith("2026")}
    return head, rows, [r for r in rest if not r.startswith("2026")]


@pytest.mark.parametrize("columns", [60, 80, 100, 120, 160])
def test_ps_fits_its_terminal_and_says_what_it_left_out(columns):
    _register_runs()
    lines = _ps_in_terminal(columns)
    assert all(len(line) <= columns for line in lines), "\n".join(lines)
    head, rows, notes = _table(lines)
    shown = head.split()
    # The columns kept are in their order, and the ones left out are the first to give way.
    assert shown == [c for c in cli.PS_COLUMNS if c in shown], head
    left_out = [c for c in cli.PS_NARROWING if c and c not in shown]
    assert set(shown) | set(left_out) == set(cli.PS_COLUMNS), head
    assert [c for c in cli.PS_NARROWING if c][: len(left_out)] == left_out, head
    assert {"RUN", "STEP", "JOB"} <= set(shown) and "LOG" not in shown, head
    assert sorted(rows) == ["20261207-055323-268b", "20261207-055401-9f1c"], lines
    job = head.index("JOB")
    assert rows["20261207-055323-268b"][job:].split()[0] == "waiting", lines
    assert rows["20261207-055401-9f1c"][: head.index("STEP") + 4].split()[-1] == "1234/5000", lines
    # Said once, in plain words, which columns: and `ps | cat` has them.
    said = " ".join(n.strip() for n in notes)
    assert said.count("Not shown") == 1 and NOTE.format(columns) + ", ".join(c for c in cli.PS_COLUMNS if c in left_out) in said, notes
    assert "`pardash ps | cat` shows every column" in said, notes
    assert said.count("JOB waiting: no rank has reached the hub yet") == 1, notes
    if "COMMAND" in shown:  # (whole; where it does not fit, the trainer's flags first, cut with "…" to the line's end)
        ran = rows["20261207-055323-268b"][head.index("COMMAND") :]
        short = "trainer --strategy ddp --model mlp"
        assert ran in (" ".join(TRAINER), short) or (ran.endswith("…") and short.startswith(ran[:-1])), lines
        assert len(ran) >= cli.PS_COMMAND_MIN, lines


def test_ps_at_80_columns_keeps_the_step_rate_and_command_of_each_run_on_one_line():
    # What the reviewer saw wrapped: now one line a run, its command cut where the line ends.
    _register_runs(curve=False)
    lines = _ps_in_terminal(80)
    head, rows, notes = _table(lines)
    assert head.split() == ["RUN", "RANKS", "STEP", "SAMPLES/S", "JOB", "COMMAND"], lines
    assert rows["20261207-055401-9f1c"].split() == ["20261207-055401-9f1c", "8", "1234/5000", "10,933", "running", *SCRIPT], lines
    assert len(lines) == 3 + len(notes) and all(len(line) <= 80 for line in lines), lines
    assert notes[0] == "Not shown at 80 columns: STRATEGY, AGE, KEYS, INGEST, LOG; `pardash ps | cat`", notes


def test_a_wide_terminal_shows_every_column_and_no_note():
    _register_runs()
    lines = _ps_in_terminal(250)
    head, rows, notes = _table(lines)
    assert head.split() == list(cli.PS_COLUMNS), head
    assert rows["20261207-055323-268b"].endswith(" ".join(TRAINER)), lines
    assert not any("Not shown" in n for n in notes) and notes[-1].startswith("KEYS curve: "), notes


def test_COLUMNS_sets_the_width_in_a_terminal_as_ps_takes_it():
    _register_runs()
    lines = _ps_in_terminal(200, COLUMNS="80")
    assert max(map(len, lines)) <= 80 and lines[0].split() == ["RUN", "RANKS", "STEP", "SAMPLES/S", "JOB", "COMMAND"], lines


def test_keys_left_out_the_curve_note_names_its_runs():
    _register_runs()
    notes = [n.strip() for n in _table(_ps_in_terminal(80))[2]]
    said = " ".join(notes)
    assert "KEYS curve (run 20261207-055401-9f1c): a hub that takes only viewers with its keys" in said, notes


def test_a_pipe_has_every_column_whatever_COLUMNS_says_each_as_wide_as_what_it_holds():
    _register_runs()
    out = subprocess.run([sys.executable, "-m", "pardash", "ps"], capture_output=True, text=True, timeout=60,
                         env=pardash_env(COLUMNS="80"), check=True).stdout  # fmt: skip
    head, rows, notes = _table(out.splitlines())
    assert head.split() == list(cli.PS_COLUMNS) and not any("Not shown" in n for n in notes), out
    assert rows["20261207-055323-268b"].endswith(" " + " ".join(TRAINER)), out
    assert rows["20261207-055323-268b"][head.index("LOG") :].split()[0] == "/work/main/runs/20261207-055323-268b/telemetry.jsonl"
    # RUN as wide as its ids (they took 24), STRATEGY as its head (9), KEYS "curve"
    assert head.startswith("RUN" + " " * 18 + "STRATEGY RANKS "), head
    assert " KEYS  JOB     INGEST                LOG " in head, head
    # A note is one line in a pipe, as before, for grep.
    assert [n.split(":")[0] for n in notes] == ["JOB waiting", "KEYS curve"], notes


def test_a_long_command_is_cut_where_the_line_ends_and_the_log_gives_way_first():
    # Review 275: at 160 columns the COMMAND got 20 characters after a 66-character log path,
    # "python train_a.py -…" of two runs told apart by their --lr.
    long = ["python", "train_a.py", *(f"--flag-{i}" for i in range(40))]
    registry.register({"run_id": "20261207-060000-aaaa", "pid": os.getpid(), **ENDS, "curve": False, "command": long,
                       "log": "/tmp/much/longer/path/than/the/others/before/it/runs/telemetry.jsonl"})  # fmt: skip
    registry.register({"run_id": "20261207-060001-bbbb", "pid": os.getpid(), **ENDS, "curve": False, "log": "/tmp/x.jsonl"})
    head, rows, notes = _table(_ps_in_terminal(160))
    assert "LOG" not in head and "INGEST" in head, head
    row = rows["20261207-060000-aaaa"]
    at = head.index("COMMAND")
    assert len(row) == 160 and row[at:] == " ".join(long)[: 160 - at - 1] + "…", row
    assert rows["20261207-060001-bbbb"].endswith(" -"), rows  # (a hub alone says none)
    assert NOTE.format(160) + "LOG;" in notes[0], notes
