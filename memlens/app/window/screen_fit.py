"""The window on the screen it opens on: a first size that fits it.

A remembered geometry needs nothing of ours: QWidget.restoreGeometry moves and shrinks a
geometry saved on a larger screen onto the available one (tests/app/test_real_window.py
checks it at 1280x800).
"""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

PREFERRED = QSize(1480, 920)  # where the screen has room: every dock and plot at ease
SCREEN_SHARE = 0.94  # of the available area, at most, so the frame and the edges show


def available(window: QWidget) -> QRect:
    """The screen area the window may use (no panels or docks of the desktop)."""
    screen = window.screen() or QGuiApplication.primaryScreen()
    return screen.availableGeometry()


def fit_first_size(window: QWidget) -> None:
    """Size a window that has no remembered geometry: PREFERRED, or what the screen has
    room for, centred on it."""
    area = available(window)
    size = PREFERRED.boundedTo(QSize(int(area.width() * SCREEN_SHARE),
                                     int(area.height() * SCREEN_SHARE)))
    size = size.expandedTo(window.minimumSizeHint()).boundedTo(area.size())
    window.resize(size)
    frame = window.frameGeometry()
    frame.moveCenter(area.center())
    window.move(frame.topLeft())
