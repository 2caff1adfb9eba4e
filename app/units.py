"""Numbers as a user reads them: the one set of formatters lives in core.units."""

from core.units import (  # noqa: F401
    BYTE_UNITS,
    byte_unit,
    format_bytes,
    format_ms,
    format_number,
    format_percent_change,
)
