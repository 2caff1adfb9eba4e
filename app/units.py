"""Numbers as a user reads them: bytes in KiB/MiB/GiB, milliseconds, signed changes."""

from __future__ import annotations

import math

from core.units import BYTE_UNITS, byte_unit, format_bytes  # noqa: F401 (re-exported)


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
