"""Colours and pens shared by the plots, the legends and the exported images."""

from __future__ import annotations

from memlens.core.records import MEMORY_CATEGORIES, PHASES

# The palette: every series' colour is defined here once; curves, areas, legends, exports
# and the other views import it. Muted, colour-blind-friendly hues; fills are these,
# lightened, drawn opaque. A band shares its hue with the phase that makes it (activations
# and forward, grads and backward, optimizer state and the optimizer step); within one
# plot no two series share a colour (the peak line stays the red the docs name, so no band
# is red).
CATEGORY_COLORS: dict[str, str] = dict(zip(MEMORY_CATEGORIES, (
    "#4C72B0", "#DD8452", "#55A868", "#64B5CD", "#8C8C8C", "#937860", "#DA8BC3",
    "#A6D854", "#9F94D8", "#E6C229",
), strict=True))
PHASE_COLORS: dict[str, str] = dict(zip(PHASES, (
    "#8172B3", CATEGORY_COLORS["activations"], CATEGORY_COLORS["grads"],
    CATEGORY_COLORS["optimizer"], "#CCB974",
), strict=True))
# A torchrun job's ranks, one hue each (the 11th rank takes the first hue again).
RANK_COLORS: tuple[str, ...] = ("#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD",
                                "#8C564B", "#E377C2", "#7F7F7F", "#BCBD22", "#17BECF")
TOTAL_COLOR = "#222222"
PEAK_COLOR = "#C44E52"
RESERVED_COLOR = "#7F3C8D"
# The process's own memory lines (teal, magenta): hues no band, line or pinned run takes.
RSS_COLOR = "#006D5B"  # the process's resident memory
HEAP_COLOR = "#B8009F"  # malloc's in-use bytes (CPU)
LOSS_COLOR = "#1F77B4"
GRAD_NORM_COLOR = "#E07B00"
EVAL_LOSS_COLOR = "#2CA02C"  # a validation run's loss, a point at the step it followed
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


def swatch(color: str, text: str, value: str = "", glyph: str = "&#9632;") -> str:
    """A legend entry as rich text: a coloured square (or `glyph`: a hatch's), the name,
    and a value if any (one unbreakable piece: a wrapped legend breaks between entries
    only)."""
    # the spaces inside a name ("grad norm") or a value ("5.05 MiB") must not break either
    text, value = text.replace(" ", "&nbsp;"), value.replace(" ", "&nbsp;")
    tail = f"&nbsp;<b>{value}</b>" if value else ""
    return f'<span style="color:{color}">{glyph}</span>&nbsp;{text}{tail}'


def legend_row(parts) -> str:
    """Legend entries in a row, spaced, with a place between any two to wrap at."""
    return "&nbsp; ".join(p for p in parts if p)


MIN_LINE_CONTRAST = 3.0  # WCAG's minimum for graphics a user must make out
# Text drawn over the plot (marker labels) sits on a see-through box over light area fills
# in either theme: it stands out from the background well past WCAG's text minimum, so it
# still reads over the lightest fill through the box.
MIN_LABEL_CONTRAST = 11.0


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two #RRGGBB colours (1 to 21)."""
    def luminance(c: str) -> float:
        def channel(v: float) -> float:
            return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
        r, g, b = (int(c[i : i + 2], 16) / 255 for i in (1, 3, 5))
        return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def readable(color: str, background: str, at_least: float = MIN_LINE_CONTRAST) -> str:
    """`color`, or the nearest mix of it towards white (on dark) or black (on light) that
    stands out from `background` by `at_least`: a line keeps its hue in both themes."""
    toward = 255 if contrast(background, "#000000") < contrast(background, "#FFFFFF") else 0
    rgb = [int(color[i : i + 2], 16) for i in (1, 3, 5)]
    out = color.upper()
    for step in range(21):
        k = step / 20
        out = "#" + "".join(f"{round(c + (toward - c) * k):02X}" for c in rgb)
        if contrast(out, background) >= at_least:
            break
    return out


def rank_color(rank: int) -> str:
    return RANK_COLORS[rank % len(RANK_COLORS)]
