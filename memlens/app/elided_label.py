"""Labels that give up room before the window does: their text is cut with "…" where the
room ends (one line, or a fixed number of lines), and the whole text is their tooltip."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtGui import QPainter, QTextLayout, QTextOption
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


class LinesLabel(QLabel):
    """A label of a fixed number of lines: its text wraps into them and the last is cut
    with "…" where the text needs more (the whole text is then its tooltip). Its height
    never changes with its text, so nothing under it moves when a longer text comes."""

    def __init__(self, text: str = "", lines: int = 2, parent=None) -> None:
        super().__init__(text, parent)
        self.lines = lines
        self.setWordWrap(True)
        self.setFixedHeight(self._height())

    def _height(self) -> int:
        margins = self.contentsMargins()
        return self.lines * self.fontMetrics().lineSpacing() + margins.top() + margins.bottom()

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self.setFixedHeight(self._height())

    def _spans(self, width: int) -> list[tuple[int, int]]:
        """(start, length) of each line the text wraps into at `width`."""
        layout = QTextLayout(self.text(), self.font())
        option = QTextOption()
        option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        layout.setTextOption(option)
        layout.beginLayout()
        spans = []
        while True:
            line = layout.createLine()
            if not line.isValid():
                break
            line.setLineWidth(max(width, 1))
            spans.append((line.textStart(), line.textLength()))
        layout.endLayout()
        return spans

    def shown_lines(self, width: int | None = None) -> list[str]:
        """The lines as painted at `width` (the label's own by default)."""
        width = self.contentsRect().width() if width is None else width
        spans, text = self._spans(width), self.text()
        out = [text[a:a + n].rstrip() for a, n in spans[:self.lines]]
        if len(spans) > self.lines:
            rest = text[spans[self.lines - 1][0]:]
            out[-1] = self.fontMetrics().elidedText(rest, Qt.TextElideMode.ElideRight, width)
        return out

    @property
    def cut(self) -> bool:
        """The text needs more lines than the label has."""
        return len(self._spans(self.contentsRect().width())) > self.lines

    def setText(self, text: str) -> None:
        super().setText(text)
        self._tip()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._tip()

    def _tip(self) -> None:
        self.setToolTip(self.text() if self.cut else "")

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        rect = self.contentsRect()
        step = self.fontMetrics().lineSpacing()
        for i, line in enumerate(self.shown_lines(rect.width())):
            painter.drawText(rect.adjusted(0, i * step, 0, 0),
                             int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop), line)
