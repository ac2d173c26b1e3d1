"""The ``pardash`` command: a thin layer over functions the tests call directly (its flags and
help are :mod:`pardash.parser`'s)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import traceback
from typing import Sequence

from pardash.parser import BENCH_STEPS, PROG, build_parser, command, fail
from pardash.preflight import check_hub_ports, check_insecure_with_keys, check_prometheus, gpu_count, headless_without_terminal, NO_TERMINAL, no_tui_here
from pardash.recorded import cmd_export, cmd_report, find_log
from pardash.telemetry import registry

JOB_STOP_WAIT_S = 60.0
"""How long an attached viewer that stops a job waits for it to end (torchrun's grace is 10 s)."""


# -- the other commands -------------------------------------------------------------------------
# Each command imports what it needs when it runs: `pardash report` or `pardash ps` loaded the
# launch's and the recorder's modules too (the hub's client, its log feed); with the hub's and
# Prometheus's flags made in cliargs (see there), a command starts in 145 ms of CPU, not 190.


def _launch(ns: argparse.Namespace, script: list[str]) -> int:
    from pardash.launch import cmd_launch

    return cmd_launch(ns, script)


def cmd_hub(ns: argparse.Namespace) -> int:
    from pardash.telemetry.hub import run_hub

    check_prometheus(ns)
    check_insecure_with_keys(ns)
    return run_hub(ns)


def cmd_keys(ns: argparse.Namespace) -> int:
    import shlex

    from pardash.telemetry import security

    d = ns.dir or str(security.default_curve_dir())
    if ns.viewer is not None:  # a watch-only key, admitted by the hub of d
        name = ns.viewer
        try:
            paths = security.make_viewer_keys(d, name, out=ns.out, force=ns.force)
        except security.CurveKeyError as exc:
            fail(str(exc))
        folder = os.path.abspath(paths["folder"])
        print(f"{PROG}: viewer key for {name} in {folder} (folder 0700, files 0600)")
        print(f"  viewer's folder:   {folder}/ ({security.SERVER}.key, {security.CLIENT}.key, {security.CLIENT}.key_secret): "
              f"copy it to {name} as is, kept private")  # fmt: skip
        print(f"  admitted to watch: {os.path.abspath(paths['admitted'])} (frames, snapshots, log copies; the ranks' ingest "
              f"refuses it. A running hub reads it within a second; delete it to refuse {name}'s new connections)")  # fmt: skip
        if "replaced" in paths:
            print(f"  replaced:          {name}'s earlier key (the hub refuses it within a second; connections made with it stay until they end)")
        there = shlex.quote(folder)
        print(f"use: {PROG} attach RUN_ID --curve-dir {there}    (from another machine: tcp://HOST:PORT of the hub's ingest for RUN_ID, "
              f"--curve-dir {name}'s copy of the folder)")  # fmt: skip
        print(f"     export PARDASH_CURVE_DIR={there}    for {name}'s `{PROG} attach` and `{PROG} record`")
        return 0
    if ns.out is not None:
        fail(f"--out {ns.out} goes with --viewer NAME (the viewer's key folder); the hub's keys go in --dir")
    replaced = os.path.exists(os.path.join(d, f"{security.SERVER}.key_secret"))
    try:
        paths = security.make_keys(d, force=ns.force)
    except security.CurveKeyError as exc:
        fail(str(exc))
    d = os.path.abspath(d)
    print(f"{PROG}: CURVE keys in {d} (folder 0700, files 0600)")
    here = {k: os.path.abspath(v) for k, v in paths.items()}  # (as the folder above: not relative to the cwd)
    print(f"  hub:              {here['server_secret']}")
    print(f"  ranks, viewers:   {here['client_secret']} and {here['server_public']}")
    print(f"  admitted clients: {here['authorized']}/ (add another client's .key here to let it in; a running hub reads it again within a second)")
    viewers = f"revoked_{security.VIEWERS}/"
    revoked = [p.name for k, p in paths.items() if k.startswith("revoked_") and not k.startswith(viewers)]
    if revoked:
        print(f"  revoked:          {', '.join(revoked)} (admitted before; add them again to let them in)")
    revoked = [p.name.removesuffix(".key") for k, p in paths.items() if k.startswith(viewers)]
    if revoked:
        # (their folders hold the old server key: admitting them again would not let them in)
        print(f"  revoked viewers:  {', '.join(revoked)} (make their keys again: {PROG} keys --dir {d} --viewer NAME --force)")
    if replaced:
        # A hub keeps the key pair it started with (a CURVE server takes it before it binds):
        # ranks and viewers given the new server key cannot reach one started before.
        print(
            "  running hubs:     keep the old server key until restarted, so ranks and viewers with the new keys cannot reach them: "
            "restart them. They refuse the old client keys from now on; connections made with those stay until the hub restarts"
        )
    print(f"use: {PROG} hub --bind 0.0.0.0 --curve-dir {d}    (or {PROG} launch --curve-dir {d} ...)")
    print(f"     export PARDASH_CURVE_DIR={d}    for ranks and viewers (copy the folder to other nodes)")
    print(f"     {PROG} keys --dir {d} --viewer NAME    for someone who should watch only")
    return 0


PS_QUIET_AFTER = 3
"""Writes of its progress a hub may miss before `ps` says it has been quiet (every 5 s)."""


def _ps_progress(progress: object, *, launched: bool) -> tuple[str, str, str]:
    """(step, samples/s, what the job column should say where no result.json says it: "2
    stalled" (or silent, or "3 stuck" of both), "waiting" while no rank has reached the hub,
    "running, 1 joined" where ranks ran out of inputs under DDP's Join,
    or, of a hub alone once every rank ended, "finished" or "failed"; else '') from where a
    hub last said its run was
    (registry.PROGRESS_EVERY_S); '-' where it has not said yet. ``launched``: a launch's run,
    whose result.json says how it ended (its ranks all "exited" for a moment may be torchrun
    restarting them)."""
    if not isinstance(progress, dict):
        return "-", "-", ""
    step, total, rate = progress.get("step"), progress.get("steps"), progress.get("samples_per_s")
    step_text = "-" if not isinstance(step, int) else f"{step}/{total}" if isinstance(total, int) else str(step)
    left = progress.get("left_s")
    if isinstance(step, int) and isinstance(left, (int, float)) and not isinstance(left, bool) and 0 <= left < 1e9:
        from pardash.telemetry.summary import span_text  # (not at import: every command's start would load the state)

        step_text += f" ({span_text(left)} left)"  # (the TUI's header said it alone)
    rate_text = f"{rate:,.0f}" if isinstance(rate, (int, float)) and rate > 0 else "-"
    ranks = progress.get("ranks") if isinstance(progress.get("ranks"), dict) else {}
    held = {s: n for s, n in ranks.items() if s in ("stalled", "silent") and isinstance(n, int) and n > 0}
    # (of a hang, the stalled ranks that wait for its likely cause, as the TUI draws them: "2
    # stalled" read of a hang the TUI showed as 1 stalled, 1 waiting)
    waiting = progress.get("waiting") if isinstance(progress.get("waiting"), int) else 0
    waiting = min(max(waiting, 0), held.get("stalled", 0))
    if waiting:
        held["stalled"] -= waiting
        held = {s: n for s, n in held.items() if n}
    stuck = f"{sum(held.values())} {next(iter(held)) if len(held) == 1 else 'stuck'}" if held else ""
    if waiting:
        stuck = f"{stuck}, {waiting} waiting" if stuck else f"{waiting} waiting"
    if not ranks:
        # No rank has reached the hub (a job still starting; ranks pointed at another port, or
        # refused for their keys): "running" told a user checking that the job was watched that
        # it was. The viewer says "waiting for the ranks to start".
        step_text, stuck = "-", "waiting"  # (its step read 0)
    bad = progress.get("loss_not_finite") if isinstance(progress.get("loss_not_finite"), dict) else {}
    bad = {str(what): n for what, n in bad.items() if isinstance(n, int) and n > 0}
    if bad and not stuck:
        # (its loss gone NaN: it read "running", review 306)
        stuck = f"{sum(bad.values())} loss {next(iter(bad)) if len(bad) == 1 else 'not finite'}"
    joined = progress.get("joined")
    if isinstance(joined, int) and not isinstance(joined, bool) and joined > 0 and not stuck:
        # (ranks out of inputs under DDP's Join shadow the others' collectives, taking no step:
        # "running" of them all read as if each trained on, review 335)
        stuck = f"running, {joined} joined"
    if ranks and set(ranks) <= {"finished", "exited"} and not launched:
        # Every rank ended (a hub alone has no launcher to write result.json: it read "running");
        # its exits all stops (a scheduler's preemption): "stopped", not "failed"
        exited, stopped = ranks.get("exited", 0), progress.get("stopped")
        stuck = "finished" if not exited else "stopped" if isinstance(stopped, int) and stopped >= exited else "failed"
    return step_text, rate_text, stuck


PS_COMMAND_MIN = 20
"""The fewest characters of a run's COMMAND `ps` shows in a terminal; with less room it leaves
the column out (fewer tell no two commands apart)."""
PS_COMMAND_WANT = 60
"""The characters of a COMMAND `ps` keeps in a narrow terminal, its LOG and INGEST columns left out for them."""
PS_COLUMNS = ("RUN", "STRATEGY", "RANKS", "AGE", "STEP", "SAMPLES/S", "KEYS", "JOB", "INGEST", "LOG", "COMMAND")
"""`ps`'s columns, in order; each as wide as its widest cell (or its head)."""
PS_RIGHT = frozenset({"RANKS", "AGE", "STEP", "SAMPLES/S"})
"""The columns of numbers, right-aligned under their heads."""
PS_NARROWING = ("LOG", "INGEST", "", "KEYS", "AGE", "STRATEGY", "RANKS", "COMMAND", "SAMPLES/S")
"""What a terminal too narrow for the whole table gives up, first to last ("": the COMMAND cut
to PS_COMMAND_MIN, from PS_COMMAND_WANT). LOG is runs/<run id>/telemetry.jsonl; INGEST matters
to ranks started by hand, and `ps | cat` has both; KEYS says "-" of most runs; AGE is in the run
id (its start); the COMMAND tells two runs of one script apart. RUN, STEP and JOB always stay."""


def _ps_layout(widths: dict[str, int], command_chars: int, width: int) -> tuple[list[str], int]:
    """The columns a ``width``-column terminal shows (PS_NARROWING) and the characters of COMMAND
    it has room for (its whole ``command_chars`` with no terminal, width 0)."""
    shown = list(PS_COLUMNS)
    if not width:
        return shown, command_chars

    def room() -> int:  # (what the columns before COMMAND leave it)
        return width - sum(widths[c] + 1 for c in shown if c != "COMMAND")

    want = min(command_chars, PS_COMMAND_WANT)
    for step in PS_NARROWING:
        if room() >= (want if "COMMAND" in shown else -1):  # (-1: no space before a COMMAND)
            break
        if step:
            shown.remove(step)
        else:
            want = min(command_chars, PS_COMMAND_MIN)
    return shown, room()


def _ps_note(text: str, width: int) -> str:
    """A note under the table, in lines of ``width`` (whole with no terminal), as the rows."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width, subsequent_indent="  ", break_on_hyphens=False)) if width else text


def _ps_command(command: object) -> str:
    """A registry entry's ``command`` (what each rank runs: supervisor.user_command) as a shell
    would quote it; '-' for a run that says none (a hub alone, a simulate, a launch of before)."""
    import shlex

    words = registry.command_words(command)
    return shlex.join(words) if words else "-"


PS_TRAINER = ["python", "-m", "pardash.trainer.train"]
"""The bundled trainer's command, before its flags (supervisor.user_command)."""
PS_TRAINER_SHORT = "trainer"
"""What a terminal too narrow for a bundled trainer's whole command shows of PS_TRAINER."""
PS_TRAINER_FIRST = ("--strategy", "--model")
"""The bundled trainer's flags a narrow COMMAND shows first: what two runs of it differ in most."""


def _cut(text: str, room: int) -> str:
    """``text`` in ``room`` characters: cut with "…" where it would go on (as ps cuts its COMMAND)."""
    return text if len(text) <= room else text[: max(room - 1, 0)] + "…"


def _trainer_short(words: list[str]) -> list[str]:
    """A bundled trainer's command as a narrow COMMAND shows it: ``trainer`` and its flags,
    --strategy and --model first (``python -m pardash.trainer…`` told two runs of it apart by
    nothing, review 300)."""
    first: dict[str, list[str]] = {flag: [] for flag in PS_TRAINER_FIRST}
    rest: list[str] = []
    flags = words[len(PS_TRAINER) :]
    i = 0
    while i < len(flags):
        word = flags[i]
        name = word.split("=", 1)[0]
        if word in first and i + 1 < len(flags):  # (--strategy fsdp)
            first[word] += flags[i : i + 2]
            i += 2
            continue
        (first[name] if name in first and "=" in word else rest).append(word)  # (--strategy=fsdp)
        i += 1
    return [PS_TRAINER_SHORT, *(w for flag in PS_TRAINER_FIRST for w in first[flag]), *rest]


def _ps_command_cells(commands: list[object], room: int | None) -> list[str]:
    """Each run's COMMAND cell in ``room`` characters (None: whole, for no terminal). Where a
    command does not fit: the bundled trainer's reads ``trainer --strategy fsdp --model ...``
    (:func:`_trainer_short`), and each is cut with "…"; two runs whose commands differ but whose
    cells would read alike are shown from the words where they part ("…--lr 3e-4 --seed 2"):
    two jobs of one script never look the same (at 80 columns both read `python -m
    pardash.trainer…`, review 300)."""
    import shlex

    whole = [_ps_command(c) for c in commands]
    if room is None:
        return whole
    words = [registry.command_words(c) or ["-"] for c in commands]
    words = [_trainer_short(w) if w[: len(PS_TRAINER)] == PS_TRAINER and len(t) > room else w for w, t in zip(words, whole)]
    cells = [_cut(shlex.join(w) if w != ["-"] else "-", room) for w in words]

    def alike(i: int) -> list[int]:  # (the others whose cell reads as this one's, their command another)
        return [j for j in range(len(cells)) if j != i and cells[j] == cells[i] and whole[j] != whole[i]]

    parted = list(cells)
    for i in range(len(cells)):
        if others := alike(i):
            common = max(_common_words(words[i], words[j]) for j in others)
            if 0 < common < len(words[i]) and words[i][common - 1].startswith("-") and not words[i][common].startswith("-"):
                common -= 1  # (from the flag whose value differs: "--lr 3", not "3")
            # The program before it where there is room ("python train.py …--lr 3e-4")
            w = words[i]
            program = 3 if w[:2] == ["python", "-m"] else 2 if w[0] == "python" else 1
            tail = "…" + shlex.join(w[common:])
            with_program = f"{shlex.join(w[:program])} {tail}"
            parted[i] = with_program if program <= common and len(with_program) <= room else _cut(tail, room)
    cells = parted
    # (they part within a word too long to show: its end)
    ends = [i for i in range(len(cells)) if alike(i)]
    for i in ends:
        cells[i] = "…" + whole[i][-(room - 1) :] if room > 1 else whole[i][:room]
    return cells


def _common_words(a: list[str], b: list[str]) -> int:
    """How many words ``a`` and ``b`` begin with alike."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _terminal_width() -> int:
    """The columns `ps` may fill in its terminal: $COLUMNS where set (as ps takes it), else the
    terminal's width; 0 (no limit) when its output goes to no terminal (a pipe, a file), as ps
    leaves its lines whole for grep: `ps | cat` has every column whatever $COLUMNS says (pytest's
    workers set COLUMNS=80)."""
    try:
        if not sys.stdout.isatty():
            return 0
        columns = int(os.environ.get("COLUMNS", ""))
    except (ValueError, AttributeError):  # (no COLUMNS, or a number it is not; stdout closed)
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


def cmd_ps(ns: argparse.Namespace) -> int:
    runs = registry.live_runs()
    if ns.json:
        print(json.dumps(runs, indent=2))
        return 0
    if not runs:
        why = registry.why_none_listed()
        print(f"no live runs of yours: {why}" if why else "no live runs")
        return 0
    from pardash.tui.format import fmt_duration  # (plain functions: no textual)

    now = time.time()
    waiting = False
    rows: list[dict[str, str]] = []
    for e in runs:
        age = fmt_duration(now - e.get("started", now))
        # A job that ended while its launch's TUI stays open keeps its hub (and so its entry).
        result = registry.job_result(e)
        job = "running" if result is None else "stopped" if result.get("stopped") else f"ended {result.get('code', '?')}"
        # A hub with CURVE keys answers only viewers given them: say so, not "no answer" later.
        keys = "curve" if e.get("curve") else "-" if "curve" in e else "?"
        step, rate, stuck = _ps_progress(e.get("progress"), launched=bool(e.get("supervisor_pid")))
        if result is None and stuck:
            job = stuck  # (its ranks stalled, silent or all ended: "running" read as if it trained on)
        said = (e.get("progress") or {}).get("t") if isinstance(e.get("progress"), dict) else None
        if result is None and isinstance(said, (int, float)) and now - said > PS_QUIET_AFTER * registry.PROGRESS_EVERY_S:
            # Its hub lives but has said nothing for a while (stopped, swapping, stuck): its
            # STEP and SAMPLES/S are as of then.
            job = f"quiet {fmt_duration(now - said)}"
        waiting |= job == "waiting"
        log = e.get("log", "")
        log = "- (none kept)" if log == os.devnull else log  # (a simulate's without --keep-log)
        # The strategy the ranks said, where the hub has heard it (a launched script's entry says "script")
        strategy = (e.get("progress") or {}).get("strategy") if isinstance(e.get("progress"), dict) else None
        strategy = strategy if isinstance(strategy, str) and strategy else e.get("strategy", "") or "-"
        cells = (str(e.get("run_id", "")), strategy, str(e.get("world_size", "-")), age, step, rate, keys, job,
                 registry.reachable(str(e.get("ingest", ""))), str(log), _ps_command(e.get("command")))  # fmt: skip
        rows.append(dict(zip(PS_COLUMNS, cells)))
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in PS_COLUMNS}
    width = _terminal_width()
    # Narrow: the columns a user needs least give way (PS_NARROWING), so that no row wraps (at
    # 80 columns each took two lines, the columns before COMMAND 101 characters of fixed widths),
    # and a note says which; `ps --json` or a pipe has them all.
    shown, room = _ps_layout(widths, widths["COMMAND"], width)
    # As ps cuts its COMMAND to the terminal (its whole line where COLUMNS or no terminal says
    # no width): "…" says there is more; two runs never read alike where their commands differ.
    for row, cell in zip(rows, _ps_command_cells([e.get("command") for e in runs], room if width else None)):
        row["COMMAND"] = cell
    for row in [dict(zip(PS_COLUMNS, PS_COLUMNS)), *rows]:
        line = []
        for c in shown:
            cell = row[c]
            if c == "COMMAND":
                line.append(_cut(cell, room))
            else:
                line.append(f"{cell:>{widths[c]}}" if c in PS_RIGHT else f"{cell:{widths[c]}}")
        print(" ".join(line).rstrip())
    curve = [e.get("run_id", "") for e in runs if e.get("curve")]
    left_out = [c for c in PS_COLUMNS if c not in shown]
    if left_out:
        print(_ps_note(f"Not shown at {width} columns: {', '.join(left_out)}; `{PROG} ps | cat` shows every column.", width))
    if waiting:
        print(_ps_note("JOB waiting: no rank has reached the hub yet: a job still starting, or ranks sent elsewhere (their "
                       "PARDASH_ENDPOINT must be the hub's INGEST address) or refused for their keys", width))  # fmt: skip
    if curve:
        of = "" if "KEYS" in shown else f" ({'runs' if len(curve) > 1 else 'run'} {', '.join(curve)})"
        print(_ps_note(f"KEYS curve{of}: a hub that takes only viewers with its keys; give `{PROG} attach` and `{PROG} record` "
                       "--curve-dir DIR (or set PARDASH_CURVE_DIR)", width))  # fmt: skip
    return 0


def _log_folder_refusal(flag: str, path: str | None) -> str | None:
    """A log's path that names a folder, in one line with the file meant (as a launch's --log
    says it): the copy or the log failed with "cannot write adir: Is a directory"."""
    if path and (path.endswith(("/", os.sep)) or os.path.isdir(path)):
        from pardash.recorded import LOG_NAME

        return f"{flag} {path} is a folder; give a file: {flag} {os.path.join(path, LOG_NAME)}"
    return None


def _check_target(target: str | None) -> None:
    """Refuse an empty run id (`pardash attach ''`, a variable left unset): as a prefix of every
    id it said "no live run found" while runs were live, or took the one live run."""
    if target is not None and not target.strip():
        fail(f"{target!r} is no run id: name a run (`{PROG} ps` lists the live ones) or a hub as tcp://HOST:PORT, "
             "or leave it out for the newest live run")  # fmt: skip


def cmd_record_checked(ns: argparse.Namespace) -> int:
    """``pardash record``, its target and -o checked first (-o was refused only once the hub
    answered: after 10 s when the run was not found)."""
    from pardash.record import cmd_record
    from pardash.telemetry.logfeed import not_a_file

    _check_target(ns.target)
    if refusal := _log_folder_refusal("-o", ns.output) or (ns.output and not_a_file(ns.output)):
        fail(refusal)
    if _names_a_path(ns.target):
        # A log or run folder, as attach takes them: the live run that records it, else what
        # reads it ("no live run '/runs/.../telemetry.jsonl'; `pardash ps` lists the live ones").
        ns.target = _live_run_of(ns.target, "record")
    return cmd_record(ns)


def stop_unsupervised_job(entry: dict, supervisor: int, run_id: str, curve_dir: str | None) -> int:
    """Stop, as its supervisor would have, a job whose supervisor is gone (from a viewer's
    Stop), and write its ``result.json`` (stopped by you, 130), which no supervisor will: the
    job's processes there were (0: none, it had ended)."""
    from pardash.trainer.jobprocs import stop_unsupervised
    from pardash.trainer.launcher import lost_supervisor_result, write_result

    left = stop_unsupervised(supervisor, run_id, hub_pid=int(entry.get("pid") or 0), ingest=str(entry.get("ingest") or ""),
                             curve_dir=curve_dir, who=f"by a viewer (pardash attach, pid {os.getpid()})")  # fmt: skip
    if left and entry.get("run_dir"):
        result = lost_supervisor_result(run_id, 130, str(entry.get("log") or ""), gone="gone before the job was stopped",
                                        stopped_by=signal.SIGINT, command=entry.get("command"), cwd=entry.get("cwd"))  # fmt: skip
        result["written_by"] = f"pid {os.getpid()}, which stopped the job without its supervisor (`pardash attach`)"
        try:
            write_result(str(entry["run_dir"]), result)
        except OSError as exc:
            print(f"{PROG}: cannot write {entry['run_dir']}/result.json ({exc.strerror or exc})", file=sys.stderr)
    return left


