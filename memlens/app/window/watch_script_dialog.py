"""File > Watch a script…: the script, its arguments and the folder it runs in, checked
before anything starts and remembered for the next time (app_settings)."""

from __future__ import annotations

import shlex
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QWidget,
)

from memlens.core.watch.script import check_script

KEYS = {"script": "watch_script/script", "args": "watch_script/args",
        "cwd": "watch_script/cwd"}


class WatchScriptDialog(QDialog):
    """Emits `chosen(script, args, cwd)` once the entries are a script that can run."""

    chosen = Signal(str, list, str)

    def __init__(self, settings, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("watch_script_dialog")
        self.setWindowTitle("Watch a script")
        self.settings = settings
        self.script = QLineEdit(settings.get(KEYS["script"], "") or "")
        self.script.setObjectName("watch_script_path")
        self.script.setPlaceholderText("train.py")
        self.args = QLineEdit(settings.get(KEYS["args"], "") or "")
        self.args.setObjectName("watch_script_args")
        self.args.setPlaceholderText("--epochs 2 --lr 0.1 (as on a command line)")
        self.cwd = QLineEdit(settings.get(KEYS["cwd"], "") or str(Path.cwd()))
        self.cwd.setObjectName("watch_script_cwd")
        self.problem = QLabel("")
        self.problem.setObjectName("watch_script_problem")
        self.problem.setWordWrap(True)
        self.problem.hide()
        form = QFormLayout(self)
        form.addRow("Script", _with_browse(self.script, self._browse_script))
        form.addRow("Arguments", self.args)
        form.addRow("Working folder", _with_browse(self.cwd, self._browse_cwd))
        note = QLabel("The script runs as `python SCRIPT ARGS` would, in the working folder, "
                      "recorded and followed live; the Techniques panel toggles its "
                      "techniques at step boundaries.")
        note.setWordWrap(True)
        form.addRow(note)
        form.addRow(self.problem)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.button(QDialogButtonBox.Ok).setText("Watch")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self.resize(560, self.sizeHint().height())

    def _browse_script(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "A training script", self.cwd.text(),
                                              "Python scripts (*.py)")
        if path:
            self.script.setText(path)

    def _browse_cwd(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Working folder", self.cwd.text())
        if folder:
            self.cwd.setText(folder)

    def entries(self) -> tuple[str, list[str], str]:
        """(script, its arguments, the working folder); ValueError says what is wrong."""
        cwd = Path(self.cwd.text().strip() or ".").expanduser()
        if not cwd.is_dir():
            raise ValueError(f"{cwd}: no such folder. Give the folder the script runs in.")
        text = self.script.text().strip()
        if not text:
            raise ValueError("Give the path of your training script (a .py file).")
        script = Path(text).expanduser()
        script = script if script.is_absolute() else cwd / script
        why = check_script(str(script))
        if why:
            raise ValueError(why)
        try:
            args = shlex.split(self.args.text())
        except ValueError as exc:
            raise ValueError(f"The arguments cannot be read: {exc}.") from None
        return str(script), args, str(cwd.resolve())

    def accept(self) -> None:
        try:
            script, args, cwd = self.entries()
        except ValueError as exc:
            self.problem.setText(str(exc))
            self.problem.show()
            return
        for key, value in (("script", self.script.text().strip()), ("args", self.args.text()),
                           ("cwd", cwd)):
            self.settings.put(KEYS[key], value)
        super().accept()
        self.chosen.emit(script, args, cwd)


def _with_browse(edit: QLineEdit, browse) -> QWidget:
    box = QWidget()
    row = QHBoxLayout(box)
    row.setContentsMargins(0, 0, 0, 0)
    row.addWidget(edit, 1)
    button = QPushButton("Browse…")
    button.clicked.connect(browse)
    row.addWidget(button)
    return box
