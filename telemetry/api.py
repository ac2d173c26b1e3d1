"""The explicit API: mark steps, log metrics and time phases from your own training loop.

    import pardash.telemetry as pt

    pt.init(model=model, optimizer=optimizer, config=vars(args))
    for x, y in loader:
        with pt.step():
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            pt.log(loss=loss, samples=len(x), tokens=x.numel())

Everything here is a cheap no-op unless ``PARDASH_ENDPOINT`` names a hub (``pardash launch``
sets it for the ranks; ``pardash hub`` prints it for jobs started by torchrun or srun).

Under ``pardash launch`` a script is also instrumented without any code change
(:mod:`pardash.trainer.instrument`, which counts a step at every round of optimizer steps).
When both are active, ``pt.step()`` takes precedence: the first ``with pt.step():`` switches
the automatic step boundaries off, and each explicit step still gets the automatic phase
times, loss, samples and memory for whatever ``pt.log`` and ``pt.phase`` did not give.

Values logged outside a ``pt.step()`` block go with the next step published, and a phase timed
outside one is in no step (see :func:`phase`). Under ``pardash launch`` without step blocks, a
step ends at its last optimizer step and the next begins at its first forward: a value logged
in a step, or after it and before the next begins (``pt.log`` after ``optimizer.step()``, an
evaluation's between the steps), is that step's, unless the step has a value of that name
already (one logged at the top of the loop, before the forward, is the next step's), and one
logged after the last step, at the script's end, is the last step's (a phase timed before the
forward is the next step's, whose time it is). Only a script that has called ``log`` has its
steps held for that: where its first call comes after step 2 or later has gone out (logging
every 100 steps), that first value goes with the next step. A tensor passed to
``pt.log`` is read with ``.item()`` when its step is published; on a GPU that step is published
once the next one ends, so reading it waits for nothing.

torch is never imported here at module level: a model, optimizer or tensor you pass in is
inspected through its own methods, and torch is imported inside functions only when you passed
one (so it is loaded already).
"""

from __future__ import annotations

import atexit
import itertools
import math
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from typing import Any, Callable, Protocol

from . import sigterm
from .env import SUPERVISOR_VAR, telemetry_enabled
from .memory import MemoryProbe, accountable
from .modelfacts import model_facts, process_group_facts
from .reporter import Reporter
from .limits import MAX_COUNT, MAX_CUSTOM

STEP_FIELDS = ("loss", "samples", "epoch", "lr")
"""``log`` keys that map to :class:`~pardash.telemetry.schema.Step` fields; the rest go in
``Step.custom``."""
PHASE_FIELDS = ("data", "forward", "backward", "optimizer", "comm")
"""``phase`` names with their own Step field (``data`` -> ``data_s``); others go in
``Step.phases`` by name."""
EVENT_FIELDS = ("step", "duration_s", "code", "traceback")
"""``event`` keywords: the fields of :class:`~pardash.telemetry.schema.Event` a script may give."""
MAX_EVENT_NAME = 64
"""Longest event name the hub takes (it refuses longer ones: hubcore's ``_refuse``)."""

# -- what the automatic instrumentation offers the API --------------------------------------


class AutoSteps(Protocol):
    """The hooks of :mod:`pardash.trainer.instrument`, as the explicit API drives them."""

    def use(self, model: Any, optimizer: Any, hello: dict[str, Any]) -> None:
        """Take the model and optimizer(s) the user named, and extra hello fields."""

    def begin_explicit(self) -> None:
        """A ``pt.step()`` block starts: automatic step boundaries are off from now on."""

    def end_explicit(self, logged: "Logged") -> None:
        """A ``pt.step()`` block ended: publish it, ``logged`` overriding what was measured."""

    def steps_done(self) -> int:
        """The steps ended so far, one ended and not yet published (held for the values logged
        after it, or its GPU timings) included."""


