"""How a report reads: text (rich tables) and GitHub markdown, from the dict
:func:`pardash.telemetry.report.build_report` returns. Only formatting lives here; every
figure is computed once, in the report."""

from __future__ import annotations

import math
import os
import re
import shlex
import statistics
from collections import Counter
from decimal import Decimal

from .analysis import BETWEEN_STEPS_WORDS, hang_causes
from .clocks import clock_warnings
from .failures import STOPPED_CODES, stop_text, stopped_how
from .holds import WHERE
from .logreader import no_rank_reported
from .schema import plain_text
from .summary import is_pipeline, is_sharded, joined_words, ranks_named, ranks_text, straggler_cause, unheard_why
from .summary import human_bytes, ms, took_text

PHASES = ("data_s", "forward_s", "backward_s", "optimizer_s", "comm_s", "self_s")
"""Phase fields of a step record, in the order tables show them."""
PHASE_LABELS = {"data_s": "data", "forward_s": "fwd", "backward_s": "bwd", "optimizer_s": "opt", "comm_s": "comm", "self_s": "self"}


def plain_report(rep):
    """``rep`` (a report, a comparison, any part of them) with every string in it, keys too, as
    :func:`schema.plain_text` leaves it: what a log says (a host, a warning, a device's name, a
    path, an error's message) reaches a terminal as text, never as an escape sequence that sets
    its title or clears its screen, as replay and export show it. The text and markdown
    renderers take the report through it once, before any figure is formatted; JSON has no
    need of it (json.dumps writes a control character as ``\\u001b``)."""
    if isinstance(rep, str):
        return plain_text(rep)
    if isinstance(rep, dict):
        return {plain_report(k): plain_report(v) for k, v in rep.items()}
    if isinstance(rep, (list, tuple)):
        return type(rep)(plain_report(v) for v in rep)
    return rep


