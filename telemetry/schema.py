"""The one wire and disk format of pardash.

Every message a rank sends, and every record the hub makes, is a msgspec Struct in one tagged
union keyed by ``kind``. The same structs decode MessagePack from the socket and JSON Lines from
the log; decoding validates, so a malformed frame becomes a :class:`msgspec.ValidationError`
(or :class:`msgspec.DecodeError`) and never an object of the wrong shape.

Units: seconds for every ``*_s`` field, bytes for every ``*_bytes`` field, wall clock ``t`` in
seconds since the epoch, ``mono`` the rank's ``time.monotonic()``.
"""

from __future__ import annotations

import re
from typing import Any, Union

import msgspec

SCHEMA_VERSION = 1
"""Bumped when a field changes meaning. Readers accept this version and older ones."""

LOADER_PHASE = "loader"
"""The phase a rank's heartbeat says while its DataLoader is asked for the step's batch (the
zero-code hooks', pardash.trainer.epochs: its iterator's ``__next__``, ``iter(loader)``): the
step's data phase, inside the loader. Its heartbeat's "data" is the rest of that phase, the
script's own work between steps; the hub tells the two apart when a rank stalls there and names
the stall's phase ``data`` either way (analysis.stall_phase)."""

JOIN_PHASE = "join"
"""The phase a rank's heartbeat says while it has run out of inputs under DDP's ``Join``
(``torch.distributed.algorithms.join``) and shadows the other ranks' collectives until they all
have (the zero-code hooks', pardash.trainer.joins; a ``join`` event says it as it begins). It
takes no step there by design: the hub reads it as waiting, neither stalled nor a hang's cause
(analysis.joined)."""

MAX_MESSAGE_BYTES = 1 << 20
"""Largest frame a receiving socket accepts (ZMQ_MAXMSGSIZE); a hello with a big config fits."""


class Mem(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=False, gc=False):
    """Memory one rank holds after its optimizer step, de-duplicated by storage.

    ``*_full_bytes`` is what the same tensors would take unsharded (what DDP holds).
    """

    params_bytes: int = 0
    """Bytes of parameters held locally (FSDP2: the local shards' storage)."""
    grads_bytes: int = 0
    """Bytes of gradients held locally."""
    optim_bytes: int = 0
    """Bytes of optimizer state held locally (Adam: exp_avg, exp_avg_sq, step)."""
    buckets_bytes: int = 0
    """DDP gradient-bucket bytes (0 for other strategies)."""
    params_full_bytes: int = 0
    """Bytes of the unsharded parameters."""
    grads_full_bytes: int = 0
    """Bytes of the unsharded gradients."""
    optim_full_bytes: int = 0
    """Bytes of the unsharded optimizer state."""
    shards: int = 0
    """Ranks this rank's sharded parameters are split over (FSDP's shard group: under HSDP its
    mesh's shard dimension, not the world); 0: none sharded, or not said (an older rank)."""
    cuda_allocated_bytes: int | None = None
    """torch.cuda.memory_allocated at the end of the step (GPU only)."""
    cuda_reserved_bytes: int | None = None
    """Caching allocator's reserved bytes (GPU only)."""
    cuda_peak_bytes: int | None = None
    """Peak allocated bytes since the last step (GPU only)."""
    nvml_used_bytes: int | None = None
    """NVML's used memory on this rank's device (GPU only)."""
    rss_bytes: int | None = None
    """Resident set size of the rank's process."""


class Base(msgspec.Struct, tag_field="kind", omit_defaults=True, kw_only=True, gc=False):
    """Fields every record carries."""

    v: int = SCHEMA_VERSION
    """Schema version of the sender."""
    run: str = ""
    """Run id, from PARDASH_RUN_ID."""
    rank: int = -1
    """Global rank (-1: the hub itself)."""
    seq: int = 0
    """Per-rank message counter from 0; gaps are lost messages."""
    t: float = 0.0
    """Wall clock at the sender, seconds since the epoch."""
    hseq: int = 0
    """Stamped by the hub on ingest: its own total order over all ranks."""


