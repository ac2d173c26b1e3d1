"""DESIGN.md's layering, checked on real imports in fresh interpreters (as harlequin does):
telemetry loads neither torch nor textual, trainer never textual or tui, tui never torch."""

import ast
import json
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def _top(name: str) -> str:
    return ".".join(name.split(".")[:2]) if name.startswith("pardash.") else name.split(".")[0]


def _loaded_after_each(modules: list[str]) -> dict[str, set[str]]:
    """Import ``modules`` one after another in one fresh interpreter; for each, what was loaded
    once it was imported (a forbidden package shows first after the module that pulled it in).
    One interpreter for a whole folder: the trainer's modules each load torch, seconds apiece."""
    code = (
        "import sys, importlib, json\n"
        "out = {}\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "    out[m] = sorted(sys.modules)\n"
        "print(json.dumps(out))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return {m: {_top(x) for x in loaded} for m, loaded in json.loads(out).items()}


def _first_to_load(folder: str, forbidden: set[str]) -> dict[str, str]:
    """{forbidden package: the first module of ``folder`` after whose import it was loaded}."""
    found: dict[str, str] = {}
    for module, loaded in _loaded_after_each(_modules(folder)).items():
        for name in forbidden & loaded:
            found.setdefault(name, module)
    return found


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


def test_telemetry_is_headless_and_torch_free():
    assert _first_to_load("telemetry", {"textual", "torch", "pardash.trainer", "pardash.tui"}) == {}


def test_trainer_never_loads_textual_or_tui():
    assert _first_to_load("trainer", {"textual", "pardash.tui"}) == {}


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
        loaded = _loaded_after_each(["pardash.tui.app"])["pardash.tui.app"]
        assert "torch" not in loaded and "pardash.trainer" not in loaded
