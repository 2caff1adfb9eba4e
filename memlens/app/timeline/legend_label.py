"""The plot's title row as a legend that wraps at the plot's width instead of running off it."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt


class LegendLabel(pg.LabelItem):
    """pyqtgraph's label asks the layout for its text's whole width, so a long legend widens
    the plot or is cut at the window's edge. This one breaks its lines at its own width
    (the view's column) and asks for no width at all: the plot decides the width, the text
    decides the height (LivePlot grows the row to it)."""

    def updateMin(self) -> None:
        height = self.item.boundingRect().height()
        self.setMinimumWidth(0)
        self._sizeHint = {
            Qt.SizeHint.MinimumSize: (0, 0),
            Qt.SizeHint.PreferredSize: (0, height),
            Qt.SizeHint.MaximumSize: (-1, -1),
            Qt.SizeHint.MinimumDescent: (0, 0),
        }
        self.updateGeometry()

    def resizeEvent(self, ev) -> None:
        width = self.size().width()
        if width > 0 and self.item.textWidth() != width:
            self.item.setTextWidth(width)
        super().resizeEvent(ev)

    def text_height(self) -> float:
        """The wrapped text's height (the row must be at least this tall)."""
        return self.item.boundingRect().height()

    def text_width(self) -> float:
        """The widest line's width: at most the label's width unless a word is wider."""
        return self.item.document().idealWidth()
