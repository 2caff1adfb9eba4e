"""The window's frame clock: a ~30 Hz timer that pulls new rows and redraws the curves, and
every TEXT_EVERY-th frame the texts; paced so drawing never takes more than its share of
the GUI thread (frame_pacer)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QElapsedTimer, QObject, QTimer

from memlens.app.window.frame_pacer import FramePacer

FRAME_MS = 33  # curves: about 30 Hz
TEXT_EVERY = 8  # text: every 8th frame, about 4 Hz
KEPT_FRAMES = 4096  # frame costs kept for whoever measures them (benchmarks)


class FrameClock(QObject):
    """Each frame: `pull()` (new rows and events; True when there were rows) unless the
    frame is a spread text frame, then `plots.refresh`, then the texts (`texts(spread)`)
    or the next legend a spread text refresh left. `live()`: a run is adding steps.
    `urgent()`: the texts are due now (a run's first rows)."""

    def __init__(self, parent: QObject, plots, pull: Callable[[], bool],
                 texts: Callable[[bool], None], live: Callable[[], bool],
                 urgent: Callable[[], bool]) -> None:
        super().__init__(parent)
        self._plots, self._pull, self._texts = plots, pull, texts
        self._live, self._urgent = live, urgent
        self.frames = 0
        self.frame_ms: list[float] = []  # refresh cost of recent frames (benchmarks read it)
        self.timer = QTimer(self)
        self.timer.setObjectName("refresh_timer")
        self.timer.setInterval(FRAME_MS)
        self.pacer = FramePacer(base_ms=FRAME_MS)
        self.timer.timeout.connect(self.frame)
        self.timer.start()

    def frame(self, force_text: bool = False) -> None:
        """One frame. When drawing the plots is costly (a flood of steps, see
        PlotStack.refresh), a frame does one of three things: the periodic text (no pull,
        no plot), a legend a text refresh left, or a pull and one plot; no frame holds all
        of them."""
        timer = QElapsedTimer()
        timer.start()
        self.frames += 1
        plots = self._plots
        now = force_text or self._urgent()
        periodic = not now and self.frames % TEXT_EVERY == 0
        new_data = False
        if not (periodic and plots.spreading):
            new_data = self._pull()
        plots.set_live(self._live())
        legend = not (now or periodic) and plots.legend_waiting
        plots.refresh(new_data, busy=now or periodic or legend)
        if now:
            self._texts(False)
        elif periodic:
            self._texts(True)
        elif legend:
            plots.refresh_next_legend()
        self.frame_ms.append(timer.nsecsElapsed() / 1e6)
        if len(self.frame_ms) > KEPT_FRAMES:
            del self.frame_ms[:KEPT_FRAMES // 2]
        interval = self.pacer.tick()
        if interval is not None:
            self.timer.setInterval(interval)