class Hello(Base, tag="hello"):
    """First message of a rank: who it is and what it trains."""

    local_rank: int = 0
    world_size: int = 1
    node: int = 0
    """Node rank (torchrun's GROUP_RANK / SLURM_NODEID)."""
    host: str = ""
    pid: int = 0
    restart: int = 0
    """torchrun's restart count (TORCHELASTIC_RESTART_COUNT)."""
    max_restarts: int = 0
    """torchrun's --max-restarts (TORCHELASTIC_MAX_RESTARTS): while ``restart`` is below it, a
    failure is an attempt's, which torchrun starts again."""
    strategy: str = ""
    backend: str = ""
    device: str = "cpu"
    device_name: str = ""
    device_mem_bytes: int = 0
    torch_version: str = ""
    pardash_version: str = ""
    """The pardash that sent this hello (``pardash.__version__``); "": not said (a pardash
    older than the field, whose figures may mean otherwise: ``report --compare`` says so)."""
    params_count: int = 0
    params_bytes: int = 0
    """Bytes of the full (unsharded) model parameters."""
    source: str = "trainer"
    """``trainer`` (bundled), ``auto`` (zero-code hooks) or ``api`` (explicit API)."""
    note: str = ""
    """A line the TUI header and the log show, e.g. why DP runs one replica."""
    pp_stage: int | None = None
    """Pipeline parallelism (strategy ``pp``, or ``pp+ddp``... where a stage is data parallel):
    the pipeline stage this rank holds, from 0 (under an interleaved schedule, the first of its
    stages); None: no pipeline seen (and in logs older than the field)."""
    pp_stages: int = 0
    """The stages of that pipeline (0: no pipeline seen)."""
    config: dict[str, Any] = {}
    """The run's settings (rank 0's are the run's). ``steps`` or ``total_steps``: the step number
    the run ends at (``summary.total_steps``), from which every viewer says "step N/TOTAL" and
    the time left. A rank may send its hello again, the same process, when it learns more (its
    model at its first forward; the steps a script's framework plans, known only once training
    begins: ``total_steps``, see trainer/frameworks.py): the hub, the log and every viewer take a
    rank's latest hello as its own, a viewer attached later too (the snapshot holds it)."""


class Step(Base, tag="step"):
    """One optimizer step of one rank."""

    step: int = 0
    epoch: int = 0
    loss: float | None = None
    samples: int = 0
    """Samples this rank processed in this step."""
    step_s: float = 0.0
    """Wall time from the end of the previous step to the end of this one."""
    data_s: float | None = None
    loader_s: float | None = None
    """The part of ``data_s`` spent inside a torch DataLoader (its iterator's ``__next__``, and
    ``iter(loader)``, which starts its workers), as a script's zero-code hooks time it; the rest
    of ``data_s`` is the script's own work between steps (logging, a checkpoint or evaluation of
    its own, a sleep). None: no DataLoader gave the step its batch (batches the script makes
    itself, the bundled trainer, a log older than the field)."""
    forward_s: float | None = None
    backward_s: float | None = None
    optimizer_s: float | None = None
    comm_s: float | None = None
    """Time in communication, where known. The bundled trainer's: its step's collectives, within
    forward and backward (the phases sum past the step); a script's zero-code hooks': the wait in
    its own collectives between steps and DDP's all-reduces after the backward's work, in no
    other phase (report_render.COMM_NOTES)."""
    self_s: float | None = None
    """The rank's own work in the step, no waiting: the straggler signal. Work before the step's
    first collective; under FSDP: its data and forward less the all-gathers."""
    lr: float | None = None
    mono: float = 0.0
    mem: Mem | None = None
    custom: dict[str, float] = {}
    """Metrics from ``pardash.telemetry.log(**custom)``."""
    samples_total: int | None = None
    """Samples this rank's process processed up to and including this step (the reporter's
    running sum of ``samples``). A viewer gets a rank's latest step of each frame only; with
    this, a rate over the steps between counts each one's own size (a partial last batch made
    the run read five times slower). None: a reporter from before it."""
    phases: dict[str, float] = {}
    """Seconds of the script's own ``pardash.telemetry.phase`` blocks in this step that have no
    field above (``augment``, ``loss_scale``), by name, in the order their blocks first ended
    in the step; ``data``, ``forward``, ... fill their fields instead. A log written before
    this field has such phases in ``custom`` as ``<name>_s`` metrics, and reads so."""


class System(Base, tag="system"):
    """About 1 Hz sample of the rank's process and device."""

    cpu_pct: float | None = None
    """This process's CPU, in % of one core."""
    host_cpu_pct: float | None = None
    """The whole host's CPU busy, in % of all its cores (a noisy neighbour shows here)."""
    rss_bytes: int | None = None
    rss_peak_bytes: int | None = None
    """The most the process has held resident since it started (the kernel's high-water mark,
    VmHWM): its peak, which the RSS read after each step misses (FSDP's all-gathered
    parameters, the backward's activations). None: not known (not Linux, or an older rank)."""
    gpu_util_pct: float | None = None
    gpu_mem_used_bytes: int | None = None
    gpu_mem_total_bytes: int | None = None
    gpu_temp_c: float | None = None
    gpu_power_w: float | None = None
    gpu_sm_clock_mhz: float | None = None
    children: int | None = None
    """This process's child processes (DataLoader workers, compile workers), where it has any."""
    children_cpu_pct: float | None = None
    """Their CPU together, in % of one core (a rank at 17% whose two workers did its data work)."""
    children_uss_bytes: int | None = None
    """The memory only they hold (USS: pages shared with the rank, forked, not counted again),
    together; their RSS where USS cannot be read."""


class Event(Base, tag="event"):
    """Something that happened once: checkpoint, epoch end, warning, error, exit."""

    name: str = ""
    """checkpoint | epoch_end | warning | error | exit | restart | info | join (a rank ran out of
    inputs under DDP's Join: see JOIN_PHASE)"""
    message: str = ""
    step: int | None = None
    code: int | None = None
    """Exit code, for ``exit``; torchrun's restart count, for ``restart``."""
    duration_s: float | None = None
    traceback: str | None = None