def _ask_to_stop(run_dir: str, since: float = 0.0) -> str:
    """Leave in the run folder whose Stop this is (supervisor.STOP_REQUEST), for the launch to
    say; nothing where it cannot be written (the stop is the same, said "by you"). A request
    another viewer left there since ``since`` (its supervisor's start) is left as it is, and
    its words returned ("pardash attach, pid N"): that viewer's Stop came first (two at once
    both said "stopped run X", the second's note in place of the first's); '' otherwise."""
    if not run_dir:
        return ""
    from pardash.trainer.supervisor import STOP_REQUEST

    path = os.path.join(run_dir, STOP_REQUEST)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as fh:
            json.dump({"by": f"pardash attach, pid {os.getpid()}", "t": time.time()}, fh)
        try:
            os.link(tmp, path)  # (taken only where there is none: one request, the first)
        except FileExistsError:
            try:
                with open(path) as fh:
                    asked = json.load(fh)
                by, t = asked["by"], float(asked["t"])
                if isinstance(by, str) and by and t >= since - registry.CREATED_SLACK_S:
                    return by
            except (OSError, ValueError, KeyError, TypeError):
                pass
            os.replace(tmp, path)  # (one of a job before, in the same folder: not this job's)
        except OSError:  # (a file system without links)
            os.replace(tmp, path)
    except OSError:
        pass
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return ""


