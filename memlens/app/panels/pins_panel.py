"""The pinned-runs list: pin the current run, show or hide each pin, remove one."""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtGui import QColor, QIcon, QPixmap
from PySide6.QtWidgets import (
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from memlens.app.series.pins import PinnedRun

PIN_ROLE = Qt.UserRole


def _swatch(color: str) -> QIcon:
    pix = QPixmap(14, 4)
    pix.fill(QColor(color))
    return QIcon(pix)


class PinsPanel(QWidget):
    pin_clicked = Signal()
    visibility_changed = Signal(int, bool)  # pin id, visible
    remove_clicked = Signal(int)  # pin id

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.list = QListWidget()
        self.list.setObjectName("pins_list")
        self.list.setToolTip("Pinned runs stay on the plots, dashed; untick to hide one")
        self.list.itemChanged.connect(self._on_item_changed)
        self.list.currentRowChanged.connect(lambda _row: self._update_buttons())
        self.pin_button = QPushButton("Pin this run")
        self.pin_button.setObjectName("pin_button")
        self.pin_button.setToolTip("Keep the finished run on the plots to compare with the next")
        self.pin_button.clicked.connect(self.pin_clicked)
        self.remove_button = QPushButton("Remove")
        self.remove_button.setObjectName("remove_pin_button")
        self.remove_button.clicked.connect(self._on_remove_clicked)
        buttons = QHBoxLayout()
        buttons.addWidget(self.pin_button)
        buttons.addWidget(self.remove_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)
        self.set_can_pin(False)

    def set_can_pin(self, can: bool, why: str = "") -> None:
        self.pin_button.setEnabled(can)
        self.pin_button.setToolTip(
            "Keep this run on the plots to compare with the next" if can
            else why or "Pin a run once it has finished or stopped"
        )
        self._update_buttons()

    def set_pins(self, pins: list[PinnedRun]) -> None:
        """Show the window's pin list (the model); writes back without echoing signals."""
        with QSignalBlocker(self.list):
            self._fill(pins)
        self._update_buttons()

    def _fill(self, pins: list[PinnedRun]) -> None:
        current = self.current_pin_id()
        self.list.clear()
        for pin in pins:
            item = QListWidgetItem(_swatch(pin.color), f"{pin.label}: {pin.name}")
            item.setData(PIN_ROLE, pin.pin_id)
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
            item.setCheckState(Qt.Checked if pin.visible else Qt.Unchecked)
            item.setToolTip(f"{pin.name}\nUntick to hide it; Remove to drop it")
            self.list.addItem(item)
            if pin.pin_id == current:
                self.list.setCurrentItem(item)
        if self.list.currentRow() < 0 and self.list.count():
            self.list.setCurrentRow(self.list.count() - 1)

    def current_pin_id(self) -> int | None:
        item = self.list.currentItem()
        return None if item is None else int(item.data(PIN_ROLE))

    def _on_item_changed(self, item: QListWidgetItem) -> None:
        self.visibility_changed.emit(int(item.data(PIN_ROLE)),
                                     item.checkState() == Qt.Checked)

    def _on_remove_clicked(self) -> None:
        pin_id = self.current_pin_id()
        if pin_id is not None:
            self.remove_clicked.emit(pin_id)

    def _update_buttons(self) -> None:
        self.remove_button.setEnabled(self.list.currentItem() is not None)
