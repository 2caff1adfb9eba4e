"""A plot axis that labels bytes in KiB, MiB or GiB, with ticks at round numbers of that unit.

`unit` is how many bytes one unit of the view holds: the memory plot draws in MiB because
Qt's raster engine fills paths under a view that maps millions of bytes to pixels about 30
times slower than the same paths in MiB.
"""

from __future__ import annotations

from math import ceil, log10

from memlens.app.timeline.live_axis import LiveAxis
from memlens.core.units import byte_unit, exact_bytes, format_bytes


class BytesAxis(LiveAxis):
    def __init__(self, orientation: str = "left", unit: float = 1.0, **kwargs) -> None:
        super().__init__(orientation, **kwargs)
        self.enableAutoSIPrefix(False)
        self.unit = unit
        self._shown, self._name = 1.0, "B"  # the unit the labels use, in bytes

    def tickValues(self, minVal: float, maxVal: float, size: float):
        if not self.logMode:
            return super().tickValues(minVal, maxVal, size)
        # Log scale: ticks at powers of 4 bytes (1 KiB, 4 KiB, 16 KiB, ..., 1 MiB), every
        # other one where they would crowd.
        lo, hi = sorted((minVal, maxVal))
        floor = self.log_floor * self.unit  # bytes at the bottom edge
        values = [log10(4**k / floor) for k in range(40)]
        values = [v for v in values if lo <= v <= hi]
        while len(values) > max(2, size / 40):
            values = values[::2]
        return [(1.0, values)]

    def tickSpacing(self, minVal: float, maxVal: float, size: float):
        self._shown, self._name = byte_unit(max(abs(minVal), abs(maxVal)) * self.unit)
        k = self._shown / self.unit  # view units per shown unit
        levels = super().tickSpacing(minVal / k, maxVal / k, size)
        # Whole bytes are the finest tick that means anything.
        return [(max(spacing * k, 1.0 / self.unit), offset * k) for spacing, offset in levels]

    def tickStrings(self, values, scale, spacing):
        if self.logMode:
            return [self._log_tick(self.log_floor * self.unit * 10**v) for v in values]
        k = self._shown / self.unit
        places = max(0, ceil(-log10(spacing / k))) if spacing > 0 else 0
        if self._name == "B":
            places = 0
        return [f"{v / k:.{places}f} {self._name}" for v in values]

    @staticmethod
    def _log_tick(value: float) -> str:
        """A log tick (a power of 4 bytes) in its unit. With exact bytes on, "1,073,741,824 B"
        would not fit the axis and the tick would go unlabelled; "1 GiB" is just as exact."""
        if not exact_bytes():
            return format_bytes(value)
        size, unit = byte_unit(round(value))  # 10**log10(4**k) may come back a hair under
        scaled = value / size
        whole = abs(scaled - round(scaled)) < 1e-6 * scaled
        return f"{round(scaled)} {unit}" if whole else format_bytes(value)
