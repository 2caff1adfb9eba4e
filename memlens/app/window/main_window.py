"""The memlens main window: run and technique panels, live timeline plots, events, pins.

The window owns at most one RunSession (the worker thread) and one RunSeries (what the plots
show: the live run or a loaded one). A ~30 Hz timer pulls the rows added since the last tick
and redraws the curves; text (legends, status bar, the "what just happened" line) is
refreshed at a slower rate. Nothing here blocks on the training thread.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")

import pyqtgraph as pg
from PySide6.QtCore import QElapsedTimer, Qt, QTimer
from PySide6.QtWidgets import QMainWindow, QMessageBox

from memlens.app.app_settings import AppSettings
from memlens.app.panels.events_panel import EventsPanel
from memlens.app.panels.pins_panel import PinsPanel
from memlens.app.panels.run_panel import RunPanel
from memlens.app.panels.status_bar import RunStatusBar
from memlens.app.panels.techniques_panel import TechniquesPanel
from memlens.app.panels.window_state import WindowState
from memlens.app.series.pins import PinnedRun
from memlens.app.series.run_series import RunSeries
from memlens.app.timeline.plot_stack import PlotStack
from memlens.app.window import exporting
from memlens.app.window.amp_support import AmpSupport
from memlens.app.window.conventions import WindowConventions, remembered_config
from memlens.app.window.export_dialog import export_dialog
from memlens.app.window.fix_session import FixSession
from memlens.app.window.frame_pacer import FramePacer
from memlens.app.window.layout import EFFECT_HINT, build_layout, build_menus
from memlens.app.window.opening import RunOpening
from memlens.app.window.pins import PinBoard
from memlens.app.window.rank_chooser import RankChooser
from memlens.app.window.run_session import RunSession, TrainFn
from memlens.app.window.runs_dock import RunsDock
from memlens.core.config import RunConfig
from memlens.core.effects import toggle_effect
from memlens.core.history import RunHistory
from memlens.core.model_file import preset_label
from memlens.core.options import ConfigError, format_value, is_model_file
from memlens.core.records import RunEvent

pg.setConfigOptions(antialias=False, foreground="#333333", background="w")

FRAME_MS = 33  # curves: about 30 Hz
TEXT_EVERY = 8  # text: every 8th frame, about 4 Hz
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
        self.app_settings = settings or AppSettings()
        if config is None:
            config = remembered_config(self.app_settings)
        self.setObjectName("main_window")
        self.setWindowTitle("memlens")
        self.runs_dir = (self.app_settings.runs_folder() if runs_dir == RUNS_DIR_FROM_SETTINGS
                         else runs_dir)
        self.train_fn = train_fn
        config = config or RunConfig()
        self.session: RunSession | None = None
        self.history: RunHistory | None = None  # what the plots show: live or loaded
        self.series: RunSeries | None = None
        self.loaded_from: Path | None = None
        self._events_seen = 0
        self._graphs_seen = 0
        self._toggle_rows: list[tuple[int, RunEvent]] = []  # (events list row, event)
        self._measuring: list[tuple[int, RunEvent]] = []
        self._error_event: RunEvent | None = None
        self._reset_pending = False
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
        self.board = PinBoard(self)
        self.opening = RunOpening(self)
        build_layout(self)
        self.conventions = WindowConventions(self, self.app_settings)
        build_menus(self)
        self.runs_dock = RunsDock(self, self.view_menu)
        self.amp_support = AmpSupport(self.run_panel, self.techniques_panel, self)
        self._connect()
        # Try the fix / Write the fix under a watched run's diagnosis (main.py fix)
        self.fixing = FixSession(self, self.events_panel, lambda: (self.history,
                                                                   self.loaded_from),
                                 self.board.add_history)
        self.set_state(WindowState.IDLE)

        self.refresh_timer = QTimer(self)
        self.refresh_timer.setObjectName("refresh_timer")
        self.refresh_timer.setInterval(FRAME_MS)
        self.pacer = FramePacer(base_ms=FRAME_MS)
        self.refresh_timer.timeout.connect(self._on_frame)
        self.refresh_timer.start()

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
        self.graph_tab.capture_requested.connect(self.capture_next_step)
        self.graph_tab.capture_every_changed.connect(
            lambda n: self.run_panel.set_value("capture_every", int(n)))
        self.run_panel.value_changed.connect(self._on_run_value_changed)
        self.lessons_tab.runs_picked.connect(self.board.pin_lesson_runs)
        self.tabs.currentChanged.connect(
            lambda i: self._offer_model_file() if self.tabs.widget(i) is self.lessons_tab
            else None)
        self._offer_model_file()

    # --- running -------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.session is not None and self.session.running

    def start_run(self) -> None:
        if self.running:  # beside the buttons, wrapped: the status bar would cut it
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
            self.conventions.opener.remember(session.folder)
        self.loaded_from = None
        self.show_history(session.history)
        self.status.set_planned(config.steps)
        session.start()
        self.set_state(WindowState.STARTING)
        return session

    def toggle_pause(self) -> None:
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
        if self.running:
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
        self.set_state(WindowState.IDLE)

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
        self.set_state(WindowState.FINISHED, finished_text(summary, self.session.folder))
        self.pin_compare.set_runs(self.board.pins, self.history)

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
            self.refresh_timer.setInterval(interval)

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
                self.set_state(state)
            self.board.update_state()

    def refresh_texts(self) -> None:
        """Every text now (legends, status bar, the toggles' effects), e.g. after the bytes
        display changed."""
        self.events_panel.rerender()
        self._measuring = list(self._toggle_rows)
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
    def set_state(self, state: WindowState, message: str = "") -> None:
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
        self.board.update_state()

    def _title(self, name: str | None, text: str) -> str:
        if not name:
            return "memlens"
        if self.loaded_from is not None:
            return f"memlens: {name} (opened {self.loaded_from.name}, read-only)"
        return f"memlens: {name} ({text.split(';')[0].split(' (')[0].lower()})"

    def show_history(self, history: RunHistory | None) -> None:
        self.history = history
        self.export_action.setEnabled(history is not None)  # nothing loaded: nothing to export
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
        self.effect_label.setText(EFFECT_HINT)
        self.effect_label.setToolTip("")
        self.plots.set_run(self.series)
        if self.series is not None:
            self.series.pull()
            self._pull_events()
            self._measuring = list(self._toggle_rows)
            self.status.set_environment(history.meta.get("environment", {}))
        self.plots.refresh(True)
        self._refresh_text()
        self.pin_compare.set_runs(self.board.pins, self.history)

    # --- pins, opening, following and exporting (pins, opening, exporting) -------------------
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
    def followed(self):
        return self.opening.followed

    def export_dialog(self):
        return export_dialog(self)

    def export_to(self, folder: Path, choices: set[str]) -> list[Path]:
        return exporting.export_to(self, folder, choices)

    def message(self, title: str, text: str, icon, name: str) -> QMessageBox:
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
            self.amp_support.check()

    def _offer_model_file(self) -> None:
        """The Lessons tab offers the model file the run panel holds (a file picked there, or
        set by opening a run: that path sets the field without its signal)."""
        preset = str(self.run_panel.fields["preset"].value())
        if is_model_file(preset):
            self.lessons_tab.offer_model_file(preset)

    def capture_next_step(self) -> None:
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
            self.set_state(WindowState.STOPPING, "Stopping… the window closes when this step "
                            "ends; close again to quit now")
            return
        self.lessons_tab.shutdown(timeout_ms=3000)
        self.refresh_timer.stop()
        self.conventions.save()
        super().closeEvent(event)

    def _offer_quit_now(self) -> QMessageBox:
        box = self.message(
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


def finished_text(summary: dict | None, folder: Path | None) -> str:
    if not summary:
        return "Run ended (see the events list)"
    done = summary.get("steps_done", 0)
    how = summary.get("stopped_by", "completed")
    where = f"; saved in {folder}" if folder else ""
    return {"completed": f"Finished: {done} steps{where}",
            "stopped": f"Stopped after {done} steps{where}",
            "error": f"Stopped on an error after {done} steps{where}"}.get(how, how)
