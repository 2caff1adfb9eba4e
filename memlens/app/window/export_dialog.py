"""The Export dialog: a folder and what to write there."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
)

from memlens.app.window import exporting
from memlens.app.window.exporting import PNG, RUN_FILES, SVG, extra_formats, on_request_formats

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
        chosen = QFileDialog.getExistingDirectory(self, "Export into folder",
                                                  self.folder_edit.text())
        if chosen:
            self.folder_edit.setText(chosen)


def export_dialog(window):
    """The Export dialog for what the window shows (a message when it shows nothing)."""
    from PySide6.QtWidgets import QMessageBox

    if window.history is None:
        window.message("Nothing to export", "Run or open a run first.",
                       QMessageBox.Information, "export_message")
        return None
    dialog = ExportDialog(exporting.default_export_folder(window), window,
                          exporting.unavailable_formats(window.history))
    dialog.accepted.connect(lambda: exporting.export_to(window, dialog.folder(), dialog.choices()))
    dialog.open()
    return dialog
