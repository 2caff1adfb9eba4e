"""Under the pins: a pinned run against the current one, memory by phase and category (mean
and peak, and the change), from memlens.core.compare."""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker
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

from memlens.core.units import format_bytes

# The changes first: the dock is narrow, and they are what a user reads.
COLUMNS = ("phase", "category", "Δ mean", "Δ peak", "pin mean", "run mean", "pin peak",
           "run peak")


class PinCompare(QWidget):
    """`set_runs(pins, current)`: the window's pins and the run its plots show. With no run
    on show, the chosen pin is compared with the newest other pin (a lesson's two arms)."""

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
        self.table.verticalHeader().setDefaultSectionSize(20)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.pin_box)
        layout.addWidget(self.note)
        layout.addWidget(self.table, 1)

    def set_runs(self, pins: list, current) -> None:
        chosen = self._chosen_id()
        self.pins, self.current = list(pins), current
        with QSignalBlocker(self.pin_box):
            self.pin_box.clear()
            for pin in self.pins:
                self.pin_box.addItem(f"{pin.label}: {pin.name}", pin.pin_id)
            ids = [p.pin_id for p in self.pins]
            if ids:
                # by default the newest pin against the current run; with none on show,
                # the first pin (a lesson's `off` arm) against the newest
                fallback = len(ids) - 1 if current is not None else 0
                self.pin_box.setCurrentIndex(ids.index(chosen) if chosen in ids else fallback)
        self._fill()

    def _chosen_id(self) -> int | None:
        return self.pin_box.currentData() if self.pin_box.count() else None

    def _on_pin_changed(self, _index: int) -> None:
        self._fill()

    def _fill(self) -> None:
        from memlens.core.compare import compare_runs

        pin = next((p for p in self.pins if p.pin_id == self._chosen_id()), None)
        current, what = self.current, "the current run"
        if current is None and pin is not None:
            other = [p for p in self.pins if p is not pin]
            if other:
                current, what = other[-1].series.history, f"{other[-1].label}"
        ok = pin is not None and current is not None and pin.series.history is not current
        self.rows = compare_runs(pin.series.history, current) if ok else []
        self.note.setText(f"{what} against {pin.label} (Δ = {what} − pin)" if self.rows else
                          "Pin a run, then run or open another: their memory by phase "
                          "shows here.")
        self.table.setRowCount(len(self.rows))
        for i, r in enumerate(self.rows):
            cells = (r.phase, r.category, format_bytes(r.mean_change, signed=True),
                     format_bytes(r.peak_change, signed=True), format_bytes(r.base_mean),
                     format_bytes(r.mean), format_bytes(r.base_peak), format_bytes(r.peak))
            for j, text in enumerate(cells):
                self.table.setItem(i, j, QTableWidgetItem(text))
