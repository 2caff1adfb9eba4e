"""The three timeline plots on one step axis: follow-newest, hover read-out, markers, pins."""

from __future__ import annotations

import math
import time

import pyqtgraph as pg
from PySide6.QtCore import QPointF, QSignalBlocker, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QGraphicsView,
    QPushButton,
    QSplitter,
    QWidget,
)

from memlens.app.elided_label import ElidedLabel
from memlens.app.headed_column import headed_column
from memlens.app.series.run_series import RunSeries
from memlens.app.series.wall_clock import WallClock
from memlens.app.timeline.live_plot import MAX_MARKERS, LivePlot
from memlens.app.timeline.loss_plot import LossPlot
from memlens.app.timeline.marker_labels import marker_text
from memlens.app.timeline.memory_plot import MemoryPlot
from memlens.app.timeline.time_plot import TimePlot
from memlens.core.options import format_value
from memlens.core.records import RunEvent

MIN_SPAN_STEPS = 10.0
# Following a live run whole, the axis runs this share ahead of the data: it moves once per
# 10% of growth instead of at every frame, since a move repaints all three plots whole
# (figures: docs/performance-notes.md, "Axis headroom").
HEADROOM = 0.10
# Showing an event: the ten steps either side that "what just happened" compares, and a margin.
EVENT_SPAN_STEPS = 30.0
# New data alone (the view unchanged) redraws every plot in one frame while that costs at
# most this; above it, one plot a frame in turn, so no frame draws them all: at high step
# rates a frame would otherwise hold several times the work it needs, for an edge that
# moves less than a pixel a frame (docs/performance-notes.md, "Spread repaints"). The axis moving
# on with a live run counts as new data; a change of the view by the user (pan, zoom, a pin,
# an event shown) still redraws every plot at once, in step.
SPREAD_ABOVE_MS = 3.0
# ... and only while the data's right edge creeps: less than this many pixels since the last
# new data. At ordinary rates each step moves it visibly, and every plot shows it at once.
SPREAD_BELOW_PX = 1.0
# While new data is drawn a plot a frame, the axis moving on would still repaint all three
# plots whole in its one frame (that frame was the GUI's longest stall under load). Each
# plot's view then stops repainting
# on its scene's changes until its turn to draw comes (a frame per plot at most), so the plots
# repaint whole one a frame, each with its data at the new range.


