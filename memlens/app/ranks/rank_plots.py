"""The ranks on shared axes: a line per rank for total and peak, the stacked categories of
one chosen rank below; or small multiples, a plot per rank with the same axes."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGridLayout, QStackedWidget, QVBoxLayout, QWidget

from memlens.app.series.rank_series import RankLines
from memlens.app.timeline.bytes_axis import BytesAxis
from memlens.app.timeline.memory_plot import Y_UNIT
from memlens.app.timeline.plot_style import CATEGORY_COLORS, TOTAL_COLOR, rank_color, swatch
from memlens.app.timeline.stacked_area import StackedArea
from memlens.core.records import MEMORY_CATEGORIES


def _plot(name: str, title: str) -> pg.PlotWidget:
    plot = pg.PlotWidget(background="w", axisItems={"left": BytesAxis("left", unit=Y_UNIT)})
    plot.setObjectName(name)
    plot.setTitle(title, size="9pt")
    plot.showGrid(x=True, y=True, alpha=0.15)
    plot.setLabel("bottom", "step")
    return plot


def _curve(plot: pg.PlotWidget, name: str, color: str, dashed: bool = False,
           label: str | None = None) -> pg.PlotDataItem:
    pen = pg.mkPen(color, width=2 if dashed else 1, style=Qt.DashLine if dashed else Qt.SolidLine)
    curve = plot.plot(pen=pen, name=label)
    curve.setObjectName(name)
    curve.setClipToView(True)
    curve.setDownsampling(auto=True, method="peak")
    return curve


class RankPlots(QStackedWidget):
    """Page 0: `overlay` (every rank's total and peak) over `stack` (one rank's categories).
    Page 1: `multiples`, a plot per rank. `totals[rank]`, `peaks[rank]`: the overlay's
    curves; `multiple_plots[rank]`: the small multiple of that rank."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("rank_plots")
        shared = QWidget()
        column = QVBoxLayout(shared)
        column.setContentsMargins(0, 0, 0, 0)
        self.overlay = _plot("ranks_memory_plot", "Memory by rank: total (solid), peak (dashed)")
        self.legend = self.overlay.addLegend(offset=(8, 4), colCount=4,
                                             brush=pg.mkBrush(255, 255, 255, 230))
        self.stack = _plot("ranks_stack_plot", "Memory by category")
        self.stack.setXLink(self.overlay)
        self.area = StackedArea([CATEGORY_COLORS[c] for c in MEMORY_CATEGORIES])
        self.stack.addItem(self.area)
        self.stack_total = _curve(self.stack, "stack_total", TOTAL_COLOR)
        column.addWidget(self.overlay, 3)
        column.addWidget(self.stack, 2)
        self.addWidget(shared)
        self.multiples = QWidget()
        self.multiples.setObjectName("rank_multiples")
        self.grid = QGridLayout(self.multiples)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.addWidget(self.multiples)
        self.totals: dict[int, pg.PlotDataItem] = {}
        self.peaks: dict[int, pg.PlotDataItem] = {}
        self.multiple_plots: dict[int, pg.PlotWidget] = {}
        self._multiple_items: dict[int, tuple[StackedArea, pg.PlotDataItem]] = {}

    def show_multiples(self, on: bool) -> None:
        self.setCurrentIndex(1 if on else 0)

    def clear(self) -> None:
        for rank in list(self.totals):
            self.overlay.removeItem(self.totals.pop(rank))
            self.overlay.removeItem(self.peaks.pop(rank))
        self.legend.clear()
        for plot in self.multiple_plots.values():
            self.grid.removeWidget(plot)
            plot.deleteLater()
        self.multiple_plots.clear()
        self._multiple_items.clear()
        self.area.setData([], [[] for _ in MEMORY_CATEGORIES])
        self.stack_total.setData([], [])

    def set_lines(self, lines: dict[int, RankLines], labels: dict[int, str]) -> None:
        """Every rank's lines (rank -> RankLines, in bytes) and its name in the legends."""
        if set(lines) != set(self.totals):
            self.clear()
            for rank in sorted(lines):
                self.totals[rank] = _curve(self.overlay, f"rank{rank}_total", rank_color(rank),
                                           label=labels[rank])
                self.peaks[rank] = _curve(self.overlay, f"rank{rank}_peak", rank_color(rank),
                                          dashed=True)
            self._make_multiples(sorted(lines))
        for rank, line in lines.items():
            self.totals[rank].setData(line.x, line.total / Y_UNIT)
            self.peaks[rank].setData(line.peak_x, line.peak / Y_UNIT)
            area, total = self._multiple_items[rank]
            area.setData(line.x, line.layers / Y_UNIT)
            total.setData(line.x, line.total / Y_UNIT)
            self.multiple_plots[rank].setTitle(labels[rank], size="9pt")
        for sample, text in self.legend.items:
            text.setText(labels[int(sample.item.objectName()[4:].split("_")[0])])
        # One y range for every multiple, the largest rank's: sizes compare by eye.
        top = max((float(np.nanmax(line.total)) for line in lines.values()
                   if len(line.total) and not np.isnan(line.total).all()), default=0.0)
        for plot in self.multiple_plots.values():
            plot.setYRange(0, max(top, 1.0) / Y_UNIT * 1.05, padding=0)

    def set_stacked(self, rank: int, line: RankLines | None, label: str) -> None:
        """The stacked categories of one rank (None: none chosen yet)."""
        held = [c for i, c in enumerate(MEMORY_CATEGORIES) if line is not None and len(line.x)
                and np.nanmax(line.layers[i] - (line.layers[i - 1] if i else 0)) > 0]
        legend = "&nbsp;&nbsp;".join(swatch(CATEGORY_COLORS[c], c) for c in held)
        self.stack.setTitle(f"Memory by category: {label}&nbsp;&nbsp;&nbsp;{legend}", size="9pt")
        if line is None:
            self.area.setData([], [[] for _ in MEMORY_CATEGORIES])
            self.stack_total.setData([], [])
            return
        self.area.setData(line.x, line.layers / Y_UNIT)
        self.stack_total.setData(line.x, line.total / Y_UNIT)

    def _make_multiples(self, ranks: list[int]) -> None:
        columns = max(1, math.ceil(math.sqrt(len(ranks))))
        first = None
        for i, rank in enumerate(ranks):
            plot = _plot(f"rank{rank}_multiple", f"rank {rank}")
            area = StackedArea([CATEGORY_COLORS[c] for c in MEMORY_CATEGORIES])
            plot.addItem(area)
            total = _curve(plot, f"rank{rank}_multiple_total", rank_color(rank))
            if first is None:
                first = plot
            else:
                plot.setXLink(first)
            self.grid.addWidget(plot, i // columns, i % columns)
            self.multiple_plots[rank] = plot
            self._multiple_items[rank] = (area, total)
