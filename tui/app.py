"""The pardash Textual app: owns a telemetry source and polls it; screens draw the run.

The CLI and the snapshot tests build the app the same way, through :func:`make_app`::

    app = make_app(HubClient.attach(target), launched=True)
    choice = app.run()        # "stop", "detach", "quit" or None (treat None as "detach")
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import ClassVar

import zmq
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.timer import Timer

from pardash.telemetry.client import HUB_QUIET_S, Source
from pardash.telemetry.printer import HUB_LOST_WARNING, hub_lost_words, run_over

from .messages import RunUpdated
from .pacing import DrawPacer
from .screens.dashboard import DashboardScreen, ReplayDashboardScreen
from .screens.help import HelpScreen
from .screens.quit import OVER, QuitScreen
from .styles import sixteen_colour_variables

POLL_S = 0.1
"""How often the app asks the source for new frames (the hub sends at most 10 a second); a
live hub's frames also wake the app as they arrive (see ``_watch_sockets``)."""
IDLE_POLL_S = 1.0
"""How often it asks once nothing more is coming by itself: a replay paused or at its end
(a key that plays it again polls at once, and at POLL_S after), or a live run whose every rank
is done and whose hub has gone quiet (its frames, a late note, wake the app as they arrive)."""
GC_THRESHOLD = (10_000, 10, 10)
"""Allocations between the collector's young-generation passes while the app runs (Python's
default is 700). A frame at 1024 ranks allocates tens of thousands of short-lived objects that
reference counting frees; at 700 the collector ran a dozen times a frame and pushed survivors
into full collections that walk every widget: a fifth of a frame's CPU, and its slowest frames."""
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
"""Replay speeds that + and - step through."""
SEEK_S = 10.0
"""How far ``[`` and ``]`` move a replay."""
JUMP_S = 60.0
"""How far ``{`` and ``}`` move a replay at the least: a tenth of a run longer than 10 minutes."""
JOB_CHECK_S = 1.0
"""How often the app asks the launch whether its job has ended (``job_over``: torchrun exited),
while the ranks' messages do not say so (a rank silent, or never heard from)."""

QUIT = "quit"
"""Return value when a viewer that did not launch the job quits."""

ExitChoiceCallback = Callable[[str], None]


def _terminal_size_its_own() -> None:
    """Draw in the terminal at its own size: COLUMNS and LINES exported (a container's, a CI
    job's) stand for it where Rich and Textual ask (the app's console, made with the app;
    shutil.get_terminal_size), and a TUI drawn at 400x100 in an 80x24 terminal was garbled
    (review 279). Dropped from this process only, where the terminal says its size (a
    pseudo-terminal given none keeps them)."""
    try:
        size = os.get_terminal_size(sys.__stdout__.fileno())
    except (AttributeError, ValueError, OSError):
        return
    if size.columns > 0 and size.lines > 0:
        for var in ("COLUMNS", "LINES"):
            os.environ.pop(var, None)


