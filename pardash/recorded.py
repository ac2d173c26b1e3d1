"""``pardash report`` and ``pardash export``, and finding the log a user names (a file, a
run's folder or its run id) for them and for ``replay``."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import time
from typing import TextIO

from pardash.parser import PROG, command, fail
from pardash.telemetry import registry


PROGRESS_AFTER_S = 1.0
"""A log read for longer than this shows how far it is."""


class ReadProgress:
    """``pardash: reading run.jsonl: 45% (75.0 MiB of 166 MiB)`` on a terminal's stderr,
    redrawn in place once the reading has taken PROGRESS_AFTER_S and wiped at its end; nothing
    where stderr is no terminal (a pipe, CI). A report of a 166 MB log takes 3 s, its export
    20 s, and a log of gigabytes minutes, with no word until the end."""

    def __init__(self, log: str, doing: str = "reading", *, out: TextIO | None = None, after_s: float = PROGRESS_AFTER_S,
                 of_bytes: bool = True) -> None:  # fmt: skip
        from pardash.telemetry.printer import is_terminal

        self.out = out or sys.stderr
        self.on = is_terminal(self.out)
        name = os.path.basename(log)
        if name.startswith("telemetry.jsonl"):  # every run's own: its folder says which (report --compare read two alike)
            name = os.path.join(os.path.basename(os.path.dirname(os.path.abspath(log))), name)
        self.label = f"{PROG}: {doing} {name}"
        self.from_t = time.monotonic() + after_s
        self.shown = False
        self.of_bytes = of_bytes
        """Told bytes (said with the percentage); else another measure (the percentage alone)."""

    def __call__(self, done: int, total: int) -> None:
        if not self.on or time.monotonic() < self.from_t:
            return
        from pardash.telemetry.summary import human_bytes

        pct = 100 * done // total if total else 100
        of = f" ({human_bytes(done)} of {human_bytes(total)})" if self.of_bytes else ""
        self.out.write(f"\r{self.label}: {pct}%{of}\x1b[K")
        self.out.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.out.write("\r\x1b[K")  # the line wiped: what comes next is written where it was
            self.out.flush()
            self.shown = False


def _report_of(path: str) -> dict:
    """The report of the log at ``path``; fails with one line when it has nothing to report."""
    from collections import Counter

    from pardash.telemetry.logreader import LogReadStats, no_records, read_log
    from pardash.telemetry.report import build_report

    progress = ReadProgress(path)
    try:
        rep = build_report(path, progress)
    except OSError as exc:
        progress.close()  # (before the error line, which would go on from the progress line)
        fail(f"{path}: cannot read it: {exc.strerror or exc}")
    finally:
        progress.close()
    if not sum(rep["messages"].values()):
        # Read again for its lines (the report counts the skipped ones only: a README read "144
        # line(s)" of its 163, and three blank lines "empty"); a log of no records is no long read.
        stats = LogReadStats()
        try:
            for _ in read_log(path, stats):
                pass
        except OSError:
            stats = LogReadStats(lines=rep["skipped_lines"], skipped=Counter(rep["skipped_by_reason"]))
        fail(no_records(path, stats))
    from pardash.telemetry.report_render import no_ranks_text, report_clock_warnings

    if not rep["ranks"]:
        said = no_ranks_text(rep)
        code = _job_code_beside(path)
        if code:
            # (torchrun that failed before its ranks: a process limit, a port taken; the report
            # read "exits: none with an error" of a launch that ended with 1, review 279)
            rep["job_code"] = code
            output = os.path.join(os.path.dirname(os.path.abspath(path)), "output.log")
            said += f"; the job ended with exit code {code} before any rank reported" + (
                f" (torchrun's own words: {output})" if os.path.exists(output) else "")
        print(f"{PROG}: warning: {path}: {said}", file=sys.stderr)

    for line in report_clock_warnings(rep):
        print(f"{PROG}: warning: {path}: {line}", file=sys.stderr)
    if rep.get("runs"):
        runs = rep["runs"]
        from pardash.telemetry.summary import first_few

        print(f"{PROG}: warning: {path} holds {len(runs)} runs ({first_few(runs)}): the figures below mix them", file=sys.stderr)
    return rep


LOG_NAME = "telemetry.jsonl"


def _job_code_beside(path: str) -> int:
    """The exit code the launch's result.json beside the log gives its job (0: none, or none
    there)."""
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(path)), "result.json"), encoding="utf-8") as fh:
            code = json.load(fh).get("code")
    except (OSError, ValueError, AttributeError):
        return 0
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


def run_folder_log(folder: str) -> str | None:
    """A run folder's log: the one its result.json names (where the log was written at the end:
    a launch with --log elsewhere, or the file its hub went on in), if that file is there; else
    the log its hub went on in within the folder when its own could not be written
    (``NAME.complete-PID.jsonl``, whole, or ``NAME.restored-PID.jsonl``: the log at its path
    ends early, or is another file), then its telemetry.jsonl; each kept gzip-compressed
    (``.gz`` added, as ``gzip`` leaves it) too, as report, replay and export read it."""
    named = _result_log(folder)
    for path in (*([named] if named else []), *_copies_in(folder), os.path.join(folder, LOG_NAME)):
        for kept in (path, path + ".gz"):
            if os.path.isfile(kept):
                return kept
    return None


_COPY_NAME = re.compile(r".\.(?:complete|restored)-\d+(?:\.[^.]*)?(?:\.gz)?$")
"""A log its hub went on in (telemetry/recorder.py): run.complete-7.jsonl, run.restored-7.jsonl.gz."""


def _copies_in(folder: str) -> list[str]:
    """The logs a hub went on in within ``folder`` (see :data:`_COPY_NAME`), the last written
    first (a copy of a copy is the later; the ``.gz`` suffix dropped: run_folder_log adds it)."""
    try:
        found = [(e.stat().st_mtime_ns, len(e.name), e.path) for e in os.scandir(folder) if _COPY_NAME.search(e.name) and e.is_file()]
    except OSError:
        return []
    return list(dict.fromkeys(p.removesuffix(".gz") for *_, p in sorted(found, reverse=True)))


def _complete_copy_beside(log: str) -> str | None:
    """A complete copy of ``log`` in its folder (``NAME.complete-PID.jsonl``, which its hub
    wrote as it stopped when the log could not take its last lines), whose first line is the
    log's: the last written; None where there is none (a user's other logs: a moment's look)."""
    head, base = os.path.split(log)
    stem, dot, suffix = base.rpartition(".")
    stem, suffix = (stem, dot + suffix) if stem else (base, "")
    pattern = re.compile(re.escape(stem) + r"\.complete-\d+" + re.escape(suffix) + r"$")
    try:
        copies = sorted(((e.stat().st_mtime_ns, e.path) for e in os.scandir(head or ".") if pattern.match(e.name) and e.is_file()), reverse=True)
        first = _first_line(log)
    except OSError:
        return None
    for _, copy in copies:
        with contextlib.suppress(OSError):
            if first and _first_line(copy) == first:
                return copy
    return None


