"""Choosing a folder: Qt's own dialog (it follows the app's theme, where a system dialog
stays light), window-modal and opened, not exec'd, so a run goes on meanwhile; one that may
name a folder still to come (File > Follow run… before the run that makes it starts)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QFileDialog, QWidget


class FolderDialog(QFileDialog):
    """A folder dialog; with `may_not_exist`, a name typed for a folder that does not exist
    yet (in a folder that does) is chosen as it is, where Qt's would refuse it."""

    def __init__(self, parent: QWidget | None, title: str, start: str,
                 may_not_exist: bool = False) -> None:
        super().__init__(parent, title, start)
        self.may_not_exist = may_not_exist
        self.setOption(QFileDialog.DontUseNativeDialog)
        self.setOption(QFileDialog.ShowDirsOnly)
        self.setFileMode(QFileDialog.Directory)
        self.setAttribute(Qt.WA_DeleteOnClose)

    def accept(self) -> None:
        typed = self.selectedFiles()
        if (self.may_not_exist and typed and not os.path.lexists(typed[0])
                and Path(typed[0]).parent.is_dir()):
            self.fileSelected.emit(typed[0])
            self.done(QDialog.DialogCode.Accepted)
            return
        super().accept()


def choose_folder(parent: QWidget | None, title: str, start: str, name: str,
                  chosen: Callable[[Path], object], may_not_exist: bool = False) -> FolderDialog:
    """Open a folder dialog named `name`; `chosen(path)` once the user picks one."""
    dialog = FolderDialog(parent, title, start, may_not_exist)
    dialog.setObjectName(name)
    dialog.fileSelected.connect(lambda path: chosen(Path(path)))
    dialog.open()
    return dialog
