"""Light and dark themes: follow the system's colour scheme (QStyleHints.colorScheme) for
the widgets (palette + resources/<theme>.qss) and the plots (background, axes, lines)."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QDir, Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

from memlens.app.resources import app_icon, resource_folder, resource_text
from memlens.app.timeline.plot_style import (  # noqa: F401 - the themes' colour rules
    HOVER_COLOR,
    MIN_LINE_CONTRAST,
    TOTAL_COLOR,
    contrast,
    readable,
)


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
    # The stylesheets name their images as memlens:<file> (the resources folder).
    QDir.setSearchPaths("memlens", [resource_folder()])
    app = QApplication.instance()
    app.setPalette(_palette(theme))
    app.setStyleSheet(resource_text(f"{theme.name}.qss"))
    app.setWindowIcon(app_icon())
    for plot in plots:
        plot.set_theme(theme)


_applied = [LIGHT]  # the theme apply_theme last set


def current_theme() -> Theme:
    return _applied[-1]
