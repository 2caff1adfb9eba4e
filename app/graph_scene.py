"""The autograd graph as a Qt graphics scene: node items, edge paths and a zoomable view."""

from __future__ import annotations

import math
import time

from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetricsF,
    QPainter,
    QPainterPath,
    QPen,
    QWheelEvent,
)  # fmt: skip
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGraphicsPathItem,
    QGraphicsRectItem,
    QGraphicsScene,
    QGraphicsSimpleTextItem,
    QGraphicsView,
    QToolTip,
)  # fmt: skip

from app.units import format_bytes
from core.graph.groups import ViewGraph, ViewNode
from core.graph.layout import Layout

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
                f"saved {format_bytes(v.saved_bytes)}<br><i>click to expand</i>")  # fmt: skip
    n = v.node
    rows = [f"<b>{v.title}</b> <span style='color:#666'>({v.kind})</span>"]
    if n is not None and n.module:
        rows.append(f"module: {n.module}")
    if n is not None and n.kind == "op":
        rows.append(f"saves {format_bytes(n.saved_bytes)} (shared storages counted once)")
        rows += [t.describe() for t in n.saved[:12]]
        if len(n.saved) > 12:
            rows.append(f"... {len(n.saved) - 12} more")
    elif n is not None:
        rows += [t.describe() for t in n.saved[:1]]
    return "<br>".join(rows)


class NodeItem(QGraphicsPathItem):
    """One box, shaded by bytes. Qt draws it (a path item, no Python paint or boundingRect):
    a repaint or the scene's dirty pass never calls into Python, so it costs no Python time
    and never waits for the GIL while a training or layout thread runs. Its label lines are
    text items in the scene's label layers (see GraphScene), not children, so the view can
    hide every label at once when zoomed out too far to read them.
    """

    def __init__(self, v: ViewNode, size: tuple[float, float], fill: QColor,
                 path: QPainterPath) -> None:  # fmt: skip
        super().__init__(path)
        self.view_node = v
        self.w, self.h = size
        self.fill = fill
        self.marked = False  # a search hit
        self.selected = False
        self.hovered = False
        self.setBrush(fill)
        self.setPen(_BORDER)
        self.setAcceptHoverEvents(True)

    def set_state(self, *, selected: bool | None = None, marked: bool | None = None) -> None:
        if selected is not None:
            self.selected = selected
        if marked is not None:
            self.marked = marked
        self._restyle()

    def hoverEnterEvent(self, event) -> None:
        self.hovered = True
        self._restyle()

    def hoverLeaveEvent(self, event) -> None:
        self.hovered = False
        self._restyle()

    def _restyle(self) -> None:
        self.setPen(_SELECTED if self.selected else _MARKED if self.marked
                    else _HOVERED if self.hovered else _BORDER)  # fmt: skip


_BORDER = QPen(QColor("#333333"), 0)
_SELECTED = QPen(QColor("#1565c0"), 3)
_MARKED = QPen(QColor("#d81b60"), 3)
_HOVERED = QPen(QColor("#1e88e5"), 2)
EDGE_BAND_PX = 800.0  # edges are grouped into path items by band, so Qt can cull them
LABEL_BAND_PX = 800.0  # labels too: one layer item per band holds that band's text items
# At most this long on the GUI thread at a time while building: short enough that a slice
# plus a full garbage collection landing in it (20-30 ms here) stays well under 50 ms.
BUILD_SLICE_S = 0.012
TEARDOWN_CHUNK = 100  # old items deleted per step while the next graph replaces them


