"""Light and dark themes: follow the system's colour scheme (QStyleHints.colorScheme) for
the widgets (palette + resources/<theme>.qss) and the plots (background, axes, lines)."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

from memlens.app.resources import app_icon, resource_text
from memlens.app.timeline.plot_style import HOVER_COLOR, TOTAL_COLOR


@dataclass(frozen=True)
class Theme:
    name: str
    plot_background: str
    plot_text: str  # axis labels, titles and legends
    axis_line: str
    grid: QColor
    total_line: str  # the total / whole-step line, darkest on light, lightest on dark
    hover_line: str


LIGHT = Theme("light", "#FFFFFF", "#333333", "#999999", QColor(0, 0, 0, 30), TOTAL_COLOR,
              HOVER_COLOR)
DARK = Theme("dark", "#1E1F22", "#DDDDDD", "#777777", QColor(255, 255, 255, 36), "#EEEEEE",
             "#BBBBBB")
THEMES = {t.name: t for t in (LIGHT, DARK)}


MIN_LINE_CONTRAST = 3.0  # WCAG's minimum for graphics a user must make out


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two #RRGGBB colours (1 to 21)."""
    def luminance(c: str) -> float:
        def channel(v: float) -> float:
            return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
        r, g, b = (int(c[i : i + 2], 16) / 255 for i in (1, 3, 5))
        return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def readable(color: str, background: str) -> str:
    """`color`, or the nearest mix of it towards white (on dark) or black (on light) that
    stands out from `background` by MIN_LINE_CONTRAST: a line keeps its hue in both themes."""
    toward = 255 if contrast(background, "#000000") < contrast(background, "#FFFFFF") else 0
    rgb = [int(color[i : i + 2], 16) for i in (1, 3, 5)]
    out = color.upper()
    for step in range(21):
        k = step / 20
        out = "#" + "".join(f"{round(c + (toward - c) * k):02X}" for c in rgb)
        if contrast(out, background) >= MIN_LINE_CONTRAST:
            break
    return out


def theme_for(scheme: Qt.ColorScheme) -> Theme:
    """The theme for a colour scheme (light where the system says nothing)."""
    return DARK if scheme == Qt.ColorScheme.Dark else LIGHT


def system_theme() -> Theme:
    """The theme the system's colour scheme asks for now."""
    app = QApplication.instance()
    return theme_for(app.styleHints().colorScheme()) if app is not None else LIGHT


def _palette(theme: Theme) -> QPalette:
    if theme is LIGHT:
        return QApplication.style().standardPalette()
    p = QPalette()
    colours = {
        QPalette.Window: "#2B2D30", QPalette.WindowText: "#DFE1E5", QPalette.Base: "#1E1F22",
        QPalette.AlternateBase: "#26282B", QPalette.ToolTipBase: "#3C3F41",
        QPalette.ToolTipText: "#DFE1E5", QPalette.Text: "#DFE1E5", QPalette.Button: "#3C3F41",
        QPalette.ButtonText: "#DFE1E5", QPalette.BrightText: "#FF6B6B",
        QPalette.Highlight: "#2F65CA", QPalette.HighlightedText: "#FFFFFF",
        QPalette.Link: "#6AA4FF", QPalette.PlaceholderText: "#8C8C8C",
    }
    for role, colour in colours.items():
        p.setColor(role, QColor(colour))
    for role in (QPalette.Text, QPalette.ButtonText, QPalette.WindowText):
        p.setColor(QPalette.Disabled, role, QColor("#7A7A7A"))
    return p


def apply_theme(theme: Theme, plots=()) -> None:
    """The application's palette, stylesheet and icon, and each plot's colours."""
    _applied[:] = [theme]
    app = QApplication.instance()
    app.setPalette(_palette(theme))
    app.setStyleSheet(resource_text(f"{theme.name}.qss"))
    app.setWindowIcon(app_icon())
    for plot in plots:
        plot.set_theme(theme)


_applied = [LIGHT]  # the theme apply_theme last set


def current_theme() -> Theme:
    return _applied[-1]