def _stop_supervised(run: str, entry: dict, supervisor: int) -> int:
    """An attached viewer's Stop of a launched job whose supervisor lives: its request left in
    the run folder, SIGINT to the supervisor, then its end waited for (JOB_STOP_WAIT_S); said
    in words as another viewer's where that one's Stop came first."""
    import psutil

    try:
        since = psutil.Process(supervisor).create_time()
    except psutil.Error:
        since = 0.0
    first = _ask_to_stop(str(entry.get("run_dir") or ""), since)
    if first:
        print(f"{PROG}: run {run} is being stopped already, by another viewer ({first}); waiting for it to end...", flush=True)
    else:
        print(f"{PROG}: stopping run {run}...", flush=True)
    try:
        # SIGINT: a person's stop, as the launch's own Ctrl-C (its exit code 130); SIGTERM
        # would say it was killed (143). Sent after another's Stop too (a second is nothing to
        # the supervisor): that viewer may have gone before its signal.
        os.kill(supervisor, signal.SIGINT)
    except ProcessLookupError:
        pass
    end = time.monotonic() + JOB_STOP_WAIT_S
    while registry.pid_alive(supervisor) and time.monotonic() < end:
        time.sleep(0.2)
    if registry.pid_alive(supervisor):
        fail(f"run {run} did not stop within {JOB_STOP_WAIT_S:.0f} s; its supervisor is pid {supervisor}", 1)
    said = f"run {run} stopped, by another viewer ({first})" if first else f"stopped run {run}"
    print(f"{PROG}: {said}; log {entry.get('log', '')}")
    return 0


