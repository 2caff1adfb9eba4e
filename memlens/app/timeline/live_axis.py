"""A plot axis whose range change redraws only its ticks, and lays them out cheaply.

pyqtgraph's axis, at every range change of its view (each time a live run's step axis
moves on, each new y range), sets its label's HTML again and recomputes its size, even when
the label reads the same (its SI prefix did not change): a text layout per axis, hidden
axes included. This one skips that when the label's text is unchanged; the ticks are
redrawn as before. Other label changes (text, pens) take pyqtgraph's path.

An axis also paints whenever a view next to it repaints (its ticks reach into the view, and
its bounding rect runs 15 px past its ends): every move of the step axis repainted all five
axes, and the loss plot's right axis at every frame of a live run, each time playing back
its texts. Here the texts are a picture of their own, played only where they are exposed.

Laying the ticks out again (`generateDrawSpecs`) was most of a move of the step axis
(docs/performance-notes.md), most of it measuring every label's text and making points in
Python. Here a label's size is
measured once per font and kept (the texts are round numbers that come back move after
move), and the draw specs are made straight from those sizes; they are the specs pyqtgraph
makes, for the styles the plots use (anything else takes pyqtgraph's path). Tick values are
kept per range and spacing: the grid (app.timeline.grid_lines) asks for them at every move of the
step axis although its y range did not change.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen, QPicture

MEMO_SIZE = 16  # tick value sets kept (a handful of axes, a few ranges each)
MIN_TICK_GAP_PX = 12  # ticks of a level at least this far apart: one label never on another
_MEASURE_BOX = QRectF(0, 0, 100, 100)  # where pyqtgraph measures a label (its size only)
_ALIGN = {
    "left": Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
    "right": Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
    "top": Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignBottom,
    "bottom": Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop,
}


class LiveAxis(pg.AxisItem):
    def __init__(self, orientation: str, **kwargs) -> None:
        self._label_html: str | None = None
        self._new_range = False
        self._tick_memo: dict[tuple, list] = {}
        self._text_sizes: dict[tuple[str, str], tuple[float, float]] = {}
        self._texts: QPicture | None = None  # the tick labels (self.picture: the lines)
        self._texts_rect = QRectF()  # where they may draw
        super().__init__(orientation, **kwargs)
        self.setFlag(self.GraphicsItemFlag.ItemUsesExtendedStyleOption)  # exposedRect

    def updateAutoSIPrefix(self) -> None:
        self._new_range = True
        try:
            super().updateAutoSIPrefix()
        finally:
            self._new_range = False

    def _updateLabel(self) -> None:
        html = self.labelString()
        if self._new_range and html == self._label_html:
            self.picture = None  # the ticks moved
            self.update()
            return
        self._label_html = html
        super()._updateLabel()

    # --- painting ---------------------------------------------------------------------------
    def paint(self, p, opt, widget) -> None:
        if self.picture is None:  # pyqtgraph's mark for "lay the ticks out again"
            self._record()
        self.picture.play(p)
        if self._texts is not None and opt.exposedRect.intersects(self._texts_rect):
            self._texts.play(p)

    def _record(self) -> None:
        """Lay the ticks out and record them as pyqtgraph's drawPicture draws them: the axis
        line and ticks in self.picture, then the labels in self._texts."""
        font = self.style["tickFont"]
        lines = QPicture()
        painter = QPainter(lines)
        try:
            if font is not None:
                painter.setFont(font)
            specs = self.generateDrawSpecs(painter)
            if specs is not None:
                painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
                painter.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
                (pen, a, b), ticks, texts = specs
                painter.setPen(pen)
                painter.drawLine(a, b)
                for pen, a, b in ticks:
                    painter.setPen(pen)
                    painter.drawLine(a, b)
        finally:
            painter.end()
        self.picture = lines
        self._texts, self._texts_rect = None, QRectF()
        if specs is None or not texts:
            return
        labels = QPicture()
        painter = QPainter(labels)
        try:
            painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
            painter.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
            if font is not None:
                painter.setFont(font)
            painter.setPen(self.textPen())
            clip = self.boundingRect().toAlignedRect()
            painter.setClipRect(clip)
            area = QRectF()
            for rect, flags, text in texts:
                painter.drawText(rect, int(flags), text)
                # a label's box is 0.8 of Qt's text height (see _text_size): the glyphs
                # may reach past it by the rest of that height, and a pixel past its width
                pad = rect.height() / 4 + 1
                area |= rect.adjusted(-2, -pad, 2, pad)
        finally:
            painter.end()
        self._texts, self._texts_rect = labels, area & QRectF(clip)

    # --- tick values ------------------------------------------------------------------------
    def tickValues(self, minVal: float, maxVal: float, size: float):
        if self.logMode:
            return super().tickValues(minVal, maxVal, size)
        lo, hi = sorted((minVal, maxVal))
        # The spacing is asked every time (cheap, and a subclass may note from it how it
        # labels the ticks); the values follow from it and the range.
        levels = self.tickSpacing(lo * self.scale, hi * self.scale, size)
        key = (lo, hi, self.scale, tuple(tuple(level) for level in levels))
        ticks = self._tick_memo.get(key)
        if ticks is None:
            ticks = super().tickValues(minVal, maxVal, size)
            if len(self._tick_memo) >= MEMO_SIZE:
                self._tick_memo.clear()
            self._tick_memo[key] = ticks
        # A level whose ticks stand closer than a label's height is dropped (a short plot:
        # pyqtgraph's minor level would put one label on another)
        per_px = size / (hi - lo) if hi > lo else 0.0
        kept = [(spacing, list(values)) for spacing, values in ticks
                if spacing * per_px >= MIN_TICK_GAP_PX]
        return kept or [(spacing, list(values)) for spacing, values in ticks[:1]]

    log_floor = 1.0  # in log mode a value v is drawn at log10(v / log_floor) (LivePlot)

    def tickStrings(self, values, scale, spacing):
        if self.logMode:
            return [f"{self.log_floor * 10 ** v:g}" for v in values]
        return super().tickStrings(values, scale, spacing)

    # --- layout -----------------------------------------------------------------------------
    def _plain_style(self) -> bool:
        """Whether the specs below are pyqtgraph's for this axis's style."""
        style = self.style
        return (self.grid is False and self._tickLevels is None and not self.logMode
                and style["tickAlpha"] is None and style["showValues"]
                and not any(style["stopAxisAtTick"]) and self.orientation in _ALIGN)

    def _text_size(self, painter, font_key: str, text: str) -> tuple[float, float]:
        size = self._text_sizes.get((font_key, text))
        if size is None:
            if len(self._text_sizes) > 512:  # labels of ranges long gone
                self._text_sizes.clear()
            r = painter.boundingRect(_MEASURE_BOX, Qt.AlignmentFlag.AlignCenter, text)
            # pyqtgraph's correction: Qt's text box is a little taller than the glyphs
            size = self._text_sizes[(font_key, text)] = (r.width(), r.height() * 0.8)
        return size

    def generateDrawSpecs(self, p):
        if not self._plain_style():
            return super().generateDrawSpecs(p)
        style = self.style
        if style["tickFont"] is not None:
            p.setFont(style["tickFont"])
        bounds = self.mapRectFromParent(self.geometry())
        a, b, tick_stop, tick_dir = self._axis_line(bounds)
        device = self.deviceTransform_()  # None until the axis is on screen
        if device is None:
            return None
        d = device.map(b) - device.map(a)
        length = (d.x() ** 2 + d.y() ** 2) ** 0.5
        if length == 0:
            return None
        levels = self.tickValues(self.range[0], self.range[1], length)
        tick_specs, positions = self._ticks(levels, bounds, tick_stop, tick_dir)
        text_specs, last_across = self._labels(p, levels, positions, length, tick_stop)
        self._updateMaxTextSize(last_across)
        return (self.pen(), a, b), tick_specs, text_specs

    def _axis_line(self, bounds: QRectF) -> tuple[QPointF, QPointF, float, int]:
        """The axis line's ends, the edge its ticks start from and the way they point."""
        side = self.orientation
        if side == "left":
            x = bounds.right() - 1
            return (QPointF(x, bounds.top() - 1), QPointF(x, bounds.bottom() + 1),
                    bounds.right(), -1)
        if side == "right":
            x = bounds.left() + 1
            return (QPointF(x, bounds.top() - 1), QPointF(x, bounds.bottom() + 1),
                    bounds.left(), 1)
        if side == "top":
            y = bounds.bottom() - 1
            return (QPointF(bounds.left() - 1, y), QPointF(bounds.right() + 1, y),
                    bounds.bottom(), -1)
        y = bounds.top() + 1
        return (QPointF(bounds.left() - 1, y), QPointF(bounds.right() + 1, y),
                bounds.top(), 1)

    def _ticks(self, levels, bounds: QRectF, tick_stop: float, tick_dir: int):
        """Each level's tick lines (pen, from, to) and each value's position along the axis
        (None where it falls outside the range)."""
        vertical = self.orientation in ("left", "right")
        r0, r1 = self.range
        span = r1 - r0
        if span == 0:
            scale, offset = 1.0, 0.0
        elif vertical:
            scale = -bounds.height() / span
            offset = r0 * scale - bounds.height()
        else:
            scale = bounds.width() / span
            offset = r0 * scale
        ends = (r0 * scale - offset, r1 * scale - offset)
        lo_px, hi_px = min(ends), max(ends)
        tick_specs = []
        positions: list[list[float | None]] = []
        base_pen = self.tickPen()
        solid = base_pen.brush().style() == Qt.BrushStyle.SolidPattern
        for i, (_spacing, values) in enumerate(levels):
            tick_length = self.style["tickLength"] / (i * 0.5 + 1.0)
            pen = base_pen
            if solid:
                pen = QPen(base_pen)
                color = QColor(pen.color())
                color.setAlpha(int(255 / (i + 1)))
                pen.setColor(color)
            end = tick_stop + tick_length * tick_dir
            at = []
            for v in values:
                x = v * scale - offset
                if x < lo_px or x > hi_px:
                    at.append(None)
                    continue
                at.append(x)
                if vertical:
                    tick_specs.append((pen, QPointF(tick_stop, x), QPointF(end, x)))
                else:
                    tick_specs.append((pen, QPointF(x, tick_stop), QPointF(x, end)))
            positions.append(at)
        return tick_specs, positions

    def _labels(self, p, levels, positions, length: float, tick_stop: float):
        """The tick labels that fit (rect, flags, text), level by level while the axis has
        room, and the largest extent across the axis of the levels shown."""
        style, side = self.style, self.orientation
        vertical = side in ("left", "right")
        gap = max(0, style["tickLength"]) + style["tickTextOffset"][1 if not vertical else 0]
        flags = _ALIGN[side] | Qt.TextFlag.TextDontClip
        box = self.boundingRect()
        font_key = p.font().key()
        text_specs = []
        along_sum = 0.0  # the labels' extent along the axis, all levels so far
        across_max = 0.0  # and their largest extent across it
        last_across = 0.0
        for i in range(min(len(levels), style["maxTextLevel"] + 1)):
            spacing, values = levels[i]
            strings = self.tickStrings(values, self.autoSIPrefixScale * self.scale, spacing)
            if len(strings) == 0:
                continue
            sizes = []
            for s, x in zip(strings, positions[i], strict=False):
                if x is None:
                    sizes.append(None)
                    continue
                w, h = self._text_size(p, font_key, s)
                sizes.append((w, h))
                along_sum += h if vertical else w
                across_max = max(across_max, w if vertical else h)
            if i > 0:  # the first level always gets its labels
                fill = along_sum / length
                if any(len(text_specs) >= n and fill >= limit
                       for n, limit in style["textFillLimits"]):
                    break
            last_across = across_max
            for s, x, size in zip(strings, positions[i], sizes, strict=False):
                if size is None:
                    continue
                rect = _label_rect(side, tick_stop, gap, x, *size)
                if box & rect != rect:  # as pyqtgraph: a label must fit the axis
                    continue
                text_specs.append((rect, flags, s))
        return text_specs, last_across


def _label_rect(side: str, tick_stop: float, gap: float, x: float, w: float, h: float
                ) -> QRectF:
    """Where a tick label of size (w, h) at position x goes, beside the axis."""
    if side == "left":
        return QRectF(tick_stop - gap - w, x - h / 2, w, h)
    if side == "right":
        return QRectF(tick_stop + gap, x - h / 2, w, h)
    if side == "top":
        return QRectF(x - w / 2, tick_stop - gap - h, w, h)
    return QRectF(x - w / 2, tick_stop + gap, w, h)
