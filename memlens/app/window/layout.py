"""The main window's layout, made once at start-up from the widgets the window made: the run
dock on the left, the centre tabs, the events and pins docks on the right."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDockWidget,
    QMainWindow,
    QScrollArea,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from memlens.app.window.side_room import RIGHT_WIDE


def dock(window: QMainWindow, title: str, widget: QWidget, area, name: str) -> QDockWidget:
    made = QDockWidget(title, window)
    made.setObjectName(name)
    made.setWidget(widget)
    made.setFeatures(QDockWidget.DockWidgetMovable | QDockWidget.DockWidgetFloatable)
    window.addDockWidget(area, made)
    return made


def left_dock(window: QMainWindow, run_panel: QWidget, techniques_panel: QWidget
              ) -> QScrollArea:
    """The run and techniques panels, in a scroll area (a short screen scrolls them)."""
    left = QWidget()
    left_layout = QVBoxLayout(left)
    left_layout.setContentsMargins(4, 4, 4, 4)
    left_layout.addWidget(run_panel)
    left_layout.addWidget(techniques_panel)
    left_layout.addStretch(1)
    scroll = QScrollArea()
    scroll.setWidget(left)
    scroll.setWidgetResizable(True)
    scroll.setMinimumWidth(left.sizeHint().width() + 18)  # as needed, if ever narrower
    dock(window, "Run", scroll, Qt.LeftDockWidgetArea, "run_dock")
    return scroll


def centre_tabs(window: QMainWindow, timeline_parts: list[QWidget], plots: QWidget,
                tabs: list[tuple[QWidget, str]]) -> QTabWidget:
    """The Timeline tab (the plots, with `timeline_parts` above and below them: the
    banner first, the effect line last) and the other `tabs` (widget, title)."""
    timeline = QWidget()
    column = QVBoxLayout(timeline)
    column.setContentsMargins(0, 0, 0, 0)
    column.setSpacing(2)
    above, below = timeline_parts[:-1], timeline_parts[-1:]
    for part in above:
        column.addWidget(part)
    column.addWidget(plots, 1)
    for part in below:
        column.addWidget(part)
    made = QTabWidget()
    made.setObjectName("centre_tabs")
    made.addTab(timeline, "Timeline")
    for widget, title in tabs:
        made.addTab(widget, title)
    window.setCentralWidget(made)
    return made


def right_docks(window: QMainWindow, events_panel: QWidget, pins_panel: QWidget,
                pin_compare: QWidget) -> tuple[QDockWidget, QDockWidget]:
    """The events dock over the pinned runs dock (the pins list over their comparison)."""
    events_dock = dock(window, "Events", events_panel, Qt.RightDockWidgetArea, "events_dock")
    pins_box = QWidget()
    pins_layout = QVBoxLayout(pins_box)
    pins_layout.setContentsMargins(0, 0, 0, 0)
    pins_layout.addWidget(pins_panel, 1)
    pins_layout.addWidget(pin_compare, 2)
    pins_dock = dock(window, "Pinned runs", pins_box, Qt.RightDockWidgetArea, "pins_dock")
    window.splitDockWidget(events_dock, pins_dock, Qt.Vertical)
    window.resizeDocks([events_dock, pins_dock], [1, 1], Qt.Vertical)
    window.resizeDocks([events_dock], [RIGHT_WIDE], Qt.Horizontal)
    return events_dock, pins_dock