class Logged:
    """What ``log`` and ``phase`` collected for one step (cleared when the step publishes)."""

    __slots__ = ("fields", "custom", "phases")

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}
        """Step fields by name (loss, samples, epoch, lr); values may be tensors."""
        self.custom: dict[str, Any] = {}
        """Custom metrics by name; values may be tensors."""
        self.phases: dict[str, float] = {}
        """Seconds per phase name, in the order their blocks first ended."""

    def __bool__(self) -> bool:
        return bool(self.fields or self.custom or self.phases)

    def merge(self, later: "Logged") -> "Logged":
        """Take ``later``'s values, logged after these, over them (a phase timed in both adds
        up), and return self: the automatic instrumentation takes a step's values in parts, at
        each optimizer step of its round (a GAN's discriminator's, then its generator's)."""
        self.fields.update(later.fields)
        self.custom.update(later.custom)
        phases = self.phases
        for name, seconds in later.phases.items():
            phases[name] = phases.get(name, 0.0) + seconds
        return self

    def deferred(self) -> bool:
        """True when a logged value is a tensor on a device, whose reading would wait for it."""
        return any(_on_device(v) for d in (self.fields, self.custom) for v in d.values())

    def apply(self, out: dict[str, Any]) -> None:
        """Put these values into ``out`` (keyword arguments of ``Reporter.step``), reading
        tensors now; they override what ``out`` had."""
        for name, value in self.fields.items():
            if type(value) is int:  # (samples=len(x), the common case: log() checked it)
                out[name] = value
                continue
            # A loss that is NaN goes on: the reporter says it is not finite (it vanished). A
            # NaN count is no whole number, said below; a NaN lr the hub leaves out anyway.
            number = as_number(value, finite=name == "lr")
            if number is None:
                continue
            if name in ("samples", "epoch"):
                # log() checked what it could read; a device tensor is read only now.
                problem = _count_problem(name, number)
                if problem is not None:
                    _said_late(name, problem, out.get("step"))
                    continue
                number = int(number)
            out[name] = number
        custom = dict(out.get("custom") or {})
        for name, value in self.custom.items():
            # NaN goes on too: the reporter leaves it out of the step, and says so once.
            number = as_number(value, finite=False)
            if number is not None:
                custom[name] = number
        own: dict[str, float] = {}
        for name, seconds in self.phases.items():
            if name in PHASE_FIELDS:
                out[f"{name}_s"] = seconds
            else:
                own[name] = seconds
        if custom:
            out["custom"] = custom
        if own:
            if len(own) > MAX_CUSTOM:  # the hub refuses the step, loss and all, past it
                own = _phases_cut(own, out.get("step"))
            out["phases"] = own


def _phases_cut(phases: dict[str, float], step: Any) -> dict[str, float]:
    """The first MAX_CUSTOM of a step's own phases, said once as a warning (as the reporter
    says of custom metrics): the hub takes no more in a step."""
    if not _api.phases_cut:
        _api.phases_cut = True
        try:
            reporter().event("warning", f"{len(phases)} phases of the script's own in a step; the first {MAX_CUSTOM} are kept",
                             step=step)  # fmt: skip
        except Exception:
            pass
    return dict(itertools.islice(phases.items(), MAX_CUSTOM))


def _on_device(value: Any) -> bool:
    device = getattr(value, "device", None)
    return device is not None and getattr(device, "type", "cpu") != "cpu"


def as_number(value: Any, *, finite: bool = True) -> float | None:
    """A logged value as a float (a tensor or numpy scalar via ``.item()``); None when it is
    not one (read when the step is published, it must not raise into the training loop then)
    or, with ``finite``, not finite (the hub refuses NaN and infinity in a step's figures)."""
    try:
        number = float(value if isinstance(value, (int, float)) else value.item())
    except (TypeError, ValueError, OverflowError, RuntimeError):
        return None
    return number if not finite or math.isfinite(number) else None


def _check_number(name: str, value: Any) -> None:
    """Refuse at ``log`` what could never be a number, hub or not (a script that runs alone
    must not fail once it is watched)."""
    if isinstance(value, bool) or not (isinstance(value, (int, float)) or callable(getattr(value, "item", None))):
        raise TypeError(f"pardash.telemetry.log({name}=...): expected a number or a one-element tensor, got {type(value).__name__}")
    numel = getattr(value, "numel", None)
    if callable(numel) and numel() != 1:
        raise TypeError(f"pardash.telemetry.log({name}=...): expected a one-element tensor, got {numel()} elements")
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise TypeError(f"pardash.telemetry.log({name}=...): a whole number of {len(str(abs(value)))} digits is too large")
    if name in ("samples", "epoch") and not _on_device(value):  # (a device tensor is read when published)
        number = value if isinstance(value, (int, float)) else as_number(value, finite=False)
        problem = None if number is None else _count_problem(name, number)
        if problem is not None:
            raise ValueError(f"pardash.telemetry.log({name}=...): {problem}")


