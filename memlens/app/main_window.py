"""The memlens main window: run and technique panels, live timeline plots, events, pins.

The window owns at most one RunSession (the worker thread) and one RunSeries (what the plots
show: the live run or a loaded one). A ~30 Hz timer pulls the rows added since the last tick
and redraws the curves; text (legends, status bar, the "what just happened" line) is
refreshed at a slower rate. Nothing here blocks on the training thread.
"""

from __future__ import annotations

import gc
import html
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")

import pyqtgraph as pg
from PySide6.QtCore import QElapsedTimer, Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QLabel,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from memlens.app.amp_support import AmpSupport
from memlens.app.app_settings import AppSettings
from memlens.app.conventions import WindowConventions, remembered_config
from memlens.app.exporting import export_run, unavailable_formats
from memlens.app.frame_pacer import FramePacer
from memlens.app.graph.tab import GraphTab
from memlens.app.lessons.tab import LessonsTab
from memlens.app.panels.events_panel import EventsPanel
from memlens.app.panels.export_dialog import ExportDialog
from memlens.app.panels.pin_compare import PinCompare
from memlens.app.panels.pins_panel import PinsPanel
from memlens.app.panels.run_panel import RunPanel
from memlens.app.panels.status_bar import RunStatusBar
from memlens.app.panels.techniques_panel import TechniquesPanel
from memlens.app.rank_chooser import RankChooser
from memlens.app.run_session import RunSession, TrainFn
from memlens.app.screen_fit import fit_first_size
from memlens.app.series.pins import PinnedRun, compare_names, pin_color, run_name
from memlens.app.series.run_series import RunSeries
from memlens.app.timeline.plot_stack import PlotStack
from memlens.app.window_state import WindowState
from memlens.core.config import RunConfig
from memlens.core.effects import toggle_effect
from memlens.core.history import RunHistory
from memlens.core.model_file import preset_label
from memlens.core.options import ConfigError, format_value, is_model_file
from memlens.core.records import RunEvent
from memlens.core.runfolder.atomic import ExportError
from memlens.core.runfolder.format import RunFolderError
from memlens.core.runfolder.reader import load_run, rank_folders

pg.setConfigOptions(antialias=False, foreground="#333333", background="w")

FRAME_MS = 33  # curves: about 30 Hz
TEXT_EVERY = 8  # text: every 8th frame, about 4 Hz
DEFAULT_RUNS_DIR = Path("runs")
SWITCH_INTERVAL_S = 0.0001  # see finish_start_up
# Closing waits this long for the run to stop (a frame or two) before it says "stopping…"
# and lets the window go on painting.
CLOSE_WAIT_MS = 30


