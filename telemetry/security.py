"""Who may talk to a hub.

Keys. ``pardash keys`` makes a CURVE key folder (ZeroMQ's elliptic-curve authentication and
encryption, made with pyzmq's ``zmq.auth``)::

    DIR/                      0700
      server.key              the hub's public key (ranks and viewers need it)
      server.key_secret       the hub's key pair (the hub's host only)
      client.key              the ranks' and viewers' public key
      client.key_secret       the ranks' and viewers' key pair
      authorized_clients/     public keys the hub lets in to publish and to watch (client.key)
      authorized_viewers/     public keys it lets in to watch only: NAME.key (``--viewer NAME``)
      viewers/NAME/           viewer NAME's folder, its PARDASH_CURVE_DIR as is: the hub's
                              server.key, and its own client.key and client.key_secret

``pardash keys --viewer NAME`` makes that last pair (``--out`` puts its folder elsewhere): for a
colleague who should watch the run and never send it records. Every file is readable by its
owner only, and loading refuses a folder (or ``authorized_clients/``, ``authorized_viewers/``)
that another user owns or can write: they could admit their own key or swap the hub's. The hub
takes the folder by ``--curve-dir`` or ``PARDASH_CURVE_DIR``; ranks and viewers by
``PARDASH_CURVE_DIR`` (or an argument). With keys, the hub's three sockets are CURVE servers, in
the ZAP domain ``ingest`` (where ranks push) or ``view`` (updates and snapshot, where viewers and
``pardash record`` read), and pyzmq's authenticator admits the public keys in
``authorized_clients/`` on both, those in ``authorized_viewers/`` on ``view`` only: anyone else
gets no frame, no snapshot, and what they push is never read; a viewer's key gets frames and
snapshots, and its connection to the ingest is refused as a stranger's. A running hub reads both
folders again when they change (:class:`AdmittedKeys`); its own key pair it keeps until
restarted. Authentication happens once per connection, so publishing costs nothing more per
message in Python (libzmq encrypts in its I/O thread), and a connection made with a key removed
since stays until it ends.

Binding. Endpoints bind to loopback unless the user asks otherwise; binding anywhere else needs
keys or an explicit ``--insecure`` (:func:`bind_refusal`).

How much of what they send the hub holds: :mod:`pardash.telemetry.limits`.
"""

from __future__ import annotations

import errno
import ipaddress
import itertools
import os
import re
import shlex
import socket
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

import zmq

CURVE_DIR_VAR = "PARDASH_CURVE_DIR"
SERVER = "server"
CLIENT = "client"
AUTHORIZED = "authorized_clients"
"""Sub-folder of public keys the hub admits on every socket: ranks publish, viewers watch."""
VIEWERS = "authorized_viewers"
"""Sub-folder of public keys the hub admits to watch only (``pardash keys --viewer NAME``)."""
VIEWER_FOLDERS = "viewers"
"""Sub-folder holding each viewer's own key folder (``viewers/NAME/``), made by ``--viewer NAME``."""
INGEST_DOMAIN = "ingest"
"""ZAP domain of the hub's ingest socket, where ranks push: keys in ``authorized_clients/`` only."""
VIEW_DOMAIN = "view"
"""ZAP domain of the hub's updates and snapshot sockets: ``authorized_clients/`` and ``authorized_viewers/``."""

# -- where a hub may bind ----------------------------------------------------------------------


