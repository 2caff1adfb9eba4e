"""The Lessons tab: measure the article's claims on this machine, each technique off vs on.

A preset chooser, Run and Stop, progress; the table of rows with their verdicts; the chart
of the picked row's lesson (the report's own SVG); picking a row asks the window to pin the
two runs behind it, so the timeline shows them overlaid. Export writes the report files.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QByteArray, QRectF, QSignalBlocker, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPainter
from PySide6.QtSvg import QSvgRenderer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from memlens.app.lessons.session import LessonsSession

# A row per metric, under a heading row per lesson and preset (it spans the columns: the
# lesson's name in every row would cost the claim its room at 1280 px).
COLUMNS = ("metric", "off", "on", "change", "verdict", "claim")
VERDICT_COLORS = {"confirmed": "#2a8a3e", "larger": "#2a8a3e", "smaller": "#8a6d00",
                  "contradicted": "#c0392b"}
# The verdicts as the table says them: "larger" read as "memory got larger"; it means the
# change measured is larger than the claim's.
VERDICT_WORDS = {"larger": "more than claimed", "smaller": "less than claimed"}
POLL_MS = 100
ELIDED = {"metric": 150}  # columns cut with '…' at these widths (px)
ALL = "all"  # the chooser's entry for every built-in preset


class LessonsTab(QWidget):
    runs_picked = Signal(object)  # [(name, RunHistory), ...]: the runs behind a row

    def __init__(self, runs_dir: Path | None = None, parent=None) -> None:
        super().__init__(parent)
        self.runs_dir = runs_dir
        self.settings: dict = {}  # overrides for every arm (tests use tiny sizes)
        self.steps: int | None = None  # None: the runner's default for quick or full
        self.session: LessonsSession | None = None
        self.report = None
        self._report_rows: list[int | None] = []  # table row -> report row (None: heading)

        self._make_controls()
        split = self._make_table_and_chart()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        for row in self._rows():
            layout.addLayout(row)
        # The progress bar on a row of its own keeps the tab narrow enough for the window's
        # default and 1280x800 sizes beside the run panel and the pins.
        layout.addWidget(self.progress_bar)
        layout.addWidget(self.status)
        layout.addWidget(split, 1)

        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._on_poll)
        self.chart_key: tuple[str, str] | None = None  # (lesson, preset) on show
        self._update_buttons()

    # --- widgets ----------------------------------------------------------------------------
    def _make_controls(self) -> None:
        from memlens.core.options import PRESETS

        self.preset_box = QComboBox()
        self.preset_box.setObjectName("lessons_preset")
        for name in (*PRESETS, ALL):
            self.preset_box.addItem(name, name)
        self.preset_box.setItemData(self.preset_box.count() - 1,
                                    "every built-in preset", Qt.ToolTipRole)
        self.quick_box = QCheckBox("Quick")
        self.quick_box.setObjectName("lessons_quick")
        self.quick_box.setChecked(True)
        self.quick_box.setToolTip("Few steps in short blocks: a first look; wide intervals "
                                  "on time. Untick for the full report.")
        self.run_button = QPushButton("Run lessons")
        self.run_button.setObjectName("lessons_run")
        self.run_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("lessons_stop")
        self.stop_button.clicked.connect(self.stop)
        self.export_button = QPushButton("Export report…")
        self.export_button.setObjectName("lessons_export")
        self.export_button.clicked.connect(self._on_export_clicked)
        self.progress_bar = QProgressBar()
        self.progress_bar.setObjectName("lessons_progress")
        self.status = QLabel("Each lesson runs the preset with a technique off and on, "
                             "interleaved in blocks. Pick a row to pin its two runs.")
        self.status.setObjectName("lessons_status")
        self.status.setWordWrap(True)

    def _rows(self) -> list[QHBoxLayout]:
        top = QHBoxLayout()
        top.addWidget(QLabel("Preset"))
        top.addWidget(self.preset_box)
        top.addWidget(self.quick_box)
        top.addStretch(1)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.export_button)
        buttons.addStretch(1)
        return [top, buttons]

    def _make_table_and_chart(self) -> QSplitter:
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("lessons_table")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.itemSelectionChanged.connect(self._on_selection_changed)
        header = self.table.horizontalHeader()
        # Every column on screen at 1280 px: the short ones fit their text, the metric's
        # name is cut with '…' (the row's tooltip has it whole) and the claim takes what is
        # left; the verdict is never cut.
        for j, name in enumerate(COLUMNS):
            mode = QHeaderView.Interactive if name in ELIDED else QHeaderView.ResizeToContents
            header.setSectionResizeMode(j, mode)
            if name in ELIDED:
                self.table.setColumnWidth(j, ELIDED[name])
        header.setSectionResizeMode(COLUMNS.index("claim"), QHeaderView.Stretch)
        header.setStretchLastSection(False)
        self.table.setTextElideMode(Qt.ElideRight)
        self.table.setWordWrap(False)
        self.chart = SvgView()
        self.chart.setObjectName("lessons_chart")
        split = QSplitter(Qt.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.chart)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        return split

    # --- running ----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.session is not None and not self.session.ended

    def start(self) -> None:
        if self.running:
            return
        from memlens.core.options import PRESETS

        choice = self.preset_box.currentData()
        presets = list(PRESETS) if choice == ALL else [choice]
        out = None
        if self.runs_dir is not None:  # a new folder, made and claimed as every run's is
            from memlens.core.recorder.output import choose_folder

            try:
                out = choose_folder(None, "lessons", runs_dir=self.runs_dir)
            except OSError as exc:
                self.status.setText(f"Cannot make a folder in {self.runs_dir}: "
                                    f"{exc.strerror or exc}")
                return
        self.session = LessonsSession(presets, steps=self.steps,
                                      quick=self.quick_box.isChecked(), out=out,
                                      settings=self.settings, parent=self)
        self.session.finished.connect(self._on_finished)
        self.session.failed.connect(self._on_failed)
        self.report = None
        self.table.setRowCount(0)
        self.progress_bar.setValue(0)
        self.status.setText("Starting (loading torch and the models)…")
        self.session.start()
        self._timer.start()
        self._update_buttons()

    def offer_model_file(self, path: str) -> None:
        """Offer the model file chosen in the run panel, after the built-ins, in place of
        the one offered before; chosen at once when the previous file was."""
        box = self.preset_box
        index = self._model_file_index()
        was_chosen = index >= 0 and box.currentIndex() == index
        with QSignalBlocker(box):
            if index >= 0:
                box.removeItem(index)
            box.insertItem(box.count(), Path(path).name, path)
            box.setItemData(box.count() - 1, path, Qt.ToolTipRole)
            if was_chosen:
                box.setCurrentIndex(box.count() - 1)

    def _model_file_index(self) -> int:
        from memlens.core.options import is_model_file

        for i in range(self.preset_box.count()):
            if is_model_file(str(self.preset_box.itemData(i))):
                return i
        return -1

    def stop(self) -> None:
        if self.running:
            self.session.stop()
            self.status.setText("Stopping: the report keeps what was measured…")

    def shutdown(self, timeout_ms: int = 10_000) -> bool:
        return self.session is None or self.session.shutdown(timeout_ms)

    def _on_poll(self) -> None:
        p = self.session.progress if self.session is not None else None
        if p is None:
            return
        done = p.index + p.steps_done / max(p.steps_total, 1)
        self.progress_bar.setValue(round(100 * done / max(p.count, 1)))
        if not self.session.worker.runner.stopping:
            self.status.setText(p.text())

    def _on_finished(self, report) -> None:
        self._timer.stop()
        if report is not None:
            self.show_report(report)
            self.progress_bar.setValue(100 if not report.stopped else self.progress_bar.value())
            self.status.setText(
                f"{len(report.rows)} rows in {report.wall_s:.0f} s"
                + (" (stopped: what was measured is kept)" if report.stopped else "")
                + ". Pick a row to pin its two runs on the timeline.")
        self._update_buttons()

    def _on_failed(self, message: str, details: str) -> None:
        self.status.setText(f"The lessons stopped on an error: {message}")
        self.status.setToolTip(details)

    # --- showing ----------------------------------------------------------------------------
    def show_report(self, report) -> None:
        self.report = report
        self._report_rows = []
        with QSignalBlocker(self.table):
            self.table.clearSpans()
            self.table.setRowCount(0)
            for indexes in _groups(report.rows):
                self._add_heading(report.rows[indexes[0]])
                for i in indexes:
                    self._add_row(report.rows[i], i)
        if report.rows:
            self.show_chart(report.rows[0].lesson, report.rows[0].preset)
        self._update_buttons()

    def _add_heading(self, r) -> None:
        t = self.table.rowCount()
        self.table.insertRow(t)
        item = QTableWidgetItem(f"{r.preset} · {r.lesson}: {r.off_label} → {r.on_label}")
        font = item.font()
        font.setBold(True)
        item.setFont(font)
        item.setToolTip(r.title)
        self.table.setItem(t, 0, item)
        self.table.setSpan(t, 0, 1, len(COLUMNS))
        self._report_rows.append(None)

    def _add_row(self, r, index: int) -> None:
        from memlens.core.lessons.chart import format_value
        from memlens.core.lessons.report import change_text

        t = self.table.rowCount()
        self.table.insertRow(t)
        growth = "growth" in r.metric
        # the change as a percentage; its interval is in the tooltip and the chart
        change = change_text(r)
        cells = (r.metric, format_value(r.kind, r.off, growth),
                 format_value(r.kind, r.on, growth), change.split(" (")[0],
                 VERDICT_WORDS.get(r.verdict, r.verdict) or "—", r.claim or "—")
        tip = (f"{r.title}: {r.off_label} → {r.on_label}\n{r.metric}\nchange {change}"
               + (f"\nclaim: {r.claim}" if r.claim else "") + (f"\n{r.note}" if r.note else ""))
        for j, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if COLUMNS[j] == "verdict" and r.verdict in VERDICT_COLORS:
                item.setForeground(QColor(VERDICT_COLORS[r.verdict]))
            item.setToolTip(tip)
            self.table.setItem(t, j, item)
        self._report_rows.append(index)

    def table_row(self, index: int) -> int:
        """The table row showing report row `index`."""
        return self._report_rows.index(index)

    def show_chart(self, lesson: str, preset: str) -> None:
        from memlens.core.lessons.chart import chart_svg

        rows = [r for r in self.report.rows if (r.lesson, r.preset) == (lesson, preset)]
        self.chart_key = (lesson, preset)
        self.chart.load(QByteArray(chart_svg(rows).encode("utf-8")))

    def _on_selection_changed(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if not rows or self.report is None:
            return
        t = rows[0].row()
        # a heading: its lesson's first metric
        index = self._report_rows[t] if self._report_rows[t] is not None \
            else self._report_rows[t + 1]
        self.pick_row(index)

    def pick_row(self, i: int) -> None:
        """Show the row's chart and ask for its two runs to be pinned."""
        r = self.report.rows[i]
        self.show_chart(r.lesson, r.preset)
        histories = self.report.histories.get((r.lesson, r.preset), {})
        labels = {"off": r.off_label, "on": r.on_label}
        picked = [(f"{r.preset} {r.lesson}: {labels[arm]}", h)
                  for arm, h in histories.items() if len(h.steps)]
        if picked:
            self.runs_picked.emit(picked)

    # --- export -----------------------------------------------------------------------------
    def _on_export_clicked(self) -> None:
        start = str(self.runs_dir or Path.cwd())
        folder = QFileDialog.getExistingDirectory(self, "Export the lessons report to", start)
        if folder:
            self.export_to(Path(folder))

    def export_to(self, folder: Path) -> list[Path]:
        """Write lessons.json, lessons.md and the charts (SVG and PNG) into `folder`; never
        over a report already there."""
        from memlens.app.lessons.svg_png import svg_to_png
        from memlens.core.lessons.report import write_report
        from memlens.core.lessons.report_folder import REPORT
        from memlens.core.options import ConfigError
        from memlens.core.recorder.output import choose_folder
        from memlens.core.runfolder.atomic import ExportError

        if self.report is None:
            return []
        try:  # the one claim policy: a folder holding a report or a run is refused
            choose_folder(folder, "lessons", force=None, flag="Export to", layout=REPORT)
            written = write_report(self.report, folder, png=svg_to_png)
        except ConfigError as exc:
            self.status.setText(f"{exc}")
            return []
        except ExportError as exc:
            self.status.setText(str(exc))
            return []
        self.status.setText(f"Exported {len(written)} files to {folder}")
        return written

    def _update_buttons(self) -> None:
        running = self.running
        self.run_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.preset_box.setEnabled(not running)
        self.quick_box.setEnabled(not running)
        self.export_button.setEnabled(not running and self.report is not None)