def _first_line(path: str) -> bytes:
    """The first line of the file at ``path`` (up to 64 KiB of it); b"" where it has none whole."""
    with open(path, "rb") as fh:
        head = fh.read(64 << 10)
    return head[: head.index(b"\n") + 1] if b"\n" in head else b""


def _result_log(folder: str) -> str | None:
    """The log a run folder's result.json names (None: none, or no result.json)."""
    try:
        with open(os.path.join(folder, "result.json")) as fh:
            log = json.load(fh).get("log")
    except (OSError, ValueError, AttributeError):
        return None
    return log if isinstance(log, str) and log else None


def _node_log_elsewhere(folder: str) -> str | None:
    """Where a node > 0's telemetry is, in one line, for its run folder (its result.json names
    node 0's hub, ``hub``, with no log: that hub keeps every node's ranks in its log); None for
    any other folder."""
    try:
        with open(os.path.join(folder, "result.json")) as fh:
            result = json.load(fh)
    except (OSError, ValueError):
        return None
    hub = result.get("hub") if isinstance(result, dict) else None
    if not isinstance(hub, str) or not hub:
        return None
    run = result.get("run_id") or "RUN_ID"
    keys = result.get("curve_dir")
    record = command("record", hub, curve_dir=keys if isinstance(keys, str) else None)
    return (f"{folder}: node {result.get('node_rank', '> 0')}'s telemetry is in node 0's log, kept by node 0's hub at {hub} "
            f"(there: `{PROG} report {run}`; from here, while the run lives: `{record}`)")  # fmt: skip