def _run_tui(source, *, title: str, notice: str = "", runs_dir: str = "runs") -> int:
    from pardash.tui.app import make_app

    app = make_app(source, launched=False, title=title, notice=notice, runs_dir=runs_dir)
    app.run()
    return app.return_code or 0  # 1 when the app ended on an error (Textual printed it)


def cmd_attach(ns: argparse.Namespace) -> int:
    from pardash.record import run_over_or
    from pardash.telemetry.client import AttachError, HubClient, hub_address

    _check_target(ns.target)
    given = ns.target
    if _names_a_path(ns.target):
        # A live run's log or run folder, as report, replay and export take them (it said "no
        # live run '/path/job1.jsonl'" of a log `pardash ps` listed as running, review 300)
        ns.target = _wait_for_path(ns.target) if ns.wait else _live_run_of(ns.target)
    elif ns.wait and hub_address(ns.target):
        _wait_for_hub(ns)
    elif ns.wait:
        ns.target = _wait_for_run(ns)
    try:
        client = HubClient.attach(ns.target, curve=ns.curve_dir)
    except AttachError as exc:
        fail(run_over_or(ns.target, str(exc), ns.runs_dir))
    headless_without_terminal(ns)
    # Before the TUI too: with nothing at the address (or a hub that refuses this viewer) it
    # opened on "waiting for the hub's snapshot…" for ever, and `q` said the run went on.
    _synced_or_fail(client, ns, say_connecting=not ns.headless)
    run = client.run_id or client.state.run_id  # (attached by address: the hub's snapshot names it)
    # With no run named, the newest live one: where there are others, said (a second job's
    # viewer watched the newest with nothing said of the first). Others whose job ended (a
    # launch's TUI left open keeps its hub, and so its entry, up: `pardash ps` says "ended")
    # are not live runs: "the newest of 3 live runs" counted one such.
    others = 0 if given else sum(
        1 for e in registry.live_runs(prune=False) if e["run_id"] != run and registry.job_result(e) is None
    )
    newest = f", the newest of {others + 1} live runs (`pardash ps` lists them; `pardash attach RUN_ID` picks one)" if others > 0 else ""
    if ns.headless:
        from pardash.telemetry.failures import failure_summary
        from pardash.telemetry.printer import ProgressPrinter, follow_attached, run_over

        try:
            if run and run != given:  # (the one live run, the one a prefix, log or folder named, or the one at an address)
                print(f"{PROG}: watching run {run}{newest}", flush=True)
            print(follow_attached(ProgressPrinter(client, every_s=ns.every, joined=True), client), flush=True)
        except KeyboardInterrupt:
            print(f"{PROG}: stopped watching; the run goes on (`{_attach_again(client, ns)}` watches it again)", file=sys.stderr)
            return 130
        finally:
            client.close()
        # As a script waiting on the job would want it: 0 when every rank finished, 1 when it
        # failed (a rank's error or kill: the closing line names it), was stopped, or the hub
        # went away mid-run.
        st = client.state
        ended_well = run_over(st) and failure_summary(st) is None and all(r.exit_code in (None, 0) for r in st.ranks.values())
        return 0 if ended_well else 1
    entry, supervisor = _job_to_stop(client, ns, run)
    from pardash.trainer.jobprocs import supervisor_alive
    from pardash.tui.app import make_app

    run_id = str(entry.get("run_id") or client.run_id or "")
    app = make_app(client, launched=bool(supervisor), title=f"pardash attach {run or ns.target or ''}", attached=True,
                   notice=f"watching run {run}{newest}" if newest else "", come_back=_attach_again(client, ns))  # fmt: skip
    choice = app.run()
    if choice == "stop" and supervisor and not supervisor_alive(supervisor, run_id):
        # Its supervisor was killed outright (SIGKILL, the OOM killer): the ranks trained on,
        # and a SIGINT to its pid reached nothing, or another program given that pid since,
        # while this said "stopped". Stopped from here as the supervisor would have.
        print(f"{PROG}: stopping run {run_id} (its supervisor is gone: torchrun gets SIGTERM from here)...", flush=True)
        left = stop_unsupervised_job(entry, supervisor, run_id, ns.curve_dir)
        print(f"{PROG}: stopped run {run_id}" if left else f"{PROG}: run {run_id} had ended", end="")
        print(f"; log {entry.get('log', '')}")
    elif choice == "stop" and supervisor:
        return _stop_supervised(run_id, entry, supervisor)
    elif not app.return_code:
        from pardash.telemetry.printer import run_over

        if client.snapshots and not run_over(client.state):  # (a viewer that never had a snapshot saw no run)
            print(f"{PROG}: stopped watching; the run goes on (`{_attach_again(client, ns)}` watches it again)")
    return app.return_code or 0


