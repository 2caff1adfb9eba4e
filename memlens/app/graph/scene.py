"""The autograd graph as a Qt graphics scene: node boxes, edge paths and a zoomable view."""

from __future__ import annotations

import time
from collections import deque

from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFontMetricsF,
    QPainterPath,
    QPen,
)
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGraphicsPathItem,
    QGraphicsScene,
)

from memlens.app.graph.boxes import (
    EDGE_STYLE,
    LONG_EDGE_PX,
    SHADE_LEVELS,
    Drawing,
    NodeBox,
    TextMetrics,
    add_arrowhead,
    add_curve,
    graph_font,
    level,
    shade,
)
from memlens.core.graph.groups import ViewGraph
from memlens.core.graph.layout import Layout

_BORDER = QPen(QColor("#333333"), 0)
# A node's state is drawn as an outline over its box; one path item per state holds every
# node in that state. Stacked so a selected node shows selected, then marked, then hovered.
OUTLINES = {
    "hovered": (QPen(QColor("#1e88e5"), 2), 0.2),
    "marked": (QPen(QColor("#d81b60"), 3), 0.3),  # a search hit
    "selected": (QPen(QColor("#1565c0"), 3), 0.4),
}
HIGHLIGHT_PEN = QPen(QColor("#1565c0"), 2.5)  # a selected node's edges
HIGHLIGHT_PEN.setCosmetic(True)
BOX_BAND_PX = 2400.0  # boxes: one path item per fill colour per band, so Qt can cull them
HIT_BAND_PX = 100.0  # finding the box under the mouse looks only in its band
EDGE_BAND_PX = 800.0  # edges are grouped into path items by band, so Qt can cull them
LABEL_BAND_PX = 800.0  # labels too: one layer item per band holds that band's text items
# At most this long on the GUI thread at a time while building: short enough that a slice
# plus a full garbage collection landing in it stays well under 50 ms.
BUILD_SLICE_S = 0.012
# Labels are made in shorter slices: Qt lays out each line's text when it is made and
# measures and draws it in the turns that follow, which adds as much again.
LABEL_SLICE_S = 0.006
TEARDOWN_CHUNK = 20  # old items deleted per step (a label layer takes its lines with it)


