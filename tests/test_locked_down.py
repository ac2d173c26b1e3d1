"""pardash where the environment is not a developer's laptop (review 279): a container's or a CI
job's terminal settings, names whose bytes are not UTF-8, a run folder that cannot be made.
Real processes on a real pseudo-terminal where the terminal is the point."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

from helpers import pardash_env

from pardash.telemetry import frames, schema
from pardash.telemetry.client import NullDetector
from pardash.telemetry.hubcore import HubCore


def _replay_on_a_pty(tmp_path, *, term: str, stderr_to_file: bool = False, env: dict | None = None, quit_on: bytes = b"",
                     args: list[str] | None = None, terminal: bool = False) -> tuple[int, str]:  # fmt: skip
    """``pardash replay`` of a log (or ``pardash ARGS``), its stdin and stdout a pseudo-terminal
    of 80x24 (its stderr too, or a file): its exit code and what it said on stderr (or all it
    wrote, on the terminal; ``terminal``: on the terminal, its stderr in a file). ``quit_on``:
    once it has written that, `q` is pressed."""
    log = tmp_path / "run.jsonl"
    log.write_bytes(schema.encode_json(schema.Hello(run="r", rank=0, seq=0, world_size=1, t=1.0e9, hseq=1)) + b"\n")
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    err_path = tmp_path / "err.txt"
    with open(err_path, "wb") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pardash", *(args or ["replay", str(log)])], stdin=follower, stdout=follower,
            stderr=err_file if stderr_to_file else follower, env={**pardash_env(), "TERM": term, **(env or {})}, cwd=tmp_path,
        )  # fmt: skip
        os.close(follower)
        seen = b""
        deadline = time.monotonic() + 60  # (a TUI started there stands on its first frame: killed)
        while time.monotonic() < deadline:
            if quit_on and quit_on in seen:
                os.write(leader, b"q")
                quit_on = b""
            if not select.select([leader], [], [], 1.0)[0]:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # (the other end closed: it ended)
                break
            if not chunk:
                break
            seen += chunk
        if proc.poll() is None:
            proc.kill()
        code = proc.wait(timeout=60)
    os.close(leader)
    said = err_path.read_text() if stderr_to_file and not terminal else seen.decode(errors="replace")
    return code, said


def test_term_dumb_or_stderr_in_a_file_is_no_place_for_the_tui(tmp_path):
    # TERM=dumb: the TUI stood on its first frame and took no key (q, Ctrl-C) until killed;
    # `2>err.log`: the whole TUI went into the file, the terminal blank. Headless launches
    # print progress lines instead (headless_without_terminal); a replay says what to run.
    code, said = _replay_on_a_pty(tmp_path, term="dumb", stderr_to_file=False)
    assert code == 2 and "replay shows the TUI, which needs a terminal (TERM=dumb cannot redraw)" in said, said[-800:]
    code, said = _replay_on_a_pty(tmp_path, term="xterm-256color", stderr_to_file=True)
    assert code == 2 and "(stderr is not the terminal (the TUI draws there))" in said, said[-800:]
    assert f"report {tmp_path / 'run.jsonl'}" in said


def test_with_stderr_in_a_file_the_terminal_is_told_why_it_has_progress_lines(tmp_path):
    # `pardash launch ... 2>err.log` (review 293): progress lines came on the terminal, and the
    # reason, on stderr, went into the file.
    code, said = _replay_on_a_pty(tmp_path, term="xterm-256color", stderr_to_file=True, terminal=True,
                                  args=["simulate", "--ranks", "2", "--steps", "3", "--rate", "20", "--every", "60"])  # fmt: skip
    assert code == 0, said[-800:]
    assert "pardash: stderr is not the terminal (the TUI draws there), so progress lines instead of the TUI (as --headless)" in said


def test_a_terminal_whose_encoding_is_not_utf8_gets_progress_lines_not_a_tui_in_pieces(tmp_path):
    # Review 302: under a locale of ISO-8859-1 (LANG=en_US on glibc, left on old clusters) the
    # TUI's borders and glyphs came out as "\u256d\u2500 ranks \u2500..." and its layout in
    # pieces. The progress lines are ASCII.
    code, said = _replay_on_a_pty(tmp_path, term="xterm-256color", env={"PYTHONIOENCODING": "iso-8859-1"},
                                  args=["simulate", "--ranks", "2", "--steps", "3", "--rate", "20", "--every", "60"])  # fmt: skip
    assert code == 0, said[-800:]
    assert ("pardash: the terminal's encoding is iso8859-1, not UTF-8 (set LANG to a UTF-8 locale, such as C.UTF-8, "
            "for the TUI), so progress lines instead of the TUI (as --headless)") in said, said[-800:]  # fmt: skip
    assert "\\u25" not in said and "pardash: done, 2 rank(s), step 3" in said, said[-800:]


def test_a_closed_stdin_is_no_terminal(tmp_path):
    # `pardash launch ... <&-` (review 293): launch, simulate, replay and attach failed with
    # "AttributeError: 'NoneType' object has no attribute 'isatty'" (Python's sys.stdin is None).
    cmd = f"exec {sys.executable} -m pardash simulate --ranks 2 --steps 3 --rate 20 --every 60 <&-"
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=pardash_env(), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "no terminal" in proc.stderr, proc.stderr[-2000:]
    assert "pardash: done, 2 rank(s), step 3" in proc.stdout, proc.stdout[-2000:]


def test_the_tui_draws_at_the_terminals_own_size_whatever_columns_and_lines_say(tmp_path):
    # COLUMNS=400 LINES=100 exported (a container's): Textual asks shutil.get_terminal_size,
    # which takes them over the terminal's, and an 80x24 terminal showed a garbled 400x100 TUI.
    code, drawn = _replay_on_a_pty(tmp_path, term="xterm-256color", env={"COLUMNS": "400", "LINES": "100"}, quit_on=b"replay")
    rows = [int(r) for r in re.findall(r"\x1b\[(\d+);1H", drawn)]
    assert code == 0 and rows and max(rows) == 24, (code, sorted(set(rows))[-5:])


def test_a_note_with_a_name_that_is_not_utf8_does_not_stop_the_hub():
    # A script named in Latin-1 (or a folder's name under the C locale): Python decodes its
    # bytes to surrogates, and the hub's note of the command ("command: python 'caf\udce9.py'")
    # failed to encode in each frame: the hub died and was restarted 17 times.
    core = HubCore(run_id="r", detector=NullDetector())  # type: ignore[arg-type]
    core.note("command: python 'caf\udce9.py'")
    frame = core.tick(1.0)
    assert frames.decode_frame(frames.encode(frame)).messages[0].message == "command: python 'caf\ufffd.py'"
    assert frames.decode_snapshot(frames.encode(core.snapshot())).messages[0].message == "command: python 'caf\ufffd.py'"


def test_a_run_folder_that_cannot_be_made_is_said_in_a_line_and_leaves_no_log_behind(tmp_path):
    # --log somewhere writable, the runs folder not (a read-only current folder): a traceback of
    # its mkdir and an empty log left behind. (A file where a folder of its path must go: root,
    # which CI is, may write anywhere.)
    (tmp_path / "file").write_text("")
    log = tmp_path / "logs" / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pardash", "launch", "--headless", "--strategy", "single", "--steps", "3",
         "--runs-dir", str(tmp_path / "file" / "runs"), "--log", str(log)],
        capture_output=True, text=True, timeout=60, env=pardash_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"pardash: error: cannot make the run's folder {tmp_path / 'file' / 'runs'}/"), proc.stderr
    assert lines[0].endswith(f"{tmp_path / 'file'} is a file; pass a writable --runs-dir DIR"), proc.stderr
    assert not log.exists() and not log.parent.exists()


def test_ps_and_attach_say_why_no_run_is_listed(tmp_path, monkeypatch, capsys):
    # A second user: "no live runs" of the first user's run, and attach "no live run '<id>'";
    # a read-only HOME: "no live runs" with a run live, no word why (review 279).
    from pardash import cli
    from pardash.telemetry import registry

    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(tmp_path / "reg"))
    (tmp_path / "reg").mkdir()
    (tmp_path / "reg" / "20261206-222851-c2a8.json").write_text('{"run_id": "20261206-222851-c2a8", "pid": 1}')
    me = os.getuid()
    monkeypatch.setattr(registry.os, "getuid", lambda: me + 4242)  # (the entry: another user's)
    assert cli.main(["ps"]) == 0
    said = capsys.readouterr().out.strip()
    assert said == (f"no live runs of yours: 1 run in {tmp_path / 'reg'} is another user's: each user's `pardash ps` and attach "
                    "see only their own runs (attach with the tcp://HOST:PORT its hub printed, if you may)"), said  # fmt: skip
    assert cli.main(["attach", "--headless", "20261206-222851"]) == 2
    err = capsys.readouterr().err
    assert "no live run '20261206-222851' of yours: run '20261206-222851' is another user's" in err, err
    monkeypatch.undo()
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(tmp_path / "file" / "reg"))
    assert cli.main(["ps"]) == 0
    said = capsys.readouterr().out.strip()
    assert said.startswith(f"no live runs of yours: the run registry {tmp_path / 'file' / 'reg'} cannot be made ({tmp_path / 'file'} is "
                           "not a writable folder), so runs launched here are not listed either"), said  # fmt: skip


def test_the_report_of_a_job_that_ended_before_any_rank_reported_says_its_exit_code(tmp_path, capsys):
    # torchrun failed before its ranks (a process limit: "Resource temporarily unavailable"):
    # the launch said "the job failed with exit code 1", the report "exits: none with an error".
    import json

    from pardash import cli

    run = tmp_path / "runs" / "20261206-230000-abcd"
    run.mkdir(parents=True)
    note = schema.Event(run="20261206-230000-abcd", rank=-1, seq=-1, name="hub", message="hub started (pid 7)", t=1.0e9, hseq=1)
    (run / "telemetry.jsonl").write_bytes(schema.encode_json(note) + b"\n")
    (run / "result.json").write_text(json.dumps({"run_id": "20261206-230000-abcd", "code": 1, "stopped": False}))
    (run / "output.log").write_text("RuntimeError: Resource temporarily unavailable\n")
    assert cli.main(["report", str(run / "telemetry.jsonl")]) == 0
    out, err = capsys.readouterr()
    assert f"the job ended with exit code 1 before any rank reported (torchrun's own words: {run / 'output.log'})" in err, err
    assert "exits: no rank reported; the job's exit code 1" in out and "none with an error" not in out, out


def test_a_runs_folder_under_one_this_user_may_not_enter_is_said_in_a_line(tmp_path, monkeypatch):
    # Review 280: Path.exists() raises (EACCES) for a path under a folder of mode 700 another user
    # owns: a traceback still. (Root enters any folder: the refusal is made here.)
    from pathlib import Path

    from pardash.telemetry import registry
    from pardash.trainer.launcher import LaunchError, check_run_dir

    locked = tmp_path / "locked"
    real = Path.exists

    def exists(self, *a, **k):
        if str(self).startswith(str(locked) + "/"):
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "exists", exists)
    monkeypatch.setattr(Path, "is_dir", lambda self: exists(self) and real(self) and os.path.isdir(self))
    try:
        check_run_dir(str(locked / "runs" / "r1"))
    except LaunchError as exc:
        assert str(exc) == f"cannot make the run's folder {locked / 'runs' / 'r1'}: Permission denied; pass a writable --runs-dir DIR"
    else:
        raise AssertionError("no refusal")
    monkeypatch.setenv("PARDASH_REGISTRY_DIR", str(locked / "reg"))
    assert registry.live_runs() == []
    assert registry.why_none_listed().startswith(f"the run registry {locked / 'reg'} cannot be read (Permission denied)")
