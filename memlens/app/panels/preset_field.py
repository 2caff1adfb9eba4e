"""The preset chooser: the built-in presets, recent model files, and "Model file…".

Picking "Model file…" opens a file dialog; the file is only remembered here, never run
(the run's worker thread loads it at Start). The field's value is the preset setting: a
built-in's name or the file's absolute path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import QComboBox, QFileDialog, QWidget

from memlens.app.panels.option_fields import OptionField
from memlens.app.recent_model_files import RecentModelFiles
from memlens.core.options import PRESETS, Option, is_model_file

CHOOSE_TEXT = "Model file…"
_CHOOSE = "\0choose"  # the item data of the "Model file…" entry


class PresetField(OptionField):
    """`file_chosen(path)`: the user picked a model file (a new one, or a recent one)."""

    file_chosen = Signal(str)

    def __init__(self, opt: Option, parent: QWidget | None = None,
                 recent: RecentModelFiles | None = None) -> None:
        self.recent = recent if recent is not None else RecentModelFiles()
        self._previous = 0
        super().__init__(opt, parent)

    def _make_editor(self, opt: Option) -> QWidget:
        w = QComboBox()
        w.setMinimumContentsLength(12)
        w.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        w.currentIndexChanged.connect(self._on_index_changed)
        self._combo = w
        self._fill(self.recent.paths())
        return w

    def _fill(self, files: list[str]) -> None:
        w = self._combo
        with QSignalBlocker(w):
            w.clear()
            for name in PRESETS:
                w.addItem(name, name)
            for path in files:
                self._add_file_item(path)
            w.insertSeparator(w.count())
            w.addItem(CHOOSE_TEXT, _CHOOSE)
            w.setItemData(w.count() - 1, "Open a Python file with build_model() and "
                          "make_batch(): see docs/model-files.md", Qt.ToolTipRole)

    def _add_file_item(self, path: str) -> int:
        w = self._combo
        index = w.findData(_CHOOSE)
        index = w.count() if index < 0 else index - 1  # above the separator
        w.insertItem(index, Path(path).name, path)
        w.setItemData(index, path, Qt.ToolTipRole)
        return index

    def value(self) -> Any:
        data = self._combo.currentData()
        return self._combo.itemData(self._previous) if data == _CHOOSE else data

    def set_value(self, value: Any) -> None:
        w = self._combo
        text = str(value)
        index = w.findData(text)
        if index < 0 and is_model_file(text):
            with QSignalBlocker(w):
                index = self._add_file_item(text)
        if index >= 0:
            with QSignalBlocker(w):
                w.setCurrentIndex(index)
            self._previous = index

    def _on_index_changed(self, index: int) -> None:
        w = self._combo
        if w.itemData(index) == _CHOOSE:
            self.choose_file()
            return
        self._previous = index
        value = w.itemData(index)
        if is_model_file(str(value)):
            self.file_chosen.emit(value)
        self.value_changed.emit(self.option.key, value)

    def choose_file(self) -> str | None:
        """Ask for a model file; on a pick, remember and select it, else go back."""
        w = self._combo
        recent = self.recent.paths()
        folder = str(Path(recent[0]).parent) if recent else str(Path.cwd())
        path, _ = QFileDialog.getOpenFileName(w.window(), "Open a model file", folder,
                                              "Python model files (*.py)")
        if not path:
            with QSignalBlocker(w):
                w.setCurrentIndex(self._previous)
            return None
        path = str(Path(path).resolve())
        self._fill(self.recent.add(path))
        self.set_value(path)
        self.file_chosen.emit(path)
        self.value_changed.emit(self.option.key, path)
        return path
