"""The step axis under the timeline plots: ticks and labels at whole steps only, or (View >
X axis > Wall time) at the steps where the run's wall time reaches round values."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextOption

from memlens.app.series.wall_clock import WallClock
from memlens.app.timeline.live_axis import LiveAxis
from memlens.core.units import format_elapsed

STEP_LABEL = "step"
WALL_TIME_LABEL = "wall time (s since the run started; ticks at the steps where it is reached)"
WALL_TIME_TIP = ("The plots stay in steps: each tick sits at the step where the run's clock "
                 "reads its time (interpolated between the steps' end times in steps.csv). "
                 "Pinned runs keep their step positions: the ticks are this run's times, "
                 "not theirs.")
MIN_TICK_GAP_PX = 64  # a clock label ("1:02:05") and a gap


class StepAxis(LiveAxis):
    """A step is a whole number: zoomed in past one step a tick, pyqtgraph's spacing of
    0.5 or 0.2 would label steps that do not exist (5.5). The levels finer than one step
    are dropped; one step apart is the finest spacing there is."""

    def __init__(self, orientation: str = "bottom", **kwargs) -> None:
        super().__init__(orientation, **kwargs)
        self.clock: WallClock | None = None  # set: wall-time ticks (set_clock)
        self._wall_labels: dict[float, str] = {}
        # A live run's ticks change once its clock reaches _wall_next or its newest step
        # passes _wall_end on the axis (a tick's room more of the view to spread ticks over).
        self._wall_next = self._wall_end = float("inf")
        self.setLabel(STEP_LABEL)  # shown wherever the axis is (pyqtgraph's text= is not)
        # The wall-time title is longer than a narrow plot: it wraps, centred (resizeEvent).
        self.label.document().setDefaultTextOption(QTextOption(Qt.AlignmentFlag.AlignHCenter))

    def resizeEvent(self, ev=None) -> None:
        if self.label is not None and self.orientation == "bottom":
            width = self.size().width()
            if width > 0 and self.label.textWidth() != width:
                lines = self.label.boundingRect().height()
                self.label.setTextWidth(width)
                if self.label.boundingRect().height() != lines:
                    self._updateHeight()  # a line more (or fewer) of title
        super().resizeEvent(ev)

    def set_clock(self, clock: WallClock | None) -> None:
        """Ticks at round wall times of `clock`'s run, or at whole steps (None)."""
        self.clock = clock
        self._wall_next = self._wall_end = float("inf")
        self.setLabel(STEP_LABEL if clock is None else WALL_TIME_LABEL)
        self.setToolTip("" if clock is None else WALL_TIME_TIP)
        self.ticks_changed()

    def ticks_changed(self) -> None:
        """Lay the ticks out again at the next paint (the run or its clock changed)."""
        self.picture = None
        self.update()

    def note_new_steps(self) -> None:
        """A live run's new steps change wall-time ticks only once its clock passes the
        next round time in view, or its steps a tick's room more of the view."""
        covered = self.clock.span() if self.clock is not None else None
        if covered is not None and (covered[1] >= self._wall_end
                                    or self.clock.time_at(covered[1]) >= self._wall_next):
            self._wall_next = self._wall_end = float("inf")
            self.ticks_changed()

    def tickSpacing(self, minVal: float, maxVal: float, size: float):
        levels = [(spacing, offset) for spacing, offset in
                  super().tickSpacing(minVal, maxVal, size) if spacing >= 1]
        return levels or [(1.0, 0.0)]

    def tickValues(self, minVal: float, maxVal: float, size: float):
        if self.clock is None or self.logMode:
            return super().tickValues(minVal, maxVal, size)
        lo, hi = sorted((minVal, maxVal))
        xs, seconds, spacing = self.clock.ticks(lo, hi, size, MIN_TICK_GAP_PX)
        clock = bool(seconds) and seconds[-1] >= 60
        self._wall_labels = {x: format_elapsed(t, spacing, clock)
                             for x, t in zip(xs, seconds, strict=True)}
        covered = self.clock.span()
        self._wall_end = self._wall_next = float("inf")
        if covered is None or not spacing:
            self._wall_next = 0.0  # the next step may bring the first ticks
        elif covered[1] < hi:  # room in view for new steps
            last = seconds[-1] if seconds else self.clock.time_at(covered[1])
            self._wall_next = self.clock.next_after(last, spacing)
            self._wall_end = covered[1] + MIN_TICK_GAP_PX * (hi - lo) / max(size, 1.0)
        return [(1.0, xs)]

    def tickStrings(self, values, scale, spacing):
        if self.logMode:
            return super().tickStrings(values, scale, spacing)
        if self.clock is not None:
            return [self._wall_labels.get(v, "") for v in values]
        return [f"{round(v * scale):d}" for v in values]
