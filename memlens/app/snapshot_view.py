"""The Snapshot tab: a snapshot.pickle from a user's own run (memlens.core.snapshot_file) shown as
allocated memory over its allocation events, and the largest allocations at the peak."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSplitter, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from memlens.app.series.pins import PIN_COLORS
from memlens.app.timeline.bytes_axis import BytesAxis
from memlens.app.timeline.plot_style import CATEGORY_COLORS, PEAK_COLOR, RESERVED_COLOR, TOTAL_COLOR
from memlens.core.snapshot_file import SnapshotTimeline
from memlens.core.units import format_bytes

Y_UNIT = 2**20  # the view draws MiB (see memlens.app.timeline.bytes_axis)


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
        self.legend = item.addLegend(offset=(-10, 5), brush=pg.mkBrush(255, 255, 255, 210))
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.peak_line = pg.InfiniteLine(angle=90, movable=False,
                                         pen=pg.mkPen(PEAK_COLOR, style=Qt.DashLine))
        item.addItem(self.peak_line, ignoreBounds=True)
        self.top = QTreeWidget()
        self.top.setObjectName("snapshot_top")
        self.top.setHeaderLabels(["size", "category", "where (newest frame first)"])
        self.top.setColumnWidth(0, 110)
        self.top.setColumnWidth(1, 90)
        split = QSplitter(Qt.Vertical)
        split.setObjectName("snapshot_splitter")
        split.addWidget(self.plot)
        split.addWidget(self.top)
        split.setSizes([400, 220])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.summary)
        layout.addWidget(split, 1)

    def set_theme(self, theme) -> None:
        self.plot.setBackground(theme.plot_background)
        self.legend.setBrush(pg.mkBrush(theme.plot_background))
        self.legend.setLabelTextColor(theme.plot_text)
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
        item.enableAutoRange()
        self._fill_top(timeline)
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

    def _fill_top(self, timeline: SnapshotTimeline) -> None:
        self.top.clear()
        for alloc in timeline.top:
            first = alloc.frames[0] if alloc.frames else "(no stack recorded)"
            row = QTreeWidgetItem([format_bytes(float(alloc.size)), alloc.category or "–",
                                   first])
            row.setToolTip(2, "\n".join(alloc.frames) or "no stack recorded")
            row.setData(0, Qt.UserRole, alloc.size)
            for frame in alloc.frames[1:]:
                QTreeWidgetItem(row, ["", "", frame])
            self.top.addTopLevelItem(row)