class PardashApp(App[str | None]):
    """A terminal dashboard for one distributed training run.

    The app owns ``source`` (a live :class:`~pardash.telemetry.client.HubClient` or a
    :class:`~pardash.telemetry.client.ReplaySource`), polls it every 100 ms without blocking,
    and posts :class:`RunUpdated` to the active screen when something changed. It closes the
    source when it exits. Its return value says how the user left: ``"stop"`` or ``"detach"``
    (launched runs) or ``"quit"``.
    """

    TITLE = "pardash"
    ENABLE_COMMAND_PALETTE = True

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit", tooltip="Quit (a job pardash launched asks: stop or detach)"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("space", "pause", "Pause", tooltip="Pause the replay"),
        Binding("space", "play", "Play", tooltip="Resume the replay"),
        # A replay's footer shows its keys in pairs: "+/- Speed", "[/] Seek" (the help has each).
        Binding("plus,equals_sign", "speed(1)", "Speed", key_display="+/-", tooltip="Faster (+), slower (-)"),
        Binding("minus", "speed(-1)", "Slower", key_display="-", show=False),
        Binding("left_square_bracket", "seek(-1)", "Seek", key_display="[/]", tooltip="Back ([) or forward (]) 10 s"),
        Binding("right_square_bracket", "seek(1)", "Forward 10 s", key_display="]", show=False),
        Binding("left_curly_bracket", "jump(-1)", "Jump", key_display="{/}", tooltip="Back ({) or forward (}) 60 s, a tenth of a run over 10 min"),
        Binding("right_curly_bracket", "jump(1)", "Jump forward", key_display="}", show=False),
        Binding("less_than_sign", "ends(-1)", "Start/end", key_display="</>", tooltip="To the run's start (<) or end (>)"),
        Binding("greater_than_sign", "ends(1)", "To the end", key_display=">", show=False),
        # (as less and vim: the shell's `fg` brings it back; the job trains on meanwhile)
        Binding("ctrl+z", "suspend_process", "Suspend", show=False),
    ]

    REPLAY_ACTIONS = frozenset({"pause", "play", "speed", "seek", "jump", "ends"})

    def __init__(
        self,
        source: Source,
        *,
        launched: bool = False,
        title: str = "",
        on_exit_choice: ExitChoiceCallback | None = None,
        job_over: Callable[[], bool] | None = None,
        notice: str = "",
        come_back: str = "",
        output: str = "",
        attached: bool = False,
        runs_dir: str = "runs",
        remote_hub: str = "",
    ) -> None:
        super().__init__()
        self.source = source
        self.remote_hub = remote_hub
        """On a node > 0 of a launch: node 0's hub (its ingest, as the user gave it). Quiet past
        HUB_LOST_S, it is said unreachable (the header, a warning), not "hub quiet"."""
        self._lost_told = False
        self.attached = attached
        """A viewer of a job it did not launch (``pardash attach``; ``launched`` when it can stop
        it): Ctrl+C twice detaches, not stops."""
        self.output = output
        """The ranks' output file the launch gave ('': found from the source, see output_file)."""
        self.runs_dir = runs_dir
        """The runs folder a replayed log's run folder is looked for in (its --runs-dir)."""
        self.come_back = come_back
        """The command that watches this run again, said by the quit dialog's Detach (default
        `pardash attach RUN_ID`; a node > 0's launch serves no id here, and a run with keys
        needs them)."""
        """Where the run comes from; the app polls it and closes it on exit."""
        self.launched = launched
        """True when this viewer started the job: quitting asks stop or detach."""
        self.job_over = job_over
        """Whether the launched job has ended (None: judged from its ranks alone)."""
        self._job_ended = False
        """``job_over`` said so (it stays so): the state's ``job_ended``, the alerts say it."""
        self._job_checked = -JOB_CHECK_S
        self.on_exit_choice = on_exit_choice
        self.version = 0
        """Counts polls that changed the run's state (screens redraw slow panels on change).
        A live hub's frames come at 10 Hz, messages or not: one that brought no message and
        the same counters changes nothing shown, and leaves it as it was (see :meth:`_seen`)."""
        self._seen_key: tuple = ()
        self._last_change = time.monotonic()
        """When the source last had something (any frame from a live hub: "hub quiet" counts from it)."""
        self._quiet_told = -1
        """The whole seconds of quiet the screens were last told of (see :meth:`_poll`)."""
        self._poll_timer: Timer | None = None
        self._poll_every = POLL_S
        self._poll_error = ""
        self._pacer = DrawPacer(POLL_S)
        """How often a live run's frames are drawn (tui/pacing.py)."""
        self.paced: bool | None = None
        """Whether a live run's frames are drawn at the pacer's pace (None: where the app draws
        on a terminal, not under the tests' pilot)."""
        self._undrawn = False
        """The screens have not been told of the last change yet (the pacer's wait)."""
        self._gc_saved: tuple[int, ...] | None = None
        self.notice = notice
        """Said once the screen is up (a note printed before it would be hidden behind it)."""
        self.end_with: str | None = None
        """The result to exit with as soon as the app can (a launch's SIGTERM or SIGHUP): an
        ``exit()`` asked before the app's loop took it was lost, and the app ran on, job and all,
        with its launch past the signal (a CI run's terminal closed as the screen came up)."""
        if title:
            self.title = title

    def get_css_variables(self) -> dict[str, str]:
        # On a terminal of 16 colours (TERM=xterm, screen, linux) the theme's error, warning and
        # success colours that would come out of another hue there are replaced by ones that
        # keep it: a stalled rank was drawn grey (see styles.sixteen_colour_variables). Not under
        # NO_COLOR, where every colour is drawn as a grey of its lightness: a pure red's is the
        # header's dark grey, and its "◆ 1 stalled" was not there.
        variables = super().get_css_variables()
        if self.console.color_system in ("standard", "windows") and not self.no_color:
            variables.update(sixteen_colour_variables(variables, dark=self.current_theme.dark))
            self.theme_variables = variables
        return variables

    # -- the source ---------------------------------------------------------------------------

    def get_default_screen(self) -> Screen:
        return DashboardScreen() if self.source.live else ReplayDashboardScreen()

    def on_mount(self) -> None:
        if self.notice:
            self.notify(self.notice, severity="warning", timeout=15)
        self.app_resume_signal.subscribe(self, self._repaint_all)
        self._poll()
        self._poll_timer = self.set_interval(self._poll_every, self._poll)
        self._watch_sockets()
        self.call_after_refresh(self._settle_gc)

    def _repaint_all(self, _app: object = None) -> None:
        """Draw the whole screen again as the app comes back from a suspend (Ctrl-Z, then the
        shell's `fg`): the terminal's screen was the shell's meanwhile, and only the cells that
        changed came back (no borders, headers or footer for as long as they stayed alike)."""
        self.refresh(layout=True)

    def _settle_gc(self) -> None:
        """Leave the objects built so far (widgets, styles, the stylesheet) out of the cyclic
        collector's passes, and make the passes rarer (see GC_THRESHOLD); undone on unmount."""
        if self._gc_saved is None:
            self._gc_saved = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(*GC_THRESHOLD)

    def _restore_gc(self) -> None:
        if self._gc_saved is not None:
            gc.set_threshold(*self._gc_saved)
            gc.unfreeze()
            self._gc_saved = None

    def _watch_sockets(self) -> None:
        """Poll as soon as a live hub's frame or snapshot arrives, rather than up to a poll
        interval later: a rank's step then reaches the screen one frame after the hub has it.
        The timer stays, for replays and as a fallback."""
        self._watched: list[tuple[int, zmq.Socket]] = []
        loop = asyncio.get_running_loop()
        # A live hub's sockets (a source without them, e.g. a replay, is polled by the timer).
        sockets = getattr(self.source, "sockets", None)
        for sock in sockets() if callable(sockets) else ():
            if not isinstance(sock, zmq.Socket) or sock.closed:
                continue
            fd = sock.getsockopt(zmq.FD)
            loop.add_reader(fd, self._socket_ready, sock)
            self._watched.append((fd, sock))

    def _socket_ready(self, sock: zmq.Socket) -> None:
        # ZeroMQ's descriptor stays readable until the socket's events are read: read them
        # first, whatever the poll does, or the loop would call back without end.
        if sock.closed:
            return
        if sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            self._poll()

    def _unwatch_sockets(self) -> None:
        loop = asyncio.get_running_loop()
        for fd, _sock in getattr(self, "_watched", ()):
            loop.remove_reader(fd)
        self._watched = []

    def _poll(self) -> None:
        if self.end_with is not None:
            self.exit(self.end_with)
            return
        try:
            changed = self.source.poll()
        except Exception as exc:  # a bad frame must not take the dashboard down
            message = f"telemetry source error: {exc}"
            if message != self._poll_error:
                self._poll_error = message
                self.notify(message, severity="error", timeout=10)
            return
        now = time.monotonic()
        if self._job_ends(now) and not changed:
            self._tell_updated()
        if changed:
            self._last_change = now
            self._quiet_told = -1
            self._lost_told = False
            if not self.source.live or self._seen():
                self.version += 1
            # (told even when nothing shown changed: a screen may count time from frames)
            self._undrawn = True
        elif self.source.live and now - self._last_change > HUB_QUIET_S:
            # Keep the "hub quiet" counter in the header moving: told once a second.
            quiet = int(now - self._last_change)
            if quiet != self._quiet_told:
                self._quiet_told = quiet
                self._tell_updated()
            lost = hub_lost_words(self.remote_hub, self.hub_quiet_s)
            if lost and not self._lost_told and not run_over(self.source.state) and not self.source.state.job_ended:
                # (node 1's TUI said "● 2 running · hub quiet for 106 s" for minutes of node 0
                # powered off, as its headless progress did before it said so)
                self._lost_told = True
                self.notify(lost + HUB_LOST_WARNING, title="node 0 unreachable", severity="warning", timeout=30)
        # A live run's frames drawn as often as the viewer can afford: drawing each 10 Hz frame
        # took 7-12% of a core from two CPU-bound ranks on 2 cores, 20% of their steps (review
        # 303). (Not under the tests' pilot, which has no terminal to spare.)
        paced = self.source.live and (self.paced if self.paced is not None else not self.is_headless)
        if self._undrawn and (not paced or self._pacer.due(now)):
            self._undrawn = False
            self._pacer.drawn(now)
            self._tell_updated()
        if paced:
            self._pacer.tick(now)
        self._pace(IDLE_POLL_S if not changed and not self._undrawn and self._idle() else POLL_S)

    def _job_ends(self, now: float) -> bool:
        """Whether the launch's own job is now known to have ended (torchrun exited), which its
        ranks' messages may never say (a rank silent, killed with its node; one never heard
        from): the state takes it (``RunState.job_ended``), for the alerts to say. True once,
        and again for a new state (a snapshot) that does not know it yet."""
        state = self.source.state
        if self.job_over is None or state.job_ended:
            return False
        if not self._job_ended and now - self._job_checked >= JOB_CHECK_S:
            self._job_checked = now
            self._job_ended = self._ask_job_over()
        if not self._job_ended:
            return False
        state.job_ended = True
        self.version += 1  # (said even where no message came: the hub's frames go on, empty)
        return True

    def _ask_job_over(self) -> bool:
        try:
            return bool(self.job_over())  # type: ignore[misc]
        except Exception:  # (a launch that cannot tell: the ranks' word stands)
            return False

    def _seen(self) -> bool:
        """Whether what a live source's poll took changes what the screens show: a snapshot
        (a new state), a message (each one counts in ``state.counts``), the hub's counters, or
        the viewer's standing with the hub. A frame with none of these (the hub frames at
        10 Hz, messages or not: all along once a job has ended) redrew the whole dashboard."""
        src = self.source
        state = src.state
        key = (id(state), sum(state.counts.values()), src.stats, getattr(src, "synced", True), getattr(src, "refused", ""), getattr(src, "hub_id", ""))
        if key == self._seen_key:
            return False
        self._seen_key = key
        return True

    def _idle(self) -> bool:
        """Nothing more comes by itself: a replay paused or at its end; a live run over
        (every rank done) whose hub is quiet, its frames watched (one wakes the app)."""
        src = self.source
        if not src.live:
            return bool(getattr(src, "paused", False) or getattr(src, "done", False))
        return (
            bool(getattr(self, "_watched", None))
            and getattr(src, "synced", True)
            and self.hub_quiet_s is not None
            and run_over(src.state)
        )

    def _pace(self, every: float) -> None:
        """Poll every ``every`` seconds from now on (the timer made again when it changes)."""
        if every == self._poll_every or self._poll_timer is None:
            return
        self._poll_every = every
        self._poll_timer.stop()
        self._poll_timer = self.set_interval(every, self._poll)

    def _tell_updated(self) -> None:
        """Post RunUpdated to the active screen and, under a modal one (help, the quit
        dialog), to the screens it shows through: the dashboard behind stays live."""
        for screen in reversed(self.screen_stack):
            screen.post_message(RunUpdated(self.version))
            if not screen.is_modal:
                break

    @property
    def hub_lost(self) -> str:
        """On a node > 0, node 0's hub unreachable, as the header says it ('' otherwise)."""
        return "" if run_over(self.source.state) else hub_lost_words(self.remote_hub, self.hub_quiet_s, short=True)

    @property
    def hub_quiet_s(self) -> float | None:
        """Seconds since the live hub's last frame, when that is longer than it should be."""
        if not self.source.live or not getattr(self.source, "synced", True):
            return None
        quiet = time.monotonic() - self._last_change
        return quiet if quiet > HUB_QUIET_S else None

    def _moved(self) -> None:
        self.version += 1
        self._pace(POLL_S)  # (a paused or ended replay played, sped or sought: at 10 Hz again)
        self._tell_updated()

    def on_unmount(self) -> None:
        self._unwatch_sockets()
        self._restore_gc()
        try:
            self.source.close()
        except Exception:
            pass

    # -- replay -------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.REPLAY_ACTIONS and self.source.live:
            return False
        if action in ("pause", "play"):  # space says what it will do: Pause while playing, Play when paused
            return getattr(self.source, "paused", False) == (action == "play")
        return True

    def action_pause(self) -> None:
        src = self.source
        src.paused = not src.paused  # type: ignore[attr-defined]
        self.refresh_bindings()
        self._moved()

    def action_play(self) -> None:
        self.action_pause()

    def action_speed(self, direction: int) -> None:
        src = self.source
        speed = src.speed  # type: ignore[attr-defined]
        # Past the steps' ends (--speed 100 or 0.1), the key leaves the speed as it is: + took
        # 100x down to 64x, - took 0.1x up to 0.25x.
        if direction > 0:
            faster = [s for s in SPEEDS if s > speed]
            src.speed = faster[0] if faster else speed  # type: ignore[attr-defined]
        else:
            slower = [s for s in SPEEDS if s < speed]
            src.speed = slower[-1] if slower else speed  # type: ignore[attr-defined]
        self._moved()

    def action_seek(self, direction: int) -> None:
        self._seek_to(self.source.position_s + direction * SEEK_S)  # type: ignore[attr-defined]

    def action_jump(self, direction: int) -> None:
        src = self.source
        self._seek_to(src.position_s + direction * max(JUMP_S, src.duration_s / 10))  # type: ignore[attr-defined]

    def action_ends(self, direction: int) -> None:
        self._seek_to(0.0 if direction < 0 else self.source.duration_s)  # type: ignore[attr-defined]

    def _seek_to(self, position_s: float) -> None:
        # The header says the new position at once; the jump comes after the keys already
        # typed, so a burst of presses is one jump (a seek back goes on from a keyframe, or the
        # log's start).
        self.source.seek_soon(position_s)  # type: ignore[attr-defined]
        self._moved()
        self.call_later(self._seek_now)

    def _seek_now(self) -> None:
        if self.source.seek_now():  # type: ignore[attr-defined]
            self._moved()

    # -- leaving ------------------------------------------------------------------------------

    def action_screenshot(self, filename: str | None = None, path: str | None = None) -> None:
        """The palette's screenshot, into the run's folder where there is one, else a cache
        folder; the notification says where. Textual's default, the user's Downloads folder, is
        often missing on a training node (it then said only "failed"), and the current folder
        filled a project's checkout with SVGs."""
        self.deliver_screenshot(filename, path or screenshot_folder(self.source))

    async def action_quit(self) -> None:
        if not self.launched:
            self._leave(QUIT)
            return
        if isinstance(self.screen, QuitScreen):
            return
        if self._over():
            self._leave(OVER)  # every rank is done: no job to stop or leave running
            return
        run_id = self.source.state.run_id
        self.push_screen(QuitScreen(run_id, over=self._over, come_back=self.come_back, attached=self.attached), self._quit_chosen)

    async def action_help_quit(self) -> None:
        """Ctrl+C quits as q does (Textual only says to press ctrl+q): what a person used to
        nvitop, htop or a training script presses first."""
        await self.action_quit()

    def _over(self) -> bool:
        """The job is over: the launched job has ended (torchrun exited, whatever its ranks
        said: one silent, killed with its node, or never heard from), or every rank is done and
        no torchrun restart may bring them back (every one finished); ranks that failed with
        --max-restarts left are not."""
        state = self.source.state
        if self.job_over is not None and not self._job_ended:
            self._job_ended = self._ask_job_over()
        if self._job_ended:
            # (it read "1 silent, 1 exited" with Stop and Detach offered for a job whose
            # torchrun had exited: only the launch, its supervisor and the hub were left)
            return True
        return run_over(state) and (self.job_over is None or all(r.finished for r in state.ranks.values()))

    def _quit_chosen(self, choice: str | None) -> None:
        if choice:
            self._leave(choice)

    def _leave(self, choice: str) -> None:
        if self.on_exit_choice is not None:
            self.on_exit_choice(choice)
        self.exit(choice)

    # -- help and the command palette ---------------------------------------------------------

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
        else:
            self.push_screen(HelpScreen())

    @property
    def dashboard(self) -> DashboardScreen:
        return self.screen_stack[0]  # type: ignore[return-value]

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        dash = self.dashboard
        yield SystemCommand("Grid: cells or heat map", "Switch the rank grid's form (c)", dash.action_toggle_form)
        yield SystemCommand("Grid: flagged ranks only / all", "Filter the rank grid (f)", dash.action_toggle_flagged)
        for key, label in (
            ("rank", "rank"),
            ("step_time", "step time"),
            ("self_time", "self time (stragglers first)"),
            ("memory", "memory held"),
            ("status", "status (worst first)"),
        ):
            yield SystemCommand(
                f"Grid: sort by {label}", f"Order the ranks by {label}", lambda k=key: dash.action_sort(k)
            )
        yield SystemCommand("Memory", "Per-rank memory against unsharded (m)", dash.action_memory)
        yield SystemCommand("Output", "The ranks' own output, as the script prints it (o)", dash.action_output)
        yield SystemCommand("Help", "Keys and what the figures mean (?)", self.action_help)
        if not self.source.live:
            yield SystemCommand("Replay: pause / resume", "Pause or resume the replay (space)", self.action_pause)
            yield SystemCommand("Replay: faster", "Double the replay speed (+)", lambda: self.action_speed(1))
            yield SystemCommand("Replay: slower", "Halve the replay speed (-)", lambda: self.action_speed(-1))
        for command in super().get_system_commands(screen):
            if command.title == "Screenshot":  # Textual's own saves to ~/Downloads, not action_screenshot
                yield SystemCommand(
                    command.title, "Save an SVG of the screen in the run's folder (else a cache folder)",
                    lambda: self.set_timer(0.1, self.action_screenshot),
                )
            else:
                yield command


