"""Who gets the room: the plots. In a narrow window the side panels narrow (the run panel's
restart hints shrink to a mark) and, narrower still, the right column's docks become tabs,
so the centre column keeps a width the plots and their legends can use."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QDockWidget, QMainWindow, QScrollArea

# Window widths below which the run panel is compact, and the right column's docks tabs.
COMPACT_LEFT_BELOW = 1360
TABBED_RIGHT_BELOW = 1200
RIGHT_WIDE, RIGHT_NARROW = 300, 240  # the right column's width, split or tabbed
SCROLL_BAR_ROOM = 18


class SideRoom(QObject):
    """Follows the window's width (its resize events) and gives the side panels the room
    that width allows; `compact` and `tabbed` say what it did."""

    def __init__(self, window: QMainWindow, run_scroll: QScrollArea, run_panel,
                 events: QDockWidget, pins: QDockWidget) -> None:
        super().__init__(window)
        self._window, self._scroll, self._run_panel = window, run_scroll, run_panel
        self._events, self._pins = events, pins
        self.compact: bool | None = None
        self.tabbed: bool | None = None
        window.installEventFilter(self)

    def eventFilter(self, obj, event) -> bool:
        if obj is self._window and event.type() == QEvent.Resize:
            self.fit(event.size().width())
        return False

    def fit(self, width: int) -> None:
        compact, tabbed = width < COMPACT_LEFT_BELOW, width < TABBED_RIGHT_BELOW
        if compact != self.compact:
            self.compact = compact
            self._run_panel.set_compact(compact)
            inner = self._scroll.widget()
            for layout in (self._run_panel.layout(), inner.layout()):
                layout.invalidate()
                layout.activate()
            self._scroll.setMinimumWidth(inner.minimumSizeHint().width() + SCROLL_BAR_ROOM)
            self._window.resizeDocks([self._scroll.parentWidget()], [1], Qt.Horizontal)
        if tabbed != self.tabbed:
            self.tabbed = tabbed
            window, events, pins = self._window, self._events, self._pins
            if tabbed:
                window.tabifyDockWidget(events, pins)
                events.raise_()
            else:  # the pins under the events again (however the events are tabbed)
                window.removeDockWidget(pins)
                window.addDockWidget(Qt.RightDockWidgetArea, pins, Qt.Vertical)
                pins.show()
            window.resizeDocks([events], [RIGHT_NARROW if tabbed else RIGHT_WIDE],
                               Qt.Horizontal)
