"""The Snapshot tab's list of allocations alive at one event (the peak, or the moment the
user clicked), largest first with their stacks, under a title that says which moment."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QLabel,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QWidget,
)

from memlens.app.headed_column import headed_column
from memlens.core.snapshot_file import AliveAllocations
from memlens.core.units import format_bytes


class AliveList(QWidget):
    """Shows one AliveAllocations; `back_to_peak` when the user asks for the peak again."""

    back_to_peak = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.title = QLabel()
        self.title.setObjectName("snapshot_alive_title")
        self.title.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.title.setWordWrap(True)  # a long title wraps; it never widens the window
        self.peak_button = QPushButton("Back to the peak")
        self.peak_button.setObjectName("snapshot_peak_button")
        self.peak_button.setToolTip("List what was alive at the peak again (Escape)")
        self.peak_button.clicked.connect(self.back_to_peak)
        self.tree = QTreeWidget()
        self.tree.setObjectName("snapshot_top")
        self.tree.setHeaderLabels(["size", "category", "where (newest frame first)"])
        self.tree.setColumnWidth(0, 110)
        self.tree.setColumnWidth(1, 90)
        headed_column(self, self.title, [self.peak_button], self.tree, row_margins=(4, 2, 4, 0),
                      body_stretch=1)

    def show_alive(self, alive: AliveAllocations, at_peak: bool) -> None:
        where = "the peak (event" if at_peak else "event"
        shown = len(alive.largest)
        more = f", the largest {shown} listed" if shown < alive.count else ""
        self.title.setText(
            f"<b>Alive at {where} {alive.index:,}{')' if at_peak else ''}</b>: "
            f"{alive.count:,} allocations, {format_bytes(float(alive.allocated))}{more}"
            + ("" if at_peak else ". Click the plot for another moment."))
        self.peak_button.setEnabled(not at_peak)
        self.tree.clear()
        for alloc in alive.largest:
            first = alloc.frames[0] if alloc.frames else "(no stack recorded)"
            row = QTreeWidgetItem([format_bytes(float(alloc.size)), alloc.category or "–",
                                   first])
            row.setToolTip(2, "\n".join(alloc.frames) or "no stack recorded")
            row.setData(0, Qt.UserRole, alloc.size)
            for frame in alloc.frames[1:]:
                QTreeWidgetItem(row, ["", "", frame])
            self.tree.addTopLevelItem(row)