class MainWindow(QMainWindow):
    """`train_fn` defaults to memlens.core.loop.run_training; tests and benchmarks may pass
    memlens.core.synthetic.synthetic_training. `runs_dir=None` keeps runs in memory only.
    `settings`: what is remembered between launches (app.app_settings; by default nothing)."""

    def __init__(self, config: RunConfig | None = None, *,
                 runs_dir: Path | None = DEFAULT_RUNS_DIR,
                 train_fn: TrainFn | None = None,
                 settings: AppSettings | None = None) -> None:
        super().__init__()
        self.app_settings = settings or AppSettings()
        if config is None:
            config = remembered_config(self.app_settings)
        self.setObjectName("main_window")
        self.setWindowTitle("memlens")
        self.runs_dir = runs_dir
        self.train_fn = train_fn
        config = config or RunConfig()
        self.session: RunSession | None = None
        self.followed = None  # memlens.app.follow_run.FollowedRun while following a folder
        self.history: RunHistory | None = None  # what the plots show: live or loaded
        self.series: RunSeries | None = None
        self.loaded_from: Path | None = None
        self.pins: list[PinnedRun] = []
        self._next_pin_id = 0
        self._lesson_pin_ids: set[int] = set()  # the pins of the Lessons tab's picked row
        self._events_seen = 0
        self._graphs_seen = 0
        self._toggle_rows: list[tuple[int, RunEvent]] = []  # (events list row, event)
        self._measuring: list[tuple[int, RunEvent]] = []
        self._error_event: RunEvent | None = None
        self._reset_pending = False
        self._pin_state: tuple[bool, str] | None = None  # what the pin controls show
        self._close_pending = False
        self._quit_now = False  # "Quit now" chosen: close without waiting for the run
        self._frame = 0
        self.frame_ms: list[float] = []  # refresh cost of recent frames (benchmarks read it)

        self.run_panel = RunPanel(config)
        self.techniques_panel = TechniquesPanel(config.techniques)
        self.plots = PlotStack()
        self.events_panel = EventsPanel()
        self.pins_panel = PinsPanel()
        self.status = RunStatusBar()
        self.setStatusBar(self.status)
        # A torchrun job's parent folder (rank0/, rank1/, ...): which rank is shown.
        self.rank_chooser = RankChooser()
        self.status.addPermanentWidget(self.rank_chooser)
        self.rank_chooser.rank_chosen.connect(self._on_rank_chosen)
        self._rank_mode = ""  # "open" or "follow": what choosing a rank does
        self._build_layout()
        self.conventions = WindowConventions(self, self.app_settings)
        self._build_menus()
        self.amp_support = AmpSupport(self)
        self.amp_support.checked.connect(self._on_amp_checked)
        self._connect()
        self._set_state(WindowState.IDLE)

        self._timer = QTimer(self)
        self._timer.setObjectName("refresh_timer")
        self._timer.setInterval(FRAME_MS)
        self.pacer = FramePacer(base_ms=FRAME_MS)
        self._timer.timeout.connect(self._on_frame)
        self._timer.start()

    # --- layout --------------------------------------------------------------------------------
    def _build_layout(self) -> None:
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(4, 4, 4, 4)
        left_layout.addWidget(self.run_panel)
        left_layout.addWidget(self.techniques_panel)
        left_layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidget(left)
        scroll.setWidgetResizable(True)
        scroll.setMinimumWidth(left.sizeHint().width() + 18)  # as needed, if ever narrower
        self._dock("Run", scroll, Qt.LeftDockWidgetArea, "run_dock")

        self.error_banner = QLabel("")
        self.error_banner.setObjectName("error_banner")
        self.error_banner.setWordWrap(True)
        self.error_banner.hide()
        self.effect_label = QLabel("Flip a technique while a run goes: what it did shows here.")
        self.effect_label.setObjectName("effect_label")
        # A long effect (every phase, an interval) wraps instead of widening the window.
        self.effect_label.setWordWrap(True)
        self.effect_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        timeline = QWidget()
        tl = QVBoxLayout(timeline)
        tl.setContentsMargins(0, 0, 0, 0)
        tl.setSpacing(2)
        tl.addWidget(self.error_banner)
        tl.addWidget(self.plots, 1)
        tl.addWidget(self.effect_label)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("centre_tabs")
        self.tabs.addTab(timeline, "Timeline")
        self.graph_tab = GraphTab(
            recent=lambda: self.history.graphs[-8:] if self.history is not None else [],
            capture_every=lambda: self.run_panel.fields["capture_every"].value())
        self.tabs.addTab(self.graph_tab, "Autograd graph")
        self.lessons_tab = LessonsTab(self.runs_dir)
        self.tabs.addTab(self.lessons_tab, "Lessons")
        self.setCentralWidget(self.tabs)

        events_dock = self._dock("Events", self.events_panel, Qt.RightDockWidgetArea,
                                 "events_dock")
        self.pin_compare = PinCompare()
        pins_box = QWidget()
        pins_layout = QVBoxLayout(pins_box)
        pins_layout.setContentsMargins(0, 0, 0, 0)
        pins_layout.addWidget(self.pins_panel, 1)
        pins_layout.addWidget(self.pin_compare, 2)
        pins_dock = self._dock("Pinned runs", pins_box, Qt.RightDockWidgetArea, "pins_dock")
        self.splitDockWidget(events_dock, pins_dock, Qt.Vertical)
        self.resizeDocks([events_dock, pins_dock], [1, 1], Qt.Vertical)
        self.resizeDocks([events_dock], [300], Qt.Horizontal)
        fit_first_size(self)

    def _dock(self, title: str, widget: QWidget, area, name: str) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        dock.setFeatures(QDockWidget.DockWidgetMovable | QDockWidget.DockWidgetFloatable)
        self.addDockWidget(area, dock)
        return dock

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.open_action = self._action(file_menu, "&Open run or snapshot…", QKeySequence.Open,
                                        self.conventions.opener.open_dialog, "open_action")
        self._action(file_menu, "Open run &folder…", None, self.open_run_dialog,
                     "open_folder_action")
        self._action(file_menu, "&Follow run…", None, self.follow_run_dialog,
                     "follow_run_action")
        self.export_action = self._action(file_menu, "&Export…", "Ctrl+E",
                                          self.export_dialog, "export_action")
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", QKeySequence.Quit, self.close, "quit_action")
        run_menu = self.menuBar().addMenu("&Run")
        self.start_action = self._action(run_menu, "&Start", "Ctrl+R", self.start_run,
                                         "start_action")
        self._action(run_menu, "&Pause / Resume", "Ctrl+Space", self.toggle_pause,
                     "pause_action")
        self._action(run_menu, "S&top", "Ctrl+.", self.stop_run, "stop_action")
        self._action(run_menu, "&Reset", None, self.reset_run, "reset_action")
        run_menu.addSeparator()
        self.pin_action = self._action(run_menu, "P&in this run", "Ctrl+Shift+P",
                                       self.pin_current_run, "pin_action")
        self.capture_action = self._action(run_menu, "&Capture graph of next step", "Ctrl+G",
                                           self._on_capture_requested, "capture_action")
        view_menu = self.menuBar().addMenu("&View")
        self._action(view_menu, "&Follow newest step", "End",
                     lambda: self.plots.set_follow(True), "follow_action")
        self.conventions.add_menus(file_menu, view_menu, self.open_action)

    def _action(self, menu, text: str, shortcut, slot, name: str) -> QAction:
        action = QAction(text, self)
        action.setObjectName(name)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _connect(self) -> None:
        self.run_panel.start_clicked.connect(self.start_run)
        self.run_panel.pause_clicked.connect(self.toggle_pause)
        self.run_panel.stop_clicked.connect(self.stop_run)
        self.run_panel.reset_clicked.connect(self.reset_run)
        self.techniques_panel.technique_changed.connect(self._on_technique_changed)
        self.events_panel.step_activated.connect(self.plots.show_step)
        self.pins_panel.pin_clicked.connect(self.pin_current_run)
        self.pins_panel.visibility_changed.connect(self._on_pin_visibility_changed)
        self.pins_panel.remove_clicked.connect(self.remove_pin)
        self.graph_tab.capture_requested.connect(self._on_capture_requested)
        self.graph_tab.capture_every_changed.connect(
            lambda n: self.run_panel.set_value("capture_every", int(n)))
        self.run_panel.value_changed.connect(self._on_run_value_changed)
        self.lessons_tab.runs_picked.connect(self.pin_lesson_runs)
        self.tabs.currentChanged.connect(
            lambda i: self._offer_model_file() if self.tabs.widget(i) is self.lessons_tab
            else None)
        self._offer_model_file()

    # --- running -------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.session is not None and self.session.running

    def start_run(self) -> None:
        if self.running:
            self.statusBar().showMessage(
                "A run is already going: Stop it (or Reset) before starting another", 6000)
            return
        try:
            config = self.run_panel.config(self.techniques_panel.toggles())
        except ConfigError as exc:
            self._set_state(WindowState.IDLE, str(exc))
            return
        self.start_config(config)

    def start_config(self, config: RunConfig) -> RunSession:
        """Start a run of exactly this config (the shot command and tests use it)."""
        if self.running:
            raise RuntimeError("a run is already going; stop it first")
        self.run_panel.set_config(config)
        self.techniques_panel.set_toggles(config.techniques)
        self._stop_following()
        session = RunSession(config, self.runs_dir, self.train_fn, parent=self)
        session.finished.connect(self._on_session_finished)
        session.failed.connect(self._on_session_failed)
        self.session = session
        self.loaded_from = None
        self._show_history(session.history)
        self.status.set_planned(config.steps)
        session.start()
        self._set_state(WindowState.STARTING)
        return session

    def toggle_pause(self) -> None:
        if not self.running:
            return
        controls = self.session.controls
        if controls.paused:
            self._error_event = None
            self.error_banner.hide()
            controls.resume()
            self._set_state(WindowState.RUNNING)
        else:
            controls.pause()
            self._set_state(WindowState.PAUSED)

    def stop_run(self) -> None:
        if self.running:
            self.session.stop()
            self._set_state(WindowState.STOPPING)

    def reset_run(self) -> None:
        """Stop the run (if any) and clear the plots; pins stay."""
        if self.running:
            self._reset_pending = True
            self.session.stop()
            self._set_state(WindowState.STOPPING)
            return
        self._reset_pending = False
        self.session = None
        self._show_history(None)
        self._set_state(WindowState.IDLE)

    def _on_technique_changed(self, key: str, value) -> None:
        if not self.running:
            return  # the panel's values are the next run's starting techniques
        try:
            self.session.controls.set(key, value)
        except ConfigError as exc:
            self.techniques_panel.show_note(str(exc))
            return
        self.techniques_panel.show_note(f"{key} -> {format_value(value)}: applies at the next step")

    def _on_session_finished(self, summary) -> None:
        self._on_frame(force_text=True)  # the last rows, before the state says finished
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
        self._set_state(WindowState.FINISHED, self._finished_text(summary))
        self.pin_compare.set_runs(self.pins, self.history)

    def _finished_text(self, summary) -> str:
        if not summary:
            return "Run ended (see the events list)"
        done = summary.get("steps_done", 0)
        how = summary.get("stopped_by", "completed")
        where = f"; saved in {self.session.folder}" if self.session.folder else ""
        return {"completed": f"Finished: {done} steps{where}",
                "stopped": f"Stopped after {done} steps{where}",
                "error": f"Stopped on an error after {done} steps{where}"}.get(how, how)

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

    # --- the ~30 Hz frame ------------------------------------------------------------------------
    def _on_frame(self, force_text: bool = False) -> None:
        """One frame: new rows, then the plots, the text. When drawing the plots is costly
        (a flood of steps, see PlotStack.refresh), a frame does one of three things: the
        periodic text (no pull, no plot), a legend a text refresh left, or a pull and one
        plot; no frame holds all of them."""
        timer = QElapsedTimer()
        timer.start()
        self._frame += 1
        starting = (self.state == WindowState.STARTING and self.history is not None
                    and self.history.meta)
        now = force_text or starting
        periodic = not now and self._frame % TEXT_EVERY == 0
        spreading = self.plots.spreading
        new_data = False
        if self.series is not None and not (periodic and spreading):
            new_samples, new_steps = self.series.pull()
            new_data = bool(new_samples or new_steps)
            self._pull_events()
            self._pull_graphs()
        self.plots.set_live(self.running or self.following)
        legend = not (now or periodic) and self.plots.legend_waiting
        self.plots.refresh(new_data, busy=now or periodic or legend)
        if now:
            self._refresh_text()
        elif periodic:
            self._refresh_text(spread=True)
        elif legend:
            self.plots.refresh_next_legend()
        self.frame_ms.append(timer.nsecsElapsed() / 1e6)
        if len(self.frame_ms) > 4096:
            del self.frame_ms[:2048]
        interval = self.pacer.tick()
        if interval is not None:
            self._timer.setInterval(interval)

    def refresh_now(self) -> None:
        """Draw what is new and refresh every text now, not at the next timer tick."""
        self._on_frame(force_text=True)

    def _pull_events(self) -> None:
        events = self.history.events(self._events_seen)
        if not events:
            return
        self._events_seen += len(events)
        for event in events:
            if event.on_timeline:
                self.plots.add_event(event)
            item_row = self.events_panel.list.count()
            self.events_panel.add_event(event)
            if event.kind == "toggle":
                self.techniques_panel.set_value(event.key, event.new)
                self.techniques_panel.show_note("")
                self._measuring.append((item_row, event))
                self._toggle_rows.append((item_row, event))
            elif event.kind == "refused":  # the panel shows what the run kept, and why
                self.techniques_panel.set_value(event.key, event.old)
                self.techniques_panel.show_note(f"{event.message}. {event.explanation}")
            elif event.kind == "error" and self.running and event.key != "run failed":
                self._error_event = event
                self._show_error(event)

    def _pull_graphs(self) -> None:
        # history.graphs keeps only the newest captures; graphs_seen counts them all.
        seen = self.history.graphs_seen
        if seen <= self._graphs_seen:
            return
        graphs = self.history.graphs
        new = graphs[max(0, len(graphs) - (seen - self._graphs_seen)):]
        self._graphs_seen = seen
        self.graph_tab.show_snapshots(new)

    def _show_error(self, event: RunEvent) -> None:
        where = f" in {event.phase}" if event.phase else ""
        text = (f"<b>Step {event.step} failed{where}:</b> {event.message}<br>"
                f"{event.explanation}<br><i>The run is paused. Change a technique on the left "
                "and press Resume, or press Reset.</i>")
        self.error_banner.setText(text)
        self.error_banner.show()

    def _refresh_text(self, spread: bool = False) -> None:
        # spread: the periodic refresh sets one legend now and the others on the next frames
        self.plots.refresh_legends(spread=spread)
        self._update_effects()
        series = self.series
        if series is not None:
            total = series.last_total if series.sample_count else None
            self.status.set_progress(series.last_step, series.step_count, total,
                                     series.peak if series.step_count else None,
                                     live=self.running or self.following)
        if self.running:
            # Only a change: setting the same state again re-lays out the run panel, the
            # title and the pin controls, a cost paid every text frame.
            state = self._live_state()
            if state != self.state:
                self._set_state(state)
            self._update_pin_state()

    def refresh_texts(self) -> None:
        """Every text now (legends, status bar), e.g. after the bytes display changed."""
        self.plots.mark_dirty()
        self._refresh_text()

    def _live_state(self) -> WindowState:
        controls = self.session.controls
        if controls.stop_requested:
            return WindowState.STOPPING
        if controls.paused:
            return WindowState.ERROR if self._error_event is not None else WindowState.PAUSED
        if not self.history.meta:
            return WindowState.STARTING
        return WindowState.RUNNING

    def _update_effects(self) -> None:
        if not self._measuring or self.history is None:
            return
        still = []
        for row, event in self._measuring:
            effect = toggle_effect(self.history, event)  # core's: the same text as run.json
            text = effect.text()
            self.events_panel.set_effect(row, text, effect.details())
            if (row, event) == self._toggle_rows[-1]:
                self.effect_label.setText(f"What just happened: {text}")
                self.effect_label.setToolTip(effect.details())
            if not effect.complete and self.running:
                still.append((row, event))
        self._measuring = still

    # --- state -------------------------------------------------------------------------------
    def _set_state(self, state: WindowState, message: str = "") -> None:
        state = WindowState(state)
        self.state = state
        if self.history is not None and self.history.meta:
            self.status.set_environment(self.history.meta.get("environment", {}))
        text = message or state.text
        config = self.session.config if self.session is not None else None
        self.run_panel.set_state(state, config, text)
        name = (self.history.meta.get("config") or {}).get("preset") if self.history else None
        name = preset_label(name) if name else name
        self.setWindowTitle(self._title(name, text))
        self._update_pin_state()

    def _title(self, name: str | None, text: str) -> str:
        if not name:
            return "memlens"
        if self.loaded_from is not None:
            return f"memlens: {name} (opened {self.loaded_from.name}, read-only)"
        return f"memlens: {name} ({text.split(';')[0].split(' (')[0].lower()})"

    def _update_pin_state(self) -> None:
        """The pin button, its tooltip and the menu entry say whether this run can be pinned
        now; rechecked on each text refresh, as a run's first steps make it pinnable."""
        can_pin, why = self._can_pin()
        if (can_pin, why) == self._pin_state:
            return
        self._pin_state = (can_pin, why)
        self.pins_panel.set_can_pin(can_pin, why)
        self.pin_action.setEnabled(can_pin)

    def _can_pin(self) -> tuple[bool, str]:
        if self.series is None or self.series.step_count == 0:
            return False, "Nothing to pin yet: run or open a run first"
        if self.running:
            return False, "Pin a run once it has finished or stopped"
        if any(p.series is self.series for p in self.pins):
            return False, "This run is pinned already"
        return True, ""

    def _show_history(self, history: RunHistory | None) -> None:
        self.history = history
        self.series = RunSeries(history) if history is not None else None
        self._events_seen = 0
        self._graphs_seen = 0
        self._toggle_rows.clear()
        self._measuring.clear()
        self._error_event = None
        self.error_banner.hide()
        self.events_panel.clear()
        self.status.clear_run()
        self.graph_tab.clear()  # a graph belongs to its run
        self.effect_label.setText("Flip a technique while a run goes: what it did shows here.")
        self.effect_label.setToolTip("")
        self.plots.set_run(self.series)
        if self.series is not None:
            self.series.pull()
            self._pull_events()
            self._measuring = list(self._toggle_rows)
            self.status.set_environment(history.meta.get("environment", {}))
        self.plots.refresh(True)
        self._refresh_text()
        self.pin_compare.set_runs(self.pins, self.history)

    # --- pins --------------------------------------------------------------------------------
    def pin_current_run(self) -> PinnedRun | None:
        can, why = self._can_pin()
        if not can:
            self.statusBar().showMessage(why, 4000)
            return None
        return self._add_pin(self.series)

    def _add_pin(self, series: RunSeries, name: str = "") -> PinnedRun:
        pin = PinnedRun(self._next_pin_id,
                        name or run_name(series.history.meta, series.step_count),
                        series, pin_color(self._next_pin_id), named=bool(name))
        self._next_pin_id += 1
        self.pins.append(pin)
        self._pins_changed()
        return pin

    def remove_pin(self, pin_id: int) -> None:
        self.pins = [p for p in self.pins if p.pin_id != pin_id]
        self._pins_changed()

    def _on_pin_visibility_changed(self, pin_id: int, visible: bool) -> None:
        for pin in self.pins:
            if pin.pin_id == pin_id:
                pin.visible = visible
        self._pins_changed()

    def pin_lesson_runs(self, runs: list) -> list[PinnedRun]:
        """The Lessons tab's pick: its runs (name, history) replace the previous pick's pins,
        so the timeline shows the two arms overlaid."""
        self.pins = [p for p in self.pins if p.pin_id not in self._lesson_pin_ids]
        added = []
        for name, history in runs:
            series = RunSeries(history)
            series.pull()
            added.append(self._add_pin(series, name))
        self._lesson_pin_ids = {p.pin_id for p in added}
        return added

    def _pins_changed(self) -> None:
        # Compared runs are named by the settings in which they differ from each other.
        unnamed = [p for p in self.pins if not p.named]
        names = compare_names([p.series.history.meta for p in unnamed],
                              [p.series.step_count for p in unnamed])
        for pin, name in zip(unnamed, names, strict=True):
            pin.name = name
        self.pins_panel.set_pins(self.pins)
        self.plots.set_pins(self.pins)
        self.pin_compare.set_runs(self.pins, self.history)
        self._set_state(self.state)

    # --- open and export -------------------------------------------------------------------------
    def open_run_dialog(self) -> None:
        from PySide6.QtWidgets import QFileDialog

        start = self.app_settings.last_folder() or str(self.runs_dir or Path.cwd())
        folder = QFileDialog.getExistingDirectory(self, "Open a run folder", start)
        if folder:
            self.open_run(Path(folder))

    def open_run(self, folder: Path) -> bool:
        """Load a saved run folder: into the plots, or as a pin while a run is going. A
        distributed watch's parent folder opens its first rank, the others a choice away."""
        folder = self._rank_of(folder, "open")
        QApplication.setOverrideCursor(Qt.WaitCursor)
        try:
            history = load_run(folder)
        except Exception as exc:  # a damaged folder is a message, whatever broke in it
            text = str(exc) if isinstance(exc, RunFolderError | OSError) else (
                f"{folder}: cannot be read as a run ({type(exc).__name__})")
            self._message("Cannot open this run", text, QMessageBox.Warning, "open_error")
            return False
        finally:
            QApplication.restoreOverrideCursor()
        if self.running:
            series = RunSeries(history)
            series.pull()
            self._add_pin(series)
            self.statusBar().showMessage(f"Opened {folder} as a pinned run", 6000)
            return True
        self._stop_following()
        self.session = None
        self.loaded_from = Path(folder)
        self._show_history(history)
        config = (history.meta or {}).get("config")
        if isinstance(config, dict):
            try:
                cfg = RunConfig.from_dict(config)
                self.run_panel.set_config(cfg)
                self.techniques_panel.set_toggles(cfg.techniques)
            except (ConfigError, TypeError, ValueError):
                pass  # an odd config does not stop the run from being shown
        self._set_state(WindowState.FINISHED, f"Opened {folder} (read-only; pin it to compare)")
        return True

    def _rank_of(self, folder: Path, mode: str) -> Path:
        """The folder to show: a rank folder the chooser offers as it is, a parent of rank
        folders its first rank (offered in the chooser), any other folder as it is (and the
        chooser goes)."""
        folder = Path(folder)
        if folder in self.rank_chooser.folders:
            return folder
        ranks = rank_folders(folder)
        if ranks:
            self.rank_chooser.set_ranks(folder, ranks)
            self._rank_mode = mode
            return ranks[0]
        if not self.running:
            self.rank_chooser.clear()
        return folder

    def _on_rank_chosen(self, folder: Path) -> None:
        if self._rank_mode == "follow":
            self.follow_run(folder)
        else:
            self.open_run(folder)

    # --- following a run another process writes (app.follow_run) --------------------------------
    @property
    def following(self) -> bool:
        return self.followed is not None and self.followed.active

    def _stop_following(self) -> None:
        if self.followed is not None:
            self.followed.stop()
            self.followed = None

    def follow_run_dialog(self) -> None:
        from PySide6.QtWidgets import QFileDialog

        start = str(self.runs_dir or Path.cwd())
        folder = QFileDialog.getExistingDirectory(self, "Follow a run folder", start)
        if folder:
            self.follow_run(Path(folder))

    def follow_run(self, folder: Path) -> bool:
        """Show a run folder that another process is writing, growing as it grows (a
        distributed watch's parent folder: one rank at a time, chosen in the status bar)."""
        from memlens.app.follow_run import FollowedRun, state_text

        folder = self._rank_of(folder, "follow")
        if self.running:
            self.statusBar().showMessage("Stop the run first to follow another", 6000)
            return False
        try:
            followed = FollowedRun(folder, self)
        except RunFolderError as exc:
            self._message("Cannot follow this folder", str(exc), QMessageBox.Warning,
                          "follow_error")
            return False
        self._stop_following()
        self.followed, self.session, self.loaded_from = followed, None, Path(folder)
        self._show_history(followed.history)
        followed.state_changed.connect(
            lambda state: self._set_state(WindowState.FINISHED, state_text(state, Path(folder))))
        followed.failed.connect(lambda text: self._message(
            "Cannot follow this folder", text, QMessageBox.Warning, "follow_error"))
        followed.start()
        return True

    def export_dialog(self) -> ExportDialog | None:
        if self.history is None:
            self._message("Nothing to export", "Run or open a run first.",
                          QMessageBox.Information, "export_message")
            return None
        dialog = ExportDialog(self._default_export_folder(), self,
                              unavailable_formats(self.history))
        dialog.accepted.connect(lambda: self.export_to(dialog.folder(), dialog.choices()))
        dialog.open()
        return dialog

    def _default_export_folder(self) -> Path:
        base = self.session.folder if self.session is not None and self.session.folder else None
        if base is not None:
            return base.with_name(base.name + "-export")
        if self.loaded_from is not None:
            return self.loaded_from.with_name(self.loaded_from.name + "-export")
        return Path.cwd() / "exports" / time.strftime("%Y%m%d-%H%M%S")

    def plot_widgets(self) -> dict:
        return {"memory": self.plots.memory_plot, "time": self.plots.time_plot,
                "loss": self.plots.loss_plot}

    def export_to(self, folder: Path, choices: set[str]) -> list[Path]:
        if self.history is None:
            return []
        self._on_frame(force_text=True)  # the newest rows into the plots first
        try:
            source = self.session.folder if self.session is not None else self.loaded_from
            written, problems = export_run(self.history, self.plot_widgets(), folder, choices,
                                           source)
        except (ExportError, OSError, ValueError) as exc:  # never a traceback out of a slot
            self._message("Export failed", str(exc), QMessageBox.Warning, "export_message")
            return []
        text = f"Wrote {len(written)} files to {folder}"
        if problems:
            self._message("Export finished with problems",
                          text + ".\n\nNot written:\n" + "\n".join(problems),
                          QMessageBox.Warning, "export_message")
        self.statusBar().showMessage(text, 8000)
        return written

    def _message(self, title: str, text: str, icon, name: str) -> QMessageBox:
        # Window-modal and opened, not exec'd: the timer and the run keep going meanwhile.
        box = QMessageBox(icon, title, text, QMessageBox.Ok, self)
        box.setObjectName(name)
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.open()
        return box

    # --- graph tab -------------------------------------------------------------------------------
    @property
    def graph_panel(self):
        return self.graph_tab.panel

    def _on_run_value_changed(self, key: str, value) -> None:
        if key == "capture_every":
            self.graph_tab.set_capture_every(value)
        elif key == "preset":
            self._offer_model_file()
        if key in ("preset", "device", "lstm_cell"):
            self.check_amp()

    def check_amp(self) -> None:
        """Grey out the AMP choices this machine cannot run for the panel's preset (an LSTM
        under bf16 on a CPU without AVX512-BF16/AMX), found off the GUI thread."""
        self.amp_support.check(self.run_panel.config())

    def _on_amp_checked(self, preset: str, refusals: dict) -> None:
        if preset != str(self.run_panel.fields["preset"].value()):
            return  # an answer for a preset the panel no longer shows
        field = self.techniques_panel.fields["amp"]
        for choice, reason in refusals.items():
            field.set_choice_unavailable(choice, reason)

    def _offer_model_file(self) -> None:
        """The Lessons tab offers the model file the run panel holds (a file picked there, or
        set by opening a run: that path sets the field without its signal)."""
        preset = str(self.run_panel.fields["preset"].value())
        if is_model_file(preset):
            self.lessons_tab.offer_model_file(preset)

    def _on_capture_requested(self) -> None:
        if self.running:
            self.session.controls.request_capture()
            self.statusBar().showMessage("The autograd graph of the next step will be captured",
                                         4000)
        else:
            self.statusBar().showMessage("Start a run to capture its graph", 4000)

    # --- closing -----------------------------------------------------------------------------
    def closeEvent(self, event) -> None:
        # The loop checks the stop flag between steps and inside long phases; a step inside
        # one long kernel ends when the kernel does. The window stays up, saying so, and
        # closes (ending the app) from _on_session_finished; a second close offers to quit
        # at once. Waiting here would freeze the window.
        if self.running and not self._quit_now and not self.session.shutdown(CLOSE_WAIT_MS):
            event.ignore()
            if self._close_pending:
                self._offer_quit_now()
                return
            self._close_pending = True
            self._set_state(WindowState.STOPPING, "Stopping… the window closes when this step "
                            "ends; close again to quit now")
            return
        self.lessons_tab.shutdown(timeout_ms=3000)
        self._timer.stop()
        self.conventions.save()
        super().closeEvent(event)

    def _offer_quit_now(self) -> QMessageBox:
        box = self._message(
            "The run is still stopping",
            "The current step has not ended yet. Quit now? The run's files are kept, "
            "complete up to the last finished step.", QMessageBox.Question, "quit_now")
        box.setStandardButtons(QMessageBox.NoButton)
        quit_button = box.addButton("Quit now", QMessageBox.AcceptRole)
        box.addButton("Keep waiting", QMessageBox.RejectRole)

        def on_finished(_result: int) -> None:
            if box.clickedButton() is quit_button:  # after the box has gone: then the window
                QTimer.singleShot(0, self.quit_now)

        box.finished.connect(on_finished)
        return box

    def quit_now(self) -> None:
        """Close without waiting for the run's step: its files are finalised first."""
        if self.running:
            self.session.abandon()
        self._quit_now = True
        self.close()


