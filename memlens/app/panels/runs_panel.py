"""The Runs list: the run folders under one folder, kept current as runs appear; a ticked run
is overlaid as a pin (TensorBoard's run picker)."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QFileSystemWatcher, QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from memlens.core.runfolder.header import FINISHED, GONE, LIVE
from memlens.core.runfolder.listing import RunListing, list_runs
from memlens.core.units import format_bytes

# Short headings: the dock shares the window's right column (about 300 px at 1280x800);
# each heading's tooltip says it in full.
COLUMNS = ("name", "what", "steps", "peak", "date")
COLUMN_TIPS = ("the run folder's name", "the preset or script it ran",
               "steps done; (live) while its writer runs, (ended) where it was killed "
               "before its end",
               "the run's peak memory", "when its run.json was last written")
DATE_FORMAT = "%m-%d %H:%M"  # the year in the cell's tooltip
FOLDER_ROLE = Qt.UserRole
# A burst of file changes (a run writing its first files) is read once, this long after.
RESCAN_DELAY_MS = 200
# The name keeps this many characters at least: where the dock is narrower, the date and
# then the "what" column give up their room (each row's tooltip has them).
NAME_MIN_CHARS = 14
YIELDING_COLUMNS = ("date", "what")
CHECK_ROOM_PX = 28  # the check box beside the name

# What File > Export writes beside a run's files and a run's own folder never holds: a
# folder with one of them is an export (a copy of a run), not a run of its own.
EXPORT_FILES = tuple(f"{plot}.{kind}" for plot in ("memory", "time", "loss")
                     for kind in ("png", "svg"))


def is_export(folder: Path) -> bool:
    return any((folder / name).is_file() for name in EXPORT_FILES)


def row_texts(run: RunListing) -> list[str]:
    """A run's cells, in COLUMNS order (a damaged run: "damaged", its reason the tooltip)."""
    if run.problem:
        return [run.name, run.what, "", "", ""]
    peak = format_bytes(run.peak_bytes) if run.peak_bytes is not None else ""
    date = time.strftime(DATE_FORMAT, time.localtime(run.written))
    steps = str(run.steps) + {FINISHED: "", GONE: " (ended)"}.get(run.state, " (live)")
    return [run.name, run.what, steps, peak, date]


