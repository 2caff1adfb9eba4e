"""Step time against steps, stacked by phase (zero_grad, forward, backward, optimizer, eval)."""

from __future__ import annotations

import numpy as np

from memlens.app.series.run_series import PHASE_MS_COLUMNS, STEP_LINES, RunSeries
from memlens.app.timeline.live_plot import LivePlot
from memlens.app.timeline.plot_style import PHASE_COLORS, TOTAL_COLOR, legend_row
from memlens.core.records import PHASES
from memlens.core.units import format_elapsed, format_ms


class TimePlot(LivePlot):
    """`curves[phase]` holds the cumulative layer; the last (eval) is the whole step."""

    log_floor = 0.01  # ms

    def __init__(self, parent=None) -> None:
        super().__init__("time_plot", "Step time (ms)", parent=parent)
        self.area = self.add_area(PHASES, [PHASE_COLORS[p] for p in PHASES], z=5)

    ghost_x_shift = 0.5  # a step's time belongs to the middle of its interval

    def ghost_line(self, run: RunSeries, x0: float, x1: float, max_points: int
                   ) -> tuple[np.ndarray, np.ndarray]:
        xs, lines = run.steps.decimate("lines", run.steps.visible(x0, x1), max_points)
        return xs, lines[STEP_LINES.index("whole_step")]

    def draw(self, run: RunSeries | None, x0: float, x1: float, max_points: int) -> None:
        if run is None or run.step_count == 0:
            self.clear_data()
            return
        sl = run.steps.visible(x0 - 0.5, x1 - 0.5)
        xs, layers = run.steps.decimate("phases", sl, max_points)
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
        second = [self.swatch(PHASE_COLORS[p], p, values[p]) for p in PHASES]
        return legend_row(first) + "<br>" + legend_row(second)


def _ghost_ms(series: RunSeries, x: float) -> str | None:
    i = series.step_row(int(np.floor(x)))
    return None if i is None else format_ms(series.whole_step_at(i))
