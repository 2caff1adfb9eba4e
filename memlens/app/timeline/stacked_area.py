"""Stacked areas as one graphics item: closed polygons per layer, built once per setData.

Five PlotCurveItems with fillLevel spend most of a frame in pyqtgraph cutting each fill
into chunks in Python at every paint; polygons made with numpy paint the same picture for a
fraction of that. Each layer is cut into polygons of CHUNK points (as pyqtgraph's own fills
are): Qt's raster engine fills one long polygon or path many times slower than the same
edges in short pieces (the figures: docs/performance-notes.md).
A live run only appends: pieces whose points did not change are kept, and only the strip
from the first change on is repainted (memlens.app.timeline.edge_repaint).
"""

from __future__ import annotations

import numpy as np
from pyqtgraph.functions import create_qpolygonf, ndarray_from_qpolygonf
from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QPolygonF

from memlens.app.timeline.edge_repaint import CHUNK, EdgeRepaintItem

__all__ = ["CHUNK", "AreaLayer", "StackedArea"]


class StackedArea(EdgeRepaintItem):
    """`setData(x, layers)`: layers are cumulative (shape (n_layers, n)), the last the top."""

    def __init__(self, colors: list[str]) -> None:
        super().__init__(len(colors))
        self._brushes = [QBrush(QColor(c)) for c in colors]
        self.top = 0.0  # the highest point of the top layer

    y_map = None  # see LivePlot.set_log_y

    def setData(self, x: np.ndarray, layers: np.ndarray) -> None:
        x = np.array(x, dtype=np.float64)  # copies: compared with the next setData's
        layers = np.array(layers).reshape(len(self._brushes), len(x))
        if self.y_map is not None:
            layers = self.y_map(np.asarray(layers, dtype=np.float64))
        top = 0.0
        if layers.size:
            t = np.fmax.reduce(layers[-1])
            top = max(float(t), 0.0) if np.isfinite(t) else 0.0
        if self._store(x, layers, 0.0, top):
            self.top = top

    def _piece(self, x: np.ndarray, y: np.ndarray) -> QPolygonF:
        """The area under (x, y) down to 0; pieces share their edge points, so they meet
        without a seam."""
        m = len(x)
        polygon = create_qpolygonf(m + 2)
        xy = ndarray_from_qpolygonf(polygon)
        xy[:m, 0] = x
        xy[:m, 1] = y
        xy[m:, 0] = (x[-1], x[0])
        xy[m:, 1] = 0.0
        return polygon

    def layer_data(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if not len(self._x):
            return self._x, self._x
        return self._x, self._ys[i]

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange=None):
        if not len(self._x):
            return (None, None)
        if ax == 0:
            return (float(self._x[0]), float(self._x[-1]))
        return (0.0, self.top)

    def _paint_pieces(self, painter, first: int, last: int) -> None:
        # The top layer first; each lower one paints over it, so every band keeps its colour.
        painter.setPen(Qt.NoPen)
        for polygons, brush in zip(reversed(self._pieces), reversed(self._brushes),
                                   strict=True):
            painter.setBrush(brush)
            for polygon in polygons[first:last]:
                painter.drawPolygon(polygon)


class AreaLayer:
    """One layer of a StackedArea, with a curve's getData(), so readers treat it as one."""

    def __init__(self, area: StackedArea, index: int) -> None:
        self.area, self.index = area, index

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        return self.area.layer_data(self.index)

    def setData(self, *_args) -> None:
        self.area.setData(np.empty(0), np.empty((len(self.area._brushes), 0)))
