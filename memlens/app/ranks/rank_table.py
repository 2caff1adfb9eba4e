"""The per-rank table under the ranks plots: core's figures as the `ranks` command prints
them, the largest and the slowest rank marked."""

from __future__ import annotations

from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

from memlens.core.runfolder.ranks import JobFigures, table_header, table_rows

LARGEST_TINT = "#F8D7D7"  # a rank that holds the most memory
SLOWEST_TINT = "#FBE5C8"  # a rank whose steps take longest


class RankTable(QTableWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("rank_table")
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.verticalHeader().hide()
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.horizontalHeader().setStretchLastSection(True)

    def show_job(self, job: JobFigures) -> None:
        header, rows = table_header(job), table_rows(job)
        self.setColumnCount(len(header))
        self.setHorizontalHeaderLabels(header)
        self.setRowCount(len(rows))
        marks = {r.rank: (job.largest is not None and r.rank == job.largest.rank,
                          job.slowest is not None and r.rank == job.slowest.rank)
                 for r in job.ranks} if len(job.ranks) > 1 else {}
        for i, (figures, row) in enumerate(zip(job.ranks, rows, strict=True)):
            largest, slowest = marks.get(figures.rank, (False, False))
            for j, text in enumerate(row):
                item = self.item(i, j)
                if item is None:
                    item = QTableWidgetItem()
                    self.setItem(i, j, item)
                item.setText(text)
                tint = LARGEST_TINT if largest else SLOWEST_TINT if slowest else None
                item.setBackground(QBrush(QColor(tint)) if tint else QBrush())
                font = QFont(self.font())
                font.setBold(largest or slowest)
                item.setFont(font)