class InsecureBindError(ValueError):
    """A hub asked to bind beyond loopback with neither keys nor ``--insecure``."""


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1, ``localhost`` and the ``lo`` interface; anything else
    (``*``, ``0.0.0.0``, a host name, another interface) counts as reachable from outside."""
    h = host.strip().strip("[]")
    if h in ("localhost", "lo"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def bind_address_refusal(host: str) -> str | None:
    """Why ``host`` is no address a hub could bind (one line), or None: an IP address, ``*``, a
    network interface (``eth0``) or a host name this machine resolves will do. ``--bind
    not-a-host`` was refused for going "without authentication", which sent the user after keys."""
    h = host.strip()
    if h == "*":
        return None
    try:
        ipaddress.ip_address(h.strip("[]"))
        return None
    except ValueError:
        pass
    if h and h in {name for _, name in socket.if_nameindex()}:
        return None
    try:
        if h and socket.getaddrinfo(h, None):
            return None
    except (OSError, UnicodeError):  # (socket.gaierror is an OSError)
        pass
    name, sep, port = h.rpartition(":")
    if sep and port.isdigit() and name and ":" not in name:
        return f"cannot bind {host!r}: give the address alone, without its port (the port has a flag of its own)"
    return f"cannot bind {host!r}: not an address, network interface or host name of this machine (0.0.0.0 is every address)"


def bind_refusal(host: str, *, curve: bool, insecure: bool) -> str | None:
    """Why a hub must not bind ``host`` (one line that says what to do), or None. An address it
    could not bind anyway is said as such first (with keys or ``--insecure`` the bind itself
    says so)."""
    if is_loopback(host) or curve or insecure:
        return None
    if why := bind_address_refusal(host):
        return why
    return (
        f"refusing to bind {host} without authentication: anyone who can reach it could read the run "
        "and send it records. Make keys with `pardash keys` and pass --curve-dir DIR (or set "
        "PARDASH_CURVE_DIR), or pass --insecure on a network you trust"
    )


def metrics_refusal(addr: str, *, insecure: bool) -> str | None:
    """Why ``/metrics`` must not be served on ``addr`` (one line that says what to do), or None.
    Plain HTTP takes no CURVE keys, so beyond loopback only ``--insecure`` will do."""
    if is_loopback(addr) or insecure:
        return None
    return (
        f"--prometheus-addr {addr}: /metrics has no authentication, so anyone who reaches "
        "it reads the run; keep it on loopback (the default) and scrape through a local agent or a "
        "tunnel, or pass --insecure on a network you trust"
    )


# -- keys ----------------------------------------------------------------------------------------


class CurveKeyError(Exception):
    """Keys missing, unreadable or readable by others; the message says what to do."""


def default_curve_dir() -> Path:
    """``$PARDASH_CURVE_DIR``, else ``$XDG_CONFIG_HOME/pardash/curve`` (``~/.config/...``)."""
    env = os.environ.get(CURVE_DIR_VAR)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return Path(base) / "pardash" / "curve"


def curve_dir_from_env() -> str | None:
    return os.environ.get(CURVE_DIR_VAR) or None


def make_private_dir(path: str | os.PathLike[str]) -> Path:
    """Make ``path`` and every missing parent 0700, whatever the umask. ``Path.mkdir(parents=True,
    mode=0o700)`` gives the parents ``0777 & ~umask``: under umask 000 another user could rename
    the folder away from a world-writable parent and plant their own. Folders that already exist
    keep their mode."""
    p = Path(path)
    for folder in (*reversed(p.parents), p):
        if folder.is_dir():
            continue
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # made meanwhile by someone else, or a file (said below)
            continue
        os.chmod(folder, 0o700)  # the umask may have taken bits the owner needs
    if not p.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(p))
    return p


def make_keys(curve_dir: str | os.PathLike[str], *, force: bool = False) -> dict[str, Path]:
    """Make a server and a client key pair in ``curve_dir`` and admit the client's public key.
    The folder becomes 0700 before any key is written, so no other user can read a key at any
    moment; each file is then 0600. Refuses to replace existing keys unless ``force``, which
    also revokes every client key admitted before (``revoked_NAME`` entries name those that
    were not our own client's)."""
    import zmq.auth

    d = Path(curve_dir)
    existing = [p for p in (d / f"{SERVER}.key_secret", d / f"{CLIENT}.key_secret") if p.exists()]
    if existing and not force:
        raise CurveKeyError(
            f"{d} already holds keys; new ones lock out every rank and viewer holding these, and hubs running now keep "
            f"their server key until restarted. `pardash keys --dir {d} --force` replaces them"
        )
    auth = d / AUTHORIZED
    _refuse_shared_folder(d)
    try:
        make_private_dir(d)
        os.chmod(d, 0o700)
        auth.mkdir(exist_ok=True, mode=0o700)
        os.chmod(auth, 0o700)
        revoked = sorted(auth.glob("*.key"))
        for old in revoked:
            old.unlink()
        paths: dict[str, Path] = {}
        for name in (SERVER, CLIENT):
            public, secret = zmq.auth.create_certificates(d, name)
            paths[f"{name}_public"], paths[f"{name}_secret"] = Path(public), Path(secret)
        admitted = auth / f"{CLIENT}.key"
        admitted.write_bytes(paths["client_public"].read_bytes())
        for p in (*paths.values(), admitted):
            os.chmod(p, 0o600)
        paths["authorized"] = auth
        # Replacing keys revokes every admitted client, ours and any added by hand: a rotation
        # must not leave an old key (perhaps the reason for it) let in.
        paths.update({f"revoked_{old.name}": old for old in revoked if old.name != f"{CLIENT}.key"})
        # Viewers' keys too: their folders hold the old server key, and a hub not yet restarted
        # would go on letting them watch.
        watching = d / VIEWERS
        for old in sorted(watching.glob("*.key")) if watching.is_dir() else ():
            old.unlink()
            paths[f"revoked_{VIEWERS}/{old.name}"] = old
    except OSError as exc:
        raise CurveKeyError(f"cannot write keys in {d}: {exc.strerror or exc}; choose another --dir") from None
    return paths


_VIEWER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def viewer_name_refusal(name: str) -> str | None:
    """Why ``name`` cannot name a viewer (one line), or None: it names a file and a folder."""
    if _VIEWER_NAME.fullmatch(name):
        return None
    return (
        f"--viewer {name!r}: a viewer's name is 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or "
        f"digit (it names {VIEWERS}/NAME.key and {VIEWER_FOLDERS}/NAME/), e.g. --viewer alice"
    )


def viewer_folder(curve_dir: str | os.PathLike[str], name: str) -> Path:
    """Where ``pardash keys --viewer NAME`` puts viewer ``name``'s folder unless told (``--out``)."""
    return Path(curve_dir) / VIEWER_FOLDERS / name


def make_viewer_keys(
    curve_dir: str | os.PathLike[str], name: str, *, out: str | os.PathLike[str] | None = None, force: bool = False
) -> dict[str, Path]:
    """Make a key pair for viewer ``name`` and admit it to watch only: its public key goes in
    ``curve_dir/authorized_viewers/NAME.key``, and ``out`` (default ``curve_dir/viewers/NAME``)
    becomes the viewer's ``PARDASH_CURVE_DIR`` as is: the hub's ``server.key`` and the viewer's
    ``client.key`` and ``client.key_secret``, the names ranks and viewers load. Folders 0700,
    files 0600, as :func:`make_keys`; refuses a name already made unless ``force``, which
    replaces its pair (the hub refuses the old one within a second). The key is admitted last,
    whole (written aside, then renamed into place): a running hub never reads half of it."""
    import zmq.auth

    if why := viewer_name_refusal(name):
        raise CurveKeyError(why)
    d = Path(curve_dir)
    _check_folder(d)
    if not (d / f"{SERVER}.key_secret").is_file():
        # (a rank's or viewer's copy was told to make hub keys in it: `keys --dir` then
        # refuses, keys being there, and --force would turn that copy into a hub's folder)
        if (d / f"{CLIENT}.key_secret").exists():
            raise CurveKeyError(
                f"{d} holds a rank's or viewer's keys, not the hub's key pair: give --dir the hub's key folder "
                f"(the one `pardash keys` made, with {SERVER}.key_secret)"
            )
        raise CurveKeyError(
            f"{d} holds no hub keys (no {SERVER}.key_secret) to admit a viewer to: give --dir the hub's key folder, "
            f"or make one first with `pardash keys --dir {d}`"
        )
    hubs_key = d / f"{SERVER}.key"
    fix = f"put back a good copy of it, or {_renew(d)}"
    _load(hubs_key, secret=False, missing=fix, damaged=fix)
    watching = d / VIEWERS
    _check_folder(watching)
    admitted = watching / f"{name}.key"
    folder = Path(out) if out is not None else viewer_folder(d, name)
    admitting = {os.path.realpath(d / AUTHORIZED), os.path.realpath(watching)}
    if (folder / f"{SERVER}.key_secret").exists() or os.path.realpath(folder) in admitting:  # (``d`` itself among them)
        # (in authorized_clients/ its client.key would admit the viewer as a rank, to publish)
        raise CurveKeyError(f"--out {folder} is a hub's key folder; a viewer's keys go in a folder of their own (default {viewer_folder(d, name)})")
    existing = [p for p in (admitted, folder / f"{CLIENT}.key_secret") if p.exists()]
    if existing and not force:
        again = f"pardash keys --dir {d} --viewer {name}{f' --out {folder}' if out is not None else ''} --force"
        raise CurveKeyError(
            f"viewer {name} already has keys ({existing[0]}); `{again}` makes new ones (the hub refuses the old ones within a second)"
        )
    _refuse_shared_folder(folder, flag="--out")
    try:
        owner = folder.stat().st_uid
    except FileNotFoundError:
        owner = os.getuid()
    except OSError as exc:
        raise CurveKeyError(f"cannot use {folder} for keys: {exc.strerror or exc}; choose another --out") from None
    if owner != os.getuid():
        raise CurveKeyError(f"{folder} belongs to uid {owner}, who could read or swap the viewer's keys; pass a folder of your own to --out")
    try:
        watching.mkdir(exist_ok=True, mode=0o700)
        os.chmod(watching, 0o700)
        make_private_dir(folder)
        os.chmod(folder, 0o700)
        public, secret = zmq.auth.create_certificates(folder, CLIENT)
        paths = {"client_public": Path(public), "client_secret": Path(secret), "server_public": folder / f"{SERVER}.key"}
        paths["server_public"].write_bytes(hubs_key.read_bytes())
        aside = watching / f".{name}.key.{os.getpid()}"  # (a name the hub's reading passes over)
        aside.write_bytes(paths["client_public"].read_bytes())
        for p in (*paths.values(), aside):
            os.chmod(p, 0o600)
        os.replace(aside, admitted)
    except OSError as exc:
        raise CurveKeyError(f"cannot write the viewer's keys ({exc.filename or folder}): {exc.strerror or exc}; choose another --out") from None
    paths["admitted"] = admitted
    paths["folder"] = folder
    if existing:
        paths["replaced"] = existing[0]
    return paths


def allow_ipv6(sock: zmq.Socket, where: str) -> None:
    """Let ``sock`` bind or connect to an IPv6 address (``::1``, ``tcp://[::1]:PORT``); ZeroMQ
    sockets are IPv4-only unless told. Others are left as they are."""
    host = where.split("://", 1)[-1]
    if host.startswith("[") or host.count(":") > 1:
        sock.setsockopt(zmq.IPV6, 1)


_monitors_made = itertools.count()

HANDSHAKE_FAILED = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
"""A handshake's failures, as a socket's monitor reports them."""
HANDSHAKE_EVENTS = zmq.EVENT_HANDSHAKE_SUCCEEDED | HANDSHAKE_FAILED
"""What a client watches to learn whether the hub took it."""


NOT_A_HUB = "or what listens there is not a pardash hub (it dropped the connection in ZeroMQ's handshake: is the address right?)"
"""What a connection dropped in the handshake may also mean (see :func:`refusal`)."""


def refusal(event: int, keys: "ClientKeys | None", who: str, hint: str, value: int | None = None) -> str:
    """Why the hub refused the handshake of a client (``who``: "this viewer", or "rank 3": a
    rank publishes), from its monitor's failure ``event`` and that event's ``value`` (a
    protocol error's code, or the errno of a dropped connection): no keys, a client key the
    hub does not admit (the hub's ZAP answer: AUTH), keys of another hub, or a hub without keys.
    ``hint``: where such a client is given the keys.

    The two sides' mechanisms differing (one has CURVE keys, the other none) is a protocol
    error of its own, and says which side has them. A connection dropped in the handshake is a
    CURVE hub that cannot read a client's keys (another hub's server.key), or a hub that
    dropped a client whose mechanism is not its own before the error reached it (a race), or no
    ZeroMQ peer at all: another program at that port, which a rank at a wrong address was told
    was a CURVE hub. Said as any of them. ``value`` None: not known.

    AUTH says only that the hub said no to the key, not why: to a rank, a key it never admitted
    and a viewer's key (admitted to watch, never to publish) read the same, so a rank is told
    its key is not admitted for publishing, and what does admit one."""
    mismatch = event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
    dropped = event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and value is not None
    if keys is None:
        why = f"it has CURVE keys and {who} has none ({hint}: a copy of the hub's keys folder)"
        return f"{why}, {NOT_A_HUB}" if dropped else why
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        if who.startswith("rank"):
            return (f"it does not admit {who}'s client key for publishing (a rank needs a key in the hub folder's "
                    f"{AUTHORIZED}/, as its client.key is; a viewer's key from `pardash keys --viewer` only watches)")
        # (it said to copy client.key into authorized_clients/: a viewer's key revoked from
        # authorized_viewers/ would then be let in to publish too)
        return (f"it does not admit {who}'s client key (`pardash keys --dir HUB_KEYS --viewer NAME` admits a viewer to "
                f"watch: its key in the hub folder's {VIEWERS}/; a key in {AUTHORIZED}/ may publish too)")
    no_keys = f"the hub has no CURVE keys ({who} then goes without: no {hint})"
    if mismatch:
        return no_keys
    why = f"{who}'s server.key is not this hub's (copy server.key from the hub's keys folder), or {no_keys}"
    return f"{why}, {NOT_A_HUB}" if dropped else why


def monitor_socket(sock: zmq.Socket, events: int | None = None) -> zmq.Socket:
    """``sock``'s event monitor at an inproc address of its own. pyzmq's default names it
    after the socket's file descriptor, which a socket closed a moment before (its monitor not
    yet torn down by the context) may still hold: "Address already in use"."""
    return sock.get_monitor_socket(events, addr=f"inproc://pardash-monitor-{os.getpid()}-{next(_monitors_made)}")


def monitor_event(frames: list[bytes]) -> tuple[int, int] | None:
    """The event (``zmq.EVENT_*``) of one message from a socket's monitor and its value (an
    errno or a protocol error's code), as ``zmq.utils.monitor.parse_monitor_message`` reads it
    (a 16-bit event, a 32-bit value, then the endpoint), without importing that module: it
    imports asyncio, whose import makes named tuples with ``exec`` of a string, which makes
    CPython forget that the main thread ended in a KeyboardInterrupt (a rank's heartbeat thread
    importing it at exit turned a Ctrl-C's exit status 130 into 1). None for a message of
    another form."""
    if len(frames) != 2 or len(frames[0]) != 6:
        return None
    event, value = struct.unpack("=Hi", frames[0])
    return event, value & 0xFFFFFFFF


VIEWER_HINT = "--curve-dir DIR or PARDASH_CURVE_DIR"
"""Where a viewer (``pardash attach``, ``pardash record``) is given its keys."""


class Handshakes:
    """What a client socket's monitor says of its connections to a hub: whether one was ever
    made, how many the hub took, and why it refuses the client. A viewer and a log copy read the
    same hub through the same port: both learn of a refusal here, so both say it alike (the copy
    blamed the hub's liveness for a key the hub had refused). Attached before the socket
    connects, so the first connection is not missed."""

    def __init__(self, sock: zmq.Socket, keys: "ClientKeys | None", who: str = "this viewer", hint: str = VIEWER_HINT) -> None:
        self.sock = sock
        self.keys = keys
        self.who, self.hint = who, hint
        self.monitor: zmq.Socket | None = monitor_socket(sock, HANDSHAKE_EVENTS | zmq.EVENT_CONNECTED)
        """The socket's monitor, to poll on (None once closed)."""
        self.reached = False
        """A connection was made (nothing listening at the address: never)."""
        self.took = 0
        """Connections the hub took: handshakes that succeeded (a plain connection has its
        handshake too, with nothing to refuse)."""
        self.refused = ""
        """Why the hub refused the last handshake that failed; "" once one succeeds."""

    def read(self) -> None:
        """Take the events the monitor holds (never blocks). Imports nothing: pyzmq's
        ``zmq.utils.monitor`` imports asyncio (15 ms), and a Ctrl-C that landed in that first
        import, in a launch's first poll, left asyncio half-imported: every later poll, the
        launch's stop included, failed on it (NameError), and the job trained on unwatched."""
        while self.monitor is not None:
            try:
                event = monitor_event(self.monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return
            except zmq.ZMQError:  # (the socket's monitor was taken over: another watches it now)
                self.close()
                return
            if event is None:
                continue
            event, value = event
            if event == zmq.EVENT_CONNECTED:
                self.reached = True
            elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.refused = ""
                self.took += 1
            elif event & HANDSHAKE_FAILED:
                why = refusal(event, self.keys, self.who, self.hint, value)
                if not (self.refused and why.endswith(NOT_A_HUB)):  # (a surer reason read before stands)
                    self.refused = why

    def close(self) -> None:
        """Stop watching (the socket itself stays open)."""
        if self.monitor is None:
            return
        try:
            self.sock.disable_monitor()
        except zmq.ZMQError:  # (the socket was closed first)
            pass
        self.monitor.close(0)
        self.monitor = None


def _refuse_shared_folder(d: Path, flag: str = "--dir") -> None:
    """Keys go in a folder of their own, which becomes 0700. A folder that already exists, holds
    other things and others may enter (a project folder, /tmp) would be shut to them (and the
    keys mixed among its files): refused, never changed. An empty folder of one's own (`mkdir
    keys` first) is fine."""
    try:
        st = d.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise CurveKeyError(f"cannot use {d} for keys: {exc.strerror or exc}; choose another {flag}") from None
    if not d.is_dir():
        raise CurveKeyError(f"{d} is not a folder; choose another {flag}")
    ours = st.st_uid == os.getuid()
    own = (AUTHORIZED, VIEWERS, VIEWER_FOLDERS)
    others = [p for p in d.iterdir() if p.name not in own and not p.name.endswith((".key", ".key_secret"))]
    if st.st_mode & 0o077 and (not ours or others):  # a keys folder (copied 0755 by `cp -r`) is fine
        raise CurveKeyError(
            f"{d} is a shared folder (mode {stat.filemode(st.st_mode)}) that holds other files; keys need a folder of "
            f"their own, made 0700: pass a new {flag}"
        )


def _check_folder(folder: Path) -> None:
    """Refuse a key folder another user could write into: they could admit their own key or
    swap ``server.key``, which ranks trust. A missing folder is left to the key loading to report."""
    try:
        st = folder.stat()
    except FileNotFoundError:
        return
    if st.st_uid not in (os.getuid(), 0):  # root's own folders are trusted, as OpenSSH does
        raise CurveKeyError(
            f"{folder} belongs to uid {st.st_uid}, who could add or swap keys; copy the keys to a folder of "
            "your own (`chmod 700` it) or make new ones with `pardash keys --dir DIR`"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CurveKeyError(f"{folder} can be written by other users, who could add or swap keys; {_privacy_advice(folder, st)}")


def _privacy_advice(folder: Path, st: os.stat_result | None = None) -> str:
    """What makes ``folder`` a key folder only its user may enter: `chmod 700` it, where that is
    theirs to do and what it is for. Never for a folder of someone else's (root's /tmp: the
    chmod fails, or as root shuts every other user out of it) nor a sticky one (a shared folder
    such as /tmp, whatever its owner: shutting it breaks everyone else's use of it): the keys
    go in a private folder of their own there."""
    try:
        st = st or folder.stat()
    except OSError:
        st = None
    if st is not None and st.st_uid == os.getuid() and not st.st_mode & stat.S_ISVTX:
        return f"`chmod 700 {shlex.quote(str(folder))}`"
    whose = "shared" if st is not None and st.st_mode & stat.S_ISVTX else "not yours"
    return f"keep the keys in a private folder of your own instead (`mkdir -m 700 DIR`, copy them there, use DIR): {folder} is {whose}, not one to chmod"


def _load(path: Path, *, secret: bool, missing: str, damaged: str) -> tuple[bytes, bytes | None]:
    """The key in ``path``; a :class:`CurveKeyError` with ``missing`` or ``damaged`` as its advice
    when the file is not there or cannot be read as a key (the advice depends on whose folder it
    is: see :func:`load_client_keys` and :func:`load_server_keys`)."""
    import zmq.auth

    if not path.is_file():
        raise CurveKeyError(f"no key {path}; {missing}")
    if secret:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise CurveKeyError(f"{path} can be read by other users; `chmod 600 {path}` (and make new keys if others may have read it)")
    try:
        public, secret_key = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise CurveKeyError(f"cannot read the key {path} ({exc}); {damaged}") from None
    if secret and not secret_key:
        raise CurveKeyError(f"{path} holds no secret key; {damaged}")
    return public, secret_key


def _renew(d: Path) -> str:
    """Advice to make a folder's keys again: the one way to mend the hub's own key pair, at the
    price of every copy of the old keys (never without ``--dir``: the default folder's keys are
    another set, maybe in use)."""
    return (
        f"make new keys with `pardash keys --dir {d} --force`, which replaces the keys every rank and viewer holds "
        "(copy the folder to them again) and needs the hub restarted"
    )


def _holds_keys(d: Path) -> bool:
    try:
        return any(p.name.endswith((".key", ".key_secret")) for p in d.iterdir())
    except OSError:
        return False


@dataclass(frozen=True, slots=True)
class ClientKeys:
    """What a rank or a viewer needs: its key pair and the hub's public key."""

    public: bytes
    secret: bytes
    server_public: bytes

    def apply(self, sock: zmq.Socket) -> None:
        """Make ``sock`` a CURVE client of the hub (before ``connect``)."""
        sock.curve_secretkey = self.secret
        sock.curve_publickey = self.public
        sock.curve_serverkey = self.server_public


@dataclass(frozen=True, slots=True)
class ServerKeys:
    """What a hub needs: its key pair and the folder of public keys it admits."""

    public: bytes
    secret: bytes
    authorized: Path
    admitted: dict[str, bytes] = field(default_factory=dict)
    """The public keys ``authorized`` held when loaded, by file name (each checked)."""
    watching: dict[str, bytes] = field(default_factory=dict)
    """The viewers' public keys ``authorized_viewers/`` (beside ``authorized``) held when loaded."""

    def apply(self, sock: zmq.Socket, *, domain: str) -> None:
        """Make ``sock`` a CURVE server in the ZAP ``domain`` (:data:`INGEST_DOMAIN` or
        :data:`VIEW_DOMAIN`: which keys it admits), before ``bind``."""
        sock.curve_secretkey = self.secret
        sock.curve_publickey = self.public
        sock.curve_server = True
        sock.zap_domain = domain.encode()

    def start_authenticator(self, ctx: zmq.Context) -> AdmittedKeys:
        """pyzmq's authenticator on ``ctx`` (one per context), admitting only the public keys
        in ``authorized`` everywhere and those in ``authorized_viewers/`` to watch, as the
        folders hold them (:meth:`AdmittedKeys.reload`). Stop it with ``.stop()`` before the
        context ends."""
        return AdmittedKeys(ctx, self.authorized, self.admitted or authorized_keys(self.authorized), watching=self.watching)


RELOAD_EVERY_S = 1.0
"""A running hub looks at ``authorized_clients/`` and ``authorized_viewers/`` this often for
keys added or removed."""


class _KeyFolder:
    """One folder of admitted public keys, as the hub last read it."""

    def __init__(self, folder: Path, keys: dict[str, bytes], *, viewers: bool) -> None:
        self.folder = folder
        self.keys = dict(keys)
        self.viewers = viewers
        self._seen: tuple | None = None  # read again at the first look: it may have changed since loaded

    def reread(self) -> tuple[str, str] | None:
        """Read the folder again when it changed: what the hub should say (an event name and
        its message) when its keys changed, or when it keeps the ones it had because the folder
        went wrong."""
        seen = _listing(self.folder)
        if seen == self._seen:
            return None
        self._seen = seen
        whose = "viewer" if self.viewers else "client"
        try:
            _check_folder(self.folder)
            keys = authorized_keys(self.folder, viewers=self.viewers)
        except (CurveKeyError, OSError) as exc:
            # A key half copied or mistyped must not lock every client out, nor stop the hub.
            why = exc if isinstance(exc, CurveKeyError) else f"cannot read {self.folder} ({exc.strerror or exc})"
            return "warning", f"{why}; until then the hub admits the {len(self.keys)} {'viewer ' if self.viewers else ''}key(s) it admitted before"
        if keys == self.keys:
            return None
        old, self.keys = self.keys, keys
        added = sorted(k for k in keys if k not in old)
        removed = sorted(k for k in old if k not in keys)
        changed = sorted(k for k in keys if k in old and keys[k] != old[k])
        said = [f"{what} {', '.join(names)}" for what, names in (("added", added), ("removed", removed), ("replaced", changed)) if names]
        text = f"admitted {whose} keys{' (to watch only)' if self.viewers else ''} changed in {self.folder}: {'; '.join(said)} ({len(keys)} admitted now)"
        if removed or changed:
            text += f"; a {whose} connected with a key no longer admitted stays until it reconnects (restart the hub to cut it off)"
        return "hub", text


class AdmittedKeys:
    """The keys a running hub admits, kept to what ``authorized_clients/`` (everywhere) and
    ``authorized_viewers/`` (to watch only) hold: a key added there (`pardash keys` says to)
    lets its client in, one removed (or revoked by `pardash keys --force`) keeps it out,
    without a restart. A hub that read the folder once admitted its first keys for good.

    pyzmq's authenticator asks :meth:`callback` about each new connection, with the ZAP domain
    of the hub's socket it came to, so it admits exactly the keys checked here (its own
    ``configure_curve`` would read the folder a second time, and a file changed in between would
    have it admit nobody). Authentication happens once a connection: a client connected with a
    key removed since stays until it reconnects."""

    def __init__(self, ctx: zmq.Context, folder: Path, keys: dict[str, bytes], *, watching: dict[str, bytes] | None = None) -> None:
        from collections import deque

        from zmq.auth.thread import ThreadAuthenticator

        self._clients = _KeyFolder(folder, keys, viewers=False)
        self._viewers = _KeyFolder(folder.parent / VIEWERS, watching or {}, viewers=True)
        self.folder = folder
        self._allowed = frozenset(keys.values())
        self._watching = frozenset(self._viewers.keys.values())
        self._pushed: deque[bytes] = deque()
        """Viewers' keys refused on the ingest (appended on the authenticator's thread)."""
        self._pushed_said: set[bytes] = set()
        self._next = 0.0
        self._auth = ThreadAuthenticator(ctx)
        self._auth.start()
        # pyzmq asks the provider of the connection's own domain ("*" only when it has none).
        for domain in ("*", INGEST_DOMAIN, VIEW_DOMAIN):
            self._auth.configure_curve_callback(domain=domain, credentials_provider=self)

    @property
    def keys(self) -> dict[str, bytes]:
        """Admitted client keys (Z85) by file name."""
        return self._clients.keys

    def callback(self, domain: str, key: bytes) -> bool:
        """pyzmq's question, on its authenticator thread: is this public key (Z85) admitted
        to the socket of ``domain``? A client's everywhere, a viewer's on :data:`VIEW_DOMAIN`."""
        if key in self._allowed:
            return True
        if key in self._watching:
            if domain == VIEW_DOMAIN:
                return True
            self._pushed.append(key)
        return False

    def reload(self, now: float) -> tuple[str, str] | None:
        """Read the folders again when they changed, at most once every RELOAD_EVERY_S; returns
        what the hub should say (an event name and its message) when the keys it admits
        changed, when it keeps the ones it had because a folder went wrong, or when a viewer's
        key first tried to publish."""
        if now < self._next:
            return None
        self._next = now + RELOAD_EVERY_S
        said = [s for s in (self._clients.reread(), self._viewers.reread(), self._viewer_pushed()) if s is not None]
        self._allowed = frozenset(self._clients.keys.values())
        self._watching = frozenset(self._viewers.keys.values())
        if not said:
            return None
        return ("warning" if any(name == "warning" for name, _ in said) else "hub"), ". ".join(text for _, text in said)

    def _viewer_pushed(self) -> tuple[str, str] | None:
        """Viewers' keys refused on the ingest since last asked, said once a key (a refused
        client tries again every few seconds)."""
        names: list[str] = []
        while self._pushed:
            key = self._pushed.popleft()
            if key not in self._pushed_said:
                self._pushed_said.add(key)
                names += [name for name, k in self._viewers.keys.items() if k == key] or ["a viewer key removed since"]
        if not names:
            return None
        return "warning", (
            f"refused {', '.join(sorted(set(names)))} ({self._viewers.folder}) on the ingest port: a viewer's key watches "
            f"and never publishes (a rank needs a key in {self.folder})"
        )

    def stop(self) -> None:
        self._auth.stop()


def _listing(folder: Path) -> tuple:
    """What changes when a file in ``folder`` is added, removed, renamed or rewritten, or when
    the folder's owner or mode changes (who may put keys there)."""
    try:
        st = os.stat(folder)
        names = sorted(os.listdir(folder))
    except OSError as exc:
        return (exc.errno,)
    files: list[tuple] = []
    for name in names:
        try:
            f = os.stat(folder / name)
        except OSError as exc:
            files.append((name, exc.errno))
            continue
        files.append((name, f.st_ino, f.st_size, f.st_mtime_ns, f.st_mode, f.st_uid))
    return (st.st_uid, st.st_mode, tuple(files))


def load_client_keys(curve_dir: str | os.PathLike[str]) -> ClientKeys:
    """A rank's or a viewer's keys. What is missing or damaged in a copy of the hub's folder is
    copied again from it: new keys made here would never match a hub that runs (and `pardash
    keys` refuses a folder that holds a client's keys). Only in the hub's own folder (it holds
    ``server.key_secret``) is making them again the way."""
    d = Path(curve_dir)
    _check_folder(d)
    hubs_folder = (d / f"{SERVER}.key_secret").exists()
    if hubs_folder:
        missing_pair = damaged_pair = _renew(d)
    else:
        damaged_pair = f"copy {CLIENT}.key_secret again from the hub's key folder (the one `pardash keys` made) into {d}"
        missing_pair = (
            f"copy {CLIENT}.key_secret and {SERVER}.key from the hub's key folder (the one `pardash keys` made) into {d}"
            if _holds_keys(d)
            else f"copy the hub's key folder (the one `pardash keys` made) to {d}, or make keys with `pardash keys --dir {d}` "
            "and start the hub with them"
        )
    public, secret = _load(d / f"{CLIENT}.key_secret", secret=True, missing=missing_pair, damaged=damaged_pair)
    server_public, _ = _load(
        d / f"{SERVER}.key", secret=False,
        missing=f"ranks and viewers need the hub's public key: copy {SERVER}.key from the hub's key folder into {d}",
        damaged=f"copy {SERVER}.key again from the hub's key folder into {d}",
    )  # fmt: skip
    assert secret is not None
    return ClientKeys(public=public, secret=secret, server_public=server_public)


def load_server_keys(curve_dir: str | os.PathLike[str]) -> ServerKeys:
    """A hub's keys. A folder without them is made with `pardash keys --dir DIR`, unless it holds
    a client's keys (a rank's copy, given to the hub), which that refuses to replace."""
    d = Path(curve_dir)
    _check_folder(d)
    if (d / f"{CLIENT}.key_secret").exists():
        missing = (
            f"{d} holds a rank's or viewer's keys, not the hub's key pair: give the hub the folder `pardash keys` made "
            "(the one with server.key_secret), or make a new one with `pardash keys --dir NEW_DIR`"
        )
    else:
        missing = f"make keys with `pardash keys --dir {d}`"
    damaged = f"put back a good copy of it, or {_renew(d)}"
    public, secret = _load(d / f"{SERVER}.key_secret", secret=True, missing=missing, damaged=damaged)
    assert secret is not None
    auth = d / AUTHORIZED
    _check_folder(auth)
    admitted = authorized_keys(auth)
    if not admitted:
        ours = d / f"{CLIENT}.key"
        fix = f"copy {ours} there" if ours.is_file() else f"copy there the {CLIENT}.key of each rank and viewer to let in"
        raise CurveKeyError(f"no authorised client keys in {auth}, so the hub would let no one in; {fix}")
    _check_folder(d / VIEWERS)  # (none: the hub admits no viewer's key, as before there were any)
    watching = authorized_keys(d / VIEWERS, viewers=True)
    return ServerKeys(public=public, secret=secret, authorized=auth, admitted=admitted, watching=watching)


def authorized_keys(folder: Path, *, viewers: bool = False) -> dict[str, bytes]:
    """The public key (Z85) of each ``*.key`` file in ``folder``, by file name, as pyzmq's
    authenticator reads them, each checked: given one file it could not read, the authenticator
    admitted nobody at all and said only "Failed to load CURVE certs" in a log the hub never
    shows. Raises :class:`CurveKeyError` naming the first bad file; {} for a missing folder.
    ``viewers``: ``folder`` is ``authorized_viewers/`` (said so of a bad file)."""
    keys: dict[str, bytes] = {}
    try:
        names = sorted(e.name for e in os.scandir(folder))
    except FileNotFoundError:
        return keys
    except OSError as exc:
        raise CurveKeyError(f"cannot read {folder} ({exc.strerror or exc}); {_privacy_advice(folder)}") from None
    for name in names:
        if name.startswith(".") or not name.endswith(".key"):  # what pyzmq's glob('*.key') takes
            continue
        path = folder / name
        try:
            keys[name] = _public_key(path)
        except ValueError as exc:
            fix = (f"make it again with `pardash keys --viewer {name[:-4]} --force`" if viewers
                   else "put there a client.key that `pardash keys` made")  # fmt: skip
            raise CurveKeyError(f"{path} is not a {'viewer' if viewers else 'client'}'s public key ({exc}); remove it, or {fix}") from None
    return keys


def _public_key(path: Path) -> bytes:
    """The CURVE public key in a ``.key`` file; ValueError says what is wrong with the file."""
    import zmq.auth
    from zmq.utils import z85

    try:
        public, _ = zmq.auth.load_certificate(path)
    except OSError as exc:
        raise ValueError(f"cannot read it: {exc.strerror or exc}") from None
    except (ValueError, IndexError):  # no line "public-key = ...", or one without its "="
        raise ValueError("no public-key line") from None
    try:
        if len(z85.decode(public)) != 32:
            raise ValueError
    except (ValueError, KeyError):
        raise ValueError("its public-key is not 40 Z85 characters") from None
    return public


def client_keys(curve: ClientKeys | str | os.PathLike[str] | bool | None = None) -> ClientKeys | None:
    """Client keys from ``curve`` (keys or their folder), else from ``$PARDASH_CURVE_DIR``;
    None when neither names any, or ``curve`` is False (a plain connection)."""
    if isinstance(curve, ClientKeys):
        return curve
    if curve is False:
        return None
    folder = curve if curve else curve_dir_from_env()
    return load_client_keys(folder) if folder else None


def server_keys(curve: ServerKeys | str | os.PathLike[str]) -> ServerKeys:
    return curve if isinstance(curve, ServerKeys) else load_server_keys(curve)