def _job_to_stop(client, ns: argparse.Namespace, run: str) -> tuple[dict, int]:
    """The registry entry of the run an attached TUI watches, and its launch's supervisor (0:
    none here to stop, and the quit dialog offers no Stop). A job `pardash launch` started can be
    stopped from any viewer on its machine, as from the one that launched it (which may have
    detached): attached by id, log or folder, its entry is the registry's; by the hub's address,
    the run its hub names is looked up there (it offered no Stop, where an attach by id did:
    "stopped watching; the run goes on", review 300)."""
    from pardash.telemetry.client import hub_address
    from pardash.trainer.jobprocs import job_processes, supervisor_alive

    entry = getattr(client, "info", {}) or {}
    if not entry.get("supervisor_pid") and (address := hub_address(ns.target)):
        entry = registry.serving_here(run, address) or entry
    supervisor = int(entry.get("supervisor_pid") or 0)
    run_id = str(entry.get("run_id") or client.run_id or "")
    if supervisor and not supervisor_alive(supervisor, run_id) and not job_processes(supervisor, run_id):
        supervisor = 0  # its job is over (or runs elsewhere): nothing here to stop
    return entry, supervisor


def _names_a_path(target: str | None) -> bool:
    """Whether an attach's ``target`` names a file or a folder (a run's log or its folder), not
    a run id or a hub's address: it holds a '/', ends as a log's name does, or is there."""
    from pardash.telemetry.client import hub_address

    if not target or hub_address(target):
        return False
    return os.sep in target or target.endswith((".jsonl", ".jsonl.gz")) or os.path.exists(target)


def _live_run_of(path: str, command: str = "attach") -> str:
    """The id of the live run whose log, or run folder, ``path`` is (registry.serving); where
    none is, fails in one line that says how its record is read instead (exit 2). ``command``:
    the one whose target it is (attach, record)."""
    if why := registry.unusable():
        fail(f"{path}: cannot tell which live run records it: {why}")
    if not os.path.exists(path):
        fail(f"{path}: no such log or run folder ({command} takes a live run's id, log or folder, or a hub's tcp://HOST:PORT; "
             f"`{PROG} ps` lists the live runs)")  # fmt: skip
    found = registry.serving(path)
    if len(found) == 1:
        return str(found[0]["run_id"])
    if found:
        # (the newest of them was taken, with no word of the other: review 305)
        ids = ", ".join(sorted(str(e["run_id"]) for e in found))
        fail(f"{path} holds the logs of {len(found)} live runs ({ids}): attach one by its id or its log")
    there = shlex.quote(path)
    what = "run folder" if os.path.isdir(path) else "log"
    if what == "run folder":
        from pardash.recorded import run_folder_log

        if run_folder_log(path) is None:
            fail(f"{path}: no live run of yours records its log here, and it holds no run's log (a run's folder holds its "
                 f"telemetry.jsonl; `{PROG} ps` lists the live runs)")  # fmt: skip
    fail(f"{path}: no live run of yours records this {what} (its run is over, or its hub runs on another machine): "
         f"`{PROG} replay {there}` shows it, `{PROG} report {there}` sums it up")  # fmt: skip


WAIT_LOOK_S = 0.2
"""How often `attach --wait` looks in the registry for the run it waits for."""


