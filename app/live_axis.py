"""A plot axis whose range change redraws its ticks, not its label.

pyqtgraph's axis, at every range change of its view (each time a live run's step axis
moves on, each new y range), sets its label's HTML again and recomputes its size, even when
the label reads the same (its SI prefix did not change): a text layout per axis, hidden
axes included. This one skips that when the label's text is unchanged; the ticks are
redrawn as before. Other label changes (text, pens) take pyqtgraph's path.
"""

from __future__ import annotations

import pyqtgraph as pg


class LiveAxis(pg.AxisItem):
    def __init__(self, orientation: str, **kwargs) -> None:
        self._label_html: str | None = None
        self._new_range = False
        super().__init__(orientation, **kwargs)

    def updateAutoSIPrefix(self) -> None:
        self._new_range = True
        try:
            super().updateAutoSIPrefix()
        finally:
            self._new_range = False

    def _updateLabel(self) -> None:
        html = self.labelString()
        if self._new_range and html == self._label_html:
            self.picture = None  # the ticks moved
            self.update()
            return
        self._label_html = html
        super()._updateLabel()