class SvgView(QWidget):
    """An SVG drawn at its own size, or smaller to fit (aspect kept), at the top left: a
    chart never asks the window to be wider than the screen."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._renderer = QSvgRenderer(self)
        self._renderer.repaintNeeded.connect(self.update)

    def load(self, data: QByteArray) -> None:
        self._renderer.load(data)
        self.updateGeometry()
        self.update()

    def renderer(self) -> QSvgRenderer:
        return self._renderer

    def sizeHint(self) -> QSize:
        size = self._renderer.defaultSize()
        return size if size.isValid() else QSize(300, 200)

    def minimumSizeHint(self) -> QSize:
        return QSize(200, 120)

    def paintEvent(self, event) -> None:
        if not self._renderer.isValid():
            return
        size = self._renderer.defaultSize()
        scale = min(1.0, self.width() / max(size.width(), 1),
                    self.height() / max(size.height(), 1))
        painter = QPainter(self)
        self._renderer.render(painter, QRectF(0, 0, size.width() * scale,
                                              size.height() * scale))
        painter.end()


def _groups(rows) -> list[list[int]]:
    """The report's row indexes by (preset, lesson), in the report's order."""
    out: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(rows):
        out.setdefault((r.preset, r.lesson), []).append(i)
    return list(out.values())
