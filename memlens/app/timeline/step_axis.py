"""The step axis under the timeline plots: ticks and labels at whole steps only."""

from __future__ import annotations

from memlens.app.timeline.live_axis import LiveAxis

STEP_LABEL = "step"


class StepAxis(LiveAxis):
    """A step is a whole number: zoomed in past one step a tick, pyqtgraph's spacing of
    0.5 or 0.2 would label steps that do not exist (5.5). The levels finer than one step
    are dropped; one step apart is the finest spacing there is."""

    def __init__(self, orientation: str = "bottom", **kwargs) -> None:
        super().__init__(orientation, **kwargs)
        self.setLabel(STEP_LABEL)  # shown wherever the axis is (pyqtgraph's text= is not)

    def tickSpacing(self, minVal: float, maxVal: float, size: float):
        levels = [(spacing, offset) for spacing, offset in
                  super().tickSpacing(minVal, maxVal, size) if spacing >= 1]
        return levels or [(1.0, 0.0)]

    def tickStrings(self, values, scale, spacing):
        if self.logMode:
            return super().tickStrings(values, scale, spacing)
        return [f"{round(v * scale):d}" for v in values]