FULL_GC_EVERY = 100  # middle-generation collections per full one (CPython's default: 10)


def finish_start_up(window: MainWindow) -> None:
    """Show the window and settle the interpreter for a session (launch() does this before
    it enters the event loop; the benchmarks mirror it)."""
    window.show()
    QTimer.singleShot(0, window.check_amp)  # after the first paint: it imports torch
    gc.freeze()  # start-up objects live for the whole session: keep GC passes short
    # After the freeze the collector sees almost no old objects, so its guard against full
    # collections (old survivors must grow by a quarter) no longer holds them back: a full
    # collection then runs every 10th middle one, over everything a graph capture or its
    # layout keeps alive, and stops every thread, the GUI's included, for longer than a
    # frame. Full collections come ten times rarer; young garbage is collected as before.
    young, middle, _full = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_GC_EVERY)
    # The training thread runs Python at thousands of steps a second and holds the GIL
    # until CPython asks it to let go, after the switch interval (5 ms by default). Every
    # time Qt calls back into Python on the GUI thread (a timer slot, an item's paint, a
    # bounding rect) it may wait that long for the GIL: a frame makes dozens of such calls.
    # A shorter interval bounds each wait; the worker only pays a few more switches
    # (measured: docs/performance-notes.md, "GIL switch interval").
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def launch(argv: list[str] | None = None, open_path: Path | None = None,
           follow: str | None = None) -> int:
    """`python main.py`: open the window (and `open_path`, a run folder or a snapshot, as
    File > Open does; or follow a run folder another process writes). Returns the exit
    status."""
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv)
    app.setApplicationName("memlens")
    window = MainWindow(settings=AppSettings.user())
    finish_start_up(window)
    if open_path is not None:
        window.conventions.opener.open_path(open_path)
    if follow:
        window.follow_run(Path(follow))
    code = app.exec()
    if window.running:  # "Quit now": a step that never ended holds the training thread
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # the run's files were finalised by abandon(); nothing else is open
    return code


if __name__ == "__main__":
    sys.exit(launch())
