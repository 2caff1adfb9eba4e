"""What the graph scene draws: node boxes shaded by the bytes they saved, their labels'
metrics, edge curves and arrowheads, and a drawing's items."""

from __future__ import annotations

import math

from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainterPath
from PySide6.QtWidgets import QGraphicsItem, QGraphicsRectItem, QGraphicsScene

from memlens.core.graph.groups import ViewNode
from memlens.core.units import format_bytes

# torchviz's colours (grey ops, blue parameters, orange saved tensors, green output), each
# shaded from light (saves nothing) to deep (saves the most bytes in this graph).
SHADES: dict[str, tuple[str, str]] = {
    "op": ("#ececec", "#9c9c9c"),
    "saved": ("#ffe2ad", "#ff8800"),
    "group": ("#ece6f6", "#a993d6"),
    "param": ("#add8e6", "#add8e6"),
    "output": ("#caff70", "#caff70"),
}
PAD_X, PAD_Y = 8.0, 4.0
LONG_EDGE_PX = 600.0  # longer edges (shared parameters, skip links) are drawn faint
TEXT_MIN_SCALE = 0.35  # below this zoom, boxes only


def graph_font() -> QFont:
    font = QFont("monospace")
    font.setStyleHint(QFont.StyleHint.Monospace)
    font.setPointSizeF(8.5)
    return font


class TextMetrics:
    """Box sizes for labels in the graph font, computed once on the GUI thread and then pure
    arithmetic (the font is monospaced), so a layout thread can size nodes too."""

    def __init__(self, font: QFont) -> None:
        fm = QFontMetricsF(font)
        self.char_w = fm.horizontalAdvance("M")
        self.line_h = fm.height()
        self.ascent = fm.ascent()

    def size(self, label: str) -> tuple[float, float]:
        lines = label.split("\n")
        width = max(len(s) for s in lines) * self.char_w + 2 * PAD_X
        return max(width, 36.0), len(lines) * self.line_h + 2 * PAD_Y


def shade(kind: str, t: float) -> QColor:
    """The kind's colour from light (t = 0, saves nothing) to deep (t = 1, saves the most)."""
    light, deep = (QColor(c) for c in SHADES.get(kind, SHADES["op"]))
    return QColor.fromRgbF(
        light.redF() + (deep.redF() - light.redF()) * t,
        light.greenF() + (deep.greenF() - light.greenF()) * t,
        light.blueF() + (deep.blueF() - light.blueF()) * t,
    )


def tooltip(v: ViewNode) -> str:
    if v.kind == "group":
        return (f"<b>{v.title}</b> (module call, collapsed)<br>{len(v.members)} nodes, "
                f"saved {format_bytes(v.saved_bytes)}<br><i>click to expand</i>")
    n = v.node
    rows = [f"<b>{v.title}</b> <span style='color:#666'>({v.kind})</span>"]
    if n is not None and n.module:
        rows.append(f"module: {n.module}")
    if n is not None and n.kind == "op":
        if n.saved_bytes or not n.held_bytes:
            rows.append(f"saves {format_bytes(n.saved_bytes)} (shared storages counted once)")
        else:
            rows.append(f"shares {format_bytes(n.held_bytes)}: every storage it saved was "
                        "saved first by another op, and is counted there")
        rows += [t.describe() for t in n.saved[:12]]
        if len(n.saved) > 12:
            rows.append(f"... {len(n.saved) - 12} more")
    elif n is not None:
        rows += [t.describe() for t in n.saved[:1]]
    return "<br>".join(rows)


class NodeBox:
    """One node's box: where it is, how big, its fill. The scene draws boxes a few path
    items at a time (see GraphScene), so a node is this plain record, not a Qt item."""

    __slots__ = ("fill", "h", "view_node", "w", "x", "y")

    def __init__(self, view_node: ViewNode, pos: tuple[float, float],
                 size: tuple[float, float], fill: QColor) -> None:
        self.view_node = view_node
        self.x, self.y = pos
        self.w, self.h = size
        self.fill = fill

    @property
    def centre(self) -> QPointF:
        return QPointF(self.x, self.y)

    def contains(self, x: float, y: float) -> bool:
        return abs(x - self.x) <= self.w / 2 and abs(y - self.y) <= self.h / 2

    def add_outline(self, path: QPainterPath) -> None:
        rect = QRectF(self.x - self.w / 2, self.y - self.h / 2, self.w, self.h)
        if self.view_node.kind == "group":  # a collapsed module call
            path.addRoundedRect(rect, 6, 6)
        else:
            path.addRect(rect)




class Drawing:
    """One graph's items, under one root item, and what finds its nodes. A graph is built
    under a hidden root and shown by showing the root: the one on screen stays, whole and
    usable, until the next one is complete, and nothing is painted half built."""

    def __init__(self) -> None:
        self.root: QGraphicsItem | None = None
        self.items: list[QGraphicsItem] = []  # deleted from the end: the root (first) last
        self.rect = QRectF()
        self.boxes: dict[str, NodeBox] = {}
        self.hit_bands: dict[int, list[NodeBox]] = {}
        self.edges: list[tuple[str, str, str, list[tuple[float, float]]]] = []
        self.edges_of: dict[str, list[int]] = {}
        self.unlabelled: dict[int, list[tuple[str, tuple[float, float]]]] = {}  # by band

    def add(self, scene: QGraphicsScene, item: QGraphicsItem) -> QGraphicsItem:
        if self.root is None:
            # The one item made in Python: when Qt deletes it (the scene going away) the
            # binding hears of it and lets go of every item under it. Items made by Qt
            # tell the binding nothing, and a handle kept to one Qt had deleted would
            # free it again when dropped.
            self.root = QGraphicsRectItem()
            self.root.setFlag(QGraphicsItem.GraphicsItemFlag.ItemHasNoContents)
            self.root.setVisible(False)
            scene.addItem(self.root)
            self.items.insert(0, self.root)
        item.setParentItem(self.root)
        self.items.append(item)
        return item


# Edge kinds: colour and stacking (long edges faint and underneath).
EDGE_STYLE = {"far": ("#cdcdcd", -3), "plain": ("#8a8a8a", -2), "near": ("#444444", -2)}
SHADE_LEVELS = 24


def add_curve(path: QPainterPath, pts: list[tuple[float, float]]) -> None:
    path.moveTo(*pts[0])
    for j in range(1, len(pts) - 2, 3):
        path.cubicTo(QPointF(*pts[j]), QPointF(*pts[j + 1]), QPointF(*pts[j + 2]))


def add_arrowhead(path: QPainterPath, pts: list[tuple[float, float]], size: float = 7) -> None:
    (x0, y0), (x1, y1) = pts[-2], pts[-1]
    dx, dy = x1 - x0, y1 - y0
    norm = math.hypot(dx, dy) or 1.0
    ux, uy = dx / norm, dy / norm
    bx, by = x1 - ux * size, y1 - uy * size
    path.moveTo(x1, y1)
    path.lineTo(bx - uy * size * 0.45, by + ux * size * 0.45)
    path.lineTo(bx + uy * size * 0.45, by - ux * size * 0.45)
    path.closeSubpath()


def level(held: int, most: int) -> int:
    if held <= 0 or most <= 0:
        return 0
    return max(1, round(SHADE_LEVELS * math.log1p(held) / math.log1p(most)))
