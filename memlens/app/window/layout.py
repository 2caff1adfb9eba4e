"""The main window's layout and menus, made once at start-up."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDockWidget, QLabel, QScrollArea, QTabWidget, QVBoxLayout, QWidget

from memlens.app.graph.tab import GraphTab
from memlens.app.lessons.tab import LessonsTab
from memlens.app.panels.error_banner import ErrorBanner
from memlens.app.panels.pin_compare import PinCompare
from memlens.app.window.screen_fit import fit_first_size
from memlens.app.window.side_room import RIGHT_WIDE, SideRoom
from memlens.app.window.toggle_effects import EFFECT_HINT, ToggleEffects


def build_layout(window) -> None:
    """The window's widgets: the run dock on the left, the centre tabs, the events and
    pins docks on the right; the first size from the screen (screen_fit)."""
    left = QWidget()
    left_layout = QVBoxLayout(left)
    left_layout.setContentsMargins(4, 4, 4, 4)
    left_layout.addWidget(window.run_panel)
    left_layout.addWidget(window.techniques_panel)
    left_layout.addStretch(1)
    scroll = QScrollArea()
    scroll.setWidget(left)
    scroll.setWidgetResizable(True)
    scroll.setMinimumWidth(left.sizeHint().width() + 18)  # as needed, if ever narrower
    dock(window, "Run", scroll, Qt.LeftDockWidgetArea, "run_dock")

    window.error_banner = ErrorBanner()
    window.effect_label = QLabel(EFFECT_HINT)
    window.effect_label.setObjectName("effect_label")
    # A long effect (every phase, an interval) wraps instead of widening the window.
    window.effect_label.setWordWrap(True)
    window.effect_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
    window.effects = ToggleEffects(window.events_panel, window.effect_label)
    timeline = QWidget()
    tl = QVBoxLayout(timeline)
    tl.setContentsMargins(0, 0, 0, 0)
    tl.setSpacing(2)
    tl.addWidget(window.error_banner)
    tl.addWidget(window.plots, 1)
    tl.addWidget(window.effect_label)
    window.tabs = QTabWidget()
    window.tabs.setObjectName("centre_tabs")
    window.tabs.addTab(timeline, "Timeline")
    window.graph_tab = GraphTab(
        recent=lambda: window.history.graphs[-8:] if window.history is not None else [],
        capture_every=lambda: window.run_panel.fields["capture_every"].value())
    window.tabs.addTab(window.graph_tab, "Autograd graph")
    window.lessons_tab = LessonsTab(window.runs_dir)
    window.tabs.addTab(window.lessons_tab, "Lessons")
    window.ranks_tab = None  # made when a torchrun job's folder is first opened
    window.setCentralWidget(window.tabs)

    events_dock = dock(window, "Events", window.events_panel, Qt.RightDockWidgetArea,
                       "events_dock")
    window.pin_compare = PinCompare()
    pins_box = QWidget()
    pins_layout = QVBoxLayout(pins_box)
    pins_layout.setContentsMargins(0, 0, 0, 0)
    pins_layout.addWidget(window.pins_panel, 1)
    pins_layout.addWidget(window.pin_compare, 2)
    pins_dock = dock(window, "Pinned runs", pins_box, Qt.RightDockWidgetArea, "pins_dock")
    window.splitDockWidget(events_dock, pins_dock, Qt.Vertical)
    window.resizeDocks([events_dock, pins_dock], [1, 1], Qt.Vertical)
    window.resizeDocks([events_dock], [RIGHT_WIDE], Qt.Horizontal)
    window.side_room = SideRoom(window, scroll, window.run_panel, events_dock, pins_dock)
    fit_first_size(window)

def dock(window, title: str, widget: QWidget, area, name: str) -> QDockWidget:
    made = QDockWidget(title, window)
    made.setObjectName(name)
    made.setWidget(widget)
    made.setFeatures(QDockWidget.DockWidgetMovable | QDockWidget.DockWidgetFloatable)
    window.addDockWidget(area, made)
    return made


def build_menus(window) -> None:
    file_menu = window.menuBar().addMenu("&File")
    window.open_action = action(window, file_menu, "&Open run or snapshot…", QKeySequence.Open,
                                window.conventions.opener.open_dialog, "open_action")
    action(window, file_menu, "Open run &folder…", None, window.opening.open_dialog,
           "open_folder_action")
    action(window, file_menu, "&Follow run…", None, window.opening.follow_dialog,
           "follow_run_action")
    window.export_action = action(window, file_menu, "&Export…", "Ctrl+E",
                                  window.export_dialog, "export_action")
    window.export_action.setEnabled(False)  # until a run is on screen (show_history)
    file_menu.addSeparator()
    action(window, file_menu, "&Quit", QKeySequence.Quit, window.close, "quit_action")
    run_menu = window.menuBar().addMenu("&Run")
    window.start_action = action(window, run_menu, "&Start", "Ctrl+R", window.start_run,
                                 "start_action")
    action(window, run_menu, "&Pause / Resume", "Ctrl+Space", window.toggle_pause,
           "pause_action")
    action(window, run_menu, "S&top", "Ctrl+.", window.stop_run, "stop_action")
    action(window, run_menu, "&Reset", None, window.reset_run, "reset_action")
    run_menu.addSeparator()
    window.pin_action = action(window, run_menu, "P&in this run", "Ctrl+Shift+P",
                               window.pin_current_run, "pin_action")
    window.capture_action = action(window, run_menu, "&Capture graph of next step", "Ctrl+G",
                                   window.capture_next_step, "capture_action")
    view_menu = window.menuBar().addMenu("&View")
    window.view_menu = view_menu
    action(window, view_menu, "&Follow newest step", "End",
           lambda: window.plots.set_follow(True), "follow_action")
    window.conventions.add_menus(file_menu, view_menu, window.open_action)


def action(window, menu, text: str, shortcut, slot, name: str) -> QAction:
    made = QAction(text, window)
    made.setObjectName(name)
    if shortcut is not None:
        made.setShortcut(QKeySequence(shortcut))
    made.triggered.connect(slot)
    menu.addAction(made)
    return made
