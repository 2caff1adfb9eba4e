"""Plot items that repaint only what a new setData changed: a live run's right edge.

pyqtgraph's curves invalidate their whole bounding rect at every setData (and their bounding
rect changes as the data grows, which invalidates it again), so every frame of a live run
repainted every plot whole although only its last bins changed. These items keep their
points in pieces of CHUNK points along x (Qt's raster engine also fills and strokes short
pieces much faster than one long polygon or path), rebuild only the pieces from the first
changed point on, invalidate only the strip from that point to their right edge, and paint
only the pieces that strip crosses. Their bounding rect keeps room to grow into, so it
changes (and the item repaints whole) only now and then. Points must come in x order.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF

CHUNK = 50
ROOM = 0.25  # a new bounding rect leaves this share of the data's size to grow into
MARGIN_PX = 2.0  # pieces this near an exposed strip are painted too (pens, rounding)


class EdgeRepaintItem(pg.GraphicsObject):
    """Rows of y values against one x (shape (rows, n)); subclasses make and paint pieces."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.setFlag(self.GraphicsItemFlag.ItemUsesExtendedStyleOption)  # exposedRect
        self._x = np.empty(0)
        self._ys = np.empty((rows, 0))
        self._pieces: list[list] = [[] for _ in range(rows)]
        self._piece_x0 = self._piece_x1 = np.empty(0)  # first and last x of each piece
        self._bounds = QRectF()

    # --- subclasses -------------------------------------------------------------------------
    def _piece(self, x: np.ndarray, y: np.ndarray):
        """What paint draws for points (x, y) of one row."""
        raise NotImplementedError

    def _paint_pieces(self, painter, first: int, last: int) -> None:
        raise NotImplementedError

    # --- data -------------------------------------------------------------------------------
    def _store(self, x: np.ndarray, ys: np.ndarray, lo: float, hi: float) -> bool:
        """Take new points whose y spans [lo, hi]. False when they are the points shown."""
        old_x, old = self._x, self._ys
        if (x.shape == old_x.shape and ys.shape == old.shape and np.array_equal(x, old_x)
                and np.array_equal(ys, old, equal_nan=ys.dtype.kind == "f")):
            return False
        first_change = self._first_change(x, ys)
        # Piece c holds points [c * (CHUNK - 1), c * (CHUNK - 1) + CHUNK): whole pieces made
        # only of unchanged points, then and now, are kept.
        keep = (min(first_change, len(x), len(old_x)) - CHUNK) // (CHUNK - 1) + 1
        keep = max(keep, 0) if old.shape[0] == ys.shape[0] else 0
        self._x, self._ys = x, ys
        n = len(x)
        starts = np.arange(0, max(n - 1, 1), CHUNK - 1) if n else np.empty(0, dtype=np.intp)
        self._pieces = [old_pieces[:keep] + [self._piece(x[a : a + CHUNK], y[a : a + CHUNK])
                                             for a in starts[keep:]]
                        for old_pieces, y in zip(self._pieces, ys, strict=True)]
        self._piece_x0 = x[starts]
        self._piece_x1 = x[np.minimum(starts + CHUNK, n) - 1] if n else self._piece_x0
        self._invalidate(first_change, old_x, lo, hi)
        self.informViewBoundsChanged()
        return True

    def _first_change(self, x: np.ndarray, ys: np.ndarray) -> int:
        old_x, old = self._x, self._ys
        if old.shape[0] != ys.shape[0]:
            return 0
        m = min(len(x), len(old_x))
        same = (x[:m] == old_x[:m]) & ((ys[:, :m] == old[:, :m])
                                       | (np.isnan(ys[:, :m]) & np.isnan(old[:, :m]))).all(axis=0)
        return m if same.all() else int(np.argmin(same))

    def _invalidate(self, first_change: int, old_x: np.ndarray, lo: float, hi: float) -> None:
        x, b = self._x, self._bounds
        if not len(x):
            if not b.isNull():
                self.prepareGeometryChange()  # repaints what it covered
                self._bounds = QRectF()
            return
        x0, x1 = float(x[0]), float(x[-1])
        if not (math.isfinite(lo) and math.isfinite(hi)):
            lo = hi = 0.0
        if not (b.left() <= x0 and x1 <= b.right() and b.top() <= lo and hi <= b.bottom()
                and not b.isNull()):
            self.prepareGeometryChange()
            w, h = x1 - x0, hi - lo
            pad = ROOM * h if h > 0 else ROOM * max(abs(hi), 1.0)
            self._bounds = QRectF(x0, lo - pad / 2, w + ROOM * w + 1.0, h + pad)
            self.update()
            return
        # The changed strip: from the last point both shared (its segment to the first new
        # point changed) to the right end of the bounds, which holds old and new ends.
        i = max(first_change - 1, 0)
        xa = min(float(x[min(i, len(x) - 1)]), float(old_x[i]) if i < len(old_x) else x1)
        self.update(QRectF(xa, b.top(), b.right() - xa, b.height()))

    # --- QGraphicsItem ------------------------------------------------------------------------
    def boundingRect(self) -> QRectF:
        return self._bounds

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange=None):
        if not len(self._x):
            return (None, None)
        if ax == 0:
            return (float(self._x[0]), float(self._x[-1]))
        return (float(np.nanmin(self._ys)), float(np.nanmax(self._ys)))

    def paint(self, painter, option, _widget=None) -> None:
        if not len(self._piece_x0):
            return
        rect = option.exposedRect
        scale = abs(painter.worldTransform().m11()) or 1.0
        margin = MARGIN_PX / scale
        first = int(np.searchsorted(self._piece_x1, rect.left() - margin, "left"))
        last = int(np.searchsorted(self._piece_x0, rect.right() + margin, "right"))
        if first < last:
            self._paint_pieces(painter, first, last)
