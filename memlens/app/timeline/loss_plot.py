"""Loss (left axis), the validation loss (points, left axis) and global grad norm (right
axis) against steps."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from memlens.app.series.run_series import RunSeries
from memlens.app.timeline.plot_style import (
    EVAL_LOSS_COLOR,
    GRAD_NORM_COLOR,
    LOSS_COLOR,
    legend_row,
)
from memlens.app.timeline.step_plot import StepPlot
from memlens.core.units import format_number


class LossPlot(StepPlot):
    """`curves["loss"]` on the left axis with `curves["eval_loss"]` (a point at each step a
    validation run followed: steps.csv's eval_loss); `curves["grad_norm"]` in `grad_view`,
    right axis, a line through the steps that have one (a watch takes it with its detail:
    core.watch.norms)."""

    log_floor = 1e-4

    def __init__(self, parent=None) -> None:
        super().__init__("loss_plot", "Loss", parent=parent)
        item = self.getPlotItem()
        self.grad_view = pg.ViewBox(enableMouse=False)
        self.grad_view.setZValue(-100)  # under the main view, so the main view gets the mouse
        item.scene().addItem(self.grad_view)
        item.showAxis("right")
        right = item.getAxis("right")
        right.linkToView(self.grad_view)
        right.setTextPen(GRAD_NORM_COLOR)
        right.setPen("#999999")
        self.grad_view.setXLink(item)
        self.grad_view.disableAutoRange()  # fit_y sets its y range from the curve
        self.grad_view.sigResized.connect(self._on_view_resized)
        item.vb.sigResized.connect(self._sync_views)
        self.add_curve("loss", LOSS_COLOR, z=5, finite=False)
        self.add_curve("grad_norm", GRAD_NORM_COLOR, z=5, view=self.grad_view,
                       finite=False)
        self.add_points("eval_loss", EVAL_LOSS_COLOR, z=6)
        item.getAxis("left").setTextPen(LOSS_COLOR)

    def _sync_views(self) -> None:
        vb = self.getPlotItem().vb
        self.grad_view.setGeometry(vb.sceneBoundingRect())
        self.grad_view.linkedViewChanged(vb, self.grad_view.XAxis)

    ghost_key = "loss"

    def draw_steps(self, run: RunSeries, rows: slice, x0: float, x1: float,
                   max_points: int) -> None:
        xs, lines = run.steps.decimate("lines", rows, max_points)
        xs = xs + self.ghost_x_shift
        self.curves["loss"].setData(xs, lines[0])
        taken = np.isfinite(lines[1])  # steps without one (a watch's without detail): joined over
        self.curves["grad_norm"].setData(xs[taken], lines[1][taken])
        steps, evals = run.eval_points(x0, x1)
        self.curves["eval_loss"].setData(steps + self.ghost_x_shift, evals)

    def legend_at(self, run: RunSeries | None, x: float | None, pins) -> str:
        loss = grad = head = evaluated = ""
        found = run.step_record_at(x) if run is not None else None
        if found is not None:
            step, values = found
            loss, grad = format_number(values["loss"]), format_number(values["grad_norm"])
            if values["grad_norm"] != values["grad_norm"] and values["loss"] == values["loss"]:
                grad = "not taken at this step"  # (a watch's step without detail)
            evaluated = format_number(values["eval_loss"])
            head = f"<i>step {step}</i>"
        has_evals = run is not None and run.evals.n > 0
        parts = [head, self.swatch(LOSS_COLOR, "loss", loss),
                 self.swatch(EVAL_LOSS_COLOR, "validation loss", evaluated)
                 if has_evals else "",
                 self.swatch(GRAD_NORM_COLOR, "grad norm", grad),
                 self.pin_legend(pins, None if x is None else lambda s: _ghost_loss(s, x))]
        return legend_row(parts)


def _ghost_loss(series: RunSeries, x: float) -> str | None:
    i = series.step_row(int(np.floor(x)))
    return None if i is None else format_number(series.loss_at(i))
