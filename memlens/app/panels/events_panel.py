"""The events list: toggles, errors with their explanation, notes; a click shows that step."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QColor, QIcon, QPainter, QPixmap
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from memlens.app.panels.fix_panel import FixActions
from memlens.app.timeline.plot_style import event_color
from memlens.core.records import RunEvent

STEP_ROLE = Qt.UserRole
PLACEHOLDER = "Toggles and errors appear here as the run goes; click one to see its step."


def _dot(color: str) -> QIcon:
    pix = QPixmap(12, 12)
    pix.fill(Qt.transparent)
    p = QPainter(pix)
    p.setRenderHint(QPainter.Antialiasing)
    p.setBrush(QColor(color))
    p.setPen(Qt.NoPen)
    p.drawEllipse(2, 2, 8, 8)
    p.end()
    return QIcon(pix)


class EventsPanel(QWidget):
    step_activated = Signal(int)
    # A diagnosis of a watched run, chosen in the list: Try the fix / Write the fix
    # (app.window.fix_session runs `main.py fix` and writes it)
    fix_requested = Signal(object)
    write_fix_requested = Signal(object)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.events: list[RunEvent] = []
        self.list = QListWidget()
        self.list.setObjectName("events_list")
        self.list.setToolTip("Click an event to move the plots to its step")
        self.list.setWordWrap(True)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.list.itemClicked.connect(self._on_item_clicked)
        self.list.currentRowChanged.connect(self._on_current_row_changed)
        self.detail = QLabel(PLACEHOLDER)
        self.detail.setObjectName("event_detail")
        self.detail.setWordWrap(True)
        self.detail.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.detail.setAlignment(Qt.AlignTop | Qt.AlignLeft)
        # A long explanation scrolls in its own share of the panel: it never squeezes
        # the list, nor is it cut.
        self.detail_area = QScrollArea()
        self.detail_area.setObjectName("event_detail_area")
        self.detail_area.setWidgetResizable(True)
        self.detail_area.setFrameShape(QFrame.NoFrame)
        self.detail_area.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.detail_area.setWidget(self.detail)
        for part in (self.list, self.detail_area):
            part.setSizePolicy(QSizePolicy.Preferred, QSizePolicy.Ignored)
        self.fix_actions = FixActions()
        self.fix_actions.try_button.clicked.connect(lambda: self._emit_fix(self.fix_requested))
        self.fix_actions.write_button.clicked.connect(
            lambda: self._emit_fix(self.write_fix_requested))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.list, 3)
        layout.addWidget(self.detail_area, 2)
        layout.addWidget(self.fix_actions)
        self._icons: dict[str, QIcon] = {}
        # What a right click on an event offers: (action, applies to this event?, slot).
        self._actions: list[tuple[QAction, Callable[[RunEvent], bool],
                                  Callable[[RunEvent], None]]] = []
        self.list.setContextMenuPolicy(Qt.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._on_context_menu_requested)
        self.add_action("&Copy its text", "copy_event_action", lambda _event: True,
                        lambda event: QApplication.clipboard().setText(self.text_of(event)))

    def add_action(self, text: str, name: str, applies: Callable[[RunEvent], bool],
                   slot: Callable[[RunEvent], None]) -> QAction:
        """An entry of the events' right-click menu, offered for the events `applies`
        accepts; `slot(event)` when chosen."""
        action = QAction(text, self)
        action.setObjectName(name)
        self._actions.append((action, applies, slot))
        return action

    def actions_for(self, row: int) -> list[QAction]:
        """The menu a right click on row `row` opens (its actions, in order)."""
        if not 0 <= row < len(self.events):
            return []
        return [a for a, applies, _slot in self._actions if applies(self.events[row])]

    def _on_context_menu_requested(self, pos) -> QMenu | None:
        row = self.list.indexAt(pos).row()
        offered = self.actions_for(row)
        if not offered:
            return None
        menu = QMenu(self)
        menu.setObjectName("events_menu")
        menu.setAttribute(Qt.WA_DeleteOnClose)
        event = self.events[row]
        for action in offered:
            slot = next(s for a, _applies, s in self._actions if a is action)
            menu.addAction(action.text(), lambda s=slot: s(event)).setObjectName(
                action.objectName())
        menu.popup(self.list.viewport().mapToGlobal(pos))
        return menu

    def text_of(self, event: RunEvent) -> str:
        """An event's whole text, as its row's tooltip holds it."""
        item = self.list.item(self.events.index(event)) if event in self.events else None
        return item.toolTip() if item is not None else self._detail_text(event)

    def clear(self) -> None:
        self.events.clear()
        self.list.clear()
        self.detail.setText(PLACEHOLDER)
        self.fix_actions.hide()

    def add_event(self, event: RunEvent) -> QListWidgetItem:
        return self.add_events([event])[0]

    def add_events(self, events: list[RunEvent]) -> list[QListWidgetItem]:
        """Rows for `events`, the list laid out and scrolled once after the last (a run
        folder opened with thousands of events is not laid out thousands of times)."""
        items = []
        error = None
        for event in events:
            self.events.append(event)
            color = event_color(event.kind)
            icon = self._icons.get(color) or self._icons.setdefault(color, _dot(color))
            item = QListWidgetItem(icon, f"step {event.step}   {event.label()}")
            item.setData(STEP_ROLE, event.step)
            item.setToolTip(self._detail_text(event))
            if event.kind == "error":
                item.setForeground(QColor(color))
                error = item
            self.list.addItem(item)
            items.append(item)
        if error is not None:
            self.list.setCurrentItem(error)  # an error explains itself without a click
        elif items:
            self.list.scrollToBottom()
            if self.list.currentRow() < 0:  # nothing chosen: the pane shows the newest
                self.detail.setText(items[-1].toolTip())
        return items

    def rerender(self) -> None:
        """Write the rows whose texts hold byte figures again, in the current bytes display
        (View > Exact bytes switched): a leak found before the switch reads as after it."""
        current = self.list.currentRow()
        for index, event in enumerate(self.events):
            item = self.list.item(index)
            if item is None or event.kind == "toggle" or not event.rerender():
                continue
            item.setText(f"step {event.step}   {event.label()}")
            item.setToolTip(self._detail_text(event))
            if current == index or (current < 0 and index == self.list.count() - 1):
                self.detail.setText(item.toolTip())

    def set_effect(self, index: int, text: str, details: str) -> None:
        """Attach the "what just happened" result to a toggle's row."""
        item = self.list.item(index)
        if item is None:
            return
        item.setToolTip(details)
        event = self.events[index]
        effect = text.removeprefix(event.label()).lstrip(": ")
        item.setText(f"step {event.step}   {event.label()}\n        {effect}")
        current = self.list.currentRow()
        if current == index or (current < 0 and index == self.list.count() - 1):
            self.detail.setText(details)

    @staticmethod
    def _detail_text(event: RunEvent) -> str:
        lines = [f"Step {event.step}: {event.label()}"]
        if event.message and event.message not in lines[0]:
            lines.append(event.message)
        if event.explanation:
            lines.append(event.explanation)
        if event.where:  # a diagnosis of a watched script
            lines.append(f"At {event.where}")
        if event.fix:
            lines.append(f"Fix: {event.fix}")
        return "\n\n".join(lines)

    def _on_item_clicked(self, item: QListWidgetItem) -> None:
        self.step_activated.emit(int(item.data(STEP_ROLE)))

    def _on_current_row_changed(self, row: int) -> None:
        if 0 <= row < len(self.events):
            self.detail.setText(self.list.item(row).toolTip())
        self.fix_actions.setVisible(self.current_diagnosis() is not None)

    def current_diagnosis(self) -> RunEvent | None:
        row = self.list.currentRow()
        event = self.events[row] if 0 <= row < len(self.events) else None
        return event if event is not None and event.kind == "diagnosis" else None

    def _emit_fix(self, signal) -> None:
        event = self.current_diagnosis()
        if event is not None:
            signal.emit(event)
