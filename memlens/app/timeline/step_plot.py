"""What the plots of one figure a step share (loss, step time): a step's figure belongs to
the middle of its interval, and a pinned run stands as one of the steps' lines."""

from __future__ import annotations

import numpy as np

from memlens.app.series.run_series import STEP_LINES, RunSeries
from memlens.app.timeline.live_plot import LivePlot


class StepPlot(LivePlot):
    """A LivePlot of steps' rows; a subclass draws the rows in view (`draw_steps`) and names
    the line a pinned run stands as (`ghost_key`, one of STEP_LINES)."""

    ghost_x_shift = 0.5  # step N's figure is drawn at N + 0.5
    ghost_key: str

    def ghost_line(self, run: RunSeries, x0: float, x1: float, max_points: int
                   ) -> tuple[np.ndarray, np.ndarray]:
        xs, lines = run.steps.decimate("lines", run.steps.visible(x0, x1), max_points)
        return xs, lines[STEP_LINES.index(self.ghost_key)]

    def draw(self, run: RunSeries | None, x0: float, x1: float, max_points: int) -> None:
        if run is None or run.step_count == 0:
            self.clear_data()
            return
        x0, x1 = x0 - self.ghost_x_shift, x1 - self.ghost_x_shift  # in steps
        self.draw_steps(run, run.steps.visible(x0, x1), x0, x1, max_points)

    def draw_steps(self, run: RunSeries, rows: slice, x0: float, x1: float,
                   max_points: int) -> None:
        """Draw `rows`, the rows of run.steps from step x0 to x1, cut to max_points."""
        raise NotImplementedError