class PlotStack(QWidget):
    """Shows one live (or loaded) run plus pinned runs.

    Follow mode keeps the newest step in view: the whole run while `window` is None, or the
    last `window` steps once the user zoomed in at the right end. Panning back turns
    following off until the user presses "Follow newest" again.
    """

    follow_changed = Signal(bool)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.memory_plot = MemoryPlot()
        self.time_plot = TimePlot()
        self.loss_plot = LossPlot()
        self.plots: tuple[LivePlot, ...] = (self.memory_plot, self.time_plot, self.loss_plot)
        for plot in self.plots[1:]:
            plot.setXLink(self.memory_plot)
        for plot in self.plots[:-1]:
            plot.getPlotItem().hideAxis("bottom")  # one step axis, under the stack
            plot.keep_view_room()
        self.run: RunSeries | None = None
        self.clock = WallClock()  # the shown run's, for View > X axis > Wall time
        self.wall_time = False
        self.pins: list = []
        self.follow = True
        self.live = False  # a run is adding steps (the window says so)
        self.follow_window: float | None = None
        self.hover_x: float | None = None
        self._dirty = True
        self._legend_dirty = True
        self._legend_queue: list[tuple[LivePlot, str]] = []  # see refresh_legends
        self._stale: set[int] = set()  # plots whose data is older than the run's (by index)
        self._next = 0  # the plot whose turn it is when drawing one a frame
        self.draw_ms = 0.0  # what drawing every plot costs (running average)
        self._following = False  # the follow mode is moving the axis on
        self._edge: float | None = None  # where the run's data ended at the last new data
        self._creeping = False  # ... and it moved less than SPREAD_BELOW_PX since
        self._held: dict[int, QGraphicsView.ViewportUpdateMode] = {}  # see SPREAD_BELOW_PX

        self.follow_button = QPushButton("Follow newest")
        self.follow_button.setObjectName("follow_button")
        self.follow_button.setCheckable(True)
        self.follow_button.setChecked(True)
        self.follow_button.setToolTip("Keep the newest step in view (panning back turns it off)")
        self.follow_button.toggled.connect(self._on_follow_button_toggled)
        # The process's own memory beside the tensor bytes: off by default, since the
        # process's RSS (torch's libraries alone) dwarfs a small model's tensors.
        self.process_box = QCheckBox("Process RSS && heap")
        self.process_box.setObjectName("process_memory_box")
        self.process_box.setToolTip(
            "Draw the process's resident memory (RSS) and, on CPU, malloc's heap on the "
            "memory plot: memory no tensor explains")
        self.process_box.toggled.connect(self._on_process_box_toggled)
        # One line, cut where the room ends (the tooltip has it whole): a wrapped hint took
        # seven lines of a narrow centre column from the plots.
        hint = ElidedLabel("Drag to pan, wheel to zoom the step axis; hover for values.",
                           min_chars=8)
        hint.setObjectName("plot_hint")
        splitter = QSplitter()
        splitter.setObjectName("plots_splitter")  # its sizes are remembered by name
        splitter.setOrientation(pg.QtCore.Qt.Vertical)
        splitter.setChildrenCollapsible(False)  # each plot keeps its readable height
        for plot in self.plots:
            splitter.addWidget(plot)
            vb = plot.getPlotItem().vb
            vb.sigRangeChangedManually.connect(self._on_range_changed_manually)
            vb.sigXRangeChanged.connect(self._on_x_range_changed)
            plot.hover_left.connect(self._on_hover_left)
            plot.theme_changed.connect(self._on_theme_changed)
        splitter.setSizes([400, 220, 220])
        headed_column(self, hint, [self.process_box, self.follow_button], splitter,
                      row_margins=(4, 0, 4, 0), body_stretch=1)
        # Hover: rate-limited to the paint rate, per plot (each has its own scene).
        self._hover_proxies = [
            pg.SignalProxy(plot.scene().sigMouseMoved, rateLimit=30,
                           slot=lambda args, p=plot: self._on_mouse_moved(p, args[0]))
            for plot in self.plots
        ]

    # --- what is shown ----------------------------------------------------------------------
    def set_run(self, run: RunSeries | None, events: list[RunEvent] = ()) -> None:
        self.run = run
        self.clock.series = run
        for axis in self.step_axes:
            axis.ticks_changed()
        self._edge, self._creeping = None, False
        self._release_paints()
        for plot in self.plots:
            plot.clear_markers()
            plot.clear_data()
        for event in events:
            self.add_event(event)
        self.set_follow(True, window=None)
        self.mark_dirty()

    def set_pins(self, pins: list) -> None:
        self.pins = list(pins)
        for plot in self.plots:
            plot.sync_ghosts(self.pins)
        self.mark_dirty()

    @property
    def step_axes(self):
        return [plot.getPlotItem().getAxis("bottom") for plot in self.plots]

    def set_wall_time(self, on: bool) -> None:
        """Bottom axes (every plot's: exported images show theirs) ticked at round wall
        times of the shown run, or at whole steps; the x data stay in steps either way."""
        self.wall_time = bool(on)
        for plot, axis in zip(self.plots, self.step_axes, strict=True):
            plot.wall_time = self.wall_time
            axis.set_clock(self.clock if on else None)
        self.mark_dirty()

    def add_event(self, event: RunEvent) -> None:
        self.add_events([event])

    def add_events(self, events: list[RunEvent]) -> None:
        """Markers for `events`, their labels arranged once after the last (a run folder
        opened with thousands of events is not arranged thousands of times)."""
        for plot in self.plots:
            for event in events[: max(MAX_MARKERS - len(plot.markers), 0)]:
                plot.add_marker(event.step, _marker_label(event), event.kind, arrange=False)
            plot.arrange_marker_labels()

    def mark_dirty(self) -> None:
        self._dirty = True
        self._legend_dirty = True
        self._legend_queue = []  # texts of what was shown before

    # --- follow and navigation ----------------------------------------------------------------
    def set_live(self, live: bool) -> None:
        if live != self.live:
            self.live = live
            self._dirty = True
            if not live:
                self._release_paints()

    def set_follow(self, on: bool, window: float | None = None) -> None:
        self.follow = on
        self.follow_window = window if on else None
        if self.follow_button.isChecked() != on:
            with QSignalBlocker(self.follow_button):
                self.follow_button.setChecked(on)
        self._dirty = True
        self.follow_changed.emit(on)

    def show_step(self, step: float) -> None:
        """Centre the plots on a step (an event the user clicked) and read out its values."""
        x0, x1 = self.x_range()
        span = min(x1 - x0, EVENT_SPAN_STEPS)
        self.set_follow(False)
        self.memory_plot.setXRange(step - span / 2, step + span / 2, padding=0)
        self.set_hover(step + 0.5)

    def x_range(self) -> tuple[float, float]:
        (x0, x1), _ = self.memory_plot.getPlotItem().vb.viewRange()
        return x0, x1

    def data_end(self) -> float:
        ends = [self.run.x_end if self.run is not None else 0.0]
        ends += [p.series.x_end for p in self.pins if p.visible]
        return max(ends)

    def _apply_follow(self) -> None:
        end = self.data_end()
        if self.follow_window is None:
            x0, x1 = 0.0, max(end, MIN_SPAN_STEPS)
            if self.live:
                shown = self.x_range()[1]
                if shown >= x1 and shown <= x1 * (1 + 2 * HEADROOM) + 1:
                    return  # the newest step is in view, with room to grow into
                x1 = x1 * (1 + HEADROOM) + 1
        else:
            x1 = max(end, self.follow_window)
            x0 = x1 - self.follow_window
        if (x0, x1) != self.x_range():
            # The axis moving on with the data is new data, not a new view: the plots catch up
            # in turn as they would with the data alone (see refresh), so the frame of a move
            # does not also redraw all three.
            self._following = True
            if self.spreading:
                self._hold_paints()
            try:
                self.memory_plot.setXRange(x0, x1, padding=0)
            finally:
                self._following = False

    def _on_process_box_toggled(self, on: bool) -> None:
        self.memory_plot.show_process(on)
        self.mark_dirty()

    def _on_follow_button_toggled(self, on: bool) -> None:
        self.set_follow(on, window=None)

    def _on_range_changed_manually(self, *_args) -> None:
        x0, x1 = self.x_range()
        end = self.data_end()
        # Zoomed at the right end: keep following with this window. Panned back: stop.
        if end > 0 and x1 >= end - 0.5:
            self.set_follow(True, window=max(x1 - x0, MIN_SPAN_STEPS))
        else:
            self.set_follow(False)

    def _on_x_range_changed(self, *_args) -> None:
        if self._following:
            self._stale = set(range(len(self.plots)))
        else:
            self._dirty = True

    # --- hover ------------------------------------------------------------------------------
    def _on_mouse_moved(self, plot: LivePlot, pos: QPointF) -> None:
        vb = plot.getPlotItem().vb
        if not vb.sceneBoundingRect().contains(pos):
            self._on_hover_left()
            return
        self.set_hover(vb.mapSceneToView(pos).x())

    def set_hover(self, x: float | None) -> None:
        self.hover_x = x
        for plot in self.plots:
            if x is None:
                plot.hover_line.hide()
            else:
                plot.hover_line.setPos(x)
                plot.hover_line.show()
        self._legend_dirty = True
        self.refresh_legends()

    def _on_theme_changed(self) -> None:
        self._legend_dirty = True  # the swatches' colours (the next text refresh)

    def _on_hover_left(self) -> None:
        if self.hover_x is not None:
            self.set_hover(None)

    # --- drawing (the window's timer calls these) ---------------------------------------------
    def refresh(self, new_data: bool, busy: bool = False) -> bool:
        """Redraw curves if data or the view changed. Returns whether anything was drawn.
        New data alone may draw one plot now and the others on the next calls (see
        SPREAD_ABOVE_MS), and none in a `busy` frame (one with other heavy work) while
        drawing is that costly; `stale` says whether some still wait."""
        if self.follow and (new_data or self._dirty):
            self._apply_follow()
        n = len(self.plots)
        if new_data:
            self._stale = set(range(n))
            self._legend_dirty = True
            self._note_edge()
            if self.wall_time:
                for axis in self.step_axes:
                    axis.note_new_steps()
        if self._dirty or (self._stale and not self.spreading):
            chosen = list(range(n))
        elif self._stale and not busy:
            turn = (i % n for i in range(self._next, self._next + n))
            chosen = [next(i for i in turn if i in self._stale)]
        else:
            return False
        self._next = (chosen[-1] + 1) % n
        x0, x1 = self.x_range()
        t0 = time.perf_counter()
        for i in chosen:
            plot = self.plots[i]
            self._release_paints(i)
            points = 2 * plot.pixel_width()
            plot.draw(self.run, x0, x1, points)
            plot.draw_ghosts(self.pins, x0, x1, points)
            plot.fit_y()
            plot.apply_view_changes()
            self._stale.discard(i)
        whole = (time.perf_counter() - t0) * 1e3 * n / len(chosen)
        self.draw_ms = whole if not self.draw_ms else 0.8 * self.draw_ms + 0.2 * whole
        self._dirty = False
        if not self._stale:
            self._release_paints()  # nothing left to draw: none may stay held
        return True

    def _hold_paints(self) -> None:
        """Each plot's view stops repainting itself when its scene changes (an expose, a grab
        or a window repaint still paints it whole, as it is now)."""
        for i, plot in enumerate(self.plots):
            if i not in self._held:
                self._held[i] = plot.viewportUpdateMode()
                plot.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.NoViewportUpdate)

    def _release_paints(self, i: int | None = None) -> None:
        """Plot i's (or every held plot's) view repaints on its scene's changes again, and
        now, whole."""
        for j in ([i] if i is not None else sorted(self._held)):
            mode = self._held.pop(j, None)
            if mode is not None:
                self.plots[j].setViewportUpdateMode(mode)
                self.plots[j].viewport().update()

    @property
    def held(self) -> tuple[int, ...]:
        """Plots (by index) whose views hold their repaints until their turn to draw."""
        return tuple(sorted(self._held))

    def _note_edge(self) -> None:
        end = self.run.x_end if self.run is not None else 0.0
        x0, x1 = self.x_range()
        px = (end - self._edge) * self.memory_plot.pixel_width() / max(x1 - x0, 1e-9) \
            if self._edge is not None else math.inf
        self._creeping = abs(px) < SPREAD_BELOW_PX
        self._edge = end

    @property
    def spreading(self) -> bool:
        """Drawing every plot costs more than a frame should spend on it (SPREAD_ABOVE_MS)
        while the data's edge creeps (SPREAD_BELOW_PX): new data is drawn a plot a frame."""
        return self._creeping and self.draw_ms > SPREAD_ABOVE_MS

    @property
    def stale(self) -> bool:
        """Some plot does not show the newest data yet (it is drawn on a coming refresh)."""
        return bool(self._stale)

    def refresh_legends(self, spread: bool = False) -> None:
        """The legends are text: refreshed at a slower rate than the curves. `spread`: all
        three texts are worked out now (the same newest step), but only the first is set
        now, the others at the next calls of refresh_next_legend, one a frame, so no frame
        lays out three HTML texts."""
        if not self._legend_dirty:
            return
        x = self.hover_x
        if x is not None and (math.isnan(x) or math.isinf(x)):
            x = None
        texts = [(plot, plot.legend_at(self.run, x, self.pins)) for plot in self.plots]
        self._legend_queue = texts[1:] if spread else []
        for plot, text in texts[:1] if spread else texts:
            plot.set_legend(text)
        self._legend_dirty = False

    @property
    def legend_waiting(self) -> bool:
        """A spread legend refresh left a text for a coming frame."""
        return bool(self._legend_queue)

    def refresh_next_legend(self) -> None:
        """Set the next legend text a spread refresh left (call once a frame)."""
        if self._legend_queue:
            plot, text = self._legend_queue.pop(0)
            plot.set_legend(text)


def _marker_label(event: RunEvent) -> str:
    """A marker's short label: "zero_grad → off" for a toggle (the events list says it
    whole), the step before an error's."""
    label = event.label()
    if event.kind == "toggle":
        label = f"{event.key} \u2192 {format_value(event.new)}"
    return marker_text(f"{event.step}: {label}" if event.kind == "error" else label)
