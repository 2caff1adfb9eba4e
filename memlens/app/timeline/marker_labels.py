"""Where event markers' labels go: beside their line on whichever side has room (clamped to
the view where neither has), stacked in rows from the plot's top so no two overlap and none
is cut off at an edge."""

from __future__ import annotations

LABEL_GAP_PX = 4.0  # between two labels on one row
TOP_MARGIN_PX = 2.0
# A label's box: the plot's own background, see-through enough that a curve under it shows.
LABEL_FILL_ALPHA = 130
# Labels take at most this many rows from the plot's top: a stack of labels over the curves
# hid them. The others are hidden (the events list and the hover read-out name them).
MAX_ROWS = 2
# A marker's label is cut to this many characters (the events list has the whole text).
MAX_LABEL_CHARS = 28


def marker_text(text: str) -> str:
    """A label short enough to sit beside its line: cut with "…" past MAX_LABEL_CHARS."""
    return text if len(text) <= MAX_LABEL_CHARS else text[:MAX_LABEL_CHARS - 1].rstrip() + "…"


def label_anchor(x: float, width: float, view_width: float) -> float:
    """For a label `width` px wide on a line `x` px into a view `view_width` px wide, the
    share of the label left of the line (pyqtgraph's anchor): 0 (to the right) where it
    fits there, 1 (to the left) where it fits there instead, else as far left as keeps its
    left edge in the view."""
    if x + width <= view_width:
        return 0.0
    if x - width >= 0:
        return 1.0
    return x / width  # here x < width: the left edge at the view's


def label_rows(spans: list[tuple[float, float]], gap: float = LABEL_GAP_PX,
               max_rows: int | None = None) -> list[int]:
    """For labels spanning [left, right] pixels, the row of each (0 = top): the first row
    where it overlaps no label placed before it, placing them from left to right; -1 for
    one that would need a row past `max_rows` (it is not shown). Placed left to right, a
    label fits a row when it starts past that row's rightmost end: each label looks at each
    row once, never at every label before it."""
    ends: list[float] = []  # each row's rightmost right edge so far
    out = [0] * len(spans)
    for i in sorted(range(len(spans)), key=lambda k: spans[k][0]):
        left, right = spans[i]
        for r, end in enumerate(ends):
            if left >= end + gap:
                ends[r] = right
                out[i] = r
                break
        else:
            if max_rows is not None and len(ends) >= max_rows:
                out[i] = -1
                continue
            ends.append(right)
            out[i] = len(ends) - 1
    return out


def row_position(row: int, label_height: float, view_height: float) -> float | None:
    """The label's centre as pyqtgraph's InfLineLabel position (0 bottom, 1 top), the whole
    label inside the view; None when the row does not fit (the label is hidden: the events
    list and the hover read-out still name the event)."""
    centre = TOP_MARGIN_PX + row * (label_height + 1.0) + label_height / 2
    if row < 0 or row >= MAX_ROWS or centre + label_height / 2 > view_height:
        return None
    return 1.0 - centre / view_height


def rows_that_fit(label_height: float, view_height: float) -> int:
    """How many rows of labels row_position places inside the view."""
    return max(0, int((view_height - TOP_MARGIN_PX + 1.0) // (label_height + 1.0)))