def _no_log_in(folder: str) -> str:
    """Why a run's folder gives no log, in one line."""
    elsewhere = _node_log_elsewhere(folder)
    if elsewhere is not None:
        return elsewhere
    named = _result_log(folder)
    if named is not None:
        return f"{folder}: the run's log {named} (its result.json names it) is not there; moved? give the log's path"
    return f"{folder}: a folder without a {LOG_NAME} (a run's folder holds one, or its result.json names it)"


def _in_run_folder(what: str) -> str | None:
    """The log meant by ``what``, a file missing from a run's folder: that run's log (its
    result.json names it: a launch with ``--log elsewhere.jsonl``) when ``what`` is the folder's
    own telemetry.jsonl, with a note of the file read; None where ``what``'s folder is no run's.
    `replay runs/ID/telemetry.jsonl`, as the README gives it, failed "no such log file, run folder
    or run id" of a run whose folder is there and whose result.json says where its log went."""
    folder = os.path.dirname(what)
    if not folder or not os.path.isfile(os.path.join(folder, "result.json")):
        return None
    inside = run_folder_log(folder)
    if inside is None:
        fail(_no_log_in(folder))  # the run is there, its log is not: said, not "no such log file"
    if os.path.basename(what) not in (LOG_NAME, LOG_NAME + ".gz"):  # (another name: a typo, not taken as the run's log)
        fail(f"{what}: no such file; that run's log is {inside} (give it, or the run's folder {folder})")
    print(f"{PROG}: note: {what} is not there; the run's log is {inside} (its result.json names it), read instead", file=sys.stderr)
    return inside


def find_log(what: str, runs_dir: str = "runs") -> str:
    """The log a user means: a log file, a run's folder (its telemetry.jsonl), or a run id (or
    its unique prefix) under ``runs_dir`` or in the registry of live runs, as `launch` prints it
    and `ps` lists it. Fails with one line when none is found."""
    if os.path.isfile(what):
        if (copy := _complete_copy_beside(what)) is not None:
            print(f"{PROG}: note: {copy} beside it is a complete copy of {what}, which its hub wrote as it stopped, this one "
                  f"unable to take the rest; {what} is read, as given", file=sys.stderr)  # fmt: skip
        return what
    if os.path.exists(what) and not os.path.isdir(what):
        fail(f"{what}: not a regular file (give a log file, a run folder or a run id)")
    if os.path.isdir(what):
        inside = run_folder_log(what)
        if inside is not None:
            return inside
        fail(_no_log_in(what))
    if (found_in := _in_run_folder(what)) is not None:
        return found_in
    # log -> its run id (a live run's log is in its folder too: one run)
    found = {e["log"]: str(e["run_id"]) for e in registry.live_runs(prune=False) if str(e.get("run_id", "")).startswith(what) and e.get("log")}
    folders = []
    if os.path.isdir(runs_dir) and os.sep not in what:
        folders = [os.path.join(runs_dir, d) for d in os.listdir(runs_dir) if d.startswith(what) and os.path.isdir(os.path.join(runs_dir, d))]
        for f in folders:
            found.setdefault(run_folder_log(f), os.path.basename(f))
    # One file, one match: the registry holds a live run's log by its absolute path, its
    # folder under ./runs gives a relative one (and a link is another path to it).
    by_file: dict[str, tuple[str, str]] = {}
    for p, run in found.items():
        if p and os.path.isfile(p):
            by_file.setdefault(os.path.realpath(p), (p, run))
    found = dict(by_file.values())
    if len(found) == 1:
        return next(iter(found))
    if found:
        from pardash.telemetry.summary import first_few

        # (their ids, which the prefix was of: it listed the logs' paths, "/tmp/b.jsonl, ...")
        fail(f"{what}: matches {len(found)} runs ({first_few(sorted(set(found.values())))}); give more of the id")
    if len(folders) == 1:
        fail(_no_log_in(folders[0]))  # the run is there, its log is not: said, not "no such run id"
    fail(f"{what}: no such log file, run folder or run id (runs are in {runs_dir if os.path.isabs(runs_dir) else os.path.join('.', runs_dir)}; `{PROG} ps` lists live ones)")


