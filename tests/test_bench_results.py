"""bench/RESULTS.md: a bench that ran only part of its section keeps the other part's rows;
a bench run alone answers --help and writes RESULTS.md only with --write."""

import sys

import pytest

from bench import common, soak
from bench.__main__ import BENCHES
from bench.common import Row


NAME = "Hub soak at 1024 ranks and ingest headroom against raw ZeroMQ (issue 7)"


def _soak_rows():
    return [
        Row("soak 1024 ranks x 10 steps/s, 10 min", "seq gaps (hub's lost count)", "0", "7,376,896 messages taken", "0 dropped", "0", True),
        Row("soak 1024 ranks x 10 steps/s, 10 min", "log written (deleted after)", "4.28 GB", "428 MB/min", "580 B/message", "", None),
    ]


def _headroom_rows(value: str, ok: bool):
    return [Row("ingest headroom, step messages", "highest rate held", value, "440,000/s (raw)", "0.31", ">= 0.5", ok)]


def test_headroom_alone_keeps_the_soak_rows_and_says_from_when(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path / "RESULTS.md")
    common.write_results({"Other bench": [Row("x", "y", "1", "2", "0.5", "")]}, {})
    common.write_results({NAME: _soak_rows() + _headroom_rows("100,000/s", False)}, {NAME: "- soak: old soak note\n- headroom: old"})
    stamp, rows, notes = common.read_section(NAME)
    assert stamp and rows == _soak_rows() + _headroom_rows("100,000/s", False)
    assert notes == ["soak: old soak note", "headroom: old"]

    rows, note = soak._keep_other_part(NAME, _headroom_rows("250,000/s", True), "- headroom: new", soak_ran=False)
    common.write_results({NAME: rows}, {NAME: note})
    _, rows, notes = common.read_section(NAME)
    assert rows == _soak_rows() + _headroom_rows("250,000/s", True)  # the soak's rows first, as a whole run writes them
    assert notes[:2] == ["soak: old soak note", "headroom: new"]
    assert notes[2] == f"The soak rows and notes are kept from the run of {stamp}; the others are this run's."
    assert common.read_section("Other bench")[1] == [Row("x", "y", "1", "2", "0.5", "")]

    # The soak alone, later: the headroom rows of the run before stay, and the old marker goes.
    stamp2 = common.read_section(NAME)[0]
    rows, note = soak._keep_other_part(NAME, _soak_rows()[:1], "- soak: new soak note", soak_ran=True)
    common.write_results({NAME: rows}, {NAME: note})
    _, rows, notes = common.read_section(NAME)
    assert rows == _soak_rows()[:1] + _headroom_rows("250,000/s", True)
    assert notes == ["soak: new soak note", "headroom: new", f"The headroom rows and notes are kept from the run of {stamp2}; the others are this run's."]


def test_a_section_never_written_is_empty_and_a_part_alone_is_written_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path / "RESULTS.md")
    assert common.read_section(NAME) == ("", [], [])
    rows, note = soak._keep_other_part(NAME, _headroom_rows("1/s", False), "- headroom: only", soak_ran=False)
    assert rows == _headroom_rows("1/s", False) and note == "- headroom: only"


def test_a_bench_alone_says_what_it_measures_and_writes_only_when_asked(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(common, "RESULTS", tmp_path / "RESULTS.md")
    runs = []

    def run(ns):
        runs.append(ns)
        return _headroom_rows("120,000/s", False), "- headroom: alone"

    with pytest.raises(SystemExit) as e:
        common.standalone("bench.soak", "What it measures.", run, ["--help"])
    assert e.value.code == 0 and runs == []
    assert "What it measures." in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        common.standalone("bench.soak", "", run, ["--rounds", "3"])
    assert e.value.code == 2 and runs == []
    assert "unrecognized arguments: --rounds 3" in capsys.readouterr().err

    assert common.standalone("bench.soak", "", run, []) == 0
    assert "| 120,000/s |" in capsys.readouterr().out and not common.RESULTS.exists()
    assert common.standalone("bench.soak", "", run, ["--write"]) == 0
    assert common.read_section(NAME)[1] == _headroom_rows("120,000/s", False) and len(runs) == 2


@pytest.mark.parametrize("module", ["bench"] + [f"bench.{name}" for name in BENCHES])
@pytest.mark.filterwarnings("ignore:.*found in sys.modules after import:RuntimeWarning")  # (this test imported it: run again as __main__)
def test_every_bench_module_answers_help_without_running(module, monkeypatch, capsys):
    """`python -m bench.tui --help` once ran the whole 2.5-minute bench. (In this process, as
    `python -m` runs it: a process each cost the suite seconds.)"""
    import runpy

    monkeypatch.setattr(sys, "argv", [module, "--help"])
    with pytest.raises(SystemExit) as e:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    out = capsys.readouterr().out
    assert e.value.code == 0, out
    assert out.startswith(f"usage: python -m {module} ")
    assert "--write" in out or module == "bench"
