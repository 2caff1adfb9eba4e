"""Where event markers' labels go: stacked in rows from the plot's top so no two overlap and
none is cut off at the top edge."""

from __future__ import annotations

LABEL_GAP_PX = 4.0  # between two labels on one row
TOP_MARGIN_PX = 2.0


def label_rows(spans: list[tuple[float, float]], gap: float = LABEL_GAP_PX) -> list[int]:
    """For labels spanning [left, right] pixels, the row of each (0 = top): the first row
    where it overlaps no label placed before it, placing them from left to right."""
    rows: list[list[tuple[float, float]]] = []
    out = [0] * len(spans)
    for i in sorted(range(len(spans)), key=lambda k: spans[k][0]):
        left, right = spans[i]
        for r, placed in enumerate(rows):
            if all(right + gap <= a or left >= b + gap for a, b in placed):
                placed.append((left, right))
                out[i] = r
                break
        else:
            rows.append([(left, right)])
            out[i] = len(rows) - 1
    return out


def row_position(row: int, label_height: float, view_height: float) -> float | None:
    """The label's centre as pyqtgraph's InfLineLabel position (0 bottom, 1 top), the whole
    label inside the view; None when the row does not fit (the label is hidden: the events
    list and the hover read-out still name the event)."""
    centre = TOP_MARGIN_PX + row * (label_height + 1.0) + label_height / 2
    if centre + label_height / 2 > view_height:
        return None
    return 1.0 - centre / view_height