class RunsPanel(QWidget):
    """Lists the runs under `folder`; `run_checked(folder, on)` when a run's box changes."""

    run_checked = Signal(Path, bool)

    def __init__(self, folder: Path | None = None, parent=None) -> None:
        super().__init__(parent)
        self.folder: Path | None = None
        self.runs: list[RunListing] = []
        self.tree = QTreeWidget()
        self.tree.setObjectName("runs_tree")
        self.tree.setHeaderLabels(list(COLUMNS))
        for i, tip in enumerate(COLUMN_TIPS):
            self.tree.headerItem().setToolTip(i, tip)
        self.tree.setRootIsDecorated(False)
        # Every column on screen in a narrow dock: the figures take what they need, the
        # name the rest, cut in the middle where it must be (its tooltip is the whole path).
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        self.tree.setTextElideMode(Qt.ElideMiddle)
        self.tree.setToolTip("Tick runs to overlay them on the plots as pins")
        self.tree.itemChanged.connect(self._on_item_changed)
        self.folder_label = QLabel("")
        self.folder_label.setObjectName("runs_folder_label")
        self.folder_label.setWordWrap(True)
        choose = QPushButton("Folder…")
        choose.setObjectName("runs_folder_button")
        choose.setToolTip("Choose the folder whose run folders are listed")
        choose.clicked.connect(self._on_choose_clicked)
        top = QHBoxLayout()
        top.addWidget(self.folder_label, 1)
        top.addWidget(choose)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(top)
        layout.addWidget(self.tree, 1)
        # While ticked runs are read (off the GUI thread): which, and that it is going on.
        self.reading_label = QLabel("")
        self.reading_label.setObjectName("runs_reading_label")
        self.reading_label.setWordWrap(True)
        self.reading_bar = QProgressBar()
        self.reading_bar.setObjectName("runs_reading")
        self.reading_bar.setRange(0, 0)  # busy: a read does not know its share done
        self.reading_bar.setMaximumHeight(8)
        self.reading_bar.setTextVisible(False)
        for widget in (self.reading_label, self.reading_bar):
            widget.hide()
            layout.addWidget(widget)
        # The folder, the run folders not readable yet (a run's folder comes before its
        # run.json) and those of runs not finished (run.json is replaced as they go): a
        # change in any of them reads the folder again.
        self.watcher = QFileSystemWatcher(self)
        self.watcher.directoryChanged.connect(self._on_folder_changed)
        self._rescan = QTimer(self)
        self._rescan.setSingleShot(True)
        self._rescan.setInterval(RESCAN_DELAY_MS)
        self._rescan.timeout.connect(self.rescan)
        self.set_folder(folder)

    def set_folder(self, folder: Path | None) -> None:
        self.folder = Path(folder) if folder is not None else None
        self.folder_label.setText(str(self.folder) if self.folder else "No folder chosen")
        self.tree.clear()
        self.runs = []
        self.rescan()

    def rescan(self) -> None:
        """Read the folder again: new runs are added (unticked), gone ones dropped, ticked
        ones stay ticked."""
        runs, unready = list_runs(self.folder) if self.folder is not None else ([], [])
        runs = [r for r in runs if not is_export(r.folder)]
        live = [r.folder for r in runs if r.state == LIVE]
        if self.folder is None:
            self._watch([])
        else:  # a runs folder not made yet (no run started): its parent says when it is
            here = self.folder if self.folder.is_dir() else self.folder.parent
            self._watch([here, *unready, *live])
        ticked = {p for p, on in self.checked_states().items() if on}
        self.runs = runs
        with QSignalBlocker(self.tree):
            self.tree.clear()
            for run in runs:
                item = QTreeWidgetItem(row_texts(run))
                item.setData(0, FOLDER_ROLE, str(run.folder))
                item.setToolTip(0, str(run.folder))
                if run.problem:  # listed, never ticked: nothing in it can be drawn
                    item.setFlags(item.flags() & ~Qt.ItemIsUserCheckable)
                    item.setToolTip(1, run.problem)
                    item.setForeground(1, Qt.red)
                    self.tree.addTopLevelItem(item)
                    continue
                item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
                item.setCheckState(0, Qt.Checked if run.folder in ticked else Qt.Unchecked)
                # the whole row where the dock hides some of it (fit_columns)
                item.setToolTip(0, f"{run.folder}\n" + "  ".join(
                    f"{c}: {t}" for c, t in zip(COLUMNS[1:], row_texts(run)[1:], strict=True)))
                item.setToolTip(len(COLUMNS) - 1, time.strftime("%Y-%m-%d %H:%M:%S",
                                                                time.localtime(run.written)))
                self.tree.addTopLevelItem(item)
        self.fit_columns()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.fit_columns()

    def fit_columns(self) -> None:
        """Every column on screen with the name readable: where the tree is too narrow,
        the date and then the "what" column are hidden, not the name squeezed."""
        tree, header = self.tree, self.tree.header()
        name = tree.fontMetrics().averageCharWidth() * NAME_MIN_CHARS + CHECK_ROOM_PX
        widths = {c: max(header.sectionSizeFromContents(i).width(), tree.sizeHintForColumn(i))
                  for i, c in enumerate(COLUMNS) if i > 0}
        room = tree.viewport().width()
        hidden = set()
        for column in YIELDING_COLUMNS:
            if name + sum(w for c, w in widths.items() if c not in hidden) <= room:
                break
            hidden.add(column)
        for i, column in enumerate(COLUMNS):
            tree.setColumnHidden(i, column in hidden)

    def show_reading(self, names: list[str]) -> None:
        """Say which ticked runs are being read (none: the bar goes)."""
        self.reading_label.setText(f"Reading {', '.join(names)}…" if names else "")
        self.reading_label.setVisible(bool(names))
        self.reading_bar.setVisible(bool(names))

    def checked_states(self) -> dict[Path, bool]:
        out = {}
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            out[Path(item.data(0, FOLDER_ROLE))] = item.checkState(0) == Qt.Checked
        return out

    def set_checked(self, folder: Path, on: bool) -> None:
        """Tick or untick a run's box without saying so (its pin went another way)."""
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if Path(item.data(0, FOLDER_ROLE)) == Path(folder):
                with QSignalBlocker(self.tree):
                    item.setCheckState(0, Qt.Checked if on else Qt.Unchecked)

    def _watch(self, folders: list[Path]) -> None:
        wanted = {str(f) for f in folders if f.is_dir()}
        held = set(self.watcher.directories())
        if held - wanted:
            self.watcher.removePaths(sorted(held - wanted))
        if wanted - held:
            self.watcher.addPaths(sorted(wanted - held))

    def _on_folder_changed(self, _path: str) -> None:
        self._rescan.start()

    def _on_item_changed(self, item: QTreeWidgetItem, column: int) -> None:
        if column == 0:
            self.run_checked.emit(Path(item.data(0, FOLDER_ROLE)),
                                  item.checkState(0) == Qt.Checked)

    def _on_choose_clicked(self) -> None:
        chosen = QFileDialog.getExistingDirectory(self, "Folder of runs",
                                                  str(self.folder or Path.cwd()))
        if chosen:
            self.set_folder(Path(chosen))
