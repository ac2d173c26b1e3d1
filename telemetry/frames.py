"""The hub-to-viewer protocol: frames on PUB, a snapshot on request (the Clone pattern).

A viewer subscribes first, then asks for a snapshot (state and history as of frame ``hseq``),
then applies every frame whose ``fseq`` follows the snapshot's. A frame holds at most one step,
system sample and heartbeat per rank (the latest since the previous frame) plus the events and
verdicts in between, so its size follows the number of ranks, never the message rate.

Each step in a frame's ``messages`` is also that rank's history point for the frame: the viewer
applies the step and appends it to the rank's history (``RunState.commit_history``), as the hub
did when it made the frame. Frames before this layout also carried the same steps a second time
in a ``history`` field; a viewer ignores that field (msgspec skips unknown fields), so it follows
an older hub as well.

A frame's steps are some of a rank's steps (its newest when the frame was cut), so medians over
them depend on where frames fell: a live hub's timer and a replay's clock cut the same run
differently. The grid's medians come from the hub instead, worked out from every step it took:
``Frame.smooth`` and ``Snapshot.smooth`` (:data:`Smooth`). An older viewer skips these fields;
a viewer of an older hub, which sends none, takes medians of its history points.
"""

from __future__ import annotations

import msgspec

from .schema import Message

Smooth = dict[int, tuple[float | None, float | None, float | None, float | None]]
"""Rank -> the medians of its last ``state.SMOOTH_STEPS`` steps' step, self, data and comm time
(``state.SMOOTH_FIGURES``; None: no step of those measured it), as the hub works them out
(``state.smooth_of``)."""

FRAME_TOPIC = b"f"
"""PUB topic of frames."""
SNAPSHOT_REQUEST = b"snapshot"


class HubStats(msgspec.Struct, omit_defaults=True):
    """Hub counters a viewer shows."""

    received: int = 0
    """Messages decoded and accepted."""
    rejected: dict[str, int] = {}
    """Frames refused, by reason."""
    lost: int = 0
    """Rank messages that never arrived (seq gaps)."""
    dropped: int = 0
    """Messages the ranks' reporters dropped (sum of their heartbeats' counts)."""
    ingest_hz: float = 0.0
    """Messages per second over the last second."""
    log_path: str = ""
    log_error: str = ""
    """Why the log is not being written, when it is not."""
    log_bytes: int = 0
    """How big the log is now, in bytes (0: no log, or not known): what a long run's disk
    holds of it, which nothing said while it grew (review 316)."""
    log_full_in_s: float = 0.0
    """Seconds until the log's disk fills at the log's rate, while the hub has found the log
    will not fit there (telemetry/logspace.py); 0: it fits, or not known."""
    viewers: int = 0
    """Snapshots served so far (a proxy for viewers attached)."""
    behind_s: float = 0.0
    """Seconds the steps the hub takes now waited for it (beyond their ranks' least wait: clock
    offsets and transit): how far behind the ranks what viewers see is. 0: keeping up."""


class Frame(msgspec.Struct, omit_defaults=True):
    """What changed since the previous frame."""

    fseq: int
    """Frame counter; a gap means the viewer missed a frame and must re-snapshot."""
    hseq: int
    """Hub sequence number of the last message folded into this frame."""
    t: float
    hub_id: str = ""
    """Changes when the hub process restarts: the viewer must re-snapshot."""
    messages: list[Message] = []
    """Events and verdicts in hub order, then each rank's latest system sample, heartbeat
    and step since the previous frame; each step is also its rank's history point."""
    stats: HubStats = msgspec.field(default_factory=HubStats)
    smooth: Smooth = {}
    """For each rank with a step in ``messages``: the medians of its last steps as of it."""


class TrendData(msgspec.Struct, omit_defaults=True):
    """The run's loss curve as the hub holds it (trend.Trend): closed points, then the open one."""

    stride: int = 1
    """Frames a closed point spans."""
    rows: list[tuple[float, float, float, float]] = []
    """(step, median loss over the ranks, lowest, highest), oldest first."""
    open: list[float] = []
    """The point being filled: step, the sum of its frames' medians, lowest, highest."""
    open_frames: int = 0


class Snapshot(msgspec.Struct, omit_defaults=True):
    """Full state as of frame ``fseq``: replaying ``messages`` in order rebuilds every
    rank's latest values, verdicts and the event log; ``history`` holds each rank's chart
    columns as float32 little-endian bytes, oldest first, one string per column (see
    ring.HISTORY_COLUMNS; ``Ring.load_columns`` reads them back)."""

    fseq: int
    hseq: int
    t: float
    hub_id: str = ""
    run_id: str = ""
    t0: float = 0.0
    first_hello_t: float = 0.0
    """The ranks' first hello (RunState.first_hello_t): a restart's hellos in ``messages``
    replace their ranks' first ones."""
    command: list[str] = []
    """What each rank runs (RunState.command): the log's note of it may have left the event log."""
    messages: list[Message] = []
    history: dict[int, dict[str, bytes]] = {}
    stats: HubStats = msgspec.field(default_factory=HubStats)
    trend: TrendData = msgspec.field(default_factory=TrendData)
    """The run's loss from its start (a rank's ``history`` holds its last points only)."""
    smooth: Smooth = {}
    """Each rank's medians of its last steps, as of its step in ``messages`` (a rank that has
    taken none in its process: not there)."""


_enc = msgspec.msgpack.Encoder()
encode = _enc.encode
decode_frame = msgspec.msgpack.Decoder(Frame).decode
decode_snapshot = msgspec.msgpack.Decoder(Snapshot).decode