class GraphScene(QGraphicsScene):
    """Built once per layout, in slices between event-loop turns so the window never
    freezes: the old graph's items are deleted, then node items and edges as a few path
    items per horizontal band. Items go in unindexed (adding them stays cheap); once the
    graph is complete the scene switches to a BSP tree, so a paint, a hover or a click asks
    only for the items near it. Label text items are made a band at a time when the view
    first shows that band at a readable zoom (`label`): a 2,000-node graph is 36,000 px
    tall and opens showing 1,000 of them, so most labels would never be seen."""

    graph_built = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.font = graph_font()
        self.metrics = TextMetrics(self.font)
        self._fm = QFontMetricsF(self.font)
        self.items_by_id: dict[str, NodeItem] = {}
        self._edges: list[tuple[str, str, str, list[tuple[float, float]]]] = []
        self._edges_of: dict[str, list[int]] = {}
        self._highlight: QGraphicsPathItem | None = None
        self._label_layers: list[QGraphicsItem] = []
        self._unlabelled: dict[int, list[tuple[str, tuple[float, float]]]] = {}  # by band
        self.labels_shown = True  # the view hides labels below a readable zoom
        self._top: list[QGraphicsItem] = []  # the shown graph's top-level items
        self._old: list[QGraphicsItem] = []  # the previous graph's, still to delete
        self._advance: dict[str, float] = {}  # label line -> its width in the graph font
        self._build = None  # the generator building the current graph
        self.setBackgroundBrush(QColor("#ffffff"))
        self.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.NoIndex)

    @property
    def building(self) -> bool:
        return self._build is not None

    def show_graph(self, view: ViewGraph, layout: Layout) -> None:
        """Start building; `graph_built` is emitted when every item is in the scene."""
        self._reset(now=False)
        self.setSceneRect(QRectF(0, 0, layout.width, layout.height))
        self._build = self._steps(view, layout)
        self._continue()

    def _continue(self) -> None:
        build = self._build
        if build is None:
            return
        end = time.perf_counter() + BUILD_SLICE_S
        for _ in build:
            if time.perf_counter() > end:
                QTimer.singleShot(0, self._continue)
                return
        if build is self._build:
            self.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.BspTreeIndex)
            # announced on the next turn: what the view does then (zoom, labels, search)
            # is a slice's worth of work of its own
            QTimer.singleShot(0, lambda: self._built(build))

    def _built(self, build) -> None:
        if build is self._build:  # not replaced by a newer graph meanwhile
            self._build = None
            self.graph_built.emit()

    def _steps(self, view: ViewGraph, layout: Layout):
        yield from self._teardown()
        most = max((v.held_bytes for v in view.nodes), default=0)
        colours: dict[tuple[str, int], QColor] = {}
        paths: dict[tuple[float, float, bool], QPainterPath] = {}
        for i, v in enumerate(view.nodes):
            pos = layout.positions.get(v.id)
            if pos is None:
                continue
            level = _level(v.held_bytes, most)
            fill = colours.get((v.kind, level))
            if fill is None:
                fill = colours[(v.kind, level)] = shade(v.kind, level / SHADE_LEVELS)
            size = layout.sizes[v.id]
            rounded = v.kind == "group"
            path = paths.get((*size, rounded))
            if path is None:
                path = paths[(*size, rounded)] = _box(size, rounded)
            item = NodeItem(v, size, fill, path)
            item.setPos(pos[0], pos[1])
            self._add(item)
            self.items_by_id[v.id] = item
            self._unlabelled.setdefault(int(pos[1] // LABEL_BAND_PX), []).append((v.label, pos))
            if i % 20 == 19:
                yield
        self._edges = layout.edges
        bands: dict[tuple[int, str], QPainterPath] = {}
        heads: dict[int, QPainterPath] = {}
        for i, (s, d, style, pts) in enumerate(layout.edges):
            self._edges_of.setdefault(s, []).append(i)
            self._edges_of.setdefault(d, []).append(i)
            band = int(min(pts[0][1], pts[-1][1]) // EDGE_BAND_PX)
            long = abs(pts[-1][1] - pts[0][1]) > LONG_EDGE_PX
            kind = "plain" if style == "none" else "far" if long else "near"
            path = bands.get((band, kind))
            if path is None:
                path = bands[(band, kind)] = QPainterPath()
            _add_curve(path, pts)
            if style != "none":
                end_band = int(pts[-1][1] // EDGE_BAND_PX)
                if end_band not in heads:
                    heads[end_band] = QPainterPath()
                _add_arrowhead(heads[end_band], pts)
            if i % 200 == 199:
                yield
        for (_band, kind), path in bands.items():
            colour, z = EDGE_STYLE[kind]
            item = QGraphicsPathItem(path)
            pen = QPen(QColor(colour), 0)
            pen.setCosmetic(True)
            item.setPen(pen)
            item.setZValue(z)
            self._add(item)
        for path in heads.values():
            arrows = QGraphicsPathItem(path)
            arrows.setPen(QPen(Qt.PenStyle.NoPen))
            arrows.setBrush(QColor("#444444"))
            arrows.setZValue(-1)
            self._add(arrows)

    def _add(self, item: QGraphicsItem) -> None:
        self.addItem(item)
        self._top.append(item)

    def _label_layer(self) -> QGraphicsItem:
        """An empty item whose children are one band's label lines (hidden all at once)."""
        layer = QGraphicsRectItem()
        layer.setPen(QPen(Qt.PenStyle.NoPen))
        layer.setFlag(QGraphicsItem.GraphicsItemFlag.ItemHasNoContents)
        layer.setZValue(1)
        layer.setVisible(self.labels_shown)
        self._add(layer)
        self._label_layers.append(layer)
        return layer

    def _add_label(self, layer: QGraphicsItem, label: str, pos: tuple[float, float]) -> None:
        """Each line centred in the box, as torchviz draws labels."""
        lines = label.split("\n")
        lh = self.metrics.line_h
        top = pos[1] - len(lines) * lh / 2
        for i, line in enumerate(lines):
            if not line:
                continue
            width = self._advance.get(line)
            if width is None:
                width = self._advance[line] = self._fm.horizontalAdvance(line)
            text = QGraphicsSimpleTextItem(line, layer)  # black, as the border
            text.setFont(self.font)
            text.setPos(pos[0] - width / 2, top + i * lh)

    def label(self, rect: QRectF) -> None:
        """Make the labels of the nodes in `rect`'s bands, if not made yet and shown."""
        if not self.labels_shown or not self._unlabelled:
            return
        for band in range(int(rect.top() // LABEL_BAND_PX),
                          int(rect.bottom() // LABEL_BAND_PX) + 1):  # fmt: skip
            todo = self._unlabelled.pop(band, None)
            if todo:
                layer = self._label_layer()
                for text, pos in todo:
                    self._add_label(layer, text, pos)

    def show_labels(self, shown: bool) -> None:
        """Labels on or off (the view turns them off below a readable zoom: thousands of
        unreadable text items would only slow a paint of the whole graph)."""
        if shown == self.labels_shown:
            return
        self.labels_shown = shown
        for layer in self._label_layers:
            layer.setVisible(shown)

    def _reset(self, now: bool = True) -> None:
        """Forget the shown graph. Its items are deleted now, or (`now` False) in steps at
        the start of the next build: deleting thousands of items in one go would stall."""
        self._build = None
        self.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.NoIndex)
        if self._highlight is not None:
            self._top.append(self._highlight)
        if now:
            self._old.clear()
            self.clear()
        else:
            self._old += self._top
        self._top = []
        self.items_by_id.clear()
        self._edges, self._edges_of = [], {}
        self._highlight = None
        self._label_layers = []
        self._unlabelled = {}

    def _teardown(self):
        old = self._old
        while old:
            chunk = old[-TEARDOWN_CHUNK:]
            del old[-TEARDOWN_CHUNK:]
            for item in chunk:
                self.removeItem(item)  # back in Python's hands: freed with `chunk`
            del chunk
            yield

    def show_message(self, text: str) -> None:
        self._reset()
        item = self.addText(text, graph_font())
        self._top.append(item)
        item.setTextWidth(460)
        item.setDefaultTextColor(QColor("#555555"))
        self.setSceneRect(item.boundingRect().adjusted(-20, -20, 20, 20))

    def highlight_edges(self, node_id: str | None) -> None:
        """Draw the selected node's edges bold and blue."""
        if self._highlight is not None:
            self.removeItem(self._highlight)
            self._highlight = None
        if node_id is None:
            return
        path = QPainterPath()
        for i in self._edges_of.get(node_id, ()):
            _add_curve(path, self._edges[i][3])
        item = QGraphicsPathItem(path)
        pen = QPen(QColor("#1565c0"), 2.5)
        pen.setCosmetic(True)
        item.setPen(pen)
        item.setZValue(-0.5)
        self.addItem(item)
        self._highlight = item


def _box(size: tuple[float, float], rounded: bool) -> QPainterPath:
    w, h = size
    path = QPainterPath()
    if rounded:  # a collapsed module call
        path.addRoundedRect(QRectF(-w / 2, -h / 2, w, h), 6, 6)
    else:
        path.addRect(QRectF(-w / 2, -h / 2, w, h))
    return path


# Edge kinds: colour and stacking (long edges faint and underneath).
EDGE_STYLE = {"far": ("#cdcdcd", -3), "plain": ("#8a8a8a", -2), "near": ("#444444", -2)}
SHADE_LEVELS = 24


def _add_curve(path: QPainterPath, pts: list[tuple[float, float]]) -> None:
    path.moveTo(*pts[0])
    for j in range(1, len(pts) - 2, 3):
        path.cubicTo(QPointF(*pts[j]), QPointF(*pts[j + 1]), QPointF(*pts[j + 2]))


def _add_arrowhead(path: QPainterPath, pts: list[tuple[float, float]], size: float = 7) -> None:
    (x0, y0), (x1, y1) = pts[-2], pts[-1]
    dx, dy = x1 - x0, y1 - y0
    norm = math.hypot(dx, dy) or 1.0
    ux, uy = dx / norm, dy / norm
    bx, by = x1 - ux * size, y1 - uy * size
    path.moveTo(x1, y1)
    path.lineTo(bx - uy * size * 0.45, by + ux * size * 0.45)
    path.lineTo(bx + uy * size * 0.45, by - ux * size * 0.45)
    path.closeSubpath()


def _level(held: int, most: int) -> int:
    if held <= 0 or most <= 0:
        return 0
    return max(1, round(SHADE_LEVELS * math.log1p(held) / math.log1p(most)))


class GraphView(QGraphicsView):
    """Wheel zooms about the mouse, drag pans, a click (not a drag) on a node reports it."""

    node_clicked = Signal(str)
    node_context = Signal(str, object)  # view node id, global QPoint

    def __init__(self, scene: GraphScene, parent=None) -> None:
        super().__init__(scene, parent)
        self.setObjectName("graph_view")
        self.setRenderHints(QPainter.RenderHint.Antialiasing
                            | QPainter.RenderHint.TextAntialiasing)  # fmt: skip
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.SmartViewportUpdate)
        self.verticalScrollBar().valueChanged.connect(self._label_shown_part)
        self._press: QPointF | None = None

    @property
    def zoom(self) -> float:
        return self.transform().m11()

    def zoom_by(self, factor: float) -> None:
        factor = max(0.01, min(8.0, self.zoom * factor)) / self.zoom
        self.scale(factor, factor)
        self._zoom_changed()

    def zoom_to(self, zoom: float, centre: QPointF | None = None) -> None:
        self.resetTransform()
        self.scale(zoom, zoom)
        if centre is not None:
            self.centerOn(centre)
        self._zoom_changed()

    def wheelEvent(self, event: QWheelEvent) -> None:
        self.zoom_by(1.0015 ** event.angleDelta().y())

    def fit(self) -> None:
        self._fit()
        self._zoom_changed()

    def _fit(self) -> None:
        rect = self.scene().sceneRect()
        if rect.isEmpty():
            return
        self.fitInView(rect, Qt.AspectRatioMode.KeepAspectRatio)
        if self.zoom > 1.5:  # a tiny graph: do not blow it up
            self.resetTransform()
            self.scale(1.5, 1.5)
            self.centerOn(rect.center())

    def show_readable(self, focus: QPointF | None) -> None:
        """Fit when the whole graph stays readable; otherwise zoom to read and show `focus`."""
        self._fit()
        if self.zoom < TEXT_MIN_SCALE * 1.6 and focus is not None:
            # the output sits at the bottom: show it low in the window, and what leads to it
            above = self.viewport().height() / (2 * 0.8) - 60
            self.zoom_to(0.8, QPointF(focus.x(), focus.y() - max(above, 0.0)))
        else:
            self._zoom_changed()

    def _zoom_changed(self) -> None:
        """Labels only where they can be read: zoomed out, every box is a plain box."""
        scene = self.scene()
        if isinstance(scene, GraphScene):
            scene.show_labels(self.zoom >= TEXT_MIN_SCALE)
            self._label_shown_part()

    def _label_shown_part(self, _value: int = 0) -> None:
        scene = self.scene()
        if isinstance(scene, GraphScene) and self.zoom >= TEXT_MIN_SCALE:
            shown = self.mapToScene(self.viewport().rect()).boundingRect()
            scene.label(shown.adjusted(0, -shown.height() / 2, 0, shown.height() / 2))

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._label_shown_part()

    def mousePressEvent(self, event) -> None:
        self._press = event.position()
        super().mousePressEvent(event)

    def mouseReleaseEvent(self, event) -> None:
        super().mouseReleaseEvent(event)
        press, self._press = self._press, None
        if press is None or event.button() != Qt.MouseButton.LeftButton:
            return
        if (event.position() - press).manhattanLength() > 4:
            return  # a pan, not a click
        item = self.node_at(event.position().toPoint())
        if item is not None:
            self.node_clicked.emit(item.view_node.id)

    def viewportEvent(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip:  # built on demand: thousands of nodes
            item = self.node_at(event.pos())
            if item is not None:
                QToolTip.showText(event.globalPos(), tooltip(item.view_node), self.viewport())
            else:
                QToolTip.hideText()
            return True
        return super().viewportEvent(event)

    def contextMenuEvent(self, event) -> None:
        item = self.node_at(event.pos())
        if item is not None:
            self.node_context.emit(item.view_node.id, event.globalPos())

    def node_at(self, pos) -> NodeItem | None:
        for item in self.items(pos):
            if isinstance(item, NodeItem):
                return item
        return None
