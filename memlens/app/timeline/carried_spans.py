"""The steps whose saved-for-backward figures are carried (a watch's steps without detail,
core.watch.detail): hatched across the memory plot, so no one reads their activations as
measured there.

The hatch is drawn in device pixels (a pattern in the view's own units would stretch with
every zoom), over the full height of the view, translucent so the bands under it still read.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor

CARRIED_HATCH = "#5A5A5A"  # the hatch lines, at CARRIED_ALPHA
CARRIED_ALPHA = 110
HATCH_GLYPH = "&#9636;"  # the legend's swatch for it: a hatched square


class CarriedSpans(pg.GraphicsObject):
    """`set_spans(starts, ends)`: x ranges on the step axis, hatched top to bottom."""

    def __init__(self) -> None:
        super().__init__()
        color = QColor(CARRIED_HATCH)
        color.setAlpha(CARRIED_ALPHA)
        self._brush = QBrush(color, Qt.BDiagPattern)
        self.starts = np.empty(0)
        self.ends = np.empty(0)

    def set_spans(self, starts: np.ndarray, ends: np.ndarray) -> None:
        starts, ends = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
        if np.array_equal(starts, self.starts) and np.array_equal(ends, self.ends):
            return
        self.prepareGeometryChange()
        self.starts, self.ends = starts, ends
        self.update()

    def _y_range(self) -> tuple[float, float]:
        view = self.getViewBox()
        if view is None:
            return 0.0, 1.0
        _x, (y0, y1) = view.viewRange()
        return y0, y1

    def viewRangeChanged(self) -> None:
        """The spans reach the view's top and bottom: a new y range is a new shape."""
        self.prepareGeometryChange()

    def boundingRect(self) -> QRectF:
        if not len(self.starts):
            return QRectF()
        y0, y1 = self._y_range()
        return QRectF(float(self.starts[0]), y0, float(self.ends[-1] - self.starts[0]), y1 - y0)

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange=None):
        return (None, None)  # the spans follow the data; they never widen the view

    def paint(self, painter, *_args) -> None:
        if not len(self.starts):
            return
        y0, y1 = self._y_range()
        to_device = painter.transform()
        painter.save()
        painter.resetTransform()  # the hatch's pattern in pixels, whatever the zoom
        painter.setPen(Qt.NoPen)
        for a, b in zip(self.starts, self.ends, strict=True):
            rect = to_device.mapRect(QRectF(float(a), y0, float(b - a), y1 - y0))
            painter.fillRect(rect, self._brush)
        painter.restore()
