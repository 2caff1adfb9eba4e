"""The Lessons tab: measure the article's claims on this machine, each technique off vs on.

A preset chooser, Run and Stop, progress; the table of rows with their verdicts; the chart
of the picked row's lesson (the report's own SVG); picking a row asks the window to pin the
two runs behind it, so the timeline shows them overlaid. Export writes the report files.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QByteArray, QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtSvgWidgets import QSvgWidget
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

COLUMNS = ("preset", "lesson", "metric", "off", "on", "change", "verdict", "claim")
VERDICT_COLORS = {"confirmed": "#2a8a3e", "larger": "#2a8a3e", "smaller": "#8a6d00",
                  "contradicted": "#c0392b"}
POLL_MS = 100
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
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(self._on_selection_changed)
        self.chart = QSvgWidget()
        self.chart.setObjectName("lessons_chart")
        self.chart.setMinimumWidth(300)
        # The chart keeps its drawn size, left-aligned, whatever the tab's width.
        chart_box = QWidget()
        chart_row = QHBoxLayout(chart_box)
        chart_row.setContentsMargins(0, 0, 0, 0)
        chart_row.addWidget(self.chart, 0, Qt.AlignTop)
        chart_row.addStretch(1)
        split = QSplitter(Qt.Vertical)
        split.addWidget(self.table)
        split.addWidget(chart_box)
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
        if self.runs_dir is not None:
            out = Path(self.runs_dir) / f"{time.strftime('%Y%m%d-%H%M%S')}-lessons"
            n = 2
            while out.exists():
                out = out.with_name(f"{out.name.split('-lessons')[0]}-lessons-{n}")
                n += 1
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
        from memlens.core.lessons.chart import format_value
        from memlens.core.lessons.report import change_text

        self.report = report
        with QSignalBlocker(self.table):
            self.table.setRowCount(len(report.rows))
            for i, r in enumerate(report.rows):
                growth = "growth" in r.metric
                cells = (r.preset, r.lesson, r.metric, format_value(r.kind, r.off, growth),
                         format_value(r.kind, r.on, growth), change_text(r),
                         r.verdict or "—", r.claim or "—")
                for j, text in enumerate(cells):
                    item = QTableWidgetItem(text)
                    if COLUMNS[j] == "verdict" and r.verdict in VERDICT_COLORS:
                        item.setForeground(QColor(VERDICT_COLORS[r.verdict]))
                    item.setToolTip(f"{r.title}: {r.off_label} → {r.on_label}")
                    self.table.setItem(i, j, item)
        if report.rows:
            self.show_chart(report.rows[0].lesson, report.rows[0].preset)
        self._update_buttons()

    def show_chart(self, lesson: str, preset: str) -> None:
        from memlens.core.lessons.chart import chart_svg

        rows = [r for r in self.report.rows if (r.lesson, r.preset) == (lesson, preset)]
        self.chart_key = (lesson, preset)
        self.chart.load(QByteArray(chart_svg(rows).encode("utf-8")))
        size = self.chart.renderer().defaultSize()
        self.chart.setFixedSize(size)

    def _on_selection_changed(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if not rows or self.report is None:
            return
        self.pick_row(rows[0].row())

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
        from memlens.core.runfolder.atomic import ExportError

        if self.report is None:
            return []
        if (Path(folder) / "lessons.json").exists():
            self.status.setText(f"{folder} already holds a report: choose another folder "
                                "(nothing was overwritten)")
            return []
        try:
            written = write_report(self.report, folder, png=svg_to_png)
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
