"""The graph scene's view: wheel zoom about the mouse, drag pan, a click on a node."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPointF, Qt, Signal
from PySide6.QtGui import QPainter, QWheelEvent
from PySide6.QtWidgets import QGraphicsView, QLabel, QToolTip

from memlens.app.graph.boxes import TEXT_MIN_SCALE, NodeBox, tooltip
from memlens.app.graph.scene import GraphScene


class GraphView(QGraphicsView):
    """Wheel zooms about the mouse, drag pans, a click (not a drag) on a node reports it."""

    node_clicked = Signal(str)
    node_context = Signal(str, object)  # view node id, global QPoint

    def __init__(self, scene: GraphScene, parent=None) -> None:
        super().__init__(scene, parent)
        self.setObjectName("graph_view")
        self.setRenderHints(QPainter.RenderHint.Antialiasing
                            | QPainter.RenderHint.TextAntialiasing)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        # One rectangle around whatever changed: a band of labels shown at once would make
        # the smart mode merge hundreds of small rectangles into a region and clip every
        # item's paint to it (twice the time of painting the whole rectangle).
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.BoundingRectViewportUpdate)
        self.verticalScrollBar().valueChanged.connect(self._label_shown_part)
        self.viewport().setMouseTracking(True)  # hover outlines the box under the mouse
        self._press: QPointF | None = None
        # Fitted and not zoomed or panned since: a resize (the side panel widening for a
        # long name, the window) fits again, so a fitted graph stays whole.
        self.fitted = False
        # Zoomed out below a readable size the boxes carry no labels: the box under the
        # pointer is named here instead, beside it (its tooltip has the rest).
        self.readout = QLabel(self.viewport())
        self.readout.setObjectName("graph_hover_readout")
        self.readout.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.readout.hide()

    @property
    def zoom(self) -> float:
        return self.transform().m11()

    def zoom_by(self, factor: float) -> None:
        self.fitted = False
        factor = max(0.01, min(8.0, self.zoom * factor)) / self.zoom
        self.scale(factor, factor)
        self._zoom_changed()

    def zoom_to(self, zoom: float, centre: QPointF | None = None) -> None:
        self.fitted = False
        self.resetTransform()
        self.scale(zoom, zoom)
        if centre is not None:
            self.centerOn(centre)
        self._zoom_changed()

    def wheelEvent(self, event: QWheelEvent) -> None:
        self.zoom_by(1.0015 ** event.angleDelta().y())

    def fit(self) -> None:
        self._fit()
        self.fitted = True
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
        self.fitted = False
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
        if self.fitted:
            self._fit()
            self._zoom_changed()
        else:
            self._label_shown_part()

    def mousePressEvent(self, event) -> None:
        self._press = event.position()
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event) -> None:
        super().mouseMoveEvent(event)
        if event.buttons() == Qt.MouseButton.NoButton:  # not while panning
            self._hover(event.position().toPoint())

    def mouseReleaseEvent(self, event) -> None:
        super().mouseReleaseEvent(event)
        press, self._press = self._press, None
        if press is None or event.button() != Qt.MouseButton.LeftButton:
            return
        if (event.position() - press).manhattanLength() > 4:
            self.fitted = False
            return  # a pan, not a click
        box = self.node_at(event.position().toPoint())
        if box is not None:
            self.node_clicked.emit(box.view_node.id)

    def viewportEvent(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip:  # built on demand: thousands of nodes
            box = self.node_at(event.pos())
            if box is not None:
                QToolTip.showText(event.globalPos(), tooltip(box.view_node), self.viewport())
            else:
                QToolTip.hideText()
            return True
        if event.type() == QEvent.Type.Leave:
            self._hover(None)
        return super().viewportEvent(event)

    def contextMenuEvent(self, event) -> None:
        box = self.node_at(event.pos())
        if box is not None:
            self.node_context.emit(box.view_node.id, event.globalPos())

    def _hover(self, pos) -> None:
        scene = self.scene()
        if isinstance(scene, GraphScene):
            box = None if pos is None else self.node_at(pos)
            scene.hover(None if box is None else box.view_node.id)
            self._read_out(box, pos)

    def _read_out(self, box: NodeBox | None, pos) -> None:
        """Name the box under the pointer where labels are hidden."""
        if box is None or self.zoom >= TEXT_MIN_SCALE:
            self.readout.hide()
            return
        node = box.view_node
        detail = f": {node.detail}" if node.detail else ""
        self.readout.setText(f"{node.title} ({node.kind}){detail}")
        self.readout.adjustSize()
        room = self.viewport().rect()
        x = min(pos.x() + 14, room.width() - self.readout.width() - 2)
        y = min(pos.y() + 14, room.height() - self.readout.height() - 2)
        self.readout.move(max(x, 2), max(y, 2))
        self.readout.show()
        self.readout.raise_()

    def node_at(self, pos) -> NodeBox | None:
        """The box under a viewport position, if any."""
        scene = self.scene()
        if not isinstance(scene, GraphScene):
            return None
        return scene.box_at(self.mapToScene(pos))
