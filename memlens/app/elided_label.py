"""A one-line label that gives up width before the window does: its text is cut with "…"
where the room ends, and the whole text is its tooltip."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel


class ElidedLabel(QLabel):
    """`min_chars`: the width it asks for at least, in average characters. Its tooltip is
    the whole text unless one was set apart (`setToolTip` after `setText`)."""

    def __init__(self, text: str = "", min_chars: int = 12, parent=None) -> None:
        super().__init__(text, parent)
        self.min_chars = min_chars
        self._own_tip = False

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(self.fontMetrics().averageCharWidth() * self.min_chars, hint.height())

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        return QSize(hint.width(), self.fontMetrics().height() + self.contentsMargins().top()
                     + self.contentsMargins().bottom())

    def setText(self, text: str) -> None:
        super().setText(text)
        if not self._own_tip:
            super().setToolTip(text if self.shown_text() != text else "")

    def setToolTip(self, tip: str) -> None:
        self._own_tip = bool(tip)
        super().setToolTip(tip)

    def shown_text(self) -> str:
        """The text as painted: cut with "…" where the label is too narrow."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight,
                                             self.contentsRect().width())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if not self._own_tip:
            text = self.text()
            super().setToolTip(text if self.shown_text() != text else "")

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        painter.drawText(self.contentsRect(),
                         int(self.alignment()) | Qt.AlignmentFlag.AlignVCenter, self.shown_text())
