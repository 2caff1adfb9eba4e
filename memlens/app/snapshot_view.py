"""The Snapshot tab: a snapshot.pickle from a user's own run (memlens.core.snapshot_file) shown as
allocated memory over its allocation events; hovering says the bytes at an event, a click
lists what was alive there (the peak until then; Escape goes back to it)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QLabel, QSplitter, QVBoxLayout, QWidget

from memlens.app.series.pins import PIN_COLORS
from memlens.app.snapshot_alive_list import AliveList
from memlens.app.timeline.bytes_axis import BytesAxis
from memlens.app.timeline.plot_style import (
    CATEGORY_COLORS,
    HOVER_COLOR,
    PEAK_COLOR,
    RESERVED_COLOR,
    TOTAL_COLOR,
)
from memlens.core.snapshot_file import SnapshotTimeline
from memlens.core.units import format_bytes

Y_UNIT = 2**20  # the view draws MiB (see memlens.app.timeline.bytes_axis)
LEGEND_ALPHA = 150  # the legend lets what lies under it show
HEADROOM = 1.4  # the y range over the highest curve: room for the legend's two rows
LEGEND_COLUMNS = 4  # what fits across the plot in a 1280-pixel window


def category_color(name: str, index: int) -> str:
    return CATEGORY_COLORS.get(name) or PIN_COLORS[index % len(PIN_COLORS)]


class SnapshotView(QWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("snapshot_view")
        self.timeline: SnapshotTimeline | None = None
        self.summary = QLabel("Open a snapshot.pickle (File > Open) to see it here.")
        self.summary.setObjectName("snapshot_summary")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.plot = pg.PlotWidget(background="w", axisItems={"left": BytesAxis("left",
                                                                                unit=Y_UNIT)})
        self.plot.setObjectName("snapshot_plot")
        item = self.plot.getPlotItem()
        item.setLabel("bottom", "allocation events (trace order)")
        item.setMenuEnabled(False)
        # two rows across the top, over headroom kept free of the curves (show_timeline)
        self.legend = item.addLegend(offset=(10, 2), brush=pg.mkBrush(255, 255, 255, LEGEND_ALPHA))
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.peak_line = pg.InfiniteLine(angle=90, movable=False,
                                         pen=pg.mkPen(PEAK_COLOR, style=Qt.DashLine))
        item.addItem(self.peak_line, ignoreBounds=True)
        self.chosen_line = pg.InfiniteLine(angle=90, movable=False,  # the clicked moment
                                           pen=pg.mkPen(HOVER_COLOR, width=2,
                                                        style=Qt.DashDotLine))
        self.chosen_line.hide()
        item.addItem(self.chosen_line, ignoreBounds=True)
        self.hover_line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen(HOVER_COLOR))
        self.hover_line.hide()
        item.addItem(self.hover_line, ignoreBounds=True)
        self.hover_text = pg.TextItem(anchor=(0, 0), color=TOTAL_COLOR,
                                      fill=pg.mkBrush(255, 255, 255, 210))
        self.hover_text.setZValue(50)
        self.hover_text.hide()
        item.addItem(self.hover_text, ignoreBounds=True)
        self.plot.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.plot.scene().sigMouseClicked.connect(self._on_plot_clicked)
        self.alive_list = AliveList()
        self.alive_list.back_to_peak.connect(self.show_peak)
        self.top = self.alive_list.tree
        escape = QShortcut(QKeySequence(Qt.Key_Escape), self)
        escape.setContext(Qt.WidgetWithChildrenShortcut)
        escape.activated.connect(self.show_peak)
        split = QSplitter(Qt.Vertical)
        split.setObjectName("snapshot_splitter")
        split.addWidget(self.plot)
        split.addWidget(self.alive_list)
        split.setSizes([400, 220])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.summary)
        layout.addWidget(split, 1)

    def set_theme(self, theme) -> None:
        self.plot.setBackground(theme.plot_background)
        background = pg.mkColor(theme.plot_background)
        background.setAlpha(LEGEND_ALPHA)
        self.legend.setBrush(pg.mkBrush(background))
        self.legend.setLabelTextColor(theme.plot_text)
        self.hover_text.fill = pg.mkBrush(theme.plot_background)
        self.hover_text.setColor(theme.plot_text)
        for side in ("left", "bottom"):
            axis = self.plot.getPlotItem().getAxis(side)
            axis.setTextPen(theme.plot_text)
            axis.setPen(theme.axis_line)
        if "allocated" in self.curves:
            self.curves["allocated"].setPen(pg.mkPen(theme.total_line, width=1.5))

    def show_timeline(self, timeline: SnapshotTimeline) -> None:
        self.timeline = timeline
        item = self.plot.getPlotItem()
        for curve in self.curves.values():
            item.removeItem(curve)
        self.curves.clear()
        x = timeline.x
        self._curve("allocated", x, timeline.allocated, TOTAL_COLOR, 1.5)
        if timeline.reserved is not None:
            self._curve("reserved", x, timeline.reserved, RESERVED_COLOR, 1.0, Qt.DashLine)
        for i, (name, curve) in enumerate(timeline.categories.items()):
            self._curve(name, x, curve, category_color(name, i), 1.0)
        self.peak_line.setPos(timeline.peak_index)
        self.legend.setColumnCount(min(LEGEND_COLUMNS, -(-len(self.curves) // 2)))
        item.enableAutoRange()
        # headroom above the highest curve for the legend's row: it never covers the data
        top = max(float(np.nanmax(c.yData)) for c in self.curves.values() if len(c.yData))
        item.setYRange(0.0, top * HEADROOM, padding=0.0)
        self.show_peak()
        where = "" if timeline.reserved is None else (
            f", reserved at the end {format_bytes(float(timeline.reserved[-1]))}")
        self.summary.setText(
            f"<b>{timeline.path.name}</b> (device {timeline.device}, read as plain data): "
            f"{timeline.actions:,} trace events. Peak allocated <b>"
            f"{format_bytes(float(timeline.peak_bytes))}</b> after event "
            f"{timeline.peak_index:,}, {timeline.live_at_peak:,} allocations alive there; "
            f"the largest are listed below with their stacks{where}."
            + (" Category lines: the bytes each category added within the trace."
               if timeline.categories else ""))
        self.summary.setToolTip(str(timeline.path))

    def _curve(self, key: str, x, y, color: str, width: float, style=Qt.SolidLine) -> None:
        curve = self.plot.plot(x, np.asarray(y, dtype=np.float64) / Y_UNIT, name=key,
                               pen=pg.mkPen(color, width=width, style=style),
                               stepMode=None)
        curve.setDownsampling(auto=True, method="peak")
        curve.setClipToView(True)
        self.curves[key] = curve

    # --- one moment ---------------------------------------------------------------------------
    def event_at(self, scene_pos) -> int | None:
        """The event under a scene position in the plot, or None outside it (or no file)."""
        vb = self.plot.getPlotItem().getViewBox()
        if self.timeline is None or not vb.sceneBoundingRect().contains(scene_pos):
            return None
        x = vb.mapSceneToView(scene_pos).x()
        return int(min(max(round(x), 0), self.timeline.last_event))

    def show_alive_at(self, index: int) -> None:
        """List what was alive after `index` events (0..timeline.last_event)."""
        if index == self.timeline.peak_index:
            self.show_peak()
            return
        self.alive_list.show_alive(self.timeline.alive_at(index), at_peak=False)
        self.chosen_line.setPos(index)
        self.chosen_line.show()

    def show_peak(self) -> None:
        if self.timeline is None:
            return
        self.alive_list.show_alive(self.timeline.alive_at(self.timeline.peak_index),
                                   at_peak=True)
        self.chosen_line.hide()

    def _on_mouse_moved(self, scene_pos) -> None:
        index = self.event_at(scene_pos)
        if index is None:
            self.hover_text.hide()
            self.hover_line.hide()
            return
        allocated = float(self.timeline.allocated[index])
        self.hover_text.setText(f"event {index:,}: {format_bytes(allocated)} allocated")
        (x0, x1), (_y0, y1) = self.plot.getPlotItem().getViewBox().viewRange()
        self.hover_text.setAnchor((1, 0) if index > (x0 + x1) / 2 else (0, 0))
        self.hover_text.setPos(index, y1)
        self.hover_text.show()
        self.hover_line.setPos(index)
        self.hover_line.show()

    def _on_plot_clicked(self, event) -> None:
        index = self.event_at(event.scenePos())
        if index is not None and event.button() == Qt.LeftButton and not event.double():
            self.show_alive_at(index)
