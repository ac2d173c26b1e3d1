"""A call once a module is imported: how pardash's hooks reach what a script imports after them
(``torch.distributed.checkpoint``, pipelining, a library's own save) and what autorun sets up
before the script imports torch at all. Imports no torch: autorun with telemetry off (no
instrument) uses it before the script's own imports, and a script that never imports torch
(a rank that only prints its arguments) pays nothing for it."""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any, Callable


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` once the module ``name`` is imported, before the import returns
    (so ``from torch.distributed.checkpoint import save`` gets what ``then`` set). Finds the
    module with the other finders, and is gone from ``sys.meta_path`` from then on."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        self.remove()
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec
        then = self.then

        def exec_then(module: Any) -> None:
            exec_module(module)
            then(module)

        loader.exec_module = exec_then  # (this spec's own loader object)
        return spec

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def once_imported(name: str, then: Callable[[Any], None]) -> _AfterImport | None:
    """``then(module)`` now if the module ``name`` is imported; else once it is, by the finder
    returned (removed at uninstall)."""
    module = sys.modules.get(name)
    if module is not None:
        then(module)
        return None
    finder = _AfterImport(name, then)
    sys.meta_path.insert(0, finder)
    return finder
