"""Colours and pens shared by the plots, the legends and the exported images."""

from __future__ import annotations

from memlens.core.records import MEMORY_CATEGORIES, PHASES

# Muted, colour-blind-friendly hues; fills are these, lightened, drawn opaque.
CATEGORY_COLORS: dict[str, str] = dict(zip(MEMORY_CATEGORIES, (
    "#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8C8C8C", "#937860", "#DA8BC3",
    "#A6D854",
), strict=True))
PHASE_COLORS: dict[str, str] = dict(zip(PHASES, (
    "#8172B3", "#64B5CD", "#DD8452", "#55A868", "#CCB974",
), strict=True))
TOTAL_COLOR = "#222222"
PEAK_COLOR = "#C44E52"
RESERVED_COLOR = "#7F3C8D"
LOSS_COLOR = "#1F77B4"
GRAD_NORM_COLOR = "#E07B00"
TOGGLE_COLOR = "#2F6FB0"
ERROR_COLOR = "#D62728"
INFO_COLOR = "#8C6D31"
HOVER_COLOR = "#555555"


def lighten(hex_color: str, amount: float = 0.35) -> str:
    """Mix a colour with white: `amount` 0 keeps it, 1 gives white."""
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    mix = [round(c + (255 - c) * amount) for c in (r, g, b)]
    return "#{:02x}{:02x}{:02x}".format(*mix)


def event_color(kind: str) -> str:
    return {"toggle": TOGGLE_COLOR, "error": ERROR_COLOR}.get(kind, INFO_COLOR)


def swatch(color: str, text: str, value: str = "") -> str:
    """A legend entry as rich text: a coloured square, the name, and a value if any."""
    tail = f" <b>{value}</b>" if value else ""
    return f'<span style="color:{color}">&#9632;</span>&nbsp;{text}{tail}'