def _num(x: float | None, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _devices_text(rep: dict) -> str:
    """'8 x H100 (cuda) on node0; ...', or past DEVICES_LISTED hosts one part a kind of device:
    '1024 x H100 (cuda) on 128 hosts'."""
    devices = rep.get("devices", [])
    if len(devices) > DEVICES_LISTED:
        kinds: dict[tuple[str, str], list[int]] = {}
        for d in devices:
            k = kinds.setdefault((d["device_name"] or d["device"], d["device"]), [0, 0])
            k[0] += d["ranks"]
            k[1] += 1
        return "; ".join(f"{n} x {name} ({dev}) on {hosts} hosts" for (name, dev), (n, hosts) in kinds.items())
    parts = []
    for d in devices:
        name = d["device_name"] or d["device"]
        parts.append(f"{d['ranks']} x {name} ({d['device']}) on {d['host'] or '?'}")
    return "; ".join(parts) or "-"


DEVICES_LISTED = 8
"""Hosts the summary lists one by one."""


def summary_rows(rep: dict) -> list[tuple[str, str]]:
    """The run summary as (label, value) pairs, shared by the text and markdown renderers."""
    cut = rep.get("gzip_damage")
    skipped, by_reason = lines_skipped(rep["skipped_lines"], rep["skipped_by_reason"], cut)
    reasons = ", ".join(f"{n} {why}" for why, n in by_reason.items())
    sps = _num(rep["samples_per_s"])
    if rep["samples_per_s"] is not None:
        # (the training time's: the progress lines' rate is wall clock, evaluations and saves in)
        sps += " over the time some rank was in a step" + _paused_text(rep)
    if rep.get("steady_samples_per_s"):
        sps += f" (steady {_num(rep['steady_samples_per_s'])}{_steady_text(rep.get('steady_steps'))})"
    if rep.get("jobs_sharing_run_id") and rep["samples_per_s"] is not None:
        sps += "; two jobs' together: they shared the run id, see the hub's warning"
    if rep.get("samples_partial") and rep["samples_per_s"] is not None:
        heard = len(rep["ranks"])
        sps += f"; partial: of the {heard} rank{'s' if heard > 1 else ''} heard from, not the job's"
    return [
        ("run", rep["run_id"] or "-"),
        ("log", os.path.basename(rep["log"])),
        ("strategy", rep["strategy"] or "-"),
        *([("command", shlex.join(rep["command"]))] if rep.get("command") else []),
        ("world size", str(rep["world_size"]) + _unheard_text(rep)),
        ("devices", _devices_text(rep)),
        ("duration", f"{_seconds(rep['duration_s'])} (training {_seconds(rep['train_s'])}{_restart_text(rep)}{_hung_text(rep)})"),
        *([("clocks", "; ".join(report_clock_warnings(rep)))] if report_clock_warnings(rep) else []),
        *([("evaluations", _evaluations_text(rep))] if rep.get("evaluations") else []),
        *([("checkpoints", _saving_text(rep["checkpoints"]))] if (rep.get("checkpoints") or {}).get("saving_s") else []),
        ("steps", _steps_text(rep)),
        # (more than one: every step says epoch 0 of a script that has none)
        *([("epochs", _epochs_text(rep["epochs"]))] if rep.get("epochs") and rep["epochs"]["last"] > rep["epochs"]["first"] else []),
        ("samples/s", sps),
        ("median step", "-" if rep["median_step_s"] is None else f"{ms(rep['median_step_s'])} ms" + _warmup_text(rep)),  # (not "- ms")
        *([(DATA_LABELS[bool(rep["data_loading"].get("between_steps"))], data_loading_text(rep["data_loading"]))] if rep.get("data_loading") else []),
        *([("memory growing", _growth_summary(rep))] if _growth_summary(rep) else []),
        ("lost messages", str(rep["lost_messages"]) + _hub_restarts_text(rep)),
        *([("restarts", f"torchrun restarted the {'jobs' if rep.get('jobs_run_again') else 'job'} {rep['job_restarts']}x "
                        f"(--max-restarts{', over the ' + str(rep['jobs_run_again'] + 1) + ' jobs of the log' if rep.get('jobs_run_again') else ''})")]
          if rep.get("job_restarts") else []),
        ("skipped log lines", f"{skipped}" + (f" ({reasons})" if reasons else "") + (f"; {gzip_damage_text(cut)}" if cut else "")),
        *([("refused by the hub", _refused_text(rep["rejected_by_reason"]))] if rep.get("rejected_by_reason") else []),
        # (of a log with no rank, the rank section says why: "at step 0, with 0 rank(s) not ended")
        *([("log ends early", _ends_early_text(rep["log_ends_early"], rep["skipped_by_reason"], cut))]
          if rep.get("log_ends_early") and rep["ranks"] else []),
        *([("not ended", _hub_stopped_first_text(rep["hub_stopped_first"]))] if rep.get("hub_stopped_first") else []),
    ]


def _warmup_text(rep: dict) -> str:
    """`` (the first step took 2.11 s: warm-up, such as torch.compile or the DataLoader's first
    batch; not counted as held up)``: a process's first step as long as a hold
    (report._warmup_step); '' where none was."""
    warm = rep.get("warmup_step")
    if not warm:
        return ""
    first = "the first step took" if warm["processes"] <= warm["ranks"] else "a process's first step (restarts and resumes too) took up to"
    return f" ({first} {_seconds(warm['step_s'])}: warm-up, such as torch.compile or the DataLoader's first batch; not counted as held up)"


LOADER_SAID = 0.10
"""A DataLoader's share of the step from which the report says more workers would speed it up."""
OWN_WORK_SAID = 0.05
"""The script's own work between steps, as a share of the step, from which the report says it."""
DATA_LABELS = ("data loading", "between steps")
"""The report's line of the ranks' data time: loading data, or (the zero-code hooks' DataLoader
said little of it) the script's own work between steps."""


def _error_of_other(f: dict) -> str:
    """`` (rank 0, which failed after it)`` where the failure's error and traceback are of a rank
    that failed after the cause the line names (it waited for a hung rank, or a peer that left or
    was stopped first, or one that left no word), '' where they are the cause's own: a hang's
    report showed rank 0's gloo timeout under "raised at" and "its traceback" below the line that
    named rank 1 (review 312)."""
    if f.get("waited_for") or f.get("left_early") or f.get("stopped_first") or f.get("unrecorded"):
        return f" (rank {f['rank']}, which failed after it)"
    return ""


def data_loading_text(dl: dict) -> str:
    """``68% of the ranks' step time (66-68% by rank): input-bound ...``: what loading data took
    of the steps (report._data_loading)."""
    least, most = f"{dl['share_min'] * 100:.0f}%", f"{dl['share_max'] * 100:.0f}%"
    by_rank = "" if least == most else f" ({least[:-1]}-{most} by rank)"
    text = f"{dl['share'] * 100:.0f}% of the ranks' step time{by_rank}"
    if dl.get("no_dataloader"):
        return text + (": no torch DataLoader gave the steps their batches: the script's own work between steps (making its "
                       "batches, logging, evaluating, saving)")  # fmt: skip
    loader = dl.get("loader_share")
    if loader is not None and dl["share"] >= OWN_WORK_SAID:  # (of 2% of the step: nothing to part)
        # Both parts, each with what would speed it up: 23% in the DataLoader beside 47% of
        # preprocessing on the main thread read "not its data loading; more DataLoader workers
        # would not speed it up", and two workers took 24% off its step (review 314).
        own = max(0.0, dl["share"] - loader)
        parts = [f"{loader * 100:.0f}% in the DataLoader" + (" (more DataLoader workers, num_workers, would speed that up)" if loader >= LOADER_SAID else "")]
        if (starts := dl.get("epoch_starts")) is not None:
            # Most of it its workers starting anew each epoch, which more workers make longer
            # (4 epochs of one worker, 0.2-0.7 s to start against 1 ms a batch): say so, and
            # "more workers" only of the rest.
            rest = max(0.0, loader - starts["share"])
            parts = [f"{loader * 100:.0f}% in the DataLoader: {starts['share'] * 100:.0f}% its workers starting anew on each of "
                     f"{starts['epochs']} epochs' first steps (persistent_workers=True keeps them from one epoch to the next; "
                     f"more workers take longer to start), {rest * 100:.0f}% its batches"
                     + (" (more DataLoader workers, num_workers, would speed that up)" if rest >= LOADER_SAID else "")]  # fmt: skip
        if own >= OWN_WORK_SAID:
            parts.append(f"{own * 100:.0f}% the script's own work between steps (logging, evaluating, saving, preprocessing on "
                         "the main thread), which DataLoader workers do not speed up")  # fmt: skip
        return text + (": input-bound, every rank waits for its data: " if dl["input_bound"] else ": ") + ", ".join(parts)
    if dl["input_bound"]:
        text += (": input-bound, every rank waits for its data (more DataLoader workers, num_workers, or a faster "
                 "pipeline would speed it up)")  # fmt: skip
    return text


def _hub_stopped_first_text(first: dict) -> str:
    """``ranks 0-1 at step 75: the hub stopped before their end was heard``."""
    return f"{ranks_named(first['ranks'])} at step {first['step']}: the hub stopped before their end was heard (no exit)"


def _unheard_text(rep: dict) -> str:
    """``; rank 1 never heard from (...)``: ranks of the world size the log has not a word of,
    and the likely why where the hub refused connections without a key (another node's ranks
    whose keys are not the hub's): the table below lacks them, and nothing else said so. (A
    log with no rank at all says why in its rank section.)"""
    unheard = rep.get("ranks_unheard") or []
    if not unheard or not rep["ranks"]:
        return ""
    why = unheard_why((rep.get("rejected_by_reason") or {}).get("no_key") or 0) or "nothing of them is in the log"
    return f"; {ranks_named(unheard)} never heard from: {why}"


def _saving_text(ck: dict) -> str:
    """``24 saved, 106.1 s in all, outside the steps``: the checkpoints' time as the evaluations'
    is said (it said the slowest save alone, of a run that spent 87 % of its time saving); what
    of it ran beside the steps (an asynchronous save) is not said to be outside them."""
    total, outside = ck["saving_s"], ck.get("saving_outside_steps_s")
    saved = ck["saved"]
    timed = sum(1 for c in saved if c.get("duration_s") is not None)
    # (a save that said no time is not in the sum: "3 saved, 0.9 s in all" of saves of which one
    # said its time read as all three's)
    line = f"{len(saved)} saved, {_seconds(total)} in all" if timed == len(saved) else (
        f"{len(saved)} saved, {_seconds(total)} in the {timed} that said their time")
    if ck.get("after_saves_s"):
        # (a rank's pause right after its save, in its own code: an upload. "4 saved, 0.03 s in
        # all" of a run that spent 24 s on them, review 327; see report._after_saves)
        n = ck.get("after_saves") or 0
        after = "right after it" if len(saved) == 1 else "right after each" if n == len(saved) else f"right after {n} of them"
        writing = "writing" if timed == len(saved) else f"writing the {timed} that said their time"
        return (f"{len(saved)} saved, {_seconds(total + ck['after_saves_s'])} in all: {_seconds(total)} {writing}, "
                f"{_seconds(ck['after_saves_s'])} in the script's own code {after} (e.g. an upload)")
    if outside is None or _seconds(outside) == _seconds(total):
        return line + ", outside the steps"
    if not outside:
        return line + ", beside the steps (asynchronous)"
    return line + f", {_seconds(outside)} of it outside the steps"


def _paused_text(rep: dict) -> str:
    """``, none evaluating or saving``: what the training time leaves out besides the time no
    rank was in a step. Any rank's evaluation or save, which the others waited for in their
    steps (rank 0 alone validating read "10,396 over the time some rank was in a step" of a
    run whose steps ran at 24,000, where its report said the evaluations were outside them)."""
    doing = [what for what, did in (("evaluating", rep.get("evaluations")),
                                    ("saving", any(s.get("duration_s") for s in (rep.get("checkpoints") or {}).get("saved") or ())))
             if did]  # fmt: skip
    if "saving" in doing and (rep.get("checkpoints") or {}).get("after_saves_s"):
        # (the ranks' own code right after their saves, an upload, is in: the others trained
        # not, but waited for it in their steps, as for any work between steps)
        doing[doing.index("saving")] = "writing a checkpoint"
    return f", none {' or '.join(doing)}" if doing else ""


def _steady_text(steps: dict | None) -> str:
    """`` over steps 21-300: the 20 before left out as warm-up``: what the steady rate is of (it
    said "samples a step / median step time", which read 18,630 of a run that sustained 14,513).
    The warm-up is the first steps logged, a restart's reruns among them ("over steps 13-100"
    after steps 1-8 and a rerun of 1-12 read "the first 20": the steps before 13 were 12)."""
    if not steps or steps.get("first") is None:
        return ""
    warm = f": the {steps['warmup']} before left out as warm-up" if steps.get("warmup") else ""
    return f" over steps {steps['first']}-{steps['last']}{warm}"


def _epochs_text(epochs: dict) -> str:
    """``3 (epochs 0 to 2)``: how many epochs the steps went through, and which."""
    return f"{epochs['last'] - epochs['first'] + 1} (epochs {epochs['first']} to {epochs['last']})"


def no_ranks_text(rep: dict) -> str:
    """Why a report has no rank, as export and replay say it of the same log."""
    return no_rank_reported((rep.get("log_ends_early") or {}).get("live_run"))


def report_clock_warnings(rep: dict) -> list[str]:
    """What the report says of clocks that disagree with the hub's (none: an empty list)."""
    off = {e["rank"]: e["off_s"] for e in rep.get("clocks_off") or []}
    hub_off = rep.get("hub_clock_off_s")
    if not off and hub_off is None:
        return []
    return clock_warnings(off, hub_off, rep.get("hub_clock_blamed", True), [r["rank"] for r in rep.get("ranks") or []])


def _steps_text(rep: dict) -> str:
    """``300 (last step 300)``; of a run that took none, why when a resume says (it read "0 (last
    step 0)" of a run resumed at step 200 with --steps 200, as the launcher's last line does not)."""
    resumed = [r["step"] for r in (rep.get("checkpoints") or {}).get("resumed") or [] if r.get("step") is not None]
    if not rep["steps"] and resumed:
        return f"0 (resumed at step {max(resumed)}, nothing left to train)"
    total = rep.get("total_steps")
    joined = _joined_last(rep)
    reached = joined[0] if joined else rep.get("last_step") or 0
    short = f" of {total} planned" if total and reached < total else ""
    return (f"{rep['steps']} (last step {_last_steps_text(rep)}{short}" + (f"; {joined[1]}" if joined and joined[1] else "")
            + (f"; {rep['steps_rerun']} run again {_rerun_why(rep)}" if rep.get("steps_rerun") else "")
            + (f"; {rep['steps_missing']} more not in the log: among the lost messages" if rep.get("steps_missing") else "") + ")")


def _evaluations_text(rep: dict) -> str:
    """``4, 6.5 s in all, outside the steps; rank 0 alone evaluated: the others waited 6.5 s for
    it (68% of the run)``: a rank evaluating alone keeps the others idle in their next
    collective, which the samples/s beside it (none evaluating) leave out (review 333)."""
    ev = rep["evaluations"]
    text = f"{ev['count']}, {_seconds(ev['seconds'])} in all, outside the steps"
    ranks = ev.get("ranks") or []
    waited = ev.get("others_waited_s") or 0.0
    # (said where the others' collectives waited at least half of it: a script that says its
    # evaluations on rank 0 alone may evaluate on every rank)
    if 0 < len(ranks) < rep["world_size"] and waited >= ev["seconds"] / 2:
        share = f" ({_pct(waited / rep['duration_s'])} of the run)" if rep.get("duration_s") else ""
        text += (f"; {ranks_named(ranks)} alone evaluated: the others waited {_seconds(waited)} for "
                 f"{'it' if len(ranks) == 1 else 'them'}{share}")  # fmt: skip
    return text


def _seconds(s: float) -> str:
    """``8.3 s``; under a second, two significant digits (a 6-step run's training read "0.0 s"),
    written out: ``0.000021 s``, never ``2.1e-05 s``; from an hour, in hours and minutes
    too, as the TUI says it (a day's run read "102009.4 s"): ``102,009 s (1d 4h 20m)``."""
    if not math.isfinite(s):
        return f"{s} s"
    if round(s, 1) >= 3600:  # (rounded, as the seconds are said: 3599.96 read "3600.0 s" with no hours)
        s = round(s, 1)
        m = int(round(s)) // 60
        d, h, m = m // 1440, m // 60 % 24, m % 60
        return f"{s:,.0f} s ({f'{d}d ' if d else ''}{h}h {m}m)"
    if s >= 1 or s == 0:
        return f"{s:.1f} s"
    return f"{Decimal(f'{s:.2g}'):f} s"


def _rerun_why(rep: dict) -> str:
    """What ran the steps again: ``after a restart or resume``, and where a job was run again
    under the run's id, ``by a later job under the run's id`` (one started by hand after the
    first had ended is no restart)."""
    if rep.get("jobs_sharing_run_id"):
        # (the hub saw two jobs at once: one's steps came after the other's, no restart)
        return "by a second job sharing the run id: see the hub's warning"
    if not rep.get("jobs_run_again"):
        return "after a restart or resume"
    if rep.get("job_restarts"):
        return "after a restart or resume, or by a later job under the run's id"
    return "by a later job under the run's id"


def _restart_text(rep: dict) -> str:
    """``; restarting 3.7 s``: the time torchrun's restarts of the job took (not training);
    ``; between jobs 10.9 s``: the time from a job's end to the next one's under the run's id
    (not training, and no restart: the second one was started by hand)."""
    return ((f"; restarting {_seconds(rep['restart_s'])}" if rep.get("restart_s") else "")
            + (f"; between jobs {_seconds(rep['between_jobs_s'])}" if rep.get("between_jobs_s") else ""))  # fmt: skip


def _hung_text(rep: dict) -> str:
    """``; then stalled 41 s``: a run that ended in a stall (its samples/s are of its steps);
    ``; then silent 26 s`` where its longest episode was a silence (no heartbeat: "stalled" said
    the rank was heard stuck in a phase)."""
    hung = [s for s in rep["stalls"] if s.get("ended_run") and s.get("seconds")]
    if not hung:
        return ""
    longest = max(hung, key=lambda s: s["seconds"])
    return f"; then {'silent' if longest['kind'] == 'silent' else 'stalled'} {_seconds(longest['seconds'])}"


def _refused_text(counts: dict[str, int]) -> str:
    """What the hub refused: messages by reason, and apart from them (``no_key``) connections
    it refused the handshake of, which a client that is refused tries again and again (two
    viewers left open 40 s made 596), so no count of messages or of clients."""
    messages = {why: n for why, n in counts.items() if why != "no_key"}
    parts = []
    if messages:
        parts.append(f"{sum(messages.values())} message(s) at its ports (" + ", ".join(f"{why} {n}" for why, n in messages.items()) + ")")
    if counts.get("no_key"):
        parts.append(f"{counts['no_key']} connection attempt(s) with no key authorised for the port (a refused client tries again and again)")
    return "; ".join(parts)


def lines_skipped(skipped: int, by_reason: dict[str, int], cut: dict | None) -> tuple[int, dict[str, int]]:
    """The log's lines the reader skipped, and by reason, less the break in a compressed log
    (``cut``: the report's ``gzip_damage``), which the reader counts as a line: the stream's
    break was no line of the log ("1 truncated" read as a torn line). Report and export say them
    alike."""
    by_reason = dict(by_reason)
    if cut:
        broke = "truncated" if cut["how"] == "cut short" else "corrupt"
        by_reason[broke] = by_reason.get(broke, 0) - 1
        by_reason = {why: n for why, n in by_reason.items() if n > 0}
        skipped -= 1
    return skipped, by_reason


def gzip_damage_text(cut: dict) -> str:
    return f"the compressed log is {cut['how']} after line {cut['after_line']:,}, the rest of it lost"


def _ends_early_text(end: dict, skipped: dict[str, int], cut: dict | None = None) -> str:
    judged = [f"{end[kind]} {kind}" for kind in ("stalled", "silent") if end.get(kind)]
    stalled = f" ({', '.join(judged)})" if judged else ""
    if cut and cut["how"] == "cut short":  # (the run's end is in the part that is not there: no hub's doing)
        return (f"at step {end['step']}, with {end['running']} rank(s) not ended{stalled}: the compressed log is cut short "
                f"after line {cut['after_line']:,} (a copy or a compression that did not finish), the run's end lost with the rest of it")
    if skipped.get("corrupt"):  # (a gzip log: its damaged part and the rest of it were not read)
        return f"at step {end['step']}, with {end['running']} rank(s) not ended{stalled}: the compressed log is damaged there, the rest of it lost"
    if end.get("continued_at"):  # (its disk full to the end: the hub wrote the whole log elsewhere as it stopped)
        copy = end["continued_at"]
        return (f"at step {end['step']}, with {end['running']} rank(s) not ended{stalled}: its disk was full, and its hub, as it "
                f"stopped, wrote the whole log to {copy}, where the run goes on (`pardash report {shlex.quote(copy)}` reads it all)")
    if end.get("lines_lost") is not None:  # (... and no place took the lines it held)
        lost = end["steps_lost"]
        steps = "" if not lost else f" of step {lost[0]}" if lost[0] == lost[1] else f" of steps {lost[0]}-{lost[1]}"
        return (f"at step {end['step']}, with {end['running']} rank(s) not ended{stalled}: its disk was full, and its hub stopped "
                f"with {end['lines_lost']:,} lines{steps} that it could not take and no other place could: lost")
    if end.get("live_run"):
        return (f"at step {end['step']}, with {end['running']} rank(s) not ended{stalled}: the run is still going, its hub recording "
                f"(`pardash attach {end['live_run']}` watches it; report again once it ends)")
    # (this machine's registry is all it knows: a hub on another node, or given another
    # registry dir, may be recording the log still)
    return (f"at step {end['step']}, with {end['running']} rank(s) not ended{stalled} and no closing line from the hub, and no live "
            "run on this machine records it: its hub stopped recording (killed, out of disk) before the run ended, or runs "
            "elsewhere (`pardash ps`)")


def _hub_restarts_text(rep: dict) -> str:
    times = rep.get("hub_restarts") or []
    if not times:
        return ""
    at = ", ".join(f"{t:.1f} s" if t is not None else "?" for t in times)
    return f" (the hub was restarted {len(times)}x, at {at}: what the ranks sent while it was down)"


RANK_COLUMNS = ("rank", "host", "status", "steps", "last loss", "step ms", *PHASE_LABELS.values(), "params", "grads", "optim", "state", "unsharded", "peak", "lost")


def rank_columns(rep: dict) -> tuple[str, ...]:
    """The rank table's columns: a ``restarts`` column after ``status`` when torchrun restarted
    the job (each rank's count: a rank restarted alone, or one that never came back, shows)."""
    if not rep.get("job_restarts"):
        return RANK_COLUMNS
    at = RANK_COLUMNS.index("status") + 1
    return (*RANK_COLUMNS[:at], "restarts", *RANK_COLUMNS[at:])


def rank_cells(r: dict, restarts: bool = False) -> list[str]:
    cells = _rank_cells(r)
    if restarts:
        cells.insert(RANK_COLUMNS.index("status") + 1, str(r.get("restarts", 0)))
    return cells


def _rank_cells(r: dict) -> list[str]:
    return [
        str(r["rank"]),
        r["host"] or "-",
        r["status"],
        str(r["steps"]),
        last_loss_text(r),
        ms(r["median_step_s"]),
        *(ms(r[f"median_{p}"]) for p in PHASES),
        human_bytes(r["params_bytes"]),
        human_bytes(r["grads_bytes"]),
        human_bytes(r["optim_bytes"]),
        # Held against unsharded: the same three (DDP's buckets are a row of the memory table).
        human_bytes(r["state_bytes"]),
        human_bytes(r["full_bytes"]),
        human_bytes(r["peak_bytes"]),
        str(r["lost_messages"]),
    ]


RANKS_FOLDED_PAST = 32
"""Past this many ranks the text and markdown rank tables list the ranks that stand out and
fold the rest into a row: 32 is four 8-GPU nodes, a screenful of rows read one by one; a larger
job's table is read for its outliers (1,024 near-identical rows put the straggler's verdict and
the memory summary a thousand lines down). ``--all-ranks`` lists every rank; JSON always does."""

GROUP_LISTED = 4
"""Ranks that stand out alike (the same status, steps, verdicts) listed one by one up to this
many; more are one row of their own (a job's 1,023 ranks stopped after one failed)."""

_STANDING = (
    # (key, what a rank's value says where it differs from most ranks')
    ("status", lambda v: v),
    ("restarts", lambda v: f"restarted {v}x"),
    ("steps", lambda v: f"{v} steps"),
    ("rerun", lambda v: "steps run again" if v else "no steps run again"),
    ("missing", lambda v: "steps not in the log" if v else "no steps missing"),
    ("lost", lambda v: "lost messages" if v else "no lost messages"),
    ("straggler", lambda v: "straggler" if v else "no straggler verdict"),
    ("stall", lambda v: " and ".join(v) if v else "no stall"),
    ("not_sharding", lambda v: "not sharding" if v else "sharding"),
    ("loss_not_finite", lambda v: "loss not finite" if v else "loss finite"),
)

_EXTREMES = (("median_self_s", "self", ms), ("held_bytes", "held", human_bytes), ("peak_bytes", "peak", human_bytes))
"""Figures whose highest and lowest rank are listed where they differ (as shown)."""


def _standing(r: dict, stragglers: set, stalls: dict, not_sharding: set) -> tuple:
    """What a rank's row is judged alike by, in :data:`_STANDING`'s order."""
    rank = r["rank"]
    return (r["status"], r.get("restarts", 0), r["steps"], bool(r.get("steps_rerun")), bool(r.get("steps_missing")),
            bool(r.get("lost_messages")), rank in stragglers, tuple(sorted(stalls.get(rank, ()))), rank in not_sharding,
            bool(r.get("loss_not_finite")))  # fmt: skip


def _group_row(rs: list[dict]) -> dict:
    """The medians of ranks ``rs`` (alike in their status, steps and verdicts) as a rank row."""

    def med(key: str, low: bool = False):
        vals = [r[key] for r in rs if r.get(key) is not None]
        return None if not vals else statistics.median_low(vals) if low else statistics.median(vals)

    hosts = {r["host"] for r in rs}
    row = {"rank": None, "host": hosts.pop() if len(hosts) == 1 else f"{len(hosts)} hosts", "status": rs[0]["status"],
           "steps": rs[0]["steps"], "restarts": rs[0].get("restarts", 0), "last_loss": med("last_loss"),
           "median_step_s": med("median_step_s"), "lost_messages": med("lost_messages", low=True)}  # fmt: skip
    for p in PHASES:
        row[f"median_{p}"] = med(f"median_{p}")
    for key in ("params_bytes", "grads_bytes", "optim_bytes", "state_bytes", "full_bytes", "peak_bytes"):
        row[key] = med(key, low=True)
    return row


def _spread(rs: list[dict]) -> str:
    """``step ms 39.8-40.5, self ms 14.0-14.6, held 7.4 MiB``: what the ranks of a folded row range
    over."""
    out = []
    for key, label, fmt in (("median_step_s", "step ms", ms), ("median_self_s", "self ms", ms),
                            ("held_bytes", "held", human_bytes), ("peak_bytes", "peak", human_bytes)):  # fmt: skip
        vals = [r[key] for r in rs if r.get(key) is not None]
        if vals:
            lo, hi = fmt(min(vals)), fmt(max(vals))
            out.append(f"{label} {lo}" if lo == hi else f"{label} {lo}-{hi}" if fmt is ms else f"{label} {lo} .. {hi}")
    return ", ".join(out)


def rank_table(rep: dict, all_ranks: bool = False) -> tuple[tuple[str, ...], list[list[str]], list[str]]:
    """The rank table's columns, rows and the lines under it. Up to RANKS_FOLDED_PAST ranks (or
    ``all_ranks``), a row a rank. Past them, the ranks that stand out, a row each, with why in a
    last column (``listed for``): those whose status, restarts, steps, lost messages or verdicts
    (straggler, stall, not sharding, loss not finite) differ from most ranks', and the highest and
    lowest in self time, memory held and peak; the rest folded into a row of their medians, its
    ranks and what they range over said under the table."""
    cols = rank_columns(rep)
    restarts = cols is not RANK_COLUMNS
    ranks = rep["ranks"]
    if all_ranks or len(ranks) <= RANKS_FOLDED_PAST:
        return cols, [rank_cells(r, restarts=restarts) for r in ranks], []
    stragglers = {s["rank"] for s in rep["stragglers"]}
    stalls: dict[int, set] = {}
    for s in rep["stalls"]:
        stalls.setdefault(s["rank"], set()).add(s["kind"])
    not_sharding = set(rep["memory"].get("not_sharding") or ())
    sig = {r["rank"]: _standing(r, stragglers, stalls, not_sharding) for r in ranks}
    most = Counter(sig.values()).most_common(1)[0][0]  # (a tie: the lower rank's)
    groups: dict[tuple, list[dict]] = {}
    for r in ranks:
        groups.setdefault(sig[r["rank"]], []).append(r)
    why: dict[int, list[str]] = {}
    for key, rs in groups.items():
        if key != most and len(rs) <= GROUP_LISTED:
            for r in rs:
                why[r["rank"]] = _differs(key, most)
    for key, label, fmt in _EXTREMES:
        have = [r for r in ranks if r.get(key) is not None]
        if len({fmt(r[key]) for r in have}) < 2:
            continue
        for word, pick in (("highest", max), ("lowest", min)):
            r = pick(have, key=lambda r: (r[key], -r["rank"]) if pick is max else (r[key], r["rank"]))
            why.setdefault(r["rank"], []).append(f"{word} {label}")
    rows: list[tuple[int, list[str]]] = []
    by_rank = {r["rank"]: r for r in ranks}
    for rank, reasons in why.items():
        rows.append((rank, [*rank_cells(by_rank[rank], restarts=restarts), "; ".join(reasons)]))
    notes = []
    for key, rs in groups.items():
        rest = [r for r in rs if r["rank"] not in why]
        if not rest or (key != most and len(rs) <= GROUP_LISTED):
            continue
        names = [r["rank"] for r in rest]
        label = ranks_text(names).replace(", ", ",")  # (one word, for awk: "0-16,18-1023")
        cells = rank_cells(_group_row(rest), restarts=restarts)
        cells[0] = label if len(label) <= 20 else f"({len(rest):,} ranks)"
        alike = "alike" if key == most else "; ".join(_differs(key, most)) + ", alike"
        rows.append((names[0], [*cells, alike]))
        notes.append(f"{ranks_named(names)} ({len(rest):,} ranks, {alike}): their row shows medians; {_spread(rest)}")
    rows.sort(key=lambda x: x[0])
    notes.append(f"{len(why)} of {len(ranks):,} ranks listed one by one, those that stand out; "
                 f"--all-ranks lists every rank (the JSON report has each)")
    return (*cols, "listed for"), [cells for _, cells in rows], notes


def _differs(key: tuple, most: tuple) -> list[str]:
    """What a rank's standing (:func:`_standing`) says where it differs from most ranks'."""
    return [say(v) for (_, say), v, m in zip(_STANDING, key, most) if v != m]


TIMELINE_HEAD = ("step range", "from", "wall", "samples/s", "step ms", "p90 ms", "data", "loss", "stragglers", "note")


def _clock(s: float | None, run_s: float) -> str:
    """A time into the run, as the run's length (``run_s``) has it: ``7.5 s`` under a minute,
    ``12:07`` under an hour, ``1:02:03``."""
    if s is None:
        return "-"
    if run_s < 60:
        return f"{max(0.0, s):.1f} s"
    s = max(0, int(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if run_s >= 3600 else f"{s // 60}:{s % 60:02d}"


def timeline_table(rep: dict) -> tuple[tuple[str, ...], list[list[str]]]:
    """The timeline's columns and rows (none where it has fewer than two parts: a run too short
    to cut); its ``note`` column only where a part has one."""
    parts = rep.get("timeline") or []
    if len(parts) < 2:
        return TIMELINE_HEAD, []
    run_s = max((p["start_s"] or 0) + (p["wall_s"] or 0) for p in parts)
    rows = []
    for p in parts:
        notes = []
        if p.get("steps_again"):
            notes.append(f"{p['steps_again']} step{'s' if p['steps_again'] != 1 else ''} run again" + (f" after torchrun's restart {p['restart']}" if p.get("restart") else ""))
        if p.get("steps_missing"):
            notes.append(f"{p['steps_missing']} steps not in the log")
        if p.get("longest_gap_s"):
            notes.append(f"no step for {_seconds(p['longest_gap_s'])} after step {p['gap_after_step']}")
        wall, train = p.get("wall_s"), p.get("train_s")
        if wall and train is not None and wall - train > 0.1 * wall:
            notes.append(f"{_seconds(wall - train)} of it no training (an evaluation, a save or a restart)")
        bad = p.get("loss_not_finite")
        if bad and p.get("loss_median") is not None:
            # (some of its steps: its loss is the others', these said here)
            notes.append(f"loss {bad['value']} from step {bad['from_step']} ({bad['steps']} of its steps)")
        top, median = p.get("loss_max"), p.get("loss_median")
        if top is not None and median is not None and median > 0 and top > LOSS_SPIKE * median and p is not parts[0]:
            # (the first part's highest is the first steps' descent, no spike)
            # (a loss 100x for a few steps read "101-120 ... 4.7856", its median, and nothing
            # else said it anywhere, review 306)
            notes.append(f"loss up to {top:.4g} at step {p['loss_max_step']}")
        cost = p.get("straggler_s") or 0.0
        rows.append([
            f"{p['first_step']}-{p['last_step']}" if p["last_step"] != p["first_step"] else str(p["first_step"]),
            _clock(p.get("start_s"), run_s),
            "-" if wall is None else _seconds(wall),
            _num(p.get("samples_per_s")),
            ms(p.get("step_s_median")),
            ms(p.get("step_s_p90")),
            _pct(p["data_share"]) if p.get("data_share") is not None else "-",
            _part_loss_text(p, rep.get("world_size") or 0),
            f"{_total_text(cost)} ({_pct(p.get('straggler_share'))})" if cost else "-",
            "; ".join(notes),
        ])  # fmt: skip
    keep = list(range(len(TIMELINE_HEAD)))
    if not any((p.get("data_share") or 0.0) >= TIMELINE_DATA_SHARE for p in parts):
        keep.remove(TIMELINE_HEAD.index("data"))
    if not any(row[-1] for row in rows):
        keep.remove(len(TIMELINE_HEAD) - 1)
    return tuple(TIMELINE_HEAD[i] for i in keep), [[row[i] for i in keep] for row in rows]


TIMELINE_DATA_SHARE = 0.1
"""The timeline says the share of each part's step time spent loading data (its ``data``
column) where some part spent this much: a job input-bound in some parts, its reads slower as
the page cache went cold or another job shared its storage (the report's one ``data loading``
line is the run's median)."""


LOSS_SPIKE = 10.0
"""A part of the timeline whose highest step loss is this many times its median says it in its note."""


def _part_loss_text(p: dict, world: int) -> str:
    """A timeline part's loss: its median; where its every step's loss was not finite, what it
    was (``nan``, ``nan (1 of 2 ranks)`` where only some ranks' were): "-" read as no loss ever
    reported (review 306); "-" where none was."""
    if p.get("loss_median") is not None:
        return loss_text(p["loss_median"])
    bad = p.get("loss_not_finite")
    if not bad:
        return "-"
    return bad["value"] if bad["ranks"] >= world else f"{bad['value']} ({bad['ranks']} of {world} ranks)"


LOSS_TURNS_SAID = 6
"""Pieces the findings' loss line says (ranks whose loss turned alike at one step are one); past
them, counted (the JSON lists them all)."""


LOSS_SPIKES_GROUPED = 3
"""Times a set of ranks' loss stopped being finite and came back, alike, from which the loss line
says them as one piece (a script that skips the update of each inf loss read 40 of them)."""


def _spikes_text(ranks: list[int], value: str, turns: list[tuple[int, int]]) -> str:
    """``ranks 0-1 inf at 20 steps (every 7 steps, from step 7 to 140), finite again the step
    after each``: ``turns`` (step, finite-again step) of one set of ranks, each over."""
    return f"{ranks_named(ranks)} {spikes_said(value, turns)}"


def spikes_said(value: str, turns: list[tuple[int, int]]) -> str:
    """:func:`_spikes_text` less its ranks: ``inf at 20 steps (every 7 steps, from step 7 to 140),
    finite again the step after each`` (the report's warnings say it of the ranks' warnings)."""
    steps = [s for s, _ in turns]
    gaps = {b - a for a, b in zip(steps, steps[1:])}
    every = f"every {gaps.pop()} steps, " if len(gaps) == 1 else ""
    lasted = {again - s for s, again in turns}
    after = "after each" if len(lasted) > 1 else "the step after each" if lasted == {1} else f"{lasted.pop()} steps after each"
    return f"{value} at {len(turns)} steps ({every}from step {steps[0]} to {steps[-1]}), finite again {after}"


def loss_line(rep: dict) -> str | None:
    """The findings' line of the ranks whose loss stopped being finite, the first first: "loss:
    not finite to the end: rank 1 nan from step 120, rank 0 nan from step 121"; or each with its
    end ("...; rank 0 inf from step 7, finite again at step 9"). None where every loss was
    finite (the findings read "stragglers: none ... exits: none" of a run that diverged). A set
    of ranks whose loss stopped being finite and came back LOSS_SPIKES_GROUPED times or more is
    one piece (:func:`_spikes_text`): a script that skips each inf loss's update read 40 pieces
    "ranks 0-1 inf from step 7, finite again at step 8; ranks 0-1 inf from step 13, ..."."""
    turns = rep.get("loss_not_finite") or []
    if not turns:
        return None
    alike: dict[tuple, list[int]] = {}
    for t in turns:
        alike.setdefault((t["step"], t["value"], t["until"], t.get("finite_again_step")), []).append(t["rank"])
    ends = {(until, again) for (_, _, until, again) in alike}
    to_end = ends == {("end", None)}
    spikes: dict[tuple, list[tuple[int, int]]] = {}
    for (step, value, until, again), ranks in alike.items():
        if until == "finite" and again is not None:
            spikes.setdefault((tuple(ranks), value), []).append((step, again))
    pieces: list[tuple[str, int]] = []
    """Each piece, and how many times (of its ranks at one step) a loss stopped being finite it says."""
    said: set[tuple] = set()
    for (step, value, until, again), ranks in alike.items():
        group = (tuple(ranks), value)
        if until == "finite" and len(spikes.get(group, ())) >= LOSS_SPIKES_GROUPED:
            if group not in said:
                said.add(group)
                pieces.append((_spikes_text(ranks, value, spikes[group]), len(spikes[group])))
            continue
        piece = f"{ranks_named(ranks)} {value} from step {step}"
        if not to_end:
            piece += {"end": " to the end", "restart": " until torchrun restarted it"}.get(until, f", finite again at step {again}")
        pieces.append((piece, 1))
    more = sum(n for _, n in pieces[LOSS_TURNS_SAID:]) + (rep.get("loss_not_finite_more") or 0)
    texts = [text for text, _ in pieces[:LOSS_TURNS_SAID]]
    line = f"loss: not finite to the end: {', '.join(texts)}" if to_end else f"loss: not finite: {'; '.join(texts)}"
    return line + (f"; {more} more times a loss stopped being finite" if more > 0 else "")


TIMELINE_NOTE = ("the run in parts of its steps, in the log's order: samples/s over the part's training time; step ms "
                 "(median) and p90 (9 in 10 of its steps took at most this) of the ranks' mean step time; data (where "
                 "some part spent 10% or more loading data) the share of the ranks' step time in it; loss the median "
                 "of the ranks' mean loss a step; stragglers: what the others waited for them in it, and its share of the "
                 "part's training")


LOSS_FIXED = (1e-3, 1e5)
"""The magnitudes a loss is written with four decimals in; outside them, four significant digits
in scientific notation (a diverged 1e308 filled its cell with 309 digits, 1e20 with 26)."""


def loss_text(loss: float) -> str:
    """``2.3026``; ``1.000e+308``, ``4.200e-06`` outside :data:`LOSS_FIXED` (0 stays ``0.0000``)."""
    if loss == 0 or LOSS_FIXED[0] <= abs(loss) < LOSS_FIXED[1]:
        return f"{loss:.4f}"
    return f"{loss:.3e}"


def last_loss_text(r: dict) -> str:
    """A rank's last loss; where its loss stopped being finite, the step it did and what it was
    there (``not finite from step 18 (inf at 18)``): a rank's reporter sends no loss that is not
    finite, and says only the first value (a loss inf at step 18, nan from 19, read "last loss
    inf"); ``-`` where it gave none."""
    if r["last_loss"] is not None:
        return loss_text(r["last_loss"])
    bad = r.get("loss_not_finite")
    return f"not finite from step {bad['step']} ({bad['value']} at {bad['step']})" if bad else "-"


def _total_text(seconds: float) -> str:
    """A straggler's total cost: seconds, or milliseconds under a tenth of one ("0.00 s over 1
    steps" said nothing)."""
    return f"{seconds:.2f} s" if seconds >= 0.1 else f"{ms(seconds)} ms"


def straggler_lines(rep: dict) -> list[str]:
    out = []
    for s in rep["stragglers"]:
        until = f"cleared at step {s['cleared_step']}" if s["cleared_step"] is not None else "until the end"
        # (where its streak ended, before the hub's clearing: the windows it takes)
        to = f" to step {s['until_step']}" if s.get("until_step") not in (None, s["cleared_step"]) else ""
        if not s["steps_charged"] and s["cost_s"] is not None:
            # (no step of its streak could be measured against the others: not "29.3 ms a step on
            # the 0 steps it held them up, 0.0 ms in all", review 305)
            out.append(f"rank {s['rank']} ({straggler_cause(s['kind'], s.get('message')) if s['kind'] else '?'}): straggling from step {s['since_step']}{to}, found at step {s['step']}, "
                       f"{until}; the others waited {ms(s['cost_s'])} ms a step when found, no step of it measured since")  # fmt: skip
            continue
        out.append(
            f"rank {s['rank']} ({straggler_cause(s['kind'], s.get('message')) if s['kind'] else '?'}): straggling from step {s['since_step']}{to}, found at step {s['step']}, {until}; "
            # a step: the mean over the steps charged (the verdict's own figure is of the windows
            # that found it, which the total would not multiply back to)
            # (said of those steps: "on average ... over 57 steps" beside the verdict's 15 ms read
            # as an average over the streak, where it was last on 57 of its 78)
            f"the others waited {ms(s['cost_total_s'] / s['steps_charged'] if s['steps_charged'] else s['cost_s'])} ms a step "
            f"on the {s['steps_charged']} step{'' if s['steps_charged'] == 1 else 's'} it held them up, {_total_text(s['cost_total_s'])} in all "
            f"({_pct(s['share_of_train'])} of training"
            # what the live verdict said (and /metrics and export keep): the windows that found it
            + (f"; {ms(s['cost_s'])} ms a step when found)" if s["cost_s"] is not None and s["steps_charged"] else ")")
            # (the steps each of several stragglers at once is charged: where it was the slowest)
            + (f"; with {ranks_named(s['straggling_with'])}, each step charged to the slowest of them" if s.get("straggling_with") else "")
        )
    return out




def hold_lines(rep: dict) -> list[str]:
    """``held up: rank 0 held the others 4 times, at steps 51, 101, 151, 201 (every 50 steps), 1.02 s
    each, 4.07 s in all (59.8% of training), in its own code between steps (not its DataLoader)``:
    a rank that now and then held the others far past a step (report._holds)."""
    out = []
    folded = _pause_sets(rep)[2]
    for h in rep.get("holds") or ():
        steps = ", ".join(map(str, h["steps"])) + (f" and {h['count'] - len(h['steps'])} more" if h["count"] > len(h["steps"]) else "")
        times = "once" if h["count"] == 1 else f"{h['count']} times"
        every = f" (every {h['every']} steps)" if h.get("every") else ""
        each = f"{h['each_s']:.2f} s" + ("" if h["count"] == 1 else " each")
        starts = ""
        if h.get("epoch_starts") and h["where"] == "dataloader":
            # (an epoch's first step: its workers starting anew, review 320)
            on = "on an epoch's first step" if h["count"] == 1 else "each on an epoch's first step" if h["epoch_starts"] == h["count"] else (
                f"{h['epoch_starts']} of them on an epoch's first step")
            starts = f", {on}: its workers starting anew (persistent_workers=True keeps them from one epoch to the next)"
        where = WHERE.get(h["where"], "")
        if ck := h.get("after_checkpoints"):
            # (right after the rank's own save: its upload's time, named nowhere, review 327)
            at = ", ".join(map(str, ck["steps"])) + (f" and {ck['count'] - len(ck['steps'])} more" if ck["count"] > len(ck["steps"]) else "")
            if ck["count"] == h["count"] and h["where"] in ("own work", "data"):
                after = "right after its checkpoint" if h["count"] == 1 else "each right after its checkpoint"
                where = f"{after} (at step{'s' if ck['count'] != 1 else ''} {at}): in its own code after the save, e.g. an upload"
            else:
                where += f"; {ck['count']} of them right after its checkpoint (at step{'s' if ck['count'] != 1 else ''} {at}): in its own code after the save, e.g. an upload"
        said = sorted({s["step"] for s in rep["stalls"] if s["rank"] == h["rank"] and id(s) in folded})
        if said:
            # (the hub's stall verdicts of the same pauses, said here once, not again as stalls)
            where += (f"; the hub's stall verdict{'s' if len(said) > 1 else ''} after step{'s' if len(said) > 1 else ''} "
                      f"{', '.join(map(str, said))} {'were these pauses' if len(said) > 1 else 'was this pause'}: no hang")
        out.append(f"held up: rank {h['rank']} held the others {times}, at step{'s' if h['count'] != 1 else ''} {steps}{every}, {each}, "
                   f"{_total_text(h['total_s'])} in all ({_pct(h['share_of_train'])} of training), {where}{starts}")  # fmt: skip
    return out


def data_bound_line(rep: dict) -> str | None:
    """One line where the data-loading verdict moved between ranks whose loaders all took alike
    time (report._data_bound): two ranks each named for a while in a 2-rank job, as if each in
    turn were the slow one, where every loader is (None: not so)."""
    db = rep.get("data_bound")
    if not db:
        return None
    moves = db["moves"]
    if db.get("turns"):
        moved = f"the data-loading verdict fell on {ranks_named(db['ranks'])} by turns ({db['spells']} spells, the rank named changing {db['turns']} times)"
    elif len(moves) == 1:
        m = moves[0]
        when = f"as epoch {m['epoch']} began" if m["epoch"] is not None else f"at step {m['step']}"
        moved = f"the data-loading verdict moved from rank {m['from_rank']} to rank {m['to_rank']} {when}"
    else:
        at_epochs = sum(1 for m in moves if m["epoch"] is not None)
        ranks = sorted({m["from_rank"] for m in moves} | {m["to_rank"] for m in moves})
        moved = (f"the data-loading verdict moved between {ranks_named(ranks)} {len(moves)} times"
                 + (f" ({at_epochs} as an epoch began)" if at_epochs else ""))
    least, most = f"{db['data_share_min'] * 100:.0f}", f"{db['data_share_max'] * 100:.0f}%"
    share = most if f"{least}%" == most else f"{least}-{most}"
    return (f"{moved}, and every rank spent alike time loading data ({share} of its steps): the ranks' loaders are "
            "likely equally slow (the job is data-bound) rather than one of them slower")


def _last_steps_text(rep: dict) -> str:
    """The run's last step: the slowest rank's, and the fastest's when they differ (a rank
    killed at 814 while the others went on to 817 read "steps 817 (last step 814)")."""
    last = [r["last_step"] for r in rep["ranks"] if r.get("last_step") is not None]
    if not last or max(last) == rep["last_step"]:
        return str(rep["last_step"])
    joined = _joined_last(rep)
    if joined:
        return str(joined[0])
    return f"{rep['last_step']} on the slowest rank, {max(last)} on the furthest"


def _joined_last(rep: dict) -> tuple[int, str] | None:
    """(the furthest rank's last step, which ranks ran out of inputs under DDP's Join at which
    step), where every rank behind it stopped there (by design, as the launch's last line says
    it: "400 on the slowest rank" read as a rank behind, review 335); None otherwise."""
    joined = {j["rank"]: j["step"] for j in rep.get("joined") or ()}
    last = [r["last_step"] for r in rep["ranks"] if r.get("last_step") is not None]
    if not joined or not last or not all(r["last_step"] in (max(last), joined.get(r["rank"])) for r in rep["ranks"] if r.get("last_step") is not None):
        return None
    return max(last), joined_words(joined, max(last))


LIKELY_CAUSE = "; likely the cause of the hang"
WAITED_OUT = "; a pause the others waited out"
"""The same guess about a stall every rank was in and came out of (or finished in): no hang, a
pause (a rank that finished after 6 s of uploading its last checkpoint read "likely the cause
of the hang" of a job that exited 0, review 327)."""


def _stall_end(until: str | None, stopped: bool = False) -> str:
    """How a stall ended, as the end of its line: "; resumed at step 13", " until it exited";
    ``stopped``: its exit was a stop, " until it was stopped"."""
    if until is None:
        return "; never resumed"
    if until == "exit" and stopped:
        return " until it was stopped"
    if until in ("exit", "finished"):
        return f" until it {'exited' if until == 'exit' else 'finished'}"
    if until.startswith("restarted"):
        return f" until {until}"  # until restarted by torchrun (restart 1)
    return f"; {until}"


def _came_out(s: dict) -> bool:
    """Whether the stall ended with its rank going on: stepping again, or finishing well (its
    own word, exit 0). Either is a pause the others waited out, no hang."""
    return (s["until"] or "").startswith(("resumed", "finished"))


def _never_resumed(stalls: list[dict]) -> list[dict]:
    """The episodes that did not end in a resumption or the rank's finishing: the hang the run
    ended in."""
    return [s for s in stalls if not _came_out(s)]


def _resumed_hangs(stalls: list[dict]) -> list[list[dict]]:
    """The episodes that ended in a resumption (or the rank's finishing), in sets that held the
    ranks at about one time: each set one pause the job came out of. An episode holds its rank
    in the steps after its last one up to the one it resumed at ("after step 10; resumed at step
    11": step 11; finished: the step after its last); those of one pause are the same steps, or
    next to each other (a rank that stopped after its step's collective has not sent the step
    the others finished). An episode that says no steps is a set of its own: nothing says which
    others it waited with."""
    spans, alone = [], []
    for s in stalls:
        if not _came_out(s):
            continue
        at = re.fullmatch(r"resumed at step (\d+)", s["until"])
        if s["step"] is None or (at is None and s["until"] != "finished"):
            alone.append([s])
        else:
            spans.append((s["step"] + 1, max(s["step"] + 1, int(at[1])) if at else s["step"] + 1, s))
    hangs: list[list[dict]] = []
    last = 0
    for first, end, s in sorted(spans, key=lambda x: x[0]):
        if hangs and first <= last + 1:
            hangs[-1].append(s)
            last = max(last, end)
        else:
            hangs.append([s])
            last = end
    return hangs + alone


def _pause_sets(rep: dict) -> tuple[set[int], dict[int, list[dict]], set[int]]:
    """The episodes a hang most likely waits for (analysis.hang_causes): among the episodes
    that never ended (the hang the run ended in), and among each set of those that ended that
    held the ranks at one time (a pause the job came out of). A hang holds every rank: ranks
    stuck apart from a job that went on wait for nobody. (All the ended ones taken together
    named a rank that waited in its all-reduce at step 10 "waited for", for its step was lower
    than the step of another rank's stall some time later.) Returns the ids of those episodes;
    of each pause's first such episode, the others' episodes (that waited it out: said on its
    line, not each on one of its own: a pause is said once); and the ids of the episodes said
    elsewhere: those waiters, and the pauses a hold says (its rank's hold at the step it resumed
    at: report._after_saves' ``held_step``) with the others' waits in them."""
    causes: set[int] = set()
    waiters: dict[int, list[dict]] = {}
    folded: set[int] = set()
    never = _never_resumed(rep["stalls"])
    for hang in [never, *_resumed_hangs(rep["stalls"])]:
        if len({s["rank"] for s in hang}) < rep["world_size"]:
            continue
        waited_for = hang_causes(((s["rank"], s["kind"], s["step"], s["phase"]) for s in hang), sharded=is_sharded(rep.get("strategy") or ""))
        held = [s for s in hang if s["rank"] in waited_for]
        causes |= {id(s) for s in held}
        if hang is never or not held:
            continue
        others = [s for s in hang if s["rank"] not in waited_for]
        if all(s.get("held_step") for s in held):
            folded |= {id(s) for s in hang}
        else:
            waiters[id(held[0])] = others
            folded |= {id(s) for s in others}
    # (a rank's pause none of the others was found stalled in, its hold says too)
    folded |= {id(s) for s in rep["stalls"] if s.get("held_step") and id(s) not in causes}
    return causes, waiters, folded


def _waiting_text(waiters: list[dict]) -> str:
    """`` (rank 1 in sync)``: where the others waited a pause out, by phase."""
    by: dict[str, list[int]] = {}
    for s in waiters:
        by.setdefault("silent" if s["kind"] == "silent" else f"in {s['phase']}", []).append(s["rank"])
    return f" ({', '.join(f'{ranks_named(sorted(set(r)))} {where}' for where, r in by.items())})" if by else ""


def _after_save_text(s: dict) -> str:
    """``, after its checkpoint at step 50: 6.0 s in its own code after the save, e.g. an
    upload``: a pause right after the rank's own save (report._after_saves)."""
    ck = s.get("after_checkpoint")
    if not ck:
        return ""
    return f", after its checkpoint at step {ck['step']}: {_seconds(ck['after_save_s'])} in its own code after the save, e.g. an upload"


def stall_lines(rep: dict) -> list[str]:
    """Stall and silence episodes, ranks that stalled alike (phase, step, end) on one line: in
    a hang every rank waits in the same collective. A pause the job came out of is one line, its
    likely cause's, the others' waits said on it; one a hold says (hold_lines) none."""
    causes, waiters, folded = _pause_sets(rep)
    stops = {e["rank"]: e["code"] in STOPPED_CODES for e in rep.get("exits") or ()}
    alike: dict[tuple[str, str], tuple[list[int], list[float]]] = {}
    for s in rep["stalls"]:
        if id(s) in folded:
            continue
        # (the hub's verdict said where a rank stalled in its data phase was: its own code, not its
        # DataLoader, where the zero-code hooks timed the loader: said here as there, review 308)
        where = BETWEEN_STEPS_WORDS if s["phase"] == "data" and BETWEEN_STEPS_WORDS in (s.get("message") or "") else f"in {s['phase']}"
        where += f" ({s['waits_in']})" if s.get("waits_in") else ""  # (the collective, as the live verdict says it)
        what = f"stalled {where}" if s["kind"] == "stalled" else "silent (no heartbeat)"
        at = f" after step {s['step']}" if s["step"] is not None else ""
        cause = ""
        if id(s) in causes:
            cause = f"{WAITED_OUT}{_waiting_text(waiters.get(id(s), []))}, not a hang" if _came_out(s) else LIKELY_CAUSE
        # (the run's last exit of the rank ended a stall the run ended in: a stop is said so, as
        # the rank table's "stopped"; it read "until it exited" of ranks stopped as they hung)
        stopped = s.get("ended_run") and stops.get(s["rank"], False)
        # (at an epoch's start, as its DataLoader's workers started again: why, and the remedy)
        epoch = " (an epoch's first batch: its DataLoader workers starting? persistent_workers=True keeps them)" if s.get("epoch_start") else ""
        ranks, took = alike.setdefault((f"{what}{at}", f"{_stall_end(s['until'], stopped)}{_after_save_text(s)}{cause}{epoch}"), ([], []))
        if s["rank"] not in ranks:
            ranks.append(s["rank"])
        if s.get("seconds") is not None:
            took.append(s["seconds"])
    lines = sorted(alike.items(), key=lambda item: LIKELY_CAUSE not in item[0][1] and WAITED_OUT not in item[0][1])  # stable: the rest keep their order
    # (for how long: the longest of the ranks that stalled alike, from their last step)
    return [f"{ranks_named(ranks)} {what}{f' for {_seconds(max(took))}' if took else ''}{end}" for (what, end), (ranks, took) in lines]


def exit_lines(rep: dict) -> list[str]:
    """The exits with an error, ranks that exited alike (code, step, role) on one line: the root
    cause first, then in the order of their first rank (a job of 1024 ranks stopped after one
    failed is two lines)."""
    alike: dict[str, list[int]] = {}
    for x in rep.get("left_early") or ():
        # A rank that left the job early (exit 0) as its peers trained on: the root cause, first
        # (the section listed only the rank that failed of it, "failed as a peer had left the job").
        at = f" at step {x['step']}" if x.get("step") is not None else ""
        alike.setdefault(f"left the job{at} (exit code 0) while the others trained on - the root cause", []).append(x["rank"])
    first = {"cause": 0, "peer_left": 0, "hung": 0, "stopped_first": 0, "waited": 1}
    for e in sorted(rep["exits"], key=lambda e: first.get(e.get("role") or "", 2)):  # stable: the rest keep their order
        if e["code"] in STOPPED_CODES:
            # A stop, in the words every output says one in (the rank table's "stopped"): it read
            # "exited with code -15 (SIGTERM) - stopped by torchrun", a failure's words first.
            what = stop_text(e["rank"], e["code"], e.get("message"), e.get("step"))
            role = {"stopped_first": " first, the others failed after it",
                    "hung": " - the root cause: it hung, the others waited"}.get(e.get("role") or "", "")  # fmt: skip
            alike.setdefault(what + role, []).append(e["rank"])
            continue
        sig = f" ({e['signal']})" if e.get("signal") else ""
        at = f" at step {e['step']}" if e.get("step") is not None else ""
        # Who stopped it, as the launcher noted: a stop by you, by torchrun after a failure and
        # by pardash after torchrun was killed are different stories.
        by = stopped_how(e["rank"], e.get("message"))
        how = f" {by}" if by else ""
        role = {
            "cause": " - the root cause", "victim": " - failed because of it", "stopped": f" - stopped{how}",
            "stopped_first": f" - stopped{how} first, the others failed after it",
            "peer_left": " - failed as a peer had left the job",
            "hung": " - the root cause: it hung, the others waited", "waited": " - failed waiting for the hung rank(s)",
            "mismatched": " - timed out first, in a collective the others never called",
            "in_stop": f" as it was being stopped {e.get('stopping') or ''}".rstrip(),
        }.get(e.get("role") or "", "")  # fmt: skip
        alike.setdefault(f"exited with code {e['code']}{sig}{at}{role}", []).append(e["rank"])
    return [f"{ranks_named(ranks)} {what}" for what, ranks in alike.items()]


def recovered_lines(rep: dict) -> list[str]:
    """The failures torchrun restarted the job after (``--max-restarts``), or the job was run
    again after (a resume by hand under the run's id)."""
    return [f"{f.get('then') or 'restarted by torchrun'} after: {f['line']}" for f in rep.get("recovered") or []]


def checkpoint_lines(rep: dict) -> list[str]:
    """The checkpoints saved (steps, the last one and how many files it wrote, the slowest save)
    and each resume."""
    ck = rep.get("checkpoints") or {}
    out = []
    saved = ck.get("saved") or []
    if saved:
        steps = [c["step"] for c in saved]
        if len(steps) <= 6:
            at = ", ".join(map(str, steps))
        else:
            gaps = {b - a for a, b in zip(steps, steps[1:])}
            at = f"{steps[0]} .. {steps[-1]}" + (f", every {gaps.pop()}" if len(gaps) == 1 else "")
        line = f"{len(saved)} saved at step{'s' if len(steps) > 1 else ''} {at}"
        if saved[-1].get("path"):  # (none of a save to a file object without a name: "the last in saved" read as a path)
            line += f"; the last in {saved[-1]['path']}"
            if saved[-1].get("files"):  # (the model's file named alone, beside the time of it and the optimizer's)
                more = saved[-1]["files"] - 1
                line += f" ({more + 1} files)" if saved[-1]["path"].endswith(os.sep) else f" and {more} more file{'s' if more > 1 else ''}"
        slowest = max((c for c in saved if c["duration_s"] is not None), key=lambda c: c["duration_s"], default=None)
        if slowest is not None:
            line += f"; slowest save {took_text(slowest['duration_s'])} (step {slowest['step']})"
        after = [c for c in saved if c.get("after_save_s")]
        if after:
            # (what the saving rank did right after, an upload: the checkpoints' time too, review 327)
            longest = max(after, key=lambda c: c["after_save_s"])
            line += (f"; then {_seconds(sum(c['after_save_s'] for c in after))} in the saving rank's own code right after "
                     f"{'it' if len(saved) == 1 else 'each' if len(after) == len(saved) else f'{len(after)} of them'} (e.g. an upload), the longest {_seconds(longest['after_save_s'])} (step {longest['step']})")
        out.append(line)
    for r in ck.get("resumed") or []:
        after = f" after torchrun restart {r['restart']}" if r.get("restart") else ""
        took = f" ({took_text(r['duration_s'])})" if r.get("duration_s") is not None else ""
        out.append(f"resumed{after}: {r['message']}{took}")
    return out


def warning_lines(rep: dict) -> list[str]:
    """Each warning text the ranks sent, once, with the ranks that sent it; the hub's, "hub:". A
    set of ranks' loss that kept turning not finite and back (the report's ``loss_turns``), one
    line where the first turn was: "ranks 0-1 at step 7: loss inf at 19 steps (every 6 steps,
    from step 7 to 115), finite again the step after each", as the findings' loss line says it."""
    out = []
    for w in rep.get("warnings") or []:
        who = "hub" if w.get("hub") else ranks_named(w["ranks"])
        at = f" at step {w['step']}" if w.get("step") is not None else ""
        turns = w.get("loss_turns")
        said = f"loss {spikes_said(turns['value'], [tuple(t) for t in turns['turns']])}" if turns else w["message"]
        out.append(f"{who}{at}: {said or '(more warnings than a report lists)'}")
    return out


def growth_lines(rep: dict) -> list[str]:
    """Each time a rank's memory grew step after step (the hub's ``memory_growing`` verdicts,
    telemetry/memgrowth.py): "rank 1's memory grew 1.6 MiB a step (383 MiB at step 21 -> 1.1 GiB
    at step 500), said at step 266, to the end: tensors kept across steps? ..."; the figures are
    its process's from past the warm-up to where it was said steady again, else its last step.
    A leak of 1.6 MiB a step read "ranks hold 1.00x what ddp x2 should" (review 340)."""
    out = []
    for g in (rep.get("memory") or {}).get("growing") or ():
        what = "GPU memory (allocated)" if g["series"] == "cuda_allocated" else "memory"
        who = "every rank's" if g["rank"] < 0 else f"rank {g['rank']}'s"
        line = f"{who} {what} grew"
        if g.get("per_step_bytes") is not None:
            line += (f" {human_bytes(g['per_step_bytes'])} a step ({human_bytes(g['from_bytes'])} at step {g['from_step']} -> "
                     f"{human_bytes(g['to_bytes'])} at step {g['to_step']}{', the median rank' if g['rank'] < 0 else ''})")  # fmt: skip
        line += f", said at step {g['step']}" if g.get("step") is not None else ""
        line += f", steady again at step {g['steady_step']}" if g.get("steady_step") is not None else ", to the end"
        _, _, hint = (g.get("message") or "").partition("): ")
        out.append(line + (f": {hint}" if hint else ""))
    return out


def _growth_summary(rep: dict) -> str:
    """The summary's line of memory growth: which ranks, how fast, to the end or not."""
    said = []
    for g in (rep.get("memory") or {}).get("growing") or ():
        who = "every rank alike" if g["rank"] < 0 else f"rank {g['rank']}"
        if g.get("per_step_bytes") is not None:
            who += f": {human_bytes(g['from_bytes'])} -> {human_bytes(g['to_bytes'])}, {human_bytes(g['per_step_bytes'])} a step"
        end = f", steady from step {g['steady_step']}" if g.get("steady_step") is not None else ", to the end"
        said.append(who + end)
    return "; ".join(said) + " (a leak? see memory below)" if said else ""


def memory_rows(rep: dict) -> list[tuple[str, str]]:
    """The memory table's rows; none for a log without a figure of it (a script that never
    stepped an optimizer: a table of dashes and "expected for ? x2 (?)")."""
    m = rep["memory"]
    if m["state_bytes_max"] is None and not m["expected_bytes_per_rank"] and m["peak_bytes_max"] is None:
        return []
    st = f"{rep['strategy'] or '?'} x{rep['world_size']}"
    span = human_bytes(m["state_bytes_max"])
    if m["state_bytes_min"] is not None and human_bytes(m["state_bytes_min"]) != span:  # (a few bytes apart: one figure)
        span = f"{human_bytes(m['state_bytes_min'])} .. {span}"
    rows = [
        ("measured: params + grads + optimizer, a rank", span),
        ("this run's state unsharded (measured), a rank", human_bytes(m["measured_full_bytes"])),
        (f"expected for {st} ({m.get('expected_basis') or '?'})", human_bytes(m["expected_bytes_per_rank"])),
        ("measured against expected", "-" if m["vs_expected"] is None else f"{m['vs_expected']:.2f}x"),
        ("saving from sharding, against its state unsharded", _pct(m["saving_vs_unsharded"])),
        # The ZeRO paper's arithmetic, for scale: Adam's state, whatever the run's optimizer (an
        # SGD run's table read as if it held Adam's).
        (f"for scale, Adam's state unsharded ({m['bytes_per_param']} B/param)", human_bytes(m["unsharded_bytes_per_rank"])),
    ]
    if m["buckets_bytes_max"]:
        rows.append(("DDP gradient buckets, a rank", human_bytes(m["buckets_bytes_max"])))
    if m["peak_bytes_max"] is not None:
        kind = {"cuda": "CUDA allocator", "rss_hwm": "process RSS high-water mark"}.get(m["peak_kind"], "process RSS")
        rows.append((f"peak ({kind}), largest rank", human_bytes(m["peak_bytes_max"])))
    if m.get("children_bytes_max") is not None:
        n = m["children_max"]
        rows.append(("child processes' own memory (DataLoader workers: not in the RSS), largest rank",
                     f"{human_bytes(m['children_bytes_max'])} in {n} process{'es' if n != 1 else ''}"))  # fmt: skip
    return rows


PLAIN_TABLE_RANKS = 256
"""Past this many ranks the rank table is laid out by hand, as rich lays it out: rich took 24 s
for 10,000 rows."""


def _plain_table(cols: tuple[str, ...], rows: list[list[str]], left: set[str]) -> list[str]:
    """Columns two spaces apart, each as wide as its widest cell (header included)."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    out = []
    for cells in (list(cols), *rows):
        out.append("  ".join(cell.ljust(w) if col in left else cell.rjust(w) for col, cell, w in zip(cols, cells, widths)).rstrip())
    return out


def render_text(rep: dict, width: int = 10_000, all_ranks: bool = False) -> str:
    """The report as plain text with rich tables: no line wrapped (a table's cells stay on their
    row, for grep and awk), none ending in spaces. What it found first (stragglers, stalls,
    exits and the root cause, memory), then the timeline, then the ranks (past
    RANKS_FOLDED_PAST, those that stand out and a row for the rest, unless ``all_ranks``)."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    rep = plain_report(rep)
    buf = StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None, markup=False, highlight=False)
    summary = Table(box=None, show_header=False, pad_edge=False)
    summary.add_column(style="bold")
    summary.add_column()
    for k, v in summary_rows(rep):
        summary.add_row(k, v)
    con.print(summary)
    if rep.get("note"):
        con.print(f"note: {rep['note']}")
    con.print()
    con.print("stragglers:" + ("" if rep["stragglers"] else " none"))
    for line in straggler_lines(rep):
        con.print(f"  {line}")
    if data_bound_line(rep):
        con.print(f"  {data_bound_line(rep)}")
    for line in hold_lines(rep):
        con.print(line)
    # (stalls a hold says, the pauses the job came out of, are said there once: "none" beside it)
    con.print("stalls:" + ("" if stall_lines(rep) else " none" + (" but the pauses held up above, no hang" if rep["stalls"] else "")))
    for line in stall_lines(rep):
        con.print(f"  {line}")
    if not rep["exits"] and rep.get("job_code"):  # (no rank reported: the launch's result says how the job ended)
        con.print(f"exits: no rank reported; the job's exit code {rep['job_code']}")
    else:
        con.print("exits:" + ("" if rep["exits"] else " none with an error" + (" in the last attempt" if rep.get("job_restarts") else "")))
    for line in exit_lines(rep):
        con.print(f"  {line}")
    if rep.get("failure"):
        con.print(f"root cause: {rep['failure']['line']}")
        whose = _error_of_other(rep["failure"])
        if rep["failure"].get("where"):
            con.print(f"raised at{whose}: {rep['failure']['where']}")
        if rep["failure"].get("traceback"):
            who = f"rank {rep['failure']['rank']}'s traceback's end, it failed after the cause;" if whose else "its traceback's end"
            con.print(f"{who} (the whole of it is in the log, and in the ranks' output: `o` in `pardash replay`):")
            for line in rep["failure"]["traceback"]:
                con.print(f"  | {line}", soft_wrap=True)
    for line in recovered_lines(rep):
        con.print(line)
    if loss_line(rep):
        con.print(loss_line(rep))
    con.print()
    rows = memory_rows(rep)
    if rows:
        mt = Table(box=None, show_header=False, pad_edge=False, title="memory (model state a rank holds)", title_justify="left")
        mt.add_column()
        mt.add_column(justify="right")
        for k, v in rows:
            mt.add_row(k, v)
        con.print(mt)
    con.print(rep["memory"]["verdict"])
    if rep["memory"]["not_sharding"]:
        con.print(f"  {ranks_named(rep['memory']['not_sharding'])}: not sharding")
    for line in growth_lines(rep):
        con.print(line)
    head, rows = timeline_table(rep)
    if rows:
        con.print()
        t = Table(box=None, pad_edge=False, title=f"timeline ({len(rows)} parts of the steps)", title_justify="left")
        for col in head:
            t.add_column(col, justify="left" if col == "note" else "right")
        for row in rows:
            t.add_row(*row)
        con.print(t)
        con.print(TIMELINE_NOTE)
    con.print()
    cols, rows, under = rank_table(rep, all_ranks)
    title = "ranks (medians; memory after the last step)"
    if not rows:
        con.print(f"ranks: {no_ranks_text(rep)}")
    elif len(rows) > PLAIN_TABLE_RANKS:
        con.print(title)
        buf.write("".join(line + "\n" for line in _plain_table(cols, rows, left={"host", "status", "listed for"})))
    else:
        t = Table(box=None, pad_edge=False, title=title, title_justify="left")
        for col in cols:
            t.add_column(col, justify="left" if col in ("host", "status", "listed for") else "right")
        for row in rows:
            t.add_row(*row)
        con.print(t)
    for line in under:
        con.print(line)
    if rows:
        for note in _notes(rep):
            con.print(note)
    if own := own_phase_lines(rep):
        con.print("the script's own phases (median a step over ranks):")
        for line in own:
            con.print(f"  {line}")
    if custom_lines(rep):
        con.print("other metrics (median over ranks):")
        for line in custom_lines(rep):
            con.print(f"  {line}")
    ck = checkpoint_lines(rep)
    if ck:
        con.print("checkpoints:")
        for line in ck:
            con.print(f"  {line}")
    warned = warning_lines(rep)
    if warned:
        con.print("warnings:")
        for line in warned:
            con.print(f"  {line}")
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


SHARED_RUN_ID = "two jobs share run id"
"""In the hub's warning that a second process sends as a rank while the first still does
(hubcore ``HubCore._two_say``): two jobs given one run id, their figures mixed. The report and
the TUI's alerts find the warning by it."""


COUNTED_BY_PARDASH = {
    "micro_batches": "batches a step, each a forward with its own backward (gradient accumulation), counted by pardash",
    "grad_norm": "the total gradient norm the script's clip_grad_norm_ returned (its last call in the step), read by pardash where the script logs none of its own",
}
"""Custom metrics pardash's own instrumentation adds (the rest are the script's, ``pt.log``);
and ``lr_group1``, ... (see :func:`by_pardash`)."""

LR_GROUP = "lr_group"
"""Prefix of pardash's figures ``lr_group1``, ...: where an optimizer's parameter groups' learning
rates differ, group N's (the step's ``lr`` is group 0's; pardash.trainer.norms)."""


def lr_group_of(name: str) -> int | None:
    """The parameter group whose learning rate the custom metric ``name`` is (None: no such)."""
    if name.startswith(LR_GROUP) and name[len(LR_GROUP):].isdigit():
        return int(name[len(LR_GROUP):])
    return None


def by_pardash(name: str) -> str | None:
    """What the custom metric ``name`` is where pardash's own instrumentation adds it (None: the
    script's own, ``pt.log``)."""
    said = COUNTED_BY_PARDASH.get(name)
    if said is None and (group := lr_group_of(name)) is not None:
        return f"the learning rate of the optimizer's parameter group {group} (lr is group 0's), read by pardash"
    return said


def own_phase_lines(rep: dict) -> list[str]:
    """A line per phase of the script's own (``pt.phase("augment")``): the median over the
    ranks that timed it, a step, and the range of the ranks' own medians where they differ (a
    rank slow in it stands out, as in the rank table's phase columns)."""
    out = []
    for name, seconds in (rep.get("custom_phases") or {}).items():
        if seconds is None:
            continue
        mine = [x for r in rep["ranks"] if (x := (r.get("custom_phases") or {}).get(name)) is not None]
        spread = f" (ranks {ms(min(mine))}-{ms(max(mine))} ms)" if len(mine) > 1 and ms(min(mine)) != ms(max(mine)) else ""
        out.append(f"{name}: {ms(seconds)} ms a step{spread}")
    return out


def custom_lines(rep: dict) -> list[str]:
    """A line per custom metric (the script's ``pt.log``, or pardash's own: its count of backward
    passes, the gradient norm a clipping returned, the lrs of parameter groups past the first):
    its last value, and its first."""
    return [
        f"{name}: {c['last']:.6g} at the last step (first {c['first']:.6g})"
        + (f" - {said}" if (said := by_pardash(name)) else "")
        for name, c in (rep.get("custom") or {}).items()
        if c.get("last") is not None and c.get("first") is not None
    ]


def md_table(head: list[str] | tuple[str, ...], rows: list[list[str]], right: set[int] | None = None) -> str:
    """A GitHub-flavoured markdown table (``|`` in cells escaped)."""
    right = right if right is not None else set(range(1, len(head)))

    def cell(x: str) -> str:
        return str(x).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in head) + " |"]
    lines.append("|" + "|".join("---:" if i in right else "---" for i in range(len(head))) + "|")
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>])")