def json_text(obj: object) -> str:
    """``obj`` as JSON that every parser takes: a figure that is not finite is null (a log's
    wild clock, 1e308 s, made a duration of Infinity, which Python writes and JSON has not:
    JSON.parse, Go's and serde's decoders refuse the whole report)."""

    def finite(x: object) -> object:
        if isinstance(x, float):
            return x if math.isfinite(x) else None
        if isinstance(x, dict):
            return {k: finite(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [finite(v) for v in x]
        return x

    return json.dumps(finite(obj), indent=2, allow_nan=False) + "\n"


def cmd_report(ns: argparse.Namespace) -> int:
    from pardash.telemetry.report import render_markdown, render_text

    ns.log = find_log(ns.log, ns.runs_dir)
    if ns.compare is not None:
        ns.compare = find_log(ns.compare, ns.runs_dir)
        if registry.same_file(ns.log, ns.compare):
            # (a mistyped name compared a run with itself, and read "no change" in every row)
            which = "is the log reported" if ns.compare == ns.log else f"is the log reported, {ns.log} (the same file)"
            print(f"{PROG}: warning: --compare {ns.compare} {which}: the run is compared with itself, every figure unchanged", file=sys.stderr)
    rep = _report_of(ns.log)
    if ns.compare is not None:
        from pardash.telemetry.compare import compare_reports, render_compare_markdown, render_compare_text

        cmp = compare_reports(rep, _report_of(ns.compare), all_ranks=getattr(ns, "all_ranks", False))
        if cmp.get("nothing_to_compare"):
            fail(cmp["nothing_to_compare"])  # (a run that took no step, refused as other bad input is)
        out = {"json": json_text, "markdown": render_compare_markdown, "text": render_compare_text}[ns.format](cmp)
    else:
        out = json_text(rep) if ns.format == "json" else (render_markdown if ns.format == "markdown" else render_text)(rep, all_ranks=getattr(ns, "all_ranks", False))
    # In pieces, each flushed: one large write that a reader gone (`| head -1`) cut short came
    # back as written in part, and Python dropped the rest without the EPIPE (exit 0, not 141).
    # A piece (2,048 characters: at most 8 KiB, the stream's buffer) goes through the buffer,
    # whose flush writes on until all of it is out or the pipe's EPIPE says the reader went.
    for i in range(0, len(out), REPORT_PIECE_CHARS):
        sys.stdout.write(out[i : i + REPORT_PIECE_CHARS])
        sys.stdout.flush()
    return 0


REPORT_PIECE_CHARS = 2048


RANKS_LISTED = 8
"""Ranks an export's closing line names one by one; past them, ranks with the same number of
steps are one part of it (it listed all 256 ranks of a job, each with its 900 steps)."""
STEP_GROUPS_LISTED = 3


def steps_by_rank(steps: dict[int, int]) -> str:
    """'rank 0: 300, rank 1: 300'; past RANKS_LISTED ranks, grouped by their number of steps,
    the largest group first: '900 on each of 256 ranks', 'ranks 0-16, 18-255: 900; rank 17: 880'."""
    from pardash.telemetry.summary import ranks_named, ranks_text

    if len(steps) <= RANKS_LISTED:
        return ", ".join(f"rank {r}: {n}" for r, n in steps.items()) or "none"
    groups: dict[int, list[int]] = {}
    for rank, n in steps.items():
        groups.setdefault(n, []).append(rank)
    if len(groups) == 1:
        return f"{next(iter(groups))} on each of {len(steps)} ranks"
    ordered = sorted(groups.items(), key=lambda g: (-len(g[1]), -g[0]))
    parts = [f"{ranks_named(ranks) if len(ranks_text(ranks)) <= 40 else f'{len(ranks)} ranks'}: {n}" for n, ranks in ordered[:STEP_GROUPS_LISTED]]
    rest = [n for n, ranks in ordered[STEP_GROUPS_LISTED:] for _ in ranks]
    if rest:
        parts.append(f"{len(rest)} other ranks: {min(rest)} to {max(rest)}")
    return "; ".join(parts)


def _ranks_given(ranks) -> str:
    from pardash.telemetry.summary import ranks_text

    return ranks_text(sorted(ranks))


def check_ranks_in_log(asked, in_log, log: str, flag: str = "--ranks") -> None:
    """The rule for ranks a user picked from a log (``asked``) against the ranks it has
    (``in_log``): none of them there fails as bad input (2), naming the log's ranks; some not
    there are a warning, said once the others are exported. `--ranks 17` of a 2-rank run
    quietly wrote nothing, `--ranks 0,17` rank 0 alone without a word about 17 (a typo, or the
    wrong log)."""
    from pardash.telemetry.summary import ranks_brief, ranks_named

    if asked is None:
        return
    missing = sorted(set(asked) - set(in_log))
    if not missing:
        return
    has = f"its ranks: {ranks_brief(sorted(in_log))}" if in_log else "it has no rank's records"
    if len(missing) == len(set(asked)):
        fail(f"{flag} {ranks_brief(missing)}: no such rank in {log} ({has})")
    what = ranks_named(missing) if len(missing) <= 3 else f"{len(missing)} ranks ({ranks_brief(missing)})"
    print(f"{PROG}: warning: {flag}: {what} not in {log} ({has}); exported the others", file=sys.stderr)


def cmd_export(ns: argparse.Namespace) -> int:
    from pardash.telemetry.export import ExportError, end_warning, export_tensorboard, skipped_text

    if ns.tensorboard is None and ns.csv is None:
        fail("give --tensorboard DIR (TensorBoard's event files) or --csv FILE (a CSV table of the steps), or both")
    if ns.tensorboard is not None and not ns.tensorboard.strip():
        fail("--tensorboard: give a folder for the event files (an empty path would write into this one)")
    if ns.csv is not None and not ns.csv.strip():
        fail("--csv: give a file for the table (- for stdout)")
    ns.log = find_log(ns.log, ns.runs_dir)
    if ns.tensorboard is None:
        return _export_csv(ns)
    progress = ReadProgress(ns.log, "exporting")
    try:
        res = export_tensorboard(ns.log, ns.tensorboard, progress, ranks=ns.ranks, force=ns.force)
    except ExportError as exc:
        progress.close()
        fail(str(exc))
    finally:
        progress.close()
    check_ranks_in_log(ns.ranks, res["in_log"], ns.log)
    if not res["points"] and not res["texts"]:
        if res["left_out"]:
            fail(f"{ns.log}: no step of --ranks {_ranks_given(ns.ranks)} in the log, so nothing to export ({res['left_out']} other rank(s) have steps)", 1)
        # (it said "wrote 0 scalars to DIR ... view with tensorboard" of a folder never made)
        if not res["in_log"]:
            from pardash.telemetry.logreader import no_rank_reported

            fail(f"{ns.log}: {no_rank_reported(res.get('live_run'))}; nothing to export", 1)
        fail(f"{ns.log}: no step in the log, so nothing to export (its ranks published none)", 1)
    if res.get("runs"):
        # (as report warns of such a log: a rank's steps of each run went to one event file, a
        # later run's first step a restart there, from which TensorBoard drops the earlier's)
        from pardash.telemetry.summary import first_few

        runs = res["runs"]
        print(
            f"{PROG}: warning: {ns.log} holds {len(runs)} runs ({first_few(runs)}): "
            "exported as one, a later run's steps replacing an earlier's from the step it starts at",
            file=sys.stderr,
        )
    if said := end_warning(res, ns.log):
        # (as report says of such a log: the export is of the steps so far, and nothing said so;
        # a log whose hub was killed read as a whole run)
        print(f"{PROG}: warning: {said}", file=sys.stderr)
    texts = f" and {res['texts']} event texts" if res["texts"] else ""
    print(f"{PROG}: wrote {res['points']} scalars{texts} to {ns.tensorboard} (steps {steps_by_rank(res['ranks'])}); view with: tensorboard --logdir {ns.tensorboard}")
    if res.get("replaced"):  # (--force)
        print(f"{PROG}: removed the earlier export's {res['replaced']} event file(s) there")
    if res.get("rerun"):
        # (they are in the event files: TensorBoard draws the curve from where the run went on.
        # By rank, as the steps above: their sum over the ranks read "18 step(s)" where the
        # report said "9 run again" of the same run.)
        print(f"{PROG}: steps run again (after a restart, a resume, or by a later job under the run's id), counted once above: {steps_by_rank(res['rerun'])}")
    if res.get("lost"):
        # (the launch had said "2 messages lost"; the export's curves had a gap and no word)
        print(f"{PROG}: messages lost before the log had them (a hub restart, a rank's full queue), so its curves have gaps: "
              f"{steps_by_rank(res['lost'])}")  # fmt: skip
    if said := skipped_text(res):  # (as the report says it: a cut .gz read "1 truncated", no cut)
        print(f"{PROG}: {said}")
    if res["left_out"]:
        print(f"{PROG}: left out {res['left_out']} other rank(s) with steps (--ranks)")
    return _export_csv(ns) if ns.csv is not None else 0


def _export_csv(ns: argparse.Namespace) -> int:
    """``export --csv FILE``: the log's steps as one CSV table (see export.export_csv); what it
    wrote said on stderr where the table goes to stdout."""
    from pardash.telemetry.export import ExportError, end_warning, export_csv, skipped_text

    say = sys.stderr if ns.csv == "-" else sys.stdout
    reading, writing = ReadProgress(ns.log, "reading"), ReadProgress(ns.log, "writing the CSV of", of_bytes=True)
    try:
        res = export_csv(ns.log, ns.csv, reading, ranks=ns.ranks, write_progress=writing)
    except ExportError as exc:
        reading.close()
        writing.close()
        fail(str(exc))
    finally:
        reading.close()
        writing.close()
    check_ranks_in_log(ns.ranks, res["in_log"], ns.log)
    if not res["rows"]:
        if res["left_out"]:
            fail(f"{ns.log}: no step of --ranks {_ranks_given(ns.ranks)} in the log, so nothing to export ({res['left_out']} other rank(s) have steps)", 1)
        fail(f"{ns.log}: no step in the log, so nothing to export (its ranks published none)", 1)
    if res.get("runs"):
        print(f"{PROG}: warning: {ns.log} holds {len(res['runs'])} runs: the table mixes them (its run column tells them apart)", file=sys.stderr)
    if said := end_warning(res, ns.log):
        print(f"{PROG}: warning: {said}", file=sys.stderr)
    where = "stdout" if ns.csv == "-" else ns.csv
    print(f"{PROG}: wrote {res['rows']} rows of {len(res['columns'])} columns to {where} (steps {steps_by_rank(res['ranks'])}); "
          f"read with e.g. pandas.read_csv", file=say)  # fmt: skip
    if said := skipped_text({**res, "skipped_lines": res["skipped_lines"]}):
        print(f"{PROG}: {said}", file=say)
    if res["left_out"]:
        print(f"{PROG}: left out {res['left_out']} other rank(s) with steps (--ranks)", file=say)
    return 0
