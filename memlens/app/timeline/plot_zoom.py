"""Zooming the step axis: Shift+drag a box on any plot, or View > Zoom to steps…"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QSpinBox

BOX_MODIFIER = Qt.ShiftModifier
MIN_BOX_STEPS = 1.0  # a narrower box is a click, not a zoom


def zoom_to_steps(stack, first: float, last: float) -> None:
    """Show steps first..last (inclusive) on every plot; following stops."""
    lo, hi = sorted((float(first), float(last)))
    stack.set_follow(False)
    stack.memory_plot.setXRange(lo, hi + 1, padding=0)


class BoxZoom:
    """Shift+drag on a plot draws a band over the steps it covers; releasing zooms there.
    A plain drag still pans (the view box's own handler)."""

    def __init__(self, stack) -> None:
        self.stack = stack
        self.band: pg.LinearRegionItem | None = None
        for plot in stack.plots:
            vb = plot.getPlotItem().vb
            own = vb.mouseDragEvent
            vb.mouseDragEvent = (lambda ev, axis=None, vb=vb, own=own:
                                 self._on_drag(vb, own, ev, axis))

    def _on_drag(self, vb, own, ev, axis) -> None:
        boxing = self.band is not None or (
            ev.button() == Qt.LeftButton and ev.modifiers() & BOX_MODIFIER)
        if not boxing:
            own(ev, axis)
            return
        ev.accept()
        x0 = vb.mapSceneToView(ev.buttonDownScenePos()).x()
        x1 = vb.mapSceneToView(ev.scenePos()).x()
        if self.band is None:
            self.band = pg.LinearRegionItem((x0, x1), movable=False,
                                            brush=pg.mkBrush(47, 111, 176, 50))
            self.band.setZValue(50)
            vb.addItem(self.band, ignoreBounds=True)
        self.band.setRegion((x0, x1))
        if ev.isFinish():
            band, self.band = self.band, None
            vb.removeItem(band)
            if abs(x1 - x0) >= MIN_BOX_STEPS:
                zoom_to_steps(self.stack, min(x0, x1), max(x0, x1) - 1)


class ZoomToStepsDialog(QDialog):
    def __init__(self, stack, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("zoom_dialog")
        self.setWindowTitle("Zoom to steps")
        self.stack = stack
        end = max(int(stack.data_end()), 1)
        x0, x1 = stack.x_range()
        self.first = QSpinBox()
        self.first.setObjectName("zoom_first")
        self.last = QSpinBox()
        self.last.setObjectName("zoom_last")
        for box, value in ((self.first, x0), (self.last, x1 - 1)):
            box.setRange(0, end)
            box.setValue(int(min(max(value, 0), end)))
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout(self)
        form.addRow("First step", self.first)
        form.addRow("Last step", self.last)
        form.addRow(buttons)
        self.accepted.connect(self._on_accepted)

    def _on_accepted(self) -> None:
        zoom_to_steps(self.stack, self.first.value(), self.last.value())
