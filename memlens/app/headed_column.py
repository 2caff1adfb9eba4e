"""The layout of a widget headed by one row: a title that takes the room left, controls at
its right, over the body (the error banner, the Snapshot tab's list, the plots)."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtWidgets import QHBoxLayout, QVBoxLayout, QWidget

Margins = tuple[int, int, int, int]
NO_MARGINS: Margins = (0, 0, 0, 0)
ROW_SPACING = 2  # between the heading row and the body


def headed_column(widget: QWidget, title: QWidget, controls: Sequence[QWidget], body: QWidget,
                  *, row_margins: Margins = NO_MARGINS, margins: Margins = NO_MARGINS,
                  body_stretch: int = 0) -> QVBoxLayout:
    """Lay `widget` out as `title` and `controls` in a row over `body`; returns its layout."""
    row = QHBoxLayout()
    row.setContentsMargins(*row_margins)
    row.addWidget(title, 1)
    for control in controls:
        row.addWidget(control)
    column = QVBoxLayout(widget)
    column.setContentsMargins(*margins)
    column.setSpacing(ROW_SPACING)
    column.addLayout(row)
    column.addWidget(body, body_stretch)
    return column
