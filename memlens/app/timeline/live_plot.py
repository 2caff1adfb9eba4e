"""What every timeline plot shares: the step axis, event markers, a hover line, pinned-run ghosts.

Items are made once and fed with `setData` from numpy; each draw hands pyqtgraph only the
visible slice, cut to about two points per pixel from the run's kept bins (app.series.run_series),
so a draw costs the same at step 100 as at step 1,000,000. The title row doubles as legend
and hover read-out.
"""

from __future__ import annotations

import contextlib
import math
from html import escape

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor

from memlens.app.series.run_series import RunSeries
from memlens.app.timeline.grid_lines import GridLines
from memlens.app.timeline.legend_label import LegendLabel
from memlens.app.timeline.live_axis import LiveAxis
from memlens.app.timeline.live_line import LiveLine
from memlens.app.timeline.marker_labels import (
    LABEL_FILL_ALPHA,
    label_anchor,
    label_rows,
    row_position,
    rows_that_fit,
)
from memlens.app.timeline.plot_style import (
    HOVER_COLOR,
    MIN_LABEL_CONTRAST,
    TOTAL_COLOR,
    event_color,
    legend_row,
    lighten,
    readable,
    swatch,
)
from memlens.app.timeline.stacked_area import AreaLayer, StackedArea
from memlens.app.timeline.step_axis import StepAxis

MARKER_LABEL_ROWS = (0.92, 0.8, 0.68)
AXIS_WIDTH = 62
LEGEND_HEIGHT = 36  # the title row's least height: two lines of legend
# Every plot keeps at least this many pixels of view under its legend, whatever the window's
# size: three y ticks whose labels do not overlap.
MIN_VIEW_PX = 72
BOTTOM_AXIS_PX = 40  # the step axis under the lowest plot
PLOT_MARGINS_PX = 6  # the plot item's own spacing around its view
# fit_y keeps a y range while the data fills at least this share of it (auto-range's own
# padding leaves about 0.9 at the usual plot heights).
KEEP_Y = 0.85
# The least room below the data's lowest value and above its highest, in pixels: half an
# axis label, so the tick at the edge ("0 MiB") is drawn whole.
EDGE_PX = 8.0


# Markers drawn on one plot: more would be no clearer a picture, and each costs its items (their
# making slows as a scene fills) and a place among the labels. Later events stay in the events
# list and the history.
MAX_MARKERS = 200


class _MappedData:
    """setData for a plot item: the values go through the plot's y map (LivePlot.set_log_y),
    and a setData with the points the item already shows passes: most frames of a long live
    run change only the last bin, often not even that, and each real setData repaints the
    whole view."""

    y_map = None  # LivePlot.set_log_y: what the plot's values go through before drawing

    def setData(self, *args, **kargs) -> None:
        if len(args) == 2 and self.y_map is not None:
            args = (args[0], self.y_map(np.asarray(args[1], dtype=np.float64)))
        if len(args) == 2 and not kargs and self.xData is not None:
            x, y = np.asarray(args[0]), np.asarray(args[1])
            if _same(self.xData, x) and _same(self.yData, y):
                return
        super().setData(*args, **kargs)


class LiveCurve(_MappedData, pg.PlotCurveItem):
    """A curve of a live plot (an unchanged setData passes: _MappedData)."""


class LivePoints(_MappedData, pg.PlotDataItem):
    """Points without a line (a validation loss now and then), mapped as the curves are."""


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"
                                                 and b.dtype.kind == "f")


AXIS_TEXT = "#444444"


