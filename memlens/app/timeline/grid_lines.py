"""A light horizontal grid at the left axis's major ticks, drawn in one call.

pyqtgraph's own grid is painted by the axis across the whole view, alpha-blended, at every
tick level, and was half of a frame's paint time here; this one is a few opaque lines.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QLineF, QRectF
from PySide6.QtGui import QColor, QPen

# Dark at low alpha: light grey on white, a slightly deeper shade over the stacked areas.
GRID_COLOR = QColor(0, 0, 0, 30)


class GridLines(pg.GraphicsObject):
    def __init__(self, axis: pg.AxisItem) -> None:
        super().__init__()
        self.axis = axis
        self._pen = QPen(GRID_COLOR)
        self._pen.setCosmetic(True)

    def set_color(self, color) -> None:
        self._pen.setColor(color)
        self.update()
        self.setZValue(7)  # over the areas (z 5), under every line
        self._lines: list[QLineF] | None = None

    def boundingRect(self) -> QRectF:
        vb = self.getViewBox()
        return vb.viewRect() if vb is not None else QRectF()

    def viewRangeChanged(self) -> None:
        # Lines are worked out once per view change, not at every paint.
        self._lines = None
        self.prepareGeometryChange()
        self.update()

    def _compute_lines(self) -> list[QLineF]:
        vb = self.getViewBox()
        if vb is None:
            return []
        (x0, x1), (y0, y1) = vb.viewRange()
        levels = self.axis.tickValues(y0, y1, max(vb.height(), 1.0))
        return [QLineF(x0, v, x1, v) for v in levels[0][1]] if levels else []

    def paint(self, painter, *_args) -> None:
        if self._lines is None:
            self._lines = self._compute_lines()
        if self._lines:
            painter.setPen(self._pen)
            painter.drawLines(self._lines)
