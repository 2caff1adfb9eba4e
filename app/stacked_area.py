"""Stacked areas as one graphics item: a closed path per layer, built once per setData.

Five PlotCurveItems with fillLevel cost about 15 ms a frame here, mostly pyqtgraph cutting
each fill into chunks in Python at every paint; one path per layer, made with numpy, paints
the same picture for a fraction of that.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF
from PySide6.QtGui import QBrush, QColor, QPainterPath


class StackedArea(pg.GraphicsObject):
    """`setData(x, layers)`: layers are cumulative (shape (n_layers, n)), the last the top."""

    def __init__(self, colors: list[str]) -> None:
        super().__init__()
        self._brushes = [QBrush(QColor(c)) for c in colors]
        self._x = np.empty(0)
        self._layers = np.empty((len(colors), 0))
        self._paths: list[QPainterPath] = []
        self._rect = QRectF()

    def setData(self, x: np.ndarray, layers: np.ndarray) -> None:
        self.prepareGeometryChange()
        self._x = np.asarray(x, dtype=np.float64)
        self._layers = np.asarray(layers)
        self._paths = []
        if len(self._x):
            # Each layer: down to zero at both ends, so the path closes along the axis.
            xs = np.concatenate([self._x[:1], self._x, self._x[-1:]])
            for layer in self._layers:
                ys = np.concatenate([[0.0], layer, [0.0]])
                self._paths.append(pg.arrayToQPath(xs, ys, connect="all"))
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
        for path, brush in zip(reversed(self._paths), reversed(self._brushes), strict=False):
            painter.fillPath(path, brush)


class AreaLayer:
    """One layer of a StackedArea, with a curve's getData(), so readers treat it as one."""

    def __init__(self, area: StackedArea, index: int) -> None:
        self.area, self.index = area, index

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        return self.area.layer_data(self.index)

    def setData(self, *_args) -> None:
        self.area.setData(np.empty(0), np.empty((len(self.area._brushes), 0)))
