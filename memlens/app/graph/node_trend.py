"""The graph panel's node count per capture, on a step axis."""

from __future__ import annotations

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QPainter, QPen, QPolygonF
from PySide6.QtWidgets import QSizePolicy, QWidget

TREND_KEEP = 200  # captures kept on the trend


class NodeTrend(QWidget):
    """Node count per capture on a step axis, train and eval apart: a graph that grows from
    capture to capture (carried state not detached, eval under grad) shows at a glance."""

    COLOURS = {"train": "#1565c0", "eval": "#e65100"}

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("graph_trend")
        self.series: dict[str, list[tuple[int, int]]] = {"train": [], "eval": []}
        self.setMinimumHeight(86)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def add(self, step: int, nodes: int, kind: str = "train") -> None:
        points = self.series.setdefault(kind, [])
        points.append((step, nodes))
        del points[:-TREND_KEEP]
        self.setToolTip("\n".join(self._caption(k) for k, pts in self.series.items() if pts))
        self.update()

    def counts(self, kind: str = "train") -> list[int]:
        return [n for _, n in self.series.get(kind, ())]

    def clear(self) -> None:
        for points in self.series.values():
            points.clear()
        self.update()

    def _caption(self, kind: str, short: bool = False) -> str:
        """`short`: the numbers without the words, for a narrow panel."""
        points = self.series[kind]
        (s0, first), (_s1, last) = points[0], points[-1]
        if len(points) == 1:
            return f"{kind}: {last:,}" if short else f"{kind}: {last:,} nodes at step {s0}"
        if short:
            return f"{kind}: {first:,}→{last:,} ({last - first:+,})"
        return f"{kind}: {first:,} → {last:,} nodes ({last - first:+,} since step {s0})"

    def caption_fitting(self, kind: str, fm, width: int) -> str:
        """The caption in the width: whole, else without its words (the numbers matter),
        else cut with an ellipsis. The tooltip keeps the whole text."""
        for text in (self._caption(kind), self._caption(kind, short=True)):
            if fm.horizontalAdvance(text) <= width:
                return text
        return fm.elidedText(text, Qt.TextElideMode.ElideRight, width)

    def lines(self, fm) -> list[tuple[str, str]]:
        """(kind, text) of each line of text the trend draws: the heading, then a caption a
        kind, or "no captures yet" on a line of its own (a narrow panel shows it whole)."""
        kinds = [k for k, pts in self.series.items() if pts]
        if not kinds:
            return [("", "Nodes per capture:"), ("", "no captures yet")]
        width = self.width() - 8
        return [("", "Nodes per capture"),
                *((k, self.caption_fitting(k, fm, width)) for k in kinds)]

    def paintEvent(self, event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        fm = p.fontMetrics()
        line = fm.height()
        kinds = [k for k, pts in self.series.items() if pts]
        for i, (kind, text) in enumerate(self.lines(fm)):
            p.setPen(QColor(self.COLOURS.get(kind, "#555555")))
            p.drawText(4, line * (1 + i), text)
        if not kinds:
            return
        r = self.rect().adjusted(6, int(line * (len(kinds) + 1) + 6), -6, -4)
        every = [pt for k in kinds for pt in self.series[k]]
        s_lo, s_hi = min(s for s, _ in every), max(s for s, _ in every)
        n_lo, n_hi = min(n for _, n in every), max(n for _, n in every)

        def at(step: int, nodes: int) -> QPointF:
            fx = (step - s_lo) / (s_hi - s_lo) if s_hi > s_lo else 1.0
            fy = (nodes - n_lo) / (n_hi - n_lo) if n_hi > n_lo else 0.5
            return QPointF(r.left() + r.width() * fx, r.bottom() - r.height() * fy)

        p.setPen(QPen(QColor("#dddddd"), 1))
        p.drawLine(r.bottomLeft(), r.bottomRight())
        # A few calls per series, not one per point: a paint's every call into Qt may wait
        # for the GIL while the training or layout thread runs Python.
        for kind in kinds:
            colour = QColor(self.COLOURS.get(kind, "#555555"))
            pts = [at(s, n) for s, n in self.series[kind]]
            p.setPen(QPen(colour, 1.6))
            p.drawPolyline(QPolygonF(pts))
            dot = QPen(colour, 4.8)
            dot.setCapStyle(Qt.PenCapStyle.RoundCap)
            p.setPen(dot)
            p.drawPoints(QPolygonF(pts[-60:]))


# --- the panel ------------------------------------------------------------------------------
