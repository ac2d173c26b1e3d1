"""The TUI never loads torch or the trainer (it talks to ranks only through the hub)."""

from __future__ import annotations

import json
import subprocess
import sys

CHECK = """
import json, sys
import pardash.tui.app, pardash.tui.screens.rank_detail, pardash.tui.screens.memory
print(json.dumps(sorted(m for m in sys.modules if m == "torch" or m.startswith(("torch.", "pardash.trainer")))))
"""


def test_tui_does_not_import_torch_or_the_trainer():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
