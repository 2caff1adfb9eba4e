"""The fix of a watched script (`main.py fix`, started by the events list's Try the fix): its
progress while both copies run, then each fix with its diff, memory before -> after, the
step-time ratio and whether the results stayed the same; Write the fix asks for it to be
applied to the user's files (app.window.fix_session confirms and writes).

The panel shows what it is given (fix.json's entries, as core.fix.report wrote them) and
says in the report's own words what each figure is (core.fix.report's lines)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFontDatabase
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from memlens.core.fix.report import memory_lines, results_line, time_line

WHERE_ROLE = Qt.UserRole


def entry_text(entry: dict) -> str:
    """One fix as text: what the watch said, its figures, what it did, then its diff."""
    lines = [f"{', '.join(entry['keys'])} at {entry['where']}", "", entry["diagnosis"], ""]
    if not entry["applied"]:
        return "\n".join([*lines, f"Not changed: {entry['why_not']}"])
    if entry["after"] is not None:
        lines += ["Memory, the original → the patched copy:",
                  *[f"  {m}" for m in memory_lines(entry["before"], entry["after"])],
                  time_line(entry)[0].upper() + time_line(entry)[1:],
                  "Results: " + results_line(entry)]
        if entry["diagnosis_gone"] is False:
            lines.append("The patched copy still reports this diagnosis.")
    lines.append(f"What it did: {entry['does']}")
    if entry["measured_with"]:
        lines.append(f"(Measured together with the fix at {', '.join(entry['measured_with'])})")
    return "\n".join([*lines, "", entry["diff"].rstrip("\n")])


class FixActions(QWidget):
    """Try the fix / Write the fix, under a diagnosis chosen in the events list."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("fix_actions")
        self.try_button = QPushButton("Try the fix")
        self.try_button.setObjectName("fix_try")
        self.try_button.setToolTip("Fix this script's diagnoses on a copy (main.py fix), run "
                                   "both for a few steps and compare them: your files stay "
                                   "as they are")
        self.write_button = QPushButton("Write the fix…")
        self.write_button.setObjectName("fix_write_from_events")
        self.write_button.setToolTip("Apply a fix tried here to your files, each backed up "
                                     "beside it first (asks before it writes)")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.try_button)
        row.addWidget(self.write_button)
        self.hide()  # shown while a diagnosis is the chosen row


class FixPanel(QDialog):
    """A window of its own beside the main one (not modal: the plots stay usable)."""

    write_clicked = Signal()

    def __init__(self, script_name: str, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("fix_panel")
        self.setWindowTitle(f"Fix: {script_name}")
        self.entries: list[dict] = []
        self.heading = QLabel(f"Watching {script_name} and its patched copy…")
        self.heading.setObjectName("fix_heading")
        self.heading.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setObjectName("fix_progress")
        self.progress.setRange(0, 0)  # busy until the first stage says how far
        self.fixes = QListWidget()
        self.fixes.setObjectName("fix_list")
        self.fixes.currentRowChanged.connect(self._on_current_row_changed)
        self.detail = QPlainTextEdit()
        self.detail.setObjectName("fix_detail")
        self.detail.setReadOnly(True)
        self.detail.setLineWrapMode(QPlainTextEdit.WidgetWidth)
        self.detail.setFont(QFontDatabase.systemFont(QFontDatabase.FixedFont))
        split = QSplitter(Qt.Vertical)
        split.addWidget(self.fixes)
        split.addWidget(self.detail)
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 5)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        self.write_button = QPushButton("Write the fix…")
        self.write_button.setObjectName("fix_write")
        self.write_button.setEnabled(False)
        self.write_button.setToolTip("Available once the patched copy has run")
        buttons.addButton(self.write_button, QDialogButtonBox.ActionRole)
        buttons.rejected.connect(self.close)
        self.write_button.clicked.connect(self.write_clicked)
        layout = QVBoxLayout(self)
        layout.addWidget(self.heading)
        layout.addWidget(self.progress)
        layout.addWidget(split, 1)
        layout.addWidget(buttons)
        self.resize(860, 640)

    # --- while it runs -------------------------------------------------------------------------
    def set_progress(self, stage: int, stages: int, text: str, steps: int = 0,
                     of_steps: int = 0) -> None:
        """Stage `stage` of `stages` (a watched run: `steps` of `of_steps` done)."""
        share = steps / of_steps if of_steps else 0.0
        self.progress.setRange(0, 1000)
        self.progress.setValue(int(1000 * (stage - 1 + min(share, 1.0)) / stages))
        self.heading.setText(f"{text}" + (f" (step {steps} of {of_steps})" if of_steps else ""))

    # --- its result ------------------------------------------------------------------------------
    def show_result(self, entries: list[dict], can_write: bool, why_not: str | None,
                    select_where: str | None = None) -> None:
        self.entries = entries
        self.progress.setRange(0, 1000)
        self.progress.setValue(1000)
        applied = sum(1 for e in entries if e["applied"])
        if not entries:
            self.heading.setText("The watch found nothing to fix in these steps.")
        else:
            self.heading.setText(
                f"{applied} of {len(entries)} diagnoses fixed on a copy"
                + ("; the patched copy ran side by side with the original (both pinned)."
                   if applied else "."))
        self.fixes.clear()
        for e in entries:
            mark = "fixed" if e["applied"] else "not changed"
            item = QListWidgetItem(f"{mark}: {', '.join(e['keys'])} ({e['kind']}) at "
                                   f"{e['where'].rsplit('/', 1)[-1]}")
            item.setData(WHERE_ROLE, e["where"])
            if not e["applied"]:
                item.setForeground(QColor("#7F7F7F"))
            self.fixes.addItem(item)
        row = next((i for i, e in enumerate(entries) if e["where"] == select_where), 0)
        if entries:
            self.fixes.setCurrentRow(row)
        self.write_button.setEnabled(can_write)
        self.write_button.setToolTip(
            "Apply the fixes to your files (each backed up beside it first)" if can_write
            else (why_not or "Nothing to write"))

    def show_failure(self, message: str) -> None:
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        self.heading.setText(f"The fix did not run: {message}")
        self.write_button.setEnabled(False)

    def _on_current_row_changed(self, row: int) -> None:
        if 0 <= row < len(self.entries):
            self.detail.setPlainText(entry_text(self.entries[row]))
