"""File > Runs folder…: where the runs started in the app are written, shown in the menu and
remembered (app_settings), whatever folder the app was started from."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction

from memlens.app.app_settings import AppSettings
from memlens.app.panels.folder_dialog import FolderDialog, choose_folder


class RunsFolderChoice(QObject):
    """Owns the runs folder (`folder`: None keeps runs in memory only) and its menu entry;
    `folder_changed(path)` when the user chooses another."""

    folder_changed = Signal(object)  # the new runs folder (a Path)

    def __init__(self, parent, settings: AppSettings, folder: Path | None) -> None:
        super().__init__(parent)
        self._parent, self.settings = parent, settings
        self.folder = Path(folder) if folder is not None else None
        self.action = QAction(self._text(), parent)
        self.action.setObjectName("runs_folder_action")
        self.action.setToolTip("Where the runs you start here are written")
        self.action.triggered.connect(self.dialog)

    def _text(self) -> str:
        return (f"Runs &folder: {self.folder}…" if self.folder is not None
                else "Runs &folder…")

    def dialog(self) -> FolderDialog:
        folder = self.folder
        start = folder if folder is not None and folder.is_dir() else Path.home()
        # window-modal, not exec'd: a run keeps going meanwhile
        return choose_folder(self._parent, "Where new runs are written", str(start),
                             "runs_folder_dialog", self.set_folder)

    def set_folder(self, folder: str | Path) -> None:
        """New runs go to `folder` from the next Start on (made then if missing)."""
        self.settings.set_runs_folder(folder)
        self.settings.sync()
        self.folder = self.settings.runs_folder()
        self.action.setText(self._text())
        self.folder_changed.emit(self.folder)
