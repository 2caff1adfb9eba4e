"""A plot axis that labels bytes in KiB, MiB or GiB, with ticks at round numbers of that unit."""

from __future__ import annotations

from math import ceil, log10

import pyqtgraph as pg

from app.units import byte_unit


class BytesAxis(pg.AxisItem):
    def __init__(self, orientation: str = "left", **kwargs) -> None:
        super().__init__(orientation, **kwargs)
        self.enableAutoSIPrefix(False)
        self._unit_size, self._unit = 1.0, "B"

    def tickSpacing(self, minVal: float, maxVal: float, size: float):
        self._unit_size, self._unit = byte_unit(max(abs(minVal), abs(maxVal)))
        u = self._unit_size
        levels = super().tickSpacing(minVal / u, maxVal / u, size)
        # Whole bytes are the finest tick that means anything.
        return [(max(spacing * u, 1.0), offset * u) for spacing, offset in levels]

    def tickStrings(self, values, scale, spacing):
        u = self._unit_size
        places = max(0, ceil(-log10(spacing / u))) if spacing > 0 else 0
        if self._unit == "B":
            places = 0
        return [f"{v / u:.{places}f} {self._unit}" for v in values]