def _count_problem(name: str, number: float) -> str | None:
    """Why ``samples`` or ``epoch`` cannot be ``number`` (None: it can). They are whole numbers
    on the wire, and the hub refuses a step whose running sum of samples is negative or past
    MAX_COUNT; it takes any whole epoch, negative ones too, so this does."""
    if isinstance(number, float) and not number.is_integer():
        whole = "a non-negative whole number" if name == "samples" else "a whole number"
        return f"expected {whole}, got {number}"
    if name == "samples" and not 0 <= number <= MAX_COUNT:
        return f"expected a non-negative whole number{'' if number < 0 else ' up to 2**48'}, got {number}"
    if name == "epoch" and not -(2**63) <= number < 2**63:
        return f"expected a whole number within 64 bits, got {number}"
    return None


def _said_late(name: str, problem: str, step: Any) -> None:
    """A logged tensor that log() could not check (on the device) and that turned out wrong:
    left out of the step, and said once per name as a warning. Never raises: a step is
    published from the automatic instrumentation's hooks too."""
    if name in _api.late_refused:
        return
    _api.late_refused.add(name)
    try:
        reporter().event("warning", f"pardash.telemetry.log({name}=...): {problem} (a device tensor, read as its step "
                         "was published): left out of the steps", step=step)  # fmt: skip
    except Exception:
        pass


def _check_event(name: Any, message: Any, fields: dict[str, Any]) -> None:
    """Refuse at ``event`` what the hub would refuse, hub or not (a script that runs alone
    must not fail once it is watched); tensors and numpy scalars in ``fields`` are read, as
    the wire would (``schema._enc_hook``)."""
    if not isinstance(name, str):
        raise TypeError(f"pardash.telemetry.event(name, ...): expected a string for the event's name, got {type(name).__name__}")
    if len(name) > MAX_EVENT_NAME:
        raise ValueError(f"pardash.telemetry.event(name, ...): a name of {len(name)} characters; at most {MAX_EVENT_NAME}")
    if not isinstance(message, str):
        raise TypeError(f"pardash.telemetry.event({name!r}, message): expected a string for the message, got {type(message).__name__}")
    for key, value in fields.items():
        call = f"pardash.telemetry.event({name!r}, {key}=...)"
        if key not in EVENT_FIELDS:
            raise TypeError(f"{call}: no such field; it takes step=, duration_s=, code= and traceback= (say the rest in the message)")
        if value is None:
            continue
        if key == "traceback":
            if not isinstance(value, str):
                raise TypeError(f"{call}: expected a string, got {type(value).__name__}")
            continue
        if not isinstance(value, (int, float)) and callable(getattr(value, "item", None)):
            try:
                fields[key] = value = value.item()
            except Exception:
                pass
        whole = key != "duration_s"
        kinds = (int,) if whole else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise TypeError(f"{call}: expected {'a whole number' if whole else 'a number of seconds'}, got {type(value).__name__}")
        if isinstance(value, int) and not -(2**63) <= value < 2**64:
            raise TypeError(f"{call}: a whole number of {len(str(abs(value)))} digits is too large")


# -- the process's one reporter and state ----------------------------------------------------

_MISSING = object()


