"""Numbers as a user reads them: bytes in KiB/MiB/GiB, milliseconds, signed changes."""

from __future__ import annotations

import math
import re

BYTE_UNITS: tuple[str, ...] = ("B", "KiB", "MiB", "GiB", "TiB")
_exact = [False]  # the app's View > Exact bytes: every byte figure as a whole number of bytes


def set_exact_bytes(on: bool) -> None:
    _exact[0] = bool(on)


def exact_bytes() -> bool:
    return _exact[0]


def byte_unit(magnitude: float) -> tuple[float, str]:
    """The binary unit (its size in bytes, its name) that shows `magnitude` as 1..1023."""
    size, index = 1.0, 0
    magnitude = abs(magnitude)
    while magnitude >= 1024 * size and index < len(BYTE_UNITS) - 1:
        size *= 1024
        index += 1
    return size, BYTE_UNITS[index]


def format_bytes(value: float | None, signed: bool = False) -> str:
    """1536 -> '1.50 KiB'; three significant digits, the unit chosen per value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    sign = "+" if signed and value > 0 else ""
    if _exact[0]:
        return f"{sign}{value:,.0f} B"
    size, unit = byte_unit(value)
    if unit == "B":
        return f"{sign}{value:.0f} B"
    scaled = value / size
    digits = 2 if abs(scaled) < 10 else 1 if abs(scaled) < 100 else 0
    return f"{sign}{scaled:.{digits}f} {unit}"


# A byte figure inside an event's text (RunEvent renders it): the raw value kept, so that the
# text can be written again in the other bytes display (View > Exact bytes) after the fact.
_FIGURE = re.compile("\ue000([^\ue001]*)\ue001")


def byte_figure(value: float | None) -> str:
    """`value` as a mark that format_figures writes as format_bytes(value) would now."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"\ue000{float(value)!r}\ue001"


def has_figures(text: str) -> bool:
    return "\ue000" in text


def format_figures(text: str) -> str:
    """A text with its byte_figure marks written in the current bytes display."""
    return _FIGURE.sub(lambda m: format_bytes(float(m[1])), text)


def format_ms(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    if value >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def format_number(value: float | None) -> str:
    """Loss and grad norm: a few significant digits, never scientific below 1e5."""
    if value is None or math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3g}"
    return f"{value:.4g}"


def format_percent_change(before: float, after: float) -> str:
    if not before or math.isnan(before) or math.isnan(after):
        return "n/a"
    change = 100.0 * (after - before) / before
    return f"{change:+.0f}%"


def format_elapsed(seconds: float, spacing: float | None = None,
                   clock: bool | None = None) -> str:
    """Seconds since a run started: '12.5 s' under a minute, '1:02' (or '1:02:03') on a
    clock. `spacing`: the finest difference the text must show (a tick spacing; None: a
    hundredth under 10 s, a tenth under a minute, whole seconds past it); `clock`: m:ss
    whatever the value (an axis whose ticks reach a minute labels them all alike)."""
    if seconds is None or math.isnan(seconds):
        return "n/a"
    if spacing is None:
        spacing = 0.01 if seconds < 10 else 0.1 if seconds < 60 else 1.0
    digits = 0 if spacing >= 1 else min(max(math.ceil(-math.log10(spacing) - 1e-9), 0), 6)
    seconds = round(seconds, digits)  # so that 59.999 reads 1:00, not 0:60
    if not (seconds >= 60 if clock is None else clock):
        return f"{seconds:.{digits}f} s"
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    minutes, rest = divmod(seconds, 60)
    rest = round(rest, digits)
    hours, minutes = divmod(int(minutes), 60)
    width = 2 if not digits else 3 + digits
    text = f"{rest:0{width}.{digits}f}"
    return f"{sign}{hours}:{minutes:02d}:{text}" if hours else f"{sign}{minutes}:{text}"
