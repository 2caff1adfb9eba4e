"""The rank chooser: which rank of a distributed run folder (rank0/, rank1/, ...) is shown."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QWidget


class RankChooser(QWidget):
    """A combo box of the ranks of one parent folder; hidden when the run shown has none."""

    rank_chosen = Signal(object)  # the chosen rank's folder (Path)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("rank_chooser")
        self.parent_folder: Path | None = None
        self.folders: list[Path] = []
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("Rank:"))
        self.combo = QComboBox()
        self.combo.setObjectName("rank_combo")
        self.combo.setToolTip("Each rank of a torchrun job records its own folder: "
                              "choose the one shown")
        row.addWidget(self.combo)
        self.combo.currentIndexChanged.connect(self._on_rank_changed)
        self.hide()

    def set_ranks(self, parent_folder: Path, folders: list[Path]) -> None:
        """Offer these rank folders (rank order); the first is selected, without a signal."""
        self.parent_folder, self.folders = Path(parent_folder), list(folders)
        self.combo.blockSignals(True)
        try:
            self.combo.clear()
            self.combo.addItems([f"{f.name[4:]} of {len(folders)}" for f in folders])
            self.combo.setCurrentIndex(0)
        finally:
            self.combo.blockSignals(False)
        self.setVisible(bool(folders))

    def clear(self) -> None:
        self.parent_folder, self.folders = None, []
        self.hide()

    def select(self, rank_index: int) -> None:
        self.combo.setCurrentIndex(rank_index)

    @property
    def current(self) -> Path | None:
        i = self.combo.currentIndex()
        return self.folders[i] if 0 <= i < len(self.folders) else None

    def _on_rank_changed(self, index: int) -> None:
        if 0 <= index < len(self.folders):
            self.rank_chosen.emit(self.folders[index])
