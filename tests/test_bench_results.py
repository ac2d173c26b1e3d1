"""bench/RESULTS.md: a bench that ran only part of its section keeps the other part's rows."""

from bench import common, soak
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