def md_text(text: str) -> str:
    """``text`` as markdown shows it as written: what the ranks said (an error's message, a
    warning, a path) can hold ``<pad>``, which GitHub took for an HTML tag and dropped, or
    ``*``, ``_`` and backquotes, which it read as emphasis and code."""
    return _MD_SPECIAL.sub(r"\\\1", text)


SELF_NOTE = (
    "self: a rank's work up to its step's first collective (DDP: data and forward; FSDP: those less its "
    "all-gathers), with no waiting in it: the straggler signal, not the step less comm."
)


COMM_NOTES = {
    "trainer": "comm: the time in the step's collectives (DDP's all-reduces, FSDP's all-gathers and reduce-scatters), "
               "which run within forward and backward: the phases sum past the step.",
    "script": "comm: the wait for the other ranks, in the script's own collectives (between steps: a barrier, or the "
              "all-reduces of an update by hand; in its forward or backward: a metric's all_reduce), in DDP's all-reduces once the backward's work is done, and in FSDP2's "
              "all-gathers and reduce-scatters, in no other phase: the phases and comm sum to the step.",
    None: "comm: of the bundled trainer, the time in the step's collectives, which run within forward and backward (the phases "
          "sum past the step); of a script's zero-code hooks, the wait for the other ranks, in its own collectives (between "
          "steps, or in its forward or backward), in DDP's all-reduces after the backward's work and in FSDP2's all-gathers and reduce-scatters, in no "
          "other phase (the phases and comm sum to the step).",
}
"""What a rank's comm time is, by what wrote the log (:func:`comm_meaning`): two things of one name."""

