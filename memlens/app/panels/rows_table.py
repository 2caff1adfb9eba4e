"""View > Rows: the run's rows as tables (steps.csv and memory.csv), sortable, with Copy."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt, QTimer
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QLabel,
    QTableView,
    QTabWidget,
    QVBoxLayout,
)

from memlens.core.history import SAMPLE_COLUMNS
from memlens.core.records import CATEGORY_HELP
from memlens.core.runfolder.format import (
    MEMORY_CSV,
    MEMORY_HEADER,
    STEPS_CSV,
    STEPS_HEADER,
    memory_row,
    steps_row,
)
from memlens.core.units import format_bytes

REFRESH_MS = 1000  # a live run's new rows, while the tables are open
SORT_ROLE = Qt.UserRole + 1


class RowsModel(QAbstractTableModel):
    """One table's rows, as its CSV file holds them (same header, same cells)."""

    def __init__(self, header: tuple[str, ...], rows_of, cells_of) -> None:
        super().__init__()
        self.header = header
        self._rows_of = rows_of  # () -> ndarray of the history's rows
        self._cells_of = cells_of  # ndarray row -> list[str] as the CSV writes it
        self._rows = np.empty((0, 0))
        self._cells: dict[int, list[str]] = {}

    def reload(self) -> bool:
        rows = self._rows_of()
        if rows.shape == self._rows.shape:
            return False
        if self._grew_from(rows):
            # Rows appended: an insert keeps the user's selection and scroll position,
            # which a reset would drop every refresh of a live run.
            old = len(self._rows)
            self.beginInsertRows(QModelIndex(), old, len(rows) - 1)
            self._rows = rows
            self.endInsertRows()
            return True
        self.beginResetModel()
        self._rows, self._cells = rows, {}
        self.endResetModel()
        return True

    def _grew_from(self, rows: np.ndarray) -> bool:
        """The same run's rows with more at the end (not another run's)."""
        old = self._rows
        if len(old) == 0 or rows.ndim != 2 or rows.shape[1] != old.shape[1]:
            return False
        if len(rows) <= len(old):
            return False
        return bool(np.array_equal(rows[[0, len(old) - 1]], old[[0, -1]], equal_nan=True))

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: B008 - Qt's signature
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.header)

    def cell(self, row: int, column: int) -> str:
        """The cell as the CSV file holds it (exact numbers)."""
        if row not in self._cells:
            self._cells[row] = self._cells_of(self._rows[row])
        return self._cells[row][column]

    def data(self, index: QModelIndex, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        text = self.cell(index.row(), index.column())
        name = self.header[index.column()]
        if role == Qt.DisplayRole:
            if name.endswith("_bytes") and text:
                return format_bytes(float(text))
            return text
        if role == SORT_ROLE:
            try:
                return float(text) if text else -math.inf
            except ValueError:
                return text
        if role == Qt.TextAlignmentRole and name != "phase":
            return int(Qt.AlignRight | Qt.AlignVCenter)
        if role == Qt.ToolTipRole and name.endswith("_bytes") and text:
            return f"{int(text):,} bytes"
        return None

    def headerData(self, section: int, orientation, role=Qt.DisplayRole):
        if orientation != Qt.Horizontal:
            return None
        if role == Qt.DisplayRole:
            return self.header[section]
        if role == Qt.ToolTipRole:  # a category's column: what it holds (Help's words)
            return CATEGORY_HELP.get(self.header[section].removesuffix("_bytes"))
        return None


class RowsView(QTableView):
    """A table whose Copy (Ctrl+C) copies the whole selection, not the current cell alone
    (QTableView's own Copy takes the key before any shortcut sees it)."""

    def __init__(self, copy) -> None:
        super().__init__()
        self._copy = copy

    def keyPressEvent(self, event) -> None:
        if event.matches(QKeySequence.Copy):
            self._copy()
            event.accept()
            return
        super().keyPressEvent(event)


class RowsDialog(QDialog):
    """Non-modal: the run (and its timer) go on while the tables are open. `shown.history`:
    the run whose rows it lists (None: none)."""

    def __init__(self, parent, shown) -> None:
        super().__init__(parent)
        self.setObjectName("rows_dialog")
        self.setWindowTitle("memlens: the run's rows")
        self._shown = shown
        self.tabs = QTabWidget()
        self.models: dict[str, RowsModel] = {}
        self.views: dict[str, QTableView] = {}
        self._add("steps", STEPS_CSV, STEPS_HEADER, lambda h: h.steps.rows(), steps_row)
        self._add("memory", MEMORY_CSV, MEMORY_HEADER, lambda h: h.samples.rows(),
                  memory_row)
        self.note = QLabel("Click a header to sort; select cells and press Ctrl+C to copy "
                           "them (exact values, tab separated, with the header).")
        self.note.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.note)
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.reload)
        self._timer.start()
        self.resize(900, 520)
        self.reload()

    def _add(self, key: str, title: str, header, rows_of, cells_of) -> None:
        def rows() -> np.ndarray:
            history = self._shown.history
            if history is None:
                return np.empty((0, len(SAMPLE_COLUMNS)))
            return rows_of(history)

        model = RowsModel(header, rows, cells_of)
        proxy = QSortFilterProxyModel(self)
        proxy.setSourceModel(model)
        proxy.setSortRole(SORT_ROLE)
        view = RowsView(self.copy_selection)
        view.setObjectName(f"rows_{key}")
        view.setModel(proxy)
        view.setSortingEnabled(True)
        view.sortByColumn(-1, Qt.AscendingOrder)
        view.setSelectionMode(QTableView.ExtendedSelection)
        view.verticalHeader().setDefaultSectionSize(20)
        self.models[key] = model
        self.views[key] = view
        self.tabs.addTab(view, title)

    def reload(self) -> None:
        for model in self.models.values():
            model.reload()

    def current_key(self) -> str:
        return "steps" if self.tabs.currentIndex() == 0 else "memory"

    def copy_selection(self) -> str:
        """The selected cells of the shown table as tab-separated text with a header row,
        exact values as the CSV holds them, rows in the order shown."""
        key = self.current_key()
        view, model = self.views[key], self.models[key]
        proxy = view.model()
        picked = sorted((i.row(), i.column()) for i in view.selectionModel().selectedIndexes())
        if not picked:
            return ""
        columns = sorted({c for _, c in picked})
        lines = ["\t".join(model.header[c] for c in columns)]
        for r in sorted({r for r, _ in picked}):
            src = proxy.mapToSource(proxy.index(r, 0)).row()
            chosen = {c for rr, c in picked if rr == r}
            lines.append("\t".join(model.cell(src, c) if c in chosen else ""
                                   for c in columns))
        text = "\n".join(lines) + "\n"
        QApplication.clipboard().setText(text)
        return text