class Heartbeat(Base, tag="heartbeat"):
    """About 1 Hz sign of life, sent even while the training loop is stuck."""

    step: int = 0
    """Last completed step."""
    phase: str = ""
    """Phase the loop is in now (data, forward, backward, optimizer, ...)."""
    phase_s: float = 0.0
    """How long it has been in that phase."""
    waits_in: str = ""
    """In phase "sync", the collective it waits in where the instrumentation knows it: a
    ``torch.distributed`` function the script calls by its name ("barrier", "all_reduce"), or
    "DDP's gradient all-reduce", "FSDP's all-gather" ...; '' otherwise. Ranks of one hang
    waiting in different ones wait for a collective some ranks never call
    (analysis.different_collectives)."""
    dropped: int = 0
    """Messages the reporter dropped so far (queue full)."""
    mono: float = 0.0


class Verdict(Base, tag="verdict"):
    """A conclusion the hub drew (rank = the rank it is about)."""

    verdict: str = ""
    """straggler | straggler_cleared | stalled | silent | exited | finished | not_sharding | sharding_ok | resumed |
    memory_growing | memory_steady (a rank's memory grows step after step, a leak, or no longer does; rank -1:
    every rank alike; ``cause`` "rss" or "cuda_allocated": telemetry/memgrowth.py)"""
    cause: str = ""
    """Kind of straggler (data, compute, host, gpu), phase of a stall, ..."""
    cost_s: float | None = None
    """Seconds per step the other ranks wait for this one."""
    step: int | None = None
    code: int | None = None
    message: str = ""
    waits_in: str = ""
    """Of a rank stalled in phase "sync": the collective it waits in, as its heartbeat said
    (``Heartbeat.waits_in``); '' where not known."""


Message = Union[Hello, Step, System, Event, Heartbeat, Verdict]
RANK_KINDS = ("hello", "step", "system", "event", "heartbeat")

# What a terminal acts on rather than shows: escape sequences (CSI: colours, cursor moves,
# clearing the screen; OSC: a window's title, the clipboard), then any other C0 or C1 control
# and DEL; and the invisible characters that reorder or hide text (bidirectional embeddings,
# overrides and isolates, zero-width spaces). Joiners and direction marks stay: scripts and
# emoji are spelt with them. A text of several lines keeps its newlines and tabs.
_SEQUENCES = re.compile(
    "(?:\x1b\\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI
    "|(?:\x1b\\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\\\|\x9c)?"  # OSC, to its end
    "|\x1b[@-Z\\\\-_]"  # other two-character escapes
)
_UNSHOWN = "\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u2028-\u202e\u2060\u2066-\u2069\ufeff"
_UNSHOWN_CHARS = re.compile(f"[{_UNSHOWN}]")
_LINE_BREAKS = re.compile("[\n\t\r]+")
_SURROGATES = re.compile("[\ud800-\udfff]")
"""What stands for a byte of a name that is not UTF-8 (a path or an argument Python decoded with
surrogateescape: a script named in Latin-1, a folder's name under the C locale): no UTF-8
encoder takes it (the hub died on each frame that carried one, review 279); shown as U+FFFD."""


def plain_text(text: str, *, lines: bool = False) -> str:
    """``text`` without what a terminal would act on or hide (``lines``: newlines and tabs
    kept, for messages and tracebacks, a lone CR taken as a newline; else each run of them is a
    space)."""
    if text.isprintable():  # the common case, in C
        return text
    text = _SURROGATES.sub("\ufffd", _SEQUENCES.sub("", text))
    if lines:
        return _UNSHOWN_CHARS.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    return _UNSHOWN_CHARS.sub("", _LINE_BREAKS.sub(" ", text))


def _enc_hook(obj: Any) -> Any:
    """Values msgspec does not know (torch.__version__, a Path, a numpy scalar in a config):
    their plain form, so a user's odd config value never breaks publishing."""
    for plain in (str, int, float):
        if isinstance(obj, plain):
            return plain(obj)
    item = getattr(obj, "item", None)
    if callable(item):
        try:
            return item()
        except Exception:
            pass
    return str(obj)


_mp_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_mp_decoder = msgspec.msgpack.Decoder(Message)
_js_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)
_js_decoder = msgspec.json.Decoder(Message)

encode = _mp_encoder.encode
"""Message -> MessagePack bytes (the wire)."""
decode = _mp_decoder.decode
"""MessagePack bytes -> Message; raises msgspec.DecodeError/ValidationError."""
encode_json = _js_encoder.encode
"""Message -> one JSON object (a log line, without the newline)."""
encode_json_lines = _js_encoder.encode_lines
"""Messages -> JSON Lines (each object followed by a newline)."""
decode_json = _js_decoder.decode
"""One JSON log line -> Message."""
