"""The "Autograd graph" tab: memlens.app.graph.panel.GraphPanel, built the first time it is needed.

The panel (and whatever it imports) loads when the tab is first shown or the first capture
arrives, not at start-up; if it cannot load, the tab says why and the timeline goes on.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QStackedWidget

PLACEHOLDER = "The autograd graph view loads when you open this tab."


class GraphTab(QStackedWidget):
    capture_requested = Signal()
    capture_every_changed = Signal(int)

    def __init__(self, recent: Callable[[], list], capture_every: Callable[[], int],
                 parent=None) -> None:
        """`recent()` gives the captures a new panel starts with; `capture_every()` the run
        panel's setting."""
        super().__init__(parent)
        self.setObjectName("graph_tab")
        self._recent, self._capture_every = recent, capture_every
        self.panel = None
        self.error = ""
        self.placeholder = QLabel(PLACEHOLDER)
        self.placeholder.setAlignment(Qt.AlignCenter)
        self.placeholder.setWordWrap(True)
        self.addWidget(self.placeholder)

    def showEvent(self, event) -> None:
        self.ensure_panel()
        super().showEvent(event)

    def ensure_panel(self):
        if self.panel is not None or self.error:
            return self.panel
        try:
            from memlens.app.graph.panel import GraphPanel

            panel = GraphPanel()
        except Exception as exc:  # optional: the timeline works without it
            self.error = f"{type(exc).__name__}: {exc}"
            self.placeholder.setText(f"The autograd graph view is not available:\n{self.error}")
            return None
        panel.setObjectName("graph_panel")
        panel.capture_requested.connect(self.capture_requested)
        panel.capture_every_changed.connect(self.capture_every_changed)
        panel.set_capture_every(int(self._capture_every()))
        self.addWidget(panel)
        self.setCurrentWidget(panel)
        self.panel = panel
        for snapshot in self._recent():
            panel.show_snapshot(snapshot)
        return panel

    def show_snapshots(self, snapshots: list) -> None:
        if self.panel is None:
            self.ensure_panel()  # a new panel starts with the recent captures
            return
        for snapshot in snapshots:  # each one: the panel keeps a trend of them
            self.panel.show_snapshot(snapshot)

    def clear(self) -> None:
        """A new run or Reset: the previous run's graphs go."""
        if self.panel is not None:
            self.panel.clear()

    def set_capture_every(self, value: int) -> None:
        if self.panel is not None:
            self.panel.set_capture_every(int(value))
