"""The Export dialog: a folder and what to write there."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from memlens.app.panels.folder_dialog import choose_folder
from memlens.app.window import exporting
from memlens.app.window.exporting import PNG, RUN_FILES, SVG, extra_formats, on_request_formats
from memlens.app.window.shown_run import RunOnScreen
from memlens.core.runfolder.atomic import ExportError

DESCRIPTIONS = {
    RUN_FILES: "Run files: steps.csv, memory.csv, run.json, allocations.npy if precise",
    PNG: "Each plot as PNG",
    SVG: "Each plot as SVG",
    "snapshot": "PyTorch memory snapshot (snapshot.pickle, memory_viz)",
    "trace": "Chrome trace / Perfetto (trace.json)",
    "timeline": "Profiler-style memory timeline (memory_timeline.json)",
    "allocations": "Allocation events as text (allocations.csv: large, ~200 bytes an event)",
}


class ExportDialog(QDialog):
    def __init__(self, folder: Path, parent=None, unavailable: dict[str, str] | None = None
                 ) -> None:
        super().__init__(parent)
        self.setObjectName("export_dialog")
        self.setWindowTitle("Export run")
        self.folder_edit = QLineEdit(str(folder))
        self.folder_edit.setObjectName("export_folder")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._on_browse_clicked)
        row = QHBoxLayout()
        row.addWidget(QLabel("Folder"))
        row.addWidget(self.folder_edit, 1)
        row.addWidget(browse)
        self.checks: dict[str, QCheckBox] = {}
        box = QGroupBox("Write")
        box_layout = QVBoxLayout(box)
        for fmt in (RUN_FILES, PNG, SVG, *extra_formats()):
            check = QCheckBox(DESCRIPTIONS.get(fmt, fmt))
            check.setObjectName(f"export_{fmt.replace(' ', '_')}")
            reason = (unavailable or {}).get(fmt)
            # Every format this run can make, as `--export all` means; a large text copy
            # of what the run files already hold (allocations.csv) only when ticked.
            check.setChecked(not reason and fmt not in on_request_formats())
            if reason:
                check.setEnabled(False)
                check.setToolTip(reason)
                check.setText(f"{check.text()}: not for this run")
            box_layout.addWidget(check)
            self.checks[fmt] = check
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.button(QDialogButtonBox.Ok).setText("Export")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(box)
        layout.addWidget(buttons)
        self.resize(560, self.sizeHint().height())

    def folder(self) -> Path:
        return Path(self.folder_edit.text().strip()).expanduser()

    def choices(self) -> set[str]:
        return {fmt for fmt, check in self.checks.items() if check.isChecked()}

    def _on_browse_clicked(self) -> None:
        # a folder still to come is fine: the export makes it
        choose_folder(self, "Export into folder", self.folder_edit.text(),
                      "export_browse_dialog", lambda p: self.folder_edit.setText(str(p)),
                      may_not_exist=True)


class RunExport(QObject):
    """File > Export for the run `shown`: its dialog, a default folder beside the run's own,
    and the writing (the plots drawn from `plots`, the newest rows first: `refresh_now`)."""

    def __init__(self, parent: QWidget, plots, shown: RunOnScreen,
                 refresh_now: Callable[[], None]) -> None:
        super().__init__(parent)
        self._parent, self._plots, self._shown, self._refresh_now = (parent, plots, shown,
                                                                     refresh_now)

    def default_folder(self) -> Path:
        base = self._shown.shown_folder
        if base is not None:
            return base.with_name(base.name + "-export")
        return Path.cwd() / "exports" / time.strftime("%Y%m%d-%H%M%S")

    def dialog(self) -> ExportDialog | None:
        """The Export dialog for what the window shows (a message when it shows nothing)."""
        history = self._shown.history
        if history is None:
            self._shown.message("Nothing to export", "Run or open a run first.",
                                QMessageBox.Information, "export_message")
            return None
        dialog = ExportDialog(self.default_folder(), self._parent,
                              exporting.unavailable_formats(history))
        dialog.accepted.connect(lambda: self.export_to(dialog.folder(), dialog.choices()))
        dialog.open()
        return dialog

    def export_to(self, folder: Path, choices: set[str]) -> list[Path]:
        shown = self._shown
        if shown.history is None:
            return []
        self._refresh_now()  # the newest rows into the plots first
        plots = self._plots
        widgets = {"memory": plots.memory_plot, "time": plots.time_plot,
                   "loss": plots.loss_plot}
        try:
            written, problems = exporting.export_run(shown.history, widgets, folder, choices,
                                                     shown.shown_folder)
        except (ExportError, OSError, ValueError) as exc:  # never a traceback out of a slot
            shown.message("Export failed", str(exc), QMessageBox.Warning, "export_message")
            return []
        text = f"Wrote {len(written)} files to {folder}"
        if problems:
            shown.message("Export finished with problems",
                          text + ".\n\nNot written:\n" + "\n".join(problems),
                          QMessageBox.Warning, "export_message")
        shown.say(text, 8000)
        return written
