"""Stacked areas as one graphics item: a closed path per layer, built once per setData.

Five PlotCurveItems with fillLevel cost about 15 ms a frame here, mostly pyqtgraph cutting
each fill into chunks in Python at every paint; one path per layer, made with numpy, paints
the same picture for a fraction of that. Each layer is cut into polygons of CHUNK points
(as pyqtgraph's own fills are): Qt's raster engine fills a long sawtooth polygon, such as
the per-phase memory of many steps, many times slower than the same edges in short pieces.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from pyqtgraph.functions import create_qpolygonf, ndarray_from_qpolygonf
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QPolygonF

CHUNK = 50


class StackedArea(pg.GraphicsObject):
    """`setData(x, layers)`: layers are cumulative (shape (n_layers, n)), the last the top."""

    def __init__(self, colors: list[str]) -> None:
        super().__init__()
        self._brushes = [QBrush(QColor(c)) for c in colors]
        self._x = np.empty(0)
        self._layers = np.empty((len(colors), 0))
        self._polygons: list[list[QPolygonF]] = []  # per layer
        self._rect = QRectF()

    def setData(self, x: np.ndarray, layers: np.ndarray) -> None:
        self.prepareGeometryChange()
        self._x = np.asarray(x, dtype=np.float64)
        self._layers = np.asarray(layers)
        self._polygons = []
        if len(self._x):
            self._polygons = [_chunk_polygons(self._x, layer) for layer in self._layers]
            top = float(np.nanmax(self._layers[-1])) if self._layers.size else 0.0
            self._rect = QRectF(self._x[0], 0.0, self._x[-1] - self._x[0], max(top, 0.0))
        else:
            self._rect = QRectF()
        self.informViewBoundsChanged()
        self.update()

    def layer_data(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if not len(self._x):
            return self._x, self._x
        return self._x, self._layers[i]

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange=None):
        if not len(self._x):
            return (None, None)
        if ax == 0:
            return (float(self._x[0]), float(self._x[-1]))
        return (0.0, self._rect.bottom())

    def boundingRect(self) -> QRectF:
        return self._rect

    def paint(self, painter, *_args) -> None:
        # The top layer first; each lower one paints over it, so every band keeps its colour.
        painter.setPen(Qt.NoPen)
        for polygons, brush in zip(reversed(self._polygons), reversed(self._brushes),
                                   strict=False):
            painter.setBrush(brush)
            for polygon in polygons:
                painter.drawPolygon(polygon)


def _chunk_polygons(x: np.ndarray, y: np.ndarray) -> list[QPolygonF]:
    """The area under (x, y) down to 0, as polygons of at most CHUNK points that share
    their edge points, so the pieces meet without a seam."""
    out = []
    n = len(x)
    for start in range(0, max(n - 1, 1), CHUNK - 1):
        stop = min(start + CHUNK, n)
        m = stop - start
        polygon = create_qpolygonf(m + 2)
        xy = ndarray_from_qpolygonf(polygon)
        xy[:m, 0] = x[start:stop]
        xy[:m, 1] = y[start:stop]
        xy[m:, 0] = (x[stop - 1], x[start])
        xy[m:, 1] = 0.0
        out.append(polygon)
    return out


class AreaLayer:
    """One layer of a StackedArea, with a curve's getData(), so readers treat it as one."""

    def __init__(self, area: StackedArea, index: int) -> None:
        self.area, self.index = area, index

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        return self.area.layer_data(self.index)

    def setData(self, *_args) -> None:
        self.area.setData(np.empty(0), np.empty((len(self.area._brushes), 0)))