def screenshot_folder(source: Source) -> str:
    """Where a screenshot of ``source``'s run goes: the run's own folder (a launched run's
    ``runs/<id>/``, the folder of its ``telemetry.jsonl``) when it can be written, else
    ``$XDG_CACHE_HOME/pardash/screenshots`` (``~/.cache``), else the temporary folder's."""
    log = getattr(source.stats, "log_path", "") or getattr(source, "path", "") or ""  # (a replay's: its file)
    run_id = source.state.run_id or ""
    try:
        folder = os.path.dirname(os.path.abspath(log)) if log and log != os.devnull else ""
    except OSError:  # (a relative path, and the folder it is relative to was deleted)
        folder = ""
    if folder:
        own = os.path.basename(folder) == run_id or os.path.basename(log).startswith("telemetry.jsonl")
        if own and os.path.isdir(folder) and os.access(folder, os.W_OK):
            return folder
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for folder in (os.path.join(cache, "pardash", "screenshots"), os.path.join(tempfile.gettempdir(), f"pardash-screenshots-{os.getuid()}")):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return folder
    return tempfile.gettempdir()


def make_app(
    source: Source,
    *,
    launched: bool = False,
    title: str = "",
    on_exit_choice: ExitChoiceCallback | None = None,
    job_over: Callable[[], bool] | None = None,
    notice: str = "",
    come_back: str = "",
    output: str = "",
    attached: bool = False,
    runs_dir: str = "runs",
    remote_hub: str = "",
) -> PardashApp:
    """Build the dashboard over ``source``.

    ``launched``: this viewer started the job, so ``q`` asks whether to stop it or detach.
    ``title``: the terminal title (default "pardash"). ``on_exit_choice``: called with
    ``"stop"``, ``"detach"`` or ``"quit"`` the moment the user decides, before the app exits
    (so the CLI can start stopping the job while the terminal is restored). ``app.run()``
    returns the same string, or None if the app ended another way (treat it as detach).
    ``job_over``: whether the launched job has ended (ranks that failed may be restarted by
    torchrun; until the job says so, ``q`` asks). ``notice``: a warning shown once the
    dashboard is up (what the CLI printed before it, which the dashboard would hide).
    ``come_back``: the command that watches the run again (default ``pardash attach RUN_ID``).
    ``output``: the file the ranks' output goes to (the launch's; an attached run's is found in
    its folder, a replayed log's beside it): ``o`` shows it. ``attached``: a viewer of a job it
    did not launch (``pardash attach``), which Ctrl+C twice leaves (the launch's own stops it).
    ``runs_dir``: where a replayed log's run folder (its output) is looked for besides beside it.
    ``remote_hub``: on a node > 0 of a launch, node 0's hub, said unreachable when quiet long.
    """
    _terminal_size_its_own()  # (before the app's console is made: it reads them then)
    return PardashApp(source, launched=launched, title=title, on_exit_choice=on_exit_choice, job_over=job_over, notice=notice,
                      come_back=come_back, output=output, attached=attached, runs_dir=runs_dir, remote_hub=remote_hub)  # fmt: skip
