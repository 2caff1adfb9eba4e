"""View > Theme: applied at once, remembered across launches, the system's when chosen."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication

from memlens.app.app_settings import AppSettings
from memlens.app.theme import DARK, LIGHT, apply_theme, current_theme
from memlens.app.window.main_window import MainWindow
from tests.app.test_view_help_theme import action, run_to_end


def test_view_theme_applies_at_once_and_is_remembered(qtbot, window, settings_file):
    run_to_end(qtbot, window, steps=3)
    app = QApplication.instance()
    hints = QApplication.styleHints()
    again = None
    try:
        action(window, "theme_dark_action").trigger()
        assert current_theme() is DARK
        assert app.palette().color(QPalette.Window).lightness() < 80
        for plot in window.plots.plots:
            assert plot.backgroundBrush().color().name() == DARK.plot_background.lower()
        assert AppSettings.at(settings_file).theme() == "dark"  # QSettings holds the choice
        hints.colorSchemeChanged.emit(Qt.ColorScheme.Light)  # a chosen theme stays
        assert current_theme() is DARK

        window.close()
        apply_theme(LIGHT)
        again = MainWindow(runs_dir=None, settings=AppSettings.at(settings_file))
        qtbot.addWidget(again)
        assert action(again, "theme_dark_action").isChecked()
        assert current_theme() is DARK  # the next launch starts dark
        action(again, "theme_light_action").trigger()
        assert current_theme() is LIGHT
        assert app.palette().color(QPalette.Window).lightness() > 180
        action(again, "theme_system_action").trigger()
        hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)  # now the system decides
        assert current_theme() is DARK
    finally:
        apply_theme(LIGHT, again.plots.plots if again is not None else ())
