"""A solid live line that repaints only its changed right edge (see app.timeline.edge_repaint).

Drawn as polylines of CHUNK points with the same cosmetic pen a PlotCurveItem would use;
non-finite points break the line, as pyqtgraph's connect="finite" does.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from pyqtgraph.functions import create_qpolygonf, ndarray_from_qpolygonf
from PySide6.QtGui import QPainter, QPolygonF

from memlens.app.timeline.edge_repaint import EdgeRepaintItem


class LiveLine(EdgeRepaintItem):
    """`setData(x, y)` and `getData()` as a PlotCurveItem; `xData`/`yData` what it shows."""

    def __init__(self, pen) -> None:
        super().__init__(1)
        self.pen = pg.mkPen(pen)

    y_map = None  # see LivePlot.set_log_y

    def setData(self, x, y) -> None:
        x = np.array(x, dtype=np.float64)  # copies: compared with the next setData's
        y = np.array(y, dtype=np.float64).reshape(1, len(x))
        if self.y_map is not None:
            y = self.y_map(y)
        lo = hi = np.nan
        if len(x):
            lo, hi = float(np.fmin.reduce(y[0])), float(np.fmax.reduce(y[0]))
        self._store(x, y, lo, hi)

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        return self._x, self._ys[0]

    @property
    def xData(self) -> np.ndarray:
        return self._x

    @property
    def yData(self) -> np.ndarray:
        return self._ys[0]

    def _piece(self, x: np.ndarray, y: np.ndarray) -> list[QPolygonF]:
        """Polylines through the runs of finite points (two points at least)."""
        finite = np.isfinite(y)
        if finite.all():
            return [_polyline(x, y)]
        edges = np.flatnonzero(np.diff(np.concatenate([[False], finite, [False]])))
        return [_polyline(x[a:b], y[a:b]) for a, b in zip(edges[::2], edges[1::2], strict=True)
                if b - a >= 2]

    def _paint_pieces(self, painter, first: int, last: int) -> None:
        # As PlotCurveItem does with the app's antialias=False: exports (which turn it on
        # for the painter) draw the lines as the screen does.
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        painter.setPen(self.pen)
        for piece in self._pieces[0][first:last]:
            for polyline in piece:
                painter.drawPolyline(polyline)


def _polyline(x: np.ndarray, y: np.ndarray) -> QPolygonF:
    polygon = create_qpolygonf(len(x))
    xy = ndarray_from_qpolygonf(polygon)
    xy[:, 0] = x
    xy[:, 1] = y
    return polygon