_TRAINER_CONFIG = {"strategy", "model", "steps", "batch_size"}
"""Keys every config of the bundled trainer's hello holds (its TrainConfig)."""


def comm_meaning(rep: dict) -> str | None:
    """Whose comm time a report's is: ``trainer`` (the bundled trainer's, and a simulated run's
    made like it: the all-reduce time, within backward), ``script`` (a launched script's
    zero-code hooks': the wait for the other ranks, in its own collectives and DDP's), or None where the log
    does not say. The hello's ``source`` where the report has it; else its config: the bundled
    trainer sends its whole TrainConfig, the zero-code hooks none (nor does a script of the
    explicit API that passes no config: its comm, a phase it timed, is most likely that wait too)."""
    source = rep.get("source")
    if source in ("trainer", "simulate"):
        return "trainer"
    if source == "auto":
        return "script"
    if source:  # (the explicit API: comm is whatever the script timed as it)
        return None
    config = rep.get("config") or {}
    if config.get("simulated") or _TRAINER_CONFIG <= set(config):
        return "trainer"
    if not config and rep.get("ranks") and rep.get("steps"):
        # (a run that took no step, its hello unheard, is no script for that: the bundled
        # trainer failing before its first step has no config either)
        return "script"
    return None


PIPELINE_NOTES = (
    "self: a pipeline stage's own work, the step less comm: its stages compute in turn, so no collective ends it.",
    "comm: a stage's waits for its neighbours, in the schedule's sends and receives (and in the script's own collectives "
    "between steps), in no other phase: the phases and comm sum to the step.",
)
"""The rank table's notes of a pipeline's stages (strategy ``pp``, ``pp+...``), as the zero-code
hooks time them."""


