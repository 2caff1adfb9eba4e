"""Work that must wait until a window has painted once (importing torch, for one)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QTimer

# A window that is never exposed (started minimized, on no screen) is never painted; its
# deferred work still runs, this long after it was asked for.
UNPAINTED_MS = 1000


class _FirstPaint(QObject):
    def __init__(self, widget, callback: Callable[[], None]) -> None:
        super().__init__(widget)
        self._callback = callback
        self._fallback = QTimer(self)
        self._fallback.setSingleShot(True)
        self._fallback.timeout.connect(self._run)
        self._fallback.start(UNPAINTED_MS)
        widget.installEventFilter(self)

    def eventFilter(self, obj, event) -> bool:
        if event.type() in (QEvent.UpdateRequest, QEvent.Paint):
            obj.removeEventFilter(self)
            # Queued now, so it runs once the event loop is back: after this paint is done.
            QTimer.singleShot(0, self._run)
        return False

    def _run(self) -> None:
        if self._callback is None:
            return
        callback, self._callback = self._callback, None
        self._fallback.stop()
        self.deleteLater()
        callback()


def after_first_paint(widget, callback: Callable[[], None]) -> None:
    """Call `callback` on the GUI thread once `widget` has finished its first paint."""
    _FirstPaint(widget, callback)
