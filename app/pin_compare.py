"""Under the pins: a pinned run against the current one, memory by phase and category (mean
and peak, and the change), from core.compare."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.signals import signals_blocked
from app.units import format_bytes

COLUMNS = ("phase", "category", "pin mean", "mean", "Δ mean", "pin peak", "peak", "Δ peak")


class PinCompare(QWidget):
    """`set_runs(pins, current)`: the window's pins and the run its plots show."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.pins: list = []
        self.current = None
        self.rows: list = []  # the CompareRows on show
        self.pin_box = QComboBox()
        self.pin_box.setObjectName("compare_pin")
        self.pin_box.currentIndexChanged.connect(self._on_pin_changed)
        self.note = QLabel("Pin a run, then run or open another: their memory by phase "
                           "shows here.")
        self.note.setWordWrap(True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("compare_table")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.pin_box)
        layout.addWidget(self.note)
        layout.addWidget(self.table, 1)

    def set_runs(self, pins: list, current) -> None:
        chosen = self._chosen_id()
        self.pins, self.current = list(pins), current
        with signals_blocked(self.pin_box):
            self.pin_box.clear()
            for pin in self.pins:
                self.pin_box.addItem(f"current run vs {pin.label}: {pin.name}", pin.pin_id)
            ids = [p.pin_id for p in self.pins]
            if ids:
                self.pin_box.setCurrentIndex(ids.index(chosen) if chosen in ids
                                             else len(ids) - 1)
        self._fill()

    def _chosen_id(self) -> int | None:
        return self.pin_box.currentData() if self.pin_box.count() else None

    def _on_pin_changed(self, _index: int) -> None:
        self._fill()

    def _fill(self) -> None:
        from core.compare import compare_runs

        pin = next((p for p in self.pins if p.pin_id == self._chosen_id()), None)
        ok = pin is not None and self.current is not None and pin.series.history is not self.current
        self.rows = compare_runs(pin.series.history, self.current) if ok else []
        self.note.setVisible(not self.rows)
        self.table.setRowCount(len(self.rows))
        for i, r in enumerate(self.rows):
            cells = (r.phase, r.category, format_bytes(r.base_mean), format_bytes(r.mean),
                     format_bytes(r.mean_change, signed=True), format_bytes(r.base_peak),
                     format_bytes(r.peak), format_bytes(r.peak_change, signed=True))
            for j, text in enumerate(cells):
                self.table.setItem(i, j, QTableWidgetItem(text))
