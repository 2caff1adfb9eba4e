"""Step time against steps, stacked by phase (zero_grad, forward, backward, optimizer, eval)."""

from __future__ import annotations

import numpy as np

from memlens.app.series.run_series import PHASE_MS_COLUMNS, RunSeries
from memlens.app.timeline.plot_style import PHASE_COLORS, TOTAL_COLOR, legend_row
from memlens.app.timeline.step_plot import StepPlot
from memlens.core.records import PHASES
from memlens.core.units import format_elapsed, format_ms

# A step slower than SPIKE_FACTOR times the typical step in view (its SPIKE_QUANTILE) is
# a spike (the first step's warm-up, a load burst): the axis fits the typical steps with
# SPIKE_ROOM above them, and the legend names the spike it cut.
SPIKE_FACTOR = 4.0
SPIKE_QUANTILE = 0.9
SPIKE_ROOM = 1.5
MIN_STEPS_FOR_SPIKES = 8


class TimePlot(StepPlot):
    """`curves[phase]` holds the cumulative layer; the last (eval) is the whole step."""

    log_floor = 0.01  # ms

    def __init__(self, parent=None) -> None:
        super().__init__("time_plot", "Step time (ms)", parent=parent)
        self.area = self.add_area(PHASES, [PHASE_COLORS[p] for p in PHASES], z=5)
        self.cut_spike: tuple[int, float] | None = None  # (step, ms) of the tallest cut

    def fit_y(self) -> None:
        """As every plot, but robust: a few spikes do not flatten the other steps."""
        x, top = self.area.layer_data(len(PHASES) - 1)
        top = np.asarray(top, dtype=np.float64)
        finite = np.isfinite(top)
        self.cut_spike = None
        if not self.log_y and finite.sum() >= MIN_STEPS_FOR_SPIKES:
            # "lower": a step that is there, never one interpolated toward the spike itself
            # (of 12 steps the 0.9 quantile would be mostly the tallest)
            typical = float(np.quantile(top[finite], SPIKE_QUANTILE, method="lower"))
            tallest = int(np.nanargmax(top))
            if typical > 0 and top[tallest] > SPIKE_FACTOR * typical:
                self.cut_spike = (int(np.floor(x[tallest])), float(top[tallest]))
                self.fit_view(self.getPlotItem().vb, 0.0, SPIKE_ROOM * typical)
                return
        super().fit_y()

    ghost_key = "whole_step"

    def draw_steps(self, run: RunSeries, rows: slice, x0: float, x1: float,
                   max_points: int) -> None:
        xs, layers = run.steps.decimate("phases", rows, max_points)
        self.area.setData(xs + self.ghost_x_shift, layers)

    def legend_at(self, run: RunSeries | None, x: float | None, pins) -> str:
        values = dict.fromkeys(PHASES, "")
        head = total = ""
        found = run.step_record_at(x) if run is not None else None
        if found is not None:
            step, record = found
            values = {p: format_ms(record[c]) for p, c in zip(PHASES, PHASE_MS_COLUMNS,
                                                              strict=True)}
            total = format_ms(record["step_ms"])
            head = f"<i>step {step}</i>"
            if self.wall_time:
                # when it ended: the wall-time axis's ticks are interpolated between these
                head = (f"<i>step {step}, ended at&nbsp;"
                        f"{format_elapsed(record['time_s']).replace(' ', '&nbsp;')}</i>")
        first = [head, self.swatch(TOTAL_COLOR, "whole step", total),
                 self.pin_legend(pins, None if x is None else lambda s: _ghost_ms(s, x))]
        if self.cut_spike is not None:  # the axis fits the other steps: say what it cut
            step, ms = self.cut_spike
            first.append(f"<i>&#8593;&nbsp;step&nbsp;{step}:&nbsp;"
                         f"{format_ms(ms).replace(' ', '&nbsp;')} (off&nbsp;the&nbsp;top)</i>")
        second = [self.swatch(PHASE_COLORS[p], p, values[p]) for p in PHASES]
        return legend_row(first) + "<br>" + legend_row(second)


def _ghost_ms(series: RunSeries, x: float) -> str | None:
    i = series.step_row(int(np.floor(x)))
    return None if i is None else format_ms(series.whole_step_at(i))
