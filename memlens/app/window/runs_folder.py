"""File > Runs folder…: where the runs started in the app are written, shown in the menu and
remembered (app_settings), whatever folder the app was started from."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog

from memlens.app.app_settings import AppSettings


class RunsFolderChoice(QObject):
    folder_changed = Signal(object)  # the new runs folder (a Path)

    def __init__(self, window, settings: AppSettings) -> None:
        super().__init__(window)
        self.main_window, self.settings = window, settings
        self.action = QAction(self._text(), window)
        self.action.setObjectName("runs_folder_action")
        self.action.setToolTip("Where the runs you start here are written")
        self.action.triggered.connect(self.dialog)

    def _text(self) -> str:
        folder = self.main_window.runs_dir
        return f"Runs &folder: {folder}…" if folder is not None else "Runs &folder…"

    def dialog(self) -> QFileDialog:
        folder = self.main_window.runs_dir
        start = folder if folder is not None and folder.is_dir() else Path.home()
        dialog = QFileDialog(self.main_window, "Where new runs are written", str(start))
        dialog.setObjectName("runs_folder_dialog")
        dialog.setOption(QFileDialog.DontUseNativeDialog)
        dialog.setOption(QFileDialog.ShowDirsOnly)
        dialog.setFileMode(QFileDialog.Directory)
        dialog.setAttribute(Qt.WA_DeleteOnClose)
        dialog.fileSelected.connect(self.set_folder)
        dialog.open()  # window-modal, not exec'd: a run keeps going meanwhile
        return dialog

    def set_folder(self, folder: str | Path) -> None:
        """New runs go to `folder` from the next Start on (made then if missing)."""
        self.settings.set_runs_folder(folder)
        self.settings.sync()
        path = self.settings.runs_folder()
        window = self.main_window
        window.runs_dir = path
        window.lessons_tab.runs_dir = path
        self.action.setText(self._text())
        window.statusBar().showMessage(f"New runs are written to {path}", 6000)
        self.folder_changed.emit(path)