class LivePlot(pg.PlotWidget):
    hover_left = Signal()
    # The legend's swatches are the theme's colours: whoever writes the legend writes it anew.
    theme_changed = Signal()
    # View > X axis > Wall time (PlotStack.set_wall_time): the read-out gives the step's time.
    wall_time = False

    def __init__(self, object_name: str, title: str, left_axis: pg.AxisItem | None = None,
                 parent=None) -> None:
        axes = {side: LiveAxis(side) for side in ("left", "right", "top")}
        axes["bottom"] = StepAxis("bottom")
        if left_axis is not None:
            axes["left"] = left_axis
        super().__init__(parent=parent, background="w", axisItems=axes)
        for side in ("right", "top"):  # made ours, shown only where a plot asks
            self.getPlotItem().hideAxis(side)
        self.setObjectName(object_name)
        # Curves change shape every frame: Qt's BSP index would be rebuilt each time.
        self.scene().setItemIndexMethod(self.scene().ItemIndexMethod.NoIndex)
        self.title = title
        item = self.getPlotItem()
        # The title row is the legend: one that wraps at the view's width (app.timeline.
        # legend_label) in place of pyqtgraph's, which runs off the plot's right edge.
        item.layout.removeItem(item.titleLabel)
        self.scene().removeItem(item.titleLabel)
        item.titleLabel = LegendLabel("", size="11pt", parent=item)
        item.layout.addItem(item.titleLabel, 0, 1)
        item.titleLabel.geometryChanged.connect(self._on_legend_resized)
        self._legend_row = LEGEND_HEIGHT
        self._legend_width = 0.0
        # The colours the theme asks for (set_theme): the plot background and the total line.
        self._background = "#FFFFFF"
        self._total_line = TOTAL_COLOR
        # A light y grid of our own (see app.timeline.grid_lines); markers and the hover line give
        # the x reference.
        self.grid = GridLines(item.getAxis("left"))
        item.vb.addItem(self.grid, ignoreBounds=True)
        item.setMouseEnabled(x=True, y=False)  # y always fits the visible data (fit_y)
        item.hideButtons()
        item.setMenuEnabled(False)
        # No pyqtgraph auto-range: it asks every item for its bounds (nanmin/nanmax over its
        # data) at every paint; fit_y does the same sums once a draw.
        item.vb.disableAutoRange()
        item.vb.sigResized.connect(self._on_view_resized)
        item.vb.sigXRangeChanged.connect(self.arrange_marker_labels)
        self._fitted: dict[pg.ViewBox, tuple[float, float]] = {}
        self._bounded: list[tuple[pg.GraphicsObject, pg.ViewBox]] = []
        item.vb.setLimits(xMin=-5)
        for side in ("left", "bottom", "right"):
            axis = item.getAxis(side)
            axis.setTextPen(AXIS_TEXT)
            axis.setPen("#999999")
            axis.setStyle(maxTickLevel=1)
        # Equal axis widths line the view boxes up, so x-linked plots show the same steps;
        # where there is no right axis its column stays, empty.
        item.getAxis("left").setWidth(AXIS_WIDTH)
        item.getAxis("right").setWidth(AXIS_WIDTH)
        item.layout.setColumnFixedWidth(2, AXIS_WIDTH)
        self.curves: dict[str, pg.GraphicsObject] = {}
        self._own_colors: dict[str, str] = {}  # each line's colour before any theme
        self._own_axis_text: dict[str, str] = {}  # each axis's text colour before any theme
        self.log_y = False
        self._y_map = None
        self.markers: list[pg.InfiniteLine] = []
        self.ghosts: dict[int, pg.PlotCurveItem] = {}
        self.hover_line = pg.InfiniteLine(angle=90, movable=False,
                                          pen=pg.mkPen(HOVER_COLOR, width=1, style=Qt.DashLine))
        self.hover_line.setZValue(40)
        self.hover_line.hide()
        item.addItem(self.hover_line, ignoreBounds=True)
        self._legend_html: str | None = None
        self._legend_style = ""
        self.set_legend("")

    # --- items ----------------------------------------------------------------------------
    def add_curve(self, key: str, color: str, *, fill: bool = False, width: float = 1.0,
                  style=Qt.SolidLine, z: float = 0, view: pg.ViewBox | None = None,
                  finite: bool = True) -> pg.GraphicsObject:
        """Make a curve once; draws only ever call setData on it. `finite`: the data has no
        NaN to break the line at (dashed curves only; solid ones check)."""
        if fill:
            curve = LiveCurve(pen=None, brush=pg.mkBrush(lighten(color, 0.3)),
                              fillLevel=0, skipFiniteCheck=True)
            curve.setSegmentedLineMode("off")
        elif style == Qt.SolidLine:
            # Repaints only its changed right edge (a dash pattern would restart per piece).
            curve = LiveLine(pg.mkPen(self.legend_color(color), width=width))
        else:
            curve = LiveCurve(pen=pg.mkPen(self.legend_color(color), width=width, style=style),
                              skipFiniteCheck=finite, connect="all" if finite else "finite")
            # One cached path per setData; "segmented" lines are rebuilt at every paint.
            curve.setSegmentedLineMode("off")
        curve.setZValue(z)
        self._own_colors[key] = color
        view = view or self.getPlotItem().vb
        view.addItem(curve)
        self._bounded.append((curve, view))
        self.curves[key] = curve
        return curve

    def add_points(self, key: str, color: str, z: float = 0) -> LivePoints:
        """Points made once, drawn by setData (`curves[key]`), in the main view."""
        shown = self.legend_color(color)
        points = LivePoints(pen=None, symbol="o", symbolSize=7, symbolPen=pg.mkPen(shown),
                            symbolBrush=pg.mkBrush(shown))
        points.setZValue(z)
        self._own_colors[key] = color
        view = self.getPlotItem().vb
        view.addItem(points)
        self._bounded.append((points, view))
        self.curves[key] = points
        return points

    def add_area(self, keys: tuple[str, ...], colors: list[str], z: float = 0) -> StackedArea:
        """Stacked areas; `curves[key]` reads each layer back as a curve would."""
        area = StackedArea([lighten(c, 0.3) for c in colors])
        area.setZValue(z)
        self.getPlotItem().addItem(area)
        self._bounded.append((area, self.getPlotItem().vb))
        for i, key in enumerate(keys):
            self.curves[key] = AreaLayer(area, i)
        return area

    def add_marker(self, step: float, label: str, kind: str,
                   arrange: bool = True) -> pg.InfiniteLine | None:
        """A marker line at `step` with its label; None past MAX_MARKERS (the events list
        still has every event). `arrange`: place the labels now (False: the caller adding
        many at once arranges them once, after the last)."""
        if len(self.markers) >= MAX_MARKERS:
            return None
        color = event_color(kind)
        row = MARKER_LABEL_ROWS[len(self.markers) % len(MARKER_LABEL_ROWS)]
        line = pg.InfiniteLine(
            pos=step, angle=90, movable=False,
            pen=pg.mkPen(color, width=1.5 if kind == "error" else 1),
            label=label,
            # The side of the line the label takes: arrange_marker_labels sets it.
            labelOpts={"position": row, "anchors": [(0, 0.5), (0, 0.5)]},
        )
        line.setZValue(30)
        line.event_kind = kind
        self._theme_marker(line)
        self.getPlotItem().addItem(line, ignoreBounds=True)
        self.markers.append(line)
        if arrange:
            self.arrange_marker_labels()
        return line

    def _theme_marker(self, line: pg.InfiniteLine) -> None:
        """A marker in the theme's colours: its line and text readable on the background,
        its label's box the background itself, see-through over the curves."""
        color = readable(event_color(line.event_kind), self._background)
        pen = pg.mkPen(line.pen)
        pen.setColor(pg.mkColor(color))
        line.setPen(pen)
        line.label.setColor(readable(color, self._background, MIN_LABEL_CONTRAST))
        fill = QColor(self._background)
        fill.setAlpha(LABEL_FILL_ALPHA)
        line.label.fill = pg.mkBrush(fill)
        line.label.update()

    def arrange_marker_labels(self, *_args) -> None:
        """Labels of the markers in view in rows from the top, none over another and none
        cut at the top edge (rows depend on the zoom: redone when the range changes)."""
        vb = self.getPlotItem().vb
        (x0, x1), _ = vb.viewRange()
        width, height = vb.width(), vb.height()
        if not self.markers or width <= 0 or height <= 0 or x1 <= x0:
            return
        scale = width / (x1 - x0)
        shown = []
        for line in self.markers:
            # A label whose line is out of view would still poke into it, cut at its edge.
            inside = x0 <= line.value() <= x1
            if inside:
                shown.append(line)
            elif line.label.isVisible():
                line.label.setVisible(False)
        spans, tallest = [], 0.0
        for line in shown:
            rect = line.label.boundingRect()
            tallest = max(tallest, rect.height())
            x = (line.value() - x0) * scale
            anchor = label_anchor(x, rect.width(), width)
            if line.label.anchors[0][0] != anchor:
                line.label.anchors = [(anchor, 0.5), (anchor, 0.5)]
                line.label.updatePosition()
            left = x - anchor * rect.width()
            spans.append((left, left + rect.width()))
        rows = label_rows(spans, max_rows=rows_that_fit(tallest, height))
        for line, row in zip(shown, rows, strict=True):
            position = row_position(row, tallest, height)
            if position is None:
                if line.label.isVisible():
                    line.label.setVisible(False)
                continue
            if not line.label.isVisible():
                line.label.setVisible(True)
            if abs(line.label.orthoPos - position) > 1e-6:
                line.label.setPosition(position)

    def clear_markers(self) -> None:
        for line in self.markers:
            self.getPlotItem().removeItem(line)
        self.markers.clear()

    def set_legend(self, html: str) -> None:
        """Title, values and legend in the title row (two lines: exported images keep it)."""
        if html == self._legend_html:
            return
        text = f"<b>{self.title}</b>&nbsp;&nbsp;{html}"
        label = self.getPlotItem().titleLabel
        if self._legend_html is not None:
            # The title row's size is fixed and the text sits at its top left: new text
            # only needs the text item's HTML. LabelItem.setText would also resize the
            # label and relay out the whole plot, several ms a plot at every text refresh.
            label.text = text
            label.item.setHtml(f"<span style='{self._legend_style}'>{text}</span>")
            self._legend_html = html
            self._fit_legend_row()
            return
        self._legend_html = html
        item = self.getPlotItem()
        item.setTitle(text, size="8.5pt", color=item.titleLabel.opts.get("color") or "#333333",
                      justify="left")
        item.titleLabel.setMaximumHeight(self._legend_row)
        item.layout.setRowFixedHeight(0, self._legend_row)
        # The style LabelItem.setText wraps the text in (its colour and size options).
        color = pg.mkColor(label.opts["color"]).name(QColor.NameFormat.HexArgb)
        self._legend_style = f"color: {color}; font-size: {label.opts['size']}"
        self._fit_legend_row()

    def _fit_legend_row(self, shrink: bool = False) -> None:
        """The title row as tall as the wrapped legend. It only grows while the width stays
        (a hover read-out one line longer, then shorter, must not make the views jump);
        a new width (`shrink`) fits it to the text again."""
        item = self.getPlotItem()
        need = max(LEGEND_HEIGHT, math.ceil(item.titleLabel.text_height()))
        if need > self._legend_row or (shrink and need < self._legend_row):
            self._legend_row = need
            item.titleLabel.setMaximumHeight(need)
            item.layout.setRowFixedHeight(0, need)
        self.keep_view_room()

    def keep_view_room(self) -> None:
        """The plot's least height: its legend, MIN_VIEW_PX of view and its step axis where
        it shows one; the splitter and the window give the plots no less."""
        axis = self.getPlotItem().getAxis("bottom")
        least = (self._legend_row + MIN_VIEW_PX + PLOT_MARGINS_PX
                 + (BOTTOM_AXIS_PX if axis.isVisible() else 0))
        if self.minimumHeight() != least:
            self.setMinimumHeight(least)

    def _on_legend_resized(self) -> None:
        width = self.getPlotItem().titleLabel.size().width()
        if width != self._legend_width:
            self._legend_width = width
            self._fit_legend_row(shrink=True)

    def set_theme(self, theme) -> None:
        """Background, axes, grid, title text and the darkest line in `theme`'s colours
        (an memlens.app.theme.Theme)."""
        self.setBackground(theme.plot_background)
        self._background, self._total_line = theme.plot_background, theme.total_line
        item = self.getPlotItem()
        for side in ("left", "bottom", "right"):
            axis = item.getAxis(side)
            own = self._own_axis_text.setdefault(side, axis.textPen().color().name())
            # An axis in a curve's colour (loss, grad norm) keeps it, readable.
            axis.setTextPen(theme.plot_text if own.upper() == AXIS_TEXT.upper()
                            else readable(own, theme.plot_background))
            axis.setPen(theme.axis_line)
        self.grid.set_color(theme.grid)
        self.hover_line.setPen(pg.mkPen(theme.hover_line, width=1, style=Qt.DashLine))
        for key, curve in self.curves.items():
            if isinstance(curve, LivePoints):  # the swatch's colour in this theme
                shown = self.legend_color(self._own_colors[key])
                curve.setSymbolPen(pg.mkPen(shown))
                curve.setSymbolBrush(pg.mkBrush(shown))
                continue
            if isinstance(curve, LiveLine):
                pen = curve.pen
            elif isinstance(curve, pg.PlotCurveItem):
                pen = curve.opts.get("pen")
            else:
                continue  # filled areas keep their category colours
            pen = pg.mkPen(pen)
            if pen.style() == Qt.NoPen:
                continue
            own = self._own_colors.setdefault(key, pen.color().name())
            wanted = self.legend_color(own)
            pen.setColor(pg.mkColor(wanted))
            if isinstance(curve, LiveLine):
                curve.pen = pen
                curve.update()
            else:
                curve.setPen(pen)
        for line in self.markers:
            self._theme_marker(line)
        for curve in self.ghosts.values():
            curve.setPen(pg.mkPen(self.legend_color(curve.pin_color), width=1,
                                  style=Qt.DashLine))
        item.titleLabel.opts["color"] = theme.plot_text
        html, self._legend_html = self._legend_html, None
        self.set_legend(html or "")
        self.theme_changed.emit()

    def legend_color(self, color: str) -> str:
        """`color` as this plot draws it in the current theme: the total line the strongest
        on either background, any other readable on it with its hue kept. Curves and their
        legend swatches both take it, so a swatch always shows its curve's colour."""
        if color.upper() == TOTAL_COLOR.upper():
            return self._total_line
        return readable(color, self._background)

    def swatch(self, color: str, text: str, value: str = "", glyph: str = "&#9632;") -> str:
        """A legend entry (plot_style.swatch) in the colour its curve is drawn in."""
        return swatch(self.legend_color(color), text, value, glyph)

    def pin_legend(self, pins, value_at=None) -> str:
        """An entry for each visible pinned run, by its name, in its ghost line's colour;
        with `value_at(series)`'s text where that gives one (the hover read-out)."""
        parts = []
        for pin in pins:
            if not pin.visible:
                continue
            text = value_at(pin.series) if value_at is not None else None
            tail = f"&nbsp;<b>{text}</b>" if text is not None else ""
            # a name is one unbreakable piece too: "mlp (40" over "steps)" reads badly
            name = escape(pin.name).replace(" ", "&nbsp;")
            parts.append(f'<span style="color:{self.legend_color(pin.color)}">&#9477;&nbsp;'
                         f"{name}</span>{tail}")
        return legend_row(parts)

    @contextlib.contextmanager
    def for_export(self):
        """The plot laid out as an image of it alone must show it: with its own step axis
        (in the stack only the lowest plot shows one), in the same size of image."""
        item = self.getPlotItem()
        axis = item.getAxis("bottom")
        hidden = not axis.isVisible()
        if hidden:
            item.showAxis("bottom")
            item.layout.activate()
        try:
            yield
        finally:
            if hidden:
                item.hideAxis("bottom")
                item.layout.activate()

    # Log scale: values below this (in the plot's units) are drawn at it, the bottom edge.
    log_floor = 1e-3

    def set_log_y(self, on: bool) -> None:
        """Draw y on a log scale (or back). Values are drawn as log10(value / log_floor),
        so the bottom of a filled area sits at the floor; the axis labels the values."""
        floor = self.log_floor
        self.log_y = bool(on)
        self._y_map = (lambda y: np.log10(np.maximum(y, floor) / floor)) if on else None
        for item, _view in self._bounded:
            item.y_map = self._y_map
        for side in ("left", "right"):
            axis = self.getPlotItem().getAxis(side)
            axis.log_floor = floor
            axis.logMode = self.log_y  # the labels only: the view box keeps linear units
            axis.picture = None
            axis.update()
        self._fitted.clear()

    # --- pinned runs ----------------------------------------------------------------------
    ghost_x_shift = 0.0

    def ghost_line(self, run: RunSeries, x0: float, x1: float, max_points: int
                   ) -> tuple[np.ndarray, np.ndarray]:
        """The one line that stands for a pinned run on this plot, in [x0, x1] (x before the
        shift), cut to max_points."""
        raise NotImplementedError

    def sync_ghosts(self, pins) -> None:
        """Make or drop ghost curves so they match the pinned runs."""
        wanted = {p.pin_id: p for p in pins}
        for pin_id in list(self.ghosts):
            if pin_id not in wanted:
                curve = self.ghosts.pop(pin_id)
                self.ghost_view().removeItem(curve)
                self._bounded = [(c, v) for c, v in self._bounded if c is not curve]
        for pin_id, pin in wanted.items():
            curve = self.ghosts.get(pin_id)
            if curve is None:
                curve = LiveCurve(pen=pg.mkPen(self.legend_color(pin.color), width=1,
                                               style=Qt.DashLine), connect="finite")
                curve.pin_color = pin.color
                curve.setSegmentedLineMode("off")
                curve.setOpacity(0.75)
                curve.setZValue(20)
                self.ghost_view().addItem(curve)
                self._bounded.append((curve, self.ghost_view().getViewBox()))
                self.ghosts[pin_id] = curve
                curve.y_map = self._y_map
            curve.setVisible(pin.visible)

    def ghost_view(self):
        return self.getPlotItem()

    def draw_ghosts(self, pins, x0: float, x1: float, max_points: int) -> None:
        for pin in pins:
            curve = self.ghosts.get(pin.pin_id)
            if curve is None or not pin.visible:
                continue
            xs, ys = self.ghost_line(pin.series, x0, x1, max_points)
            curve.setData(xs + self.ghost_x_shift, ys)

    # --- drawing --------------------------------------------------------------------------
    def draw(self, run: RunSeries | None, x0: float, x1: float, max_points: int) -> None:
        raise NotImplementedError

    def legend_at(self, run: RunSeries | None, x: float | None, pins) -> str:
        raise NotImplementedError

    def fit_y(self) -> None:
        """Fit each view's y range to what its visible items hold now, with the padding
        pyqtgraph's auto-range adds; a view with nothing to show keeps its range."""
        spans: dict[pg.ViewBox, list[float]] = {}
        for item, view in self._bounded:
            if not item.isVisible():
                continue
            span = spans.setdefault(view, [math.inf, -math.inf])
            if isinstance(item, StackedArea):
                if len(item.layer_data(0)[0]):
                    span[0], span[1] = min(span[0], 0.0), max(span[1], item.top)
                continue
            y = item.yData
            if y is None or not len(y):
                continue
            lo, hi = np.fmin.reduce(y), np.fmax.reduce(y)
            if np.isfinite(lo):
                span[0], span[1] = min(span[0], float(lo)), max(span[1], float(hi))
        for view, (lo, hi) in spans.items():
            if math.isfinite(lo):
                self.fit_view(view, lo, hi)

    def fit_view(self, view: pg.ViewBox, lo: float, hi: float) -> None:
        """Show lo..hi on `view`, padded (fit_y), unless the range shown holds it well."""
        if self._fitted.get(view) == (lo, hi):
            return
        # A live run's extremes creep (a new highest step time, a new lowest loss) and a
        # new y range redraws the axis and the grid: while the data stays inside the
        # view and still fills most of it, the range stays.
        v0, v1 = view.viewRange()[1]
        if view in self._fitted and v0 <= lo and hi <= v1 and hi - lo >= KEEP_Y * (v1 - v0):
            return
        self._fitted[view] = (lo, hi)
        self._set_y(view, lo, hi)

    @staticmethod
    def _set_y(view: pg.ViewBox, lo: float, hi: float) -> None:
        """lo..hi with auto-range's padding, and at least EDGE_PX either side."""
        span = hi - lo if hi > lo else max(abs(hi), 1.0)
        # share of the span either side that leaves EDGE_PX between lo (hi) and the edge
        share = max(view.suggestPadding(1), EDGE_PX / max(view.height() - 2 * EDGE_PX, 1.0))
        view.setYRange(lo - span * share, hi + span * share, padding=0)

    def apply_view_changes(self) -> None:
        """Move the views to their new ranges now. pyqtgraph defers that to the start of
        the next paint, where the new transform invalidates the scene again and every
        view is painted twice for one change of range."""
        for view in {v for _item, v in self._bounded}:
            view.prepareForPaint()

    def _on_view_resized(self) -> None:
        # The padding depends on the view's height, as auto-range's does.
        for view, (lo, hi) in self._fitted.items():
            self._set_y(view, lo, hi)
        self.arrange_marker_labels()

    def clear_data(self) -> None:
        """A new run (or none): empty curves, and the y range of no data, not the last
        run's."""
        for curve in self.curves.values():
            curve.setData([], [])
        for view in self._fitted:  # only a view data had fitted: an idle one stays as it is
            view.setYRange(0, 1, padding=0)
        self._fitted.clear()

    def pixel_width(self) -> int:
        return max(int(self.getPlotItem().vb.width()), 100)

    def leaveEvent(self, event) -> None:
        self.hover_left.emit()
        super().leaveEvent(event)
