"""pardash's headless core, and the explicit API a training script uses:

    import pardash.telemetry as pt

    pt.init(model=model, optimizer=optimizer)
    with pt.step():
        ...
        pt.log(loss=loss, tokens=n)

See :mod:`pardash.telemetry.api`. Importing this package never imports torch.
"""

from .api import event, init, log, phase, step

__all__ = ["event", "init", "log", "phase", "step"]
