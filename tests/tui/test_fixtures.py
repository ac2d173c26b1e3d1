"""The recorded runs under tests/tui/data are what make_fixtures.py writes, byte for byte."""

from __future__ import annotations

import make_fixtures


def test_fixtures_are_reproducible(tmp_path):
    for path in make_fixtures.build_all(tmp_path):
        committed = make_fixtures.DATA / path.name
        assert committed.exists(), f"{committed} missing: run python tests/tui/make_fixtures.py"
        assert path.read_bytes() == committed.read_bytes(), f"{path.name} differs: rerun make_fixtures.py"
