"""DESIGN.md's layering, checked on real imports in fresh interpreters (as harlequin does):
telemetry loads neither torch nor textual, trainer never textual or tui, tui never torch."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _loaded_after(module: str) -> set[str]:
    code = f"import sys, importlib; importlib.import_module({module!r}); print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return {m.split(".")[0] if not m.startswith("pardash.") else ".".join(m.split(".")[:2]) for m in out.split()}


def _modules(folder: str) -> list[str]:
    pkg = {"telemetry": "pardash.telemetry", "trainer": "pardash.trainer", "tui": "pardash.tui"}[folder]
    out = []
    for p in sorted((ROOT / folder).rglob("*.py")):
        rel = p.relative_to(ROOT / folder).with_suffix("")
        parts = [x for x in rel.parts if x != "__init__"]
        if parts and parts[-1] == "__main__":
            continue
        out.append(".".join([pkg, *parts]))
    return out


@pytest.mark.parametrize("module", _modules("telemetry"))
def test_telemetry_is_headless_and_torch_free(module):
    loaded = _loaded_after(module)
    assert "textual" not in loaded
    assert "torch" not in loaded
    assert "pardash.trainer" not in loaded and "pardash.tui" not in loaded


@pytest.mark.parametrize("module", _modules("trainer"))
def test_trainer_never_loads_textual_or_tui(module):
    loaded = _loaded_after(module)
    assert "textual" not in loaded
    assert "pardash.tui" not in loaded


def test_tui_never_imports_torch_or_trainer():
    # Statically over every file, and dynamically for the app module.
    for p in (ROOT / "tui").rglob("*.py"):
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                assert not n.startswith("torch"), f"{p} imports {n}"
                assert not n.startswith("pardash.trainer"), f"{p} imports {n}"
    if (ROOT / "tui" / "app.py").exists():
        loaded = _loaded_after("pardash.tui.app")
        assert "torch" not in loaded and "pardash.trainer" not in loaded
