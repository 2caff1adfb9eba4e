"""A QObject that polls on a GUI-thread timer: what a followed run, a followed job and a
folder awaited share."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer


class Poller(QObject):
    """Calls `_on_timeout` every `interval_ms` once started, until `stop()` (which a poll
    may call itself when there is nothing left to wait for)."""

    def __init__(self, timer_name: str, interval_ms: int, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._timer = QTimer(self)
        self._timer.setObjectName(timer_name)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._on_timeout)

    @property
    def active(self) -> bool:
        return self._timer.isActive()

    def start(self) -> None:
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def _poll_until(self, done: Callable[[], bool]) -> None:
        """One poll now (what is there shows at once), then on the timer unless it was the
        last."""
        self._on_timeout()
        if not done():
            self._timer.start()

    def _on_timeout(self) -> None:
        raise NotImplementedError