def _notes(rep: dict) -> tuple[str, str]:
    if is_pipeline(rep.get("strategy") or "") and comm_meaning(rep) == "script":
        return PIPELINE_NOTES
    return SELF_NOTE, COMM_NOTES[comm_meaning(rep)]


def rank_notes(rep: dict) -> str:
    """The rank table's note: what self and comm are."""
    return " ".join(_notes(rep))


def render_markdown(rep: dict, all_ranks: bool = False) -> str:
    """The report as GitHub-flavoured markdown, in the text's order (see :func:`render_text`)."""
    rep = plain_report(rep)
    out = [f"# pardash report: {rep['run_id'] or os.path.basename(rep['log'])}", ""]
    out.append(md_table(["", ""], [[k, v] for k, v in summary_rows(rep)], right=set()))
    if rep.get("note"):
        out += ["", f"> {rep['note']}"]
    out += ["", "## Stragglers", ""]
    out += [f"- {md_text(line)}" for line in straggler_lines(rep)] or ["None found."]
    if data_bound_line(rep):
        line = md_text(data_bound_line(rep))
        out += ["", line[0].upper() + line[1:]]
    if hold_lines(rep):
        out += ["", *(f"- {md_text(line[0].upper() + line[1:])}" for line in hold_lines(rep))]
    out += ["", "## Stalls and exits", ""]
    lines = stall_lines(rep) + exit_lines(rep)
    # (After a torchrun restart, the exits listed are the last attempt's: the earlier failure
    # follows as what the job was restarted after.)
    none = "None in the last attempt." if rep.get("job_restarts") else "None."
    if rep["stalls"]:
        none = none[:-1] + " but the pauses held up above, no hang."
    out += [f"- {md_text(line)}" for line in lines] or [none]
    if rep.get("failure"):
        out += ["", f"**Root cause:** {md_text(rep['failure']['line'])}"]
        if rep["failure"].get("where"):
            out += ["", f"Raised at{_error_of_other(rep['failure'])} `{rep['failure']['where']}`."]
        if rep["failure"].get("traceback"):
            out += ["", "```", *rep["failure"]["traceback"], "```"]
    if rep.get("recovered"):
        out += [""] + [f"- {md_text(line)}" for line in recovered_lines(rep)]
    if loss_line(rep):
        out += ["", f"**Loss:** {md_text(loss_line(rep).removeprefix('loss: '))}"]
    rows = memory_rows(rep)
    out += ["", "## Memory", ""] + ([md_table(["model state a rank holds", "bytes"], [list(r) for r in rows]), ""] if rows else [])
    verdict = rep["memory"]["verdict"]
    out.append(verdict if verdict.endswith(("?", ".")) else verdict + ".")
    if rep["memory"]["not_sharding"]:
        out.append(f"- {ranks_named(rep['memory']['not_sharding'])}: not sharding")
    out += [f"- {md_text(line)}" for line in growth_lines(rep)]
    head, rows = timeline_table(rep)
    if rows:
        note = TIMELINE_NOTE[0].upper() + TIMELINE_NOTE[1:]
        out += ["", "## Timeline", "", f"{note}.", "",
                md_table(head, [[md_text(c) for c in row] for row in rows], right=set(range(1, len(head))) - {head.index("note") if "note" in head else 0})]
    if rep["ranks"]:
        out += ["", "## Ranks", "", f"Medians over the run; memory after the last step. {rank_notes(rep)}", ""]
        cols, rows, under = rank_table(rep, all_ranks)
        text_cols = {i for i, col in enumerate(cols) if col in ("host", "status", "listed for")}
        out.append(md_table(cols, rows, right=set(range(len(cols))) - text_cols))
        if under:
            out += [""] + [f"- {md_text(line)}" for line in under]
    else:
        why = md_text(no_ranks_text(rep))
        out += ["", "## Ranks", "", why[0].upper() + why[1:]]
    if own := own_phase_lines(rep):
        out += ["", "## The script's own phases", "", "Medians a step over the ranks that timed each.", ""]
        out += [f"- {md_text(line)}" for line in own]
    if custom_lines(rep):
        out += ["", "## Other metrics", "", "Medians over the ranks.", ""] + [f"- {md_text(line)}" for line in custom_lines(rep)]
    if checkpoint_lines(rep):
        out += ["", "## Checkpoints", ""] + [f"- {md_text(line)}" for line in checkpoint_lines(rep)]
    if warning_lines(rep):
        out += ["", "## Warnings", ""] + [f"- {md_text(line)}" for line in warning_lines(rep)]
    return "\n".join(out) + "\n"


__all__ = ["PHASES", "PHASE_LABELS", "md_table", "plain_report", "render_markdown", "render_text"]