class _StopWaiting(Exception):
    """A signal (SIGINT, SIGTERM) that ended `attach --wait`'s wait."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stoppable_wait(wait, what: str):
    """``wait()``, with SIGINT and SIGTERM ending it in one line, as `record`'s wait for a run
    ends ("stopped before the run appeared", 128 + the signal's number), not in a
    KeyboardInterrupt's silence or a traceback."""

    def stop(signum: int, _frame: object) -> None:
        raise _StopWaiting(signum)

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return wait()
    except (_StopWaiting, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, _StopWaiting) else signal.SIGINT
        print(f"{PROG} attach: stopped before {what}", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum) from None
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _wait_for_run(ns: argparse.Namespace) -> str:
    """``attach --wait``: the id of the run to attach to once it is live: one whose id begins
    ``ns.target``, or, with none named, the first run to start after this command did (a viewer
    started before its job); said once on stderr as it begins to wait. What waiting cannot mend
    is said at once, in one line: an id several live runs begin, a run that is over, a
    registry that cannot be read."""
    from pardash.record import run_over_or
    from pardash.telemetry.client import AttachError, resolve

    if why := registry.unusable():
        fail(why)
    before = set() if ns.target else {e["run_id"] for e in registry.live_runs(prune=False)}
    said = [False]

    def wait() -> str:
        while True:
            if ns.target:
                try:
                    return str(resolve(ns.target)["run_id"])
                except AttachError as exc:
                    why = str(exc)
                if "begins" in why:
                    fail(why)
                if not said[0] and (over := run_over_or(ns.target, why, ns.runs_dir)) != why:
                    fail(over)
            else:
                new = [e for e in registry.live_runs() if e["run_id"] not in before]
                if new:
                    return str(new[0]["run_id"])
            if not said[0]:
                said[0] = True
                what = f"run {ns.target} to appear" if ns.target else "a new run to appear" if before else "a live run to appear"
                if before:  # (a viewer started before its job watches that job, not one live before it)
                    what += f" ({len(before)} live already: `{PROG} attach` without --wait watches the newest)"
                print(f"{PROG} attach: waiting for {what}...", file=sys.stderr, flush=True)
            time.sleep(WAIT_LOOK_S)

    return _stoppable_wait(wait, "the run appeared")


def _wait_for_path(path: str) -> str:
    """``attach --wait LOG`` (or a run folder): the id of the live run that records it, once one
    does (--wait with a path failed at once, "no such log or run folder", review 305)."""
    if why := registry.unusable():
        fail(why)
    said = [False]

    def wait() -> str:
        while True:
            found = registry.serving(path)
            if found:
                return _live_run_of(path)  # (one: its id; several: said so, in one line)
            if not said[0]:
                said[0] = True
                print(f"{PROG} attach: waiting for a live run to record {path}...", file=sys.stderr, flush=True)
            time.sleep(WAIT_LOOK_S)

    return _stoppable_wait(wait, "the run appeared")


def _wait_for_hub(ns: argparse.Namespace) -> None:
    """``attach --wait tcp://HOST:PORT``: returns once something listens on the hub's snapshot
    port (then the viewer connects as ever), said once on stderr as it begins to wait. Looked
    for with a plain TCP connection every WAIT_LOOK_S, not the viewer's sockets: ZeroMQ's
    reconnecting every 0.1 s to a port of this machine where nothing listens ends, in time, in
    a connection to itself (the port is in the range the system picks a connection's own port
    from) that holds the port, and the hub started then could not bind it (seen)."""
    from pardash.telemetry.client import AttachError, hub_address, resolve

    try:
        host, _, port = resolve(hub_address(ns.target))["snapshot"].removeprefix("tcp://").rpartition(":")
    except AttachError as exc:
        fail(str(exc))
    if _listens(host, int(port)):
        return
    ns.said_waiting = True
    print(f"{PROG} attach: waiting for the hub at {hub_address(ns.target)} to answer...", file=sys.stderr, flush=True)

    def wait() -> None:
        while not _listens(host, int(port)):
            time.sleep(WAIT_LOOK_S)

    _stoppable_wait(wait, "the hub answered")


def _listens(host: str, port: int) -> bool:
    """Whether something takes TCP connections at ``host``:``port`` (a connection that reached
    only itself is none: see _wait_for_hub)."""
    import socket

    try:
        with socket.create_connection((host.strip("[]"), port), timeout=1.0) as sock:
            return sock.getsockname()[:2] != sock.getpeername()[:2]
    except OSError:
        return False


ATTACH_WAIT_S = 5.0
"""How long `attach` waits for the hub's first snapshot before saying why none came."""
CONNECTING_SAY_S = 0.5
"""A wait for the hub longer than this is said ("connecting to ...") before the TUI opens."""


def _synced_or_fail(client, ns: argparse.Namespace, *, say_connecting: bool) -> None:
    """Wait up to ATTACH_WAIT_S for the hub's snapshot; without one, fail in one line (exit 2)
    saying why: the hub refuses this viewer, nothing answers at the address, or no answer.
    ``say_connecting``: say on stderr what it waits for, once it takes a while (the TUI shows
    nothing until then)."""
    from pardash.telemetry.client import hub_address, unanswered

    if client.wait_synced(min(CONNECTING_SAY_S, ATTACH_WAIT_S)):
        return
    if getattr(ns, "wait", False) and not client.refused:
        # `attach --wait`: a viewer started before its hub waits for it to answer (it said
        # "nothing answers" after 5 s); a hub that refuses this viewer is said at once. So does
        # one found by its run id (or the newest, a log): listed as it starts, a hub that reads a
        # long log back first (--resume), or on a loaded host, answered after the 5 s.
        if not getattr(ns, "said_waiting", False):
            where = hub_address(ns.target) or client.snapshot_endpoint
            print(f"{PROG} attach: waiting for the hub at {where} to answer...", file=sys.stderr, flush=True)

        def answered() -> bool:
            while not client.refused:
                if client.wait_synced(1.0):
                    return True
            return False

        try:
            if _stoppable_wait(answered, "the hub answered"):
                return
        except SystemExit:
            client.close()
            raise
        client.close()
        fail(unanswered(ns.target, client.run_id, client.snapshot_endpoint, client))
    if say_connecting:
        print(f"{PROG}: connecting to {hub_address(ns.target) or client.snapshot_endpoint}...", file=sys.stderr, flush=True)
    if client.wait_synced(max(0.0, ATTACH_WAIT_S - CONNECTING_SAY_S)):
        return
    client.close()
    fail(unanswered(ns.target, client.run_id, client.snapshot_endpoint, client))


def _attach_again(client, ns: argparse.Namespace) -> str:
    """The command that attaches to the same run again, with the same keys (without its
    --curve-dir a hub with keys refused it): by its id (a bare `pardash attach` picks whichever
    run is live then, maybe another), or the hub's address it was given (another machine's:
    no id here)."""
    from pardash.telemetry.client import hub_address

    return command("attach", hub_address(ns.target) or client.run_id or ns.target or "", curve_dir=ns.curve_dir)


def _check_log(path: str) -> None:
    """Fails with one line, as report does, when the log at ``path`` cannot be read or holds no
    record; reads up to its first record only (a day's log is a minute's read)."""
    from pardash.telemetry.logreader import LogReadStats, no_records, read_log

    stats = LogReadStats()
    try:
        for _ in read_log(path, stats):
            return
    except OSError as exc:
        fail(f"{path}: cannot read it: {exc.strerror or exc}")
    fail(no_records(path, stats))


def cmd_replay(ns: argparse.Namespace) -> int:
    from pardash.telemetry.cliargs import StartStep
    from pardash.telemetry.client import AttachError, ReplaySource

    ns.log = find_log(ns.log, ns.runs_dir)
    _check_log(ns.log)  # (first: without a terminal it sent to `pardash report` an empty log it then refused)
    if why := no_tui_here():
        why = "" if why == NO_TERMINAL else f" ({why})"
        fail(f"replay shows the TUI, which needs a terminal{why}; for a summary without one: {PROG} report {shlex.quote(ns.log)}")
    if ns.speed <= 0:
        fail(f"--speed {ns.speed}: must be above 0")
    from pardash.recorded import ReadProgress

    progress = ReadProgress(ns.log)  # (a first pass over a log of a day's gigabytes takes a minute)
    # ...and playing it up to --start takes as long again: it said "100%" of the reading meanwhile
    playing = ReadProgress(ns.log, "playing up to --start in", of_bytes=False)
    try:
        source = ReplaySource(ns.log, speed=ns.speed, start_s=ns.start, progress=progress, start_progress=playing)
    except AttachError as exc:
        progress.close()  # (before the error line, which would go on from the progress line)
        fail(str(exc))
    finally:
        progress.close()
        playing.close()
    notice = ""
    if source.start_step_past is not None:
        # (as a time past the end: said, and the replay starts at the end)
        notice = f"--start step:{int(ns.start)}: the run's last step is {source.start_step_past}; the replay starts at its end"
        print(f"{PROG}: {notice}", file=sys.stderr, flush=True)
    elif isinstance(ns.start, StartStep):
        pass
    elif ns.start != float("inf") and ns.start > source.duration_s:
        # It opened at the run's end without a word (`--start 99:00:00` of a 5 s run): as if the
        # run had gone on that long. (`--start end` asks for its end: nothing to say.) Said
        # here and, as the dashboard covers the terminal, on it.
        from pardash.tui.format import fmt_clock

        so_far = " so far (its log is still being written)" if source.following else ""
        notice = f"--start {fmt_clock(ns.start)} is past the run's end: it is only {fmt_clock(source.duration_s)} long{so_far}; the replay starts at its end"
        print(f"{PROG}: {notice}", file=sys.stderr, flush=True)
    return _run_tui(source, title=f"pardash replay {os.path.basename(ns.log)}", notice=notice, runs_dir=ns.runs_dir)


# -- issue 6: bench, export, Prometheus -----------------------------------------------------


def cmd_bench(ns: argparse.Namespace) -> int:
    from pardash.telemetry.bench_table import render_bench_markdown, render_bench_text
    from pardash.trainer import config as train_config
    from pardash.trainer.bench import BenchConfig, run_bench
    from pardash.trainer.launcher import LaunchError

    if ns.strategy is not None:
        fail("bench runs every strategy in --strategies LIST (e.g. single,ddp,fsdp), not --strategy")
    ns.strategy = "single"
    if ns.steps is None and ns.epochs is None:
        ns.steps = BENCH_STEPS  # shorter than a launch's default: it runs every strategy
    if os.path.exists(ns.runs_dir) and not os.path.isdir(ns.runs_dir):
        fail(f"--runs-dir {ns.runs_dir} is a file; give a folder (default ./runs)")
    try:
        train = train_config.from_args(ns)
        cfg = BenchConfig(
            strategies=[x.strip() for x in ns.strategies.split(",") if x.strip()],
            nproc=ns.nproc,
            train=train,
            runs_dir=ns.runs_dir,
            gpu_count=gpu_count(),
        )
        if train.device == "cuda" and cfg.gpu_count == 0:
            fail("--device cuda: no NVIDIA GPU is visible here; use --device cpu (or auto)")
        if train.precision == "bf16" and cfg.gpu_count == 0:
            fail("--precision bf16 needs a GPU and none is visible here; use --precision fp32")
        bench = run_bench(cfg, progress=sys.stderr)
    except (ValueError, LaunchError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:  # between runs (one during a strategy's run ends the bench with its table: run_bench)
        print(f"\n{PROG} bench: stopped; the runs so far are in {ns.runs_dir}", file=sys.stderr, flush=True)
        return 130
    render = {"json": lambda b: json.dumps(b, indent=2) + "\n", "markdown": render_bench_markdown, "text": render_bench_text}[ns.format]
    print(render(bench), end="", flush=True)
    if bench.get("stopped"):  # the table of the strategies run before the stop, then a stop's exit
        return 128 + signal.SIGINT
    return 0 if all(r.get("code") == 0 for r in bench["rows"]) else 1


def _dies_with(parent: int):
    """A child's ``preexec_fn`` that has the kernel send it SIGTERM when ``parent`` dies
    (Linux's PR_SET_PDEATHSIG; elsewhere nothing), and ends it at once if ``parent`` is gone
    already. Called between fork and exec: no lock is taken, nothing but a system call."""

    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl  # (found here: the child only calls it)
    except (OSError, AttributeError):
        prctl = None
    term = int(signal.SIGTERM)

    def preexec() -> None:
        if prctl is not None:
            prctl(1, term)  # (1: PR_SET_PDEATHSIG)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def cmd_simulate(ns: argparse.Namespace) -> int:
    import dataclasses

    from pardash.telemetry.client import HubClient
    from pardash.telemetry.simulate import SimConfig, log_bytes_per_minute, parse_rank_step, parse_ranks
    from pardash.telemetry.spawn import SpawnError, spawn_hub

    check_prometheus(ns)
    _check_simulate_bind(ns.bind, getattr(ns, "insecure", False))
    if ns.log is not None and ns.keep_log:
        # --keep-log is "record the log under --runs-dir", --log PATH "record it here": --log
        # won, and --keep-log's folder was silently not where the log went.
        fail(f"--log {ns.log} and --keep-log: --log records the log at that path, --keep-log under --runs-dir "
             f"({ns.runs_dir}/<run id>/telemetry.jsonl); give one of the two")  # fmt: skip
    if ns.straggler_kind is not None and ns.straggler is None:
        fail(f"--straggler-kind {ns.straggler_kind} goes with --straggler RANKS (the ranks made slow)")
    try:
        cfg = SimConfig(
            ranks=ns.ranks,
            rate_hz=ns.rate,
            ranks_per_node=ns.ranks_per_node,
            strategy=ns.strategy,
            steps=ns.steps,
            straggler=parse_ranks(ns.straggler, "--straggler") if ns.straggler is not None else None,
            straggler_kind=ns.straggler_kind or "data",
            stall=parse_rank_step(ns.stall, "--stall") if ns.stall else None,
            crash=parse_rank_step(ns.crash, "--crash") if ns.crash else None,
            nan=parse_rank_step(ns.nan, "--nan") if ns.nan else None,
            seed=ns.seed,
        )
    except ValueError as exc:
        fail(str(exc))
    headless_without_terminal(ns)
    if ns.port:
        check_hub_ports("--port", ns.bind, ns.port)  # before its log and folder are made
    run_id = "sim-" + registry.new_run_id()
    # A simulated job is for watching, and its log grows fast (about 430 MB a minute at 1024
    # ranks x 10 steps/s): none unless asked for. The hub still encodes every record.
    keep = ns.log is not None or ns.keep_log
    log = ns.log or (os.path.join(ns.runs_dir, run_id, "telemetry.jsonl") if keep else os.devnull)
    per_minute = _megabytes(log_bytes_per_minute(cfg))
    if keep:
        from pardash.telemetry.recorder import gz_name_refusal
        from pardash.trainer.launcher import LaunchError, check_writable

        if refusal := _log_folder_refusal("--log", ns.log) or gz_name_refusal(log):
            fail(refusal)
        try:
            check_writable(log)
        except LaunchError as exc:
            fail(str(exc))
        log_text = f"log {log}, about {per_minute} a minute"
    else:
        log_text = f"no log (--keep-log to record one: about {per_minute} a minute)"
    # Hub, simulated ranks and viewer each in a process of their own, as in a real job: at
    # 1024 ranks none of them waits on another's interpreter lock.
    hub_args = ["--run-id", run_id, "--log", log, "--bind", ns.bind, "--meta", json.dumps({"strategy": cfg.strategy, "world_size": cfg.ranks, "simulated": True})]
    if ns.port:
        hub_args += ["--port", str(ns.port)]
    if getattr(ns, "insecure", False):
        hub_args += ["--insecure"]
    # The simulated ranks hold no keys: hub and viewer go without them too.
    plain_env = {k: v for k, v in os.environ.items() if k != "PARDASH_CURVE_DIR"}
    if getattr(ns, "prometheus", None) is not None:
        hub_args += ["--prometheus", str(ns.prometheus), "--prometheus-addr", ns.prometheus_addr]
        hub_args += ["--prometheus-per-rank"] if ns.prometheus_per_rank else []
    if getattr(ns, "prometheus_textfile", None):
        hub_args += ["--prometheus-textfile", os.path.abspath(ns.prometheus_textfile)]
        hub_args += ["--prometheus-per-rank"] if ns.prometheus_per_rank else []
    # The hub and the simulator are in sessions of their own (a Ctrl-C is this process's to
    # handle): a SIGTERM or the terminal closing must stop them too, through the clean-up below.
    def _stop_on(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_on)
    # ...and this process killed outright (SIGKILL, the OOM killer) must not leave them behind:
    # they ran on, the hub writing the log, with nobody to stop them.
    with_me = _dies_with(os.getpid())
    try:
        hub, info = spawn_hub(hub_args, start_new_session=True, env=plain_env, preexec_fn=with_me)
    except SpawnError as exc:
        fail(f"{exc}; see the message above")
    sim = subprocess.Popen(
        [sys.executable, "-m", "pardash.telemetry.simulate", "--endpoint", info["ingest"], "--run-id", run_id,
         "--config", json.dumps(dataclasses.asdict(cfg))],
        stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=with_me,
    )  # fmt: skip
    client = HubClient(info["updates"], info["snapshot"], run_id=run_id, curve=False)
    code = 0
    try:
        # Within the clean-up's reach: a first line that found its reader gone (`| head -c 0`)
        # left the hub serving for ever, and the simulator running.
        print(f"{PROG}: simulating {cfg.ranks} ranks at {cfg.rate_hz:g} steps/s, run {run_id}, hub {info['ingest']}, {log_text}", flush=True)
        if info.get("metrics"):
            print(f"{PROG}: Prometheus metrics on {info['metrics']}", flush=True)
        if ns.headless:
            from pardash.telemetry.failures import failure_line, failure_summary, signal_name
            from pardash.telemetry.printer import ProgressPrinter, as_it_hung

            ended: list[float] = []

            def over() -> bool:
                if hub.poll() is not None:
                    return True  # (nothing records or shows the ranks any more: said below)
                # The simulator's last messages reach this viewer a frame or two after it ends.
                if sim.poll() is None:
                    return False
                ended[:1] = ended[:1] or [time.monotonic()]
                return time.monotonic() - ended[0] >= SIM_SETTLE_S

            try:
                ProgressPrinter(client, every_s=ns.every).follow(over)
            except (KeyboardInterrupt, SystemExit) as stop:
                # As a launch says it: 130 for Ctrl-C, 128 + the signal's number for another
                # (it said "stopped by you" and exited 0; after a SIGTERM, nothing at all)
                code = 130 if isinstance(stop, KeyboardInterrupt) else int(stop.code or 0)
                print(f"{PROG}: stopped{' by you' if code == 130 else ''}{as_it_hung(client.state)} (exit code {code})", flush=True)
            else:
                st = client.state
                f = failure_summary(st)
                if hub.returncode is not None and not ended:
                    # Its hub died (killed, out of memory): the simulation stopped with it, not
                    # left printing "hub quiet for N s" for ever beside a hub never reaped.
                    how = f"killed by {signal_name(hub.returncode)}" if signal_name(hub.returncode) else f"exit code {hub.returncode}"
                    print(f"{PROG}: its hub ended ({how}) at step {st.step}: the simulation stopped", flush=True)
                    code = 1
                elif f is not None:
                    # Exits as `attach --headless` does on a failed run (it exited 0: a script
                    # trying its alerting on a simulated crash saw success).
                    print(f"{PROG}: simulated failure: {failure_line(f)}", flush=True)
                    code = 1
                else:
                    print(f"{PROG}: done, {len(st.ranks)} rank(s), step {st.step}", flush=True)
        else:
            from pardash.telemetry.failures import failure_line, failure_summary
            from pardash.telemetry.printer import as_it_hung
            from pardash.tui.app import make_app

            make_app(client, launched=False, title=f"pardash simulate {cfg.ranks} ranks").run()
            # Its last line and exit code as the headless one's: it exited 0, with no word, after a
            # simulated crash (a script trying its alerting on one saw success).
            st = client.state
            f = failure_summary(st)
            if f is not None:
                print(f"{PROG}: simulated failure: {failure_line(f)}", flush=True)
                code = 1
            elif sim.poll() is None:
                print(f"{PROG}: simulation stopped by you at step {st.step}{as_it_hung(st)}", flush=True)
            else:
                print(f"{PROG}: done, {len(st.ranks)} rank(s), step {st.step}", flush=True)
    finally:
        if sim.poll() is None:
            sim.send_signal(signal.SIGTERM)
        try:
            sim.wait(10)
        except subprocess.TimeoutExpired:
            sim.kill()
        time.sleep(0.3)  # the hub drains what the ranks sent last
        hub.send_signal(signal.SIGTERM)
        try:
            hub.wait(10)
        except subprocess.TimeoutExpired:
            hub.kill()
        client.close()
    return code


def _check_simulate_bind(bind: str, insecure: bool) -> None:
    """Refuse, before anything starts (one line), an address the hub could not bind, and one
    beyond loopback without --insecure: the simulated ranks hold no keys, so the hub's advice
    ("pass --curve-dir DIR") could not be taken, and came on two lines."""
    from pardash.telemetry import security

    if refusal := security.bind_address_refusal(bind):
        fail(refusal)
    if not (security.is_loopback(bind) or insecure):
        fail(f"--bind {bind}: simulate's ranks hold no keys, so a hub beyond loopback goes without them: pass --insecure "
             "on a network you trust (anyone who reaches it can read the run and send it records)")  # fmt: skip


SIM_SETTLE_S = 0.5
"""How long a headless simulate follows the hub after the simulator ends (5 frames)."""


def _megabytes(n: float) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 10e6 else f"{n / 1e6:.1f} MB"


READER_GONE = 128 + signal.SIGPIPE
"""141: how a command ends when the reader of its output went away (`| head`), as the shell
reports any Unix tool that SIGPIPE ended (`seq 1000000 | head -1`), so a script under
`set -o pipefail` takes pardash as it takes them; neither 0 (for `attach --headless`: every rank
finished) nor 1 (the run failed), which it would be a lie to say. `launch` keeps its own: the
job's (it sees the job out without a reader, see pardash.launch)."""


STOPPED_BY_CTRL_C = {
    "report": "report stopped",
    "export": "export stopped; nothing written (what it had written is taken back)",
    "replay": "replay stopped",
}
"""What a command that reads a log says when Ctrl-C stops it (the others say it themselves)."""


def main(argv: Sequence[str] | None = None) -> int:
    """The ``pardash`` command; returns its exit code. A reader of its output that goes away
    (`| head -1`, a pager quit early) ends it quietly with :data:`READER_GONE`, as it ends a
    Unix tool, never with a BrokenPipeError's traceback."""
    _closed_stdio_to_devnull()
    try:
        try:
            code = _main(argv)
        finally:
            # What is still buffered goes now, where a reader gone is caught below, rather than
            # in the interpreter's last flush ("Exception ignored ... BrokenPipeError", 120);
            # argparse's --help and --version leave through here too (SystemExit).
            sys.stdout.flush()
    except BrokenPipeError:
        if not _output_gone():  # not our output's: a fault like any other
            raise
        return READER_GONE
    return code


def _closed_stdio_to_devnull() -> None:
    """Started with stdout or stderr closed (``pardash launch ... >&-``, a daemon's start):
    /dev/null takes their descriptor. Python then leaves ``sys.stdout`` None (every print and
    flush failed: the launch never started its job), and the first file opened would take
    descriptor 1, which torchrun and the ranks inherit as their stdout: their output written
    into the log, say."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        null = os.open(os.devnull, os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        setattr(sys, name, open(fd, "w", closefd=False))


def _output_gone() -> bool:
    """After a BrokenPipeError: whether it was our stdout's or stderr's reader that went away;
    if so, the stream now points at /dev/null (its buffered rest, and the interpreter's last
    flush, go nowhere without another error)."""
    from pardash.telemetry.streams import reader_gone, to_devnull

    gone = [s for s in (sys.stdout, sys.stderr) if reader_gone(s)]
    for stream in gone:
        to_devnull(stream)
    return bool(gone)


def _main(argv: Sequence[str] | None) -> int:
    argv = argv_given = list(sys.argv[1:] if argv is None else argv)
    script: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, script = argv[:i], argv[i + 1 :]
    parser = build_parser()
    if not argv_given:
        # A bare `pardash` said only "the following arguments are required: COMMAND": the help
        # lists the commands. Still exit code 2: no command was run.
        parser.print_help(sys.stderr)
        return 2
    ns, extra = parser.parse_known_args(argv)
    if extra:
        # Said by the command's own parser, so the hint names its help (`pardash report --help`).
        command = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[ns.command]
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    if script and ns.command != "launch":
        parser.error("`-- SCRIPT` goes with `pardash launch` only")
    if ns.command == "launch" and "--" in argv_given and not script and not ns.module:
        # A script forgotten after `--` ran the bundled trainer for 200 steps instead.
        fail("`--` with no script after it: name yours (pardash launch --nproc 2 -- train.py ARGS), or leave `--` out for the bundled trainer")
    commands = {
        "launch": lambda ns: _launch(ns, script),
        "hub": cmd_hub,
        "ps": cmd_ps,
        "attach": cmd_attach,
        "record": cmd_record_checked,
        "replay": cmd_replay,
        "report": cmd_report,
        "simulate": cmd_simulate,
        "keys": cmd_keys,
        "bench": cmd_bench,
        "export": cmd_export,
    }
    try:
        code = commands[ns.command](ns)
    except KeyboardInterrupt:
        # (a Ctrl-C in a long read of a big log wiped its progress line and said nothing)
        if said := STOPPED_BY_CTRL_C.get(ns.command):
            print(f"{PROG}: {said}", file=sys.stderr, flush=True)
        code = 130
    except SystemExit as exc:  # fail(): a one-line error, already said
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BrokenPipeError:
        # The command's own clean-up (`finally`) has run: a simulated job's hub and ranks are
        # stopped, an attached viewer's sockets closed.
        if _output_gone():
            code = READER_GONE
        else:
            traceback.print_exc()
            code = 1
    except BaseException:
        # Whatever ended the command (a write to a terminal closed under it, say), a thread
        # stuck on that terminal must not keep the process alive: say it, then go.
        traceback.print_exc()
        code = 1
    return _no_thread_left_behind(code)


STUCK_THREAD_GRACE_S = 1.0


def _no_thread_left_behind(code: int) -> int:
    """After a TUI: a terminal closed under the viewer can leave Textual's input thread spinning
    on the dead terminal, and Python would wait for it at exit for ever (seen: a viewer with no
    terminal at 50-70% of a core). Past a short grace such a thread is not waited for."""
    if "textual" not in sys.modules:  # no TUI ran: nothing of its kind to wait for
        return code
    import threading

    end = time.monotonic() + STUCK_THREAD_GRACE_S
    for t in threading.enumerate():
        if t is not threading.current_thread() and not t.daemon:
            t.join(max(0.0, end - time.monotonic()))
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.current_thread()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
