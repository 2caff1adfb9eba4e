"""Numbers as a user reads them: the one definition lives in core.units (the CLI and run.json
use the same formats); the app imports it from here."""

from core.units import (  # noqa: F401
    BYTE_UNITS,
    byte_unit,
    format_bytes,
    format_ms,
    format_number,
    format_percent_change,
)
