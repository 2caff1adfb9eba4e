"""View > Theme: System, Light or Dark, applied at once and remembered across launches."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QApplication

from memlens.app.app_settings import THEME_CHOICES, AppSettings
from memlens.app.theme import THEMES, Theme, apply_theme, system_theme, theme_for
from memlens.app.window.choice_menu import ChoiceMenu

LABELS = {"system": "&System", "light": "&Light", "dark": "&Dark"}


def chosen_theme(choice: str) -> Theme:
    """The theme a View > Theme choice stands for ("system": the system's scheme now)."""
    return system_theme() if choice == "system" else THEMES[choice]


class ThemeMenu(ChoiceMenu):
    """Radio actions theme_<choice>_action. A theme goes to the app, to `plots`' plots and
    to the snapshot view `snapshot_view()` returns (None: none made yet); "system" follows
    the system's colour scheme as it changes."""

    def __init__(self, parent, settings: AppSettings, plots,
                 snapshot_view: Callable[[], object]) -> None:
        self.settings, self._plots, self._snapshot_view = settings, plots, snapshot_view
        super().__init__(parent, "theme", "T&heme", {c: LABELS[c] for c in THEME_CHOICES},
                         settings.theme(), self._remember_choice,
                         lambda choice: self.apply(chosen_theme(choice)))
        QApplication.styleHints().colorSchemeChanged.connect(self._on_color_scheme_changed)
        self._following = True
        self.apply(chosen_theme(self.choice))

    def _remember_choice(self, choice: str) -> None:
        self.settings.set_theme(choice)
        self.settings.sync()

    @property
    def follows_system(self) -> bool:
        return self.choice == "system"

    def apply(self, theme: Theme) -> None:
        apply_theme(theme, self._plots.plots)
        view = self._snapshot_view()
        if view is not None:
            view.set_theme(theme)

    def _on_color_scheme_changed(self, scheme) -> None:
        if self.follows_system:
            self.apply(theme_for(scheme))

    def stop_following(self) -> None:
        """The window closed: its menu (alive until Python lets it go) no longer decides the
        app's theme when the system's scheme changes."""
        if self._following:
            self._following = False
            QApplication.styleHints().colorSchemeChanged.disconnect(
                self._on_color_scheme_changed)
