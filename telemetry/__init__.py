"""pardash's headless core, and the explicit API a training script uses:

    import pardash.telemetry as pt

    pt.init(model=model, optimizer=optimizer)
    with pt.step():
        ...
        pt.log(loss=loss, tokens=n)

See :mod:`pardash.telemetry.api`. Importing this package never imports torch.

The API's names load :mod:`~pardash.telemetry.api` when first used, not when the package is
imported: the launch, the hub, the supervisor and every command import modules of this package
and need none of the API's (its reporter, memory and environment modules). Loaded with the
package, they were half the launch's start-up (53 against 112 ms of CPU) and 10 ms of the hub's
and the supervisor's; a launch starts all three, the test suite some hundreds.
"""

from typing import Any

__all__ = ["event", "init", "log", "phase", "step"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import api

    value = getattr(api, name)
    globals()[name] = value  # (once: the next use finds it as any module attribute)
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
