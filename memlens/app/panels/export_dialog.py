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

from memlens.app.exporting import PNG, RUN_FILES, SVG, extra_formats, on_request_formats

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
