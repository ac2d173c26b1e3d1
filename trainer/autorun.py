"""Run a user's script as ``__main__`` on each rank, with pardash's instrumentation installed."""

from __future__ import annotations

import runpy
import sys


def torchrun_command(script: list[str]) -> list[str]:
    """What torchrun runs per rank for ``pardash launch -- SCRIPT ARGS`` (or ``-m MODULE``)."""
    return ["-m", "pardash.trainer.autorun", *script]


def main() -> None:
    args = sys.argv[1:]
    if not args:
        raise SystemExit("usage: python -m pardash.trainer.autorun SCRIPT [ARGS...] | -m MODULE [ARGS...]")
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(args)
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