class GraphScene(QGraphicsScene):
    """Built once per layout, in slices between event-loop turns so the window never
    freezes, out of sight until complete (see Drawing): the boxes as one path item per
    fill colour per horizontal band, the edges as a few path items per band; then the
    previous graph's items are deleted, a slice at a time. Every item is made by Qt
    (`addPath`, `addSimpleText`), never constructed in Python: an item made in Python is a
    binding subclass whose every virtual call (bounds, shape, paint) first asks Python,
    under the GIL, whether it is overridden, and waits for the GIL whenever a training or
    layout thread runs. A few hundred items, so the scene keeps no index: a paint walks
    them faster than Qt builds and updates a BSP tree, and the box under the mouse is found
    from the boxes themselves (`box_at`). Label text items are made a band at a time when
    the view first shows that band at a readable zoom (`label`), in short slices after the
    boxes are drawn: a 2,000-node graph is 36,000 px tall and opens showing 1,000 of them,
    so most labels would never be seen."""

    graph_built = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.label_font = graph_font()
        self.metrics = TextMetrics(self.label_font)
        self._fm = QFontMetricsF(self.label_font)
        self._shown = Drawing()
        self._next: Drawing | None = None  # being built
        self._work = None  # the generator building the next graph, then deleting the old
        # Its next slice comes on a timer, not a posted call: Qt sends every posted call
        # that is due in one go, so two slices (and the scene updates between them) would
        # run back to back, with no turn of the event loop in between.
        self._slicer = QTimer(self)
        self._slicer.setObjectName("graph_build_slice")  # named in stall diagnostics
        self._slicer.setSingleShot(True)
        self._slicer.setInterval(0)
        self._slicer.timeout.connect(self._continue)
        self._announcing = False  # shown, `graph_built` not yet emitted
        self._old: list[QGraphicsItem] = []  # replaced graphs' items, still to delete
        self.selected: str | None = None
        self.marked: frozenset[str] = frozenset()
        self.hovered: str | None = None
        self._outlines: dict[str, QGraphicsPathItem] = {}
        self._highlight: QGraphicsPathItem | None = None
        self._label_layers: list[QGraphicsItem] = []
        self._filling: dict[QGraphicsItem, int] = {}  # layer -> its labels still to make
        self._label_queue: deque[tuple[QGraphicsItem, str, tuple[float, float]]] = deque()
        self._labeller = QTimer(self)  # a timer, not a posted call: a paint goes first
        self._labeller.setObjectName("graph_label_slice")
        self.label_slices = 0  # slices of labels made from the timer (what tests check)
        self._labeller.setSingleShot(True)
        self._labeller.setInterval(0)
        self._labeller.timeout.connect(self._label_some)
        self.labels_shown = True  # the view hides labels below a readable zoom
        self._advance: dict[str, float] = {}  # label line -> its width in the graph font
        self.setBackgroundBrush(QColor("#ffffff"))
        self.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.NoIndex)

    @property
    def boxes(self) -> dict[str, NodeBox]:
        """The shown graph's nodes by view node id."""
        return self._shown.boxes

    @property
    def building(self) -> bool:
        return self._next is not None

    @property
    def tearing_down(self) -> bool:
        """Items of a replaced graph are still being deleted, a slice at a time."""
        return bool(self._old)

    def show_graph(self, view: ViewGraph, layout: Layout) -> None:
        """Start building; `graph_built` is emitted once the scene shows it."""
        if self._next is not None:  # replaced before it was shown
            self._old += self._next.items
        self._next = Drawing()
        self._next.rect = QRectF(0, 0, layout.width, layout.height)
        self._work = self._steps(self._next, view, layout)
        self._continue()

    def _continue(self) -> None:
        work = self._work
        end = time.perf_counter() + BUILD_SLICE_S
        for _ in work or ():
            if time.perf_counter() > end:
                self._slicer.start()
                return
        if work is self._work:
            self._work = None

    def _steps(self, drawing: Drawing, view: ViewGraph, layout: Layout):
        yield from self._teardown()  # what a build replaced before it was shown
        yield from self._draw(drawing, view, layout)
        self._show(drawing)
        # announced on the next turn: what the view does then (zoom, labels, search) is a
        # slice's worth of work of its own
        QTimer.singleShot(0, lambda: self._built(drawing))
        yield
        yield from self._teardown()

    def _built(self, drawing: Drawing) -> None:
        self._announcing = False
        if drawing is self._shown and self._next is None:  # no newer graph on its way
            self.graph_built.emit()

    def _draw(self, drawing: Drawing, view: ViewGraph, layout: Layout):
        most = max((v.held_bytes for v in view.nodes), default=0)
        fills: dict[tuple[str, int], QColor] = {}
        paths: dict[tuple[int, str, int], QPainterPath] = {}
        for i, v in enumerate(view.nodes):
            pos = layout.positions.get(v.id)
            if pos is None:
                continue
            shading = (v.kind, level(v.held_bytes, most))
            fill = fills.get(shading)
            if fill is None:
                fill = fills[shading] = shade(v.kind, shading[1] / SHADE_LEVELS)
            box = NodeBox(v, pos, layout.sizes[v.id], fill)
            drawing.boxes[v.id] = box
            key = (int(pos[1] // BOX_BAND_PX), *shading)
            path = paths.get(key)
            if path is None:
                path = paths[key] = QPainterPath()
            box.add_outline(path)
            for band in range(int((box.y - box.h / 2) // HIT_BAND_PX),
                              int((box.y + box.h / 2) // HIT_BAND_PX) + 1):
                drawing.hit_bands.setdefault(band, []).append(box)
            drawing.unlabelled.setdefault(int(pos[1] // LABEL_BAND_PX), []).append((v.label, pos))
            if i % 25 == 24:
                yield
        for i, ((_band, *shading), path) in enumerate(paths.items()):
            drawing.add(self, self.addPath(path, _BORDER, QBrush(fills[tuple(shading)])))
            if i % 25 == 24:
                yield
        drawing.edges = layout.edges
        bands: dict[tuple[int, str], QPainterPath] = {}
        heads: dict[int, QPainterPath] = {}
        for i, (s, d, style, pts) in enumerate(layout.edges):
            drawing.edges_of.setdefault(s, []).append(i)
            drawing.edges_of.setdefault(d, []).append(i)
            band = int(min(pts[0][1], pts[-1][1]) // EDGE_BAND_PX)
            long = abs(pts[-1][1] - pts[0][1]) > LONG_EDGE_PX
            kind = "plain" if style == "none" else "far" if long else "near"
            path = bands.get((band, kind))
            if path is None:
                path = bands[(band, kind)] = QPainterPath()
            add_curve(path, pts)
            if style != "none":
                end_band = int(pts[-1][1] // EDGE_BAND_PX)
                if end_band not in heads:
                    heads[end_band] = QPainterPath()
                add_arrowhead(heads[end_band], pts)
            if i % 50 == 49:
                yield
        for (_band, kind), path in bands.items():
            colour, z = EDGE_STYLE[kind]
            pen = QPen(QColor(colour), 0)
            pen.setCosmetic(True)
            drawing.add(self, self.addPath(path, pen)).setZValue(z)
        for path in heads.values():
            arrows = self.addPath(path, QPen(Qt.PenStyle.NoPen), QBrush(QColor("#444444")))
            drawing.add(self, arrows).setZValue(-1)

    def _show(self, drawing: Drawing) -> None:
        """Put the built graph on screen in place of the shown one, which goes out of sight
        to be deleted in slices."""
        old = self._shown
        if old.root is not None:
            old.root.setVisible(False)
        self._old += old.items
        self._forget()
        self._shown, self._next = drawing, None
        self._announcing = True
        self.setSceneRect(drawing.rect)
        if drawing.root is not None:
            drawing.root.setVisible(True)

    def _forget(self) -> None:
        """Drop what belonged to the shown graph: states, outlines, labels."""
        self._shown = Drawing()
        self.selected, self.marked, self.hovered = None, frozenset(), None
        self._outlines, self._highlight = {}, None
        self._label_layers, self._filling = [], {}
        self._label_queue.clear()

    def _teardown(self):
        old = self._old
        while old:
            chunk = old[-TEARDOWN_CHUNK:]
            del old[-TEARDOWN_CHUNK:]
            for item in reversed(chunk):  # children before the root they hang from
                self.removeItem(item)  # back in Python's hands: freed with `chunk`
            del chunk
            yield

    # --- what the user points at ------------------------------------------------------------
    def box_at(self, point: QPointF) -> NodeBox | None:
        x, y = point.x(), point.y()
        for box in self._shown.hit_bands.get(int(y // HIT_BAND_PX), ()):
            if box.contains(x, y):
                return box
        return None

    def select(self, node_id: str | None) -> None:
        """Outline the node and draw its edges bold and blue."""
        self.selected = node_id
        self._restyle()
        self.highlight_edges(node_id)

    def mark(self, node_ids) -> None:
        """Outline these nodes (search hits), and no others."""
        self.marked = frozenset(i for i in node_ids if i in self.boxes)
        self._restyle()

    def hover(self, node_id: str | None) -> None:
        if node_id != self.hovered:
            self.hovered = node_id
            self._restyle()

    def _restyle(self) -> None:
        """Each node in one outline only, its first of selected, marked, hovered: a wide
        outline drawn over another would show the one below at its anti-aliased edge."""
        one = {self.selected} - {None}
        self._outline("selected", one)
        self._outline("marked", self.marked - one)
        self._outline("hovered", {self.hovered} - {None} - one - self.marked)

    def _outline(self, state: str, node_ids) -> None:
        path = QPainterPath()
        for node_id in node_ids:
            box = self.boxes.get(node_id)
            if box is not None:
                box.add_outline(path)
        item = self._overlay(self._outlines.get(state), path, *OUTLINES[state])
        if item is not None:
            self._outlines[state] = item

    def highlight_edges(self, node_id: str | None) -> None:
        """Draw the node's edges bold and blue."""
        path = QPainterPath()
        drawing = self._shown
        for i in drawing.edges_of.get(node_id, ()) if node_id is not None else ():
            add_curve(path, drawing.edges[i][3])
        self._highlight = self._overlay(self._highlight, path, HIGHLIGHT_PEN, -0.5)

    def _overlay(self, item: QGraphicsPathItem | None, path: QPainterPath, pen: QPen,
                 z: float) -> QGraphicsPathItem | None:
        """An overlay item (outline, highlighted edges) showing `path`: the item given, its
        path set if it changed, or a new one on the shown graph; none while `path` is empty
        and there is no item yet."""
        if item is not None:
            if item.path() != path:
                item.setPath(path)
            return item
        if path.isEmpty():
            return None
        item = self.addPath(path, pen)
        self._shown.add(self, item).setZValue(z)
        return item

    # --- labels -----------------------------------------------------------------------------
    def label(self, rect: QRectF, now: bool = False) -> None:
        """Make the labels of the nodes in `rect`'s bands, if not made yet and shown: the
        bands nearest its middle first, in slices from the next turn (`now`: before this
        returns). A band's labels show together once all are made, in one repaint."""
        if not self.labels_shown or self._announcing:  # the view has not zoomed it yet
            return
        unlabelled = self._shown.unlabelled
        bands = range(int(rect.top() // LABEL_BAND_PX), int(rect.bottom() // LABEL_BAND_PX) + 1)
        middle = rect.center().y() // LABEL_BAND_PX
        for band in sorted(bands, key=lambda b: abs(b - middle)):
            todo = unlabelled.pop(band, None)
            if todo:
                layer = self._label_layer(len(todo))
                self._label_queue.extend((layer, text, pos) for text, pos in todo)
        if now:
            while self._label_queue:
                self._add_label(*self._label_queue.popleft())
        elif self._label_queue and not self._labeller.isActive():
            self._labeller.start()

    @property
    def labelling(self) -> bool:
        """Labels asked for and not all made yet."""
        return bool(self._label_queue)

    def _label_some(self) -> None:
        queue = self._label_queue
        if not self.labels_shown:
            return  # hidden: made when shown again
        self.label_slices += 1
        end = time.perf_counter() + LABEL_SLICE_S
        while queue and time.perf_counter() < end:
            self._add_label(*queue.popleft())
        if queue:
            self._labeller.start()

    def _label_layer(self, count: int) -> QGraphicsItem:
        """An empty item whose children are one band's label lines (hidden all at once),
        out of sight until its `count` labels are made."""
        layer = self.addRect(QRectF(), QPen(Qt.PenStyle.NoPen))
        layer.setFlag(QGraphicsItem.GraphicsItemFlag.ItemHasNoContents)
        layer.setVisible(False)
        self._shown.add(self, layer).setZValue(1)
        self._label_layers.append(layer)
        self._filling[layer] = count
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
            text = self.addSimpleText(line, self.label_font)  # black, as the border
            text.setParentItem(layer)
            text.setPos(pos[0] - width / 2, top + i * lh)
        self._filling[layer] -= 1
        if not self._filling[layer]:
            del self._filling[layer]
            layer.setVisible(self.labels_shown)

    def show_labels(self, shown: bool) -> None:
        """Labels on or off (the view turns them off below a readable zoom: thousands of
        unreadable text items would only slow a paint of the whole graph)."""
        if shown == self.labels_shown:
            return
        self.labels_shown = shown
        for layer in self._label_layers:
            if layer not in self._filling:
                layer.setVisible(shown)
        if shown and self._label_queue:
            self._labeller.start()

    # --- a message instead of a graph ------------------------------------------------------
    def show_message(self, text: str, width: float = 460) -> None:
        self._work, self._next, self._announcing = None, None, False
        self._slicer.stop()
        self._old = []
        self.clear()  # every item, deleted now
        self._forget()
        item = self.addText(text, graph_font())
        self._shown.add(self, item)
        self._shown.root.setVisible(True)
        item.setTextWidth(width)
        item.setDefaultTextColor(QColor("#555555"))
        self.setSceneRect(item.boundingRect().adjusted(-20, -20, 20, 20))
