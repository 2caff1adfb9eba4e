"""The memlens main window: run and technique panels, live timeline plots, events, pins.

The window owns at most one RunSession (the worker thread) and one RunSeries (what the plots
show: the live run or a loaded one). A ~30 Hz timer pulls the rows added since the last tick
and redraws the curves; text (legends, status bar, the "what just happened" line) is
refreshed at a slower rate. Nothing here blocks on the training thread.

The parts beside it (app/window/*) get what they use in their constructors: widgets, the
settings, and the window itself only as a RunOnScreen (shown_run.py), never its attributes.
The menus are listed in one place, _build_menus; events-list actions in _connect.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QLabel, QMainWindow, QMessageBox

from memlens.app.app_settings import AppSettings
from memlens.app.graph.tab import GraphTab
from memlens.app.lessons.tab import LessonsTab
from memlens.app.panels.error_banner import ErrorBanner
from memlens.app.panels.events_panel import EventsPanel
from memlens.app.panels.pin_compare import PinCompare
from memlens.app.panels.pins_panel import PinsPanel
from memlens.app.panels.run_panel import RunPanel
from memlens.app.panels.status_bar import RunStatusBar
from memlens.app.panels.techniques_panel import TechniquesPanel
from memlens.app.panels.window_state import WindowState
from memlens.app.resources import app_icon
from memlens.app.series.pins import PinnedRun
from memlens.app.series.run_series import RunSeries
from memlens.app.timeline.plot_stack import PlotStack
from memlens.app.window.amp_support import AmpSupport
from memlens.app.window.event_feed import EventFeed
from memlens.app.window.export_dialog import RunExport
from memlens.app.window.fix_session import FixSession
from memlens.app.window.frame_clock import FrameClock
from memlens.app.window.help_menu import HelpMenu
from memlens.app.window.layout import centre_tabs, left_dock, right_docks
from memlens.app.window.menus import add_action
from memlens.app.window.open_paths import Opener
from memlens.app.window.opening import RunOpening
from memlens.app.window.pins import PinBoard
from memlens.app.window.quit_now import offer_quit_now
from memlens.app.window.rank_chooser import RankChooser
from memlens.app.window.run_session import RunSession, TrainFn
from memlens.app.window.run_state import (
    StartingText,
    finished_text,
    live_state,
    techniques_target,
    window_title,
)
from memlens.app.window.runs_dock import RunsDock
from memlens.app.window.runs_folder import RunsFolderChoice
from memlens.app.window.screen_fit import fit_first_size
from memlens.app.window.side_room import SideRoom
from memlens.app.window.theme_menu import ThemeMenu
from memlens.app.window.toggle_effects import EFFECT_HINT, ToggleEffects
from memlens.app.window.view_actions import ViewActions
from memlens.app.window.watch_script import ScriptWatching
from memlens.app.window.x_axis_menu import XAxisMenu
from memlens.core.config import RunConfig
from memlens.core.history import RunHistory
from memlens.core.model_file import preset_label
from memlens.core.options import ConfigError, format_value, is_model_file
from memlens.core.records import RunEvent

pg.setConfigOptions(antialias=False, foreground="#333333", background="w")

RUNS_DIR_FROM_SETTINGS = "settings"  # MainWindow's runs_dir: the remembered runs folder
# Closing waits this long for the run to stop (a frame or two) before it says "stopping…"
# and lets the window go on painting.
CLOSE_WAIT_MS = 30


class MainWindow(QMainWindow):
    """`train_fn` defaults to memlens.core.loop.run_training; tests and benchmarks may pass
    memlens.core.synthetic.synthetic_training. `runs_dir`: where runs are written; by default
    the runs folder File > Runs folder set (app_settings); None keeps runs in memory only.
    `settings`: what is remembered between launches (app.app_settings; by default nothing)."""

    def __init__(self, config: RunConfig | None = None, *,
                 runs_dir: Path | str | None = RUNS_DIR_FROM_SETTINGS,
                 train_fn: TrainFn | None = None,
                 settings: AppSettings | None = None) -> None:
        super().__init__()
        self.app_settings = settings = settings or AppSettings()
        config = config or settings.saved_run_config() or RunConfig()
        self.setObjectName("main_window")
        self.setWindowTitle("memlens")
        self.runs_folder = RunsFolderChoice(self, settings, settings.runs_folder()
                                            if runs_dir == RUNS_DIR_FROM_SETTINGS
                                            else runs_dir)
        self.train_fn = train_fn
        self.session: RunSession | None = None
        self.history: RunHistory | None = None  # what the plots show: live or loaded
        self.series: RunSeries | None = None
        self.loaded_from: Path | None = None
        self.state = WindowState.IDLE
        self._state_message = ""
        self._error_event: RunEvent | None = None
        self._reset_pending = False
        self._close_pending = False
        self._quit_now = False  # "Quit now" chosen: close without waiting for the run
        self.starting = StartingText()  # what a starting run says it waits for
        self._starting_shown = ""
        self._make_widgets(config)
        self._make_parts(settings)
        self._build_menus()
        # The Runs dock before the layout is restored: its open state is remembered too.
        self.runs_dock = RunsDock(self, self.runs_dir, self.board, self.say, self.view_menu)
        self.script_watch = ScriptWatching(  # File > Watch a script…
            self, self.opening, self.techniques_panel, self.run_panel, self.app_settings,
            self.runs_dir)
        self.fixing = FixSession(  # Try the fix / Write the fix under a diagnosis
            self, self.events_panel, lambda: (self.history, self.loaded_from),
            self.board.add_history)
        self.amp_support = AmpSupport(self.run_panel, self.techniques_panel, self)
        self.setWindowIcon(app_icon())
        settings.restore_window(self)
        self._connect()
        self.set_state(WindowState.IDLE)

        self.clock = FrameClock(
            self, self.plots, self._pull, lambda spread: self._refresh_text(spread=spread),
            live=lambda: self.running or self.following,
            urgent=lambda: (self.state == WindowState.STARTING and self.history is not None
                            and bool(self.history.meta)))

    def _make_widgets(self, config: RunConfig) -> None:
        self.run_panel = RunPanel(config)
        self.techniques_panel = TechniquesPanel(config.techniques)
        self.plots = PlotStack()
        self.events_panel = EventsPanel()
        self.pins_panel = PinsPanel()
        self.pin_compare = PinCompare()
        self.status = RunStatusBar()
        self.setStatusBar(self.status)
        # A torchrun job's parent folder (rank0/, rank1/, ...): which rank is shown.
        self.rank_chooser = RankChooser()
        self.status.addPermanentWidget(self.rank_chooser)
        self.error_banner = ErrorBanner()
        self.effect_label = QLabel(EFFECT_HINT)
        self.effect_label.setObjectName("effect_label")
        # A long effect (every phase, an interval) wraps instead of widening the window.
        self.effect_label.setWordWrap(True)
        self.effect_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.graph_tab = GraphTab(
            recent=lambda: self.history.graphs[-8:] if self.history is not None else [],
            capture_every=lambda: self.run_panel.fields["capture_every"].value())
        self.lessons_tab = LessonsTab(self.runs_dir)
        run_scroll = left_dock(self, self.run_panel, self.techniques_panel)
        self.tabs = centre_tabs(self, [self.error_banner, self.effect_label], self.plots,
                                [(self.graph_tab, "Autograd graph"),
                                 (self.lessons_tab, "Lessons")])
        events_dock, pins_dock = right_docks(self, self.events_panel, self.pins_panel,
                                             self.pin_compare)
        self.side_room = SideRoom(self, run_scroll, self.run_panel, events_dock, pins_dock)
        fit_first_size(self)

    def _make_parts(self, settings: AppSettings) -> None:
        self.effects = ToggleEffects(self.events_panel, self.effect_label)
        self.feed = EventFeed(self.plots, self.events_panel, self.techniques_panel,
                              self.effects, self.graph_tab)
        self.board = PinBoard(self.plots, self.pins_panel, self.pin_compare, self, self)
        self.opener = Opener(self, settings, self, self.tabs, self.open_run,
                             lambda: self.runs_dir, self.setWindowTitle)
        self.opening = RunOpening(self, self.board, self.rank_chooser, self.tabs,
                                  settings.last_folder, lambda: self.runs_dir, self)
        self.exports = RunExport(self, self.plots, self, self.refresh_now)
        self.view_actions = ViewActions(self, self.plots, settings, self, self.refresh_texts)
        self.x_axis_menu = XAxisMenu(self, settings, self.plots)
        self.theme_menu = ThemeMenu(self, settings, self.plots,
                                    lambda: self.opener.snapshot_view)
        self.help_menu = HelpMenu(self)

    def _build_menus(self) -> None:
        """Every menu entry, in menu order: a new entry is one line here."""
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        self.open_action = add_action(self, file_menu, "&Open run or snapshot…",
                                      QKeySequence.Open, self.opener.open_dialog, "open_action")
        file_menu.addMenu(self.opener.recent_menu)
        add_action(self, file_menu, "Open run &folder…", None, self.opening.open_dialog,
                   "open_folder_action")
        add_action(self, file_menu, "&Follow run…", None, self.opening.follow_dialog,
                   "follow_run_action")
        file_menu.addAction(self.runs_folder.action)
        self.export_action = add_action(self, file_menu, "&Export…", "Ctrl+E",
                                        self.export_dialog, "export_action")
        self.export_action.setEnabled(False)  # until a run is on screen (show_history)
        file_menu.addSeparator()
        add_action(self, file_menu, "&Quit", QKeySequence.Quit, self.close, "quit_action")
        run_menu = bar.addMenu("&Run")
        self.start_action = add_action(self, run_menu, "&Start", "Ctrl+R", self.start_run,
                                       "start_action")
        add_action(self, run_menu, "&Pause / Resume", "Ctrl+Space", self.toggle_pause,
                   "pause_action")
        add_action(self, run_menu, "S&top", "Ctrl+.", self.stop_run, "stop_action")
        add_action(self, run_menu, "&Reset", None, self.reset_run, "reset_action")
        run_menu.addSeparator()
        self.pin_action = add_action(self, run_menu, "P&in this run", "Ctrl+Shift+P",
                                     self.pin_current_run, "pin_action")
        self.capture_action = add_action(self, run_menu, "&Capture graph of next step",
                                         "Ctrl+G", self.capture_next_step, "capture_action")
        self.view_menu = bar.addMenu("&View")
        add_action(self, self.view_menu, "&Follow newest step", "End",
                   lambda: self.plots.set_follow(True), "follow_action")
        self.view_menu.addSeparator()
        self.view_actions.add_to(self.view_menu)
        add_action(self, self.view_menu, "&Allocations of this run (Snapshot tab)", None,
                   self.opener.show_run_allocations, "run_allocations_action")
        self.x_axis_menu.add_to(self.view_menu)
        self.theme_menu.add_to(self.view_menu)
        self.help_menu.add_to(bar)

    def _connect(self) -> None:
        self.run_panel.start_clicked.connect(self.start_run)
        self.run_panel.pause_clicked.connect(self.toggle_pause)
        self.run_panel.stop_clicked.connect(self.stop_run)
        self.run_panel.reset_clicked.connect(self.reset_run)
        self.techniques_panel.technique_changed.connect(self._on_technique_changed)
        self.events_panel.step_activated.connect(self.plots.show_step)
        self.pins_panel.pin_clicked.connect(self.pin_current_run)
        self.pins_panel.visibility_changed.connect(self.board.set_visible)
        self.pins_panel.remove_clicked.connect(self.board.remove)
        self.pins_panel.remove_clicked.connect(self.runs_dock.on_pin_removed)
        # the pins changed: the title and pin controls again, the state's text as it was
        self.board.changed.connect(lambda: self.set_state(self.state, self._state_message))
        self.board.can_pin_changed.connect(lambda can, _why: self.pin_action.setEnabled(can))
        self.runs_folder.folder_changed.connect(self._on_runs_folder_changed)
        self.graph_tab.capture_requested.connect(self.capture_next_step)
        self.graph_tab.capture_every_changed.connect(
            lambda n: self.run_panel.set_value("capture_every", int(n)))
        self.run_panel.value_changed.connect(self._on_run_value_changed)
        self.lessons_tab.runs_picked.connect(self.board.pin_lesson_runs)
        self.tabs.currentChanged.connect(
            lambda i: offer_model_file(self.run_panel, self.lessons_tab)
            if self.tabs.widget(i) is self.lessons_tab else None)
        offer_model_file(self.run_panel, self.lessons_tab)

    # --- what the parts may ask (shown_run.RunOnScreen) ------------------------------------
    @property
    def running(self) -> bool:
        return self.session is not None and self.session.running

    @property
    def shown_folder(self) -> Path | None:
        if self.session is not None and self.session.folder is not None:
            return self.session.folder
        return self.loaded_from

    @property
    def runs_dir(self) -> Path | None:
        return self.runs_folder.folder

    def say(self, text: str, ms: int) -> None:
        self.statusBar().showMessage(text, ms)

    def message(self, title: str, text: str, icon, name: str) -> QMessageBox:
        # Window-modal and opened, not exec'd: the timer and the run keep going meanwhile.
        box = QMessageBox(icon, title, text, QMessageBox.Ok, self)
        box.setObjectName(name)
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.open()
        return box

    # --- running -------------------------------------------------------------------------------
    def start_run(self) -> None:
        if self.running or self.script_watch.alive:  # said beside the buttons, whole
            self.run_panel.say("A run is already going: Stop it (or Reset) before starting "
                               "another")
            return
        try:
            config = self.run_panel.config(self.techniques_panel.toggles())
        except ConfigError as exc:
            self.set_state(WindowState.IDLE, str(exc))
            return
        self.start_config(config)

    def start_config(self, config: RunConfig) -> RunSession:
        """Start a run of exactly this config (the shot command and tests use it)."""
        if self.running:
            raise RuntimeError("a run is already going; stop it first")
        self.run_panel.set_config(config)
        self.run_panel.note_shown_run(None)
        self.techniques_panel.set_toggles(config.techniques)
        self.opening.stop_following()
        session = RunSession(config, self.runs_dir, self.train_fn, parent=self)
        session.finished.connect(self._on_session_finished)
        session.failed.connect(self._on_session_failed)
        self.session = session
        if session.folder is not None:  # File > Recent runs lists it from its start
            self.opener.remember(session.folder)
        self.loaded_from = None
        self.show_history(session.history)
        self.starting.reset()
        self._starting_shown = ""
        self.status.set_planned(config.steps)
        session.start()
        self.set_state(WindowState.STARTING)
        return session

    def toggle_pause(self) -> None:
        if self.script_watch.alive:  # a watched script pauses at its next step boundary
            self.script_watch.toggle_pause()
            return
        if not self.running:
            return
        controls = self.session.controls
        if controls.paused:
            self._error_event = None
            self.error_banner.hide()
            controls.resume()
            self.set_state(WindowState.RUNNING)
        else:
            controls.pause()
            self.set_state(WindowState.PAUSED)

    def stop_run(self) -> None:
        if self.script_watch.alive:
            self.script_watch.stop()
        elif self.running:
            self.session.stop()
            self.set_state(WindowState.STOPPING)

    def reset_run(self) -> None:
        """Stop the run (if any) and clear the plots; pins stay."""
        if self.running:
            self._reset_pending = True
            self.session.stop()
            self.set_state(WindowState.STOPPING)
            return
        self._reset_pending = False
        self.session = None
        self.show_history(None)
        self.run_panel.note_shown_run(None)
        self.techniques_panel.reset_to_defaults("Reset: every technique at its default")
        self.set_state(WindowState.IDLE)

    def _on_technique_changed(self, key: str, value) -> None:
        if self.script_watch.alive:  # to the watched script, at its next step boundary
            self.script_watch.set_technique(key, value)
            return
        if not self.running:
            return  # the panel's values are the next run's starting techniques
        try:
            self.session.controls.set(key, value)
        except ConfigError as exc:
            self.techniques_panel.show_note(str(exc))
            return
        self.techniques_panel.show_note(f"{key} -> {format_value(value)}: applies at the next step")

    def _on_session_finished(self, summary) -> None:
        # The effects measured once more on the whole run, as its folder's writer did.
        self.effects.measure_all_again()
        self.refresh_now()  # the last rows, before the state says finished
        session = self.sender() if isinstance(self.sender(), RunSession) else self.session
        if session is not self.session:
            return
        if self._close_pending:
            if self.isVisible():  # not after "Quit now": a second quit would reach the app
                self.close()
            return
        if self._reset_pending:
            self.reset_run()
            return
        self._error_event = None
        if summary is not None:  # a run that could not go on keeps saying why
            self.error_banner.hide()
        self.set_state(WindowState.FINISHED, finished_text(summary, self.session.folder))
        self.board.show_against(self.history)

    def _on_session_failed(self, message: str, details: str) -> None:
        if self.history is None:
            return
        event = RunEvent(step=max(self.series.last_step if self.series else 0, 0),
                         time_s=0.0, kind="error", key="run failed", message=message,
                         explanation="The run could not go on. What it recorded so far "
                                     "is kept.\n\n" + details[-1500:])
        self.history.on_event(event)
        self.error_banner.setText(f"<b>The run could not go on:</b> {html.escape(message)}")
        self.error_banner.show()

    # --- the ~30 Hz frame (frame_clock) -------------------------------------------------------
    def _pull(self) -> bool:
        """New rows and events of the run on screen; True when there were rows."""
        if self.series is None:
            return False
        new_samples, new_steps = self.series.pull()
        self._pull_events()
        return bool(new_samples or new_steps)

    @property
    def refresh_timer(self) -> QTimer:
        return self.clock.timer

    def refresh_now(self) -> None:
        """Draw what is new and refresh every text now, not at the next timer tick."""
        self.clock.frame(force_text=True)

    def _pull_events(self) -> None:
        paused_by = self.feed.pull(self.history, self.running)
        if paused_by is not None:
            self._error_event = paused_by
            self.error_banner.show_step_error(paused_by)

    def _refresh_text(self, spread: bool = False) -> None:
        # spread: the periodic refresh sets one legend now and the others on the next frames
        self.plots.refresh_legends(spread=spread)
        # (a followed run, a watched script's: measured while its windows fill, as a lab's)
        self.effects.update(self.history, self.running or self.following)
        series = self.series
        if series is not None:
            total = series.last_total if series.sample_count else None
            self.status.set_progress(series.last_step, series.step_count, total,
                                     series.peak if series.step_count else None,
                                     live=self.running or self.following)
        if self.running:
            # Only a change: setting the same state again re-lays out the run panel, the
            # title and the pin controls, a cost paid every text frame.
            state = live_state(self.session.controls, self._error_event is not None,
                               bool(self.history.meta))
            starting = (self.starting.text(self.history) if state == WindowState.STARTING
                        else "")
            if state != self.state or starting != self._starting_shown:
                self._starting_shown = starting
                self.set_state(state, starting)
            self.board.update_state()

    def refresh_texts(self) -> None:
        """Every text now (legends, status bar, the toggles' effects), e.g. after the bytes
        display changed."""
        self.events_panel.rerender()
        self.effects.measure_all_again()
        self.plots.mark_dirty()
        self._refresh_text()

    # --- state -------------------------------------------------------------------------------
    def set_state(self, state: WindowState, message: str = "") -> None:
        state = WindowState(state)
        self.state, self._state_message = state, message
        if self.history is not None and self.history.meta:
            self.status.set_environment(self.history.meta.get("environment", {}))
        text = message or state.text
        config = self.session.config if self.session is not None else None
        self.run_panel.set_state(state, config, text)
        name = (self.history.meta.get("config") or {}).get("preset") if self.history else None
        name = preset_label(name) if name else name
        self.setWindowTitle(window_title(name, text, self.loaded_from))
        self.techniques_panel.set_target(techniques_target(
            self.running, self.opening.followed is not None,
            self.history.meta if self.history else None, script=self.script_watch.alive))
        self.board.update_state()

    def show_history(self, history: RunHistory | None) -> None:
        self.history = history
        self.export_action.setEnabled(history is not None)  # nothing loaded: nothing to export
        self.series = RunSeries(history) if history is not None else None
        self.feed.reset()
        self.effects.clear()
        self._error_event = None
        self.error_banner.hide()
        self.events_panel.clear()
        self.status.clear_run()
        self.graph_tab.clear()  # a graph belongs to its run
        self.plots.set_run(self.series)
        if self.series is not None:
            self.series.pull()
            self._pull_events()
            self.effects.measure_all_again()
            self.status.set_environment(history.meta.get("environment", {}))
        self.plots.refresh(True)
        self._refresh_text()
        self.board.show_against(self.history)

    def show_run(self, history: RunHistory, folder: Path, name: str | None,
                 adopt_settings: bool) -> None:
        """Show a run no session here makes (opened, or followed): read-only, `folder` its
        own; `name` says what it is where the settings panel does not describe it."""
        self.session, self.loaded_from = None, Path(folder)
        self.show_history(history)
        config = (history.meta or {}).get("config")
        if adopt_settings and isinstance(config, dict):
            try:
                cfg = RunConfig.from_dict(config)
                self.run_panel.set_config(cfg)
                self.techniques_panel.set_toggles(cfg.techniques)
            except (ConfigError, TypeError, ValueError):
                pass  # an odd config does not stop the run from being shown
        self.run_panel.note_shown_run(name)

    # --- pins, opening, following and exporting (the parts beside the window) ----------------
    @property
    def pins(self) -> list[PinnedRun]:
        return self.board.pins

    def pin_current_run(self) -> PinnedRun | None:
        return self.board.pin_current()

    def open_run(self, folder: Path) -> bool:
        return self.opening.open_run(folder)

    def follow_run(self, folder: Path) -> bool:
        return self.opening.follow_run(folder)

    @property
    def following(self) -> bool:
        return self.opening.following

    @property
    def ranks_tab(self):
        return self.opening.ranks_tab

    def export_dialog(self):
        return self.exports.dialog()

    def export_to(self, folder: Path, choices: set[str]) -> list[Path]:
        return self.exports.export_to(folder, choices)

    def _on_runs_folder_changed(self, folder: Path) -> None:
        self.lessons_tab.runs_dir = folder
        self.runs_dock.panel.set_folder(folder)
        self.say(f"New runs are written to {folder}", 6000)

    # --- graph tab -------------------------------------------------------------------------------
    def _on_run_value_changed(self, key: str, value) -> None:
        if key == "capture_every":
            self.graph_tab.set_capture_every(value)
        elif key == "preset":
            offer_model_file(self.run_panel, self.lessons_tab)
        if key in ("preset", "device", "lstm_cell"):
            self.amp_support.check()

    def capture_next_step(self) -> None:
        if self.running:
            self.session.controls.request_capture()
            self.say("The autograd graph of the next step will be captured", 4000)
        else:
            self.say("Start a run to capture its graph", 4000)

    # --- closing -----------------------------------------------------------------------------
    def closeEvent(self, event) -> None:
        # The loop checks the stop flag between steps and inside long phases; a step inside
        # one long kernel ends when the kernel does. The window stays up, saying so, and
        # closes (ending the app) from _on_session_finished; a second close offers to quit
        # at once. Waiting here would freeze the window.
        if self.running and not self._quit_now and not self.session.shutdown(CLOSE_WAIT_MS):
            event.ignore()
            if self._close_pending:
                offer_quit_now(self.message, self.quit_now)
                return
            self._close_pending = True
            self.set_state(WindowState.STOPPING, "Stopping… the window closes when this step "
                            "ends; close again to quit now")
            return
        self.lessons_tab.shutdown(timeout_ms=3000)
        self.script_watch.shutdown()  # a watched script stops, its files complete
        self.refresh_timer.stop()
        self.theme_menu.stop_following()
        try:
            config = self.run_panel.config(self.techniques_panel.toggles())
        except ConfigError:
            config = None  # a field left invalid: keep what was saved before
        self.app_settings.save_session(self, config.to_dict() if config else None)
        super().closeEvent(event)

    def quit_now(self) -> None:
        """Close without waiting for the run's step: its files are finalised first."""
        if self.running:
            self.session.abandon()
        self._quit_now = True
        self.close()


def offer_model_file(run_panel, lessons_tab) -> None:
    """The Lessons tab offers the model file the run panel holds (a file picked there, or
    set by opening a run: that path sets the field without its signal)."""
    preset = str(run_panel.fields["preset"].value())
    if is_model_file(preset):
        lessons_tab.offer_model_file(preset)