class _Api:
    """Process-wide state of the explicit API (one per rank process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reporter: Reporter | None = None
        self.auto: AutoSteps | None = None
        self.initialised = False
        self.model: Any = None
        self.optimizers: list[Any] = []
        self.logged = Logged()
        self.step = 0
        self.in_step = False
        self.step_made = False
        """A ``pt.step()`` made and not yet entered (see :func:`step`)."""
        self.explicit = False
        """Whether a ``pt.step()`` block was entered (the steps are the script's from then on)."""
        self.steps_own_phases = True
        """Whether a phase timed outside a ``pt.step()`` block is in no step: the script marks
        its steps (always, without the automatic instrumentation; with it, from its first
        ``with pt.step():``). Until then the automatic steps take every phase."""
        self.said: set[str] = set()
        """Misuses said once each (see :func:`_say_once`)."""
        self.log_used = False
        """Whether the script has called ``pt.log``: only then does the automatic instrumentation
        hold a step on CPU for the values logged after it (see Rounds._next_step_begins)."""
        self.auto_events: list[tuple[Callable[..., Any], str, dict[str, Any]]] = []
        """Events of the automatic instrumentation held for the script's own (see :func:`auto_event`)."""
        self.hello: dict[str, Any] = {}
        """Hello fields given to init (sent again when a later init adds some)."""
        self.probe = MemoryProbe()
        self.holder_cache: dict[str, Any] = {}
        self.late: tuple[dict[str, Any], Logged] | None = None
        """A step held back because a logged value is still on the device."""
        self.user_events: set[str] = set()
        self.late_refused: set[str] = set()
        """Logged fields whose device tensor was wrong when read (said once each)."""
        self.phases_cut = False
        """Whether a step's own phases past MAX_CUSTOM were said cut (once)."""
        self.failed: int | None = None
        """The exit code an uncaught exception will end the process with (1)."""
        self.interrupted = False
        """The script ended in a KeyboardInterrupt (Ctrl-C): a stop (see _say_exit)."""
        self.exit_said = False
        self.epoch = 0
        """Epochs ended (``pt.event("epoch_end")``): the epoch of the next steps, unless logged."""
        self.broke_step = False
        """The last step block was left by an exception (a failure then is in the step after)."""
        self.hook: tuple[Any, Any] | None = None
        """(ours, the one before) while ours is sys.excepthook."""
        self.exit_wrap: tuple[Any, Any] | None = None
        """(ours, the one before) while ours is sys.exit."""
        self.exit_status: Any = _MISSING
        """What the script last gave sys.exit (argparse's errors go through it too)."""


_api = _Api()


def _uncaught(kind: type[BaseException], exc: BaseException, tb: Any, _previous: Any = None) -> None:
    """sys.excepthook while the explicit API publishes: the error goes to the hub (the exit
    event follows at exit), then to whatever hook was there before (torch's [rankN]: tags)."""
    api = _api
    try:
        if api.auto is None and api.reporter is not None and api.reporter.enabled and api.failed is None:
            if issubclass(kind, KeyboardInterrupt):
                # Ctrl-C: a stop, said at exit as one (_say_stopped), not an error "interrupted"
                api.interrupted = True
            else:
                api.failed = 1
                message = traceback.format_exception_only(kind, exc)[-1].strip()
                text = "".join(traceback.format_exception(kind, exc, tb))
                api.reporter.event("error", message=message, traceback=text, step=api.reporter.last_step)
    except Exception:
        pass  # the report of a failure must never hide the failure
    (_previous or sys.__excepthook__)(kind, exc, tb)


def exit_code(status: Any) -> int:
    """The exit code of ``sys.exit(status)`` (``SystemExit.code``): 0 for None, the number,
    or 1 for a message (Python prints it). The explicit API and the autorun wrapper both say it."""
    if status is None:
        return 0
    if isinstance(status, int):
        return status
    return 1


def _say_exit() -> None:
    """At exit (scripts under plain torchrun, no launcher to note it): the rank's exit event,
    so the run reads finished (or failed) rather than silent forever. The code is what the
    process exits with as far as Python lets it be seen: an uncaught exception (through our
    hook, or ``sys.last_value`` when another library replaced the hook), else what the script
    gave ``sys.exit``, else 0. (A bare ``raise SystemExit(n)`` at the top level is not seen.)"""
    api = _api
    rep = api.reporter
    if api.exit_said or api.auto is not None or rep is None or not rep.enabled:
        return
    api.exit_said = True
    last = getattr(sys, "last_value", None)  # set by Python when it printed an uncaught exception
    if isinstance(last, KeyboardInterrupt):
        api.interrupted = True  # (another library's hook took ours' place: it never saw it)
    stop = (sigterm.received() or (signal.SIGINT if api.interrupted else 0)) if api.failed is None else 0
    if stop:
        # An exit a stop led to, through the script's own handler (Lightning's SIGTERMException,
        # a preemption handler's sys.exit(0)) or Ctrl-C's KeyboardInterrupt: that stop, as
        # autorun says it (trainer.autorun's _stopped), not "finished", exit 0, or an error
        # "interrupted". Under pardash launch, its note says who stopped it.
        _say_stopped(rep, stop)
        return
    code = api.failed
    if code is None and last is not None and not isinstance(last, SystemExit):
        _uncaught(type(last), last, last.__traceback__, lambda *a: None)  # the hook we set never ran
        code = api.failed
    if code is None:
        code = exit_code(api.exit_status) if api.exit_status is not _MISSING else 0
    step = rep.last_step + 1 if code and api.broke_step else rep.last_step
    rep.event("exit", code=code, step=step if step or not code else None)


def _say_stopped(rep: Reporter, signum: int) -> None:
    """The rank's exit by the stop ``signum``, as autorun's says it (trainer.autorun's
    _stopped): none under pardash launch, whose note says who stopped it; else ``-signum``,
    "stopped by SIGTERM", where nothing else would say it."""
    if not os.environ.get(SUPERVISOR_VAR):
        rep.event("exit", code=-signum, step=rep.last_step or None, message=f"stopped by {signal.Signals(signum).name}")


def _exit_seen(status: Any = None, _previous: Any = None) -> None:
    """sys.exit while the explicit API publishes: the status is kept for the exit event."""
    _api.exit_status = status
    (_previous or _ORIGINAL_EXIT)(status)


_ORIGINAL_EXIT = sys.exit


def reporter(**kwargs: Any) -> Reporter:
    """This process's one :class:`Reporter` (every message of a rank shares its ``seq``
    counter): made on first use from the environment, with ``kwargs`` (e.g. ``gpu_index``)."""
    if _api.reporter is None:
        with _api.lock:
            if _api.reporter is None:
                _api.reporter = Reporter.from_env(**kwargs)
    return _api.reporter


def attach_auto(auto: AutoSteps | None) -> None:
    """Called by the automatic instrumentation when it is installed (None when removed)."""
    _api.auto = auto
    _api.steps_own_phases = auto is None or _api.explicit


def enabled() -> bool:
    """True when telemetry goes somewhere (PARDASH_ENDPOINT set, PARDASH_TELEMETRY not 0)."""
    return telemetry_enabled()


def _gpu_index(model: Any) -> int | None:
    """The GPU ``model`` lives on, for the reporter's system samples (None: CPU or no model)."""
    if model is None:
        return None
    p = next(model.parameters(), None)
    if p is None or p.device.type != "cuda":
        return None
    return p.device.index if p.device.index is not None else sys.modules["torch"].cuda.current_device()


def _as_list(optimizer: Any) -> list[Any]:
    if optimizer is None:
        return []
    if isinstance(optimizer, (list, tuple)):
        return list(optimizer)
    return [optimizer]


def init(model: Any = None, optimizer: Any = None, **hello_fields: Any) -> None:
    """Introduce this rank to the hub: strategy, parameter count and device from ``model``
    (the module you call: DDP, FSDP2 or plain), memory from ``model`` and ``optimizer`` (one
    or a list) after each step, and any hello field you pass (``config={...}``, ``note=``).

    Idempotent: a later call adds what an earlier one did not give (a model, an optimizer,
    hello fields) and says so to the hub; one that adds nothing does nothing. Finds the hub
    through PARDASH_ENDPOINT and PARDASH_RUN_ID; without them it does nothing.
    """
    api = _api
    news = not api.initialised
    if model is not None and api.model is None:
        api.model = model
        news = True
    for opt in _as_list(optimizer):
        if all(opt is not o for o in api.optimizers):
            api.optimizers.append(opt)
    if hello_fields and any(api.hello.get(k, _MISSING) != v for k, v in hello_fields.items()):
        api.hello.update(hello_fields)
        news = True
    if api.auto is not None:
        api.initialised = True
        api.auto.use(model, optimizer, hello_fields)
        return
    if not news:
        return
    first = not api.initialised
    api.initialised = True
    rep = reporter(gpu_index=_gpu_index(api.model))
    if not rep.enabled:
        return
    fields: dict[str, Any] = {"source": "api", **process_group_facts()}
    if api.model is not None:
        fields.update(model_facts(api.model))
    elif "torch" in sys.modules:
        fields["torch_version"] = str(sys.modules["torch"].__version__)
    fields.update(api.hello)
    rep.hello(**fields)
    if first:
        atexit.register(_at_exit)  # runs before the reporter's own close (atexit: last in, first out)
        sigterm.at_stop(_stopped)
        sigterm.count_steps(lambda: rep.last_step)  # (a stop the script went on from is not its exit's)
        previous = sys.excepthook
        ours = lambda kind, exc, tb: _uncaught(kind, exc, tb, previous)  # noqa: E731
        api.hook = (ours, previous)
        sys.excepthook = ours
        previous_exit = sys.exit
        ours_exit = lambda status=None: _exit_seen(status, previous_exit)  # noqa: E731
        api.exit_wrap = (ours_exit, previous_exit)
        sys.exit = ours_exit


class _StepBlock:
    """``with pt.step():`` — one step, from entering the block to leaving it."""

    __slots__ = ("t0",)

    def __enter__(self) -> "_StepBlock":
        api = _api
        api.step_made = False
        if api.in_step:
            raise RuntimeError("pardash.telemetry.step() blocks cannot be nested: mark each step once")
        if not api.initialised:
            init()
        api.in_step = True
        if not api.explicit:
            api.explicit = api.steps_own_phases = True
        self.t0 = time.perf_counter()
        if api.auto is not None:
            if api.auto_events:  # (an evaluation's, between the steps: the script had its say)
                _send_auto_events()
            api.auto.begin_explicit()
        else:
            reporter().set_phase("step")
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        api = _api
        api.in_step = False
        # (A StopIteration is a loader running out: the step never began, the epoch ended.)
        api.broke_step = exc_type is not None and not issubclass(exc_type, StopIteration)
        if exc_type is not None:  # the step did not complete: nothing to publish
            api.logged = Logged()
            if api.auto is None:  # (the time after it, a checkpoint saved, say, is in no step)
                reporter().set_phase("")
            return
        logged, api.logged = api.logged, Logged()
        if api.auto is not None:
            if api.auto_events:
                _send_auto_events()
            api.auto.end_explicit(logged)
            return
        step_s = time.perf_counter() - self.t0
        api.step += 1
        rep = reporter()
        rep.set_phase("")
        if not rep.enabled:
            return
        out: dict[str, Any] = {"step": api.step, "step_s": step_s, "epoch": api.epoch}
        if api.model is not None and api.optimizers:
            holder = accountable([api.model], api.optimizers, api.holder_cache)
            out["mem"] = api.probe.measure(holder, api.optimizers, ddp_module=_ddp_of(api.model), step_s=step_s)
        if api.late is not None:  # the previous step, held for a device tensor: ready by now
            _publish(*api.late)
            api.late = None
        if logged.deferred():
            api.late = (out, logged)
        else:
            _publish(out, logged)


def _ddp_of(model: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return model
    return None


def _publish(out: dict[str, Any], logged: Logged) -> None:
    logged.apply(out)
    reporter().step(**out)


def step() -> _StepBlock:
    """``with pt.step(): ...`` marks one training step: it is timed, and published with what
    ``log`` and ``phase`` gave inside it (and, under ``pardash launch``, the measured phases,
    loss and memory). Called without ``with`` it marks nothing, and says so once (as a Python
    warning and to the hub) at the next call or at exit."""
    api = _api
    if api.step_made:  # the last one was never entered: pt.step() called like scheduler.step()
        _step_not_entered()
    api.step_made = True
    return _StepBlock()


def _step_not_entered(at_exit: bool = False) -> None:
    """Say once that ``pt.step()`` was called without ``with`` (it was a silent no-op: the
    script's logged values went out with no step, or not at all)."""
    _say_once("step", "pardash.telemetry.step() called without `with` marks no step: write `with pt.step():` "
              "around the step's work (nothing is published for a step otherwise)", stacklevel=4, at_exit=at_exit)  # fmt: skip


def _say_once(what: str, message: str, stacklevel: int = 3, at_exit: bool = False) -> None:
    """A misuse of the API that raises nothing (the script goes on as without pardash), said
    once: as a Python warning on the rank's stderr (at the script's line that made it; at exit,
    where no line of the script's is the place, a plain line) and as a warning event to the hub.
    Never raised, whatever the warnings filter: under ``-W error`` (or PYTHONWARNINGS=error) it
    broke the script's loop, and at exit it failed a job that had trained to its end, its exit
    record never sent."""
    api = _api
    if what in api.said:
        return
    api.said.add(what)
    try:
        if at_exit:
            raise Warning  # (said plainly below)
        warnings.warn(message, stacklevel=stacklevel)
    except Exception:
        try:
            print(f"pardash: warning: {message}", file=sys.stderr, flush=True)
        except Exception:
            pass
    try:
        rep = reporter()
        rep.event("warning", message, step=rep.last_step)
    except Exception:
        pass


def log(**metrics: Any) -> None:
    """Values for the current step (or, outside a step, the next one published).

    ``loss``, ``samples``, ``epoch`` and ``lr`` fill the Step fields of those names; any other
    name is a custom metric (``tokens=...``, ``grad_norm=...``) in ``Step.custom``. Values are
    numbers or one-element tensors (read when the step is published, not now); ``samples`` is a
    non-negative whole number, ``epoch`` a whole one. A value that cannot be one raises here,
    hub or not (a tensor on a device is read only as its step is published: a wrong one is then
    left out with a warning). A loss or custom metric that is NaN or infinite is left out of its
    steps, with a warning when it turns so and when it is finite again (a NaN ``lr`` is left out
    without one; ``samples`` and ``epoch`` must be whole numbers).
    """
    logged = _api.logged
    _api.log_used = True
    for name, value in metrics.items():
        _check_number(name, value)
        if name in STEP_FIELDS:
            logged.fields[name] = value
        else:
            logged.custom[name] = value


class _PhaseBlock:
    """``with pt.phase(name):`` — time spent in ``name`` during the current step (outside the
    script's step blocks: in no step, said once)."""

    __slots__ = ("name", "t0", "outer")

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> "_PhaseBlock":
        # The phase it interrupts is the reporter's: "step" in a step block, the automatic
        # instrumentation's ("data", "backward") under it, or an outer phase block's.
        rep = _api.reporter or reporter()  # (made by now, the common case: no call)
        self.outer = rep._phase
        rep.set_phase(self.name)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        api = _api
        seconds = time.perf_counter() - self.t0
        if api.in_step or not api.steps_own_phases:
            phases = api.logged.phases
            phases[self.name] = phases.get(self.name, 0.0) + seconds
        else:
            _phase_outside(self.name)
        rep = api.reporter or reporter()
        if rep._phase == self.name:  # (else the instrumentation marked a phase inside it: that one goes on)
            rep.set_phase(self.outer)


def _phase_outside(name: str) -> None:
    """A phase timed between the script's step blocks: in none of them (it would add to the
    next step's phases past that step's own time), said once."""
    _say_once("phase", f"pardash.telemetry.phase({name!r}) outside a `with pt.step():` block is in no step's phases: "
              "time it inside the step, or say it with pt.event(name, duration_s=...)", stacklevel=4)  # fmt: skip


def phase(name: str) -> _PhaseBlock:
    """``with pt.phase("data"): ...`` times a phase of the current step. ``data``,
    ``forward``, ``backward``, ``optimizer`` and ``comm`` fill the Step fields of those names
    (taking precedence over measured ones); any other name (``augment``, ``loss_scale``) is a
    phase of the script's own, in ``Step.phases``, which the rank detail shows beside forward
    and backward against the other ranks (a block entered twice in a step adds up). The
    heartbeat names the phase while the block runs, so a rank stuck in it is reported stuck
    there, and the phase it interrupted after it.

    Once the script marks its steps (``with pt.step():``; always, without ``pardash launch``),
    a phase timed between them (an evaluation loop) is in no step: it would add to the next
    step's phases past that step's own time. That is said once, as a Python warning and to
    the hub. Without step blocks, under ``pardash launch``, it is the phase of the step the
    instrumentation is making."""
    if not isinstance(name, str) or not name:
        raise ValueError("pardash.telemetry.phase(name): name must be a non-empty string")
    return _PhaseBlock(name)


def event(name: str, message: str = "", **fields: Any) -> None:
    """Publish an event: ``checkpoint``, ``epoch_end``, ``warning``, ``info`` or your own name
    (a string of at most 64 characters), with a one-line message (a string), and ``step=``,
    ``duration_s=``, ``code=`` or ``traceback=`` where they apply. Anything else raises, hub or
    not: put other details in the message."""
    _check_event(name, message, fields)
    _api.user_events.add(name)
    if _api.auto_events:  # the script's own says what the instrumentation held (it would say it twice)
        _api.auto_events = [held for held in _api.auto_events if held[1] != name]
    if name == "epoch_end":
        _api.epoch += 1  # the steps after it are the next epoch's (a logged epoch wins)
    if "step" not in fields:
        # (the steps ended, not the last published: under the automatic steps a step goes out as
        # the next begins, and an event after its optimizer step, a checkpoint's, read the step before)
        auto = _api.auto
        fields["step"] = auto.steps_done() if auto is not None and not _api.explicit else reporter().last_step
    reporter().event(name, message, **fields)


def user_sent(name: str) -> bool:
    """True once the script published an event of this name itself (the automatic
    instrumentation then leaves that kind to it)."""
    return name in _api.user_events


def auto_event(send: Callable[..., Any], name: str, **fields: Any) -> None:
    """An event the automatic instrumentation made of what it saw end (an evaluation, at the
    script's ``model.train()``), sent by ``send`` (its reporter's ``event``) as the next step
    is published or begins, or at exit, unless the script sends its own of that name first:
    a script that times its evaluation says so just after it, once the instrumentation has
    seen it end, and the two were counted as two. After the script's first, none is made;
    a script that has not used the API yet (no ``pt.init``, step block or event) has it sent now."""
    api = _api
    if name in api.user_events:
        return
    if not api.initialised and not api.user_events:
        send(name, **fields)
        return
    api.auto_events.append((send, name, fields))


def _send_auto_events() -> None:
    held, _api.auto_events = _api.auto_events, []
    for send, name, fields in held:
        try:
            send(name, **fields)
        except Exception:
            pass  # (called from the instrumentation's hooks: never raises)


def take_logged() -> Logged:
    """What ``log``/``phase`` collected since the last step (the automatic instrumentation
    publishes it with its next step; the events it held go first)."""
    if _api.auto_events:
        _send_auto_events()
    logged, _api.logged = _api.logged, Logged()
    return logged


def flush() -> None:
    """Publish a step still held back for a device tensor (and events the automatic
    instrumentation held); say a ``pt.step()`` never entered."""
    api = _api
    if api.step_made:
        api.step_made = False
        _step_not_entered(at_exit=True)
    if api.auto_events:
        _send_auto_events()
    if api.late is not None:
        late, api.late = api.late, None
        _publish(*late)


def _at_exit() -> None:
    """At the process's exit: what :func:`close` does, the rank's exit event said first."""
    flush()
    _say_exit()
    close()


def close() -> None:
    """Publish a step still held back and flush what is queued (also done at exit, with the
    rank's exit event; a script that closes early is not said to have ended)."""
    flush()
    if _api.reporter is not None:
        _api.reporter.close()


def _stopped() -> None:
    """At SIGTERM (torchrun stopping the job; see telemetry.sigterm): what is held back, then
    no exit under pardash launch (the launcher says the rank's, and who stopped it) unless the
    rank had failed already, its error said: every rank failing of the same error, those a
    moment behind the first were stopped as they printed it, and read "stopped by torchrun"."""
    flush()
    rep = _api.reporter
    try:
        if _api.failed is not None:
            _say_exit()
        elif rep is not None and not _api.exit_said and _api.auto is None:
            # (a scheduler's preemption of a plain torchrun: not silent for ever)
            _api.exit_said = True
            _say_stopped(rep, signal.SIGTERM)
    except Exception:
        pass
    if rep is not None:
        rep.close()


def _reset_for_tests() -> None:
    """Forget this process's state (tests only)."""
    global _api
    if _api.reporter is not None:
        _api.reporter.close(linger_ms=0)
    if _api.hook is not None and sys.excepthook is _api.hook[0]:
        sys.excepthook = _api.hook[1]
    if _api.exit_wrap is not None and sys.exit is _api.exit_wrap[0]:
        sys.exit = _api.exit_wrap[1]
    _api = _Api()


__all__ = [
    "AutoSteps",
    "Logged",
    "as_number",
    "attach_auto",
    "auto_event",
    "close",
    "enabled",
    "event",
    "exit_code",
    "flush",
    "init",
    "log",
    "phase",
    "reporter",
    "step",
    "take_logged",
    "user_sent",
]
