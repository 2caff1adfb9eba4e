"""The banner over the plots that says why a run paused or could not go on: its heading on
one line, the explanation a click away, so it never takes the plots' room unasked."""

from __future__ import annotations

import re
from html import unescape

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QToolButton

from memlens.app.elided_label import ElidedLabel
from memlens.app.headed_column import headed_column

# Opened, the explanation takes at most this share of the centre column's height, and never
# more than the plots' least heights leave (it scrolls beyond): the window never grows.
OPEN_SHARE = 0.3
MIN_BODY_LINES = 2


def plain(html: str) -> str:
    """The banner's rich text as one line of plain text."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


class ErrorBanner(QFrame):
    """`setText(html)`: the first line (up to the first <br>) is the heading, shown on one
    line; "Details" opens the whole text under it. Hidden until `show()`."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("error_banner")
        self._html = ""
        self.heading = ElidedLabel("", min_chars=20)
        self.heading.setObjectName("error_heading")
        self.heading.setTextFormat(Qt.PlainText)
        self.toggle = QToolButton()
        self.toggle.setObjectName("error_details_button")
        self.toggle.setCheckable(True)
        self.toggle.setText("Details")
        self.toggle.setToolTip("Show or hide the whole explanation")
        self.toggle.toggled.connect(self._on_toggle_toggled)
        self.body = QLabel("")
        self.body.setObjectName("error_body")
        self.body.setWordWrap(True)
        self.body.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.body_area = QScrollArea()
        self.body_area.setWidget(self.body)
        self.body_area.setWidgetResizable(True)
        self.body_area.setFrameShape(QFrame.NoFrame)
        self.body_area.hide()
        headed_column(self, self.heading, [self.toggle], self.body_area, margins=(4, 2, 4, 2))
        self.hide()

    def setText(self, html: str) -> None:
        self._html = html
        head, _, rest = html.partition("<br>")
        self.heading.setText(plain(head))
        self.heading.setToolTip(plain(html) if rest else "")
        self.body.setText(rest)
        self.toggle.setVisible(bool(rest))
        self._fit()

    def show_step_error(self, event) -> None:
        """A training error that paused the run (a core.records.RunEvent): what failed,
        why, and what to do."""
        where = f" in {event.phase}" if event.phase else ""
        self.setText(f"<b>Step {event.step} failed{where}:</b> {event.message}<br>"
                     f"{event.explanation}<br><i>The run is paused. Change a technique on "
                     "the left and press Resume, or press Reset.</i>")
        self.show()

    def text(self) -> str:
        return self._html

    @property
    def opened(self) -> bool:
        return self.toggle.isChecked()

    def _on_toggle_toggled(self, on: bool) -> None:
        self.toggle.setText("Less" if on else "Details")
        self._fit()

    def _fit(self) -> None:
        shown = self.opened and bool(self.body.text())
        self.body_area.setVisible(shown)
        if shown:
            need = self.body.heightForWidth(max(self.body_area.viewport().width(), 100)) + 4
            least = MIN_BODY_LINES * self.body.fontMetrics().lineSpacing() + 4
            self.body_area.setFixedHeight(max(min(need, self._room()), least))

    def _room(self) -> int:
        """The body's most height: OPEN_SHARE of the column it sits in, less what the
        column's other widgets need at least (the plots' readable heights)."""
        column = self.parentWidget()
        if column is None or column.layout() is None:
            return 200
        layout = column.layout()
        others = 0
        for i in range(layout.count()):
            widget = layout.itemAt(i).widget()
            if widget is not None and widget is not self and not widget.isHidden():
                others += widget.minimumSizeHint().height() + layout.spacing()
        # the heading row, the margins, and the column's own margins and spacing
        head = self.heading.sizeHint().height() + 24
        return max(0, min(int(OPEN_SHARE * column.height()), column.height() - others - head))
