"""Bytes as a user reads them (B, KiB, MiB, GiB): the one formatter the CLI, graph and app share."""

from __future__ import annotations

import math

BYTE_UNITS: tuple[str, ...] = ("B", "KiB", "MiB", "GiB", "TiB")


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
    size, unit = byte_unit(value)
    sign = "+" if signed and value > 0 else ""
    if unit == "B":
        return f"{sign}{value:.0f} B"
    scaled = value / size
    digits = 2 if abs(scaled) < 10 else 1 if abs(scaled) < 100 else 0
    return f"{sign}{scaled:.{digits}f} {unit}"
