"""View > Theme: System, Light or Dark, applied at once and remembered across launches."""

from __future__ import annotations

from memlens.app.app_settings import THEME_CHOICES, AppSettings
from memlens.app.theme import THEMES, Theme, system_theme
from memlens.app.window.choice_menu import ChoiceMenu

LABELS = {"system": "&System", "light": "&Light", "dark": "&Dark"}


def chosen_theme(choice: str) -> Theme:
    """The theme a View > Theme choice stands for ("system": the system's scheme now)."""
    return system_theme() if choice == "system" else THEMES[choice]


class ThemeMenu(ChoiceMenu):
    """Radio actions theme_<choice>_action; `apply(theme)` shows a theme (conventions')."""

    def __init__(self, window, settings: AppSettings, apply) -> None:
        self.settings = settings
        super().__init__(window, "theme", "T&heme", {c: LABELS[c] for c in THEME_CHOICES},
                         settings.theme(), self._remember_choice,
                         lambda choice: apply(chosen_theme(choice)))

    def _remember_choice(self, choice: str) -> None:
        self.settings.set_theme(choice)
        self.settings.sync()

    @property
    def follows_system(self) -> bool:
        return self.choice == "system"
