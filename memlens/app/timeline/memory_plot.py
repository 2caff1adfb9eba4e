"""Memory against steps: stacked category areas from the phase samples, total, peak, reserved."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import Qt

from memlens.app.series.run_series import PROCESS_LINES, STEP_LINES, RunSeries
from memlens.app.timeline.bytes_axis import BytesAxis
from memlens.app.timeline.carried_spans import CARRIED_HATCH, HATCH_GLYPH, CarriedSpans
from memlens.app.timeline.live_plot import LivePlot
from memlens.app.timeline.plot_style import (
    CATEGORY_COLORS,
    HEAP_COLOR,
    PEAK_COLOR,
    RESERVED_COLOR,
    RSS_COLOR,
    TOTAL_COLOR,
    legend_row,
    lighten,
)
from memlens.app.timeline.stacked_area import StackedArea
from memlens.core.records import (
    CARRIED_CATEGORIES,
    CATEGORY_HELP,
    MEMORY_CATEGORIES,
    SAMPLE_PHASES,
)
from memlens.core.units import format_bytes

Y_UNIT = 2**20  # bytes per unit of the view (see memlens.app.timeline.bytes_axis)
# The legend lists these always, and buffers, amp_casts and temporaries where they hold
# bytes at the step shown: eight entries do not fit one line of a narrow window.
ALWAYS_LISTED = MEMORY_CATEGORIES[:5]
# The process's own memory (PROCESS_LINES), as the legend names it: what no tensor explains.
PROCESS_LABELS: dict[str, str] = {"rss": "process RSS", "heap": "malloc heap (CPU)"}
PROCESS_COLORS: dict[str, str] = {"rss": RSS_COLOR, "heap": HEAP_COLOR}
# Where a pixel holds several moments, its stack is drawn twice: the highest moment's pale,
# the lowest moment's over it in the bands' own colours. What stays through the pixel reads
# solid, what comes and goes within it (activations between forward and backward) pale.
PEAK_LIGHTEN = 0.72
# Samples this many pixels apart or more: the hover reads the sample under the pointer;
# closer, it reads the step's highest moment, as the chart's top edge shows it.
HOVER_SAMPLE_PX = 2.0


class MemoryPlot(LivePlot):
    """`curves[category]` holds the cumulative layer (params, params+grads, ...); `total` the
    sum; `peak` each step's peak at step + 0.5; `reserved`/`allocated` only on CUDA; `rss`
    and `heap` (the process's own memory, read once a step) while `process_shown`. All in
    MiB (bytes / Y_UNIT); the axis labels them in whatever binary unit reads best."""

    log_floor = 1024 / Y_UNIT  # 1 KiB

    def __init__(self, parent=None) -> None:
        super().__init__("memory_plot", "Memory", BytesAxis("left", unit=Y_UNIT), parent)
        self.area = self.add_area(MEMORY_CATEGORIES,
                                  [CATEGORY_COLORS[c] for c in MEMORY_CATEGORIES], z=5)
        self.peak_area = StackedArea([lighten(CATEGORY_COLORS[c], PEAK_LIGHTEN)
                                      for c in MEMORY_CATEGORIES])
        self.peak_area.setZValue(4)
        self.getPlotItem().addItem(self.peak_area)
        self._bounded.append((self.peak_area, self.getPlotItem().vb))
        # Live curves: one pixel wide and solid, the raster engine's fast path.
        self.add_curve("total", TOTAL_COLOR, z=15)
        self.add_curve("peak", PEAK_COLOR, z=16, finite=False)
        self.add_curve("allocated", TOTAL_COLOR, width=1, style=Qt.DashDotLine, z=14,
                       finite=False)
        self.add_curve("reserved", RESERVED_COLOR, z=14, finite=False)
        for key in PROCESS_LINES:
            self.add_curve(key, PROCESS_COLORS[key], width=1.5, style=Qt.DashLine, z=13,
                           finite=False).setVisible(False)
        self.process_shown = False
        # A watch's steps without detail: their saved-for-backward bytes are carried
        self.carried = CarriedSpans()
        self.carried.setZValue(12)  # over the bands, under the lines
        self.getPlotItem().addItem(self.carried)
        # Before any data: an axis in MiB rather than "0 B .. 1 B"; data rescales it.
        self.getPlotItem().setYRange(0, 1, padding=0)
        # The legend (the title row) says what each band holds.
        self.getPlotItem().titleLabel.setToolTip(category_tooltip())

    def show_process(self, on: bool) -> None:
        """Draw the process's RSS and heap lines beside the tensor bytes (or not)."""
        self.process_shown = bool(on)
        for key in PROCESS_LINES:
            self.curves[key].setVisible(self.process_shown)

    def ghost_line(self, run: RunSeries, x0: float, x1: float, max_points: int
                   ) -> tuple[np.ndarray, np.ndarray]:
        xs, total = run.samples.decimate("total", run.samples.visible(x0, x1), max_points)
        return xs, total[0] / Y_UNIT

    def draw(self, run: RunSeries | None, x0: float, x1: float, max_points: int) -> None:
        if run is None or run.sample_count == 0:
            self.clear_data()
            return
        samples = run.samples
        sl = samples.visible(x0, x1)
        xs, stacks = samples.decimate("layers", sl, max_points)
        n = len(MEMORY_CATEGORIES)
        peak, low = stacks[:n] / Y_UNIT, stacks[n:] / Y_UNIT
        self.peak_area.setData(xs, peak)
        self.area.setData(xs, low)
        self.curves["total"].setData(xs, peak[-1])
        if run.has_reserved:
            xa, rows = samples.decimate("allocator", sl, max_points)
            self.curves["allocated"].setData(xa, rows[0] / Y_UNIT)
            self.curves["reserved"].setData(xa, rows[1] / Y_UNIT)
        if self.process_shown and run.has_process:
            xr, rows = samples.decimate("process", sl, max_points)
            for key, values in zip(PROCESS_LINES, rows, strict=True):
                read = np.isfinite(values)  # only the samples that read it: one line
                self.curves[key].setData(xr[read], values[read] / Y_UNIT)
        self.carried.set_spans(*run.carried_spans(x0, x1, max_points))
        if run.step_count:
            xp, lines = run.steps.decimate("lines", run.steps.visible(x0 - 1, x1), max_points)
            peak = lines[STEP_LINES.index("peak_bytes")] / Y_UNIT
            if len(xp) > 1 and np.all(np.diff(xp) >= 1):
                # whole steps: a step's peak holds across it and changes at the boundary
                xs = np.repeat(xp, 2)
                xs[1::2] += 1.0
                self.curves["peak"].setData(xs, np.repeat(peak, 2))
            else:  # binned (min, max pairs share an x): a step shape would mean nothing
                self.curves["peak"].setData(xp + 0.5, peak)

    def _px_per_sample(self, run: RunSeries) -> float:
        """How far apart the samples in view are drawn, in pixels."""
        (x0, x1), _ = self.getPlotItem().vb.viewRange()
        sl = run.samples.visible(x0, x1)  # with a neighbour each side of the view
        return self.pixel_width() / max(sl.stop - sl.start - 2, 1)

    def clear_data(self) -> None:
        super().clear_data()
        self.carried.set_spans(np.empty(0), np.empty(0))
        self.peak_area.setData(np.empty(0), np.empty((len(MEMORY_CATEGORIES), 0)))

    def legend_at(self, run: RunSeries | None, x: float | None, pins) -> str:
        row, at_peak = None, False
        if run is not None and run.sample_count:
            if x is not None and self._px_per_sample(run) >= HOVER_SAMPLE_PX:
                i = run.sample_row_in_step(x)  # the phase under the pointer
            else:  # the step's highest moment: what the chart's top edge shows
                step = run.last_step if x is None else int(np.floor(x))
                i = run.peak_sample_of_step(step) if step >= 0 else None
                at_peak = i is not None
                if i is None and x is None:
                    i = run.sample_row_at(run.samples.last_x)
            if i is not None:
                row = run.history.samples.rows(i, i + 1)[0]
        head = ""
        values = dict.fromkeys(MEMORY_CATEGORIES, "")
        shown = set(ALWAYS_LISTED)
        total = peak = ""
        if row is not None:
            idx = run.history.samples.index
            phase = SAMPLE_PHASES[int(row[idx["phase"]])]
            head = (f"step {int(row[idx['step']])} at its peak, after {phase}" if at_peak
                    else f"step {int(row[idx['step']])} after {phase}")
            values = {c: format_bytes(row[idx[c]]) for c in MEMORY_CATEGORIES}
            if row[idx["carried"]] == 1:  # a watch's step without detail (core.watch.detail)
                head += " (what is saved for backward: carried, not measured at this step)"
                for c in CARRIED_CATEGORIES:
                    values[c] += " carried"
            shown.update(c for c in MEMORY_CATEGORIES if row[idx[c]])
            total = format_bytes(row[idx["total"]])
            step_row = run.step_row(int(row[idx["step"]]))
            if step_row is not None:
                peak = format_bytes(run.step_value(step_row, "peak_bytes"))
            if not math.isnan(row[idx["reserved"]]):
                total += f" &nbsp;reserved <b>{format_bytes(row[idx['reserved']])}</b>"
        first = [f"<i>{head}</i>" if head else "", self.swatch(TOTAL_COLOR, "total", total),
                 self.swatch(PEAK_COLOR, "peak", peak),
                 self.pin_legend(pins, None if x is None else lambda s: _ghost_total(s, x))]
        if run is not None and run.has_carried:
            first.append(self.swatch(CARRIED_HATCH, "hatched: steps without detail "
                                     "(activations carried, not measured)", glyph=HATCH_GLYPH))
        if self.process_shown:
            i = None if row is None else run.sample_row_at(x if x is not None
                                                           else run.samples.last_x)
            read = run.process_at(i) if i is not None else {}
            first += [self.swatch(PROCESS_COLORS[k], PROCESS_LABELS[k],
                                  format_bytes(read[k]) if k in read else "")
                      for k in PROCESS_LINES]
        second = [self.swatch(CATEGORY_COLORS[c], c, values[c]) for c in MEMORY_CATEGORIES
                  if c in shown]
        return legend_row(first) + "<br>" + legend_row(second)


def category_tooltip() -> str:
    """What each memory band holds, from core's one definition."""
    rows = "".join(f"<tr><td><b>{c}</b></td><td>{CATEGORY_HELP[c]}</td></tr>"
                   for c in MEMORY_CATEGORIES)
    return f"<table>{rows}</table>"


def _ghost_total(series: RunSeries, x: float) -> str | None:
    i = series.sample_row_in_step(x)
    return None if i is None else format_bytes(series.total_at(i))
